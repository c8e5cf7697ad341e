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
            call_start(
                name.as_ptr(),
                len(name.len())?,
                input.as_ptr(),
                len(input.len())?,
            )
        };
        if handle < 0 {
            return Err(Error(format!(
                "call to {name} refused: {}",
                describe(handle)
            )));
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
                return Err(Error(format!(
                    "call to {} refused: {}",
                    self.name,
                    describe(status.into())
                )));
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
            let line = text
                .lines()
                .rev()
                .find(|l| !l.trim().is_empty())
                .unwrap_or("null");
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
        let started: Vec<_> = calls
            .iter()
            .map(|(name, input)| start(name, input))
            .collect();
        started
            .into_iter()
            .map(|c| c.and_then(Call::json))
            .collect()
    }
}

/// Shared state (host API v1's `state_*`): values are bytes, keys are
/// strings; `ns/rest` is in namespace `ns` (which the function's metadata
/// must grant in `state = [...]`), a key without `/` in the function's
/// private namespace. [`Tier::Global`] is the global tier (Redis, when the
/// host has one).
pub mod state {
    use super::Error;

    #[cfg(target_arch = "wasm32")]
    #[link(wasm_import_module = "luge")]
    unsafe extern "C" {
        fn state_get(k: *const u8, kl: i32, buf: *mut u8, bl: i32, flags: i32) -> i64;
        fn state_set(k: *const u8, kl: i32, v: *const u8, vl: i32, flags: i32) -> i32;
        fn state_delete(k: *const u8, kl: i32, flags: i32) -> i32;
        fn state_append(k: *const u8, kl: i32, v: *const u8, vl: i32, flags: i32) -> i64;
        fn state_cas(
            k: *const u8,
            kl: i32,
            o: *const u8,
            ol: i32,
            n: *const u8,
            nl: i32,
            flags: i32,
        ) -> i32;
        fn state_add(k: *const u8, kl: i32, delta: i64, flags: i32) -> i64;
        fn state_pull(k: *const u8, kl: i32) -> i32;
        fn state_push(k: *const u8, kl: i32) -> i32;
        fn state_lock(k: *const u8, kl: i32, lease_ms: i32) -> i32;
        fn state_unlock(k: *const u8, kl: i32) -> i32;
    }

    // Where state does not exist (a native build of an example): refused.
    #[cfg(not(target_arch = "wasm32"))]
    mod native {
        pub unsafe fn state_get(_: *const u8, _: i32, _: *mut u8, _: i32, _: i32) -> i64 {
            -2
        }
        pub unsafe fn state_set(_: *const u8, _: i32, _: *const u8, _: i32, _: i32) -> i32 {
            -2
        }
        pub unsafe fn state_delete(_: *const u8, _: i32, _: i32) -> i32 {
            -2
        }
        pub unsafe fn state_append(_: *const u8, _: i32, _: *const u8, _: i32, _: i32) -> i64 {
            -2
        }
        pub unsafe fn state_cas(
            _: *const u8,
            _: i32,
            _: *const u8,
            _: i32,
            _: *const u8,
            _: i32,
            _: i32,
        ) -> i32 {
            -2
        }
        pub unsafe fn state_add(_: *const u8, _: i32, _: i64, _: i32) -> i64 {
            -2
        }
        pub unsafe fn state_pull(_: *const u8, _: i32) -> i32 {
            -2
        }
        pub unsafe fn state_push(_: *const u8, _: i32) -> i32 {
            -2
        }
        pub unsafe fn state_lock(_: *const u8, _: i32, _: i32) -> i32 {
            -2
        }
        pub unsafe fn state_unlock(_: *const u8, _: i32) -> i32 {
            -2
        }
    }
    #[cfg(not(target_arch = "wasm32"))]
    use native::*;

    /// Which tier.
    #[derive(Debug, Clone, Copy, PartialEq, Eq)]
    pub enum Tier {
        /// The host's (shared by its sandboxes).
        Local = 0,
        /// The global one (Redis, shared by hosts).
        Global = 1,
    }

    /// What a host API v1 state code means, for messages.
    pub fn describe(code: i64) -> &'static str {
        match code {
            -1 => "absent",
            -2 => "namespace not granted",
            -3 => "bad argument",
            -4 => "over a quota",
            -5 => "store unavailable",
            -6 => "busy",
            _ => "unknown status",
        }
    }

    fn len(n: usize) -> Result<i32, Error> {
        i32::try_from(n).map_err(|_| Error("state value too large".into()))
    }

    fn check(what: &str, key: &str, code: i64) -> Result<i64, Error> {
        if code < 0 {
            return Err(Error(format!("state {what} {key}: {}", describe(code))));
        }
        Ok(code)
    }

    /// The value of `key`, or `None` if absent.
    pub fn get(key: &str, tier: Tier) -> Result<Option<Vec<u8>>, Error> {
        let mut buf = Vec::with_capacity(256);
        Ok(get_into(key, &mut buf, tier)?.then_some(buf))
    }

    /// Reads `key` into `buf` (resized to the value), reusing its capacity:
    /// one host call when the value fits. Whether the key exists.
    pub fn get_into(key: &str, buf: &mut Vec<u8>, tier: Tier) -> Result<bool, Error> {
        buf.resize(buf.capacity().max(256), 0);
        loop {
            // SAFETY: the key and buffer are live slices of the given lengths.
            let n = unsafe {
                state_get(
                    key.as_ptr(),
                    len(key.len())?,
                    buf.as_mut_ptr(),
                    len(buf.len())?,
                    tier as i32,
                )
            };
            if n == -1 {
                buf.clear();
                return Ok(false);
            }
            let n = usize::try_from(check("get", key, n)?).unwrap_or(0);
            if n <= buf.len() {
                buf.truncate(n);
                return Ok(true);
            }
            // Larger than the buffer (or grown since): again, sized.
            buf.resize(n, 0);
        }
    }

    /// Sets `key` to `value`.
    pub fn set(key: &str, value: &[u8], tier: Tier) -> Result<(), Error> {
        // SAFETY: live slices of the given lengths, only read.
        let code = unsafe {
            state_set(
                key.as_ptr(),
                len(key.len())?,
                value.as_ptr(),
                len(value.len())?,
                tier as i32,
            )
        };
        check("set", key, code.into()).map(drop)
    }

    /// Deletes `key`; whether it existed.
    pub fn delete(key: &str, tier: Tier) -> Result<bool, Error> {
        // SAFETY: a live slice of the given length, only read.
        let code = unsafe { state_delete(key.as_ptr(), len(key.len())?, tier as i32) };
        if code == -1 {
            return Ok(false);
        }
        check("delete", key, code.into()).map(|_| true)
    }

    /// Appends `value` to `key`; the new length.
    pub fn append(key: &str, value: &[u8], tier: Tier) -> Result<u64, Error> {
        // SAFETY: live slices of the given lengths, only read.
        let n = unsafe {
            state_append(
                key.as_ptr(),
                len(key.len())?,
                value.as_ptr(),
                len(value.len())?,
                tier as i32,
            )
        };
        check("append", key, n).map(|n| n as u64)
    }

    /// Sets `key` to `new` if it holds `old` (`None`: if absent); whether
    /// it did.
    pub fn cas(key: &str, old: Option<&[u8]>, new: &[u8], tier: Tier) -> Result<bool, Error> {
        let (old_ptr, old_len) = match old {
            Some(old) => (old.as_ptr(), len(old.len())?),
            None => (std::ptr::null(), -1),
        };
        // SAFETY: live slices of the given lengths, only read.
        let code = unsafe {
            state_cas(
                key.as_ptr(),
                len(key.len())?,
                old_ptr,
                old_len,
                new.as_ptr(),
                len(new.len())?,
                tier as i32,
            )
        };
        check("cas", key, code.into()).map(|c| c == 1)
    }

    /// Adds `delta` to the counter `key` (absent = 0); its new value.
    pub fn add(key: &str, delta: i64, tier: Tier) -> Result<i64, Error> {
        // SAFETY: a live slice of the given length, only read.
        let value = unsafe { state_add(key.as_ptr(), len(key.len())?, delta, tier as i32) };
        // -8..=-1 are both codes and counter values (host API v1): it is
        // a value if the counter now holds it.
        if (-8..=-1).contains(&value) {
            let holds = matches!(get(key, tier), Ok(Some(v)) if v == value.to_le_bytes());
            if !holds {
                return Err(Error(format!("state add {key}: {}", describe(value))));
            }
        }
        Ok(value)
    }

    /// Refreshes the local replica of `key` from the global tier.
    pub fn pull(key: &str) -> Result<(), Error> {
        // SAFETY: a live slice of the given length, only read.
        check(
            "pull",
            key,
            unsafe { state_pull(key.as_ptr(), len(key.len())?) }.into(),
        )
        .map(drop)
    }

    /// Writes the local replica of `key` to the global tier.
    pub fn push(key: &str) -> Result<(), Error> {
        // SAFETY: a live slice of the given length, only read.
        check(
            "push",
            key,
            unsafe { state_push(key.as_ptr(), len(key.len())?) }.into(),
        )
        .map(drop)
    }

    /// Takes the global lock `key` for at most `lease_ms`, waiting while
    /// another holds it (an error once this invocation's time is up). The
    /// host releases it when the invocation ends, however it ends.
    pub fn lock(key: &str, lease_ms: u32) -> Result<(), Error> {
        let lease = i32::try_from(lease_ms).map_err(|_| Error("lease too long".into()))?;
        // SAFETY: a live slice of the given length, only read.
        check(
            "lock",
            key,
            unsafe { state_lock(key.as_ptr(), len(key.len())?, lease) }.into(),
        )
        .map(drop)
    }

    /// Releases the lock `key`.
    pub fn unlock(key: &str) -> Result<(), Error> {
        // SAFETY: a live slice of the given length, only read.
        check(
            "unlock",
            key,
            unsafe { state_unlock(key.as_ptr(), len(key.len())?) }.into(),
        )
        .map(drop)
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
