//! # Group store: durable consumer-group state
//!
//! The durable store of consumer-group state: committed offsets and each group's metadata
//! snapshot (opaque JSON from the group's state machine). The coordinator changes its state in
//! memory, hands the change to [`GroupStore::write`] as [`GroupRecord`]s, and answers the client
//! once the returned [`Pending`] resolves. At startup [`GroupStore::open`] replays the file and
//! hands back everything it held as [`Recovered`].
//!
//! Key types: [`GroupStore`] (the file and its rounds), [`GroupRecord`] (one change),
//! [`Pending`] (one write's durability), [`Recovered`] (the state at open).
//!
//! ## File format
//!
//! One append-only file, `<data_dir>/groups/groups.log`: a sequence of frames, one per
//! [`GroupStore::write`] call, so a write is all-or-nothing across a crash.
//!
//! | bytes | field |
//! |---|---|
//! | 4 | payload length, big-endian `u32`, `1..=`[`WRITE_BYTES_MAX`] |
//! | 4 | CRC-32C of the payload, big-endian `u32` |
//! | 1 | payload format version, [`FORMAT_VERSION`] |
//! | rest | JSON array of records, in write order |
//!
//! A record is `{"type":"offset","group":..,"topic":..,"partition":..,"offset":{..}|null}` (the
//! offset object is [`CommittedOffset`]'s fields) or `{"type":"group","group":..,"snapshot":
//! <json>|null}`. The state is what applying every record in file order gives: an `offset`
//! record sets (object) or deletes (`null`) one committed offset; a `group` record sets the
//! group's snapshot, or with `null` deletes the group: its snapshot and all its offsets.
//! JSON keeps the file readable with `less`; the version byte lets a later format be told apart
//! from damage.
//!
//! ## Durability contract
//!
//! - [`GroupStore::write`] encodes the records into an in-memory pending buffer, in call order
//!   across callers, and returns at once: nothing is on disk yet.
//! - `write` then asks a [`sluice_log::GroupCommitter`] for a *round*, the same group commit
//!   that makes partition appends durable: the store is a [`sluice_log::Syncable`] to it, and
//!   [`GroupStore::open_with_committer`] shares the partition logs' committer (sync threads and
//!   flush policy); [`GroupStore::open`] starts one of its own. A round takes everything
//!   pending, writes it with one `write`, `fdatasync`s, then resolves the round's [`Pending`]s
//!   with `Ok`: the records are *durable*. The committer runs at most one round of the store
//!   at a time, so every write queued while one round's fdatasync runs is covered by the next
//!   round's single fdatasync (group commit): fdatasyncs per second are bounded by the disk,
//!   not the commit rate. The coordinator acknowledges the client only after `Ok`.
//! - A round whose write finds the disk full (ENOSPC, EDQUOT) fails alone: whatever part of its
//!   frames reached the file is cut off again, its writes resolve to [`StoreError::NoSpace`]
//!   (nothing of them is stored; the coordinator answers the client with a retriable error),
//!   and the store takes the next round as usual, so commits succeed again as soon as space is
//!   freed, without a restart. The data directory's `DataDirSpace` hears of both.
//! - With a [`Journal`] (object-storage mode), a round whose frames are written and
//!   fdatasynced also records them in the journal, as one `FileChange::Append` of the round's
//!   frames as written (a compaction records the new file as one `FileChange::Write`), and
//!   blocks its sync thread until the journal's `durable()` resolves. Only then are its
//!   `Pending`s `Ok`. A journal that fails resolves the round's writes to
//!   [`StoreError::NotDurable`] (retriable); the store carries on, since the object store may
//!   come back. (Their frames stay in the local file: a retry stores them again.)
//! - Any other failed write, and any failed fdatasync (ENOSPC included) or post-rename directory
//!   fsync, marks the store *failed*: every queued and every later write resolves to
//!   [`StoreError::Failed`], and nothing is retried. After a failed fdatasync the kernel may have
//!   dropped the dirty pages and cleared the error, so a second fdatasync could "succeed"
//!   without the data ever reaching the disk. Reopening the store (a broker restart) replays
//!   what the disk really holds. (A write that found no room never reached the page cache as a
//!   whole, and is cut off the file before anything else is written: retrying it risks
//!   nothing.)
//! - The pending buffer has a soft limit, [`PENDING_BYTES_SOFT_MAX`]: past it `write` still
//!   accepts (it runs on the request path, and refusing would turn a slow disk into lost
//!   commits) but logs a warning. The hard bound is the caller's: a request that awaits its
//!   `Pending` before it is answered keeps at most one write per request in flight.
//!
//! ## Recovery
//!
//! [`GroupStore::open`] deletes a leftover `groups.log.tmp` (an unfinished compaction: the old
//! file is still complete), then reads the file from the start, frame by frame. At each
//! position:
//!
//! | at the position | meaning | action |
//! |---|---|---|
//! | end of file | clean end | done |
//! | fewer than 8 bytes | torn header | truncate here |
//! | length 0 | zero-filled tail (a torn extension) | truncate here |
//! | length > [`WRITE_BYTES_MAX`] | garbage | truncate here |
//! | length runs past end of file | torn payload | truncate here |
//! | CRC mismatch | torn or garbage | truncate here |
//! | CRC ok, version > [`FORMAT_VERSION`] | written by a newer Sluice | refuse to open, change nothing |
//! | CRC ok, version 0 or payload not a record array | damage | truncate here |
//! | CRC ok, records decode | a write | apply it, go on |
//!
//! Truncating is safe because only the last round can be damaged by a crash, and none of it
//! was acknowledged: a `Pending` resolves only after an fdatasync that covered its frame and
//! every frame before it, and each round's frames lie after all earlier rounds'. A crash in the
//! middle of a round can leave its pages on disk in any order (a hole of zeros before a later
//! valid frame, say), which is why damage *followed by valid frames* is also cut at the first
//! bad frame rather than skipped: those later frames are from the same unacknowledged round.
//! The cut (`set_len`, then fsync) is logged and reported as [`Recovered::truncated_bytes`].
//! Whatever survives is fdatasynced before the store accepts writes, since the coordinator acts
//! on it.
//!
//! ## Compaction
//!
//! The store keeps the live state (group → snapshot, (group, topic, partition) → offset)
//! as of the end of the file. After a round, when the file is larger than
//! max([`COMPACT_MIN_BYTES`], 2 × its size after the last compaction or open), it rewrites it:
//! the live state as one record per frame into `groups.log.tmp`, fdatasync, rename over
//! `groups.log`, fsync the directory. A compaction is part of the round that grew the file, and
//! rounds never overlap, so writes queued during a compaction go into the new file (in the
//! next round), after the live records: none is lost or reordered. A crash before the rename
//! leaves the old file (and a tmp file that the next open deletes); after it, the new one. A failure before the rename
//! leaves the old file in use and is retried once the file has doubled again; a failed
//! directory fsync after the rename fails the store (later writes would go to a file whose
//! name might not survive a crash). Compaction is also checked once at open.
//!
//! ## Files
//!
//! - `mod.rs` (this file): the public types and [`GroupStore`] (open, write, close).
//! - `encoding.rs`: frames and records, encoded and decoded in two steps.
//! - `recovery.rs`: the live state and the replay at open (the recovery table above).
//! - `disk.rs`: the file, touched only by the running round: appends and compaction.
//! - `round.rs`: the store as a [`sluice_log::Syncable`]: what one round does, and failing
//!   the round (full disk) or the store (any other I/O error, a panic).
//! - `tests.rs`: unit tests, including the crash test.
//!
//! ## The disk seam
//!
//! Every write, truncation, file creation, rename, fdatasync/fsync and directory fsync of the
//! store goes through a [`sluice_log::DiskFaults`] ([`StoreOptions::faults`]), the seam the
//! partition logs use: [`DiskFaults::none`] in production (one branch per call, the real I/O
//! unchanged), a fault plan or a simulated disk with power loss in tests
//! (`tests/simulation.rs` of this crate; the broker's simulation passes one plan to its logs and
//! its store). Unlinks (of `groups.log.tmp`) go through it too; the model takes them as
//! durable at once. Reads (the replay at open) do not.

mod disk;
mod encoding;
mod recovery;
mod round;
#[cfg(test)]
mod tests;

use std::collections::BTreeMap;
use std::fs::{self, File, OpenOptions};
use std::io::{self, Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, PoisonError};
use std::task::{Context, Poll};

use sluice_log::{
    CommitConfig, CommitHandle, DataDirSpace, DiskFaults, FlushPolicy, GroupCommitter,
};
use sluice_storage::{Journal, relative_path};
use tokio::sync::oneshot;

use disk::{CompactError, Disk};
use encoding::{StoredRecord, encode_frame};
use recovery::{Replayed, replay};
use round::{Batch, RoundState, Shared, State};

const DIR_NAME: &str = "groups";
const LOG_NAME: &str = "groups.log";
const TMP_NAME: &str = "groups.log.tmp";

/// Frame header: payload length (`u32`) and the payload's CRC-32C (`u32`), both big-endian.
const FRAME_HEADER_BYTES: usize = 8;
/// First payload byte. Bump it on any change an older build would misread.
pub const FORMAT_VERSION: u8 = 1;
/// Largest payload of one frame, i.e. one write's encoded records. A bigger write is refused
/// (its `Pending` resolves to an error, the store stays usable); a bigger length at open is
/// damage. Far above any real OffsetCommit or group snapshot.
pub const WRITE_BYTES_MAX: usize = 64 << 20;
/// Soft limit on encoded bytes waiting for the next round (see the module doc: past it writes
/// are still accepted, with a warning).
pub const PENDING_BYTES_SOFT_MAX: usize = 64 << 20;
/// The file is never compacted below this size: rewriting a small file often costs more
/// fdatasyncs than the space is worth.
pub const COMPACT_MIN_BYTES: u64 = 4 << 20;

/// A committed offset (OffsetCommit's fields).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct CommittedOffset {
    pub offset: i64,
    /// -1 when the client sent none.
    pub leader_epoch: i32,
    pub metadata: Option<String>,
    pub commit_timestamp_ms: i64,
}

/// One change to the stored state.
#[derive(Debug, Clone, PartialEq)]
pub enum GroupRecord {
    /// Set (`Some`) or delete (`None`) one committed offset.
    Offset {
        group: String,
        topic: String,
        partition: i32,
        offset: Option<CommittedOffset>,
    },
    /// Set (`Some`) the group's metadata snapshot (opaque JSON from the group's state
    /// machine), or delete the group (`None`): its snapshot and all its offsets.
    Group {
        group: String,
        snapshot: Option<serde_json::Value>,
    },
}

/// Everything the store held at open.
#[derive(Debug, Default)]
pub struct Recovered {
    pub offsets: BTreeMap<String, BTreeMap<(String, i32), CommittedOffset>>,
    pub groups: BTreeMap<String, serde_json::Value>,
    /// Bytes truncated from a torn or corrupt tail (0 after a clean run).
    pub truncated_bytes: u64,
}

#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("{op} {path}: {source}")]
    Io {
        op: &'static str,
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    /// The disk was full: this write was not stored (nothing of it is in the file). The store
    /// is healthy; the same write succeeds once space is freed.
    #[error("{0}")]
    NoSpace(String),
    /// An earlier write or sync failed: the store refuses further writes (their durability
    /// could not be promised).
    #[error("group store failed earlier: {0}")]
    Failed(String),
    /// The write is in the local file but the journal could not make it durable (the object
    /// store failed): not acknowledged; the same write succeeds once the store is back.
    #[error("the group store change could not be made durable in storage: {0}")]
    NotDurable(String),
    /// Cluster mode: this broker no longer holds the group's lease (another broker took the
    /// group over, or the lease ran out), so nothing was written. The client finds the new
    /// coordinator and retries there.
    #[error(
        "this broker no longer coordinates group {group_id:?} (another broker took it over or \
         its lease ran out); nothing was written"
    )]
    NotCoordinator { group_id: String },
    /// Cluster mode: the shared store (PostgreSQL) did not answer or failed. A write may or
    /// may not have been applied; it was not acknowledged, and a retry writes the same values.
    #[error("the shared group store did not answer: {0}")]
    Unavailable(#[source] Box<dyn std::error::Error + Send + Sync>),
}

impl StoreError {
    fn no_space(op: &str, path: &Path, source: &io::Error) -> StoreError {
        StoreError::NoSpace(format!(
            "no space left on the device for {op} {}: the data directory is full ({source}); \
             nothing was stored; retry once space is freed",
            path.display()
        ))
    }
}

fn io_error<'a>(op: &'static str, path: &'a Path) -> impl FnOnce(io::Error) -> StoreError + 'a {
    move |source| StoreError::Io {
        op,
        path: path.to_path_buf(),
        source,
    }
}

/// Why a round did not store a write.
#[derive(Debug, Clone)]
enum Refusal {
    /// Its round found the disk full ([`StoreError::NoSpace`]).
    NoSpace(String),
    /// The store failed or closed ([`StoreError::Failed`]).
    Failed(String),
    /// The journal failed ([`StoreError::NotDurable`]).
    NotDurable(String),
}

/// What a round sends each waiting write.
type Outcome = Result<(), Refusal>;

/// A write's durability: resolves once the records are covered by an fdatasync.
///
/// `Ok(())`: durable. `Err(StoreError::NoSpace)`: the disk was full; the records are not on
/// disk (try again later). `Err(StoreError::Failed)`: the store failed (or was closed) before
/// the records were durable; they may or may not be on disk, so they were not acknowledged.
/// `Err(StoreError::Io)`: the write was refused before queueing (it could not be encoded).
#[derive(Debug)]
#[must_use = "a write is durable only when its Pending resolves to Ok"]
pub struct Pending {
    state: PendingState,
}

#[derive(Debug)]
enum PendingState {
    /// Decided at `write` time; `None` once returned.
    Done(Option<Result<(), StoreError>>),
    Waiting(oneshot::Receiver<Outcome>),
}

impl Pending {
    fn done(result: Result<(), StoreError>) -> Pending {
        Pending {
            state: PendingState::Done(Some(result)),
        }
    }
}

impl Future for Pending {
    type Output = Result<(), StoreError>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let result = match &mut self.state {
            PendingState::Done(result) => result.take().unwrap_or_else(|| {
                Err(StoreError::Failed(
                    "Pending polled after it resolved".into(),
                ))
            }),
            PendingState::Waiting(rx) => match Pin::new(rx).poll(cx) {
                Poll::Pending => return Poll::Pending,
                Poll::Ready(Ok(Ok(()))) => Ok(()),
                Poll::Ready(Ok(Err(Refusal::NoSpace(message)))) => {
                    Err(StoreError::NoSpace(message))
                }
                Poll::Ready(Ok(Err(Refusal::Failed(message)))) => Err(StoreError::Failed(message)),
                Poll::Ready(Ok(Err(Refusal::NotDurable(message)))) => {
                    Err(StoreError::NotDurable(message))
                }
                // The sender was dropped without an answer: the store went away.
                Poll::Ready(Err(_)) => Err(StoreError::Failed(
                    "the group store stopped before the write was durable".into(),
                )),
            },
        };
        self.state = PendingState::Done(None);
        Poll::Ready(result)
    }
}

fn sync_dir(dir: &Path, faults: &DiskFaults) -> Result<(), StoreError> {
    faults
        .sync_dir(dir, || File::open(dir).and_then(|d| d.sync_all()))
        .map_err(io_error("fsync directory", dir))
}

/// How a store is opened, beyond its directory and its committer.
#[derive(Debug, Clone)]
pub struct StoreOptions {
    /// Where every round and compaction is also recorded (object-storage mode); `None`: the
    /// local file alone.
    pub journal: Journal,
    /// The seam every file operation goes through (see the module doc, "The disk seam");
    /// [`DiskFaults::none`] outside tests.
    pub faults: DiskFaults,
    /// The file is never compacted below this size ([`COMPACT_MIN_BYTES`]; tests lower it to
    /// make compactions frequent).
    pub compact_min_bytes: u64,
}

impl Default for StoreOptions {
    fn default() -> Self {
        StoreOptions {
            journal: None,
            faults: DiskFaults::none(),
            compact_min_bytes: COMPACT_MIN_BYTES,
        }
    }
}

/// Settings of the committer [`GroupStore::open`] starts when the store has none to share:
/// every round fdatasyncs at once, and one sync thread is enough for one file.
const OWN_COMMIT_CONFIG: CommitConfig = CommitConfig {
    policy: FlushPolicy::Always,
    sync_threads: 1,
};

/// The durable store of consumer-group state (see the module doc).
#[derive(Debug)]
pub struct GroupStore {
    shared: Arc<Shared>,
    /// Schedules the store's rounds.
    commit: CommitHandle,
    /// The committer [`GroupStore::open`] started for this store alone (`None` when it shares
    /// one); shut down by `close`, after the last round.
    own_committer: Mutex<Option<GroupCommitter>>,
}

#[cfg(test)]
impl GroupStore {
    /// Test-only: the disk has room for `bytes` per round (`None`: room enough).
    pub(crate) fn set_room_bytes(&self, bytes: Option<usize>) {
        self.shared.lock().hooks.room_bytes = bytes;
    }
}

impl GroupStore {
    /// Opens (creating if needed) `<data_dir>/groups/` and replays it, with a committer of its
    /// own (one sync thread) for its rounds. [`GroupStore::open_with_committer`] shares one.
    ///
    /// When it returns, everything in [`Recovered`] is durable; a damaged tail has been cut
    /// (and fsynced). Fails with [`StoreError::Io`] if the directory or file cannot be used,
    /// or if the file holds a frame of a newer format version (the file is left as it was).
    pub fn open(data_dir: &Path) -> Result<(GroupStore, Recovered), StoreError> {
        Self::open_with_options(data_dir, None, StoreOptions::default())
    }

    /// [`GroupStore::open`], with the store's rounds run by `committer`: the one the partition
    /// logs of the same data directory use, so one set of sync threads and one flush policy
    /// serve all of them. The committer may shut down before the store closes: later rounds
    /// then run in the writing thread. With `journal`, every round and compaction is also
    /// recorded there (see the module doc).
    pub fn open_with_committer(
        data_dir: &Path,
        committer: &GroupCommitter,
        journal: Journal,
    ) -> Result<(GroupStore, Recovered), StoreError> {
        let options = StoreOptions {
            journal,
            ..StoreOptions::default()
        };
        Self::open_with_options(data_dir, Some(committer), options)
    }

    /// [`GroupStore::open`] (`committer` `None`: with a committer of its own) or
    /// [`GroupStore::open_with_committer`], with every option: a journal, a disk fault seam,
    /// the compaction threshold.
    pub fn open_with_options(
        data_dir: &Path,
        committer: Option<&GroupCommitter>,
        options: StoreOptions,
    ) -> Result<(GroupStore, Recovered), StoreError> {
        match committer {
            Some(committer) => Self::open_on(data_dir, committer.handle(), None, options),
            None => {
                let committer = GroupCommitter::start_with_space(
                    OWN_COMMIT_CONFIG,
                    DataDirSpace::for_dir(data_dir),
                );
                Self::open_on(data_dir, committer.handle(), Some(committer), options)
            }
        }
    }

    #[cfg(test)]
    fn open_with(
        data_dir: &Path,
        compact_min_bytes: u64,
    ) -> Result<(GroupStore, Recovered), StoreError> {
        let options = StoreOptions {
            compact_min_bytes,
            ..StoreOptions::default()
        };
        Self::open_with_options(data_dir, None, options)
    }

    fn open_on(
        data_dir: &Path,
        commit: CommitHandle,
        own_committer: Option<GroupCommitter>,
        options: StoreOptions,
    ) -> Result<(GroupStore, Recovered), StoreError> {
        let StoreOptions {
            journal,
            faults,
            compact_min_bytes,
        } = options;
        let dir = data_dir.join(DIR_NAME);
        let path = dir.join(LOG_NAME);
        let tmp_path = dir.join(TMP_NAME);
        fs::create_dir_all(data_dir).map_err(io_error("create", data_dir))?;
        match fs::create_dir(&dir) {
            // The new directory's entry must survive a crash before any file in it matters.
            Ok(()) => sync_dir(data_dir, &faults)?,
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {}
            Err(e) => return Err(io_error("create", &dir)(e)),
        }
        match faults.remove(&tmp_path, || fs::remove_file(&tmp_path)) {
            Ok(()) => tracing::info!(
                path = %tmp_path.display(),
                "deleted an unfinished group store compaction"
            ),
            Err(e) if e.kind() == io::ErrorKind::NotFound => {}
            Err(e) => return Err(io_error("delete", &tmp_path)(e)),
        }

        let open_existing = || OpenOptions::new().read(true).write(true).open(&path);
        let (mut file, created) = match open_existing() {
            Ok(file) => (file, false),
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                let file = faults
                    .create(&path)
                    .and_then(|()| {
                        OpenOptions::new()
                            .read(true)
                            .write(true)
                            .create_new(true)
                            .open(&path)
                    })
                    .map_err(io_error("create", &path))?;
                (file, true)
            }
            Err(e) => return Err(io_error("open", &path)(e)),
        };
        if created {
            sync_dir(&dir, &faults)?;
        }

        let mut contents = Vec::new();
        file.read_to_end(&mut contents)
            .map_err(io_error("read", &path))?;
        let Replayed {
            live,
            valid_bytes,
            damage,
        } = replay(&contents, &path)?;
        let truncated_bytes = (contents.len() - valid_bytes) as u64;
        drop(contents);
        if let Some(damage) = damage {
            tracing::warn!(
                path = %path.display(),
                valid_bytes,
                truncated_bytes,
                damage = damage.describe(),
                "truncating the group store's damaged tail (never acknowledged)"
            );
            file.set_len(valid_bytes as u64)
                .map_err(io_error("truncate", &path))?;
            faults.truncated(&path, valid_bytes as u64);
            faults
                .sync(&path, || file.sync_all())
                .map_err(io_error("fsync", &path))?;
        } else {
            // The last round before a crash may be whole in the page cache but not on disk;
            // the coordinator is about to act on it.
            faults
                .sync(&path, || file.sync_data())
                .map_err(io_error("fdatasync", &path))?;
        }
        file.seek(SeekFrom::End(0))
            .map_err(io_error("seek", &path))?;

        let mut live_frames = Vec::new();
        live.encode(&mut live_frames)
            .map_err(io_error("encode the live state of", &path))?;
        let mut disk = Disk {
            dir,
            path: path.clone(),
            tmp_path,
            file,
            file_bytes: valid_bytes as u64,
            uncut_tail: false,
            space: DataDirSpace::for_dir(data_dir),
            compact_at_bytes: compact_min_bytes.max(2 * live_frames.len() as u64),
            compact_min_bytes,
            live,
            journal: journal.zip(relative_path(data_dir, &path)),
            faults,
        };
        drop(live_frames);
        let mut compactions = 0;
        if disk.wants_compaction() {
            match disk.compact(&mut || {}) {
                Ok(()) => compactions += 1,
                Err(CompactError { fatal: true, error }) => return Err(error),
                Err(CompactError { error, .. }) => tracing::warn!(
                    error = %error,
                    "could not compact the group store at open; using it as it is"
                ),
            }
        }

        let recovered = Recovered {
            offsets: disk.live.offsets.clone(),
            groups: disk.live.groups.clone(),
            truncated_bytes,
        };
        let shared = Arc::new(Shared {
            path,
            state: Mutex::new(State::default()),
            settled: Condvar::new(),
            round: Mutex::new(RoundState {
                disk,
                batch: Batch::default(),
            }),
            queued: Default::default(),
            syncs: AtomicU64::new(0),
            compactions: AtomicU64::new(compactions),
        });
        let store = GroupStore {
            shared,
            commit,
            own_committer: Mutex::new(own_committer),
        };
        Ok((store, recovered))
    }

    /// Queues `records` (in call order across callers) for the next fdatasync.
    ///
    /// Returns at once without I/O; the records are then only in memory. The [`Pending`]
    /// resolves to `Ok` once an fdatasync covered them (and every write queued before them):
    /// only then may the change be acknowledged. The records of one call are one frame: after
    /// a crash either all or none of them are there. An empty `records` is a barrier: it
    /// resolves once every earlier write is durable.
    ///
    /// Resolves to [`StoreError::NoSpace`] if its round found the disk full (the store stays
    /// usable), to [`StoreError::Failed`] if the store has failed or is closed, and to
    /// [`StoreError::Io`] (`InvalidInput`, nothing queued) if the records encode to more than
    /// [`WRITE_BYTES_MAX`].
    pub fn write(&self, records: Vec<GroupRecord>) -> Pending {
        let mut frame = Vec::new();
        if !records.is_empty() {
            let stored: Vec<StoredRecord<'_>> =
                records.iter().map(StoredRecord::borrowed).collect();
            if let Err(e) = encode_frame(&mut frame, &stored) {
                return Pending::done(Err(io_error("encode a write for", &self.shared.path)(e)));
            }
        }
        let (tx, rx) = oneshot::channel();
        {
            let mut st = self.shared.lock();
            if let Some(reason) = &st.failed {
                return Pending::done(Err(StoreError::Failed(reason.clone())));
            }
            if st.closing {
                return Pending::done(Err(StoreError::Failed("group store is closed".into())));
            }
            let before = st.pending.bytes.len();
            st.pending.bytes.extend_from_slice(&frame);
            st.pending.records.extend(records);
            st.pending.waiters.push(tx);
            let after = st.pending.bytes.len();
            if before <= PENDING_BYTES_SOFT_MAX && after > PENDING_BYTES_SOFT_MAX {
                tracing::warn!(
                    path = %self.shared.path.display(),
                    pending_bytes = after,
                    limit = PENDING_BYTES_SOFT_MAX,
                    "group store writes are queueing faster than the disk syncs them"
                );
            }
        }
        self.commit.request_sync(&self.shared);
        Pending {
            state: PendingState::Waiting(rx),
        }
    }

    /// Waits until everything queued is written (a round on the committer), then stops the
    /// store's own committer, if it has one. Later writes fail.
    ///
    /// Blocks the calling thread for up to two rounds and a compaction (plus the flush
    /// interval of a shared committer with `FlushPolicy::IntervalMs`). Writes queued before
    /// the call resolve as they would have (durable, or failed if the disk fails).
    pub fn close(&self) {
        self.stop();
    }

    /// fdatasyncs of the log file so far (compactions not counted): with group commit, usually
    /// far fewer than writes.
    pub fn syncs(&self) -> u64 {
        self.shared.syncs.load(Ordering::Relaxed)
    }

    /// Compactions done since open (including one at open).
    pub fn compactions(&self) -> u64 {
        self.shared.compactions.load(Ordering::Relaxed)
    }

    fn stop(&self) {
        self.shared.lock().closing = true;
        // Held rounds (tests) are released by `closing`; this queues the last one.
        self.commit.request_sync(&self.shared);
        let mut st = self.shared.lock();
        while !Shared::settled(&st) {
            st = self
                .shared
                .settled
                .wait(st)
                .unwrap_or_else(PoisonError::into_inner);
        }
        drop(st);
        // Held while shutting down, so a concurrent `close` also waits for it.
        let mut own = self
            .own_committer
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        if let Some(committer) = own.take() {
            committer.shutdown();
        }
    }
}

impl Drop for GroupStore {
    /// Same as [`GroupStore::close`]: flushes what is queued.
    fn drop(&mut self) {
        self.stop();
    }
}
