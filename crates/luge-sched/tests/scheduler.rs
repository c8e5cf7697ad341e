//! The scheduler with plain futures standing in for sandboxes: ordering,
//! preemption at yields, parking on I/O, stealing, and resilience.

#![allow(clippy::unwrap_used)] // tests fail loudly by design

use std::future::Future;
use std::pin::Pin;
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use luge_sched::{Job, Policy, Scheduler, SchedulerConfig, Tenant};

fn scheduler(workers: usize, policy: Policy) -> Scheduler {
    let config = SchedulerConfig {
        workers,
        policy,
        pin: false,
        ..Default::default()
    };
    Scheduler::start(&config, None).unwrap()
}

/// Spins for `total`, yielding (like an epoch quantum) every `quantum` when
/// given; reports its finish time.
struct Spin {
    total: Duration,
    quantum: Option<Duration>,
    spent: Duration,
}

impl Future for Spin {
    type Output = ();
    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        let slice = self.quantum.unwrap_or(self.total);
        let started = Instant::now();
        while started.elapsed() < slice && self.spent + started.elapsed() < self.total {
            // An engine's preemption point: yield early when the scheduler
            // asks (only a preemptible job listens).
            if self.quantum.is_some() && luge_core::preempt::requested() {
                break;
            }
            std::hint::spin_loop();
        }
        self.spent += started.elapsed();
        if self.spent >= self.total {
            return Poll::Ready(());
        }
        cx.waker().wake_by_ref();
        Poll::Pending
    }
}

/// Waits `delay` on another thread (host I/O), without holding a worker.
struct Sleep {
    delay: Duration,
    done: Arc<Mutex<bool>>,
    started: bool,
}

impl Future for Sleep {
    type Output = ();
    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        if *self.done.lock().unwrap() {
            return Poll::Ready(());
        }
        if !self.started {
            self.started = true;
            let (done, waker, delay) = (Arc::clone(&self.done), cx.waker().clone(), self.delay);
            std::thread::spawn(move || {
                std::thread::sleep(delay);
                *done.lock().unwrap() = true;
                waker.wake();
            });
        }
        Poll::Pending
    }
}

fn job(
    name: &str,
    deadline: Instant,
    work: impl Future<Output = ()> + Send + 'static,
    done: mpsc::Sender<(String, Instant)>,
) -> Job {
    let name = name.to_owned();
    Job {
        function: Arc::from(name.as_str()),
        deadline,
        expected: None,
        longest_poll: std::time::Duration::from_secs(60),
        tenant: None,
        future: Box::pin(async move {
            work.await;
            let _ = done.send((name, Instant::now()));
        }),
    }
}

/// Stats are recorded just after a job reports its result: wait for them.
fn eventually(condition: impl Fn() -> bool) {
    let until = Instant::now() + Duration::from_secs(2);
    while !condition() && Instant::now() < until {
        std::thread::sleep(Duration::from_millis(5));
    }
    assert!(condition());
}

fn spin(ms: u64, quantum_ms: Option<u64>) -> Spin {
    Spin {
        total: Duration::from_millis(ms),
        quantum: quantum_ms.map(Duration::from_millis),
        spent: Duration::ZERO,
    }
}

/// On one edf worker, a 1.5 s job with a far deadline yielding every
/// `long_quantum_ms`, then a 5 ms job due in 10 ms. Returns the scheduler and
/// how long the short job took; asserts it finished first.
fn urgent_behind_long(long_quantum_ms: u64) -> (Scheduler, Duration) {
    let sched = scheduler(1, Policy::Edf);
    let (tx, rx) = mpsc::channel();
    let now = Instant::now();
    sched.submit(job(
        "long",
        now + Duration::from_secs(60),
        spin(1500, Some(long_quantum_ms)),
        tx.clone(),
    ));
    std::thread::sleep(Duration::from_millis(100));
    let submitted = Instant::now();
    sched.submit(job(
        "short",
        submitted + Duration::from_millis(10),
        spin(5, Some(5)),
        tx,
    ));
    let (first, at) = rx.recv().unwrap();
    assert_eq!(first, "short");
    assert_eq!(rx.recv().unwrap().0, "long");
    (sched, at - submitted)
}

#[test]
fn preemptive_edf_runs_an_urgent_job_within_a_few_quanta() {
    let (sched, waited) = urgent_behind_long(5);
    assert!(
        waited < Duration::from_millis(100),
        "short waited {waited:?}"
    );
    assert!(sched.stats().preemptions > 0);
}

#[test]
fn a_more_urgent_arrival_interrupts_a_long_quantum() {
    // A 1 s quantum: without an early yield the short job waits ~1 s.
    let (sched, waited) = urgent_behind_long(1000);
    assert!(
        waited < Duration::from_millis(200),
        "short waited {waited:?}"
    );
    assert_eq!(sched.stats().early_preemptions, 1);
}

#[test]
fn a_less_urgent_arrival_does_not_interrupt() {
    let sched = scheduler(1, Policy::Edf);
    let (tx, rx) = mpsc::channel();
    let now = Instant::now();
    sched.submit(job(
        "urgent",
        now + Duration::from_millis(50),
        spin(300, Some(1000)),
        tx.clone(),
    ));
    std::thread::sleep(Duration::from_millis(50));
    sched.submit(job(
        "relaxed",
        now + Duration::from_secs(60),
        spin(5, Some(5)),
        tx,
    ));
    assert_eq!(rx.recv().unwrap().0, "urgent");
    assert_eq!(rx.recv().unwrap().0, "relaxed");
    assert_eq!(sched.stats().early_preemptions, 0);
}

#[test]
fn without_preemption_fifo_makes_the_short_job_wait() {
    let sched = scheduler(1, Policy::Fifo);
    let (tx, rx) = mpsc::channel();
    let now = Instant::now();
    sched.submit(job(
        "long",
        now + Duration::from_secs(60),
        spin(600, None),
        tx.clone(),
    ));
    std::thread::sleep(Duration::from_millis(50));
    let submitted = Instant::now();
    sched.submit(job(
        "short",
        submitted + Duration::from_millis(10),
        spin(5, None),
        tx,
    ));
    assert_eq!(rx.recv().unwrap().0, "long");
    let (second, at) = rx.recv().unwrap();
    assert_eq!(second, "short");
    assert!(
        at - submitted > Duration::from_millis(400),
        "short did not wait: {:?}",
        at - submitted
    );
    eventually(|| sched.execution_stats().function("short").deadline_misses == 1);
}

#[test]
fn jobs_waiting_on_io_hold_no_worker() {
    let sched = scheduler(1, Policy::Edf);
    let (tx, rx) = mpsc::channel();
    let started = Instant::now();
    for i in 0..200 {
        let sleep = Sleep {
            delay: Duration::from_millis(200),
            done: Arc::new(Mutex::new(false)),
            started: false,
        };
        sched.submit(job(
            &format!("s{i}"),
            started + Duration::from_secs(1),
            sleep,
            tx.clone(),
        ));
    }
    for _ in 0..200 {
        rx.recv_timeout(Duration::from_secs(10)).unwrap();
    }
    // Serially that would be 40 s; parked, it is one sleep plus overhead.
    assert!(
        started.elapsed() < Duration::from_secs(3),
        "{:?}",
        started.elapsed()
    );
}

#[test]
fn idle_workers_steal_so_both_cores_run() {
    let sched = scheduler(2, Policy::Edf);
    let (tx, rx) = mpsc::channel();
    let now = Instant::now();
    // Submitted from one thread; long enough that one worker cannot take all.
    for i in 0..8 {
        sched.submit(job(
            &format!("j{i}"),
            now + Duration::from_millis(i),
            spin(30, None),
            tx.clone(),
        ));
    }
    for _ in 0..8 {
        rx.recv_timeout(Duration::from_secs(10)).unwrap();
    }
    eventually(|| sched.stats().completed == 8);
    let stats = sched.stats();
    assert!(stats.jobs_run.iter().all(|&n| n > 0), "{stats:?}");
}

#[test]
fn srsf_learns_execution_times() {
    let sched = scheduler(1, Policy::Srsf);
    let (tx, rx) = mpsc::channel();
    for _ in 0..3 {
        sched.submit(job(
            "f",
            Instant::now() + Duration::from_secs(1),
            spin(20, None),
            tx.clone(),
        ));
        rx.recv().unwrap();
    }
    let expected = sched.execution_stats().expected("f", None);
    assert!(
        expected >= Duration::from_millis(20) && expected < Duration::from_millis(200),
        "{expected:?}"
    );
}

#[test]
fn a_panicking_job_does_not_kill_its_worker() {
    let sched = scheduler(1, Policy::Edf);
    let (tx, rx) = mpsc::channel();
    sched.submit(Job {
        function: Arc::from("boom"),
        deadline: Instant::now(),
        expected: None,
        longest_poll: std::time::Duration::from_secs(60),
        tenant: None,
        future: Box::pin(async { panic!("job panics on purpose") }),
    });
    sched.submit(job("after", Instant::now(), spin(1, None), tx));
    assert_eq!(rx.recv_timeout(Duration::from_secs(5)).unwrap().0, "after");
}

/// A scheduling point is O(1) in the number of workers when workers keep
/// up: with 16 workers and jobs arriving one after another, no point
/// searches the other workers' queues; a backlog in the run queues (more
/// preempted jobs than workers) makes the workers search them, as before.
#[test]
fn scheduling_points_search_siblings_only_for_a_backlog() {
    // A worker that pulls a job from the injector counts it in the backlog
    // until it pops it a few instructions later; a sibling at a scheduling
    // point in that window scans once. That is rare (CI saw 1 in 200), so
    // a handful is allowed: a scan per job would be 200. On 2 cores shared
    // with the other tests of this binary, the OS may take a worker off its
    // core inside that window for a whole time slice, and every idle
    // sibling scans meanwhile (1,434 scans in one suite run): the property
    // is the algorithm's, so it holds if one of three rounds shows it.
    let mut last = None;
    for _round in 0..3 {
        let sched = scheduler(16, Policy::Edf);
        let (tx, rx) = mpsc::channel();
        for i in 0..200 {
            sched.submit(job(
                &format!("j{i}"),
                Instant::now() + Duration::from_millis(10),
                spin(0, None),
                tx.clone(),
            ));
            rx.recv_timeout(Duration::from_secs(5)).unwrap();
        }
        eventually(|| sched.stats().completed == 200);
        let stats = sched.stats();
        if stats.sibling_scans <= 10 {
            last = None;
            break;
        }
        last = Some(stats);
    }
    if let Some(stats) = last {
        panic!(
            "{} scans for 200 jobs in each of three rounds: {stats:?}",
            stats.sibling_scans
        );
    }

    let (tx, rx) = mpsc::channel();
    let sched = scheduler(2, Policy::Edf);
    let now = Instant::now();
    for i in 0..8 {
        sched.submit(job(
            &format!("b{i}"),
            now + Duration::from_millis(i),
            spin(20, Some(2)),
            tx.clone(),
        ));
    }
    for _ in 0..8 {
        rx.recv_timeout(Duration::from_secs(10)).unwrap();
    }
    eventually(|| sched.stats().completed == 8);
    assert!(sched.stats().sibling_scans > 0, "{:?}", sched.stats());
}

/// Execution-time-aware sharding: a function expected to run longer than
/// the threshold runs only on the long workers (here worker 0 of 2); short
/// ones run anywhere, so a short job arriving behind a long one runs at
/// once on the other worker even without preemption.
#[test]
fn sharding_keeps_long_functions_on_the_long_workers() {
    let config = SchedulerConfig {
        workers: 2,
        policy: Policy::Fifo,
        pin: false,
        sharding: Some(luge_sched::Sharding {
            long_above: Duration::from_millis(20),
            long_workers: 1,
        }),
        ..Default::default()
    };
    let sched = Scheduler::start(&config, None).unwrap();
    let (tx, rx) = mpsc::channel();
    let submit = |name: &str, expected_ms: u64, run_ms: u64| {
        let tx = tx.clone();
        let name = name.to_owned();
        sched.submit(Job {
            function: Arc::from(name.as_str()),
            deadline: Instant::now() + Duration::from_secs(1),
            expected: Some(Duration::from_millis(expected_ms)),
            longest_poll: std::time::Duration::from_secs(60),
            tenant: None,
            future: Box::pin(async move {
                let worker = std::thread::current().name().unwrap_or("").to_owned();
                spin(run_ms, None).await;
                let _ = tx.send((name, worker, Instant::now()));
            }),
        });
    };
    // Four long jobs at once: without sharding, both workers would take them.
    for i in 0..4 {
        submit(&format!("long{i}"), 100, 40);
    }
    std::thread::sleep(Duration::from_millis(5));
    let submitted = Instant::now();
    submit("short", 1, 1);
    let mut short_done = None;
    for _ in 0..5 {
        let (name, worker, done) = rx.recv_timeout(Duration::from_secs(10)).unwrap();
        if name.starts_with("long") {
            assert_eq!(worker, "luge-worker-0", "{name} ran on {worker}");
        } else {
            short_done = Some(done - submitted);
        }
    }
    // The short job did not wait behind 160 ms of long ones.
    let waited = short_done.unwrap();
    assert!(
        waited < Duration::from_millis(35),
        "short waited {waited:?}"
    );
    assert_eq!(sched.stats().long_jobs, 4);
    // Sharding must leave a worker of each kind.
    let bad = SchedulerConfig {
        workers: 2,
        sharding: Some(luge_sched::Sharding {
            long_above: Duration::from_millis(1),
            long_workers: 2,
        }),
        ..Default::default()
    };
    assert!(Scheduler::start(&bad, None).is_err());
}

/// What a stand-in front end receives: a request (the job it submits),
/// requests read in one turn (submitted together, before the worker runs
/// any), or the scheduler's unpark.
enum Arrival {
    Request(Job),
    Requests(Vec<Job>),
    Unpark,
}

/// A worker's front end as a channel: a turn submits the requests that
/// arrived, a park waits for one (and submits it) until unparked.
struct ChannelFrontEnd {
    arrivals: mpsc::Receiver<Arrival>,
    scheduler: Arc<std::sync::OnceLock<std::sync::Weak<Scheduler>>>,
}

impl ChannelFrontEnd {
    fn submit(&self, job: Job) {
        let scheduler = self.scheduler.get().and_then(std::sync::Weak::upgrade);
        scheduler.expect("scheduler running").submit(job);
    }

    /// Submits what arrived; whether it was the scheduler's unpark.
    fn receive(&self, arrival: Arrival) -> bool {
        match arrival {
            Arrival::Request(job) => self.submit(job),
            Arrival::Requests(jobs) => jobs.into_iter().for_each(|job| self.submit(job)),
            Arrival::Unpark => return true,
        }
        false
    }
}

impl luge_sched::FrontEnd for ChannelFrontEnd {
    fn drive(&mut self, step: &mut dyn FnMut() -> luge_sched::Step) {
        loop {
            match step() {
                luge_sched::Step::Ran { .. } => {
                    while let Ok(arrival) = self.arrivals.try_recv() {
                        self.receive(arrival);
                    }
                }
                luge_sched::Step::Idle(timeout) => {
                    let until = Instant::now() + timeout;
                    while let Ok(arrival) = self
                        .arrivals
                        .recv_timeout(until.saturating_duration_since(Instant::now()))
                    {
                        if self.receive(arrival) {
                            break;
                        }
                    }
                }
                luge_sched::Step::Stop => return,
            }
        }
    }
}

struct ChannelUnpark(Mutex<mpsc::Sender<Arrival>>);

impl luge_sched::Unpark for ChannelUnpark {
    fn unpark(&self) {
        let _ = self.0.lock().unwrap().send(Arrival::Unpark);
    }
}

/// Workers that serve front ends of their own: `n` workers, and the sender
/// of each one's arrivals.
fn with_front_ends(n: usize) -> (Arc<Scheduler>, Vec<mpsc::Sender<Arrival>>) {
    with_front_ends_and_margin(n, Duration::ZERO)
}

/// [`with_front_ends`] with a steal margin.
fn with_front_ends_and_margin(
    n: usize,
    steal_margin: Duration,
) -> (Arc<Scheduler>, Vec<mpsc::Sender<Arrival>>) {
    let scheduler = Arc::new(std::sync::OnceLock::new());
    let (senders, receivers): (Vec<_>, Vec<_>) = (0..n).map(|_| mpsc::channel()).unzip();
    let receivers = Mutex::new(receivers.into_iter().map(Some).collect::<Vec<_>>());
    let unparkers = senders.clone();
    let shared = Arc::clone(&scheduler);
    let factory: luge_sched::FrontEndFactory = Arc::new(move |worker| {
        let arrivals = receivers.lock().unwrap()[worker].take().unwrap();
        let front = ChannelFrontEnd {
            arrivals,
            scheduler: Arc::clone(&shared),
        };
        let unpark = ChannelUnpark(Mutex::new(unparkers[worker].clone()));
        Some((
            Box::new(front) as Box<dyn luge_sched::FrontEnd>,
            Arc::new(unpark) as Arc<dyn luge_sched::Unpark>,
        ))
    });
    let config = SchedulerConfig {
        workers: n,
        policy: Policy::Edf,
        pin: false,
        steal_margin,
        ..Default::default()
    };
    let sched = Arc::new(Scheduler::start_with(&config, None, Some(factory)).unwrap());
    let _ = scheduler.set(Arc::downgrade(&sched));
    (sched, senders)
}

/// A job that reports the worker thread it ran on.
fn where_it_ran(work: Spin, done: mpsc::Sender<String>) -> Job {
    Job {
        function: Arc::from("where"),
        deadline: Instant::now() + Duration::from_millis(100),
        expected: None,
        longest_poll: std::time::Duration::from_secs(60),
        tenant: None,
        future: Box::pin(async move {
            work.await;
            let thread = std::thread::current().name().unwrap_or("?").to_owned();
            let _ = done.send(thread);
        }),
    }
}

/// Run where it arrived: a job submitted by a worker's own front end runs
/// on that worker, with no hand-off to another thread, and a worker parked
/// in its front end wakes for it; a burst that one worker cannot run at once
/// is stolen by its idle siblings.
#[test]
fn front_ends_run_what_they_receive_where_it_arrived() {
    let (sched, arrivals) = with_front_ends(4);
    let (tx, rx) = mpsc::channel();
    // An idle sibling may take one while the OS has worker 2's thread off
    // its core (the tests of this binary share two cores in CI): that is
    // stealing doing its job, counted as such, and rare.
    let mut here = 0;
    for _ in 0..50 {
        let job = where_it_ran(spin(0, None), tx.clone());
        arrivals[2].send(Arrival::Request(job)).unwrap();
        let ran_on = rx.recv_timeout(Duration::from_secs(5)).unwrap();
        here += usize::from(ran_on == "luge-worker-2");
    }
    eventually(|| sched.stats().completed == 50);
    let stats = sched.stats();
    assert!(here >= 45, "{here} of 50 where they arrived: {stats:?}");
    assert_eq!(stats.local_submits, 50, "{stats:?}");
    assert_eq!(stats.steals, (50 - here) as u64, "{stats:?}");
    assert_eq!(stats.jobs_run[2], here as u64, "{stats:?}");

    // Eight 30 ms jobs arrive at worker 0 together: the others take some.
    for _ in 0..8 {
        let job = where_it_ran(spin(30, None), tx.clone());
        arrivals[0].send(Arrival::Request(job)).unwrap();
    }
    let ran_on: std::collections::HashSet<String> = (0..8)
        .map(|_| rx.recv_timeout(Duration::from_secs(10)).unwrap())
        .collect();
    assert!(ran_on.len() > 1, "all on {ran_on:?}");
    assert!(sched.stats().steals > 0, "{:?}", sched.stats());
}

/// A front end that submits, at each scheduling point, the batches of jobs
/// sent to it (once the scheduler is known), and records what each
/// `Step::Ran` said.
struct Recording {
    jobs: mpsc::Receiver<Vec<Job>>,
    waiting: Vec<Job>,
    scheduler: Arc<std::sync::OnceLock<std::sync::Weak<Scheduler>>>,
    ran: Arc<Mutex<Vec<(bool, bool)>>>,
}

impl luge_sched::FrontEnd for Recording {
    fn drive(&mut self, step: &mut dyn FnMut() -> luge_sched::Step) {
        loop {
            let next = step();
            while let Ok(batch) = self.jobs.try_recv() {
                self.waiting.extend(batch);
            }
            if !self.waiting.is_empty()
                && let Some(sched) = self.scheduler.get().and_then(std::sync::Weak::upgrade)
            {
                self.waiting.drain(..).for_each(|job| sched.submit(job));
            }
            match next {
                luge_sched::Step::Ran { more, next_is_long } => {
                    self.ran.lock().unwrap().push((more, next_is_long));
                }
                luge_sched::Step::Idle(timeout) => {
                    std::thread::park_timeout(timeout.min(Duration::from_millis(1)));
                }
                luge_sched::Step::Stop => return,
            }
        }
    }
}

/// A front end learns when the next job may hold the worker long (so it
/// serves its connections fully first), and when it is short (a few may
/// run before the front end turns). One worker, EDF:
///
/// - two instant jobs and a 10 ms one yielding every millisecond, queued
///   together in that order of deadline: the next job is long once the
///   10 ms one has yielded;
/// - a 2 ms job of a function that never yields, once alone, then behind
///   an instant one: its function's recent runs make it long.
#[test]
fn a_front_end_is_told_when_the_next_job_may_hold_the_worker_long() {
    let (tx, rx) = mpsc::channel();
    // `expected`: the submitter's estimate, used until the function has run.
    let job = |function: &str, ms: u64, quantum: Option<u64>, due_ms: u64, expected| {
        let done = tx.clone();
        Job {
            function: Arc::from(function),
            deadline: Instant::now() + Duration::from_millis(due_ms),
            expected,
            longest_poll: std::time::Duration::from_secs(60),
            tenant: None,
            future: Box::pin(async move {
                spin(ms, quantum).await;
                let _ = done.send(());
            }),
        }
    };
    let (send, jobs) = mpsc::channel();
    let scheduler = Arc::new(std::sync::OnceLock::new());
    let ran = Arc::new(Mutex::new(Vec::new()));
    let front = Mutex::new(Some(Recording {
        jobs,
        waiting: Vec::new(),
        scheduler: Arc::clone(&scheduler),
        ran: Arc::clone(&ran),
    }));
    let factory: luge_sched::FrontEndFactory = Arc::new(move |_| {
        let front = front.lock().unwrap().take()?;
        Some((
            Box::new(front) as Box<dyn luge_sched::FrontEnd>,
            Arc::new(std::thread::current()) as Arc<dyn luge_sched::Unpark>,
        ))
    });
    let config = SchedulerConfig {
        workers: 1,
        policy: Policy::Edf,
        pin: false,
        ..Default::default()
    };
    let sched = Arc::new(Scheduler::start_with(&config, None, Some(factory)).unwrap());
    let _ = scheduler.set(Arc::downgrade(&sched));
    // Runs `batch` and returns what the front end was told meanwhile, up to
    // the step after the last job (a job reports before its step ends).
    let sent = std::cell::Cell::new(0);
    let run = |batch: Vec<Job>| {
        let (count, mark) = (batch.len(), ran.lock().unwrap().len());
        sent.set(sent.get() + count as u64);
        send.send(batch).unwrap();
        for _ in 0..count {
            rx.recv_timeout(Duration::from_secs(10)).unwrap();
        }
        eventually(|| {
            let ran = ran.lock().unwrap();
            sched.stats().completed == sent.get()
                && ran.len() > mark
                && ran.last() == Some(&(false, false))
        });
        ran.lock().unwrap()[mark..].to_vec()
    };

    // Each function declared short runs here for the first time, so its
    // estimate decides: an instant job's recorded run is its poll's wall
    // time, which a busy machine may stretch past LONG_JOB.
    let short = Some(Duration::ZERO);
    let told = run(vec![
        job("first", 0, None, 100, short),
        job("second", 0, None, 200, short),
        job("yielding", 10, Some(1), 300, short),
    ]);
    // Each instant job leaves a job declared short next; the long one's
    // first slice leaves itself, having yielded; its last slice leaves
    // nothing.
    assert_eq!(
        told[..3],
        [(true, false), (true, false), (true, true)],
        "{told:?}"
    );
    assert_eq!(told.last(), Some(&(false, false)), "{told:?}");
    assert!(
        told.len() > 4,
        "the long job yielded more than once: {told:?}"
    );

    // A function nothing is known of may hold the worker a quantum on its
    // first run, as may one declared long.
    let told = run(vec![
        job("fourth", 0, None, 100, short),
        job("unknown", 0, None, 200, None),
    ]);
    assert_eq!(told, [(true, true), (false, false)]);
    let told = run(vec![
        job("fifth", 0, None, 100, short),
        job(
            "declared-long",
            0,
            None,
            200,
            Some(Duration::from_millis(1)),
        ),
    ]);
    assert_eq!(told, [(true, true), (false, false)]);

    // Its last run decides once it has run, over its estimate.
    run(vec![job("slow", 2, None, 100, short)]);
    let told = run(vec![
        job("third", 0, None, 100, short),
        job("slow", 2, None, 200, short),
    ]);
    assert_eq!(told, [(true, true), (false, false)]);
}

/// A steal margin keeps a busy worker on its own jobs: two workers, each
/// with 20 jobs of 3 ms from its own front end, worker 0's all more urgent
/// (earlier deadlines) than worker 1's. Strict EDF across workers (no
/// margin) has worker 1 run worker 0's jobs first, about half of them, and
/// worker 0 then half of worker 1's; with a margin longer than the test each
/// worker runs its own, a sibling taking one only when its own queue is
/// empty (at the start and the end).
#[test]
fn a_steal_margin_keeps_busy_workers_on_their_own_jobs() {
    let (sched, arrivals) = with_front_ends_and_margin(2, Duration::from_secs(60));
    let (tx, rx) = mpsc::channel();
    // Made in order: worker 0's 20, then worker 1's (later deadlines).
    let jobs: Vec<(usize, Job)> = (0..40)
        .map(|i| {
            let (arrives_at, done) = (i / 20, tx.clone());
            let job = Job {
                function: Arc::from("own"),
                deadline: Instant::now() + Duration::from_millis(100),
                expected: None,
                longest_poll: std::time::Duration::from_secs(60),
                tenant: None,
                future: Box::pin(async move {
                    spin(3, None).await;
                    let thread = std::thread::current().name().unwrap_or("?").to_owned();
                    let _ = done.send((arrives_at, thread));
                }),
            };
            (arrives_at, job)
        })
        .collect();
    // Worker 1's jobs first, so that neither worker idles long before its
    // own burst is queued.
    let (first, second): (Vec<_>, Vec<_>) = jobs.into_iter().partition(|(at, _)| *at == 1);
    for (worker, job) in first.into_iter().chain(second) {
        arrivals[worker].send(Arrival::Request(job)).unwrap();
    }
    let elsewhere = (0..40)
        .map(|_| rx.recv_timeout(Duration::from_secs(10)).unwrap())
        .filter(|(arrived, ran_on)| *ran_on != format!("luge-worker-{arrived}"))
        .count();
    let stats = sched.stats();
    assert!(
        elsewhere <= 10,
        "{elsewhere} of 40 ran elsewhere: {stats:?}"
    );
    assert_eq!(stats.steals, elsewhere as u64, "{stats:?}");
}

/// The margin's bound: a busy worker still takes a sibling's queued job
/// that is more urgent than its own next one by more than the margin. Two
/// workers at the default margin (1 ms): worker 1 has 50 jobs of 4 ms due
/// in 10 s; worker 0 runs a 200 ms job that does not yield, and behind it
/// waits a job due in 2 s. Worker 1 takes that job at its next scheduling
/// point (within a few ms); with a margin longer than the test it would
/// wait for one of the two to run dry (about 200 ms).
#[test]
fn a_busy_worker_takes_a_siblings_job_more_urgent_by_the_margin() {
    let margin = SchedulerConfig::default().steal_margin;
    assert_eq!(margin, Duration::from_millis(1));
    let (sched, arrivals) = with_front_ends_and_margin(2, margin);
    let (tx, rx) = mpsc::channel();
    let now = Instant::now();
    let job = |name: &str, ms: u64, due: Duration| Job {
        function: Arc::from(name),
        deadline: now + due,
        expected: None,
        longest_poll: std::time::Duration::from_secs(60),
        tenant: None,
        future: Box::pin({
            let done = tx.clone();
            let name = name.to_owned();
            async move {
                spin(ms, None).await;
                let _ = done.send((name, Instant::now()));
            }
        }),
    };
    for _ in 0..50 {
        let own = job("own", 4, Duration::from_secs(10));
        arrivals[1].send(Arrival::Request(own)).unwrap();
    }
    // Worker 1 busy with its own, its queue full, before worker 0's arrive.
    eventually(|| sched.stats().completed >= 2);
    let long = job("long", 200, Duration::from_secs(1));
    let waiting = job("waiting", 1, Duration::from_secs(2));
    let submitted = Instant::now();
    // Read in one turn: worker 0 starts the long job with the other queued.
    arrivals[0]
        .send(Arrival::Requests(vec![long, waiting]))
        .unwrap();
    let done = loop {
        let (name, at) = rx.recv_timeout(Duration::from_secs(10)).unwrap();
        if name == "waiting" {
            break at;
        }
    };
    let waited = done.duration_since(submitted);
    assert!(
        waited < Duration::from_millis(100),
        "the urgent job waited {waited:?}: {:?}",
        sched.stats()
    );
}

/// `job`, run as `tenant`.
fn job_of(
    tenant: &Arc<Tenant>,
    name: &str,
    deadline: Instant,
    work: impl Future<Output = ()> + Send + 'static,
    done: mpsc::Sender<(String, Instant)>,
) -> Job {
    Job {
        tenant: Some(Arc::clone(tenant)),
        ..job(name, deadline, work, done)
    }
}

/// Submits `jobs` from a job, as calls are: on a worker's thread, into its
/// own queue (from another thread they would wait in the injector, which
/// a worker takes from one at a time, in order).
fn submit_from_a_worker(sched: &Arc<Scheduler>, jobs: Vec<Job>) {
    let (submitted, done) = mpsc::channel();
    let on_worker = Arc::clone(sched);
    sched.submit(Job {
        function: Arc::from("submitter"),
        deadline: Instant::now(),
        expected: None,
        longest_poll: std::time::Duration::from_secs(60),
        tenant: None,
        future: Box::pin(async move {
            for job in jobs {
                on_worker.submit(job);
            }
            let _ = submitted.send(());
        }),
    });
    done.recv().unwrap();
}

/// One worker. Tenant `a` has 100 jobs of 2 ms queued, all past their
/// deadline (a call tree admitted a while ago); once 20 have run, tenant
/// `b` submits one due in 100 ms. By deadline alone it would wait for all
/// 80 others (as it does without tenants); `a` has used more than its
/// share for 40 ms, so `b` runs at the worker's next scheduling point.
#[test]
fn a_tenant_over_its_share_waits_behind_one_within_it() {
    let sched = Arc::new(scheduler(1, Policy::Edf));
    let (a, b) = (Arc::new(Tenant::new(1)), Arc::new(Tenant::new(1)));
    let (tx, rx) = mpsc::channel();
    let past = Instant::now() - Duration::from_secs(1);
    let jobs = (0..100)
        .map(|i| job_of(&a, &format!("a{i}"), past, spin(2, None), tx.clone()))
        .collect();
    submit_from_a_worker(&sched, jobs);
    for _ in 0..20 {
        rx.recv().unwrap();
    }
    let due = Instant::now() + Duration::from_millis(100);
    sched.submit(job_of(&b, "b", due, spin(1, None), tx));
    let mut before_b = 0;
    while rx.recv().unwrap().0 != "b" {
        before_b += 1;
    }
    // The job `a` runs when `b` arrives, and at most one more: a
    // scheduling point that pulled `b` in after it had picked.
    assert!(before_b <= 2, "{before_b} of a's jobs ran before b's");
    assert!(sched.stats().over_share > 0, "{:?}", sched.stats());
    assert!(b.lead(Instant::now()) < Duration::from_millis(5));
}

/// A tenant alone that keeps the worker busy is over its share (one
/// default weight is kept for a newcomer), and its jobs still run in
/// deadline order: being over share only puts them behind other tenants'.
#[test]
fn a_tenant_alone_over_its_share_keeps_deadline_order() {
    let sched = Arc::new(scheduler(1, Policy::Edf));
    let a = Arc::new(Tenant::new(1));
    let (tx, rx) = mpsc::channel();
    let now = Instant::now();
    // Submitted latest deadline first.
    let jobs = (0..60u64)
        .rev()
        .map(|i| {
            let due = now + Duration::from_millis(100 + i);
            job_of(&a, &format!("{i:02}"), due, spin(2, None), tx.clone())
        })
        .collect();
    submit_from_a_worker(&sched, jobs);
    let order: Vec<String> = (0..60).map(|_| rx.recv().unwrap().0).collect();
    let mut sorted = order.clone();
    sorted.sort();
    assert_eq!(order, sorted);
    assert!(
        a.over_share(Instant::now()),
        "lead {:?}",
        a.lead(Instant::now())
    );
    assert!(sched.stats().over_share > 0);
}

/// Without preemption, EDF orders the new jobs waiting for a worker: one
/// worker runs a 30 ms job while 20 jobs due in a second and then one due
/// in 50 ms arrive from another thread (as requests do from a front end of
/// threads); the urgent one runs next. A worker that took one new job per
/// scheduling point ran them in arrival order, the urgent one last.
#[test]
fn edf_orders_new_jobs_that_wait_for_a_worker() {
    let sched = scheduler(1, Policy::Edf);
    let (tx, rx) = mpsc::channel();
    let now = Instant::now();
    sched.submit(job("blocker", now, spin(30, None), tx.clone()));
    // Wait until the worker runs it, so that the rest arrive behind it.
    std::thread::sleep(Duration::from_millis(5));
    for i in 0..20 {
        let due = now + Duration::from_secs(1);
        sched.submit(job(&format!("later{i}"), due, spin(1, None), tx.clone()));
    }
    sched.submit(job(
        "urgent",
        now + Duration::from_millis(50),
        spin(1, None),
        tx,
    ));
    let order: Vec<String> = (0..22).map(|_| rx.recv().unwrap().0).collect();
    assert_eq!(order[..2], ["blocker", "urgent"], "{order:?}");
}

/// A worker whose poll runs past its job's longest poll (a host call
/// blocking the thread: the engine would have ended the guest by then) is
/// stuck, as the liveness probe reads it; one whose poll is within its
/// bound, or idle, is not; a stuck worker that comes back is live again.
#[test]
fn a_poll_held_past_its_bound_marks_its_worker_stuck() {
    let sched = scheduler(2, Policy::Edf);
    let grace = Duration::from_millis(200);
    let (tx, rx) = mpsc::channel();
    let now = Instant::now();
    let blocking = || async { std::thread::sleep(Duration::from_millis(1500)) };
    // Within its bound all along: 1.5 s of 60 s, though past its
    // (scheduling) deadline.
    sched.submit(job("fine", now, blocking(), tx.clone()));
    // Blocks its thread 1.5 s where its run may take 50 ms.
    let mut held = job("held", now + Duration::from_secs(10), blocking(), tx);
    held.longest_poll = Duration::from_millis(50);
    sched.submit(held);
    std::thread::sleep(Duration::from_millis(100));
    assert!(sched.stuck_workers(grace).is_empty(), "within the grace");
    // Past its bound and the grace unless its poll began over 650 ms late.
    std::thread::sleep(Duration::from_millis(800));
    assert_eq!(sched.stuck_workers(grace).len(), 1, "held past it");
    // A longer grace forgives it.
    assert!(sched.stuck_workers(Duration::from_secs(5)).is_empty());
    for _ in 0..2 {
        rx.recv().unwrap();
    }
    // Back (the poll ends just after the job reports): live again.
    eventually(|| sched.stuck_workers(grace).is_empty());
}
