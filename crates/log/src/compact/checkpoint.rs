//! The cleaner checkpoint: `cleaner-checkpoint` in the partition directory, one line
//! `<first dirty offset>\n`, the offset up to which the last pass compacted the log (Kafka
//! keeps the same number in one `cleaner-offset-checkpoint` file per data directory).
//!
//! It is only a hint for the dirty ratio and for where the next key map starts: everything
//! before it holds at most one record per key (readable by the cleaner). Written after a pass
//! is wholly durable (tmp file, fdatasync, rename, directory fsync), so it never claims more
//! than was compacted; a lost or unreadable one reads as 0 (the whole log is dirty, and the
//! next pass does more work, nothing worse). A stray `cleaner-checkpoint.tmp` is deleted by
//! recovery like every `*.tmp`.

use std::fs::{self, OpenOptions};
use std::io::IoSlice;
use std::os::unix::fs::FileExt;
use std::path::Path;

use crate::error::{LogError, Result};
use crate::faults::{Allowance, DiskFaults};
use crate::recovery::sync_dir;

/// Name of the checkpoint file in a partition directory.
pub const CLEANER_CHECKPOINT_FILE: &str = "cleaner-checkpoint";

/// The checkpointed first dirty offset, 0 if there is none (or it cannot be read).
pub(crate) fn read(dir: &Path) -> i64 {
    let path = dir.join(CLEANER_CHECKPOINT_FILE);
    match fs::read_to_string(&path) {
        Ok(text) => match text.strip_suffix('\n').and_then(|t| t.parse::<i64>().ok()) {
            Some(offset) if offset >= 0 => offset,
            _ => {
                tracing::warn!(path = %path.display(), "unreadable cleaner checkpoint; the whole log counts as dirty");
                0
            }
        },
        Err(_) => 0,
    }
}

/// Replaces the checkpoint with `offset`, durably.
pub(crate) fn write(dir: &Path, offset: i64, faults: &DiskFaults) -> Result<()> {
    let path = dir.join(CLEANER_CHECKPOINT_FILE);
    let tmp = dir.join(format!("{CLEANER_CHECKPOINT_FILE}.tmp"));
    let text = format!("{offset}\n");
    faults
        .create(&tmp)
        .map_err(|e| LogError::write("create cleaner checkpoint", &tmp, e))?;
    let file = OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .open(&tmp)
        .map_err(|e| LogError::write("create cleaner checkpoint", &tmp, e))?;
    match faults.write(&tmp, 0, &[IoSlice::new(text.as_bytes())]) {
        Allowance::All => file.write_all_at(text.as_bytes(), 0),
        Allowance::Partial { bytes, error } => file
            .write_all_at(&text.as_bytes()[..bytes as usize], 0)
            .and(Err(error)),
    }
    .map_err(|e| LogError::write("write cleaner checkpoint", &tmp, e))?;
    faults
        .sync(&tmp, || file.sync_data())
        .map_err(|e| LogError::io("fdatasync cleaner checkpoint", &tmp, e))?;
    faults
        .rename(&tmp, &path, || fs::rename(&tmp, &path))
        .map_err(|e| LogError::io("rename cleaner checkpoint", &tmp, e))?;
    sync_dir(dir, faults)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_and_a_bad_file_reads_as_zero() {
        let dir = tempfile::tempdir().unwrap();
        assert_eq!(read(dir.path()), 0);
        write(dir.path(), 1234, &DiskFaults::none()).unwrap();
        assert_eq!(read(dir.path()), 1234);
        fs::write(dir.path().join(CLEANER_CHECKPOINT_FILE), b"12x\n").unwrap();
        assert_eq!(read(dir.path()), 0);
    }
}
