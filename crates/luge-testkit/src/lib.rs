//! Shared fixtures for Luge's tests and benchmarks (never a runtime
//! dependency): the example actions built from `actions/` by
//! `scripts/build-actions.sh`, OpenWhisk init bodies, hand-made modules, the
//! HTTP client, and the engine conformance suite every engine runs.
#![deny(missing_docs)]

pub mod conformance;
pub mod hostabi;
pub mod jaeger;
pub mod kafka;
pub mod mariadb;
pub mod mosquitto;
pub mod nats;
pub mod postgres;
pub mod redis;
pub mod server;
pub mod tls;
pub mod wit;

use std::path::PathBuf;

use base64::Engine as _;

use serde_json::{Value, json};

/// The directory `scripts/build-actions.sh` builds into: the workspace's
/// `target/`, or `LUGE_BUILT_DIR` where set (a release benchmark binary
/// carried to another machine, with its `wasm/` and `native/` beside it).
pub fn built_dir() -> PathBuf {
    std::env::var_os("LUGE_BUILT_DIR").map_or_else(
        || PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../target"),
        PathBuf::from,
    )
}

/// The bytes of example action `name` (`target/wasm/<name>.wasm`, see
/// [`built_dir`]).
///
/// # Panics
/// When the actions have not been built, with a message saying how.
pub fn example_wasm(name: &str) -> Vec<u8> {
    let path = built_dir().join("wasm").join(format!("{name}.wasm"));
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
    let path = built_dir().join("native").join(name);
    assert!(
        path.is_file(),
        "{}: missing; run scripts/build-actions.sh first",
        path.display()
    );
    path
}

/// The HTTP client tests and benchmarks talk to `luge` with: keep-alive,
/// error statuses returned rather than raised, a generous overall timeout.
///
/// 180 s: an OpenWhisk `/init` of a 12 MB JavaScript interpreter compiles
/// it before it answers, 23 s on the idle 2-core machine and over 60 s (the
/// bound before) in CI beside the suite's other tests.
pub fn http_agent() -> ureq::Agent {
    ureq::Agent::config_builder()
        .http_status_as_error(false)
        .timeout_global(Some(std::time::Duration::from_secs(180)))
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

/// A zip archive of `files` (name, content), stored uncompressed: an
/// action's code as OpenWhisk's zip actions send it.
pub fn zip_of(files: &[(&str, &[u8])]) -> Vec<u8> {
    use std::io::Write;
    let mut out = std::io::Cursor::new(Vec::new());
    let mut writer = zip::ZipWriter::new(&mut out);
    let stored =
        zip::write::SimpleFileOptions::default().compression_method(zip::CompressionMethod::Stored);
    for (name, content) in files {
        writer.start_file(*name, stored).expect("a zip entry");
        writer.write_all(content).expect("a zip entry's bytes");
    }
    writer.finish().expect("a zip archive");
    out.into_inner()
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
/// bytes a function), costly to compile; encoding it costs the test next to
/// nothing, even far past any compiler budget.
pub fn many_functions(n: u32) -> Vec<u8> {
    use wasm_encoder::{CodeSection, Function, FunctionSection, Module, TypeSection};
    let mut types = TypeSection::new();
    types.ty().function([], []);
    let mut functions = FunctionSection::new();
    let mut code = CodeSection::new();
    let mut body = Function::new([]);
    body.instructions().end();
    for _ in 0..n {
        functions.function(0);
        code.function(&body);
    }
    let mut module = Module::new();
    module.section(&types).section(&functions).section(&code);
    module.finish()
}

/// The `[[routes]]` of the social-network example
/// (`actions/examples/src/bin/social.rs`, one module named `social.wasm`
/// next to the config): a route per service, each granted the services it
/// calls.
pub fn social_routes() -> String {
    let route = |service: &str, calls: &[&str]| {
        format!(
            "[[routes]]\npath = \"/{service}\"\nmodule = \"social.wasm\"\nargs = [\"{service}\"]\ncalls = {calls:?}\n\n"
        )
    };
    let mut config = route(
        "compose-post",
        &[
            "text",
            "user",
            "media",
            "unique-id",
            "post-storage",
            "home-timeline",
        ],
    );
    config += &route("text", &["url-shorten", "user-mention"]);
    for leaf in [
        "url-shorten",
        "user-mention",
        "user",
        "media",
        "unique-id",
        "post-storage",
        "home-timeline",
    ] {
        config += &route(leaf, &[]);
    }
    config
}

/// A deadline 20 s off: a test's outgoing calls are bounded by it, and
/// never cut short on a loaded machine.
pub fn later() -> std::time::Instant {
    std::time::Instant::now() + std::time::Duration::from_secs(20)
}

/// `hosts` as a function's `allowed_outbound_hosts` grants (no
/// variables); panics on one the grammar refuses.
pub fn grants(hosts: &[&str]) -> luge_core::capabilities::AllowedHosts {
    let hosts: Vec<_> = hosts.iter().map(|h| (*h).into()).collect();
    luge_core::capabilities::AllowedHosts::parse(&hosts, &Default::default())
        .expect("grants in Spin's grammar")
}
