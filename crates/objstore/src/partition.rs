//! One partition in object-storage mode: [`ObjectPartition`], the object store's
//! implementation of `sluice_storage::PartitionStorage`.
//!
//! - **Append** checks the batches as the local log does, gives them the partition's next
//!   offsets (patched into a copy; the CRC does not cover them) and hands them to the
//!   [`Flusher`](crate::flush::Flusher) under the partition's lock, so a partition's batches
//!   enter objects in offset order. The returned `Appended` resolves when the object holding
//!   them is committed (its PUT succeeded), or fails when the flusher gave it up.
//! - **Commit** ([`ObjectPartition::committed`], called by the backend in object order):
//!   the run joins the partition's runs and the high watermark moves past it. Readers only
//!   ever see committed data. A given-up object leaves its offsets as a gap: the high
//!   watermark passes them only with the next committed run, and a read in the gap returns
//!   the batches after it (as Kafka's compacted topics do).
//! - **Read** finds the runs from `offset` on and takes their bytes from the read cache
//!   (recent objects in memory, ranges on local disk); it never waits. What the cache lacks,
//!   [`prepare_read`](sluice_storage::PartitionStorage::prepare_read) loads first (ranged
//!   GETs). Every run read is checked against its CRC before a byte of it is served.

use std::collections::BTreeMap;
use std::ops::Range;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, MutexGuard};

use bytes::Bytes;
use futures_util::FutureExt;
use futures_util::future::BoxFuture;
use sluice_log::batch::BatchView;
use sluice_log::{Durable, LogConfig, LogError, ReadResult};
use sluice_storage::{
    Appended, DurableFuture, PartitionStorage, ProducerBatch as HistoryBatch, StorageError,
};
use tokio::sync::Notify;

use crate::backend::Core;
use crate::format::{RunEntry, TopicId};
use crate::index::RunLocation;
use crate::meta::{MetaChange, ProducerBatch};
use crate::reader::{batches_from, join_parts, verify_run};

/// One partition of a topic kept in the bucket.
pub struct ObjectPartition {
    topic_id: TopicId,
    partition: i32,
    /// Names the partition in errors: `s3://BUCKET/PREFIX topic <id> partition <n>`.
    label: PathBuf,
    core: Arc<Core>,
    state: Mutex<State>,
    /// Woken when the high watermark moves or the partition is deleted.
    changed: Notify,
    config: Mutex<LogConfig>,
    /// The ranges the last `prepare_read` loaded, kept until the next one: the read that
    /// follows finds them even when the caches could not keep them (a range larger than the
    /// cache, or caches turned off). Bounded by what one read asks for.
    loaded: Mutex<Vec<(u64, Range<u64>, Bytes)>>,
}

impl std::fmt::Debug for ObjectPartition {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ObjectPartition")
            .field("label", &self.label)
            .finish_non_exhaustive()
    }
}

#[derive(Debug)]
struct State {
    /// The offset the next append gets.
    next_offset: i64,
    /// One past the last committed offset.
    high_watermark: i64,
    log_start: i64,
    /// Committed runs by their last offset (a read at `o` wants the first with last ≥ `o`).
    runs: BTreeMap<i64, RunLocation>,
    size_bytes: u64,
    closed: bool,
}

impl ObjectPartition {
    /// The partition as the index holds it (empty if it holds nothing).
    pub(crate) fn open(
        core: Arc<Core>,
        topic_id: TopicId,
        partition: i32,
        config: LogConfig,
    ) -> Result<ObjectPartition, StorageError> {
        let label = PathBuf::from(format!(
            "{} topic {topic_id} partition {partition}",
            core.url_label()
        ));
        let index_error = |e: crate::index::IndexError| LogError::Io {
            op: "read the index for",
            path: label.clone(),
            source: std::io::Error::other(e.to_string()),
        };
        let log_start = core
            .index()
            .log_start(topic_id, partition)
            .map_err(index_error)?;
        let mut runs = BTreeMap::new();
        let mut size_bytes = 0;
        for run in core
            .index()
            .runs(topic_id, partition)
            .map_err(index_error)?
        {
            if run.last_offset >= log_start {
                size_bytes += run.data_len;
                runs.insert(run.last_offset, run);
            }
        }
        let end = runs
            .values()
            .next_back()
            .map_or(log_start, |r| r.last_offset + 1)
            .max(log_start);
        Ok(ObjectPartition {
            topic_id,
            partition,
            label,
            core,
            state: Mutex::new(State {
                next_offset: end,
                high_watermark: end,
                log_start,
                runs,
                size_bytes,
                closed: false,
            }),
            changed: Notify::new(),
            config: Mutex::new(config),
            loaded: Mutex::new(Vec::new()),
        })
    }

    pub fn topic_id(&self) -> TopicId {
        self.topic_id
    }

    pub fn partition(&self) -> i32 {
        self.partition
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().expect("object partition lock")
    }

    /// The state, or `Closed` once the partition is deleted.
    fn lock_open(&self) -> Result<MutexGuard<'_, State>, StorageError> {
        let st = self.lock();
        if st.closed {
            return Err(LogError::Closed {
                path: self.label.clone(),
            });
        }
        Ok(st)
    }

    /// A committed object holds `run` of this partition: readers may see it now.
    pub(crate) fn committed(&self, object_seq: u64, run: &RunEntry) {
        let mut st = self.lock();
        if st.closed || run.last_offset < st.log_start {
            return;
        }
        st.size_bytes += run.data_len;
        st.runs
            .insert(run.last_offset, RunLocation::of(object_seq, run));
        st.high_watermark = st.high_watermark.max(run.last_offset + 1);
        drop(st);
        self.changed.notify_waiters();
    }

    /// A compaction moved the runs inside `merged`'s offset range into `merged` (the move is
    /// durable and in the index): readers switch to it. True if the runs found there add up
    /// to `merged` exactly (bytes, records, batches) and were replaced; false if they changed
    /// meanwhile (retention, deletion) and nothing moved.
    pub(crate) fn replace_runs(&self, merged: &RunLocation) -> bool {
        let mut st = self.lock();
        if st.closed {
            return false;
        }
        let inside: Vec<RunLocation> = st
            .runs
            .range(merged.base_offset..=merged.last_offset)
            .map(|(_, r)| *r)
            .filter(|r| r.base_offset >= merged.base_offset)
            .collect();
        let (bytes, records, batches) = inside.iter().fold((0, 0, 0), |(b, r, n), run| {
            (b + run.data_len, r + run.record_count, n + run.batch_count)
        });
        if inside.is_empty()
            || bytes != merged.data_len
            || records != merged.record_count
            || batches != merged.batch_count
        {
            return false;
        }
        for run in &inside {
            st.runs.remove(&run.last_offset);
        }
        st.runs.insert(merged.last_offset, *merged);
        true
    }

    /// An object holding `run` was given up: its offsets stay a gap.
    pub(crate) fn abandoned(&self, object_seq: u64, run: &RunEntry) {
        tracing::warn!(
            partition = %self.label.display(),
            object = object_seq,
            base_offset = run.base_offset,
            last_offset = run.last_offset,
            "a flush object was given up: its offsets are a gap, its producers got an error"
        );
    }

    fn store_error(&self, op: &'static str, e: impl std::fmt::Display) -> StorageError {
        LogError::Io {
            op,
            path: self.label.clone(),
            source: std::io::Error::other(e.to_string()),
        }
    }

    /// The committed runs a read from `offset` of up to `max_bytes` needs, in order.
    fn runs_for(st: &State, offset: i64, max_bytes: usize) -> Vec<RunLocation> {
        let mut out = Vec::new();
        let mut bytes = 0u64;
        for run in st.runs.range(offset..).map(|(_, r)| *r) {
            if !out.is_empty() && bytes >= max_bytes as u64 {
                break;
            }
            bytes += run.data_len;
            out.push(run);
        }
        out
    }

    fn entry(&self, run: &RunLocation) -> RunEntry {
        run.entry(self.topic_id, self.partition)
    }

    /// The first run holding a record at or after `timestamp_ms`.
    fn run_with_time(st: &State, timestamp_ms: i64) -> Option<RunLocation> {
        st.runs
            .values()
            .find(|r| r.max_timestamp >= timestamp_ms)
            .copied()
    }

    /// The run's bytes from the cache, CRC-checked; `None` if not cached.
    fn cached_run(&self, run: &RunLocation) -> Result<Option<Bytes>, StorageError> {
        let range = run.range();
        let bytes = self
            .core
            .cache()
            .get(run.object_seq, range.clone())
            .or_else(|| {
                let loaded = self.loaded.lock().expect("loaded lock");
                loaded
                    .iter()
                    .find(|(seq, r, _)| *seq == run.object_seq && *r == range)
                    .map(|(_, _, b)| b.clone())
            });
        let Some(bytes) = bytes else {
            return Ok(None);
        };
        if let Err(e) = verify_run(&bytes, &self.entry(run)) {
            // Never served; dropped from the caches so the next read fetches it again.
            self.core.cache().forget(&[run.object_seq]);
            return Err(LogError::Io {
                op: "verify a cached run of",
                path: self.label.clone(),
                source: std::io::Error::new(std::io::ErrorKind::InvalidData, e.to_string()),
            });
        }
        Ok(Some(bytes))
    }
}

/// The producer-batch records for the idempotent batches in `batches` (offsets assigned).
fn producer_batches(topic_id: TopicId, partition: i32, batches: &[u8]) -> Vec<ProducerBatch> {
    let mut out = Vec::new();
    let mut rest = batches;
    while let Ok(view) = BatchView::parse(rest) {
        if view.producer_id() >= 0 && view.base_sequence() >= 0 {
            let count = view.last_offset_delta();
            out.push(ProducerBatch {
                topic_id,
                partition,
                producer_id: view.producer_id(),
                epoch: view.producer_epoch(),
                first_seq: view.base_sequence(),
                last_seq: view.base_sequence().wrapping_add(count) & i32::MAX,
                base_offset: view.base_offset(),
                last_offset: view.last_offset(),
            });
        }
        rest = &rest[view.len()..];
        if rest.is_empty() {
            break;
        }
    }
    out
}

/// Whole batches from `records` while they fit in `max_bytes` (at least one).
fn trim_to(records: Bytes, max_bytes: usize) -> Bytes {
    let mut end = 0;
    let mut rest = &records[..];
    while let Ok(view) = BatchView::parse(rest) {
        if end > 0 && end + view.len() > max_bytes {
            break;
        }
        end += view.len();
        rest = &rest[view.len()..];
    }
    records.slice(..end)
}

impl PartitionStorage for ObjectPartition {
    fn append(&self, batches: &[u8]) -> Result<Appended, StorageError> {
        sluice_log::validate_batches(batches)?;
        let mut st = self.lock_open()?;
        let base_offset = st.next_offset;
        let mut run = batches.to_vec();
        let next =
            crate::format::patch_base_offsets(&mut run, base_offset).map_err(|e| LogError::Io {
                op: "assign offsets in",
                path: self.label.clone(),
                source: std::io::Error::new(std::io::ErrorKind::InvalidData, e.to_string()),
            })?;
        let producers = producer_batches(self.topic_id, self.partition, &run);
        let ticket = self
            .core
            .flusher()
            .add_run(self.topic_id, self.partition, &run, &producers)
            .map_err(|e| self.store_error("queue a flush of", e))?;
        st.next_offset = next;
        drop(st);
        let last_offset = next - 1;
        let label = self.label.clone();
        let durable: DurableFuture = async move {
            match ticket.wait().await {
                Ok(_) => Ok(Durable {
                    base_offset,
                    last_offset,
                }),
                Err(e) => Err(Arc::new(LogError::Io {
                    op: "write the flush object for",
                    path: label,
                    source: std::io::Error::other(e.to_string()),
                })),
            }
        }
        .boxed()
        .shared();
        Ok(Appended::later(base_offset, last_offset, durable))
    }

    fn read(&self, offset: i64, max_bytes: usize) -> Result<ReadResult, StorageError> {
        let st = self.lock_open()?;
        let (log_start, high_watermark) = (st.log_start, st.high_watermark);
        if offset < log_start || offset > st.next_offset {
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
        let runs = Self::runs_for(&st, offset, max_bytes);
        drop(st);
        let mut parts: Vec<Bytes> = Vec::with_capacity(runs.len());
        let mut total = 0usize;
        for run in &runs {
            if !parts.is_empty() && total >= max_bytes {
                break;
            }
            let Some(bytes) = self.cached_run(run)? else {
                // Not cached (evicted since prepare_read): serve what came before it; the
                // reader prepares again.
                break;
            };
            let from = batches_from(&bytes, offset.max(run.base_offset)).unwrap_or(&[]);
            let part = trim_to(
                bytes.slice_ref(from),
                max_bytes.saturating_sub(total).max(1),
            );
            // Past the first part, only whole parts that fit.
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
        if st.closed || offset < st.log_start || offset >= st.high_watermark {
            return None;
        }
        let runs = Self::runs_for(&st, offset, max_bytes);
        drop(st);
        let missing: Vec<RunLocation> = runs
            .into_iter()
            .filter(|r| !self.core.cache().contains(r.object_seq, r.range()))
            .collect();
        if missing.is_empty() {
            return None;
        }
        Some(
            async move {
                let loads = missing
                    .iter()
                    .map(|r| self.core.cache().load(r.object_seq, r.range()));
                let mut kept = Vec::with_capacity(missing.len());
                for (run, loaded) in missing
                    .iter()
                    .zip(futures_util::future::join_all(loads).await)
                {
                    let bytes = loaded.map_err(|e| self.store_error("read from the bucket", e))?;
                    kept.push((run.object_seq, run.range(), bytes));
                }
                *self.loaded.lock().expect("loaded lock") = kept;
                Ok(())
            }
            .boxed(),
        )
    }

    fn prepare_offset_for_timestamp(
        &self,
        timestamp_ms: i64,
    ) -> Option<BoxFuture<'_, Result<(), StorageError>>> {
        let run = Self::run_with_time(&self.lock(), timestamp_ms)?;
        if self.core.cache().contains(run.object_seq, run.range()) {
            return None;
        }
        // The run that holds the time comes first from its own base offset.
        self.prepare_read(run.base_offset, 1)
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
        let found = Self::run_with_time(&*self.lock_open()?, timestamp_ms);
        let Some(run) = found else {
            return Ok(None);
        };
        // With the run cached (`prepare_offset_for_timestamp` loads it), the exact record;
        // else (evicted in between) the run's first offset: earlier records of the run come
        // too, never later ones.
        if let Some(bytes) = self.cached_run(&run)? {
            let mut rest = &bytes[..];
            while let Ok(view) = BatchView::parse(rest) {
                if let Some(hit) = view.first_offset_with_timestamp_at_least(timestamp_ms) {
                    return Ok(Some(hit));
                }
                rest = &rest[view.len()..];
            }
        }
        Ok(Some((run.base_offset, run.max_timestamp)))
    }

    fn log_start_offset(&self) -> i64 {
        self.lock().log_start
    }

    fn max_timestamp(&self) -> Option<i64> {
        self.lock().runs.values().map(|r| r.max_timestamp).max()
    }

    fn high_watermark(&self) -> i64 {
        self.lock().high_watermark
    }

    fn size_bytes(&self) -> u64 {
        self.lock().size_bytes
    }

    fn apply_retention(&self) -> Result<usize, StorageError> {
        let config = *self.config.lock().expect("config lock");
        let now = self.core.now_ms();
        let mut st = self.lock_open()?;
        let mut dropped = 0usize;
        while let Some((&last, run)) = st.runs.first_key_value() {
            let too_old = config
                .retention_ms
                .is_some_and(|ms| run.max_timestamp < now.saturating_sub(ms));
            let too_big = config
                .retention_bytes
                .is_some_and(|max| st.size_bytes > max && st.size_bytes - run.data_len >= max);
            if !(too_old || too_big) {
                break;
            }
            st.size_bytes -= run.data_len;
            st.runs.remove(&last);
            st.log_start = st.log_start.max(last + 1);
            dropped += 1;
        }
        if dropped == 0 {
            return Ok(0);
        }
        let start = st.log_start;
        drop(st);
        self.core
            .flusher()
            .add_meta(vec![MetaChange::LogStart {
                topic_id: self.topic_id,
                partition: self.partition,
                offset: start,
            }])
            .map_err(|e| self.store_error("record the retention of", e))?;
        self.changed.notify_waiters();
        Ok(dropped)
    }

    fn delete(&self) -> Result<(), StorageError> {
        let mut st = self.lock();
        if st.closed {
            return Ok(());
        }
        st.closed = true;
        drop(st);
        self.core.forget_partition(self.topic_id, self.partition);
        self.core
            .flusher()
            .add_meta(vec![MetaChange::TopicDeleted {
                topic_id: self.topic_id,
            }])
            .map_err(|e| self.store_error("record the deletion of", e))?;
        self.changed.notify_waiters();
        Ok(())
    }

    fn delete_records(&self, before: i64) -> BoxFuture<'_, Result<i64, StorageError>> {
        // Under the lock, and no await: `None` once the in-memory start moved.
        let moved = || -> Result<Option<i64>, StorageError> {
            let mut st = self.lock_open()?;
            if before < 0 || before > st.high_watermark {
                return Err(LogError::OffsetOutOfRange {
                    requested: before,
                    log_start: st.log_start,
                    high_watermark: st.high_watermark,
                });
            }
            if before <= st.log_start {
                return Ok(Some(st.log_start));
            }
            // Runs wholly below go now; the objects that held them are freed by the bucket's
            // maintenance once no index row refers to them (as after retention).
            while let Some((&last, run)) = st.runs.first_key_value() {
                if last >= before {
                    break;
                }
                st.size_bytes -= run.data_len;
                st.runs.remove(&last);
            }
            st.log_start = before;
            Ok(None)
        };
        let moved = moved();
        async move {
            if let Some(log_start) = moved? {
                return Ok(log_start);
            }
            let ticket = self
                .core
                .flusher()
                .add_meta(vec![MetaChange::LogStart {
                    topic_id: self.topic_id,
                    partition: self.partition,
                    offset: before,
                }])
                .map_err(|e| self.store_error("record the deleted records of", e))?;
            self.changed.notify_waiters();
            ticket
                .wait()
                .await
                .map_err(|e| self.store_error("write the deleted records of", e))?;
            tracing::info!(partition = %self.label.display(), log_start = before, "records deleted: the log start moved");
            Ok(self.lock().log_start)
        }
        .boxed()
    }

    fn set_config(&self, config: LogConfig) -> Result<(), StorageError> {
        config.validate()?;
        *self.config.lock().expect("config lock") = config;
        Ok(())
    }

    fn producer_history(&self) -> Option<Vec<HistoryBatch>> {
        let batches = match self
            .core
            .index()
            .producer_batches(self.topic_id, self.partition)
        {
            Ok(b) => b,
            Err(e) => {
                tracing::error!(partition = %self.label.display(), error = %e, "reading producer state from the index");
                Vec::new()
            }
        };
        Some(
            batches
                .into_iter()
                .map(|b| HistoryBatch {
                    producer_id: b.producer_id,
                    epoch: b.epoch,
                    first_seq: b.first_seq,
                    last_seq: b.last_seq,
                    base_offset: b.base_offset,
                    last_offset: b.last_offset,
                })
                .collect(),
        )
    }
}

impl ObjectPartition {
    /// Producer-batch records of committed-but-not-yet-indexed batches are in the index once
    /// their object is applied; this is the only state the partition keeps of producers.
    #[doc(hidden)]
    pub fn next_offset(&self) -> i64 {
        self.lock().next_offset
    }
}
