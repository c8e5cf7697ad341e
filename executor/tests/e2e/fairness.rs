//! Admission shared fairly between tenants (issue 26), end to end on every
//! engine (`LUGE_TEST_ENGINE`): a tenant flooding its route, or amplifying
//! one request through calls, leaves another tenant's route answered.

use crate::common;

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use common::{Luge, Site, engine};
use serde_json::{Value, json};

/// A host with a sleeping route, a fan-out that may call it, and a
/// victim's echo route, under `--max-pending max_pending`.
fn host(max_pending: &str) -> (Luge, Site) {
    let site = Site::new(
        &["fanout", "sleep", "c-echo", "spin"],
        include_str!("sites/fairness-host.toml"),
    );
    let luge = site.start(&["--max-pending", max_pending]);
    (luge, site)
}

fn metric(luge: &Luge, needle: &str) -> f64 {
    luge.metric(needle)
}

/// The longest the victim goes on past its window to send its least
/// number of requests: a bound, never reached on an idle machine.
const VICTIM_CAP: Duration = Duration::from_secs(60);

/// The victim's requests, one after another, for `window` and until it
/// has sent `at_least` (within [`VICTIM_CAP`]): how many, how many
/// answered 200, and the slowest. A count as well as a window: on a loaded
/// 2-core CI machine (a debug build, other tests compiling beside it) one
/// request under the flood once took 0.7 s, so a window alone saw four.
fn victim(luge: &Luge, window: Duration, at_least: usize) -> (usize, usize, Duration) {
    let started = Instant::now();
    let (mut sent, mut answered, mut slowest) = (0, 0, Duration::ZERO);
    while (started.elapsed() < window || sent < at_least) && started.elapsed() < VICTIM_CAP {
        let request = Instant::now();
        let (status, body) = luge.request("POST", "/victim", b"hello");
        slowest = slowest.max(request.elapsed());
        sent += 1;
        if status == 200 && body == b"hello" {
            answered += 1;
        }
    }
    (sent, answered, slowest)
}

/// 16 clients keep `/burn` computing (each request a CPU-bound loop of
/// a few milliseconds): every request of that tenant waiting in the
/// scheduler came before the victim's, with an earlier deadline, so by
/// deadline alone the victim's requests waited for the whole backlog, as
/// long as the flood's own (a p50 of 97 ms on Wasmtime here, 21-29 ms on
/// the others, within a few percent of the flood's). That tenant has used
/// more than its share of the workers, so the victim's requests go before
/// its backlog: they wait at most for the runs under way (a quantum where
/// the engine preempts, a run where it does not), a fraction of what the
/// flood's requests wait.
#[test]
fn a_tenant_that_keeps_the_workers_busy_does_not_hold_another() {
    let (luge, _dir) = host("1000");
    // A few milliseconds of computation on each engine of this machine
    // (WAMR interprets; Wasmer's code is slower than Wasmtime's here).
    let iterations: u64 = match engine() {
        "wamr" => 200_000,
        "wasmer" => 2_000_000,
        _ => 10_000_000,
    };
    let burn = serde_json::to_vec(&json!({ "iterations": iterations })).unwrap();
    let stop = AtomicBool::new(false);
    let measuring = AtomicBool::new(false);
    let flood_waits = std::sync::Mutex::new(Vec::new());
    let mut waits = std::thread::scope(|scope| {
        for _ in 0..16 {
            scope.spawn(|| {
                while !stop.load(Ordering::Relaxed) {
                    let started = Instant::now();
                    let (status, body) = luge.request("POST", "/burn", &burn);
                    assert_eq!(status, 200, "{}", String::from_utf8_lossy(&body));
                    if measuring.load(Ordering::Relaxed) {
                        flood_waits.lock().unwrap().push(started.elapsed());
                    }
                }
            });
        }
        // Let the backlog build and the tenant's use of the workers show.
        std::thread::sleep(Duration::from_millis(500));
        measuring.store(true, Ordering::Relaxed);
        let mut waits = Vec::new();
        let until = Instant::now() + Duration::from_millis(2000);
        while Instant::now() < until {
            let started = Instant::now();
            let (status, body) = luge.request("POST", "/victim", b"hello");
            waits.push(started.elapsed());
            assert_eq!((status, body.as_slice()), (200, &b"hello"[..]));
        }
        stop.store(true, Ordering::Relaxed);
        waits
    });
    let p50 = |waits: &mut Vec<Duration>| {
        waits.sort();
        waits[waits.len() / 2]
    };
    let mut flood_waits = flood_waits.into_inner().unwrap();
    let (victim, flood) = (p50(&mut waits), p50(&mut flood_waits));
    eprintln!(
        "victim: {} requests, p50 {victim:?}; flood: {} requests, p50 {flood:?}",
        waits.len(),
        flood_waits.len()
    );
    assert!(
        victim * 3 < flood,
        "the victim's p50 {victim:?} is not a third of the flood's {flood:?}"
    );
    assert!(metric(&luge, "luge_over_share_jobs_total") > 0.0);
}

/// 64 clients flood `/flood` (a 50 ms sleep each) on 16 admission places:
/// the flooding tenant is held to its share and gets 503s, and the victim
/// route, another tenant, is answered every time.
#[test]
fn a_flood_on_one_route_leaves_another_answered() {
    let (luge, _dir) = host("16");
    let stop = AtomicBool::new(false);
    let refused = AtomicUsize::new(0);
    let (sent, answered, slowest) = std::thread::scope(|scope| {
        for _ in 0..64 {
            scope.spawn(|| {
                while !stop.load(Ordering::Relaxed) {
                    let (status, _) = luge.request("POST", "/flood", br#"{"ms": 50}"#);
                    match status {
                        200 => {}
                        503 => {
                            refused.fetch_add(1, Ordering::Relaxed);
                            std::thread::sleep(Duration::from_millis(5));
                        }
                        other => panic!("flood answered {other}"),
                    }
                }
            });
        }
        // Let the flood take its places first; it floods until the
        // victim is done.
        std::thread::sleep(Duration::from_millis(500));
        let victim = victim(&luge, Duration::from_millis(2500), 10);
        stop.store(true, Ordering::Relaxed);
        victim
    });
    eprintln!("victim: {answered} of {sent} answered, slowest {slowest:?}");
    assert!(sent >= 10, "the victim sent only {sent} requests");
    assert_eq!(
        answered, sent,
        "the victim was refused while another tenant flooded"
    );
    assert!(
        refused.load(Ordering::Relaxed) > 0,
        "the flood never met the bound"
    );
    // Per-tenant admission counts.
    assert!(
        metric(
            &luge,
            r#"luge_admissions_total{tenant="flood",result="over_share"}"#
        ) > 0.0
    );
    assert!(
        metric(
            &luge,
            r#"luge_admissions_total{tenant="victim",result="admitted"}"#
        ) >= sent as f64
    );
    let (status, health) = luge.get("/healthz");
    assert_eq!(status, 200);
    assert_eq!(health["pending"], 0, "{health}");
}

/// One request fans out into 24 sleeping callees on 32 places: its call
/// tree holds at most a quarter of them (8, itself included), the other
/// calls answer busy, and the victim route is answered throughout.
/// (Wasmer and WAMR run the callees fused, one after another, so they
/// sleep less there to stay within the fan-out's time limit.)
#[test]
fn one_request_cannot_take_every_place_through_calls() {
    let (luge, _dir) = host("32");
    let ms = if engine() == "wasmtime" { 1500 } else { 500 };
    let calls: Vec<Value> = (0..24)
        .map(|_| json!({ "name": "sleep", "input": { "ms": ms } }))
        .collect();
    let (attack, (sent, answered, slowest)) = std::thread::scope(|scope| {
        let attack = scope.spawn(|| luge.post("/fanout", &json!({ "calls": calls })));
        std::thread::sleep(Duration::from_millis(300));
        let victim = victim(&luge, Duration::from_millis(1000), 3);
        (attack.join().unwrap(), victim)
    });
    eprintln!("victim: {answered} of {sent} answered, slowest {slowest:?}");
    let (status, out) = attack;
    assert_eq!(status, 200, "{out}");
    let results = out["results"].as_array().unwrap();
    let slept = results.iter().filter(|r| r["slept_ms"] == ms).count();
    let busy = results
        .iter()
        .filter(|r| {
            r["error"]
                .as_str()
                .is_some_and(|e| e.contains("overloaded"))
        })
        .count();
    assert_eq!((slept, busy), (7, 17), "{out}");
    assert!(sent >= 3, "the victim sent only {sent} requests");
    assert_eq!(answered, sent, "the victim was refused during the fan-out");
    assert!(
        metric(
            &luge,
            r#"luge_admissions_total{tenant="fanout",result="tree"}"#
        ) >= 17.0
    );
}

/// One request on a kept-alive raw connection: status and body.
fn exchange(stream: &mut std::net::TcpStream, path: &str, body: &[u8]) -> (u16, Vec<u8>) {
    use std::io::Write;
    // One write: a second small one would wait for the first's delayed
    // acknowledgement (Nagle's algorithm), tens of milliseconds.
    let mut request = format!(
        "POST {path} HTTP/1.1\r\nHost: t\r\nContent-Length: {}\r\n\r\n",
        body.len()
    )
    .into_bytes();
    request.extend_from_slice(body);
    stream.write_all(&request).unwrap();
    common::read_one_reply(stream)
}

/// A worker reads its own connections between sandboxes
/// (`--front-end workers`, Wasmtime's default). A client whose kept-alive
/// connection that worker took is read while another tenant's sandbox
/// computes there: the sandbox yields within a tick or two for the
/// arrival, where the worker once read it only at the sandbox's next
/// scheduling point. With a 10 s quantum, that was after the whole
/// computation.
#[test]
fn a_request_on_a_busy_workers_connection_is_read_within_ticks() {
    if engine() != "wasmtime" {
        return; // the other engines' connections are served beside the workers
    }
    let site = common::Site::new(
        &["spin", "c-echo"],
        &format!(
            r#"{ONE_WORKER_BURNING}
        [[routes]]
        path = "/victim"
        module = "c-echo.wasm"
        "#
        ),
    );
    let luge = site.start(&[]);
    // The victim's connection, taken by the idle worker: its request is
    // then submitted on the worker's own queue (a local submit). Were the
    // worker's thread kept off the cores past the 2 ms grace (a loaded CI
    // machine), the threads beside it would take the connection; try a
    // new one then.
    let mut victim = None;
    for _ in 0..20 {
        let before = metric(&luge, "luge_local_submits_total");
        let mut stream = common::connect(&luge);
        assert_eq!(
            exchange(&mut stream, "/victim", b"hello"),
            (200, b"hello".to_vec())
        );
        if metric(&luge, "luge_local_submits_total") > before {
            victim = Some(stream);
            break;
        }
    }
    let mut victim = victim.expect("no connection of the victim's was taken by the worker");
    // The burn has started and its tenant is over its share.
    let (waits, burnt) = while_burning(&luge, || {
        let mut waits = Vec::new();
        for _ in 0..5 {
            let started = Instant::now();
            let answer = exchange(&mut victim, "/victim", b"hello");
            waits.push(started.elapsed());
            assert_eq!(answer, (200, b"hello".to_vec()));
        }
        waits
    });
    eprintln!("the victim waited {waits:?}");
    assert!(
        !burnt,
        "the victim was answered only after the computation ({waits:?})"
    );
    // Each arrival costs the computation at most one yield (edges are
    // reported once), plus one ask that consumes what came while the worker
    // was idle: a client cannot make a sandbox yield more often than it
    // sends.
    let yields = metric(&luge, "luge_yields_for_arrivals_total");
    assert!(
        (1.0..=6.0).contains(&yields),
        "{yields} yields for 5 requests"
    );
}

/// A new connection while the one worker computes with a long quantum is
/// served by the threads beside the workers (`--front-end workers`), within
/// the grace and long before the computation ends, and counted in
/// `luge_connections_unclaimed_total`: the workers accepted nothing for the
/// grace. (That connections the workers are accepting, however slowly, are
/// left to them is `http::tests::the_fallback_takes_only_what_the_workers_leave`.)
#[test]
fn a_new_connection_while_the_worker_computes_is_served_beside_it_and_counted() {
    if engine() != "wasmtime" {
        return; // the other engines' connections are served beside the workers
    }
    let site = common::Site::new(&["spin"], ONE_WORKER_BURNING);
    let luge = site.start(&[]);
    let before = metric(&luge, "luge_connections_unclaimed_total");
    let ((), burnt) = while_burning(&luge, || {
        for _ in 0..3 {
            use std::io::Write;
            let mut stream = common::connect(&luge);
            stream
                .write_all(b"GET /healthz HTTP/1.1\r\nHost: t\r\n\r\n")
                .unwrap();
            assert_eq!(common::read_one_reply(&mut stream).0, 200);
        }
    });
    assert!(
        !burnt,
        "the new connections were answered only after the computation"
    );
    let taken = metric(&luge, "luge_connections_unclaimed_total") - before;
    // The three (the metrics scrapes' pooled connection came while the
    // worker was idle, and took none, or one on a loaded machine).
    assert!((3.0..=4.0).contains(&taken), "{taken} connections taken");
}

/// One worker, a quantum longer than any test, and `/burn` (spin.wasm):
/// while it computes, the worker reaches no scheduling point.
const ONE_WORKER_BURNING: &str = r#"
        [server]
        workers = 1
        quantum_us = 10000000

        [[routes]]
        path = "/burn"
        module = "spin.wasm"
        limits = { timeout_ms = 60000 }
"#;

/// Runs `during` while `/burn` computes for about 1.5 s (this machine's
/// Wasmtime) on another connection, from 300 ms into it; returns what
/// `during` returned and whether the computation had ended by then.
fn while_burning<R>(luge: &Luge, during: impl FnOnce() -> R) -> (R, bool) {
    let burnt = AtomicBool::new(false);
    let burn = serde_json::to_vec(&json!({ "iterations": 1_500_000_000u64 })).unwrap();
    std::thread::scope(|scope| {
        scope.spawn(|| {
            let (status, body) = luge.request("POST", "/burn", &burn);
            assert_eq!(status, 200, "{}", String::from_utf8_lossy(&body));
            burnt.store(true, Ordering::SeqCst);
        });
        std::thread::sleep(Duration::from_millis(300));
        let result = during();
        (result, burnt.load(Ordering::SeqCst))
    })
}

/// A durable queue's backlog on one function (a Redis stream of
/// CPU-bound messages, 32 in flight on 2 workers) beside another tenant's
/// route: the trigger's events are that function's tenant, which has used
/// more than its share of the workers, so the route's requests go before
/// the backlog and wait at most for the runs under way. Every request is
/// answered, and its p50 is under a third of the trigger's mean lag (how
/// long its messages waited for a worker, `luge_trigger_lag_seconds`).
#[test]
fn a_queue_backlog_does_not_hold_an_http_tenant() {
    let redis =
        luge_testkit::redis::RedisServer::start().expect("redis-server (./scripts/setup.sh)");
    let iterations: u64 = match engine() {
        "wamr" => 200_000,
        "wasmer" => 2_000_000,
        _ => 10_000_000,
    };
    let burn = serde_json::to_vec(&json!({ "iterations": iterations })).unwrap();
    let backlog = 3_000;
    let mut connection = redis::Client::open(redis.url())
        .unwrap()
        .get_connection()
        .unwrap();
    let mut pipe = redis::pipe();
    for _ in 0..backlog {
        pipe.cmd("XADD")
            .arg("burns")
            .arg("*")
            .arg("payload")
            .arg(&burn)
            .ignore();
    }
    pipe.exec(&mut connection).unwrap();
    let site = Site::new(
        &["spin", "c-echo"],
        &format!(
            r#"
[server]
workers = 2

[[routes]]
path = "/victim"
module = "c-echo.wasm"

[[functions]]
name = "burner"
module = "spin.wasm"

[[triggers]]
function = "burner"
redis-streams = {{ address = "redis://127.0.0.1:{port}", stream = "burns" }}
max_in_flight = 32
"#,
            port = redis.port
        ),
    );
    let luge = site.start(&[]);
    let handled = || {
        metric(
            &luge,
            "luge_trigger_events_total{trigger=\"triggers[0]\",result=\"handled\"}",
        )
    };
    let started = Instant::now();
    while handled() < 64.0 {
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "the backlog is not being read"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    let (sent, answered, slowest) = victim(&luge, Duration::from_secs(2), 20);
    let mut waits = Vec::new();
    for _ in 0..sent.min(200) {
        let request = Instant::now();
        let (status, body) = luge.request("POST", "/victim", b"hello");
        assert_eq!((status, body.as_slice()), (200, &b"hello"[..]));
        waits.push(request.elapsed());
        if handled() >= f64::from(backlog) - 64.0 {
            break;
        }
    }
    waits.sort();
    let p50 = waits[waits.len() / 2];
    let lag_sum = metric(
        &luge,
        "luge_trigger_lag_seconds_sum{trigger=\"triggers[0]\"}",
    );
    let lag_count = metric(
        &luge,
        "luge_trigger_lag_seconds_count{trigger=\"triggers[0]\"}",
    );
    let mean_lag = Duration::from_secs_f64(lag_sum / lag_count.max(1.0));
    eprintln!(
        "victim: {answered} of {sent} answered, slowest {slowest:?}, p50 {p50:?}; \
         the trigger's mean lag {mean_lag:?} over {lag_count} messages"
    );
    assert_eq!(answered, sent, "every request answered beside the backlog");
    // Each message's age at its start, from the stream id Redis gave it:
    // at least its lag in Luge, as it was stored before Luge started.
    let age_sum = metric(
        &luge,
        "luge_trigger_message_age_seconds_sum{trigger=\"triggers[0]\"}",
    );
    let age_count = metric(
        &luge,
        "luge_trigger_message_age_seconds_count{trigger=\"triggers[0]\"}",
    );
    assert!(age_count >= lag_count, "{age_count} ages, {lag_count} lags");
    assert!(
        age_sum / age_count >= mean_lag.as_secs_f64(),
        "mean age {} s under the mean lag {mean_lag:?}",
        age_sum / age_count
    );
    assert!(
        p50 * 3 < mean_lag,
        "the route's p50 {p50:?} is not a third of the backlog's mean lag {mean_lag:?}"
    );
}
