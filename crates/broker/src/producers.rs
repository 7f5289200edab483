//! Idempotent producers: producer ids, and per-partition sequence state.
//!
//! A producer gets an id and epoch from InitProducerId and numbers its batches per partition.
//! Each partition remembers, per producer, its epoch and its last [`RECENT_BATCHES`] batches, so
//! it can tell, for an incoming batch:
//!
//! | incoming batch                                   | answer |
//! |--------------------------------------------------|--------|
//! | epoch older than the known one                   | INVALID_PRODUCER_EPOCH (fenced) |
//! | same sequence range as a remembered batch        | duplicate: the original offsets, nothing appended |
//! | first sequence = last sequence + 1 (same epoch)  | append |
//! | newer epoch, sequence 0; or unknown producer, sequence 0 | append (new epoch / new producer) |
//! | unknown producer, sequence ≠ 0                   | UNKNOWN_PRODUCER_ID |
//! | any other sequence                               | OUT_OF_ORDER_SEQUENCE_NUMBER |
//!
//! State survives restarts: a clean shutdown writes a snapshot per partition
//! (`producers.json`, with the log end offset it covers); opening loads it and replays the
//! batches appended after it, or the whole log when there is no usable snapshot; or, with
//! another backend (the object store), replays its producer history (`from_history`).
//!
//! Producer ids: one broker reserves blocks of [`ID_BLOCK`] in its `producer-ids` file; in
//! cluster mode ([`ProducerIds::cluster`]) blocks come from the shared metadata store, which
//! never hands the same block to two brokers, and nothing is written locally.

use std::collections::{HashMap, VecDeque};
use std::fs;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use sluice_log::batch::BatchView;
use sluice_log::{DataDirSpace, PartitionLog, is_no_space};
use sluice_storage::{FileChange, Journal, ProducerBatch};

use crate::cluster::{ClusterError, ClusterMeta};

/// Batches remembered per producer and partition: Kafka clients keep at most 5 requests in
/// flight per connection with idempotence, so a retry is always one of the last 5.
pub const RECENT_BATCHES: usize = 5;
/// Producers remembered per partition; the least recently active is forgotten past this.
pub const PRODUCERS_PER_PARTITION_MAX: usize = 10_000;
/// Producer ids reserved (and persisted) at a time.
pub const ID_BLOCK: i64 = 1000;
/// Longest an InitProducerId waits for a new block of ids from the cluster's metadata store
/// (the store bounds its own statements; this bounds the whole call, so a store that stops
/// answering costs the client a retriable error, not a request stuck until it times out).
pub const CLUSTER_BLOCK_WAIT: Duration = Duration::from_secs(10);
const SNAPSHOT_FILE: &str = "producers.json";

/// Allocates producer ids that are never reused, even across restarts: from blocks reserved
/// in a local file, or (cluster mode) from blocks the shared metadata store hands out.
#[derive(Debug)]
pub struct ProducerIds {
    source: IdSource,
}

#[derive(Debug)]
enum IdSource {
    File(FileIds),
    Cluster(ClusterIds),
}

/// Cluster mode: the block being handed out.
#[derive(Debug)]
struct ClusterIds {
    cluster: Arc<dyn ClusterMeta>,
    /// (next id to hand out, first id past the block). An async lock: it is held while a new
    /// block is fetched, so concurrent requests wait for that one fetch instead of each
    /// taking (and mostly wasting) a block of its own.
    block: tokio::sync::Mutex<(i64, i64)>,
}

/// One broker: blocks reserved in `<data dir>/producer-ids`.
#[derive(Debug)]
struct FileIds {
    path: PathBuf,
    /// (next id to hand out, first id not yet reserved on disk)
    state: Mutex<(i64, i64)>,
    /// The data directory's (shared by path with the committer's): told of a full disk.
    space: DataDirSpace,
    /// Where each reservation is also recorded (`producer-ids`), if anywhere.
    journal: Journal,
}

impl ProducerIds {
    /// One broker: ids from blocks reserved in `<data_dir>/producer-ids`, each reservation
    /// also recorded in `journal` (if any).
    pub fn open(data_dir: &Path, journal: Journal) -> std::io::Result<ProducerIds> {
        let source = IdSource::File(FileIds::open(data_dir, journal)?);
        Ok(ProducerIds { source })
    }

    /// Cluster mode: ids from blocks of the shared metadata store; no file.
    pub fn cluster(cluster: Arc<dyn ClusterMeta>) -> ProducerIds {
        let block = tokio::sync::Mutex::new((0, 0));
        let source = IdSource::Cluster(ClusterIds { cluster, block });
        ProducerIds { source }
    }

    /// Whether ids come from the cluster (use [`ProducerIds::allocate_in_cluster`]).
    pub fn is_cluster(&self) -> bool {
        matches!(self.source, IdSource::Cluster(_))
    }

    /// A new producer id, and whether a new block of ids was reserved for it: then, with a
    /// journal, the id may be handed out only once the journal's `durable()` has succeeded
    /// (else call [`ProducerIds::forget_reservation`]). One broker only: in cluster mode
    /// ids come from [`ProducerIds::allocate_in_cluster`].
    pub fn allocate(&self) -> Result<(i64, bool), ProducerError> {
        match &self.source {
            IdSource::File(ids) => ids.allocate(),
            IdSource::Cluster(_) => Err(ProducerError::IdAllocation(std::io::Error::other(
                "in cluster mode producer ids come from the metadata store",
            ))),
        }
    }

    /// The last reservation was not made durable: the next id reserves a new block.
    pub fn forget_reservation(&self) {
        if let IdSource::File(ids) = &self.source {
            ids.forget_reservation();
        }
    }

    /// Cluster mode: a new producer id from the current block, which is replaced by a new one
    /// from the store once used up. When this returns the id is the caller's alone: the store
    /// recorded the block as taken before it answered. Waits at most [`CLUSTER_BLOCK_WAIT`]
    /// for the store ([`ClusterError::Unavailable`] then; retriable).
    pub async fn allocate_in_cluster(&self) -> Result<i64, ClusterError> {
        let IdSource::Cluster(ids) = &self.source else {
            return Err(ClusterError::Unavailable(
                "not in cluster mode: producer ids come from the local file".into(),
            ));
        };
        let mut block = ids.block.lock().await;
        if block.0 >= block.1 {
            let fetched = tokio::time::timeout(CLUSTER_BLOCK_WAIT, ids.cluster.producer_id_block());
            let (first, count) = fetched.await.map_err(|_| {
                ClusterError::Unavailable(format!(
                    "no block of producer ids within {CLUSTER_BLOCK_WAIT:?}"
                ))
            })??;
            if first < 0 || count <= 0 || first.checked_add(count).is_none() {
                return Err(ClusterError::Unavailable(format!(
                    "the store handed out an unusable block of producer ids ({first}, {count})"
                )));
            }
            *block = (first, first + count);
            tracing::debug!(
                first,
                count,
                "took a block of producer ids from the cluster"
            );
        }
        let id = block.0;
        block.0 += 1;
        Ok(id)
    }
}

impl FileIds {
    fn open(data_dir: &Path, journal: Journal) -> std::io::Result<FileIds> {
        let path = data_dir.join("producer-ids");
        let reserved = match fs::read_to_string(&path) {
            Ok(text) => text.trim().parse::<i64>().map_err(|e| {
                std::io::Error::new(
                    std::io::ErrorKind::InvalidData,
                    format!("{}: {e}", path.display()),
                )
            })?,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => 0,
            Err(e) => return Err(e),
        };
        // Ids below `reserved` may have been handed out before a crash: start after them.
        Ok(FileIds {
            path,
            state: Mutex::new((reserved, reserved)),
            space: DataDirSpace::for_dir(data_dir),
            journal,
        })
    }

    fn allocate(&self) -> Result<(i64, bool), ProducerError> {
        let mut state = self.state.lock().expect("producer ids lock");
        let reserving = state.0 == state.1;
        if reserving {
            let reserved = state.0 + ID_BLOCK;
            let contents = reserved.to_string().into_bytes();
            write_atomically(&self.path, &contents).map_err(|e| {
                if is_no_space(&e) {
                    self.space.no_space("write", &self.path, &e);
                }
                ProducerError::IdAllocation(e)
            })?;
            self.space.wrote();
            let change = FileChange::Write {
                path: "producer-ids".into(),
                contents,
            };
            let recorded = self.journal.as_ref().map_or(Ok(()), |j| j.record(change));
            recorded.map_err(|e| ProducerError::IdAllocation(std::io::Error::other(e)))?;
            state.1 = reserved;
        }
        let id = state.0;
        state.0 += 1;
        Ok((id, reserving))
    }

    fn forget_reservation(&self) {
        let mut state = self.state.lock().expect("producer ids lock");
        state.1 = state.0;
    }
}

/// One remembered batch.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
struct BatchRecord {
    first_seq: i32,
    last_seq: i32,
    base_offset: i64,
}

#[derive(Debug, Clone, Default, serde::Serialize, serde::Deserialize)]
struct ProducerEntry {
    epoch: i16,
    recent: VecDeque<BatchRecord>,
    /// Offset of the newest batch, for forgetting the least recently active producer.
    last_offset: i64,
}

/// Why an idempotent producer's request was refused (`errors::producer_error_code` maps it).
#[derive(Debug, thiserror::Error)]
pub enum ProducerError {
    #[error(
        "producer {producer_id} is unknown here and its batch starts at sequence {first_seq}, not 0"
    )]
    UnknownProducer { producer_id: i64, first_seq: i32 },
    #[error("producer {producer_id} epoch {epoch} is fenced by epoch {current}")]
    Fenced {
        producer_id: i64,
        epoch: i16,
        current: i16,
    },
    #[error("producer {producer_id} new epoch {epoch} must start at sequence 0, not {first_seq}")]
    NewEpochNotAtZero {
        producer_id: i64,
        epoch: i16,
        first_seq: i32,
    },
    #[error("producer {producer_id} epoch {epoch}: expected sequence {expected}, got {first_seq}")]
    OutOfOrder {
        producer_id: i64,
        epoch: i16,
        expected: i32,
        first_seq: i32,
    },
    #[error("a transactional id was given: transactions are not supported by Sluice yet")]
    Transactional,
    #[error("reserving producer ids: {0}")]
    IdAllocation(#[source] std::io::Error),
}

/// What to do with an incoming idempotent batch.
#[derive(Debug)]
pub enum Verdict {
    Append,
    /// Already appended at this base offset: answer with it, append nothing.
    Duplicate {
        base_offset: i64,
    },
    Refuse(ProducerError),
}

/// The producer state of one partition.
#[derive(Debug, Default, serde::Serialize, serde::Deserialize)]
pub struct PartitionProducers {
    producers: HashMap<i64, ProducerEntry>,
}

/// The sequence number after `seq` (sequences wrap from i32::MAX to 0).
pub fn next_seq(seq: i32) -> i32 {
    if seq == i32::MAX { 0 } else { seq + 1 }
}

/// The last sequence of a batch starting at `first` with `count` records.
pub fn last_seq(first: i32, count: i32) -> i32 {
    ((i64::from(first) + i64::from(count) - 1) % (i64::from(i32::MAX) + 1)) as i32
}

impl PartitionProducers {
    pub fn check(&self, producer_id: i64, epoch: i16, first_seq: i32, last_seq: i32) -> Verdict {
        let Some(entry) = self.producers.get(&producer_id) else {
            return if first_seq == 0 {
                Verdict::Append
            } else {
                Verdict::Refuse(ProducerError::UnknownProducer {
                    producer_id,
                    first_seq,
                })
            };
        };
        if epoch < entry.epoch {
            return Verdict::Refuse(ProducerError::Fenced {
                producer_id,
                epoch,
                current: entry.epoch,
            });
        }
        if epoch > entry.epoch {
            return if first_seq == 0 {
                Verdict::Append
            } else {
                Verdict::Refuse(ProducerError::NewEpochNotAtZero {
                    producer_id,
                    epoch,
                    first_seq,
                })
            };
        }
        if let Some(b) = entry
            .recent
            .iter()
            .find(|b| b.first_seq == first_seq && b.last_seq == last_seq)
        {
            return Verdict::Duplicate {
                base_offset: b.base_offset,
            };
        }
        let expected = entry.recent.back().map_or(0, |b| next_seq(b.last_seq));
        if first_seq == expected {
            Verdict::Append
        } else {
            Verdict::Refuse(ProducerError::OutOfOrder {
                producer_id,
                epoch,
                expected,
                first_seq,
            })
        }
    }

    /// Records an appended batch.
    pub fn record(
        &mut self,
        producer_id: i64,
        epoch: i16,
        first_seq: i32,
        last_seq: i32,
        base_offset: i64,
    ) {
        if !self.producers.contains_key(&producer_id)
            && self.producers.len() >= PRODUCERS_PER_PARTITION_MAX
        {
            // Forget the least recently active producer; it would get UNKNOWN_PRODUCER_ID and
            // reset its sequence, as after Kafka's producer id expiry.
            if let Some(oldest) = self
                .producers
                .iter()
                .min_by_key(|(_, e)| e.last_offset)
                .map(|(id, _)| *id)
            {
                self.producers.remove(&oldest);
            }
        }
        let entry = self.producers.entry(producer_id).or_default();
        if epoch != entry.epoch {
            entry.recent.clear();
            entry.epoch = epoch;
        }
        if entry.recent.len() == RECENT_BATCHES {
            entry.recent.pop_front();
        }
        entry.recent.push_back(BatchRecord {
            first_seq,
            last_seq,
            base_offset,
        });
        entry.last_offset = base_offset;
    }

    /// The state that recording `history` (oldest first) gives.
    pub fn from_history(history: Vec<ProducerBatch>) -> PartitionProducers {
        let mut state = PartitionProducers::default();
        for b in history {
            let (id, epoch, first, last) = (b.producer_id, b.epoch, b.first_seq, b.last_seq);
            state.record(id, epoch, first, last, b.base_offset);
        }
        state
    }

    /// Remembers every idempotent batch in `records` (whole batches with assigned offsets).
    fn replay(&mut self, mut records: &[u8]) -> i64 {
        let mut next = -1;
        // Stored batches: a compaction may have removed records (down to none), but it keeps
        // the last offset delta, and with it the batch's last sequence.
        while let Ok(view) = BatchView::parse_stored(records) {
            if view.producer_id() >= 0 {
                let first = view.base_sequence();
                self.record(
                    view.producer_id(),
                    view.producer_epoch(),
                    first,
                    last_seq(first, view.last_offset_delta().saturating_add(1)),
                    view.base_offset(),
                );
            }
            next = view.last_offset() + 1;
            records = &records[view.len()..];
        }
        next
    }

    /// Loads the state of `log`: its snapshot if it is usable, then the batches after it.
    pub fn load(log: &PartitionLog) -> PartitionProducers {
        let path = log.dir().join(SNAPSHOT_FILE);
        let end = log.high_watermark();
        let (mut state, mut offset) = match fs::read(&path)
            .ok()
            .and_then(|b| serde_json::from_slice::<Snapshot>(&b).ok())
        {
            Some(s) if s.offset <= end && s.offset >= log.log_start_offset() => (s.state, s.offset),
            _ => (PartitionProducers::default(), log.log_start_offset()),
        };
        while offset < end {
            match log.read(offset, 1 << 20) {
                Ok(r) if !r.records.is_empty() => {
                    let next = state.replay(&r.records);
                    if next <= offset {
                        break;
                    }
                    offset = next;
                }
                Ok(_) => break,
                Err(e) => {
                    tracing::error!(partition = %log.dir().display(), error = %e, "rebuilding producer state");
                    break;
                }
            }
        }
        state
    }

    /// Writes the snapshot for a log whose end is `offset` (at clean shutdown).
    pub fn save(&self, log: &PartitionLog) -> std::io::Result<()> {
        let snapshot = SnapshotRef {
            offset: log.log_end_offset(),
            state: self,
        };
        let bytes = serde_json::to_vec(&snapshot).expect("producer state serialises");
        write_atomically(&log.dir().join(SNAPSHOT_FILE), &bytes)
    }
}

#[derive(serde::Deserialize)]
struct Snapshot {
    offset: i64,
    state: PartitionProducers,
}

#[derive(serde::Serialize)]
struct SnapshotRef<'a> {
    offset: i64,
    state: &'a PartitionProducers,
}

/// Temporary file, fsync, rename, fsync the directory.
fn write_atomically(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    let tmp = path.with_extension("tmp");
    let mut f = fs::File::create(&tmp)?;
    f.write_all(bytes)?;
    f.sync_all()?;
    fs::rename(&tmp, path)?;
    if let Some(dir) = path.parent() {
        fs::File::open(dir)?.sync_all()?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sequence_decision_table() {
        let mut s = PartitionProducers::default();
        assert!(matches!(s.check(7, 0, 0, 4), Verdict::Append));
        assert!(matches!(
            s.check(7, 0, 3, 4),
            Verdict::Refuse(ProducerError::UnknownProducer { .. })
        ));
        s.record(7, 0, 0, 4, 100);
        assert!(matches!(
            s.check(7, 0, 0, 4),
            Verdict::Duplicate { base_offset: 100 }
        ));
        assert!(matches!(s.check(7, 0, 5, 9), Verdict::Append));
        assert!(matches!(
            s.check(7, 0, 6, 9),
            Verdict::Refuse(ProducerError::OutOfOrder { expected: 5, .. })
        ));
        s.record(7, 1, 0, 0, 105);
        assert!(matches!(
            s.check(7, 0, 5, 9),
            Verdict::Refuse(ProducerError::Fenced { current: 1, .. })
        ));
        assert!(matches!(
            s.check(7, 2, 1, 1),
            Verdict::Refuse(ProducerError::NewEpochNotAtZero { .. })
        ));
        assert!(matches!(s.check(7, 2, 0, 0), Verdict::Append));
        // Only the last RECENT_BATCHES are remembered.
        for i in 1..=6 {
            s.record(7, 1, i, i, 105 + i64::from(i));
        }
        assert!(matches!(s.check(7, 1, 1, 1), Verdict::Refuse(_)));
        assert!(matches!(
            s.check(7, 1, 6, 6),
            Verdict::Duplicate { base_offset: 111 }
        ));
    }

    /// A backend's history rebuilds what `record` would have: the last RECENT_BATCHES batches
    /// per producer are duplicates with their offsets, and a newer epoch fences older ones.
    #[test]
    fn history_rebuilds_duplicate_detection() {
        let batch = |epoch, first_seq: i32, last_seq: i32, base_offset| ProducerBatch {
            producer_id: 7,
            epoch,
            first_seq,
            last_seq,
            base_offset,
            last_offset: base_offset + i64::from(last_seq - first_seq),
        };
        let history: Vec<_> = (0..7)
            .map(|i| batch(0, i * 2, i * 2 + 1, 100 + i64::from(i) * 2))
            .collect();
        let s = PartitionProducers::from_history(history.clone());
        assert!(matches!(
            s.check(7, 0, 12, 13),
            Verdict::Duplicate { base_offset: 112 }
        ));
        assert!(matches!(
            s.check(7, 0, 4, 5),
            Verdict::Duplicate { base_offset: 104 }
        ));
        assert!(matches!(
            s.check(7, 0, 2, 3),
            Verdict::Refuse(ProducerError::OutOfOrder { expected: 14, .. })
        ));
        assert!(matches!(s.check(7, 0, 14, 14), Verdict::Append));
        assert!(matches!(s.check(8, 0, 0, 0), Verdict::Append));
        let mut history = history;
        history.push(batch(1, 0, 0, 120));
        let s = PartitionProducers::from_history(history);
        assert!(matches!(
            s.check(7, 0, 14, 14),
            Verdict::Refuse(ProducerError::Fenced { current: 1, .. })
        ));
        assert!(matches!(
            s.check(7, 1, 0, 0),
            Verdict::Duplicate { base_offset: 120 }
        ));
        assert!(
            PartitionProducers::from_history(Vec::new())
                .producers
                .is_empty()
        );
    }

    #[test]
    fn sequences_wrap() {
        assert_eq!(last_seq(i32::MAX, 1), i32::MAX);
        assert_eq!(last_seq(i32::MAX, 2), 0);
        assert_eq!(next_seq(i32::MAX), 0);
    }

    #[test]
    fn ids_are_never_reused_across_reopen() {
        let dir = tempfile::tempdir().unwrap();
        let ids = ProducerIds::open(dir.path(), None).unwrap();
        let a = ids.allocate().unwrap().0;
        let b = ids.allocate().unwrap().0;
        assert!(b > a);
        drop(ids);
        let ids = ProducerIds::open(dir.path(), None).unwrap();
        assert!(ids.allocate().unwrap().0 > b);
    }

    /// A reservation that finds the disk full marks the data directory full (what /healthz,
    /// /metrics and the log line report), and the next one that succeeds clears it.
    #[cfg(target_os = "linux")]
    #[test]
    fn a_reservation_on_a_full_disk_marks_the_directory_full() {
        let dir = tempfile::tempdir().unwrap();
        let space = DataDirSpace::for_dir(dir.path());
        let ids = ProducerIds::open(dir.path(), None).unwrap();
        // Every write to /dev/full fails with ENOSPC.
        let tmp = dir.path().join("producer-ids.tmp");
        std::os::unix::fs::symlink("/dev/full", &tmp).unwrap();
        let err = ids.allocate().unwrap_err();
        assert!(
            matches!(&err, ProducerError::IdAllocation(e) if is_no_space(e)),
            "{err}"
        );
        assert!(space.is_full());
        assert_eq!(space.no_space_errors(), 1);
        assert!(space.status().reason.unwrap().contains("producer-ids"));

        fs::remove_file(&tmp).unwrap();
        assert_eq!(ids.allocate().unwrap(), (0, true));
        assert!(!space.is_full());
    }
}
