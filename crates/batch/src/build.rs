//! The one RecordBatch v2 builder: writes batches into a caller-owned buffer, uncompressed, or
//! compressed by a codec the caller brings ([`BatchBuilder::finish_compressed`]; this crate
//! does no compression itself).
//!
//! Used by the protocol crate (`sluice produce`, the HTTP API) and, through
//! `sluice_log::batch::build`, by the log's tests, benchmarks and tools. The broker itself never
//! builds batches: it stores what producers send.

use core::ops::DerefMut;

use bytes::{BufMut, Bytes, BytesMut};

use crate::varint::{
    nullable_len, put_nullable_bytes, put_varint, put_varlong, varint_len, varlong_len,
};
use crate::{MAGIC_V2, attributes, crc_of, header};

/// Producer id, epoch and sequence of a non-idempotent producer.
const NO_PRODUCER_ID: i64 = -1;
const NO_PRODUCER_EPOCH: i16 = -1;
const NO_SEQUENCE: i32 = -1;
const NO_PARTITION_LEADER_EPOCH: i32 = -1;

/// A header of a record: Kafka header keys are strings, values are bytes or null.
pub type Header = (String, Option<Bytes>);

/// One record to encode, borrowing its key, value and headers (from a request body, say).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RecordRef<'a> {
    pub key: Option<&'a [u8]>,
    pub value: Option<&'a [u8]>,
    pub headers: &'a [Header],
    pub timestamp_ms: i64,
}

impl RecordRef<'_> {
    /// Bytes of the record after its length prefix, at these deltas from the batch's base.
    fn body_len(&self, timestamp_delta: i64, offset_delta: i32) -> usize {
        let headers: usize = self
            .headers
            .iter()
            .map(|(k, v)| nullable_len(Some(k.as_bytes())) + nullable_len(v.as_deref()))
            .sum();
        1 + varlong_len(timestamp_delta)
            + varint_len(offset_delta)
            + nullable_len(self.key)
            + nullable_len(self.value)
            + varint_len(self.headers.len() as i32)
            + headers
    }

    /// Bytes of the record including its length prefix.
    fn framed_len(&self, timestamp_delta: i64, offset_delta: i32) -> usize {
        let body = self.body_len(timestamp_delta, offset_delta);
        varint_len(body as i32) + body
    }

    /// Bytes of a batch that holds only this record: what `max.message.bytes` is compared with
    /// for a record that cannot be split further.
    pub fn alone_batch_bytes(&self) -> usize {
        header::BYTES + self.framed_len(0, 0)
    }
}

/// A growable byte buffer a batch can be written into: `BytesMut` (the protocol crate) or
/// `Vec<u8>` (the log's tools and benchmarks).
pub trait BatchBuf: BufMut + DerefMut<Target = [u8]> {
    /// Makes room for `additional` more bytes.
    fn reserve_bytes(&mut self, additional: usize);
    /// Drops everything from `len` on.
    fn truncate_to(&mut self, len: usize);
}

impl BatchBuf for BytesMut {
    fn reserve_bytes(&mut self, additional: usize) {
        self.reserve(additional);
    }
    fn truncate_to(&mut self, len: usize) {
        self.truncate(len);
    }
}

impl BatchBuf for Vec<u8> {
    fn reserve_bytes(&mut self, additional: usize) {
        self.reserve(additional);
    }
    fn truncate_to(&mut self, len: usize) {
        self.truncate(len);
    }
}

/// Writes one RecordBatch v2 into a caller-owned buffer, record by record, with base offset 0
/// (the broker assigns offsets) and, unless [`BatchBuilder::with_producer`] says otherwise, no
/// producer id (not idempotent). Nothing is
/// allocated per record: each record is written in place at its exact size (the buffer grows
/// only if the caller did not reserve enough).
///
/// Several batches can follow each other in one buffer: [`BatchBuilder::finish`] hands the
/// buffer back for the next builder.
#[derive(Debug)]
pub struct BatchBuilder<'a, B: BatchBuf = BytesMut> {
    out: &'a mut B,
    /// Where this batch starts in `out`.
    start: usize,
    base_timestamp: i64,
    /// The base timestamp was given up front; otherwise it is the first record's timestamp.
    base_timestamp_fixed: bool,
    max_timestamp: i64,
    count: i32,
}

impl<'a, B: BatchBuf> BatchBuilder<'a, B> {
    /// Starts a batch at the end of `out`; its base timestamp is the first record's (the
    /// header's counts and CRC are filled in by [`BatchBuilder::finish`]).
    pub fn new(out: &'a mut B) -> Self {
        Self::start(out, 0, false)
    }

    /// Like [`BatchBuilder::new`], with the given base timestamp: each record's timestamp delta
    /// is taken from it, the first record's included.
    pub fn with_base_timestamp(out: &'a mut B, base_timestamp: i64) -> Self {
        Self::start(out, base_timestamp, true)
    }

    fn start(out: &'a mut B, base_timestamp: i64, base_timestamp_fixed: bool) -> Self {
        let start = out.len();
        out.reserve_bytes(header::BYTES);
        out.put_i64(0); // base offset
        out.put_i32(0); // batch length
        out.put_i32(NO_PARTITION_LEADER_EPOCH);
        out.put_i8(MAGIC_V2);
        out.put_u32(0); // CRC
        out.put_i16(0); // attributes: no compression, create time, not transactional
        out.put_i32(0); // last offset delta
        out.put_i64(0); // base timestamp
        out.put_i64(0); // max timestamp
        out.put_i64(NO_PRODUCER_ID);
        out.put_i16(NO_PRODUCER_EPOCH);
        out.put_i32(NO_SEQUENCE);
        out.put_i32(0); // record count
        debug_assert_eq!(out.len() - start, header::BYTES);
        BatchBuilder {
            out,
            start,
            base_timestamp,
            base_timestamp_fixed,
            max_timestamp: i64::MIN,
            count: 0,
        }
    }

    /// Records pushed so far.
    pub fn len(&self) -> usize {
        self.count as usize
    }

    pub fn is_empty(&self) -> bool {
        self.count == 0
    }

    /// Bytes of the batch so far.
    pub fn batch_bytes(&self) -> usize {
        self.out.len() - self.start
    }

    /// Bytes the batch would have with `record` pushed next (to split before a limit).
    pub fn batch_bytes_with(&self, record: &RecordRef<'_>) -> usize {
        let (timestamp_delta, offset_delta) = self.deltas(record);
        self.batch_bytes() + record.framed_len(timestamp_delta, offset_delta)
    }

    fn deltas(&self, record: &RecordRef<'_>) -> (i64, i32) {
        if self.count == 0 && !self.base_timestamp_fixed {
            (0, 0)
        } else {
            (
                record.timestamp_ms.wrapping_sub(self.base_timestamp),
                self.count,
            )
        }
    }

    /// Appends `record` to the batch.
    pub fn push(&mut self, record: &RecordRef<'_>) {
        if self.count == 0 && !self.base_timestamp_fixed {
            self.base_timestamp = record.timestamp_ms;
        }
        let (timestamp_delta, offset_delta) = self.deltas(record);
        let body = record.body_len(timestamp_delta, offset_delta);
        let out = &mut *self.out;
        out.reserve_bytes(varint_len(body as i32) + body);
        put_varint(out, body as i32);
        out.put_i8(0); // record attributes (unused)
        put_varlong(out, timestamp_delta);
        put_varint(out, offset_delta);
        put_nullable_bytes(out, record.key);
        put_nullable_bytes(out, record.value);
        put_varint(out, record.headers.len() as i32);
        for (key, value) in record.headers {
            put_nullable_bytes(out, Some(key.as_bytes()));
            put_nullable_bytes(out, value.as_deref());
        }
        self.max_timestamp = self.max_timestamp.max(record.timestamp_ms);
        self.count += 1;
    }

    /// Marks the batch as sent by an idempotent producer: its id, epoch and the sequence number
    /// of its first record (the header fields the broker checks for duplicates and gaps).
    pub fn with_producer(self, producer_id: i64, producer_epoch: i16, base_sequence: i32) -> Self {
        let header = &mut self.out[self.start..self.start + header::BYTES];
        header[header::PRODUCER_ID].copy_from_slice(&producer_id.to_be_bytes());
        header[header::PRODUCER_EPOCH].copy_from_slice(&producer_epoch.to_be_bytes());
        header[header::BASE_SEQUENCE].copy_from_slice(&base_sequence.to_be_bytes());
        self
    }

    /// Sets attribute bits besides the codec (say [`attributes::TRANSACTIONAL`]); the codec
    /// bits are the builder's (none, or [`BatchBuilder::finish_compressed`]'s), so they are
    /// ignored here.
    pub fn with_attributes(self, bits: i16) -> Self {
        let at = self.start + header::ATTRIBUTES.start;
        let field = &mut self.out[at..at + 2];
        let old = i16::from_be_bytes([field[0], field[1]]);
        let new = old | (bits & !attributes::COMPRESSION_MASK);
        field.copy_from_slice(&new.to_be_bytes());
        self
    }

    /// Completes the batch (lengths, counts, timestamps, CRC) and returns the buffer. A batch
    /// with no records is removed again: a RecordBatch holds at least one record.
    pub fn finish(self) -> &'a mut B {
        self.complete()
    }

    /// Like [`BatchBuilder::finish`], with the records section replaced by `compress` of it and
    /// `codec` (one of [`attributes::codec`]) in the attributes, as a Kafka producer writes a
    /// compressed batch: the header stays uncompressed, and the length and CRC cover the
    /// compressed bytes. `compress` must implement `codec`; nothing here checks that.
    pub fn finish_compressed(
        self,
        codec: i16,
        compress: impl FnOnce(&[u8]) -> Vec<u8>,
    ) -> &'a mut B {
        if self.count > 0 {
            let records_at = self.start + header::BYTES;
            let packed = compress(&self.out[records_at..]);
            self.out.truncate_to(records_at);
            self.out.reserve_bytes(packed.len());
            self.out.put_slice(&packed);
            let at = self.start + header::ATTRIBUTES.start;
            let field = &mut self.out[at..at + 2];
            let old = i16::from_be_bytes([field[0], field[1]]);
            let new =
                (old & !attributes::COMPRESSION_MASK) | (codec & attributes::COMPRESSION_MASK);
            field.copy_from_slice(&new.to_be_bytes());
        }
        self.complete()
    }

    fn complete(self) -> &'a mut B {
        let BatchBuilder {
            out,
            start,
            base_timestamp,
            max_timestamp,
            count,
            ..
        } = self;
        if count == 0 {
            out.truncate_to(start);
            return out;
        }
        let batch = &mut out[start..];
        let batch_length = (batch.len() - header::LOG_OVERHEAD_BYTES) as i32;
        batch[header::BATCH_LENGTH].copy_from_slice(&batch_length.to_be_bytes());
        batch[header::LAST_OFFSET_DELTA].copy_from_slice(&(count - 1).to_be_bytes());
        batch[header::BASE_TIMESTAMP].copy_from_slice(&base_timestamp.to_be_bytes());
        batch[header::MAX_TIMESTAMP].copy_from_slice(&max_timestamp.to_be_bytes());
        batch[header::RECORD_COUNT].copy_from_slice(&count.to_be_bytes());
        let crc = crc_of(batch);
        batch[header::CRC].copy_from_slice(&crc.to_be_bytes());
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{read_i16, read_i32, read_i64, read_u32};

    fn record(value: &[u8], timestamp_ms: i64) -> RecordRef<'_> {
        RecordRef {
            key: None,
            value: Some(value),
            headers: &[],
            timestamp_ms,
        }
    }

    #[test]
    fn vec_and_bytes_mut_get_the_same_batch() {
        let mut vec = Vec::new();
        let mut bytes = BytesMut::new();
        let mut a = BatchBuilder::new(&mut vec);
        let mut b = BatchBuilder::new(&mut bytes);
        for (i, value) in [&b"a"[..], b"bb", b"ccc"].into_iter().enumerate() {
            a.push(&record(value, 100 + i as i64));
            b.push(&record(value, 100 + i as i64));
        }
        a.finish();
        b.finish();
        assert_eq!(vec[..], bytes[..]);
        assert_eq!(read_i32(&vec, header::RECORD_COUNT), 3);
        assert_eq!(read_i32(&vec, header::LAST_OFFSET_DELTA), 2);
        assert_eq!(read_i64(&vec, header::BASE_TIMESTAMP), 100);
        assert_eq!(read_i64(&vec, header::MAX_TIMESTAMP), 102);
        assert_eq!(read_u32(&vec, header::CRC), crc_of(&vec));
        let length = read_i32(&vec, header::BATCH_LENGTH) as usize;
        assert_eq!(length + header::LOG_OVERHEAD_BYTES, vec.len());
    }

    #[test]
    fn a_fixed_base_timestamp_gives_the_first_record_a_delta() {
        let mut out = Vec::new();
        let mut builder = BatchBuilder::with_base_timestamp(&mut out, 1_000);
        let first = record(b"x", 1_005);
        let predicted = builder.batch_bytes_with(&first);
        builder.push(&first);
        assert_eq!(builder.batch_bytes(), predicted);
        builder.finish();
        assert_eq!(read_i64(&out, header::BASE_TIMESTAMP), 1_000);
        // length, attributes, then the timestamp delta 5 as a zig-zag varint (10).
        assert_eq!(out[header::BYTES + 2], 10);
    }

    #[test]
    fn an_empty_batch_leaves_the_buffer_as_it_was() {
        let mut out = vec![7u8; 3];
        BatchBuilder::new(&mut out).finish();
        assert_eq!(out, [7, 7, 7]);
    }
    #[test]
    fn producer_fields_and_attribute_bits_are_covered_by_the_crc() {
        let mut out = Vec::new();
        let mut builder = BatchBuilder::new(&mut out)
            .with_producer(42, 3, 17)
            .with_attributes(attributes::TRANSACTIONAL | attributes::codec::GZIP);
        builder.push(&record(b"v", 5));
        builder.finish();
        assert_eq!(read_i64(&out, header::PRODUCER_ID), 42);
        assert_eq!(read_i16(&out, header::PRODUCER_EPOCH), 3);
        assert_eq!(read_i32(&out, header::BASE_SEQUENCE), 17);
        // The codec bits are not the caller's to set: the records are not compressed.
        assert_eq!(
            read_i16(&out, header::ATTRIBUTES),
            attributes::TRANSACTIONAL
        );
        assert_eq!(read_u32(&out, header::CRC), crc_of(&out));
    }

    #[test]
    fn a_compressed_batch_keeps_its_header_and_covers_the_packed_records() {
        let mut plain = Vec::new();
        let mut builder = BatchBuilder::new(&mut plain);
        builder.push(&record(b"abc", 7));
        builder.push(&record(b"de", 8));
        builder.finish();

        // A stand-in codec: reversed bytes plus one, so the sizes differ.
        let mut packed = vec![9u8];
        let mut builder = BatchBuilder::new(&mut packed);
        builder.push(&record(b"abc", 7));
        builder.push(&record(b"de", 8));
        builder.finish_compressed(attributes::codec::ZSTD, |records| {
            let mut out: Vec<u8> = records.iter().rev().copied().collect();
            out.push(0xff);
            out
        });
        let batch = &packed[1..];
        let records: Vec<u8> = plain[header::BYTES..].iter().rev().copied().collect();
        assert_eq!(&batch[header::BYTES..batch.len() - 1], &records[..]);
        assert_eq!(
            read_i16(batch, header::ATTRIBUTES) & attributes::COMPRESSION_MASK,
            attributes::codec::ZSTD
        );
        assert_eq!(read_i32(batch, header::RECORD_COUNT), 2);
        let length = read_i32(batch, header::BATCH_LENGTH) as usize;
        assert_eq!(length + header::LOG_OVERHEAD_BYTES, batch.len());
        assert_eq!(read_u32(batch, header::CRC), crc_of(batch));
        // Everything before the attributes is as in the uncompressed batch but the length.
        assert_eq!(
            batch[..header::BATCH_LENGTH.start],
            plain[..header::BATCH_LENGTH.start]
        );
        assert_eq!(
            batch[header::PARTITION_LEADER_EPOCH.start..header::CRC.start],
            plain[header::PARTITION_LEADER_EPOCH.start..header::CRC.start]
        );
    }
}
