//! Per-partition log settings. The broker fills these from topic configs (`segment.bytes`,
//! `segment.ms`, `retention.ms`, `retention.bytes`); defaults match Sluice's documented defaults.

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
}

impl Default for LogConfig {
    fn default() -> Self {
        LogConfig {
            segment_bytes: SEGMENT_BYTES_DEFAULT,
            segment_ms: Some(SEVEN_DAYS_MS),
            retention_ms: Some(SEVEN_DAYS_MS),
            retention_bytes: None,
            index_interval_bytes: 4096,
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
        Ok(())
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
