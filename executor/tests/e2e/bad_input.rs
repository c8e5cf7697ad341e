//! Bad input gets a clear JSON error, and the executor keeps serving others.

use crate::common;

use common::*;
use serde_json::json;

/// A healthy container to prove nothing else was disturbed.
fn healthy(luge: &Luge) {
    assert_eq!(
        luge.post("/healthy/run", &json!({"value": {"ok": true}})),
        (200, json!({"ok": true}))
    );
}

fn expect_error(status: u16, body: &serde_json::Value, contains: &str) {
    assert!((400..600).contains(&status), "status {status}: {body}");
    let message = body["error"]
        .as_str()
        .unwrap_or_else(|| panic!("no error field: {body}"));
    assert!(message.contains(contains), "{message:?} lacks {contains:?}");
}

#[test]
fn every_kind_of_bad_input() {
    let luge = Luge::start("serve", &["--max-body-mb", "2"]);
    luge.init_ok(
        "/healthy/init",
        &init_body(&wasm("echo"), "main", json!({})),
    );

    let raw = |path: &str, body: &[u8]| {
        let (status, body) = luge.request("POST", path, body);
        (status, parse(&body))
    };

    let (s, b) = raw("/x1/init", b"{\"value\": ");
    expect_error(s, &b, "not valid JSON");
    let (s, b) = raw("/healthy/run", b"not json at all");
    expect_error(s, &b, "not valid JSON");

    let (s, b) = luge.post(
        "/x2/init",
        &json!({"value": {"code": "!!!*not base64*", "binary": true}}),
    );
    expect_error(s, &b, "base64");

    let zip = luge_testkit::zip_of(&[("README", b"no module here")]);
    let (s, b) = luge.post("/x3/init", &init_body(&zip, "main", json!({})));
    expect_error(s, &b, "holds no WebAssembly module");

    let (s, b) = luge.post(
        "/x4/init",
        &init_body(b"#!/bin/sh\necho not wasm", "main", json!({})),
    );
    expect_error(s, &b, "not a WebAssembly module");

    let (s, b) = luge.post(
        "/x5/init",
        &init_body(b"\0asm\x01\0\0\0\x01\xff", "main", json!({})),
    );
    expect_error(s, &b, "invalid WebAssembly module");

    // Native code without the operator's seal: a raw ELF, and an artifact
    // sealed with somebody else's key.
    let (s, b) = luge.post(
        "/x6/init",
        &init_body(b"\x7fELF\x02\x01\x01\0", "main", json!({})),
    );
    expect_error(s, &b, "unauthenticated");
    let forged = precompiled_with_key(
        "echo",
        &["--engine", engine()],
        "an attacker's own secret key",
    );
    let (s, b) = luge.post("/x7/init", &init_body(&forged, "main", json!({})));
    expect_error(s, &b, "authentication failed");

    for (path, annotations, error) in [
        (
            "/x8/init",
            json!({"limits.memory_mb": 100000}),
            "exceeds the operator maximum",
        ),
        (
            "/x9/init",
            json!({"limits.memroy_mb": 1}),
            "unknown annotation",
        ),
    ] {
        let annotations = json!({ "annotations": annotations });
        let (s, b) = luge.post(path, &init_body(&wasm("echo"), "main", annotations));
        expect_error(s, &b, error);
    }

    // An oversized body is refused from its Content-Length, before it is
    // read: announce 3 MiB against the 2 MiB limit and read the answer.
    let (s, b) = announce_oversized(&luge, "POST", "/healthy/run", 3 << 20);
    assert_eq!(s, 413);
    expect_error(s, &b, "exceeds the limit");
    // Without a Content-Length the limit holds while reading.
    let (s, b) = raw_chunked(&luge, "/healthy/run", 3 << 20);
    assert_eq!(s, 413);
    expect_error(s, &b, "exceeds the limit");

    let (s, b) = luge.post("/ghost/run", &json!({"value": {}}));
    assert_eq!(s, 404);
    expect_error(s, &b, "ghost");
    let (s, b) = luge.post("/x4/run", &json!({"value": {}}));
    expect_error(s, &b, "uninitialized");

    healthy(&luge);
    // A failed init can be retried with good code.
    luge.init_ok("/x4/init", &init_body(&wasm("echo"), "main", json!({})));
}

#[test]
fn proxy_run_before_init_and_bad_bodies() {
    let mut luge = Luge::start("proxy", &[]);
    let (s, b) = luge.post("/run", &json!({"value": {}}));
    expect_error(s, &b, "uninitialized");
    let (s, b) = luge.request("POST", "/init", b"][");
    expect_error(s, &parse(&b), "not valid JSON");
    let (s, b) = luge.post("/nope", &json!({}));
    expect_error(s, &b, "No route");
    luge.init_ok("/init", &init_body(&wasm("echo"), "main", json!({})));
    assert_eq!(
        luge.post("/run", &json!({"value": {"a": 1}})),
        (200, json!({"a": 1}))
    );
    assert!(luge.alive());
}
