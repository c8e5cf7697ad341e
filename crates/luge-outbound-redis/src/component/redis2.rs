//! `fermyon:spin/redis@2.0.0`, as spin-sdk 2 and 3 (and wit-bindgen
//! against Spin 2's WIT) import it, bound to the very code
//! `spin:redis@3.0.0` ([`super::redis`]) is: the same `redis://` grants,
//! deadline and bound on every reply. Synchronous for the guest; its host
//! functions wait on the network. The WIT is `spin-sdk` 3.1.1's (Luge's
//! WIT root wit/, deps/fermyon-spin2; Apache-2.0 WITH LLVM-exception).

use wasmtime::component::Resource;

use super::redis::{HasRedis, RedisConnection};
use luge_binding::{ConnectionsView, max_answer_bytes};

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
        let (action, deadline) = self.opening();
        let opened = crate::open(
            &action.name,
            &action.capabilities.outbound,
            &address,
            deadline,
            max_answer_bytes(&action),
        )
        .await;
        if let Err(e) = &opened {
            tracing::debug!(function = %action.name, error = %e, "outbound redis refused");
        }
        self.keep(opened, error)
    }

    async fn publish(
        &mut self,
        connection: Resource<RedisConnection>,
        channel: String,
        payload: Vec<u8>,
    ) -> wasmtime::Result<Result<(), redis::Error>> {
        let (c, deadline, _span) = op(self, &connection, "publish")?;
        answer(c.publish(&channel, &payload, deadline).await)
    }

    async fn get(
        &mut self,
        connection: Resource<RedisConnection>,
        key: String,
    ) -> wasmtime::Result<Result<Option<Vec<u8>>, redis::Error>> {
        let (c, deadline, _span) = op(self, &connection, "get")?;
        answer(c.get(&key, deadline).await)
    }

    async fn set(
        &mut self,
        connection: Resource<RedisConnection>,
        key: String,
        value: Vec<u8>,
    ) -> wasmtime::Result<Result<(), redis::Error>> {
        let (c, deadline, _span) = op(self, &connection, "set")?;
        answer(c.set(&key, &value, deadline).await)
    }

    async fn incr(
        &mut self,
        connection: Resource<RedisConnection>,
        key: String,
    ) -> wasmtime::Result<Result<i64, redis::Error>> {
        let (c, deadline, _span) = op(self, &connection, "incr")?;
        answer(c.incr(&key, deadline).await)
    }

    async fn del(
        &mut self,
        connection: Resource<RedisConnection>,
        keys: Vec<String>,
    ) -> wasmtime::Result<Result<u32, redis::Error>> {
        let (c, deadline, _span) = op(self, &connection, "del")?;
        answer(c.del(&keys, deadline).await)
    }

    async fn sadd(
        &mut self,
        connection: Resource<RedisConnection>,
        key: String,
        values: Vec<String>,
    ) -> wasmtime::Result<Result<u32, redis::Error>> {
        let (c, deadline, _span) = op(self, &connection, "sadd")?;
        answer(c.sadd(&key, &values, deadline).await)
    }

    async fn smembers(
        &mut self,
        connection: Resource<RedisConnection>,
        key: String,
    ) -> wasmtime::Result<Result<Vec<String>, redis::Error>> {
        let (c, deadline, _span) = op(self, &connection, "smembers")?;
        answer(c.smembers(&key, deadline).await)
    }

    async fn srem(
        &mut self,
        connection: Resource<RedisConnection>,
        key: String,
        values: Vec<String>,
    ) -> wasmtime::Result<Result<u32, redis::Error>> {
        let (c, deadline, _span) = op(self, &connection, "srem")?;
        answer(c.srem(&key, &values, deadline).await)
    }

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

/// Adds `fermyon:spin/redis@2.0.0` to `linker`.
pub fn add_to_linker<T: Send + 'static>(
    linker: &mut wasmtime::component::Linker<T>,
    view: fn(&mut T) -> ConnectionsView<'_>,
) -> wasmtime::Result<()> {
    redis::add_to_linker::<_, HasRedis>(linker, view)
}
