//! Outbound MySQL and MariaDB for functions (`spin:mysql@3.0.0`): the
//! host side of the outbound MySQL slice, whose grants are `mysql://`
//! entries of `allowed_outbound_hosts`
//! ([`luge_core::capabilities::outbound`]).
//!
//! This crate narrows `mysql_async` to what a sandbox may do:
//!
//! - **Where.** The address is a `mysql://user:pw@host:port/db` URL; its
//!   host and port must be granted for `mysql`. The name is looked up and
//!   checked by [`luge_outbound::permitted_addresses`] (every answer, the
//!   operator's blocked networks), and the driver is given the checked
//!   address, never the name, so it cannot connect elsewhere; it never
//!   switches to a Unix socket (`prefer_socket` off, `socket` refused),
//!   and `LOAD DATA LOCAL INFILE` finds no handler, so no host file is
//!   read. TLS to the server is not served yet.
//! - **How much.** A packet is at most the function's bound
//!   (`max_allowed_packet`, which the driver enforces as it reads), and
//!   the rows of a result set together too.
//! - **How long.** The connection and every statement end by the
//!   invocation's deadline, on the server too: a statement still running
//!   at its deadline, or when its invocation ended while it ran, is
//!   stopped with `KILL QUERY` on a second connection to the same checked
//!   address, with the same credentials.
//! - **How many.** At most [`MAX_CONNECTIONS_PER_FUNCTION`] connections
//!   per function at once across its invocations; a connection counts
//!   until a statement it left running was killed (or [`KILL_TIMEOUT`]
//!   passed).
//! - **Secrets.** The URL may hold a password: no error or log repeats it.

#![deny(missing_docs)]

#[cfg(feature = "component")]
pub mod component;

use std::sync::{Arc, LazyLock};
use std::time::{Duration, Instant};

use luge_outbound::{Caller, Slots};
use mysql_async::consts::{ColumnFlags, ColumnType};
use mysql_async::prelude::Queryable;
use tokio::sync::{Mutex, OwnedSemaphorePermit};
use tokio::time::timeout_at;

/// MySQL connections one function may hold open at once, across its
/// invocations: 16, as for PostgreSQL (each is a server thread).
pub const MAX_CONNECTIONS_PER_FUNCTION: usize = 16;

/// The binary character set's number: a string column in it is bytes.
const BINARY_CHARSET: u16 = 63;

/// Why a MySQL call failed.
#[derive(Debug, thiserror::Error)]
pub enum MysqlError {
    /// Opened outside a tokio runtime (a host bug, not a guest's).
    #[error("no async runtime to run the connection on")]
    NoRuntime,
    /// Not a `mysql://` URL Luge can connect with.
    #[error("not a mysql://host[:port]/db address Luge can use")]
    InvalidAddress,
    /// The function holds [`MAX_CONNECTIONS_PER_FUNCTION`] connections.
    #[error("the function holds {MAX_CONNECTIONS_PER_FUNCTION} MySQL connections already")]
    TooManyConnections,
    /// The address is not granted, or cannot be reached.
    #[error(transparent)]
    Connect(#[from] luge_outbound::SendError),
    /// The server refused the session or could not be reached.
    #[error("connection failed: {0}")]
    ConnectionFailed(String),
    /// The statement failed.
    #[error("query failed: {0}")]
    Query(String),
    /// The address asks for TLS without verifying the server
    /// (`verify_ca=false`, `verify_identity=false`).
    #[error(
        "verify_ca=false and verify_identity=false are refused: Luge always verifies the server's certificate and name"
    )]
    InsecureTls,
    /// The deadline passed.
    #[error("the invocation's deadline passed")]
    Deadline,
    /// The result set outgrew the function's bound.
    #[error("the result set is larger than {0} bytes")]
    TooLarge(usize),
}

/// A statement parameter, as `spin:mysql`'s `parameter-value`.
#[derive(Debug, Clone, PartialEq)]
pub enum Param {
    /// A boolean (sent as 0 or 1).
    Boolean(bool),
    /// A signed integer.
    Int(i64),
    /// An unsigned integer.
    UInt(u64),
    /// `float`.
    Floating32(f32),
    /// `double`.
    Floating64(f64),
    /// Text.
    Str(String),
    /// Bytes.
    Binary(Vec<u8>),
    /// NULL.
    Null,
}

/// A column's type, as `spin:mysql`'s `db-data-type`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DataType {
    /// `tinyint`.
    Int8,
    /// `smallint`, `year`.
    Int16,
    /// `mediumint`, `int`.
    Int32,
    /// `bigint`.
    Int64,
    /// `tinyint unsigned`.
    Uint8,
    /// `smallint unsigned`.
    Uint16,
    /// `mediumint unsigned`, `int unsigned`.
    Uint32,
    /// `bigint unsigned`.
    Uint64,
    /// `float`.
    Floating32,
    /// `double`.
    Floating64,
    /// Text, `decimal`, dates and times (as the server writes them).
    Str,
    /// `binary`, `varbinary`, `blob`.
    Binary,
    /// Anything else.
    Other,
}

/// A column's value, as `spin:mysql`'s `db-value`.
#[derive(Debug, Clone, PartialEq)]
pub enum Value {
    /// `tinyint`.
    Int8(i8),
    /// `smallint`.
    Int16(i16),
    /// `int`.
    Int32(i32),
    /// `bigint`.
    Int64(i64),
    /// `tinyint unsigned`.
    Uint8(u8),
    /// `smallint unsigned`.
    Uint16(u16),
    /// `int unsigned`.
    Uint32(u32),
    /// `bigint unsigned`.
    Uint64(u64),
    /// `float`.
    Floating32(f32),
    /// `double`.
    Floating64(f64),
    /// Text.
    Str(String),
    /// Bytes.
    Binary(Vec<u8>),
    /// NULL.
    Null,
    /// A value of a type Luge does not pass on.
    Unsupported,
}

/// A result column.
pub type Column = luge_outbound::Column<DataType>;

/// A statement's rows.
pub type RowSet = luge_outbound::RowSet<DataType, Value>;

static SLOTS: LazyLock<Slots> = LazyLock::new(|| Slots::new(MAX_CONNECTIONS_PER_FUNCTION));

/// How long stopping a statement may take (connecting again, `KILL
/// QUERY`): past it the connection's slot is given back all the same.
pub const KILL_TIMEOUT: Duration = Duration::from_secs(5);

/// An open connection to a MySQL or MariaDB server.
pub struct Connection {
    conn: Mutex<mysql_async::Conn>,
    max_bytes: usize,
    /// How to reach the server again (the checked address, the same
    /// credentials), to stop a statement this connection left running.
    opts: mysql_async::Opts,
    /// The server's id of this connection (`KILL QUERY`'s argument).
    id: u32,
    /// The function's connection slot, shared with a kill in flight.
    slot: Arc<OwnedSemaphorePermit>,
    runtime: tokio::runtime::Handle,
}

impl Connection {
    /// Stops what runs on the server now, in the background (`KILL QUERY`
    /// on a connection of its own); the slot is held until it is done.
    fn kill_in_background(&self) {
        let (opts, id, slot) = (self.opts.clone(), self.id, Arc::clone(&self.slot));
        self.runtime.spawn(async move {
            let kill = async {
                let mut conn = mysql_async::Conn::new(opts).await?;
                conn.query_drop(format!("KILL QUERY {id}")).await?;
                conn.disconnect().await
            };
            match tokio::time::timeout(KILL_TIMEOUT, kill).await {
                Ok(Ok(())) => tracing::debug!(id, "outbound mysql statement killed"),
                Ok(Err(error)) => {
                    tracing::warn!(id, error = %described(error), "outbound mysql KILL QUERY failed")
                }
                Err(_) => tracing::warn!(id, "outbound mysql KILL QUERY timed out"),
            }
            drop(slot);
        });
    }
}

impl std::fmt::Debug for Connection {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Connection").finish_non_exhaustive()
    }
}

/// A driver error as text: the server's code and message, never the
/// address.
fn described(error: mysql_async::Error) -> String {
    match error {
        mysql_async::Error::Server(e) => format!("{} ({}): {}", e.code, e.state, e.message),
        mysql_async::Error::Driver(e) => e.to_string(),
        mysql_async::Error::Io(e) => format!("I/O: {e}"),
        mysql_async::Error::Other(e) => e.to_string(),
        mysql_async::Error::Url(_) => "invalid address".to_owned(),
    }
}

/// Opens a connection for `caller` to the server at `address`, whose
/// host its grants must reach, by its deadline; each result set then
/// takes at most its answer bound.
pub async fn open(caller: Caller<'_>, address: &str) -> Result<Connection, MysqlError> {
    let (function, grants, deadline, max_bytes) = caller.parts();
    // The URL may hold a password: a parse error is never repeated.
    let opts = mysql_async::Opts::from_url(address).map_err(|_| MysqlError::InvalidAddress)?;
    if opts.socket().is_some() {
        return Err(MysqlError::InvalidAddress);
    }
    let host = opts.ip_or_hostname().to_owned();
    let port = opts.tcp_port();
    let slot = SLOTS
        .try_take(function)
        .ok_or(MysqlError::TooManyConnections)?;
    let addresses =
        luge_outbound::permitted_addresses(grants, "mysql", &host, port, deadline).await?;
    let Some(checked) = addresses.first() else {
        return Err(MysqlError::InvalidAddress);
    };
    let ssl = match opts.ssl_opts() {
        None => None,
        Some(asked) if asked.accept_invalid_certs() || asked.skip_domain_validation() => {
            return Err(MysqlError::InsecureTls);
        }
        Some(_) => Some(ssl_opts(function, &host, port)?),
    };
    let opts = mysql_async::OptsBuilder::from_opts(opts)
        .ssl_opts(ssl)
        .ip_or_hostname(checked.ip().to_string())
        .tcp_port(checked.port())
        .prefer_socket(false)
        .socket(None::<String>)
        .max_allowed_packet(Some(max_bytes))
        .stmt_cache_size(Some(16));
    let opts = mysql_async::Opts::from(opts);
    let runtime = tokio::runtime::Handle::try_current().map_err(|_| MysqlError::NoRuntime)?;
    let conn = timeout_at(deadline.into(), mysql_async::Conn::new(opts.clone()))
        .await
        .map_err(|_| MysqlError::Deadline)?
        .map_err(|e| MysqlError::ConnectionFailed(described(e)))?;
    Ok(Connection {
        id: conn.id(),
        conn: Mutex::new(conn),
        max_bytes,
        opts,
        slot: Arc::new(slot),
        runtime,
    })
}

/// TLS for `function` to `host:port` (`require_ssl=true`): what Luge's
/// own clients trust there (the platform's roots, `--ca-file`, Spin's
/// `[[client_tls]]`, its client certificate), the chain and the name
/// `host` always verified, whichever address the connection was checked
/// to.
fn ssl_opts(function: &str, host: &str, port: u16) -> Result<mysql_async::SslOpts, MysqlError> {
    use mysql_async::ClientIdentity;
    let trust = luge_outbound::tls_trust(function, host, port)?;
    let identity = trust.identity.as_ref().map(|(chain, key)| {
        // PEM buffers (mysql_async's PathOrBuf, borrowed for the process).
        ClientIdentity::new(chain.as_slice().into(), key.as_slice().into())
    });
    Ok(mysql_async::SslOpts::default()
        .with_root_certs(vec![trust.roots.as_slice().into()])
        .with_disable_built_in_roots(!trust.webpki)
        .with_client_identity(identity)
        .with_danger_accept_invalid_certs(false)
        .with_danger_skip_domain_validation(false)
        .with_danger_tls_hostname_override(Some(host.trim_end_matches('.').to_ascii_lowercase())))
}

fn param(param: Param) -> mysql_async::Value {
    use mysql_async::Value as V;
    match param {
        Param::Boolean(b) => V::Int(i64::from(b)),
        Param::Int(i) => V::Int(i),
        Param::UInt(u) => V::UInt(u),
        Param::Floating32(f) => V::Float(f),
        Param::Floating64(f) => V::Double(f),
        Param::Str(s) => V::Bytes(s.into_bytes()),
        Param::Binary(b) => V::Bytes(b),
        Param::Null => V::NULL,
    }
}

/// A string or blob type: text, or bytes in the binary character set.
fn is_string(t: ColumnType) -> bool {
    matches!(
        t,
        ColumnType::MYSQL_TYPE_STRING
            | ColumnType::MYSQL_TYPE_VAR_STRING
            | ColumnType::MYSQL_TYPE_VARCHAR
            | ColumnType::MYSQL_TYPE_BLOB
            | ColumnType::MYSQL_TYPE_TINY_BLOB
            | ColumnType::MYSQL_TYPE_MEDIUM_BLOB
            | ColumnType::MYSQL_TYPE_LONG_BLOB
    )
}

fn data_type(column: &mysql_async::Column) -> DataType {
    let unsigned = column.flags().contains(ColumnFlags::UNSIGNED_FLAG);
    match (column.column_type(), unsigned) {
        (ColumnType::MYSQL_TYPE_TINY, false) => DataType::Int8,
        (ColumnType::MYSQL_TYPE_TINY, true) => DataType::Uint8,
        (ColumnType::MYSQL_TYPE_SHORT | ColumnType::MYSQL_TYPE_YEAR, false) => DataType::Int16,
        (ColumnType::MYSQL_TYPE_SHORT | ColumnType::MYSQL_TYPE_YEAR, true) => DataType::Uint16,
        (ColumnType::MYSQL_TYPE_INT24 | ColumnType::MYSQL_TYPE_LONG, false) => DataType::Int32,
        (ColumnType::MYSQL_TYPE_INT24 | ColumnType::MYSQL_TYPE_LONG, true) => DataType::Uint32,
        (ColumnType::MYSQL_TYPE_LONGLONG, false) => DataType::Int64,
        (ColumnType::MYSQL_TYPE_LONGLONG, true) => DataType::Uint64,
        (ColumnType::MYSQL_TYPE_FLOAT, _) => DataType::Floating32,
        (ColumnType::MYSQL_TYPE_DOUBLE, _) => DataType::Floating64,
        (t, _) if is_string(t) && column.character_set() == BINARY_CHARSET => DataType::Binary,
        (
            ColumnType::MYSQL_TYPE_JSON
            | ColumnType::MYSQL_TYPE_ENUM
            | ColumnType::MYSQL_TYPE_SET
            | ColumnType::MYSQL_TYPE_DECIMAL
            | ColumnType::MYSQL_TYPE_NEWDECIMAL
            | ColumnType::MYSQL_TYPE_DATE
            | ColumnType::MYSQL_TYPE_NEWDATE
            | ColumnType::MYSQL_TYPE_TIME
            | ColumnType::MYSQL_TYPE_DATETIME
            | ColumnType::MYSQL_TYPE_TIMESTAMP,
            _,
        ) => DataType::Str,
        (t, _) if is_string(t) => DataType::Str,
        _ => DataType::Other,
    }
}

/// `value` of a column of `data_type`.
fn value(value: mysql_async::Value, data_type: DataType) -> Value {
    use mysql_async::Value as V;
    let int = |i: i64| match data_type {
        DataType::Int8 => i8::try_from(i).map(Value::Int8).ok(),
        DataType::Int16 => i16::try_from(i).map(Value::Int16).ok(),
        DataType::Int32 => i32::try_from(i).map(Value::Int32).ok(),
        DataType::Uint8 => u8::try_from(i).map(Value::Uint8).ok(),
        DataType::Uint16 => u16::try_from(i).map(Value::Uint16).ok(),
        DataType::Uint32 => u32::try_from(i).map(Value::Uint32).ok(),
        DataType::Uint64 => u64::try_from(i).map(Value::Uint64).ok(),
        _ => Some(Value::Int64(i)),
    };
    match value {
        V::NULL => Value::Null,
        V::Int(i) => int(i).unwrap_or(Value::Unsupported),
        V::UInt(u) => match data_type {
            DataType::Int64 => i64::try_from(u)
                .map(Value::Int64)
                .unwrap_or(Value::Unsupported),
            _ => Value::Uint64(u),
        },
        V::Float(f) => Value::Floating32(f),
        V::Double(f) => Value::Floating64(f),
        V::Bytes(bytes) => match data_type {
            DataType::Binary | DataType::Other => Value::Binary(bytes),
            _ => match String::from_utf8(bytes) {
                Ok(text) => Value::Str(text),
                Err(e) => Value::Binary(e.into_bytes()),
            },
        },
        V::Date(y, mo, d, h, mi, s, us) => Value::Str(if (h, mi, s, us) == (0, 0, 0, 0) {
            format!("{y:04}-{mo:02}-{d:02}")
        } else {
            format!("{y:04}-{mo:02}-{d:02} {h:02}:{mi:02}:{s:02}.{us:06}")
        }),
        V::Time(negative, days, h, mi, s, us) => {
            let hours = u64::from(days) * 24 + u64::from(h);
            let sign = if negative { "-" } else { "" };
            Value::Str(format!("{sign}{hours:02}:{mi:02}:{s:02}.{us:06}"))
        }
    }
}

/// What a value costs against the result bound.
fn cost(value: &Value) -> usize {
    16 + match value {
        Value::Str(s) => s.len(),
        Value::Binary(b) => b.len(),
        _ => 8,
    }
}

impl Connection {
    /// Runs `statement` with `params` by `deadline`: its rows.
    pub async fn query(
        &self,
        statement: &str,
        params: Vec<Param>,
        deadline: Instant,
    ) -> Result<RowSet, MysqlError> {
        let params: Vec<mysql_async::Value> = params.into_iter().map(param).collect();
        let max_bytes = self.max_bytes;
        // Killed on the server (`KILL QUERY`) unless it finishes.
        let run = async {
            let mut conn = self.conn.lock().await;
            let mut result = conn
                .exec_iter(statement, mysql_async::Params::Positional(params))
                .await
                .map_err(|e| MysqlError::Query(described(e)))?;
            let columns: Vec<Column> = result
                .columns_ref()
                .iter()
                .map(|c| Column {
                    name: c.name_str().into_owned(),
                    data_type: data_type(c),
                })
                .collect();
            let mut set = RowSet {
                columns,
                rows: Vec::new(),
            };
            let mut used = 0usize;
            while let Some(row) = result
                .next()
                .await
                .map_err(|e| MysqlError::Query(described(e)))?
            {
                let raw = row.unwrap();
                let mut values = Vec::with_capacity(raw.len());
                for (index, raw) in raw.into_iter().enumerate() {
                    let data_type = set
                        .columns
                        .get(index)
                        .map_or(DataType::Other, |c| c.data_type);
                    let value = value(raw, data_type);
                    used = used.saturating_add(cost(&value));
                    if used > max_bytes {
                        return Err(MysqlError::TooLarge(max_bytes));
                    }
                    values.push(value);
                }
                set.rows.push(values);
            }
            Ok(set)
        };
        luge_outbound::finished_by(deadline, || self.kill_in_background(), run)
            .await
            .ok_or(MysqlError::Deadline)?
    }

    /// Runs `statement` with `params` by `deadline`, its rows dropped.
    pub async fn execute(
        &self,
        statement: &str,
        params: Vec<Param>,
        deadline: Instant,
    ) -> Result<(), MysqlError> {
        let params: Vec<mysql_async::Value> = params.into_iter().map(param).collect();
        // Killed on the server (`KILL QUERY`) unless it finishes.
        let run = async {
            let mut conn = self.conn.lock().await;
            conn.exec_drop(statement, mysql_async::Params::Positional(params))
                .await
                .map_err(|e| MysqlError::Query(described(e)))
        };
        luge_outbound::finished_by(deadline, || self.kill_in_background(), run)
            .await
            .ok_or(MysqlError::Deadline)?
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use luge_testkit::mariadb::MariaDbServer;
    use luge_testkit::{grants, later};

    use super::*;

    /// Function `name` as a client, by a deadline far off, its answers
    /// bounded at 1 MiB.
    fn caller<'a>(name: &'a str, granted: &'a luge_core::capabilities::AllowedHosts) -> Caller<'a> {
        Caller::new(name, granted, later(), 1 << 20)
    }

    /// Connections running `SLEEP`, as the server lists them.
    async fn sleeping(watcher: &Connection) -> usize {
        let set = watcher
            .query(
                "SELECT id FROM information_schema.processlist \
                 WHERE info LIKE 'SELECT SLEEP%' AND command <> 'Sleep'",
                vec![],
                later(),
            )
            .await
            .unwrap();
        set.rows.len()
    }

    async fn until_none_sleeps(watcher: &Connection, within: Duration) -> usize {
        let until = Instant::now() + within;
        loop {
            let n = sleeping(watcher).await;
            if n == 0 || Instant::now() >= until {
                return n;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// A statement past its deadline, or whose invocation ended while it
    /// ran, is killed on the server (`KILL QUERY`), not left to run on.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn statements_past_their_deadline_are_killed_on_the_server() {
        let server = MariaDbServer::start().unwrap();
        let granted = server.grants();
        let watcher = open(caller("watcher", &granted), &server.url())
            .await
            .unwrap();
        let c = open(caller("sleeper", &granted), &server.url())
            .await
            .unwrap();
        let deadline = Instant::now() + Duration::from_millis(500);
        let ended = c.query("SELECT SLEEP(120)", vec![], deadline).await;
        assert!(matches!(ended, Err(MysqlError::Deadline)), "{ended:?}");
        assert_eq!(until_none_sleeps(&watcher, Duration::from_secs(5)).await, 0);
        let other = open(caller("sleeper", &granted), &server.url())
            .await
            .unwrap();
        let dropped = tokio::time::timeout(
            Duration::from_millis(300),
            other.execute("SELECT SLEEP(120)", vec![], later()),
        )
        .await;
        assert!(dropped.is_err());
        assert_eq!(until_none_sleeps(&watcher, Duration::from_secs(5)).await, 0);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn statements_reach_a_granted_server_and_are_bounded() {
        let server = MariaDbServer::start().unwrap();
        let granted = server.grants();
        let c = open(caller("f1", &granted), &server.url()).await.unwrap();
        c.execute(
            "CREATE TABLE t (id INT AUTO_INCREMENT PRIMARY KEY, name VARCHAR(20), data VARBINARY(8), \
             small TINYINT UNSIGNED, big BIGINT, x DOUBLE, d DATE, n DECIMAL(5,2))",
            vec![],
            later(),
        )
        .await
        .unwrap();
        c.execute(
            "INSERT INTO t (name, data, small, big, x, d, n) VALUES (?, ?, ?, ?, ?, ?, ?)",
            vec![
                Param::Str("a'b".into()),
                Param::Binary(vec![0, 1]),
                Param::UInt(200),
                Param::Int(-5),
                Param::Floating64(0.5),
                Param::Str("2026-11-27".into()),
                Param::Null,
            ],
            later(),
        )
        .await
        .unwrap();
        let set = c
            .query(
                "SELECT id, name, data, small, big, x, d, n FROM t WHERE name = ?",
                vec![Param::Str("a'b".into())],
                later(),
            )
            .await
            .unwrap();
        let types: Vec<DataType> = set.columns.iter().map(|c| c.data_type).collect();
        assert_eq!(
            types,
            [
                DataType::Int32,
                DataType::Str,
                DataType::Binary,
                DataType::Uint8,
                DataType::Int64,
                DataType::Floating64,
                DataType::Str,
                DataType::Str
            ]
        );
        assert_eq!(
            set.rows,
            vec![vec![
                Value::Int32(1),
                Value::Str("a'b".into()),
                Value::Binary(vec![0, 1]),
                Value::Uint8(200),
                Value::Int64(-5),
                Value::Floating64(0.5),
                Value::Str("2026-11-27".into()),
                Value::Null
            ]]
        );
        // A server error, and no host file through LOAD DATA LOCAL.
        assert!(matches!(
            c.query("SELECT * FROM missing", vec![], later()).await,
            Err(MysqlError::Query(_))
        ));
        assert!(
            c.execute(
                "LOAD DATA LOCAL INFILE '/etc/passwd' INTO TABLE t",
                vec![],
                later()
            )
            .await
            .is_err()
        );
        // A result set larger than the bound, and a statement past its
        // deadline (on a fresh connection: the refused LOCAL INFILE ended
        // that one).
        let c = open(caller("f1", &granted), &server.url()).await.unwrap();
        let huge = "SELECT REPEAT('x', 1000) FROM information_schema.columns a, information_schema.columns b";
        let error = c.query(huge, vec![], later()).await.unwrap_err();
        assert!(matches!(error, MysqlError::TooLarge(_)), "{error}");
        let c = open(caller("f1", &granted), &server.url()).await.unwrap();
        let soon = Instant::now() + Duration::from_millis(300);
        assert!(matches!(
            c.query("SELECT SLEEP(10)", vec![], soon).await,
            Err(MysqlError::Deadline)
        ));
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn what_is_not_granted_or_right_is_refused() {
        let server = MariaDbServer::start().unwrap();
        let other = grants(&["mysql://127.0.0.1:1"]);
        assert!(matches!(
            open(caller("f2", &other), &server.url()).await,
            Err(MysqlError::Connect(luge_outbound::SendError::Denied(_)))
        ));
        let granted = server.grants();
        let wrong = server.url().replace(server.password, "wrong-secret");
        let error = open(caller("f2", &granted), &wrong).await.unwrap_err();
        assert!(matches!(error, MysqlError::ConnectionFailed(_)), "{error}");
        assert!(!error.to_string().contains("wrong-secret"), "{error}");
        let socket = format!("{}?socket=/tmp/x.sock", server.url());
        for bad in ["127.0.0.1:3306", "postgres://127.0.0.1/x", socket.as_str()] {
            assert!(
                matches!(
                    open(caller("f2", &granted), bad).await,
                    Err(MysqlError::InvalidAddress)
                ),
                "{bad}"
            );
        }
        let mut held = Vec::new();
        for _ in 0..MAX_CONNECTIONS_PER_FUNCTION {
            held.push(open(caller("f3", &granted), &server.url()).await.unwrap());
        }
        assert!(matches!(
            open(caller("f3", &granted), &server.url()).await,
            Err(MysqlError::TooManyConnections)
        ));
    }
}
