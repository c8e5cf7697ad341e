//! Artifacts carry their engine, engine version and target in the
//! authenticated header: one for another engine, or another version of this
//! one, is refused at /init with a message naming both, and never loaded.

use crate::common;

use common::*;
use luge_core::EngineId;
use luge_registry::{ArtifactKey, artifact};
use serde_json::json;

#[test]
fn artifacts_for_another_engine_or_version_are_refused_at_init() {
    let luge = Luge::start("serve", &[]);
    let health = luge.get("/healthz").1;
    let running = health["engine"].as_str().unwrap().to_owned();
    assert!(running.starts_with(engine()), "{running}");

    // Our own engine's artifact round-trips.
    luge.init_ok("/own/init", &init_body(&sealed("echo"), "main", json!({})));
    assert_eq!(
        luge.post("/own/run", &json!({"value": {"k": 1}})),
        (200, json!({"k": 1}))
    );

    // Authentic (this operator's key) but for other builds.
    let key = ArtifactKey::from_secret(TEST_KEY.as_bytes()).unwrap();
    let target = running.rsplit(" for ").next().unwrap().to_owned();
    let other = if engine() == "wasmtime" {
        "wasmer"
    } else {
        "wasmtime"
    };
    let this_version = running.split(' ').nth(1).unwrap();
    for (name, version) in [(other, "1.0.0"), (engine(), "0.0.1-other")] {
        let foreign = EngineId {
            engine: name.to_owned(),
            version: version.to_owned(),
            target: target.clone(),
        };
        let bytes = artifact::seal(&key, &foreign, None, &wasm("echo"));
        let (status, body) = luge.post(
            &format!("/{name}-{version}/init"),
            &init_body(&bytes, "main", json!({})),
        );
        assert_eq!(status, 403, "{body}");
        let error = body["error"].as_str().unwrap();
        assert!(
            error.contains(&foreign.to_string()) && error.contains(&running),
            "{error}"
        );
        assert_ne!(version, this_version);
    }
    assert_eq!(luge.get("/healthz").1["modules"], 1);
}

/// `--engine wasmer-singlepass` compiles a plain-Wasm init with Singlepass
/// and enforces the time limit on that code (Wasmer's host interrupt) like
/// on Cranelift's.
#[cfg(feature = "wasmer")]
#[test]
fn wasmer_singlepass_serves_and_limits() {
    let luge = Luge::start("serve", &["--engine", "wasmer-singlepass"]);
    let health = luge.get("/healthz").1;
    assert!(
        health["engine"].as_str().unwrap().starts_with("wasmer "),
        "{health}"
    );
    luge.init_ok("/sp/init", &init_body(&wasm("echo"), "main", json!({})));
    assert_eq!(
        luge.post("/sp/run", &json!({"value": {"k": "v"}})),
        (200, json!({"k": "v"}))
    );
    let annotations = json!({"annotations": {"limits.timeout_ms": 300}});
    luge.init_ok("/spin/init", &init_body(&wasm("spin"), "main", annotations));
    let started = std::time::Instant::now();
    let (status, body) = luge.post("/spin/run", &json!({"value": {}}));
    assert_eq!(
        (status, body),
        (
            502,
            json!({"error": "The action exceeded its time limits of 300 milliseconds."})
        )
    );
    assert!(started.elapsed() < std::time::Duration::from_secs(5));
}

/// A large artifact (megabytes of base64, read in place and decoded in
/// halves) and the same artifact wrapped at 76 columns (escaped line
/// breaks: read the general way) init alike over HTTP, and run.
#[test]
fn a_large_artifact_inits_over_http_as_sent_or_wrapped() {
    use base64::Engine as _;
    let luge = Luge::start("serve", &[]);
    let artifact = sealed("big");
    let text = base64::engine::general_purpose::STANDARD.encode(&artifact);
    assert!(
        text.len() >= luge_registry::code::DECODE_IN_HALVES_AT,
        "{}",
        text.len()
    );
    let wrapped = text
        .as_bytes()
        .chunks(76)
        .map(|line| std::str::from_utf8(line).unwrap())
        .collect::<Vec<_>>()
        .join("\r\n");
    for (container, code) in [("plain", text), ("wrapped", wrapped)] {
        let body =
            json!({"value": {"name": container, "main": "main", "code": code, "binary": true}});
        let (status, reply) = luge.post(&format!("/{container}/init"), &body);
        assert_eq!(status, 200, "{container}: {reply}");
        let (status, reply) = luge.post(
            &format!("/{container}/run"),
            &json!({"value": {"pattern": "[a-z]+", "text": "a1 b22 c333"}}),
        );
        assert_eq!(
            (status, reply),
            (200, json!({"matches": ["a", "b", "c"]})),
            "{container}"
        );
    }
    // One module, shared by both containers.
    assert_eq!(luge.get("/healthz").1["modules"], 1);
}
