//! Round trips, corruption, truncation and hostile input for the flush-object format.

mod common;

use common::{RunSpec, header, reseal, run_bytes, sample_object, topic, write_object};
use proptest::prelude::*;
use sluice_batch::{crc_of, header as bh, read_i32, read_i64, read_u32};
use sluice_objstore::BatchProblem;
use sluice_objstore::error::MalformedWhat;
use sluice_objstore::{
    FOOTER_BYTES, HEADER_BYTES, ObjectError, ObjectReader, ObjectWriter, RunEntry, Section,
    TopicId, batches_from, locate, parse_footer, parse_index, parse_meta, patch_base_offsets,
    verify_run,
};

/// Walks whole batches: (position, base offset, last offset, length).
fn batches(run: &[u8]) -> Vec<(usize, i64, i64, usize)> {
    let mut out = Vec::new();
    let mut pos = 0;
    while pos < run.len() {
        let b = &run[pos..];
        let len = 12 + read_i32(b, bh::BATCH_LENGTH) as usize;
        let base = read_i64(b, bh::BASE_OFFSET);
        out.push((
            pos,
            base,
            base + i64::from(read_i32(b, bh::LAST_OFFSET_DELTA)),
            len,
        ));
        pos += len;
    }
    out
}

/// Everything a reader can check, through the whole-object reader and the ranged path.
fn check_round_trip(
    object: &[u8],
    runs: &[RunSpec],
    entries: &[RunEntry],
    meta: &[(u16, Vec<u8>)],
    seq: u64,
) {
    let reader = ObjectReader::new(object).unwrap();
    assert_eq!(reader.header(), header(seq));
    let index = reader.index();
    assert_eq!(index.len(), runs.len());
    let got: Vec<RunEntry> = index.iter().collect();
    assert_eq!(got, entries);
    for (n, (spec, entry)) in runs.iter().zip(entries).enumerate() {
        assert_eq!(
            (entry.topic_id, entry.partition),
            (spec.topic, spec.partition)
        );
        assert_eq!(entry.batch_count as usize, spec.batches.len());
        let records: usize = spec.batches.iter().map(Vec::len).sum();
        assert_eq!(entry.record_count as usize, records);
        assert_eq!(
            entry.base_offset,
            // Odd runs were written with caller-set offsets, after a first gap.
            spec.first_offset
                + i64::from(if n % 2 == 1 {
                    spec.gaps.first().copied().unwrap_or(0)
                } else {
                    0
                })
        );
        assert_eq!(index.find(spec.topic, spec.partition), Some(*entry));
        // The run's bytes are the input batches, offsets aside, and every batch is still valid.
        let run = reader.run(entry).unwrap();
        let input = run_bytes(spec);
        assert_eq!(run.len(), input.len());
        let walked = batches(run);
        assert_eq!(walked.len(), spec.batches.len());
        let mut prev_last = None;
        for &(pos, base, last, len) in &walked {
            assert_eq!(run[pos + 8..pos + len], input[pos + 8..pos + len]);
            assert_eq!(read_u32(&run[pos..], bh::CRC), crc_of(&run[pos..pos + len]));
            if let Some(p) = prev_last {
                assert!(base > p);
            }
            prev_last = Some(last);
        }
        assert_eq!(walked[0].1, entry.base_offset);
        assert_eq!(walked.last().unwrap().2, entry.last_offset);
    }
    let got_meta: Vec<(u16, Vec<u8>)> = reader
        .meta()
        .iter()
        .map(|r| (r.kind, r.payload.to_vec()))
        .collect();
    assert_eq!(got_meta, meta);

    // The ranged path: suffix GET of the footer, GET of the index, GET of meta, GET of a run.
    let len = object.len() as u64;
    let footer = parse_footer(&object[object.len() - FOOTER_BYTES..], len).unwrap();
    assert_eq!(footer.object_len(), len);
    let r = footer.index_range();
    let index = parse_index(&object[r.start as usize..r.end as usize], &footer).unwrap();
    let r = footer.meta_range();
    let m = parse_meta(&object[r.start as usize..r.end as usize], &footer).unwrap();
    assert_eq!(m.len(), meta.len());
    for entry in index.iter() {
        let r = entry.range();
        verify_run(&object[r.start as usize..r.end as usize], &entry).unwrap();
    }
}

fn run_specs() -> impl Strategy<Value = Vec<RunSpec>> {
    let batch = prop::collection::vec(prop::collection::vec(any::<u8>(), 0..40), 1..6);
    let run = (
        0u8..4,
        0i32..6,
        0i64..1_000_000,
        prop::collection::vec(batch, 1..5),
        prop::collection::vec(0u8..4, 0..5),
    );
    prop::collection::vec(run, 0..7).prop_map(|runs| {
        let mut specs: Vec<RunSpec> = runs
            .into_iter()
            .map(|(t, partition, first_offset, batches, gaps)| RunSpec {
                topic: topic(t),
                partition,
                first_offset,
                batches,
                gaps,
            })
            .collect();
        specs.sort_by_key(|s| (s.topic, s.partition));
        specs.dedup_by_key(|s| (s.topic, s.partition));
        specs
    })
}

fn meta_records() -> impl Strategy<Value = Vec<(u16, Vec<u8>)>> {
    prop::collection::vec(
        (any::<u16>(), prop::collection::vec(any::<u8>(), 0..64)),
        0..6,
    )
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(128))]

    #[test]
    fn objects_round_trip(runs in run_specs(), meta in meta_records(), seq in any::<u64>()) {
        let mut writer = ObjectWriter::new();
        // Write twice with the same writer: buffers are reused and the result is the same.
        let (first, entries) = write_object(&mut writer, &runs, &meta, seq);
        let (second, _) = write_object(&mut writer, &runs, &meta, seq);
        prop_assert_eq!(&first, &second);
        check_round_trip(&first, &runs, &entries, &meta, seq);
    }

    #[test]
    fn locate_finds_every_offset_and_nothing_else(runs in run_specs()) {
        let (object, entries) = write_object(&mut ObjectWriter::new(), &runs, &[], 1);
        let reader = ObjectReader::new(&object).unwrap();
        let index = reader.index();
        for entry in &entries {
            let run = reader.run(entry).unwrap();
            let walked = batches(run);
            for offset in entry.base_offset..=entry.last_offset {
                let found = locate(index, entry.topic_id, entry.partition, offset);
                prop_assert_eq!(found, Some(*entry));
                let from = batches_from(run, offset).unwrap();
                let first = batches(from)[0];
                // The cut starts at the batch holding `offset`, or (in a gap) the next one.
                prop_assert!(first.2 >= offset);
                let holder = walked.iter().find(|b| b.2 >= offset).unwrap();
                prop_assert_eq!(first.1, holder.1);
            }
            let (t, p) = (entry.topic_id, entry.partition);
            prop_assert_eq!(locate(index, t, p, entry.base_offset - 1), None);
            prop_assert_eq!(locate(index, t, p, entry.last_offset + 1), None);
            prop_assert!(batches_from(run, entry.last_offset + 1).is_none());
        }
        for t in 0u8..5 {
            for p in -1i32..7 {
                if !entries.iter().any(|e| e.topic_id == topic(t) && e.partition == p) {
                    prop_assert_eq!(locate(index, topic(t), p, 0), None);
                    prop_assert_eq!(index.find(topic(t), p), None);
                }
            }
        }
    }

    #[test]
    fn garbage_never_panics(
        bytes in prop::collection::vec(any::<u8>(), 0..400),
        len in any::<u64>(),
    ) {
        let _ = ObjectReader::new(&bytes);
        let _ = parse_footer(&bytes, len);
        let _ = parse_footer(&bytes, bytes.len() as u64);
        let _ = sluice_objstore::parse_header(&bytes);
        let _ = batches_from(&bytes, 0);
    }

    #[test]
    fn every_single_byte_change_of_a_random_object_is_detected(
        runs in run_specs(),
        meta in meta_records(),
        flip in 1u8..=255,
        pick in any::<prop::sample::Index>(),
    ) {
        let (object, _) = write_object(&mut ObjectWriter::new(), &runs, &meta, 3);
        let mut bad = object.to_vec();
        let at = pick.index(bad.len());
        bad[at] ^= flip;
        prop_assert!(detected(&bad), "change at byte {} of {} went unnoticed", at, bad.len());
    }
}

/// Whether a reader that checks everything it serves notices something wrong.
fn detected(object: &[u8]) -> bool {
    match ObjectReader::new(object) {
        Err(_) => true,
        Ok(reader) => reader.index().iter().any(|e| reader.run(&e).is_err()),
    }
}

#[test]
fn every_single_byte_corruption_is_detected() {
    let (object, _) = sample_object();
    let footer = parse_footer(&object, object.len() as u64).unwrap();
    for at in 0..object.len() {
        for flip in [0x01u8, 0x80, 0xff] {
            let mut bad = object.to_vec();
            bad[at] ^= flip;
            assert!(detected(&bad), "flip {flip:#x} at byte {at} went unnoticed");
            // Footer, index and meta corruption is caught by the object checks themselves.
            if at as u64 >= footer.meta_offset {
                assert!(ObjectReader::new(&bad).is_err(), "byte {at}");
            }
            if at < HEADER_BYTES {
                assert!(
                    matches!(
                        ObjectReader::new(&bad),
                        Err(ObjectError::BadMagic {
                            section: Section::Header,
                            ..
                        } | ObjectError::BadCrc {
                            section: Section::Header,
                            ..
                        })
                    ),
                    "byte {at}"
                );
            }
        }
    }
}

#[test]
fn every_truncation_is_an_error() {
    let (object, _) = sample_object();
    for len in 0..object.len() {
        assert!(
            ObjectReader::new(&object[..len]).is_err(),
            "prefix of {len} bytes"
        );
        assert!(
            ObjectReader::new(&object[object.len() - len..]).is_err(),
            "suffix of {len} bytes"
        );
        // A short suffix GET.
        assert!(
            parse_footer(
                &object[object.len() - len.min(FOOTER_BYTES - 1)..],
                object.len() as u64
            )
            .is_err()
        );
    }
    let footer = parse_footer(&object, object.len() as u64).unwrap();
    let (i, m) = (footer.index_range(), footer.meta_range());
    let index = &object[i.start as usize..i.end as usize];
    let meta = &object[m.start as usize..m.end as usize];
    for len in 0..index.len() {
        assert!(parse_index(&index[..len], &footer).is_err());
    }
    for len in 0..meta.len() {
        assert!(parse_meta(&meta[..len], &footer).is_err());
    }
    let reader = ObjectReader::new(&object).unwrap();
    for entry in reader.index().iter() {
        let r = entry.range();
        let run = &object[r.start as usize..r.end as usize];
        for len in 0..run.len() {
            assert!(verify_run(&run[..len], &entry).is_err());
        }
    }
}

#[test]
fn footer_with_impossible_bounds_is_refused() {
    let (object, _) = sample_object();
    let len = object.len();
    let f = len - FOOTER_BYTES;
    // (field position, value): each breaks one bound, with the footer CRC made right again.
    for (at, value) in [
        (0usize, u64::MAX),
        (8, u64::MAX),
        (8, 0),
        (16, 0),
        (16, u64::MAX - 3),
        (24, u64::MAX),
        (24, 1),
    ] {
        let mut bad = object.to_vec();
        bad[f + at..f + at + 8].copy_from_slice(&value.to_be_bytes());
        let crc = crc32c::crc32c(&bad[f..f + 68]);
        bad[f + 68..f + 72].copy_from_slice(&crc.to_be_bytes());
        let err = parse_footer(&bad, len as u64).unwrap_err();
        assert!(
            matches!(
                err,
                ObjectError::Malformed {
                    section: Section::Footer,
                    ..
                }
            ),
            "{at}: {err}"
        );
    }
    // The right footer with a wrong object length.
    assert!(parse_footer(&object, len as u64 + 1).is_err());
    assert!(parse_footer(&object, u64::MAX).is_err());
}

#[test]
fn hostile_counts_are_refused() {
    let (object, _) = sample_object();
    let footer = parse_footer(&object, object.len() as u64).unwrap();
    let (io, mo) = (footer.index_offset as usize, footer.meta_offset as usize);
    for count in [u32::MAX, 4, 1] {
        // Index entry count.
        let mut bad = object.to_vec();
        bad[io..io + 4].copy_from_slice(&count.to_be_bytes());
        reseal(&mut bad);
        let err = ObjectReader::new(&bad).unwrap_err();
        assert!(
            matches!(
                err,
                ObjectError::Malformed {
                    section: Section::Index,
                    what: MalformedWhat::CountMismatch { .. },
                    ..
                }
            ),
            "{err}"
        );
        // Meta record count.
        let mut bad = object.to_vec();
        bad[mo..mo + 4].copy_from_slice(&count.to_be_bytes());
        reseal(&mut bad);
        let err = ObjectReader::new(&bad).unwrap_err();
        assert!(
            matches!(
                err,
                ObjectError::Malformed {
                    section: Section::Meta,
                    ..
                } | ObjectError::Truncated {
                    section: Section::Meta,
                    ..
                }
            ),
            "{err}"
        );
    }
    // A meta record claiming u32::MAX payload bytes.
    let mut bad = object.to_vec();
    bad[mo + 8 + 2..mo + 8 + 6].copy_from_slice(&u32::MAX.to_be_bytes());
    reseal(&mut bad);
    assert!(matches!(
        ObjectReader::new(&bad),
        Err(ObjectError::Truncated {
            section: Section::Meta,
            ..
        })
    ));
    // Index entries with hostile lengths, offsets and counts (each resealed).
    let e = io + 8;
    for (field, bytes) in [
        (64usize, u64::MAX.to_be_bytes().to_vec()), // data length
        (56, u64::MAX.to_be_bytes().to_vec()),      // data offset
        (56, 0u64.to_be_bytes().to_vec()),
        (20, u32::MAX.to_be_bytes().to_vec()), // batch count
        (20, 0u32.to_be_bytes().to_vec()),
        (48, u64::MAX.to_be_bytes().to_vec()), // record count
        (24, (-1i64).to_be_bytes().to_vec()),  // base offset
        (32, i64::MIN.to_be_bytes().to_vec()), // last offset
        (16, (-1i32).to_be_bytes().to_vec()),  // partition
        (76, 1u32.to_be_bytes().to_vec()),     // reserved
        (0, [0xffu8; 16].to_vec()),            // topic id out of order
    ] {
        let mut bad = object.to_vec();
        bad[e + field..e + field + bytes.len()].copy_from_slice(&bytes);
        reseal(&mut bad);
        let err = ObjectReader::new(&bad).unwrap_err();
        assert!(
            matches!(
                err,
                ObjectError::Malformed {
                    section: Section::Index,
                    ..
                }
            ),
            "field {field}: {err}"
        );
    }
}

#[test]
fn an_empty_object_is_valid() {
    let mut writer = ObjectWriter::new();
    assert!(writer.is_empty());
    assert_eq!(writer.encoded_len(), sluice_objstore::EMPTY_OBJECT_BYTES);
    let object = writer.finish(header(0)).unwrap();
    assert_eq!(object.len(), sluice_objstore::EMPTY_OBJECT_BYTES);
    let reader = ObjectReader::new(&object).unwrap();
    assert!(reader.index().is_empty() && reader.meta().is_empty());
    assert_eq!(&object[..8], b"SLUICEOB");
    assert_eq!(&object[object.len() - 8..], b"SLUICEOB");
}

#[test]
fn the_header_is_where_the_spec_says() {
    let (object, entries) = sample_object();
    assert_eq!(&object[0..8], b"SLUICEOB");
    assert_eq!(u16::from_be_bytes([object[8], object[9]]), 1);
    assert_eq!(u64::from_be_bytes(object[12..20].try_into().unwrap()), 7);
    assert_eq!(u64::from_be_bytes(object[20..28].try_into().unwrap()), 42);
    assert_eq!(entries[0].data_offset, HEADER_BYTES as u64);
    assert_eq!(read_i64(&object[HEADER_BYTES..], bh::BASE_OFFSET), 0);
}

fn one_batch(values: &[&[u8]]) -> Vec<u8> {
    let mut out = Vec::new();
    common::build_batch(
        &mut out,
        &values.iter().map(|v| v.to_vec()).collect::<Vec<_>>(),
        5,
    );
    out
}

#[test]
fn the_writer_refuses_bad_input_and_stays_intact() {
    let mut w = ObjectWriter::new();
    let good = one_batch(&[b"a", b"b"]);
    assert_eq!(w.push_batches(&good), Err(ObjectError::NoOpenRun));
    assert_eq!(w.end_run(), Err(ObjectError::NoOpenRun));
    assert!(matches!(
        w.begin_run(topic(1), -1),
        Err(ObjectError::NegativePartition { .. })
    ));
    w.begin_run(topic(1), 2).unwrap();
    assert!(matches!(
        w.begin_run(topic(1), 3),
        Err(ObjectError::RunStillOpen { .. })
    ));
    assert!(matches!(
        w.finish(header(1)),
        Err(ObjectError::RunStillOpen { .. })
    ));
    assert_eq!(w.push_batches_at(&good, 10), Ok(12));
    let len = w.encoded_len();

    // A bad CRC in the second batch of a push: nothing of the push stays.
    let mut two = good.clone();
    let mut corrupt = good.clone();
    let last = corrupt.len() - 1;
    corrupt[last] ^= 1;
    two.extend_from_slice(&corrupt);
    let err = w.push_batches_at(&two, 12).unwrap_err();
    assert!(
        matches!(err, ObjectError::BadBatch { at, problem: BatchProblem::BadCrc { .. }, .. } if at == good.len() as u64),
        "{err}"
    );
    assert_eq!(w.encoded_len(), len);
    // Offsets that do not increase (caller-set offsets: base 0 again).
    let err = w.push_batches(&good).unwrap_err();
    assert!(
        matches!(
            err,
            ObjectError::BadBatch {
                problem: BatchProblem::OffsetNotIncreasing { .. },
                ..
            }
        ),
        "{err}"
    );
    // Truncated, wrong magic, empty input.
    assert!(w.push_batches_at(&good[..good.len() - 1], 20).is_err());
    let mut magic = good.clone();
    magic[16] = 1;
    assert!(matches!(
        w.push_batches_at(&magic, 20),
        Err(ObjectError::BadBatch {
            problem: BatchProblem::BadMagic { magic: 1 },
            ..
        })
    ));
    assert!(w.push_batches_at(&[], 20).is_err());
    // More records than offsets (a consistent CRC, so only the counts are wrong).
    let mut counts = good.clone();
    counts[bh::RECORD_COUNT].copy_from_slice(&3i32.to_be_bytes());
    let crc = crc_of(&counts);
    counts[bh::CRC].copy_from_slice(&crc.to_be_bytes());
    assert!(matches!(
        w.push_batches_at(&counts, 20),
        Err(ObjectError::BadBatch {
            problem: BatchProblem::MoreRecordsThanOffsets { count: 3, delta: 1 },
            ..
        })
    ));
    assert_eq!(w.encoded_len(), len);
    let entry = w.end_run().unwrap().unwrap();
    assert_eq!(
        (
            entry.base_offset,
            entry.last_offset,
            entry.batch_count,
            entry.record_count
        ),
        (10, 11, 1, 2)
    );

    // Runs in order only; an empty run is not stored.
    assert!(matches!(
        w.begin_run(topic(1), 2),
        Err(ObjectError::RunOutOfOrder { .. })
    ));
    assert!(matches!(
        w.begin_run(topic(0), 9),
        Err(ObjectError::RunOutOfOrder { .. })
    ));
    w.begin_run(topic(1), 3).unwrap();
    assert_eq!(w.end_run(), Ok(None));
    w.begin_run(topic(1), 4).unwrap();
    w.push_batches_at(&good, 0).unwrap();
    w.end_run().unwrap();
    let object = w.finish(header(1)).unwrap();
    let reader = ObjectReader::new(&object).unwrap();
    assert_eq!(reader.index().len(), 2);
}

#[test]
fn patch_base_offsets_assigns_consecutive_offsets_or_changes_nothing() {
    let mut run = one_batch(&[b"a", b"b", b"c"]);
    run.extend_from_slice(&one_batch(&[b"d"]));
    assert_eq!(patch_base_offsets(&mut run, 100), Ok(104));
    let walked = batches(&run);
    assert_eq!(
        walked.iter().map(|b| (b.1, b.2)).collect::<Vec<_>>(),
        [(100, 102), (103, 103)]
    );
    for b in &walked {
        assert_eq!(read_u32(&run[b.0..], bh::CRC), crc_of(&run[b.0..b.0 + b.3]));
    }
    let mut bad = run.clone();
    let last = bad.len() - 1;
    bad[last] ^= 1;
    let before = bad.clone();
    assert!(patch_base_offsets(&mut bad, 0).is_err());
    assert_eq!(bad, before, "a refused patch changes nothing");
    assert!(patch_base_offsets(&mut run.clone(), i64::MAX - 1).is_err());
    assert!(patch_base_offsets(&mut [], 0).is_err());
}

#[test]
fn header_and_footer_must_agree() {
    let (object, _) = sample_object();
    let mut bad = object.to_vec();
    // Change the header's sequence and fix its CRC: both parts are valid alone.
    bad[20..28].copy_from_slice(&43u64.to_be_bytes());
    let crc = crc32c::crc32c(&bad[..36]);
    bad[36..40].copy_from_slice(&crc.to_be_bytes());
    assert!(matches!(
        ObjectReader::new(&bad),
        Err(ObjectError::HeaderFooterMismatch {
            field: "sequence",
            ..
        })
    ));
}

#[test]
fn errors_say_what_and_where() {
    let (object, _) = sample_object();
    let mut bad = object.to_vec();
    let at = bad.len() - 20;
    bad[at] ^= 1;
    let msg = ObjectReader::new(&bad).unwrap_err().to_string();
    assert!(
        msg.contains("footer") && msg.contains(&format!("byte {}", object.len() - FOOTER_BYTES)),
        "{msg}"
    );
    let _ = TopicId::default().to_string();
}
