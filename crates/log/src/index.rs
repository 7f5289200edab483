//! Sparse per-segment indexes: offset → file position, and timestamp → offset.
//!
//! Both are derived data: recovery can always rebuild them by scanning the segment, so they are
//! never on the durability path of an append. The active segment keeps its entries in memory
//! (at most [`crate::LogConfig::index_entries_max`] of them) and writes them out when it is
//! sealed or the log is closed; a sealed segment's index lives only in its file and is searched
//! with positioned reads, so memory does not grow with the number of segments.
//!
//! File formats (big-endian, fixed-size entries, no header):
//! - `.index`: `relative offset: u32, position: u32` (8 bytes per entry)
//! - `.timeindex`: `max timestamp so far: i64, relative offset: u32` (12 bytes per entry)

use std::fs::File;
use std::io::Write;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

use crate::error::{LogError, Result};

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

/// A sparse index whose entries are either in memory (active segment) or in its file (sealed).
#[derive(Debug)]
pub(crate) struct SparseIndex<E: Entry> {
    path: PathBuf,
    /// `Some` while the segment is active.
    memory: Option<Vec<E>>,
    /// Entries in the file (sealed) or in memory (active).
    len: usize,
    /// The last entry, kept for cheap appends and recovery checks.
    last: Option<E>,
    /// Most entries kept in memory; bounds the active segment's index memory.
    max_entries: usize,
}

/// Entries reserved up front for a new active index; it grows (rarely, by doubling) up to its
/// maximum as the segment fills, so an idle partition costs little memory.
const INITIAL_ENTRIES: usize = 256;

impl<E: Entry> SparseIndex<E> {
    /// A new, empty, in-memory index for an active segment holding at most `max_entries`.
    pub fn new_active(path: PathBuf, max_entries: usize) -> Self {
        Self::active_from(path, Vec::new(), max_entries)
    }

    /// An index for an active segment, starting from `entries` (recovered from disk or a scan).
    pub fn active_from(path: PathBuf, mut entries: Vec<E>, max_entries: usize) -> Self {
        entries.truncate(max_entries);
        entries.reserve(INITIAL_ENTRIES.min(max_entries).saturating_sub(entries.len()));
        SparseIndex {
            path,
            len: entries.len(),
            last: entries.last().copied(),
            memory: Some(entries),
            max_entries,
        }
    }

    /// A sealed segment's index, already complete in its file with `len` entries.
    #[cfg(test)]
    pub fn sealed(path: PathBuf, len: usize, last: Option<E>) -> Self {
        SparseIndex {
            path,
            memory: None,
            len,
            last,
            max_entries: len,
        }
    }

    pub fn len(&self) -> usize {
        self.len
    }
    pub fn last(&self) -> Option<E> {
        self.last
    }

    /// Adds an entry to the active index. Past `max_entries` (only reachable when a segment
    /// overshoots its size limit), entries are dropped: the index gets sparser, lookups stay
    /// correct.
    pub fn push(&mut self, entry: E) {
        let Some(memory) = self.memory.as_mut() else {
            debug_assert!(false, "push on a sealed index");
            return;
        };
        if memory.len() >= self.max_entries {
            return;
        }
        memory.push(entry);
        self.len = memory.len();
        self.last = Some(entry);
    }

    /// The last entry whose key is at most `key`.
    pub fn floor(&self, key: i64) -> Result<Option<E>> {
        if let Some(memory) = &self.memory {
            let idx = memory.partition_point(|e| e.key() <= key);
            return Ok(idx.checked_sub(1).map(|i| memory[i]));
        }
        if self.len == 0 {
            return Ok(None);
        }
        let file = File::open(&self.path).map_err(|e| LogError::io("open index", &self.path, e))?;
        let mut buf = [0u8; 16];
        let buf = &mut buf[..E::BYTES];
        let (mut lo, mut hi) = (0usize, self.len);
        // Invariant: entries [0, lo) have key <= `key`; entries [hi, len) have key > `key`.
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

    /// Writes the in-memory entries to the index file and fsyncs it. Used when a segment is
    /// sealed and at clean shutdown. The file is rewritten whole: it is derived data, and a torn
    /// write is caught by [`read_entries`]'s checks at the next unclean open.
    pub fn write_out(&self) -> Result<()> {
        let Some(memory) = &self.memory else {
            return Ok(());
        };
        let mut bytes = vec![0u8; memory.len() * E::BYTES];
        for (chunk, entry) in bytes.chunks_exact_mut(E::BYTES).zip(memory) {
            entry.encode(chunk);
        }
        let mut file =
            File::create(&self.path).map_err(|e| LogError::io("create index", &self.path, e))?;
        file.write_all(&bytes)
            .and_then(|()| file.sync_data())
            .map_err(|e| LogError::io("write index", &self.path, e))
    }

    /// Turns an active index into a sealed one (after [`SparseIndex::write_out`]).
    pub fn seal(&mut self) {
        self.memory = None;
    }

    /// The in-memory entries of an active index.
    #[cfg(test)]
    pub fn entries(&self) -> &[E] {
        self.memory.as_deref().unwrap_or(&[])
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
    Ok(Some(
        bytes.chunks_exact(E::BYTES).map(E::decode).collect(),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn floor_agrees_in_memory_and_on_disk() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("0.index");
        let mut idx = SparseIndex::<OffsetEntry>::new_active(path.clone(), 100);
        for i in 0..50u32 {
            idx.push(OffsetEntry {
                relative_offset: i * 10,
                position: i * 1000,
            });
        }
        idx.write_out().unwrap();
        let sealed = SparseIndex::<OffsetEntry>::sealed(path.clone(), 50, idx.last());
        for key in [-1i64, 0, 5, 10, 11, 255, 489, 490, 10_000] {
            assert_eq!(idx.floor(key).unwrap(), sealed.floor(key).unwrap(), "key {key}");
        }
        assert_eq!(idx.floor(-1).unwrap(), None);
        assert_eq!(idx.floor(25).unwrap().unwrap().relative_offset, 20);
        let back = read_entries::<OffsetEntry>(&path).unwrap().unwrap();
        assert_eq!(back.as_slice(), idx.entries());
    }

    #[test]
    fn push_past_capacity_drops_instead_of_allocating() {
        let mut idx = SparseIndex::<TimeEntry>::new_active(PathBuf::from("x"), 2);
        for i in 0..5 {
            idx.push(TimeEntry {
                timestamp: i,
                relative_offset: i as u32,
            });
        }
        assert_eq!(idx.len(), 2);
        assert_eq!(idx.entries().len(), 2);
    }
}
