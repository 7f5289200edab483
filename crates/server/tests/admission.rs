//! Admission: a Produce that waited in the broker past its own `timeout_ms` before it could
//! start has been given up on by its client; it is answered REQUEST_TIMED_OUT and not
//! appended. Here the wait is a client quota's throttle: with one request in flight per
//! connection, a produce pipelined behind a throttled one sits in the connection's buffer
//! until the throttle has passed.

use std::io::{Read, Write};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::BytesMut;
use sluice_broker::{Broker, BrokerConfig, TopicConfig};
use sluice_protocol::codec;
use sluice_protocol::kafka_protocol::messages::{
    ApiKey, ProduceRequest, RequestKind, ResponseKind, TopicName, produce_request,
};
use sluice_protocol::kafka_protocol::protocol::StrBytes;
use sluice_protocol::records::{ProducerRecord, encode_batch};
use sluice_security::{QuotaEntity, QuotaOp};
use sluice_server::limits::ConnectionLimits;
use sluice_server::{Endpoint, ServerConfig};

const REQUEST_TIMED_OUT: i16 = 7;

fn produce_frame(batch: &bytes::Bytes, timeout_ms: i32, correlation_id: i32) -> BytesMut {
    let request = ProduceRequest::default()
        .with_acks(-1)
        .with_timeout_ms(timeout_ms)
        .with_topic_data(vec![
            produce_request::TopicProduceData::default()
                .with_name(TopicName(StrBytes::from_static_str("t")))
                .with_partition_data(vec![
                    produce_request::PartitionProduceData::default()
                        .with_index(0)
                        .with_records(Some(batch.clone())),
                ]),
        ]);
    let mut out = BytesMut::new();
    codec::encode_request(
        &mut out,
        ApiKey::Produce,
        9,
        correlation_id,
        "admission",
        &RequestKind::Produce(request),
    )
    .unwrap();
    out
}

/// Reads one response: (error code of the partition, throttle time).
fn read_produce(stream: &mut std::net::TcpStream) -> (i16, i32) {
    let mut size = [0u8; 4];
    stream.read_exact(&mut size).unwrap();
    let mut frame = vec![0u8; i32::from_be_bytes(size) as usize];
    stream.read_exact(&mut frame).unwrap();
    match codec::decode_response(frame.into(), ApiKey::Produce, 9)
        .unwrap()
        .1
    {
        ResponseKind::Produce(r) => (
            r.responses[0].partition_responses[0].error_code,
            r.throttle_time_ms,
        ),
        other => panic!("unexpected {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_produce_that_waited_past_its_timeout_is_not_appended() {
    let dir = tempfile::tempdir().unwrap();
    let broker = Arc::new(Broker::open(BrokerConfig::new(dir.path())).unwrap());
    broker.create_topic("t", 1, TopicConfig::default()).unwrap();
    // 1 KB/s for client id "admission": a 2 KB produce past the 10 KB burst is throttled.
    let entity = QuotaEntity::from_parts([("client-id", Some("admission"))]);
    let op = QuotaOp {
        key: "producer_byte_rate".to_owned(),
        value: 1000.0,
        remove: false,
    };
    broker
        .quotas()
        .alter(vec![(entity, vec![op])], false)
        .unwrap();

    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let (stop, stopped) = tokio::sync::watch::channel(false);
    let server = tokio::spawn(sluice_server::serve(
        listener,
        Endpoint::plaintext(),
        ConnectionLimits::new(16, 16),
        Arc::clone(&broker),
        ServerConfig {
            in_flight_per_connection: 1,
            ..ServerConfig::default()
        },
        stopped,
    ));

    let client = tokio::task::spawn_blocking(move || {
        let mut batch = BytesMut::new();
        let record = ProducerRecord {
            key: None,
            value: Some(bytes::Bytes::from(vec![b'a'; 2000])),
            headers: Vec::new(),
            timestamp_ms: 0,
        };
        encode_batch(&mut batch, &[record]);
        let batch = batch.freeze();
        let mut stream = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
        stream
            .set_read_timeout(Some(Duration::from_secs(30)))
            .unwrap();
        // Over the quota: throttled.
        let mut throttle = 0;
        let mut acknowledged = 0;
        for n in 0..20 {
            stream.write_all(&produce_frame(&batch, 30_000, n)).unwrap();
            let (code, t) = read_produce(&mut stream);
            assert_eq!(code, 0);
            acknowledged += 1;
            if t > 0 {
                throttle = t;
                break;
            }
        }
        assert!(throttle >= 200, "throttled {throttle} ms");
        // Wait the throttle out, then two produces in one write: the first is throttled again;
        // the second, with a timeout of a tenth of that, waits behind it and then out the
        // throttle.
        std::thread::sleep(Duration::from_millis(throttle as u64 + 100));
        let mut both = produce_frame(&batch, 30_000, 100);
        both.extend_from_slice(&produce_frame(&batch, throttle / 10, 101));
        let started = Instant::now();
        stream.write_all(&both).unwrap();
        let (first, again) = read_produce(&mut stream);
        assert_eq!(first, 0);
        acknowledged += 1;
        assert!(again > 0, "the first is throttled");
        let (second, _) = read_produce(&mut stream);
        assert!(started.elapsed() >= Duration::from_millis(again as u64 * 9 / 10));
        (acknowledged, second)
    })
    .await
    .unwrap();
    let (acknowledged, second) = client;
    assert_eq!(second, REQUEST_TIMED_OUT);
    let metrics = sluice_broker::metrics::render(&broker, &[]);
    let _ = stop.send(true);
    server.await.unwrap();
    assert!(
        metrics.contains("sluice_kafka_produce_expired_total 1\n"),
        "{metrics}"
    );
    // One record per acknowledged produce: the expired one appended nothing.
    assert!(
        metrics.contains(&format!("sluice_records_in_total {acknowledged}\n")),
        "{acknowledged} acknowledged:\n{metrics}"
    );
}
