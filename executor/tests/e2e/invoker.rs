//! `luge serve` from the invoker's side, played the way OpenWhisk's
//! ContainerProxy drives a container through the WasmContainerFactory
//! (deploy/openwhisk): create by id and init with the action's env and
//! annotations, a burst of concurrent runs carrying the activation context,
//! log collection until the sentinel on both streams, reuse of the warm
//! container, a failed init whose container is destroyed, and destroy.

use crate::common;

use std::time::{Duration, Instant};

use common::*;
use serde_json::{Value, json};

const SENTINEL: &str = "XXX_THE_END_OF_A_WHISK_ACTIVATION_XXX";

/// The container name OpenWhisk's invoker gives (`wsk{instance}_{n}_{...}`).
const CONTAINER: &str = "wsk0_17_prewarm_guest_hello";

/// What the ContainerProxy sends as the init payload (`value` of /init).
fn initializer(code: &[u8]) -> Value {
    json!({ "value": {
        "name": "guest/hello",
        "main": "main",
        "binary": true,
        "code": luge_testkit::b64(code),
        "env": {
            "__OW_API_HOST": "https://openwhisk.example:443",
            "GREETING": "hi",
        },
        // WOW forwards the action's annotations in the init payload.
        "annotations": [
            { "key": "exec", "value": "wasm:0.1" },
            { "key": "limits.memory_mb", "value": 64 },
            { "key": "sched.relative_deadline_us", "value": 200000 },
        ],
    }})
}

/// The /run body: parameters under `value`, the activation context beside.
fn run_body(i: usize) -> Value {
    let deadline = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis()
        + 60_000;
    json!({
        "value": { "i": i },
        "namespace": "guest",
        "action_name": "/guest/hello",
        "action_version": "0.0.1",
        "activation_id": format!("activation{i:04}"),
        "transaction_id": format!("tid{i}"),
        "deadline": deadline.to_string(),
        "api_key": "uuid:secret",
    })
}

/// Collects logs as the invoker does after an activation: until both
/// streams carry `sentinels` sentinels, or a timeout.
fn collect_logs(luge: &Luge, sentinels: usize) -> Vec<Value> {
    let deadline = Instant::now() + Duration::from_secs(5);
    let mut lines = Vec::new();
    loop {
        let (status, body) = luge.get(&format!("/{CONTAINER}/logs"));
        assert_eq!(status, 200, "{body}");
        lines.extend(body["logs"].as_array().unwrap().iter().cloned());
        let count = |stream: &str| {
            lines
                .iter()
                .filter(|l| l["stream"] == stream && l["log"] == SENTINEL)
                .count()
        };
        if (count("stdout") >= sentinels && count("stderr") >= sentinels)
            || Instant::now() > deadline
        {
            return lines;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

#[test]
fn the_invoker_drives_a_container_through_its_life() {
    let luge = Luge::start("serve", &[]);

    // A failed init (not Wasm) answers with an error; the invoker then
    // destroys the container, and the id can be used again.
    let (status, body) = luge.post(&format!("/{CONTAINER}/init"), &initializer(b"not wasm"));
    assert_eq!(status, 400, "{body}");
    assert!(body["error"].is_string());
    assert_eq!(
        luge.post(&format!("/{CONTAINER}/destroy"), &json!({})).0,
        200
    );

    // Cold start: init with env and annotations.
    let (status, body) = luge.post(&format!("/{CONTAINER}/init"), &initializer(&wasm("env")));
    assert_eq!((status, &body), (200, &json!({"ok": true})));

    // A burst of concurrent activations (the action's concurrency limit > 1),
    // each with its own activation context.
    let replies: Vec<(u16, Value)> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..12)
            .map(|i| {
                let luge = &luge;
                s.spawn(move || luge.post(&format!("/{CONTAINER}/run"), &run_body(i)))
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    for (i, (status, reply)) in replies.iter().enumerate() {
        assert_eq!(*status, 200, "{reply}");
        assert_eq!(reply["activation_id"], format!("activation{i:04}"));
        assert_eq!(reply["namespace"], "guest");
        assert_eq!(reply["action_name"], "/guest/hello");
        assert_eq!(reply["api_key"], "uuid:secret");
        assert_eq!(reply["api_host"], "https://openwhisk.example:443");
        assert_eq!(reply["env"]["GREETING"], "hi");
        assert!(reply["deadline"].as_str().unwrap().parse::<u64>().is_ok());
    }
    let lines = collect_logs(&luge, 12);
    for stream in ["stdout", "stderr"] {
        let sentinels = lines
            .iter()
            .filter(|l| l["stream"] == stream && l["log"] == SENTINEL)
            .count();
        assert_eq!(sentinels, 12, "{stream}: {lines:?}");
    }
    assert!(lines.iter().all(|l| l["time_ms"].as_u64().is_some()));

    // The warm container is reused later without a second init (a second one
    // would be refused, as the action proxies do).
    let (status, reply) = luge.post(&format!("/{CONTAINER}/run"), &run_body(99));
    assert_eq!(
        (status, reply["activation_id"].as_str()),
        (200, Some("activation0099"))
    );
    assert_eq!(
        luge.post(&format!("/{CONTAINER}/init"), &initializer(&wasm("env")))
            .1,
        json!({"error": "Cannot initialize the action more than once."})
    );
    // The activation's two sentinels, and the refused init's message, as
    // the action proxies log it.
    let lines = collect_logs(&luge, 1);
    let sentinels = lines.iter().filter(|l| l["log"] == SENTINEL).count();
    assert_eq!(sentinels, 2, "{lines:?}");
    assert!(
        lines
            .iter()
            .any(|l| l["log"] == "Cannot initialize the action more than once."),
        "{lines:?}"
    );

    // Destroy frees it; the invoker's next request for that id is an error.
    assert_eq!(
        luge.post(&format!("/{CONTAINER}/destroy"), &json!({})).0,
        200
    );
    assert_eq!(luge.post(&format!("/{CONTAINER}/run"), &run_body(0)).0, 404);
    let health = luge.get("/healthz").1;
    assert_eq!(
        (health["containers"].as_u64(), health["modules"].as_u64()),
        (Some(0), Some(0))
    );
}

/// An invoker's `cleanup()` at start and shutdown: its containers (by its
/// name prefix) are listed and destroyed, another invoker's are untouched.
#[test]
fn an_invoker_purges_its_own_containers_by_prefix() {
    let luge = Luge::start("serve", &[]);
    let code = wasm("echo");
    for id in ["wsk0_1_guest_a", "wsk0_2_guest_b", "wsk1_1_guest_c"] {
        let (status, body) = luge.post(&format!("/{id}/init"), &initializer(&code));
        assert_eq!(status, 200, "{id}: {body}");
    }
    let (status, body) = luge.get("/containers?prefix=wsk0_");
    assert_eq!(status, 200, "{body}");
    assert_eq!(
        body["containers"],
        json!(["wsk0_1_guest_a", "wsk0_2_guest_b"])
    );

    let (status, body) = luge.request("DELETE", "/containers?prefix=wsk0_", b"");
    assert_eq!(status, 200);
    assert_eq!(parse(&body)["destroyed"], json!(2));
    let (status, _) = luge.post("/wsk0_1_guest_a/run", &run_body(1));
    assert_eq!(status, 404, "a purged container is gone");
    let (status, out) = luge.post("/wsk1_1_guest_c/run", &run_body(2));
    assert_eq!(status, 200, "another invoker's container still runs: {out}");
    assert_eq!(out["i"], json!(2));
    // The purged ids can be created again (a restarted invoker counts from 1).
    let (status, _) = luge.post("/wsk0_1_guest_a/init", &initializer(&code));
    assert_eq!(status, 200);
    let (_, body) = luge.get("/containers?prefix=");
    assert_eq!(
        body["containers"],
        json!(["wsk0_1_guest_a", "wsk1_1_guest_c"])
    );

    // A bare DELETE /containers purges nothing; odd prefixes are refused.
    for path in [
        "/containers",
        "/containers?prefix=../x",
        "/containers?other=1",
    ] {
        let (status, body) = luge.request("DELETE", path, b"");
        assert_eq!(status, 400, "{path}");
        assert!(
            parse(&body)["error"].as_str().unwrap().contains("prefix"),
            "{path}"
        );
    }
    let (_, body) = luge.get("/containers?prefix=");
    assert_eq!(body["containers"].as_array().unwrap().len(), 2);
}

/// `wsk action create hello hello.wasm` sends the module as text (the CLI
/// base64-encodes only .zip, .jar and .balx): the init says so.
#[test]
fn a_wasm_sent_as_text_gets_a_message_that_says_so() {
    let luge = Luge::start("serve", &[]);
    let text = String::from_utf8_lossy(&wasm("echo")).into_owned();
    let init =
        json!({ "value": { "name": "hello", "main": "main", "binary": false, "code": text } });
    let (status, body) = luge.post("/wsk0_1_guest_hello/init", &init);
    assert_eq!(status, 400, "{body}");
    let error = body["error"].as_str().unwrap();
    assert!(
        error.contains("arrived as text") && error.contains("zip"),
        "{error}"
    );
    // The same module as base64 initializes.
    let (status, body) = luge.post("/wsk0_1_guest_hello/init", &initializer(&wasm("echo")));
    assert_eq!(status, 200, "{body}");
}
