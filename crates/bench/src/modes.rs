//! One repeat of one test point in each mode: `run`, `explore`, `drain`, `correctness` (and
//! `storm`, in [`crate::storm`]).

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::admin::Admin;
use crate::broker::Brokers;
use crate::checker::Checker;
use crate::driver::{ConsumerMode, Fleet, Window, now_ns};
use crate::machine::BrokerCpu;
use crate::result::{DrainResult, ExploreResult, ExploreStep, Interval, RunResult};
use crate::soak::{KillSchedule, OffsetWatch};
use crate::stats;
use crate::target::Target;
use crate::workload::{Rate, Workload};

/// What a repeat needs from the campaign around it.
#[derive(Debug)]
pub struct Context<'a> {
    pub admin: &'a Admin,
    /// Where the clients connect, and with which connection properties.
    pub target: &'a Target,
    /// Unique per repeat; names topics and groups.
    pub run_id: String,
    /// `p0 r1`, for progress lines.
    pub tag: String,
    /// The brokers the benchmark started itself (correctness kills them in turn).
    pub brokers: Option<&'a mut Brokers>,
    /// Broker processes started elsewhere whose CPU time to record (`--broker-pid`).
    pub broker_pids: &'a [u32],
    pub quiet: bool,
}

impl Context<'_> {
    /// The broker processes whose CPU time a repeat records: those named by `--broker-pid`
    /// and those the benchmark started itself, as they are now.
    pub(crate) fn broker_cpu(&self) -> BrokerCpu {
        let mut pids = self.broker_pids.to_vec();
        if let Some(brokers) = self.brokers.as_deref() {
            pids.extend((0..brokers.len()).filter_map(|i| brokers.get(i)?.pid()));
        }
        BrokerCpu::new(pids)
    }
}

/// How long joins, flushes and catch-ups may take before a repeat fails.
pub(crate) const SETUP_TIMEOUT: Duration = Duration::from_secs(60);
pub(crate) const FLUSH_TIMEOUT: Duration = Duration::from_secs(60);

/// Share of records sent more than 20 ms behind schedule (with room in the client queue) above
/// which the load generator counts as saturated.
const SATURATED_LATE_SHARE: f64 = 0.10;

/// Emits reporting intervals while a phase runs.
pub(crate) struct Ticker<'f> {
    fleet: &'f Fleet,
    every: Duration,
    last: Instant,
    pub(crate) intervals: Vec<Interval>,
    /// The e2e histogram of each interval, kept only when asked for (explore's sustain phase).
    keep_e2e: bool,
    e2e_windows: Vec<Window>,
    tag: String,
    quiet: bool,
    /// `/proc/stat` (total, steal) ticks at the last tick.
    steal_at: Option<(u64, u64)>,
}

impl<'f> Ticker<'f> {
    pub(crate) fn new(fleet: &'f Fleet, interval_s: f64, tag: &str, quiet: bool) -> Self {
        Ticker {
            fleet,
            every: Duration::from_secs_f64(interval_s),
            last: Instant::now(),
            intervals: Vec::new(),
            keep_e2e: false,
            e2e_windows: Vec::new(),
            tag: tag.into(),
            quiet,
            steal_at: crate::machine::cpu_steal_ticks(),
        }
    }

    /// Ticks until `seconds` have passed.
    pub(crate) fn run_for(&mut self, seconds: f64, phase: &str) {
        let end = Instant::now() + Duration::from_secs_f64(seconds);
        self.run_until(end, phase, || false);
    }

    /// Ticks until `done()` or `deadline`; returns whether `done()` became true.
    pub(crate) fn run_until(
        &mut self,
        deadline: Instant,
        phase: &str,
        mut done: impl FnMut() -> bool,
    ) -> bool {
        loop {
            if done() {
                self.flush_partial(phase);
                return true;
            }
            let now = Instant::now();
            if now >= deadline {
                self.flush_partial(phase);
                return false;
            }
            let next_tick = self.last + self.every;
            if now >= next_tick {
                self.tick(phase);
                continue;
            }
            std::thread::sleep(
                next_tick
                    .min(deadline)
                    .saturating_duration_since(now)
                    .min(Duration::from_millis(10)),
            );
        }
    }

    /// Lets `duration` pass, ticking whenever an interval falls due, without closing a partial
    /// interval at the end (many short calls make one phase; [`Ticker::flush_partial`] ends it).
    fn pass(&mut self, duration: Duration, phase: &str) {
        let end = Instant::now() + duration;
        loop {
            let now = Instant::now();
            if now >= end {
                return;
            }
            let next_tick = self.last + self.every;
            if now >= next_tick {
                self.tick(phase);
                continue;
            }
            std::thread::sleep(
                next_tick
                    .min(end)
                    .saturating_duration_since(now)
                    .min(Duration::from_millis(10)),
            );
        }
    }

    /// Closes a partial interval at a phase boundary if it is long enough to mean something.
    fn flush_partial(&mut self, phase: &str) {
        if self.last.elapsed() >= self.every / 4 {
            self.tick(phase);
        }
    }

    fn tick(&mut self, phase: &str) {
        let seconds = self.last.elapsed().as_secs_f64();
        self.last = Instant::now();
        let window = self.fleet.take_interval();
        let mut interval = self.fleet.interval(&window, seconds, phase);
        let steal_now = crate::machine::cpu_steal_ticks();
        if let (Some(before), Some(after)) = (self.steal_at, steal_now) {
            interval.steal = crate::machine::steal_share(before, after);
        }
        self.steal_at = steal_now;
        if !self.quiet {
            eprintln!(
                "[{}] {:>7.1}s {:<16} sent {:>9.0}/s  acked {:>9.0}/s {:>7.1} MB/s  consumed {:>9.0}/s  ack p99 {:>7.2} ms  e2e p50 {:>7.2} p99 {:>7.2} ms  lag {}  steal {:.0}%",
                self.tag,
                interval.t_s,
                phase,
                interval.sent_rps,
                interval.acked_rps,
                interval.acked_mbps,
                interval.consumed_rps,
                interval.ack.p99_ms,
                interval.e2e.p50_ms,
                interval.e2e.p99_ms,
                interval.lag_records,
                interval.steal * 100.0,
            );
        }
        self.intervals.push(interval);
        if self.keep_e2e {
            self.e2e_windows.push(window);
        }
    }
}

/// Runs `body` on this repeat's own new topics, and deletes them afterwards whatever the outcome.
pub(crate) fn on_fresh_topics<'a>(
    ctx: &mut Context<'a>,
    w: &Workload,
    body: impl FnOnce(&mut Context<'a>, &[String]) -> Result<RunResult, String>,
) -> Result<RunResult, String> {
    let topics = topic_names(w, &ctx.run_id);
    ctx.admin.create_topics(
        &topics,
        w.partitions,
        w.replication_factor,
        &w.topic_configs(),
    )?;
    let outcome = body(ctx, &topics);
    let _ = ctx.admin.delete_topics(&topics);
    outcome
}

fn topic_names(w: &Workload, run_id: &str) -> Vec<String> {
    (0..w.topics)
        .map(|t| format!("sluice-bench-{run_id}-t{t}"))
        .collect()
}

/// A blank result for a repeat; the mode fills it in.
pub(crate) fn blank(repeat: u32, topics: &[String], target_rps: Option<f64>) -> RunResult {
    RunResult {
        repeat,
        topics: topics.to_vec(),
        target_rps,
        measured_s: 0.0,
        totals: Default::default(),
        produce_rps: 0.0,
        produce_mbps: 0.0,
        consume_rps: 0.0,
        consume_mbps: 0.0,
        ack_latency: Default::default(),
        e2e_latency: Default::default(),
        generator_saturated: false,
        max_send_lag_ms: 0.0,
        backpressure_fraction: 0.0,
        generator_cpu_s: 0.0,
        broker_cpu_s: None,
        intervals: Vec::new(),
        explore: None,
        drain: None,
        correctness: None,
        share: None,
        storm: None,
    }
}

/// Fills the throughput, latency and health fields from the fleet's measured window.
pub(crate) fn fill_measured(
    result: &mut RunResult,
    fleet: &Fleet,
    w: &Workload,
    measured_s: f64,
    cpu_s: f64,
) {
    let m = fleet.measured();
    let t = m.totals;
    result.measured_s = measured_s;
    result.totals = t;
    let per_s = |n: u64| {
        if measured_s > 0.0 {
            n as f64 / measured_s
        } else {
            0.0
        }
    };
    result.produce_rps = per_s(t.acked_records);
    result.produce_mbps = per_s(t.acked_bytes) / 1e6;
    result.consume_rps = per_s(t.consumed_records);
    result.consume_mbps = per_s(t.consumed_bytes) / 1e6;
    result.ack_latency = stats::latency(&m.ack);
    result.e2e_latency = stats::latency(&m.e2e);
    let (blocked_ns, late, max_lag_ns) = fleet.producer_health();
    let producer_s = measured_s * f64::from(w.producers);
    result.backpressure_fraction = if producer_s > 0.0 {
        (blocked_ns as f64 / 1e9 / producer_s).min(1.0)
    } else {
        0.0
    };
    result.max_send_lag_ms = max_lag_ns as f64 / 1e6;
    result.generator_cpu_s = cpu_s;
    let late_share = if t.sent_records > 0 {
        late as f64 / t.sent_records as f64
    } else {
        0.0
    };
    let short_of_rate = result.target_rps.is_some_and(|target| {
        per_s(t.sent_records) < 0.97 * target && result.backpressure_fraction < 0.1
    });
    // Saturated means persistently behind: a machine-wide stall (VM steal) makes every thread
    // late for a moment, and its cost is already in the latencies, measured from intended times.
    result.generator_saturated = late_share > SATURATED_LATE_SHARE || short_of_rate;
}

/// `run`: a fixed rate (or "max") for warm-up + duration.
pub fn run(ctx: &mut Context<'_>, w: &Workload, repeat: u32) -> Result<RunResult, String> {
    on_fresh_topics(ctx, w, |ctx, topics| {
        let mut fleet = Fleet::new(w, ctx.target, topics.to_vec(), &ctx.run_id, None);
        fleet.start_consumers(ConsumerMode::Groups, SETUP_TIMEOUT)?;
        fleet.start_producers()?;
        let broker_cpu = ctx.broker_cpu();
        let target = w.target_rps();
        let mut result = blank(repeat, topics, target);
        let mut ticker = Ticker::new(&fleet, w.interval_s, &ctx.tag, ctx.quiet);
        let measure_start = now_ns() + (w.warmup_s * 1e9) as u64;
        fleet.set_measure_window(measure_start, u64::MAX);
        fleet.set_rate(target);
        ticker.run_for(w.warmup_s, "warmup");
        fleet.reset_measured();
        let cpu0 = fleet.cpu_s();
        let broker0 = broker_cpu.seconds();
        let started = Instant::now();
        ticker.run_for(w.duration_s, "measure");
        fleet.set_measure_window(measure_start, now_ns());
        let measured_s = started.elapsed().as_secs_f64();
        let cpu_s = fleet.cpu_s() - cpu0;
        let broker_s = broker_cpu.since(broker0);
        fleet.set_rate(Some(0.0));
        let settled = Instant::now() + FLUSH_TIMEOUT;
        ticker.run_until(settled, "settle", || {
            fleet.lag() <= 0 && all_delivered(&fleet)
        });
        result.intervals = std::mem::take(&mut ticker.intervals);
        drop(ticker);
        fill_measured(&mut result, &fleet, w, measured_s, cpu_s);
        result.broker_cpu_s = broker_s;
        fleet.stop_producers(FLUSH_TIMEOUT);
        fleet.stop_consumers();
        Ok(result)
    })
}

/// Every measured record sent has its delivery report.
pub(crate) fn all_delivered(fleet: &Fleet) -> bool {
    let t = fleet.measured().totals;
    t.acked_records + t.failed_records >= t.sent_records
}

/// `explore`: the highest rate whose e2e latency percentile meets the target, sustained.
pub fn explore(ctx: &mut Context<'_>, w: &Workload, repeat: u32) -> Result<RunResult, String> {
    on_fresh_topics(ctx, w, |ctx, topics| {
        let mut fleet = Fleet::new(w, ctx.target, topics.to_vec(), &ctx.run_id, None);
        fleet.start_consumers(ConsumerMode::Groups, SETUP_TIMEOUT)?;
        fleet.start_producers()?;
        let e = &w.explore;
        let start_rps = e.start_rate.records_per_s(w.record_size).unwrap_or(1000.0);
        let max_rps = e
            .max_rate
            .and_then(|r| r.records_per_s(w.record_size))
            .unwrap_or(f64::INFINITY);
        let mut explorer = Explorer {
            fleet: &fleet,
            ticker: Ticker::new(&fleet, w.interval_s, &ctx.tag, ctx.quiet),
            w,
            steps: Vec::new(),
            cpu_s: 0.0,
            broker_cpu: ctx.broker_cpu(),
            broker_cpu_s: None,
        };
        if w.warmup_s > 0.0 {
            fleet.set_rate(Some(start_rps));
            explorer.ticker.run_for(w.warmup_s, "warmup");
            fleet.set_rate(Some(0.0));
            explorer
                .ticker
                .run_until(Instant::now() + FLUSH_TIMEOUT, "settle", || {
                    fleet.lag() <= 0
                });
        }
        let outcome = explorer.search(start_rps, max_rps);
        let cpu_s = explorer.cpu_s;
        let broker_cpu_s = explorer.broker_cpu_s;
        let mut result = blank(repeat, topics, outcome.as_ref().map(|o| o.rate));
        let steps = std::mem::take(&mut explorer.steps);
        result.intervals = std::mem::take(&mut explorer.ticker.intervals);
        drop(explorer);
        let (sustained, fraction, measured_s) = match &outcome {
            Some(o) => (Some(o.rate), Some(o.fraction), o.seconds),
            None => (None, None, 0.0),
        };
        // The headline numbers are those of the passing sustain phase.
        fill_measured(&mut result, &fleet, w, measured_s, cpu_s);
        result.broker_cpu_s = broker_cpu_s;
        result.explore = Some(ExploreResult {
            percentile: e.percentile,
            target_ms: e.target_ms,
            steps,
            sustained_rps: sustained,
            sustained_mbps: sustained.map(|r| r * w.record_size as f64 / 1e6),
            sustain_pass_fraction: fraction,
            passed: outcome.is_some(),
        });
        fleet.stop_producers(FLUSH_TIMEOUT);
        fleet.stop_consumers();
        Ok(result)
    })
}

struct Explorer<'f> {
    fleet: &'f Fleet,
    ticker: Ticker<'f>,
    w: &'f Workload,
    steps: Vec<ExploreStep>,
    /// CPU seconds of this process during the last step's measured part.
    cpu_s: f64,
    broker_cpu: BrokerCpu,
    /// CPU seconds of the brokers during the last step's measured part.
    broker_cpu_s: Option<f64>,
}

struct Sustained {
    rate: f64,
    fraction: f64,
    seconds: f64,
}

/// The most steps one search may take (bounds the run time whatever the broker does).
const MAX_STEPS: usize = 40;

impl Explorer<'_> {
    /// Ramp by doubling, binary-search to within the precision, then sustain; on a failed
    /// sustain, search again below.
    fn search(&mut self, start: f64, max: f64) -> Option<Sustained> {
        let e = &self.w.explore;
        let mut lo: Option<f64> = None;
        let mut hi: Option<f64> = None;
        let mut rate = start.min(max);
        while self.steps.len() < MAX_STEPS {
            if self.step(rate, e.step_s, "ramp") {
                lo = Some(rate);
                if rate >= max {
                    break;
                }
                rate = (rate * 2.0).min(max);
            } else {
                hi = Some(rate);
                break;
            }
        }
        for _attempt in 0..e.max_sustain_attempts {
            // No passing rate yet: halve until one passes.
            while lo.is_none() && self.steps.len() < MAX_STEPS {
                let below = hi.unwrap_or(start) / 2.0;
                if below < 1.0 {
                    return None;
                }
                if self.step(below, e.step_s, "search") {
                    lo = Some(below);
                } else {
                    hi = Some(below);
                }
            }
            let mut low = lo?;
            if let Some(mut high) = hi {
                while (high - low) / low > e.precision && self.steps.len() < MAX_STEPS {
                    let mid = (low + high) / 2.0;
                    if self.step(mid, e.step_s, "search") {
                        low = mid;
                    } else {
                        high = mid;
                    }
                }
            }
            self.fleet.reset_measured();
            let (met, fraction) = self.sustain(low);
            if met {
                return Some(Sustained {
                    rate: low,
                    fraction,
                    seconds: e.sustain_s,
                });
            }
            hi = Some(low);
            lo = None;
        }
        None
    }

    /// A ramp or search step: judged per reporting interval.
    fn step(&mut self, rate: f64, seconds: f64, phase: &str) -> bool {
        let chunk_s = self.w.interval_s;
        self.judged_step(rate, seconds, phase, chunk_s).0
    }

    /// Runs one rate for `seconds` (see [`Explorer::measure`]) and records the step. Returns
    /// whether it passed, and the share of its intervals that met the target.
    fn judged_step(&mut self, rate: f64, seconds: f64, phase: &str, chunk_s: f64) -> (bool, f64) {
        let (met, achieved, e2e_ms, reason, fraction) = self.measure(rate, seconds, phase, chunk_s);
        self.steps.push(ExploreStep {
            phase: phase.into(),
            target_rps: rate,
            achieved_rps: achieved,
            e2e_ms,
            met,
            reason,
        });
        (met, fraction)
    }

    /// Runs `rate` for `seconds` and judges it: rate, delivery and catch-up must hold for the
    /// whole step, and the e2e percentile in at least `pass_fraction` of its intervals of
    /// `chunk_s` seconds (a short machine stall fails one interval, not the step).
    fn measure(
        &mut self,
        rate: f64,
        seconds: f64,
        phase: &str,
        chunk_s: f64,
    ) -> (bool, f64, f64, Option<String>, f64) {
        let e = &self.w.explore;
        self.fleet.reset_measured();
        let start = now_ns();
        self.fleet.set_measure_window(start, u64::MAX);
        self.fleet.set_rate(Some(rate));
        let label = format!("{phase}@{rate:.0}");
        self.ticker.keep_e2e = true;
        self.ticker.e2e_windows.clear();
        let t0 = Instant::now();
        let cpu0 = self.fleet.cpu_s();
        let broker0 = self.broker_cpu.seconds();
        self.ticker.run_for(seconds, &label);
        self.cpu_s = self.fleet.cpu_s() - cpu0;
        self.broker_cpu_s = self.broker_cpu.since(broker0);
        self.fleet.set_measure_window(start, now_ns());
        let elapsed = t0.elapsed().as_secs_f64();
        let step_windows = self.ticker.e2e_windows.len();
        self.fleet.set_rate(Some(0.0));
        let fleet = self.fleet;
        let caught_up = self.ticker.run_until(
            Instant::now() + Duration::from_secs_f64(seconds.max(10.0)),
            &format!("settle@{rate:.0}"),
            || fleet.lag() <= 0 && all_delivered(fleet),
        );
        // Records read while settling were late: they count against the step's last interval.
        self.ticker.keep_e2e = false;
        let late: Vec<Window> = self
            .ticker
            .e2e_windows
            .drain(step_windows.min(self.ticker.e2e_windows.len())..)
            .collect();
        if let Some(last) = self.ticker.e2e_windows.last_mut() {
            for w in &late {
                let _ = last.e2e.add(&w.e2e);
            }
        }
        let m = self.fleet.measured();
        let e2e_ms = stats::percentile_ms(&m.e2e, e.percentile);
        let achieved = m.totals.acked_records as f64 / elapsed;
        let sent = m.totals.sent_records as f64 / elapsed;
        let (blocked_ns, _, _) = self.fleet.producer_health();
        let blocked = blocked_ns as f64 / 1e9 / (elapsed * f64::from(self.w.producers));
        let (good, chunks) = self.intervals_meeting_target(chunk_s);
        let fraction = if chunks > 0 {
            good as f64 / chunks as f64
        } else {
            0.0
        };
        // Behind by more than 3% of the step, and by more than a tenth of a second of records
        // (a short step starts a few ms late without the generator being saturated).
        let shortfall = (rate - sent) * elapsed;
        let reason = if shortfall > (0.03 * rate * elapsed).max(0.1 * rate) && blocked < 0.1 {
            Some(format!(
                "the load generator sent {sent:.0}/s of {rate:.0}/s (saturated)"
            ))
        } else if !caught_up {
            Some("consumers did not catch up after the step".to_string())
        } else if m.totals.failed_records > 0 {
            Some(format!("{} records failed", m.totals.failed_records))
        } else if achieved < 0.95 * rate {
            Some(format!("acknowledged {achieved:.0}/s of {rate:.0}/s"))
        } else if m.totals.consumed_records == 0 && self.w.consumers > 0 {
            Some("nothing consumed".to_string())
        } else if fraction < e.pass_fraction {
            Some(format!(
                "e2e p{} met {} ms in {good} of {chunks} intervals ({:.0}% < {:.0}%)",
                e.percentile,
                e.target_ms,
                fraction * 100.0,
                e.pass_fraction * 100.0
            ))
        } else {
            None
        };
        (reason.is_none(), achieved, e2e_ms, reason, fraction)
    }

    /// How many intervals of `chunk_s` seconds of the last measured step met the e2e target,
    /// of how many.
    fn intervals_meeting_target(&self, chunk_s: f64) -> (usize, usize) {
        let e = &self.w.explore;
        let per_chunk = ((chunk_s / self.w.interval_s).round() as usize).max(1);
        let mut chunks = 0usize;
        let mut good = 0usize;
        for group in self.ticker.e2e_windows.chunks(per_chunk) {
            let mut merged = stats::latency_histogram();
            for w in group {
                let _ = merged.add(&w.e2e);
            }
            chunks += 1;
            if !merged.is_empty() && stats::percentile_ms(&merged, e.percentile) <= e.target_ms {
                good += 1;
            }
        }
        (good, chunks)
    }

    /// The sustain phase: passes when enough of its intervals meet the target. Returns
    /// whether it passed, and the share of intervals that met the target.
    fn sustain(&mut self, rate: f64) -> (bool, f64) {
        let e = &self.w.explore;
        self.judged_step(rate, e.sustain_s, "sustain", e.sustain_interval_s)
    }
}

/// What building a backlog left behind, for the phase that reads it.
pub(crate) struct Filled {
    /// Records acknowledged when the fill ended (the backlog).
    pub backlog: u64,
    pub backlog_bytes: u64,
    pub fill_s: f64,
    /// The producer rate kept up while the backlog is read, records/s.
    pub live_rps: f64,
    /// This process's and the brokers' CPU seconds at the start and at the end of the fill.
    pub cpu0: f64,
    pub cpu1: f64,
    pub broker0: Option<f64>,
    pub broker1: Option<f64>,
    pub intervals: Vec<Interval>,
}

/// Builds `[drain] backlog` bytes of records with the producers only, at `fill_rate`, then
/// sets the producers to `live_rate`.
pub(crate) fn fill_backlog(
    ctx: &Context<'_>,
    w: &Workload,
    fleet: &mut Fleet,
    broker_cpu: &BrokerCpu,
) -> Result<Filled, String> {
    let d = &w.drain;
    fleet.start_producers()?;
    let fleet = &*fleet;
    fleet.set_measure_window(0, u64::MAX);
    let mut ticker = Ticker::new(fleet, w.interval_s, &ctx.tag, ctx.quiet);
    let backlog_records = d.backlog.0.div_ceil(w.record_size as u64);
    let fill_start = Instant::now();
    let cpu0 = fleet.cpu_s();
    let broker0 = broker_cpu.seconds();
    fleet.set_rate(d.fill_rate.records_per_s(w.record_size));
    let deadline = Instant::now() + Duration::from_secs_f64(d.timeout_s);
    let filled = ticker.run_until(deadline, "fill", || fleet.acked() >= backlog_records);
    if !filled {
        return Err(format!(
            "the backlog was not built within {} s",
            d.timeout_s
        ));
    }
    let live_rps = d.live_rate.records_per_s(w.record_size).unwrap_or(0.0);
    fleet.set_rate(Some(live_rps));
    // Everything already sent is part of the backlog: wait for its delivery reports.
    ticker.run_until(Instant::now() + FLUSH_TIMEOUT, "fill", || {
        live_rps > 0.0 || all_delivered(fleet)
    });
    let fill_s = fill_start.elapsed().as_secs_f64();
    let broker1 = broker_cpu.seconds();
    let cpu1 = fleet.cpu_s();
    let backlog = fleet.acked();
    Ok(Filled {
        backlog,
        backlog_bytes: backlog * w.record_size as u64,
        fill_s,
        live_rps,
        cpu0,
        cpu1,
        broker0,
        broker1,
        intervals: std::mem::take(&mut ticker.intervals),
    })
}

/// `drain`: build a backlog with producers only, then time consumers reading it (or, with
/// `share_consumers`, measure a share group reading it: [`crate::share::run::drain`]).
pub fn drain(ctx: &mut Context<'_>, w: &Workload, repeat: u32) -> Result<RunResult, String> {
    if w.share_consumers > 0 {
        return crate::share::run::drain(ctx, w, repeat);
    }
    on_fresh_topics(ctx, w, |ctx, topics| {
        if w.consumers == 0 {
            return Err("drain needs consumers >= 1 (or share_consumers >= 1)".to_string());
        }
        let d = &w.drain;
        let mut fleet = Fleet::new(w, ctx.target, topics.to_vec(), &ctx.run_id, None);
        let broker_cpu = ctx.broker_cpu();
        let filled = fill_backlog(ctx, w, &mut fleet, &broker_cpu)?;
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
        let drain_start = Instant::now();
        fleet.start_consumers(ConsumerMode::Assign, SETUP_TIMEOUT)?;
        let mut ticker = Ticker::new(&fleet, w.interval_s, &ctx.tag, ctx.quiet);
        let slack = (live_rps * 1.0) as i64 + 1;
        let deadline = Instant::now() + Duration::from_secs_f64(d.timeout_s);
        let fleet_ref = &fleet;
        let drained = ticker.run_until(deadline, "drain", || {
            fleet_ref.consumed_slowest() >= backlog && fleet_ref.lag() < slack
        });
        let drain_s = drain_start.elapsed().as_secs_f64();
        let broker2 = broker_cpu.seconds();
        let cpu2 = fleet.cpu_s();
        let mut intervals = std::mem::take(&mut ticker.intervals);
        drop(ticker);
        if !drained {
            return Err(format!(
                "the consumers did not drain the backlog within {} s",
                d.timeout_s
            ));
        }
        let consumed = fleet.consumed_slowest();
        let mut result = blank(repeat, topics, None);
        fill_measured(&mut result, &fleet, w, fill_s + drain_s, cpu2 - cpu0);
        // The rate fields describe the phases, not the whole time: produce = fill, consume = drain.
        result.produce_rps = backlog as f64 / fill_s;
        result.produce_mbps = backlog_bytes as f64 / fill_s / 1e6;
        result.consume_rps = consumed as f64 / drain_s;
        result.consume_mbps = consumed as f64 * w.record_size as f64 / drain_s / 1e6;
        result.broker_cpu_s = broker2.zip(broker0).map(|(b, a)| b - a);
        // "max" fill is closed loop; its schedule lag says nothing about the generator.
        result.generator_saturated &= !matches!(d.fill_rate, Rate::Max);
        let mut all = fill_intervals;
        all.append(&mut intervals);
        result.intervals = all;
        result.drain = Some(DrainResult {
            backlog_bytes,
            backlog_records: backlog,
            fill_s,
            drain_s,
            drain_rps: result.consume_rps,
            drain_mbps: result.consume_mbps,
            live_producer_rps: live_rps,
            fill_generator_cpu_s: cpu1 - cpu0,
            drain_generator_cpu_s: cpu2 - cpu1,
            fill_broker_cpu_s: broker1.zip(broker0).map(|(b, a)| b - a),
            drain_broker_cpu_s: broker2.zip(broker1).map(|(b, a)| b - a),
        });
        fleet.stop_producers(FLUSH_TIMEOUT);
        fleet.stop_consumers();
        Ok(result)
    })
}

/// `correctness`: every record checked; the brokers the benchmark started optionally SIGKILLed
/// and restarted, one at a time, a different one each kill (round-robin), at even or (seeded)
/// random moments. With `[correctness] group` the records are read through a consumer group,
/// whose committed offsets are checked too ([`crate::soak`]).
pub fn correctness(ctx: &mut Context<'_>, w: &Workload, repeat: u32) -> Result<RunResult, String> {
    let c = &w.correctness;
    if c.kills > 0 && ctx.brokers.as_deref().is_none_or(Brokers::is_empty) {
        return Err(
            "correctness with kills needs a broker the benchmark starts itself: pass --broker-cmd"
                .into(),
        );
    }
    let seed = c
        .random_kills
        .then(|| c.seed.unwrap_or_else(crate::soak::clock_seed));
    let schedule = KillSchedule::new(c.kills, w.duration_s, seed);
    if let Some(seed) = seed {
        eprintln!(
            "[{}] {} kills at random moments, seed {seed}",
            ctx.tag, c.kills
        );
    }
    on_fresh_topics(ctx, w, |ctx, topics| {
        let checker = Arc::new(Mutex::new(Checker::new(!w.idempotence)));
        let mut fleet = Fleet::new(
            w,
            ctx.target,
            topics.to_vec(),
            &ctx.run_id,
            Some(checker.clone()),
        );
        let mode = if c.group {
            ConsumerMode::Groups
        } else {
            ConsumerMode::Assign
        };
        let mut offsets = if c.group {
            let group = crate::driver::group_id(&ctx.run_id, 0);
            Some(OffsetWatch::new(w, ctx.target, &group, topics)?)
        } else {
            None
        };
        fleet.start_consumers(mode, SETUP_TIMEOUT)?;
        fleet.start_producers()?;
        fleet.set_measure_window(0, u64::MAX);
        let target = w.target_rps();
        let mut result = blank(repeat, topics, target);
        let cpu0 = fleet.cpu_s();
        let started = Instant::now();
        fleet.set_rate(target);
        let mut intervals = Vec::new();
        let mut kill_log = Vec::new();
        // One ticker throughout: intervals go on while a broker is down (phase `restart`).
        let mut ticker = Ticker::new(&fleet, w.interval_s, &ctx.tag, ctx.quiet);
        for (k, gap_s) in schedule.gaps_s.iter().enumerate() {
            ticker.run_for(*gap_s, "measure");
            if k < c.kills as usize {
                if let Some(watch) = offsets.as_mut() {
                    watch.sample();
                }
                let brokers = ctx.brokers.as_deref_mut().expect("checked above");
                let victim = brokers.next_victim();
                if !ctx.quiet
                    && let Some(b) = brokers.get(victim)
                {
                    eprintln!(
                        "[{}] SIGKILL {}/{} broker {victim} at {} (pid {})",
                        ctx.tag,
                        k + 1,
                        c.kills,
                        b.address(),
                        b.pid().unwrap_or(0)
                    );
                }
                let kill = brokers.kill_next(
                    Duration::from_secs_f64(c.restart_delay_s),
                    fleet.elapsed_s(),
                    |d| ticker.pass(d, "restart"),
                )?;
                ticker.flush_partial("restart");
                if !ctx.quiet {
                    eprintln!(
                        "[{}] broker {victim} restarted (pid {}) {:.1} s after the kill",
                        ctx.tag, kill.restarted_pid, kill.down_s
                    );
                }
                kill_log.push(kill);
            }
        }
        intervals.append(&mut ticker.intervals);
        drop(ticker);
        let measured_s = started.elapsed().as_secs_f64();
        fleet.set_rate(Some(0.0));
        fleet.stop_producers(Duration::from_secs_f64(c.settle_timeout_s));
        // Read every partition up to its high watermark, then until the stream is quiet.
        let mut ends: Vec<(String, i32, i64)> = Vec::new();
        for topic in topics {
            for (p, high) in ctx
                .admin
                .high_watermarks(topic, w.partitions)?
                .into_iter()
                .enumerate()
            {
                ends.push((topic.clone(), p as i32, high));
            }
        }
        let high: i64 = ends.iter().map(|(_, _, h)| h).sum();
        let mut ticker = Ticker::new(&fleet, w.interval_s, &ctx.tag, ctx.quiet);
        let deadline = Instant::now() + Duration::from_secs_f64(c.settle_timeout_s);
        let fleet_ref = &fleet;
        let read_through = || {
            let checker = checker.lock().unwrap_or_else(|p| p.into_inner());
            ends.iter()
                .map(|(t, p, h)| (checker.next_offset(t, *p).min(*h), h))
                .fold((0i64, true), |(sum, all), (next, h)| {
                    (sum + next, all && next >= *h)
                })
        };
        let read_all = ticker.run_until(deadline, "verify", || read_through().1);
        let mut last = fleet.consumed_slowest();
        let mut quiet_since = Instant::now();
        ticker.run_until(deadline, "verify", || {
            let now = fleet_ref.consumed_slowest();
            if now != last {
                last = now;
                quiet_since = Instant::now();
            }
            quiet_since.elapsed() > Duration::from_secs(3)
        });
        intervals.append(&mut ticker.intervals);
        drop(ticker);
        fleet.stop_consumers();
        if let Some(watch) = offsets.as_mut() {
            watch.sample();
        }
        fill_measured(&mut result, &fleet, w, measured_s, fleet.cpu_s() - cpu0);
        let mut report = checker
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .report(kill_log.len() as u32);
        report.recovery = crate::recovery::recovery(&intervals, &kill_log, c.full_fraction);
        report.kill_log = kill_log;
        report.seed = schedule.seed;
        report.group = c.group;
        if let Some(tracker) = offsets.as_ref().map(OffsetWatch::tracker) {
            report.offset_samples = tracker.samples;
            report.offset_regressions = tracker.regressions;
            report.examples.extend(tracker.examples.iter().cloned());
            report.passed &= tracker.regressions == 0;
        }
        result.intervals = intervals;
        if !read_all {
            report.passed = false;
            report.examples.push(format!(
                "read back through offset {} of the {high} below the high watermarks, within {} s",
                read_through().0,
                c.settle_timeout_s
            ));
        }
        result.correctness = Some(report);
        Ok(result)
    })
}
