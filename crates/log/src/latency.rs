//! Latency histograms: the one bucket layout of every duration Sluice reports (the group
//! committer's fdatasyncs here; Kafka and HTTP request latencies in `sluice-broker` and
//! `sluice-http`), and a lock-free histogram to record them in.
//!
//! It lives in the lowest crate that records a latency, so that every `/metrics` histogram has
//! the same `le` bounds and dashboards can compare them.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

/// Upper bounds of the latency buckets, in microseconds (100 µs to 10 s). Slower observations
/// land in one more, open-ended bucket (`le="+Inf"`).
pub const LATENCY_BUCKET_BOUNDS_MICROS: [u64; 16] = [
    100, 250, 500, 1_000, 2_500, 5_000, 10_000, 25_000, 50_000, 100_000, 250_000, 500_000,
    1_000_000, 2_500_000, 5_000_000, 10_000_000,
];

/// Buckets of a latency histogram: one per bound, plus the open-ended one.
pub const LATENCY_BUCKETS: usize = LATENCY_BUCKET_BOUNDS_MICROS.len() + 1;

/// A fixed-bucket latency histogram of relaxed atomics: recording is two atomic adds, no lock,
/// no allocation.
#[derive(Debug, Default)]
pub struct LatencyHistogram {
    /// Not cumulative: `buckets[i]` counts observations in (bound[i-1], bound[i]].
    buckets: [AtomicU64; LATENCY_BUCKETS],
    sum_micros: AtomicU64,
}

/// A point-in-time copy of a [`LatencyHistogram`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LatencySnapshot {
    /// Per-bucket counts, not cumulative; indexed like [`LATENCY_BUCKET_BOUNDS_MICROS`], plus
    /// the open-ended bucket last.
    pub counts: [u64; LATENCY_BUCKETS],
    /// Sum of the observations, in microseconds.
    pub sum_micros: u64,
}

impl LatencyHistogram {
    pub fn observe(&self, elapsed: Duration) {
        self.observe_micros(u64::try_from(elapsed.as_micros()).unwrap_or(u64::MAX));
    }

    pub fn observe_micros(&self, micros: u64) {
        let bucket = LATENCY_BUCKET_BOUNDS_MICROS.partition_point(|&bound| bound < micros);
        self.buckets[bucket].fetch_add(1, Ordering::Relaxed);
        self.sum_micros.fetch_add(micros, Ordering::Relaxed);
    }

    pub fn snapshot(&self) -> LatencySnapshot {
        LatencySnapshot {
            counts: std::array::from_fn(|i| self.buckets[i].load(Ordering::Relaxed)),
            sum_micros: self.sum_micros.load(Ordering::Relaxed),
        }
    }
}

impl LatencySnapshot {
    /// Observations in all buckets.
    pub fn count(&self) -> u64 {
        self.counts.iter().sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn observations_land_in_the_bucket_of_their_upper_bound() {
        let h = LatencyHistogram::default();
        // On a bound, just above it, below the first, and past the last.
        h.observe(Duration::from_micros(100));
        h.observe(Duration::from_micros(101));
        h.observe_micros(3);
        h.observe(Duration::from_secs(60));
        let s = h.snapshot();
        assert_eq!(s.counts[0], 2, "3 µs and 100 µs go in the first bucket");
        assert_eq!(s.counts[1], 1, "101 µs goes in the 250 µs bucket");
        assert_eq!(s.counts[LATENCY_BUCKETS - 1], 1, "60 s is past every bound");
        assert_eq!(s.count(), 4);
        assert_eq!(s.sum_micros, 100 + 101 + 3 + 60_000_000);
    }
}
