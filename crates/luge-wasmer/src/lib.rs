//! Luge's [`WasmRuntime`] on Wasmer.
//!
//! This crate narrows Wasmer (the `sys` backend with Cranelift, or
//! Singlepass as an option) and its WASI implementation, WASIX, to what Luge
//! needs:
//!
//! - **Native code ahead of time.** `precompile` compiles with the chosen
//!   compiler ([`WasmerCompiler`]) and serializes the module; `load_artifact` deserializes it without
//!   compiling (only ever an artifact whose MAC verified, as Wasmer's
//!   deserialization trusts its input). The artifact header names `wasmer`
//!   and Wasmer's version, so another engine's artifact is refused.
//! - **A fresh store and WASI environment per invocation** ([`sandbox`]):
//!   WASI preview 1 arguments, environment and stdio per sandbox, directory
//!   grants mounted one per grant with their read-only or read-write mode.
//!   Nothing else is visible.
//! - **Limits**: memory through engine tunables that cap each memory the
//!   sandbox creates ([`limits`]), the time limit by luge-core's watchdog,
//!   which interrupts the store from another thread (Wasmer's host
//!   interrupt, a signal checked when control is in Wasm code). Wasmer
//!   cannot suspend a running call, so under Luge's scheduler a Wasmer
//!   sandbox runs to completion on its worker, as DESIGN.md says engines
//!   that cannot yield do.
//!
//! Wasmer is held at 7.3: 7.4 pins a Cranelift that cannot be built beside
//! Wasmtime 48's in one binary.
#![deny(missing_docs)]

pub mod grants;
mod hostapi;
pub mod limits;
pub mod module;
pub mod sandbox;
pub mod stdio;

use std::str::FromStr;
use std::sync::Arc;

use luge_core::{
    Capabilities, EngineError, EngineId, LoadedModule, Unsupported, VerifiedArtifact, WasmRuntime,
};
use luge_watchdog::Watchdog;
use wasmer::sys::{
    CpuFeature, Cranelift, EngineBuilder, NativeEngineExt, Singlepass, Target, Triple,
};
use wasmer::{Engine, Module};
use wasmer_wasix::runtime::PluggableRuntime;
use wasmer_wasix::runtime::task_manager::tokio::TokioTaskManager;

use crate::limits::LimitingTunables;
use crate::module::WasmerModule;

/// Target triple this crate was built for.
pub const HOST_TARGET: &str = env!("LUGE_TARGET_TRIPLE");
/// Wasmer version linked in (pinned in Cargo.toml).
pub const WASMER_VERSION: &str = "7.3.0";

/// Which of Wasmer's compilers turns Wasm into native code.
///
/// Both produce the same kind of serialized module, so an artifact loads
/// whichever compiler the loading executor was started with; the choice
/// only matters where modules are compiled (precompile, or an init from
/// plain Wasm).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum WasmerCompiler {
    /// Cranelift (the default): optimized code, compile time grows with
    /// the module.
    #[default]
    Cranelift,
    /// Singlepass: compiles in one linear pass, faster than Cranelift,
    /// into slower code (docs/BENCHMARKS.md measures both). For cold starts
    /// from plain Wasm of short-lived functions.
    Singlepass,
}

/// Settings of the Wasmer engine.
#[derive(Debug, Clone, Default)]
pub struct WasmerConfig {
    /// Target to compile for (default: this host, with its CPU features).
    /// Cross-compiled artifacts assume only the target's baseline features.
    pub target: Option<String>,
    /// Compiler for modules compiled by this runtime (default: Cranelift).
    pub compiler: WasmerCompiler,
}

/// How this runtime builds a Wasmer engine: one per compilation and one
/// per loaded module, never one for all.
///
/// A Wasmer `Engine` keeps the code of every module compiled or
/// deserialized into it, with its unwind frames registered in the
/// process's unwinder, until the engine itself is dropped. One shared
/// engine therefore grew with every module ever loaded (memory no
/// module's drop returned) and made every trap slower (libgcc's frame
/// lookup walks every registered object under a global lock: after a few
/// thousand modules a trap took seconds, outside any time limit). An
/// engine per module is dropped with the module's last user and takes
/// its code and frames with it.
#[derive(Clone)]
pub(crate) struct EngineRecipe {
    compiler: WasmerCompiler,
    target: Target,
}

impl EngineRecipe {
    /// A fresh engine with Luge's tunables (memory limits and guards).
    pub(crate) fn engine(&self) -> Engine {
        let builder = match self.compiler {
            WasmerCompiler::Cranelift => EngineBuilder::new(Cranelift::default()),
            WasmerCompiler::Singlepass => EngineBuilder::new(Singlepass::default()),
        };
        let mut engine: Engine = builder
            .set_target(Some(self.target.clone()))
            .engine()
            .into();
        engine.set_tunables(LimitingTunables::for_target(&self.target));
        engine
    }
}

/// What every sandbox of this runtime shares.
pub(crate) struct Shared {
    recipe: EngineRecipe,
    /// WASIX's view of the host: task manager, engine, no network.
    pub(crate) wasi_runtime: Arc<dyn wasmer_wasix::Runtime + Send + Sync>,
    /// The tokio runtime WASIX's file and clock futures run on; sandboxes
    /// enter it on their worker thread.
    pub(crate) io: IoRuntime,
    pub(crate) watchdog: Arc<Watchdog>,
}

/// A tokio runtime that may be dropped anywhere, an async context included
/// (tokio refuses a plain drop there): it is shut down in the background.
pub(crate) struct IoRuntime(Option<tokio::runtime::Runtime>);

impl IoRuntime {
    /// Enters the runtime on this thread until the guard drops.
    pub(crate) fn enter(&self) -> Option<tokio::runtime::EnterGuard<'_>> {
        self.0.as_ref().map(|rt| rt.enter())
    }

    /// A handle to the runtime (present until drop).
    pub(crate) fn handle(&self) -> Option<&tokio::runtime::Handle> {
        self.0.as_ref().map(|rt| rt.handle())
    }
}

impl Drop for IoRuntime {
    fn drop(&mut self) {
        if let Some(rt) = self.0.take() {
            rt.shutdown_background();
        }
    }
}

/// Wasmer configured for Luge.
#[derive(derive_more::Debug)]
pub struct WasmerRuntime {
    id: EngineId,
    #[debug(skip)]
    shared: Arc<Shared>,
}

impl WasmerRuntime {
    /// Builds the engine, its I/O runtime and its watchdog.
    pub fn new(config: &WasmerConfig) -> Result<Self, EngineError> {
        let target_name = config
            .target
            .clone()
            .unwrap_or_else(|| HOST_TARGET.to_owned());
        let target = if target_name == HOST_TARGET {
            Target::default()
        } else {
            let triple = Triple::from_str(&target_name)
                .map_err(|e| EngineError::config(format!("target {target_name}"), e.to_string()))?;
            Target::new(triple, CpuFeature::set())
        };
        let recipe = EngineRecipe {
            compiler: config.compiler,
            target,
        };

        // One I/O thread: WASIX only parks timers and file futures on it;
        // the guest code runs on Luge's workers.
        let io = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .thread_name("luge-wasmer-io")
            .enable_all()
            .build()
            .map_err(|e| EngineError::config("I/O runtime", e))?;
        let tasks = TokioTaskManager::new(io.handle().clone());
        let mut wasi_runtime = PluggableRuntime::new(Arc::new(tasks));
        // WASIX compiles nothing for Luge (no dynamic linking: Luge strips
        // `dylink.0`, see `precompile`); its runtime still wants an engine.
        wasi_runtime.set_engine(recipe.engine());
        // Host API v1's calls, for modules that import `luge`.
        wasi_runtime.with_additional_imports(|module, store| Ok(hostapi::imports(module, store)));
        let watchdog = Watchdog::start("luge-wasmer-watchdog")
            .map_err(|e| EngineError::config("watchdog thread", e))?;
        Ok(Self {
            id: EngineId {
                engine: "wasmer".into(),
                version: WASMER_VERSION.into(),
                target: target_name,
            },
            shared: Arc::new(Shared {
                recipe,
                wasi_runtime: Arc::new(wasi_runtime),
                io: IoRuntime(Some(io)),
                watchdog,
            }),
        })
    }
}

/// The custom section that makes WASIX take a module for a shared library
/// and link it itself (its own memory, stack and library search).
const DYLINK_SECTION: &[u8] = b"dylink.0";

/// `wasm` without its `dylink.0` custom sections, so that it runs as the
/// plain module it is, as on the other engines (custom sections mean
/// nothing to them). Input that is not a well-formed core module is
/// returned unchanged, for the compiler to refuse.
fn strip_dylink(wasm: Vec<u8>) -> Vec<u8> {
    /// A LEB128 u32 at `at`: its value and the offset after it.
    fn leb(bytes: &[u8], mut at: usize) -> Option<(usize, usize)> {
        let mut value = 0usize;
        for shift in (0..35).step_by(7) {
            let byte = *bytes.get(at)?;
            at += 1;
            value |= usize::from(byte & 0x7f) << shift;
            if byte & 0x80 == 0 {
                return Some((value, at));
            }
        }
        None
    }
    /// The byte ranges of the `dylink.0` sections, or `None` if malformed.
    fn dylink_ranges(wasm: &[u8]) -> Option<Vec<std::ops::Range<usize>>> {
        if wasm.get(..8)? != b"\0asm\x01\0\0\0" {
            return None;
        }
        let mut ranges = Vec::new();
        let mut at = 8;
        while at < wasm.len() {
            let start = at;
            let id = wasm[at];
            let (size, body) = leb(wasm, at + 1)?;
            let end = body.checked_add(size).filter(|&end| end <= wasm.len())?;
            if id == 0 {
                let (name_len, name) = leb(wasm, body)?;
                let name_end = name.checked_add(name_len).filter(|&e| e <= end)?;
                if &wasm[name..name_end] == DYLINK_SECTION {
                    ranges.push(start..end);
                }
            }
            at = end;
        }
        Some(ranges)
    }
    match dylink_ranges(&wasm) {
        Some(ranges) if !ranges.is_empty() => {
            let mut kept = Vec::with_capacity(wasm.len());
            let mut from = 0;
            for range in ranges {
                kept.extend_from_slice(&wasm[from..range.start]);
                from = range.end;
            }
            kept.extend_from_slice(&wasm[from..]);
            kept
        }
        _ => wasm,
    }
}

/// Import namespaces a module may use: WASI preview 1 (and its older
/// name), as with the other engines.
const ALLOWED_IMPORTS: [&str; 2] = ["wasi_snapshot_preview1", "wasi_unstable"];

/// Refuses modules importing from anything but WASI preview 1 and Luge's
/// calls. WASIX would otherwise offer them its extensions (processes,
/// threads, sockets), which no grant covers.
fn check_imports(module: &Module) -> Result<(), EngineError> {
    use luge_core::hostapi::{IMPORT_MODULE, import};
    let provided = |module: &str, name: &str| {
        ALLOWED_IMPORTS.contains(&module) || (module == IMPORT_MODULE && import(name).is_some())
    };
    match module.imports().find(|i| !provided(i.module(), i.name())) {
        Some(import) => Err(Unsupported::Import {
            module: import.module().to_owned(),
            name: import.name().to_owned(),
            offered: "only WASI preview 1 (wasi_snapshot_preview1), luge::call_* and luge::state_* are provided",
        }
        .into()),
        None => Ok(()),
    }
}

impl WasmRuntime for WasmerRuntime {
    fn id(&self) -> &EngineId {
        &self.id
    }

    fn precompile(&self, wasm: &[u8]) -> Result<Vec<u8>, EngineError> {
        luge_core::runtime::refuse_component("wasmer", wasm)?;
        // Its start function runs under the time limit, not at
        // instantiation (see `luge_core::start`).
        let (wasm, _) = luge_core::start::defer_start(wasm.to_vec())
            .map_err(|e| EngineError::InvalidModule(e.into()))?;
        let wasm = strip_dylink(wasm);
        // A throwaway engine: the shared one would keep this code forever.
        let module = Module::new(&self.shared.recipe.engine(), &wasm)
            .map_err(|e| EngineError::InvalidModule(e.into()))?;
        check_imports(&module)?;
        let serialized = module
            .serialize()
            .map_err(|e| EngineError::from(Unsupported::Serialize(e.into())))?;
        Ok(serialized.to_vec())
    }

    /// A directory granted at `/` is refused: WASIX keeps `/` for its own
    /// virtual root, preopened at fd 3 before any grant, so the guest saw
    /// two preopens named `/` and took the first, the root, where nothing
    /// can be created (wasi-testsuite's filesystem tests failed this way).
    /// Grants at any other path resolve through wasi-libc as on every
    /// engine.
    fn check_grants(&self, capabilities: &Capabilities) -> Result<(), EngineError> {
        match capabilities
            .dirs
            .iter()
            .find(|d| grants::mount_point(&d.guest) == std::path::Path::new("/"))
        {
            Some(dir) => Err(Unsupported::DirAt {
                engine: "wasmer",
                guest: dir.guest.clone(),
                why: "WASIX keeps / for its own root",
            }
            .into()),
            None => Ok(()),
        }
    }

    fn load_artifact(
        &self,
        artifact: VerifiedArtifact<'_>,
    ) -> Result<Arc<dyn LoadedModule>, EngineError> {
        let payload = artifact.payload();
        // SAFETY: Wasmer trusts serialized modules. A `VerifiedArtifact` is
        // made only under the contract of its `unsafe` constructor (by
        // luge-registry's `artifact::open`, after the MAC verified under the
        // operator's key and the header named this engine, version and
        // target), so it is a module this engine serialized for this target.
        let engine = self.shared.recipe.engine();
        let module = unsafe { Module::deserialize(&engine, payload) }
            .map_err(|e| EngineError::BadArtifact(e.into()))?;
        Ok(Arc::new(WasmerModule::new(
            module,
            engine,
            payload.len(),
            Arc::clone(&self.shared),
        )))
    }
}
