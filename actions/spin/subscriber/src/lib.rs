//! A Redis subscriber as users write them for Spin 4 (spin-sdk 7's
//! `#[redis_subscriber]`), for `[[trigger.redis]]`. Each message:
//!
//! - `fail`: returns an error (the trigger counts it failed);
//! - `sleep:MS`: holds its sandbox MS milliseconds, then succeeds (to
//!   fill a trigger's bound of events in flight);
//! - `echo:TEXT`: publishes TEXT on the channel `acks` of the Redis
//!   server at the `redis_address` variable (`spin:redis`, under a
//!   `redis://` grant): luge-bench's publish-to-handler round trip;
//! - anything else: stored as `last-message` in the app's `default`
//!   key-value store, `messages` counted there, and logged on stderr.

use spin_sdk::{key_value, redis, redis_subscriber, variables};

#[redis_subscriber]
async fn on_message(message: Vec<u8>) -> Result<(), String> {
    let text = String::from_utf8_lossy(&message).into_owned();
    if text == "fail" {
        return Err("asked to fail".to_owned());
    }
    if let Some(rest) = text.strip_prefix("echo:") {
        let address = variables::get("redis_address")
            .await
            .map_err(|e| format!("{e:?}"))?;
        let connection = redis::Connection::open(address)
            .await
            .map_err(|e| format!("{e:?}"))?;
        return connection
            .publish("acks".to_owned(), rest.as_bytes().to_vec())
            .await
            .map_err(|e| format!("{e:?}"));
    }
    if let Some(ms) = text.strip_prefix("sleep:") {
        let ms: u64 = ms.parse().map_err(|_| format!("bad sleep {ms:?}"))?;
        std::thread::sleep(std::time::Duration::from_millis(ms));
        return Ok(());
    }
    let store = key_value::Store::open("default")
        .await
        .map_err(|e| format!("{e:?}"))?;
    store
        .set("last-message", &message)
        .await
        .map_err(|e| format!("{e:?}"))?;
    let count = match store.get("messages").await.map_err(|e| format!("{e:?}"))? {
        Some(bytes) => String::from_utf8_lossy(&bytes).parse::<u64>().unwrap_or(0),
        None => 0,
    };
    store
        .set("messages", (count + 1).to_string().as_bytes())
        .await
        .map_err(|e| format!("{e:?}"))?;
    eprintln!("redis message: {text}");
    Ok(())
}
