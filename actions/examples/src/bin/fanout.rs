//! Fan-out and fan-in through host calls: `{"calls": [{"name": "fib",
//! "input": {"n": 20}}, ...]}` starts every call at once, then waits for
//! each, and answers `{"results": [...]}` in the order asked; a call that
//! failed or was refused is `{"error": "..."}` in its place. A call's input
//! may itself be a `fanout` request: that is how call graphs nest.
use luge_action::{Error, Value, call, json};

fn fanout(params: Value) -> Result<Value, Error> {
    let calls = params["calls"].as_array().ok_or("missing calls")?;
    let started: Vec<_> = calls
        .iter()
        .map(|c| {
            let name = c["name"].as_str().unwrap_or_default();
            call::start(name, &c["input"])
        })
        .collect();
    let results: Vec<Value> = started
        .into_iter()
        .map(|c| match c.and_then(call::Call::json) {
            Ok(value) => value,
            Err(Error(message)) => json!({ "error": message }),
        })
        .collect();
    Ok(json!({ "results": results }))
}

luge_action::main!(fanout);
