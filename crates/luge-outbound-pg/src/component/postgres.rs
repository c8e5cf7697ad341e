//! `spin:postgres@4.2.0` outbound for components, bound to
//! `luge-outbound-pg`: this file only adapts the generated bindings (the
//! connection and builder resources in the store's table, values,
//! errors) to it. Where a connection may go is the function's
//! `postgres://` grants; every query ends by the invocation's deadline and
//! every result set is bounded by [`luge_binding::max_answer_bytes`]. The WIT is
//! `spin-sdk` 7.0.0's (Luge's WIT root wit/, deps/spin-postgres; Apache-2.0 WITH
//! LLVM-exception).

use std::sync::Arc;
use std::time::Instant;

use crate::{self as pg, PgError};
use luge_core::trace::{HostCall, HostSpan};
use wasmtime::component::{Accessor, Resource};

use luge_binding::{ConnectionsView, Handle, Opening, QueryAnswer};

luge_binding::bindings!("luge:worlds/host-postgres",
    // Queries wait on the network: every function is async.
    imports: { default: async | trappable },
    with: {
        "spin:postgres/postgres@4.2.0.connection": super::PgConnection,
        "spin:postgres/postgres@4.2.0.connection-builder": super::PgConnectionBuilder,
    },
);

/// The generated bindings of the interface this module serves.
pub use generated::spin::postgres4_2_0::postgres as wit;

/// An open connection, as the guest's `connection` resource holds it.
pub type PgConnection = Handle<pg::Connection>;

/// A connection not yet made: its address, and the CA root it trusts
/// alone when set (PEM).
pub struct PgConnectionBuilder(String, Option<String>);

/// The bindings' host state: the view every binding shares.
pub use luge_binding::HasConnections as HasPostgres;

/// A client error in the interface's words.
pub fn error(error: PgError) -> wit::Error {
    match error {
        PgError::Connect(_)
        | PgError::ConnectionFailed(_)
        | PgError::InvalidAddress
        | PgError::Tls(_)
        | PgError::TooManyConnections => wit::Error::ConnectionFailed(error.to_string()),
        PgError::BadParameter(text) => wit::Error::BadParameter(text),
        PgError::Db(db) => {
            let db = *db;
            wit::Error::QueryFailed(wit::QueryError::DbError(wit::DbError {
                as_text: db.as_text,
                severity: db.severity,
                code: db.code,
                message: db.message,
                detail: db.detail,
                extras: db.extras,
            }))
        }
        PgError::Query(text) => wit::Error::QueryFailed(wit::QueryError::Text(text)),
        PgError::ValueConversion(text) => wit::Error::ValueConversionFailed(text),
        other => wit::Error::Other(other.to_string()),
    }
}

fn param(value: wit::ParameterValue) -> pg::Param {
    use pg::Param;
    use wit::ParameterValue as P;
    luge_binding::same_variant!(value, P => Param: [
        Boolean(x), Int8(x), Int16(x), Int32(x), Int64(x), Floating32(x), Floating64(x), Str(x),
        Binary(x), Date(x), Time(x), Datetime(x), Timestamp(x), Uuid(x), Jsonb(x), Decimal(x),
        ArrayInt32(x), ArrayInt64(x), ArrayDecimal(x), ArrayStr(x)];
        P::DbNull => Param::Null,
        P::RangeInt32((lo, hi)) => Param::RangeInt32(bound_in(lo), bound_in(hi)),
        P::RangeInt64((lo, hi)) => Param::RangeInt64(bound_in(lo), bound_in(hi)),
        P::RangeDecimal((lo, hi)) => Param::RangeDecimal(bound_in(lo), bound_in(hi)),
        P::Interval(i) => Param::Interval(pg::Interval { micros: i.micros, days: i.days, months: i.months }))
}

fn bound_in<T>(bound: Option<(T, wit::RangeBoundKind)>) -> pg::Bound<T> {
    bound.map(|(v, kind)| {
        (
            v,
            match kind {
                wit::RangeBoundKind::Inclusive => pg::BoundKind::Inclusive,
                wit::RangeBoundKind::Exclusive => pg::BoundKind::Exclusive,
            },
        )
    })
}

fn bound_out<T>(bound: pg::Bound<T>) -> Option<(T, wit::RangeBoundKind)> {
    bound.map(|(v, kind)| {
        (
            v,
            match kind {
                pg::BoundKind::Inclusive => wit::RangeBoundKind::Inclusive,
                pg::BoundKind::Exclusive => wit::RangeBoundKind::Exclusive,
            },
        )
    })
}

fn value(value: pg::Value) -> wit::DbValue {
    use pg::Value;
    use wit::DbValue as V;
    luge_binding::same_variant!(value, Value => V: [
        Boolean(x), Int8(x), Int16(x), Int32(x), Int64(x), Floating32(x), Floating64(x), Str(x),
        Binary(x), Date(x), Time(x), Datetime(x), Timestamp(x), Uuid(x), Jsonb(x), Decimal(x),
        ArrayInt32(x), ArrayInt64(x), ArrayDecimal(x), ArrayStr(x), Unsupported(x)];
        Value::RangeInt32(lo, hi) => V::RangeInt32((bound_out(lo), bound_out(hi))),
        Value::RangeInt64(lo, hi) => V::RangeInt64((bound_out(lo), bound_out(hi))),
        Value::RangeDecimal(lo, hi) => V::RangeDecimal((bound_out(lo), bound_out(hi))),
        Value::Interval(i) => V::Interval(wit::Interval { micros: i.micros, days: i.days, months: i.months }),
        Value::Null => V::DbNull)
}

fn column(column: pg::Column) -> wit::Column {
    use pg::DataType;
    use wit::DbDataType as T;
    let data_type = luge_binding::same_variant!(column.data_type, DataType => T: [
        Boolean, Int8, Int16, Int32, Int64, Floating32, Floating64, Str, Binary, Date, Time,
        Datetime, Timestamp, Uuid, Jsonb, Decimal, ArrayInt32, ArrayInt64, ArrayDecimal, ArrayStr,
        RangeInt32, RangeInt64, RangeDecimal, Interval, Other(x)]);
    wit::Column {
        name: column.name,
        data_type,
    }
}

/// Opens a connection to `address` for the action (its grants, its
/// deadline, its answer bound), trusting `ca_root` alone when given.
pub async fn open(
    opening: Opening,
    address: &str,
    ca_root: Option<&str>,
) -> Result<pg::Connection, PgError> {
    let opened = pg::open(opening.caller(), address, ca_root.map(str::as_bytes)).await;
    opening.logged("postgres", opened)
}

/// Runs `statement` as a query by the deadline: its columns and rows.
pub async fn query(
    (connection, deadline): (Arc<pg::Connection>, Instant),
    statement: String,
    params: Vec<wit::ParameterValue>,
) -> Result<(Vec<wit::Column>, Vec<Vec<wit::DbValue>>), wit::Error> {
    let params = params.into_iter().map(param).collect();
    let set = connection
        .query(&statement, params, deadline)
        .await
        .map_err(error)?;
    Ok(set.map(column, value))
}

/// Runs `statement` by the deadline: the rows it changed.
pub async fn execute(
    (connection, deadline): (Arc<pg::Connection>, Instant),
    statement: String,
    params: Vec<wit::ParameterValue>,
) -> Result<u64, wit::Error> {
    let params = params.into_iter().map(param).collect();
    connection
        .execute(&statement, params, deadline)
        .await
        .map_err(error)
}

/// One version's synchronous `connection` (`open`, `query`, `execute`,
/// `drop`), written once for 4.2's, 3.0's and Spin 2's: `$iface` has the
/// resource, `$types` the values, `$handle` is the guest's resource and
/// `$wrap` makes its connection of a client's; `$param` turns a parameter
/// (or refuses it with the guest's error), `$column` and `$value` turn
/// what the client read.
macro_rules! sync_connection {
    ($iface:ident, $types:ident, $handle:ty, $wrap:expr,
     param: $param:expr, column: $column:expr, value: $value:expr) => {
        impl $iface::Host for ConnectionsView<'_> {}

        // `$param` may fail with the version's own error, as large as its
        // WIT makes it.
        #[allow(clippy::result_large_err)]
        impl $iface::HostConnection for ConnectionsView<'_> {
            async fn open(
                &mut self,
                address: String,
            ) -> wasmtime::Result<Result<Resource<$handle>, $types::Error>> {
                let opened = super::postgres::open(self.opening(), &address, None).await;
                self.keep(opened.map($wrap), error)
            }

            async fn query(
                &mut self,
                connection: Resource<$handle>,
                statement: String,
                params: Vec<$types::ParameterValue>,
            ) -> wasmtime::Result<Result<$types::RowSet, $types::Error>> {
                let (c, deadline, _span) =
                    self.operation(&connection, DATABASE, SYSTEM, "query")?;
                let params = match params.into_iter().map($param).collect() {
                    Ok(params) => params,
                    Err(e) => return Ok(Err(e)),
                };
                Ok(c.query(&statement, params, deadline)
                    .await
                    .map(|set| {
                        let (columns, rows) = set.map($column, $value);
                        $types::RowSet { columns, rows }
                    })
                    .map_err(error))
            }

            async fn execute(
                &mut self,
                connection: Resource<$handle>,
                statement: String,
                params: Vec<$types::ParameterValue>,
            ) -> wasmtime::Result<Result<u64, $types::Error>> {
                let (c, deadline, _span) =
                    self.operation(&connection, DATABASE, SYSTEM, "execute")?;
                let params = match params.into_iter().map($param).collect() {
                    Ok(params) => params,
                    Err(e) => return Ok(Err(e)),
                };
                Ok(c.execute(&statement, params, deadline).await.map_err(error))
            }

            async fn drop(&mut self, connection: Resource<$handle>) -> wasmtime::Result<()> {
                self.close(connection)
            }
        }
    };
}
pub(super) use sync_connection;

/// The family of every operation's span.
pub(super) const DATABASE: HostCall = HostCall::Database;

/// The system every span names (OpenTelemetry's `db.system.name`).
pub(super) const SYSTEM: &str = "postgresql";

sync_connection!(wit, wit, PgConnection, |c| c,
    param: |p| Ok(param(p)), column: column, value: value);

impl wit::HostConnectionBuilder for ConnectionsView<'_> {
    async fn new(&mut self, address: String) -> wasmtime::Result<Resource<PgConnectionBuilder>> {
        Ok(self.table.push(PgConnectionBuilder(address, None))?)
    }

    async fn set_ca_root(
        &mut self,
        builder: Resource<PgConnectionBuilder>,
        certificate: String,
    ) -> wasmtime::Result<Result<(), wit::Error>> {
        // Bounded as any value a guest hands the host (a CA bundle is a
        // few KiB).
        if certificate.len() > 1 << 20 {
            return Ok(Err(error(PgError::Tls(
                "a CA root of over 1 MiB".to_owned(),
            ))));
        }
        self.table.get_mut(&builder)?.1 = Some(certificate);
        Ok(Ok(()))
    }

    async fn build(
        &mut self,
        builder: Resource<PgConnectionBuilder>,
    ) -> wasmtime::Result<Result<Resource<PgConnection>, wit::Error>> {
        let PgConnectionBuilder(address, ca_root) = self.table.get(&builder)?;
        let (address, ca_root) = (address.clone(), ca_root.clone());
        let opened = open(self.opening(), &address, ca_root.as_deref()).await;
        self.keep(opened, error)
    }

    async fn drop(&mut self, builder: Resource<PgConnectionBuilder>) -> wasmtime::Result<()> {
        self.table.delete(builder)?;
        Ok(())
    }
}

/// A connection and the invocation's deadline, as an operation holds them.
type Held = (Arc<pg::Connection>, Instant);

/// The connection `connection` names and the deadline, in the span of
/// the operation `name`.
fn op<T>(
    accessor: &luge_binding::Access<T>,
    connection: &Resource<PgConnection>,
    name: &'static str,
) -> wasmtime::Result<(Held, Option<HostSpan>)> {
    let (c, deadline, span) =
        luge_binding::operation_in(accessor, connection, DATABASE, SYSTEM, name)?;
    Ok(((c, deadline), span))
}

impl<T> wit::HostConnectionWithStore<T> for HasPostgres {
    async fn open_async(
        accessor: &Accessor<T, Self>,
        address: String,
    ) -> wasmtime::Result<Result<Resource<PgConnection>, wit::Error>> {
        let opened = open(luge_binding::opening_in(accessor), &address, None).await;
        luge_binding::keep_in(accessor, opened, error)
    }

    async fn query_async(
        accessor: &Accessor<T, Self>,
        connection: Resource<PgConnection>,
        statement: String,
        params: Vec<wit::ParameterValue>,
    ) -> wasmtime::Result<QueryAnswer<wit::Column, Vec<wit::DbValue>, wit::Error>> {
        let (held, _span) = op(accessor, &connection, "query")?;
        let read = query(held, statement, params).await;
        luge_binding::query_answer(accessor, read)
    }

    async fn execute_async(
        accessor: &Accessor<T, Self>,
        connection: Resource<PgConnection>,
        statement: String,
        params: Vec<wit::ParameterValue>,
    ) -> wasmtime::Result<Result<u64, wit::Error>> {
        let (held, _span) = op(accessor, &connection, "execute")?;
        Ok(execute(held, statement, params).await)
    }
}

impl<T> wit::HostConnectionBuilderWithStore<T> for HasPostgres {
    async fn build_async(
        accessor: &Accessor<T, Self>,
        builder: Resource<PgConnectionBuilder>,
    ) -> wasmtime::Result<Result<Resource<PgConnection>, wit::Error>> {
        let (opening, address) = accessor.with(|mut access| {
            let view = access.get();
            let address = view.table.get(&builder)?.0.clone();
            Ok::<_, wasmtime::Error>((view.opening(), address))
        })?;
        let opened = open(opening, &address, None).await;
        luge_binding::keep_in(accessor, opened, error)
    }
}

luge_binding::add_to_linker! {
    /// Adds `spin:postgres@4.2.0` to `linker`.
    ConnectionsView as HasPostgres: wit
}
