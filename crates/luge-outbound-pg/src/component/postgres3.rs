//! `spin:postgres@3.0.0` outbound for components of older SDKs (spin-sdk
//! 3 and 4), bound to `luge-outbound-pg` as [`crate::postgres`] binds
//! 4.2: the same grants, deadline and bound on every result set. This
//! version's types are a subset of 4.2's: a value of a type it lacks
//! (UUID, JSON, NUMERIC, arrays) comes back as `unsupported`, its column
//! as `other`. The WIT is `spin-sdk` 3.1.1's (Luge's WIT root wit/,
//! deps/spin-postgres3; Apache-2.0 WITH LLVM-exception).

use crate as pg;
use wasmtime::component::Resource;

use luge_binding::max_answer_bytes;
use luge_binding::{ConnectionsView, Handle};

luge_binding::bindings!("luge:worlds/host-postgres3",
    // Queries wait on the network: every function is async.
    imports: { default: async | trappable },
    with: {
        "spin:postgres/postgres@3.0.0.connection": super::Pg3Connection,
    },
);

use generated::spin::postgres3_0_0::postgres as wit;

/// The bindings' host state: the view every binding shares.
pub use luge_binding::HasConnections as HasPostgres3;

/// A connection of this version's guests (a type of its own, so that a
/// 3.0 handle is never taken for a 4.2 one).
pub struct Pg3(pg::Connection);

/// An open connection, as the guest's `connection` resource holds it.
pub type Pg3Connection = Handle<Pg3>;

/// The error of one version's generated `$wit` types whose query error is
/// text (spin:postgres@3.0.0's and Spin 2's), written once for both.
macro_rules! text_error {
    ($wit:ident) => {
        fn error(error: crate::PgError) -> $wit::Error {
            use crate::PgError as E;
            match error {
                E::BadParameter(text) => $wit::Error::BadParameter(text),
                E::Db(db) => $wit::Error::QueryFailed(db.as_text),
                E::Query(text) => $wit::Error::QueryFailed(text),
                E::ValueConversion(text) => $wit::Error::ValueConversionFailed(text),
                E::Connect(_)
                | E::ConnectionFailed(_)
                | E::InvalidAddress
                | E::Tls(_)
                | E::TooManyConnections => $wit::Error::ConnectionFailed(error.to_string()),
                other => $wit::Error::Other(other.to_string()),
            }
        }
    };
}
pub(super) use text_error;

text_error!(wit);

fn param(value: wit::ParameterValue) -> pg::Param {
    use wit::ParameterValue as P;
    match value {
        P::Boolean(b) => pg::Param::Boolean(b),
        P::Int8(i) => pg::Param::Int8(i),
        P::Int16(i) => pg::Param::Int16(i),
        P::Int32(i) => pg::Param::Int32(i),
        P::Int64(i) => pg::Param::Int64(i),
        P::Floating32(f) => pg::Param::Floating32(f),
        P::Floating64(f) => pg::Param::Floating64(f),
        P::Str(s) => pg::Param::Str(s),
        P::Binary(b) => pg::Param::Binary(b),
        P::Date(d) => pg::Param::Date(d),
        P::Time(t) => pg::Param::Time(t),
        P::Datetime(dt) => pg::Param::Datetime(dt),
        P::Timestamp(t) => pg::Param::Timestamp(t),
        P::DbNull => pg::Param::Null,
    }
}

fn value(value: pg::Value) -> wit::DbValue {
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
        pg::Value::Date(d) => V::Date(d),
        pg::Value::Time(t) => V::Time(t),
        pg::Value::Datetime(dt) => V::Datetime(dt),
        pg::Value::Timestamp(t) => V::Timestamp(t),
        pg::Value::Null => V::DbNull,
        _ => V::Unsupported,
    }
}

fn column(column: pg::Column) -> wit::Column {
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
            pg::DataType::Date => T::Date,
            pg::DataType::Time => T::Time,
            pg::DataType::Datetime => T::Datetime,
            pg::DataType::Timestamp => T::Timestamp,
            _ => T::Other,
        },
    }
}

impl wit::Host for ConnectionsView<'_> {}

impl wit::HostConnection for ConnectionsView<'_> {
    async fn open(
        &mut self,
        address: String,
    ) -> wasmtime::Result<Result<Resource<Pg3Connection>, wit::Error>> {
        let (action, deadline) = self.opening();
        let opened = pg::open(
            &action.name,
            &action.capabilities.outbound,
            &address,
            None,
            deadline,
            max_answer_bytes(&action),
        )
        .await;
        if let Err(e) = &opened {
            tracing::debug!(function = %action.name, error = %e, "outbound postgres refused");
        }
        self.keep(opened.map(Pg3), error)
    }

    async fn query(
        &mut self,
        connection: Resource<Pg3Connection>,
        statement: String,
        params: Vec<wit::ParameterValue>,
    ) -> wasmtime::Result<Result<wit::RowSet, wit::Error>> {
        let _span = self.span(luge_core::trace::HostCall::Database, "postgresql", "query");
        let (c, deadline) = self.held(&connection)?;
        let params = params.into_iter().map(param).collect();
        Ok(c.0
            .query(&statement, params, deadline)
            .await
            .map(|set| wit::RowSet {
                columns: set.columns.into_iter().map(column).collect(),
                rows: set
                    .rows
                    .into_iter()
                    .map(|row| row.into_iter().map(value).collect())
                    .collect(),
            })
            .map_err(error))
    }

    async fn execute(
        &mut self,
        connection: Resource<Pg3Connection>,
        statement: String,
        params: Vec<wit::ParameterValue>,
    ) -> wasmtime::Result<Result<u64, wit::Error>> {
        let _span = self.span(
            luge_core::trace::HostCall::Database,
            "postgresql",
            "execute",
        );
        let (c, deadline) = self.held(&connection)?;
        let params = params.into_iter().map(param).collect();
        Ok(c.0
            .execute(&statement, params, deadline)
            .await
            .map_err(error))
    }

    async fn drop(&mut self, connection: Resource<Pg3Connection>) -> wasmtime::Result<()> {
        self.close(connection)
    }
}

/// Adds `spin:postgres@3.0.0` to `linker`, over `view`.
pub fn add_to_linker<T: Send + 'static>(
    linker: &mut wasmtime::component::Linker<T>,
    view: fn(&mut T) -> ConnectionsView<'_>,
) -> wasmtime::Result<()> {
    wit::add_to_linker::<_, HasPostgres3>(linker, view)
}
