//! The deadline scheduler through `luge serve`: preemption lets an urgent
//! short function past a long one, sleeping functions hold no worker.

#![allow(clippy::unwrap_used)] // tests fail loudly by design

#[path = "e2e/common/mod.rs"]
mod common;

use std::time::{Duration, Instant};

use common::*;
use serde_json::json;

/// These tests measure waiting times with workers pinned to the same cores:
/// run them one at a time so they do not measure each other.
static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn serial() -> std::sync::MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|e| e.into_inner())
}

fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64
}

/// On one worker, a CPU-bound run of ~2.5 s is started, then a short run
/// with an earlier deadline. Returns how long the short run took.
fn short_behind_long(args: &[&str]) -> Duration {
    let mut all = vec!["--workers", "1"];
    all.extend_from_slice(args);
    let luge = Luge::start("serve", &all);
    let long = json!({"limits.timeout_ms": 2500});
    assert_eq!(luge.init_example("long", "spin", long), 200);
    assert_eq!(luge.init_example("short", "echo", json!({})), 200);
    std::thread::scope(|s| {
        let long = s.spawn(|| {
            let deadline = (now_ms() + 60_000).to_string();
            luge.post("/long/run", &json!({"value": {}, "deadline": deadline}))
        });
        std::thread::sleep(Duration::from_millis(300));
        let started = Instant::now();
        let deadline = (now_ms() + 20).to_string();
        let reply = luge.post(
            "/short/run",
            &json!({"value": {"quick": true}, "deadline": deadline}),
        );
        let waited = started.elapsed();
        assert_eq!(reply, (200, json!({"quick": true})));
        assert_eq!(
            long.join().unwrap().0,
            502,
            "the long run ends at its time limit"
        );
        waited
    })
}

#[test]
fn preemptive_edf_serves_the_urgent_short_run_within_a_few_quanta() {
    let _serial = serial();
    let waited = short_behind_long(&["--policy", "edf"]);
    // A few 5 ms quanta plus a sandbox and an HTTP round trip.
    assert!(
        waited < Duration::from_millis(250),
        "short run waited {waited:?}"
    );
}

#[test]
fn an_urgent_arrival_preempts_before_the_quantum_ends() {
    let _serial = serial();
    // A 1 s quantum: waiting for it would take the short run ~1 s. The
    // arrival asks the running sandbox to yield at its next epoch tick.
    let waited = short_behind_long(&["--policy", "edf", "--quantum-us", "1000000"]);
    assert!(
        waited < Duration::from_millis(300),
        "short run waited {waited:?} behind a 1 s quantum"
    );
}

#[test]
fn without_preemption_fifo_makes_the_short_run_wait() {
    let _serial = serial();
    let waited = short_behind_long(&["--policy", "fifo", "--no-preempt"]);
    assert!(
        waited > Duration::from_millis(1500),
        "short run waited only {waited:?}"
    );
}

#[test]
fn five_hundred_concurrent_sleeps_on_two_workers() {
    let _serial = serial();
    let luge = Luge::start("serve", &["--workers", "2"]);
    assert_eq!(
        luge.post("/sleep/init", &init_body(&wasm("sleep"), "main", json!({})))
            .0,
        200
    );
    let started = Instant::now();
    std::thread::scope(|s| {
        let runs: Vec<_> = (0..500)
            .map(|_| s.spawn(|| luge.post("/sleep/run", &json!({"value": {"ms": 300}}))))
            .collect();
        for run in runs {
            assert_eq!(run.join().unwrap(), (200, json!({"slept_ms": 300})));
        }
    });
    let elapsed = started.elapsed();
    // Serially on two workers this would take 75 s; parked, one sleep
    // (300 ms) plus 500 clients' threads and connections, which took 2.3 s
    // once on the loaded 2-core machine: 10 s still tells the two apart.
    assert!(
        elapsed < Duration::from_secs(10),
        "500 sleeps took {elapsed:?}"
    );
    let (_, health) = luge.get("/healthz");
    assert_eq!(health["scheduler"]["completed"], 500);
}

#[test]
fn a_sleep_past_its_time_limit_is_stopped_while_parked() {
    let _serial = serial();
    let luge = Luge::start("serve", &["--workers", "1"]);
    let annotations = json!({"annotations": {"limits.timeout_ms": 200}});
    assert_eq!(
        luge.post("/nap/init", &init_body(&wasm("sleep"), "main", annotations))
            .0,
        200
    );
    let started = Instant::now();
    let (status, body) = luge.post("/nap/run", &json!({"value": {"ms": 5000}}));
    assert_eq!(
        (status, body),
        (
            502,
            json!({"error": "The action exceeded its time limits of 200 milliseconds."})
        )
    );
    assert!(started.elapsed() < Duration::from_secs(2));
}
