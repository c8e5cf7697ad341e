//! Calls between functions (host API v1, `luge::call_*`) end to end: a
//! `luge serve --config` host over HTTP, a fan-out function written with
//! the Rust SDK calling others by name, on every engine (`LUGE_TEST_ENGINE`).
//! Wasmtime parks a waiting caller; Wasmer and WAMR run a callee fused, on
//! the waiting caller's thread.

use crate::common;

use std::time::{Duration, Instant};

use common::{Luge, Site, assert_error, engine};
use serde_json::{Value, json};

/// A host with `fanout` (may call fib, fail, sleep, itself and a `ghost`
/// that does not exist), `lonely`
/// (the same code, granted nothing) and the callees.
fn host(extra: &[&str]) -> Option<(Luge, Site)> {
    let site = Site::new(
        &["fanout", "fib", "fail", "sleep", "c-relay", "c-echo"],
        include_str!("sites/calls-host.toml"),
    );
    Some((site.start(extra), site))
}

fn fanout(luge: &Luge, path: &str, calls: Value) -> Value {
    let (status, body) = luge.post(path, &json!({ "calls": calls }));
    assert_eq!(status, 200, "{body}");
    body
}

#[test]
fn fan_out_and_fan_in_in_order() {
    let Some((luge, _dir)) = host(&[]) else {
        return;
    };
    let calls: Vec<Value> = (10..18)
        .map(|n| json!({ "name": "fib", "input": { "n": n } }))
        .collect();
    let out = fanout(&luge, "/fanout", json!(calls));
    let fibs: Vec<u64> = out["results"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["fib"].as_u64().unwrap())
        .collect();
    assert_eq!(fibs, [55, 89, 144, 233, 377, 610, 987, 1597]);
    // A route is called by its `name`, which need not be its path.
    let out = fanout(
        &luge,
        "/fanout",
        json!([{ "name": "sleep", "input": { "ms": 1 } }]),
    );
    assert_eq!(out["results"][0]["slept_ms"], 1);
}

#[test]
fn a_failing_callee_is_a_status_not_a_trap() {
    let Some((luge, _dir)) = host(&[]) else {
        return;
    };
    let body = json!({ "calls": [
        { "name": "fail", "input": { "mode": "exit" } },
        { "name": "fib", "input": { "n": 5 } },
    ]});
    let reply = luge.send(
        "POST",
        "/fanout",
        &[("content-type", "application/json")],
        body.to_string().as_bytes(),
    );
    assert_eq!(reply.status, 200);
    let out = reply.json();
    // The callee's log line carries the request id of the client's request.
    let id = reply.header("x-request-id").to_owned();
    let logged = |stderr: &str| {
        stderr.lines().any(|l| {
            l.contains("giving up with status 3") && l.contains(&format!("request_id={id}"))
        })
    };
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
    while !logged(&luge.stderr()) && std::time::Instant::now() < deadline {
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    assert!(
        logged(&luge.stderr()),
        "callee log line with request_id={id}:\n{}",
        luge.stderr()
    );
    let error = out["results"][0]["error"].as_str().unwrap();
    assert!(
        error.starts_with("fail "),
        "the failure names its callee: {error}"
    );
    assert_eq!(out["results"][1]["fib"], 5, "the caller went on");
}

#[test]
fn undeclared_and_unknown_callees_are_refused() {
    let Some((luge, _dir)) = host(&[]) else {
        return;
    };
    // `lonely` runs the same code with no `calls`: deny by default.
    let out = fanout(&luge, "/lonely", json!([{ "name": "fib", "input": {} }]));
    let error = out["results"][0]["error"].as_str().unwrap();
    assert!(error.contains("not granted"), "{error}");
    // `fanout` may call `fanout`, but nothing is called `nosuch`.
    let out = fanout(&luge, "/fanout", json!([{ "name": "fib2", "input": {} }]));
    assert_error(&out["results"][0], "not granted");
    // `ghost` is granted but no function has that name.
    let out = fanout(&luge, "/fanout", json!([{ "name": "ghost", "input": {} }]));
    let error = out["results"][0]["error"].as_str().unwrap();
    assert!(error.contains("ghost"), "{error}");
    // Per-edge metrics; the ungranted name is not a label.
    let metrics = luge.get_text("/metrics");
    for line in [
        r#"luge_calls_total{caller="fanout",callee="-",how="refused",result="not_granted"} 1"#,
        r#"luge_calls_total{caller="fanout",callee="ghost",how="refused",result="not_found"} 1"#,
    ] {
        assert!(metrics.contains(line), "{line} in\n{metrics}");
    }
    assert!(!metrics.contains("fib2"), "{metrics}");
}

#[test]
fn a_call_cycle_ends_at_the_depth_bound() {
    let Some((luge, _dir)) = host(&[]) else {
        return;
    };
    // fanout -> fanout -> ... twelve deep, a fib at the bottom.
    let mut request = json!([{ "name": "fib", "input": { "n": 3 } }]);
    for _ in 0..12 {
        request = json!([{ "name": "fanout", "input": { "calls": request } }]);
    }
    let out = fanout(&luge, "/fanout", request);
    let text = out.to_string();
    assert!(text.contains("calls nest too deep"), "{text}");
    assert!(
        !text.contains("\"fib\":2"),
        "the bottom is never reached: {text}"
    );
    // The host is fine afterwards.
    let out = fanout(
        &luge,
        "/fanout",
        json!([{ "name": "fib", "input": { "n": 6 } }]),
    );
    assert_eq!(out["results"][0]["fib"], 8);
}

/// `--fuse-calls-under-us`: once a callee that calls nothing is measured
/// short, it runs on its caller's worker (Wasmer and WAMR fuse every
/// call). A fused callee that overflows its stack traps alone: the caller
/// reads the status and goes on.
#[test]
fn short_callees_run_fused() {
    let Some((luge, _dir)) = host(&["--fuse-calls-under-us", "1000000"]) else {
        return;
    };
    let fib = |n: u64| json!({ "name": "fib", "input": { "n": n } });
    // Unmeasured: scheduled (on Wasmtime).
    let out = fanout(&luge, "/fanout", json!([fib(5)]));
    assert_eq!(out["results"][0]["fib"], 5);
    let out = fanout(&luge, "/fanout", json!([fib(6), fib(7)]));
    assert_eq!(out["results"][0]["fib"], 8);
    assert_eq!(out["results"][1]["fib"], 13);
    let fail = |mode: &str| json!({ "name": "fail", "input": { "mode": mode } });
    fanout(&luge, "/fanout", json!([fail("exit")]));
    let out = fanout(&luge, "/fanout", json!([fail("recurse"), fib(8)]));
    let error = out["results"][0]["error"].as_str().unwrap();
    assert!(error.contains("trapped"), "{error}");
    assert_eq!(out["results"][1]["fib"], 21, "the caller went on");
    let metrics = luge.get_text("/metrics");
    let parks = engine() == "wasmtime";
    let expect = [
        ("fib", "fused", "success", if parks { 3 } else { 4 }),
        ("fail", "fused", "trapped", 1),
    ];
    for (callee, how, result, n) in expect {
        let line = format!(
            r#"luge_calls_total{{caller="fanout",callee="{callee}",how="{how}",result="{result}"}} {n}"#
        );
        assert!(metrics.contains(&line), "{line} in\n{metrics}");
    }
    if parks {
        let line =
            r#"luge_calls_total{caller="fanout",callee="fib",how="scheduled",result="success"} 1"#;
        assert!(metrics.contains(line), "{line} in\n{metrics}");
    }
}

/// A callee its caller can no longer wait for is cancelled: a caller that
/// runs out of time while waiting on a long callee frees the callee's
/// admission place at once, not when the callee would have ended. (On the
/// engines that fuse callees, the callee runs inside the caller's wait and
/// there is nothing left behind to cancel.)
#[test]
fn an_orphaned_callee_is_cancelled() {
    let Some((luge, _dir)) = host(&[]) else {
        return;
    };
    common::wasmtime_only!();
    let started = Instant::now();
    let (status, _) = luge.post(
        "/hasty",
        &json!({ "calls": [{ "name": "sleep", "input": { "ms": 4000 } }] }),
    );
    assert_eq!(status, 504, "the caller ran out of time");
    loop {
        let (_, health) = luge.get("/healthz");
        if health["pending"] == 0 {
            break;
        }
        assert!(
            started.elapsed() < Duration::from_secs(2),
            "the callee still holds its place: {health}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// 64 callers at once, each waiting for four callees that sleep 300 ms, on
/// 2 workers. On Wasmtime waiting holds no worker, so the callees overlap
/// and all finish within 1.5 s. Wasmer and WAMR cannot park a sandbox: a
/// caller runs its callees fused, one after another on its own thread, so
/// nothing waits for a worker (no deadlock however many callers block);
/// there 8 callers finish in about 8 / 2 x 1.2 s.
#[test]
fn waiting_callers_hold_no_worker() {
    let Some((luge, _dir)) = host(&["--max-pending", "512"]) else {
        return;
    };
    let parks = engine() == "wasmtime";
    let (callers, bound) = if parks {
        (64, Duration::from_millis(1500))
    } else {
        (8, Duration::from_secs(10))
    };
    let calls = json!([
        { "name": "sleep", "input": { "ms": 300 } },
        { "name": "sleep", "input": { "ms": 300 } },
        { "name": "sleep", "input": { "ms": 300 } },
        { "name": "sleep", "input": { "ms": 300 } },
    ]);
    let started = Instant::now();
    std::thread::scope(|scope| {
        let handles: Vec<_> = (0..callers)
            .map(|_| {
                let (luge, calls) = (&luge, calls.clone());
                scope.spawn(move || fanout(luge, "/fanout", calls))
            })
            .collect();
        for handle in handles {
            let out = handle.join().unwrap();
            assert_eq!(out["results"].as_array().unwrap().len(), 4);
            assert!(
                out["results"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .all(|r| r["slept_ms"] == 300),
                "{out}"
            );
        }
    });
    let took = started.elapsed();
    assert!(took < bound, "took {took:?}");
}

/// Calls take admission places like any invocation: a flood of fan-outs
/// past the bound is answered with 503s or refused calls, and the host
/// stays healthy.
#[test]
fn a_flood_of_fan_outs_meets_the_admission_bound() {
    let Some((luge, _dir)) = host(&["--max-pending", "8"]) else {
        return;
    };
    let calls: Vec<Value> = (0..6)
        .map(|_| json!({ "name": "sleep", "input": { "ms": 200 } }))
        .collect();
    let body = serde_json::to_vec(&json!({ "calls": calls })).unwrap();
    let (mut overloaded, mut busy) = (0, 0);
    std::thread::scope(|scope| {
        let handles: Vec<_> = (0..16)
            .map(|_| scope.spawn(|| luge.request("POST", "/fanout", &body)))
            .collect();
        for handle in handles {
            let (status, out) = handle.join().unwrap();
            match status {
                503 => overloaded += 1,
                200 => {
                    let out: Value = serde_json::from_slice(&out).unwrap();
                    if out.to_string().contains("overloaded") {
                        busy += 1;
                    }
                }
                other => panic!("status {other}"),
            }
        }
    });
    assert!(overloaded + busy > 0, "the bound was never met");
    let (status, health) = luge.get("/healthz");
    assert_eq!(status, 200);
    assert_eq!(health["pending"], 0, "{health}");
}

/// The C header (`actions/c/include/luge.h`): two calls started, then
/// waited for, their outputs read back whole.
#[test]
fn the_c_header_calls_too() {
    let Some((luge, _dir)) = host(&[]) else {
        return;
    };
    let body = vec![b'x'; 5000];
    let (status, out) = luge.request("POST", "/relay", &body);
    assert_eq!(status, 200);
    let out: Value = serde_json::from_slice(&out).unwrap();
    assert_eq!(
        out,
        json!({ "calls": 2, "statuses": [0, 0], "bytes": [5000, 5000], "same": true })
    );
}

/// The social-network call graph (`actions/examples/src/bin/social.rs`):
/// compose-post fans out to four services, one of which calls two more,
/// then to two more in parallel; one module, a service per route.
#[test]
fn a_social_network_call_graph() {
    let config = format!("[server]\nworkers = 2\n\n{}", luge_testkit::social_routes());
    let site = Site::new(&["social"], &config);
    let luge = site.start(&[]);
    let (status, out) = luge.post(
        "/compose-post",
        &json!({
            "user": "alice",
            "text": "hello @bob see https://example.org/a/long/path",
            "media": [1, 2],
        }),
    );
    assert_eq!(status, 200, "{out}");
    let post = &out["post"];
    assert_eq!(post["text"]["mentions"], json!(["@bob"]));
    assert_eq!(
        post["text"]["urls"][0]["long"],
        "https://example.org/a/long/path"
    );
    assert_eq!(post["media"], 2);
    assert!(
        post["user_id"].is_u64() && post["post_id"].is_u64(),
        "{out}"
    );
    assert_eq!(out["stored"], post["post_id"]);
    assert_eq!(out["timeline"]["followers_updated"], 3);
}
