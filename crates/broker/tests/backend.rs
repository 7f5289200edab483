//! The broker over a second storage backend (`Broker::open_with`), with an in-memory fake of
//! the backend: partitions are opened there, metadata file changes are journaled in order,
//! requests that change metadata answer only once the journal is durable (and
//! KAFKA_STORAGE_ERROR when it cannot be), and idempotent-producer state comes from the
//! backend's producer history.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use futures::FutureExt;
use futures::future::BoxFuture;
use sluice_batch::{BatchBuilder, RecordRef};
use sluice_broker::{Broker, BrokerConfig};
use sluice_log::batch::BatchView;
use sluice_log::{Durable, LogConfig, ReadResult};
use sluice_protocol::codec::Request;
use sluice_protocol::kafka_protocol::ResponseError;
use sluice_protocol::kafka_protocol::messages::*;
use sluice_protocol::kafka_protocol::protocol::StrBytes;
use sluice_storage::{
    Appended, FileChange, MetaJournal, PartitionOpener, PartitionStorage, ProducerBatch,
    StorageError,
};
use tokio::sync::watch;

fn unreachable_bucket() -> StorageError {
    StorageError::Io {
        op: "put",
        path: "objects/7".into(),
        source: std::io::Error::other("bucket unreachable"),
    }
}

/// Records changes; `durable()` waits until the gate is open, then fails if `fail` is set.
#[derive(Debug)]
struct FakeJournal {
    changes: Mutex<Vec<FileChange>>,
    gate: watch::Sender<bool>,
    fail: Arc<AtomicBool>,
    durable_calls: AtomicUsize,
}

impl MetaJournal for FakeJournal {
    fn record(&self, change: FileChange) -> Result<(), StorageError> {
        self.changes.lock().unwrap().push(change);
        Ok(())
    }

    fn durable(&self) -> BoxFuture<'static, Result<(), StorageError>> {
        self.durable_calls.fetch_add(1, Ordering::SeqCst);
        let mut gate = self.gate.subscribe();
        let fail = Arc::clone(&self.fail);
        async move {
            let _ = gate.wait_for(|open| *open).await;
            if fail.load(Ordering::SeqCst) {
                Err(unreachable_bucket())
            } else {
                Ok(())
            }
        }
        .boxed()
    }
}

/// One partition in memory: offsets and the producer history of what was "stored".
#[derive(Debug, Default)]
struct FakePartition {
    /// (next offset, high watermark, stored idempotent batches)
    state: Mutex<(i64, i64, Vec<ProducerBatch>)>,
    /// Appends fail to become durable while set (shared by the backend's partitions).
    fail: Arc<AtomicBool>,
    deleted: AtomicBool,
}

impl PartitionStorage for FakePartition {
    fn append(&self, batches: &[u8]) -> Result<Appended, StorageError> {
        let mut st = self.state.lock().unwrap();
        let base = st.0;
        let (mut offset, mut rest, mut history) = (base, batches, Vec::new());
        while !rest.is_empty() {
            let v = BatchView::parse(rest).expect("tests send valid batches");
            let count = i64::from(v.record_count());
            if v.producer_id() >= 0 {
                history.push(ProducerBatch {
                    producer_id: v.producer_id(),
                    epoch: v.producer_epoch(),
                    first_seq: v.base_sequence(),
                    last_seq: v.base_sequence() + v.record_count() - 1,
                    base_offset: offset,
                    last_offset: offset + count - 1,
                });
            }
            offset += count;
            rest = &rest[v.len()..];
        }
        st.0 = offset;
        let durable = if self.fail.load(Ordering::SeqCst) {
            Err(Arc::new(unreachable_bucket()))
        } else {
            st.1 = offset;
            st.2.extend(history);
            Ok(Durable {
                base_offset: base,
                last_offset: offset - 1,
            })
        };
        let durable = futures::future::ready(durable).boxed().shared();
        Ok(Appended::later(base, offset - 1, durable))
    }

    fn read(&self, _offset: i64, _max_bytes: usize) -> Result<ReadResult, StorageError> {
        Ok(ReadResult {
            records: Bytes::new(),
            high_watermark: self.high_watermark(),
            log_start_offset: 0,
        })
    }

    fn wait_past(&self, _offset: i64) -> BoxFuture<'_, ()> {
        futures::future::ready(()).boxed()
    }

    fn offset_for_timestamp(&self, _ms: i64) -> Result<Option<(i64, i64)>, StorageError> {
        Ok(None)
    }

    fn log_start_offset(&self) -> i64 {
        0
    }

    fn high_watermark(&self) -> i64 {
        self.state.lock().unwrap().1
    }

    fn size_bytes(&self) -> u64 {
        0
    }

    fn apply_retention(&self) -> Result<usize, StorageError> {
        Ok(0)
    }

    fn delete(&self) -> Result<(), StorageError> {
        self.deleted.store(true, Ordering::SeqCst);
        Ok(())
    }

    fn max_timestamp(&self) -> Option<i64> {
        None
    }

    fn delete_records(&self, _before: i64) -> BoxFuture<'_, Result<i64, StorageError>> {
        // This fake keeps every record; no test here deletes any.
        let e = std::io::Error::other("the test partition does not delete records");
        futures::future::ready(Err(StorageError::Io {
            op: "delete records",
            path: std::path::PathBuf::new(),
            source: e,
        }))
        .boxed()
    }

    fn producer_history(&self) -> Option<Vec<ProducerBatch>> {
        Some(self.state.lock().unwrap().2.clone())
    }
}

/// (topic id, partition)
type PartitionKey = ([u8; 16], i32);

#[derive(Debug)]
struct FakeBackend {
    journal: Arc<FakeJournal>,
    partitions: Mutex<HashMap<PartitionKey, Arc<FakePartition>>>,
    /// Every open, in order.
    opened: Mutex<Vec<PartitionKey>>,
    fail_appends: Arc<AtomicBool>,
}

impl PartitionOpener for FakeBackend {
    fn label(&self) -> String {
        "memory".to_owned()
    }

    fn open_partition(
        &self,
        topic_id: [u8; 16],
        partition: i32,
        _config: LogConfig,
    ) -> Result<Arc<dyn PartitionStorage>, StorageError> {
        self.opened.lock().unwrap().push((topic_id, partition));
        let mut partitions = self.partitions.lock().unwrap();
        let p = partitions.entry((topic_id, partition)).or_insert_with(|| {
            Arc::new(FakePartition {
                fail: Arc::clone(&self.fail_appends),
                ..FakePartition::default()
            })
        });
        Ok(Arc::clone(p) as Arc<dyn PartitionStorage>)
    }

    fn journal(&self) -> Arc<dyn MetaJournal> {
        Arc::clone(&self.journal) as Arc<dyn MetaJournal>
    }
}

impl FakeBackend {
    fn new() -> Arc<FakeBackend> {
        Arc::new(FakeBackend {
            journal: Arc::new(FakeJournal {
                changes: Mutex::new(Vec::new()),
                gate: watch::channel(true).0,
                fail: Arc::new(AtomicBool::new(false)),
                durable_calls: AtomicUsize::new(0),
            }),
            partitions: Mutex::new(HashMap::new()),
            opened: Mutex::new(Vec::new()),
            fail_appends: Arc::new(AtomicBool::new(false)),
        })
    }

    fn changes(&self) -> Vec<FileChange> {
        self.journal.changes.lock().unwrap().clone()
    }

    fn set_gate(&self, open: bool) {
        self.journal.gate.send_replace(open);
    }

    fn set_failing(&self, fail: bool) {
        self.journal.fail.store(fail, Ordering::SeqCst);
    }
}

struct Fixture {
    dir: tempfile::TempDir,
    backend: Arc<FakeBackend>,
    broker: Arc<Broker>,
    rt: tokio::runtime::Runtime,
}

fn open(dir: &std::path::Path, backend: &Arc<FakeBackend>) -> Arc<Broker> {
    let config = BrokerConfig::new(dir);
    let backend = Arc::clone(backend) as Arc<dyn PartitionOpener>;
    let clock = Arc::new(sluice_log::SystemClock);
    Arc::new(Broker::open_with(config, clock, Some(backend)).unwrap())
}

fn name(s: &str) -> TopicName {
    TopicName(StrBytes::from_string(s.to_owned()))
}

fn request(api_key: ApiKey, api_version: i16, body: RequestKind) -> Request {
    Request {
        api_key,
        api_version,
        correlation_id: 1,
        client_id: None,
        body,
    }
}

fn create_request(topic: &str, partitions: i32) -> Request {
    let req = CreateTopicsRequest::default().with_topics(vec![
        create_topics_request::CreatableTopic::default()
            .with_name(name(topic))
            .with_num_partitions(partitions)
            .with_replication_factor(1),
    ]);
    request(ApiKey::CreateTopics, 7, RequestKind::CreateTopics(req))
}

fn init_request() -> Request {
    let init = InitProducerIdRequest::default()
        .with_producer_id(ProducerId(-1))
        .with_producer_epoch(-1)
        .with_transaction_timeout_ms(60_000);
    request(ApiKey::InitProducerId, 4, RequestKind::InitProducerId(init))
}

/// An idempotent batch of `n` records from `producer_id` (epoch 0) starting at `seq`.
fn idempotent(producer_id: i64, seq: i32, n: usize) -> Vec<u8> {
    let mut out = Vec::new();
    let mut builder = BatchBuilder::with_base_timestamp(&mut out, 1_700_000_000_000).with_producer(
        producer_id,
        0,
        seq,
    );
    for _ in 0..n {
        builder.push(&RecordRef {
            key: None,
            value: Some(b"v"),
            headers: &[],
            timestamp_ms: 1_700_000_000_000,
        });
    }
    builder.finish();
    out
}

impl Fixture {
    fn new() -> Fixture {
        let dir = tempfile::tempdir().unwrap();
        let backend = FakeBackend::new();
        let broker = open(dir.path(), &backend);
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap();
        Fixture {
            dir,
            backend,
            broker,
            rt,
        }
    }

    fn call(&self, req: Request) -> ResponseKind {
        let handling = self.broker.handle(req);
        let answer = self.rt.block_on(async {
            tokio::time::timeout(Duration::from_secs(10), handling)
                .await
                .expect("answered in time")
        });
        answer.expect("a response")
    }

    /// CreateTopics of one topic: (error code, message, topic id).
    fn create(&self, topic: &str, partitions: i32) -> (i16, Option<String>, uuid::Uuid) {
        match self.call(create_request(topic, partitions)) {
            ResponseKind::CreateTopics(r) => {
                let t = &r.topics[0];
                let message = t.error_message.as_ref().map(|m| m.to_string());
                (t.error_code, message, t.topic_id)
            }
            other => panic!("{other:?}"),
        }
    }

    fn delete(&self, topic: &str) -> i16 {
        let req = DeleteTopicsRequest::default().with_topic_names(vec![name(topic)]);
        match self.call(request(
            ApiKey::DeleteTopics,
            5,
            RequestKind::DeleteTopics(req),
        )) {
            ResponseKind::DeleteTopics(r) => r.responses[0].error_code,
            other => panic!("{other:?}"),
        }
    }

    fn init(&self) -> (i16, i64) {
        match self.call(init_request()) {
            ResponseKind::InitProducerId(r) => (r.error_code, r.producer_id.0),
            other => panic!("{other:?}"),
        }
    }

    /// Produces `records` with acks=all; returns (error code, base offset).
    fn produce(&self, topic: &str, partition: i32, records: Vec<u8>) -> (i16, i64) {
        let req = ProduceRequest::default()
            .with_acks(-1)
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
        match self.call(request(ApiKey::Produce, 9, RequestKind::Produce(req))) {
            ResponseKind::Produce(r) => {
                let p = &r.responses[0].partition_responses[0];
                (p.error_code, p.base_offset)
            }
            other => panic!("{other:?}"),
        }
    }
}

fn write(path: &str, json: &serde_json::Value) -> (String, serde_json::Value) {
    (path.to_owned(), json.clone())
}

/// The changes, with `topic.json` contents parsed (for readable comparisons).
fn parsed(changes: &[FileChange]) -> Vec<(String, serde_json::Value)> {
    changes
        .iter()
        .map(|c| match c {
            FileChange::Write { path, contents } if path.ends_with("topic.json") => {
                (path.clone(), serde_json::from_slice(contents).unwrap())
            }
            FileChange::Write { path, contents } => (
                path.clone(),
                serde_json::Value::String(String::from_utf8(contents.clone()).unwrap()),
            ),
            FileChange::Append { path, bytes } => (path.clone(), bytes.len().into()),
            FileChange::Remove { path } => (path.clone(), serde_json::Value::Null),
        })
        .collect()
}

#[test]
fn topic_changes_and_id_reservations_are_journaled_in_order() {
    let f = Fixture::new();
    let (code, _, id) = f.create("orders", 2);
    assert_eq!(code, 0);
    // The partitions are the backend's, by the topic's id; no local partition directories.
    assert_eq!(
        *f.backend.opened.lock().unwrap(),
        vec![(*id.as_bytes(), 0), (*id.as_bytes(), 1)]
    );
    let topic_dir = f.dir.path().join("topics/orders");
    assert!(topic_dir.join("topic.json").is_file());
    assert!(!topic_dir.join("0").exists());
    let local = std::fs::read(topic_dir.join("topic.json")).unwrap();
    assert!(
        matches!(&f.backend.changes()[0], FileChange::Write { path, contents } if path == "topics/orders/topic.json" && *contents == local),
        "the journaled contents are the local file's"
    );

    let alter = IncrementalAlterConfigsRequest::default().with_resources(vec![
        incremental_alter_configs_request::AlterConfigsResource::default()
            .with_resource_type(2)
            .with_resource_name(StrBytes::from_static_str("orders"))
            .with_configs(vec![
                incremental_alter_configs_request::AlterableConfig::default()
                    .with_name(StrBytes::from_static_str("retention.ms"))
                    .with_config_operation(0)
                    .with_value(Some(StrBytes::from_static_str("60000"))),
            ]),
    ]);
    let alter = RequestKind::IncrementalAlterConfigs(alter);
    match f.call(request(ApiKey::IncrementalAlterConfigs, 1, alter)) {
        ResponseKind::IncrementalAlterConfigs(r) => assert_eq!(r.responses[0].error_code, 0),
        other => panic!("{other:?}"),
    }
    let grow = CreatePartitionsRequest::default().with_topics(vec![
        create_partitions_request::CreatePartitionsTopic::default()
            .with_name(name("orders"))
            .with_count(3)
            .with_assignments(None),
    ]);
    match f.call(request(
        ApiKey::CreatePartitions,
        1,
        RequestKind::CreatePartitions(grow),
    )) {
        ResponseKind::CreatePartitions(r) => assert_eq!(r.results[0].error_code, 0),
        other => panic!("{other:?}"),
    }
    assert_eq!(f.backend.opened.lock().unwrap()[2], (*id.as_bytes(), 2));
    // The first id reserves a block; the second comes from it and changes nothing.
    assert_eq!(f.init(), (0, 0));
    assert_eq!(f.init(), (0, 1));
    assert_eq!(f.delete("orders"), 0);
    assert!(!topic_dir.exists());
    let deleted = &f.backend.partitions.lock().unwrap()[&(*id.as_bytes(), 0)];
    assert!(deleted.deleted.load(Ordering::SeqCst));

    let id = id.to_string();
    let no_config = serde_json::json!({});
    let config = serde_json::json!({"retention.ms": "60000"});
    let meta = |partitions: i32, configs: &serde_json::Value| serde_json::json!({"id": id, "partitions": partitions, "configs": configs});
    assert_eq!(
        parsed(&f.backend.changes()),
        vec![
            write("topics/orders/topic.json", &meta(2, &no_config)),
            write("topics/orders/topic.json", &meta(2, &config)),
            write("topics/orders/topic.json", &meta(3, &config)),
            write("producer-ids", &serde_json::json!("1000")),
            write("topics/orders", &serde_json::Value::Null),
        ]
    );
    assert!(
        matches!(&f.backend.changes()[4], FileChange::Remove { .. }),
        "a deletion removes the topic's directory"
    );
}

#[test]
fn create_topics_answers_once_the_journal_is_durable() {
    let f = Fixture::new();
    f.backend.set_gate(false);
    let mut handling = f.broker.handle(create_request("t", 1));
    let early = f.rt.block_on(async {
        tokio::time::timeout(Duration::from_millis(300), &mut handling)
            .await
            .is_ok()
    });
    assert!(!early, "answered before the journal was durable");
    // The change is made and journaled; only the answer waits.
    assert!(f.broker.topics().get("t").is_some());
    assert_eq!(f.backend.changes().len(), 1);
    f.backend.set_gate(true);
    let answer = f.rt.block_on(handling);
    match answer {
        Some(ResponseKind::CreateTopics(r)) => assert_eq!(r.topics[0].error_code, 0),
        other => panic!("{other:?}"),
    }
}

#[test]
fn a_failing_journal_answers_kafka_storage_error() {
    let f = Fixture::new();
    let storage_error = ResponseError::KafkaStorageError.code();
    f.backend.set_failing(true);
    let (code, message, _) = f.create("t", 1);
    assert_eq!(code, storage_error);
    let message = message.unwrap();
    assert!(
        message.contains("durable") && message.contains("bucket unreachable"),
        "{message}"
    );
    assert_eq!(f.delete("t"), storage_error);
    assert_eq!(f.init().0, storage_error);

    // The bucket is back: the next id comes from a new reservation (the failed one may never
    // have reached the bucket), journaled again.
    f.backend.set_failing(false);
    assert_eq!(f.init(), (0, 1));
    let reservations: Vec<_> = parsed(&f.backend.changes())
        .into_iter()
        .filter(|(path, _)| path == "producer-ids")
        .map(|(_, v)| v)
        .collect();
    assert_eq!(
        reservations,
        vec![serde_json::json!("1000"), serde_json::json!("1001")]
    );
    assert_eq!(f.create("u", 1).0, 0);
}

#[test]
fn a_failed_durability_reloads_producer_state_from_the_backend() {
    let f = Fixture::new();
    assert_eq!(f.create("t", 1).0, 0);
    let (_, pid) = f.init();
    assert_eq!(f.produce("t", 0, idempotent(pid, 0, 3)), (0, 0));
    f.backend.fail_appends.store(true, Ordering::SeqCst);
    let (code, _) = f.produce("t", 0, idempotent(pid, 3, 2));
    assert_eq!(code, ResponseError::KafkaStorageError.code());
    f.backend.fail_appends.store(false, Ordering::SeqCst);
    // The retry is appended (its first attempt was never stored), not answered as a duplicate
    // of the lost attempt's offsets (3).
    assert_eq!(f.produce("t", 0, idempotent(pid, 3, 2)), (0, 5));
    // And now it is a duplicate.
    assert_eq!(f.produce("t", 0, idempotent(pid, 3, 2)), (0, 5));
}

#[test]
fn producer_state_is_rebuilt_from_the_backend_history_at_open() {
    let f = Fixture::new();
    assert_eq!(f.create("t", 1).0, 0);
    let (_, pid) = f.init();
    assert_eq!(f.produce("t", 0, idempotent(pid, 0, 3)), (0, 0));
    assert_eq!(f.produce("t", 0, idempotent(pid, 3, 1)), (0, 3));
    f.broker.shutdown();
    let broker = open(f.dir.path(), &f.backend);
    let f = Fixture { broker, ..f };
    // Retries of remembered batches are duplicates with their offsets; the next sequence
    // appends; a gap is refused.
    assert_eq!(f.produce("t", 0, idempotent(pid, 0, 3)), (0, 0));
    assert_eq!(f.produce("t", 0, idempotent(pid, 3, 1)), (0, 3));
    assert_eq!(f.produce("t", 0, idempotent(pid, 4, 1)), (0, 4));
    let (code, _) = f.produce("t", 0, idempotent(pid, 9, 1));
    assert_eq!(code, ResponseError::OutOfOrderSequenceNumber.code());
}

#[test]
fn offset_commits_are_journaled_and_wait_for_durability() {
    let f = Fixture::new();
    assert_eq!(f.create("t", 1).0, 0);
    let commit = |offset: i64| {
        let req = OffsetCommitRequest::default()
            .with_group_id(GroupId(StrBytes::from_static_str("g")))
            .with_generation_id_or_member_epoch(-1)
            .with_topics(vec![
                offset_commit_request::OffsetCommitRequestTopic::default()
                    .with_name(name("t"))
                    .with_partitions(vec![
                        offset_commit_request::OffsetCommitRequestPartition::default()
                            .with_partition_index(0)
                            .with_committed_offset(offset),
                    ]),
            ]);
        request(ApiKey::OffsetCommit, 8, RequestKind::OffsetCommit(req))
    };
    let code = |answer: Option<ResponseKind>| match answer {
        Some(ResponseKind::OffsetCommit(r)) => r.topics[0].partitions[0].error_code,
        other => panic!("{other:?}"),
    };
    let before = f.backend.changes().len();
    f.backend.set_gate(false);
    let mut handling = f.broker.handle(commit(5));
    let early = f.rt.block_on(async {
        tokio::time::timeout(Duration::from_millis(300), &mut handling)
            .await
            .is_ok()
    });
    assert!(!early, "answered before the journal was durable");
    f.backend.set_gate(true);
    assert_eq!(code(f.rt.block_on(handling)), 0);
    let changes = f.backend.changes();
    assert!(
        matches!(&changes[before..], [FileChange::Append { path, bytes }] if path == "groups/groups.log" && !bytes.is_empty()),
        "{changes:?}"
    );
    // A journal that fails: a retriable refusal, and the coordinator works again after.
    f.backend.set_failing(true);
    assert_eq!(
        code(Some(f.call(commit(6)))),
        ResponseError::NotCoordinator.code()
    );
    f.backend.set_failing(false);
    assert_eq!(code(Some(f.call(commit(6)))), 0);
}

#[test]
fn acl_changes_are_journaled_and_answered_once_durable() {
    let f = Fixture::new();
    let authorizer = sluice_security::Authorizer::open(
        f.dir.path(),
        [sluice_security::Principal::user("admin")],
    )
    .unwrap();
    assert!(f.broker.set_authorizer(Arc::new(authorizer)));
    let admin = sluice_broker::Caller {
        principal: Arc::from("User:admin"),
        ..sluice_broker::Caller::default()
    };
    let create = || {
        let req = CreateAclsRequest::default().with_creations(vec![
            create_acls_request::AclCreation::default()
                .with_resource_type(2)
                .with_resource_name(StrBytes::from_static_str("orders"))
                .with_resource_pattern_type(3)
                .with_principal(StrBytes::from_static_str("User:alice"))
                .with_host(StrBytes::from_static_str("*"))
                .with_operation(3)
                .with_permission_type(3),
        ]);
        f.broker.handle_from(
            request(ApiKey::CreateAcls, 3, RequestKind::CreateAcls(req)),
            &admin,
        )
    };
    f.backend.set_gate(false);
    let mut handling = create();
    let early = f.rt.block_on(async {
        tokio::time::timeout(Duration::from_millis(300), &mut handling)
            .await
            .is_ok()
    });
    assert!(!early, "answered before the journal was durable");
    // The whole ACL file is journaled, under its path in the data directory.
    let Some(FileChange::Write { path, contents }) = f.backend.changes().last().cloned() else {
        panic!("no file write journaled");
    };
    assert_eq!(path, "security/acls.json");
    let file: serde_json::Value = serde_json::from_slice(&contents).unwrap();
    assert_eq!(file["acls"][0]["principal"], "User:alice", "{file}");
    f.backend.set_gate(true);
    match f.rt.block_on(handling).map(|r| r.body) {
        Some(ResponseKind::CreateAcls(r)) => assert_eq!(r.results[0].error_code, 0),
        other => panic!("{other:?}"),
    }
    // A journal that fails: the answer says so.
    f.backend.set_failing(true);
    let req = DeleteAclsRequest::default().with_filters(vec![
        delete_acls_request::DeleteAclsFilter::default()
            .with_resource_type_filter(1)
            .with_resource_name_filter(None)
            .with_pattern_type_filter(1)
            .with_principal_filter(None)
            .with_host_filter(None)
            .with_operation(1)
            .with_permission_type(1),
    ]);
    let deleted = f.broker.handle_from(
        request(ApiKey::DeleteAcls, 3, RequestKind::DeleteAcls(req)),
        &admin,
    );
    match f.rt.block_on(deleted).map(|r| r.body) {
        Some(ResponseKind::DeleteAcls(r)) => assert_eq!(
            r.filter_results[0].error_code,
            ResponseError::KafkaStorageError.code()
        ),
        other => panic!("{other:?}"),
    }
}
