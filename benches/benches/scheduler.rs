//! Scheduler overhead: no-op invocations through luge-sched (one worker,
//! preemptive EDF, the async sandbox path) against calling the engine
//! directly on one thread. The ratio of the two is the scheduler's cost.

use std::sync::Arc;
use std::time::{Duration, Instant};

use criterion::{Criterion, criterion_group, criterion_main};
use luge_benches::{registry, wasm};
use luge_core::{Action, Invocation, Preemption};
use luge_registry::ModuleCode;
use luge_sched::{Job, Policy, Scheduler, SchedulerConfig, WorkerWrapper};

fn overhead(c: &mut Criterion) {
    let registry = registry();
    let module = registry
        .load(&ModuleCode::Wasm(wasm("noop")))
        .expect("loads");
    let action = Arc::new(Action::command("noop"));
    let mut group = c.benchmark_group("scheduler");

    group.bench_function("noop direct, one thread", |b| {
        b.iter(|| module.run(Invocation::new(Arc::clone(&action), Vec::new())))
    });

    // The async sandbox (fiber, async WASI) polled to completion inline:
    // separates the engine's async cost from the scheduler's.
    group.bench_function("noop async sandbox, polled inline", |b| {
        let waker = std::task::Waker::noop();
        let mut cx = std::task::Context::from_waker(waker);
        b.iter(|| {
            let mut sandbox = Arc::clone(&module).start(
                Invocation::new(Arc::clone(&action), Vec::new()),
                Preemption::default(),
            );
            loop {
                if let std::task::Poll::Ready(outcome) = sandbox.as_mut().poll(&mut cx) {
                    break outcome;
                }
            }
        })
    });

    let runtime = tokio::runtime::Runtime::new().expect("tokio");
    let handle = runtime.handle().clone();
    let wrapper: WorkerWrapper = Arc::new(move |_, run| {
        let _guard = handle.enter();
        run();
    });
    let config = SchedulerConfig {
        workers: 1,
        policy: Policy::Edf,
        pin: true,
        ..Default::default()
    };
    let scheduler = Scheduler::start(&config, Some(wrapper)).expect("scheduler");
    let name: Arc<str> = Arc::from("noop");
    group.bench_function("noop through the scheduler, one worker", |b| {
        b.iter_custom(|iters| {
            let (tx, rx) = std::sync::mpsc::channel();
            let started = Instant::now();
            for _ in 0..iters {
                let sandbox = Arc::clone(&module).start(
                    Invocation::new(Arc::clone(&action), Vec::new()),
                    Preemption::default(),
                );
                let tx = tx.clone();
                scheduler.submit(Job {
                    function: Arc::clone(&name),
                    deadline: Instant::now() + Duration::from_secs(1),
                    expected: None,
                    longest_poll: std::time::Duration::from_secs(60),
                    tenant: None,
                    future: Box::pin(async move {
                        let _ = tx.send(sandbox.await);
                    }),
                });
            }
            for _ in 0..iters {
                let outcome = rx.recv().expect("outcome");
                assert!(outcome.termination.is_success());
            }
            started.elapsed()
        })
    });
    // The same jobs, but only the last one to finish signals (a countdown
    // latch): the worker does not wake the submitting thread once per job,
    // so this is the scheduler's own throughput.
    group.bench_function(
        "noop through the scheduler, one worker, one wake-up per batch",
        |b| {
            b.iter_custom(|iters| {
                in_batch(&scheduler, &name, iters, || {
                    let sandbox = Arc::clone(&module).start(
                        Invocation::new(Arc::clone(&action), Vec::new()),
                        Preemption::default(),
                    );
                    Box::pin(async move { assert!(sandbox.await.termination.is_success()) })
                })
            })
        },
    );
    group.finish();
}

/// The cost of a scheduling point as the worker count grows: empty jobs
/// (no sandbox) submitted in batches to 1-16 unpinned workers, only the
/// last of a batch signalling. What remains per job is the scheduler's own
/// path: the injector, the run queues, the scan for more urgent work, the
/// wake-ups. (On a machine with fewer cores than workers the workers take
/// turns; the trend with the count is what this shows.)
fn scheduling_points(c: &mut Criterion) {
    let mut group = c.benchmark_group("scheduling point");
    for workers in [1, 2, 4, 8, 16] {
        let scheduler = unpinned_edf(workers);
        let name: Arc<str> = Arc::from("empty");
        group.bench_function(format!("empty jobs, {workers} workers"), |b| {
            b.iter_custom(|iters| in_batch(&scheduler, &name, iters, || Box::pin(async {})))
        });
    }
    group.finish();
}

/// `workers` unpinned EDF workers (more than cores take turns).
fn unpinned_edf(workers: usize) -> Scheduler {
    let config = SchedulerConfig {
        workers,
        policy: Policy::Edf,
        pin: false,
        ..Default::default()
    };
    Scheduler::start(&config, None).expect("scheduler")
}

/// Submits `iters` jobs made by `work` and waits for the last to finish:
/// only the last signals (a countdown latch), so the submitting thread is
/// not woken once per job. The time from the first submit to the signal.
fn in_batch(
    scheduler: &Scheduler,
    name: &Arc<str>,
    iters: u64,
    mut work: impl FnMut() -> std::pin::Pin<Box<dyn std::future::Future<Output = ()> + Send>>,
) -> Duration {
    let remaining = Arc::new(std::sync::atomic::AtomicU64::new(iters));
    let (tx, rx) = std::sync::mpsc::sync_channel(1);
    let started = Instant::now();
    for _ in 0..iters {
        let (remaining, tx, work) = (Arc::clone(&remaining), tx.clone(), work());
        scheduler.submit(Job {
            function: Arc::clone(name),
            deadline: Instant::now() + Duration::from_secs(1),
            expected: None,
            longest_poll: std::time::Duration::from_secs(60),
            tenant: None,
            future: Box::pin(async move {
                work.await;
                if remaining.fetch_sub(1, std::sync::atomic::Ordering::AcqRel) == 1 {
                    let _ = tx.send(());
                }
            }),
        });
    }
    rx.recv().expect("the last job signals");
    started.elapsed()
}

/// A job that spins until `stop`, yielding every 5 ms (a quantum) or at
/// once when the scheduler asks (an engine's epoch check).
struct Spinner {
    stop: Arc<std::sync::atomic::AtomicBool>,
}

impl std::future::Future for Spinner {
    type Output = ();
    fn poll(
        self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<()> {
        let slice = Instant::now();
        while slice.elapsed() < Duration::from_millis(5) {
            if self.stop.load(std::sync::atomic::Ordering::Relaxed) {
                return std::task::Poll::Ready(());
            }
            if luge_core::preempt::requested() {
                break;
            }
            std::hint::spin_loop();
        }
        cx.waker().wake_by_ref();
        std::task::Poll::Pending
    }
}

/// How long an urgent job waits to start while every worker runs a long,
/// preemptible job and as many more wait in the run queues: the time from
/// its submit to its first poll (it finds a worker through the early
/// preemption of the least urgent running job, and the scheduling point
/// that follows). Unpinned workers: with more workers than cores, the
/// operating system's time slices add to it.
fn urgent_delay(c: &mut Criterion) {
    let mut group = c.benchmark_group("urgent job delay");
    group.sample_size(20);
    for workers in [1, 2, 4, 8, 16] {
        let scheduler = unpinned_edf(workers);
        let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let far = Instant::now() + Duration::from_secs(3600);
        for _ in 0..2 * workers {
            scheduler.submit(Job {
                function: Arc::from("long"),
                deadline: far,
                expected: None,
                longest_poll: std::time::Duration::from_secs(60),
                tenant: None,
                future: Box::pin(Spinner {
                    stop: Arc::clone(&stop),
                }),
            });
        }
        let name: Arc<str> = Arc::from("urgent");
        group.bench_function(format!("{workers} workers busy"), |b| {
            b.iter_custom(|iters| {
                let mut waited = Duration::ZERO;
                for _ in 0..iters {
                    let (tx, rx) = std::sync::mpsc::sync_channel(1);
                    let submitted = Instant::now();
                    scheduler.submit(Job {
                        function: Arc::clone(&name),
                        deadline: submitted,
                        expected: None,
                        longest_poll: std::time::Duration::from_secs(60),
                        tenant: None,
                        future: Box::pin(async move {
                            let _ = tx.send(submitted.elapsed());
                        }),
                    });
                    waited += rx.recv().expect("the urgent job runs");
                }
                waited
            })
        });
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
    }
    group.finish();
}

/// What a job's end costs the per-function statistics (under any policy),
/// and what reading the expectation costs (SRSF, sharding: once per
/// submission), with a full window of runs.
fn execution_stats(c: &mut Criterion) {
    let mut group = c.benchmark_group("execution stats");
    let stats = luge_sched::ExecutionStats::new(90.0);
    let name: Arc<str> = Arc::from("f");
    let mut run = 0u64;
    let mut next = move || {
        run = run.wrapping_mul(6364136223846793005).wrapping_add(1);
        Duration::from_nanos(run >> 44)
    };
    for _ in 0..64 {
        stats.record(&name, next(), false, 0);
    }
    group.bench_function("record a run", |b| {
        b.iter(|| stats.record(&name, next(), false, 0))
    });
    group.bench_function("record a run, then read the expectation", |b| {
        b.iter(|| {
            stats.record(&name, next(), false, 0);
            stats.expected(&name, None)
        })
    });
    group.finish();
}

/// What an invocation's end costs the executor's metrics (an outcome
/// counter and two histograms of one function), observed from one thread
/// and from two at once (two workers ending jobs of the same function):
/// wall time per observation, the threads' together (two threads that
/// never wait for each other halve it).
fn metrics(c: &mut Criterion) {
    let metrics = luge_executor::metrics::Metrics::new(luge_executor::metrics::Pulled {
        modules: Arc::new(registry()),
        admission: luge_executor::admission::Admission::new(luge_executor::admission::Places::new(
            64,
        )),
        scheduler: Arc::new(unpinned_edf(1)),
        front_ends: None,
        state: None,
        telemetry: None,
    });
    let mut group = c.benchmark_group("metrics");
    for threads in [1u32, 2] {
        group.bench_function(format!("observe an invocation, {threads} threads"), |b| {
            b.iter_custom(|iters| {
                let each = iters.div_ceil(u64::from(threads));
                let started = Instant::now();
                std::thread::scope(|scope| {
                    for _ in 0..threads {
                        scope.spawn(|| {
                            for i in 0..each {
                                metrics.observe(
                                    "f",
                                    &luge_core::Termination::Exited(0),
                                    Duration::from_micros(40 + i % 64),
                                    Duration::from_micros(3),
                                );
                            }
                        });
                    }
                });
                started.elapsed()
            })
        });
    }
    group.finish();
}

criterion_group!(
    benches,
    overhead,
    scheduling_points,
    urgent_delay,
    execution_stats,
    metrics
);
criterion_main!(benches);
