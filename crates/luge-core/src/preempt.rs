//! Early preemption: a scheduler asks the sandbox running on one of its
//! worker threads to yield now, before its quantum ends, because a more
//! urgent job arrived, or the worker's front end has requests waiting that
//! it reads only between sandboxes.
//!
//! Without it, a job whose deadline is shorter than the quantum can miss it
//! while a long job finishes its slice. The signal is a per-worker flag the
//! scheduler raises and an engine checks at its preemption points (for
//! Wasmtime, every epoch tick); an engine that cannot yield ignores it. It
//! lives here because the scheduler and the engines must not know each
//! other.

use std::cell::OnceCell;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

thread_local! {
    static SIGNAL: OnceCell<PreemptSignal> = const { OnceCell::new() };
    static ARRIVALS: OnceCell<Box<dyn Fn() -> bool>> = const { OnceCell::new() };
}

/// One worker's flag.
#[derive(Debug, Clone, Default)]
pub struct PreemptSignal(Arc<AtomicBool>);

impl PreemptSignal {
    /// A lowered flag.
    pub fn new() -> Self {
        Self::default()
    }

    /// Asks the sandbox running on the flag's thread to yield.
    pub fn raise(&self) {
        self.0.store(true, Ordering::Release);
    }

    /// Withdraws a request (the worker is about to pick its next job anyway).
    pub fn clear(&self) {
        self.0.store(false, Ordering::Release);
    }

    /// Makes this the flag that [`requested`] reads on the calling thread.
    /// A thread has one flag for its life; later calls are ignored.
    pub fn install_on_this_thread(&self) {
        SIGNAL.with(|slot| {
            let _ = slot.set(self.clone());
        });
    }
}

/// Whether the scheduler asked the sandbox on this thread to yield; reading
/// consumes the request. Always `false` on threads without a flag.
pub fn requested() -> bool {
    SIGNAL.with(|slot| {
        slot.get()
            .is_some_and(|signal| signal.0.swap(false, Ordering::AcqRel))
    })
}

/// Makes `arrived` the calling thread's test of whether input came for it
/// that it can read only once the sandbox running on it yields (a worker
/// that serves its own connections between sandboxes): what [`arrived`]
/// answers there. It must be cheap, must not block, and answers each
/// arrival once. A thread has one test for its life; later calls are
/// ignored.
pub fn watch_arrivals_on_this_thread(arrived: impl Fn() -> bool + 'static) {
    ARRIVALS.with(|slot| {
        let _ = slot.set(Box::new(arrived));
    });
}

/// Whether input came, since the last call, that this thread reads only
/// between sandboxes: a sandbox that has run a while should yield so that
/// it is read (the scheduler cannot ask for a job it has not been given).
/// Always `false` on threads without a test of arrivals.
pub fn arrived() -> bool {
    ARRIVALS.with(|slot| slot.get().is_some_and(|arrived| arrived()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_request_is_seen_once_and_only_on_its_thread() {
        let signal = PreemptSignal::new();
        signal.install_on_this_thread();
        assert!(!requested());
        signal.raise();
        std::thread::spawn(|| assert!(!requested())).join().unwrap();
        assert!(requested());
        assert!(!requested());
        signal.raise();
        signal.clear();
        assert!(!requested());
    }

    #[test]
    fn an_arrival_is_seen_once_and_only_on_its_thread() {
        use std::cell::Cell;
        use std::rc::Rc;
        let waiting = Rc::new(Cell::new(0));
        let seen = Rc::clone(&waiting);
        watch_arrivals_on_this_thread(move || seen.replace(0) > 0);
        assert!(!arrived());
        waiting.set(3);
        assert!(!requested(), "an arrival is not the scheduler's request");
        std::thread::spawn(|| assert!(!arrived())).join().unwrap();
        assert!(arrived());
        assert!(!arrived());
        // One test per thread: a second is ignored.
        watch_arrivals_on_this_thread(|| true);
        assert!(!arrived());
    }
}
