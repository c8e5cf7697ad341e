//! Outbound PostgreSQL for functions (`spin:postgres@4.2.0`): the host
//! side of the outbound PostgreSQL slice, whose grants are `postgres://`
//! entries of `allowed_outbound_hosts`
//! ([`luge_core::capabilities::outbound`]).
//!
//! This crate narrows `tokio-postgres` to what a sandbox may do:
//!
//! - **Where.** The address is a connection string (`postgres://user:pw@host:port/db`
//!   or `host=... port=... user=...`); its first host and port must be
//!   granted for `postgres`, and the socket is opened by
//!   [`luge_outbound::connect`], so every DNS answer is checked as for
//!   HTTP and the operator's blocked networks hold. A Unix socket is
//!   refused.
//! - **TLS.** `sslmode=require` speaks TLS to the server and verifies
//!   its chain and name, always (libpq's `verify-full`), against the
//!   operator's roots (`--ca-file`, Spin's `[[client_tls]]`) or, for a
//!   connection whose function set one (`set-ca-root`), that CA alone;
//!   the default `prefer`, and `disable`, talk plain TCP (a server that
//!   asks for TLS then refuses the session).
//! - **How much.** A result set is read into at most `max_bytes` (the
//!   function's memory limit, bounded by the engine), both as the rows
//!   converted and as the bytes read off the socket, so a server that
//!   answers a gigabyte costs the host no more than that.
//! - **How long.** The connection, its handshake and every query end by
//!   the invocation's deadline, on the server too: a statement still
//!   running when its deadline passes, or when its connection is dropped
//!   (the invocation ended), is cancelled with PostgreSQL's cancel request
//!   (libpq's `PQcancel`), sent to the very address the connection was
//!   checked and made to (never a new lookup).
//! - **How many.** At most [`MAX_CONNECTIONS_PER_FUNCTION`] connections
//!   per function at once across its invocations; one more fails at
//!   once. A connection counts until the server has let it go: its slot
//!   is given back only once a statement it left running was cancelled
//!   (or [`CANCEL_TIMEOUT`] passed).
//! - **Secrets.** The connection string may hold a password (from a
//!   variable): it is never logged, and no error repeats the string.
//!
//! Values cross as `spin:postgres` types: booleans, integers, floats,
//! text, bytes, dates, times, timestamps, UUIDs, JSON, NUMERIC (28
//! significant digits), arrays of integers, NUMERIC and text, ranges of
//! integers and NUMERIC (each bound inclusive, exclusive or unbounded) and
//! intervals (months, days and microseconds apart, as PostgreSQL keeps
//! them). A column of any other type comes back as its raw bytes
//! (`unsupported`).

#![deny(missing_docs)]

#[cfg(feature = "component")]
pub mod component;
mod tls;

use std::net::SocketAddr;
use std::pin::pin;
use std::str::FromStr;
use std::sync::{Arc, LazyLock};
use std::time::{Duration, Instant};

use chrono::{Datelike, Timelike};
use futures_util::StreamExt;
use luge_outbound::{Budget, Budgeted, Caller, Slots};
use tokio::sync::OwnedSemaphorePermit;
use tokio::time::timeout_at;
use tokio_postgres::types::{FromSql, IsNull, ToSql, Type};
use tokio_postgres::{Client, NoTls, Row};

/// PostgreSQL connections one function may hold open at once, across
/// its invocations (Spin 4.1 bounds connections per app alike): 16,
/// since each is a server process.
pub const MAX_CONNECTIONS_PER_FUNCTION: usize = 16;

/// Why a PostgreSQL call failed.
#[derive(Debug, thiserror::Error)]
pub enum PgError {
    /// Not a connection string Luge can connect with.
    #[error(
        "not a PostgreSQL connection string Luge can use (postgres://host[:port]/db, no Unix socket)"
    )]
    InvalidAddress,
    /// The function holds [`MAX_CONNECTIONS_PER_FUNCTION`] connections.
    #[error("the function holds {MAX_CONNECTIONS_PER_FUNCTION} PostgreSQL connections already")]
    TooManyConnections,
    /// The address is not granted, or cannot be reached.
    #[error(transparent)]
    Connect(#[from] luge_outbound::SendError),
    /// The server refused the session (authentication, database).
    #[error("connection failed: {0}")]
    ConnectionFailed(String),
    /// The TLS settings could not be used (a CA root that is not PEM,
    /// a host that is no server name).
    #[error("TLS: {0}")]
    Tls(String),
    /// A parameter Luge cannot send.
    #[error("bad parameter: {0}")]
    BadParameter(String),
    /// The query failed in the server.
    #[error("{}", .0.as_text)]
    Db(Box<DbError>),
    /// The query failed on the way (the connection, a type mismatch).
    #[error("query failed: {0}")]
    Query(String),
    /// A value could not be read as its column's type.
    #[error("value conversion failed: {0}")]
    ValueConversion(String),
    /// The deadline passed.
    #[error("the invocation's deadline passed")]
    Deadline,
    /// The result set outgrew the function's bound.
    #[error("the result set is larger than {0} bytes")]
    TooLarge(usize),
    /// No async runtime drives connections here.
    #[error("no async runtime drives connections here")]
    NoRuntime,
}

/// The server's error, as `spin:postgres`'s `db-error`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DbError {
    /// The whole error as text.
    pub as_text: String,
    /// `ERROR`, `FATAL`...
    pub severity: String,
    /// The SQLSTATE code.
    pub code: String,
    /// The message.
    pub message: String,
    /// The detail, if any.
    pub detail: Option<String>,
    /// Other fields (hint, table, column, constraint...).
    pub extras: Vec<(String, String)>,
}

impl From<tokio_postgres::Error> for PgError {
    fn from(error: tokio_postgres::Error) -> Self {
        match error.as_db_error() {
            Some(db) => {
                let mut extras = Vec::new();
                for (name, value) in [
                    ("hint", db.hint()),
                    ("schema", db.schema()),
                    ("table", db.table()),
                    ("column", db.column()),
                    ("constraint", db.constraint()),
                ] {
                    if let Some(value) = value {
                        extras.push((name.to_owned(), value.to_owned()));
                    }
                }
                PgError::Db(Box::new(DbError {
                    as_text: db.to_string(),
                    severity: db.severity().to_owned(),
                    code: db.code().code().to_owned(),
                    message: db.message().to_owned(),
                    detail: db.detail().map(str::to_owned),
                    extras,
                }))
            }
            None => PgError::Query(luge_core::error_line(&error)),
        }
    }
}

/// (year, month, day).
pub type Date = (i32, u8, u8);
/// (hour, minute, second, nanosecond).
pub type Time = (u8, u8, u8, u32);
/// (year, month, day, hour, minute, second, nanosecond).
pub type DateTime = (i32, u8, u8, u8, u8, u8, u32);

/// Whether a range's bound is in it, as `range-bound-kind`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BoundKind {
    /// The bound is in the range.
    Inclusive,
    /// It is not.
    Exclusive,
}

/// One end of a range: `None` unbounded (an empty range reads as two).
pub type Bound<T> = Option<(T, BoundKind)>;

/// `interval`, as `spin:postgres`'s record: its three fields, which
/// PostgreSQL keeps apart (a month is not a number of days).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Interval {
    /// Microseconds.
    pub micros: i64,
    /// Days.
    pub days: i32,
    /// Months.
    pub months: i32,
}

/// `spin:postgres`'s types, written once: each row is a variant of
/// [`Param`] and [`Value`] with its payload, and of [`DataType`] without
/// one; each enum then adds its own ends (NULL, what Luge does not serve).
macro_rules! pg_types {
    ($($(#[$doc:meta])* $variant:ident($($payload:ty),+),)*) => {
        /// A query parameter, as `spin:postgres`'s `parameter-value`.
        #[derive(Debug, Clone, PartialEq)]
        pub enum Param {
            $($(#[$doc])* $variant($($payload),+),)*
            /// NULL, of any type.
            Null,
            /// A type Luge does not send, named.
            Unsupported(&'static str),
        }

        /// A column's value, as `spin:postgres`'s `db-value`.
        #[derive(Debug, Clone, PartialEq)]
        pub enum Value {
            $($(#[$doc])* $variant($($payload),+),)*
            /// NULL.
            Null,
            /// Any other type, its raw binary form.
            Unsupported(Vec<u8>),
        }

        /// A column's type, as `spin:postgres`'s `db-data-type`.
        #[derive(Debug, Clone, PartialEq, Eq)]
        pub enum DataType {
            $($(#[$doc])* $variant,)*
            /// Another type, by its name.
            Other(String),
        }
    };
}

pg_types! {
    /// `boolean`.
    Boolean(bool),
    /// `"char"`.
    Int8(i8),
    /// `smallint`.
    Int16(i16),
    /// `integer`.
    Int32(i32),
    /// `bigint`.
    Int64(i64),
    /// `real`.
    Floating32(f32),
    /// `double precision`.
    Floating64(f64),
    /// `text`, `varchar`...
    Str(String),
    /// `bytea`.
    Binary(Vec<u8>),
    /// `date`.
    Date(Date),
    /// `time`.
    Time(Time),
    /// `timestamp`.
    Datetime(DateTime),
    /// `timestamptz`, Unix seconds.
    Timestamp(i64),
    /// `uuid`, as text.
    Uuid(String),
    /// `jsonb` or `json`, as its text.
    Jsonb(Vec<u8>),
    /// `numeric`, base 10.
    Decimal(String),
    /// `integer[]`.
    ArrayInt32(Vec<Option<i32>>),
    /// `bigint[]`.
    ArrayInt64(Vec<Option<i64>>),
    /// `numeric[]`.
    ArrayDecimal(Vec<Option<String>>),
    /// `text[]`.
    ArrayStr(Vec<Option<String>>),
    /// `int4range`.
    RangeInt32(Bound<i32>, Bound<i32>),
    /// `int8range`.
    RangeInt64(Bound<i64>, Bound<i64>),
    /// `numrange`, its bounds base 10.
    RangeDecimal(Bound<String>, Bound<String>),
    /// `interval`.
    Interval(Interval),
}

/// A result column.
pub type Column = luge_outbound::Column<DataType>;

/// A query's answer.
pub type RowSet = luge_outbound::RowSet<DataType, Value>;

static SLOTS: LazyLock<Slots> = LazyLock::new(|| Slots::new(MAX_CONNECTIONS_PER_FUNCTION));

/// How long a cancel request may take (connecting, and the server
/// closing the request's connection once it has signalled the backend):
/// past it the connection's slot is given back all the same.
pub const CANCEL_TIMEOUT: Duration = Duration::from_secs(5);

/// How to stop a statement on the server: PostgreSQL's cancel request
/// (the backend's id and secret), sent over a new connection to the
/// address the session was made to, in the session's TLS mode.
struct Canceller {
    token: tokio_postgres::CancelToken,
    addr: SocketAddr,
    tls: Option<tls::Rustls>,
}

impl Canceller {
    /// Sends the cancel request, by [`CANCEL_TIMEOUT`]; logged, never
    /// an error for anyone to handle.
    async fn cancel(&self) {
        let send = async {
            let stream = tokio::net::TcpStream::connect(self.addr)
                .await
                .map_err(|e| e.to_string())?;
            match &self.tls {
                Some(tls) => self.token.cancel_query_raw(stream, tls.clone()).await,
                None => self.token.cancel_query_raw(stream, NoTls).await,
            }
            .map_err(|e| e.to_string())
        };
        match tokio::time::timeout(CANCEL_TIMEOUT, send).await {
            Ok(Ok(())) => {
                tracing::debug!(server = %self.addr, "outbound postgres statement cancelled")
            }
            Ok(Err(error)) => {
                tracing::warn!(server = %self.addr, %error, "outbound postgres cancel request failed")
            }
            Err(_) => {
                tracing::warn!(server = %self.addr, "outbound postgres cancel request timed out")
            }
        }
    }
}

/// An open connection to a PostgreSQL server.
pub struct Connection {
    client: Client,
    budget: Budget,
    max_bytes: usize,
    driver: tokio::task::AbortHandle,
    canceller: Arc<Canceller>,
    /// The function's connection slot, shared with a cancel request in
    /// flight: given back when both are done.
    slot: Arc<OwnedSemaphorePermit>,
    runtime: tokio::runtime::Handle,
}

impl std::fmt::Debug for Connection {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Connection").finish_non_exhaustive()
    }
}

impl Connection {
    /// Cancels what runs on the server now, in the background; the slot
    /// is held until the request is done.
    fn cancel_in_background(&self) {
        let (canceller, slot) = (Arc::clone(&self.canceller), Arc::clone(&self.slot));
        self.runtime.spawn(async move {
            canceller.cancel().await;
            drop(slot);
        });
    }
}

impl Drop for Connection {
    fn drop(&mut self) {
        self.driver.abort();
    }
}

/// Opens a connection for `caller` with the connection string
/// `address`, whose host its grants must reach, by its deadline; each
/// result set then takes at most its answer bound. With
/// `sslmode=require`, TLS verified against `ca_root` alone when given
/// (PEM), else the operator's roots.
pub async fn open(
    caller: Caller<'_>,
    address: &str,
    ca_root: Option<&[u8]>,
) -> Result<Connection, PgError> {
    let (function, grants, deadline, max_bytes) = caller.parts();
    // The string may hold a password: a parse error is never repeated.
    let config = tokio_postgres::Config::from_str(address).map_err(|_| PgError::InvalidAddress)?;
    let host = match config.get_hosts() {
        [tokio_postgres::config::Host::Tcp(host), ..] => host.clone(),
        _ => return Err(PgError::InvalidAddress),
    };
    let port = config.get_ports().first().copied().unwrap_or(5432);
    let tls = match config.get_ssl_mode() {
        tokio_postgres::config::SslMode::Require => Some(tls::Rustls {
            config: match ca_root {
                Some(pem) => luge_outbound::tls_client_trusting(pem),
                None => luge_outbound::tls_client(function, &host, port),
            }
            .map_err(|e| PgError::Tls(e.to_string()))?,
            name: luge_outbound::server_name(&host).map_err(|e| PgError::Tls(e.to_string()))?,
        }),
        _ => None,
    };
    let runtime = tokio::runtime::Handle::try_current().map_err(|_| PgError::NoRuntime)?;
    let slot = SLOTS
        .try_take(function)
        .ok_or(PgError::TooManyConnections)?;
    let stream = luge_outbound::connect(grants, "postgres", &host, port, deadline).await?;
    // The address checked and connected to: where a cancel request goes.
    let addr = stream
        .peer_addr()
        .map_err(|e| PgError::Connect(luge_outbound::SendError::Connect(e)))?;
    let cancel_tls = tls.clone();
    let (stream, budget) = Budgeted::new(stream, max_bytes);
    let session_failed = |e: tokio_postgres::Error| match PgError::from(e) {
        PgError::Db(db) => PgError::ConnectionFailed(db.as_text),
        PgError::Query(text) => PgError::ConnectionFailed(text),
        other => other,
    };
    let (client, driver) = match tls {
        Some(tls) => {
            let (client, connection) = timeout_at(deadline.into(), config.connect_raw(stream, tls))
                .await
                .map_err(|_| PgError::Deadline)?
                .map_err(session_failed)?;
            (client, drive(&runtime, connection))
        }
        None => {
            let (client, connection) =
                timeout_at(deadline.into(), config.connect_raw(stream, NoTls))
                    .await
                    .map_err(|_| PgError::Deadline)?
                    .map_err(session_failed)?;
            (client, drive(&runtime, connection))
        }
    };
    let canceller = Arc::new(Canceller {
        token: client.cancel_token(),
        addr,
        tls: cancel_tls,
    });
    Ok(Connection {
        client,
        budget,
        max_bytes,
        driver,
        canceller,
        slot: Arc::new(slot),
        runtime,
    })
}

/// Runs a session's I/O on `runtime` until it ends: its task, to abort.
fn drive<S, T>(
    runtime: &tokio::runtime::Handle,
    connection: tokio_postgres::Connection<S, T>,
) -> tokio::task::AbortHandle
where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
    T: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    runtime
        .spawn(async move {
            if let Err(error) = connection.await {
                tracing::debug!(%error, "outbound postgres connection ended");
            }
        })
        .abort_handle()
}

impl Connection {
    /// Runs `statement` with `params` by `deadline`: its rows.
    pub async fn query(
        &self,
        statement: &str,
        params: Vec<Param>,
        deadline: Instant,
    ) -> Result<RowSet, PgError> {
        let params = boxed_all(params)?;
        let max_bytes = self.max_bytes;
        // Cancelled on the server unless it finishes.
        let run = async {
            let rows = self
                .client
                .query_raw(
                    statement,
                    params.iter().map(|p| &**p as &(dyn ToSql + Sync)),
                )
                .await?;
            let mut rows = pin!(rows);
            let mut set = RowSet::default();
            let mut used = 0usize;
            while let Some(row) = rows.next().await {
                let row = row?;
                if set.columns.is_empty() {
                    set.columns = row
                        .columns()
                        .iter()
                        .map(|c| Column {
                            name: c.name().to_owned(),
                            data_type: data_type(c.type_()),
                        })
                        .collect();
                }
                let mut values = Vec::with_capacity(row.len());
                for index in 0..row.len() {
                    let value = value(&row, index)?;
                    used = used.saturating_add(cost(&value));
                    if used > max_bytes {
                        return Err(PgError::TooLarge(max_bytes));
                    }
                    values.push(value);
                }
                set.rows.push(values);
            }
            Ok(set)
        };
        self.by_deadline(deadline, run).await
    }

    /// Runs `statement` with `params` by `deadline`: the rows it changed.
    pub async fn execute(
        &self,
        statement: &str,
        params: Vec<Param>,
        deadline: Instant,
    ) -> Result<u64, PgError> {
        let params = boxed_all(params)?;
        let refs: Vec<&(dyn ToSql + Sync)> =
            params.iter().map(|p| &**p as &(dyn ToSql + Sync)).collect();
        self.by_deadline(deadline, self.client.execute(statement, &refs))
            .await
    }

    /// Runs `run` (a statement, not yet started) on a fresh result budget
    /// by `deadline`, cancelled on the server unless it finishes; a
    /// failure once the budget is spent is the bound's.
    async fn by_deadline<T, E: Into<PgError>>(
        &self,
        deadline: Instant,
        run: impl Future<Output = Result<T, E>>,
    ) -> Result<T, PgError> {
        self.budget.reset(self.max_bytes);
        match luge_outbound::finished_by(deadline, || self.cancel_in_background(), run).await {
            None => Err(PgError::Deadline),
            Some(Err(_)) if self.budget.spent() => Err(PgError::TooLarge(self.max_bytes)),
            Some(result) => result.map_err(Into::into),
        }
    }
}

/// Each parameter as the driver takes it.
fn boxed_all(params: Vec<Param>) -> Result<Vec<Box<dyn ToSql + Sync + Send>>, PgError> {
    params.into_iter().map(boxed).collect()
}

/// What a value costs against the result bound: its payload and 16
/// bytes.
fn cost(value: &Value) -> usize {
    16 + match value {
        Value::Str(s) | Value::Uuid(s) | Value::Decimal(s) => s.len(),
        Value::Binary(b) | Value::Jsonb(b) | Value::Unsupported(b) => b.len(),
        Value::ArrayInt32(a) => a.len() * 8,
        Value::ArrayInt64(a) => a.len() * 16,
        Value::ArrayDecimal(a) | Value::ArrayStr(a) => a
            .iter()
            .map(|s| 24 + s.as_ref().map_or(0, String::len))
            .sum(),
        _ => 8,
    }
}

/// NULL of whatever type the server expects.
#[derive(Debug)]
struct Null;

impl ToSql for Null {
    fn to_sql(
        &self,
        _: &Type,
        _: &mut bytes::BytesMut,
    ) -> Result<IsNull, Box<dyn std::error::Error + Sync + Send>> {
        Ok(IsNull::Yes)
    }

    fn accepts(_: &Type) -> bool {
        true
    }

    tokio_postgres::types::to_sql_checked!();
}

/// A range of `T` (`int4range`, `int8range`, `numrange`), in
/// PostgreSQL's binary form (postgres-protocol's encoding).
#[derive(Debug)]
struct PgRange<T>(Bound<T>, Bound<T>);

/// The element type of a range type.
fn element(range: &Type) -> Option<Type> {
    match *range {
        Type::INT4_RANGE => Some(Type::INT4),
        Type::INT8_RANGE => Some(Type::INT8),
        Type::NUM_RANGE => Some(Type::NUMERIC),
        _ => None,
    }
}

impl<T: ToSql + std::fmt::Debug + Sync> ToSql for PgRange<T> {
    fn to_sql(
        &self,
        ty: &Type,
        out: &mut bytes::BytesMut,
    ) -> Result<IsNull, Box<dyn std::error::Error + Sync + Send>> {
        use postgres_protocol::types::RangeBound;
        let inner = element(ty).ok_or("not a range type")?;
        // The two crates each have an IsNull.
        let null = |n: IsNull| match n {
            IsNull::Yes => postgres_protocol::IsNull::Yes,
            IsNull::No => postgres_protocol::IsNull::No,
        };
        let bound = |b: &Bound<T>, out: &mut bytes::BytesMut| match b {
            None => Ok(RangeBound::Unbounded),
            Some((v, BoundKind::Inclusive)) => {
                Ok(RangeBound::Inclusive(null(v.to_sql(&inner, out)?)))
            }
            Some((v, BoundKind::Exclusive)) => {
                Ok(RangeBound::Exclusive(null(v.to_sql(&inner, out)?)))
            }
        };
        postgres_protocol::types::range_to_sql(
            |out| bound(&self.0, out),
            |out| bound(&self.1, out),
            out,
        )?;
        Ok(IsNull::No)
    }

    fn accepts(ty: &Type) -> bool {
        element(ty).is_some_and(|inner| T::accepts(&inner))
    }

    tokio_postgres::types::to_sql_checked!();
}

impl<'a, T: FromSql<'a>> FromSql<'a> for PgRange<T> {
    fn from_sql(
        ty: &Type,
        raw: &'a [u8],
    ) -> Result<Self, Box<dyn std::error::Error + Sync + Send>> {
        use postgres_protocol::types::{Range, RangeBound};
        let inner = element(ty).ok_or("not a range type")?;
        let bound = |b: RangeBound<Option<&'a [u8]>>| -> Result<Bound<T>, Box<dyn std::error::Error + Sync + Send>> {
            Ok(match b {
                RangeBound::Unbounded => None,
                RangeBound::Inclusive(v) => Some((T::from_sql(&inner, v.ok_or("a NULL bound")?)?, BoundKind::Inclusive)),
                RangeBound::Exclusive(v) => Some((T::from_sql(&inner, v.ok_or("a NULL bound")?)?, BoundKind::Exclusive)),
            })
        };
        match postgres_protocol::types::range_from_sql(raw)? {
            Range::Empty => Ok(PgRange(None, None)),
            Range::Nonempty(lo, hi) => Ok(PgRange(bound(lo)?, bound(hi)?)),
        }
    }

    fn accepts(ty: &Type) -> bool {
        element(ty).is_some_and(|inner| T::accepts(&inner))
    }
}

/// `interval` in PostgreSQL's binary form: microseconds, days, months.
#[derive(Debug)]
struct PgInterval(Interval);

impl ToSql for PgInterval {
    fn to_sql(
        &self,
        _: &Type,
        out: &mut bytes::BytesMut,
    ) -> Result<IsNull, Box<dyn std::error::Error + Sync + Send>> {
        use bytes::BufMut;
        out.put_i64(self.0.micros);
        out.put_i32(self.0.days);
        out.put_i32(self.0.months);
        Ok(IsNull::No)
    }

    fn accepts(ty: &Type) -> bool {
        *ty == Type::INTERVAL
    }

    tokio_postgres::types::to_sql_checked!();
}

impl<'a> FromSql<'a> for PgInterval {
    fn from_sql(_: &Type, raw: &'a [u8]) -> Result<Self, Box<dyn std::error::Error + Sync + Send>> {
        let raw: &[u8; 16] = raw.try_into().map_err(|_| "an interval is 16 bytes")?;
        let (micros, rest) = raw.split_at(8);
        let (days, months) = rest.split_at(4);
        Ok(PgInterval(Interval {
            micros: i64::from_be_bytes(micros.try_into()?),
            days: i32::from_be_bytes(days.try_into()?),
            months: i32::from_be_bytes(months.try_into()?),
        }))
    }

    fn accepts(ty: &Type) -> bool {
        *ty == Type::INTERVAL
    }
}

/// Any column's raw binary form.
struct Raw(Vec<u8>);

impl<'a> FromSql<'a> for Raw {
    fn from_sql(_: &Type, raw: &'a [u8]) -> Result<Self, Box<dyn std::error::Error + Sync + Send>> {
        Ok(Raw(raw.to_vec()))
    }

    fn accepts(_: &Type) -> bool {
        true
    }
}

fn bad(what: &str) -> PgError {
    PgError::BadParameter(what.to_owned())
}

fn date((year, month, day): Date) -> Result<chrono::NaiveDate, PgError> {
    chrono::NaiveDate::from_ymd_opt(year, month.into(), day.into()).ok_or_else(|| bad("not a date"))
}

fn time((hour, minute, second, nanos): Time) -> Result<chrono::NaiveTime, PgError> {
    chrono::NaiveTime::from_hms_nano_opt(hour.into(), minute.into(), second.into(), nanos)
        .ok_or_else(|| bad("not a time"))
}

fn decimal(text: &str) -> Result<rust_decimal::Decimal, PgError> {
    rust_decimal::Decimal::from_str(text).map_err(|_| bad("not a decimal number"))
}

/// A parameter as what tokio-postgres sends.
fn boxed(param: Param) -> Result<Box<dyn ToSql + Sync + Send>, PgError> {
    Ok(match param {
        Param::Boolean(b) => Box::new(b),
        Param::Int8(i) => Box::new(i),
        Param::Int16(i) => Box::new(i),
        Param::Int32(i) => Box::new(i),
        Param::Int64(i) => Box::new(i),
        Param::Floating32(f) => Box::new(f),
        Param::Floating64(f) => Box::new(f),
        Param::Str(s) => Box::new(s),
        Param::Binary(b) => Box::new(b),
        Param::Date(d) => Box::new(date(d)?),
        Param::Time(t) => Box::new(time(t)?),
        Param::Datetime((y, mo, d, h, mi, s, n)) => Box::new(chrono::NaiveDateTime::new(
            date((y, mo, d))?,
            time((h, mi, s, n))?,
        )),
        Param::Timestamp(seconds) => Box::new(
            chrono::DateTime::<chrono::Utc>::from_timestamp(seconds, 0)
                .ok_or_else(|| bad("timestamp out of range"))?,
        ),
        Param::Uuid(text) => Box::new(uuid::Uuid::parse_str(&text).map_err(|_| bad("not a UUID"))?),
        Param::Jsonb(bytes) => Box::new(
            serde_json::from_slice::<serde_json::Value>(&bytes).map_err(|_| bad("not JSON"))?,
        ),
        Param::Decimal(text) => Box::new(decimal(&text)?),
        Param::ArrayInt32(a) => Box::new(a),
        Param::ArrayInt64(a) => Box::new(a),
        Param::ArrayDecimal(a) => Box::new(
            a.iter()
                .map(|d| d.as_deref().map(decimal).transpose())
                .collect::<Result<Vec<_>, _>>()?,
        ),
        Param::ArrayStr(a) => Box::new(a),
        Param::RangeInt32(lo, hi) => Box::new(PgRange(lo, hi)),
        Param::RangeInt64(lo, hi) => Box::new(PgRange(lo, hi)),
        Param::RangeDecimal(lo, hi) => {
            let number = |b: Bound<String>| -> Result<Bound<rust_decimal::Decimal>, PgError> {
                b.map(|(d, k)| Ok((decimal(&d)?, k))).transpose()
            };
            Box::new(PgRange(number(lo)?, number(hi)?))
        }
        Param::Interval(i) => Box::new(PgInterval(i)),
        Param::Null => Box::new(Null),
        Param::Unsupported(what) => {
            return Err(PgError::BadParameter(format!(
                "{what} parameters are not served by Luge"
            )));
        }
    })
}

fn data_type(ty: &Type) -> DataType {
    match *ty {
        Type::BOOL => DataType::Boolean,
        Type::CHAR => DataType::Int8,
        Type::INT2 => DataType::Int16,
        Type::INT4 => DataType::Int32,
        Type::INT8 => DataType::Int64,
        Type::FLOAT4 => DataType::Floating32,
        Type::FLOAT8 => DataType::Floating64,
        Type::TEXT | Type::VARCHAR | Type::BPCHAR | Type::NAME => DataType::Str,
        Type::BYTEA => DataType::Binary,
        Type::DATE => DataType::Date,
        Type::TIME => DataType::Time,
        Type::TIMESTAMP => DataType::Datetime,
        Type::TIMESTAMPTZ => DataType::Timestamp,
        Type::UUID => DataType::Uuid,
        Type::JSON | Type::JSONB => DataType::Jsonb,
        Type::NUMERIC => DataType::Decimal,
        Type::INT4_ARRAY => DataType::ArrayInt32,
        Type::INT8_ARRAY => DataType::ArrayInt64,
        Type::NUMERIC_ARRAY => DataType::ArrayDecimal,
        Type::TEXT_ARRAY | Type::VARCHAR_ARRAY => DataType::ArrayStr,
        Type::INT4_RANGE => DataType::RangeInt32,
        Type::INT8_RANGE => DataType::RangeInt64,
        Type::NUM_RANGE => DataType::RangeDecimal,
        Type::INTERVAL => DataType::Interval,
        _ => DataType::Other(ty.name().to_owned()),
    }
}

/// Column `index` of `row` as a value of its type (NULL as [`Value::Null`]).
fn value(row: &Row, index: usize) -> Result<Value, PgError> {
    fn get<'a, T: FromSql<'a>>(row: &'a Row, index: usize) -> Result<Option<T>, PgError> {
        row.try_get::<_, Option<T>>(index)
            .map_err(|e| PgError::ValueConversion(e.to_string()))
    }
    let ty = row.columns()[index].type_().clone();
    let value = match ty {
        Type::BOOL => get(row, index)?.map(Value::Boolean),
        Type::CHAR => get(row, index)?.map(Value::Int8),
        Type::INT2 => get(row, index)?.map(Value::Int16),
        Type::INT4 => get(row, index)?.map(Value::Int32),
        Type::INT8 => get(row, index)?.map(Value::Int64),
        Type::FLOAT4 => get(row, index)?.map(Value::Floating32),
        Type::FLOAT8 => get(row, index)?.map(Value::Floating64),
        Type::TEXT | Type::VARCHAR | Type::BPCHAR | Type::NAME => get(row, index)?.map(Value::Str),
        Type::BYTEA => get(row, index)?.map(Value::Binary),
        Type::DATE => get::<chrono::NaiveDate>(row, index)?.map(|d| Value::Date(ymd(&d))),
        Type::TIME => get::<chrono::NaiveTime>(row, index)?.map(|t| Value::Time(hms(&t))),
        Type::TIMESTAMP => get::<chrono::NaiveDateTime>(row, index)?.map(|dt| {
            let (y, mo, d) = ymd(&dt.date());
            let (h, mi, s, n) = hms(&dt.time());
            Value::Datetime((y, mo, d, h, mi, s, n))
        }),
        Type::TIMESTAMPTZ => get::<chrono::DateTime<chrono::Utc>>(row, index)?
            .map(|t| Value::Timestamp(t.timestamp())),
        Type::UUID => get::<uuid::Uuid>(row, index)?.map(|u| Value::Uuid(u.to_string())),
        Type::JSON | Type::JSONB => {
            get::<serde_json::Value>(row, index)?.map(|j| Value::Jsonb(j.to_string().into_bytes()))
        }
        Type::NUMERIC => {
            get::<rust_decimal::Decimal>(row, index)?.map(|d| Value::Decimal(d.to_string()))
        }
        Type::INT4_ARRAY => get(row, index)?.map(Value::ArrayInt32),
        Type::INT8_ARRAY => get(row, index)?.map(Value::ArrayInt64),
        Type::NUMERIC_ARRAY => get::<Vec<Option<rust_decimal::Decimal>>>(row, index)?.map(|a| {
            Value::ArrayDecimal(a.into_iter().map(|d| d.map(|d| d.to_string())).collect())
        }),
        Type::TEXT_ARRAY | Type::VARCHAR_ARRAY => get(row, index)?.map(Value::ArrayStr),
        Type::INT4_RANGE => {
            get::<PgRange<i32>>(row, index)?.map(|PgRange(lo, hi)| Value::RangeInt32(lo, hi))
        }
        Type::INT8_RANGE => {
            get::<PgRange<i64>>(row, index)?.map(|PgRange(lo, hi)| Value::RangeInt64(lo, hi))
        }
        Type::NUM_RANGE => {
            get::<PgRange<rust_decimal::Decimal>>(row, index)?.map(|PgRange(lo, hi)| {
                let text = |b: Bound<rust_decimal::Decimal>| b.map(|(d, k)| (d.to_string(), k));
                Value::RangeDecimal(text(lo), text(hi))
            })
        }
        Type::INTERVAL => get::<PgInterval>(row, index)?.map(|PgInterval(i)| Value::Interval(i)),
        _ => get::<Raw>(row, index)?.map(|raw| Value::Unsupported(raw.0)),
    };
    Ok(value.unwrap_or(Value::Null))
}

fn ymd(date: &chrono::NaiveDate) -> Date {
    // Months and days are 1-31: they fit.
    (date.year(), date.month() as u8, date.day() as u8)
}

fn hms(time: &chrono::NaiveTime) -> Time {
    // Hours, minutes and seconds are below 60: they fit.
    (
        time.hour() as u8,
        time.minute() as u8,
        time.second() as u8,
        time.nanosecond(),
    )
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use luge_testkit::postgres::PostgresServer;
    use luge_testkit::{grants, later};

    use super::*;

    /// Function `name` as a client, by a deadline far off, its answers
    /// bounded at 1 MiB.
    fn caller<'a>(name: &'a str, granted: &'a luge_core::capabilities::AllowedHosts) -> Caller<'a> {
        Caller::new(name, granted, later(), 1 << 20)
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn queries_reach_a_granted_server_and_are_bounded() {
        let server = PostgresServer::start().unwrap();
        let granted = server.grants();
        let c = open(caller("f1", &granted), &server.url(), None)
            .await
            .unwrap();
        c.execute(
            "CREATE TABLE t (id serial PRIMARY KEY, name text, data bytea, n numeric, \
             at timestamp, j jsonb, u uuid, tags text[], d date, ok boolean, r point)",
            vec![],
            later(),
        )
        .await
        .unwrap();
        let changed = c
            .execute(
                "INSERT INTO t (name, data, n, at, j, u, tags, d, ok, r) \
                 VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, '(1,5)')",
                vec![
                    Param::Str("a'b".into()),
                    Param::Binary(vec![0, 1]),
                    Param::Decimal("12.50".into()),
                    Param::Datetime((2026, 11, 27, 19, 30, 5, 0)),
                    Param::Jsonb(br#"{"k": [1, 2]}"#.to_vec()),
                    Param::Uuid("67e55044-10b1-426f-9247-bb680e5fe0c8".into()),
                    Param::ArrayStr(vec![Some("x".into()), None]),
                    Param::Date((2026, 1, 2)),
                    Param::Null,
                ],
                later(),
            )
            .await
            .unwrap();
        assert_eq!(changed, 1);
        let set = c
            .query(
                "SELECT id, name, data, n, at, j, u, tags, d, ok, r FROM t WHERE name = $1",
                vec![Param::Str("a'b".into())],
                later(),
            )
            .await
            .unwrap();
        assert_eq!(set.columns[0].data_type, DataType::Int32);
        assert_eq!(set.columns[10].data_type, DataType::Other("point".into()));
        let row = &set.rows[0];
        assert_eq!(row[0], Value::Int32(1));
        assert_eq!(row[1], Value::Str("a'b".into()));
        assert_eq!(row[2], Value::Binary(vec![0, 1]));
        assert_eq!(row[3], Value::Decimal("12.50".into()));
        assert_eq!(row[4], Value::Datetime((2026, 11, 27, 19, 30, 5, 0)));
        assert_eq!(row[5], Value::Jsonb(br#"{"k":[1,2]}"#.to_vec()));
        assert_eq!(
            row[6],
            Value::Uuid("67e55044-10b1-426f-9247-bb680e5fe0c8".into())
        );
        assert_eq!(row[7], Value::ArrayStr(vec![Some("x".into()), None]));
        assert_eq!(row[8], Value::Date((2026, 1, 2)));
        assert_eq!(row[9], Value::Null);
        assert!(matches!(row[10], Value::Unsupported(_)));

        // The server's errors, typed.
        let Err(PgError::Db(db)) = c.query("SELECT * FROM missing", vec![], later()).await else {
            panic!("not a server error");
        };
        assert_eq!(db.code, "42P01");
        assert!(matches!(
            c.query(
                "SELECT $1::int",
                vec![Param::Unsupported("interval")],
                later()
            )
            .await,
            Err(PgError::BadParameter(_))
        ));

        // A result set larger than the bound, and a query past its deadline.
        let huge = "SELECT repeat('x', 1000) FROM generate_series(1, 100000)";
        // Either the rows or the bytes off the socket reach the bound first.
        assert!(matches!(
            c.query(huge, vec![], later()).await,
            Err(PgError::TooLarge(_))
        ));
        let c = open(caller("f1", &granted), &server.url(), None)
            .await
            .unwrap();
        let soon = Instant::now() + Duration::from_millis(300);
        assert!(matches!(
            c.query("SELECT pg_sleep(10)", vec![], soon).await,
            Err(PgError::Deadline)
        ));
    }

    /// Backends of function `name` still running a `pg_sleep`, as the
    /// server sees them.
    async fn sleeping(watcher: &Connection) -> i64 {
        let set = watcher
            .query(
                "SELECT count(*)::int8 FROM pg_stat_activity \
                 WHERE query LIKE 'SELECT pg_sleep%' AND state = 'active'",
                vec![],
                later(),
            )
            .await
            .unwrap();
        match set.rows[0][0] {
            Value::Int64(n) => n,
            ref other => panic!("{other:?}"),
        }
    }

    /// Waits until no backend sleeps, at most `within`.
    async fn until_none_sleeps(watcher: &Connection, within: Duration) -> i64 {
        let until = Instant::now() + within;
        loop {
            let n = sleeping(watcher).await;
            if n == 0 || Instant::now() >= until {
                return n;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// A statement past its deadline is cancelled on the server, as is one
    /// whose invocation ended while it ran (its future dropped); the
    /// function's slots come back once the server has let them go.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn statements_past_their_deadline_are_cancelled_on_the_server() {
        let server = PostgresServer::start().unwrap();
        let granted = server.grants();
        let watcher = open(caller("watcher", &granted), &server.url(), None)
            .await
            .unwrap();
        // Every slot of the function, each running a long statement to its
        // deadline.
        let mut held = Vec::new();
        for _ in 0..MAX_CONNECTIONS_PER_FUNCTION {
            held.push(
                open(caller("sleeper", &granted), &server.url(), None)
                    .await
                    .unwrap(),
            );
        }
        let deadline = Instant::now() + Duration::from_millis(500);
        let runs = held
            .iter()
            .map(|c| c.query("SELECT pg_sleep(120)", vec![], deadline));
        for ended in futures_util::future::join_all(runs).await {
            assert!(matches!(ended, Err(PgError::Deadline)), "{ended:?}");
        }
        assert_eq!(until_none_sleeps(&watcher, Duration::from_secs(5)).await, 0);
        // A statement whose caller went away.
        let c = &held[0];
        let dropped = tokio::time::timeout(
            Duration::from_millis(300),
            c.execute("SELECT pg_sleep(120)", vec![], later()),
        )
        .await;
        assert!(dropped.is_err());
        assert_eq!(until_none_sleeps(&watcher, Duration::from_secs(5)).await, 0);
        // The slots come back once the connections are gone.
        drop(held);
        let until = Instant::now() + Duration::from_secs(10);
        let reopened = loop {
            match open(caller("sleeper", &granted), &server.url(), None).await {
                Err(PgError::TooManyConnections) if Instant::now() < until => {
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
                other => break other,
            }
        };
        assert!(reopened.is_ok(), "{reopened:?}");
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn what_is_not_granted_or_right_is_refused() {
        let server = PostgresServer::start().unwrap();
        let other = grants(&["postgres://127.0.0.1:1"]);
        assert!(matches!(
            open(caller("f2", &other), &server.url(), None).await,
            Err(PgError::Connect(luge_outbound::SendError::Denied(_)))
        ));
        let granted = server.grants();
        let wrong = server.url().replace(server.password, "wrong-secret");
        let error = open(caller("f2", &granted), &wrong, None)
            .await
            .unwrap_err();
        assert!(matches!(error, PgError::ConnectionFailed(_)), "{error}");
        assert!(!error.to_string().contains("wrong-secret"), "{error}");
        for bad in ["postgres://", "host=/tmp user=x", "nonsense = = ="] {
            assert!(
                matches!(
                    open(caller("f2", &granted), bad, None).await,
                    Err(PgError::InvalidAddress)
                ),
                "{bad}"
            );
        }
        let mut held = Vec::new();
        for _ in 0..MAX_CONNECTIONS_PER_FUNCTION {
            held.push(
                open(caller("f3", &granted), &server.url(), None)
                    .await
                    .unwrap(),
            );
        }
        assert!(matches!(
            open(caller("f3", &granted), &server.url(), None).await,
            Err(PgError::TooManyConnections)
        ));
    }

    /// Ranges and intervals, as Spin 4's `spin:postgres` carries them: sent
    /// as parameters and read back as columns, bounds and their kinds
    /// kept; an empty range reads as two unbounded ends.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn ranges_and_intervals_go_both_ways() {
        let server = PostgresServer::start().unwrap();
        let granted = server.grants();
        let c = open(caller("r1", &granted), &server.url(), None)
            .await
            .unwrap();
        use BoundKind::{Exclusive, Inclusive};
        let interval = Interval {
            micros: 3_000_001,
            days: 2,
            months: 14,
        };
        let set = c
            .query(
                "SELECT $1::int4range, $2::int8range, $3::numrange, $4::interval, \
                 'empty'::int4range, '(,10]'::int8range, '1 year 2 mons 3 days 00:00:04'::interval",
                vec![
                    Param::RangeInt32(Some((1, Inclusive)), Some((5, Exclusive))),
                    Param::RangeInt64(None, Some((1 << 40, Inclusive))),
                    Param::RangeDecimal(Some(("1.5".into(), Exclusive)), None),
                    Param::Interval(interval),
                ],
                later(),
            )
            .await
            .unwrap();
        let types: Vec<_> = set.columns.iter().map(|c| c.data_type.clone()).collect();
        assert_eq!(
            types[..4],
            [
                DataType::RangeInt32,
                DataType::RangeInt64,
                DataType::RangeDecimal,
                DataType::Interval
            ]
        );
        assert_eq!(
            set.rows[0],
            vec![
                Value::RangeInt32(Some((1, Inclusive)), Some((5, Exclusive))),
                // PostgreSQL normalises a discrete range to [lo, hi).
                Value::RangeInt64(None, Some(((1 << 40) + 1, Exclusive))),
                Value::RangeDecimal(Some(("1.5".into(), Exclusive)), None),
                Value::Interval(interval),
                Value::RangeInt32(None, None),
                Value::RangeInt64(None, Some((11, Exclusive))),
                Value::Interval(Interval {
                    micros: 4_000_000,
                    days: 3,
                    months: 14
                }),
            ]
        );
        // A bound that is not a number: the parameter refused, named.
        let error = c
            .query(
                "SELECT $1::numrange",
                vec![Param::RangeDecimal(Some(("x".into(), Inclusive)), None)],
                later(),
            )
            .await
            .unwrap_err();
        assert!(matches!(error, PgError::BadParameter(_)), "{error}");
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn sslmode_require_speaks_tls_verified_by_chain_and_name() {
        let ca = luge_testkit::tls::PrivateCa::new();
        let (cert, key) = ca.server_pem("localhost");
        let server = PostgresServer::start_tls(&cert, &key).unwrap();
        let port = server.port;
        let granted = grants(&[
            &format!("postgres://localhost:{port}"),
            &format!("postgres://127.0.0.1:{port}"),
        ]);
        let url = |host: &str, mode: &str| {
            format!("postgres://luge:luge-pw@{host}:{port}/luge?sslmode={mode}")
        };
        let pem = Some(ca.pem.as_bytes());
        let ssl = async |c: &Connection| {
            c.query(
                "SELECT ssl FROM pg_stat_ssl WHERE pid = pg_backend_pid()",
                vec![],
                later(),
            )
            .await
            .unwrap()
            .rows
        };
        // Trusting the server's CA: a TLS session, verified.
        let c = open(caller("t1", &granted), &url("localhost", "require"), pem)
            .await
            .unwrap();
        assert_eq!(ssl(&c).await, vec![vec![Value::Boolean(true)]]);
        // The default (`prefer`) talks plain TCP, as before.
        let plain = open(caller("t1", &granted), &url("localhost", "prefer"), pem)
            .await
            .unwrap();
        assert_eq!(ssl(&plain).await, vec![vec![Value::Boolean(false)]]);
        // A CA the client does not trust, or a name the certificate does
        // not hold: refused, naming the certificate.
        for (host, pem) in [("localhost", None), ("127.0.0.1", pem)] {
            let error = open(caller("t1", &granted), &url(host, "require"), pem)
                .await
                .unwrap_err()
                .to_string();
            assert!(error.contains("certificate"), "{host}: {error}");
            assert!(!error.contains("luge-pw"), "{error}");
        }
        // Not PEM: a TLS error before any socket.
        let error = open(
            caller("t1", &granted),
            &url("localhost", "require"),
            Some(b"not a certificate"),
        )
        .await
        .unwrap_err();
        assert!(matches!(error, PgError::Tls(_)), "{error}");
    }
}
