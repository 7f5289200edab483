//! Numbers for the results: latency summaries out of HDR histograms, and the spread of one
//! number across repeats.
//!
//! Convention: every latency histogram of the benchmark records **microseconds**, is made by
//! [`latency_histogram`] (1 µs to 1 hour, 3 significant digits, fixed size) and is fed through
//! [`record_us`], which clamps instead of failing. The results report milliseconds
//! ([`crate::result::Latency`], [`crate::result::BriefLatency`]).

use hdrhistogram::Histogram;

use crate::result::{BriefLatency, Latency, Spread};

/// The largest latency a histogram tracks: one hour, in microseconds. Anything slower is recorded
/// as one hour.
pub const LATENCY_MAX_US: u64 = 3_600_000_000;

/// Significant decimal digits a latency histogram keeps: values are exact to 0.1%.
const LATENCY_SIGFIG: u8 = 3;

/// Percentiles of [`Latency::distribution`], denser towards the tail where latency lives.
/// 100 is the maximum.
pub const DISTRIBUTION_PERCENTILES: [f64; 21] = [
    0.0, 10.0, 20.0, 30.0, 40.0, 50.0, 60.0, 70.0, 80.0, 90.0, 95.0, 97.5, 99.0, 99.5, 99.75, 99.9,
    99.95, 99.99, 99.995, 99.999, 100.0,
];

/// An empty latency histogram: microseconds from 1 µs to one hour, 3 significant digits, no
/// auto-resize (so memory is fixed and histograms of one run can always be added together).
pub fn latency_histogram() -> Histogram<u64> {
    Histogram::new_with_bounds(1, LATENCY_MAX_US, LATENCY_SIGFIG)
        .expect("constant histogram bounds are valid")
}

/// Records one latency of `us` microseconds, clamped to the histogram's range (a value above
/// it counts as the highest trackable value) instead of failing.
pub fn record_us(h: &mut Histogram<u64>, us: u64) {
    h.saturating_record(us);
}

/// The full summary of a latency histogram (microseconds) in milliseconds. An empty histogram
/// gives all zeros and an empty distribution.
pub fn latency(h: &Histogram<u64>) -> Latency {
    if h.is_empty() {
        return Latency::default();
    }
    let distribution = DISTRIBUTION_PERCENTILES
        .iter()
        .map(|&pct| [pct, percentile_ms(h, pct)])
        .collect();
    Latency {
        count: h.len(),
        min_ms: us_to_ms(h.min()),
        mean_ms: h.mean() / 1000.0,
        p50_ms: percentile_ms(h, 50.0),
        p75_ms: percentile_ms(h, 75.0),
        p90_ms: percentile_ms(h, 90.0),
        p95_ms: percentile_ms(h, 95.0),
        p99_ms: percentile_ms(h, 99.0),
        p99_9_ms: percentile_ms(h, 99.9),
        p99_99_ms: percentile_ms(h, 99.99),
        max_ms: max_ms(h),
        distribution,
    }
}

/// The few numbers of one reporting interval, in milliseconds (zeros when empty).
pub fn brief(h: &Histogram<u64>) -> BriefLatency {
    if h.is_empty() {
        return BriefLatency::default();
    }
    BriefLatency {
        count: h.len(),
        p50_ms: percentile_ms(h, 50.0),
        p99_ms: percentile_ms(h, 99.0),
        p99_9_ms: percentile_ms(h, 99.9),
        max_ms: max_ms(h),
    }
}

/// The latency at percentile `pct` (0..=100) in milliseconds: the value that `pct`% of the
/// recorded values are at or below (within the histogram's precision); 100 is the maximum.
/// 0 for an empty histogram.
pub fn percentile_ms(h: &Histogram<u64>, pct: f64) -> f64 {
    if h.is_empty() {
        return 0.0;
    }
    if pct >= 100.0 {
        return max_ms(h);
    }
    if pct <= 0.0 {
        return us_to_ms(h.value_at_quantile(0.0));
    }
    // The answer is the value of the `rank`-th smallest record. `pct / 100` is rarely exact in
    // binary (99.9 / 100 = 0.9990000000000001), and handing such a quantile to hdrhistogram
    // rounds the rank up one record too far (p99.9 of 1000 values would be the 1000th), so
    // settle the rank here, then ask for a quantile half a record below it, which no rounding
    // error can push to a neighbour.
    let total = h.len() as f64;
    let exact = pct / 100.0 * total;
    let rank = if (exact - exact.round()).abs() <= exact * 1e-9 {
        exact.round()
    } else {
        exact.ceil()
    }
    .max(1.0);
    us_to_ms(h.value_at_quantile((rank - 0.5) / total))
}

/// min / median / max / mean and the coefficient of variation (sample standard deviation over
/// the magnitude of the mean; 0 with fewer than two values or a zero mean) of `values`, NaN and
/// infinities left out. `None` when nothing is left.
pub fn spread(values: &[f64]) -> Option<Spread> {
    let mut sorted: Vec<f64> = values.iter().copied().filter(|v| v.is_finite()).collect();
    if sorted.is_empty() {
        return None;
    }
    sorted.sort_by(f64::total_cmp);
    let n = sorted.len();
    let median = if n % 2 == 1 {
        sorted[n / 2]
    } else {
        (sorted[n / 2 - 1] + sorted[n / 2]) / 2.0
    };
    let mean = sorted.iter().sum::<f64>() / n as f64;
    let cv = if n < 2 || mean == 0.0 {
        0.0
    } else {
        let variance = sorted.iter().map(|v| (v - mean).powi(2)).sum::<f64>() / (n - 1) as f64;
        variance.sqrt() / mean.abs()
    };
    Some(Spread {
        n: n as u32,
        min: sorted[0],
        median,
        max: sorted[n - 1],
        mean,
        cv,
    })
}

/// Jain's fairness index of how much each party got: (Σx)² / (n · Σx²), 1 when all got the
/// same, 1/n when one got everything. `None` when nobody got anything (or no parties).
pub fn jain_index(amounts: &[u64]) -> Option<f64> {
    let n = amounts.len() as f64;
    let sum: f64 = amounts.iter().map(|&x| x as f64).sum();
    let squares: f64 = amounts.iter().map(|&x| (x as f64) * (x as f64)).sum();
    (squares > 0.0).then(|| sum * sum / (n * squares))
}

fn max_ms(h: &Histogram<u64>) -> f64 {
    us_to_ms(h.max())
}

fn us_to_ms(us: u64) -> f64 {
    us as f64 / 1000.0
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Within the histogram's precision (3 significant digits) of `expected`.
    fn close(actual: f64, expected: f64) -> bool {
        (actual - expected).abs() <= expected.abs() * 1e-3 + 1e-3
    }

    fn uniform(range: std::ops::RangeInclusive<u64>) -> Histogram<u64> {
        let mut h = latency_histogram();
        for us in range {
            record_us(&mut h, us);
        }
        h
    }

    #[test]
    fn histogram_covers_a_microsecond_to_an_hour() {
        let h = latency_histogram();
        assert_eq!(h.low(), 1);
        assert!(h.high() >= LATENCY_MAX_US);
        assert_eq!(h.sigfig(), 3);
        assert!(!h.is_auto_resize());
    }

    #[test]
    fn record_clamps_instead_of_failing() {
        let mut h = latency_histogram();
        record_us(&mut h, 0);
        record_us(&mut h, u64::MAX);
        assert_eq!(h.len(), 2);
        assert!(close(
            percentile_ms(&h, 100.0),
            LATENCY_MAX_US as f64 / 1000.0
        ));
        assert_eq!(percentile_ms(&h, 0.0), 0.0);
    }

    #[test]
    fn percentiles_of_a_uniform_distribution() {
        let h = uniform(1..=1000);
        assert!(
            close(percentile_ms(&h, 50.0), 0.5),
            "{}",
            percentile_ms(&h, 50.0)
        );
        assert!(close(percentile_ms(&h, 99.0), 0.99));
        assert!(close(percentile_ms(&h, 100.0), 1.0));
        assert!(close(percentile_ms(&h, 0.0), 0.001));
        // Exactly the n-th value, despite 99.9 / 100 not being exact in binary.
        assert_eq!(percentile_ms(&h, 99.9), 0.999);
        assert_eq!(percentile_ms(&h, 99.75), 0.998);
        assert_eq!(percentile_ms(&h, 0.1), 0.001);
        assert_eq!(percentile_ms(&h, 0.15), 0.002);
        assert_eq!(percentile_ms(&h, 50.0), 0.5);

        // Larger values: 3 significant digits.
        let h = uniform(1..=1_000_000);
        assert!(
            close(percentile_ms(&h, 50.0), 500.0),
            "{}",
            percentile_ms(&h, 50.0)
        );
        assert!(close(percentile_ms(&h, 99.9), 999.0));
    }

    #[test]
    fn latency_summarises_in_milliseconds() {
        let l = latency(&uniform(1..=1000));
        assert_eq!(l.count, 1000);
        assert!(close(l.min_ms, 0.001));
        assert!(close(l.mean_ms, 0.5005), "{}", l.mean_ms);
        assert!(close(l.p50_ms, 0.5));
        assert!(close(l.p75_ms, 0.75));
        assert!(close(l.p90_ms, 0.9));
        assert!(close(l.p95_ms, 0.95));
        assert!(close(l.p99_ms, 0.99));
        assert!(close(l.p99_9_ms, 0.999));
        assert!(close(l.p99_99_ms, 1.0));
        assert!(close(l.max_ms, 1.0));

        let percentiles: Vec<f64> = l.distribution.iter().map(|p| p[0]).collect();
        assert_eq!(percentiles, DISTRIBUTION_PERCENTILES.to_vec());
        assert!(l.distribution.windows(2).all(|w| w[0][1] <= w[1][1]));
        assert_eq!(l.distribution.last().unwrap(), &[100.0, l.max_ms]);
        assert!(close(l.distribution[5][1], 0.5));
    }

    #[test]
    fn empty_histograms_give_zeros() {
        let h = latency_histogram();
        assert_eq!(latency(&h), Latency::default());
        assert!(latency(&h).distribution.is_empty());
        assert_eq!(brief(&h), BriefLatency::default());
        assert_eq!(percentile_ms(&h, 99.0), 0.0);
    }

    #[test]
    fn brief_has_the_headline_numbers() {
        let b = brief(&uniform(1..=10_000));
        assert_eq!(b.count, 10_000);
        assert!(close(b.p50_ms, 5.0), "{}", b.p50_ms);
        assert!(close(b.p99_ms, 9.9));
        assert!(close(b.p99_9_ms, 9.99));
        assert!(close(b.max_ms, 10.0));
    }

    #[test]
    fn jain_index_is_one_when_fair_and_one_over_n_when_one_takes_all() {
        assert_eq!(jain_index(&[200, 200, 200, 200]), Some(1.0));
        assert_eq!(jain_index(&[800, 0, 0, 0]), Some(0.25));
        // Kafka's greedy regime on one partition: 4 of 20 consumers get everything.
        let mut greedy = vec![0u64; 20];
        greedy[..4].fill(500);
        assert!((jain_index(&greedy).unwrap() - 0.2).abs() < 1e-12);
        let j = jain_index(&[1, 2, 3]).unwrap();
        assert!((j - 36.0 / 42.0).abs() < 1e-12, "{j}");
        assert_eq!(jain_index(&[0, 0]), None);
        assert_eq!(jain_index(&[]), None);
    }

    #[test]
    fn spread_of_repeats() {
        let s = spread(&[3.0, 1.0, 2.0]).unwrap();
        assert_eq!(
            (s.n, s.min, s.median, s.max, s.mean),
            (3, 1.0, 2.0, 3.0, 2.0)
        );
        assert!((s.cv - 0.5).abs() < 1e-12);

        let s = spread(&[4.0, f64::NAN, 1.0, 2.0, 3.0]).unwrap();
        assert_eq!((s.n, s.median), (4, 2.5));

        let s = spread(&[7.0]).unwrap();
        assert_eq!((s.n, s.min, s.median, s.max, s.cv), (1, 7.0, 7.0, 7.0, 0.0));

        assert_eq!(spread(&[-1.0, 1.0]).unwrap().cv, 0.0);
        assert_eq!(spread(&[]), None);
        assert_eq!(spread(&[f64::NAN]), None);
    }
}
