//! # sluice-batch: the one description of the Kafka RecordBatch v2 header
//!
//! Every Sluice crate that touches a RecordBatch reads or writes the same 61-byte header: the
//! log validates it and patches the base offset on append, the protocol layer builds batches for
//! `sluice produce` and the HTTP API and decodes fetched ones, the broker checks the attribute
//! bits. This crate holds the header's field offsets, checked at compile time, the attribute bit
//! masks and the CRC-32C rule, so there is exactly one place that says where a field sits.
//!
//! Why a crate of its own: `sluice-log` and `sluice-protocol` must not depend on each other
//! (DESIGN.md: the log knows nothing of the wire protocol, and the protocol knows nothing of
//! storage), yet both need the layout at run time (the log to validate and index appends, the
//! protocol to build and decode batches). A leaf crate that both depend on keeps that rule.
//! It depends only on `bytes` and `crc32c` and does no I/O; nothing in it allocates except a
//! builder growing a buffer the caller did not reserve.
//!
//! Layout (all integers big-endian):
//!
//! | bytes  | field                            | type | covered by CRC |
//! |--------|----------------------------------|------|----------------|
//! | 0..8   | base offset                      | i64  | no (patched on append) |
//! | 8..12  | batch length (bytes after it)    | i32  | no |
//! | 12..16 | partition leader epoch           | i32  | no |
//! | 16     | magic (= 2)                      | i8   | no |
//! | 17..21 | CRC-32C of bytes 21..end         | u32  | -  |
//! | 21..23 | attributes ([`attributes`])      | i16  | yes |
//! | 23..27 | last offset delta                | i32  | yes |
//! | 27..35 | base timestamp                   | i64  | yes |
//! | 35..43 | max timestamp                    | i64  | yes |
//! | 43..51 | producer id                      | i64  | yes |
//! | 51..53 | producer epoch                   | i16  | yes |
//! | 53..57 | base sequence                    | i32  | yes |
//! | 57..61 | record count                     | i32  | yes |
//!
//! Then the records (compressed as one stream when the codec bits say so).
//!
//! Key items: the field ranges in [`header`], [`attributes`], [`crc_of`], the read helpers
//! [`read_i16`], [`read_i32`], [`read_i64`], [`read_u32`] that take a field range, and
//! [`BatchBuilder`], the one batch builder (into a `BytesMut` or a `Vec<u8>`).

use core::ops::Range;

pub mod build;
pub mod varint;

pub use build::{BatchBuf, BatchBuilder, Header, RecordRef};

/// Field positions within the header. Each constant is the byte range of one field; index a
/// batch with it (`&batch[header::CRC]`).
pub mod header {
    use core::ops::Range;

    pub const BASE_OFFSET: Range<usize> = 0..8;
    pub const BATCH_LENGTH: Range<usize> = 8..12;
    pub const PARTITION_LEADER_EPOCH: Range<usize> = 12..16;
    pub const MAGIC: Range<usize> = 16..17;
    pub const CRC: Range<usize> = 17..21;
    pub const ATTRIBUTES: Range<usize> = 21..23;
    pub const LAST_OFFSET_DELTA: Range<usize> = 23..27;
    pub const BASE_TIMESTAMP: Range<usize> = 27..35;
    pub const MAX_TIMESTAMP: Range<usize> = 35..43;
    pub const PRODUCER_ID: Range<usize> = 43..51;
    pub const PRODUCER_EPOCH: Range<usize> = 51..53;
    pub const BASE_SEQUENCE: Range<usize> = 53..57;
    pub const RECORD_COUNT: Range<usize> = 57..61;

    /// Size of the fixed header, up to and including the record count.
    pub const BYTES: usize = 61;
    /// Base offset + batch length: the bytes before what the batch length counts.
    pub const LOG_OVERHEAD_BYTES: usize = BATCH_LENGTH.end;
    /// The first byte the CRC covers (the attributes); it covers everything to the batch's end.
    pub const CRC_COVERS_FROM: usize = ATTRIBUTES.start;

    /// Every field in wire order, with the size of its integer type.
    const FIELDS: [(Range<usize>, usize); 13] = [
        (BASE_OFFSET, size_of::<i64>()),
        (BATCH_LENGTH, size_of::<i32>()),
        (PARTITION_LEADER_EPOCH, size_of::<i32>()),
        (MAGIC, size_of::<i8>()),
        (CRC, size_of::<u32>()),
        (ATTRIBUTES, size_of::<i16>()),
        (LAST_OFFSET_DELTA, size_of::<i32>()),
        (BASE_TIMESTAMP, size_of::<i64>()),
        (MAX_TIMESTAMP, size_of::<i64>()),
        (PRODUCER_ID, size_of::<i64>()),
        (PRODUCER_EPOCH, size_of::<i16>()),
        (BASE_SEQUENCE, size_of::<i32>()),
        (RECORD_COUNT, size_of::<i32>()),
    ];

    // The layout is checked when the crate compiles: the fields start at 0, each has the width
    // of its type, each starts where the previous one ends, and together they fill the header.
    const _: () = {
        let mut at = 0;
        let mut i = 0;
        while i < FIELDS.len() {
            let (range, width) = (FIELDS[i].0.start, FIELDS[i].0.end);
            assert!(range == at, "header fields must be contiguous");
            assert!(
                width - range == FIELDS[i].1,
                "field width must match its type"
            );
            at = width;
            i += 1;
        }
        assert!(at == BYTES, "header fields must fill the header exactly");
        assert!(
            CRC.end == CRC_COVERS_FROM,
            "the CRC covers everything after itself"
        );
    };
}

/// The batch attributes (an `i16`, as in Kafka's protocol) and their bits.
pub mod attributes {
    /// Bits 0..3: compression codec (one of [`codec`]).
    pub const COMPRESSION_MASK: i16 = 0x07;
    /// Bit 3: timestamp type; set means log-append time (the broker's), clear create time.
    pub const TIMESTAMP_TYPE_LOG_APPEND: i16 = 0x08;
    /// Bit 4: the batch belongs to a transaction.
    pub const TRANSACTIONAL: i16 = 0x10;
    /// Bit 5: a control batch (transaction markers), not application records.
    pub const CONTROL: i16 = 0x20;
    /// Bit 6: the base timestamp is the delete horizon (compacted topics).
    pub const DELETE_HORIZON: i16 = 0x40;

    /// Compression codec ids, as stored in the low three bits.
    pub mod codec {
        pub const NONE: i16 = 0;
        pub const GZIP: i16 = 1;
        pub const SNAPPY: i16 = 2;
        pub const LZ4: i16 = 3;
        pub const ZSTD: i16 = 4;
    }

    const _: () = {
        let bits = [
            COMPRESSION_MASK,
            TIMESTAMP_TYPE_LOG_APPEND,
            TRANSACTIONAL,
            CONTROL,
            DELETE_HORIZON,
        ];
        let mut seen = 0i16;
        let mut i = 0;
        while i < bits.len() {
            assert!(seen & bits[i] == 0, "attribute bits must not overlap");
            seen |= bits[i];
            i += 1;
        }
        assert!(codec::ZSTD & !COMPRESSION_MASK == 0, "codecs fit the mask");
    };
}

/// The only record batch format Sluice reads or writes.
pub const MAGIC_V2: i8 = 2;

/// CRC-32C of a whole batch as its header should store it: over every byte from the attributes
/// to the end. `batch` must hold at least the header.
pub fn crc_of(batch: &[u8]) -> u32 {
    crc32c::crc32c(&batch[header::CRC_COVERS_FROM..])
}

/// Reads the big-endian `i16` field at `field` (a range from [`header`]). Panics if `buf` is
/// shorter than the field's end; callers check the header is whole first.
pub fn read_i16(buf: &[u8], field: Range<usize>) -> i16 {
    i16::from_be_bytes(buf[field].try_into().expect("a 2-byte field"))
}

/// Reads the big-endian `i32` field at `field`; see [`read_i16`].
pub fn read_i32(buf: &[u8], field: Range<usize>) -> i32 {
    i32::from_be_bytes(buf[field].try_into().expect("a 4-byte field"))
}

/// Reads the big-endian `u32` field at `field` (the CRC); see [`read_i16`].
pub fn read_u32(buf: &[u8], field: Range<usize>) -> u32 {
    u32::from_be_bytes(buf[field].try_into().expect("a 4-byte field"))
}

/// Reads the big-endian `i64` field at `field`; see [`read_i16`].
pub fn read_i64(buf: &[u8], field: Range<usize>) -> i64 {
    i64::from_be_bytes(buf[field].try_into().expect("an 8-byte field"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_fields_where_the_table_says() {
        let mut b = [0u8; header::BYTES];
        b[header::BASE_OFFSET].copy_from_slice(&7i64.to_be_bytes());
        b[header::ATTRIBUTES].copy_from_slice(&(attributes::CONTROL | 3).to_be_bytes());
        b[header::RECORD_COUNT].copy_from_slice(&(-2i32).to_be_bytes());
        assert_eq!(read_i64(&b, header::BASE_OFFSET), 7);
        assert_eq!(
            read_i16(&b, header::ATTRIBUTES) & attributes::COMPRESSION_MASK,
            3
        );
        assert_eq!(read_i32(&b, header::RECORD_COUNT), -2);
        assert_eq!(b[header::MAGIC.start], 0);
        let crc = crc_of(&b);
        b[header::CRC].copy_from_slice(&crc.to_be_bytes());
        assert_eq!(
            read_u32(&b, header::CRC),
            crc_of(&b),
            "the CRC does not cover itself"
        );
    }
}
