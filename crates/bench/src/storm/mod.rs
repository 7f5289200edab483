//! `storm`: a retry storm, and whether the broker recovers from it (no metastable collapse).
//!
//! Clients with short timeouts and aggressive retries make a broker's overload feed itself:
//! requests time out, the application re-sends them at once, the re-sends add to the load, and
//! work the broker does for requests their client already gave up on is wasted. This mode
//! reproduces that and measures the way out:
//!
//! 1. **capacity**: given in `[storm]`, or probed: a closed-loop phase (`producer_rate =
//!    "max"`, the ordinary bench producers with long timeouts) on the same topics, whose median
//!    per-second acknowledged rate is taken as what the broker (and this machine) sustains.
//! 2. **before** (`before_s` at `after` × capacity), **storm** (`storm_s` at `overload` ×
//!    capacity), **after** (`after_s` at `after` × capacity), then **settle** (no new records;
//!    the outstanding deliveries and re-sends finish).
//!
//! The storm producers are librdkafka producers of their own ([`producer`]): not idempotent,
//! `request.timeout.ms` = `message.timeout.ms` = `request_timeout_ms`, short `retry.backoff.ms`.
//! New records follow the open-loop schedule (coordinated-omission correct: latency counts
//! from the first attempt's intended send time). A record whose attempt fails (delivery report
//! with any error, or refused by the client's queue) is re-sent by the application at once, as
//! a new attempt, up to `app_retries` times, then given up: offered load = new records +
//! re-sends. Every second is counted ([`series`]), and the recovery time is read off those
//! seconds.

pub mod config;
mod producer;
pub mod series;

use std::time::{Duration, Instant};

pub use config::{Capacity, Storm};

use crate::driver::Fleet;
use crate::modes::{Context, FLUSH_TIMEOUT, Ticker, all_delivered, blank, on_fresh_topics};
use crate::result::{Interval, RunResult, StormResult, StormSecond};
use crate::stats;
use crate::workload::Workload;
use producer::StormFleet;
use series::Phases;

/// A repeat of `storm`.
pub fn storm(ctx: &mut Context<'_>, w: &Workload, repeat: u32) -> Result<RunResult, String> {
    on_fresh_topics(ctx, w, |ctx, topics| {
        let s = &w.storm;
        let (capacity_rps, capacity_source, probe_rps) = match s.capacity {
            Capacity::Rate(rate) => (
                rate.records_per_s(w.record_size)
                    .ok_or("storm.capacity must be a rate")?,
                "given".to_owned(),
                Vec::new(),
            ),
            Capacity::Probe => {
                let per_second = probe(ctx, w, topics)?;
                let capacity = series::probe_capacity(&per_second)
                    .ok_or("the capacity probe acknowledged nothing: is the broker reachable?")?;
                (capacity, "probe".to_owned(), per_second)
            }
        };
        if !ctx.quiet {
            let how = if probe_rps.is_empty() {
                "given in [storm]".to_owned()
            } else {
                format!(
                    "probed: median acknowledged records/s of a {} s closed-loop phase",
                    probe_rps.len()
                )
            };
            eprintln!(
                "[{}] capacity {capacity_rps:.0} records/s ({how}); storm at {:.0}/s, before and after at {:.0}/s",
                ctx.tag,
                s.overload * capacity_rps,
                s.after * capacity_rps
            );
        }
        let phases = Phases {
            before_s: s.before_s.round() as u64,
            storm_s: (s.storm_s.round() as u64).max(1),
            after_s: (s.after_s.round() as u64).max(1),
        };
        let watermark = |topics: &[String]| -> Option<u64> {
            let mut sum = 0u64;
            for t in topics {
                for h in ctx.admin.high_watermarks(t, w.partitions).ok()? {
                    sum += h.max(0) as u64;
                }
            }
            Some(sum)
        };
        let appended_before = watermark(topics);
        let mut fleet = StormFleet::start(w, ctx.target, topics, phases)?;
        let cpu0 = fleet.cpu_s();
        let started = Instant::now();
        let t0 = fleet.t0();
        let mut printed = 0u64;
        let mut tick = |fleet: &StormFleet, upto: u64| {
            while printed < upto {
                if !ctx.quiet {
                    eprintln!("[{}] {}", ctx.tag, fleet.progress_line(printed));
                }
                printed += 1;
            }
        };
        let mut intended_short = false;
        for (phase, from, to, factor) in [
            ("before", 0, phases.storm_start(), s.after),
            (
                "storm",
                phases.storm_start(),
                phases.storm_end(),
                s.overload,
            ),
            ("after", phases.storm_end(), phases.end(), s.after),
        ] {
            if from == to {
                continue;
            }
            let rate = factor * capacity_rps;
            fleet.set_rate(rate);
            for second in from + 1..=to {
                sleep_until(t0 + Duration::from_secs(second));
                // A second's counters are complete once the next has begun.
                tick(&fleet, second - 1);
            }
            let offered = fleet.offered_between(from, to);
            let seconds = (to - from) as f64;
            if offered < 0.97 * rate * seconds {
                intended_short = true;
                eprintln!(
                    "[{}] the load generator offered {:.0}/s of {rate:.0}/s in phase {phase}",
                    ctx.tag,
                    offered / seconds
                );
            }
        }
        fleet.set_rate(0.0);
        let measured_s = started.elapsed().as_secs_f64();
        let settle_deadline = Instant::now() + Duration::from_secs_f64(s.settle_timeout_s);
        let mut second = phases.end();
        while !fleet.idle() && Instant::now() < settle_deadline {
            std::thread::sleep(Duration::from_millis(20));
            let now_second = t0.elapsed().as_secs();
            if now_second > second {
                second = now_second;
                tick(&fleet, second);
            }
        }
        let unresolved = fleet.outstanding();
        let cpu_s = fleet.cpu_s() - cpu0;
        fleet.stop();
        let end_second = t0.elapsed().as_secs().max(phases.end());
        tick(&fleet, end_second);
        let appended = appended_before
            .zip(watermark(topics))
            .map(|(a, b)| b.saturating_sub(a));
        let (rows, all_acks, totals) = fleet.finish(&phases);
        let mut result = blank(repeat, topics, None);
        result.measured_s = measured_s;
        result.generator_cpu_s = cpu_s;
        result.totals.sent_records = totals.new_records + totals.resent;
        result.totals.sent_bytes = result.totals.sent_records * w.record_size as u64;
        result.totals.acked_records = totals.acked;
        result.totals.acked_bytes = totals.acked * w.record_size as u64;
        result.totals.failed_records = totals.failed;
        if measured_s > 0.0 {
            result.produce_rps = totals.acked as f64 / measured_s;
            result.produce_mbps = result.produce_rps * w.record_size as f64 / 1e6;
        }
        result.ack_latency = stats::latency(&all_acks);
        result.intervals = rows.iter().map(|r| as_interval(r, w.record_size)).collect();
        let recovery_s = series::recovery_s(&rows, s.recovered_fraction, s.recovered_hold_s);
        let mut producer_config = std::collections::BTreeMap::new();
        for (k, v) in crate::target::redacted(&producer::settings(w, ctx.target)) {
            producer_config.insert(k, v);
        }
        result.storm = Some(StormResult {
            capacity_rps,
            capacity_source,
            probe_rps,
            overload: s.overload,
            after: s.after,
            before_s: phases.before_s,
            storm_s: phases.storm_s,
            after_s: phases.after_s,
            request_timeout_ms: s.request_timeout_ms,
            retry_backoff_ms: s.retry_backoff_ms,
            app_retries: s.app_retries,
            recovered_fraction: s.recovered_fraction,
            recovered_hold_s: s.recovered_hold_s,
            producer_config,
            phases: series::phase_medians(&rows),
            seconds: rows,
            recovery_s,
            new_records: totals.new_records,
            resent: totals.resent,
            acked: totals.acked,
            failed: totals.failed,
            timed_out: totals.timed_out,
            given_up: totals.given_up,
            unresolved,
            wasted_appends: appended.map(|a| a.saturating_sub(totals.acked)),
            appended_records: appended,
            generator_short: intended_short,
        });
        if !ctx.quiet {
            eprintln!(
                "[{}] recovery after the storm: {}",
                ctx.tag,
                recovery_s.map_or_else(
                    || format!("not recovered within {} s", phases.after_s),
                    |r| format!("{r:.0} s")
                )
            );
        }
        Ok(result)
    })
}

/// The closed-loop capacity probe: the ordinary bench producers (long timeouts, not
/// idempotent, as the storm's) at `"max"` for `probe_s`; returns the acknowledged records of
/// each whole second. Waits for every delivery before returning, so the storm starts on an
/// idle broker.
fn probe(ctx: &Context<'_>, w: &Workload, topics: &[String]) -> Result<Vec<f64>, String> {
    let mut probe_w = w.clone();
    probe_w.idempotence = false;
    probe_w.consumers = 0;
    let mut fleet = Fleet::new(&probe_w, ctx.target, topics.to_vec(), &ctx.run_id, None);
    fleet.start_producers()?;
    fleet.set_measure_window(0, u64::MAX);
    let per_second = {
        let fleet = &fleet;
        let mut ticker = Ticker::new(fleet, 1.0, &ctx.tag, ctx.quiet);
        fleet.set_rate(None);
        ticker.run_for(w.storm.probe_s, "probe");
        fleet.set_rate(Some(0.0));
        ticker.run_until(Instant::now() + FLUSH_TIMEOUT, "probe-settle", || {
            all_delivered(fleet)
        });
        ticker
            .intervals
            .iter()
            // The last, partial second of the probe is left out.
            .filter(|i| i.phase == "probe")
            .take(w.storm.probe_s.floor().max(1.0) as usize)
            .map(|i| i.acked_rps)
            .collect()
    };
    fleet.stop_producers(FLUSH_TIMEOUT);
    Ok(per_second)
}

fn sleep_until(at: Instant) {
    let now = Instant::now();
    if at > now {
        std::thread::sleep(at - now);
    }
}

/// A storm second as a reporting interval, so the ordinary charts and `intervals.csv` show it:
/// sent = new records + re-sends, acked = goodput.
fn as_interval(s: &StormSecond, record_size: usize) -> Interval {
    Interval {
        t_s: s.t_s,
        phase: s.phase.clone(),
        sent_rps: s.offered_rps + s.resent_rps,
        acked_rps: s.goodput_rps,
        acked_mbps: s.goodput_rps * record_size as f64 / 1e6,
        consumed_rps: 0.0,
        consumed_mbps: 0.0,
        ack: crate::result::BriefLatency {
            count: s.ack_count,
            p50_ms: s.ack_p50_ms,
            p99_ms: s.ack_p99_ms,
            p99_9_ms: s.ack_p99_9_ms,
            max_ms: s.ack_max_ms,
        },
        e2e: Default::default(),
        lag_records: 0,
        steal: 0.0,
    }
}
