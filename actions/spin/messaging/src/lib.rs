//! A wasmCloud messaging component: it exports
//! `wasmcloud:messaging/handler@0.2.0`, as wasmCloud's `messaging-handler`
//! examples do, and handles each broker message by its body: `fail` is
//! refused with an error (the message fails), anything else is handled,
//! its subject and length said on stdout.

mod bindings {
    spin_sdk::wit_bindgen::generate!({
        world: "luge:worlds/messaging-handler",
        path: "../../../wit",
        runtime_path: "::spin_sdk::wit_bindgen::rt",
        generate_all,
    });
}

use bindings::exports::wasmcloud::messaging::handler::Guest;
use bindings::wasmcloud::messaging::types::BrokerMessage;

struct Handler;

bindings::export!(Handler with_types_in bindings);

impl Guest for Handler {
    fn handle_message(msg: BrokerMessage) -> Result<(), String> {
        if msg.body == b"fail" {
            return Err(format!("refused a message on {}", msg.subject));
        }
        println!("{} {} bytes", msg.subject, msg.body.len());
        Ok(())
    }
}
