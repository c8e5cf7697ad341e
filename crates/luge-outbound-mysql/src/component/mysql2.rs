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

use wasmtime::component::{ComponentType, Lift, Linker, Lower, Resource, ResourceType};

use super::mysql::{MysqlConnection, wit};
use luge_binding::ConnectionsView;

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
                let opening = view(store.data_mut()).opening();
                let opened = opening.logged("mysql", crate::open(opening.caller(), &address).await);
                Ok((view(store.data_mut()).keep(opened, super::mysql::error)?,))
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
                let params = params.into_iter().map(super::mysql::param).collect();
                let answer: Result<RowSet, wit::Error> = c
                    .query(&statement, params, deadline)
                    .await
                    .map(|set| {
                        let (columns, rows) = set.map(super::mysql::column, super::mysql::value);
                        RowSet { columns, rows }
                    })
                    .map_err(super::mysql::error);
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
                let params = params.into_iter().map(super::mysql::param).collect();
                let answer: Result<(), wit::Error> = c
                    .execute(&statement, params, deadline)
                    .await
                    .map_err(super::mysql::error);
                Ok((answer,))
            })
        },
    )?;
    Ok(())
}
