//! Deterministic simulation: seeded scenarios of appends, reads, injected disk faults and power
//! losses, checked after every recovery against what the log acknowledged.
//!
//! One scenario, from its seed: a partition log with small segments (so rolls happen) on a
//! simulated disk (`DiskFaults::simulated`), then a few cycles of
//! 1. open (recovery) and check everything recovered against the model;
//! 2. random steps: appends of random batches, waited for until durable (acknowledged);
//!    random reads; faults armed at a random operation (EIO on the Nth write, EIO on the Nth
//!    sync, ENOSPC after N bytes, space back); now and then a clean close;
//! 3. writeback stalls (`hold_syncs`), a few more appends that are never acknowledged, and the
//!    power fails (`power_loss`): every unsynced write is kept, dropped or torn, each on its
//!    own, and unsynced directory entries may vanish.
//!
//! What is checked after each reopen: every acknowledged batch (and everything the log
//! reported durable through its high watermark) is there, byte for byte, at its offset;
//! offsets are contiguous from 0; every batch served passes its CRC and is one the test
//! appended at that offset; nothing is served past the recovered end. While running: an append
//! gets the next offset; reads serve acknowledged bytes only; after a failed sync (or a failed
//! write) the high watermark never moves again, every later append is refused with
//! `LogError::Failed`, and no append waiting for durability is reported durable.
//!
//! Every scenario is deterministic for its seed: appends run one at a time while a sync fault
//! is armed (so the Nth sync is always the same one), and the unacknowledged tail is written
//! while the sync threads are held. Runs:
//! - `cargo test -p sluice-log --test simulation`: seeds 0..1000;
//! - `SLUICE_SIM_SEEDS=100000 cargo test -p sluice-log --release --test simulation`: more;
//! - `SLUICE_SIM_SEED=12345 cargo test -p sluice-log --test simulation`: one seed, exactly.

mod common;

use std::collections::HashMap;
use std::fmt::Write as _;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Instant;

use common::make_batch;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use sluice_log::batch::BatchView;
use sluice_log::{
    Appended, CommitConfig, DiskFaults, FlushPolicy, GroupCommitter, LogConfig, LogError,
    ManualClock, PartitionLog, PowerLoss,
};

const DEFAULT_SEEDS: u64 = 1000;
const T0: i64 = 1_700_000_000_000;

/// Totals over a run, printed at the end (`--nocapture`).
#[derive(Debug, Default, Clone, Copy)]
struct Totals {
    scenarios: u64,
    power_losses: u64,
    clean_closes: u64,
    appends_acked: u64,
    appends_refused: u64,
    failed_partitions: u64,
    reads: u64,
    writes_kept: u64,
    writes_dropped: u64,
    writes_torn: u64,
    truncations_dropped: u64,
    files_vanished: u64,
    recovered_unacked_batches: u64,
}

impl Totals {
    fn add(&mut self, o: &Totals) {
        self.scenarios += o.scenarios;
        self.power_losses += o.power_losses;
        self.clean_closes += o.clean_closes;
        self.appends_acked += o.appends_acked;
        self.appends_refused += o.appends_refused;
        self.failed_partitions += o.failed_partitions;
        self.reads += o.reads;
        self.writes_kept += o.writes_kept;
        self.writes_dropped += o.writes_dropped;
        self.writes_torn += o.writes_torn;
        self.truncations_dropped += o.truncations_dropped;
        self.files_vanished += o.files_vanished;
        self.recovered_unacked_batches += o.recovered_unacked_batches;
    }

    fn power_loss(&mut self, p: &PowerLoss) {
        self.power_losses += 1;
        self.writes_kept += p.writes_kept as u64;
        self.writes_dropped += p.writes_dropped as u64;
        self.writes_torn += p.writes_torn as u64;
        self.truncations_dropped += p.truncations_dropped as u64;
        self.files_vanished += p.files_vanished as u64;
    }
}

/// What the test knows the log must hold.
#[derive(Debug, Default)]
struct Model {
    /// Acknowledged batches as (base offset, bytes after the base offset), contiguous from 0.
    acked: Vec<(i64, Vec<u8>)>,
    /// One past the last acknowledged offset.
    acked_end: i64,
    /// The highest high watermark the current log reported: durable, so it must survive.
    reported_durable: i64,
    /// Every batch appended (or attempted) past `acked_end` since the last recovery, by the
    /// offset it got (or would have got): recovery may keep any of them, never anything else.
    candidates: HashMap<i64, Vec<Vec<u8>>>,
}

type Check<T = ()> = Result<T, String>;

macro_rules! ensure {
    ($cond:expr, $($msg:tt)+) => {
        if !$cond {
            return Err(format!($($msg)+));
        }
    };
}

/// One scenario's world. Dropping it releases held syncs before the committer joins its
/// threads (a failing check can leave a sync held).
struct World {
    rng: StdRng,
    dir: PathBuf,
    _tmp: tempfile::TempDir,
    config: LogConfig,
    model: Model,
    totals: Totals,
    /// Events so far, printed with a failure.
    trace: String,
    faults: DiskFaults,
    committer: Option<GroupCommitter>,
    /// Whether the next open must find the clean-shutdown marker; `None`: either (a close that
    /// failed once everything was synced, writing the marker or fsyncing the directory, may
    /// leave it; it then still tells the truth).
    expect_clean: Option<bool>,
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

/// The state of the open log, as seen by the test.
struct Open {
    log: PartitionLog,
    /// Set once the partition refused an append or failed a durability wait: the high
    /// watermark at that moment, which must never move again.
    failed_at: Option<i64>,
    /// A fault was armed in this boot: append one at a time, so that which write or sync it
    /// hits, and what was in flight then, is the same on every run of the seed.
    faults_armed: bool,
}

impl World {
    fn new(seed: u64) -> World {
        let mut rng = StdRng::seed_from_u64(seed);
        let tmp = tempfile::tempdir().expect("tempdir");
        let dir = tmp.path().join("topic-0");
        let config = LogConfig {
            segment_bytes: rng.random_range(1024..=4096),
            segment_ms: None,
            retention_ms: None,
            retention_bytes: None,
            index_interval_bytes: rng.random_range(64..=512),
            ..LogConfig::default()
        };
        let committer = GroupCommitter::start(CommitConfig {
            policy: FlushPolicy::Always,
            sync_threads: 1,
        });
        World {
            rng,
            dir,
            _tmp: tmp,
            config,
            model: Model::default(),
            totals: Totals::default(),
            trace: String::new(),
            faults: DiskFaults::none(),
            committer: Some(committer),
            expect_clean: Some(false),
        }
    }

    fn note(&mut self, event: impl std::fmt::Display) {
        let _ = writeln!(self.trace, "  {event}");
    }

    fn run(&mut self) -> Check {
        self.totals.scenarios = 1;
        let _ = writeln!(self.trace, "  config {:?}", self.config);
        let cycles = self.rng.random_range(1..=3);
        for cycle in 0..cycles {
            let mut open = self.open(cycle)?;
            let steps = self.rng.random_range(0..30);
            let mut closed = None;
            for _ in 0..steps {
                match self.rng.random_range(0..20) {
                    0..=11 => self.append_step(&mut open)?,
                    12..=15 => self.read_step(&open)?,
                    16..=18 => self.arm_fault(&mut open),
                    _ => {
                        // A close that fails closes the log all the same (unclean).
                        closed = Some(self.clean_close(&open)?);
                        break;
                    }
                }
            }
            if closed.is_none() {
                self.unacked_tail(&mut open)?;
            }
            self.power_loss(open)?;
            self.expect_clean = closed.unwrap_or(Some(false));
        }
        let open = self.open(cycles)?;
        drop(open);
        Ok(())
    }

    /// Opens the log on a fresh simulated disk (a new boot) and checks what recovery left.
    fn open(&mut self, cycle: u32) -> Check<Open> {
        self.faults = DiskFaults::simulated(self.rng.random());
        let log = PartitionLog::open_with(
            &self.dir,
            self.config,
            self.committer.as_ref().expect("committer"),
            Arc::new(ManualClock::new(T0)),
            self.faults.clone(),
        )
        .map_err(|e| format!("open (cycle {cycle}) failed: {e}"))?;
        self.note(format_args!(
            "open (cycle {cycle}): recovered up to {}, actions {:?}",
            log.log_end_offset(),
            log.recovery_report().actions
        ));
        let clean = log.recovery_report().clean_shutdown;
        ensure!(
            self.expect_clean.is_none_or(|expected| clean == expected),
            "recovery saw clean shutdown {clean}, expected {:?}",
            self.expect_clean
        );
        self.check_recovered(&log)?;
        Ok(Open {
            log,
            failed_at: None,
            faults_armed: false,
        })
    }

    fn check_recovered(&mut self, log: &PartitionLog) -> Check {
        let end = log.log_end_offset();
        ensure!(
            log.high_watermark() == end,
            "after recovery the high watermark {} is not the log end {end}",
            log.high_watermark()
        );
        let m = &self.model;
        ensure!(
            end >= m.acked_end,
            "acknowledged data lost: recovered up to {end}, acknowledged up to {}",
            m.acked_end
        );
        ensure!(
            end >= m.reported_durable,
            "durable data lost: recovered up to {end}, the log had reported {} durable",
            m.reported_durable
        );
        let batches = read_checked(log, 0, 1 << 20)?;
        let mut next = 0;
        let mut unacked = 0;
        for (i, (base, rest)) in batches.iter().enumerate() {
            ensure!(
                *base == next,
                "offsets not contiguous after recovery: batch at {base}, expected {next}"
            );
            if *base < m.acked_end {
                let (acked_base, acked_rest) = &m.acked[i];
                ensure!(
                    acked_base == base && acked_rest == rest,
                    "acknowledged batch at {acked_base} differs after recovery (found a batch at {base})"
                );
            } else {
                ensure!(
                    m.candidates.get(base).is_some_and(|c| c.contains(rest)),
                    "recovery serves a batch at {base} that was never appended there"
                );
                unacked += 1;
            }
            next = last_offset(*base, rest) + 1;
        }
        ensure!(next == end, "reads end at {next} but the log end is {end}");
        let at_end = log.read(end, 1 << 20).map_err(|e| e.to_string())?;
        ensure!(
            at_end.records.is_empty(),
            "a read at the log end served data"
        );
        ensure!(
            matches!(
                log.read(end + 1, 1 << 20),
                Err(LogError::OffsetOutOfRange { .. })
            ),
            "a read past the log end was not out of range"
        );
        // Everything recovered is durable now.
        self.totals.recovered_unacked_batches += unacked;
        self.model.acked = batches;
        self.model.acked_end = end;
        self.model.reported_durable = end;
        self.model.candidates.clear();
        Ok(())
    }

    /// Random batches for one append, concatenated.
    fn random_append(&mut self) -> Vec<Vec<u8>> {
        let n = self.rng.random_range(1..=3);
        (0..n)
            .map(|_| {
                let count = self.rng.random_range(1..=5);
                let len = self.rng.random_range(0..=300);
                let tag = self.rng.random();
                make_batch(tag, count, len, T0)
            })
            .collect()
    }

    /// Appends `batches` as one append, recording them as candidates at their offsets.
    fn append(&mut self, open: &mut Open, batches: &[Vec<u8>]) -> Check<Option<Appended>> {
        let base = open.log.log_end_offset();
        let mut offset = base;
        for b in batches {
            self.model
                .candidates
                .entry(offset)
                .or_default()
                .push(b[8..].to_vec());
            offset = last_offset(offset, &b[8..]) + 1;
        }
        let data = batches.concat();
        match open.log.append(&data) {
            Ok(a) => {
                ensure!(
                    open.failed_at.is_none(),
                    "a failed partition took an append"
                );
                ensure!(
                    a.base_offset == base && a.last_offset == offset - 1,
                    "append got offsets {}..={}, expected {base}..={}",
                    a.base_offset,
                    a.last_offset,
                    offset - 1
                );
                self.note(format_args!("append {base}..={}", offset - 1));
                Ok(Some(a))
            }
            Err(e) if e.is_no_space() => {
                ensure!(
                    open.log.log_end_offset() == base,
                    "a refused append moved the log end"
                );
                self.note(format_args!("append at {base}: {e}"));
                self.totals.appends_refused += 1;
                Ok(None)
            }
            Err(e @ (LogError::Failed { .. } | LogError::Io { .. })) => {
                self.note(format_args!("append at {base}: {e}"));
                self.totals.appends_refused += 1;
                if open.failed_at.is_none() {
                    self.failed(open);
                }
                Ok(None)
            }
            Err(e) => Err(format!("append at {base}: unexpected error {e}")),
        }
    }

    /// The partition failed: from now on its high watermark is frozen.
    fn failed(&mut self, open: &mut Open) {
        let hw = open.log.high_watermark();
        self.note(format_args!("partition failed at high watermark {hw}"));
        self.totals.failed_partitions += 1;
        open.failed_at = Some(hw);
    }

    fn append_step(&mut self, open: &mut Open) -> Check {
        let n = if open.faults_armed {
            1
        } else {
            self.rng.random_range(1..=3)
        };
        let mut waiting = Vec::new();
        for _ in 0..n {
            let batches = self.random_append();
            if let Some(appended) = self.append(open, &batches)? {
                waiting.push((appended, batches));
            }
        }
        for (appended, batches) in waiting {
            let (base, last) = (appended.base_offset, appended.last_offset);
            match appended.wait_durable() {
                Ok(_) => {
                    // Durable before the failure is fine; after it, never.
                    if let Some(hw) = open.failed_at
                        && last >= hw
                    {
                        return Err(format!(
                            "offsets {base}..={last} reported durable after the partition failed at {hw}"
                        ));
                    }
                    ensure!(
                        base == self.model.acked_end,
                        "acknowledged {base}..={last} but the acknowledged end is {}",
                        self.model.acked_end
                    );
                    let mut offset = base;
                    for b in &batches {
                        self.model.acked.push((offset, b[8..].to_vec()));
                        offset = last_offset(offset, &b[8..]) + 1;
                    }
                    self.model.acked_end = last + 1;
                    self.totals.appends_acked += 1;
                }
                Err(e) => {
                    ensure!(
                        matches!(e, LogError::Failed { .. }),
                        "waiting for {base}..={last}: unexpected error {e}"
                    );
                    self.note(format_args!("wait {base}..={last}: {e}"));
                    if open.failed_at.is_none() {
                        self.failed(open);
                    }
                }
            }
        }
        self.check_running(open)
    }

    /// Invariants of a running log after every step.
    fn check_running(&mut self, open: &Open) -> Check {
        let hw = open.log.high_watermark();
        match open.failed_at {
            Some(frozen) => {
                ensure!(
                    hw == frozen,
                    "the high watermark moved from {frozen} to {hw} after the partition failed"
                );
                let probe = make_batch(0, 1, 1, T0);
                ensure!(
                    matches!(open.log.append(&probe), Err(LogError::Failed { .. })),
                    "a failed partition did not refuse an append with Failed"
                );
            }
            None => {
                ensure!(
                    hw == self.model.acked_end && open.log.log_end_offset() == hw,
                    "running log: high watermark {hw}, log end {}, acknowledged end {}",
                    open.log.log_end_offset(),
                    self.model.acked_end
                );
            }
        }
        self.model.reported_durable = self.model.reported_durable.max(hw);
        Ok(())
    }

    fn read_step(&mut self, open: &Open) -> Check {
        self.totals.reads += 1;
        let hw = open.log.high_watermark();
        let end = self.model.acked_end;
        if end == 0 {
            return Ok(());
        }
        let offset = self.rng.random_range(0..end);
        let max_bytes = self.rng.random_range(1..=4096);
        let got = read_checked(&open.log, offset, max_bytes)?;
        ensure!(
            !got.is_empty(),
            "a read at acknowledged offset {offset} served nothing"
        );
        let first = &got[0];
        ensure!(
            first.0 <= offset && last_offset(first.0, &first.1) >= offset,
            "a read at {offset} starts with the batch at {}",
            first.0
        );
        for (base, rest) in &got {
            ensure!(
                last_offset(*base, rest) < hw,
                "a read served offset {} at or past the high watermark {hw}",
                last_offset(*base, rest)
            );
            let i = self.model.acked.partition_point(|(b, _)| b < base);
            ensure!(
                self.model
                    .acked
                    .get(i)
                    .is_some_and(|(b, r)| b == base && r == rest),
                "a read served a batch at {base} that differs from the acknowledged one"
            );
        }
        let past = open.log.read(hw, 1 << 20).map_err(|e| e.to_string())?;
        ensure!(
            past.records.is_empty(),
            "a read at the high watermark served data"
        );
        Ok(())
    }

    fn arm_fault(&mut self, open: &mut Open) {
        open.faults_armed = true;
        match self.rng.random_range(0..4) {
            0 => {
                let n = self.rng.random_range(0..6);
                self.faults.fail_write_after(n, libc::EIO);
                self.note(format_args!("armed: EIO on write {n} from now"));
            }
            1 => {
                let n = self.rng.random_range(0..6);
                self.faults.fail_sync_after(n, libc::EIO);
                self.note(format_args!("armed: EIO on sync {n} from now"));
            }
            2 => {
                let room = self.rng.random_range(0..3000);
                self.faults.fill_after(room);
                self.note(format_args!("armed: ENOSPC after {room} bytes"));
            }
            _ => {
                self.faults.free();
                self.note("space freed");
            }
        }
    }

    /// Closes the log (cleanly if it can): whether the next open must find the clean-shutdown
    /// marker (`None`: it may).
    fn clean_close(&mut self, open: &Open) -> Check<Option<bool>> {
        let hw = open.log.high_watermark();
        match open.log.close() {
            Ok(()) => {
                ensure!(
                    open.failed_at.is_none(),
                    "a failed partition closed cleanly"
                );
                self.note(format_args!("clean close at {hw}"));
                self.totals.clean_closes += 1;
                Ok(Some(true))
            }
            Err(e) => {
                self.note(format_args!("close failed: {e}"));
                let after_marker = matches!(
                    e,
                    LogError::Io {
                        op: "write marker" | "fsync directory",
                        ..
                    }
                );
                Ok(if after_marker { None } else { Some(false) })
            }
        }
    }

    /// Writeback stalls, and a few appends go to the page cache that are never acknowledged.
    fn unacked_tail(&mut self, open: &mut Open) -> Check {
        self.faults.hold_syncs();
        let n = self.rng.random_range(0..=4);
        for _ in 0..n {
            let batches = self.random_append();
            self.append(open, &batches)?;
        }
        let hw = open.log.high_watermark();
        // A roll seals (syncs) the old segment on this thread: that much is durable.
        self.model.reported_durable = self.model.reported_durable.max(hw);
        if let Some(frozen) = open.failed_at {
            ensure!(
                hw == frozen,
                "the high watermark moved from {frozen} to {hw} after the partition failed"
            );
        }
        Ok(())
    }

    fn power_loss(&mut self, open: Open) -> Check {
        drop(open);
        let seed = self.rng.random();
        let report = self
            .faults
            .power_loss(seed)
            .map_err(|e| format!("power loss: {e}"))?;
        self.note(format_args!("power loss: {report:?}"));
        self.totals.power_loss(&report);
        Ok(())
    }
}

/// Reads from `offset` and checks every batch served: whole, CRC valid.
fn read_checked(log: &PartitionLog, offset: i64, max_bytes: usize) -> Check<Vec<(i64, Vec<u8>)>> {
    let mut out = Vec::new();
    let mut next = offset;
    loop {
        let r = log
            .read(next, max_bytes)
            .map_err(|e| format!("read at {next}: {e}"))?;
        if r.records.is_empty() {
            return Ok(out);
        }
        let mut data = &r.records[..];
        while !data.is_empty() {
            let view = BatchView::parse_checked(data)
                .map_err(|e| format!("read at {next} served an invalid batch: {e}"))?;
            out.push((view.base_offset(), view.bytes()[8..].to_vec()));
            next = view.last_offset() + 1;
            data = &data[view.len()..];
        }
        if max_bytes < (1 << 20) {
            // A bounded read: one call is what a fetch would see.
            return Ok(out);
        }
    }
}

/// The last offset of the batch whose bytes after the base offset are `rest`.
fn last_offset(base: i64, rest: &[u8]) -> i64 {
    let mut full = base.to_be_bytes().to_vec();
    full.extend_from_slice(rest);
    BatchView::parse(&full)
        .expect("a whole batch")
        .last_offset()
}

fn run_one(seed: u64) -> Result<Totals, String> {
    let mut world = World::new(seed);
    let failure = match sluice_log::sim::catch(|| world.run()) {
        Ok(()) => return Ok(world.totals),
        Err(msg) => msg,
    };
    Err(format!(
        "simulation seed {seed} failed: {failure}\nevents:\n{}\nreproduce with: SLUICE_SIM_SEED={seed} cargo test -p sluice-log --test simulation",
        world.trace
    ))
}

#[test]
fn seeded_power_loss_scenarios_never_lose_acknowledged_data() {
    let seeds = sluice_log::sim::seeds_from_env(DEFAULT_SEEDS);
    let started = Instant::now();
    let totals = sluice_log::sim::run_seeds(&seeds, run_one, Totals::add)
        .unwrap_or_else(|msg| panic!("{msg}"));
    eprintln!(
        "{} scenarios in {:.1?}: {totals:?}",
        totals.scenarios,
        started.elapsed()
    );
    assert_eq!(totals.scenarios, seeds.len() as u64);
}

/// Found by the simulation: a sync round whose fdatasync returned after the partition had
/// failed (here: a roll's fdatasync of the same segment failed meanwhile) still published its
/// point, so the high watermark moved after the failure and data whose only proof of
/// durability was a sync that followed a failed one became readable and acknowledged.
#[test]
fn a_sync_round_that_ends_after_the_partition_failed_publishes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let committer = GroupCommitter::start(CommitConfig {
        policy: FlushPolicy::Always,
        sync_threads: 1,
    });
    let faults = DiskFaults::simulated(1);
    let config = LogConfig {
        segment_bytes: 1024,
        segment_ms: None,
        ..LogConfig::default()
    };
    let log = PartitionLog::open_with(
        dir.path(),
        config,
        &committer,
        Arc::new(ManualClock::new(T0)),
        faults.clone(),
    )
    .unwrap();
    log.append(&make_batch(1, 5, 100, T0))
        .unwrap()
        .wait_durable()
        .unwrap();
    let hw = log.high_watermark();

    // The round for the next append stalls inside its fdatasync.
    faults.hold_syncs();
    let stalled = log.append(&make_batch(2, 2, 100, T0)).unwrap();
    while faults.held_syncs() == 0 {
        std::thread::yield_now();
    }
    assert_eq!(log.segment_count(), 1);
    // Meanwhile an append rolls the segment, and the roll's fdatasync of it fails.
    faults.fail_sync_after(0, libc::EIO);
    let err = log.append(&make_batch(3, 2, 100, T0)).unwrap_err();
    assert!(matches!(err, LogError::Io { .. }), "{err}");
    // Now the stalled fdatasync returns success: it proves nothing.
    faults.release_syncs();
    committer.shutdown(); // finishes the round
    assert_eq!(
        log.high_watermark(),
        hw,
        "published after the partition failed"
    );
    assert!(!stalled.is_durable());
    assert!(matches!(
        stalled.wait_durable(),
        Err(LogError::Failed { .. })
    ));
    assert!(matches!(
        log.append(&make_batch(4, 1, 1, T0)),
        Err(LogError::Failed { .. })
    ));
}

/// Releases held syncs when dropped, so a failed assertion ends the test instead of leaving
/// the committer's thread waiting in a held sync (dropping the committer joins it).
struct ReleaseOnDrop(DiskFaults);

impl Drop for ReleaseOnDrop {
    fn drop(&mut self) {
        self.0.release_syncs();
    }
}

/// The other order: a sync round's fdatasync fails while a roll's fdatasync of the same segment
/// succeeds. The kernel reports a writeback error once, so the roll's success may only mean
/// that the round is about to take the error: what the roll synced is published only once the
/// round has ended well, and here it never is.
#[test]
fn a_roll_that_syncs_while_a_round_is_running_waits_for_the_round() {
    let dir = tempfile::tempdir().unwrap();
    let committer = GroupCommitter::start(CommitConfig {
        policy: FlushPolicy::Always,
        sync_threads: 1,
    });
    let faults = DiskFaults::simulated(2);
    let config = LogConfig {
        segment_bytes: 1024,
        segment_ms: None,
        ..LogConfig::default()
    };
    let log = PartitionLog::open_with(
        dir.path(),
        config,
        &committer,
        Arc::new(ManualClock::new(T0)),
        faults.clone(),
    )
    .unwrap();
    log.append(&make_batch(1, 5, 100, T0))
        .unwrap()
        .wait_durable()
        .unwrap();
    let hw = log.high_watermark();

    // The round for the next append stalls inside its fdatasync.
    faults.hold_syncs();
    let _release = ReleaseOnDrop(faults.clone());
    let stalled = log.append(&make_batch(2, 2, 100, T0)).unwrap();
    while faults.held_syncs() == 0 {
        std::thread::yield_now();
    }
    // Meanwhile an append rolls the segment; the roll's own syncs succeed.
    let rolled = log.append(&make_batch(3, 2, 100, T0)).unwrap();
    assert_eq!(log.segment_count(), 2);
    assert_eq!(
        log.high_watermark(),
        hw,
        "a roll published while a round of the same segment was running"
    );
    assert!(!stalled.is_durable());
    // The stalled round's fdatasync fails.
    faults.fail_sync_after(0, libc::EIO);
    faults.release_syncs();
    assert!(matches!(
        stalled.wait_durable(),
        Err(LogError::Failed { .. })
    ));
    assert!(matches!(
        rolled.wait_durable(),
        Err(LogError::Failed { .. })
    ));
    assert_eq!(log.high_watermark(), hw, "published after a failed round");
    committer.shutdown();
}

/// A round that ends well publishes what a roll synced meanwhile.
#[test]
fn a_roll_during_a_successful_round_is_published_when_the_round_ends() {
    let dir = tempfile::tempdir().unwrap();
    let committer = GroupCommitter::start(CommitConfig {
        policy: FlushPolicy::Always,
        sync_threads: 1,
    });
    let faults = DiskFaults::simulated(3);
    let config = LogConfig {
        segment_bytes: 1024,
        segment_ms: None,
        ..LogConfig::default()
    };
    let log = PartitionLog::open_with(
        dir.path(),
        config,
        &committer,
        Arc::new(ManualClock::new(T0)),
        faults.clone(),
    )
    .unwrap();
    log.append(&make_batch(1, 5, 100, T0))
        .unwrap()
        .wait_durable()
        .unwrap();
    faults.hold_syncs();
    let _release = ReleaseOnDrop(faults.clone());
    let stalled = log.append(&make_batch(2, 2, 100, T0)).unwrap();
    while faults.held_syncs() == 0 {
        std::thread::yield_now();
    }
    let rolled = log.append(&make_batch(3, 2, 100, T0)).unwrap();
    assert_eq!(log.segment_count(), 2);
    faults.release_syncs();
    stalled.wait_durable().unwrap();
    rolled.wait_durable().unwrap();
    assert_eq!(log.high_watermark(), rolled.last_offset + 1);
    committer.shutdown();
}
