//! Per-second counters of a storm run, and the pure functions that turn them into the result:
//! per-second rows, per-phase medians and the recovery time. Everything here takes its input as
//! arguments (no clock, no clients), so the tests feed it synthetic series.

use hdrhistogram::Histogram;

use crate::result::{StormPhase, StormSecond};
use crate::stats;

/// Seconds a storm run may last at most (phases and settling), which bounds [`Series`]: events
/// later than that are counted in the last second.
pub const SECONDS_MAX: usize = 7200;

/// What happened in one second (of one run; producers share one [`Series`]).
#[derive(Debug, Clone)]
pub struct SecondCounts {
    /// New records whose first attempt was due in this second (by the open-loop schedule).
    pub new_records: u64,
    /// Application re-sends made in this second.
    pub resent: u64,
    /// Delivery reports with success in this second: distinct records, since a record has at
    /// most one attempt in flight (a re-send follows its attempt's failure report).
    pub acked: u64,
    /// Of `acked`, records whose first attempt was due after the storm ended.
    pub acked_fresh: u64,
    /// Attempts that failed in this second (delivery report with an error, or refused by the
    /// client's queue), and of them those that timed out.
    pub failed: u64,
    pub timed_out: u64,
    /// Records abandoned in this second after `app_retries` re-sends.
    pub given_up: u64,
    /// Ack latency of `acked`, from the first attempt's intended send time.
    pub ack: Histogram<u64>,
}

/// A histogram for one second's ack latencies, in µs from 1 µs to 1 hour. Two significant
/// digits (1% resolution) keep one second's histogram at ~45 KB instead of ~360 KB with
/// three, for thousands of seconds.
fn second_histogram() -> Histogram<u64> {
    Histogram::new_with_bounds(1, 3_600_000_000, 2).expect("valid histogram bounds")
}

impl Default for SecondCounts {
    fn default() -> Self {
        Self {
            new_records: 0,
            resent: 0,
            acked: 0,
            acked_fresh: 0,
            failed: 0,
            timed_out: 0,
            given_up: 0,
            ack: second_histogram(),
        }
    }
}

impl SecondCounts {
    pub fn record_ack_us(&mut self, us: u64) {
        let _ = self.ack.record(us.clamp(1, 3_600_000_000));
    }
}

/// Per-second counters indexed by whole seconds since the storm's first phase began.
#[derive(Debug, Default)]
pub struct Series {
    seconds: Vec<SecondCounts>,
}

impl Series {
    /// The counters of second `index` (created on first use; capped at [`SECONDS_MAX`]).
    pub fn at(&mut self, index: u64) -> &mut SecondCounts {
        let index = (index as usize).min(SECONDS_MAX - 1);
        if self.seconds.len() <= index {
            self.seconds.resize_with(index + 1, SecondCounts::default);
        }
        &mut self.seconds[index]
    }

    pub fn get(&self, index: u64) -> Option<&SecondCounts> {
        self.seconds.get(index as usize)
    }

    pub fn len(&self) -> usize {
        self.seconds.len()
    }

    pub fn is_empty(&self) -> bool {
        self.seconds.is_empty()
    }

    /// Every acknowledgement's latency, all seconds together.
    pub fn all_acks(&self) -> Histogram<u64> {
        let mut all = stats::latency_histogram();
        for s in &self.seconds {
            for v in s.ack.iter_recorded() {
                let _ = all.record_n(v.value_iterated_to(), v.count_at_value());
            }
        }
        all
    }
}

/// The phases of a storm in whole seconds: `before`, `storm`, `after`, then `settle` (the
/// outstanding deliveries after the load stopped).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Phases {
    pub before_s: u64,
    pub storm_s: u64,
    pub after_s: u64,
}

impl Phases {
    pub fn storm_start(&self) -> u64 {
        self.before_s
    }

    pub fn storm_end(&self) -> u64 {
        self.before_s + self.storm_s
    }

    pub fn end(&self) -> u64 {
        self.storm_end() + self.after_s
    }

    /// The phase second `index` belongs to.
    pub fn phase_of(&self, index: u64) -> &'static str {
        if index < self.storm_start() {
            "before"
        } else if index < self.storm_end() {
            "storm"
        } else if index < self.end() {
            "after"
        } else {
            "settle"
        }
    }
}

/// The result rows, one per second, until the last second with any event.
pub fn rows(series: &Series, phases: &Phases) -> Vec<StormSecond> {
    (0..series.len() as u64)
        .filter_map(|i| series.get(i).map(|c| row(i, c, phases)))
        .collect()
}

fn row(index: u64, c: &SecondCounts, phases: &Phases) -> StormSecond {
    let latency = |p: f64| {
        if c.ack.is_empty() {
            0.0
        } else {
            c.ack.value_at_quantile(p / 100.0) as f64 / 1000.0
        }
    };
    StormSecond {
        t_s: (index + 1) as f64,
        phase: phases.phase_of(index).to_owned(),
        offered_rps: c.new_records as f64,
        resent_rps: c.resent as f64,
        goodput_rps: c.acked as f64,
        goodput_fresh_rps: c.acked_fresh as f64,
        failed_rps: c.failed as f64,
        timed_out_rps: c.timed_out as f64,
        given_up_rps: c.given_up as f64,
        ack_count: c.ack.len(),
        ack_p50_ms: latency(50.0),
        ack_p99_ms: latency(99.0),
        ack_p99_9_ms: latency(99.9),
        ack_max_ms: if c.ack.is_empty() {
            0.0
        } else {
            c.ack.max() as f64 / 1000.0
        },
    }
}

/// The goodput a second is judged on for recovery: in `after`, only records first offered after
/// the storm ended. Acknowledgements of the storm's backlog would otherwise count as recovery
/// while the new records still wait behind it.
pub fn judged_goodput(s: &StormSecond) -> f64 {
    if s.phase == "after" {
        s.goodput_fresh_rps
    } else {
        s.goodput_rps
    }
}

/// Seconds from the storm's end until the end of the first `after` second from which on, for
/// `hold` consecutive seconds, the judged goodput is at least `fraction` of the offered
/// new-record rate; `None` when that does not happen within the `after` phase. Whole seconds:
/// 1 means the first second after the storm already met it.
pub fn recovery_s(seconds: &[StormSecond], fraction: f64, hold: u32) -> Option<f64> {
    let after: Vec<&StormSecond> = seconds.iter().filter(|s| s.phase == "after").collect();
    let good: Vec<bool> = after
        .iter()
        .map(|s| s.offered_rps > 0.0 && judged_goodput(s) >= fraction * s.offered_rps)
        .collect();
    let hold = hold.max(1) as usize;
    (0..good.len())
        .find(|&k| k + hold <= good.len() && good[k..k + hold].iter().all(|g| *g))
        .map(|k| (k + 1) as f64)
}

/// Per-phase medians of the per-second rows (in phase order; phases without seconds left out).
pub fn phase_medians(seconds: &[StormSecond]) -> Vec<StormPhase> {
    let mut out = Vec::new();
    for phase in ["before", "storm", "after", "settle"] {
        let rows: Vec<&StormSecond> = seconds.iter().filter(|s| s.phase == phase).collect();
        if rows.is_empty() {
            continue;
        }
        let med = |pick: fn(&StormSecond) -> f64| {
            let values: Vec<f64> = rows.iter().map(|s| pick(s)).collect();
            median(&values)
        };
        let with_acks: Vec<f64> = rows
            .iter()
            .filter(|s| s.ack_count > 0)
            .map(|s| s.ack_p99_ms)
            .collect();
        out.push(StormPhase {
            phase: phase.to_owned(),
            seconds: rows.len() as u32,
            offered_rps: med(|s| s.offered_rps),
            resent_rps: med(|s| s.resent_rps),
            goodput_rps: med(|s| s.goodput_rps),
            goodput_fresh_rps: med(judged_goodput),
            failed_rps: med(|s| s.failed_rps),
            given_up_rps: med(|s| s.given_up_rps),
            ack_p99_ms: (!with_acks.is_empty()).then(|| median(&with_acks)),
        });
    }
    out
}

/// The median (mean of the middle two for an even count); 0 for none.
pub fn median(values: &[f64]) -> f64 {
    let mut v: Vec<f64> = values.iter().copied().filter(|x| x.is_finite()).collect();
    if v.is_empty() {
        return 0.0;
    }
    v.sort_by(f64::total_cmp);
    let n = v.len();
    if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    }
}

/// The capacity from a closed-loop probe's per-second acknowledged rates: the median of the
/// second half (the first half warms up: connections, the first batches, a JVM broker's
/// compiler), or of all of them when fewer than six. `None` when nothing was acknowledged.
pub fn probe_capacity(per_second_acked: &[f64]) -> Option<f64> {
    let steady = if per_second_acked.len() >= 6 {
        &per_second_acked[per_second_acked.len() / 2..]
    } else {
        per_second_acked
    };
    let m = median(steady);
    (m > 0.0).then_some(m)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn second(phase: &str, offered: f64, goodput: f64, fresh: f64) -> StormSecond {
        StormSecond {
            t_s: 0.0,
            phase: phase.to_owned(),
            offered_rps: offered,
            resent_rps: 0.0,
            goodput_rps: goodput,
            goodput_fresh_rps: fresh,
            failed_rps: 0.0,
            timed_out_rps: 0.0,
            given_up_rps: 0.0,
            ack_count: goodput as u64,
            ack_p50_ms: 1.0,
            ack_p99_ms: 2.0,
            ack_p99_9_ms: 2.5,
            ack_max_ms: 3.0,
        }
    }

    #[test]
    fn phases_split_the_seconds() {
        let p = Phases {
            before_s: 2,
            storm_s: 3,
            after_s: 4,
        };
        let names: Vec<&str> = (0..11).map(|i| p.phase_of(i)).collect();
        assert_eq!(
            names,
            [
                "before", "before", "storm", "storm", "storm", "after", "after", "after", "after",
                "settle", "settle"
            ]
        );
    }

    #[test]
    fn counts_become_rows_with_phase_and_latency() {
        let phases = Phases {
            before_s: 1,
            storm_s: 1,
            after_s: 1,
        };
        let mut series = Series::default();
        series.at(0).new_records = 100;
        for us in [1000, 2000, 3000] {
            series.at(0).record_ack_us(us);
        }
        series.at(0).acked = 3;
        let s = series.at(1);
        s.new_records = 200;
        s.resent = 50;
        s.failed = 60;
        s.timed_out = 55;
        s.given_up = 5;
        series.at(2).acked_fresh = 7;
        let rows = rows(&series, &phases);
        assert_eq!(rows.len(), 3);
        assert_eq!(rows[0].phase, "before");
        assert_eq!(rows[0].t_s, 1.0);
        assert_eq!(rows[0].ack_count, 3);
        assert!((rows[0].ack_p50_ms - 2.0).abs() < 0.05, "{:?}", rows[0]);
        assert!((rows[0].ack_max_ms - 3.0).abs() < 0.05);
        assert_eq!(
            (rows[1].offered_rps, rows[1].resent_rps, rows[1].failed_rps),
            (200.0, 50.0, 60.0)
        );
        assert_eq!((rows[1].timed_out_rps, rows[1].given_up_rps), (55.0, 5.0));
        assert_eq!(rows[1].ack_p99_ms, 0.0);
        assert_eq!(
            (rows[2].phase.as_str(), rows[2].goodput_fresh_rps),
            ("after", 7.0)
        );
        // Events past the cap land in the last second instead of growing without bound.
        series.at(u64::MAX).acked += 1;
        assert_eq!(series.len(), SECONDS_MAX);
        assert_eq!(series.all_acks().len(), 3);
    }

    #[test]
    fn recovery_needs_the_hold_and_counts_only_fresh_records_after_the_storm() {
        let mut s = vec![
            second("before", 100.0, 100.0, 0.0),
            second("storm", 400.0, 200.0, 0.0),
        ];
        // Backlog acks: goodput high, but nothing offered after the storm acknowledged yet.
        s.push(second("after", 100.0, 250.0, 10.0));
        s.push(second("after", 100.0, 95.0, 95.0)); // good
        s.push(second("after", 100.0, 80.0, 80.0)); // bad: breaks the hold
        s.push(second("after", 100.0, 90.0, 90.0)); // good (exactly 90%)
        s.push(second("after", 100.0, 99.0, 99.0));
        s.push(second("after", 100.0, 100.0, 100.0));
        s.push(second("settle", 0.0, 5.0, 5.0));
        assert_eq!(recovery_s(&s, 0.9, 3), Some(4.0));
        assert_eq!(recovery_s(&s, 0.9, 1), Some(2.0));
        assert_eq!(recovery_s(&s, 0.95, 3), None);
        // A hold longer than what is left is not recovered.
        assert_eq!(recovery_s(&s, 0.9, 4), None);
        // Recovered at once.
        let at_once = vec![
            second("storm", 400.0, 200.0, 0.0),
            second("after", 50.0, 50.0, 50.0),
        ];
        assert_eq!(recovery_s(&at_once, 0.9, 1), Some(1.0));
        // Never offered anything: never judged recovered.
        assert_eq!(recovery_s(&[second("after", 0.0, 0.0, 0.0)], 0.9, 1), None);
    }

    #[test]
    fn phase_medians_and_probe_capacity() {
        let mut s = vec![
            second("before", 100.0, 100.0, 0.0),
            second("before", 100.0, 98.0, 0.0),
            second("storm", 400.0, 200.0, 0.0),
            second("storm", 400.0, 100.0, 0.0),
            second("storm", 400.0, 150.0, 0.0),
        ];
        s.push(second("after", 100.0, 300.0, 20.0));
        let m = phase_medians(&s);
        let names: Vec<&str> = m.iter().map(|p| p.phase.as_str()).collect();
        assert_eq!(names, ["before", "storm", "after"]);
        assert_eq!(m[0].goodput_rps, 99.0);
        assert_eq!(m[1].goodput_rps, 150.0);
        assert_eq!((m[2].goodput_rps, m[2].goodput_fresh_rps), (300.0, 20.0));
        assert_eq!(m[1].ack_p99_ms, Some(2.0));
        assert_eq!(median(&[]), 0.0);
        assert_eq!(median(&[3.0, 1.0, 2.0, 10.0]), 2.5);
        // The first half of a long enough probe is left out.
        assert_eq!(
            probe_capacity(&[10.0, 500.0, 600.0, 1100.0, 900.0, 1000.0, 1050.0]),
            Some(1025.0)
        );
        assert_eq!(probe_capacity(&[10.0, 20.0, 30.0]), Some(20.0));
        assert_eq!(probe_capacity(&[0.0, 0.0]), None);
    }
}
