//! Group commit: the threads that turn *appended* data into *durable* data.
//!
//! A writer writes into the page cache (or, for the group store, into a buffer of its own) and
//! asks for a round with [`CommitHandle::request_sync`]. The target is queued once: it stays
//! queued until its round ends, so it is never queued twice and never has two rounds running.
//! Sync threads take queued targets and run one *sync round* each ([`Syncable::sync_round`]):
//! for a partition, note how far its active segment has been written, fdatasync it, then
//! publish that point as durable and wake everyone waiting on it. Every write that landed while
//! the previous round's fdatasync ran is covered by the next round's single fdatasync, so the
//! number of fdatasyncs per second is bounded by the disk's sync latency, not by the write
//! rate, and bytes per fdatasync grow with load.
//!
//! ## What can be synced
//!
//! The committer knows nothing of partitions: it schedules anything that implements
//! [`Syncable`] (one round that makes everything written so far durable; whether more arrived
//! since; the flag that keeps it queued once). Partition logs (`partition.rs`) and the
//! consumer-group store (`sluice-groups`, `store/`) are the two implementations, and one
//! committer (with one [`FlushPolicy`] and one set of sync threads) can serve both.
//!
//! With several sync threads, rounds of different targets run concurrently: on ext4,
//! concurrent fdatasyncs share one journal commit, which is what makes many partitions per disk
//! affordable (measured in `docs/benchmarks.md`, "sync strategy").
//!
//! The queue never allocates in steady state: it holds at most one entry per target and keeps
//! its capacity.

use std::collections::VecDeque;
use std::fmt;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crate::config::FlushPolicy;
use crate::latency::{LatencyHistogram, LatencySnapshot};
use crate::space::DataDirSpace;

/// Something whose writes a [`GroupCommitter`] makes durable: a partition log's active
/// segment, the consumer-group store's file.
///
/// The contract: a writer first makes its write visible to the next round (writes it into the
/// page cache, or queues it in the target's own buffer), then calls
/// [`CommitHandle::request_sync`]. The committer then runs `sync_round` on a sync thread, at
/// most one round of a target at a time, and again while `has_unsynced` says more arrived, so
/// every write is covered by a round that started after it was visible. What "durable" means
/// to the target's callers (a high watermark, a resolved future) is published by the target in
/// `sync_round`, only after the fdatasync that covers it returned success.
pub trait Syncable: Send + Sync + fmt::Debug + 'static {
    /// Makes everything written so far durable (usually one fdatasync), publishes it and wakes
    /// its waiters. Failures are the target's own to record and report (a failed fdatasync is
    /// never retried); the committer only schedules. Records each fdatasync in `stats`.
    fn sync_round(&self, stats: &CommitStats);

    /// Whether writes arrived that no finished round covered (checked after each round; true
    /// queues the next one).
    fn has_unsynced(&self) -> bool;

    /// The target's place in the queue. Embed one [`SyncQueued`] per target and return it.
    fn sync_queued(&self) -> &SyncQueued;
}

/// Whether a [`Syncable`] sits in a committer's queue (or has a round running): the flag that
/// keeps it queued at most once. Only the committer sets and clears it.
#[derive(Debug, Default)]
pub struct SyncQueued(AtomicBool);

impl SyncQueued {
    /// True if this call queued the target (it was not queued before).
    fn claim(&self) -> bool {
        !self.0.swap(true, Ordering::AcqRel)
    }

    fn release(&self) {
        self.0.store(false, Ordering::Release);
    }

    /// Whether a round is queued or running.
    pub fn is_queued(&self) -> bool {
        self.0.load(Ordering::Acquire)
    }
}

/// Settings of a [`GroupCommitter`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CommitConfig {
    pub policy: FlushPolicy,
    /// Sync threads: how many fdatasyncs (of different partitions) may run at once. The default,
    /// 2, measured best on a 2-core VM (`docs/benchmarks.md`, "Sync threads"): every fdatasync
    /// costs CPU in the kernel, and fewer threads let each round cover more appends.
    pub sync_threads: usize,
}

impl Default for CommitConfig {
    fn default() -> Self {
        CommitConfig {
            policy: FlushPolicy::Always,
            sync_threads: 2,
        }
    }
}

/// Counters of the work done, for metrics and benchmarks: every [`Syncable`] served by the
/// committer counts its fdatasyncs here.
#[derive(Debug, Default)]
pub struct CommitStats {
    /// Completed sync rounds (each is one fdatasync of one segment file).
    pub fdatasyncs: AtomicU64,
    /// Bytes made durable by those fdatasyncs.
    pub bytes_synced: AtomicU64,
    /// Timed fdatasyncs by duration (and their total time). Seals at segment roll are counted
    /// in `fdatasyncs` but not timed.
    pub fdatasync_durations: LatencyHistogram,
}

impl CommitStats {
    /// Counts one fdatasync that took `micros`, in the totals and the histogram. Lock-free: the
    /// sync threads call it after every round.
    pub fn record_fdatasync(&self, micros: u64) {
        self.fdatasync_durations.observe_micros(micros);
        self.fdatasyncs.fetch_add(1, Ordering::Relaxed);
    }

    /// Counts `bytes` made durable by an fdatasync. Call it before publishing the bytes as
    /// durable, so that a woken waiter sees them counted.
    pub fn record_bytes_synced(&self, bytes: u64) {
        self.bytes_synced.fetch_add(bytes, Ordering::Relaxed);
    }
}

/// A point-in-time copy of [`CommitStats`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CommitStatsSnapshot {
    pub fdatasyncs: u64,
    pub bytes_synced: u64,
    pub fdatasync_micros: u64,
}

#[derive(Debug)]
struct Queue {
    /// Targets whose round may start now.
    ready: VecDeque<Arc<dyn Syncable>>,
    /// Targets waiting for the next interval tick (`FlushPolicy::IntervalMs` only).
    pending: Vec<Arc<dyn Syncable>>,
    next_tick: Instant,
    shutdown: bool,
}

#[derive(Debug)]
pub(crate) struct CommitShared {
    config: CommitConfig,
    queue: Mutex<Queue>,
    wake: Condvar,
    pub(crate) stats: CommitStats,
    /// Free-space state of the data directory whose partitions this committer serves.
    space: DataDirSpace,
}

/// The group-commit service shared by the partition logs (and the group store) of one data
/// directory.
///
/// Dropping it (or calling [`GroupCommitter::shutdown`]) finishes every queued round first.
#[derive(Debug)]
pub struct GroupCommitter {
    shared: Arc<CommitShared>,
    threads: Vec<JoinHandle<()>>,
}

impl GroupCommitter {
    /// Starts a committer for partition logs outside any data directory (tests, benchmarks):
    /// its [`DataDirSpace`] is a detached one.
    pub fn start(config: CommitConfig) -> GroupCommitter {
        Self::start_with_space(config, DataDirSpace::detached())
    }

    /// Starts a committer for the partition logs of one data directory, which report full-disk
    /// errors and successful appends to `space` (see `space.rs`).
    pub fn start_with_space(config: CommitConfig, space: DataDirSpace) -> GroupCommitter {
        let sync_threads = config.sync_threads.max(1);
        let shared = Arc::new(CommitShared {
            config,
            queue: Mutex::new(Queue {
                ready: VecDeque::new(),
                pending: Vec::new(),
                next_tick: Instant::now(),
                shutdown: false,
            }),
            wake: Condvar::new(),
            stats: CommitStats::default(),
            space,
        });
        let threads = (0..sync_threads)
            .map(|i| {
                let shared = Arc::clone(&shared);
                std::thread::Builder::new()
                    .name(format!("sluice-sync-{i}"))
                    .spawn(move || sync_loop(&shared))
                    .expect("spawn sync thread")
            })
            .collect();
        GroupCommitter { shared, threads }
    }

    pub fn config(&self) -> CommitConfig {
        self.shared.config
    }

    /// The free-space state of the data directory this committer serves.
    pub fn space(&self) -> &DataDirSpace {
        &self.shared.space
    }

    pub fn stats(&self) -> CommitStatsSnapshot {
        let s = &self.shared.stats;
        CommitStatsSnapshot {
            fdatasyncs: s.fdatasyncs.load(Ordering::Relaxed),
            bytes_synced: s.bytes_synced.load(Ordering::Relaxed),
            fdatasync_micros: s.fdatasync_durations.snapshot().sum_micros,
        }
    }

    /// How long the fdatasyncs of the sync rounds took, as a histogram (buckets of
    /// [`crate::LATENCY_BUCKET_BOUNDS_MICROS`]).
    pub fn fdatasync_histogram(&self) -> LatencySnapshot {
        self.shared.stats.fdatasync_durations.snapshot()
    }

    /// A handle to request sync rounds with (see [`Syncable`]). It does not keep the sync
    /// threads running: once the committer shuts down, requested rounds run in the caller.
    pub fn handle(&self) -> CommitHandle {
        CommitHandle {
            shared: Arc::clone(&self.shared),
        }
    }

    /// Runs every queued round, then stops the sync threads.
    pub fn shutdown(mut self) {
        self.stop();
    }

    fn stop(&mut self) {
        {
            let mut q = self.shared.queue.lock().expect("commit queue poisoned");
            q.shutdown = true;
            let pending = std::mem::take(&mut q.pending);
            q.ready.extend(pending);
        }
        self.shared.wake.notify_all();
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
    }
}

impl Drop for GroupCommitter {
    fn drop(&mut self) {
        self.stop();
    }
}

/// What a [`Syncable`] holds to request its sync rounds. Cheap to clone.
#[derive(Debug, Clone)]
pub struct CommitHandle {
    shared: Arc<CommitShared>,
}

impl CommitHandle {
    /// Asks for a sync round of `target`, which has just made a write visible to the next
    /// round. Returns at once if a round is already queued or running (it, or the one after it,
    /// will cover the write); otherwise queues one. If the committer has shut down, runs the
    /// rounds in the calling thread before returning, so no write is stranded.
    ///
    /// No allocation and no lock when the target is already queued: the hot append path calls
    /// this once per append.
    pub fn request_sync<T: Syncable>(&self, target: &Arc<T>) {
        if !target.sync_queued().claim() {
            return;
        }
        let target: Arc<dyn Syncable> = Arc::clone(target) as Arc<dyn Syncable>;
        if let Err(target) = self.enqueue(target) {
            // The committer is gone (shutting down): sync inline so the caller is not stranded.
            run_rounds(&self.shared, target);
        }
    }

    /// Queues `target`, which the caller has claimed. Gives it back if the committer has shut
    /// down.
    fn enqueue(&self, target: Arc<dyn Syncable>) -> Result<(), Arc<dyn Syncable>> {
        enqueue(&self.shared, target)
    }

    pub fn stats(&self) -> &CommitStats {
        &self.shared.stats
    }

    pub fn space(&self) -> &DataDirSpace {
        &self.shared.space
    }

    pub fn config(&self) -> CommitConfig {
        self.shared.config
    }
}

fn enqueue(shared: &CommitShared, target: Arc<dyn Syncable>) -> Result<(), Arc<dyn Syncable>> {
    let mut q = shared.queue.lock().expect("commit queue poisoned");
    if q.shutdown {
        return Err(target);
    }
    match shared.config.policy {
        FlushPolicy::Always => {
            q.ready.push_back(target);
            drop(q);
            shared.wake.notify_one();
        }
        FlushPolicy::IntervalMs(_) => q.pending.push(target),
    }
    Ok(())
}

/// Runs rounds of `target` (claimed by the caller) until nothing new arrived. The target stays
/// claimed until its round ends, so two rounds of one target never run at once: writes that
/// land during an fdatasync wait for the next round, which then covers all of them with one
/// fdatasync. That next round goes back into the queue (behind other targets), or runs here if
/// the committer has shut down.
fn run_rounds(shared: &CommitShared, mut target: Arc<dyn Syncable>) {
    loop {
        target.sync_round(&shared.stats);
        target.sync_queued().release();
        if !target.has_unsynced() || !target.sync_queued().claim() {
            // Nothing new, or a writer already queued the next round.
            return;
        }
        match enqueue(shared, target) {
            Ok(()) => return,
            // The committer has shut down: run the next round here.
            Err(back) => target = back,
        }
    }
}

fn sync_loop(shared: &CommitShared) {
    loop {
        let target = {
            let mut q = shared.queue.lock().expect("commit queue poisoned");
            loop {
                if let Some(p) = q.ready.pop_front() {
                    break p;
                }
                if q.shutdown {
                    return;
                }
                match shared.config.policy {
                    FlushPolicy::Always => {
                        q = shared.wake.wait(q).expect("commit queue poisoned");
                    }
                    FlushPolicy::IntervalMs(ms) => {
                        let now = Instant::now();
                        if now >= q.next_tick {
                            // Move pending to ready without giving up `pending`'s capacity.
                            let Queue { ready, pending, .. } = &mut *q;
                            ready.extend(pending.drain(..));
                            q.next_tick = now + Duration::from_millis(ms);
                            if q.ready.len() > 1 {
                                shared.wake.notify_all();
                            }
                        } else {
                            let timeout = q.next_tick - now;
                            q = shared.wake.wait_timeout(q, timeout).expect("poisoned").0;
                        }
                    }
                }
            }
        };
        run_rounds(shared, target);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A target whose "writes" are a counter and whose round marks all of them synced.
    #[derive(Debug, Default)]
    struct Counter {
        queued: SyncQueued,
        written: AtomicU64,
        synced: AtomicU64,
        rounds: AtomicU64,
        in_round: AtomicBool,
        overlapped: AtomicBool,
    }

    impl Syncable for Counter {
        fn sync_round(&self, stats: &CommitStats) {
            if self.in_round.swap(true, Ordering::AcqRel) {
                self.overlapped.store(true, Ordering::Release);
            }
            let covered = self.written.load(Ordering::Acquire);
            std::thread::sleep(Duration::from_micros(500));
            stats.record_fdatasync(500);
            self.rounds.fetch_add(1, Ordering::Relaxed);
            self.in_round.store(false, Ordering::Release);
            self.synced.fetch_max(covered, Ordering::AcqRel);
        }

        fn has_unsynced(&self) -> bool {
            self.written.load(Ordering::Acquire) > self.synced.load(Ordering::Acquire)
        }

        fn sync_queued(&self) -> &SyncQueued {
            &self.queued
        }
    }

    #[test]
    fn every_write_is_covered_by_a_later_round_and_rounds_of_a_target_never_overlap() {
        let committer = GroupCommitter::start(CommitConfig {
            policy: FlushPolicy::Always,
            sync_threads: 4,
        });
        let target = Arc::new(Counter::default());
        let writers: Vec<_> = (0..4)
            .map(|_| {
                let target = Arc::clone(&target);
                let handle = committer.handle();
                std::thread::spawn(move || {
                    for _ in 0..200 {
                        let mine = target.written.fetch_add(1, Ordering::AcqRel) + 1;
                        handle.request_sync(&target);
                        let deadline = Instant::now() + Duration::from_secs(10);
                        while target.synced.load(Ordering::Acquire) < mine {
                            assert!(Instant::now() < deadline, "write {mine} never synced");
                            std::thread::yield_now();
                        }
                    }
                })
            })
            .collect();
        writers.into_iter().for_each(|w| w.join().unwrap());
        assert!(
            !target.overlapped.load(Ordering::Acquire),
            "two rounds at once"
        );
        let rounds = target.rounds.load(Ordering::Relaxed);
        assert!(rounds < 800, "800 writes took {rounds} rounds: no grouping");
        assert_eq!(committer.stats().fdatasyncs, rounds);

        // Once the committer has shut down, a request runs the round in the caller.
        let handle = committer.handle();
        committer.shutdown();
        target.written.fetch_add(1, Ordering::AcqRel);
        handle.request_sync(&target);
        assert!(
            !target.has_unsynced(),
            "synced before request_sync returned"
        );
        assert!(!target.sync_queued().is_queued());
    }

    #[test]
    fn fdatasyncs_are_counted_and_timed() {
        let committer = GroupCommitter::start(CommitConfig::default());
        for micros in [100, 101, 20_000_000] {
            committer.shared.stats.record_fdatasync(micros);
        }
        let h = committer.fdatasync_histogram();
        assert_eq!((h.counts[0], h.counts[1], h.count()), (1, 1, 3));
        let stats = committer.stats();
        assert_eq!(stats.fdatasyncs, 3);
        assert_eq!(stats.fdatasync_micros, 100 + 101 + 20_000_000);
        committer.shutdown();
    }
}
