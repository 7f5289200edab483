//! Helpers shared by the object-format tests: real batches from sluice-batch's builder, and
//! objects made of them.

#![allow(dead_code)]

use sluice_batch::{BatchBuilder, RecordRef};
use sluice_objstore::{ObjectHeader, ObjectWriter, RunEntry, TopicId};

/// One partition's input: its key and its batches (each a list of record values).
#[derive(Debug, Clone)]
pub struct RunSpec {
    pub topic: TopicId,
    pub partition: i32,
    pub first_offset: i64,
    /// Record values per batch.
    pub batches: Vec<Vec<Vec<u8>>>,
    /// Offsets left free before each batch (a compacted log's gaps); only used when the
    /// offsets are set by the caller.
    pub gaps: Vec<u8>,
}

/// Appends one uncompressed batch holding `values` (record timestamps 1000, 1001, ...).
pub fn build_batch(out: &mut Vec<u8>, values: &[Vec<u8>], base_timestamp: i64) {
    let mut b = BatchBuilder::new(out);
    for (i, v) in values.iter().enumerate() {
        b.push(&RecordRef {
            key: (i % 2 == 0).then_some(&v[..]),
            value: Some(v),
            headers: &[],
            timestamp_ms: base_timestamp + i as i64,
        });
    }
    b.finish();
}

/// The run's batches back to back with base offsets 0, and the offsets each batch gets when
/// assigned consecutively from `first_offset`: (base, last) per batch.
pub fn run_bytes(spec: &RunSpec) -> Vec<u8> {
    let mut out = Vec::new();
    for (i, values) in spec.batches.iter().enumerate() {
        build_batch(&mut out, values, 1_000 + i as i64 * 10);
    }
    out
}

pub fn header(sequence: u64) -> ObjectHeader {
    ObjectHeader {
        writer_epoch: 7,
        sequence,
        created_ms: 1_700_000_000_000 + sequence as i64,
    }
}

/// Writes the runs (sorted and unique by key), alternating the two ways of setting offsets:
/// assigned by the writer, or patched by the caller with gaps. Returns the object and the
/// entries the writer reported.
pub fn write_object(
    writer: &mut ObjectWriter,
    runs: &[RunSpec],
    meta: &[(u16, Vec<u8>)],
    sequence: u64,
) -> (bytes::Bytes, Vec<RunEntry>) {
    let mut entries = Vec::new();
    for (n, spec) in runs.iter().enumerate() {
        let bytes = run_bytes(spec);
        if n % 2 == 0 {
            writer.begin_run(spec.topic, spec.partition).unwrap();
            let next = writer.push_batches_at(&bytes, spec.first_offset).unwrap();
            let entry = writer.end_run().unwrap().unwrap();
            assert_eq!(next, entry.last_offset + 1);
            entries.push(entry);
        } else {
            // Set offsets by hand, with gaps, and push batch by batch.
            writer.begin_run(spec.topic, spec.partition).unwrap();
            let mut next = spec.first_offset;
            let mut pos = 0;
            for (i, _) in spec.batches.iter().enumerate() {
                let len =
                    12 + i32::from_be_bytes(bytes[pos + 8..pos + 12].try_into().unwrap()) as usize;
                let mut batch = bytes[pos..pos + len].to_vec();
                next += i64::from(spec.gaps.get(i).copied().unwrap_or(0));
                next = sluice_objstore::patch_base_offsets(&mut batch, next).unwrap();
                writer.push_batches(&batch).unwrap();
                pos += len;
            }
            entries.push(writer.end_run().unwrap().unwrap());
        }
    }
    for (kind, payload) in meta {
        writer.push_meta(*kind, payload).unwrap();
    }
    let expected_len = writer.encoded_len();
    let object = writer.finish(header(sequence)).unwrap();
    assert_eq!(
        object.len(),
        expected_len,
        "encoded_len predicts the object's size"
    );
    (object, entries)
}

pub fn topic(n: u8) -> TopicId {
    let mut id = [0u8; 16];
    id[0] = n;
    id[15] = n.wrapping_mul(31);
    TopicId(id)
}

/// A small fixed object with three runs and two meta records.
pub fn sample_object() -> (bytes::Bytes, Vec<RunEntry>) {
    let runs = vec![
        RunSpec {
            topic: topic(1),
            partition: 0,
            first_offset: 0,
            batches: vec![vec![b"a".to_vec(), b"bb".to_vec()], vec![b"ccc".to_vec()]],
            gaps: vec![],
        },
        RunSpec {
            topic: topic(1),
            partition: 3,
            first_offset: 100,
            batches: vec![vec![b"x".to_vec()], vec![b"y".to_vec(), b"z".to_vec()]],
            gaps: vec![0, 5],
        },
        RunSpec {
            topic: topic(2),
            partition: 0,
            first_offset: 7,
            batches: vec![vec![vec![9u8; 40]; 3]],
            gaps: vec![],
        },
    ];
    let meta = vec![(1u16, b"topic created".to_vec()), (9u16, Vec::new())];
    write_object(&mut ObjectWriter::new(), &runs, &meta, 42)
}

/// Recomputes the index, meta and footer CRCs of an object after a test changed its bytes
/// (so the test reaches the checks behind the CRCs).
pub fn reseal(object: &mut [u8]) {
    let len = object.len();
    let f = len - 80;
    let u64_at = |o: &[u8], at: usize| u64::from_be_bytes(o[at..at + 8].try_into().unwrap());
    let (io, il) = (u64_at(object, f) as usize, u64_at(object, f + 8) as usize);
    let (mo, ml) = (
        u64_at(object, f + 16) as usize,
        u64_at(object, f + 24) as usize,
    );
    let icrc = crc32c::crc32c(&object[io..io + il]);
    let mcrc = crc32c::crc32c(&object[mo..mo + ml]);
    object[f + 32..f + 36].copy_from_slice(&icrc.to_be_bytes());
    object[f + 36..f + 40].copy_from_slice(&mcrc.to_be_bytes());
    let fcrc = crc32c::crc32c(&object[f..f + 68]);
    object[f + 68..f + 72].copy_from_slice(&fcrc.to_be_bytes());
}
