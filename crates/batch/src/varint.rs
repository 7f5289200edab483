//! Zig-zag LEB128 varints as RecordBatch v2 records use them (as in protobuf): the encoders and
//! their exact sizes. The decoders live with the record decoder in the protocol crate.

use bytes::BufMut;

fn zigzag32(value: i32) -> u64 {
    ((value << 1) ^ (value >> 31)) as u32 as u64
}

fn zigzag64(value: i64) -> u64 {
    ((value << 1) ^ (value >> 63)) as u64
}

/// Bytes of `value` as unsigned LEB128 (7 bits per byte).
pub fn unsigned_len(value: u64) -> usize {
    let bits = 64 - (value | 1).leading_zeros() as usize;
    bits.div_ceil(7)
}

/// Bytes of `value` as a zig-zag varint.
pub fn varint_len(value: i32) -> usize {
    unsigned_len(zigzag32(value))
}

/// Bytes of `value` as a zig-zag varlong.
pub fn varlong_len(value: i64) -> usize {
    unsigned_len(zigzag64(value))
}

/// Bytes of a length-prefixed, nullable byte string (length -1 = null).
pub fn nullable_len(bytes: Option<&[u8]>) -> usize {
    match bytes {
        None => 1,
        Some(b) => varint_len(b.len() as i32) + b.len(),
    }
}

/// Writes `value` as a zig-zag varint.
pub fn put_varint(out: &mut impl BufMut, value: i32) {
    put_unsigned(out, zigzag32(value));
}

/// Writes `value` as a zig-zag varlong.
pub fn put_varlong(out: &mut impl BufMut, value: i64) {
    put_unsigned(out, zigzag64(value));
}

/// Writes `value` as unsigned LEB128.
pub fn put_unsigned(out: &mut impl BufMut, mut value: u64) {
    while value >= 0x80 {
        out.put_u8((value as u8) | 0x80);
        value >>= 7;
    }
    out.put_u8(value as u8);
}

/// Writes a length-prefixed, nullable byte string (length -1 = null).
pub fn put_nullable_bytes(out: &mut impl BufMut, bytes: Option<&[u8]>) {
    match bytes {
        None => put_varint(out, -1),
        Some(b) => {
            put_varint(out, b.len() as i32);
            out.put_slice(b);
        }
    }
}
