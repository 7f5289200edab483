//! Consumer groups through `Broker::handle`: the classic and KIP-848 protocols, committed
//! offsets, their error codes, and that groups and offsets survive a broker that stops
//! without a clean shutdown.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use sluice_broker::{Broker, BrokerConfig};
use sluice_log::ManualClock;
use sluice_protocol::codec::Request;
use sluice_protocol::kafka_protocol::ResponseError;
use sluice_protocol::kafka_protocol::messages::*;
use sluice_protocol::kafka_protocol::protocol::StrBytes;

fn s(v: &str) -> StrBytes {
    StrBytes::from_string(v.to_owned())
}

fn group(v: &str) -> GroupId {
    GroupId(s(v))
}

const T0: i64 = 1_700_000_000_000;

struct Fixture {
    dir: tempfile::TempDir,
    clock: ManualClock,
    broker: Arc<Broker>,
    rt: tokio::runtime::Runtime,
}

fn config(dir: &std::path::Path) -> BrokerConfig {
    let mut config = BrokerConfig::new(dir);
    config.groups.classic.initial_rebalance_delay_ms = 0;
    config
}

impl Fixture {
    fn new() -> Fixture {
        let dir = tempfile::tempdir().unwrap();
        let clock = ManualClock::new(T0);
        let broker =
            Arc::new(Broker::open_with_clock(config(dir.path()), Arc::new(clock.clone())).unwrap());
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap();
        let f = Fixture {
            dir,
            clock,
            broker,
            rt,
        };
        f.create("orders", 4);
        f
    }

    /// Drops the broker without a clean shutdown and opens it again on the same directory.
    fn reopen(&mut self) {
        // Park a throwaway broker in the field so the old one can be dropped (without
        // `shutdown`: no clean-shutdown work) before the new one opens its directory.
        let scratch = tempfile::tempdir().unwrap();
        let placeholder =
            Broker::open_with_clock(config(scratch.path()), Arc::new(self.clock.clone())).unwrap();
        drop(std::mem::replace(&mut self.broker, Arc::new(placeholder)));
        let fresh = Broker::open_with_clock(config(self.dir.path()), Arc::new(self.clock.clone()));
        self.broker = Arc::new(fresh.unwrap());
    }

    fn call(&self, api_key: ApiKey, api_version: i16, body: RequestKind) -> ResponseKind {
        // Requests start on the runtime, as the server starts them (the group timer needs it).
        let _runtime = self.rt.enter();
        let handling = self.broker.handle(Request {
            api_key,
            api_version,
            correlation_id: 1,
            client_id: Some(s("test-client")),
            body,
        });
        self.rt.block_on(handling).expect("a response")
    }

    fn create(&self, topic: &str, partitions: i32) {
        let req = CreateTopicsRequest::default().with_topics(vec![
            create_topics_request::CreatableTopic::default()
                .with_name(TopicName(s(topic)))
                .with_num_partitions(partitions)
                .with_replication_factor(1),
        ]);
        match self.call(ApiKey::CreateTopics, 7, RequestKind::CreateTopics(req)) {
            ResponseKind::CreateTopics(r) => assert_eq!(r.topics[0].error_code, 0),
            other => panic!("{other:?}"),
        }
    }

    fn join(&self, group_id: &str, member_id: &str, metadata: &[u8]) -> JoinGroupResponse {
        let req = join_request(group_id, member_id, metadata);
        match self.call(ApiKey::JoinGroup, 9, RequestKind::JoinGroup(req)) {
            ResponseKind::JoinGroup(r) => r,
            other => panic!("{other:?}"),
        }
    }

    fn sync(
        &self,
        group_id: &str,
        member_id: &str,
        generation: i32,
        assignments: Vec<(String, Vec<u8>)>,
    ) -> SyncGroupResponse {
        let req = sync_request(group_id, member_id, generation, assignments);
        match self.call(ApiKey::SyncGroup, 5, RequestKind::SyncGroup(req)) {
            ResponseKind::SyncGroup(r) => r,
            other => panic!("{other:?}"),
        }
    }

    fn heartbeat(&self, group_id: &str, member_id: &str, generation: i32) -> i16 {
        let req = HeartbeatRequest::default()
            .with_group_id(group(group_id))
            .with_member_id(s(member_id))
            .with_generation_id(generation);
        match self.call(ApiKey::Heartbeat, 4, RequestKind::Heartbeat(req)) {
            ResponseKind::Heartbeat(r) => r.error_code,
            other => panic!("{other:?}"),
        }
    }

    /// Commits `offset` for each partition of `orders`; returns each partition's error code.
    fn commit(
        &self,
        group_id: &str,
        member_id: &str,
        generation: i32,
        partitions: &[(i32, i64)],
    ) -> Vec<i16> {
        self.commit_to("orders", group_id, member_id, generation, partitions, None)
    }

    fn commit_to(
        &self,
        topic: &str,
        group_id: &str,
        member_id: &str,
        generation: i32,
        partitions: &[(i32, i64)],
        metadata: Option<String>,
    ) -> Vec<i16> {
        let req = OffsetCommitRequest::default()
            .with_group_id(group(group_id))
            .with_member_id(s(member_id))
            .with_generation_id_or_member_epoch(generation)
            .with_topics(vec![
                offset_commit_request::OffsetCommitRequestTopic::default()
                    .with_name(TopicName(s(topic)))
                    .with_partitions(
                        partitions
                            .iter()
                            .map(|&(p, o)| {
                                offset_commit_request::OffsetCommitRequestPartition::default()
                                    .with_partition_index(p)
                                    .with_committed_offset(o)
                                    .with_committed_leader_epoch(3)
                                    .with_committed_metadata(
                                        metadata.clone().map(StrBytes::from_string),
                                    )
                            })
                            .collect(),
                    ),
            ]);
        match self.call(ApiKey::OffsetCommit, 9, RequestKind::OffsetCommit(req)) {
            ResponseKind::OffsetCommit(r) => r.topics[0]
                .partitions
                .iter()
                .map(|p| p.error_code)
                .collect(),
            other => panic!("{other:?}"),
        }
    }

    /// The committed offsets of `orders` partitions 0..4 (v8+ request shape).
    fn fetch(&self, group_id: &str) -> Vec<i64> {
        let req = OffsetFetchRequest::default().with_groups(vec![
            offset_fetch_request::OffsetFetchRequestGroup::default()
                .with_group_id(group(group_id))
                .with_member_epoch(-1)
                .with_topics(Some(vec![
                    offset_fetch_request::OffsetFetchRequestTopics::default()
                        .with_name(TopicName(s("orders")))
                        .with_partition_indexes(vec![0, 1, 2, 3]),
                ])),
        ]);
        match self.call(ApiKey::OffsetFetch, 9, RequestKind::OffsetFetch(req)) {
            ResponseKind::OffsetFetch(r) => {
                assert_eq!(r.groups[0].error_code, 0);
                r.groups[0].topics[0]
                    .partitions
                    .iter()
                    .map(|p| p.committed_offset)
                    .collect()
            }
            other => panic!("{other:?}"),
        }
    }

    fn describe(&self, group_id: &str, version: i16) -> describe_groups_response::DescribedGroup {
        let req = DescribeGroupsRequest::default().with_groups(vec![group(group_id)]);
        match self.call(
            ApiKey::DescribeGroups,
            version,
            RequestKind::DescribeGroups(req),
        ) {
            ResponseKind::DescribeGroups(mut r) => r.groups.remove(0),
            other => panic!("{other:?}"),
        }
    }

    fn list(&self) -> Vec<(String, String, String)> {
        let req = ListGroupsRequest::default();
        match self.call(ApiKey::ListGroups, 5, RequestKind::ListGroups(req)) {
            ResponseKind::ListGroups(r) => r
                .groups
                .into_iter()
                .map(|g| {
                    (
                        g.group_id.0.to_string(),
                        g.group_state.to_string(),
                        g.group_type.to_string(),
                    )
                })
                .collect(),
            other => panic!("{other:?}"),
        }
    }

    fn delete_group(&self, group_id: &str) -> i16 {
        let req = DeleteGroupsRequest::default().with_groups_names(vec![group(group_id)]);
        match self.call(ApiKey::DeleteGroups, 2, RequestKind::DeleteGroups(req)) {
            ResponseKind::DeleteGroups(r) => r.results[0].error_code,
            other => panic!("{other:?}"),
        }
    }

    fn consumer_heartbeat(
        &self,
        group_id: &str,
        member_id: &str,
        epoch: i32,
        owned: Option<Vec<(uuid::Uuid, Vec<i32>)>>,
    ) -> ConsumerGroupHeartbeatResponse {
        let mut req = ConsumerGroupHeartbeatRequest::default()
            .with_group_id(group(group_id))
            .with_member_id(s(member_id))
            .with_member_epoch(epoch)
            .with_rebalance_timeout_ms(30_000)
            .with_topic_partitions(owned.map(|o| {
                o.into_iter()
                    .map(|(id, parts)| {
                        consumer_group_heartbeat_request::TopicPartitions::default()
                            .with_topic_id(id)
                            .with_partitions(parts)
                    })
                    .collect()
            }));
        if epoch == 0 {
            req.subscribed_topic_names = Some(vec![TopicName(s("orders"))]);
        }
        match self.call(
            ApiKey::ConsumerGroupHeartbeat,
            1,
            RequestKind::ConsumerGroupHeartbeat(req),
        ) {
            ResponseKind::ConsumerGroupHeartbeat(r) => r,
            other => panic!("{other:?}"),
        }
    }
}

fn join_request(group_id: &str, member_id: &str, metadata: &[u8]) -> JoinGroupRequest {
    JoinGroupRequest::default()
        .with_group_id(group(group_id))
        .with_member_id(s(member_id))
        .with_session_timeout_ms(10_000)
        .with_rebalance_timeout_ms(10_000)
        .with_protocol_type(s("consumer"))
        .with_protocols(vec![
            join_group_request::JoinGroupRequestProtocol::default()
                .with_name(s("range"))
                .with_metadata(Bytes::copy_from_slice(metadata)),
        ])
}

fn sync_request(
    group_id: &str,
    member_id: &str,
    generation: i32,
    assignments: Vec<(String, Vec<u8>)>,
) -> SyncGroupRequest {
    SyncGroupRequest::default()
        .with_group_id(group(group_id))
        .with_member_id(s(member_id))
        .with_generation_id(generation)
        .with_protocol_type(Some(s("consumer")))
        .with_protocol_name(Some(s("range")))
        .with_assignments(
            assignments
                .into_iter()
                .map(|(m, a)| {
                    sync_group_request::SyncGroupRequestAssignment::default()
                        .with_member_id(s(&m))
                        .with_assignment(Bytes::from(a))
                })
                .collect(),
        )
}

/// Joins a one-member classic group: returns (member id, generation).
fn join_alone(f: &Fixture, group_id: &str) -> (String, i32) {
    let first = f.join(group_id, "", b"m");
    assert_eq!(first.error_code, ResponseError::MemberIdRequired.code());
    let member = first.member_id.to_string();
    assert!(!member.is_empty());
    let joined = f.join(group_id, &member, b"m");
    assert_eq!(joined.error_code, 0);
    assert_eq!(joined.leader.as_str(), member);
    let synced = f.sync(
        group_id,
        &member,
        joined.generation_id,
        vec![(member.clone(), b"all".to_vec())],
    );
    assert_eq!(synced.error_code, 0);
    assert_eq!(&synced.assignment[..], b"all");
    (member, joined.generation_id)
}

#[test]
fn find_coordinator_names_this_broker() {
    let f = Fixture::new();
    let req = FindCoordinatorRequest::default()
        .with_key_type(0)
        .with_coordinator_keys(vec![s("g1"), s("")]);
    match f.call(
        ApiKey::FindCoordinator,
        4,
        RequestKind::FindCoordinator(req),
    ) {
        ResponseKind::FindCoordinator(r) => {
            assert_eq!(r.coordinators[0].error_code, 0);
            assert_eq!(r.coordinators[0].node_id.0, 1);
            assert_eq!(r.coordinators[0].port, 9092);
            assert_eq!(
                r.coordinators[1].error_code,
                ResponseError::InvalidRequest.code()
            );
        }
        other => panic!("{other:?}"),
    }
    let req = FindCoordinatorRequest::default().with_key(s("g1"));
    match f.call(
        ApiKey::FindCoordinator,
        1,
        RequestKind::FindCoordinator(req),
    ) {
        ResponseKind::FindCoordinator(r) => {
            assert_eq!(r.error_code, 0);
            assert_eq!(r.host.as_str(), "127.0.0.1");
        }
        other => panic!("{other:?}"),
    }
}

/// A transactional producer's FindCoordinator gets a refusal every client treats as final,
/// with a message that says why: v1 as librdkafka sends it, v4 as the Java producer does.
#[test]
fn find_coordinator_for_a_transactional_id_is_refused_for_good() {
    let f = Fixture::new();
    let unsupported = ResponseError::ClusterAuthorizationFailed.code();
    let says_why = |message: Option<&str>| {
        let message = message.unwrap_or_default();
        assert!(
            message.contains("transactions are not supported by Sluice yet")
                && message.contains("\"tx-1\""),
            "{message}"
        );
    };
    let req = FindCoordinatorRequest::default()
        .with_key_type(1)
        .with_key(s("tx-1"));
    match f.call(
        ApiKey::FindCoordinator,
        1,
        RequestKind::FindCoordinator(req),
    ) {
        ResponseKind::FindCoordinator(r) => {
            assert_eq!(r.error_code, unsupported);
            assert_eq!(r.node_id.0, -1);
            says_why(r.error_message.as_deref());
        }
        other => panic!("{other:?}"),
    }
    let req = FindCoordinatorRequest::default()
        .with_key_type(1)
        .with_coordinator_keys(vec![s("tx-1")]);
    match f.call(
        ApiKey::FindCoordinator,
        4,
        RequestKind::FindCoordinator(req),
    ) {
        ResponseKind::FindCoordinator(r) => {
            assert_eq!(r.coordinators[0].error_code, unsupported);
            says_why(r.coordinators[0].error_message.as_deref());
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn two_members_rebalance_and_share_the_work() {
    let f = Fixture::new();
    let (a, generation) = join_alone(&f, "g");
    assert_eq!(f.heartbeat("g", &a, generation), 0);

    // A second member joins: it waits for the rebalance, which the first member learns of
    // from its heartbeat and joins.
    let b_first = f.join("g", "", b"b");
    let b = b_first.member_id.to_string();
    let broker = Arc::clone(&f.broker);
    let b_join = f.rt.spawn({
        let b = b.clone();
        async move {
            let req = join_request("g", &b, b"b");
            broker
                .handle(Request {
                    api_key: ApiKey::JoinGroup,
                    api_version: 9,
                    correlation_id: 2,
                    client_id: None,
                    body: RequestKind::JoinGroup(req),
                })
                .await
        }
    });
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    while f.heartbeat("g", &a, generation) != ResponseError::RebalanceInProgress.code() {
        assert!(std::time::Instant::now() < deadline, "no rebalance started");
        std::thread::sleep(Duration::from_millis(10));
    }
    let a_join = f.join("g", &a, b"a");
    assert_eq!(a_join.error_code, 0);
    let b_join = match f.rt.block_on(b_join).unwrap() {
        Some(ResponseKind::JoinGroup(r)) => r,
        other => panic!("{other:?}"),
    };
    assert_eq!(b_join.error_code, 0);
    assert_eq!(a_join.generation_id, generation + 1);
    assert_eq!(b_join.generation_id, generation + 1);
    // Exactly one leader, who alone sees the members.
    let (leader, follower) = if a_join.leader.as_str() == a {
        (&a_join, &b_join)
    } else {
        (&b_join, &a_join)
    };
    assert_eq!(leader.members.len(), 2);
    assert!(follower.members.is_empty());

    // The follower's SyncGroup waits for the leader's assignment.
    let broker = Arc::clone(&f.broker);
    let follower_id = follower.member_id.to_string();
    let leader_id = leader.member_id.to_string();
    let new_generation = leader.generation_id;
    let follower_sync = f.rt.spawn({
        let follower_id = follower_id.clone();
        async move {
            let req = sync_request("g", &follower_id, new_generation, vec![]);
            broker
                .handle(Request {
                    api_key: ApiKey::SyncGroup,
                    api_version: 5,
                    correlation_id: 3,
                    client_id: None,
                    body: RequestKind::SyncGroup(req),
                })
                .await
        }
    });
    std::thread::sleep(Duration::from_millis(50));
    let leader_sync = f.sync(
        "g",
        &leader_id,
        new_generation,
        vec![
            (leader_id.clone(), b"p0,p1".to_vec()),
            (follower_id.clone(), b"p2,p3".to_vec()),
        ],
    );
    assert_eq!(&leader_sync.assignment[..], b"p0,p1");
    match f.rt.block_on(follower_sync).unwrap() {
        Some(ResponseKind::SyncGroup(r)) => {
            assert_eq!(r.error_code, 0);
            assert_eq!(&r.assignment[..], b"p2,p3");
        }
        other => panic!("{other:?}"),
    }

    let described = f.describe("g", 5);
    assert_eq!(described.group_state.as_str(), "Stable");
    assert_eq!(described.protocol_data.as_str(), "range");
    assert_eq!(described.members.len(), 2);

    // The old generation is fenced from committing; the new one commits.
    assert_eq!(
        f.commit("g", &a, generation, &[(0, 5)]),
        vec![ResponseError::IllegalGeneration.code()]
    );
    assert_eq!(
        f.commit("g", &leader_id, new_generation, &[(0, 5), (1, 6)]),
        vec![0, 0]
    );
    assert_eq!(f.fetch("g"), vec![5, 6, -1, -1]);

    // A non-empty group cannot be deleted.
    assert_eq!(f.delete_group("g"), ResponseError::NonEmptyGroup.code());
}

#[test]
fn offsets_commit_errors_per_partition() {
    let f = Fixture::new();
    // An admin commit creates a group that holds only offsets.
    assert_eq!(
        f.commit("simple", "", -1, &[(0, 10), (9, 1)]),
        vec![0, ResponseError::UnknownTopicOrPartition.code()]
    );
    assert_eq!(
        f.commit_to("nope", "simple", "", -1, &[(0, 1)], None),
        vec![ResponseError::UnknownTopicOrPartition.code()]
    );
    assert_eq!(
        f.commit_to(
            "orders",
            "simple",
            "",
            -1,
            &[(1, 1)],
            Some("x".repeat(5000))
        ),
        vec![ResponseError::OffsetMetadataTooLarge.code()]
    );
    assert_eq!(
        f.commit_to("orders", "", "", -1, &[(1, 1)], None),
        vec![ResponseError::InvalidGroupId.code()]
    );
    assert_eq!(f.fetch("simple"), vec![10, -1, -1, -1]);
    assert_eq!(f.fetch("never-seen"), vec![-1, -1, -1, -1]);
    assert!(f.list().contains(&(
        "simple".to_owned(),
        "Empty".to_owned(),
        "classic".to_owned()
    )));

    // A commit naming a member of a group that does not exist is refused.
    assert_ne!(f.commit("ghost", "m-1", 3, &[(0, 1)]), vec![0]);

    // OffsetDelete, then DeleteGroups of an empty group.
    let req = OffsetDeleteRequest::default()
        .with_group_id(group("simple"))
        .with_topics(vec![
            offset_delete_request::OffsetDeleteRequestTopic::default()
                .with_name(TopicName(s("orders")))
                .with_partitions(vec![
                    offset_delete_request::OffsetDeleteRequestPartition::default()
                        .with_partition_index(0),
                ]),
        ]);
    match f.call(ApiKey::OffsetDelete, 0, RequestKind::OffsetDelete(req)) {
        ResponseKind::OffsetDelete(r) => {
            assert_eq!(r.error_code, 0);
            assert_eq!(r.topics[0].partitions[0].error_code, 0);
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(f.fetch("simple"), vec![-1, -1, -1, -1]);
    assert_eq!(f.delete_group("simple"), 0);
    assert_eq!(
        f.delete_group("simple"),
        ResponseError::GroupIdNotFound.code()
    );

    // DescribeGroups of an unknown group: Dead before v6, GROUP_ID_NOT_FOUND from v6.
    let old = f.describe("never-seen", 5);
    assert_eq!((old.error_code, old.group_state.as_str()), (0, "Dead"));
    let new = f.describe("never-seen", 6);
    assert_eq!(new.error_code, ResponseError::GroupIdNotFound.code());
}

#[test]
fn session_expiry_empties_the_group() {
    let f = Fixture::new();
    let (a, generation) = join_alone(&f, "g");
    f.clock.advance(11_000);
    // The coordinator's timer runs every 100 ms on the runtime.
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    loop {
        let d = f.describe("g", 5);
        if d.group_state.as_str() == "Empty" {
            assert!(d.members.is_empty());
            break;
        }
        assert!(std::time::Instant::now() < deadline, "member never expired");
        std::thread::sleep(Duration::from_millis(50));
    }
    assert_eq!(
        f.heartbeat("g", &a, generation),
        ResponseError::UnknownMemberId.code()
    );
}

#[test]
fn groups_and_offsets_survive_an_unclean_restart() {
    let mut f = Fixture::new();
    let (member, generation) = join_alone(&f, "g");
    assert_eq!(
        f.commit("g", &member, generation, &[(0, 7), (3, 9)]),
        vec![0, 0]
    );
    assert_eq!(f.commit("admin", "", -1, &[(2, 4)]), vec![0]);
    f.reopen();
    assert_eq!(f.fetch("g"), vec![7, -1, -1, 9]);
    assert_eq!(f.fetch("admin"), vec![-1, -1, 4, -1]);
    // The stable group came back with its member, generation and assignment.
    let d = f.describe("g", 5);
    assert_eq!(d.group_state.as_str(), "Stable");
    assert_eq!(d.members.len(), 1);
    assert_eq!(&d.members[0].member_assignment[..], b"all");
    assert_eq!(f.heartbeat("g", &member, generation), 0);
    assert_eq!(f.commit("g", &member, generation, &[(0, 8)]), vec![0]);
    f.reopen();
    assert_eq!(f.fetch("g"), vec![8, -1, -1, 9]);
}

#[test]
fn kip848_members_split_partitions_after_revocation() {
    let mut f = Fixture::new();
    let topic_id = f.broker.topics().get("orders").unwrap().id;
    let owned = |r: &ConsumerGroupHeartbeatResponse| -> Option<Vec<i32>> {
        r.assignment.as_ref().map(|a| {
            a.topic_partitions
                .iter()
                .filter(|tp| tp.topic_id == topic_id)
                .flat_map(|tp| tp.partitions.clone())
                .collect()
        })
    };
    let a1 = f.consumer_heartbeat("cg", "member-a", 0, Some(vec![]));
    assert_eq!(a1.error_code, 0, "{:?}", a1.error_message);
    assert_eq!(a1.member_id.as_deref(), Some("member-a"));
    assert_eq!(owned(&a1), Some(vec![0, 1, 2, 3]));
    let epoch_a = a1.member_epoch;

    let b1 = f.consumer_heartbeat("cg", "member-b", 0, Some(vec![]));
    assert_eq!(b1.error_code, 0);
    // B gets nothing A still owns.
    let b_first = owned(&b1).unwrap_or_default();
    assert!(b_first.is_empty(), "{b_first:?}");

    // A learns it must give up two partitions.
    let a2 = f.consumer_heartbeat(
        "cg",
        "member-a",
        epoch_a,
        Some(vec![(topic_id, vec![0, 1, 2, 3])]),
    );
    assert_eq!(a2.error_code, 0);
    let kept = owned(&a2).expect("a new assignment for A");
    assert_eq!(kept.len(), 2);
    // A revokes them; then B gets the other two.
    let a3 = f.consumer_heartbeat(
        "cg",
        "member-a",
        a2.member_epoch,
        Some(vec![(topic_id, kept.clone())]),
    );
    assert_eq!(a3.error_code, 0);
    let b2 = f.consumer_heartbeat("cg", "member-b", b1.member_epoch, Some(vec![]));
    assert_eq!(b2.error_code, 0);
    let mut got = owned(&b2).expect("B's partitions");
    got.extend(&kept);
    got.sort();
    assert_eq!(got, vec![0, 1, 2, 3]);

    // Offsets are validated against member epochs.
    assert_eq!(
        f.commit("cg", "member-b", b2.member_epoch, &[(0, 1)])[0],
        0,
        "commit at the member's epoch"
    );
    assert_eq!(
        f.commit("cg", "member-b", b2.member_epoch - 1, &[(0, 1)])[0],
        ResponseError::StaleMemberEpoch.code()
    );

    // Described, listed, and restored after an unclean restart.
    let req = ConsumerGroupDescribeRequest::default().with_group_ids(vec![group("cg")]);
    match f.call(
        ApiKey::ConsumerGroupDescribe,
        1,
        RequestKind::ConsumerGroupDescribe(req.clone()),
    ) {
        ResponseKind::ConsumerGroupDescribe(r) => {
            assert_eq!(r.groups[0].error_code, 0);
            assert_eq!(r.groups[0].members.len(), 2);
        }
        other => panic!("{other:?}"),
    }
    assert!(
        f.list()
            .iter()
            .any(|(id, _, ty)| id == "cg" && ty == "consumer")
    );
    f.reopen();
    match f.call(
        ApiKey::ConsumerGroupDescribe,
        1,
        RequestKind::ConsumerGroupDescribe(req),
    ) {
        ResponseKind::ConsumerGroupDescribe(r) => {
            assert_eq!(r.groups[0].error_code, 0);
            assert_eq!(r.groups[0].members.len(), 2);
        }
        other => panic!("{other:?}"),
    }
    // Leaving with epoch -1 removes the member.
    let left = f.consumer_heartbeat("cg", "member-b", -1, None);
    assert_eq!(left.error_code, 0);
    assert_eq!(left.member_epoch, -1);
}
