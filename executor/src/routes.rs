//! Routes of `luge proxy` and `luge serve`.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use bytes::Bytes;
use hyper::{Method, StatusCode};
use luge_openwhisk::{Container, Containers, LogSink, ProcessStreams, Reply};
use tracing::Instrument;

use crate::cli::{Cli, Command, Settings};
use crate::dispatch;
use crate::http::{self, Request, Response};
use crate::metrics::{self, Metrics};

/// What this process hosts.
enum Mode {
    /// `luge proxy`: exactly one container.
    Proxy(Arc<Container>),
    /// `luge serve`: containers by id.
    Serve(Containers),
}

struct App {
    settings: Settings,
    metrics: Metrics,
    mode: Mode,
    next_request: AtomicU64,
}

/// Runs the command until SIGINT or SIGTERM.
pub async fn run(cli: Cli) -> anyhow::Result<()> {
    let (listen, app) = build(cli)?;
    let listener = http::bind(listen).await?;
    serve(listener, app, shutdown_signal()).await;
    Ok(())
}

/// A configured executor, ready to serve.
pub struct Executor(Arc<App>);

/// Builds the executor for `cli` without binding: the listen address and the
/// executor to pass to [`serve`].
pub fn build(cli: Cli) -> anyhow::Result<(std::net::SocketAddr, Executor)> {
    let (listen, common, mode) = match cli.command {
        Command::Proxy { listen, common } => {
            let sink: Arc<dyn LogSink> = Arc::new(ProcessStreams);
            (listen, common, Mode::Proxy(Arc::new(Container::new(sink))))
        }
        Command::Serve { listen, common } => (listen, common, Mode::Serve(Containers::default())),
    };
    let settings = common.settings()?;
    let metrics = Metrics::new(
        Arc::clone(&settings.registry),
        Arc::clone(&settings.scheduler),
    );
    let app = Arc::new(App {
        settings,
        metrics,
        mode,
        next_request: AtomicU64::new(1),
    });
    Ok((listen, Executor(app)))
}

/// Serves `executor` on `listener` until `shutdown` completes.
pub async fn serve(
    listener: tokio::net::TcpListener,
    executor: Executor,
    shutdown: impl std::future::Future<Output = ()>,
) {
    let app = executor.0;
    let handler = move |request: Request| {
        let app = Arc::clone(&app);
        let id = app.next_request.fetch_add(1, Ordering::Relaxed);
        let span = tracing::info_span!("request", id, method = %request.method(), path = %request.uri().path());
        async move { app.handle(request).await }.instrument(span)
    };
    http::serve(listener, handler, shutdown).await;
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
    async fn handle(self: Arc<Self>, request: Request) -> Response {
        let method = request.method().clone();
        let path = request.uri().path().to_owned();
        // Every body is read (bounded) before routing, even where the route
        // ignores it: a reply sent over an unread body forces hyper to close
        // the connection, breaking clients that pipeline on keep-alive.
        let body = match http::read_body(request, self.settings.max_body_bytes).await {
            Ok(body) => body,
            Err(response) => return response,
        };
        let segments: Vec<&str> = path.trim_matches('/').split('/').collect();
        match (&method, segments.as_slice(), &self.mode) {
            (&Method::GET, ["healthz"], _) => self.health(),
            (&Method::GET, ["metrics"], _) => self.metrics(),
            (&Method::POST, ["init"], Mode::Proxy(container)) => {
                self.init(body, Arc::clone(container)).await
            }
            (&Method::POST, ["run"], Mode::Proxy(container)) => self.run(&body, container).await,
            (&Method::POST, [id, "init"], Mode::Serve(containers)) => {
                match containers.get_or_create(id) {
                    Ok(hosted) => self.init(body, Arc::clone(&hosted.container)).await,
                    Err(reply) => http::reply(reply),
                }
            }
            (&Method::POST, [id, "run"], Mode::Serve(containers)) => match containers.get(id) {
                Ok(hosted) => self.run(&body, &hosted.container).await,
                Err(reply) => http::reply(reply),
            },
            (&Method::POST, [id, "destroy"], Mode::Serve(containers)) => {
                match containers.destroy(id) {
                    Ok(()) => http::json(StatusCode::OK, &serde_json::json!({ "ok": true })),
                    Err(reply) => http::reply(reply),
                }
            }
            (&Method::GET, [id, "logs"], Mode::Serve(containers)) => match containers.get(id) {
                Ok(hosted) => http::json(
                    StatusCode::OK,
                    &serde_json::json!({ "logs": hosted.logs.drain() }),
                ),
                Err(reply) => http::reply(reply),
            },
            _ => http::json_error(
                StatusCode::NOT_FOUND,
                &format!("No route for {method} {path}."),
            ),
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
        let containers = match &self.mode {
            Mode::Proxy(container) => usize::from(container.is_ready()),
            Mode::Serve(containers) => containers.len(),
        };
        let registry = &self.settings.registry;
        http::json(
            StatusCode::OK,
            &serde_json::json!({
                "status": "ok",
                "engine": registry.runtime().id().to_string(),
                "containers": containers,
                "modules": registry.live_modules(),
                "compiles": registry.stats().compiles,
                "scheduler": {
                    "workers": self.settings.scheduler.workers(),
                    "completed": self.settings.scheduler.stats().completed,
                    "preemptions": self.settings.scheduler.stats().preemptions,
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
        let arrived = std::time::Instant::now();
        let function = Arc::clone(&prepared.invocation.action);
        let settings = &self.settings;
        let outcome = dispatch::invoke(&settings.scheduler, settings.preemption, prepared).await;
        self.metrics
            .observe(&function.name, &outcome.termination, arrived.elapsed());
        tracing::debug!(termination = ?outcome.termination, elapsed_us = outcome.elapsed.as_micros() as u64, "activation");
        http::reply(container.finish_run(&outcome))
    }
}
