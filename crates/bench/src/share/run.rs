//! `sluice bench drain` with `share_consumers`: the share group reading a backlog, measured.
//!
//! 1. **Fill:** the producers build `[drain] backlog` bytes of records (as in a plain drain),
//!    so that the measurement is bound by consumption, not by production.
//! 2. **Join:** the group configs are set (`share.auto.offset.reset=earliest` at least), then
//!    the share consumers start and join; the run waits until each has partitions.
//! 3. **Warm-up** (`warmup_s` from the consumers' start): assignments settle as members join;
//!    not measured.
//! 4. **Measure** (`duration_s`): records processed per consumer, broker and client CPU time.
//!    It ends early, and says so, if the whole backlog has been processed.
//! 5. **Stop:** consumers acknowledge what they processed, release the rest, close their
//!    sessions and leave.
//!
//! With `kill_consumer_after_s`, one consumer is killed that long after the consumers started
//! (see [`ShareFleet::kill_one`]), and the time until another consumer acquires the records it
//! held is recorded.

use std::time::{Duration, Instant};

use super::member::MemberSpec;
use super::{FleetSpec, ShareFleet, Snapshot, cluster};
use crate::driver::Fleet;
use crate::modes::{self, Context, Filled};
use crate::result::{DrainResult, Interval, RunResult, ShareKill, ShareResult};
use crate::stats;
use crate::workload::{Rate, Workload};

/// How long the consumers have to get partitions assigned before the warm-up starts anyway.
const ASSIGN_TIMEOUT: Duration = Duration::from_secs(30);
/// How often the phase loop looks at the counters (end of the backlog, a due kill).
const POLL: Duration = Duration::from_millis(50);
/// Once a kill is due, how often to look for a consumer holding records, and for how long
/// before killing one anyway.
const KILL_POLL: Duration = Duration::from_millis(5);
const KILL_WAIT_MAX: Duration = Duration::from_secs(10);

/// See the module documentation.
pub fn drain(ctx: &mut Context<'_>, w: &Workload, repeat: u32) -> Result<RunResult, String> {
    modes::on_fresh_topics(ctx, w, |ctx, topics| {
        let s = &w.share;
        let mut fleet = Fleet::new(w, ctx.target, topics.to_vec(), &ctx.run_id, None);
        let broker_cpu = ctx.broker_cpu();
        let filled = modes::fill_backlog(ctx, w, &mut fleet, &broker_cpu)?;
        if filled.live_rps <= 0.0 {
            // Idle producers still cost this process CPU time the consumers may need.
            fleet.stop_producers(modes::FLUSH_TIMEOUT);
        }
        let group = s
            .group
            .clone()
            .unwrap_or_else(|| format!("sluice-bench-{}-share", ctx.run_id));
        let spec = FleetSpec {
            consumers: w.share_consumers,
            member: MemberSpec {
                group: group.clone(),
                topics: topics.to_vec(),
                max_poll_records: s.max_poll_records as i32,
                max_wait_ms: s.max_wait_ms as i32,
                max_bytes: s.max_bytes.0 as i32,
                processing: Duration::from_secs_f64(s.processing_ms_per_record / 1e3),
                acquire_mode: i8::from(s.acquire_mode == "record_limit"),
                // Set once the broker's versions are known.
                share_fetch_version: cluster::SHARE_VERSION,
            },
            group_configs: s.group_configs(),
        };
        let cpu_at_join = fleet.cpu_s();
        let broker_at_join = broker_cpu.seconds();
        let started = Instant::now();
        let (mut share, setup) = ShareFleet::start(ctx.target, spec.clone())?;
        let assigned = share.wait_assigned(ASSIGN_TIMEOUT);
        if !ctx.quiet {
            eprintln!(
                "[{}] share group {group}: {} consumers, {assigned} with partitions after {:.1} s; \
                 coordinator {}",
                ctx.tag,
                w.share_consumers,
                started.elapsed().as_secs_f64(),
                setup.coordinator
            );
        }
        if assigned == 0 {
            let _ = share.stop();
            return Err(format!(
                "no share consumer of {group} got a partition within {} s",
                ASSIGN_TIMEOUT.as_secs()
            ));
        }
        // Nothing processed yet: where the counts of a window without warm-up start.
        let at_join = Snapshot {
            processed: vec![0; w.share_consumers as usize],
            assigned,
            ..Snapshot::default()
        };
        let mut phases = Phases {
            tag: ctx.tag.clone(),
            quiet: ctx.quiet,
            every: Duration::from_secs_f64(w.interval_s),
            last_tick: started,
            last: at_join.clone(),
            intervals: Vec::new(),
            steal_at: crate::machine::cpu_steal_ticks(),
            backlog: filled.backlog,
            record_size: w.record_size as u64,
            started,
            kill_at: s
                .kill_consumer_after_s
                .map(|after| started + Duration::from_secs_f64(after)),
            kill: None,
        };
        // The warm-up runs from the consumers' start (joining included); without one, the
        // window starts with them.
        let (window_start, at_start, cpu_start, broker_start) = if w.warmup_s > 0.0 {
            let warm_until = started + Duration::from_secs_f64(w.warmup_s);
            phases.run(&mut share, &fleet, warm_until, "share-warmup");
            (
                Instant::now(),
                share.snapshot(),
                fleet.cpu_s(),
                broker_cpu.seconds(),
            )
        } else {
            (started, at_join, cpu_at_join, broker_at_join)
        };
        let window_end = window_start + Duration::from_secs_f64(w.duration_s);
        let exhausted = phases.run(&mut share, &fleet, window_end, "share");
        let measured_s = window_start.elapsed().as_secs_f64();
        let at_end = share.snapshot();
        let cpu_end = fleet.cpu_s();
        let broker_end = broker_cpu.seconds();
        let outcome = share.stop();
        fleet.stop_producers(modes::FLUSH_TIMEOUT);

        let per_consumer: Vec<u64> = at_end
            .processed
            .iter()
            .zip(&at_start.processed)
            .map(|(b, a)| b.saturating_sub(*a))
            .collect();
        let records: u64 = per_consumer.iter().sum();
        let rps = if measured_s > 0.0 {
            records as f64 / measured_s
        } else {
            0.0
        };
        let record_size = w.record_size as f64;
        let Filled {
            backlog,
            backlog_bytes,
            fill_s,
            live_rps,
            cpu0,
            cpu1,
            broker0,
            broker1,
            intervals: fill_intervals,
        } = filled;
        let mut result = modes::blank(repeat, topics, None);
        modes::fill_measured(&mut result, &fleet, w, fill_s + measured_s, cpu_end - cpu0);
        // As in a plain drain, the rates describe the phases: produce = fill, consume = the
        // share group in the measured window.
        result.produce_rps = backlog as f64 / fill_s;
        result.produce_mbps = backlog_bytes as f64 / fill_s / 1e6;
        result.consume_rps = rps;
        result.consume_mbps = rps * record_size / 1e6;
        result.totals.consumed_records = records;
        result.totals.consumed_bytes = records * w.record_size as u64;
        result.broker_cpu_s = broker_end.zip(broker0).map(|(b, a)| b - a);
        result.generator_saturated &= !matches!(w.drain.fill_rate, Rate::Max);
        let mut intervals = fill_intervals;
        intervals.append(&mut phases.intervals);
        result.intervals = intervals;
        result.drain = Some(DrainResult {
            backlog_bytes,
            backlog_records: backlog,
            fill_s,
            drain_s: measured_s,
            drain_rps: rps,
            drain_mbps: rps * record_size / 1e6,
            live_producer_rps: live_rps,
            fill_generator_cpu_s: cpu1 - cpu0,
            drain_generator_cpu_s: cpu_end - cpu_start,
            fill_broker_cpu_s: broker1.zip(broker0).map(|(b, a)| b - a),
            drain_broker_cpu_s: broker_end.zip(broker_start).map(|(b, a)| b - a),
        });
        let kill = phases.kill.map(|(consumer, at_s, held)| {
            let watch = outcome.kill.as_ref();
            ShareKill {
                consumer: consumer as u32,
                at_s,
                held_records: held,
                first_redelivery_s: watch.and_then(|w| w.first).map(|d| d.as_secs_f64()),
                redelivery_s: watch.and_then(|w| w.all).map(|d| d.as_secs_f64()),
                redelivered_records: watch.map_or(0, |w| w.redelivered()),
            }
        });
        let total = &outcome.snapshot;
        result.share = Some(ShareResult {
            consumers: w.share_consumers,
            group,
            processing_ms_per_record: s.processing_ms_per_record,
            max_poll_records: s.max_poll_records,
            max_bytes: s.max_bytes.0 as u32,
            acquire_mode: s.acquire_mode.clone(),
            acquire_mode_on_wire: setup.share_fetch_version >= 2,
            share_fetch_version: setup.share_fetch_version,
            broker_share_fetch_versions: setup.share_fetch_versions.map(|(a, b)| [a, b]),
            group_configs: spec.group_configs,
            lock_timeout_ms: outcome.lock_timeout_ms,
            measured_s,
            records,
            rps,
            per_consumer_spread: stats::spread(
                &per_consumer.iter().map(|&n| n as f64).collect::<Vec<_>>(),
            ),
            jain_index: stats::jain_index(&per_consumer),
            idle_consumers: per_consumer.iter().filter(|&&n| n == 0).count() as u32,
            per_consumer,
            assigned_consumers: at_start.assigned,
            processed_total: total.ledger.processed,
            distinct_records: total.ledger.distinct,
            redelivered_records: total.ledger.redelivered,
            acquired_records: total.acquired,
            fetches: total.fetches,
            empty_fetches: total.empty_fetches,
            fetched_bytes: total.fetched_bytes,
            fetch_latency: outcome.fetch_latency.clone(),
            fetch_latency_acquired: outcome.fetch_latency_acquired.clone(),
            errors: outcome.error_counts.values().sum(),
            error_counts: outcome.error_counts,
            error_examples: outcome.error_examples,
            rejoins: total.rejoins,
            session_reopens: total.session_reopens,
            reconnects: total.reconnects,
            backlog_exhausted: exhausted,
            aborted_at_stop: outcome.aborted_at_stop,
            kill,
        });
        Ok(result)
    })
}

/// The warm-up and measured phases: reporting intervals, the kill when due, the end of the
/// backlog.
struct Phases {
    tag: String,
    quiet: bool,
    every: Duration,
    last_tick: Instant,
    last: Snapshot,
    intervals: Vec<Interval>,
    steal_at: Option<(u64, u64)>,
    backlog: u64,
    record_size: u64,
    started: Instant,
    kill_at: Option<Instant>,
    /// (consumer, seconds after the start, records held) of the kill done.
    kill: Option<(usize, f64, u64)>,
}

impl Phases {
    /// Runs until `until`, or until every record of the backlog has been processed (then
    /// returns true).
    fn run(&mut self, share: &mut ShareFleet, fleet: &Fleet, until: Instant, phase: &str) -> bool {
        loop {
            let now = Instant::now();
            if let Some(at) = self.kill_at.filter(|&at| now >= at) {
                let give_up = now >= at + KILL_WAIT_MAX;
                let killed = share.kill_one(!give_up);
                if killed.is_some() || give_up {
                    self.kill_at = None;
                }
                if let Some((victim, held)) = killed {
                    let at_s = self.started.elapsed().as_secs_f64();
                    if !self.quiet {
                        eprintln!(
                            "[{}] killed share consumer {victim} at {at_s:.1} s, holding {held} records",
                            self.tag
                        );
                    }
                    self.kill = Some((victim, at_s, held));
                }
            }
            let snapshot = share.snapshot();
            if snapshot.ledger.distinct >= self.backlog {
                self.tick(fleet, snapshot, phase);
                return true;
            }
            if now >= until {
                if self.last_tick.elapsed() >= self.every / 4 {
                    self.tick(fleet, snapshot, phase);
                }
                return false;
            }
            if now >= self.last_tick + self.every {
                self.tick(fleet, snapshot, phase);
                continue;
            }
            let mut wake = until.min(self.last_tick + self.every).min(now + POLL);
            if let Some(at) = self.kill_at {
                wake = wake.min(at.max(now + KILL_POLL));
            }
            std::thread::sleep(wake.saturating_duration_since(now));
        }
    }

    fn tick(&mut self, fleet: &Fleet, snapshot: Snapshot, phase: &str) {
        let seconds = self.last_tick.elapsed().as_secs_f64();
        self.last_tick = Instant::now();
        let window = fleet.take_interval();
        let mut interval = fleet.interval(&window, seconds, phase);
        let consumed: u64 =
            snapshot.processed.iter().sum::<u64>() - self.last.processed.iter().sum::<u64>();
        let busy = snapshot
            .processed
            .iter()
            .zip(&self.last.processed)
            .filter(|(now, before)| now > before)
            .count();
        let per_s = |n: u64| {
            if seconds > 0.0 {
                n as f64 / seconds
            } else {
                0.0
            }
        };
        interval.consumed_rps = per_s(consumed);
        interval.consumed_mbps = per_s(consumed * self.record_size) / 1e6;
        interval.lag_records = fleet.acked() as i64 - snapshot.ledger.distinct as i64;
        let steal_now = crate::machine::cpu_steal_ticks();
        if let (Some(before), Some(after)) = (self.steal_at, steal_now) {
            interval.steal = crate::machine::steal_share(before, after);
        }
        self.steal_at = steal_now;
        if !self.quiet {
            eprintln!(
                "[{}] {:>7.1}s {:<16} consumed {:>8.0}/s  busy {:>3}/{:<3}  left {:>9}  errors {}  steal {:.0}%",
                self.tag,
                interval.t_s,
                phase,
                interval.consumed_rps,
                busy,
                snapshot.processed.len(),
                self.backlog.saturating_sub(snapshot.ledger.distinct),
                snapshot.errors,
                interval.steal * 100.0,
            );
        }
        self.intervals.push(interval);
        self.last = snapshot;
    }
}
