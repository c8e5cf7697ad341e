//! Spin 2's interfaces, `fermyon:spin@2.0.0`, as spin-sdk 2 and 3 (and
//! wit-bindgen against Spin 2's WIT, as Spin's conformance suite builds
//! its components) import them: `key-value`, `variables`, `sqlite`,
//! `redis` and `mqtt`. Spin 4 still serves them, so apps built for Spin 2
//! and 3 run unchanged.
//!
//! Each is bound to the very code its Spin 3 version is bound to, on the
//! same grants and bounds: a key-value store is a [`kv::Bucket`] of
//! Luge's state tiers, a variable the route's, a database, Redis server or
//! MQTT broker a connection of its crate opened under the function's
//! grants, ended by the invocation's deadline and bounded by
//! [`max_answer_bytes`]. A grant means the same whichever version a
//! function imports. Spin 2's `postgres` and `mysql` are bound in
//! [`crate::spin2_rdbms`]; its `llm` is not served (an import of it is
//! refused at load, by name).
//!
//! These interfaces are synchronous for the guest; their host functions
//! wait on the network or the blocking pool as the other bindings' do.
//! The WIT is `spin-sdk` 3.1.1's (Luge's WIT root wit/,
//! deps/fermyon-spin2; Apache-2.0 WITH LLVM-exception).

use std::time::Duration;

use luge_core::capabilities::check_variable;
use luge_core::keyvalue::{self as kv, KvError};
use wasmtime::component::{HasData, Resource};

use crate::spin::SpinView;
use luge_binding::ConnectionsView;
use luge_binding::max_answer_bytes;
use luge_outbound_mqtt::component::mqtt::MqttConnection;
use luge_outbound_redis::component::redis::RedisConnection;
use luge_sqlite::component::sqlite::SqliteConnection;

mod generated {
    wasmtime::component::bindgen!({
        path: "../../wit",
        world: "luge:worlds/host-spin2",
        imports: { default: async | trappable },
        with: {
            "fermyon:spin/key-value@2.0.0.store": luge_core::keyvalue::Bucket,
            "fermyon:spin/sqlite@2.0.0.connection": luge_sqlite::component::sqlite::SqliteConnection,
            "fermyon:spin/redis@2.0.0.connection": luge_outbound_redis::component::redis::RedisConnection,
            "fermyon:spin/mqtt@2.0.0.connection": luge_outbound_mqtt::component::mqtt::MqttConnection,
        },
    });
}

use generated::fermyon::spin2_0_0::{key_value, mqtt, redis, sqlite, variables};

/// The key-value and variables bindings' host state.
pub(crate) struct HasSpin2;

impl HasData for HasSpin2 {
    type Data<'a> = SpinView<'a>;
}

/// The connection bindings' host state.
pub(crate) struct HasConnections2;

impl HasData for HasConnections2 {
    type Data<'a> = ConnectionsView<'a>;
}

// key-value

fn kv_error(error: KvError) -> key_value::Error {
    match error {
        KvError::NoSuchStore => key_value::Error::NoSuchStore,
        KvError::AccessDenied => key_value::Error::AccessDenied,
        KvError::Other(text) => key_value::Error::Other(text),
    }
}

impl SpinView<'_> {
    /// Runs `op` on the open bucket `store` with the invocation's state.
    fn on_bucket<R>(
        &mut self,
        store: &Resource<kv::Bucket>,
        op: impl FnOnce(&kv::Bucket, &dyn luge_core::state::State) -> Result<R, KvError>,
    ) -> wasmtime::Result<Result<R, key_value::Error>> {
        let bucket = self.kv.table.get(store)?;
        let Some(state) = self.kv.state else {
            return Ok(Err(key_value::Error::Other(
                "this host keeps no shared state".to_owned(),
            )));
        };
        Ok(op(bucket, &**state).map_err(kv_error))
    }
}

impl key_value::Host for SpinView<'_> {}

impl key_value::HostStore for SpinView<'_> {
    async fn open(
        &mut self,
        label: String,
    ) -> wasmtime::Result<Result<Resource<kv::Bucket>, key_value::Error>> {
        Ok(self.open_store(&label).map_err(kv_error))
    }

    async fn get(
        &mut self,
        store: Resource<kv::Bucket>,
        key: String,
    ) -> wasmtime::Result<Result<Option<Vec<u8>>, key_value::Error>> {
        self.on_bucket(&store, |bucket, state| bucket.get(state, &key))
    }

    async fn set(
        &mut self,
        store: Resource<kv::Bucket>,
        key: String,
        value: Vec<u8>,
    ) -> wasmtime::Result<Result<(), key_value::Error>> {
        self.on_bucket(&store, |bucket, state| bucket.set(state, &key, &value))
    }

    async fn delete(
        &mut self,
        store: Resource<kv::Bucket>,
        key: String,
    ) -> wasmtime::Result<Result<(), key_value::Error>> {
        self.on_bucket(&store, |bucket, state| bucket.delete(state, &key))
    }

    async fn exists(
        &mut self,
        store: Resource<kv::Bucket>,
        key: String,
    ) -> wasmtime::Result<Result<bool, key_value::Error>> {
        self.on_bucket(&store, |bucket, state| bucket.exists(state, &key))
    }

    async fn get_keys(
        &mut self,
        store: Resource<kv::Bucket>,
    ) -> wasmtime::Result<Result<Vec<String>, key_value::Error>> {
        // Every key (at most kv::MAX_LISTED), or why the listing ended.
        Ok(self
            .on_bucket(&store, |bucket, state| Ok(bucket.all_keys(state)))?
            .and_then(|(keys, ended)| ended.map(|()| keys).map_err(kv_error)))
    }

    async fn drop(&mut self, store: Resource<kv::Bucket>) -> wasmtime::Result<()> {
        self.kv.close_bucket(store)
    }
}

// variables

impl variables::Host for SpinView<'_> {
    async fn get(&mut self, name: String) -> wasmtime::Result<Result<String, variables::Error>> {
        if let Err(why) = check_variable(&name, "") {
            return Ok(Err(variables::Error::InvalidName(why.to_string())));
        }
        Ok(self
            .variables
            .iter()
            .find(|(n, _)| *n == name)
            .map(|(_, value)| value.clone())
            .ok_or(variables::Error::Undefined(name)))
    }
}

// sqlite

fn sqlite_error(error: luge_sqlite::SqliteError) -> sqlite::Error {
    use luge_sqlite::SqliteError as E;
    match error {
        E::NoSuchDatabase => sqlite::Error::NoSuchDatabase,
        E::AccessDenied => sqlite::Error::AccessDenied,
        E::DatabaseFull => sqlite::Error::DatabaseFull,
        E::InvalidConnection => sqlite::Error::InvalidConnection,
        other => sqlite::Error::Io(other.to_string()),
    }
}

fn sqlite_in(value: sqlite::Value) -> luge_sqlite::Value {
    match value {
        sqlite::Value::Integer(i) => luge_sqlite::Value::Integer(i),
        sqlite::Value::Real(r) => luge_sqlite::Value::Real(r),
        sqlite::Value::Text(t) => luge_sqlite::Value::Text(t),
        sqlite::Value::Blob(b) => luge_sqlite::Value::Blob(b),
        sqlite::Value::Null => luge_sqlite::Value::Null,
    }
}

fn sqlite_out(value: luge_sqlite::Value) -> sqlite::Value {
    match value {
        luge_sqlite::Value::Integer(i) => sqlite::Value::Integer(i),
        luge_sqlite::Value::Real(r) => sqlite::Value::Real(r),
        luge_sqlite::Value::Text(t) => sqlite::Value::Text(t),
        luge_sqlite::Value::Blob(b) => sqlite::Value::Blob(b),
        luge_sqlite::Value::Null => sqlite::Value::Null,
    }
}

impl sqlite::Host for ConnectionsView<'_> {}

impl sqlite::HostConnection for ConnectionsView<'_> {
    async fn open(
        &mut self,
        database: String,
    ) -> wasmtime::Result<Result<Resource<SqliteConnection>, sqlite::Error>> {
        let opened = luge_sqlite::component::sqlite::open(self.opening(), &database).await;
        self.keep(opened, sqlite_error)
    }

    async fn execute(
        &mut self,
        connection: Resource<SqliteConnection>,
        statement: String,
        parameters: Vec<sqlite::Value>,
    ) -> wasmtime::Result<Result<sqlite::QueryResult, sqlite::Error>> {
        let _span = self.span(luge_core::trace::HostCall::Database, "sqlite", "execute");
        let (connection, deadline) = self.held(&connection)?;
        let parameters = parameters.into_iter().map(sqlite_in).collect();
        Ok(connection
            .execute(
                statement,
                parameters,
                deadline,
                max_answer_bytes(self.action),
            )
            .await
            .map(|rows| sqlite::QueryResult {
                columns: rows.columns,
                rows: rows
                    .rows
                    .into_iter()
                    .map(|values| sqlite::RowResult {
                        values: values.into_iter().map(sqlite_out).collect(),
                    })
                    .collect(),
            })
            .map_err(sqlite_error))
    }

    async fn drop(&mut self, connection: Resource<SqliteConnection>) -> wasmtime::Result<()> {
        self.close(connection)
    }
}

// redis

fn redis_error(error: luge_outbound_redis::RedisError) -> redis::Error {
    use luge_outbound_redis::RedisError as E;
    match error {
        // As Spin answers an address its grants do not allow.
        E::InvalidAddress | E::Connect(luge_outbound::SendError::Denied(_)) => {
            redis::Error::InvalidAddress
        }
        E::TooManyConnections => redis::Error::TooManyConnections,
        E::TypeError(_) => redis::Error::TypeError,
        other => redis::Error::Other(other.to_string()),
    }
}

/// `result` for the guest: its value, or the error it can tell apart.
fn redis_answer<R>(
    result: Result<R, luge_outbound_redis::RedisError>,
) -> wasmtime::Result<Result<R, redis::Error>> {
    Ok(result.map_err(redis_error))
}

impl redis::Host for ConnectionsView<'_> {}

impl redis::HostConnection for ConnectionsView<'_> {
    async fn open(
        &mut self,
        address: String,
    ) -> wasmtime::Result<Result<Resource<RedisConnection>, redis::Error>> {
        let (action, deadline) = self.opening();
        let opened = luge_outbound_redis::open(
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
        self.keep(opened, redis_error)
    }

    async fn publish(
        &mut self,
        connection: Resource<RedisConnection>,
        channel: String,
        payload: Vec<u8>,
    ) -> wasmtime::Result<Result<(), redis::Error>> {
        let (c, deadline, _span) = self.operation(
            &connection,
            luge_core::trace::HostCall::KeyValue,
            "redis",
            "publish",
        )?;
        redis_answer(c.publish(&channel, &payload, deadline).await)
    }

    async fn get(
        &mut self,
        connection: Resource<RedisConnection>,
        key: String,
    ) -> wasmtime::Result<Result<Option<Vec<u8>>, redis::Error>> {
        let (c, deadline, _span) = self.operation(
            &connection,
            luge_core::trace::HostCall::KeyValue,
            "redis",
            "get",
        )?;
        redis_answer(c.get(&key, deadline).await)
    }

    async fn set(
        &mut self,
        connection: Resource<RedisConnection>,
        key: String,
        value: Vec<u8>,
    ) -> wasmtime::Result<Result<(), redis::Error>> {
        let (c, deadline, _span) = self.operation(
            &connection,
            luge_core::trace::HostCall::KeyValue,
            "redis",
            "set",
        )?;
        redis_answer(c.set(&key, &value, deadline).await)
    }

    async fn incr(
        &mut self,
        connection: Resource<RedisConnection>,
        key: String,
    ) -> wasmtime::Result<Result<i64, redis::Error>> {
        let (c, deadline, _span) = self.operation(
            &connection,
            luge_core::trace::HostCall::KeyValue,
            "redis",
            "incr",
        )?;
        redis_answer(c.incr(&key, deadline).await)
    }

    async fn del(
        &mut self,
        connection: Resource<RedisConnection>,
        keys: Vec<String>,
    ) -> wasmtime::Result<Result<u32, redis::Error>> {
        let (c, deadline, _span) = self.operation(
            &connection,
            luge_core::trace::HostCall::KeyValue,
            "redis",
            "del",
        )?;
        redis_answer(c.del(&keys, deadline).await)
    }

    async fn sadd(
        &mut self,
        connection: Resource<RedisConnection>,
        key: String,
        values: Vec<String>,
    ) -> wasmtime::Result<Result<u32, redis::Error>> {
        let (c, deadline, _span) = self.operation(
            &connection,
            luge_core::trace::HostCall::KeyValue,
            "redis",
            "sadd",
        )?;
        redis_answer(c.sadd(&key, &values, deadline).await)
    }

    async fn smembers(
        &mut self,
        connection: Resource<RedisConnection>,
        key: String,
    ) -> wasmtime::Result<Result<Vec<String>, redis::Error>> {
        let (c, deadline, _span) = self.operation(
            &connection,
            luge_core::trace::HostCall::KeyValue,
            "redis",
            "smembers",
        )?;
        redis_answer(c.smembers(&key, deadline).await)
    }

    async fn srem(
        &mut self,
        connection: Resource<RedisConnection>,
        key: String,
        values: Vec<String>,
    ) -> wasmtime::Result<Result<u32, redis::Error>> {
        let (c, deadline, _span) = self.operation(
            &connection,
            luge_core::trace::HostCall::KeyValue,
            "redis",
            "srem",
        )?;
        redis_answer(c.srem(&key, &values, deadline).await)
    }

    async fn execute(
        &mut self,
        connection: Resource<RedisConnection>,
        command: String,
        arguments: Vec<redis::RedisParameter>,
    ) -> wasmtime::Result<Result<Vec<redis::RedisResult>, redis::Error>> {
        use luge_outbound_redis::{Parameter, Reply};
        let (c, deadline, _span) = self.operation(
            &connection,
            luge_core::trace::HostCall::KeyValue,
            "redis",
            "execute",
        )?;
        let arguments: Vec<Parameter> = arguments
            .into_iter()
            .map(|argument| match argument {
                redis::RedisParameter::Int64(i) => Parameter::Int64(i),
                redis::RedisParameter::Binary(b) => Parameter::Binary(b),
            })
            .collect();
        redis_answer(
            c.execute(&command, &arguments, deadline)
                .await
                .map(|replies| {
                    replies
                        .into_iter()
                        .map(|reply| match reply {
                            Reply::Nil => redis::RedisResult::Nil,
                            Reply::Status(s) => redis::RedisResult::Status(s),
                            Reply::Int64(i) => redis::RedisResult::Int64(i),
                            Reply::Binary(b) => redis::RedisResult::Binary(b),
                        })
                        .collect()
                }),
        )
    }

    async fn drop(&mut self, connection: Resource<RedisConnection>) -> wasmtime::Result<()> {
        self.close(connection)
    }
}

// mqtt

fn mqtt_error(error: luge_outbound_mqtt::MqttError) -> mqtt::Error {
    use luge_outbound_mqtt::MqttError as E;
    match error {
        E::InvalidAddress => mqtt::Error::InvalidAddress,
        E::TooManyConnections => mqtt::Error::TooManyConnections,
        E::Connect(e) => mqtt::Error::ConnectionFailed(e.to_string()),
        E::ConnectionFailed(e) => mqtt::Error::ConnectionFailed(e),
        other => mqtt::Error::Other(other.to_string()),
    }
}

impl mqtt::Host for ConnectionsView<'_> {}

impl mqtt::HostConnection for ConnectionsView<'_> {
    async fn open(
        &mut self,
        address: String,
        username: String,
        password: String,
        keep_alive_interval_in_secs: u64,
    ) -> wasmtime::Result<Result<Resource<MqttConnection>, mqtt::Error>> {
        let (action, deadline) = self.opening();
        let opened = luge_outbound_mqtt::open(
            &action.name,
            &action.capabilities.outbound,
            &address,
            &username,
            &password,
            Duration::from_secs(keep_alive_interval_in_secs),
            deadline,
        )
        .await;
        if let Err(e) = &opened {
            tracing::debug!(function = %action.name, error = %e, "outbound mqtt refused");
        }
        self.keep(opened, |e| {
            luge_outbound_mqtt::component::mqtt::refused(e, &address, mqtt_error)
        })
    }

    async fn publish(
        &mut self,
        connection: Resource<MqttConnection>,
        topic: String,
        payload: Vec<u8>,
        qos: mqtt::Qos,
    ) -> wasmtime::Result<Result<(), mqtt::Error>> {
        let _span = self.span(luge_core::trace::HostCall::Messaging, "mqtt", "publish");
        let (c, deadline) = self.held(&connection)?;
        let qos = match qos {
            mqtt::Qos::AtMostOnce => 0,
            mqtt::Qos::AtLeastOnce => 1,
            mqtt::Qos::ExactlyOnce => 2,
        };
        Ok(c.publish(&topic, payload, qos, deadline)
            .await
            .map_err(mqtt_error))
    }

    async fn drop(&mut self, connection: Resource<MqttConnection>) -> wasmtime::Result<()> {
        self.close(connection)
    }
}

/// Adds `fermyon:spin@2.0.0`'s key-value and variables (over `spin`) and
/// its sqlite, redis and mqtt (over `connections`) to `linker`.
pub(crate) fn add_to_linker<T: Send + 'static>(
    linker: &mut wasmtime::component::Linker<T>,
    spin: fn(&mut T) -> SpinView<'_>,
    connections: fn(&mut T) -> ConnectionsView<'_>,
) -> wasmtime::Result<()> {
    key_value::add_to_linker::<_, HasSpin2>(linker, spin)?;
    variables::add_to_linker::<_, HasSpin2>(linker, spin)?;
    sqlite::add_to_linker::<_, HasConnections2>(linker, connections)?;
    redis::add_to_linker::<_, HasConnections2>(linker, connections)?;
    mqtt::add_to_linker::<_, HasConnections2>(linker, connections)?;
    Ok(())
}
