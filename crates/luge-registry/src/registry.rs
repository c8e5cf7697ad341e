//! Compile once, share everywhere: modules by content hash.
//!
//! Every container whose code hashes the same shares one [`LoadedModule`];
//! the registry holds only weak references, so the module is freed when the
//! last container using it is destroyed. Plain Wasm is compiled once per
//! content hash and the sealed artifact kept in the cache directory, so a
//! restarted executor loads instead of compiling. Cached files are
//! authenticated like any other artifact: a file changed on disk is refused
//! and recompiled, never mapped.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Weak};

use crate::artifact::{self, ArtifactError, ArtifactKey};
use crate::code::{CodeError, ModuleCode};
use luge_core::runtime::{EngineError, LoadedModule, WasmRuntime};

/// Why a module could not be loaded.
#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    /// The code was not recognised.
    #[error(transparent)]
    Code(#[from] CodeError),
    /// An artifact was refused.
    #[error(transparent)]
    Artifact(#[from] ArtifactError),
    /// The engine refused the module.
    #[error(transparent)]
    Engine(#[from] EngineError),
    /// Over the compile budget: refused before any compiler saw it.
    #[error("the module is too costly to compile: {0}")]
    OverBudget(String),
    /// Its initialisation function failed when run to make its snapshot.
    #[error("pre-initialization failed: {0}")]
    Preinit(#[from] PreinitError),
    /// The module does not have the shape of a Luge function.
    #[error(transparent)]
    Abi(#[from] AbiError),
    /// The engine's compiler panicked on the module (an engine bug): the
    /// module is refused and the executor goes on.
    #[error("the engine's compiler failed on the module: {0}")]
    CompilerPanicked(String),
}

/// How a core module breaks the function ABI (a WASI preview 1 command),
/// found before any engine sees it so that every engine refuses it the
/// same way: without this, Wasmtime ran a module with no memory, WAMR
/// refused it at load and Wasmer failed it at instantiation.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum AbiError {
    /// No linear memory exported as `memory`, which WASI needs to pass
    /// arguments, environment, stdin and stdout.
    #[error("the module exports no linear memory named `memory` (a WASI command must)")]
    NoMemory,
    /// An imported function returns more than one value. No host function
    /// does, so it could never link; refused before compiling because
    /// Wasmer's single-pass compiler panics on it.
    #[error(
        "the module imports `{module}.{name}` returning {results} values; no host function returns more than one"
    )]
    MultiValueImport {
        /// The import's module.
        module: String,
        /// The import's name.
        name: String,
        /// How many results it declares.
        results: usize,
    },
}

/// Checks a core module's imports and exports against the function ABI
/// (see [`AbiError`]). Components, and input that does not parse, are left
/// to the engine.
pub fn check_abi(wasm: &[u8]) -> Result<(), AbiError> {
    let mut types: Vec<usize> = Vec::new();
    let mut memory = false;
    for payload in wasmparser::Parser::new(0).parse_all(wasm) {
        let Ok(payload) = payload else {
            return Ok(());
        };
        match payload {
            wasmparser::Payload::Version {
                encoding: wasmparser::Encoding::Component,
                ..
            } => return Ok(()),
            wasmparser::Payload::TypeSection(reader) => {
                for group in reader {
                    let Ok(group) = group else { return Ok(()) };
                    for ty in group.types() {
                        types.push(match &ty.composite_type.inner {
                            wasmparser::CompositeInnerType::Func(f) => f.results().len(),
                            _ => 0,
                        });
                    }
                }
            }
            wasmparser::Payload::ImportSection(reader) => {
                for import in reader.into_imports() {
                    let Ok(import) = import else { return Ok(()) };
                    if let wasmparser::TypeRef::Func(index) = import.ty {
                        let results = types.get(index as usize).copied().unwrap_or(0);
                        if results > 1 {
                            return Err(AbiError::MultiValueImport {
                                module: import.module.to_string(),
                                name: import.name.to_string(),
                                results,
                            });
                        }
                    }
                }
            }
            wasmparser::Payload::ExportSection(reader) => {
                for export in reader {
                    let Ok(export) = export else { return Ok(()) };
                    memory |=
                        export.name == "memory" && export.kind == wasmparser::ExternalKind::Memory;
                }
            }
            _ => {}
        }
    }
    if memory {
        Ok(())
    } else {
        Err(AbiError::NoMemory)
    }
}

/// Why an initialisation gave no snapshot.
#[derive(Debug, thiserror::Error)]
pub enum PreinitError {
    /// Metadata named an initialisation export the module lacks.
    #[error("the module exports no function `{0}` to initialise with (core modules only)")]
    NoSuchExport(String),
    /// The initialisation exited with a status.
    #[error("`{function}` exited with status {status}{}", stderr_note(.stderr))]
    Exited {
        /// The export.
        function: String,
        /// Its exit status.
        status: i32,
        /// What it wrote to stderr (bounded).
        stderr: String,
    },
    /// It ran past its time limit.
    #[error("`{function}` ran past its time limit of {} ms{}", .timeout.as_millis(), stderr_note(.stderr))]
    TimedOut {
        /// The export.
        function: String,
        /// Its limit.
        timeout: std::time::Duration,
        /// What it wrote to stderr (bounded).
        stderr: String,
    },
    /// It trapped, or failed otherwise.
    #[error("`{function}` failed: {reason}{}", stderr_note(.stderr))]
    Failed {
        /// The export.
        function: String,
        /// The engine's account of it.
        reason: String,
        /// What it wrote to stderr (bounded).
        stderr: String,
    },
    /// The snapshotter could not do its own part.
    #[error("{stage}: {reason}")]
    Snapshotter {
        /// What it was doing: instrumenting, compiling, linking, granting
        /// a directory, snapshotting.
        stage: &'static str,
        /// The engine's account of it.
        reason: String,
    },
    /// The snapshotter's thread panicked.
    #[error("the initialisation panicked the snapshotter")]
    Panicked,
}

fn stderr_note(stderr: &str) -> String {
    if stderr.is_empty() {
        String::new()
    } else {
        format!(" (stderr: {stderr})")
    }
}

/// Pre-initialization (Faasm's Proto-Faaslets, Wizer): runs a module's
/// initialisation function once and returns a module whose memory and
/// globals start where the initialisation left them. The registry applies
/// it wherever plain Wasm is compiled, before the engine sees the code.
pub trait Preinitializer: Send + Sync {
    /// Whether `wasm` has something to initialise under `init` (it exports
    /// the initialisation function): a quick scan, before any compile.
    fn applies(&self, wasm: &[u8], init: Option<&Init>) -> bool;

    /// The snapshot of `wasm`, or `None` when it exports no initialisation
    /// function (nothing to do); an error is the initialisation's failure,
    /// for the uploader. `init` is the function's own initialisation (its
    /// export name, limits and grants); `None`: the default export under
    /// the operator's default limits, with no grants.
    fn preinitialize(
        &self,
        wasm: &[u8],
        init: Option<&Init>,
    ) -> Result<Option<Vec<u8>>, PreinitError>;
}

/// How one function's initialisation runs when its module is snapshotted:
/// which export, and under the function's own limits and grants, so an
/// initialisation can do no more than an invocation of the same function.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Init {
    /// The export to run (`wizer.initialize` by default).
    pub function: String,
    /// Time limit of the initialisation.
    pub timeout: std::time::Duration,
    /// Memory limit of the initialisation.
    pub memory_bytes: u64,
    /// Environment (the function's, as an invocation sees it).
    pub env: Vec<(String, String)>,
    /// `argv[1..]`.
    pub args: Vec<String>,
    /// Directories (the function's grants).
    pub dirs: Vec<luge_core::DirGrant>,
}

/// The initialisation export Wizer looks for when none is named.
pub const DEFAULT_INIT_FUNCTION: &str = "wizer.initialize";

impl Init {
    /// `action`'s initialisation: export `function` (default
    /// [`DEFAULT_INIT_FUNCTION`]) under its limits and grants.
    pub fn for_action(action: &luge_core::Action, function: Option<&str>) -> Self {
        Self {
            function: function.unwrap_or(DEFAULT_INIT_FUNCTION).to_owned(),
            timeout: action.limits.timeout,
            memory_bytes: action.limits.memory_bytes,
            env: action.env.clone(),
            args: action.capabilities.args.clone(),
            dirs: action.capabilities.dirs.clone(),
        }
    }

    /// What makes two initialisations of the same code differ, for the
    /// content id of their snapshot.
    fn identity(&self) -> String {
        let dirs: Vec<String> = self
            .dirs
            .iter()
            .map(|d| format!("{}={}:{:?}", d.path().display(), d.guest, d.mode))
            .collect();
        format!(
            "init {:?} timeout {:?} memory {} env {:?} args {:?} dirs {:?}",
            self.function, self.timeout, self.memory_bytes, self.env, self.args, dirs
        )
    }
}

/// Functions a module may define. Compile time and memory grow with it: a
/// 1.5 MB module of 400,000 empty functions once took 30 s and 2.2 GB, and
/// 100,000 take 7 s and 590 MB on a 2-core machine, so this bound keeps
/// the worst compile near 3.5 s and 300 MB. Real programs stay below it
/// (a whole CPython is some tens of thousands).
pub const MAX_FUNCTIONS: u32 = 50_000;
/// Bytes of code in one function body: compilers are superlinear in a
/// function's size, so one huge body costs more than many small ones.
pub const MAX_FUNCTION_BODY_BYTES: usize = 4 << 20;

/// Checks `wasm`'s shape against the compile budget, reading only section
/// headers and function sizes (no validation, no compilation).
/// Malformed input is left for the engine to report.
pub fn check_compile_budget(wasm: &[u8]) -> Result<(), LoadError> {
    let over = |what: String| Err(LoadError::OverBudget(what));
    for payload in wasmparser::Parser::new(0).parse_all(wasm) {
        let Ok(payload) = payload else {
            return Ok(());
        };
        match payload {
            wasmparser::Payload::CodeSectionStart { count, .. } if count > MAX_FUNCTIONS => {
                return over(format!(
                    "{count} functions, more than the {MAX_FUNCTIONS} allowed"
                ));
            }
            wasmparser::Payload::CodeSectionEntry(body)
                if body.range().len() > MAX_FUNCTION_BODY_BYTES =>
            {
                return over(format!(
                    "a function of {} bytes, more than the {MAX_FUNCTION_BODY_BYTES} allowed",
                    body.range().len()
                ));
            }
            _ => {}
        }
    }
    Ok(())
}

/// The first line of a panic's message, bounded.
fn panic_text(panic: &(dyn std::any::Any + Send)) -> String {
    let text = panic
        .downcast_ref::<&str>()
        .copied()
        .or_else(|| panic.downcast_ref::<String>().map(String::as_str))
        .unwrap_or("no message");
    let line = text.lines().next().unwrap_or_default();
    line.chars().take(200).collect()
}

/// Counters of what the registry did, for metrics and tests.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RegistryStats {
    /// Wasm modules compiled.
    pub compiles: u64,
    /// Loads served from the on-disk cache.
    pub disk_hits: u64,
    /// Loads served by an already loaded module.
    pub shared_hits: u64,
    /// Modules loaded from memory or disk (cold starts of a module).
    pub loads: u64,
}

/// Sealed artifacts from this size on have their MAC checked on a thread
/// of their own while the engine stages the payload (see
/// `ModuleRegistry::open_and_load`). Below it, the check takes less time
/// than starting a thread is worth (a 1 MiB artifact is checked in about
/// 0.2 ms, a thread starts in about 0.03).
pub const OVERLAP_AT: usize = 1 << 20;

/// Whether an artifact being opened may be shared with a module already
/// loaded from it.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Share {
    /// Yes: loaded modules are shared by content id.
    Loaded,
    /// No: the caller shares (or caches) what is loaded itself.
    No,
}

/// An opened artifact.
enum Opened {
    /// The module already loaded from it.
    Shared(Arc<dyn LoadedModule>),
    /// Loaded now, with its content id.
    Loaded(blake3::Hash, Arc<dyn LoadedModule>),
}

impl Opened {
    fn module(self) -> Arc<dyn LoadedModule> {
        match self {
            Self::Shared(module) | Self::Loaded(_, module) => module,
        }
    }
}

/// Loads modules for one engine, sharing and caching them.
pub struct ModuleRegistry {
    runtime: Arc<dyn WasmRuntime>,
    key: ArtifactKey,
    cache_dir: Option<PathBuf>,
    loaded: Mutex<HashMap<blake3::Hash, Weak<dyn LoadedModule>>>,
    compiling: Mutex<()>,
    preinit: Option<Arc<dyn Preinitializer>>,
    after_compile: Option<fn()>,
    compiles: AtomicU64,
    disk_hits: AtomicU64,
    shared_hits: AtomicU64,
    loads: AtomicU64,
}

impl std::fmt::Debug for ModuleRegistry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ModuleRegistry")
            .field("engine", self.runtime.id())
            .field("cache_dir", &self.cache_dir)
            .finish_non_exhaustive()
    }
}

impl ModuleRegistry {
    /// A registry over `runtime`, authenticating with `key`, caching compiled
    /// Wasm in `cache_dir` when given.
    pub fn new(
        runtime: Arc<dyn WasmRuntime>,
        key: ArtifactKey,
        cache_dir: Option<PathBuf>,
    ) -> Self {
        Self {
            runtime,
            key,
            cache_dir,
            loaded: Mutex::new(HashMap::new()),
            compiling: Mutex::new(()),
            preinit: None,
            // Nothing by default: what a compile allocates is the
            // allocator's business, and most embedders' allocator gives
            // freed memory back on its own.
            after_compile: None,
            compiles: AtomicU64::new(0),
            disk_hits: AtomicU64::new(0),
            shared_hits: AtomicU64::new(0),
            loads: AtomicU64::new(0),
        }
    }

    /// Pre-initializes plain Wasm with `preinit` before compiling it.
    pub fn with_preinitializer(mut self, preinit: Arc<dyn Preinitializer>) -> Self {
        self.preinit = Some(preinit);
        self
    }

    /// Runs `hook` on the compiling thread after each compile, whether it
    /// succeeded or not, once the next compile may start: for an
    /// allocator that keeps what a thread freed until that thread
    /// allocates again (mimalloc), to give back what the compile freed
    /// (about 30 MB for a Spin app's component). Loads that compile
    /// nothing (a shared module, a cached artifact, a sealed one) do not
    /// run it.
    pub fn with_after_compile(mut self, hook: fn()) -> Self {
        self.after_compile = Some(hook);
        self
    }

    /// The engine behind this registry.
    pub fn runtime(&self) -> &Arc<dyn WasmRuntime> {
        &self.runtime
    }

    /// Counters so far.
    pub fn stats(&self) -> RegistryStats {
        RegistryStats {
            compiles: self.compiles.load(Ordering::Relaxed),
            disk_hits: self.disk_hits.load(Ordering::Relaxed),
            shared_hits: self.shared_hits.load(Ordering::Relaxed),
            loads: self.loads.load(Ordering::Relaxed),
        }
    }

    /// Modules currently loaded (held by at least one user).
    pub fn live_modules(&self) -> usize {
        self.loaded_map()
            .values()
            .filter(|m| m.strong_count() > 0)
            .count()
    }

    /// Engine code bytes of the modules currently loaded.
    pub fn live_code_bytes(&self) -> usize {
        self.loaded_map()
            .values()
            .filter_map(Weak::upgrade)
            .map(|m| m.code_size())
            .sum()
    }

    fn loaded_map(
        &self,
    ) -> std::sync::MutexGuard<'_, HashMap<blake3::Hash, Weak<dyn LoadedModule>>> {
        // A panic while holding this lock cannot leave the map inconsistent
        // (each operation is a single insert/lookup), so poisoning is ignored.
        self.loaded.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Loads `code`, reusing a loaded module with the same content hash.
    ///
    /// Two concurrent first loads of the same code may both compile; the
    /// second to finish is shared from then on. That trades a rare duplicate
    /// compile for never holding a lock across compilation.
    ///
    /// Wasm is identified by its BLAKE3 hash. An artifact is authenticated
    /// first, every time, and identified by its MAC, which already is a hash
    /// of its content: one pass over the bytes instead of two.
    pub fn load(&self, code: &ModuleCode) -> Result<Arc<dyn LoadedModule>, LoadError> {
        self.load_with(code, None)
    }

    /// [`ModuleRegistry::load`] for a function with its own initialisation
    /// (see [`Init`]): plain Wasm that exports the initialisation function
    /// is snapshotted with it, and identified by its code and `init`
    /// together, so functions that initialise the same code differently
    /// get snapshots of their own. A snapshot taken with directory grants
    /// reflects their files as they were: it is shared while loaded, never
    /// kept in the on-disk cache.
    pub fn load_with(
        &self,
        code: &ModuleCode,
        init: Option<&Init>,
    ) -> Result<Arc<dyn LoadedModule>, LoadError> {
        let module = match code {
            ModuleCode::Artifact(bytes) => match self.open_and_load(bytes, Share::Loaded)? {
                Opened::Shared(module) => return Ok(module),
                Opened::Loaded(id, module) => (id, module),
            },
            ModuleCode::Wasm(wasm) => {
                self.check_init(wasm, init)?;
                let init = init.filter(|init| {
                    self.preinit
                        .as_ref()
                        .is_some_and(|p| p.applies(wasm, Some(init)))
                });
                let id = match init {
                    None => blake3::hash(wasm),
                    Some(init) => {
                        let mut hasher = blake3::Hasher::new();
                        hasher.update(wasm);
                        hasher.update(b"\0luge-init\0");
                        hasher.update(init.identity().as_bytes());
                        hasher.finalize()
                    }
                };
                if let Some(shared) = self.shared(&id) {
                    return Ok(shared);
                }
                (id, self.load_wasm(&id, wasm, init)?)
            }
        };
        let (id, module) = module;
        self.loads.fetch_add(1, Ordering::Relaxed);
        let mut map = self.loaded_map();
        map.retain(|_, m| m.strong_count() > 0);
        map.insert(id, Arc::downgrade(&module));
        Ok(module)
    }

    /// The loaded module with content id `id`, if one is still in use.
    fn shared(&self, id: &blake3::Hash) -> Option<Arc<dyn LoadedModule>> {
        let module = self.loaded_map().get(id).and_then(Weak::upgrade)?;
        self.shared_hits.fetch_add(1, Ordering::Relaxed);
        Some(module)
    }

    /// Compiles `wasm` to a sealed artifact for this registry's engine, the
    /// form kept on disk and shipped by the precompiler.
    ///
    /// Compiles are budgeted: the module's shape is checked first
    /// ([`check_compile_budget`]), and one compile runs at a time (each
    /// already uses every core), so a flood of uploads costs one compile's
    /// memory, not one per request.
    pub fn compile_sealed(&self, wasm: &[u8]) -> Result<Vec<u8>, LoadError> {
        self.compile_sealed_with(wasm, None)
    }

    /// [`ModuleRegistry::compile_sealed`] with a function's own
    /// initialisation (see [`Init`]).
    pub fn compile_sealed_with(
        &self,
        wasm: &[u8],
        init: Option<&Init>,
    ) -> Result<Vec<u8>, LoadError> {
        check_compile_budget(wasm)?;
        check_abi(wasm)?;
        self.check_init(wasm, init)?;
        let compiled = {
            // One at a time too: an initialisation runs up to its time
            // limit, in memory up to its memory limit.
            let _one_at_a_time = self.compiling.lock().unwrap_or_else(|e| e.into_inner());
            self.initialize_and_compile(wasm, init)
        };
        if let Some(hook) = self.after_compile {
            hook();
        }
        let payload = compiled?;
        self.compiles.fetch_add(1, Ordering::Relaxed);
        Ok(artifact::seal(
            &self.key,
            self.runtime.id(),
            Some(&self.runtime.settings()),
            &payload,
        ))
    }

    /// Initialises `wasm` (with a preinitializer) and compiles the result
    /// for this registry's engine: the payload of a sealed artifact. The
    /// caller holds the compile lock.
    fn initialize_and_compile(
        &self,
        wasm: &[u8],
        init: Option<&Init>,
    ) -> Result<Vec<u8>, LoadError> {
        let snapshot = match &self.preinit {
            Some(preinit) => preinit.preinitialize(wasm, init)?,
            None => None,
        };
        let code = snapshot.as_deref().unwrap_or(wasm);
        // An engine's compiler that panics on some input is an engine bug
        // a tenant can reach with an upload: it costs that upload, never
        // the executor. (Nothing is left half-built: a compile owns all it
        // allocates.)
        let compiled = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            self.runtime.precompile(code)
        }))
        .map_err(|panic| LoadError::CompilerPanicked(panic_text(panic.as_ref())))??;
        Ok(compiled)
    }

    /// Refuses an initialisation export named by metadata that `wasm`
    /// does not have: a misspelt name would otherwise silently leave the
    /// function uninitialised. (The default name is optional: most modules
    /// have nothing to initialise.)
    fn check_init(&self, wasm: &[u8], init: Option<&Init>) -> Result<(), LoadError> {
        match (&self.preinit, init) {
            (Some(preinit), Some(init))
                if init.function != DEFAULT_INIT_FUNCTION && !preinit.applies(wasm, Some(init)) =>
            {
                Err(LoadError::Preinit(PreinitError::NoSuchExport(
                    init.function.clone(),
                )))
            }
            _ => Ok(()),
        }
    }

    fn load_wasm(
        &self,
        hash: &blake3::Hash,
        wasm: &[u8],
        init: Option<&Init>,
    ) -> Result<Arc<dyn LoadedModule>, LoadError> {
        // Files read through a grant may change: such a snapshot is not
        // kept across restarts.
        let cached = if init.is_some_and(|init| !init.dirs.is_empty()) {
            None
        } else {
            self.cache_path(hash)
        };
        if let Some(path) = &cached
            && let Ok(bytes) = std::fs::read(path)
        {
            // A cached artifact the engine refuses (made under other
            // settings) is compiled again, never an error: the cache is an
            // optimisation.
            match self.open_and_load(&bytes, Share::No) {
                Ok(opened) => {
                    let module = opened.module();
                    self.disk_hits.fetch_add(1, Ordering::Relaxed);
                    return Ok(module);
                }
                Err(e) => {
                    tracing::warn!(path = %path.display(), error = %e, "ignoring cached artifact")
                }
            }
        }
        let sealed = self.compile_sealed_with(wasm, init)?;
        if let Some(path) = &cached
            && let Err(e) = write_atomically(path, &sealed)
        {
            tracing::warn!(path = %path.display(), error = %e, "could not cache compiled module");
        }
        Ok(self.open_and_load(&sealed, Share::No)?.module())
    }

    /// Authenticates the sealed artifact `bytes` and loads it, or, with
    /// [`Share::Loaded`], shares the module already loaded from it.
    ///
    /// An artifact of [`OVERLAP_AT`] or more has its MAC checked on a
    /// thread of its own while the engine stages its payload on this one
    /// ([`WasmRuntime::stage`]: Wasmtime writes it into the sealed file it
    /// maps the code from), so a cold start waits for the longer of the
    /// two, not both: a Python interpreter's 35.6 MB artifact is checked
    /// in about 7 ms and written in about 14. Nothing staged is used
    /// unless the MAC checks, and an artifact that claims the id of a
    /// module already loaded (a second `/init` of the same code) is not
    /// staged at all, nor is one for an engine that stages nothing (Wasmer,
    /// WAMR). Where no thread can be had (all [`crate::MAX_HELPER_THREADS`]
    /// taken, or the system refuses one), both run here in turn.
    fn open_and_load(&self, bytes: &[u8], share: Share) -> Result<Opened, LoadError> {
        let settings = self.runtime.settings();
        let open = || artifact::open(&self.key, bytes, self.runtime.id(), Some(&settings));
        let probably_loaded = || {
            share == Share::Loaded
                && artifact::claimed_id(bytes)
                    .is_some_and(|id| self.is_loaded(&blake3::Hash::from_bytes(id)))
        };
        let (verified, staged) = match artifact::unverified_payload(bytes) {
            Some(payload)
                if bytes.len() >= OVERLAP_AT && self.runtime.stages() && !probably_loaded() =>
            {
                // BLAKE3 keeps a few hundred bytes of state.
                let beside = crate::helpers::beside("luge-artifact-mac", 256 << 10, open, || {
                    self.runtime.stage(payload)
                });
                let Some((checked, staged)) = beside else {
                    // Every helper thread is taken: checked here, then
                    // loaded as without staging.
                    return self.load_opened(open()?, None, share);
                };
                // A check that could not start, or died, is run here.
                (checked.unwrap_or_else(open), staged)
            }
            _ => (open(), None),
        };
        self.load_opened(verified?, staged, share)
    }

    /// Loads the verified artifact (with what was staged of it), or, with
    /// [`Share::Loaded`], shares the module already loaded from it.
    fn load_opened(
        &self,
        verified: luge_core::VerifiedArtifact<'_>,
        staged: Option<luge_core::StagedPayload<'_>>,
        share: Share,
    ) -> Result<Opened, LoadError> {
        let id = blake3::Hash::from_bytes(verified.content_id());
        if share == Share::Loaded
            && let Some(shared) = self.shared(&id)
        {
            return Ok(Opened::Shared(shared));
        }
        let module = match staged {
            Some(staged) => self.runtime.load_staged(verified, staged)?,
            None => self.runtime.load_artifact(verified)?,
        };
        Ok(Opened::Loaded(id, module))
    }

    /// Whether a module with content id `id` is loaded and in use (without
    /// counting a shared hit).
    fn is_loaded(&self, id: &blake3::Hash) -> bool {
        self.loaded_map()
            .get(id)
            .is_some_and(|module| module.strong_count() > 0)
    }

    /// Cache file for a Wasm hash under this engine build.
    fn cache_path(&self, wasm_hash: &blake3::Hash) -> Option<PathBuf> {
        let dir = self.cache_dir.as_ref()?;
        let mut hasher = blake3::Hasher::new();
        hasher.update(wasm_hash.as_bytes());
        hasher.update(self.runtime.compatibility().as_bytes());
        Some(dir.join(format!("{}.luge", hasher.finalize().to_hex())))
    }
}

/// Writes `bytes` to `path` so that a reader sees the old file or the whole
/// new one, even across a crash: temp file in the same directory (named
/// `.{name}.*.tmp`), fsync, rename, fsync of the directory.
pub fn write_atomically(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    use std::io::Write;
    let dir = path.parent().unwrap_or(Path::new("."));
    std::fs::create_dir_all(dir)?;
    let file_name = path
        .file_name()
        .and_then(|n| n.to_str())
        .unwrap_or("artifact");
    // Unique per writer, so concurrent writers of one path never share a
    // temp file; the last rename wins and every version is whole.
    static WRITES: AtomicU64 = AtomicU64::new(0);
    let tmp = dir.join(format!(
        ".{file_name}.{}.{}.tmp",
        std::process::id(),
        WRITES.fetch_add(1, Ordering::Relaxed)
    ));
    let result = (|| {
        let mut file = std::fs::File::create(&tmp)?;
        file.write_all(bytes)?;
        file.sync_all()?;
        std::fs::rename(&tmp, path)?;
        std::fs::File::open(dir)?.sync_all()
    })();
    if result.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    result
}
