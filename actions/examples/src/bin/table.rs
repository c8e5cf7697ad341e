//! A read-mostly table shared by every sandbox of the host: the first
//! invocation builds it (here: the squares of 0..`size`, one per line) and
//! stores it once (compare-and-swap "only if absent", so concurrent first
//! invocations do not both write it); every invocation then reads it from
//! the local tier instead of rebuilding it. `{"lookup": 12}` answers
//! `{"value": 144, "built": false}`.
use luge_action::state::{self, Tier};
use luge_action::{Error, Value, json};

const KEY: &str = "tables/squares";

fn table(params: Value) -> Result<Value, Error> {
    let size = params["size"].as_u64().unwrap_or(10_000);
    let mut built = false;
    let text = match state::get(KEY, Tier::Local)? {
        Some(text) => text,
        None => {
            let text: String = (0..size).map(|i| format!("{}\n", i * i)).collect();
            built = state::cas(KEY, None, text.as_bytes(), Tier::Local)?;
            text.into_bytes()
        }
    };
    let i = params["lookup"].as_u64().unwrap_or(0) as usize;
    let value = String::from_utf8_lossy(&text)
        .lines()
        .nth(i)
        .and_then(|l| l.parse::<u64>().ok());
    Ok(json!({ "value": value, "built": built, "bytes": text.len() }))
}

luge_action::main!(table);
