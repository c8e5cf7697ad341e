//! Pre-initialized snapshots (Faasm's Proto-Faaslets) with Wizer.
//!
//! A module that exports an initialisation function (`wizer.initialize`)
//! has it run once, when its plain Wasm is compiled (upload, precompile,
//! a configured route at start, the first `/init`), and is replaced by a
//! module whose memory and globals start where the initialisation left
//! them. Every invocation still gets a fresh sandbox, from the snapshot.
//! The snapshot is a plain core module, so every engine loads it.
//!
//! Narrows Wizer to what an untrusted upload may do: the initialisation
//! runs on Wasmtime with WASI preview 1 under the function's own limits
//! (time, by epoch interruption, and memory) and grants (arguments,
//! environment, directories; no stdin), or, for code loaded without a
//! function (`luge-precompile`), the operator's default limits and no
//! grants; one at a time (the registry's compile lock); a trap, an exit or
//! running out of time or memory is an upload error naming it. The
//! export it runs is `wizer.initialize` unless the function's metadata
//! names another ([`luge_registry::Init`]).

#![deny(missing_docs)]

use std::sync::mpsc;
use std::time::Duration;

use luge_core::DirMode;
use luge_registry::{Init, PreinitError, Preinitializer};
use wasmtime::{Config, Engine, Instance, Linker, Module, Store, StoreLimits, StoreLimitsBuilder};
use wasmtime_wasi::I32Exit;
use wasmtime_wasi::p1::WasiP1Ctx;
use wasmtime_wasi::p2::pipe::MemoryOutputPipe;
use wasmtime_wizer::{InstanceState, SnapshotVal, ValType, Wizer};

/// The export that marks a module for pre-initialization (Wizer's name),
/// unless a function's metadata names another.
pub const INIT_FUNC: &str = luge_registry::DEFAULT_INIT_FUNCTION;

/// Bytes of the initialisation's stderr kept for its error message.
const STDERR_BYTES: usize = 4096;

struct Ctx {
    wasi: WasiP1Ctx,
    limits: StoreLimits,
}

/// Runs initialisation functions and snapshots the result.
#[derive(derive_more::Debug)]
pub struct Snapshotter {
    #[debug(skip)]
    engine: Engine,
    #[debug(skip)]
    linker: Linker<Ctx>,
    timeout: Duration,
    memory_bytes: usize,
}

impl Snapshotter {
    /// A snapshotter whose initialisations run at most `timeout` in at most
    /// `memory_bytes` of linear memory (the operator's default limits).
    pub fn new(timeout: Duration, memory_bytes: u64) -> Result<Self, PreinitError> {
        let stage = |stage| {
            move |e: wasmtime::Error| PreinitError::Snapshotter {
                stage,
                reason: format!("{e:#}"),
            }
        };
        let mut config = Config::new();
        // Interrupted by its own timer thread at `timeout`.
        config.epoch_interruption(true);
        let engine = Engine::new(&config).map_err(stage("snapshot engine"))?;
        let mut linker = Linker::new(&engine);
        wasmtime_wasi::p1::add_to_linker_sync(&mut linker, |c: &mut Ctx| &mut c.wasi)
            .map_err(stage("snapshot linker"))?;
        // The one WASI call that blocks in the host (a sleep) would outlast
        // the epoch timer, which interrupts only Wasm code: an
        // initialisation may not wait.
        linker.allow_shadowing(true);
        linker
            .func_wrap(
                "wasi_snapshot_preview1",
                "poll_oneoff",
                |_: i32, _: i32, _: i32, _: i32| -> wasmtime::Result<i32> {
                    Err(wasmtime::Error::msg(
                        "poll_oneoff (sleeping, waiting) is not available during initialisation",
                    ))
                },
            )
            .map_err(stage("snapshot linker"))?;
        Ok(Self {
            engine,
            linker,
            timeout,
            memory_bytes: usize::try_from(memory_bytes).unwrap_or(usize::MAX),
        })
    }

    fn run(&self, wasm: &[u8], init: Option<&Init>) -> Result<Vec<u8>, PreinitError> {
        let stage = |stage| {
            move |e: wasmtime::Error| PreinitError::Snapshotter {
                stage,
                reason: format!("{e:#}"),
            }
        };
        let function = init.map_or(INIT_FUNC, |i| i.function.as_str());
        let timeout = init.map_or(self.timeout, |i| i.timeout);
        let memory_bytes = init.map_or(self.memory_bytes, |i| {
            usize::try_from(i.memory_bytes).unwrap_or(usize::MAX)
        });
        let mut wizer = Wizer::new();
        wizer.init_func(function);
        let (cx, instrumented) = wizer.instrument(wasm).map_err(stage("instrumenting"))?;
        let module = Module::new(&self.engine, &instrumented).map_err(stage("compiling"))?;
        let stderr = MemoryOutputPipe::new(STDERR_BYTES);
        let mut builder = wasmtime_wasi::WasiCtxBuilder::new();
        builder.stderr(stderr.clone());
        if let Some(init) = init {
            builder.envs(&init.env);
            // argv[0] is the export's name, as an invocation's is its own.
            builder.arg(function).args(&init.args);
            for dir in &init.dirs {
                let perms = match dir.mode {
                    DirMode::ReadOnly => wasmtime_wasi::FsPerms::ReadOnly,
                    DirMode::ReadWrite => wasmtime_wasi::FsPerms::ReadWrite,
                };
                builder
                    .preopened_dir(dir.path(), &dir.guest, perms)
                    .map_err(|e| PreinitError::Snapshotter {
                        stage: "granting a directory",
                        reason: format!("{}: {e:#}", dir.guest),
                    })?;
            }
        }
        let wasi = builder.build_p1();
        let limits = StoreLimitsBuilder::new()
            .memory_size(memory_bytes)
            .instances(1)
            .build();
        let mut store = Store::new(&self.engine, Ctx { wasi, limits });
        store.limiter(|c| &mut c.limits);
        store.set_epoch_deadline(1);
        // The timer: one epoch tick at `timeout` interrupts this store
        // (the only one running: initialisations run one at a time).
        let (done, wait) = mpsc::channel::<()>();
        let engine = self.engine.clone();
        let timer = std::thread::spawn(move || {
            if wait.recv_timeout(timeout) == Err(mpsc::RecvTimeoutError::Timeout) {
                engine.increment_epoch();
            }
        });
        let result = self.initialize(&mut store, &module, function);
        drop(done);
        let _ = timer.join();
        let instance = result.map_err(|e| {
            let function = function.to_owned();
            let stderr = String::from_utf8_lossy(&stderr.contents())
                .trim()
                .to_owned();
            if let Some(exit) = e.downcast_ref::<I32Exit>() {
                PreinitError::Exited {
                    function,
                    status: exit.0,
                    stderr,
                }
            } else if e
                .downcast_ref::<wasmtime::Trap>()
                .is_some_and(|t| *t == wasmtime::Trap::Interrupt)
            {
                PreinitError::TimedOut {
                    function,
                    timeout,
                    stderr,
                }
            } else {
                PreinitError::Failed {
                    function,
                    reason: format!("{e:#}"),
                    stderr,
                }
            }
        })?;
        let mut state = Snap {
            store: &mut store,
            instance,
        };
        // Wizer's reads of the instance complete at once: no runtime needed.
        luge_core::calls::block_on(wizer.snapshot(&cx, &mut state)).map_err(stage("snapshotting"))
    }

    /// Instantiates and runs the initialisation (a reactor's
    /// `_initialize` first, as Wizer does).
    fn initialize(
        &self,
        store: &mut Store<Ctx>,
        module: &Module,
        function: &str,
    ) -> wasmtime::Result<Instance> {
        let instance = self.linker.instantiate(&mut *store, module)?;
        if let Ok(reactor) = instance.get_typed_func::<(), ()>(&mut *store, "_initialize") {
            reactor.call(&mut *store, ())?;
        }
        instance
            .get_typed_func::<(), ()>(&mut *store, function)?
            .call(&mut *store, ())?;
        Ok(instance)
    }
}

/// Whether `wasm` exports `name` (a quick scan, before any compile).
fn exports(wasm: &[u8], name: &str) -> bool {
    for payload in wasmparser::Parser::new(0).parse_all(wasm) {
        match payload {
            Ok(wasmparser::Payload::ExportSection(section)) => {
                return section.into_iter().any(|e| e.is_ok_and(|e| e.name == name));
            }
            Ok(_) => {}
            Err(_) => return false,
        }
    }
    false
}

impl Preinitializer for Snapshotter {
    fn applies(&self, wasm: &[u8], init: Option<&Init>) -> bool {
        // Components are not snapshotted (Wizer's component support is a
        // feature this build leaves out).
        !luge_core::is_component(wasm)
            && exports(wasm, init.map_or(INIT_FUNC, |i| i.function.as_str()))
    }

    fn preinitialize(
        &self,
        wasm: &[u8],
        init: Option<&Init>,
    ) -> Result<Option<Vec<u8>>, PreinitError> {
        if !self.applies(wasm, init) {
            return Ok(None);
        }
        let started = std::time::Instant::now();
        // On a thread of its own: synchronous WASI blocks on a runtime of
        // its own for file operations, which it may not do on a thread
        // already driving one (a route loaded at start, an upload).
        let snapshot = std::thread::scope(|scope| {
            scope
                .spawn(|| self.run(wasm, init))
                .join()
                .unwrap_or(Err(PreinitError::Panicked))
        })?;
        tracing::info!(
            ms = started.elapsed().as_millis() as u64,
            bytes = snapshot.len(),
            "pre-initialized snapshot made"
        );
        Ok(Some(snapshot))
    }
}

/// The initialised instance, as Wizer reads it.
struct Snap<'a> {
    store: &'a mut Store<Ctx>,
    instance: Instance,
}

impl InstanceState for Snap<'_> {
    async fn global_get(&mut self, name: &str, _: ValType) -> SnapshotVal {
        // Wizer asks only for the globals its instrumentation exported.
        let value = self
            .instance
            .get_global(&mut *self.store, name)
            .map(|g| g.get(&mut *self.store));
        match value {
            Some(wasmtime::Val::I32(x)) => SnapshotVal::I32(x),
            Some(wasmtime::Val::I64(x)) => SnapshotVal::I64(x),
            Some(wasmtime::Val::F32(x)) => SnapshotVal::F32(x),
            Some(wasmtime::Val::F64(x)) => SnapshotVal::F64(x),
            Some(wasmtime::Val::V128(x)) => SnapshotVal::V128(x.as_u128()),
            // Reference globals are refused by Wizer's instrumentation.
            _ => SnapshotVal::I32(0),
        }
    }

    async fn memory_contents(&mut self, name: &str, contents: impl FnOnce(&[u8]) + Send) {
        match self.instance.get_memory(&mut *self.store, name) {
            Some(memory) => contents(memory.data(&*self.store)),
            None => contents(&[]),
        }
    }
}
