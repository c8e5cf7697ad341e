//! Returns a JSON array, which is not an OpenWhisk result.
use luge_action::{Error, Value, json};

fn not_a_dict(_: Value) -> Result<Value, Error> {
    Ok(json!(["not", "a", "dictionary"]))
}

luge_action::main!(not_a_dict);
