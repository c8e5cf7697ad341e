//! The request handlers of `luge proxy` and `luge serve`: a request is
//! routed (function routes and chains, else the executor's API, see
//! [`crate::router`]) and handed to the scheduler; config assembly is
//! [`crate::assemble`]'s.

pub use crate::assemble::build;

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use anyhow::Context;
use bytes::Bytes;
use hyper::header::HeaderValue;
use hyper::{Method, StatusCode};
use luge_core::{Invocation, LoadedModule, Outcome};
use luge_host::{Function, FunctionHost, RouteTable};
use luge_openwhisk::{Container, Containers, Reply};
use tokio::net::TcpListener;
use tracing::Instrument;

use crate::cli::{Cli, Settings};
use crate::dispatch::{self, Admission};
use crate::http::{self, Request, Response};
use crate::metrics::{self, Metrics};
use crate::router::{Api, Endpoint};
use crate::standalone::{self, HttpInput, OperatorToken};

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
    },
}

/// A Sledge tenant: its own port, its own routes.
pub(crate) struct TenantSite {
    pub(crate) name: String,
    pub(crate) port: u16,
    pub(crate) routes: RouteTable,
}

/// Which listener a request came in on.
#[derive(Debug, Clone, Copy)]
enum Site {
    Main,
    Tenant(usize),
}

pub(crate) struct App {
    pub(crate) settings: Settings,
    pub(crate) metrics: Metrics,
    pub(crate) admission: Admission,
    pub(crate) token: Option<OperatorToken>,
    mode: Mode,
    /// The executor's own endpoints, for this mode.
    api: Api,
    tenants: Vec<TenantSite>,
    next_request: AtomicU64,
}

/// Runs the command until SIGINT or SIGTERM.
pub async fn run(cli: Cli) -> anyhow::Result<()> {
    let (listen, executor) = build(cli)?;
    // Tenants are announced before the main listener, so whoever waits for
    // the main announcement finds the tenants' already written.
    let mut tenants = Vec::with_capacity(executor.0.tenants.len());
    for (index, tenant) in executor.0.tenants.iter().enumerate() {
        let addr = SocketAddr::new(listen.ip(), tenant.port);
        let listener = TcpListener::bind(addr)
            .await
            .with_context(|| format!("tenant {:?}: cannot listen on {addr}", tenant.name))?;
        eprintln!(
            "luge tenant {} listening on http://{}",
            tenant.name,
            listener.local_addr()?
        );
        tenants.push((index, listener));
    }
    let listener = http::bind(listen).await?;
    serve_sites(listener, tenants, executor, shutdown_signal()).await;
    Ok(())
}

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

/// Serves `executor` on `listener` until `shutdown` completes. Sledge
/// tenants' listeners are bound by [`run`] only.
pub async fn serve(
    listener: TcpListener,
    executor: Executor,
    shutdown: impl std::future::Future<Output = ()>,
) {
    serve_sites(listener, Vec::new(), executor, shutdown).await;
}

async fn serve_sites(
    listener: TcpListener,
    tenants: Vec<(usize, TcpListener)>,
    executor: Executor,
    shutdown: impl std::future::Future<Output = ()>,
) {
    let app = executor.0;
    let limits = app.settings.connections;
    let (stop, stopped) = tokio::sync::watch::channel(false);
    let open = http::open_connections(&limits);
    let mut loops = Vec::new();
    for (index, listener) in tenants {
        let handler = handler(Arc::clone(&app), Site::Tenant(index));
        loops.push(tokio::spawn(http::serve(
            listener,
            handler,
            limits,
            Arc::clone(&open),
            until_stopped(stopped.clone()),
        )));
    }
    let main = serve_main(listener, &app, open, stopped);
    tokio::pin!(main);
    tokio::select! {
        () = &mut main => {}
        () = shutdown => {
            let _ = stop.send(true);
            main.await;
        }
    }
    for l in loops {
        let _ = l.await;
    }
}

/// How long a new connection may wait for a worker to accept it before
/// this runtime's threads do (`http::serve_unclaimed`): a worker running
/// short functions reaches a scheduling point within tens of µs, one running
/// a long sandbox only at the end of its quantum (5 ms by default).
const UNCLAIMED_GRACE: Duration = Duration::from_millis(2);

/// Serves the main listener: on every worker's runtime, all accepting from
/// the one socket, with worker front ends (and on this runtime what they
/// leave unclaimed); else on this runtime.
async fn serve_main(
    listener: TcpListener,
    app: &Arc<App>,
    open: http::OpenConnections,
    stopped: tokio::sync::watch::Receiver<bool>,
) {
    let limits = app.settings.connections;
    let handler = handler(Arc::clone(app), Site::Main);
    let Some(runtimes) = app.settings.worker_runtimes.clone() else {
        return http::serve(listener, handler, limits, open, until_stopped(stopped)).await;
    };
    let socket = match listener.into_std() {
        Ok(socket) => socket,
        Err(e) => return tracing::error!(error = %e, "cannot share the listener"),
    };
    let mut loops = Vec::with_capacity(runtimes.handles().len() + 1);
    match socket.try_clone() {
        Ok(socket) => loops.push(tokio::spawn(http::serve_unclaimed(
            socket,
            UNCLAIMED_GRACE,
            handler.clone(),
            limits,
            Arc::clone(&open),
            until_stopped(stopped.clone()),
        ))),
        Err(e) => tracing::warn!(error = %e, "no fallback for connections the workers leave"),
    }
    for (worker, runtime) in runtimes.handles().iter().enumerate() {
        // A descriptor of the same socket per worker, registered with that
        // worker's runtime (from_std runs there).
        let socket = match socket.try_clone() {
            Ok(socket) => socket,
            Err(e) => {
                tracing::error!(worker, error = %e, "cannot share the listener");
                continue;
            }
        };
        let (handler, open) = (handler.clone(), Arc::clone(&open));
        let shutdown = until_stopped(stopped.clone());
        loops.push(runtime.spawn(async move {
            match TcpListener::from_std(socket) {
                Ok(listener) => http::serve(listener, handler, limits, open, shutdown).await,
                Err(e) => tracing::error!(worker, error = %e, "cannot listen on a worker"),
            }
        }));
    }
    for accepting in loops {
        let _ = accepting.await;
    }
}

/// Completes once `stopped` turns true (or its sender is gone).
async fn until_stopped(mut stopped: tokio::sync::watch::Receiver<bool>) {
    let _ = stopped.wait_for(|&s| s).await;
}

fn handler(
    app: Arc<App>,
    site: Site,
) -> impl Fn(Request) -> std::pin::Pin<Box<dyn std::future::Future<Output = Response> + Send>>
+ Clone
+ Send
+ Sync
+ 'static {
    move |request: Request| {
        let app = Arc::clone(&app);
        let id = app.next_request.fetch_add(1, Ordering::Relaxed);
        let span = tracing::info_span!("request", id, method = %request.method(), path = %request.uri().path());
        Box::pin(
            async move {
                let mut response = app.handle(site, id, request).await;
                response
                    .headers_mut()
                    .insert("x-request-id", HeaderValue::from(id));
                response
            }
            .instrument(span),
        )
    }
}

async fn shutdown_signal() {
    let ctrl_c = tokio::signal::ctrl_c();
    #[cfg(unix)]
    {
        let mut term =
            match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
                Ok(term) => term,
                Err(_) => {
                    let _ = ctrl_c.await;
                    return;
                }
            };
        tokio::select! {
            _ = ctrl_c => {},
            _ = term.recv() => {},
        }
    }
    #[cfg(not(unix))]
    let _ = ctrl_c.await;
    tracing::info!("shutting down");
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
        let metrics = Metrics::new(
            Arc::clone(&settings.registry),
            Arc::clone(&settings.scheduler),
            state,
        );
        let api = match &mode {
            Mode::Proxy(_) => Api::proxy(),
            Mode::Serve { .. } => Api::serve(),
        };
        Self {
            admission: Admission::new(settings.max_pending),
            settings,
            metrics,
            token,
            mode,
            api,
            tenants,
            next_request: AtomicU64::new(1),
        }
    }

    async fn handle(self: Arc<Self>, site: Site, request_id: u64, request: Request) -> Response {
        let method = request.method().clone();
        let path = request.uri().path().to_owned();
        // An HTTP handler takes the request as it comes, its body unread.
        if let Some(function) = self.handler_at(site, &path) {
            return self.invoke_handler(function, request, request_id).await;
        }
        let query = request.uri().query().map(str::to_owned);
        let headers = request.headers().clone();
        // Every body is read (bounded) before routing, even where the route
        // ignores it: a reply sent over an unread body forces hyper to close
        // the connection, breaking clients that pipeline on keep-alive.
        let body = match http::read_body(request, self.settings.max_body_bytes).await {
            Ok(body) => body,
            Err(response) => return response,
        };
        let input = |body| HttpInput {
            method: method.clone(),
            query: query.clone(),
            headers: headers.clone(),
            body,
            request_id,
        };
        if let Site::Tenant(index) = site {
            return match (self.tenants.get(index), path.as_str()) {
                (_, "/healthz") if method == Method::GET => self.health(),
                (_, "/metrics") if method == Method::GET => self.metrics(),
                (Some(tenant), _) => match tenant.routes.get(&path) {
                    Some(function) => self.invoke_function(function, input(body)).await,
                    None => not_found(&method, &path),
                },
                (None, _) => not_found(&method, &path),
            };
        }
        // Function routes and chains never overlap the API (refused where
        // they are declared: FunctionHost::reserve), so order is moot.
        if let Mode::Serve { host, .. } = &self.mode {
            if let Some(function) = host.route(&path) {
                return self.invoke_function(function, input(body)).await;
            }
            if let Some(chain) = host.chain(&path) {
                return self.invoke_chain(chain, input(body)).await;
            }
        }
        match self.api.at(&path) {
            Some((endpoint, param)) if endpoint.allows(&method) => {
                let param = param.unwrap_or_default().to_owned();
                self.endpoint(endpoint, &param, &method, query.as_deref(), &headers, body)
                    .await
            }
            Some((endpoint, _)) => http::json_error(
                StatusCode::METHOD_NOT_ALLOWED,
                &format!("{method} is not allowed on {}.", endpoint.pattern()),
            ),
            None => not_found(&method, &path),
        }
    }

    /// Serves one endpoint of the executor's API; `param` is its `{id}` or
    /// `{name}`.
    async fn endpoint(
        &self,
        endpoint: Endpoint,
        param: &str,
        method: &Method,
        query: Option<&str>,
        headers: &hyper::HeaderMap,
        body: Bytes,
    ) -> Response {
        match (endpoint, &self.mode) {
            (Endpoint::Health, _) => self.health(),
            (Endpoint::Metrics, _) => self.metrics(),
            (Endpoint::ProxyInit, Mode::Proxy(container)) => {
                self.init(body, Arc::clone(container)).await
            }
            (Endpoint::ProxyRun, Mode::Proxy(container)) => self.run(&body, container).await,
            (Endpoint::Functions, Mode::Serve { host, .. }) => {
                self.manage(host, method, None, headers, body).await
            }
            (Endpoint::Function, Mode::Serve { host, .. }) => {
                self.manage(host, method, Some(param), headers, body).await
            }
            (Endpoint::ContainerInit, Mode::Serve { containers, .. }) => {
                match containers.get_or_create(param) {
                    Ok(hosted) => self.init(body, Arc::clone(&hosted.container)).await,
                    Err(reply) => http::reply(reply),
                }
            }
            (Endpoint::ContainerRun, Mode::Serve { containers, .. }) => {
                match containers.get(param) {
                    Ok(hosted) => self.run(&body, &hosted.container).await,
                    Err(reply) => http::reply(reply),
                }
            }
            (Endpoint::ContainerDestroy, Mode::Serve { containers, .. }) => {
                match containers.destroy(param) {
                    Ok(()) => http::json(StatusCode::OK, &serde_json::json!({ "ok": true })),
                    Err(reply) => http::reply(reply),
                }
            }
            (Endpoint::Containers, Mode::Serve { containers, .. }) => {
                match container_prefix(query) {
                    Ok(prefix) if method == Method::GET => http::json(
                        StatusCode::OK,
                        &serde_json::json!({ "containers": containers.ids(&prefix) }),
                    ),
                    Ok(prefix) => {
                        let destroyed = containers.destroy_prefix(&prefix);
                        tracing::info!(%prefix, destroyed, "containers purged");
                        http::json(
                            StatusCode::OK,
                            &serde_json::json!({ "destroyed": destroyed }),
                        )
                    }
                    Err(reply) => http::reply(reply),
                }
            }
            (Endpoint::ContainerLogs, Mode::Serve { containers, .. }) => {
                match containers.get(param) {
                    Ok(hosted) => http::json(
                        StatusCode::OK,
                        &serde_json::json!({ "logs": hosted.logs.drain() }),
                    ),
                    Err(reply) => http::reply(reply),
                }
            }
            // Each mode's router holds only its own endpoints.
            (endpoint, _) => http::json_error(
                StatusCode::NOT_FOUND,
                &format!("{} is not served in this mode.", endpoint.pattern()),
            ),
        }
    }

    /// The HTTP handler served at `path` on `site`, if that is what is
    /// there.
    fn handler_at(&self, site: Site, path: &str) -> Option<Arc<luge_host::Function>> {
        let function = match (site, &self.mode) {
            (Site::Tenant(index), _) => self.tenants.get(index)?.routes.get(path),
            (Site::Main, Mode::Serve { host, .. }) => host.route(path),
            (Site::Main, Mode::Proxy(_)) => None,
        }?;
        function.module.serves_http().then_some(function)
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
        let Mode::Serve { state, .. } = &self.mode else {
            return None;
        };
        Some(Arc::new(state.session(
            None,
            &function.name,
            &function.action.capabilities.state,
            state_until(&function.action, arrived),
        )))
    }

    /// A session of shared state for an activation of a container of
    /// `luge serve` (`luge proxy`, one container per process, has none).
    /// OpenWhisk names the action `/namespace/[package/]action` in the
    /// activation (`__OW_ACTION_NAME`, from the invoker): its private
    /// namespace is the action's, and the namespaces its
    /// `state.namespaces` annotation grants are its OpenWhisk namespace's
    /// own, so one OpenWhisk tenant cannot name another's.
    fn container_state(
        &self,
        invocation: &Invocation,
        arrived: Instant,
    ) -> Option<Arc<dyn luge_core::state::State>> {
        let Mode::Serve { state, .. } = &self.mode else {
            return None;
        };
        let action = &invocation.action;
        let named = invocation
            .env
            .iter()
            .find(|(key, _)| key == "__OW_ACTION_NAME")
            .and_then(|(_, full)| full.trim_start_matches('/').split_once('/'));
        let (scope, name) = named.unwrap_or(("-", action.name.as_str()));
        Some(Arc::new(state.session(
            Some(&format!("ow:{scope}")),
            name,
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

    fn metrics(&self) -> Response {
        match self.metrics.render() {
            Ok(text) => http::text(StatusCode::OK, metrics::CONTENT_TYPE, text),
            Err(_) => http::json_error(
                StatusCode::INTERNAL_SERVER_ERROR,
                "Could not encode the metrics.",
            ),
        }
    }

    fn health(&self) -> Response {
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

    async fn init(&self, body: Bytes, container: Arc<Container>) -> Response {
        let registry = Arc::clone(&self.settings.registry);
        let settings = self.settings.init.clone();
        let reply = dispatch::blocking(&self.settings.runtime, move || {
            container.init(&registry, &settings, &body)
        })
        .await
        .unwrap_or_else(|message| Reply::error(500, message));
        http::reply(reply)
    }

    async fn run(&self, body: &[u8], container: &Container) -> Response {
        let prepared = match container.prepare_run(body) {
            Ok(prepared) => prepared,
            Err(reply) => return http::reply(reply),
        };
        let arrived = Instant::now();
        let deadline = prepared.deadline(arrived);
        let calls = Arc::clone(&prepared.calls);
        let mut invocation = prepared.invocation;
        invocation.state = self.container_state(&invocation, arrived);
        match self
            .execute(prepared.module, invocation, arrived, deadline)
            .await
        {
            Ok(outcome) => http::reply(container.finish_run(&outcome, &calls)),
            Err(overloaded) => overloaded,
        }
    }

    /// Admits, schedules and records one invocation: its outcome, or the
    /// 503 to answer when the admission bound is reached.
    pub(crate) async fn execute(
        &self,
        module: Arc<dyn LoadedModule>,
        invocation: Invocation,
        arrived: Instant,
        deadline: Instant,
    ) -> Result<Outcome, Response> {
        let Some(place) = self.admit(&invocation.action.name) else {
            return Err(standalone::overloaded(self.admission.limit()));
        };
        Ok(self
            .execute_admitted(module, invocation, arrived, deadline, place)
            .await)
    }

    /// A place under the admission bound; `None` (counted as an overload
    /// of `function`) when all are taken.
    pub(crate) fn admit(&self, function: &str) -> Option<dispatch::Admitted> {
        let admitted = self.admission.try_admit();
        if admitted.is_none() {
            self.metrics.observe_overload(function);
        }
        admitted
    }

    /// [`App::execute`] for a caller already holding an admission place
    /// (a chain holds one for all its stages; each stage's job holds it
    /// too, until its sandbox has ended).
    pub(crate) async fn execute_admitted(
        &self,
        module: Arc<dyn LoadedModule>,
        invocation: Invocation,
        arrived: Instant,
        deadline: Instant,
        place: dispatch::Admitted,
    ) -> Outcome {
        let action = Arc::clone(&invocation.action);
        let cancel = invocation.cancel.clone();
        let sandbox = module.start(invocation, self.settings.preemption);
        self.execute_started(&action, cancel, sandbox, arrived, deadline, place)
            .await
    }

    /// Schedules and records a sandbox already started for `action` (an
    /// HTTP handler's, or [`App::execute_admitted`]'s).
    pub(crate) async fn execute_started(
        &self,
        action: &luge_core::Action,
        cancel: luge_core::Cancellation,
        sandbox: luge_core::SandboxFuture,
        arrived: Instant,
        deadline: Instant,
        place: dispatch::Admitted,
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
        let outcome = dispatched.outcome;
        self.metrics.observe(
            &action.name,
            &outcome.termination,
            arrived.elapsed(),
            dispatched.queue_delay,
        );
        tracing::debug!(
            function = %action.name,
            termination = ?outcome.termination,
            queue_us = dispatched.queue_delay.as_micros() as u64,
            elapsed_us = arrived.elapsed().as_micros() as u64,
            "invocation"
        );
        outcome
    }
}

fn not_found(method: &Method, path: &str) -> Response {
    http::json_error(
        StatusCode::NOT_FOUND,
        &format!("No route for {method} {path}."),
    )
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

/// The `prefix` query parameter of `/containers`: required, so that a bare
/// `DELETE /containers` cannot purge every invoker's containers by accident
/// (`prefix=` names them all); container-id characters only, so it needs no
/// percent-decoding.
fn container_prefix(query: Option<&str>) -> Result<String, Reply> {
    let prefix = query
        .unwrap_or_default()
        .split('&')
        .find_map(|pair| pair.strip_prefix("prefix="));
    match prefix {
        Some(prefix)
            if prefix.len() <= 128
                && prefix
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b"-_.".contains(&b)) =>
        {
            Ok(prefix.to_owned())
        }
        Some(_) => Err(Reply::error(
            400,
            "A container prefix is at most 128 letters, digits, '-', '_' and '.'.",
        )),
        None => Err(Reply::error(
            400,
            "Name the containers with ?prefix= (an invoker's prefix, or empty for all).",
        )),
    }
}
