//! A scheduled job and its waker.
//!
//! State machine (one atomic), so that a job is in at most one queue and is
//! polled by at most one worker:
//!
//! ```text
//!   QUEUED --worker pops--> RUNNING --Ready--> DONE
//!                             |  \--Pending, not woken--> IDLE (parked on I/O)
//!                             |                             |--wake--> QUEUED
//!                             \--woken during poll (a quantum yield, or I/O
//!                                that completed at once)--> NOTIFIED
//!                                   --after poll--> QUEUED (re-queued)
//! ```

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

use crate::protocol::TaskState;
use std::sync::{Arc, Mutex, Weak};
use std::task::Wake;
use std::time::{Duration, Instant};

/// A job's future.
pub(crate) type BoxFuture = Pin<Box<dyn Future<Output = ()> + Send>>;

// Job states: crate::protocol's (IDLE, QUEUED, RUNNING, NOTIFIED, DONE).

pub(crate) struct Task {
    /// Polled only by the worker that moved the state to RUNNING, so the
    /// lock is never contended; it makes the task `Sync` for the waker.
    pub future: Mutex<Option<BoxFuture>>,
    pub state: TaskState,
    pub function: Arc<str>,
    /// Who pays for its time, if anyone.
    pub tenant: Option<Arc<crate::share::Tenant>>,
    /// The deadline the job was submitted with: misses are counted
    /// against it.
    pub deadline: Instant,
    /// The job's window: its relative deadline at submission (at least
    /// [`MIN_WINDOW`]). Each time it has run this long without ending, it
    /// is renewed (see [`Task::renew_if_spent`]).
    pub window: Duration,
    /// How far the deadline the policy orders by has moved past
    /// `deadline`, ns. Written only by the worker running the job.
    pub postponed_ns: AtomicU64,
    /// CPU time at the last renewal, ns.
    pub renewed_at_cpu_ns: AtomicU64,
    pub expected_seed: Option<Duration>,
    /// The longest one poll may hold its worker (the job's).
    pub longest_poll: Duration,
    /// Long by execution-time-aware sharding: runs only on the long
    /// workers. Decided at submission.
    pub long: bool,
    /// Time spent in `poll`, i.e. executing, not waiting.
    pub cpu_ns: AtomicU64,
    pub yields: AtomicU64,
    /// The worker that last ran it: woken jobs go back there.
    pub home: AtomicUsize,
    pub shared: Weak<dyn Requeue>,
}

/// The smallest window a job gets, even one submitted past its deadline:
/// one default quantum, so such a job is renewed as soon as it has run a
/// slice rather than outranking everything for as long as it runs.
pub(crate) const MIN_WINDOW: Duration = Duration::from_millis(5);

impl Task {
    pub fn cpu(&self) -> Duration {
        Duration::from_nanos(self.cpu_ns.load(Ordering::Relaxed))
    }

    /// The deadline the policy orders by: the submitted one, or a renewed
    /// one.
    pub fn current_deadline(&self) -> Instant {
        self.deadline + Duration::from_nanos(self.postponed_ns.load(Ordering::Relaxed))
    }

    /// Renews the job's deadline, as if it had just arrived (`now` plus its
    /// window), once it has run for a whole window since the last renewal
    /// without ending: the deadline rule of a constant bandwidth server. A
    /// job that has used its whole relative deadline in CPU can no longer
    /// meet it, and must not outrank every later arrival for as long as it
    /// runs: under EDF a runaway then shares the workers with fresh work
    /// instead of starving it, while a job that ends within its window is
    /// ordered exactly as plain EDF orders it. Returns whether it renewed.
    pub fn renew_if_spent(&self, now: Instant) -> bool {
        let cpu = self.cpu_ns.load(Ordering::Relaxed);
        let since = cpu.saturating_sub(self.renewed_at_cpu_ns.load(Ordering::Relaxed));
        if since < self.window.as_nanos() as u64 {
            return false;
        }
        let renewed = (now + self.window).saturating_duration_since(self.deadline);
        self.postponed_ns
            .store(renewed.as_nanos() as u64, Ordering::Relaxed);
        self.renewed_at_cpu_ns.store(cpu, Ordering::Relaxed);
        true
    }
}

/// Where a woken job goes back to be run: the scheduler's shared state.
/// Behind a trait so that jobs know nothing of workers (imports run from
/// the workers down to their jobs).
pub(crate) trait Requeue: Send + Sync {
    /// Queues `task`, whose wait ended, to run again.
    fn enqueue_woken(&self, task: Arc<Task>);
}

impl Wake for Task {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        if self.state.wake()
            && let Some(shared) = self.shared.upgrade()
        {
            shared.enqueue_woken(Arc::clone(self));
        }
    }
}
