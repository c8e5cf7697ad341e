//! Workers, the injector, and the scheduling loop.

use std::cell::Cell;
use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};

use crate::protocol::SleepMarks;
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};
use std::task::{Context, Poll, Waker};
use std::thread::{JoinHandle, Thread};
use std::time::{Duration, Instant};

use crossbeam_deque::{Injector, Steal};
use luge_core::preempt::PreemptSignal;

use crate::policy::{Policy, Urgency};
use crate::queue::{Rank, RunQueue};
use crate::share::Tenant;
use crate::stats::{Counters, ExecutionStats, SchedulerStats};
use crate::task::{self, Task};

/// An idle worker re-checks the queues at least this often. Wake-ups are
/// explicit (every enqueue wakes a sleeper; see `SleepMarks::announce` for why
/// none is missed), so this is a safety net, long enough that an idle
/// executor stays idle: a worker wakes once in five seconds.
const IDLE_RECHECK: Duration = Duration::from_secs(5);

/// Runs each worker's loop inside a caller-provided context, e.g. a tokio
/// runtime's `enter()` guard so engine host calls can use its timers. It
/// receives the worker index and must call the loop exactly once.
pub type WorkerWrapper = Arc<dyn Fn(usize, &mut dyn FnMut()) + Send + Sync>;

/// Work that lives on a worker's thread beside its jobs: a front end whose
/// connections the worker serves itself, so that a request runs on the
/// core that received it, with no hand-off between threads.
///
/// The worker turns its front end at every scheduling point (between jobs,
/// and between the quanta of a preempted job) and parks in it when it has
/// nothing to run. A job submitted on the worker's thread (by the front end)
/// goes into the worker's own queue and runs there at its next scheduling
/// point; siblings take it only when they are idle and it would otherwise
/// wait (stealing balances the load).
///
/// The price: while the worker runs a job, its connections wait for the
/// next scheduling point. Give a front end only to workers whose jobs yield
/// at the end of each quantum.
pub trait FrontEnd {
    /// Runs the worker: calls `step` (one scheduling point, which may run
    /// a job) until it returns [`Step::Stop`], serving the front end
    /// between calls. After [`Step::Ran`], it runs the front end's ready
    /// work without blocking; after [`Step::Idle`], it blocks, running
    /// front-end work as it becomes ready, until [`Unpark::unpark`] is
    /// called (a job submitted on this thread calls it too) or the timeout
    /// passes. `step` may be called inside the front end's own context
    /// (an async runtime's `block_on`), so that what a job wakes there is
    /// woken without a system call.
    fn drive(&mut self, step: &mut dyn FnMut() -> Step);
}

/// What a worker's scheduling point did, for its [`FrontEnd`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Step {
    /// Ran a job (or found work to look at again): call again soon.
    /// `more`: jobs wait in this worker's own queue, so the front end may
    /// run a few before it turns (batching its system calls), as long as it
    /// turns often enough for its connections.
    Ran {
        /// Whether this worker's own queue holds more jobs.
        more: bool,
        /// Whether the next job in this worker's own queue may hold the
        /// worker long: it has run before and yielded, its function's
        /// last run took at least [`LONG_JOB`], or its function has not
        /// run yet. The front end should then serve its connections fully
        /// first (write what the jobs just run answered, read what arrived
        /// while they ran, and queue its jobs), not batch it with the jobs
        /// just run.
        next_is_long: bool,
    },
    /// Nothing to run: the worker is announced asleep. Park until unparked
    /// or the timeout passes, then call again.
    Idle(Duration),
    /// The scheduler is shutting down: return.
    Stop,
}

/// Ends a worker's park (in [`FrontEnd::drive`], after [`Step::Idle`]) from any thread. A call made before
/// the park begins makes it return at once: no wake-up is lost.
pub trait Unpark: Send + Sync {
    /// Wakes the parked worker.
    fn unpark(&self);
}

impl Unpark for Thread {
    fn unpark(&self) {
        Thread::unpark(self);
    }
}

/// A job expected to run at least this long is long for a front end
/// ([`Step::Ran::next_is_long`]): a quarter of a millisecond, several short
/// requests' worth (tens of microseconds each), so the responses of the
/// jobs just run are not held for it, while short jobs still share a turn.
pub const LONG_JOB: Duration = Duration::from_micros(250);

/// Makes worker `i`'s front end, on the worker's own thread (inside its
/// [`WorkerWrapper`]), with the [`Unpark`] that ends its parks; `None`
/// leaves that worker without one (it parks its thread when idle).
pub type FrontEndFactory =
    Arc<dyn Fn(usize) -> Option<(Box<dyn FrontEnd>, Arc<dyn Unpark>)> + Send + Sync>;

thread_local! {
    /// The scheduler (its `Shared`'s address) and worker index of the
    /// worker running on this thread, if any: `submit` on a worker's own
    /// thread queues locally.
    static THIS_WORKER: Cell<Option<(usize, usize)>> = const { Cell::new(None) };
    /// The job this thread polls now: its preemptions so far, its CPU
    /// before this poll (ns), and when this poll began ([`current_job`]).
    static CURRENT_JOB: Cell<Option<(u64, u64, Instant)>> = const { Cell::new(None) };
}

/// What the scheduler knows of the job being polled on this thread.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct JobProgress {
    /// Times it yielded at the end of a quantum (or early, to a more
    /// urgent job) and was queued again.
    pub preemptions: u64,
    /// Worker time it has run, this poll so far included.
    pub cpu: Duration,
    /// How long this poll has held the worker so far.
    pub this_poll: Duration,
}

/// The job a worker of this thread is polling, read from inside its
/// future (where it reports its own outcome); `None` off a worker.
pub fn current_job() -> Option<JobProgress> {
    CURRENT_JOB
        .with(Cell::get)
        .map(|(preemptions, cpu_ns, since)| {
            let this_poll = since.elapsed();
            JobProgress {
                preemptions,
                cpu: Duration::from_nanos(cpu_ns) + this_poll,
                this_poll,
            }
        })
}

/// Scheduler settings.
#[derive(Debug, Clone)]
pub struct SchedulerConfig {
    /// Worker threads.
    pub workers: usize,
    /// Run-queue order.
    pub policy: Policy,
    /// Pin worker `i` to core `i` (modulo the cores available).
    pub pin: bool,
    /// Percentile of recent execution times SRSF expects (0-100).
    pub srsf_percentile: f64,
    /// Execution-time-aware sharding (Pyrosome); none by default.
    pub sharding: Option<Sharding>,
    /// How much more urgent (by policy key: deadline, arrival or slack) a
    /// job waiting behind a busy sibling must be than the head of a
    /// worker's own queue for the worker to take it instead. A worker
    /// whose own queue is empty takes the most urgent waiting job anywhere
    /// whatever this is; a margin only keeps a busy worker on its own
    /// jobs (and their connections' core) while the queues are about
    /// even, at the price of up to this much priority inversion between
    /// workers.
    pub steal_margin: Duration,
}

/// Execution-time-aware (soft) sharding, after Pyrosome: functions whose
/// expected execution time (the SRSF percentile of their measured runs,
/// else their declared expectation) exceeds `long_above` run only on the
/// first `long_workers` workers; the others run anywhere. Short functions
/// then never queue behind long ones on the remaining workers, while the
/// long workers still take short work when they have nothing longer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Sharding {
    /// The execution time above which a function is long.
    pub long_above: Duration,
    /// Workers, from the first, that run long functions (at least one, at
    /// most all but one).
    pub long_workers: usize,
}

impl Default for SchedulerConfig {
    fn default() -> Self {
        Self {
            workers: std::thread::available_parallelism().map_or(1, |n| n.get()),
            policy: Policy::Edf,
            pin: true,
            // p90: plans for the slow runs without being ruled by outliers.
            srsf_percentile: 90.0,
            // Off: every worker runs everything unless the operator shards.
            sharding: None,
            // 1 ms: at saturation every worker's queue holds jobs, and
            // strict EDF across workers (a zero margin) had each worker
            // run whichever queue's head was oldest, so 72-87 % of jobs
            // ran on another core than the one whose connection received
            // them (their state moved there, their answer back). With 1 ms
            // a busy worker keeps to its own queue while the queues are
            // about even: on 8 dedicated cores 23-36 % more requests per
            // second for a C ping and 29-61 % more for a component,
            // 16-37 % less CPU per request, under 3 % of jobs
            // stolen (docs/BENCHMARKS-ARCHIVE.md, "A steal margin"); no change on
            // 2 cores. The price: a job waiting behind a busy worker may
            // wait up to 1 ms longer than strict EDF would have it while
            // others run later deadlines; an idle worker still takes it
            // at once. A quantum is 5 ms by default, so this is a fifth of
            // one.
            steal_margin: Duration::from_millis(1),
        }
    }
}

/// Errors starting the scheduler.
#[derive(Debug, thiserror::Error)]
pub enum SchedulerError {
    /// Zero workers asked for.
    #[error("the scheduler needs at least one worker")]
    NoWorkers,
    /// Sharding that leaves no worker for one of the two kinds.
    #[error("sharding needs at least one long worker and one other (asked {long} of {workers})")]
    Sharding {
        /// Long workers asked for.
        long: usize,
        /// Workers in all.
        workers: usize,
    },
    /// A worker thread could not be spawned.
    #[error("could not start worker thread: {0}")]
    Spawn(#[from] std::io::Error),
}

/// A unit of work: a future and what the policy needs to order it.
pub struct Job {
    /// Function name: the key of execution statistics and deadline misses.
    pub function: Arc<str>,
    /// Absolute deadline (may already be past: then it is the most urgent).
    pub deadline: Instant,
    /// Declared expected execution time, used by SRSF until runs are measured.
    pub expected: Option<Duration>,
    /// The longest one poll of it may hold its worker: the engine ends a
    /// run by then (the function's time limit). A worker in one poll
    /// longer than this and a grace is stuck ([`Scheduler::stuck_workers`]).
    pub longest_poll: Duration,
    /// Who pays for its worker time; `None`: nobody, never over a share.
    pub tenant: Option<Arc<Tenant>>,
    /// The work. It reports its own result (e.g. through a channel).
    pub future: std::pin::Pin<Box<dyn Future<Output = ()> + Send>>,
}

pub(crate) struct Shared {
    policy: Policy,
    injector: Injector<Arc<Task>>,
    /// New long jobs, under sharding: only the long workers take them.
    long_injector: Injector<Arc<Task>>,
    sharding: Option<Sharding>,
    /// See [`SchedulerConfig::steal_margin`].
    steal_margin: Duration,
    queues: Vec<Mutex<RunQueue<Arc<Task>>>>,
    /// Jobs waiting in all workers' queues together. A scheduling point
    /// scans siblings' queues only when some wait beyond its own: in the
    /// common case (workers keep up) each point is O(1) in the number of
    /// workers.
    backlog: AtomicUsize,
    /// Which workers sleep (the protocol `tests/loom.rs` checks).
    sleep: SleepMarks,
    /// Per worker: what ends its sleep (its thread, or its front end's
    /// park), set by the worker itself before it first sleeps.
    wakers: Vec<OnceLock<Arc<dyn Unpark>>>,
    shutdown: AtomicBool,
    pub stats: ExecutionStats,
    counters: Counters,
    busy_ns: Vec<AtomicU64>,
    jobs_run: Vec<AtomicU64>,
    next_wake: AtomicUsize,
    /// Per worker: asks the sandbox it runs to yield early.
    signals: Vec<PreemptSignal>,
    /// Per worker: the policy key of the job it runs, as ns since `base`;
    /// `IDLE_KEY` when it runs none. Read by `submit` to find the worker a
    /// more urgent arrival should interrupt.
    running_key: Vec<AtomicU64>,
    /// When the poll each worker runs now must have ended, in ns since
    /// `base` (at least 1; its start and its job's `longest_poll`), or
    /// [`NOT_POLLING`]: the engine ends a run by then.
    polling_until: Vec<AtomicU64>,
    base: Instant,
    /// The weights of the tenants with jobs here, added (their share's
    /// denominator, with one default weight for a newcomer). A tenant's
    /// weight is added before its first job is queued, so the job that
    /// takes it off again cannot end first: never below zero.
    active_weight: AtomicU64,
}

/// `polling_until` of a worker between polls.
const NOT_POLLING: u64 = 0;

/// `running_key` of a worker running nothing.
const IDLE_KEY: u64 = u64::MAX;

/// New jobs a worker takes out of the injector at one scheduling point:
/// enough that the policy orders a backlog of new arrivals (a few hundred
/// at most: admission bounds them), few enough that one point costs at
/// most 64 pops and heap pushes of a few tens of nanoseconds each.
const PULL_BATCH: usize = 64;

/// Set in a `running_key` whose job's tenant is over its share: every job
/// within its share then outranks it. Keys are ns since `base`, below this
/// for 146 years.
const OVER_SHARE_BIT: u64 = 1 << 62;

impl task::Requeue for Shared {
    fn enqueue_woken(&self, task: Arc<Task>) {
        self.enqueue_woken_here(task);
    }
}

impl Shared {
    fn queue(&self, worker: usize) -> MutexGuard<'_, RunQueue<Arc<Task>>> {
        // Queue operations are single push/pop calls; ignore poisoning.
        self.queues[worker]
            .lock()
            .unwrap_or_else(|e| e.into_inner())
    }

    /// Whether `worker` may run long jobs (every worker, unsharded).
    fn runs_long(&self, worker: usize) -> bool {
        self.sharding.is_none_or(|s| worker < s.long_workers)
    }

    /// Workers a job may run on: the long ones for a long job.
    fn workers_for(&self, long: bool) -> std::ops::Range<usize> {
        match self.sharding {
            Some(sharding) if long => 0..sharding.long_workers,
            _ => 0..self.queues.len(),
        }
    }

    fn key(&self, task: &Task) -> Instant {
        let now = Instant::now();
        let remaining = match self.policy {
            Policy::Srsf => self
                .stats
                .expected(&task.function, task.expected_seed)
                .saturating_sub(task.cpu()),
            Policy::Fifo | Policy::Edf => Duration::ZERO,
        };
        self.policy.key(&Urgency {
            queued_at: now,
            deadline: task.current_deadline(),
            remaining,
        })
    }

    fn key_ns(&self, key: Instant) -> u64 {
        (key.saturating_duration_since(self.base).as_nanos() as u64).min(OVER_SHARE_BIT - 1)
    }

    /// `at` in ns since `base` (0 before it, `u64::MAX` past 584 years).
    fn since_base(&self, at: Instant) -> u64 {
        u64::try_from(at.saturating_duration_since(self.base).as_nanos()).unwrap_or(u64::MAX)
    }

    /// A rank as one number, smaller more urgent (for `running_key`).
    fn rank_ns(&self, rank: Rank) -> u64 {
        let key = self.key_ns(rank.key);
        if rank.over_share {
            key | OVER_SHARE_BIT
        } else {
            key
        }
    }

    /// Whether `task` may hold its worker long when it runs next: it
    /// yielded before (a quantum's end or an early preemption), or its
    /// function's last run (else the submitter's estimate) took at least
    /// [`LONG_JOB`], or nothing is known of its function yet (its first
    /// run, or its record forgotten): a first run may be a whole quantum.
    /// The last run, not the SRSF percentile: selecting that after every
    /// job was 1.5 % of a C ping's CPU on 16 cores (see `ExecutionStats`),
    /// and a short function misjudged long costs only one more turn of the
    /// front end.
    fn may_hold_long(&self, task: &Task) -> bool {
        task.yields.load(Ordering::Relaxed) > 0
            || self
                .stats
                .last(&task.function, task.expected_seed)
                .is_none_or(|last| last >= LONG_JOB)
    }

    /// `task`'s rank now.
    fn rank(&self, task: &Task, now: Instant) -> Rank {
        Rank {
            over_share: task.tenant.as_ref().is_some_and(|t| t.over_share(now)),
            key: self.key(task),
        }
    }

    /// A new job that is more urgent than a running one, while no worker is
    /// free: ask the worker running the least urgent job to yield now
    /// rather than at the end of its quantum. Under FIFO a new job is never
    /// more urgent, so this never fires.
    fn preempt_for(&self, rank: Rank, long: bool) {
        let key = self.rank_ns(rank);
        let least_urgent = self
            .workers_for(long)
            .map(|worker| (self.running_key[worker].load(Ordering::Acquire), worker))
            .max();
        if let Some((running, worker)) = least_urgent
            && running != IDLE_KEY
            && key < running
        {
            self.signals[worker].raise();
            Counters::add(&self.counters.early_preemptions, 1);
        }
    }

    /// Queues `task` on `worker`; whether it is over its tenant's share.
    fn push_local(&self, worker: usize, task: Arc<Task>) -> bool {
        let over_share = self.push_into(&mut self.queue(worker), task);
        self.backlog.fetch_add(1, Ordering::SeqCst);
        over_share
    }

    /// Queues `task` in `queue` (locked), keyed and classed now; whether it
    /// is over its tenant's share.
    fn push_into(&self, queue: &mut RunQueue<Arc<Task>>, task: Arc<Task>) -> bool {
        let key = self.key(&task);
        let tenant = task.tenant.clone();
        let over_share = queue.push_for(key, tenant, task, Instant::now());
        if over_share {
            Counters::add(&self.counters.over_share, 1);
        }
        over_share
    }

    /// `queue`'s heads classed as their tenants stand now, and its head's
    /// rank.
    fn settle(&self, queue: &mut RunQueue<Arc<Task>>) -> Option<Rank> {
        let demoted = queue.settle(Instant::now());
        if demoted > 0 {
            Counters::add(&self.counters.over_share, demoted as u64);
        }
        queue.peek_rank()
    }

    /// A job whose I/O completed: back to the worker that last ran it.
    fn enqueue_woken_here(&self, task: Arc<Task>) {
        let home = task.home.load(Ordering::Relaxed) % self.queues.len();
        let long = task.long;
        let _ = self.push_local(home, task);
        if !self.wake_worker(home) {
            self.wake_any(long);
        }
    }

    /// Unparks `worker` if it sleeps; whether it did.
    fn wake_worker(&self, worker: usize) -> bool {
        if self.sleep.clear(worker) {
            if let Some(waker) = self.wakers[worker].get() {
                waker.unpark();
            }
            return true;
        }
        false
    }

    /// Unparks one sleeping worker that may run a job (`long` or not), if
    /// any, round robin; whether one was. O(1) when none sleeps (all
    /// busy), the case where submits are many.
    fn wake_any(&self, long: bool) -> bool {
        if !self.sleep.any_asleep() {
            return false;
        }
        let n = self.workers_for(long).len();
        let start = self.next_wake.fetch_add(1, Ordering::Relaxed);
        (0..n).any(|i| self.wake_worker((start + i) % n))
    }

    /// Whether a job `worker` may take waits: new in an injector it takes
    /// from, or in a run queue. O(1). (Under sharding, a worker that does
    /// not run long jobs counts only its own queue: what waits in the
    /// others may be long, and it would poll for it in vain; it is woken
    /// for work it can take.)
    fn has_work(&self, worker: usize) -> bool {
        if !self.runs_long(worker) {
            return !self.injector.is_empty() || !self.queue(worker).is_empty();
        }
        !self.injector.is_empty()
            || !self.long_injector.is_empty()
            || self.backlog.load(Ordering::SeqCst) > 0
    }

    /// Moves the new jobs from the injector into `worker`'s queue, up to
    /// [`PULL_BATCH`], where the policy orders them with the jobs already
    /// queued; a sibling takes any of them it finds more urgent than its
    /// own (an idle one any at all, `next_task`). The injector itself is
    /// first come, first served: a worker that took one new job per
    /// scheduling point ordered the waiting ones by arrival whatever the
    /// policy, so without preemption EDF was FIFO, and a tenant over its
    /// share held a newcomer's job in arrival order.
    ///
    /// One per point where that order is the policy's (FIFO): the others
    /// stay in the injector, where the next worker free takes them. And
    /// under sharding a long worker takes one short job per point: a short
    /// job queued behind its long ones would wait for them, since the short
    /// workers take no job from behind a long one. A job over its tenant's
    /// share does not count towards either: the worker goes on (to
    /// [`PULL_BATCH`] jobs in all) for one within its share, which would go
    /// before those in any queue.
    fn pull_injected(&self, worker: usize) {
        let batch = match self.policy {
            Policy::Fifo => 1,
            Policy::Edf | Policy::Srsf => PULL_BATCH,
        };
        if self.sharding.is_some() && self.runs_long(worker) {
            Self::pull(&self.long_injector, batch, |task| {
                self.push_local(worker, task)
            });
            Self::pull(&self.injector, 1, |task| self.push_local(worker, task));
        } else {
            Self::pull(&self.injector, batch, |task| self.push_local(worker, task));
        }
    }

    /// Jobs from `injector` into `push` (which says whether the job is over
    /// its tenant's share) until `most` within their share are, or
    /// [`PULL_BATCH`] in all.
    fn pull(injector: &Injector<Arc<Task>>, most: usize, mut push: impl FnMut(Arc<Task>) -> bool) {
        let (mut within, mut pulled) = (0, 0);
        while within < most && pulled < PULL_BATCH {
            match injector.steal() {
                Steal::Success(task) => {
                    if !push(task) {
                        within += 1;
                    }
                    pulled += 1;
                }
                Steal::Empty => return,
                Steal::Retry => continue,
            }
        }
    }

    /// The most urgent waiting job of all queues: this worker's own, or one
    /// waiting behind a busy sibling (a sibling's queue holds only jobs it is
    /// not running) if it is more urgent than this worker's own by the steal
    /// margin. Siblings locked at this instant are skipped, not waited for.
    fn next_task(&self, worker: usize) -> Option<Arc<Task>> {
        self.pull_injected(worker);
        let (own_rank, own_len) = {
            let mut queue = self.queue(worker);
            (self.settle(&mut queue), queue.len())
        };
        let mut best: Option<(Rank, usize)> = own_rank.map(|r| (r, worker));
        // Siblings are searched only when jobs wait beyond this worker's
        // own: otherwise the point costs the same for 2 workers or 64.
        if self.backlog.load(Ordering::SeqCst) > own_len {
            Counters::add(&self.counters.sibling_scans, 1);
            let runs_long = self.runs_long(worker);
            for other in (0..self.queues.len()).filter(|&w| w != worker) {
                if let Ok(mut queue) = self.queues[other].try_lock()
                    && let Some(rank) = self.settle(&mut queue)
                    && best.is_none_or(|(best, from)| {
                        // Against this worker's own head, a sibling's job
                        // must be more urgent by the margin (in the same
                        // class: within a share beats over it).
                        let margin = if from == worker {
                            self.steal_margin
                        } else {
                            Duration::ZERO
                        };
                        match rank.over_share.cmp(&best.over_share) {
                            std::cmp::Ordering::Less => true,
                            std::cmp::Ordering::Greater => false,
                            std::cmp::Ordering::Equal => {
                                rank.key.checked_add(margin).is_some_and(|k| k < best.key)
                            }
                        }
                    })
                    // A long job stays on the long workers.
                    && (runs_long || queue.peek().is_some_and(|task| !task.long))
                {
                    best = Some((rank, other));
                }
            }
        }
        let (_, from) = best?;
        let (task, backlog) = {
            let mut queue = self.queue(from);
            let task = queue.pop();
            if task.is_some() {
                self.backlog.fetch_sub(1, Ordering::SeqCst);
            }
            (task, !queue.is_empty())
        };
        if from != worker && task.is_some() {
            Counters::add(&self.counters.steals, 1);
        }
        if backlog {
            // Work still waits while this worker is busy: let a sleeper take it.
            self.wake_any(self.sharding.is_some() && self.runs_long(from));
        }
        task
    }

    fn run(&self, worker: usize, task: Arc<Task>) {
        task.home.store(worker, Ordering::Relaxed);
        task.state.start();
        let waker = Waker::from(Arc::clone(&task));
        let mut cx = Context::from_waker(&waker);
        // A request raised for the previous job is void: this one is the
        // most urgent the worker could find.
        self.signals[worker].clear();
        let started = Instant::now();
        self.running_key[worker].store(self.rank_ns(self.rank(&task, started)), Ordering::Release);
        let until = self
            .since_base(started.checked_add(task.longest_poll).unwrap_or(started))
            .max(NOT_POLLING + 1);
        self.polling_until[worker].store(until, Ordering::Relaxed);
        CURRENT_JOB.with(|current| {
            current.set(Some((
                task.yields.load(Ordering::Relaxed),
                task.cpu_ns.load(Ordering::Relaxed),
                started,
            )));
        });
        let poll = {
            let mut slot = task.future.lock().unwrap_or_else(|e| e.into_inner());
            match slot.as_mut() {
                // A panicking job must not take the worker down with it.
                Some(future) => {
                    std::panic::catch_unwind(AssertUnwindSafe(|| future.as_mut().poll(&mut cx)))
                        .unwrap_or_else(|_| {
                            tracing::error!(function = %task.function, "job panicked");
                            Poll::Ready(())
                        })
                }
                None => Poll::Ready(()),
            }
        };
        CURRENT_JOB.with(|current| current.set(None));
        self.running_key[worker].store(IDLE_KEY, Ordering::Release);
        let ended = Instant::now();
        self.polling_until[worker].store(NOT_POLLING, Ordering::Relaxed);
        let spent = ended.saturating_duration_since(started);
        self.busy_ns[worker].fetch_add(spent.as_nanos() as u64, Ordering::Relaxed);
        task.cpu_ns
            .fetch_add(spent.as_nanos() as u64, Ordering::Relaxed);
        if let Some(tenant) = &task.tenant {
            tenant.charge(
                spent,
                ended,
                self.active_weight.load(Ordering::Relaxed),
                self.queues.len(),
            );
        }
        match poll {
            Poll::Ready(()) => {
                task.state.finish();
                if let Some(tenant) = &task.tenant {
                    self.leave(tenant);
                }
                // Free the sandbox now, not when the last waker clone goes.
                *task.future.lock().unwrap_or_else(|e| e.into_inner()) = None;
                let missed = Instant::now() > task.deadline;
                let yields = task.yields.load(Ordering::Relaxed);
                self.stats
                    .record(&task.function, task.cpu(), missed, yields);
                Counters::add(&self.counters.completed, 1);
            }
            Poll::Pending => {
                let parked = task.state.park();
                if !parked {
                    // Woken while running: a quantum yield. Re-queue; the
                    // loop then picks the most urgent job, maybe this one.
                    task.yields.fetch_add(1, Ordering::Relaxed);
                    Counters::add(&self.counters.preemptions, 1);
                    if task.renew_if_spent(Instant::now()) {
                        Counters::add(&self.counters.renewals, 1);
                    }
                    self.push_local(worker, task);
                }
            }
        }
    }

    /// `tenant` has one more job here: with its first, it counts in
    /// `active_weight`.
    fn join(&self, tenant: &Tenant) {
        if tenant.jobs.fetch_add(1, Ordering::Relaxed) == 0 {
            self.active_weight
                .fetch_add(u64::from(tenant.weight()), Ordering::Relaxed);
        }
    }

    /// `tenant`'s job ended: with its last, it no longer counts.
    fn leave(&self, tenant: &Tenant) {
        if tenant.jobs.fetch_sub(1, Ordering::Relaxed) == 1 {
            self.active_weight
                .fetch_sub(u64::from(tenant.weight()), Ordering::Relaxed);
        }
    }

    /// The worker running on this thread, if it is one of this scheduler's.
    fn this_worker(&self) -> Option<usize> {
        let me = self as *const Self as usize;
        THIS_WORKER
            .with(Cell::get)
            .and_then(|(shared, worker)| (shared == me).then_some(worker))
    }

    /// Queues `task` on `worker`, the thread it was submitted on: it runs
    /// there at the worker's next scheduling point. A sibling is offered it
    /// only when it would wait: behind other queued jobs, or behind the job
    /// the worker runs now.
    fn submit_here(&self, worker: usize, task: Arc<Task>) {
        let long = task.long;
        let waiting = {
            let mut queue = self.queue(worker);
            self.push_into(&mut queue, task);
            queue.len()
        };
        self.backlog.fetch_add(1, Ordering::SeqCst);
        Counters::add(&self.counters.local_submits, 1);
        // Parked in its front end: end the park (submitted from inside it).
        if self.wake_worker(worker) {
            return;
        }
        if waiting > 1 || self.running_key[worker].load(Ordering::Acquire) != IDLE_KEY {
            self.wake_any(long);
        }
    }

    /// One scheduling point of `worker`: runs the most urgent job it can
    /// find, or says it is idle (its sleep announced) or must stop.
    fn step(&self, worker: usize) -> Step {
        // Back from a park (or a wake-up before it): no longer asleep.
        self.sleep.clear(worker);
        if self.shutdown.load(Ordering::Acquire) {
            return Step::Stop;
        }
        if let Some(task) = self.next_task(worker) {
            self.jobs_run[worker].fetch_add(1, Ordering::Relaxed);
            self.run(worker, task);
            let queue = self.queue(worker);
            return Step::Ran {
                more: !queue.is_empty(),
                next_is_long: queue.peek().is_some_and(|next| self.may_hold_long(next)),
            };
        }
        // Announce sleep, then look once more: a job enqueued before the
        // announcement is seen here, one after it unparks us.
        self.sleep.announce(worker);
        if self.has_work(worker) || self.shutdown.load(Ordering::Acquire) {
            return Step::Ran {
                more: false,
                next_is_long: false,
            };
        }
        Step::Idle(IDLE_RECHECK)
    }

    fn worker_loop(&self, worker: usize, front: Option<Box<dyn FrontEnd>>) {
        let mut step = || self.step(worker);
        match front {
            Some(mut front) => front.drive(&mut step),
            None => loop {
                match step() {
                    Step::Ran { .. } => {}
                    Step::Idle(timeout) => std::thread::park_timeout(timeout),
                    Step::Stop => return,
                }
            },
        }
    }
}

/// The scheduler: owns the worker threads; dropping it stops them.
pub struct Scheduler {
    shared: Arc<Shared>,
    handles: Vec<JoinHandle<()>>,
}

impl std::fmt::Debug for Scheduler {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Scheduler")
            .field("workers", &self.handles.len())
            .field("policy", &self.shared.policy)
            .finish_non_exhaustive()
    }
}

impl Scheduler {
    /// Starts `config.workers` workers, each running inside `wrapper`.
    pub fn start(
        config: &SchedulerConfig,
        wrapper: Option<WorkerWrapper>,
    ) -> Result<Self, SchedulerError> {
        Self::start_with(config, wrapper, None)
    }

    /// Starts `config.workers` workers, each running inside `wrapper` and,
    /// with `front_ends`, serving a [`FrontEnd`] of its own.
    pub fn start_with(
        config: &SchedulerConfig,
        wrapper: Option<WorkerWrapper>,
        front_ends: Option<FrontEndFactory>,
    ) -> Result<Self, SchedulerError> {
        let n = config.workers;
        if n == 0 {
            return Err(SchedulerError::NoWorkers);
        }
        if let Some(sharding) = config.sharding
            && (sharding.long_workers == 0 || sharding.long_workers >= n)
        {
            return Err(SchedulerError::Sharding {
                long: sharding.long_workers,
                workers: n,
            });
        }
        let shared = Arc::new(Shared {
            policy: config.policy,
            injector: Injector::new(),
            long_injector: Injector::new(),
            sharding: config.sharding,
            steal_margin: config.steal_margin,
            queues: (0..n).map(|_| Mutex::new(RunQueue::default())).collect(),
            backlog: AtomicUsize::new(0),
            sleep: SleepMarks::new(n),
            wakers: (0..n).map(|_| OnceLock::new()).collect(),
            shutdown: AtomicBool::new(false),
            stats: ExecutionStats::new(config.srsf_percentile),
            counters: Counters::default(),
            busy_ns: (0..n).map(|_| AtomicU64::new(0)).collect(),
            jobs_run: (0..n).map(|_| AtomicU64::new(0)).collect(),
            next_wake: AtomicUsize::new(0),
            signals: (0..n).map(|_| PreemptSignal::new()).collect(),
            running_key: (0..n).map(|_| AtomicU64::new(IDLE_KEY)).collect(),
            polling_until: (0..n).map(|_| AtomicU64::new(NOT_POLLING)).collect(),
            base: Instant::now(),
            active_weight: AtomicU64::new(0),
        });
        let cores = if config.pin {
            core_affinity::get_core_ids().unwrap_or_default()
        } else {
            Vec::new()
        };
        let mut handles = Vec::with_capacity(n);
        for worker in 0..n {
            let shared = Arc::clone(&shared);
            let wrapper = wrapper.clone();
            let front_ends = front_ends.clone();
            let core = (!cores.is_empty()).then(|| cores[worker % cores.len()]);
            let handle = std::thread::Builder::new()
                .name(format!("luge-worker-{worker}"))
                .spawn(move || {
                    if let Some(core) = core
                        && !core_affinity::set_for_current(core)
                    {
                        tracing::warn!(worker, "could not pin worker to its core");
                    }
                    shared.signals[worker].install_on_this_thread();
                    THIS_WORKER.with(|this| {
                        this.set(Some((Arc::as_ptr(&shared) as usize, worker)));
                    });
                    let mut run = || {
                        let front = front_ends.as_ref().and_then(|make| {
                            let (front, unpark) = make(worker)?;
                            let _ = shared.wakers[worker].set(unpark);
                            Some(front)
                        });
                        if front.is_none() {
                            let thread: Arc<dyn Unpark> = Arc::new(std::thread::current());
                            let _ = shared.wakers[worker].set(thread);
                        }
                        shared.worker_loop(worker, front);
                    };
                    match &wrapper {
                        Some(wrap) => wrap(worker, &mut run),
                        None => run(),
                    }
                })?;
            handles.push(handle);
        }
        Ok(Self { shared, handles })
    }

    /// Queues a job. Never blocks.
    pub fn submit(&self, job: Job) {
        let window = job
            .deadline
            .saturating_duration_since(Instant::now())
            .max(task::MIN_WINDOW);
        let long = self.shared.sharding.is_some_and(|sharding| {
            self.shared.stats.expected(&job.function, job.expected) > sharding.long_above
        });
        let task = Arc::new(Task {
            future: Mutex::new(Some(job.future)),
            state: crate::protocol::TaskState::queued(),
            function: job.function,
            tenant: job.tenant,
            deadline: job.deadline,
            window,
            postponed_ns: AtomicU64::new(0),
            renewed_at_cpu_ns: AtomicU64::new(0),
            expected_seed: job.expected,
            longest_poll: job.longest_poll,
            long,
            cpu_ns: AtomicU64::new(0),
            yields: AtomicU64::new(0),
            home: AtomicUsize::new(0),
            shared: Arc::downgrade(&self.shared) as std::sync::Weak<dyn task::Requeue>,
        });
        Counters::add(&self.shared.counters.submitted, 1);
        if let Some(tenant) = &task.tenant {
            self.shared.join(tenant);
        }
        let long = task.long;
        // Submitted by a worker's front end: run where it arrived (a long
        // job only on a worker that runs long ones).
        if let Some(worker) = self.shared.this_worker()
            && (!long || self.shared.runs_long(worker))
        {
            if long {
                Counters::add(&self.shared.counters.long_jobs, 1);
            }
            return self.shared.submit_here(worker, task);
        }
        let rank = self.shared.rank(&task, Instant::now());
        if long {
            Counters::add(&self.shared.counters.long_jobs, 1);
            self.shared.long_injector.push(task);
        } else {
            self.shared.injector.push(task);
        }
        if !self.shared.wake_any(long) {
            self.shared.preempt_for(rank, long);
        }
    }

    /// Number of workers.
    pub fn workers(&self) -> usize {
        self.handles.len()
    }

    /// The workers that are stuck, by index: each still in a poll `grace`
    /// past its job's `longest_poll`. The engine ends a sandbox's run by
    /// its time limit, so what holds the thread is not the guest: a host
    /// call blocking it, a deadlock. What a liveness probe reads: a
    /// process with a stuck worker serves less, maybe nothing, and is
    /// better restarted. (A worker's front end, between polls, is not
    /// watched: its work, a compile among it, has no bound to hold it to.)
    pub fn stuck_workers(&self, grace: Duration) -> Vec<usize> {
        let shared = &self.shared;
        let now = shared.since_base(Instant::now());
        let grace_ns = u64::try_from(grace.as_nanos()).unwrap_or(u64::MAX);
        (0..shared.polling_until.len())
            .filter(|&worker| {
                let until = shared.polling_until[worker].load(Ordering::Relaxed);
                until != NOT_POLLING && now > until.saturating_add(grace_ns)
            })
            .collect()
    }

    /// Per-function execution statistics.
    pub fn execution_stats(&self) -> &ExecutionStats {
        &self.shared.stats
    }

    /// Counters so far.
    pub fn stats(&self) -> SchedulerStats {
        let c = &self.shared.counters;
        SchedulerStats {
            submitted: c.submitted.load(Ordering::Relaxed),
            completed: c.completed.load(Ordering::Relaxed),
            preemptions: c.preemptions.load(Ordering::Relaxed),
            early_preemptions: c.early_preemptions.load(Ordering::Relaxed),
            renewals: c.renewals.load(Ordering::Relaxed),
            steals: c.steals.load(Ordering::Relaxed),
            sibling_scans: c.sibling_scans.load(Ordering::Relaxed),
            long_jobs: c.long_jobs.load(Ordering::Relaxed),
            local_submits: c.local_submits.load(Ordering::Relaxed),
            over_share: c.over_share.load(Ordering::Relaxed),
            busy_ns: self
                .shared
                .busy_ns
                .iter()
                .map(|b| b.load(Ordering::Relaxed))
                .collect(),
            jobs_run: self
                .shared
                .jobs_run
                .iter()
                .map(|b| b.load(Ordering::Relaxed))
                .collect(),
        }
    }
}

impl Drop for Scheduler {
    fn drop(&mut self) {
        self.shared.shutdown.store(true, Ordering::Release);
        for waker in self.shared.wakers.iter().filter_map(OnceLock::get) {
            waker.unpark();
        }
        for handle in self.handles.drain(..) {
            let _ = handle.join();
        }
    }
}
