//! Shared fixtures for Luge's tests and benchmarks (never a runtime
//! dependency): the example actions built from `actions/` by
//! `scripts/build-actions.sh`, OpenWhisk init bodies, and artifacts sealed
//! with a chosen key.
#![deny(missing_docs)]

pub mod conformance;

use std::path::PathBuf;
use std::sync::Arc;

use base64::Engine as _;
use luge_core::{ArtifactKey, ModuleRegistry};
use serde_json::{Value, json};

/// The bytes of example action `name` (`target/wasm/<name>.wasm`).
///
/// # Panics
/// When the actions have not been built, with a message saying how.
pub fn example_wasm(name: &str) -> Vec<u8> {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../target/wasm")
        .join(format!("{name}.wasm"));
    std::fs::read(&path).unwrap_or_else(|e| {
        panic!(
            "{}: {e}; run scripts/build-actions.sh first",
            path.display()
        )
    })
}

/// The native build of C example `name` (`target/native/c-<name>`), the
/// process-per-request baseline of the benchmarks.
///
/// # Panics
/// When the examples have not been built, with a message saying how.
pub fn native_example(name: &str) -> PathBuf {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../target/native")
        .join(name);
    assert!(
        path.is_file(),
        "{}: missing; run scripts/build-actions.sh first",
        path.display()
    );
    path
}

/// A registry on a host Wasmtime engine (no pool, no disk cache) keyed with
/// `secret`.
///
/// # Panics
/// When the engine cannot be built or the secret is too short.
pub fn registry_with_key(secret: &str) -> ModuleRegistry {
    let runtime = luge_wasmtime::WasmtimeRuntime::new(&luge_wasmtime::WasmtimeConfig {
        pooling: false,
        ..Default::default()
    })
    .expect("wasmtime engine");
    let key = ArtifactKey::from_secret(secret.as_bytes()).expect("key secret");
    ModuleRegistry::new(Arc::new(runtime), key, None)
}

/// Example `name` precompiled and sealed with `secret`.
///
/// # Panics
/// When the example is missing or does not compile.
pub fn sealed_example(secret: &str, name: &str) -> Vec<u8> {
    registry_with_key(secret)
        .compile_sealed(&example_wasm(name))
        .expect("example compiles")
}

/// The HTTP client tests and benchmarks talk to `luge` with: keep-alive,
/// error statuses returned rather than raised, a generous overall timeout.
pub fn http_agent() -> ureq::Agent {
    ureq::Agent::config_builder()
        .http_status_as_error(false)
        .timeout_global(Some(std::time::Duration::from_secs(60)))
        .build()
        .into()
}

/// The status and whole body of a response (bodies up to 128 MiB).
pub fn status_and_body(mut response: ureq::http::Response<ureq::Body>) -> (u16, Vec<u8>) {
    let status = response.status().as_u16();
    let body = response
        .body_mut()
        .with_config()
        .limit(128 << 20)
        .read_to_vec()
        .unwrap_or_default();
    (status, body)
}

/// The last non-empty stdout line as JSON: an action's result.
///
/// # Panics
/// When that line is not JSON, showing the whole output.
pub fn last_json(stdout: &[u8]) -> Value {
    let text = String::from_utf8_lossy(stdout);
    let line = text
        .lines()
        .rev()
        .find(|l| !l.trim().is_empty())
        .unwrap_or("");
    serde_json::from_str(line).unwrap_or_else(|e| panic!("{e}: {text}"))
}

/// Base64, as `/init` carries code.
pub fn b64(bytes: &[u8]) -> String {
    base64::engine::general_purpose::STANDARD.encode(bytes)
}

/// An OpenWhisk init body for `code` with entry `main`; the fields of
/// `extra` (e.g. `env`, `annotations`) are added to `value`.
pub fn init_body(code: &[u8], main: &str, extra: Value) -> Value {
    let mut value =
        json!({ "name": "test-action", "main": main, "code": b64(code), "binary": true });
    if let (Some(v), Some(extra)) = (value.as_object_mut(), extra.as_object()) {
        for (k, x) in extra {
            v.insert(k.clone(), x.clone());
        }
    }
    json!({ "value": value })
}

/// A module of `n` empty functions of one type: small on the wire (three
/// bytes a function), costly to compile. Hand-encoded, so that a module
/// too big for any compiler budget costs the test nothing to make.
pub fn many_functions(n: u32) -> Vec<u8> {
    fn leb(out: &mut Vec<u8>, mut v: u32) {
        loop {
            let byte = (v & 0x7f) as u8;
            v >>= 7;
            if v == 0 {
                return out.push(byte);
            }
            out.push(byte | 0x80);
        }
    }
    fn section(wasm: &mut Vec<u8>, id: u8, body: &[u8]) {
        wasm.push(id);
        leb(wasm, body.len() as u32);
        wasm.extend_from_slice(body);
    }
    let mut wasm = b"\0asm\x01\0\0\0".to_vec();
    // One type, () -> ().
    section(&mut wasm, 1, &[1, 0x60, 0, 0]);
    let mut funcs = Vec::new();
    leb(&mut funcs, n);
    funcs.resize(funcs.len() + n as usize, 0);
    section(&mut wasm, 3, &funcs);
    // Each body: no locals, `end`.
    let mut code = Vec::new();
    leb(&mut code, n);
    for _ in 0..n {
        code.extend_from_slice(&[2, 0, 0x0b]);
    }
    section(&mut wasm, 10, &code);
    wasm
}
