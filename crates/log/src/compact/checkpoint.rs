//! The cleaner checkpoint: `cleaner-checkpoint` in the partition directory, one line
//! `<first dirty offset> <next delete horizon ms, or ->\n`: the offset up to which the last
//! pass compacted the log (Kafka keeps the same number in one `cleaner-offset-checkpoint` file
//! per data directory), and the earliest delete horizon of a tombstone it kept, so that a
//! restart does not forget when tombstones are due for removal.
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

/// What a checkpoint holds.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Checkpoint {
    pub first_dirty: i64,
    pub next_horizon_ms: Option<i64>,
}

impl Checkpoint {
    fn parse(text: &str) -> Option<Checkpoint> {
        let line = text.strip_suffix('\n')?;
        let (offset, horizon) = match line.split_once(' ') {
            Some((o, h)) => (o, Some(h)),
            None => (line, None),
        };
        let first_dirty = offset.parse::<i64>().ok().filter(|o| *o >= 0)?;
        let next_horizon_ms = match horizon {
            None | Some("-") => None,
            Some(h) => Some(h.parse().ok()?),
        };
        Some(Checkpoint {
            first_dirty,
            next_horizon_ms,
        })
    }
}

/// The checkpoint (first dirty offset 0, no horizon if there is none or it cannot be read).
pub(crate) fn read(dir: &Path) -> Checkpoint {
    let path = dir.join(CLEANER_CHECKPOINT_FILE);
    match fs::read_to_string(&path) {
        Ok(text) => Checkpoint::parse(&text).unwrap_or_else(|| {
            tracing::warn!(path = %path.display(), "unreadable cleaner checkpoint; the whole log counts as dirty");
            Checkpoint::default()
        }),
        Err(_) => Checkpoint::default(),
    }
}

/// Replaces the checkpoint, durably.
pub(crate) fn write(dir: &Path, checkpoint: Checkpoint, faults: &DiskFaults) -> Result<()> {
    let path = dir.join(CLEANER_CHECKPOINT_FILE);
    let tmp = dir.join(format!("{CLEANER_CHECKPOINT_FILE}.tmp"));
    let text = match checkpoint.next_horizon_ms {
        Some(h) => format!("{} {h}\n", checkpoint.first_dirty),
        None => format!("{} -\n", checkpoint.first_dirty),
    };
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
        assert_eq!(read(dir.path()), Checkpoint::default());
        for c in [
            Checkpoint {
                first_dirty: 1234,
                next_horizon_ms: Some(99),
            },
            Checkpoint {
                first_dirty: 7,
                next_horizon_ms: None,
            },
        ] {
            write(dir.path(), c, &DiskFaults::none()).unwrap();
            assert_eq!(read(dir.path()), c);
        }
        let file = dir.path().join(CLEANER_CHECKPOINT_FILE);
        fs::write(&file, b"12\n").unwrap();
        assert_eq!(read(dir.path()).first_dirty, 12, "the offset alone is fine");
        fs::write(&file, b"12x\n").unwrap();
        assert_eq!(read(dir.path()), Checkpoint::default());
    }
}
