//! Returns its parameters; logs to both streams (OpenWhisk's echo test).
use luge_action::{Error, Value};

fn echo(params: Value) -> Result<Value, Error> {
    println!("hello stdout");
    eprintln!("hello stderr");
    Ok(params)
}

luge_action::main!(echo);
