//! Deterministic simulation of compaction and power loss: seeded scenarios of acknowledged
//! keyed appends (values, tombstones, keyless records), clock steps, rolls and compaction
//! passes on a simulated disk (`DiskFaults::simulated`), each boot ended by a power loss in the
//! middle of a compaction pass.
//!
//! How a pass is cut: the test thread holds writeback (`hold_syncs`) and lets a seeded number
//! of syncs through (`let_syncs_through`); a second thread runs the pass, which stops at the
//! next sync (an fdatasync of a cleaned file, a directory fsync of the commit, the unlinks or
//! the renames, the checkpoint's), and the power fails there: unsynced writes are kept,
//! dropped or torn, unsynced renames kept or undone, unsynced entries may vanish. Every
//! append before is acknowledged (durable), so the pass is the only thread that syncs, and a
//! seed always cuts at the same sync.
//!
//! Checked after every reopening (and after every pass that ran to its end): every record
//! read is one appended at that offset; offsets only grow, and the log end never goes back;
//! keyless records all stay; for every key, the last record read is its latest acknowledged
//! value (a tombstone may be gone, and then every older value of its key too).
//!
//! Runs: `cargo test -p sluice-log --test simulation_compaction` (seeds 0..100);
//! `SLUICE_SIM_SEEDS=20000 cargo test -p sluice-log --release --test simulation_compaction`;
//! `SLUICE_SIM_SEED=12345 ...` for one seed.

mod common;

use std::collections::{BTreeMap, HashMap};
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::keyed::{Rec, batch, read_records, rec};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use sluice_log::{
    CleanerLimits, CleanupPolicy, Clock, CommitConfig, DirtyRatio, DiskFaults, FlushPolicy,
    GroupCommitter, LogConfig, ManualClock, PartitionLog,
};

const DEFAULT_SEEDS: u64 = 100;
const T0: i64 = 1_700_000_000_000;

#[derive(Default)]
struct Model {
    /// Every acknowledged record, by offset.
    acked: BTreeMap<i64, Rec>,
    /// The highest log end seen after a reopening.
    end: i64,
}

impl Model {
    fn check(&mut self, log: &PartitionLog) -> Result<(), String> {
        let end = log.log_end_offset();
        if end < self.end || log.high_watermark() < self.acked.keys().last().map_or(0, |o| o + 1) {
            return Err(format!("the log end went back to {end} from {}", self.end));
        }
        self.end = end;
        if log.log_start_offset() != 0 {
            return Err(format!("log start moved to {}", log.log_start_offset()));
        }
        let read = read_records(log);
        let mut last = i64::MIN;
        let mut seen: HashMap<Vec<u8>, (i64, Option<Vec<u8>>)> = HashMap::new();
        for (o, r) in &read {
            if *o <= last {
                return Err(format!("offset {o} read after {last}"));
            }
            last = *o;
            if self.acked.get(o) != Some(r) {
                return Err(format!(
                    "offset {o} reads {r:?}, acknowledged {:?}",
                    self.acked.get(o)
                ));
            }
            if let Some(k) = &r.key {
                seen.insert(k.clone(), (*o, r.value.clone()));
            }
        }
        let keyless = self.acked.values().filter(|r| r.key.is_none()).count();
        let keyless_read = read.iter().filter(|(_, r)| r.key.is_none()).count();
        if keyless != keyless_read {
            return Err(format!(
                "{keyless_read} keyless records read, {keyless} acknowledged"
            ));
        }
        let mut latest: HashMap<&[u8], (i64, &Option<Vec<u8>>)> = HashMap::new();
        for (o, r) in &self.acked {
            if let Some(k) = &r.key {
                latest.insert(k, (*o, &r.value));
            }
        }
        for (k, (o, v)) in latest {
            match (seen.get(k), v) {
                (Some((fo, fv)), v) if *fo == o && fv == v => {}
                (None, None) => {}
                (found, v) => {
                    return Err(format!(
                        "key {}: latest acknowledged {v:?} at {o}, the log ends with {found:?}",
                        String::from_utf8_lossy(k)
                    ));
                }
            }
        }
        Ok(())
    }
}

struct World {
    rng: StdRng,
    model: Model,
    trace: String,
    faults: DiskFaults,
    committer: Option<GroupCommitter>,
}

impl Drop for World {
    fn drop(&mut self) {
        self.faults.release_syncs();
        let _ = self.faults.power_loss(0);
        if let Some(c) = self.committer.take() {
            c.shutdown();
        }
    }
}

fn run(seed: u64) -> Result<String, String> {
    let tmp = tempfile::tempdir().expect("tempdir");
    let dir = tmp.path().join("topic-0");
    let mut w = World {
        rng: StdRng::seed_from_u64(seed),
        model: Model::default(),
        trace: String::new(),
        faults: DiskFaults::none(),
        committer: Some(GroupCommitter::start(CommitConfig {
            policy: FlushPolicy::Always,
            sync_threads: 1,
        })),
    };
    let result = scenario(&mut w, &dir, seed);
    result
        .map(|()| std::mem::take(&mut w.trace))
        .map_err(|e| format!("{e}\ntrace:\n{}", w.trace))
}

fn scenario(w: &mut World, dir: &Path, seed: u64) -> Result<(), String> {
    let rng = &mut w.rng;
    let config = LogConfig {
        segment_bytes: rng.random_range(1024..=3000),
        index_interval_bytes: rng.random_range(64..=512),
        segment_ms: Some(rng.random_range(500..5_000)),
        retention_ms: None,
        cleanup_policy: CleanupPolicy::Compact,
        min_cleanable_dirty_ratio: DirtyRatio([0.0, 0.2, 0.5][rng.random_range(0..3)]),
        delete_retention_ms: rng.random_range(0..2_000),
        ..LogConfig::default()
    };
    let limits = CleanerLimits {
        dedupe_buffer_bytes: [64 * 24, 1 << 20][rng.random_range(0..2)],
        io_buffer_bytes: rng.random_range(100..3000),
        ..CleanerLimits::default()
    };
    let keys = rng.random_range(2..24);
    let clock = ManualClock::new(T0);
    w.trace += &format!("  config {config:?}\n  limits {limits:?}\n");
    for cycle in 0..w.rng.random_range(1..=4) {
        w.faults = DiskFaults::simulated(seed.wrapping_mul(31).wrapping_add(cycle));
        let committer = w.committer.as_ref().expect("committer");
        let log = PartitionLog::open_with(
            dir,
            config,
            committer,
            Arc::new(clock.clone()),
            w.faults.clone(),
        )
        .map_err(|e| format!("open: {e}"))?;
        w.trace += &format!("  boot {cycle}: {:?}\n", log.recovery_report().actions);
        w.model
            .check(&log)
            .map_err(|e| format!("after boot {cycle}: {e}"))?;
        for step in 0..w.rng.random_range(5..60) {
            match w.rng.random_range(0..100) {
                0..70 => {
                    let n = w.rng.random_range(1..5);
                    let records: Vec<Rec> = (0..n)
                        .map(|i| {
                            let key = (w.rng.random_range(0..100) >= 5)
                                .then(|| format!("k{}", w.rng.random_range(0..keys)));
                            let value =
                                (w.rng.random_range(0..100) >= 20 || key.is_none()).then(|| {
                                    format!(
                                        "{cycle}.{step}.{i}{}",
                                        "v".repeat(w.rng.random_range(0..200))
                                    )
                                });
                            rec(key.as_deref(), value.as_deref())
                        })
                        .collect();
                    let appended = log
                        .append(&batch(&records, clock.now_ms(), None))
                        .and_then(|a| a.wait_durable())
                        .map_err(|e| format!("append: {e}"))?;
                    for (i, r) in records.into_iter().enumerate() {
                        w.model.acked.insert(appended.base_offset + i as i64, r);
                    }
                }
                70..82 => clock.advance(w.rng.random_range(0..1_000)),
                82..88 => log.roll_if_aged().map_err(|e| format!("roll: {e}"))?,
                _ => {
                    let o = log
                        .clean(clock.now_ms(), &limits)
                        .map_err(|e| format!("clean: {e}"))?;
                    w.trace +=
                        &format!("  clean: removed {} ({:?})\n", o.records_removed, o.reason);
                    w.model
                        .check(&log)
                        .map_err(|e| format!("after a pass at step {step}: {e}"))?;
                }
            }
        }
        // A pass cut by the power at its n-th sync.
        let n = w.rng.random_range(0..24);
        w.faults.hold_syncs();
        w.faults.let_syncs_through(n);
        let cleaner = log.clone();
        let now = clock.now_ms();
        let pass = std::thread::spawn(move || cleaner.clean(now, &limits));
        let waited = Instant::now();
        while !pass.is_finished() && w.faults.held_syncs() == 0 {
            if waited.elapsed() > Duration::from_secs(20) {
                return Err("the pass neither ended nor waited for a sync".into());
            }
            std::thread::yield_now();
        }
        let loss = w
            .faults
            .power_loss(w.rng.random())
            .map_err(|e| e.to_string())?;
        let outcome = pass.join().expect("pass thread");
        w.trace += &format!(
            "  power loss at sync {n}: pass {:?}; {loss:?}\n",
            outcome
                .as_ref()
                .map(|o| (o.reason, o.records_removed))
                .map_err(|e| e.to_string())
        );
        drop(log);
    }
    // A last boot to check what the last power loss left.
    w.faults = DiskFaults::simulated(seed ^ 0xfeed);
    let committer = w.committer.as_ref().expect("committer");
    let log = PartitionLog::open_with(
        dir,
        config,
        committer,
        Arc::new(clock.clone()),
        w.faults.clone(),
    )
    .map_err(|e| format!("final open: {e}"))?;
    w.trace += &format!("  final boot: {:?}\n", log.recovery_report().actions);
    w.model
        .check(&log)
        .map_err(|e| format!("after the final boot: {e}"))?;
    let o = log
        .clean(clock.now_ms(), &limits)
        .map_err(|e| format!("final clean: {e}"))?;
    w.trace += &format!("  final clean: removed {}\n", o.records_removed);
    w.model
        .check(&log)
        .map_err(|e| format!("after the final pass: {e}"))?;
    log.close().map_err(|e| format!("close: {e}"))
}

#[test]
fn power_loss_during_compaction_keeps_the_latest_acknowledged_value_of_every_key() {
    let seeds = sluice_log::sim::seeds_from_env(DEFAULT_SEEDS);
    let started = Instant::now();
    let run_one = |seed: u64| {
        let trace = sluice_log::sim::catch(|| run(seed))
            .map_err(|e| format!("seed {seed} failed (rerun with SLUICE_SIM_SEED={seed}):\n{e}"))?;
        Ok([
            trace.matches("CompactionRolledBack").count(),
            trace.matches("CompactionCompleted").count(),
            trace.matches("clean: removed").count(),
        ])
    };
    let add = |total: &mut [usize; 3], one: &[usize; 3]| {
        for (t, o) in total.iter_mut().zip(one) {
            *t += o;
        }
    };
    let [rolled_back, completed, passes] =
        sluice_log::sim::run_seeds(&seeds, run_one, add).unwrap_or_else(|e| panic!("{e}"));
    eprintln!(
        "{} compaction simulation seeds in {:?}: {rolled_back} passes rolled back and \
         {completed} completed by recovery, {passes} passes ran to their end",
        seeds.len(),
        started.elapsed()
    );
    if seeds.len() >= 50 {
        // The seeds must reach both sides of the commit point.
        assert!(
            rolled_back > 0 && completed > 0,
            "{rolled_back} rolled back, {completed} completed"
        );
    }
}
