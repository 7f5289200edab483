//! The log's errors. Every I/O error keeps its source and the path it concerns; the broker maps
//! these to Kafka error codes in one place (`broker::errors`).

use std::io;
use std::path::PathBuf;
use std::sync::Arc;

/// Why a batch was refused. Nothing is written when any of these is returned.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BatchError {
    #[error(
        "batch length field {declared} is impossible (must cover a 49-byte header and stay under 1 GiB)"
    )]
    BadLength { declared: i32 },
    #[error("batch is truncated: {available} bytes present, {needed:?} needed")]
    Truncated {
        available: usize,
        needed: Option<usize>,
    },
    #[error("batch magic is {magic}, only record batch format v2 (magic 2) is supported")]
    BadMagic { magic: i8 },
    #[error("batch CRC-32C mismatch: header says {stored:#010x}, bytes give {computed:#010x}")]
    BadCrc { stored: u32, computed: u32 },
    #[error("batch record count is {count}, must be at least 1")]
    NoRecords { count: i32 },
    #[error(
        "batch last offset delta {last_offset_delta} does not match its record count {record_count} (expected count - 1)"
    )]
    OffsetDeltaMismatch {
        last_offset_delta: i32,
        record_count: i32,
    },
    #[error("the bytes hold no batch")]
    Empty,
    #[error("{bytes} bytes in one append; at most {max} are accepted")]
    TooLarge { bytes: usize, max: usize },
}

/// Errors from the partition log.
#[derive(Debug, thiserror::Error)]
pub enum LogError {
    #[error("invalid batch at byte {position} of the appended data: {source}")]
    InvalidBatch {
        position: usize,
        #[source]
        source: BatchError,
    },
    #[error("offset {requested} is out of range: the log holds [{log_start}, {high_watermark})")]
    OffsetOutOfRange {
        requested: i64,
        log_start: i64,
        high_watermark: i64,
    },
    #[error("{op} {path}: {source}")]
    Io {
        op: &'static str,
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    #[error("corrupt data in {path} at byte {position}: {source}")]
    Corrupt {
        path: PathBuf,
        position: u64,
        #[source]
        source: BatchError,
    },
    #[error("corrupt index {path}: {detail}")]
    CorruptIndex { path: PathBuf, detail: String },
    /// A previous write or fdatasync failed. After a failed fdatasync the kernel may have dropped
    /// the dirty pages, so nothing written since the last successful sync can be trusted: the
    /// partition refuses further appends until it is reopened (which runs recovery).
    #[error(
        "partition log at {path} is failed after an earlier I/O error ({source}); reopen it to recover"
    )]
    Failed {
        path: PathBuf,
        #[source]
        source: Arc<io::Error>,
    },
    #[error("partition log at {path} is closed")]
    Closed { path: PathBuf },
    #[error("invalid log configuration: {0}")]
    Config(String),
}

impl LogError {
    pub(crate) fn io(op: &'static str, path: impl Into<PathBuf>, source: io::Error) -> Self {
        LogError::Io {
            op,
            path: path.into(),
            source,
        }
    }
}

pub type Result<T, E = LogError> = std::result::Result<T, E>;
