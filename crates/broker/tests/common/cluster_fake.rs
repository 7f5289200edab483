//! An in-memory stand-in for the cluster's metadata store ([`ClusterMeta`]) and partition
//! storage ([`PartitionOpener`]), for tests of the broker in cluster mode.
//!
//! [`FakeDb`] is the shared "database": the catalog, the live brokers, the next producer id.
//! Each broker gets its own [`FakeMeta`] on it, with its own catalog copy that changes only
//! on [`ClusterMeta::refresh`] (what the broker calls after its own changes) or
//! [`FakeMeta::poll`] (what the real store's refresh interval does), so a test controls when
//! one broker sees another's change.
//!
//! Uses only what `sluice-broker` exports, so the HTTP tests include it too.
#![allow(dead_code)]

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use futures::FutureExt;
use futures::future::BoxFuture;
use sluice_broker::cluster::{Catalog, CatalogTopic, ClusterError, ClusterMeta, ClusterNode};
use sluice_broker::config::LogConfig;
use sluice_broker::storage::{
    Appended, MetaJournal, PartitionOpener, PartitionStorage, ReadResult, StorageError,
};
use sluice_broker::uuid::Uuid;
use tokio::sync::watch;

/// Producer ids per block: small, so tests cross block boundaries.
pub const BLOCK: i64 = 10;

#[derive(Debug, Default)]
struct Db {
    catalog: Catalog,
    live: Vec<ClusterNode>,
    next_producer_id: i64,
    blocks_handed_out: usize,
    /// Every call fails with `Unavailable` while set.
    down: bool,
}

/// The shared store.
#[derive(Debug, Default)]
pub struct FakeDb {
    db: Mutex<Db>,
}

impl FakeDb {
    pub fn new() -> Arc<FakeDb> {
        Arc::new(FakeDb::default())
    }

    /// A broker `node_id` at `127.0.0.1:port` in `rack`, live, and its view of the store.
    pub fn join(self: &Arc<Self>, node_id: i32, port: i32, rack: &str) -> Arc<FakeMeta> {
        let mut db = self.db.lock().unwrap();
        db.live.push(ClusterNode {
            node_id,
            host: "127.0.0.1".into(),
            port,
            rack: Some(rack.into()),
        });
        db.live.sort_by_key(|n| n.node_id);
        Arc::new(FakeMeta {
            db: Arc::clone(self),
            node_id,
            copy: watch::channel(Arc::new(db.catalog.clone())).0,
            refreshes: AtomicUsize::new(0),
        })
    }

    /// Takes a broker off the live list (its lease lapsed).
    pub fn lapse(&self, node_id: i32) {
        self.db
            .lock()
            .unwrap()
            .live
            .retain(|n| n.node_id != node_id);
    }

    pub fn set_down(&self, down: bool) {
        self.db.lock().unwrap().down = down;
    }

    pub fn catalog(&self) -> Catalog {
        self.db.lock().unwrap().catalog.clone()
    }

    pub fn blocks_handed_out(&self) -> usize {
        self.db.lock().unwrap().blocks_handed_out
    }

    /// Runs `change` on the catalog (bumping its version) unless the store is down.
    fn change<T>(
        &self,
        change: impl FnOnce(&mut BTreeMap<String, CatalogTopic>) -> Result<T, ClusterError>,
    ) -> Result<T, ClusterError> {
        let mut db = self.db.lock().unwrap();
        if db.down {
            return Err(down());
        }
        let out = change(&mut db.catalog.topics)?;
        db.catalog.version += 1;
        Ok(out)
    }
}

fn down() -> ClusterError {
    ClusterError::Unavailable("connection refused (the fake store is down)".into())
}

/// One broker's view of the store.
#[derive(Debug)]
pub struct FakeMeta {
    db: Arc<FakeDb>,
    node_id: i32,
    copy: watch::Sender<Arc<Catalog>>,
    refreshes: AtomicUsize,
}

impl FakeMeta {
    /// What the real store's refresh interval does: the copy takes the store's catalog.
    pub fn poll(&self) {
        let catalog = self.db.catalog();
        self.copy.send_if_modified(|copy| {
            let changed = **copy != catalog;
            if changed {
                *copy = Arc::new(catalog);
            }
            changed
        });
    }

    /// Times [`ClusterMeta::refresh`] was called.
    pub fn refreshes(&self) -> usize {
        self.refreshes.load(Ordering::SeqCst)
    }
}

fn done<T: Send + 'static>(
    r: Result<T, ClusterError>,
) -> BoxFuture<'static, Result<T, ClusterError>> {
    futures::future::ready(r).boxed()
}

impl ClusterMeta for FakeMeta {
    fn node_id(&self) -> i32 {
        self.node_id
    }

    fn cluster_id(&self) -> String {
        "fake-cluster".into()
    }

    fn live_brokers(&self) -> Arc<Vec<ClusterNode>> {
        Arc::new(self.db.db.lock().unwrap().live.clone())
    }

    /// Partition p of a topic goes to the live broker at (p + a hash of the id) mod count.
    fn leader_for(&self, topic_id: Uuid, partition: i32) -> i32 {
        let live = self.live_brokers();
        if live.is_empty() {
            return self.node_id;
        }
        let start = (topic_id.as_u128() % 7) as usize;
        live[(start + partition as usize) % live.len()].node_id
    }

    fn catalog(&self) -> watch::Receiver<Arc<Catalog>> {
        self.copy.subscribe()
    }

    fn refresh(&self) -> BoxFuture<'static, Result<(), ClusterError>> {
        self.refreshes.fetch_add(1, Ordering::SeqCst);
        if self.db.db.lock().unwrap().down {
            return done(Err(down()));
        }
        self.poll();
        done(Ok(()))
    }

    fn create_topic(
        &self,
        id: Uuid,
        name: String,
        partitions: i32,
        configs: BTreeMap<String, String>,
    ) -> BoxFuture<'static, Result<(), ClusterError>> {
        done(self.db.change(|topics| {
            if topics.contains_key(&name) {
                return Err(ClusterError::TopicExists(name));
            }
            if partitions < 1 {
                return Err(ClusterError::InvalidPartitions(format!(
                    "a topic needs at least one partition, not {partitions}"
                )));
            }
            let topic = CatalogTopic {
                id,
                name: name.clone(),
                partitions,
                configs,
            };
            topics.insert(name, topic);
            Ok(())
        }))
    }

    fn delete_topic(&self, name: String) -> BoxFuture<'static, Result<(), ClusterError>> {
        done(self.db.change(|topics| {
            topics
                .remove(&name)
                .map(|_| ())
                .ok_or(ClusterError::UnknownTopic(name))
        }))
    }

    fn create_partitions(
        &self,
        name: String,
        total: i32,
    ) -> BoxFuture<'static, Result<(), ClusterError>> {
        done(self.db.change(|topics| {
            let topic = topics
                .get_mut(&name)
                .ok_or_else(|| ClusterError::UnknownTopic(name.clone()))?;
            if total <= topic.partitions {
                return Err(ClusterError::InvalidPartitions(format!(
                    "topic '{name}' has {} partitions; {total} is not more",
                    topic.partitions
                )));
            }
            topic.partitions = total;
            Ok(())
        }))
    }

    fn set_configs(
        &self,
        name: String,
        configs: BTreeMap<String, String>,
    ) -> BoxFuture<'static, Result<(), ClusterError>> {
        done(self.db.change(|topics| {
            let topic = topics
                .get_mut(&name)
                .ok_or(ClusterError::UnknownTopic(name))?;
            topic.configs = configs;
            Ok(())
        }))
    }

    fn producer_id_block(&self) -> BoxFuture<'static, Result<(i64, i64), ClusterError>> {
        let mut db = self.db.db.lock().unwrap();
        if db.down {
            return done(Err(down()));
        }
        let first = db.next_producer_id;
        db.next_producer_id += BLOCK;
        db.blocks_handed_out += 1;
        done(Ok((first, BLOCK)))
    }

    fn find_coordinator(&self, _group: String) -> BoxFuture<'static, Result<i32, ClusterError>> {
        done(Ok(self.node_id))
    }
}

/// A partition that keeps nothing: what the broker's topic admin needs of one.
#[derive(Debug, Default)]
pub struct FakePartition {
    /// The config it was opened with or last given.
    pub config: Mutex<Option<LogConfig>>,
    pub deleted: AtomicUsize,
}

impl PartitionStorage for FakePartition {
    fn append(&self, _batches: &[u8]) -> Result<Appended, StorageError> {
        Err(StorageError::Io {
            op: "append",
            path: "fake".into(),
            source: std::io::Error::other("the fake partition stores nothing"),
        })
    }

    fn read(&self, _offset: i64, _max_bytes: usize) -> Result<ReadResult, StorageError> {
        Ok(ReadResult {
            records: Default::default(),
            high_watermark: 0,
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
        0
    }

    fn size_bytes(&self) -> u64 {
        0
    }

    fn apply_retention(&self) -> Result<usize, StorageError> {
        Ok(0)
    }

    fn delete(&self) -> Result<(), StorageError> {
        self.deleted.fetch_add(1, Ordering::SeqCst);
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

    fn checks_producers(&self) -> bool {
        true
    }

    fn set_config(&self, config: LogConfig) -> Result<(), StorageError> {
        *self.config.lock().unwrap() = Some(config);
        Ok(())
    }
}

/// Durable at once.
#[derive(Debug)]
struct NoJournal;

impl MetaJournal for NoJournal {
    fn record(&self, _change: sluice_broker::storage::FileChange) -> Result<(), StorageError> {
        Ok(())
    }

    fn durable(&self) -> BoxFuture<'static, Result<(), StorageError>> {
        futures::future::ready(Ok(())).boxed()
    }
}

/// One broker's partition storage: every partition it opened, by (topic id, partition).
#[derive(Debug, Default)]
pub struct FakeBackend {
    pub partitions: Mutex<HashMap<(Uuid, i32), Arc<FakePartition>>>,
    pub opens: AtomicUsize,
    /// Every open fails while set.
    pub fail_opens: AtomicBool,
}

impl FakeBackend {
    pub fn new() -> Arc<FakeBackend> {
        Arc::new(FakeBackend::default())
    }

    pub fn partition(&self, topic: Uuid, partition: i32) -> Option<Arc<FakePartition>> {
        self.partitions
            .lock()
            .unwrap()
            .get(&(topic, partition))
            .cloned()
    }

    /// Deletes asked of any partition (the store owns the data: there must be none).
    pub fn deletes(&self) -> usize {
        let partitions = self.partitions.lock().unwrap();
        partitions
            .values()
            .map(|p| p.deleted.load(Ordering::SeqCst))
            .sum()
    }
}

impl PartitionOpener for FakeBackend {
    fn label(&self) -> String {
        "memory".to_owned()
    }

    fn open_partition(
        &self,
        topic_id: [u8; 16],
        partition: i32,
        config: LogConfig,
    ) -> Result<Arc<dyn PartitionStorage>, StorageError> {
        self.opens.fetch_add(1, Ordering::SeqCst);
        if self.fail_opens.load(Ordering::SeqCst) {
            return Err(StorageError::Io {
                op: "open",
                path: "fake".into(),
                source: std::io::Error::other("the fake backend refuses opens"),
            });
        }
        let key = (Uuid::from_bytes(topic_id), partition);
        let mut partitions = self.partitions.lock().unwrap();
        let p = partitions.entry(key).or_default();
        *p.config.lock().unwrap() = Some(config);
        Ok(Arc::clone(p) as Arc<dyn PartitionStorage>)
    }

    fn journal(&self) -> Arc<dyn MetaJournal> {
        Arc::new(NoJournal)
    }
}
