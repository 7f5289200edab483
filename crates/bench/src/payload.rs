//! The bytes of every record the benchmark sends: a fixed header that lets consumers measure
//! end-to-end latency and lets the correctness checker tell lost, duplicated, reordered and
//! corrupted records apart, followed by filler up to the record size.
//!
//! ```text
//! 0..4    magic "SLB1"
//! 4..8    producer id          u32 little-endian
//! 8..16   sequence             u64 little-endian (per producer, from 0, no gaps)
//! 16..24  intended send time   u64 little-endian, ns since the Unix epoch
//! 24..28  CRC-32C of bytes 0..24 followed by bytes 28..
//! 28..    filler
//! ```

/// Smallest record the benchmark can send.
pub const HEADER_LEN: usize = 28;
pub const MAGIC: [u8; 4] = *b"SLB1";

/// A decoded record header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Header {
    pub producer: u32,
    pub seq: u64,
    pub intended_ns: u64,
}

/// Why a payload did not decode.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum PayloadError {
    #[error("record is {0} bytes, shorter than the {HEADER_LEN}-byte benchmark header")]
    TooShort(usize),
    #[error("record does not start with the benchmark magic")]
    BadMagic,
    #[error("record checksum mismatch (stored {stored:#010x}, computed {computed:#010x})")]
    BadChecksum { stored: u32, computed: u32 },
}

/// Fills `buf` (whose length is the record size, at least [`HEADER_LEN`]) with one record.
/// The filler is `filler[..]` repeated from an offset that depends on `seq`, so that records of
/// one producer differ without generating random bytes per record.
pub fn encode(buf: &mut [u8], header: Header, filler: &[u8]) {
    assert!(
        buf.len() >= HEADER_LEN,
        "record size below the header length"
    );
    buf[0..4].copy_from_slice(&MAGIC);
    buf[4..8].copy_from_slice(&header.producer.to_le_bytes());
    buf[8..16].copy_from_slice(&header.seq.to_le_bytes());
    buf[16..24].copy_from_slice(&header.intended_ns.to_le_bytes());
    let body = &mut buf[HEADER_LEN..];
    if !filler.is_empty() && !body.is_empty() {
        let mut from = (header.seq as usize).wrapping_mul(31) % filler.len();
        let mut at = 0;
        while at < body.len() {
            let n = (filler.len() - from).min(body.len() - at);
            body[at..at + n].copy_from_slice(&filler[from..from + n]);
            at += n;
            from = 0;
        }
    }
    let crc = checksum(buf);
    buf[24..28].copy_from_slice(&crc.to_le_bytes());
}

/// Only the header, without verifying the checksum (for latency on the hot consume path).
pub fn peek(buf: &[u8]) -> Result<Header, PayloadError> {
    if buf.len() < HEADER_LEN {
        return Err(PayloadError::TooShort(buf.len()));
    }
    if buf[0..4] != MAGIC {
        return Err(PayloadError::BadMagic);
    }
    Ok(Header {
        producer: u32::from_le_bytes(buf[4..8].try_into().expect("4 bytes")),
        seq: u64::from_le_bytes(buf[8..16].try_into().expect("8 bytes")),
        intended_ns: u64::from_le_bytes(buf[16..24].try_into().expect("8 bytes")),
    })
}

/// The header, after checking magic and checksum.
pub fn decode(buf: &[u8]) -> Result<Header, PayloadError> {
    let header = peek(buf)?;
    let stored = u32::from_le_bytes(buf[24..28].try_into().expect("4 bytes"));
    let computed = checksum(buf);
    if stored != computed {
        return Err(PayloadError::BadChecksum { stored, computed });
    }
    Ok(header)
}

fn checksum(buf: &[u8]) -> u32 {
    let crc = crc32c::crc32c(&buf[..24]);
    crc32c::crc32c_append(crc, &buf[HEADER_LEN..])
}

/// Deterministic pseudo-random filler bytes (xorshift), generated once per producer.
pub fn filler(len: usize, seed: u64) -> Vec<u8> {
    let mut state = seed | 1;
    let mut out = Vec::with_capacity(len);
    while out.len() < len {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        let take = (len - out.len()).min(8);
        out.extend_from_slice(&state.to_le_bytes()[..take]);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(size: usize, seq: u64) -> Vec<u8> {
        let mut buf = vec![0; size];
        let header = Header {
            producer: 7,
            seq,
            intended_ns: 1_700_000_000_123_456_789,
        };
        encode(&mut buf, header, &filler(4096, 42));
        buf
    }

    #[test]
    fn round_trips_at_every_size() {
        for size in [HEADER_LEN, HEADER_LEN + 1, 100, 1024, 10_000] {
            let buf = record(size, 5);
            let header = decode(&buf).unwrap();
            assert_eq!(
                header,
                Header {
                    producer: 7,
                    seq: 5,
                    intended_ns: 1_700_000_000_123_456_789
                }
            );
        }
    }

    #[test]
    fn any_flipped_bit_is_caught() {
        let clean = record(100, 9);
        for byte in 0..clean.len() {
            let mut bad = clean.clone();
            bad[byte] ^= 0x10;
            assert!(decode(&bad).is_err(), "flip in byte {byte} went unnoticed");
        }
    }

    #[test]
    fn short_and_foreign_records_are_refused() {
        assert_eq!(decode(&[0; 10]), Err(PayloadError::TooShort(10)));
        assert_eq!(decode(&[0; 64]), Err(PayloadError::BadMagic));
    }

    #[test]
    fn records_of_one_producer_differ() {
        assert_ne!(record(1024, 1)[HEADER_LEN..], record(1024, 2)[HEADER_LEN..]);
    }
}
