//! The charts of the reports, built from result data: throughput and latency per interval over
//! time (warm-up shaded), and latency distributions on the percentile scale. One colour per
//! quantity, one dash pattern per repeat; `compare` reuses the series builders with one colour
//! per campaign instead.

use super::svg::{self, Band, Chart, Series, XScale};
use crate::result::{Interval, Latency, PointResult, RunResult, StormResult, StormSecond};

/// A per-interval value, `None` where the interval measured nothing.
type Pick = fn(&Interval) -> Option<f64>;

/// Acknowledged and consumed records/s per interval, every repeat.
pub(crate) fn throughput(p: &PointResult) -> Chart {
    let lines: [(&str, usize, Pick); 2] = [
        ("acked", 0, |i| Some(i.acked_rps)),
        ("consumed", 1, |i| Some(i.consumed_rps)),
    ];
    // Without consumers the consumed line would be a flat zero.
    let shown = |name: &str, r: &RunResult, _: Pick| {
        name == "acked" || r.intervals.iter().any(|i| i.consumed_rps > 0.0)
    };
    per_interval_chart(p, &lines, shown, "throughput", "records/s")
}

/// e2e p50/p99/max and ack p99 per interval (ms), every repeat; gaps where an interval had no
/// samples (its latency fields are then zeros, not measurements).
pub(crate) fn latency(p: &PointResult) -> Chart {
    let lines: [(&str, usize, Pick); 4] = [
        ("e2e p50", 2, |i| (i.e2e.count > 0).then_some(i.e2e.p50_ms)),
        ("e2e p99", 1, |i| (i.e2e.count > 0).then_some(i.e2e.p99_ms)),
        ("e2e max", 3, |i| (i.e2e.count > 0).then_some(i.e2e.max_ms)),
        ("ack p99", 0, |i| (i.ack.count > 0).then_some(i.ack.p99_ms)),
    ];
    let shown = |_: &str, r: &RunResult, pick: Pick| r.intervals.iter().any(|i| pick(i).is_some());
    per_interval_chart(p, &lines, shown, "latency per interval", "ms")
}

/// One line per quantity in `lines` (name, colour, value) and repeat, over the time since start,
/// where `shown` keeps it; the warm-up and other phases shaded.
fn per_interval_chart(
    p: &PointResult,
    lines: &[(&str, usize, Pick)],
    shown: impl Fn(&str, &RunResult, Pick) -> bool,
    title: &str,
    y_label: &str,
) -> Chart {
    let mut series = Vec::new();
    for (k, r) in p.repeats.iter().enumerate() {
        for &(name, color, pick) in lines {
            if shown(name, r, pick) {
                let name = repeat_name(name, r, p.repeats.len());
                series.push(interval_series(
                    name,
                    &r.intervals,
                    svg::color(color),
                    svg::dash(k),
                    pick,
                ));
            }
        }
    }
    Chart {
        title: format!("{} · {title}", p.label),
        x_label: "time since start (s)".to_owned(),
        y_label: y_label.to_owned(),
        x_scale: XScale::Linear,
        series,
        bands: phase_bands(p),
    }
}

/// The ack and e2e latency distributions of the measured part, every repeat.
pub(crate) fn distribution(p: &PointResult) -> Chart {
    let n = p.repeats.len();
    let mut series = Vec::new();
    for (k, r) in p.repeats.iter().enumerate() {
        let dash = svg::dash(k);
        series.extend(distribution_series(
            repeat_name("ack", r, n),
            &r.ack_latency,
            svg::color(0),
            dash,
        ));
        series.extend(distribution_series(
            repeat_name("e2e", r, n),
            &r.e2e_latency,
            svg::color(1),
            dash,
        ));
    }
    Chart {
        title: format!("{} · latency distribution (measured part)", p.label),
        x_label: "percentile".to_owned(),
        y_label: "ms".to_owned(),
        x_scale: XScale::Percentile,
        series,
        bands: Vec::new(),
    }
}

/// `(t_s, value)` per interval, with a gap (NaN) where `pick` gives `None`.
pub(crate) fn interval_series(
    name: String,
    intervals: &[Interval],
    color: &'static str,
    dash: &'static str,
    pick: impl Fn(&Interval) -> Option<f64>,
) -> Series {
    let points = intervals
        .iter()
        .map(|i| (i.t_s, pick(i).unwrap_or(f64::NAN)))
        .collect();
    Series {
        name,
        points,
        color,
        dash,
    }
}

/// The latency distribution as a series on the percentile axis, or `None` if nothing measured.
pub(crate) fn distribution_series(
    name: String,
    latency: &Latency,
    color: &'static str,
    dash: &'static str,
) -> Option<Series> {
    (latency.count > 0 && !latency.distribution.is_empty()).then(|| Series {
        name,
        points: latency
            .distribution
            .iter()
            .map(|[p, ms]| (*p, *ms))
            .collect(),
        color,
        dash,
    })
}

/// Series name for repeat `r` of a point with `n` repeats: no suffix when there is one.
fn repeat_name(base: &str, r: &RunResult, n: usize) -> String {
    if n > 1 {
        format!("{base} r{}", r.repeat)
    } else {
        base.to_owned()
    }
}

/// Shaded spans of the warm-up (and drain-mode fill) phases of the first repeat with intervals;
/// repeats share their schedule, so one set of bands fits all. Interval `i` covers the time from
/// the previous interval's end (or 0) to its own `t_s`.
fn phase_bands(p: &PointResult) -> Vec<Band> {
    let Some(r) = p.repeats.iter().find(|r| !r.intervals.is_empty()) else {
        return Vec::new();
    };
    let mut bands: Vec<Band> = Vec::new();
    let mut previous_end = 0.0;
    for i in r.intervals.iter().filter(|i| i.t_s.is_finite()) {
        if matches!(i.phase.as_str(), "warmup" | "fill") {
            match bands.last_mut() {
                Some(b) if b.label == i.phase && b.to == previous_end => b.to = i.t_s,
                _ => bands.push(Band {
                    from: previous_end,
                    to: i.t_s,
                    label: i.phase.clone(),
                }),
            }
        }
        previous_end = i.t_s;
    }
    bands
}

/// A per-second value of a storm run, `None` where the second measured nothing.
type StormPick = fn(&StormSecond) -> Option<f64>;

/// `(t_s, value)` per storm second, with a gap where `pick` gives `None`.
pub(crate) fn storm_series(
    name: String,
    seconds: &[StormSecond],
    color: &'static str,
    dash: &'static str,
    pick: StormPick,
) -> Series {
    Series {
        name,
        points: seconds
            .iter()
            .map(|s| (s.t_s, pick(s).unwrap_or(f64::NAN)))
            .collect(),
        color,
        dash,
    }
}

/// The storm phase of a run, shaded.
pub(crate) fn storm_band(st: &StormResult) -> Band {
    Band {
        from: st.before_s as f64,
        to: (st.before_s + st.storm_s) as f64,
        label: "storm".to_owned(),
    }
}

/// Goodput against offered new records and re-sends per second (and failures), every repeat.
pub(crate) fn storm_rates(p: &PointResult) -> Option<Chart> {
    let lines: [(&str, usize, StormPick); 5] = [
        ("offered (new)", 6, |s| Some(s.offered_rps)),
        ("goodput", 0, |s| Some(s.goodput_rps)),
        ("goodput (offered after storm)", 2, |s| {
            (s.phase == "after").then_some(s.goodput_fresh_rps)
        }),
        ("re-sends", 3, |s| Some(s.resent_rps)),
        ("failed", 4, |s| Some(s.failed_rps)),
    ];
    storm_chart(p, &lines, "retry storm · records/s", "records/s")
}

/// Ack p50 and p99 per second (of the records acknowledged in it), every repeat.
pub(crate) fn storm_latency(p: &PointResult) -> Option<Chart> {
    let lines: [(&str, usize, StormPick); 2] = [
        ("ack p50", 2, |s| (s.ack_count > 0).then_some(s.ack_p50_ms)),
        ("ack p99", 1, |s| (s.ack_count > 0).then_some(s.ack_p99_ms)),
    ];
    storm_chart(
        p,
        &lines,
        "retry storm · ack latency from the first attempt's intended time",
        "ms",
    )
}

fn storm_chart(
    p: &PointResult,
    lines: &[(&str, usize, StormPick)],
    title: &str,
    y_label: &str,
) -> Option<Chart> {
    let storms: Vec<(&RunResult, &StormResult)> = p
        .repeats
        .iter()
        .filter_map(|r| r.storm.as_ref().map(|s| (r, s)))
        .collect();
    let (_, first) = storms.first()?;
    let mut series = Vec::new();
    for (k, (r, st)) in storms.iter().enumerate() {
        for &(name, color, pick) in lines {
            series.push(storm_series(
                repeat_name(name, r, storms.len()),
                &st.seconds,
                svg::color(color),
                svg::dash(k),
                pick,
            ));
        }
    }
    Some(Chart {
        title: format!("{} · {title}", p.label),
        x_label: "seconds since the before phase began".to_owned(),
        y_label: y_label.to_owned(),
        x_scale: XScale::Linear,
        series,
        bands: vec![storm_band(first)],
    })
}
