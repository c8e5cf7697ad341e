//! WebAssembly components (WASI 0.2 `wasi:cli/command`, built by Rust's
//! wasm32-wasip2 target from the same example sources as the modules) run
//! as functions on Wasmtime, under both OpenWhisk protocols and the
//! standalone host; Wasmer and WAMR refuse them, naming the engine.

#![allow(clippy::unwrap_used)] // tests fail loudly by design

mod common;

use common::*;
use serde_json::json;

const SENTINEL: &str = "XXX_THE_END_OF_A_WHISK_ACTIVATION_XXX";

fn on_wasmtime() -> bool {
    engine() == "wasmtime"
}

/// The runner scenarios a module passes, with the component of the same
/// source: arguments and logs, unicode, the init `env`, a result that is
/// not a dictionary, and a failing action.
#[test]
fn a_command_component_passes_the_runner_scenarios() {
    if !on_wasmtime() {
        return;
    }
    on_both_front_ends(&[], |c| {
        assert_eq!(
            c.init(&init_body(&wasm("p2-echo"), "main", json!({}))).0,
            200
        );
        for args in [json!({"string": "hello"}), json!({"numbers": [42, 1]})] {
            assert_eq!(c.run(&json!({"value": args})), (200, args.clone()));
        }
        let (out, err) = c.logs(2);
        assert!(out.contains("hello stdout"), "{out}");
        assert!(err.contains("hello stderr"), "{err}");
        assert_eq!(out.matches(SENTINEL).count(), 2);
        let big = "x".repeat(1 << 20);
        let (status, body) = c.run(&json!({"value": {"big": big}}));
        assert_eq!(status, 200);
        assert_eq!(body["big"].as_str().unwrap().len(), 1 << 20);
    });
    on_both_front_ends(&[], |c| {
        assert_eq!(
            c.init(&init_body(&wasm("p2-unicode"), "main", json!({}))).0,
            200
        );
        let (status, body) = c.run(&json!({"value": {"delimiter": "❄"}}));
        assert_eq!(status, 200, "{body}");
        assert_eq!(body["winter"], "❄ ☃ ❄");
    });
    on_both_front_ends(&[], |c| {
        let init = init_body(
            &wasm("p2-envvars"),
            "main",
            json!({"env": {"SOME_VAR": "xyz", "ANOTHER_VAR": "zyx"}}),
        );
        assert_eq!(c.init(&init).0, 200);
        let (status, body) = c.run(&json!({"value": {}}));
        assert_eq!(status, 200, "{body}");
        assert_eq!(body["SOME_VAR"], "xyz");
        assert_eq!(body["ANOTHER_VAR"], "zyx");
    });
    on_both_front_ends(&[], |c| {
        assert_eq!(
            c.init(&init_body(&wasm("p2-notdict"), "main", json!({}))).0,
            200
        );
        let (status, body) = c.run(&json!({}));
        assert_ne!(status, 200);
        assert_eq!(
            body,
            json!({"error": "The action did not return a dictionary."})
        );
    });
    on_both_front_ends(&[], |c| {
        assert_eq!(
            c.init(&init_body(&wasm("p2-fail"), "main", json!({}))).0,
            200
        );
        // WASI 0.2's `exit` carries success or failure only: status 3
        // arrives as 1.
        let (status, body) = c.run(&json!({"value": {"mode": "exit"}}));
        assert_ne!(status, 200);
        assert!(
            body["error"].as_str().unwrap().contains("status 1"),
            "{body}"
        );
        let (status, body) = c.run(&json!({"value": {"mode": "trap"}}));
        assert_ne!(status, 200);
        assert!(
            body["error"].as_str().unwrap().contains("trapped"),
            "{body}"
        );
    });
}

/// A component on a standalone route; one that runs past its time limit is
/// stopped (epoch interruption works in components too) and the host serves
/// on.
#[test]
fn a_command_component_on_a_route() {
    if !on_wasmtime() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    for name in ["p2-echo", "p2-spin"] {
        std::fs::write(dir.path().join(format!("{name}.wasm")), wasm(name)).unwrap();
    }
    let config = dir.path().join("luge.toml");
    std::fs::write(
        &config,
        r#"
        [[routes]]
        path = "/echo"
        module = "p2-echo.wasm"

        [[routes]]
        path = "/spin"
        module = "p2-spin.wasm"
        limits = { timeout_ms = 300 }
        "#,
    )
    .unwrap();
    let luge = Luge::start("serve", &["--config", path_str(&config)]);
    // The route answers the whole stdout: echo's log line, then its result.
    let (status, body) = luge.request("POST", "/echo", br#"{"a":[1,2]}"#);
    assert_eq!(status, 200);
    let text = String::from_utf8(body).unwrap();
    assert_eq!(text.lines().last(), Some(r#"{"a":[1,2]}"#), "{text}");
    let started = std::time::Instant::now();
    let (status, _) = luge.post("/spin", &json!({}));
    assert_eq!(status, 504);
    assert!(started.elapsed() < std::time::Duration::from_secs(3));
    assert_eq!(luge.post("/echo", &json!({"b": 1})).0, 200);
}

/// Wasmer and WAMR run core modules only: a component is refused at init,
/// naming the engine.
#[test]
fn other_engines_refuse_components_by_name() {
    if on_wasmtime() {
        return;
    }
    on_both_front_ends(&[], |c| {
        let (status, body) = c.init(&init_body(&wasm("p2-echo"), "main", json!({})));
        assert_ne!(status, 200);
        let error = body["error"].as_str().unwrap();
        assert!(error.contains("component"), "{error}");
        assert!(error.contains(engine()), "{error}");
    });
}

/// Python, from source to a request: `actions/python/hello/app.py` built
/// by componentize-py (scripts/build-actions.sh) into a WASI 0.2 command
/// component, served on a route, a fresh instance per request.
#[test]
fn a_python_function_end_to_end() {
    if !on_wasmtime() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("hello.wasm"), wasm("py-hello")).unwrap();
    let config = dir.path().join("luge.toml");
    std::fs::write(
        &config,
        "[[routes]]\npath = \"/hello\"\nmodule = \"hello.wasm\"\n",
    )
    .unwrap();
    let luge = Luge::start("serve", &["--config", path_str(&config)]);
    for name in ["Luge", "❄"] {
        let (status, body) = luge.post("/hello", &json!({ "name": name }));
        assert_eq!(status, 200, "{body}");
        assert_eq!(
            body,
            json!({ "greeting": format!("Hello, {name}!"), "language": "python" })
        );
    }
    let (status, body) = luge.post("/hello", &json!({}));
    assert_eq!(
        (status, body["greeting"].clone()),
        (200, json!("Hello, stranger!"))
    );
}
