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
use wasmtime::component::{Accessor, FutureReader, Resource, StreamReader};

use luge_binding::{ConnectionsView, Handle, Opening, rows_answer};

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

impl wit::Host for ConnectionsView<'_> {}

impl wit::HostConnection for ConnectionsView<'_> {
    async fn open(
        &mut self,
        address: String,
    ) -> wasmtime::Result<Result<Resource<PgConnection>, wit::Error>> {
        let opened = open(self.opening(), &address, None).await;
        self.keep(opened, error)
    }

    async fn query(
        &mut self,
        connection: Resource<PgConnection>,
        statement: String,
        params: Vec<wit::ParameterValue>,
    ) -> wasmtime::Result<Result<wit::RowSet, wit::Error>> {
        let _span = self.span(luge_core::trace::HostCall::Database, "postgresql", "query");
        let held = self.held(&connection)?;
        Ok(query(held, statement, params)
            .await
            .map(|(columns, rows)| wit::RowSet { columns, rows }))
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
        let held = self.held(&connection)?;
        Ok(execute(held, statement, params).await)
    }

    async fn drop(&mut self, connection: Resource<PgConnection>) -> wasmtime::Result<()> {
        self.close(connection)
    }
}

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

impl<T> wit::HostConnectionWithStore<T> for HasPostgres {
    async fn open_async(
        accessor: &Accessor<T, Self>,
        address: String,
    ) -> wasmtime::Result<Result<Resource<PgConnection>, wit::Error>> {
        let opening = accessor.with(|mut access| access.get().opening());
        let opened = open(opening, &address, None).await;
        accessor.with(|mut access| access.get().keep(opened, error))
    }

    async fn query_async(
        accessor: &Accessor<T, Self>,
        connection: Resource<PgConnection>,
        statement: String,
        params: Vec<wit::ParameterValue>,
    ) -> wasmtime::Result<
        Result<
            (
                Vec<wit::Column>,
                StreamReader<Vec<wit::DbValue>>,
                FutureReader<Result<(), wit::Error>>,
            ),
            wit::Error,
        >,
    > {
        let _span = accessor.with(|mut access| {
            access
                .get()
                .span(luge_core::trace::HostCall::Database, "postgresql", "query")
        });
        let held = accessor.with(|mut access| access.get().held(&connection))?;
        let (columns, rows) = match query(held, statement, params).await {
            Ok(answer) => answer,
            Err(e) => return Ok(Err(e)),
        };
        accessor.with(|mut access| {
            let (rows, ended) = rows_answer(&mut access, rows)?;
            Ok(Ok((columns, rows, ended)))
        })
    }

    async fn execute_async(
        accessor: &Accessor<T, Self>,
        connection: Resource<PgConnection>,
        statement: String,
        params: Vec<wit::ParameterValue>,
    ) -> wasmtime::Result<Result<u64, wit::Error>> {
        let _span = accessor.with(|mut access| {
            access.get().span(
                luge_core::trace::HostCall::Database,
                "postgresql",
                "execute",
            )
        });
        let held = accessor.with(|mut access| access.get().held(&connection))?;
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
        accessor.with(|mut access| access.get().keep(opened, error))
    }
}

luge_binding::add_to_linker! {
    /// Adds `spin:postgres@4.2.0` to `linker`.
    ConnectionsView as HasPostgres: wit
}
