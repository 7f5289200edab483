//! Sparse per-segment indexes: offset → file position, and timestamp → offset.
//!
//! Both are derived data: recovery can always rebuild them by scanning the segment, so they are
//! never on the durability path of an append.
//!
//! A full disk: writing the in-memory tail out can fail with ENOSPC. [`SparseIndex::flush`] then
//! cuts the file back to the entries it held before (so no partly written entry stays) and keeps
//! the tail, so the next flush writes the same entries again. The segment makes room in the
//! tail *before* it writes an append's data (see `Segment::append`), so a full disk fails the
//! append, not the index; only an append with more entries than a whole tail can still find the
//! tail full mid-way, and then the entries are dropped with a warning: the index only gets
//! sparser, and every lookup stays correct (it walks forward from whatever entry it finds). Entries live in the index file, searched with
//! positioned reads (the page cache keeps hot ones in memory); the active segment also keeps its
//! newest [`TAIL_ENTRIES`] entries in a fixed in-memory tail, written out when it fills. Memory
//! therefore does not grow with segment size or segment count.
//!
//! File formats (big-endian, fixed-size entries, no header):
//! - `.index`: `relative offset: u32, position: u32` (8 bytes per entry)
//! - `.timeindex`: `max timestamp so far: i64, relative offset: u32` (12 bytes per entry)

use std::fs::{File, OpenOptions};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

use crate::error::{LogError, Result};
use crate::faults::{Allowance, DiskFaults};

/// A fixed-size index entry.
pub(crate) trait Entry: Copy + std::fmt::Debug {
    const BYTES: usize;
    /// The key the index is searched by.
    fn key(&self) -> i64;
    fn encode(&self, out: &mut [u8]);
    fn decode(buf: &[u8]) -> Self;
}

/// Offset index entry: the batch holding `relative_offset` starts at `position`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct OffsetEntry {
    pub relative_offset: u32,
    pub position: u32,
}

impl Entry for OffsetEntry {
    const BYTES: usize = 8;
    fn key(&self) -> i64 {
        i64::from(self.relative_offset)
    }
    fn encode(&self, out: &mut [u8]) {
        out[..4].copy_from_slice(&self.relative_offset.to_be_bytes());
        out[4..8].copy_from_slice(&self.position.to_be_bytes());
    }
    fn decode(buf: &[u8]) -> Self {
        OffsetEntry {
            relative_offset: u32::from_be_bytes(buf[..4].try_into().expect("4 bytes")),
            position: u32::from_be_bytes(buf[4..8].try_into().expect("4 bytes")),
        }
    }
}

/// Time index entry: every record before the batch at `relative_offset` has a timestamp below
/// `timestamp`... more precisely, `timestamp` is the largest timestamp seen up to and including
/// the batch that starts at `relative_offset`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct TimeEntry {
    pub timestamp: i64,
    pub relative_offset: u32,
}

impl Entry for TimeEntry {
    const BYTES: usize = 12;
    fn key(&self) -> i64 {
        self.timestamp
    }
    fn encode(&self, out: &mut [u8]) {
        out[..8].copy_from_slice(&self.timestamp.to_be_bytes());
        out[8..12].copy_from_slice(&self.relative_offset.to_be_bytes());
    }
    fn decode(buf: &[u8]) -> Self {
        TimeEntry {
            timestamp: i64::from_be_bytes(buf[..8].try_into().expect("8 bytes")),
            relative_offset: u32::from_be_bytes(buf[8..12].try_into().expect("4 bytes")),
        }
    }
}

/// Entries an active index holds in memory before writing them to its file. Fixed, so an
/// active index costs the same small amount of memory however large its segment grows
/// (256 × 8 B + 256 × 16 B = 6 KiB for the pair), and the append path never allocates.
pub(crate) const TAIL_ENTRIES: usize = 256;

/// A sparse index: entries in its file, plus (while the segment is active) a fixed-size tail of
/// the newest entries in memory, written to the file when it fills.
///
/// The file of an active index is written without fsync: it is derived data that recovery
/// rebuilds after an unclean shutdown. It is fsynced when the segment is sealed and at a clean
/// close, which is when recovery starts trusting it.
#[derive(Debug)]
pub(crate) struct SparseIndex<E: Entry> {
    path: PathBuf,
    /// Open while active; sealed indexes open their file per lookup to keep descriptors few.
    file: Option<File>,
    /// Entries in the file.
    flushed: usize,
    /// Newest entries, not yet in the file. Capacity [`TAIL_ENTRIES`], allocated once.
    tail: Vec<E>,
    /// The last entry, for cheap appends and recovery checks.
    last: Option<E>,
    faults: DiskFaults,
}

impl<E: Entry> SparseIndex<E> {
    /// A new, empty active index; creates (or empties) its file.
    pub fn create(path: PathBuf, faults: DiskFaults) -> Result<Self> {
        faults
            .create(&path)
            .map_err(|e| LogError::write("create index", &path, e))?;
        Self::resume(path, 0, None, faults)
    }

    /// Continues an active index whose file holds `valid` trusted entries (anything after them,
    /// such as a torn partial entry, is cut off), the last of which is `last`.
    pub fn resume(
        path: PathBuf,
        valid: usize,
        last: Option<E>,
        faults: DiskFaults,
    ) -> Result<Self> {
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(&path)
            .map_err(|e| LogError::write("open index", &path, e))?;
        let len = (valid * E::BYTES) as u64;
        let current = file
            .metadata()
            .map_err(|e| LogError::io("stat index", &path, e))?
            .len();
        if current != len {
            file.set_len(len)
                .map_err(|e| LogError::io("truncate index", &path, e))?;
            faults.truncated(&path, len);
        }
        Ok(SparseIndex {
            path,
            file: Some(file),
            flushed: valid,
            tail: Vec::with_capacity(TAIL_ENTRIES),
            last,
            faults,
        })
    }

    /// A sealed segment's index, complete in its file with `len` entries.
    #[cfg(test)]
    pub fn sealed(path: PathBuf, len: usize, last: Option<E>) -> Self {
        SparseIndex {
            path,
            file: None,
            flushed: len,
            tail: Vec::new(),
            last,
            faults: DiskFaults::none(),
        }
    }

    pub fn len(&self) -> usize {
        self.flushed + self.tail.len()
    }
    pub fn last(&self) -> Option<E> {
        self.last
    }

    /// Entries that can be pushed before the tail must be written to the file.
    pub fn tail_room(&self) -> usize {
        TAIL_ENTRIES - self.tail.len()
    }

    /// Adds an entry to the active index. Never allocates. If writing a full tail to the file
    /// fails, those entries are dropped with a warning: the index only gets sparser, and every
    /// lookup stays correct (a lookup walks forward from whatever entry it finds). Callers
    /// that must not lose entries make room first ([`SparseIndex::tail_room`], `flush`).
    pub fn push(&mut self, entry: E) {
        debug_assert!(self.file.is_some(), "push on a sealed index");
        if self.tail.len() == TAIL_ENTRIES
            && let Err(e) = self.flush()
        {
            tracing::warn!(error = %e, "dropping index entries");
            self.drop_tail();
        }
        self.tail.push(entry);
        self.last = Some(entry);
    }

    /// Forgets the unwritten tail; `last` becomes the last entry in the file.
    fn drop_tail(&mut self) {
        self.tail.clear();
        self.last = match self.flushed {
            0 => None,
            n => self.read_entry(n - 1).ok(),
        };
    }

    /// Writes the in-memory tail to the file (no fsync). On error the file is cut back to the
    /// entries it held before and the tail is kept, so a later flush writes the same entries
    /// at the same place.
    pub fn flush(&mut self) -> Result<()> {
        if self.tail.is_empty() {
            return Ok(());
        }
        let Some(file) = &self.file else {
            return Ok(());
        };
        // Encode through a fixed stack buffer: no allocation.
        let mut buf = [0u8; 16 * 64];
        let per_chunk = buf.len() / E::BYTES;
        let start = (self.flushed * E::BYTES) as u64;
        let mut at = start;
        for chunk in self.tail.chunks(per_chunk) {
            let n = chunk.len() * E::BYTES;
            for (slot, entry) in buf[..n].chunks_exact_mut(E::BYTES).zip(chunk) {
                entry.encode(slot);
            }
            let parts = [std::io::IoSlice::new(&buf[..n])];
            let written = match self.faults.write(&self.path, at, &parts) {
                Allowance::All => file.write_all_at(&buf[..n], at),
                Allowance::Partial { bytes, error } => file
                    .write_all_at(&buf[..bytes as usize], at)
                    .and(Err(error)),
            };
            if let Err(e) = written {
                // Best effort: a partial entry past `flushed` is harmless (lookups read only
                // `flushed` entries, recovery ignores a partial one), but a clean file is
                // easier to reason about.
                if file.set_len(start).is_ok() {
                    self.faults.truncated(&self.path, start);
                }
                return Err(LogError::write("write index", &self.path, e));
            }
            at += n as u64;
        }
        self.flushed += self.tail.len();
        self.tail.clear();
        Ok(())
    }

    /// Flushes the tail and fsyncs the file: after this, recovery may trust it. A failed
    /// flush is [`LogError::NoSpace`] on a full disk (nothing changed; try again later); a
    /// failed fsync is always [`LogError::Io`] and never to be retried.
    pub fn sync(&mut self) -> Result<()> {
        self.flush()?;
        if let Some(file) = &self.file {
            self.faults
                .sync(&self.path, || file.sync_data())
                .map_err(|e| LogError::io("fsync index", &self.path, e))?;
        }
        Ok(())
    }

    /// Syncs the index and turns it into a sealed one: no more entries, no open file.
    #[cfg(test)]
    pub fn seal(&mut self) -> Result<()> {
        self.sync()?;
        self.close();
        Ok(())
    }

    /// [`SparseIndex::seal`] for recovery, where a full disk must not stop a log from opening:
    /// if the tail cannot be written for want of space, it is dropped (with a warning) and the
    /// entries already in the file are sealed. Recovery extends the index again at a later
    /// open.
    pub fn seal_best_effort(&mut self) -> Result<()> {
        match self.flush() {
            Ok(()) => {}
            Err(e) if e.is_no_space() => {
                tracing::warn!(error = %e, entries_dropped = self.tail.len(), "sealing a recovered index without its newest entries");
                self.drop_tail();
            }
            Err(e) => return Err(e),
        }
        self.sync()?;
        self.close();
        Ok(())
    }

    /// The sealed index's file was renamed to `path` (a compaction's swap).
    pub fn renamed(&mut self, path: PathBuf) {
        debug_assert!(self.file.is_none(), "renaming an active index");
        self.path = path;
    }

    /// Turns an unchanged (or just synced) index into a sealed one without writing anything.
    pub fn close(&mut self) {
        debug_assert!(
            self.tail.is_empty(),
            "closing an index with unwritten entries"
        );
        self.file = None;
        self.tail = Vec::new();
    }

    /// Entry `i` of the file.
    fn read_entry(&self, i: usize) -> Result<E> {
        let opened;
        let file = match &self.file {
            Some(file) => file,
            None => {
                opened = File::open(&self.path)
                    .map_err(|e| LogError::io("open index", &self.path, e))?;
                &opened
            }
        };
        let mut buf = [0u8; 16];
        let buf = &mut buf[..E::BYTES];
        file.read_exact_at(buf, (i * E::BYTES) as u64)
            .map_err(|e| LogError::io("read index", &self.path, e))?;
        Ok(E::decode(buf))
    }

    /// The last entry whose key is at most `key`.
    pub fn floor(&self, key: i64) -> Result<Option<E>> {
        if self.tail.first().is_some_and(|e| e.key() <= key) {
            let idx = self.tail.partition_point(|e| e.key() <= key);
            return Ok(Some(self.tail[idx - 1]));
        }
        if self.flushed == 0 {
            return Ok(None);
        }
        let opened;
        let file = match &self.file {
            Some(file) => file,
            None => {
                opened = File::open(&self.path)
                    .map_err(|e| LogError::io("open index", &self.path, e))?;
                &opened
            }
        };
        let mut buf = [0u8; 16];
        let buf = &mut buf[..E::BYTES];
        let (mut lo, mut hi) = (0usize, self.flushed);
        // Invariant: entries [0, lo) have key <= `key`; entries [hi, flushed) have key > `key`.
        while lo < hi {
            let mid = lo + (hi - lo) / 2;
            file.read_exact_at(buf, (mid * E::BYTES) as u64)
                .map_err(|e| LogError::io("read index", &self.path, e))?;
            if E::decode(buf).key() <= key {
                lo = mid + 1;
            } else {
                hi = mid;
            }
        }
        if lo == 0 {
            return Ok(None);
        }
        file.read_exact_at(buf, ((lo - 1) * E::BYTES) as u64)
            .map_err(|e| LogError::io("read index", &self.path, e))?;
        Ok(Some(E::decode(buf)))
    }
}

/// Reads all entries of an index file. A missing file reads as `None`; a trailing partial entry
/// is ignored (the index is then "behind", and the caller's scan fills it in).
pub(crate) fn read_entries<E: Entry>(path: &Path) -> Result<Option<Vec<E>>> {
    let bytes = match std::fs::read(path) {
        Ok(bytes) => bytes,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(LogError::io("read index", path, e)),
    };
    Ok(Some(bytes.chunks_exact(E::BYTES).map(E::decode).collect()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn floor_agrees_across_tail_file_and_sealed() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("0.index");
        let mut idx = SparseIndex::<OffsetEntry>::create(path.clone(), DiskFaults::none()).unwrap();
        // More than one tail's worth, so some entries are in the file and some in memory.
        let n = (TAIL_ENTRIES * 2 + 17) as u32;
        for i in 0..n {
            idx.push(OffsetEntry {
                relative_offset: i * 10,
                position: i * 1000,
            });
        }
        assert_eq!(idx.len(), n as usize);
        let keys = [-1i64, 0, 5, 10, 11, 2555, 2560, 5125, 5129, 5130, 1_000_000];
        let active: Vec<_> = keys.iter().map(|&k| idx.floor(k).unwrap()).collect();
        idx.seal().unwrap();
        let sealed = SparseIndex::<OffsetEntry>::sealed(path.clone(), n as usize, idx.last());
        for (k, want) in keys.iter().zip(&active) {
            assert_eq!(sealed.floor(*k).unwrap(), *want, "key {k}");
            let expect = (*k >= 0).then(|| {
                let i = ((*k / 10) as u32).min(n - 1);
                OffsetEntry {
                    relative_offset: i * 10,
                    position: i * 1000,
                }
            });
            assert_eq!(*want, expect, "key {k}");
        }
        let back = read_entries::<OffsetEntry>(&path).unwrap().unwrap();
        assert_eq!(back.len(), n as usize);
        assert_eq!(back[300].relative_offset, 3000);
    }

    #[test]
    fn resume_cuts_a_torn_entry_and_continues() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("0.timeindex");
        let mut idx = SparseIndex::<TimeEntry>::create(path.clone(), DiskFaults::none()).unwrap();
        for i in 0..3 {
            idx.push(TimeEntry {
                timestamp: i,
                relative_offset: i as u32,
            });
        }
        idx.sync().unwrap();
        drop(idx);
        let mut bytes = std::fs::read(&path).unwrap();
        bytes.extend_from_slice(&[1, 2, 3]);
        std::fs::write(&path, &bytes).unwrap();
        let entries = read_entries::<TimeEntry>(&path).unwrap().unwrap();
        assert_eq!(entries.len(), 3);
        let mut idx =
            SparseIndex::resume(path.clone(), 3, entries.last().copied(), DiskFaults::none())
                .unwrap();
        idx.push(TimeEntry {
            timestamp: 9,
            relative_offset: 9,
        });
        idx.sync().unwrap();
        let entries = read_entries::<TimeEntry>(&path).unwrap().unwrap();
        assert_eq!(entries.len(), 4);
        assert_eq!(entries[3].timestamp, 9);
        assert_eq!(idx.floor(8).unwrap().unwrap().timestamp, 2);
    }
}
