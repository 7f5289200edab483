//! Kafka RecordBatch v2 records: the encoder `sluice produce` and the HTTP API build batches
//! with, and the decoder `sluice consume` and HTTP reads use on fetched batches.
//!
//! The broker never looks inside records (it stores the producer's bytes unchanged), so this is
//! the one place in Sluice that writes and reads individual records, keys and headers.
//!
//! Batch layout: the 61-byte header whose field offsets, attribute bits and CRC rule are
//! `sluice_batch`'s (shared with the log; see that crate for the table), then the records. A
//! record is: length (varint), attributes (1), timestamp delta (varlong), offset delta (varint),
//! key length + key, value length + value (length -1 = null), header count, then per header: key
//! length + key, value length + value. Varints are zig-zag LEB128, as in protobuf. In a
//! compressed batch (codec in the low three bits of the attributes) everything after the record
//! count is one compressed stream of those records.
//!
//! Why not `kafka_protocol::records`: its record type keeps headers in a map, so a header key
//! that appears twice in one record (which Kafka allows) would be merged on the way in and on the
//! way out; and it allocates per record.
//!
//! Key types:
//! - on the way in, [`BatchBuilder`] (`sluice_batch`'s, the one batch builder) writes batches
//!   into a caller-owned buffer from borrowed [`RecordRef`]s (nothing allocated per record);
//!   [`encode_batch`] does the same for a slice of owned [`ProducerRecord`]s;
//! - on the way out, [`Batches`] splits fetched bytes into CRC-checked [`FetchedBatch`]es;
//!   [`FetchedBatch::iter_records`] decompresses a batch (gzip, snappy raw or in the Java
//!   client's xerial framing, lz4 frames, zstd; output bounded by a caller-given limit) and
//!   yields [`RecordView`]s whose keys, values and headers are slices of it;
//!   [`FetchedBatch::records`] collects them as [`ConsumedRecord`]s.

use bytes::{Buf, Bytes, BytesMut};

use compression::{Inflate, compress, decompress};
use sluice_batch::MAGIC_V2;
use sluice_batch::attributes::codec;

mod compression;

pub use sluice_batch::{BatchBuilder, Header, RecordRef, attributes, header};

/// Bytes of the fixed batch header, up to and including the record count.
pub const BATCH_HEADER_BYTES: usize = header::BYTES;
/// Most bytes one batch may decompress to when the caller gives no limit
/// ([`FetchedBatch::records`]). Kafka's default `max.message.bytes` is 1 MiB of compressed
/// data; 64 MiB leaves room for very compressible batches while a batch that claims more (a
/// corrupt or hostile one) is refused instead of exhausting memory.
pub const DECOMPRESSED_BYTES_MAX: usize = 64 << 20;
/// Decompresses a records section written with `codec` (the attributes' compression bits)
/// into at most `limit` bytes; `Err` says why it cannot (unknown codec, too large, corrupt).
pub fn decompress_section(codec: i16, input: &[u8], limit: usize) -> Result<Vec<u8>, String> {
    decompress(codec, input, limit).map_err(|e| match e {
        Inflate::UnknownCodec => format!("unknown compression codec {codec}"),
        Inflate::TooLarge => format!("decompresses to more than {limit} bytes"),
        Inflate::Invalid(reason) => reason,
    })
}

/// Compresses a records section with `codec` (gzip, snappy, lz4 or zstd) in the format Kafka's
/// own clients write and read.
pub fn compress_section(codec: i16, input: &[u8]) -> Result<Vec<u8>, String> {
    compress(codec, input)
}

/// Base offset + batch length: the bytes before what the batch length counts.
const LOG_OVERHEAD_BYTES: usize = header::LOG_OVERHEAD_BYTES;

/// One record to produce.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProducerRecord {
    pub key: Option<Bytes>,
    pub value: Option<Bytes>,
    pub headers: Vec<Header>,
    pub timestamp_ms: i64,
}

impl ProducerRecord {
    /// An upper bound of the bytes this record adds to a batch.
    pub fn size_bound(&self) -> usize {
        // length + attributes + timestamp delta + offset delta + key/value lengths + header count
        const FIXED_MAX: usize = 5 + 1 + 10 + 5 + 5 + 5 + 5;
        let headers: usize = self
            .headers
            .iter()
            .map(|(k, v)| 10 + k.len() + v.as_ref().map_or(0, Bytes::len))
            .sum();
        FIXED_MAX
            + self.key.as_ref().map_or(0, Bytes::len)
            + self.value.as_ref().map_or(0, Bytes::len)
            + headers
    }

    /// This record as [`BatchBuilder::push`] takes it.
    pub fn as_record_ref(&self) -> RecordRef<'_> {
        RecordRef {
            key: self.key.as_deref(),
            value: self.value.as_deref(),
            headers: &self.headers,
            timestamp_ms: self.timestamp_ms,
        }
    }
}

/// Appends one uncompressed RecordBatch v2 holding `records` (at least one) to `out`, with base
/// offset 0 (the broker assigns offsets) and no producer id (not idempotent).
pub fn encode_batch(out: &mut BytesMut, records: &[ProducerRecord]) {
    assert!(
        !records.is_empty(),
        "a record batch holds at least one record"
    );
    let mut builder = BatchBuilder::new(out);
    for record in records {
        builder.push(&record.as_record_ref());
    }
    builder.finish();
}

/// Why fetched bytes could not be read as records.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DecodeError {
    #[error(
        "record batch at offset {base_offset} has magic {magic}; only format v2 (magic 2) can be read"
    )]
    UnsupportedMagic { base_offset: i64, magic: i8 },
    #[error("record batch at offset {base_offset} declares an impossible length {length}")]
    BadLength { base_offset: i64, length: i32 },
    #[error(
        "record batch at offset {base_offset} fails its CRC-32C check (stored {stored:#010x}, computed {computed:#010x})"
    )]
    BadCrc {
        base_offset: i64,
        stored: u32,
        computed: u32,
    },
    #[error(
        "record batch at offset {base_offset} names compression codec {codec}, which Kafka does not define (0-4: none, gzip, snappy, lz4, zstd)"
    )]
    UnknownCodec { base_offset: i64, codec: i16 },
    /// The decompressor's own message is kept as text so that this error stays `Clone + Eq`.
    #[error("record batch at offset {base_offset} is not valid {codec} data: {reason}")]
    Decompress {
        base_offset: i64,
        codec: &'static str,
        reason: String,
    },
    #[error(
        "record batch at offset {base_offset} decompresses ({codec}) to more than {limit} bytes, the most this reader accepts"
    )]
    DecompressedTooLarge {
        base_offset: i64,
        codec: &'static str,
        limit: usize,
    },
    #[error("record batch at offset {base_offset} declares {count} records: {source}")]
    BadRecordCount {
        base_offset: i64,
        count: i32,
        #[source]
        source: std::num::TryFromIntError,
    },
    #[error("record batch at offset {base_offset} is malformed: {reason}")]
    Malformed {
        base_offset: i64,
        reason: &'static str,
    },
}

/// The name of a batch compression codec, from the low three bits of the attributes.
pub fn codec_name(attributes: i16) -> &'static str {
    match attributes & attributes::COMPRESSION_MASK {
        codec::NONE => "none",
        codec::GZIP => "gzip",
        codec::SNAPPY => "snappy",
        codec::LZ4 => "lz4",
        codec::ZSTD => "zstd",
        _ => "an unknown codec",
    }
}

/// Iterates over the whole batches in a fetched `records` field. A batch cut short at the end
/// (the broker may send a partial last batch to fill `max_bytes`) ends the iteration quietly.
#[derive(Debug)]
pub struct Batches {
    rest: Bytes,
}

impl Batches {
    pub fn new(records: Bytes) -> Self {
        Batches { rest: records }
    }
}

impl Iterator for Batches {
    type Item = Result<FetchedBatch, DecodeError>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.rest.len() < header::MAGIC.end {
            return None;
        }
        let base_offset = sluice_batch::read_i64(&self.rest, header::BASE_OFFSET);
        let length = sluice_batch::read_i32(&self.rest, header::BATCH_LENGTH);
        let magic = self.rest[header::MAGIC.start] as i8;
        if magic != MAGIC_V2 {
            self.rest.clear();
            return Some(Err(DecodeError::UnsupportedMagic { base_offset, magic }));
        }
        if length < (BATCH_HEADER_BYTES - LOG_OVERHEAD_BYTES) as i32 {
            self.rest.clear();
            return Some(Err(DecodeError::BadLength {
                base_offset,
                length,
            }));
        }
        let total = LOG_OVERHEAD_BYTES + length as usize;
        if self.rest.len() < total {
            return None;
        }
        let bytes = self.rest.split_to(total);
        Some(FetchedBatch::parse(bytes))
    }
}

/// One whole, CRC-checked batch from a fetch response.
#[derive(Debug, Clone)]
pub struct FetchedBatch {
    pub base_offset: i64,
    pub attributes: i16,
    pub last_offset_delta: i32,
    pub base_timestamp: i64,
    pub max_timestamp: i64,
    pub record_count: i32,
    /// The records section (after the fixed header), compressed if the batch is.
    records: Bytes,
}

impl FetchedBatch {
    fn parse(bytes: Bytes) -> Result<FetchedBatch, DecodeError> {
        // `Batches` only hands over whole batches: at least the header is here.
        let field_i64 = |field| sluice_batch::read_i64(&bytes, field);
        let field_i32 = |field| sluice_batch::read_i32(&bytes, field);
        let base_offset = field_i64(header::BASE_OFFSET);
        let stored = sluice_batch::read_u32(&bytes, header::CRC);
        let computed = sluice_batch::crc_of(&bytes);
        if stored != computed {
            return Err(DecodeError::BadCrc {
                base_offset,
                stored,
                computed,
            });
        }
        let attributes = sluice_batch::read_i16(&bytes, header::ATTRIBUTES);
        let last_offset_delta = field_i32(header::LAST_OFFSET_DELTA);
        let base_timestamp = field_i64(header::BASE_TIMESTAMP);
        let max_timestamp = field_i64(header::MAX_TIMESTAMP);
        let record_count = field_i32(header::RECORD_COUNT);
        Ok(FetchedBatch {
            base_offset,
            attributes,
            last_offset_delta,
            base_timestamp,
            max_timestamp,
            record_count,
            records: bytes.slice(BATCH_HEADER_BYTES..),
        })
    }

    /// The offset after this batch's last record (where the next fetch continues).
    pub fn next_offset(&self) -> i64 {
        self.base_offset + i64::from(self.last_offset_delta) + 1
    }

    /// A control batch (transaction markers): not application records.
    pub fn is_control(&self) -> bool {
        self.attributes & attributes::CONTROL != 0
    }

    /// The compression codec's name ("none" for an uncompressed batch).
    pub fn codec(&self) -> &'static str {
        codec_name(self.attributes)
    }

    /// The records section, decompressed if the batch is compressed. An uncompressed batch's
    /// section is a slice of the fetched bytes (no copy); a compressed one is decompressed into
    /// one new buffer of at most `limit` bytes (more is [`DecodeError::DecompressedTooLarge`]).
    pub fn records_section(&self, limit: usize) -> Result<Bytes, DecodeError> {
        let codec = self.attributes & attributes::COMPRESSION_MASK;
        if codec == codec::NONE {
            return Ok(self.records.clone());
        }
        let name = codec_name(self.attributes);
        match decompress(codec, &self.records, limit) {
            Ok(plain) => Ok(Bytes::from(plain)),
            Err(Inflate::UnknownCodec) => Err(DecodeError::UnknownCodec {
                base_offset: self.base_offset,
                codec,
            }),
            Err(Inflate::TooLarge) => Err(DecodeError::DecompressedTooLarge {
                base_offset: self.base_offset,
                codec: name,
                limit,
            }),
            Err(Inflate::Invalid(reason)) => Err(DecodeError::Decompress {
                base_offset: self.base_offset,
                codec: name,
                reason,
            }),
        }
    }

    /// The records of this batch, decompressing it first (into at most `limit_bytes`) if it is
    /// compressed. Iterating ([`Records::iter`]) borrows keys, values and headers from one
    /// buffer: nothing is allocated or reference-counted per record.
    pub fn iter_records(&self, limit_bytes: usize) -> Result<Records, DecodeError> {
        let buf = self.records_section(limit_bytes)?;
        let count =
            usize::try_from(self.record_count).map_err(|source| DecodeError::BadRecordCount {
                base_offset: self.base_offset,
                count: self.record_count,
                source,
            })?;
        Ok(Records {
            buf,
            count,
            base_offset: self.base_offset,
            base_timestamp: self.base_timestamp,
            max_timestamp: self.max_timestamp,
            log_append_time: self.attributes & attributes::TIMESTAMP_TYPE_LOG_APPEND != 0,
        })
    }

    /// Decodes every record, decompressing the batch first if needed (into at most
    /// [`DECOMPRESSED_BYTES_MAX`] bytes).
    pub fn records(&self) -> Result<Vec<ConsumedRecord>, DecodeError> {
        let records = self.iter_records(DECOMPRESSED_BYTES_MAX)?;
        // Each record takes at least 7 bytes, so a count beyond that is a lie; cap the allocation.
        let mut out = Vec::with_capacity(records.count.min(records.buf.len() / 7 + 1));
        for record in records.iter() {
            out.push(records.to_owned_record(&record?));
        }
        Ok(out)
    }
}

/// The (decompressed) records of one batch ([`FetchedBatch::iter_records`]). Cheap to clone:
/// clones share the bytes.
#[derive(Debug, Clone)]
pub struct Records {
    buf: Bytes,
    /// Records in the batch, as its header counts them.
    count: usize,
    base_offset: i64,
    base_timestamp: i64,
    max_timestamp: i64,
    log_append_time: bool,
}

impl Records {
    /// Records in the batch, as its header counts them.
    pub fn len(&self) -> usize {
        self.count
    }

    pub fn is_empty(&self) -> bool {
        self.count == 0
    }

    /// The records in order, borrowed from this batch's bytes. Stops after the first error.
    pub fn iter(&self) -> RecordIter<'_> {
        RecordIter {
            records: self,
            rest: &self.buf,
            remaining: self.count,
        }
    }

    /// `view` (from [`Records::iter`] on this batch) with its slices turned into `Bytes` that
    /// share this batch's buffer.
    pub fn to_owned_record(&self, view: &RecordView<'_>) -> ConsumedRecord {
        let share = |b: &[u8]| self.buf.slice_ref(b);
        ConsumedRecord {
            offset: view.offset,
            timestamp_ms: view.timestamp_ms,
            key: view.key.map(share),
            value: view.value.map(share),
            headers: view
                .headers
                .iter()
                .map(|(k, v)| (share(k), v.map(share)))
                .collect(),
        }
    }

    fn parse<'a>(&self, mut rec: &'a [u8]) -> Option<RecordView<'a>> {
        let rec = &mut rec;
        if rec.is_empty() {
            return None;
        }
        let _attributes = rec.get_i8();
        let timestamp_delta = get_varlong(rec)?;
        let offset_delta = get_varint(rec)?;
        let key = get_nullable_bytes(rec)?;
        let value = get_nullable_bytes(rec)?;
        let count = usize::try_from(get_varint(rec)?).ok()?;
        // Walk the headers once to check them; `RecordHeaders` re-reads them on demand.
        let headers_start: &'a [u8] = rec;
        for _ in 0..count {
            get_nullable_bytes(rec)??;
            get_nullable_bytes(rec)?;
        }
        let used = headers_start.len() - rec.len();
        Some(RecordView {
            offset: self.base_offset + i64::from(offset_delta),
            timestamp_ms: if self.log_append_time {
                self.max_timestamp
            } else {
                self.base_timestamp.wrapping_add(timestamp_delta)
            },
            key,
            value,
            headers: RecordHeaders {
                raw: &headers_start[..used],
                count,
            },
        })
    }
}

/// Iterator over the records of a batch ([`Records::iter`]).
#[derive(Debug, Clone)]
pub struct RecordIter<'a> {
    records: &'a Records,
    rest: &'a [u8],
    remaining: usize,
}

impl<'a> RecordIter<'a> {
    fn malformed(&mut self, reason: &'static str) -> DecodeError {
        self.remaining = 0;
        DecodeError::Malformed {
            base_offset: self.records.base_offset,
            reason,
        }
    }
}

impl<'a> Iterator for RecordIter<'a> {
    type Item = Result<RecordView<'a>, DecodeError>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.remaining == 0 {
            return None;
        }
        let Some(length) = get_varint(&mut self.rest) else {
            return Some(Err(self.malformed("truncated record length")));
        };
        let Ok(length) = usize::try_from(length) else {
            return Some(Err(self.malformed("negative record length")));
        };
        let Some((rec, rest)) = self.rest.split_at_checked(length) else {
            return Some(Err(self.malformed("record longer than its batch")));
        };
        self.rest = rest;
        match self.records.parse(rec) {
            Some(view) => {
                self.remaining -= 1;
                Some(Ok(view))
            }
            None => Some(Err(self.malformed("truncated or invalid record"))),
        }
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        (0, Some(self.remaining))
    }
}

/// One record of a fetched batch; key, value and headers borrow the batch's (possibly
/// decompressed) bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RecordView<'a> {
    pub offset: i64,
    pub timestamp_ms: i64,
    pub key: Option<&'a [u8]>,
    pub value: Option<&'a [u8]>,
    pub headers: RecordHeaders<'a>,
}

/// The headers of a [`RecordView`], checked when the record was read and decoded on demand.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RecordHeaders<'a> {
    raw: &'a [u8],
    count: usize,
}

impl<'a> RecordHeaders<'a> {
    pub fn len(&self) -> usize {
        self.count
    }

    pub fn is_empty(&self) -> bool {
        self.count == 0
    }

    /// `(key, value)` pairs in record order; a key may appear more than once.
    pub fn iter(&self) -> HeaderIter<'a> {
        HeaderIter {
            raw: self.raw,
            remaining: self.count,
        }
    }
}

/// Iterator over [`RecordHeaders`].
#[derive(Debug, Clone)]
pub struct HeaderIter<'a> {
    raw: &'a [u8],
    remaining: usize,
}

impl<'a> Iterator for HeaderIter<'a> {
    type Item = (&'a [u8], Option<&'a [u8]>);

    fn next(&mut self) -> Option<Self::Item> {
        if self.remaining == 0 {
            return None;
        }
        self.remaining -= 1;
        // Checked when the record was read, so these cannot fail; stop quietly if they did.
        let header = get_nullable_bytes(&mut self.raw)
            .flatten()
            .zip(get_nullable_bytes(&mut self.raw));
        if header.is_none() {
            self.remaining = 0;
        }
        header
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        (0, Some(self.remaining))
    }
}

/// One record read back from the broker.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConsumedRecord {
    pub offset: i64,
    pub timestamp_ms: i64,
    pub key: Option<Bytes>,
    pub value: Option<Bytes>,
    /// Header keys as raw bytes (they should be UTF-8, but are not checked by brokers).
    pub headers: Vec<(Bytes, Option<Bytes>)>,
}

fn get_unsigned(buf: &mut &[u8], max_bytes: usize) -> Option<u64> {
    let mut value = 0u64;
    for i in 0..max_bytes {
        let (&byte, rest) = buf.split_first()?;
        *buf = rest;
        value |= u64::from(byte & 0x7f) << (7 * i);
        if byte & 0x80 == 0 {
            return Some(value);
        }
    }
    None
}

fn get_varint(buf: &mut &[u8]) -> Option<i32> {
    let raw = get_unsigned(buf, 5)? as u32;
    Some(((raw >> 1) as i32) ^ -((raw & 1) as i32))
}

fn get_varlong(buf: &mut &[u8]) -> Option<i64> {
    let raw = get_unsigned(buf, 10)?;
    Some(((raw >> 1) as i64) ^ -((raw & 1) as i64))
}

/// `None`: malformed; `Some(None)`: a null (length -1).
fn get_nullable_bytes<'a>(buf: &mut &'a [u8]) -> Option<Option<&'a [u8]>> {
    let length = get_varint(buf)?;
    if length < 0 {
        return (length == -1).then_some(None);
    }
    let (bytes, rest) = buf.split_at_checked(length as usize)?;
    *buf = rest;
    Some(Some(bytes))
}

#[cfg(test)]
mod tests;
