//! OpenWhisk's canonical runtime-proxy suite (BasicActionRunnerTests), every
//! scenario through both `luge proxy` and `luge serve`.

use crate::common;

use common::*;
use serde_json::json;

const SENTINEL: &str = "XXX_THE_END_OF_A_WHISK_ACTIVATION_XXX";

#[test]
fn initialization_with_no_code() {
    on_both_front_ends(&[], |c| {
        let (status, _) = c.init(&json!({"value": {"code": "", "main": ""}}));
        assert_ne!(status, 200);
    });
}

#[test]
fn initialization_with_no_content() {
    on_both_front_ends(&[], |c| {
        let (status, body) = c.init(&json!({}));
        assert_ne!(status, 200);
        assert_eq!(body, json!({"error": "Missing main/no code to execute."}));
    });
}

#[test]
fn not_returning_a_dictionary() {
    on_both_front_ends(&[], |c| c.refuses_a_result_not_a_dictionary("notdict"));
}

#[test]
fn second_initialization_is_refused() {
    on_both_front_ends(&[], |c| {
        let init = init_body(&wasm("echo"), "main", json!({}));
        c.init_ok(&init);
        let (status, body) = c.init(&init);
        assert_ne!(status, 200);
        assert_eq!(
            body,
            json!({"error": "Cannot initialize the action more than once."})
        );
        let message = "Cannot initialize the action more than once.";
        assert!(c.logs_containing(message).contains(message));
    });
}

#[test]
fn non_standard_entry_point() {
    on_both_front_ends(&[], |c| {
        c.init_ok(&init_body(&wasm("entry"), "niam", json!({})));
        let arg = json!({"string": "hello"});
        assert_eq!(c.run(&json!({"value": arg})), (200, arg));
        let (_, err) = c.logs(1);
        assert_eq!(err.replace(SENTINEL, "").trim(), "");
    });
}

#[test]
fn missing_entry_point_is_an_init_error() {
    on_both_front_ends(&[], |c| {
        let (status, body) = c.init(&init_body(&wasm("echo"), "nosuch", json!({})));
        assert_ne!(status, 200);
        assert_error(&body, "'nosuch'");
    });
}

/// Under the action protocol an action cannot call other functions: the
/// call is refused (-2, not granted) and the activation's log says why.
#[test]
fn calls_are_refused_with_a_reason() {
    on_both_front_ends(&[], |c| {
        let init = init_body(&wasm("c-relay"), "main", json!({}));
        c.init_ok(&init);
        let (status, body) = c.run(&json!({"value": {"x": 1}}));
        assert_eq!(status, 200, "{body}");
        assert_eq!(body, json!({"error": "call_start: -2"}));
        let line = "call(s) refused: calls between functions are not available under the OpenWhisk";
        assert!(
            c.logs_containing(line)
                .contains("an invoker must route every invocation through the controller")
        );
    });
}

#[test]
fn echo_arguments_and_logs() {
    on_both_front_ends(&[], |c| {
        c.init_example("echo");
        let argss = [
            json!({"string": "hello"}),
            json!({"string": "❄ ☃ ❄"}),
            json!({"numbers": [42, 1]}),
            json!({"object": {"a": "A"}}),
        ];
        for args in &argss {
            assert_eq!(c.run(&json!({"value": args})), (200, args.clone()));
        }
        let (out, err) = c.logs(argss.len());
        assert!(out.contains("hello stdout"), "{out}");
        assert!(err.contains("hello stderr"), "{err}");
        assert_eq!(out.matches(SENTINEL).count(), argss.len());
        assert_eq!(err.matches(SENTINEL).count(), argss.len());
        // The result is not repeated in the logs.
        assert!(!out.contains("numbers"), "{out}");
    });
}

#[test]
fn unicode_in_params_logs_and_result() {
    on_both_front_ends(&[], |c| {
        c.init_example("unicode");
        let (status, result) = c.run(&json!({"value": {"delimiter": "❄"}}));
        assert_eq!(status, 200);
        assert_eq!(result["winter"], "❄ ☃ ❄");
        let (out, _) = c.logs(1);
        assert!(out.contains("❄ ☃ ❄"), "{out}");
    });
}

#[test]
fn init_env_is_exported_before_initialization() {
    on_both_front_ends(&[], |c| {
        let env = json!({
            "SOME_VAR": "xyz", "ANOTHER_VAR": "",
            "ARRAY": ["a", "b"], "OBJECT": {"a": "A"}, "STRING": "xyz",
            "NUMBER": 3, "BOOL": true, "NULL": null
        });
        assert_eq!(
            c.init(&init_body(&wasm("env"), "main", json!({"env": env})))
                .0,
            200
        );
        let (status, out) = c.run(&json!({"value": {}}));
        assert_eq!(status, 200);
        let env = &out["env"];
        assert_eq!(env["SOME_VAR"], "xyz");
        assert_eq!(env["ANOTHER_VAR"], "");
        let array: serde_json::Value =
            serde_json::from_str(env["ARRAY"].as_str().unwrap()).unwrap();
        assert_eq!(array, json!(["a", "b"]));
        let object: serde_json::Value =
            serde_json::from_str(env["OBJECT"].as_str().unwrap()).unwrap();
        assert_eq!(object, json!({"a": "A"}));
        assert_eq!(env["STRING"], "xyz");
        assert_eq!(env["NUMBER"], "3");
        assert_eq!(env["BOOL"], "true");
        assert_eq!(env["NULL"], "");
    });
}

#[test]
fn activation_context_variables() {
    on_both_front_ends(&[], |c| {
        c.init_example("env");
        let props = json!({
            "api_host": "xyz", "api_key": "abc", "namespace": "zzz",
            "action_name": "xxx", "action_version": "0.0.1",
            "activation_id": "iii", "deadline": "123"
        });
        let mut run = props.clone();
        run["value"] = json!({});
        let (status, out) = c.run(&run);
        assert_eq!(status, 200);
        for (k, v) in props.as_object().unwrap() {
            assert_eq!(&out[k], v, "{k}");
        }
        // Each activation has its own context: a second run without it sees none.
        let (_, out) = c.run(&json!({"value": {}}));
        assert_eq!(out["activation_id"], json!(null));
    });
}

#[test]
fn large_input_is_echoed_intact() {
    on_both_front_ends(&[], |c| {
        c.init_example("echo");
        let arg = json!({"arg": "a".repeat(1048561)});
        let (status, out) = c.run(&json!({"value": arg}));
        assert_eq!(status, 200);
        assert!(out == arg, "large input was not echoed intact");
    });
}

#[test]
fn zip_and_c_actions() {
    on_both_front_ends(&[], |c| {
        let zip = luge_testkit::zip_of(&[
            ("README.md", b"a C action"),
            ("bin/hello.wasm", &wasm("c-hello")),
        ]);
        c.init_ok(&init_body(&zip, "main", json!({})));
        let (status, out) = c.run(&json!({"value": {"x": 1}}));
        assert_eq!(status, 200);
        assert_eq!(out["greeting"], "hello from C");
        assert_eq!(out["input_bytes"], 7);
        let (out, err) = c.logs(1);
        assert!(out.contains("hello from C on stdout"), "{out}");
        assert!(err.contains("hello from C on stderr"), "{err}");
    });
}

#[test]
fn precompiled_artifact_of_this_operator_loads() {
    let sealed = sealed("echo");
    on_both_front_ends(&[], |c| {
        c.init_ok(&init_body(&sealed, "main", json!({})));
        assert_eq!(
            c.run(&json!({"value": {"k": "v"}})),
            (200, json!({"k": "v"}))
        );
    });
}

/// OpenWhisk starts an action container with `__OW_API_HOST` in its
/// environment (the canonical suite's environment test expects the action
/// to see it); `luge proxy` passes the `__OW_*` variables it was started
/// with, under the init's env and the run's context.
#[test]
fn the_container_environment_reaches_the_action_in_proxy_mode() {
    let luge = Luge::start_with_env(
        "proxy",
        &[],
        &[
            ("__OW_API_HOST", "https://openwhisk.example:443"),
            ("__OW_EXTRA", "from the container"),
            ("NOT_OPENWHISK", "stays outside"),
        ],
    );
    let init = init_body(
        &wasm("env"),
        "main",
        json!({ "env": { "__OW_EXTRA": "from init" } }),
    );
    luge.init_ok("/init", &init);
    let (status, out) = luge.post("/run", &json!({ "value": {}, "activation_id": "a1" }));
    assert_eq!(status, 200, "{out}");
    assert_eq!(out["api_host"], json!("https://openwhisk.example:443"));
    assert_eq!(
        out["env"]["__OW_EXTRA"],
        json!("from init"),
        "init's env wins"
    );
    assert_eq!(out["env"].get("NOT_OPENWHISK"), None, "only __OW_* pass");
    assert_eq!(out["activation_id"], json!("a1"));
}

/// `luge proxy` is ready only once it holds an action (`/readyz` 503
/// before `/init`, 200 after), and live throughout.
#[test]
fn a_proxy_is_ready_once_initialised() {
    let luge = Luge::start("proxy", &[]);
    assert_eq!(luge.request("GET", "/readyz", b"").0, 503);
    assert_eq!(luge.request("GET", "/livez", b""), (200, b"OK".to_vec()));
    luge.init_ok("/init", &init_body(&wasm("echo"), "main", json!({})));
    assert_eq!(luge.request("GET", "/readyz", b""), (200, b"OK".to_vec()));
}
