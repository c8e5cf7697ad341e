//! `fermyon:spin/postgres@2.0.0` (spin-sdk 2 and 3's `pg` module), bound
//! to this crate as Spin 4's versions are ([`super::postgres`]): the same
//! `postgres://` grants, deadline (a statement past it stopped on the
//! server), bound on every result set, and connections per function.
//! PostgreSQL has no unsigned integers: an unsigned parameter is
//! `bad-parameter`; a value of a type Spin 2 lacks (a date, a UUID,
//! JSON...) comes back `unsupported`, its column `other`. The WIT is
//! `spin-sdk` 3.1.1's (Luge's WIT root wit/, deps/fermyon-spin2;
//! Apache-2.0 WITH LLVM-exception).

use crate as pg;
use wasmtime::component::Resource;

use super::postgres::{HasPostgres, PgConnection};
use luge_binding::ConnectionsView;

luge_binding::bindings!("luge:worlds/host-spin2-postgres",
    // Queries wait on the network: every function is async.
    imports: { default: async | trappable },
    with: {
        "fermyon:spin/postgres@2.0.0.connection": crate::component::postgres::PgConnection,
    },
);

use generated::fermyon::spin2_0_0::postgres;
use generated::fermyon::spin2_0_0::rdbms_types as wit;

super::postgres3::text_error!(wit);

fn pg_param(value: wit::ParameterValue) -> Result<pg::Param, wit::Error> {
    use wit::ParameterValue as P;
    Ok(match value {
        P::Boolean(b) => pg::Param::Boolean(b),
        P::Int8(i) => pg::Param::Int8(i),
        P::Int16(i) => pg::Param::Int16(i),
        P::Int32(i) => pg::Param::Int32(i),
        P::Int64(i) => pg::Param::Int64(i),
        P::Floating32(f) => pg::Param::Floating32(f),
        P::Floating64(f) => pg::Param::Floating64(f),
        P::Str(s) => pg::Param::Str(s),
        P::Binary(b) => pg::Param::Binary(b),
        P::DbNull => pg::Param::Null,
        P::Uint8(_) | P::Uint16(_) | P::Uint32(_) | P::Uint64(_) => {
            return Err(wit::Error::BadParameter(
                "PostgreSQL has no unsigned integers".to_owned(),
            ));
        }
    })
}

fn pg_value(value: pg::Value) -> wit::DbValue {
    use wit::DbValue as V;
    match value {
        pg::Value::Boolean(b) => V::Boolean(b),
        pg::Value::Int8(i) => V::Int8(i),
        pg::Value::Int16(i) => V::Int16(i),
        pg::Value::Int32(i) => V::Int32(i),
        pg::Value::Int64(i) => V::Int64(i),
        pg::Value::Floating32(f) => V::Floating32(f),
        pg::Value::Floating64(f) => V::Floating64(f),
        pg::Value::Str(s) => V::Str(s),
        pg::Value::Binary(b) => V::Binary(b),
        pg::Value::Null => V::DbNull,
        _ => V::Unsupported,
    }
}

fn pg_column(column: pg::Column) -> wit::Column {
    use wit::DbDataType as T;
    wit::Column {
        name: column.name,
        data_type: match column.data_type {
            pg::DataType::Boolean => T::Boolean,
            pg::DataType::Int8 => T::Int8,
            pg::DataType::Int16 => T::Int16,
            pg::DataType::Int32 => T::Int32,
            pg::DataType::Int64 => T::Int64,
            pg::DataType::Floating32 => T::Floating32,
            pg::DataType::Floating64 => T::Floating64,
            pg::DataType::Str => T::Str,
            pg::DataType::Binary => T::Binary,
            _ => T::Other,
        },
    }
}

impl postgres::Host for ConnectionsView<'_> {}

impl postgres::HostConnection for ConnectionsView<'_> {
    async fn open(
        &mut self,
        address: String,
    ) -> wasmtime::Result<Result<Resource<PgConnection>, wit::Error>> {
        let opened = super::postgres::open(self.opening(), &address, None).await;
        self.keep(opened, error)
    }

    async fn query(
        &mut self,
        connection: Resource<PgConnection>,
        statement: String,
        params: Vec<wit::ParameterValue>,
    ) -> wasmtime::Result<Result<wit::RowSet, wit::Error>> {
        let _span = self.span(luge_core::trace::HostCall::Database, "postgresql", "query");
        let (c, deadline) = self.held(&connection)?;
        let params = match params.into_iter().map(pg_param).collect() {
            Ok(params) => params,
            Err(e) => return Ok(Err(e)),
        };
        Ok(c.query(&statement, params, deadline)
            .await
            .map(|set| wit::RowSet {
                columns: set.columns.into_iter().map(pg_column).collect(),
                rows: set
                    .rows
                    .into_iter()
                    .map(|row| row.into_iter().map(pg_value).collect())
                    .collect(),
            })
            .map_err(error))
    }

    async fn execute(
        &mut self,
        connection: Resource<PgConnection>,
        statement: String,
        params: Vec<wit::ParameterValue>,
    ) -> wasmtime::Result<Result<u64, wit::Error>> {
        let _span = self.span(
            luge_core::trace::HostCall::Database,
            "postgresql",
            "execute",
        );
        let (c, deadline) = self.held(&connection)?;
        let params = match params.into_iter().map(pg_param).collect() {
            Ok(params) => params,
            Err(e) => return Ok(Err(e)),
        };
        Ok(c.execute(&statement, params, deadline).await.map_err(error))
    }

    async fn drop(&mut self, connection: Resource<PgConnection>) -> wasmtime::Result<()> {
        self.close(connection)
    }
}

/// Adds `fermyon:spin/postgres@2.0.0` to `linker`, over `view`.
pub fn add_to_linker<T: Send + 'static>(
    linker: &mut wasmtime::component::Linker<T>,
    view: fn(&mut T) -> ConnectionsView<'_>,
) -> wasmtime::Result<()> {
    postgres::add_to_linker::<_, HasPostgres>(linker, view)
}
