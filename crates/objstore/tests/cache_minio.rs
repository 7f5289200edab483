//! The read cache (`sluice_objstore::cache`) against a real MinIO: a ranged GET of part of an
//! object, which then comes from the disk cache, and what S3 answers for a range that passes
//! the end of the object.
//!
//! The test starts its own MinIO (`sluice_testkit::MinioServer`) and is bounded in time.

use std::collections::HashMap;
use std::path::PathBuf;
use std::time::Duration;

use bytes::Bytes;
use object_store::{ObjectStoreExt, PutPayload};
use sluice_objstore::bucket::{self, BucketConfig, StorageUrl};
use sluice_objstore::cache::{CacheError, CacheSettings, ReadCache};
use sluice_objstore::object_name;
use sluice_testkit::MinioServer;

/// The bound on the whole test's I/O.
const TEST_TIMEOUT: Duration = Duration::from_secs(30);

/// A directory for the disk cache, removed on drop.
struct TestDir(PathBuf);

impl Drop for TestDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

#[tokio::test]
async fn a_range_of_a_minio_object_is_loaded_once_then_served_from_disk() {
    let minio = MinioServer::start();
    let env: HashMap<&str, String> = minio.env_vars().into_iter().collect();
    let url = StorageUrl::parse(&format!("s3://{}/cache-test", minio.bucket())).unwrap();
    let mut config = BucketConfig::from_env(url, |name| env.get(name).cloned()).unwrap();
    config.connect_timeout = Duration::from_secs(1);
    config.request_timeout = Duration::from_secs(5);
    config.retry_timeout = Duration::from_secs(5);
    let bucket = bucket::open(config).expect("open the bucket");

    let object: Bytes = (0..100_000u32)
        .map(|i| (i % 251) as u8)
        .collect::<Vec<u8>>()
        .into();
    let key = bucket.key(&object_name("", 42));
    assert_eq!(
        key.as_ref(),
        "cache-test/objects/00000000000000000042.sluice"
    );

    let dir =
        TestDir(std::env::temp_dir().join(format!("sluice-cache-minio-{}", std::process::id())));
    let cache = ReadCache::open(
        bucket.clone(),
        CacheSettings {
            memory_bytes: 0,
            ..CacheSettings::new(&dir.0)
        },
    )
    .unwrap();

    tokio::time::timeout(TEST_TIMEOUT, async {
        bucket
            .store()
            .put(&key, PutPayload::from(object.clone()))
            .await
            .unwrap();

        assert!(cache.get(42, 1_000..61_000).is_none());
        let loaded = cache.load(42, 1_000..61_000).await.unwrap();
        assert_eq!(loaded, object.slice(1_000..61_000));
        let s = cache.stats();
        assert_eq!((s.gets, s.get_bytes, s.disk_entries), (1, 60_000, 1));
        assert_eq!(cache.get(42, 1_000..61_000).unwrap(), loaded);
        assert_eq!(cache.stats().hits_disk, 1);

        // S3 answers a range that passes the end with the bytes it has: a short read, an error.
        let e = cache.load(42, 99_000..101_000).await.unwrap_err();
        assert!(
            matches!(
                e,
                CacheError::Short {
                    got: 1_000,
                    size: 100_000,
                    ..
                }
            ),
            "{e:?}"
        );
        // A range that starts past the end, and an object that does not exist.
        let e = cache.load(42, 100_000..100_010).await.unwrap_err();
        eprintln!("start past the end: {e}");
        assert!(matches!(e, CacheError::Get { .. }), "{e:?}");
        assert!(!e.to_string().contains('\n'), "one line: {e}");
        let e = cache.load(43, 0..10).await.unwrap_err();
        assert!(matches!(e, CacheError::NotFound { .. }), "{e:?}");
        eprintln!("missing object: {e}");
    })
    .await
    .expect("the test's I/O finished in time");
}
