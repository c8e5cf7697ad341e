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
//! - `http-proxy`: one wasi:http component on Luge and on `wasmtime serve`,
//!   each a process of its own: req/s, p50/p99, server CPU per request.
//! - `sqlite`: a SQLite insert and select from a function (spin:sqlite)
//!   beside the same statements natively;
//! - `outbound`: one outgoing HTTP or HTTPS request from that component,
//!   on Luge and on `wasmtime serve -S http`: p50, server CPU per request.
//!
//! - `fairness`: a victim route's success rate and latency while another
//!   tenant amplifies one request through calls or floods its route.
//!
//! - `chains`: end-to-end latency of chains of 1-5 pass-through functions
//!   over HTTP, against the same function on a plain route (Sledge DAG
//!   Table 1).

mod azure_mix;
mod calls;
mod chains;
mod churn;
mod cold_start;
mod fairness;
mod http_proxy;
mod memory;
mod outbound;
mod python;
mod queues;
mod report;
mod scaling;
mod snapshots;
mod sqlite;
mod state;
mod state_counter;
mod state_shared;
mod telemetry;
mod triggers;
mod wasi_p3;

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use clap::{Parser, ValueEnum};
use luge_benches::stats::Latencies;
use luge_benches::{Server, init_body, key};
use luge_registry::ModuleRegistry;
use serde_json::json;

use azure_mix::azure_mix;
use calls::{calls_fanout, calls_overhead, calls_social};
use chains::chains;
use churn::churn;
use cold_start::cold_start;
use fairness::fairness;
use http_proxy::http_proxy;
use memory::memory;
use python::python;
pub(crate) use report::{Report, write};
use scaling::scaling;
use snapshots::snapshots;
use state::state_ops;
use state_counter::state_counter;
use state_shared::state_shared;

#[derive(Debug, Clone, Copy, ValueEnum, PartialEq, Eq)]
enum Experiment {
    ColdStart,
    AzureMix,
    Churn,
    Memory,
    Chains,
    CallsOverhead,
    CallsFanout,
    CallsSocial,
    StateOps,
    StateShared,
    StateCounter,
    Snapshots,
    Python,
    HttpProxy,
    Outbound,
    Sqlite,
    Triggers,
    TriggerFlood,
    /// Durable queues (Redis Streams, NATS JetStream, Kafka) drained, on one
    /// worker and two.
    Queues,
    Scaling,
    Fairness,
    /// What OpenTelemetry costs: off, 1 % and 100 % sampled.
    Telemetry,
    WasiP3,
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
    /// Seconds of load per point where an experiment drives load (a
    /// fraction of one too: the suite's smoke run takes 0.5).
    #[arg(long, default_value_t = 4.0, value_parser = positive_seconds)]
    seconds: f64,
    /// Engine to run on: wasmtime, or with the crate's features wasmer,
    /// wasmer-singlepass, wamr.
    #[arg(long, default_value = "wasmtime")]
    engine: String,
    /// Rounds per point: of the cold-start experiment (each round starts
    /// `n` fresh containers at once), and the like for chains, calls'
    /// fan-out, shared state, snapshots and Python (default 10); of the
    /// telemetry experiment, whose servers take turns in each round
    /// (default 2); of the scaling sweep, each round all of it, with the
    /// rounds' medians after them (default 1).
    #[arg(long)]
    rounds: Option<usize>,
    /// scaling: only these server core counts (comma-separated; default
    /// every power of two up to half the machine's cores).
    #[arg(long, value_delimiter = ',')]
    cores: Vec<usize>,
    /// scaling: only the rows whose name holds this text ("workers,
    /// c-ping", "wasmtime").
    #[arg(long)]
    only: Option<String>,
    /// scaling: connections of the throughput point.
    #[arg(long, default_value_t = scaling::CONNECTIONS)]
    connections: usize,
    /// scaling: leave out the one-connection p50 (to profile the
    /// throughput point alone).
    #[arg(long)]
    no_p50: bool,
    /// An extra flag for every `luge serve` the experiment starts (given
    /// once per flag: `--luge-arg=--steal-margin-us --luge-arg=200`), to
    /// compare settings of one build.
    #[arg(long = "luge-arg", allow_hyphen_values = true)]
    luge_args: Vec<String>,
}

// The `luge` binary's allocator: this binary serves as it does (the
// http-proxy, scaling and memory experiments measure that allocator).
#[global_allocator]
static ALLOCATOR: luge_executor::Allocator = luge_executor::Allocator {};

fn main() -> anyhow::Result<()> {
    // The http-proxy experiment runs Luge as a process of its own (to
    // measure its CPU alone): this binary, serving.
    if std::env::var_os(http_proxy::SERVE_ENV).is_some() {
        let cli = luge_executor::cli::Cli::parse_from(
            std::iter::once("luge".into()).chain(std::env::args_os().skip(1)),
        );
        // What went wrong, on stderr (which the experiments read for the
        // address), as `luge serve` logs it; `LUGE_LOG` for more.
        luge_executor::init_logging("warn");
        return tokio::runtime::Builder::new_multi_thread()
            .enable_all()
            .build()?
            .block_on(luge_executor::serve::run(cli));
    }
    let cli = Cli::parse();
    let out = cli
        .out
        .clone()
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../target/luge-bench"));
    let window = Duration::from_secs_f64(cli.seconds);
    // Ten rounds of the quick experiments give their percentiles enough
    // samples (the telemetry experiment has its own default).
    let rounds = cli.rounds.unwrap_or(10).max(1);
    let setup = Setup {
        engine: cli.engine.clone(),
        runtime: luge_benches::runtime_named(&cli.engine)?,
        luge_args: cli.luge_args.clone(),
    };
    let experiments = match cli.experiment {
        Experiment::All => vec![
            Experiment::ColdStart,
            Experiment::AzureMix,
            Experiment::Churn,
            Experiment::Memory,
            Experiment::Chains,
            Experiment::CallsOverhead,
            Experiment::CallsFanout,
            Experiment::CallsSocial,
            Experiment::StateOps,
            Experiment::StateShared,
            Experiment::StateCounter,
            Experiment::Snapshots,
            Experiment::Python,
            Experiment::HttpProxy,
            Experiment::Outbound,
            Experiment::Sqlite,
            Experiment::Triggers,
            Experiment::TriggerFlood,
            Experiment::Queues,
            Experiment::Scaling,
            Experiment::Fairness,
            Experiment::WasiP3,
            Experiment::Telemetry,
        ],
        one => vec![one],
    };
    for experiment in experiments {
        let report = match experiment {
            Experiment::ColdStart => cold_start(&setup, rounds),
            Experiment::AzureMix => azure_mix(&setup, window),
            Experiment::Churn => churn(&setup, window),
            Experiment::Memory => memory(&setup),
            Experiment::Chains => chains(&setup, rounds * 50),
            Experiment::CallsOverhead => calls_overhead(&setup, window),
            Experiment::CallsFanout => calls_fanout(&setup, rounds),
            Experiment::CallsSocial => calls_social(&setup, window),
            Experiment::StateOps => state_ops(&setup),
            Experiment::StateShared => state_shared(&setup, rounds),
            Experiment::StateCounter => state_counter(&setup, window),
            Experiment::Snapshots => snapshots(&setup, rounds),
            Experiment::Python => python(&setup, rounds),
            Experiment::HttpProxy => http_proxy(&setup, window),
            Experiment::Outbound => outbound::outbound(&setup, window),
            Experiment::Sqlite => sqlite::sqlite(&setup, window),
            Experiment::Triggers => triggers::triggers(&setup, window),
            Experiment::TriggerFlood => triggers::trigger_flood(&setup),
            Experiment::Queues => queues::queues(&setup, rounds as u64 * 2000),
            Experiment::Scaling => scaling(
                &setup,
                window,
                &scaling::Only {
                    cores: cli.cores.clone(),
                    rows: cli.only.clone(),
                    connections: cli.connections,
                    no_p50: cli.no_p50,
                    rounds: cli.rounds.unwrap_or(1).max(1),
                },
            ),
            Experiment::Fairness => fairness(&setup, window),
            Experiment::WasiP3 => wasi_p3::wasi_p3(&setup, window),
            Experiment::Telemetry => telemetry::telemetry(
                &setup,
                window,
                cli.rounds.unwrap_or(telemetry::ROUNDS).max(1),
            ),
            Experiment::All => unreachable!("expanded above"),
        }?;
        let dir = write(&out, &report, &setup)?;
        println!("{}", std::fs::read_to_string(dir.join("table.md"))?);
        eprintln!("wrote {}", dir.display());
    }
    Ok(())
}

/// `--seconds`: a finite number above zero, and at most a day.
fn positive_seconds(text: &str) -> anyhow::Result<f64> {
    match text.parse::<f64>() {
        Ok(seconds) if seconds > 0.0 && seconds <= 86_400.0 => Ok(seconds),
        _ => anyhow::bail!("{text:?} is not a number of seconds above 0 and at most 86400"),
    }
}

/// The engine every experiment runs on.
struct Setup {
    /// As `luge serve --engine` takes it.
    engine: String,
    /// The same engine in this process, to precompile and for churn.
    runtime: Arc<dyn luge_core::WasmRuntime>,
    /// Extra flags for every `luge serve` (`--luge-arg`).
    luge_args: Vec<String>,
}

impl Setup {
    /// An in-process `luge serve` on this engine, with `extra` flags.
    fn server(&self, extra: &[&str]) -> Server {
        let mut args = vec!["--engine", self.engine.as_str()];
        args.extend_from_slice(extra);
        args.extend(self.luge_args.iter().map(String::as_str));
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
