//! CPU-bound workload of the WOW paper: BLAKE3 over a buffer, `iterations` times.
use luge_action::{Error, Value, json};

fn hash(params: Value) -> Result<Value, Error> {
    let iterations = params["iterations"].as_u64().unwrap_or(1000);
    let mut digest = *blake3::hash(params.to_string().as_bytes()).as_bytes();
    let mut buffer = [0u8; 1024];
    for _ in 0..iterations {
        for chunk in buffer.chunks_mut(32) {
            chunk.copy_from_slice(&digest);
        }
        digest = *blake3::hash(&buffer).as_bytes();
    }
    let hex: String = digest.iter().map(|b| format!("{b:02x}")).collect();
    Ok(json!({ "iterations": iterations, "digest": hex }))
}

luge_action::main!(hash);
