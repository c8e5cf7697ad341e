//! `spin:mysql@3.0.0` outbound for components, bound to
//! `luge-outbound-mysql`: this file only adapts the generated bindings
//! (the connection resource in the store's table, values, errors) to it.
//! Where a connection may go is the function's `mysql://` grants; every
//! statement ends by the invocation's deadline and every result set is
//! bounded by [`luge_binding::max_answer_bytes`]. The WIT is `spin-sdk` 7.0.0's
//! (Luge's WIT root wit/, deps/spin-mysql; Apache-2.0 WITH LLVM-exception).

use std::sync::Arc;
use std::time::Instant;

use crate::{self as mysql, MysqlError};
use luge_core::trace::{HostCall, HostSpan};
use wasmtime::component::{Accessor, Resource};

use luge_binding::{Access, ConnectionsView, Handle, QueryAnswer};

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
    use mysql::Param;
    use wit::ParameterValue as P;
    luge_binding::same_variant!(value, P => Param: [Boolean(x), Floating32(x), Floating64(x), Str(x), Binary(x)];
        P::Int8(i) => Param::Int(i.into()),
        P::Int16(i) => Param::Int(i.into()),
        P::Int32(i) => Param::Int(i.into()),
        P::Int64(i) => Param::Int(i),
        P::Uint8(u) => Param::UInt(u.into()),
        P::Uint16(u) => Param::UInt(u.into()),
        P::Uint32(u) => Param::UInt(u.into()),
        P::Uint64(u) => Param::UInt(u),
        P::DbNull => Param::Null)
}

/// A value the client read, in the interface's words.
pub fn value(value: mysql::Value) -> wit::DbValue {
    use mysql::Value;
    use wit::DbValue as V;
    luge_binding::same_variant!(value, Value => V: [
        Int8(x), Int16(x), Int32(x), Int64(x), Uint8(x), Uint16(x), Uint32(x), Uint64(x),
        Floating32(x), Floating64(x), Str(x), Binary(x), Unsupported];
        Value::Null => V::DbNull)
}

/// A column the client read, in the interface's words.
pub fn column(column: mysql::Column) -> wit::Column {
    use mysql::DataType;
    use wit::DbDataType as T;
    let data_type = luge_binding::same_variant!(column.data_type, DataType => T: [
        Int8, Int16, Int32, Int64, Uint8, Uint16, Uint32, Uint64, Floating32, Floating64, Str,
        Binary, Other]);
    wit::Column {
        name: column.name,
        data_type,
    }
}

/// What a `mysql` operation starts with: the connection, the deadline
/// and the span of `name`.
fn op<T>(
    accessor: &Access<T>,
    connection: &Resource<MysqlConnection>,
    name: &'static str,
) -> wasmtime::Result<(Arc<mysql::Connection>, Instant, Option<HostSpan>)> {
    luge_binding::operation_in(accessor, connection, HostCall::Database, "mysql", name)
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
        let opening = luge_binding::opening_in(accessor);
        let opened = opening.logged("mysql", crate::open(opening.caller(), &address).await);
        luge_binding::keep_in(accessor, opened, error)
    }

    async fn query(
        accessor: &Accessor<T, Self>,
        connection: Resource<MysqlConnection>,
        statement: String,
        params: Vec<wit::ParameterValue>,
    ) -> wasmtime::Result<QueryAnswer<wit::Column, Vec<wit::DbValue>, wit::Error>> {
        let (c, deadline, _span) = op(accessor, &connection, "query")?;
        let params = params.into_iter().map(param).collect();
        let read = c.query(&statement, params, deadline).await;
        let read = read.map(|set| set.map(column, value)).map_err(error);
        luge_binding::query_answer(accessor, read)
    }

    async fn execute(
        accessor: &Accessor<T, Self>,
        connection: Resource<MysqlConnection>,
        statement: String,
        params: Vec<wit::ParameterValue>,
    ) -> wasmtime::Result<Result<(), wit::Error>> {
        let (c, deadline, _span) = op(accessor, &connection, "execute")?;
        let params = params.into_iter().map(param).collect();
        Ok(c.execute(&statement, params, deadline).await.map_err(error))
    }
}

luge_binding::add_to_linker! {
    /// Adds `spin:mysql@3.0.0` to `linker`.
    ConnectionsView as HasMysql: wit
}
