//! The partition log: an ordered list of segments, the newest of which takes appends.
//!
//! Stages of a write, as types:
//! 1. [`PartitionLog::append`] validates the batches, assigns offsets and writes them into the
//!    page cache, returning [`Appended`]: the offsets are fixed but the data is not yet durable
//!    and no reader can see it.
//! 2. A group-commit round (see `commit.rs`) fdatasyncs the segment; [`Appended::durable`]
//!    resolves to [`Durable`], and the high watermark moves past the range, making it readable.
//! 3. *Acknowledged* is the broker's business: it answers the producer after stage 2.
//!
//! Locking: one mutex per partition guards the segment list and the durable point. Appends write
//! under it (one `pwritev`); fdatasync and the bulk of reads run outside it.
//!
//! ## When the disk fails: a full disk is a state, a failed sync is a failure
//!
//! - **A write that finds no room** (ENOSPC or EDQUOT from writing segment data or an index, or
//!   from creating the files of a new segment at a roll) fails that append alone, with
//!   [`LogError::NoSpace`]. Whatever part of it reached the file is cut off again, and the
//!   in-memory state (next offset, segment size, indexes) is what it was before, so the offsets
//!   stay contiguous. The partition stays healthy: reads go on, and the next append simply
//!   tries again, succeeding once space has been freed (retention, a deleted topic, an
//!   operator). Nothing is lost or pretended: a write that fails was never durable, never
//!   acknowledged, and is gone from the file. The data directory's [`crate::DataDirSpace`] hears of it
//!   (and of every later successful append), which is how the broker knows the directory is
//!   full.
//! - **An fdatasync (or fsync) that fails**, whatever its errno (EIO; ENOSPC reported at sync
//!   time by a filesystem that allocates late), is not retried and the partition refuses every
//!   later append with [`LogError::Failed`] until it is reopened (a broker restart runs
//!   recovery). After a failed fdatasync the kernel may have dropped the dirty pages and cleared
//!   the error, so a second fdatasync could return success for data that is no longer anywhere:
//!   retrying would acknowledge lost data. Other write errors than a full disk (EIO from a
//!   write) are treated the same way. Nothing is published after a failure, not even by an
//!   fdatasync that was already running and then succeeded: it may have succeeded only because
//!   the failing one had already taken the error; and the other way round, what a roll's or
//!   close's own fdatasync covered is published only once a sync round of the same file that
//!   was running meanwhile has ended well. Reads keep working for everything that was
//!   durable before the failure (below the high watermark): those bytes were on disk when
//!   their fdatasync succeeded, and readers never go past the high watermark.

use std::collections::VecDeque;
use std::fs;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};
use std::time::Instant;

use bytes::Bytes;

use crate::batch::{BATCH_BYTES_MAX, BatchView, HEADER_BYTES};
use crate::clock::Clock;
use crate::commit::{CommitHandle, CommitStats, GroupCommitter, SyncQueued, Syncable};
use crate::config::LogConfig;
use crate::error::{BatchError, LogError, Result};
use crate::faults::DiskFaults;
use crate::recovery::{self, CLEAN_SHUTDOWN_MARKER, RecoveryReport};
use crate::segment::Segment;

/// How far the log is durable: everything before `offset`, which is `position` bytes into the
/// segment whose base offset is `segment_base` (every older segment is wholly durable).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct DurablePoint {
    offset: i64,
    segment_base: i64,
    position: u64,
}

#[derive(Debug)]
struct State {
    config: LogConfig,
    /// Oldest first; the last one is active. Never empty while open.
    segments: VecDeque<Segment>,
    /// The log start DeleteRecords set (checkpointed in `log-start`; see `start.rs`); the log
    /// starts at this or at the oldest segment's base, whichever is higher.
    start_floor: i64,
    durable: DurablePoint,
    /// Sum of segment sizes.
    size_bytes: u64,
    closed: bool,
    /// Sync rounds whose fdatasync is running (the committer runs at most one round of a
    /// partition at a time, so 0 or 1).
    rounds_in_flight: u32,
    /// How far a roll's or close's own sync made the log durable while a round was running:
    /// published when that round ends well, dropped if it failed (see `sync_active`).
    deferred: Option<DurablePoint>,
}

impl State {
    fn active(&self) -> &Segment {
        self.segments
            .back()
            .expect("a log always has an active segment")
    }
    fn active_mut(&mut self) -> &mut Segment {
        self.segments
            .back_mut()
            .expect("a log always has an active segment")
    }
    fn log_start(&self) -> i64 {
        self.segments
            .front()
            .map_or(0, |s| s.base_offset)
            .max(self.start_floor)
    }
    /// Bytes of `segment` that readers may see.
    fn readable_limit(&self, segment: &Segment) -> u64 {
        use std::cmp::Ordering::*;
        match segment.base_offset.cmp(&self.durable.segment_base) {
            Less => segment.size,
            Equal => self.durable.position.min(segment.size),
            Greater => 0,
        }
    }
    /// Index of the segment holding `offset` (the last with base ≤ offset).
    fn segment_for(&self, offset: i64) -> usize {
        self.segments
            .partition_point(|s| s.base_offset <= offset)
            .saturating_sub(1)
    }
}

/// The part of a partition shared with the sync threads and with [`Appended`] handles.
#[derive(Debug)]
pub(crate) struct PartitionShared {
    dir: PathBuf,
    state: Mutex<State>,
    /// The high watermark: one past the last durable offset. Mirrors `State::durable.offset`.
    durable_offset: AtomicI64,
    /// Woken whenever `durable_offset` moves or the partition fails or is deleted.
    durable_changed: tokio::sync::Notify,
    /// The partition's place in the commit queue.
    queued: SyncQueued,
    /// Set once after a failed fdatasync (or a write error other than a full disk); the
    /// partition then refuses appends, and reads stop at the high watermark as always.
    failed: OnceLock<Arc<io::Error>>,
    /// Set when the partition's data is deleted.
    deleted: AtomicBool,
    commit: CommitHandle,
    clock: Arc<dyn Clock>,
    faults: DiskFaults,
    /// Held by [`PartitionLog::delete_records`] across its checkpoint write, so that two calls
    /// write their checkpoints in the order they move the start (the state lock is not held
    /// across that I/O: appends go on meanwhile).
    start_moves: Mutex<()>,
    /// The log cleaner's state (see `compact/`). Held by a compaction pass and by a retention
    /// pass for their whole run, so that the two never run at the same time.
    cleaner: Mutex<crate::compact::CleanerState>,
}

/// A durable, segmented log for one partition. Cheap to clone; clones share the log.
#[derive(Debug, Clone)]
pub struct PartitionLog {
    shared: Arc<PartitionShared>,
    report: Arc<RecoveryReport>,
}

/// Offsets assigned by an append whose data is written but not yet durable.
#[derive(Debug, Clone)]
pub struct Appended {
    /// Offset of the first record appended.
    pub base_offset: i64,
    /// Offset of the last record appended.
    pub last_offset: i64,
    shared: Arc<PartitionShared>,
}

/// Offsets that an fdatasync has covered: they survive a crash and are visible to readers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Durable {
    pub base_offset: i64,
    pub last_offset: i64,
}

/// Batches returned by [`PartitionLog::read`].
#[derive(Debug, Clone)]
pub struct ReadResult {
    /// Whole record batches, CRC-checked, exactly as stored. Empty when `offset` was at the high
    /// watermark.
    pub records: Bytes,
    pub high_watermark: i64,
    pub log_start_offset: i64,
}

/// What a retention pass deleted.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RetentionOutcome {
    pub deleted_segments: usize,
    pub deleted_bytes: u64,
    pub log_start_offset: i64,
}

impl PartitionLog {
    /// Opens the partition log in `dir`, creating it if needed and running recovery (see
    /// `recovery.rs`). Everything present after recovery is durable and readable.
    pub fn open(
        dir: impl Into<PathBuf>,
        config: LogConfig,
        committer: &GroupCommitter,
        clock: Arc<dyn Clock>,
    ) -> Result<PartitionLog> {
        Self::open_with(dir, config, committer, clock, DiskFaults::none())
    }

    /// [`PartitionLog::open`] with injected disk faults (for tests; see [`DiskFaults`]).
    pub fn open_with(
        dir: impl Into<PathBuf>,
        config: LogConfig,
        committer: &GroupCommitter,
        clock: Arc<dyn Clock>,
        faults: DiskFaults,
    ) -> Result<PartitionLog> {
        config.validate()?;
        let dir = dir.into();
        let recovered = match recovery::recover(&dir, &config, &faults) {
            Ok(recovered) => recovered,
            Err(e) => {
                if let LogError::NoSpace { op, path, source } = &e {
                    committer.space().no_space(op, path, source);
                }
                return Err(e);
            }
        };
        let segments: VecDeque<Segment> = recovered.segments.into();
        let active = segments.back().expect("recovery leaves an active segment");
        let durable = DurablePoint {
            offset: active.next_offset,
            segment_base: active.base_offset,
            position: active.size,
        };
        let size_bytes = segments.iter().map(|s| s.size).sum();
        let cleaner = crate::compact::CleanerState::load(&dir);
        let shared = Arc::new(PartitionShared {
            dir,
            durable_offset: AtomicI64::new(durable.offset),
            state: Mutex::new(State {
                config,
                segments,
                start_floor: recovered.start_floor,
                durable,
                size_bytes,
                closed: false,
                rounds_in_flight: 0,
                deferred: None,
            }),
            durable_changed: tokio::sync::Notify::new(),
            queued: SyncQueued::default(),
            failed: OnceLock::new(),
            deleted: AtomicBool::new(false),
            commit: committer.handle(),
            clock,
            faults,
            start_moves: Mutex::new(()),
            cleaner: Mutex::new(cleaner),
        });
        Ok(PartitionLog {
            shared,
            report: Arc::new(recovered.report),
        })
    }

    /// What recovery found and repaired when this log was opened.
    pub fn recovery_report(&self) -> &RecoveryReport {
        &self.report
    }

    pub fn dir(&self) -> &Path {
        &self.shared.dir
    }

    /// Appends one or more whole RecordBatch v2 batches (concatenated), assigning them the next
    /// offsets.
    ///
    /// Every batch is validated first (magic, length, CRC-32C, record count, last offset delta);
    /// if any is invalid, nothing is written. On success the data is *appended*: in the segment
    /// file's page cache, with offsets assigned, not yet durable or readable. Await
    /// [`Appended::durable`] before acknowledging it.
    ///
    /// Errors that leave the log unchanged and healthy: [`LogError::InvalidBatch`], and
    /// [`LogError::NoSpace`] when the disk is full (retry later; see the module doc). After
    /// [`LogError::Failed`] (or an [`LogError::Io`] that caused it) the partition refuses
    /// appends until reopened.
    pub fn append(&self, data: &[u8]) -> Result<Appended> {
        validate_batches(data)?;
        let shared = &self.shared;
        let (base_offset, last_offset) = {
            let mut st = self.lock_writable()?;
            let config = st.config;
            let result = self.maybe_roll(&mut st, data.len() as u64).and_then(|()| {
                let active = st.active_mut();
                let before = (active.next_offset, active.size);
                active.append(data, &config).map(|()| before)
            });
            let (base_offset, before) = match result {
                Ok(before) => before,
                Err(e) => {
                    shared.write_failed(&e);
                    return Err(e);
                }
            };
            shared.commit.space().wrote();
            let active = st.active_mut();
            if active.first_append_ms.is_none() {
                active.first_append_ms = Some(shared.clock.now_ms());
            }
            let added = active.size - before;
            let last_offset = active.next_offset - 1;
            st.size_bytes += added;
            (base_offset, last_offset)
        };
        shared.commit.request_sync(shared);
        Ok(Appended {
            base_offset,
            last_offset,
            shared: Arc::clone(shared),
        })
    }

    /// Reads whole batches starting with the one that holds `offset`: at least one batch even if
    /// it is larger than `max_bytes`, then more while the total stays within `max_bytes`. Only
    /// durable data is returned, and every batch's CRC is checked first.
    ///
    /// `offset` at or past the high watermark (but not past the last appended offset) reads
    /// nothing; below the log start or past the log end is [`LogError::OffsetOutOfRange`].
    ///
    /// Reads work on a full disk and after a failed fdatasync alike: they only ever return
    /// data below the high watermark, which was durable before any failure.
    pub fn read(&self, offset: i64, max_bytes: usize) -> Result<ReadResult> {
        let st = self.lock_readable()?;
        let log_start = st.log_start();
        let high_watermark = st.durable.offset;
        let log_end = st.active().next_offset;
        if offset < log_start || offset > log_end {
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
        // Find the batch under the lock (index lookups), read its bytes outside it.
        let mut i = st.segment_for(offset);
        let (file_segment, pos, limit) = loop {
            let Some(segment) = st.segments.get(i) else {
                return Ok(empty);
            };
            let limit = st.readable_limit(segment);
            let target = offset.max(segment.base_offset);
            if let Some(pos) = segment.position_of(target, limit)? {
                break (segment.reader(), pos, limit);
            }
            // `offset` falls in a gap after this segment's last batch: continue in the next.
            i += 1;
        };
        drop(st);
        let records = file_segment.read_batches(pos, limit, max_bytes)?;
        Ok(ReadResult {
            records,
            high_watermark,
            log_start_offset: log_start,
        })
    }

    /// `(offset, timestamp)` of the first record whose timestamp is at least `timestamp`, among
    /// durable data; `None` if every record is older. (For a compressed batch the answer is the
    /// batch's base offset and max timestamp: the log does not decompress.)
    pub fn offset_for_timestamp(&self, timestamp: i64) -> Result<Option<(i64, i64)>> {
        let st = self.lock_readable()?;
        for segment in &st.segments {
            if segment.is_empty() || segment.max_timestamp < timestamp {
                continue;
            }
            let limit = st.readable_limit(segment);
            // Every batch up to and including the one at this entry is older than `timestamp`.
            let start = segment
                .time_index
                .floor(timestamp.saturating_sub(1))?
                .map_or(segment.base_offset, |e| {
                    segment.base_offset + i64::from(e.relative_offset)
                });
            let Some(mut pos) = segment.position_of(start, limit)? else {
                continue;
            };
            let mut header = [0u8; HEADER_BYTES];
            while pos + HEADER_BYTES as u64 <= limit {
                segment.read_exact_at(&mut header, pos)?;
                let len = crate::segment::batch_len_at(&header, &segment.path, pos)?;
                let max_ts = i64::from_be_bytes(header[35..43].try_into().expect("8"));
                if max_ts >= timestamp {
                    let bytes = segment.read_batches(pos, limit, 0)?;
                    let view =
                        BatchView::parse_stored(&bytes).map_err(|source| LogError::Corrupt {
                            path: segment.path.clone(),
                            position: pos,
                            source,
                        })?;
                    let log_start = st.log_start();
                    return Ok(view
                        .first_offset_with_timestamp_at_least(timestamp)
                        .map(|(offset, ts)| (offset.max(log_start), ts)));
                }
                pos += len;
            }
        }
        Ok(None)
    }

    /// The highest record timestamp appended (durable or not), from the segments' own maxima;
    /// `None` when no segment holds a record (or the log is closed).
    pub fn max_timestamp(&self) -> Option<i64> {
        let st = self.lock_readable().ok()?;
        st.segments
            .iter()
            .filter(|s| !s.is_empty())
            .map(|s| s.max_timestamp)
            .max()
    }

    /// The first offset still in the log.
    pub fn log_start_offset(&self) -> i64 {
        self.lock().log_start()
    }

    /// A future that resolves the next time the high watermark moves (or the log fails or is
    /// deleted). Create it, `enable()` it, check the high watermark, then await it, so no change
    /// between the check and the await is missed. Used by long-polling fetches.
    pub fn high_watermark_changed(&self) -> tokio::sync::futures::Notified<'_> {
        self.shared.durable_changed.notified()
    }

    /// Whether a failed fdatasync (or write) has made the partition refuse appends until it is
    /// reopened (see the module docs); durable data stays readable.
    pub fn is_failed(&self) -> bool {
        self.shared.failed.get().is_some()
    }

    /// One past the last durable offset: the highest offset readers can reach.
    pub fn high_watermark(&self) -> i64 {
        self.shared.durable_offset.load(Ordering::Acquire)
    }

    /// One past the last appended offset (durable or not).
    pub fn log_end_offset(&self) -> i64 {
        self.lock().active().next_offset
    }

    /// Bytes stored in all segments.
    pub fn size_bytes(&self) -> u64 {
        self.lock().size_bytes
    }

    /// Number of segments (including the active one).
    pub fn segment_count(&self) -> usize {
        self.lock().segments.len()
    }

    pub fn config(&self) -> LogConfig {
        self.lock().config
    }

    /// Replaces the log's settings (e.g. after a topic config change). New limits apply from the
    /// next append or retention pass.
    pub fn set_config(&self, config: LogConfig) -> Result<()> {
        config.validate()?;
        self.lock().config = config;
        Ok(())
    }

    /// Rolls the active segment now if it is older than `segment_ms` (appends also check this).
    /// On a full disk this fails with [`LogError::NoSpace`] and the active segment stays active.
    pub fn roll_if_aged(&self) -> Result<()> {
        let mut st = self.lock_writable()?;
        let result = self.maybe_roll(&mut st, 0);
        if let Err(e) = &result {
            self.shared.write_failed(e);
        }
        result
    }

    /// Deletes sealed segments past the retention limits: those whose newest record is older
    /// than `retention_ms`, then the oldest while the log would still hold `retention_bytes`
    /// without them. The active segment is never deleted. Advances the log start offset.
    ///
    /// Runs on a failed partition too (it only deletes whole sealed segments), so the space it
    /// frees can serve the other partitions of the data directory.
    pub fn apply_retention(&self) -> Result<RetentionOutcome> {
        // Never while a compaction pass rewrites segments (see `compact/`): a pass may take
        // long (throttled), so this round skips the partition rather than wait.
        let Some(_cleaner) = self.try_cleaner_state() else {
            tracing::debug!(partition = %self.shared.dir.display(), "retention skipped: a compaction pass is running");
            return Ok(RetentionOutcome {
                log_start_offset: self.log_start_offset(),
                ..RetentionOutcome::default()
            });
        };
        let now = self.shared.clock.now_ms();
        let mut st = self.lock_readable()?;
        let mut outcome = RetentionOutcome::default();
        let mut deleted = Vec::new();
        // A compact-only log keeps everything (Kafka ignores retention.ms and retention.bytes
        // then).
        while st.config.cleanup_policy.deletes() && st.segments.len() > 1 {
            let oldest = st.segments.front().expect("len > 1");
            let expired = st
                .config
                .retention_ms
                .is_some_and(|ms| oldest.max_timestamp < now.saturating_sub(ms));
            let oversize = st
                .config
                .retention_bytes
                .is_some_and(|limit| st.size_bytes - oldest.size >= limit);
            if !(expired || oversize) {
                break;
            }
            let seg = st.segments.pop_front().expect("len > 1");
            st.size_bytes -= seg.size;
            outcome.deleted_segments += 1;
            outcome.deleted_bytes += seg.size;
            deleted.push(seg.base_offset);
        }
        outcome.log_start_offset = st.log_start();
        if !deleted.is_empty() {
            // Readers holding a segment's file keep reading it after the unlink.
            for base in deleted {
                recovery::delete_segment_files(&self.shared.dir, base)?;
            }
            recovery::sync_dir(&self.shared.dir, &self.shared.faults)?;
            tracing::info!(
                partition = %self.shared.dir.display(),
                segments = outcome.deleted_segments,
                bytes = outcome.deleted_bytes,
                log_start = outcome.log_start_offset,
                "retention deleted segments"
            );
        }
        Ok(outcome)
    }

    /// Moves the log start up to `before` (Kafka's DeleteRecords): records below it are no
    /// longer served (reads there are [`LogError::OffsetOutOfRange`]), and sealed segments
    /// wholly below it are deleted. Returns the log start after the call (the "low watermark").
    ///
    /// Durability: on return the new start is checkpointed (fdatasync, rename, directory fsync;
    /// see `start.rs`) and survives a crash; the segments go after that, and recovery finishes
    /// their deletion if a crash comes first. `before` at or below the current start changes
    /// nothing; past the high watermark is [`LogError::OffsetOutOfRange`] (only durable records
    /// can be deleted). Refused on a failed partition ([`LogError::Failed`]), like appends.
    pub fn delete_records(&self, before: i64) -> Result<i64> {
        let _one_at_a_time = self.shared.start_moves.lock().expect("start lock poisoned");
        {
            let st = self.lock_writable()?;
            let (log_start, high_watermark) = (st.log_start(), st.durable.offset);
            if before > high_watermark || before < 0 {
                return Err(LogError::OffsetOutOfRange {
                    requested: before,
                    log_start,
                    high_watermark,
                });
            }
            if before <= log_start {
                return Ok(log_start);
            }
        }
        crate::start::write(&self.shared.dir, before, &self.shared.faults)?;
        let mut st = self.lock_readable()?;
        st.start_floor = st.start_floor.max(before);
        let mut deleted = Vec::new();
        while st.segments.len() > 1 && st.segments[1].base_offset <= st.start_floor {
            let seg = st.segments.pop_front().expect("len > 1");
            st.size_bytes -= seg.size;
            deleted.push(seg.base_offset);
        }
        let log_start = st.log_start();
        drop(st);
        if !deleted.is_empty() {
            // Readers holding a segment's file keep reading it after the unlink.
            for base in &deleted {
                recovery::delete_segment_files(&self.shared.dir, *base)?;
            }
            recovery::sync_dir(&self.shared.dir, &self.shared.faults)?;
        }
        tracing::info!(
            partition = %self.shared.dir.display(),
            log_start,
            deleted_segments = deleted.len(),
            "records deleted: the log start moved"
        );
        Ok(log_start)
    }

    /// Makes everything durable, writes the active segment's indexes and the clean-shutdown
    /// marker, and closes the log. Later calls fail with [`LogError::Closed`].
    pub fn close(&self) -> Result<()> {
        let mut st = self.lock();
        if st.closed {
            return Ok(());
        }
        st.closed = true;
        if let Some(err) = self.shared.failed.get() {
            return Err(LogError::Failed {
                path: self.shared.dir.clone(),
                source: Arc::clone(err),
            });
        }
        let active = st.active();
        let point = DurablePoint {
            offset: active.next_offset,
            segment_base: active.base_offset,
            position: active.size,
        };
        // On a full disk the index tails may not fit: then there is no clean-shutdown marker
        // and the next open rebuilds the indexes (the data itself is synced first).
        st.active_mut().sync_for_close()?;
        self.shared.check_not_failed()?;
        if !self.shared.publish_after_own_sync(&mut st, point) {
            // A sync round is still running and may yet fail: no clean-shutdown marker, so the
            // next open checks the segment as after a crash.
            return Ok(());
        }
        let marker = self.shared.dir.join(CLEAN_SHUTDOWN_MARKER);
        let faults = &self.shared.faults;
        faults.creating(&marker);
        fs::File::create(&marker)
            .and_then(|f| faults.sync(&marker, || f.sync_all()))
            .map_err(|e| LogError::io("write marker", &marker, e))?;
        recovery::sync_dir(&self.shared.dir, faults)
    }

    /// Marks the log deleted without touching its files (the caller removes them, e.g. a whole
    /// topic directory at once). Later calls fail; waiters on unsynced appends get an error.
    pub fn mark_deleted(&self) {
        let mut st = self.lock();
        st.closed = true;
        self.shared.deleted.store(true, Ordering::Release);
        self.shared.durable_changed.notify_waiters();
    }

    /// Deletes the partition's data directory. Waiters on unsynced appends get an error.
    pub fn delete(&self) -> Result<()> {
        self.mark_deleted();
        let dir = &self.shared.dir;
        match fs::remove_dir_all(dir) {
            Ok(()) => {}
            Err(e) if e.kind() == io::ErrorKind::NotFound => {}
            Err(e) => return Err(LogError::io("delete partition dir", dir, e)),
        }
        if let Some(parent) = dir.parent() {
            recovery::sync_dir(parent, &self.shared.faults)?;
        }
        Ok(())
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.shared.lock()
    }

    /// The state, if the log is open (failed or not): for reads.
    fn lock_readable(&self) -> Result<MutexGuard<'_, State>> {
        let st = self.lock();
        if st.closed {
            return Err(LogError::Closed {
                path: self.shared.dir.clone(),
            });
        }
        Ok(st)
    }

    /// The state, if the log is open and not failed: for appends.
    fn lock_writable(&self) -> Result<MutexGuard<'_, State>> {
        let st = self.lock_readable()?;
        if let Some(err) = self.shared.failed.get() {
            return Err(LogError::Failed {
                path: self.shared.dir.clone(),
                source: Arc::clone(err),
            });
        }
        Ok(st)
    }

    /// Seals the active segment and starts a new one if appending `incoming` bytes would pass
    /// `segment_bytes`, or the segment is older than `segment_ms`. Empty segments never roll.
    fn maybe_roll(&self, st: &mut State, incoming: u64) -> Result<()> {
        let now = self.shared.clock.now_ms();
        let active = st.active();
        if active.is_empty() {
            return Ok(());
        }
        let full = active.size + incoming > st.config.segment_bytes;
        let aged = match (st.config.roll_ms(), active.first_append_ms) {
            (Some(ms), Some(first)) => now.saturating_sub(first) >= ms,
            _ => false,
        };
        if !(full || aged) {
            return Ok(());
        }
        self.roll(st)
    }

    /// Seals the active segment and starts the next one.
    ///
    /// Order matters for recovery: the old segment is durable (data and indexes) before the
    /// new file exists, and the new file's directory entry is durable before it takes data.
    /// The steps that can meet a full disk come where failing leaves a log recovery agrees with:
    /// 1. write the index tails (ENOSPC: nothing changed, the segment stays active);
    /// 2. fdatasync the data, fsync the indexes (any failure is a failed sync: fatal);
    /// 3. create the next segment's three files (ENOSPC: whatever was created is removed and
    ///    the directory fsynced, and the old segment, complete and durable, stays the active
    ///    one; if that cleanup fails, the partition fails, since a stray empty newest segment
    ///    would make recovery treat the old one as sealed while it still takes appends);
    /// 4. fsync the directory (fatal on failure);
    /// 5. close the old segment's index files (no I/O).
    fn roll(&self, st: &mut State) -> Result<()> {
        let durable = st.durable;
        let dir = &self.shared.dir;
        let active = st.active_mut();
        let unsynced = if durable.segment_base == active.base_offset {
            active.size.saturating_sub(durable.position)
        } else {
            0
        };
        active.prepare_seal()?;
        // A sync round of the same file may have failed meanwhile; then this fdatasync's
        // success may only mean the error was reported there (see `sync_active`).
        self.shared.check_not_failed()?;
        let stats = self.shared.commit.stats();
        stats.fdatasyncs.fetch_add(1, Ordering::Relaxed);
        stats.bytes_synced.fetch_add(unsynced, Ordering::Relaxed);
        let (old_base, next, old_size) = (active.base_offset, active.next_offset, active.size);
        // The old segment is durable whatever happens next (once a running round has ended
        // well, if one is running).
        self.shared.publish_after_own_sync(
            st,
            DurablePoint {
                offset: next,
                segment_base: old_base,
                position: old_size,
            },
        );
        let segment = match Segment::create(dir, next, self.shared.faults.clone()) {
            Ok(segment) => segment,
            Err(e) => {
                recovery::delete_segment_files(dir, next)
                    .and_then(|()| recovery::sync_dir(dir, &self.shared.faults))
                    .map_err(|cleanup| {
                        tracing::error!(partition = %dir.display(), error = %e, cleanup = %cleanup, "could not remove a half-created segment");
                        cleanup
                    })?;
                return Err(e);
            }
        };
        recovery::sync_dir(dir, &self.shared.faults)?;
        st.active_mut().finish_seal();
        st.segments.push_back(segment);
        self.shared.publish_after_own_sync(
            st,
            DurablePoint {
                offset: next,
                segment_base: next,
                position: 0,
            },
        );
        Ok(())
    }

    /// The cleaner lock and state (see `compact/`), held for a whole compaction pass.
    pub(crate) fn cleaner_state(&self) -> MutexGuard<'_, crate::compact::CleanerState> {
        self.shared.cleaner.lock().expect("cleaner state poisoned")
    }

    /// The cleaner lock, unless a pass holds it.
    pub(crate) fn try_cleaner_state(&self) -> Option<MutexGuard<'_, crate::compact::CleanerState>> {
        match self.shared.cleaner.try_lock() {
            Ok(guard) => Some(guard),
            Err(std::sync::TryLockError::WouldBlock) => None,
            Err(std::sync::TryLockError::Poisoned(_)) => panic!("cleaner state poisoned"),
        }
    }

    /// The sealed, wholly durable segments, for a compaction pass to read without the lock.
    pub(crate) fn compaction_view(&self) -> Result<crate::compact::LogView> {
        let st = self.lock_writable()?;
        let high_watermark = st.durable.offset;
        let n = st.segments.len();
        let sealed = st
            .segments
            .iter()
            .take(n - 1)
            .zip(st.segments.iter().skip(1))
            .take_while(|(_, next)| next.base_offset <= high_watermark)
            .map(|(s, next)| crate::compact::SealedRef {
                base: s.base_offset,
                end: next.base_offset,
                size: s.size,
                max_timestamp: s.max_timestamp,
                file: Arc::clone(&s.file),
                path: s.path.clone(),
            })
            .collect();
        Ok(crate::compact::LogView {
            dir: self.shared.dir.clone(),
            faults: self.shared.faults.clone(),
            config: st.config,
            sealed,
        })
    }

    /// Swaps cleaned segments in, under the partition lock (see `compact/swap.rs`). An error
    /// fails the partition: the files are in a state recovery finishes.
    pub(crate) fn install_cleaned(
        &self,
        replacements: &mut [crate::compact::swap::Replacement],
        crash: Option<crate::compact::CrashPoint>,
    ) -> Result<crate::compact::swap::Installed> {
        let mut st = self.lock_writable()?;
        let st = &mut *st;
        let result = crate::compact::swap::install(
            &self.shared.dir,
            &self.shared.faults,
            &mut st.segments,
            replacements,
            crash,
        );
        st.size_bytes = st.segments.iter().map(|s| s.size).sum();
        if let Err(e) = &result {
            self.shared.fail(io::Error::other(e.to_string()));
        }
        result
    }
}

impl PartitionShared {
    fn lock(&self) -> MutexGuard<'_, State> {
        // A panic while holding the lock would leave the log in an unknown state; there is no
        // sane way to continue, so poisoning propagates.
        self.state.lock().expect("partition state poisoned")
    }

    /// `Err(Failed)` if the partition has failed. After an fdatasync that succeeded: a failed
    /// fdatasync of the same file may have cleared the error in the kernel with the pages gone,
    /// so a success that comes after a failure proves nothing ("fsyncgate"). A round whose
    /// fdatasync is still running (or has failed but not yet said so) is covered by
    /// [`PartitionShared::publish_after_own_sync`].
    fn check_not_failed(&self) -> Result<()> {
        match self.failed.get() {
            None => Ok(()),
            Some(err) => Err(LogError::Failed {
                path: self.dir.clone(),
                source: Arc::clone(err),
            }),
        }
    }

    /// fdatasyncs the active segment and publishes how far it got.
    fn sync_active(&self, stats: &CommitStats) {
        let (file, path, point) = {
            let mut st = self.lock();
            if st.closed || self.failed.get().is_some() {
                return;
            }
            let active = st.active();
            let point = DurablePoint {
                offset: active.next_offset,
                segment_base: active.base_offset,
                position: active.size,
            };
            if point.offset <= st.durable.offset {
                return;
            }
            // The path only for the fault seam: a production round allocates nothing.
            let path = (!self.faults.is_none()).then(|| active.path.clone());
            let file = Arc::clone(&active.file);
            st.rounds_in_flight += 1;
            (file, path, point)
        };
        let started = Instant::now();
        let result = match &path {
            None => file.sync_data(),
            Some(path) => self.faults.sync(path, || file.sync_data()),
        };
        let micros = started.elapsed().as_micros() as u64;
        stats.record_fdatasync(micros);
        if let Err(e) = &result
            && crate::error::is_no_space(e)
        {
            self.commit.space().no_space("fdatasync", &self.dir, e);
        }
        let mut st = self.lock();
        st.rounds_in_flight -= 1;
        if let Err(e) = result {
            // A roll's or close's sync of the same file that succeeded while this one ran may
            // have succeeded only because this one took the error (the pages may be gone):
            // what it found is dropped, and nothing is published after a failure.
            st.deferred = None;
            self.fail(e);
            return;
        }
        if self.failed.get().is_some() {
            // The partition failed while this fdatasync ran: perhaps a roll's sync of the same
            // file failed just before, and then this success may only mean the error was
            // already reported there (the pages may be gone). Nothing is published after a
            // failure; an append's or roll's failure is recorded under the state lock, so
            // this check cannot miss one that came first.
            st.deferred = None;
            return;
        }
        let before = st.durable;
        if point.segment_base == before.segment_base && point.position > before.position {
            // Counted before publishing, so a woken waiter sees the bytes counted.
            stats.record_bytes_synced(point.position - before.position);
        }
        self.publish(&mut st, point);
        if st.rounds_in_flight == 0
            && let Some(deferred) = st.deferred.take()
        {
            self.publish(&mut st, deferred);
        }
    }

    /// Publishes what a roll's or close's own sync (run under the state lock) made durable,
    /// unless a sync round of the partition is running: then a successful return here may only
    /// mean that round's fdatasync is about to report the error instead (the kernel reports a
    /// writeback error once), so the point waits for that round to end well
    /// (`sync_active` publishes it then, or drops it on failure). Returns whether it was
    /// published now.
    fn publish_after_own_sync(&self, st: &mut State, point: DurablePoint) -> bool {
        if st.rounds_in_flight == 0 {
            self.publish(st, point);
            return true;
        }
        st.deferred = Some(match st.deferred {
            Some(d) if d.offset > point.offset => d,
            _ => point,
        });
        false
    }

    /// Handles an append's (or roll's) error: a full disk is reported to the data directory's
    /// space state and leaves the partition healthy; any other I/O error fails the partition.
    fn write_failed(&self, e: &LogError) {
        match e {
            LogError::NoSpace { op, path, source } => {
                self.commit.space().no_space(op, path, source);
            }
            LogError::Io { source, .. } => {
                if crate::error::is_no_space(source) {
                    // ENOSPC from a sync at a roll: fatal like any failed sync, but the
                    // directory is full all the same.
                    self.commit.space().no_space("fdatasync", &self.dir, source);
                }
                self.fail(io::Error::new(source.kind(), e.to_string()));
            }
            _ => {}
        }
    }

    /// Moves the durable point forward (never back) and wakes waiters.
    fn publish(&self, st: &mut State, point: DurablePoint) {
        if point.offset > st.durable.offset
            || (point.offset == st.durable.offset && point.segment_base > st.durable.segment_base)
        {
            st.durable = point;
            self.durable_offset.store(point.offset, Ordering::Release);
            self.durable_changed.notify_waiters();
        }
    }

    /// Fails the partition for good (until reopened): appends are refused, reads go on.
    fn fail(&self, error: io::Error) {
        if self.failed.get().is_none() {
            tracing::error!(
                partition = %self.dir.display(),
                error = %error,
                "partition refuses appends until the broker restarts (a failed fdatasync is \
                 never retried: the kernel may have dropped the data); durable data stays readable"
            );
        }
        let _ = self.failed.set(Arc::new(error));
        self.durable_changed.notify_waiters();
    }
}

/// A partition's sync round: one fdatasync of the active segment covers every append queued so
/// far. The committer runs at most one round of a partition at a time, and another while
/// appends arrived during the fdatasync.
impl Syncable for PartitionShared {
    fn sync_round(&self, stats: &CommitStats) {
        self.sync_active(stats);
    }

    fn has_unsynced(&self) -> bool {
        let st = self.lock();
        !st.closed && self.failed.get().is_none() && st.active().next_offset > st.durable.offset
    }

    fn sync_queued(&self) -> &SyncQueued {
        &self.queued
    }
}

impl Appended {
    /// Resolves once an fdatasync covers every offset of this append.
    pub async fn durable(&self) -> Result<Durable> {
        let shared = &self.shared;
        loop {
            let notified = shared.durable_changed.notified();
            tokio::pin!(notified);
            // Register before checking, so a publish between the check and the await is seen.
            notified.as_mut().enable();
            if shared.durable_offset.load(Ordering::Acquire) > self.last_offset {
                return Ok(Durable {
                    base_offset: self.base_offset,
                    last_offset: self.last_offset,
                });
            }
            if let Some(err) = shared.failed.get() {
                return Err(LogError::Failed {
                    path: shared.dir.clone(),
                    source: Arc::clone(err),
                });
            }
            if shared.deleted.load(Ordering::Acquire) {
                return Err(LogError::Closed {
                    path: shared.dir.clone(),
                });
            }
            notified.await;
        }
    }

    /// Blocks the calling thread until [`Appended::durable`] resolves. Not for async contexts.
    pub fn wait_durable(&self) -> Result<Durable> {
        futures_executor::block_on(self.durable())
    }

    /// Whether the append is already durable.
    pub fn is_durable(&self) -> bool {
        self.shared.durable_offset.load(Ordering::Acquire) > self.last_offset
    }
}

/// Validates every batch in `data` (framing, header fields, CRC), as an append does: what any
/// backend checks before it accepts a produce. Nothing is written on error.
pub fn validate_batches(data: &[u8]) -> Result<()> {
    if data.is_empty() {
        return Err(LogError::InvalidBatch {
            position: 0,
            source: BatchError::Empty,
        });
    }
    if data.len() > BATCH_BYTES_MAX {
        // Keeps segment positions within u32 (see `config::SEGMENT_BYTES_MAX`).
        return Err(LogError::InvalidBatch {
            position: 0,
            source: BatchError::TooLarge {
                bytes: data.len(),
                max: BATCH_BYTES_MAX,
            },
        });
    }
    let mut pos = 0;
    while pos < data.len() {
        let view =
            BatchView::parse_checked(&data[pos..]).map_err(|source| LogError::InvalidBatch {
                position: pos,
                source,
            })?;
        pos += view.len();
    }
    Ok(())
}

/// A segment's file, detached from the partition lock for reading.
#[derive(Debug)]
pub(crate) struct SegmentReader {
    segment_file: Arc<fs::File>,
    path: PathBuf,
}

impl Segment {
    pub(crate) fn reader(&self) -> SegmentReader {
        SegmentReader {
            segment_file: Arc::clone(&self.file),
            path: self.path.clone(),
        }
    }

    pub(crate) fn read_exact_at(&self, buf: &mut [u8], pos: u64) -> Result<()> {
        std::os::unix::fs::FileExt::read_exact_at(&*self.file, buf, pos)
            .map_err(|e| LogError::io("read segment", &self.path, e))
    }
}

impl SegmentReader {
    fn read_batches(&self, pos: u64, limit: u64, max_bytes: usize) -> Result<Bytes> {
        crate::segment::read_batches(&self.segment_file, &self.path, pos, limit, max_bytes)
    }
}
