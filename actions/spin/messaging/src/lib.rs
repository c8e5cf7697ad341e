//! A wasmCloud messaging component: it exports
//! `wasmcloud:messaging/handler@0.2.0` and imports
//! `wasmcloud:messaging/consumer@0.2.0`, as wasmCloud's messaging
//! examples do, and handles each broker message by its body:
//!
//! - `fail` is refused with an error (the message fails);
//! - `ask:SUBJECT:TEXT` requests TEXT on SUBJECT and publishes the answer
//!   on `answers.` and the message's subject;
//! - `send:SUBJECT` publishes `sent` on SUBJECT, its error the message's;
//! - anything else is handled, its subject and length said on stdout.

mod bindings {
    spin_sdk::wit_bindgen::generate!({
        world: "luge:worlds/messaging-handler",
        path: "../../../wit",
        runtime_path: "::spin_sdk::wit_bindgen::rt",
        generate_all,
    });
}

use bindings::exports::wasmcloud::messaging::handler::Guest;
use bindings::wasmcloud::messaging::consumer;
use bindings::wasmcloud::messaging::types::BrokerMessage;

struct Handler;

bindings::export!(Handler with_types_in bindings);

impl Guest for Handler {
    fn handle_message(msg: BrokerMessage) -> Result<(), String> {
        let body = String::from_utf8_lossy(&msg.body).into_owned();
        if body == "fail" {
            return Err(format!("refused a message on {}", msg.subject));
        }
        if let Some(rest) = body.strip_prefix("ask:") {
            let (subject, text) = rest.split_once(':').unwrap_or((rest, ""));
            let answer = consumer::request(subject, text.as_bytes(), 10_000)?;
            return consumer::publish(&BrokerMessage {
                subject: format!("answers.{}", msg.subject),
                body: answer.body,
                reply_to: None,
            });
        }
        if let Some(subject) = body.strip_prefix("send:") {
            return consumer::publish(&BrokerMessage {
                subject: subject.to_owned(),
                body: b"sent".to_vec(),
                reply_to: None,
            });
        }
        println!("{} {} bytes", msg.subject, msg.body.len());
        Ok(())
    }
}
