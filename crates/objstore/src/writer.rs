//! [`ObjectWriter`]: builds one flush object (layout in [`crate::format`]).

use bytes::{BufMut, Bytes, BytesMut};
use sluice_batch::header as bh;

use crate::error::{BatchProblem, ObjectError, Result, Section};
use crate::format::{
    EMPTY_OBJECT_BYTES, FOOTER_BYTES, FORMAT_VERSION, HEADER_BYTES, INDEX_ENTRY_BYTES,
    INDEX_HEADER_BYTES, MAGIC, META_HEADER_BYTES, META_RECORD_HEADER_BYTES, ObjectHeader, RunEntry,
    TopicId, check_batch, empty_batches, hdr,
};

/// The run being written.
#[derive(Debug, Clone, Copy)]
struct OpenRun {
    entry: RunEntry,
    /// Where the run starts in the writer's buffer.
    start: usize,
}

/// Builds one flush object at a time, reusing its buffers from one object to the next.
///
/// Order of calls: for each partition with data, in ascending (topic id, partition) order,
/// [`begin_run`](Self::begin_run), one or more [`push_batches`](Self::push_batches) (or
/// [`push_batches_at`](Self::push_batches_at), which assigns offsets), then
/// [`end_run`](Self::end_run); any number of [`push_meta`](Self::push_meta) at any time; then
/// [`finish`](Self::finish) with the object's identity, which returns the object's bytes and
/// leaves the writer empty for the next object. [`encoded_len`](Self::encoded_len) says at any
/// time how long the object would be, so the flusher can cut at its size limit.
///
/// Durability: nothing here is durable. The bytes `finish` returns are an object to PUT; the
/// batches in it may be acknowledged only after that PUT succeeded (and its metadata commit).
///
/// Every batch is checked (length, magic 2, CRC-32C, offsets) as it is copied in; a failed
/// push leaves the object exactly as it was before the call.
#[derive(Debug)]
pub struct ObjectWriter {
    /// Header placeholder, then the data section so far.
    ///
    /// Empty between objects: the placeholder is written when the next object starts, so that
    /// the buffer handed out by `finish` can be reclaimed in place once its last reader drops it.
    buf: BytesMut,
    /// Capacity the data buffer is given when an object starts: the largest object so far (or
    /// what `with_capacity` asked for), so an object's bytes grow without reallocation.
    capacity_hint: usize,
    /// Meta records (without the section header).
    meta: Vec<u8>,
    meta_count: u32,
    runs: Vec<RunEntry>,
    open: Option<OpenRun>,
}

impl Default for ObjectWriter {
    fn default() -> Self {
        Self::new()
    }
}

impl ObjectWriter {
    /// An empty writer.
    pub fn new() -> Self {
        Self::with_capacity(0)
    }

    /// An empty writer whose data buffer holds `data_bytes` before it grows (the flusher's
    /// `--object-max-bytes`).
    pub fn with_capacity(data_bytes: usize) -> Self {
        ObjectWriter {
            buf: BytesMut::new(),
            capacity_hint: EMPTY_OBJECT_BYTES.saturating_add(data_bytes),
            meta: Vec::new(),
            meta_count: 0,
            runs: Vec::new(),
            open: None,
        }
    }

    /// Writes the header placeholder if no object is under way (the header is filled in by
    /// `finish`, when the object's identity is known).
    fn start_object(&mut self) {
        if self.buf.is_empty() {
            self.buf.reserve(self.capacity_hint);
            self.buf.put_bytes(0, HEADER_BYTES);
        }
    }

    /// Drops everything written since the last `finish` (or `clear`), keeping the buffers.
    pub fn clear(&mut self) {
        self.buf.clear();
        self.meta.clear();
        self.meta_count = 0;
        self.runs.clear();
        self.open = None;
    }

    /// Whether the object has neither runs nor meta records.
    pub fn is_empty(&self) -> bool {
        self.runs.is_empty() && self.open.is_none() && self.meta_count == 0
    }

    /// Runs ended so far.
    pub fn runs(&self) -> &[RunEntry] {
        &self.runs
    }

    /// The object's length in bytes if it were finished now (an open run counted as ended).
    pub fn encoded_len(&self) -> usize {
        let entries = self.runs.len() + usize::from(self.open.is_some());
        self.buf.len().max(HEADER_BYTES)
            + META_HEADER_BYTES
            + self.meta.len()
            + INDEX_HEADER_BYTES
            + entries * INDEX_ENTRY_BYTES
            + FOOTER_BYTES
    }

    /// Starts the run of `partition` of `topic_id`. Runs must come in strictly ascending
    /// (topic id, partition) order; one per partition per object.
    pub fn begin_run(&mut self, topic_id: TopicId, partition: i32) -> Result<()> {
        if self.open.is_some() {
            return Err(ObjectError::RunStillOpen { op: "begin_run" });
        }
        if partition < 0 {
            return Err(ObjectError::NegativePartition { partition });
        }
        if let Some(prev) = self.runs.last()
            && prev.key() >= (topic_id, partition)
        {
            return Err(ObjectError::RunOutOfOrder {
                topic: topic_id,
                partition,
            });
        }
        if self.runs.len() >= u32::MAX as usize {
            return Err(ObjectError::TooLarge {
                what: "the number of runs",
                limit: u64::from(u32::MAX),
            });
        }
        self.start_object();
        self.open = Some(OpenRun {
            entry: RunEntry {
                topic_id,
                partition,
                batch_count: 0,
                base_offset: 0,
                last_offset: 0,
                max_timestamp: i64::MIN,
                record_count: 0,
                data_offset: self.buf.len() as u64,
                data_len: 0,
                data_crc: 0,
            },
            start: self.buf.len(),
        });
        Ok(())
    }

    /// Appends whole batches (one or more, back to back) to the open run, keeping their base
    /// offsets: the caller has set them. Offsets must increase from batch to batch. Errors
    /// name the byte in `batches` where the bad batch starts; nothing is appended then.
    pub fn push_batches(&mut self, batches: &[u8]) -> Result<()> {
        self.push(batches, None).map(|_| ())
    }

    /// Appends whole batches to the open run, assigning consecutive offsets from
    /// `first_offset` (patched into the object's copy; `batches` is not changed). Returns the
    /// next offset to assign (the last batch's last offset + 1).
    pub fn push_batches_at(&mut self, batches: &[u8], first_offset: i64) -> Result<i64> {
        self.push(batches, Some(first_offset))
    }

    fn push(&mut self, batches: &[u8], assign: Option<i64>) -> Result<i64> {
        let Some(open) = self.open.as_ref() else {
            return Err(ObjectError::NoOpenRun);
        };
        let mut entry = open.entry;
        let mark = self.buf.len();
        if batches.is_empty() {
            return Err(empty_batches());
        }
        self.buf.extend_from_slice(batches);
        let mut pos = 0;
        let mut next = assign.unwrap_or(0);
        let result = loop {
            if pos == batches.len() {
                break Ok(());
            }
            let at = pos as u64;
            let bad = |problem| ObjectError::BadBatch {
                section: Section::Data,
                at,
                problem,
            };
            let out = &mut self.buf[mark + pos..];
            if assign.is_some() && out.len() >= bh::BASE_OFFSET.end {
                // The base offset is not covered by the batch CRC: patching keeps it valid.
                out[bh::BASE_OFFSET].copy_from_slice(&next.to_be_bytes());
            }
            let info = match check_batch(out, true) {
                Ok(info) => info,
                Err(problem) => break Err(bad(problem)),
            };
            if entry.batch_count > 0 && info.base_offset <= entry.last_offset {
                break Err(bad(BatchProblem::OffsetNotIncreasing {
                    base_offset: info.base_offset,
                    previous_last: entry.last_offset,
                }));
            }
            if entry.batch_count == u32::MAX {
                break Err(ObjectError::TooLarge {
                    what: "the number of batches in a run",
                    limit: u64::from(u32::MAX),
                });
            }
            if entry.batch_count == 0 {
                entry.base_offset = info.base_offset;
            }
            entry.batch_count += 1;
            entry.last_offset = info.last_offset;
            entry.max_timestamp = entry.max_timestamp.max(info.max_timestamp);
            entry.record_count += info.record_count as u64;
            next = match info.last_offset.checked_add(1) {
                Some(n) => n,
                None => {
                    break Err(bad(BatchProblem::BadBaseOffset {
                        base_offset: info.base_offset,
                    }));
                }
            };
            pos += info.len;
        };
        match result {
            Ok(()) => {
                if let Some(open) = self.open.as_mut() {
                    open.entry = entry;
                }
                Ok(next)
            }
            Err(e) => {
                self.buf.truncate(mark);
                Err(e)
            }
        }
    }

    /// Ends the open run and returns its index entry, or `None` when no batch was pushed into
    /// it (an empty run is not stored).
    pub fn end_run(&mut self) -> Result<Option<RunEntry>> {
        let Some(open) = self.open.take() else {
            return Err(ObjectError::NoOpenRun);
        };
        let mut entry = open.entry;
        if entry.batch_count == 0 {
            return Ok(None);
        }
        let run = &self.buf[open.start..];
        entry.data_len = run.len() as u64;
        entry.data_crc = crc32c::crc32c(run);
        self.runs.push(entry);
        Ok(Some(entry))
    }

    /// One-call form of `begin_run`, `push_batches`, `end_run` for a run the caller already
    /// holds as one slice with offsets set.
    pub fn append_run(
        &mut self,
        topic_id: TopicId,
        partition: i32,
        batches: &[u8],
    ) -> Result<RunEntry> {
        self.begin_run(topic_id, partition)?;
        if let Err(e) = self.push_batches(batches) {
            self.open = None;
            return Err(e);
        }
        // Cannot be None: push_batches refused an empty slice.
        self.end_run()?.ok_or(ObjectError::NoOpenRun)
    }

    /// Adds one opaque metadata record (`kind` is the broker's). Records keep their order.
    pub fn push_meta(&mut self, kind: u16, payload: &[u8]) -> Result<()> {
        let Ok(len) = u32::try_from(payload.len()) else {
            return Err(ObjectError::TooLarge {
                what: "a meta record's payload",
                limit: u64::from(u32::MAX),
            });
        };
        if self.meta_count == u32::MAX {
            return Err(ObjectError::TooLarge {
                what: "the number of meta records",
                limit: u64::from(u32::MAX),
            });
        }
        self.meta.reserve(META_RECORD_HEADER_BYTES + payload.len());
        self.meta.put_u16(kind);
        self.meta.put_u32(len);
        self.meta.put_slice(payload);
        self.meta_count += 1;
        Ok(())
    }

    /// Writes the header, meta, index and footer and returns the whole object. The writer is
    /// then empty (as after [`clear`](Self::clear)) and reuses its buffer once the returned
    /// bytes are dropped.
    pub fn finish(&mut self, header: ObjectHeader) -> Result<Bytes> {
        if self.open.is_some() {
            return Err(ObjectError::RunStillOpen { op: "finish" });
        }
        self.start_object();
        let total = self.encoded_len();
        self.buf.reserve(total - self.buf.len());
        {
            let h = &mut self.buf[..HEADER_BYTES];
            h[hdr::MAGIC].copy_from_slice(&MAGIC);
            h[hdr::VERSION].copy_from_slice(&FORMAT_VERSION.to_be_bytes());
            h[hdr::FLAGS].copy_from_slice(&0u16.to_be_bytes());
            h[hdr::EPOCH].copy_from_slice(&header.writer_epoch.to_be_bytes());
            h[hdr::SEQUENCE].copy_from_slice(&header.sequence.to_be_bytes());
            h[hdr::CREATED].copy_from_slice(&header.created_ms.to_be_bytes());
            let crc = crc32c::crc32c(&h[..hdr::CRC.start]);
            h[hdr::CRC].copy_from_slice(&crc.to_be_bytes());
        }

        let meta_offset = self.buf.len();
        self.buf.put_u32(self.meta_count);
        self.buf.put_u32(0);
        self.buf.put_slice(&self.meta);
        let meta_crc = crc32c::crc32c(&self.buf[meta_offset..]);
        let meta_len = self.buf.len() - meta_offset;

        let index_offset = self.buf.len();
        self.buf.put_u32(self.runs.len() as u32);
        self.buf.put_u32(0);
        for entry in &self.runs {
            entry.encode(&mut self.buf);
        }
        let index_crc = crc32c::crc32c(&self.buf[index_offset..]);
        let index_len = self.buf.len() - index_offset;

        let footer_offset = self.buf.len();
        self.buf.put_u64(index_offset as u64);
        self.buf.put_u64(index_len as u64);
        self.buf.put_u64(meta_offset as u64);
        self.buf.put_u64(meta_len as u64);
        self.buf.put_u32(index_crc);
        self.buf.put_u32(meta_crc);
        self.buf.put_u64(header.writer_epoch);
        self.buf.put_u64(header.sequence);
        self.buf.put_i64(header.created_ms);
        self.buf.put_u16(FORMAT_VERSION);
        self.buf.put_u16(0);
        let footer_crc = crc32c::crc32c(&self.buf[footer_offset..]);
        self.buf.put_u32(footer_crc);
        self.buf.put_slice(&MAGIC);
        debug_assert_eq!(self.buf.len(), total);

        self.capacity_hint = self.capacity_hint.max(total);
        let object = self.buf.split().freeze();
        self.clear();
        Ok(object)
    }
}
