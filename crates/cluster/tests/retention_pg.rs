//! The cleaner against a real PostgreSQL and MinIO: retention by time and by bytes moves
//! log starts and deletes index rows as a prefix only, objects go once no row refers to them
//! and their grace is over, deleted topics are purged, and one broker at a time holds the
//! cleaner lease.

mod common;

use std::collections::HashMap;
use std::time::Duration;

use common::{PostgresServer, count, migrated, sql};
use object_store::{ObjectStoreExt, PutPayload};
use sluice_cluster::Db;
use sluice_cluster::commit::{CommitBatch, CommitRequest, commit_object};
use sluice_cluster::index::{partition_bounds, read_batches};
use sluice_cluster::retention::{
    CleanerSettings, PartitionRetention, RoundStats, run_round, take_lease,
};
use sluice_objstore::bucket::{self, Bucket, BucketConfig, StorageUrl};
use sluice_testkit::MinioServer;
use uuid::Uuid;

const A: (i32, Uuid) = (1, Uuid::from_u128(0xa));
const B: (i32, Uuid) = (2, Uuid::from_u128(0xb));

/// Bytes every test batch takes in its object.
const BATCH_BYTES: u32 = 100;

/// A time far in the past and one in the future, as batch max timestamps.
const OLD: i64 = 1_000;
const NEW: i64 = i64::MAX / 2;

struct Fixture {
    _pg: PostgresServer,
    _minio: MinioServer,
    db: Db,
    bucket: Bucket,
    topic: Uuid,
}

async fn setup() -> Fixture {
    let pg = PostgresServer::start();
    let minio = MinioServer::start();
    let db = migrated(&pg).await;
    let env: HashMap<&str, String> = minio.env_vars().into_iter().collect();
    let url = StorageUrl::parse(&format!("s3://{}/clean", minio.bucket())).unwrap();
    let config = BucketConfig::from_env(url, |name| env.get(name).cloned()).unwrap();
    let bucket = bucket::open(config).expect("open the bucket");
    let topic = Uuid::new_v4();
    sql(
        &db,
        &format!(
            "INSERT INTO topics (topic_id, name, partitions) VALUES ('{topic}', 't', 2); \
             INSERT INTO partitions (topic_id, partition) VALUES ('{topic}', 0), ('{topic}', 1); \
             INSERT INTO brokers (broker_id, instance, host, port, expires_at) VALUES \
             ({}, '{}', '127.0.0.1', 9092, now() + interval '1 hour'), \
             ({}, '{}', '127.0.0.1', 9093, now() + interval '1 hour')",
            A.0, A.1, B.0, B.1
        ),
    )
    .await;
    Fixture {
        _pg: pg,
        _minio: minio,
        db,
        bucket,
        topic,
    }
}

/// PUTs object `key` and commits one batch of `records` offsets per `(partition,
/// max_timestamp)`, laid out back to back.
async fn commit(f: &Fixture, key: &str, batches: &[(i32, i64)], records: i32) {
    let mut at = 0u64;
    let batches: Vec<CommitBatch> = batches
        .iter()
        .map(|&(partition, max_timestamp)| {
            let b = CommitBatch {
                topic_id: f.topic,
                partition,
                byte_start: at,
                byte_len: BATCH_BYTES,
                records,
                max_timestamp,
                producer: None,
            };
            at += u64::from(BATCH_BYTES);
            b
        })
        .collect();
    f.bucket
        .store()
        .put(&f.bucket.key(key), PutPayload::from(vec![0u8; at as usize]))
        .await
        .expect("PUT the object");
    commit_object(
        &f.db,
        &CommitRequest {
            key: key.to_string(),
            broker_id: A.0,
            instance: A.1,
            size_bytes: at,
            batches,
        },
    )
    .await
    .unwrap_or_else(|e| panic!("commit {key}: {e}"));
}

fn retention(
    f: &Fixture,
    partition: i32,
    ms: Option<i64>,
    bytes: Option<u64>,
) -> PartitionRetention {
    PartitionRetention {
        topic_id: f.topic,
        partition,
        retention_ms: ms,
        retention_bytes: bytes,
    }
}

/// A round by broker A with no grace for objects, at a `now` between OLD and NEW.
async fn round(f: &Fixture, partitions: &[PartitionRetention]) -> RoundStats {
    round_with(f, partitions, Duration::ZERO).await
}

async fn round_with(f: &Fixture, partitions: &[PartitionRetention], grace: Duration) -> RoundStats {
    let settings = CleanerSettings {
        interval: Duration::from_secs(1),
        object_grace: grace,
    };
    run_round(&f.db, &f.bucket, A.0, A.1, partitions, &settings, 1_000_000)
        .await
        .expect("cleaner round")
}

async fn log_start(f: &Fixture, partition: i32) -> i64 {
    partition_bounds(&f.db, f.topic, partition)
        .await
        .unwrap()
        .unwrap()
        .log_start
}

async fn rows(f: &Fixture, partition: i32) -> Vec<(i64, i64)> {
    read_batches(&f.db, f.topic, partition, 0, 1000)
        .await
        .unwrap()
        .iter()
        .map(|r| (r.base_offset, r.last_offset))
        .collect()
}

async fn object_exists(f: &Fixture, key: &str) -> bool {
    match f.bucket.store().head(&f.bucket.key(key)).await {
        Ok(_) => true,
        Err(object_store::Error::NotFound { .. }) => false,
        Err(e) => panic!("HEAD {key}: {e}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn time_retention_removes_an_expired_prefix_and_then_its_objects() {
    let f = setup().await;
    // Partition 0: old, old, new, old. Partition 1 shares the second object.
    commit(&f, "o1", &[(0, OLD)], 5).await;
    commit(&f, "o2", &[(0, OLD), (1, NEW)], 5).await;
    commit(&f, "o3", &[(0, NEW)], 5).await;
    commit(&f, "o4", &[(0, OLD)], 5).await;
    let p0 = retention(&f, 0, Some(1_000), None);
    let p1 = retention(&f, 1, Some(1_000), None);
    let stats = round(&f, &[p0, p1]).await;
    assert!(stats.held);
    assert_eq!(stats.partitions_trimmed, 1, "{stats:?}");
    // The prefix stops at the first row that must stay, though the last one is old too.
    assert_eq!(log_start(&f, 0).await, 10);
    assert_eq!(rows(&f, 0).await, vec![(10, 14), (15, 19)]);
    assert_eq!(log_start(&f, 1).await, 0);
    // o1 lost its only row and goes at once (no grace); o2 still holds partition 1's row.
    assert_eq!(stats.objects_deleted, 1, "{stats:?}");
    assert!(!object_exists(&f, "o1").await);
    assert!(object_exists(&f, "o2").await);
    assert_eq!(
        count(&f.db, "SELECT count(*) FROM objects WHERE key = 'o1'").await,
        0
    );
    assert_eq!(
        count(
            &f.db,
            "SELECT count(*) FROM objects WHERE key = 'o2' AND unreferenced_at IS NULL"
        )
        .await,
        1
    );
    // A second round changes nothing.
    let again = round(&f, &[p0, p1]).await;
    assert_eq!(
        again.partitions_trimmed + again.rows_deleted + again.objects_deleted,
        0
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bytes_retention_keeps_at_least_the_limit() {
    let f = setup().await;
    for i in 0..5 {
        commit(&f, &format!("b{i}"), &[(0, NEW)], 2).await;
    }
    // 500 bytes kept, a limit of 250: removing 2 rows leaves 300 >= 250, a third would leave
    // 200 < 250.
    let stats = round(&f, &[retention(&f, 0, None, Some(250))]).await;
    assert_eq!(stats.partitions_trimmed, 1);
    assert_eq!(log_start(&f, 0).await, 4);
    assert_eq!(rows(&f, 0).await, vec![(4, 5), (6, 7), (8, 9)]);
    assert_eq!(stats.objects_deleted, 2);
    // Unlimited retention moves nothing.
    let none = round(&f, &[retention(&f, 0, None, None)]).await;
    assert_eq!(none.partitions_trimmed, 0);
    assert_eq!(log_start(&f, 0).await, 4);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn everything_expired_moves_the_log_start_to_the_high_watermark() {
    let f = setup().await;
    commit(&f, "e1", &[(0, OLD), (0, OLD)], 3).await;
    round(&f, &[retention(&f, 0, Some(1), None)]).await;
    let bounds = partition_bounds(&f.db, f.topic, 0).await.unwrap().unwrap();
    assert_eq!((bounds.log_start, bounds.next_offset), (6, 6));
    assert!(rows(&f, 0).await.is_empty());
    // New commits carry on from the high watermark.
    commit(&f, "e2", &[(0, NEW)], 1).await;
    assert_eq!(rows(&f, 0).await, vec![(6, 6)]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn objects_stay_through_their_grace() {
    let f = setup().await;
    commit(&f, "g1", &[(0, OLD)], 1).await;
    commit(&f, "g2", &[(0, NEW)], 1).await;
    let p = [retention(&f, 0, Some(1_000), None)];
    let stats = round_with(&f, &p, Duration::from_secs(3600)).await;
    assert_eq!((stats.rows_deleted, stats.objects_deleted), (1, 0));
    assert!(object_exists(&f, "g1").await);
    assert_eq!(
        count(
            &f.db,
            "SELECT count(*) FROM objects WHERE key = 'g1' AND unreferenced_at IS NOT NULL"
        )
        .await,
        1
    );
    // Once the grace is over it goes, bucket first, then the row.
    let later = round_with(&f, &p, Duration::ZERO).await;
    assert_eq!(later.objects_deleted, 1);
    assert!(!object_exists(&f, "g1").await);
    assert!(object_exists(&f, "g2").await);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deleted_topics_rows_and_objects_are_purged() {
    let f = setup().await;
    commit(&f, "d1", &[(0, NEW), (1, NEW)], 4).await;
    sluice_cluster::catalog::delete_topic(&f.db, "t")
        .await
        .expect("delete the topic");
    let stats = round(&f, &[]).await;
    assert_eq!(
        (stats.topics_purged, stats.rows_deleted),
        (1, 2),
        "{stats:?}"
    );
    assert_eq!(stats.objects_deleted, 1);
    assert!(!object_exists(&f, "d1").await);
    let left = format!(
        "SELECT (SELECT count(*) FROM batches WHERE topic_id = '{0}') \
              + (SELECT count(*) FROM topics WHERE topic_id = '{0}')",
        f.topic
    );
    assert_eq!(count(&f.db, &left).await, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_broker_at_a_time_holds_the_cleaner_lease() {
    let f = setup().await;
    let lease = Duration::from_secs(2);
    assert!(take_lease(&f.db, A.0, A.1, lease).await.unwrap());
    assert!(!take_lease(&f.db, B.0, B.1, lease).await.unwrap());
    // The holder renews it.
    assert!(take_lease(&f.db, A.0, A.1, lease).await.unwrap());
    // B's round does nothing while A holds it.
    commit(&f, "l1", &[(0, OLD)], 1).await;
    let settings = CleanerSettings {
        interval: Duration::from_secs(10),
        object_grace: Duration::ZERO,
    };
    let p = [retention(&f, 0, Some(1), None)];
    let b_round = run_round(&f.db, &f.bucket, B.0, B.1, &p, &settings, 1_000_000)
        .await
        .unwrap();
    assert!(!b_round.held);
    assert_eq!(log_start(&f, 0).await, 0);
    // Once it expires, B takes over.
    tokio::time::sleep(lease + Duration::from_millis(200)).await;
    assert!(take_lease(&f.db, B.0, B.1, lease).await.unwrap());
    assert!(!take_lease(&f.db, A.0, A.1, lease).await.unwrap());
}
