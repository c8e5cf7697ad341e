//! Tearing a finished sandbox down after its response is on the wire.
//!
//! A sandbox's outcome is known before its store is gone: freeing the
//! store (resetting its linear memory and tables into the instance pool,
//! dropping its WASI context) takes several microseconds that its client
//! need not wait for. A worker that serves its own connections (the
//! executor's worker front end) marks its thread with [`Deferred::enable`];
//! an engine hands what it would drop to [`later`], and the worker drops it
//! with [`Deferred::run`] once it has written the responses of the jobs it
//! ran. On any other thread, [`later`] drops at once, as before.
//!
//! The same worker also makes a sandbox *ahead* of its request: an engine
//! that has just run a function asks, with [`prepare_when_idle`], for the
//! function's next sandbox to be made (its store created, its code
//! instantiated) when the worker has nothing else to do; the worker runs
//! that with [`Deferred::prepare`] as it goes idle, and the next request
//! for the same function on that thread takes it with [`take_prepared`],
//! skipping instantiation on its critical path. One such preparation is
//! pending, and one prepared sandbox held, per thread at most.
//!
//! Bounded: a thread keeps at most the number of pool slots it was enabled
//! with ([`MAX_DEFERRED`] at most), deferred teardowns and the prepared
//! sandbox together; handed one more teardown, it drops the oldest at once
//! (the prepared sandbox last). So a worker holds at most that many
//! sandboxes' pool slots beyond those running. Whoever enables it must keep
//! that many pool slots out of admission, or a new sandbox could find the
//! pool full (the executor keeps them out of `--max-pending`'s default).
//! Teardowns last until the worker's next turn of its connections (a
//! fraction of a millisecond while jobs run; an idle worker runs them
//! before it parks); a prepared sandbox until a request takes it or another
//! function's preparation replaces it.

use std::any::Any;
use std::cell::RefCell;
use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, Ordering};

/// The most teardowns one thread keeps at once. A batch of short jobs
/// between two turns of a worker's connections may be longer (up to the
/// front end's bound, 300 µs of jobs); its older sandboxes are then torn
/// down during the batch: the same CPU, spent before the batch's
/// responses are written (at the turn that ends it) rather than after.
pub const MAX_DEFERRED: usize = 4;

/// One thread's deferred teardowns and its sandbox made ahead.
struct Queue {
    items: VecDeque<Box<dyn Any>>,
    /// Pool slots held at most, `items` and `ready` together (1 to
    /// [`MAX_DEFERRED`]).
    limit: usize,
    /// The preparation asked for and not yet run, under its key.
    job: Option<(usize, Preparation)>,
    /// What the last preparation made, under its key, until taken.
    ready: Option<(usize, Box<dyn Any>)>,
}

/// Makes a sandbox ahead of its request; `None` when it could not.
type Preparation = Box<dyn FnOnce() -> Option<Box<dyn Any>>>;

impl Queue {
    /// Pool slots held beyond the running sandboxes.
    fn held(&self) -> usize {
        self.items.len() + usize::from(self.ready.is_some())
    }
}

/// Sandboxes made ahead, and those of them a request took (process-wide,
/// for metrics and tests).
static MADE_AHEAD: AtomicU64 = AtomicU64::new(0);
static TAKEN: AtomicU64 = AtomicU64::new(0);

thread_local! {
    static DEFERRED: RefCell<Option<Queue>> = const { RefCell::new(None) };
}

/// Drops `value` later on this thread if it defers teardowns, now
/// otherwise.
pub fn later<T: 'static>(value: T) {
    // What must go now: `value` itself, or the oldest deferred teardown
    // that it displaces. Dropped outside the borrow, so a drop that defers
    // again does not find the list borrowed.
    let now: Option<Box<dyn Any>> = DEFERRED.with(|deferred| match &mut *deferred.borrow_mut() {
        Some(queue) => {
            queue.items.push_back(Box::new(value));
            if queue.held() <= queue.limit {
                None
            } else if queue.items.len() > 1 {
                queue.items.pop_front()
            } else {
                // Only the new teardown besides the prepared sandbox: the
                // prepared one goes (a teardown cannot wait for a request).
                queue.ready.take().map(|(_, ready)| ready)
            }
        }
        None => Some(Box::new(value) as Box<dyn Any>),
    });
    drop(now);
}

/// Whether this thread defers what [`later`] is given (a caller may
/// prepare differently: copy a small output out of what it tears down).
pub fn defers() -> bool {
    DEFERRED.with(|deferred| deferred.borrow().is_some())
}

/// Asks this thread, if it defers teardowns, to make a sandbox with
/// `prepare` when it next goes idle, to be taken under `key` (an engine's
/// name for the function it is made for; unique while the sandbox lives).
/// Replaces a preparation not yet run; nothing is asked when a sandbox
/// under `key` is already held. On any other thread, `prepare` is dropped.
pub fn prepare_when_idle(key: usize, prepare: impl FnOnce() -> Option<Box<dyn Any>> + 'static) {
    // Dropped outside the borrow (a drop may defer again).
    let replaced = DEFERRED.with(|deferred| {
        let mut deferred = deferred.borrow_mut();
        let queue = deferred.as_mut()?;
        if queue.ready.as_ref().is_some_and(|(held, _)| *held == key) {
            return None;
        }
        queue.job.replace((key, Box::new(prepare)))
    });
    drop(replaced);
}

/// The sandbox made ahead on this thread under `key`, if one is held.
pub fn take_prepared(key: usize) -> Option<Box<dyn Any>> {
    let taken = DEFERRED.with(|deferred| {
        let mut deferred = deferred.borrow_mut();
        let queue = deferred.as_mut()?;
        match &queue.ready {
            Some((held, _)) if *held == key => queue.ready.take().map(|(_, ready)| ready),
            _ => None,
        }
    });
    if taken.is_some() {
        TAKEN.fetch_add(1, Ordering::Relaxed);
    }
    taken
}

/// Sandboxes made ahead so far in this process, and how many of them a
/// request took; the rest were replaced or dropped unused.
pub fn made_ahead() -> (u64, u64) {
    (
        MADE_AHEAD.load(Ordering::Relaxed),
        TAKEN.load(Ordering::Relaxed),
    )
}

/// A thread's deferred teardowns, for the worker that runs them.
#[derive(Debug)]
pub struct Deferred(());

impl Deferred {
    /// Makes this thread defer up to `limit` of what [`later`] is given
    /// (at most [`MAX_DEFERRED`]; none with 0), until [`Deferred::run`].
    /// What is still deferred is dropped with the returned value (when the
    /// worker ends).
    pub fn enable(limit: usize) -> Self {
        let limit = limit.min(MAX_DEFERRED);
        if limit > 0 {
            DEFERRED.with(|deferred| {
                *deferred.borrow_mut() = Some(Queue {
                    items: VecDeque::with_capacity(limit + 1),
                    limit,
                    job: None,
                    ready: None,
                });
            });
        }
        Self(())
    }

    /// Drops what this thread deferred; whether there was anything.
    pub fn run(&self) -> bool {
        let mut ran = false;
        while let Some(next) =
            DEFERRED.with(|deferred| deferred.borrow_mut().as_mut()?.items.pop_front())
        {
            drop(next);
            ran = true;
        }
        ran
    }

    /// Runs the preparation asked for with [`prepare_when_idle`], if one
    /// is pending and a pool slot is free for it; whether one ran. For a
    /// worker with nothing else to do: the preparation runs guest code (the
    /// function's start), bounded by the engine that asked.
    pub fn prepare(&self) -> bool {
        // Taken out first, with the prepared sandbox it replaces (whose
        // slot it needs): the preparation runs, and the old one is dropped,
        // outside the borrow.
        let Some((key, job, old)) = DEFERRED.with(|deferred| {
            let mut deferred = deferred.borrow_mut();
            let queue = deferred.as_mut()?;
            if queue.job.is_none() || queue.items.len() >= queue.limit {
                return None;
            }
            let (key, job) = queue.job.take()?;
            Some((key, job, queue.ready.take()))
        }) else {
            return false;
        };
        drop(old);
        let made = job();
        let unheld = DEFERRED.with(|deferred| {
            let mut deferred = deferred.borrow_mut();
            let made = made?;
            match deferred.as_mut() {
                Some(queue) => {
                    MADE_AHEAD.fetch_add(1, Ordering::Relaxed);
                    queue.ready.replace((key, made)).map(|(_, old)| old)
                }
                None => Some(made),
            }
        });
        drop(unheld);
        true
    }
}

impl Drop for Deferred {
    fn drop(&mut self) {
        self.run();
        let queue = DEFERRED.with(|deferred| deferred.borrow_mut().take());
        drop(queue);
    }
}

#[cfg(test)]
mod tests {
    use std::rc::Rc;

    use super::*;

    /// Counts its drops.
    struct Counted(Rc<std::cell::Cell<usize>>);

    impl Drop for Counted {
        fn drop(&mut self) {
            self.0.set(self.0.get() + 1);
        }
    }

    #[test]
    fn a_sandbox_is_made_ahead_once_idle_and_taken_under_its_key() {
        let dropped = Rc::new(std::cell::Cell::new(0));
        // A thread that does not defer makes nothing ahead.
        let counted = Counted(Rc::clone(&dropped));
        prepare_when_idle(1, move || Some(Box::new(counted) as Box<dyn Any>));
        assert_eq!(dropped.get(), 1, "the preparation is dropped unrun");
        let deferred = Deferred::enable(2);
        let made = Rc::new(std::cell::Cell::new(0));
        let ask = |key: usize| {
            let (made, counted) = (Rc::clone(&made), Rc::clone(&dropped));
            prepare_when_idle(key, move || {
                made.set(made.get() + 1);
                Some(Box::new(Counted(counted)) as Box<dyn Any>)
            });
        };
        ask(7);
        assert_eq!(made.get(), 0, "made only when the worker is idle");
        assert!(take_prepared(7).is_none());
        assert!(deferred.prepare());
        assert!(!deferred.prepare(), "one preparation per request");
        assert_eq!(made.get(), 1);
        // Another key does not take it; its own key does, once.
        assert!(take_prepared(8).is_none());
        let taken = take_prepared(7).unwrap();
        assert!(taken.downcast_ref::<Counted>().is_some());
        assert!(take_prepared(7).is_none());
        drop(taken);
        // Asked again while one is held under the key: nothing to make.
        ask(7);
        assert!(deferred.prepare());
        ask(7);
        assert!(!deferred.prepare());
        // Another function's preparation replaces it, dropped first.
        let before = dropped.get();
        ask(9);
        assert!(deferred.prepare());
        assert_eq!(dropped.get(), before + 1);
        // Teardowns and the prepared sandbox share the bound: past it
        // the oldest teardown goes, and a full queue makes nothing.
        later(Counted(Rc::clone(&dropped)));
        let before = dropped.get();
        later(Counted(Rc::clone(&dropped)));
        assert_eq!(dropped.get(), before + 1, "the oldest teardown went");
        assert!(take_prepared(9).is_some(), "the prepared sandbox stayed");
        later(Counted(Rc::clone(&dropped)));
        ask(10);
        assert!(!deferred.prepare(), "no slot while two teardowns wait");
        deferred.run();
        assert!(deferred.prepare(), "the pending preparation runs later");
        let before = dropped.get();
        drop(deferred);
        assert_eq!(
            dropped.get(),
            before + 1,
            "the held one goes with the worker"
        );
        // With one slot, a teardown displaces the prepared sandbox.
        let one = Deferred::enable(1);
        ask(11);
        assert!(one.prepare());
        let before = dropped.get();
        later(Counted(Rc::clone(&dropped)));
        assert_eq!(dropped.get(), before + 1);
        assert!(take_prepared(11).is_none());
        drop(one);
    }

    #[test]
    fn a_thread_that_does_not_defer_drops_at_once() {
        let dropped = Rc::new(std::cell::Cell::new(0));
        later(Counted(Rc::clone(&dropped)));
        assert_eq!(dropped.get(), 1);
    }

    #[test]
    fn a_deferring_thread_drops_on_run_and_keeps_at_most_the_bound() {
        let dropped = Rc::new(std::cell::Cell::new(0));
        let deferred = Deferred::enable(MAX_DEFERRED + 10);
        for _ in 0..MAX_DEFERRED {
            later(Counted(Rc::clone(&dropped)));
        }
        assert_eq!(dropped.get(), 0);
        // One more: the oldest goes now.
        later(Counted(Rc::clone(&dropped)));
        assert_eq!(dropped.get(), 1);
        assert!(deferred.run());
        assert_eq!(dropped.get(), MAX_DEFERRED + 1);
        assert!(!deferred.run());
        // What is left when the worker ends goes with it, and the thread
        // drops at once again.
        later(Counted(Rc::clone(&dropped)));
        drop(deferred);
        assert_eq!(dropped.get(), MAX_DEFERRED + 2);
        later(Counted(Rc::clone(&dropped)));
        assert_eq!(dropped.get(), MAX_DEFERRED + 3);
    }

    #[test]
    fn a_thread_keeps_no_more_than_it_was_enabled_with() {
        let dropped = Rc::new(std::cell::Cell::new(0));
        let none = Deferred::enable(0);
        assert!(!defers());
        later(Counted(Rc::clone(&dropped)));
        assert_eq!(dropped.get(), 1);
        drop(none);
        let one = Deferred::enable(1);
        assert!(defers());
        later(Counted(Rc::clone(&dropped)));
        assert_eq!(dropped.get(), 1);
        later(Counted(Rc::clone(&dropped)));
        assert_eq!(dropped.get(), 2);
        drop(one);
        assert_eq!(dropped.get(), 3);
    }

    #[test]
    fn a_teardown_that_defers_again_does_not_find_the_list_borrowed() {
        struct Again(Rc<std::cell::Cell<usize>>, usize);
        impl Drop for Again {
            fn drop(&mut self) {
                self.0.set(self.0.get() + 1);
                if self.1 > 0 {
                    later(Again(Rc::clone(&self.0), self.1 - 1));
                }
            }
        }
        let dropped = Rc::new(std::cell::Cell::new(0));
        let deferred = Deferred::enable(MAX_DEFERRED);
        later(Again(Rc::clone(&dropped), 3));
        deferred.run();
        assert_eq!(dropped.get(), 4);
    }
}
