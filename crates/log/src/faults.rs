//! Injected disk faults: the seam through which tests make the log's writes, file creations and
//! fdatasyncs fail the way a real disk does, without filling a real one, and through which a
//! simulation cuts the power.
//!
//! A [`DiskFaults`] is passed to [`crate::PartitionLog::open_with`]; the log tells it about
//! every segment write, index write, truncation, file creation, fdatasync/fsync and directory
//! fsync, naming the file (and, for a write, the position and the bytes). [`DiskFaults::none`]
//! (what [`crate::PartitionLog::open`] uses) holds nothing and costs one branch per call: the
//! real I/O then runs exactly as without the seam.
//!
//! The seam's methods ([`DiskFaults::write`], [`DiskFaults::truncated`], [`DiskFaults::create`],
//! [`DiskFaults::rename`], [`DiskFaults::remove`], [`DiskFaults::sync`],
//! [`DiskFaults::sync_dir`]) are public so that
//! other file layers of the data directory (the consumer-group store in `sluice-groups`) can be
//! routed through the same plan as the partition logs.
//!
//! ## A full disk
//! [`DiskFaults::fill_after`] gives the disk a number of bytes of room left. A write that fits
//! takes its bytes from it; a write that does not fit writes the part that fits (as `write(2)`
//! does, returning a short count) and then fails with ENOSPC; once no room is left, creating
//! files fails with ENOSPC too. Cutting a file back does not give room back (the tests free
//! space explicitly with [`DiskFaults::free`]).
//!
//! ## Failing writes and syncs
//! [`DiskFaults::fail_syncs`] fails every sync from now on; [`DiskFaults::fail_write_after`] and
//! [`DiskFaults::fail_sync_after`] fail one chosen operation (the Nth write, the Nth sync,
//! counted from the call), after which the disk works again: a log must still never retry a
//! failed sync. A failed write may first write a prefix of its bytes (chosen by the plan's
//! seeded generator), as a real one can.
//!
//! ## Power loss ([`DiskFaults::simulated`])
//! A simulated plan also keeps, per file, the bytes as of its last successful sync (the
//! *durable image*) and every write and truncation since, in order, with its bytes. Syncs then
//! skip the real fdatasync (the model decides what is durable), so scenarios run at memory
//! speed. [`DiskFaults::power_loss`], called once the log has been abandoned, rewrites each file
//! as a disk could have left it: the durable image, then each later write kept, dropped (the
//! range stays what it was, or reads as zeros past the old end), or torn (a prefix ending at an
//! arbitrary byte, sometimes followed by garbage), each chosen on its own by a seeded generator,
//! so a later write can survive an earlier one that did not (writeback does not keep order).
//! Truncations since the last sync are kept or dropped the same way. A file created since its
//! directory's last fsync may vanish altogether. After a failed sync of a file, no later sync
//! makes anything of that file durable until the next boot (the kernel may have dropped the dirty
//! pages and cleared the error: "fsyncgate"). What the model does not do: resurrect a file
//! unlinked since the last directory fsync (every unlink in the log is followed by a directory
//! fsync before anything depends on it), or lose metadata a sync did cover.
//!
//! A rename ([`DiskFaults::rename`], within one directory) is durable only once that directory
//! is fsynced. Before that, a power loss may undo it: the file is back under its old name (its
//! entry may still vanish if that was never synced either), and the name it replaced holds the
//! replaced file again (or is gone, if it named nothing). Each unsynced rename is kept or undone
//! on its own. Not modelled: a rename of a file that was itself renamed since the last
//! directory fsync (only the last rename can be undone), and undoing a rename whose old name
//! has been created again since (the later creation implies the rename reached the journal).
//!
//! [`DiskFaults::hold_syncs`] makes writeback stall: syncs asked for by other threads (the
//! group-commit threads) wait until the power fails, while the holding thread's own syncs (a
//! roll's seal) go through; [`DiskFaults::let_syncs_through`] lets a given number of them go on
//! while the rest stay held. That is how a simulation leaves appends deterministically unsynced
//! at the moment of the power loss. After a power loss the plan is dead: every later operation
//! through it fails with EIO and touches nothing, so an abandoned log cannot write into the
//! files the model has just rewritten.

use std::collections::BTreeMap;
use std::fs;
use std::io::{self, IoSlice};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};
use std::thread::ThreadId;

/// Faults to inject into one log's disk I/O (see the module doc). Cheap to clone; clones share
/// the plan.
#[derive(Debug, Clone, Default)]
pub struct DiskFaults(Option<Arc<Shared>>);

#[derive(Debug, Default)]
struct Shared {
    plan: Mutex<Plan>,
    /// Signalled when held syncs may go on (released, or the power failed).
    released: Condvar,
}

#[derive(Debug, Default)]
struct Plan {
    /// Bytes writes may still add before they fail with ENOSPC; `None`: unlimited.
    room_bytes: Option<u64>,
    /// File creations that may still succeed before they fail with ENOSPC; `None`: unlimited.
    creates_left: Option<u32>,
    /// The errno every fdatasync and fsync fails with, from now on.
    sync_errno: Option<i32>,
    /// One write fails: `(writes to let through first, errno)`.
    write_fault: Option<(u64, i32)>,
    /// One sync (of a file or a directory) fails: `(syncs to let through first, errno)`.
    sync_fault: Option<(u64, i32)>,
    /// Chooses how much of a failing write lands.
    rng: SplitMix64,
    /// The power-loss model; `None` unless made with [`DiskFaults::simulated`].
    sim: Option<Sim>,
}

/// What a simulated plan knows of the files (see the module doc, "Power loss").
#[derive(Debug, Default)]
struct Sim {
    files: BTreeMap<PathBuf, FileModel>,
    /// Syncs from threads other than this one wait (writeback stalls).
    held_by: Option<ThreadId>,
    /// Syncs waiting because of `held_by`.
    waiting: usize,
    /// Held syncs that may still go on (see [`DiskFaults::let_syncs_through`]).
    passes: u64,
    /// The power failed: every operation fails and touches nothing.
    dead: bool,
}

#[derive(Debug, Default)]
struct FileModel {
    /// The file's bytes as of its last successful sync (or when the model first saw it).
    durable: Vec<u8>,
    /// Writes and truncations since then, oldest first.
    pending: Vec<Pending>,
    /// Created since its directory was last fsynced: the entry itself may vanish.
    entry_unsynced: bool,
    /// A sync of this file failed: the kernel may have dropped its dirty pages and cleared the
    /// error, so no later sync in this boot makes anything of it durable ("fsyncgate").
    sync_failed: bool,
    /// Renamed to its current name since its directory was last fsynced: the rename may be
    /// undone by a power loss.
    renamed: Option<Box<Renamed>>,
}

/// An unsynced rename, enough to undo it.
#[derive(Debug)]
struct Renamed {
    /// The name the file had before.
    from: PathBuf,
    /// Whether the entry under `from` had been fsynced in its directory.
    from_entry_unsynced: bool,
    /// The file the rename replaced, if the new name named one.
    replaced: Option<FileModel>,
}

#[derive(Debug)]
enum Pending {
    Write { pos: u64, data: Vec<u8> },
    SetLen(u64),
}

impl Pending {
    fn apply(&self, image: &mut Vec<u8>) {
        match self {
            Pending::Write { pos, data } => write_into(image, *pos, data),
            Pending::SetLen(len) => image.resize(*len as usize, 0),
        }
    }
}

fn write_into(image: &mut Vec<u8>, pos: u64, data: &[u8]) {
    let pos = pos as usize;
    if image.len() < pos + data.len() {
        image.resize(pos + data.len(), 0);
    }
    image[pos..pos + data.len()].copy_from_slice(data);
}

/// What [`DiskFaults::power_loss`] did to the files.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PowerLoss {
    /// Files that had unsynced writes or truncations, or an unsynced directory entry.
    pub files_at_risk: usize,
    /// Files whose directory entry vanished.
    pub files_vanished: usize,
    pub writes_kept: usize,
    pub writes_dropped: usize,
    pub writes_torn: usize,
    pub truncations_kept: usize,
    pub truncations_dropped: usize,
    /// Renames since the last directory fsync that the power loss undid.
    pub renames_undone: usize,
}

/// How much of a write the plan lets through ([`DiskFaults::write`]).
#[derive(Debug)]
pub enum Allowance {
    /// All of it.
    All,
    /// Only the first `bytes`, then the write fails with `error`.
    Partial { bytes: u64, error: io::Error },
}

fn eio() -> io::Error {
    io::Error::from_raw_os_error(libc::EIO)
}

impl DiskFaults {
    /// No faults, ever (what a production log uses).
    pub fn none() -> DiskFaults {
        DiskFaults(None)
    }

    /// A plan with no faults yet; arm it with the methods below. Syncs are real.
    pub fn new() -> DiskFaults {
        DiskFaults(Some(Arc::new(Shared::default())))
    }

    /// A plan with the power-loss model (see the module doc): it records every write since each
    /// file's last sync, syncs skip the real fdatasync, and [`DiskFaults::power_loss`] applies
    /// a crash. `seed` drives the plan's own choices (how much of a failing write lands).
    pub fn simulated(seed: u64) -> DiskFaults {
        let faults = DiskFaults::new();
        faults.with(|p| {
            p.rng = SplitMix64::new(seed);
            p.sim = Some(Sim::default());
        });
        faults
    }

    /// The disk has room for `bytes` more bytes of writes; after that, writes fail with
    /// ENOSPC (the one that crosses the limit writes what fits first) and so do file creations.
    pub fn fill_after(&self, bytes: u64) {
        self.with(|p| p.room_bytes = Some(bytes));
    }

    /// `n` more files may be created; after that, creations fail with ENOSPC (a directory
    /// or inode table that is full while data blocks are not).
    pub fn fail_creates_after(&self, n: u32) {
        self.with(|p| p.creates_left = Some(n));
    }

    /// Space is back: writes and creations succeed again.
    pub fn free(&self) {
        self.with(|p| {
            p.room_bytes = None;
            p.creates_left = None;
        });
    }

    /// Every fdatasync and fsync fails with `errno` from now on (e.g. `libc::EIO`).
    pub fn fail_syncs(&self, errno: i32) {
        self.with(|p| p.sync_errno = Some(errno));
    }

    /// fdatasyncs and fsyncs succeed again (a log that saw one fail must still never retry it).
    pub fn heal_syncs(&self) {
        self.with(|p| p.sync_errno = None);
    }

    /// After `n` more writes (segment or index) succeed, the next one fails with `errno`,
    /// having written a prefix of its bytes first (any length, from nothing to all but one
    /// byte); later writes succeed again.
    pub fn fail_write_after(&self, n: u64, errno: i32) {
        self.with(|p| p.write_fault = Some((n, errno)));
    }

    /// After `n` more syncs (fdatasync or fsync of a file or a directory) succeed, the next one
    /// fails with `errno`; later ones succeed again.
    pub fn fail_sync_after(&self, n: u64, errno: i32) {
        self.with(|p| p.sync_fault = Some((n, errno)));
    }

    /// Writeback stalls: from now on, syncs asked for by any thread but the caller wait until
    /// [`DiskFaults::release_syncs`] or the power fails (then they fail with EIO). The caller's
    /// own syncs go through. Simulated plans only.
    pub fn hold_syncs(&self) {
        let me = std::thread::current().id();
        self.with(|p| {
            if let Some(sim) = &mut p.sim {
                sim.held_by = Some(me);
            }
        });
    }

    /// How many syncs are waiting because of [`DiskFaults::hold_syncs`].
    pub fn held_syncs(&self) -> usize {
        self.with(|p| p.sim.as_ref().map_or(0, |s| s.waiting))
            .unwrap_or(0)
    }

    /// While syncs are held, the next `n` of them (waiting now or asked for later) go on
    /// anyway, in the order they get the plan's lock; the rest stay held. A simulation uses it
    /// to stop writeback at a chosen sync (say, a compaction's directory fsync).
    pub fn let_syncs_through(&self, n: u64) {
        self.with(|p| {
            if let Some(sim) = &mut p.sim {
                sim.passes = n;
            }
        });
        if let Some(shared) = &self.0 {
            shared.released.notify_all();
        }
    }

    /// How many of the syncs allowed by [`DiskFaults::let_syncs_through`] have not gone on yet.
    pub fn syncs_to_let_through(&self) -> u64 {
        self.with(|p| p.sim.as_ref().map_or(0, |s| s.passes))
            .unwrap_or(0)
    }

    /// Held syncs go on.
    pub fn release_syncs(&self) {
        self.with(|p| {
            if let Some(sim) = &mut p.sim {
                sim.held_by = None;
            }
        });
        if let Some(shared) = &self.0 {
            shared.released.notify_all();
        }
    }

    /// Cuts the power: every later operation through this plan fails with EIO without touching
    /// the disk, held syncs fail, and each file the plan saw is rewritten as the disk could
    /// have left it (see the module doc), choices drawn from `seed`. Call it once the log is
    /// dropped or abandoned, and open the next log with a new plan. Simulated plans only.
    pub fn power_loss(&self, seed: u64) -> io::Result<PowerLoss> {
        let Some(shared) = &self.0 else {
            return Err(io::Error::other("power_loss needs DiskFaults::simulated"));
        };
        let files = {
            let mut plan = shared.lock();
            let Some(sim) = &mut plan.sim else {
                return Err(io::Error::other("power_loss needs DiskFaults::simulated"));
            };
            sim.dead = true;
            std::mem::take(&mut sim.files)
        };
        shared.released.notify_all();
        let mut rng = SplitMix64::new(seed);
        // How likely each unsynced write is to survive whole, per power loss: sometimes none,
        // sometimes all, mostly a mix.
        let keep_percent = [0, 25, 50, 75, 100][rng.below(5) as usize];
        let mut report = PowerLoss::default();
        let names: Vec<PathBuf> = files.keys().cloned().collect();
        for (path, mut file) in files {
            let at_risk = !file.pending.is_empty() || file.entry_unsynced || file.renamed.is_some();
            // Unlinked since: unlinks are durable at once in this model.
            if !at_risk || fs::symlink_metadata(&path).is_err() {
                continue;
            }
            report.files_at_risk += 1;
            let undo = file
                .renamed
                .take()
                .filter(|r| !names.contains(&r.from) && rng.below(2) == 0);
            let Some(renamed) = undo else {
                match settle(file, &mut rng, keep_percent, &mut report) {
                    Some(image) => fs::write(&path, &image)?,
                    None => fs::remove_file(&path)?,
                }
                continue;
            };
            // The rename never reached the disk: the old name holds this file, the new name
            // what it held before.
            report.renames_undone += 1;
            let Renamed {
                from,
                from_entry_unsynced,
                replaced,
            } = *renamed;
            file.entry_unsynced = from_entry_unsynced;
            if let Some(image) = settle(file, &mut rng, keep_percent, &mut report) {
                fs::write(&from, &image)?;
            }
            match replaced.and_then(|r| settle(r, &mut rng, keep_percent, &mut report)) {
                Some(image) => fs::write(&path, &image)?,
                None => fs::remove_file(&path)?,
            }
        }
        Ok(report)
    }

    fn with<T>(&self, f: impl FnOnce(&mut Plan) -> T) -> Option<T> {
        let shared = self.0.as_ref()?;
        Some(f(&mut shared.lock()))
    }

    /// Whether this is [`DiskFaults::none`] (callers skip work only the seam needs).
    pub fn is_none(&self) -> bool {
        self.0.is_none()
    }

    /// Asks to write `parts` at `pos` of `path`: how much of it may land. In a simulated plan the
    /// bytes allowed are recorded as unsynced. The caller writes that much and, on
    /// [`Allowance::Partial`], then fails with the error given.
    pub fn write(&self, path: &Path, pos: u64, parts: &[IoSlice<'_>]) -> Allowance {
        let Some(shared) = &self.0 else {
            return Allowance::All;
        };
        shared.lock().write(path, pos, parts)
    }

    /// Reports that `path` was cut (or extended) to `len` bytes (after the real `set_len`).
    pub fn truncated(&self, path: &Path, len: u64) {
        self.with(|p| {
            if let Some(sim) = &mut p.sim
                && !sim.dead
            {
                sim.track(path).pending.push(Pending::SetLen(len));
            }
        });
    }

    /// Whether the file `path` may be created now (it is, right after).
    pub fn create(&self, path: &Path) -> io::Result<()> {
        let Some(shared) = &self.0 else {
            return Ok(());
        };
        let mut plan = shared.lock();
        if plan.sim.as_ref().is_some_and(|s| s.dead) {
            return Err(eio());
        }
        let allowed = {
            if plan.room_bytes == Some(0) {
                false
            } else {
                match &mut plan.creates_left {
                    None => true,
                    Some(0) => false,
                    Some(n) => {
                        *n -= 1;
                        true
                    }
                }
            }
        };
        if !allowed {
            return Err(io::Error::from_raw_os_error(libc::ENOSPC));
        }
        if let Some(sim) = &mut plan.sim {
            sim.creating(path);
        }
        Ok(())
    }

    /// Reports that `path` is about to be created by a path that never fails for want of space
    /// in this model (the clean-shutdown marker).
    pub fn creating(&self, path: &Path) {
        self.with(|p| {
            if let Some(sim) = &mut p.sim {
                sim.creating(path);
            }
        });
    }

    /// Renames `from` to `to` (in the same directory) with `real`, which must do exactly that.
    /// A simulated plan remembers the rename until the directory is fsynced: a power loss
    /// before that may undo it (see the module doc). After a power loss it fails with EIO and
    /// renames nothing.
    pub fn rename(
        &self,
        from: &Path,
        to: &Path,
        real: impl FnOnce() -> io::Result<()>,
    ) -> io::Result<()> {
        let Some(shared) = &self.0 else {
            return real();
        };
        let mut plan = shared.lock();
        let Some(sim) = &mut plan.sim else {
            drop(plan);
            return real();
        };
        if sim.dead {
            return Err(eio());
        }
        // Both files as they are before the rename (a file the model has not seen yet is
        // taken as durable).
        let replaced = match sim.files.remove(to) {
            Some(model) => Some(model),
            None => fs::symlink_metadata(to).is_ok().then(|| FileModel {
                durable: fs::read(to).unwrap_or_default(),
                ..FileModel::default()
            }),
        };
        let mut moving = match sim.files.remove(from) {
            Some(model) => model,
            None => FileModel {
                durable: fs::read(from).unwrap_or_default(),
                ..FileModel::default()
            },
        };
        if let Err(e) = real() {
            sim.files.insert(from.to_path_buf(), moving);
            if let Some(model) = replaced {
                sim.files.insert(to.to_path_buf(), model);
            }
            return Err(e);
        }
        moving.renamed = Some(Box::new(Renamed {
            from: from.to_path_buf(),
            from_entry_unsynced: moving.entry_unsynced,
            replaced,
        }));
        // The new name is the rename's own entry: it stands or falls with the rename.
        moving.entry_unsynced = false;
        sim.files.insert(to.to_path_buf(), moving);
        Ok(())
    }

    /// Unlinks `path` with `real`, which must do exactly that. The model takes an unlink as
    /// durable at once and forgets the file. After a power loss it fails with EIO and unlinks
    /// nothing: an abandoned writer cleaning up (a failed compaction's temporary file) must not
    /// touch the files the model has just rewritten.
    pub fn remove(&self, path: &Path, real: impl FnOnce() -> io::Result<()>) -> io::Result<()> {
        let Some(shared) = &self.0 else {
            return real();
        };
        let mut plan = shared.lock();
        let Some(sim) = &mut plan.sim else {
            drop(plan);
            return real();
        };
        if sim.dead {
            return Err(eio());
        }
        real()?;
        sim.files.remove(path);
        Ok(())
    }

    /// fdatasyncs or fsyncs the file `path` with `real`, unless the plan fails it first. A
    /// simulated plan records the file as durable instead of calling `real`.
    pub fn sync(&self, path: &Path, real: impl FnOnce() -> io::Result<()>) -> io::Result<()> {
        let Some(shared) = &self.0 else {
            return real();
        };
        let plan = shared.lock();
        // What a stalled sync covers is what was written when it was asked for.
        let seen = plan
            .sim
            .as_ref()
            .and_then(|s| s.files.get(path))
            .map_or(0, |f| f.pending.len());
        let mut plan = shared.wait_unless_held(plan)?;
        if let Err(e) = plan.sync_fault() {
            if let Some(sim) = &mut plan.sim {
                sim.track(path).sync_failed = true;
            }
            return Err(e);
        }
        match &mut plan.sim {
            Some(sim) => {
                sim.synced(path, seen);
                Ok(())
            }
            None => {
                drop(plan);
                real()
            }
        }
    }

    /// fsyncs the directory `dir` with `real`, unless the plan fails it first. A simulated plan
    /// records the entries of files created in it as durable instead of calling `real`.
    pub fn sync_dir(&self, dir: &Path, real: impl FnOnce() -> io::Result<()>) -> io::Result<()> {
        let Some(shared) = &self.0 else {
            return real();
        };
        let plan = shared.lock();
        let mut plan = shared.wait_unless_held(plan)?;
        plan.sync_fault()?;
        match &mut plan.sim {
            Some(sim) => {
                for (path, file) in &mut sim.files {
                    if path.parent() == Some(dir) {
                        file.entry_unsynced = false;
                        file.renamed = None;
                    }
                }
                Ok(())
            }
            None => {
                drop(plan);
                real()
            }
        }
    }
}

/// What a power loss leaves of one file: `None` if its entry vanished, else its bytes (the
/// durable image, then each pending change kept, dropped or torn; see the module doc).
fn settle(
    file: FileModel,
    rng: &mut SplitMix64,
    keep_percent: u64,
    report: &mut PowerLoss,
) -> Option<Vec<u8>> {
    if file.entry_unsynced && rng.below(3) == 0 {
        report.files_vanished += 1;
        return None;
    }
    let mut image = file.durable;
    for op in &file.pending {
        match op {
            Pending::SetLen(_) => {
                if rng.below(2) == 0 {
                    op.apply(&mut image);
                    report.truncations_kept += 1;
                } else {
                    report.truncations_dropped += 1;
                }
            }
            Pending::Write { pos, data } => {
                let roll = rng.below(100);
                if roll < keep_percent {
                    op.apply(&mut image);
                    report.writes_kept += 1;
                } else if roll.is_multiple_of(2) || data.is_empty() {
                    report.writes_dropped += 1;
                } else {
                    // Torn: a prefix reached the disk, and the rest of the range may hold
                    // whatever the device left there.
                    let keep = rng.below(data.len() as u64) as usize;
                    write_into(&mut image, *pos, &data[..keep]);
                    if rng.below(2) == 0 {
                        let garbage_len = 1 + rng.below((data.len() - keep) as u64);
                        let garbage: Vec<u8> =
                            (0..garbage_len).map(|_| rng.next_u64() as u8).collect();
                        write_into(&mut image, *pos + keep as u64, &garbage);
                    }
                    report.writes_torn += 1;
                }
            }
        }
    }
    Some(image)
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, Plan> {
        self.plan.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Waits while syncs are held by another thread; fails once the power is gone.
    fn wait_unless_held<'a>(
        &'a self,
        mut plan: MutexGuard<'a, Plan>,
    ) -> io::Result<MutexGuard<'a, Plan>> {
        let me = std::thread::current().id();
        loop {
            match &plan.sim {
                Some(sim) if sim.dead => return Err(eio()),
                Some(sim) if sim.held_by.is_some_and(|t| t != me) && sim.passes > 0 => {
                    plan.sim.as_mut().expect("simulated").passes -= 1;
                    return Ok(plan);
                }
                Some(sim) if sim.held_by.is_some_and(|t| t != me) => {
                    plan.sim.as_mut().expect("simulated").waiting += 1;
                    plan = self
                        .released
                        .wait(plan)
                        .unwrap_or_else(PoisonError::into_inner);
                    plan.sim.as_mut().expect("simulated").waiting -= 1;
                }
                _ => return Ok(plan),
            }
        }
    }
}

impl Plan {
    fn write(&mut self, path: &Path, pos: u64, parts: &[IoSlice<'_>]) -> Allowance {
        if self.sim.as_ref().is_some_and(|s| s.dead) {
            return Allowance::Partial {
                bytes: 0,
                error: eio(),
            };
        }
        let total: u64 = parts.iter().map(|p| p.len() as u64).sum();
        let mut allowance = match &mut self.room_bytes {
            None => Allowance::All,
            Some(room) if *room >= total => {
                *room -= total;
                Allowance::All
            }
            Some(room) => Allowance::Partial {
                bytes: std::mem::take(room),
                error: io::Error::from_raw_os_error(libc::ENOSPC),
            },
        };
        match &mut self.write_fault {
            Some((0, errno)) => {
                let fits = match &allowance {
                    Allowance::All => total,
                    Allowance::Partial { bytes, .. } => *bytes,
                };
                allowance = Allowance::Partial {
                    bytes: self.rng.below(fits.max(1)).min(fits),
                    error: io::Error::from_raw_os_error(*errno),
                };
                self.write_fault = None;
            }
            Some((n, _)) => *n -= 1,
            None => {}
        }
        if let Some(sim) = &mut self.sim {
            let landed = match &allowance {
                Allowance::All => total,
                Allowance::Partial { bytes, .. } => *bytes,
            } as usize;
            let mut data = Vec::with_capacity(landed);
            for part in parts {
                let take = (landed - data.len()).min(part.len());
                data.extend_from_slice(&part[..take]);
            }
            sim.track(path).pending.push(Pending::Write { pos, data });
        }
        allowance
    }

    /// The error a sync fails with now, if any (counting down a one-shot fault).
    fn sync_fault(&mut self) -> io::Result<()> {
        if let Some(errno) = self.sync_errno {
            return Err(io::Error::from_raw_os_error(errno));
        }
        match &mut self.sync_fault {
            Some((0, errno)) => {
                let errno = *errno;
                self.sync_fault = None;
                Err(io::Error::from_raw_os_error(errno))
            }
            Some((n, _)) => {
                *n -= 1;
                Ok(())
            }
            None => Ok(()),
        }
    }
}

impl Sim {
    /// The model of `path`, starting from its current bytes if the model has not seen it yet
    /// (a file from before this plan: its bytes are taken as durable).
    fn track(&mut self, path: &Path) -> &mut FileModel {
        self.files
            .entry(path.to_path_buf())
            .or_insert_with(|| FileModel {
                durable: fs::read(path).unwrap_or_default(),
                ..FileModel::default()
            })
    }

    /// `path` is about to be created: a new file starts empty with an unsynced entry; creating
    /// a file that exists (opening it to truncate) is tracked like any other.
    fn creating(&mut self, path: &Path) {
        if fs::symlink_metadata(path).is_err() {
            self.files.insert(
                path.to_path_buf(),
                FileModel {
                    entry_unsynced: true,
                    ..FileModel::default()
                },
            );
        } else {
            self.track(path);
        }
    }

    /// A sync of `path` succeeded: its first `seen` pending changes are durable.
    fn synced(&mut self, path: &Path, seen: usize) {
        let Some(file) = self.files.get_mut(path) else {
            return;
        };
        if file.sync_failed {
            return;
        }
        let seen = seen.min(file.pending.len());
        for op in file.pending.drain(..seen) {
            op.apply(&mut file.durable);
        }
    }
}

/// SplitMix64 (Steele, Lea, Flood 2014): a small seeded generator, fully determined by its
/// seed and kept here so the sequence never changes under a dependency upgrade. A printed seed
/// repeats a simulation, a fault plan or a benchmark's kill moments exactly. Not for secrets.
#[derive(Debug, Clone, Copy, Default)]
pub struct SplitMix64(u64);

impl SplitMix64 {
    pub fn new(seed: u64) -> SplitMix64 {
        SplitMix64(seed)
    }

    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// A number in `0..n` (`n` > 0).
    pub fn below(&mut self, n: u64) -> u64 {
        self.next_u64() % n
    }

    /// Uniform in `[0, 1)`.
    pub fn unit(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The compaction pattern: write a new file under a temporary name, fdatasync it, rename it
    /// over the old one. Returns the plan, for the caller to fsync the directory or not.
    fn replace_by_rename(dir: &Path, seed: u64) -> DiskFaults {
        let (old, tmp) = (dir.join("f"), dir.join("f.tmp"));
        fs::write(&old, b"old").unwrap();
        let faults = DiskFaults::simulated(seed);
        faults.create(&tmp).unwrap();
        let file = fs::File::create(&tmp).unwrap();
        assert!(matches!(
            faults.write(&tmp, 0, &[IoSlice::new(b"new")]),
            Allowance::All
        ));
        fs::write(&tmp, b"new").unwrap();
        faults.sync(&tmp, || file.sync_data()).unwrap();
        faults
            .rename(&tmp, &old, || fs::rename(&tmp, &old))
            .unwrap();
        faults
    }

    #[test]
    fn a_rename_followed_by_a_directory_fsync_survives_power_loss() {
        for seed in 0..64 {
            let dir = tempfile::tempdir().unwrap();
            let faults = replace_by_rename(dir.path(), seed);
            faults.sync_dir(dir.path(), || Ok(())).unwrap();
            let report = faults.power_loss(seed).unwrap();
            assert_eq!(report.renames_undone, 0);
            assert_eq!(fs::read(dir.path().join("f")).unwrap(), b"new");
            assert!(!dir.path().join("f.tmp").exists());
        }
    }

    #[test]
    fn an_unsynced_rename_may_be_undone_by_power_loss() {
        let (mut kept, mut undone) = (0, 0);
        for seed in 0..64 {
            let dir = tempfile::tempdir().unwrap();
            let faults = replace_by_rename(dir.path(), seed);
            let report = faults.power_loss(seed).unwrap();
            let f = fs::read(dir.path().join("f")).unwrap();
            let tmp = fs::read(dir.path().join("f.tmp")).ok();
            if report.renames_undone == 1 {
                undone += 1;
                // The old file is back; the new one is under its old name, unless its entry
                // (never fsynced) vanished.
                assert_eq!(f, b"old", "seed {seed}");
                assert!(tmp.is_none_or(|t| t == b"new"), "seed {seed}");
            } else {
                kept += 1;
                assert_eq!(f, b"new", "seed {seed}");
                assert!(tmp.is_none(), "seed {seed}");
            }
        }
        assert!(kept > 0 && undone > 0, "kept {kept}, undone {undone}");
    }

    #[test]
    fn a_rename_to_a_new_name_may_leave_only_the_old_one() {
        let mut undone = 0;
        for seed in 0..32 {
            let dir = tempfile::tempdir().unwrap();
            let (a, b) = (dir.path().join("a"), dir.path().join("b"));
            fs::write(&a, b"data").unwrap();
            let faults = DiskFaults::simulated(seed);
            faults.rename(&a, &b, || fs::rename(&a, &b)).unwrap();
            let report = faults.power_loss(seed).unwrap();
            // `a` was there before the plan, so its entry was durable: one name survives.
            if report.renames_undone == 1 {
                undone += 1;
                assert_eq!(fs::read(&a).unwrap(), b"data");
                assert!(!b.exists());
            } else {
                assert_eq!(fs::read(&b).unwrap(), b"data");
                assert!(!a.exists());
            }
        }
        assert!(undone > 0);
    }

    #[test]
    fn a_dead_plan_removes_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let a = dir.path().join("a");
        fs::write(&a, b"data").unwrap();
        let faults = DiskFaults::simulated(1);
        faults.power_loss(1).unwrap();
        let err = faults.remove(&a, || fs::remove_file(&a)).unwrap_err();
        assert_eq!(err.raw_os_error(), Some(libc::EIO));
        assert!(a.exists());
    }

    #[test]
    fn a_dead_plan_renames_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let (a, b) = (dir.path().join("a"), dir.path().join("b"));
        fs::write(&a, b"data").unwrap();
        let faults = DiskFaults::simulated(1);
        faults.power_loss(1).unwrap();
        let err = faults.rename(&a, &b, || fs::rename(&a, &b)).unwrap_err();
        assert_eq!(err.raw_os_error(), Some(libc::EIO));
        assert!(a.exists() && !b.exists());
    }

    #[test]
    fn held_syncs_let_through_go_on_and_the_rest_wait() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("f");
        fs::write(&path, b"").unwrap();
        let faults = DiskFaults::simulated(1);
        faults.hold_syncs();
        faults.let_syncs_through(2);
        let other = faults.clone();
        let p = path.clone();
        let synced = std::thread::spawn(move || {
            (0..3)
                .map(|_| other.sync(&p, || Ok(())).is_ok())
                .collect::<Vec<_>>()
        });
        while faults.held_syncs() == 0 {
            std::thread::yield_now();
        }
        assert_eq!(faults.syncs_to_let_through(), 0);
        faults.power_loss(1).unwrap();
        assert_eq!(synced.join().unwrap(), [true, true, false]);
    }
}
