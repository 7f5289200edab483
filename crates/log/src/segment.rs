//! One segment: a file of whole batches named by its base offset, with its two sparse indexes.
//!
//! Lifecycle: **active** (the one segment that takes appends; indexes in memory) → **sealed**
//! (fsynced, indexes written and fsynced, never written again) → **deleted** (by retention or
//! partition deletion). A segment is sealed *before* the next one is created, so at any moment
//! every segment but the newest is fully durable; recovery relies on that (see `recovery.rs`).
//!
//! A full disk (ENOSPC, EDQUOT) during an append: the write may have put part of the batches
//! into the file before failing. [`Segment::append`] cuts the file back to its length before
//! the append and leaves `size`, `next_offset`, the indexes and the timestamps as they were, so
//! memory and disk agree and the next append writes at the same place. If even the cut fails,
//! the segment remembers it and cuts before its next write, seal or close: nothing is ever
//! written after, or sealed with, a partial batch. (Were the process to die in between, recovery
//! truncates the partial batch like any torn tail: it was never acknowledged.)
//!
//! Why growing files and not preallocated ones: on ext4 an fdatasync after a write that extends a
//! file also commits the size change to the journal, which costs a few milliseconds whatever the
//! write size. Group commit amortises that fixed cost over every append of a round, and rounds
//! grow with load (measured in `docs/benchmarks.md`). Zero-filling ahead would double the bytes
//! written, and `fallocate` leaves unwritten extents whose conversion costs the same journal
//! commit. (So there is no preallocation that could fail with ENOSPC: only the writes
//! themselves, and creating a new segment's three files, can.)

use std::fs::{File, OpenOptions};
use std::io::{self, IoSlice};
use std::os::unix::fs::FileExt;
use std::os::unix::io::AsRawFd;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use bytes::{Bytes, BytesMut};

use crate::batch::{self, BatchView, HEADER_BYTES, LOG_OVERHEAD_BYTES, Peek};
use crate::config::LogConfig;
use crate::error::{BatchError, LogError, Result};
use crate::faults::{Allowance, DiskFaults};
use crate::index::{OffsetEntry, SparseIndex, TimeEntry};

/// Most batches written with one `pwritev` (two iovecs per batch: the patched base offset and the
/// rest). Larger appends are written in several calls. Well under Linux's IOV_MAX (1024).
const WRITE_BATCHES_PER_CALL: usize = 64;

pub(crate) fn log_file_name(base_offset: i64) -> String {
    format!("{base_offset:020}.log")
}
pub(crate) fn index_file_name(base_offset: i64) -> String {
    format!("{base_offset:020}.index")
}
pub(crate) fn time_index_file_name(base_offset: i64) -> String {
    format!("{base_offset:020}.timeindex")
}

/// One segment's file and indexes.
#[derive(Debug)]
pub(crate) struct Segment {
    pub base_offset: i64,
    pub path: PathBuf,
    pub file: Arc<File>,
    /// Bytes of whole, valid batches in the file.
    pub size: u64,
    /// One past the last offset stored here; equals `base_offset` when empty.
    pub next_offset: i64,
    /// Largest batch max-timestamp in the segment; `i64::MIN` when empty.
    pub max_timestamp: i64,
    pub offset_index: SparseIndex<OffsetEntry>,
    pub time_index: SparseIndex<TimeEntry>,
    /// Batch bytes appended since the last index entry.
    bytes_since_index: u64,
    /// When the first append landed in this segment since the log was opened (for `segment_ms`).
    pub first_append_ms: Option<i64>,
    /// The file may hold bytes past `size`, from a failed write whose cut-back failed too. They
    /// are cut before the next write, seal or close.
    uncut_tail: bool,
    faults: DiskFaults,
}

/// How a scan of a segment ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum ScanEnd {
    /// Every byte up to the end of the file is a valid batch.
    Clean,
    /// Fewer than 12 bytes remain: not even a length field.
    TornHeader,
    /// The length field says the batch runs past the end of the file.
    TornBody,
    /// The rest of the file is zeros (a length field of 0 followed by zeros).
    ZeroTail,
    /// A whole batch that fails validation (CRC, magic, counts).
    Corrupt(BatchError),
    /// A valid batch whose base offset is not the next expected offset.
    OffsetGap { expected: i64, found: i64 },
}

/// Result of scanning batches from some position of a segment file.
#[derive(Debug)]
pub(crate) struct Scan {
    /// Position just after the last valid batch.
    pub valid_end: u64,
    pub next_offset: i64,
    pub max_timestamp: i64,
    pub end: ScanEnd,
}

impl Segment {
    /// Creates a new, empty active segment file and its index files. The caller fsyncs the
    /// directory. On a full disk this fails with [`LogError::NoSpace`] and may leave some of the
    /// three files behind: the caller removes them (`recovery::delete_segment_files`).
    pub fn create(dir: &Path, base_offset: i64, faults: DiskFaults) -> Result<Segment> {
        let path = dir.join(log_file_name(base_offset));
        let file = faults
            .create(&path)
            .and_then(|()| {
                OpenOptions::new()
                    .read(true)
                    .write(true)
                    .create_new(true)
                    .open(&path)
            })
            .map_err(|e| LogError::write("create segment", &path, e))?;
        Ok(Segment {
            base_offset,
            path,
            file: Arc::new(file),
            size: 0,
            next_offset: base_offset,
            max_timestamp: i64::MIN,
            offset_index: SparseIndex::create(
                dir.join(index_file_name(base_offset)),
                faults.clone(),
            )?,
            time_index: SparseIndex::create(
                dir.join(time_index_file_name(base_offset)),
                faults.clone(),
            )?,
            bytes_since_index: u64::MAX,
            first_append_ms: None,
            uncut_tail: false,
            faults,
        })
    }

    /// Creates the files of a segment that a compaction writes (see `compact/`), under the
    /// temporary names `paths` (`.cleaned`): like [`Segment::create`], but the caller
    /// fills it with [`Segment::append_stored`] and renames it into place later.
    pub fn create_at(base_offset: i64, paths: [PathBuf; 3], faults: DiskFaults) -> Result<Segment> {
        let [path, index_path, time_path] = paths;
        let file = faults
            .create(&path)
            .and_then(|()| {
                OpenOptions::new()
                    .read(true)
                    .write(true)
                    .create_new(true)
                    .open(&path)
            })
            .map_err(|e| LogError::write("create cleaned segment", &path, e))?;
        Ok(Segment {
            base_offset,
            path,
            file: Arc::new(file),
            size: 0,
            next_offset: base_offset,
            max_timestamp: i64::MIN,
            offset_index: SparseIndex::create(index_path, faults.clone())?,
            time_index: SparseIndex::create(time_path, faults.clone())?,
            bytes_since_index: u64::MAX,
            first_append_ms: None,
            uncut_tail: false,
            faults,
        })
    }

    /// Writes whole batches that already carry their offsets (a compaction's output) at the end
    /// of the file and indexes them. Each batch must start at or past `next_offset`: offsets only
    /// grow, gaps are allowed. Durability: page cache only, until [`Segment::prepare_seal`].
    pub fn append_stored(&mut self, data: &[u8], config: &LogConfig) -> Result<()> {
        let mut pos = 0usize;
        let start_size = self.size;
        let mut next = self.next_offset;
        let mut notes = Vec::new();
        while pos < data.len() {
            let view =
                BatchView::parse_stored(&data[pos..]).map_err(|source| LogError::Corrupt {
                    path: self.path.clone(),
                    position: start_size + pos as u64,
                    source,
                })?;
            if view.base_offset() < next {
                return Err(LogError::io(
                    "write cleaned segment",
                    &self.path,
                    io::Error::new(
                        io::ErrorKind::InvalidData,
                        format!(
                            "offsets must grow: a batch at {} after {next}",
                            view.base_offset()
                        ),
                    ),
                ));
            }
            notes.push((pos, view.base_offset(), view.len(), view.max_timestamp()));
            next = view.last_offset() + 1;
            pos += view.len();
        }
        let iov = [IoSlice::new(data)];
        match self.faults.write(&self.path, start_size, &iov) {
            Allowance::All => self.file.write_all_at(data, start_size),
            Allowance::Partial { bytes, error } => self
                .file
                .write_all_at(&data[..bytes as usize], start_size)
                .and(Err(error)),
        }
        .map_err(|e| LogError::write("write cleaned segment", &self.path, e))?;
        self.size += data.len() as u64;
        self.next_offset = next;
        for (at, base, len, max_ts) in notes {
            self.note_batch(start_size + at as u64, base, len as u64, max_ts, config);
        }
        Ok(())
    }

    /// After the files were renamed from their temporary names to the final ones (a
    /// compaction's swap): points the sealed segment at `paths`.
    pub fn renamed(&mut self, paths: [PathBuf; 3]) {
        let [path, index_path, time_path] = paths;
        self.path = path;
        self.offset_index.renamed(index_path);
        self.time_index.renamed(time_path);
    }

    /// Builds a segment from recovered state (see `recovery.rs`).
    #[allow(clippy::too_many_arguments)]
    pub fn from_recovered(
        base_offset: i64,
        path: PathBuf,
        file: File,
        size: u64,
        next_offset: i64,
        max_timestamp: i64,
        offset_index: SparseIndex<OffsetEntry>,
        time_index: SparseIndex<TimeEntry>,
        faults: DiskFaults,
    ) -> Segment {
        Segment {
            base_offset,
            path,
            file: Arc::new(file),
            size,
            next_offset,
            max_timestamp,
            offset_index,
            time_index,
            // Start a fresh interval: the next append gets an index entry.
            bytes_since_index: u64::MAX,
            first_append_ms: None,
            uncut_tail: false,
            faults,
        }
    }

    pub fn is_empty(&self) -> bool {
        self.size == 0
    }

    /// Writes validated batches at the end of the file, patching each base offset to the next
    /// offset, and indexes them.
    ///
    /// Durability: when this returns `Ok`, the bytes are in the page cache (*appended*), not
    /// durable. On error nothing has changed: the file is cut back to its previous size (or, if
    /// that fails too, will be before anything else is written), and the size, next offset,
    /// indexes and timestamps are those from before. A full disk gives
    /// [`LogError::NoSpace`], after which the segment takes appends as before; any other write
    /// error is [`LogError::Io`].
    pub fn append(&mut self, data: &[u8], config: &LogConfig) -> Result<()> {
        self.cut_tail()?;
        self.make_index_room(data, config)?;
        let start_size = self.size;
        let start_next = self.next_offset;
        if let Err(e) = self.write_batches(data) {
            // `write_batches` sets `size` and `next_offset` only on success: they still say
            // where the segment ends. Remove whatever part of the write landed.
            debug_assert_eq!((self.size, self.next_offset), (start_size, start_next));
            self.uncut_tail = true;
            if let Err(cut) = self.cut_tail() {
                tracing::warn!(segment = %self.path.display(), error = %cut, "could not cut a failed append back; retrying before the next write");
            }
            return Err(LogError::write("write segment", &self.path, e));
        }
        // Index what was written. Headers were validated by the caller; walk them again.
        let mut pos = 0usize;
        let mut offset = start_next;
        while pos < data.len() {
            let view = BatchView::parse(&data[pos..]).expect("validated before append");
            self.note_batch(
                start_size + pos as u64,
                offset,
                view.len() as u64,
                view.max_timestamp(),
                config,
            );
            offset += i64::from(view.last_offset_delta()) + 1;
            pos += view.len();
        }
        Ok(())
    }

    /// Cuts off bytes past `size` left by a failed write, if any.
    fn cut_tail(&mut self) -> Result<()> {
        if self.uncut_tail {
            self.file
                .set_len(self.size)
                .map_err(|e| LogError::write("cut back segment", &self.path, e))?;
            self.faults.truncated(&self.path, self.size);
            self.uncut_tail = false;
        }
        Ok(())
    }

    /// Writes out the index tails if `data` could add more entries than they have room for,
    /// so indexing the append after its data is written never needs a write that could fail.
    /// A full disk fails here, before any data is written.
    fn make_index_room(&mut self, data: &[u8], config: &LogConfig) -> Result<()> {
        let interval = u64::from(config.index_interval_bytes);
        let mut since = self.bytes_since_index;
        let mut entries = 0usize;
        let mut pos = 0usize;
        while pos < data.len() {
            let len = BatchView::parse(&data[pos..])
                .expect("validated before append")
                .len();
            if since >= interval {
                entries += 1;
                since = 0;
            }
            since = since.saturating_add(len as u64);
            pos += len;
        }
        // The time index adds at most one entry per offset-index entry.
        if self.offset_index.tail_room() < entries {
            self.offset_index.flush()?;
        }
        if self.time_index.tail_room() < entries {
            self.time_index.flush()?;
        }
        Ok(())
    }

    fn write_batches(&mut self, data: &[u8]) -> io::Result<()> {
        let mut offsets = [[0u8; 8]; WRITE_BATCHES_PER_CALL];
        let mut pos = 0usize;
        let mut file_pos = self.size;
        let mut next = self.next_offset;
        while pos < data.len() {
            // Gather up to WRITE_BATCHES_PER_CALL batches into one vectored write.
            let mut spans = [(0usize, 0usize); WRITE_BATCHES_PER_CALL];
            let mut n = 0;
            let mut chunk_bytes = 0u64;
            while n < WRITE_BATCHES_PER_CALL && pos < data.len() {
                let view = BatchView::parse(&data[pos..]).map_err(io::Error::other)?;
                offsets[n] = batch::encode_base_offset(next);
                spans[n] = (pos, view.len());
                next += i64::from(view.last_offset_delta()) + 1;
                chunk_bytes += view.len() as u64;
                pos += view.len();
                n += 1;
            }
            let mut iov: [IoSlice<'_>; 2 * WRITE_BATCHES_PER_CALL] =
                [IoSlice::new(&[]); 2 * WRITE_BATCHES_PER_CALL];
            for i in 0..n {
                let (start, len) = spans[i];
                iov[2 * i] = IoSlice::new(&offsets[i]);
                iov[2 * i + 1] = IoSlice::new(&data[start + 8..start + len]);
            }
            match self.faults.write(&self.path, file_pos, &iov[..2 * n]) {
                Allowance::All => pwritev_all(&self.file, &mut iov[..2 * n], file_pos)?,
                Allowance::Partial { bytes, error } => {
                    write_prefix(&self.file, &iov[..2 * n], bytes, file_pos)?;
                    return Err(error);
                }
            }
            file_pos += chunk_bytes;
        }
        self.size = file_pos;
        self.next_offset = next;
        Ok(())
    }

    /// Updates indexes and timestamps for one batch stored at `position`.
    pub fn note_batch(
        &mut self,
        position: u64,
        base_offset: i64,
        len: u64,
        max_timestamp: i64,
        config: &LogConfig,
    ) {
        if self.bytes_since_index >= u64::from(config.index_interval_bytes) {
            let relative_offset = (base_offset - self.base_offset) as u32;
            self.offset_index.push(OffsetEntry {
                relative_offset,
                position: position as u32,
            });
            let ts = self.max_timestamp.max(max_timestamp);
            if self.time_index.last().is_none_or(|e| ts > e.timestamp) {
                self.time_index.push(TimeEntry {
                    timestamp: ts,
                    relative_offset,
                });
            }
            self.bytes_since_index = 0;
        }
        self.bytes_since_index = self.bytes_since_index.saturating_add(len);
        self.max_timestamp = self.max_timestamp.max(max_timestamp);
    }

    /// Accounts for a batch that the recovered index already points at (the start of a tail
    /// scan): no new entry, but the interval restarts after it.
    pub fn note_indexed_batch(&mut self, len: u64, max_timestamp: i64) {
        self.bytes_since_index = len;
        self.max_timestamp = self.max_timestamp.max(max_timestamp);
    }

    /// Marks a recovered, already durable segment as sealed; fsyncs its indexes first if
    /// recovery changed them. A full disk does not stop this: index entries that cannot be
    /// written are dropped (see `SparseIndex::seal_best_effort`).
    pub fn seal_indexes(&mut self, changed: bool) -> Result<()> {
        if changed {
            self.offset_index.seal_best_effort()?;
            self.time_index.seal_best_effort()
        } else {
            self.offset_index.close();
            self.time_index.close();
            Ok(())
        }
    }

    /// First half of sealing: writes both index tails, then fdatasyncs the data and fsyncs both
    /// indexes. When it returns `Ok`, the segment is complete and durable, but still active
    /// (it may take more appends if the next segment cannot be created).
    ///
    /// Errors: [`LogError::NoSpace`] if an index tail (or cutting back a failed append) could
    /// not be written for want of space: nothing was synced and the segment is as it was.
    /// [`LogError::Io`] from a sync: never retry it (see `LogError::Failed`).
    pub fn prepare_seal(&mut self) -> Result<()> {
        self.cut_tail()?;
        self.offset_index.flush()?;
        self.time_index.flush()?;
        self.sync_data()?;
        self.offset_index.sync()?;
        self.time_index.sync()
    }

    /// Second half of sealing, after [`Segment::prepare_seal`] and once the next segment
    /// exists: closes the index files. No I/O. The segment is never written again.
    pub fn finish_seal(&mut self) {
        self.offset_index.close();
        self.time_index.close();
    }

    /// fdatasyncs the segment file (through the fault seam). Errors are [`LogError::Io`]:
    /// a failed fdatasync is never recoverable, whatever its errno.
    pub fn sync_data(&self) -> Result<()> {
        self.faults
            .sync(&self.path, || self.file.sync_data())
            .map_err(|e| LogError::io("fdatasync segment", &self.path, e))
    }

    /// Makes the active segment ready for a clean close: cuts a failed append's leftover,
    /// fdatasyncs the data, writes and fsyncs both indexes.
    pub fn sync_for_close(&mut self) -> Result<()> {
        self.cut_tail()?;
        self.sync_data()?;
        self.offset_index.sync()?;
        self.time_index.sync()
    }

    /// Position of the batch holding `offset` (which must be in `[base_offset, next_offset)`),
    /// looking no further than `limit` bytes into the file.
    pub fn position_of(&self, offset: i64, limit: u64) -> Result<Option<u64>> {
        let relative = offset - self.base_offset;
        let mut pos = self
            .offset_index
            .floor(relative)?
            .map_or(0, |e| u64::from(e.position));
        let mut header = [0u8; HEADER_BYTES];
        while pos + HEADER_BYTES as u64 <= limit {
            self.file
                .read_exact_at(&mut header, pos)
                .map_err(|e| LogError::io("read segment", &self.path, e))?;
            let total = batch_len_at(&header, &self.path, pos)?;
            let base = sluice_batch::read_i64(&header, batch::header::BASE_OFFSET);
            let delta = i32::from_be_bytes(header[23..27].try_into().expect("4 bytes"));
            if base.saturating_add(i64::from(delta)) >= offset {
                return Ok(Some(pos));
            }
            pos += total;
        }
        Ok(None)
    }

    /// Reads whole batches starting at `pos`; see [`read_batches`].
    pub fn read_batches(&self, pos: u64, limit: u64, max_bytes: usize) -> Result<Bytes> {
        read_batches(&self.file, &self.path, pos, limit, max_bytes)
    }

    /// Scans batches from `from` to the end of the file (`file_len`), verifying each one's
    /// length, CRC and offset continuity, and calling `visit(position, view)` for each valid one.
    /// With `gaps_allowed` (a sealed segment, which a compaction may have thinned) a batch may
    /// start past the expected offset, never before it.
    pub fn scan(
        file: &File,
        path: &Path,
        from: u64,
        file_len: u64,
        expected_offset: i64,
        gaps_allowed: bool,
        mut visit: impl FnMut(u64, &BatchView<'_>),
    ) -> Result<Scan> {
        // Reads in chunks so a scan of a large segment needs bounded memory.
        const CHUNK_BYTES: usize = 1 << 20;
        let mut buf: Vec<u8> = Vec::new();
        let mut buf_start = from;
        let mut pos = from;
        let mut next_offset = expected_offset;
        let mut max_timestamp = i64::MIN;
        let end = loop {
            if pos == file_len {
                break ScanEnd::Clean;
            }
            let in_buf = ((pos - buf_start) as usize).min(buf.len());
            let peeked = batch::peek(&buf[in_buf..]);
            let total = match peeked {
                Ok(Peek::Whole(total)) => total,
                Ok(Peek::Incomplete { needed }) => {
                    let have_in_file = file_len - pos;
                    let need = needed.unwrap_or(LOG_OVERHEAD_BYTES) as u64;
                    if have_in_file < LOG_OVERHEAD_BYTES as u64 {
                        break if is_zeros(file, path, pos, file_len)? {
                            ScanEnd::ZeroTail
                        } else {
                            ScanEnd::TornHeader
                        };
                    }
                    if have_in_file < need {
                        break ScanEnd::TornBody;
                    }
                    // Refill the buffer from `pos` with at least `need` bytes.
                    let len = (need.max(CHUNK_BYTES as u64)).min(have_in_file) as usize;
                    buf.clear();
                    buf.resize(len, 0);
                    file.read_exact_at(&mut buf, pos)
                        .map_err(|e| LogError::io("read segment", path, e))?;
                    buf_start = pos;
                    continue;
                }
                Err(BatchError::BadLength { declared: 0 })
                    if is_zeros(file, path, pos, file_len)? =>
                {
                    break ScanEnd::ZeroTail;
                }
                Err(e) => break ScanEnd::Corrupt(e),
            };
            let rest = &buf[in_buf..];
            let view = match BatchView::parse_stored_checked(&rest[..total]) {
                Ok(view) => view,
                Err(e) => break ScanEnd::Corrupt(e),
            };
            let gap_ok = gaps_allowed && view.base_offset() > next_offset;
            if view.base_offset() != next_offset && !gap_ok {
                break ScanEnd::OffsetGap {
                    expected: next_offset,
                    found: view.base_offset(),
                };
            }
            visit(pos, &view);
            next_offset = view.last_offset() + 1;
            max_timestamp = max_timestamp.max(view.max_timestamp());
            pos += total as u64;
        };
        Ok(Scan {
            valid_end: pos,
            next_offset,
            max_timestamp,
            end,
        })
    }
}

/// Reads whole batches starting at `pos`: at least one batch (even one larger than
/// `max_bytes`), then more while they fit in `max_bytes`, never past `limit`. Every batch's
/// CRC is checked before it is returned.
pub(crate) fn read_batches(
    file: &File,
    path: &Path,
    pos: u64,
    limit: u64,
    max_bytes: usize,
) -> Result<Bytes> {
    if pos >= limit {
        return Ok(Bytes::new());
    }
    let available = limit - pos;
    let mut header = [0u8; LOG_OVERHEAD_BYTES];
    file.read_exact_at(&mut header, pos)
        .map_err(|e| LogError::io("read segment", path, e))?;
    let first = batch_len_at(&header, path, pos)?;
    let want = (max_bytes as u64).max(first).min(available);
    let mut buf = BytesMut::new();
    read_exact_at_uninit(file, &mut buf, want as usize, pos)
        .map_err(|e| LogError::io("read segment", path, e))?;
    // Keep whole, valid batches only.
    let mut keep = 0usize;
    while keep < buf.len() {
        match BatchView::parse_stored_checked(&buf[keep..]) {
            Ok(view) => keep += view.len(),
            Err(BatchError::Truncated { .. }) if keep > 0 => break,
            Err(source) => {
                return Err(LogError::Corrupt {
                    path: path.to_path_buf(),
                    position: pos + keep as u64,
                    source,
                });
            }
        }
    }
    buf.truncate(keep);
    Ok(buf.freeze())
}

/// Appends exactly `len` bytes read at `pos` of `file` to `buf`, without zeroing the memory
/// first (reads are the consume path's hottest loop: zeroing would be one more pass over every
/// byte served).
fn read_exact_at_uninit(
    file: &File,
    buf: &mut BytesMut,
    len: usize,
    mut pos: u64,
) -> io::Result<()> {
    buf.reserve(len);
    let end = buf.len() + len;
    while buf.len() < end {
        let want = end - buf.len();
        let dst = &mut buf.spare_capacity_mut()[..want];
        // SAFETY: `dst` is writable memory of `dst.len()` bytes owned by `buf` (its spare
        // capacity); pread writes at most that many bytes into it and reads none of it.
        let n = unsafe {
            libc::pread(
                file.as_raw_fd(),
                dst.as_mut_ptr().cast(),
                dst.len(),
                pos as libc::off_t,
            )
        };
        match n {
            n if n > 0 => {
                // SAFETY: pread initialised the first `n` bytes of the spare capacity, and
                // `n <= dst.len()` keeps the new length within the capacity.
                unsafe { buf.set_len(buf.len() + n as usize) };
                pos += n as u64;
            }
            0 => {
                return Err(io::Error::new(
                    io::ErrorKind::UnexpectedEof,
                    "the file ended before the bytes its index promised",
                ));
            }
            _ => {
                let e = io::Error::last_os_error();
                if e.kind() != io::ErrorKind::Interrupted {
                    return Err(e);
                }
            }
        }
    }
    Ok(())
}

/// Size of the batch whose first bytes (at least the 12-byte length prefix, at most one header)
/// are `header`, read at `pos` of `path`; an impossible length is corruption.
pub(crate) fn batch_len_at(header: &[u8], path: &Path, pos: u64) -> Result<u64> {
    match batch::peek(header) {
        Ok(Peek::Incomplete {
            needed: Some(total),
        }) => Ok(total as u64),
        Ok(Peek::Whole(total)) => Ok(total as u64),
        Ok(Peek::Incomplete { needed: None }) => Err(LogError::Corrupt {
            path: path.to_path_buf(),
            position: pos,
            source: BatchError::Truncated {
                available: header.len(),
                needed: None,
            },
        }),
        Err(source) => Err(LogError::Corrupt {
            path: path.to_path_buf(),
            position: pos,
            source,
        }),
    }
}

/// True when every byte of `file` in `[from, to)` is zero.
fn is_zeros(file: &File, path: &Path, from: u64, to: u64) -> Result<bool> {
    let mut buf = vec![0u8; 64 * 1024];
    let mut pos = from;
    while pos < to {
        let n = ((to - pos) as usize).min(buf.len());
        file.read_exact_at(&mut buf[..n], pos)
            .map_err(|e| LogError::io("read segment", path, e))?;
        if buf[..n].iter().any(|&b| b != 0) {
            return Ok(false);
        }
        pos += n as u64;
    }
    Ok(true)
}

/// Writes the first `bytes` bytes of `iov` at `pos` (an injected short write).
fn write_prefix(file: &File, iov: &[IoSlice<'_>], bytes: u64, pos: u64) -> io::Result<()> {
    let mut flat = Vec::with_capacity(bytes as usize);
    for slice in iov {
        let take = (bytes as usize - flat.len()).min(slice.len());
        flat.extend_from_slice(&slice[..take]);
    }
    file.write_all_at(&flat, pos)
}

/// Writes every byte of `iov` at `pos`, retrying short writes and interrupts.
fn pwritev_all(file: &File, mut iov: &mut [IoSlice<'_>], mut pos: u64) -> io::Result<()> {
    while !iov.is_empty() {
        // SAFETY: `IoSlice` is guaranteed ABI-compatible with `struct iovec` on Unix, the slice
        // is valid for `iov.len()` entries, and every buffer it points to outlives this call.
        let n = unsafe {
            libc::pwritev(
                file.as_raw_fd(),
                iov.as_ptr().cast::<libc::iovec>(),
                iov.len() as libc::c_int,
                pos as libc::off_t,
            )
        };
        if n < 0 {
            let err = io::Error::last_os_error();
            if err.kind() == io::ErrorKind::Interrupted {
                continue;
            }
            return Err(err);
        }
        if n == 0 {
            return Err(io::Error::new(
                io::ErrorKind::WriteZero,
                "pwritev wrote nothing",
            ));
        }
        pos += n as u64;
        IoSlice::advance_slices(&mut iov, n as usize);
    }
    Ok(())
}
