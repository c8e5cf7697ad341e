//! `fairness` (issue 26): a victim route's success rate and latency while
//! another tenant attacks, on an in-process `luge serve` with default
//! admission flags (`--max-pending` sized from the sandbox pool, a call
//! tree bounded at a quarter of it):
//!
//! - alone, for the baseline;
//! - during the amplification of the issue: one request to a fan-out that
//!   calls 256 fan-outs that each call 256 sleeping callees, and eight
//!   such requests at once (the tenant then also meets its share);
//!   The victim starts 300 ms after the attack, and again at the same
//!   instant as eight of them (the call trees' start: tens of thousands of
//!   calls admitted or refused, all with the roots' past deadline);
//! - during a flood of 64 keep-alive connections on a sleeping route,
//!   under the default bound and under 32 places (the flood then meets its
//!   share);
//! - while 16 keep-alive connections keep a CPU-bound route busy: every
//!   one of that tenant's waiting requests has an earlier deadline than
//!   the victim's, and only its use of the workers beyond its share puts it
//!   behind the victim (`luge_sched::Tenant`). The victim connects while
//!   they do (threads beside the busy workers take its connection), and
//!   again, on a fresh server, before they start: a worker then reads its
//!   requests itself, between sandboxes, and a running one yields to let
//!   it (the executor's `arrivals`).
//!
//! The victim is one client, one request at a time (`c-echo`, a few tens
//! of microseconds of work), for the whole window.

use std::time::{Duration, Instant};

use bytes::Bytes;
use luge_benches::load::{self, LoadReport, Target};
use luge_benches::{Server, wasm};
use serde_json::{Value, json};

use crate::{Report, Setup};

const CONFIG: &str = r#"
[[routes]]
path = "/outer"
module = "fanout.wasm"
calls = ["inner"]
limits = { timeout_ms = 60000 }

[[routes]]
path = "/inner"
name = "inner"
module = "fanout.wasm"
calls = ["sleep"]
limits = { timeout_ms = 60000 }

[[routes]]
path = "/sleep"
name = "sleep"
module = "sleep.wasm"
limits = { timeout_ms = 60000 }

[[routes]]
path = "/victim"
module = "c-echo.wasm"

[[routes]]
path = "/burn"
module = "spin.wasm"
"#;

/// Iterations of `spin`'s loop per `/burn` request: about 5 ms on the
/// 2-core machine's Wasmtime.
const BURN_ITERATIONS: u64 = 5_000_000;

fn target(server: &Server, path: &str, body: Bytes) -> Target {
    Target {
        addr: server.addr(),
        method: hyper::Method::POST,
        path: path.to_owned(),
        body,
        expect_len: None,
        headers: Vec::new(),
    }
}

/// The victim's request: `c-echo` of a few bytes.
fn victim_target(server: &Server) -> Target {
    target(server, "/victim", Bytes::from_static(b"hello"))
}

/// One row: what the victim saw.
fn row(scenario: &str, victim: &LoadReport, attacker: String) -> Vec<String> {
    let sent = victim.ok + victim.errors;
    vec![
        scenario.to_owned(),
        sent.to_string(),
        format!("{:.2} %", victim.ok as f64 * 100.0 / sent.max(1) as f64),
        format!("{:.2}", f64::from(victim.percentile_us(50.0)) / 1e3),
        format!("{:.2}", f64::from(victim.percentile_us(99.0)) / 1e3),
        format!("{:.2}", f64::from(victim.percentile_us(100.0)) / 1e3),
        attacker,
    ]
}

/// How long the second of the victim and the flood starts after the first.
const SECOND_AFTER: Duration = Duration::from_millis(300);

/// Whether the victim's connection is opened before the flood's.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Victim {
    /// After: the workers are busy, so the connection is taken by the
    /// threads that serve connections no worker took (`--front-end
    /// workers`' grace), and its requests are handed to the workers.
    After,
    /// Before, on an idle server: a worker takes the connection and reads
    /// its requests itself, between the flood's sandboxes.
    Before,
}

/// The victim (one connection to `/victim`) and a flood of `connections`
/// on `flood`, the second [`SECOND_AFTER`] the first; each `(warm-up,
/// window)`. A victim that starts first warms up that much longer, so
/// that it is measured only while the flood is.
fn beside_flood(
    server: &Server,
    flood: &Target,
    connections: usize,
    (flood_warmup, flood_window): (Duration, Duration),
    (warmup, window): (Duration, Duration),
    victim: Victim,
) -> (LoadReport, LoadReport) {
    let target = victim_target(server);
    std::thread::scope(|scope| match victim {
        Victim::After => {
            let flood =
                scope.spawn(|| load::closed_loop(flood, connections, flood_warmup, flood_window));
            std::thread::sleep(SECOND_AFTER);
            let victim = load::closed_loop(&target, 1, warmup, window);
            (victim, flood.join().expect("flood"))
        }
        Victim::Before => {
            let victim =
                scope.spawn(|| load::closed_loop(&target, 1, SECOND_AFTER * 2 + warmup, window));
            std::thread::sleep(SECOND_AFTER);
            let flood = load::closed_loop(flood, connections, flood_warmup, flood_window);
            (victim.join().expect("victim"), flood)
        }
    })
}

/// The server's metrics.
fn metrics(server: &Server) -> String {
    ureq::get(format!("{}/metrics", server.base))
        .call()
        .ok()
        .and_then(|mut r| r.body_mut().read_to_string().ok())
        .unwrap_or_default()
}

/// The sample `name` (with its labels) of metrics `text` (0 when absent).
fn sample(text: &str, name: &str) -> u64 {
    text.lines()
        .find(|l| l.starts_with(name) && l[name.len()..].starts_with(' '))
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|v| v.parse::<f64>().ok())
        .map_or(0, |v| v as u64)
}

/// The sample `name` of the server's metrics (0 when absent).
fn metric(server: &Server, name: &str) -> u64 {
    sample(&metrics(server), name)
}

/// Admission counts of `tenant` from the server's metrics.
fn admissions(server: &Server, tenant: &str) -> String {
    let text = metrics(server);
    let count = |result: &str| -> u64 {
        sample(
            &text,
            &format!("luge_admissions_total{{tenant=\"{tenant}\",result=\"{result}\"}}"),
        )
    };
    format!(
        "{} admitted, {} over share, {} tree bound, {} full",
        count("admitted"),
        count("over_share"),
        count("tree"),
        count("full")
    )
}

pub(crate) fn fairness(setup: &Setup, window: Duration) -> anyhow::Result<Report> {
    // The victim's window is a second at least: the start of eight
    // amplified requests (tens of thousands of calls admitted or refused)
    // can hold a victim's request for 100-230 ms on the 2-core machine,
    // several times that when other processes take its cores, and a
    // shorter window could then hold no whole request at all.
    let window = window.max(Duration::from_secs(1));
    let dir = tempfile::tempdir()?;
    for name in ["fanout", "sleep", "c-echo", "spin"] {
        std::fs::write(dir.path().join(format!("{name}.wasm")), wasm(name))?;
    }
    let warmup = Duration::from_millis(500);
    let mut rows = Vec::new();

    // Alone.
    let server = serve(setup, dir.path(), "alone", &[])?;
    let alone = load::closed_loop(&victim_target(&server), 1, warmup, window);
    rows.push(row("alone", &alone, "-".into()));

    rows.extend(amplified(setup, dir.path(), warmup, window)?);

    // A flood: 64 connections on a route that sleeps 50 ms, with the
    // default bound (more places than connections) and with 32 places.
    for max_pending in [None, Some("32")] {
        let server = match max_pending {
            None => serve(setup, dir.path(), "flood", &[])?,
            Some(n) => serve(setup, dir.path(), "flood-bounded", &["--max-pending", n])?,
        };
        let started = Instant::now();
        let (victim, flood) = beside_flood(
            &server,
            &target(&server, "/sleep", Bytes::from_static(br#"{"ms": 50}"#)),
            64,
            (Duration::ZERO, warmup + window + SECOND_AFTER),
            (warmup, window),
            Victim::After,
        );
        anyhow::ensure!(started.elapsed() < window * 4, "the flood did not stop");
        rows.push(row(
            &match max_pending {
                None => "64 connections flooding a 50 ms route".to_owned(),
                Some(n) => format!("the same, --max-pending {n}"),
            },
            &victim,
            format!(
                "{} answered, {} refused; {}",
                flood.ok,
                flood.errors,
                admissions(&server, "sleep")
            ),
        ));
    }

    // 16 connections keeping the workers computing: the victim connects
    // while they do, then (on a fresh server) before they start.
    for victim_connects in [Victim::After, Victim::Before] {
        let server = serve(setup, dir.path(), "burn", &[])?;
        let burn = Bytes::from(json!({ "iterations": BURN_ITERATIONS }).to_string());
        let (victim, flood) = beside_flood(
            &server,
            &target(&server, "/burn", burn),
            16,
            (SECOND_AFTER, warmup + window),
            (warmup, window),
            victim_connects,
        );
        rows.push(row(
            match victim_connects {
                Victim::After => "16 connections keeping a CPU-bound route busy",
                Victim::Before => "the same, the victim's connection opened before the flood",
            },
            &victim,
            format!(
                "{} answered, p50 {:.2} ms; {} of its jobs queued over its share; {} sandboxes yielded to read arrivals",
                flood.ok,
                f64::from(flood.percentile_us(50.0)) / 1e3,
                metric(&server, "luge_over_share_jobs_total"),
                metric(&server, "luge_yields_for_arrivals_total"),
            ),
        ));
    }

    Ok(Report {
        name: "fairness",
        title: "A victim route while another tenant amplifies or floods".into(),
        columns: vec![
            "attack",
            "victim requests",
            "victim answered",
            "victim p50 ms",
            "victim p99 ms",
            "victim max ms",
            "attacker",
        ],
        rows,
        x_desc: "",
        y_desc: "",
        series: Vec::new(),
        notes: format!(
            "Default admission flags: `--max-pending` from the sandbox pool, a call tree bounded at a quarter of it, places shared between tenants (a function route's name), an eighth kept for tenants within their share. The victim is `c-echo` over one keep-alive connection, one request at a time, {} s after {:.1} s of warm-up, during the attack (no warm-up on the row that starts with the attack). A fan-out's callees are charged to the tenant `outer`, the root of their call tree. The CPU-bound route is `spin` with {BURN_ITERATIONS} iterations a request. `[server] workers` = this machine's cores.",
            window.as_secs_f64(),
            warmup.as_secs_f64(),
        ),
    })
}

/// The victim beside 1 and 8 requests of 1 + 256 + 65,536 invocations,
/// each sleeping through the whole window: its rows (the victim measured
/// for `window` after `warmup`, the functions in `dir`).
fn amplified(
    setup: &Setup,
    dir: &std::path::Path,
    warmup: Duration,
    window: Duration,
) -> anyhow::Result<Vec<Vec<String>>> {
    let mut rows = Vec::new();
    // Amplification: 1 and 8 requests of 1 + 256 + 65,536 invocations,
    // each sleeping through the whole window.
    let sleep_ms = (warmup + window).as_millis() as u64 + 1000;
    let inner: Vec<Value> = (0..256)
        .map(|_| json!({ "name": "sleep", "input": { "ms": sleep_ms } }))
        .collect();
    let outer: Vec<Value> = (0..256)
        .map(|_| json!({ "name": "inner", "input": { "calls": inner } }))
        .collect();
    let attack = json!({ "calls": outer });
    // (requests, how long the victim waits for the attack to start, and
    // its warm-up).
    for (requests, head_start, victim_warmup) in [
        (1usize, Duration::from_millis(300), warmup),
        (8, Duration::from_millis(300), warmup),
        (8, Duration::ZERO, Duration::ZERO),
    ] {
        let tag = format!("amplify-{requests}-{}", head_start.as_millis());
        let server = serve(setup, dir, &tag, &[])?;
        let (victim, answered) = std::thread::scope(|scope| {
            let attackers: Vec<_> = (0..requests)
                .map(|_| scope.spawn(|| server.post("/outer", &attack).0))
                .collect();
            std::thread::sleep(head_start);
            let victim = load::closed_loop(&victim_target(&server), 1, victim_warmup, window);
            let answered = attackers
                .into_iter()
                .filter_map(|a| a.join().ok())
                .filter(|status| *status == 200)
                .count();
            (victim, answered)
        });
        let scenario = if head_start.is_zero() {
            format!("{requests} x the same, the victim from the attack's first instant")
        } else {
            format!("{requests} x fan-out 256 x 256 sleeping calls")
        };
        rows.push(row(
            &scenario,
            &victim,
            format!(
                "{answered} of {requests} requests answered; callees: {}",
                admissions(&server, "outer")
            ),
        ));
    }
    Ok(rows)
}

/// A fresh server (its own places), on this machine's cores.
fn serve(
    setup: &Setup,
    dir: &std::path::Path,
    tag: &str,
    extra: &[&str],
) -> anyhow::Result<Server> {
    let file = dir.join(format!("luge-{tag}.toml"));
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    std::fs::write(&file, format!("[server]\nworkers = {cores}\n{CONFIG}"))?;
    let mut args = vec!["--config", file.to_str().expect("utf-8 path")];
    args.extend_from_slice(extra);
    Ok(setup.server(&args))
}
