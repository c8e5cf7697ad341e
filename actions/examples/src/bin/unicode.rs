//! `{ delimiter }` -> `{ winter: "❄ " + delimiter + " ❄" }`, logged too.
use luge_action::{Error, Value, json};

fn winter(params: Value) -> Result<Value, Error> {
    let delimiter = params["delimiter"].as_str().unwrap_or("☃");
    let msg = format!("❄ {} ❄", delimiter.replace('❄', "☃"));
    println!("{msg}");
    Ok(json!({ "winter": msg }))
}

luge_action::main!(winter);
