//! What a campaign writes: the JSON schema of `campaign.json` (and, for one test point, the
//! `points/<id>.json` files), shared by the runner that fills it and the reports that read it.
//!
//! Times are in milliseconds (`*_ms`) or seconds (`*_s`), rates in records per second (`*_rps`)
//! or megabytes (10^6 bytes) per second (`*_mbps`). Every struct round-trips through serde so that
//! `sluice bench compare` can read directories written by earlier runs.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// Bumped when a field changes meaning; readers refuse newer formats.
pub const FORMAT_VERSION: u32 = 1;

/// One campaign: a workload file run in one mode against one cluster.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Campaign {
    pub format: u32,
    /// `run`, `explore`, `drain`, `correctness` or `storm`.
    pub mode: String,
    /// The workload's `name`.
    pub name: String,
    /// RFC 3339, UTC.
    pub started_at: String,
    pub finished_at: String,
    /// The bootstrap address the load went to.
    pub bootstrap: String,
    pub client: ClientInfo,
    pub broker: BrokerInfo,
    /// The brokers the benchmark started itself (`--broker-cmd`, in command-line order); empty
    /// when it ran against a cluster started elsewhere.
    #[serde(default)]
    pub brokers: Vec<StartedBroker>,
    /// The `sluice` build that ran the benchmark.
    pub sluice_version: String,
    pub git_commit: String,
    pub machine: Machine,
    /// File name (inside the campaign directory) of the workload file, copied as given.
    pub workload_file: String,
    /// Names of the workload fields given as lists, in file order.
    pub dimensions: Vec<String>,
    pub points: Vec<PointResult>,
    /// Everything the run warned about (saturated load generator, high variance, ...).
    pub warnings: Vec<String>,
}

/// The client that drove the load, and the settings every broker got.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct ClientInfo {
    /// e.g. `librdkafka 2.12.1 (rdkafka crate 0.38)`.
    pub name: String,
    /// Producer settings common to every test point (before per-point overrides); secrets
    /// (passwords, keys, tokens) read `***`.
    pub producer_config: BTreeMap<String, String>,
    pub consumer_config: BTreeMap<String, String>,
    /// The connection properties of every client (`--client-config`, `-X`: security protocol,
    /// SASL, CA), secrets as `***`; empty for librdkafka's defaults (PLAINTEXT).
    #[serde(default)]
    pub properties: BTreeMap<String, String>,
}

impl ClientInfo {
    /// `security.protocol` as the clients used it, upper case (`PLAINTEXT` by default).
    pub fn security_protocol(&self) -> String {
        self.properties
            .get("security.protocol")
            .map_or_else(|| "PLAINTEXT".to_owned(), |p| p.to_ascii_uppercase())
    }
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct BrokerInfo {
    /// A label for reports, from `--broker-label` (e.g. `sluice`, `kafka-4.3.1`).
    pub label: String,
    /// The broker's version as far as it can be told (`--broker-version`, `--version` of a
    /// broker the benchmark started, or `unknown`).
    pub version: String,
}

/// A broker the benchmark started (one `--broker-cmd`).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Default)]
pub struct StartedBroker {
    /// Its position among the `--broker-cmd` flags, from 0 (kills name brokers by it).
    pub index: u32,
    /// Where it accepts Kafka connections (the benchmark waits for this after each start).
    pub address: String,
    /// The command, with passwords and secret-looking values replaced by `***`.
    pub command: String,
    /// Its output, a file in the campaign directory.
    pub log: String,
    /// Every PID it had, first start first (each restart after a kill adds one).
    pub pids: Vec<u32>,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Default)]
pub struct Machine {
    pub hostname: String,
    pub cpu_model: String,
    pub nproc: u32,
    pub memory_bytes: u64,
    /// `scaling_governor` of cpu0 when the kernel exposes it.
    pub cpu_governor: Option<String>,
    /// `max` MHz of cpu0 when visible (cpufreq or /proc/cpuinfo).
    pub cpu_mhz: Option<f64>,
    pub kernel: String,
    pub os: String,
}

/// One test point: one combination of dimension values, run `repeats` times.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct PointResult {
    /// `p0`, `p1`, ... in run order.
    pub id: String,
    /// Human-readable dimension values, e.g. `record_size=100 producer_rate=20MB/s`, or the
    /// workload name when there are no dimensions.
    pub label: String,
    /// The dimension values of this point (field name -> value as written in the workload).
    pub params: BTreeMap<String, serde_json::Value>,
    /// The whole effective workload of this point, after defaults.
    pub workload: serde_json::Value,
    pub repeats: Vec<RunResult>,
    /// Spread of the headline numbers across repeats (keys such as `produce_rps`,
    /// `e2e_p99_ms`, `drain_s`, `sustained_rps`).
    pub spread: BTreeMap<String, Spread>,
}

/// min / median / max (and the relative standard deviation) of one number across repeats.
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq)]
pub struct Spread {
    pub n: u32,
    pub min: f64,
    pub median: f64,
    pub max: f64,
    pub mean: f64,
    /// Sample standard deviation over mean (0 when n < 2).
    pub cv: f64,
}

/// One repeat of one test point.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct RunResult {
    pub repeat: u32,
    /// The topics this repeat created (and deleted afterwards).
    pub topics: Vec<String>,
    /// Intended producer rate in records/s over all producers; `None` for "max".
    pub target_rps: Option<f64>,
    /// Length of the measured part (warm-up excluded), seconds.
    pub measured_s: f64,
    pub totals: Totals,
    pub produce_rps: f64,
    pub produce_mbps: f64,
    pub consume_rps: f64,
    pub consume_mbps: f64,
    /// From each record's intended send time to its acknowledgement.
    pub ack_latency: Latency,
    /// From each record's intended send time to its arrival at a consumer.
    pub e2e_latency: Latency,
    /// The load generator could not send at the intended rate for reasons of its own (not
    /// broker back-pressure); the numbers understate the broker.
    pub generator_saturated: bool,
    /// Largest lag of a producer behind its send schedule, ms.
    pub max_send_lag_ms: f64,
    /// Share of the measured time producers spent blocked on a full client queue (broker
    /// back-pressure), 0..1.
    pub backpressure_fraction: f64,
    /// CPU seconds the benchmark process used during the measured part (user + system).
    pub generator_cpu_s: f64,
    /// CPU seconds the broker processes used during the measured part (user + system, from
    /// `/proc/PID/stat`), when the benchmark knew their PIDs (`--broker-pid`, or brokers it
    /// started itself); `None` otherwise, and in `correctness`, whose restarts change them.
    #[serde(default)]
    pub broker_cpu_s: Option<f64>,
    /// Per reporting interval, warm-up included (its `phase` says which).
    pub intervals: Vec<Interval>,
    pub explore: Option<ExploreResult>,
    pub drain: Option<DrainResult>,
    pub correctness: Option<CorrectnessReport>,
    /// The share consumers' outcome (`drain` with `share_consumers`), absent otherwise.
    #[serde(default)]
    pub share: Option<ShareResult>,
    /// The retry storm's outcome (`storm`), absent otherwise.
    #[serde(default)]
    pub storm: Option<StormResult>,
}

impl RunResult {
    /// The brokers' CPU seconds per million records produced: in `drain`, while building the
    /// backlog; elsewhere over the measured part, which includes serving any consumers that
    /// read along. `None` without broker PIDs or records.
    pub fn broker_cpu_s_per_m_produced(&self) -> Option<f64> {
        let (cpu_s, records) = match &self.drain {
            Some(d) => (d.fill_broker_cpu_s?, d.backlog_records),
            None => (self.broker_cpu_s?, self.totals.acked_records),
        };
        (records > 0).then(|| cpu_s / (records as f64 / 1e6))
    }

    /// The brokers' CPU seconds per million records consumed while draining a backlog
    /// (`drain` only, where nothing else runs).
    pub fn broker_cpu_s_per_m_consumed(&self) -> Option<f64> {
        let cpu_s = self.drain.as_ref()?.drain_broker_cpu_s?;
        let records = self.totals.consumed_records;
        (records > 0).then(|| cpu_s / (records as f64 / 1e6))
    }
}

#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Default)]
pub struct Totals {
    pub sent_records: u64,
    pub sent_bytes: u64,
    pub acked_records: u64,
    pub acked_bytes: u64,
    /// Delivery reports with an error (after the client's own retries).
    pub failed_records: u64,
    pub consumed_records: u64,
    pub consumed_bytes: u64,
}

/// A latency distribution in milliseconds.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Default)]
pub struct Latency {
    pub count: u64,
    pub min_ms: f64,
    pub mean_ms: f64,
    pub p50_ms: f64,
    pub p75_ms: f64,
    pub p90_ms: f64,
    pub p95_ms: f64,
    pub p99_ms: f64,
    pub p99_9_ms: f64,
    pub p99_99_ms: f64,
    pub max_ms: f64,
    /// `[percentile, ms]` pairs for a distribution chart, percentile ascending (0..100),
    /// denser towards the tail (e.g. 0, 10, ..., 90, 95, 99, 99.5, 99.9, ..., 100).
    pub distribution: Vec<[f64; 2]>,
}

/// One reporting interval.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Interval {
    /// End of the interval, seconds since the repeat started (warm-up included).
    pub t_s: f64,
    /// `warmup`, `measure`, `fill`, `drain`, or for explore e.g. `ramp@20000`, `search@15000`,
    /// `sustain@15000`.
    pub phase: String,
    pub sent_rps: f64,
    pub acked_rps: f64,
    pub acked_mbps: f64,
    pub consumed_rps: f64,
    pub consumed_mbps: f64,
    pub ack: BriefLatency,
    pub e2e: BriefLatency,
    /// Records acknowledged but not yet consumed (by the slowest group), at the interval's end.
    pub lag_records: i64,
    /// Share of the machine's CPU time the hypervisor took during the interval (steal, 0..1;
    /// 0 where the kernel does not say). High values explain latency spikes no broker caused.
    #[serde(default)]
    pub steal: f64,
}

#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Default)]
pub struct BriefLatency {
    pub count: u64,
    pub p50_ms: f64,
    pub p99_ms: f64,
    pub p99_9_ms: f64,
    pub max_ms: f64,
}

/// The outcome of `explore`.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct ExploreResult {
    /// The latency percentile the target applies to (e.g. 99.0).
    pub percentile: f64,
    pub target_ms: f64,
    pub steps: Vec<ExploreStep>,
    /// The highest rate that passed its sustain phase, records/s.
    pub sustained_rps: Option<f64>,
    pub sustained_mbps: Option<f64>,
    /// Share of sustain intervals that met the target in the passing sustain phase.
    pub sustain_pass_fraction: Option<f64>,
    pub passed: bool,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct ExploreStep {
    /// `ramp`, `search` or `sustain`.
    pub phase: String,
    pub target_rps: f64,
    pub achieved_rps: f64,
    /// e2e latency at the chosen percentile over the step, ms.
    pub e2e_ms: f64,
    pub met: bool,
    /// Why it missed, when it did (latency, rate not reached, lag growing, generator saturated).
    pub reason: Option<String>,
}

/// The outcome of `drain`.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct DrainResult {
    pub backlog_bytes: u64,
    pub backlog_records: u64,
    /// Time to build the backlog (producers only), seconds.
    pub fill_s: f64,
    /// Time for the consumers to read the backlog (and catch up with any live producers).
    pub drain_s: f64,
    pub drain_rps: f64,
    pub drain_mbps: f64,
    /// Producer rate kept up while draining, records/s (0 when producers stopped).
    pub live_producer_rps: f64,
    /// CPU seconds the benchmark process used while building the backlog, and while draining
    /// it (the client's share of each phase; `generator_cpu_s` is both together).
    #[serde(default)]
    pub fill_generator_cpu_s: f64,
    #[serde(default)]
    pub drain_generator_cpu_s: f64,
    /// The brokers' CPU seconds while building the backlog, and while draining it (see
    /// [`RunResult::broker_cpu_s`]).
    #[serde(default)]
    pub fill_broker_cpu_s: Option<f64>,
    #[serde(default)]
    pub drain_broker_cpu_s: Option<f64>,
}

/// The outcome of a `drain` with share consumers (KIP-932): a backlog built first, then a
/// share group of `consumers` members reading it for the measured window.
///
/// In such a repeat `consume_rps` is the share group's rate over the measured window, and the
/// `drain` fields describe that window (`drain_s` is its length, not the time to drain the
/// whole backlog; `drain_broker_cpu_s` the brokers' CPU time in it), so that
/// `broker_cpu_s_per_m_consumed` is the brokers' CPU seconds per million records the group
/// processed.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Default)]
pub struct ShareResult {
    pub consumers: u32,
    pub group: String,
    pub processing_ms_per_record: f64,
    /// `max_records` (and `batch_size`) of every ShareFetch.
    pub max_poll_records: u32,
    /// `max_bytes` of every ShareFetch.
    #[serde(default)]
    pub max_bytes: u32,
    /// The workload's `acquire_mode`, as recorded.
    pub acquire_mode: String,
    /// Whether the acquire mode went to the broker: only ShareFetch v2 carries it (a broker
    /// serving v1 only applies its own mode).
    pub acquire_mode_on_wire: bool,
    /// The ShareFetch version used, and the range the broker serves.
    pub share_fetch_version: i16,
    pub broker_share_fetch_versions: Option<[i16; 2]>,
    /// The group configs set before the consumers joined (`share.acquire.policy` among them
    /// when the workload sets `policy`).
    pub group_configs: BTreeMap<String, String>,
    /// The acquisition lock timeout the broker reported in its ShareFetch responses, ms.
    pub lock_timeout_ms: Option<i64>,
    /// Length of the measured window, seconds (warm-up excluded).
    pub measured_s: f64,
    /// Records processed in the measured window, every delivery counted.
    pub records: u64,
    pub rps: f64,
    /// Records each consumer processed in the measured window, by consumer.
    pub per_consumer: Vec<u64>,
    /// min / median / max over the consumers of `per_consumer`.
    pub per_consumer_spread: Option<Spread>,
    /// Jain's fairness index of `per_consumer`: 1 when every consumer got the same, 1/n when
    /// one got everything; `None` when none got anything.
    pub jain_index: Option<f64>,
    /// Consumers that processed nothing in the measured window.
    pub idle_consumers: u32,
    /// Consumers with partitions assigned when the measured window started.
    pub assigned_consumers: u32,
    /// Over the whole run (warm-up and stop included): records processed (every delivery),
    /// distinct records processed, and distinct records processed more than once.
    pub processed_total: u64,
    pub distinct_records: u64,
    pub redelivered_records: u64,
    /// Records acquired (inside acquired ranges), ShareFetch requests, and those that acquired
    /// nothing, over the whole run.
    pub acquired_records: u64,
    pub fetches: u64,
    pub empty_fetches: u64,
    /// Bytes of record batches the ShareFetch responses carried (acquired records and the
    /// others their batches hold), over the whole run.
    pub fetched_bytes: u64,
    /// ShareFetch round trips over the whole run, from the request leaving to its answer
    /// (the broker's wait for records and the acknowledgements' durable write included): all
    /// of them, and those that acquired records.
    pub fetch_latency: Latency,
    pub fetch_latency_acquired: Latency,
    /// Errors of every kind (protocol error codes and connection failures), and by kind.
    pub errors: u64,
    pub error_counts: BTreeMap<String, u64>,
    /// The first few error messages.
    pub error_examples: Vec<String>,
    pub rejoins: u64,
    pub session_reopens: u64,
    pub reconnects: u64,
    /// Every record of the backlog was processed before the measured window was over: the
    /// window was cut short, and its rate includes the tail where consumers ran out of work.
    pub backlog_exhausted: bool,
    /// Consumers still running after the stop timeout, aborted.
    pub aborted_at_stop: u32,
    /// The consumer killed during the run (`kill_consumer_after_s`), if any.
    pub kill: Option<ShareKill>,
}

/// One share consumer killed like a crashed process (its connection dropped without a final
/// acknowledgement), and how long its locked records took to reach the other consumers.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Default)]
pub struct ShareKill {
    /// Index of the consumer killed (the one holding the most records at that moment).
    pub consumer: u32,
    /// When, seconds after the consumers started.
    pub at_s: f64,
    /// Records it held acquired and unacknowledged.
    pub held_records: u64,
    /// From the kill until another consumer acquired the first, and the last, of them;
    /// `None` when that did not happen before the run ended.
    pub first_redelivery_s: Option<f64>,
    pub redelivery_s: Option<f64>,
    /// Held records acquired by another consumer before the run ended.
    pub redelivered_records: u64,
}

/// The outcome of `correctness`.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Default)]
pub struct CorrectnessReport {
    /// SIGKILLs of the broker done during the run.
    pub kills: u32,
    /// Each of those kills: which broker, when, and how long until it listened again.
    #[serde(default)]
    pub kill_log: Vec<BrokerKill>,
    pub acked: u64,
    /// Distinct records read back (acknowledged or not).
    pub seen: u64,
    pub lost: u64,
    pub duplicated: u64,
    pub out_of_order: u64,
    pub corrupted: u64,
    /// Records read back that were never acknowledged (allowed: their ack was lost in a crash).
    pub unacked_present: u64,
    pub partitions: Vec<PartitionCheck>,
    /// Up to a few examples of each kind of fault, for the report.
    pub examples: Vec<String>,
    /// No loss, no reordering, no corruption, no committed offset gone back, and no duplicates
    /// when duplicates were not allowed (non-idempotent producer).
    pub passed: bool,
    /// The seed the kill moments were drawn with (`random_kills`), to repeat a run.
    #[serde(default)]
    pub seed: Option<u64>,
    /// Whether the records were read through a consumer group (`[correctness] group`).
    #[serde(default)]
    pub group: bool,
    /// Committed offsets of that group read from the broker (one per partition per sample:
    /// before every kill and at the end).
    #[serde(default)]
    pub offset_samples: u64,
    /// Of those, how many were lower than one read earlier for the same partition: a commit
    /// the broker had shown, gone after a restart.
    #[serde(default)]
    pub offset_regressions: u64,
    /// How long after each kill throughput was back to full; `None` without kills.
    #[serde(default)]
    pub recovery: Option<Recovery>,
}

/// Time back to full throughput after each kill of a correctness run (see
/// [`crate::recovery`] for how it is measured).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Default)]
pub struct Recovery {
    /// "Full": at least this share of the baselines below.
    pub full_fraction: f64,
    /// Median acknowledged records/s over the `measure` intervals before the first kill.
    pub baseline_acked_rps: f64,
    /// Median consumed records/s over the same intervals.
    pub baseline_consumed_rps: f64,
    /// Per kill, in order: seconds from the SIGKILL to the end of the first whole interval
    /// after it with both rates at full; `None` when that did not happen before the next kill
    /// (or the end of the load).
    pub per_kill_s: Vec<Option<f64>>,
    /// Over the kills that recovered: fastest, median, slowest.
    pub min_s: Option<f64>,
    pub median_s: Option<f64>,
    pub max_s: Option<f64>,
    /// Kills after which throughput was not back to full before the next kill.
    pub not_recovered: u32,
}

/// One SIGKILL of a broker the benchmark started, and its restart.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Default)]
pub struct BrokerKill {
    /// The broker's index (see [`StartedBroker::index`]); kill `i` of a campaign hits broker
    /// `i mod count`.
    pub broker: u32,
    /// Where that broker listens.
    pub address: String,
    /// When the SIGKILL went out: RFC 3339, UTC.
    pub at: String,
    /// The same moment in seconds since the repeat started (the clock of `intervals[].t_s`).
    pub t_s: f64,
    /// The PID killed.
    pub pid: u32,
    /// The PID of the restarted broker.
    pub restarted_pid: u32,
    /// From the SIGKILL until the restarted broker accepted connections (restart delay
    /// included), seconds.
    pub down_s: f64,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Default)]
pub struct PartitionCheck {
    pub topic: String,
    pub partition: i32,
    pub acked: u64,
    pub seen: u64,
    pub lost: u64,
    pub duplicated: u64,
    pub out_of_order: u64,
    pub corrupted: u64,
}

/// The outcome of `storm`: clients with short timeouts and immediate application re-sends
/// offered `overload` × capacity for `storm_s`, between phases at `after` × capacity (see
/// [`crate::storm`]).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Default)]
pub struct StormResult {
    /// The capacity the phases' rates are multiples of, records/s.
    pub capacity_rps: f64,
    /// How it was obtained: `probe` (measured in this repeat, closed loop) or `given`.
    pub capacity_source: String,
    /// The probe's acknowledged records per second, in order (empty when given).
    pub probe_rps: Vec<f64>,
    pub overload: f64,
    pub after: f64,
    /// Phase lengths in whole seconds.
    pub before_s: u64,
    pub storm_s: u64,
    pub after_s: u64,
    pub request_timeout_ms: u32,
    pub retry_backoff_ms: u32,
    pub app_retries: u32,
    pub recovered_fraction: f64,
    pub recovered_hold_s: u32,
    /// The storm producers' librdkafka settings (secrets as `***`).
    pub producer_config: BTreeMap<String, String>,
    /// One row per second since the `before` phase began, `settle` seconds included.
    pub seconds: Vec<StormSecond>,
    /// Per-phase medians of `seconds`.
    pub phases: Vec<StormPhase>,
    /// Seconds from the storm's end until goodput was back (see
    /// [`crate::storm::series::recovery_s`]); `None`: not recovered within `after_s`.
    pub recovery_s: Option<f64>,
    /// Whole run, every phase: new records offered, application re-sends, records acknowledged,
    /// failed attempts (and of them timed out), records given up after `app_retries`.
    pub new_records: u64,
    pub resent: u64,
    pub acked: u64,
    pub failed: u64,
    pub timed_out: u64,
    pub given_up: u64,
    /// Attempts still without a delivery report when settling ended.
    pub unresolved: u64,
    /// Records the broker appended to the topics during the phases (sum of the high
    /// watermarks' growth), when the watermarks could be read.
    pub appended_records: Option<u64>,
    /// `appended_records - acked`: appends no client got an acknowledgement for, i.e. work done
    /// for attempts the client had already given up on (and usually re-sent: duplicates).
    pub wasted_appends: Option<u64>,
    /// The generator offered less than 97% of a phase's intended new-record rate.
    pub generator_short: bool,
}

/// One second of a storm run. Rates are per second (counts, as each row is one second).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Default)]
pub struct StormSecond {
    /// End of the second, seconds since the `before` phase began.
    pub t_s: f64,
    /// `before`, `storm`, `after` or `settle`.
    pub phase: String,
    /// New records whose first attempt was due in this second.
    pub offered_rps: f64,
    /// Application re-sends of records whose delivery had failed.
    pub resent_rps: f64,
    /// Records acknowledged in this second (each record at most once).
    pub goodput_rps: f64,
    /// Of those, records first offered after the storm ended.
    pub goodput_fresh_rps: f64,
    pub failed_rps: f64,
    pub timed_out_rps: f64,
    pub given_up_rps: f64,
    /// Ack latency of the records acknowledged in this second, from their first attempt's
    /// intended send time (0 when none).
    pub ack_count: u64,
    pub ack_p50_ms: f64,
    pub ack_p99_ms: f64,
    pub ack_p99_9_ms: f64,
    pub ack_max_ms: f64,
}

/// Medians of one phase's seconds.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Default)]
pub struct StormPhase {
    pub phase: String,
    pub seconds: u32,
    pub offered_rps: f64,
    pub resent_rps: f64,
    pub goodput_rps: f64,
    /// The goodput recovery is judged on: in `after`, records first offered after the storm.
    pub goodput_fresh_rps: f64,
    pub failed_rps: f64,
    pub given_up_rps: f64,
    /// Median of the per-second ack p99 over seconds with acknowledgements.
    pub ack_p99_ms: Option<f64>,
}
