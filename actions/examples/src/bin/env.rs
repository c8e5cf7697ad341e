//! Returns the activation context and the whole environment.
use luge_action::{Error, Value, json};

fn context(_: Value) -> Result<Value, Error> {
    let var = |k: &str| std::env::var(k).ok();
    let env: serde_json::Map<String, Value> = std::env::vars()
        .map(|(k, v)| (k, Value::String(v)))
        .collect();
    Ok(json!({
        "api_host": var("__OW_API_HOST"),
        "api_key": var("__OW_API_KEY"),
        "namespace": var("__OW_NAMESPACE"),
        "action_name": var("__OW_ACTION_NAME"),
        "action_version": var("__OW_ACTION_VERSION"),
        "activation_id": var("__OW_ACTIVATION_ID"),
        "deadline": var("__OW_DEADLINE"),
        "args": std::env::args().collect::<Vec<_>>(),
        "env": env,
    }))
}

use luge_action::serde_json;
luge_action::main!(context);
