//! Kafka RecordBatch v2 records: the encoder `sluice produce` and the HTTP API build batches
//! with, and the decoder `sluice consume` and HTTP reads use on fetched batches.
//!
//! The broker never looks inside records (it stores the producer's bytes unchanged), so this is
//! the one place in Sluice that writes and reads individual records, keys and headers.
//!
//! Batch layout (big-endian; see `sluice_log::batch` for the header table): base offset (8),
//! batch length (4), partition leader epoch (4), magic = 2 (1), CRC-32C (4) of every byte from
//! the attributes (offset 21) to the end, attributes (2), last offset delta (4), base timestamp
//! (8), max timestamp (8), producer id (8), producer epoch (2), base sequence (4), record count
//! (4), then the records. A record is: length (varint), attributes (1), timestamp delta
//! (varlong), offset delta (varint), key length + key, value length + value (length -1 = null),
//! header count, then per header: key length + key, value length + value. Varints are zig-zag
//! LEB128, as in protobuf.
//!
//! Why not `kafka_protocol::records`: its record type keeps headers in a map, so a header key
//! that appears twice in one record (which Kafka allows) would be merged on the way in and on the
//! way out; and the codecs it decompresses with are cargo features this workspace leaves off.
//!
//! Key types: [`ProducerRecord`] and [`encode_batch`] on the way in; [`Batches`],
//! [`FetchedBatch`] and [`ConsumedRecord`] on the way out.

use bytes::{Buf, BufMut, Bytes, BytesMut};

/// Bytes of the fixed batch header, up to and including the record count.
pub const BATCH_HEADER_BYTES: usize = 61;
/// Base offset + batch length: the bytes before what the batch length counts.
const LOG_OVERHEAD_BYTES: usize = 12;
/// The first byte the CRC covers (the attributes).
const CRC_START: usize = 21;
const MAGIC_V2: i8 = 2;
const ATTR_COMPRESSION_MASK: i16 = 0x07;
const ATTR_LOG_APPEND_TIME: i16 = 0x08;
const ATTR_CONTROL: i16 = 0x20;
/// Producer id, epoch and sequence of a non-idempotent producer.
const NO_PRODUCER_ID: i64 = -1;
const NO_PRODUCER_EPOCH: i16 = -1;
const NO_SEQUENCE: i32 = -1;
const NO_PARTITION_LEADER_EPOCH: i32 = -1;

/// A header of a record: Kafka header keys are strings, values are bytes or null.
pub type Header = (String, Option<Bytes>);

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
}

/// Appends one uncompressed RecordBatch v2 holding `records` (at least one) to `out`, with base
/// offset 0 (the broker assigns offsets) and no producer id (not idempotent).
pub fn encode_batch(out: &mut BytesMut, records: &[ProducerRecord]) {
    assert!(
        !records.is_empty(),
        "a record batch holds at least one record"
    );
    let start = out.len();
    let base_timestamp = records[0].timestamp_ms;
    let max_timestamp = records
        .iter()
        .map(|r| r.timestamp_ms)
        .max()
        .expect("non-empty");
    out.put_i64(0); // base offset
    out.put_i32(0); // batch length, patched below
    out.put_i32(NO_PARTITION_LEADER_EPOCH);
    out.put_i8(MAGIC_V2);
    out.put_u32(0); // CRC, patched below
    out.put_i16(0); // attributes: no compression, create time, not transactional
    out.put_i32(records.len() as i32 - 1); // last offset delta
    out.put_i64(base_timestamp);
    out.put_i64(max_timestamp);
    out.put_i64(NO_PRODUCER_ID);
    out.put_i16(NO_PRODUCER_EPOCH);
    out.put_i32(NO_SEQUENCE);
    out.put_i32(records.len() as i32);
    let mut body = Vec::new();
    for (offset_delta, record) in records.iter().enumerate() {
        body.clear();
        body.put_i8(0); // record attributes (unused)
        put_varlong(&mut body, record.timestamp_ms - base_timestamp);
        put_varint(&mut body, offset_delta as i32);
        put_nullable_bytes(&mut body, record.key.as_deref());
        put_nullable_bytes(&mut body, record.value.as_deref());
        put_varint(&mut body, record.headers.len() as i32);
        for (key, value) in &record.headers {
            put_nullable_bytes(&mut body, Some(key.as_bytes()));
            put_nullable_bytes(&mut body, value.as_deref());
        }
        put_varint(out, body.len() as i32);
        out.put_slice(&body);
    }
    let batch_length = (out.len() - start - LOG_OVERHEAD_BYTES) as i32;
    out[start + 8..start + 12].copy_from_slice(&batch_length.to_be_bytes());
    let crc = crc32c::crc32c(&out[start + CRC_START..]);
    out[start + 17..start + 21].copy_from_slice(&crc.to_be_bytes());
}

fn put_varint(out: &mut impl BufMut, value: i32) {
    put_unsigned(out, ((value << 1) ^ (value >> 31)) as u32 as u64);
}

fn put_varlong(out: &mut impl BufMut, value: i64) {
    put_unsigned(out, ((value << 1) ^ (value >> 63)) as u64);
}

fn put_unsigned(out: &mut impl BufMut, mut value: u64) {
    while value >= 0x80 {
        out.put_u8((value as u8) | 0x80);
        value >>= 7;
    }
    out.put_u8(value as u8);
}

fn put_nullable_bytes(out: &mut impl BufMut, bytes: Option<&[u8]>) {
    match bytes {
        None => put_varint(out, -1),
        Some(b) => {
            put_varint(out, b.len() as i32);
            out.put_slice(b);
        }
    }
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
        "record batch at offset {base_offset} is compressed with {codec}; the sluice CLI does not decompress yet (read it with kcat or another Kafka client)"
    )]
    Compressed {
        base_offset: i64,
        codec: &'static str,
    },
    #[error("record batch at offset {base_offset} is malformed: {reason}")]
    Malformed {
        base_offset: i64,
        reason: &'static str,
    },
}

/// The name of a batch compression codec, from the low three bits of the attributes.
pub fn codec_name(attributes: i16) -> &'static str {
    match attributes & ATTR_COMPRESSION_MASK {
        0 => "none",
        1 => "gzip",
        2 => "snappy",
        3 => "lz4",
        4 => "zstd",
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
        if self.rest.len() < LOG_OVERHEAD_BYTES + 5 {
            return None;
        }
        let base_offset = i64::from_be_bytes(self.rest[0..8].try_into().expect("8 bytes"));
        let length = i32::from_be_bytes(self.rest[8..12].try_into().expect("4 bytes"));
        let magic = self.rest[16] as i8;
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
    /// The records section (after the fixed header).
    records: Bytes,
}

impl FetchedBatch {
    fn parse(bytes: Bytes) -> Result<FetchedBatch, DecodeError> {
        let mut header = &bytes[..];
        let base_offset = header.get_i64();
        let _length = header.get_i32();
        let _leader_epoch = header.get_i32();
        let _magic = header.get_i8();
        let stored = header.get_u32();
        let computed = crc32c::crc32c(&bytes[CRC_START..]);
        if stored != computed {
            return Err(DecodeError::BadCrc {
                base_offset,
                stored,
                computed,
            });
        }
        let attributes = header.get_i16();
        let last_offset_delta = header.get_i32();
        let base_timestamp = header.get_i64();
        let max_timestamp = header.get_i64();
        let _producer_id = header.get_i64();
        let _producer_epoch = header.get_i16();
        let _base_sequence = header.get_i32();
        let record_count = header.get_i32();
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
        self.attributes & ATTR_CONTROL != 0
    }

    /// Decodes the records. A compressed batch is an error that names its codec.
    pub fn records(&self) -> Result<Vec<ConsumedRecord>, DecodeError> {
        if self.attributes & ATTR_COMPRESSION_MASK != 0 {
            return Err(DecodeError::Compressed {
                base_offset: self.base_offset,
                codec: codec_name(self.attributes),
            });
        }
        let malformed = |reason| DecodeError::Malformed {
            base_offset: self.base_offset,
            reason,
        };
        let log_append_time = self.attributes & ATTR_LOG_APPEND_TIME != 0;
        let mut buf = self.records.clone();
        let count = usize::try_from(self.record_count).map_err(|_| malformed("negative count"))?;
        // Each record takes at least 7 bytes, so a count beyond that is a lie; cap the allocation.
        let mut out = Vec::with_capacity(count.min(buf.len() / 7 + 1));
        for _ in 0..count {
            let length = get_varint(&mut buf).ok_or(malformed("truncated record length"))?;
            let length =
                usize::try_from(length).map_err(|_| malformed("negative record length"))?;
            if buf.len() < length {
                return Err(malformed("record longer than its batch"));
            }
            let mut rec = buf.split_to(length);
            let parse = |rec: &mut Bytes| -> Option<ConsumedRecord> {
                if !rec.has_remaining() {
                    return None;
                }
                let _attributes = rec.get_i8();
                let timestamp_delta = get_varlong(rec)?;
                let offset_delta = get_varint(rec)?;
                let key = get_nullable_bytes(rec)?;
                let value = get_nullable_bytes(rec)?;
                let header_count = usize::try_from(get_varint(rec)?).ok()?;
                let mut headers = Vec::with_capacity(header_count.min(rec.len() / 2 + 1));
                for _ in 0..header_count {
                    let key = get_nullable_bytes(rec)??;
                    let value = get_nullable_bytes(rec)?;
                    headers.push((key, value));
                }
                Some(ConsumedRecord {
                    offset: self.base_offset + i64::from(offset_delta),
                    timestamp_ms: if log_append_time {
                        self.max_timestamp
                    } else {
                        self.base_timestamp + timestamp_delta
                    },
                    key,
                    value,
                    headers,
                })
            };
            out.push(parse(&mut rec).ok_or(malformed("truncated or invalid record"))?);
        }
        Ok(out)
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

fn get_unsigned(buf: &mut Bytes, max_bytes: usize) -> Option<u64> {
    let mut value = 0u64;
    for i in 0..max_bytes {
        if !buf.has_remaining() {
            return None;
        }
        let byte = buf.get_u8();
        value |= u64::from(byte & 0x7f) << (7 * i);
        if byte & 0x80 == 0 {
            return Some(value);
        }
    }
    None
}

fn get_varint(buf: &mut Bytes) -> Option<i32> {
    let raw = get_unsigned(buf, 5)? as u32;
    Some(((raw >> 1) as i32) ^ -((raw & 1) as i32))
}

fn get_varlong(buf: &mut Bytes) -> Option<i64> {
    let raw = get_unsigned(buf, 10)?;
    Some(((raw >> 1) as i64) ^ -((raw & 1) as i64))
}

/// `None`: malformed; `Some(None)`: a null (length -1).
fn get_nullable_bytes(buf: &mut Bytes) -> Option<Option<Bytes>> {
    let length = get_varint(buf)?;
    if length < 0 {
        return (length == -1).then_some(None);
    }
    let length = length as usize;
    (buf.len() >= length).then(|| Some(buf.split_to(length)))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(key: Option<&str>, value: &str, headers: &[(&str, &str)], ts: i64) -> ProducerRecord {
        ProducerRecord {
            key: key.map(|k| Bytes::copy_from_slice(k.as_bytes())),
            value: Some(Bytes::copy_from_slice(value.as_bytes())),
            headers: headers
                .iter()
                .map(|(k, v)| ((*k).to_owned(), Some(Bytes::copy_from_slice(v.as_bytes()))))
                .collect(),
            timestamp_ms: ts,
        }
    }

    #[test]
    fn varints_match_the_zig_zag_examples() {
        // Values and encodings from the protobuf zig-zag table, as Kafka uses them.
        for (value, bytes) in [
            (0i32, &[0x00u8][..]),
            (-1, &[0x01]),
            (1, &[0x02]),
            (-2, &[0x03]),
            (63, &[0x7e]),
            (-64, &[0x7f]),
            (64, &[0x80, 0x01]),
            (i32::MAX, &[0xfe, 0xff, 0xff, 0xff, 0x0f]),
            (i32::MIN, &[0xff, 0xff, 0xff, 0xff, 0x0f]),
        ] {
            let mut out = Vec::new();
            put_varint(&mut out, value);
            assert_eq!(out, bytes, "{value}");
            assert_eq!(get_varint(&mut Bytes::from(out)), Some(value));
        }
        for value in [0i64, -1, 1, i64::MAX, i64::MIN, 1_700_000_000_000, -300] {
            let mut out = Vec::new();
            put_varlong(&mut out, value);
            assert_eq!(get_varlong(&mut Bytes::from(out)), Some(value));
        }
        assert_eq!(get_varint(&mut Bytes::from_static(&[0x80])), None);
    }

    #[test]
    fn batch_round_trip_with_keys_nulls_and_repeated_headers() {
        let mut records = vec![
            record(Some("k1"), "v1", &[("a", "1"), ("a", "2")], 1_000),
            record(None, "v2", &[], 900),
            record(Some(""), "", &[("h", "")], 1_500),
        ];
        records[1].value = None;
        records[1].headers.push(("n".to_owned(), None));
        let mut buf = BytesMut::new();
        encode_batch(&mut buf, &records);
        // The batch is one the broker's own validation accepts.
        let view = sluice_log::batch::BatchView::parse_checked(&buf).expect("valid batch");
        assert_eq!(view.record_count(), 3);
        assert_eq!(view.base_timestamp(), 1_000);
        assert_eq!(view.max_timestamp(), 1_500);
        assert_eq!(view.producer_id(), -1);

        // Pretend the broker assigned base offset 40.
        buf[0..8].copy_from_slice(&40i64.to_be_bytes());
        let batches: Vec<_> = Batches::new(buf.freeze()).collect();
        assert_eq!(batches.len(), 1);
        let batch = batches[0].as_ref().unwrap();
        assert_eq!(batch.next_offset(), 43);
        let got = batch.records().unwrap();
        assert_eq!(got.len(), 3);
        for (i, (got, want)) in got.iter().zip(&records).enumerate() {
            assert_eq!(got.offset, 40 + i as i64);
            assert_eq!(got.timestamp_ms, want.timestamp_ms);
            assert_eq!(got.key, want.key);
            assert_eq!(got.value, want.value);
            let headers: Vec<Header> = got
                .headers
                .iter()
                .map(|(k, v)| (String::from_utf8(k.to_vec()).unwrap(), v.clone()))
                .collect();
            assert_eq!(headers, want.headers);
        }
    }

    #[test]
    fn partial_trailing_batch_is_skipped_and_corruption_is_reported() {
        let mut buf = BytesMut::new();
        encode_batch(&mut buf, &[record(None, "one", &[], 1)]);
        let first_len = buf.len();
        encode_batch(&mut buf, &[record(None, "two", &[], 2)]);
        let whole = buf.clone().freeze();
        let cut = whole.slice(..whole.len() - 3);
        assert_eq!(Batches::new(cut).count(), 1);
        assert_eq!(Batches::new(whole.clone()).count(), 2);

        let mut corrupt = BytesMut::from(&whole[..]);
        corrupt[first_len - 1] ^= 0xff;
        let first = Batches::new(corrupt.freeze()).next().unwrap();
        assert!(
            matches!(first, Err(DecodeError::BadCrc { .. })),
            "{first:?}"
        );
    }

    #[test]
    fn compressed_batch_names_its_codec() {
        let mut buf = BytesMut::new();
        encode_batch(&mut buf, &[record(None, "x", &[], 1)]);
        buf[22] |= 4; // zstd, in the low byte of the attributes
        let crc = crc32c::crc32c(&buf[CRC_START..]);
        buf[17..21].copy_from_slice(&crc.to_be_bytes());
        let batch = Batches::new(buf.freeze()).next().unwrap().unwrap();
        let err = batch.records().unwrap_err();
        assert!(err.to_string().contains("compressed with zstd"), "{err}");
    }

    #[test]
    fn malformed_records_are_errors_not_panics() {
        let mut buf = BytesMut::new();
        encode_batch(
            &mut buf,
            &[
                record(Some("key"), "value", &[("h", "v")], 5),
                record(None, "z", &[], 6),
            ],
        );
        let whole = buf.freeze();
        for cut in BATCH_HEADER_BYTES..whole.len() {
            // Re-frame the cut batch as whole (fix length and CRC) so decoding reaches the records.
            let mut b = BytesMut::from(&whole[..cut]);
            let len = (cut - LOG_OVERHEAD_BYTES) as i32;
            b[8..12].copy_from_slice(&len.to_be_bytes());
            let crc = crc32c::crc32c(&b[CRC_START..]);
            b[17..21].copy_from_slice(&crc.to_be_bytes());
            let batch = Batches::new(b.freeze()).next().unwrap().unwrap();
            assert!(batch.records().is_err(), "cut at {cut}");
        }
    }
}
