//! `chains`: end-to-end latency of chains of 1-5 pass-through functions
//! over HTTP, against the same function on a plain route (Sledge DAG
//! Table 1).

use std::fmt::Write as _;
use std::time::{Duration, Instant};

use luge_benches::wasm;

use crate::{Report, Setup, mean_ms, percentile_ms};

pub(crate) fn chains(setup: &Setup, requests: usize) -> anyhow::Result<Report> {
    let dir = tempfile::tempdir()?;
    std::fs::write(dir.path().join("pass.wasm"), wasm("c-echo"))?;
    let mut config = String::from("[[routes]]\npath = \"/pass\"\nmodule = \"pass.wasm\"\n");
    let lengths = 1..=5usize;
    for n in lengths.clone() {
        let stages = vec!["\"/pass\""; n].join(", ");
        let _ = writeln!(
            config,
            "[[chains]]\npath = \"/chain{n}\"\nstages = [{stages}]"
        );
    }
    let file = dir.path().join("luge.toml");
    std::fs::write(&file, config)?;
    let server = setup.server(&["--config", file.to_str().expect("utf-8 path")]);
    let agent = luge_testkit::http_agent();
    let body = b"{\"payload\":\"sledge dag\"}";
    let timed = |path: &str| -> anyhow::Result<Vec<Duration>> {
        let url = format!("{}{path}", server.base);
        // Warm-up: connections, first-run caches.
        for _ in 0..20 {
            agent.post(&url).send(&body[..])?;
        }
        (0..requests)
            .map(|_| {
                let started = Instant::now();
                let response = agent.post(&url).send(&body[..])?;
                let (status, reply) = luge_testkit::status_and_body(response);
                anyhow::ensure!(status == 200 && reply == body, "{path}: {status}");
                Ok(started.elapsed())
            })
            .collect()
    };
    let route = timed("/pass")?;
    let mut rows = vec![vec![
        "plain route (no chain)".to_owned(),
        format!("{:.3}", percentile_ms(&route, 50.0)),
        format!("{:.3}", mean_ms(&route)),
        format!("{:.3}", percentile_ms(&route, 99.0)),
    ]];
    let (mut mean_series, mut p99_series) = (Vec::new(), Vec::new());
    for n in lengths {
        let samples = timed(&format!("/chain{n}"))?;
        mean_series.push((n as f64, mean_ms(&samples)));
        p99_series.push((n as f64, percentile_ms(&samples, 99.0)));
        rows.push(vec![
            n.to_string(),
            format!("{:.3}", percentile_ms(&samples, 50.0)),
            format!("{:.3}", mean_ms(&samples)),
            format!("{:.3}", percentile_ms(&samples, 99.0)),
        ]);
    }
    Ok(Report {
        name: "chains",
        title: "Function chains end to end (Sledge DAG Table 1)".into(),
        columns: vec!["stages", "p50 ms", "mean ms", "p99 ms"],
        rows,
        x_desc: "stages in the chain",
        y_desc: "end-to-end latency, ms",
        series: vec![("mean".into(), mean_series), ("p99".into(), p99_series)],
        notes: format!(
            "`[[chains]]` of 1-5 stages of the C `echo` (stdin to stdout, a pass-through function) on one in-process `luge serve`; {requests} requests one after another per chain over a keep-alive HTTP connection on 127.0.0.1, after 20 of warm-up; latency from sending the request to the whole reply. The plain route is the same function without a chain. Sledge DAG's Table 1 reports 0.40-0.80 ms end to end for chains of 1-5 no-op functions."
        ),
    })
}
