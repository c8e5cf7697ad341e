//! A shared counter incremented with a compare-and-swap loop (Pyrosome's
//! KV with CAS): `{"key": "counters/hits", "n": 100, "global": false}`
//! reads the counter, writes it plus one only if nobody wrote in between,
//! and retries otherwise, `n` times; answers the last value it wrote and
//! how many of its swaps lost a race.
use luge_action::state::{self, Tier};
use luge_action::{Error, Value, json};

fn counter(params: Value) -> Result<Value, Error> {
    let key = params["key"].as_str().unwrap_or("counters/hits");
    let n = params["n"].as_u64().unwrap_or(1);
    let tier = if params["global"].as_bool() == Some(true) {
        Tier::Global
    } else {
        Tier::Local
    };
    let (mut last, mut retries) = (0u64, 0u64);
    for _ in 0..n {
        loop {
            let old = state::get(key, tier)?;
            let value = match &old {
                Some(text) => String::from_utf8_lossy(text).parse::<u64>().unwrap_or(0),
                None => 0,
            };
            let new = (value + 1).to_string();
            if state::cas(key, old.as_deref(), new.as_bytes(), tier)? {
                last = value + 1;
                break;
            }
            retries += 1;
        }
    }
    Ok(json!({ "value": last, "retries": retries }))
}

luge_action::main!(counter);
