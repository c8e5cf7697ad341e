//! Returns its parameters; logs to both streams (OpenWhisk's echo test).
//! With `log_lines: N` it also prints `line 0` .. `line N-1` to stdout, so
//! that log collection can be checked for order and completeness.
use luge_action::{Error, Value};

fn echo(params: Value) -> Result<Value, Error> {
    println!("hello stdout");
    for i in 0..params["log_lines"].as_u64().unwrap_or(0).min(10_000) {
        println!("line {i}");
    }
    eprintln!("hello stderr");
    Ok(params)
}

luge_action::main!(echo);
