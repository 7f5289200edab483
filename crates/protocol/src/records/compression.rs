//! Decompression of the records section of a compressed batch: gzip, snappy (raw, or in the
//! Java client's xerial framing), lz4 (frame format) and zstd, as Kafka producers write them;
//! and compression into the same formats, for the log cleaner's rewritten batches.
//!
//! Every codec's output is bounded by a caller-given limit, so a batch that claims (or
//! inflates to) more cannot exhaust memory: snappy states its output length up front and is
//! checked before allocating; the streaming codecs are read through a `take(limit + 1)`.

use std::io::Read;

use sluice_batch::attributes::codec::{GZIP, LZ4, SNAPPY, ZSTD};

/// The first bytes of a snappy stream in the framing of the Java client's xerial library:
/// magic (8), version (4), compatible version (4), then blocks of length (4, big-endian) + raw
/// snappy data.
const XERIAL_MAGIC: &[u8; 8] = b"\x82SNAPPY\x00";
const XERIAL_HEADER_BYTES: usize = 16;

/// Why a compressed records section could not be inflated.
pub(super) enum Inflate {
    UnknownCodec,
    TooLarge,
    Invalid(String),
}

impl From<std::io::Error> for Inflate {
    fn from(e: std::io::Error) -> Self {
        Inflate::Invalid(e.to_string())
    }
}

/// Decompresses `input` (one batch's records section) written with `codec`, into at most
/// `limit` bytes. Memory use is bounded by `limit` plus each codec's fixed working state (the
/// zstd window is at most 128 MiB, the reference library's default cap).
pub(super) fn decompress(codec: i16, input: &[u8], limit: usize) -> Result<Vec<u8>, Inflate> {
    match codec {
        GZIP => read_bounded(flate2::read::MultiGzDecoder::new(input), input.len(), limit),
        SNAPPY => {
            if input.starts_with(XERIAL_MAGIC) {
                snappy_xerial(input, limit)
            } else {
                let mut out = Vec::new();
                snappy_block(input, &mut out, limit)?;
                Ok(out)
            }
        }
        LZ4 => read_bounded(
            lz4_flex::frame::FrameDecoder::new(input),
            input.len(),
            limit,
        ),
        ZSTD => read_bounded(
            zstd::stream::read::Decoder::with_buffer(input)?,
            input.len(),
            limit,
        ),
        _ => Err(Inflate::UnknownCodec),
    }
}

/// Bytes of input per xerial snappy block, as the Java client writes them.
const XERIAL_BLOCK_BYTES: usize = 32 << 10;

/// Compresses `input` (a batch's records section) with `codec` in the format every Kafka client
/// reads: gzip; snappy in the Java client's xerial framing (which librdkafka and the Go
/// clients read too); lz4 frames of independent 64 KiB blocks, no checksums but the header's,
/// as Kafka's own lz4 stream writes them; zstd at level 3 (zstd-jni's default).
pub(super) fn compress(codec: i16, input: &[u8]) -> Result<Vec<u8>, String> {
    use std::io::Write;
    let io = |e: std::io::Error| e.to_string();
    match codec {
        GZIP => {
            let mut encoder = flate2::write::GzEncoder::new(
                Vec::with_capacity(input.len() / 2),
                flate2::Compression::default(),
            );
            encoder.write_all(input).map_err(io)?;
            encoder.finish().map_err(io)
        }
        SNAPPY => {
            let mut out = Vec::with_capacity(XERIAL_HEADER_BYTES + input.len() / 2);
            out.extend_from_slice(XERIAL_MAGIC);
            out.extend_from_slice(&1i32.to_be_bytes()); // version
            out.extend_from_slice(&1i32.to_be_bytes()); // compatible version
            let mut encoder = snap::raw::Encoder::new();
            for chunk in input.chunks(XERIAL_BLOCK_BYTES) {
                let at = out.len();
                out.extend_from_slice(&[0; 4]);
                out.resize(at + 4 + snap::raw::max_compress_len(chunk.len()), 0);
                let n = encoder
                    .compress(chunk, &mut out[at + 4..])
                    .map_err(|e| e.to_string())?;
                out.truncate(at + 4 + n);
                out[at..at + 4].copy_from_slice(&(n as u32).to_be_bytes());
            }
            Ok(out)
        }
        LZ4 => {
            use lz4_flex::frame::{BlockMode, BlockSize, FrameEncoder, FrameInfo};
            let info = FrameInfo::new()
                .block_size(BlockSize::Max64KB)
                .block_mode(BlockMode::Independent);
            let mut encoder =
                FrameEncoder::with_frame_info(info, Vec::with_capacity(input.len() / 2));
            encoder.write_all(input).map_err(io)?;
            encoder.finish().map_err(|e| e.to_string())
        }
        ZSTD => zstd::bulk::compress(input, 3).map_err(io),
        other => Err(format!("unknown compression codec {other}")),
    }
}

/// Reads `reader` to its end, refusing output over `limit` bytes.
fn read_bounded(reader: impl Read, input_len: usize, limit: usize) -> Result<Vec<u8>, Inflate> {
    // A guess at the output size saves a few reallocations; the limit still applies.
    let mut out = Vec::with_capacity(input_len.saturating_mul(4).min(limit));
    let cap = u64::try_from(limit).unwrap_or(u64::MAX).saturating_add(1);
    reader.take(cap).read_to_end(&mut out)?;
    if out.len() > limit {
        return Err(Inflate::TooLarge);
    }
    Ok(out)
}

/// Appends one raw snappy block to `out`, refusing to grow `out` beyond `limit` bytes. The
/// block states its decompressed length up front, so that is checked before any allocation.
fn snappy_block(block: &[u8], out: &mut Vec<u8>, limit: usize) -> Result<(), Inflate> {
    let snappy = |e: snap::Error| Inflate::Invalid(e.to_string());
    let len = snap::raw::decompress_len(block).map_err(snappy)?;
    let start = out.len();
    if len > limit.saturating_sub(start) {
        return Err(Inflate::TooLarge);
    }
    out.resize(start + len, 0);
    let written = snap::raw::Decoder::new()
        .decompress(block, &mut out[start..])
        .map_err(snappy)?;
    out.truncate(start + written);
    Ok(())
}

/// The Java client's snappy framing: a 16-byte header, then blocks of a big-endian length and
/// that many bytes of raw snappy.
fn snappy_xerial(input: &[u8], limit: usize) -> Result<Vec<u8>, Inflate> {
    let mut rest = input
        .get(XERIAL_HEADER_BYTES..)
        .ok_or_else(|| Inflate::Invalid("xerial snappy header cut short".to_owned()))?;
    let mut out = Vec::new();
    while !rest.is_empty() {
        let Some((len, tail)) = rest.split_first_chunk::<4>() else {
            return Err(Inflate::Invalid(
                "xerial snappy block length cut short".to_owned(),
            ));
        };
        let len = u32::from_be_bytes(*len) as usize;
        if tail.len() < len {
            return Err(Inflate::Invalid(format!(
                "xerial snappy block of {len} bytes has only {} left",
                tail.len()
            )));
        }
        let (block, tail) = tail.split_at(len);
        if !block.is_empty() {
            snappy_block(block, &mut out, limit)?;
        }
        rest = tail;
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use std::io::Write;

    use bytes::{Bytes, BytesMut};
    use sluice_batch::varint::put_unsigned;

    use super::super::tests::{record, sample};
    use super::super::*;
    use super::*;

    /// `records`, encoded, then its records section replaced by `compress(section)` under
    /// `codec`, with the length and CRC fixed up: what a Kafka producer sends.
    fn compressed_batch(
        records: &[ProducerRecord],
        codec: i16,
        compress: impl FnOnce(&[u8]) -> Vec<u8>,
    ) -> Bytes {
        let mut plain = BytesMut::new();
        encode_batch(&mut plain, records);
        let packed = compress(&plain[BATCH_HEADER_BYTES..]);
        let mut out = BytesMut::from(&plain[..BATCH_HEADER_BYTES]);
        out.extend_from_slice(&packed);
        let length = (out.len() - LOG_OVERHEAD_BYTES) as i32;
        out[header::BATCH_LENGTH].copy_from_slice(&length.to_be_bytes());
        let attributes = sluice_batch::read_i16(&out, header::ATTRIBUTES) | codec;
        out[header::ATTRIBUTES].copy_from_slice(&attributes.to_be_bytes());
        let crc = sluice_batch::crc_of(&out);
        out[header::CRC].copy_from_slice(&crc.to_be_bytes());
        out.freeze()
    }

    fn gzip(data: &[u8]) -> Vec<u8> {
        let mut enc = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
        enc.write_all(data).unwrap();
        enc.finish().unwrap()
    }

    fn snappy_raw(data: &[u8]) -> Vec<u8> {
        snap::raw::Encoder::new().compress_vec(data).unwrap()
    }

    /// The Java client's framing, in blocks of `block` bytes of input.
    fn snappy_xerial(data: &[u8], block: usize) -> Vec<u8> {
        let mut out = XERIAL_MAGIC.to_vec();
        out.extend_from_slice(&1i32.to_be_bytes()); // version
        out.extend_from_slice(&1i32.to_be_bytes()); // compatible version
        for chunk in data.chunks(block) {
            let packed = snappy_raw(chunk);
            out.extend_from_slice(&(packed.len() as u32).to_be_bytes());
            out.extend_from_slice(&packed);
        }
        out
    }

    fn lz4(data: &[u8]) -> Vec<u8> {
        let mut enc = lz4_flex::frame::FrameEncoder::new(Vec::new());
        enc.write_all(data).unwrap();
        enc.finish().unwrap()
    }

    fn zstd(data: &[u8]) -> Vec<u8> {
        zstd::bulk::compress(data, 3).unwrap()
    }

    type Codec = (i16, &'static str, fn(&[u8]) -> Vec<u8>);

    fn codecs() -> [Codec; 5] {
        [
            (GZIP, "gzip", gzip),
            (SNAPPY, "snappy", snappy_raw),
            (SNAPPY, "snappy", |d| snappy_xerial(d, 1_000)),
            (LZ4, "lz4", lz4),
            (ZSTD, "zstd", zstd),
        ]
    }

    #[test]
    fn compressed_batches_decode_with_every_codec() {
        let records = sample();
        for (codec, name, compress) in codecs() {
            let bytes = compressed_batch(&records, codec, compress);
            let batch = Batches::new(bytes).next().unwrap().unwrap();
            assert_eq!(batch.codec(), name);
            let got = batch.records().unwrap_or_else(|e| panic!("{name}: {e}"));
            assert_eq!(got.len(), records.len(), "{name}");
            for (got, want) in got.iter().zip(&records) {
                assert_eq!(got.key, want.key, "{name}");
                assert_eq!(got.value, want.value, "{name}");
                assert_eq!(got.timestamp_ms, want.timestamp_ms, "{name}");
                assert_eq!(got.headers.len(), 2, "{name}");
            }
        }
    }

    #[test]
    fn decompressed_size_is_bounded() {
        let records = sample();
        let mut plain = BytesMut::new();
        encode_batch(&mut plain, &records);
        let section = plain.len() - BATCH_HEADER_BYTES;
        for (codec, name, compress) in codecs() {
            let bytes = compressed_batch(&records, codec, compress);
            let batch = Batches::new(bytes).next().unwrap().unwrap();
            // Exactly the section's size is enough; one byte less is refused.
            assert_eq!(batch.records_section(section).unwrap().len(), section);
            let err = batch.records_section(section - 1).unwrap_err();
            assert!(
                matches!(err, DecodeError::DecompressedTooLarge { limit, .. } if limit == section - 1),
                "{name}: {err}"
            );
            assert!(err.to_string().contains(name), "{err}");
        }

        // A snappy block that claims 2 GiB of output is refused before anything is allocated.
        let mut claim = Vec::new();
        put_unsigned(&mut claim, 1 << 31);
        claim.extend_from_slice(&[0u8; 8]);
        let bytes = compressed_batch(&[record(None, "x", &[], 1)], SNAPPY, |_| claim);
        let batch = Batches::new(bytes).next().unwrap().unwrap();
        let err = batch.records().unwrap_err();
        assert!(
            matches!(err, DecodeError::DecompressedTooLarge { .. }),
            "{err}"
        );

        // A gzip bomb: 100 MiB of zeros in about 100 KiB.
        let zeros = vec![0u8; 100 << 20];
        let bytes = compressed_batch(&[record(None, "x", &[], 1)], GZIP, |_| gzip(&zeros));
        let batch = Batches::new(bytes).next().unwrap().unwrap();
        let err = batch.records().unwrap_err();
        assert!(
            matches!(err, DecodeError::DecompressedTooLarge { limit, .. } if limit == DECOMPRESSED_BYTES_MAX),
            "{err}"
        );
    }

    #[test]
    fn corrupt_compressed_data_is_an_error_not_a_panic() {
        let records = sample();
        for (codec, name, compress) in codecs() {
            let good = compress(&{
                let mut plain = BytesMut::new();
                encode_batch(&mut plain, &records);
                plain[BATCH_HEADER_BYTES..].to_vec()
            });
            for cut in [0, 1, 5, 17, good.len() / 2, good.len() - 12] {
                let bytes = compressed_batch(&records, codec, |_| good[..cut].to_vec());
                let batch = Batches::new(bytes).next().unwrap().unwrap();
                assert!(batch.records().is_err(), "{name} cut at {cut}");
            }
            // Cutting the very end may only remove a trailer (lz4's end mark): then the records
            // must come back whole, never different.
            let bytes = compressed_batch(&records, codec, |_| good[..good.len() - 1].to_vec());
            let batch = Batches::new(bytes).next().unwrap().unwrap();
            if let Ok(got) = batch.records() {
                let want: Vec<_> = got.iter().map(|r| r.value.clone()).collect();
                let sent: Vec<_> = records.iter().map(|r| r.value.clone()).collect();
                assert_eq!(want, sent, "{name}");
            }
            let mut flipped = good.clone();
            for i in (0..flipped.len()).step_by(3) {
                flipped[i] ^= 0x5a;
            }
            let bytes = compressed_batch(&records, codec, |_| flipped);
            let batch = Batches::new(bytes).next().unwrap().unwrap();
            // Garbage may happen to decode to something, but never to the original records.
            if let Ok(got) = batch.records() {
                assert_ne!(got.len(), records.len(), "{name}");
            }
        }
    }

    #[test]
    fn unknown_codec_is_named() {
        let bytes = compressed_batch(&[record(None, "x", &[], 1)], 6, |d| d.to_vec());
        let batch = Batches::new(bytes).next().unwrap().unwrap();
        let err = batch.records().unwrap_err();
        assert!(
            matches!(err, DecodeError::UnknownCodec { codec: 6, .. }),
            "{err}"
        );
    }

    #[test]
    fn compressed_sections_round_trip_in_the_formats_kafka_reads() {
        // Several blocks of every codec: 200 KiB of somewhat compressible bytes.
        let input: Vec<u8> = (0..200u32 << 10)
            .map(|i| (i % 251) as u8 ^ (i / 997) as u8)
            .collect();
        for codec in [GZIP, SNAPPY, LZ4, ZSTD] {
            let packed = compress(codec, &input).unwrap();
            assert!(packed.len() < input.len(), "codec {codec}");
            let back =
                decompress(codec, &packed, input.len()).unwrap_or_else(|_| panic!("{codec}"));
            assert_eq!(back, input, "codec {codec}");
        }
        let snappy = compress(SNAPPY, &input).unwrap();
        assert!(snappy.starts_with(XERIAL_MAGIC));
        assert_eq!(&snappy[8..16], &[0, 0, 0, 1, 0, 0, 0, 1]);
        // lz4: magic, then FLG version 01 with independent blocks and nothing else, BD 64 KiB.
        let lz4 = compress(LZ4, &input).unwrap();
        assert_eq!(&lz4[..4], &[0x04, 0x22, 0x4d, 0x18]);
        assert_eq!(lz4[4], 0b0110_0000);
        assert_eq!(lz4[5], 0x40);
        assert!(compress(5, &input).is_err());
        assert!(
            compress(GZIP, &[]).is_ok_and(|p| decompress(GZIP, &p, 0).is_ok_and(|d| d.is_empty()))
        );
    }
}
