//! Workload files (TOML): what to run, and which fields vary.
//!
//! Any top-level field given as a list is a *dimension*: the campaign runs one test point per
//! value, or per combination when several fields are lists, everything else fixed. Tables
//! (`[explore]`, `[drain]`, `[correctness]`, `[storm]`, `[topic_config]`, `[producer_config]`,
//! `[consumer_config]`) hold
//! the settings of one mode or extra client settings and do not vary.

use std::collections::BTreeMap;
use std::fmt;

use serde::{Deserialize, Deserializer, Serialize};

/// A workload file failed to parse or validate. The message says what to fix.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct WorkloadError(String);

fn err(msg: impl Into<String>) -> WorkloadError {
    WorkloadError(msg.into())
}

impl WorkloadError {
    pub(crate) fn new(msg: impl Into<String>) -> WorkloadError {
        err(msg)
    }
}

/// One concrete test point: a workload with every dimension fixed to one value.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Workload {
    #[serde(default = "default_name")]
    pub name: String,
    /// Topics created for each test point (fresh ones every time).
    #[serde(default = "one")]
    pub topics: u32,
    #[serde(default = "six")]
    pub partitions: u32,
    #[serde(default = "one_i16")]
    pub replication_factor: i16,
    /// Producer client instances (each its own connections and thread).
    #[serde(default = "one")]
    pub producers: u32,
    /// Consumers in each consumer group.
    #[serde(default = "one")]
    pub consumers: u32,
    /// Consumer groups; each reads every topic.
    #[serde(default = "one")]
    pub consumer_groups: u32,
    /// Bytes per record value (at least the 28-byte benchmark header).
    #[serde(default = "kib")]
    pub record_size: usize,
    /// Give records keys (`key-<n>` over `key_space` values) so partitioning hashes them.
    #[serde(default)]
    pub keys: bool,
    #[serde(default = "thousand")]
    pub key_space: u64,
    /// Total producer rate over all producers: records/s (`20000`, `"20000/s"`), bytes/s
    /// (`"20MB/s"`, `"20MiB/s"`), or `"max"` (as fast as the client accepts).
    #[serde(default = "default_rate")]
    pub producer_rate: Rate,
    /// `all` (or `-1`), `1` or `0`.
    #[serde(default = "default_acks")]
    pub acks: String,
    #[serde(default = "five")]
    pub linger_ms: u32,
    /// Producer batch size in bytes.
    #[serde(default = "default_batch_size")]
    pub batch_size: u32,
    /// `none`, `gzip`, `snappy`, `lz4` or `zstd`.
    #[serde(default = "default_compression")]
    pub compression: String,
    /// Idempotent producers (needs `acks = "all"`).
    #[serde(default = "yes")]
    pub idempotence: bool,
    /// Share consumers (KIP-932) of one share group, reading every topic (`drain` only; they
    /// replace `consumers`, which must then be 0). Settings in the `[share]` table.
    #[serde(default)]
    pub share_consumers: u32,
    /// Simulated processing time per consumed record, microseconds.
    #[serde(default)]
    pub processing_us: u64,
    #[serde(default = "five_f")]
    pub warmup_s: f64,
    #[serde(default = "thirty_f")]
    pub duration_s: f64,
    /// Reporting interval, seconds.
    #[serde(default = "one_f")]
    pub interval_s: f64,
    /// How many times each test point runs (on a fresh topic each time).
    #[serde(default = "one")]
    pub repeats: u32,
    #[serde(default)]
    pub explore: Explore,
    #[serde(default)]
    pub drain: Drain,
    #[serde(default)]
    pub correctness: Correctness,
    #[serde(default)]
    pub share: Share,
    /// `[storm]`: the retry storm of `sluice bench storm` ([`crate::storm`]).
    #[serde(default)]
    pub storm: crate::storm::Storm,
    /// The topics' `cleanup.policy` (`delete`, `compact` or `compact,delete`); a field of its
    /// own so that a list of policies is a dimension (`cleanup_policy = ["delete", "compact"]`).
    #[serde(default)]
    pub cleanup_policy: Option<String>,
    /// Topic configs the fresh topics are created with (`cleanup.policy`, `segment.bytes`,
    /// ...), passed to CreateTopics as given.
    #[serde(default)]
    pub topic_config: BTreeMap<String, String>,
    /// Extra librdkafka producer settings, passed through as given.
    #[serde(default)]
    pub producer_config: BTreeMap<String, String>,
    /// Extra librdkafka consumer settings, passed through as given.
    #[serde(default)]
    pub consumer_config: BTreeMap<String, String>,
}

/// `[explore]`: find the highest rate whose e2e latency percentile stays under a target.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct Explore {
    /// The latency percentile the target applies to.
    pub percentile: f64,
    pub target_ms: f64,
    /// First rate tried; doubled until the target is missed.
    pub start_rate: Rate,
    /// Highest rate tried.
    pub max_rate: Option<Rate>,
    /// Length of each ramp and search step, seconds.
    pub step_s: f64,
    /// Binary search stops when the bracket is within this fraction.
    pub precision: f64,
    /// Length of the sustain phase, seconds.
    pub sustain_s: f64,
    /// Sustain is judged per interval of this length, seconds.
    pub sustain_interval_s: f64,
    /// Share of sustain intervals that must meet the target.
    pub pass_fraction: f64,
    /// Give up after this many sustain attempts.
    pub max_sustain_attempts: u32,
}

impl Default for Explore {
    fn default() -> Self {
        Self {
            percentile: 99.0,
            target_ms: 50.0,
            start_rate: Rate::Records(1000.0),
            max_rate: None,
            step_s: 10.0,
            precision: 0.05,
            sustain_s: 60.0,
            sustain_interval_s: 5.0,
            pass_fraction: 0.8,
            max_sustain_attempts: 3,
        }
    }
}

/// `[drain]`: build a backlog, then time the consumers reading it.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct Drain {
    /// Backlog to build before consumers start: bytes (`1073741824`) or `"2GiB"`, `"500MB"`.
    pub backlog: ByteSize,
    /// Producer rate while building the backlog (default: as fast as the client accepts).
    pub fill_rate: Rate,
    /// Producer rate kept up while the consumers drain (`0`: producers stop).
    pub live_rate: Rate,
    /// Give up draining after this long, seconds.
    pub timeout_s: f64,
}

impl Default for Drain {
    fn default() -> Self {
        Self {
            backlog: ByteSize(1 << 30),
            fill_rate: Rate::Max,
            live_rate: Rate::Records(0.0),
            timeout_s: 600.0,
        }
    }
}

/// `[correctness]`: check every record, optionally killing the broker during the run.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct Correctness {
    /// SIGKILLs of the broker during the run (needs `--broker-cmd`).
    pub kills: u32,
    /// Pause between a kill and the restart, seconds.
    pub restart_delay_s: f64,
    /// How long to wait for the last deliveries and reads after the run, seconds.
    pub settle_timeout_s: f64,
    /// Read through a consumer group (subscribe, auto-committed offsets, rebalances after each
    /// restart) instead of assigning every partition from the beginning; the group's committed
    /// offsets are then checked too: they must never go back. Needs `consumer_groups = 1`.
    pub group: bool,
    /// Kill at random moments: the load before kill `k` lasts a uniformly drawn 0.5x to 1.5x of
    /// the even share of `duration_s` (instead of exactly that share).
    pub random_kills: bool,
    /// Seed of `random_kills` (default: drawn from the clock, and printed, so a run can be
    /// repeated).
    pub seed: Option<u64>,
    /// "Full throughput" after a restart: at least this share of the median per-interval
    /// rate of the `measure` intervals before the first kill, acknowledged and consumed alike.
    pub full_fraction: f64,
}

impl Default for Correctness {
    fn default() -> Self {
        Self {
            kills: 0,
            restart_delay_s: 1.0,
            settle_timeout_s: 120.0,
            group: false,
            random_kills: false,
            seed: None,
            full_fraction: 0.9,
        }
    }
}

/// `[share]`: how the share consumers behave, and the share group's configs.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct Share {
    /// The share group's id (default: `sluice-bench-<run>-share`, a new group per repeat).
    pub group: Option<String>,
    /// Simulated work per record, ms: each consumer processes its records one after the other.
    pub processing_ms_per_record: f64,
    /// `max_records` of each ShareFetch (the Java client's `max.poll.records`).
    pub max_poll_records: u32,
    /// How long a ShareFetch with nothing to acquire waits, ms (`fetch.max.wait.ms`).
    pub max_wait_ms: u32,
    /// `max_bytes` of each ShareFetch (the Java client's `fetch.max.bytes`, 50 MiB).
    pub max_bytes: ByteSize,
    /// `batch_optimized` (Kafka's default) or `record_limit` (KIP-1206). Recorded; sent only
    /// with ShareFetch v2, which this client does not speak yet.
    pub acquire_mode: String,
    /// `fair` or `greedy`: set as the group config `share.acquire.policy` (a Sluice config;
    /// Kafka refuses it). Unset: the broker's default.
    pub policy: Option<String>,
    /// Set as the group config `share.record.lock.duration.ms`.
    pub record_lock_duration_ms: Option<u64>,
    /// Kill one consumer this long after the consumers started (its connection dropped with
    /// no final acknowledgement, like a crashed process) and time how long its locked records
    /// take to reach the others.
    pub kill_consumer_after_s: Option<f64>,
    /// More group configs, set as given (after `share.auto.offset.reset=earliest`, which the
    /// backlog needs, so they may override it).
    pub group_config: BTreeMap<String, String>,
}

impl Default for Share {
    fn default() -> Self {
        Self {
            group: None,
            processing_ms_per_record: 0.0,
            max_poll_records: 500,
            max_wait_ms: 500,
            max_bytes: ByteSize(SHARE_MAX_BYTES_DEFAULT),
            acquire_mode: "batch_optimized".into(),
            policy: None,
            record_lock_duration_ms: None,
            kill_consumer_after_s: None,
            group_config: BTreeMap::new(),
        }
    }
}

/// `[share] max_bytes` by default: the Java client's `fetch.max.bytes` (50 MiB).
pub const SHARE_MAX_BYTES_DEFAULT: u64 = 52_428_800;
/// The largest `[share] max_bytes` accepted (bounds a response's memory).
pub const SHARE_MAX_BYTES_LIMIT: u64 = 64 << 20;

/// Group configs the `[share]` fields set.
const POLICY_CONFIG: &str = "share.acquire.policy";
const LOCK_DURATION_CONFIG: &str = "share.record.lock.duration.ms";
const AUTO_OFFSET_RESET_CONFIG: &str = "share.auto.offset.reset";

impl Share {
    /// The group configs to set before the consumers join: `share.auto.offset.reset=earliest`
    /// (the consumers read a backlog built before they join), `policy` and
    /// `record_lock_duration_ms` when given, then `group_config`.
    pub fn group_configs(&self) -> BTreeMap<String, String> {
        let mut configs = BTreeMap::new();
        configs.insert(AUTO_OFFSET_RESET_CONFIG.to_owned(), "earliest".to_owned());
        if let Some(policy) = &self.policy {
            configs.insert(POLICY_CONFIG.to_owned(), policy.clone());
        }
        if let Some(ms) = self.record_lock_duration_ms {
            configs.insert(LOCK_DURATION_CONFIG.to_owned(), ms.to_string());
        }
        for (k, v) in &self.group_config {
            configs.insert(k.clone(), v.clone());
        }
        configs
    }

    fn validate(&self, consumers: u32) -> Result<(), WorkloadError> {
        if !(self.processing_ms_per_record.is_finite() && self.processing_ms_per_record >= 0.0) {
            return Err(err("share.processing_ms_per_record must be >= 0"));
        }
        if self.max_poll_records == 0 || self.max_poll_records > i32::MAX as u32 {
            return Err(err("share.max_poll_records must be at least 1"));
        }
        if self.max_bytes.0 == 0 || self.max_bytes.0 > SHARE_MAX_BYTES_LIMIT {
            return Err(err(format!(
                "share.max_bytes must be between 1 and {SHARE_MAX_BYTES_LIMIT} (64 MiB)"
            )));
        }
        if self.max_wait_ms > i32::MAX as u32 {
            return Err(err("share.max_wait_ms is too large"));
        }
        match self.acquire_mode.as_str() {
            "batch_optimized" | "record_limit" => {}
            other => {
                return Err(err(format!(
                    "share.acquire_mode {other:?}: use \"batch_optimized\" or \"record_limit\""
                )));
            }
        }
        match self.policy.as_deref() {
            None | Some("fair" | "greedy") => {}
            Some(other) => {
                return Err(err(format!(
                    "share.policy {other:?}: use \"fair\" or \"greedy\" (or leave it unset \
                     for the broker's default)"
                )));
            }
        }
        if self.group.as_deref().is_some_and(|g| g.trim().is_empty()) {
            return Err(err("share.group must not be empty (or leave it unset)"));
        }
        if self.record_lock_duration_ms == Some(0) {
            return Err(err("share.record_lock_duration_ms must be > 0"));
        }
        for (field, config, given) in [
            ("policy", POLICY_CONFIG, self.policy.is_some()),
            (
                "record_lock_duration_ms",
                LOCK_DURATION_CONFIG,
                self.record_lock_duration_ms.is_some(),
            ),
        ] {
            if given && self.group_config.contains_key(config) {
                return Err(err(format!(
                    "share.{field} and share.group_config.\"{config}\" both set it: keep one"
                )));
            }
        }
        if let Some(after) = self.kill_consumer_after_s {
            if !(after.is_finite() && after > 0.0) {
                return Err(err("share.kill_consumer_after_s must be > 0"));
            }
            if consumers < 2 {
                return Err(err(
                    "share.kill_consumer_after_s needs share_consumers >= 2 (another consumer \
                     must be there to get the killed one's records)",
                ));
            }
        }
        Ok(())
    }
}

/// A producer rate.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Rate {
    /// As fast as the client accepts records (closed loop).
    Max,
    Records(f64),
    Bytes(f64),
}

impl Rate {
    /// Records per second for records of `record_size` bytes; `None` for [`Rate::Max`].
    pub fn records_per_s(self, record_size: usize) -> Option<f64> {
        match self {
            Rate::Max => None,
            Rate::Records(r) => Some(r),
            Rate::Bytes(b) => Some(b / record_size.max(1) as f64),
        }
    }

    pub fn is_zero(self) -> bool {
        matches!(self, Rate::Records(r) | Rate::Bytes(r) if r <= 0.0)
    }

    fn parse(text: &str) -> Result<Rate, String> {
        let t = text.trim();
        if t.eq_ignore_ascii_case("max") {
            return Ok(Rate::Max);
        }
        let Some(body) = t.strip_suffix("/s") else {
            return t.parse::<f64>().map(Rate::Records).map_err(|e| {
                format!("rate {text:?}: {e}; write records/s (20000), \"20MB/s\" or \"max\"")
            });
        };
        let (number, multiplier) = split_unit(body).ok_or_else(|| {
            format!("rate {text:?}: unknown unit (use /s, KB/s, MB/s, GB/s, KiB/s, MiB/s, GiB/s)")
        })?;
        match multiplier {
            None => Ok(Rate::Records(number)),
            Some(m) => Ok(Rate::Bytes(number * m)),
        }
    }
}

impl fmt::Display for Rate {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Rate::Max => write!(f, "max"),
            Rate::Records(r) => write!(f, "{r}/s"),
            Rate::Bytes(b) => write!(f, "{}MB/s", b / 1e6),
        }
    }
}

/// Splits `20MB` into (20, Some(1e6)) and `20000` into (20000, None).
fn split_unit(text: &str) -> Option<(f64, Option<f64>)> {
    let t = text.trim();
    let idx = t.find(|c: char| c.is_ascii_alphabetic()).unwrap_or(t.len());
    let number: f64 = t[..idx].trim().parse().ok()?;
    let unit = &t[idx..];
    let multiplier = match unit {
        "" => None,
        "B" => Some(1.0),
        "KB" | "kB" => Some(1e3),
        "MB" => Some(1e6),
        "GB" => Some(1e9),
        "KiB" => Some(1024.0),
        "MiB" => Some(1024.0 * 1024.0),
        "GiB" => Some(1024.0 * 1024.0 * 1024.0),
        _ => return None,
    };
    Some((number, multiplier))
}

impl Serialize for Rate {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self {
            Rate::Records(r) => s.serialize_f64(*r),
            other => s.serialize_str(&other.to_string()),
        }
    }
}

impl<'de> Deserialize<'de> for Rate {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        match NumOrText::deserialize(d)? {
            NumOrText::Num(n) => Ok(Rate::Records(n)),
            NumOrText::Text(t) => Rate::parse(&t).map_err(serde::de::Error::custom),
        }
    }
}

#[derive(Deserialize)]
#[serde(untagged)]
enum NumOrText {
    Num(f64),
    Text(String),
}

/// A size in bytes, written as a number or with a unit (`"2GiB"`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ByteSize(pub u64);

impl Serialize for ByteSize {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_u64(self.0)
    }
}

impl<'de> Deserialize<'de> for ByteSize {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        match NumOrText::deserialize(d)? {
            NumOrText::Num(n) if n >= 0.0 => Ok(ByteSize(n as u64)),
            NumOrText::Num(n) => Err(serde::de::Error::custom(format!("size {n} is negative"))),
            NumOrText::Text(t) => match split_unit(&t) {
                Some((n, m)) if n >= 0.0 => Ok(ByteSize((n * m.unwrap_or(1.0)) as u64)),
                _ => Err(serde::de::Error::custom(format!(
                    "size {t:?}: write bytes (1048576) or a unit (\"500MB\", \"2GiB\")"
                ))),
            },
        }
    }
}

fn default_name() -> String {
    "workload".into()
}
fn one() -> u32 {
    1
}
fn one_i16() -> i16 {
    1
}
fn six() -> u32 {
    6
}
fn kib() -> usize {
    1024
}
fn thousand() -> u64 {
    1000
}
fn default_rate() -> Rate {
    Rate::Records(10_000.0)
}
fn default_acks() -> String {
    "all".into()
}
fn five() -> u32 {
    5
}
fn default_batch_size() -> u32 {
    131_072
}
fn default_compression() -> String {
    "none".into()
}
fn yes() -> bool {
    true
}
fn five_f() -> f64 {
    5.0
}
fn thirty_f() -> f64 {
    30.0
}
fn one_f() -> f64 {
    1.0
}

impl Workload {
    /// The configs the fresh topics are created with: `[topic_config]` and `cleanup_policy`.
    pub fn topic_configs(&self) -> BTreeMap<String, String> {
        let mut configs = self.topic_config.clone();
        if let Some(policy) = &self.cleanup_policy {
            configs.insert("cleanup.policy".to_owned(), policy.clone());
        }
        configs
    }

    /// Checks what serde cannot: ranges and combinations.
    pub fn validate(&self) -> Result<(), WorkloadError> {
        let positive = |name: &str, v: f64| {
            if v.is_finite() && v > 0.0 {
                Ok(())
            } else {
                Err(err(format!("{name} must be > 0, got {v}")))
            }
        };
        if self.topics == 0 || self.partitions == 0 || self.producers == 0 {
            return Err(err(
                "topics, partitions and producers must each be at least 1",
            ));
        }
        if self.share_consumers > 0 && self.consumers > 0 {
            return Err(err(format!(
                "share_consumers = {} replaces the consumer groups' consumers: set consumers = 0",
                self.share_consumers
            )));
        }
        if self.share_consumers > 0 || self.share != Share::default() {
            self.share.validate(self.share_consumers)?;
        }
        if self.consumers > 0 && self.consumer_groups == 0 {
            return Err(err("consumer_groups must be at least 1 when consumers > 0"));
        }
        let c = &self.correctness;
        if c.group && (self.consumers == 0 || self.consumer_groups != 1) {
            return Err(err(
                "correctness.group = true reads through one consumer group: set consumers >= 1 \
                 and consumer_groups = 1",
            ));
        }
        if !(c.full_fraction > 0.0 && c.full_fraction <= 1.0) {
            return Err(err("correctness.full_fraction must be in (0, 1]"));
        }
        if self.replication_factor < 1 {
            return Err(err("replication_factor must be at least 1"));
        }
        if self.record_size < crate::payload::HEADER_LEN {
            return Err(err(format!(
                "record_size {} is below the {}-byte benchmark header every record carries",
                self.record_size,
                crate::payload::HEADER_LEN
            )));
        }
        if self.cleanup_policy.is_some() && self.topic_config.contains_key("cleanup.policy") {
            return Err(err(
                "cleanup_policy and topic_config's cleanup.policy both set: keep one",
            ));
        }
        let configs = self.topic_configs();
        if let Some(policy) = configs.get("cleanup.policy")
            && policy.split(',').any(|p| p.trim() == "compact")
            && !self.keys
        {
            return Err(err(format!(
                "cleanup.policy {policy:?} compacts by key: set keys = true \
                 (a compacted topic refuses records without a key)"
            )));
        }
        if self.keys && self.key_space == 0 {
            return Err(err("key_space must be at least 1 when keys = true"));
        }
        match self.acks.as_str() {
            "all" | "-1" | "1" | "0" => {}
            other => return Err(err(format!("acks {other:?}: use \"all\", \"1\" or \"0\""))),
        }
        if self.idempotence && !matches!(self.acks.as_str(), "all" | "-1") {
            return Err(err(
                "idempotence = true needs acks = \"all\" (or set idempotence = false)",
            ));
        }
        match self.compression.as_str() {
            "none" | "gzip" | "snappy" | "lz4" | "zstd" => {}
            other => {
                return Err(err(format!(
                    "compression {other:?}: use none, gzip, snappy, lz4 or zstd"
                )));
            }
        }
        if self.batch_size == 0 {
            return Err(err("batch_size must be at least 1"));
        }
        if !(self.warmup_s.is_finite() && self.warmup_s >= 0.0) {
            return Err(err("warmup_s must be >= 0"));
        }
        positive("duration_s", self.duration_s)?;
        positive("interval_s", self.interval_s)?;
        if self.repeats == 0 {
            return Err(err("repeats must be at least 1"));
        }
        for (name, rate) in [
            ("producer_rate", self.producer_rate),
            ("explore.start_rate", self.explore.start_rate),
        ] {
            if let Rate::Records(r) | Rate::Bytes(r) = rate {
                positive(name, r)?;
            }
        }
        if matches!(self.explore.start_rate, Rate::Max) {
            return Err(err("explore.start_rate must be a rate, not \"max\""));
        }
        let e = &self.explore;
        if !(e.percentile > 0.0 && e.percentile <= 100.0) {
            return Err(err("explore.percentile must be in (0, 100]"));
        }
        positive("explore.target_ms", e.target_ms)?;
        positive("explore.step_s", e.step_s)?;
        positive("explore.sustain_s", e.sustain_s)?;
        positive("explore.sustain_interval_s", e.sustain_interval_s)?;
        positive("explore.precision", e.precision)?;
        if !(e.pass_fraction > 0.0 && e.pass_fraction <= 1.0) {
            return Err(err("explore.pass_fraction must be in (0, 1]"));
        }
        self.storm.validate()?;
        if self.drain.backlog.0 == 0 {
            return Err(err("drain.backlog must be > 0"));
        }
        positive("drain.timeout_s", self.drain.timeout_s)?;
        if matches!(self.drain.live_rate, Rate::Max) {
            return Err(err("drain.live_rate must be a rate (or 0), not \"max\""));
        }
        Ok(())
    }

    /// The total producer rate in records/s, `None` for "max".
    pub fn target_rps(&self) -> Option<f64> {
        self.producer_rate.records_per_s(self.record_size)
    }
}

/// A parsed workload file: its test points, in run order.
#[derive(Debug, Clone)]
pub struct Plan {
    /// Names of the fields given as lists.
    pub dimensions: Vec<String>,
    pub points: Vec<Point>,
}

#[derive(Debug, Clone)]
pub struct Point {
    /// `field=value` for each dimension, space-separated; the workload name without dimensions.
    pub label: String,
    pub params: BTreeMap<String, serde_json::Value>,
    pub workload: Workload,
}

/// Parses a workload file's text into its test points.
pub fn parse(text: &str) -> Result<Plan, WorkloadError> {
    let table: toml::Table =
        toml::from_str(text).map_err(|e| err(format!("workload file: {e}")))?;
    let mut dimensions = Vec::new();
    let mut values: Vec<Vec<toml::Value>> = Vec::new();
    for (key, value) in &table {
        if let toml::Value::Array(items) = value {
            if key == "name" {
                return Err(err("name cannot be a list"));
            }
            if items.is_empty() {
                return Err(err(format!(
                    "{key} is an empty list: give at least one value"
                )));
            }
            dimensions.push(key.clone());
            values.push(items.clone());
        }
    }
    let combos: usize = values.iter().map(Vec::len).product();
    if combos > 1000 {
        return Err(err(format!(
            "the lists make {combos} test points; at most 1000 are allowed"
        )));
    }
    let mut points = Vec::with_capacity(combos);
    for index in 0..combos {
        let mut point = table.clone();
        let mut params = BTreeMap::new();
        let mut label = Vec::new();
        let mut rest = index;
        // The last dimension varies fastest.
        let mut chosen = vec![0; values.len()];
        for d in (0..values.len()).rev() {
            chosen[d] = rest % values[d].len();
            rest /= values[d].len();
        }
        for (d, key) in dimensions.iter().enumerate() {
            let value = values[d][chosen[d]].clone();
            label.push(format!("{key}={}", display_value(&value)));
            params.insert(key.clone(), toml_to_json(&value));
            point.insert(key.clone(), value);
        }
        let workload: Workload = toml::Value::Table(point)
            .try_into()
            .map_err(|e: toml::de::Error| err(format!("workload file: {}", e.message())))?;
        workload.validate().map_err(|e| {
            if label.is_empty() {
                e
            } else {
                err(format!("test point {}: {e}", label.join(" ")))
            }
        })?;
        let label = if label.is_empty() {
            workload.name.clone()
        } else {
            label.join(" ")
        };
        points.push(Point {
            label,
            params,
            workload,
        });
    }
    Ok(Plan { dimensions, points })
}

fn display_value(value: &toml::Value) -> String {
    match value {
        toml::Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

fn toml_to_json(value: &toml::Value) -> serde_json::Value {
    serde_json::to_value(value).unwrap_or(serde_json::Value::Null)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_empty_file_is_one_point_with_defaults() {
        let plan = parse("").unwrap();
        assert!(plan.dimensions.is_empty());
        assert_eq!(plan.points.len(), 1);
        let w = &plan.points[0].workload;
        assert_eq!(
            (w.partitions, w.record_size, w.acks.as_str()),
            (6, 1024, "all")
        );
        assert_eq!(plan.points[0].label, "workload");
    }

    #[test]
    fn lists_are_dimensions_and_combine() {
        let plan = parse(
            "name = \"sizes\"\nrecord_size = [100, 1024]\nproducer_rate = [\"10MB/s\", \"20MB/s\", 5000]\n",
        )
        .unwrap();
        assert_eq!(plan.points.len(), 6);
        let labels: Vec<_> = plan.points.iter().map(|p| p.label.as_str()).collect();
        assert!(
            labels.contains(&"producer_rate=10MB/s record_size=100"),
            "{labels:?}"
        );
        let p = plan
            .points
            .iter()
            .find(|p| p.label == "producer_rate=20MB/s record_size=1024")
            .unwrap();
        assert_eq!(p.workload.target_rps(), Some(20e6 / 1024.0));
        assert_eq!(p.params["record_size"], serde_json::json!(1024));
        assert_eq!(p.workload.name, "sizes");
    }

    #[test]
    fn rates_and_sizes_parse_with_units() {
        assert_eq!(Rate::parse("max").unwrap(), Rate::Max);
        assert_eq!(Rate::parse("2500/s").unwrap(), Rate::Records(2500.0));
        assert_eq!(
            Rate::parse("20MiB/s").unwrap(),
            Rate::Bytes(20.0 * 1024.0 * 1024.0)
        );
        assert!(Rate::parse("20 parsecs/s").is_err());
        let plan = parse("[drain]\nbacklog = \"2GiB\"\n").unwrap();
        assert_eq!(plan.points[0].workload.drain.backlog, ByteSize(2 << 30));
    }

    #[test]
    fn mistakes_get_messages_that_say_what_to_fix() {
        let cases = [
            ("record_sise = 10", "record_sise"),
            ("record_size = 10", "28-byte"),
            ("acks = \"most\"", "acks"),
            ("acks = \"1\"", "idempotence"),
            ("compression = \"brotli\"", "compression"),
            ("producer_rate = \"fast\"", "rate"),
            ("partitions = []", "empty list"),
            ("duration_s = 0", "duration_s"),
            ("[explore]\npercentile = 120", "percentile"),
            ("record_size = [100, 10]", "test point record_size=10"),
        ];
        for (text, needle) in cases {
            let message = parse(text).unwrap_err().to_string();
            assert!(message.contains(needle), "{text:?} gave {message:?}");
        }
    }

    #[test]
    fn share_consumers_and_their_table_parse_with_defaults() {
        let plan = parse(
            "consumers = 0\nshare_consumers = [10, 40]\n[share]\nprocessing_ms_per_record = 5\n",
        )
        .unwrap();
        assert_eq!(plan.dimensions, vec!["share_consumers".to_owned()]);
        let w = &plan.points[1].workload;
        assert_eq!(w.share_consumers, 40);
        assert_eq!(w.share.processing_ms_per_record, 5.0);
        assert_eq!(w.share.max_poll_records, 500);
        assert_eq!(w.share.max_wait_ms, 500);
        assert_eq!(w.share.max_bytes, ByteSize(52_428_800));
        assert_eq!(w.share.acquire_mode, "batch_optimized");
        assert_eq!(w.share.policy, None);
        // Only what the backlog needs, when nothing else is asked.
        assert_eq!(
            w.share.group_configs(),
            BTreeMap::from([("share.auto.offset.reset".to_owned(), "earliest".to_owned())])
        );
        // Nothing of it without share consumers.
        assert_eq!(parse("").unwrap().points[0].workload.share_consumers, 0);
    }

    #[test]
    fn share_settings_become_group_configs() {
        let plan = parse(
            "consumers = 0\nshare_consumers = 3\n[share]\ngroup = \"q\"\npolicy = \"greedy\"\n\
             record_lock_duration_ms = 15000\nkill_consumer_after_s = 20\n\
             acquire_mode = \"record_limit\"\n\
             [share.group_config]\n\"share.auto.offset.reset\" = \"latest\"\n\
             \"share.heartbeat.interval.ms\" = \"1000\"\n",
        )
        .unwrap();
        let s = &plan.points[0].workload.share;
        assert_eq!(s.group.as_deref(), Some("q"));
        assert_eq!(s.kill_consumer_after_s, Some(20.0));
        let configs = s.group_configs();
        assert_eq!(configs["share.acquire.policy"], "greedy");
        assert_eq!(configs["share.record.lock.duration.ms"], "15000");
        assert_eq!(configs["share.auto.offset.reset"], "latest");
        assert_eq!(configs["share.heartbeat.interval.ms"], "1000");
        assert_eq!(configs.len(), 4);
    }

    #[test]
    fn share_mistakes_say_what_to_fix() {
        let base = "consumers = 0\nshare_consumers = 4\n";
        let cases = [
            ("share_consumers = 4\n", "set consumers = 0"),
            ("[share]\npolicy = \"fifo\"\n", "share.policy"),
            ("[share]\nacquire_mode = \"all\"\n", "share.acquire_mode"),
            ("[share]\nmax_poll_records = 0\n", "max_poll_records"),
            ("[share]\nmax_bytes = \"1GiB\"\n", "share.max_bytes"),
            (
                "[share]\nprocessing_ms_per_record = -1\n",
                "processing_ms_per_record",
            ),
            (
                "[share]\nkill_consumer_after_s = 0\n",
                "kill_consumer_after_s",
            ),
            ("[share]\ngroup = \" \"\n", "share.group"),
            (
                "[share]\nrecord_lock_duration_ms = 0\n",
                "record_lock_duration_ms",
            ),
            ("[share]\nwhatever = 1\n", "whatever"),
            (
                "[share]\npolicy = \"fair\"\n[share.group_config]\n\"share.acquire.policy\" = \"fair\"\n",
                "keep one",
            ),
        ];
        for (tail, needle) in cases {
            let text = if tail.starts_with("share_consumers") {
                tail.to_owned()
            } else {
                format!("{base}{tail}")
            };
            let message = parse(&text).unwrap_err().to_string();
            assert!(message.contains(needle), "{text:?} gave {message:?}");
        }
        let message =
            parse("consumers = 0\nshare_consumers = 1\n[share]\nkill_consumer_after_s = 5\n")
                .unwrap_err()
                .to_string();
        assert!(message.contains("share_consumers >= 2"), "{message}");
    }

    #[test]
    fn topic_configs_and_the_cleanup_policy_dimension() {
        let plan = parse(
            "keys = true\ncleanup_policy = [\"delete\", \"compact\"]\n\
             [topic_config]\n\"segment.bytes\" = \"1048576\"\n",
        )
        .unwrap();
        let policies: Vec<_> = plan
            .points
            .iter()
            .map(|p| p.workload.topic_configs())
            .collect();
        assert_eq!(policies.len(), 2);
        assert_eq!(policies[0]["cleanup.policy"], "delete");
        assert_eq!(policies[1]["cleanup.policy"], "compact");
        assert!(policies.iter().all(|c| c["segment.bytes"] == "1048576"));
        let message = parse("cleanup_policy = \"compact\"\n")
            .unwrap_err()
            .to_string();
        assert!(message.contains("set keys = true"), "{message}");
        let message = parse(
            "keys = true\ncleanup_policy = \"compact\"\n[topic_config]\n\"cleanup.policy\" = \"delete\"\n",
        )
        .unwrap_err()
        .to_string();
        assert!(message.contains("keep one"), "{message}");
    }

    #[test]
    fn passthrough_client_settings_are_kept() {
        let plan = parse("[producer_config]\n\"queue.buffering.max.ms\" = \"2\"\n").unwrap();
        assert_eq!(
            plan.points[0].workload.producer_config["queue.buffering.max.ms"],
            "2"
        );
    }
}
