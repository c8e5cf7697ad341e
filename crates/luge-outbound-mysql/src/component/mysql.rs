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
use wasmtime::component::{Accessor, FutureReader, Resource, StreamReader};

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
        let opening = accessor.with(|mut access| access.get().opening());
        let opened = opening.logged("mysql", crate::open(opening.caller(), &address).await);
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
        let (columns, rows) = set.map(column, value);
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

luge_binding::add_to_linker! {
    /// Adds `spin:mysql@3.0.0` to `linker`.
    ConnectionsView as HasMysql: wit
}
