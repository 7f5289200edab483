//! Decoding flush objects (layout in [`crate::format`]): footer, header, index, meta and runs,
//! each checked before use. Nothing here panics or allocates, whatever the input.

use core::ops::Range;

use sluice_batch::header as bh;

use crate::error::{BatchProblem, MalformedWhat, ObjectError, Result, Section};
use crate::format::{
    FOOTER_BYTES, FORMAT_VERSION, Footer, HEADER_BYTES, INDEX_ENTRY_BYTES, INDEX_HEADER_BYTES,
    MAGIC, META_HEADER_BYTES, META_RECORD_HEADER_BYTES, ObjectHeader, RunEntry, TopicId, be_i64,
    be_u16, be_u32, be_u64, bounds, check_batch, ent, ftr, hdr, magic_at, malformed,
};

/// Decodes and checks a header from the first [`HEADER_BYTES`] of `head`.
pub fn parse_header(head: &[u8]) -> Result<ObjectHeader> {
    if head.len() < HEADER_BYTES {
        return Err(ObjectError::Truncated {
            section: Section::Header,
            at: 0,
            needed: HEADER_BYTES as u64,
            available: head.len() as u64,
        });
    }
    let h = &head[..HEADER_BYTES];
    let found = magic_at(h, hdr::MAGIC);
    if found != MAGIC {
        return Err(ObjectError::BadMagic {
            section: Section::Header,
            at: 0,
            found,
            expected: MAGIC,
        });
    }
    let stored = be_u32(h, hdr::CRC);
    let computed = crc32c::crc32c(&h[..hdr::CRC.start]);
    if stored != computed {
        return Err(ObjectError::BadCrc {
            section: Section::Header,
            at: 0,
            stored,
            computed,
        });
    }
    let version = be_u16(h, hdr::VERSION);
    if version != FORMAT_VERSION {
        return Err(ObjectError::UnsupportedVersion {
            section: Section::Header,
            at: hdr::VERSION.start as u64,
            found: version,
            supported: FORMAT_VERSION,
        });
    }
    let flags = be_u16(h, hdr::FLAGS);
    if flags != 0 {
        return Err(malformed(
            Section::Header,
            hdr::FLAGS.start as u64,
            MalformedWhat::ReservedNotZero {
                value: u64::from(flags),
            },
        ));
    }
    Ok(ObjectHeader {
        writer_epoch: be_u64(h, hdr::EPOCH),
        sequence: be_u64(h, hdr::SEQUENCE),
        created_ms: be_i64(h, hdr::CREATED),
    })
}

/// Decodes and checks the footer from the last [`FOOTER_BYTES`] of `tail` (what a suffix-range
/// GET returned), for an object of `object_len` bytes (the total length the GET reported).
pub fn parse_footer(tail: &[u8], object_len: u64) -> Result<Footer> {
    let footer_at = object_len.saturating_sub(FOOTER_BYTES as u64);
    if tail.len() < FOOTER_BYTES || object_len < (HEADER_BYTES + FOOTER_BYTES) as u64 {
        return Err(ObjectError::Truncated {
            section: Section::Footer,
            at: footer_at,
            needed: FOOTER_BYTES as u64,
            available: (tail.len() as u64).min(object_len),
        });
    }
    let f = &tail[tail.len() - FOOTER_BYTES..];
    let at = |r: Range<usize>| footer_at + r.start as u64;
    let found = magic_at(f, ftr::MAGIC);
    if found != MAGIC {
        return Err(ObjectError::BadMagic {
            section: Section::Footer,
            at: at(ftr::MAGIC),
            found,
            expected: MAGIC,
        });
    }
    let stored = be_u32(f, ftr::CRC);
    let computed = crc32c::crc32c(&f[..ftr::CRC.start]);
    if stored != computed {
        return Err(ObjectError::BadCrc {
            section: Section::Footer,
            at: footer_at,
            stored,
            computed,
        });
    }
    let version = be_u16(f, ftr::VERSION);
    if version != FORMAT_VERSION {
        return Err(ObjectError::UnsupportedVersion {
            section: Section::Footer,
            at: at(ftr::VERSION),
            found: version,
            supported: FORMAT_VERSION,
        });
    }
    let flags = be_u16(f, ftr::FLAGS);
    if flags != 0 {
        return Err(malformed(
            Section::Footer,
            at(ftr::FLAGS),
            MalformedWhat::ReservedNotZero {
                value: u64::from(flags),
            },
        ));
    }
    let footer = Footer {
        header: ObjectHeader {
            writer_epoch: be_u64(f, ftr::EPOCH),
            sequence: be_u64(f, ftr::SEQUENCE),
            created_ms: be_i64(f, ftr::CREATED),
        },
        index_offset: be_u64(f, ftr::INDEX_OFFSET),
        index_len: be_u64(f, ftr::INDEX_LEN),
        index_crc: be_u32(f, ftr::INDEX_CRC),
        meta_offset: be_u64(f, ftr::META_OFFSET),
        meta_len: be_u64(f, ftr::META_LEN),
        meta_crc: be_u32(f, ftr::META_CRC),
    };
    if footer.meta_offset < HEADER_BYTES as u64 {
        return Err(bounds(
            Section::Footer,
            at(ftr::META_OFFSET),
            "meta offset lies inside the header",
        ));
    }
    if footer.meta_len < META_HEADER_BYTES as u64 {
        return Err(bounds(
            Section::Footer,
            at(ftr::META_LEN),
            "meta length is below the meta section's header",
        ));
    }
    if footer.meta_offset.checked_add(footer.meta_len) != Some(footer.index_offset) {
        return Err(bounds(
            Section::Footer,
            at(ftr::INDEX_OFFSET),
            "the index does not start where the meta section ends",
        ));
    }
    if footer.index_len < INDEX_HEADER_BYTES as u64 {
        return Err(bounds(
            Section::Footer,
            at(ftr::INDEX_LEN),
            "index length is below the index's header",
        ));
    }
    if footer
        .index_offset
        .checked_add(footer.index_len)
        .and_then(|end| end.checked_add(FOOTER_BYTES as u64))
        != Some(object_len)
    {
        return Err(bounds(
            Section::Footer,
            at(ftr::INDEX_LEN),
            "the index does not end where the footer starts",
        ));
    }
    Ok(footer)
}

/// A checked index: a view over the index section's bytes (nothing copied or allocated).
#[derive(Debug, Clone, Copy)]
pub struct Index<'a> {
    entries: &'a [u8],
    len: u32,
}

/// The checks the index and meta sections share: `bytes` has the length the footer gives,
/// matches its CRC, and its 8-byte header has a zero reserved word. Returns the declared count.
fn check_section(bytes: &[u8], section: Section, base: u64, len: u64, crc: u32) -> Result<u32> {
    if bytes.len() as u64 != len {
        return Err(ObjectError::Truncated {
            section,
            at: base,
            needed: len,
            available: bytes.len() as u64,
        });
    }
    let computed = crc32c::crc32c(bytes);
    if computed != crc {
        return Err(ObjectError::BadCrc {
            section,
            at: base,
            stored: crc,
            computed,
        });
    }
    let reserved = be_u32(bytes, 4..8);
    if reserved != 0 {
        return Err(malformed(
            section,
            base + 4,
            MalformedWhat::ReservedNotZero {
                value: u64::from(reserved),
            },
        ));
    }
    Ok(be_u32(bytes, 0..4))
}

/// Decodes and checks the index section: `bytes` is exactly the footer's
/// [`index_range`](Footer::index_range). Checks the CRC, the declared count against the length,
/// and every entry: ascending unique (topic id, partition), runs tiling the data section from
/// byte 40 to the meta offset, sane offsets and counts.
pub fn parse_index<'a>(bytes: &'a [u8], footer: &Footer) -> Result<Index<'a>> {
    let base = footer.index_offset;
    // The footer guarantees at least the index header.
    let count = check_section(
        bytes,
        Section::Index,
        base,
        footer.index_len,
        footer.index_crc,
    )?;
    let entries = &bytes[INDEX_HEADER_BYTES..];
    let needed = u64::from(count) * INDEX_ENTRY_BYTES as u64;
    if needed != entries.len() as u64 {
        return Err(malformed(
            Section::Index,
            base,
            MalformedWhat::CountMismatch {
                count,
                needed,
                available: entries.len() as u64,
            },
        ));
    }
    let index = Index {
        entries,
        len: count,
    };
    let mut expected_offset = HEADER_BYTES as u64;
    let mut previous: Option<(TopicId, i32)> = None;
    for i in 0..count {
        let e = index.entry(i);
        let at = base + INDEX_HEADER_BYTES as u64 + u64::from(i) * INDEX_ENTRY_BYTES as u64;
        let bad = |detail| {
            malformed(
                Section::Index,
                at,
                MalformedWhat::Entry { entry: i, detail },
            )
        };
        let reserved = be_u32(
            &entries[i as usize * INDEX_ENTRY_BYTES..(i as usize + 1) * INDEX_ENTRY_BYTES],
            ent::RESERVED,
        );
        if reserved != 0 {
            return Err(bad("reserved field is not zero"));
        }
        if e.partition < 0 {
            return Err(bad("negative partition"));
        }
        if previous.is_some_and(|p| p >= e.key()) {
            return Err(bad(
                "not after the previous entry in (topic id, partition) order",
            ));
        }
        previous = Some(e.key());
        if e.batch_count == 0 {
            return Err(bad("no batches"));
        }
        if e.base_offset < 0 || e.last_offset < e.base_offset {
            return Err(bad("offsets out of order or negative"));
        }
        // Offsets span ≥ 1, so this is at least 1 and cannot overflow as u128.
        let span = (e.last_offset as i128 - e.base_offset as i128 + 1) as u128;
        if u128::from(e.record_count) > span || u128::from(e.batch_count) > span {
            return Err(bad("more records or batches than offsets"));
        }
        if e.data_offset != expected_offset {
            return Err(bad("run does not start where the previous one ends"));
        }
        if e.data_len < u64::from(e.batch_count) * bh::BYTES as u64 {
            return Err(bad("run is shorter than its batch headers"));
        }
        expected_offset = match e.data_offset.checked_add(e.data_len) {
            Some(end) if end <= footer.meta_offset => end,
            _ => return Err(bad("run extends past the data section")),
        };
    }
    if expected_offset != footer.meta_offset {
        return Err(bounds(
            Section::Index,
            base,
            "the runs do not fill the data section up to the meta offset",
        ));
    }
    Ok(index)
}

impl<'a> Index<'a> {
    /// Number of runs.
    pub fn len(&self) -> usize {
        self.len as usize
    }
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
    fn entry(&self, i: u32) -> RunEntry {
        let at = i as usize * INDEX_ENTRY_BYTES;
        RunEntry::decode(&self.entries[at..at + INDEX_ENTRY_BYTES])
    }
    /// The `i`th run, or `None` past the end.
    pub fn get(&self, i: usize) -> Option<RunEntry> {
        (i < self.len as usize).then(|| self.entry(i as u32))
    }
    /// Every run, in (topic id, partition) order.
    pub fn iter(&self) -> impl ExactSizeIterator<Item = RunEntry> + 'a {
        let this = *self;
        (0..self.len).map(move |i| this.entry(i))
    }
    /// The run of `partition` of `topic_id` (binary search).
    pub fn find(&self, topic_id: TopicId, partition: i32) -> Option<RunEntry> {
        let (mut lo, mut hi) = (0u32, self.len);
        while lo < hi {
            let mid = lo + (hi - lo) / 2;
            let e = self.entry(mid);
            match e.key().cmp(&(topic_id, partition)) {
                core::cmp::Ordering::Less => lo = mid + 1,
                core::cmp::Ordering::Greater => hi = mid,
                core::cmp::Ordering::Equal => return Some(e),
            }
        }
        None
    }
}

/// Finds the run of `partition` of `topic_id` holding `offset` and returns its index entry (its
/// [`range`](RunEntry::range) is the one ranged GET to make). Then [`batches_from`] cuts the
/// fetched run at the batch holding `offset`.
pub fn locate(
    index: &Index<'_>,
    topic_id: TopicId,
    partition: i32,
    offset: i64,
) -> Option<RunEntry> {
    index
        .find(topic_id, partition)
        .filter(|e| e.contains(offset))
}

/// A checked meta section: a view over its bytes.
#[derive(Debug, Clone, Copy)]
pub struct Meta<'a> {
    records: &'a [u8],
    len: u32,
}

/// One metadata record.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MetaRecord<'a> {
    pub kind: u16,
    pub payload: &'a [u8],
}

/// Decodes and checks the meta section: `bytes` is exactly the footer's
/// [`meta_range`](Footer::meta_range). Checks the CRC, the declared count against the bytes
/// present, and that the records fill the section exactly.
pub fn parse_meta<'a>(bytes: &'a [u8], footer: &Footer) -> Result<Meta<'a>> {
    let base = footer.meta_offset;
    let count = check_section(bytes, Section::Meta, base, footer.meta_len, footer.meta_crc)?;
    let records = &bytes[META_HEADER_BYTES..];
    let needed = u64::from(count) * META_RECORD_HEADER_BYTES as u64;
    if needed > records.len() as u64 {
        return Err(malformed(
            Section::Meta,
            base,
            MalformedWhat::CountMismatch {
                count,
                needed,
                available: records.len() as u64,
            },
        ));
    }
    let mut pos = 0usize;
    for _ in 0..count {
        let at = base + (META_HEADER_BYTES + pos) as u64;
        let rest = &records[pos..];
        if rest.len() < META_RECORD_HEADER_BYTES {
            return Err(ObjectError::Truncated {
                section: Section::Meta,
                at,
                needed: META_RECORD_HEADER_BYTES as u64,
                available: rest.len() as u64,
            });
        }
        let len = be_u32(rest, 2..6) as u64;
        let total = META_RECORD_HEADER_BYTES as u64 + len;
        if total > rest.len() as u64 {
            return Err(ObjectError::Truncated {
                section: Section::Meta,
                at,
                needed: total,
                available: rest.len() as u64,
            });
        }
        pos += total as usize;
    }
    if pos != records.len() {
        return Err(malformed(
            Section::Meta,
            base + (META_HEADER_BYTES + pos) as u64,
            MalformedWhat::TrailingBytes {
                trailing: (records.len() - pos) as u64,
            },
        ));
    }
    Ok(Meta {
        records,
        len: count,
    })
}

impl<'a> Meta<'a> {
    /// Number of records.
    pub fn len(&self) -> usize {
        self.len as usize
    }
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
    /// The records in the order they were written.
    pub fn iter(&self) -> MetaIter<'a> {
        MetaIter { rest: self.records }
    }
}

/// Iterator over a checked meta section's records.
#[derive(Debug, Clone)]
pub struct MetaIter<'a> {
    rest: &'a [u8],
}

impl<'a> Iterator for MetaIter<'a> {
    type Item = MetaRecord<'a>;
    fn next(&mut self) -> Option<MetaRecord<'a>> {
        // `parse_meta` checked every record fits; `get` keeps this panic-free regardless.
        let head = self.rest.get(..META_RECORD_HEADER_BYTES)?;
        let kind = be_u16(head, 0..2);
        let len = be_u32(head, 2..6) as usize;
        let end = META_RECORD_HEADER_BYTES.checked_add(len)?;
        let payload = self.rest.get(META_RECORD_HEADER_BYTES..end)?;
        self.rest = &self.rest[end..];
        Some(MetaRecord { kind, payload })
    }
}

/// Checks a run fetched with a ranged GET against its index entry: its length, its CRC, and a
/// walk over its batch headers (lengths, magic, increasing offsets, the first base offset and
/// the last offset and batch count the entry states). Returns the run, now safe to serve.
pub fn verify_run<'a>(run: &'a [u8], entry: &RunEntry) -> Result<&'a [u8]> {
    let base = entry.data_offset;
    if run.len() as u64 != entry.data_len {
        return Err(ObjectError::Truncated {
            section: Section::Data,
            at: base,
            needed: entry.data_len,
            available: run.len() as u64,
        });
    }
    let computed = crc32c::crc32c(run);
    if computed != entry.data_crc {
        return Err(ObjectError::BadCrc {
            section: Section::Data,
            at: base,
            stored: entry.data_crc,
            computed,
        });
    }
    let mut pos = 0;
    let mut batches = 0u32;
    let mut last: Option<i64> = None;
    while pos < run.len() {
        let at = base + pos as u64;
        let bad = |problem| ObjectError::BadBatch {
            section: Section::Data,
            at,
            problem,
        };
        // The run CRC covers every byte, so batch CRCs need no second pass here.
        let info = check_batch(&run[pos..], false).map_err(bad)?;
        match last {
            None if info.base_offset != entry.base_offset => {
                return Err(run_mismatch(base, batches, "first base offset"));
            }
            Some(prev) if info.base_offset <= prev => {
                return Err(bad(BatchProblem::OffsetNotIncreasing {
                    base_offset: info.base_offset,
                    previous_last: prev,
                }));
            }
            _ => {}
        }
        last = Some(info.last_offset);
        batches = batches.saturating_add(1);
        pos += info.len;
    }
    if batches != entry.batch_count {
        return Err(run_mismatch(base, batches, "batch count"));
    }
    if last != Some(entry.last_offset) {
        return Err(run_mismatch(base, batches, "last offset"));
    }
    Ok(run)
}

fn run_mismatch(at: u64, batches: u32, detail: &'static str) -> ObjectError {
    malformed(
        Section::Data,
        at,
        MalformedWhat::RunMismatch { batches, detail },
    )
}

/// The parts of a read (whole batches from consecutive runs) as one buffer of `total` bytes:
/// no copy for none or one part.
pub fn join_parts(mut parts: Vec<bytes::Bytes>, total: usize) -> bytes::Bytes {
    match parts.len() {
        0 => bytes::Bytes::new(),
        1 => parts.pop().expect("one part"),
        _ => {
            let mut all = bytes::BytesMut::with_capacity(total);
            for p in &parts {
                all.extend_from_slice(p);
            }
            all.freeze()
        }
    }
}

/// Cuts a run (checked with [`verify_run`]) at the batch holding `offset`: the returned bytes
/// start with that batch (or the first batch after `offset` when it falls in a gap left by
/// compaction) and go to the run's end. `None` when every batch ends before `offset`.
pub fn batches_from(run: &[u8], offset: i64) -> Option<&[u8]> {
    let mut pos = 0;
    while pos < run.len() {
        let info = check_batch(&run[pos..], false).ok()?;
        if info.last_offset >= offset {
            return Some(&run[pos..]);
        }
        pos += info.len;
    }
    None
}

/// A whole object in memory (a tail-cache entry, or a rebuild that read the object), checked
/// section by section: header, footer, meta, index, and header against footer. Runs are
/// checked when asked for ([`ObjectReader::run`]).
#[derive(Debug, Clone, Copy)]
pub struct ObjectReader<'a> {
    object: &'a [u8],
    footer: Footer,
    index: Index<'a>,
    meta: Meta<'a>,
}

impl<'a> ObjectReader<'a> {
    pub fn new(object: &'a [u8]) -> Result<Self> {
        let footer = parse_footer(object, object.len() as u64)?;
        let header = parse_header(object)?;
        for (field, h, f) in [
            (
                "writer epoch",
                header.writer_epoch,
                footer.header.writer_epoch,
            ),
            ("sequence", header.sequence, footer.header.sequence),
            (
                "created time",
                header.created_ms as u64,
                footer.header.created_ms as u64,
            ),
        ] {
            if h != f {
                return Err(ObjectError::HeaderFooterMismatch {
                    field,
                    header: h,
                    footer: f,
                });
            }
        }
        // parse_footer checked these ranges lie inside an object of this length.
        let slice = |r: Range<u64>| &object[r.start as usize..r.end as usize];
        let meta = parse_meta(slice(footer.meta_range()), &footer)?;
        let index = parse_index(slice(footer.index_range()), &footer)?;
        Ok(ObjectReader {
            object,
            footer,
            index,
            meta,
        })
    }
    pub fn header(&self) -> ObjectHeader {
        self.footer.header
    }
    pub fn footer(&self) -> &Footer {
        &self.footer
    }
    pub fn index(&self) -> &Index<'a> {
        &self.index
    }
    pub fn meta(&self) -> &Meta<'a> {
        &self.meta
    }
    /// The checked bytes of the run `entry` describes (from this object's index).
    pub fn run(&self, entry: &RunEntry) -> Result<&'a [u8]> {
        // parse_index checked every run lies within the data section.
        let r = entry.range();
        let bytes = self
            .object
            .get(r.start as usize..r.end as usize)
            .ok_or_else(|| bounds(Section::Data, r.start, "run outside the object"))?;
        verify_run(bytes, entry)
    }
}
