//! A queue component of spin-trigger-sqs: it exports the world
//! `spin:sqs@3.0.0` (`handle-queue-message`, an `async func`), as that
//! plugin's example guest does, from its WIT in Luge's WIT root. Each
//! message, by its body:
//!
//! - `fail`: returns an error;
//! - `leave`: leaves it on the queue (to be delivered again);
//! - anything else: deletes it, after saying on stderr its id, its text
//!   and its attributes' names.

mod bindings {
    spin_sdk::wit_bindgen::generate!({
        world: "luge:worlds/sqs-trigger",
        path: "../../../wit",
        runtime_path: "::spin_sdk::wit_bindgen::rt",
        generate_all,
    });
}

use bindings::spin::sqs::sqs_types::{Error, Message, MessageAction};

struct Queue;

impl bindings::Guest for Queue {
    async fn handle_queue_message(message: Message) -> Result<MessageAction, Error> {
        let body = message.body.unwrap_or_default();
        match body.as_str() {
            "fail" => Err(Error::Other("asked to fail".to_owned())),
            "leave" => Ok(MessageAction::Leave),
            _ => {
                let names: Vec<&str> = message
                    .message_attributes
                    .iter()
                    .map(|a| a.name.as_str())
                    .collect();
                eprintln!(
                    "sqs message {} ({}): {body}",
                    message.id.as_deref().unwrap_or("-"),
                    names.join(",")
                );
                Ok(MessageAction::Delete)
            }
        }
    }
}

bindings::export!(Queue with_types_in bindings);
