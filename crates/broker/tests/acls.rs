//! ACL checks (`--authorizer acl`), through `Broker::handle_from` with a caller's principal:
//! CreateAcls/DescribeAcls/DeleteAcls, each API's operation and error code, Metadata hiding
//! topics and refusing auto-creation without CREATE, deny beating allow, prefixed patterns,
//! super users, and ACLs surviving a restart.

use std::sync::Arc;

use bytes::Bytes;
use sluice_broker::{Broker, BrokerConfig, Caller};
use sluice_log::batch::build::{Record, batch};
use sluice_protocol::codec::Request;
use sluice_protocol::kafka_protocol::ResponseError;
use sluice_protocol::kafka_protocol::messages::*;
use sluice_protocol::kafka_protocol::protocol::StrBytes;
use sluice_security::{Authorizer, Principal};

const TOPIC_DENIED: i16 = ResponseError::TopicAuthorizationFailed.code();
const GROUP_DENIED: i16 = ResponseError::GroupAuthorizationFailed.code();
const CLUSTER_DENIED: i16 = ResponseError::ClusterAuthorizationFailed.code();

// Kafka's codes, as kafka-acls sends them.
const TOPIC: i8 = 2;
const GROUP: i8 = 3;
const CLUSTER: i8 = 4;
const LITERAL: i8 = 3;
const PREFIXED: i8 = 4;
const MATCH: i8 = 2;
const ANY: i8 = 1;
const READ: i8 = 3;
const WRITE: i8 = 4;
const CREATE: i8 = 5;
const DESCRIBE: i8 = 8;
const DENY: i8 = 2;
const ALLOW: i8 = 3;

fn s(text: &str) -> StrBytes {
    StrBytes::from_string(text.to_owned())
}

fn name(text: &str) -> TopicName {
    TopicName(s(text))
}

struct Fixture {
    dir: tempfile::TempDir,
    broker: Arc<Broker>,
    rt: tokio::runtime::Runtime,
}

fn caller(principal: &str) -> Caller {
    Caller {
        peer: Some("127.0.0.1".parse().unwrap()),
        listener: 0,
        principal: Arc::from(principal),
        connection: 0,
    }
}

impl Fixture {
    /// A broker with ACL checks on, `User:admin` its super user, and topics `orders` and
    /// `orders-eu` (made by the admin).
    fn new() -> Fixture {
        let dir = tempfile::tempdir().unwrap();
        let f = Fixture::open(dir);
        for topic in ["orders", "orders-eu"] {
            assert_eq!(f.create_topic("User:admin", topic), 0);
        }
        f
    }

    fn open(dir: tempfile::TempDir) -> Fixture {
        let broker = Arc::new(Broker::open(BrokerConfig::new(dir.path())).unwrap());
        let authorizer = Authorizer::open(dir.path(), [Principal::user("admin")]).unwrap();
        assert!(broker.set_authorizer(Arc::new(authorizer)));
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap();
        Fixture { dir, broker, rt }
    }

    fn call(&self, who: &str, api_key: ApiKey, version: i16, body: RequestKind) -> ResponseKind {
        let request = Request {
            api_key,
            api_version: version,
            correlation_id: 1,
            client_id: None,
            body,
        };
        let handling = self.broker.handle_from(request, &caller(who));
        self.rt.block_on(handling).expect("a response").body
    }

    fn create_topic(&self, who: &str, topic: &str) -> i16 {
        let req = CreateTopicsRequest::default().with_topics(vec![
            create_topics_request::CreatableTopic::default()
                .with_name(name(topic))
                .with_num_partitions(1)
                .with_replication_factor(1),
        ]);
        match self.call(who, ApiKey::CreateTopics, 7, RequestKind::CreateTopics(req)) {
            ResponseKind::CreateTopics(r) => r.topics[0].error_code,
            other => panic!("{other:?}"),
        }
    }

    /// Adds ACLs as the admin: (resource type, name, pattern, principal, operation, permission).
    fn allow(&self, acls: &[(i8, &str, i8, &str, i8, i8)]) {
        let creations = acls
            .iter()
            .map(|&(rt, rname, pattern, principal, op, perm)| {
                create_acls_request::AclCreation::default()
                    .with_resource_type(rt)
                    .with_resource_name(s(rname))
                    .with_resource_pattern_type(pattern)
                    .with_principal(s(principal))
                    .with_host(s("*"))
                    .with_operation(op)
                    .with_permission_type(perm)
            })
            .collect();
        let req = CreateAclsRequest::default().with_creations(creations);
        match self.call(
            "User:admin",
            ApiKey::CreateAcls,
            3,
            RequestKind::CreateAcls(req),
        ) {
            ResponseKind::CreateAcls(r) => {
                for result in &r.results {
                    assert_eq!(result.error_code, 0, "{:?}", result.error_message);
                }
            }
            other => panic!("{other:?}"),
        }
    }

    fn produce(&self, who: &str, topic: &str) -> i16 {
        let value = b"v".to_vec();
        let records = batch(
            1_700_000_000_000,
            &[Record {
                timestamp_delta: 0,
                key: None,
                value: Some(&value),
            }],
        );
        let req = ProduceRequest::default()
            .with_acks(-1)
            .with_timeout_ms(5000)
            .with_topic_data(vec![
                produce_request::TopicProduceData::default()
                    .with_name(name(topic))
                    .with_partition_data(vec![
                        produce_request::PartitionProduceData::default()
                            .with_index(0)
                            .with_records(Some(Bytes::from(records))),
                    ]),
            ]);
        match self.call(who, ApiKey::Produce, 9, RequestKind::Produce(req)) {
            ResponseKind::Produce(r) => {
                assert_eq!(r.responses.len(), 1);
                r.responses[0].partition_responses[0].error_code
            }
            other => panic!("{other:?}"),
        }
    }

    fn fetch(&self, who: &str, topic: &str) -> i16 {
        let req = FetchRequest::default()
            .with_replica_id(BrokerId(-1))
            .with_max_wait_ms(0)
            .with_max_bytes(1 << 20)
            .with_topics(vec![
                fetch_request::FetchTopic::default()
                    .with_topic(name(topic))
                    .with_partitions(vec![
                        fetch_request::FetchPartition::default()
                            .with_partition(0)
                            .with_partition_max_bytes(1 << 20),
                    ]),
            ]);
        match self.call(who, ApiKey::Fetch, 12, RequestKind::Fetch(req)) {
            ResponseKind::Fetch(r) => {
                assert_eq!(r.responses.len(), 1, "{r:?}");
                r.responses[0].partitions[0].error_code
            }
            other => panic!("{other:?}"),
        }
    }

    /// Metadata for `topics` (`None`: all): (name, error code) per topic answered.
    fn metadata(
        &self,
        who: &str,
        topics: Option<&[&str]>,
        auto_create: bool,
    ) -> Vec<(String, i16)> {
        let req = MetadataRequest::default()
            .with_allow_auto_topic_creation(auto_create)
            .with_topics(topics.map(|ts| {
                ts.iter()
                    .map(|t| {
                        metadata_request::MetadataRequestTopic::default().with_name(Some(name(t)))
                    })
                    .collect()
            }));
        match self.call(who, ApiKey::Metadata, 12, RequestKind::Metadata(req)) {
            ResponseKind::Metadata(r) => {
                let mut out: Vec<_> = r
                    .topics
                    .iter()
                    .map(|t| {
                        let n = t.name.as_ref().map(|n| n.0.to_string()).unwrap_or_default();
                        (n, t.error_code)
                    })
                    .collect();
                out.sort();
                out
            }
            other => panic!("{other:?}"),
        }
    }

    fn join(&self, who: &str, group: &str) -> i16 {
        let req = JoinGroupRequest::default()
            .with_group_id(GroupId(s(group)))
            .with_session_timeout_ms(10_000)
            .with_rebalance_timeout_ms(10_000)
            .with_member_id(s(""))
            .with_protocol_type(s("consumer"))
            .with_protocols(vec![
                join_group_request::JoinGroupRequestProtocol::default()
                    .with_name(s("range"))
                    .with_metadata(Bytes::new()),
            ]);
        match self.call(who, ApiKey::JoinGroup, 5, RequestKind::JoinGroup(req)) {
            ResponseKind::JoinGroup(r) => r.error_code,
            other => panic!("{other:?}"),
        }
    }

    fn describe_acls(&self, who: &str, resource_type: i8, pattern: i8) -> DescribeAclsResponse {
        let req = DescribeAclsRequest::default()
            .with_resource_type_filter(resource_type)
            .with_resource_name_filter(None)
            .with_pattern_type_filter(pattern)
            .with_principal_filter(None)
            .with_host_filter(None)
            .with_operation(ANY)
            .with_permission_type(ANY);
        match self.call(who, ApiKey::DescribeAcls, 3, RequestKind::DescribeAcls(req)) {
            ResponseKind::DescribeAcls(r) => r,
            other => panic!("{other:?}"),
        }
    }
}

#[test]
fn with_no_acl_a_principal_may_do_nothing_and_the_super_user_everything() {
    let f = Fixture::new();
    assert_eq!(f.produce("User:alice", "orders"), TOPIC_DENIED);
    assert_eq!(f.fetch("User:alice", "orders"), TOPIC_DENIED);
    assert_eq!(f.join("User:alice", "billing"), GROUP_DENIED);
    assert_eq!(f.create_topic("User:alice", "new"), TOPIC_DENIED);
    // Metadata for all topics lists none of them; named ones are refused.
    assert_eq!(f.metadata("User:alice", None, false), vec![]);
    assert_eq!(
        f.metadata("User:alice", Some(&["orders"]), false),
        vec![("orders".to_owned(), TOPIC_DENIED)]
    );
    assert_eq!(
        f.describe_acls("User:alice", ANY, ANY).error_code,
        CLUSTER_DENIED
    );
    // A PLAINTEXT client is User:ANONYMOUS, which no ACL names either.
    assert_eq!(f.produce("User:ANONYMOUS", "orders"), TOPIC_DENIED);

    assert_eq!(f.produce("User:admin", "orders"), 0);
    assert_eq!(f.fetch("User:admin", "orders"), 0);
    assert_eq!(f.metadata("User:admin", None, false).len(), 2);
}

#[test]
fn allow_deny_and_prefixed_acls_decide_each_api() {
    let f = Fixture::new();
    f.allow(&[
        // alice writes and reads every topic starting with "orders", but is denied orders-eu.
        (TOPIC, "orders", PREFIXED, "User:alice", WRITE, ALLOW),
        (TOPIC, "orders", PREFIXED, "User:alice", READ, ALLOW),
        (TOPIC, "orders-eu", LITERAL, "User:alice", READ, DENY),
        (GROUP, "billing-", PREFIXED, "User:alice", READ, ALLOW),
        // bob only reads orders.
        (TOPIC, "orders", LITERAL, "User:bob", READ, ALLOW),
    ]);
    assert_eq!(f.produce("User:alice", "orders"), 0);
    assert_eq!(f.produce("User:alice", "orders-eu"), 0);
    assert_eq!(f.fetch("User:alice", "orders"), 0);
    // The deny beats the prefixed allow.
    assert_eq!(f.fetch("User:alice", "orders-eu"), TOPIC_DENIED);
    // WRITE and READ imply DESCRIBE: both topics are listed (a DENY of READ does not hide).
    let listed = f.metadata("User:alice", None, false);
    assert_eq!(
        listed,
        vec![("orders".to_owned(), 0), ("orders-eu".to_owned(), 0)]
    );

    // Allowed: the join goes on (v5: the member must come back with its id).
    assert_eq!(
        f.join("User:alice", "billing-eu"),
        ResponseError::MemberIdRequired.code()
    );
    assert_eq!(f.join("User:alice", "shipping"), GROUP_DENIED);

    assert_eq!(f.fetch("User:bob", "orders"), 0);
    assert_eq!(f.produce("User:bob", "orders"), TOPIC_DENIED);
    assert_eq!(f.fetch("User:bob", "orders-eu"), TOPIC_DENIED);
    assert_eq!(
        f.metadata("User:bob", None, false),
        vec![("orders".to_owned(), 0)]
    );

    // A produce naming an allowed and a refused topic: each gets its own answer.
    let value = b"v".to_vec();
    let records = Bytes::from(batch(
        1_700_000_000_000,
        &[Record {
            timestamp_delta: 0,
            key: None,
            value: Some(&value),
        }],
    ));
    let topic = |t: &str| {
        produce_request::TopicProduceData::default()
            .with_name(name(t))
            .with_partition_data(vec![
                produce_request::PartitionProduceData::default()
                    .with_index(0)
                    .with_records(Some(records.clone())),
            ])
    };
    let req = ProduceRequest::default()
        .with_acks(-1)
        .with_timeout_ms(5000)
        .with_topic_data(vec![topic("orders"), topic("secret")]);
    let ResponseKind::Produce(r) =
        f.call("User:alice", ApiKey::Produce, 9, RequestKind::Produce(req))
    else {
        panic!()
    };
    let mut codes: Vec<_> = r
        .responses
        .iter()
        .map(|t| (t.name.0.to_string(), t.partition_responses[0].error_code))
        .collect();
    codes.sort();
    assert_eq!(
        codes,
        vec![
            ("orders".to_owned(), 0),
            ("secret".to_owned(), TOPIC_DENIED)
        ]
    );
}

#[test]
fn auto_creation_needs_create_and_idempotent_producers_need_write_somewhere() {
    let f = Fixture::new();
    f.allow(&[(TOPIC, "logs-", PREFIXED, "User:carol", DESCRIBE, ALLOW)]);
    // DESCRIBE but no CREATE: refused, and not created.
    assert_eq!(
        f.metadata("User:carol", Some(&["logs-a"]), true),
        vec![("logs-a".to_owned(), TOPIC_DENIED)]
    );
    assert!(f.broker.topics().get("logs-a").is_none());
    f.allow(&[(TOPIC, "logs-", PREFIXED, "User:carol", CREATE, ALLOW)]);
    assert_eq!(
        f.metadata("User:carol", Some(&["logs-a"]), true),
        vec![("logs-a".to_owned(), 0)]
    );
    assert!(f.broker.topics().get("logs-a").is_some());

    let init = |who: &str| {
        let req = InitProducerIdRequest::default()
            .with_transactional_id(None)
            .with_transaction_timeout_ms(60_000)
            .with_producer_id(ProducerId(-1))
            .with_producer_epoch(-1);
        match f.call(
            who,
            ApiKey::InitProducerId,
            4,
            RequestKind::InitProducerId(req),
        ) {
            ResponseKind::InitProducerId(r) => r.error_code,
            other => panic!("{other:?}"),
        }
    };
    assert_eq!(init("User:carol"), CLUSTER_DENIED);
    f.allow(&[(TOPIC, "logs-", PREFIXED, "User:carol", WRITE, ALLOW)]);
    assert_eq!(init("User:carol"), 0);
}

#[test]
fn acls_are_managed_by_those_allowed_and_survive_a_restart() {
    let f = Fixture::new();
    // alice may not manage ACLs.
    let req = CreateAclsRequest::default().with_creations(vec![
        create_acls_request::AclCreation::default()
            .with_resource_type(TOPIC)
            .with_resource_name(s("orders"))
            .with_resource_pattern_type(LITERAL)
            .with_principal(s("User:alice"))
            .with_host(s("*"))
            .with_operation(READ)
            .with_permission_type(ALLOW),
    ]);
    let ResponseKind::CreateAcls(r) = f.call(
        "User:alice",
        ApiKey::CreateAcls,
        3,
        RequestKind::CreateAcls(req.clone()),
    ) else {
        panic!()
    };
    assert_eq!(r.results[0].error_code, CLUSTER_DENIED);
    // Until the admin lets her.
    f.allow(&[(CLUSTER, "kafka-cluster", LITERAL, "User:alice", 7, ALLOW)]);
    let ResponseKind::CreateAcls(r) = f.call(
        "User:alice",
        ApiKey::CreateAcls,
        3,
        RequestKind::CreateAcls(req),
    ) else {
        panic!()
    };
    assert_eq!(r.results[0].error_code, 0);
    // ALTER on the cluster implies DESCRIBE: she can list them.
    let described = f.describe_acls("User:alice", TOPIC, MATCH);
    assert_eq!(described.error_code, 0);
    assert_eq!(described.resources.len(), 1);
    assert_eq!(described.resources[0].resource_name.as_str(), "orders");

    // A bad binding is refused on its own, with INVALID_REQUEST.
    let bad = CreateAclsRequest::default().with_creations(vec![
        create_acls_request::AclCreation::default()
            .with_resource_type(CLUSTER)
            .with_resource_name(s("not-the-cluster"))
            .with_resource_pattern_type(LITERAL)
            .with_principal(s("User:alice"))
            .with_host(s("*"))
            .with_operation(READ)
            .with_permission_type(ALLOW),
    ]);
    let ResponseKind::CreateAcls(r) = f.call(
        "User:admin",
        ApiKey::CreateAcls,
        3,
        RequestKind::CreateAcls(bad),
    ) else {
        panic!()
    };
    assert_eq!(
        r.results[0].error_code,
        ResponseError::InvalidRequest.code()
    );

    // Restart: the ACLs are read back from the data directory.
    let Fixture { dir, broker, rt } = f;
    broker.shutdown();
    drop(broker);
    drop(rt);
    let f = Fixture::open(dir);
    assert_eq!(f.fetch("User:alice", "orders"), 0);
    assert_eq!(f.describe_acls("User:admin", ANY, ANY).resources.len(), 2);

    // DeleteAcls removes what its filter matches, and the right goes at once.
    let req = DeleteAclsRequest::default().with_filters(vec![
        delete_acls_request::DeleteAclsFilter::default()
            .with_resource_type_filter(TOPIC)
            .with_resource_name_filter(Some(s("orders")))
            .with_pattern_type_filter(LITERAL)
            .with_principal_filter(Some(s("User:alice")))
            .with_host_filter(None)
            .with_operation(ANY)
            .with_permission_type(ANY),
    ]);
    let ResponseKind::DeleteAcls(r) = f.call(
        "User:admin",
        ApiKey::DeleteAcls,
        3,
        RequestKind::DeleteAcls(req),
    ) else {
        panic!()
    };
    assert_eq!(r.filter_results[0].error_code, 0);
    assert_eq!(r.filter_results[0].matching_acls.len(), 1);
    assert_eq!(f.fetch("User:alice", "orders"), TOPIC_DENIED);
    drop(f.dir);
}

#[test]
fn without_an_authorizer_the_acl_apis_answer_security_disabled() {
    let dir = tempfile::tempdir().unwrap();
    let broker = Arc::new(Broker::open(BrokerConfig::new(dir.path())).unwrap());
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let req = DescribeAclsRequest::default()
        .with_resource_type_filter(ANY)
        .with_pattern_type_filter(ANY)
        .with_operation(ANY)
        .with_permission_type(ANY);
    let request = Request {
        api_key: ApiKey::DescribeAcls,
        api_version: 3,
        correlation_id: 1,
        client_id: None,
        body: RequestKind::DescribeAcls(req),
    };
    let Some(ResponseKind::DescribeAcls(r)) = rt.block_on(broker.handle(request)) else {
        panic!()
    };
    assert_eq!(r.error_code, ResponseError::SecurityDisabled.code());
}
