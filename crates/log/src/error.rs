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
    /// The disk (or the user's quota) had no room for a write: ENOSPC or EDQUOT from writing
    /// segment data or an index, or from creating a new segment's files. Only the append that
    /// hit it failed: whatever part of it reached the file was cut off again, and the log is
    /// unchanged and healthy. The next append simply tries again, and succeeds once space has
    /// been freed. (ENOSPC from an fdatasync is not this: see [`LogError::Failed`].)
    #[error(
        "no space left on the device for {op} {path}: the data directory is full ({source}); \
         nothing was written; free space (retention, deleting topics) and retry"
    )]
    NoSpace {
        op: &'static str,
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    /// A previous fdatasync (or a write failing with an I/O error other than a full disk)
    /// failed. After a failed fdatasync the kernel may have dropped the dirty pages and cleared
    /// the error, so a second fdatasync could report success for data that never reached the
    /// disk: the partition refuses further appends until it is reopened (which runs recovery).
    /// Reads of data that was durable before the failure keep working.
    #[error(
        "partition log at {path} refuses appends after an I/O error ({source}); data durable \
         before it stays readable; restart the broker (reopen the log) to recover"
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
    /// The store that orders a partition's writes refused a batch (cluster mode: the shared
    /// metadata store checks every idempotent producer's sequence, whichever broker the batch
    /// came through). Nothing of it was appended.
    #[error("{0}")]
    Refused(Refusal),
}

/// Why the store that orders writes refused a batch ([`LogError::Refused`]).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Refusal {
    #[error(
        "producer {producer_id}: out of order sequence {first_seq}, the next expected is {expected}"
    )]
    OutOfOrderSequence {
        producer_id: i64,
        first_seq: i32,
        expected: i32,
    },
    #[error(
        "producer {producer_id} is unknown here and its batch starts at sequence {first_seq}, not 0"
    )]
    UnknownProducer { producer_id: i64, first_seq: i32 },
    #[error("producer {producer_id} epoch {epoch} is fenced by epoch {current}")]
    ProducerFenced {
        producer_id: i64,
        epoch: i16,
        current: i16,
    },
    #[error("producer {producer_id} new epoch {epoch} must start at sequence 0, not {first_seq}")]
    NewEpochNotAtZero {
        producer_id: i64,
        epoch: i16,
        first_seq: i32,
    },
    #[error("the partition does not exist (any more)")]
    UnknownPartition,
}

impl LogError {
    /// An error from a write (or a file creation): [`LogError::NoSpace`] when the disk or quota
    /// is full, [`LogError::Io`] otherwise. Never use it for fdatasync or fsync errors: those
    /// are never recoverable (see [`LogError::Failed`]).
    pub(crate) fn write(op: &'static str, path: impl Into<PathBuf>, source: io::Error) -> Self {
        if is_no_space(&source) {
            LogError::NoSpace {
                op,
                path: path.into(),
                source,
            }
        } else {
            LogError::io(op, path, source)
        }
    }

    /// Whether this is [`LogError::NoSpace`]: the append failed for want of space, and the log
    /// is healthy.
    pub fn is_no_space(&self) -> bool {
        matches!(self, LogError::NoSpace { .. })
    }

    pub(crate) fn io(op: &'static str, path: impl Into<PathBuf>, source: io::Error) -> Self {
        LogError::Io {
            op,
            path: path.into(),
            source,
        }
    }
}

/// Whether an I/O error means "no room": ENOSPC (the filesystem is full) or EDQUOT (the user's
/// quota is).
pub fn is_no_space(error: &io::Error) -> bool {
    matches!(error.raw_os_error(), Some(libc::ENOSPC | libc::EDQUOT))
        || error.kind() == io::ErrorKind::StorageFull
        || error.kind() == io::ErrorKind::QuotaExceeded
}

pub type Result<T, E = LogError> = std::result::Result<T, E>;
