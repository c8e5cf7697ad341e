//! `luge-bench <experiment>`: reproduces figures of the papers Luge follows
//! on the machine it runs on. Each experiment starts Luge in-process on
//! 127.0.0.1, drives it, and writes `data.csv`, `table.md`, `plot.svg` and
//! `machine.md` into `<out>/<experiment>/` (default
//! `target/luge-bench/`). Bounded in time; loopback only.
//!
//! - `cold-start`: 1-16 concurrent cold starts (init from an artifact + first
//!   run) against the same C function spawned natively (WOW Fig. 4/5).
//! - `azure-mix`: latency ECDF of a skewed mix, 90 % of requests to two
//!   functions and 10 % over 60 more, half of them CPU-bound (WOW Fig. 6).
//! - `churn`: sandbox creations per second and their latency as the rate
//!   rises, and a native fork+exec for scale (Faasm Fig. 10, Sledge Table 3).
//! - `memory`: RSS per warm container and per running sandbox, and how many
//!   fit in 1 GiB (WOW Table II, Faasm Table 3).
//!
//! - `chains`: end-to-end latency of chains of 1-5 pass-through functions
//!   over HTTP, against the same function on a plain route (Sledge DAG
//!   Table 1).

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use clap::{Parser, ValueEnum};
use luge_benches::stats::Latencies;
use luge_benches::{Server, init_body, key, rss_bytes, wasm};
use luge_core::{Action, Invocation, ModuleCode, ModuleRegistry, Preemption};
use luge_sched::{Job, Policy, Scheduler, SchedulerConfig};
use plotters::prelude::*;
use serde_json::json;

#[derive(Debug, Clone, Copy, ValueEnum, PartialEq, Eq)]
enum Experiment {
    ColdStart,
    AzureMix,
    Churn,
    Memory,
    Chains,
    All,
}

/// Reproduce the papers' figures on this machine.
#[derive(Debug, Parser)]
#[command(name = "luge-bench")]
struct Cli {
    /// Which experiment.
    #[arg(value_enum)]
    experiment: Experiment,
    /// Results folder.
    #[arg(long)]
    out: Option<PathBuf>,
    /// Seconds of load per point where an experiment drives load.
    #[arg(long, default_value_t = 4)]
    seconds: u64,
    /// Engine to run on: wasmtime, or with the crate's features wasmer,
    /// wasmer-singlepass, wamr.
    #[arg(long, default_value = "wasmtime")]
    engine: String,
    /// Rounds per point of the cold-start experiment (each round starts
    /// `n` fresh containers at once).
    #[arg(long, default_value_t = 10)]
    rounds: usize,
}

/// One experiment's results, written as CSV, a markdown table and a plot.
struct Report {
    name: &'static str,
    title: String,
    columns: Vec<&'static str>,
    rows: Vec<Vec<String>>,
    x_desc: &'static str,
    y_desc: &'static str,
    series: Vec<(String, Vec<(f64, f64)>)>,
    notes: String,
}

fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    let out = cli
        .out
        .clone()
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../target/luge-bench"));
    let window = Duration::from_secs(cli.seconds);
    let setup = Setup {
        engine: cli.engine.clone(),
        runtime: luge_benches::runtime_named(&cli.engine).map_err(anyhow::Error::msg)?,
    };
    let experiments = match cli.experiment {
        Experiment::All => vec![
            Experiment::ColdStart,
            Experiment::AzureMix,
            Experiment::Churn,
            Experiment::Memory,
            Experiment::Chains,
        ],
        one => vec![one],
    };
    for experiment in experiments {
        let report = match experiment {
            Experiment::ColdStart => cold_start(&setup, cli.rounds.max(1)),
            Experiment::AzureMix => azure_mix(&setup, window),
            Experiment::Churn => churn(&setup, window),
            Experiment::Memory => memory(&setup),
            Experiment::Chains => chains(&setup, cli.rounds.max(1) * 50),
            Experiment::All => unreachable!("expanded above"),
        }?;
        let dir = write(&out, &report, &setup)?;
        println!("{}", std::fs::read_to_string(dir.join("table.md"))?);
        eprintln!("wrote {}", dir.display());
    }
    Ok(())
}

/// The engine every experiment runs on.
struct Setup {
    /// As `luge serve --engine` takes it.
    engine: String,
    /// The same engine in this process, to precompile and for churn.
    runtime: Arc<dyn luge_core::WasmRuntime>,
}

impl Setup {
    /// An in-process `luge serve` on this engine, with `extra` flags.
    fn server(&self, extra: &[&str]) -> Server {
        let mut args = vec!["--engine", self.engine.as_str()];
        args.extend_from_slice(extra);
        Server::start_with(&args)
    }

    /// A registry on this engine sealing with the servers' key.
    fn registry(&self) -> ModuleRegistry {
        ModuleRegistry::new(Arc::clone(&self.runtime), key(), None)
    }
}

/// `wasm` with a custom section naming `variant`: the same code under a
/// different content hash, so every variant is a real cold start.
fn variant(wasm: &[u8], variant: u64) -> Vec<u8> {
    let section = wasm_encoder::CustomSection {
        name: "luge-variant".into(),
        data: variant.to_le_bytes().to_vec().into(),
    };
    let mut out = wasm.to_vec();
    out.push(wasm_encoder::Section::id(&section));
    wasm_encoder::Encode::encode(&section, &mut out);
    out
}

fn mean_ms(samples: &[Duration]) -> f64 {
    samples.iter().map(Duration::as_secs_f64).sum::<f64>() * 1e3 / samples.len().max(1) as f64
}

fn percentile_ms(samples: &[Duration], p: f64) -> f64 {
    samples.iter().collect::<Latencies>().percentile_ms(p)
}

/// One native run of `binary` with `stdin`, timed from spawn to exit.
fn spawn_native(binary: &Path, stdin: &[u8]) -> Duration {
    use std::io::Write;
    let started = Instant::now();
    let mut child = std::process::Command::new(binary)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("native function spawns");
    if let Some(mut pipe) = child.stdin.take() {
        let _ = pipe.write_all(stdin);
    }
    let _ = child.wait();
    started.elapsed()
}

/// `n` containers started at once on `server`, each from its own code
/// (`init_code(i)`), then run once; the time of each from its /init to the
/// end of its first /run.
fn concurrent_cold_starts(server: &Server, tag: &str, codes: &[Vec<u8>]) -> Vec<Duration> {
    std::thread::scope(|s| {
        let handles: Vec<_> = codes
            .iter()
            .enumerate()
            .map(|(i, code)| {
                s.spawn(move || {
                    let id = format!("{tag}-{i}");
                    let started = Instant::now();
                    assert_eq!(server.post(&format!("/{id}/init"), &init_body(code)).0, 200);
                    assert_eq!(
                        server.post(&format!("/{id}/run"), &json!({"value": {}})).0,
                        200
                    );
                    let took = started.elapsed();
                    let _ = server.post(&format!("/{id}/destroy"), &json!({}));
                    took
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().expect("client"))
            .collect()
    })
}

fn cold_start(setup: &Setup, rounds: usize) -> anyhow::Result<Report> {
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

fn azure_mix(setup: &Setup, window: Duration) -> anyhow::Result<Report> {
    use rand::{RngExt, SeedableRng};
    let server = setup.server(&[]);
    // f0 and f1 take 90 % of requests; f2..f61 share 10 %. Even functions
    // are CPU-bound (BLAKE3 rounds), odd ones are echo.
    let functions = 62;
    for f in 0..functions {
        let code = if f % 2 == 0 {
            wasm("hash")
        } else {
            wasm("echo")
        };
        assert_eq!(
            server.post(&format!("/f{f}/init"), &init_body(&code)).0,
            200
        );
    }
    let rate = 150.0;
    let mut rng = rand::rngs::StdRng::seed_from_u64(0x1a2e);
    let mut arrivals = Vec::new();
    let mut at = Duration::ZERO;
    while at < window {
        let pick: f64 = rng.random();
        let f = if pick < 0.45 {
            0
        } else if pick < 0.90 {
            1
        } else {
            2 + rng.random_range(0..functions - 2)
        };
        arrivals.push((at, f));
        let u: f64 = rng.random();
        at += Duration::from_secs_f64(-(1.0 - u).ln() / rate);
    }
    let start = Instant::now();
    let latencies: Vec<(usize, Duration)> = std::thread::scope(|s| {
        let handles: Vec<_> = arrivals
            .iter()
            .map(|&(at, f)| {
                let server = &server;
                if let Some(wait) = (start + at).checked_duration_since(Instant::now()) {
                    std::thread::sleep(wait);
                }
                s.spawn(move || {
                    let params = if f % 2 == 0 {
                        json!({"iterations": 2000})
                    } else {
                        json!({"f": f})
                    };
                    let (status, _) = server.post(&format!("/f{f}/run"), &json!({"value": params}));
                    assert_eq!(status, 200);
                    (f, Instant::now() - (start + at))
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().expect("client"))
            .collect()
    });
    let all: Vec<Duration> = latencies.iter().map(|l| l.1).collect();
    let hot: Vec<Duration> = latencies.iter().filter(|l| l.0 < 2).map(|l| l.1).collect();
    let tail: Vec<Duration> = latencies.iter().filter(|l| l.0 >= 2).map(|l| l.1).collect();
    let ecdf = |samples: &[Duration]| {
        let mut sorted: Vec<f64> = samples.iter().map(|d| d.as_secs_f64() * 1e3).collect();
        sorted.sort_by(f64::total_cmp);
        let n = sorted.len() as f64;
        sorted
            .iter()
            .enumerate()
            .map(|(i, &ms)| (ms, (i + 1) as f64 / n))
            .collect::<Vec<_>>()
    };
    let row = |name: &str, s: &[Duration]| {
        vec![
            name.to_owned(),
            s.len().to_string(),
            format!("{:.2}", percentile_ms(s, 50.0)),
            format!("{:.2}", percentile_ms(s, 90.0)),
            format!("{:.2}", percentile_ms(s, 99.0)),
        ]
    };
    Ok(Report {
        name: "azure-mix",
        title: "Latency ECDF of an Azure-like mix (WOW Fig. 6)".into(),
        columns: vec!["requests", "count", "p50 ms", "p90 ms", "p99 ms"],
        rows: vec![
            row("all", &all),
            row("two hot functions", &hot),
            row("60 others", &tail),
        ],
        x_desc: "latency, ms",
        y_desc: "fraction of requests",
        series: vec![
            ("all".into(), ecdf(&all)),
            ("two hot functions".into(), ecdf(&hot)),
            ("60 others".into(), ecdf(&tail)),
        ],
        notes: format!(
            "62 warm containers on one `luge serve`; open-loop Poisson arrivals at {rate} req/s for {} s (seed 0x1a2e); 45 % + 45 % of requests to f0 (hash, 2000 BLAKE3 rounds) and f1 (echo), 10 % spread over f2..f61 (alternately hash and echo). Latency over HTTP on 127.0.0.1 from the scheduled arrival, one client thread per request.",
            window.as_secs()
        ),
    })
}

fn churn(setup: &Setup, window: Duration) -> anyhow::Result<Report> {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    let _entered = runtime.enter();
    let registry = setup.registry();
    let module = registry.load(&ModuleCode::Wasm(wasm("noop")))?;
    let action = Arc::new(Action::command("noop"));
    let window = window.min(Duration::from_secs(3));
    let mut rows = Vec::new();
    let (mut avg_series, mut p99_series) = (Vec::new(), Vec::new());
    for rate in [1_000.0, 5_000.0, 10_000.0, 20_000.0, 40_000.0] {
        let scheduler = Scheduler::start(
            &SchedulerConfig {
                policy: Policy::Edf,
                ..SchedulerConfig::default()
            },
            None,
        )?;
        let (tx, rx) = std::sync::mpsc::channel();
        let start = Instant::now();
        let interval = Duration::from_secs_f64(1.0 / rate);
        let mut submitted = 0u64;
        let mut next = Duration::ZERO;
        while next < window {
            let arrival = start + next;
            while Instant::now() < arrival {
                std::hint::spin_loop();
            }
            let sandbox = Arc::clone(&module).start(
                Invocation::new(Arc::clone(&action), Vec::new()),
                Preemption::default(),
            );
            let tx = tx.clone();
            scheduler.submit(Job {
                function: Arc::from("noop"),
                deadline: arrival + Duration::from_millis(10),
                expected: None,
                future: Box::pin(async move {
                    let outcome = sandbox.await;
                    let _ = tx.send((arrival, Instant::now(), outcome.termination.is_success()));
                }),
            });
            submitted += 1;
            next += interval;
        }
        drop(tx);
        let done: Vec<_> = rx.iter().take(submitted as usize).collect();
        let finished = done.iter().map(|d| d.1).max().unwrap_or(start);
        let achieved = done.len() as f64 / (finished - start).as_secs_f64();
        let latencies: Vec<Duration> = done.iter().map(|d| d.1 - d.0).collect();
        let failed = done.iter().filter(|d| !d.2).count();
        let (avg, p99) = (
            mean_ms(&latencies) * 1e3,
            percentile_ms(&latencies, 99.0) * 1e3,
        );
        avg_series.push((rate, avg));
        p99_series.push((rate, p99));
        rows.push(vec![
            format!("{rate:.0}"),
            format!("{achieved:.0}"),
            format!("{avg:.0}"),
            format!("{p99:.0}"),
            failed.to_string(),
        ]);
    }
    let native = luge_testkit::native_example("c-ping");
    let spawns: Vec<Duration> = (0..300).map(|_| spawn_native(&native, b"")).collect();
    rows.push(vec![
        "native fork+exec, one after another".into(),
        format!("{:.0}", 1000.0 / mean_ms(&spawns)),
        format!("{:.0}", mean_ms(&spawns) * 1e3),
        format!("{:.0}", percentile_ms(&spawns, 99.0) * 1e3),
        "0".into(),
    ]);
    Ok(Report {
        name: "churn",
        title: "Sandbox churn (Faasm Fig. 10, Sledge Table 3)".into(),
        columns: vec![
            "offered sandboxes/s",
            "completed sandboxes/s",
            "avg latency µs",
            "p99 latency µs",
            "failed",
        ],
        rows,
        x_desc: "offered sandboxes per second",
        y_desc: "latency, µs",
        series: vec![("avg".into(), avg_series), ("p99".into(), p99_series)],
        notes: format!(
            "`noop.wasm` sandboxes (instantiate, run `_start`, tear down) submitted to luge-sched (one pinned worker per core, edf) at a fixed rate for {} s each, no HTTP; latency from the scheduled submission to completion. The native row spawns the C `ping` built with `cc -O2` 300 times in sequence (Sledge Table 3 compares 61 µs avg / 146 µs p99 per sandbox with 487 / 588 µs for fork+exec).",
            window.as_secs()
        ),
    })
}

fn memory(setup: &Setup) -> anyhow::Result<Report> {
    let server = setup.server(&[]);
    let init = init_body(&wasm("sleep"));
    assert_eq!(server.post("/warm0/init", &init).0, 200);
    assert_eq!(
        server.post("/warm0/run", &json!({"value": {"ms": 1}})).0,
        200
    );
    let containers = 200;
    let before = rss_bytes();
    for i in 1..=containers {
        assert_eq!(server.post(&format!("/warm{i}/init"), &init).0, 200);
    }
    let per_container = rss_bytes().saturating_sub(before) as f64 / containers as f64;

    // Containers that each bring their own module (a distinct content hash
    // of the same code, sealed ahead): what WOW's per-container figure
    // counts, the module's code and data included.
    let distinct = 50;
    let registry = setup.registry();
    let sleep = wasm("sleep");
    let artifacts = (0..distinct)
        .map(|i| registry.compile_sealed(&variant(&sleep, 1_000 + i)))
        .collect::<Result<Vec<_>, _>>()?;
    let before_distinct = rss_bytes();
    for (i, artifact) in artifacts.iter().enumerate() {
        assert_eq!(
            server
                .post(&format!("/own{i}/init"), &init_body(artifact))
                .0,
            200
        );
    }
    let per_module_container = rss_bytes().saturating_sub(before_distinct) as f64 / distinct as f64;
    let running = 64;
    let idle = rss_bytes();
    let peak = std::thread::scope(|s| {
        for i in 0..running {
            let server = &server;
            s.spawn(move || {
                server.post(
                    &format!("/warm{}/run", i + 1),
                    &json!({"value": {"ms": 800}}),
                )
            });
        }
        std::thread::sleep(Duration::from_millis(400));
        rss_bytes()
    });
    let per_sandbox = peak.saturating_sub(idle) as f64 / running as f64;
    let gib = (1u64 << 30) as f64;
    let rows = vec![
        vec![
            "warm container with its own module (distinct artifact)".into(),
            format!("{:.1}", per_module_container / 1024.0),
            format!("{:.0}", gib / per_module_container.max(1.0)),
        ],
        vec![
            "warm container (init of an already loaded module)".into(),
            format!("{:.1}", per_container / 1024.0),
            format!("{:.0}", gib / per_container.max(1.0)),
        ],
        vec![
            format!("running sandbox ({running} sleeping at once)"),
            format!("{:.1}", per_sandbox / 1024.0),
            format!("{:.0}", gib / per_sandbox.max(1.0)),
        ],
    ];
    Ok(Report {
        name: "memory",
        title: "Memory per container and per running sandbox (WOW Table II, Faasm Table 3)".into(),
        columns: vec!["what", "RSS KiB each", "how many fit in 1 GiB"],
        rows,
        x_desc: "",
        y_desc: "",
        series: Vec::new(),
        notes: format!(
            "`sleep.wasm` (Rust) on one in-process `luge serve`; RSS of the process from /proc/self/statm. {containers} extra containers of the loaded module; {distinct} containers each initialized from its own sealed artifact of the same code (a distinct content hash); then {running} of the first kind each running a 800 ms sleep at once (sampled after 400 ms). WOW Table II reports 2.9-6.3 MiB per container."
        ),
    })
}

fn chains(setup: &Setup, requests: usize) -> anyhow::Result<Report> {
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

fn machine(engine: &luge_core::EngineId) -> String {
    let read = |p: &str| std::fs::read_to_string(p).unwrap_or_default();
    let cpu = read("/proc/cpuinfo")
        .lines()
        .find_map(|l| {
            l.strip_prefix("model name")
                .map(|v| v.trim_start_matches([' ', '\t', ':']).to_owned())
        })
        .unwrap_or_else(|| "unknown".into());
    let mem = read("/proc/meminfo")
        .lines()
        .find(|l| l.starts_with("MemTotal"))
        .unwrap_or("")
        .to_owned();
    format!(
        "- CPU: {cpu}, {} logical cores\n- {mem}\n- kernel {}- arch {}\n- engine: {}\n- measured: {}\n",
        std::thread::available_parallelism().map_or(1, |n| n.get()),
        read("/proc/sys/kernel/osrelease"),
        std::env::consts::ARCH,
        engine,
        httpdate::fmt_http_date(std::time::SystemTime::now()),
    )
}

fn write(out: &Path, report: &Report, setup: &Setup) -> anyhow::Result<PathBuf> {
    let dir = out.join(report.name);
    std::fs::create_dir_all(&dir)?;
    let mut csv = csv::Writer::from_path(dir.join("data.csv"))?;
    csv.write_record(&report.columns)?;
    for row in &report.rows {
        csv.write_record(row)?;
    }
    csv.flush()?;
    let mut md = format!(
        "## {}\n\nEngine: {} (`--engine {}`). {}\n\n",
        report.title,
        setup.runtime.id(),
        setup.engine,
        report.notes
    );
    let _ = writeln!(md, "| {} |", report.columns.join(" | "));
    let _ = writeln!(md, "|{}", "---|".repeat(report.columns.len()));
    for row in &report.rows {
        let _ = writeln!(md, "| {} |", row.join(" | "));
    }
    std::fs::write(dir.join("table.md"), md)?;
    std::fs::write(dir.join("machine.md"), machine(setup.runtime.id()))?;
    if !report.series.is_empty() {
        plot(&dir.join("plot.svg"), report).map_err(|e| anyhow::anyhow!("plot: {e}"))?;
    }
    Ok(dir)
}

fn plot(path: &Path, report: &Report) -> Result<(), Box<dyn std::error::Error>> {
    let points = report.series.iter().flat_map(|s| s.1.iter());
    let (mut x_max, mut y_max) = (0f64, 0f64);
    for &(x, y) in points {
        x_max = x_max.max(x);
        y_max = y_max.max(y);
    }
    let area = SVGBackend::new(path, (900, 560)).into_drawing_area();
    area.fill(&WHITE)?;
    let mut chart = ChartBuilder::on(&area)
        .caption(&report.title, ("sans-serif", 22))
        .margin(15)
        .x_label_area_size(40)
        .y_label_area_size(60)
        .build_cartesian_2d(0f64..x_max * 1.05 + 1e-9, 0f64..y_max * 1.1 + 1e-9)?;
    chart
        .configure_mesh()
        .x_desc(report.x_desc)
        .y_desc(report.y_desc)
        .draw()?;
    for (i, (name, points)) in report.series.iter().enumerate() {
        let color = Palette99::pick(i).to_rgba();
        chart
            .draw_series(LineSeries::new(
                points.iter().copied(),
                color.stroke_width(2),
            ))?
            .label(name.clone())
            .legend(move |(x, y)| {
                PathElement::new(vec![(x, y), (x + 18, y)], color.stroke_width(2))
            });
    }
    chart
        .configure_series_labels()
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK)
        .position(SeriesLabelPosition::UpperLeft)
        .draw()?;
    area.present()?;
    Ok(())
}
