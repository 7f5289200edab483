//! The `[storm]` table of a workload file: the phases of a retry storm and how the clients
//! misbehave in it. See [`super`] for what the mode does with it.

use std::fmt;

use serde::{Deserialize, Deserializer, Serialize};

use crate::workload::{Rate, WorkloadError};

/// `[storm]`: a retry storm (`sluice bench storm`).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct Storm {
    /// What the broker sustains: `"probe"` (measured first, closed loop) or a rate
    /// (`40000`, `"40000/s"`, `"40MB/s"`). The phases' rates are multiples of it.
    pub capacity: Capacity,
    /// Length of the capacity probe, seconds (only with `capacity = "probe"`).
    pub probe_s: f64,
    /// Offered new records during the storm, × capacity.
    pub overload: f64,
    /// Offered new records before and after the storm, × capacity.
    pub after: f64,
    /// Seconds at `after` before the storm: the baseline.
    pub before_s: f64,
    pub storm_s: f64,
    /// Seconds at `after` once the storm is over; recovery must happen within them.
    pub after_s: f64,
    /// The clients' `request.timeout.ms` and `message.timeout.ms` (delivery timeout).
    pub request_timeout_ms: u32,
    /// The clients' `retry.backoff.ms` (librdkafka's own retries, within the delivery timeout).
    pub retry_backoff_ms: u32,
    /// Re-sends of a record whose delivery failed, by the application, at once, each a new
    /// attempt; after that many the record is given up.
    pub app_retries: u32,
    /// Recovered: goodput at least this share of the offered new-record rate ...
    pub recovered_fraction: f64,
    /// ... for this many consecutive seconds.
    pub recovered_hold_s: u32,
    /// After the last phase, how long to wait for outstanding deliveries, seconds.
    pub settle_timeout_s: f64,
}

impl Default for Storm {
    fn default() -> Self {
        Self {
            capacity: Capacity::Probe,
            probe_s: 20.0,
            overload: 2.0,
            after: 0.5,
            before_s: 10.0,
            storm_s: 30.0,
            after_s: 60.0,
            request_timeout_ms: 1000,
            retry_backoff_ms: 10,
            app_retries: 3,
            recovered_fraction: 0.9,
            recovered_hold_s: 3,
            settle_timeout_s: 30.0,
        }
    }
}

/// The most application re-sends a record may get (bounds the work a storm creates).
pub const APP_RETRIES_MAX: u32 = 100;

impl Storm {
    /// Checks ranges; messages name the field.
    pub fn validate(&self) -> Result<(), WorkloadError> {
        let positive = |name: &str, v: f64| {
            if v.is_finite() && v > 0.0 {
                Ok(())
            } else {
                Err(WorkloadError::new(format!(
                    "storm.{name} must be > 0, got {v}"
                )))
            }
        };
        if let Capacity::Rate(rate) = self.capacity {
            match rate {
                Rate::Records(r) | Rate::Bytes(r) => positive("capacity", r)?,
                Rate::Max => unreachable_max()?,
            }
        }
        positive("probe_s", self.probe_s)?;
        positive("overload", self.overload)?;
        positive("after", self.after)?;
        positive("storm_s", self.storm_s)?;
        positive("after_s", self.after_s)?;
        positive("settle_timeout_s", self.settle_timeout_s)?;
        if !(self.before_s.is_finite() && self.before_s >= 0.0) {
            return Err(WorkloadError::new("storm.before_s must be >= 0"));
        }
        if self.overload <= self.after {
            return Err(WorkloadError::new(format!(
                "storm.overload ({}) must be above storm.after ({}): the storm is the overload",
                self.overload, self.after
            )));
        }
        if self.request_timeout_ms == 0 || self.request_timeout_ms > 3_600_000 {
            return Err(WorkloadError::new(
                "storm.request_timeout_ms must be between 1 and 3600000",
            ));
        }
        if self.retry_backoff_ms > 60_000 {
            return Err(WorkloadError::new(
                "storm.retry_backoff_ms must be at most 60000",
            ));
        }
        if self.app_retries > APP_RETRIES_MAX {
            return Err(WorkloadError::new(format!(
                "storm.app_retries must be at most {APP_RETRIES_MAX}"
            )));
        }
        if !(self.recovered_fraction > 0.0 && self.recovered_fraction <= 1.0) {
            return Err(WorkloadError::new(
                "storm.recovered_fraction must be in (0, 1]",
            ));
        }
        if self.recovered_hold_s == 0 || f64::from(self.recovered_hold_s) > self.after_s {
            return Err(WorkloadError::new(
                "storm.recovered_hold_s must be at least 1 and at most storm.after_s",
            ));
        }
        Ok(())
    }
}

/// `"max"` is refused when parsed; this keeps the match whole without a panic.
fn unreachable_max() -> Result<(), WorkloadError> {
    Err(WorkloadError::new(
        "storm.capacity must be \"probe\" or a rate, not \"max\"",
    ))
}

/// How the storm's rates are anchored.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Capacity {
    /// Measured first: the median per-second acknowledged rate of a closed-loop phase.
    Probe,
    /// Given (records/s or bytes/s).
    Rate(Rate),
}

impl fmt::Display for Capacity {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Capacity::Probe => write!(f, "probe"),
            Capacity::Rate(r) => write!(f, "{r}"),
        }
    }
}

impl Serialize for Capacity {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self {
            Capacity::Probe => s.serialize_str("probe"),
            Capacity::Rate(r) => r.serialize(s),
        }
    }
}

impl<'de> Deserialize<'de> for Capacity {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let value = toml::Value::deserialize(d)?;
        if let toml::Value::String(s) = &value
            && s.trim().eq_ignore_ascii_case("probe")
        {
            return Ok(Capacity::Probe);
        }
        let rate: Rate = value.try_into().map_err(|e: toml::de::Error| {
            serde::de::Error::custom(format!(
                "capacity: {}; write \"probe\" or a rate (40000, \"40000/s\", \"40MB/s\")",
                e.message().trim()
            ))
        })?;
        if rate == Rate::Max {
            return Err(serde::de::Error::custom(
                "capacity \"max\": write \"probe\" to measure it first, or a rate",
            ));
        }
        Ok(Capacity::Rate(rate))
    }
}

#[cfg(test)]
mod tests {
    use crate::workload::parse;

    use super::*;

    #[test]
    fn defaults_are_the_issue_s_storm() {
        let w = parse("").unwrap().points.remove(0).workload;
        let s = &w.storm;
        assert_eq!(s.capacity, Capacity::Probe);
        assert_eq!((s.overload, s.after), (2.0, 0.5));
        assert_eq!((s.before_s, s.storm_s, s.after_s), (10.0, 30.0, 60.0));
        assert_eq!((s.request_timeout_ms, s.app_retries), (1000, 3));
    }

    #[test]
    fn the_table_parses_rates_and_probe() {
        let plan = parse(
            "[storm]\ncapacity = \"40MB/s\"\noverload = 3\nafter = 0.25\nbefore_s = 0\n\
             storm_s = 5\nafter_s = 20\nrequest_timeout_ms = 500\napp_retries = 0\n",
        )
        .unwrap();
        let s = &plan.points[0].workload.storm;
        assert_eq!(s.capacity, Capacity::Rate(Rate::Bytes(40e6)));
        assert_eq!((s.overload, s.after, s.before_s), (3.0, 0.25, 0.0));
        assert_eq!((s.request_timeout_ms, s.app_retries), (500, 0));
        let s = parse("[storm]\ncapacity = 40000\n").unwrap().points[0]
            .workload
            .storm
            .clone();
        assert_eq!(s.capacity, Capacity::Rate(Rate::Records(40000.0)));
        let s = parse("[storm]\ncapacity = \"Probe\"\n").unwrap().points[0]
            .workload
            .storm
            .clone();
        assert_eq!(s.capacity, Capacity::Probe);
        // Round trip through the effective workload the results keep.
        let json = serde_json::to_value(&s).unwrap();
        assert_eq!(json["capacity"], "probe");
    }

    #[test]
    fn mistakes_name_the_field() {
        let cases = [
            ("capacity = \"max\"", "capacity"),
            ("capacity = \"fast\"", "capacity"),
            ("capacity = 0", "storm.capacity"),
            ("overload = 0", "storm.overload"),
            ("overload = 0.4", "must be above storm.after"),
            ("after = -1", "storm.after"),
            ("storm_s = 0", "storm.storm_s"),
            ("after_s = 0", "storm.after_s"),
            ("before_s = -1", "storm.before_s"),
            ("request_timeout_ms = 0", "storm.request_timeout_ms"),
            ("app_retries = 1000", "storm.app_retries"),
            ("recovered_fraction = 1.5", "storm.recovered_fraction"),
            ("recovered_hold_s = 0", "storm.recovered_hold_s"),
            ("retries = 3", "retries"),
        ];
        for (line, needle) in cases {
            let text = format!("[storm]\n{line}\n");
            let message = parse(&text).unwrap_err().to_string();
            assert!(message.contains(needle), "{text:?} gave {message:?}");
        }
    }
}
