//! `spin:postgres@4.0.0` and `4.1.0` for components that do not use the
//! async ABI (spin-sdk 5, and wit-bindgen against Spin 3's WIT, as Spin's
//! conformance suite builds its `postgres` component), bound to the very
//! code [`crate::postgres`] binds 4.2 with: the same grants, deadline and
//! bound on every result set. Components that use the async ABI get every
//! 4.x from the 4.2 binding, on the concurrent engine.
//!
//! 4.1 is 4.2 without its `async` functions, and 4.0 is 4.1 without its
//! connection builder, every type the same: rather than generate two more
//! sets of types and convert between them, their functions and resources
//! are linked by hand with 4.2's types, which Wasmtime checks against the
//! component's types (structurally) when it is instantiated (the test
//! `each_version_links` holds that true). The WIT, kept for that check's
//! reference and for guests, is `spin-sdk` 5.1.0's for 4.0 (Luge's WIT
//! root wit/, deps/spin-postgres40) and Spin's for 4.1 (deps/
//! spin-postgres41, from spinframework/spin at 94a8fc8, as no spin-sdk
//! ships it); both Apache-2.0 WITH LLVM-exception.

use wasmtime::component::{Linker, Resource, ResourceType};

use super::postgres::{PgConnection, PgConnectionBuilder, error, execute, open, query, wit};
use luge_binding::ConnectionsView;

/// The interfaces' names, as 4.0 and 4.1 guests import them.
const INTERFACES: [&str; 2] = [
    "spin:postgres/postgres@4.0.0",
    "spin:postgres/postgres@4.1.0",
];

/// Adds `spin:postgres@4.0.0` and `4.1.0` to `linker`.
pub fn add_to_linker<T: Send + 'static>(
    linker: &mut Linker<T>,
    view: fn(&mut T) -> ConnectionsView<'_>,
) -> wasmtime::Result<()> {
    for interface in INTERFACES {
        add_version(linker, view, interface)?;
    }
    Ok(())
}

/// Adds `interface`, 4.0 or 4.1 (the builder: an extra export, which a 4.0
/// component's import does not name and Wasmtime lets be).
fn add_version<T: Send + 'static>(
    linker: &mut Linker<T>,
    view: fn(&mut T) -> ConnectionsView<'_>,
    interface: &str,
) -> wasmtime::Result<()> {
    let mut instance = linker.instance(interface)?;
    instance.resource_async(
        "connection-builder",
        ResourceType::host::<PgConnectionBuilder>(),
        move |mut store, rep| {
            Box::new(async move {
                let mut view = view(store.data_mut());
                wit::HostConnectionBuilder::drop(&mut view, Resource::new_own(rep)).await
            })
        },
    )?;
    instance.func_wrap_async(
        "[constructor]connection-builder",
        move |mut store, (address,): (String,)| {
            Box::new(async move {
                let mut view = view(store.data_mut());
                Ok((wit::HostConnectionBuilder::new(&mut view, address).await?,))
            })
        },
    )?;
    instance.func_wrap_async(
        "[method]connection-builder.set-ca-root",
        move |mut store, (builder, certificate): (Resource<PgConnectionBuilder>, String)| {
            Box::new(async move {
                let mut view = view(store.data_mut());
                Ok((
                    wit::HostConnectionBuilder::set_ca_root(&mut view, builder, certificate)
                        .await?,
                ))
            })
        },
    )?;
    instance.func_wrap_async(
        "[method]connection-builder.build",
        move |mut store, (builder,): (Resource<PgConnectionBuilder>,)| {
            Box::new(async move {
                let mut view = view(store.data_mut());
                Ok((wit::HostConnectionBuilder::build(&mut view, builder).await?,))
            })
        },
    )?;
    instance.resource_async(
        "connection",
        ResourceType::host::<PgConnection>(),
        move |mut store, rep| {
            Box::new(
                async move { view(store.data_mut()).close(Resource::<PgConnection>::new_own(rep)) },
            )
        },
    )?;
    instance.func_wrap_async(
        "[static]connection.open",
        move |mut store, (address,): (String,)| {
            Box::new(async move {
                let opening = view(store.data_mut()).opening();
                let opened = open(opening, &address, None).await;
                Ok((view(store.data_mut()).keep(opened, error)?,))
            })
        },
    )?;
    instance.func_wrap_async(
        "[method]connection.query",
        move |mut store,
              (connection, statement, params): (
            Resource<PgConnection>,
            String,
            Vec<wit::ParameterValue>,
        )| {
            Box::new(async move {
                let (held, _span) = {
                    let view = view(store.data_mut());
                    let span =
                        view.span(luge_core::trace::HostCall::Database, "postgresql", "query");
                    (view.held(&connection)?, span)
                };
                let answer: Result<wit::RowSet, wit::Error> = query(held, statement, params)
                    .await
                    .map(|(columns, rows)| wit::RowSet { columns, rows });
                Ok((answer,))
            })
        },
    )?;
    instance.func_wrap_async(
        "[method]connection.execute",
        move |mut store,
              (connection, statement, params): (
            Resource<PgConnection>,
            String,
            Vec<wit::ParameterValue>,
        )| {
            Box::new(async move {
                let (held, _span) = {
                    let view = view(store.data_mut());
                    let span = view.span(
                        luge_core::trace::HostCall::Database,
                        "postgresql",
                        "execute",
                    );
                    (view.held(&connection)?, span)
                };
                let answer: Result<u64, wit::Error> = execute(held, statement, params).await;
                Ok((answer,))
            })
        },
    )?;
    Ok(())
}
