//! Black-box test of client quotas on a real `sluice serve`: AlterClientQuotas and
//! DescribeClientQuotas, a producer and a consumer over their byte-rate quotas answered with
//! `throttle_time_ms` and muted for that long, the quotas in `/metrics`, and the quotas
//! surviving a restart.

mod common;

use std::net::TcpStream;
use std::time::{Duration, Instant};

use bytes::BytesMut;
use common::{Server, kafka_call, kafka_call_on, kafka_connect};
use sluice_protocol::kafka_protocol::messages::{
    AlterClientQuotasRequest, ApiKey, DescribeClientQuotasRequest, FetchRequest, ProduceRequest,
    RequestKind, ResponseKind, TopicName, alter_client_quotas_request,
    describe_client_quotas_request, fetch_request, produce_request,
};
use sluice_protocol::kafka_protocol::protocol::StrBytes;
use sluice_protocol::records::{ProducerRecord, encode_batch};

const TOPIC: &str = "quota";
/// The quotas set on client id "test" (what `kafka_call` sends): 100 KB/s each way.
const RATE: f64 = 100_000.0;

fn s(v: &str) -> StrBytes {
    StrBytes::from_string(v.to_owned())
}

fn port(server: &Server) -> u16 {
    server
        .bootstrap()
        .rsplit(':')
        .next()
        .unwrap()
        .parse()
        .unwrap()
}

fn alter(port: u16, entries: Vec<alter_client_quotas_request::EntryData>) -> Vec<(i16, String)> {
    let body =
        RequestKind::AlterClientQuotas(AlterClientQuotasRequest::default().with_entries(entries));
    match kafka_call(port, ApiKey::AlterClientQuotas, 1, body) {
        ResponseKind::AlterClientQuotas(r) => r
            .entries
            .iter()
            .map(|e| {
                (
                    e.error_code,
                    e.error_message
                        .as_ref()
                        .map(|m| m.to_string())
                        .unwrap_or_default(),
                )
            })
            .collect(),
        other => panic!("unexpected {other:?}"),
    }
}

fn entry(
    entity: &[(&str, Option<&str>)],
    ops: &[(&str, Option<f64>)],
) -> alter_client_quotas_request::EntryData {
    alter_client_quotas_request::EntryData::default()
        .with_entity(
            entity
                .iter()
                .map(|(t, n)| {
                    alter_client_quotas_request::EntityData::default()
                        .with_entity_type(s(t))
                        .with_entity_name(n.map(s))
                })
                .collect(),
        )
        .with_ops(
            ops.iter()
                .map(|(k, v)| {
                    alter_client_quotas_request::OpData::default()
                        .with_key(s(k))
                        .with_value(v.unwrap_or(0.0))
                        .with_remove(v.is_none())
                })
                .collect(),
        )
}

/// The quotas of client id "test", as DescribeClientQuotas answers them.
fn describe_test_client(port: u16) -> Vec<(String, f64)> {
    let body = RequestKind::DescribeClientQuotas(
        DescribeClientQuotasRequest::default().with_components(vec![
            describe_client_quotas_request::ComponentData::default()
                .with_entity_type(s("client-id"))
                .with_match_type(0)
                .with_match(Some(s("test"))),
        ]),
    );
    match kafka_call(port, ApiKey::DescribeClientQuotas, 1, body) {
        ResponseKind::DescribeClientQuotas(r) => {
            assert_eq!(r.error_code, 0, "{:?}", r.error_message);
            let mut values: Vec<(String, f64)> = r
                .entries
                .unwrap_or_default()
                .iter()
                .flat_map(|e| &e.values)
                .map(|v| (v.key.to_string(), v.value))
                .collect();
            values.sort_by(|a, b| a.0.cmp(&b.0));
            values
        }
        other => panic!("unexpected {other:?}"),
    }
}

/// Produces `batch` on `conn`; returns the throttle time answered and how long the answer took.
fn produce(conn: &mut TcpStream, batch: &bytes::Bytes) -> (i32, Duration) {
    let request = ProduceRequest::default()
        .with_acks(-1)
        .with_timeout_ms(30_000)
        .with_topic_data(vec![
            produce_request::TopicProduceData::default()
                .with_name(TopicName(s(TOPIC)))
                .with_partition_data(vec![
                    produce_request::PartitionProduceData::default()
                        .with_index(0)
                        .with_records(Some(batch.clone())),
                ]),
        ]);
    let started = Instant::now();
    match kafka_call_on(conn, ApiKey::Produce, 9, RequestKind::Produce(request)) {
        ResponseKind::Produce(r) => {
            let p = &r.responses[0].partition_responses[0];
            assert_eq!(p.error_code, 0, "{:?}", p.error_message);
            (r.throttle_time_ms, started.elapsed())
        }
        other => panic!("unexpected {other:?}"),
    }
}

/// Fetches partition 0 from `offset`; returns the record bytes, the throttle time answered and
/// how long the answer took.
fn fetch(conn: &mut TcpStream, offset: i64) -> (usize, i32, Duration) {
    let request = FetchRequest::default()
        .with_max_wait_ms(0)
        .with_max_bytes(64 << 20)
        .with_topics(vec![
            fetch_request::FetchTopic::default()
                .with_topic(TopicName(s(TOPIC)))
                .with_partitions(vec![
                    fetch_request::FetchPartition::default()
                        .with_partition(0)
                        .with_fetch_offset(offset)
                        .with_partition_max_bytes(64 << 20),
                ]),
        ]);
    let started = Instant::now();
    match kafka_call_on(conn, ApiKey::Fetch, 11, RequestKind::Fetch(request)) {
        ResponseKind::Fetch(r) => {
            let p = &r.responses[0].partitions[0];
            assert_eq!(p.error_code, 0);
            (
                p.records.as_ref().map_or(0, |b| b.len()),
                r.throttle_time_ms,
                started.elapsed(),
            )
        }
        other => panic!("unexpected {other:?}"),
    }
}

#[test]
fn client_quotas_throttle_producers_and_consumers_and_survive_a_restart() {
    let server = Server::start_fresh();
    server.ok(&["topic", "create", TOPIC], "");
    let port = port(&server);

    // Each entry stands or falls on its own; a refusal says what to fix.
    let results = alter(
        port,
        vec![
            entry(
                &[("client-id", Some("test"))],
                &[
                    ("producer_byte_rate", Some(RATE)),
                    ("consumer_byte_rate", Some(RATE)),
                ],
            ),
            entry(
                &[("ip", Some("127.0.0.1"))],
                &[("connection_creation_rate", Some(5.0))],
            ),
            entry(&[("user", None)], &[("producer_byte_rate", Some(-1.0))]),
            entry(&[("user", Some("alice"))], &[("no_such_quota", Some(1.0))]),
        ],
    );
    assert_eq!(results[0], (0, String::new()));
    for (code, message) in &results[1..] {
        assert_eq!(*code, 42, "INVALID_REQUEST: {message}");
        assert!(!message.is_empty());
    }
    assert_eq!(
        describe_test_client(port),
        vec![
            ("consumer_byte_rate".to_owned(), RATE),
            ("producer_byte_rate".to_owned(), RATE)
        ]
    );

    // 256 KiB batches: the first ~1 MB is the burst the 10 s measuring span allows; past it,
    // each batch is answered with the time 100 KB/s needs to cover the excess.
    let mut batch = BytesMut::new();
    let record = ProducerRecord {
        key: None,
        value: Some(bytes::Bytes::from(vec![b'q'; 4096])),
        headers: Vec::new(),
        timestamp_ms: 0,
    };
    encode_batch(&mut batch, &vec![record; 64]);
    let batch = batch.freeze();
    let mut conn = kafka_connect(port);
    let mut throttled = None;
    for _ in 0..8 {
        let (throttle_ms, _) = produce(&mut conn, &batch);
        if throttle_ms > 0 {
            throttled = Some(throttle_ms);
            break;
        }
    }
    let throttle_ms = throttled.expect("a producer 2 MB over its 100 KB/s quota is throttled");
    assert!(throttle_ms > 100, "{throttle_ms} ms");
    // The connection reads nothing more until the throttle has passed.
    let (next_ms, took) = produce(&mut conn, &batch);
    assert!(
        took >= Duration::from_millis(throttle_ms as u64 * 9 / 10),
        "the next request was answered after {took:?}, within the {throttle_ms} ms throttle"
    );
    assert!(next_ms > 0, "still over the quota");
    assert!(
        server.metric("sluice_client_quota_throttled_total{key=\"producer_byte_rate\"}") >= 2.0
    );
    assert_eq!(
        server.metric("sluice_client_quota{entity=\"client-id=test\",key=\"producer_byte_rate\"}"),
        RATE
    );

    // A consumer fetching it all back is throttled the same way.
    let mut consumer = kafka_connect(port);
    let (bytes, fetch_throttle, _) = fetch(&mut consumer, 0);
    assert!(bytes > 1_000_000, "{bytes} bytes fetched");
    assert!(
        fetch_throttle > 0,
        "fetching {bytes} bytes at 100 KB/s is throttled"
    );
    assert!(
        server.metric("sluice_client_quota_throttled_total{key=\"consumer_byte_rate\"}") >= 1.0
    );
    drop((conn, consumer));

    // The quotas are durable.
    let (_, dir) = server.stop();
    let server = Server::start(dir);
    let port = self::port(&server);
    assert_eq!(describe_test_client(port).len(), 2);

    // Removed, they no longer throttle (a new broker has no usage yet either way, so remove
    // and check with a client well over the old quota).
    let results = alter(
        port,
        vec![entry(
            &[("client-id", Some("test"))],
            &[("producer_byte_rate", None), ("consumer_byte_rate", None)],
        )],
    );
    assert_eq!(results, vec![(0, String::new())]);
    assert!(describe_test_client(port).is_empty());
    let mut conn = kafka_connect(port);
    for _ in 0..8 {
        assert_eq!(produce(&mut conn, &batch).0, 0);
    }
}
