//! `spin:postgres@4.0.0` for components that do not use the async ABI
//! (spin-sdk 5, and wit-bindgen against Spin 3's WIT, as Spin's
//! conformance suite builds its `postgres` component), bound to the very
//! code [`crate::postgres`] binds 4.2 with: the same grants, deadline and
//! bound on every result set. Components that use the async ABI get every
//! 4.x from the 4.2 binding, on the concurrent engine.
//!
//! 4.0 is 4.2 without its builder and its `async` functions, every type
//! the same: rather than generate a second set of types and convert
//! between them, its three functions and its resource are linked by hand
//! with 4.2's types, which Wasmtime checks against the component's 4.0
//! types (structurally) when it is instantiated. The WIT, kept for that
//! check's reference and for guests, is `spin-sdk` 5.1.0's (Luge's WIT
//! root wit/, deps/spin-postgres40; Apache-2.0 WITH LLVM-exception).

use wasmtime::component::{Linker, Resource, ResourceType};

use crate::connections::ConnectionsView;
use crate::postgres::{PgConnection, error, execute, open, query, wit};

/// The interface's name, as 4.0 guests import it.
const INTERFACE: &str = "spin:postgres/postgres@4.0.0";

/// Adds `spin:postgres@4.0.0` to `linker`.
pub(crate) fn add_to_linker<T: Send + 'static>(
    linker: &mut Linker<T>,
    view: fn(&mut T) -> ConnectionsView<'_>,
) -> wasmtime::Result<()> {
    let mut instance = linker.instance(INTERFACE)?;
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
