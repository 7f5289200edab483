//! The cluster id object (`PREFIX/cluster-id`): made once by the first broker on a bucket,
//! read back by every later one (a restart on a new data directory included), never
//! rewritten, and refused with a clear error when it does not hold an id.

use std::sync::Arc;

use object_store::memory::InMemory;
use object_store::{ObjectStore, ObjectStoreExt, PutPayload};
use sluice_objstore::backend::CLUSTER_ID_OBJECT;
use sluice_objstore::cache::CacheSettings;
use sluice_objstore::lease::SystemClock;
use sluice_objstore::{Bucket, ObjectBackend, ObjectSettings, StorageUrl};

async fn open(store: &Arc<dyn ObjectStore>, dir: &std::path::Path) -> ObjectBackend {
    let settings = ObjectSettings {
        flush: Default::default(),
        cache: CacheSettings::new(dir),
        lease: Default::default(),
        maintenance: Default::default(),
    };
    let url = StorageUrl::parse("s3://bucket/p").unwrap();
    let bucket = Bucket::from_store(url, Arc::clone(store), "memory");
    ObjectBackend::open_on(bucket, dir, settings, Arc::new(SystemClock))
        .await
        .unwrap()
        .0
}

/// Accepts what a test id looks like: 22 characters.
fn check(id: &str) -> Result<(), String> {
    if id.len() == 22 {
        Ok(())
    } else {
        Err(format!("{id:?} is not a cluster id"))
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_first_id_proposed_stays_the_buckets() {
    let store: Arc<dyn ObjectStore> = Arc::new(InMemory::new());
    let first = "AAAAAAAAAAAAAAAAAAAAAA";
    let dir = tempfile::tempdir().unwrap();
    let backend = open(&store, dir.path()).await;
    assert_eq!(backend.bind_cluster_id(first, check).await.unwrap(), first);
    // Asked again (a second call, or a racing broker): the stored one.
    let other = "BBBBBBBBBBBBBBBBBBBBBB";
    assert_eq!(backend.bind_cluster_id(other, check).await.unwrap(), first);
    backend.shutdown().await;

    // A new data directory on the same bucket: the same id.
    let dir = tempfile::tempdir().unwrap();
    let backend = open(&store, dir.path()).await;
    assert_eq!(backend.bind_cluster_id(other, check).await.unwrap(), first);
    let key = object_store::path::Path::from(format!("p/{CLUSTER_ID_OBJECT}"));
    let body = store.get(&key).await.unwrap().bytes().await.unwrap();
    assert_eq!(&body[..], format!("{first}\n").as_bytes());

    // A damaged object is an error naming it, never replaced by a new id.
    store
        .put(&key, PutPayload::from_static(b"not an id\n"))
        .await
        .unwrap();
    let e = backend.bind_cluster_id(other, check).await.unwrap_err();
    let e = e.to_string();
    assert!(
        e.contains("p/cluster-id") && e.contains("not a cluster id"),
        "{e}"
    );
    store
        .put(&key, PutPayload::from(vec![b'A'; 100]))
        .await
        .unwrap();
    let e = backend.bind_cluster_id(other, check).await.unwrap_err();
    assert!(e.to_string().contains("100 bytes"), "{e}");
    backend.shutdown().await;
}
