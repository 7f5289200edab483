//! DeleteRecords on a real `sluice serve`, in each storage mode: the log start moves, reads
//! and ListOffsets earliest start there, bad offsets and unknown partitions get Kafka's error
//! codes, and the new start survives a restart (local disk), the loss of the data directory
//! (object storage: the bucket alone), and is seen through every broker (cluster mode).

mod common;

use std::time::{Duration, Instant};

use common::{Server, kafka_call};
use sluice_protocol::kafka_protocol::messages::{
    ApiKey, DeleteRecordsRequest, ListOffsetsRequest, RequestKind, ResponseKind, TopicName,
    delete_records_request, list_offsets_request,
};
use sluice_protocol::kafka_protocol::protocol::StrBytes;
use sluice_testkit::{MinioServer, PostgresServer};

const OUT_OF_RANGE: i16 = 1;
const UNKNOWN_PARTITION: i16 = 3;

fn port(server: &Server) -> u16 {
    server
        .bootstrap()
        .rsplit(':')
        .next()
        .unwrap()
        .parse()
        .unwrap()
}

fn topic_name(name: &str) -> TopicName {
    TopicName(StrBytes::from_string(name.to_owned()))
}

/// DeleteRecords of `(partition, offset)` pairs of `topic`: (partition, low watermark, error).
fn delete_records(server: &Server, topic: &str, cuts: &[(i32, i64)]) -> Vec<(i32, i64, i16)> {
    let body = RequestKind::DeleteRecords(
        DeleteRecordsRequest::default()
            .with_timeout_ms(10_000)
            .with_topics(vec![
                delete_records_request::DeleteRecordsTopic::default()
                    .with_name(topic_name(topic))
                    .with_partitions(
                        cuts.iter()
                            .map(|&(p, o)| {
                                delete_records_request::DeleteRecordsPartition::default()
                                    .with_partition_index(p)
                                    .with_offset(o)
                            })
                            .collect(),
                    ),
            ]),
    );
    match kafka_call(port(server), ApiKey::DeleteRecords, 2, body) {
        ResponseKind::DeleteRecords(r) => r.topics[0]
            .partitions
            .iter()
            .map(|p| (p.partition_index, p.low_watermark, p.error_code))
            .collect(),
        other => panic!("unexpected {other:?}"),
    }
}

/// ListOffsets earliest (-2) of partition 0 of `topic`.
fn earliest(server: &Server, topic: &str) -> i64 {
    list_offsets(server, topic, -2).0
}

/// ListOffsets of partition 0 of `topic` with `spec` (a time, or -1, -2, -3): (offset, time).
fn list_offsets(server: &Server, topic: &str, spec: i64) -> (i64, i64) {
    let body = RequestKind::ListOffsets(ListOffsetsRequest::default().with_topics(vec![
        list_offsets_request::ListOffsetsTopic::default()
            .with_name(topic_name(topic))
            .with_partitions(vec![
                list_offsets_request::ListOffsetsPartition::default()
                    .with_partition_index(0)
                    .with_timestamp(spec),
            ]),
    ]));
    match kafka_call(port(server), ApiKey::ListOffsets, 7, body) {
        ResponseKind::ListOffsets(r) => {
            let p = &r.topics[0].partitions[0];
            assert_eq!(p.error_code, 0, "{r:?}");
            (p.offset, p.timestamp)
        }
        other => panic!("unexpected {other:?}"),
    }
}

/// Values of `topic` from its earliest offset.
fn values(server: &Server, topic: &str) -> Vec<String> {
    let out = server.ok(&["consume", topic], "").stdout;
    out.lines().map(str::to_owned).collect()
}

fn expected_from(start: usize, count: usize) -> Vec<String> {
    (start..count).map(|i| format!("v{i}")).collect()
}

/// Writes 50 records to partition 0 of a one-partition topic, one produce each (so that the
/// cut falls between batches as well as inside none), then checks the answers every mode
/// shares; leaves the log start at 20. `others` are the cluster's other brokers: they learn the
/// new start at their next poll of the partition bounds, and a read may go to any of them (the
/// partition's leader).
fn cut_and_check(server: &Server, topic: &str, others: &[&Server]) {
    server.ok(&["topic", "create", topic, "--partitions", "1"], "");
    for i in 0..50 {
        server.ok(&["produce", topic], &format!("v{i}\n"));
    }
    assert_eq!(values(server, topic), expected_from(0, 50));
    // Max timestamp (-3): each produce ran later than the one before, so the last record holds
    // the highest time; a time lookup at that time agrees.
    let (offset, newest) = list_offsets(server, topic, -3);
    assert_eq!(offset, 49);
    assert_eq!(list_offsets(server, topic, newest), (49, newest));

    assert_eq!(delete_records(server, topic, &[(0, 20)]), [(0, 20, 0)]);
    assert_eq!(earliest(server, topic), 20);
    for other in others {
        starts_at(other, topic, 20);
    }
    assert_eq!(values(server, topic), expected_from(20, 50));
    // Below the start: nothing moves, the answer is the start.
    assert_eq!(delete_records(server, topic, &[(0, 5)]), [(0, 20, 0)]);
    // Past the high watermark: OFFSET_OUT_OF_RANGE; an unknown partition: its own error.
    let answers = delete_records(server, topic, &[(0, 51), (7, 1)]);
    assert_eq!(answers[0].0, 0);
    assert_eq!(answers[0].2, OUT_OF_RANGE, "{answers:?}");
    assert_eq!(answers[1], (7, -1, UNKNOWN_PARTITION));
    assert_eq!(earliest(server, topic), 20);
}

#[test]
fn local_disk_the_start_moves_and_survives_a_restart() {
    let server = Server::start_fresh();
    cut_and_check(&server, "purge", &[]);
    assert_eq!(delete_records(&server, "purge", &[(0, 33)]), [(0, 33, 0)]);
    let (status, dir) = server.stop();
    assert!(status.success(), "{status:?}");

    let server = Server::start(dir);
    assert_eq!(earliest(&server, "purge"), 33);
    assert_eq!(values(&server, "purge"), expected_from(33, 50));
    // -1 means the high watermark: everything goes.
    assert_eq!(delete_records(&server, "purge", &[(0, -1)]), [(0, 50, 0)]);
    assert!(values(&server, "purge").is_empty());
    server.ok(&["produce", "purge"], "v50\n");
    assert_eq!(values(&server, "purge"), ["v50"]);
}

#[test]
fn object_storage_the_bucket_alone_keeps_the_new_start() {
    let minio = MinioServer::start();
    let args = [
        "--storage".to_owned(),
        format!("s3://{}/dr", minio.bucket()),
        "--object-linger-ms".to_owned(),
        "20".to_owned(),
    ];
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let server = Server::start_with_env(tempfile::tempdir().unwrap(), &args, &minio.env_vars());
    cut_and_check(&server, "purge", &[]);
    let (status, _dir) = server.stop();
    assert!(status.success(), "{status:?}");

    // A new, empty data directory: everything comes from the bucket.
    let server = Server::start_with_env(tempfile::tempdir().unwrap(), &args, &minio.env_vars());
    assert_eq!(earliest(&server, "purge"), 20);
    assert_eq!(values(&server, "purge"), expected_from(20, 50));
}

#[test]
fn cluster_mode_every_broker_sees_the_new_start() {
    let minio = MinioServer::start();
    let pg = PostgresServer::start();
    let args = [
        "--storage".to_owned(),
        format!("s3://{}/dr", minio.bucket()),
        "--metadata".to_owned(),
        pg.url(),
        "--object-linger-ms".to_owned(),
        "20".to_owned(),
    ];
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let a = Server::start_with_env(tempfile::tempdir().unwrap(), &args, &minio.env_vars());
    let b = Server::start_with_env(tempfile::tempdir().unwrap(), &args, &minio.env_vars());
    cut_and_check(&a, "purge", &[&b]);
    assert_eq!(values(&b, "purge"), expected_from(20, 50));
    // Through the other broker, up to the high watermark.
    assert_eq!(delete_records(&b, "purge", &[(0, -1)]), [(0, 50, 0)]);
    starts_at(&a, "purge", 50);
    assert!(values(&a, "purge").is_empty());
}

/// Waits (at most 15 s) until `server` answers ListOffsets earliest of `topic` with `offset`.
fn starts_at(server: &Server, topic: &str, offset: i64) {
    let started = Instant::now();
    loop {
        let now = earliest(server, topic);
        if now == offset {
            return;
        }
        assert!(
            started.elapsed() < Duration::from_secs(15),
            "{} still starts at {now}, not {offset}",
            server.bootstrap()
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}
