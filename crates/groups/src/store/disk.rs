//! The log file, touched only by the store's round (`round.rs`): appending a round's frames
//! with one fdatasync, and compaction (rewrite the live state into a tmp file, fdatasync, rename, fsync the directory).
//!
//! A full disk (ENOSPC, EDQUOT) during a round's write fails that round only: whatever part
//! of its frames reached the file is cut off again (if the cut fails too, it is retried before
//! the next write), the round's writes resolve to [`StoreError::NoSpace`], and the next round
//! writes at the same place. A failed fdatasync is fatal, whatever its errno (see the module doc
//! of `mod.rs`).

use std::fs::{self, File, OpenOptions};
use std::io::{self, IoSlice};
use std::os::unix::fs::FileExt;
use std::path::Path;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

use sluice_log::{Allowance, CommitStats, DataDirSpace, DiskFaults, is_no_space};
use sluice_storage::{FileChange, MetaJournal, StorageError};

use super::recovery::Live;
use super::{StoreError, io_error, sync_dir};

#[derive(Debug)]
pub(super) struct Disk {
    pub(super) dir: PathBuf,
    pub(super) path: PathBuf,
    pub(super) tmp_path: PathBuf,
    /// Open for writing, positioned at its end.
    pub(super) file: File,
    /// Bytes of whole frames in the file; the next round writes here.
    pub(super) file_bytes: u64,
    /// The file may hold bytes past `file_bytes` from a write that failed for want of space
    /// and could not be cut back; they are cut before the next write.
    pub(super) uncut_tail: bool,
    /// Told of every write that found no room and every round that was written.
    pub(super) space: DataDirSpace,
    /// Compact once `file_bytes` is past this.
    pub(super) compact_at_bytes: u64,
    pub(super) compact_min_bytes: u64,
    pub(super) live: Live,
    /// Where rounds and compactions are also recorded, with the file's relative path.
    pub(super) journal: Option<(std::sync::Arc<dyn MetaJournal>, String)>,
    /// Every write, truncation, creation, rename and sync goes through it.
    pub(super) faults: DiskFaults,
}

/// Writes `bytes` at `pos` of `file` (named `path`) through the fault seam: all of it, or the
/// prefix the seam allows before it fails the write.
fn write_at(
    faults: &DiskFaults,
    file: &File,
    path: &Path,
    bytes: &[u8],
    pos: u64,
) -> io::Result<()> {
    match faults.write(path, pos, &[IoSlice::new(bytes)]) {
        Allowance::All => file.write_all_at(bytes, pos),
        Allowance::Partial {
            bytes: landed,
            error,
        } => {
            file.write_all_at(&bytes[..landed as usize], pos)?;
            Err(error)
        }
    }
}

/// A compaction that did not happen.
#[derive(Debug)]
pub(super) struct CompactError {
    /// The store can no longer promise durability (the rename happened, the directory fsync
    /// failed). Otherwise the old file is intact and still in use.
    pub(super) fatal: bool,
    pub(super) error: StoreError,
}

/// A round that was not written.
#[derive(Debug)]
pub(super) struct RoundError {
    /// The store can no longer promise durability (a failed fdatasync, or a write error other
    /// than a full disk). Otherwise the disk was full: nothing of the round is in the file,
    /// and the store takes the next round as usual.
    pub(super) fatal: bool,
    pub(super) error: StoreError,
}

impl Disk {
    /// Writes one round's frames with one positioned write at the end of the whole frames,
    /// then fdatasyncs the file, counting it in `syncs` (the store's) and `stats` (the
    /// committer's). `room` (tests only) pretends the disk has room for that many bytes: the
    /// write stops there and fails with ENOSPC.
    pub(super) fn append(
        &mut self,
        bytes: &[u8],
        syncs: &AtomicU64,
        stats: &CommitStats,
        room: Option<usize>,
    ) -> Result<(), RoundError> {
        if bytes.is_empty() {
            // Only empty writes (barriers) this round: every earlier round is already durable.
            return Ok(());
        }
        self.cut_tail()?;
        let written = match room {
            Some(room) if room < bytes.len() => self
                .file
                .write_all_at(&bytes[..room], self.file_bytes)
                .and(Err(io::Error::from(io::ErrorKind::StorageFull))),
            _ => write_at(&self.faults, &self.file, &self.path, bytes, self.file_bytes),
        };
        if let Err(e) = written {
            if !is_no_space(&e) {
                return Err(RoundError {
                    fatal: true,
                    error: io_error("write", &self.path)(e),
                });
            }
            self.uncut_tail = true;
            if let Err(cut) = self.cut_tail() {
                tracing::warn!(path = %self.path.display(), error = %cut.error, "could not cut a failed group store write back; retrying before the next write");
            }
            return Err(self.no_space("write", &e));
        }
        syncs.fetch_add(1, Ordering::Relaxed);
        let started = Instant::now();
        let synced = self.faults.sync(&self.path, || self.file.sync_data());
        stats.record_fdatasync(started.elapsed().as_micros() as u64);
        synced.map_err(|e| {
            if is_no_space(&e) {
                self.space.no_space("fdatasync", &self.path, &e);
            }
            RoundError {
                fatal: true,
                error: io_error("fdatasync", &self.path)(e),
            }
        })?;
        stats.record_bytes_synced(bytes.len() as u64);
        self.file_bytes += bytes.len() as u64;
        self.space.wrote();
        Ok(())
    }

    /// Records a round's frames (written and fdatasynced) in the journal, if any, and blocks
    /// until the journal has made them durable. Runs on a sync thread, never in the runtime.
    pub(super) fn journal_round(&self, bytes: &[u8]) -> Result<(), StorageError> {
        let Some((journal, path)) = &self.journal else {
            return Ok(());
        };
        if bytes.is_empty() {
            return Ok(());
        }
        let (path, bytes) = (path.clone(), bytes.to_vec());
        journal.record(FileChange::Append { path, bytes })?;
        futures::executor::block_on(journal.durable())
    }

    /// Cuts off bytes past `file_bytes` left by a failed write, if any. A cut that fails for
    /// want of space fails the round like the write itself; any other failure is fatal.
    fn cut_tail(&mut self) -> Result<(), RoundError> {
        if !self.uncut_tail {
            return Ok(());
        }
        match self.file.set_len(self.file_bytes) {
            Ok(()) => {
                self.faults.truncated(&self.path, self.file_bytes);
                self.uncut_tail = false;
                Ok(())
            }
            Err(e) if is_no_space(&e) => Err(self.no_space("cut back", &e)),
            Err(e) => Err(RoundError {
                fatal: true,
                error: io_error("cut back", &self.path)(e),
            }),
        }
    }

    /// Reports a write that found no room and builds the round's error.
    fn no_space(&self, op: &'static str, e: &io::Error) -> RoundError {
        self.space.no_space(op, &self.path, e);
        RoundError {
            fatal: false,
            error: StoreError::no_space(op, &self.path, e),
        }
    }

    pub(super) fn wants_compaction(&self) -> bool {
        self.file_bytes > self.compact_at_bytes
    }

    /// Rewrites the file to the live state. `before_rename` runs once the new file is durable
    /// under its temporary name.
    pub(super) fn compact(&mut self, before_rename: &mut dyn FnMut()) -> Result<(), CompactError> {
        let mut live_frames = Vec::new();
        let result = self
            .live
            .encode(&mut live_frames)
            .map_err(io_error("encode the live state for", &self.tmp_path))
            .and_then(|()| self.write_tmp(&live_frames));
        let tmp_file = match result {
            Ok(file) => file,
            Err(error) => {
                if let StoreError::Io { op, source, .. } = &error
                    && is_no_space(source)
                {
                    self.space.no_space(op, &self.tmp_path, source);
                }
                self.remove_tmp();
                return Err(self.compact_failed_before_rename(error));
            }
        };
        before_rename();
        let renamed = self.faults.rename(&self.tmp_path, &self.path, || {
            fs::rename(&self.tmp_path, &self.path)
        });
        if let Err(e) = renamed {
            // rename is atomic: the directory still names the old file.
            self.remove_tmp();
            let error = io_error("rename over", &self.path)(e);
            return Err(self.compact_failed_before_rename(error));
        }
        // From here writes go to the new file; it must be the one the directory keeps.
        sync_dir(&self.dir, &self.faults).map_err(|error| CompactError { fatal: true, error })?;
        let before = self.file_bytes;
        self.file = tmp_file;
        self.file_bytes = live_frames.len() as u64;
        self.uncut_tail = false;
        self.compact_at_bytes = self.compact_min_bytes.max(2 * self.file_bytes);
        if let Some((journal, path)) = &self.journal {
            // Not waited for: the journal's old copy plus its appends holds the same state, and
            // the next round's `durable()` covers this one.
            let change = FileChange::Write {
                path: path.clone(),
                contents: live_frames,
            };
            if let Err(e) = journal.record(change) {
                tracing::warn!(path = %self.path.display(), error = %e, "could not record the compacted group store in the journal");
            }
        }
        tracing::info!(
            path = %self.path.display(),
            before_bytes = before,
            after_bytes = self.file_bytes,
            "compacted group store"
        );
        Ok(())
    }

    fn write_tmp(&self, frames: &[u8]) -> Result<File, StoreError> {
        let path = &self.tmp_path;
        let faults = &self.faults;
        let file = faults
            .create(path)
            .and_then(|()| {
                OpenOptions::new()
                    .write(true)
                    .create(true)
                    .truncate(true)
                    .open(path)
            })
            .map_err(io_error("create", path))?;
        // Opening cut a file left there (if any) to nothing.
        faults.truncated(path, 0);
        write_at(faults, &file, path, frames, 0).map_err(io_error("write", path))?;
        faults
            .sync(path, || file.sync_data())
            .map_err(io_error("fdatasync", path))?;
        Ok(file)
    }

    /// Removes what a failed compaction left under the temporary name, if anything (through
    /// the seam: after a simulated power loss it touches nothing). A failure is harmless: the
    /// next open deletes the file.
    fn remove_tmp(&self) {
        let path = &self.tmp_path;
        let _ = self.faults.remove(path, || fs::remove_file(path));
    }

    /// The old file is untouched: keep using it, try again once it has doubled.
    fn compact_failed_before_rename(&mut self, error: StoreError) -> CompactError {
        self.compact_at_bytes = self.compact_at_bytes.max(2 * self.file_bytes);
        CompactError {
            fatal: false,
            error,
        }
    }
}
