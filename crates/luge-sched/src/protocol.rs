//! The two lock-free protocols the scheduler's correctness rests on, kept
//! apart from everything else so that `loom` can check them
//! exhaustively (`tests/loom.rs`, built with `--cfg luge_loom`, where the
//! atomics below are loom's):
//!
//! - [`SleepMarks`]: a worker announces its sleep, then looks for work
//!   once more before it parks; a submitter enqueues, then looks for a
//!   sleeper to wake. Each side orders its write before its read with a
//!   `SeqCst` fence, so at least one sees the other: no wake-up is lost.
//! - [`TaskState`]: a job's state machine between the worker polling it
//!   and wakers on other threads. Every wake is answered by exactly one
//!   enqueue: by the waker (the job was idle) or by the worker (it was
//!   woken while running).

#[cfg(luge_loom)]
use loom::sync::atomic::{AtomicBool, AtomicU8, AtomicUsize, Ordering, fence};
#[cfg(not(luge_loom))]
use std::sync::atomic::{AtomicBool, AtomicU8, AtomicUsize, Ordering, fence};

/// Which workers sleep, and how many.
#[derive(Debug)]
pub struct SleepMarks {
    sleeping: Vec<AtomicBool>,
    /// Workers whose mark is set: a submitter that finds none skips the
    /// search for one (O(1) when every worker is busy).
    sleepers: AtomicUsize,
}

impl SleepMarks {
    /// Marks for `workers` workers, all awake.
    pub fn new(workers: usize) -> Self {
        Self {
            sleeping: (0..workers).map(|_| AtomicBool::new(false)).collect(),
            sleepers: AtomicUsize::new(0),
        }
    }

    /// Marks `worker` asleep. The caller then looks for work once more
    /// before it parks: work enqueued before the fence below is seen by
    /// that look, and work enqueued after it finds the mark in
    /// [`SleepMarks::any_asleep`] (whose fence pairs with this one).
    pub fn announce(&self, worker: usize) {
        // A read-modify-write, not a store: both sides then meet in the
        // mark's modification order, and `tests/loom.rs` finds a lost
        // wake-up with a plain store.
        self.sleeping[worker].swap(true, Ordering::SeqCst);
        self.sleepers.fetch_add(1, Ordering::SeqCst);
        fence(Ordering::SeqCst);
    }

    /// Clears `worker`'s mark; whether it was set, and so whether this
    /// call is the one that ends its sleep (and must unpark it).
    pub fn clear(&self, worker: usize) -> bool {
        let was = self.sleeping[worker].swap(false, Ordering::SeqCst);
        if was {
            self.sleepers.fetch_sub(1, Ordering::SeqCst);
        }
        was
    }

    /// Whether any worker may sleep, for a submitter that has just
    /// enqueued work (see [`SleepMarks::announce`]).
    pub fn any_asleep(&self) -> bool {
        fence(Ordering::SeqCst);
        self.sleepers.load(Ordering::SeqCst) > 0
    }
}

/// Not queued, not running: waiting for a wake.
pub const IDLE: u8 = 0;
/// In a run queue.
pub const QUEUED: u8 = 1;
/// Being polled by a worker.
pub const RUNNING: u8 = 2;
/// Woken while being polled: to be queued again when the poll ends.
pub const NOTIFIED: u8 = 3;
/// Finished.
pub const DONE: u8 = 4;

/// A job's state. Polled only by the worker that moved it to
/// [`RUNNING`], so its future is never polled twice at once.
#[derive(Debug)]
pub struct TaskState(AtomicU8);

impl TaskState {
    /// A job just submitted (queued).
    pub fn queued() -> Self {
        Self(AtomicU8::new(QUEUED))
    }

    /// The state now.
    pub fn get(&self) -> u8 {
        self.0.load(Ordering::Acquire)
    }

    /// A worker takes the job to poll it.
    pub fn start(&self) {
        self.0.store(RUNNING, Ordering::Release);
    }

    /// The poll finished the job.
    pub fn finish(&self) {
        self.0.store(DONE, Ordering::Release);
    }

    /// The poll returned pending: `true` if the job parked (a later wake
    /// enqueues it), `false` if it was woken meanwhile and the worker must
    /// queue it again itself (it is marked queued).
    pub fn park(&self) -> bool {
        let parked = self
            .0
            .compare_exchange(RUNNING, IDLE, Ordering::AcqRel, Ordering::Acquire)
            .is_ok();
        if !parked {
            self.0.store(QUEUED, Ordering::Release);
        }
        parked
    }

    /// A wake: `true` if the caller must enqueue the job (it was idle);
    /// `false` if it is queued already, will be queued by its worker, or
    /// is done.
    pub fn wake(&self) -> bool {
        let mut state = self.0.load(Ordering::Acquire);
        loop {
            let next = match state {
                IDLE => QUEUED,
                RUNNING => NOTIFIED,
                // Already queued, already to be re-queued, or finished.
                _ => return false,
            };
            match self
                .0
                .compare_exchange(state, next, Ordering::AcqRel, Ordering::Acquire)
            {
                Ok(_) => return state == IDLE,
                Err(actual) => state = actual,
            }
        }
    }
}
