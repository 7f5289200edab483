//! The commit protocol and the batch index against a real PostgreSQL: offsets without gaps or
//! overlaps across brokers, idempotent producers that move between brokers, idempotent
//! commits, fencing, coalescing, reads, and commit notifications across a server restart.

mod common;

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use common::{PostgresServer, connect, count, migrated, sql};
use sluice_cluster::Db;
use sluice_cluster::commit::{
    BatchOutcome, CommitBatch, CommitError, CommitRequest, ProducerSeq, commit_object,
};
use sluice_cluster::index::{
    Bounds, CommitEvent, CommitListener, offset_for_timestamp, partition_bounds, read_batches,
    topic_bounds,
};
use uuid::Uuid;

/// A registered broker.
#[derive(Debug, Clone, Copy)]
struct Broker {
    id: i32,
    instance: Uuid,
}

const A: Broker = Broker {
    id: 1,
    instance: Uuid::from_u128(0xa),
};
const B: Broker = Broker {
    id: 2,
    instance: Uuid::from_u128(0xb),
};

/// Bytes every test batch takes in its object.
const BATCH_BYTES: u32 = 100;

struct Fixture {
    pg: PostgresServer,
    db: Db,
    topic: Uuid,
}

/// A migrated database with one topic of `partitions` partitions and brokers A and B.
async fn setup(partitions: i32) -> Fixture {
    let pg = PostgresServer::start();
    let db = migrated(&pg).await;
    let topic = Uuid::new_v4();
    add_topic(&db, topic, "t", partitions).await;
    sql(
        &db,
        &format!(
            "INSERT INTO brokers (broker_id, instance, host, port, expires_at) VALUES \
             ({}, '{}', '127.0.0.1', 9092, now() + interval '1 hour'), \
             ({}, '{}', '127.0.0.1', 9093, now() + interval '1 hour')",
            A.id, A.instance, B.id, B.instance
        ),
    )
    .await;
    Fixture { pg, db, topic }
}

async fn add_topic(db: &Db, topic: Uuid, name: &str, partitions: i32) {
    sql(
        db,
        &format!(
            "INSERT INTO topics (topic_id, name, partitions) VALUES ('{topic}', '{name}', {partitions}); \
             INSERT INTO partitions (topic_id, partition) \
             SELECT '{topic}', g FROM generate_series(0, {partitions} - 1) g"
        ),
    )
    .await;
}

/// A batch of `records` offsets; its bytes are placed by [`request`].
fn batch(topic_id: Uuid, partition: i32, records: i32, max_timestamp: i64) -> CommitBatch {
    CommitBatch {
        topic_id,
        partition,
        byte_start: 0,
        byte_len: BATCH_BYTES,
        records,
        max_timestamp,
        producer: None,
    }
}

/// An idempotent batch of `last_seq - first_seq + 1` records.
fn idem(
    topic_id: Uuid,
    partition: i32,
    producer_id: i64,
    epoch: i16,
    seqs: (i32, i32),
) -> CommitBatch {
    let mut b = batch(topic_id, partition, seqs.1 - seqs.0 + 1, 0);
    b.producer = Some(ProducerSeq {
        producer_id,
        epoch,
        first_seq: seqs.0,
        last_seq: seqs.1,
    });
    b
}

/// The batches laid out back to back in one object.
fn request(broker: Broker, key: &str, mut batches: Vec<CommitBatch>) -> CommitRequest {
    let mut at = 0;
    for b in &mut batches {
        b.byte_start = at;
        at += u64::from(b.byte_len);
    }
    CommitRequest {
        key: key.to_string(),
        broker_id: broker.id,
        instance: broker.instance,
        size_bytes: at.max(1),
        batches,
    }
}

async fn commit(
    db: &Db,
    broker: Broker,
    key: &str,
    batches: Vec<CommitBatch>,
) -> Vec<BatchOutcome> {
    commit_object(db, &request(broker, key, batches))
        .await
        .unwrap_or_else(|e| panic!("commit {key}: {e}"))
}

fn appended(base_offset: i64, last_offset: i64) -> BatchOutcome {
    BatchOutcome::Appended {
        base_offset,
        last_offset,
        log_start: 0,
    }
}

async fn next_offset(db: &Db, topic: Uuid, partition: i32) -> i64 {
    partition_bounds(db, topic, partition)
        .await
        .unwrap()
        .expect("partition row")
        .next_offset
}

/// The partition's index covers [log_start, next_offset) exactly: rows in order, each
/// starting where the one before ended. Returns the rows.
async fn assert_log_is_whole(db: &Db, topic: Uuid, partition: i32) -> Vec<(i64, i64)> {
    let bounds = partition_bounds(db, topic, partition)
        .await
        .unwrap()
        .unwrap();
    let rows = read_batches(db, topic, partition, 0, 10_000).await.unwrap();
    let mut expected = bounds.log_start;
    for r in &rows {
        assert_eq!(
            r.base_offset, expected,
            "gap or overlap in {topic}/{partition}: {rows:?}"
        );
        assert!(r.last_offset >= r.base_offset);
        expected = r.last_offset + 1;
    }
    assert_eq!(expected, bounds.next_offset, "{topic}/{partition}");
    rows.iter()
        .map(|r| (r.base_offset, r.last_offset))
        .collect()
}

#[tokio::test]
async fn offsets_are_contiguous_across_objects_and_brokers() {
    let f = setup(2).await;
    let t = f.topic;
    let first = commit(
        &f.db,
        A,
        "a-1",
        vec![batch(t, 0, 3, 10), batch(t, 0, 2, 11), batch(t, 1, 4, 12)],
    )
    .await;
    assert_eq!(first, vec![appended(0, 2), appended(3, 4), appended(0, 3)]);
    let second = commit(
        &f.db,
        B,
        "b-1",
        vec![batch(t, 1, 1, 13), batch(t, 0, 5, 14)],
    )
    .await;
    assert_eq!(second, vec![appended(4, 4), appended(5, 9)]);
    let third = commit(&f.db, A, "a-2", vec![batch(t, 0, 1, 15)]).await;
    assert_eq!(third, vec![appended(10, 10)]);
    assert_eq!(
        assert_log_is_whole(&f.db, t, 0).await,
        vec![(0, 4), (5, 9), (10, 10)]
    );
    assert_eq!(assert_log_is_whole(&f.db, t, 1).await, vec![(0, 3), (4, 4)]);
    assert_eq!(
        topic_bounds(&f.db, t).await.unwrap(),
        vec![
            (
                0,
                Bounds {
                    log_start: 0,
                    next_offset: 11
                }
            ),
            (
                1,
                Bounds {
                    log_start: 0,
                    next_offset: 5
                }
            ),
        ]
    );
    assert_eq!(count(&f.db, "SELECT count(*) FROM objects").await, 3);
}

/// Two brokers (two pools) commit 200 objects over the same four partitions at once: every
/// offset is given out exactly once and the index has no gap.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_brokers_committing_at_once_leave_no_gap_and_no_overlap() {
    let f = setup(4).await;
    let t = f.topic;
    let other = connect(&f.pg.url()).await;
    let mut tasks = Vec::new();
    for i in 0..200u32 {
        let (db, broker) = if i % 2 == 0 {
            (f.db.clone(), A)
        } else {
            (other.clone(), B)
        };
        tasks.push(tokio::spawn(async move {
            // 1 to 6 batches; partitions in runs, each run's batches back to back.
            let mut batches = Vec::new();
            for k in 0..=(i % 6) {
                let partition = ((i + k / 2) % 4) as i32;
                batches.push(batch(t, partition, 1 + ((i + k) % 5) as i32, 0));
            }
            batches.sort_by_key(|b| b.partition);
            let req = request(broker, &format!("o-{i}"), batches);
            let outcomes = commit_object(&db, &req).await.expect("commit");
            req.batches
                .iter()
                .zip(outcomes)
                .map(|(b, o)| match o {
                    BatchOutcome::Appended {
                        base_offset,
                        last_offset,
                        ..
                    } => {
                        assert_eq!(last_offset - base_offset + 1, i64::from(b.records));
                        (b.partition, base_offset, last_offset)
                    }
                    other => panic!("{other:?}"),
                })
                .collect::<Vec<_>>()
        }));
    }
    let mut given: BTreeMap<i32, Vec<(i64, i64)>> = BTreeMap::new();
    for task in tasks {
        for (partition, base, last) in task.await.unwrap() {
            given.entry(partition).or_default().push((base, last));
        }
    }
    for (partition, mut ranges) in given {
        ranges.sort_unstable();
        let mut expected = 0;
        for (base, last) in ranges {
            assert_eq!(base, expected, "partition {partition}");
            expected = last + 1;
        }
        assert_eq!(next_offset(&f.db, t, partition).await, expected);
        assert_log_is_whole(&f.db, t, partition).await;
    }
    assert_eq!(count(&f.db, "SELECT count(*) FROM objects").await, 200);
}

/// A producer whose retry goes through another broker gets its original offsets back.
#[tokio::test]
async fn a_batch_retried_through_another_broker_is_a_duplicate() {
    let f = setup(1).await;
    let t = f.topic;
    let first = commit(&f.db, A, "a-1", vec![idem(t, 0, 42, 0, (0, 4))]).await;
    assert_eq!(first, vec![appended(0, 4)]);
    let retried = commit(
        &f.db,
        B,
        "b-1",
        vec![idem(t, 0, 42, 0, (0, 4)), idem(t, 0, 42, 0, (5, 5))],
    )
    .await;
    assert_eq!(
        retried,
        vec![
            BatchOutcome::Duplicate {
                base_offset: 0,
                last_offset: 4
            },
            appended(5, 5),
        ]
    );
    assert_eq!(next_offset(&f.db, t, 0).await, 6);

    // Only the last five batches are remembered: the oldest of seven is no duplicate.
    for s in 6..=10 {
        commit(
            &f.db,
            A,
            &format!("a-s{s}"),
            vec![idem(t, 0, 42, 0, (s, s))],
        )
        .await;
    }
    let old = commit(
        &f.db,
        B,
        "b-2",
        vec![idem(t, 0, 42, 0, (5, 5)), idem(t, 0, 42, 0, (6, 6))],
    )
    .await;
    assert_eq!(
        old,
        vec![
            BatchOutcome::OutOfOrderSequence {
                expected: 11,
                first_seq: 5
            },
            BatchOutcome::Duplicate {
                base_offset: 6,
                last_offset: 6
            },
        ]
    );
    assert_eq!(next_offset(&f.db, t, 0).await, 11);
    assert_log_is_whole(&f.db, t, 0).await;
}

/// Every refusal of the producer table, through both brokers; refused batches are not
/// recorded, and later batches of the object see the state the earlier ones left.
#[tokio::test]
async fn producer_sequences_are_checked_whichever_broker_they_come_through() {
    let f = setup(2).await;
    let t = f.topic;
    let out = commit(
        &f.db,
        A,
        "a-1",
        vec![
            idem(t, 0, 7, 0, (3, 3)),
            idem(t, 0, 7, 0, (0, 1)),
            idem(t, 0, 7, 0, (3, 4)),
            idem(t, 0, 7, 0, (2, 2)),
            // Same producer, other partition: its own sequence.
            idem(t, 1, 7, 0, (0, 0)),
        ],
    )
    .await;
    assert_eq!(
        out,
        vec![
            BatchOutcome::UnknownProducer { first_seq: 3 },
            appended(0, 1),
            BatchOutcome::OutOfOrderSequence {
                expected: 2,
                first_seq: 3
            },
            appended(2, 2),
            appended(0, 0),
        ]
    );
    // A new epoch through broker B fences the old one everywhere.
    let out = commit(
        &f.db,
        B,
        "b-1",
        vec![
            idem(t, 0, 7, 1, (0, 0)),
            idem(t, 0, 7, 0, (3, 3)),
            idem(t, 0, 7, 2, (5, 5)),
        ],
    )
    .await;
    assert_eq!(
        out,
        vec![
            appended(3, 3),
            BatchOutcome::InvalidProducerEpoch {
                epoch: 0,
                current: 1
            },
            BatchOutcome::NewEpochNotAtZero {
                epoch: 2,
                first_seq: 5
            },
        ]
    );
    let out = commit(
        &f.db,
        A,
        "a-2",
        vec![idem(t, 0, 7, 0, (3, 3)), idem(t, 0, 7, 1, (1, 2))],
    )
    .await;
    assert_eq!(
        out,
        vec![
            BatchOutcome::InvalidProducerEpoch {
                epoch: 0,
                current: 1
            },
            appended(4, 5),
        ]
    );
    assert_eq!(next_offset(&f.db, t, 0).await, 6);
    assert_eq!(next_offset(&f.db, t, 1).await, 1);
    assert_log_is_whole(&f.db, t, 0).await;
    assert_eq!(
        count(&f.db, "SELECT count(*) FROM producers").await,
        2,
        "one row per producer and partition"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_retried_key_gets_the_same_outcomes_and_changes_nothing() {
    let f = setup(1).await;
    let t = f.topic;
    let req = request(
        A,
        "a-1",
        vec![
            batch(t, 0, 2, 0),
            idem(t, 0, 9, 0, (4, 4)),
            batch(t, 0, 1, 0),
        ],
    );
    let first = commit_object(&f.db, &req).await.unwrap();
    assert_eq!(
        first,
        vec![
            appended(0, 1),
            BatchOutcome::UnknownProducer { first_seq: 4 },
            appended(2, 2),
        ]
    );
    let state = "SELECT (SELECT next_offset FROM partitions) * 1000 + (SELECT count(*) FROM batches) * 10 + (SELECT count(*) FROM objects)";
    let before = count(&f.db, state).await;
    assert_eq!(commit_object(&f.db, &req).await.unwrap(), first);
    assert_eq!(count(&f.db, state).await, before);

    // Answering a retry changes nothing, so it is answered even once the broker is fenced.
    sql(
        &f.db,
        "UPDATE brokers SET stopped_at = now() WHERE broker_id = 1",
    )
    .await;
    assert_eq!(commit_object(&f.db, &req).await.unwrap(), first);
    assert_eq!(count(&f.db, state).await, before);

    // A reused key with other batches is refused.
    let reused = request(B, "a-1", vec![batch(t, 0, 1, 0)]);
    let e = commit_object(&f.db, &reused).await.unwrap_err();
    assert!(
        matches!(
            e,
            CommitError::KeyReused {
                stored: 3,
                requested: 1,
                ..
            }
        ),
        "{e}"
    );

    // The same key committed twice at once: one commit, both see its outcomes.
    let req = request(B, "b-1", vec![batch(t, 0, 5, 0)]);
    let (x, y) = tokio::join!(commit_object(&f.db, &req), commit_object(&f.db, &req));
    assert_eq!(x.unwrap(), vec![appended(3, 7)]);
    assert_eq!(y.unwrap(), vec![appended(3, 7)]);
    assert_eq!(next_offset(&f.db, t, 0).await, 8);
    assert_log_is_whole(&f.db, t, 0).await;
}

#[tokio::test]
async fn a_broker_declared_dead_commits_nothing() {
    let f = setup(1).await;
    let t = f.topic;
    commit(&f.db, A, "a-1", vec![batch(t, 0, 1, 0)]).await;
    sql(
        &f.db,
        "UPDATE brokers SET expires_at = now() - interval '1 second' WHERE broker_id = 1",
    )
    .await;
    let fenced = |e: CommitError| matches!(e, CommitError::Fenced { .. });
    let e = commit_object(&f.db, &request(A, "a-2", vec![batch(t, 0, 1, 0)]))
        .await
        .unwrap_err();
    assert!(fenced(e), "an expired lease");
    // Another instance with B's id, and an id nobody has.
    let impostor = Broker {
        id: B.id,
        instance: A.instance,
    };
    let e = commit_object(&f.db, &request(impostor, "x-1", vec![batch(t, 0, 1, 0)]))
        .await
        .unwrap_err();
    assert!(fenced(e), "another instance");
    let nobody = Broker {
        id: 99,
        instance: Uuid::from_u128(99),
    };
    let e = commit_object(&f.db, &request(nobody, "x-2", vec![batch(t, 0, 1, 0)]))
        .await
        .unwrap_err();
    assert!(!e.is_retriable() && fenced(e), "an unknown broker");
    sql(
        &f.db,
        "UPDATE brokers SET stopped_at = now() WHERE broker_id = 2",
    )
    .await;
    let e = commit_object(&f.db, &request(B, "b-1", vec![batch(t, 0, 1, 0)]))
        .await
        .unwrap_err();
    assert!(fenced(e), "a stopped broker");

    assert_eq!(next_offset(&f.db, t, 0).await, 1);
    assert_eq!(count(&f.db, "SELECT count(*) FROM objects").await, 1);
    assert_eq!(count(&f.db, "SELECT count(*) FROM batches").await, 1);

    // Renewed, it commits again; the pool's connections were all left clean.
    sql(
        &f.db,
        "UPDATE brokers SET expires_at = now() + interval '1 hour' WHERE broker_id = 1",
    )
    .await;
    assert_eq!(
        commit(&f.db, A, "a-2", vec![batch(t, 0, 1, 0)]).await,
        vec![appended(1, 1)]
    );
}

#[tokio::test]
async fn a_missing_partition_refuses_only_its_batches() {
    let f = setup(1).await;
    let t = f.topic;
    let out = commit(
        &f.db,
        A,
        "a-1",
        vec![
            batch(t, 0, 2, 0),
            batch(t, 3, 1, 0),
            batch(Uuid::new_v4(), 0, 1, 0),
        ],
    )
    .await;
    assert_eq!(
        out,
        vec![
            appended(0, 1),
            BatchOutcome::UnknownTopicOrPartition,
            BatchOutcome::UnknownTopicOrPartition,
        ]
    );
    assert_eq!(partition_bounds(&f.db, t, 3).await.unwrap(), None);
    assert_eq!(count(&f.db, "SELECT count(*) FROM batches").await, 1);
}

#[tokio::test]
async fn consecutive_accepted_batches_share_one_index_row() {
    let f = setup(2).await;
    let t = f.topic;
    let mut batches = vec![batch(t, 0, 2, 50), batch(t, 0, 3, 70), batch(t, 0, 1, 60)];
    batches.push(batch(t, 1, 1, 0));
    commit(&f.db, A, "a-1", batches).await;
    let rows = read_batches(&f.db, t, 0, 0, 100).await.unwrap();
    assert_eq!(rows.len(), 1, "{rows:?}");
    let r = &rows[0];
    assert_eq!((r.base_offset, r.last_offset, r.batch_count), (0, 5, 3));
    assert_eq!((r.byte_start, r.byte_len), (0, 3 * BATCH_BYTES));
    assert_eq!((r.object_key.as_str(), r.max_timestamp), ("a-1", 70));
    let other = read_batches(&f.db, t, 1, 0, 100).await.unwrap();
    assert_eq!((other[0].byte_start, other[0].batch_count), (300, 1));

    // A refused batch in the middle: the accepted ones around it are two rows.
    let out = commit(
        &f.db,
        B,
        "b-1",
        vec![
            idem(t, 0, 5, 0, (0, 0)),
            idem(t, 0, 5, 0, (7, 7)),
            idem(t, 0, 5, 0, (1, 2)),
        ],
    )
    .await;
    assert!(matches!(out[1], BatchOutcome::OutOfOrderSequence { .. }));
    let rows = read_batches(&f.db, t, 0, 6, 100).await.unwrap();
    let got: Vec<_> = rows
        .iter()
        .map(|r| (r.base_offset, r.last_offset, r.byte_start, r.batch_count))
        .collect();
    assert_eq!(got, vec![(6, 6, 0, 1), (7, 8, 200, 1)]);
    assert_log_is_whole(&f.db, t, 0).await;
}

#[tokio::test]
async fn reads_find_rows_by_offset_and_by_time() {
    let f = setup(1).await;
    let t = f.topic;
    // Rows: [0,1] ts 100, [2,4] ts 300, [5,5] ts 200, [6,9] ts 500 (one object each).
    for (i, (records, ts)) in [(2, 100), (3, 300), (1, 200), (4, 500)]
        .into_iter()
        .enumerate()
    {
        commit(&f.db, A, &format!("o-{i}"), vec![batch(t, 0, records, ts)]).await;
    }
    let offsets = |rows: Vec<sluice_cluster::index::BatchRow>| {
        rows.iter()
            .map(|r| (r.base_offset, r.object_key.clone()))
            .collect::<Vec<_>>()
    };
    let all = read_batches(&f.db, t, 0, 0, 100).await.unwrap();
    assert_eq!(
        offsets(all),
        vec![
            (0, "o-0".to_string()),
            (2, "o-1".to_string()),
            (5, "o-2".to_string()),
            (6, "o-3".to_string())
        ]
    );
    // From inside a row: that row first.
    let from3 = read_batches(&f.db, t, 0, 3, 2).await.unwrap();
    assert_eq!(
        offsets(from3),
        vec![(2, "o-1".to_string()), (5, "o-2".to_string())]
    );
    assert!(read_batches(&f.db, t, 0, 10, 100).await.unwrap().is_empty());
    assert!(read_batches(&f.db, t, 0, 0, 0).await.unwrap().is_empty());
    assert!(read_batches(&f.db, t, 7, 0, 10).await.unwrap().is_empty());
    assert_eq!(
        partition_bounds(&f.db, t, 0).await.unwrap(),
        Some(Bounds {
            log_start: 0,
            next_offset: 10
        })
    );

    let by_time = |ts| offset_for_timestamp(&f.db, t, 0, ts);
    assert_eq!(by_time(0).await.unwrap().unwrap().base_offset, 0);
    assert_eq!(by_time(100).await.unwrap().unwrap().base_offset, 0);
    assert_eq!(by_time(150).await.unwrap().unwrap().base_offset, 2);
    assert_eq!(by_time(301).await.unwrap().unwrap().base_offset, 6);
    assert_eq!(by_time(501).await.unwrap(), None);
    assert_eq!(offset_for_timestamp(&f.db, t, 9, 0).await.unwrap(), None);
    // Rows below the log start do not count.
    sql(&f.db, "UPDATE partitions SET log_start = 5").await;
    assert_eq!(by_time(0).await.unwrap().unwrap().base_offset, 5);
}

/// A commit whose caller gives up while it waits for a lock leaves no transaction open: its
/// connection is closed, not handed to the next commit.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_abandoned_commit_leaves_no_transaction_open() {
    let f = setup(1).await;
    let t = f.topic;
    let holder = connect(&f.pg.url()).await;
    let mut holder = holder.client().await.unwrap();
    let tx = holder.transaction().await.unwrap();
    tx.batch_execute("SELECT * FROM partitions FOR UPDATE")
        .await
        .unwrap();
    let req = request(A, "a-1", vec![batch(t, 0, 1, 0)]);
    let gave_up =
        tokio::time::timeout(Duration::from_millis(300), commit_object(&f.db, &req)).await;
    assert!(gave_up.is_err(), "the commit waits for the lock");
    tx.rollback().await.unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let open = count(
            &f.db,
            "SELECT count(*) FROM pg_stat_activity WHERE state LIKE 'idle in transaction%' \
             OR (state = 'active' AND wait_event_type = 'Lock')",
        )
        .await;
        if open == 0 {
            break;
        }
        assert!(Instant::now() < deadline, "{open} transactions left open");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // Never committed (the server rolled it back), so committing it now gives offset 0.
    assert_eq!(
        commit_object(&f.db, &req).await.unwrap(),
        vec![appended(0, 0)]
    );
}

/// Waits for the next event that `pick` accepts, at most `within`.
async fn wait_for(
    events: &mut sluice_cluster::index::CommitSubscription,
    within: Duration,
    pick: impl Fn(&CommitEvent) -> bool,
) -> Option<CommitEvent> {
    let deadline = tokio::time::Instant::now() + within;
    loop {
        match tokio::time::timeout_at(deadline, events.recv()).await {
            Ok(Some(e)) if pick(&e) => return Some(e),
            Ok(Some(_)) => {}
            Ok(None) | Err(_) => return None,
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_listener_hears_commits_and_comes_back_after_a_restart() {
    let mut f = setup(1).await;
    let t = f.topic;
    let listener = CommitListener::start(&f.db);
    let mut events = listener.subscribe();
    let everything = |e: &CommitEvent| *e == CommitEvent::Everything;
    assert!(
        wait_for(&mut events, Duration::from_secs(10), everything)
            .await
            .is_some(),
        "Everything once listening"
    );
    assert!(listener.is_connected());

    commit(&f.db, A, "a-1", vec![batch(t, 0, 3, 0)]).await;
    let committed = Instant::now();
    let moved = wait_for(&mut events, Duration::from_secs(2), |_| true).await;
    let latency = committed.elapsed();
    assert_eq!(
        moved,
        Some(CommitEvent::Moved {
            topic_id: t,
            partition: 0,
            next_offset: 3
        })
    );
    assert!(latency < Duration::from_millis(100), "{latency:?}");

    // A commit that moved nothing sends nothing.
    commit(&f.db, A, "a-none", vec![batch(t, 7, 1, 0)]).await;
    assert_eq!(
        wait_for(&mut events, Duration::from_millis(300), |_| true).await,
        None
    );

    // A commit of more partitions than one payload lists says Everything.
    let wide = Uuid::new_v4();
    add_topic(&f.db, wide, "wide", 250).await;
    let batches = (0..250).map(|p| batch(wide, p, 1, 0)).collect();
    commit(&f.db, A, "a-2", batches).await;
    assert_eq!(
        wait_for(&mut events, Duration::from_secs(2), |_| true).await,
        Some(CommitEvent::Everything)
    );

    let pg = &mut f.pg;
    tokio::task::block_in_place(|| pg.restart());
    assert!(
        wait_for(&mut events, Duration::from_secs(15), everything)
            .await
            .is_some(),
        "Everything after reconnecting"
    );
    assert!(listener.is_connected());
    // The pool's connections died with the server: a commit may fail once (retriable).
    let mut attempts = 0;
    loop {
        attempts += 1;
        match commit_object(&f.db, &request(B, "b-1", vec![batch(t, 0, 1, 0)])).await {
            Ok(out) => {
                assert_eq!(out, vec![appended(3, 3)]);
                break;
            }
            Err(e) if e.is_retriable() && attempts < 20 => {
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            Err(e) => panic!("{e}"),
        }
    }
    let moved = wait_for(&mut events, Duration::from_secs(2), |e| !everything(e)).await;
    assert_eq!(
        moved,
        Some(CommitEvent::Moved {
            topic_id: t,
            partition: 0,
            next_offset: 4
        })
    );
    drop(listener);
    let ended = async { while events.recv().await.is_some() {} };
    tokio::time::timeout(Duration::from_secs(5), ended)
        .await
        .expect("dropping the listener ends subscriptions");
}
