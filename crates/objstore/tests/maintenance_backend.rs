//! The maintenance task inside the real backend (`ObjectBackend`), on an in-memory bucket: a
//! clean shutdown writes a final checkpoint, and a start on an empty data directory loads it
//! instead of reading every object, then serves the same records.

use std::sync::Arc;
use std::time::Duration;

use object_store::ObjectStore;
use object_store::memory::InMemory;
use sluice_log::LogConfig;
use sluice_log::batch::BatchView;
use sluice_log::batch::build::{Record, batch};
use sluice_objstore::cache::CacheSettings;
use sluice_objstore::flush::FlushSettings;
use sluice_objstore::lease::SystemClock;
use sluice_objstore::maintenance::list_checkpoints;
use sluice_objstore::{
    Bucket, LeaseSettings, ObjectBackend, ObjectSettings, OpenReport, StorageUrl,
};
use sluice_storage::{PartitionOpener, PartitionStorage};

const TOPIC: [u8; 16] = [3; 16];

fn bucket(store: Arc<dyn ObjectStore>) -> Bucket {
    Bucket::from_store(StorageUrl::parse("s3://bucket/m").unwrap(), store, "memory")
}

async fn open(store: Arc<dyn ObjectStore>, dir: &std::path::Path) -> (ObjectBackend, OpenReport) {
    let settings = ObjectSettings {
        flush: FlushSettings {
            linger: Duration::from_millis(2),
            ..FlushSettings::default()
        },
        cache: CacheSettings::new(dir),
        lease: LeaseSettings::default(),
        maintenance: Default::default(),
    };
    ObjectBackend::open_on(bucket(store), dir, settings, Arc::new(SystemClock))
        .await
        .unwrap()
}

fn one(value: &[u8]) -> Vec<u8> {
    batch(
        1_700_000_000_000,
        &[Record {
            timestamp_delta: 0,
            key: None,
            value: Some(value),
        }],
    )
}

async fn read_offsets(p: &dyn PartitionStorage) -> Vec<i64> {
    if let Some(load) = p.prepare_read(0, 1 << 20) {
        load.await.unwrap();
    }
    let records = p.read(0, 1 << 20).unwrap().records;
    let mut rest = &records[..];
    let mut out = Vec::new();
    while !rest.is_empty() {
        let view = BatchView::parse(rest).unwrap();
        out.push(view.base_offset());
        rest = &rest[view.len()..];
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_clean_shutdown_checkpoints_and_the_next_start_loads_it() {
    let store: Arc<dyn ObjectStore> = Arc::new(InMemory::new());
    let work = async {
        let dir = tempfile::tempdir().unwrap();
        let (backend, _) = open(Arc::clone(&store), dir.path()).await;
        let p = backend
            .open_partition(TOPIC, 0, LogConfig::default())
            .unwrap();
        for v in [b"a", b"b", b"c", b"d"] {
            p.append(&one(v)).unwrap().durable().await.unwrap();
        }
        let last = backend.flusher().stats().objects_committed;
        assert_eq!(last, 4);
        drop(p);
        backend.shutdown().await;
        let checkpoints = list_checkpoints(&bucket(Arc::clone(&store))).await.unwrap();
        assert_eq!(
            checkpoints,
            vec![4],
            "the final checkpoint covers every object"
        );

        // An empty data directory: the checkpoint replaces reading the four objects.
        let dir2 = tempfile::tempdir().unwrap();
        let (backend, report) = open(Arc::clone(&store), dir2.path()).await;
        assert_eq!(report.objects_applied, 0, "{report:?}");
        assert_eq!(report.next_sequence, 5);
        let p = backend
            .open_partition(TOPIC, 0, LogConfig::default())
            .unwrap();
        assert_eq!(p.high_watermark(), 4);
        assert_eq!(read_offsets(&*p).await, vec![0, 1, 2, 3]);
        let e = p.append(&one(b"e")).unwrap().durable().await.unwrap();
        assert_eq!(e.base_offset, 4);
        drop(p);
        backend.shutdown().await;
        let checkpoints = list_checkpoints(&bucket(Arc::clone(&store))).await.unwrap();
        assert_eq!(checkpoints, vec![4, 5]);
    };
    tokio::time::timeout(Duration::from_secs(60), work)
        .await
        .expect("within the bound");
}
