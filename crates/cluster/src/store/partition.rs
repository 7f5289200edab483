//! One partition in cluster mode: [`ClusterPartition`], the third implementation of
//! `sluice_storage::PartitionStorage` (see the module above for the write and read paths).

use std::collections::BTreeMap;
use std::ops::Range;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, MutexGuard};

use bytes::{Bytes, BytesMut};
use futures_util::FutureExt;
use futures_util::future::BoxFuture;
use sluice_log::batch::BatchView;
use sluice_log::{Durable, LogConfig, LogError, ReadResult, Refusal};
use sluice_objstore::format::{TopicId, patch_base_offsets};
use sluice_objstore::reader::{batches_from, join_parts};
use sluice_storage::{Appended, DurableFuture, PartitionStorage, StorageError};
use tokio::sync::Notify;
use uuid::Uuid;

use super::Core;
use super::commit_step::CommitReceipt;
use crate::commit::BatchOutcome;
use crate::index::BatchRow;

/// Index rows one load reads from PostgreSQL: enough for a fetch of several MiB of small
/// batches in one round trip.
pub const ROWS_PER_LOAD: usize = 256;

/// Index rows a partition keeps in memory at most; the lowest offsets go first (readers are
/// mostly at the tail). About 100 bytes each.
pub const ROWS_KEPT_MAX: usize = 8192;

/// An index row, with its object named by the read cache's id.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Row {
    pub(crate) base_offset: i64,
    pub(crate) last_offset: i64,
    pub(crate) object: u64,
    pub(crate) start: u64,
    pub(crate) len: u32,
    pub(crate) max_timestamp: i64,
}

impl Row {
    fn range(&self) -> Range<u64> {
        self.start..self.start + u64::from(self.len)
    }
}

#[derive(Debug, Default)]
struct State {
    /// The provisional offset the next append gets (this broker's own numbering).
    provisional_next: i64,
    high_watermark: i64,
    log_start: i64,
    /// Whether the bounds above came from PostgreSQL (until then a read past them waits
    /// instead of answering out of range).
    confirmed: bool,
    /// Index rows read so far, by last offset.
    rows: BTreeMap<i64, Row>,
    closed: bool,
}

/// One partition of a topic, kept in the bucket and indexed in PostgreSQL.
pub struct ClusterPartition {
    core: Arc<Core>,
    topic_id: TopicId,
    uuid: Uuid,
    partition: i32,
    label: PathBuf,
    state: Mutex<State>,
    changed: Notify,
    config: Mutex<LogConfig>,
    /// The ranges the last prepare loaded, kept until the next one (as the object partition
    /// does: the read after finds them even when the caches could not keep them).
    loaded: Mutex<Vec<(u64, Range<u64>, Bytes)>>,
    /// The last lookup by time: (timestamp, the first row whose max timestamp reaches it).
    by_time: Mutex<Option<(i64, Option<Row>)>>,
    /// The partition's highest timestamp as the last max-timestamp lookup found it in the
    /// index (the known rows may be a part of the partition).
    max_time: Mutex<Option<i64>>,
}

impl std::fmt::Debug for ClusterPartition {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ClusterPartition")
            .field("label", &self.label)
            .finish_non_exhaustive()
    }
}

impl ClusterPartition {
    pub(crate) fn new(
        core: Arc<Core>,
        topic_id: TopicId,
        partition: i32,
        config: LogConfig,
        bounds: Option<(i64, i64)>,
    ) -> ClusterPartition {
        let uuid = Uuid::from_bytes(topic_id.0);
        let label = PathBuf::from(format!(
            "{} topic {uuid} partition {partition}",
            core.url_label
        ));
        let (log_start, high_watermark) = bounds.unwrap_or((0, 0));
        ClusterPartition {
            core,
            topic_id,
            uuid,
            partition,
            label,
            state: Mutex::new(State {
                log_start,
                high_watermark,
                confirmed: bounds.is_some(),
                ..State::default()
            }),
            changed: Notify::new(),
            config: Mutex::new(config),
            loaded: Mutex::new(Vec::new()),
            by_time: Mutex::new(None),
            max_time: Mutex::new(None),
        }
    }

    pub fn topic_id(&self) -> TopicId {
        self.topic_id
    }

    pub fn partition(&self) -> i32 {
        self.partition
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn lock_open(&self) -> Result<MutexGuard<'_, State>, StorageError> {
        let st = self.lock();
        if st.closed {
            return Err(LogError::Closed {
                path: self.label.clone(),
            });
        }
        Ok(st)
    }

    /// The high watermark is at least `next_offset` (a commit through any broker), and the
    /// log start at least `log_start` when known. Wakes waiters when either moved.
    pub(crate) fn advance(&self, next_offset: i64, log_start: Option<i64>) {
        let mut st = self.lock();
        let mut moved = !st.confirmed;
        st.confirmed = true;
        if next_offset > st.high_watermark {
            st.high_watermark = next_offset;
            moved = true;
        }
        if let Some(ls) = log_start
            && ls > st.log_start
        {
            st.log_start = ls;
            let keep = st.rows.split_off(&ls);
            st.rows = keep;
            moved = true;
        }
        drop(st);
        if moved {
            self.changed.notify_waiters();
        }
    }

    /// Remembers an index row this broker's own commit added (one batch's).
    pub(crate) fn add_row(&self, row: Row) {
        let mut st = self.lock();
        if row.last_offset >= st.log_start {
            st.rows.insert(row.last_offset, row);
            while st.rows.len() > ROWS_KEPT_MAX {
                st.rows.pop_first();
            }
        }
    }

    /// This partition's retention as configured (`None` once it is closed).
    pub(crate) fn retention(&self) -> Option<crate::retention::PartitionRetention> {
        if self.lock().closed {
            return None;
        }
        let config = self.config.lock().unwrap_or_else(|p| p.into_inner());
        Some(crate::retention::PartitionRetention {
            topic_id: self.uuid,
            partition: self.partition,
            retention_ms: config.retention_ms,
            retention_bytes: config.retention_bytes,
        })
    }

    fn store_error(&self, op: &'static str, e: impl std::fmt::Display) -> StorageError {
        LogError::Io {
            op,
            path: self.label.clone(),
            source: std::io::Error::other(e.to_string()),
        }
    }

    /// The known rows from the one holding `offset`, consecutive, up to about `max_bytes`
    /// (at least one). Empty when the row holding `offset` is not known.
    fn rows_for(st: &State, offset: i64, max_bytes: usize) -> Vec<Row> {
        let mut out = Vec::new();
        let mut total = 0usize;
        let mut expect = None;
        for row in st.rows.range(offset..).map(|(_, r)| *r) {
            if row.base_offset >= st.high_watermark {
                break;
            }
            match expect {
                None if row.base_offset > offset => break,
                Some(next) if row.base_offset != next => break,
                _ => {}
            }
            if !out.is_empty() && total >= max_bytes {
                break;
            }
            total += row.len as usize;
            expect = Some(row.last_offset + 1);
            out.push(row);
        }
        out
    }

    /// The bytes of `row` from what the last prepare loaded or the caches, with its batches'
    /// base offsets rewritten to the committed ones and every CRC checked; `None` if neither
    /// holds them.
    fn row_bytes(&self, row: &Row) -> Result<Option<Bytes>, StorageError> {
        let range = row.range();
        let found = self
            .loaded
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .iter()
            .find(|(o, r, _)| *o == row.object && *r == range)
            .map(|(_, _, b)| b.clone())
            .or_else(|| self.core.cache.get(row.object, range.clone()));
        let Some(stored) = found else {
            return Ok(None);
        };
        let mut patched = BytesMut::from(&stored[..]);
        let next = patch_base_offsets(&mut patched, row.base_offset)
            .map_err(|e| self.store_error("read a batch of", e))?;
        if next != row.last_offset + 1 {
            return Err(self.store_error(
                "read a batch of",
                format!(
                    "the index row says offsets {}..={}, its {} bytes hold {} offsets",
                    row.base_offset,
                    row.last_offset,
                    row.len,
                    next - row.base_offset
                ),
            ));
        }
        sluice_log::validate_batches(&patched).map_err(|e| {
            // Never serve bytes that fail their CRC; drop the cached copy so a retry reads
            // the bucket again.
            self.core.cache.forget(&[row.object]);
            self.store_error("check the CRC of", e)
        })?;
        Ok(Some(patched.freeze()))
    }

    /// Reads the index rows from `offset` (and the bounds) from PostgreSQL into memory.
    async fn load_rows(&self, offset: i64) -> Result<(), StorageError> {
        let bounds = crate::index::partition_bounds(&self.core.db, self.uuid, self.partition)
            .await
            .map_err(|e| self.store_error("read the bounds of", e))?;
        let Some(bounds) = bounds else {
            return Ok(());
        };
        self.advance(bounds.next_offset, Some(bounds.log_start));
        let from = offset.max(bounds.log_start);
        if from >= bounds.next_offset {
            return Ok(());
        }
        let rows = crate::index::read_batches(
            &self.core.db,
            self.uuid,
            self.partition,
            from,
            ROWS_PER_LOAD,
        )
        .await
        .map_err(|e| self.store_error("read the index of", e))?;
        let rows: Vec<Row> = rows.iter().map(|r| self.row(r)).collect();
        let mut st = self.lock();
        for row in rows {
            st.rows.insert(row.last_offset, row);
        }
        while st.rows.len() > ROWS_KEPT_MAX {
            st.rows.pop_first();
        }
        Ok(())
    }

    fn row(&self, r: &BatchRow) -> Row {
        Row {
            base_offset: r.base_offset,
            last_offset: r.last_offset,
            object: self.core.object_id(&r.object_key),
            start: r.byte_start,
            len: r.byte_len,
            max_timestamp: r.max_timestamp,
        }
    }

    /// Loads the bytes of `rows` the caches lack, keeping them for the next read.
    async fn load_bytes(&self, rows: &[Row]) -> Result<(), StorageError> {
        let missing: Vec<Row> = rows
            .iter()
            .filter(|r| !self.core.cache.contains(r.object, r.range()))
            .copied()
            .collect();
        if missing.is_empty() {
            return Ok(());
        }
        let loads = missing
            .iter()
            .map(|r| self.core.cache.load(r.object, r.range()));
        let mut kept = Vec::with_capacity(missing.len());
        for (row, loaded) in missing
            .iter()
            .zip(futures_util::future::join_all(loads).await)
        {
            let bytes = loaded.map_err(|e| self.store_error("read from the bucket", e))?;
            kept.push((row.object, row.range(), bytes));
        }
        *self.loaded.lock().unwrap_or_else(|p| p.into_inner()) = kept;
        Ok(())
    }
}

/// The durable outcome of an append whose batches have provisional offsets
/// `first..=last`, from its object's commit receipt.
fn verdict(
    receipt: &CommitReceipt,
    topic: TopicId,
    partition: i32,
    (first, last): (i64, i64),
    producer_id: i64,
) -> Result<Durable, LogError> {
    let mut range: Option<(i64, i64)> = None;
    for outcome in receipt.outcomes(topic, partition, first, last) {
        let (base, end) = match *outcome {
            BatchOutcome::Appended {
                base_offset,
                last_offset,
                ..
            }
            | BatchOutcome::Duplicate {
                base_offset,
                last_offset,
            } => (base_offset, last_offset),
            BatchOutcome::OutOfOrderSequence {
                expected,
                first_seq,
            } => {
                return Err(LogError::Refused(Refusal::OutOfOrderSequence {
                    producer_id,
                    first_seq,
                    expected,
                }));
            }
            BatchOutcome::UnknownProducer { first_seq } => {
                return Err(LogError::Refused(Refusal::UnknownProducer {
                    producer_id,
                    first_seq,
                }));
            }
            BatchOutcome::InvalidProducerEpoch { epoch, current } => {
                return Err(LogError::Refused(Refusal::ProducerFenced {
                    producer_id,
                    epoch,
                    current,
                }));
            }
            BatchOutcome::NewEpochNotAtZero { epoch, first_seq } => {
                return Err(LogError::Refused(Refusal::NewEpochNotAtZero {
                    producer_id,
                    epoch,
                    first_seq,
                }));
            }
            BatchOutcome::UnknownTopicOrPartition => {
                return Err(LogError::Refused(Refusal::UnknownPartition));
            }
        };
        range = Some(match range {
            None => (base, end),
            Some((b, _)) => (b, end),
        });
    }
    match range {
        Some((base_offset, last_offset)) => Ok(Durable {
            base_offset,
            last_offset,
        }),
        None => Err(LogError::Io {
            op: "commit",
            path: PathBuf::new(),
            source: std::io::Error::other("the commit's answer does not cover the append"),
        }),
    }
}

impl PartitionStorage for ClusterPartition {
    fn append(&self, batches: &[u8]) -> Result<Appended, StorageError> {
        sluice_log::validate_batches(batches)?;
        let producer_id = BatchView::parse(batches).map_or(-1, |v| v.producer_id());
        let mut st = self.lock_open()?;
        let first = st.provisional_next;
        let mut run = batches.to_vec();
        let next = patch_base_offsets(&mut run, first)
            .map_err(|e| self.store_error("number the batches of", e))?;
        let ticket = self
            .core
            .flusher
            .add_run(self.topic_id, self.partition, &run, &[])
            .map_err(|e| self.store_error("queue a flush of", e))?;
        st.provisional_next = next;
        drop(st);
        let last = next - 1;
        let (topic, partition) = (self.topic_id, self.partition);
        let label = self.label.clone();
        let durable: DurableFuture = async move {
            let (_, receipt) = ticket.wait_receipt().await.map_err(|e| {
                Arc::new(LogError::Io {
                    op: "write and commit the flush object for",
                    path: label.clone(),
                    source: std::io::Error::other(e.to_string()),
                })
            })?;
            let receipt = receipt
                .and_then(|r| r.0.downcast::<CommitReceipt>().ok())
                .ok_or_else(|| {
                    Arc::new(LogError::Io {
                        op: "commit",
                        path: label.clone(),
                        source: std::io::Error::other("the commit step gave no receipt"),
                    })
                })?;
            verdict(&receipt, topic, partition, (first, last), producer_id).map_err(Arc::new)
        }
        .boxed()
        .shared();
        Ok(Appended::later(first, last, durable))
    }

    fn read(&self, offset: i64, max_bytes: usize) -> Result<ReadResult, StorageError> {
        let st = self.lock_open()?;
        let (log_start, high_watermark) = (st.log_start, st.high_watermark);
        if offset < log_start || (offset > high_watermark && st.confirmed) {
            return Err(LogError::OffsetOutOfRange {
                requested: offset,
                log_start,
                high_watermark,
            });
        }
        let empty = ReadResult {
            records: Bytes::new(),
            high_watermark,
            log_start_offset: log_start,
        };
        if offset >= high_watermark {
            return Ok(empty);
        }
        let rows = Self::rows_for(&st, offset, max_bytes);
        drop(st);
        let mut parts: Vec<Bytes> = Vec::with_capacity(rows.len());
        let mut total = 0usize;
        for row in &rows {
            if !parts.is_empty() && total >= max_bytes {
                break;
            }
            let Some(bytes) = self.row_bytes(row)? else {
                break;
            };
            let from = batches_from(&bytes, offset.max(row.base_offset)).unwrap_or(&[]);
            let part = bytes.slice_ref(from);
            if !parts.is_empty() && total + part.len() > max_bytes {
                break;
            }
            total += part.len();
            parts.push(part);
        }
        let records = join_parts(parts, total);
        Ok(ReadResult {
            records,
            high_watermark,
            log_start_offset: log_start,
        })
    }

    fn prepare_read(
        &self,
        offset: i64,
        max_bytes: usize,
    ) -> Option<BoxFuture<'_, Result<(), StorageError>>> {
        let st = self.lock();
        if st.closed || offset < st.log_start {
            return None;
        }
        if st.confirmed && offset == st.high_watermark {
            return None;
        }
        if st.confirmed && offset > st.high_watermark {
            // Past what this broker knows: another broker may have committed further (a
            // client that read there through it, before a failover, asks here next), and its
            // notification may not have arrived yet. Read the bounds before the read answers
            // OFFSET_OUT_OF_RANGE, which makes a consumer reset its position.
            drop(st);
            return Some(async move { self.load_rows(offset).await }.boxed());
        }
        let rows = Self::rows_for(&st, offset, max_bytes);
        let covered = !rows.is_empty() && st.confirmed;
        drop(st);
        if covered
            && rows
                .iter()
                .all(|r| self.core.cache.contains(r.object, r.range()))
        {
            return None;
        }
        Some(
            async move {
                if !covered {
                    self.load_rows(offset).await?;
                }
                let rows = Self::rows_for(&self.lock(), offset, max_bytes);
                self.load_bytes(&rows).await
            }
            .boxed(),
        )
    }

    fn prepare_offset_for_timestamp(
        &self,
        timestamp_ms: i64,
    ) -> Option<BoxFuture<'_, Result<(), StorageError>>> {
        Some(
            async move {
                let found = crate::index::offset_for_timestamp(
                    &self.core.db,
                    self.uuid,
                    self.partition,
                    timestamp_ms,
                )
                .await
                .map_err(|e| self.store_error("look up a time in the index of", e))?;
                let row = found.as_ref().map(|r| self.row(r));
                if let Some(row) = &row {
                    self.load_bytes(std::slice::from_ref(row)).await?;
                }
                *self.by_time.lock().unwrap_or_else(|p| p.into_inner()) = Some((timestamp_ms, row));
                Ok(())
            }
            .boxed(),
        )
    }

    fn wait_past(&self, offset: i64) -> BoxFuture<'_, ()> {
        async move {
            let changed = self.changed.notified();
            tokio::pin!(changed);
            changed.as_mut().enable();
            let wait = {
                let st = self.lock();
                !st.closed && st.high_watermark <= offset
            };
            if wait {
                changed.await;
            }
        }
        .boxed()
    }

    fn offset_for_timestamp(&self, timestamp_ms: i64) -> Result<Option<(i64, i64)>, StorageError> {
        drop(self.lock_open()?);
        let hint = *self.by_time.lock().unwrap_or_else(|p| p.into_inner());
        let row = match hint {
            Some((ts, row)) if ts == timestamp_ms => row,
            // No lookup prepared for this time: the first known row that reaches it.
            _ => self
                .lock()
                .rows
                .values()
                .find(|r| r.max_timestamp >= timestamp_ms)
                .copied(),
        };
        let Some(row) = row else {
            return Ok(None);
        };
        if let Some(bytes) = self.row_bytes(&row)? {
            let mut rest = &bytes[..];
            while let Ok(view) = BatchView::parse(rest) {
                if let Some(hit) = view.first_offset_with_timestamp_at_least(timestamp_ms) {
                    return Ok(Some(hit));
                }
                rest = &rest[view.len()..];
            }
        }
        Ok(Some((row.base_offset, row.max_timestamp)))
    }

    fn log_start_offset(&self) -> i64 {
        self.lock().log_start
    }

    fn max_timestamp(&self) -> Option<i64> {
        let known = self.lock().rows.values().map(|r| r.max_timestamp).max();
        let looked_up = *self.max_time.lock().unwrap_or_else(|p| p.into_inner());
        known.max(looked_up)
    }

    fn prepare_max_timestamp(&self) -> Option<BoxFuture<'_, Result<(), StorageError>>> {
        Some(
            async move {
                let ts = crate::index::max_timestamp(&self.core.db, self.uuid, self.partition)
                    .await
                    .map_err(|e| self.store_error("look up the newest time in the index of", e))?;
                *self.max_time.lock().unwrap_or_else(|p| p.into_inner()) = ts;
                match ts.and_then(|ts| self.prepare_offset_for_timestamp(ts)) {
                    Some(load) => load.await,
                    None => Ok(()),
                }
            }
            .boxed(),
        )
    }

    fn high_watermark(&self) -> i64 {
        self.lock().high_watermark
    }

    fn size_bytes(&self) -> u64 {
        self.lock().rows.values().map(|r| u64::from(r.len)).sum()
    }

    fn apply_retention(&self) -> Result<usize, StorageError> {
        // Retention in cluster mode is one cluster-wide task, the cleaner
        // (crate::retention, run by the store of the broker holding its lease), which reads
        // this partition's config; nothing is deleted here.
        Ok(0)
    }

    fn delete(&self) -> Result<(), StorageError> {
        self.lock().closed = true;
        self.changed.notify_waiters();
        Ok(())
    }

    fn delete_records(&self, before: i64) -> BoxFuture<'_, Result<i64, StorageError>> {
        async move {
            drop(self.lock_open()?);
            let outcome =
                crate::retention::delete_records(&self.core.db, self.uuid, self.partition, before)
                    .await
                    .map_err(|e| self.store_error("move the log start of", e))?
                    .ok_or_else(|| LogError::Closed {
                        path: self.label.clone(),
                    })?;
            match outcome {
                crate::retention::DeleteRecords::LogStart(log_start) => {
                    self.advance(0, Some(log_start));
                    tracing::info!(partition = %self.label.display(), log_start, "records deleted: the log start moved");
                    Ok(log_start)
                }
                crate::retention::DeleteRecords::OutOfRange {
                    log_start,
                    next_offset,
                } => {
                    self.advance(next_offset, Some(log_start));
                    Err(LogError::OffsetOutOfRange {
                        requested: before,
                        log_start,
                        high_watermark: next_offset,
                    })
                }
            }
        }
        .boxed()
    }

    fn checks_producers(&self) -> bool {
        true
    }

    fn set_config(&self, config: LogConfig) -> Result<(), StorageError> {
        *self.config.lock().unwrap_or_else(|p| p.into_inner()) = config;
        Ok(())
    }
}
