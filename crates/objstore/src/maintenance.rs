//! Keeping the bucket small and the rebuild short: **checkpoints**, **compaction** and the
//! **cleaner** of object-storage mode, run by one background task ([`Maintenance`]).
//!
//! Without them the flusher writes one object per linger forever, a rebuild reads every
//! object's summary, and retention or topic deletion only moves numbers in the index.
//!
//! # Checkpoints
//!
//! `PREFIX/checkpoints/<seq>.sluice` holds the index's whole state as of flush object `seq`
//! (everything applied up to and including it): the known objects, every live run with its
//! location, the kept producer batches, the mirrored metadata files, the log starts and the
//! abandoned set. It is an object in the flush-object format with no runs, only meta records
//! ([`crate::meta`] kinds 10 `ObjectAt`, 8 `RunAt`, 11 `ProducerBatchAt`, 3 `FileWrite`, 6
//! `LogStart`, 1 `Abandoned`), its header's sequence being `seq`, so its CRCs guard it as they
//! guard every object. [`encode_checkpoint`] / [`decode_checkpoint`] are the pure halves.
//!
//! One is written (create-if-absent) once [`MaintenanceSettings::checkpoint_interval_objects`]
//! objects were applied since the newest, and at clean shutdown. The newest
//! [`CHECKPOINTS_KEPT`] are kept, older ones deleted. A rebuild
//! ([`crate::rebuild::catch_up`]) of an index older than the newest checkpoint loads it (one
//! GET) and then catches up the objects after it; a checkpoint that does not parse is passed
//! over, with a warning, for the one before it.
//!
//! # The cleaner
//!
//! Deletes flush objects that nothing needs any more: sequence at most the **older** of the
//! two kept checkpoints (so a rebuild that must fall back from a corrupt newest checkpoint to
//! the previous one still finds every object after it), no live run in the index (all dropped
//! by retention, a topic deletion or a compaction; or abandoned), and no open partition still
//! reading runs from it (see compaction). Then [`Index::forget_objects`] and
//! [`ReadCache::forget`]. Compacted objects go when the index references none of their runs
//! (a compaction whose record never became durable leaves one such). A failed DELETE is tried
//! again next round; at most [`MaintenanceSettings::deletes_per_round`] per round.
//!
//! # Compaction
//!
//! One partition at a time, one group of its runs: consecutive runs in flush objects that the
//! newest checkpoint covers (so they are old, committed and below the high watermark; the tail
//! being written is never touched), at least [`MaintenanceSettings::compact_min_runs`] of
//! them, at most [`MaintenanceSettings::compact_max_bytes`] in all. Their bytes are loaded
//! through the read cache and CRC-checked, concatenated into ONE run (batches and offsets
//! unchanged), and written as `PREFIX/compacted/<n>.sluice` (create-if-absent; object id
//! [`COMPACTED_ID_BASE`] + n). Then a `RunsCompacted` record goes through the flusher; only
//! once its object is committed is the move durable, and the index (at runtime and in any
//! rebuild, in sequence order) replaces the runs by the merged one, if they are still exactly
//! those (retention may have got there first: then nothing moves and the compacted object is
//! garbage for the cleaner).
//!
//! An open partition keeps its runs in memory; [`Host::runs_moved`] tells it (or, while the
//! partition cannot be told, returns a check that stays true as long as that partition may
//! still read the old locations; the sources are not deleted meanwhile).
//!
//! # Bounds
//!
//! Memory: one checkpoint's encoding (about 100 bytes per run, object and producer batch, plus
//! the metadata files) while it is written or loaded; one compaction's sources and result (at
//! most `compact_max_bytes` each). Time: one round every [`MaintenanceSettings::tick`]; each
//! store call is bounded by the bucket client's request timeout.

use std::collections::BTreeSet;
use std::sync::{Arc, Weak};
use std::time::Duration;

use bytes::Bytes;
use futures_util::{StreamExt, TryStreamExt};
use object_store::path::Path;
use object_store::{ObjectStoreExt, PutMode, PutOptions, PutPayload};
use tokio::sync::watch;

use crate::bucket::Bucket;
use crate::cache::ReadCache;
use crate::error::ObjectError;
use crate::flush::Flusher;
use crate::format::{ObjectHeader, TopicId};
use crate::index::{Index, IndexError, IndexSnapshot, ObjectRow, RunLocation};
use crate::meta::MetaChange;
use crate::name::{
    COMPACTED_ID_BASE, ObjectName, checkpoint_name, checkpoints_prefix, compacted_name,
    compacted_prefix, parse_name,
};
use crate::reader::{ObjectReader, verify_run};
use crate::writer::ObjectWriter;

/// Checkpoints kept in the bucket: the newest, and one to fall back to if it is unreadable.
pub const CHECKPOINTS_KEPT: usize = 2;
/// Default of [`MaintenanceSettings::checkpoint_interval_objects`]: at 4 objects a second,
/// one checkpoint every ~4 minutes, and a rebuild reads at most ~1,000 object summaries
/// (about a second) after loading it.
pub const DEFAULT_CHECKPOINT_INTERVAL_OBJECTS: u64 = 1000;
/// Default of [`MaintenanceSettings::tick`]: how often the task looks for work. Short enough
/// that objects do not pile up between rounds, long enough to cost little when idle (a read
/// of the index's runs to look for compaction, plus one LIST of `compacted/` when there are
/// compacted objects).
pub const DEFAULT_TICK: Duration = Duration::from_secs(5);
/// Default of [`MaintenanceSettings::compact_min_runs`].
pub const DEFAULT_COMPACT_MIN_RUNS: usize = 8;
/// Default of [`MaintenanceSettings::compact_max_bytes`].
pub const DEFAULT_COMPACT_MAX_BYTES: u64 = 64 << 20;
/// Default of [`MaintenanceSettings::deletes_per_round`].
pub const DEFAULT_DELETES_PER_ROUND: usize = 1000;
/// How long a clean shutdown waits for the current round and the final checkpoint: longer
/// than one small PUT takes, short enough that a store outage does not hold a shutdown.
pub const SHUTDOWN_BOUND: Duration = Duration::from_secs(10);
/// DELETEs in flight at once.
const DELETES_IN_FLIGHT: usize = 16;

/// The maintenance task's limits. [`Default`] gives the documented defaults.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MaintenanceSettings {
    /// Time between two rounds ([`DEFAULT_TICK`]).
    pub tick: Duration,
    /// A checkpoint is written once this many objects were applied since the newest
    /// ([`DEFAULT_CHECKPOINT_INTERVAL_OBJECTS`]); it bounds what a rebuild reads.
    pub checkpoint_interval_objects: u64,
    /// A partition's runs are compacted once at least this many consecutive ones sit in
    /// flush objects a checkpoint covers ([`DEFAULT_COMPACT_MIN_RUNS`]).
    pub compact_min_runs: usize,
    /// Largest compacted object (its data), and so the memory one compaction holds twice
    /// ([`DEFAULT_COMPACT_MAX_BYTES`]).
    pub compact_max_bytes: u64,
    /// DELETEs per round at most ([`DEFAULT_DELETES_PER_ROUND`]); the rest waits.
    pub deletes_per_round: usize,
}

impl Default for MaintenanceSettings {
    fn default() -> Self {
        MaintenanceSettings {
            tick: DEFAULT_TICK,
            checkpoint_interval_objects: DEFAULT_CHECKPOINT_INTERVAL_OBJECTS,
            compact_min_runs: DEFAULT_COMPACT_MIN_RUNS,
            compact_max_bytes: DEFAULT_COMPACT_MAX_BYTES,
            deletes_per_round: DEFAULT_DELETES_PER_ROUND,
        }
    }
}

/// Says whether an open partition may still read runs from their old locations after a
/// compaction moved them (`true`: keep the source objects).
pub type StaleCheck = Box<dyn Fn() -> bool + Send + Sync>;

/// What the maintenance task works on: the backend's parts.
pub trait Host: Send + Sync + 'static {
    fn bucket(&self) -> &Bucket;
    fn index(&self) -> &Index;
    fn cache(&self) -> &ReadCache;
    fn flusher(&self) -> &Flusher;
    /// Now, in ms since 1970.
    fn now_ms(&self) -> i64;
    /// A compaction moved `topic_id`/`partition`'s runs inside `merged`'s range to `merged`
    /// (the move is durable and in the index). Returns `None` when no open reader can still
    /// use the old locations, else a check that says whether one still may.
    fn runs_moved(
        &self,
        topic_id: TopicId,
        partition: i32,
        merged: &RunLocation,
    ) -> Option<StaleCheck>;
    /// Whether compacting this partition's runs now is worthwhile: `false` when a reader
    /// that cannot be told of the move is open, so the sources would have to stay (the
    /// bucket would hold the data twice). Checked before each compaction.
    fn may_compact(&self, topic_id: TopicId, partition: i32) -> bool {
        let _ = (topic_id, partition);
        true
    }
}

/// Why a maintenance step failed; it is tried again next round. One line each.
#[derive(Debug, thiserror::Error)]
pub enum MaintenanceError {
    #[error("{op} {key}: {source}")]
    Store {
        op: &'static str,
        key: String,
        #[source]
        source: object_store::Error,
    },
    #[error("checkpoint {key} is unreadable: {source}")]
    Corrupt {
        key: String,
        #[source]
        source: ObjectError,
    },
    #[error(transparent)]
    Index(#[from] IndexError),
    #[error("building an object: {0}")]
    Build(#[source] ObjectError),
    #[error("reading run {base}..={last} of object {key}: {detail}")]
    Source {
        key: String,
        base: i64,
        last: i64,
        detail: String,
    },
    #[error("recording a compaction: {0}")]
    Flush(String),
}

// ---------------------------------------------------------------------------------------
// Checkpoints: the pure halves.

/// Encodes `snapshot` (which must have a last sequence) as a checkpoint object.
pub fn encode_checkpoint(
    snapshot: &IndexSnapshot,
    epoch: u64,
    created_ms: i64,
) -> Result<Bytes, ObjectError> {
    let sequence = snapshot.last_sequence.unwrap_or(0);
    let mut w = ObjectWriter::new();
    let mut push = |change: MetaChange| w.push_meta(change.kind(), &change.encode());
    for o in &snapshot.objects {
        push(MetaChange::ObjectAt {
            sequence: o.sequence,
            size: o.size,
            created_ms: o.created_ms,
            abandoned: o.abandoned,
        })?;
    }
    if !snapshot.abandoned.is_empty() {
        push(MetaChange::Abandoned(snapshot.abandoned.clone()))?;
    }
    for (topic_id, partition, loc) in &snapshot.runs {
        push(MetaChange::RunAt {
            run: loc.entry(*topic_id, *partition),
            object_id: loc.object_seq,
        })?;
    }
    for (batch, object_seq) in &snapshot.producers {
        push(MetaChange::ProducerBatchAt {
            batch: *batch,
            object_seq: *object_seq,
        })?;
    }
    for (path, contents) in &snapshot.files {
        push(MetaChange::FileWrite {
            path: path.clone(),
            contents: contents.clone(),
        })?;
    }
    for &(topic_id, partition, offset) in &snapshot.log_starts {
        push(MetaChange::LogStart {
            topic_id,
            partition,
            offset,
        })?;
    }
    w.finish(ObjectHeader {
        writer_epoch: epoch,
        sequence,
        created_ms,
    })
}

/// Decodes a checkpoint object (every CRC checked). A record kind that has no place in a
/// checkpoint is refused; a kind this version does not know is skipped.
pub fn decode_checkpoint(bytes: &[u8]) -> Result<IndexSnapshot, ObjectError> {
    let reader = ObjectReader::new(bytes)?;
    if !reader.index().is_empty() {
        return Err(ObjectError::Meta(crate::meta::MetaError::Length {
            kind: 0,
            len: reader.index().len(),
            expected: "no runs in a checkpoint",
        }));
    }
    let mut snap = IndexSnapshot {
        last_sequence: Some(reader.header().sequence),
        ..IndexSnapshot::default()
    };
    for record in reader.meta().iter() {
        let Some(change) = MetaChange::decode(record.kind, record.payload)? else {
            continue;
        };
        match change {
            MetaChange::ObjectAt {
                sequence,
                size,
                created_ms,
                abandoned,
            } => snap.objects.push(ObjectRow {
                sequence,
                size,
                created_ms,
                abandoned,
            }),
            MetaChange::Abandoned(seqs) => snap.abandoned.extend(seqs),
            MetaChange::RunAt { run, object_id } => snap.runs.push((
                run.topic_id,
                run.partition,
                RunLocation::of(object_id, &run),
            )),
            MetaChange::ProducerBatchAt { batch, object_seq } => {
                snap.producers.push((batch, object_seq))
            }
            MetaChange::FileWrite { path, contents } => snap.files.push((path, contents)),
            MetaChange::LogStart {
                topic_id,
                partition,
                offset,
            } => snap.log_starts.push((topic_id, partition, offset)),
            other => {
                return Err(ObjectError::Meta(crate::meta::MetaError::Length {
                    kind: other.kind(),
                    len: 0,
                    expected: "no record of this kind in a checkpoint",
                }));
            }
        }
    }
    Ok(snap)
}

// ---------------------------------------------------------------------------------------
// Checkpoints: the bucket.

/// Every object under `dir`.
async fn list_under(
    bucket: &Bucket,
    dir: Path,
) -> Result<Vec<object_store::ObjectMeta>, MaintenanceError> {
    bucket
        .store()
        .list(Some(&dir))
        .try_collect()
        .await
        .map_err(|source| MaintenanceError::Store {
            op: "list",
            key: dir.to_string(),
            source,
        })
}

/// The sequences of the checkpoints in the bucket, ascending. Keys under `checkpoints/` that
/// are not checkpoint names are skipped with a warning.
pub async fn list_checkpoints(bucket: &Bucket) -> Result<Vec<u64>, MaintenanceError> {
    let prefix = bucket.url().prefix().to_owned();
    let metas = list_under(bucket, Path::from(checkpoints_prefix(&prefix))).await?;
    let mut out = Vec::with_capacity(metas.len());
    for m in metas {
        match parse_name(&prefix, m.location.as_ref()) {
            Ok(ObjectName::Checkpoint(seq)) => out.push(seq),
            _ => {
                tracing::warn!(key = %m.location, "not a checkpoint name; left alone");
            }
        }
    }
    out.sort_unstable();
    Ok(out)
}

/// Reads and decodes checkpoint `seq`; also returns its size.
pub async fn read_checkpoint(
    bucket: &Bucket,
    seq: u64,
) -> Result<(IndexSnapshot, u64), MaintenanceError> {
    let key = bucket.key(&checkpoint_name("", seq));
    let store_err = |source| MaintenanceError::Store {
        op: "read",
        key: key.to_string(),
        source,
    };
    let bytes = bucket
        .store()
        .get(&key)
        .await
        .map_err(store_err)?
        .bytes()
        .await
        .map_err(store_err)?;
    let snap = decode_checkpoint(&bytes).map_err(|source| MaintenanceError::Corrupt {
        key: key.to_string(),
        source,
    })?;
    if snap.last_sequence != Some(seq) {
        return Err(MaintenanceError::Corrupt {
            key: key.to_string(),
            source: ObjectError::HeaderFooterMismatch {
                field: "sequence (against the name)",
                header: snap.last_sequence.unwrap_or(0),
                footer: seq,
            },
        });
    }
    Ok((snap, bytes.len() as u64))
}

/// Writes a checkpoint of `index` as it is now (create-if-absent; one that exists already
/// for the same sequence is kept). Returns its sequence and size, or `None` for an empty
/// index. When it returns `Ok`, the checkpoint is in the bucket.
pub async fn write_checkpoint(
    bucket: &Bucket,
    index: &Index,
    epoch: u64,
    now_ms: i64,
) -> Result<Option<(u64, u64)>, MaintenanceError> {
    let snap = index.snapshot()?;
    let Some(seq) = snap.last_sequence else {
        return Ok(None);
    };
    let bytes = encode_checkpoint(&snap, epoch, now_ms).map_err(MaintenanceError::Build)?;
    drop(snap);
    let size = bytes.len() as u64;
    let key = bucket.key(&checkpoint_name("", seq));
    let opts = PutOptions {
        mode: PutMode::Create,
        ..PutOptions::default()
    };
    match bucket
        .store()
        .put_opts(&key, PutPayload::from_bytes(bytes), opts)
        .await
    {
        Ok(_) | Err(object_store::Error::AlreadyExists { .. }) => Ok(Some((seq, size))),
        Err(source) => Err(MaintenanceError::Store {
            op: "write",
            key: key.to_string(),
            source,
        }),
    }
}

async fn delete(bucket: &Bucket, key: Path) -> Result<(), MaintenanceError> {
    match bucket.store().delete(&key).await {
        Ok(()) | Err(object_store::Error::NotFound { .. }) => Ok(()),
        Err(source) => Err(MaintenanceError::Store {
            op: "delete",
            key: key.to_string(),
            source,
        }),
    }
}

// ---------------------------------------------------------------------------------------
// The worker.

/// What one round did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RoundReport {
    /// The checkpoint written (its sequence), if any.
    pub checkpoint: Option<u64>,
    pub checkpoints_deleted: usize,
    pub objects_deleted: usize,
    pub compacted_deleted: usize,
    /// Runs merged into a compacted object whose move became durable.
    pub runs_compacted: usize,
    /// Errors met (each logged); the step is tried again next round.
    pub errors: usize,
}

/// Counters since start (for metrics and tests).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct MaintenanceStats {
    pub rounds: u64,
    pub checkpoints_written: u64,
    pub objects_deleted: u64,
    pub compactions: u64,
    pub runs_compacted: u64,
    pub errors: u64,
}

/// The state of the maintenance work between rounds; [`Worker::round`] does one round.
pub struct Worker {
    settings: MaintenanceSettings,
    epoch: u64,
    /// Checkpoint sequences in the bucket, ascending (listed at the first round).
    checkpoints: Option<Vec<u64>>,
    /// The next compacted object id to try (found at the first compaction).
    next_compacted: Option<u64>,
    /// Source objects of durable compactions that an open partition may still read.
    blocked: Vec<(Vec<u64>, StaleCheck)>,
    /// Source objects of compactions whose record (in the flush object with this sequence)
    /// no checkpoint covers yet: kept until one does.
    uncovered: Vec<(u64, Vec<u64>)>,
    stats: MaintenanceStats,
}

impl std::fmt::Debug for Worker {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Worker")
            .field("settings", &self.settings)
            .field("checkpoints", &self.checkpoints)
            .field("stats", &self.stats)
            .finish_non_exhaustive()
    }
}

impl Worker {
    /// `epoch` is the writer lease's, written into checkpoint and compacted object headers.
    pub fn new(settings: MaintenanceSettings, epoch: u64) -> Worker {
        Worker {
            settings,
            epoch,
            checkpoints: None,
            next_compacted: None,
            blocked: Vec::new(),
            uncovered: Vec::new(),
            stats: MaintenanceStats::default(),
        }
    }

    pub fn stats(&self) -> MaintenanceStats {
        self.stats
    }

    /// One round: a checkpoint if due, the cleaner, one compaction. Errors are logged and
    /// counted; the round goes on with the next step.
    pub async fn round(&mut self, host: &dyn Host) -> RoundReport {
        let mut report = RoundReport::default();
        self.stats.rounds += 1;
        let note = |e: MaintenanceError, report: &mut RoundReport| {
            tracing::warn!(error = %e, "object-store maintenance (tried again next round)");
            report.errors += 1;
        };
        if let Err(e) = self.checkpoint(host, false, &mut report).await {
            note(e, &mut report);
        }
        if let Err(e) = self.clean(host, &mut report).await {
            note(e, &mut report);
        }
        if let Err(e) = self.compact(host, &mut report).await {
            note(e, &mut report);
        }
        self.stats.errors += report.errors as u64;
        report
    }

    async fn known_checkpoints(
        &mut self,
        host: &dyn Host,
    ) -> Result<&mut Vec<u64>, MaintenanceError> {
        if self.checkpoints.is_none() {
            self.checkpoints = Some(list_checkpoints(host.bucket()).await?);
        }
        Ok(self.checkpoints.get_or_insert_with(Vec::new))
    }

    /// Writes a checkpoint if one is due (or `force` and the index moved past the newest),
    /// then deletes all but the newest [`CHECKPOINTS_KEPT`].
    pub async fn checkpoint(
        &mut self,
        host: &dyn Host,
        force: bool,
        report: &mut RoundReport,
    ) -> Result<(), MaintenanceError> {
        let interval = self.settings.checkpoint_interval_objects.max(1);
        let last = host.index().last_sequence();
        let known = self.known_checkpoints(host).await?;
        let newest = known.last().copied();
        let due = match (last, newest) {
            (None, _) => false,
            (Some(l), None) => force || l >= interval,
            (Some(l), Some(n)) => l > n && (force || l - n >= interval),
        };
        if !due {
            return Ok(());
        }
        let written =
            write_checkpoint(host.bucket(), host.index(), self.epoch, host.now_ms()).await?;
        let Some((seq, size)) = written else {
            return Ok(());
        };
        tracing::info!(sequence = seq, bytes = size, "checkpoint written");
        self.stats.checkpoints_written += 1;
        report.checkpoint = Some(seq);
        let known = self.known_checkpoints(host).await?;
        if known.last().is_none_or(|&n| seq > n) {
            known.push(seq);
        }
        while known.len() > CHECKPOINTS_KEPT {
            let old = known[0];
            delete(host.bucket(), host.bucket().key(&checkpoint_name("", old))).await?;
            known.remove(0);
            report.checkpoints_deleted += 1;
        }
        Ok(())
    }

    /// The objects an open partition may still read, or whose move no checkpoint covers yet
    /// (sources of durable compactions).
    fn blocked_objects(&mut self, newest_checkpoint: Option<u64>) -> BTreeSet<u64> {
        self.blocked.retain(|(_, stale)| stale());
        self.uncovered
            .retain(|(record, _)| newest_checkpoint.is_none_or(|n| *record > n));
        self.blocked
            .iter()
            .flat_map(|(s, _)| s.iter().copied())
            .chain(self.uncovered.iter().flat_map(|(_, s)| s.iter().copied()))
            .collect()
    }

    /// Deletes what nothing needs any more (see the module doc).
    pub async fn clean(
        &mut self,
        host: &dyn Host,
        report: &mut RoundReport,
    ) -> Result<(), MaintenanceError> {
        let known = self.known_checkpoints(host).await?.clone();
        let blocked = self.blocked_objects(known.last().copied());
        let budget = self.settings.deletes_per_round.max(1);
        // Flush objects: only those at or below the older kept checkpoint.
        if known.len() >= CHECKPOINTS_KEPT {
            let covered = known[known.len() - CHECKPOINTS_KEPT];
            let candidates: Vec<u64> = host
                .index()
                .unreferenced_objects(covered.saturating_add(1))?
                .into_iter()
                .filter(|s| !blocked.contains(s))
                .take(budget)
                .collect();
            let (done, first_error) = self.delete_all(host, &candidates).await;
            if !done.is_empty() {
                host.index().forget_objects(&done)?;
                host.cache().forget(&done);
                report.objects_deleted += done.len();
                self.stats.objects_deleted += done.len() as u64;
            }
            if let Some(e) = first_error {
                return Err(e);
            }
        }
        // Compacted objects no live run is in.
        if self.next_compacted.is_some_and(|n| n > COMPACTED_ID_BASE) || self.stats.rounds <= 1 {
            let ids = self.list_compacted(host).await?;
            if let Some(&max) = ids.iter().max() {
                let next = self.next_compacted.get_or_insert(max + 1);
                *next = (*next).max(max + 1);
            }
            let live = host.index().referenced_objects_from(COMPACTED_ID_BASE)?;
            let garbage: Vec<u64> = ids
                .into_iter()
                .filter(|id| !live.contains(id) && !blocked.contains(id))
                .take(budget)
                .collect();
            let (done, first_error) = self.delete_all(host, &garbage).await;
            host.cache().forget(&done);
            report.compacted_deleted += done.len();
            if let Some(e) = first_error {
                return Err(e);
            }
        }
        Ok(())
    }

    async fn delete_all(
        &self,
        host: &dyn Host,
        ids: &[u64],
    ) -> (Vec<u64>, Option<MaintenanceError>) {
        let bucket = host.bucket();
        let results: Vec<(u64, Result<(), MaintenanceError>)> =
            futures_util::stream::iter(ids.iter().copied())
                .map(|id| async move {
                    let key = bucket.key(&crate::name::data_object_name("", id));
                    (id, delete(bucket, key).await)
                })
                .buffer_unordered(DELETES_IN_FLIGHT)
                .collect()
                .await;
        let mut done = Vec::new();
        let mut first_error = None;
        for (id, r) in results {
            match r {
                Ok(()) => done.push(id),
                Err(e) => {
                    first_error.get_or_insert(e);
                }
            }
        }
        done.sort_unstable();
        (done, first_error)
    }

    async fn list_compacted(&self, host: &dyn Host) -> Result<Vec<u64>, MaintenanceError> {
        let bucket = host.bucket();
        let prefix = bucket.url().prefix().to_owned();
        let metas = list_under(bucket, Path::from(compacted_prefix(&prefix))).await?;
        Ok(metas
            .iter()
            .filter_map(|m| match parse_name(&prefix, m.location.as_ref()) {
                Ok(ObjectName::Compacted(id)) => Some(id),
                _ => None,
            })
            .collect())
    }

    /// The first group of runs worth compacting, over all partitions.
    fn pick(&self, host: &dyn Host, covered: u64) -> Result<Option<Group>, MaintenanceError> {
        let index = host.index();
        for part in index.partitions()? {
            if !host.may_compact(part.topic_id, part.partition) {
                continue;
            }
            let runs = index.runs(part.topic_id, part.partition)?;
            let mut group: Vec<RunLocation> = Vec::new();
            let mut bytes = 0u64;
            for run in runs {
                let eligible = run.object_seq < COMPACTED_ID_BASE
                    && run.object_seq <= covered
                    && run.last_offset >= part.log_start
                    && bytes + run.data_len <= self.settings.compact_max_bytes;
                if eligible {
                    bytes += run.data_len;
                    group.push(run);
                    continue;
                }
                if group.len() >= self.settings.compact_min_runs.max(2) {
                    break;
                }
                group.clear();
                bytes = 0;
                if run.object_seq < COMPACTED_ID_BASE
                    && run.object_seq <= covered
                    && run.last_offset >= part.log_start
                    && run.data_len <= self.settings.compact_max_bytes
                {
                    bytes = run.data_len;
                    group.push(run);
                }
            }
            if group.len() >= self.settings.compact_min_runs.max(2) {
                return Ok(Some(Group {
                    topic_id: part.topic_id,
                    partition: part.partition,
                    runs: group,
                }));
            }
        }
        Ok(None)
    }

    /// Compacts one group of runs of one partition, if any is worth it.
    pub async fn compact(
        &mut self,
        host: &dyn Host,
        report: &mut RoundReport,
    ) -> Result<(), MaintenanceError> {
        let Some(&covered) = self.known_checkpoints(host).await?.last() else {
            return Ok(());
        };
        let Some(group) = self.pick(host, covered)? else {
            return Ok(());
        };
        if self.next_compacted.is_none() {
            let ids = self.list_compacted(host).await?;
            let live = host.index().referenced_objects_from(COMPACTED_ID_BASE)?;
            let max = ids.iter().chain(live.iter()).max().copied();
            self.next_compacted = Some(max.map_or(COMPACTED_ID_BASE, |m| m + 1));
        }
        let id = self.next_compacted.unwrap_or(COMPACTED_ID_BASE);
        let (topic_id, partition) = (group.topic_id, group.partition);

        // Sources, CRC-checked, into one run.
        let mut w = ObjectWriter::new();
        w.begin_run(topic_id, partition)
            .map_err(MaintenanceError::Build)?;
        for run in &group.runs {
            let key = crate::name::data_object_name("", run.object_seq);
            let source_err = |detail: String| MaintenanceError::Source {
                key: key.clone(),
                base: run.base_offset,
                last: run.last_offset,
                detail,
            };
            let range = run.data_offset..run.data_offset + run.data_len;
            let bytes = host
                .cache()
                .load(run.object_seq, range)
                .await
                .map_err(|e| source_err(e.to_string()))?;
            let checked = verify_run(&bytes, &run.entry(topic_id, partition)).map_err(|e| {
                host.cache().forget(&[run.object_seq]);
                source_err(e.to_string())
            })?;
            w.push_batches(checked).map_err(MaintenanceError::Build)?;
        }
        let merged = w
            .end_run()
            .map_err(MaintenanceError::Build)?
            .ok_or(MaintenanceError::Build(ObjectError::NoOpenRun))?;
        let bytes = w
            .finish(ObjectHeader {
                writer_epoch: self.epoch,
                sequence: id,
                created_ms: host.now_ms(),
            })
            .map_err(MaintenanceError::Build)?;
        let object_size = bytes.len() as u64;
        let key = host.bucket().key(&compacted_name("", id));
        let opts = PutOptions {
            mode: PutMode::Create,
            ..PutOptions::default()
        };
        let put = host
            .bucket()
            .store()
            .put_opts(&key, PutPayload::from_bytes(bytes), opts)
            .await;
        // The number is used either way (a leftover may hold it).
        self.next_compacted = Some(id + 1);
        if let Err(source) = put {
            return Err(MaintenanceError::Store {
                op: "write",
                key: key.to_string(),
                source,
            });
        }

        // The move: durable once the flush object holding its record is committed.
        let ticket = host
            .flusher()
            .add_meta(vec![MetaChange::RunsCompacted {
                run: merged,
                object_id: id,
                object_size,
            }])
            .map_err(|e| MaintenanceError::Flush(e.to_string()))?;
        let record_seq = ticket
            .wait()
            .await
            .map_err(|e| MaintenanceError::Flush(e.to_string()))?;
        let moved = RunLocation::of(id, &merged);
        let applied = host
            .index()
            .runs(topic_id, partition)?
            .iter()
            .any(|r| r.object_seq == id);
        if !applied {
            // Retention or a deletion got there first: the compacted object is garbage.
            tracing::info!(
                topic = %topic_id, partition, object = %key,
                "compacted runs changed meanwhile; the compacted object will be deleted"
            );
            return Ok(());
        }
        self.stats.compactions += 1;
        self.stats.runs_compacted += group.runs.len() as u64;
        report.runs_compacted += group.runs.len();
        let sources: Vec<u64> = group.runs.iter().map(|r| r.object_seq).collect();
        if let Some(stale) = host.runs_moved(topic_id, partition, &moved) {
            self.blocked.push((sources.clone(), stale));
        }
        self.uncovered.push((record_seq, sources));
        tracing::debug!(
            topic = %topic_id, partition, runs = group.runs.len(), bytes = merged.data_len,
            object = %key, "runs compacted"
        );
        Ok(())
    }
}

/// Runs of one partition chosen for one compaction.
struct Group {
    topic_id: TopicId,
    partition: i32,
    runs: Vec<RunLocation>,
}

// ---------------------------------------------------------------------------------------
// The task.

/// The background task: one [`Worker::round`] every [`MaintenanceSettings::tick`].
pub struct Maintenance {
    stop: watch::Sender<bool>,
    task: tokio::sync::Mutex<Option<tokio::task::JoinHandle<()>>>,
    /// The worker's counters after its last round (for `/metrics`).
    stats: Arc<std::sync::Mutex<MaintenanceStats>>,
}

impl std::fmt::Debug for Maintenance {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Maintenance")
    }
}

impl Maintenance {
    /// Starts the task (inside a tokio runtime). It holds `host` weakly: once the host is
    /// dropped, the task ends.
    pub fn start(host: Weak<dyn Host>, epoch: u64, settings: MaintenanceSettings) -> Maintenance {
        let (stop, mut stopped) = watch::channel(false);
        let stats = Arc::new(std::sync::Mutex::new(MaintenanceStats::default()));
        let published = Arc::clone(&stats);
        let task = tokio::spawn(async move {
            let mut worker = Worker::new(settings, epoch);
            loop {
                tokio::select! {
                    _ = tokio::time::sleep(settings.tick) => {}
                    _ = stopped.wait_for(|s| *s) => break,
                }
                let Some(host) = host.upgrade() else {
                    return;
                };
                worker.round(host.as_ref()).await;
                *published.lock().expect("stats lock") = worker.stats();
            }
            // Clean shutdown: a final checkpoint, so the next start reads little.
            if let Some(host) = host.upgrade() {
                let mut report = RoundReport::default();
                if let Err(e) = worker.checkpoint(host.as_ref(), true, &mut report).await {
                    tracing::warn!(error = %e, "writing the final checkpoint");
                }
            }
        });
        Maintenance {
            stop,
            task: tokio::sync::Mutex::new(Some(task)),
            stats,
        }
    }

    /// The counters as of the last finished round.
    pub fn stats(&self) -> MaintenanceStats {
        *self.stats.lock().expect("stats lock")
    }

    /// Stops the task after its current round and waits for its final checkpoint, at most
    /// [`SHUTDOWN_BOUND`]; past it the task is stopped where it is (a compaction cut short
    /// leaves at most a compacted object nothing references, which the cleaner removes).
    pub async fn shutdown(&self) {
        let _ = self.stop.send(true);
        if let Some(mut task) = self.task.lock().await.take()
            && tokio::time::timeout(SHUTDOWN_BOUND, &mut task)
                .await
                .is_err()
        {
            tracing::warn!(
                bound = ?SHUTDOWN_BOUND,
                "object-store maintenance did not stop in time; stopped where it was (no final checkpoint)"
            );
            task.abort();
        }
    }
}

impl Drop for Maintenance {
    fn drop(&mut self) {
        let _ = self.stop.send(true);
    }
}

/// A host built from parts, for tests and tools that run the pieces without a broker: a
/// flusher whose committed objects go into the index (and the cache's memory), under a lease
/// that never lapses. No partition is open, so a compaction's sources are never held back.
pub struct Parts {
    bucket: Bucket,
    index: Arc<Index>,
    cache: ReadCache,
    flusher: Flusher,
    clock: Arc<dyn crate::lease::LeaseClock>,
    _lease: watch::Sender<crate::lease::LeaseStatus>,
}

impl std::fmt::Debug for Parts {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Parts")
            .field("bucket", &self.bucket.url().to_string())
            .finish_non_exhaustive()
    }
}

struct PartsSink(Weak<Parts>);

impl crate::flush::FlushSink for PartsSink {
    fn committed(&self, object: &crate::flush::CommittedObject) {
        let Some(parts) = self.0.upgrade() else {
            return;
        };
        let summary = crate::index::ObjectSummary {
            sequence: object.sequence,
            size: object.bytes.len() as u64,
            created_ms: object.created_ms,
            runs: object.runs.clone(),
            meta: object.meta.clone(),
        };
        if let Err(e) = parts.index.apply(&summary) {
            tracing::error!(error = %e, "applying a committed object");
        }
        parts
            .cache
            .insert_object(object.sequence, object.bytes.clone());
    }
    fn abandoned(&self, object: &crate::flush::AbandonedObject) {
        if let Some(parts) = self.0.upgrade()
            && let Err(e) = parts.index.mark_abandoned(&[object.sequence])
        {
            tracing::error!(error = %e, "recording an abandoned object");
        }
    }
}

impl Parts {
    /// Starts a flusher at the sequence after `index`'s last, epoch `epoch`.
    pub fn start(
        bucket: Bucket,
        index: Arc<Index>,
        cache: ReadCache,
        epoch: u64,
        flush: crate::flush::FlushSettings,
    ) -> Arc<Parts> {
        let (lease, status) = watch::channel(crate::lease::LeaseStatus::Held {
            epoch: crate::lease::Epoch(epoch),
            valid_until_ms: i64::MAX,
            renew_error: None,
        });
        let clock: Arc<dyn crate::lease::LeaseClock> = Arc::new(crate::lease::SystemClock);
        let next = index.last_sequence().map_or(1, |s| s + 1);
        Arc::new_cyclic(|weak| {
            let flusher = Flusher::start(
                bucket.clone(),
                crate::lease::Epoch(epoch),
                next,
                status,
                Arc::clone(&clock),
                flush,
                Arc::new(PartsSink(weak.clone())),
            );
            Parts {
                bucket,
                index,
                cache,
                flusher,
                clock,
                _lease: lease,
            }
        })
    }

    pub fn index_arc(&self) -> &Arc<Index> {
        &self.index
    }
}

impl Host for Parts {
    fn bucket(&self) -> &Bucket {
        &self.bucket
    }
    fn index(&self) -> &Index {
        &self.index
    }
    fn cache(&self) -> &ReadCache {
        &self.cache
    }
    fn flusher(&self) -> &Flusher {
        &self.flusher
    }
    fn now_ms(&self) -> i64 {
        self.clock.now_ms()
    }
    fn runs_moved(&self, _: TopicId, _: i32, _: &RunLocation) -> Option<StaleCheck> {
        None
    }
}

impl Host for crate::backend::Core {
    fn bucket(&self) -> &Bucket {
        crate::backend::Core::bucket(self)
    }
    fn index(&self) -> &Index {
        crate::backend::Core::index(self)
    }
    fn cache(&self) -> &ReadCache {
        crate::backend::Core::cache(self)
    }
    fn flusher(&self) -> &Flusher {
        crate::backend::Core::flusher(self)
    }
    fn now_ms(&self) -> i64 {
        crate::backend::Core::now_ms(self)
    }
    /// An open partition switches its in-memory runs to the merged one; if it cannot (its
    /// runs changed meanwhile), the sources stay while it lives.
    fn runs_moved(
        &self,
        topic_id: TopicId,
        partition: i32,
        merged: &RunLocation,
    ) -> Option<StaleCheck> {
        let open = self.live_partition(topic_id, partition)?;
        if open.replace_runs(merged) {
            return None;
        }
        let weak = Arc::downgrade(&open);
        drop(open);
        Some(Box::new(move || weak.strong_count() > 0))
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use object_store::memory::InMemory;
    use sluice_batch::{BatchBuilder, RecordRef};

    use super::*;
    use crate::bucket::StorageUrl;
    use crate::cache::CacheSettings;
    use crate::flush::FlushSettings;
    use crate::format::RunEntry;
    use crate::format::patch_base_offsets;
    use crate::name::{object_name, objects_prefix};
    use crate::rebuild::{RebuildError, catch_up};

    const URL: &str = "s3://bucket/tenant/sluice";
    const T1: TopicId = TopicId([1; 16]);
    const T2: TopicId = TopicId([2; 16]);

    fn memory_bucket() -> Bucket {
        Bucket::from_store(
            StorageUrl::parse(URL).unwrap(),
            Arc::new(InMemory::new()),
            "memory",
        )
    }

    fn cache(bucket: &Bucket, dir: &std::path::Path) -> ReadCache {
        ReadCache::open(
            bucket.clone(),
            CacheSettings {
                memory_bytes: 1 << 20,
                disk_bytes: 0,
                dir: dir.join("cache"),
                gets_in_flight: 4,
            },
        )
        .unwrap()
    }

    fn parts(bucket: &Bucket, dir: &std::path::Path, name: &str) -> Arc<Parts> {
        let index = Arc::new(Index::open(&dir.join(name), URL).unwrap());
        Parts::start(
            bucket.clone(),
            index,
            cache(bucket, dir),
            1,
            FlushSettings {
                linger: Duration::from_millis(1),
                ..FlushSettings::default()
            },
        )
    }

    /// One batch of 3 records with timestamps from `ts`.
    fn batch(ts: i64) -> Vec<u8> {
        let mut out = Vec::new();
        let mut b = BatchBuilder::new(&mut out);
        for r in 0..3 {
            b.push(&RecordRef {
                key: None,
                value: Some(b"maintenance"),
                headers: &[],
                timestamp_ms: ts + r,
            });
        }
        b.finish();
        out
    }

    /// Writes one object holding one batch of `topic`/`partition` at `*next`; returns its
    /// sequence.
    async fn produce(p: &Parts, topic: TopicId, partition: i32, next: &mut i64) -> u64 {
        let mut run = batch(1_000 + *next);
        *next = patch_base_offsets(&mut run, *next).unwrap();
        let ticket = p.flusher.add_run(topic, partition, &run, &[]).unwrap();
        p.flusher.flush_now();
        ticket.wait().await.unwrap()
    }

    async fn meta(p: &Parts, change: MetaChange) -> u64 {
        let ticket = p.flusher.add_meta(vec![change]).unwrap();
        p.flusher.flush_now();
        ticket.wait().await.unwrap()
    }

    async fn flush_objects(bucket: &Bucket) -> Vec<u64> {
        let prefix = bucket.url().prefix().to_owned();
        let metas: Vec<object_store::ObjectMeta> = bucket
            .store()
            .list(Some(&Path::from(objects_prefix(&prefix))))
            .try_collect()
            .await
            .unwrap();
        let mut out: Vec<u64> = metas
            .iter()
            .filter_map(|m| match parse_name(&prefix, m.location.as_ref()) {
                Ok(ObjectName::Flush(s)) => Some(s),
                _ => None,
            })
            .collect();
        out.sort_unstable();
        out
    }

    /// A partition's bytes as a reader would get them: its runs in offset order, loaded and
    /// CRC-checked.
    async fn partition_bytes(index: &Index, cache: &ReadCache, t: TopicId, p: i32) -> Vec<u8> {
        let mut out = Vec::new();
        for run in index.runs(t, p).unwrap() {
            let bytes = cache
                .load(
                    run.object_seq,
                    run.data_offset..run.data_offset + run.data_len,
                )
                .await
                .unwrap();
            out.extend_from_slice(verify_run(&bytes, &run.entry(t, p)).unwrap());
        }
        out
    }

    /// A history with two topics, producer batches, files, a log start, a topic deletion.
    async fn history(p: &Parts, objects: usize, next: &mut [i64; 2]) {
        for i in 0..objects {
            let partition = (i % 2) as i32;
            produce(p, T1, partition, &mut next[partition as usize]).await;
            if i % 7 == 3 {
                meta(
                    p,
                    MetaChange::FileAppend {
                        path: "groups/log".into(),
                        bytes: vec![i as u8],
                    },
                )
                .await;
            }
        }
    }

    #[test]
    fn checkpoint_encoding_round_trips() {
        let dir = tempfile::tempdir().unwrap();
        let index = Index::open(&dir.path().join("a.sqlite"), URL).unwrap();
        let run = |t: TopicId, p: i32, base: i64| RunEntry {
            topic_id: t,
            partition: p,
            batch_count: 1,
            base_offset: base,
            last_offset: base + 9,
            max_timestamp: 5_000 + base,
            record_count: 10,
            data_offset: 40,
            data_len: 300,
            data_crc: 0xabcd_0000 + base as u32,
        };
        let batch = crate::meta::ProducerBatch {
            topic_id: T1,
            partition: 0,
            producer_id: 7,
            epoch: 2,
            first_seq: 0,
            last_seq: 9,
            base_offset: 0,
            last_offset: 9,
        };
        index.mark_abandoned(&[4]).unwrap();
        for (seq, runs, meta) in [
            (
                1u64,
                vec![run(T1, 0, 0), run(T2, 1, 0)],
                vec![
                    MetaChange::ProducerBatch(batch),
                    MetaChange::FileWrite {
                        path: "topics/a/topic.json".into(),
                        contents: b"{}".to_vec(),
                    },
                ],
            ),
            (
                2,
                vec![run(T1, 0, 10)],
                vec![MetaChange::LogStart {
                    topic_id: T2,
                    partition: 1,
                    offset: 3,
                }],
            ),
            (4, vec![run(T1, 0, 20)], vec![]),
            (5, vec![], vec![MetaChange::Abandoned(vec![4])]),
        ] {
            index
                .apply(&crate::index::ObjectSummary {
                    sequence: seq,
                    size: 1000 + seq,
                    created_ms: 1_700_000_000_000 + seq as i64,
                    runs,
                    meta,
                })
                .unwrap();
        }
        let snap = index.snapshot().unwrap();
        assert_eq!(snap.last_sequence, Some(5));
        assert_eq!(snap.runs.len(), 3);
        assert_eq!(snap.abandoned, vec![4]);
        let bytes = encode_checkpoint(&snap, 3, 1_700_000_000_999).unwrap();
        let back = decode_checkpoint(&bytes).unwrap();
        assert_eq!(back, snap);

        // Loaded into another index, it answers the same.
        let other = Index::open(&dir.path().join("b.sqlite"), URL).unwrap();
        other.load_snapshot(&back).unwrap();
        assert_eq!(other.snapshot().unwrap(), snap);
        assert_eq!(other.last_sequence(), Some(5));
        assert_eq!(other.producer_batches(T1, 0).unwrap(), vec![batch]);
        assert_eq!(other.partitions().unwrap(), index.partitions().unwrap());

        // Any flipped byte is refused, never a panic.
        for at in [10, bytes.len() / 2, bytes.len() - 5] {
            let mut bad = bytes.to_vec();
            bad[at] ^= 0x40;
            assert!(decode_checkpoint(&bad).is_err(), "flip at {at}");
        }
        // A flush object (with runs) is not a checkpoint.
        let mut w = ObjectWriter::new();
        w.append_run(T1, 0, &batch_at(0)).unwrap();
        let flush = w
            .finish(ObjectHeader {
                writer_epoch: 1,
                sequence: 9,
                created_ms: 0,
            })
            .unwrap();
        assert!(decode_checkpoint(&flush).is_err());
    }

    fn batch_at(offset: i64) -> Vec<u8> {
        let mut b = batch(0);
        patch_base_offsets(&mut b, offset).unwrap();
        b
    }

    #[tokio::test]
    async fn rebuild_from_a_checkpoint_and_later_objects_equals_the_full_history() {
        let dir = tempfile::tempdir().unwrap();
        let bucket = memory_bucket();
        let p = parts(&bucket, dir.path(), "live.sqlite");
        let mut next = [0i64; 2];
        history(&p, 20, &mut next).await;
        let (seq, _) = write_checkpoint(&bucket, &p.index, 1, 0)
            .await
            .unwrap()
            .unwrap();
        assert_eq!(Some(seq), p.index.last_sequence());
        history(&p, 9, &mut next).await;
        meta(
            &p,
            MetaChange::LogStart {
                topic_id: T1,
                partition: 0,
                offset: 6,
            },
        )
        .await;
        let last = p.index.last_sequence().unwrap();

        let rebuilt = Index::open(&dir.path().join("rebuilt.sqlite"), URL).unwrap();
        let report = catch_up(&bucket, &rebuilt).await.unwrap();
        assert_eq!(report.checkpoint, Some(seq), "{report:?}");
        assert_eq!(report.objects_applied, last - seq, "{report:?}");
        assert_eq!(rebuilt.snapshot().unwrap(), p.index.snapshot().unwrap());

        // An index that is behind the checkpoint loads it too; one past it does not.
        let again = catch_up(&bucket, &rebuilt).await.unwrap();
        assert_eq!((again.checkpoint, again.objects_applied), (None, 0));
    }

    #[tokio::test]
    async fn a_corrupt_newest_checkpoint_falls_back_to_the_previous_one() {
        let dir = tempfile::tempdir().unwrap();
        let bucket = memory_bucket();
        let p = parts(&bucket, dir.path(), "live.sqlite");
        let mut next = [0i64; 2];
        history(&p, 6, &mut next).await;
        let (first, _) = write_checkpoint(&bucket, &p.index, 1, 0)
            .await
            .unwrap()
            .unwrap();
        history(&p, 6, &mut next).await;
        let (second, _) = write_checkpoint(&bucket, &p.index, 1, 0)
            .await
            .unwrap()
            .unwrap();
        history(&p, 3, &mut next).await;
        assert_eq!(
            list_checkpoints(&bucket).await.unwrap(),
            vec![first, second]
        );

        let corrupt = |seq: u64| {
            let bucket = bucket.clone();
            async move {
                let key = bucket.key(&checkpoint_name("", seq));
                let mut bytes = bucket
                    .store()
                    .get(&key)
                    .await
                    .unwrap()
                    .bytes()
                    .await
                    .unwrap()
                    .to_vec();
                let at = bytes.len() / 2;
                bytes[at] ^= 1;
                bucket.store().put(&key, bytes.into()).await.unwrap();
            }
        };
        corrupt(second).await;
        let rebuilt = Index::open(&dir.path().join("r1.sqlite"), URL).unwrap();
        let report = catch_up(&bucket, &rebuilt).await.unwrap();
        assert_eq!(report.checkpoint, Some(first), "{report:?}");
        assert_eq!(rebuilt.snapshot().unwrap(), p.index.snapshot().unwrap());

        // With every checkpoint unreadable, the rebuild stops instead of guessing.
        corrupt(first).await;
        let rebuilt = Index::open(&dir.path().join("r2.sqlite"), URL).unwrap();
        let err = catch_up(&bucket, &rebuilt).await.unwrap_err();
        assert!(matches!(err, RebuildError::Checkpoint(_)), "{err:?}");
        let line = err.to_string();
        assert!(
            line.contains("checkpoints/") && !line.contains('\n'),
            "{line}"
        );
        assert_eq!(rebuilt.last_sequence(), None);
    }

    #[tokio::test]
    async fn the_cleaner_deletes_exactly_the_covered_unreferenced_objects() {
        let dir = tempfile::tempdir().unwrap();
        let bucket = memory_bucket();
        let p = parts(&bucket, dir.path(), "live.sqlite");
        let mut worker = Worker::new(
            MaintenanceSettings {
                compact_min_runs: usize::MAX,
                ..MaintenanceSettings::default()
            },
            1,
        );
        let mut next = [0i64; 2];
        // Objects 1..=6 on T1/0, 7..=8 on T2/0.
        let mut t1 = Vec::new();
        for _ in 0..6 {
            t1.push(produce(&p, T1, 0, &mut next[0]).await);
        }
        let mut t2_next = 0;
        let t2: Vec<u64> = vec![
            produce(&p, T2, 0, &mut t2_next).await,
            produce(&p, T2, 0, &mut t2_next).await,
        ];
        // Retention drops the runs of the first three objects; T2 is deleted; an object
        // never written is recorded abandoned.
        let log_start = meta(
            &p,
            MetaChange::LogStart {
                topic_id: T1,
                partition: 0,
                offset: 9,
            },
        )
        .await;
        let deleted = meta(&p, MetaChange::TopicDeleted { topic_id: T2 }).await;
        let mut report = RoundReport::default();
        // One checkpoint: nothing may go yet (a fallback would need every object).
        worker.checkpoint(&*p, true, &mut report).await.unwrap();
        let first = report.checkpoint.unwrap();
        worker.clean(&*p, &mut report).await.unwrap();
        assert_eq!(report.objects_deleted, 0);
        let all = flush_objects(&bucket).await;
        assert_eq!(all.len(), 10);

        // Objects after the older checkpoint stay even when nothing references them.
        let late_t1 = produce(&p, T1, 0, &mut next[0]).await;
        let late_meta = meta(&p, MetaChange::TopicDeleted { topic_id: T2 }).await;
        worker.checkpoint(&*p, true, &mut report).await.unwrap();
        let second = report.checkpoint.unwrap();
        assert!(second > first);
        worker.clean(&*p, &mut report).await.unwrap();
        let mut expect_gone: Vec<u64> = t1[..3].to_vec();
        expect_gone.extend(&t2);
        expect_gone.extend([log_start, deleted]);
        expect_gone.sort_unstable();
        assert_eq!(report.objects_deleted, expect_gone.len());
        let left = flush_objects(&bucket).await;
        let expect_left: Vec<u64> = all
            .iter()
            .copied()
            .filter(|s| !expect_gone.contains(s))
            .chain([late_t1, late_meta])
            .collect();
        assert_eq!(left, expect_left);
        assert!(p.index.unreferenced_objects(first + 1).unwrap().is_empty());
        assert!(
            p.index
                .unreferenced_objects(u64::MAX)
                .unwrap()
                .contains(&late_meta)
        );

        // A third checkpoint: only two are kept, and the cleaner now covers up to `second`.
        produce(&p, T1, 0, &mut next[0]).await;
        worker.checkpoint(&*p, true, &mut report).await.unwrap();
        assert_eq!(report.checkpoints_deleted, 1);
        assert_eq!(list_checkpoints(&bucket).await.unwrap().len(), 2);
        let before = report.objects_deleted;
        worker.clean(&*p, &mut report).await.unwrap();
        assert_eq!(
            report.objects_deleted - before,
            1,
            "the late meta-only object"
        );
        assert!(!flush_objects(&bucket).await.contains(&late_meta));

        // What is left still rebuilds to the same state.
        let rebuilt = Index::open(&dir.path().join("rebuilt.sqlite"), URL).unwrap();
        catch_up(&bucket, &rebuilt).await.unwrap();
        assert_eq!(
            partition_bytes(&rebuilt, &p.cache, T1, 0).await,
            partition_bytes(&p.index, &p.cache, T1, 0).await
        );
        assert_eq!(rebuilt.runs(T1, 0).unwrap(), p.index.runs(T1, 0).unwrap());
    }

    #[tokio::test]
    async fn compaction_replaces_runs_and_a_rebuild_sees_the_compacted_location() {
        let dir = tempfile::tempdir().unwrap();
        let bucket = memory_bucket();
        let p = parts(&bucket, dir.path(), "live.sqlite");
        let mut worker = Worker::new(
            MaintenanceSettings {
                compact_min_runs: 4,
                ..MaintenanceSettings::default()
            },
            1,
        );
        let mut next = [0i64; 2];
        history(&p, 24, &mut next).await;
        let before0 = partition_bytes(&p.index, &p.cache, T1, 0).await;
        let before1 = partition_bytes(&p.index, &p.cache, T1, 1).await;
        let mut report = RoundReport::default();
        // Nothing is compacted before a checkpoint covers the runs.
        worker.compact(&*p, &mut report).await.unwrap();
        assert_eq!(report.runs_compacted, 0);
        worker.checkpoint(&*p, true, &mut report).await.unwrap();
        // The tail written after the checkpoint is never touched.
        history(&p, 4, &mut next).await;
        worker.compact(&*p, &mut report).await.unwrap();
        assert_eq!(report.runs_compacted, 12);
        worker.compact(&*p, &mut report).await.unwrap();
        assert_eq!(report.runs_compacted, 24);
        for part in [0, 1] {
            let runs = p.index.runs(T1, part).unwrap();
            assert_eq!(runs.len(), 3, "{runs:?}");
            assert!(runs[0].object_seq >= COMPACTED_ID_BASE);
            assert!(runs[1].object_seq < COMPACTED_ID_BASE);
        }
        let after0 = partition_bytes(&p.index, &p.cache, T1, 0).await;
        assert_eq!(&after0[..before0.len()], &before0[..]);

        // Two checkpoints later the sources are gone; a rebuild from the bucket alone reads
        // the same bytes.
        worker.checkpoint(&*p, true, &mut report).await.unwrap();
        worker.clean(&*p, &mut report).await.unwrap();
        // The 24 sources and the 3 metadata-only objects the older checkpoint covers.
        assert_eq!(report.objects_deleted, 27, "{report:?}");
        for seq in 1..=24 {
            let key = bucket.key(&object_name("", seq));
            let gone = bucket.store().head(&key).await.is_err();
            let referenced = p
                .index
                .snapshot()
                .unwrap()
                .runs
                .iter()
                .any(|r| r.2.object_seq == seq);
            assert!(gone || referenced, "object {seq}");
        }
        let rebuilt = Index::open(&dir.path().join("rebuilt.sqlite"), URL).unwrap();
        catch_up(&bucket, &rebuilt).await.unwrap();
        assert_eq!(
            rebuilt.snapshot().unwrap().runs,
            p.index.snapshot().unwrap().runs
        );
        let fresh = cache(&bucket, &dir.path().join("fresh"));
        assert_eq!(
            partition_bytes(&rebuilt, &fresh, T1, 0).await,
            partition_bytes(&p.index, &p.cache, T1, 0).await
        );
        assert_eq!(
            &partition_bytes(&rebuilt, &fresh, T1, 1).await[..before1.len()],
            &before1[..]
        );

        // A compacted object whose runs were dropped is garbage: retention past it, a
        // checkpoint, and the cleaner deletes it.
        meta(
            &p,
            MetaChange::LogStart {
                topic_id: T1,
                partition: 1,
                offset: next[1],
            },
        )
        .await;
        worker.clean(&*p, &mut report).await.unwrap();
        assert!(report.compacted_deleted >= 1, "{report:?}");
    }

    #[tokio::test]
    async fn failed_puts_and_deletes_are_retried_next_round_and_lose_nothing() {
        use sluice_testkit::faulty::{ErrorKind, FaultyStore, Op};
        let dir = tempfile::tempdir().unwrap();
        let faulty = Arc::new(FaultyStore::new(Arc::new(InMemory::new())));
        let bucket = Bucket::from_store(StorageUrl::parse(URL).unwrap(), faulty.clone(), "faulty");
        let p = parts(&bucket, dir.path(), "live.sqlite");
        let mut worker = Worker::new(
            MaintenanceSettings {
                compact_min_runs: 4,
                ..MaintenanceSettings::default()
            },
            1,
        );
        let mut next = [0i64; 2];
        history(&p, 10, &mut next).await;
        let before = partition_bytes(&p.index, &p.cache, T1, 0).await;
        let mut report = RoundReport::default();
        worker.checkpoint(&*p, true, &mut report).await.unwrap();

        // The compacted object's PUT fails: nothing moves; the next try succeeds.
        let runs_before = p.index.runs(T1, 0).unwrap();
        faulty.fail_next(Op::Put, 1, ErrorKind::Generic);
        let err = worker.compact(&*p, &mut report).await.unwrap_err();
        assert!(err.to_string().contains("compacted/"), "{err}");
        assert_eq!(p.index.runs(T1, 0).unwrap(), runs_before);
        worker.compact(&*p, &mut report).await.unwrap();
        assert_eq!(report.runs_compacted, 5);
        assert_eq!(p.index.runs(T1, 0).unwrap().len(), 1);

        // A failed checkpoint PUT is an error, and nothing counts as covered by it.
        history(&p, 2, &mut next).await;
        faulty.fail_next(Op::Put, 1, ErrorKind::Generic);
        assert!(worker.checkpoint(&*p, true, &mut report).await.is_err());
        assert_eq!(list_checkpoints(&bucket).await.unwrap().len(), 1);
        worker.clean(&*p, &mut report).await.unwrap();
        assert_eq!(report.objects_deleted, 0);
        worker.checkpoint(&*p, true, &mut report).await.unwrap();

        // One DELETE fails: the others go, that one stays known and goes next round.
        let candidates = p.index.unreferenced_objects(u64::MAX).unwrap().len();
        assert!(candidates >= 5, "{candidates}");
        faulty.fail_next(Op::Delete, 1, ErrorKind::Generic);
        assert!(worker.clean(&*p, &mut report).await.is_err());
        let first = report.objects_deleted;
        assert!(first >= 1, "{report:?}");
        worker.clean(&*p, &mut report).await.unwrap();
        assert_eq!(report.objects_deleted, first + 1, "{report:?}");

        // The reads never changed, and a rebuild from the bucket agrees.
        let now = partition_bytes(&p.index, &p.cache, T1, 0).await;
        assert_eq!(&now[..before.len()], &before[..]);
        let rebuilt = Index::open(&dir.path().join("rebuilt.sqlite"), URL).unwrap();
        catch_up(&bucket, &rebuilt).await.unwrap();
        let fresh = cache(&bucket, &dir.path().join("fresh"));
        assert_eq!(partition_bytes(&rebuilt, &fresh, T1, 0).await, now);
    }
}
