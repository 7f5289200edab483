//! Kafka's default partitioner for keyed records: `murmur2(key) & 0x7fffffff` modulo the
//! partition count, with murmur2 exactly as the Java client's `Utils.murmur2` computes it (seed
//! `0x9747b28c`, little-endian 4-byte blocks, tail bytes folded in from the last down). Records
//! produced over HTTP with a key land where a Java or librdkafka (`murmur2_random`) producer
//! would put them, so per-key ordering holds across clients.

/// Kafka's murmur2 hash of `data`.
pub fn murmur2(data: &[u8]) -> i32 {
    const SEED: u32 = 0x9747_b28c;
    const M: u32 = 0x5bd1_e995;
    const R: u32 = 24;
    let mut h = SEED ^ data.len() as u32;
    let mut blocks = data.chunks_exact(4);
    for block in &mut blocks {
        let mut k = u32::from_le_bytes([block[0], block[1], block[2], block[3]]);
        k = k.wrapping_mul(M);
        k ^= k >> R;
        k = k.wrapping_mul(M);
        h = h.wrapping_mul(M) ^ k;
    }
    let tail = blocks.remainder();
    if !tail.is_empty() {
        // Java's switch falls through from the highest tail byte to the lowest.
        for (i, &byte) in tail.iter().enumerate() {
            h ^= u32::from(byte) << (8 * i);
        }
        h = h.wrapping_mul(M);
    }
    h ^= h >> 13;
    h = h.wrapping_mul(M);
    h ^= h >> 15;
    h as i32
}

/// The partition Kafka's default partitioner picks for `key` among `partitions` (> 0).
pub fn partition_for_key(key: &[u8], partitions: u32) -> u32 {
    (murmur2(key) & 0x7fff_ffff) as u32 % partitions.max(1)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `(key, Utils.murmur2(key), partition of 3, partition of 7)` as the Java client 4.3.1
    /// computes them (`Utils.murmur2`, `Utils.toPositive(h) % n`); the first ten keys are also
    /// the reference values of Kafka's own `UtilsTest`.
    const JAVA: &[(&str, i32, u32, u32)] = &[
        ("", 275_646_681, 0, 2),
        ("a", -1_563_381_124, 1, 5),
        ("ab", 316_155_434, 2, 0),
        ("abc", 479_470_107, 0, 4),
        ("abcd", -1_323_649_548, 2, 5),
        ("21", -973_932_308, 0, 3),
        ("foobar", -790_332_482, 0, 0),
        ("a-little-bit-long-string", -985_981_536, 2, 1),
        ("a-little-bit-longer-string", -1_486_304_829, 2, 0),
        (
            "lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8",
            -58_897_971,
            2,
            3,
        ),
        ("key0", 452_605_474, 1, 6),
        ("key1", 28_543_940, 2, 5),
        ("key2", 1_674_751_211, 2, 0),
        ("user-42", 1_459_644_460, 1, 1),
        ("\u{e9}t\u{e9}", -2_101_193_575, 1, 4),
    ];

    #[test]
    fn murmur2_matches_the_java_client() {
        for &(key, hash, of3, of7) in JAVA {
            assert_eq!(murmur2(key.as_bytes()), hash, "{key:?}");
            assert_eq!(partition_for_key(key.as_bytes(), 3), of3, "{key:?}");
            assert_eq!(partition_for_key(key.as_bytes(), 7), of7, "{key:?}");
        }
        assert_eq!(murmur2(&[0xff, 0x00, 0x80, 0x01, 0xfe]), -1_239_453_769);
    }

    #[test]
    fn one_partition_takes_every_key() {
        for &(key, ..) in JAVA {
            assert_eq!(partition_for_key(key.as_bytes(), 1), 0);
        }
    }
}
