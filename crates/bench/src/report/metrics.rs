//! The headline numbers every report shows, how to read them off a [`RunResult`], their spread
//! across repeats, and how numbers are printed.
//!
//! [`METRICS`] is the one list of headline numbers: its `key`s are the keys of
//! [`PointResult::spread`], so the runner and the reports agree on names. When the runner did not
//! fill a key, [`point_spread`] computes the spread from the repeats instead.

use crate::result::{Latency, PointResult, RunResult, Spread};

/// One headline number.
#[derive(Debug)]
pub(crate) struct Metric {
    /// Key in [`PointResult::spread`] and CSV column name.
    pub key: &'static str,
    /// Short human name, with its unit.
    pub title: &'static str,
    /// Throughput: more is better; latency and drain time: less is better.
    pub higher_is_better: bool,
    /// `None` when the repeat did not measure it (e.g. no consumer, not an explore run).
    pub get: fn(&RunResult) -> Option<f64>,
}

/// A latency percentile, or `None` when nothing was measured.
fn lat(latency: &Latency, pick: fn(&Latency) -> f64) -> Option<f64> {
    (latency.count > 0).then(|| pick(latency))
}

const fn metric(
    key: &'static str,
    title: &'static str,
    higher_is_better: bool,
    get: fn(&RunResult) -> Option<f64>,
) -> Metric {
    Metric {
        key,
        title,
        higher_is_better,
        get,
    }
}

/// The headline numbers, in display order.
pub(crate) const METRICS: &[Metric] = &[
    metric("produce_rps", "produce rec/s", true, |r| {
        Some(r.produce_rps)
    }),
    metric("produce_mbps", "produce MB/s", true, |r| {
        Some(r.produce_mbps)
    }),
    metric("consume_rps", "consume rec/s", true, |r| {
        (r.totals.consumed_records > 0).then_some(r.consume_rps)
    }),
    metric("consume_mbps", "consume MB/s", true, |r| {
        (r.totals.consumed_records > 0).then_some(r.consume_mbps)
    }),
    metric("ack_p50_ms", "ack p50 ms", false, |r| {
        lat(&r.ack_latency, |l| l.p50_ms)
    }),
    metric("ack_p99_ms", "ack p99 ms", false, |r| {
        lat(&r.ack_latency, |l| l.p99_ms)
    }),
    metric("ack_p99_9_ms", "ack p99.9 ms", false, |r| {
        lat(&r.ack_latency, |l| l.p99_9_ms)
    }),
    metric("ack_max_ms", "ack max ms", false, |r| {
        lat(&r.ack_latency, |l| l.max_ms)
    }),
    metric("e2e_p50_ms", "e2e p50 ms", false, |r| {
        lat(&r.e2e_latency, |l| l.p50_ms)
    }),
    metric("e2e_p99_ms", "e2e p99 ms", false, |r| {
        lat(&r.e2e_latency, |l| l.p99_ms)
    }),
    metric("e2e_p99_9_ms", "e2e p99.9 ms", false, |r| {
        lat(&r.e2e_latency, |l| l.p99_9_ms)
    }),
    metric("e2e_p99_99_ms", "e2e p99.99 ms", false, |r| {
        lat(&r.e2e_latency, |l| l.p99_99_ms)
    }),
    metric("e2e_max_ms", "e2e max ms", false, |r| {
        lat(&r.e2e_latency, |l| l.max_ms)
    }),
    metric("sustained_rps", "sustained rec/s", true, |r| {
        r.explore.as_ref().and_then(|e| e.sustained_rps)
    }),
    metric("drain_s", "drain s", false, |r| {
        r.drain.as_ref().map(|d| d.drain_s)
    }),
    metric("broker_cpu_s", "broker CPU s", false, |r| r.broker_cpu_s),
    metric(
        "broker_cpu_s_per_m_produced",
        "broker CPU s/M produced",
        false,
        RunResult::broker_cpu_s_per_m_produced,
    ),
    metric(
        "broker_cpu_s_per_m_consumed",
        "broker CPU s/M consumed",
        false,
        RunResult::broker_cpu_s_per_m_consumed,
    ),
    metric("share_consumer_min", "rec/consumer min", true, |r| {
        share_spread(r).map(|s| s.min)
    }),
    metric("share_consumer_median", "rec/consumer median", true, |r| {
        share_spread(r).map(|s| s.median)
    }),
    metric("share_consumer_max", "rec/consumer max", false, |r| {
        share_spread(r).map(|s| s.max)
    }),
    metric("share_jain", "fairness (Jain)", true, |r| {
        r.share.as_ref().and_then(|s| s.jain_index)
    }),
    metric("share_idle_consumers", "idle consumers", false, |r| {
        r.share.as_ref().map(|s| f64::from(s.idle_consumers))
    }),
    metric("share_redelivery_s", "redelivery s", false, |r| {
        r.share
            .as_ref()
            .and_then(|s| s.kill.as_ref())
            .and_then(|k| k.redelivery_s)
    }),
    metric("share_errors", "share errors", false, |r| {
        r.share.as_ref().map(|s| s.errors as f64)
    }),
    metric("storm_capacity_rps", "storm capacity rec/s", true, |r| {
        storm(r, "storm_capacity_rps")
    }),
    metric(
        "storm_goodput_storm",
        "goodput/offered in storm",
        true,
        |r| storm(r, "storm_goodput_storm"),
    ),
    metric(
        "storm_goodput_after",
        "goodput/offered after storm",
        true,
        |r| storm(r, "storm_goodput_after"),
    ),
    metric("storm_p99_storm_ms", "ack p99 ms in storm", false, |r| {
        storm(r, "storm_p99_storm_ms")
    }),
    metric("storm_p99_after_ms", "ack p99 ms after storm", false, |r| {
        storm(r, "storm_p99_after_ms")
    }),
    metric("storm_recovery_s", "recovery s", false, |r| {
        storm(r, "storm_recovery_s")
    }),
    metric("storm_wasted_appends", "wasted appends", false, |r| {
        storm(r, "storm_wasted_appends")
    }),
];

/// One of the storm's headline numbers ([`crate::campaign::storm_headline`]).
fn storm(r: &RunResult, key: &str) -> Option<f64> {
    crate::campaign::storm_headline(r.storm.as_ref()?)
        .into_iter()
        .find(|(k, _)| *k == key)
        .map(|(_, v)| v)
}

/// The spread of records per share consumer in the measured window.
fn share_spread(r: &RunResult) -> Option<&Spread> {
    r.share.as_ref()?.per_consumer_spread.as_ref()
}

/// The metrics that some repeat of some point has a value for, so that tables skip columns that
/// would be empty (no `sustained_rps` outside explore, no e2e without consumers).
pub(crate) fn present_metrics(points: &[&PointResult]) -> Vec<&'static Metric> {
    METRICS
        .iter()
        .filter(|m| points.iter().any(|p| point_spread(p, m).is_some()))
        .collect()
}

/// The spread of `metric` over the point's repeats: the runner's own when it wrote one, else
/// computed here. `None` when no repeat measured it: the runner also writes spreads of values
/// that were not measured (e2e latency zeros without consumers), which must not show as data.
pub(crate) fn point_spread(point: &PointResult, metric: &Metric) -> Option<Spread> {
    let values: Vec<f64> = point.repeats.iter().filter_map(metric.get).collect();
    if values.is_empty() {
        return None;
    }
    match point.spread.get(metric.key) {
        Some(spread) if spread.n > 0 => Some(*spread),
        _ => spread_of(&values),
    }
}

/// min / median / max / mean / cv of the finite `values`; `None` when there are none.
pub(crate) fn spread_of(values: &[f64]) -> Option<Spread> {
    crate::stats::spread(values)
}

/// A number in at most ~4 characters of significant digits, with `k`/`M`/`G` from 10 000 up:
/// `0.123`, `4.56`, `78.9`, `1234`, `12.3k`, `1.23M`. Non-finite values print as `n/a`.
pub(crate) fn fmt_num(v: f64) -> String {
    if !v.is_finite() {
        return "n/a".to_owned();
    }
    let a = v.abs();
    let (scaled, suffix) = match a {
        _ if a >= 1e9 => (v / 1e9, "G"),
        _ if a >= 1e6 => (v / 1e6, "M"),
        _ if a >= 1e4 => (v / 1e3, "k"),
        _ => (v, ""),
    };
    let s = scaled.abs();
    let decimals = match s {
        _ if s == 0.0 => 0,
        _ if s >= 100.0 => 0,
        _ if s >= 10.0 => 1,
        _ if s >= 1.0 => 2,
        _ => 3,
    };
    format!("{scaled:.decimals$}{suffix}")
}

/// `median [min–max]`, or just the value when all repeats agree (or there is one).
pub(crate) fn fmt_spread(s: &Spread) -> String {
    let (median, min, max) = (fmt_num(s.median), fmt_num(s.min), fmt_num(s.max));
    if s.n < 2 || min == max {
        median
    } else {
        format!("{median} [{min}–{max}]")
    }
}

/// Relative standard deviation as a percentage, e.g. `3.2%`.
pub(crate) fn fmt_cv(s: &Spread) -> String {
    if s.cv.is_finite() {
        format!("{:.1}%", s.cv * 100.0)
    } else {
        "n/a".to_owned()
    }
}

/// `candidate / baseline` medians, `None` when the baseline is zero or either is missing.
pub(crate) fn ratio(baseline: Option<&Spread>, candidate: Option<&Spread>) -> Option<f64> {
    let (b, c) = (baseline?.median, candidate?.median);
    let r = c / b;
    (b != 0.0 && r.is_finite()).then_some(r)
}

/// Whether `ratio` (candidate over baseline) is clearly better, clearly worse or about the same
/// (within 5%) for a metric.
pub(crate) fn ratio_verdict(metric: &Metric, ratio: f64) -> Verdict {
    const SAME_WITHIN: f64 = 0.05;
    if (ratio - 1.0).abs() <= SAME_WITHIN {
        Verdict::Same
    } else if (ratio > 1.0) == metric.higher_is_better {
        Verdict::Better
    } else {
        Verdict::Worse
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Verdict {
    Better,
    Same,
    Worse,
}
