//! `fermyon:spin/sqlite@2.0.0`, as spin-sdk 2 and 3 (and wit-bindgen
//! against Spin 2's WIT) import it, bound to the very code
//! `spin:sqlite@3.1.0` ([`super::sqlite`]) is: the same labels, deadline
//! and bound on rows. Synchronous for the guest; its host functions await
//! the blocking pool. The WIT is `spin-sdk` 3.1.1's (Luge's WIT root wit/,
//! deps/fermyon-spin2; Apache-2.0 WITH LLVM-exception).

use wasmtime::component::Resource;

use super::sqlite::{HasSqlite, SqliteConnection};
use luge_binding::{ConnectionsView, max_answer_bytes};

luge_binding::bindings!("luge:worlds/host-spin2-sqlite",
    imports: { default: async | trappable },
    with: {
        "fermyon:spin/sqlite@2.0.0.connection": crate::component::sqlite::SqliteConnection,
    },
);

use generated::fermyon::spin2_0_0::sqlite;

super::sqlite::conversions!(sqlite);

impl sqlite::Host for ConnectionsView<'_> {}

impl sqlite::HostConnection for ConnectionsView<'_> {
    async fn open(
        &mut self,
        database: String,
    ) -> wasmtime::Result<Result<Resource<SqliteConnection>, sqlite::Error>> {
        let opened = super::sqlite::open(self.opening(), &database).await;
        self.keep(opened, error)
    }

    async fn execute(
        &mut self,
        connection: Resource<SqliteConnection>,
        statement: String,
        parameters: Vec<sqlite::Value>,
    ) -> wasmtime::Result<Result<sqlite::QueryResult, sqlite::Error>> {
        let _span = self.span(luge_core::trace::HostCall::Database, "sqlite", "execute");
        let (connection, deadline) = self.held(&connection)?;
        let parameters = parameters.into_iter().map(value_in).collect();
        Ok(connection
            .execute(
                statement,
                parameters,
                deadline,
                max_answer_bytes(self.action),
            )
            .await
            .map(|rows| sqlite::QueryResult {
                columns: rows.columns,
                rows: rows.rows.into_iter().map(row_out).collect(),
            })
            .map_err(error))
    }

    async fn drop(&mut self, connection: Resource<SqliteConnection>) -> wasmtime::Result<()> {
        self.close(connection)
    }
}

luge_binding::add_to_linker! {
    /// Adds `fermyon:spin/sqlite@2.0.0` to `linker`.
    ConnectionsView as HasSqlite: sqlite
}
