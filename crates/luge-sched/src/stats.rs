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
    /// The percentile of `recent`, selected when first read after a run
    /// is recorded, then kept: only SRSF, sharding and the call bound read
    /// it, so under EDF or FIFO a job's end selects nothing (the select
    /// was 1.5 % of a C ping's CPU on the 16-core device), and a burst of
    /// submissions under SRSF selects once.
    expected: Option<Duration>,
}

/// Shards of the per-function table: a function's record lives in the
/// shard its name hashes to, so workers finishing jobs of different
/// functions take different locks (one lock for all was held by every
/// worker on every job). 64 keeps collisions rare at 16 workers and costs
/// 64 small mutexes.
const SHARDS: usize = 64;

/// Functions remembered per shard (4,096 in all): the table is bounded
/// however many functions come and go (uploads, OpenWhisk actions). A
/// full shard forgets an arbitrary function to take a new one; a forgotten
/// function is learned again from its next runs.
const FUNCTIONS_PER_SHARD: usize = 64;

type Shard = Mutex<HashMap<Arc<str>, FunctionRecord>>;

/// Per-function execution statistics, shared by all workers.
#[derive(Debug)]
pub struct ExecutionStats {
    percentile: f64,
    shards: Box<[Shard]>,
    /// Picks a name's shard, keyed at random per process: a tenant cannot
    /// aim its function names at the shard of another's.
    hasher: std::collections::hash_map::RandomState,
}

impl ExecutionStats {
    /// Estimates execution time at `percentile` (0-100) of recent runs.
    pub fn new(percentile: f64) -> Self {
        Self {
            percentile: percentile.clamp(0.0, 100.0),
            shards: (0..SHARDS).map(|_| Mutex::default()).collect(),
            hasher: std::collections::hash_map::RandomState::new(),
        }
    }

    /// The shard of `function`, locked.
    fn shard(
        &self,
        function: &str,
    ) -> std::sync::MutexGuard<'_, HashMap<Arc<str>, FunctionRecord>> {
        use std::hash::BuildHasher;
        let hash = self.hasher.hash_one(function);
        let shard = &self.shards[hash as usize % SHARDS];
        // Updates are single inserts/pushes; ignore poisoning.
        shard.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Every shard's records, one shard locked at a time.
    fn each(&self, mut visit: impl FnMut(&Arc<str>, &FunctionRecord)) {
        for shard in self.shards.iter() {
            let shard = shard.lock().unwrap_or_else(|e| e.into_inner());
            for (name, record) in shard.iter() {
                visit(name, record);
            }
        }
    }

    /// Execution time of `function`'s last recorded run, else `seed`, else
    /// `None` (nothing is known of it): no percentile is selected, so it is
    /// cheap enough to ask after every job (one shard lock and a lookup).
    pub fn last(&self, function: &str, seed: Option<Duration>) -> Option<Duration> {
        self.shard(function)
            .get(function)
            .and_then(|r| r.recent.back().copied())
            .or(seed)
    }

    /// Expected execution time of `function`: the percentile of recent runs,
    /// else `seed` (the function's declared expectation), else zero.
    pub fn expected(&self, function: &str, seed: Option<Duration>) -> Duration {
        match self.shard(function).get_mut(function) {
            Some(record) if !record.recent.is_empty() => *record
                .expected
                .get_or_insert_with(|| percentile(&record.recent, self.percentile)),
            _ => seed.unwrap_or(Duration::ZERO),
        }
    }

    /// Records a completed job.
    pub fn record(&self, function: &Arc<str>, execution: Duration, missed: bool, preemptions: u64) {
        let mut shard = self.shard(function);
        // Look up by &str first: no allocation on the per-job hot path.
        if !shard.contains_key(&**function) {
            if shard.len() >= FUNCTIONS_PER_SHARD {
                let forgotten = shard.keys().next().cloned();
                if let Some(forgotten) = forgotten {
                    shard.remove(&forgotten);
                }
            }
            shard.insert(Arc::clone(function), FunctionRecord::default());
        }
        let Some(record) = shard.get_mut(&**function) else {
            return;
        };
        record.stats.completed += 1;
        record.stats.deadline_misses += u64::from(missed);
        record.stats.preemptions += preemptions;
        if record.recent.len() == WINDOW {
            record.recent.pop_front();
        }
        record.recent.push_back(execution);
        record.expected = None;
    }

    /// Stats of one function.
    pub fn function(&self, function: &str) -> FunctionStats {
        self.shard(function)
            .get(function)
            .map(|r| r.stats.clone())
            .unwrap_or_default()
    }

    /// Stats of every function remembered.
    pub fn all(&self) -> Vec<(String, FunctionStats)> {
        let mut all = Vec::new();
        self.each(|name, record| all.push((name.to_string(), record.stats.clone())));
        all
    }
}

/// The `percentile` (0-100) of `recent` (at most [`WINDOW`] entries),
/// nearest rank; zero when empty. Selected on the stack in linear time,
/// not sorted.
fn percentile(recent: &VecDeque<Duration>, percentile: f64) -> Duration {
    let mut copy = [Duration::ZERO; WINDOW];
    let n = recent.len().min(WINDOW);
    if n == 0 {
        return Duration::ZERO;
    }
    for (slot, value) in copy.iter_mut().zip(recent.iter()) {
        *slot = *value;
    }
    let rank = ((percentile / 100.0 * (n - 1) as f64).round() as usize).min(n - 1);
    *copy[..n].select_nth_unstable(rank).1
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
    /// Times a job was queued behind other tenants' because its tenant had
    /// used more than its share of the workers lately (`Tenant`): queued
    /// so, or moved there when its tenant went over while it waited.
    pub over_share: u64,
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
    pub over_share: AtomicU64,
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
        // Read again, the same; runs recorded after a read are seen.
        assert_eq!(stats.expected("f", None), ms(9));
        for _ in 0..WINDOW {
            stats.record(&f, ms(30), false, 0);
        }
        assert_eq!(stats.expected("f", None), ms(30));
        stats.record(&f, ms(1), false, 0);
        assert_eq!(stats.expected("f", None), ms(30));
        for _ in 0..WINDOW {
            stats.record(&f, ms(2), false, 0);
        }
        assert_eq!(stats.expected("f", None), ms(2));
    }

    #[test]
    fn the_last_run_is_seeded_then_the_latest_recorded() {
        let stats = ExecutionStats::new(90.0);
        let ms = Duration::from_millis;
        assert_eq!(stats.last("f", None), None);
        assert_eq!(stats.last("f", Some(ms(3))), Some(ms(3)));
        let f: Arc<str> = Arc::from("f");
        for i in [9, 1, 4] {
            stats.record(&f, ms(i), false, 0);
        }
        assert_eq!(stats.last("f", Some(ms(3))), Some(ms(4)));
        assert_eq!(stats.last("f", None), Some(ms(4)));
        assert_eq!(stats.last("g", None), None);
    }

    #[test]
    fn the_percentile_is_the_nearest_rank_of_the_sorted_window() {
        let mut recent = VecDeque::new();
        assert_eq!(percentile(&recent, 90.0), Duration::ZERO);
        // A window in scrambled order, full and partly filled.
        for n in [1, 2, 7, WINDOW] {
            recent.clear();
            for i in 0..n {
                recent.push_back(Duration::from_micros(((i * 37) % n) as u64 + 1));
            }
            let mut sorted: Vec<Duration> = recent.iter().copied().collect();
            sorted.sort_unstable();
            for p in [0.0, 50.0, 90.0, 99.0, 100.0] {
                let rank = (p / 100.0 * (n - 1) as f64).round() as usize;
                assert_eq!(percentile(&recent, p), sorted[rank], "n {n}, p {p}");
            }
        }
    }

    #[test]
    fn the_table_stays_bounded_and_spread() {
        let stats = ExecutionStats::new(50.0);
        let ms = Duration::from_millis;
        for i in 0..20_000 {
            let f: Arc<str> = Arc::from(format!("function-{i}"));
            stats.record(&f, ms(1), false, 0);
        }
        let all = stats.all();
        assert!(all.len() <= SHARDS * FUNCTIONS_PER_SHARD, "{}", all.len());
        // Spread over the shards: most of them filled.
        assert!(
            all.len() > SHARDS * FUNCTIONS_PER_SHARD * 3 / 4,
            "{}",
            all.len()
        );
        // A remembered function still answers its own figures.
        let (name, _) = &all[0];
        assert_eq!(stats.expected(name, None), ms(1));
    }
}
