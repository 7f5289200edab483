//! Deterministic simulation of the group store: seeded scenarios of offset commits, group
//! snapshots and deletions, compactions, injected disk faults and power losses, checked after
//! every recovery against what the store acknowledged.
//!
//! One scenario, from its seed: a group store with a low compaction threshold (so compactions,
//! and their renames, happen every few rounds) on a simulated disk (`DiskFaults::simulated`),
//! then a few boots of
//! 1. open (recovery must succeed whatever the power loss left) and check what it recovered;
//! 2. random steps: a handful of writes (offset commits of several groups and partitions, group
//!    snapshots, now and then a group deletion) whose `Pending`s are awaited, a write counting
//!    as acknowledged only once its `Pending` says durable; faults armed at a random operation
//!    (EIO on the Nth write, EIO on the Nth sync, ENOSPC after N bytes or N file creations,
//!    space back); now and then a clean close;
//! 3. writeback stalls (`hold_syncs`), a few more writes, a random number of the stalled syncs
//!    let through (so the power may fail between a round's fdatasync and a compaction's, or
//!    between a compaction's rename and its directory fsync), and the power fails
//!    (`power_loss`): unsynced writes are kept, dropped or torn, unsynced renames may be undone,
//!    unsynced directory entries may vanish.
//!
//! What may be recovered, per key (a group's snapshot, or one committed offset): the values
//! written to it, in write order, form its history (a group deletion writes "absent" to each of
//! its keys); the recovered value must be the latest acknowledged one or one written after it
//! (acknowledged or not: a write that was never acknowledged may or may not survive), never an
//! older one, and never anything that was not written (every value is unique and is compared
//! whole). What recovery returned is durable, so it becomes the next boot's baseline. While
//! running: once a write resolved to `Failed` (a failed write or sync), every later write
//! resolves to `Failed` too, so nothing after a failed fdatasync is acknowledged; a write
//! refused for want of space (`NoSpace`) leaves the store usable.
//!
//! Every scenario is deterministic for its seed: rounds run on the store's own sync thread, so
//! writes are fed while syncs are held, each write waiting until its round stalls in its
//! fdatasync or resolves; the writes after the first stalled one then form one round. Runs:
//! - `cargo test -p sluice-groups --test simulation`: seeds 0..1000;
//! - `SLUICE_SIM_SEEDS=100000 cargo test -p sluice-groups --release --test simulation`: more;
//! - `SLUICE_SIM_SEED=12345 cargo test -p sluice-groups --test simulation`: one seed, exactly.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::PathBuf;
use std::time::Instant;

use futures::FutureExt;
use serde_json::json;
use sluice_groups::store::{Pending, Recovered};
use sluice_groups::{CommittedOffset, GroupRecord, GroupStore, StoreError, StoreOptions};
use sluice_log::{DiskFaults, PowerLoss, SplitMix64};

const DEFAULT_SEEDS: u64 = 1000;
const T0: i64 = 1_700_000_000_000;
const GROUPS: u64 = 3;
const TOPICS: u64 = 2;
const PARTITIONS: u64 = 3;

/// Totals over a run, printed at the end (`--nocapture`).
#[derive(Debug, Default, Clone, Copy)]
struct Totals {
    scenarios: u64,
    power_losses: u64,
    clean_closes: u64,
    writes_acked: u64,
    writes_no_space: u64,
    writes_failed: u64,
    stores_failed: u64,
    compactions: u64,
    writes_kept: u64,
    writes_dropped: u64,
    writes_torn: u64,
    renames_undone: u64,
    files_vanished: u64,
    tails_truncated: u64,
    recovered_unacked_values: u64,
}

impl Totals {
    fn add(&mut self, o: &Totals) {
        self.scenarios += o.scenarios;
        self.power_losses += o.power_losses;
        self.clean_closes += o.clean_closes;
        self.writes_acked += o.writes_acked;
        self.writes_no_space += o.writes_no_space;
        self.writes_failed += o.writes_failed;
        self.stores_failed += o.stores_failed;
        self.compactions += o.compactions;
        self.writes_kept += o.writes_kept;
        self.writes_dropped += o.writes_dropped;
        self.writes_torn += o.writes_torn;
        self.renames_undone += o.renames_undone;
        self.files_vanished += o.files_vanished;
        self.tails_truncated += o.tails_truncated;
        self.recovered_unacked_values += o.recovered_unacked_values;
    }

    fn power_loss(&mut self, p: &PowerLoss) {
        self.power_losses += 1;
        self.writes_kept += p.writes_kept as u64;
        self.writes_dropped += p.writes_dropped as u64;
        self.writes_torn += p.writes_torn as u64;
        self.renames_undone += p.renames_undone as u64;
        self.files_vanished += p.files_vanished as u64;
    }
}

/// What the store holds a value for.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
enum Key {
    Snapshot(String),
    Offset(String, String, i32),
}

impl Key {
    fn group(&self) -> &str {
        match self {
            Key::Snapshot(g) | Key::Offset(g, _, _) => g,
        }
    }
}

/// The values written to one key, oldest first (`None`: absent), and the index of the latest
/// acknowledged one. Every value id is unique in a scenario.
#[derive(Debug, Clone)]
struct History {
    values: Vec<Option<u64>>,
    acked: usize,
}

impl Default for History {
    /// A key never written is known to be absent.
    fn default() -> Self {
        History {
            values: vec![None],
            acked: 0,
        }
    }
}

/// The committed offset written with value id `id` (every field derived from it, so a value
/// is compared whole).
fn offset_value(id: u64) -> CommittedOffset {
    CommittedOffset {
        offset: id as i64,
        leader_epoch: (id % 7) as i32 - 1,
        metadata: (!id.is_multiple_of(3)).then(|| format!("m{id}")),
        commit_timestamp_ms: T0 + id as i64,
    }
}

fn snapshot_value(id: u64) -> serde_json::Value {
    json!({ "id": id, "members": ["a", "b"] })
}

type Check<T = ()> = Result<T, String>;

macro_rules! ensure {
    ($cond:expr, $($msg:tt)+) => {
        if !$cond {
            return Err(format!($($msg)+));
        }
    };
}

/// A write whose `Pending` is being waited for, with what it wrote: (key, index in the key's
/// history).
struct InFlight {
    pending: Pending,
    result: Option<Result<(), StoreError>>,
    wrote: Vec<(Key, usize)>,
    label: String,
}

impl InFlight {
    /// Whether it has resolved (without blocking).
    fn poll(&mut self) -> bool {
        if self.result.is_none() {
            self.result = (&mut self.pending).now_or_never();
        }
        self.result.is_some()
    }

    fn wait(&mut self) -> &Result<(), StoreError> {
        if self.result.is_none() {
            self.result = Some(futures::executor::block_on(&mut self.pending));
        }
        self.result.as_ref().expect("resolved")
    }
}

/// One scenario's world. Dropping it cuts the power first, so that a held round fails instead
/// of keeping the store's close waiting (a failing check can leave syncs held).
struct World {
    rng: SplitMix64,
    dir: PathBuf,
    _tmp: tempfile::TempDir,
    compact_min_bytes: u64,
    model: BTreeMap<Key, History>,
    next_id: u64,
    totals: Totals,
    /// Events so far, printed with a failure.
    trace: String,
    faults: DiskFaults,
    store: Option<GroupStore>,
    /// Set once a write resolved to `Failed`: every later one must too.
    failed: bool,
    /// A fault was armed in this boot.
    faults_armed: bool,
}

impl Drop for World {
    fn drop(&mut self) {
        let _ = self.faults.power_loss(0);
        self.faults.release_syncs();
        drop(self.store.take());
    }
}

impl World {
    fn new(seed: u64) -> World {
        let mut rng = SplitMix64::new(seed);
        let tmp = tempfile::tempdir().expect("tempdir");
        let dir = tmp.path().join("data");
        let compact_min_bytes = 256 + rng.below(2048);
        World {
            rng,
            dir,
            _tmp: tmp,
            compact_min_bytes,
            model: BTreeMap::new(),
            next_id: 1,
            totals: Totals::default(),
            trace: String::new(),
            faults: DiskFaults::none(),
            store: None,
            failed: false,
            faults_armed: false,
        }
    }

    fn note(&mut self, event: impl std::fmt::Display) {
        let _ = writeln!(self.trace, "  {event}");
    }

    fn range(&mut self, lo: u64, hi_inclusive: u64) -> u64 {
        lo + self.rng.below(hi_inclusive - lo + 1)
    }

    fn store(&self) -> &GroupStore {
        self.store.as_ref().expect("store open")
    }

    fn run(&mut self) -> Check {
        self.totals.scenarios = 1;
        let _ = writeln!(self.trace, "  compact_min_bytes {}", self.compact_min_bytes);
        let boots = self.range(1, 3);
        for boot in 0..boots {
            self.open(boot)?;
            let steps = self.range(0, 24);
            let mut closed = false;
            for _ in 0..steps {
                match self.rng.below(20) {
                    0..=13 => self.write_step()?,
                    14..=18 => self.arm_fault(),
                    _ => {
                        self.clean_close()?;
                        closed = true;
                        break;
                    }
                }
            }
            if !closed {
                self.unacked_tail()?;
            }
            self.power_loss()?;
        }
        self.open(boots)?;
        self.store.take().expect("store").close();
        Ok(())
    }

    /// Opens the store on a fresh simulated disk (a new boot) and checks what it recovered.
    fn open(&mut self, boot: u64) -> Check {
        self.faults = DiskFaults::simulated(self.rng.next_u64());
        self.failed = false;
        self.faults_armed = false;
        let options = StoreOptions {
            faults: self.faults.clone(),
            compact_min_bytes: self.compact_min_bytes,
            ..StoreOptions::default()
        };
        let (store, recovered) = GroupStore::open_with_options(&self.dir, None, options)
            .map_err(|e| format!("open (boot {boot}) failed: {e}"))?;
        self.note(format_args!(
            "open (boot {boot}): {} groups, {} offsets, truncated {} bytes, compactions {}",
            recovered.groups.len(),
            recovered.offsets.values().map(|o| o.len()).sum::<usize>(),
            recovered.truncated_bytes,
            store.compactions()
        ));
        self.totals.compactions += store.compactions();
        if recovered.truncated_bytes > 0 {
            self.totals.tails_truncated += 1;
        }
        self.store = Some(store);
        self.check_recovered(&recovered)
    }

    fn check_recovered(&mut self, recovered: &Recovered) -> Check {
        // What recovery returned, by key, as value ids.
        let mut found: BTreeMap<Key, u64> = BTreeMap::new();
        for (group, snapshot) in &recovered.groups {
            let id = snapshot["id"].as_u64().ok_or_else(|| {
                format!("recovered snapshot of {group} was never written: {snapshot}")
            })?;
            ensure!(
                *snapshot == snapshot_value(id),
                "recovered snapshot of {group} was never written: {snapshot}"
            );
            found.insert(Key::Snapshot(group.clone()), id);
        }
        for (group, offsets) in &recovered.offsets {
            for ((topic, partition), offset) in offsets {
                let id = offset.offset as u64;
                ensure!(
                    *offset == offset_value(id),
                    "recovered offset of {group}/{topic}/{partition} was never written: {offset:?}"
                );
                found.insert(Key::Offset(group.clone(), topic.clone(), *partition), id);
            }
        }
        for key in found.keys() {
            ensure!(
                self.model.contains_key(key),
                "recovered {key:?}, which was never written"
            );
        }
        let mut unacked = 0;
        for (key, history) in &mut self.model {
            let got = found.get(key).copied();
            let latest = history.values.iter().rposition(|v| *v == got);
            let Some(at) = latest else {
                return Err(format!(
                    "recovered {key:?} = {got:?}, never written (history {:?})",
                    history.values
                ));
            };
            ensure!(
                at >= history.acked,
                "recovered {key:?} = {got:?}, older than the acknowledged {:?} (history {:?}, acknowledged index {})",
                history.values[history.acked],
                history.values,
                history.acked
            );
            if at > history.acked {
                unacked += 1;
            }
            // Recovered state is durable: the next boot starts from it.
            *history = History {
                values: vec![got],
                acked: 0,
            };
        }
        self.totals.recovered_unacked_values += unacked;
        Ok(())
    }

    /// A random write: an OffsetCommit of a few partitions, a group snapshot (alone or with
    /// offsets, as a rebalance writes it), or a group deletion. Adds its values to the model.
    fn random_write(&mut self) -> (Vec<GroupRecord>, Vec<(Key, usize)>, String) {
        let group = format!("g{}", self.rng.below(GROUPS));
        let mut records = Vec::new();
        let mut keys = Vec::new();
        let mut ids: Vec<(Key, u64)> = Vec::new();
        let label;
        match self.rng.below(20) {
            0 => {
                // Deletion: every key of the group becomes absent.
                label = format!("delete {group}");
                records.push(GroupRecord::Group {
                    group: group.clone(),
                    snapshot: None,
                });
                for (key, history) in &mut self.model {
                    if key.group() == group {
                        history.values.push(None);
                        keys.push((key.clone(), history.values.len() - 1));
                    }
                }
                return (records, keys, label);
            }
            1..=3 => {
                let id = self.next_id;
                self.next_id += 1;
                label = format!("snapshot {group}={id}");
                records.push(GroupRecord::Group {
                    group: group.clone(),
                    snapshot: Some(snapshot_value(id)),
                });
                ids.push((Key::Snapshot(group.clone()), id));
            }
            _ => label = format!("commit {group}"),
        }
        let n = self.range(1, 3);
        for _ in 0..n {
            let topic = format!("t{}", self.rng.below(TOPICS));
            let partition = self.rng.below(PARTITIONS) as i32;
            let id = self.next_id;
            self.next_id += 1;
            records.push(GroupRecord::Offset {
                group: group.clone(),
                topic: topic.clone(),
                partition,
                offset: Some(offset_value(id)),
            });
            ids.push((Key::Offset(group.clone(), topic, partition), id));
        }
        // Ids to history indexes.
        let keys = ids
            .into_iter()
            .map(|(key, id)| {
                let history = self.model.entry(key.clone()).or_default();
                history.values.push(Some(id));
                (key, history.values.len() - 1)
            })
            .collect();
        (records, keys, label)
    }

    /// Queues one random write (an empty one, a barrier, if `barrier`).
    fn queue(&mut self, barrier: bool) -> InFlight {
        let (records, wrote, label) = if barrier {
            (Vec::new(), Vec::new(), "barrier".to_owned())
        } else {
            self.random_write()
        };
        let pending = self.store().write(records);
        InFlight {
            pending,
            result: None,
            wrote,
            label,
        }
    }

    /// Queues `n` writes while syncs are held, each waiting until its round stalls in its
    /// fdatasync or it resolves: so which writes share a round is the same on every run.
    fn feed(&mut self, n: u64) -> Vec<InFlight> {
        self.faults.hold_syncs();
        let mut writes = Vec::new();
        let mut stalled = false;
        for _ in 0..n {
            let mut w = self.queue(false);
            while !stalled && !w.poll() {
                stalled = self.faults.held_syncs() > 0;
                std::thread::yield_now();
            }
            writes.push(w);
        }
        writes
    }

    /// What a resolved write tells the model.
    fn settle(&mut self, w: &mut InFlight) -> Check {
        let label = w.label.clone();
        match w.wait() {
            Ok(()) => {
                ensure!(
                    !self.failed,
                    "{label} acknowledged after an earlier write failed"
                );
                for (key, at) in &w.wrote {
                    let history = self.model.get_mut(key).expect("written key");
                    history.acked = history.acked.max(*at);
                }
                self.totals.writes_acked += 1;
                self.note(format_args!("{label}: durable"));
            }
            Err(StoreError::NoSpace(_)) => {
                ensure!(!self.failed, "{label}: NoSpace from a failed store");
                self.totals.writes_no_space += 1;
                self.note(format_args!("{label}: no space"));
            }
            Err(StoreError::Failed(reason)) => {
                let reason = reason.clone();
                if !self.failed {
                    self.failed = true;
                    self.totals.stores_failed += 1;
                }
                self.totals.writes_failed += 1;
                self.note(format_args!("{label}: failed ({reason})"));
            }
            Err(e) => return Err(format!("{label}: unexpected error {e}")),
        }
        Ok(())
    }

    fn write_step(&mut self) -> Check {
        let n = self.range(1, 4);
        let mut writes = self.feed(n);
        self.faults.release_syncs();
        for w in &mut writes {
            self.settle(w)?;
        }
        // A barrier queued now is a round of its own, after the last one (and its compaction)
        // ended: the store is idle when it resolves.
        self.queue(true).wait();
        Ok(())
    }

    fn arm_fault(&mut self) {
        self.faults_armed = true;
        match self.rng.below(6) {
            0 => {
                let n = self.rng.below(6);
                self.faults.fail_write_after(n, libc::EIO);
                self.note(format_args!("armed: EIO on write {n} from now"));
            }
            1 | 2 => {
                let n = self.rng.below(8);
                self.faults.fail_sync_after(n, libc::EIO);
                self.note(format_args!("armed: EIO on sync {n} from now"));
            }
            3 => {
                let room = self.rng.below(2000);
                self.faults.fill_after(room);
                self.note(format_args!("armed: ENOSPC after {room} bytes"));
            }
            4 => {
                let n = self.rng.below(3) as u32;
                self.faults.fail_creates_after(n);
                self.note(format_args!("armed: ENOSPC on file creation {n} from now"));
            }
            _ => {
                self.faults.free();
                self.note("space freed");
            }
        }
    }

    /// Closes the store: everything queued resolves first.
    fn clean_close(&mut self) -> Check {
        self.store().close();
        ensure!(
            matches!(
                self.store().write(Vec::new()).now_or_never(),
                Some(Err(StoreError::Failed(_)))
            ),
            "a closed store took a write"
        );
        self.totals.compactions += self.store().compactions();
        self.note("clean close");
        self.totals.clean_closes += 1;
        Ok(())
    }

    /// Writeback stalls with a few writes in flight; some of the stalled syncs go on (a round's
    /// fdatasync, a compaction's), then nothing moves until the power fails.
    fn unacked_tail(&mut self) -> Check {
        let n = self.rng.below(5);
        let mut writes = self.feed(n);
        let through = self.rng.below(5);
        self.faults.let_syncs_through(through);
        // Until a sync is held with none left to let through, or everything (a barrier queued
        // once the writes resolved, so after their round's compaction) resolved.
        let mut barrier: Option<InFlight> = None;
        loop {
            if self.faults.held_syncs() > 0 && self.faults.syncs_to_let_through() == 0 {
                break;
            }
            match &mut barrier {
                Some(b) => {
                    if b.poll() {
                        break;
                    }
                }
                None => {
                    if writes.iter_mut().all(|w| w.poll()) {
                        barrier = Some(self.queue(true));
                    }
                }
            }
            std::thread::yield_now();
        }
        self.note(format_args!(
            "tail: {n} writes, {through} syncs let through"
        ));
        // Writes already resolved count; the rest never will be acknowledged.
        for w in &mut writes {
            if w.poll() {
                self.settle(w)?;
            }
        }
        Ok(())
    }

    fn power_loss(&mut self) -> Check {
        let seed = self.rng.next_u64();
        let report = self
            .faults
            .power_loss(seed)
            .map_err(|e| format!("power loss: {e}"))?;
        self.note(format_args!("power loss: {report:?}"));
        self.totals.power_loss(&report);
        // Held rounds now fail; the store closes without touching the disk.
        if let Some(store) = self.store.take() {
            self.totals.compactions += store.compactions();
            store.close();
        }
        Ok(())
    }
}

fn run_one(seed: u64) -> Result<Totals, String> {
    let mut world = World::new(seed);
    let failure = match sluice_log::sim::catch(|| world.run()) {
        Ok(()) => return Ok(world.totals),
        Err(msg) => msg,
    };
    Err(format!(
        "group store simulation seed {seed} failed: {failure}\nevents:\n{}\nreproduce with: SLUICE_SIM_SEED={seed} cargo test -p sluice-groups --test simulation",
        world.trace
    ))
}

fn run_seeds(seeds: &[u64]) -> Totals {
    let started = Instant::now();
    let totals = sluice_log::sim::run_seeds(seeds, run_one, Totals::add)
        .unwrap_or_else(|msg| panic!("{msg}"));
    eprintln!(
        "{} scenarios in {:.1?}: {totals:?}",
        totals.scenarios,
        started.elapsed()
    );
    assert_eq!(totals.scenarios, seeds.len() as u64);
    totals
}

#[test]
fn seeded_power_loss_scenarios_never_lose_acknowledged_commits() {
    let seeds = sluice_log::sim::seeds_from_env(DEFAULT_SEEDS);
    let totals = run_seeds(&seeds);
    if seeds.len() as u64 >= DEFAULT_SEEDS {
        // The scenarios reach what they are for.
        assert!(
            totals.compactions > 0 && totals.renames_undone > 0,
            "{totals:?}"
        );
        assert!(
            totals.stores_failed > 0 && totals.writes_no_space > 0,
            "{totals:?}"
        );
        assert!(
            totals.writes_torn > 0 && totals.tails_truncated > 0,
            "{totals:?}"
        );
    }
}
