//! `spin:mqtt@3.0.0` outbound for components, bound to
//! `luge-outbound-mqtt`: this file only adapts the generated bindings
//! (the connection resource in the store's table, errors) to it. Where a
//! connection may go is the function's `mqtt://` grants; connecting and
//! every publish end by the invocation's deadline. The WIT is `spin-sdk`
//! 7.0.0's (Luge's WIT root wit/, deps/spin-mqtt; Apache-2.0 WITH
//! LLVM-exception).

use std::sync::Arc;
use std::time::Duration;

use crate::MqttError;
use wasmtime::component::{Accessor, Resource};

use luge_binding::{ConnectionsView, Handle};

luge_binding::bindings!("luge:worlds/host-mqtt",
    imports: { default: trappable },
    with: {
        "spin:mqtt/mqtt.connection": super::MqttConnection,
    },
);

use generated::spin::mqtt::mqtt;

/// An open connection, as the guest's `connection` resource holds it.
pub type MqttConnection = Handle<crate::Connection>;

/// The bindings' host state: the view every binding shares.
pub use luge_binding::HasConnections as HasMqtt;

/// The error of one version's generated `$wit` types, written once for
/// Spin 4's and Spin 2's interfaces, whose errors are the same.
macro_rules! conversions {
    ($wit:ident) => {
        fn error(error: crate::MqttError) -> $wit::Error {
            use crate::MqttError as E;
            match error {
                E::InvalidAddress => $wit::Error::InvalidAddress,
                E::TooManyConnections => $wit::Error::TooManyConnections,
                E::Connect(e) => $wit::Error::ConnectionFailed(e.to_string()),
                E::ConnectionFailed(e) => $wit::Error::ConnectionFailed(e),
                other => $wit::Error::Other(other.to_string()),
            }
        }
    };
}
pub(super) use conversions;

conversions!(mqtt);

/// `error` for the guest, as `wrap` tells it; an address the grants do
/// not allow in Spin's words (`connection-failed("address ADDRESS is not
/// permitted")`), the reason logged where it was refused.
pub fn refused<W>(error: MqttError, address: &str, wrap: impl FnOnce(MqttError) -> W) -> W {
    match error {
        MqttError::Connect(luge_outbound::SendError::Denied(_)) => wrap(
            MqttError::ConnectionFailed(format!("address {address} is not permitted")),
        ),
        other => wrap(other),
    }
}

impl mqtt::Host for ConnectionsView<'_> {}

impl mqtt::HostConnection for ConnectionsView<'_> {
    fn drop(&mut self, connection: Resource<MqttConnection>) -> wasmtime::Result<()> {
        self.close(connection)
    }
}

impl<T> mqtt::HostConnectionWithStore<T> for HasMqtt {
    async fn open(
        accessor: &Accessor<T, Self>,
        address: String,
        username: String,
        password: String,
        keep_alive_interval_in_secs: u64,
    ) -> wasmtime::Result<Result<Resource<MqttConnection>, mqtt::Error>> {
        let opening = accessor.with(|mut access| access.get().opening());
        let keep_alive = Duration::from_secs(keep_alive_interval_in_secs);
        let opened = crate::open(opening.caller(), &address, &username, &password, keep_alive);
        let opened = opening.logged("mqtt", opened.await);
        accessor.with(|mut access| access.get().keep(opened, |e| refused(e, &address, error)))
    }

    async fn publish(
        accessor: &Accessor<T, Self>,
        connection: Resource<MqttConnection>,
        topic: String,
        payload: Vec<u8>,
        qos: mqtt::Qos,
    ) -> wasmtime::Result<Result<(), mqtt::Error>> {
        let _span = accessor.with(|mut access| {
            access
                .get()
                .span(luge_core::trace::HostCall::Messaging, "mqtt", "publish")
        });
        let (c, deadline) = accessor.with(|mut access| access.get().held(&connection))?;
        let qos = match qos {
            mqtt::Qos::AtMostOnce => 0,
            mqtt::Qos::AtLeastOnce => 1,
            mqtt::Qos::ExactlyOnce => 2,
        };
        let c: Arc<crate::Connection> = c;
        Ok(c.publish(&topic, payload, qos, deadline)
            .await
            .map_err(error))
    }
}

luge_binding::add_to_linker! {
    /// Adds `spin:mqtt@3.0.0` to `linker`, over `view`.
    ConnectionsView as HasMqtt: mqtt
}
