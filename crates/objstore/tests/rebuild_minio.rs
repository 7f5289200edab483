//! Rebuilding the local index from a real MinIO: 1,000 small flush objects written as the
//! flusher writes them, then `rebuild::catch_up` into an empty index must give the state that
//! applying them one by one gave, and report how long it took.
//!
//! Starts its own MinIO (`sluice_testkit::MinioServer`, stopped on drop); bounded in time.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use bytes::Bytes;
use futures_util::StreamExt;
use object_store::path::Path;
use object_store::{PutMode, PutPayload};
use sluice_batch::{BatchBuilder, RecordRef};
use sluice_objstore::bucket::{self, Bucket, BucketConfig, StorageUrl};
use sluice_objstore::index::{Index, ObjectSummary};
use sluice_objstore::meta::{MetaChange, ProducerBatch};
use sluice_objstore::rebuild::catch_up;
use sluice_objstore::{ObjectHeader, ObjectWriter, TopicId, object_name};
use sluice_testkit::MinioServer;

const OBJECTS: u64 = 1_000;
const PARTITIONS: i32 = 8;
const TOPIC: TopicId = TopicId([0x5a; 16]);
const PREFIX: &str = "rebuild-test";
/// The whole catch-up of 1,000 objects must finish within this (it takes about a second).
const CATCH_UP_BOUND: Duration = Duration::from_secs(60);

fn open(minio: &MinioServer) -> Bucket {
    let env: HashMap<&str, String> = minio.env_vars().into_iter().collect();
    let url = StorageUrl::parse(&format!("s3://{}/{PREFIX}", minio.bucket())).unwrap();
    let mut config = BucketConfig::from_env(url, |name| env.get(name).cloned()).unwrap();
    config.request_timeout = Duration::from_secs(10);
    bucket::open(config).expect("open the bucket")
}

/// One batch of 4 records.
fn batch() -> Vec<u8> {
    let mut out = Vec::new();
    let mut b = BatchBuilder::new(&mut out);
    for i in 0..4 {
        b.push(&RecordRef {
            key: None,
            value: Some(b"a small record value"),
            headers: &[],
            timestamp_ms: 1_700_000_000_000 + i,
        });
    }
    b.finish();
    out
}

/// Object `seq`: one batch for each of two partitions, a producer batch for each, a
/// metadata file append, and every 100th object a log start and an abandoned sequence.
fn object(
    writer: &mut ObjectWriter,
    seq: u64,
    next: &mut [i64],
    batch: &[u8],
) -> (Bytes, ObjectSummary) {
    let mut runs = Vec::new();
    let mut meta = Vec::new();
    let a = (seq % PARTITIONS as u64) as i32;
    let b = ((seq + 3) % PARTITIONS as u64) as i32;
    for p in [a.min(b), a.max(b)] {
        writer.begin_run(TOPIC, p).unwrap();
        let first = next[p as usize];
        next[p as usize] = writer.push_batches_at(batch, first).unwrap();
        runs.push(writer.end_run().unwrap().unwrap());
        meta.push(MetaChange::ProducerBatch(ProducerBatch {
            topic_id: TOPIC,
            partition: p,
            producer_id: 1000 + i64::from(p),
            epoch: 0,
            first_seq: first as i32,
            last_seq: first as i32 + 3,
            base_offset: first,
            last_offset: first + 3,
        }));
    }
    meta.push(MetaChange::FileAppend {
        path: "groups/groups.log".into(),
        bytes: seq.to_be_bytes().to_vec(),
    });
    if seq.is_multiple_of(100) {
        meta.push(MetaChange::LogStart {
            topic_id: TOPIC,
            partition: a,
            offset: next[a as usize] - 8,
        });
        meta.push(MetaChange::Abandoned(vec![seq + 5_000]));
    }
    for change in &meta {
        writer.push_meta(change.kind(), &change.encode()).unwrap();
    }
    let header = ObjectHeader {
        writer_epoch: 1,
        sequence: seq,
        created_ms: 1_700_000_000_000 + seq as i64,
    };
    let bytes = writer.finish(header).unwrap();
    let summary = ObjectSummary {
        sequence: seq,
        size: bytes.len() as u64,
        created_ms: header.created_ms,
        runs,
        meta,
    };
    (bytes, summary)
}

type State = (
    Option<u64>,
    Vec<sluice_objstore::index::PartitionState>,
    Vec<Vec<sluice_objstore::index::RunLocation>>,
    Vec<Vec<ProducerBatch>>,
    Vec<(String, Vec<u8>)>,
);

fn state(index: &Index) -> State {
    (
        index.last_sequence(),
        index.partitions().unwrap(),
        (0..PARTITIONS)
            .map(|p| index.runs(TOPIC, p).unwrap())
            .collect(),
        (0..PARTITIONS)
            .map(|p| index.producer_batches(TOPIC, p).unwrap())
            .collect(),
        index.files().unwrap(),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rebuild_of_1000_objects_from_minio() {
    let minio = MinioServer::start();
    let bucket = open(&minio);
    let dir = tempfile::tempdir().unwrap();
    let url = bucket.url().to_string();
    let direct = Index::open(&dir.path().join("direct.sqlite"), &url).unwrap();

    // Build every object first, applying each to the direct index as the flusher would.
    let mut writer = ObjectWriter::new();
    let mut next = vec![0i64; PARTITIONS as usize];
    let batch = batch();
    let mut objects = Vec::new();
    let apply_started = Instant::now();
    for seq in 1..=OBJECTS {
        let (bytes, summary) = object(&mut writer, seq, &mut next, &batch);
        direct.apply(&summary).unwrap();
        objects.push((seq, bytes));
    }
    let apply_took = apply_started.elapsed();
    let total_bytes: usize = objects.iter().map(|(_, b)| b.len()).sum();

    let put_started = Instant::now();
    let store = bucket.store().clone();
    let puts = futures_util::stream::iter(objects)
        .map(|(seq, bytes)| {
            let store = store.clone();
            async move {
                let key = Path::from(object_name(PREFIX, seq));
                store
                    .put_opts(&key, PutPayload::from_bytes(bytes), PutMode::Create.into())
                    .await
            }
        })
        .buffer_unordered(16)
        .collect::<Vec<_>>()
        .await;
    assert!(puts.iter().all(Result::is_ok), "a PUT failed");
    let put_took = put_started.elapsed();

    let rebuilt = Index::open(&dir.path().join("rebuilt.sqlite"), &url).unwrap();
    let report = tokio::time::timeout(CATCH_UP_BOUND, catch_up(&bucket, &rebuilt))
        .await
        .expect("catch-up within its bound")
        .unwrap();
    eprintln!(
        "{OBJECTS} objects ({total_bytes} bytes): PUT in {put_took:?}; direct apply in {apply_took:?}; \
         catch-up: {} applied, {} skipped, {} bytes read, {:?}",
        report.objects_applied, report.objects_skipped, report.bytes_read, report.elapsed
    );
    assert_eq!(report.objects_applied, OBJECTS);
    assert_eq!(report.objects_skipped, 0);
    assert_eq!(report.last_sequence, Some(OBJECTS));
    assert!(report.bytes_read < total_bytes as u64, "{report:?}");
    assert_eq!(state(&rebuilt), state(&direct));
    let files = rebuilt.files().unwrap();
    assert_eq!(files[0].1.len(), OBJECTS as usize * 8);

    // Nothing new: only a LIST.
    let again = catch_up(&bucket, &rebuilt).await.unwrap();
    assert_eq!((again.objects_applied, again.bytes_read), (0, 0));
}
