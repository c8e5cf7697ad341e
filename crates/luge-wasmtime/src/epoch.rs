//! One epoch ticker per engine.
//!
//! Wasmtime's epoch interruption checks a counter in compiled code; a thread
//! has to advance it. Doing that once per request (a timer per invocation) is
//! the pitfall of Wasmtime #11814; here one thread ticks for the whole engine,
//! and only while at least one sandbox is running, so an idle executor costs
//! no wake-ups.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Weak};
use std::thread::{self, Thread};
use std::time::{Duration, Instant};

use wasmtime::{Engine, EngineWeak};

/// The longest the idle ticker sleeps before it looks whether its runtime
/// is gone: it holds only weak references, so that dropping the runtime
/// frees the engine, and the thread then ends within this.
const IDLE_WAKE: Duration = Duration::from_secs(1);

/// How long the ticker keeps ticking after the last sandbox ended before it
/// parks. Parking between every two requests would make the next request's
/// `enter` wake it (a futex call and a thread switch on the request path, at
/// every request of a client that sends one at a time); a tenth of a
/// second of ticks (a hundred at 1 ms) after the last one keeps an idle
/// executor idle.
const LINGER: Duration = Duration::from_millis(100);

/// Advances an engine's epoch every tick while sandboxes run. The thread
/// holds the engine and this ticker weakly: when the runtime and its
/// modules are dropped, the engine is freed and the thread ends.
pub struct EpochTicker {
    tick: Duration,
    running: AtomicUsize,
    thread: Thread,
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
    pub fn start(engine: &Engine, tick: Duration) -> std::io::Result<Arc<Self>> {
        let (tx, rx) = std::sync::mpsc::channel::<Weak<Self>>();
        let engine = engine.weak();
        let handle = thread::Builder::new()
            .name("luge-epoch".into())
            .spawn(move || {
                let Ok(ticker) = rx.recv() else { return };
                Self::run(&ticker, &engine);
            })?;
        let ticker = Arc::new(Self {
            tick,
            running: AtomicUsize::new(0),
            thread: handle.thread().clone(),
        });
        // A send error means the thread already died, which only leaves time
        // limits unenforced.
        let _ = tx.send(Arc::downgrade(&ticker));
        Ok(ticker)
    }

    fn run(ticker: &Weak<Self>, engine: &EngineWeak) {
        // When the last sandbox was seen to end, while none runs.
        let mut idle_since: Option<Instant> = None;
        loop {
            let (running, tick) = match ticker.upgrade() {
                Some(t) => (t.running.load(Ordering::Acquire), t.tick),
                None => return,
            };
            if running == 0 {
                let since = *idle_since.get_or_insert_with(Instant::now);
                if since.elapsed() >= LINGER {
                    // `enter` unparks after incrementing; an unpark that
                    // races ahead of this park leaves a token, so no
                    // wake-up is lost.
                    let parked = Instant::now();
                    thread::park_timeout(IDLE_WAKE);
                    if parked.elapsed() < IDLE_WAKE {
                        // Unparked: a sandbox started (it may have ended
                        // already). Linger again from now.
                        idle_since = Some(Instant::now());
                    }
                    continue;
                }
            } else {
                idle_since = None;
            }
            thread::sleep(tick);
            match engine.upgrade() {
                Some(engine) => engine.increment_epoch(),
                None => return,
            }
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
}

impl Drop for EpochTicker {
    fn drop(&mut self) {
        // Ends the thread now rather than at its next idle wake-up.
        self.thread.unpark();
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
