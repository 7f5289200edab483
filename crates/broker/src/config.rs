//! Broker settings and per-topic configs.

use std::collections::BTreeMap;
use std::path::PathBuf;

use sluice_log::DiskFaults;

/// A partition's log settings: [`BrokerConfig::log`], and what a
/// [`PartitionOpener`](crate::storage::PartitionOpener) opens a partition with.
pub use sluice_log::LogConfig;

/// When appends are synced (group commit, or every N ms): the type of `BrokerConfig::flush`.
pub use sluice_log::FlushPolicy;

/// Kafka's default `max.message.bytes`: the largest record batch a topic accepts.
pub const MAX_MESSAGE_BYTES_DEFAULT: i64 = 1_048_588;

/// Kafka's default `fetch.max.bytes`: the most one Fetch response carries.
pub const FETCH_MAX_BYTES_DEFAULT: usize = 50 << 20;

/// Broker-wide settings.
#[derive(Debug, Clone)]
pub struct BrokerConfig {
    pub data_dir: PathBuf,
    /// This broker's id in Metadata responses.
    pub node_id: i32,
    /// Host and port clients are told to connect to (the bound Kafka listener by default):
    /// the first listener's, the one a cluster registers.
    pub advertised_host: String,
    pub advertised_port: i32,
    /// The advertised address of each listener, by the index connections pass in
    /// [`crate::Caller::listener`]: a client is told the address of the listener it came in on
    /// (a client on the SSL port gets SSL addresses). Empty, or an index past its end: the
    /// first listener's, `advertised_host:advertised_port`.
    pub advertised_listeners: Vec<(String, i32)>,
    pub cluster_id: String,
    /// Create a topic when Metadata asks for an unknown one (and the client allows it).
    pub auto_create_topics: bool,
    /// Partitions of auto-created topics and of CreateTopics with `num_partitions` -1.
    pub default_partitions: i32,
    /// Most partitions one topic may have (a limit on files and memory).
    pub partitions_per_topic_max: i32,
    /// Defaults for every partition log; topic configs override them.
    pub log: LogConfig,
    pub flush: FlushPolicy,
    pub sync_threads: usize,
    /// Default `max.message.bytes`.
    pub max_message_bytes: i64,
    /// Longest a Fetch may wait, whatever the client asks (bounds parked requests).
    pub fetch_wait_max_ms: u64,
    /// Most bytes one Fetch response carries (Kafka's `fetch.max.bytes`); a request's
    /// `max_bytes` of 0 or less means this, larger asks are cut to it.
    pub fetch_max_bytes: usize,
    /// What the broker may hold for clients in all: request frames, fetch responses, HTTP
    /// bodies and reads (see [`crate::memory`]).
    pub memory_limit: usize,
    /// Consumer-group settings.
    pub groups: sluice_groups::GroupConfig,
    /// The disk fault seam every local partition log and the group store go through:
    /// [`DiskFaults::none`] (the real I/O, unchanged) except in tests, which pass a fault plan
    /// or a simulated disk (`tests/simulation.rs`). Topic metadata, producer-id blocks and
    /// quotas are written with real fsyncs, outside the seam.
    pub disk_faults: DiskFaults,
}

impl BrokerConfig {
    /// Defaults for a broker storing its data in `data_dir`.
    pub fn new(data_dir: impl Into<PathBuf>) -> Self {
        BrokerConfig {
            data_dir: data_dir.into(),
            node_id: 1,
            advertised_host: "127.0.0.1".to_owned(),
            advertised_port: 9092,
            advertised_listeners: Vec::new(),
            cluster_id: "sluice".to_owned(),
            auto_create_topics: true,
            default_partitions: 1,
            partitions_per_topic_max: 10_000,
            log: LogConfig::default(),
            flush: FlushPolicy::Always,
            sync_threads: 2,
            max_message_bytes: MAX_MESSAGE_BYTES_DEFAULT,
            fetch_wait_max_ms: 30_000,
            fetch_max_bytes: FETCH_MAX_BYTES_DEFAULT,
            memory_limit: crate::memory::MEMORY_LIMIT_DEFAULT,
            groups: sluice_groups::GroupConfig::default(),
            disk_faults: DiskFaults::none(),
        }
    }

    /// The host and port clients of listener `listener` are told to connect to.
    pub fn advertised(&self, listener: usize) -> (String, i32) {
        match self.advertised_listeners.get(listener) {
            Some((host, port)) => (host.clone(), *port),
            None => (self.advertised_host.clone(), self.advertised_port),
        }
    }

    /// Checks every setting (the log defaults and the group settings included); the message
    /// names the `serve` setting to fix.
    pub fn validate(&self) -> Result<(), ConfigError> {
        let max = self.partitions_per_topic_max;
        if !(1..=max).contains(&self.default_partitions) {
            return Err(ConfigError(format!(
                "default_partitions must be between 1 and {max}, got {}",
                self.default_partitions
            )));
        }
        self.log
            .validate()
            .map_err(|e| ConfigError(e.to_string()))?;
        self.groups.validate().map_err(|e| ConfigError(e.0))?;
        if !(1..=64).contains(&self.sync_threads) {
            return Err(ConfigError(format!(
                "sync_threads must be between 1 and 64, got {}",
                self.sync_threads
            )));
        }
        if self.fetch_max_bytes == 0 {
            return Err(ConfigError("fetch_max_bytes must be at least 1".to_owned()));
        }
        Ok(())
    }
}

/// The topic-level configs Sluice implements, with their Kafka names.
pub const TOPIC_CONFIG_NAMES: &[&str] = &[
    "cleanup.policy",
    "max.message.bytes",
    "retention.bytes",
    "retention.ms",
    "segment.bytes",
    "segment.ms",
];

/// A topic's config overrides (name → value as given), validated.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct TopicConfig(pub BTreeMap<String, String>);

/// Why a config was refused; the message says what to fix.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct ConfigError(pub String);

impl TopicConfig {
    /// Sets `name` to `value` after checking both; `None` removes the override.
    pub fn set(&mut self, name: &str, value: Option<&str>) -> Result<(), ConfigError> {
        if !TOPIC_CONFIG_NAMES.contains(&name) {
            return Err(ConfigError(format!(
                "unknown or unsupported topic config '{name}'; supported: {}",
                TOPIC_CONFIG_NAMES.join(", ")
            )));
        }
        let Some(value) = value else {
            self.0.remove(name);
            return Ok(());
        };
        let int = |min: i64| -> Result<i64, ConfigError> {
            let v: i64 = value.trim().parse().map_err(|e| {
                ConfigError(format!("{name} must be an integer, got '{value}' ({e})"))
            })?;
            if v < min {
                return Err(ConfigError(format!(
                    "{name} must be at least {min}, got {v}"
                )));
            }
            Ok(v)
        };
        match name {
            "cleanup.policy" => {
                if value != "delete" {
                    return Err(ConfigError(format!(
                        "cleanup.policy '{value}' is not supported: only 'delete' (compaction is not implemented)"
                    )));
                }
            }
            "retention.ms" | "retention.bytes" => {
                int(-1)?;
            }
            "segment.bytes" => {
                let v = int(sluice_log::SEGMENT_BYTES_MIN as i64)?;
                if v > sluice_log::SEGMENT_BYTES_MAX as i64 {
                    return Err(ConfigError(format!(
                        "segment.bytes must be at most {}, got {v}",
                        sluice_log::SEGMENT_BYTES_MAX
                    )));
                }
            }
            "segment.ms" => {
                int(1)?;
            }
            "max.message.bytes" => {
                int(0)?;
            }
            _ => unreachable!("checked against TOPIC_CONFIG_NAMES"),
        }
        self.0.insert(name.to_owned(), value.trim().to_owned());
        Ok(())
    }

    /// The overrides a cluster catalog holds (Kafka names to strings), each checked by
    /// [`TopicConfig::set`] as AlterConfigs checks it, so a topic reads the same whichever
    /// broker created it. An entry this broker does not accept (one a newer broker knows) is
    /// left out and returned with the reason, for the caller to log.
    pub fn from_catalog(configs: &BTreeMap<String, String>) -> (TopicConfig, Vec<ConfigError>) {
        let mut out = TopicConfig::default();
        let mut refused = Vec::new();
        for (name, value) in configs {
            if let Err(e) = out.set(name, Some(value)) {
                refused.push(e);
            }
        }
        (out, refused)
    }

    /// The overrides as a cluster catalog stores them (the inverse of
    /// [`TopicConfig::from_catalog`]).
    pub fn to_catalog(&self) -> BTreeMap<String, String> {
        self.0.clone()
    }

    fn int(&self, name: &str) -> Option<i64> {
        self.0.get(name).and_then(|v| v.parse().ok())
    }

    /// The partition log settings: broker defaults with this topic's overrides.
    pub fn log_config(&self, defaults: &LogConfig) -> LogConfig {
        let mut c = *defaults;
        if let Some(v) = self.int("retention.ms") {
            c.retention_ms = (v >= 0).then_some(v);
        }
        if let Some(v) = self.int("retention.bytes") {
            c.retention_bytes = (v >= 0).then_some(v as u64);
        }
        if let Some(v) = self.int("segment.bytes") {
            c.segment_bytes = v as u64;
        }
        if let Some(v) = self.int("segment.ms") {
            c.segment_ms = Some(v);
        }
        c
    }

    /// Effective `max.message.bytes`.
    pub fn max_message_bytes(&self, default: i64) -> i64 {
        self.int("max.message.bytes").unwrap_or(default)
    }

    /// Every supported config with its effective value and whether it is the default:
    /// `(name, value, is_default)`.
    pub fn describe(&self, broker: &BrokerConfig) -> Vec<(&'static str, String, bool)> {
        let log = self.log_config(&broker.log);
        TOPIC_CONFIG_NAMES
            .iter()
            .map(|&name| {
                let value = match name {
                    "cleanup.policy" => "delete".to_owned(),
                    "max.message.bytes" => {
                        self.max_message_bytes(broker.max_message_bytes).to_string()
                    }
                    "retention.bytes" => log.retention_bytes.map_or(-1, |v| v as i64).to_string(),
                    "retention.ms" => log.retention_ms.unwrap_or(-1).to_string(),
                    "segment.bytes" => log.segment_bytes.to_string(),
                    "segment.ms" => log.segment_ms.unwrap_or(i64::MAX).to_string(),
                    _ => unreachable!(),
                };
                (name, value, !self.0.contains_key(name))
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn broker_config_validate_names_the_setting_to_fix() {
        let dir = std::path::Path::new("/nonexistent");
        assert_eq!(BrokerConfig::new(dir).validate(), Ok(()));
        let refused = |change: fn(&mut BrokerConfig)| {
            let mut c = BrokerConfig::new(dir);
            change(&mut c);
            c.validate().unwrap_err().0
        };
        assert!(refused(|c| c.default_partitions = 0).starts_with("default_partitions must be"));
        assert!(
            refused(|c| c.sync_threads = 65).starts_with("sync_threads must be between 1 and 64")
        );
        assert!(
            refused(|c| c.log.segment_bytes = 1)
                .starts_with("invalid log configuration: segment_bytes")
        );
        assert!(refused(|c| c.groups.groups_max = 0).starts_with("groups_max must be at least 1"));
        assert!(
            refused(
                |c| c.groups.consumer.heartbeat_interval_ms = c.groups.consumer.session_timeout_ms
            )
            .contains("less than group_consumer_session_timeout_ms")
        );
        assert!(
            refused(|c| c.fetch_max_bytes = 0).starts_with("fetch_max_bytes must be at least 1")
        );
    }

    #[test]
    fn configs_are_validated_with_messages_that_say_what_to_fix() {
        let mut c = TopicConfig::default();
        c.set("retention.ms", Some("1000")).unwrap();
        assert!(
            c.set("retention.ms", Some("soon"))
                .unwrap_err()
                .0
                .contains("integer")
        );
        assert!(
            c.set("segment.bytes", Some("10"))
                .unwrap_err()
                .0
                .contains("at least")
        );
        assert!(
            c.set("cleanup.policy", Some("compact"))
                .unwrap_err()
                .0
                .contains("delete")
        );
        assert!(
            c.set("flush.ms", Some("1"))
                .unwrap_err()
                .0
                .contains("supported")
        );
        let log = c.log_config(&LogConfig::default());
        assert_eq!(log.retention_ms, Some(1000));
        c.set("retention.ms", Some("-1")).unwrap();
        assert_eq!(c.log_config(&LogConfig::default()).retention_ms, None);
        c.set("retention.ms", None).unwrap();
        assert!(c.0.is_empty());
    }

    /// A catalog's strings go through the same checks as AlterConfigs, and back unchanged.
    #[test]
    fn catalog_configs_round_trip_and_refuse_what_alter_would() {
        let mut set = TopicConfig::default();
        set.set("retention.ms", Some(" 60000 ")).unwrap();
        set.set("max.message.bytes", Some("2048")).unwrap();
        let (back, refused) = TopicConfig::from_catalog(&set.to_catalog());
        assert_eq!(back, set);
        assert!(refused.is_empty());

        let mut stored = set.to_catalog();
        stored.insert("flush.ms".into(), "1".into());
        stored.insert("segment.bytes".into(), "10".into());
        let (read, refused) = TopicConfig::from_catalog(&stored);
        assert_eq!(read, set, "refused entries are left out");
        assert_eq!(refused.len(), 2);
        assert!(refused.iter().any(|e| e.0.contains("flush.ms")));
        assert!(refused.iter().any(|e| e.0.contains("segment.bytes")));
    }
}
