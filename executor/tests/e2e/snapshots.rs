//! Pre-initialized snapshots (Wizer) end to end: a module that exports
//! `wizer.initialize` has it run once where its Wasm is compiled, and every
//! invocation starts from the snapshot, in a fresh sandbox.

use crate::common;

use common::*;
use serde_json::json;

/// A configured route's module is snapshotted at start: the table its
/// initialisation builds is there in every invocation, never rebuilt, and
/// each invocation is still a fresh sandbox.
#[test]
fn a_snapshot_is_used_and_every_invocation_is_fresh() {
    let site = Site::new(
        &["preinit"],
        "[[routes]]\npath = \"/primes\"\nmodule = \"preinit.wasm\"\n",
    );
    let luge = site.start(&[]);
    for _ in 0..3 {
        let (status, out) = luge.post("/primes", &json!({ "nth": 10 }));
        assert_eq!(status, 200, "{out}");
        assert_eq!(out["prime"], 31);
        assert_eq!(out["built_here"], false, "the table came from the snapshot");
        assert_eq!(out["seen"], 1, "a fresh sandbox each time");
    }
    assert!(luge.stderr_shows("pre-initialized snapshot made"));
}

/// The same module as an OpenWhisk action: snapshotted at `/init`.
#[test]
fn an_openwhisk_init_of_plain_wasm_is_snapshotted() {
    on_both_front_ends(&[], |c| {
        let init = init_body(&wasm("preinit"), "main", json!({}));
        c.init_ok(&init);
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
    // Container, module, what the error names; each refused within 5 s.
    for (id, module, says) in [
        (
            "t",
            "c-init_trap",
            &["pre-initialization failed", "cannot load the model"][..],
        ),
        ("s", "c-init_spin", &["time limit of 500 ms"]),
        // A sleep is a host call no epoch interrupts: refused at once.
        (
            "z",
            "c-init_sleep",
            &["not available during initialisation"],
        ),
    ] {
        let started = std::time::Instant::now();
        let (status, body) = luge.post(
            &format!("/{id}/init"),
            &init_body(&wasm(module), "main", json!({})),
        );
        assert_ne!(status, 200, "{module}");
        for needle in says {
            assert_error(&body, needle);
        }
        assert!(
            started.elapsed() < std::time::Duration::from_secs(5),
            "{module}"
        );
    }
    // The host is fine.
    luge.init_ok("/e/init", &init_body(&wasm("echo"), "main", json!({})));
}

/// The initialisation is the function's own: the export its metadata names
/// (`init_function`), run once at start with its grants (a directory, its
/// environment); every invocation answers from the snapshot (a file
/// changed afterwards is not read again), and the same module without the
/// name is not initialised. An initialisation past the function's own time
/// limit (lower than the operator's) is refused naming that limit.
#[test]
fn the_initialisation_is_the_functions_own() {
    let root = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(root.path().join("cfg")).unwrap();
    std::fs::write(root.path().join("cfg/config.txt"), "version one\n").unwrap();
    let site = Site::new(
        &["c-init_named", "c-init_spin"],
        include_str!("sites/snapshots-init.toml"),
    );
    let luge = site.start(&["--fs-root", path_str(root.path())]);
    let expected = json!({
        "config": "version one",
        "greeting": "hello from the route",
        "setup_in_main": false,
    });
    assert_eq!(luge.post("/named", &json!({})), (200, expected.clone()));
    std::fs::write(root.path().join("cfg/config.txt"), "version two\n").unwrap();
    assert_eq!(luge.post("/named", &json!({})), (200, expected));
    assert_eq!(
        luge.post("/unnamed", &json!({})),
        (
            200,
            json!({"config": "", "greeting": "", "setup_in_main": false})
        )
    );

    // A name the module does not export is an error, not a silent no-op.
    site.write_config(
        "[[routes]]\npath = \"/typo\"\nmodule = \"c-init_named.wasm\"\ninit_function = \"stup\"\n",
    );
    let refused = site.try_start(&[]).err().unwrap();
    assert!(refused.contains("exports no function `stup`"), "{refused}");

    site.write_config(
        "[[routes]]\npath = \"/spin\"\nmodule = \"c-init_spin.wasm\"\nlimits = { timeout_ms = 300 }\n",
    );
    let started = std::time::Instant::now();
    let refused = site.try_start(&[]).err().unwrap();
    assert!(refused.contains("time limit of 300 ms"), "{refused}");
    assert!(started.elapsed() < std::time::Duration::from_secs(10));
}

/// Under the OpenWhisk protocol the annotations say the same: the export
/// (`snapshot.init_function`), the environment (`wasi.env`) and a lower
/// time limit (`limits.timeout_ms`) all apply to the initialisation.
#[test]
fn openwhisk_annotations_shape_the_initialisation() {
    on_both_front_ends(&["--timeout-ms", "5000"], |c| {
        let init = init_body(
            &wasm("c-init_named"),
            "main",
            json!({"annotations": {
                "snapshot.init_function": "setup",
                "wasi.env": {"GREETING": "hello from an annotation"},
            }}),
        );
        c.init_ok(&init);
        let (status, body) = c.run(&json!({"value": {}}));
        assert_eq!(status, 200, "{body}");
        assert_eq!(body["greeting"], "hello from an annotation");
        assert_eq!(body["config"], "unreadable");
    });
    on_both_front_ends(&["--timeout-ms", "5000"], |c| {
        let init = init_body(
            &wasm("c-init_spin"),
            "main",
            json!({"annotations": {"limits.timeout_ms": 200}}),
        );
        let (status, body) = c.init(&init);
        assert_ne!(status, 200);
        let error = body["error"].as_str().unwrap();
        assert!(error.contains("time limit of 200 ms"), "{error}");
    });
}
