//! Misbehaves on request: `mode` is `trap` (unreachable), `panic`, or `exit`
//! (status 3 after a message on stderr).
use luge_action::{Error, Value};

fn fail(params: Value) -> Result<Value, Error> {
    match params["mode"].as_str().unwrap_or("trap") {
        "panic" => panic!("the action panicked on purpose"),
        "exit" => {
            eprintln!("giving up with status 3");
            std::process::exit(3)
        }
        _ => std::process::abort(),
    }
}

luge_action::main!(fail);
