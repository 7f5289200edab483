//! Per-partition log settings. The broker fills these from topic configs (`segment.bytes`,
//! `segment.ms`, `retention.ms`, `retention.bytes`, and for compaction `cleanup.policy`,
//! `min.cleanable.dirty.ratio`, `min.compaction.lag.ms`, `max.compaction.lag.ms`,
//! `delete.retention.ms`); defaults match Sluice's documented defaults, which are Kafka's.

use crate::error::{LogError, Result};

/// One gibibyte, Kafka's default `segment.bytes`.
pub const SEGMENT_BYTES_DEFAULT: u64 = 1 << 30;
/// Seven days, Kafka's default `retention.ms` (and `segment.ms`).
pub const SEVEN_DAYS_MS: i64 = 7 * 24 * 60 * 60 * 1000;
/// Largest allowed `segment_bytes`: index positions are `u32`, and a segment may exceed its limit
/// by one append (at most [`crate::batch::BATCH_BYTES_MAX`] = 1 GiB), so 1 GiB + 1 GiB < 4 GiB.
pub const SEGMENT_BYTES_MAX: u64 = 1 << 30;
/// Smallest allowed `segment_bytes` (Kafka's own minimum is 14 bytes; ours keeps tests fast
/// without letting a typo create millions of files).
pub const SEGMENT_BYTES_MIN: u64 = 1024;

/// One day, Kafka's default `delete.retention.ms`.
pub const ONE_DAY_MS: i64 = 24 * 60 * 60 * 1000;

/// What happens to old data (Kafka's `cleanup.policy`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum CleanupPolicy {
    /// Whole old segments are deleted by time and size (`retention.ms`, `retention.bytes`).
    #[default]
    Delete,
    /// The log cleaner keeps the latest record of every key (see `compact/`); nothing is
    /// deleted by time or size.
    Compact,
    /// Both: compacted, and old segments deleted by time and size (`compact,delete`).
    CompactDelete,
}

impl CleanupPolicy {
    /// Whether retention by time and size applies.
    pub fn deletes(self) -> bool {
        matches!(self, CleanupPolicy::Delete | CleanupPolicy::CompactDelete)
    }
    /// Whether the log cleaner compacts the log.
    pub fn compacts(self) -> bool {
        matches!(self, CleanupPolicy::Compact | CleanupPolicy::CompactDelete)
    }
}

/// `min.cleanable.dirty.ratio`: a fraction in `[0, 1]` (Kafka's default 0.5). A newtype so the
/// config stays `Eq` (validation refuses NaN, so bitwise equality is equality).
#[derive(Debug, Clone, Copy)]
pub struct DirtyRatio(pub f64);

impl PartialEq for DirtyRatio {
    fn eq(&self, other: &Self) -> bool {
        self.0.to_bits() == other.0.to_bits()
    }
}
impl Eq for DirtyRatio {}

impl Default for DirtyRatio {
    fn default() -> Self {
        DirtyRatio(0.5)
    }
}

/// Settings of one partition log.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LogConfig {
    /// Roll to a new segment when the active one would grow past this many bytes.
    pub segment_bytes: u64,
    /// Roll to a new segment when the active one is this old (measured from its first append
    /// since the log was opened), if it holds any data. `None`: never roll by age.
    pub segment_ms: Option<i64>,
    /// Delete sealed segments whose newest record is older than this. `None`: keep forever.
    pub retention_ms: Option<i64>,
    /// Delete the oldest sealed segments while the log would still hold at least this many bytes
    /// without them. `None`: no size limit.
    pub retention_bytes: Option<u64>,
    /// Add a sparse offset-index (and time-index) entry after at least this many bytes of batches.
    pub index_interval_bytes: u32,
    /// `cleanup.policy`: delete old segments, compact, or both. Retention by time and size
    /// applies only when the policy includes delete.
    pub cleanup_policy: CleanupPolicy,
    /// `min.cleanable.dirty.ratio`: a compacted log is cleaned once its dirty bytes (written
    /// since the last clean) exceed this fraction of its cleanable bytes.
    pub min_cleanable_dirty_ratio: DirtyRatio,
    /// `min.compaction.lag.ms`: a segment holding a record newer than this is not compacted
    /// yet (it and every later segment stay as written).
    pub min_compaction_lag_ms: i64,
    /// `max.compaction.lag.ms`: a log whose dirty part holds a record older than this is
    /// cleaned whatever its dirty ratio, and the active segment rolls at this age (so it can be
    /// cleaned). `None`: no maximum (Kafka's default, `Long.MAX_VALUE`).
    pub max_compaction_lag_ms: Option<i64>,
    /// `delete.retention.ms`: how long a tombstone (a record with a null value) stays after the
    /// clean that first saw it, so that consumers reading from the start see the delete.
    pub delete_retention_ms: i64,
}

impl Default for LogConfig {
    fn default() -> Self {
        LogConfig {
            segment_bytes: SEGMENT_BYTES_DEFAULT,
            segment_ms: Some(SEVEN_DAYS_MS),
            retention_ms: Some(SEVEN_DAYS_MS),
            retention_bytes: None,
            index_interval_bytes: 4096,
            cleanup_policy: CleanupPolicy::Delete,
            min_cleanable_dirty_ratio: DirtyRatio::default(),
            min_compaction_lag_ms: 0,
            max_compaction_lag_ms: None,
            delete_retention_ms: ONE_DAY_MS,
        }
    }
}

impl LogConfig {
    /// Checks limits that keep positions in range and memory bounded.
    pub fn validate(&self) -> Result<()> {
        if !(SEGMENT_BYTES_MIN..=SEGMENT_BYTES_MAX).contains(&self.segment_bytes) {
            return Err(LogError::Config(format!(
                "segment_bytes {} must be between {SEGMENT_BYTES_MIN} and {SEGMENT_BYTES_MAX}",
                self.segment_bytes
            )));
        }
        if self.index_interval_bytes < 64 {
            return Err(LogError::Config(format!(
                "index_interval_bytes {} must be at least 64",
                self.index_interval_bytes
            )));
        }
        if let Some(ms) = self.segment_ms
            && ms <= 0
        {
            return Err(LogError::Config(format!(
                "segment_ms {ms} must be positive"
            )));
        }
        if let Some(ms) = self.retention_ms
            && ms < 0
        {
            return Err(LogError::Config(format!(
                "retention_ms {ms} must not be negative"
            )));
        }
        let ratio = self.min_cleanable_dirty_ratio.0;
        if !(0.0..=1.0).contains(&ratio) {
            return Err(LogError::Config(format!(
                "min_cleanable_dirty_ratio {ratio} must be between 0 and 1"
            )));
        }
        if self.min_compaction_lag_ms < 0 {
            return Err(LogError::Config(format!(
                "min_compaction_lag_ms {} must not be negative",
                self.min_compaction_lag_ms
            )));
        }
        if let Some(max) = self.max_compaction_lag_ms {
            if max < 1 {
                return Err(LogError::Config(format!(
                    "max_compaction_lag_ms {max} must be at least 1"
                )));
            }
            if max < self.min_compaction_lag_ms {
                return Err(LogError::Config(format!(
                    "min_compaction_lag_ms {} must not be greater than max_compaction_lag_ms {max}",
                    self.min_compaction_lag_ms
                )));
            }
        }
        if self.delete_retention_ms < 0 {
            return Err(LogError::Config(format!(
                "delete_retention_ms {} must not be negative",
                self.delete_retention_ms
            )));
        }
        Ok(())
    }

    /// The age at which the active segment rolls: `segment_ms`, or, for a compacted log with
    /// a `max_compaction_lag_ms`, the smaller of the two (the active segment is never cleaned,
    /// so it must become sealed for the maximum lag to hold, as in Kafka).
    pub fn roll_ms(&self) -> Option<i64> {
        let lag = self
            .max_compaction_lag_ms
            .filter(|_| self.cleanup_policy.compacts());
        match (self.segment_ms, lag) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }
}

/// When appended data is made durable.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum FlushPolicy {
    /// Group commit: a sync round starts as soon as anything is appended, and one round covers
    /// every append queued while the previous round ran. Default.
    #[default]
    Always,
    /// Sync rounds run every `interval_ms`; an append becomes durable (and readable) at the next
    /// round. Trades latency for fewer fdatasyncs.
    IntervalMs(u64),
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_are_kafkas_and_valid() {
        let c = LogConfig::default();
        c.validate().unwrap();
        assert_eq!(c.cleanup_policy, CleanupPolicy::Delete);
        assert_eq!(c.min_cleanable_dirty_ratio, DirtyRatio(0.5));
        assert_eq!(c.min_compaction_lag_ms, 0);
        assert_eq!(c.max_compaction_lag_ms, None);
        assert_eq!(c.delete_retention_ms, 86_400_000);
    }

    #[test]
    fn compaction_settings_are_validated() {
        let bad = [
            LogConfig {
                min_cleanable_dirty_ratio: DirtyRatio(1.5),
                ..LogConfig::default()
            },
            LogConfig {
                min_cleanable_dirty_ratio: DirtyRatio(f64::NAN),
                ..LogConfig::default()
            },
            LogConfig {
                min_compaction_lag_ms: -1,
                ..LogConfig::default()
            },
            LogConfig {
                max_compaction_lag_ms: Some(0),
                ..LogConfig::default()
            },
            LogConfig {
                min_compaction_lag_ms: 10,
                max_compaction_lag_ms: Some(5),
                ..LogConfig::default()
            },
            LogConfig {
                delete_retention_ms: -1,
                ..LogConfig::default()
            },
        ];
        for c in bad {
            assert!(matches!(c.validate(), Err(LogError::Config(_))), "{c:?}");
        }
    }

    #[test]
    fn max_compaction_lag_shortens_the_roll_of_compacted_logs_only() {
        let mut c = LogConfig {
            segment_ms: Some(1000),
            max_compaction_lag_ms: Some(100),
            ..LogConfig::default()
        };
        assert_eq!(c.roll_ms(), Some(1000));
        c.cleanup_policy = CleanupPolicy::Compact;
        assert_eq!(c.roll_ms(), Some(100));
        c.segment_ms = None;
        assert_eq!(c.roll_ms(), Some(100));
        assert!(CleanupPolicy::CompactDelete.deletes() && CleanupPolicy::CompactDelete.compacts());
        assert!(!CleanupPolicy::Compact.deletes());
    }
}
