//! `fermyon:spin/redis@2.0.0`, as spin-sdk 2 and 3 (and wit-bindgen
//! against Spin 2's WIT) import it, bound to the very code
//! `spin:redis@3.0.0` ([`super::redis`]) is: the same `redis://` grants,
//! deadline and bound on every reply. Synchronous for the guest; its host
//! functions wait on the network. The WIT is `spin-sdk` 3.1.1's (Luge's
//! WIT root wit/, deps/fermyon-spin2; Apache-2.0 WITH LLVM-exception).

use wasmtime::component::Resource;

use super::redis::{HasRedis, RedisConnection};
use luge_binding::ConnectionsView;

luge_binding::bindings!("luge:worlds/host-spin2-redis",
    imports: { default: async | trappable },
    with: {
        "fermyon:spin/redis@2.0.0.connection": crate::component::redis::RedisConnection,
    },
);

use generated::fermyon::spin2_0_0::redis;

super::redis::conversions!(redis);

/// What every operation starts with ([`ConnectionsView::operation`]): the
/// connection, the deadline, and the span of `name`.
fn op(
    view: &ConnectionsView<'_>,
    connection: &Resource<RedisConnection>,
    name: &'static str,
) -> wasmtime::Result<(
    std::sync::Arc<crate::Connection>,
    std::time::Instant,
    Option<luge_core::trace::HostSpan>,
)> {
    view.operation(
        connection,
        luge_core::trace::HostCall::KeyValue,
        "redis",
        name,
    )
}

impl redis::Host for ConnectionsView<'_> {}

impl redis::HostConnection for ConnectionsView<'_> {
    async fn open(
        &mut self,
        address: String,
    ) -> wasmtime::Result<Result<Resource<RedisConnection>, redis::Error>> {
        let opening = self.opening();
        let opened = opening.logged("redis", crate::open(opening.caller(), &address).await);
        self.keep(opened, error)
    }

    super::redis::operations!(redis, (&mut self), |connection, name| {
        op(self, connection, name)
    });

    async fn execute(
        &mut self,
        connection: Resource<RedisConnection>,
        command: String,
        arguments: Vec<redis::RedisParameter>,
    ) -> wasmtime::Result<Result<Vec<redis::RedisResult>, redis::Error>> {
        let (c, deadline, _span) = op(self, &connection, "execute")?;
        let arguments: Vec<_> = arguments.into_iter().map(parameter).collect();
        answer(
            c.execute(&command, &arguments, deadline)
                .await
                .map(|replies| replies.into_iter().map(reply).collect()),
        )
    }

    async fn drop(&mut self, connection: Resource<RedisConnection>) -> wasmtime::Result<()> {
        self.close(connection)
    }
}

luge_binding::add_to_linker! {
    /// Adds `fermyon:spin/redis@2.0.0` to `linker`.
    ConnectionsView as HasRedis: redis
}
