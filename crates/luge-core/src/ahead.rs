//! When an engine makes a handler's sandboxes ahead of their requests: the
//! policy, engine-neutral; [`crate::teardown`] is the mechanism (a worker's
//! one pending preparation and one sandbox made, taken under a key).
//!
//! A sandbox made ahead runs the tenant's start on a worker's idle time,
//! which no scheduler can preempt: only a handler whose start is quick is
//! made ahead ([`Ahead::quick_after`]: its quickest instantiation within
//! [`AHEAD_BELOW`] of CPU time), a preparation is interrupted at
//! [`AHEAD_WITHIN`], and a handler whose preparations are slow too often
//! ([`Ahead::judge`]) is made ahead no more. Times are the worker thread's
//! CPU time ([`thread_cpu_time`]), not the clock's: a worker that loses
//! its core to another process in the middle of a start is no slower
//! start.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

/// One loaded handler's standing for being made ahead: whether it still
/// is, its quickest instantiation, and its preparations so far. Shared by
/// every worker that runs it (relaxed atomics: each is read alone, and a
/// worker that reads one a little stale decides as if it had come first).
#[derive(Debug)]
pub struct Ahead {
    /// Whether its sandboxes are made ahead on workers that do so; cleared
    /// for good once a preparation failed ([`Ahead::stop`]), or once too
    /// many were slow ([`Ahead::judge`]).
    on: AtomicBool,
    /// Its quickest instantiation so far, in nanoseconds of its worker's
    /// CPU time (`u64::MAX`: none yet), against [`AHEAD_BELOW`]. The
    /// quickest, not the last: even in CPU time, an instantiation on a
    /// loaded host is slowed now and then (its caches taken by another
    /// process), while a start that does real work is never quick.
    quickest: AtomicU64,
    /// Its preparations so far, and how many of them were slow.
    preparations: Preparations,
}

impl Default for Ahead {
    fn default() -> Self {
        Self {
            on: AtomicBool::new(true),
            quickest: AtomicU64::new(u64::MAX),
            preparations: Preparations::default(),
        }
    }
}

impl Ahead {
    /// Whether a request of this handler on this thread should look for a
    /// sandbox made ahead, and ask for the next: the handler is still made
    /// ahead and the thread is a worker that prepares ([`crate::teardown::defers`]).
    pub fn wanted(&self) -> bool {
        self.on.load(Ordering::Relaxed) && crate::teardown::defers()
    }

    /// Counts an instantiation (ahead or on demand) that used `cpu` of its
    /// worker's CPU time; whether the handler is quick: its quickest so
    /// far within [`AHEAD_BELOW`].
    pub fn quick_after(&self, cpu: Duration) -> bool {
        let took = u64::try_from(cpu.as_nanos()).unwrap_or(u64::MAX);
        // A plain load first: once the quickest is known, requests on every
        // core only read its cache line.
        let mut quickest = self.quickest.load(Ordering::Relaxed);
        if took < quickest {
            quickest = self.quickest.fetch_min(took, Ordering::Relaxed).min(took);
        }
        u128::from(quickest) <= AHEAD_BELOW.as_nanos()
    }

    /// Counts a preparation that used `cpu` of its worker's CPU time:
    /// whether it was slow (over [`AHEAD_BELOW`]), and whether this call
    /// ended making the handler ahead (slow ones now too many, and no other
    /// worker ended it first), to be said once.
    pub fn judge(&self, cpu: Duration) -> (bool, bool) {
        let slow = cpu > AHEAD_BELOW;
        (slow, self.preparations.too_often_slow(slow) && self.stop())
    }

    /// Ends making the handler ahead, for good; whether this call did (so
    /// that it is said once).
    pub fn stop(&self) -> bool {
        self.on.swap(false, Ordering::Relaxed)
    }
}

/// Beyond a first, at most one preparation in this many may be slow (more
/// than [`AHEAD_BELOW`] of CPU time, or interrupted at [`AHEAD_WITHIN`])
/// before a handler is made ahead no more.
///
/// Not one in all: on a busy host a quick handler's preparation is slow now
/// and then for the host's own reasons (on the 2-core machine, after a
/// burst of 64 connections, one took 467 µs of CPU among about 120,000 of
/// 10-20 µs; docs/BENCHMARKS.md), and a single one turned a long-lived
/// server's preparations off for good. The first one is the likeliest:
/// a module's first instance faults its image's pages in, and with two
/// busy processes beside the server a debug build's first preparation used
/// 1.07 and 1.20 ms of CPU where its later ones used a fifth of that. A
/// handler whose start does real work is slow nearly every time, and its
/// second slow preparation before 64 quick ones ends them at once. A
/// hostile start that is slow on purpose now and then gets at most two
/// idle milliseconds of its worker at first, and one more per 64
/// preparations.
const SLOW_AT_MOST_ONE_IN: u64 = 64;

/// A loaded handler's preparations: how many ran, and how many of them were
/// slow. Counted by every worker that prepares for it (relaxed: the two
/// counts are read together only to decide whether to go on, and a worker
/// that reads one count a little stale decides as if it had come first).
#[derive(Debug, Default)]
struct Preparations {
    made: AtomicU64,
    slow: AtomicU64,
}

impl Preparations {
    /// Counts a preparation that was `slow` or not; whether slow ones are
    /// now too many (more than one, and one more per
    /// [`SLOW_AT_MOST_ONE_IN`]).
    fn too_often_slow(&self, slow: bool) -> bool {
        let made = self.made.fetch_add(1, Ordering::Relaxed) + 1;
        if !slow {
            return false;
        }
        let slow = self.slow.fetch_add(1, Ordering::Relaxed) + 1;
        slow > 1 + made / SLOW_AT_MOST_ONE_IN
    }
}

/// How many times wider [`AHEAD_BELOW`] and [`AHEAD_WITHIN`] are in this
/// build: 1 in an optimized one, 10 in a debug one (the test suite's).
///
/// The bounds are set for the host's own code optimized, as it ships: a
/// handler instantiates in 5-15 µs there. A debug build runs Luge's own
/// crates unoptimized and every crate's debug assertions: on the 2-core
/// machine the same handler instantiated in 75-550 µs, and its quickest
/// in a fresh server's first eight requests was 272 µs, over the 200 µs
/// bound, so the suite saw nothing made ahead at all. Five times wider
/// held on an idle machine, but not in CI beside the suite's other tests,
/// where a first preparation used 1.07 ms of CPU (a 2-vCPU machine's
/// sibling thread busy slows a thread's CPU time too). Ten times wider,
/// the bounds hold a debug build to the rule that holds what ships. The
/// guest code the bounds are there to catch (a start that does real work)
/// is compiled by Cranelift alike in both builds, and its probes
/// (actions/wat/slow-start.wat, fickle-start.wat) work for 25 ms.
const BUILD_SLOWER: u32 = if cfg!(debug_assertions) { 10 } else { 1 };

/// A handler none of whose instantiations took at most this is not
/// instantiated ahead of its requests: its start does real work (large
/// data segments, a start function), which a request arriving at its
/// worker meanwhile would wait for, as a preparation is no job the
/// scheduler can preempt. A typical handler instantiates in 5-15 µs
/// (docs/BENCHMARKS.md). 200 µs, times [`BUILD_SLOWER`].
pub const AHEAD_BELOW: Duration = Duration::from_micros(200).saturating_mul(BUILD_SLOWER);

/// A preparation is interrupted once it has used this much of its
/// worker's CPU time (checked at each epoch tick while guest code runs):
/// the backstop for a start that is fast on a request and slow ahead of
/// one. The handler is then instantiated on demand from then on. 1 ms,
/// times [`BUILD_SLOWER`].
pub const AHEAD_WITHIN: Duration = Duration::from_millis(1).saturating_mul(BUILD_SLOWER);

/// The CPU time this thread has used.
pub fn thread_cpu_time() -> Duration {
    let now = rustix::time::clock_gettime(rustix::time::ClockId::ThreadCPUTime);
    Duration::new(
        u64::try_from(now.tv_sec).unwrap_or(0),
        u32::try_from(now.tv_nsec).unwrap_or(0),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A first slow preparation is borne and a second before 64 is not;
    /// after 63 quick ones two slow ones are borne (the first, and one in
    /// 64) and a third right after them is not; one slow in every 64 is
    /// borne for good.
    #[test]
    fn a_slow_preparation_now_and_then_is_borne_and_often_is_not() {
        // The first slow one is borne (a module's first instance faults its
        // pages in), a second before 64 is not.
        let first_slow = Preparations::default();
        assert!(!first_slow.too_often_slow(true));
        assert!(first_slow.too_often_slow(true));
        let slow_then_quick = Preparations::default();
        assert!(!slow_then_quick.too_often_slow(true));
        assert!(!slow_then_quick.too_often_slow(false));
        assert!(slow_then_quick.too_often_slow(true));

        let mostly_quick = Preparations::default();
        for _ in 0..SLOW_AT_MOST_ONE_IN - 1 {
            assert!(!mostly_quick.too_often_slow(false));
        }
        // The 64th and 65th, slow: the first, and one in 64.
        assert!(!mostly_quick.too_often_slow(true));
        assert!(!mostly_quick.too_often_slow(true));
        // A third slow one at 66: too soon.
        assert!(mostly_quick.too_often_slow(true));

        let spaced = Preparations::default();
        for round in 0..10 {
            for _ in 0..SLOW_AT_MOST_ONE_IN - 1 {
                assert!(!spaced.too_often_slow(false));
            }
            assert!(!spaced.too_often_slow(true), "round {round}");
        }
    }

    /// A handler is quick once any instantiation was; a preparation over
    /// the bound is slow, and the second such ends making ahead, once.
    #[test]
    fn the_quickest_instantiation_decides_and_slow_ones_end_it_once() {
        let ahead = Ahead::default();
        assert!(!ahead.quick_after(AHEAD_BELOW * 3));
        assert!(ahead.quick_after(AHEAD_BELOW / 2));
        assert!(ahead.quick_after(AHEAD_BELOW * 3), "the quickest counts");
        assert_eq!(ahead.judge(AHEAD_BELOW / 2), (false, false));
        assert_eq!(ahead.judge(AHEAD_BELOW * 2), (true, false));
        assert_eq!(ahead.judge(AHEAD_BELOW * 2), (true, true));
        assert_eq!(ahead.judge(AHEAD_BELOW * 2), (true, false), "said once");
        assert!(!ahead.stop());
    }
}
