//! Where connections are served: on the scheduler's workers themselves
//! (`--front-end workers`), or on tokio's threads beside them
//! (`--front-end threads`).
//!
//! With worker front ends, each core-pinned worker owns a current-thread
//! tokio runtime. All of them accept from the one listening socket, so a new
//! connection goes to whichever worker is free to take it, and the worker
//! that accepted a connection reads its requests, runs their sandboxes
//! (luge-sched queues a job submitted on a worker's thread on that worker)
//! and writes the responses: no hand-off between threads on the request
//! path. The worker turns its runtime at every scheduling point and parks in
//! it when idle. Idle siblings steal jobs that would wait.
//!
//! Engine host calls (WASI timers and files, outgoing HTTP, the calls of
//! Host API v1) keep running on the process's multi-thread runtime, the
//! *ambient* one, whose threads drive their timers and I/O whatever the
//! workers do. A sandbox runs inside its worker's `block_on`, so it must
//! not block on a runtime itself (`Handle::block_on` would panic there):
//! Wasmtime's asynchronous WASI never does, which is why worker front ends
//! are for Wasmtime only.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use luge_sched::{FrontEnd, FrontEndFactory, Step, Unpark};
use tokio::runtime::{Handle, Runtime};
use tokio::sync::Notify;

/// Where connections are served.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum, serde::Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum FrontEndKind {
    /// On the scheduler's workers: a request runs on the core that received
    /// it. While a worker runs a sandbox, its connections wait for the
    /// sandbox's next yield (one quantum at most), so this needs an engine
    /// that preempts.
    Workers,
    /// On tokio threads beside the workers: every request is handed to a
    /// worker and back (two thread switches), but connections are served
    /// while every worker runs a sandbox to completion.
    Threads,
}

/// The workers' runtimes, to serve connections on.
#[derive(Debug)]
pub struct WorkerRuntimes {
    handles: Vec<Handle>,
    /// Sandboxes that yielded so that their worker could read requests that
    /// arrived on its connections (crate::arrivals), all workers together.
    yields_for_arrivals: Arc<AtomicU64>,
    /// Connections the workers' loops accepted from the main listener, and
    /// those they left for the threads beside them
    /// (`http::serve_unclaimed`).
    connections: crate::http::UnclaimedCounts,
}

impl WorkerRuntimes {
    /// One handle per worker, in worker order.
    pub fn handles(&self) -> &[Handle] {
        &self.handles
    }

    /// Sandboxes that yielded before their quantum ended so that their
    /// worker could read requests that arrived on its connections.
    pub fn yields_for_arrivals(&self) -> u64 {
        self.yields_for_arrivals.load(Ordering::Relaxed)
    }

    /// Where the connections that the workers accepted from the main
    /// listener, and those they left for the threads beside them, are
    /// counted.
    pub fn connections(&self) -> &crate::http::UnclaimedCounts {
        &self.connections
    }
}

/// A current-thread runtime per worker, and the factory that gives worker
/// `i` the `i`th. The runtimes are built here, on the caller's thread, so
/// that their handles are known before any worker starts.
///
/// Each worker tears down up to `teardowns` finished sandboxes after the
/// turn that writes their responses (`luge_core::teardown`); the caller
/// keeps that many pool slots per worker out of admission.
pub fn per_worker(
    workers: usize,
    ambient: Handle,
    teardowns: usize,
) -> std::io::Result<(FrontEndFactory, Arc<WorkerRuntimes>)> {
    let runtimes = (0..workers)
        .map(|_| {
            tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
        })
        .collect::<std::io::Result<Vec<Runtime>>>()?;
    let handles = runtimes.iter().map(|rt| rt.handle().clone()).collect();
    let yields_for_arrivals = Arc::new(AtomicU64::new(0));
    let yields = Arc::clone(&yields_for_arrivals);
    let slots = std::sync::Mutex::new(runtimes.into_iter().map(Some).collect::<Vec<_>>());
    let factory: FrontEndFactory = Arc::new(move |worker| {
        // Each worker takes its own slot once, at start. (Were it empty,
        // the worker would run without a front end; its share of the
        // connections is then served by the others.)
        let runtime = slots.lock().ok()?.get_mut(worker)?.take()?;
        let wake = Arc::new(Notify::new());
        Some((
            Box::new(Worker {
                runtime,
                wake: Arc::clone(&wake),
                ambient: ambient.clone(),
                teardowns,
                yields_for_arrivals: Arc::clone(&yields),
            }) as Box<dyn FrontEnd>,
            Arc::new(Wake(wake)) as Arc<dyn Unpark>,
        ))
    });
    Ok((
        factory,
        Arc::new(WorkerRuntimes {
            handles,
            yields_for_arrivals,
            connections: crate::http::UnclaimedCounts {
                accepted: Arc::default(),
                unclaimed: Arc::default(),
            },
        }),
    ))
}

/// How long a worker with jobs queued may run them before it serves its
/// connections again (responses of finished jobs wait that long, and one
/// short job more, at most): several short functions' worth, far below a
/// quantum or an epoch tick. A turn costs more than its system calls: the
/// connections' code and data displace the engine's, and each batch of
/// responses wakes the clients once. Measured on the 2-core VM with the
/// server on a core of its own at 64 connections (docs/BENCHMARKS-ARCHIVE.md,
/// "Fewer turns under load"): 100 µs cost a `wasi:http` request 42-46 µs
/// of CPU, 300 µs 37-40 µs; 500 and 1000 µs gained no more.
const TURN_AT_LEAST_EVERY: Duration = Duration::from_micros(300);

/// How long a worker that just ran a job polls for more before it parks:
/// a loopback round trip and then some, so that a client sending one
/// request after another finds its worker awake. Measured on the 2-core
/// VM (docs/BENCHMARKS-ARCHIVE.md, issue 27): a C ping at one connection went from
/// a p50 of 96-125 µs to 57-61 µs; 30-200 µs all helped, 100 µs had the
/// best p99. Measured again on 2026-12-01 for a `wasi:http` component
/// ("Parking instead of spinning"): parking at once put 30-35 µs on its
/// p50 at one connection and saved no CPU per request (the park, the
/// thread switches and the wake-up cost about what the spin does). A
/// worker spins at most this long after its last job, so an idle executor
/// stays idle.
const SPIN_BEFORE_PARK: Duration = Duration::from_micros(100);

/// A worker's runtime, what ends its park, and the ambient runtime its jobs
/// run under.
struct Worker {
    runtime: Runtime,
    wake: Arc<Notify>,
    ambient: Handle,
    /// Finished sandboxes it may tear down after their responses are out.
    teardowns: usize,
    /// Where its sandboxes' yields for arrivals are counted.
    yields_for_arrivals: Arc<AtomicU64>,
}

impl FrontEnd for Worker {
    fn drive(&mut self, step: &mut dyn FnMut() -> Step) {
        let (wake, ambient, teardowns) = (&self.wake, &self.ambient, self.teardowns);
        // Requests that arrive while this worker runs a sandbox make it
        // yield within a tick, so that they are read (crate::arrivals).
        crate::arrivals::watch_on_this_thread(Arc::clone(&self.yields_for_arrivals));
        // The whole worker runs inside `block_on`: when a job completes, the
        // connection task waiting for it is woken on this runtime's own
        // queue, with no system call.
        self.runtime.block_on(async {
            // Finished sandboxes are torn down after the turn that writes
            // their responses: a few microseconds each that their clients
            // no longer wait for (docs/BENCHMARKS-ARCHIVE.md, issue 27).
            let deferred = luge_core::teardown::Deferred::enable(teardowns);
            // Under the ambient runtime, as the jobs whose stores they are
            // ran (a drop may reach for a runtime).
            let tear_down = || {
                let _ambient = ambient.enter();
                deferred.run();
            };
            // With nothing else to do: the next sandbox of the function
            // just run, made ahead of its request (`luge_core::teardown`),
            // after the teardowns have freed their slots.
            let prepare = || {
                let _ambient = ambient.enter();
                deferred.prepare();
            };
            let mut turned = Instant::now();
            // When this worker last ran a job.
            let mut ran = Instant::now();
            loop {
                // Jobs see the ambient runtime as current: their timers and
                // tasks are driven by its threads, whatever this worker does.
                let next = {
                    let _ambient = ambient.enter();
                    step()
                };
                match next {
                    // More jobs queued here, the next one short, and the
                    // connections served recently: run it first (a batch
                    // shares one turn's system calls).
                    Step::Ran {
                        more: true,
                        next_is_long: false,
                    } if turned.elapsed() < TURN_AT_LEAST_EVERY => {
                        ran = Instant::now();
                    }
                    // `yield_now` is deferred until the runtime has polled
                    // its I/O driver: one pass over the ready connection
                    // tasks and one non-blocking epoll.
                    Step::Ran { next_is_long, .. } => {
                        tokio::task::yield_now().await;
                        // The next job may hold the worker long (a quantum
                        // if it ran before and yielded): the responses of
                        // the jobs just run went out in the turn above, and
                        // the connections its epoll found ready (requests
                        // that came while the last job ran, which may have
                        // made it yield: crate::arrivals) are read now and
                        // their jobs queued, rather than after that job.
                        if next_is_long {
                            tokio::task::yield_now().await;
                        }
                        tear_down();
                        turned = Instant::now();
                        ran = turned;
                    }
                    // Just ran a job: the same client's next request
                    // usually follows within a round trip. Poll for it
                    // (one non-blocking epoll per pass) a little before
                    // parking, which saves the park's and the wake-up's
                    // system calls and thread switches; an idle worker
                    // still parks after this bound. Each pass first offers
                    // the core to any other runnable thread (`sched_yield`,
                    // which returns at once when there is none), so the
                    // spin uses only CPU nobody else wants: where clients,
                    // the ambient runtime or other processes share the
                    // cores, they are not held up by a worker waiting for
                    // work (docs/BENCHMARKS-ARCHIVE.md, "A spin that gives way").
                    // The first pass, with no job queued, makes the next
                    // sandbox ahead if one was asked for.
                    Step::Idle(_) if ran.elapsed() < SPIN_BEFORE_PARK => {
                        prepare();
                        std::thread::yield_now();
                        tokio::task::yield_now().await;
                        tear_down();
                    }
                    // Ends on the scheduler's unpark, or a job submitted
                    // from a task run meanwhile (luge-sched unparks the
                    // worker it queued on).
                    Step::Idle(timeout) => {
                        tear_down();
                        prepare();
                        let _ = tokio::time::timeout(timeout, wake.notified()).await;
                    }
                    Step::Stop => return,
                }
            }
        });
    }
}

/// `Notify` keeps one permit when nobody waits: an unpark before the park
/// ends it at once.
struct Wake(Arc<Notify>);

impl Unpark for Wake {
    fn unpark(&self) {
        self.0.notify_one();
    }
}
