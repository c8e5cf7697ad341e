//! Calls between functions end to end (issue 15), on an in-process `luge
//! serve` with `[server] workers` = this machine's cores:
//!
//! - `calls-overhead`: what one no-op call and wait adds to a request,
//!   scheduled and fused, against reaching the same callee by an HTTP
//!   request to the host;
//! - `calls-fanout`: a caller fanning out to N callees of about 10 ms of CPU
//!   each, against the N / cores x 10 ms a perfect parallel run takes;
//! - `calls-social`: the social-network call graph under open-loop load at
//!   50/70/90 % of capacity, with calls scheduled, with leaf calls fused,
//!   and the same services composed by the client over HTTP.

use std::future::Future;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use bytes::Bytes;
use luge_benches::load::{self, LoadReport, Pool, Target};
use luge_benches::{Server, wasm};
use serde_json::{Value, json};

use crate::{Report, Setup};

/// Fused when measured at or under 1 ms: every callee here that calls
/// nothing qualifies once it has run.
const FUSE: &[&str] = &["--fuse-calls-under-us", "1000"];

fn cores() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
}

/// Writes `config` (routes, `[server] workers` added) and starts a server
/// on it with `extra` flags.
fn server(setup: &Setup, dir: &Path, config: &str, extra: &[&str]) -> anyhow::Result<Server> {
    let file = dir.join(format!("luge-{}.toml", extra.len()));
    std::fs::write(
        &file,
        format!("[server]\nworkers = {}\n\n{config}", cores()),
    )?;
    let mut args = vec!["--config", file.to_str().expect("utf-8 path")];
    args.extend_from_slice(extra);
    Ok(setup.server(&args))
}

fn target(server: &Server, path: &str, body: &Value) -> Target {
    Target {
        addr: server.addr(),
        method: hyper::Method::POST,
        path: path.to_owned(),
        body: Bytes::from(body.to_string()),
        expect_len: None,
        headers: Vec::new(),
    }
}

fn us(d: Duration) -> f64 {
    d.as_secs_f64() * 1e6
}

pub(crate) fn calls_overhead(setup: &Setup, window: Duration) -> anyhow::Result<Report> {
    let dir = tempfile::tempdir()?;
    for name in ["fanout", "noop"] {
        std::fs::write(dir.path().join(format!("{name}.wasm")), wasm(name))?;
    }
    let config = "[[routes]]\npath = \"/fanout\"\nmodule = \"fanout.wasm\"\ncalls = [\"noop\"]\n\n\
                  [[routes]]\npath = \"/noop\"\nmodule = \"noop.wasm\"\n";
    let scheduled = server(setup, dir.path(), config, &[])?;
    let fused = server(setup, dir.path(), config, FUSE)?;
    let none = json!({ "calls": [] });
    let one = json!({ "calls": [{ "name": "noop", "input": {} }] });
    // One connection, one request at a time: latency, not throughput.
    let measure = |server: &Server, path: &str, body: &Value| -> anyhow::Result<LoadReport> {
        let report = load::closed_loop(
            &target(server, path, body),
            1,
            Duration::from_secs(1),
            window,
        );
        anyhow::ensure!(report.errors == 0 && report.ok > 0, "{path}: {report:?}");
        Ok(report)
    };
    let base = measure(&scheduled, "/fanout", &none)?;
    let rows_in = [
        ("caller, no call", base.clone()),
        (
            "caller + one call, scheduled",
            measure(&scheduled, "/fanout", &one)?,
        ),
        (
            "caller + one call, fused",
            measure(&fused, "/fanout", &one)?,
        ),
        (
            "the callee alone over HTTP (POST /noop)",
            measure(&scheduled, "/noop", &json!({}))?,
        ),
    ];
    let base_p50 = f64::from(base.percentile_us(50.0));
    let rows = rows_in
        .iter()
        .map(|(what, r)| {
            let p50 = f64::from(r.percentile_us(50.0));
            vec![
                (*what).to_owned(),
                format!("{p50:.1}"),
                format!("{:.1}", f64::from(r.percentile_us(99.0))),
                format!("{:.0}", r.throughput()),
                if what.starts_with("caller +") {
                    format!("{:.1}", p50 - base_p50)
                } else {
                    "-".to_owned()
                },
            ]
        })
        .collect();
    Ok(Report {
        name: "calls-overhead",
        title: "What one no-op call adds (1 connection, closed loop)".into(),
        columns: vec!["request", "p50 µs", "p99 µs", "req/s", "added to p50, µs"],
        rows,
        x_desc: "",
        y_desc: "",
        series: Vec::new(),
        notes: format!(
            "`fanout` (Rust SDK) asked for no call or for one call of `noop`, over one keep-alive HTTP/1.1 connection on 127.0.0.1 (hyper client, one request at a time) for {} s after 1 s of warm-up; `[server] workers = {}`. Fused: `--fuse-calls-under-us 1000` (the callee runs on its caller's worker once measured). The last row is the callee reached as its own HTTP request instead of a call.",
            window.as_secs_f64(),
            cores()
        ),
    })
}

pub(crate) fn calls_fanout(setup: &Setup, rounds: usize) -> anyhow::Result<Report> {
    let dir = tempfile::tempdir()?;
    for name in ["fanout", "spin"] {
        std::fs::write(dir.path().join(format!("{name}.wasm")), wasm(name))?;
    }
    let config = "[[routes]]\npath = \"/fanout\"\nmodule = \"fanout.wasm\"\ncalls = [\"spin\"]\n\n\
                  [[routes]]\npath = \"/spin\"\nmodule = \"spin.wasm\"\n";
    let server = server(setup, dir.path(), config, &[])?;
    let fan = |n: usize, iterations: u64| -> anyhow::Result<Duration> {
        let calls: Vec<Value> = (0..n)
            .map(|_| json!({ "name": "spin", "input": { "iterations": iterations } }))
            .collect();
        let body = json!({ "calls": calls });
        let mut samples: Vec<Duration> = (0..rounds.max(3))
            .map(|_| {
                let started = Instant::now();
                let (status, out) = server.post("/fanout", &body);
                anyhow::ensure!(status == 200, "fanout {n}: {status} {out}");
                anyhow::ensure!(out["results"].as_array().map(Vec::len) == Some(n));
                Ok(started.elapsed())
            })
            .collect::<anyhow::Result<_>>()?;
        samples.sort_unstable();
        Ok(samples[samples.len() / 2])
    };
    // Calibrate one callee to about 10 ms: the median of a single call,
    // less the same request with a trivial callee.
    let overhead = fan(1, 1)?;
    let probe = 20_000_000u64;
    let probe_time = fan(1, probe)?.saturating_sub(overhead);
    let iterations = (probe as f64 * 0.010 / probe_time.as_secs_f64().max(1e-6)) as u64;
    let one = fan(1, iterations)?.saturating_sub(overhead);
    let workers = cores();
    let mut rows = Vec::new();
    let (mut measured, mut ideal_series, mut efficiency) = (Vec::new(), Vec::new(), Vec::new());
    for n in [1usize, 2, 4, 8, 16, 32, 64] {
        let took = fan(n, iterations)?;
        // N / cores x one callee's time: perfect parallelism, no overhead.
        let ideal = one.mul_f64(n as f64 / workers as f64).max(one);
        let e = ideal.as_secs_f64() / took.as_secs_f64();
        measured.push((n as f64, took.as_secs_f64() * 1e3));
        ideal_series.push((n as f64, ideal.as_secs_f64() * 1e3));
        efficiency.push((n as f64, e * 100.0));
        rows.push(vec![
            n.to_string(),
            format!("{:.2}", took.as_secs_f64() * 1e3),
            format!("{:.2}", ideal.as_secs_f64() * 1e3),
            format!("{:.0} %", e * 100.0),
        ]);
    }
    Ok(Report {
        name: "calls-fanout",
        title: format!(
            "Fan-out of N callees of {:.1} ms of CPU each",
            us(one) / 1e3
        ),
        columns: vec![
            "N",
            "completion ms (median)",
            "N / cores x one callee, ms",
            "parallel efficiency",
        ],
        rows,
        x_desc: "callees (N)",
        y_desc: "completion time, ms",
        series: vec![
            ("measured".into(), measured),
            ("N / cores x one callee".into(), ideal_series),
        ],
        notes: format!(
            "`fanout` starts N calls of `spin` ({iterations} iterations, {:.2} ms alone, calibrated in the run) before waiting for any, on {workers} workers; each point is the median of {} requests from a keep-alive client on 127.0.0.1, request overhead included ({:.2} ms with a trivial callee). Efficiency = (N / cores x one callee) / completion; for N < cores the ideal is one callee's time. Parallel efficiency by N: {}.",
            us(one) / 1e3,
            rounds.max(3),
            us(overhead) / 1e3,
            efficiency
                .iter()
                .map(|(n, e)| format!("{n}: {e:.0} %"))
                .collect::<Vec<_>>()
                .join(", ")
        ),
    })
}

fn social_input() -> Value {
    json!({
        "user": "alice",
        "text": "hello @bob and @carol see https://example.org/a/long/path",
        "media": [1, 2],
    })
}

/// How a post is composed.
#[derive(Clone, Copy)]
enum Composition {
    /// One request to `compose-post`; the host runs the call graph.
    Calls,
    /// The client calls the leaf services itself, over HTTP, with the same
    /// dependencies (text's two first, alongside user, media, unique-id;
    /// then storage and timeline).
    Http,
}

async fn post_json(pool: &Pool, path: &str, body: &Value) -> Option<Value> {
    match pool.post(path, Bytes::from(body.to_string())).await? {
        (status, body) if status == hyper::StatusCode::OK => serde_json::from_slice(&body).ok(),
        _ => None,
    }
}

async fn compose(pool: Pool, how: Composition) -> bool {
    let input = social_input();
    match how {
        Composition::Calls => post_json(&pool, "/compose-post", &input)
            .await
            .is_some_and(|out| out["post"]["post_id"].is_u64()),
        Composition::Http => {
            let text = json!({ "text": input["text"] });
            let user = json!({ "user": input["user"] });
            let media = json!({ "media": input["media"] });
            let (urls, mentions, user, media, id) = tokio::join!(
                post_json(&pool, "/url-shorten", &text),
                post_json(&pool, "/user-mention", &text),
                post_json(&pool, "/user", &user),
                post_json(&pool, "/media", &media),
                post_json(&pool, "/unique-id", &input),
            );
            let (Some(urls), Some(mentions), Some(user), Some(media), Some(id)) =
                (urls, mentions, user, media, id)
            else {
                return false;
            };
            let post = json!({
                "post_id": id["post_id"],
                "user_id": user["user_id"],
                "text": { "text": input["text"], "urls": urls["urls"], "mentions": mentions["mentions"] },
                "media": media["media"],
            });
            let (stored, timeline) = tokio::join!(
                post_json(&pool, "/post-storage", &post),
                post_json(&pool, "/home-timeline", &post),
            );
            stored.is_some() && timeline.is_some()
        }
    }
}

/// Posts composed per second by `concurrency` clients back to back.
fn capacity(pool: &Pool, how: Composition, concurrency: usize, window: Duration) -> f64 {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("tokio runtime");
    let done = Arc::new(AtomicU64::new(0));
    runtime.block_on(async {
        let end = Instant::now() + window;
        let clients: Vec<_> = (0..concurrency)
            .map(|_| {
                let (pool, done) = (pool.clone(), Arc::clone(&done));
                tokio::spawn(async move {
                    while Instant::now() < end {
                        if compose(pool.clone(), how).await {
                            done.fetch_add(1, Ordering::Relaxed);
                        }
                    }
                })
            })
            .collect();
        for client in clients {
            let _ = client.await;
        }
    });
    done.load(Ordering::Relaxed) as f64 / window.as_secs_f64()
}

fn open<F, Fut>(rate: f64, window: Duration, job: F) -> LoadReport
where
    F: Fn() -> Fut,
    Fut: Future<Output = bool> + Send + 'static,
{
    load::open_loop(rate, Duration::from_secs(1), window, 0x50c1a1, job)
}

pub(crate) fn calls_social(setup: &Setup, window: Duration) -> anyhow::Result<Report> {
    let dir = tempfile::tempdir()?;
    std::fs::write(dir.path().join("social.wasm"), wasm("social"))?;
    let config = luge_testkit::social_routes();
    let scheduled = server(setup, dir.path(), &config, &[])?;
    let fused = server(setup, dir.path(), &config, FUSE)?;
    let variants = [
        (
            "calls, scheduled",
            Pool::new(scheduled.addr()),
            Composition::Calls,
        ),
        (
            "calls, leaves fused",
            Pool::new(fused.addr()),
            Composition::Calls,
        ),
        (
            "HTTP composition by the client",
            Pool::new(scheduled.addr()),
            Composition::Http,
        ),
    ];
    let capacities: Vec<f64> = variants
        .iter()
        .map(|(_, pool, how)| {
            // Warm every route (first runs, measured execution times).
            capacity(pool, *how, 4, Duration::from_millis(500));
            capacity(pool, *how, 16, Duration::from_secs(2))
        })
        .collect();
    // One set of rates for all: fractions of the scheduled variant's
    // capacity, so the three are compared under the same offered load.
    let reference = capacities[0];
    let mut rows = Vec::new();
    let mut series = Vec::new();
    for ((name, pool, how), cap) in variants.iter().zip(&capacities) {
        let (mut p50s, mut p99s) = (Vec::new(), Vec::new());
        for load in [50u32, 70, 90] {
            let rate = reference * f64::from(load) / 100.0;
            let report = open(rate, window, || compose(pool.clone(), *how));
            let (p50, p99) = (
                f64::from(report.percentile_us(50.0)) / 1e3,
                f64::from(report.percentile_us(99.0)) / 1e3,
            );
            p50s.push((f64::from(load), p50));
            p99s.push((f64::from(load), p99));
            rows.push(vec![
                (*name).to_owned(),
                format!("{cap:.0}"),
                format!("{load} %"),
                format!("{rate:.0}"),
                format!("{p50:.3}"),
                format!("{p99:.3}"),
                report.errors.to_string(),
            ]);
        }
        series.push((format!("{name}: p50"), p50s));
        series.push((format!("{name}: p99"), p99s));
    }
    Ok(Report {
        name: "calls-social",
        title: "Social-network call graph under open-loop load".into(),
        columns: vec![
            "composition",
            "its capacity, posts/s",
            "load (of scheduled capacity)",
            "offered posts/s",
            "p50 ms",
            "p99 ms",
            "failed",
        ],
        rows,
        x_desc: "offered load, % of the scheduled variant's capacity",
        y_desc: "end-to-end latency, ms",
        series,
        notes: format!(
            "`compose-post` fans out to text (which calls url-shorten and user-mention), user, media and unique-id, then to post-storage and home-timeline: 9 sandboxes per post; the HTTP composition runs the 8 services other than compose-post and text as separate requests from the client, with the same dependencies (two rounds of parallel requests). Capacity: 16 clients back to back for 2 s. Open loop: Poisson arrivals at 50/70/90 % of the scheduled variant's capacity, {} s measured after 1 s, latency from each arrival's scheduled time; the generator (one thread, hyper client, keep-alive pool) shares this machine's {} cores with the server.",
            window.as_secs_f64(),
            cores()
        ),
    })
}
