//! Misbehaves on request: `mode` is `trap` (unreachable), `panic`, `exit`
//! (status 3 after a message on stderr), or `recurse` (overflows the stack).
use luge_action::{Error, Value};

fn fail(params: Value) -> Result<Value, Error> {
    match params["mode"].as_str().unwrap_or("trap") {
        "panic" => panic!("the action panicked on purpose"),
        "exit" => {
            eprintln!("giving up with status 3");
            std::process::exit(3)
        }
        "recurse" => Ok(Value::from(depth(1))),
        _ => std::process::abort(),
    }
}

/// Recurses until the engine's stack limit stops it: every frame keeps a
/// buffer live across the call, so the optimizer cannot flatten it.
#[allow(unconditional_recursion)] // on purpose: the stack limit ends it
fn depth(n: u64) -> u64 {
    let frame = std::hint::black_box([n; 64]);
    depth(frame[(n % 64) as usize] + 1) + frame[0]
}

luge_action::main!(fail);
