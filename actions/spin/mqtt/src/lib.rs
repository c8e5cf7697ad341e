//! An MQTT component: the world `spin:mqtt-trigger@3.0.0` that
//! spin-trigger-mqtt's `#[mqtt_component]` exports (an `async func`;
//! spin-mqtt-sdk is not on crates.io, so this generates the same bindings
//! from its WIT, in Luge's WIT root). Each message:
//!
//! - `fail`: returns an error;
//! - `echo:TEXT`: publishes TEXT on the topic `acks` (QoS 0) of the
//!   broker at the `mqtt_address` variable (`spin:mqtt`, under an
//!   `mqtt://` grant): luge-bench's publish-to-handler round trip;
//! - `sleep:MS:KEY`: waits MS milliseconds, then sets KEY to `done` in the
//!   app's `default` key-value store (a message in flight for a while);
//! - anything else: stored as `last-mqtt` (`TOPIC MESSAGE`) in that store,
//!   and logged on stderr.

mod bindings {
    spin_sdk::wit_bindgen::generate!({
        world: "luge:worlds/mqtt-trigger",
        path: "../../../wit",
        runtime_path: "::spin_sdk::wit_bindgen::rt",
        generate_all,
    });
}

use bindings::spin::mqtt_trigger::spin_mqtt_types::{Error, Metadata};
use spin_sdk::{key_value, mqtt, variables};

struct Mqtt;

async fn set(key: &str, value: &[u8]) -> Result<(), Error> {
    let store = key_value::Store::open("default")
        .await
        .map_err(|e| Error::Other(format!("{e:?}")))?;
    store
        .set(key, value)
        .await
        .map_err(|e| Error::Other(format!("{e:?}")))
}

impl bindings::Guest for Mqtt {
    async fn handle_message(message: Vec<u8>, metadata: Metadata) -> Result<(), Error> {
        let text = String::from_utf8_lossy(&message).into_owned();
        if text == "fail" {
            return Err(Error::Other("asked to fail".to_owned()));
        }
        if let Some(rest) = text.strip_prefix("echo:") {
            let other = |e: String| Error::Other(e);
            let address = variables::get("mqtt_address")
                .await
                .map_err(|e| other(format!("{e:?}")))?;
            let connection = mqtt::Connection::open(address, "", "", 30)
                .await
                .map_err(|e| other(format!("{e:?}")))?;
            return connection
                .publish("acks", rest.as_bytes().to_vec(), mqtt::Qos::AtMostOnce)
                .await
                .map_err(|e| other(format!("{e:?}")));
        }
        if let Some(rest) = text.strip_prefix("sleep:") {
            let (ms, key) = rest.split_once(':').unwrap_or((rest, "slept"));
            let ms: u64 = ms
                .parse()
                .map_err(|_| Error::Other(format!("bad sleep {ms:?}")))?;
            std::thread::sleep(std::time::Duration::from_millis(ms));
            return set(key, b"done").await;
        }
        set("last-mqtt", format!("{} {text}", metadata.topic).as_bytes()).await?;
        eprintln!("mqtt message on {}: {text}", metadata.topic);
        Ok(())
    }
}

bindings::export!(Mqtt with_types_in bindings);
