//! Kafka RecordBatch v2: a read-only view over the header, and validation.
//!
//! The log stores batches exactly as producers sent them. It only needs the fixed-size header
//! (61 bytes) to validate a batch, assign offsets and build indexes; records are opaque bytes,
//! except for timestamp lookups, which walk the records of one uncompressed batch.
//!
//! The header layout (field offsets, attribute bits, CRC rule) is `sluice_batch`'s, shared with
//! the protocol crate; this module re-exports it as [`header`] and [`attributes`].

use crate::error::BatchError;

pub use sluice_batch::{MAGIC_V2, attributes, header};

/// Size of the fixed RecordBatch v2 header, up to and including the record count.
pub const HEADER_BYTES: usize = header::BYTES;
/// Bytes before the `batch length` field's coverage starts: base offset + batch length.
pub const LOG_OVERHEAD_BYTES: usize = header::LOG_OVERHEAD_BYTES;
/// Largest batch the log accepts, whatever the caller's own limit. Segment positions are `u32`,
/// and a segment never grows past `segment_bytes` (at most 1 GiB) plus one batch, so a batch must
/// stay below 2 GiB for positions to fit.
pub const BATCH_BYTES_MAX: usize = 1 << 30;

/// What `peek` found at the start of a byte slice.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Peek {
    /// A whole batch of this many bytes starts here (header fields not yet validated).
    Whole(usize),
    /// The slice ends before the batch does; `needed` is the whole batch size if known.
    Incomplete { needed: Option<usize> },
}

/// Cheap framing check that allocates nothing: is a whole batch at the start of `buf`?
///
/// Returns an error only when the length field itself is impossible (smaller than a header or
/// larger than [`BATCH_BYTES_MAX`]), which is how a zero-filled or garbage tail shows up.
pub fn peek(buf: &[u8]) -> Result<Peek, BatchError> {
    if buf.len() < LOG_OVERHEAD_BYTES {
        return Ok(Peek::Incomplete { needed: None });
    }
    let declared = sluice_batch::read_i32(buf, header::BATCH_LENGTH);
    let total = declared as i64 + LOG_OVERHEAD_BYTES as i64;
    if total < HEADER_BYTES as i64 || total > BATCH_BYTES_MAX as i64 {
        return Err(BatchError::BadLength { declared });
    }
    let total = total as usize;
    if buf.len() < total {
        return Ok(Peek::Incomplete {
            needed: Some(total),
        });
    }
    Ok(Peek::Whole(total))
}

/// A read-only view of one whole RecordBatch v2 (header + records).
#[derive(Debug, Clone, Copy)]
pub struct BatchView<'a> {
    bytes: &'a [u8],
}

impl<'a> BatchView<'a> {
    /// Views the batch at the start of `buf`, checking framing and header fields but not the CRC.
    /// `buf` may hold more bytes after the batch; [`BatchView::bytes`] is just this batch.
    pub fn parse(buf: &'a [u8]) -> Result<Self, BatchError> {
        let view = Self::framed(buf)?;
        let count = view.record_count();
        if count <= 0 {
            return Err(BatchError::NoRecords { count });
        }
        if view.last_offset_delta() != count - 1 {
            return Err(BatchError::OffsetDeltaMismatch {
                last_offset_delta: view.last_offset_delta(),
                record_count: count,
            });
        }
        Ok(view)
    }

    /// The whole v2 batch at the start of `buf` (framing and magic checked), what both
    /// [`BatchView::parse`] and [`BatchView::parse_stored`] start from.
    fn framed(buf: &'a [u8]) -> Result<Self, BatchError> {
        let total = match peek(buf)? {
            Peek::Whole(total) => total,
            Peek::Incomplete { needed } => {
                return Err(BatchError::Truncated {
                    available: buf.len(),
                    needed,
                });
            }
        };
        let view = BatchView {
            bytes: &buf[..total],
        };
        if view.magic() != MAGIC_V2 {
            return Err(BatchError::BadMagic {
                magic: view.magic(),
            });
        }
        Ok(view)
    }

    /// Views and fully validates a batch: framing, header fields and CRC-32C.
    pub fn parse_checked(buf: &'a [u8]) -> Result<Self, BatchError> {
        let view = Self::parse(buf)?;
        view.verify_crc()?;
        Ok(view)
    }

    /// Views a batch as the log stores it, which a compaction may have thinned (see
    /// `compact/`): like [`BatchView::parse`], except that records may be fewer than the last
    /// offset delta says (the delta, and so the batch's last offset and its producer's last
    /// sequence, are kept when records are removed), down to none at all (an empty batch kept
    /// as a producer's last one). Every read of stored data uses this; appends use the strict
    /// [`BatchView::parse`].
    pub fn parse_stored(buf: &'a [u8]) -> Result<Self, BatchError> {
        let view = Self::framed(buf)?;
        let count = view.record_count();
        if count < 0 {
            return Err(BatchError::NoRecords { count });
        }
        if view.last_offset_delta() < count - 1 || view.last_offset_delta() < 0 {
            return Err(BatchError::OffsetDeltaMismatch {
                last_offset_delta: view.last_offset_delta(),
                record_count: count,
            });
        }
        Ok(view)
    }

    /// [`BatchView::parse_stored`] and the CRC-32C.
    pub fn parse_stored_checked(buf: &'a [u8]) -> Result<Self, BatchError> {
        let view = Self::parse_stored(buf)?;
        view.verify_crc()?;
        Ok(view)
    }

    /// Checks the CRC-32C stored in the header against the bytes it covers.
    pub fn verify_crc(&self) -> Result<(), BatchError> {
        let computed = sluice_batch::crc_of(self.bytes);
        let stored = self.crc();
        if computed != stored {
            return Err(BatchError::BadCrc { stored, computed });
        }
        Ok(())
    }

    /// The whole batch.
    pub fn bytes(&self) -> &'a [u8] {
        self.bytes
    }
    /// Size of the whole batch in bytes.
    pub fn len(&self) -> usize {
        self.bytes.len()
    }
    /// A parsed batch is never empty; present for API completeness.
    pub fn is_empty(&self) -> bool {
        self.bytes.is_empty()
    }
    pub fn base_offset(&self) -> i64 {
        sluice_batch::read_i64(self.bytes, header::BASE_OFFSET)
    }
    pub fn partition_leader_epoch(&self) -> i32 {
        sluice_batch::read_i32(self.bytes, header::PARTITION_LEADER_EPOCH)
    }
    pub fn magic(&self) -> i8 {
        self.bytes[header::MAGIC.start] as i8
    }
    pub fn crc(&self) -> u32 {
        sluice_batch::read_u32(self.bytes, header::CRC)
    }
    /// The attribute bits; see [`attributes`].
    pub fn attributes(&self) -> i16 {
        sluice_batch::read_i16(self.bytes, header::ATTRIBUTES)
    }
    /// Compression codec id (0 none, 1 gzip, 2 snappy, 3 lz4, 4 zstd).
    pub fn compression(&self) -> u8 {
        (self.attributes() & attributes::COMPRESSION_MASK) as u8
    }
    /// True when the broker's append time, not the producer's, is every record's timestamp.
    pub fn is_log_append_time(&self) -> bool {
        self.attributes() & attributes::TIMESTAMP_TYPE_LOG_APPEND != 0
    }
    pub fn is_control(&self) -> bool {
        self.attributes() & attributes::CONTROL != 0
    }
    /// True when the base timestamp is the delete horizon set by a compaction (KIP-534): the
    /// time after which the batch's tombstones may be removed. Record timestamps are still the
    /// base timestamp plus each record's delta.
    pub fn has_delete_horizon(&self) -> bool {
        self.attributes() & attributes::DELETE_HORIZON != 0
    }
    /// True when the batch belongs to a transaction.
    pub fn is_transactional(&self) -> bool {
        self.attributes() & attributes::TRANSACTIONAL != 0
    }
    pub fn last_offset_delta(&self) -> i32 {
        sluice_batch::read_i32(self.bytes, header::LAST_OFFSET_DELTA)
    }
    pub fn base_timestamp(&self) -> i64 {
        sluice_batch::read_i64(self.bytes, header::BASE_TIMESTAMP)
    }
    pub fn max_timestamp(&self) -> i64 {
        sluice_batch::read_i64(self.bytes, header::MAX_TIMESTAMP)
    }
    pub fn producer_id(&self) -> i64 {
        sluice_batch::read_i64(self.bytes, header::PRODUCER_ID)
    }
    pub fn producer_epoch(&self) -> i16 {
        sluice_batch::read_i16(self.bytes, header::PRODUCER_EPOCH)
    }
    pub fn base_sequence(&self) -> i32 {
        sluice_batch::read_i32(self.bytes, header::BASE_SEQUENCE)
    }
    pub fn record_count(&self) -> i32 {
        sluice_batch::read_i32(self.bytes, header::RECORD_COUNT)
    }
    /// Offset of the last record, given the batch's (possibly patched) base offset.
    pub fn last_offset(&self) -> i64 {
        self.base_offset()
            .saturating_add(self.last_offset_delta() as i64)
    }

    /// `(offset, timestamp)` of the first record whose timestamp is at least `target`, if any.
    ///
    /// Walks the records of an uncompressed batch. A compressed batch cannot be walked without
    /// decompressing (the log never does), so its base offset and max timestamp are returned when
    /// its max timestamp qualifies: the caller then starts at most one batch early.
    pub fn first_offset_with_timestamp_at_least(&self, target: i64) -> Option<(i64, i64)> {
        if self.max_timestamp() < target {
            return None;
        }
        if self.is_log_append_time() || self.compression() != 0 {
            return Some((self.base_offset(), self.max_timestamp()));
        }
        let mut records = &self.bytes[HEADER_BYTES..];
        for _ in 0..self.record_count() {
            let (len, n) = read_varint(records)?;
            let body = records.get(n..n + usize::try_from(len).ok()?)?;
            // attributes (1 byte), timestamp delta (varlong), offset delta (varint), ...
            let (ts_delta, m) = read_varint(body.get(1..)?)?;
            let (offset_delta, _) = read_varint(body.get(1 + m..)?)?;
            let timestamp = self.base_timestamp().saturating_add(ts_delta);
            if timestamp >= target {
                return Some((self.base_offset().saturating_add(offset_delta), timestamp));
            }
            records = &records[n + len as usize..];
        }
        // Max timestamp qualified but no record did: the header and records disagree.
        Some((self.base_offset(), self.max_timestamp()))
    }
}

/// Decodes a zig-zag varint (up to 64 bits); returns the value and the bytes it used.
pub(crate) fn read_varint(buf: &[u8]) -> Option<(i64, usize)> {
    let mut raw: u64 = 0;
    for (i, &b) in buf.iter().enumerate().take(10) {
        raw |= u64::from(b & 0x7f) << (7 * i);
        if b & 0x80 == 0 {
            let value = ((raw >> 1) as i64) ^ -((raw & 1) as i64);
            return Some((value, i + 1));
        }
    }
    None
}

/// The base offset's bytes, for [`header::BASE_OFFSET`]. The CRC does not cover it.
pub fn encode_base_offset(offset: i64) -> [u8; 8] {
    offset.to_be_bytes()
}

/// Builds valid RecordBatch v2 bytes. For tests, benchmarks and tools; the broker stores what
/// producers send and never builds batches itself.
pub mod build {
    use sluice_batch::{BatchBuilder, RecordRef};

    /// One record to put in a batch.
    #[derive(Debug, Clone, Copy)]
    pub struct Record<'a> {
        pub timestamp_delta: i64,
        pub key: Option<&'a [u8]>,
        pub value: Option<&'a [u8]>,
    }

    /// Encodes an uncompressed batch with `base_offset` 0 and the given records.
    pub fn batch(base_timestamp: i64, records: &[Record<'_>]) -> Vec<u8> {
        let mut out = Vec::new();
        batch_into(&mut out, base_timestamp, records);
        out
    }

    /// Like [`batch`], appending to `out` (so callers can reuse a buffer). Written by
    /// `sluice_batch::BatchBuilder`, the builder the protocol crate uses too.
    pub fn batch_into(out: &mut Vec<u8>, base_timestamp: i64, records: &[Record<'_>]) {
        assert!(!records.is_empty(), "a batch needs at least one record");
        let mut builder = BatchBuilder::with_base_timestamp(out, base_timestamp);
        for r in records {
            builder.push(&RecordRef {
                key: r.key,
                value: r.value,
                headers: &[],
                timestamp_ms: base_timestamp + r.timestamp_delta,
            });
        }
        builder.finish();
    }
}

#[cfg(test)]
mod tests {
    use super::build::{Record, batch};
    use super::*;

    fn sample() -> Vec<u8> {
        let recs = [
            Record {
                timestamp_delta: 0,
                key: Some(b"k"),
                value: Some(b"v1"),
            },
            Record {
                timestamp_delta: 5,
                key: None,
                value: Some(b"v2"),
            },
            Record {
                timestamp_delta: 9,
                key: None,
                value: None,
            },
        ];
        batch(1_000, &recs)
    }

    #[test]
    fn parses_a_built_batch() {
        let b = sample();
        let v = BatchView::parse_checked(&b).unwrap();
        assert_eq!(v.len(), b.len());
        assert_eq!(v.record_count(), 3);
        assert_eq!(v.last_offset_delta(), 2);
        assert_eq!(v.max_timestamp(), 1_009);
        assert_eq!(
            v.first_offset_with_timestamp_at_least(1_001),
            Some((1, 1_005))
        );
        assert_eq!(
            v.first_offset_with_timestamp_at_least(1_009),
            Some((2, 1_009))
        );
        assert_eq!(v.first_offset_with_timestamp_at_least(1_010), None);
        assert_eq!(v.first_offset_with_timestamp_at_least(0), Some((0, 1_000)));
    }

    #[test]
    fn base_offset_is_outside_the_crc() {
        let mut b = sample();
        b[..8].copy_from_slice(&encode_base_offset(42));
        let v = BatchView::parse_checked(&b).unwrap();
        assert_eq!(v.base_offset(), 42);
        assert_eq!(v.last_offset(), 44);
    }

    #[test]
    fn rejects_each_kind_of_bad_batch() {
        let good = sample();
        let mut bad_crc = good.clone();
        *bad_crc.last_mut().unwrap() ^= 1;
        assert!(matches!(
            BatchView::parse_checked(&bad_crc),
            Err(BatchError::BadCrc { .. })
        ));
        let mut bad_magic = good.clone();
        bad_magic[16] = 1;
        assert!(matches!(
            BatchView::parse(&bad_magic),
            Err(BatchError::BadMagic { magic: 1 })
        ));
        assert!(matches!(
            BatchView::parse(&good[..good.len() - 1]),
            Err(BatchError::Truncated { .. })
        ));
        assert!(matches!(
            BatchView::parse(&[0u8; 64]),
            Err(BatchError::BadLength { declared: 0 })
        ));
        let mut zero_count = good.clone();
        zero_count[57..61].copy_from_slice(&0i32.to_be_bytes());
        assert!(matches!(
            BatchView::parse(&zero_count),
            Err(BatchError::NoRecords { count: 0 })
        ));
        let mut bad_delta = good.clone();
        bad_delta[23..27].copy_from_slice(&7i32.to_be_bytes());
        assert!(matches!(
            BatchView::parse(&bad_delta),
            Err(BatchError::OffsetDeltaMismatch { .. })
        ));
    }

    #[test]
    fn peek_needs_no_more_than_the_length_field() {
        let b = sample();
        assert_eq!(peek(&b[..5]).unwrap(), Peek::Incomplete { needed: None });
        assert_eq!(
            peek(&b[..20]).unwrap(),
            Peek::Incomplete {
                needed: Some(b.len())
            }
        );
        assert_eq!(peek(&b).unwrap(), Peek::Whole(b.len()));
    }

    proptest::proptest! {
        /// Arbitrary bytes never panic the parser: they parse, or give a typed error.
        #[test]
        fn arbitrary_bytes_never_panic(bytes in proptest::collection::vec(proptest::num::u8::ANY, 0..400)) {
            let _ = peek(&bytes);
            if let Ok(v) = BatchView::parse(&bytes) {
                let _ = v.verify_crc();
                let _ = v.first_offset_with_timestamp_at_least(0);
                let _ = v.first_offset_with_timestamp_at_least(i64::MAX);
            }
        }

        /// A valid header over garbage records never panics the timestamp walk.
        #[test]
        fn garbage_records_never_panic(
            records in proptest::collection::vec(proptest::num::u8::ANY, 0..300),
            count in 1i32..50,
            target in proptest::num::i64::ANY,
        ) {
            let mut b = sample();
            b.truncate(HEADER_BYTES);
            b.extend_from_slice(&records);
            let len = (b.len() - LOG_OVERHEAD_BYTES) as i32;
            b[8..12].copy_from_slice(&len.to_be_bytes());
            b[23..27].copy_from_slice(&(count - 1).to_be_bytes());
            b[57..61].copy_from_slice(&count.to_be_bytes());
            b[35..43].copy_from_slice(&i64::MAX.to_be_bytes());
            let v = BatchView::parse(&b).unwrap();
            let _ = v.first_offset_with_timestamp_at_least(target);
        }
    }

    #[test]
    fn varint_round_trips() {
        for v in [0i64, 1, -1, 63, -64, 64, 300, -300, i64::MAX, i64::MIN] {
            let mut buf = Vec::new();
            let mut x = ((v << 1) ^ (v >> 63)) as u64;
            while x >= 0x80 {
                buf.push((x as u8) | 0x80);
                x >>= 7;
            }
            buf.push(x as u8);
            assert_eq!(read_varint(&buf), Some((v, buf.len())));
        }
    }
}
