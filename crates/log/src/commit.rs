//! Group commit: the threads that turn *appended* data into *durable* data.
//!
//! An append writes into the page cache and queues its partition here (once: a partition stays
//! queued until its round ends, so it is never queued twice and never has two rounds running).
//! Sync threads take queued partitions and run one *sync round* each: note how far the
//! partition's active segment has been written, fdatasync it, then publish that point as durable
//! and wake everyone waiting on it. Every append that landed while the previous round's fdatasync
//! ran is covered by the next round's single fdatasync, so the number of fdatasyncs per second is
//! bounded by the disk's sync latency, not by the append rate, and bytes per fdatasync grow with
//! load.
//!
//! With several sync threads, rounds of different partitions run concurrently: on ext4,
//! concurrent fdatasyncs share one journal commit, which is what makes many partitions per disk
//! affordable (measured in `docs/benchmarks.md`, "sync strategy").
//!
//! The queue never allocates in steady state: it holds at most one entry per open partition and
//! keeps its capacity.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crate::config::FlushPolicy;
use crate::partition::PartitionShared;
use crate::space::DataDirSpace;

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

/// Upper bounds of the fdatasync duration histogram's buckets, in microseconds (100 µs to
/// 10 s). A sync round that takes longer than the last bound lands in one more, open-ended
/// bucket.
pub const FDATASYNC_BUCKET_BOUNDS_MICROS: [u64; 16] = [
    100, 250, 500, 1_000, 2_500, 5_000, 10_000, 25_000, 50_000, 100_000, 250_000, 500_000,
    1_000_000, 2_500_000, 5_000_000, 10_000_000,
];

/// Buckets of the fdatasync duration histogram: one per bound, plus the open-ended one.
const FDATASYNC_BUCKETS: usize = FDATASYNC_BUCKET_BOUNDS_MICROS.len() + 1;

/// Counters of the work done, for metrics and benchmarks.
#[derive(Debug, Default)]
pub struct CommitStats {
    /// Completed sync rounds (each is one fdatasync of one segment file).
    pub fdatasyncs: AtomicU64,
    /// Bytes made durable by those fdatasyncs.
    pub bytes_synced: AtomicU64,
    /// Total time spent in fdatasync, in microseconds.
    pub fdatasync_micros: AtomicU64,
    /// Timed fdatasyncs by duration: `fdatasync_buckets[i]` counts those that took at most
    /// `FDATASYNC_BUCKET_BOUNDS_MICROS[i]` (and more than the bound before); the last one counts
    /// the slower ones. Not cumulative. Seals at segment roll are counted in `fdatasyncs` but
    /// not timed.
    pub fdatasync_buckets: [AtomicU64; FDATASYNC_BUCKETS],
}

impl CommitStats {
    /// Counts one fdatasync that took `micros`, in the totals and the histogram. Lock-free: the
    /// sync threads call it after every round.
    pub fn record_fdatasync(&self, micros: u64) {
        let bucket = FDATASYNC_BUCKET_BOUNDS_MICROS.partition_point(|&bound| bound < micros);
        self.fdatasync_buckets[bucket].fetch_add(1, Ordering::Relaxed);
        self.fdatasyncs.fetch_add(1, Ordering::Relaxed);
        self.fdatasync_micros.fetch_add(micros, Ordering::Relaxed);
    }
}

/// A point-in-time copy of the fdatasync duration histogram of [`CommitStats`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FdatasyncHistogram {
    /// Bucket upper bounds in microseconds ([`FDATASYNC_BUCKET_BOUNDS_MICROS`]).
    pub bounds_micros: &'static [u64],
    /// Per-bucket counts, not cumulative; one more than `bounds_micros` (the last counts the
    /// fdatasyncs slower than every bound).
    pub counts: [u64; FDATASYNC_BUCKETS],
    /// Total time of the timed fdatasyncs, in microseconds.
    pub sum_micros: u64,
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
    /// Partitions whose round may start now.
    ready: VecDeque<Arc<PartitionShared>>,
    /// Partitions waiting for the next interval tick (`FlushPolicy::IntervalMs` only).
    pending: Vec<Arc<PartitionShared>>,
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

/// The group-commit service shared by the partition logs of one data directory.
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
            fdatasync_micros: s.fdatasync_micros.load(Ordering::Relaxed),
        }
    }

    /// How long the fdatasyncs of the sync rounds took, as a histogram.
    pub fn fdatasync_histogram(&self) -> FdatasyncHistogram {
        let s = &self.shared.stats;
        FdatasyncHistogram {
            bounds_micros: &FDATASYNC_BUCKET_BOUNDS_MICROS,
            counts: std::array::from_fn(|i| s.fdatasync_buckets[i].load(Ordering::Relaxed)),
            sum_micros: s.fdatasync_micros.load(Ordering::Relaxed),
        }
    }

    pub(crate) fn handle(&self) -> CommitHandle {
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

/// What a partition holds to queue itself for a sync round.
#[derive(Debug, Clone)]
pub(crate) struct CommitHandle {
    shared: Arc<CommitShared>,
}

impl CommitHandle {
    /// Queues `partition` for a sync round. The caller guarantees it is not already queued (it
    /// won the partition's `queued` flag).
    /// Returns false if the committer has shut down (the caller then syncs itself).
    pub fn enqueue(&self, partition: Arc<PartitionShared>) -> bool {
        let mut q = self.shared.queue.lock().expect("commit queue poisoned");
        if q.shutdown {
            return false;
        }
        match self.shared.config.policy {
            FlushPolicy::Always => {
                q.ready.push_back(partition);
                drop(q);
                self.shared.wake.notify_one();
            }
            FlushPolicy::IntervalMs(_) => q.pending.push(partition),
        }
        true
    }

    pub fn stats(&self) -> &CommitStats {
        &self.shared.stats
    }

    pub fn space(&self) -> &DataDirSpace {
        &self.shared.space
    }
}

fn sync_loop(shared: &CommitShared) {
    loop {
        let partition = {
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
        partition.sync_round(&shared.stats);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fdatasync_durations_land_in_the_bucket_of_their_upper_bound() {
        let committer = GroupCommitter::start(CommitConfig::default());
        let stats = &committer.shared.stats;
        // On a bound, just above it, below the first, and past the last.
        for micros in [100, 101, 3, 20_000_000] {
            stats.record_fdatasync(micros);
        }
        let h = committer.fdatasync_histogram();
        assert_eq!(h.counts[0], 2, "3 µs and 100 µs go in the first bucket");
        assert_eq!(h.counts[1], 1, "101 µs goes in the 250 µs bucket");
        assert_eq!(
            h.counts[FDATASYNC_BUCKETS - 1],
            1,
            "20 s is past every bound"
        );
        assert_eq!(h.counts.iter().sum::<u64>(), 4);
        assert_eq!(h.sum_micros, 100 + 101 + 3 + 20_000_000);
        assert_eq!(committer.stats().fdatasyncs, 4);
        committer.shutdown();
    }
}
