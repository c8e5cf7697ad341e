//! `spin:mysql@3.0.0` outbound for components, bound to
//! `luge-outbound-mysql`: this file only adapts the generated bindings
//! (the connection resource in the store's table, values, errors) to it.
//! Where a connection may go is the function's `mysql://` grants; every
//! statement ends by the invocation's deadline and every result set is
//! bounded by [`max_answer_bytes`]. The WIT is `spin-sdk` 7.0.0's
//! (Luge's WIT root wit/, deps/spin-mysql; Apache-2.0 WITH LLVM-exception).

use std::sync::Arc;
use std::time::Instant;

use crate::{self as mysql, MysqlError};
use wasmtime::component::{Accessor, FutureReader, Resource, StreamReader};

use luge_binding::max_answer_bytes;
use luge_binding::{ConnectionsView, Handle, rows_answer};

luge_binding::bindings!("luge:worlds/host-mysql",
    imports: { default: trappable },
    with: {
        "spin:mysql/mysql.connection": super::MysqlConnection,
    },
);

/// The generated bindings of the interface this module serves.
pub use generated::spin::mysql::mysql as wit;

/// An open connection, as the guest's `connection` resource holds it.
pub type MysqlConnection = Handle<mysql::Connection>;

/// The bindings' host state: the view every binding shares.
pub use luge_binding::HasConnections as HasMysql;

/// A client error in the interface's words.
pub fn error(error: MysqlError) -> wit::Error {
    match error {
        MysqlError::Connect(_)
        | MysqlError::ConnectionFailed(_)
        | MysqlError::InvalidAddress
        | MysqlError::InsecureTls
        | MysqlError::TooManyConnections => wit::Error::ConnectionFailed(error.to_string()),
        MysqlError::Query(text) => wit::Error::QueryFailed(text),
        other => wit::Error::Other(other.to_string()),
    }
}

/// A guest's parameter as the client takes it.
pub fn param(value: wit::ParameterValue) -> mysql::Param {
    use wit::ParameterValue as P;
    match value {
        P::Boolean(b) => mysql::Param::Boolean(b),
        P::Int8(i) => mysql::Param::Int(i.into()),
        P::Int16(i) => mysql::Param::Int(i.into()),
        P::Int32(i) => mysql::Param::Int(i.into()),
        P::Int64(i) => mysql::Param::Int(i),
        P::Uint8(u) => mysql::Param::UInt(u.into()),
        P::Uint16(u) => mysql::Param::UInt(u.into()),
        P::Uint32(u) => mysql::Param::UInt(u.into()),
        P::Uint64(u) => mysql::Param::UInt(u),
        P::Floating32(f) => mysql::Param::Floating32(f),
        P::Floating64(f) => mysql::Param::Floating64(f),
        P::Str(s) => mysql::Param::Str(s),
        P::Binary(b) => mysql::Param::Binary(b),
        P::DbNull => mysql::Param::Null,
    }
}

/// A value the client read, in the interface's words.
pub fn value(value: mysql::Value) -> wit::DbValue {
    use wit::DbValue as V;
    match value {
        mysql::Value::Int8(i) => V::Int8(i),
        mysql::Value::Int16(i) => V::Int16(i),
        mysql::Value::Int32(i) => V::Int32(i),
        mysql::Value::Int64(i) => V::Int64(i),
        mysql::Value::Uint8(u) => V::Uint8(u),
        mysql::Value::Uint16(u) => V::Uint16(u),
        mysql::Value::Uint32(u) => V::Uint32(u),
        mysql::Value::Uint64(u) => V::Uint64(u),
        mysql::Value::Floating32(f) => V::Floating32(f),
        mysql::Value::Floating64(f) => V::Floating64(f),
        mysql::Value::Str(s) => V::Str(s),
        mysql::Value::Binary(b) => V::Binary(b),
        mysql::Value::Null => V::DbNull,
        mysql::Value::Unsupported => V::Unsupported,
    }
}

/// A column the client read, in the interface's words.
pub fn column(column: mysql::Column) -> wit::Column {
    use wit::DbDataType as T;
    wit::Column {
        name: column.name,
        data_type: match column.data_type {
            mysql::DataType::Int8 => T::Int8,
            mysql::DataType::Int16 => T::Int16,
            mysql::DataType::Int32 => T::Int32,
            mysql::DataType::Int64 => T::Int64,
            mysql::DataType::Uint8 => T::Uint8,
            mysql::DataType::Uint16 => T::Uint16,
            mysql::DataType::Uint32 => T::Uint32,
            mysql::DataType::Uint64 => T::Uint64,
            mysql::DataType::Floating32 => T::Floating32,
            mysql::DataType::Floating64 => T::Floating64,
            mysql::DataType::Str => T::Str,
            mysql::DataType::Binary => T::Binary,
            mysql::DataType::Other => T::Other,
        },
    }
}

/// The connection `connection` names and the invocation's deadline.
fn held<T>(
    accessor: &Accessor<T, HasMysql>,
    connection: &Resource<MysqlConnection>,
) -> wasmtime::Result<(Arc<mysql::Connection>, Instant)> {
    accessor.with(|mut access| access.get().held(connection))
}

impl wit::Host for ConnectionsView<'_> {}

impl wit::HostConnection for ConnectionsView<'_> {
    fn drop(&mut self, connection: Resource<MysqlConnection>) -> wasmtime::Result<()> {
        self.close(connection)
    }
}

impl<T> wit::HostConnectionWithStore<T> for HasMysql {
    async fn open(
        accessor: &Accessor<T, Self>,
        address: String,
    ) -> wasmtime::Result<Result<Resource<MysqlConnection>, wit::Error>> {
        let (action, deadline) = accessor.with(|mut access| access.get().opening());
        let opened = mysql::open(
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
        accessor.with(|mut access| access.get().keep(opened, error))
    }

    async fn query(
        accessor: &Accessor<T, Self>,
        connection: Resource<MysqlConnection>,
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
                .span(luge_core::trace::HostCall::Database, "mysql", "query")
        });
        let (c, deadline) = held(accessor, &connection)?;
        let params = params.into_iter().map(param).collect();
        let set = match c.query(&statement, params, deadline).await {
            Ok(set) => set,
            Err(e) => return Ok(Err(error(e))),
        };
        let columns = set.columns.into_iter().map(column).collect();
        let rows: Vec<Vec<wit::DbValue>> = set
            .rows
            .into_iter()
            .map(|row| row.into_iter().map(value).collect())
            .collect();
        accessor.with(|mut access| {
            let (rows, ended) = rows_answer(&mut access, rows)?;
            Ok(Ok((columns, rows, ended)))
        })
    }

    async fn execute(
        accessor: &Accessor<T, Self>,
        connection: Resource<MysqlConnection>,
        statement: String,
        params: Vec<wit::ParameterValue>,
    ) -> wasmtime::Result<Result<(), wit::Error>> {
        let _span = accessor.with(|mut access| {
            access
                .get()
                .span(luge_core::trace::HostCall::Database, "mysql", "execute")
        });
        let (c, deadline) = held(accessor, &connection)?;
        let params = params.into_iter().map(param).collect();
        Ok(c.execute(&statement, params, deadline).await.map_err(error))
    }
}

/// Adds `spin:mysql@3.0.0` to `linker`.
pub fn add_to_linker<T: Send + 'static>(
    linker: &mut wasmtime::component::Linker<T>,
    view: fn(&mut T) -> ConnectionsView<'_>,
) -> wasmtime::Result<()> {
    wit::add_to_linker::<_, HasMysql>(linker, view)
}
