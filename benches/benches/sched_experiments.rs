//! Scheduling experiments on real sandboxes (spin.wasm through luge-sched),
//! with a seeded open-loop Poisson load generator.
//!
//! - `deadline`: the deadline-miss experiment after the Sledge DAG paper
//!   (its Tables 2-3): four function classes, half of each with tight and
//!   half with loose deadlines, load from 50 % to 95 % of measured capacity,
//!   every policy with and without preemption.
//! - `hol`: head-of-line blocking after Pyrosome (its Fig. 14): short and
//!   long functions at 70 % CPU, the short class's p50/p99 with and without
//!   preemption, against the short class unloaded.
//!
//! `cargo bench -p luge-benches --bench sched_experiments [-- deadline|hol]`
//! prints markdown tables and writes CSV to target/experiments/.

use std::sync::Arc;
use std::sync::mpsc;
use std::time::{Duration, Instant};

use luge_benches::{registry, wasm};
use luge_core::{Action, Invocation, LoadedModule, Preemption};
use luge_registry::ModuleCode;
use luge_sched::{Job, Policy, Scheduler, SchedulerConfig, Sharding, WorkerWrapper};
use rand::rngs::StdRng;
use rand::{RngExt, SeedableRng};

/// Every run draws the same arrivals.
const SEED: u64 = 0x1u64 << 42 | 2026;
/// Workers: one per core of the machine the figures are recorded on (2
/// here), or `LUGE_BENCH_WORKERS` (the device machine's 14-worker sweep).
fn workers() -> usize {
    std::env::var("LUGE_BENCH_WORKERS")
        .ok()
        .and_then(|w| w.parse().ok())
        .filter(|&w| w > 0)
        .unwrap_or(2)
}

/// A function class: its share of requests and its service time.
struct Class {
    name: &'static str,
    share: f64,
    service: Duration,
    iterations: u64,
    /// Deadline as a multiple of the service time, when the class fixes it
    /// (otherwise the run's tight or loose factor, by coin flip).
    deadline_factor: Option<f64>,
}

struct Completion {
    /// How late the generator submitted the job after its scheduled arrival.
    submit_lag: Duration,
    class: usize,
    tight: bool,
    latency: Duration,
    missed: bool,
}

struct Bench {
    module: Arc<dyn LoadedModule>,
    actions: Vec<Arc<Action>>,
    _runtime: tokio::runtime::Runtime,
    wrapper: WorkerWrapper,
}

impl Bench {
    fn new(names: &[&'static str]) -> Self {
        let registry = registry();
        let module = registry
            .load(&ModuleCode::Wasm(wasm("spin")))
            .expect("spin.wasm loads");
        let actions = names
            .iter()
            .map(|name| Arc::new(Action::command(*name)))
            .collect();
        let runtime = tokio::runtime::Runtime::new().expect("tokio");
        let handle = runtime.handle().clone();
        let wrapper: WorkerWrapper = Arc::new(move |_, run| {
            let _guard = handle.enter();
            run();
        });
        Self {
            module,
            actions,
            _runtime: runtime,
            wrapper,
        }
    }

    fn invocation(&self, class: usize, iterations: u64) -> Invocation {
        Invocation::new(
            Arc::clone(&self.actions[class]),
            format!("{{\"iterations\":{iterations}}}").into_bytes(),
        )
    }

    /// Spin iterations per microsecond, measured directly on this thread.
    fn calibrate(&self) -> f64 {
        let iterations = 20_000_000;
        let mut best = Duration::MAX;
        for _ in 0..5 {
            let outcome = self.module.run(self.invocation(0, iterations));
            assert!(
                outcome.termination.is_success(),
                "{:?}",
                outcome.termination
            );
            best = best.min(outcome.elapsed);
        }
        iterations as f64 / best.as_micros() as f64
    }

    /// Runs one load point; returns every completion.
    #[allow(clippy::too_many_arguments)]
    fn run(
        &self,
        classes: &[Class],
        policy: Policy,
        quantum: Option<Duration>,
        rate_per_s: f64,
        duration: Duration,
        tight_factor: f64,
        loose_factor: f64,
        sharding: Option<Sharding>,
    ) -> Vec<Completion> {
        let config = SchedulerConfig {
            workers: workers(),
            policy,
            pin: true,
            sharding,
            ..Default::default()
        };
        let scheduler =
            Scheduler::start(&config, Some(Arc::clone(&self.wrapper))).expect("scheduler");
        let preemption = match quantum {
            Some(quantum) => Preemption {
                quantum,
                enabled: true,
            },
            None => Preemption {
                enabled: false,
                ..Preemption::default()
            },
        };
        let mut rng = StdRng::seed_from_u64(SEED);
        let (tx, rx) = mpsc::channel();
        let start = Instant::now();
        let mut next = Duration::ZERO;
        let mut submitted = 0;
        while next < duration {
            let arrival = start + next;
            if let Some(wait) = arrival.checked_duration_since(Instant::now()) {
                std::thread::sleep(wait);
            }
            let pick: f64 = rng.random();
            let mut acc = 0.0;
            let class = classes
                .iter()
                .position(|c| {
                    acc += c.share;
                    pick < acc
                })
                .unwrap_or(classes.len() - 1);
            let tight = rng.random::<bool>();
            let factor = classes[class].deadline_factor.unwrap_or(if tight {
                tight_factor
            } else {
                loose_factor
            });
            let deadline = arrival + classes[class].service.mul_f64(factor);
            let submit_lag = Instant::now().saturating_duration_since(arrival);
            let sandbox = Arc::clone(&self.module).start(
                self.invocation(class, classes[class].iterations),
                preemption,
            );
            let tx = tx.clone();
            scheduler.submit(Job {
                function: Arc::from(classes[class].name),
                deadline,
                expected: Some(classes[class].service),
                longest_poll: std::time::Duration::from_secs(60),
                tenant: None,
                future: Box::pin(async move {
                    let outcome = sandbox.await;
                    let done = Instant::now();
                    assert!(outcome.termination.is_success());
                    let _ = tx.send(Completion {
                        submit_lag,
                        class,
                        tight,
                        latency: done - arrival,
                        missed: done > deadline,
                    });
                }),
            });
            submitted += 1;
            // Exponential inter-arrival times: a Poisson process.
            let u: f64 = rng.random();
            next += Duration::from_secs_f64(-(1.0 - u).ln() / rate_per_s);
        }
        drop(tx);
        let completions: Vec<Completion> = rx.iter().take(submitted).collect();
        assert_eq!(completions.len(), submitted);
        completions
    }
}

/// Jobs per second the workers complete when the class mix is submitted all
/// at once (a few hundred jobs, default scheduler settings): capacity as
/// measured, with every overhead of this machine in it, rather than as the
/// service times alone predict.
fn measured_capacity(bench: &Bench, classes: &[Class]) -> f64 {
    let burst_rate = 100_000.0;
    let completions = bench.run(
        classes,
        Policy::Edf,
        Some(Duration::from_millis(5)),
        burst_rate,
        Duration::from_secs_f64(400.0 / burst_rate),
        2.0,
        10.0,
        None,
    );
    let makespan = completions
        .iter()
        .map(|c| c.latency)
        .max()
        .unwrap_or(Duration::from_secs(1));
    completions.len() as f64 / makespan.as_secs_f64()
}

fn rate(completions: &[Completion], class: usize, tight: bool) -> f64 {
    let of: Vec<_> = completions
        .iter()
        .filter(|c| c.class == class && c.tight == tight)
        .collect();
    if of.is_empty() {
        return f64::NAN;
    }
    100.0 * of.iter().filter(|c| c.missed).count() as f64 / of.len() as f64
}

fn percentile(latencies: Vec<Duration>, p: f64) -> Duration {
    latencies
        .into_iter()
        .collect::<luge_benches::stats::Latencies>()
        .percentile(p)
}

fn csv(name: &str) -> csv::Writer<std::fs::File> {
    let dir = luge_testkit::built_dir().join("experiments");
    std::fs::create_dir_all(&dir).expect("results dir");
    csv::Writer::from_path(dir.join(name)).expect("csv file")
}

/// A function class as specified: name, share of requests, service time
/// in microseconds.
type Spec = (&'static str, f64, u64);

/// spin.wasm loaded and calibrated, with classes whose spin iterations give
/// their service times on this machine.
struct Setup {
    bench: Bench,
    classes: Vec<Class>,
    /// Spin iterations per microsecond.
    ips: f64,
    /// Mean service time over the class mix, seconds.
    mean_service: f64,
}

fn setup(specs: &[Spec]) -> Setup {
    let names: Vec<&'static str> = specs.iter().map(|s| s.0).collect();
    let bench = Bench::new(&names);
    let ips = bench.calibrate();
    let classes: Vec<Class> = specs
        .iter()
        .map(|&(name, share, service_us)| Class {
            name,
            share,
            service: Duration::from_micros(service_us),
            iterations: (service_us as f64 * ips) as u64,
            deadline_factor: None,
        })
        .collect();
    let mean_service = classes
        .iter()
        .map(|c| c.share * c.service.as_secs_f64())
        .sum();
    Setup {
        bench,
        classes,
        ips,
        mean_service,
    }
}

/// Seconds of arrivals per load point of the deadline experiment: enough
/// that the rarest class (5 % of requests) has dozens of requests per point.
const POINT_SECS: u64 = 12;

/// Whether the deadline experiment runs the rows of `policy_preempt`
/// ("edf no", "srsf 5 ms quantum"): all of them, or those that hold one of
/// `LUGE_BENCH_ROWS`'s comma-separated texts ("edf no,fifo no").
fn wanted_row(policy_preempt: &str) -> bool {
    std::env::var("LUGE_BENCH_ROWS").map_or(true, |rows| {
        rows.split(',')
            .any(|row| policy_preempt.contains(row.trim()))
    })
}

fn deadline_experiment() {
    // Four classes, 60/25/10/5 % of requests, service times growing 4x per
    // class: many small functions and a heavy tail, scaled to this machine.
    // The smallest is 5 ms so that its tight deadline (10 ms) is at least
    // two default quanta: a deadline shorter than the quantum measures the
    // quantum, not the policy.
    let Setup {
        bench,
        classes,
        ips,
        mean_service,
    } = setup(&[
        ("c1-5ms", 0.60, 5_000),
        ("c2-20ms", 0.25, 20_000),
        ("c3-80ms", 0.10, 80_000),
        ("c4-320ms", 0.05, 320_000),
    ]);
    let names: Vec<&str> = classes.iter().map(|c| c.name).collect();
    let shares: Vec<f64> = classes.iter().map(|c| c.share).collect();
    let workers = workers();
    let predicted = workers as f64 / mean_service;
    let capacity = measured_capacity(&bench, &classes);
    println!("## Deadline misses (Sledge DAG Tables 2-3)\n");
    println!(
        "spin.wasm at {ips:.0} iterations/µs; classes {names:?} at {shares:?} of requests; mean service {:.2} ms; capacity measured {capacity:.1} req/s on {workers} workers (the service times alone predict {predicted:.1}), loads are fractions of the measured capacity; tight deadline 2x, loose 10x the class's service time; {POINT_SECS} s of Poisson arrivals per point, seed {SEED}.\n",
        mean_service * 1e3
    );
    let mut out = csv("deadline_misses.csv");
    let _ = out.write_record([
        "policy", "preempt", "load_pct", "class", "tight", "miss_pct", "requests",
    ]);
    println!(
        "| policy | preempt | load | {} |",
        names
            .iter()
            .flat_map(|n| [format!("{n} tight"), format!("{n} loose")])
            .collect::<Vec<_>>()
            .join(" | ")
    );
    println!("|---|---|---|{}", "---|".repeat(names.len() * 2));
    for (policy, label) in [
        (Policy::Fifo, "fifo"),
        (Policy::Edf, "edf"),
        (Policy::Srsf, "srsf"),
    ] {
        for quantum in [
            None,
            Some(Duration::from_millis(5)),
            Some(Duration::from_millis(1)),
        ] {
            let preempt =
                quantum.map_or("no".to_owned(), |q| format!("{} ms quantum", q.as_millis()));
            if !wanted_row(&format!("{label} {preempt}")) {
                continue;
            }
            for load in [50, 70, 90, 95] {
                let completions = bench.run(
                    &classes,
                    policy,
                    quantum,
                    capacity * load as f64 / 100.0,
                    Duration::from_secs(POINT_SECS),
                    2.0,
                    10.0,
                    None,
                );
                let mut cells = Vec::new();
                for (i, _) in classes.iter().enumerate() {
                    for tight in [true, false] {
                        let miss = rate(&completions, i, tight);
                        let n = completions
                            .iter()
                            .filter(|c| c.class == i && c.tight == tight)
                            .count();
                        let _ = out.write_record([
                            label.to_string(),
                            preempt.to_string(),
                            load.to_string(),
                            names[i].to_string(),
                            tight.to_string(),
                            format!("{miss:.2}"),
                            n.to_string(),
                        ]);
                        cells.push(format!("{miss:.1} %"));
                    }
                }
                println!("| {label} | {preempt} | {load} % | {} |", cells.join(" | "));
            }
        }
    }
    println!();
}

/// A head-of-line case: label, classes, policy, quantum (None: no
/// preemption), arrival rate.
type Case<'a> = (
    &'a str,
    &'a [Class],
    Policy,
    Option<Duration>,
    f64,
    Option<Sharding>,
);

fn hol_experiment() {
    // 90 % short (10 ms) and 10 % long (100 ms) requests: the long ones are
    // over half the CPU time; total offered load 70 % of capacity.
    let Setup {
        bench,
        mut classes,
        mean_service,
        ..
    } = setup(&[("short-10ms", 0.9, 10_000), ("long-100ms", 0.1, 100_000)]);
    // Latency-critical short functions, batch-like long ones.
    classes[0].deadline_factor = Some(2.0);
    classes[1].deadline_factor = Some(10.0);
    let workers = workers();
    let rate_70 = 0.7 * workers as f64 / mean_service;
    println!("## Head-of-line blocking (Pyrosome Fig. 14)\n");
    println!(
        "short 10 ms (90 % of requests) and long 100 ms (10 %) on {workers} workers at 70 % CPU ({rate_70:.1} req/s), 10 s of Poisson arrivals, deadlines 2x service time for the short class and 10x for the long one, seed {SEED}.\n"
    );
    let mut out = csv("head_of_line.csv");
    let _ = out.write_record([
        "case",
        "short_p50_ms",
        "short_p99_ms",
        "long_p50_ms",
        "long_p99_ms",
        "max_submit_lag_ms",
    ]);
    println!(
        "| case | short p50 | short p99 | long p50 | long p99 | generator max lag |\n|---|---|---|---|---|---|"
    );
    let short_only = [Class {
        name: "short-10ms",
        share: 1.0,
        service: classes[0].service,
        iterations: classes[0].iterations,
        deadline_factor: Some(2.0),
    }];
    let five_ms = Some(Duration::from_millis(5));
    // Pyrosome's sharding: the long class (100 ms, expected as declared)
    // on half the workers (one of two); short functions anywhere.
    let shard = Some(Sharding {
        long_above: Duration::from_millis(50),
        long_workers: (workers / 2).max(1),
    });
    // Both classes at 70 %: the case's name, policy, quantum and sharding.
    let mixed = |label, policy, quantum, sharding| -> Case<'_> {
        (label, &classes, policy, quantum, rate_70, sharding)
    };
    let cases: [Case<'_>; 9] = [
        (
            "short alone, low load (5 req/s)",
            &short_only,
            Policy::Edf,
            five_ms,
            5.0,
            None,
        ),
        mixed("fifo, no preemption", Policy::Fifo, None, None),
        mixed("edf, no preemption", Policy::Edf, None, None),
        mixed(
            "fifo (round robin), preemption",
            Policy::Fifo,
            five_ms,
            None,
        ),
        mixed("edf, preemption", Policy::Edf, five_ms, None),
        mixed("srsf, no preemption", Policy::Srsf, None, None),
        mixed("srsf, preemption", Policy::Srsf, five_ms, None),
        mixed(
            "sharding (long on half the workers), fifo, no preemption",
            Policy::Fifo,
            None,
            shard,
        ),
        mixed(
            "sharding (long on half the workers), edf, preemption",
            Policy::Edf,
            five_ms,
            shard,
        ),
    ];
    for (label, set, policy, quantum, rate_per_s, sharding) in cases {
        let completions = bench.run(
            set,
            policy,
            quantum,
            rate_per_s,
            Duration::from_secs(10),
            2.0,
            2.0,
            sharding,
        );
        let lat = |class: usize| {
            completions
                .iter()
                .filter(|c| c.class == class)
                .map(|c| c.latency)
                .collect::<Vec<_>>()
        };
        let ms = |d: Duration| d.as_secs_f64() * 1e3;
        let (s50, s99) = (percentile(lat(0), 50.0), percentile(lat(0), 99.0));
        let (l50, l99) = (percentile(lat(1), 50.0), percentile(lat(1), 99.0));
        let lag = completions
            .iter()
            .map(|c| c.submit_lag)
            .max()
            .unwrap_or_default();
        let row = [ms(s50), ms(s99), ms(l50), ms(l99), ms(lag)];
        let csv_row =
            std::iter::once(label.to_string()).chain(row.iter().map(|v| format!("{v:.2}")));
        let _ = out.write_record(csv_row);
        let md_row: Vec<String> = row.iter().map(|v| format!("{v:.1} ms")).collect();
        println!("| {label} | {} |", md_row.join(" | "));
    }
    println!();
}

fn main() {
    let wanted: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| !a.starts_with("--"))
        .collect();
    let run = |name: &str| wanted.is_empty() || wanted.iter().any(|w| w == name);
    if run("deadline") {
        deadline_experiment();
    }
    if run("hol") {
        hol_experiment();
    }
}
