//! Outbound Redis for functions (`spin:redis@3.0.0`): the host side of
//! the outbound Redis slice, whose grants are `redis://` entries of
//! `allowed_outbound_hosts`
//! ([`luge_core::capabilities::outbound`]).
//!
//! This crate narrows the `redis` crate's multiplexed connection to what
//! a sandbox may do:
//!
//! - **Where.** The address is a `redis://[user[:password]@]host[:port][/db]`
//!   URL; the host and port must be granted for `redis`, and the socket
//!   is opened by [`luge_outbound::connect`], so every DNS answer is
//!   checked as for HTTP and the operator's blocked networks hold.
//!   `rediss://` is TLS, granted as `rediss://host:port`, the server's
//!   chain and name always verified against the operator's roots
//!   (`--ca-file`, Spin's `[[client_tls]]`; `#insecure` is refused);
//!   other forms (Unix sockets) are `invalid-address`.
//! - **How much.** A reply is read into at most `max_reply_bytes` (the
//!   function's memory limit, bounded by the engine): a server that
//!   answers a gigabyte costs the host no more than that, and the
//!   connection ends. The protocol parser bounds nesting itself (100).
//! - **How long.** The connection, its handshake (`AUTH`, `SELECT`) and
//!   every command end by the invocation's deadline.
//! - **How many.** At most [`MAX_CONNECTIONS_PER_FUNCTION`] connections
//!   per function at once, across its invocations; one more is
//!   `too-many-connections` at once, as Spin's error says.
//! - **Secrets.** The URL may hold a password (from a variable): it is
//!   never logged and no error or `Debug` repeats it.

#![deny(missing_docs)]

#[cfg(feature = "component")]
pub mod component;

use std::sync::LazyLock;
use std::time::Instant;

use luge_outbound::{Budget, Budgeted, Caller, Slots};
use redis::aio::MultiplexedConnection;
use redis::{ConnectionAddr, IntoConnectionInfo};
use tokio::sync::OwnedSemaphorePermit;
use tokio::time::timeout_at;

/// Redis connections one function may hold open at once, across its
/// invocations (Spin 4.1 bounds connections per app alike): 32, as
/// outgoing HTTP connections per origin.
pub const MAX_CONNECTIONS_PER_FUNCTION: usize = 32;

/// Why a Redis call failed, as `spin:redis`'s `error` tells them apart.
#[derive(Debug, thiserror::Error)]
pub enum RedisError {
    /// Not a `redis://` URL Luge can connect to.
    #[error("not a redis://host[:port] address")]
    InvalidAddress,
    /// The function holds [`MAX_CONNECTIONS_PER_FUNCTION`] connections.
    #[error("the function holds {MAX_CONNECTIONS_PER_FUNCTION} Redis connections already")]
    TooManyConnections,
    /// A reply of another type than the call returns.
    #[error("the reply has another type: {0}")]
    TypeError(String),
    /// The address is not granted, or cannot be reached.
    #[error(transparent)]
    Connect(#[from] luge_outbound::SendError),
    /// The deadline passed.
    #[error("the invocation's deadline passed")]
    Deadline,
    /// The server answered an error, the connection failed, or a reply
    /// outgrew its bound.
    #[error("{0}")]
    Redis(String),
}

impl From<redis::RedisError> for RedisError {
    fn from(error: redis::RedisError) -> Self {
        match error.kind() {
            redis::ErrorKind::UnexpectedReturnType | redis::ErrorKind::Parse => {
                RedisError::TypeError(error.to_string())
            }
            _ => RedisError::Redis(error.to_string()),
        }
    }
}

/// A command's argument, as `spin:redis`'s `redis-parameter`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Parameter {
    /// An integer.
    Int64(i64),
    /// Bytes.
    Binary(Vec<u8>),
}

/// A reply value, as `spin:redis`'s `redis-result`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Reply {
    /// Nil.
    Nil,
    /// A status (`OK`).
    Status(String),
    /// An integer.
    Int64(i64),
    /// Bytes.
    Binary(Vec<u8>),
}

/// The connection slots of each function.
static SLOTS: LazyLock<Slots> = LazyLock::new(|| Slots::new(MAX_CONNECTIONS_PER_FUNCTION));

/// An open connection to a Redis server.
pub struct Connection {
    connection: MultiplexedConnection,
    /// What the current reply may still take.
    budget: Budget,
    max_reply_bytes: usize,
    /// The task that drives the connection, ended with it.
    driver: tokio::task::AbortHandle,
    _slot: OwnedSemaphorePermit,
}

impl std::fmt::Debug for Connection {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Connection").finish_non_exhaustive()
    }
}

impl Drop for Connection {
    fn drop(&mut self) {
        self.driver.abort();
    }
}

/// Opens a connection for `caller` to the Redis server at `address`,
/// which its grants must reach, by its deadline; each reply then takes at
/// most its answer bound. `rediss://` is TLS (granted as `rediss://`),
/// verified by chain and name against the operator's roots.
pub async fn open(caller: Caller<'_>, address: &str) -> Result<Connection, RedisError> {
    let (function, grants, deadline, max_reply_bytes) = caller.parts();
    // The URL may hold a password: a parse error is never repeated.
    let (scheme, plain) = match address.strip_prefix("rediss://") {
        // `#insecure` (no verification) is refused with the rest.
        Some(rest) if !rest.contains('#') => ("rediss", format!("redis://{rest}")),
        Some(_) => return Err(RedisError::InvalidAddress),
        None if address.starts_with("redis://") => ("redis", address.to_owned()),
        None => return Err(RedisError::InvalidAddress),
    };
    let info = plain
        .as_str()
        .into_connection_info()
        .map_err(|_| RedisError::InvalidAddress)?;
    let ConnectionAddr::Tcp(host, port) = info.addr() else {
        return Err(RedisError::InvalidAddress);
    };
    let tls = match scheme {
        "rediss" => Some((
            luge_outbound::tls_client(function, host, *port)?,
            luge_outbound::server_name(host)?,
        )),
        _ => None,
    };
    let slot = SLOTS
        .try_take(function)
        .ok_or(RedisError::TooManyConnections)?;
    let stream = luge_outbound::connect(grants, scheme, host, *port, deadline).await?;
    let runtime = tokio::runtime::Handle::try_current()
        .map_err(|_| RedisError::Redis("no async runtime drives connections here".to_owned()))?;
    let settings = info.redis_settings();
    let (connection, budget, driver) = match tls {
        Some((client, name)) => {
            let stream = timeout_at(
                deadline.into(),
                tokio_rustls::TlsConnector::from(client).connect(name, stream),
            )
            .await
            .map_err(|_| RedisError::Deadline)?
            .map_err(|e| RedisError::Redis(format!("TLS: {}", luge_core::error_line(&e))))?;
            let (stream, budget) = Budgeted::new(stream, max_reply_bytes);
            let (connection, driver) = handshake(settings, stream, deadline, &runtime).await?;
            (connection, budget, driver)
        }
        None => {
            let (stream, budget) = Budgeted::new(stream, max_reply_bytes);
            let (connection, driver) = handshake(settings, stream, deadline, &runtime).await?;
            (connection, budget, driver)
        }
    };
    Ok(Connection {
        connection,
        budget,
        max_reply_bytes,
        driver,
        _slot: slot,
    })
}

/// Redis's handshake (`AUTH`, `SELECT`) over `stream` by `deadline`: the
/// connection, and the task on `runtime` that drives it.
async fn handshake<S>(
    settings: &redis::RedisConnectionInfo,
    stream: S,
    deadline: Instant,
    runtime: &tokio::runtime::Handle,
) -> Result<(MultiplexedConnection, tokio::task::AbortHandle), RedisError>
where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Send + Unpin + 'static,
{
    let (connection, driver) = timeout_at(
        deadline.into(),
        MultiplexedConnection::new_with_config(
            settings,
            stream,
            redis::AsyncConnectionConfig::new(),
        ),
    )
    .await
    .map_err(|_| RedisError::Deadline)??;
    Ok((connection, runtime.spawn(driver).abort_handle()))
}

impl Connection {
    /// Runs `command` by `deadline`, its reply read as `T`.
    async fn run<T: redis::FromRedisValue>(
        &self,
        command: &redis::Cmd,
        deadline: Instant,
    ) -> Result<T, RedisError> {
        self.budget.reset(self.max_reply_bytes);
        let mut connection = self.connection.clone();
        Ok(
            timeout_at(deadline.into(), command.query_async(&mut connection))
                .await
                .map_err(|_| RedisError::Deadline)??,
        )
    }

    /// `PUBLISH channel payload`.
    pub async fn publish(
        &self,
        channel: &str,
        payload: &[u8],
        deadline: Instant,
    ) -> Result<(), RedisError> {
        let _: i64 = self
            .run(redis::cmd("PUBLISH").arg(channel).arg(payload), deadline)
            .await?;
        Ok(())
    }

    /// `GET key`.
    pub async fn get(&self, key: &str, deadline: Instant) -> Result<Option<Vec<u8>>, RedisError> {
        self.run(redis::cmd("GET").arg(key), deadline).await
    }

    /// `SET key value`.
    pub async fn set(&self, key: &str, value: &[u8], deadline: Instant) -> Result<(), RedisError> {
        self.run(redis::cmd("SET").arg(key).arg(value), deadline)
            .await
    }

    /// `INCR key`.
    pub async fn incr(&self, key: &str, deadline: Instant) -> Result<i64, RedisError> {
        self.run(redis::cmd("INCR").arg(key), deadline).await
    }

    /// `DEL keys...`.
    pub async fn del(&self, keys: &[String], deadline: Instant) -> Result<u32, RedisError> {
        self.run(redis::cmd("DEL").arg(keys), deadline).await
    }

    /// `SADD key values...`.
    pub async fn sadd(
        &self,
        key: &str,
        values: &[String],
        deadline: Instant,
    ) -> Result<u32, RedisError> {
        self.run(redis::cmd("SADD").arg(key).arg(values), deadline)
            .await
    }

    /// `SMEMBERS key`.
    pub async fn smembers(&self, key: &str, deadline: Instant) -> Result<Vec<String>, RedisError> {
        self.run(redis::cmd("SMEMBERS").arg(key), deadline).await
    }

    /// `SREM key values...`.
    pub async fn srem(
        &self,
        key: &str,
        values: &[String],
        deadline: Instant,
    ) -> Result<u32, RedisError> {
        self.run(redis::cmd("SREM").arg(key).arg(values), deadline)
            .await
    }

    /// Any command with `arguments`; its reply flattened (an array's
    /// elements in order, nested ones too), as Spin's `execute` answers.
    pub async fn execute(
        &self,
        command: &str,
        arguments: &[Parameter],
        deadline: Instant,
    ) -> Result<Vec<Reply>, RedisError> {
        let mut cmd = redis::cmd(command);
        for argument in arguments {
            match argument {
                Parameter::Int64(i) => cmd.arg(*i),
                Parameter::Binary(bytes) => cmd.arg(bytes.as_slice()),
            };
        }
        let value: redis::Value = self.run(&cmd, deadline).await?;
        let mut replies = Vec::new();
        flatten(value, &mut replies)?;
        Ok(replies)
    }
}

/// `value` as replies, arrays flattened; a server error is an error.
fn flatten(value: redis::Value, out: &mut Vec<Reply>) -> Result<(), RedisError> {
    use redis::Value;
    match value {
        Value::Nil => out.push(Reply::Nil),
        Value::Okay => out.push(Reply::Status("OK".to_owned())),
        Value::SimpleString(status) => out.push(Reply::Status(status)),
        Value::Int(i) => out.push(Reply::Int64(i)),
        Value::BulkString(bytes) => out.push(Reply::Binary(bytes)),
        Value::Array(values) | Value::Set(values) => {
            for value in values {
                flatten(value, out)?;
            }
        }
        Value::ServerError(error) => {
            return Err(RedisError::Redis(
                redis::RedisError::from(error).to_string(),
            ));
        }
        Value::Boolean(b) => out.push(Reply::Int64(i64::from(b))),
        Value::Double(d) => out.push(Reply::Binary(d.to_string().into_bytes())),
        Value::BigNumber(n) => out.push(Reply::Binary(n)),
        Value::VerbatimString { text, .. } => out.push(Reply::Binary(text.into_bytes())),
        Value::Map(pairs) => {
            for (key, value) in pairs {
                flatten(key, out)?;
                flatten(value, out)?;
            }
        }
        Value::Attribute { data, .. } => flatten(*data, out)?,
        Value::Push { data, .. } => {
            for value in data {
                flatten(value, out)?;
            }
        }
        other => {
            return Err(RedisError::TypeError(format!(
                "a reply Luge cannot pass on: {other:?}"
            )));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use luge_testkit::grants;
    use luge_testkit::redis::RedisServer;

    use super::*;

    /// Function `name` as a client, by a deadline far off, its answers
    /// bounded at 1 MiB.
    fn caller<'a>(name: &'a str, granted: &'a luge_core::capabilities::AllowedHosts) -> Caller<'a> {
        Caller::new(name, granted, later(), 1 << 20)
    }

    use luge_testkit::later;

    /// The CA of this binary's TLS server.
    static CA: std::sync::LazyLock<luge_testkit::tls::PrivateCa> =
        std::sync::LazyLock::new(luge_testkit::tls::PrivateCa::new);

    /// This process's outbound settings trust [`CA`]: set by whichever
    /// test connects first (they are set once per process).
    fn trust_ca() {
        let config = luge_outbound::Config::new(Some(CA.pem.as_bytes())).unwrap();
        let _ = luge_outbound::install(config);
    }

    #[tokio::test]
    async fn commands_reach_a_granted_server() {
        trust_ca();
        let server = RedisServer::start().unwrap();
        let address = format!("redis://127.0.0.1:{}", server.port);
        let granted = grants(&[&address]);
        let c = open(caller("f1", &granted), &address).await.unwrap();
        c.set("k", b"v", later()).await.unwrap();
        assert_eq!(c.get("k", later()).await.unwrap(), Some(b"v".to_vec()));
        assert_eq!(c.get("nope", later()).await.unwrap(), None);
        assert_eq!(c.incr("n", later()).await.unwrap(), 1);
        let members = ["a".to_owned(), "b".to_owned()];
        assert_eq!(c.sadd("s", &members, later()).await.unwrap(), 2);
        let mut got = c.smembers("s", later()).await.unwrap();
        got.sort();
        assert_eq!(got, members);
        assert_eq!(c.srem("s", &members[..1], later()).await.unwrap(), 1);
        assert_eq!(
            c.del(&["k".to_owned(), "n".to_owned()], later())
                .await
                .unwrap(),
            2
        );
        c.publish("ch", b"hi", later()).await.unwrap();
        let replies = c
            .execute(
                "MSET",
                &[Parameter::Binary(b"x".to_vec()), Parameter::Int64(7)],
                later(),
            )
            .await
            .unwrap();
        assert_eq!(replies, vec![Reply::Status("OK".into())]);
        let replies = c
            .execute(
                "MGET",
                &[
                    Parameter::Binary(b"x".to_vec()),
                    Parameter::Binary(b"none".to_vec()),
                ],
                later(),
            )
            .await
            .unwrap();
        assert_eq!(replies, vec![Reply::Binary(b"7".to_vec()), Reply::Nil]);
        // A type the call does not return.
        assert!(matches!(
            c.incr("s", later()).await,
            Err(RedisError::Redis(_))
        ));
        assert!(matches!(
            c.smembers("x", later()).await,
            Err(RedisError::Redis(_) | RedisError::TypeError(_))
        ));
    }

    #[tokio::test]
    async fn ungranted_and_malformed_addresses_are_refused() {
        trust_ca();
        let server = RedisServer::start().unwrap();
        let address = format!("redis://127.0.0.1:{}", server.port);
        let other = grants(&["redis://127.0.0.1:1"]);
        assert!(matches!(
            open(caller("f2", &other), &address).await,
            Err(RedisError::Connect(luge_outbound::SendError::Denied(_)))
        ));
        let http = grants(&[&format!("http://127.0.0.1:{}", server.port)]);
        assert!(matches!(
            open(caller("f2", &http), &address).await,
            Err(RedisError::Connect(luge_outbound::SendError::Denied(_)))
        ));
        let granted = grants(&[&address]);
        for bad in [
            "127.0.0.1:6379",
            "rediss://127.0.0.1:6379/#insecure",
            "redis+unix:///tmp/x.sock",
            "redis://:secret@",
        ] {
            let error = open(caller("f2", &granted), bad).await.unwrap_err();
            assert!(
                matches!(error, RedisError::InvalidAddress),
                "{bad}: {error}"
            );
            assert!(!error.to_string().contains("secret"));
        }
    }

    #[tokio::test]
    async fn a_huge_reply_ends_the_connection_not_the_host() {
        trust_ca();
        let server = RedisServer::start().unwrap();
        let address = format!("redis://127.0.0.1:{}", server.port);
        let granted = grants(&[&address]);
        let c = open(caller("f3", &granted), &address).await.unwrap();
        c.set("big", &vec![b'x'; 2 << 20], later()).await.unwrap();
        let error = c.get("big", later()).await.unwrap_err();
        assert!(error.to_string().contains("larger than"), "{error}");
    }

    #[tokio::test]
    async fn connections_per_function_are_bounded() {
        trust_ca();
        let server = RedisServer::start().unwrap();
        let address = format!("redis://127.0.0.1:{}", server.port);
        let granted = grants(&[&address]);
        let mut held = Vec::new();
        for _ in 0..MAX_CONNECTIONS_PER_FUNCTION {
            held.push(open(caller("f4", &granted), &address).await.unwrap());
        }
        assert!(matches!(
            open(caller("f4", &granted), &address).await,
            Err(RedisError::TooManyConnections)
        ));
        open(caller("f5", &granted), &address).await.unwrap();
        held.pop();
        open(caller("f4", &granted), &address).await.unwrap();
    }

    #[tokio::test]
    async fn a_silent_server_costs_the_deadline_only() {
        trust_ca();
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let address = format!(
            "redis://127.0.0.1:{}",
            listener.local_addr().unwrap().port()
        );
        let granted = grants(&[&address]);
        let started = Instant::now();
        let result = open(
            Caller::new(
                "f6",
                &granted,
                started + Duration::from_millis(300),
                1 << 20,
            ),
            &address,
        )
        .await;
        // The connection is accepted by the kernel; the server never answers.
        if let Ok(c) = result {
            let error = c
                .get("k", started + Duration::from_millis(300))
                .await
                .unwrap_err();
            assert!(matches!(error, RedisError::Deadline), "{error}");
        }
        assert!(started.elapsed() < Duration::from_secs(3));
        drop(listener);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn rediss_is_tls_verified_by_chain_and_name() {
        trust_ca();
        let (cert, key) = CA.server_pem("localhost");
        let server = RedisServer::start_tls(&cert, &key).unwrap();
        let address = format!("rediss://localhost:{}", server.port);
        let granted = grants(&[&address]);
        let c = open(caller("tls1", &granted), &address).await.unwrap();
        c.set("k", b"over TLS", later()).await.unwrap();
        assert_eq!(
            c.get("k", later()).await.unwrap(),
            Some(b"over TLS".to_vec())
        );
        // A redis:// grant is not a rediss:// one.
        let plain = grants(&[&format!("redis://localhost:{}", server.port)]);
        let error = open(caller("tls1", &plain), &address).await.unwrap_err();
        assert!(matches!(error, RedisError::Connect(_)), "{error}");
        // A name the certificate does not hold.
        let by_ip = format!("rediss://127.0.0.1:{}", server.port);
        let error = open(
            Caller::new("tls1", &grants(&[&by_ip]), later(), 1 << 20),
            &by_ip,
        )
        .await
        .unwrap_err()
        .to_string();
        assert!(error.contains("certificate"), "{error}");
        // No way to turn verification off.
        let insecure = format!("{address}/#insecure");
        let error = open(caller("tls1", &granted), &insecure).await.unwrap_err();
        assert!(matches!(error, RedisError::InvalidAddress), "{error}");
    }
}
