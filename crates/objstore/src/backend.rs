//! The object-storage backend as the broker sees it: [`ObjectBackend`] opens the bucket,
//! takes the writer lease, brings the local index up to date with the bucket, restores the
//! broker's metadata files from it, and starts the flusher and the read cache. It then opens
//! partitions ([`sluice_storage::PartitionOpener`]) and makes metadata file changes durable
//! in the next flush object ([`sluice_storage::MetaJournal`]).
//!
//! Start order, and why:
//! 1. the bucket's start check (a clear line for a missing bucket, refused keys, no answer);
//! 2. the writer lease, before anything is read: once it is held no other broker adds
//!    objects, so what the catch-up lists is complete;
//! 3. the catch-up of the index (`<data dir>/objstore/index.sqlite`, rebuilt from nothing if
//!    missing or made for another bucket);
//! 4. the metadata files (topics, the group store, the producer-id reservation) are made what
//!    the bucket says they are;
//! 5. the flusher starts at the sequence after the last object in the bucket.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use futures_util::FutureExt;
use futures_util::future::BoxFuture;
use sluice_log::{LogConfig, LogError};
use sluice_storage::{FileChange, MetaJournal, PartitionOpener, PartitionStorage, StorageError};

use crate::bucket::{Bucket, BucketConfig, BucketError};
use crate::cache::{CacheSettings, ReadCache};
use crate::flush::{AbandonedObject, CommittedObject, FlushSettings, FlushSink, Flusher, Ticket};
use crate::format::TopicId;
use crate::index::{Index, ObjectSummary};
use crate::lease::{Lease, LeaseClock, LeaseError, LeaseKeeper, LeaseSettings};
use crate::meta::MetaChange;
use crate::partition::ObjectPartition;

/// The directory under the data directory that object-storage mode keeps (index, cache).
pub const OBJSTORE_DIR: &str = "objstore";
/// The index file in it.
pub const INDEX_FILE: &str = "index.sqlite";
/// The read cache's directory in it.
pub const CACHE_DIR: &str = "cache";
/// The object under the prefix that holds the cluster id (`PREFIX/cluster-id`), written once.
pub const CLUSTER_ID_OBJECT: &str = "cluster-id";
/// The most bytes a cluster id object may have (an id is 22 characters and a newline).
const CLUSTER_ID_BYTES_MAX: u64 = 64;
/// Bound on each request that creates or reads the cluster id object.
const CLUSTER_ID_OP_TIMEOUT: Duration = Duration::from_secs(10);

/// Everything object-storage mode is configured with.
#[derive(Debug, Clone)]
pub struct ObjectSettings {
    pub flush: FlushSettings,
    /// `dir` is replaced by `<data dir>/objstore/cache`.
    pub cache: CacheSettings,
    pub lease: LeaseSettings,
    /// Checkpoints, compaction and cleaning (`crate::maintenance`).
    pub maintenance: crate::maintenance::MaintenanceSettings,
}

/// Why object-storage mode could not start; one line each, printed as is.
#[derive(Debug, thiserror::Error)]
pub enum BackendError {
    #[error(transparent)]
    Bucket(#[from] BucketError),
    #[error("{0}")]
    Lease(#[from] LeaseError),
    #[error("local index {path}: {detail}")]
    Index { path: PathBuf, detail: String },
    #[error("catching up with the bucket: {0}")]
    Rebuild(String),
    #[error("read cache in {path}: {detail}")]
    Cache { path: PathBuf, detail: String },
    #[error("{op} {path}: {source}")]
    Io {
        op: &'static str,
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error(
        "data directory {0} holds a local-mode broker's partitions; object-storage mode needs a \
         data directory of its own (pass another --data-dir)"
    )]
    LocalData(PathBuf),
    #[error("invalid object-storage settings: {0}")]
    Settings(String),
    #[error("the cluster id in the bucket, {key}: {detail}")]
    ClusterId { key: String, detail: String },
}

/// What the flusher's sink, the partitions and the journal share.
pub(crate) struct Core {
    bucket: Bucket,
    index: Index,
    cache: ReadCache,
    flusher: std::sync::OnceLock<Flusher>,
    clock: Arc<dyn LeaseClock>,
    partitions: Mutex<HashMap<(TopicId, i32), Weak<ObjectPartition>>>,
}

impl Core {
    pub(crate) fn index(&self) -> &Index {
        &self.index
    }
    pub(crate) fn cache(&self) -> &ReadCache {
        &self.cache
    }
    pub(crate) fn flusher(&self) -> &Flusher {
        self.flusher
            .get()
            .expect("the flusher starts before any partition opens")
    }
    pub(crate) fn now_ms(&self) -> i64 {
        self.clock.now_ms()
    }
    pub(crate) fn bucket(&self) -> &Bucket {
        &self.bucket
    }
    /// The open partition, if any (for the maintenance task).
    pub(crate) fn live_partition(
        &self,
        topic_id: TopicId,
        partition: i32,
    ) -> Option<Arc<ObjectPartition>> {
        self.partition(topic_id, partition)
    }
    pub(crate) fn url_label(&self) -> String {
        self.bucket.url().to_string()
    }
    pub(crate) fn forget_partition(&self, topic_id: TopicId, partition: i32) {
        self.partitions
            .lock()
            .expect("partitions lock")
            .remove(&(topic_id, partition));
    }
    fn partition(&self, topic_id: TopicId, partition: i32) -> Option<Arc<ObjectPartition>> {
        self.partitions
            .lock()
            .expect("partitions lock")
            .get(&(topic_id, partition))
            .and_then(Weak::upgrade)
    }
}

/// Applies each object's outcome, in sequence order, before its appends are acknowledged:
/// index first (a restart finds it), then the memory cache (a tail reader finds the bytes),
/// then the partitions' high watermarks (readers may look now).
struct Sink(Weak<Core>);

impl FlushSink for Sink {
    fn committed(&self, object: &CommittedObject) {
        let Some(core) = self.0.upgrade() else {
            return;
        };
        let summary = ObjectSummary {
            sequence: object.sequence,
            size: object.bytes.len() as u64,
            created_ms: object.created_ms,
            runs: object.runs.clone(),
            meta: object.meta.clone(),
        };
        if let Err(e) = core.index.apply(&summary) {
            // The index is a cache of the bucket: the next start catches up from the bucket.
            tracing::error!(object = object.sequence, error = %e, "recording a committed object in the local index");
        }
        core.cache
            .insert_object(object.sequence, object.bytes.clone());
        for run in &object.runs {
            if let Some(p) = core.partition(run.topic_id, run.partition) {
                p.committed(object.sequence, run);
            }
        }
    }

    fn abandoned(&self, object: &AbandonedObject) {
        let Some(core) = self.0.upgrade() else {
            return;
        };
        tracing::error!(object = object.sequence, error = %object.error, "gave up writing a flush object; its produce requests failed with a retriable error");
        if let Err(e) = core.index.mark_abandoned(&[object.sequence]) {
            tracing::error!(object = object.sequence, error = %e, "recording an abandoned object in the local index");
        }
        for run in &object.runs {
            if let Some(p) = core.partition(run.topic_id, run.partition) {
                p.abandoned(object.sequence, run);
            }
        }
    }
}

/// Object-storage mode for one broker.
pub struct ObjectBackend {
    core: Arc<Core>,
    keeper: Mutex<Option<LeaseKeeper>>,
    lease_status: tokio::sync::watch::Receiver<crate::lease::LeaseStatus>,
    journal: Arc<Journal>,
    /// Checkpoints, compaction and the cleaner ([`crate::maintenance`]).
    maintenance: crate::maintenance::Maintenance,
}

impl std::fmt::Debug for ObjectBackend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ObjectBackend")
            .field("url", &self.core.url_label())
            .finish_non_exhaustive()
    }
}

/// What [`ObjectBackend::open`] did, for the start log.
#[derive(Debug, Clone)]
pub struct OpenReport {
    pub epoch: u64,
    pub objects_applied: u64,
    pub objects_skipped: u64,
    pub next_sequence: u64,
    pub catch_up: Duration,
    pub files_restored: usize,
}

impl ObjectBackend {
    /// Opens object-storage mode on `config`'s bucket for the broker whose data directory is
    /// `data_dir` (see the module doc for the steps). Must run inside a tokio runtime.
    pub async fn open(
        config: BucketConfig,
        data_dir: &Path,
        settings: ObjectSettings,
        clock: Arc<dyn LeaseClock>,
    ) -> Result<(ObjectBackend, OpenReport), BackendError> {
        let bucket = crate::bucket::open(config)?;
        Self::open_on(bucket, data_dir, settings, clock).await
    }

    /// [`ObjectBackend::open`] on a bucket already opened (any `object_store` store, e.g. an
    /// in-memory one in tests).
    pub async fn open_on(
        bucket: Bucket,
        data_dir: &Path,
        mut settings: ObjectSettings,
        clock: Arc<dyn LeaseClock>,
    ) -> Result<(ObjectBackend, OpenReport), BackendError> {
        settings.flush.validate().map_err(BackendError::Settings)?;
        let root = data_dir.join(OBJSTORE_DIR);
        refuse_local_data(data_dir, &root)?;
        bucket.check().await?;
        let lease = Lease::acquire(
            Arc::clone(bucket.store()),
            &bucket.url().prefix_path().unwrap_or_default(),
            Arc::clone(&clock),
            settings.lease,
        )
        .await?;
        let epoch = lease.epoch();
        std::fs::create_dir_all(&root).map_err(|source| BackendError::Io {
            op: "create",
            path: root.clone(),
            source,
        })?;
        let index = open_index(&root.join(INDEX_FILE), &bucket.url().to_string())?;
        let started = std::time::Instant::now();
        let caught = crate::rebuild::catch_up(&bucket, &index)
            .await
            .map_err(|e| BackendError::Rebuild(e.to_string()))?;
        let catch_up = started.elapsed();
        let files_restored = restore_files(data_dir, &index)?;
        settings.cache.dir = root.join(CACHE_DIR);
        let cache = ReadCache::open(bucket.clone(), settings.cache.clone()).map_err(|e| {
            BackendError::Cache {
                path: settings.cache.dir.clone(),
                detail: e.to_string(),
            }
        })?;
        let next_sequence = index.last_sequence().map_or(1, |s| s + 1);
        let keeper = lease.keep();
        let core = Arc::new(Core {
            bucket: bucket.clone(),
            index,
            cache,
            flusher: std::sync::OnceLock::new(),
            clock: Arc::clone(&clock),
            partitions: Mutex::new(HashMap::new()),
        });
        let flusher = Flusher::start(
            bucket,
            epoch,
            next_sequence,
            keeper.status(),
            clock,
            settings.flush,
            Arc::new(Sink(Arc::downgrade(&core))),
        );
        let _ = core.flusher.set(flusher);
        let host: Weak<dyn crate::maintenance::Host> = Arc::downgrade(&core) as _;
        let maintenance =
            crate::maintenance::Maintenance::start(host, epoch.0, settings.maintenance);
        let report = OpenReport {
            epoch: epoch.0,
            objects_applied: caught.objects_applied,
            objects_skipped: caught.objects_skipped,
            next_sequence,
            catch_up,
            files_restored,
        };
        Ok((
            ObjectBackend {
                journal: Arc::new(Journal {
                    core: Arc::clone(&core),
                    last: Mutex::new(None),
                }),
                core,
                lease_status: keeper.status(),
                keeper: Mutex::new(Some(keeper)),
                maintenance,
            },
            report,
        ))
    }

    /// The cluster id kept in the bucket (`PREFIX/cluster-id`): `proposed` if this call made
    /// the object (a new bucket or prefix), else what the object holds, once `check` accepts
    /// it. The object is created if absent (`If-None-Match: *`, which the start check proved
    /// the store honours), so of two brokers that ever raced to make it one wins and both
    /// read the winner's; it is never rewritten, so a broker on a wiped data directory
    /// reports the id it reported before. An object `check` refuses is an error, not a new id.
    ///
    /// Durability: when this returns, the id is in the bucket (a successful PUT, or read
    /// from it).
    pub async fn bind_cluster_id(
        &self,
        proposed: &str,
        check: impl Fn(&str) -> Result<(), String>,
    ) -> Result<String, BackendError> {
        use object_store::{ObjectStoreExt, PutMode, PutPayload};
        let bucket = &self.core.bucket;
        let key = bucket.key(CLUSTER_ID_OBJECT);
        let failed = |detail: String| BackendError::ClusterId {
            key: key.to_string(),
            detail,
        };
        let bounded = |op: &'static str| {
            move |_| {
                failed(format!(
                    "no answer to the {op} within {CLUSTER_ID_OP_TIMEOUT:?}"
                ))
            }
        };
        let body = PutPayload::from(format!("{proposed}\n").into_bytes());
        let created = tokio::time::timeout(
            CLUSTER_ID_OP_TIMEOUT,
            bucket.store().put_opts(&key, body, PutMode::Create.into()),
        )
        .await
        .map_err(bounded("create"))?;
        match created {
            Ok(_) => return Ok(proposed.to_owned()),
            Err(object_store::Error::AlreadyExists { .. }) => {}
            Err(e) => return Err(failed(format!("create: {e}"))),
        }
        let read = async {
            let got = bucket.store().get(&key).await?;
            if got.meta.size > CLUSTER_ID_BYTES_MAX {
                return Ok(Err(got.meta.size));
            }
            got.bytes().await.map(Ok)
        };
        let body = tokio::time::timeout(CLUSTER_ID_OP_TIMEOUT, read)
            .await
            .map_err(bounded("read"))?
            .map_err(|e| failed(format!("read: {e}")))?
            .map_err(|size| {
                failed(format!(
                    "{size} bytes, more than the {CLUSTER_ID_BYTES_MAX} a cluster id has"
                ))
            })?;
        let id = std::str::from_utf8(&body)
            .map_err(|_| failed("not UTF-8 text".to_owned()))?
            .trim_end_matches('\n');
        check(id).map_err(|e| {
            failed(format!(
                "{e}; it names the cluster this bucket holds: restore it, or delete it to give \
                 the bucket a new cluster id (clients will then see another cluster)"
            ))
        })?;
        Ok(id.to_owned())
    }

    /// Writes what is queued, waits for it, and releases the writer lease (clean shutdown).
    pub async fn shutdown(&self) {
        // First, so its final checkpoint is written while the flusher still runs.
        self.maintenance.shutdown().await;
        self.core.flusher().shutdown().await;
        let keeper = self.keeper.lock().expect("keeper lock").take();
        if let Some(keeper) = keeper
            && let Err(e) = keeper.shutdown().await
        {
            tracing::warn!(error = %e, "releasing the writer lease");
        }
    }

    /// The flusher (for stats).
    pub fn flusher(&self) -> &Flusher {
        self.core.flusher()
    }

    /// The read cache (for stats).
    pub fn cache(&self) -> &ReadCache {
        &self.core.cache
    }

    /// The writer lease's status now.
    pub fn lease_status(&self) -> crate::lease::LeaseStatus {
        self.lease_status.borrow().clone()
    }

    /// Now, by the backend's clock, in ms since 1970.
    pub fn now_ms(&self) -> i64 {
        self.core.now_ms()
    }

    /// The maintenance task's counters (checkpoints, deletions, compactions).
    pub fn maintenance_stats(&self) -> crate::maintenance::MaintenanceStats {
        self.maintenance.stats()
    }

    /// This backend's series for `/metrics` (Prometheus text).
    pub fn render_metrics(&self) -> String {
        crate::metrics::render(self)
    }

    /// Why this broker cannot acknowledge writes now, as `(status, error)` for `/readyz`: the
    /// flusher's own lease check ([`Flusher::lease_gate`](crate::flush::Flusher::lease_gate))
    /// says its writer lease lapsed (renewals failing: writes wait and resume when one
    /// succeeds), was lost to another broker, or was released at shutdown. `None` while it
    /// may write.
    pub fn not_ready(&self) -> Option<(&'static str, String)> {
        use crate::flush::LeaseGate;
        let url = self.core.url_label();
        match self.core.flusher().lease_gate() {
            LeaseGate::Write => None,
            LeaseGate::Lapsed(why) => Some((
                "writer_lease_lapsed",
                format!("{url}: {why}; produce waits until a renewal succeeds"),
            )),
            LeaseGate::Stop(e) => {
                let released = matches!(self.lease_status(), crate::lease::LeaseStatus::Released);
                let status = if released {
                    "writer_lease_released"
                } else {
                    "writer_lease_lost"
                };
                Some((status, format!("{url}: {e}")))
            }
        }
    }
}

impl PartitionOpener for ObjectBackend {
    fn label(&self) -> String {
        self.core.url_label()
    }

    fn open_partition(
        &self,
        topic_id: [u8; 16],
        partition: i32,
        config: LogConfig,
    ) -> Result<Arc<dyn PartitionStorage>, StorageError> {
        let topic_id = TopicId(topic_id);
        let mut partitions = self.core.partitions.lock().expect("partitions lock");
        if let Some(open) = partitions
            .get(&(topic_id, partition))
            .and_then(Weak::upgrade)
        {
            return Ok(open);
        }
        let p = Arc::new(ObjectPartition::open(
            Arc::clone(&self.core),
            topic_id,
            partition,
            config,
        )?);
        partitions.insert((topic_id, partition), Arc::downgrade(&p));
        Ok(p)
    }

    fn journal(&self) -> Arc<dyn MetaJournal> {
        Arc::clone(&self.journal) as Arc<dyn MetaJournal>
    }
}

/// Metadata file changes go into the next flush object; `durable` waits for the object that
/// holds the last one recorded.
struct Journal {
    core: Arc<Core>,
    last: Mutex<Option<Ticket>>,
}

impl std::fmt::Debug for Journal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Journal")
    }
}

impl MetaJournal for Journal {
    fn record(&self, change: FileChange) -> Result<(), StorageError> {
        let change = match change {
            FileChange::Write { path, contents } => MetaChange::FileWrite { path, contents },
            FileChange::Append { path, bytes } => MetaChange::FileAppend { path, bytes },
            FileChange::Remove { path } => MetaChange::FileRemove { path },
        };
        let mut last = self.last.lock().expect("journal lock");
        let ticket = self
            .core
            .flusher()
            .add_meta(vec![change])
            .map_err(|e| LogError::Io {
                op: "record a metadata change in",
                path: PathBuf::from(self.core.url_label()),
                source: std::io::Error::other(e.to_string()),
            })?;
        *last = Some(ticket);
        Ok(())
    }

    fn durable(&self) -> BoxFuture<'static, Result<(), StorageError>> {
        let last = self.last.lock().expect("journal lock").clone();
        let url = self.core.url_label();
        async move {
            match last {
                None => Ok(()),
                Some(ticket) => ticket.wait().await.map(|_| ()).map_err(|e| LogError::Io {
                    op: "write metadata to",
                    path: PathBuf::from(url),
                    source: std::io::Error::other(e.to_string()),
                }),
            }
        }
        .boxed()
    }
}

/// Opens the index; one made for another bucket or prefix (or unreadable) is removed and
/// rebuilt from the bucket, which is the durable copy.
fn open_index(path: &Path, url: &str) -> Result<Index, BackendError> {
    match Index::open(path, url) {
        Ok(index) => Ok(index),
        Err(first) => {
            tracing::warn!(path = %path.display(), error = %first, "rebuilding the local index from the bucket");
            for suffix in ["", "-wal", "-shm"] {
                let p = PathBuf::from(format!("{}{suffix}", path.display()));
                match std::fs::remove_file(&p) {
                    Ok(()) => {}
                    Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                    Err(source) => {
                        return Err(BackendError::Io {
                            op: "remove",
                            path: p,
                            source,
                        });
                    }
                }
            }
            Index::open(path, url).map_err(|e| BackendError::Index {
                path: path.to_owned(),
                detail: e.to_string(),
            })
        }
    }
}

/// Refuses a data directory that holds a local-mode broker's partition data (segment files)
/// and was never used in object-storage mode: restoring the metadata files from the bucket
/// would otherwise hide those topics.
fn refuse_local_data(data_dir: &Path, objstore: &Path) -> Result<(), BackendError> {
    if objstore.exists() {
        return Ok(());
    }
    let topics = data_dir.join("topics");
    let Ok(entries) = std::fs::read_dir(&topics) else {
        return Ok(());
    };
    for topic in entries.flatten() {
        let Ok(parts) = std::fs::read_dir(topic.path()) else {
            continue;
        };
        for part in parts.flatten() {
            if part.path().is_dir() {
                return Err(BackendError::LocalData(data_dir.to_owned()));
            }
        }
    }
    Ok(())
}

/// The metadata roots the bucket is the truth for: everything under them locally is made
/// what the index says. `producer-ids` is a reservation: the larger of the two is kept.
const METADATA_DIRS: [&str; 2] = ["topics", "groups"];
const PRODUCER_IDS: &str = "producer-ids";

/// Makes the local metadata files what the bucket says they are; returns how many it wrote.
fn restore_files(data_dir: &Path, index: &Index) -> Result<usize, BackendError> {
    let io = |op: &'static str, path: &Path| {
        let path = path.to_owned();
        move |source| BackendError::Io { op, path, source }
    };
    let files = index.files().map_err(|e| BackendError::Index {
        path: data_dir.join(OBJSTORE_DIR).join(INDEX_FILE),
        detail: e.to_string(),
    })?;
    let wanted: HashMap<&str, &[u8]> = files
        .iter()
        .map(|(p, c)| (p.as_str(), c.as_slice()))
        .collect();
    // Remove what the bucket does not hold.
    for root in METADATA_DIRS {
        let dir = data_dir.join(root);
        remove_unwanted(data_dir, &dir, &wanted)?;
    }
    let mut written = 0;
    for (rel, contents) in &files {
        let path = data_dir.join(rel);
        if rel == PRODUCER_IDS {
            let local = std::fs::read_to_string(&path)
                .ok()
                .and_then(|t| t.trim().parse::<i64>().ok());
            let remote = std::str::from_utf8(contents)
                .ok()
                .and_then(|t| t.trim().parse::<i64>().ok());
            if local.is_some_and(|l| remote.is_none_or(|r| l >= r)) {
                continue;
            }
        }
        if std::fs::read(&path).is_ok_and(|local| local == *contents) {
            continue;
        }
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent).map_err(io("create", parent))?;
        }
        let tmp = path.with_extension("restore-tmp");
        std::fs::write(&tmp, contents).map_err(io("write", &tmp))?;
        std::fs::rename(&tmp, &path).map_err(io("rename", &path))?;
        written += 1;
    }
    Ok(written)
}

/// Removes files under `dir` that `wanted` does not name (and directories left empty).
fn remove_unwanted(
    data_dir: &Path,
    dir: &Path,
    wanted: &HashMap<&str, &[u8]>,
) -> Result<(), BackendError> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Ok(());
    };
    for entry in entries.flatten() {
        let path = entry.path();
        if path.is_dir() {
            remove_unwanted(data_dir, &path, wanted)?;
            let empty = std::fs::read_dir(&path).is_ok_and(|mut d| d.next().is_none());
            if empty {
                let _ = std::fs::remove_dir(&path);
            }
            continue;
        }
        let rel = sluice_storage::relative_path(data_dir, &path);
        if rel.as_deref().is_none_or(|r| !wanted.contains_key(r)) {
            std::fs::remove_file(&path).map_err(|source| BackendError::Io {
                op: "remove",
                path: path.clone(),
                source,
            })?;
        }
    }
    Ok(())
}
