//! Time back to full throughput after each broker kill of a `correctness` run, from the run's
//! reporting intervals and its kill log (both on the same clock: seconds since the repeat
//! started).
//!
//! - **Baseline:** the median acknowledged records/s, and the median consumed records/s, over
//!   the intervals of phase `measure` before the first kill (pre-kill goodput; with open-loop
//!   producers at a fixed rate, the offered rate whenever the broker keeps up). Not over the
//!   whole run: with short cycles the recovery intervals after each restart (nothing, then the
//!   clients' backlog at once) can be most of it, and their median says nothing about "full"
//!   (a 100-kill soak had a median of 0 consumed/s). With fewer than
//!   [`BASELINE_INTERVALS_MIN`] intervals before the first kill, every `measure` interval counts.
//! - **Full:** an interval in which both rates are at least `full_fraction` (0.9) of their
//!   baselines.
//! - **Recovered after kill `k`:** at the end of the first interval that starts at or after the
//!   SIGKILL and is full, in seconds from the SIGKILL; so the time includes the restart delay,
//!   the broker's start, the clients' reconnects and a group's rebalance, and its resolution is
//!   one interval (`interval_s`). An interval that began before the kill is never counted: it
//!   may hold mostly traffic from before.
//! - **Not recovered:** no full interval before the next kill (or the end of the load phase).

use crate::result::{BrokerKill, Interval, Recovery};

/// The phase of intervals in which every broker is up.
const MEASURE_PHASE: &str = "measure";

/// Fewest intervals before the first kill that make a baseline.
const BASELINE_INTERVALS_MIN: usize = 3;

/// Recovery after each of `kills` (in kill order), from `intervals` (in time order). `None`
/// without kills or without a `measure` interval to take the baseline from.
pub fn recovery(
    intervals: &[Interval],
    kills: &[BrokerKill],
    full_fraction: f64,
) -> Option<Recovery> {
    if kills.is_empty() {
        return None;
    }
    let measure: Vec<&Interval> = intervals
        .iter()
        .filter(|i| i.phase == MEASURE_PHASE)
        .collect();
    let pre_kill: Vec<&Interval> = measure
        .iter()
        .copied()
        .filter(|i| i.t_s <= kills[0].t_s)
        .collect();
    let baseline = if pre_kill.len() >= BASELINE_INTERVALS_MIN {
        &pre_kill
    } else {
        &measure
    };
    let baseline_acked = median(baseline.iter().map(|i| i.acked_rps).collect())?;
    let baseline_consumed = median(baseline.iter().map(|i| i.consumed_rps).collect())?;
    // The load ends with the last measure interval; later ones (verify) do not count.
    let load_end = measure.last().map_or(f64::INFINITY, |i| i.t_s);
    let full = |i: &Interval| {
        i.acked_rps >= full_fraction * baseline_acked
            && i.consumed_rps >= full_fraction * baseline_consumed
    };
    let per_kill_s: Vec<Option<f64>> = kills
        .iter()
        .enumerate()
        .map(|(k, kill)| {
            let until = kills.get(k + 1).map_or(load_end, |next| next.t_s);
            // Each interval with the end of the one before it (its start).
            let mut start = 0.0;
            for interval in intervals {
                let began = start;
                start = interval.t_s;
                if began < kill.t_s {
                    continue;
                }
                if interval.t_s > until {
                    return None;
                }
                if full(interval) {
                    return Some(interval.t_s - kill.t_s);
                }
            }
            None
        })
        .collect();
    let recovered: Vec<f64> = per_kill_s.iter().flatten().copied().collect();
    let min_s = recovered.iter().copied().reduce(f64::min);
    let max_s = recovered.iter().copied().reduce(f64::max);
    let not_recovered = per_kill_s.iter().filter(|r| r.is_none()).count() as u32;
    Some(Recovery {
        full_fraction,
        baseline_acked_rps: baseline_acked,
        baseline_consumed_rps: baseline_consumed,
        per_kill_s,
        min_s,
        median_s: median(recovered),
        max_s,
        not_recovered,
    })
}

/// The median (the mean of the middle two for an even count); `None` when empty.
fn median(mut values: Vec<f64>) -> Option<f64> {
    if values.is_empty() {
        return None;
    }
    values.sort_by(f64::total_cmp);
    let n = values.len();
    Some(if n % 2 == 1 {
        values[n / 2]
    } else {
        (values[n / 2 - 1] + values[n / 2]) / 2.0
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::result::BriefLatency;

    fn interval(t_s: f64, phase: &str, acked_rps: f64, consumed_rps: f64) -> Interval {
        Interval {
            t_s,
            phase: phase.into(),
            sent_rps: acked_rps,
            acked_rps,
            acked_mbps: 0.0,
            consumed_rps,
            consumed_mbps: 0.0,
            ack: BriefLatency::default(),
            e2e: BriefLatency::default(),
            lag_records: 0,
            steal: 0.0,
        }
    }

    fn kill(t_s: f64) -> BrokerKill {
        BrokerKill {
            t_s,
            down_s: 1.0,
            ..BrokerKill::default()
        }
    }

    #[test]
    fn no_kills_no_recovery() {
        let intervals = vec![interval(1.0, "measure", 100.0, 100.0)];
        assert_eq!(recovery(&intervals, &[], 0.9), None);
        assert_eq!(recovery(&[], &[kill(1.0)], 0.9), None);
    }

    #[test]
    fn recovery_is_timed_from_the_kill_to_the_first_full_interval() {
        // 1 s intervals at 1000/s; kill at 3.2 s, then 2 s down (restart), a slow second, a
        // second where acks are back but consumers are not, then full again; second kill at
        // 10.5 s, never full before the load ends at 13 s.
        let intervals = vec![
            interval(1.0, "measure", 1000.0, 1000.0),
            interval(2.0, "measure", 1000.0, 1000.0),
            interval(3.0, "measure", 1010.0, 1000.0),
            // Began before the kill: full, but it does not count.
            interval(4.0, "restart", 950.0, 950.0),
            interval(5.0, "restart", 0.0, 0.0),
            interval(6.0, "measure", 400.0, 300.0),
            interval(7.0, "measure", 2500.0, 800.0),
            interval(8.0, "measure", 1200.0, 1500.0),
            interval(9.0, "measure", 1000.0, 1000.0),
            interval(10.0, "measure", 1000.0, 1000.0),
            interval(11.0, "restart", 0.0, 0.0),
            interval(12.0, "measure", 500.0, 500.0),
            interval(13.0, "measure", 600.0, 600.0),
            interval(20.0, "verify", 0.0, 5000.0),
        ];
        let r = recovery(&intervals, &[kill(3.2), kill(10.5)], 0.9).unwrap();
        assert_eq!(r.baseline_acked_rps, 1000.0);
        assert_eq!(r.baseline_consumed_rps, 1000.0);
        assert_eq!(r.per_kill_s.len(), 2);
        assert!((r.per_kill_s[0].unwrap() - 4.8).abs() < 1e-9, "{r:?}");
        assert_eq!(r.per_kill_s[1], None);
        assert_eq!(r.not_recovered, 1);
        assert_eq!(
            (r.min_s, r.median_s, r.max_s),
            (r.per_kill_s[0], r.per_kill_s[0], r.per_kill_s[0])
        );
    }

    #[test]
    fn spread_over_several_kills() {
        let mut intervals = Vec::new();
        let mut kills = Vec::new();
        // Kill k at 10k + 0.5 s; full again after k + 1 intervals (1.5, 2.5, 3.5 s).
        for k in 0..3 {
            let base = f64::from(k) * 10.0;
            kills.push(kill(base + 0.5));
            for s in 1..=10 {
                let down = s <= k + 1;
                let rate = if down { 0.0 } else { 100.0 };
                intervals.push(interval(base + f64::from(s), "measure", rate, rate));
            }
        }
        let r = recovery(&intervals, &kills, 0.9).unwrap();
        assert_eq!(r.per_kill_s, vec![Some(1.5), Some(2.5), Some(3.5)]);
        assert_eq!(
            (r.min_s, r.median_s, r.max_s),
            (Some(1.5), Some(2.5), Some(3.5))
        );
        assert_eq!(r.not_recovered, 0);
    }

    #[test]
    fn baseline_is_the_pre_kill_goodput() {
        // 4 healthy intervals, then a kill after which most intervals are empty: the median of
        // the whole run would be 0.
        let mut intervals: Vec<Interval> = (1..=4)
            .map(|s| interval(f64::from(s), "measure", 5000.0, 4900.0))
            .collect();
        for s in 5..=14 {
            let rate = if s == 14 { 5000.0 } else { 0.0 };
            intervals.push(interval(f64::from(s), "measure", rate, rate));
        }
        let r = recovery(&intervals, &[kill(4.0)], 0.9).unwrap();
        assert_eq!(
            (r.baseline_acked_rps, r.baseline_consumed_rps),
            (5000.0, 4900.0)
        );
        assert_eq!(r.per_kill_s, vec![Some(10.0)]);
        // Too few intervals before the first kill: the whole run's measure intervals.
        let r = recovery(&intervals, &[kill(1.5)], 0.9).unwrap();
        assert_eq!(r.baseline_acked_rps, 0.0);
    }

    #[test]
    fn medians() {
        assert_eq!(median(vec![]), None);
        assert_eq!(median(vec![3.0, 1.0, 2.0]), Some(2.0));
        assert_eq!(median(vec![4.0, 1.0, 2.0, 3.0]), Some(2.5));
    }
}
