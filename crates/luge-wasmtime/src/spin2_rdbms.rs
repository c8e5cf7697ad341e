//! Spin 2's `fermyon:spin/postgres@2.0.0` and `fermyon:spin/mysql@2.0.0`
//! (spin-sdk 2 and 3's `pg` and `mysql` modules), bound to
//! `luge-outbound-pg` and `luge-outbound-mysql` as Spin 4's versions are:
//! the same `postgres://` and `mysql://` grants, deadline (a statement past
//! it stopped on the server), bound on every result set, and connections
//! per function.
//!
//! Their values are Spin 2's `rdbms-types`, which `spin:mysql@3.0.0` kept
//! unchanged: rather than generate the same types a second time, the two
//! interfaces are linked by hand with [`luge_outbound_mysql::component::mysql`]'s, which Wasmtime
//! checks (structurally: records, variants and enums are not nominal)
//! against the component's own when it is instantiated; the one record
//! 3.0 no longer has, `row-set`, is [`RowSet`]. PostgreSQL has no unsigned
//! integers: an unsigned parameter is `bad-parameter`, and a value of a
//! type these interfaces lack (a date, a UUID, JSON...) comes back
//! `unsupported`, its column `other`. The WIT is `spin-sdk` 3.1.1's (Luge's
//! WIT root wit/, deps/fermyon-spin2; Apache-2.0 WITH LLVM-exception).

use luge_outbound_pg::{self as pg, PgError};
use wasmtime::component::{ComponentType, Lift, Linker, Lower, Resource, ResourceType};

use luge_binding::ConnectionsView;
use luge_binding::max_answer_bytes;
use luge_outbound_mysql::component::mysql::{MysqlConnection, wit};
use luge_outbound_pg::component::postgres::PgConnection;

/// Spin 2's `row-set`: the columns, then each row's values.
#[derive(ComponentType, Lift, Lower)]
#[component(record)]
struct RowSet {
    columns: Vec<wit::Column>,
    rows: Vec<Vec<wit::DbValue>>,
}

fn pg_error(error: PgError) -> wit::Error {
    match error {
        PgError::BadParameter(text) => wit::Error::BadParameter(text),
        PgError::Db(db) => wit::Error::QueryFailed(db.as_text),
        PgError::Query(text) => wit::Error::QueryFailed(text),
        PgError::ValueConversion(text) => wit::Error::ValueConversionFailed(text),
        PgError::Connect(_)
        | PgError::ConnectionFailed(_)
        | PgError::InvalidAddress
        | PgError::Tls(_)
        | PgError::TooManyConnections => wit::Error::ConnectionFailed(error.to_string()),
        other => wit::Error::Other(other.to_string()),
    }
}

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

/// The parameters, each as PostgreSQL takes it, or the first refused.
fn pg_params(params: Vec<wit::ParameterValue>) -> Result<Vec<pg::Param>, wit::Error> {
    params.into_iter().map(pg_param).collect()
}

/// Adds `fermyon:spin/rdbms-types@2.0.0`, `postgres@2.0.0` and
/// `mysql@2.0.0` to `linker`, over `view`.
pub(crate) fn add_to_linker<T: Send + 'static>(
    linker: &mut Linker<T>,
    view: fn(&mut T) -> ConnectionsView<'_>,
) -> wasmtime::Result<()> {
    // Types only: nothing to define but the instance.
    linker.instance("fermyon:spin/rdbms-types@2.0.0")?;
    add_postgres(linker, view)?;
    add_mysql(linker, view)
}

/// `fermyon:spin/postgres@2.0.0`: its connection and its three functions.
fn add_postgres<T: Send + 'static>(
    linker: &mut Linker<T>,
    view: fn(&mut T) -> ConnectionsView<'_>,
) -> wasmtime::Result<()> {
    let mut postgres = linker.instance("fermyon:spin/postgres@2.0.0")?;
    postgres.resource_async(
        "connection",
        ResourceType::host::<PgConnection>(),
        move |mut store, rep| {
            Box::new(
                async move { view(store.data_mut()).close(Resource::<PgConnection>::new_own(rep)) },
            )
        },
    )?;
    postgres.func_wrap_async(
        "[static]connection.open",
        move |mut store, (address,): (String,)| {
            Box::new(async move {
                let opening = view(store.data_mut()).opening();
                let opened =
                    luge_outbound_pg::component::postgres::open(opening, &address, None).await;
                Ok((view(store.data_mut()).keep(opened, pg_error)?,))
            })
        },
    )?;
    postgres.func_wrap_async(
        "[method]connection.query",
        move |mut store,
              (connection, statement, params): (
            Resource<PgConnection>,
            String,
            Vec<wit::ParameterValue>,
        )| {
            Box::new(async move {
                let ((c, deadline), _span) = {
                    let view = view(store.data_mut());
                    let span =
                        view.span(luge_core::trace::HostCall::Database, "postgresql", "query");
                    (view.held(&connection)?, span)
                };
                let params = match pg_params(params) {
                    Ok(params) => params,
                    Err(e) => return Ok((Err(e),)),
                };
                let answer: Result<RowSet, wit::Error> = c
                    .query(&statement, params, deadline)
                    .await
                    .map(|set| RowSet {
                        columns: set.columns.into_iter().map(pg_column).collect(),
                        rows: set
                            .rows
                            .into_iter()
                            .map(|row| row.into_iter().map(pg_value).collect())
                            .collect(),
                    })
                    .map_err(pg_error);
                Ok((answer,))
            })
        },
    )?;
    postgres.func_wrap_async(
        "[method]connection.execute",
        move |mut store,
              (connection, statement, params): (
            Resource<PgConnection>,
            String,
            Vec<wit::ParameterValue>,
        )| {
            Box::new(async move {
                let ((c, deadline), _span) = {
                    let view = view(store.data_mut());
                    let span = view.span(
                        luge_core::trace::HostCall::Database,
                        "postgresql",
                        "execute",
                    );
                    (view.held(&connection)?, span)
                };
                let params = match pg_params(params) {
                    Ok(params) => params,
                    Err(e) => return Ok((Err(e),)),
                };
                let answer: Result<u64, wit::Error> = c
                    .execute(&statement, params, deadline)
                    .await
                    .map_err(pg_error);
                Ok((answer,))
            })
        },
    )?;
    Ok(())
}

/// `fermyon:spin/mysql@2.0.0`: its connection and its three functions.
fn add_mysql<T: Send + 'static>(
    linker: &mut Linker<T>,
    view: fn(&mut T) -> ConnectionsView<'_>,
) -> wasmtime::Result<()> {
    let mut mysql = linker.instance("fermyon:spin/mysql@2.0.0")?;
    mysql.resource_async(
        "connection",
        ResourceType::host::<MysqlConnection>(),
        move |mut store, rep| {
            Box::new(async move {
                view(store.data_mut()).close(Resource::<MysqlConnection>::new_own(rep))
            })
        },
    )?;
    mysql.func_wrap_async(
        "[static]connection.open",
        move |mut store, (address,): (String,)| {
            Box::new(async move {
                let (action, deadline) = view(store.data_mut()).opening();
                let opened = luge_outbound_mysql::open(
                    &action.name,
                    &action.capabilities.outbound,
                    &address,
                    deadline,
                    max_answer_bytes(&action),
                )
                .await;
                if let Err(e) = &opened {
                    tracing::debug!(function = %action.name, error = %e, "outbound mysql refused");
                }
                Ok((view(store.data_mut())
                    .keep(opened, luge_outbound_mysql::component::mysql::error)?,))
            })
        },
    )?;
    mysql.func_wrap_async(
        "[method]connection.query",
        move |mut store,
              (connection, statement, params): (
            Resource<MysqlConnection>,
            String,
            Vec<wit::ParameterValue>,
        )| {
            Box::new(async move {
                let ((c, deadline), _span) = {
                    let view = view(store.data_mut());
                    let span = view.span(luge_core::trace::HostCall::Database, "mysql", "query");
                    (view.held(&connection)?, span)
                };
                let params = params
                    .into_iter()
                    .map(luge_outbound_mysql::component::mysql::param)
                    .collect();
                let answer: Result<RowSet, wit::Error> = c
                    .query(&statement, params, deadline)
                    .await
                    .map(|set| RowSet {
                        columns: set
                            .columns
                            .into_iter()
                            .map(luge_outbound_mysql::component::mysql::column)
                            .collect(),
                        rows: set
                            .rows
                            .into_iter()
                            .map(|row| {
                                row.into_iter()
                                    .map(luge_outbound_mysql::component::mysql::value)
                                    .collect()
                            })
                            .collect(),
                    })
                    .map_err(luge_outbound_mysql::component::mysql::error);
                Ok((answer,))
            })
        },
    )?;
    mysql.func_wrap_async(
        "[method]connection.execute",
        move |mut store,
              (connection, statement, params): (
            Resource<MysqlConnection>,
            String,
            Vec<wit::ParameterValue>,
        )| {
            Box::new(async move {
                let ((c, deadline), _span) = {
                    let view = view(store.data_mut());
                    let span = view.span(luge_core::trace::HostCall::Database, "mysql", "execute");
                    (view.held(&connection)?, span)
                };
                let params = params
                    .into_iter()
                    .map(luge_outbound_mysql::component::mysql::param)
                    .collect();
                let answer: Result<(), wit::Error> = c
                    .execute(&statement, params, deadline)
                    .await
                    .map_err(luge_outbound_mysql::component::mysql::error);
                Ok((answer,))
            })
        },
    )?;
    Ok(())
}
