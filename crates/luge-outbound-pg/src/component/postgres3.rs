//! `spin:postgres@3.0.0` outbound for components of older SDKs (spin-sdk
//! 3 and 4), bound to `luge-outbound-pg` as [`crate::postgres`] binds
//! 4.2: the same grants, deadline and bound on every result set. This
//! version's types are a subset of 4.2's: a value of a type it lacks
//! (UUID, JSON, NUMERIC, arrays) comes back as `unsupported`, its column
//! as `other`. The WIT is `spin-sdk` 3.1.1's (Luge's WIT root wit/,
//! deps/spin-postgres3; Apache-2.0 WITH LLVM-exception).

use crate as pg;
use wasmtime::component::Resource;

use super::postgres::{DATABASE, SYSTEM};
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

impl std::ops::Deref for Pg3 {
    type Target = pg::Connection;

    fn deref(&self) -> &pg::Connection {
        &self.0
    }
}

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
    use pg::Param;
    use wit::ParameterValue as P;
    luge_binding::same_variant!(value, P => Param: [
        Boolean(x), Int8(x), Int16(x), Int32(x), Int64(x), Floating32(x), Floating64(x), Str(x),
        Binary(x), Date(x), Time(x), Datetime(x), Timestamp(x)]; P::DbNull => Param::Null)
}

fn value(value: pg::Value) -> wit::DbValue {
    use pg::Value;
    use wit::DbValue as V;
    luge_binding::same_variant!(value, Value => V: [
        Boolean(x), Int8(x), Int16(x), Int32(x), Int64(x), Floating32(x), Floating64(x), Str(x),
        Binary(x), Date(x), Time(x), Datetime(x), Timestamp(x)];
        Value::Null => V::DbNull, _ => V::Unsupported)
}

fn column(column: pg::Column) -> wit::Column {
    use pg::DataType;
    use wit::DbDataType as T;
    let data_type = luge_binding::same_variant!(column.data_type, DataType => T: [
        Boolean, Int8, Int16, Int32, Int64, Floating32, Floating64, Str, Binary, Date, Time,
        Datetime, Timestamp]; _ => T::Other);
    wit::Column {
        name: column.name,
        data_type,
    }
}

super::postgres::sync_connection!(wit, wit, Pg3Connection, Pg3,
    param: |p| Ok(param(p)), column: column, value: value);

luge_binding::add_to_linker! {
    /// Adds `spin:postgres@3.0.0` to `linker`, over `view`.
    ConnectionsView as HasPostgres3: wit
}
