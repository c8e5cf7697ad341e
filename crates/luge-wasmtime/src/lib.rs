//! Luge's [`WasmRuntime`] on Wasmtime.
//!
//! This crate narrows Wasmtime to what a serverless executor needs:
//!
//! - **Ahead-of-time code only on the hot path.** `precompile` runs Cranelift
//!   (at upload or first sight of a module); `load_artifact` deserializes an
//!   authenticated `.cwasm` payload and pre-links it against WASI preview 1
//!   ([`wasmtime::InstancePre`]), so `/init` never compiles and a warm
//!   invocation only instantiates. A large payload's code is mapped from a
//!   sealed in-memory file rather than copied page by page (`image.rs`).
//! - **A fresh sandbox per invocation** from the pooling instance allocator
//!   with copy-on-write memory images: instantiation reuses a warm slot and
//!   maps the module's data image instead of copying it ([`config`]).
//! - **Limits that cost nearly nothing**: one epoch ticker per engine, never
//!   per request ([`epoch`]); memory through a store limiter ([`limits`]);
//!   fuel only when the operator turns it on.
//! - **WASI preview 1 with in-memory stdio**: stdin from the request, stdout
//!   and stderr captured up to a cap, env, argv and preopened directories from
//!   the action's grants ([`sandbox`]).
#![deny(missing_docs)]

pub mod component;
pub mod config;
mod driver;
pub mod epoch;
mod event_types;
pub mod events;
mod hostapi;
mod image;
pub mod limits;
mod p3;
mod reuse;

pub mod sandbox;
mod service;

use std::sync::{Arc, OnceLock};

use luge_core::{
    EngineError, EngineId, LoadedModule, StagedPayload, VerifiedArtifact, WasmRuntime,
};
use wasmtime::{Engine, Linker, Module};

pub use config::{ComponentAbi, WasmtimeConfig};
use epoch::EpochTicker;
use sandbox::{Linkers, SandboxModule, SandboxState};

/// Target triple this crate was built for.
pub const HOST_TARGET: &str = env!("LUGE_TARGET_TRIPLE");
/// Wasmtime version linked in.
pub const WASMTIME_VERSION: &str = env!("LUGE_WASMTIME_VERSION");

/// Wasmtime engines configured for Luge: a synchronous one for core
/// modules and most components, and a concurrent one for components that
/// use the component model's async ABI, made when the first is seen (see
/// [`ComponentAbi`]).
pub struct WasmtimeRuntime {
    /// The synchronous engine: core modules' (with `linkers`) and most
    /// components'.
    synchronous: AbiEngine,
    id: EngineId,
    linkers: Arc<Linkers>,
    fuel: bool,
    release_above: Option<usize>,
    /// Pool slots, when pooling.
    sandboxes: Option<u32>,
    /// What the concurrent engine is made from.
    config: WasmtimeConfig,
    /// The concurrent engine, or why it could not be made, once tried: it
    /// is tried once per runtime (`OnceLock` holds other callers while it
    /// is made), so a stream of uploads that need it cannot make the
    /// runtime size a pool again and again.
    concurrent: OnceLock<Result<AbiEngine, Arc<EngineError>>>,
}

/// One of the runtime's two engines (see [`ComponentAbi`]), with its
/// component linker of the slices it serves and its own epoch ticker. The
/// concurrent one's pool is its own, sized as the synchronous engine's
/// (the address space permitting), so only a runtime that meets a
/// component of the async ABI reserves it.
struct AbiEngine {
    engine: Engine,
    component_linker: wasmtime::component::Linker<component::ComponentState>,
    ticker: Arc<EpochTicker>,
}

impl AbiEngine {
    /// The engine of `abi` for `config`, its component linker and its
    /// ticker; with how many pool slots the engine got.
    fn new(config: &WasmtimeConfig, abi: ComponentAbi) -> Result<(Self, u32), EngineError> {
        let (engine, sandboxes) = sized_engine(config, abi)?;
        let component_linker = component::linker(&engine, abi)?;
        let ticker = EpochTicker::start(&engine, config.epoch_tick)
            .map_err(|e| EngineError::config("epoch ticker", e))?;
        let made = Self {
            engine,
            component_linker,
            ticker,
        };
        Ok((made, sandboxes))
    }
}

impl std::fmt::Debug for WasmtimeRuntime {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WasmtimeRuntime")
            .field("id", &self.id)
            .finish_non_exhaustive()
    }
}

/// Replaces Wasmtime's preview 1 `proc_exit`, which traps on a status of
/// 126 or more, with one that ends the run with any status: Luge keeps its
/// low 8 bits on every engine ([`Termination::exit`]).
///
/// [`Termination::exit`]: luge_core::Termination::exit
fn exit_with_any_status(linker: &mut Linker<SandboxState>) -> wasmtime::Result<()> {
    linker.allow_shadowing(true);
    let shadowed = linker
        .func_wrap(
            "wasi_snapshot_preview1",
            "proc_exit",
            |_: wasmtime::Caller<'_, SandboxState>, status: i32| -> wasmtime::Result<()> {
                Err(wasmtime::Error::new(wasmtime_wasi::I32Exit(status)))
            },
        )
        .map(|_| ());
    linker.allow_shadowing(false);
    shadowed
}

impl WasmtimeRuntime {
    /// Builds the engine, the WASI linker and the epoch ticker.
    pub fn new(config: &WasmtimeConfig) -> Result<Self, EngineError> {
        let (synchronous, sandboxes) = AbiEngine::new(config, ComponentAbi::Synchronous)?;
        let engine = &synchronous.engine;
        let mut sync = Linker::new(engine);
        wasmtime_wasi::p1::add_to_linker_sync(&mut sync, SandboxState::wasi)
            .map_err(|e| EngineError::config("WASI preview 1 linker", e))?;
        let mut asynchronous = Linker::new(engine);
        wasmtime_wasi::p1::add_to_linker_async(&mut asynchronous, SandboxState::wasi)
            .map_err(|e| EngineError::config("WASI preview 1 linker", e))?;
        hostapi::add_to_linker(&mut sync, false)
            .and_then(|()| hostapi::add_to_linker(&mut asynchronous, true))
            .and_then(|()| exit_with_any_status(&mut sync))
            .and_then(|()| exit_with_any_status(&mut asynchronous))
            .map_err(|e| EngineError::config("host API linker", e))?;
        Ok(Self {
            id: EngineId {
                engine: "wasmtime".into(),
                version: WASMTIME_VERSION.into(),
                target: config
                    .target
                    .clone()
                    .unwrap_or_else(|| HOST_TARGET.to_owned()),
            },
            synchronous,
            linkers: Arc::new(Linkers { sync, asynchronous }),
            fuel: config.fuel,
            release_above: config.release_above(),
            sandboxes: config.pooling.then_some(sandboxes),
            config: config.clone(),
            concurrent: OnceLock::new(),
        })
    }

    /// An engine of `abi` to compile one module with, dropped with it.
    ///
    /// Wasmtime keeps each compiling thread's Cranelift context (its
    /// buffers grown to the largest function compiled) for as long as the
    /// engine that compiled lives: 5 MB after the `wasi:http` hello, 13 MB
    /// after a Spin app's component. Compiled by a serving engine, that
    /// stayed in the process for good; compiled by this one, it goes with
    /// the compile (docs/BENCHMARKS-ARCHIVE.md, "Luge on Kubernetes"). The code is
    /// the same: the settings that shape it are the serving engine's, less
    /// the pool, which only places instances (and Wasmtime checks that an
    /// artifact's settings match the engine that loads it). Making an
    /// engine without a pool costs a few microseconds, against a compile's
    /// milliseconds at least.
    fn compile_engine(&self, abi: ComponentAbi) -> Result<Engine, EngineError> {
        let config = WasmtimeConfig {
            pooling: false,
            ..self.config.clone()
        };
        Engine::new(&config.to_wasmtime(abi)?)
            .map_err(|e| EngineError::config("the engine that compiles", e))
    }

    /// The concurrent engine, made now if this is the first time it is
    /// needed; a failure to make it is kept and returned to every caller.
    fn concurrent(&self) -> Result<&AbiEngine, EngineError> {
        self.concurrent
            .get_or_init(|| {
                let made = AbiEngine::new(&self.config, ComponentAbi::Concurrent).map(|(made, _)| {
                    tracing::debug!("made the engine for components of the async ABI");
                    made
                });
                if let Err(e) = &made {
                    tracing::warn!(
                        error = %luge_core::error_line(e),
                        "no engine for components of the async ABI (WASI 0.3, Spin 4): they are refused"
                    );
                }
                made.map_err(Arc::new)
            })
            .as_ref()
            .map_err(|e| EngineError::config("the engine for the async ABI", Arc::clone(e)))
    }
}

/// Builds the engine; with pooling, sized to the address space the process
/// really has.
///
/// The pool reserves one linear memory's address range per slot up front
/// (about 4 GiB each: Wasmtime elides bounds checks within it), so 1000
/// slots need about 4 TiB: plenty on x86-64 (128 TiB), too much for a
/// Raspberry Pi OS kernel (39-bit addresses, 512 GiB) or under `ulimit -v`.
/// Where the requested pool does not fit, the largest that does is found by
/// bisection (each try only reserves and releases address space), and 7/8
/// of it is used, leaving the rest to everything else the process maps.
/// Slots shrink in number, not in size: a smaller reservation would change
/// the compiled code and void every cached artifact.
fn sized_engine(config: &WasmtimeConfig, abi: ComponentAbi) -> Result<(Engine, u32), EngineError> {
    let build = |sandboxes: u32| {
        let config = WasmtimeConfig {
            max_sandboxes: sandboxes,
            ..config.clone()
        };
        Engine::new(&config.to_wasmtime(abi)?).map_err(|e| EngineError::config("the engine", e))
    };
    let requested = config.max_sandboxes;
    if let Some(sandboxes) = fit_under_rlimit(config, requested, &build) {
        let engine = build(sandboxes)?;
        tracing::warn!(
            requested,
            sandboxes,
            "RLIMIT_AS holds fewer pool slots than --max-sandboxes asks: pool sized to fit"
        );
        return Ok((engine, sandboxes));
    }
    let first = match build(requested) {
        Ok(engine) => return Ok((engine, requested)),
        Err(e) if !config.pooling || requested <= 1 => return Err(e),
        Err(e) => e,
    };
    // `fits` builds, `fails` does not.
    let (mut fits, mut fails) = (0, requested);
    while fails - fits > 1 {
        let mid = fits + (fails - fits) / 2;
        if build(mid).is_ok() {
            fits = mid;
        } else {
            fails = mid;
        }
    }
    if fits == 0 {
        return Err(EngineError::config(
            "the address space cannot hold even one sandbox of the pool; raise the address-space limit (ulimit -v)",
            first,
        ));
    }
    let sandboxes = (fits - fits / 8).max(1);
    let engine = build(sandboxes)?;
    tracing::warn!(
        requested,
        sandboxes,
        "the address space holds fewer pool slots than --max-sandboxes asks: pool sized to fit"
    );
    Ok((engine, sandboxes))
}

/// Under a finite `RLIMIT_AS` (`ulimit -v`), the pool size that leaves 1/8
/// of the free address space to everything else, when that is fewer slots
/// than `requested`; `None` when there is no such limit or the pool fits.
///
/// The size of a slot is measured, not guessed: the growth of the process's
/// mapped size (`VmSize`) with engines of one and two slots. Nothing here
/// maps the address space to its end: a process that does (a bisection
/// probe) leaves no room for its own threads and allocator meanwhile, which
/// qemu-user cannot survive and a busy process should not risk.
fn fit_under_rlimit(
    config: &WasmtimeConfig,
    requested: u32,
    build: &dyn Fn(u32) -> Result<Engine, EngineError>,
) -> Option<u32> {
    if !config.pooling || requested <= 2 {
        return None;
    }
    let limit = rustix::process::getrlimit(rustix::process::Resource::As).current?;
    let before = vm_size()?;
    let one = {
        let _engine = build(1).ok()?;
        vm_size()?.saturating_sub(before)
    };
    let two = {
        let _engine = build(2).ok()?;
        vm_size()?.saturating_sub(before)
    };
    let slot = two.checked_sub(one).filter(|&slot| slot > 0)?;
    let fixed = one.saturating_sub(slot);
    let free = limit.saturating_sub(before);
    let usable = (free - free / 8).saturating_sub(fixed);
    let fit = u32::try_from(usable / slot).unwrap_or(u32::MAX).max(1);
    (fit < requested).then_some(fit)
}

/// This process's mapped size in bytes (`VmSize` of /proc/self/status).
fn vm_size() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find_map(|l| l.strip_prefix("VmSize:"))?;
    let kib: u64 = line.trim().trim_end_matches("kB").trim().parse().ok()?;
    Some(kib * 1024)
}

impl WasmtimeRuntime {
    /// The synchronous Wasmtime engine (for embedders and tests; sandboxes
    /// never see it).
    pub fn engine(&self) -> &Engine {
        &self.synchronous.engine
    }

    /// The engine of components that use the async ABI, once one was
    /// compiled or loaded (for embedders and tests, as [`Self::engine`]).
    pub fn concurrent_engine(&self) -> Option<&Engine> {
        self.concurrent.get()?.as_ref().ok().map(|c| &c.engine)
    }
}

impl WasmRuntime for WasmtimeRuntime {
    fn id(&self) -> &EngineId {
        &self.id
    }

    fn compatibility(&self) -> String {
        use std::hash::{Hash, Hasher};
        // Fixed keys: the same settings give the same string in every run
        // of this build.
        let mut hasher = std::hash::DefaultHasher::new();
        self.synchronous
            .engine
            .precompile_compatibility_hash()
            .hash(&mut hasher);
        // The concurrent engine's settings are the synchronous one's with
        // the async ABI on, so the hash above stands for both; this names
        // the split, so artifacts of a build without it are made anew.
        "components of the async ABI on their own engine".hash(&mut hasher);
        format!(
            "{}, {}, settings {:016x}",
            self.id,
            self.settings(),
            hasher.finish()
        )
    }

    fn settings(&self) -> String {
        // The one setting an operator toggles that changes the code.
        if self.fuel { "fuel on" } else { "fuel off" }.to_owned()
    }

    fn capacity(&self) -> Option<usize> {
        self.sandboxes.map(|n| n as usize)
    }

    fn precompile(&self, wasm: &[u8]) -> Result<Vec<u8>, EngineError> {
        // A plain module built against a WIT world is compiled as the
        // component it describes (see `luge_componentize`).
        let componentized = match luge_componentize::componentize(wasm) {
            Some(component) => Some(component?),
            None => None,
        };
        let wasm = componentized.as_deref().unwrap_or(wasm);
        if component::is_component(wasm) {
            // The synchronous engine refuses (in validation, before it
            // compiles) a component that uses the async ABI; that one, and
            // a component that is no component at all, is compiled for the
            // concurrent engine, whose refusal is the one reported.
            if let Ok(payload) = self
                .compile_engine(ComponentAbi::Synchronous)?
                .precompile_component(wasm)
            {
                return Ok(payload);
            }
            // Made now, as it is to load what compiles: a host that cannot
            // make it refuses such components here.
            self.concurrent()?;
            return self
                .compile_engine(ComponentAbi::Concurrent)?
                .precompile_component(wasm)
                .map_err(|e| EngineError::InvalidModule(e.into()));
        }
        // Refused as on every engine, though Wasmtime itself runs start
        // functions (see `luge_core::start`).
        luge_core::start::refuse_reserved(wasm)
            .map_err(|e| EngineError::InvalidModule(e.into()))?;
        self.compile_engine(ComponentAbi::Synchronous)?
            .precompile_module(wasm)
            .map_err(|e| EngineError::InvalidModule(e.into()))
    }

    fn load_artifact(
        &self,
        artifact: VerifiedArtifact<'_>,
    ) -> Result<Arc<dyn LoadedModule>, EngineError> {
        self.load(artifact, None)
    }

    fn stages(&self) -> bool {
        true
    }

    fn stage<'a>(&self, payload: &'a [u8]) -> Option<StagedPayload<'a>> {
        let image = image::stage(payload)?;
        Some(StagedPayload::new(payload, Box::new(image)))
    }

    fn load_staged(
        &self,
        artifact: VerifiedArtifact<'_>,
        staged: StagedPayload<'_>,
    ) -> Result<Arc<dyn LoadedModule>, EngineError> {
        // Only an image of exactly this payload: anything else is dropped
        // (its file unmapped, its place given back) and one is made anew.
        let image = staged
            .prepared_for(artifact.payload())
            .and_then(|prepared| prepared.downcast::<image::Image>().ok())
            .map(|image| *image);
        self.load(artifact, image)
    }
}

impl WasmtimeRuntime {
    /// Loads `artifact`, its code mapped from `staged` (a sealed file of
    /// its payload) where given.
    fn load(
        &self,
        artifact: VerifiedArtifact<'_>,
        staged: Option<image::Image>,
    ) -> Result<Arc<dyn LoadedModule>, EngineError> {
        // SAFETY: `Module::deserialize` maps the bytes as executable code and
        // requires that they came from `Engine::precompile_module` of a
        // compatible engine. A `VerifiedArtifact` is made only under the
        // contract of its `unsafe` constructor (luge-registry: after its MAC
        // verified under the operator's key and its header named exactly
        // this engine, version, target and settings), so the payload is the
        // output of this operator's precompiler for this engine. Wasmtime
        // additionally checks its own version and configuration flags and
        // refuses a mismatch.
        let payload = artifact.payload();
        // Large payloads are mapped from a sealed file (see `image`); a
        // refusal on the way falls back to Wasmtime's private copy. The
        // image's lease stays with the loaded module. A `staged` file was
        // written from this very payload (`load_staged` checked its place
        // and length, borrowed all along) and sealed, while the MAC was
        // being checked: it holds the verified bytes.
        let copy_failed = |e: wasmtime::Error| EngineError::BadArtifact(e.into());
        if Engine::detect_precompiled(payload) == Some(wasmtime::Precompiled::Component) {
            use wasmtime::component::Component;
            // Compiled by one of the two engines (see `precompile`); the
            // other's Wasmtime refuses it at its header, before it maps
            // anything as code (the async ABI is among the settings it
            // checks), so the synchronous engine is tried first and the
            // concurrent one only with code the first refused.
            let either = |load: &dyn Fn(&Engine) -> wasmtime::Result<Component>| {
                let synchronous = &self.synchronous;
                load(&synchronous.engine)
                    .map(|c| (c, synchronous))
                    .or_else(|first| {
                        let concurrent = self.concurrent().map_err(|_| first)?;
                        load(&concurrent.engine).map(|c| (c, concurrent))
                    })
            };
            let ((component, engine), lease) = image::load(
                payload,
                staged,
                |file| {
                    let path = format!("/proc/self/fd/{}", std::os::fd::AsRawFd::as_raw_fd(&file));
                    // SAFETY: as at the top of this function, the payload
                    // is this operator's `Engine::precompile_component`
                    // output for this runtime; the sealed file holds
                    // exactly its bytes and can no longer change.
                    either(&|engine| unsafe { Component::deserialize_file(engine, &path) }).ok()
                },
                // SAFETY: as at the top of this function.
                || {
                    either(&|engine| unsafe { Component::deserialize(engine, payload) })
                        .map_err(copy_failed)
                },
            )?;
            let (pre, mut shared) = component::prepare(
                &component,
                &engine.component_linker,
                Arc::clone(&engine.ticker),
                self.fuel,
            )?;
            shared.image = lease.map(Arc::new);
            // A WASI 0.3 world first, then an event handler's, then
            // 0.2's: a component exports one.
            return match p3::load(pre, shared).or_else(|(pre, shared)| events::load(pre, shared)) {
                Ok(loaded) => Ok(loaded),
                Err((pre, shared)) => component::load(pre, shared),
            };
        }
        let (module, lease) = image::load(
            payload,
            staged,
            // SAFETY: as at the top of this function; the sealed file
            // holds exactly the payload and can no longer change.
            |file| unsafe { Module::deserialize_open_file(&self.synchronous.engine, file) }.ok(),
            // SAFETY: as at the top of this function.
            || {
                unsafe { Module::deserialize(&self.synchronous.engine, payload) }
                    .map_err(copy_failed)
            },
        )?;
        let mut module = SandboxModule::new(
            module,
            &self.linkers,
            Arc::clone(&self.synchronous.ticker),
            self.fuel,
            self.release_above,
        )?;
        module.image = lease;
        Ok(Arc::new(module))
    }
}
