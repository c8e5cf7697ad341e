//! For benchmarks: `n` state operations of one kind in a loop,
//! `{"op": "get"|"set"|"cas", "size": 100, "n": 1000, "global": false}` on
//! the key `bench` (private). The host measures the invocation with `n` and
//! with 0; the difference over `n` is one operation from inside a sandbox.
use luge_action::state::{self, Tier};
use luge_action::{Error, Value, json};

fn bench(params: Value) -> Result<Value, Error> {
    let n = params["n"].as_u64().unwrap_or(0);
    let size = params["size"].as_u64().unwrap_or(100) as usize;
    let tier = if params["global"].as_bool() == Some(true) {
        Tier::Global
    } else {
        Tier::Local
    };
    let (a, b) = (vec![b'a'; size], vec![b'b'; size]);
    state::set("bench", &a, tier)?;
    let mut buf = Vec::with_capacity(size);
    match params["op"].as_str().unwrap_or("get") {
        "get" => {
            for _ in 0..n {
                state::get_into("bench", &mut buf, tier)?;
            }
        }
        "set" => {
            for _ in 0..n {
                state::set("bench", &a, tier)?;
            }
        }
        "cas" => {
            for i in 0..n {
                let (old, new) = if i % 2 == 0 { (&a, &b) } else { (&b, &a) };
                if !state::cas("bench", Some(old), new, tier)? {
                    return Err("lost a swap with no one else writing".into());
                }
            }
        }
        other => return Err(format!("unknown op {other:?}").into()),
    }
    Ok(json!({ "n": n }))
}

luge_action::main!(bench);
