//! Compile once per node: runwasi's `Compiler` for Luge. The first pod of
//! an image has its components compiled here, in the shim, before its
//! container starts; runwasi keeps the result in containerd's content
//! store, labelled with [`LugeCompiler::cache_key`], and hands it to every
//! later pod of the image instead of the Wasm.
//!
//! What it keeps is a Luge artifact sealed with the node's key (see
//! `luge_registry::artifact`): machine code is only ever loaded when this
//! node's shim made it. The key lives in a file only the node can read
//! (`LUGE_SHIM_KEY_FILE`, default [`DEFAULT_KEY_FILE`]), made on first use.
//! A pod's own environment or files never supply it: the shim sets it for
//! `luge serve` itself.

use std::path::PathBuf;
use std::sync::OnceLock;

use anyhow::Context as _;
use containerd_shim_wasm::sandbox::context::WasmLayer;
use containerd_shim_wasm::shim::Compiler;
use luge_registry::ModuleRegistry;
use luge_registry::artifact::ArtifactKey;

use crate::locked::WASM_MEDIA_TYPE;

/// Where the node's artifact key is kept unless `LUGE_SHIM_KEY_FILE`
/// says otherwise: beside containerd's own state, root's alone.
pub const DEFAULT_KEY_FILE: &str = "/var/lib/containerd-shim-luge/key";
/// The variable naming the key file (containerd's environment reaches its
/// shims).
pub const KEY_FILE_ENV: &str = "LUGE_SHIM_KEY_FILE";

/// Layer types that hold a component or module: Spin's, and runwasi's
/// defaults for plain Wasm images.
pub const WASM_LAYER_TYPES: &[&str] = &[
    WASM_MEDIA_TYPE,
    "application/vnd.bytecodealliance.wasm.component.layer.v0+wasm",
    "application/wasm",
];

/// The node's key: its secret (for `luge serve`, through `LUGE_KEY`) and
/// the key derived from it. Read when the shim starts ([`node_key`] from
/// `main`), before runwasi forks the process every container is later
/// forked from, so a container inherits it in memory and never reads it
/// from its own root.
pub struct NodeKey {
    secret: String,
    key: ArtifactKey,
}

static NODE_KEY: OnceLock<Result<NodeKey, String>> = OnceLock::new();

/// The node's key, read (or made) once per shim process.
pub fn node_key() -> Result<&'static NodeKey, &'static str> {
    NODE_KEY
        .get_or_init(|| load_key().map_err(|e| format!("{e:#}")))
        .as_ref()
        .map_err(String::as_str)
}

fn load_key() -> anyhow::Result<NodeKey> {
    let path = std::env::var_os(KEY_FILE_ENV)
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(DEFAULT_KEY_FILE));
    // Made 0600 with a random secret if missing.
    ArtifactKey::load_or_create(&path).with_context(|| format!("{}", path.display()))?;
    let secret = std::fs::read_to_string(&path)
        .with_context(|| format!("{}", path.display()))?
        .trim()
        .to_owned();
    if secret.contains('\0') {
        anyhow::bail!("{}: the key holds a NUL byte", path.display());
    }
    let key = ArtifactKey::from_secret(secret.as_bytes())?;
    Ok(NodeKey { secret, key })
}

impl NodeKey {
    /// The secret `luge serve` derives the same key from (`LUGE_KEY`).
    pub fn secret(&self) -> &str {
        &self.secret
    }
}

/// Compiles an image's Wasm layers to sealed artifacts.
pub struct LugeCompiler {
    registry: ModuleRegistry,
    cache_key: String,
}

impl LugeCompiler {
    /// A compiler for the engine `luge serve` runs in a container (the
    /// default, Wasmtime, with its default settings), sealing with the
    /// node's key.
    pub fn new() -> anyhow::Result<Self> {
        let key = node_key().map_err(|e| anyhow::anyhow!("the node's artifact key: {e}"))?;
        // Compiling only: no sandboxes, no address space reserved; an
        // artifact records the settings that matter and `luge serve`
        // refuses one made under others.
        let settings = luge_engines::EngineSettings::compile_only(None, false);
        let runtime = luge_engines::build(luge_engines::EngineKind::Wasmtime, &settings)?;
        // The label runwasi files compiled layers under: a new shim, engine
        // or key compiles afresh rather than offering what would be
        // refused. The key is named by a hash, never itself.
        let fingerprint =
            blake3::derive_key("luge shim cache key fingerprint", key.secret.as_bytes());
        let cache_key = format!(
            "{} {} {} {}",
            env!("CARGO_PKG_VERSION"),
            runtime.id(),
            runtime.settings(),
            &blake3::Hash::from(fingerprint).to_hex()[..16]
        );
        Ok(Self {
            // What each compile freed goes back to the node at once (the
            // shim lives as long as its pod).
            registry: ModuleRegistry::new(runtime, key.key.clone(), None)
                .with_after_compile(luge_executor::release_compile_memory),
            cache_key,
        })
    }
}

/// Whether `layer` holds Wasm this compiler turns into an artifact.
pub fn is_wasm(layer: &WasmLayer) -> bool {
    WASM_LAYER_TYPES.contains(&layer.config.media_type().to_string().as_str())
}

impl Compiler for LugeCompiler {
    fn cache_key(&self) -> impl std::hash::Hash {
        self.cache_key.clone()
    }

    /// One sealed artifact per Wasm layer; every other layer (the locked
    /// app, files, a component compiled already) as it is. runwasi marks
    /// an image compiled only once every layer it hands over has a
    /// compiled form, and compiles again on every start until then: the
    /// identity is that form for what needs no compiling.
    ///
    /// A layer that does not compile fails the whole call: runwasi then
    /// runs the original layers, and `luge serve` says why the module was
    /// refused in the container's log.
    async fn compile(&self, layers: &[WasmLayer]) -> anyhow::Result<Vec<Option<Vec<u8>>>> {
        layers
            .iter()
            .map(|layer| {
                if !is_wasm(layer) || layer.precompiled {
                    return Ok(Some(layer.layer.clone()));
                }
                let sealed = self
                    .registry
                    .compile_sealed(&layer.layer)
                    .with_context(|| format!("layer {}", layer.config.digest()))?;
                Ok(Some(sealed))
            })
            .collect()
    }
}
