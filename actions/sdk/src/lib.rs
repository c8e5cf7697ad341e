//! Write a Luge action in Rust in one line.
//!
//! A Luge function is a WASI command: JSON parameters on stdin, the result as
//! the last line of stdout, logs on stderr (and on earlier stdout lines). This
//! crate does that plumbing so an action is just a function:
//!
//! ```no_run
//! use luge_action::{Value, Error, json};
//!
//! fn greet(params: Value) -> Result<Value, Error> {
//!     let name = params["name"].as_str().unwrap_or("world");
//!     Ok(json!({ "greeting": format!("Hello, {name}!") }))
//! }
//!
//! luge_action::main!(greet);
//! ```
//!
//! An entry point other than `main` (OpenWhisk's `main` field) is an exported
//! function: `luge_action::export!(niam => greet);`.
#![deny(missing_docs)]

use std::io::{Read, Write};

pub use serde_json::{self, Value, json};

/// An action error: reported to OpenWhisk as the result `{"error": message}`.
#[derive(Debug)]
pub struct Error(pub String);

impl<E: std::fmt::Display> From<E> for Error {
    fn from(e: E) -> Self {
        Self(e.to_string())
    }
}

/// Reads the parameters, runs `handler`, writes its result.
///
/// A result that is not a JSON object is written as-is: the runtime, not the
/// SDK, decides that it is not a dictionary.
pub fn run(handler: fn(Value) -> Result<Value, Error>) {
    let mut input = Vec::new();
    let params = match std::io::stdin().read_to_end(&mut input) {
        Ok(_) if input.iter().all(u8::is_ascii_whitespace) => Value::Object(Default::default()),
        Ok(_) => match serde_json::from_slice(&input) {
            Ok(v) => v,
            Err(e) => return emit(&json!({ "error": format!("parameters are not JSON: {e}") })),
        },
        Err(e) => return emit(&json!({ "error": format!("cannot read parameters: {e}") })),
    };
    match handler(params) {
        Ok(result) => emit(&result),
        Err(Error(message)) => emit(&json!({ "error": message })),
    }
}

fn emit(result: &Value) {
    let mut out = std::io::stdout().lock();
    // Newline first: the result must be a line of its own even if the
    // action printed a partial line.
    let _ = writeln!(out, "\n{result}");
    let _ = out.flush();
}

/// Makes `handler` the action's `main`.
#[macro_export]
macro_rules! main {
    ($handler:path) => {
        fn main() {
            $crate::run($handler)
        }
    };
}

/// Exports `handler` as the entry point `name` (OpenWhisk's `main` field).
#[macro_export]
macro_rules! export {
    ($name:ident => $handler:path) => {
        #[unsafe(no_mangle)]
        pub extern "C" fn $name() {
            $crate::run($handler)
        }
    };
}
