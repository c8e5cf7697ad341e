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

use super::postgres::{PgConnection, PgConnectionBuilder, wit};
use luge_binding::{ConnectionsView, linked};

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
    linked!(instance, view, "[constructor]connection-builder",
        (address: String) => wit::HostConnectionBuilder::new);
    linked!(instance, view, "[method]connection-builder.set-ca-root",
        (builder: Resource<PgConnectionBuilder>, certificate: String)
            => wit::HostConnectionBuilder::set_ca_root);
    linked!(instance, view, "[method]connection-builder.build",
        (builder: Resource<PgConnectionBuilder>) => wit::HostConnectionBuilder::build);
    linked!(instance, view, resource "connection": PgConnection);
    linked!(instance, view, "[static]connection.open",
        (address: String) => wit::HostConnection::open);
    linked!(instance, view, "[method]connection.query",
        (connection: Resource<PgConnection>, statement: String, params: Vec<wit::ParameterValue>)
            => wit::HostConnection::query);
    linked!(instance, view, "[method]connection.execute",
        (connection: Resource<PgConnection>, statement: String, params: Vec<wit::ParameterValue>)
            => wit::HostConnection::execute);
    Ok(())
}
