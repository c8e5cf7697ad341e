//! Routes of `luge proxy` and `luge serve`.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use anyhow::Context;
use bytes::Bytes;
use hyper::header::HeaderValue;
use hyper::{Method, StatusCode};
use luge_core::{Invocation, LoadedModule, Outcome};
use luge_host::{Config, Function, FunctionHost, FunctionStore, HostPolicy, Origin, RouteTable};
use luge_openwhisk::{Container, Containers, LogSink, ProcessStreams, Reply};
use tokio::net::TcpListener;
use tracing::Instrument;

use crate::cli::{Cli, Command, HostArgs, Settings};
use crate::dispatch::{self, Admission};
use crate::http::{self, Request, Response};
use crate::metrics::{self, Metrics};
use crate::standalone::{self, HttpInput, OperatorToken};

/// `luge serve`'s address when neither the command line nor a config sets it.
const DEFAULT_LISTEN: &str = "127.0.0.1:8080";

/// What this process hosts.
enum Mode {
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
struct TenantSite {
    name: String,
    port: u16,
    routes: RouteTable,
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
pub struct Executor(Arc<App>);

/// Builds the executor for `cli` without binding: the listen address and the
/// executor to pass to [`serve`]. Call inside the tokio runtime.
pub fn build(cli: Cli) -> anyhow::Result<(SocketAddr, Executor)> {
    match cli.command {
        Command::Proxy { listen, common } => {
            let mut settings = common.settings(&[])?;
            // OpenWhisk starts an action container with `__OW_API_HOST` (and
            // the operator's `__OW_*` extras) in its environment; the action
            // sees them, under what its init and run set.
            settings.init.container_env = std::env::vars()
                .filter(|(key, _)| key.starts_with("__OW_"))
                .collect();
            let sink: Arc<dyn LogSink> = Arc::new(ProcessStreams);
            let mode = Mode::Proxy(Arc::new(Container::new(sink)));
            Ok((
                listen,
                Executor(Arc::new(App::new(settings, mode, None, Vec::new()))),
            ))
        }
        Command::Serve {
            listen,
            host,
            mut common,
        } => {
            let config = host.config.as_deref().map(Config::load).transpose()?;
            if let Some(config) = &config {
                common
                    .merge(&config.server)
                    .with_context(|| config.file.display().to_string())?;
            }
            let server = config.as_ref().map(|c| &c.server);
            let listen = match (listen, server.and_then(|s| s.listen.as_deref())) {
                (Some(listen), _) => listen,
                (None, Some(text)) => text.parse().with_context(|| {
                    format!("{}: server.listen: not an address", host_file(&config))
                })?,
                (None, None) => DEFAULT_LISTEN.parse()?,
            };
            let token_file = token_file(&host, server.and_then(|s| s.token_file.as_deref()));
            let token = operator_token(token_file)?;
            let store_dir = host
                .store
                .clone()
                .or_else(|| server.and_then(|s| s.store.clone()))
                .or_else(|| token.is_some().then(luge_host::store::default_store_dir));
            let state = state_config(&host, config.as_ref());
            let secrets: Vec<(&str, &std::path::Path)> = [
                ("the operator token", token_file),
                ("the function store", store_dir.as_deref()),
                ("the state store", state.dir.as_deref()),
            ]
            .into_iter()
            .filter_map(|(what, path)| Some((what, path?)))
            .collect();
            let settings = common.settings(&secrets)?;
            let store = store_dir.as_deref().map(FunctionStore::open).transpose()?;
            let state_store = Arc::new(
                luge_state::StateStore::open(&state)
                    .context("shared state (another luge may be using the same --state-dir)")?,
            );
            tracing::info!(
                dir = %state.dir.as_deref().map_or_else(String::new, |d| d.display().to_string()),
                global = state.redis_url.is_some(),
                "state store open"
            );
            let function_host = Arc::new(FunctionHost::new(
                Arc::clone(&settings.registry),
                HostPolicy {
                    fs_root: settings.init.fs_root.clone(),
                    limits: settings.init.limits,
                },
                store,
                settings.init.max_code_bytes,
            ));
            if let Some(config) = &config {
                function_host
                    .add_configured(&config.routes)
                    .map_err(|(path, e)| {
                        anyhow::anyhow!("{}: route {path:?}: {e}", config.file.display())
                    })?;
                function_host
                    .add_chains(&config.chains)
                    .map_err(|(path, e)| {
                        anyhow::anyhow!("{}: chain {path:?}: {e}", config.file.display())
                    })?;
            }
            let restored = function_host.restore()?;
            if let Some(dir) = &store_dir {
                tracing::info!(store = %dir.display(), functions = restored.len(), "function store open");
            }
            let tenants = match &host.sledge_spec {
                Some(file) => sledge_tenants(file, &function_host)?,
                None => Vec::new(),
            };
            let mode = Mode::Serve {
                containers: Containers::with_limit(host.max_containers),
                host: function_host,
                state: state_store,
            };
            Ok((
                listen,
                Executor(Arc::new(App::new(settings, mode, token, tenants))),
            ))
        }
    }
}

/// `[state]` with the command line's `--state-dir` and `--state-url` over
/// it; the local tier is persisted under the data directory by default.
fn state_config(host: &HostArgs, config: Option<&Config>) -> luge_state::StateConfig {
    let section = config.map(|c| c.state.clone()).unwrap_or_default();
    let defaults = luge_state::Quotas::default();
    luge_state::StateConfig {
        dir: Some(
            host.state_dir
                .clone()
                .or(section.dir)
                .unwrap_or_else(|| luge_host::store::default_data_dir().join("state")),
        ),
        redis_url: host.state_url.clone().or(section.url),
        quotas: luge_state::Quotas {
            max_value_bytes: section
                .max_value_kb
                .map_or(defaults.max_value_bytes, |kb| kb << 10),
            max_keys_per_namespace: section.max_keys.unwrap_or(defaults.max_keys_per_namespace),
            max_bytes_per_namespace: section
                .max_namespace_mb
                .map_or(defaults.max_bytes_per_namespace, |mb| mb << 20),
        },
    }
}

/// When an invocation's state operations (a global-tier round trip,
/// waiting for a lock) must end: a tenth of its time limit (at most
/// 100 ms) before the invocation's time does, so the function can still
/// act on a refusal.
fn state_until(action: &luge_core::Action, arrived: Instant) -> Instant {
    let timeout = action.limits.timeout;
    arrived + timeout - (timeout / 10).min(Duration::from_millis(100))
}

fn host_file(config: &Option<Config>) -> String {
    config
        .as_ref()
        .map_or_else(String::new, |c| c.file.display().to_string())
}

/// The token file: `--token-file`, else (unless `LUGE_TOKEN` is set) the
/// config's `token_file`.
fn token_file<'a>(
    host: &'a HostArgs,
    config_file: Option<&'a std::path::Path>,
) -> Option<&'a std::path::Path> {
    host.token_file.as_deref().or(std::env::var_os("LUGE_TOKEN")
        .is_none()
        .then_some(config_file)
        .flatten())
}

/// The token from the [`token_file`], else `LUGE_TOKEN`; never from argv.
fn operator_token(file: Option<&std::path::Path>) -> anyhow::Result<Option<OperatorToken>> {
    if let Some(file) = file {
        let text = luge_core::secret::read_private(file).context("operator token file")?;
        let text = String::from_utf8(text)
            .with_context(|| format!("operator token file {}: not UTF-8", file.display()))?;
        return Ok(Some(OperatorToken::new(&text).with_context(|| {
            format!("operator token file {}", file.display())
        })?));
    }
    match std::env::var("LUGE_TOKEN") {
        Ok(text) => Ok(Some(OperatorToken::new(&text).context("LUGE_TOKEN")?)),
        Err(_) => Ok(None),
    }
}

fn sledge_tenants(file: &std::path::Path, host: &FunctionHost) -> anyhow::Result<Vec<TenantSite>> {
    let mut sites = Vec::new();
    for tenant in luge_host::sledge::load(file)? {
        if !tenant.ignored_keys.is_empty() {
            tracing::info!(tenant = %tenant.name, keys = ?tenant.ignored_keys, "Sledge keys accepted but not used");
        }
        let routes = RouteTable::default();
        for route in &tenant.routes {
            let name = format!("{}{}", tenant.name, route.path);
            let origin = Origin::Sledge {
                tenant: tenant.name.clone(),
            };
            let function = host.load_route(route, name, origin).map_err(|e| {
                anyhow::anyhow!(
                    "{}: tenant {:?} route {:?}: {e}",
                    file.display(),
                    tenant.name,
                    route.path
                )
            })?;
            routes.insert(function)?;
        }
        sites.push(TenantSite {
            name: tenant.name,
            port: tenant.port,
            routes,
        });
    }
    Ok(sites)
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
    let until_stopped = |mut stopped: tokio::sync::watch::Receiver<bool>| async move {
        let _ = stopped.wait_for(|&s| s).await;
    };
    let mut loops = Vec::new();
    for (index, listener) in tenants {
        let handler = handler(Arc::clone(&app), Site::Tenant(index));
        loops.push(tokio::spawn(http::serve(
            listener,
            handler,
            limits,
            until_stopped(stopped.clone()),
        )));
    }
    let main = http::serve(
        listener,
        handler(app, Site::Main),
        limits,
        until_stopped(stopped),
    );
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
    fn new(
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
        Self {
            admission: Admission::new(settings.max_pending),
            settings,
            metrics,
            token,
            mode,
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
        match (&method, path.as_str()) {
            (&Method::GET, "/healthz") => return self.health(),
            (&Method::GET, "/metrics") => return self.metrics(),
            _ => {}
        }
        if let Site::Tenant(index) = site {
            let Some(tenant) = self.tenants.get(index) else {
                return not_found(&method, &path);
            };
            return match tenant.routes.get(&path) {
                Some(function) => self.invoke_function(function, input(body)).await,
                None => not_found(&method, &path),
            };
        }
        // A function route (config or upload) wins over the container API.
        if let Mode::Serve { host, .. } = &self.mode {
            if let Some(function) = host.route(&path) {
                return self.invoke_function(function, input(body)).await;
            }
            if let Some(chain) = host.chain(&path) {
                return self.invoke_chain(chain, input(body)).await;
            }
        }
        let segments: Vec<&str> = path.trim_matches('/').split('/').collect();
        match (&method, segments.as_slice(), &self.mode) {
            (&Method::POST, ["init"], Mode::Proxy(container)) => {
                self.init(body, Arc::clone(container)).await
            }
            (&Method::POST, ["run"], Mode::Proxy(container)) => self.run(&body, container).await,
            (_, ["v1", "functions", rest @ ..], Mode::Serve { host, .. }) if rest.len() <= 1 => {
                self.manage(host, &method, rest.first().copied(), &headers, body)
                    .await
            }
            (&Method::POST, [id, "init"], Mode::Serve { containers, .. }) => {
                match containers.get_or_create(id) {
                    Ok(hosted) => self.init(body, Arc::clone(&hosted.container)).await,
                    Err(reply) => http::reply(reply),
                }
            }
            (&Method::POST, [id, "run"], Mode::Serve { containers, .. }) => {
                match containers.get(id) {
                    Ok(hosted) => self.run(&body, &hosted.container).await,
                    Err(reply) => http::reply(reply),
                }
            }
            (&Method::POST, [id, "destroy"], Mode::Serve { containers, .. }) => {
                match containers.destroy(id) {
                    Ok(()) => http::json(StatusCode::OK, &serde_json::json!({ "ok": true })),
                    Err(reply) => http::reply(reply),
                }
            }
            (&Method::GET, ["containers"], Mode::Serve { containers, .. }) => {
                match container_prefix(query.as_deref()) {
                    Ok(prefix) => http::json(
                        StatusCode::OK,
                        &serde_json::json!({ "containers": containers.ids(&prefix) }),
                    ),
                    Err(reply) => http::reply(reply),
                }
            }
            (&Method::DELETE, ["containers"], Mode::Serve { containers, .. }) => {
                match container_prefix(query.as_deref()) {
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
            (&Method::GET, [id, "logs"], Mode::Serve { containers, .. }) => {
                match containers.get(id) {
                    Ok(hosted) => http::json(
                        StatusCode::OK,
                        &serde_json::json!({ "logs": hosted.logs.drain() }),
                    ),
                    Err(reply) => http::reply(reply),
                }
            }
            _ => not_found(&method, &path),
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
        let reply = dispatch::blocking(move || container.init(&registry, &settings, &body))
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
