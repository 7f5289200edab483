//! The files of a compaction, the order in which they change, and how recovery finishes or
//! undoes every state a crash can leave.
//!
//! A pass replaces each *group* of adjacent sealed segments `[B, E)` (B: the first one's base
//! offset, E: the base offset of the segment after the group) by one cleaned segment named `B`.
//! Its files go through three names:
//!
//! | name                              | meaning                                             |
//! |-----------------------------------|-----------------------------------------------------|
//! | `B-E.log.cleaned` (and `.index.cleaned`, `.timeindex.cleaned`) | being written; the old segments are the log |
//! | `B-E.log.swap` (and index swaps)  | committed: the cleaned segment replaces `[B, E)`   |
//! | `B.log`, `B.index`, `B.timeindex` | in place, like any segment                          |
//!
//! (B and E are 20-digit offsets, as in every segment file name.) The order, and why:
//! 1. Write the `.cleaned` files outside the partition lock, fdatasync the data, fsync both
//!    indexes, fsync the directory: the files and their names are durable before any rename
//!    refers to them (a name that can vanish cannot carry a decision).
//! 2. Under the lock, check that every old segment is still there (retention and DeleteRecords
//!    may have removed some meanwhile; then the pass is abandoned and nothing is renamed).
//! 3. Rename `.index.cleaned` and `.timeindex.cleaned` to `.swap`, then `.log.cleaned` to
//!    `.log.swap`, and fsync the directory. **The durable `B-E.log.swap` is the commit point.**
//! 4. Swap the segments in memory (readers that hold an old segment's file keep reading it).
//! 5. Unlink the old segments of `(B, E)` (every one but `B`, whose names the renames below
//!    take over; all of them for a group from which nothing survived), fsync the directory.
//! 6. Rename the index swaps to `B.index`, `B.timeindex`, then `B-E.log.swap` to `B.log`, and
//!    fsync the directory.
//!
//! Recovery (before the segments are listed), for each group `B-E` with a leftover file:
//!
//! | found                                                  | meaning                       | action |
//! |--------------------------------------------------------|-------------------------------|--------|
//! | `B-E.log.cleaned` (any other `B-E.*` too)             | crash before the commit point | roll back: delete every `B-E.*`; the old segments are intact |
//! | only `.cleaned` index files, no `B-E.*.swap`           | crash while writing (step 1) | roll back: delete them |
//! | `B-E.log.swap`                                         | committed, not in place       | complete: delete old segments in `(B, E)` and leftover `.cleaned` files; move the index swaps to `B.index`/`B.timeindex` (with no index swap, delete `B`'s old index files: they are rebuilt by a scan); rename `B-E.log.swap` to `B.log` |
//! | index swaps, neither `B-E.log.cleaned` nor `B-E.log.swap` | committed, `B.log` already in place | complete: delete old segments in `(B, E)`, move the index swaps over `B.index`/`B.timeindex` |
//!
//! The third row cannot be mistaken for the first: `B-E.log.cleaned` is durable before any
//! rename (step 1), so its absence with a swap present means the log was renamed, and a
//! `.log.swap` exists only after `.log.cleaned` was renamed. Old segments are unlinked only
//! after the commit point is durable and the next step's renames only after the unlinks are,
//! so a completed group never meets an old segment of its range again. Index files are derived
//! data: a missing or stale one is rebuilt by the ordinary recovery scan.

use std::collections::{BTreeMap, VecDeque};
use std::fs::{self, File};
use std::io;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::error::{LogError, Result};
use crate::faults::DiskFaults;
use crate::recovery::{RecoveryAction, RecoveryReport, sync_dir};
use crate::segment::{self, Segment};

/// The three files of a segment, in the order a swap renames them (the log last).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum Ext {
    Index,
    TimeIndex,
    Log,
}

impl Ext {
    pub const RENAME_ORDER: [Ext; 3] = [Ext::Index, Ext::TimeIndex, Ext::Log];

    fn as_str(self) -> &'static str {
        match self {
            Ext::Log => "log",
            Ext::Index => "index",
            Ext::TimeIndex => "timeindex",
        }
    }

    /// Position in the `[log, index, timeindex]` arrays segments take.
    fn slot(self) -> usize {
        match self {
            Ext::Log => 0,
            Ext::Index => 1,
            Ext::TimeIndex => 2,
        }
    }
}

/// Which temporary name a file has.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum Stage {
    Cleaned,
    Swap,
}

impl Stage {
    fn as_str(self) -> &'static str {
        match self {
            Stage::Cleaned => "cleaned",
            Stage::Swap => "swap",
        }
    }
}

/// Where a test may stop a pass as if the process died there (each is a row of the table in
/// the module doc). Not for production use.
#[doc(hidden)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CrashPoint {
    /// Step 1 done: `.cleaned` files durable.
    AfterCleaned,
    /// Step 3 half done: the first group's index files renamed to `.swap`, its log not.
    AfterIndexSwaps,
    /// Step 3 done: committed.
    AfterCommit,
    /// Step 5 done: old segments unlinked.
    AfterOldDeleted,
    /// Step 6 half done: the first group's indexes in place, its log still `.swap`.
    AfterIndexesInPlace,
}

pub(crate) fn temp_path(dir: &Path, base: i64, end: i64, ext: Ext, stage: Stage) -> PathBuf {
    dir.join(format!(
        "{base:020}-{end:020}.{}.{}",
        ext.as_str(),
        stage.as_str()
    ))
}

/// `[log, index, timeindex]` paths under a temporary name.
pub(crate) fn temp_paths(dir: &Path, base: i64, end: i64, stage: Stage) -> [PathBuf; 3] {
    [Ext::Log, Ext::Index, Ext::TimeIndex].map(|e| temp_path(dir, base, end, e, stage))
}

pub(crate) fn final_path(dir: &Path, base: i64, ext: Ext) -> PathBuf {
    dir.join(match ext {
        Ext::Log => segment::log_file_name(base),
        Ext::Index => segment::index_file_name(base),
        Ext::TimeIndex => segment::time_index_file_name(base),
    })
}

fn parse_temp(name: &str) -> Option<(i64, i64, Ext, Stage)> {
    let (offsets, rest) = name.split_at_checked(41)?;
    let (base, end) = offsets.split_once('-')?;
    let digits = |s: &str| s.len() == 20 && s.bytes().all(|b| b.is_ascii_digit());
    if !digits(base) || !digits(end) {
        return None;
    }
    let (ext, stage) = rest.strip_prefix('.')?.split_once('.')?;
    let ext = match ext {
        "log" => Ext::Log,
        "index" => Ext::Index,
        "timeindex" => Ext::TimeIndex,
        _ => return None,
    };
    let stage = match stage {
        "cleaned" => Stage::Cleaned,
        "swap" => Stage::Swap,
        _ => return None,
    };
    Some((base.parse().ok()?, end.parse().ok()?, ext, stage))
}

/// Unlinks `path` through the fault seam; a missing file is fine.
pub(crate) fn remove(faults: &DiskFaults, path: &Path) -> Result<()> {
    match faults.remove(path, || fs::remove_file(path)) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(LogError::io("delete compaction file", path, e)),
    }
}

fn rename(faults: &DiskFaults, from: &Path, to: &Path) -> Result<()> {
    faults
        .rename(from, to, || fs::rename(from, to))
        .map_err(|e| LogError::io("rename compaction file", from, e))
}

/// One group's cleaned segment, ready to swap in.
#[derive(Debug)]
pub(crate) struct Replacement {
    pub base: i64,
    pub end: i64,
    /// The segments it replaces, oldest first: base offset and file (the identity the swap
    /// checks them by).
    pub inputs: Vec<(i64, Arc<File>)>,
    /// `None`: no record survived; the old segments are only deleted.
    pub output: Option<Segment>,
}

/// What [`install`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Installed {
    Done,
    /// Some old segment was no longer there: nothing was renamed.
    Abandoned,
    /// Stopped at a test's crash point.
    Crashed,
}

/// Steps 2 to 6 of the module doc, under the partition lock (`segments` is the partition's
/// list). On `Err` the caller fails the partition: the files are in one of the states
/// recovery handles, and `segments` matches the files that hold data (the old ones until the
/// commit point, the new ones after it).
pub(crate) fn install(
    dir: &Path,
    faults: &DiskFaults,
    segments: &mut VecDeque<Segment>,
    replacements: &mut [Replacement],
    crash: Option<CrashPoint>,
) -> Result<Installed> {
    // 2. Every old segment still there, in order, followed by a later segment.
    let mut starts = Vec::with_capacity(replacements.len());
    for r in replacements.iter() {
        let Some(at) = segments.iter().position(|s| s.base_offset == r.base) else {
            return Ok(Installed::Abandoned);
        };
        let intact = at + r.inputs.len() < segments.len()
            && r.inputs.iter().enumerate().all(|(i, (base, file))| {
                let s = &segments[at + i];
                s.base_offset == *base && Arc::ptr_eq(&s.file, file)
            });
        if !intact {
            return Ok(Installed::Abandoned);
        }
        starts.push(at);
    }
    // 3. Commit.
    let mut first = true;
    for r in replacements.iter_mut() {
        let Some(output) = &mut r.output else {
            continue;
        };
        let mut names = temp_paths(dir, r.base, r.end, Stage::Cleaned);
        for ext in Ext::RENAME_ORDER {
            if ext == Ext::Log && first && crash == Some(CrashPoint::AfterIndexSwaps) {
                return Ok(Installed::Crashed);
            }
            let to = temp_path(dir, r.base, r.end, ext, Stage::Swap);
            rename(faults, &names[ext.slot()], &to)?;
            names[ext.slot()] = to;
            output.renamed(names.clone());
        }
        first = false;
    }
    sync_dir(dir, faults)?;
    if crash == Some(CrashPoint::AfterCommit) {
        return Ok(Installed::Crashed);
    }
    let written: Vec<bool> = replacements.iter().map(|r| r.output.is_some()).collect();
    // 4. In memory. Groups are in offset order and do not overlap, so replacing them from the
    // last one keeps the earlier positions valid.
    for (r, &at) in replacements.iter_mut().zip(&starts).rev() {
        let old: Vec<Segment> = segments.drain(at..at + r.inputs.len()).collect();
        if let Some(output) = r.output.take() {
            segments.insert(at, output);
        }
        // The old segments' files close when the last reader holding one lets go.
        drop(old);
        r.output = None;
    }
    // 5. Unlink the old segments.
    for (r, &written) in replacements.iter().zip(&written) {
        let skip = usize::from(written);
        for (base, _) in &r.inputs[skip..] {
            for ext in Ext::RENAME_ORDER {
                remove(faults, &final_path(dir, *base, ext))?;
            }
        }
    }
    sync_dir(dir, faults)?;
    if crash == Some(CrashPoint::AfterOldDeleted) {
        return Ok(Installed::Crashed);
    }
    // 6. Into place.
    let mut first = true;
    for (n, r) in replacements.iter().enumerate() {
        if !written[n] {
            continue;
        }
        let at = segments
            .iter()
            .position(|s| s.base_offset == r.base)
            .expect("installed above");
        let mut names = temp_paths(dir, r.base, r.end, Stage::Swap);
        for ext in Ext::RENAME_ORDER {
            if ext == Ext::Log && first && crash == Some(CrashPoint::AfterIndexesInPlace) {
                return Ok(Installed::Crashed);
            }
            let to = final_path(dir, r.base, ext);
            rename(faults, &names[ext.slot()], &to)?;
            names[ext.slot()] = to;
            segments[at].renamed(names.clone());
        }
        first = false;
    }
    sync_dir(dir, faults)?;
    Ok(Installed::Done)
}

/// Recovery of compaction leftovers in `dir` (the table in the module doc). Runs before the
/// segments are listed, so that what they see is a plain segmented log.
pub(crate) fn recover(dir: &Path, faults: &DiskFaults, report: &mut RecoveryReport) -> Result<()> {
    let mut groups: BTreeMap<(i64, i64), Vec<(Ext, Stage)>> = BTreeMap::new();
    let mut bases = Vec::new();
    for entry in fs::read_dir(dir).map_err(|e| LogError::io("list partition dir", dir, e))? {
        let entry = entry.map_err(|e| LogError::io("list partition dir", dir, e))?;
        let name = entry.file_name();
        let Some(name) = name.to_str() else { continue };
        if let Some((base, end, ext, stage)) = parse_temp(name) {
            groups.entry((base, end)).or_default().push((ext, stage));
        } else if let Some(base) = [".log", ".index", ".timeindex"]
            .iter()
            .find_map(|suffix| segment_base(name, suffix))
        {
            bases.push(base);
        }
    }
    if groups.is_empty() {
        return Ok(());
    }
    bases.sort_unstable();
    bases.dedup();
    for ((base, end), files) in groups {
        let has = |ext: Ext, stage: Stage| files.contains(&(ext, stage));
        let any_swap = files.iter().any(|(_, s)| *s == Stage::Swap);
        if has(Ext::Log, Stage::Cleaned) || !any_swap {
            for (ext, stage) in &files {
                remove(faults, &temp_path(dir, base, end, *ext, *stage))?;
            }
            report
                .actions
                .push(RecoveryAction::CompactionRolledBack { base, end });
            continue;
        }
        let mut deleted = 0;
        for &old in bases.iter().filter(|&&b| b > base && b < end) {
            deleted += 1;
            for ext in Ext::RENAME_ORDER {
                remove(faults, &final_path(dir, old, ext))?;
            }
        }
        for ext in Ext::RENAME_ORDER {
            if has(ext, Stage::Cleaned) {
                remove(faults, &temp_path(dir, base, end, ext, Stage::Cleaned))?;
            }
        }
        // Unlinks first, durable before any rename makes the cleaned segment visible.
        sync_dir(dir, faults)?;
        for ext in [Ext::Index, Ext::TimeIndex] {
            if has(ext, Stage::Swap) {
                rename(
                    faults,
                    &temp_path(dir, base, end, ext, Stage::Swap),
                    &final_path(dir, base, ext),
                )?;
            } else if has(Ext::Log, Stage::Swap) {
                // The old segment's index, or the cleaned one already renamed: either way the
                // scan rebuilds it.
                remove(faults, &final_path(dir, base, ext))?;
            }
        }
        if has(Ext::Log, Stage::Swap) {
            rename(
                faults,
                &temp_path(dir, base, end, Ext::Log, Stage::Swap),
                &final_path(dir, base, Ext::Log),
            )?;
        }
        report.actions.push(RecoveryAction::CompactionCompleted {
            base,
            end,
            old_segments_deleted: deleted,
        });
    }
    sync_dir(dir, faults)
}

fn segment_base(name: &str, suffix: &str) -> Option<i64> {
    let digits = name.strip_suffix(suffix)?;
    if digits.len() != 20 || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    digits.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn temporary_names_round_trip() {
        let dir = Path::new("/x");
        for ext in Ext::RENAME_ORDER {
            for stage in [Stage::Cleaned, Stage::Swap] {
                let p = temp_path(dir, 7, 1234, ext, stage);
                let name = p.file_name().unwrap().to_str().unwrap();
                assert_eq!(parse_temp(name), Some((7, 1234, ext, stage)), "{name}");
            }
        }
        assert_eq!(parse_temp("00000000000000000007.log"), None);
        assert_eq!(parse_temp("00000000000000000007.log.swap"), None);
        assert_eq!(parse_temp("log-start.tmp"), None);
    }
}
