//! A future that several tasks poll, whichever runs: a reused instance's
//! driver ([`crate::reuse`]), turned by the jobs of the requests it
//! serves, on whichever workers run them.
//!
//! Why not `futures_util`'s `Shared`: a wake-up that comes while one task
//! polls it goes to the tasks registered at that moment, the poller
//! among them; a task that registers during the poll (it found the future
//! being polled) is not woken, and if the poller then ends without
//! polling again, the future is never polled again although it asked to
//! be (rust-lang/futures-rs#2706). With two workers that lost requests
//! in a reused instance until their time limit. Here a wake-up during a
//! poll is remembered, and the poller wakes every registered task once
//! its poll is over.

use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::pin::Pin;
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::{Context, Poll, Wake, Waker};

/// The future polled by every clone of a [`Driver`].
type Inner = Pin<Box<dyn Future<Output = ()> + Send + 'static>>;

/// A future of `()` that every clone may poll; each poll registers its
/// task, and every registered task is woken when the future makes
/// progress, or has ended. The future is dropped once it has ended, or
/// with the last clone.
#[derive(Clone)]
pub(crate) struct Driver(Arc<Shared>);

/// What the clones share; it is also the waker the future is polled with.
struct Shared {
    state: Mutex<State>,
}

struct State {
    /// The future, between polls (`None` while a task polls it, and once
    /// it has ended).
    future: Option<Inner>,
    /// A task is polling the future now.
    polling: bool,
    /// The future was woken during the current poll.
    woken: bool,
    /// The future has ended (or panicked).
    ended: bool,
    /// The tasks to wake: those that polled since the last wake-up. At
    /// most one per task (`Waker::will_wake`).
    wakers: Vec<Waker>,
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, State> {
        // Nothing under this lock can leave it half-updated (the future
        // is polled outside it): the data stays usable after a panic.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }
}

impl Wake for Shared {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        let wakers = {
            let mut state = self.lock();
            // The poller wakes whoever registers meanwhile (see `poll`).
            state.woken |= state.polling;
            std::mem::take(&mut state.wakers)
        };
        // Outside the lock: a waker may poll at once on this thread.
        wakers.into_iter().for_each(Waker::wake);
    }
}

impl Driver {
    /// A driver polling `future`.
    pub(crate) fn new(future: impl Future<Output = ()> + Send + 'static) -> Self {
        Self(Arc::new(Shared {
            state: Mutex::new(State {
                future: Some(Box::pin(future)),
                polling: false,
                woken: false,
                ended: false,
                wakers: Vec::new(),
            }),
        }))
    }

    /// Polls the future for `cx`'s task, unless another task is polling
    /// it now (that task then wakes this one if the future asks to be
    /// polled again meanwhile). Ready once the future has ended.
    pub(crate) fn poll(&self, cx: &mut Context<'_>) -> Poll<()> {
        let mut future = {
            let mut state = self.0.lock();
            if state.ended {
                return Poll::Ready(());
            }
            if !state.wakers.iter().any(|w| w.will_wake(cx.waker())) {
                state.wakers.push(cx.waker().clone());
            }
            if state.polling {
                return Poll::Pending;
            }
            let Some(future) = state.future.take() else {
                // Not polled and not ended: only a panic in a poll leaves
                // this, and it marks the driver ended. Unreachable.
                return Poll::Ready(());
            };
            state.polling = true;
            state.woken = false;
            future
        };
        let waker = Waker::from(Arc::clone(&self.0));
        let polled = std::panic::catch_unwind(AssertUnwindSafe(|| {
            future.as_mut().poll(&mut Context::from_waker(&waker))
        }));
        let (wakers, ended) = {
            let mut state = self.0.lock();
            state.polling = false;
            let ended = !matches!(polled, Ok(Poll::Pending));
            if ended {
                state.ended = true;
            } else {
                state.future = Some(future);
            }
            // A wake-up during the poll may have reached only the tasks
            // registered before it: wake every task registered now, so
            // that one of them polls again even if this one never does.
            let wake = ended || std::mem::take(&mut state.woken);
            let wakers = if wake {
                std::mem::take(&mut state.wakers)
            } else {
                Vec::new()
            };
            (wakers, ended)
        };
        wakers.into_iter().for_each(Waker::wake);
        match polled {
            Err(panic) => std::panic::resume_unwind(panic),
            Ok(_) if ended => Poll::Ready(()),
            Ok(_) => Poll::Pending,
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};

    use super::*;

    /// A waker that counts its wake-ups.
    #[derive(Default)]
    struct Count(AtomicUsize);

    impl Wake for Count {
        fn wake(self: Arc<Self>) {
            self.0.fetch_add(1, Ordering::SeqCst);
        }
    }

    /// rust-lang/futures-rs#2706, step by step: task A polls; the future
    /// asks to be polled again, then task B polls while A's poll is on
    /// (B only registers); A's poll ends and A leaves. B must be woken, or
    /// nobody polls the future again (with futures-util's `Shared`, B is
    /// not: this test fails with it).
    #[test]
    fn a_task_that_registers_during_a_poll_is_woken_after_it() {
        let slot: Arc<Mutex<Option<Driver>>> = Arc::default();
        let b = Arc::new(Count::default());
        let mut polls = 0;
        let future = {
            let (slot, b) = (Arc::clone(&slot), Arc::clone(&b));
            std::future::poll_fn(move |cx| {
                polls += 1;
                if polls > 1 {
                    return Poll::Ready(());
                }
                cx.waker().wake_by_ref();
                let other = slot.lock().expect("slot").clone().expect("set");
                let waker = Waker::from(Arc::clone(&b));
                assert!(other.poll(&mut Context::from_waker(&waker)).is_pending());
                Poll::Pending
            })
        };
        let driver = Driver::new(future);
        *slot.lock().expect("slot") = Some(driver.clone());
        let a = Waker::from(Arc::new(Count::default()));
        assert!(driver.poll(&mut Context::from_waker(&a)).is_pending());
        assert_eq!(b.0.load(Ordering::SeqCst), 1, "B was not woken");
        // B polls again: the future ends.
        let waker = Waker::from(Arc::clone(&b));
        assert!(driver.poll(&mut Context::from_waker(&waker)).is_ready());
        slot.lock().expect("slot").take();
    }

    /// The future ends once, for every clone; a panic in it ends the
    /// driver for the other clones too.
    #[test]
    fn every_clone_sees_the_end_and_a_panic_ends_it() {
        let mut yielded = false;
        let driver = Driver::new(std::future::poll_fn(move |cx| {
            if std::mem::replace(&mut yielded, true) {
                Poll::Ready(())
            } else {
                cx.waker().wake_by_ref();
                Poll::Pending
            }
        }));
        let waker = Waker::noop();
        let mut cx = Context::from_waker(waker);
        assert!(driver.poll(&mut cx).is_pending());
        assert!(driver.clone().poll(&mut cx).is_ready());
        assert!(driver.poll(&mut cx).is_ready());

        let driver = Driver::new(async { panic!("the guest's driver panicked") });
        let other = driver.clone();
        let caught = std::panic::catch_unwind(AssertUnwindSafe(|| driver.poll(&mut cx)));
        assert!(caught.is_err());
        assert!(other.poll(&mut cx).is_ready());
    }
}
