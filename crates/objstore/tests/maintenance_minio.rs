//! Checkpoints, compaction and the cleaner against a real MinIO:
//! - a rebuild of 2,000 objects from a checkpoint plus the objects after it gives the state
//!   that applying every object gave, and reads far less (both timed);
//! - after compaction and cleaning, a full rebuild from the bucket alone serves byte-identical
//!   partition reads, and the bucket holds fewer objects;
//! - the background task writes checkpoints by itself and a final one at shutdown.
//!
//! Starts its own MinIO (`sluice_testkit::MinioServer`, stopped on drop); bounded in time.

use std::collections::HashMap;
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

use bytes::Bytes;
use futures_util::{StreamExt, TryStreamExt};
use object_store::path::Path;
use object_store::{PutMode, PutPayload};
use sluice_batch::{BatchBuilder, RecordRef};
use sluice_objstore::bucket::{self, Bucket, BucketConfig, StorageUrl};
use sluice_objstore::cache::{CacheSettings, ReadCache};
use sluice_objstore::flush::FlushSettings;
use sluice_objstore::index::{Index, ObjectSummary};
use sluice_objstore::maintenance::{
    Host, Maintenance, MaintenanceSettings, Parts, RoundReport, Worker, list_checkpoints,
    write_checkpoint,
};
use sluice_objstore::meta::{MetaChange, ProducerBatch};
use sluice_objstore::name::{COMPACTED_ID_BASE, compacted_prefix, objects_prefix};
use sluice_objstore::rebuild::catch_up;
use sluice_objstore::{
    ObjectHeader, ObjectWriter, TopicId, object_name, patch_base_offsets, verify_run,
};
use sluice_testkit::MinioServer;

const TOPIC: TopicId = TopicId([0x6b; 16]);
const PARTITIONS: i32 = 4;
/// Each test's work must finish within this.
const BOUND: Duration = Duration::from_secs(120);

fn open(minio: &MinioServer, prefix: &str) -> Bucket {
    let env: HashMap<&str, String> = minio.env_vars().into_iter().collect();
    let url = StorageUrl::parse(&format!("s3://{}/{prefix}", minio.bucket())).unwrap();
    let mut config = BucketConfig::from_env(url, |name| env.get(name).cloned()).unwrap();
    config.request_timeout = Duration::from_secs(10);
    bucket::open(config).expect("open the bucket")
}

/// One batch of 4 records.
fn batch(ts: i64) -> Vec<u8> {
    let mut out = Vec::new();
    let mut b = BatchBuilder::new(&mut out);
    for i in 0..4 {
        b.push(&RecordRef {
            key: None,
            value: Some(b"a small record value for maintenance"),
            headers: &[],
            timestamp_ms: ts + i,
        });
    }
    b.finish();
    out
}

/// Flush object `seq` as the flusher writes it: one batch of one partition, its producer
/// batch, a metadata file append; every 100th a log start.
fn object(writer: &mut ObjectWriter, seq: u64, next: &mut [i64]) -> (Bytes, ObjectSummary) {
    let p = (seq % PARTITIONS as u64) as i32;
    writer.begin_run(TOPIC, p).unwrap();
    let first = next[p as usize];
    next[p as usize] = writer
        .push_batches_at(&batch(1_700_000_000_000 + seq as i64), first)
        .unwrap();
    let runs = vec![writer.end_run().unwrap().unwrap()];
    let mut meta = vec![
        MetaChange::ProducerBatch(ProducerBatch {
            topic_id: TOPIC,
            partition: p,
            producer_id: 77,
            epoch: 0,
            first_seq: first as i32,
            last_seq: first as i32 + 3,
            base_offset: first,
            last_offset: first + 3,
        }),
        MetaChange::FileAppend {
            path: "groups/groups.log".into(),
            bytes: seq.to_be_bytes().to_vec(),
        },
    ];
    if seq.is_multiple_of(100) {
        meta.push(MetaChange::LogStart {
            topic_id: TOPIC,
            partition: p,
            offset: next[p as usize] - 8,
        });
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

async fn put_all(bucket: &Bucket, objects: Vec<(u64, Bytes)>) {
    let store = bucket.store().clone();
    let prefix = bucket.url().prefix().to_owned();
    let puts = futures_util::stream::iter(objects)
        .map(|(seq, bytes)| {
            let store = store.clone();
            let key = Path::from(object_name(&prefix, seq));
            async move {
                store
                    .put_opts(&key, PutPayload::from_bytes(bytes), PutMode::Create.into())
                    .await
            }
        })
        .buffer_unordered(16)
        .collect::<Vec<_>>()
        .await;
    assert!(puts.iter().all(Result::is_ok), "a PUT failed");
}

async fn count(bucket: &Bucket, dir: &str) -> usize {
    let metas: Vec<object_store::ObjectMeta> = bucket
        .store()
        .list(Some(&Path::from(dir)))
        .try_collect()
        .await
        .unwrap();
    metas.len()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_checkpoint_bounds_the_rebuild_of_2000_objects() {
    const OBJECTS: u64 = 2_000;
    const CHECKPOINT_AT: u64 = 1_900;
    let minio = MinioServer::start();
    let bucket = open(&minio, "checkpointed");
    let dir = tempfile::tempdir().unwrap();
    let url = bucket.url().to_string();
    let direct = Index::open(&dir.path().join("direct.sqlite"), &url).unwrap();
    let mut writer = ObjectWriter::new();
    let mut next = vec![0i64; PARTITIONS as usize];
    let mut objects = Vec::new();
    let mut checkpoint = None;
    for seq in 1..=OBJECTS {
        let (bytes, summary) = object(&mut writer, seq, &mut next);
        direct.apply(&summary).unwrap();
        objects.push((seq, bytes));
        if seq == CHECKPOINT_AT {
            checkpoint = Some(direct.snapshot().unwrap());
        }
    }
    tokio::time::timeout(BOUND, put_all(&bucket, objects))
        .await
        .expect("PUTs within the bound");

    // The whole history, object by object.
    let full = Index::open(&dir.path().join("full.sqlite"), &url).unwrap();
    let full_report = tokio::time::timeout(BOUND, catch_up(&bucket, &full))
        .await
        .expect("catch-up within its bound")
        .unwrap();
    assert_eq!(full_report.objects_applied, OBJECTS);
    assert_eq!(full.snapshot().unwrap(), direct.snapshot().unwrap());

    // A checkpoint at 1,900 (as the maintenance task writes it), then 100 objects.
    let at = Index::open(&dir.path().join("at.sqlite"), &url).unwrap();
    at.load_snapshot(&checkpoint.unwrap()).unwrap();
    let (seq, checkpoint_bytes) = write_checkpoint(&bucket, &at, 1, 0).await.unwrap().unwrap();
    assert_eq!(seq, CHECKPOINT_AT);
    let quick = Index::open(&dir.path().join("quick.sqlite"), &url).unwrap();
    let quick_report = tokio::time::timeout(BOUND, catch_up(&bucket, &quick))
        .await
        .expect("catch-up within its bound")
        .unwrap();
    eprintln!(
        "{OBJECTS} objects: full rebuild {:?} ({} bytes read); from the checkpoint at {CHECKPOINT_AT} \
         ({checkpoint_bytes} bytes) {:?} ({} objects applied, {} bytes read)",
        full_report.elapsed,
        full_report.bytes_read,
        quick_report.elapsed,
        quick_report.objects_applied,
        quick_report.bytes_read
    );
    assert_eq!(quick_report.checkpoint, Some(CHECKPOINT_AT));
    assert_eq!(quick_report.objects_applied, OBJECTS - CHECKPOINT_AT);
    assert_eq!(quick.snapshot().unwrap(), direct.snapshot().unwrap());
    assert!(quick_report.bytes_read < full_report.bytes_read / 2);
    assert!(quick_report.elapsed < full_report.elapsed);
}

fn cache(bucket: &Bucket, dir: &std::path::Path) -> ReadCache {
    ReadCache::open(
        bucket.clone(),
        CacheSettings {
            memory_bytes: 4 << 20,
            disk_bytes: 0,
            dir: dir.to_path_buf(),
            gets_in_flight: 8,
        },
    )
    .unwrap()
}

/// Every partition's bytes as a reader gets them, loaded from the bucket and CRC-checked.
async fn reads(index: &Index, cache: &ReadCache) -> Vec<Vec<u8>> {
    let mut out = Vec::new();
    for p in 0..PARTITIONS {
        let mut bytes = Vec::new();
        for run in index.runs(TOPIC, p).unwrap() {
            let loaded = cache
                .load(
                    run.object_seq,
                    run.data_offset..run.data_offset + run.data_len,
                )
                .await
                .unwrap();
            bytes.extend_from_slice(verify_run(&loaded, &run.entry(TOPIC, p)).unwrap());
        }
        out.push(bytes);
    }
    out
}

/// Writes `n` objects through the flusher, one batch each, partitions in turn.
async fn produce(parts: &Parts, n: usize, next: &mut [i64]) {
    for i in 0..n {
        let p = (i % PARTITIONS as usize) as i32;
        let mut run = batch(1_000 * next[p as usize]);
        next[p as usize] = patch_base_offsets(&mut run, next[p as usize]).unwrap();
        let ticket = parts.flusher().add_run(TOPIC, p, &run, &[]).unwrap();
        parts.flusher().flush_now();
        ticket.wait().await.unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn compaction_and_cleaning_keep_reads_byte_identical_after_a_full_rebuild() {
    let minio = MinioServer::start();
    let bucket = open(&minio, "compacted");
    let dir = tempfile::tempdir().unwrap();
    let url = bucket.url().to_string();
    let index = Arc::new(Index::open(&dir.path().join("live.sqlite"), &url).unwrap());
    let parts = Parts::start(
        bucket.clone(),
        index,
        cache(&bucket, &dir.path().join("c1")),
        1,
        FlushSettings {
            linger: Duration::from_millis(1),
            ..FlushSettings::default()
        },
    );
    let work = async {
        let mut next = vec![0i64; PARTITIONS as usize];
        produce(&parts, 80, &mut next).await;
        let before = reads(parts.index(), parts.cache()).await;
        let objects_before = count(&bucket, &objects_prefix("compacted")).await;
        assert_eq!(objects_before, 80);

        let mut worker = Worker::new(
            MaintenanceSettings {
                compact_min_runs: 4,
                checkpoint_interval_objects: 50,
                ..MaintenanceSettings::default()
            },
            1,
        );
        // Round 1: a checkpoint (80 ≥ 50 objects), one compaction.
        let r1 = worker.round(parts.as_ref()).await;
        assert_eq!(r1.errors, 0, "{r1:?}");
        assert!(r1.checkpoint.is_some() && r1.runs_compacted == 20, "{r1:?}");
        let mut report = RoundReport::default();
        for _ in 0..PARTITIONS {
            worker.compact(parts.as_ref(), &mut report).await.unwrap();
        }
        assert_eq!(report.runs_compacted, 60, "{report:?}");
        for p in 0..PARTITIONS {
            let runs = parts.index().runs(TOPIC, p).unwrap();
            assert_eq!(runs.len(), 1, "partition {p}: {runs:?}");
            assert!(runs[0].object_seq >= COMPACTED_ID_BASE);
        }
        assert_eq!(reads(parts.index(), parts.cache()).await, before);

        // More traffic, a second checkpoint: the sources are covered and go.
        produce(&parts, 8, &mut next).await;
        worker
            .checkpoint(parts.as_ref(), true, &mut report)
            .await
            .unwrap();
        worker.clean(parts.as_ref(), &mut report).await.unwrap();
        // The 80 sources; the objects holding the 4 moves are after the older checkpoint.
        assert_eq!(report.objects_deleted, 80, "{report:?}");
        let objects_after = count(&bucket, &objects_prefix("compacted")).await;
        let compacted = count(&bucket, &compacted_prefix("compacted")).await;
        eprintln!(
            "objects before {objects_before}, after compaction and cleaning {objects_after} \
             flush + {compacted} compacted"
        );
        assert_eq!(objects_after, PARTITIONS as usize + 8);
        assert_eq!(compacted, PARTITIONS as usize);

        // The bucket alone: a fresh index and cache read the same bytes.
        let expected = reads(parts.index(), parts.cache()).await;
        let rebuilt = Index::open(&dir.path().join("rebuilt.sqlite"), &url).unwrap();
        let r = catch_up(&bucket, &rebuilt).await.unwrap();
        assert!(r.checkpoint.is_some(), "{r:?}");
        // Everything but the known objects: the checkpoint still lists the ones deleted
        // after it was written (a later round deletes them again, a no-op, and forgets them).
        let (mut a, mut b) = (
            rebuilt.snapshot().unwrap(),
            parts.index().snapshot().unwrap(),
        );
        a.objects.retain(|o| o.sequence > 80);
        b.objects.retain(|o| o.sequence > 80);
        assert_eq!(a, b);
        let fresh = cache(&bucket, &dir.path().join("c2"));
        let got = reads(&rebuilt, &fresh).await;
        assert_eq!(got, expected);
        for p in 0..PARTITIONS as usize {
            assert_eq!(&got[p][..before[p].len()], &before[p][..]);
        }
        assert!(fresh.stats().gets > 0);
    };
    tokio::time::timeout(BOUND, work)
        .await
        .expect("within the bound");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_task_checkpoints_by_itself_and_at_shutdown() {
    let minio = MinioServer::start();
    let bucket = open(&minio, "task");
    let dir = tempfile::tempdir().unwrap();
    let url = bucket.url().to_string();
    let index = Arc::new(Index::open(&dir.path().join("live.sqlite"), &url).unwrap());
    let parts = Parts::start(
        bucket.clone(),
        index,
        cache(&bucket, &dir.path().join("c")),
        1,
        FlushSettings {
            linger: Duration::from_millis(1),
            ..FlushSettings::default()
        },
    );
    let work = async {
        let host: Weak<dyn Host> = Arc::downgrade(&parts) as _;
        let task = Maintenance::start(
            host,
            1,
            MaintenanceSettings {
                tick: Duration::from_millis(50),
                checkpoint_interval_objects: 10,
                ..MaintenanceSettings::default()
            },
        );
        let mut next = vec![0i64; PARTITIONS as usize];
        let wait_for = |n: usize| {
            let bucket = bucket.clone();
            async move {
                let started = Instant::now();
                while list_checkpoints(&bucket).await.unwrap().len() < n {
                    assert!(started.elapsed() < Duration::from_secs(20), "no checkpoint");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
            }
        };
        produce(&parts, 12, &mut next).await;
        wait_for(1).await;
        produce(&parts, 12, &mut next).await;
        wait_for(2).await;
        produce(&parts, 3, &mut next).await;
        task.shutdown().await;
        let checkpoints = list_checkpoints(&bucket).await.unwrap();
        assert_eq!(checkpoints.len(), 2, "{checkpoints:?}");
        assert_eq!(checkpoints.last().copied(), parts.index().last_sequence());
    };
    tokio::time::timeout(BOUND, work)
        .await
        .expect("within the bound");
}
