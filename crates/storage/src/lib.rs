//! # sluice-storage: the one door to a partition's data, for every listener
//!
//! The broker re-exports this crate as `sluice_broker::storage`.
//!
//! [`PartitionStorage`] is what the broker asks of a partition's storage; the Kafka handlers
//! (`handlers/produce.rs`, `fetch.rs`, `list_offsets.rs`), the HTTP API and `/metrics` see
//! partitions only through it (`Topic::partition` hands out an `Arc<dyn PartitionStorage>`), so
//! nothing above the broker knows which backend runs. The local segmented log
//! (`sluice_log::PartitionLog`, at the end of this file) is its first implementation; the
//! object-store log (`sluice-objstore`) is the second.
//!
//! The three stages of a write, as types: [`PartitionStorage::append`] returns [`Appended`]
//! (offsets assigned, not yet durable nor visible), [`Appended::durable`] resolves to
//! [`Durable`] once the backend's durability point covers it (a group-commit `fdatasync`
//! locally; a successful PUT for an object store), and only then may a listener acknowledge.
//! Reads ([`PartitionStorage::read`]) return durable data only: whole batches, never past the
//! high watermark. [`wait_for_data`] parks a reader until a high watermark moves past what it
//! saw; it registers for the change before it checks, so a move between a read and the wait is
//! never missed.
//!
//! Cost: one dynamic call per batch read or append (never per record); the append path adds
//! no allocation to the log's own.

use futures::FutureExt;
use futures::future::{BoxFuture, Shared, select_all};
use sluice_log::PartitionLog;
use tokio::time::Instant;

/// Offsets the backend's durability point covers: they survive a crash and are readable.
pub use sluice_log::Durable;
/// Why a storage call failed: the local log's error, which already names every failure a
/// partition reports (`OffsetOutOfRange` with the partition's bounds, `Closed` once its topic
/// is deleted, `NoSpace` on a full disk, I/O, an invalid batch). Its Kafka code is
/// `errors::storage_error_code`. A second backend with failures of its own (a failed PUT)
/// turns this into an enum that wraps both.
pub use sluice_log::LogError as StorageError;
/// Whole batches from a read (CRC-checked, exactly as stored; empty at the high watermark)
/// with the partition's high watermark and log start at the read.
pub use sluice_log::ReadResult;

/// One partition's stored data, whatever keeps it.
pub trait PartitionStorage: Send + Sync + std::fmt::Debug {
    /// Appends whole RecordBatch v2 batches (concatenated), validated and given the next
    /// offsets. On return the data is *appended*: neither durable nor readable yet; await
    /// [`Appended::durable`] before acknowledging it. On error nothing was appended.
    fn append(&self, batches: &[u8]) -> Result<Appended, StorageError>;

    /// Whole batches from the one holding `offset`: at least one (even over `max_bytes`), then
    /// more while they fit in `max_bytes`; durable data only (stops at the high watermark).
    /// `offset` at the high watermark reads nothing; outside the partition is
    /// [`StorageError::OffsetOutOfRange`].
    fn read(&self, offset: i64, max_bytes: usize) -> Result<ReadResult, StorageError>;

    /// Resolves at once if the high watermark is above `offset`, else at the next change of
    /// the partition (its high watermark moves, or it fails or is deleted; callers read again
    /// to find out which). Registers before it checks, so no change is missed.
    fn wait_past(&self, offset: i64) -> BoxFuture<'_, ()>;

    /// `(offset, timestamp)` of the first durable record whose timestamp is at least
    /// `timestamp_ms`; `None` if every record is older.
    fn offset_for_timestamp(&self, timestamp_ms: i64) -> Result<Option<(i64, i64)>, StorageError>;

    /// The first offset still stored.
    fn log_start_offset(&self) -> i64;

    /// The highest record timestamp stored (ListOffsets' max-timestamp spec, KIP-734), as far
    /// as this broker knows without waiting; `None` when the partition holds no record. It may
    /// be a record not yet durable: [`offset_for`](Self::offset_for) then finds no durable
    /// record that new and answers none, as Kafka does above its high watermark.
    fn max_timestamp(&self) -> Option<i64>;

    /// Brings what [`offset_for`](Self::offset_for) with [`OffsetSpec::MaxTimestamp`] needs
    /// into memory, as [`prepare_offset_for_timestamp`](Self::prepare_offset_for_timestamp)
    /// does for a time; `None` means no I/O that waits is needed.
    fn prepare_max_timestamp(&self) -> Option<BoxFuture<'_, Result<(), StorageError>>> {
        let ts = self.max_timestamp()?;
        self.prepare_offset_for_timestamp(ts)
    }

    /// One past the last durable offset: the highest offset readers can reach.
    fn high_watermark(&self) -> i64;

    /// Bytes stored.
    fn size_bytes(&self) -> u64;

    /// Whether the partition refuses appends for good until the broker restarts (a local log
    /// after a failed fdatasync); its durable data stays readable.
    fn failed(&self) -> bool {
        false
    }

    /// Deletes what is past the partition's retention (time, then bytes), in whole stored units
    /// (segments, objects), and advances the log start. Returns how many units it deleted.
    fn apply_retention(&self) -> Result<usize, StorageError>;

    /// Deletes the partition's data; waiters on unsynced appends get an error.
    fn delete(&self) -> Result<(), StorageError>;

    /// Moves the log start up to `before` (Kafka's DeleteRecords): records below it are no
    /// longer served, and the stored units wholly below it are freed (now or by the backend's
    /// cleaner). Resolves with the log start after the call (the "low watermark") once the
    /// move is durable: a crash after that never brings the records back. `before` at or
    /// below the log start changes nothing; past the high watermark (or negative) is
    /// [`StorageError::OffsetOutOfRange`].
    fn delete_records(&self, before: i64) -> BoxFuture<'_, Result<i64, StorageError>>;

    /// Brings what a [`read`](Self::read) at `offset` would need into memory or onto local
    /// disk, when the backend keeps it elsewhere (an object store). `None` means a read now
    /// needs no I/O that waits: the local log always, an object store on a cache hit. Readers
    /// await the future *outside* any pass that must not yield, then read. A read whose bytes
    /// were evicted in between returns what it has (possibly nothing below the high
    /// watermark); the reader's loop prepares again. An error is the load's (the read would
    /// fail with it).
    fn prepare_read(
        &self,
        _offset: i64,
        _max_bytes: usize,
    ) -> Option<BoxFuture<'_, Result<(), StorageError>>> {
        None
    }

    /// Brings what [`offset_for_timestamp`](Self::offset_for_timestamp) at `timestamp_ms`
    /// needs into memory, as [`prepare_read`](Self::prepare_read) does for a read: `None`
    /// means the lookup needs no I/O that waits. Without it, a backend that keeps its data
    /// elsewhere may answer the first offset of the stored unit that holds the time.
    fn prepare_offset_for_timestamp(
        &self,
        _timestamp_ms: i64,
    ) -> Option<BoxFuture<'_, Result<(), StorageError>>> {
        None
    }

    /// The idempotent batches producer state needs (the last few per producer), when the
    /// backend keeps them apart from the data; `None` means replay the data (the local log).
    fn producer_history(&self) -> Option<Vec<ProducerBatch>> {
        None
    }

    /// Whether the backend itself checks idempotent producers' sequences and answers a
    /// duplicate with its original offsets (cluster mode: the shared metadata store does, since
    /// a producer may write through any broker). Then the broker appends idempotent batches
    /// without its own per-partition check, and [`Appended::durable`] carries the verdict: the
    /// offsets (a duplicate's original ones) or [`StorageError::Refused`].
    fn checks_producers(&self) -> bool {
        false
    }

    /// Takes a changed topic config (retention, segment sizes) for its next appends and
    /// retention passes.
    fn set_config(&self, _config: sluice_log::LogConfig) -> Result<(), StorageError> {
        Ok(())
    }

    /// The local log itself, for what only it has (configs, close, its producer snapshot);
    /// `None` for any other backend.
    fn as_local(&self) -> Option<&PartitionLog> {
        None
    }

    /// The offset `spec` names (with its timestamp, -1 where none applies); `None` where
    /// there is none.
    fn offset_for(&self, spec: OffsetSpec) -> Result<Option<(i64, i64)>, StorageError> {
        match spec {
            OffsetSpec::Latest => Ok(Some((self.high_watermark(), -1))),
            OffsetSpec::Earliest => Ok(Some((self.log_start_offset(), -1))),
            OffsetSpec::Timestamp(ms) => self.offset_for_timestamp(ms),
            // The first record holding the highest timestamp.
            OffsetSpec::MaxTimestamp => match self.max_timestamp() {
                Some(ts) => self.offset_for_timestamp(ts),
                None => Ok(None),
            },
            // Nothing is tiered away from the partition: no offset.
            OffsetSpec::LatestTiered => Ok(None),
        }
    }
}

/// Which offset a lookup wants (a ListOffsets timestamp, decoded at the handler edge).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OffsetSpec {
    /// The high watermark (wire -1).
    Latest,
    /// The log start (wire -2, and -4 "earliest local": everything is local).
    Earliest,
    /// The last tiered offset (wire -5).
    LatestTiered,
    /// The first record with the highest timestamp (wire -3, KIP-734).
    MaxTimestamp,
    /// The first record at or after this time, in ms since 1970 (wire: any value ≥ 0).
    Timestamp(i64),
}

/// Offsets assigned by an append whose data is written but not yet durable.
#[derive(Debug, Clone)]
pub struct Appended {
    /// Offset of the first record appended.
    pub base_offset: i64,
    /// Offset of the last record appended.
    pub last_offset: i64,
    pending: Pending,
}

/// One idempotent batch as producer state remembers it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ProducerBatch {
    pub producer_id: i64,
    pub epoch: i16,
    pub first_seq: i32,
    pub last_seq: i32,
    pub base_offset: i64,
    pub last_offset: i64,
}

/// The durability of an append in a backend other than the local log: resolves once; every
/// clone sees the same outcome. The error is shared because many appends wait on one PUT.
pub type DurableFuture = Shared<BoxFuture<'static, Result<Durable, std::sync::Arc<StorageError>>>>;

/// What an [`Appended`] waits on, per backend.
#[derive(Debug, Clone)]
enum Pending {
    Local(sluice_log::Appended),
    Later(DurableLater),
}

/// [`DurableFuture`] with a `Debug` the derive can use.
#[derive(Clone)]
struct DurableLater(DurableFuture);

impl std::fmt::Debug for DurableLater {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("DurableLater")
    }
}

impl Appended {
    /// An append whose durability `durable` reports (another backend's).
    pub fn later(base_offset: i64, last_offset: i64, durable: DurableFuture) -> Appended {
        Appended {
            base_offset,
            last_offset,
            pending: Pending::Later(DurableLater(durable)),
        }
    }

    /// Resolves once every offset of this append is durable (locally: an fdatasync covered
    /// it, shared with every append queued before that sync).
    pub async fn durable(&self) -> Result<Durable, StorageError> {
        match &self.pending {
            Pending::Local(appended) => appended.durable().await,
            Pending::Later(later) => later.0.clone().await.map_err(|e| shared_error(&e)),
        }
    }
}

/// A copy of a shared storage error for one waiter: the same variant where it carries no
/// source that cannot be cloned, else an I/O error with the same message.
pub fn shared_error(e: &StorageError) -> StorageError {
    match e {
        StorageError::OffsetOutOfRange {
            requested,
            log_start,
            high_watermark,
        } => StorageError::OffsetOutOfRange {
            requested: *requested,
            log_start: *log_start,
            high_watermark: *high_watermark,
        },
        StorageError::Closed { path } => StorageError::Closed { path: path.clone() },
        StorageError::Config(c) => StorageError::Config(c.clone()),
        StorageError::Refused(r) => StorageError::Refused(r.clone()),
        StorageError::Io { op, path, source } => StorageError::Io {
            op,
            path: path.clone(),
            source: std::io::Error::new(source.kind(), source.to_string()),
        },
        other => StorageError::Io {
            op: "store",
            path: std::path::PathBuf::new(),
            source: std::io::Error::other(other.to_string()),
        },
    }
}

/// How long a reader waits for stored data to load, whatever its own deadline (as Kafka reads
/// its disk: a fetch with a `max_wait_ms` of 0 still gets data that exists).
pub const LOAD_WAIT_MAX: std::time::Duration = std::time::Duration::from_secs(10);

/// Awaits every partition's [`PartitionStorage::prepare_read`] at `(offset, max_bytes)`,
/// concurrently, until `deadline` or [`LOAD_WAIT_MAX`] from now, whichever is later. True if
/// one failed or did not finish (logged): the reader then answers with what it has.
pub async fn prepare_reads(
    reads: impl IntoIterator<Item = (&dyn PartitionStorage, i64, usize)>,
    deadline: Instant,
) -> bool {
    let loads: Vec<_> = reads
        .into_iter()
        .filter_map(|(p, offset, max_bytes)| p.prepare_read(offset, max_bytes))
        .collect();
    if loads.is_empty() {
        return false;
    }
    let until = deadline.max(Instant::now() + LOAD_WAIT_MAX);
    let Ok(results) = tokio::time::timeout_at(until, futures::future::join_all(loads)).await else {
        tracing::warn!("stored data did not load within {LOAD_WAIT_MAX:?}");
        return true;
    };
    results.iter().any(|r| {
        r.as_ref()
            .inspect_err(|e| tracing::warn!(error = %e, "could not load stored data"))
            .is_err()
    })
}

/// Waits until one of `partitions` has a high watermark above the offset given with it (or
/// changes: see [`PartitionStorage::wait_past`]), or until `deadline`. Returns at once when
/// one already has, so a reader passes the high watermark its read saw and misses nothing.
pub async fn wait_for_data<'a>(
    partitions: impl IntoIterator<Item = (&'a dyn PartitionStorage, i64)>,
    deadline: Instant,
) {
    let waits: Vec<_> = partitions
        .into_iter()
        .map(|(p, o)| p.wait_past(o))
        .collect();
    if waits.is_empty() {
        return;
    }
    let _ = tokio::time::timeout_at(deadline, select_all(waits)).await;
}

/// The local segmented log: each call is the log's own (see `sluice_log::PartitionLog`).
impl PartitionStorage for PartitionLog {
    fn append(&self, batches: &[u8]) -> Result<Appended, StorageError> {
        let appended = PartitionLog::append(self, batches)?;
        Ok(Appended {
            base_offset: appended.base_offset,
            last_offset: appended.last_offset,
            pending: Pending::Local(appended),
        })
    }

    fn read(&self, offset: i64, max_bytes: usize) -> Result<ReadResult, StorageError> {
        PartitionLog::read(self, offset, max_bytes)
    }

    fn wait_past(&self, offset: i64) -> BoxFuture<'_, ()> {
        async move {
            let changed = self.high_watermark_changed();
            tokio::pin!(changed);
            changed.as_mut().enable();
            if PartitionLog::high_watermark(self) <= offset {
                changed.await;
            }
        }
        .boxed()
    }

    fn offset_for_timestamp(&self, ms: i64) -> Result<Option<(i64, i64)>, StorageError> {
        PartitionLog::offset_for_timestamp(self, ms)
    }

    fn log_start_offset(&self) -> i64 {
        PartitionLog::log_start_offset(self)
    }

    fn max_timestamp(&self) -> Option<i64> {
        PartitionLog::max_timestamp(self)
    }

    fn failed(&self) -> bool {
        PartitionLog::is_failed(self)
    }

    fn high_watermark(&self) -> i64 {
        PartitionLog::high_watermark(self)
    }

    fn size_bytes(&self) -> u64 {
        PartitionLog::size_bytes(self)
    }

    fn apply_retention(&self) -> Result<usize, StorageError> {
        Ok(PartitionLog::apply_retention(self)?.deleted_segments)
    }

    fn delete(&self) -> Result<(), StorageError> {
        PartitionLog::delete(self)
    }

    fn delete_records(&self, before: i64) -> BoxFuture<'_, Result<i64, StorageError>> {
        // The checkpoint's fdatasync and the unlinks block: off the async threads.
        let log = self.clone();
        async move {
            tokio::task::spawn_blocking(move || log.delete_records(before))
                .await
                .map_err(|e| StorageError::Io {
                    op: "delete records",
                    path: std::path::PathBuf::new(),
                    source: std::io::Error::other(e.to_string()),
                })?
        }
        .boxed()
    }

    fn set_config(&self, config: sluice_log::LogConfig) -> Result<(), StorageError> {
        PartitionLog::set_config(self, config)
    }

    fn as_local(&self) -> Option<&PartitionLog> {
        Some(self)
    }
}

/// A change to one of the broker's small metadata files (topic definitions, the group store,
/// the producer-id reservation), by path relative to the data directory, `/`-separated.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FileChange {
    /// The file's whole new contents.
    Write { path: String, contents: Vec<u8> },
    /// Bytes appended to the file.
    Append { path: String, bytes: Vec<u8> },
    /// The file, or the directory and everything under it, is gone.
    Remove { path: String },
}

/// Where the metadata files' changes are made durable besides the local disk: the object
/// store's bucket, so that a broker whose data directory is lost gets them back. The local
/// backend has none (its files are fsynced where they are).
///
/// Callers change the local file first, then [`record`](MetaJournal::record) the change, then
/// await [`durable`](MetaJournal::durable) before they answer the client.
pub trait MetaJournal: Send + Sync + std::fmt::Debug {
    /// Queues `change`; it becomes durable with the next flush.
    fn record(&self, change: FileChange) -> Result<(), StorageError>;
    /// Resolves once every change recorded before this call is durable (or failed to be).
    fn durable(&self) -> BoxFuture<'static, Result<(), StorageError>>;
}

/// A journal shared by the parts of one broker; `None` in local mode.
pub type Journal = Option<std::sync::Arc<dyn MetaJournal>>;

/// The path of `path` under `data_dir`, as a [`FileChange`] names it (`None` outside it or not
/// UTF-8).
pub fn relative_path(data_dir: &std::path::Path, path: &std::path::Path) -> Option<String> {
    let rel = path.strip_prefix(data_dir).ok()?;
    let parts: Option<Vec<&str>> = rel.components().map(|c| c.as_os_str().to_str()).collect();
    let parts = parts?;
    (!parts.is_empty()).then(|| parts.join("/"))
}

/// Opens partitions in a backend other than the local log, and carries that backend's
/// [`MetaJournal`]. The broker opens local logs itself when it has none.
pub trait PartitionOpener: Send + Sync + std::fmt::Debug {
    /// Opens partition `partition` of the topic whose id is `topic_id`, creating it empty if
    /// the backend holds nothing of it. `config` carries its retention.
    fn open_partition(
        &self,
        topic_id: [u8; 16],
        partition: i32,
        config: sluice_log::LogConfig,
    ) -> Result<std::sync::Arc<dyn PartitionStorage>, StorageError>;

    /// Where metadata file changes are made durable.
    fn journal(&self) -> std::sync::Arc<dyn MetaJournal>;

    /// Where the partitions are kept, for people: the bucket's URL (DescribeLogDirs reports
    /// it as the log directory).
    fn label(&self) -> String;
}
