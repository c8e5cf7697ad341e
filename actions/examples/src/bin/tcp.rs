//! Opens TCP connections through `wasi:sockets` (Rust's std on
//! wasm32-wasip2): `{"addr": "IP:PORT"}` sends `ping\n` and answers
//! `{"reply": "..."}` with what came back before the peer closed;
//! `{"addr": ..., "hold": N}` opens N connections and keeps them all,
//! answering `{"held": N}` or, at the first refusal, `{"held": K,
//! "error": "..."}`. On wasm32-wasip1 (no sockets) every connect fails.
use std::io::{Read as _, Write as _};
use std::net::TcpStream;

use luge_action::{Error, Value, json};

fn tcp(args: Value) -> Result<Value, Error> {
    let addr = args["addr"].as_str().unwrap_or_default().to_owned();
    if let Some(hold) = args["hold"].as_u64() {
        let mut held = Vec::new();
        for _ in 0..hold {
            match TcpStream::connect(&addr) {
                Ok(stream) => held.push(stream),
                Err(e) => return Ok(json!({"held": held.len(), "error": e.to_string()})),
            }
        }
        return Ok(json!({"held": held.len()}));
    }
    let mut stream = TcpStream::connect(&addr)?;
    stream.write_all(b"ping\n")?;
    let mut reply = String::new();
    stream.read_to_string(&mut reply)?;
    Ok(json!({"reply": reply}))
}

luge_action::main!(tcp);
