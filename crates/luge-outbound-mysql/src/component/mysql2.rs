//! `fermyon:spin/mysql@2.0.0` (spin-sdk 2 and 3's `mysql` module), bound
//! to this crate as `spin:mysql@3.0.0` is ([`super::mysql`]): the same
//! `mysql://` grants, deadline, bound on every result set, and connections
//! per function.
//!
//! Its values are Spin 2's `rdbms-types`, which `spin:mysql@3.0.0` kept
//! unchanged: rather than generate the same types a second time, the
//! interface is linked by hand with [`super::mysql`]'s, which Wasmtime
//! checks (structurally: records, variants and enums are not nominal)
//! against the component's own when it is instantiated; the one record
//! 3.0 no longer has, `row-set`, is [`RowSet`]. The WIT is `spin-sdk`
//! 3.1.1's (Luge's WIT root wit/, deps/fermyon-spin2; Apache-2.0 WITH
//! LLVM-exception).

use luge_core::trace::HostCall;
use wasmtime::component::{ComponentType, Lift, Linker, Lower, Resource};

use super::mysql::{MysqlConnection, wit};
use luge_binding::{ConnectionsView, linked};

/// Spin 2's `row-set`: the columns, then each row's values.
#[derive(ComponentType, Lift, Lower)]
#[component(record)]
struct RowSet {
    columns: Vec<wit::Column>,
    rows: Vec<Vec<wit::DbValue>>,
}

/// Adds `fermyon:spin/rdbms-types@2.0.0` (types only) and
/// `fermyon:spin/mysql@2.0.0`, its connection and its three functions, to
/// `linker`, over `view`.
pub fn add_to_linker<T: Send + 'static>(
    linker: &mut Linker<T>,
    view: fn(&mut T) -> ConnectionsView<'_>,
) -> wasmtime::Result<()> {
    // Types only: nothing to define but the instance.
    linker.instance("fermyon:spin/rdbms-types@2.0.0")?;
    let mut mysql = linker.instance("fermyon:spin/mysql@2.0.0")?;
    linked!(mysql, view, resource "connection": MysqlConnection);
    linked!(mysql, view, "[static]connection.open", (address: String) => open);
    linked!(mysql, view, "[method]connection.query",
        (connection: Resource<MysqlConnection>, statement: String, params: Vec<wit::ParameterValue>)
            => query);
    linked!(mysql, view, "[method]connection.execute",
        (connection: Resource<MysqlConnection>, statement: String, params: Vec<wit::ParameterValue>)
            => execute);
    Ok(())
}

async fn open(
    view: &mut ConnectionsView<'_>,
    address: String,
) -> wasmtime::Result<Result<Resource<MysqlConnection>, wit::Error>> {
    let opening = view.opening();
    let opened = opening.logged("mysql", crate::open(opening.caller(), &address).await);
    view.keep(opened, super::mysql::error)
}

async fn query(
    view: &mut ConnectionsView<'_>,
    connection: Resource<MysqlConnection>,
    statement: String,
    params: Vec<wit::ParameterValue>,
) -> wasmtime::Result<Result<RowSet, wit::Error>> {
    let (c, deadline, _span) = view.operation(&connection, HostCall::Database, "mysql", "query")?;
    let params = params.into_iter().map(super::mysql::param).collect();
    Ok(c.query(&statement, params, deadline)
        .await
        .map(|set| {
            let (columns, rows) = set.map(super::mysql::column, super::mysql::value);
            RowSet { columns, rows }
        })
        .map_err(super::mysql::error))
}

async fn execute(
    view: &mut ConnectionsView<'_>,
    connection: Resource<MysqlConnection>,
    statement: String,
    params: Vec<wit::ParameterValue>,
) -> wasmtime::Result<Result<(), wit::Error>> {
    let (c, deadline, _span) =
        view.operation(&connection, HostCall::Database, "mysql", "execute")?;
    let params = params.into_iter().map(super::mysql::param).collect();
    Ok(c.execute(&statement, params, deadline)
        .await
        .map_err(super::mysql::error))
}
