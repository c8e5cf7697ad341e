//! The executor's one object: what this process hosts ([`Mode`]), its
//! settings, admission, metrics, and the execution pipeline every protocol
//! ends in (admit, schedule, record). The protocols (`openwhisk`,
//! `standalone`, `handler`, `calls`) sit above it; the router and the
//! listeners above them. Nothing here imports a layer above.

use std::sync::Arc;
use std::sync::atomic::AtomicU64;
use std::time::{Duration, Instant};

use hyper::StatusCode;
use hyper::header::{self, HeaderValue};
use luge_core::{Invocation, LoadedModule, Outcome};
use luge_host::{Function, FunctionHost, RouteTable};
use luge_openwhisk::{Container, Containers};

use crate::admission::{Admission, Admitted, Refused, Tree};
use crate::auth::OperatorToken;
use crate::cli::Settings;
use crate::dispatch;
use crate::http::{self, Response};
use crate::metrics::{self, Metrics};
use crate::router::Api;
use crate::telemetry::Span;

/// What this process hosts.
pub(crate) enum Mode {
    /// `luge proxy`: exactly one container.
    Proxy(Arc<Container>),
    /// `luge serve`: containers by id, and functions on routes.
    Serve {
        containers: Containers,
        host: Arc<FunctionHost>,
        /// Functions' shared state.
        state: Arc<luge_state::StateStore>,
        /// The triggers whose events wake functions of `host`, started
        /// with the listeners.
        triggers: Vec<luge_host::ConfiguredTrigger>,
    },
}

/// A Sledge tenant: its own port, its own routes.
pub(crate) struct TenantSite {
    pub(crate) name: String,
    pub(crate) port: u16,
    pub(crate) routes: RouteTable,
}

/// The executor: one per process.
pub(crate) struct App {
    pub(crate) settings: Settings,
    pub(crate) metrics: Metrics,
    pub(crate) admission: Admission,
    pub(crate) token: Option<OperatorToken>,
    pub(crate) mode: Mode,
    /// The executor's own endpoints, for this mode.
    pub(crate) api: Api,
    pub(crate) tenants: Vec<TenantSite>,
    pub(crate) next_request: AtomicU64,
    /// Told the name of an uploaded function that was uploaded, replaced
    /// or deleted (set by the layer that runs triggers, which this one
    /// does not know).
    pub(crate) uploads_changed: std::sync::OnceLock<UploadsChanged>,
    /// The tasks of each uploaded function's triggers.
    pub(crate) uploaded_triggers: std::sync::Mutex<std::collections::HashMap<String, Tasks>>,
}

/// How long past its run's time limit a worker may stay in one poll
/// before liveness counts it stuck: the engine ends a guest's run at its
/// time limit within an epoch tick, so a worker held 10 s longer is held
/// by something else (a host call blocking its thread), and a restart is
/// the remedy.
const STUCK_AFTER: std::time::Duration = std::time::Duration::from_secs(10);

/// What is told an uploaded function's name when it changed.
pub(crate) type UploadsChanged = Box<dyn Fn(&str) + Send + Sync>;

/// Tasks to abort together.
pub(crate) type Tasks = Vec<tokio::task::AbortHandle>;

/// A configured executor, ready to serve.
pub struct Executor(pub(crate) Arc<App>);

/// When an invocation's state operations (a global-tier round trip,
/// waiting for a lock) must end: a tenth of its time limit (at most
/// 100 ms) before the invocation's time does, so the function can still
/// act on a refusal.
fn state_until(action: &luge_core::Action, arrived: Instant) -> Instant {
    let timeout = action.limits.timeout;
    arrived + timeout - (timeout / 10).min(Duration::from_millis(100))
}

impl App {
    pub(crate) fn new(
        settings: Settings,
        mode: Mode,
        token: Option<OperatorToken>,
        tenants: Vec<TenantSite>,
    ) -> Self {
        let state = match &mode {
            Mode::Serve { state, .. } => Some(Arc::clone(state)),
            Mode::Proxy(_) => None,
        };
        let admission = Admission::new(settings.admission.clone());
        let metrics = Metrics::new(crate::metrics::Pulled {
            modules: Arc::clone(&settings.registry),
            admission: admission.clone(),
            scheduler: Arc::clone(&settings.scheduler),
            front_ends: settings.worker_runtimes.clone(),
            state,
            telemetry: settings.telemetry.clone(),
        });
        let api = match &mode {
            Mode::Proxy(_) => Api::proxy(),
            Mode::Serve { .. } => Api::serve(),
        };
        Self {
            admission,
            settings,
            metrics,
            token,
            mode,
            api,
            tenants,
            next_request: AtomicU64::new(1),
            uploads_changed: std::sync::OnceLock::new(),
            uploaded_triggers: std::sync::Mutex::default(),
        }
    }

    /// Tells whoever follows uploads that `name` changed.
    pub(crate) fn upload_changed(&self, name: &str) {
        if let Some(changed) = self.uploads_changed.get() {
            changed(name);
        }
    }

    /// Stops every uploaded function's triggers (at shutdown).
    pub(crate) fn stop_uploaded_triggers(&self) {
        let mut running = self
            .uploaded_triggers
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        for task in running.drain().flat_map(|(_, tasks)| tasks) {
            task.abort();
        }
    }

    /// Records a fused call (run on its caller's thread, not scheduled).
    pub(crate) fn observe_fused(
        &self,
        function: &str,
        termination: &luge_core::Termination,
        elapsed: Duration,
        execution: Duration,
        deadline: Instant,
    ) {
        self.metrics
            .observe(function, termination, elapsed, Duration::ZERO);
        // Fused runs bypass the scheduler; its statistics still learn them.
        self.settings.scheduler.execution_stats().record(
            &Arc::from(function),
            execution,
            Instant::now() > deadline,
            0,
        );
    }

    /// A session of `function`'s shared state for an invocation that
    /// arrived at `arrived` (`luge serve` only).
    pub(crate) fn state_session(
        &self,
        function: &Function,
        arrived: Instant,
    ) -> Option<Arc<dyn luge_core::state::State>> {
        self.session(None, function.private_store(), &function.action, arrived)
    }

    /// A session of shared state for an activation of a container of
    /// `luge serve` (`luge proxy`, one container per process, has none).
    /// OpenWhisk names the action `/namespace/[package/]action` in the
    /// activation (`__OW_ACTION_NAME`, from the invoker): its private
    /// namespace is the action's, and the namespaces its
    /// `state.namespaces` annotation grants are its OpenWhisk namespace's
    /// own, so one OpenWhisk tenant cannot name another's.
    pub(crate) fn container_state(
        &self,
        invocation: &Invocation,
        arrived: Instant,
    ) -> Option<Arc<dyn luge_core::state::State>> {
        let action = &invocation.action;
        let named = luge_openwhisk::activation::action_name(&invocation.env);
        let (scope, name) = named.unwrap_or(("-", action.name.as_str()));
        self.session(Some(&format!("ow:{scope}")), name, action, arrived)
    }

    /// A session of shared state in `scope` (a tenant's namespaces; none
    /// for the host's own functions) whose private namespace is `private`,
    /// under `action`'s grants, for an invocation that arrived at
    /// `arrived` (`luge serve` only).
    fn session(
        &self,
        scope: Option<&str>,
        private: &str,
        action: &luge_core::Action,
        arrived: Instant,
    ) -> Option<Arc<dyn luge_core::state::State>> {
        let Mode::Serve { state, .. } = &self.mode else {
            return None;
        };
        Some(Arc::new(state.session(
            scope,
            private,
            &action.capabilities.state,
            state_until(action, arrived),
        )))
    }

    /// The standalone host's functions (`luge serve` only).
    pub(crate) fn function_host(&self) -> Option<&Arc<FunctionHost>> {
        match &self.mode {
            Mode::Serve { host, .. } => Some(host),
            Mode::Proxy(_) => None,
        }
    }

    pub(crate) fn metrics_reply(&self) -> Response {
        match self.metrics.render() {
            Ok(text) => http::text(StatusCode::OK, metrics::CONTENT_TYPE, text),
            Err(_) => http::json_error(
                StatusCode::INTERNAL_SERVER_ERROR,
                "Could not encode the metrics.",
            ),
        }
    }

    pub(crate) fn health(&self) -> Response {
        let (containers, routes, chains, functions) = match &self.mode {
            Mode::Proxy(container) => (usize::from(container.is_ready()), 0, 0, 0),
            Mode::Serve {
                containers, host, ..
            } => (
                containers.len(),
                host.route_count(),
                host.chain_count(),
                host.list_uploaded().len(),
            ),
        };
        let registry = &self.settings.registry;
        let tenants: Vec<_> = self
            .tenants
            .iter()
            .map(|t| serde_json::json!({ "name": t.name, "routes": t.routes.len() }))
            .collect();
        http::json(
            StatusCode::OK,
            &serde_json::json!({
                "status": "ok",
                "engine": registry.runtime().id().to_string(),
                "containers": containers,
                "routes": routes,
                "chains": chains,
                "uploaded_functions": functions,
                "tenants": tenants,
                "modules": registry.live_modules(),
                "compiles": registry.stats().compiles,
                "pending": self.admission.pending(),
                "scheduler": {
                    "workers": self.settings.scheduler.workers(),
                    "completed": self.settings.scheduler.stats().completed,
                    "preemptions": self.settings.scheduler.stats().preemptions,
                    "early_preemptions": self.settings.scheduler.stats().early_preemptions,
                },
            }),
        )
    }

    /// `GET /livez` (Kubernetes' liveness probe; also Spin's
    /// `/.well-known/spin/health`): 200 while every worker comes back from
    /// its polls, 503 naming the workers that are stuck (see
    /// [`STUCK_AFTER`]).
    pub(crate) fn liveness(&self) -> Response {
        let stuck = self.settings.scheduler.stuck_workers(STUCK_AFTER);
        if stuck.is_empty() {
            return http::text(StatusCode::OK, "text/plain", "OK".to_owned());
        }
        tracing::error!(?stuck, "workers stuck: liveness fails");
        http::json_error(
            StatusCode::SERVICE_UNAVAILABLE,
            &format!(
                "Workers {stuck:?} are stuck: held in one run over {} s past its time limit.",
                STUCK_AFTER.as_secs()
            ),
        )
    }

    /// `GET /readyz` (Kubernetes' readiness probe): 200 once this process
    /// serves (it listens only once every configured function is
    /// compiled and its app's components loaded) and, for `luge proxy`,
    /// its action is initialised; 503 before `/init`. (From SIGTERM on it
    /// accepts no connection, and each open one closes after the request
    /// it serves: there is no draining state to answer.)
    pub(crate) fn readiness(&self) -> Response {
        match &self.mode {
            Mode::Proxy(container) if !container.is_ready() => http::json_error(
                StatusCode::SERVICE_UNAVAILABLE,
                "Not initialised: no action yet (POST /init).",
            ),
            _ => http::text(StatusCode::OK, "text/plain", "OK".to_owned()),
        }
    }

    /// Admits (for `tree`), schedules and records one invocation: its
    /// outcome, or the 503 to answer when admission refuses it.
    pub(crate) async fn execute(
        &self,
        tree: &Arc<Tree>,
        module: Arc<dyn LoadedModule>,
        invocation: Invocation,
        arrived: Instant,
        deadline: Instant,
        span: &Span,
    ) -> Result<Outcome, Response> {
        let place = self
            .admit(tree, &invocation.action.name)
            .map_err(|refused| {
                span.refused("admission refused");
                self.overloaded(refused)
            })?;
        Ok(self
            .execute_admitted(module, invocation, arrived, deadline, place, span)
            .await)
    }

    /// A place for one more invocation of `function` in `tree`, or why
    /// not (counted as an overload of `function`, and per tenant).
    pub(crate) fn admit(&self, tree: &Arc<Tree>, function: &str) -> Result<Admitted, Refused> {
        let admitted = self.admission.try_admit(tree);
        self.metrics
            .observe_admission(tree.tenant(), admitted.as_ref().err().copied());
        if admitted.is_err() {
            self.metrics.observe_overload(function);
        }
        admitted
    }

    /// The 503 of a refused admission, with `Retry-After`.
    pub(crate) fn overloaded(&self, refused: Refused) -> Response {
        overloaded(refused, self.admission.limit())
    }

    /// [`App::execute`] for a caller already holding an admission place
    /// (a chain holds one for all its stages; each stage's job holds it
    /// too, until its sandbox has ended).
    pub(crate) async fn execute_admitted(
        &self,
        module: Arc<dyn LoadedModule>,
        mut invocation: Invocation,
        arrived: Instant,
        deadline: Instant,
        place: Admitted,
        span: &Span,
    ) -> Outcome {
        let action = Arc::clone(&invocation.action);
        let cancel = invocation.cancel.clone();
        invocation.trace = span.trace();
        let sandbox = module.start(invocation.with_traced_state(), self.settings.preemption);
        self.execute_started(&action, cancel, sandbox, arrived, deadline, place, span)
            .await
    }

    /// Schedules and records a sandbox already started for `action` (an
    /// HTTP handler's, or [`App::execute_admitted`]'s), ending `span`
    /// (whose trace the sandbox was started with) with its outcome.
    #[allow(clippy::too_many_arguments)]
    pub(crate) async fn execute_started(
        &self,
        action: &luge_core::Action,
        cancel: luge_core::Cancellation,
        sandbox: luge_core::SandboxFuture,
        arrived: Instant,
        deadline: Instant,
        place: Admitted,
        span: &Span,
    ) -> Outcome {
        // Dropped unfinished when the client goes away: counted there, as
        // the invocation is cancelled (see dispatch::run).
        let mut in_flight = InFlight {
            metrics: &self.metrics,
            function: &action.name,
            finished: false,
        };
        let dispatched = dispatch::run(
            &self.settings.scheduler,
            action,
            cancel,
            sandbox,
            deadline,
            place,
        )
        .await;
        in_flight.finished = true;
        let elapsed = arrived.elapsed();
        let outcome = &dispatched.outcome;
        self.metrics.observe(
            &action.name,
            &outcome.termination,
            elapsed,
            dispatched.queue_delay,
        );
        if let Some(telemetry) = &self.settings.telemetry {
            span.logs(telemetry, &action.name, outcome);
            telemetry.invoked(luge_telemetry::Invoked {
                function: &action.name,
                trigger: span.trigger(),
                duration: elapsed,
                failed: outcome.termination != luge_core::Termination::Exited(0),
                timed_out: matches!(outcome.termination, luge_core::Termination::TimedOut(_)),
                cold: span.is_cold(),
            });
            span.dispatched(arrived, &dispatched);
        }
        tracing::debug!(
            function = %action.name,
            termination = ?outcome.termination,
            queue_us = dispatched.queue_delay.as_micros() as u64,
            elapsed_us = arrived.elapsed().as_micros() as u64,
            "invocation"
        );
        dispatched.outcome
    }
}

/// An invocation a request is waiting for; if the request is dropped first
/// (the client went away), it is counted as `client_gone`.
struct InFlight<'a> {
    metrics: &'a Metrics,
    function: &'a str,
    finished: bool,
}

impl Drop for InFlight<'_> {
    fn drop(&mut self) {
        if !self.finished {
            tracing::info!(function = %self.function, "client went away: invocation cancelled");
            self.metrics.observe_client_gone(self.function);
        }
    }
}

/// The 503 of a refused admission, with `Retry-After`.
fn overloaded(refused: Refused, limit: usize) -> Response {
    let message = match refused {
        Refused::Full | Refused::Tree => {
            format!("Luge is at its limit of {limit} pending invocations; retry later.")
        }
        Refused::OverShare => format!(
            "This tenant holds more than its fair share of Luge's {limit} invocation places while others wait; retry later."
        ),
    };
    let mut response = http::json_error(StatusCode::SERVICE_UNAVAILABLE, &message);
    response
        .headers_mut()
        .insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
    response
}

/// A function's stderr is its log: forwarded line by line, bounded so one
/// chatty function cannot flood the executor's log.
pub(crate) fn log_stderr(function: &str, request_id: u64, stderr: &[u8]) {
    const MAX_LINES: usize = 64;
    if stderr.is_empty() {
        return;
    }
    let text = String::from_utf8_lossy(stderr);
    let mut lines = text.lines();
    for line in lines.by_ref().take(MAX_LINES) {
        tracing::info!(target: "luge::function", function, request_id, "{line}");
    }
    let dropped = lines.count();
    if dropped > 0 {
        tracing::info!(target: "luge::function", function, request_id, dropped, "stderr lines dropped");
    }
}
