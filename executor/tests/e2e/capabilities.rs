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
        assert!(
            body["error"].as_str().unwrap().contains("read-only"),
            "{body}"
        );
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
    assert_eq!(
        luge.post("/f/init", &init_body(&wasm("files"), "main", json!({})))
            .0,
        200
    );
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
    assert!(
        body["error"].as_str().unwrap().contains("--fs-root"),
        "{body}"
    );
}

#[test]
fn wasi_env_and_args_annotations() {
    let luge = Luge::start("serve", &[]);
    let annotations = json!({"annotations": [
        {"key": "wasi.env", "value": {"GREETING": "hi"}},
        {"key": "wasi.args", "value": ["--verbose"]},
        {"key": "exec", "value": "wasm:0.1"}
    ]});
    assert_eq!(
        luge.post("/v/init", &init_body(&wasm("env"), "main", annotations))
            .0,
        200
    );
    let (_, out) = luge.post("/v/run", &json!({"value": {}}));
    assert_eq!(out["env"]["GREETING"], "hi");
    assert_eq!(out["args"], json!(["test-action", "--verbose"]));
    assert!(
        out["env"].get("HOME").is_none(),
        "host environment leaked: {out}"
    );
}
