//! SQLite databases for functions: the host side of the `sqlite` slice
//! (`spin:sqlite`), whose grants are
//! [`luge_core::capabilities::sqlite`](../luge_core/capabilities/sqlite/index.html)'s.
//!
//! This crate narrows `rusqlite` (SQLite compiled in) to what a sandbox
//! may do with a database:
//!
//! - **Which database.** A function opens a label its grant lists:
//!   `default` is its own database (a Spin app's, shared by the app's
//!   components as on `spin up`), a file under the operator's database
//!   directory, kept across restarts; any other label is a database the
//!   operator named in the runtime config (`[sqlite_database.NAME]`).
//!   A label not granted is `access-denied`; one granted and not
//!   configured, `no-such-database`. See [`Databases`].
//! - **Only that file.** Statements cannot reach another file: `ATTACH`
//!   (and `VACUUM INTO`, which attaches) is refused twice, by the
//!   authorizer and by a limit of no attached database; pragmas are an
//!   allow-list of the harmless ones ([`ALLOWED_PRAGMAS`]); SQLite's
//!   defensive mode forbids writing the schema by hand; extensions are not
//!   compiled in.
//! - **Bounded.** Every statement ends by the invocation's deadline (a
//!   progress handler interrupts it, a lock is waited for no longer); a
//!   result set larger than the caller's bound is an error, read row by
//!   row so the host never holds more than the bound; a single value is
//!   at most [`MAX_VALUE_BYTES`]; a database file grows to at most
//!   [`MAX_DATABASE_BYTES`] (then `database-full`), its temporary
//!   tables, indices and views to at most [`MAX_TEMP_BYTES`], and a
//!   connection on which a statement made any of them is closed, not
//!   kept, when its invocation lets go of it (so nothing a request makes
//!   survives it on a pooled connection, temporary files included); at most
//!   [`MAX_CONNECTIONS_PER_DATABASE`] connections to one database are
//!   open at once across every invocation (one more waits for a free one
//!   until its deadline), so no tenant exhausts file descriptors.
//! - **Off the executor's threads.** SQLite blocks; each statement runs
//!   on tokio's blocking pool while the invocation awaits it, so a slow
//!   query holds its own request, never a worker.

#![deny(missing_docs)]

#[cfg(feature = "component")]
pub mod component;

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use rusqlite::hooks::{AuthAction, AuthContext, Authorization};
use rusqlite::limits::Limit;
use rusqlite::types::ValueRef;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

/// The label of a function's own database.
pub const DEFAULT_DATABASE: &str = "default";

/// Connections open at once to one database, across every invocation of
/// every function that may open it (Spin 4.1 bounds connections per app
/// the same way): each holds three file descriptors (the database, its
/// write-ahead log and its shared memory), so 32 bound what one tenant
/// can hold at 96, and SQLite serialises writers anyway.
pub const MAX_CONNECTIONS_PER_DATABASE: usize = 32;

/// The largest text or blob a statement may build or a row may hold
/// (`SQLITE_LIMIT_LENGTH`; SQLite's own default is 1 GB): 16 MiB, a
/// large document, far less than a function's memory.
pub const MAX_VALUE_BYTES: usize = 16 << 20;

/// The largest statement text (`SQLITE_LIMIT_SQL_LENGTH`, default 1 GB).
pub const MAX_STATEMENT_BYTES: usize = 1 << 20;

/// The largest a database file may grow, bytes: past it an insert gets
/// `database-full`. 1 GiB: every function's `default` database lies on
/// the host's disk, and one tenant must not fill it.
pub const MAX_DATABASE_BYTES: u64 = 1 << 30;

/// The largest a connection's temporary database (`CREATE TEMP TABLE`,
/// temporary indices and views) may grow, bytes: past it a statement gets
/// `database-full`. 64 MiB: room for a working set, while the 32
/// connections a database may have hold at most 2 GiB of temporary files
/// between them, each only until its invocation ends.
pub const MAX_TEMP_BYTES: u64 = 64 << 20;

/// Idle connections kept per database for the next invocation (opening
/// one, with its hardening, costs about 100 µs): 4, as idle HTTP
/// connections per origin. One whose last statement left a transaction
/// open is closed instead (SQLite rolls it back).
pub const MAX_IDLE_PER_DATABASE: usize = 4;

/// The page size Luge creates databases with (SQLite's default); the
/// size bound is kept as a page count.
const PAGE_SIZE: u64 = 4096;

/// Every this many SQLite virtual-machine steps a running statement
/// checks its deadline (about a few microseconds of work).
const PROGRESS_STEPS: i32 = 1000;

/// Pragmas a statement may run (read or set): the schema introspection
/// and the per-connection behaviour an application sets. Any other pragma
/// (the journal, the page count bound, `temp_store_directory`, the
/// `writable_schema` backdoor) is refused.
pub const ALLOWED_PRAGMAS: &[&str] = &[
    "foreign_keys",
    "defer_foreign_keys",
    "recursive_triggers",
    "case_sensitive_like",
    "user_version",
    "application_id",
    "table_info",
    "table_xinfo",
    "table_list",
    "index_list",
    "index_info",
    "index_xinfo",
    "foreign_key_list",
    "foreign_key_check",
    "integrity_check",
    "quick_check",
    "optimize",
    "data_version",
    "schema_version",
    "collation_list",
    "function_list",
    "pragma_list",
];

/// Why a database call failed. The variants a guest can tell apart
/// (`spin:sqlite`'s `error`) are the first four; the rest reach it as
/// `io` with this message.
#[derive(Debug, thiserror::Error)]
pub enum SqliteError {
    /// The label is granted and names no database the host keeps.
    #[error("no such database")]
    NoSuchDatabase,
    /// The label is not granted to the function.
    #[error("the database is not granted to this function")]
    AccessDenied,
    /// The database reached [`MAX_DATABASE_BYTES`] (or the disk is full).
    #[error("the database is full")]
    DatabaseFull,
    /// The connection was closed.
    #[error("the connection is closed")]
    InvalidConnection,
    /// The invocation's deadline passed before the statement ended.
    #[error("the invocation's deadline passed during the statement")]
    Deadline,
    /// Every connection to the database stayed taken until the deadline.
    #[error(
        "all {MAX_CONNECTIONS_PER_DATABASE} connections to the database stayed taken until the deadline"
    )]
    ConnectionLimitReached,
    /// The result set outgrew the caller's bound.
    #[error("the result set is larger than {0} bytes")]
    TooLarge(usize),
    /// The statement's parameters do not match its placeholders.
    #[error("the statement has {expected} parameters, {given} were given")]
    Parameters {
        /// Placeholders in the statement.
        expected: usize,
        /// Values given.
        given: usize,
    },
    /// The statement was refused or failed in SQLite.
    #[error("{0}")]
    Sqlite(#[from] rusqlite::Error),
    /// The database's directory could not be made.
    #[error("the database directory: {0}")]
    Directory(std::io::Error),
    /// The statement's blocking task ended without an answer.
    #[error("the database task ended without an answer")]
    Lost,
}

/// A column's value, as `spin:sqlite`'s `value`.
#[derive(Debug, Clone, PartialEq)]
pub enum Value {
    /// A 64-bit integer.
    Integer(i64),
    /// A double.
    Real(f64),
    /// UTF-8 text.
    Text(String),
    /// Bytes.
    Blob(Vec<u8>),
    /// NULL.
    Null,
}

impl Value {
    /// What the value costs against a result-set bound: its payload and a
    /// fixed 16 bytes (the guest's variant and list entry).
    fn cost(&self) -> usize {
        16 + match self {
            Value::Text(text) => text.len(),
            Value::Blob(bytes) => bytes.len(),
            _ => 8,
        }
    }

    fn from_ref(value: ValueRef<'_>) -> Self {
        match value {
            ValueRef::Null => Value::Null,
            ValueRef::Integer(i) => Value::Integer(i),
            ValueRef::Real(r) => Value::Real(r),
            ValueRef::Text(t) => Value::Text(String::from_utf8_lossy(t).into_owned()),
            ValueRef::Blob(b) => Value::Blob(b.to_vec()),
        }
    }
}

impl rusqlite::ToSql for Value {
    fn to_sql(&self) -> rusqlite::Result<rusqlite::types::ToSqlOutput<'_>> {
        Ok(rusqlite::types::ToSqlOutput::Borrowed(match self {
            Value::Integer(i) => ValueRef::Integer(*i),
            Value::Real(r) => ValueRef::Real(*r),
            Value::Text(t) => ValueRef::Text(t.as_bytes()),
            Value::Blob(b) => ValueRef::Blob(b),
            Value::Null => ValueRef::Null,
        }))
    }
}

/// What a statement returned: its columns' names and its rows.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Rows {
    /// The columns' names.
    pub columns: Vec<String>,
    /// Each row's values, one per column.
    pub rows: Vec<Vec<Value>>,
}

/// The databases a host keeps: each function's own under one directory,
/// and the operator's named ones.
#[derive(Debug, Default)]
pub struct Databases {
    /// Where each function's `default` database is made, as
    /// `OWNER.db`; `None`: this host keeps none.
    own_dir: Option<PathBuf>,
    /// The runtime config's databases, by label (a `default` here is the
    /// one database every function granted `default` opens).
    named: BTreeMap<String, PathBuf>,
    /// Each database file's connection slots and idle connections.
    open: Mutex<HashMap<PathBuf, Arc<Slot>>>,
}

static DATABASES: OnceLock<Databases> = OnceLock::new();

/// Sets the process's databases, once, before any function runs; a
/// second call gives its argument back.
pub fn install(databases: Databases) -> Result<(), Databases> {
    DATABASES.set(databases)
}

/// The process's databases: what [`install`] set, else none at all
/// (every open is `no-such-database`).
pub fn databases() -> &'static Databases {
    DATABASES.get_or_init(Databases::default)
}

impl Databases {
    /// Each function's own database under `own_dir` (`None`: none), and
    /// no named one yet.
    pub fn new(own_dir: Option<PathBuf>) -> Self {
        Self {
            own_dir,
            ..Self::default()
        }
    }

    /// Names a database of the runtime config: the file at `path` (made,
    /// with its directory, when first opened).
    pub fn name(&mut self, label: impl Into<String>, path: PathBuf) {
        self.named.insert(label.into(), path);
    }

    /// Whether `label` names a database here (whoever opens it).
    pub fn knows(&self, label: &str) -> bool {
        self.named.contains_key(label) || (label == DEFAULT_DATABASE && self.own_dir.is_some())
    }

    /// The file `label` opens for a function whose own database belongs to
    /// `owner`, if `granted` lists it.
    pub fn path(
        &self,
        label: &str,
        granted: &[String],
        owner: &str,
    ) -> Result<PathBuf, SqliteError> {
        if !granted.iter().any(|g| g == label) {
            return Err(SqliteError::AccessDenied);
        }
        match self.named.get(label) {
            Some(path) => Ok(path.clone()),
            None if label == DEFAULT_DATABASE => match &self.own_dir {
                Some(dir) => Ok(dir.join(format!("{}.db", file_name(owner)))),
                None => Err(SqliteError::NoSuchDatabase),
            },
            None => Err(SqliteError::NoSuchDatabase),
        }
    }

    /// Opens `label` for a function (see [`Databases::path`]), waiting
    /// for a free connection until `deadline`.
    pub async fn open(
        &self,
        label: &str,
        granted: &[String],
        owner: &str,
        deadline: Instant,
    ) -> Result<Connection, SqliteError> {
        let path = self.path(label, granted, owner)?;
        let slot = {
            let mut open = self.open.lock().unwrap_or_else(|e| e.into_inner());
            Arc::clone(open.entry(path.clone()).or_insert_with(|| {
                Arc::new(Slot {
                    semaphore: Arc::new(Semaphore::new(MAX_CONNECTIONS_PER_DATABASE)),
                    idle: Mutex::new(Vec::new()),
                })
            }))
        };
        let semaphore = Arc::clone(&slot.semaphore);
        let permit = match semaphore.clone().try_acquire_owned() {
            Ok(permit) => permit,
            Err(_) if tokio::runtime::Handle::try_current().is_ok() => {
                tokio::time::timeout_at(deadline.into(), semaphore.acquire_owned())
                    .await
                    .map_err(|_| SqliteError::ConnectionLimitReached)?
                    .map_err(|_| SqliteError::ConnectionLimitReached)?
            }
            Err(_) => return Err(SqliteError::ConnectionLimitReached),
        };
        let idle = slot.idle.lock().unwrap_or_else(|e| e.into_inner()).pop();
        let connection = match idle {
            Some(open) => open,
            None => blocking(move || open_file(&path, deadline)).await??,
        };
        Ok(Connection {
            inner: Arc::new(Inner {
                connection: Mutex::new(Some(connection)),
                slot,
                _permit: permit,
            }),
            last_insert_rowid: AtomicI64::new(0),
            changes: AtomicU64::new(0),
        })
    }
}

/// `owner` as a file name, one to one: letters, digits, `-` and `_`
/// kept, every other byte (`.` and `%` included) as `%XX`, so no two
/// owners share a file and none names a path.
fn file_name(owner: &str) -> String {
    let mut name = String::with_capacity(owner.len());
    for byte in owner.bytes() {
        if byte.is_ascii_alphanumeric() || byte == b'-' || byte == b'_' {
            name.push(char::from(byte));
        } else {
            name.push_str(&format!("%{byte:02X}"));
        }
    }
    name
}

/// Runs `work` on tokio's blocking pool (inline without a runtime).
async fn blocking<R: Send + 'static>(
    work: impl FnOnce() -> R + Send + 'static,
) -> Result<R, SqliteError> {
    match tokio::runtime::Handle::try_current() {
        Ok(handle) => handle
            .spawn_blocking(work)
            .await
            .map_err(|_| SqliteError::Lost),
        Err(_) => Ok(work()),
    }
}

/// A connection's SQLite handle and when its statement must end.
struct Open {
    connection: rusqlite::Connection,
    /// Read by the progress handler.
    deadline: Arc<Mutex<Instant>>,
    /// Set by the authorizer when a statement made a temporary table,
    /// index, trigger or view: such a connection is closed, never kept.
    made_temporary: Arc<std::sync::atomic::AtomicBool>,
}

/// One database's connection slots and idle connections.
struct Slot {
    semaphore: Arc<Semaphore>,
    /// At most [`MAX_IDLE_PER_DATABASE`].
    idle: Mutex<Vec<Open>>,
}

impl std::fmt::Debug for Slot {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Slot").finish_non_exhaustive()
    }
}

/// What outlives a closed connection while a statement still runs.
struct Inner {
    /// Taken back into the slot's idle connections when the last holder
    /// lets go.
    connection: Mutex<Option<Open>>,
    slot: Arc<Slot>,
    /// The database's connection slot, given back when the last holder
    /// (the guest's handle or a running statement) lets go.
    _permit: OwnedSemaphorePermit,
}

impl Drop for Inner {
    fn drop(&mut self) {
        let open = self
            .connection
            .get_mut()
            .unwrap_or_else(|e| e.into_inner())
            .take();
        // Kept only outside a transaction, with nothing temporary left of
        // its invocation, and only a few; any other is closed here (SQLite
        // rolls back, and removes its temporary files).
        if let Some(open) = open.filter(|open| {
            open.connection.is_autocommit() && !open.made_temporary.load(Ordering::Relaxed)
        }) {
            let mut idle = self.slot.idle.lock().unwrap_or_else(|e| e.into_inner());
            if idle.len() < MAX_IDLE_PER_DATABASE {
                idle.push(open);
            }
        }
    }
}

/// An open connection to one database.
pub struct Connection {
    inner: Arc<Inner>,
    last_insert_rowid: AtomicI64,
    changes: AtomicU64,
}

impl std::fmt::Debug for Connection {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Connection").finish_non_exhaustive()
    }
}

/// Opens the database file at `path`, hardened: made if missing (its
/// directory too), write-ahead logged, bounded, and with the authorizer
/// that keeps statements inside it.
fn open_file(path: &Path, deadline: Instant) -> Result<Open, SqliteError> {
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir).map_err(SqliteError::Directory)?;
    }
    use rusqlite::OpenFlags;
    let flags = OpenFlags::SQLITE_OPEN_READ_WRITE
        | OpenFlags::SQLITE_OPEN_CREATE
        | OpenFlags::SQLITE_OPEN_NO_MUTEX
        | OpenFlags::SQLITE_OPEN_NOFOLLOW;
    let mut connection = rusqlite::Connection::open_with_flags(path, flags)?;
    connection.busy_timeout(remaining(deadline))?;
    // The host's own settings, before the authorizer forbids them.
    connection.pragma_update(None, "journal_mode", "WAL")?;
    connection.pragma_update(
        None,
        "max_page_count",
        (MAX_DATABASE_BYTES / PAGE_SIZE) as i64,
    )?;
    connection.pragma_update(
        Some("temp"),
        "max_page_count",
        (MAX_TEMP_BYTES / PAGE_SIZE) as i64,
    )?;
    connection.set_db_config(rusqlite::config::DbConfig::SQLITE_DBCONFIG_DEFENSIVE, true)?;
    connection.set_db_config(
        rusqlite::config::DbConfig::SQLITE_DBCONFIG_TRUSTED_SCHEMA,
        false,
    )?;
    connection.set_limit(Limit::SQLITE_LIMIT_ATTACHED, 0)?;
    connection.set_limit(Limit::SQLITE_LIMIT_LENGTH, MAX_VALUE_BYTES as i32)?;
    connection.set_limit(Limit::SQLITE_LIMIT_SQL_LENGTH, MAX_STATEMENT_BYTES as i32)?;
    let made_temporary = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let marks = Arc::clone(&made_temporary);
    connection.authorizer(Some(move |context: AuthContext<'_>| {
        if matches!(
            context.action,
            AuthAction::CreateTempTable { .. }
                | AuthAction::CreateTempIndex { .. }
                | AuthAction::CreateTempTrigger { .. }
                | AuthAction::CreateTempView { .. }
        ) {
            marks.store(true, Ordering::Relaxed);
        }
        authorize(context)
    }))?;
    let deadline = Arc::new(Mutex::new(deadline));
    let checked = Arc::clone(&deadline);
    connection.progress_handler(
        PROGRESS_STEPS,
        Some(move || Instant::now() >= *checked.lock().unwrap_or_else(|e| e.into_inner())),
    )?;
    Ok(Open {
        connection,
        deadline,
        made_temporary,
    })
}

/// The authorizer: everything inside the database, nothing beyond it.
fn authorize(context: AuthContext<'_>) -> Authorization {
    match context.action {
        AuthAction::Attach { .. } | AuthAction::Detach { .. } => Authorization::Deny,
        AuthAction::Pragma { pragma_name, .. } => {
            if ALLOWED_PRAGMAS
                .iter()
                .any(|allowed| allowed.eq_ignore_ascii_case(pragma_name))
            {
                Authorization::Allow
            } else {
                Authorization::Deny
            }
        }
        AuthAction::Function { function_name }
            if function_name.eq_ignore_ascii_case("load_extension") =>
        {
            Authorization::Deny
        }
        _ => Authorization::Allow,
    }
}

/// The time left until `deadline` (none once it passed).
fn remaining(deadline: Instant) -> Duration {
    deadline.saturating_duration_since(Instant::now())
}

impl Connection {
    /// Runs one statement with `parameters` (bound to its placeholders in
    /// order) until `deadline`, reading at most `max_bytes` of rows.
    pub async fn execute(
        &self,
        statement: String,
        parameters: Vec<Value>,
        deadline: Instant,
        max_bytes: usize,
    ) -> Result<Rows, SqliteError> {
        let inner = Arc::clone(&self.inner);
        let (rows, changed) = blocking(move || {
            let guard = inner.connection.lock().unwrap_or_else(|e| e.into_inner());
            let Some(open) = guard.as_ref() else {
                return (Err(SqliteError::InvalidConnection), None);
            };
            *open.deadline.lock().unwrap_or_else(|e| e.into_inner()) = deadline;
            if let Err(e) = open.connection.busy_timeout(remaining(deadline)) {
                return (Err(e.into()), None);
            }
            let before = open.connection.total_changes();
            let rows = run(&open.connection, &statement, &parameters, max_bytes).map_err(|error| {
                match error {
                    SqliteError::Sqlite(rusqlite::Error::SqliteFailure(e, _))
                        if e.code == rusqlite::ErrorCode::OperationInterrupted
                            || (e.code == rusqlite::ErrorCode::DatabaseBusy
                                && Instant::now() >= deadline) =>
                    {
                        SqliteError::Deadline
                    }
                    SqliteError::Sqlite(rusqlite::Error::SqliteFailure(e, _))
                        if e.code == rusqlite::ErrorCode::DiskFull =>
                    {
                        SqliteError::DatabaseFull
                    }
                    other => other,
                }
            });
            // What this statement changed, if anything: a kept connection
            // remembers an earlier invocation's, which this one must not
            // see.
            let changed = (open.connection.total_changes() != before).then(|| {
                (
                    open.connection.last_insert_rowid(),
                    open.connection.changes(),
                )
            });
            (rows, changed)
        })
        .await?;
        if let Some((rowid, changes)) = changed {
            self.last_insert_rowid.store(rowid, Ordering::Relaxed);
            self.changes.store(changes, Ordering::Relaxed);
        }
        rows
    }

    /// The rowid of the latest successful insert on this connection (0
    /// before any).
    pub fn last_insert_rowid(&self) -> i64 {
        self.last_insert_rowid.load(Ordering::Relaxed)
    }

    /// Rows the latest completed insert, update or delete changed.
    pub fn changes(&self) -> u64 {
        self.changes.load(Ordering::Relaxed)
    }
}

/// One statement on `connection`, its rows read up to `max_bytes`.
fn run(
    connection: &rusqlite::Connection,
    statement: &str,
    parameters: &[Value],
    max_bytes: usize,
) -> Result<Rows, SqliteError> {
    let mut prepared = connection.prepare(statement)?;
    let expected = prepared.parameter_count();
    if expected != parameters.len() {
        return Err(SqliteError::Parameters {
            expected,
            given: parameters.len(),
        });
    }
    for (index, value) in parameters.iter().enumerate() {
        prepared.raw_bind_parameter(index + 1, value)?;
    }
    let columns: Vec<String> = prepared.column_names().map(str::to_owned).collect();
    let width = columns.len();
    let mut used = columns.iter().map(|c| c.len() + 16).sum::<usize>();
    let mut rows = Vec::new();
    let mut cursor = prepared.raw_query();
    while let Some(row) = cursor.next()? {
        let mut values = Vec::with_capacity(width);
        for index in 0..width {
            let value = Value::from_ref(row.get_ref(index)?);
            used = used.saturating_add(value.cost());
            if used > max_bytes {
                return Err(SqliteError::TooLarge(max_bytes));
            }
            values.push(value);
        }
        rows.push(values);
    }
    Ok(Rows { columns, rows })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn later() -> Instant {
        Instant::now() + Duration::from_secs(10)
    }

    /// `sql` on `connection`, its answer bounded at 1 MiB.
    async fn run(connection: &Connection, sql: &str) -> Result<Rows, SqliteError> {
        connection
            .execute(sql.into(), vec![], later(), 1 << 20)
            .await
    }

    /// Databases in a fresh directory (kept as long as the first), and a
    /// grant of the label `default`.
    fn fresh() -> (tempfile::TempDir, Databases, Vec<String>) {
        let dir = tempfile::tempdir().unwrap();
        let databases = Databases::new(Some(dir.path().to_owned()));
        (dir, databases, granted(&["default"]))
    }

    fn granted(labels: &[&str]) -> Vec<String> {
        labels.iter().map(|l| (*l).to_owned()).collect()
    }

    #[test]
    fn owners_never_share_a_file_nor_name_a_path() {
        assert_eq!(file_name("fib"), "fib");
        assert_eq!(file_name("spin.app"), "spin%2Eapp");
        assert_eq!(file_name("../etc"), "%2E%2E%2Fetc");
        assert_ne!(file_name("a/b"), file_name("a_b"));
        assert_ne!(file_name("a%2Fb"), file_name("a/b"));
    }

    #[test]
    fn labels_must_be_granted_and_known() {
        let dir = tempfile::tempdir().unwrap();
        let mut databases = Databases::new(Some(dir.path().to_owned()));
        databases.name("shared", dir.path().join("shared.db"));
        let all = granted(&["default", "shared", "other"]);
        assert_eq!(
            databases.path("default", &all, "fn").unwrap(),
            dir.path().join("fn.db")
        );
        assert_eq!(
            databases.path("shared", &all, "fn").unwrap(),
            dir.path().join("shared.db")
        );
        assert!(matches!(
            databases.path("other", &all, "fn"),
            Err(SqliteError::NoSuchDatabase)
        ));
        assert!(matches!(
            databases.path("shared", &granted(&["default"]), "fn"),
            Err(SqliteError::AccessDenied)
        ));
        assert!(matches!(
            Databases::new(None).path("default", &all, "fn"),
            Err(SqliteError::NoSuchDatabase)
        ));
    }

    async fn open(dir: &Path) -> Connection {
        Databases::new(Some(dir.to_owned()))
            .open("default", &granted(&["default"]), "fn", later())
            .await
            .unwrap()
    }

    #[tokio::test]
    async fn statements_run_with_parameters_and_persist() {
        let dir = tempfile::tempdir().unwrap();
        let connection = open(dir.path()).await;
        let with = |sql: &str, params: Vec<Value>| {
            connection.execute(sql.into(), params, later(), 1 << 20)
        };
        with(
            "CREATE TABLE t (id INTEGER PRIMARY KEY, name TEXT, data BLOB, x REAL)",
            vec![],
        )
        .await
        .unwrap();
        with(
            "INSERT INTO t (name, data, x) VALUES (?, ?, ?)",
            vec![
                Value::Text("a".into()),
                Value::Blob(vec![1, 2]),
                Value::Real(0.5),
            ],
        )
        .await
        .unwrap();
        assert_eq!(connection.last_insert_rowid(), 1);
        assert_eq!(connection.changes(), 1);
        let rows = with("SELECT id, name, data, x, NULL AS n FROM t", vec![])
            .await
            .unwrap();
        assert_eq!(rows.columns, ["id", "name", "data", "x", "n"]);
        assert_eq!(
            rows.rows,
            vec![vec![
                Value::Integer(1),
                Value::Text("a".into()),
                Value::Blob(vec![1, 2]),
                Value::Real(0.5),
                Value::Null
            ]]
        );
        assert!(matches!(
            with("SELECT ?", vec![]).await,
            Err(SqliteError::Parameters {
                expected: 1,
                given: 0
            })
        ));
        drop(connection);
        let again = open(dir.path()).await;
        let rows = run(&again, "SELECT count(*) FROM t").await.unwrap();
        assert_eq!(rows.rows, vec![vec![Value::Integer(1)]]);
    }

    #[tokio::test]
    async fn connections_are_kept_for_the_next_open_without_its_past() {
        let (_dir, databases, grant) = fresh();
        let open = || databases.open("default", &grant, "fn", later());
        let c = open().await.unwrap();
        run(&c, "CREATE TABLE t (x)").await.unwrap();
        run(&c, "INSERT INTO t VALUES (1)").await.unwrap();
        drop(c);
        // The kept connection: no rowid of the earlier one's insert.
        let c = open().await.unwrap();
        run(&c, "SELECT * FROM t").await.unwrap();
        assert_eq!((c.last_insert_rowid(), c.changes()), (0, 0));
        // A transaction left open is not kept: it is rolled back.
        run(&c, "BEGIN").await.unwrap();
        run(&c, "INSERT INTO t VALUES (2)").await.unwrap();
        drop(c);
        let c = open().await.unwrap();
        let rows = run(&c, "SELECT count(*) FROM t").await.unwrap();
        assert_eq!(rows.rows, vec![vec![Value::Integer(1)]]);
    }

    #[tokio::test]
    async fn nothing_beyond_the_database_is_reachable() {
        let dir = tempfile::tempdir().unwrap();
        let connection = open(dir.path()).await;
        let outside = dir.path().join("outside.db");
        for sql in [
            format!("ATTACH DATABASE '{}' AS x", outside.display()),
            format!("VACUUM INTO '{}'", outside.display()),
            "PRAGMA max_page_count = 100000000".to_owned(),
            "PRAGMA journal_mode = OFF".to_owned(),
            "PRAGMA writable_schema = ON".to_owned(),
            "PRAGMA database_list".to_owned(),
            "SELECT load_extension('/tmp/x')".to_owned(),
        ] {
            let error = run(&connection, &sql).await.unwrap_err();
            assert!(matches!(error, SqliteError::Sqlite(_)), "{sql}: {error}");
        }
        assert!(!outside.exists());
        run(&connection, "PRAGMA foreign_keys = ON").await.unwrap();
    }

    #[tokio::test]
    async fn big_results_and_values_are_refused() {
        let dir = tempfile::tempdir().unwrap();
        let connection = open(dir.path()).await;
        let many = "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n LIMIT 1000000) SELECT i, 'some text' FROM n";
        let error = run(&connection, many).await.unwrap_err();
        assert!(matches!(error, SqliteError::TooLarge(_)), "{error}");
        let huge = format!("SELECT zeroblob({})", MAX_VALUE_BYTES + 1);
        let error = connection
            .execute(huge, vec![], later(), usize::MAX)
            .await
            .unwrap_err();
        assert!(error.to_string().contains("too big"), "{error}");
    }

    #[tokio::test]
    async fn a_statement_ends_at_its_deadline() {
        let dir = tempfile::tempdir().unwrap();
        let connection = open(dir.path()).await;
        let forever = "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n) SELECT count(*) FROM n";
        let started = Instant::now();
        let error = connection
            .execute(
                forever.into(),
                vec![],
                started + Duration::from_millis(200),
                1 << 20,
            )
            .await
            .unwrap_err();
        assert!(matches!(error, SqliteError::Deadline), "{error}");
        assert!(started.elapsed() < Duration::from_secs(5));
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn connections_to_one_database_are_bounded() {
        let (_dir, databases, grant) = fresh();
        let mut held = Vec::new();
        for _ in 0..MAX_CONNECTIONS_PER_DATABASE {
            held.push(
                databases
                    .open("default", &grant, "fn", later())
                    .await
                    .unwrap(),
            );
        }
        let soon = Instant::now() + Duration::from_millis(100);
        assert!(matches!(
            databases.open("default", &grant, "fn", soon).await,
            Err(SqliteError::ConnectionLimitReached)
        ));
        // Another owner's database is not affected; one given back is free.
        databases
            .open("default", &grant, "other", later())
            .await
            .unwrap();
        held.pop();
        databases
            .open("default", &grant, "fn", later())
            .await
            .unwrap();
    }

    /// Temporary tables are bounded as the database is, and what a
    /// request made temporary does not outlive its connection: the next
    /// invocation gets a fresh one.
    #[tokio::test]
    async fn temporary_storage_is_bounded_and_never_kept() {
        let (_dir, databases, grant) = fresh();
        let open = || databases.open("default", &grant, "fn", later());
        let connection = open().await.unwrap();
        run(&connection, "CREATE TEMP TABLE t (b BLOB)")
            .await
            .unwrap();
        // Past the bound: 1 MB blobs, far more than it holds.
        let mut inserted = 0;
        let error = loop {
            match run(&connection, "INSERT INTO t VALUES (randomblob(1000000))").await {
                Ok(_) => inserted += 1,
                Err(e) => break e,
            }
            assert!(
                inserted <= MAX_TEMP_BYTES / 1_000_000,
                "the bound held nothing"
            );
        };
        assert!(matches!(error, SqliteError::DatabaseFull), "{error}");
        assert!(inserted >= 32, "{inserted}");
        drop(connection);
        // The next invocation finds no temporary table: a new connection.
        let connection = open().await.unwrap();
        let rows = run(&connection, "SELECT count(*) FROM sqlite_temp_master")
            .await
            .unwrap();
        assert_eq!(rows.rows, vec![vec![Value::Integer(0)]]);
        // A connection that made nothing temporary is kept.
        run(&connection, "CREATE TABLE kept (x)").await.unwrap();
        drop(connection);
        let idle = databases
            .open
            .lock()
            .unwrap()
            .values()
            .map(|slot| slot.idle.lock().unwrap().len())
            .sum::<usize>();
        assert_eq!(idle, 1);
    }

    #[tokio::test]
    async fn a_full_database_says_so() {
        let dir = tempfile::tempdir().unwrap();
        let connection = open(dir.path()).await;
        // Shrink the bound (as the host only may) to see it hit.
        {
            let mut guard = connection.inner.connection.lock().unwrap();
            let open = guard.as_mut().unwrap();
            open.connection
                .authorizer(None::<fn(AuthContext<'_>) -> Authorization>)
                .unwrap();
            open.connection
                .pragma_update(None, "max_page_count", 8)
                .unwrap();
            open.connection
                .authorizer(Some(authorize as fn(AuthContext<'_>) -> Authorization))
                .unwrap();
        }
        run(&connection, "CREATE TABLE t (b BLOB)").await.unwrap();
        let error = connection
            .execute(
                "INSERT INTO t VALUES (zeroblob(1000000))".into(),
                vec![],
                later(),
                1 << 20,
            )
            .await
            .unwrap_err();
        assert!(matches!(error, SqliteError::DatabaseFull), "{error}");
    }
}
