//! The log file, owned by the sync thread: appending a round's frames with one fdatasync, and
//! compaction (rewrite the live state into a tmp file, fdatasync, rename, fsync the directory).

use std::fs::{self, File, OpenOptions};
use std::io::Write;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};

use super::recovery::Live;
use super::{StoreError, io_error, sync_dir};

#[derive(Debug)]
pub(super) struct Disk {
    pub(super) dir: PathBuf,
    pub(super) path: PathBuf,
    pub(super) tmp_path: PathBuf,
    /// Open for writing, positioned at its end.
    pub(super) file: File,
    pub(super) file_bytes: u64,
    /// Compact once `file_bytes` is past this.
    pub(super) compact_at_bytes: u64,
    pub(super) compact_min_bytes: u64,
    pub(super) live: Live,
}

/// A compaction that did not happen.
#[derive(Debug)]
pub(super) struct CompactError {
    /// The store can no longer promise durability (the rename happened, the directory fsync
    /// failed). Otherwise the old file is intact and still in use.
    pub(super) fatal: bool,
    pub(super) error: StoreError,
}

impl Disk {
    /// Writes one round's frames with one `write`, then fdatasyncs the file.
    pub(super) fn append(&mut self, bytes: &[u8], syncs: &AtomicU64) -> Result<(), StoreError> {
        if bytes.is_empty() {
            // Only empty writes (barriers) this round: every earlier round is already durable.
            return Ok(());
        }
        self.file
            .write_all(bytes)
            .map_err(io_error("write", &self.path))?;
        syncs.fetch_add(1, Ordering::Relaxed);
        self.file
            .sync_data()
            .map_err(io_error("fdatasync", &self.path))?;
        self.file_bytes += bytes.len() as u64;
        Ok(())
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
                let _ = fs::remove_file(&self.tmp_path);
                return Err(self.compact_failed_before_rename(error));
            }
        };
        before_rename();
        if let Err(e) = fs::rename(&self.tmp_path, &self.path) {
            // rename is atomic: the directory still names the old file.
            let _ = fs::remove_file(&self.tmp_path);
            let error = io_error("rename over", &self.path)(e);
            return Err(self.compact_failed_before_rename(error));
        }
        // From here writes go to the new file; it must be the one the directory keeps.
        sync_dir(&self.dir).map_err(|error| CompactError { fatal: true, error })?;
        let before = self.file_bytes;
        self.file = tmp_file;
        self.file_bytes = live_frames.len() as u64;
        self.compact_at_bytes = self.compact_min_bytes.max(2 * self.file_bytes);
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
        let mut file = OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .open(path)
            .map_err(io_error("create", path))?;
        file.write_all(frames).map_err(io_error("write", path))?;
        file.sync_data().map_err(io_error("fdatasync", path))?;
        Ok(file)
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
