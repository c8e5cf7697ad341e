//! A Redis subscriber in Spin 2's shape: it exports the unversioned
//! `fermyon:spin/inbound-redis` that spin-sdk 2 and 3's
//! `#[redis_component]` exports (a plain, synchronous function), built
//! here for `wasm32-wasip2` from Luge's WIT root. Each message is logged
//! on stderr as `spin 2 redis message: TEXT`; `fail` returns the error.

mod bindings {
    spin_sdk::wit_bindgen::generate!({
        world: "luge:worlds/redis-trigger-spin2",
        path: "../../../wit",
        runtime_path: "::spin_sdk::wit_bindgen::rt",
        generate_all,
    });
}

use bindings::exports::fermyon::spin::inbound_redis::{Guest, Payload};
use bindings::fermyon::spin::redis_types::Error;

struct Subscriber;

impl Guest for Subscriber {
    fn handle_message(message: Payload) -> Result<(), Error> {
        let text = String::from_utf8_lossy(&message);
        eprintln!("spin 2 redis message: {text}");
        if text == "fail" {
            return Err(Error::Error);
        }
        Ok(())
    }
}

bindings::export!(Subscriber with_types_in bindings);
