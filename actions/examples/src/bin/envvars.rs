//! Returns the environment as a flat object, `{"NAME": "value", ...}`
//! (OpenWhisk's "export environment variables before initialization" test).
use luge_action::{Error, Value};

fn envvars(_: Value) -> Result<Value, Error> {
    Ok(Value::Object(
        std::env::vars()
            .map(|(k, v)| (k, Value::String(v)))
            .collect(),
    ))
}

luge_action::main!(envvars);
