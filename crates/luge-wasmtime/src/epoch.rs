//! One epoch ticker per engine.
//!
//! Wasmtime's epoch interruption checks a counter in compiled code; a thread
//! has to advance it. Doing that once per request (a timer per invocation) is
//! the pitfall of Wasmtime #11814; here one thread ticks for the whole engine,
//! and only while at least one sandbox is running, so an idle executor costs
//! no wake-ups.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::thread::{self, JoinHandle, Thread};
use std::time::Duration;

use wasmtime::Engine;

/// Advances an engine's epoch every tick while sandboxes run.
pub struct EpochTicker {
    tick: Duration,
    running: AtomicUsize,
    stop: AtomicBool,
    thread: Thread,
    handle: std::sync::Mutex<Option<JoinHandle<()>>>,
}

impl std::fmt::Debug for EpochTicker {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EpochTicker")
            .field("tick", &self.tick)
            .finish_non_exhaustive()
    }
}

impl EpochTicker {
    /// Starts the ticker thread for `engine`.
    pub fn start(engine: Engine, tick: Duration) -> std::io::Result<Arc<Self>> {
        let (tx, rx) = std::sync::mpsc::channel::<Arc<Self>>();
        let handle = thread::Builder::new()
            .name("luge-epoch".into())
            .spawn(move || {
                let Ok(ticker) = rx.recv() else { return };
                ticker.run(&engine);
            })?;
        let ticker = Arc::new(Self {
            tick,
            running: AtomicUsize::new(0),
            stop: AtomicBool::new(false),
            thread: handle.thread().clone(),
            handle: std::sync::Mutex::new(Some(handle)),
        });
        // The thread holds the ticker until `shutdown`; a send error means
        // the thread already died, which only leaves time limits unenforced.
        let _ = tx.send(Arc::clone(&ticker));
        Ok(ticker)
    }

    fn run(&self, engine: &Engine) {
        while !self.stop.load(Ordering::Acquire) {
            if self.running.load(Ordering::Acquire) == 0 {
                // `enter` unparks after incrementing; an unpark that races
                // ahead of this park leaves a token, so no wake-up is lost.
                thread::park();
                continue;
            }
            thread::sleep(self.tick);
            engine.increment_epoch();
        }
    }

    /// The tick length.
    pub fn tick(&self) -> Duration {
        self.tick
    }

    /// Epoch ticks that cover `duration` (at least one, as Wasmtime requires
    /// a non-zero deadline to make progress).
    pub fn ticks_for(&self, duration: Duration) -> u64 {
        let tick = self.tick.as_nanos().max(1);
        (duration.as_nanos().div_ceil(tick) as u64).max(1)
    }

    /// Marks a sandbox as running until the guard drops.
    pub fn enter(&self) -> RunningGuard<'_> {
        if self.running.fetch_add(1, Ordering::AcqRel) == 0 {
            self.thread.unpark();
        }
        RunningGuard { ticker: self }
    }

    /// Stops the thread; used when the runtime is dropped.
    pub fn shutdown(&self) {
        self.stop.store(true, Ordering::Release);
        self.thread.unpark();
        let handle = self.handle.lock().ok().and_then(|mut h| h.take());
        if let Some(handle) = handle {
            let _ = handle.join();
        }
    }
}

/// Keeps the ticker ticking while a sandbox runs.
#[derive(Debug)]
pub struct RunningGuard<'a> {
    ticker: &'a EpochTicker,
}

impl Drop for RunningGuard<'_> {
    fn drop(&mut self) {
        self.ticker.running.fetch_sub(1, Ordering::AcqRel);
    }
}
