//! Reads (or with `write`, writes) `path` inside the granted directories.
use luge_action::{Error, Value, json};

fn files(params: Value) -> Result<Value, Error> {
    let path = params["path"].as_str().ok_or("missing path")?;
    if let Some(content) = params["write"].as_str() {
        std::fs::write(path, content).map_err(|e| format!("write {path}: {e}"))?;
        return Ok(json!({ "written": content.len() }));
    }
    let content = std::fs::read_to_string(path).map_err(|e| format!("read {path}: {e}"))?;
    Ok(json!({ "content": content }))
}

luge_action::main!(files);
