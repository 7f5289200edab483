//! Partition storage: the one door to a partition's data, for every listener.
//!
//! [`PartitionStorage`] is what the broker asks of a partition's storage; the Kafka handlers
//! (`handlers/produce.rs`, `fetch.rs`, `list_offsets.rs`), the HTTP API and `/metrics` see
//! partitions only through it (`Topic::partition` hands out an `Arc<dyn PartitionStorage>`), so
//! nothing above the broker knows which backend runs. The local segmented log
//! (`sluice_log::PartitionLog`, at the end of this file) is its first implementation; the
//! object-store log is meant to be the second.
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
use futures::future::{BoxFuture, select_all};
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

    /// One past the last durable offset: the highest offset readers can reach.
    fn high_watermark(&self) -> i64;

    /// Bytes stored.
    fn size_bytes(&self) -> u64;

    /// Deletes what is past the partition's retention (time, then bytes), in whole stored units
    /// (segments, objects), and advances the log start. Returns how many units it deleted.
    fn apply_retention(&self) -> Result<usize, StorageError>;

    /// Deletes the partition's data; waiters on unsynced appends get an error.
    fn delete(&self) -> Result<(), StorageError>;

    /// The offset `spec` names (with its timestamp, -1 where none applies); `None` where
    /// there is none.
    fn offset_for(&self, spec: OffsetSpec) -> Result<Option<(i64, i64)>, StorageError> {
        match spec {
            OffsetSpec::Latest => Ok(Some((self.high_watermark(), -1))),
            OffsetSpec::Earliest => Ok(Some((self.log_start_offset(), -1))),
            OffsetSpec::Timestamp(ms) => self.offset_for_timestamp(ms),
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

/// What an [`Appended`] waits on, per backend.
#[derive(Debug, Clone)]
enum Pending {
    Local(sluice_log::Appended),
}

impl Appended {
    /// Resolves once every offset of this append is durable (locally: an fdatasync covered
    /// it, shared with every append queued before that sync).
    pub async fn durable(&self) -> Result<Durable, StorageError> {
        match &self.pending {
            Pending::Local(appended) => appended.durable().await,
        }
    }
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
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::time::Duration;

    use sluice_log::batch::BatchView;
    use sluice_log::batch::build::{Record, batch};

    use super::*;
    use crate::{Broker, BrokerConfig};

    /// A broker in `dir` with one single-partition topic, and that partition.
    fn partition(dir: &std::path::Path) -> (Arc<Broker>, Arc<dyn PartitionStorage>) {
        let broker = Arc::new(Broker::open(BrokerConfig::new(dir)).unwrap());
        let topic = broker.create_topic("t", 1, Default::default()).unwrap();
        (broker, topic.partition(0).unwrap())
    }

    fn one_batch(value: &[u8]) -> Vec<u8> {
        let record = Record {
            timestamp_delta: 0,
            key: None,
            value: Some(value),
        };
        batch(1_700_000_000_000, &[record])
    }

    /// The last offset of every batch in `records`.
    fn last_offsets(records: &[u8]) -> Vec<i64> {
        let mut rest = records;
        let mut out = Vec::new();
        while !rest.is_empty() {
            let view = BatchView::parse(rest).unwrap();
            out.push(view.last_offset());
            rest = &rest[view.len()..];
        }
        out
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn reads_whole_durable_batches_and_stop_at_the_high_watermark() {
        let dir = tempfile::tempdir().unwrap();
        let (_broker, p) = partition(dir.path());
        for v in [&b"a"[..], b"b", b"c"] {
            let d = p.append(&one_batch(v)).unwrap().durable().await.unwrap();
            assert_eq!(d.base_offset, d.last_offset);
        }
        assert_eq!(p.high_watermark(), 3);
        let all = p.read(0, 1 << 20).unwrap();
        assert_eq!(last_offsets(&all.records), vec![0, 1, 2]);
        // At least one whole batch, even over max_bytes.
        assert_eq!(last_offsets(&p.read(1, 1).unwrap().records), vec![1]);
        // Appended but not (yet) durable is never read, however the race with the sync goes.
        for _ in 0..20 {
            let appended = p.append(&one_batch(b"more")).unwrap();
            let read = p.read(0, 1 << 20).unwrap();
            assert!(read.high_watermark <= appended.last_offset + 1);
            let lasts = last_offsets(&read.records);
            assert!(lasts.iter().all(|&o| o < read.high_watermark), "{lasts:?}");
            appended.durable().await.unwrap();
        }
        assert!(matches!(
            p.read(1_000, 1),
            Err(StorageError::OffsetOutOfRange { .. })
        ));
        assert_eq!(p.offset_for(OffsetSpec::Latest).unwrap(), Some((23, -1)));
        assert_eq!(p.offset_for(OffsetSpec::Earliest).unwrap(), Some((0, -1)));
        let at = p
            .offset_for(OffsetSpec::Timestamp(1_700_000_000_000))
            .unwrap();
        assert_eq!(at.map(|(offset, _)| offset), Some(0));
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_wait_wakes_on_an_append_and_ends_at_its_deadline() {
        let dir = tempfile::tempdir().unwrap();
        let (_broker, p) = partition(dir.path());
        // Nothing arrives: the deadline ends the wait.
        let started = Instant::now();
        wait_for_data([(&*p, 0)], started + Duration::from_millis(100)).await;
        let waited = started.elapsed();
        assert!(waited >= Duration::from_millis(100) && waited < Duration::from_secs(5));

        // A record arrives: the wait ends long before its deadline.
        let writer = Arc::clone(&p);
        let append = tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(50)).await;
            writer.append(&one_batch(b"x")).unwrap().durable().await
        });
        let started = Instant::now();
        wait_for_data([(&*p, 0)], started + Duration::from_secs(30)).await;
        assert!(started.elapsed() < Duration::from_secs(10));
        assert_eq!(p.high_watermark(), 1);
        append.await.unwrap().unwrap();
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_change_between_the_read_and_the_wait_is_not_missed() {
        let dir = tempfile::tempdir().unwrap();
        let (broker, p) = partition(dir.path());
        let seen = p.read(0, 1 << 20).unwrap().high_watermark;
        // The high watermark moves after the read, before the wait starts.
        p.append(&one_batch(b"x")).unwrap().durable().await.unwrap();
        let started = Instant::now();
        wait_for_data([(&*p, seen)], started + Duration::from_secs(30)).await;
        assert!(
            started.elapsed() < Duration::from_secs(5),
            "the wait missed it"
        );

        // The broker's read waits at the high watermark, and returns what arrives.
        let writer = Arc::clone(&p);
        let append = tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(50)).await;
            writer.append(&one_batch(b"y")).unwrap().durable().await
        });
        let deadline = Instant::now() + Duration::from_secs(30);
        let read = broker.read(&*p, 1, 1 << 20, Some(deadline)).await.unwrap();
        assert_eq!(last_offsets(&read.records), vec![1]);
        append.await.unwrap().unwrap();

        // Nothing more arrives: an empty read at the deadline.
        let started = Instant::now();
        let deadline = started + Duration::from_millis(100);
        let read = broker.read(&*p, 2, 1 << 20, Some(deadline)).await.unwrap();
        assert!(read.records.is_empty() && started.elapsed() >= Duration::from_millis(100));
        assert_eq!(read.high_watermark, 2);
        // Without a deadline it does not wait.
        assert!(
            broker
                .read(&*p, 2, 1, None)
                .await
                .unwrap()
                .records
                .is_empty()
        );
    }
}
