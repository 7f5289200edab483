//! The pure parts of a commit: the producer decision table, deciding and coalescing batches,
//! the stored outcomes and the notification payload.

use std::collections::VecDeque;

use super::decide::*;
use super::outcomes::*;
use super::*;

fn seq(producer_id: i64, epoch: i16, first_seq: i32, last_seq: i32) -> ProducerSeq {
    ProducerSeq {
        producer_id,
        epoch,
        first_seq,
        last_seq,
    }
}

fn recorded(state: &mut Option<ProducerState>, s: ProducerSeq, base_offset: i64) {
    let last_offset = base_offset + i64::from(s.last_seq - s.first_seq);
    state
        .get_or_insert_with(|| ProducerState {
            epoch: s.epoch,
            recent: VecDeque::new(),
        })
        .record(&s, base_offset, last_offset);
}

/// The same table, in the same order, as `sluice-broker`'s `producers.rs` test.
#[test]
fn sequence_decision_table() {
    let mut s: Option<ProducerState> = None;
    assert_eq!(check(s.as_ref(), &seq(7, 0, 0, 4)), Verdict::Append);
    assert_eq!(
        check(s.as_ref(), &seq(7, 0, 3, 4)),
        Verdict::Refuse(BatchOutcome::UnknownProducer { first_seq: 3 })
    );
    recorded(&mut s, seq(7, 0, 0, 4), 100);
    assert_eq!(
        check(s.as_ref(), &seq(7, 0, 0, 4)),
        Verdict::Duplicate {
            base_offset: 100,
            last_offset: 104
        }
    );
    assert_eq!(check(s.as_ref(), &seq(7, 0, 5, 9)), Verdict::Append);
    assert_eq!(
        check(s.as_ref(), &seq(7, 0, 6, 9)),
        Verdict::Refuse(BatchOutcome::OutOfOrderSequence {
            expected: 5,
            first_seq: 6
        })
    );
    recorded(&mut s, seq(7, 1, 0, 0), 105);
    assert_eq!(
        check(s.as_ref(), &seq(7, 0, 5, 9)),
        Verdict::Refuse(BatchOutcome::InvalidProducerEpoch {
            epoch: 0,
            current: 1
        })
    );
    assert_eq!(
        check(s.as_ref(), &seq(7, 2, 1, 1)),
        Verdict::Refuse(BatchOutcome::NewEpochNotAtZero {
            epoch: 2,
            first_seq: 1
        })
    );
    assert_eq!(check(s.as_ref(), &seq(7, 2, 0, 0)), Verdict::Append);
    // Only the last RECENT_BATCHES are remembered.
    for i in 1..=6 {
        recorded(&mut s, seq(7, 1, i, i), 105 + i64::from(i));
    }
    assert!(matches!(
        check(s.as_ref(), &seq(7, 1, 1, 1)),
        Verdict::Refuse(_)
    ));
    assert_eq!(
        check(s.as_ref(), &seq(7, 1, 6, 6)),
        Verdict::Duplicate {
            base_offset: 111,
            last_offset: 111
        }
    );
    assert_eq!(s.as_ref().unwrap().recent.len(), RECENT_BATCHES);
}

#[test]
fn sequences_wrap() {
    let mut s = None;
    recorded(&mut s, seq(1, 0, 0, 0), 0);
    let mut state = s.unwrap();
    state.recent.back_mut().unwrap().last_seq = i32::MAX;
    assert_eq!(check(Some(&state), &seq(1, 0, 0, 3)), Verdict::Append);
}

#[test]
fn producer_rows_round_trip_and_bad_ones_are_refused() {
    let mut s = None;
    for i in 0..7 {
        recorded(&mut s, seq(3, 2, i * 10, i * 10 + 9), i64::from(i) * 10);
    }
    let state = s.unwrap();
    let mut flat = Vec::new();
    state.write_recent(&mut flat);
    assert_eq!(flat.len(), RECENT_BATCHES * RECENT_FIELDS);
    assert_eq!(ProducerState::from_row(2, &flat).unwrap(), state);
    assert!(ProducerState::from_row(2, &flat[..3]).is_err());
    assert!(ProducerState::from_row(2, &[i64::MAX, 0, 0, 0]).is_err());
    let too_many = [0; RECENT_FIELDS * (RECENT_BATCHES + 1)];
    assert!(ProducerState::from_row(2, &too_many).is_err());
}

const T: Uuid = Uuid::from_u128(0x1111);
const U: Uuid = Uuid::from_u128(0x2222);

fn batch(topic_id: Uuid, partition: i32, byte_start: u64, records: i32) -> CommitBatch {
    CommitBatch {
        topic_id,
        partition,
        byte_start,
        byte_len: 100,
        records,
        max_timestamp: byte_start as i64,
        producer: None,
    }
}

fn request(batches: Vec<CommitBatch>) -> CommitRequest {
    CommitRequest {
        key: "k".into(),
        broker_id: 1,
        instance: Uuid::nil(),
        size_bytes: 1 << 20,
        batches,
    }
}

fn partitions(list: &[(Uuid, i32, i64)]) -> HashMap<PartitionKey, PartitionState> {
    list.iter()
        .map(|&(t, p, next_offset)| {
            (
                (t, p),
                PartitionState {
                    next_offset,
                    log_start: 3,
                },
            )
        })
        .collect()
}

#[test]
fn consecutive_batches_of_a_partition_make_one_row() {
    let req = request(vec![
        batch(T, 0, 0, 2),
        batch(T, 0, 100, 3),
        batch(T, 0, 200, 1),
        batch(T, 1, 300, 5),
        batch(U, 0, 400, 1),
    ]);
    let parts = partitions(&[(T, 0, 10), (T, 1, 0), (U, 0, 7)]);
    let a = apply(&req, &parts, HashMap::new()).unwrap();
    assert_eq!(
        a.outcomes[..3],
        [
            BatchOutcome::Appended {
                base_offset: 10,
                last_offset: 11,
                log_start: 3
            },
            BatchOutcome::Appended {
                base_offset: 12,
                last_offset: 14,
                log_start: 3
            },
            BatchOutcome::Appended {
                base_offset: 15,
                last_offset: 15,
                log_start: 3
            },
        ]
    );
    assert_eq!(a.rows.len(), 3);
    assert_eq!(
        a.rows[0],
        IndexRow {
            topic_id: T,
            partition: 0,
            base_offset: 10,
            last_offset: 15,
            byte_start: 0,
            byte_len: 300,
            batch_count: 3,
            max_timestamp: 200,
        }
    );
    assert_eq!((a.rows[1].base_offset, a.rows[1].last_offset), (0, 4));
    assert_eq!(a.advanced[&(T, 0)], 16);
    assert_eq!(a.advanced[&(T, 1)], 5);
    assert_eq!(a.advanced[&(U, 0)], 8);
}

#[test]
fn a_refused_batch_splits_the_row_and_later_batches_see_earlier_state() {
    let with = |mut b: CommitBatch, s: ProducerSeq| {
        b.producer = Some(s);
        b
    };
    let req = request(vec![
        with(batch(T, 0, 0, 2), seq(9, 0, 0, 1)),
        // Out of order: expected 2.
        with(batch(T, 0, 100, 2), seq(9, 0, 5, 6)),
        with(batch(T, 0, 200, 2), seq(9, 0, 2, 3)),
        // A retry of the first, in the same object.
        with(batch(T, 0, 300, 2), seq(9, 0, 0, 1)),
        with(batch(T, 0, 400, 1), seq(9, 0, 4, 4)),
        // No such partition.
        batch(T, 5, 500, 1),
    ]);
    let parts = partitions(&[(T, 0, 0)]);
    let a = apply(&req, &parts, HashMap::new()).unwrap();
    assert_eq!(
        a.outcomes,
        vec![
            BatchOutcome::Appended {
                base_offset: 0,
                last_offset: 1,
                log_start: 3
            },
            BatchOutcome::OutOfOrderSequence {
                expected: 2,
                first_seq: 5
            },
            BatchOutcome::Appended {
                base_offset: 2,
                last_offset: 3,
                log_start: 3
            },
            BatchOutcome::Duplicate {
                base_offset: 0,
                last_offset: 1
            },
            BatchOutcome::Appended {
                base_offset: 4,
                last_offset: 4,
                log_start: 3
            },
            BatchOutcome::UnknownTopicOrPartition,
        ]
    );
    let rows: Vec<_> = a
        .rows
        .iter()
        .map(|r| (r.base_offset, r.last_offset, r.byte_start, r.batch_count))
        .collect();
    assert_eq!(rows, vec![(0, 1, 0, 1), (2, 3, 200, 1), (4, 4, 400, 1)]);
    let state = &a.producers[&(T, 0, 9)];
    assert_eq!(state.recent.len(), 3);
    assert_eq!(state.recent.back().unwrap().last_seq, 4);
    assert_eq!(a.advanced.len(), 1);
}

#[test]
fn nothing_accepted_moves_nothing() {
    let req = request(vec![batch(T, 0, 0, 1)]);
    let a = apply(&req, &HashMap::new(), HashMap::new()).unwrap();
    assert_eq!(a.outcomes, vec![BatchOutcome::UnknownTopicOrPartition]);
    assert!(a.rows.is_empty() && a.advanced.is_empty() && a.producers.is_empty());
    assert_eq!(notify_payload(&a.advanced), "");
}

#[test]
fn a_full_partition_is_refused_not_wrapped() {
    let req = request(vec![batch(T, 0, 0, 2)]);
    let parts = partitions(&[(T, 0, i64::MAX - 1)]);
    assert!(apply(&req, &parts, HashMap::new()).is_err());
}

#[test]
fn outcomes_round_trip_and_garbage_is_an_error() {
    let all = vec![
        BatchOutcome::Appended {
            base_offset: 1,
            last_offset: i64::MAX - 1,
            log_start: 0,
        },
        BatchOutcome::Duplicate {
            base_offset: 5,
            last_offset: 9,
        },
        BatchOutcome::OutOfOrderSequence {
            expected: 3,
            first_seq: -1,
        },
        BatchOutcome::UnknownProducer { first_seq: 7 },
        BatchOutcome::InvalidProducerEpoch {
            epoch: 1,
            current: i16::MAX,
        },
        BatchOutcome::NewEpochNotAtZero {
            epoch: 2,
            first_seq: 8,
        },
        BatchOutcome::UnknownTopicOrPartition,
    ];
    let bytes = encode_outcomes(&all);
    assert_eq!(decode_outcomes(&bytes).unwrap(), all);
    assert_eq!(decode_outcomes(&encode_outcomes(&[])).unwrap(), vec![]);
    assert!(decode_outcomes(&bytes[..bytes.len() - 1]).is_err());
    assert!(decode_outcomes(&[]).is_err());
    assert!(decode_outcomes(&[2]).is_err());
    assert!(decode_outcomes(&[1, 0, 0, 0, 1, 99]).is_err());
    assert!(
        decode_outcomes(&[1, 0, 0, 0, 0, 6]).is_err(),
        "a byte too many"
    );
    assert!(decode_outcomes(&[1, 0xff, 0xff, 0xff, 0xff]).is_err());
}

#[test]
fn the_payload_lists_partitions_or_says_everything() {
    let mut advanced = BTreeMap::new();
    advanced.insert((T, 3), 42);
    advanced.insert((U, 0), 7);
    assert_eq!(
        notify_payload(&advanced),
        format!("{T} 3 42\n{U} 0 7"),
        "one line per partition"
    );
    for p in 0..200 {
        advanced.insert((T, p), i64::MAX);
    }
    assert_eq!(notify_payload(&advanced), NOTIFY_EVERYTHING);
    let fits: BTreeMap<_, _> = (0..100).map(|p| ((T, p), i64::MAX)).collect();
    let payload = notify_payload(&fits);
    assert!(
        payload.len() <= NOTIFY_PAYLOAD_MAX_BYTES,
        "{}",
        payload.len()
    );
    assert_eq!(payload.lines().count(), 100);
}

#[test]
fn bad_requests_are_refused_before_any_database_work() {
    let ok = request(vec![batch(T, 0, 0, 1)]);
    assert!(validate(&ok).is_ok());
    let mut r = ok.clone();
    r.batches[0].records = 0;
    assert!(matches!(validate(&r), Err(CommitError::Invalid { .. })));
    let mut r = ok.clone();
    r.batches[0].byte_start = r.size_bytes;
    assert!(matches!(validate(&r), Err(CommitError::Invalid { .. })));
    let mut r = ok.clone();
    r.batches[0].byte_len = 0;
    assert!(matches!(validate(&r), Err(CommitError::Invalid { .. })));
    let mut r = ok.clone();
    r.batches[0].producer = Some(seq(-1, 0, 0, 0));
    assert!(matches!(validate(&r), Err(CommitError::Invalid { .. })));
    let mut r = ok.clone();
    r.key.clear();
    assert!(matches!(validate(&r), Err(CommitError::Invalid { .. })));
    let mut r = ok;
    r.batches = vec![batch(T, 0, 0, 1); BATCHES_PER_COMMIT_MAX + 1];
    assert!(matches!(validate(&r), Err(CommitError::TooLarge { .. })));
}

#[test]
fn keys_are_sorted_and_distinct() {
    let mut b = batch(U, 1, 0, 1);
    b.producer = Some(seq(4, 0, 0, 0));
    let req = request(vec![b, batch(T, 2, 100, 1), b, batch(T, 0, 200, 1)]);
    let keys = Keys::of(&req);
    assert_eq!(keys.topics, vec![T, T, U]);
    assert_eq!(keys.partitions, vec![0, 2, 1]);
    assert_eq!(keys.producer_ids, vec![4]);
}
