//! What the kernel counts about a server under load, besides its CPU time:
//! how often its threads lost their core while they still had work, how
//! much of its CPU the epoch ticker took, and how much time the host
//! machine took from the cores it ran on (a virtual machine's steal).
//!
//! A per-request cost measured on a virtual machine can hide any of the
//! three: the lent 16-core machine's one-core points drifted by a third
//! between runs of the same binary (docs/BENCHMARKS.md), and these say
//! whether the host, the ticker or the code moved.

use std::path::Path;

/// The name Luge's epoch ticker thread runs under (`luge-wasmtime`'s
/// `epoch` module names it so).
pub const TICKER_THREAD: &str = "luge-epoch";

/// A process's threads, summed, at one moment. Threads that ended before it
/// are not in it: between two readings of a server whose threads live as
/// long as it does (both of Luge's front ends, `wasmtime serve`) the
/// difference is the work done in between.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Threads {
    /// Time on a CPU, nanoseconds (`schedstat`'s `sum_exec_runtime`).
    pub cpu_ns: u64,
    /// Of it, the epoch ticker's ([`TICKER_THREAD`]).
    pub ticker_ns: u64,
    /// Times a thread lost its CPU while it could still run
    /// (`nonvoluntary_ctxt_switches`): a preemption by another thread
    /// (the ticker's wake-up on a shared core) or the end of a time slice.
    pub involuntary: u64,
}

impl Threads {
    /// What was done between `earlier` and `self`.
    pub fn since(self, earlier: Threads) -> Threads {
        Threads {
            cpu_ns: self.cpu_ns.saturating_sub(earlier.cpu_ns),
            ticker_ns: self.ticker_ns.saturating_sub(earlier.ticker_ns),
            involuntary: self.involuntary.saturating_sub(earlier.involuntary),
        }
    }

    /// The ticker's share of the CPU, in per cent ("-" where no ticker ran:
    /// another engine than Wasmtime, another server than Luge).
    pub fn ticker_percent(&self) -> String {
        if self.cpu_ns == 0 || self.ticker_ns == 0 {
            return "-".to_owned();
        }
        format!("{:.1}", self.ticker_ns as f64 * 100.0 / self.cpu_ns as f64)
    }
}

/// Process `pid`'s anonymous resident memory in bytes (`RssAnon` in
/// `/proc/PID/status`): what it allocated and touched, without the code
/// and files it maps. 0 if it cannot be read (it ended).
pub fn rss_anon(pid: u32) -> u64 {
    status(pid)
        .and_then(|status| status.rssanon)
        .map_or(0, |kib| kib * 1024)
}

/// Process `pid`'s resident memory in bytes (`VmRSS` in
/// `/proc/PID/status`): anonymous, file-backed and shared pages together.
/// 0 if it cannot be read (it ended).
pub fn rss(pid: u32) -> u64 {
    status(pid)
        .and_then(|status| status.vmrss)
        .map_or(0, |kib| kib * 1024)
}

/// Process `pid`'s `/proc/PID/status`, if it can be read.
fn status(pid: u32) -> Option<procfs::process::Status> {
    let process = procfs::process::Process::new(i32::try_from(pid).ok()?).ok()?;
    process.status().ok()
}

/// Process `pid`'s threads now (all zero if it cannot be read: it ended).
pub fn threads(pid: u32) -> Threads {
    let Ok(tasks) = i32::try_from(pid)
        .map_err(|_| ())
        .and_then(|pid| procfs::process::Process::new(pid).map_err(|_| ()))
        .and_then(|process| process.tasks().map_err(|_| ()))
    else {
        return Threads::default();
    };
    let mut sum = Threads::default();
    for task in tasks.flatten() {
        // A thread that ended between the listing and these reads counts
        // for nothing.
        let cpu_ns = task.schedstat().map_or(0, |s| s.sum_exec_runtime);
        sum.cpu_ns += cpu_ns;
        if task.stat().is_ok_and(|stat| stat.comm == TICKER_THREAD) {
            sum.ticker_ns += cpu_ns;
        }
        sum.involuntary += task
            .status()
            .ok()
            .and_then(|status| status.nonvoluntary_ctxt_switches)
            .unwrap_or(0);
    }
    sum
}

/// Clock ticks of CPUs `cores`, summed: all of them, and those the host
/// took (`steal`). `None` where `/proc/stat` cannot be read.
///
/// Read by hand rather than with `procfs::KernelStats`, which lists the
/// CPUs without their numbers (an offline CPU is left out of
/// `/proc/stat`, so a position is not a number).
pub fn steal(cores: &[usize]) -> Option<Steal> {
    steal_in(
        &std::fs::read_to_string(Path::new("/proc/stat")).ok()?,
        cores,
    )
}

/// [`steal`] of a `/proc/stat` text.
fn steal_in(stat: &str, cores: &[usize]) -> Option<Steal> {
    let mut sum = Steal::default();
    for line in stat.lines() {
        let mut fields = line.split_whitespace();
        let Some(cpu) = fields
            .next()
            .and_then(|name| name.strip_prefix("cpu"))
            .and_then(|n| n.parse::<usize>().ok())
        else {
            continue;
        };
        if !cores.contains(&cpu) {
            continue;
        }
        // user nice system idle iowait irq softirq steal guest guest_nice;
        // guest time is already in user time, so the first eight are all.
        let ticks: Vec<u64> = fields.take(8).map_while(|f| f.parse().ok()).collect();
        sum.total += ticks.iter().sum::<u64>();
        sum.steal += ticks.get(7).copied().unwrap_or(0);
    }
    Some(sum)
}

/// Clock ticks of some CPUs: all, and the host's share.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Steal {
    /// Every tick of the CPUs.
    pub total: u64,
    /// The ticks the host ran something else on them.
    pub steal: u64,
}

impl Steal {
    /// The host's share of the ticks between readings `earlier` and
    /// `later`, in per cent, as a table cell ("-" where either reading is
    /// missing or no tick passed).
    pub fn percent_since(later: Option<Steal>, earlier: Option<Steal>) -> String {
        match (later, earlier) {
            (Some(later), Some(earlier)) if later.total > earlier.total => format!(
                "{:.1}",
                later.steal.saturating_sub(earlier.steal) as f64 * 100.0
                    / (later.total - earlier.total) as f64
            ),
            _ => "-".to_owned(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn anonymous_memory_is_read_and_an_ended_process_has_none() {
        let mine = rss_anon(std::process::id());
        // What this test process touched: its heap and stacks at least.
        let touched = std::hint::black_box(vec![1u8; 4 << 20]);
        assert!(rss_anon(std::process::id()) >= mine + (2 << 20));
        drop(touched);
        let mut child = std::process::Command::new("true").spawn().unwrap();
        let pid = child.id();
        child.wait().unwrap();
        assert_eq!(rss_anon(pid), 0);
    }

    #[test]
    fn steal_is_summed_over_the_cores_asked_for_by_number() {
        // cpu1 offline: cpu2 is the second per-CPU line.
        let stat = "cpu  60 0 0 300 0 0 0 12 0 0\n\
                    cpu0 10 0 0 100 0 0 0 2 0 0\n\
                    cpu2 20 0 0 100 0 0 0 4 5 0\n\
                    cpu3 30 0 0 100 0 0 0 6 0 0\n\
                    intr 1 2 3\n";
        assert_eq!(
            steal_in(stat, &[2, 3]),
            Some(Steal {
                total: 120 + 4 + 130 + 6,
                steal: 10
            })
        );
        assert_eq!(steal_in(stat, &[1]), Some(Steal::default()));
        let before = steal_in(stat, &[0]);
        let after = Some(Steal {
            total: 112 + 100,
            steal: 2 + 25,
        });
        assert_eq!(Steal::percent_since(after, before), "25.0");
        assert_eq!(Steal::percent_since(before, before), "-");
        assert_eq!(Steal::percent_since(None, before), "-");
    }

    #[test]
    fn this_process_s_threads_are_read() {
        let started = threads(std::process::id());
        // Some CPU time for the reading to see.
        let mut x = 0u64;
        for i in 0..2_000_000u64 {
            x = std::hint::black_box(x.wrapping_mul(31).wrapping_add(i));
        }
        let spent = threads(std::process::id()).since(started);
        assert!(spent.cpu_ns > 0, "{spent:?}");
        assert_eq!(spent.ticker_ns, 0);
        assert_eq!(threads(u32::MAX), Threads::default());
    }
}
