//! Luge's [`WasmRuntime`] on WAMR, the WebAssembly Micro Runtime.
//!
//! This crate narrows WAMR (through `wamrx-sys`, its fast interpreter built
//! from crates.io) to what Luge needs on the smallest edge devices:
//!
//! - **No native code.** WAMR's AoT compiler needs LLVM, which crates.io
//!   does not ship, so `precompile` validates the module by loading it and
//!   the artifact payload is the Wasm itself; `load_artifact` parses it once
//!   per module ([`module`]). The artifact header still names `wamr`, so an
//!   artifact of another engine is refused, and the reverse.
//! - **A fresh instance per invocation**, with WASI preview 1 arguments,
//!   environment, directories and stdio set per instance (WAMR's
//!   `InstantiationArgs2`), never on the shared module ([`sandbox`]).
//! - **Limits**: memory through the instance's maximum page count, the time
//!   limit by luge-core's watchdog thread, which terminates the instance
//!   (`wasm_runtime_terminate`, checked by the interpreter at branches). The interpreter cannot yield mid-run, so under Luge's
//!   scheduler a WAMR sandbox runs to completion on its worker, as DESIGN.md
//!   says engines that cannot yield do.
//! - **Read-only directories cannot be expressed** in WAMR's WASI
//!   preopens: a read-only grant is refused at init rather than silently
//!   granted read-write.
#![deny(missing_docs)]

mod ffi;
mod hostapi;
pub mod module;
pub mod sandbox;

use std::sync::Arc;

use luge_core::{
    Capabilities, DirMode, EngineError, EngineId, LoadedModule, Unsupported, VerifiedArtifact,
    WasmRuntime,
};

use luge_watchdog::Watchdog;

use crate::module::WamrModule;

/// Target triple this crate was built for.
pub const HOST_TARGET: &str = env!("LUGE_TARGET_TRIPLE");
/// WAMR version linked in (the one vendored by wamrx-sys).
pub const WAMR_VERSION: &str = "2.4.3";

/// Settings of the WAMR engine.
#[derive(Debug, Clone)]
pub struct WamrConfig {
    /// Interpreter stack per instance. 256 KiB: deep enough for recursive
    /// functions such as a naive Fibonacci, small next to a memory limit.
    pub stack_bytes: u32,
    /// Target named in artifact headers (default: this host). The payload
    /// is portable Wasm, so precompiling for a Pi on x86 only relabels it.
    pub target: Option<String>,
}

impl Default for WamrConfig {
    fn default() -> Self {
        Self {
            stack_bytes: 256 << 10,
            target: None,
        }
    }
}

/// WAMR configured for Luge.
#[derive(Debug)]
pub struct WamrRuntime {
    id: EngineId,
    config: WamrConfig,
    watchdog: Arc<Watchdog>,
}

impl WamrRuntime {
    /// Initializes WAMR (once per process) and starts the watchdog.
    pub fn new(config: &WamrConfig) -> Result<Self, EngineError> {
        ffi::init_runtime().map_err(|e| EngineError::config("WAMR runtime", e))?;
        let watchdog = Watchdog::start("luge-wamr-watchdog")
            .map_err(|e| EngineError::config("watchdog thread", e))?;
        Ok(Self {
            id: EngineId {
                engine: "wamr".into(),
                version: WAMR_VERSION.into(),
                target: config
                    .target
                    .clone()
                    .unwrap_or_else(|| HOST_TARGET.to_owned()),
            },
            config: config.clone(),
            watchdog,
        })
    }
}

impl WasmRuntime for WamrRuntime {
    fn id(&self) -> &EngineId {
        &self.id
    }

    fn precompile(&self, wasm: &[u8]) -> Result<Vec<u8>, EngineError> {
        luge_core::runtime::refuse_component("wamr", wasm)?;
        // Loading is WAMR's validation; the loaded module is dropped and the
        // Wasm itself is the payload.
        WamrModule::load(wasm.to_vec(), &self.config, Arc::clone(&self.watchdog))
            .map_err(|e| EngineError::InvalidModule(e.into()))?;
        Ok(wasm.to_vec())
    }

    fn load_artifact(
        &self,
        artifact: VerifiedArtifact<'_>,
    ) -> Result<Arc<dyn LoadedModule>, EngineError> {
        let module = WamrModule::load(
            artifact.payload().to_vec(),
            &self.config,
            Arc::clone(&self.watchdog),
        )
        .map_err(|e| EngineError::BadArtifact(e.into()))?;
        Ok(Arc::new(module))
    }

    fn check_grants(&self, capabilities: &Capabilities) -> Result<(), EngineError> {
        match capabilities
            .dirs
            .iter()
            .find(|d| d.mode == DirMode::ReadOnly)
        {
            Some(dir) => Err(Unsupported::ReadOnlyDir {
                engine: "wamr",
                guest: dir.guest.clone(),
            }
            .into()),
            None => Ok(()),
        }
    }
}
