//! Log compaction (Kafka's `cleanup.policy=compact`): keep the latest record of every key.
//!
//! Where it sits: a background task of the broker asks each compacted partition
//! [`crate::PartitionLog::cleanable`] (how dirty it is, and why it is due), picks the dirtiest,
//! and calls [`crate::PartitionLog::clean`] with the cleaner's [`CleanerLimits`]. Appends and
//! reads go on meanwhile: a pass reads sealed segments (immutable) and writes new files
//! outside the partition lock, and takes the lock only to swap the new segments in.
//!
//! One pass, as Kafka's log cleaner does it:
//! 1. **Plan.** The cleanable part of the log is its sealed segments that are wholly durable,
//!    up to (not including) the first one holding a record newer than `min.compaction.lag.ms`;
//!    the active segment is never cleaned. Its *clean* part lies before the cleaner checkpoint
//!    (`checkpoint.rs`), the rest is *dirty*. The pass runs when dirty bytes exceed
//!    `min.cleanable.dirty.ratio` of the cleanable bytes, or when the first dirty segment holds
//!    a record older than `max.compaction.lag.ms`, or when tombstones wait for removal whose
//!    delete horizon has passed.
//! 2. **Map.** Read the dirty segments and record, per key (its 128-bit hash), the offset of its
//!    latest record, within the memory limit; where the map fills, the pass ends at the last
//!    segment that fitted whole. Also note each idempotent producer's last batch.
//! 3. **Rewrite.** Every segment from the log start to the end of the mapped range is rewritten,
//!    in groups of adjacent segments that fit one segment, keeping: records without a key;
//!    each key's latest record; tombstones (null values) until their batch's delete horizon,
//!    set to `now + delete.retention.ms` by the pass that first keeps them (KIP-534: a header
//!    bit, and the base timestamp); and, as an empty header, a batch all of whose records went
//!    if it is its producer's last batch, so the producer's last sequence and epoch stay in the
//!    log. Offsets never change: a batch keeps its base offset and last offset delta (so its
//!    producer's last sequence), producer id, epoch, base sequence and attributes, and each
//!    surviving record keeps its offset delta, timestamp, key, value and headers (see
//!    `records.rs`). A group with nothing to remove is left as it is.
//! 4. **Swap**, crash-safe (`swap.rs`: the file states and recovery's table), then the
//!    checkpoint moves to the end of the mapped range.
//!
//! Compressed batches are read through the [`BatchCodecs`] the caller passes in
//! [`CleanerLimits::codecs`] (this crate has no codecs of its own: the log stores batches as
//! producers compressed them): decompressed (at most [`DECOMPRESSED_MAX_BYTES`]) to map and
//! filter their records, and a rewritten one is compressed again with its own codec, as Kafka's
//! cleaner does.
//!
//! Not done here (kept safe instead):
//! - Without codecs, or for a batch that does not decompress within the limit, a compressed
//!   batch is kept whole: its keys are unknown, so it supersedes no older record, and no
//!   tombstone after it is removed (a value of its key hidden in it would come back).
//! - Transactional and control batches are kept whole in the same way (aborted transactions
//!   are not tracked; the broker refuses transactional produces today).
//!
//! Concurrency: one pass at a time per partition, and never at the same time as that
//! partition's retention pass (both take the partition's cleaner lock; a retention round skips
//! a partition whose pass is running rather than wait for it). DeleteRecords does not
//! wait for a pass; the swap checks that every segment it replaces is still there and abandons
//! the pass otherwise. Readers holding an old segment's file keep reading it after the swap
//! unlinks it.
//!
//! Memory: the key map (at most `dedupe_buffer_bytes`, see [`records::MAP_ENTRY_BYTES`]), one
//! read buffer and one write buffer of `io_buffer_bytes` each (a buffer grows to one batch
//! when a batch is larger), one compressed batch's records decompressed (and compressed again), the map of producers' last batches (at most
//! [`PRODUCERS_TRACKED_MAX`] entries), and a few bytes per segment.

mod checkpoint;
mod records;
pub(crate) mod swap;

use std::collections::HashMap;
use std::fs::File;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::batch::{self, BatchView, HEADER_BYTES, LOG_OVERHEAD_BYTES, Peek};
use crate::config::LogConfig;
use crate::error::{LogError, Result};
use crate::faults::DiskFaults;
use crate::recovery::sync_dir;
use crate::segment::Segment;

pub use checkpoint::CLEANER_CHECKPOINT_FILE;
use records::{Filter, OffsetMap, RecordAt};
pub use swap::CrashPoint;
use swap::{Installed, Replacement, Stage};

/// Kafka's `log.cleaner.dedupe.buffer.size` default: 128 MiB.
pub const DEDUPE_BUFFER_BYTES_DEFAULT: u64 = 128 << 20;
/// Kafka's `log.cleaner.io.buffer.size` default: 512 KiB.
pub const IO_BUFFER_BYTES_DEFAULT: usize = 512 << 10;
/// Idempotent producers whose last batch a pass remembers. Beyond it, emptied batches of the
/// producers it could not remember are kept as empty headers (safe, just less compact).
pub const PRODUCERS_TRACKED_MAX: usize = 1 << 16;

/// The most bytes one compressed batch's records may decompress to in the cleaner (the bound
/// the broker's reads use too); a batch that inflates to more is kept whole.
pub const DECOMPRESSED_MAX_BYTES: usize = 64 << 20;

/// Kafka's record batch codecs (gzip, snappy, lz4, zstd; the attributes' compression bits),
/// which the cleaner needs to read and rewrite compressed batches.
pub trait BatchCodecs: Send + Sync {
    /// The records section `input`, compressed with `codec`, decompressed into at most `limit`
    /// bytes; `Err` says why it cannot be.
    fn decompress(
        &self,
        codec: i16,
        input: &[u8],
        limit: usize,
    ) -> std::result::Result<Vec<u8>, String>;
    /// `input` (a records section) compressed with `codec`, as Kafka's clients read it.
    fn compress(&self, codec: i16, input: &[u8]) -> std::result::Result<Vec<u8>, String>;
}

/// The codecs a cleaner has, if any ([`CleanerLimits::codecs`]).
#[derive(Clone, Copy, Default)]
pub struct Codecs(Option<&'static dyn BatchCodecs>);

impl Codecs {
    /// No codecs: compressed batches are kept whole.
    pub const NONE: Codecs = Codecs(None);

    pub fn new(codecs: &'static dyn BatchCodecs) -> Codecs {
        Codecs(Some(codecs))
    }

    pub fn get(self) -> Option<&'static dyn BatchCodecs> {
        self.0
    }
}

impl std::fmt::Debug for Codecs {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(if self.0.is_some() {
            "Codecs(some)"
        } else {
            "Codecs(none)"
        })
    }
}

impl PartialEq for Codecs {
    fn eq(&self, other: &Codecs) -> bool {
        match (self.0, other.0) {
            (None, None) => true,
            (Some(a), Some(b)) => std::ptr::addr_eq(a, b),
            _ => false,
        }
    }
}

/// The limits of a log cleaner, named as Kafka's broker settings.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct CleanerLimits {
    /// `log.cleaner.dedupe.buffer.size`: memory for the key → offset map of one pass. A pass
    /// maps as many whole dirty segments as fit; a segment with more distinct keys than fit
    /// cannot be cleaned ([`LogError::Config`]).
    pub dedupe_buffer_bytes: u64,
    /// `log.cleaner.io.max.bytes.per.second`: bytes read plus written per second, averaged over
    /// the pass (it sleeps to stay under). `None`: unlimited (Kafka's default).
    pub io_bytes_per_second: Option<u64>,
    /// `log.cleaner.io.buffer.size`: bytes read from a segment at a time, and gathered before
    /// each write of the cleaned one.
    pub io_buffer_bytes: usize,
    /// The codecs for compressed batches; without them those are kept whole.
    pub codecs: Codecs,
}

impl Default for CleanerLimits {
    fn default() -> Self {
        CleanerLimits {
            dedupe_buffer_bytes: DEDUPE_BUFFER_BYTES_DEFAULT,
            io_bytes_per_second: None,
            io_buffer_bytes: IO_BUFFER_BYTES_DEFAULT,
            codecs: Codecs::NONE,
        }
    }
}

/// Why a log is due for cleaning.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CleanReason {
    /// Dirty bytes passed `min.cleanable.dirty.ratio`.
    DirtyRatio,
    /// The dirty part holds a record older than `max.compaction.lag.ms`.
    MaxCompactionLag,
    /// Tombstones wait whose delete horizon has passed.
    DeleteHorizon,
}

/// How dirty a compacted log is ([`crate::PartitionLog::cleanable`]): a scheduler cleans the
/// highest `dirty_ratio` first, and a `MaxCompactionLag` log before any other.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Cleanable {
    pub reason: CleanReason,
    /// Dirty bytes / cleanable bytes, in `[0, 1]`.
    pub dirty_ratio: f64,
    pub dirty_bytes: u64,
    pub cleanable_bytes: u64,
}

/// What one [`crate::PartitionLog::clean`] did: the numbers a benchmark needs.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct CleanOutcome {
    /// Why it ran; `None`: the log was not due (nothing was read or written).
    pub reason: Option<CleanReason>,
    pub dirty_ratio: f64,
    /// Sealed segments read (mapped or rewritten).
    pub segments_read: usize,
    /// Cleaned segments swapped in.
    pub segments_written: usize,
    /// Old segments replaced or deleted.
    pub segments_replaced: usize,
    pub bytes_read: u64,
    pub bytes_written: u64,
    /// Segment bytes before and after, over the groups swapped.
    pub bytes_before: u64,
    pub bytes_after: u64,
    pub records_removed: u64,
    pub tombstones_removed: u64,
    /// Batches all of whose records went but kept as an empty header (a producer's last).
    pub batches_emptied: u64,
    /// Distinct keys in the map.
    pub keys_mapped: usize,
    /// The cleaner checkpoint after the pass: everything before it is compacted.
    pub first_dirty_offset: i64,
    /// A segment the pass would replace went away meanwhile (DeleteRecords): nothing changed.
    pub abandoned: bool,
    /// Time spent, I/O throttling included.
    pub elapsed: Duration,
}

/// What a partition remembers between passes. Guarded by the partition's cleaner lock, which
/// is also what keeps a pass and the retention pass apart.
#[derive(Debug, Default)]
pub(crate) struct CleanerState {
    /// The cleaner checkpoint (`checkpoint.rs`).
    pub first_dirty: i64,
    /// The earliest delete horizon of a tombstone the last pass kept (checkpointed too).
    pub next_horizon_ms: Option<i64>,
}

impl CleanerState {
    pub fn load(dir: &Path) -> CleanerState {
        let checkpoint = checkpoint::read(dir);
        CleanerState {
            first_dirty: checkpoint.first_dirty,
            next_horizon_ms: checkpoint.next_horizon_ms,
        }
    }
}

/// A sealed segment as a pass sees it: immutable, read without the partition lock.
#[derive(Debug, Clone)]
pub(crate) struct SealedRef {
    pub base: i64,
    /// The next segment's base offset: the group's end if this segment ends one.
    pub end: i64,
    pub size: u64,
    pub max_timestamp: i64,
    pub file: Arc<File>,
    pub path: PathBuf,
}

/// What a pass needs of the partition, taken under its lock.
#[derive(Debug)]
pub(crate) struct LogView {
    pub dir: PathBuf,
    pub faults: DiskFaults,
    pub config: LogConfig,
    /// Sealed segments wholly below the high watermark, oldest first.
    pub sealed: Vec<SealedRef>,
}

impl crate::PartitionLog {
    /// How dirty this compacted log is, and why it is due for a compaction pass; `None` if it
    /// is not due (or its policy does not compact). For a scheduler that cleans the dirtiest
    /// log first (see `compact/`). `None` too while a pass of this partition runs.
    pub fn cleanable(&self, now_ms: i64) -> Option<Cleanable> {
        let state = self.try_cleaner_state()?;
        let view = self.compaction_view().ok()?;
        cleanable(&view, &state, now_ms)
    }

    /// Runs one compaction pass if the log is due (see `compact/` for what a pass keeps and
    /// removes), within `limits`. Appends and reads go on meanwhile: the cleaned segments are
    /// built outside the partition lock, which is taken only to swap them in.
    ///
    /// Durability: on return the cleaned segments have replaced the old ones durably (data and
    /// indexes fdatasynced, renames and unlinks covered by directory fsyncs) and the cleaner
    /// checkpoint is written; a crash at any point leaves a state recovery completes or rolls
    /// back. Offsets never change. Refused on a failed partition ([`LogError::Failed`]); an
    /// I/O error after the commit point fails the partition (reopening completes the swap).
    pub fn clean(&self, now_ms: i64, limits: &CleanerLimits) -> Result<CleanOutcome> {
        self.clean_stopping_at(now_ms, limits, None)
    }

    /// [`crate::PartitionLog::clean`] that stops at `crash` as if the process died there, leaving the
    /// files as they are (tests of recovery; not for production use). Abandon the log after.
    #[doc(hidden)]
    pub fn clean_stopping_at(
        &self,
        now_ms: i64,
        limits: &CleanerLimits,
        crash: Option<CrashPoint>,
    ) -> Result<CleanOutcome> {
        let mut state = self.cleaner_state();
        let view = self.compaction_view()?;
        clean(self, &mut state, &view, now_ms, limits, crash)
    }
}

/// Which segments a pass covers.
#[derive(Debug, Clone, Copy)]
struct Plan {
    due: Cleanable,
    /// Index of the first dirty segment in `LogView::sealed`.
    first_dirty: usize,
    /// Index of the first segment not to clean (too new for `min.compaction.lag.ms`).
    uncleanable: usize,
}

/// Whether the log is due, and how dirty it is.
fn plan(view: &LogView, state: &CleanerState, now_ms: i64) -> Result<Option<Plan>> {
    let config = &view.config;
    if !config.cleanup_policy.compacts() {
        return Ok(None);
    }
    let sealed = &view.sealed;
    let first_dirty = sealed.partition_point(|s| s.base < state.first_dirty);
    let lag_limit = now_ms.saturating_sub(config.min_compaction_lag_ms);
    let uncleanable = first_dirty
        + sealed[first_dirty..]
            .iter()
            .take_while(|s| config.min_compaction_lag_ms == 0 || s.max_timestamp <= lag_limit)
            .count();
    let clean_bytes: u64 = sealed[..first_dirty].iter().map(|s| s.size).sum();
    let dirty_bytes: u64 = sealed[first_dirty..uncleanable]
        .iter()
        .map(|s| s.size)
        .sum();
    let cleanable_bytes = clean_bytes + dirty_bytes;
    let dirty_ratio = if cleanable_bytes == 0 {
        0.0
    } else {
        dirty_bytes as f64 / cleanable_bytes as f64
    };
    let overdue = match config.max_compaction_lag_ms {
        Some(max) if uncleanable > first_dirty => {
            first_timestamp(&sealed[first_dirty])? < now_ms.saturating_sub(max)
        }
        _ => false,
    };
    let reason = if overdue {
        CleanReason::MaxCompactionLag
    } else if dirty_bytes > 0 && dirty_ratio > config.min_cleanable_dirty_ratio.0 {
        CleanReason::DirtyRatio
    } else if first_dirty > 0 && state.next_horizon_ms.is_some_and(|h| h <= now_ms) {
        CleanReason::DeleteHorizon
    } else {
        return Ok(None);
    };
    Ok(Some(Plan {
        due: Cleanable {
            reason,
            dirty_ratio,
            dirty_bytes,
            cleanable_bytes,
        },
        first_dirty,
        uncleanable,
    }))
}

/// The timestamp of a segment's first record (its first batch's; the max timestamp if that
/// batch's base timestamp is a delete horizon).
fn first_timestamp(s: &SealedRef) -> Result<i64> {
    if s.size < HEADER_BYTES as u64 {
        // No record (an empty oldest segment a compaction kept): never overdue.
        return Ok(i64::MAX);
    }
    let mut header = [0u8; HEADER_BYTES];
    s.file
        .read_exact_at(&mut header, 0)
        .map_err(|e| LogError::io("read segment", &s.path, e))?;
    let attrs = sluice_batch::read_i16(&header, batch::header::ATTRIBUTES);
    let field = if attrs & batch::attributes::DELETE_HORIZON != 0 {
        batch::header::MAX_TIMESTAMP
    } else {
        batch::header::BASE_TIMESTAMP
    };
    Ok(sluice_batch::read_i64(&header, field))
}

pub(crate) fn cleanable(view: &LogView, state: &CleanerState, now_ms: i64) -> Option<Cleanable> {
    match plan(view, state, now_ms) {
        Ok(plan) => plan.map(|p| p.due),
        Err(e) => {
            tracing::warn!(partition = %view.dir.display(), error = %e, "cannot tell whether the log is due for compaction");
            None
        }
    }
}

/// Bytes read and written by a pass, and the I/O rate limit.
struct Io {
    started: Instant,
    limit: Option<u64>,
    read: u64,
    written: u64,
}

impl Io {
    fn account(&mut self, read: u64, written: u64) {
        self.read += read;
        self.written += written;
        if let Some(rate) = self.limit.filter(|r| *r > 0) {
            let due = Duration::from_secs_f64((self.read + self.written) as f64 / rate as f64);
            let elapsed = self.started.elapsed();
            if due > elapsed {
                std::thread::sleep(due - elapsed);
            }
        }
    }
}

/// Calls `visit` with every batch of a sealed segment, CRC-checked, reading
/// `io_buffer_bytes` at a time.
fn for_each_batch(
    s: &SealedRef,
    buf: &mut Vec<u8>,
    chunk: usize,
    io: &mut Io,
    mut visit: impl FnMut(&BatchView<'_>, &mut Io) -> Result<()>,
) -> Result<()> {
    let mut pos = 0u64;
    while pos < s.size {
        let want = ((s.size - pos) as usize).min(chunk.max(LOG_OVERHEAD_BYTES));
        buf.clear();
        buf.resize(want, 0);
        s.file
            .read_exact_at(buf, pos)
            .map_err(|e| LogError::io("read segment", &s.path, e))?;
        io.account(want as u64, 0);
        let mut at = 0usize;
        loop {
            let corrupt = |source| LogError::Corrupt {
                path: s.path.clone(),
                position: pos + at as u64,
                source,
            };
            match batch::peek(&buf[at..]).map_err(corrupt)? {
                Peek::Whole(len) => {
                    let view =
                        BatchView::parse_stored_checked(&buf[at..at + len]).map_err(corrupt)?;
                    visit(&view, io)?;
                    at += len;
                    if at == buf.len() {
                        break;
                    }
                }
                Peek::Incomplete { needed } => {
                    if at == 0 {
                        // One batch larger than the buffer: read it whole.
                        let len = needed.ok_or_else(|| {
                            corrupt(crate::error::BatchError::Truncated {
                                available: buf.len(),
                                needed,
                            })
                        })?;
                        if pos + len as u64 > s.size {
                            return Err(corrupt(crate::error::BatchError::Truncated {
                                available: (s.size - pos) as usize,
                                needed: Some(len),
                            }));
                        }
                        buf.resize(len, 0);
                        s.file
                            .read_exact_at(buf, pos)
                            .map_err(|e| LogError::io("read segment", &s.path, e))?;
                        io.account((len - want) as u64, 0);
                        continue;
                    }
                    break;
                }
            }
        }
        pos += at as u64;
    }
    Ok(())
}

/// Calls `visit(header)` for every batch of a sealed segment, reading headers only.
fn for_each_header(s: &SealedRef, io: &mut Io, mut visit: impl FnMut(&[u8])) -> Result<()> {
    let mut pos = 0u64;
    let mut header = [0u8; HEADER_BYTES];
    while pos + HEADER_BYTES as u64 <= s.size {
        s.file
            .read_exact_at(&mut header, pos)
            .map_err(|e| LogError::io("read segment", &s.path, e))?;
        io.account(HEADER_BYTES as u64, 0);
        let len = crate::segment::batch_len_at(&header, &s.path, pos)?;
        visit(&header);
        pos += len;
    }
    Ok(())
}

/// Each idempotent producer's last batch (base offset) among the batches a pass saw.
struct Producers {
    last: HashMap<i64, i64>,
    overflow: bool,
}

impl Producers {
    fn note(&mut self, producer_id: i64, base_offset: i64) {
        if producer_id < 0 {
            return;
        }
        if self.last.len() >= PRODUCERS_TRACKED_MAX && !self.last.contains_key(&producer_id) {
            self.overflow = true;
            return;
        }
        let last = self.last.entry(producer_id).or_insert(base_offset);
        *last = (*last).max(base_offset);
    }

    /// Whether the batch at `base_offset` may be its producer's last one.
    fn may_be_last(&self, producer_id: i64, base_offset: i64) -> bool {
        producer_id >= 0
            && match self.last.get(&producer_id) {
                Some(&last) => last <= base_offset,
                None => true,
            }
    }
}

/// One pass's running state.
struct Pass<'a> {
    view: &'a LogView,
    limits: &'a CleanerLimits,
    now_ms: i64,
    map: OffsetMap,
    producers: Producers,
    io: Io,
    read_buf: Vec<u8>,
    /// The decompressed records section of the batch at hand, if it is compressed.
    plain: Vec<u8>,
    records: Vec<RecordAt>,
    keep: Vec<bool>,
    /// A batch the cleaner cannot read came before: no tombstone may go (module doc).
    opaque_seen: bool,
    next_horizon_ms: Option<i64>,
    outcome: CleanOutcome,
}

/// Runs one pass if the log is due. The caller holds the cleaner lock.
pub(crate) fn clean(
    log: &crate::PartitionLog,
    state: &mut CleanerState,
    view: &LogView,
    now_ms: i64,
    limits: &CleanerLimits,
    crash: Option<CrashPoint>,
) -> Result<CleanOutcome> {
    let started = Instant::now();
    let mut outcome = CleanOutcome {
        first_dirty_offset: state.first_dirty,
        ..CleanOutcome::default()
    };
    let Some(plan) = plan(view, state, now_ms)? else {
        outcome.elapsed = started.elapsed();
        return Ok(outcome);
    };
    outcome.reason = Some(plan.due.reason);
    outcome.dirty_ratio = plan.due.dirty_ratio;
    let mut pass = Pass {
        view,
        limits,
        now_ms,
        map: OffsetMap::new(limits.dedupe_buffer_bytes),
        producers: Producers {
            last: HashMap::new(),
            overflow: false,
        },
        io: Io {
            started,
            limit: limits.io_bytes_per_second,
            read: 0,
            written: 0,
        },
        read_buf: Vec::new(),
        plain: Vec::new(),
        records: Vec::new(),
        keep: Vec::new(),
        opaque_seen: false,
        next_horizon_ms: None,
        outcome,
    };
    let (map_end, read_end) = pass.build_map(plan)?;
    for s in &view.sealed[..plan.first_dirty] {
        let producers = &mut pass.producers;
        for_each_header(s, &mut pass.io, |h| {
            let base = sluice_batch::read_i64(h, batch::header::BASE_OFFSET);
            producers.note(sluice_batch::read_i64(h, batch::header::PRODUCER_ID), base);
        })?;
    }
    pass.outcome.keys_mapped = pass.map.len();
    pass.outcome.segments_read = read_end;
    let mut replacements = Vec::new();
    let mut written = pass.rewrite(map_end, &mut replacements);
    if written.is_ok() && !replacements.is_empty() {
        written = sync_dir(&view.dir, &view.faults);
    }
    if let Err(e) = written {
        // Nothing was renamed yet: the cleaned files are only leftovers.
        remove_cleaned(view, &replacements);
        return Err(e);
    }
    if crash == Some(CrashPoint::AfterCleaned) {
        return Ok(pass.outcome);
    }
    pass.outcome.segments_written = replacements.iter().filter(|r| r.output.is_some()).count();
    pass.outcome.segments_replaced = replacements.iter().map(|r| r.inputs.len()).sum();
    pass.outcome.bytes_after = replacements
        .iter()
        .filter_map(|r| r.output.as_ref().map(|s| s.size))
        .sum();
    // An error from here on leaves every file where it is: some may have been renamed, and
    // deleting a `.cleaned` file now could make recovery take a rolled-back group for a
    // committed one. Recovery decides (the partition has failed; reopening runs it).
    let installed = if replacements.is_empty() {
        Installed::Done
    } else {
        log.install_cleaned(&mut replacements, crash)?
    };
    let mut outcome = pass.outcome;
    match installed {
        Installed::Crashed => return Ok(outcome),
        Installed::Abandoned => {
            remove_cleaned(view, &replacements);
            outcome.abandoned = true;
        }
        Installed::Done => {
            let first_dirty = match map_end {
                0 => state.first_dirty,
                n => view.sealed[n - 1].end.max(state.first_dirty),
            };
            if (first_dirty, pass.next_horizon_ms) != (state.first_dirty, state.next_horizon_ms) {
                let next = checkpoint::Checkpoint {
                    first_dirty,
                    next_horizon_ms: pass.next_horizon_ms,
                };
                checkpoint::write(&view.dir, next, &view.faults)?;
            }
            state.first_dirty = first_dirty;
            state.next_horizon_ms = pass.next_horizon_ms;
        }
    }
    outcome.first_dirty_offset = state.first_dirty;
    outcome.bytes_read = pass.io.read;
    outcome.bytes_written = pass.io.written;
    outcome.elapsed = started.elapsed();
    tracing::info!(
        partition = %view.dir.display(),
        reason = ?outcome.reason,
        dirty_ratio = outcome.dirty_ratio,
        bytes_before = outcome.bytes_before,
        bytes_after = outcome.bytes_after,
        records_removed = outcome.records_removed,
        abandoned = outcome.abandoned,
        elapsed_ms = outcome.elapsed.as_millis() as u64,
        "compacted"
    );
    Ok(outcome)
}

/// Deletes the `.cleaned` files of a pass that will not be swapped in (best effort: recovery
/// deletes what remains).
fn remove_cleaned(view: &LogView, replacements: &[Replacement]) {
    for r in replacements {
        for path in swap::temp_paths(&view.dir, r.base, r.end, Stage::Cleaned) {
            if let Err(e) = swap::remove(&view.faults, &path) {
                tracing::warn!(error = %e, "could not delete a cleaned file; recovery will");
            }
        }
    }
}

impl Pass<'_> {
    /// Step 2: maps the dirty segments; returns the index of the first segment not mapped
    /// whole (the end of the range to rewrite), and of the first segment not read.
    fn build_map(&mut self, plan: Plan) -> Result<(usize, usize)> {
        let mut end = plan.first_dirty;
        for (i, s) in self.view.sealed[plan.first_dirty..plan.uncleanable]
            .iter()
            .enumerate()
        {
            let mut fitted = true;
            let (map, producers) = (&mut self.map, &mut self.producers);
            let (records, plain) = (&mut self.records, &mut self.plain);
            let codecs = self.limits.codecs;
            for_each_batch(
                s,
                &mut self.read_buf,
                self.limits.io_buffer_bytes,
                &mut self.io,
                |view, _| {
                    producers.note(view.producer_id(), view.base_offset());
                    if !fitted || records::is_opaque(view, codecs) {
                        return Ok(());
                    }
                    // A compressed batch that does not decompress is kept whole (fill_group
                    // meets the same error and treats the batch as opaque).
                    let Ok(body) = records::section(view, codecs, plain) else {
                        return Ok(());
                    };
                    parse(view, body, records, &s.path)?;
                    for r in records.iter() {
                        if let Some((k0, k1)) = r.key
                            && !map.put(
                                &body[k0..k1],
                                view.base_offset() + i64::from(r.offset_delta),
                            )
                        {
                            fitted = false;
                            break;
                        }
                    }
                    Ok(())
                },
            )?;
            if !fitted {
                if i == 0 {
                    return Err(LogError::Config(format!(
                        "the cleaner's dedupe buffer ({} bytes, {} keys) cannot hold the keys of \
                         one segment ({}); raise it",
                        self.limits.dedupe_buffer_bytes,
                        self.limits.dedupe_buffer_bytes / records::MAP_ENTRY_BYTES,
                        s.path.display()
                    )));
                }
                // The keys mapped from this segment are later than everything before it:
                // they may still decide what goes there.
                return Ok((end, end + 1));
            }
            end = plan.first_dirty + i + 1;
        }
        Ok((end, end))
    }

    /// Step 3: rewrites `sealed[..end]`, group by group.
    fn rewrite(&mut self, end: usize, replacements: &mut Vec<Replacement>) -> Result<()> {
        let sealed = &self.view.sealed[..end];
        let mut i = 0;
        while i < sealed.len() {
            let mut j = i + 1;
            let mut bytes = sealed[i].size;
            while j < sealed.len()
                && bytes + sealed[j].size <= self.view.config.segment_bytes
                && sealed[j].end - sealed[i].base <= i64::from(u32::MAX)
            {
                bytes += sealed[j].size;
                j += 1;
            }
            if let Some(r) = self.rewrite_group(&sealed[i..j])? {
                self.outcome.bytes_before += bytes;
                replacements.push(r);
            }
            i = j;
        }
        Ok(())
    }

    /// Rewrites one group into `.cleaned` files; `None` if nothing in it changes.
    fn rewrite_group(&mut self, group: &[SealedRef]) -> Result<Option<Replacement>> {
        let (base, end) = (group[0].base, group[group.len() - 1].end);
        let dir = &self.view.dir;
        let paths = swap::temp_paths(dir, base, end, Stage::Cleaned);
        let mut output = match Segment::create_at(base, paths.clone(), self.view.faults.clone()) {
            Ok(s) => s,
            Err(e) => {
                for p in &paths {
                    let _ = swap::remove(&self.view.faults, p);
                }
                return Err(e);
            }
        };
        let result = self.fill_group(group, &mut output);
        let changed = match result {
            Ok(changed) => changed,
            Err(e) => {
                drop(output);
                for p in &paths {
                    let _ = swap::remove(&self.view.faults, p);
                }
                return Err(e);
            }
        };
        let inputs = group
            .iter()
            .map(|s| (s.base, Arc::clone(&s.file)))
            .collect();
        // The oldest segment holds the log start, which a compaction never moves (a consumer
        // at an offset whose records all went reads on from the next one): it stays, empty.
        let holds_log_start = base == self.view.sealed[0].base;
        if !changed || (output.is_empty() && !holds_log_start) {
            drop(output);
            for p in &paths {
                swap::remove(&self.view.faults, p)?;
            }
            return Ok(changed.then_some(Replacement {
                base,
                end,
                inputs,
                output: None,
            }));
        }
        output.prepare_seal()?;
        output.finish_seal();
        output.next_offset = end;
        Ok(Some(Replacement {
            base,
            end,
            inputs,
            output: Some(output),
        }))
    }

    /// Filters every batch of `group` into `output`; whether anything changed.
    fn fill_group(&mut self, group: &[SealedRef], output: &mut Segment) -> Result<bool> {
        let config = self.view.config;
        let chunk = self.limits.io_buffer_bytes;
        let mut out: Vec<u8> = Vec::with_capacity(chunk);
        let mut changed = false;
        let Pass {
            map,
            producers,
            io,
            read_buf,
            plain,
            records,
            keep,
            opaque_seen,
            next_horizon_ms,
            outcome,
            now_ms,
            limits,
            ..
        } = self;
        let codecs = limits.codecs;
        for s in group {
            for_each_batch(s, read_buf, chunk, io, |view, io| {
                let body = if records::is_opaque(view, codecs) {
                    None
                } else {
                    match records::section(view, codecs, plain) {
                        Ok(body) => Some(body),
                        Err(e) => {
                            tracing::warn!(
                                segment = %s.path.display(),
                                base_offset = view.base_offset(),
                                error = %e,
                                "log cleaner: a compressed batch does not decompress; kept whole"
                            );
                            None
                        }
                    }
                };
                if let Some(body) = body {
                    parse(view, body, records, &s.path)?;
                    let filter = Filter {
                        now_ms: *now_ms,
                        delete_retention_ms: config.delete_retention_ms,
                        tombstones_removable: !*opaque_seen,
                        keep_if_emptied: producers
                            .may_be_last(view.producer_id(), view.base_offset()),
                    };
                    let f = records::filter_batch(
                        view, body, records, map, &filter, codecs, keep, &mut out,
                    );
                    changed |= !f.unchanged;
                    outcome.records_removed += f.records_removed;
                    outcome.tombstones_removed += f.tombstones_removed;
                    outcome.batches_emptied += u64::from(f.emptied);
                    if let Some(h) = f.horizon_ms {
                        *next_horizon_ms = Some(next_horizon_ms.map_or(h, |n| n.min(h)));
                    }
                } else {
                    *opaque_seen |= !view.is_control();
                    out.extend_from_slice(view.bytes());
                }
                if out.len() >= chunk {
                    output.append_stored(&out, &config)?;
                    io.account(0, out.len() as u64);
                    out.clear();
                }
                Ok(())
            })?;
        }
        if !out.is_empty() {
            output.append_stored(&out, &config)?;
            io.account(0, out.len() as u64);
        }
        Ok(changed)
    }
}

fn parse(
    view: &BatchView<'_>,
    body: &[u8],
    records: &mut Vec<RecordAt>,
    path: &Path,
) -> Result<()> {
    records::parse_records(view, body, records).map_err(|detail| {
        LogError::io(
            "parse records",
            path,
            std::io::Error::new(std::io::ErrorKind::InvalidData, detail),
        )
    })
}
