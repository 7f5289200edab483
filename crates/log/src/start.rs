//! The log start checkpoint: the first offset a partition still serves, when DeleteRecords
//! moved it past the start of the oldest segment.
//!
//! Without DeleteRecords the log start is simply the base offset of the oldest segment, and
//! retention moves it by deleting whole segments. DeleteRecords may move it to any offset up to
//! the high watermark, usually into the middle of a segment that cannot be deleted yet, so the
//! offset is kept in a file of its own, `log-start` in the partition directory: one line,
//! `<offset>\n`.
//!
//! Durability: the new value is written to `log-start.tmp`, fdatasynced, renamed over
//! `log-start`, and the directory fsynced, all before DeleteRecords answers. A crash before the
//! rename leaves the old file (and recovery deletes the stray `.tmp`, as every `*.tmp`); after
//! the directory fsync the new value is the one recovery reads. So an answered DeleteRecords is
//! never undone, and a file that exists is always whole. Recovery then deletes any segment that
//! lies wholly below the checkpoint (a crash can come between the checkpoint and the unlinks).
//!
//! Why not Kafka's way (one `log-start-offset-checkpoint` file per data directory, written
//! every minute): a crash would bring deleted records back; one small file per partition,
//! written only by DeleteRecords, costs an fsync per call, and DeleteRecords is rare.

use std::fs::{self, File};
use std::io::{self, IoSlice, Write};
use std::path::{Path, PathBuf};

use crate::error::{LogError, Result};
use crate::faults::{Allowance, DiskFaults};
use crate::recovery::sync_dir;

/// Name of the checkpoint file in a partition directory.
pub const LOG_START_FILE: &str = "log-start";

fn paths(dir: &Path) -> (PathBuf, PathBuf) {
    (
        dir.join(LOG_START_FILE),
        dir.join(format!("{LOG_START_FILE}.tmp")),
    )
}

/// The checkpointed log start of the partition in `dir`, if one was written. A file that does
/// not hold one non-negative offset is an error naming it: the file is only ever replaced
/// whole, so damage there is not a crash's doing, and guessing could serve deleted records.
pub(crate) fn read(dir: &Path) -> Result<Option<i64>> {
    let (path, _) = paths(dir);
    let text = match fs::read_to_string(&path) {
        Ok(text) => text,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(LogError::io("read log start checkpoint", &path, e)),
    };
    match text.trim_end_matches('\n').parse::<i64>() {
        Ok(offset) if offset >= 0 && text.ends_with('\n') => Ok(Some(offset)),
        _ => Err(LogError::io(
            "parse log start checkpoint",
            &path,
            io::Error::new(
                io::ErrorKind::InvalidData,
                format!(
                    "expected one non-negative offset and a newline, found {:?}",
                    text.chars().take(40).collect::<String>()
                ),
            ),
        )),
    }
}

/// Makes `offset` the partition's durable log start (see the module doc for the order of
/// steps). On return the new value survives a crash; on error the old one is in place, or the
/// new one is (a rename that happened before a failed directory fsync).
pub(crate) fn write(dir: &Path, offset: i64, faults: &DiskFaults) -> Result<()> {
    let (path, tmp) = paths(dir);
    let body = format!("{offset}\n");
    faults
        .create(&tmp)
        .map_err(|e| LogError::write("create log start checkpoint", &tmp, e))?;
    let mut file =
        File::create(&tmp).map_err(|e| LogError::write("create log start checkpoint", &tmp, e))?;
    match faults.write(&tmp, 0, &[IoSlice::new(body.as_bytes())]) {
        Allowance::All => file
            .write_all(body.as_bytes())
            .map_err(|e| LogError::write("write log start checkpoint", &tmp, e))?,
        Allowance::Partial { bytes, error } => {
            let part = &body.as_bytes()[..(bytes as usize).min(body.len())];
            let _ = file.write_all(part);
            return Err(LogError::write("write log start checkpoint", &tmp, error));
        }
    }
    faults
        .sync(&tmp, || file.sync_data())
        .map_err(|e| LogError::io("fdatasync log start checkpoint", &tmp, e))?;
    drop(file);
    faults
        .rename(&tmp, &path, || fs::rename(&tmp, &path))
        .map_err(|e| LogError::io("rename log start checkpoint", &path, e))?;
    sync_dir(dir, faults)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_written_offset_reads_back_and_replaces_the_old_one() {
        let dir = tempfile::tempdir().unwrap();
        assert_eq!(read(dir.path()).unwrap(), None);
        write(dir.path(), 42, &DiskFaults::none()).unwrap();
        assert_eq!(read(dir.path()).unwrap(), Some(42));
        write(dir.path(), 1_000_000_007, &DiskFaults::none()).unwrap();
        assert_eq!(read(dir.path()).unwrap(), Some(1_000_000_007));
        assert!(!dir.path().join("log-start.tmp").exists());
    }

    #[test]
    fn a_damaged_checkpoint_is_an_error_naming_the_file() {
        let dir = tempfile::tempdir().unwrap();
        for bad in ["", "12", "-3\n", "x\n", "12\n13\n"] {
            fs::write(dir.path().join(LOG_START_FILE), bad).unwrap();
            let err = read(dir.path()).unwrap_err().to_string();
            assert!(err.contains("log-start"), "{bad:?}: {err}");
        }
    }

    #[test]
    fn an_answered_write_survives_power_loss_and_an_unanswered_one_leaves_a_whole_file() {
        for seed in 0..64 {
            let dir = tempfile::tempdir().unwrap();
            write(dir.path(), 7, &DiskFaults::none()).unwrap();
            let faults = DiskFaults::simulated(seed);
            write(dir.path(), 9, &faults).unwrap();
            faults.power_loss(seed).unwrap();
            assert_eq!(read(dir.path()).unwrap(), Some(9), "seed {seed}");

            // The directory fsync fails, then power is lost: the old or the new value, never a
            // torn one.
            let faults = DiskFaults::simulated(seed);
            faults.fail_sync_after(1, libc::EIO);
            assert!(write(dir.path(), 11, &faults).is_err());
            faults.power_loss(seed).unwrap();
            let _ = fs::remove_file(dir.path().join("log-start.tmp"));
            let got = read(dir.path()).unwrap();
            assert!(matches!(got, Some(9) | Some(11)), "seed {seed}: {got:?}");
        }
    }
}
