//! Deny-by-default capabilities: directory grants under --fs-root.

use crate::common;

use common::*;
use serde_json::json;

fn dirs(grants: serde_json::Value) -> serde_json::Value {
    json!({"annotations": {"wasi.dirs": grants}})
}

#[test]
fn granted_directories_and_nothing_else() {
    let (root, _outside) = fs_root_fixture();
    let luge = Luge::start("serve", &["--fs-root", path_str(root.path())]);
    let ro = json!({"host": "data/ro", "guest": "/ro", "mode": "ro"});
    let rw = json!({"host": "data/rw", "guest": "/rw", "mode": "rw"});
    let init = |grants| luge.post("/f/init", &init_body(&wasm("files"), "main", dirs(grants)));
    // WAMR's preopens cannot be read-only: such a grant is refused at init,
    // never widened to read-write.
    let read_only_enforced = engine() != "wamr";
    if !read_only_enforced {
        let (status, body) = init(json!([ro.clone(), rw.clone()]));
        assert_eq!(status, 403, "{body}");
        assert_error(&body, "read-only");
        assert_eq!(init(json!([rw])).0, 200);
    } else {
        assert_eq!(init(json!([ro, rw])).0, 200);
    }

    let run = |params: serde_json::Value| luge.post("/f/run", &json!({"value": params}));
    if read_only_enforced {
        assert_eq!(
            run(json!({"path": "/ro/hello.txt"})),
            (200, json!({"content": "hello from the host"}))
        );
        // Read-only means read-only.
        let (_, out) = run(json!({"path": "/ro/new.txt", "write": "x"}));
        assert!(
            out["error"]
                .as_str()
                .unwrap()
                .starts_with("write /ro/new.txt"),
            "{out}"
        );
    }
    assert!(!root.path().join("data/ro/new.txt").exists());
    // Read-write can write, and the host sees it.
    assert_eq!(
        run(json!({"path": "/rw/out.txt", "write": "written"})).1,
        json!({"written": 7})
    );
    assert_eq!(
        std::fs::read_to_string(root.path().join("data/rw/out.txt")).unwrap(),
        "written"
    );
    // Nothing outside the grants: not the root's other files, not the host.
    for path in [
        "/secret.txt",
        "/ro/../secret.txt",
        "/etc/passwd",
        "/ro/escape/outside.txt",
    ] {
        let (_, out) = run(json!({"path": path}));
        assert!(out["error"].is_string(), "{path} was readable: {out}");
    }
}

#[test]
fn no_grants_no_files() {
    let (root, _outside) = fs_root_fixture();
    let luge = Luge::start("serve", &["--fs-root", path_str(root.path())]);
    luge.init_ok("/f/init", &init_body(&wasm("files"), "main", json!({})));
    let (_, out) = luge.post("/f/run", &json!({"value": {"path": "/data/ro/hello.txt"}}));
    assert!(out["error"].is_string(), "{out}");
}

#[test]
fn escapes_are_refused_at_init() {
    let (root, outside) = fs_root_fixture();
    let luge = Luge::start("serve", &["--fs-root", path_str(root.path())]);
    let cases = [
        (json!("../"), "'..'"),
        (json!("data/../../etc"), "'..'"),
        (json!(path_str(outside.path())), "absolute"),
        (json!("/etc"), "absolute"),
        (json!("data/escape"), "symlink"),
        (json!("data/missing"), "data/missing"),
    ];
    for (i, (host, expected)) in cases.iter().enumerate() {
        let grants = dirs(json!([{"host": host, "guest": "/d"}]));
        let (status, body) = luge.post(
            &format!("/e{i}/init"),
            &init_body(&wasm("files"), "main", grants),
        );
        assert_ne!(status, 200, "{host} was granted");
        let message = body["error"].as_str().unwrap();
        assert!(message.contains(expected), "{host}: {message}");
        // The refused container stays uninitialized.
        assert_ne!(luge.post(&format!("/e{i}/run"), &json!({})).0, 200);
    }
}

#[test]
fn grants_without_fs_root_are_refused() {
    let luge = Luge::start("serve", &[]);
    let grants = dirs(json!([{"host": "data", "guest": "/d"}]));
    let (status, body) = luge.post("/g/init", &init_body(&wasm("files"), "main", grants));
    assert_ne!(status, 200);
    assert_error(&body, "--fs-root");
}

#[test]
fn wasi_env_and_args_annotations() {
    let luge = Luge::start("serve", &[]);
    let annotations = json!({"annotations": [
        {"key": "wasi.env", "value": {"GREETING": "hi"}},
        {"key": "wasi.args", "value": ["--verbose"]},
        {"key": "exec", "value": "wasm:0.1"}
    ]});
    luge.init_ok("/v/init", &init_body(&wasm("env"), "main", annotations));
    let (_, out) = luge.post("/v/run", &json!({"value": {}}));
    assert_eq!(out["env"]["GREETING"], "hi");
    assert_eq!(out["args"], json!(["test-action", "--verbose"]));
    assert!(
        out["env"].get("HOME").is_none(),
        "host environment leaked: {out}"
    );
}

/// A socket grant given through an OpenWhisk action's annotation
/// (`http.allowed_outbound_hosts`, as every scheme's is) reaches its own
/// address and no other; without it, or with another scheme's, the
/// action has no socket there. Every refused connection is to a server
/// that listens, so only the grant refuses it.
#[test]
fn a_socket_grant_through_an_annotation_reaches_its_address_only() {
    wasmtime_only!();
    let luge = Luge::start("serve", &[]);
    let (port, other) = (
        ping_peer(br#"{"pong":true}"#),
        ping_peer(br#"{"pong":true}"#),
    );
    let target = format!("127.0.0.1:{port}");
    let run = |action: &str, to: &str, grants: serde_json::Value| {
        let annotations = json!({"annotations": {
            "wasi.args": ["connect", to],
            "http.allowed_outbound_hosts": grants,
        }});
        let (status, body) = luge.post(
            &format!("/{action}/init"),
            &init_body(&wasm("sockets3"), "main", annotations),
        );
        assert_eq!(status, 200, "{body}");
        luge.post(&format!("/{action}/run"), &json!({"value": {}}))
    };
    let grant = json!([format!("tcp://{target}")]);
    assert_eq!(
        run("granted", &target, grant.clone()),
        (200, json!({"pong": true}))
    );
    let refused = (502, json!({"error": "The action exited with status 1."}));
    let elsewhere = format!("127.0.0.1:{other}");
    assert_eq!(run("elsewhere", &elsewhere, grant), refused);
    assert_eq!(run("none", &target, json!([])), refused);
    assert_eq!(
        run("udp", &target, json!([format!("udp://{target}")])),
        refused
    );
    assert_eq!(run("wildcard", &target, json!(["tcp://*:*"])), refused);
}
