//! WebAssembly components (WASI 0.2), in the two worlds functions use:
//!
//! - `wasi:cli/command` (Rust's `wasm32-wasip2`, componentize-py,
//!   componentize-js): the same function ABI as core modules (stdin in,
//!   stdout out, argv, environment, granted directories);
//! - `wasi:http/proxy` (Spin, `wasmtime serve`, wasmCloud): an HTTP handler
//!   ([`luge_core::handler`]): the request, headers and streamed body, goes
//!   to its `incoming-handler`, and its response streams back.
//!
//! Both get the same limits, scheduling and preemption as core modules, and
//! a fresh instance per invocation from a pre-instantiated component.
//! Outgoing HTTP (`wasi:http/outgoing-handler`) is refused unless the
//! function's grants name the origin (`luge_outbound::component::Hooks`).

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use luge_core::ahead::{AHEAD_WITHIN, Ahead, thread_cpu_time};
use luge_core::handler::{BodyError, HandlerError, Request, Respond};
use luge_core::{
    EngineError, Invocation, LoadedModule, Outcome, Preemption, SandboxFuture, Unsupported,
};
use luge_outbound::component::Hooks;
use luge_wasi_candidates::{Handler, HandlerPre};
use wasmtime::component::{Component, InstancePre, Linker, ResourceTable};
use wasmtime::{AsContextMut, Engine, Store};
use wasmtime_wasi::cli::StdoutStream;
use wasmtime_wasi::p2::bindings::CommandPre;
use wasmtime_wasi::p2::pipe::MemoryOutputPipe;
use wasmtime_wasi::{WasiCtx, WasiCtxView, WasiView};
use wasmtime_wasi_http::p2::bindings::http::types::Scheme;
use wasmtime_wasi_http::{WasiHttpCtx, WasiHttpCtxView, WasiHttpView};

use crate::config::ComponentAbi::{self, Concurrent, Synchronous};
use crate::epoch::EpochTicker;
use crate::limits::SandboxLimiter;
use crate::sandbox::{ended, schedule, tear_down, wasi_builder};

pub use luge_core::is_component;

/// Per-invocation host state of a component.
pub struct ComponentState {
    ctx: WasiCtx,
    table: ResourceTable,
    limiter: SandboxLimiter,
    http: WasiHttpCtx,
    hooks: Hooks,
    /// `wasi:keyvalue` and `spin:key-value`: the invocation's shared
    /// state, the buckets open.
    keyvalue: luge_state::component::KeyValueState,
    /// `wasi:config/store` and `spin:variables`: the action, whose
    /// variables they are.
    action: Arc<luge_core::Action>,
    /// When the instance was ready (see [`instantiated`]): where the
    /// invocation's `luge.instantiate` phase ends and `luge.run` begins.
    instantiated: Option<Instant>,
    /// `wasi:otel`: the spans the function started, what it recorded.
    otel: luge_telemetry::component::OtelState,
}

/// Marks `store`'s instance ready, for the invocation's trace.
pub(crate) fn instantiated(store: &mut Store<ComponentState>) {
    store.data_mut().instantiated = Some(Instant::now());
}

impl ComponentState {
    /// What the key-value interfaces work on (`wasi:keyvalue`,
    /// `spin:key-value`).
    fn keyvalue(&mut self) -> luge_state::component::KeyValueView<'_> {
        let capabilities = &self.action.capabilities;
        self.keyvalue.view(
            &mut self.table,
            &capabilities.global_stores,
            capabilities.key_value_labels.as_deref(),
        )
    }

    /// What the variables interfaces read (`wasi:config`,
    /// `spin:variables`).
    fn variables(&mut self) -> luge_variables::VariablesView<'_> {
        luge_variables::VariablesView {
            variables: &self.action.variables.0,
        }
    }
}

impl ComponentState {
    /// What Spin's connection interfaces work on (`spin:sqlite`,
    /// `spin:redis`, `spin:postgres`, `spin:mysql`).
    fn connections(&mut self) -> luge_binding::ConnectionsView<'_> {
        luge_binding::ConnectionsView {
            table: &mut self.table,
            action: &self.action,
            deadline: self.hooks.deadline(),
            trace: self.hooks.trace(),
        }
    }
}

impl WasiView for ComponentState {
    fn ctx(&mut self) -> WasiCtxView<'_> {
        WasiCtxView {
            ctx: &mut self.ctx,
            table: &mut self.table,
        }
    }
}

impl WasiHttpView for ComponentState {
    fn http(&mut self) -> WasiHttpCtxView<'_> {
        WasiHttpCtxView {
            ctx: &mut self.http,
            table: &mut self.table,
            hooks: &mut self.hooks,
        }
    }
}

/// Adds one capability slice's interfaces to the linker.
type AddSlice = fn(&mut Linker<ComponentState>) -> wasmtime::Result<()>;

/// Every slice a component may import, each with the engine it needs and
/// its bindings' own view of [`ComponentState`] (the only part of it they
/// see), in the order they are linked. A slice's binding lives in its own
/// file; adding a slice is one row here and one field (or view) of the
/// state. A slice whose interfaces hold `async func`s (WASI 0.3's, Spin
/// 4's) needs the component model's async ABI and is linked only on the
/// [`ComponentAbi::Concurrent`] engine; the rest are linked on both (the
/// test `each_slice_links_on_the_engines_it_names` holds the marks true).
const SLICES: &[(&str, ComponentAbi, AddSlice)] = &[
    ("WASI 0.2", Synchronous, |l| {
        wasmtime_wasi::p2::add_to_linker_async(l)
    }),
    ("wasi:http 0.2", Synchronous, |l| {
        wasmtime_wasi_http::p2::add_only_http_to_linker_async(l)
    }),
    (
        "WASI 0.2.0-rc-2023-10-18, its wasi:http",
        Synchronous,
        |l| luge_wasi_candidates::wasi_2023_10_18::add_to_linker(l),
    ),
    (
        "WASI 0.2.0-rc-2023-11-10, its wasi:http",
        Synchronous,
        |l| luge_wasi_candidates::wasi_2023_11_10::add_to_linker(l),
    ),
    ("WASI 0.3", Concurrent, |l| {
        wasmtime_wasi::p3::add_to_linker(l)
    }),
    ("wasi:http 0.3", Concurrent, |l| {
        wasmtime_wasi_http::p3::add_to_linker(l)
    }),
    (
        "wasi:config, fermyon:spin/variables@2.0.0",
        Synchronous,
        |l| luge_variables::add_to_linker(l, ComponentState::variables),
    ),
    ("spin:variables", Concurrent, |l| {
        luge_variables::add_spin3_to_linker(l, ComponentState::variables)
    }),
    ("wasi:keyvalue 0.2.0-draft", Synchronous, |l| {
        luge_state::component::keyvalue::add_to_linker(l, ComponentState::keyvalue)
    }),
    ("wasi:keyvalue 0.2.0-draft2", Synchronous, |l| {
        luge_state::component::keyvalue_draft2::add_to_linker(l, ComponentState::keyvalue)
    }),
    ("spin:key-value", Concurrent, |l| {
        luge_state::component::spin::add_to_linker(l, ComponentState::keyvalue)
    }),
    ("fermyon:spin/key-value@2.0.0", Synchronous, |l| {
        luge_state::component::spin2::add_to_linker(l, ComponentState::keyvalue)
    }),
    ("fermyon:spin/sqlite@2.0.0", Synchronous, |l| {
        luge_sqlite::component::sqlite2::add_to_linker(l, ComponentState::connections)
    }),
    ("fermyon:spin/redis@2.0.0", Synchronous, |l| {
        luge_outbound_redis::component::redis2::add_to_linker(l, ComponentState::connections)
    }),
    ("fermyon:spin/mqtt@2.0.0", Synchronous, |l| {
        luge_outbound_mqtt::component::mqtt2::add_to_linker(l, ComponentState::connections)
    }),
    ("fermyon:spin/postgres@2.0.0", Synchronous, |l| {
        luge_outbound_pg::component::postgres2::add_to_linker(l, ComponentState::connections)
    }),
    ("fermyon:spin/mysql@2.0.0", Synchronous, |l| {
        luge_outbound_mysql::component::mysql2::add_to_linker(l, ComponentState::connections)
    }),
    ("spin:sqlite", Concurrent, |l| {
        luge_sqlite::component::sqlite::add_to_linker(l, ComponentState::connections)
    }),
    ("spin:redis", Concurrent, |l| {
        luge_outbound_redis::component::redis::add_to_linker(l, ComponentState::connections)
    }),
    ("spin:postgres 4", Concurrent, |l| {
        luge_outbound_pg::component::postgres::add_to_linker(l, ComponentState::connections)
    }),
    ("spin:postgres 4.0", Synchronous, |l| {
        luge_outbound_pg::component::postgres40::add_to_linker(l, ComponentState::connections)
    }),
    ("spin:postgres 3", Synchronous, |l| {
        luge_outbound_pg::component::postgres3::add_to_linker(l, ComponentState::connections)
    }),
    ("spin:mysql", Concurrent, |l| {
        luge_outbound_mysql::component::mysql::add_to_linker(l, ComponentState::connections)
    }),
    ("spin:mqtt", Concurrent, |l| {
        luge_outbound_mqtt::component::mqtt::add_to_linker(l, ComponentState::connections)
    }),
    ("wasmcloud:messaging/consumer@0.2.0", Synchronous, |l| {
        luge_outbound_nats::component::consumer::add_to_linker(l, ComponentState::connections)
    }),
    ("event types", Synchronous, |l| {
        crate::event_types::add_to_linker(l)
    }),
    ("wasi:otel", Synchronous, |l| {
        luge_telemetry::component::add_to_linker(l, |state: &mut ComponentState| {
            luge_telemetry::component::OtelView {
                trace: state.hooks.trace(),
                state: &mut state.otel,
            }
        })
    }),
];

/// The component linker of an engine of `abi`, built once per engine from
/// [`SLICES`]: WASI 0.2 (and on the concurrent engine 0.3: their
/// interfaces' names differ by version, so both sit in one linker),
/// `wasi:http`, and each capability's interfaces; every world links
/// against it. A slice that fails to link is named.
pub(crate) fn linker(
    engine: &Engine,
    abi: ComponentAbi,
) -> Result<Linker<ComponentState>, EngineError> {
    let mut linker = Linker::new(engine);
    for &(slice, needs, add) in SLICES {
        if needs == ComponentAbi::Concurrent && abi == ComponentAbi::Synchronous {
            continue;
        }
        add(&mut linker).map_err(|e| EngineError::config(slice, e))?;
    }
    Ok(linker)
}

/// Pre-instantiates `component` against the linker, with what every
/// world's loaded function keeps besides; an import the linker lacks is
/// refused here, naming it.
pub(crate) fn prepare(
    component: &Component,
    linker: &Linker<ComponentState>,
    ticker: Arc<EpochTicker>,
    fuel: bool,
) -> Result<(InstancePre<ComponentState>, Shared), EngineError> {
    let pre = linker.instantiate_pre(component).map_err(|e| {
        let unserved = not_served(component, linker.engine());
        let spin1: Vec<String> = unserved
            .iter()
            .filter(|name| is_spin1(name))
            .cloned()
            .collect();
        EngineError::from(if !spin1.is_empty() {
            Unsupported::Spin1(spin1)
        } else if unserved.is_empty() {
            Unsupported::ComponentImports(e.into())
        } else {
            Unsupported::NotServed(unserved)
        })
    })?;
    let range = component.image_range();
    let shared = Shared {
        ticker,
        fuel,
        code_size: range.end as usize - range.start as usize,
        image: None,
    };
    Ok((pre, shared))
}

/// The packages whose interfaces the linker serves (some at several
/// versions): an import of any other is named at load.
const SERVED: &[&str] = &[
    "wasi:cli/",
    "wasi:clocks/",
    "wasi:filesystem/",
    "wasi:io/",
    "wasi:random/",
    "wasi:sockets/",
    "wasi:http/",
    "wasi:config/",
    "wasi:keyvalue/",
    "spin:key-value/",
    "spin:variables/",
    "spin:sqlite/",
    "spin:redis/redis@",
    "spin:postgres/postgres@4.",
    "spin:postgres/postgres@3.0.",
    "spin:mysql/mysql@3.",
    "spin:mqtt/mqtt@3.",
    "fermyon:spin-cron/cron-types@2.",
    "fermyon:spin/redis-types",
    "fermyon:spin/key-value@2.0.",
    "fermyon:spin/variables@2.0.",
    "fermyon:spin/sqlite@2.0.",
    "fermyon:spin/redis@2.0.",
    "fermyon:spin/mqtt@2.0.",
    "fermyon:spin/rdbms-types@2.0.",
    "fermyon:spin/postgres@2.0.",
    "fermyon:spin/mysql@2.0.",
    "spin:mqtt-trigger/spin-mqtt-types@3.",
];

/// Whether the linker serves the import `name` (see [`SERVED`]; a WASI
/// release candidate's, [`luge_wasi_candidates::serves`]).
fn served(name: &str) -> bool {
    luge_wasi_candidates::serves(name)
        .unwrap_or_else(|| SERVED.iter().any(|served| name.starts_with(served)))
}

/// Whether `name` is one of Spin 1's unversioned `fermyon:spin`
/// interfaces (`fermyon:spin/inbound-http`, `fermyon:spin/key-value`...);
/// Spin 2's are `@2.0.0`, and Spin 2's unversioned Redis types, which
/// Luge serves, are not Spin 1's alone.
fn is_spin1(name: &str) -> bool {
    name.strip_prefix("fermyon:spin/")
        .is_some_and(|interface| !interface.contains('@') && !served(name))
}

/// Imports of `component` from packages Luge does not serve (a Spin app's
/// `spin:sqlite`, `fermyon:spin/llm`...), each named; at most 16.
fn not_served(component: &Component, engine: &Engine) -> Vec<String> {
    component
        .component_type()
        .imports(engine)
        .map(|(name, _)| name)
        .filter(|name| !served(name))
        .take(16)
        .map(str::to_owned)
        .collect()
}

/// Loads a prepared WASI 0.2 component as whichever function it is: an
/// HTTP handler or a command; anything else is refused naming the worlds.
pub(crate) fn load(
    pre: InstancePre<ComponentState>,
    shared: Shared,
) -> Result<Arc<dyn LoadedModule>, EngineError> {
    // A handler first: a Rust binary that exports the incoming handler
    // also exports wasi:cli/run (its `main`), but is meant as a handler.
    if let Some(pre) = HandlerPre::new(&pre) {
        return Ok(Arc::new(ProxyComponent {
            pre,
            shared,
            ahead: Ahead::default(),
        }));
    }
    match CommandPre::new(pre) {
        Ok(pre) => Ok(Arc::new(Command::new(pre, shared))),
        Err(e) => Err(Unsupported::ComponentWorld(e.into()).into()),
    }
}

/// Largest set of header fields a component may build or receive, bytes
/// (Wasmtime's default is 128 KiB): fields are the largest host objects a
/// guest can create at will, each held in its resource table.
const MAX_FIELDS_BYTES: usize = 64 << 10;

/// Resources (fields, bodies, streams, pollables, buckets...) a component
/// may hold at once: enough that the fields it could fill stay within its
/// memory limit again (256 MiB: 4096), at least 1024 (a request with many
/// outgoing requests holds a few hundred), at most 65536. Past it creating
/// one more traps, instead of growing the host's memory without bound
/// within the time limit (Wasmtime's default allows a million, each up
/// to 128 KiB of fields).
fn max_resources(memory_bytes: u64) -> usize {
    usize::try_from(memory_bytes / MAX_FIELDS_BYTES as u64)
        .unwrap_or(usize::MAX)
        .clamp(1024, 65_536)
}

/// What every kind of component keeps besides its pre-instance.
#[derive(Clone)]
pub(crate) struct Shared {
    pub(crate) ticker: Arc<EpochTicker>,
    fuel: bool,
    pub(crate) code_size: usize,
    /// The place of the file the code is mapped from, if it is (shared by
    /// the clones, given back with the last).
    pub(crate) image: Option<Arc<crate::image::Lease>>,
}

/// A store for one invocation, scheduled, with its captured streams.
struct Sandbox {
    store: Store<ComponentState>,
    stdout: MemoryOutputPipe,
    stderr: MemoryOutputPipe,
    /// Where its time limit counts from: when its store was made.
    started: Instant,
    /// Whether it was made ahead of its invocation, by an idle worker.
    ahead: bool,
}

impl Shared {
    /// A fresh store for `invocation`, run under `preemption` (`None`: to
    /// completion on the caller's thread).
    fn sandbox(
        &self,
        engine: &Engine,
        invocation: &Invocation,
        preemption: Option<Preemption>,
    ) -> Result<Sandbox, Outcome> {
        let started = Instant::now();
        let limits = invocation.action.limits;
        let stdout = MemoryOutputPipe::new(limits.capture_bytes());
        let stderr = MemoryOutputPipe::new(limits.capture_bytes());
        let mut store = self.store(engine, invocation, &stdout, &stderr, started)?;
        schedule(
            &mut store,
            &self.ticker,
            invocation,
            preemption.unwrap_or(Preemption {
                quantum: limits.timeout,
                enabled: false,
            }),
            started,
        );
        Ok(Sandbox {
            store,
            stdout,
            stderr,
            started,
            ahead: false,
        })
    }

    /// One invocation in a fresh store, whatever the world: `body`
    /// instantiates the component and calls its entry (the one thing each
    /// world writes), while this sets the store up, counts the sandbox as
    /// running for the epoch ticker, and tears it down into its outcome.
    pub(crate) async fn invoke(
        &self,
        engine: &Engine,
        invocation: &Invocation,
        preemption: Option<Preemption>,
        body: impl AsyncFnOnce(&mut Store<ComponentState>) -> wasmtime::Result<()>,
    ) -> Outcome {
        match self.sandbox(engine, invocation, preemption) {
            Ok(sandbox) => self.run_in(sandbox, invocation, body).await,
            Err(outcome) => outcome,
        }
    }

    /// [`Shared::invoke`] in a sandbox already set up for `invocation`.
    async fn run_in(
        &self,
        mut sandbox: Sandbox,
        invocation: &Invocation,
        body: impl AsyncFnOnce(&mut Store<ComponentState>) -> wasmtime::Result<()>,
    ) -> Outcome {
        let result = {
            let _running = self.ticker.enter();
            body(&mut sandbox.store).await
        };
        let Some(trace) = invocation.trace.as_ref() else {
            return sandbox.finish(result, invocation);
        };
        let ready = sandbox.store.data().instantiated.unwrap_or(sandbox.started);
        // Made ahead: instantiated before the invocation, in no time of its
        // own on the worker (the time limit still counts it).
        let (kind, started) = if sandbox.ahead {
            (luge_core::trace::InstanceKind::Ahead, ready)
        } else {
            (luge_core::trace::InstanceKind::Fresh, sandbox.started)
        };
        let ran = Instant::now();
        let outcome = sandbox.finish(result, invocation);
        luge_core::trace::phases(trace, kind, started, ready, ran, Instant::now());
        outcome
    }

    /// A store for `invocation`'s action, its stdout and stderr going to
    /// `stdout` and `stderr`, its memory limited and fuel set; not yet
    /// scheduled.
    pub(crate) fn store<O: StdoutStream + Clone + 'static>(
        &self,
        engine: &Engine,
        invocation: &Invocation,
        stdout: &O,
        stderr: &O,
        started: Instant,
    ) -> Result<Store<ComponentState>, Outcome> {
        let limits = invocation.action.limits;
        let ctx = wasi_builder(invocation, stdout, stderr)
            .map_err(|e| Outcome::failed(luge_core::error_line(&e)))?
            .build();
        // Host memory a component's resources hold is outside its linear
        // memory: bound it by the same limit (see MAX_FIELDS_BYTES).
        let mut table = ResourceTable::new();
        table.set_max_capacity(max_resources(limits.memory_bytes));
        let mut http = WasiHttpCtx::new();
        http.set_field_size_limit(MAX_FIELDS_BYTES);
        let mut store = Store::new(
            engine,
            ComponentState {
                ctx,
                table,
                limiter: SandboxLimiter::new(limits.memory_bytes),
                http,
                hooks: Hooks::new(
                    Arc::clone(&invocation.action),
                    started + limits.timeout,
                    invocation.calls.clone(),
                    invocation.trace.clone(),
                ),
                keyvalue: luge_state::component::KeyValueState {
                    state: invocation.state.clone(),
                    open: 0,
                },
                action: Arc::clone(&invocation.action),
                instantiated: None,
                otel: luge_telemetry::component::OtelState::default(),
            },
        );
        store.limiter(|state| &mut state.limiter);
        self.refuel(&mut store, &limits);
        Ok(store)
    }

    /// Gives `store` its fuel for one invocation under `limits`, when the
    /// engine meters fuel.
    pub(crate) fn refuel(&self, mut store: impl AsContextMut, limits: &luge_core::Limits) {
        if self.fuel {
            let _ = store
                .as_context_mut()
                .set_fuel(limits.fuel.unwrap_or(u64::MAX));
        }
    }
}

impl ComponentState {
    /// A reused instance's host state as a new request enters it: that
    /// request's calls and state session, and the latest time limit of the
    /// requests in the instance for its outgoing requests; when it is the
    /// only one (`alone`), the per-invocation counts start again, so that
    /// one after another, each request is bounded as in a fresh instance.
    pub(crate) fn enter_request(
        &mut self,
        deadline: Instant,
        calls: Option<Arc<dyn luge_core::calls::Calls>>,
        state: Option<Arc<dyn luge_core::state::State>>,
        alone: bool,
    ) {
        if alone {
            self.limiter.refused = false;
        }
        self.hooks.enter(deadline, calls, alone);
        self.keyvalue.state = state;
    }

    /// Whether a memory growth was refused.
    pub(crate) fn memory_refused(&self) -> bool {
        self.limiter.refused
    }
}

impl Sandbox {
    /// Tears the sandbox down and reports how `result` ended it.
    fn finish(self, result: wasmtime::Result<()>, invocation: &Invocation) -> Outcome {
        let refused = self.store.data().limiter.refused;
        let limits = &invocation.action.limits;
        let (stdout, stderr) = tear_down(self.store, self.stdout, self.stderr, limits);
        ended(result, refused, limits, stdout, stderr, self.started)
    }
}

/// How a `wasi:cli` command of one WASI version is instantiated and its
/// `run` called; the rest of a command (its sandbox, its outcome, its
/// `LoadedModule`) is written once, in [`Command`].
pub trait CommandWorld: Send + Sync + 'static {
    /// The engine the command was prepared on.
    fn engine(&self) -> &Engine;

    /// Instantiates the command in `store` and calls its `run`: `Ok(Err(()))`
    /// is the error result `run` returned.
    fn run(
        &self,
        store: &mut Store<ComponentState>,
    ) -> impl Future<Output = wasmtime::Result<Result<(), ()>>> + Send;
}

/// A loaded `wasi:cli` command, of WASI 0.2 or 0.3 (`W`).
pub struct Command<W> {
    world: W,
    shared: Shared,
}

impl<W: CommandWorld> Command<W> {
    /// The command prepared as `world`, with what every component shares.
    pub(crate) fn new(world: W, shared: Shared) -> Self {
        Self { world, shared }
    }

    async fn invoke(&self, invocation: Invocation, preemption: Option<Preemption>) -> Outcome {
        let world = &self.world;
        self.shared
            .invoke(world.engine(), &invocation, preemption, async |store| {
                // `run` returned its error result: exit status 1.
                world
                    .run(store)
                    .await?
                    .map_err(|()| wasmtime::Error::new(wasmtime_wasi::I32Exit(1)))
            })
            .await
    }
}

impl<W: CommandWorld> LoadedModule for Command<W> {
    fn has_export(&self, name: &str) -> bool {
        // A command's entry point is `wasi:cli/run`, which stands for the
        // core modules' `_start`; a component has no other entry.
        name == luge_core::action::COMMAND_ENTRY
    }

    fn run(&self, invocation: Invocation) -> Outcome {
        // The component linker is asynchronous: run it to completion on
        // this thread, inside WASI's tokio runtime (for its timers).
        wasmtime_wasi::runtime::in_tokio(self.invoke(invocation, None))
    }

    fn code_size(&self) -> usize {
        self.shared.code_size
    }

    fn start(self: Arc<Self>, invocation: Invocation, preemption: Preemption) -> SandboxFuture {
        Box::pin(async move { self.invoke(invocation, Some(preemption)).await })
    }
}

/// A `wasi:cli/command` of WASI 0.2.
impl CommandWorld for CommandPre<ComponentState> {
    fn engine(&self) -> &Engine {
        CommandPre::engine(self)
    }

    async fn run(&self, store: &mut Store<ComponentState>) -> wasmtime::Result<Result<(), ()>> {
        let command = self.instantiate_async(&mut *store).await?;
        instantiated(store);
        command.wasi_cli_run().call_run(&mut *store).await
    }
}

/// A loaded `wasi:http/proxy` component: an HTTP handler.
pub struct ProxyComponent {
    pre: HandlerPre<ComponentState>,
    shared: Shared,
    /// Whether, and how well, its sandboxes are made ahead of their
    /// requests on workers that do so.
    ahead: Ahead,
}

/// A handler's sandbox made ahead of its request: a store set up for the
/// function's action with no request's own parts yet, and the instance in
/// it, whose start has run.
struct Prepared {
    /// What it was made of, and for.
    module: Arc<ProxyComponent>,
    action: Arc<luge_core::Action>,
    sandbox: Sandbox,
    proxy: Handler,
    /// How long the instantiation took: counted in the request's time, as
    /// when it instantiates on demand.
    took: Duration,
    /// How much of its worker's CPU time the instantiation used: what
    /// decides whether the handler is quick (see `handle`).
    cpu: Duration,
}

impl ProxyComponent {
    /// The key its sandboxes made ahead for `action` are held under: the
    /// action's address, unique while a sandbox made for it holds it.
    fn ahead_key(action: &Arc<luge_core::Action>) -> usize {
        Arc::as_ptr(action) as usize
    }

    /// A sandbox for `action`, instantiated now, or `None` (see
    /// [`AHEAD_WITHIN`]). Runs on a worker with nothing else to do.
    fn prepare(self: &Arc<Self>, action: Arc<luge_core::Action>) -> Option<Prepared> {
        let started = Instant::now();
        // The action's own parts only: environment, calls, state and trace
        // are the request's, given as it takes the sandbox.
        let template = Invocation::new(Arc::clone(&action), Vec::new());
        let limits = action.limits;
        let stdout = MemoryOutputPipe::new(limits.capture_bytes());
        let stderr = MemoryOutputPipe::new(limits.capture_bytes());
        let engine = self.pre.engine();
        let mut store = self
            .shared
            .store(engine, &template, &stdout, &stderr, started)
            .ok()?;
        let within = Preemption {
            quantum: AHEAD_WITHIN,
            enabled: false,
        };
        // The worker's own CPU time, not the clock's: a worker that loses
        // its core to another process in the middle of a start is no
        // slower start.
        let cpu = thread_cpu_time();
        crate::sandbox::schedule_with(&mut store, &self.shared.ticker, within, move || {
            thread_cpu_time().saturating_sub(cpu) >= AHEAD_WITHIN
        });
        let instantiated = {
            let _running = self.shared.ticker.enter();
            let mut instantiate = std::pin::pin!(self.pre.instantiate_async(&mut store));
            // Polled once: a start that waits on a host call (which no
            // toolchain's handler does) is given up rather than driven.
            let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
            match instantiate.as_mut().poll(&mut cx) {
                std::task::Poll::Ready(result) => Some(result),
                std::task::Poll::Pending => None,
            }
        };
        // A start that used more of the worker than a quick handler does
        // (quick on demand once, slow ahead of requests) is run ahead no
        // more once that happens too often (`Ahead::judge`); said once, by
        // the first worker to find it.
        let used = thread_cpu_time().saturating_sub(cpu);
        let (slow, stopped) = self.ahead.judge(used);
        if stopped {
            tracing::info!(
                function = %action.name,
                cpu_us = used.as_micros(),
                "instantiating ahead of requests took too long; the handler is instantiated on demand from now on"
            );
        }
        match instantiated {
            Some(Ok(proxy)) => Some(Prepared {
                module: Arc::clone(self),
                action,
                sandbox: Sandbox {
                    store,
                    stdout,
                    stderr,
                    started,
                    ahead: true,
                },
                proxy,
                took: started.elapsed(),
                cpu: used,
            }),
            // The pool was full for the moment: try again another time.
            Some(Err(e))
                if e.downcast_ref::<wasmtime::PoolConcurrencyLimitError>()
                    .is_some() =>
            {
                None
            }
            // Interrupted at AHEAD_WITHIN: a slow preparation, counted
            // above with the others.
            Some(Err(e))
                if slow
                    && e.downcast_ref::<wasmtime::Trap>() == Some(&wasmtime::Trap::Interrupt) =>
            {
                None
            }
            // Said once, unless the CPU time it used was said above.
            failed => {
                if self.ahead.stop() {
                    // Its root cause only: a trap's message (an interrupt
                    // past AHEAD_WITHIN), or that the start waited.
                    let why = match failed.and_then(Result::err) {
                        Some(error) => error.root_cause().to_string(),
                        None => "its start waited on a host call".to_owned(),
                    };
                    tracing::info!(
                        function = %action.name,
                        %why,
                        "instantiating ahead of requests failed; the handler is instantiated on demand from now on"
                    );
                }
                None
            }
        }
    }

    /// The sandbox made ahead for `invocation`'s action on this thread, if
    /// one is held, set up for `invocation`: its environment, streams,
    /// calls, state, trace, fuel and time limit as a fresh one's, its time
    /// counted from when its instantiation began; with the CPU time its
    /// instantiation used.
    fn take_prepared(
        self: &Arc<Self>,
        invocation: &Invocation,
        preemption: Preemption,
    ) -> Option<Result<(Sandbox, Handler, Duration), Outcome>> {
        let key = Self::ahead_key(&invocation.action);
        let prepared = luge_core::teardown::take_prepared(key)?
            .downcast::<Prepared>()
            .ok()
            .filter(|p| {
                Arc::ptr_eq(&p.module, self) && Arc::ptr_eq(&p.action, &invocation.action)
            })?;
        let Prepared {
            mut sandbox,
            proxy,
            took,
            cpu,
            ..
        } = *prepared;
        let now = Instant::now();
        let started = now.checked_sub(took).unwrap_or(now);
        let limits = invocation.action.limits;
        let ctx = match wasi_builder(invocation, &sandbox.stdout, &sandbox.stderr) {
            Ok(mut builder) => builder.build(),
            Err(e) => return Some(Err(Outcome::failed(luge_core::error_line(&e)))),
        };
        let state = sandbox.store.data_mut();
        state.ctx = ctx;
        state.hooks = Hooks::new(
            Arc::clone(&invocation.action),
            started + limits.timeout,
            invocation.calls.clone(),
            invocation.trace.clone(),
        );
        state.keyvalue = luge_state::component::KeyValueState {
            state: invocation.state.clone(),
            open: 0,
        };
        state.otel = luge_telemetry::component::OtelState::default();
        state.instantiated = Some(now);
        self.shared.refuel(&mut sandbox.store, &limits);
        schedule(
            &mut sandbox.store,
            &self.shared.ticker,
            invocation,
            preemption,
            started,
        );
        sandbox.started = started;
        Some(Ok((sandbox, proxy, cpu)))
    }

    async fn handle(
        self: Arc<Self>,
        invocation: Invocation,
        request: Request,
        respond: Respond,
        preemption: Preemption,
    ) -> Outcome {
        let ahead = self.ahead.wanted();
        let prepared = if ahead {
            self.take_prepared(&invocation, preemption)
        } else {
            None
        };
        let (sandbox, proxy, took) = match prepared {
            Some(Ok((sandbox, proxy, cpu))) => (sandbox, Some(proxy), Some(cpu)),
            Some(Err(outcome)) => return outcome,
            None => match self
                .shared
                .sandbox(self.pre.engine(), &invocation, Some(preemption))
            {
                Ok(sandbox) => (sandbox, None, None),
                Err(outcome) => return outcome,
            },
        };
        // How much of its worker's CPU time instantiating on demand took,
        // in nanoseconds (`luge_core::ahead`: CPU time, not the clock's);
        // conservative where the instantiation yields and its worker runs
        // other work meanwhile: that is counted too.
        let on_demand = std::sync::atomic::AtomicU64::new(u64::MAX);
        let pre = &self.pre;
        let body = async |store: &mut Store<ComponentState>| {
            let mut http = store.data_mut().http();
            let resources = http
                .new_incoming_request(
                    Scheme::Http,
                    // The front end's errors (the client left, the body met
                    // its bound) in wasi:http's words.
                    request.map(|body| {
                        http_body_util::BodyExt::map_err(body, |e| {
                            wasmtime_wasi_http::Error::InternalError(Some(e.to_string()))
                        })
                    }),
                )
                .and_then(|request| {
                    let outparam = http.new_response_outparam_from_callback(move |response| {
                        respond(
                            response
                                .map(|response| {
                                    response.map(|body| {
                                        http_body_util::BodyExt::boxed_unsync(
                                            http_body_util::BodyExt::map_err(body, |e| {
                                                Box::new(e) as BodyError
                                            }),
                                        )
                                    })
                                })
                                .map_err(|code| HandlerError {
                                    code: format!("{code:?}"),
                                }),
                        );
                    })?;
                    Ok((request, outparam))
                });
            let (request, outparam) = resources?;
            let proxy = match proxy {
                Some(proxy) => proxy,
                None => {
                    let began = thread_cpu_time();
                    let proxy = pre.instantiate_async(&mut *store).await?;
                    instantiated(store);
                    let used = thread_cpu_time().saturating_sub(began);
                    let nanos = u64::try_from(used.as_nanos()).unwrap_or(u64::MAX);
                    on_demand.store(nanos, Ordering::Relaxed);
                    proxy
                }
            };
            proxy.call_handle(&mut *store, request, outparam).await
        };
        let outcome = self.shared.run_in(sandbox, &invocation, body).await;
        // After a request that went well, of a handler that instantiates
        // quickly (ahead or on demand), the worker makes the function's
        // next sandbox when it has nothing else to do.
        let cpu = took.unwrap_or(Duration::from_nanos(on_demand.load(Ordering::Relaxed)));
        if ahead
            && self.ahead.quick_after(cpu)
            && outcome.termination == luge_core::Termination::Exited(0)
        {
            let this = Arc::clone(&self);
            let action = Arc::clone(&invocation.action);
            luge_core::teardown::prepare_when_idle(Self::ahead_key(&action), move || {
                this.prepare(action)
                    .map(|prepared| Box::new(prepared) as Box<dyn std::any::Any>)
            });
        }
        outcome
    }
}

/// The [`LoadedModule`] methods every HTTP handler component shares: no
/// entry point to name (its entry is the world's), no command to run,
/// the size of its code (`self.shared`'s), HTTP served.
macro_rules! handler_methods {
    () => {
        fn has_export(&self, _name: &str) -> bool {
            false
        }

        fn run(&self, _invocation: Invocation) -> Outcome {
            Outcome::failed(luge_core::handler::NOT_A_COMMAND)
        }

        fn code_size(&self) -> usize {
            self.shared.code_size
        }

        fn serves_http(&self) -> bool {
            true
        }
    };
}
pub(crate) use handler_methods;

impl LoadedModule for ProxyComponent {
    handler_methods!();

    fn start_http(
        self: Arc<Self>,
        invocation: Invocation,
        request: Request,
        respond: Respond,
        preemption: Preemption,
    ) -> SandboxFuture {
        Box::pin(self.handle(invocation, request, respond, preemption))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::WasmtimeConfig;

    fn engine(abi: ComponentAbi) -> Engine {
        let config = WasmtimeConfig {
            pooling: false,
            ..WasmtimeConfig::default()
        };
        Engine::new(&config.to_wasmtime(abi).expect("config")).expect("engine")
    }

    /// A slice marked synchronous links on the synchronous engine, and one
    /// marked concurrent does not (so it is marked so for a reason, and a
    /// component of it is compiled by the concurrent engine); every slice
    /// links on the concurrent engine.
    #[test]
    fn each_slice_links_on_the_engines_it_names() {
        let (synchronous, concurrent) = (engine(Synchronous), engine(Concurrent));
        for &(slice, needs, add) in SLICES {
            let mut on_sync = Linker::<ComponentState>::new(&synchronous);
            assert_eq!(
                add(&mut on_sync).is_ok(),
                needs == Synchronous,
                "{slice} is marked {needs:?}"
            );
            let mut on_concurrent = Linker::<ComponentState>::new(&concurrent);
            assert!(add(&mut on_concurrent).is_ok(), "{slice}");
        }
        assert!(linker(&synchronous, Synchronous).is_ok());
        assert!(linker(&concurrent, Concurrent).is_ok());
    }

    /// A component importing each world of Luge's WIT root that a hand
    /// linked binding serves (`spin:postgres` 4.0 and 4.1, Spin 2's
    /// MySQL), or that one of Spin 2's synchronous interfaces is bound
    /// from, every function of it, made from the WIT with
    /// `wit-component`'s dummy module, links on the synchronous engine:
    /// the hand-written names and types are the WIT's.
    #[test]
    fn hand_linked_interfaces_link_as_their_wit_says() {
        let engine = engine(Synchronous);
        let linker = linker(&engine, Synchronous).expect("linker");
        for world in [
            "host-postgres40",
            "host-postgres41",
            "host-spin2-key-value",
            "host-spin2-sqlite",
            "host-spin2-redis",
            "host-spin2-mqtt",
            "host-spin2-postgres",
            "host-spin2-mysql",
        ] {
            let component = luge_testkit::wit::component_importing(world);
            let component = Component::new(&engine, component).expect("compiles");
            linker
                .instantiate_pre(&component)
                .unwrap_or_else(|e| panic!("{world}: {e:?}"));
        }
    }

    /// Of WASI's release candidates, 2023-10-18's and 2023-11-10's proxy
    /// worlds are served (but the first's timezone) and nothing else; Spin 1's unversioned
    /// interfaces are told apart from Spin 2's, which are versioned, and
    /// from the unversioned Redis types Luge serves.
    #[test]
    fn served_names_the_candidate_interfaces_and_spin_1() {
        for name in [
            "wasi:io/poll@0.2.0-rc-2023-10-18",
            "wasi:io/streams@0.2.0-rc-2023-10-18",
            "wasi:http/types@0.2.0-rc-2023-10-18",
            "wasi:http/outgoing-handler@0.2.0-rc-2023-10-18",
            "wasi:cli/stderr@0.2.0-rc-2023-10-18",
            "wasi:http/types@0.2.0-rc-2023-11-10",
            "wasi:io/error@0.2.0-rc-2023-11-10",
            "wasi:io/poll@0.2.0-rc-2023-11-10",
            "wasi:io/poll@0.2.6",
            "fermyon:spin/key-value@2.0.0",
            "fermyon:spin/redis-types",
        ] {
            assert!(served(name), "{name}");
            assert!(!is_spin1(name), "{name}");
        }
        for name in [
            "wasi:clocks/timezone@0.2.0-rc-2023-10-18",
            "wasi:filesystem/types@0.2.0-rc-2023-10-18",
            "wasi:sockets/tcp@0.2.0-rc-2023-10-18",
            "wasi:io/error@0.2.0-rc-2023-10-18",
            "wasi:filesystem/types@0.2.0-rc-2023-11-10",
            "wasi:io/poll@0.2.0-rc-2023-12-05",
            "wasi:http/types@0.2.0-rc-2023-10-18x",
            "fermyon:spin/llm@2.0.0",
        ] {
            assert!(!served(name), "{name}");
        }
        assert!(is_spin1("fermyon:spin/key-value"));
        assert!(is_spin1("fermyon:spin/inbound-http"));
        assert!(!is_spin1("fermyon:spin/llm@2.0.0"));
    }
}
