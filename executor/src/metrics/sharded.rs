//! A counter and a histogram whose updates from different threads touch
//! different cache lines.
//!
//! `prometheus_client`'s `Histogram` is one mutex per label set and its
//! `Counter` one atomic: every worker that finishes a job of the same
//! function takes the same lock and increments the same word, whose cache
//! line then moves between their cores on every request. Here each thread
//! updates a shard of its own (one per core, picked once per thread),
//! and a scrape sums the shards: the exposition is the same metric, bucket
//! for bucket.

use std::cell::Cell;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

use prometheus_client::encoding::{EncodeMetric, MetricEncoder, NoLabelSet};
use prometheus_client::metrics::{MetricType, TypedMetric};

/// At most this many shards per metric: one per worker on machines of up
/// to 16 cores; beyond, threads share them round robin.
const MAX_SHARDS: usize = 16;

/// Shards per metric: one per core, at most [`MAX_SHARDS`] (each costs 128
/// bytes, and a histogram's its buckets too, so a small device keeps
/// small metrics).
fn shards() -> usize {
    static SHARDS: OnceLock<usize> = OnceLock::new();
    *SHARDS
        .get_or_init(|| std::thread::available_parallelism().map_or(1, |n| n.get().min(MAX_SHARDS)))
}

/// The shard of the calling thread, assigned round robin at its first
/// update.
fn shard_of_this_thread() -> usize {
    static NEXT: AtomicUsize = AtomicUsize::new(0);
    thread_local! {
        static SHARD: Cell<Option<usize>> = const { Cell::new(None) };
    }
    SHARD.with(|shard| {
        shard.get().unwrap_or_else(|| {
            let index = NEXT.fetch_add(1, Ordering::Relaxed) % MAX_SHARDS;
            shard.set(Some(index));
            index
        })
    }) % shards()
}

/// One shard's sum, count and per-bucket counts (not cumulative).
#[derive(Debug, Default)]
struct Counts {
    sum: f64,
    count: u64,
    buckets: Vec<u64>,
}

/// A shard on cache lines of its own (128 bytes: adjacent-line prefetch
/// pairs 64-byte lines on x86), so that two threads' shards never share one.
#[derive(Debug, Default)]
#[repr(align(128))]
struct Shard(Mutex<Counts>);

/// A Prometheus histogram sharded by observing thread (see the module).
/// Clones share the counts (as `prometheus_client`'s metrics do).
#[derive(Debug, Clone)]
pub(crate) struct ShardedHistogram {
    /// Upper bounds, increasing, the last one +Inf.
    bounds: Arc<[f64]>,
    shards: Arc<[Shard]>,
}

impl ShardedHistogram {
    /// A histogram with buckets up to each of `bounds` (finite ones kept,
    /// in the order given) and +Inf.
    pub(crate) fn new(bounds: impl IntoIterator<Item = f64>) -> Self {
        let bounds: Arc<[f64]> = bounds
            .into_iter()
            .filter(|b| b.is_finite())
            .chain(std::iter::once(f64::INFINITY))
            .collect();
        let shards = (0..shards())
            .map(|_| {
                Shard(Mutex::new(Counts {
                    buckets: vec![0; bounds.len()],
                    ..Counts::default()
                }))
            })
            .collect();
        Self { bounds, shards }
    }

    /// Records `value` (a NaN counts in the +Inf bucket, as
    /// `prometheus_client`'s histogram does).
    pub(crate) fn observe(&self, value: f64) {
        let bucket = self
            .bounds
            .iter()
            .position(|&upper| upper >= value)
            .unwrap_or(self.bounds.len() - 1);
        let shard = &self.shards[shard_of_this_thread()];
        // A poisoned shard only means a panic elsewhere mid-update of plain
        // counters: keep counting.
        let mut counts = shard.0.lock().unwrap_or_else(|e| e.into_inner());
        counts.sum += value;
        counts.count += 1;
        counts.buckets[bucket] += 1;
    }

    /// The shards summed: sum, count, and (upper bound, count) per bucket.
    fn totals(&self) -> (f64, u64, Vec<(f64, u64)>) {
        let mut buckets: Vec<(f64, u64)> = self.bounds.iter().map(|&b| (b, 0)).collect();
        let (mut sum, mut count) = (0.0, 0);
        for shard in self.shards.iter() {
            let counts = shard.0.lock().unwrap_or_else(|e| e.into_inner());
            sum += counts.sum;
            count += counts.count;
            for (total, n) in buckets.iter_mut().zip(&counts.buckets) {
                total.1 += n;
            }
        }
        (sum, count, buckets)
    }
}

/// An atomic on cache lines of its own (see [`Shard`]).
#[derive(Debug, Default)]
#[repr(align(128))]
struct PaddedCount(AtomicU64);

/// A Prometheus counter sharded by incrementing thread (see the module).
/// Clones share the count.
#[derive(Debug, Clone)]
pub(crate) struct ShardedCounter {
    shards: Arc<[PaddedCount]>,
}

impl Default for ShardedCounter {
    fn default() -> Self {
        Self {
            shards: (0..shards()).map(|_| PaddedCount::default()).collect(),
        }
    }
}

impl ShardedCounter {
    /// Adds one.
    pub(crate) fn inc(&self) {
        // Relaxed: a count, read only by summing at scrape time.
        self.shards[shard_of_this_thread()]
            .0
            .fetch_add(1, Ordering::Relaxed);
    }

    /// The shards summed.
    pub(crate) fn get(&self) -> u64 {
        self.shards
            .iter()
            .map(|s| s.0.load(Ordering::Relaxed))
            .fold(0, u64::wrapping_add)
    }
}

impl TypedMetric for ShardedCounter {
    const TYPE: MetricType = MetricType::Counter;
}

impl EncodeMetric for ShardedCounter {
    fn encode(&self, mut encoder: MetricEncoder) -> Result<(), std::fmt::Error> {
        encoder.encode_counter::<NoLabelSet, _, u64>(&self.get(), None)
    }

    fn metric_type(&self) -> MetricType {
        Self::TYPE
    }
}

impl TypedMetric for ShardedHistogram {
    const TYPE: MetricType = MetricType::Histogram;
}

impl EncodeMetric for ShardedHistogram {
    fn encode(&self, mut encoder: MetricEncoder) -> Result<(), std::fmt::Error> {
        let (sum, count, buckets) = self.totals();
        encoder.encode_histogram::<NoLabelSet>(sum, count, &buckets, None)
    }

    fn metric_type(&self) -> MetricType {
        Self::TYPE
    }
}

#[cfg(test)]
mod tests {
    use super::{ShardedCounter, ShardedHistogram};
    use prometheus_client::encoding::text::encode;
    use prometheus_client::metrics::histogram::Histogram;
    use prometheus_client::registry::Registry;

    fn exposition(register: impl FnOnce(&mut Registry)) -> String {
        let mut registry = Registry::default();
        register(&mut registry);
        let mut text = String::new();
        encode(&mut text, &registry).unwrap();
        text
    }

    /// Observed from several threads, it reads as `prometheus_client`'s
    /// own histogram given the same values.
    #[test]
    fn sums_its_shards_into_the_plain_histogram() {
        let bounds = [0.001, 0.01, 0.1, 1.0];
        let sharded = ShardedHistogram::new(bounds);
        let plain = Histogram::new(bounds);
        let values: Vec<f64> = (0..2000).map(|i| f64::from(i % 1500) / 1000.0).collect();
        std::thread::scope(|scope| {
            for part in values.chunks(100) {
                let sharded = &sharded;
                scope.spawn(move || part.iter().for_each(|&v| sharded.observe(v)));
            }
        });
        values.iter().for_each(|&v| plain.observe(v));
        let ours = exposition(|r| r.register("h", "h", sharded.clone()));
        let theirs = exposition(|r| r.register("h", "h", plain));
        // The sums are added in another order: compare them to 1e-9.
        let split = |text: &str| {
            let (mut sum, mut rest) = (0.0, Vec::new());
            for line in text.lines() {
                match line.strip_prefix("h_sum ") {
                    Some(value) => sum = value.parse::<f64>().unwrap(),
                    None => rest.push(line.to_owned()),
                }
            }
            (sum, rest)
        };
        let ((our_sum, our_rest), (their_sum, their_rest)) = (split(&ours), split(&theirs));
        assert!((our_sum - their_sum).abs() < 1e-9, "{ours}\n{theirs}");
        assert_eq!(our_rest, their_rest);
        assert!(ours.contains("h_count 2000"), "{ours}");
        assert!(ours.contains("h_bucket{le=\"+Inf\"} 2000"), "{ours}");
    }

    #[test]
    fn a_counter_sums_its_shards() {
        let counter = ShardedCounter::default();
        std::thread::scope(|scope| {
            for _ in 0..40 {
                scope.spawn(|| (0..1000).for_each(|_| counter.inc()));
            }
        });
        assert_eq!(counter.get(), 40_000);
        let mut registry = Registry::default();
        registry.register("c", "c", counter.clone());
        let mut text = String::new();
        encode(&mut text, &registry).unwrap();
        assert!(text.contains("c_total 40000"), "{text}");
    }
}
