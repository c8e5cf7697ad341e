//! The engines side by side, in one run (WOW's Fig. 5 and Table II, and its
//! CPU-bound comparison with native code):
//!
//! - compile cost (what an init from plain Wasm, or luge-precompile, pays)
//!   and `/init` cost: loading the sealed artifact of the same ~1.1 MB
//!   module (`big.wasm`), MAC check included, the way /init does;
//! - a CPU-bound function (BLAKE3 `hash`) per engine, against the same Rust
//!   source compiled for the host and run as a process;
//! - memory: RSS of a loaded module (what a warm function costs; containers
//!   of the same code share it, see the memory bench for their own cost),
//!   and per running sandbox (sandboxes held open in a host sleep).
//!
//! `cargo bench -p luge-benches --bench engines --features wasmer,wamr` prints
//! markdown tables.

use std::sync::Arc;
use std::time::{Duration, Instant};

use luge_benches::{key, rss_bytes, wasm};
use luge_core::{Action, Invocation, LoadedModule, Preemption, Termination, WasmRuntime};
use luge_registry::{ModuleCode, ModuleRegistry, artifact};
use luge_sched::{Job, Scheduler, SchedulerConfig, WorkerWrapper};

/// Every engine compiled into this bench (`--features wasmer,wamr` adds
/// Wasmer and WAMR).
fn engines() -> Vec<(&'static str, Arc<dyn WasmRuntime>)> {
    luge_benches::built_in_runtimes()
}

fn median(samples: Vec<Duration>) -> Duration {
    samples
        .into_iter()
        .collect::<luge_benches::stats::Latencies>()
        .median()
}

/// Median time to compile `big.wasm` into an artifact (validation only for
/// WAMR, whose artifact is the Wasm).
fn compile_cost(runtime: &Arc<dyn WasmRuntime>) -> Duration {
    let big = wasm("big");
    median(
        (0..5)
            .map(|_| {
                let started = Instant::now();
                runtime.precompile(&big).expect("precompile");
                started.elapsed()
            })
            .collect(),
    )
}

fn init_cost(runtime: &Arc<dyn WasmRuntime>) -> (usize, Duration) {
    let registry = ModuleRegistry::new(Arc::clone(runtime), key(), None);
    let sealed = registry.compile_sealed(&wasm("big")).expect("precompile");
    let samples = (0..30)
        .map(|_| {
            // A fresh registry each time: nothing shared, a real cold /init.
            let registry = ModuleRegistry::new(Arc::clone(runtime), key(), None);
            let code = ModuleCode::Artifact(sealed.clone());
            let started = Instant::now();
            let module = registry.load(&code).expect("load");
            let took = started.elapsed();
            drop(module);
            took
        })
        .collect();
    (sealed.len(), median(samples))
}

fn run_hash(module: &dyn LoadedModule, iterations: u64) -> Duration {
    let input = format!(r#"{{"iterations":{iterations}}}"#);
    let started = Instant::now();
    let outcome = module.run(Invocation::new(
        Arc::new(Action::command("hash")),
        input.into_bytes(),
    ));
    assert_eq!(outcome.termination, Termination::Exited(0));
    started.elapsed()
}

fn run_native_hash(iterations: u64) -> Duration {
    use std::io::Write;
    let binary = luge_testkit::native_example("hash");
    let started = Instant::now();
    let mut child = std::process::Command::new(binary)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::null())
        .spawn()
        .expect("native hash");
    if let Some(mut stdin) = child.stdin.take() {
        let _ = write!(stdin, r#"{{"iterations":{iterations}}}"#);
    }
    assert!(child.wait().expect("wait").success());
    started.elapsed()
}

/// Jobs per second for a mixed workload through the scheduler (2 workers):
/// half CPU-bound (`hash`, 2000 rounds), half waiting 20 ms in a host sleep,
/// all submitted at once. An engine that parks a sleeping sandbox frees its
/// worker for the CPU-bound half; one that cannot holds the worker.
fn mixed_throughput(registry: &ModuleRegistry, jobs: usize) -> f64 {
    let hash = registry
        .load(&ModuleCode::Wasm(wasm("hash")))
        .expect("hash");
    let sleep = registry
        .load(&ModuleCode::Wasm(wasm("sleep")))
        .expect("sleep");
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .expect("tokio");
    let handle = runtime.handle().clone();
    let wrapper: WorkerWrapper = Arc::new(move |_, run| {
        let _entered = handle.enter();
        run();
    });
    let config = SchedulerConfig {
        workers: 2,
        ..SchedulerConfig::default()
    };
    let scheduler = Scheduler::start(&config, Some(wrapper)).expect("scheduler");
    let (tx, rx) = std::sync::mpsc::channel();
    let started = Instant::now();
    for i in 0..jobs {
        let (module, input) = if i % 2 == 0 {
            (&hash, r#"{"iterations":2000}"#)
        } else {
            (&sleep, r#"{"ms":20}"#)
        };
        let sandbox = Arc::clone(module).start(
            Invocation::new(
                Arc::new(Action::command("mixed")),
                input.as_bytes().to_vec(),
            ),
            Preemption::default(),
        );
        let tx = tx.clone();
        scheduler.submit(Job {
            function: Arc::from("mixed"),
            deadline: started + Duration::from_secs(60),
            expected: None,
            longest_poll: std::time::Duration::from_secs(60),
            tenant: None,
            future: Box::pin(async move {
                let outcome = sandbox.await;
                let _ = tx.send(outcome.termination.is_success());
            }),
        });
    }
    drop(tx);
    let ok = rx.iter().take(jobs).filter(|&ok| ok).count();
    assert_eq!(ok, jobs);
    jobs as f64 / started.elapsed().as_secs_f64()
}

/// RSS growth per sandbox while `count` sandboxes sleep at once.
fn rss_per_running_sandbox(module: &Arc<dyn LoadedModule>, count: usize) -> f64 {
    let before = rss_bytes();
    let peak = std::thread::scope(|s| {
        for _ in 0..count {
            let module = Arc::clone(module);
            s.spawn(move || {
                module.run(Invocation::new(
                    Arc::new(Action::command("sleep")),
                    br#"{"ms":600}"#.to_vec(),
                ))
            });
        }
        std::thread::sleep(Duration::from_millis(300));
        rss_bytes()
    });
    (peak.saturating_sub(before)) as f64 / count as f64
}

fn main() {
    let engines = engines();
    println!(
        "| engine | compile big.wasm (median of 5) | artifact of big.wasm | /init (artifact load, median of 30) |"
    );
    println!("|---|---|---|---|");
    for (name, runtime) in &engines {
        let compile = compile_cost(runtime);
        let (size, took) = init_cost(runtime);
        println!(
            "| {name} | {:.1} ms | {:.2} MB | {:.3} ms |",
            compile.as_secs_f64() * 1e3,
            size as f64 / 1e6,
            took.as_secs_f64() * 1e3
        );
    }

    // Native first, as the reference: a process spawn with no work is
    // subtracted so the comparison is of the computation.
    let iterations = 20_000;
    let native_spawn = median((0..5).map(|_| run_native_hash(0)).collect());
    let native =
        median((0..5).map(|_| run_native_hash(iterations)).collect()).saturating_sub(native_spawn);
    println!();
    println!(
        "| engine | hash, {iterations} BLAKE3 rounds over 1 KiB (median of 5) | relative to native |"
    );
    println!("|---|---|---|");
    println!(
        "| native (same source, host build, process spawn of {:.2} ms subtracted) | {:.1} ms | 100 % |",
        native_spawn.as_secs_f64() * 1e3,
        native.as_secs_f64() * 1e3
    );
    for (name, runtime) in &engines {
        let registry = ModuleRegistry::new(Arc::clone(runtime), key(), None);
        let module = registry
            .load(&ModuleCode::Wasm(wasm("hash")))
            .expect("hash");
        let empty = median((0..5).map(|_| run_hash(&*module, 0)).collect());
        let took =
            median((0..5).map(|_| run_hash(&*module, iterations)).collect()).saturating_sub(empty);
        println!(
            "| {name} | {:.1} ms | {:.0} % |",
            took.as_secs_f64() * 1e3,
            100.0 * native.as_secs_f64() / took.as_secs_f64()
        );
    }

    println!();
    println!("| engine | mixed CPU/IO jobs per second (100 jobs, 2 workers) |");
    println!("|---|---|");
    for (name, runtime) in &engines {
        let registry = ModuleRegistry::new(Arc::clone(runtime), key(), None);
        println!("| {name} | {:.1} |", mixed_throughput(&registry, 100));
    }

    println!();
    println!(
        "| engine | RSS per loaded big.wasm module (5 held at once) | RSS per running sandbox (`sleep`, 32 at once) |"
    );
    println!("|---|---|---|");
    for (name, runtime) in &engines {
        let registry = ModuleRegistry::new(Arc::clone(runtime), key(), None);
        let sealed = registry.compile_sealed(&wasm("big")).expect("precompile");
        // Copies straight from the engine (the registry would share one),
        // after a warm-up load so allocator growth is not counted; averaged
        // over the copies held at once.
        let load = || {
            let verified = artifact::open(&key(), &sealed, runtime.id(), None).expect("authentic");
            runtime.load_artifact(verified).expect("big")
        };
        drop(load());
        let copies = 5;
        let before = rss_bytes();
        let big: Vec<_> = (0..copies).map(|_| load()).collect();
        let per_module = rss_bytes().saturating_sub(before) / copies;
        let module = registry
            .load(&ModuleCode::Wasm(wasm("sleep")))
            .expect("sleep");
        let per_sandbox = rss_per_running_sandbox(&module, 32);
        drop(big);
        println!(
            "| {name} | {:.2} MiB | {:.2} MiB |",
            per_module as f64 / (1024.0 * 1024.0),
            per_sandbox / (1024.0 * 1024.0)
        );
    }
}
