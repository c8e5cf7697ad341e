//! Echo under a non-`main` entry point: the export `niam`.
use luge_action::{Error, Value};

fn echo(params: Value) -> Result<Value, Error> {
    Ok(params)
}

luge_action::export!(niam => echo);

fn main() {
    println!("{{\"error\":\"this action's entry point is niam\"}}");
}
