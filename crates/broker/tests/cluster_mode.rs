//! The broker in cluster mode (`Broker::open_cluster`): two brokers, each on its own data
//! directory, over one in-memory metadata store (`common/cluster_fake.rs`). Topic changes made
//! through one are answered once that one has them, and the other has them once its catalog
//! copy refreshes; Metadata lists the live brokers with the store's leaders; producer ids
//! never repeat across brokers; the store's refusals get their Kafka codes.

#[path = "common/cluster_fake.rs"]
mod cluster_fake;

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use cluster_fake::{BLOCK, FakeBackend, FakeDb, FakeMeta};
use sluice_broker::cluster::ClusterMeta;
use sluice_broker::storage::PartitionOpener;
use sluice_broker::{Broker, BrokerConfig};
use sluice_protocol::codec::Request;
use sluice_protocol::kafka_protocol::ResponseError;
use sluice_protocol::kafka_protocol::messages::*;
use sluice_protocol::kafka_protocol::protocol::StrBytes;

/// How long a broker may take to apply a catalog change it was told of.
const APPLY_DEADLINE: Duration = Duration::from_secs(10);

struct Node {
    _dir: tempfile::TempDir,
    dir: std::path::PathBuf,
    meta: Arc<FakeMeta>,
    backend: Arc<FakeBackend>,
    broker: Arc<Broker>,
}

struct Cluster {
    db: Arc<FakeDb>,
    a: Node,
    b: Node,
    rt: tokio::runtime::Runtime,
}

fn node(db: &Arc<FakeDb>, id: i32, rt: Option<&tokio::runtime::Runtime>) -> Node {
    let dir = tempfile::tempdir().unwrap();
    let meta = db.join(id, 9000 + id, &format!("zone-{id}"));
    let backend = FakeBackend::new();
    let mut config = BrokerConfig::new(dir.path());
    config.advertised_port = 9000 + id;
    let open = {
        let (meta, backend) = (Arc::clone(&meta), Arc::clone(&backend));
        move || {
            let clock = Arc::new(sluice_broker::SystemClock);
            let backend = backend as Arc<dyn PartitionOpener>;
            Broker::open_cluster(config, clock, backend, meta as Arc<dyn ClusterMeta>).unwrap()
        }
    };
    let broker = Arc::new(match rt {
        // As `sluice serve` does: on the blocking pool of the runtime.
        Some(rt) => rt
            .block_on(async { tokio::task::spawn_blocking(open).await })
            .unwrap(),
        None => open(),
    });
    Node {
        dir: dir.path().to_owned(),
        _dir: dir,
        meta,
        backend,
        broker,
    }
}

impl Cluster {
    /// Broker 1 (A) opened inside the runtime, broker 2 (B) outside it and started after.
    fn new() -> Cluster {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap();
        let db = FakeDb::new();
        let a = node(&db, 1, Some(&rt));
        let b = node(&db, 2, None);
        rt.block_on(async { b.broker.start_cluster_sync() });
        Cluster { db, a, b, rt }
    }

    fn call(
        &self,
        broker: &Arc<Broker>,
        api_key: ApiKey,
        version: i16,
        body: RequestKind,
    ) -> ResponseKind {
        let request = Request {
            api_key,
            api_version: version,
            correlation_id: 1,
            client_id: None,
            body,
        };
        let handling = broker.handle(request);
        self.rt
            .block_on(async { tokio::time::timeout(Duration::from_secs(10), handling).await })
            .expect("answered in time")
            .expect("a response")
    }

    /// Waits until `check` holds for `node`'s broker (its catalog task applies in the
    /// background).
    fn eventually(&self, node: &Node, what: &str, check: impl Fn(&Broker) -> bool) {
        let started = Instant::now();
        while !check(&node.broker) {
            assert!(
                started.elapsed() < APPLY_DEADLINE,
                "{what}: not within {APPLY_DEADLINE:?}"
            );
            std::thread::sleep(Duration::from_millis(10));
        }
    }
}

fn name(s: &str) -> TopicName {
    TopicName(StrBytes::from_string(s.to_owned()))
}

fn s(v: &str) -> StrBytes {
    StrBytes::from_string(v.to_owned())
}

/// CreateTopics of one topic: (code, message, id).
fn create(
    c: &Cluster,
    broker: &Arc<Broker>,
    topic: &str,
    partitions: i32,
    configs: &[(&str, &str)],
) -> (i16, Option<String>, uuid::Uuid) {
    let t = create_topics_request::CreatableTopic::default()
        .with_name(name(topic))
        .with_num_partitions(partitions)
        .with_replication_factor(-1)
        .with_configs(
            configs
                .iter()
                .map(|(k, v)| {
                    create_topics_request::CreatableTopicConfig::default()
                        .with_name(s(k))
                        .with_value(Some(s(v)))
                })
                .collect(),
        );
    let req = CreateTopicsRequest::default()
        .with_topics(vec![t])
        .with_timeout_ms(5000);
    match c.call(
        broker,
        ApiKey::CreateTopics,
        7,
        RequestKind::CreateTopics(req),
    ) {
        ResponseKind::CreateTopics(r) => {
            let t = &r.topics[0];
            (
                t.error_code,
                t.error_message.as_ref().map(|m| m.to_string()),
                t.topic_id,
            )
        }
        other => panic!("{other:?}"),
    }
}

fn delete(c: &Cluster, broker: &Arc<Broker>, topic: &str) -> (i16, Option<String>) {
    let req = DeleteTopicsRequest::default().with_topic_names(vec![name(topic)]);
    match c.call(
        broker,
        ApiKey::DeleteTopics,
        5,
        RequestKind::DeleteTopics(req),
    ) {
        ResponseKind::DeleteTopics(r) => {
            let t = &r.responses[0];
            (
                t.error_code,
                t.error_message.as_ref().map(|m| m.to_string()),
            )
        }
        other => panic!("{other:?}"),
    }
}

fn create_partitions(
    c: &Cluster,
    broker: &Arc<Broker>,
    topic: &str,
    count: i32,
) -> (i16, Option<String>) {
    let req = CreatePartitionsRequest::default()
        .with_topics(vec![
            create_partitions_request::CreatePartitionsTopic::default()
                .with_name(name(topic))
                .with_count(count)
                .with_assignments(None),
        ])
        .with_timeout_ms(5000);
    match c.call(
        broker,
        ApiKey::CreatePartitions,
        3,
        RequestKind::CreatePartitions(req),
    ) {
        ResponseKind::CreatePartitions(r) => {
            let t = &r.results[0];
            (
                t.error_code,
                t.error_message.as_ref().map(|m| m.to_string()),
            )
        }
        other => panic!("{other:?}"),
    }
}

fn alter(c: &Cluster, broker: &Arc<Broker>, topic: &str, key: &str, value: &str) -> i16 {
    let req = IncrementalAlterConfigsRequest::default().with_resources(vec![
        incremental_alter_configs_request::AlterConfigsResource::default()
            .with_resource_type(2)
            .with_resource_name(s(topic))
            .with_configs(vec![
                incremental_alter_configs_request::AlterableConfig::default()
                    .with_name(s(key))
                    .with_config_operation(0)
                    .with_value(Some(s(value))),
            ]),
    ]);
    match c.call(
        broker,
        ApiKey::IncrementalAlterConfigs,
        1,
        RequestKind::IncrementalAlterConfigs(req),
    ) {
        ResponseKind::IncrementalAlterConfigs(r) => r.responses[0].error_code,
        other => panic!("{other:?}"),
    }
}

/// DescribeConfigs of one topic config: (value, source).
fn describe_config(c: &Cluster, broker: &Arc<Broker>, topic: &str, key: &str) -> (String, i8) {
    let req = DescribeConfigsRequest::default().with_resources(vec![
        describe_configs_request::DescribeConfigsResource::default()
            .with_resource_type(2)
            .with_resource_name(s(topic))
            .with_configuration_keys(Some(vec![s(key)])),
    ]);
    match c.call(
        broker,
        ApiKey::DescribeConfigs,
        4,
        RequestKind::DescribeConfigs(req),
    ) {
        ResponseKind::DescribeConfigs(r) => {
            assert_eq!(
                r.results[0].error_code, 0,
                "{:?}",
                r.results[0].error_message
            );
            let e = &r.results[0].configs[0];
            (e.value.as_ref().unwrap().to_string(), e.config_source)
        }
        other => panic!("{other:?}"),
    }
}

fn metadata(
    c: &Cluster,
    broker: &Arc<Broker>,
    topics: Option<&[&str]>,
    auto_create: bool,
) -> MetadataResponse {
    let req = MetadataRequest::default()
        .with_topics(topics.map(|t| {
            t.iter()
                .map(|n| metadata_request::MetadataRequestTopic::default().with_name(Some(name(n))))
                .collect()
        }))
        .with_allow_auto_topic_creation(auto_create);
    match c.call(broker, ApiKey::Metadata, 12, RequestKind::Metadata(req)) {
        ResponseKind::Metadata(r) => r,
        other => panic!("{other:?}"),
    }
}

fn init_producer_id(c: &Cluster, broker: &Arc<Broker>) -> (i16, i64) {
    let req = InitProducerIdRequest::default()
        .with_producer_id(ProducerId(-1))
        .with_producer_epoch(-1)
        .with_transaction_timeout_ms(60_000);
    match c.call(
        broker,
        ApiKey::InitProducerId,
        4,
        RequestKind::InitProducerId(req),
    ) {
        ResponseKind::InitProducerId(r) => (r.error_code, r.producer_id.0),
        other => panic!("{other:?}"),
    }
}

fn partition_count(b: &Broker, topic: &str) -> Option<i32> {
    b.topics().get(topic).map(|t| t.partition_count())
}

#[test]
fn topics_made_through_one_broker_reach_the_other() {
    let c = Cluster::new();
    let (a, b) = (&c.a.broker, &c.b.broker);
    assert_eq!(a.config().node_id, 1, "the node id is the store's");
    assert_eq!(a.config().cluster_id, "fake-cluster");

    // Created through A: open on A when the answer comes, with its partitions in A's backend.
    let (code, message, id) = create(&c, a, "orders", 3, &[("retention.ms", "60000")]);
    assert_eq!(code, 0, "{message:?}");
    assert_eq!(a.topics().get("orders").unwrap().id, id);
    assert_eq!(partition_count(a, "orders"), Some(3));
    assert_eq!(
        c.db.catalog().topics["orders"].configs["retention.ms"],
        "60000"
    );
    let p0 =
        c.a.backend
            .partition(id, 0)
            .expect("opened through the backend");
    assert_eq!(
        p0.config.lock().unwrap().unwrap().retention_ms,
        Some(60_000)
    );

    // B has not refreshed: it does not know the topic, and the store refuses a second one.
    assert!(b.topics().get("orders").is_none());
    let (code, message, _) = create(&c, b, "orders", 1, &[]);
    assert_eq!(code, ResponseError::TopicAlreadyExists.code());
    assert!(message.unwrap().contains("already exists"));

    // B's refresh interval passes.
    c.b.meta.poll();
    c.eventually(&c.b, "B opens the topic", |b| {
        b.topics().get("orders").is_some_and(|t| t.id == id)
    });
    assert_eq!(partition_count(b, "orders"), Some(3));
    assert_eq!(
        describe_config(&c, b, "orders", "retention.ms"),
        ("60000".into(), 1)
    );
    // Known locally now: refused before the store is asked.
    assert_eq!(
        create(&c, b, "orders", 1, &[]).0,
        ResponseError::TopicAlreadyExists.code()
    );

    // Validate-only creates nothing anywhere.
    let req = CreateTopicsRequest::default()
        .with_topics(vec![
            create_topics_request::CreatableTopic::default()
                .with_name(name("dry"))
                .with_num_partitions(2)
                .with_replication_factor(1),
        ])
        .with_validate_only(true);
    match c.call(a, ApiKey::CreateTopics, 7, RequestKind::CreateTopics(req)) {
        ResponseKind::CreateTopics(r) => assert_eq!(r.topics[0].error_code, 0),
        other => panic!("{other:?}"),
    }
    assert!(!c.db.catalog().topics.contains_key("dry"));
    assert!(a.topics().get("dry").is_none());

    // Checks as in single-broker mode, before the store.
    let version = c.db.catalog().version;
    assert_eq!(
        create(&c, a, "bad name", 1, &[]).0,
        ResponseError::InvalidTopicException.code()
    );
    assert_eq!(
        create(&c, a, "x", 1, &[("retention.ms", "soon")]).0,
        ResponseError::InvalidConfig.code()
    );
    assert_eq!(
        c.db.catalog().version,
        version,
        "refused creates never reach the store"
    );

    // Nothing of the topics is written under the data directories.
    for node in [&c.a, &c.b] {
        assert!(!node.dir.join("topics").exists());
        assert!(!node.dir.join("producer-ids").exists());
    }
}

#[test]
fn partitions_configs_and_deletes_reach_the_other_broker() {
    let c = Cluster::new();
    let (a, b) = (&c.a.broker, &c.b.broker);
    let (code, _, id) = create(&c, a, "events", 2, &[]);
    assert_eq!(code, 0);
    c.b.meta.poll();
    c.eventually(&c.b, "B opens the topic", |b| {
        partition_count(b, "events") == Some(2)
    });

    // More partitions through B: open on B at once, on A after its refresh.
    assert_eq!(create_partitions(&c, b, "events", 4), (0, None));
    assert_eq!(partition_count(b, "events"), Some(4));
    assert_eq!(c.db.catalog().topics["events"].partitions, 4);
    // A still believes 2: its 3 passes the local check, and the store refuses it.
    let (code, message) = create_partitions(&c, a, "events", 3);
    assert_eq!(code, ResponseError::InvalidPartitions.code());
    assert!(message.unwrap().contains("not more"));
    c.a.meta.poll();
    c.eventually(&c.a, "A opens the new partitions", |a| {
        partition_count(a, "events") == Some(4)
    });
    assert!(c.a.backend.partition(id, 3).is_some());
    // Known locally now: refused by the same check as in single-broker mode.
    assert_eq!(
        create_partitions(&c, a, "events", 4).0,
        ResponseError::InvalidPartitions.code()
    );

    // A config changed through A: its partitions take it, and B describes it once refreshed.
    assert_eq!(alter(&c, a, "events", "retention.ms", "1000"), 0);
    assert_eq!(
        describe_config(&c, a, "events", "retention.ms"),
        ("1000".into(), 1)
    );
    let p3 = c.a.backend.partition(id, 3).unwrap();
    assert_eq!(p3.config.lock().unwrap().unwrap().retention_ms, Some(1000));
    c.b.meta.poll();
    c.eventually(&c.b, "B takes the config", |b| {
        b.topics()
            .get("events")
            .unwrap()
            .config()
            .0
            .get("retention.ms")
            .map(String::as_str)
            == Some("1000")
    });
    assert_eq!(
        describe_config(&c, b, "events", "retention.ms"),
        ("1000".into(), 1)
    );
    let b3 = c.b.backend.partition(id, 3).unwrap();
    assert_eq!(b3.config.lock().unwrap().unwrap().retention_ms, Some(1000));
    // Through A again, then through B before B's refresh: B starts from the store's
    // overrides, so both keys stay.
    assert_eq!(alter(&c, a, "events", "retention.ms", "2000"), 0);
    assert_eq!(alter(&c, b, "events", "max.message.bytes", "4096"), 0);
    let stored = c.db.catalog().topics["events"].configs.clone();
    assert_eq!(stored["retention.ms"], "2000");
    assert_eq!(stored["max.message.bytes"], "4096");
    assert_eq!(alter(&c, a, "events", "retention.ms", "1000"), 0);
    c.b.meta.poll();
    c.eventually(&c.b, "B takes the config", |b| {
        b.topics()
            .get("events")
            .unwrap()
            .config()
            .0
            .get("retention.ms")
            .map(String::as_str)
            == Some("1000")
    });
    // Checked before the store, as AlterConfigs always is.
    assert_eq!(
        alter(&c, a, "events", "cleanup.policy", "compact"),
        ResponseError::InvalidConfig.code()
    );
    assert_eq!(c.db.catalog().topics["events"].configs.len(), 2);

    // Deleted through B: gone on B at once, on A after its refresh; no data deleted by either.
    assert_eq!(delete(&c, b, "events"), (0, None));
    assert!(b.topics().get("events").is_none());
    c.a.meta.poll();
    c.eventually(&c.a, "A drops the topic", |a| {
        a.topics().get("events").is_none()
    });
    assert_eq!(c.a.backend.deletes() + c.b.backend.deletes(), 0);
    // A second delete: the store's UnknownTopic.
    let (code, message) = delete(&c, a, "events");
    assert_eq!(code, ResponseError::UnknownTopicOrPartition.code());
    assert!(message.unwrap().contains("does not exist"));
    assert_eq!(
        alter(&c, a, "events", "retention.ms", "5"),
        ResponseError::UnknownTopicOrPartition.code()
    );

    // Deleted and created again under the same name: the other broker follows the new id.
    let (code, _, first) = create(&c, a, "again", 1, &[]);
    assert_eq!(code, 0);
    c.b.meta.poll();
    c.eventually(&c.b, "B opens it", |b| b.topics().get("again").is_some());
    assert_eq!(delete(&c, a, "again").0, 0);
    let (code, _, second) = create(&c, a, "again", 2, &[]);
    assert_eq!(code, 0);
    assert_ne!(first, second);
    c.b.meta.poll();
    c.eventually(&c.b, "B follows the new id", |b| {
        b.topics()
            .get("again")
            .is_some_and(|t| t.id == second && t.partition_count() == 2)
    });
}

#[test]
fn metadata_lists_the_live_brokers_and_the_store_s_leaders() {
    let c = Cluster::new();
    let a = &c.a.broker;
    let (code, _, id) = create(&c, a, "spread", 6, &[]);
    assert_eq!(code, 0);

    let m = metadata(&c, a, Some(&["spread"]), false);
    assert_eq!(m.cluster_id.as_deref(), Some("fake-cluster"));
    assert_eq!(m.controller_id.0, 1, "the lowest live node id");
    let brokers: Vec<_> = m
        .brokers
        .iter()
        .map(|b| {
            (
                b.node_id.0,
                b.host.to_string(),
                b.port,
                b.rack.as_ref().map(|r| r.to_string()),
            )
        })
        .collect();
    assert_eq!(
        brokers,
        vec![
            (1, "127.0.0.1".into(), 9001, Some("zone-1".into())),
            (2, "127.0.0.1".into(), 9002, Some("zone-2".into())),
        ]
    );
    let t = &m.topics[0];
    assert_eq!((t.error_code, t.topic_id), (0, id));
    let mut leaders = std::collections::BTreeSet::new();
    for p in &t.partitions {
        let leader = c.a.meta.leader_for(id, p.partition_index);
        assert_eq!(p.leader_id.0, leader);
        assert_eq!(p.replica_nodes, vec![BrokerId(leader)]);
        assert_eq!(p.isr_nodes, vec![BrokerId(leader)]);
        leaders.insert(leader);
    }
    assert_eq!(
        leaders.len(),
        2,
        "the partitions are spread over both brokers"
    );

    // DescribeCluster says the same.
    match c.call(
        a,
        ApiKey::DescribeCluster,
        0,
        RequestKind::DescribeCluster(DescribeClusterRequest::default()),
    ) {
        ResponseKind::DescribeCluster(r) => {
            assert_eq!(r.cluster_id.to_string(), "fake-cluster");
            assert_eq!(r.controller_id.0, 1);
            let ids: Vec<_> = r.brokers.iter().map(|b| b.broker_id.0).collect();
            assert_eq!(ids, vec![1, 2]);
            assert_eq!(r.brokers[1].rack.as_deref(), Some("zone-2"));
        }
        other => panic!("{other:?}"),
    }

    // A lapsed (momentarily) from the live list: it still lists itself, and leads all.
    c.db.lapse(1);
    let m = metadata(&c, a, Some(&["spread"]), false);
    let ids: Vec<_> = m.brokers.iter().map(|b| (b.node_id.0, b.port)).collect();
    assert_eq!(ids, vec![(1, 9001), (2, 9002)]);
    assert_eq!(m.controller_id.0, 1);
    // (The fake spreads over the live list: now B alone.)
    assert!(m.topics[0].partitions.iter().all(|p| p.leader_id.0 == 2));
}

#[test]
fn metadata_auto_creates_topics_in_the_store() {
    let c = Cluster::new();
    let (a, b) = (&c.a.broker, &c.b.broker);
    let m = metadata(&c, b, Some(&["auto.one", "bad name"]), true);
    let codes: Vec<_> = m.topics.iter().map(|t| t.error_code).collect();
    assert_eq!(codes, vec![0, ResponseError::InvalidTopicException.code()]);
    let id = m.topics[0].topic_id;
    assert_eq!(m.topics[0].partitions.len(), 1);
    assert_eq!(c.db.catalog().topics["auto.one"].id, id);
    // Not allowed by the client: unknown, and nothing is created.
    let m = metadata(&c, b, Some(&["auto.two"]), false);
    assert_eq!(
        m.topics[0].error_code,
        ResponseError::UnknownTopicOrPartition.code()
    );
    assert!(!c.db.catalog().topics.contains_key("auto.two"));
    // The other broker has it after its refresh.
    c.a.meta.poll();
    c.eventually(&c.a, "A opens the auto-created topic", |a| {
        a.topics().get("auto.one").is_some()
    });
    let m = metadata(&c, a, None, false);
    assert_eq!(m.topics.len(), 1);

    // The store down: retriable codes that name it, and nothing half-made.
    c.db.set_down(true);
    let m = metadata(&c, b, Some(&["auto.three"]), true);
    assert_eq!(
        m.topics[0].error_code,
        ResponseError::LeaderNotAvailable.code()
    );
    let (code, message, _) = create(&c, a, "later", 1, &[]);
    assert_eq!(code, ResponseError::RequestTimedOut.code());
    assert!(
        message.unwrap().contains("metadata store"),
        "the message names the store"
    );
    assert_eq!(
        init_producer_id(&c, a).0,
        ResponseError::CoordinatorLoadInProgress.code()
    );
    c.db.set_down(false);
    assert_eq!(create(&c, a, "later", 1, &[]).0, 0);
}

#[test]
fn producer_ids_never_repeat_across_brokers() {
    let c = Cluster::new();
    let mut ids = std::collections::BTreeSet::new();
    for i in 0..(3 * BLOCK) {
        let broker = if i % 3 == 0 { &c.b.broker } else { &c.a.broker };
        let (code, id) = init_producer_id(&c, broker);
        assert_eq!(code, 0);
        assert!(ids.insert(id), "producer id {id} handed out twice");
    }
    // Blocks are taken as they run out, not per request.
    assert!(
        c.db.blocks_handed_out() <= 5,
        "{} blocks",
        c.db.blocks_handed_out()
    );
    // Concurrent requests on one broker: still distinct.
    let answers: Vec<_> = (0..40)
        .map(|_| {
            let request = Request {
                api_key: ApiKey::InitProducerId,
                api_version: 4,
                correlation_id: 1,
                client_id: None,
                body: RequestKind::InitProducerId(
                    InitProducerIdRequest::default()
                        .with_producer_id(ProducerId(-1))
                        .with_producer_epoch(-1),
                ),
            };
            c.a.broker.handle(request)
        })
        .collect();
    let answers = c.rt.block_on(futures::future::join_all(answers));
    for answer in answers {
        let Some(ResponseKind::InitProducerId(r)) = answer else {
            panic!("{answer:?}");
        };
        assert_eq!(r.error_code, 0);
        assert!(
            ids.insert(r.producer_id.0),
            "producer id {} handed out twice",
            r.producer_id.0
        );
    }
    // An epoch bump keeps the id, as in single-broker mode.
    let req = InitProducerIdRequest::default()
        .with_producer_id(ProducerId(3))
        .with_producer_epoch(4);
    match c.call(
        &c.b.broker,
        ApiKey::InitProducerId,
        4,
        RequestKind::InitProducerId(req),
    ) {
        ResponseKind::InitProducerId(r) => assert_eq!((r.producer_id.0, r.producer_epoch), (3, 5)),
        other => panic!("{other:?}"),
    }
}

/// The background task ends with the broker: shutting down stops it, and changes after that
/// are not applied.
#[test]
fn shutdown_stops_applying_the_catalog() {
    let c = Cluster::new();
    let (code, _, _) = create(&c, &c.a.broker, "before", 1, &[]);
    assert_eq!(code, 0);
    c.b.meta.poll();
    c.eventually(&c.b, "B opens it", |b| b.topics().get("before").is_some());
    c.b.broker.shutdown();
    assert_eq!(create(&c, &c.a.broker, "after", 1, &[]).0, 0);
    c.b.meta.poll();
    std::thread::sleep(Duration::from_millis(200));
    assert!(c.b.broker.topics().get("after").is_none());
}

/// Requests naming a topic this broker does not know wait for a catalog reload that started
/// after they arrived: consumers of a group that start together all see a topic created
/// through another broker just before (one told "unknown topic" would stay out of its group
/// until its next metadata refresh), and so does a request right after another one's
/// reload. Reloads stay bounded.
#[test]
fn requests_arriving_together_all_see_a_topic_created_through_the_other_broker() {
    let c = Cluster::new();
    let b = &c.b.broker;
    for (round, topic) in ["fresh-0", "fresh-1"].into_iter().enumerate() {
        assert_eq!(create(&c, &c.a.broker, topic, 3, &[]).0, 0);
        assert!(b.topics().get(topic).is_none(), "B has not refreshed yet");
        let refreshes = c.b.meta.refreshes();
        let asked: Vec<_> = (0..6)
            .map(|_| {
                // As a consumer asks: without auto-creation (which reloads the catalog anyway).
                let req = MetadataRequest::default()
                    .with_topics(Some(vec![
                        metadata_request::MetadataRequestTopic::default()
                            .with_name(Some(name(topic))),
                    ]))
                    .with_allow_auto_topic_creation(false);
                b.handle(Request {
                    api_key: ApiKey::Metadata,
                    api_version: 12,
                    correlation_id: 1,
                    client_id: None,
                    body: RequestKind::Metadata(req),
                })
            })
            .collect();
        let answers = c.rt.block_on(async {
            tokio::time::timeout(Duration::from_secs(10), futures::future::join_all(asked)).await
        });
        for answer in answers.expect("answered in time") {
            let Some(ResponseKind::Metadata(m)) = answer else {
                panic!("{answer:?}")
            };
            assert_eq!(
                m.topics[0].error_code, 0,
                "round {round}: {:?}",
                m.topics[0]
            );
            assert_eq!(m.topics[0].partitions.len(), 3);
        }
        let reloads = c.b.meta.refreshes() - refreshes;
        assert!(
            (1..=2).contains(&reloads),
            "round {round}: {reloads} reloads for 6 requests"
        );
    }
}

/// Applying a catalog: once fully applied, the same one again costs nothing; one that could
/// not be fully applied (a partition that did not open) is tried again, same version or not.
#[test]
fn the_catalog_is_applied_once_and_what_failed_is_retried() {
    let c = Cluster::new();
    let b = &c.b.broker;
    assert_eq!(create(&c, &c.a.broker, "t", 2, &[]).0, 0);
    c.b.backend.fail_opens.store(true, Ordering::SeqCst);
    let applied = c.rt.block_on(b.refresh_catalog()).unwrap();
    assert_eq!(applied.failed.len(), 1, "{applied:?}");
    assert!(applied.failed[0].1.to_string().contains("refuses opens"));
    assert!(b.topics().get("t").is_none());

    c.b.backend.fail_opens.store(false, Ordering::SeqCst);
    let applied = c.rt.block_on(b.refresh_catalog()).unwrap();
    // The background task retries what failed too, and may have done so first (then this
    // refresh finds the catalog applied and skips); either way the topic is open now.
    assert!(applied.failed.is_empty(), "{applied:?}");
    assert_eq!(partition_count(b, "t"), Some(2));
    let opens = c.b.backend.opens.load(Ordering::SeqCst);
    let applied = c.rt.block_on(b.refresh_catalog()).unwrap();
    assert!(applied.skipped, "{applied:?}");
    assert_eq!(c.b.backend.opens.load(Ordering::SeqCst), opens);
}

/// A catalog topic that cannot be opened fails the open, with the reason.
#[test]
fn open_fails_when_a_catalog_topic_cannot_be_opened() {
    let c = Cluster::new();
    assert_eq!(create(&c, &c.a.broker, "t", 1, &[]).0, 0);
    let dir = tempfile::tempdir().unwrap();
    let meta = c.db.join(3, 9003, "zone-3");
    let backend = FakeBackend::new();
    backend.fail_opens.store(true, Ordering::SeqCst);
    let opened = Broker::open_cluster(
        BrokerConfig::new(dir.path()),
        Arc::new(sluice_broker::SystemClock),
        backend as Arc<dyn PartitionOpener>,
        meta as Arc<dyn ClusterMeta>,
    );
    let e = opened.unwrap_err();
    assert!(e.to_string().contains("refuses opens"), "{e}");
}
