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
//! Bounded: a thread keeps at most the number of teardowns it was enabled
//! with ([`MAX_DEFERRED`] at most); handed one more, it drops the oldest at
//! once. So a worker holds at most that many finished sandboxes' pool
//! slots beyond those running, and only until its next turn of its
//! connections (a fraction of a millisecond while jobs run; an idle worker
//! runs them before it parks). Whoever enables it must keep that many pool
//! slots out of admission, or a new sandbox could find the pool full (the
//! executor keeps them out of `--max-pending`'s default).

use std::any::Any;
use std::cell::RefCell;
use std::collections::VecDeque;

/// The most teardowns one thread keeps at once: a batch of short jobs
/// between two turns of a worker's connections is a few jobs long.
pub const MAX_DEFERRED: usize = 4;

/// One thread's deferred teardowns.
struct Queue {
    items: VecDeque<Box<dyn Any>>,
    /// At most this many (1 to [`MAX_DEFERRED`]).
    limit: usize,
}

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
            if queue.items.len() > queue.limit {
                queue.items.pop_front()
            } else {
                None
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
}

impl Drop for Deferred {
    fn drop(&mut self) {
        self.run();
        DEFERRED.with(|deferred| deferred.borrow_mut().take());
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
