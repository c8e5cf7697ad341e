//! Time and memory limits, traps and exits: each an action error with
//! OpenWhisk's message, while other containers keep being served.

use crate::common;

use std::time::{Duration, Instant};

use common::*;
use serde_json::json;

#[test]
fn endless_loop_meets_its_time_limit_while_others_run() {
    on_both_front_ends(&[], |c| {
        let annotations = json!({"annotations": {"limits.timeout_ms": 700}});
        c.init_ok(&init_body(&wasm("spin"), "main", annotations));
        let started = Instant::now();
        let (status, body) = c.run(&json!({"value": {}}));
        assert_eq!(status, 502);
        assert_eq!(
            body,
            json!({"error": "The action exceeded its time limits of 700 milliseconds."})
        );
        assert!(started.elapsed() < Duration::from_secs(5));
        let (_, err) = c.logs(1);
        assert!(err.contains("exceeded its time limits"), "{err}");
    });
}

#[test]
fn other_containers_are_served_during_a_runaway() {
    let luge = Luge::start("serve", &[]);
    let annotations = json!({"limits.timeout_ms": 1500});
    assert_eq!(luge.init_example("spin", "spin", annotations), 200);
    assert_eq!(luge.init_example("echo", "echo", json!({})), 200);
    // Wasmtime preempts: two runaways on two workers still leave room. An
    // engine that cannot yield (WAMR, Wasmer) holds a worker until the time
    // limit, so one runaway leaves the other worker free.
    let runaways = if engine() == "wasmtime" { 2 } else { 1 };
    std::thread::scope(|s| {
        let spinners: Vec<_> = (0..runaways)
            .map(|_| s.spawn(|| luge.post("/spin/run", &json!({"value": {}}))))
            .collect();
        std::thread::sleep(Duration::from_millis(200));
        for i in 0..20 {
            let started = Instant::now();
            // As OpenWhisk's invoker does, each run carries its deadline;
            // under EDF it preempts the runaways, whose deadline is their
            // time limit.
            let run = json!({"value": {"i": i}, "deadline": (now_ms() + 100).to_string()});
            assert_eq!(luge.post("/echo/run", &run), (200, json!({"i": i})));
            assert!(
                started.elapsed() < Duration::from_millis(1000),
                "echo waited {:?}",
                started.elapsed()
            );
        }
        for spinner in spinners {
            assert_eq!(spinner.join().unwrap().0, 502);
        }
    });
}

#[test]
fn memory_hog_meets_its_memory_limit() {
    on_both_front_ends(&[], |c| {
        let annotations = json!({"annotations": {"limits.memory_mb": 64}});
        c.init_ok(&init_body(&wasm("memhog"), "main", annotations));
        let (status, body) = c.run(&json!({"value": {"mb": 512}}));
        assert_eq!(status, 502);
        assert_eq!(
            body,
            json!({"error": "The action exceeded its memory limit of 64 MiB."})
        );
        // Within the limit it works, in the same container.
        assert_eq!(
            c.run(&json!({"value": {"mb": 16}})),
            (200, json!({"allocated_mb": 16}))
        );
    });
}

#[test]
fn default_memory_limit_comes_from_the_operator() {
    let luge = Luge::start("serve", &["--memory-mb", "48"]);
    luge.init_ok("/m/init", &init_body(&wasm("memhog"), "main", json!({})));
    let (status, body) = luge.post("/m/run", &json!({"value": {"mb": 100}}));
    assert_eq!(status, 502);
    assert_error(&body, "48 MiB");
}

#[test]
fn traps_panics_and_exit_codes_are_action_errors() {
    on_both_front_ends(&[], |c| {
        c.init_example("fail");
        for mode in ["trap", "panic"] {
            let (status, body) = c.run(&json!({"value": {"mode": mode}}));
            assert_eq!(status, 502);
            let message = body["error"].as_str().unwrap();
            assert!(message.starts_with("The action trapped"), "{mode}: {body}");
        }
        let (status, body) = c.run(&json!({"value": {"mode": "exit"}}));
        assert_eq!(
            (status, body),
            (502, json!({"error": "The action exited with status 3."}))
        );
        let (_, err) = c.logs(3);
        assert!(err.contains("the action panicked on purpose"), "{err}");
        assert!(err.contains("giving up with status 3"), "{err}");
    });
}

fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64
}

/// With default flags, luge starts inside a Raspberry Pi's address space
/// (512 GiB: 39-bit user addresses; and half of it), says in its log how
/// many sandboxes it sized the pool for, and serves 32 at once. (Its
/// default pool of 1000 slots of 4 GiB once made it fail to start there.)
#[test]
fn starts_and_serves_inside_a_pi_sized_address_space() {
    if engine() != "wasmtime" {
        return; // the pool is Wasmtime's
    }
    for gib in [512u64, 256] {
        let luge = Luge::start_within("serve", &["--workers", "2"], gib << 20);
        let sized = luge.stderr();
        assert!(sized.contains("sandboxes="), "{gib} GiB: {sized}");
        let init = init_body(&wasm("sleep"), "main", json!({}));
        assert_eq!(luge.post("/s/init", &init).0, 200, "{gib} GiB");
        std::thread::scope(|s| {
            let runs: Vec<_> = (0..32)
                .map(|_| s.spawn(|| luge.post("/s/run", &json!({"value": {"ms": 300}}))))
                .collect();
            for run in runs {
                let (status, body) = run.join().unwrap();
                assert_eq!(status, 200, "{gib} GiB: {body}");
            }
        });
    }
}

/// An artifact sealed under other engine settings (Wasmtime's fuel
/// metering) is refused at `/init` with an error naming both settings and
/// the flag to change; sealed with the executor's settings, it runs.
#[test]
fn an_artifact_sealed_under_other_settings_is_refused_by_name() {
    if engine() != "wasmtime" {
        return; // fuel metering is Wasmtime's
    }
    let luge = Luge::start("serve", &["--fuel"]);
    let plain = precompiled("echo", &[]);
    let (status, body) = luge.post("/a/init", &init_body(&plain, "main", json!({})));
    assert_eq!(status, 403, "{body}");
    let error = body["error"].as_str().unwrap();
    assert!(
        error.contains("fuel off") && error.contains("fuel on") && error.contains("--fuel"),
        "{error}"
    );
    let metered = precompiled("echo", &["--fuel"]);
    let (status, body) = luge.post("/b/init", &init_body(&metered, "main", json!({})));
    assert_eq!(status, 200, "{body}");
    let (status, out) = luge.post("/b/run", &json!({ "value": { "fuel": "on" } }));
    assert_eq!((status, out), (200, json!({ "fuel": "on" })));
}
