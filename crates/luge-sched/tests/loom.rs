//! Model checks of the scheduler's lock-free protocols
//! (`luge_sched::protocol`) with loom: every interleaving of the threads
//! below, and the weak-memory outcomes loom models, up to its bounds.
//!
//! Run with `LOOM_MAX_PREEMPTIONS=3 RUSTFLAGS="--cfg luge_loom"
//! CARGO_TARGET_DIR=target/loom cargo test -p luge-sched --test loom`;
//! `scripts/test.sh` does (about 3 s once built). The checks can fail:
//! with the sleep mark set by a plain `store` (as the scheduler did
//! before), loom finds an execution at three preemptions where the last
//! submitter's `clear` reads the mark unset and the worker parks for good
//! with a job waiting (the real worker's 5 s re-check would have hidden
//! it). Set by a `swap`, as now (an `xchg` on x86 either way), the models
//! pass at up to five preemptions (`two_submitters`: 18 s at four, 98 s
//! at five).

#![cfg(luge_loom)]
#![allow(clippy::unwrap_used)] // tests fail loudly by design

use loom::sync::Arc;
use loom::sync::atomic::{AtomicUsize, Ordering};
use loom::thread;
use luge_sched::protocol::{DONE, QUEUED, SleepMarks, TaskState};

/// A worker that finds no work announces its sleep, looks once more, and
/// parks; submitters enqueue and wake a sleeper. A lost wake-up leaves
/// the worker parked with work waiting: loom reports it as a deadlock.
/// (The real worker parks with a 5 s safety net, which would hide it.)
fn no_wake_up_is_lost(submitters: usize) {
    loom::model(move || {
        let marks = Arc::new(SleepMarks::new(1));
        // The run queue, as a count of waiting jobs.
        let queued = Arc::new(AtomicUsize::new(0));
        let worker = {
            let (marks, queued) = (Arc::clone(&marks), Arc::clone(&queued));
            thread::spawn(move || {
                let mut ran = 0;
                while ran < submitters {
                    // A scheduling point: back from a park, no longer asleep.
                    marks.clear(0);
                    let taken = queued
                        .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
                        .is_ok();
                    if taken {
                        ran += 1;
                        continue;
                    }
                    marks.announce(0);
                    if queued.load(Ordering::SeqCst) > 0 {
                        continue;
                    }
                    thread::park();
                }
            })
        };
        let unpark = worker.thread().clone();
        let handles: Vec<_> = (0..submitters)
            .map(|_| {
                let (marks, queued, unpark) =
                    (Arc::clone(&marks), Arc::clone(&queued), unpark.clone());
                thread::spawn(move || {
                    queued.fetch_add(1, Ordering::SeqCst);
                    if marks.any_asleep() && marks.clear(0) {
                        unpark.unpark();
                    }
                })
            })
            .collect();
        for handle in handles {
            handle.join().unwrap();
        }
        worker.join().unwrap();
        assert_eq!(queued.load(Ordering::SeqCst), 0);
    });
}

#[test]
fn one_submitter_never_loses_a_wake_up() {
    no_wake_up_is_lost(1);
}

#[test]
fn two_submitters_never_lose_a_wake_up() {
    no_wake_up_is_lost(2);
}

/// A job polled by its worker while other threads wake it (an I/O
/// completion, a quantum's end): however they interleave, it is queued
/// again exactly once if woken, by the waker (it had parked) or by the
/// worker (woken while running), and never while it is finished.
#[test]
fn every_wake_is_one_enqueue() {
    loom::model(|| {
        let state = Arc::new(TaskState::queued());
        let enqueues = Arc::new(AtomicUsize::new(0));
        state.start();
        let waker = {
            let (state, enqueues) = (Arc::clone(&state), Arc::clone(&enqueues));
            thread::spawn(move || {
                if state.wake() {
                    enqueues.fetch_add(1, Ordering::SeqCst);
                }
            })
        };
        // The worker's poll returns pending.
        if !state.park() {
            enqueues.fetch_add(1, Ordering::SeqCst);
        }
        waker.join().unwrap();
        assert_eq!(enqueues.load(Ordering::SeqCst), 1);
        assert_eq!(state.get(), QUEUED);
    });
}

/// Two wakes of one parked job enqueue it once; a finished job is never
/// enqueued.
#[test]
fn wakes_of_a_parked_job_enqueue_it_once_and_a_finished_one_never() {
    loom::model(|| {
        let state = Arc::new(TaskState::queued());
        state.start();
        assert!(state.park());
        let enqueues = Arc::new(AtomicUsize::new(0));
        let wakers: Vec<_> = (0..2)
            .map(|_| {
                let (state, enqueues) = (Arc::clone(&state), Arc::clone(&enqueues));
                thread::spawn(move || {
                    if state.wake() {
                        enqueues.fetch_add(1, Ordering::SeqCst);
                    }
                })
            })
            .collect();
        for waker in wakers {
            waker.join().unwrap();
        }
        assert_eq!(enqueues.load(Ordering::SeqCst), 1);
        state.start();
        state.finish();
        assert!(!state.wake());
        assert_eq!(state.get(), DONE);
    });
}
