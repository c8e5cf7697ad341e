//! I/O-bound workload: sleeps `ms` milliseconds (default 300) in the host.
use luge_action::{Error, Value, json};

fn nap(params: Value) -> Result<Value, Error> {
    let ms = params["ms"].as_u64().unwrap_or(300);
    std::thread::sleep(std::time::Duration::from_millis(ms));
    Ok(json!({ "slept_ms": ms }))
}

luge_action::main!(nap);
