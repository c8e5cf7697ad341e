//! One invocation: a fresh instance from a pre-linked module, run, torn down.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Instant;

use luge_core::calls::{CallMode, CallTable};
use luge_core::limits::Limits;
use luge_core::{
    DirMode, EngineError, Invocation, LoadedModule, Outcome, Preemption, SandboxError,
    SandboxFuture, Termination, Unsupported,
};
use wasmtime::{
    Instance, InstancePre, Linker, Memory, Module, ModuleExport, Store, Trap, TypedFunc,
    UpdateDeadline,
};
use wasmtime_wasi::p1::WasiP1Ctx;
use wasmtime_wasi::p2::pipe::{MemoryInputPipe, MemoryOutputPipe};
use wasmtime_wasi::{FsPerms, I32Exit, WasiCtxBuilder};

use crate::epoch::EpochTicker;
use crate::limits::SandboxLimiter;

/// Per-sandbox host state.
pub struct SandboxState {
    /// The WASI preview 1 context.
    pub wasi: WasiP1Ctx,
    limiter: SandboxLimiter,
    /// This invocation's calls to other functions.
    pub(crate) calls: CallTable,
    /// This invocation's shared state.
    pub(crate) state: Option<Arc<dyn luge_core::state::State>>,
}

impl SandboxState {
    /// The WASI context, as the WASI linkers reach it.
    pub fn wasi(&mut self) -> &mut WasiP1Ctx {
        &mut self.wasi
    }
}

/// The WASI linkers of one engine, built once.
pub(crate) struct Linkers {
    pub sync: Linker<SandboxState>,
    pub asynchronous: Linker<SandboxState>,
}

/// A deserialized module, pre-linked against WASI.
pub struct SandboxModule {
    /// Linked against synchronous WASI: `run` blocks its thread.
    pre: InstancePre<SandboxState>,
    /// Linked against asynchronous WASI: `start` yields at quanta and I/O.
    pre_async: InstancePre<SandboxState>,
    /// The entry points (exported functions of type `() -> ()`), each with
    /// where it is among the exports (found once at load, so a run takes
    /// its entry by index, not name).
    exports: HashMap<String, ModuleExport>,
    ticker: Arc<EpochTicker>,
    fuel: bool,
    release_above: Option<usize>,
    /// Where the memory is among the exports, found once at load.
    memory_export: Option<ModuleExport>,
    code_size: usize,
    /// The place of the file the code is mapped from, if it is.
    pub(crate) image: Option<crate::image::Lease>,
}

impl SandboxModule {
    pub(crate) fn new(
        module: Module,
        linkers: &Linkers,
        ticker: Arc<EpochTicker>,
        fuel: bool,
        release_above: Option<usize>,
    ) -> Result<Self, EngineError> {
        // The memory to give back early (see `release_memory`): every
        // module exports it as `memory` (`luge_registry::check_abi`
        // refused the others before they were compiled).
        let memory_export = module.get_export_index("memory");
        let link = |linker: &Linker<SandboxState>| {
            linker
                .instantiate_pre(&module)
                .map_err(|e| EngineError::from(Unsupported::Link(e.into())))
        };
        let pre = link(&linkers.sync)?;
        let pre_async = link(&linkers.asynchronous)?;
        let exports = module
            .exports()
            .filter(|e| {
                e.ty().func().is_some_and(|f| {
                    luge_core::runtime::is_entry_point(
                        e.name(),
                        f.params().len(),
                        f.results().len(),
                    )
                })
            })
            .filter_map(|e| Some((e.name().to_owned(), module.get_export_index(e.name())?)))
            .collect();
        let range = module.image_range();
        Ok(Self {
            pre,
            pre_async,
            exports,
            ticker,
            fuel,
            release_above,
            memory_export,
            code_size: range.end as usize - range.start as usize,
            image: None,
        })
    }

    fn wasi_context(
        invocation: &Invocation,
        stdout: &MemoryOutputPipe,
        stderr: &MemoryOutputPipe,
    ) -> Result<WasiP1Ctx, SandboxError> {
        Ok(wasi_builder(invocation, stdout, stderr)?.build_p1())
    }
}

/// The WASI context of an invocation, for either preview: stdin, captured
/// stdout and stderr (or this process's, where the invocation inherits
/// them), argv, environment, granted directories and sockets.
pub(crate) fn wasi_builder<O: wasmtime_wasi::cli::StdoutStream + Clone + 'static>(
    invocation: &Invocation,
    stdout: &O,
    stderr: &O,
) -> Result<WasiCtxBuilder, SandboxError> {
    let action = &invocation.action;
    let mut builder = WasiCtxBuilder::new();
    builder
        .stdin(MemoryInputPipe::new(invocation.stdin.clone()))
        .stdout(stdout.clone())
        .stderr(stderr.clone())
        .args(&invocation.argv().collect::<Vec<_>>())
        .envs(&invocation.env());
    if invocation.inherit_stdio {
        builder.inherit_stdout().inherit_stderr();
    }
    if invocation.inherit_stdin {
        builder.inherit_stdin();
    }
    grant_sockets(&mut builder, &action.capabilities);
    for dir in &action.capabilities.dirs {
        let perms = match dir.mode {
            DirMode::ReadOnly => FsPerms::ReadOnly,
            DirMode::ReadWrite => FsPerms::ReadWrite,
        };
        builder
            .preopened_dir(dir.path(), &dir.guest, perms)
            .map_err(|e| SandboxError::Grant {
                guest: dir.guest.clone(),
                source: e.into(),
            })?;
    }
    Ok(builder)
}

/// `wasi:sockets` as `outbound` grants it: TCP where a `tcp://` (or `*://`)
/// entry exists, UDP where a `udp://` one does, name lookups with either,
/// and every address checked by `luge_outbound::Sockets` (none granted:
/// no socket at all, Wasmtime's default). `luge run --inherit-network`
/// gives the host's network unchecked, as `wasmtime run -S
/// inherit-network` does.
fn grant_sockets(
    builder: &mut WasiCtxBuilder,
    capabilities: &luge_core::capabilities::Capabilities,
) {
    use luge_core::capabilities::Network;
    use luge_outbound::SocketUse;
    use wasmtime_wasi::sockets::SocketAddrUse as Use;
    if capabilities.network == Network::Inherit {
        builder
            .inherit_network()
            .allow_tcp(true)
            .allow_udp(true)
            .allow_ip_name_lookup(true);
        return;
    }
    let outbound = &capabilities.outbound;
    let (tcp, udp) = (outbound.grants_scheme("tcp"), outbound.grants_scheme("udp"));
    builder
        .allow_tcp(tcp)
        .allow_udp(udp)
        .allow_ip_name_lookup(tcp || udp);
    if !(tcp || udp) {
        return;
    }
    let sockets = Arc::new(luge_outbound::Sockets::new(outbound.clone()));
    builder.socket_addr_check(move |addr, use_| {
        let (scheme, use_) = match use_ {
            Use::TcpBind => ("tcp", SocketUse::Bind),
            Use::TcpListen | Use::TcpAccept => ("tcp", SocketUse::Listen),
            Use::TcpConnect => ("tcp", SocketUse::Connect),
            Use::UdpBind => ("udp", SocketUse::Bind),
            Use::UdpSend | Use::UdpReceive => ("udp", SocketUse::Datagram),
        };
        let permitted = sockets.permits(scheme, use_, addr);
        Box::pin(std::future::ready(permitted))
    });
}

impl LoadedModule for SandboxModule {
    fn has_export(&self, name: &str) -> bool {
        self.exports.contains_key(name)
    }

    fn code_size(&self) -> usize {
        self.code_size
    }

    fn run(&self, invocation: Invocation) -> Outcome {
        let started = Instant::now();
        let mut sandbox = match self.sandbox(&invocation) {
            Ok(sandbox) => sandbox,
            Err(outcome) => return outcome,
        };
        // Synchronous runs trap at the time limit.
        sandbox.store.epoch_deadline_trap();
        sandbox
            .store
            .set_epoch_deadline(self.ticker.ticks_for(sandbox.limits.timeout));
        let entry = invocation.action.entry.as_str();
        let result = {
            let _running = self.ticker.enter();
            let store = &mut sandbox.store;
            self.pre.instantiate(&mut *store).and_then(|instance| {
                sandbox.memory = self.exported_memory(store, &instance);
                self.entry(store, &instance, entry)?.call(&mut *store, ())
            })
        };
        sandbox.finish(result, started)
    }

    fn start(self: Arc<Self>, invocation: Invocation, preemption: Preemption) -> SandboxFuture {
        Box::pin(async move {
            let started = Instant::now();
            let mut sandbox = match self.sandbox(&invocation) {
                Ok(sandbox) => sandbox,
                Err(outcome) => return outcome,
            };
            schedule(
                &mut sandbox.store,
                &self.ticker,
                &invocation,
                preemption,
                started,
            );
            let entry = invocation.action.entry.as_str();
            let mut ready = started;
            let result = {
                let _running = self.ticker.enter();
                let store = &mut sandbox.store;
                match self.pre_async.instantiate_async(&mut *store).await {
                    Ok(instance) => {
                        ready = Instant::now();
                        sandbox.memory = self.exported_memory(store, &instance);
                        match self.entry(store, &instance, entry) {
                            Ok(func) => func.call_async(&mut *store, ()).await,
                            Err(e) => Err(e),
                        }
                    }
                    Err(e) => Err(e),
                }
            };
            let Some(trace) = invocation.trace.as_ref() else {
                return sandbox.finish(result, started);
            };
            let ran = Instant::now();
            let outcome = sandbox.finish(result, started);
            luge_core::trace::phases(
                trace,
                luge_core::trace::InstanceKind::Fresh,
                started,
                ready,
                ran,
                Instant::now(),
            );
            outcome
        })
    }
}

/// A store ready to instantiate in, with its captured streams.
struct Sandbox {
    store: Store<SandboxState>,
    stdout: MemoryOutputPipe,
    stderr: MemoryOutputPipe,
    limits: Limits,
    /// The instance's memory, once instantiated.
    memory: Option<Memory>,
    release_above: Option<usize>,
}

impl SandboxModule {
    /// The instance's memory (WASI commands have exactly one, exported).
    fn exported_memory(
        &self,
        store: &mut Store<SandboxState>,
        instance: &Instance,
    ) -> Option<Memory> {
        let export = self.memory_export.as_ref()?;
        instance
            .get_module_export(&mut *store, export)
            .and_then(wasmtime::Extern::into_memory)
    }

    /// The entry function `name` of `instance`, taken by the index found at
    /// load; a name that is no entry point fails with
    /// [`SandboxError::NoEntry`], as on every engine.
    fn entry(
        &self,
        store: &mut Store<SandboxState>,
        instance: &Instance,
        name: &str,
    ) -> wasmtime::Result<TypedFunc<(), ()>> {
        let func = self
            .exports
            .get(name)
            .and_then(|export| instance.get_module_export(&mut *store, export))
            .and_then(wasmtime::Extern::into_func)
            .ok_or_else(|| wasmtime::Error::new(SandboxError::NoEntry(name.to_owned())))?;
        // Of the type checked at load: Wasmtime checks it again.
        func.typed(&*store)
    }

    fn sandbox(&self, invocation: &Invocation) -> Result<Sandbox, Outcome> {
        let limits = invocation.action.limits;
        let stdout = MemoryOutputPipe::new(limits.capture_bytes());
        let stderr = MemoryOutputPipe::new(limits.capture_bytes());
        let wasi = Self::wasi_context(invocation, &stdout, &stderr)
            .map_err(|e| Outcome::failed(luge_core::error_line(&e)))?;
        let mut store = Store::new(
            self.pre.module().engine(),
            SandboxState {
                wasi,
                limiter: SandboxLimiter::new(limits.memory_bytes),
                // Both linkers schedule callees: the synchronous one
                // (`LoadedModule::run`) is not used on the host's workers.
                calls: CallTable::new(invocation.calls.clone(), CallMode::Scheduled),
                state: invocation.state.clone(),
            },
        );
        store.limiter(|state| &mut state.limiter);
        if self.fuel {
            // With metering on, an action without a fuel limit gets all of it.
            let _ = store.set_fuel(limits.fuel.unwrap_or(u64::MAX));
        }
        Ok(Sandbox {
            store,
            stdout,
            stderr,
            limits,
            memory: None,
            release_above: self.release_above,
        })
    }
}

impl Sandbox {
    /// Tears the sandbox down and reports how it ended.
    fn finish(mut self, result: wasmtime::Result<()>, started: Instant) -> Outcome {
        if let (Some(memory), Some(above)) = (self.memory, self.release_above) {
            release_memory(&mut self.store, memory, above);
        }
        let refused = self.store.data().limiter.refused;
        let (stdout, stderr) = tear_down(self.store, self.stdout, self.stderr, &self.limits);
        ended(result, refused, &self.limits, stdout, stderr, started)
    }
}

/// Output up to this size (stdout and stderr together) is copied out of a
/// sandbox so that the sandbox can be torn down after its response is out;
/// a larger one is moved out as the store goes, at once.
const COPIED_OUTPUT: usize = 64 << 10;

/// Frees `store` and takes what its pipes captured: at once, moving the
/// buffers out, or, on a worker that tears sandboxes down after their
/// responses are written (`luge_core::teardown`), later, the output copied
/// out first where it is small. (Core modules and components alike.)
pub(crate) fn tear_down<T: 'static>(
    store: Store<T>,
    stdout: MemoryOutputPipe,
    stderr: MemoryOutputPipe,
    limits: &Limits,
) -> (Vec<u8>, Vec<u8>) {
    if luge_core::teardown::defers() {
        let capacity = limits.capture_bytes();
        let captured = |pipe: &MemoryOutputPipe| {
            // What is left to write says what was written.
            let left = wasmtime_wasi::p2::OutputStream::check_write(&mut pipe.clone());
            capacity.saturating_sub(left.unwrap_or(0))
        };
        if captured(&stdout) + captured(&stderr) <= COPIED_OUTPUT {
            let output = (stdout.contents().into(), stderr.contents().into());
            luge_core::teardown::later(store);
            return output;
        }
    }
    drop(store);
    (take_output(stdout), take_output(stderr))
}

/// How a run that returned `result` ended, with what it wrote (core
/// modules and components alike; see [`tear_down`]); `refused`: a memory
/// growth was refused on the way.
pub(crate) fn ended(
    result: wasmtime::Result<()>,
    refused: bool,
    limits: &Limits,
    stdout: Vec<u8>,
    stderr: Vec<u8>,
    started: Instant,
) -> Outcome {
    Outcome {
        termination: termination(result, refused, limits),
        stdout,
        stderr,
        elapsed: started.elapsed(),
    }
    .cap_output(limits.max_output_bytes)
}

/// Sets how a sandbox run as a future shares its worker: with preemption,
/// checked at every epoch tick, it is stopped past its time limit or when
/// cancelled, and yields at the end of its quantum, at once when the
/// scheduler asks because a more urgent job arrived, or when requests came
/// on connections its worker reads only between sandboxes. Without, it is checked
/// once per quantum, only for the time limit and cancellation. (Core
/// modules and components alike.)
pub(crate) fn schedule<T: 'static>(
    store: &mut Store<T>,
    ticker: &EpochTicker,
    invocation: &Invocation,
    preemption: Preemption,
    started: Instant,
) {
    let timeout = invocation.action.limits.timeout;
    let cancel = invocation.cancel.clone();
    schedule_with(store, ticker, preemption, move || {
        started.elapsed() >= timeout || cancel.is_cancelled()
    });
}

/// [`schedule`] with its own test of when the store must stop (checked at
/// every tick with preemption, every quantum without): an instance that
/// serves several requests stops when one of them is past its time limit.
pub(crate) fn schedule_with<T: 'static>(
    store: &mut Store<T>,
    ticker: &EpochTicker,
    preemption: Preemption,
    mut stop: impl FnMut() -> bool + Send + Sync + 'static,
) {
    let quantum = ticker.ticks_for(preemption.quantum).max(1);
    let mut ticks_in_slice = 0;
    store.epoch_deadline_callback(move |_| {
        if stop() {
            return Ok(UpdateDeadline::Interrupt);
        }
        if !preemption.enabled {
            return Ok(UpdateDeadline::Continue(quantum));
        }
        ticks_in_slice += 1;
        Ok(
            if ticks_in_slice >= quantum
                || luge_core::preempt::requested()
                || luge_core::preempt::arrived()
            {
                ticks_in_slice = 0;
                UpdateDeadline::Yield(1)
            } else {
                UpdateDeadline::Continue(1)
            },
        )
    });
    store.set_epoch_deadline(if preemption.enabled { 1 } else { quantum });
}

/// How a run that returned `result` ended; `refused`: a memory growth was
/// refused on the way.
pub(crate) fn termination(
    result: wasmtime::Result<()>,
    refused: bool,
    limits: &Limits,
) -> Termination {
    match result {
        Ok(()) => Termination::Exited(0),
        Err(error) => {
            if let Some(exit) = error.downcast_ref::<I32Exit>() {
                Termination::exit(exit.0)
            } else if let Some(refused) = error.downcast_ref::<SandboxError>() {
                // Luge's own refusal (a missing entry): as every engine says it.
                Termination::Failed(luge_core::error_line(refused))
            } else if error
                .downcast_ref::<wasmtime::PoolConcurrencyLimitError>()
                .is_some()
            {
                // The pool had no slot for one of its instances, memories
                // or tables: the sandbox never ran.
                SandboxError::Busy.into()
            } else {
                match error.downcast_ref::<Trap>() {
                    Some(Trap::Interrupt) => Termination::TimedOut(limits.timeout),
                    Some(Trap::OutOfFuel) => Termination::OutOfFuel,
                    _ if refused => Termination::OutOfMemory {
                        limit_bytes: limits.memory_bytes,
                    },
                    _ => Termination::Trapped(trap_message(&error)),
                }
            }
        }
    }
}

/// Gives the pages of `memory` past `above` bytes back to the OS now.
///
/// The pool decommits ended sandboxes' memories in batches, so each slot
/// of a batch stays resident at whatever size its sandbox grew to until the
/// batch is flushed. Releasing what a grown sandbox holds past its share of
/// the resident budget as it ends bounds a batch by the budget, while the
/// small sandboxes, nearly all of them, keep the batching.
fn release_memory(store: &mut Store<SandboxState>, memory: Memory, above: usize) {
    let data = memory.data_mut(&mut *store);
    let page = rustix::param::page_size();
    let start = above.next_multiple_of(page);
    if data.len() <= start {
        return;
    }
    let len = data.len() - start;
    // SAFETY: `data` is this sandbox's linear memory, borrowed exclusively
    // from its store: no guest code runs (the entry point has returned or
    // trapped) and nothing else refers to it. The range lies inside it and
    // starts on a page boundary. MADV_DONTNEED only drops the pages' contents,
    // which reads back as zeros (or the module's copy-on-write image), the
    // very state the pool resets the slot to before its next sandbox, so
    // nothing that reads the memory afterwards sees a difference.
    let released = unsafe {
        rustix::mm::madvise(
            data.as_mut_ptr().add(start).cast(),
            len,
            rustix::mm::Advice::LinuxDontNeed,
        )
    };
    if let Err(e) = released {
        tracing::debug!(error = %e, "could not release an ended sandbox's memory early");
    }
}

/// A trap as people read it: the reason on the first line (Wasmtime puts
/// the backtrace first and the reason last), then the whole report.
fn trap_message(error: &wasmtime::Error) -> String {
    format!("{}\n{error:?}", error.root_cause())
}

/// The bytes a pipe captured. The store, the pipe's only other owner, has
/// been dropped by now, so the buffer is moved out rather than copied.
pub(crate) fn take_output(pipe: MemoryOutputPipe) -> Vec<u8> {
    pipe.try_into_inner()
        .map(|buffer| buffer.freeze().into())
        .unwrap_or_default()
}
