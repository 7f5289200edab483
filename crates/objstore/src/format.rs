//! # The flush-object format, version 1
//!
//! One flush of the object-storage mode writes ONE object holding the produce batches of every
//! partition that received data during the linger interval, plus the metadata records that must
//! survive with them. This module is the specification and the only implementation of that
//! byte layout; it does no I/O.
//!
//! ## Byte order and layout
//!
//! Every integer is **big-endian** (the byte order of the Kafka RecordBatches the object
//! carries, so one convention holds for every byte in the object). Offsets are bytes from the
//! start of the object. An object is five sections, back to back, in this order:
//!
//! ```text
//! [ header 40 B ][ data: runs of batches ][ meta ][ index ][ footer 80 B ]
//! 0              40                        M       I        L-80          L
//! ```
//!
//! **Header** (bytes `0..40`):
//!
//! | bytes  | field                                  | type    |
//! |--------|----------------------------------------|---------|
//! | 0..8   | magic `"SLUICEOB"` (ASCII)             | 8 bytes |
//! | 8..10  | format version (= 1)                   | u16     |
//! | 10..12 | flags (= 0; a reader rejects others)   | u16     |
//! | 12..20 | writer epoch (fencing generation)      | u64     |
//! | 20..28 | sequence number (also in the name)     | u64     |
//! | 28..36 | created time, ms since the Unix epoch  | i64     |
//! | 36..40 | CRC-32C of bytes 0..36                 | u32     |
//!
//! **Data** (bytes `40..M`): one *run* per (topic id, partition), runs in strictly ascending
//! order of (topic id as 16 unsigned bytes compared lexicographically, partition as i32), with
//! no gap: the first run starts at byte 40, each next run where the previous one ends, and the
//! last one ends at `M`. A run is one or more whole Kafka RecordBatch v2 batches back to back,
//! exactly as producers sent them except that their base offsets are the assigned offsets.
//! Within a run, each batch's base offset is greater than the previous batch's last offset
//! (base offset + last offset delta). An object with no runs has `M = 40`.
//!
//! **Meta** (bytes `M..I`): opaque metadata records the broker defines (topic creations and
//! deletions, committed offsets, group and producer state). Section header, then records:
//!
//! | bytes  | field                                   | type |
//! |--------|-----------------------------------------|------|
//! | 0..4   | record count `n`                        | u32  |
//! | 4..8   | reserved (= 0)                          | u32  |
//!
//! then `n` records, back to back, each:
//!
//! | record bytes | field                                  | type    |
//! |--------------|----------------------------------------|---------|
//! | 0..2         | kind (the broker's; opaque here)       | u16     |
//! | 2..6         | payload length `p`                     | u32     |
//! | 6..6+p       | payload                                | p bytes |
//!
//! The records fill the section exactly (no trailing bytes). Their order is kept.
//!
//! **Index** (bytes `I..L-80`): section header, then one 80-byte entry per run, in the runs'
//! order:
//!
//! | bytes  | field                                             | type     |
//! |--------|---------------------------------------------------|----------|
//! | 0..4   | entry count `r`                                   | u32      |
//! | 4..8   | reserved (= 0)                                    | u32      |
//!
//! | entry bytes | field                                          | type     |
//! |-------------|------------------------------------------------|----------|
//! | 0..16       | topic id (UUID bytes)                          | 16 bytes |
//! | 16..20      | partition (≥ 0)                                | i32      |
//! | 20..24      | batch count (≥ 1)                              | u32      |
//! | 24..32      | base offset of the first batch (≥ 0)           | i64      |
//! | 32..40      | last offset of the last batch (≥ base offset)  | i64      |
//! | 40..48      | max timestamp over the run's batches           | i64      |
//! | 48..56      | record count (sum over batches, ≤ offset span) | u64      |
//! | 56..64      | data offset: where the run starts in the object| u64      |
//! | 64..72      | data length (≥ 61 × batch count)               | u64      |
//! | 72..76      | CRC-32C of the run's bytes                     | u32      |
//! | 76..80      | reserved (= 0)                                 | u32      |
//!
//! The index length is exactly `8 + 80 × r`.
//!
//! **Footer** (the last 80 bytes, `L-80..L`):
//!
//! | bytes  | field                                          | type    |
//! |--------|------------------------------------------------|---------|
//! | 0..8   | index offset `I`                               | u64     |
//! | 8..16  | index length                                   | u64     |
//! | 16..24 | meta offset `M`                                | u64     |
//! | 24..32 | meta length                                    | u64     |
//! | 32..36 | CRC-32C of the whole index section             | u32     |
//! | 36..40 | CRC-32C of the whole meta section              | u32     |
//! | 40..48 | writer epoch (= header's)                      | u64     |
//! | 48..56 | sequence number (= header's)                   | u64     |
//! | 56..64 | created time ms (= header's)                   | i64     |
//! | 64..66 | format version (= 1)                           | u16     |
//! | 66..68 | flags (= 0)                                    | u16     |
//! | 68..72 | CRC-32C of footer bytes 0..68                  | u32     |
//! | 72..80 | magic `"SLUICEOB"`                             | 8 bytes |
//!
//! with `M ≥ 40`, `I = M + meta length`, `L = I + index length + 80`.
//!
//! ## What each CRC covers (all CRC-32C, Castagnoli, as Kafka batches use)
//!
//! - header CRC: header bytes 0..36. Footer CRC: footer bytes 0..68 (the magic is compared
//!   byte for byte instead).
//! - index CRC (in the footer): the whole index section, count and entries.
//! - meta CRC (in the footer): the whole meta section.
//! - run CRC (in the run's index entry): every byte of the run, **including the base offsets**
//!   the writer assigned: a batch's own CRC starts at its attributes (byte 21) and so does not
//!   cover its base offset, length, leader epoch or magic, which is what lets the writer patch
//!   offsets without recomputing batch CRCs; the run CRC closes that gap. Each batch's own CRC
//!   is checked when the batch is written into the object, so a reader that checks the run CRC
//!   needs not check every batch CRC again (Kafka clients check them anyway).
//!
//! So every byte of an object is covered by a CRC except the two magics, which are compared
//! byte for byte: nothing goes unchecked by a reader that uses
//! [`ObjectReader`](crate::ObjectReader), or the ranged path below.
//!
//! ## Reading, step by step (what a reader must check)
//!
//! 1. Footer: GET the last 80 bytes (`Range: bytes=-80`; the response gives the total length
//!    `L`). Check the magic, the footer CRC, version = 1, flags = 0, then the bounds:
//!    `M ≥ 40`, meta length ≥ 8, `I = M + meta length`, index length ≥ 8,
//!    `I + index length + 80 = L`, all without overflow. ([`parse_footer`](crate::parse_footer))
//! 2. Index: GET `I..I+index length`. Check its CRC against the footer's, reserved = 0, and
//!    `8 + 80 × r = index length` exactly (so a hostile count is refused before anything is
//!    sized by it). Then each entry: reserved = 0, partition ≥ 0, keys strictly ascending,
//!    batch count ≥ 1, `0 ≤ base ≤ last`, record count and batch count ≤ `last - base + 1`,
//!    data length ≥ 61 × batch count, data offset = 40 for the first entry and the previous
//!    entry's end for the others, and the last entry's end = `M`.
//!    ([`parse_index`](crate::parse_index))
//! 3. A partition's data: binary-search the index for (topic id, partition); GET the entry's
//!    `data offset..data offset + data length`; check its length and run CRC; walk the batch
//!    headers (batch length ≥ 49 and within the run, magic 2, last offset delta ≥ 0, record
//!    count ≥ 0 and ≤ last offset delta + 1, base offsets increasing) and check the first base
//!    offset, the last offset and the batch count against the entry.
//!    ([`locate`](crate::locate), [`verify_run`](crate::verify_run))
//! 4. Meta (rebuilds only): GET `M..I` (or `M..L-80` together with the index, one GET); check
//!    its CRC, reserved = 0, `6 × n ≤ length - 8`, and that the records fill it exactly.
//!    ([`parse_meta`](crate::parse_meta))
//! 5. Whole object (tail cache, rebuild by full GET): also the header (magic, CRC, version,
//!    flags) and that its epoch, sequence and created time equal the footer's.
//!
//! A writer must produce only objects that pass every check above;
//! [`ObjectWriter`](crate::ObjectWriter) also checks each batch's own CRC before copying it in.
//!
//! A later format version may change anything after the version fields; a reader refuses any
//! version it does not know rather than guess.
//!
//! ## Why this shape
//!
//! - **Footer at the end, fixed size**: the writer only knows where the index and meta sections
//!   are once the data is written; a reader fetches the last 80 bytes with one suffix-range GET
//!   (`Range: bytes=-80`, which also reports the object's total length), then the index with one
//!   ranged GET, without knowing the object's layout in advance.
//! - **One contiguous run per partition**: a fetch of one partition reads exactly one byte range
//!   (one ranged GET), never a scatter of pieces; a batch never straddles two runs.
//! - **Runs sorted, index sorted the same way**: [`Index::find`](crate::Index::find) is a binary
//!   search, the reader validates the layout in one linear pass (runs tile the data section with no
//!   gap and no overlap), and "one run per partition" is enforced by the order itself.
//! - **Meta and index after the data, side by side**: neither is complete until the last batch
//!   is in, so the writer appends them at the end instead of reserving room up front; being
//!   adjacent, a rebuild reads both with one ranged GET
//!   ([`Footer::meta_and_index_range`]) without touching the data.
//! - **Epoch and sequence in both header and footer**: the footer alone (one small GET) tells a
//!   rebuild which writer generation produced the object; the header lets a streaming reader
//!   know it from the first bytes. They must agree.
//!
//! ## Hostile input
//!
//! Parsing never panics and never allocates: [`Index`](crate::Index) and [`Meta`](crate::Meta) are
//! views over the caller's bytes, and every declared count is checked against the bytes present
//! before it is used (a count of `u32::MAX` entries in a 100-byte index is refused at once). All
//! arithmetic on declared values is checked.
//!
//! ## Allocation on the write path
//!
//! [`ObjectWriter`](crate::ObjectWriter) appends each batch's bytes to one reusable buffer with
//! one copy (`extend_from_slice`), patches and checks header fields in place, and keeps one
//! [`RunEntry`] per run in a reusable vector: it never looks inside a batch's records, so its
//! work and its allocations do not depend on the number of records (a test counts the
//! allocations: encoding 1 or 1,000 records per batch allocates the same, and nothing once the
//! buffers are warm).

use core::ops::Range;

use bytes::{BufMut, BytesMut};
use sluice_batch::{MAGIC_V2, crc_of, header as bh, read_i32, read_i64, read_u32};

use crate::error::{BatchProblem, MalformedWhat, ObjectError, Result, Section};

/// The 8 magic bytes at the start of the header and at the end of the footer.
pub const MAGIC: [u8; 8] = *b"SLUICEOB";
/// The format version this build writes and reads.
pub const FORMAT_VERSION: u16 = 1;
/// Size of the header; the data section starts here.
pub const HEADER_BYTES: usize = 40;
/// Size of the footer, the object's last bytes.
pub const FOOTER_BYTES: usize = 80;
/// Size of the meta section's header (record count, reserved).
pub const META_HEADER_BYTES: usize = 8;
/// Size of one meta record's header (kind, payload length).
pub const META_RECORD_HEADER_BYTES: usize = 6;
/// Size of the index section's header (entry count, reserved).
pub const INDEX_HEADER_BYTES: usize = 8;
/// Size of one index entry.
pub const INDEX_ENTRY_BYTES: usize = 80;
/// The bytes an object has beyond its data and meta payloads when it holds no run: header,
/// meta header, index header, footer.
pub const EMPTY_OBJECT_BYTES: usize =
    HEADER_BYTES + META_HEADER_BYTES + INDEX_HEADER_BYTES + FOOTER_BYTES;

/// Header field positions.
pub(crate) mod hdr {
    use core::ops::Range;
    pub const MAGIC: Range<usize> = 0..8;
    pub const VERSION: Range<usize> = 8..10;
    pub const FLAGS: Range<usize> = 10..12;
    pub const EPOCH: Range<usize> = 12..20;
    pub const SEQUENCE: Range<usize> = 20..28;
    pub const CREATED: Range<usize> = 28..36;
    pub const CRC: Range<usize> = 36..40;
    const _: () = assert!(CRC.end == super::HEADER_BYTES);
}

/// Footer field positions (relative to the footer's start).
pub(crate) mod ftr {
    use core::ops::Range;
    pub const INDEX_OFFSET: Range<usize> = 0..8;
    pub const INDEX_LEN: Range<usize> = 8..16;
    pub const META_OFFSET: Range<usize> = 16..24;
    pub const META_LEN: Range<usize> = 24..32;
    pub const INDEX_CRC: Range<usize> = 32..36;
    pub const META_CRC: Range<usize> = 36..40;
    pub const EPOCH: Range<usize> = 40..48;
    pub const SEQUENCE: Range<usize> = 48..56;
    pub const CREATED: Range<usize> = 56..64;
    pub const VERSION: Range<usize> = 64..66;
    pub const FLAGS: Range<usize> = 66..68;
    pub const CRC: Range<usize> = 68..72;
    pub const MAGIC: Range<usize> = 72..80;
    const _: () = assert!(MAGIC.end == super::FOOTER_BYTES);
}

/// Index entry field positions (relative to the entry's start).
pub(crate) mod ent {
    use core::ops::Range;
    pub const TOPIC: Range<usize> = 0..16;
    pub const PARTITION: Range<usize> = 16..20;
    pub const BATCHES: Range<usize> = 20..24;
    pub const BASE_OFFSET: Range<usize> = 24..32;
    pub const LAST_OFFSET: Range<usize> = 32..40;
    pub const MAX_TIMESTAMP: Range<usize> = 40..48;
    pub const RECORDS: Range<usize> = 48..56;
    pub const DATA_OFFSET: Range<usize> = 56..64;
    pub const DATA_LEN: Range<usize> = 64..72;
    pub const DATA_CRC: Range<usize> = 72..76;
    pub const RESERVED: Range<usize> = 76..80;
    const _: () = assert!(RESERVED.end == super::INDEX_ENTRY_BYTES);
}

/// A topic's 16-byte UUID, compared as unsigned bytes (the order runs are stored in).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct TopicId(pub [u8; 16]);

impl core::fmt::Display for TopicId {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        for (i, b) in self.0.iter().enumerate() {
            if matches!(i, 4 | 6 | 8 | 10) {
                f.write_str("-")?;
            }
            write!(f, "{b:02x}")?;
        }
        Ok(())
    }
}

/// The identity of one object, stored in both its header and its footer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ObjectHeader {
    /// The writer's fencing generation.
    pub writer_epoch: u64,
    /// The object's sequence number (its name is derived from it).
    pub sequence: u64,
    /// When the object was written, ms since the Unix epoch (from the caller's clock).
    pub created_ms: i64,
}

/// The decoded footer: where the meta and index sections are, and their CRCs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Footer {
    pub header: ObjectHeader,
    pub index_offset: u64,
    pub index_len: u64,
    pub index_crc: u32,
    pub meta_offset: u64,
    pub meta_len: u64,
    pub meta_crc: u32,
}

impl Footer {
    /// The object's total length, as the footer implies it.
    pub fn object_len(&self) -> u64 {
        // `parse_footer` checked this sum; saturating keeps a hand-made footer from panicking.
        self.index_offset
            .saturating_add(self.index_len)
            .saturating_add(FOOTER_BYTES as u64)
    }
    /// Byte range of the index section (for a ranged GET).
    pub fn index_range(&self) -> Range<u64> {
        self.index_offset..self.index_offset.saturating_add(self.index_len)
    }
    /// Byte range of the meta section (for a ranged GET).
    pub fn meta_range(&self) -> Range<u64> {
        self.meta_offset..self.meta_offset.saturating_add(self.meta_len)
    }
    /// Byte range of the data section (all runs).
    pub fn data_range(&self) -> Range<u64> {
        HEADER_BYTES as u64..self.meta_offset
    }
    /// Byte range of the meta and index sections together (they are adjacent: one GET).
    pub fn meta_and_index_range(&self) -> Range<u64> {
        self.meta_offset..self.index_offset.saturating_add(self.index_len)
    }
}

/// One index entry: where one partition's run is and what it holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RunEntry {
    pub topic_id: TopicId,
    pub partition: i32,
    pub batch_count: u32,
    pub base_offset: i64,
    pub last_offset: i64,
    pub max_timestamp: i64,
    pub record_count: u64,
    pub data_offset: u64,
    pub data_len: u64,
    pub data_crc: u32,
}

impl RunEntry {
    /// Byte range of the run in the object (for a ranged GET).
    pub fn range(&self) -> Range<u64> {
        self.data_offset..self.data_offset.saturating_add(self.data_len)
    }
    /// Whether the run holds `offset` (between its first and last offset, both included).
    pub fn contains(&self, offset: i64) -> bool {
        self.base_offset <= offset && offset <= self.last_offset
    }
    pub(crate) fn key(&self) -> (TopicId, i32) {
        (self.topic_id, self.partition)
    }
    pub(crate) fn encode(&self, out: &mut BytesMut) {
        out.put_slice(&self.topic_id.0);
        out.put_i32(self.partition);
        out.put_u32(self.batch_count);
        out.put_i64(self.base_offset);
        out.put_i64(self.last_offset);
        out.put_i64(self.max_timestamp);
        out.put_u64(self.record_count);
        out.put_u64(self.data_offset);
        out.put_u64(self.data_len);
        out.put_u32(self.data_crc);
        out.put_u32(0);
    }
    /// Decodes an entry from exactly [`INDEX_ENTRY_BYTES`] bytes.
    pub(crate) fn decode(b: &[u8]) -> Self {
        let mut topic = [0u8; 16];
        topic.copy_from_slice(&b[ent::TOPIC]);
        RunEntry {
            topic_id: TopicId(topic),
            partition: be_i32(b, ent::PARTITION),
            batch_count: be_u32(b, ent::BATCHES),
            base_offset: be_i64(b, ent::BASE_OFFSET),
            last_offset: be_i64(b, ent::LAST_OFFSET),
            max_timestamp: be_i64(b, ent::MAX_TIMESTAMP),
            record_count: be_u64(b, ent::RECORDS),
            data_offset: be_u64(b, ent::DATA_OFFSET),
            data_len: be_u64(b, ent::DATA_LEN),
            data_crc: be_u32(b, ent::DATA_CRC),
        }
    }
}

// Big-endian readers over fixed ranges. Callers have checked the slice is long enough; the
// `try_into` cannot fail for a range of the matching width.
pub(crate) fn be_u16(b: &[u8], r: Range<usize>) -> u16 {
    u16::from_be_bytes(b[r].try_into().unwrap_or([0; 2]))
}
pub(crate) fn be_u32(b: &[u8], r: Range<usize>) -> u32 {
    u32::from_be_bytes(b[r].try_into().unwrap_or([0; 4]))
}
pub(crate) fn be_i32(b: &[u8], r: Range<usize>) -> i32 {
    i32::from_be_bytes(b[r].try_into().unwrap_or([0; 4]))
}
pub(crate) fn be_u64(b: &[u8], r: Range<usize>) -> u64 {
    u64::from_be_bytes(b[r].try_into().unwrap_or([0; 8]))
}
pub(crate) fn be_i64(b: &[u8], r: Range<usize>) -> i64 {
    i64::from_be_bytes(b[r].try_into().unwrap_or([0; 8]))
}
pub(crate) fn magic_at(b: &[u8], r: Range<usize>) -> [u8; 8] {
    b[r].try_into().unwrap_or([0; 8])
}

pub(crate) fn malformed(section: Section, at: u64, what: MalformedWhat) -> ObjectError {
    ObjectError::Malformed { section, at, what }
}

pub(crate) fn bounds(section: Section, at: u64, detail: &'static str) -> ObjectError {
    malformed(section, at, MalformedWhat::Bounds { detail })
}

// ---------------------------------------------------------------------------------------------
// Batches

/// What one checked batch header says.
#[derive(Debug, Clone, Copy)]
pub(crate) struct BatchInfo {
    pub(crate) len: usize,
    pub(crate) base_offset: i64,
    pub(crate) last_offset: i64,
    pub(crate) max_timestamp: i64,
    pub(crate) record_count: i32,
}

/// Checks the batch that starts at `buf[0]`: its length fits, its magic is 2, its offsets are
/// sane and, when `check_crc`, its own CRC. Reads only the header (and the CRC'd bytes).
pub(crate) fn check_batch(
    buf: &[u8],
    check_crc: bool,
) -> core::result::Result<BatchInfo, BatchProblem> {
    if buf.len() < bh::BYTES {
        return Err(BatchProblem::Truncated {
            available: buf.len() as u64,
            needed: bh::BYTES as u64,
        });
    }
    let declared = read_i32(buf, bh::BATCH_LENGTH);
    let min = (bh::BYTES - bh::LOG_OVERHEAD_BYTES) as i32;
    if declared < min {
        return Err(BatchProblem::BadLength { declared });
    }
    let len = bh::LOG_OVERHEAD_BYTES + declared as usize;
    if buf.len() < len {
        return Err(BatchProblem::Truncated {
            available: buf.len() as u64,
            needed: len as u64,
        });
    }
    let magic = buf[bh::MAGIC.start] as i8;
    if magic != MAGIC_V2 {
        return Err(BatchProblem::BadMagic { magic });
    }
    let batch = &buf[..len];
    if check_crc {
        let stored = read_u32(batch, bh::CRC);
        let computed = crc_of(batch);
        if stored != computed {
            return Err(BatchProblem::BadCrc { stored, computed });
        }
    }
    let delta = read_i32(batch, bh::LAST_OFFSET_DELTA);
    if delta < 0 {
        return Err(BatchProblem::BadLastOffsetDelta { delta });
    }
    let record_count = read_i32(batch, bh::RECORD_COUNT);
    if record_count < 0 {
        return Err(BatchProblem::BadRecordCount {
            count: record_count,
        });
    }
    if i64::from(record_count) > i64::from(delta) + 1 {
        // More records than offsets: the index's record count would exceed its offset span.
        return Err(BatchProblem::MoreRecordsThanOffsets {
            count: record_count,
            delta,
        });
    }
    let base_offset = read_i64(batch, bh::BASE_OFFSET);
    let last_offset = match base_offset.checked_add(i64::from(delta)) {
        Some(last) if base_offset >= 0 => last,
        _ => return Err(BatchProblem::BadBaseOffset { base_offset }),
    };
    Ok(BatchInfo {
        len,
        base_offset,
        last_offset,
        max_timestamp: read_i64(batch, bh::MAX_TIMESTAMP),
        record_count,
    })
}

/// Assigns consecutive offsets to the whole batches in `run`, starting at `first_offset`: each
/// batch's base offset becomes the previous batch's last offset + 1 (its last offset is its
/// base offset + its last offset delta). Every batch's length, magic and CRC are checked first;
/// on error nothing is changed. Returns the offset after the last batch's last offset.
///
/// The batch CRC does not cover the base offset, so patching leaves every batch valid.
pub fn patch_base_offsets(run: &mut [u8], first_offset: i64) -> Result<i64> {
    // Check everything before changing anything; then patch.
    let next = assign_offsets(run, first_offset, false)?;
    assign_offsets(run, first_offset, true)?;
    Ok(next)
}

/// Walks the batches of `run` assigning offsets from `first_offset` (writing them when
/// `write`); checks each batch (its CRC only on the checking pass). Returns the next offset.
fn assign_offsets(run: &mut [u8], first_offset: i64, write: bool) -> Result<i64> {
    if run.is_empty() {
        return Err(empty_batches());
    }
    let mut pos = 0;
    let mut next = first_offset;
    while pos < run.len() {
        let at = pos as u64;
        let bad = |problem| ObjectError::BadBatch {
            section: Section::Data,
            at,
            problem,
        };
        let batch = &mut run[pos..];
        if batch.len() >= bh::BASE_OFFSET.end {
            // Check the batch as it will be: with its new base offset (not CRC-covered).
            let old = read_i64(batch, bh::BASE_OFFSET);
            batch[bh::BASE_OFFSET].copy_from_slice(&next.to_be_bytes());
            let checked = check_batch(batch, !write);
            if !write {
                batch[bh::BASE_OFFSET].copy_from_slice(&old.to_be_bytes());
            }
            let info = checked.map_err(bad)?;
            next = info
                .last_offset
                .checked_add(1)
                .ok_or(bad(BatchProblem::BadBaseOffset {
                    base_offset: info.base_offset,
                }))?;
            pos += info.len;
        } else {
            return Err(bad(BatchProblem::Truncated {
                available: batch.len() as u64,
                needed: bh::BYTES as u64,
            }));
        }
    }
    Ok(next)
}

pub(crate) fn empty_batches() -> ObjectError {
    ObjectError::BadBatch {
        section: Section::Data,
        at: 0,
        problem: BatchProblem::Truncated {
            available: 0,
            needed: bh::BYTES as u64,
        },
    }
}
