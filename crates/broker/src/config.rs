//! Broker settings and per-topic configs.

use std::collections::BTreeMap;
use std::io::Write;
use std::path::{Path, PathBuf};

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
    /// The id Metadata and DescribeCluster report: made once per cluster by
    /// [`new_cluster_id`] and kept with its data (the data directory's [`CLUSTER_ID_FILE`],
    /// the bucket, or the cluster's PostgreSQL database). [`BrokerConfig::new`] makes a new
    /// one, which is what a broker opened without `sluice serve` (a test) reports.
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
    /// The log cleaner's limits (compacted topics): its key map's memory, its I/O rate and
    /// buffer, named as Kafka's `log.cleaner.*` settings.
    pub cleaner: sluice_log::CleanerLimits,
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
            cluster_id: new_cluster_id(),
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
            cleaner: sluice_log::CleanerLimits::default(),
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

// ---------------------------------------------------------------------------------------------
// Cluster id

/// Characters of a cluster id: 16 bytes in URL-safe base64 without padding.
pub const CLUSTER_ID_CHARS: usize = 22;

/// The file in a local-mode data directory that holds its cluster id (one line).
pub const CLUSTER_ID_FILE: &str = "cluster-id";

/// The cluster id of `uuid`, as Kafka writes a `Uuid` (`kafka-storage random-uuid`): its 16
/// bytes in URL-safe base64 without padding. `None` for the ids Kafka's `Uuid.randomUuid`
/// never hands out: the reserved all-zero and 0..01 ids, and any whose text starts with `-`
/// (it would read as an option on a command line, e.g. `kafka-storage format -t`).
pub fn cluster_id_of(uuid: [u8; 16]) -> Option<String> {
    use base64::Engine;
    let value = u128::from_be_bytes(uuid);
    if value == 0 || value == 1 {
        return None;
    }
    let id = base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(uuid);
    (!id.starts_with('-')).then_some(id)
}

/// A new random cluster id (a version 4 UUID, see [`cluster_id_of`]).
pub fn new_cluster_id() -> String {
    loop {
        if let Some(id) = cluster_id_of(*uuid::Uuid::new_v4().as_bytes()) {
            return id;
        }
    }
}

/// Checks that `id` is a cluster id as [`cluster_id_of`] writes them (any 16 bytes are
/// accepted back, a leading `-` included: a cluster keeps the id it was given).
pub fn check_cluster_id(id: &str) -> Result<(), ConfigError> {
    use base64::Engine;
    let decoded = base64::engine::general_purpose::URL_SAFE_NO_PAD.decode(id);
    match decoded {
        Ok(bytes) if id.len() == CLUSTER_ID_CHARS && bytes.len() == 16 => Ok(()),
        _ => Err(ConfigError(format!(
            "{id:?} is not a cluster id ({CLUSTER_ID_CHARS} characters of URL-safe base64 \
             encoding 16 bytes)"
        ))),
    }
}

/// Why the cluster id of a data directory could not be read or kept.
#[derive(Debug, thiserror::Error)]
pub enum ClusterIdError {
    #[error("{op} {path}: {source}")]
    Io {
        op: &'static str,
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error(
        "{path}: {problem}; it names the cluster this data directory belongs to. Restore it \
         from a backup, or delete it to give the data directory a new cluster id (clients \
         will then see another cluster)"
    )]
    Corrupt { path: PathBuf, problem: String },
}

/// The cluster id of a local-mode data directory: read from its [`CLUSTER_ID_FILE`], or,
/// when there is none (a new data directory, or one made before cluster ids were kept),
/// `new()` written there first. Returns the id and whether it was made now.
///
/// Durability: when this returns a new id, the file is fsynced and its directory entry too
/// (temporary file, fsync, rename, fsync of the directory), so a crash never leaves a torn
/// or empty file under the real name and a restart reports the same id. A file that is not
/// a cluster id is an error, never silently replaced: that would change the cluster's id.
pub fn load_or_create_cluster_id(
    data_dir: &Path,
    new: impl FnOnce() -> String,
) -> Result<(String, bool), ClusterIdError> {
    let path = data_dir.join(CLUSTER_ID_FILE);
    let io = |op, path: &Path| {
        let path = path.to_owned();
        move |source| ClusterIdError::Io { op, path, source }
    };
    match std::fs::read(&path) {
        Ok(bytes) => {
            let text = String::from_utf8(bytes).map_err(|_| ClusterIdError::Corrupt {
                path: path.clone(),
                problem: "not UTF-8 text".to_owned(),
            })?;
            let id = text.trim_end_matches('\n');
            check_cluster_id(id).map_err(|e| ClusterIdError::Corrupt {
                path: path.clone(),
                problem: e.0,
            })?;
            return Ok((id.to_owned(), false));
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(io("read", &path)(e)),
    }
    let id = new();
    std::fs::create_dir_all(data_dir).map_err(io("create", data_dir))?;
    // A stale temporary file of a crashed earlier start is simply overwritten.
    let tmp = data_dir.join(format!("{CLUSTER_ID_FILE}.tmp"));
    let mut file = std::fs::File::create(&tmp).map_err(io("create", &tmp))?;
    file.write_all(format!("{id}\n").as_bytes())
        .map_err(io("write", &tmp))?;
    file.sync_all().map_err(io("fsync", &tmp))?;
    drop(file);
    std::fs::rename(&tmp, &path).map_err(io("rename", &tmp))?;
    std::fs::File::open(data_dir)
        .and_then(|dir| dir.sync_all())
        .map_err(io("fsync", data_dir))?;
    Ok((id, true))
}

/// The topic-level configs Sluice implements, with their Kafka names.
pub const TOPIC_CONFIG_NAMES: &[&str] = &[
    "cleanup.policy",
    "delete.retention.ms",
    "max.compaction.lag.ms",
    "max.message.bytes",
    "message.timestamp.type",
    "min.cleanable.dirty.ratio",
    "min.compaction.lag.ms",
    "retention.bytes",
    "retention.ms",
    "segment.bytes",
    "segment.ms",
];

/// `cleanup.policy` as Kafka writes it: a list of `delete` and `compact`.
fn parse_cleanup_policy(value: &str) -> Result<sluice_log::CleanupPolicy, ConfigError> {
    use sluice_log::CleanupPolicy;
    let (mut delete, mut compact) = (false, false);
    for item in value.split(',').map(str::trim) {
        match item {
            "delete" if !delete => delete = true,
            "compact" if !compact => compact = true,
            _ => {
                return Err(ConfigError(format!(
                    "cleanup.policy '{value}' is not a list of 'delete' and 'compact' (each at most once)"
                )));
            }
        }
    }
    Ok(match (delete, compact) {
        (true, true) => CleanupPolicy::CompactDelete,
        (false, true) => CleanupPolicy::Compact,
        _ => CleanupPolicy::Delete,
    })
}

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
                parse_cleanup_policy(value)?;
            }
            "min.cleanable.dirty.ratio" => {
                let v: f64 = value.trim().parse().map_err(|e| {
                    ConfigError(format!("{name} must be a number, got '{value}' ({e})"))
                })?;
                if !(0.0..=1.0).contains(&v) {
                    return Err(ConfigError(format!(
                        "{name} must be between 0 and 1, got {v}"
                    )));
                }
            }
            "message.timestamp.type" => {
                // Records keep the timestamps their producers gave (batches are stored as
                // sent); Kafka Streams sets CreateTime on the topics it creates.
                if value.trim() != "CreateTime" {
                    return Err(ConfigError(format!(
                        "message.timestamp.type '{value}' is not supported: only 'CreateTime' (records keep their producers' timestamps)"
                    )));
                }
            }
            "min.compaction.lag.ms" | "delete.retention.ms" => {
                int(0)?;
            }
            "max.compaction.lag.ms" => {
                int(1)?;
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
        if let Some(v) = self.0.get("cleanup.policy") {
            c.cleanup_policy = parse_cleanup_policy(v).unwrap_or(c.cleanup_policy);
        }
        if let Some(v) = self
            .0
            .get("min.cleanable.dirty.ratio")
            .and_then(|v| v.parse().ok())
        {
            c.min_cleanable_dirty_ratio = sluice_log::DirtyRatio(v);
        }
        if let Some(v) = self.int("min.compaction.lag.ms") {
            c.min_compaction_lag_ms = v;
        }
        if let Some(v) = self.int("max.compaction.lag.ms") {
            // Kafka's default, Long.MAX_VALUE, is "no maximum".
            c.max_compaction_lag_ms = (v < i64::MAX).then_some(v);
        }
        if let Some(v) = self.int("delete.retention.ms") {
            c.delete_retention_ms = v;
        }
        c
    }

    /// Whether these overrides compact the topic (`cleanup.policy` holds `compact`).
    pub fn compacts(&self) -> bool {
        self.0
            .get("cleanup.policy")
            .and_then(|v| parse_cleanup_policy(v).ok())
            .is_some_and(|p| p.compacts())
    }

    /// Refuses what the storage holding the topic cannot do: compaction is the local log's
    /// (`local`: partitions are local logs). The message says what to use instead.
    pub fn check_storage(&self, local: bool) -> Result<(), ConfigError> {
        if self.compacts() && !local {
            return Err(ConfigError(
                "cleanup.policy=compact is not supported in object-storage or cluster mode yet \
                 (only the local log compacts): use cleanup.policy=delete, or a broker on local \
                 disk"
                    .to_owned(),
            ));
        }
        Ok(())
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
                    "cleanup.policy" => self
                        .0
                        .get("cleanup.policy")
                        .cloned()
                        .unwrap_or_else(|| "delete".to_owned()),
                    "delete.retention.ms" => log.delete_retention_ms.to_string(),
                    "max.compaction.lag.ms" => {
                        log.max_compaction_lag_ms.unwrap_or(i64::MAX).to_string()
                    }
                    "min.cleanable.dirty.ratio" => log.min_cleanable_dirty_ratio.0.to_string(),
                    "min.compaction.lag.ms" => log.min_compaction_lag_ms.to_string(),
                    "message.timestamp.type" => "CreateTime".to_owned(),
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
    fn cluster_ids_look_like_kafkas() {
        // Kafka's own example: `kafka-storage random-uuid` prints ids like this one.
        check_cluster_id("335OOKqZSOKbRagAbe-eRQ").unwrap();
        for _ in 0..1000 {
            let id = new_cluster_id();
            assert_eq!(id.len(), CLUSTER_ID_CHARS, "{id}");
            assert!(
                id.bytes()
                    .all(|c| c.is_ascii_alphanumeric() || c == b'-' || c == b'_'),
                "{id}"
            );
            assert!(!id.starts_with('-'), "{id}");
            check_cluster_id(&id).unwrap();
        }
        assert_ne!(new_cluster_id(), new_cluster_id());
        // What Kafka's Uuid.randomUuid never returns.
        assert_eq!(cluster_id_of([0; 16]), None);
        let mut one = [0; 16];
        one[15] = 1;
        assert_eq!(cluster_id_of(one), None);
        assert_eq!(cluster_id_of([0xf8; 16]), None, "starts with '-'");
        assert_eq!(cluster_id_of([0xfb; 16]), None, "starts with '-'");
        // A leading '-' is only refused when making an id: a stored one is read back.
        check_cluster_id("-_v7-_v7-_v7-_v7-_v7-w").unwrap();
        assert_eq!(
            cluster_id_of(*b"0123456789abcdef").as_deref(),
            Some("MDEyMzQ1Njc4OWFiY2RlZg")
        );
        for bad in [
            "",
            "sluice",
            "MDEyMzQ1Njc4OWFiY2RlZg=",
            "MDEyMzQ1Njc4OWFiY2RlZ+",
            "MDEyMzQ1Njc4OWFiY2RlZgAA",
        ] {
            assert!(check_cluster_id(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn a_data_directory_keeps_its_cluster_id() {
        let dir = tempfile::tempdir().unwrap();
        let data = dir.path().join("data");
        let (id, created) = load_or_create_cluster_id(&data, new_cluster_id).unwrap();
        assert!(created);
        let (again, created) =
            load_or_create_cluster_id(&data, || unreachable!("the file is there")).unwrap();
        assert_eq!((again.as_str(), created), (id.as_str(), false));
        assert_eq!(
            std::fs::read_to_string(data.join(CLUSTER_ID_FILE)).unwrap(),
            format!("{id}\n")
        );
        assert!(!data.join("cluster-id.tmp").exists());

        for corrupt in [
            &b""[..],
            b"sluice\n",
            b"\xff\xfe",
            b"MDEyMzQ1Njc4OWFiY2RlZg\nmore\n",
        ] {
            std::fs::write(data.join(CLUSTER_ID_FILE), corrupt).unwrap();
            let e = load_or_create_cluster_id(&data, new_cluster_id).unwrap_err();
            assert!(matches!(e, ClusterIdError::Corrupt { .. }), "{e}");
            assert!(e.to_string().contains("cluster-id"), "{e}");
        }
    }

    #[test]
    fn broker_config_validate_names_the_setting_to_fix() {
        let dir = Path::new("/nonexistent");
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
            c.set("cleanup.policy", Some("shred"))
                .unwrap_err()
                .0
                .contains("'delete' and 'compact'")
        );
        c.set("cleanup.policy", Some("delete, compact")).unwrap();
        assert!(c.compacts());
        assert!(c.check_storage(true).is_ok());
        assert!(
            c.check_storage(false)
                .unwrap_err()
                .0
                .contains("object-storage")
        );
        let compacted = c.log_config(&LogConfig::default());
        assert_eq!(
            compacted.cleanup_policy,
            sluice_log::CleanupPolicy::CompactDelete
        );
        c.set("cleanup.policy", None).unwrap();
        assert!(
            c.set("min.cleanable.dirty.ratio", Some("2"))
                .unwrap_err()
                .0
                .contains("between 0 and 1")
        );
        assert!(c.set("max.compaction.lag.ms", Some("0")).is_err());
        c.set("max.compaction.lag.ms", Some(&i64::MAX.to_string()))
            .unwrap();
        assert_eq!(
            c.log_config(&LogConfig::default()).max_compaction_lag_ms,
            None
        );
        c.set("max.compaction.lag.ms", None).unwrap();
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
