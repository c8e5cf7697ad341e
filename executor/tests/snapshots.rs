//! Pre-initialized snapshots (Wizer) end to end: a module that exports
//! `wizer.initialize` has it run once where its Wasm is compiled, and every
//! invocation starts from the snapshot, in a fresh sandbox.

#![allow(clippy::unwrap_used)] // tests fail loudly by design

mod common;

use common::*;
use serde_json::json;

/// A configured route's module is snapshotted at start: the table its
/// initialisation builds is there in every invocation, never rebuilt, and
/// each invocation is still a fresh sandbox.
#[test]
fn a_snapshot_is_used_and_every_invocation_is_fresh() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("preinit.wasm"), wasm("preinit")).unwrap();
    let config = dir.path().join("luge.toml");
    std::fs::write(
        &config,
        "[[routes]]\npath = \"/primes\"\nmodule = \"preinit.wasm\"\n",
    )
    .unwrap();
    let luge = Luge::start("serve", &["--config", path_str(&config)]);
    for _ in 0..3 {
        let (status, out) = luge.post("/primes", &json!({ "nth": 10 }));
        assert_eq!(status, 200, "{out}");
        assert_eq!(out["prime"], 31);
        assert_eq!(out["built_here"], false, "the table came from the snapshot");
        assert_eq!(out["seen"], 1, "a fresh sandbox each time");
    }
    assert!(luge.stderr().contains("pre-initialized snapshot made"));
}

/// The same module as an OpenWhisk action: snapshotted at `/init`.
#[test]
fn an_openwhisk_init_of_plain_wasm_is_snapshotted() {
    on_both_front_ends(&[], |c| {
        let init = init_body(&wasm("preinit"), "main", json!({}));
        assert_eq!(c.init(&init).0, 200);
        let (status, out) = c.run(&json!({ "value": { "nth": 0 } }));
        assert_eq!(status, 200, "{out}");
        assert_eq!(out["prime"], 2);
        assert_eq!(out["built_here"], false);
    });
}

/// An initialisation that traps or never ends is an init error naming
/// the cause; the host serves on.
#[test]
fn a_failing_initialisation_is_an_upload_error() {
    let luge = Luge::start("serve", &["--timeout-ms", "500"]);
    let (status, body) = luge.post(
        "/t/init",
        &init_body(&wasm("c-init_trap"), "main", json!({})),
    );
    assert_ne!(status, 200);
    let error = body["error"].as_str().unwrap();
    assert!(error.contains("pre-initialization failed"), "{error}");
    assert!(
        error.contains("cannot load the model"),
        "stderr named: {error}"
    );
    let started = std::time::Instant::now();
    let (status, body) = luge.post(
        "/s/init",
        &init_body(&wasm("c-init_spin"), "main", json!({})),
    );
    assert_ne!(status, 200);
    let error = body["error"].as_str().unwrap();
    assert!(error.contains("time limit of 500 ms"), "{error}");
    assert!(started.elapsed() < std::time::Duration::from_secs(5));
    // A sleep is a host call no epoch interrupts: refused at once.
    let started = std::time::Instant::now();
    let (status, body) = luge.post(
        "/z/init",
        &init_body(&wasm("c-init_sleep"), "main", json!({})),
    );
    assert_ne!(status, 200);
    let error = body["error"].as_str().unwrap();
    assert!(
        error.contains("not available during initialisation"),
        "{error}"
    );
    assert!(started.elapsed() < std::time::Duration::from_secs(5));
    // The host is fine.
    assert_eq!(
        luge.post("/e/init", &init_body(&wasm("echo"), "main", json!({})))
            .0,
        200
    );
}
