//! `fermyon:spin/mqtt@2.0.0`, as spin-sdk 2 and 3 (and wit-bindgen
//! against Spin 2's WIT) import it, bound to the very code
//! `spin:mqtt@3.0.0` ([`super::mqtt`]) is: the same `mqtt://` grants,
//! deadline and bounds. Synchronous for the guest; its host functions wait
//! on the network. The WIT is `spin-sdk` 3.1.1's (Luge's WIT root wit/,
//! deps/fermyon-spin2; Apache-2.0 WITH LLVM-exception).

use std::time::Duration;

use wasmtime::component::Resource;

use super::mqtt::{HasMqtt, MqttConnection};
use luge_binding::ConnectionsView;

luge_binding::bindings!("luge:worlds/host-spin2-mqtt",
    imports: { default: async | trappable },
    with: {
        "fermyon:spin/mqtt@2.0.0.connection": crate::component::mqtt::MqttConnection,
    },
);

use generated::fermyon::spin2_0_0::mqtt;

super::mqtt::conversions!(mqtt);

impl mqtt::Host for ConnectionsView<'_> {}

impl mqtt::HostConnection for ConnectionsView<'_> {
    async fn open(
        &mut self,
        address: String,
        username: String,
        password: String,
        keep_alive_interval_in_secs: u64,
    ) -> wasmtime::Result<Result<Resource<MqttConnection>, mqtt::Error>> {
        let opening = self.opening();
        let keep_alive = Duration::from_secs(keep_alive_interval_in_secs);
        let opened = crate::open(opening.caller(), &address, &username, &password, keep_alive);
        let opened = opening.logged("mqtt", opened.await);
        self.keep(opened, |e| super::mqtt::refused(e, &address, error))
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
            .map_err(error))
    }

    async fn drop(&mut self, connection: Resource<MqttConnection>) -> wasmtime::Result<()> {
        self.close(connection)
    }
}

luge_binding::add_to_linker! {
    /// Adds `fermyon:spin/mqtt@2.0.0` to `linker`.
    ConnectionsView as HasMqtt: mqtt
}
