//! `telemetry`: what OpenTelemetry costs the hot path. The same site
//! (`actions/http`'s hello component and `c-ping` on routes) served by
//! four `luge serve` processes of this build: telemetry off, on at 1 %
//! (`parentbased_traceidratio`, 0.01) with and without the FaaS metrics,
//! and on at 100 %, the last two
//! exporting over OTLP/gRPC to a real Jaeger on loopback. Each point is
//! measured in rounds (two by default), the servers in turn within a
//! round, so a drift of the machine falls on all of them: req/s at 64
//! connections and the server's CPU per request, then p50 at one
//! connection.

use std::process::Command;
use std::time::Duration;

use luge_benches::load::Target;
use luge_benches::wasm;
use luge_testkit::jaeger::JaegerServer;

use crate::http_proxy::{
    HELLO, LUGE_MARKER, Served, luge_serve, luge_site, measure, process_cpu, start,
};
use crate::{Report, Setup};

/// Rounds by default: each is long (16 points), and two show a drift of
/// the machine.
pub(crate) const ROUNDS: usize = 2;

/// The telemetry settings of each server.
const CONFIGS: [(&str, &[(&str, &str)]); 4] = [
    ("off", &[]),
    (
        "on, 1 % sampled",
        &[
            ("OTEL_TRACES_SAMPLER", "parentbased_traceidratio"),
            ("OTEL_TRACES_SAMPLER_ARG", "0.01"),
        ],
    ),
    (
        "on, 1 % sampled, no metrics",
        &[
            ("OTEL_TRACES_SAMPLER", "parentbased_traceidratio"),
            ("OTEL_TRACES_SAMPLER_ARG", "0.01"),
            ("OTEL_METRICS_EXPORTER", "none"),
        ],
    ),
    ("on, 100 % sampled", &[("OTEL_TRACES_SAMPLER", "always_on")]),
];

pub(crate) fn telemetry(setup: &Setup, window: Duration, rounds: usize) -> anyhow::Result<Report> {
    let jaeger = JaegerServer::start()?;
    let dir = tempfile::tempdir()?;
    std::fs::write(dir.path().join("handler.wasm"), wasm("http-handler"))?;
    std::fs::write(dir.path().join("c-ping.wasm"), wasm("c-ping"))?;
    luge_site(
        dir.path(),
        "[[routes]]\npath = \"/hello\"\nmodule = \"handler.wasm\"\n\n\
         [[routes]]\npath = \"/ping\"\nmodule = \"c-ping.wasm\"\n",
    )?;
    let endpoint = jaeger.grpc_endpoint();
    let servers: Vec<Served> = CONFIGS
        .iter()
        .enumerate()
        .map(|(i, (name, env))| {
            let mut command: Command = luge_serve(setup, dir.path(), &format!("state{i}"), &[])?;
            if *name != "off" {
                command
                    .env("OTEL_EXPORTER_OTLP_ENDPOINT", &endpoint)
                    .env("OTEL_SERVICE_NAME", format!("luge-bench-{i}"));
            }
            for (key, value) in *env {
                command.env(key, value);
            }
            start(command, LUGE_MARKER)
        })
        .collect::<anyhow::Result<_>>()?;
    let targets = [
        ("component", "/hello", Some(HELLO.len())),
        ("c-ping", "/ping", None),
    ];
    let mut rows = Vec::new();
    let mut series: Vec<(String, Vec<(f64, f64)>)> = Vec::new();
    for (what, path, expect_len) in targets {
        for connections in [64, 1] {
            for round in 1..=rounds {
                for ((name, _), served) in CONFIGS.iter().zip(&servers) {
                    let target = Target {
                        addr: served.addr,
                        method: hyper::Method::GET,
                        path: path.to_owned(),
                        body: bytes::Bytes::new(),
                        expect_len,
                        headers: Vec::new(),
                    };
                    let (rate, row) = measure(served, &target, connections, window);
                    // Jaeger ingests what the last point sent on the same
                    // cores: the next point starts once it is idle.
                    settle(jaeger.pid());
                    rows.push(
                        [
                            vec![format!("{what}, telemetry {name}"), round.to_string()],
                            row,
                        ]
                        .concat(),
                    );
                    if connections == 64 {
                        let label = format!("{what}, {name}");
                        match series.iter_mut().find(|(l, _)| *l == label) {
                            Some((_, points)) => points.push((round as f64, rate)),
                            None => series.push((label, vec![(round as f64, rate)])),
                        }
                    }
                }
            }
        }
    }
    let mut columns = crate::http_proxy::load_columns("server");
    columns.insert(1, "round");
    Ok(Report {
        name: "telemetry",
        title: "What OpenTelemetry costs the hot path: off, 1 % and 100 % sampled".into(),
        columns,
        rows,
        x_desc: "round",
        y_desc: "requests per second at 64 connections",
        series,
        notes: format!(
            "Four `luge serve` processes of this build with the same site, telemetry off, on with `parentbased_traceidratio` 0.01 (with the FaaS metrics, and without: `OTEL_METRICS_EXPORTER=none`), and on with `always_on`, the last two exporting spans, function logs and FaaS metrics over OTLP/gRPC to Jaeger v1.76.0 (all-in-one, in-memory) on 127.0.0.1. Points in {} rounds, the servers in turn in each, each point starting once Jaeger (on the same two cores) has ingested the last one's spans; a closed-loop client of keep-alive connections on one thread of this process, {} ms per point after a 500 ms warm-up; server CPU from /proc/PID/stat (10 ms ticks) over the window. Requests carry no traceparent, so the 1 % server samples by its own ratio.",
            rounds,
            window.as_millis()
        ),
    })
}

/// Waits (up to 20 s) until process `pid` used under 5 ms of CPU in
/// 250 ms: the collector has caught up.
fn settle(pid: u32) {
    let pid = pid.to_string();
    let until = std::time::Instant::now() + Duration::from_secs(20);
    while std::time::Instant::now() < until {
        let before = process_cpu(&pid);
        std::thread::sleep(Duration::from_millis(250));
        if process_cpu(&pid).saturating_sub(before) < Duration::from_millis(5) {
            return;
        }
    }
}
