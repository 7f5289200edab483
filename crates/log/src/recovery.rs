//! Opening a partition directory: find segments, check them, repair what a crash can leave.
//!
//! What a crash can leave, and why only the newest segment can be torn: a segment is sealed
//! (data fdatasynced, indexes written and fsynced) before the next one is created, and the
//! directory is fsynced after every create, rename and delete. So every segment but the newest
//! was complete and durable before anything after it existed; only the newest can end in a batch
//! whose pages never reached the disk.
//!
//! Decision table, applied to each segment from oldest to newest ("last" = newest segment;
//! "clean" = the clean-shutdown marker was present):
//!
//! | found                                         | last segment                  | sealed segment            |
//! |-----------------------------------------------|-------------------------------|---------------------------|
//! | unclean shutdown                              | rebuild indexes by full scan  | tail scan from last entry |
//! | index file missing                            | rebuild by full scan          | rebuild by full scan      |
//! | index entries not increasing / past file end / last entry not at a batch of that offset (index ahead of the log) | rebuild by full scan | rebuild by full scan |
//! | valid batches after the last index entry (index behind) | entries added by the tail scan | entries added by the tail scan |
//! | fewer than 12 bytes after the last batch (torn header) | truncate there         | error: corrupt            |
//! | length runs past the end of file (torn body)  | truncate at that batch        | error: corrupt            |
//! | zeros to the end of file (zero-filled tail)   | truncate at the zeros         | error: corrupt            |
//! | whole batch with bad CRC/magic/count (bad CRC mid-segment) | truncate at that batch, dropping what follows | error: corrupt |
//! | batch whose base offset is not the expected next offset | truncate at that batch | past it: kept (a compaction's gap); before it: error: corrupt |
//! | empty segment                                 | keep as the active segment    | delete it, unless it is the oldest (it holds the log start; a compaction leaves one) |
//! | stray `*.tmp`, index without a segment        | deleted                       | deleted                   |
//! | `B-E.log.cleaned` (a compaction of `[B, E)` before its commit point; `compact/swap.rs`) | every `B-E.*` deleted, the old segments stay | same |
//! | only `.cleaned` index files of a compaction, no `.swap` | deleted | deleted |
//! | `B-E.log.swap` (a committed compaction)       | —                             | completed: old segments in `(B, E)` deleted, swaps renamed to `B.*` (a missing index rebuilt) |
//! | index swaps of a compaction, no `B-E.log.*` (`B.log` already in place) | — | completed: old segments in `(B, E)` deleted, index swaps renamed to `B.*` |
//! | segment wholly below the `log-start` checkpoint (DeleteRecords; see `start.rs`) | kept (the active segment is never deleted) | deleted |
//! | `log-start` checkpoint past the end of the log | lowered to the end, with a warning | —                       |
//! | `log-start` checkpoint not one offset and a newline | error: corrupt            | error: corrupt            |
//!
//! A compaction writes whole new sealed segments, durable before a rename commits them (see
//! `compact/swap.rs`), so the sealed-segment rules hold for them too; what they add is gaps
//! between batch offsets, empty batches kept for their producer, and possibly an empty oldest
//! segment.
//!
//! A failed append on a full disk is cut back at once (see `segment.rs`); only a crash between
//! the partial write and the cut can leave its bytes behind, and then they are a torn tail of
//! the newest segment like any other (never acknowledged, truncated by the rows above). A roll
//! that could not create the next segment's files removes what it created and fsyncs the
//! directory before the old segment takes another append, so the newest segment on disk is
//! always the one that takes appends. Recovery itself on a full disk: it only shrinks files,
//! except for index entries it would add to sealed segments; those it drops when there is no
//! room (indexes are derived data), so a full disk never stops an existing log from opening
//! (a new one needs room for its directory and first segment's files).
//!
//! Truncating the newest segment is safe because an append is acknowledged only once an
//! fdatasync covered it, and every later append starts after it: a torn or corrupt batch is
//! always past the durable prefix, and so is everything after it. A sealed segment was durable
//! when sealed, so damage there is media corruption, not a crash: opening fails with an error
//! naming the file and position rather than silently dropping acknowledged data.

use std::fs::{self, File, OpenOptions};
use std::path::{Path, PathBuf};

use crate::batch::BatchView;
use crate::config::LogConfig;
use crate::error::{LogError, Result};
use crate::faults::DiskFaults;
use crate::index::{self, OffsetEntry, SparseIndex, TimeEntry};
use crate::segment::{self, Scan, ScanEnd, Segment};

/// Name of the marker file written after a clean shutdown and removed on open.
pub const CLEAN_SHUTDOWN_MARKER: &str = "clean-shutdown";

/// What recovery did when a log was opened.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RecoveryReport {
    /// Whether the clean-shutdown marker was found.
    pub clean_shutdown: bool,
    /// Segments present after recovery.
    pub segments: usize,
    /// Every repair, in the order made.
    pub actions: Vec<RecoveryAction>,
}

/// One repair made during recovery.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RecoveryAction {
    /// The newest segment was cut at `at`, dropping `dropped_bytes` of torn or corrupt data.
    TruncatedTail {
        segment: PathBuf,
        at: u64,
        dropped_bytes: u64,
        reason: String,
    },
    /// A segment's indexes were rebuilt by scanning it.
    RebuiltIndexes { segment: PathBuf, reason: String },
    /// A sealed segment's indexes lacked entries for its tail; they were added.
    ExtendedIndexes {
        segment: PathBuf,
        entries_added: usize,
    },
    /// An empty segment that was not the newest was deleted.
    DeletedEmptySegment { segment: PathBuf },
    /// A leftover file (temporary file, index without a segment) was deleted.
    DeletedStrayFile { path: PathBuf },
    /// A segment wholly below the checkpointed log start (DeleteRecords) was deleted: a crash
    /// came between the checkpoint and the unlink.
    DeletedBelowLogStart { segment: PathBuf, log_start: i64 },
    /// The checkpointed log start was past the end of the log and was lowered to it.
    LoweredLogStart { from: i64, to: i64 },
    /// A compaction of the segments `[base, end)` had not reached its commit point: its files
    /// were deleted, the old segments stay (see `compact/swap.rs`).
    CompactionRolledBack { base: i64, end: i64 },
    /// A committed compaction of `[base, end)` was finished: old segments deleted, the cleaned
    /// segment renamed into place.
    CompactionCompleted {
        base: i64,
        end: i64,
        old_segments_deleted: usize,
    },
}

/// Segments of a recovered partition, oldest first, plus what was done.
#[derive(Debug)]
pub(crate) struct Recovered {
    pub segments: Vec<Segment>,
    /// The checkpointed log start (see `start.rs`), within the segments' range; 0 if none.
    pub start_floor: i64,
    pub report: RecoveryReport,
}

/// Opens (creating if needed) the partition directory `dir` and recovers its segments.
pub(crate) fn recover(dir: &Path, config: &LogConfig, faults: &DiskFaults) -> Result<Recovered> {
    let created = !dir.exists();
    fs::create_dir_all(dir).map_err(|e| LogError::write("create partition dir", dir, e))?;
    if created && let Some(parent) = dir.parent() {
        sync_dir(parent, faults)?;
    }
    let mut report = RecoveryReport::default();
    let marker = dir.join(CLEAN_SHUTDOWN_MARKER);
    report.clean_shutdown = marker.exists();
    // A compaction's leftovers first: what follows sees a plain segmented log.
    crate::compact::swap::recover(dir, faults, &mut report)?;

    let mut bases = Vec::new();
    let mut index_files = Vec::new();
    for entry in fs::read_dir(dir).map_err(|e| LogError::io("list partition dir", dir, e))? {
        let entry = entry.map_err(|e| LogError::io("list partition dir", dir, e))?;
        let name = entry.file_name();
        let Some(name) = name.to_str() else { continue };
        if let Some(base) = parse_base(name, ".log") {
            bases.push(base);
        } else if name.ends_with(".tmp") {
            remove(&entry.path(), &mut report)?;
        } else if let Some(base) =
            parse_base(name, ".index").or_else(|| parse_base(name, ".timeindex"))
        {
            index_files.push((base, entry.path()));
        }
    }
    bases.sort_unstable();
    for (base, path) in index_files {
        if bases.binary_search(&base).is_err() {
            remove(&path, &mut report)?;
        }
    }

    let mut segments: Vec<Segment> = Vec::with_capacity(bases.len().max(1));
    let count = bases.len();
    for (i, &base) in bases.iter().enumerate() {
        let is_last = i + 1 == count;
        let seg = recover_segment(
            dir,
            base,
            is_last,
            report.clean_shutdown,
            config,
            faults,
            &mut report,
        )?;
        // The oldest segment stays even when empty: it holds the log start (a compaction
        // that removed every record of the oldest segments keeps one, empty).
        if seg.is_empty() && !is_last && !segments.is_empty() {
            report.actions.push(RecoveryAction::DeletedEmptySegment {
                segment: seg.path.clone(),
            });
            delete_segment_files(dir, base)?;
            continue;
        }
        if let Some(prev) = segments.last_mut()
            && prev.next_offset != seg.base_offset
        {
            // A compaction leaves gaps: a sealed segment ends where the next one starts.
            let gap = prev.next_offset < seg.base_offset;
            if !(gap && config.cleanup_policy.compacts()) {
                tracing::warn!(
                    previous = %prev.path.display(),
                    next = %seg.path.display(),
                    "segments are not contiguous: offsets {}..{} are missing",
                    prev.next_offset,
                    seg.base_offset
                );
            }
            if gap {
                prev.next_offset = seg.base_offset;
            }
        }
        segments.push(seg);
    }
    if segments.is_empty() {
        segments.push(Segment::create(dir, 0, faults.clone())?);
    }
    let mut start_floor = crate::start::read(dir)?.unwrap_or(0);
    // A DeleteRecords checkpoints the new start before it deletes the segments below it.
    while segments.len() > 1 && segments[1].base_offset <= start_floor {
        let seg = segments.remove(0);
        report.actions.push(RecoveryAction::DeletedBelowLogStart {
            segment: seg.path.clone(),
            log_start: start_floor,
        });
        delete_segment_files(dir, seg.base_offset)?;
    }
    let end = segments.last().expect("at least one segment").next_offset;
    if start_floor > end {
        // Only durable offsets are checkpointed, so this takes a log that lost data after the
        // checkpoint (a restored backup, a hand-edited directory): serve what is there.
        report.actions.push(RecoveryAction::LoweredLogStart {
            from: start_floor,
            to: end,
        });
        start_floor = end;
    }
    // Everything now in the newest segment becomes readable, so make it durable first: the
    // process that wrote it may have died before its last fdatasync.
    let last = segments.last().expect("at least one segment");
    faults
        .sync(&last.path, || last.file.sync_all())
        .map_err(|e| LogError::io("fsync segment", &last.path, e))?;
    if report.clean_shutdown {
        fs::remove_file(&marker).map_err(|e| LogError::io("remove marker", &marker, e))?;
    }
    sync_dir(dir, faults)?;
    report.segments = segments.len();
    for action in &report.actions {
        tracing::warn!(partition = %dir.display(), ?action, "recovery");
    }
    Ok(Recovered {
        segments,
        start_floor,
        report,
    })
}

fn recover_segment(
    dir: &Path,
    base: i64,
    is_last: bool,
    clean: bool,
    config: &LogConfig,
    faults: &DiskFaults,
    report: &mut RecoveryReport,
) -> Result<Segment> {
    let path = dir.join(segment::log_file_name(base));
    let file = OpenOptions::new()
        .read(true)
        .write(true)
        .open(&path)
        .map_err(|e| LogError::io("open segment", &path, e))?;
    let file_len = file
        .metadata()
        .map_err(|e| LogError::io("stat segment", &path, e))?
        .len();
    let index_path = dir.join(segment::index_file_name(base));
    let time_path = dir.join(segment::time_index_file_name(base));

    // Decide between a tail scan from the last trusted index entry and a full rebuild.
    let mut rebuild_reason = None;
    let mut offsets = Vec::new();
    let mut times = Vec::new();
    if !clean && is_last {
        rebuild_reason = Some("unclean shutdown".to_owned());
    } else {
        match (
            index::read_entries::<OffsetEntry>(&index_path)?,
            index::read_entries::<TimeEntry>(&time_path)?,
        ) {
            (Some(o), Some(t)) => match check_indexes(&file, &path, base, file_len, &o, &t) {
                Ok(()) => (offsets, times) = (o, t),
                Err(reason) => rebuild_reason = Some(reason),
            },
            _ => rebuild_reason = Some("index file missing".to_owned()),
        }
    }
    if rebuild_reason.is_some() {
        offsets.clear();
        times.clear();
    }
    let start = offsets.last().map_or(0, |e| u64::from(e.position));
    let start_offset = base + offsets.last().map_or(0, |e| i64::from(e.relative_offset));
    let existing_entries = offsets.len();
    let existing_time_entries = times.len();
    let offset_index = SparseIndex::resume(
        index_path,
        offsets.len(),
        offsets.last().copied(),
        faults.clone(),
    )?;
    let time_index = SparseIndex::resume(
        time_path,
        times.len(),
        times.last().copied(),
        faults.clone(),
    )?;
    let prior_max_ts = time_index.last().map_or(i64::MIN, |e| e.timestamp);
    let scan_file = file
        .try_clone()
        .map_err(|e| LogError::io("dup segment", &path, e))?;
    let mut seg = Segment::from_recovered(
        base,
        path.clone(),
        file,
        0,
        start_offset,
        prior_max_ts,
        offset_index,
        time_index,
        faults.clone(),
    );
    // With trusted entries, the scan starts at the batch the last entry points at.
    let mut first = existing_entries > 0;
    let Scan {
        valid_end,
        next_offset,
        max_timestamp,
        end,
    } = Segment::scan(
        &scan_file,
        &path,
        start,
        file_len,
        start_offset,
        !is_last,
        |pos, view: &BatchView<'_>| {
            if first {
                // Already indexed: this is the batch the last entry points at.
                first = false;
                seg.note_indexed_batch(view.len() as u64, view.max_timestamp());
            } else {
                seg.note_batch(
                    pos,
                    view.base_offset(),
                    view.len() as u64,
                    view.max_timestamp(),
                    config,
                );
            }
        },
    )?;
    seg.size = valid_end;
    seg.next_offset = next_offset;
    seg.max_timestamp = seg.max_timestamp.max(max_timestamp);

    if end != ScanEnd::Clean {
        if !is_last {
            return Err(LogError::Corrupt {
                path,
                position: valid_end,
                source: match end {
                    ScanEnd::Corrupt(e) => e,
                    _ => crate::error::BatchError::Truncated {
                        available: (file_len - valid_end) as usize,
                        needed: None,
                    },
                },
            });
        }
        seg.file
            .set_len(valid_end)
            .map(|()| faults.truncated(&path, valid_end))
            .and_then(|()| faults.sync(&path, || seg.file.sync_all()))
            .map_err(|e| LogError::io("truncate segment", &path, e))?;
        report.actions.push(RecoveryAction::TruncatedTail {
            segment: path.clone(),
            at: valid_end,
            dropped_bytes: file_len - valid_end,
            reason: describe(&end),
        });
    }
    if let Some(reason) = rebuild_reason {
        if !(reason == "unclean shutdown" && file_len == 0) {
            report.actions.push(RecoveryAction::RebuiltIndexes {
                segment: path.clone(),
                reason,
            });
        }
    } else if seg.offset_index.len() > existing_entries && !is_last {
        report.actions.push(RecoveryAction::ExtendedIndexes {
            segment: path.clone(),
            entries_added: seg.offset_index.len() - existing_entries,
        });
    }
    if !is_last {
        // Sealed: the data was durable before; persist the indexes only if they changed.
        let changed = seg.offset_index.len() != existing_entries
            || seg.time_index.len() != existing_time_entries;
        seg.seal_indexes(changed)?;
    }
    Ok(seg)
}

/// Checks loaded index entries against the segment; `Err` says why they cannot be trusted.
fn check_indexes(
    file: &File,
    path: &Path,
    base: i64,
    file_len: u64,
    offsets: &[OffsetEntry],
    times: &[TimeEntry],
) -> std::result::Result<(), String> {
    for pair in offsets.windows(2) {
        if pair[1].relative_offset <= pair[0].relative_offset
            || pair[1].position <= pair[0].position
        {
            return Err("offset index entries are not increasing".to_owned());
        }
    }
    for pair in times.windows(2) {
        if pair[1].timestamp < pair[0].timestamp
            || pair[1].relative_offset < pair[0].relative_offset
        {
            return Err("time index entries are not increasing".to_owned());
        }
    }
    let last_rel = offsets.last().map_or(0, |e| e.relative_offset);
    if times.last().is_some_and(|t| t.relative_offset > last_rel) {
        return Err("time index is ahead of the offset index".to_owned());
    }
    if let Some(last) = offsets.last() {
        if u64::from(last.position) >= file_len {
            return Err(format!(
                "index ahead of the log: entry at byte {} but the segment has {file_len} bytes",
                last.position
            ));
        }
        let mut header = [0u8; crate::batch::HEADER_BYTES];
        let pos = u64::from(last.position);
        if pos + header.len() as u64 > file_len
            || std::os::unix::fs::FileExt::read_exact_at(file, &mut header, pos).is_err()
        {
            return Err(format!(
                "index entry at byte {pos} is past the last whole batch"
            ));
        }
        let found = sluice_batch::read_i64(&header, crate::batch::header::BASE_OFFSET);
        if found != base + i64::from(last.relative_offset) {
            return Err(format!(
                "index entry says offset {} is at byte {pos} of {}, the batch there starts at {found}",
                base + i64::from(last.relative_offset),
                path.display()
            ));
        }
    }
    Ok(())
}

fn describe(end: &ScanEnd) -> String {
    match end {
        ScanEnd::Clean => "clean".to_owned(),
        ScanEnd::TornHeader => "torn batch header".to_owned(),
        ScanEnd::TornBody => "torn batch body".to_owned(),
        ScanEnd::ZeroTail => "zero-filled tail".to_owned(),
        ScanEnd::Corrupt(e) => format!("corrupt batch: {e}"),
        ScanEnd::OffsetGap { expected, found } => {
            format!("batch has base offset {found}, expected {expected}")
        }
    }
}

fn parse_base(name: &str, suffix: &str) -> Option<i64> {
    let digits = name.strip_suffix(suffix)?;
    if digits.len() != 20 || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    digits.parse().ok()
}

fn remove(path: &Path, report: &mut RecoveryReport) -> Result<()> {
    fs::remove_file(path).map_err(|e| LogError::io("remove stray file", path, e))?;
    report.actions.push(RecoveryAction::DeletedStrayFile {
        path: path.to_owned(),
    });
    Ok(())
}

/// Deletes a segment's data and index files (missing index files are fine).
pub(crate) fn delete_segment_files(dir: &Path, base: i64) -> Result<()> {
    for name in [
        segment::log_file_name(base),
        segment::index_file_name(base),
        segment::time_index_file_name(base),
    ] {
        let path = dir.join(name);
        match fs::remove_file(&path) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(LogError::io("delete segment file", &path, e)),
        }
    }
    Ok(())
}

/// fsyncs a directory, making creates, renames and deletes in it durable.
pub(crate) fn sync_dir(dir: &Path, faults: &DiskFaults) -> Result<()> {
    faults
        .sync_dir(dir, || File::open(dir).and_then(|d| d.sync_all()))
        .map_err(|e| LogError::io("fsync directory", dir, e))
}
