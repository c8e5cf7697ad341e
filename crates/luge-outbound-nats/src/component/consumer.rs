//! `wasmcloud:messaging/consumer@0.2.0` for components, bound to
//! `luge-outbound-nats`: this file only adapts the generated bindings to
//! it. The server is the function's one `nats://` grant; each call ends by
//! the invocation's deadline. Synchronous for the guest; its host
//! functions wait on the network. The WIT is Luge's (wit/, deps/
//! wasmcloud-messaging, written out from wasmCloud's published
//! signatures).

use std::time::Duration;

use luge_binding::ConnectionsView;

luge_binding::bindings!("luge:worlds/host-messaging",
    imports: { default: async | trappable },
);

use generated::wasmcloud::messaging::{consumer, types};

/// The bindings' host state: the view every binding shares.
pub use luge_binding::HasConnections as HasMessaging;

impl From<crate::Message> for types::BrokerMessage {
    fn from(message: crate::Message) -> Self {
        Self {
            subject: message.subject,
            body: message.body,
            reply_to: message.reply_to,
        }
    }
}

impl types::Host for ConnectionsView<'_> {}

impl consumer::Host for ConnectionsView<'_> {
    async fn request(
        &mut self,
        subject: String,
        body: Vec<u8>,
        timeout_ms: u32,
    ) -> wasmtime::Result<Result<types::BrokerMessage, String>> {
        let _span = self.span(luge_core::trace::HostCall::Messaging, "nats", "request");
        let opening = self.opening();
        let timeout = Duration::from_millis(u64::from(timeout_ms));
        let answer = crate::request(opening.caller(), subject, body, timeout).await;
        Ok(opening
            .logged("nats", answer)
            .map(Into::into)
            .map_err(|e| e.to_string()))
    }

    async fn publish(&mut self, msg: types::BrokerMessage) -> wasmtime::Result<Result<(), String>> {
        let _span = self.span(luge_core::trace::HostCall::Messaging, "nats", "publish");
        let opening = self.opening();
        let message = crate::Message {
            subject: msg.subject,
            body: msg.body,
            reply_to: msg.reply_to,
        };
        let sent = crate::publish(opening.caller(), message).await;
        Ok(opening.logged("nats", sent).map_err(|e| e.to_string()))
    }
}

luge_binding::add_to_linker! {
    /// Adds `wasmcloud:messaging/consumer@0.2.0` (and its `types`) to
    /// `linker`.
    ConnectionsView as HasMessaging: consumer, types
}
