//! Partition storage in cluster mode: [`ClusterStore`] opens partitions
//! ([`sluice_storage::PartitionOpener`]) whose data lives in the bucket and whose index lives
//! in PostgreSQL, shared by every broker.
//!
//! - **Writes**: a partition gives each append *provisional* offsets of this broker's own and
//!   hands it to the flusher (one object for every partition, as in single-broker object
//!   mode), which PUTs the object under this broker's name and then runs the commit step
//!   ([`commit_step`]): one transaction assigns the real offsets and checks idempotent
//!   producers. The append's `durable()` resolves with the real offsets (or the store's
//!   refusal) from the step's receipt.
//! - **Reads**: a partition keeps the index rows it has read (PostgreSQL `batches`) and the
//!   high watermark; the bytes come through the read cache (memory for objects this broker
//!   just wrote, local disk, then ranged GETs) and are served with each batch's base offset
//!   rewritten to the committed one (the batch CRC does not cover it). Every batch's CRC is
//!   checked before it is served.
//! - **High watermarks** move when this broker commits, when PostgreSQL notifies a commit of
//!   another broker ([`crate::index::CommitListener`]), and at every poll of all partitions'
//!   bounds ([`POLL_INTERVAL`], more often while the notifications' connection is down).

mod commit_step;
mod partition;

pub use commit_step::{
    COMMIT_BUCKETS_MS, CommitCounters, CommitReceipt, CommitStep, Committed, ReceiptBatch,
};
pub use partition::ClusterPartition;

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use futures_util::future::BoxFuture;
use sluice_objstore::cache::{CacheSettings, ObjectNames, ReadCache};
use sluice_objstore::flush::{CommittedObject, FlushSettings, FlushTarget, Flusher};
use sluice_objstore::format::TopicId;
use sluice_objstore::lease::{Epoch, LeaseClock, LeaseError, LeaseStatus};
use sluice_objstore::{AbandonedObject, Bucket, FlushSink};
use sluice_storage::{FileChange, MetaJournal, PartitionOpener, PartitionStorage, StorageError};
use tokio::sync::watch;
use tokio::task::JoinHandle;
use uuid::Uuid;

use crate::Db;
use crate::index::{CommitEvent, CommitListener};
use crate::registry::RegistryStatus;
use crate::retention::{self, CleanerSettings, RoundStats};

/// How often every open partition's bounds are read from PostgreSQL while notifications
/// arrive: a safety net for a notification lost in a reconnect race, cheap (one query for all
/// partitions).
pub const POLL_INTERVAL: Duration = Duration::from_secs(5);

/// How often they are read while the notifications' connection is down: long-polling fetches
/// then see other brokers' commits within this, instead of within milliseconds.
pub const POLL_INTERVAL_DISCONNECTED: Duration = Duration::from_millis(500);

/// Everything cluster-mode storage is configured with.
#[derive(Debug, Clone)]
pub struct StoreSettings {
    pub flush: FlushSettings,
    pub cache: CacheSettings,
    /// Retention and cleanup ([`crate::retention`]).
    pub cleaner: CleanerSettings,
}

/// This broker's identity in the cluster, from its registration.
#[derive(Debug, Clone)]
pub struct Writer {
    pub broker_id: i32,
    pub instance: Uuid,
    /// The registration's status: writes stop while it is not live.
    pub status: watch::Receiver<RegistryStatus>,
}

/// Object keys and the ids the read cache knows them by.
#[derive(Debug, Default)]
pub(crate) struct Names {
    ids: HashMap<String, u64>,
    keys: HashMap<u64, String>,
}

impl Names {
    fn id(&mut self, key: &str) -> u64 {
        if let Some(id) = self.ids.get(key) {
            return *id;
        }
        let id = self.keys.len() as u64 + 1;
        self.ids.insert(key.to_string(), id);
        self.keys.insert(id, key.to_string());
        id
    }
}

/// What the partitions of one broker share.
pub(crate) struct Core {
    pub(crate) db: Db,
    pub(crate) flusher: Flusher,
    pub(crate) cache: ReadCache,
    names: Arc<Mutex<Names>>,
    partitions: Mutex<HashMap<(TopicId, i32), Weak<ClusterPartition>>>,
    /// Every partition's (log start, next offset) as read at start, taken by the first open.
    initial_bounds: Mutex<HashMap<(TopicId, i32), (i64, i64)>>,
    pub(crate) url_label: String,
    /// The storage prefix object keys are relative to.
    key_prefix: String,
}

impl Core {
    /// The read cache's id for an object key (relative to the storage prefix).
    pub(crate) fn object_id(&self, key: &str) -> u64 {
        self.names.lock().unwrap_or_else(|p| p.into_inner()).id(key)
    }

    fn partition(&self, topic: TopicId, partition: i32) -> Option<Arc<ClusterPartition>> {
        let map = self.partitions.lock().unwrap_or_else(|p| p.into_inner());
        map.get(&(topic, partition)).and_then(Weak::upgrade)
    }

    fn open_partitions(&self) -> Vec<Arc<ClusterPartition>> {
        let mut map = self.partitions.lock().unwrap_or_else(|p| p.into_inner());
        map.retain(|_, p| p.strong_count() > 0);
        map.values().filter_map(Weak::upgrade).collect()
    }
}

/// Cluster-mode storage of one broker. Dropping it stops its tasks; call
/// [`ClusterStore::shutdown`] first to let the objects being written finish.
pub struct ClusterStore {
    core: Arc<Core>,
    counters: Arc<CommitCounters>,
    cleaner: Arc<CleanerCounters>,
    status: watch::Receiver<RegistryStatus>,
    tasks: Vec<JoinHandle<()>>,
    _listener: Arc<CommitListener>,
}

impl std::fmt::Debug for ClusterStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ClusterStore")
            .field("url", &self.core.url_label)
            .finish_non_exhaustive()
    }
}

/// Moves this broker's partitions' high watermarks after its own commits.
struct OwnCommits(Weak<Core>);

impl Committed for OwnCommits {
    fn committed(&self, object: &CommittedObject, receipt: &CommitReceipt) {
        let Some(core) = self.0.upgrade() else {
            return;
        };
        // The rows this commit added, known without asking PostgreSQL: a reader at the tail
        // of a partition written through this broker needs no index read (and, with the
        // object in the memory cache, no GET).
        let object_id = core.object_id(&commit_step::relative_key(
            object.key.as_ref(),
            &core.key_prefix,
        ));
        for ((topic, partition), batches) in &receipt.partitions {
            let Some(p) = core.partition(*topic, *partition) else {
                continue;
            };
            let mut end = None;
            for b in batches {
                if let crate::commit::BatchOutcome::Appended {
                    base_offset,
                    last_offset,
                    ..
                } = b.outcome
                {
                    p.add_row(partition::Row {
                        base_offset,
                        last_offset,
                        object: object_id,
                        start: b.byte_start,
                        len: b.byte_len,
                        max_timestamp: b.max_timestamp,
                    });
                    end = Some(last_offset + 1);
                }
            }
            if let Some(end) = end {
                p.advance(end, None);
            }
        }
    }
}

/// The flusher's sink: the recent-objects memory cache gets every object this broker wrote.
struct Sink {
    core: Mutex<Weak<Core>>,
    key_prefix: String,
}

impl FlushSink for Sink {
    fn committed(&self, object: &CommittedObject) {
        let core = self
            .core
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .upgrade();
        if let Some(core) = core {
            let key = commit_step::relative_key(object.key.as_ref(), &self.key_prefix);
            core.cache
                .insert_object(core.object_id(&key), object.bytes.clone());
        }
    }
    fn abandoned(&self, _object: &AbandonedObject) {}
}

impl ClusterStore {
    /// Starts the flusher (objects named after this broker), the read cache, the commit
    /// listener and the bounds poller, after reading every partition's bounds. Call inside a
    /// tokio runtime.
    pub async fn start(
        db: Db,
        bucket: Bucket,
        writer: Writer,
        settings: StoreSettings,
    ) -> Result<ClusterStore, String> {
        let initial_bounds = all_bounds(&db)
            .await
            .map_err(|e| format!("reading the partitions' offsets: {e}"))?;
        let key_prefix = bucket.url().prefix().to_string();
        let url_label = bucket.url().to_string();
        let cleaner_bucket = bucket.clone();
        let names: Arc<Mutex<Names>> = Arc::default();
        let named = Arc::clone(&names);
        let namer: ObjectNames = Arc::new(move |id| {
            named
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .keys
                .get(&id)
                .cloned()
        });
        let cache = ReadCache::open_named(bucket.clone(), settings.cache.clone(), Some(namer))
            .map_err(|e| format!("read cache: {e}"))?;
        let sink = Arc::new(Sink {
            core: Mutex::new(Weak::new()),
            key_prefix: key_prefix.clone(),
        });
        let epoch = Epoch(u64::from(writer.broker_id.unsigned_abs()));
        let (lease_tx, lease_rx) = watch::channel(lease_status(&writer.status.borrow(), epoch));
        let clock: Arc<dyn LeaseClock> = Arc::new(now_ms);
        let own = Arc::new(OwnCommitsSlot::default());
        let counters = Arc::new(CommitCounters::default());
        let step = CommitStep {
            counters: Arc::clone(&counters),
            db: db.clone(),
            broker_id: writer.broker_id,
            instance: writer.instance,
            key_prefix: key_prefix.clone(),
            committed: own.clone(),
        };
        let writer_name = format!(
            "b{}-{}",
            writer.broker_id,
            &writer.instance.simple().to_string()[..8]
        );
        let flusher = Flusher::start_with(
            bucket,
            epoch,
            1,
            lease_rx,
            clock,
            settings.flush,
            sink.clone(),
            FlushTarget {
                writer: Some(writer_name),
                committer: Some(Arc::new(step)),
            },
        );
        let core = Arc::new(Core {
            db: db.clone(),
            flusher,
            cache,
            names,
            partitions: Mutex::new(HashMap::new()),
            initial_bounds: Mutex::new(initial_bounds),
            url_label,
            key_prefix: key_prefix.clone(),
        });
        *sink.core.lock().unwrap_or_else(|p| p.into_inner()) = Arc::downgrade(&core);
        own.set(Arc::downgrade(&core));
        let listener = Arc::new(CommitListener::start(&db));
        let mut tasks = Vec::new();
        // The registration's status gates the flusher's PUTs.
        let mut status = writer.status.clone();
        tasks.push(tokio::spawn(async move {
            loop {
                let next = lease_status(&status.borrow_and_update(), epoch);
                let stop = matches!(next, LeaseStatus::Lost(_) | LeaseStatus::Released);
                if lease_tx.send(next).is_err() || stop {
                    return;
                }
                // A live registration's validity ends without a new status: wake then too.
                let wake = tokio::time::sleep(Duration::from_millis(250));
                tokio::select! {
                    changed = status.changed() => if changed.is_err() { return; },
                    _ = wake => {}
                }
            }
        }));
        tasks.push(tokio::spawn(listen(
            Arc::downgrade(&core),
            Arc::clone(&listener),
        )));
        tasks.push(tokio::spawn(poll(
            Arc::downgrade(&core),
            Arc::clone(&listener),
        )));
        let cleaner = Arc::new(CleanerCounters::default());
        tasks.push(tokio::spawn(clean(
            Arc::downgrade(&core),
            cleaner_bucket,
            writer.clone(),
            settings.cleaner,
            Arc::clone(&cleaner),
        )));
        Ok(ClusterStore {
            core,
            counters,
            cleaner,
            status: writer.status.clone(),
            tasks,
            _listener: listener,
        })
    }

    /// Seals and writes what is open, waits for the objects under way (bounded by their
    /// deadline), then stops the flusher.
    pub async fn shutdown(&self) {
        self.core.flusher.shutdown().await;
    }

    /// The flusher's counters.
    pub fn flush_stats(&self) -> sluice_objstore::FlushStats {
        self.core.flusher.stats()
    }

    /// This broker's series for `/metrics`: the flusher's and read cache's (named as in
    /// object mode), the commits', and whether its registration is live.
    pub fn render_metrics(&self) -> String {
        let mut out = String::with_capacity(4096);
        sluice_objstore::metrics::render_flush_and_cache(
            &mut out,
            &self.core.flusher.stats(),
            &self.core.cache.stats(),
        );
        self.counters.render(&mut out);
        self.cleaner.render(&mut out);
        let live = u8::from(self.status.borrow().is_live_at(tokio::time::Instant::now()));
        let name = "sluice_cluster_registration_live";
        use std::fmt::Write;
        let _ = writeln!(
            out,
            "# HELP {name} 1 while this broker's registry lease is live and it may acknowledge writes."
        );
        let _ = writeln!(out, "# TYPE {name} gauge");
        let _ = writeln!(out, "{name} {live}");
        out
    }

    /// Why this broker cannot acknowledge writes now, as `(status, error)` for `/readyz`:
    /// its registry lease lapsed (renewals failing), it was fenced, or it deregistered.
    pub fn not_ready(&self) -> Option<(&'static str, String)> {
        match &*self.status.borrow() {
            RegistryStatus::Live { valid_until } if tokio::time::Instant::now() < *valid_until => {
                None
            }
            RegistryStatus::Live { .. } => Some((
                "registration_lapsed",
                "the registry lease ran out before its renewal was answered".into(),
            )),
            RegistryStatus::Lapsed { error } => Some((
                "registration_lapsed",
                format!(
                    "renewals of the registry lease fail ({error}); produce waits until one succeeds"
                ),
            )),
            RegistryStatus::Fenced { reason } => Some(("registration_fenced", reason.clone())),
            RegistryStatus::Deregistered => {
                Some(("deregistered", "the broker is shutting down".into()))
            }
        }
    }

    /// The read cache's counters.
    pub fn cache_stats(&self) -> sluice_objstore::cache::CacheStats {
        self.core.cache.stats()
    }
}

impl Drop for ClusterStore {
    fn drop(&mut self) {
        for t in &self.tasks {
            t.abort();
        }
    }
}

/// [`OwnCommits`] set once the core exists.
#[derive(Default)]
struct OwnCommitsSlot(Mutex<Option<OwnCommits>>);

impl OwnCommitsSlot {
    fn set(&self, core: Weak<Core>) {
        *self.0.lock().unwrap_or_else(|p| p.into_inner()) = Some(OwnCommits(core));
    }
}

impl Committed for OwnCommitsSlot {
    fn committed(&self, object: &CommittedObject, receipt: &CommitReceipt) {
        if let Some(own) = &*self.0.lock().unwrap_or_else(|p| p.into_inner()) {
            own.committed(object, receipt);
        }
    }
}

/// The registration's status as the flusher's lease gate reads it.
fn lease_status(status: &RegistryStatus, epoch: Epoch) -> LeaseStatus {
    match status {
        RegistryStatus::Live { valid_until } => {
            let left = valid_until.saturating_duration_since(tokio::time::Instant::now());
            LeaseStatus::Held {
                epoch,
                valid_until_ms: now_ms() + left.as_millis() as i64,
                renew_error: None,
            }
        }
        RegistryStatus::Lapsed { error } => LeaseStatus::Held {
            epoch,
            valid_until_ms: 0,
            renew_error: Some(Arc::new(LeaseError::Expired {
                prefix: "the broker registry".into(),
                expired_ago_ms: 0,
                last_error: error.clone(),
            })),
        },
        RegistryStatus::Fenced { reason } => LeaseStatus::Lost(Arc::new(LeaseError::Fenced {
            prefix: "the broker registry".into(),
            now: reason.clone(),
        })),
        RegistryStatus::Deregistered => LeaseStatus::Released,
    }
}

fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0)
}

/// Applies the commit notifications to the open partitions.
async fn listen(core: Weak<Core>, listener: Arc<CommitListener>) {
    let mut events = listener.subscribe();
    while let Some(event) = events.recv().await {
        let Some(core) = core.upgrade() else {
            return;
        };
        match event {
            CommitEvent::Moved {
                topic_id,
                partition,
                next_offset,
            } => {
                if let Some(p) = core.partition(TopicId(topic_id.into_bytes()), partition) {
                    p.advance(next_offset, None);
                }
            }
            CommitEvent::Everything => {
                if let Err(e) = poll_once(&core).await {
                    tracing::warn!(error = %e, "could not read the partitions' bounds");
                }
            }
        }
    }
}

/// The cleaner's counters, for `/metrics`.
#[derive(Debug, Default)]
pub struct CleanerCounters {
    rounds: AtomicU64,
    rounds_failed: AtomicU64,
    partitions_trimmed: AtomicU64,
    rows_deleted: AtomicU64,
    topics_purged: AtomicU64,
    objects_deleted: AtomicU64,
}

impl CleanerCounters {
    fn add(&self, s: &RoundStats) {
        self.rounds.fetch_add(1, Ordering::Relaxed);
        self.partitions_trimmed
            .fetch_add(s.partitions_trimmed, Ordering::Relaxed);
        self.rows_deleted
            .fetch_add(s.rows_deleted, Ordering::Relaxed);
        self.topics_purged
            .fetch_add(s.topics_purged, Ordering::Relaxed);
        self.objects_deleted
            .fetch_add(s.objects_deleted, Ordering::Relaxed);
    }

    fn render(&self, out: &mut String) {
        use std::fmt::Write;
        let series = [
            (
                "sluice_cluster_cleaner_rounds_total",
                "Cleaner rounds this broker ran while holding the cleaner lease.",
                &self.rounds,
            ),
            (
                "sluice_cluster_cleaner_rounds_failed_total",
                "Cleaner rounds that stopped on an error (the next one starts over).",
                &self.rounds_failed,
            ),
            (
                "sluice_cluster_cleaner_partitions_trimmed_total",
                "Times retention moved a partition's log start.",
                &self.partitions_trimmed,
            ),
            (
                "sluice_cluster_cleaner_index_rows_deleted_total",
                "Index rows deleted by retention and topic purges.",
                &self.rows_deleted,
            ),
            (
                "sluice_cluster_cleaner_topics_purged_total",
                "Deleted topics whose index rows are all gone.",
                &self.topics_purged,
            ),
            (
                "sluice_cluster_cleaner_objects_deleted_total",
                "Objects deleted from the bucket once no index row referred to them.",
                &self.objects_deleted,
            ),
        ];
        for (name, help, value) in series {
            let _ = writeln!(out, "# HELP {name} {help}");
            let _ = writeln!(out, "# TYPE {name} counter");
            let _ = writeln!(out, "{name} {}", value.load(Ordering::Relaxed));
        }
    }
}

/// Runs the cleaner ([`retention::run_round`]) every interval while this broker's
/// registration is live; the broker holding the cleaner lease does the work.
async fn clean(
    core: Weak<Core>,
    bucket: Bucket,
    writer: Writer,
    settings: CleanerSettings,
    counters: Arc<CleanerCounters>,
) {
    loop {
        tokio::time::sleep(settings.interval).await;
        let Some(core) = core.upgrade() else {
            return;
        };
        if !writer
            .status
            .borrow()
            .is_live_at(tokio::time::Instant::now())
        {
            continue;
        }
        let partitions: Vec<_> = core
            .open_partitions()
            .iter()
            .filter_map(|p| p.retention())
            .collect();
        let result = retention::run_round(
            &core.db,
            &bucket,
            writer.broker_id,
            writer.instance,
            &partitions,
            &settings,
            now_ms(),
        )
        .await;
        retention::log_round(&result);
        match &result {
            Ok(stats) if stats.held => {
                counters.add(stats);
                if stats.partitions_trimmed > 0 {
                    // This broker's readers see the new log starts now, not at the next poll.
                    let _ = poll_once(&core).await;
                }
            }
            Ok(_) => {}
            Err(_) => {
                counters.rounds_failed.fetch_add(1, Ordering::Relaxed);
            }
        }
    }
}

/// Reads every open partition's bounds now and then.
async fn poll(core: Weak<Core>, listener: Arc<CommitListener>) {
    let mut warned = false;
    loop {
        let interval = if listener.is_connected() {
            POLL_INTERVAL
        } else {
            POLL_INTERVAL_DISCONNECTED
        };
        tokio::time::sleep(interval).await;
        let Some(core) = core.upgrade() else {
            return;
        };
        match poll_once(&core).await {
            Ok(()) => warned = false,
            Err(e) if !warned => {
                tracing::warn!(error = %e, "could not read the partitions' bounds");
                warned = true;
            }
            Err(_) => {}
        }
    }
}

/// Every partition's (log start, next offset), in one query.
async fn all_bounds(db: &Db) -> Result<HashMap<(TopicId, i32), (i64, i64)>, crate::DbError> {
    let client = db.client().await?;
    let rows = client
        .query(
            "SELECT topic_id, partition, log_start, next_offset FROM partitions",
            &[],
        )
        .await?;
    let mut bounds = HashMap::with_capacity(rows.len());
    for r in rows {
        let id: Uuid = r.get(0);
        let partition: i32 = r.get(1);
        bounds.insert(
            (TopicId(id.into_bytes()), partition),
            (r.get::<_, i64>(2), r.get::<_, i64>(3)),
        );
    }
    Ok(bounds)
}

/// Reads every partition's bounds; applied to the open ones.
async fn poll_once(core: &Core) -> Result<(), crate::DbError> {
    let open = core.open_partitions();
    if open.is_empty() {
        return Ok(());
    }
    let bounds = all_bounds(&core.db).await?;
    for p in open {
        if let Some((log_start, next)) = bounds.get(&(p.topic_id(), p.partition())) {
            p.advance(*next, Some(*log_start));
        }
    }
    Ok(())
}

/// Longest an open waits for a new topic's bounds; past it the partition opens unconfirmed
/// (reads wait, and its bounds come with the next notification or poll).
pub const OPEN_BOUNDS_WAIT: Duration = Duration::from_secs(5);

impl ClusterStore {
    /// Reads every partition's bounds of `topic` into the map opens take them from, blocking
    /// this thread for at most [`OPEN_BOUNDS_WAIT`] (opens run on the blocking pool or a
    /// multi-threaded runtime's worker). Does nothing where blocking is not allowed.
    fn load_topic_bounds(&self, topic: TopicId) {
        let Ok(rt) = tokio::runtime::Handle::try_current() else {
            return;
        };
        if rt.runtime_flavor() != tokio::runtime::RuntimeFlavor::MultiThread {
            return;
        }
        let db = self.core.db.clone();
        let uuid = Uuid::from_bytes(topic.0);
        let fetched = tokio::task::block_in_place(|| {
            rt.block_on(tokio::time::timeout(
                OPEN_BOUNDS_WAIT,
                crate::index::topic_bounds(&db, uuid),
            ))
        });
        match fetched {
            Ok(Ok(bounds)) => {
                let mut map = self
                    .core
                    .initial_bounds
                    .lock()
                    .unwrap_or_else(|e| e.into_inner());
                for (partition, b) in bounds {
                    map.insert((topic, partition), (b.log_start, b.next_offset));
                }
            }
            Ok(Err(e)) => {
                tracing::warn!(topic = %uuid, error = %e, "could not read a new topic's offsets; its partitions wait for the next poll")
            }
            Err(_) => {
                tracing::warn!(topic = %uuid, "no answer for a new topic's offsets within {OPEN_BOUNDS_WAIT:?}; its partitions wait for the next poll")
            }
        }
    }
}

impl PartitionOpener for ClusterStore {
    fn label(&self) -> String {
        self.core.url_label.clone()
    }

    fn open_partition(
        &self,
        topic_id: [u8; 16],
        partition: i32,
        config: sluice_log::LogConfig,
    ) -> Result<Arc<dyn PartitionStorage>, StorageError> {
        let topic = TopicId(topic_id);
        if let Some(p) = self.core.partition(topic, partition) {
            let _ = p.set_config(config);
            return Ok(p);
        }
        let taken = |core: &Core| {
            core.initial_bounds
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .remove(&(topic, partition))
        };
        let bounds = taken(&self.core).or_else(|| {
            // A topic created since the start: its partitions' bounds now, in one query for
            // the whole topic, so the partition never answers a stale high watermark.
            self.load_topic_bounds(topic);
            taken(&self.core)
        });
        let p = Arc::new(ClusterPartition::new(
            Arc::clone(&self.core),
            topic,
            partition,
            config,
            bounds,
        ));
        if bounds.is_none()
            && let Ok(rt) = tokio::runtime::Handle::try_current()
        {
            // A partition created since the start: its bounds now, not at the next poll.
            let weak = Arc::downgrade(&p);
            let db = self.core.db.clone();
            let uuid = Uuid::from_bytes(topic_id);
            rt.spawn(async move {
                if let Ok(Some(b)) = crate::index::partition_bounds(&db, uuid, partition).await
                    && let Some(p) = weak.upgrade()
                {
                    p.advance(b.next_offset, Some(b.log_start));
                }
            });
        }
        self.core
            .partitions
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert((topic, partition), Arc::downgrade(&p));
        Ok(p)
    }

    fn journal(&self) -> Arc<dyn MetaJournal> {
        Arc::new(NoFiles)
    }
}

/// Cluster mode keeps no metadata files: topics, producer ids and groups live in PostgreSQL.
/// A change recorded here is a bug in the caller, refused loudly.
#[derive(Debug)]
struct NoFiles;

impl MetaJournal for NoFiles {
    fn record(&self, change: FileChange) -> Result<(), StorageError> {
        let path = match &change {
            FileChange::Write { path, .. }
            | FileChange::Append { path, .. }
            | FileChange::Remove { path } => path.clone(),
        };
        Err(StorageError::Io {
            op: "record a metadata file change",
            path: path.into(),
            source: std::io::Error::other(
                "cluster mode keeps its metadata in PostgreSQL, not in files",
            ),
        })
    }

    fn durable(&self) -> BoxFuture<'static, Result<(), StorageError>> {
        Box::pin(async { Ok(()) })
    }
}
