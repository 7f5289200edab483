//! Each kind of bad input gets its Kafka error code, and the data stays intact.

use std::sync::Arc;

use bytes::Bytes;
use sluice_batch::{BatchBuilder, RecordRef, attributes};
use sluice_broker::{Broker, BrokerConfig};
use sluice_log::batch::build::{Record, batch};
use sluice_protocol::codec::Request;
use sluice_protocol::kafka_protocol::ResponseError;
use sluice_protocol::kafka_protocol::messages::*;
use sluice_protocol::kafka_protocol::protocol::StrBytes;

fn name(s: &str) -> TopicName {
    TopicName(StrBytes::from_string(s.to_owned()))
}

struct Fixture {
    _dir: tempfile::TempDir,
    broker: Arc<Broker>,
    rt: tokio::runtime::Runtime,
}

impl Fixture {
    fn new() -> Fixture {
        let dir = tempfile::tempdir().unwrap();
        let mut config = BrokerConfig::new(dir.path());
        config.max_message_bytes = 10_000;
        let broker = Arc::new(Broker::open(config).unwrap());
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let f = Fixture {
            _dir: dir,
            broker,
            rt,
        };
        let r = f.create("orders", 2);
        assert_eq!(r, 0);
        f
    }

    fn call(&self, api_key: ApiKey, api_version: i16, body: RequestKind) -> Option<ResponseKind> {
        let handling = self.broker.handle(Request {
            api_key,
            api_version,
            correlation_id: 1,
            client_id: None,
            body,
        });
        self.rt.block_on(handling)
    }

    fn create(&self, topic: &str, partitions: i32) -> i16 {
        let req = CreateTopicsRequest::default().with_topics(vec![
            create_topics_request::CreatableTopic::default()
                .with_name(name(topic))
                .with_num_partitions(partitions)
                .with_replication_factor(1),
        ]);
        match self.call(ApiKey::CreateTopics, 7, RequestKind::CreateTopics(req)) {
            Some(ResponseKind::CreateTopics(r)) => r.topics[0].error_code,
            other => panic!("{other:?}"),
        }
    }

    /// Produces `records` to `topic`/`partition`; returns (error code, base offset).
    fn produce(&self, topic: &str, partition: i32, acks: i16, records: Vec<u8>) -> (i16, i64) {
        let req = ProduceRequest::default()
            .with_acks(acks)
            .with_timeout_ms(5000)
            .with_topic_data(vec![
                produce_request::TopicProduceData::default()
                    .with_name(name(topic))
                    .with_partition_data(vec![
                        produce_request::PartitionProduceData::default()
                            .with_index(partition)
                            .with_records(Some(Bytes::from(records))),
                    ]),
            ]);
        match self.call(ApiKey::Produce, 9, RequestKind::Produce(req)) {
            Some(ResponseKind::Produce(r)) => {
                let p = &r.responses[0].partition_responses[0];
                (p.error_code, p.base_offset)
            }
            other => panic!("{other:?}"),
        }
    }

    fn fetch(&self, topic: &str, partition: i32, offset: i64) -> fetch_response::PartitionData {
        let req = FetchRequest::default()
            .with_max_wait_ms(0)
            .with_max_bytes(1 << 20)
            .with_topics(vec![
                fetch_request::FetchTopic::default()
                    .with_topic(name(topic))
                    .with_partitions(vec![
                        fetch_request::FetchPartition::default()
                            .with_partition(partition)
                            .with_fetch_offset(offset)
                            .with_partition_max_bytes(1 << 20),
                    ]),
            ]);
        match self.call(ApiKey::Fetch, 12, RequestKind::Fetch(req)) {
            Some(ResponseKind::Fetch(r)) => r.responses[0].partitions[0].clone(),
            other => panic!("{other:?}"),
        }
    }
}

fn records(n: usize, value_len: usize) -> Vec<u8> {
    let value = vec![b'x'; value_len];
    let recs: Vec<Record<'_>> = (0..n)
        .map(|_| Record {
            timestamp_delta: 0,
            key: None,
            value: Some(&value),
        })
        .collect();
    batch(1_700_000_000_000, &recs)
}

/// An idempotent batch from `producer_id`/`epoch` starting at `seq`, with extra attribute
/// `bits` (such as the transactional one).
fn idempotent_with(producer_id: i64, epoch: i16, seq: i32, n: usize, bits: i16) -> Vec<u8> {
    let value = [b'x'; 10];
    let mut out = Vec::new();
    let mut builder = BatchBuilder::with_base_timestamp(&mut out, 1_700_000_000_000)
        .with_producer(producer_id, epoch, seq)
        .with_attributes(bits);
    for _ in 0..n {
        builder.push(&RecordRef {
            key: None,
            value: Some(&value),
            headers: &[],
            timestamp_ms: 1_700_000_000_000,
        });
    }
    builder.finish();
    out
}

/// An idempotent batch from `producer_id`/`epoch` starting at `seq`.
fn idempotent(producer_id: i64, epoch: i16, seq: i32, n: usize) -> Vec<u8> {
    idempotent_with(producer_id, epoch, seq, n, 0)
}

#[test]
fn produce_errors_have_their_kafka_codes_and_write_nothing() {
    let f = Fixture::new();
    assert_eq!(f.produce("orders", 0, -1, records(3, 10)), (0, 0));
    let mut bad_crc = records(3, 10);
    let n = bad_crc.len();
    bad_crc[n - 1] ^= 1;
    let mut bad_magic = records(1, 10);
    bad_magic[16] = 1;
    let cases = [
        (
            "unknown partition",
            "orders",
            7,
            -1,
            records(1, 10),
            ResponseError::UnknownTopicOrPartition,
        ),
        (
            "unknown topic",
            "nope",
            0,
            -1,
            records(1, 10),
            ResponseError::UnknownTopicOrPartition,
        ),
        (
            "bad crc",
            "orders",
            0,
            -1,
            bad_crc,
            ResponseError::CorruptMessage,
        ),
        (
            "old magic",
            "orders",
            0,
            -1,
            bad_magic,
            ResponseError::UnsupportedForMessageFormat,
        ),
        (
            "over max.message.bytes",
            "orders",
            0,
            -1,
            records(2, 6000),
            ResponseError::MessageTooLarge,
        ),
        (
            "acks=2",
            "orders",
            0,
            2,
            records(1, 10),
            ResponseError::InvalidRequiredAcks,
        ),
        (
            "empty records",
            "orders",
            0,
            -1,
            Vec::new(),
            ResponseError::InvalidRecord,
        ),
    ];
    for (what, topic, partition, acks, data, want) in cases {
        let (code, _) = f.produce(topic, partition, acks, data);
        assert_eq!(code, want.code(), "{what}");
    }
    // Nothing of the refused batches was written.
    let p = f.fetch("orders", 0, 0);
    assert_eq!(p.high_watermark, 3);
    assert_eq!(f.produce("orders", 0, 1, records(1, 10)), (0, 3));
}

#[test]
fn acks_zero_gets_no_response_but_is_stored() {
    let f = Fixture::new();
    let req = ProduceRequest::default().with_acks(0).with_topic_data(vec![
        produce_request::TopicProduceData::default()
            .with_name(name("orders"))
            .with_partition_data(vec![
                produce_request::PartitionProduceData::default()
                    .with_index(1)
                    .with_records(Some(Bytes::from(records(2, 10)))),
            ]),
    ]);
    assert!(
        f.call(ApiKey::Produce, 9, RequestKind::Produce(req))
            .is_none()
    );
    // Durable shortly after (the next sync round).
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
    while f.fetch("orders", 1, 0).high_watermark < 2 {
        assert!(std::time::Instant::now() < deadline);
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
}

#[test]
fn admin_errors_have_their_kafka_codes() {
    let f = Fixture::new();
    assert_eq!(
        f.create("orders", 1),
        ResponseError::TopicAlreadyExists.code()
    );
    assert_eq!(
        f.create("bad/name", 1),
        ResponseError::InvalidTopicException.code()
    );
    assert_eq!(f.create("x", 0), ResponseError::InvalidPartitions.code());
    let req = CreateTopicsRequest::default().with_topics(vec![
        create_topics_request::CreatableTopic::default()
            .with_name(name("rf3"))
            .with_num_partitions(1)
            .with_replication_factor(3),
    ]);
    match f.call(ApiKey::CreateTopics, 7, RequestKind::CreateTopics(req)) {
        Some(ResponseKind::CreateTopics(r)) => {
            assert_eq!(
                r.topics[0].error_code,
                ResponseError::InvalidReplicationFactor.code()
            );
            assert!(
                r.topics[0]
                    .error_message
                    .as_deref()
                    .unwrap()
                    .contains("one copy")
            );
        }
        other => panic!("{other:?}"),
    }
    let req = CreateTopicsRequest::default().with_topics(vec![
        create_topics_request::CreatableTopic::default()
            .with_name(name("cfg"))
            .with_num_partitions(1)
            .with_replication_factor(1)
            .with_configs(vec![
                create_topics_request::CreatableTopicConfig::default()
                    .with_name(StrBytes::from_static_str("retention.ms"))
                    .with_value(Some(StrBytes::from_static_str("soon"))),
            ]),
    ]);
    match f.call(ApiKey::CreateTopics, 7, RequestKind::CreateTopics(req)) {
        Some(ResponseKind::CreateTopics(r)) => {
            assert_eq!(r.topics[0].error_code, ResponseError::InvalidConfig.code())
        }
        other => panic!("{other:?}"),
    }
    assert!(f.broker.topics().get("cfg").is_none() && f.broker.topics().get("rf3").is_none());
}

#[test]
fn fetch_out_of_range_and_unknown_partition() {
    let f = Fixture::new();
    f.produce("orders", 0, -1, records(3, 10));
    let p = f.fetch("orders", 0, 99);
    assert_eq!(p.error_code, ResponseError::OffsetOutOfRange.code());
    assert_eq!((p.high_watermark, p.log_start_offset), (3, 0));
    assert_eq!(
        f.fetch("orders", 5, 0).error_code,
        ResponseError::UnknownTopicOrPartition.code()
    );
    // At the high watermark: no error, no records.
    let p = f.fetch("orders", 0, 3);
    assert_eq!(p.error_code, 0);
    assert!(p.records.unwrap().is_empty());
}

#[test]
fn idempotent_producer_duplicates_gaps_and_fencing() {
    let f = Fixture::new();
    let init = InitProducerIdRequest::default()
        .with_producer_id(ProducerId(-1))
        .with_producer_epoch(-1)
        .with_transaction_timeout_ms(60_000);
    let pid = match f.call(ApiKey::InitProducerId, 4, RequestKind::InitProducerId(init)) {
        Some(ResponseKind::InitProducerId(r)) => {
            assert_eq!((r.error_code, r.producer_epoch), (0, 0));
            r.producer_id.0
        }
        other => panic!("{other:?}"),
    };
    assert_eq!(f.produce("orders", 0, -1, idempotent(pid, 0, 0, 3)), (0, 0));
    assert_eq!(f.produce("orders", 0, -1, idempotent(pid, 0, 3, 2)), (0, 3));
    // A retry of either batch gets its original offset and appends nothing.
    assert_eq!(f.produce("orders", 0, -1, idempotent(pid, 0, 0, 3)), (0, 0));
    assert_eq!(f.produce("orders", 0, -1, idempotent(pid, 0, 3, 2)), (0, 3));
    assert_eq!(f.fetch("orders", 0, 0).high_watermark, 5);
    // A gap in sequences is refused.
    let (code, _) = f.produce("orders", 0, -1, idempotent(pid, 0, 9, 1));
    assert_eq!(code, ResponseError::OutOfOrderSequenceNumber.code());
    // A new epoch fences the old one.
    assert_eq!(f.produce("orders", 0, -1, idempotent(pid, 1, 0, 1)), (0, 5));
    let (code, _) = f.produce("orders", 0, -1, idempotent(pid, 0, 5, 1));
    assert_eq!(code, ResponseError::InvalidProducerEpoch.code());
    // An unknown producer must start at sequence 0.
    let (code, _) = f.produce("orders", 1, -1, idempotent(pid + 1000, 0, 4, 1));
    assert_eq!(code, ResponseError::UnknownProducerId.code());
}

#[test]
fn idempotent_state_survives_restart() {
    let dir = tempfile::tempdir().unwrap();
    let open = || {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        (
            Arc::new(Broker::open(BrokerConfig::new(dir.path())).unwrap()),
            rt,
        )
    };
    let produce = |broker: &Arc<Broker>, rt: &tokio::runtime::Runtime, data: Vec<u8>| {
        let req = ProduceRequest::default()
            .with_acks(-1)
            .with_topic_data(vec![
                produce_request::TopicProduceData::default()
                    .with_name(name("t"))
                    .with_partition_data(vec![
                        produce_request::PartitionProduceData::default()
                            .with_index(0)
                            .with_records(Some(Bytes::from(data))),
                    ]),
            ]);
        let handling = broker.handle(Request {
            api_key: ApiKey::Produce,
            api_version: 9,
            correlation_id: 1,
            client_id: None,
            body: RequestKind::Produce(req),
        });
        match rt.block_on(handling) {
            Some(ResponseKind::Produce(r)) => {
                let p = &r.responses[0].partition_responses[0];
                (p.error_code, p.base_offset)
            }
            other => panic!("{other:?}"),
        }
    };
    for clean in [true, false] {
        let (broker, rt) = open();
        if broker.topics().get("t").is_none() {
            let req = CreateTopicsRequest::default().with_topics(vec![
                create_topics_request::CreatableTopic::default()
                    .with_name(name("t"))
                    .with_num_partitions(1)
                    .with_replication_factor(1),
            ]);
            let handling = broker.handle(Request {
                api_key: ApiKey::CreateTopics,
                api_version: 7,
                correlation_id: 1,
                client_id: None,
                body: RequestKind::CreateTopics(req),
            });
            assert!(rt.block_on(handling).is_some());
        }
        drop((broker, rt));
        let (broker, rt) = open();
        let base = if clean { 0 } else { 2 };
        assert_eq!(
            produce(&broker, &rt, idempotent(42, 0, base as i32, 2)),
            (0, base)
        );
        if clean {
            broker.shutdown();
        }
        drop((broker, rt));
        // After a restart (clean: from the snapshot; unclean: by replaying the log), the retry
        // is still recognised as a duplicate.
        let (broker, rt) = open();
        assert_eq!(
            produce(&broker, &rt, idempotent(42, 0, base as i32, 2)),
            (0, base)
        );
        let (code, _) = produce(&broker, &rt, idempotent(42, 0, base as i32 + 5, 1));
        assert_eq!(code, ResponseError::OutOfOrderSequenceNumber.code());
        broker.shutdown();
    }
}

/// Asserts an answer's (error code, error message): the code exactly, the message by a part
/// that tells the client what was wrong.
fn assert_refused(what: &str, got: (i16, Option<&str>), want: ResponseError, says: &str) {
    assert_eq!(got.0, want.code(), "{what}: code");
    let message = got.1.unwrap_or_default();
    assert!(message.contains(says), "{what}: message {message:?}");
}

#[test]
fn every_refusal_keeps_its_code_and_message() {
    let f = Fixture::new();
    let produce = |acks: i16, topic: &str, partition: i32, data: Vec<u8>| {
        let req = ProduceRequest::default()
            .with_acks(acks)
            .with_topic_data(vec![
                produce_request::TopicProduceData::default()
                    .with_name(name(topic))
                    .with_partition_data(vec![
                        produce_request::PartitionProduceData::default()
                            .with_index(partition)
                            .with_records(Some(Bytes::from(data))),
                    ]),
            ]);
        match f.call(ApiKey::Produce, 9, RequestKind::Produce(req)) {
            Some(ResponseKind::Produce(r)) => {
                let p = r.responses[0].partition_responses[0].clone();
                (p.error_code, p.error_message.map(|m| m.to_string()))
            }
            other => panic!("{other:?}"),
        }
    };
    let ask = |what: &str, acks, topic, partition, data, want, says: &str| {
        let (code, message) = produce(acks, topic, partition, data);
        assert_refused(what, (code, message.as_deref()), want, says);
    };
    use ResponseError as E;
    ask(
        "acks",
        5,
        "nope",
        0,
        records(1, 10),
        E::InvalidRequiredAcks,
        "got 5",
    );
    ask(
        "topic",
        1,
        "nope",
        0,
        records(1, 10),
        E::UnknownTopicOrPartition,
        "unknown topic 'nope'",
    );
    ask(
        "partition",
        -1,
        "orders",
        9,
        records(1, 10),
        E::UnknownTopicOrPartition,
        "no partition 9",
    );
    ask(
        "size",
        -1,
        "orders",
        0,
        records(2, 6000),
        E::MessageTooLarge,
        "max.message.bytes (10000)",
    );
    ask(
        "crc",
        -1,
        "orders",
        0,
        {
            let mut b = records(1, 10);
            b[30] ^= 1;
            b
        },
        E::CorruptMessage,
        "CRC",
    );
    let txn = idempotent_with(77, 0, 0, 1, attributes::TRANSACTIONAL);
    ask(
        "transactional",
        -1,
        "orders",
        0,
        txn,
        E::InvalidRecord,
        "transactional",
    );
    let mut mixed = idempotent(77, 0, 0, 1);
    mixed.extend(idempotent(78, 0, 1, 1));
    ask(
        "mixed",
        -1,
        "orders",
        0,
        mixed,
        E::InvalidRecord,
        "same producer",
    );
    let mut gap = idempotent(77, 0, 0, 1);
    gap.extend(idempotent(77, 0, 5, 1));
    ask(
        "gap",
        -1,
        "orders",
        0,
        gap,
        E::OutOfOrderSequenceNumber,
        "not consecutive: 5 after 0",
    );
    ask(
        "unknown producer",
        -1,
        "orders",
        0,
        idempotent(77, 0, 4, 1),
        E::UnknownProducerId,
        "starts at sequence 4",
    );
    assert_eq!(produce(-1, "orders", 0, idempotent(77, 1, 0, 2)), (0, None));
    ask(
        "order",
        -1,
        "orders",
        0,
        idempotent(77, 1, 3, 1),
        E::OutOfOrderSequenceNumber,
        "expected sequence 2, got 3",
    );
    ask(
        "new epoch",
        -1,
        "orders",
        0,
        idempotent(77, 2, 3, 1),
        E::OutOfOrderSequenceNumber,
        "must start at sequence 0",
    );
    ask(
        "fenced",
        -1,
        "orders",
        0,
        idempotent(77, 0, 0, 1),
        E::InvalidProducerEpoch,
        "fenced by epoch 1",
    );

    // InitProducerId: transactions are not supported.
    let init = InitProducerIdRequest::default()
        .with_transactional_id(Some(TransactionalId(StrBytes::from_static_str("t"))))
        .with_producer_id(ProducerId(-1))
        .with_producer_epoch(-1);
    match f.call(ApiKey::InitProducerId, 4, RequestKind::InitProducerId(init)) {
        Some(ResponseKind::InitProducerId(r)) => {
            assert_eq!(r.error_code, E::TransactionalIdAuthorizationFailed.code())
        }
        other => panic!("{other:?}"),
    }

    // CreateTopics and CreatePartitions: replica assignments are not supported.
    let req = CreateTopicsRequest::default().with_topics(vec![
        create_topics_request::CreatableTopic::default()
            .with_name(name("placed"))
            .with_num_partitions(-1)
            .with_replication_factor(-1)
            .with_assignments(vec![
                create_topics_request::CreatableReplicaAssignment::default(),
            ]),
    ]);
    match f.call(ApiKey::CreateTopics, 7, RequestKind::CreateTopics(req)) {
        Some(ResponseKind::CreateTopics(r)) => {
            let t = &r.topics[0];
            let got = (t.error_code, t.error_message.as_deref());
            assert_refused(
                "create placed",
                got,
                E::InvalidReplicaAssignment,
                "manual replica",
            );
            assert_eq!((t.num_partitions, t.replication_factor), (-1, -1));
        }
        other => panic!("{other:?}"),
    }
    let grow = |topic: &str, count: i32, placed: bool| {
        let t = create_partitions_request::CreatePartitionsTopic::default()
            .with_name(name(topic))
            .with_count(count)
            .with_assignments(placed.then(Vec::new));
        let req = CreatePartitionsRequest::default().with_topics(vec![t]);
        match f.call(
            ApiKey::CreatePartitions,
            3,
            RequestKind::CreatePartitions(req),
        ) {
            Some(ResponseKind::CreatePartitions(r)) => {
                let t = r.results[0].clone();
                (t.error_code, t.error_message.map(|m| m.to_string()))
            }
            other => panic!("{other:?}"),
        }
    };
    let (code, message) = grow("orders", 3, true);
    assert_refused(
        "grow placed",
        (code, message.as_deref()),
        E::InvalidReplicaAssignment,
        "manual replica",
    );
    let (code, message) = grow("nope", 3, false);
    assert_refused(
        "grow unknown",
        (code, message.as_deref()),
        E::UnknownTopicOrPartition,
        "unknown topic 'nope'",
    );
    let (code, message) = grow("orders", 1, false);
    assert_refused(
        "shrink",
        (code, message.as_deref()),
        E::InvalidPartitions,
        "",
    );

    // DescribeConfigs: unknown topic, unknown resource type.
    let describe = |resource_type: i8, resource: &str| {
        let req = DescribeConfigsRequest::default().with_resources(vec![
            describe_configs_request::DescribeConfigsResource::default()
                .with_resource_type(resource_type)
                .with_resource_name(StrBytes::from_string(resource.to_owned())),
        ]);
        match f.call(
            ApiKey::DescribeConfigs,
            4,
            RequestKind::DescribeConfigs(req),
        ) {
            Some(ResponseKind::DescribeConfigs(r)) => {
                let t = r.results[0].clone();
                (t.error_code, t.error_message.map(|m| m.to_string()))
            }
            other => panic!("{other:?}"),
        }
    };
    let (code, message) = describe(2, "nope");
    assert_refused(
        "describe unknown",
        (code, message.as_deref()),
        E::UnknownTopicOrPartition,
        "unknown topic 'nope'",
    );
    let (code, message) = describe(3, "x");
    assert_refused(
        "describe type",
        (code, message.as_deref()),
        E::InvalidRequest,
        "config resource type 3 is not supported",
    );

    // AlterConfigs and IncrementalAlterConfigs.
    let alter = |resource_type: i8, resource: &str, key: &str, value: &str| {
        let req = AlterConfigsRequest::default().with_resources(vec![
            alter_configs_request::AlterConfigsResource::default()
                .with_resource_type(resource_type)
                .with_resource_name(StrBytes::from_string(resource.to_owned()))
                .with_configs(vec![
                    alter_configs_request::AlterableConfig::default()
                        .with_name(StrBytes::from_string(key.to_owned()))
                        .with_value(Some(StrBytes::from_string(value.to_owned()))),
                ]),
        ]);
        match f.call(ApiKey::AlterConfigs, 2, RequestKind::AlterConfigs(req)) {
            Some(ResponseKind::AlterConfigs(r)) => {
                let t = r.responses[0].clone();
                (t.error_code, t.error_message.map(|m| m.to_string()))
            }
            other => panic!("{other:?}"),
        }
    };
    let (code, message) = alter(4, "1", "retention.ms", "1");
    assert_refused(
        "alter broker",
        (code, message.as_deref()),
        E::InvalidRequest,
        "only topic configs (and group configs, with IncrementalAlterConfigs) can be altered",
    );
    let (code, message) = alter(2, "nope", "retention.ms", "1");
    assert_refused(
        "alter unknown",
        (code, message.as_deref()),
        E::UnknownTopicOrPartition,
        "unknown topic 'nope'",
    );
    let (code, message) = alter(2, "orders", "retention.ms", "soon");
    assert_refused(
        "alter value",
        (code, message.as_deref()),
        E::InvalidConfig,
        "retention.ms",
    );
    let req = IncrementalAlterConfigsRequest::default().with_resources(vec![
        incremental_alter_configs_request::AlterConfigsResource::default()
            .with_resource_type(2)
            .with_resource_name(StrBytes::from_static_str("orders"))
            .with_configs(vec![
                incremental_alter_configs_request::AlterableConfig::default()
                    .with_name(StrBytes::from_static_str("retention.ms"))
                    .with_config_operation(2)
                    .with_value(Some(StrBytes::from_static_str("1"))),
            ]),
    ]);
    match f.call(
        ApiKey::IncrementalAlterConfigs,
        1,
        RequestKind::IncrementalAlterConfigs(req),
    ) {
        Some(ResponseKind::IncrementalAlterConfigs(r)) => {
            let t = &r.responses[0];
            let got = (t.error_code, t.error_message.as_deref());
            assert_refused(
                "incremental append",
                got,
                E::InvalidConfig,
                "APPEND/SUBTRACT",
            );
        }
        other => panic!("{other:?}"),
    }

    // Unknown topic ids in DeleteTopics and Metadata.
    let id = uuid::Uuid::from_u128(7);
    let req = DeleteTopicsRequest::default().with_topics(vec![
        delete_topics_request::DeleteTopicState::default().with_topic_id(id),
    ]);
    match f.call(ApiKey::DeleteTopics, 6, RequestKind::DeleteTopics(req)) {
        Some(ResponseKind::DeleteTopics(r)) => {
            assert_eq!(r.responses[0].error_code, E::UnknownTopicId.code())
        }
        other => panic!("{other:?}"),
    }
    let req = MetadataRequest::default().with_topics(Some(vec![
        metadata_request::MetadataRequestTopic::default()
            .with_name(None)
            .with_topic_id(id),
    ]));
    match f.call(ApiKey::Metadata, 12, RequestKind::Metadata(req)) {
        Some(ResponseKind::Metadata(r)) => {
            assert_eq!(r.topics[0].error_code, E::UnknownTopicId.code())
        }
        other => panic!("{other:?}"),
    }
    // By id with an empty name, as the Java AdminClient sends it: the topic, or the unknown id.
    let orders = f.broker.topics().get("orders").unwrap().id;
    let req = MetadataRequest::default().with_topics(Some(vec![
        metadata_request::MetadataRequestTopic::default()
            .with_name(Some(name("")))
            .with_topic_id(orders),
        metadata_request::MetadataRequestTopic::default()
            .with_name(Some(name("")))
            .with_topic_id(id),
    ]));
    match f.call(ApiKey::Metadata, 12, RequestKind::Metadata(req)) {
        Some(ResponseKind::Metadata(r)) => {
            assert_eq!(r.topics[0].error_code, 0);
            assert_eq!(r.topics[0].name.as_ref().unwrap().0.as_str(), "orders");
            assert_eq!(r.topics[0].topic_id, orders);
            assert!(!r.topics[0].partitions.is_empty());
            assert_eq!(r.topics[1].error_code, E::UnknownTopicId.code());
            assert_eq!(r.topics[1].topic_id, id);
        }
        other => panic!("{other:?}"),
    }
    // Nothing refused above was written: only the two batches of producer 77 epoch 1.
    assert_eq!(f.fetch("orders", 0, 0).high_watermark, 2);
}

/// DescribeConfigs with IncludeSynonyms (kafka-configs --describe): a config set on the topic
/// lists its own override first, then the broker-wide default under the broker config's name;
/// a config at its default lists only the latter; without the flag, no synonyms.
#[test]
fn describe_configs_lists_synonyms_when_asked() {
    let f = Fixture::new();
    let req = CreateTopicsRequest::default().with_topics(vec![
        create_topics_request::CreatableTopic::default()
            .with_name(name("kept"))
            .with_num_partitions(1)
            .with_replication_factor(1)
            .with_configs(vec![
                create_topics_request::CreatableTopicConfig::default()
                    .with_name(StrBytes::from_static_str("retention.ms"))
                    .with_value(Some(StrBytes::from_static_str("3600000"))),
            ]),
    ]);
    match f.call(ApiKey::CreateTopics, 7, RequestKind::CreateTopics(req)) {
        Some(ResponseKind::CreateTopics(r)) => assert_eq!(r.topics[0].error_code, 0),
        other => panic!("{other:?}"),
    }
    let describe = |include_synonyms: bool| {
        let req = DescribeConfigsRequest::default()
            .with_include_synonyms(include_synonyms)
            .with_resources(vec![
                describe_configs_request::DescribeConfigsResource::default()
                    .with_resource_type(2)
                    .with_resource_name(StrBytes::from_static_str("kept"))
                    .with_configuration_keys(None),
            ]);
        match f.call(
            ApiKey::DescribeConfigs,
            4,
            RequestKind::DescribeConfigs(req),
        ) {
            Some(ResponseKind::DescribeConfigs(r)) => {
                assert_eq!(r.results[0].error_code, 0, "{r:?}");
                r.results[0].configs.clone()
            }
            other => panic!("{other:?}"),
        }
    };
    let configs = describe(true);
    assert!(configs.len() > 3, "{configs:?}");
    let synonyms = |config: &str| {
        configs
            .iter()
            .find(|c| c.name.as_str() == config)
            .unwrap()
            .synonyms
            .iter()
            .map(|s| {
                (
                    s.name.to_string(),
                    s.value.as_ref().map(|v| v.to_string()),
                    s.source,
                )
            })
            .collect::<Vec<_>>()
    };
    let retention = synonyms("retention.ms");
    assert_eq!(
        retention[0],
        ("retention.ms".to_owned(), Some("3600000".to_owned()), 1)
    );
    assert_eq!(retention[1].0, "log.retention.ms");
    assert_eq!(retention[1].2, 5);
    let segment = synonyms("segment.bytes");
    assert_eq!(segment.len(), 1);
    assert_eq!(segment[0].0, "log.segment.bytes");
    assert!(describe(false).iter().all(|c| c.synonyms.is_empty()));
}
