//! The time limit for engines that cannot stop a sandbox from inside it.
//!
//! Wasmtime ends a sandbox at its own epoch ticks. WAMR's interpreter and
//! Wasmer's compiled code have no such tick: another thread must ask them to
//! stop (`wasm_runtime_terminate`, Wasmer's store interrupter). One watchdog
//! thread per runtime does that for every sandbox that outlives its
//! deadline.
//!
//! A sandbox registers a `stop` request for the duration of its run. Past
//! the deadline the watchdog calls it, and again every [`RETRY`] until the
//! run ends: some engines' requests are best effort (Wasmer's signal can
//! land while the thread is in the host, where it is only recorded). The
//! guard removes the entry under the same lock the watchdog calls `stop`
//! under, so `stop` is never called after the sandbox is torn down.
#![deny(missing_docs)]

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use luge_core::Cancellation;

/// How often a stop request is repeated while the sandbox keeps running:
/// rare enough to cost nothing, soon enough that a missed request delays
/// the time limit by a few milliseconds only.
pub const RETRY: Duration = Duration::from_millis(5);

/// The longest the watchdog sleeps with nothing due, so that the thread
/// notices a dropped runtime and ends.
const IDLE_WAKE: Duration = Duration::from_secs(1);
/// How often cancellations are looked for while sandboxes run: a cancelled
/// sandbox is stopped within this. It only wakes the watchdog while some
/// sandbox runs, never an idle executor.
pub const CANCEL_POLL: Duration = Duration::from_millis(20);

/// What the watchdog calls to stop one sandbox; called under the watchdog's
/// lock, so it must be short and must not register or unregister.
pub type StopRequest = Box<dyn Fn() + Send>;

struct Watched {
    stop: StopRequest,
    fired: Arc<AtomicBool>,
    cancel: Cancellation,
}

#[derive(Default)]
struct Deadlines {
    entries: BTreeMap<(Instant, u64), Watched>,
    next_id: u64,
}

/// Stops sandboxes that run past their deadline.
pub struct Watchdog {
    deadlines: Mutex<Deadlines>,
    changed: Condvar,
}

impl std::fmt::Debug for Watchdog {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Watchdog").finish_non_exhaustive()
    }
}

/// A registration; dropping it unregisters the sandbox.
pub struct WatchGuard<'a> {
    watchdog: &'a Watchdog,
    id: u64,
    fired: Arc<AtomicBool>,
}

impl WatchGuard<'_> {
    /// Whether the watchdog asked the sandbox to stop.
    pub fn fired(&self) -> bool {
        self.fired.load(Ordering::Acquire)
    }
}

impl Drop for WatchGuard<'_> {
    fn drop(&mut self) {
        // The entry's key moves each time its stop request is repeated; the
        // id is unique, so it is found by id.
        let mut deadlines = self.watchdog.lock();
        deadlines.entries.retain(|(_, id), _| *id != self.id);
    }
}

impl Watchdog {
    /// Starts the watchdog thread, named `name`; it ends soon after the last
    /// `Arc` to the watchdog is dropped.
    pub fn start(name: &str) -> std::io::Result<Arc<Self>> {
        let watchdog = Arc::new(Self {
            deadlines: Mutex::new(Deadlines::default()),
            changed: Condvar::new(),
        });
        let weak = Arc::downgrade(&watchdog);
        std::thread::Builder::new()
            .name(name.to_owned())
            .spawn(move || {
                while let Some(watchdog) = weak.upgrade() {
                    watchdog.tick();
                }
            })?;
        Ok(watchdog)
    }

    fn lock(&self) -> MutexGuard<'_, Deadlines> {
        // Every critical section leaves the map consistent.
        self.deadlines.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Stops what is due (re-arming each for [`RETRY`] later), then sleeps
    /// until the next deadline.
    fn tick(&self) {
        let mut deadlines = self.lock();
        let now = Instant::now();
        // A cancelled sandbox is due now, whatever its deadline.
        let cancelled: Vec<(Instant, u64)> = deadlines
            .entries
            .iter()
            .filter(|(key, watched)| key.0 > now && watched.cancel.is_cancelled())
            .map(|(key, _)| *key)
            .collect();
        for key in cancelled {
            if let Some(watched) = deadlines.entries.remove(&key) {
                deadlines.entries.insert((now, key.1), watched);
            }
        }
        while let Some(entry) = deadlines.entries.first_entry() {
            if entry.key().0 > now {
                break;
            }
            let ((_, id), watched) = entry.remove_entry();
            // Marked before the request: the sandbox may return as soon as
            // it is stopped, and must then read that it was stopped (read
            // after, a slow machine showed a timeout as a trap).
            watched.fired.store(true, Ordering::Release);
            (watched.stop)();
            deadlines.entries.insert((now + RETRY, id), watched);
        }
        let wait = deadlines
            .entries
            .keys()
            .next()
            .map(|(at, _)| at.saturating_duration_since(now).min(CANCEL_POLL))
            .unwrap_or(IDLE_WAKE);
        let _unused = self.changed.wait_timeout(deadlines, wait);
    }

    /// Watches one sandbox until the guard drops, calling `stop` from
    /// `deadline` on, or from when `cancel` is raised.
    pub fn watch(
        &self,
        deadline: Instant,
        stop: StopRequest,
        cancel: &Cancellation,
    ) -> WatchGuard<'_> {
        let fired = Arc::new(AtomicBool::new(false));
        let mut deadlines = self.lock();
        let id = deadlines.next_id;
        deadlines.next_id += 1;
        let earliest = deadlines
            .entries
            .keys()
            .next()
            .is_none_or(|(at, _)| deadline < *at);
        deadlines.entries.insert(
            (deadline, id),
            Watched {
                stop,
                fired: Arc::clone(&fired),
                cancel: cancel.clone(),
            },
        );
        drop(deadlines);
        if earliest {
            self.changed.notify_one();
        }
        WatchGuard {
            watchdog: self,
            id,
            fired,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicUsize;

    #[test]
    fn a_sandbox_past_its_deadline_is_asked_to_stop_until_it_ends() {
        let watchdog = Watchdog::start("test-watchdog").expect("thread");
        let calls = Arc::new(AtomicUsize::new(0));
        let counter = Arc::clone(&calls);
        let guard = watchdog.watch(
            Instant::now() + Duration::from_millis(10),
            Box::new(move || {
                counter.fetch_add(1, Ordering::SeqCst);
            }),
            &Cancellation::default(),
        );
        // Bounded wait for two requests: the first, and one repeat.
        let give_up = Instant::now() + Duration::from_secs(5);
        while calls.load(Ordering::SeqCst) < 2 && Instant::now() < give_up {
            std::thread::sleep(RETRY);
        }
        assert!(guard.fired());
        assert!(calls.load(Ordering::SeqCst) >= 2, "the request repeats");
        drop(guard);
        let after = calls.load(Ordering::SeqCst);
        std::thread::sleep(RETRY * 4);
        assert_eq!(calls.load(Ordering::SeqCst), after, "not after the guard");
    }

    /// A sandbox stopped by the watchdog reads `fired` as soon as the stop
    /// takes effect: here the stop request itself waits until the test has
    /// read the flag.
    #[test]
    fn fired_is_set_before_the_stop_request() {
        let watchdog = Watchdog::start("test-watchdog").expect("thread");
        let (stopping, stopped) = std::sync::mpsc::channel();
        let (ack, acked) = std::sync::mpsc::channel::<()>();
        let first = AtomicBool::new(true);
        let guard = watchdog.watch(
            Instant::now() + Duration::from_millis(5),
            Box::new(move || {
                if first.swap(false, Ordering::SeqCst) {
                    let _ = stopping.send(());
                    let _ = acked.recv_timeout(Duration::from_secs(5));
                }
            }),
            &Cancellation::default(),
        );
        stopped
            .recv_timeout(Duration::from_secs(5))
            .expect("asked to stop");
        let fired = guard.fired();
        let _ = ack.send(());
        assert!(fired, "the flag is set before the sandbox is stopped");
    }

    #[test]
    fn a_sandbox_that_ends_in_time_is_never_stopped() {
        let watchdog = Watchdog::start("test-watchdog").expect("thread");
        let guard = watchdog.watch(
            Instant::now() + Duration::from_secs(5),
            Box::new(|| panic!("stopped a sandbox that ended in time")),
            &Cancellation::default(),
        );
        std::thread::sleep(Duration::from_millis(20));
        assert!(!guard.fired());
    }

    #[test]
    fn a_cancelled_sandbox_is_stopped_before_its_deadline() {
        let watchdog = Watchdog::start("test-watchdog").expect("thread");
        let (stopping, stopped) = std::sync::mpsc::channel();
        let cancel = Cancellation::default();
        let guard = watchdog.watch(
            Instant::now() + Duration::from_secs(60),
            Box::new(move || {
                let _ = stopping.send(());
            }),
            &cancel,
        );
        assert!(stopped.recv_timeout(CANCEL_POLL * 5).is_err(), "not yet");
        cancel.cancel();
        stopped
            .recv_timeout(Duration::from_secs(5))
            .expect("stopped once cancelled");
        assert!(guard.fired());
    }
}
