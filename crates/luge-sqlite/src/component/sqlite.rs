//! `spin:sqlite@3.1.0` (its 3.0 functions too) for components, bound to
//! `luge-sqlite`: this file only adapts the generated bindings (the
//! connection resource in the store's table, values, errors) to it. Which
//! labels a function may open is its [`SqliteGrant`]; every statement runs
//! under the invocation's deadline and returns at most
//! [`max_answer_bytes`] of rows. The WIT is `spin-sdk` 7.0.0's
//! (Luge's WIT root wit/, deps/spin-sqlite; Apache-2.0 WITH LLVM-exception).

use std::sync::Arc;
use std::time::Instant;

use crate::SqliteError;
use wasmtime::component::{Accessor, Resource};

use luge_binding::max_answer_bytes;
use luge_binding::{ConnectionsView, Handle, Opening, QueryAnswer};

/// The family of every SQLite operation's span.
pub(super) const DATABASE: luge_core::trace::HostCall = luge_core::trace::HostCall::Database;

luge_binding::bindings!("luge:worlds/host-sqlite",
    // SQLite blocks: every function awaits the blocking pool.
    imports: { default: async | trappable },
    with: {
        "spin:sqlite/sqlite.connection": super::SqliteConnection,
    },
);

use generated::spin::sqlite::sqlite;

/// An open connection, as the guest's `connection` resource holds it.
pub type SqliteConnection = Handle<crate::Connection>;

/// The bindings' host state: the view every binding shares.
pub use luge_binding::HasConnections as HasSqlite;

/// One version's synchronous binding (`$wit`'s `connection`: `open`,
/// `execute`, `drop` and the methods in `$more`) and the conversions
/// between its generated types (error, values, rows) and this crate's,
/// written once for Spin 4's and Spin 2's interfaces, whose types are the
/// same.
macro_rules! conversions {
    ($wit:ident, { $($more:tt)* }) => {
        impl $wit::Host for ConnectionsView<'_> {}

        // Synchronous for the guest: each function awaits the blocking
        // pool. `$more` are the methods of this version alone.
        impl $wit::HostConnection for ConnectionsView<'_> {
            async fn open(
                &mut self,
                database: String,
            ) -> wasmtime::Result<Result<Resource<super::sqlite::SqliteConnection>, $wit::Error>>
            {
                let opened = super::sqlite::open(self.opening(), &database).await;
                self.keep(opened, error)
            }

            async fn execute(
                &mut self,
                connection: Resource<super::sqlite::SqliteConnection>,
                statement: String,
                parameters: Vec<$wit::Value>,
            ) -> wasmtime::Result<Result<$wit::QueryResult, $wit::Error>> {
                let _span = self.span(super::sqlite::DATABASE, "sqlite", "execute");
                let (connection, deadline) = self.held(&connection)?;
                let parameters = parameters.into_iter().map(value_in).collect();
                let max_bytes = luge_binding::max_answer_bytes(self.action);
                Ok(connection
                    .execute(statement, parameters, deadline, max_bytes)
                    .await
                    .map(|rows| $wit::QueryResult {
                        columns: rows.columns,
                        rows: rows.rows.into_iter().map(row_out).collect(),
                    })
                    .map_err(error))
            }

            $($more)*

            async fn drop(
                &mut self,
                connection: Resource<super::sqlite::SqliteConnection>,
            ) -> wasmtime::Result<()> {
                self.close(connection)
            }
        }

        fn error(error: crate::SqliteError) -> $wit::Error {
            use crate::SqliteError as E;
            match error {
                E::NoSuchDatabase => $wit::Error::NoSuchDatabase,
                E::AccessDenied => $wit::Error::AccessDenied,
                E::DatabaseFull => $wit::Error::DatabaseFull,
                E::InvalidConnection => $wit::Error::InvalidConnection,
                other => $wit::Error::Io(other.to_string()),
            }
        }

        fn value_in(value: $wit::Value) -> crate::Value {
            match value {
                $wit::Value::Integer(i) => crate::Value::Integer(i),
                $wit::Value::Real(r) => crate::Value::Real(r),
                $wit::Value::Text(t) => crate::Value::Text(t),
                $wit::Value::Blob(b) => crate::Value::Blob(b),
                $wit::Value::Null => crate::Value::Null,
            }
        }

        fn row_out(values: Vec<crate::Value>) -> $wit::RowResult {
            $wit::RowResult {
                values: values
                    .into_iter()
                    .map(|value| match value {
                        crate::Value::Integer(i) => $wit::Value::Integer(i),
                        crate::Value::Real(r) => $wit::Value::Real(r),
                        crate::Value::Text(t) => $wit::Value::Text(t),
                        crate::Value::Blob(b) => $wit::Value::Blob(b),
                        crate::Value::Null => $wit::Value::Null,
                    })
                    .collect(),
            }
        }
    };
}
pub(super) use conversions;

/// Opens `label` for the action's grant: no `default` without an owner.
pub async fn open(opening: Opening, label: &str) -> Result<crate::Connection, SqliteError> {
    let grant = &opening.action.capabilities.sqlite;
    let Some(owner) = &grant.owner else {
        return Err(if grant.databases.iter().any(|l| l == label) {
            SqliteError::NoSuchDatabase
        } else {
            SqliteError::AccessDenied
        });
    };
    crate::databases()
        .open(label, &grant.databases, owner, opening.deadline)
        .await
}

/// The connection `connection` names, the deadline and the bound on its
/// rows.
fn held(
    view: &ConnectionsView<'_>,
    connection: &Resource<SqliteConnection>,
) -> wasmtime::Result<(Arc<crate::Connection>, Instant, usize)> {
    let (connection, deadline) = view.held(connection)?;
    Ok((connection, deadline, max_answer_bytes(view.action)))
}

async fn execute(
    (connection, deadline, max_bytes): (Arc<crate::Connection>, Instant, usize),
    statement: String,
    parameters: Vec<sqlite::Value>,
) -> Result<crate::Rows, sqlite::Error> {
    let parameters = parameters.into_iter().map(value_in).collect();
    connection
        .execute(statement, parameters, deadline, max_bytes)
        .await
        .map_err(error)
}

conversions!(sqlite, {
    async fn last_insert_rowid(
        &mut self,
        connection: Resource<SqliteConnection>,
    ) -> wasmtime::Result<i64> {
        Ok(self.table.get(&connection)?.0.last_insert_rowid())
    }

    async fn changes(&mut self, connection: Resource<SqliteConnection>) -> wasmtime::Result<u64> {
        Ok(self.table.get(&connection)?.0.changes())
    }
});

impl<T> sqlite::HostConnectionWithStore<T> for HasSqlite {
    async fn open_async(
        accessor: &Accessor<T, Self>,
        database: String,
    ) -> wasmtime::Result<Result<Resource<SqliteConnection>, sqlite::Error>> {
        let opened = open(luge_binding::opening_in(accessor), &database).await;
        luge_binding::keep_in(accessor, opened, error)
    }

    async fn execute_async(
        accessor: &Accessor<T, Self>,
        connection: Resource<SqliteConnection>,
        statement: String,
        parameters: Vec<sqlite::Value>,
    ) -> wasmtime::Result<QueryAnswer<String, sqlite::RowResult, sqlite::Error>> {
        let _span = accessor.with(|mut access| access.get().span(DATABASE, "sqlite", "execute"));
        let held = accessor.with(|mut access| held(&access.get(), &connection))?;
        let read = execute(held, statement, parameters).await;
        let read = read.map(|rows| (rows.columns, rows.rows.into_iter().map(row_out).collect()));
        luge_binding::query_answer(accessor, read)
    }

    async fn last_insert_rowid_async(
        accessor: &Accessor<T, Self>,
        connection: Resource<SqliteConnection>,
    ) -> wasmtime::Result<i64> {
        accessor.with(|mut access| Ok(access.get().table.get(&connection)?.0.last_insert_rowid()))
    }

    async fn changes_async(
        accessor: &Accessor<T, Self>,
        connection: Resource<SqliteConnection>,
    ) -> wasmtime::Result<u64> {
        accessor.with(|mut access| Ok(access.get().table.get(&connection)?.0.changes()))
    }
}

luge_binding::add_to_linker! {
    /// Adds `spin:sqlite@3.1.0` to `linker`.
    ConnectionsView as HasSqlite: sqlite
}
