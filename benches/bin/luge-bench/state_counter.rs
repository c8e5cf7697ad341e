//! `state-counter`: a Faasm-like shared-counter workload (issue 16): 32
//! clients keep invoking `counter`, each invocation making 10
//! compare-and-swap increments of one shared key, on 1 and 2 workers, on
//! the local tier and on Redis; the final count is checked exact.

use std::time::Duration;

use bytes::Bytes;
use luge_benches::load::{self, Target};
use luge_benches::wasm;
use serde_json::json;

use crate::state::redis;
use crate::{Report, Setup};

/// The shortest window measured: 32 clients queue on one or two workers,
/// so an invocation (10 increments, retried under contention) waits for
/// the 31 before it; on Redis, under a loaded 2-core machine, that passed
/// half a second, and a half-second window (`luge-bench all --seconds
/// 0.5`, its test) counted no invocation that started and ended in it.
const MIN_WINDOW: Duration = Duration::from_secs(2);

pub(crate) fn state_counter(setup: &Setup, window: Duration) -> anyhow::Result<Report> {
    let window = window.max(MIN_WINDOW);
    let (_redis, port) = redis()?;
    let url = format!("redis://127.0.0.1:{port}/");
    let dir = tempfile::tempdir()?;
    std::fs::write(dir.path().join("counter.wasm"), wasm("counter"))?;
    let mut rows = Vec::new();
    let mut series: Vec<(String, Vec<(f64, f64)>)> = Vec::new();
    for global in [false, true] {
        let mut points = Vec::new();
        for workers in [1usize, 2] {
            let config = dir.path().join(format!("luge-{workers}-{global}.toml"));
            std::fs::write(
                &config,
                format!(
                    "[server]\nworkers = {workers}\n\n[[routes]]\npath = \"/counter\"\nmodule = \"counter.wasm\"\nstate = [\"counters\"]\n"
                ),
            )?;
            let server = setup.server(&[
                "--config",
                config.to_str().expect("utf-8 path"),
                "--state-url",
                &url,
            ]);
            let key = format!("counters/c-{workers}-{global}");
            let target = Target {
                addr: server.addr(),
                method: hyper::Method::POST,
                path: "/counter".into(),
                body: Bytes::from(json!({ "key": key, "n": 10, "global": global }).to_string()),
                expect_len: None,
                headers: Vec::new(),
            };
            let report = load::closed_loop(&target, 32, Duration::from_millis(500), window);
            anyhow::ensure!(report.errors == 0, "{report:?}");
            // Every increment made, warm-up included, is in the count.
            let (_, last) =
                server.post("/counter", &json!({ "key": key, "n": 1, "global": global }));
            let count = last["value"].as_u64().unwrap_or(0);
            let rate = report.throughput() * 10.0;
            points.push((workers as f64, rate));
            rows.push(vec![
                if global { "Redis" } else { "local tier" }.to_owned(),
                workers.to_string(),
                format!("{rate:.0}"),
                format!("{:.2}", f64::from(report.percentile_us(50.0)) / 1e3),
                count.to_string(),
            ]);
        }
        series.push((
            if global { "Redis" } else { "local tier" }.to_owned(),
            points,
        ));
    }
    Ok(Report {
        name: "state-counter",
        title: "Shared counter: CAS increments per second".into(),
        columns: vec![
            "tier",
            "workers",
            "increments/s",
            "invocation p50 ms",
            "final count",
        ],
        rows,
        x_desc: "workers",
        y_desc: "increments per second",
        series,
        notes: format!(
            "`counter` (Rust SDK): 10 CAS increments of one shared key per invocation (read, then swap if unchanged, retry if another won); 32 closed-loop HTTP clients on 127.0.0.1 for {:.0} s after 0.5 s of warm-up, on an in-process `luge serve` with 1 or 2 workers; Redis is a `redis-server` on 127.0.0.1 started by the run. The final count (read back with one more increment) includes the warm-up's increments.",
            window.as_secs_f64()
        ),
    })
}
