//! Workload files (TOML): what to run, and which fields vary.
//!
//! Any top-level field given as a list is a *dimension*: the campaign runs one test point per
//! value, or per combination when several fields are lists, everything else fixed. Tables
//! (`[explore]`, `[drain]`, `[correctness]`, `[producer_config]`, `[consumer_config]`) hold
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
}

impl Default for Correctness {
    fn default() -> Self {
        Self {
            kills: 0,
            restart_delay_s: 1.0,
            settle_timeout_s: 120.0,
        }
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
        if self.consumers > 0 && self.consumer_groups == 0 {
            return Err(err("consumer_groups must be at least 1 when consumers > 0"));
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
    fn passthrough_client_settings_are_kept() {
        let plan = parse("[producer_config]\n\"queue.buffering.max.ms\" = \"2\"\n").unwrap();
        assert_eq!(
            plan.points[0].workload.producer_config["queue.buffering.max.ms"],
            "2"
        );
    }
}
