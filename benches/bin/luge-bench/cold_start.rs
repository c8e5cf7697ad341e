//! `cold-start`: 1-16 concurrent cold starts (init from an artifact + first
//! run) against the same C function spawned natively (WOW Fig. 4/5).

use luge_benches::wasm;

use crate::{Report, Setup, concurrent_cold_starts, mean_ms, percentile_ms, spawn_native, variant};

pub(crate) fn cold_start(setup: &Setup, rounds: usize) -> anyhow::Result<Report> {
    let server = setup.server(&[]);
    let registry = setup.registry();
    let native = luge_testkit::native_example("c-hello");
    let base = wasm("c-hello");
    let mut rows = Vec::new();
    let (mut artifact_series, mut wasm_series, mut native_series) =
        (Vec::new(), Vec::new(), Vec::new());
    let mut next_variant = 0;
    let mut fresh = |n: usize| -> Vec<Vec<u8>> {
        (0..n)
            .map(|_| {
                next_variant += 1;
                variant(&base, next_variant)
            })
            .collect()
    };
    for n in [1usize, 2, 4, 8, 16] {
        let (mut from_artifact, mut from_wasm, mut natives) = (Vec::new(), Vec::new(), Vec::new());
        for round in 0..rounds {
            // Artifacts made ahead, as at upload: the cold start is the
            // init. Every container has its own content hash, so nothing is
            // shared or cached between them.
            let artifacts = fresh(n)
                .iter()
                .map(|w| registry.compile_sealed(w))
                .collect::<Result<Vec<_>, _>>()?;
            from_artifact.extend(concurrent_cold_starts(
                &server,
                &format!("a{n}-{round}"),
                &artifacts,
            ));
            from_wasm.extend(concurrent_cold_starts(
                &server,
                &format!("w{n}-{round}"),
                &fresh(n),
            ));
            natives.extend(std::thread::scope(|s| {
                let handles: Vec<_> = (0..n)
                    .map(|_| s.spawn(|| spawn_native(&native, b"{}")))
                    .collect();
                handles
                    .into_iter()
                    .map(|h| h.join().expect("spawn"))
                    .collect::<Vec<_>>()
            }));
        }
        let (am, wm, nm) = (
            mean_ms(&from_artifact),
            mean_ms(&from_wasm),
            mean_ms(&natives),
        );
        artifact_series.push((n as f64, am));
        wasm_series.push((n as f64, wm));
        native_series.push((n as f64, nm));
        rows.push(vec![
            n.to_string(),
            format!("{am:.2}"),
            format!("{:.2}", percentile_ms(&from_artifact, 99.0)),
            format!("{wm:.2}"),
            format!("{:.2}", percentile_ms(&from_wasm, 99.0)),
            format!("{nm:.2}"),
            format!("{:.2}", percentile_ms(&natives, 99.0)),
        ]);
    }
    Ok(Report {
        name: "cold-start",
        title: "Cold start vs concurrent cold starts (WOW Fig. 4/5)".into(),
        columns: vec![
            "concurrent cold starts",
            "luge artifact mean ms",
            "luge artifact p99 ms",
            "luge .wasm mean ms",
            "luge .wasm p99 ms",
            "native spawn mean ms",
            "native spawn p99 ms",
        ],
        rows,
        x_desc: "concurrent cold starts",
        y_desc: "mean latency, ms",
        series: vec![
            (
                "luge: /init of an artifact + first /run over HTTP".into(),
                artifact_series,
            ),
            (
                "luge: /init of plain .wasm (compiles) + first /run".into(),
                wasm_series,
            ),
            (
                "native: spawn + run of the same C source".into(),
                native_series,
            ),
        ],
        notes: format!(
            "C `hello` (actions/c/hello.c), {rounds} rounds per point. Luge: each container gets its own code (a distinct content hash, so nothing is shared or cached), then `/init` and the first `/run` over HTTP on 127.0.0.1, all containers of a round at once; either a sealed artifact made ahead (as `luge-precompile` or an upload makes it) or the plain .wasm, compiled at /init. Native: the same source built with `cc -O2`, spawned once per cold start with the JSON on stdin, all at once; no HTTP. A Docker container start, the cold start WOW compares with, is not available on this machine."
        ),
    })
}
