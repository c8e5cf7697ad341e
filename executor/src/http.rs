//! HTTP plumbing over hyper: accept loop, bounded bodies, JSON replies.

use std::convert::Infallible;
use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full, Limited};
use hyper::body::Body as _;
use hyper::body::Incoming;
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper::{StatusCode, header};
use hyper_util::rt::TokioIo;
use luge_openwhisk::Reply;
use tokio::net::TcpListener;

/// An incoming request.
pub type Request = hyper::Request<Incoming>;
/// A response: complete ([`full`]) or streamed (an HTTP handler's).
pub type Response = hyper::Response<luge_core::handler::Body>;

/// `bytes` as a complete body.
pub fn full(bytes: impl Into<Bytes>) -> luge_core::handler::Body {
    Full::new(bytes.into())
        .map_err(|never| match never {})
        .boxed_unsync()
}

/// Bounds on connections, as hyper and this accept loop enforce them.
#[derive(Debug, Clone, Copy)]
pub struct ConnectionLimits {
    /// Open connections at once; one more is answered 503 and closed.
    pub max_connections: usize,
    /// Time a connection may go without a request in progress: from its
    /// accept, or the end of its last request, until the next request's
    /// headers are complete. It bounds silent connections, headers sent
    /// slowly (however many bytes trickle in), and idle keep-alive alike.
    /// Checked every half timeout, so enforced within one and a half.
    pub header_timeout: Duration,
}

/// `--header-timeout-ms`'s default: ten seconds is far more than any
/// client needs to send headers on a working network, and short enough
/// that idle or silent connections are given back soon.
pub const DEFAULT_HEADER_TIMEOUT: Duration = Duration::from_secs(10);

/// Descriptors kept for everything but client connections (listeners,
/// modules, grants, stores, logs) when the connection bound is derived
/// from the process's descriptor limit.
const RESERVED_FDS: u64 = 256;
/// Most connections by default, whatever the descriptor limit.
const MAX_DEFAULT_CONNECTIONS: u64 = 10_000;

impl ConnectionLimits {
    /// `--max-connections`'s default: the soft descriptor limit less what
    /// the rest of the process needs, at most 10,000 (at least 16), so new
    /// clients are refused cleanly before the process runs out of
    /// descriptors.
    pub fn default_max_connections() -> usize {
        let soft = rustix::process::getrlimit(rustix::process::Resource::Nofile)
            .current
            .unwrap_or(MAX_DEFAULT_CONNECTIONS + RESERVED_FDS);
        soft.saturating_sub(RESERVED_FDS)
            .clamp(16, MAX_DEFAULT_CONNECTIONS) as usize
    }
}

/// Whether a connection has a request in progress, and since when it has
/// had none.
///
/// This replaces hyper's header-read timer, which arms a timer for every
/// request (a shared timer wheel's lock each time: 9 % of the throughput of
/// a no-op route on two cores). Here a request costs two atomic updates,
/// and each connection one timer every half timeout.
#[derive(Debug)]
struct Idle {
    /// Requests in progress (pipelined ones can overlap a response).
    busy: std::sync::atomic::AtomicUsize,
    /// When the last request ended (or the connection opened), as time
    /// since `opened`, ns.
    since_ns: std::sync::atomic::AtomicU64,
    opened: std::time::Instant,
}

/// A request in progress; its drop (also when the client goes away) marks
/// the connection idle again.
struct Busy(Arc<Idle>);

impl Drop for Busy {
    fn drop(&mut self) {
        use std::sync::atomic::Ordering;
        let idle = &self.0;
        idle.since_ns
            .store(idle.opened.elapsed().as_nanos() as u64, Ordering::Relaxed);
        idle.busy.fetch_sub(1, Ordering::Release);
    }
}

impl Idle {
    fn new() -> Self {
        Self {
            busy: std::sync::atomic::AtomicUsize::new(0),
            since_ns: std::sync::atomic::AtomicU64::new(0),
            opened: std::time::Instant::now(),
        }
    }

    /// Marks a request (its headers complete) in progress.
    fn begin(this: &Arc<Self>) -> Busy {
        this.busy.fetch_add(1, std::sync::atomic::Ordering::Acquire);
        Busy(Arc::clone(this))
    }

    /// How long the connection has had no request in progress (zero while
    /// one is).
    fn idle_for(&self) -> Duration {
        use std::sync::atomic::Ordering;
        if self.busy.load(Ordering::Acquire) > 0 {
            return Duration::ZERO;
        }
        let since = Duration::from_nanos(self.since_ns.load(Ordering::Relaxed));
        self.opened.elapsed().saturating_sub(since)
    }
}

/// Answer to a connection over the bound, written before it is closed.
const TOO_MANY_CONNECTIONS: &[u8] = b"HTTP/1.1 503 Service Unavailable\r\nretry-after: 1\r\ncontent-type: application/json\r\ncontent-length: 45\r\nconnection: close\r\n\r\n{\"error\":\"Too many open connections; retry.\"}";

/// Open connections, counted against [`ConnectionLimits::max_connections`]
/// by every accept loop that shares it (the workers' loops on one
/// listener share one), and told together when the server drains.
pub type OpenConnections = Arc<Open>;

/// See [`OpenConnections`].
pub struct Open {
    places: Arc<tokio::sync::Semaphore>,
    max: usize,
    /// `true` once the server drains: each connection finishes the request
    /// it is serving and closes.
    draining: tokio::sync::watch::Sender<bool>,
}

/// Places for `limits.max_connections` connections.
pub fn open_connections(limits: &ConnectionLimits) -> OpenConnections {
    Arc::new(Open {
        places: Arc::new(tokio::sync::Semaphore::new(limits.max_connections)),
        max: limits.max_connections,
        draining: tokio::sync::watch::channel(false).0,
    })
}

/// Drains the server's connections (call once the accept loops have
/// stopped): each finishes the request in progress, if any, writes its
/// response and closes; a keep-alive connection between requests closes
/// at once. Returns when the last has closed, or after `within`, whichever
/// is first (what is left is cut when the process ends). How many were
/// left is returned.
pub async fn drain(open: &OpenConnections, within: Duration) -> usize {
    open.draining.send_replace(true);
    let all = u32::try_from(open.max).unwrap_or(u32::MAX);
    match tokio::time::timeout(within, open.places.acquire_many(all)).await {
        Ok(_) => 0,
        Err(_) => open.max - open.places.available_permits(),
    }
}

/// Serves connections on `listener` until `shutdown` completes. Connection
/// tasks are spawned on the runtime this runs on. Each connection accepted
/// is counted in `accepted`, where given (a worker's loop: see
/// [`serve_unclaimed`]).
pub async fn serve<H, F>(
    listener: TcpListener,
    handler: H,
    limits: ConnectionLimits,
    open: OpenConnections,
    accepted: Option<Arc<AtomicU64>>,
    shutdown: impl Future<Output = ()>,
) where
    H: Fn(Request) -> F + Clone + Send + Sync + 'static,
    F: Future<Output = Response> + Send + 'static,
{
    tokio::pin!(shutdown);
    loop {
        let (stream, peer) = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok(pair) => pair,
                Err(e) => {
                    // Out of file descriptors and the like: keep serving.
                    tracing::warn!(error = %e, "accept failed");
                    tokio::time::sleep(Duration::from_millis(10)).await;
                    continue;
                }
            },
            () = &mut shutdown => return,
        };
        if let Some(accepted) = &accepted {
            accepted.fetch_add(1, Ordering::Relaxed);
        }
        connection(stream, peer, handler.clone(), limits, &open);
        // One connection per pass: where several loops accept from one
        // listener (the workers'), each free one takes a share of a burst
        // of connections instead of the first awake taking them all.
        tokio::task::yield_now().await;
    }
}

/// What [`serve_unclaimed`] reads and counts.
#[derive(Debug, Clone)]
pub struct UnclaimedCounts {
    /// Connections the other loops on the same socket accepted (each
    /// [`serve`]'s `accepted`): how this loop tells workers that accept
    /// slowly from workers that do not accept at all.
    pub accepted: Arc<AtomicU64>,
    /// Connections this loop took.
    pub unclaimed: Arc<AtomicU64>,
}

/// Serves the connections of `listener` that wait while no other loop
/// accepting from the same socket took any for `grace`, until `shutdown`
/// completes. With worker front ends, this loop on the ambient runtime
/// bounds how long a new connection waits while every worker runs a
/// sandbox (accepting only at scheduling points): such a connection is
/// served here, its requests handed to the workers, and an urgent one can
/// preempt a running sandbox at once.
pub async fn serve_unclaimed<H, F>(
    listener: std::net::TcpListener,
    grace: Duration,
    counts: UnclaimedCounts,
    handler: H,
    limits: ConnectionLimits,
    open: OpenConnections,
    shutdown: impl Future<Output = ()>,
) where
    H: Fn(Request) -> F + Clone + Send + Sync + 'static,
    F: Future<Output = Response> + Send + 'static,
{
    if let Err(e) = listener.set_nonblocking(true) {
        return tracing::error!(error = %e, "cannot watch the listener");
    }
    let interest = tokio::io::Interest::READABLE;
    // SAFETY: the `AsyncFd` owns the `TcpListener`, which owns its
    // descriptor: it stays open, and `as_raw_fd` returns it unchanged,
    // for as long as the `AsyncFd` lives.
    let ready =
        match unsafe { tokio::io::unix::AsyncFd::register_with_interest(listener, interest) } {
            Ok(ready) => ready,
            Err(e) => return tracing::error!(error = %e, "cannot watch the listener"),
        };
    tokio::pin!(shutdown);
    loop {
        let mut guard = tokio::select! {
            guard = ready.readable() => match guard {
                Ok(guard) => guard,
                Err(e) => {
                    tracing::warn!(error = %e, "cannot watch the listener");
                    tokio::time::sleep(grace).await;
                    continue;
                }
            },
            () = &mut shutdown => return,
        };
        // The workers' chance first. A worker accepts one connection per
        // turn of its runtime, so a burst of them (a client opening 64 at
        // once) takes the workers longer than the grace while they do
        // accept: those are theirs all the same. Only when no loop has
        // accepted for a whole grace are the workers taken to be held up
        // (each running a sandbox to its quantum's end). A connection
        // served here costs every request two thread switches and two
        // wake-ups, and it stays here for its whole life: at 64
        // connections on one worker, a tenth of them once ended up here
        // (docs/BENCHMARKS-ARCHIVE.md, "Connections left to the workers").
        let before = counts.accepted.load(Ordering::Relaxed);
        tokio::time::sleep(grace).await;
        if counts.accepted.load(Ordering::Relaxed) != before {
            continue;
        }
        // `WouldBlock` (a worker took it) clears the readiness: wait again.
        let Ok(accepted) = guard.try_io(|listener| listener.get_ref().accept()) else {
            continue;
        };
        let (stream, peer) = match accepted.and_then(|(stream, peer)| {
            stream.set_nonblocking(true)?;
            Ok((tokio::net::TcpStream::from_std(stream)?, peer))
        }) {
            Ok(pair) => pair,
            Err(e) => {
                tracing::warn!(error = %e, "accept failed");
                continue;
            }
        };
        counts.unclaimed.fetch_add(1, Ordering::Relaxed);
        tracing::debug!(%peer, "connection unclaimed by the workers: served by the threads");
        connection(stream, peer, handler.clone(), limits, &open);
    }
}

/// Serves one accepted connection in a task of its own (on the runtime this
/// is called on), or refuses it with 503 when `open` has no place left.
fn connection<H, F>(
    mut stream: tokio::net::TcpStream,
    peer: SocketAddr,
    handler: H,
    limits: ConnectionLimits,
    open: &OpenConnections,
) where
    H: Fn(Request) -> F + Clone + Send + Sync + 'static,
    F: Future<Output = Response> + Send + 'static,
{
    let Ok(place) = Arc::clone(&open.places).try_acquire_owned() else {
        tracing::warn!(%peer, limit = limits.max_connections, "too many open connections: refused");
        tokio::spawn(async move {
            use tokio::io::AsyncWriteExt;
            // Best effort and bounded: a client that does not read
            // this is closed all the same.
            let _ = tokio::time::timeout(
                Duration::from_secs(1),
                stream.write_all(TOO_MANY_CONNECTIONS),
            )
            .await;
        });
        return;
    };
    let _ = stream.set_nodelay(true);
    // On a worker that serves its connections between sandboxes: a request
    // on this one makes a running sandbox yield within a tick.
    crate::arrivals::watch(std::os::fd::AsFd::as_fd(&stream));
    let mut draining = open.draining.subscribe();
    tokio::spawn(async move {
        let _place = place;
        let idle = Arc::new(Idle::new());
        let activity = Arc::clone(&idle);
        let service = service_fn(move |mut req: Request| {
            // Spin's `spin-client-addr` (crate::route_headers).
            req.extensions_mut()
                .insert(crate::route_headers::ClientAddr(peer));
            let handler = handler.clone();
            let busy = Idle::begin(&activity);
            async move {
                let response = handler(req).await;
                // A streamed body (an HTTP handler's) keeps the request
                // in progress until its last byte: the header timeout
                // is not for a response still being written.
                let hint = response.body().size_hint();
                if hint.exact().is_some() {
                    drop(busy);
                    return Ok::<_, Infallible>(response);
                }
                Ok(response.map(|body| {
                    body.map_frame(move |frame| {
                        let _in_progress = &busy;
                        frame
                    })
                    .boxed_unsync()
                }))
            }
        });
        let connection = http1::Builder::new()
            .keep_alive(true)
            .serve_connection(TokioIo::new(stream), service);
        tokio::pin!(connection);
        let check = limits.header_timeout / 2;
        // A connection accepted as the drain began is drained too.
        if *draining.borrow_and_update() {
            connection.as_mut().graceful_shutdown();
        }
        loop {
            tokio::select! {
                ended = &mut connection => {
                    if let Err(e) = ended {
                        tracing::debug!(%peer, error = %e, "connection ended with an error");
                    }
                    break;
                }
                // The server drains: the request in progress is finished
                // and answered, then the connection closes.
                Ok(()) = draining.changed() => {
                    connection.as_mut().graceful_shutdown();
                }
                () = tokio::time::sleep(check) => {
                    if idle.idle_for() >= limits.header_timeout {
                        tracing::debug!(%peer, "no request within the header timeout: closed");
                        break;
                    }
                }
            }
        }
    });
}

/// Binds `addr`. With port 0 the bound address is announced on stderr as
/// `luge listening on http://ADDR` (tests and scripts read the port there);
/// a fixed port is only logged: in `luge proxy` stderr is the action's log
/// stream, which OpenWhisk collects, and must hold the action's lines only.
pub async fn bind(addr: SocketAddr) -> anyhow::Result<TcpListener> {
    let listener = TcpListener::bind(addr).await.map_err(|e| {
        // What a newcomer meets first: say what holds them back and the fix.
        let fix = match e.kind() {
            std::io::ErrorKind::AddrInUse => {
                " (another server holds it: choose a free one with --listen)"
            }
            std::io::ErrorKind::PermissionDenied => {
                " (a port below 1024 needs privileges: choose another with --listen)"
            }
            std::io::ErrorKind::AddrNotAvailable => {
                " (no interface of this machine has that address: choose one with --listen)"
            }
            _ => "",
        };
        anyhow::Error::new(e).context(format!("cannot listen on {addr}{fix}"))
    })?;
    let bound = listener.local_addr()?;
    if addr.port() == 0 {
        eprintln!("luge listening on http://{bound}");
    } else {
        tracing::info!(%bound, "listening");
    }
    Ok(listener)
}

/// Reads the whole body, refusing more than `limit` bytes with 413.
pub async fn read_body(request: Request, limit: usize) -> Result<Bytes, Response> {
    if declared_length(request.headers()).is_some_and(|len| len > limit) {
        return Err(too_large(limit));
    }
    match Limited::new(request.into_body(), limit).collect().await {
        Ok(collected) => Ok(collected.to_bytes()),
        Err(e) if e.is::<http_body_util::LengthLimitError>() => Err(too_large(limit)),
        Err(e) => Err(json_error(
            StatusCode::BAD_REQUEST,
            &format!("Could not read the request body: {e}"),
        )),
    }
}

/// The body's length as its `Content-Length` declares it.
pub fn declared_length(headers: &hyper::HeaderMap) -> Option<usize> {
    headers
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<usize>().ok())
}

/// 413: a body over `limit` bytes.
pub fn too_large(limit: usize) -> Response {
    json_error(
        StatusCode::PAYLOAD_TOO_LARGE,
        &format!("The request body exceeds the limit of {limit} bytes."),
    )
}

/// A JSON response.
pub fn json(status: StatusCode, body: &serde_json::Value) -> Response {
    let bytes = serde_json::to_vec(body).unwrap_or_else(|_| b"{}".to_vec());
    let mut response = hyper::Response::new(full(bytes));
    *response.status_mut() = status;
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        header::HeaderValue::from_static("application/json"),
    );
    response
}

/// A text response of `content_type`.
pub fn text(status: StatusCode, content_type: &'static str, body: String) -> Response {
    let mut response = hyper::Response::new(full(body));
    *response.status_mut() = status;
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        header::HeaderValue::from_static(content_type),
    );
    response
}

/// `{"error": message}` with `status`.
pub fn json_error(status: StatusCode, message: &str) -> Response {
    json(status, &serde_json::json!({ "error": message }))
}

/// A protocol reply as a response.
pub fn reply(reply: Reply) -> Response {
    let status = StatusCode::from_u16(reply.status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    json(status, &reply.body)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The fallback loop leaves connections to workers that accept them
    /// one by one more slowly than the grace lasts, and takes them when the
    /// workers accept nothing for a grace. A "worker" here is a loop that
    /// accepts one connection every `GRACE / 10`; the grace is long (20 ms)
    /// so that a loaded machine's scheduling does not look like a worker
    /// held up. The old rule (take whatever waited the grace) took one
    /// connection per grace of the 100 ms the burst takes to accept: 6 of
    /// the 50.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn the_fallback_takes_only_what_the_workers_leave() {
        const GRACE: Duration = Duration::from_millis(20);
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let counts = UnclaimedCounts {
            accepted: Arc::default(),
            unclaimed: Arc::default(),
        };
        let limits = ConnectionLimits {
            max_connections: 1000,
            header_timeout: DEFAULT_HEADER_TIMEOUT,
        };
        let open = open_connections(&limits);
        let handler = |_: Request| async { hyper::Response::new(full("ok")) };
        let (stop, stopped) = tokio::sync::watch::channel(false);
        let until = |mut stopped: tokio::sync::watch::Receiver<bool>| async move {
            let _ = stopped.wait_for(|&s| s).await;
        };
        let fallback = tokio::spawn(serve_unclaimed(
            listener.try_clone().unwrap(),
            GRACE,
            counts.clone(),
            handler,
            limits,
            Arc::clone(&open),
            until(stopped.clone()),
        ));
        // The slow worker, until it is told to stop accepting.
        let worker_listener = TcpListener::from_std({
            let l = listener.try_clone().unwrap();
            l.set_nonblocking(true).unwrap();
            l
        })
        .unwrap();
        let (accepting, mut told) = tokio::sync::watch::channel(true);
        let accepted = Arc::clone(&counts.accepted);
        let worker = tokio::spawn(async move {
            let mut kept = Vec::new();
            while *told.borrow_and_update() {
                tokio::select! {
                    Ok((stream, _)) = worker_listener.accept() => {
                        accepted.fetch_add(1, Ordering::Relaxed);
                        kept.push(stream);
                        tokio::time::sleep(GRACE / 10).await;
                    }
                    _ = told.changed() => {}
                }
            }
            kept.len()
        });
        tokio::time::sleep(GRACE).await;
        // A burst the worker takes about 100 ms to accept.
        let burst: Vec<_> = (0..50)
            .map(|_| std::net::TcpStream::connect(addr).unwrap())
            .collect();
        let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
        while counts.accepted.load(Ordering::Relaxed) + counts.unclaimed.load(Ordering::Relaxed)
            < 50
        {
            assert!(
                tokio::time::Instant::now() < deadline,
                "the burst was not accepted"
            );
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        // At most one grace-long stall of a loaded machine's scheduling.
        assert!(
            counts.unclaimed.load(Ordering::Relaxed) <= 1,
            "{} of 50 taken from an accepting worker",
            counts.unclaimed.load(Ordering::Relaxed)
        );
        // The worker stops accepting: a connection now is the fallback's,
        // after about a grace.
        accepting.send_replace(false);
        let taken = worker.await.unwrap();
        let before = counts.unclaimed.load(Ordering::Relaxed);
        let _late = std::net::TcpStream::connect(addr).unwrap();
        while counts.unclaimed.load(Ordering::Relaxed) == before {
            assert!(
                tokio::time::Instant::now() < deadline,
                "the fallback took nothing"
            );
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        assert!(taken >= 49);
        drop(burst);
        stop.send_replace(true);
        fallback.await.unwrap();
    }
}
