//! The store as a [`Syncable`]: what one group-commit round of the store does, and the state
//! it shares with `GroupStore`.
//!
//! The store has no thread of its own: a [`sluice_log::GroupCommitter`] (the broker's, shared
//! with the partition logs, or one the store started for itself) schedules its rounds, as it
//! does a partition's. `GroupStore::write` queues a write's frame in the pending batch and
//! requests a round; a round takes everything pending, writes it with one `write` and one
//! `fdatasync` (`disk.rs`), resolves the round's `Pending`s, applies the records to the live
//! state, and compacts the file when it has grown. A full disk fails that round alone; any
//! other I/O error fails the store. The committer runs at most one round of the store at a
//! time, so rounds (and compactions) happen one after the other, in queue order.

#[cfg(test)]
use std::io;
use std::panic::AssertUnwindSafe;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Condvar, Mutex, MutexGuard, PoisonError};

use sluice_log::{CommitStats, SyncQueued, Syncable};
use tokio::sync::oneshot;

use super::disk::{CompactError, Disk, RoundError};
#[cfg(test)]
use super::io_error;
use super::{GroupRecord, Outcome, PENDING_BYTES_SOFT_MAX, Refusal, StoreError};

/// Writes waiting for a round (or taken by one).
#[derive(Default)]
pub(super) struct Batch {
    /// Their frames, back to back.
    pub(super) bytes: Vec<u8>,
    /// Their records, applied to the live state once durable.
    pub(super) records: Vec<GroupRecord>,
    /// One per write.
    pub(super) waiters: Vec<oneshot::Sender<Outcome>>,
}

/// Counts only: the bytes and records may be many megabytes.
impl std::fmt::Debug for Batch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Batch")
            .field("bytes", &self.bytes.len())
            .field("records", &self.records.len())
            .field("writes", &self.waiters.len())
            .finish()
    }
}

impl Batch {
    pub(super) fn is_empty(&self) -> bool {
        self.waiters.is_empty()
    }

    fn clear(&mut self) {
        self.bytes.clear();
        self.records.clear();
        self.waiters.clear();
        if self.bytes.capacity() > PENDING_BYTES_SOFT_MAX {
            // Do not hold on to a burst's worth of memory.
            self.bytes = Vec::new();
        }
    }

    fn resolve(&mut self, outcome: &Outcome) {
        for waiter in self.waiters.drain(..) {
            // A dropped Pending is not an error: its caller stopped waiting.
            let _ = waiter.send(outcome.clone());
        }
    }
}

/// What writers and rounds share, under one short-held lock.
#[derive(Debug, Default)]
pub(super) struct State {
    pub(super) pending: Batch,
    /// Set by `close`/drop: later writes are refused; what is pending is still written.
    pub(super) closing: bool,
    /// Set once the store failed: why.
    pub(super) failed: Option<String>,
    /// A round has taken a batch and not finished with it.
    pub(super) in_round: bool,
    #[cfg(test)]
    pub(super) hooks: super::tests::Hooks,
}

/// What only the running round touches: the file and the batch it is writing. (A lock all the
/// same, uncontended: the committer never runs two rounds of one target at once.)
#[derive(Debug)]
pub(super) struct RoundState {
    pub(super) disk: Disk,
    /// Swapped with the pending batch each round, so steady state allocates nothing.
    pub(super) batch: Batch,
}

#[derive(Debug)]
pub(super) struct Shared {
    pub(super) path: PathBuf,
    pub(super) state: Mutex<State>,
    /// Notified at the end of every round (`close` waits on it).
    pub(super) settled: Condvar,
    pub(super) round: Mutex<RoundState>,
    pub(super) queued: SyncQueued,
    pub(super) syncs: AtomicU64,
    pub(super) compactions: AtomicU64,
}

impl Shared {
    /// Critical sections only move buffers and set flags, so a panic elsewhere cannot leave
    /// the state half-updated: a poisoned lock is still usable.
    pub(super) fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Whether the store has nothing left to write: nothing pending, no round in progress.
    pub(super) fn settled(st: &State) -> bool {
        st.pending.is_empty() && !st.in_round
    }

    /// One round: take everything pending, write it with one fdatasync, resolve it, compact.
    fn round(&self, stats: &CommitStats) {
        let mut guard = self.round.lock().unwrap_or_else(PoisonError::into_inner);
        let RoundState { disk, batch } = &mut *guard;
        #[cfg(test)]
        let inject_failure;
        #[cfg(test)]
        let room;
        {
            let mut st = self.lock();
            if st.failed.is_some() || st.pending.is_empty() || held(&st) {
                return;
            }
            std::mem::swap(&mut st.pending, batch);
            st.in_round = true;
            #[cfg(test)]
            {
                inject_failure = std::mem::take(&mut st.hooks.fail_next_round);
                room = st.hooks.room_bytes;
            }
        }
        #[cfg(test)]
        if std::mem::take(&mut self.lock().hooks.panic_next_round) {
            panic!("injected panic in a group store round");
        }
        #[cfg(test)]
        let result = if inject_failure {
            Err(RoundError {
                fatal: true,
                error: io_error("write", &disk.path)(io::Error::other("injected")),
            })
        } else {
            disk.append(&batch.bytes, &self.syncs, stats, room)
        };
        #[cfg(not(test))]
        let result = disk.append(&batch.bytes, &self.syncs, stats, None);
        match result {
            Ok(()) => {}
            Err(RoundError { fatal: true, error }) => {
                self.fail(batch, &error);
                return;
            }
            Err(RoundError { error, .. }) => {
                // The disk is full: this round's writes fail, the store carries on.
                tracing::debug!(error = %error, writes = batch.waiters.len(), "group store round refused: no space");
                batch.resolve(&Err(Refusal::NoSpace(error.to_string())));
                batch.clear();
                return;
            }
        }
        let journaled = disk.journal_round(&batch.bytes);
        if let Err(e) = &journaled {
            tracing::warn!(error = %e, writes = batch.waiters.len(), "group store round not made durable in the journal");
        }
        batch.resolve(&journaled.map_err(|e| Refusal::NotDurable(e.to_string())));
        // Applied either way: the frames are in the local file, which the live state mirrors.
        for record in batch.records.drain(..) {
            disk.live.apply(record);
        }
        batch.clear();

        if disk.wants_compaction() {
            let mut before_rename = || before_rename_hook(self);
            match disk.compact(&mut before_rename) {
                Ok(()) => {
                    self.compactions.fetch_add(1, Ordering::Relaxed);
                }
                Err(CompactError { fatal: true, error }) => self.fail(batch, &error),
                Err(CompactError { error, .. }) => tracing::warn!(
                    error = %error,
                    retry_at_bytes = disk.compact_at_bytes,
                    "could not compact the group store; still using the old file"
                ),
            }
        }
    }

    /// Marks the store failed and fails `batch` and everything queued.
    fn fail(&self, batch: &mut Batch, error: &StoreError) {
        self.fail_with(batch, error.to_string());
    }

    fn fail_with(&self, batch: &mut Batch, reason: String) {
        tracing::error!(
            path = %self.path.display(),
            error = %reason,
            "group store failed: refusing writes until reopened"
        );
        let mut queued = {
            let mut st = self.lock();
            st.failed.get_or_insert_with(|| reason.clone());
            std::mem::take(&mut st.pending)
        };
        let outcome = Err(Refusal::Failed(reason));
        batch.resolve(&outcome);
        batch.clear();
        queued.resolve(&outcome);
    }
}

/// The store's round, run by the committer's sync threads.
impl Syncable for Shared {
    fn sync_round(&self, stats: &CommitStats) {
        // A panic must neither take a shared sync thread down nor leave a `Pending` waiting:
        // it fails the store (its state is unknown) and everything it held.
        if std::panic::catch_unwind(AssertUnwindSafe(|| self.round(stats))).is_err() {
            let mut guard = self.round.lock().unwrap_or_else(PoisonError::into_inner);
            self.fail_with(&mut guard.batch, "a group store round panicked".into());
        }
        self.lock().in_round = false;
        self.settled.notify_all();
    }

    fn has_unsynced(&self) -> bool {
        let st = self.lock();
        st.failed.is_none() && !st.pending.is_empty() && !held(&st)
    }

    fn sync_queued(&self) -> &SyncQueued {
        &self.queued
    }
}

/// Whether a test holds rounds back (never, outside tests; never once closing).
fn held(st: &State) -> bool {
    #[cfg(test)]
    {
        st.hooks.paused && !st.closing
    }
    #[cfg(not(test))]
    {
        let _ = st;
        false
    }
}

fn before_rename_hook(shared: &Shared) {
    #[cfg(test)]
    {
        let hook = shared.lock().hooks.before_rename.take();
        if let Some(mut hook) = hook {
            hook();
        }
    }
    #[cfg(not(test))]
    let _ = shared;
}
