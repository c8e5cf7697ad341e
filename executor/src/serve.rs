//! Listeners and where their connections are served (the workers' runtimes
//! or this one), until shutdown: the top of the executor.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use anyhow::Context;
use hyper::header::{HeaderName, HeaderValue};
use tokio::net::TcpListener;
use tracing::Instrument;

use crate::app::App;
pub use crate::app::Executor;
pub use crate::assemble::build;
use crate::cli::Cli;
use crate::http::{self, Request, Response};
use crate::routes::{self, Site};

/// The header naming each response's request id (made once: a name
/// given as a string is parsed and copied at every insert).
const REQUEST_ID: HeaderName = HeaderName::from_static("x-request-id");

/// How long, after SIGTERM or SIGINT, the requests in progress have to
/// finish before the process ends and cuts them: less than Kubernetes'
/// default grace period (30 s, after which a pod's processes get SIGKILL),
/// so Luge ends on its own, having answered what it could.
const DRAIN_GRACE: Duration = Duration::from_secs(25);

/// Runs the command until SIGINT or SIGTERM.
pub async fn run(cli: Cli) -> anyhow::Result<()> {
    // `luge up` on its default port moves to a free one if that is taken,
    // as a newcomer's second app would find it.
    let up = match &cli.command {
        crate::cli::Command::Up(up) => Some(up.common.listen.is_none()),
        _ => None,
    };
    // `luge serve --listen ADDR` with a fixed port binds before it
    // compiles and loads: a connection made meanwhile (Kubernetes'
    // readiness probe at the container's start) waits in the listen
    // backlog and is answered once everything is loaded, rather than
    // refused and tried again a probe period later. Nothing is accepted
    // before then, so `/readyz` still answers only a loaded app.
    let early = match &cli.command {
        crate::cli::Command::Serve { common, .. } => {
            match common.listen.filter(|addr| addr.port() != 0) {
                Some(addr) => Some(http::bind(addr).await?),
                None => None,
            }
        }
        _ => None,
    };
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
    let listener = match (up, early) {
        (Some(default_port), _) => {
            let listener = bind_up(listen, default_port).await?;
            print_routes(&listener.local_addr()?, &executor);
            listener
        }
        // The command line's address wins over a config's: the same one.
        (None, Some(listener)) => listener,
        (None, None) => http::bind(listen).await?,
    };
    serve_sites(listener, tenants, executor, shutdown_signal()).await;
    Ok(())
}

/// `luge up`'s listener: on `listen`, or, when that is the default port
/// and taken, on a free port of the same address (said on stderr).
async fn bind_up(listen: SocketAddr, default_port: bool) -> anyhow::Result<TcpListener> {
    match TcpListener::bind(listen).await {
        Ok(listener) => Ok(listener),
        Err(e) if default_port && e.kind() == std::io::ErrorKind::AddrInUse => {
            let listener = TcpListener::bind(SocketAddr::new(listen.ip(), 0)).await?;
            eprintln!(
                "luge: port {} is taken; serving on port {} instead (choose one with --listen)",
                listen.port(),
                listener.local_addr()?.port()
            );
            Ok(listener)
        }
        Err(e) => Err(anyhow::Error::new(e).context(format!(
            "cannot listen on {listen} (choose another address with --listen)"
        ))),
    }
}

/// What `spin up` prints once it serves: the address and each route.
fn print_routes(bound: &SocketAddr, executor: &Executor) {
    use std::io::Write;
    let routes = match &executor.0.mode {
        crate::app::Mode::Serve { host, .. } => host.routes(),
        crate::app::Mode::Proxy(_) => Vec::new(),
    };
    let mut out = String::new();
    out.push_str(&format!("Serving http://{bound}\nAvailable Routes:\n"));
    for (route, name) in routes {
        // A prefix route is held as `/base/...`: Spin shows the base and
        // says it is a wildcard.
        let shown = match route.strip_suffix("/...") {
            Some(base) => format!("http://{bound}{base} (wildcard)"),
            None => format!("http://{bound}{route}"),
        };
        out.push_str(&format!("  {name}: {shown}\n"));
    }
    // A closed stdout (a detached run) is no reason to stop serving.
    let _ = std::io::stdout().lock().write_all(out.as_bytes());
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
    // The triggers' sources run while the listeners do.
    let sources: Vec<_> = crate::triggers::start(&app)
        .into_iter()
        .map(tokio::spawn)
        .collect();
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
            None,
            until_stopped(stopped.clone()),
        )));
    }
    let main = serve_main(listener, &app, Arc::clone(&open), stopped);
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
    // No new connection; the open ones finish what they are serving.
    let left = http::drain(&open, DRAIN_GRACE).await;
    if left > 0 {
        tracing::warn!(
            connections = left,
            "drain ended with connections still open: cut"
        );
    }
    for source in sources {
        source.abort();
    }
    app.stop_uploaded_triggers();
    // What is queued for the collector goes out (bounded by the export
    // timeout), off the runtime's threads.
    if let Some(telemetry) = app.settings.telemetry.clone() {
        let _ = tokio::task::spawn_blocking(move || telemetry.shutdown()).await;
    }
}

/// How long the workers may accept no connection at all, while one
/// waits, before this runtime's threads take it (`http::serve_unclaimed`):
/// a worker running short functions reaches a scheduling point within
/// tens of µs (and accepts one connection per such turn), one running a
/// long sandbox only at the end of its quantum (5 ms by default).
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
        return http::serve(
            listener,
            handler,
            limits,
            open,
            None,
            until_stopped(stopped),
        )
        .await;
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
            runtimes.connections().clone(),
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
        let accepted = Arc::clone(&runtimes.connections().accepted);
        let shutdown = until_stopped(stopped.clone());
        loops.push(runtime.spawn(async move {
            match TcpListener::from_std(socket) {
                Ok(listener) => {
                    http::serve(listener, handler, limits, open, Some(accepted), shutdown).await
                }
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
                let with_id = app.settings.request_id_header;
                let mut response = routes::handle(app, site, id, request).await;
                if with_id {
                    response.headers_mut().insert(REQUEST_ID, request_id(id));
                }
                response
            }
            .instrument(span),
        )
    }
}

/// The `x-request-id` of request `id`: its digits copied once into the
/// value (`HeaderValue::from(u64)` grows a buffer and then shrinks it, two
/// allocations for a response's one).
fn request_id(id: u64) -> HeaderValue {
    let digits = itoa::Buffer::new().format(id).as_bytes().to_vec();
    // Digits always are a header value; the fallback only keeps this path
    // free of a panic.
    HeaderValue::from_maybe_shared(bytes::Bytes::from(digits)).unwrap_or_else(|_| id.into())
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

#[cfg(test)]
mod tests {
    use super::*;

    /// A request id reads as `http` would write it.
    #[test]
    fn request_ids_are_decimal() {
        for id in [0, 7, 1_000_000_007, u64::MAX] {
            assert_eq!(request_id(id), HeaderValue::from(id));
            assert_eq!(request_id(id).to_str().unwrap(), id.to_string());
        }
    }
}
