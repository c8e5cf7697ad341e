//! A session store: `{"session": "abc", "put": {"cart": 3}}` merges fields
//! into the session's record, `{"session": "abc"}` reads it. Records live
//! in the granted namespace `sessions`, in the global tier when asked
//! (`"global": true`, shared by hosts), as JSON.
use luge_action::state::{self, Tier};
use luge_action::{Error, Value, json};

fn session(params: Value) -> Result<Value, Error> {
    let id = params["session"].as_str().ok_or("missing session")?;
    let key = format!("sessions/{id}");
    let tier = if params["global"].as_bool() == Some(true) {
        Tier::Global
    } else {
        Tier::Local
    };
    loop {
        let old = state::get(&key, tier)?;
        let mut record: Value = match &old {
            Some(bytes) => luge_action::serde_json::from_slice(bytes)?,
            None => json!({}),
        };
        let Some(put) = params["put"].as_object() else {
            return Ok(json!({ "session": record }));
        };
        for (field, value) in put {
            record[field] = value.clone();
        }
        // Only if nobody changed it meanwhile; else merge again.
        if state::cas(&key, old.as_deref(), record.to_string().as_bytes(), tier)? {
            return Ok(json!({ "session": record }));
        }
    }
}

luge_action::main!(session);
