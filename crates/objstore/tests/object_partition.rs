//! Object-store partitions through the storage seam (`PartitionStorage`), on an in-memory
//! bucket wrapped in a fault injector: appends are readable only once their object is
//! written, a given-up object leaves a gap that readers step over, a cold read loads its
//! range first, retention and deletion, and a second backend on the same bucket (a restart
//! with an empty data directory) sees exactly what was acknowledged.

use std::sync::Arc;
use std::time::Duration;

use object_store::ObjectStore;
use object_store::memory::InMemory;
use sluice_log::batch::BatchView;
use sluice_log::batch::build::{Record, batch};
use sluice_log::{LogConfig, LogError};
use sluice_objstore::cache::CacheSettings;
use sluice_objstore::flush::FlushSettings;
use sluice_objstore::lease::SystemClock;
use sluice_objstore::maintenance::MaintenanceSettings;
use sluice_objstore::{Bucket, LeaseSettings, ObjectBackend, ObjectSettings, StorageUrl};
use sluice_storage::{PartitionOpener, PartitionStorage};
use sluice_testkit::FaultyStore;
use sluice_testkit::faulty::{ErrorKind, Op};

const TOPIC: [u8; 16] = [9; 16];

fn settings(dir: &std::path::Path) -> ObjectSettings {
    ObjectSettings {
        flush: FlushSettings {
            linger: Duration::from_millis(5),
            put_timeout: Duration::from_millis(600),
            backoff_min: Duration::from_millis(10),
            backoff_max: Duration::from_millis(50),
            ..FlushSettings::default()
        },
        cache: CacheSettings::new(dir),
        lease: LeaseSettings::default(),
        maintenance: MaintenanceSettings::default(),
    }
}

async fn open(store: Arc<dyn ObjectStore>, dir: &std::path::Path) -> ObjectBackend {
    open_with(store, dir, settings(dir)).await
}

async fn open_with(
    store: Arc<dyn ObjectStore>,
    dir: &std::path::Path,
    settings: ObjectSettings,
) -> ObjectBackend {
    let bucket = Bucket::from_store(StorageUrl::parse("s3://bucket/p").unwrap(), store, "memory");
    ObjectBackend::open_on(bucket, dir, settings, Arc::new(SystemClock))
        .await
        .unwrap()
        .0
}

fn one(value: &str) -> Vec<u8> {
    one_at(1_700_000_000_000, value)
}

/// One record of `value` stamped `timestamp_ms`, as a batch.
fn one_at(timestamp_ms: i64, value: &str) -> Vec<u8> {
    batch(
        timestamp_ms,
        &[Record {
            timestamp_delta: 0,
            key: None,
            value: Some(value.as_bytes()),
        }],
    )
}

/// (offset, value) of every record batch in `records` (one record per batch here).
fn values(records: &[u8]) -> Vec<(i64, String)> {
    let mut out = Vec::new();
    let mut rest = records;
    while !rest.is_empty() {
        let view = BatchView::parse(rest).unwrap();
        let bytes = view.bytes();
        // The single record's value is the batch's last bytes (no headers): its length is
        // known from the test's own values, so read the tail after the 1-byte value length.
        let text = String::from_utf8_lossy(&bytes[bytes.len() - 2..bytes.len() - 1]).into_owned();
        out.push((view.base_offset(), text));
        rest = &rest[view.len()..];
    }
    out
}

/// Partition 0 of the test topic on `backend`.
fn partition(backend: &ObjectBackend) -> Arc<dyn PartitionStorage> {
    backend
        .open_partition(TOPIC, 0, LogConfig::default())
        .unwrap()
}

async fn read_all(p: &dyn PartitionStorage, from: i64) -> Vec<(i64, String)> {
    if let Some(load) = p.prepare_read(from, 1 << 20) {
        load.await.unwrap();
    }
    values(&p.read(from, 1 << 20).unwrap().records)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acknowledged_appends_are_read_back_and_survive_a_new_data_directory() {
    let store: Arc<dyn ObjectStore> = Arc::new(InMemory::new());
    let dir = tempfile::tempdir().unwrap();
    let backend = open(Arc::clone(&store), dir.path()).await;
    let p = partition(&backend);
    for v in ["a", "b", "c"] {
        let appended = p.append(&one(v)).unwrap();
        // Not readable before its object is written.
        assert!(p.high_watermark() <= appended.base_offset);
        let durable = appended.durable().await.unwrap();
        assert_eq!(durable.base_offset, durable.last_offset);
    }
    assert_eq!(p.high_watermark(), 3);
    assert_eq!(
        read_all(&*p, 0).await,
        [(0, "a".into()), (1, "b".into()), (2, "c".into())]
    );
    assert_eq!(read_all(&*p, 2).await, [(2, "c".into())]);
    assert!(matches!(
        p.read(10, 1),
        Err(LogError::OffsetOutOfRange { .. })
    ));
    backend.shutdown().await;

    // A new data directory: everything comes back from the bucket, read with GETs.
    let dir2 = tempfile::tempdir().unwrap();
    let backend = open(Arc::clone(&store), dir2.path()).await;
    let p = partition(&backend);
    assert_eq!(p.high_watermark(), 3);
    assert!(
        p.prepare_read(0, 1 << 20).is_some(),
        "a cold read must load first"
    );
    assert_eq!(read_all(&*p, 0).await.len(), 3);
    assert!(backend.cache().stats().gets >= 1);
    // New appends follow the old offsets.
    let d = p.append(&one("d")).unwrap().durable().await.unwrap();
    assert_eq!(d.base_offset, 3);
    backend.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_given_up_object_fails_its_appends_and_leaves_a_gap_readers_step_over() {
    let faulty = Arc::new(FaultyStore::new(Arc::new(InMemory::new())));
    let store: Arc<dyn ObjectStore> = Arc::clone(&faulty) as Arc<dyn ObjectStore>;
    let dir = tempfile::tempdir().unwrap();
    let backend = open(Arc::clone(&store), dir.path()).await;
    let p = partition(&backend);
    p.append(&one("a")).unwrap().durable().await.unwrap();

    // The store refuses every PUT for longer than the PUT timeout.
    faulty.fail_next(Op::Put, 1_000, ErrorKind::Generic);
    let lost = p.append(&one("b")).unwrap();
    let err = lost.durable().await.unwrap_err();
    assert!(err.to_string().contains("gave up"), "{err}");
    assert_eq!(
        p.high_watermark(),
        1,
        "nothing of the failed object is visible"
    );
    faulty.clear_faults();

    let c = p.append(&one("c")).unwrap().durable().await.unwrap();
    assert_eq!(c.base_offset, 2, "the failed offset is not reused");
    assert_eq!(p.high_watermark(), 3);
    // A read in the gap returns the batches after it.
    assert_eq!(read_all(&*p, 1).await, [(2, "c".into())]);
    assert_eq!(read_all(&*p, 0).await, [(0, "a".into()), (2, "c".into())]);
    backend.shutdown().await;

    // A rebuild from the bucket agrees: the given-up object is skipped.
    let dir2 = tempfile::tempdir().unwrap();
    let backend = open(store, dir2.path()).await;
    let p = partition(&backend);
    assert_eq!(read_all(&*p, 0).await, [(0, "a".into()), (2, "c".into())]);
    backend.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn retention_moves_the_log_start_and_deletion_closes_the_partition() {
    let store: Arc<dyn ObjectStore> = Arc::new(InMemory::new());
    let dir = tempfile::tempdir().unwrap();
    let backend = open(Arc::clone(&store), dir.path()).await;
    let p = partition(&backend);
    for v in ["a", "b", "c"] {
        p.append(&one(v)).unwrap().durable().await.unwrap();
    }
    // Records from 2023 are older than a day: retention drops whole runs.
    let config = LogConfig {
        retention_ms: Some(24 * 3600 * 1000),
        ..LogConfig::default()
    };
    p.set_config(config).unwrap();
    assert_eq!(p.apply_retention().unwrap(), 3);
    assert_eq!(p.log_start_offset(), 3);
    assert!(matches!(
        p.read(0, 1),
        Err(LogError::OffsetOutOfRange { .. })
    ));
    // The new log start reaches the bucket with the next object.
    p.append(&one("d")).unwrap().durable().await.unwrap();
    backend.shutdown().await;
    let dir2 = tempfile::tempdir().unwrap();
    let backend = open(Arc::clone(&store), dir2.path()).await;
    let p = partition(&backend);
    assert_eq!(p.log_start_offset(), 3);
    assert_eq!(read_all(&*p, 3).await, [(3, "d".into())]);

    p.delete().unwrap();
    assert!(matches!(p.read(3, 1), Err(LogError::Closed { .. })));
    assert!(p.append(&one("e")).is_err());
    backend.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_open_partition_reads_through_compaction_and_cleaning() {
    let store: Arc<dyn ObjectStore> = Arc::new(InMemory::new());
    let dir = tempfile::tempdir().unwrap();
    let mut s = settings(dir.path());
    // No caches: every read is a GET, so a read of a deleted object would fail.
    s.cache.memory_bytes = 0;
    s.cache.disk_bytes = 0;
    s.maintenance = MaintenanceSettings {
        tick: Duration::from_millis(50),
        checkpoint_interval_objects: 3,
        compact_min_runs: 2,
        ..MaintenanceSettings::default()
    };
    let backend = open_with(Arc::clone(&store), dir.path(), s).await;
    let p = partition(&backend);
    let letters = ["a", "b", "c", "d", "e", "f", "g", "h", "i", "j", "k", "l"];
    for v in letters {
        // One object each (the linger passes between appends).
        p.append(&one(v)).unwrap().durable().await.unwrap();
    }
    let want: Vec<(i64, String)> = letters
        .iter()
        .enumerate()
        .map(|(i, v)| (i as i64, (*v).to_owned()))
        .collect();
    // Wait until compacted objects exist and flush objects were deleted, reading all along.
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    loop {
        assert_eq!(read_all(&*p, 0).await[..letters.len()], want[..]);
        let compacted = store
            .list_with_delimiter(Some(&object_store::path::Path::from("p/compacted")))
            .await
            .unwrap()
            .objects
            .len();
        let flushed = store
            .list_with_delimiter(Some(&object_store::path::Path::from("p/objects")))
            .await
            .unwrap()
            .objects
            .len();
        if compacted > 0 && flushed < letters.len() {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "no compaction and cleaning within 20 s ({compacted} compacted, {flushed} flush objects)"
        );
        // More objects move the checkpoints (and so what may be compacted and cleaned) on.
        p.append(&one("z")).unwrap().durable().await.unwrap();
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(read_all(&*p, 0).await[..letters.len()], want[..]);
    backend.shutdown().await;

    // A new data directory agrees.
    let dir2 = tempfile::tempdir().unwrap();
    let backend = open(Arc::clone(&store), dir2.path()).await;
    let p = partition(&backend);
    assert_eq!(read_all(&*p, 0).await[..letters.len()], want[..]);
    backend.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_timestamp_lookup_on_a_cold_cache_loads_its_run_and_is_exact() {
    let store: Arc<dyn ObjectStore> = Arc::new(InMemory::new());
    let dir = tempfile::tempdir().unwrap();
    let backend = open(Arc::clone(&store), dir.path()).await;
    let p = partition(&backend);
    // Three batches 10 ms apart in one append: one run of one object.
    let t0 = 1_700_000_000_000;
    let mut batches = Vec::new();
    for (i, v) in ["a", "b", "c"].iter().enumerate() {
        batches.extend(one_at(t0 + 10 * i as i64, v));
    }
    p.append(&batches).unwrap().durable().await.unwrap();
    backend.shutdown().await;

    // A new data directory: nothing cached.
    let dir2 = tempfile::tempdir().unwrap();
    let backend = open(Arc::clone(&store), dir2.path()).await;
    let p = partition(&backend);
    assert_eq!(p.high_watermark(), 3);
    // Without the load, only the run's first offset is known.
    assert_eq!(p.offset_for_timestamp(t0 + 15).unwrap(), Some((0, t0 + 20)));
    let load = p
        .prepare_offset_for_timestamp(t0 + 15)
        .expect("a cold run must load first");
    load.await.unwrap();
    assert_eq!(p.offset_for_timestamp(t0 + 15).unwrap(), Some((2, t0 + 20)));
    assert_eq!(p.offset_for_timestamp(t0).unwrap(), Some((0, t0)));
    // Loaded now: nothing more to wait for; and no run holds a later time.
    assert!(p.prepare_offset_for_timestamp(t0 + 15).is_none());
    assert!(p.prepare_offset_for_timestamp(t0 + 21).is_none());
    assert_eq!(p.offset_for_timestamp(t0 + 21).unwrap(), None);
    backend.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn not_ready_while_the_writer_lease_has_lapsed_and_ready_again_after_a_renewal() {
    let faulty = Arc::new(FaultyStore::new(Arc::new(InMemory::new())));
    let store: Arc<dyn ObjectStore> = Arc::clone(&faulty) as Arc<dyn ObjectStore>;
    let dir = tempfile::tempdir().unwrap();
    let mut s = settings(dir.path());
    s.lease = LeaseSettings {
        duration: Duration::from_millis(600),
        renew_interval: Duration::from_millis(150),
        op_timeout: Duration::from_millis(100),
    };
    let backend = open_with(Arc::clone(&store), dir.path(), s).await;
    assert_eq!(backend.not_ready(), None);

    // Every request fails: renewals fail until the lease lapses.
    faulty.down();
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    let (status, error) = loop {
        if let Some(why) = backend.not_ready() {
            break why;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the lease never lapsed"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert_eq!(status, "writer_lease_lapsed");
    assert!(
        error.contains("s3://bucket/p") && error.contains("lapsed"),
        "{error}"
    );

    // The store is back: the next renewal makes the broker ready again.
    faulty.up();
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while backend.not_ready().is_some() {
        assert!(std::time::Instant::now() < deadline, "never ready again");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    backend.shutdown().await;
    assert_eq!(
        backend.not_ready().map(|(status, _)| status),
        Some("writer_lease_released")
    );
}
