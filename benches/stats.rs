//! The one latency summary of every benchmark: an HDR histogram of the
//! samples (nanoseconds, three significant digits: 0.1 % resolution at any
//! scale, from a microsecond to minutes), read by percentile.

use std::time::Duration;

use hdrhistogram::Histogram;

/// Recorded latencies.
#[derive(Debug, Clone)]
pub struct Latencies(Histogram<u64>);

impl Default for Latencies {
    fn default() -> Self {
        // Three significant digits: what a latency figure is quoted to.
        Self(Histogram::new(3).expect("3 significant digits is valid"))
    }
}

impl Latencies {
    /// An empty summary.
    pub fn new() -> Self {
        Self::default()
    }

    /// Records one sample.
    pub fn record(&mut self, sample: Duration) {
        let ns = u64::try_from(sample.as_nanos()).unwrap_or(u64::MAX).max(1);
        // The histogram resizes itself to any u64; recording cannot fail.
        let _ = self.0.record(ns);
    }

    /// Samples recorded.
    pub fn len(&self) -> u64 {
        self.0.len()
    }

    /// Whether none were recorded.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// The latency at percentile `p` (0-100); zero when empty.
    pub fn percentile(&self, p: f64) -> Duration {
        if self.is_empty() {
            return Duration::ZERO;
        }
        Duration::from_nanos(self.0.value_at_quantile(p / 100.0))
    }

    /// The median.
    pub fn median(&self) -> Duration {
        self.percentile(50.0)
    }

    /// The mean; zero when empty.
    pub fn mean(&self) -> Duration {
        Duration::from_nanos(self.0.mean() as u64)
    }

    /// The latency at percentile `p`, in milliseconds (for tables).
    pub fn percentile_ms(&self, p: f64) -> f64 {
        self.percentile(p).as_secs_f64() * 1e3
    }

    /// The mean in milliseconds.
    pub fn mean_ms(&self) -> f64 {
        self.mean().as_secs_f64() * 1e3
    }
}

impl<'a> FromIterator<&'a Duration> for Latencies {
    fn from_iter<I: IntoIterator<Item = &'a Duration>>(samples: I) -> Self {
        let mut latencies = Self::new();
        for sample in samples {
            latencies.record(*sample);
        }
        latencies
    }
}

impl FromIterator<Duration> for Latencies {
    fn from_iter<I: IntoIterator<Item = Duration>>(samples: I) -> Self {
        let mut latencies = Self::new();
        for sample in samples {
            latencies.record(sample);
        }
        latencies
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles_within_a_tenth_of_a_percent() {
        let latencies: Latencies = (1..=1000).map(Duration::from_micros).collect();
        let p99 = latencies.percentile(99.0).as_secs_f64() * 1e6;
        assert!((p99 - 990.0).abs() <= 1.0, "{p99}");
        let median = latencies.median().as_secs_f64() * 1e6;
        assert!((median - 500.0).abs() <= 0.5, "{median}");
        assert_eq!(Latencies::new().percentile(99.0), Duration::ZERO);
    }
}
