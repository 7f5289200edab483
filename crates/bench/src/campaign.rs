//! A campaign: every test point of a workload file, each repeated, in one mode, with its
//! results directory.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::{SystemTime, UNIX_EPOCH};

use crate::admin::{self, Admin};
use crate::broker::Brokers;
use crate::driver;
use crate::machine;
use crate::modes::{self, Context};
use crate::report;
use crate::result::{
    BrokerInfo, Campaign, ClientInfo, FORMAT_VERSION, PointResult, RunResult, Spread,
};
use crate::stats;
use crate::target::{self, Target};
use crate::workload;

/// The modes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    Run,
    Explore,
    Drain,
    Correctness,
    /// A retry storm and the recovery from it ([`crate::storm`]).
    Storm,
}

impl Mode {
    pub fn name(self) -> &'static str {
        match self {
            Mode::Run => "run",
            Mode::Explore => "explore",
            Mode::Drain => "drain",
            Mode::Correctness => "correctness",
            Mode::Storm => "storm",
        }
    }
}

/// Everything a campaign is given besides the workload.
#[derive(Debug, Clone)]
pub struct Options {
    pub workload_file: PathBuf,
    pub bootstrap: String,
    /// librdkafka properties for every client (`--client-config`, `-X`): how to connect
    /// (security protocol, SASL, CA), applied after every other setting.
    pub client_properties: Vec<(String, String)>,
    /// Parent directory; each campaign gets a new subdirectory.
    pub out: PathBuf,
    pub broker_label: String,
    pub broker_version: Option<String>,
    /// Start these broker commands, one per broker (and for `correctness`, kill and restart
    /// them in turn). Empty: the cluster at `bootstrap` was started elsewhere.
    pub broker_cmd: Vec<String>,
    /// Broker processes started elsewhere whose CPU time each repeat records (`--broker-pid`).
    pub broker_pids: Vec<u32>,
    /// Fail when the load generator was saturated.
    pub strict: bool,
    pub quiet: bool,
}

/// What a finished campaign left behind.
#[derive(Debug)]
pub struct Outcome {
    pub dir: PathBuf,
    pub campaign: Campaign,
    /// False when a correctness check failed, or `strict` and the generator saturated.
    pub passed: bool,
}

/// Runs a campaign and writes its directory. Errors say what went wrong; a campaign that fails
/// part-way still writes the points it finished.
pub fn execute(mode: Mode, options: &Options) -> Result<Outcome, String> {
    let text = std::fs::read_to_string(&options.workload_file)
        .map_err(|e| format!("cannot read {}: {e}", options.workload_file.display()))?;
    let plan =
        workload::parse(&text).map_err(|e| format!("{}: {e}", options.workload_file.display()))?;
    if mode != Mode::Drain
        && let Some(p) = plan.points.iter().find(|p| p.workload.share_consumers > 0)
    {
        return Err(format!(
            "{}: share consumers run in `sluice bench drain` only (point {} has \
             share_consumers = {})",
            options.workload_file.display(),
            p.label,
            p.workload.share_consumers
        ));
    }
    let name = plan.points[0].workload.name.clone();
    let started = SystemTime::now();
    let stamp = compact_stamp(started);
    let dir = unique_dir(
        &options.out,
        &format!("{}-{}-{stamp}", sanitize(&name), mode.name()),
    )?;
    let workload_copy = options
        .workload_file
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| "workload.toml".into());
    std::fs::write(dir.join(&workload_copy), &text)
        .map_err(|e| format!("cannot write into {}: {e}", dir.display()))?;

    // Dropping `brokers` stops every one of them, so no early return below leaves one running.
    let mut brokers = if options.broker_cmd.is_empty() {
        None
    } else {
        let mut b = Brokers::new(&options.broker_cmd, &options.bootstrap, &dir)?;
        if !options.quiet && b.len() > 1 {
            eprintln!("bench: starting {} brokers", b.len());
        }
        b.start_all()?;
        Some(b)
    };
    let target = Target {
        bootstrap: options.bootstrap.clone(),
        properties: options.client_properties.clone(),
    };
    let admin = Admin::connect(&target)?;
    let steal_before = machine::cpu_steal_ticks();
    let version = options
        .broker_version
        .clone()
        .or_else(|| brokers.as_ref().and_then(Brokers::version))
        .unwrap_or_else(|| "unknown".into());
    let first = &plan.points[0].workload;
    let mut campaign = Campaign {
        format: FORMAT_VERSION,
        mode: mode.name().into(),
        name: name.clone(),
        started_at: rfc3339(started),
        finished_at: String::new(),
        bootstrap: options.bootstrap.clone(),
        client: ClientInfo {
            name: admin::client_name(),
            producer_config: target::redacted(&driver::producer_settings(first, &target)),
            consumer_config: target::redacted(&driver::consumer_settings(first, &target)),
            properties: target::redacted(&target.properties),
        },
        broker: BrokerInfo {
            label: options.broker_label.clone(),
            version,
        },
        brokers: brokers.as_ref().map(Brokers::describe).unwrap_or_default(),
        sluice_version: env!("CARGO_PKG_VERSION").into(),
        git_commit: machine::git_commit().into(),
        machine: machine::machine(),
        workload_file: workload_copy,
        dimensions: plan.dimensions.clone(),
        points: Vec::new(),
        warnings: Vec::new(),
    };
    if !options.quiet {
        eprintln!(
            "bench: {} {} against {} ({}, {}), {} test point(s), client {}; results in {}",
            mode.name(),
            name,
            options.bootstrap,
            campaign.broker.label,
            target.security_protocol(),
            plan.points.len(),
            campaign.client.name,
            dir.display()
        );
    }
    let mut failure = None;
    'points: for (index, point) in plan.points.iter().enumerate() {
        let w = &point.workload;
        let mut repeats = Vec::new();
        for repeat in 0..w.repeats {
            let mut ctx = Context {
                admin: &admin,
                target: &target,
                run_id: format!("{stamp}-p{index}-r{repeat}"),
                tag: format!("p{index} r{repeat}"),
                brokers: brokers.as_mut(),
                broker_pids: &options.broker_pids,
                quiet: options.quiet,
            };
            if !options.quiet {
                eprintln!(
                    "bench: point p{index} ({}), repeat {}/{}",
                    point.label,
                    repeat + 1,
                    w.repeats
                );
            }
            let outcome = match mode {
                Mode::Run => modes::run(&mut ctx, w, repeat),
                Mode::Explore => modes::explore(&mut ctx, w, repeat),
                Mode::Drain => modes::drain(&mut ctx, w, repeat),
                Mode::Correctness => modes::correctness(&mut ctx, w, repeat),
                Mode::Storm => crate::storm::storm(&mut ctx, w, repeat),
            };
            match outcome {
                Ok(result) => repeats.push(result),
                Err(e) => {
                    failure = Some(format!(
                        "point p{index} ({}) repeat {repeat}: {e}",
                        point.label
                    ));
                    if !repeats.is_empty() {
                        campaign.points.push(point_result(index, point, repeats));
                    }
                    break 'points;
                }
            }
        }
        campaign.points.push(point_result(index, point, repeats));
    }
    if let Some(b) = brokers.as_mut() {
        b.stop_all();
        // With every PID each broker had, restarts included.
        campaign.brokers = b.describe();
    }
    campaign.warnings = warnings(&campaign);
    if let (Some(before), Some(after)) = (steal_before, machine::cpu_steal_ticks()) {
        let share = machine::steal_share(before, after);
        if share > 0.02 {
            campaign.warnings.push(format!(
                "the hypervisor took {:.0}% of this machine's CPU time during the campaign \
                 (steal): latency tails and throughput are noisier than on a dedicated machine",
                share * 100.0
            ));
        }
    }
    if let Some(f) = &failure {
        campaign
            .warnings
            .insert(0, format!("the campaign stopped early: {f}"));
    }
    campaign.finished_at = rfc3339(SystemTime::now());
    report::write_campaign(&dir, &campaign).map_err(|e| e.to_string())?;
    if let Some(f) = failure {
        return Err(format!("{f} (partial results in {})", dir.display()));
    }
    let correct = campaign
        .points
        .iter()
        .flat_map(|p| &p.repeats)
        .all(|r| r.correctness.as_ref().is_none_or(|c| c.passed));
    let saturated = campaign
        .points
        .iter()
        .flat_map(|p| &p.repeats)
        .any(|r| r.generator_saturated);
    let passed = correct && !(options.strict && saturated);
    Ok(Outcome {
        dir,
        campaign,
        passed,
    })
}

fn point_result(index: usize, point: &workload::Point, repeats: Vec<RunResult>) -> PointResult {
    PointResult {
        id: format!("p{index}"),
        label: point.label.clone(),
        params: point.params.clone(),
        workload: serde_json::to_value(&point.workload).unwrap_or(serde_json::Value::Null),
        spread: spreads(&repeats),
        repeats,
    }
}

/// The headline numbers of each repeat, by name.
pub fn headline(r: &RunResult) -> Vec<(&'static str, f64)> {
    let mut out = vec![
        ("produce_rps", r.produce_rps),
        ("produce_mbps", r.produce_mbps),
        ("consume_rps", r.consume_rps),
        ("consume_mbps", r.consume_mbps),
    ];
    // Latencies only where something was measured (zeros would read as "instant").
    if r.ack_latency.count > 0 {
        out.push(("ack_p50_ms", r.ack_latency.p50_ms));
        out.push(("ack_p99_ms", r.ack_latency.p99_ms));
    }
    if r.e2e_latency.count > 0 {
        out.push(("e2e_p50_ms", r.e2e_latency.p50_ms));
        out.push(("e2e_p99_ms", r.e2e_latency.p99_ms));
        out.push(("e2e_p99_9_ms", r.e2e_latency.p99_9_ms));
        out.push(("e2e_max_ms", r.e2e_latency.max_ms));
    }
    if let Some(rate) = r.explore.as_ref().and_then(|e| e.sustained_rps) {
        out.push(("sustained_rps", rate));
    }
    if let Some(d) = &r.drain {
        out.push(("drain_s", d.drain_s));
        out.push(("drain_mbps", d.drain_mbps));
    }
    if let Some(cpu_s) = r.broker_cpu_s {
        out.push(("broker_cpu_s", cpu_s));
    }
    if let Some(v) = r.broker_cpu_s_per_m_produced() {
        out.push(("broker_cpu_s_per_m_produced", v));
    }
    if let Some(v) = r.broker_cpu_s_per_m_consumed() {
        out.push(("broker_cpu_s_per_m_consumed", v));
    }
    if let Some(sh) = &r.share {
        if let Some(spread) = &sh.per_consumer_spread {
            out.push(("share_consumer_min", spread.min));
            out.push(("share_consumer_median", spread.median));
            out.push(("share_consumer_max", spread.max));
        }
        if let Some(j) = sh.jain_index {
            out.push(("share_jain", j));
        }
        out.push(("share_idle_consumers", f64::from(sh.idle_consumers)));
        out.push(("share_errors", sh.errors as f64));
        if let Some(s) = sh.kill.as_ref().and_then(|k| k.redelivery_s) {
            out.push(("share_redelivery_s", s));
        }
    }
    if let Some(c) = &r.correctness {
        out.push(("lost", c.lost as f64));
        out.push(("duplicated", c.duplicated as f64));
        out.push(("out_of_order", c.out_of_order as f64));
        out.push(("corrupted", c.corrupted as f64));
    }
    if let Some(st) = &r.storm {
        out.extend(storm_headline(st));
    }
    out.retain(|(_, v)| v.is_finite());
    out
}

/// The storm's headline numbers: capacity, per-phase goodput as a share of the offered new
/// records, the after phase's p99, recovery time (`after_s` + 1 when not recovered, so that
/// "not recovered" still sorts as the worst), and the wasted appends.
pub(crate) fn storm_headline(st: &crate::result::StormResult) -> Vec<(&'static str, f64)> {
    let mut out = vec![("storm_capacity_rps", st.capacity_rps)];
    for p in &st.phases {
        let key = match p.phase.as_str() {
            "storm" => "storm_goodput_storm",
            "after" => "storm_goodput_after",
            _ => continue,
        };
        if p.offered_rps > 0.0 {
            out.push((key, p.goodput_fresh_rps / p.offered_rps));
        }
        if p.phase == "after"
            && let Some(ms) = p.ack_p99_ms
        {
            out.push(("storm_p99_after_ms", ms));
        }
        if p.phase == "storm"
            && let Some(ms) = p.ack_p99_ms
        {
            out.push(("storm_p99_storm_ms", ms));
        }
    }
    out.push((
        "storm_recovery_s",
        st.recovery_s.unwrap_or(st.after_s as f64 + 1.0),
    ));
    if let Some(w) = st.wasted_appends {
        out.push(("storm_wasted_appends", w as f64));
    }
    out
}

fn spreads(repeats: &[RunResult]) -> BTreeMap<String, Spread> {
    let mut values: BTreeMap<&'static str, Vec<f64>> = BTreeMap::new();
    for r in repeats {
        for (k, v) in headline(r) {
            values.entry(k).or_default().push(v);
        }
    }
    values
        .into_iter()
        .filter_map(|(k, v)| stats::spread(&v).map(|s| (k.to_string(), s)))
        .collect()
}

/// Loud notes on anything that makes the numbers less trustworthy.
fn warnings(campaign: &Campaign) -> Vec<String> {
    let mut out = Vec::new();
    for p in &campaign.points {
        for r in &p.repeats {
            if r.generator_saturated {
                out.push(format!(
                    "LOAD GENERATOR SATURATED in {} repeat {}: it could not send at the intended rate \
                     (largest schedule lag {:.0} ms, {:.0}% of the time blocked by the broker); \
                     these numbers understate the broker",
                    p.label,
                    r.repeat,
                    r.max_send_lag_ms,
                    r.backpressure_fraction * 100.0
                ));
            }
            if let Some(st) = &r.storm {
                out.extend(storm_warnings(&p.label, r.repeat, st));
            } else if r.totals.failed_records > 0 {
                out.push(format!(
                    "{} repeat {}: {} records failed delivery",
                    p.label, r.repeat, r.totals.failed_records
                ));
            }
            if let Some(sh) = &r.share {
                out.extend(share_warnings(&p.label, r.repeat, sh));
            }
        }
        if let Some(sh) = p
            .repeats
            .iter()
            .filter_map(|r| r.share.as_ref())
            .find(|sh| !sh.acquire_mode_on_wire)
        {
            out.push(format!(
                "{}: share acquire_mode {:?} is recorded, not sent: ShareFetch v{} has no \
                 acquire mode (the broker{} applies its own; Kafka's is batch_optimized)",
                p.label,
                sh.acquire_mode,
                sh.share_fetch_version,
                sh.broker_share_fetch_versions
                    .map_or_else(String::new, |[a, b]| format!(", serving v{a}-v{b},"))
            ));
        }
        for key in [
            "produce_rps",
            "consume_rps",
            "e2e_p99_ms",
            "sustained_rps",
            "drain_s",
        ] {
            if let Some(s) = p.spread.get(key)
                && s.n >= 2
                && s.cv > 0.10
            {
                out.push(format!(
                    "{}: {key} varies {:.0}% across {} repeats (min {:.1}, median {:.1}, max {:.1})",
                    p.label,
                    s.cv * 100.0,
                    s.n,
                    s.min,
                    s.median,
                    s.max
                ));
            }
        }
    }
    out
}

/// What makes a share repeat's numbers less trustworthy, or incomplete.
/// A storm fails deliveries on purpose; what is worth a warning is a run that did not show
/// what it was meant to.
fn storm_warnings(label: &str, repeat: u32, st: &crate::result::StormResult) -> Vec<String> {
    let mut out = Vec::new();
    if st.recovery_s.is_none() {
        out.push(format!(
            "{label} repeat {repeat}: goodput did not recover to {:.0}% of the offered rate \
             within {} s after the storm",
            st.recovered_fraction * 100.0,
            st.after_s
        ));
    }
    if st.failed == 0 {
        out.push(format!(
            "{label} repeat {repeat}: no delivery failed during the storm: the overload did not \
             make requests time out (raise storm.overload or lower request_timeout_ms)"
        ));
    }
    for ph in &st.phases {
        let factor = match ph.phase.as_str() {
            "storm" => st.overload,
            "before" | "after" => st.after,
            _ => continue,
        };
        let intended = factor * st.capacity_rps;
        if ph.offered_rps < 0.97 * intended {
            out.push(format!(
                "{label} repeat {repeat}: in phase {} the generator offered {:.0} new records/s \
                 (median) of the intended {intended:.0}/s: its clients' queues were full or it \
                 fell behind",
                ph.phase, ph.offered_rps
            ));
        }
    }
    if st.unresolved > 0 {
        out.push(format!(
            "{label} repeat {repeat}: {} attempts had no delivery report when settling ended",
            st.unresolved
        ));
    }
    out
}

fn share_warnings(label: &str, repeat: u32, sh: &crate::result::ShareResult) -> Vec<String> {
    let mut out = Vec::new();
    let at = format!("{label} repeat {repeat}");
    if sh.errors > 0 {
        let kinds: Vec<String> = sh
            .error_counts
            .iter()
            .map(|(k, n)| format!("{k} ×{n}"))
            .collect();
        out.push(format!(
            "{at}: the share consumers met {} error(s): {}",
            sh.errors,
            kinds.join(", ")
        ));
    }
    if sh.backlog_exhausted {
        out.push(format!(
            "{at}: the share consumers processed the whole backlog {:.1} s into the measured \
             window: its rate includes the tail where consumers ran out of records (make \
             [drain] backlog larger)",
            sh.measured_s
        ));
    }
    if sh.assigned_consumers < sh.consumers {
        out.push(format!(
            "{at}: only {} of {} share consumers had partitions when the window started",
            sh.assigned_consumers, sh.consumers
        ));
    }
    if sh.aborted_at_stop > 0 {
        out.push(format!(
            "{at}: {} share consumer(s) did not close within the stop timeout and were aborted",
            sh.aborted_at_stop
        ));
    }
    if let Some(k) = sh.kill.as_ref().filter(|k| k.held_records == 0) {
        out.push(format!(
            "{at}: share consumer {} held no records when it was killed: no redelivery to time",
            k.consumer
        ));
    } else if let Some(k) = sh.kill.as_ref().filter(|k| k.redelivery_s.is_none()) {
        out.push(format!(
            "{at}: {} of the {} records the killed consumer held reached another consumer \
             before the run ended (lock timeout {} ms)",
            k.redelivered_records,
            k.held_records,
            sh.lock_timeout_ms
                .map_or_else(|| "unknown".to_owned(), |ms| ms.to_string())
        ));
    }
    out
}

fn sanitize(name: &str) -> String {
    let s: String = name
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' || c == '_' {
                c
            } else {
                '-'
            }
        })
        .take(60)
        .collect();
    if s.is_empty() { "workload".into() } else { s }
}

fn unique_dir(parent: &Path, base: &str) -> Result<PathBuf, String> {
    std::fs::create_dir_all(parent)
        .map_err(|e| format!("cannot create {}: {e}", parent.display()))?;
    for n in 0..100 {
        let candidate = if n == 0 {
            parent.join(base)
        } else {
            parent.join(format!("{base}-{n}"))
        };
        match std::fs::create_dir(&candidate) {
            Ok(()) => return Ok(candidate),
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => continue,
            Err(e) => return Err(format!("cannot create {}: {e}", candidate.display())),
        }
    }
    Err(format!(
        "cannot find a free directory name for {base} in {}",
        parent.display()
    ))
}

/// (year, month, day, hour, minute, second) in UTC.
fn civil(t: SystemTime) -> (i64, u32, u32, u32, u32, u32) {
    let secs = t
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs() as i64)
        .unwrap_or(0);
    let days = secs.div_euclid(86_400);
    let rem = secs.rem_euclid(86_400);
    // Days since 1970-01-01 to a proleptic Gregorian date.
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let month = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    let year = yoe + era * 400 + i64::from(month <= 2);
    (
        year,
        month,
        day,
        (rem / 3600) as u32,
        (rem % 3600 / 60) as u32,
        (rem % 60) as u32,
    )
}

pub fn rfc3339(t: SystemTime) -> String {
    let (y, mo, d, h, mi, s) = civil(t);
    format!("{y:04}-{mo:02}-{d:02}T{h:02}:{mi:02}:{s:02}Z")
}

fn compact_stamp(t: SystemTime) -> String {
    let (y, mo, d, h, mi, s) = civil(t);
    format!("{y:04}{mo:02}{d:02}T{h:02}{mi:02}{s:02}Z")
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn timestamps_are_utc_calendar_dates() {
        let t = UNIX_EPOCH + Duration::from_secs(1_795_000_000);
        assert_eq!(rfc3339(t), "2026-11-18T11:06:40Z");
        assert_eq!(
            rfc3339(UNIX_EPOCH + Duration::from_secs(951_782_400)),
            "2000-02-29T00:00:00Z"
        );
        assert_eq!(compact_stamp(UNIX_EPOCH), "19700101T000000Z");
    }

    #[test]
    fn names_become_safe_directory_names() {
        assert_eq!(sanitize("a b/../c"), "a-b----c");
        assert_eq!(sanitize(""), "workload");
    }
}
