//! The sync thread and the state it shares with `GroupStore`: the pending batch, rounds
//! (one write and one fdatasync for every queued write), compaction after a round, failing
//! the round alone when the disk is full, and failing the store on any other I/O error.

#[cfg(test)]
use std::io;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Condvar, Mutex, MutexGuard, PoisonError};

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
    fn is_empty(&self) -> bool {
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

#[derive(Debug, Default)]
pub(super) struct State {
    pub(super) pending: Batch,
    /// Set by `close`/drop: the sync thread finishes what is pending and exits.
    pub(super) closing: bool,
    /// Set once the store failed: why.
    pub(super) failed: Option<String>,
    #[cfg(test)]
    pub(super) hooks: super::tests::Hooks,
}

#[derive(Debug)]
pub(super) struct Shared {
    pub(super) path: PathBuf,
    pub(super) state: Mutex<State>,
    /// Wakes the sync thread.
    pub(super) wake: Condvar,
    pub(super) syncs: AtomicU64,
    pub(super) compactions: AtomicU64,
}

impl Shared {
    /// Critical sections only move buffers and set flags, so a panic elsewhere cannot leave
    /// the state half-updated: a poisoned lock is still usable.
    pub(super) fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// On the sync thread's exit, however it happens, fails whatever is still queued, so that no
/// `Pending` waits forever.
struct ExitGuard<'a>(&'a Shared);

impl Drop for ExitGuard<'_> {
    fn drop(&mut self) {
        let mut st = self.0.lock();
        if std::thread::panicking() && st.failed.is_none() {
            st.failed = Some("the sync thread panicked".into());
        }
        let reason = st
            .failed
            .clone()
            .unwrap_or_else(|| "group store is closed".into());
        let mut left = std::mem::take(&mut st.pending);
        drop(st);
        left.resolve(&Err(Refusal::Failed(reason)));
    }
}

pub(super) fn sync_loop(shared: &Shared, mut disk: Disk) {
    let _guard = ExitGuard(shared);
    // Swapped with the pending batch each round, so steady state allocates nothing.
    let mut batch = Batch::default();
    loop {
        #[cfg(test)]
        let inject_failure;
        #[cfg(test)]
        let room;
        {
            let mut st = shared.lock();
            loop {
                if !st.pending.is_empty() && !held(&st) {
                    break;
                }
                if st.closing && st.pending.is_empty() {
                    return;
                }
                st = shared.wake.wait(st).unwrap_or_else(PoisonError::into_inner);
            }
            std::mem::swap(&mut st.pending, &mut batch);
            #[cfg(test)]
            {
                inject_failure = std::mem::take(&mut st.hooks.fail_next_round);
                room = st.hooks.room_bytes;
            }
        }
        #[cfg(test)]
        let result = if inject_failure {
            Err(RoundError {
                fatal: true,
                error: io_error("write", &disk.path)(io::Error::other("injected")),
            })
        } else {
            disk.append(&batch.bytes, &shared.syncs, room)
        };
        #[cfg(not(test))]
        let result = disk.append(&batch.bytes, &shared.syncs, None);
        match result {
            Ok(()) => {}
            Err(RoundError { fatal: true, error }) => {
                fail(shared, &mut batch, &error);
                return;
            }
            Err(RoundError { error, .. }) => {
                // The disk is full: this round's writes fail, the store carries on.
                tracing::debug!(error = %error, writes = batch.waiters.len(), "group store round refused: no space");
                batch.resolve(&Err(Refusal::NoSpace(error.to_string())));
                batch.clear();
                continue;
            }
        }
        batch.resolve(&Ok(()));
        for record in batch.records.drain(..) {
            disk.live.apply(record);
        }
        batch.clear();

        if disk.wants_compaction() {
            let mut before_rename = || before_rename_hook(shared);
            match disk.compact(&mut before_rename) {
                Ok(()) => {
                    shared.compactions.fetch_add(1, Ordering::Relaxed);
                }
                Err(CompactError { fatal: true, error }) => {
                    fail(shared, &mut batch, &error);
                    return;
                }
                Err(CompactError { error, .. }) => tracing::warn!(
                    error = %error,
                    retry_at_bytes = disk.compact_at_bytes,
                    "could not compact the group store; still using the old file"
                ),
            }
        }
    }
}

/// Marks the store failed and fails `batch` and everything queued.
fn fail(shared: &Shared, batch: &mut Batch, error: &StoreError) {
    let reason = error.to_string();
    tracing::error!(
        path = %shared.path.display(),
        error = %reason,
        "group store failed: refusing writes until reopened"
    );
    let mut queued = {
        let mut st = shared.lock();
        st.failed = Some(reason.clone());
        std::mem::take(&mut st.pending)
    };
    let outcome = Err(Refusal::Failed(reason));
    batch.resolve(&outcome);
    queued.resolve(&outcome);
}

/// Whether a test holds the sync thread back (never, outside tests; never once closing).
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
