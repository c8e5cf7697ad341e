//! `spin:postgres@4.2.0` outbound for components, bound to
//! `luge-outbound-pg`: this file only adapts the generated bindings (the
//! connection and builder resources in the store's table, values,
//! errors) to it. Where a connection may go is the function's
//! `postgres://` grants; every query ends by the invocation's deadline and
//! every result set is bounded by [`max_answer_bytes`]. The WIT is
//! `spin-sdk` 7.0.0's (Luge's WIT root wit/, deps/spin-postgres; Apache-2.0 WITH
//! LLVM-exception).

use std::sync::Arc;
use std::time::Instant;

use crate::{self as pg, PgError};
use luge_core::Action;
use wasmtime::component::{Accessor, FutureReader, Resource, StreamReader};

use luge_binding::max_answer_bytes;
use luge_binding::{ConnectionsView, Handle, rows_answer};

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
        P::Uuid(u) => pg::Param::Uuid(u),
        P::Jsonb(j) => pg::Param::Jsonb(j),
        P::Decimal(d) => pg::Param::Decimal(d),
        P::ArrayInt32(a) => pg::Param::ArrayInt32(a),
        P::ArrayInt64(a) => pg::Param::ArrayInt64(a),
        P::ArrayDecimal(a) => pg::Param::ArrayDecimal(a),
        P::ArrayStr(a) => pg::Param::ArrayStr(a),
        P::DbNull => pg::Param::Null,
        P::RangeInt32((lo, hi)) => pg::Param::RangeInt32(bound_in(lo), bound_in(hi)),
        P::RangeInt64((lo, hi)) => pg::Param::RangeInt64(bound_in(lo), bound_in(hi)),
        P::RangeDecimal((lo, hi)) => pg::Param::RangeDecimal(bound_in(lo), bound_in(hi)),
        P::Interval(i) => pg::Param::Interval(pg::Interval {
            micros: i.micros,
            days: i.days,
            months: i.months,
        }),
    }
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
        pg::Value::Uuid(u) => V::Uuid(u),
        pg::Value::Jsonb(j) => V::Jsonb(j),
        pg::Value::Decimal(d) => V::Decimal(d),
        pg::Value::ArrayInt32(a) => V::ArrayInt32(a),
        pg::Value::ArrayInt64(a) => V::ArrayInt64(a),
        pg::Value::ArrayDecimal(a) => V::ArrayDecimal(a),
        pg::Value::ArrayStr(a) => V::ArrayStr(a),
        pg::Value::RangeInt32(lo, hi) => V::RangeInt32((bound_out(lo), bound_out(hi))),
        pg::Value::RangeInt64(lo, hi) => V::RangeInt64((bound_out(lo), bound_out(hi))),
        pg::Value::RangeDecimal(lo, hi) => V::RangeDecimal((bound_out(lo), bound_out(hi))),
        pg::Value::Interval(i) => V::Interval(wit::Interval {
            micros: i.micros,
            days: i.days,
            months: i.months,
        }),
        pg::Value::Null => V::DbNull,
        pg::Value::Unsupported(raw) => V::Unsupported(raw),
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
            pg::DataType::Uuid => T::Uuid,
            pg::DataType::Jsonb => T::Jsonb,
            pg::DataType::Decimal => T::Decimal,
            pg::DataType::ArrayInt32 => T::ArrayInt32,
            pg::DataType::ArrayInt64 => T::ArrayInt64,
            pg::DataType::ArrayDecimal => T::ArrayDecimal,
            pg::DataType::ArrayStr => T::ArrayStr,
            pg::DataType::RangeInt32 => T::RangeInt32,
            pg::DataType::RangeInt64 => T::RangeInt64,
            pg::DataType::RangeDecimal => T::RangeDecimal,
            pg::DataType::Interval => T::Interval,
            pg::DataType::Other(name) => T::Other(name),
        },
    }
}

/// What opening a connection needs from the store, taken before awaiting.
pub type Opening = (Arc<Action>, Instant);

/// Opens a connection to `address` for the action (its grants, its
/// deadline, its answer bound), trusting `ca_root` alone when given.
pub async fn open(
    (action, deadline): Opening,
    address: &str,
    ca_root: Option<&str>,
) -> Result<pg::Connection, PgError> {
    let opened = pg::open(
        &action.name,
        &action.capabilities.outbound,
        address,
        ca_root.map(str::as_bytes),
        deadline,
        max_answer_bytes(&action),
    )
    .await;
    if let Err(e) = &opened {
        tracing::debug!(function = %action.name, error = %e, "outbound postgres refused");
    }
    opened
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
    Ok((
        set.columns.into_iter().map(column).collect(),
        set.rows
            .into_iter()
            .map(|row| row.into_iter().map(value).collect())
            .collect(),
    ))
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

/// Adds `spin:postgres@4.2.0` to `linker`.
pub fn add_to_linker<T: Send + 'static>(
    linker: &mut wasmtime::component::Linker<T>,
    view: fn(&mut T) -> ConnectionsView<'_>,
) -> wasmtime::Result<()> {
    wit::add_to_linker::<_, HasPostgres>(linker, view)
}
