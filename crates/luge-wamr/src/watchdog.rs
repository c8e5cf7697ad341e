//! The time limit for an interpreter that cannot be interrupted from
//! inside: one watchdog thread per runtime terminates instances that run
//! past their deadline (`wasm_runtime_terminate`, which WAMR's interpreter
//! checks at branches).
//!
//! Instances register for the duration of their run; the guard removes the
//! entry under the same lock the watchdog terminates under, so an instance
//! is never terminated after it has been torn down.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::Instant;

use wamrx_sys as sys;

struct Watched {
    instance: sys::wasm_module_inst_t,
    fired: Arc<AtomicBool>,
}

// SAFETY: the pointer is only used to call `wasm_runtime_terminate`, which
// WAMR documents as callable from another thread, and only while the entry
// exists, i.e. while the instance is alive (see the module docs).
unsafe impl Send for Watched {}

#[derive(Default)]
struct Deadlines {
    entries: BTreeMap<(Instant, u64), Watched>,
    next_id: u64,
}

/// Terminates instances past their deadline.
pub struct Watchdog {
    deadlines: Mutex<Deadlines>,
    changed: Condvar,
}

impl std::fmt::Debug for Watchdog {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Watchdog").finish_non_exhaustive()
    }
}

/// A registration; dropping it unregisters the instance.
pub struct WatchGuard<'a> {
    watchdog: &'a Watchdog,
    key: (Instant, u64),
    fired: Arc<AtomicBool>,
}

impl WatchGuard<'_> {
    /// Whether the watchdog terminated the instance.
    pub fn fired(&self) -> bool {
        self.fired.load(Ordering::Acquire)
    }
}

impl Drop for WatchGuard<'_> {
    fn drop(&mut self) {
        self.watchdog.lock().entries.remove(&self.key);
    }
}

impl Watchdog {
    /// Starts the watchdog thread; it lives as long as the runtime.
    pub fn start() -> std::io::Result<Arc<Self>> {
        let watchdog = Arc::new(Self {
            deadlines: Mutex::new(Deadlines::default()),
            changed: Condvar::new(),
        });
        let weak = Arc::downgrade(&watchdog);
        std::thread::Builder::new()
            .name("luge-wamr-watchdog".into())
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

    /// Terminates what is due, then sleeps until the next deadline (at most
    /// a second, so a dropped runtime lets the thread end).
    fn tick(&self) {
        let mut deadlines = self.lock();
        let now = Instant::now();
        while let Some(entry) = deadlines.entries.first_entry() {
            if entry.key().0 > now {
                break;
            }
            let watched = entry.remove();
            // SAFETY: the entry existed until now under this lock, so the
            // instance is alive (its guard has not been dropped), and
            // `wasm_runtime_terminate` may be called from another thread.
            unsafe { sys::wasm_runtime_terminate(watched.instance) };
            watched.fired.store(true, Ordering::Release);
        }
        let wait = deadlines
            .entries
            .keys()
            .next()
            .map(|(at, _)| at.saturating_duration_since(now))
            .unwrap_or(std::time::Duration::from_secs(1))
            .min(std::time::Duration::from_secs(1));
        let _unused = self.changed.wait_timeout(deadlines, wait);
    }

    /// Watches `instance` until the guard drops, terminating it at
    /// `deadline`.
    pub fn watch(&self, instance: sys::wasm_module_inst_t, deadline: Instant) -> WatchGuard<'_> {
        let fired = Arc::new(AtomicBool::new(false));
        let mut deadlines = self.lock();
        let key = (deadline, deadlines.next_id);
        deadlines.next_id += 1;
        let earliest = deadlines.entries.keys().next().is_none_or(|k| key < *k);
        deadlines.entries.insert(
            key,
            Watched {
                instance,
                fired: Arc::clone(&fired),
            },
        );
        drop(deadlines);
        if earliest {
            self.changed.notify_one();
        }
        WatchGuard {
            watchdog: self,
            key,
            fired,
        }
    }
}
