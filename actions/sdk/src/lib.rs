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

/// Calls to other functions of the host (host API v1, import module
/// `luge`), Faasm's chain calls: start several, then wait for each.
///
/// ```no_run
/// use luge_action::{call, json};
///
/// let pending: Vec<_> = (0..4)
///     .map(|i| call::start("fib", &json!({ "n": 20 + i })))
///     .collect();
/// for p in pending {
///     let result = p.and_then(call::Call::json);
/// }
/// ```
pub mod call {
    use super::{Error, Value};

    #[cfg(target_arch = "wasm32")]
    #[link(wasm_import_module = "luge")]
    unsafe extern "C" {
        fn call_start(name_ptr: *const u8, name_len: i32, in_ptr: *const u8, in_len: i32) -> i64;
        fn call_wait(handle: i64) -> i32;
        fn call_output(handle: i64, buf_ptr: *mut u8, buf_len: i32) -> i64;
    }

    /// Where calls do not exist (a native build of an example): refused.
    #[cfg(not(target_arch = "wasm32"))]
    unsafe fn call_start(_: *const u8, _: i32, _: *const u8, _: i32) -> i64 {
        -2
    }
    #[cfg(not(target_arch = "wasm32"))]
    unsafe fn call_wait(_: i64) -> i32 {
        -8
    }
    #[cfg(not(target_arch = "wasm32"))]
    unsafe fn call_output(_: i64, _: *mut u8, _: i32) -> i64 {
        -8
    }

    /// What a host API v1 code means, for messages.
    pub fn describe(code: i64) -> &'static str {
        match code {
            0 => "success",
            1 => "failed (non-zero exit)",
            2 => "trapped",
            3 => "time limit",
            4 => "memory limit",
            -1 => "no function of that name",
            -2 => "not granted (not in this function's `calls`)",
            -3 => "bad argument",
            -4 => "over the calls or bytes an invocation may have",
            -6 => "the host is overloaded",
            -7 => "calls nest too deep",
            -8 => "invalid handle",
            _ => "unknown status",
        }
    }

    /// A started call.
    #[derive(Debug)]
    pub struct Call {
        name: String,
        handle: i64,
    }

    /// Starts function `name` on `input` (JSON, as its stdin) at once.
    pub fn start(name: &str, input: &Value) -> Result<Call, Error> {
        start_bytes(name, input.to_string().as_bytes())
    }

    /// Starts function `name` with `input` as its stdin.
    pub fn start_bytes(name: &str, input: &[u8]) -> Result<Call, Error> {
        let len = |n: usize| i32::try_from(n).map_err(|_| Error("call input too large".into()));
        // SAFETY: both pointers and lengths describe live slices the host
        // only reads during the call.
        let handle = unsafe {
            call_start(name.as_ptr(), len(name.len())?, input.as_ptr(), len(input.len())?)
        };
        if handle < 0 {
            return Err(Error(format!("call to {name} refused: {}", describe(handle))));
        }
        Ok(Call {
            name: name.to_owned(),
            handle,
        })
    }

    impl Call {
        /// Waits for the callee and returns its whole stdout; a callee that
        /// did not succeed is an error naming it and its status.
        pub fn wait(self) -> Result<Vec<u8>, Error> {
            // SAFETY: a plain host call on a handle this function got.
            let status = unsafe { call_wait(self.handle) };
            if status < 0 {
                return Err(Error(format!("call to {} refused: {}", self.name, describe(status.into()))));
            }
            // SAFETY: a null buffer of length 0 asks only for the length.
            let len = unsafe { call_output(self.handle, std::ptr::null_mut(), 0) };
            let mut output = vec![0u8; usize::try_from(len).unwrap_or(0)];
            // SAFETY: `output` is a live buffer of exactly that length.
            unsafe { call_output(self.handle, output.as_mut_ptr(), output.len() as i32) };
            if status != 0 {
                return Err(Error(format!("{} {}", self.name, describe(status.into()))));
            }
            Ok(output)
        }

        /// Waits and parses the callee's result (the last line of its stdout).
        pub fn json(self) -> Result<Value, Error> {
            let output = self.wait()?;
            let text = String::from_utf8_lossy(&output);
            let line = text.lines().rev().find(|l| !l.trim().is_empty()).unwrap_or("null");
            Ok(serde_json::from_str(line)?)
        }
    }

    /// Calls `name` and waits for its result.
    pub fn call(name: &str, input: &Value) -> Result<Value, Error> {
        start(name, input)?.json()
    }

    /// Starts every call at once, then waits for each: the results in the
    /// order of `calls`.
    pub fn call_all(calls: &[(&str, Value)]) -> Vec<Result<Value, Error>> {
        let started: Vec<_> = calls.iter().map(|(name, input)| start(name, input)).collect();
        started.into_iter().map(|c| c.and_then(Call::json)).collect()
    }
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
