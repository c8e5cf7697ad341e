//! Execution statistics: per-function execution times (learned online for
//! SRSF) and counters for metrics.

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// Recent runs kept per function: enough for a stable p90, small enough to
/// follow a function whose cost changes.
const WINDOW: usize = 64;

/// What is known about one function.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct FunctionStats {
    /// Completed jobs.
    pub completed: u64,
    /// Jobs that completed after their deadline.
    pub deadline_misses: u64,
    /// Times a job of this function was preempted.
    pub preemptions: u64,
}

#[derive(Debug, Default)]
struct FunctionRecord {
    stats: FunctionStats,
    recent: VecDeque<Duration>,
}

/// Per-function execution statistics, shared by all workers.
#[derive(Debug)]
pub struct ExecutionStats {
    percentile: f64,
    functions: Mutex<HashMap<Arc<str>, FunctionRecord>>,
}

impl ExecutionStats {
    /// Estimates execution time at `percentile` (0-100) of recent runs.
    pub fn new(percentile: f64) -> Self {
        Self {
            percentile: percentile.clamp(0.0, 100.0),
            functions: Mutex::new(HashMap::new()),
        }
    }

    fn functions(&self) -> std::sync::MutexGuard<'_, HashMap<Arc<str>, FunctionRecord>> {
        // Updates are single inserts/pushes; ignore poisoning.
        self.functions.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Expected execution time of `function`: the percentile of recent runs,
    /// else `seed` (the function's declared expectation), else zero.
    pub fn expected(&self, function: &str, seed: Option<Duration>) -> Duration {
        let functions = self.functions();
        match functions.get(function) {
            Some(record) if !record.recent.is_empty() => {
                let mut sorted: Vec<Duration> = record.recent.iter().copied().collect();
                sorted.sort_unstable();
                let rank = (self.percentile / 100.0 * (sorted.len() - 1) as f64).round() as usize;
                sorted[rank.min(sorted.len() - 1)]
            }
            _ => seed.unwrap_or(Duration::ZERO),
        }
    }

    /// Records a completed job.
    pub fn record(&self, function: &Arc<str>, execution: Duration, missed: bool, preemptions: u64) {
        let mut functions = self.functions();
        // Look up by &str first: no allocation on the per-job hot path.
        if !functions.contains_key(&**function) {
            functions.insert(Arc::clone(function), FunctionRecord::default());
        }
        let Some(record) = functions.get_mut(&**function) else {
            return;
        };
        record.stats.completed += 1;
        record.stats.deadline_misses += u64::from(missed);
        record.stats.preemptions += preemptions;
        if record.recent.len() == WINDOW {
            record.recent.pop_front();
        }
        record.recent.push_back(execution);
    }

    /// Stats of one function.
    pub fn function(&self, function: &str) -> FunctionStats {
        self.functions()
            .get(function)
            .map(|r| r.stats.clone())
            .unwrap_or_default()
    }

    /// Stats of every function seen.
    pub fn all(&self) -> Vec<(String, FunctionStats)> {
        self.functions()
            .iter()
            .map(|(k, r)| (k.to_string(), r.stats.clone()))
            .collect()
    }
}

/// Scheduler-wide counters.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SchedulerStats {
    /// Jobs submitted.
    pub submitted: u64,
    /// Jobs completed.
    pub completed: u64,
    /// Times a job yielded at the end of its quantum and was re-queued.
    pub preemptions: u64,
    /// Times an arrival more urgent than a running job asked it to yield
    /// before its quantum ended.
    pub early_preemptions: u64,
    /// Times a job that had run a whole window (its relative deadline)
    /// without ending was given a fresh deadline, as a new arrival.
    pub renewals: u64,
    /// Jobs taken from another worker's queue.
    pub steals: u64,
    /// Scheduling points that searched the other workers' queues (only
    /// when jobs waited beyond the searching worker's own).
    pub sibling_scans: u64,
    /// Jobs classified long by sharding.
    pub long_jobs: u64,
    /// Jobs submitted by a worker's own front end into its own queue: run
    /// where they arrived, unless a sibling stole them.
    pub local_submits: u64,
    /// Busy time per worker, nanoseconds.
    pub busy_ns: Vec<u64>,
    /// Jobs run (polled at least once) per worker.
    pub jobs_run: Vec<u64>,
}

/// Lock-free counters updated on the hot path.
#[derive(Debug, Default)]
pub(crate) struct Counters {
    pub submitted: AtomicU64,
    pub completed: AtomicU64,
    pub preemptions: AtomicU64,
    pub early_preemptions: AtomicU64,
    pub renewals: AtomicU64,
    pub steals: AtomicU64,
    pub sibling_scans: AtomicU64,
    pub long_jobs: AtomicU64,
    pub local_submits: AtomicU64,
}

impl Counters {
    pub fn add(counter: &AtomicU64, n: u64) {
        counter.fetch_add(n, Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn expectation_is_seeded_then_learned() {
        let stats = ExecutionStats::new(90.0);
        let ms = Duration::from_millis;
        assert_eq!(stats.expected("f", Some(ms(7))), ms(7));
        let f: Arc<str> = Arc::from("f");
        for i in 1..=10 {
            stats.record(&f, ms(i), i == 10, 0);
        }
        assert_eq!(stats.expected("f", Some(ms(7))), ms(9));
        assert_eq!(stats.function("f").deadline_misses, 1);
        assert_eq!(stats.function("f").completed, 10);
    }
}
