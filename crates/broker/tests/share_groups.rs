//! Share groups (KIP-932) through `Broker::handle`: membership, share sessions, acquisition,
//! acknowledgement, lock expiry, fair sharing, group configs, and that acknowledged records
//! never come back after a broker stops without a clean shutdown.

use std::sync::Arc;
use std::time::Duration;

use sluice_broker::{Broker, BrokerConfig};
use sluice_log::ManualClock;
use sluice_log::batch::build::{Record, batch};
use sluice_protocol::codec::Request;
use sluice_protocol::kafka_protocol::ResponseError;
use sluice_protocol::kafka_protocol::messages::*;
use sluice_protocol::kafka_protocol::protocol::StrBytes;
use uuid::Uuid;

const T0: i64 = 1_700_000_000_000;
const ACCEPT: i8 = 1;
const RELEASE: i8 = 2;
const REJECT: i8 = 3;

fn s(v: &str) -> StrBytes {
    StrBytes::from_string(v.to_owned())
}

struct Fixture {
    dir: tempfile::TempDir,
    clock: ManualClock,
    broker: Arc<Broker>,
    rt: tokio::runtime::Runtime,
    topic_id: Uuid,
    /// The client connection requests come in on (0: none).
    connection: std::cell::Cell<u64>,
}

impl Fixture {
    fn new(partitions: i32) -> Fixture {
        let dir = tempfile::tempdir().unwrap();
        let clock = ManualClock::new(T0);
        let broker = Arc::new(
            Broker::open_with_clock(BrokerConfig::new(dir.path()), Arc::new(clock.clone()))
                .unwrap(),
        );
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap();
        let topic = broker
            .create_topic("q", partitions, Default::default())
            .unwrap();
        let topic_id = topic.id;
        Fixture {
            dir,
            clock,
            broker,
            rt,
            topic_id,
            connection: std::cell::Cell::new(0),
        }
    }

    /// Drops the broker without a clean shutdown and opens it again on the same directory.
    fn reopen(&mut self) {
        let scratch = tempfile::tempdir().unwrap();
        let placeholder = Broker::open_with_clock(
            BrokerConfig::new(scratch.path()),
            Arc::new(self.clock.clone()),
        )
        .unwrap();
        drop(std::mem::replace(&mut self.broker, Arc::new(placeholder)));
        let fresh = Broker::open_with_clock(
            BrokerConfig::new(self.dir.path()),
            Arc::new(self.clock.clone()),
        );
        self.broker = Arc::new(fresh.unwrap());
    }

    fn call(&self, api_key: ApiKey, api_version: i16, body: RequestKind) -> ResponseKind {
        let _runtime = self.rt.enter();
        let caller = sluice_broker::Caller {
            connection: self.connection.get(),
            ..sluice_broker::Caller::default()
        };
        let request = Request {
            api_key,
            api_version,
            correlation_id: 1,
            client_id: Some(s("test-client")),
            body,
        };
        let handling = self.broker.handle_from(request, &caller);
        self.rt.block_on(handling).expect("a response").body
    }

    /// Appends `n` one-record batches to `partition` and waits until they are durable.
    fn produce(&self, partition: i32, n: usize) {
        let topic = self.broker.topics().get("q").unwrap();
        for i in 0..n {
            let value = format!("v{i}");
            let record = Record {
                timestamp_delta: 0,
                key: None,
                value: Some(value.as_bytes()),
            };
            let appended = self
                .broker
                .append(&topic, partition, &batch(T0, &[record]))
                .unwrap();
            self.rt.block_on(appended.durable()).unwrap();
        }
    }

    fn set_configs(&self, group: &str, configs: &[(&str, &str)]) -> i16 {
        let req = IncrementalAlterConfigsRequest::default().with_resources(vec![
            incremental_alter_configs_request::AlterConfigsResource::default()
                .with_resource_type(32)
                .with_resource_name(s(group))
                .with_configs(
                    configs
                        .iter()
                        .map(|(k, v)| {
                            incremental_alter_configs_request::AlterableConfig::default()
                                .with_name(s(k))
                                .with_config_operation(0)
                                .with_value(Some(s(v)))
                        })
                        .collect(),
                ),
        ]);
        match self.call(
            ApiKey::IncrementalAlterConfigs,
            1,
            RequestKind::IncrementalAlterConfigs(req),
        ) {
            ResponseKind::IncrementalAlterConfigs(r) => r.responses[0].error_code,
            other => panic!("{other:?}"),
        }
    }

    fn heartbeat(&self, group: &str, member: &str, epoch: i32) -> ShareGroupHeartbeatResponse {
        let mut req = ShareGroupHeartbeatRequest::default()
            .with_group_id(GroupId(s(group)))
            .with_member_id(s(member))
            .with_member_epoch(epoch);
        if epoch == 0 {
            req = req.with_subscribed_topic_names(Some(vec![TopicName(s("q"))]));
        }
        match self.call(
            ApiKey::ShareGroupHeartbeat,
            1,
            RequestKind::ShareGroupHeartbeat(req),
        ) {
            ResponseKind::ShareGroupHeartbeat(r) => r,
            other => panic!("{other:?}"),
        }
    }

    /// A ShareFetch of partition `p` with `acks` (`(first, last, type)`) piggybacked.
    fn fetch(
        &self,
        group: &str,
        member: &str,
        session_epoch: i32,
        p: i32,
        acks: &[(i64, i64, i8)],
        max_records: i32,
    ) -> ShareFetchResponse {
        let partition = share_fetch_request::FetchPartition::default()
            .with_partition_index(p)
            .with_acknowledgement_batches(
                acks.iter()
                    .map(|&(first, last, t)| {
                        share_fetch_request::AcknowledgementBatch::default()
                            .with_first_offset(first)
                            .with_last_offset(last)
                            .with_acknowledge_types(vec![t])
                    })
                    .collect(),
            );
        let req = ShareFetchRequest::default()
            .with_group_id(Some(GroupId(s(group))))
            .with_member_id(Some(s(member)))
            .with_share_session_epoch(session_epoch)
            .with_max_wait_ms(0)
            .with_min_bytes(1)
            .with_max_bytes(1 << 20)
            .with_max_records(max_records)
            .with_batch_size(max_records)
            .with_topics(vec![
                share_fetch_request::FetchTopic::default()
                    .with_topic_id(self.topic_id)
                    .with_partitions(vec![partition]),
            ]);
        match self.call(ApiKey::ShareFetch, 1, RequestKind::ShareFetch(req)) {
            ResponseKind::ShareFetch(r) => r,
            other => panic!("{other:?}"),
        }
    }

    fn acknowledge(
        &self,
        group: &str,
        member: &str,
        session_epoch: i32,
        p: i32,
        acks: &[(i64, i64, i8)],
    ) -> ShareAcknowledgeResponse {
        let req = ShareAcknowledgeRequest::default()
            .with_group_id(Some(GroupId(s(group))))
            .with_member_id(Some(s(member)))
            .with_share_session_epoch(session_epoch)
            .with_topics(vec![
                share_acknowledge_request::AcknowledgeTopic::default()
                    .with_topic_id(self.topic_id)
                    .with_partitions(vec![
                        share_acknowledge_request::AcknowledgePartition::default()
                            .with_partition_index(p)
                            .with_acknowledgement_batches(
                                acks.iter()
                                    .map(|&(first, last, t)| {
                                        share_acknowledge_request::AcknowledgementBatch::default()
                                            .with_first_offset(first)
                                            .with_last_offset(last)
                                            .with_acknowledge_types(vec![t])
                                    })
                                    .collect(),
                            ),
                    ]),
            ]);
        match self.call(
            ApiKey::ShareAcknowledge,
            1,
            RequestKind::ShareAcknowledge(req),
        ) {
            ResponseKind::ShareAcknowledge(r) => r,
            other => panic!("{other:?}"),
        }
    }
}

/// `(offset, delivery count)` of every acquired record in a response.
fn acquired(r: &ShareFetchResponse) -> Vec<(i64, i16)> {
    assert_eq!(r.error_code, 0, "{r:?}");
    r.responses
        .iter()
        .flat_map(|t| &t.partitions)
        .flat_map(|p| &p.acquired_records)
        .flat_map(|a| (a.first_offset..=a.last_offset).map(move |o| (o, a.delivery_count)))
        .collect()
}

fn join(f: &Fixture, group: &str, member: &str) -> i32 {
    let r = f.heartbeat(group, member, 0);
    assert_eq!(r.error_code, 0, "{r:?}");
    let epoch = r.member_epoch;
    // Heartbeat once more so the member sees the latest assignment epoch.
    let r = f.heartbeat(group, member, epoch);
    assert_eq!(r.error_code, 0, "{r:?}");
    r.member_epoch
}

#[test]
fn acknowledged_records_never_come_back_after_an_unclean_restart() {
    let mut f = Fixture::new(1);
    assert_eq!(
        f.set_configs("g", &[("share.auto.offset.reset", "earliest")]),
        0
    );
    f.produce(0, 10);
    join(&f, "g", "m1");
    let got = acquired(&f.fetch("g", "m1", 0, 0, &[], 500));
    assert_eq!(got, (0..10).map(|o| (o, 1)).collect::<Vec<_>>());
    let r = f.acknowledge(
        "g",
        "m1",
        1,
        0,
        &[(0, 4, ACCEPT), (5, 6, RELEASE), (7, 7, REJECT)],
    );
    assert_eq!(r.error_code, 0, "{r:?}");
    assert!(
        r.responses[0].partitions.iter().all(|p| p.error_code == 0),
        "{r:?}"
    );

    f.reopen();
    // The member is back (its session timeout restarts); its share session is not.
    let r = f.fetch("g", "m1", 2, 0, &[], 500);
    assert_eq!(r.error_code, ResponseError::ShareSessionNotFound.code());
    let got = acquired(&f.fetch("g", "m1", 0, 0, &[], 500));
    // Released 5 and 6 come back a second time; 8 and 9 (acquired, never acknowledged) are
    // redelivered too; 0..=4 (accepted) and 7 (rejected) never.
    assert_eq!(got, vec![(5, 2), (6, 2), (8, 2), (9, 2)]);
    let r = f.fetch("g", "m1", 1, 0, &[(5, 6, ACCEPT), (8, 9, ACCEPT)], 500);
    assert!(acquired(&r).is_empty());
    f.reopen();
    let got = acquired(&f.fetch("g", "m1", 0, 0, &[], 500));
    assert!(got.is_empty(), "{got:?}");
}

#[test]
fn an_expired_lock_hands_the_records_to_another_member() {
    let f = Fixture::new(1);
    assert_eq!(
        f.set_configs(
            "g",
            &[
                ("share.auto.offset.reset", "earliest"),
                ("share.record.lock.duration.ms", "5000")
            ]
        ),
        0
    );
    f.produce(0, 3);
    join(&f, "g", "a");
    join(&f, "g", "b");
    let r = f.fetch("g", "a", 0, 0, &[], 500);
    assert_eq!(r.acquisition_lock_timeout_ms, 5000);
    assert_eq!(acquired(&r).len(), 3);
    // b finds nothing while a holds the locks.
    assert!(acquired(&f.fetch("g", "b", 0, 0, &[], 500)).is_empty());
    f.clock.advance(5_001);
    // The coordinator's timer releases expired locks within its tick.
    let mut got = Vec::new();
    for epoch in 1..50 {
        got = acquired(&f.fetch("g", "b", epoch, 0, &[], 500));
        if !got.is_empty() {
            break;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    assert_eq!(got, vec![(0, 2), (1, 2), (2, 2)]);
    // a's late acknowledgement is refused: the records are b's now.
    let r = f.acknowledge("g", "a", 1, 0, &[(0, 2, ACCEPT)]);
    assert_eq!(
        r.responses[0].partitions[0].error_code,
        ResponseError::InvalidRecordState.code()
    );
}

#[test]
fn fair_sharing_splits_the_lock_budget_and_greedy_does_not() {
    let f = Fixture::new(1);
    assert_eq!(
        f.set_configs(
            "fair",
            &[
                ("share.auto.offset.reset", "earliest"),
                ("share.partition.max.record.locks", "100")
            ]
        ),
        0
    );
    assert_eq!(
        f.set_configs(
            "greedy",
            &[
                ("share.auto.offset.reset", "earliest"),
                ("share.partition.max.record.locks", "100"),
                ("share.acquire.policy", "greedy")
            ]
        ),
        0
    );
    f.produce(0, 300);
    for group in ["fair", "greedy"] {
        for m in ["a", "b", "c", "d"] {
            join(&f, group, m);
            // Open each member's session (nothing acquired yet for the later ones' counts).
        }
    }
    let counts = |group: &str| -> Vec<usize> {
        // Every member opens its session first, so each fetch sees four fetchers.
        for m in ["a", "b", "c", "d"] {
            let r = f.fetch(group, m, 0, 0, &[], 1);
            let got = acquired(&r);
            assert_eq!(got.len(), 1, "{group}/{m}: {got:?}");
        }
        ["a", "b", "c", "d"]
            .iter()
            .map(|m| acquired(&f.fetch(group, m, 1, 0, &[], 500)).len())
            .collect()
    };
    // Fair: half of 100 locks over 4 fetchers, 13 each (one already held from the first
    // fetch).
    assert_eq!(counts("fair"), vec![12, 12, 12, 12]);
    // Greedy: the first fetch takes the rest of the window, the others nothing.
    assert_eq!(counts("greedy"), vec![96, 0, 0, 0]);
}

#[test]
fn share_requests_are_checked() {
    let f = Fixture::new(1);
    // A member that never joined.
    let r = f.fetch("g", "nobody", 0, 0, &[], 500);
    assert_eq!(r.error_code, ResponseError::UnknownMemberId.code());
    let epoch = join(&f, "g", "m");
    let r = f.heartbeat("g", "m", epoch + 7);
    assert_eq!(r.error_code, ResponseError::FencedMemberEpoch.code());
    // Session epochs.
    assert_eq!(f.fetch("g", "m", 0, 0, &[], 500).error_code, 0);
    let r = f.fetch("g", "m", 5, 0, &[], 500);
    assert_eq!(r.error_code, ResponseError::InvalidShareSessionEpoch.code());
    // Acknowledging records the member does not hold.
    let r = f.fetch("g", "m", 1, 0, &[(0, 3, ACCEPT)], 500);
    let p = &r.responses[0].partitions[0];
    assert_eq!(
        p.acknowledge_error_code,
        ResponseError::InvalidRecordState.code()
    );
    // Group configs: unknown names and bad values are INVALID_CONFIG.
    assert_eq!(
        f.set_configs("g", &[("share.record.lock.duration.ms", "soon")]),
        ResponseError::InvalidConfig.code()
    );
    assert_eq!(
        f.set_configs("g", &[("share.unknown", "1")]),
        ResponseError::InvalidConfig.code()
    );
    // A consumer-group request for the share group is refused.
    let req = ConsumerGroupHeartbeatRequest::default()
        .with_group_id(GroupId(s("g")))
        .with_member_id(s("x"))
        .with_member_epoch(0)
        .with_rebalance_timeout_ms(1000)
        .with_subscribed_topic_names(Some(vec![TopicName(s("q"))]));
    match f.call(
        ApiKey::ConsumerGroupHeartbeat,
        1,
        RequestKind::ConsumerGroupHeartbeat(req),
    ) {
        ResponseKind::ConsumerGroupHeartbeat(r) => {
            assert_eq!(
                r.error_code,
                ResponseError::InconsistentGroupProtocol.code()
            )
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn share_groups_are_listed_described_and_configured() {
    let f = Fixture::new(2);
    join(&f, "sg", "m1");
    join(&f, "sg", "m2");
    let req = ListGroupsRequest::default().with_types_filter(vec![s("share")]);
    match f.call(ApiKey::ListGroups, 5, RequestKind::ListGroups(req)) {
        ResponseKind::ListGroups(r) => {
            let listed: Vec<_> = r
                .groups
                .iter()
                .map(|g| (g.group_id.0.to_string(), g.group_type.to_string()))
                .collect();
            assert_eq!(listed, vec![("sg".to_owned(), "share".to_owned())]);
        }
        other => panic!("{other:?}"),
    }
    let req = ShareGroupDescribeRequest::default().with_group_ids(vec![GroupId(s("sg"))]);
    match f.call(
        ApiKey::ShareGroupDescribe,
        1,
        RequestKind::ShareGroupDescribe(req),
    ) {
        ResponseKind::ShareGroupDescribe(r) => {
            let g = &r.groups[0];
            assert_eq!((g.error_code, g.group_state.as_str()), (0, "Stable"));
            assert_eq!(g.members.len(), 2);
            let assigned: usize = g
                .members
                .iter()
                .flat_map(|m| &m.assignment.topic_partitions)
                .map(|t| t.partitions.len())
                .sum();
            assert_eq!(assigned, 2);
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(
        f.set_configs("sg", &[("share.record.lock.duration.ms", "15000")]),
        0
    );
    let req = DescribeConfigsRequest::default().with_resources(vec![
        describe_configs_request::DescribeConfigsResource::default()
            .with_resource_type(32)
            .with_resource_name(s("sg"))
            .with_configuration_keys(None),
    ]);
    match f.call(
        ApiKey::DescribeConfigs,
        4,
        RequestKind::DescribeConfigs(req),
    ) {
        ResponseKind::DescribeConfigs(r) => {
            assert_eq!(r.results[0].error_code, 0, "{r:?}");
            let configs = &r.results[0].configs;
            let lock = configs
                .iter()
                .find(|c| c.name.as_str() == "share.record.lock.duration.ms")
                .unwrap();
            assert_eq!(lock.value.as_deref(), Some("15000"));
            assert_eq!(lock.config_source, 8);
            let reset = configs
                .iter()
                .find(|c| c.name.as_str() == "share.auto.offset.reset")
                .unwrap();
            assert_eq!(
                (reset.value.as_deref(), reset.config_source),
                (Some("latest"), 5)
            );
        }
        other => panic!("{other:?}"),
    }
    // Leaving empties the group; then it can be deleted.
    for m in ["m1", "m2"] {
        assert_eq!(f.heartbeat("sg", m, -1).error_code, 0);
    }
    let req = DeleteGroupsRequest::default().with_groups_names(vec![GroupId(s("sg"))]);
    match f.call(ApiKey::DeleteGroups, 2, RequestKind::DeleteGroups(req)) {
        ResponseKind::DeleteGroups(r) => assert_eq!(r.results[0].error_code, 0),
        other => panic!("{other:?}"),
    }
}

#[test]
fn a_share_partition_started_at_the_log_end_keeps_its_start_across_a_restart() {
    let mut f = Fixture::new(1);
    f.produce(0, 5);
    join(&f, "g", "m");
    // `latest`: the partition starts at the log end, 5; nothing to acquire yet.
    assert!(acquired(&f.fetch("g", "m", 0, 0, &[], 500)).is_empty());
    f.produce(0, 3);
    assert_eq!(
        acquired(&f.fetch("g", "m", 1, 0, &[], 500)),
        vec![(5, 1), (6, 1), (7, 1)]
    );
    // A crash before any acknowledgement: the start (5) was stored when the partition
    // started, so the delivered records come back rather than being skipped.
    f.reopen();
    f.produce(0, 2);
    // (Acquisitions are not stored, so their delivery counts start again: at-least-once.)
    let got = acquired(&f.fetch("g", "m", 0, 0, &[], 500));
    let offsets: Vec<i64> = got.iter().map(|&(o, _)| o).collect();
    assert_eq!(offsets, vec![5, 6, 7, 8, 9]);
}

#[test]
fn v2_fetches_take_an_acquire_mode_and_renew_locks() {
    use sluice_protocol::share_v2::{ShareAcquireMode, ShareFetchRequestExt};
    let f = Fixture::new(1);
    assert_eq!(
        f.set_configs(
            "g",
            &[
                ("share.auto.offset.reset", "earliest"),
                ("share.record.lock.duration.ms", "5000")
            ]
        ),
        0
    );
    f.produce(0, 10);
    join(&f, "g", "a");
    join(&f, "g", "b");
    let v2 = |member: &str, epoch: i32, acks: &[(i64, i64, i8)], max_records: i32| {
        let partition = share_fetch_request::FetchPartition::default()
            .with_partition_index(0)
            .with_acknowledgement_batches(
                acks.iter()
                    .map(|&(first, last, t)| {
                        share_fetch_request::AcknowledgementBatch::default()
                            .with_first_offset(first)
                            .with_last_offset(last)
                            .with_acknowledge_types(vec![t])
                    })
                    .collect(),
            );
        ShareFetchRequest::default()
            .with_group_id(Some(GroupId(s("g"))))
            .with_member_id(Some(s(member)))
            .with_share_session_epoch(epoch)
            .with_max_bytes(if max_records > 0 { 1 << 20 } else { 0 })
            .with_max_records(max_records)
            .with_batch_size(max_records)
            .with_topics(vec![
                share_fetch_request::FetchTopic::default()
                    .with_topic_id(f.topic_id)
                    .with_partitions(vec![partition]),
            ])
    };
    let call = |req: ShareFetchRequest| match f.call(
        ApiKey::ShareFetch,
        2,
        RequestKind::ShareFetch(req),
    ) {
        ResponseKind::ShareFetch(r) => r,
        other => panic!("{other:?}"),
    };
    // record_limit: at most max_records.
    let r = call(v2("a", 0, &[], 3).with_share_acquire_mode(ShareAcquireMode::RecordLimit));
    assert_eq!(acquired(&r), vec![(0, 1), (1, 1), (2, 1)]);
    // An acquire mode Kafka does not define.
    let r = call(v2("a", 1, &[], 3).with_share_acquire_mode_id(7));
    assert_eq!(r.error_code, ResponseError::InvalidRequest.code());
    // RENEW without IsRenewAck, and a renew-only fetch that asks for records.
    let r = call(v2("a", 1, &[(0, 2, 4)], 0));
    assert_eq!(r.error_code, ResponseError::InvalidRequest.code());
    let r = call(v2("a", 1, &[(0, 2, 4)], 3).with_is_renew_ack(true));
    assert_eq!(r.error_code, ResponseError::InvalidRequest.code());
    // Renewing keeps the records locked past their first deadline.
    f.clock.advance(4_000);
    let r = call(v2("a", 1, &[(0, 2, 4)], 0).with_is_renew_ack(true));
    assert_eq!(r.error_code, 0, "{r:?}");
    assert!(acquired(&r).is_empty());
    f.clock.advance(4_000);
    std::thread::sleep(Duration::from_millis(300));
    let r = call(v2("b", 0, &[], 500));
    let offsets: Vec<i64> = acquired(&r).iter().map(|&(o, _)| o).collect();
    assert_eq!(
        offsets,
        (3..10).collect::<Vec<_>>(),
        "a's renewed records stay a's"
    );
}

#[test]
fn consumer_group_configs_set_a_kip848_groups_timeouts() {
    let f = Fixture::new(1);
    assert_eq!(
        f.set_configs("cg", &[("consumer.heartbeat.interval.ms", "2000")]),
        0
    );
    // The interval must stay below the session timeout (here the broker's 45 s default).
    assert_eq!(
        f.set_configs("cg", &[("consumer.heartbeat.interval.ms", "50000")]),
        ResponseError::InvalidConfig.code()
    );
    let req = ConsumerGroupHeartbeatRequest::default()
        .with_group_id(GroupId(s("cg")))
        .with_member_id(s("m"))
        .with_member_epoch(0)
        .with_rebalance_timeout_ms(1000)
        .with_subscribed_topic_names(Some(vec![TopicName(s("q"))]));
    match f.call(
        ApiKey::ConsumerGroupHeartbeat,
        1,
        RequestKind::ConsumerGroupHeartbeat(req),
    ) {
        ResponseKind::ConsumerGroupHeartbeat(r) => {
            assert_eq!((r.error_code, r.heartbeat_interval_ms), (0, 2000), "{r:?}")
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn a_closed_connection_ends_its_share_sessions_and_hands_their_records_over() {
    let f = Fixture::new(1);
    assert_eq!(
        f.set_configs("g", &[("share.auto.offset.reset", "earliest")]),
        0
    );
    f.produce(0, 10);
    join(&f, "g", "a");
    join(&f, "g", "b");
    // a fetches over connection 7, b over connection 8. (A share-partition's first fetch may
    // only start it.)
    f.connection.set(7);
    let mut a_epoch = 0;
    let mut held = Vec::new();
    while held.is_empty() && a_epoch < 3 {
        held = acquired(&f.fetch("g", "a", a_epoch, 0, &[], 4));
        a_epoch += 1;
    }
    assert_eq!(held, vec![(0, 1), (1, 1), (2, 1), (3, 1)]);
    // Another connection closing changes nothing.
    f.broker.connection_closed(9);
    f.connection.set(8);
    let got = acquired(&f.fetch("g", "b", 0, 0, &[], 500));
    assert_eq!(got.first(), Some(&(4, 1)), "{got:?}");
    // a's connection closes (a crashed): its four records go to b at once, with no lock
    // expiry; a is still a member, but its share session is gone.
    f.broker.connection_closed(7);
    let got = acquired(&f.fetch("g", "b", 1, 0, &[(4, 9, ACCEPT)], 500));
    assert_eq!(got, vec![(0, 2), (1, 2), (2, 2), (3, 2)]);
    f.connection.set(7);
    let r = f.fetch("g", "a", a_epoch, 0, &[(0, 3, ACCEPT)], 500);
    assert_eq!(
        r.error_code,
        ResponseError::ShareSessionNotFound.code(),
        "{r:?}"
    );
    // A new session from a reconnected a works.
    f.connection.set(10);
    assert_eq!(f.fetch("g", "a", 0, 0, &[], 500).error_code, 0);
}
