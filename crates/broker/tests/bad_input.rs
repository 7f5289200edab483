//! Bad client input never panics the broker: random and mutated request frames go through the
//! decoder and every handler; each gets a response, an error code, or a decode error.

use std::sync::Arc;
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use proptest::prelude::*;
use sluice_broker::{Broker, BrokerConfig};
use sluice_log::batch::build::{Record, batch};
use sluice_protocol::codec::{self, decode_request, encode_request};
use sluice_protocol::kafka_protocol::messages::*;
use sluice_protocol::kafka_protocol::protocol::StrBytes;

fn name(s: &str) -> TopicName {
    TopicName(StrBytes::from_string(s.to_owned()))
}

/// Valid requests of every supported API, as frame bodies (no size prefix).
fn valid_requests() -> Vec<Bytes> {
    let records = Bytes::from(batch(
        1,
        &[Record {
            timestamp_delta: 0,
            key: Some(b"k"),
            value: Some(b"v"),
        }],
    ));
    let bodies: Vec<(ApiKey, i16, RequestKind)> = vec![
        (
            ApiKey::ApiVersions,
            3,
            RequestKind::ApiVersions(ApiVersionsRequest::default()),
        ),
        (
            ApiKey::Metadata,
            12,
            RequestKind::Metadata(MetadataRequest::default().with_topics(Some(vec![
                metadata_request::MetadataRequestTopic::default().with_name(Some(name("t"))),
            ]))),
        ),
        (
            ApiKey::CreateTopics,
            7,
            RequestKind::CreateTopics(CreateTopicsRequest::default().with_topics(vec![
                create_topics_request::CreatableTopic::default()
                    .with_name(name("t2"))
                    .with_num_partitions(2)
                    .with_replication_factor(1),
            ])),
        ),
        (
            ApiKey::Produce,
            9,
            RequestKind::Produce(
                ProduceRequest::default()
                    .with_acks(-1)
                    .with_timeout_ms(1000)
                    .with_topic_data(vec![
                        produce_request::TopicProduceData::default()
                            .with_name(name("t"))
                            .with_partition_data(vec![
                                produce_request::PartitionProduceData::default()
                                    .with_index(0)
                                    .with_records(Some(records)),
                            ]),
                    ]),
            ),
        ),
        (
            ApiKey::Fetch,
            12,
            RequestKind::Fetch(
                FetchRequest::default()
                    .with_max_wait_ms(0)
                    .with_max_bytes(1 << 20)
                    .with_topics(vec![
                        fetch_request::FetchTopic::default()
                            .with_topic(name("t"))
                            .with_partitions(vec![
                                fetch_request::FetchPartition::default()
                                    .with_partition(0)
                                    .with_fetch_offset(0)
                                    .with_partition_max_bytes(1 << 20),
                            ]),
                    ]),
            ),
        ),
        (
            ApiKey::ListOffsets,
            7,
            RequestKind::ListOffsets(ListOffsetsRequest::default().with_topics(vec![
                list_offsets_request::ListOffsetsTopic::default()
                    .with_name(name("t"))
                    .with_partitions(vec![
                        list_offsets_request::ListOffsetsPartition::default().with_timestamp(5),
                    ]),
            ])),
        ),
        (
            ApiKey::DescribeConfigs,
            4,
            RequestKind::DescribeConfigs(DescribeConfigsRequest::default().with_resources(vec![
                describe_configs_request::DescribeConfigsResource::default()
                    .with_resource_type(2)
                    .with_resource_name(StrBytes::from_static_str("t")),
            ])),
        ),
        (
            ApiKey::InitProducerId,
            4,
            RequestKind::InitProducerId(
                InitProducerIdRequest::default()
                    .with_producer_id(ProducerId(-1))
                    .with_producer_epoch(-1),
            ),
        ),
        (
            ApiKey::DescribeCluster,
            1,
            RequestKind::DescribeCluster(DescribeClusterRequest::default()),
        ),
    ];
    bodies
        .into_iter()
        .map(|(api, version, body)| {
            let mut out = BytesMut::new();
            encode_request(&mut out, api, version, 1, "fuzz", &body).expect("encode");
            Bytes::copy_from_slice(&out[4..])
        })
        .collect()
}

/// Decodes and handles one frame; returns whether a response was encoded.
fn run(broker: &Arc<Broker>, rt: &tokio::runtime::Runtime, frame: Bytes) -> bool {
    let Ok(request) = decode_request(frame) else {
        return false;
    };
    let (api, version, id) = (request.api_key, request.api_version, request.correlation_id);
    let handling = broker.handle(request);
    match rt.block_on(async { tokio::time::timeout(Duration::from_secs(5), handling).await }) {
        Ok(Some(body)) => {
            let mut out = BytesMut::new();
            codec::encode_response(&mut out, api, version, id, &body)
                .expect("every response encodes");
            true
        }
        _ => false,
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(400))]

    #[test]
    fn mutated_requests_never_panic(
        which in 0usize..9,
        flips in prop::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 0..6),
        cut in any::<prop::sample::Index>(),
        truncate in any::<bool>(),
    ) {
        let dir = tempfile::tempdir().unwrap();
        let broker = Arc::new(Broker::open(BrokerConfig::new(dir.path())).unwrap());
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        let requests = valid_requests();
        // The valid request itself first (creates topic "t" through Metadata).
        run(&broker, &rt, requests[1].clone());
        let mut frame = requests[which].to_vec();
        for (at, byte) in flips {
            let i = at.index(frame.len());
            frame[i] ^= byte;
        }
        if truncate {
            frame.truncate(cut.index(frame.len() + 1));
        }
        run(&broker, &rt, Bytes::from(frame));
    }

    #[test]
    fn random_bytes_never_panic(bytes in prop::collection::vec(any::<u8>(), 0..300)) {
        let dir = tempfile::tempdir().unwrap();
        let broker = Arc::new(Broker::open(BrokerConfig::new(dir.path())).unwrap());
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        run(&broker, &rt, Bytes::from(bytes));
    }
}

#[test]
fn every_valid_request_is_answered() {
    let dir = tempfile::tempdir().unwrap();
    let broker = Arc::new(Broker::open(BrokerConfig::new(dir.path())).unwrap());
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    for (i, frame) in valid_requests().into_iter().enumerate() {
        assert!(run(&broker, &rt, frame), "request {i} got no response");
    }
    assert!(broker.topics().get("t").is_some() && broker.topics().get("t2").is_some());
}
