//! `spin:redis@3.0.0` outbound for components, bound to
//! `luge-outbound-redis`: this file only adapts the generated bindings
//! (the connection resource in the store's table, values, errors) to it.
//! Where a connection may go is the function's `redis://` grants; every
//! command ends by the invocation's deadline and every reply is bounded
//! by [`luge_binding::max_answer_bytes`]. The WIT is `spin-sdk` 7.0.0's
//! (Luge's WIT root wit/, deps/spin-redis; Apache-2.0 WITH LLVM-exception).

use std::sync::Arc;
use std::time::Instant;

use wasmtime::component::{Accessor, Resource};

use luge_binding::{ConnectionsView, Handle};

luge_binding::bindings!("luge:worlds/host-redis",
    imports: { default: trappable },
    with: {
        "spin:redis/redis.connection": super::RedisConnection,
    },
);

use generated::spin::redis::redis;

/// An open connection, as the guest's `connection` resource holds it.
pub type RedisConnection = Handle<crate::Connection>;

/// The bindings' host state: the view every binding shares.
pub use luge_binding::HasConnections as HasRedis;

/// The conversions to one version's generated `$wit` types (its error,
/// `execute`'s arguments and replies, an operation's answer), written once for Spin 4's and Spin 2's
/// interfaces, whose errors are the same.
macro_rules! conversions {
    ($wit:ident) => {
        fn error(error: crate::RedisError) -> $wit::Error {
            use crate::RedisError as E;
            match error {
                // As Spin answers an address its grants do not allow (the
                // reason is logged where the connection was refused).
                E::InvalidAddress | E::Connect(luge_outbound::SendError::Denied(_)) => {
                    $wit::Error::InvalidAddress
                }
                E::TooManyConnections => $wit::Error::TooManyConnections,
                E::TypeError(_) => $wit::Error::TypeError,
                other => $wit::Error::Other(other.to_string()),
            }
        }

        /// A guest's argument to `execute`.
        fn parameter(argument: $wit::RedisParameter) -> crate::Parameter {
            match argument {
                $wit::RedisParameter::Int64(i) => crate::Parameter::Int64(i),
                $wit::RedisParameter::Binary(b) => crate::Parameter::Binary(b),
            }
        }

        /// One of `execute`'s replies, for the guest.
        fn reply(reply: crate::Reply) -> $wit::RedisResult {
            match reply {
                crate::Reply::Nil => $wit::RedisResult::Nil,
                crate::Reply::Status(s) => $wit::RedisResult::Status(s),
                crate::Reply::Int64(i) => $wit::RedisResult::Int64(i),
                crate::Reply::Binary(b) => $wit::RedisResult::Binary(b),
            }
        }

        /// `result` for the guest: its value, or the error it can tell
        /// apart.
        fn answer<R>(
            result: Result<R, crate::RedisError>,
        ) -> wasmtime::Result<Result<R, $wit::Error>> {
            Ok(result.map_err(error))
        }
    };
}
pub(super) use conversions;

/// Every operation on a connection but `execute`, written once for Spin
/// 4's and Spin 2's interfaces: each method, on the receiver `$recv`
/// (`&mut self` or an accessor), starts with `$held` (the connection, the
/// deadline and the operation's span) and answers the call on the
/// connection that the table names.
macro_rules! operations {
    ($wit:ident, ($($recv:tt)*), $held:expr) => {
        $crate::component::redis::operations!(@each $wit, ($($recv)*), $held,
            publish(channel: String, payload: Vec<u8>) -> () = |c, d| c.publish(&channel, &payload, d);
            get(key: String) -> Option<Vec<u8>> = |c, d| c.get(&key, d);
            set(key: String, value: Vec<u8>) -> () = |c, d| c.set(&key, &value, d);
            incr(key: String) -> i64 = |c, d| c.incr(&key, d);
            del(keys: Vec<String>) -> u32 = |c, d| c.del(&keys, d);
            sadd(key: String, values: Vec<String>) -> u32 = |c, d| c.sadd(&key, &values, d);
            smembers(key: String) -> Vec<String> = |c, d| c.smembers(&key, d);
            srem(key: String, values: Vec<String>) -> u32 = |c, d| c.srem(&key, &values, d);
        );
    };
    (@each $wit:ident, $recv:tt, $held:expr,
        $($name:ident($($arg:ident: $ty:ty),*) -> $out:ty = |$c:ident, $d:ident| $call:expr;)*) => {
        $(
            $crate::component::redis::operations!(@one $wit, $recv, $held,
                $name($($arg: $ty),*) -> $out = |$c, $d| $call);
        )*
    };
    (@one $wit:ident, ($($recv:tt)*), $held:expr,
        $name:ident($($arg:ident: $ty:ty),*) -> $out:ty = |$c:ident, $d:ident| $call:expr) => {
        async fn $name(
            $($recv)*,
            connection: Resource<RedisConnection>,
            $($arg: $ty),*
        ) -> wasmtime::Result<Result<$out, $wit::Error>> {
            let ($c, $d, _span) = ($held)(&connection, stringify!($name))?;
            answer($call.await)
        }
    };
}
pub(super) use operations;

conversions!(redis);

/// What every operation starts with: the connection `connection` names,
/// the invocation's deadline, and the operation's span (held until the
/// operation ends).
fn held<T>(
    accessor: &Accessor<T, HasRedis>,
    connection: &Resource<RedisConnection>,
    operation: &'static str,
) -> wasmtime::Result<(
    Arc<crate::Connection>,
    Instant,
    Option<luge_core::trace::HostSpan>,
)> {
    accessor.with(|mut access| {
        access.get().operation(
            connection,
            luge_core::trace::HostCall::KeyValue,
            "redis",
            operation,
        )
    })
}

impl redis::Host for ConnectionsView<'_> {}

impl redis::HostConnection for ConnectionsView<'_> {
    fn drop(&mut self, connection: Resource<RedisConnection>) -> wasmtime::Result<()> {
        self.close(connection)
    }
}

impl<T> redis::HostConnectionWithStore<T> for HasRedis {
    async fn open(
        accessor: &Accessor<T, Self>,
        address: String,
    ) -> wasmtime::Result<Result<Resource<RedisConnection>, redis::Error>> {
        let opening = accessor.with(|mut access| access.get().opening());
        let opened = opening.logged("redis", crate::open(opening.caller(), &address).await);
        accessor.with(|mut access| access.get().keep(opened, error))
    }

    operations!(redis, (accessor: &Accessor<T, Self>), |connection, name| {
        held(accessor, connection, name)
    });

    async fn execute(
        accessor: &Accessor<T, Self>,
        connection: Resource<RedisConnection>,
        command: String,
        arguments: Vec<redis::RedisParameter>,
    ) -> wasmtime::Result<Result<Vec<redis::RedisResult>, redis::Error>> {
        let (c, deadline, _span) = held(accessor, &connection, "execute")?;
        let arguments: Vec<_> = arguments.into_iter().map(parameter).collect();
        answer(
            c.execute(&command, &arguments, deadline)
                .await
                .map(|replies| replies.into_iter().map(reply).collect()),
        )
    }
}

luge_binding::add_to_linker! {
    /// Adds `spin:redis@3.0.0` to `linker`.
    ConnectionsView as HasRedis: redis
}
