//! Recursive Fibonacci of `n` (default 25).
use luge_action::{Error, Value, json};

fn fib(n: u64) -> u64 {
    if n < 2 { n } else { fib(n - 1) + fib(n - 2) }
}

fn handler(params: Value) -> Result<Value, Error> {
    let n = params["n"].as_u64().unwrap_or(25).min(45);
    Ok(json!({ "n": n, "fib": fib(n) }))
}

luge_action::main!(handler);
