//! Outgoing connections of functions: the sending side of the outbound
//! networking slice, whose grants and address rule are
//! [`luge_core::capabilities::outbound`]'s.
//!
//! This crate narrows tokio, rustls and hyper's client connections to what
//! a sandbox may do:
//!
//! - a connection goes only where the function's `allowed_outbound_hosts`
//!   grant it, checked twice: the request's scheme, host and port before
//!   any lookup, then every address DNS answers
//!   ([`AllowedHosts::permits_address`]); the socket connects to an
//!   address that passed, never to the name again, so an answer that
//!   changes between check and connect (DNS rebinding) changes nothing;
//! - `https` is TLS on rustls with the `ring` provider (TLS 1.2 and 1.3,
//!   SNI, hostname verification), trusting the platform's roots and the
//!   operator's CA bundle, or what Spin's `[[client_tls]]` sets for the
//!   function and host (its roots, a client certificate for mTLS:
//!   [`Config`]), offering HTTP/2 and HTTP/1.1 by ALPN;
//! - the operator's `[outbound_networking] block_networks` refuse an
//!   address whatever a grant says;
//! - every step (lookup, connect, handshake, first byte) ends by the
//!   invocation's deadline: a server that stalls costs the request its
//!   own time, no more.
//!
//! Connections are kept alive between requests of the same function to
//! the same origin ([`Pool`]: at most [`MAX_CONNECTIONS_PER_ORIGIN`] open
//! per function and origin, [`MAX_IDLE_PER_ORIGIN`] and [`MAX_IDLE`] idle,
//! closed when idle for [`IDLE_TIMEOUT`] and at
//! [`MAX_CONNECTION_LIFETIME`]). Redirects
//! are not followed: a 3xx goes back to the function, whose next request
//! is checked like any other.

#![deny(missing_docs)]

use std::net::{IpAddr, SocketAddr};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use hyper::body::{Body, Incoming};
use hyper_util::rt::{TokioExecutor, TokioIo};
use luge_core::capabilities::AllowedHosts;
use rustls::pki_types::ServerName;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::TcpStream;
use tokio::time::timeout_at;

/// Addresses of one name that are tried: a hostile resolver's answer of
/// thousands costs no more than eight connection attempts.
pub const MAX_ADDRESSES: usize = 8;

/// Why an outgoing request got no response.
#[derive(Debug, thiserror::Error)]
pub enum SendError {
    /// The scheme, host or port is not granted.
    #[error("{0} is not granted by allowed_outbound_hosts")]
    Denied(String),
    /// The name resolved only to addresses no grant names (a wildcard
    /// grant reaches public addresses only).
    #[error("{0} resolved only to addresses its grant does not reach")]
    AddressProhibited(String),
    /// No address for the name.
    #[error("{0}: no address")]
    NotFound(String),
    /// The lookup failed.
    #[error("DNS lookup of {host} failed: {source}")]
    Dns {
        /// The name.
        host: String,
        /// What the resolver said.
        source: std::io::Error,
    },
    /// The lookup did not end in time.
    #[error("DNS lookup timed out")]
    DnsTimeout,
    /// No connection in time.
    #[error("connection timed out")]
    ConnectTimeout,
    /// The server refused the connection.
    #[error("connection refused")]
    ConnectionRefused,
    /// Another connection failure.
    #[error("connection failed: {0}")]
    Connect(std::io::Error),
    /// A host that cannot be a TLS server name.
    #[error("{0} is not a valid TLS server name")]
    ServerName(String),
    /// The handshake did not end in time.
    #[error("TLS handshake timed out")]
    TlsTimeout,
    /// The server's certificate was refused (unknown issuer, expired,
    /// another name, ...).
    #[error("TLS certificate refused: {0}")]
    TlsCertificate(String),
    /// The TLS client could not be set up.
    #[error("TLS client: {0}")]
    TlsSetup(ConfigError),
    /// Another TLS failure.
    #[error("TLS failed: {0}")]
    Tls(std::io::Error),
    /// The function holds [`MAX_CONNECTIONS_PER_ORIGIN`] connections to
    /// this origin, and none closed in time.
    #[error("too many connections open to this origin")]
    ConnectionLimit,
    /// No response head in time.
    #[error("no response in time")]
    ResponseTimeout,
    /// The HTTP exchange failed.
    #[error("HTTP: {0}")]
    Http(#[from] hyper::Error),
    /// A URI without scheme or authority.
    #[error("the request URI has no scheme or host")]
    Uri,
}

mod budget;
#[cfg(feature = "component")]
pub mod component;
mod config;
mod slots;
mod unfinished;

pub use budget::{Budget, Budgeted};
pub use slots::Slots;
pub use unfinished::{Unfinished, finished_by};

/// Who opens a database or broker connection, and within what: what
/// every client of this family (`luge-outbound-pg`, `-mysql`, `-redis`,
/// `-mqtt`) takes to open one.
#[derive(Debug, Clone, Copy)]
pub struct Caller<'a> {
    /// The function, by name: its connection slots are its own.
    pub function: &'a str,
    /// Where it may connect: every address is checked against them.
    pub grants: &'a AllowedHosts,
    /// When the invocation's time runs out: connecting, and every
    /// operation, end by then.
    pub deadline: Instant,
    /// The most one answer (a reply, a result set) may take, bytes.
    pub max_answer_bytes: usize,
}

impl<'a> Caller<'a> {
    /// `function`, with `grants`, by `deadline`, each answer at most
    /// `max_answer_bytes`.
    pub const fn new(
        function: &'a str,
        grants: &'a AllowedHosts,
        deadline: Instant,
        max_answer_bytes: usize,
    ) -> Self {
        Self {
            function,
            grants,
            deadline,
            max_answer_bytes,
        }
    }

    /// Its parts, in one line where a client takes them apart: the
    /// function, its grants, its deadline, its answer bound.
    pub const fn parts(self) -> (&'a str, &'a AllowedHosts, Instant, usize) {
        (
            self.function,
            self.grants,
            self.deadline,
            self.max_answer_bytes,
        )
    }
}

/// A result column of a database client: its name, and its type in the
/// client's terms (`T`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Column<T> {
    /// Its name.
    pub name: String,
    /// Its type.
    pub data_type: T,
}

/// A query's answer from a database client: its columns, and its rows, a
/// value (`V`) per column.
#[derive(Debug, Clone, PartialEq)]
pub struct RowSet<T, V> {
    /// The columns.
    pub columns: Vec<Column<T>>,
    /// The rows, a value per column.
    pub rows: Vec<Vec<V>>,
}

impl<T, V> Default for RowSet<T, V> {
    fn default() -> Self {
        Self {
            columns: Vec::new(),
            rows: Vec::new(),
        }
    }
}

impl<T, V> RowSet<T, V> {
    /// The columns and the rows in another interface's types: `column`
    /// turns each column, `value` each value.
    pub fn map<C, W>(
        self,
        column: impl FnMut(Column<T>) -> C,
        mut value: impl FnMut(V) -> W,
    ) -> (Vec<C>, Vec<Vec<W>>) {
        let columns = self.columns.into_iter().map(column).collect();
        let rows = self
            .rows
            .into_iter()
            .map(|row| row.into_iter().map(&mut value).collect())
            .collect();
        (columns, rows)
    }
}

pub use config::{ClientTlsToml, Config, ConfigError, OutboundNetworkingToml, TrustPem};

static CONFIG: OnceLock<Config> = OnceLock::new();

/// Sets this process's outbound settings, once, before the first
/// outgoing request; `Err` gives `config` back if they were already set.
/// Without it, the platform's roots alone are trusted and nothing is
/// blocked beyond the grants.
pub fn install(config: Config) -> Result<(), Config> {
    CONFIG.set(config)
}

/// The TLS client `component` uses for `host:port` (the platform's roots,
/// the operator's `--ca-file`, Spin's `[[client_tls]]` rules), for a
/// protocol other than HTTP (a database's): without HTTP's ALPN.
pub fn tls_client(
    component: &str,
    host: &str,
    port: u16,
) -> Result<Arc<rustls::ClientConfig>, SendError> {
    let client = config()?.client_for(component, bare(host), port);
    let mut plain = (**client).clone();
    plain.alpn_protocols.clear();
    Ok(Arc::new(plain))
}

/// What [`tls_client`] trusts and presents for `component` reaching
/// `host:port`, as PEM: for a driver that builds its own TLS client from
/// files (MySQL's), so it trusts exactly what Luge's own clients do.
pub fn tls_trust(component: &str, host: &str, port: u16) -> Result<&'static TrustPem, SendError> {
    // The settings live as long as the process: handed out by reference,
    // the PEM is not copied for each connection.
    Ok(config()?.trust_for(component, bare(host), port))
}

/// A TLS client that trusts only `ca_pem`'s certificates, without ALPN
/// (a function's own CA root for one connection: Spin's `set-ca-root`).
pub fn tls_client_trusting(ca_pem: &[u8]) -> Result<Arc<rustls::ClientConfig>, SendError> {
    config::trusting(ca_pem).map_err(SendError::TlsSetup)
}

/// `host` as the name a TLS server's certificate must hold.
pub fn server_name(host: &str) -> Result<ServerName<'static>, SendError> {
    ServerName::try_from(bare(host).to_owned()).map_err(|_| SendError::ServerName(host.to_owned()))
}

fn config() -> Result<&'static Config, SendError> {
    if let Some(config) = CONFIG.get() {
        return Ok(config);
    }
    let config = Config::new(None).map_err(SendError::TlsSetup)?;
    Ok(CONFIG.get_or_init(|| config))
}

/// Sockets one invocation may open (TCP connections and UDP sockets),
/// like its outgoing HTTP requests: each holds a descriptor.
pub const MAX_SOCKETS: usize = 64;

/// What a sandbox asks to do with a socket address (`wasi:sockets`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SocketUse {
    /// Bind a local address (explicitly, or implicitly before a connect
    /// or a first datagram): once per socket.
    Bind,
    /// Listen or accept: serve on a socket.
    Listen,
    /// Connect a TCP socket to a peer.
    Connect,
    /// Send or receive a datagram to or from a peer.
    Datagram,
}

/// One invocation's socket policy: its grants (`tcp://`, `udp://`), the
/// operator's blocked networks, and [`MAX_SOCKETS`].
#[derive(Debug)]
pub struct Sockets {
    grants: AllowedHosts,
    opened: std::sync::atomic::AtomicUsize,
}

impl Sockets {
    /// The policy of a function granted `grants`.
    pub fn new(grants: AllowedHosts) -> Self {
        Self {
            grants,
            opened: std::sync::atomic::AtomicUsize::new(0),
        }
    }

    /// Whether `use_` of `addr` over `scheme` (`tcp` or `udp`) is
    /// permitted. A bind only to an unspecified or loopback address on an
    /// ephemeral port (what a connect does implicitly); never a listener
    /// (a function does not serve sockets: its host does); a peer only
    /// where a grant names its address, a CIDR range holds it, or a
    /// wildcard reaches it (public addresses only), and the operator does
    /// not block it; at most [`MAX_SOCKETS`] sockets (each binds once).
    pub fn permits(&self, scheme: &str, use_: SocketUse, addr: SocketAddr) -> bool {
        let ip = addr.ip();
        let peer = || permits_peer(&self.grants, scheme, &ip.to_string(), addr.port(), ip);
        match use_ {
            SocketUse::Listen => false,
            SocketUse::Datagram | SocketUse::Connect => peer(),
            SocketUse::Bind => {
                (ip.is_unspecified() || ip.is_loopback())
                    && addr.port() == 0
                    && self
                        .opened
                        .fetch_update(
                            std::sync::atomic::Ordering::Relaxed,
                            std::sync::atomic::Ordering::Relaxed,
                            |n| (n < MAX_SOCKETS).then_some(n + 1),
                        )
                        .is_ok()
            }
        }
    }
}

/// Whether a client that looked `scheme://host:port` up by itself (a
/// broker's client dialing the brokers its cluster advertises) may
/// connect to `ip`, one of its answers: `grants` name the host, permit
/// the address ([`AllowedHosts::permits_address`]), and the operator
/// does not block it. The check [`permitted_addresses`] makes of each
/// answer, for an address found by someone else's lookup.
pub fn permits_peer(
    grants: &AllowedHosts,
    scheme: &str,
    host: &str,
    port: u16,
    ip: IpAddr,
) -> bool {
    grants.allows(scheme, host, port)
        && grants.permits_address(scheme, host, port, ip)
        && config().is_ok_and(|c| !c.blocks(ip))
}

/// A host without the brackets of an IPv6 literal.
fn bare(host: &str) -> &str {
    host.strip_prefix('[')
        .and_then(|h| h.strip_suffix(']'))
        .unwrap_or(host)
}

/// The addresses of `scheme://host:port` that `grants` permit (and the
/// operator does not block), looked up by `deadline`: the grant checked
/// before the lookup, each answer after it (at most [`MAX_ADDRESSES`],
/// in the resolver's order). A client that connects by itself (a
/// database driver) is given one of these, never the name, so an answer
/// that changes between check and connect changes nothing.
pub async fn permitted_addresses(
    grants: &AllowedHosts,
    scheme: &str,
    host: &str,
    port: u16,
    deadline: Instant,
) -> Result<Vec<SocketAddr>, SendError> {
    permitted_addresses_via(&System, grants, scheme, host, port, deadline).await
}

/// What looks a name up: the system's resolver ([`System`]) in Luge; in
/// the tests, one whose answers the test controls (a rebinding one).
trait Resolve: Sync {
    /// The addresses of `name`, each with `port`.
    fn lookup(
        &self,
        name: &str,
        port: u16,
    ) -> impl std::future::Future<Output = std::io::Result<Vec<SocketAddr>>> + Send;
}

/// The system's resolver (getaddrinfo, on tokio's blocking threads).
struct System;

impl Resolve for System {
    fn lookup(
        &self,
        name: &str,
        port: u16,
    ) -> impl std::future::Future<Output = std::io::Result<Vec<SocketAddr>>> + Send {
        let name = name.to_owned();
        async move {
            Ok(tokio::net::lookup_host((name.as_str(), port))
                .await?
                .take(MAX_ADDRESSES)
                .collect())
        }
    }
}

/// [`permitted_addresses`], names looked up by `resolver`: once, every
/// answer checked.
async fn permitted_addresses_via(
    resolver: &impl Resolve,
    grants: &AllowedHosts,
    scheme: &str,
    host: &str,
    port: u16,
    deadline: Instant,
) -> Result<Vec<SocketAddr>, SendError> {
    let deadline = tokio::time::Instant::from_std(deadline);
    if !grants.allows(scheme, host, port) {
        return Err(SendError::Denied(format!("{scheme}://{host}:{port}")));
    }
    let name = bare(host);
    let answers: Vec<SocketAddr> = match name.parse::<IpAddr>() {
        Ok(ip) => vec![SocketAddr::new(ip, port)],
        Err(_) => {
            let mut answers = timeout_at(deadline, resolver.lookup(name, port))
                .await
                .map_err(|_| SendError::DnsTimeout)?
                .map_err(|source| SendError::Dns {
                    host: name.to_owned(),
                    source,
                })?;
            // A resolver of the tests' may answer more.
            answers.truncate(MAX_ADDRESSES);
            answers
        }
    };
    let config = config()?;
    let permitted: Vec<SocketAddr> = answers
        .iter()
        .copied()
        .filter(|a| grants.permits_address(scheme, host, port, a.ip()) && !config.blocks(a.ip()))
        .collect();
    if permitted.is_empty() {
        tracing::debug!(%host, ?answers, "outgoing connection: no permitted address");
        return Err(if answers.is_empty() {
            SendError::NotFound(name.to_owned())
        } else {
            SendError::AddressProhibited(name.to_owned())
        });
    }
    Ok(permitted)
}

/// Opens a TCP connection for `scheme://host:port` to an address `grants`
/// permit ([`permitted_addresses`]), by `deadline`.
pub async fn connect(
    grants: &AllowedHosts,
    scheme: &str,
    host: &str,
    port: u16,
    deadline: Instant,
) -> Result<TcpStream, SendError> {
    connect_via(&System, grants, scheme, host, port, deadline).await
}

/// [`connect`], names looked up by `resolver`: the connection goes to one
/// of the addresses that were checked, never to a name looked up again.
async fn connect_via(
    resolver: &impl Resolve,
    grants: &AllowedHosts,
    scheme: &str,
    host: &str,
    port: u16,
    deadline: Instant,
) -> Result<TcpStream, SendError> {
    let permitted = permitted_addresses_via(resolver, grants, scheme, host, port, deadline).await?;
    let deadline = tokio::time::Instant::from_std(deadline);
    let name = bare(host);
    let mut last = None;
    for addr in permitted {
        match timeout_at(deadline, TcpStream::connect(addr)).await {
            Err(_) => return Err(SendError::ConnectTimeout),
            Ok(Ok(stream)) => return Ok(stream),
            Ok(Err(e)) => last = Some(e),
        }
    }
    Err(match last {
        Some(e) if e.kind() == std::io::ErrorKind::ConnectionRefused => {
            SendError::ConnectionRefused
        }
        Some(e) => SendError::Connect(e),
        None => SendError::NotFound(name.to_owned()),
    })
}

/// A byte stream, plain or TLS, as hyper's connections take it.
trait Stream: AsyncRead + AsyncWrite + Send + Unpin + 'static {}
impl<T: AsyncRead + AsyncWrite + Send + Unpin + 'static> Stream for T {}

/// Time bounds of one request: everything ends by `deadline` (the
/// invocation's), the connection and the first response byte sooner
/// where the function asked.
#[derive(Debug, Clone, Copy)]
pub struct Bounds {
    /// When the invocation's time runs out.
    pub deadline: Instant,
    /// The function's connect timeout, if it set one.
    pub connect: Option<Duration>,
    /// The function's first-byte timeout, if it set one.
    pub first_byte: Option<Duration>,
}

/// Headers HTTP/2 forbids (RFC 9113 8.2.2): a request written for
/// HTTP/1.1 loses them when it goes out over HTTP/2.
const CONNECTION_HEADERS: [&str; 5] = [
    "connection",
    "keep-alive",
    "proxy-connection",
    "transfer-encoding",
    "upgrade",
];

/// Idle connections kept per function and origin: enough for a
/// function's usual fan-out to one API, few enough that a function
/// cycling through origins holds little.
pub const MAX_IDLE_PER_ORIGIN: usize = 4;
/// Idle connections kept in all (descriptors held between requests);
/// past it, the oldest origin's are closed first.
pub const MAX_IDLE: usize = 256;
/// How long a connection may sit idle before it is closed: below the
/// usual server keep-alive (nginx 75 s, Node 5 s is shorter and simply
/// closes it first, which the pool notices).
pub const IDLE_TIMEOUT: Duration = Duration::from_secs(30);
/// Longest life of any connection, in use or not: a server that keeps a
/// response open forever is cut off here, whatever holds it.
pub const MAX_CONNECTION_LIFETIME: Duration = Duration::from_secs(300);

/// A connection's sending half, HTTP/1.1 or HTTP/2.
enum Sender<B> {
    H1(hyper::client::conn::http1::SendRequest<B>),
    H2(hyper::client::conn::http2::SendRequest<B>),
}

impl<B> Sender<B>
where
    B: Body + Send + Unpin + 'static,
    B::Data: Send,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    fn is_ready(&self) -> bool {
        match self {
            Self::H1(s) => s.is_ready(),
            Self::H2(s) => s.is_ready(),
        }
    }

    fn is_closed(&self) -> bool {
        match self {
            Self::H1(s) => s.is_closed(),
            Self::H2(s) => s.is_closed(),
        }
    }

    async fn send(
        &mut self,
        mut request: http::Request<B>,
    ) -> Result<http::Response<Incoming>, SendError> {
        match self {
            Self::H1(s) => {
                s.ready().await?;
                // Origin-form on the wire: scheme and authority went into
                // the connection (and the Host header).
                let path = request
                    .uri()
                    .path_and_query()
                    .map_or("/", |p| p.as_str())
                    .parse()
                    .map_err(|_| SendError::Uri)?;
                *request.uri_mut() = path;
                Ok(s.send_request(request).await?)
            }
            Self::H2(s) => {
                s.ready().await?;
                let headers = request.headers_mut();
                for name in CONNECTION_HEADERS {
                    headers.remove(name);
                }
                Ok(s.send_request(request).await?)
            }
        }
    }
}

/// Where an idle connection may be taken again: the same function, the
/// same scheme, host and port.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct Key {
    owner: usize,
    secure: bool,
    host: String,
    port: u16,
}

struct Idle<B> {
    sender: Sender<B>,
    /// The address it is connected to: checked against the grants of
    /// whoever takes it.
    peer: IpAddr,
    since: Instant,
}

/// Kept-alive connections of functions, per function and origin, bounded
/// ([`MAX_IDLE_PER_ORIGIN`], [`MAX_IDLE`], [`IDLE_TIMEOUT`]). A
/// connection goes back to the pool once its response head is in; it is
/// taken again only when hyper says it is ready (its last response body
/// read to the end, for HTTP/1.1) and its peer address is one the taker's
/// grants permit.
pub struct Pool<B> {
    idle: std::sync::Mutex<std::collections::HashMap<Key, Vec<Idle<B>>>>,
    /// Open connections per function and origin, in use or idle: a
    /// connection holds a permit for its whole life.
    open: std::sync::Mutex<std::collections::HashMap<Key, Arc<tokio::sync::Semaphore>>>,
}

impl<B> Default for Pool<B> {
    fn default() -> Self {
        Self {
            idle: std::sync::Mutex::new(std::collections::HashMap::new()),
            open: std::sync::Mutex::new(std::collections::HashMap::new()),
        }
    }
}

/// Connections one function may hold open to one origin at once, across
/// all its invocations (as Spin 4.1's per-app connection limits): a
/// tenant cannot spend a database's or this host's descriptors on one
/// target. One more waits for a connection to close, until its connect
/// timeout, then is `connection-limit-reached`.
pub const MAX_CONNECTIONS_PER_ORIGIN: usize = 32;

/// Origins whose connection bounds are kept before unused ones are
/// forgotten (a function cycling through many origins keeps few).
const MAX_TRACKED_ORIGINS: usize = 4096;

impl<B> Pool<B>
where
    B: Body + Send + Unpin + 'static,
    B::Data: Send,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    /// Idle connections now held, in all.
    pub fn idle(&self) -> usize {
        self.idle
            .lock()
            .map(|idle| idle.values().map(Vec::len).sum())
            .unwrap_or(0)
    }

    /// A permit to open one more connection for `key`, waiting until
    /// `by` for one to close when [`MAX_CONNECTIONS_PER_ORIGIN`] are open.
    async fn permit(
        &self,
        key: &Key,
        by: tokio::time::Instant,
    ) -> Result<tokio::sync::OwnedSemaphorePermit, SendError> {
        let semaphore = {
            let mut open = self.open.lock().map_err(|_| SendError::ConnectionLimit)?;
            if open.len() >= MAX_TRACKED_ORIGINS {
                // Forget bounds no connection holds.
                open.retain(|_, s| {
                    Arc::strong_count(s) > 1 || s.available_permits() < MAX_CONNECTIONS_PER_ORIGIN
                });
            }
            Arc::clone(open.entry(key.clone()).or_insert_with(|| {
                Arc::new(tokio::sync::Semaphore::new(MAX_CONNECTIONS_PER_ORIGIN))
            }))
        };
        timeout_at(by, semaphore.acquire_owned())
            .await
            .map_err(|_| SendError::ConnectionLimit)?
            .map_err(|_| SendError::ConnectionLimit)
    }

    /// A ready idle connection for `key` whose peer `permits` accepts;
    /// closed and expired ones are dropped on the way.
    fn take(&self, key: &Key, permits: impl Fn(IpAddr) -> bool) -> Option<(Sender<B>, IpAddr)> {
        let mut idle = self.idle.lock().ok()?;
        let list = idle.get_mut(key)?;
        let now = Instant::now();
        list.retain(|c| !c.sender.is_closed() && now.duration_since(c.since) < IDLE_TIMEOUT);
        let found = list
            .iter()
            .rposition(|c| c.sender.is_ready() && permits(c.peer))
            .map(|i| list.swap_remove(i));
        if list.is_empty() {
            idle.remove(key);
        }
        found.map(|c| (c.sender, c.peer))
    }

    /// Keeps `sender` for the next request to `key`, within the bounds.
    fn put(&self, key: Key, sender: Sender<B>, peer: IpAddr) {
        let Ok(mut idle) = self.idle.lock() else {
            return;
        };
        let now = Instant::now();
        let total: usize = idle.values().map(Vec::len).sum();
        if total >= MAX_IDLE {
            // Sweep what has expired or closed everywhere; if still full,
            // this connection is simply not kept.
            idle.retain(|_, list| {
                list.retain(|c| {
                    !c.sender.is_closed() && now.duration_since(c.since) < IDLE_TIMEOUT
                });
                !list.is_empty()
            });
            if idle.values().map(Vec::len).sum::<usize>() >= MAX_IDLE {
                return;
            }
        }
        let list = idle.entry(key).or_default();
        if list.len() >= MAX_IDLE_PER_ORIGIN {
            list.remove(0);
        }
        list.push(Idle {
            sender,
            peer,
            since: now,
        });
    }
}

/// How many (function, origin) pairs [`hint_grant`] says at most in a
/// process's life: enough for every mistake an app's author makes, too
/// few for a tenant to fill the log by asking for ever new origins.
const MAX_GRANT_HINTS: usize = 256;

/// Says, once per function and origin, what the author of a function
/// whose outgoing request was refused needs to know (the guest only sees
/// `HttpRequestDenied`): the grant that would allow it, as Spin says it.
fn hint_grant(function: &str, origin: &str) {
    if !first_hint(function, origin) {
        return;
    }
    tracing::warn!(
        function,
        "an outgoing request to {origin} was refused: to allow it, add \"{origin}\" to the function's allowed_outbound_hosts"
    );
}

/// Whether (`function`, `origin`) is said now: not said before, and fewer
/// than [`MAX_GRANT_HINTS`] said in this process.
fn first_hint(function: &str, origin: &str) -> bool {
    static SAID: std::sync::Mutex<Vec<(String, String)>> = std::sync::Mutex::new(Vec::new());
    let mut said = SAID.lock().unwrap_or_else(|e| e.into_inner());
    if said.len() >= MAX_GRANT_HINTS || said.iter().any(|(f, o)| f == function && o == origin) {
        return false;
    }
    said.push((function.to_owned(), origin.to_owned()));
    true
}

/// Sends `request` (an absolute `http` or `https` URI) where `grants`
/// allow, within `bounds`, on a kept-alive connection of `owner`'s (an
/// identity of the function, stable while it is loaded) from `pool`, or
/// a new one with the TLS settings of `component` (the function's name,
/// as `[[client_tls]]` names it); the response's body streams on.
pub async fn send<B>(
    pool: &Pool<B>,
    owner: usize,
    component: &str,
    grants: &AllowedHosts,
    request: http::Request<B>,
    bounds: Bounds,
) -> Result<http::Response<Incoming>, SendError>
where
    B: Body + Send + Unpin + 'static,
    B::Data: Send,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    let uri = request.uri();
    let scheme = uri.scheme_str().ok_or(SendError::Uri)?.to_ascii_lowercase();
    let authority = uri.authority().ok_or(SendError::Uri)?;
    let host = authority.host().to_owned();
    let secure = match scheme.as_str() {
        "http" => false,
        "https" => true,
        _ => return Err(SendError::Denied(format!("{scheme}://{authority}"))),
    };
    let port = authority
        .port_u16()
        .unwrap_or(if secure { 443 } else { 80 });
    if !grants.allows(&scheme, &host, port) {
        let origin = format!("{scheme}://{host}:{port}");
        hint_grant(component, &origin);
        return Err(SendError::Denied(origin));
    }
    let key = Key {
        owner,
        secure,
        host: host.trim_end_matches('.').to_ascii_lowercase(),
        port,
    };
    let now = Instant::now();
    let within =
        |bound: Option<Duration>| bound.map_or(bounds.deadline, |b| bounds.deadline.min(now + b));
    let blocked = config()?;
    let permits =
        |peer| grants.permits_address(&scheme, &host, port, peer) && !blocked.blocks(peer);
    let (mut sender, peer) = match pool.take(&key, permits) {
        Some(kept) => kept,
        None => {
            let connect_by = within(bounds.connect);
            let permit = pool
                .permit(&key, tokio::time::Instant::from_std(connect_by))
                .await?;
            let target = (scheme.as_str(), host.as_str(), port, secure);
            open(
                grants,
                component,
                target,
                permit,
                connect_by,
                bounds.deadline,
            )
            .await?
        }
    };
    let first_byte = tokio::time::Instant::from_std(within(bounds.first_byte));
    let response = timeout_at(first_byte, sender.send(request))
        .await
        .map_err(|_| SendError::ResponseTimeout)??;
    pool.put(key, sender, peer);
    Ok(response)
}

/// A new connection for `scheme://host:port` of `component`'s: TCP to a permitted address
/// by `connect_by`, TLS and the HTTP handshake by `deadline`.
async fn open<B>(
    grants: &AllowedHosts,
    component: &str,
    (scheme, host, port, secure): (&str, &str, u16, bool),
    permit: tokio::sync::OwnedSemaphorePermit,
    connect_by: Instant,
    deadline: Instant,
) -> Result<(Sender<B>, IpAddr), SendError>
where
    B: Body + Send + Unpin + 'static,
    B::Data: Send,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    let tcp = connect(grants, scheme, host, port, connect_by).await?;
    let _ = tcp.set_nodelay(true);
    let peer = tcp.peer_addr().map_err(SendError::Connect)?.ip();
    let deadline = tokio::time::Instant::from_std(deadline);
    let (io, h2): (Box<dyn Stream>, bool) = if secure {
        let name = ServerName::try_from(bare(host).to_owned())
            .map_err(|_| SendError::ServerName(host.to_owned()))?;
        let client = config()?.client_for(component, bare(host), port);
        let connector = tokio_rustls::TlsConnector::from(Arc::clone(client));
        let stream = timeout_at(deadline, connector.connect(name, tcp))
            .await
            .map_err(|_| SendError::TlsTimeout)?
            .map_err(tls_error)?;
        let h2 = stream.get_ref().1.alpn_protocol() == Some(b"h2");
        (Box::new(stream), h2)
    } else {
        (Box::new(tcp), false)
    };
    let io = TokioIo::new(io);
    let sender = if h2 {
        let (sender, connection) = timeout_at(
            deadline,
            hyper::client::conn::http2::handshake(TokioExecutor::new(), io),
        )
        .await
        .map_err(|_| SendError::ResponseTimeout)??;
        drive(connection, permit);
        Sender::H2(sender)
    } else {
        let (sender, connection) = timeout_at(deadline, hyper::client::conn::http1::handshake(io))
            .await
            .map_err(|_| SendError::ResponseTimeout)??;
        drive(connection, permit);
        Sender::H1(sender)
    };
    Ok((sender, peer))
}

/// Runs a connection's I/O until it ends or [`MAX_CONNECTION_LIFETIME`]
/// passes, holding its place among the function's open connections
/// (`permit`) for as long.
fn drive<C>(connection: C, permit: tokio::sync::OwnedSemaphorePermit)
where
    C: std::future::Future + Send + 'static,
    C::Output: Send,
{
    tokio::spawn(async move {
        let _open = permit;
        tokio::time::timeout(MAX_CONNECTION_LIFETIME, connection).await
    });
}

/// A failed handshake as the function should hear it: a refused
/// certificate named as such.
fn tls_error(e: std::io::Error) -> SendError {
    let certificate = e
        .get_ref()
        .and_then(|inner| inner.downcast_ref::<rustls::Error>())
        .and_then(|inner| match inner {
            rustls::Error::InvalidCertificate(why) => Some(format!("{why:?}")),
            _ => None,
        });
    match certificate {
        Some(why) => SendError::TlsCertificate(why),
        None => SendError::Tls(e),
    }
}

#[cfg(test)]
mod tests {
    /// A tenant asking for ever new origins is told of each once, and of
    /// at most MAX_GRANT_HINTS in all: the log it can fill is bounded.
    #[test]
    fn grant_hints_are_said_once_each_and_bounded_in_all() {
        assert!(super::first_hint("hinted", "http://a:80"));
        assert!(!super::first_hint("hinted", "http://a:80"));
        let said = (0..super::MAX_GRANT_HINTS * 2)
            .filter(|i| super::first_hint("flood", &format!("http://h{i}:80")))
            .count();
        assert!(said < super::MAX_GRANT_HINTS, "{said}");
        assert!(!super::first_hint("late", "http://b:80"));
    }

    use std::sync::atomic::{AtomicUsize, Ordering};

    use bytes::Bytes;
    use http_body_util::{BodyExt, Empty};
    use luge_core::capabilities::Variables;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    use super::*;

    /// An HTTP/1.1 server on 127.0.0.1 that keeps connections alive and
    /// counts them; `whole` false: each response's body is cut short (the
    /// connection stays busy).
    async fn server(whole: bool) -> (u16, Arc<AtomicUsize>) {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let accepted = Arc::new(AtomicUsize::new(0));
        let count = Arc::clone(&accepted);
        tokio::spawn(async move {
            loop {
                let (mut stream, _) = listener.accept().await.unwrap();
                count.fetch_add(1, Ordering::SeqCst);
                tokio::spawn(async move {
                    let mut buf = vec![0u8; 4096];
                    let mut seen = Vec::new();
                    loop {
                        let Ok(n) = stream.read(&mut buf).await else {
                            return;
                        };
                        if n == 0 {
                            return;
                        }
                        seen.extend_from_slice(&buf[..n]);
                        while let Some(end) = seen.windows(4).position(|w| w == b"\r\n\r\n") {
                            seen.drain(..end + 4);
                            let reply: &[u8] = if whole {
                                b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok"
                            } else {
                                b"HTTP/1.1 200 OK\r\ncontent-length: 9\r\n\r\nok"
                            };
                            if stream.write_all(reply).await.is_err() {
                                return;
                            }
                        }
                    }
                });
            }
        });
        (port, accepted)
    }

    fn grants(entries: &[String]) -> AllowedHosts {
        let entries: Vec<_> = entries.iter().map(|e| e.as_str().into()).collect();
        AllowedHosts::parse(&entries, &Variables::default()).unwrap()
    }

    /// A resolver a rebinding attacker runs: its first answer for a name
    /// is `first`, every later one `then`; it counts its lookups.
    struct Rebinding {
        first: Vec<SocketAddr>,
        then: Vec<SocketAddr>,
        lookups: AtomicUsize,
    }

    impl Resolve for Rebinding {
        fn lookup(
            &self,
            _: &str,
            _: u16,
        ) -> impl std::future::Future<Output = std::io::Result<Vec<SocketAddr>>> + Send {
            let answer = if self.lookups.fetch_add(1, Ordering::SeqCst) == 0 {
                self.first.clone()
            } else {
                self.then.clone()
            };
            async move { Ok(answer) }
        }
    }

    /// A listener on `ip` (at `port`, or any if 0) counting what it
    /// accepts.
    async fn counting(ip: &str, port: u16) -> (u16, Arc<AtomicUsize>) {
        let listener = tokio::net::TcpListener::bind((ip, port)).await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let accepted = Arc::new(AtomicUsize::new(0));
        let count = Arc::clone(&accepted);
        tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                count.fetch_add(1, Ordering::SeqCst);
                drop(stream);
            }
        });
        (port, accepted)
    }

    /// DNS rebinding: a name whose answer changes between the check and
    /// the connection (127.0.0.1, granted by name, then 127.0.0.2, where
    /// another server listens) is looked up once per connection, and the
    /// connection goes to the address that was checked; under a wildcard
    /// grant, an answer that is not public is refused whatever came
    /// before, and nothing is reached.
    #[tokio::test]
    async fn a_rebinding_answer_changes_nothing_between_check_and_connect() {
        let (port, checked) = counting("127.0.0.1", 0).await;
        // The other server, on the same port of another loopback address.
        let (_, other) = counting("127.0.0.2", port).await;
        let deadline = Instant::now() + Duration::from_secs(5);
        let rebinding = Rebinding {
            first: vec![SocketAddr::from(([127, 0, 0, 1], port))],
            then: vec![SocketAddr::from(([127, 0, 0, 2], port))],
            lookups: AtomicUsize::new(0),
        };
        let named = grants(&[format!("tcp://rebind.test:{port}")]);
        let stream = connect_via(&rebinding, &named, "tcp", "rebind.test", port, deadline)
            .await
            .unwrap();
        assert_eq!(
            stream.peer_addr().unwrap(),
            SocketAddr::from(([127, 0, 0, 1], port))
        );
        assert_eq!(rebinding.lookups.load(Ordering::SeqCst), 1);
        // Addresses handed to a driver are the checked ones, too.
        let addresses =
            permitted_addresses_via(&rebinding, &named, "tcp", "rebind.test", port, deadline)
                .await
                .unwrap();
        assert_eq!(addresses, [SocketAddr::from(([127, 0, 0, 2], port))]);
        assert_eq!(rebinding.lookups.load(Ordering::SeqCst), 2);
        // A wildcard grant reaches public addresses only: the loopback
        // answer is refused, first or later.
        let wildcard = grants(&[format!("tcp://*.rebind.test:{port}")]);
        for _ in 0..2 {
            let refused = connect_via(
                &rebinding,
                &wildcard,
                "tcp",
                "a.rebind.test",
                port,
                deadline,
            )
            .await;
            assert!(
                matches!(refused, Err(SendError::AddressProhibited(_))),
                "{refused:?}"
            );
        }
        let fresh = Rebinding {
            first: vec![SocketAddr::from(([127, 0, 0, 1], port))],
            then: Vec::new(),
            lookups: AtomicUsize::new(0),
        };
        let refused = connect_via(&fresh, &wildcard, "tcp", "a.rebind.test", port, deadline).await;
        assert!(
            matches!(refused, Err(SendError::AddressProhibited(_))),
            "{refused:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert_eq!(checked.load(Ordering::SeqCst), 1);
        assert_eq!(other.load(Ordering::SeqCst), 0);
    }

    async fn get(
        pool: &Pool<Empty<Bytes>>,
        owner: usize,
        grants: &AllowedHosts,
        url: &str,
    ) -> Result<Bytes, SendError> {
        let request = http::Request::get(url).body(Empty::new()).unwrap();
        let bounds = Bounds {
            deadline: Instant::now() + Duration::from_secs(5),
            connect: None,
            first_byte: None,
        };
        let response = send(pool, owner, "f", grants, request, bounds).await?;
        Ok(response.into_body().collect().await.unwrap().to_bytes())
    }

    #[tokio::test]
    async fn connections_are_kept_per_function_and_origin() {
        let (port, accepted) = server(true).await;
        let url = format!("http://127.0.0.1:{port}/");
        let granted = grants(&[format!("http://127.0.0.1:{port}")]);
        let pool = Pool::default();
        for _ in 0..5 {
            assert_eq!(get(&pool, 1, &granted, &url).await.unwrap(), "ok");
        }
        assert_eq!(
            accepted.load(Ordering::SeqCst),
            1,
            "one connection, kept alive"
        );
        assert_eq!(pool.idle(), 1);
        // Another function opens its own.
        get(&pool, 2, &granted, &url).await.unwrap();
        assert_eq!(accepted.load(Ordering::SeqCst), 2);
        // A kept connection is never handed to grants that do not permit
        // its peer: a wildcard reaches public addresses only.
        let wildcard = grants(&["http://*:*".to_owned()]);
        assert!(matches!(
            get(&pool, 1, &wildcard, &url).await,
            Err(SendError::AddressProhibited(_))
        ));
        // Nor to a request its grants deny.
        let other = grants(&["http://127.0.0.1:1".to_owned()]);
        assert!(matches!(
            get(&pool, 1, &other, &url).await,
            Err(SendError::Denied(_))
        ));
        assert_eq!(accepted.load(Ordering::SeqCst), 2);
    }

    #[test]
    fn sockets_reach_granted_addresses_only_and_are_bounded() {
        let sockets = Sockets::new(grants(&[
            "tcp://127.0.0.1:5000".to_owned(),
            "udp://*:53".to_owned(),
        ]));
        let at = |s: &str| s.parse::<SocketAddr>().unwrap();
        assert!(sockets.permits("tcp", SocketUse::Connect, at("127.0.0.1:5000")));
        assert!(!sockets.permits("tcp", SocketUse::Connect, at("127.0.0.1:5001")));
        assert!(!sockets.permits("udp", SocketUse::Connect, at("127.0.0.1:5000")));
        // A wildcard reaches public addresses only.
        assert!(sockets.permits("udp", SocketUse::Datagram, at("1.1.1.1:53")));
        assert!(!sockets.permits("udp", SocketUse::Datagram, at("127.0.0.53:53")));
        // No listener, no bind to a chosen port or a public address.
        assert!(!sockets.permits("tcp", SocketUse::Listen, at("0.0.0.0:0")));
        assert!(!sockets.permits("tcp", SocketUse::Bind, at("0.0.0.0:8080")));
        assert!(!sockets.permits("tcp", SocketUse::Bind, at("1.1.1.1:0")));
        for _ in 0..MAX_SOCKETS {
            assert!(sockets.permits("tcp", SocketUse::Bind, at("0.0.0.0:0")));
        }
        assert!(!sockets.permits("tcp", SocketUse::Bind, at("[::]:0")));
    }

    #[tokio::test]
    async fn idle_connections_are_bounded_per_origin() {
        let (port, accepted) = server(false).await;
        let url = format!("http://127.0.0.1:{port}/");
        let granted = grants(&[format!("http://127.0.0.1:{port}")]);
        let pool = Pool::default();
        // Responses held unread keep their connections busy: each request
        // opens another, and at most MAX_IDLE_PER_ORIGIN are kept.
        let mut held = Vec::new();
        for _ in 0..MAX_IDLE_PER_ORIGIN + 3 {
            let request = http::Request::get(&url)
                .body(Empty::<Bytes>::new())
                .unwrap();
            let bounds = Bounds {
                deadline: Instant::now() + Duration::from_secs(5),
                connect: None,
                first_byte: None,
            };
            held.push(
                send(&pool, 7, "f", &granted, request, bounds)
                    .await
                    .unwrap(),
            );
        }
        assert_eq!(accepted.load(Ordering::SeqCst), MAX_IDLE_PER_ORIGIN + 3);
        assert_eq!(pool.idle(), MAX_IDLE_PER_ORIGIN);
    }

    #[tokio::test]
    async fn open_connections_are_bounded_per_function_and_origin() {
        let (port, accepted) = server(false).await;
        let url = format!("http://127.0.0.1:{port}/");
        let granted = grants(&[format!("http://127.0.0.1:{port}")]);
        let pool = Pool::default();
        let request = || {
            http::Request::get(&url)
                .body(Empty::<Bytes>::new())
                .unwrap()
        };
        let bounds = || Bounds {
            deadline: Instant::now() + Duration::from_secs(5),
            connect: Some(Duration::from_millis(200)),
            first_byte: None,
        };
        // Every response held unread: each connection stays busy, open.
        let mut held = Vec::new();
        for _ in 0..MAX_CONNECTIONS_PER_ORIGIN {
            held.push(
                send(&pool, 9, "f", &granted, request(), bounds())
                    .await
                    .unwrap(),
            );
        }
        let started = Instant::now();
        let refused = send(&pool, 9, "f", &granted, request(), bounds()).await;
        assert!(
            matches!(refused, Err(SendError::ConnectionLimit)),
            "{refused:?}"
        );
        assert!(started.elapsed() >= Duration::from_millis(150));
        assert_eq!(accepted.load(Ordering::SeqCst), MAX_CONNECTIONS_PER_ORIGIN);
        // Another function is not held back by this one's connections.
        held.push(
            send(&pool, 10, "g", &granted, request(), bounds())
                .await
                .unwrap(),
        );
        assert_eq!(
            accepted.load(Ordering::SeqCst),
            MAX_CONNECTIONS_PER_ORIGIN + 1
        );
        // Responses dropped unread: their connections close, and so free
        // their places.
        held.clear();
        send(&pool, 9, "f", &granted, request(), bounds())
            .await
            .unwrap();
    }
}
