//! Consumer groups of brokers in cluster mode: two brokers over one in-memory metadata store
//! (`common/cluster_fake.rs`) and one in-memory group store
//! (`sluice_groups::ownership::memory`). FindCoordinator names the group's coordinator with
//! its address; a group's requests are served by the broker holding its lease, answered
//! NOT_COORDINATOR elsewhere, and follow the group when its lease moves.

#[path = "common/cluster_fake.rs"]
mod cluster_fake;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use cluster_fake::{FakeBackend, FakeDb, FakeMeta};
use futures::future::BoxFuture;
use sluice_broker::cluster::{Catalog, ClusterError, ClusterMeta, ClusterNode};
use sluice_broker::groups::GroupOwnership;
use sluice_broker::groups::ownership::memory::{MemoryOwner, MemoryStore};
use sluice_broker::storage::PartitionOpener;
use sluice_broker::uuid::Uuid;
use sluice_broker::{Broker, BrokerConfig};
use sluice_protocol::codec::Request;
use sluice_protocol::kafka_protocol::ResponseError;
use sluice_protocol::kafka_protocol::messages::*;
use sluice_protocol::kafka_protocol::protocol::StrBytes;
use tokio::sync::watch;

/// A broker's view of the cluster: the fake metadata store, with the groups' coordinators
/// from the in-memory group store (the lease holder, else the lowest live id).
#[derive(Debug)]
struct GroupsMeta {
    inner: Arc<FakeMeta>,
    groups: Arc<MemoryStore>,
    owner: Arc<MemoryOwner>,
}

impl ClusterMeta for GroupsMeta {
    fn node_id(&self) -> i32 {
        self.inner.node_id()
    }

    fn cluster_id(&self) -> String {
        self.inner.cluster_id()
    }

    fn live_brokers(&self) -> Arc<Vec<ClusterNode>> {
        self.inner.live_brokers()
    }

    fn leader_for(&self, topic_id: Uuid, partition: i32) -> i32 {
        self.inner.leader_for(topic_id, partition)
    }

    fn catalog(&self) -> watch::Receiver<Arc<Catalog>> {
        self.inner.catalog()
    }

    fn refresh(&self) -> BoxFuture<'static, Result<(), ClusterError>> {
        self.inner.refresh()
    }

    fn create_topic(
        &self,
        id: Uuid,
        name: String,
        partitions: i32,
        configs: BTreeMap<String, String>,
    ) -> BoxFuture<'static, Result<(), ClusterError>> {
        self.inner.create_topic(id, name, partitions, configs)
    }

    fn delete_topic(&self, name: String) -> BoxFuture<'static, Result<(), ClusterError>> {
        self.inner.delete_topic(name)
    }

    fn create_partitions(
        &self,
        name: String,
        total: i32,
    ) -> BoxFuture<'static, Result<(), ClusterError>> {
        self.inner.create_partitions(name, total)
    }

    fn set_configs(
        &self,
        name: String,
        configs: BTreeMap<String, String>,
    ) -> BoxFuture<'static, Result<(), ClusterError>> {
        self.inner.set_configs(name, configs)
    }

    fn producer_id_block(&self) -> BoxFuture<'static, Result<(i64, i64), ClusterError>> {
        self.inner.producer_id_block()
    }

    fn find_coordinator(&self, group: String) -> BoxFuture<'static, Result<i32, ClusterError>> {
        let named = self.groups.holder(&group).unwrap_or_else(|| {
            let live = self.live_brokers();
            live.iter()
                .map(|n| n.node_id)
                .min()
                .unwrap_or(self.node_id())
        });
        Box::pin(futures::future::ready(Ok(named)))
    }

    fn group_ownership(&self) -> Option<Arc<dyn GroupOwnership>> {
        Some(Arc::clone(&self.owner) as Arc<dyn GroupOwnership>)
    }
}

struct Cluster {
    _dirs: Vec<tempfile::TempDir>,
    meta_db: Arc<FakeDb>,
    groups: Arc<MemoryStore>,
    metas: Vec<Arc<FakeMeta>>,
    owners: Vec<Arc<MemoryOwner>>,
    brokers: Vec<Arc<Broker>>,
    rt: tokio::runtime::Runtime,
}

impl Cluster {
    /// Brokers 1 and 2, at 127.0.0.1:9001 and :9002.
    fn new() -> Cluster {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap();
        let meta_db = FakeDb::new();
        let groups = MemoryStore::new();
        let mut c = Cluster {
            _dirs: Vec::new(),
            meta_db,
            groups,
            metas: Vec::new(),
            owners: Vec::new(),
            brokers: Vec::new(),
            rt,
        };
        for id in [1, 2] {
            let dir = tempfile::tempdir().unwrap();
            let inner = c.meta_db.join(id, 9000 + id, "zone");
            let owner = c.groups.owner(id);
            let meta = Arc::new(GroupsMeta {
                inner: Arc::clone(&inner),
                groups: Arc::clone(&c.groups),
                owner: Arc::clone(&owner),
            });
            let mut config = BrokerConfig::new(dir.path());
            config.advertised_port = 9000 + id;
            config.groups.classic.initial_rebalance_delay_ms = 0;
            let backend = FakeBackend::new() as Arc<dyn PartitionOpener>;
            let broker = c.rt.block_on(async {
                tokio::task::spawn_blocking(move || {
                    let clock = Arc::new(sluice_broker::SystemClock);
                    Broker::open_cluster(config, clock, backend, meta as Arc<dyn ClusterMeta>)
                })
                .await
                .unwrap()
                .unwrap()
            });
            c._dirs.push(dir);
            c.metas.push(inner);
            c.owners.push(owner);
            c.brokers.push(Arc::new(broker));
        }
        c
    }

    fn call(
        &self,
        broker: usize,
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
        let handling = self.brokers[broker].handle(request);
        self.rt
            .block_on(async { tokio::time::timeout(Duration::from_secs(10), handling).await })
            .expect("answered in time")
            .expect("a response")
    }

    /// Creates `topic` through broker 1 and waits until both brokers have it.
    fn create_topic(&self, topic: &str) {
        let t = create_topics_request::CreatableTopic::default()
            .with_name(TopicName(s(topic)))
            .with_num_partitions(1)
            .with_replication_factor(-1);
        let req = CreateTopicsRequest::default()
            .with_topics(vec![t])
            .with_timeout_ms(5000);
        match self.call(0, ApiKey::CreateTopics, 7, RequestKind::CreateTopics(req)) {
            ResponseKind::CreateTopics(r) => assert_eq!(r.topics[0].error_code, 0),
            other => panic!("{other:?}"),
        }
        let started = Instant::now();
        for (meta, broker) in self.metas.iter().zip(&self.brokers) {
            meta.poll();
            while broker.topics().get(topic).is_none() {
                assert!(
                    started.elapsed() < Duration::from_secs(10),
                    "{topic} not applied"
                );
                std::thread::sleep(Duration::from_millis(10));
            }
        }
    }

    /// FindCoordinator of group keys: (error code, node id, host, port) per key, in order.
    fn find(&self, broker: usize, version: i16, key_type: i8, keys: &[&str]) -> Vec<Found> {
        let mut req = FindCoordinatorRequest::default().with_key_type(key_type);
        if version >= 4 {
            req.coordinator_keys = keys.iter().map(|k| s(k)).collect();
        } else {
            req.key = s(keys[0]);
        }
        match self.call(
            broker,
            ApiKey::FindCoordinator,
            version,
            RequestKind::FindCoordinator(req),
        ) {
            ResponseKind::FindCoordinator(r) if version >= 4 => r
                .coordinators
                .into_iter()
                .map(|c| (c.error_code, c.node_id.0, c.host.to_string(), c.port))
                .collect(),
            ResponseKind::FindCoordinator(r) => {
                vec![(r.error_code, r.node_id.0, r.host.to_string(), r.port)]
            }
            other => panic!("{other:?}"),
        }
    }

    /// OffsetCommit of `orders`-0 outside any group protocol: the partition's code.
    fn commit(&self, broker: usize, group_id: &str, offset: i64) -> i16 {
        let req = OffsetCommitRequest::default()
            .with_group_id(GroupId(s(group_id)))
            .with_generation_id_or_member_epoch(-1)
            .with_topics(vec![
                offset_commit_request::OffsetCommitRequestTopic::default()
                    .with_name(TopicName(s("orders")))
                    .with_partitions(vec![
                        offset_commit_request::OffsetCommitRequestPartition::default()
                            .with_partition_index(0)
                            .with_committed_offset(offset),
                    ]),
            ]);
        match self.call(
            broker,
            ApiKey::OffsetCommit,
            8,
            RequestKind::OffsetCommit(req),
        ) {
            ResponseKind::OffsetCommit(r) => r.topics[0].partitions[0].error_code,
            other => panic!("{other:?}"),
        }
    }

    /// OffsetFetch of `orders`-0, v7 and v8 shapes: the same answer from both.
    fn fetch(&self, broker: usize, group_id: &str) -> Result<i64, i16> {
        let v7 = OffsetFetchRequest::default()
            .with_group_id(GroupId(s(group_id)))
            .with_topics(Some(vec![
                offset_fetch_request::OffsetFetchRequestTopic::default()
                    .with_name(TopicName(s("orders")))
                    .with_partition_indexes(vec![0]),
            ]));
        let old = match self.call(broker, ApiKey::OffsetFetch, 7, RequestKind::OffsetFetch(v7)) {
            ResponseKind::OffsetFetch(r) if r.error_code != 0 => Err(r.error_code),
            ResponseKind::OffsetFetch(r) => Ok(r.topics[0].partitions[0].committed_offset),
            other => panic!("{other:?}"),
        };
        let v8 = OffsetFetchRequest::default().with_groups(vec![
            offset_fetch_request::OffsetFetchRequestGroup::default()
                .with_group_id(GroupId(s(group_id)))
                .with_member_epoch(-1)
                .with_topics(Some(vec![
                    offset_fetch_request::OffsetFetchRequestTopics::default()
                        .with_name(TopicName(s("orders")))
                        .with_partition_indexes(vec![0]),
                ])),
        ]);
        let new = match self.call(broker, ApiKey::OffsetFetch, 9, RequestKind::OffsetFetch(v8)) {
            ResponseKind::OffsetFetch(r) if r.groups[0].error_code != 0 => {
                Err(r.groups[0].error_code)
            }
            ResponseKind::OffsetFetch(r) => {
                Ok(r.groups[0].topics[0].partitions[0].committed_offset)
            }
            other => panic!("{other:?}"),
        };
        assert_eq!(old, new, "OffsetFetch v7 and v9 disagree");
        new
    }

    fn list(&self, broker: usize) -> Vec<String> {
        let req = ListGroupsRequest::default();
        match self.call(broker, ApiKey::ListGroups, 5, RequestKind::ListGroups(req)) {
            ResponseKind::ListGroups(r) => r
                .groups
                .into_iter()
                .map(|g| g.group_id.0.to_string())
                .collect(),
            other => panic!("{other:?}"),
        }
    }

    fn describe(&self, broker: usize, group_id: &str) -> i16 {
        let req = DescribeGroupsRequest::default().with_groups(vec![GroupId(s(group_id))]);
        match self.call(
            broker,
            ApiKey::DescribeGroups,
            5,
            RequestKind::DescribeGroups(req),
        ) {
            ResponseKind::DescribeGroups(r) => r.groups[0].error_code,
            other => panic!("{other:?}"),
        }
    }

    fn describe_consumer(&self, broker: usize, group_id: &str) -> i16 {
        let req =
            ConsumerGroupDescribeRequest::default().with_group_ids(vec![GroupId(s(group_id))]);
        match self.call(
            broker,
            ApiKey::ConsumerGroupDescribe,
            0,
            RequestKind::ConsumerGroupDescribe(req),
        ) {
            ResponseKind::ConsumerGroupDescribe(r) => r.groups[0].error_code,
            other => panic!("{other:?}"),
        }
    }

    fn join(&self, broker: usize, group_id: &str) -> i16 {
        let req = JoinGroupRequest::default()
            .with_group_id(GroupId(s(group_id)))
            .with_session_timeout_ms(10_000)
            .with_rebalance_timeout_ms(10_000)
            .with_protocol_type(s("consumer"))
            .with_protocols(vec![
                join_group_request::JoinGroupRequestProtocol::default()
                    .with_name(s("range"))
                    .with_metadata(bytes::Bytes::from_static(b"m")),
            ]);
        match self.call(broker, ApiKey::JoinGroup, 3, RequestKind::JoinGroup(req)) {
            ResponseKind::JoinGroup(r) => r.error_code,
            other => panic!("{other:?}"),
        }
    }
}

type Found = (i16, i32, String, i32);

fn s(v: &str) -> StrBytes {
    StrBytes::from_string(v.to_owned())
}

fn code(e: ResponseError) -> i16 {
    e.code()
}

fn at(node: i32) -> Found {
    (0, node, "127.0.0.1".to_owned(), 9000 + node)
}

#[test]
fn find_coordinator_names_the_lease_holder_with_its_address() {
    let c = Cluster::new();
    c.create_topic("orders");
    // Nobody holds "g": the store names its preferred broker (the fake's: the lowest id).
    assert_eq!(c.find(1, 3, 0, &["g"]), vec![at(1)]);
    assert_eq!(c.commit(1, "g", 5), 0, "broker 2 takes the group");
    assert_eq!(c.groups.holder("g"), Some(2));
    for version in [1, 3] {
        assert_eq!(c.find(0, version, 0, &["g"]), vec![at(2)], "v{version}");
    }
    assert_eq!(c.find(0, 4, 0, &["g", "h"]), vec![at(2), at(1)]);

    // Refusals as before cluster mode, and those of the store.
    let invalid = code(ResponseError::InvalidRequest);
    assert_eq!(
        c.find(0, 4, 1, &["tx"])[0].0,
        code(ResponseError::ClusterAuthorizationFailed),
        "no transactions"
    );
    assert_eq!(c.find(0, 4, 0, &[""])[0].0, invalid);
    assert_eq!(
        c.find(0, 4, 0, &["bad\0id"])[0].0,
        code(ResponseError::InvalidGroupId)
    );
    // The holder left this broker's live list: retriable, no address.
    c.meta_db.lapse(2);
    assert_eq!(
        c.find(0, 4, 0, &["g"]),
        vec![(
            code(ResponseError::CoordinatorNotAvailable),
            -1,
            String::new(),
            -1
        )]
    );
}

#[test]
fn group_requests_are_served_by_the_coordinator_and_follow_a_takeover() {
    let c = Cluster::new();
    c.create_topic("orders");
    let not_coordinator = code(ResponseError::NotCoordinator);

    assert_eq!(c.commit(0, "g", 5), 0);
    assert_eq!(c.fetch(0, "g"), Ok(5));
    assert_eq!(c.list(0), vec!["g"]);
    // Broker 2 does not coordinate g: every request says so, and it lists nothing.
    assert_eq!(c.fetch(1, "g"), Err(not_coordinator));
    assert_eq!(c.commit(1, "g", 6), not_coordinator);
    assert_eq!(c.describe(1, "g"), not_coordinator);
    assert_eq!(c.describe_consumer(1, "g"), not_coordinator);
    assert_eq!(c.join(1, "g"), not_coordinator);
    assert!(c.list(1).is_empty());

    // Broker 1's lease runs out: broker 2 takes the group over with its offsets.
    c.groups.expire("g");
    assert_eq!(c.fetch(1, "g"), Ok(5));
    assert_eq!(c.list(1), vec!["g"]);
    // Broker 1 finds out at its next write (or renewal) and drops the group.
    assert_eq!(c.commit(0, "g", 7), not_coordinator);
    assert!(c.list(0).is_empty());
    assert_eq!(c.fetch(0, "g"), Err(not_coordinator));
    assert_eq!(c.commit(1, "g", 8), 0);
    assert_eq!(c.fetch(1, "g"), Ok(8));
    assert_eq!(c.groups.committed("g", "orders", 0), Some(8));

    // A renewal that finds a group gone drops it before anything is served from it.
    assert_eq!(c.commit(1, "h", 1), 0);
    c.groups.expire("h");
    c.owners[1].renew();
    assert!(c.list(1).contains(&"g".to_owned()));
    assert!(!c.list(1).contains(&"h".to_owned()));
    assert_eq!(c.join(0, "h"), 0, "broker 1 coordinates h now");
}
