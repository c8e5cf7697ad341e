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
#[derive(derive_more::Debug)]
pub struct EpochTicker {
    tick: Duration,
    #[debug(skip)]
    running: AtomicUsize,
    #[debug(skip)]
    thread: Thread,
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
                wake_promptly();
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
        // When the next tick is due: ticks keep their cadence however late
        // one woke (a sleep of `tick` after each would add every wake-up's
        // delay to all the ticks after it).
        let mut due = Instant::now();
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
            // A tick missed by a whole tick or more (a park, a stall) is not
            // made up: the cadence restarts from now.
            let now = Instant::now();
            due = if due + tick > now {
                due + tick
            } else {
                now + tick
            };
            thread::sleep(due - now);
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

/// The shortest slice Linux's EEVDF scheduler grants a task (its
/// `sched_runtime` floor since 6.12).
const SLICE: Duration = Duration::from_micros(100);

/// Has the calling thread (the ticker) run as soon as it wakes, even on a
/// core that a sandbox keeps busy: a tick that comes late is a quantum, a
/// timeout or an arrival's yield that comes late.
///
/// - **A short slice.** A worker that shares its core with the ticker
///   (every core a worker, or a server confined with `taskset`) is a task
///   that never sleeps; under EEVDF (Linux 6.6 and later) the ticker's
///   wake-up then waits, now and then, for the worker's slice to end (see
///   docs/BENCHMARKS-ARCHIVE.md, "A tick on time"). A slice asked for with
///   `sched_setattr` (Linux 6.12; no privilege is needed, and older
///   kernels ignore it) gives the ticker an earlier deadline, so its
///   wake-up preempts the worker. It runs a few microseconds per tick, so
///   it takes nothing from the worker.
/// - **No timer slack.** Linux lets a normal thread's sleep end up to 50 µs
///   late, to batch wake-ups; the ticker asks for none.
///
/// Either failing leaves the ticker as it was, its ticks merely later.
fn wake_promptly() {
    if let Err(e) = rustix::thread::set_current_timer_slack(std::num::NonZeroU64::new(1)) {
        tracing::debug!(error = %e, "the epoch ticker keeps its timer slack");
    }
    if let Err(e) = set_slice(SLICE) {
        tracing::debug!(error = %e, "the epoch ticker keeps the default slice");
    }
}

/// Linux's `struct sched_attr` (include/uapi/linux/sched/types.h) in its
/// first version, 48 bytes, as `sched_setattr(2)` reads it (`size` says
/// which version).
#[repr(C)]
#[derive(Default)]
struct SchedAttr {
    size: u32,
    sched_policy: u32,
    sched_flags: u64,
    sched_nice: i32,
    sched_priority: u32,
    sched_runtime: u64,
    sched_deadline: u64,
    sched_period: u64,
}

/// Asks for `slice` as the calling thread's EEVDF slice, keeping its
/// policy and nice value. Only a normal or batch thread is changed: one the
/// operator made idle stays as it was, and a real-time one needs no slice.
fn set_slice(slice: Duration) -> std::io::Result<()> {
    // SAFETY: `sched_getscheduler(0)` reads the calling thread's policy;
    // it takes no pointer.
    let policy = unsafe { libc::sched_getscheduler(0) };
    if policy != libc::SCHED_OTHER && policy != libc::SCHED_BATCH {
        return Ok(());
    }
    let attr = SchedAttr {
        size: std::mem::size_of::<SchedAttr>() as u32,
        sched_policy: u32::try_from(policy).unwrap_or_default(),
        sched_nice: rustix::process::getpriority_process(None).unwrap_or(0),
        sched_runtime: u64::try_from(slice.as_nanos()).unwrap_or(u64::MAX),
        ..SchedAttr::default()
    };
    // SAFETY: `sched_setattr(0: the calling thread, attr, flags 0)` only
    // reads `attr.size` bytes from `attr`, a live, initialised `#[repr(C)]`
    // value laid out as the kernel's first `struct sched_attr`, whose size
    // `size` holds.
    let r = unsafe { libc::syscall(libc::SYS_sched_setattr, 0, &raw const attr, 0) };
    if r == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The `luge-epoch` thread's id under /proc (a test's own process may
    /// run other engines' tickers beside this one: any will do, all are
    /// started alike).
    fn ticker_thread() -> Option<String> {
        std::fs::read_dir("/proc/self/task")
            .ok()?
            .flatten()
            .map(|task| task.file_name().to_string_lossy().into_owned())
            .find(|tid| {
                std::fs::read_to_string(format!("/proc/self/task/{tid}/comm"))
                    .is_ok_and(|name| name.trim() == "luge-epoch")
            })
    }

    #[test]
    fn the_ticker_asks_for_a_short_slice_and_no_timer_slack() {
        let engine = Engine::default();
        let _ticker = EpochTicker::start(&engine, Duration::from_millis(1)).unwrap();
        // It sets both as it starts; give it the time to.
        let mut tid = None;
        for _ in 0..200 {
            tid = ticker_thread().filter(|tid| {
                std::fs::read_to_string(format!("/proc/{tid}/timerslack_ns"))
                    .is_ok_and(|slack| slack.trim() == "1")
            });
            if tid.is_some() {
                break;
            }
            thread::sleep(Duration::from_millis(10));
        }
        let tid = tid.expect("a luge-epoch thread with a timer slack of 1 ns");
        // `se.slice` is shown where the kernel has EEVDF and its scheduler
        // statistics (6.6 and later, with SCHED_DEBUG, as this machine's
        // and CI's); it is a custom slice from 6.12.
        let sched =
            std::fs::read_to_string(format!("/proc/self/task/{tid}/sched")).unwrap_or_default();
        match sched.lines().find(|line| line.starts_with("se.slice")) {
            Some(line) => assert!(line.ends_with(&format!(" {}", SLICE.as_nanos())), "{line}"),
            None => eprintln!("this kernel shows no se.slice: the slice is not checked"),
        }
    }
}
