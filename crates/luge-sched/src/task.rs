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
use std::sync::atomic::{AtomicU8, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::task::Wake;
use std::time::{Duration, Instant};

use crate::worker::Shared;

/// A job's future.
pub(crate) type BoxFuture = Pin<Box<dyn Future<Output = ()> + Send>>;

pub(crate) const IDLE: u8 = 0;
pub(crate) const QUEUED: u8 = 1;
pub(crate) const RUNNING: u8 = 2;
pub(crate) const NOTIFIED: u8 = 3;
pub(crate) const DONE: u8 = 4;

pub(crate) struct Task {
    /// Polled only by the worker that moved the state to RUNNING, so the
    /// lock is never contended; it makes the task `Sync` for the waker.
    pub future: Mutex<Option<BoxFuture>>,
    pub state: AtomicU8,
    pub function: Arc<str>,
    pub deadline: Instant,
    pub expected_seed: Option<Duration>,
    /// Time spent in `poll`, i.e. executing, not waiting.
    pub cpu_ns: AtomicU64,
    pub yields: AtomicU64,
    /// The worker that last ran it: woken jobs go back there.
    pub home: AtomicUsize,
    pub shared: Weak<Shared>,
}

impl Task {
    pub fn cpu(&self) -> Duration {
        Duration::from_nanos(self.cpu_ns.load(Ordering::Relaxed))
    }
}

impl Wake for Task {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        let mut state = self.state.load(Ordering::Acquire);
        loop {
            let next = match state {
                IDLE => QUEUED,
                RUNNING => NOTIFIED,
                // Already queued, already to be re-queued, or finished.
                _ => return,
            };
            match self
                .state
                .compare_exchange(state, next, Ordering::AcqRel, Ordering::Acquire)
            {
                Ok(_) => break,
                Err(actual) => state = actual,
            }
        }
        if state == IDLE
            && let Some(shared) = self.shared.upgrade()
        {
            shared.enqueue_woken(Arc::clone(self));
        }
    }
}
