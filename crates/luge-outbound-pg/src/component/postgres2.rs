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

use super::postgres::{DATABASE, HasPostgres, PgConnection, SYSTEM};
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
    use pg::Param;
    use wit::ParameterValue as P;
    Ok(luge_binding::same_variant!(value, P => Param: [
    Boolean(x), Int8(x), Int16(x), Int32(x), Int64(x), Floating32(x), Floating64(x), Str(x),
    Binary(x)];
    P::DbNull => Param::Null,
    P::Uint8(_) | P::Uint16(_) | P::Uint32(_) | P::Uint64(_) => {
        return Err(wit::Error::BadParameter("PostgreSQL has no unsigned integers".to_owned()));
    }))
}

fn pg_value(value: pg::Value) -> wit::DbValue {
    use pg::Value;
    use wit::DbValue as V;
    luge_binding::same_variant!(value, Value => V: [
        Boolean(x), Int8(x), Int16(x), Int32(x), Int64(x), Floating32(x), Floating64(x), Str(x),
        Binary(x)];
        Value::Null => V::DbNull, _ => V::Unsupported)
}

fn pg_column(column: pg::Column) -> wit::Column {
    use pg::DataType;
    use wit::DbDataType as T;
    let data_type = luge_binding::same_variant!(column.data_type, DataType => T: [
        Boolean, Int8, Int16, Int32, Int64, Floating32, Floating64, Str, Binary]; _ => T::Other);
    wit::Column {
        name: column.name,
        data_type,
    }
}

super::postgres::sync_connection!(postgres, wit, PgConnection, |c| c,
    param: pg_param, column: pg_column, value: pg_value);

luge_binding::add_to_linker! {
    /// Adds `fermyon:spin/postgres@2.0.0` to `linker`, over `view`.
    ConnectionsView as HasPostgres: postgres
}
