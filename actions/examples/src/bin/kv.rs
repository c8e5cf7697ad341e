//! Runs a list of state operations and answers with each one's result:
//! `{"ops": [{"op": "set", "key": "k", "value": "v", "global": false}, ...]}`
//! -> `{"results": [...]}`. Ops: get, set, delete, append, cas (`old`,
//! absent = only if absent), add (`delta`), pull, push, lock (`lease_ms`),
//! unlock, and, to test what the host does when an invocation holding a
//! lock ends badly, trap and spin. A failed op is `{"error": "..."}`.
use luge_action::state::{self, Tier};
use luge_action::{Error, Value, json};

fn op(o: &Value) -> Result<Value, Error> {
    let key = o["key"].as_str().unwrap_or_default();
    let tier = if o["global"].as_bool() == Some(true) {
        Tier::Global
    } else {
        Tier::Local
    };
    let text = |field: &str| o[field].as_str().map(str::as_bytes);
    Ok(match o["op"].as_str().unwrap_or_default() {
        "get" => match state::get(key, tier)? {
            Some(v) => json!(String::from_utf8_lossy(&v)),
            None => Value::Null,
        },
        "size" => json!(state::get(key, tier)?.map(|v| v.len())),
        "set" => {
            let value = match o["repeat"].as_u64() {
                Some(n) => vec![b'x'; n as usize],
                None => text("value").unwrap_or_default().to_vec(),
            };
            state::set(key, &value, tier)?;
            json!("ok")
        }
        "delete" => json!(state::delete(key, tier)?),
        "append" => json!(state::append(key, text("value").unwrap_or_default(), tier)?),
        "cas" => json!(state::cas(
            key,
            text("old"),
            text("new").unwrap_or_default(),
            tier
        )?),
        "add" => json!(state::add(key, o["delta"].as_i64().unwrap_or(1), tier)?),
        "pull" => json!(state::pull(key).map(|()| "ok")?),
        "push" => json!(state::push(key).map(|()| "ok")?),
        "lock" => {
            let lease = o["lease_ms"].as_u64().unwrap_or(10_000) as u32;
            json!(state::lock(key, lease).map(|()| "ok")?)
        }
        "unlock" => json!(state::unlock(key).map(|()| "ok")?),
        "sleep" => {
            std::thread::sleep(std::time::Duration::from_millis(
                o["ms"].as_u64().unwrap_or(0),
            ));
            json!("ok")
        }
        "trap" => std::process::abort(),
        "spin" => loop {
            std::hint::black_box(0u64);
        },
        other => return Err(format!("unknown op {other:?}").into()),
    })
}

fn kv(params: Value) -> Result<Value, Error> {
    let ops = params["ops"].as_array().ok_or("missing ops")?;
    let results: Vec<Value> = ops
        .iter()
        .map(|o| op(o).unwrap_or_else(|Error(e)| json!({ "error": e })))
        .collect();
    Ok(json!({ "results": results }))
}

luge_action::main!(kv);
