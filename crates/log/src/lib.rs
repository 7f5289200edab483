//! # sluice-log: the durable partition log
//!
//! The storage engine under the broker. One [`PartitionLog`] per topic partition stores Kafka
//! RecordBatch v2 bytes exactly as producers sent them, except the 8-byte base offset, which the
//! log assigns (the batch CRC does not cover it).
//!
//! Where it sits in the produce path: the broker's produce handler hands each partition's
//! record batches to [`PartitionLog::append`] → the batches are validated and written into the
//! active segment (*appended*, [`Appended`]) → a [`GroupCommitter`] sync thread fdatasyncs the
//! segment, covering every append queued since its last round (*durable*, [`Durable`]) → the
//! high watermark moves and readers may see the data → the broker answers the producer
//! (*acknowledged*). In the fetch path, [`PartitionLog::read`] returns whole, CRC-checked
//! batches from the segment files, ready to put in a response.
//!
//! ```
//! use std::sync::Arc;
//! use sluice_log::batch::build::{Record, batch};
//! use sluice_log::{CommitConfig, GroupCommitter, LogConfig, PartitionLog, SystemClock};
//!
//! # fn main() -> Result<(), sluice_log::LogError> {
//! # let dir = std::env::temp_dir().join(format!("sluice-doc-{}", std::process::id()));
//! let committer = GroupCommitter::start(CommitConfig::default());
//! let log = PartitionLog::open(&dir, LogConfig::default(), &committer, Arc::new(SystemClock))?;
//!
//! // A producer's RecordBatch; the broker passes the bytes through untouched.
//! let bytes = batch(1_700_000_000_000, &[Record { timestamp_delta: 0, key: None, value: Some(b"hello") }]);
//! let appended = log.append(&bytes)?; // appended: offsets assigned, not yet durable
//! let durable = appended.wait_durable()?; // durable: an fdatasync covered it
//! assert_eq!(log.high_watermark(), durable.last_offset + 1);
//!
//! let read = log.read(durable.base_offset, 1 << 20)?;
//! assert_eq!(&read.records[8..], &bytes[8..]); // same bytes, base offset assigned by the log
//! log.close()?;
//! # log.delete()?;
//! # Ok(())
//! # }
//! ```
//!
//! Modules:
//! - [`batch`]: RecordBatch v2 header view, validation, a small batch builder for tests.
//! - `segment`: one segment file and its sparse indexes; append, seal, read, scan.
//! - `index`: sparse offset and time indexes (in memory while active, on disk when sealed).
//! - `recovery`: opening a directory after a crash; the decision table lives there.
//! - `commit`: group commit, the sync threads, and [`Syncable`], what they sync (a partition's
//!   active segment here; the consumer-group store in `sluice-groups`).
//! - `partition`: the log itself, retention, timestamp lookup, close and delete; what a full
//!   disk and a failed fdatasync each do (a state to wait out, and a failure).
//! - `compact`: log compaction (`cleanup.policy=compact`): [`PartitionLog::cleanable`] and
//!   [`PartitionLog::clean`] with [`CleanerLimits`]; the key map and batch rewriting
//!   (`compact/records.rs`), the crash-safe swap of cleaned segments and its recovery table
//!   (`compact/swap.rs`), the cleaner checkpoint.
//! - `space`: [`DataDirSpace`], whether a data directory is full, shared by everything that
//!   writes into it.
//! - `latency`: [`LatencyHistogram`] and [`LATENCY_BUCKET_BOUNDS_MICROS`], the one bucket
//!   layout of every latency histogram in `/metrics` (fdatasyncs here, requests above).
//! - `faults`: [`DiskFaults`], the seam through which tests inject full disks, failed writes and
//!   syncs, renames, and power loss ([`PowerLoss`]; see `tests/simulation.rs`); public so that
//!   the group store (`sluice-groups`) goes through the same seam.
//!
//! Files in a partition directory: `<base offset, 20 digits>.log` (segment data),
//! `.index` (offset → position), `.timeindex` (timestamp → offset) and, after a clean shutdown
//! only, `clean-shutdown`; for compacted logs `cleaner-checkpoint` and, during a pass,
//! `<base>-<end>.{log,index,timeindex}.{cleaned,swap}`.
//!
//! ## Memory and files per partition
//! Fixed, whatever the data size: the segment list (about 200 bytes per segment), and the
//! active segment's in-memory index tails, 256 entries each (2 KiB offset + 4 KiB time index,
//! allocated once when the segment is created). Index entries beyond the tails live in the index
//! files and are read with `pread` (the page cache keeps the hot ones). Open files: one per
//! segment, plus the active segment's two index files.
//!
//! The append path allocates nothing: it validates in place, writes the caller's bytes with one
//! `pwritev` (the patched base offset comes from a stack buffer), and index entries go into the
//! fixed tails. Reads allocate one buffer per call, for the bytes returned.

pub mod batch;
mod clock;
mod commit;
mod compact;
mod config;
mod error;
mod faults;
mod index;
mod latency;
mod partition;
mod recovery;
mod segment;
pub mod sim;
mod space;
mod start;

pub use clock::{Clock, ManualClock, SystemClock};
pub use commit::{
    CommitConfig, CommitHandle, CommitStats, CommitStatsSnapshot, GroupCommitter, SyncQueued,
    Syncable,
};
pub use compact::{
    BatchCodecs, CLEANER_CHECKPOINT_FILE, CleanOutcome, CleanReason, Cleanable, CleanerLimits,
    Codecs, CrashPoint, DECOMPRESSED_MAX_BYTES, DEDUPE_BUFFER_BYTES_DEFAULT,
    IO_BUFFER_BYTES_DEFAULT, PRODUCERS_TRACKED_MAX,
};
pub use config::{
    CleanupPolicy, DirtyRatio, FlushPolicy, LogConfig, ONE_DAY_MS, SEGMENT_BYTES_DEFAULT,
    SEGMENT_BYTES_MAX, SEGMENT_BYTES_MIN, SEVEN_DAYS_MS,
};
pub use error::{BatchError, LogError, Refusal, Result, is_no_space};
pub use faults::{Allowance, DiskFaults, PowerLoss, SplitMix64};
pub use latency::{
    LATENCY_BUCKET_BOUNDS_MICROS, LATENCY_BUCKETS, LatencyHistogram, LatencySnapshot,
};
pub use partition::{
    Appended, Durable, PartitionLog, ReadResult, RetentionOutcome, validate_batches,
};
pub use recovery::{CLEAN_SHUTDOWN_MARKER, RecoveryAction, RecoveryReport};
pub use space::{
    DataDirSpace, FsSpace, RECHECK_INTERVAL, ROOM_BYTES_MAX, SpaceStatus, TRANSITION_LOG_INTERVAL,
    statvfs,
};
pub use start::LOG_START_FILE;
