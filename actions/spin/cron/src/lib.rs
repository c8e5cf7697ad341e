//! A cron component: the world `fermyon:spin-cron@2.0.0` that
//! spin-trigger-cron's `#[cron_component]` exports (spin-cron-sdk is not
//! on crates.io; this generates the same bindings from its WIT, in
//! Luge's WIT root). Each tick logs `cron tick TIMESTAMP` on stderr, and
//! fails when the tick's time is more than 10 s from the wall clock.

mod bindings {
    spin_sdk::wit_bindgen::generate!({
        world: "luge:worlds/cron-trigger",
        path: "../../../wit",
        runtime_path: "::spin_sdk::wit_bindgen::rt",
        generate_all,
    });
}

use bindings::fermyon::spin_cron::cron_types::{Error, Metadata};

struct Cron;

impl bindings::Guest for Cron {
    fn handle_cron_event(metadata: Metadata) -> Result<(), Error> {
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs());
        eprintln!("cron tick {}", metadata.timestamp);
        if now.abs_diff(metadata.timestamp) > 10 {
            return Err(Error::Other(format!(
                "tick {} is {} s from now",
                metadata.timestamp,
                now.abs_diff(metadata.timestamp)
            )));
        }
        Ok(())
    }
}

bindings::export!(Cron with_types_in bindings);
