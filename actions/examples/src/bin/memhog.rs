//! Allocates and touches `mb` MiB (default 1024), one MiB at a time.
use luge_action::{Error, Value, json};

fn hog(params: Value) -> Result<Value, Error> {
    let mb = params["mb"].as_u64().unwrap_or(1024);
    let mut blocks: Vec<Vec<u8>> = Vec::new();
    for i in 0..mb {
        blocks.push(vec![i as u8; 1 << 20]);
    }
    Ok(json!({ "allocated_mb": blocks.len() }))
}

luge_action::main!(hog);
