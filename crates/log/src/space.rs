//! Free space of a data directory, kept as a state: **has room** ⇄ **full**.
//!
//! A full disk is a state, not a failure. When a write into the data directory fails with
//! ENOSPC or EDQUOT (a segment append, an index write, a new segment's files, a group-store
//! write, a topic's metadata), the writer reports it here with [`DataDirSpace::no_space`] and
//! the directory becomes *full*; the write itself fails alone and the writer stays healthy.
//! The directory has room again as soon as either
//! - a later write into it succeeds ([`DataDirSpace::wrote`], called on every successful
//!   append: one relaxed atomic load while there is room), or
//! - a `statvfs` check sees at least [`DataDirSpace::room_threshold`] bytes and some inodes
//!   available: a watcher thread runs one every [`RECHECK_INTERVAL`] while the directory is
//!   full (and exits when it has room), and [`DataDirSpace::recheck`] runs one on demand
//!   (`/readyz`, `/metrics` and retention do). A quota (EDQUOT) is invisible to `statvfs`, so
//!   when that was the error only a successful write ends the state.
//!
//! Each transition is logged once (a warning on becoming full, an info line on having room
//! again), so a producer retrying against a full disk does not flood the log; and should the
//! state flap (space hovering around what one write needs), a new full state within
//! [`TRANSITION_LOG_INTERVAL`] of the last one logged goes to debug level, and so does its
//! end: the warn and info lines always come in pairs, at most one pair per interval.
//!
//! Who shares one [`DataDirSpace`]: [`DataDirSpace::for_dir`] hands out the same state for the
//! same directory path while any handle to it lives, so the group committer of the partition
//! logs and the consumer-group store of one broker report into one place without being wired
//! to each other.

use std::ffi::CString;
use std::io;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError, Weak};
use std::time::{Duration, Instant};

/// How often the watcher thread checks a full directory's free space. Once a second keeps
/// `/readyz` and the metric within about a second of an operator freeing space, at the cost of
/// one `statvfs` per second, and only while the directory is full.
pub const RECHECK_INTERVAL: Duration = Duration::from_secs(1);

/// The most free space a `statvfs` check asks for before it declares a full directory to have
/// room again: enough for many appends and a few new segments' files, so the state does not
/// flap between full and not full on every small deletion.
pub const ROOM_BYTES_MAX: u64 = 16 << 20;

/// On a small filesystem, an eighth of its size is enough instead (a 32 MiB test filesystem
/// has room again with 4 MiB free).
const ROOM_FRACTION_OF_TOTAL: u64 = 8;

/// Free inodes a `statvfs` check wants to see too (a filesystem out of inodes fails file
/// creation with ENOSPC whatever its free bytes): a few new segments' worth.
const ROOM_INODES_MIN: u64 = 64;

/// Transitions of the state logged at warn/info level at most this often; closer ones go to
/// debug level. Ten seconds keeps a flapping state to a handful of lines a minute.
pub const TRANSITION_LOG_INTERVAL: Duration = Duration::from_secs(10);

/// What a [`DataDirSpace`] knows right now.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SpaceStatus {
    /// The directory, if this state belongs to one.
    pub dir: Option<PathBuf>,
    /// Whether the last write decided it: a write failed for want of space, and neither a
    /// later write nor a `statvfs` check has shown room since.
    pub full: bool,
    /// Bytes available to the broker's user (`statvfs` `f_bavail`), if it could be read.
    pub free_bytes: Option<u64>,
    /// Size of the filesystem, if it could be read.
    pub total_bytes: Option<u64>,
    /// Writes refused for want of space so far.
    pub no_space_errors: u64,
    /// The write that made the directory full (operation, path, error), while it is full.
    pub reason: Option<String>,
}

/// The free-space state of one data directory (see the module doc). Cheap to clone; clones
/// share the state.
#[derive(Debug, Clone)]
pub struct DataDirSpace {
    shared: Arc<SpaceShared>,
}

#[derive(Debug, Default)]
struct Transitions {
    /// Why the directory became full, while it is.
    reason: Option<String>,
    /// The error was EDQUOT: `statvfs` cannot see it end.
    quota: bool,
    /// When a full state was last logged at warn level.
    warned_at: Option<Instant>,
    /// Whether the current full state was logged at warn level (its end then is at info).
    warned: bool,
}

impl Transitions {
    /// Whether to log a new full state at warn level (else debug), noting it.
    fn warn_now(&mut self) -> bool {
        let now = Instant::now();
        self.warned = self
            .warned_at
            .is_none_or(|at| now.duration_since(at) >= TRANSITION_LOG_INTERVAL);
        if self.warned {
            self.warned_at = Some(now);
        }
        self.warned
    }
}

#[derive(Debug)]
struct SpaceShared {
    dir: Option<PathBuf>,
    full: AtomicBool,
    /// Serialises transitions, so each is logged once.
    transitions: Mutex<Transitions>,
    no_space_errors: AtomicU64,
    /// Whether a watcher thread is running.
    watching: AtomicBool,
}

/// States handed out by [`DataDirSpace::for_dir`], by absolute path. Entries whose state is
/// gone are dropped whenever a new one is added, so the list stays as long as the number of
/// live data directories (one per broker).
static REGISTRY: Mutex<Vec<(PathBuf, Weak<SpaceShared>)>> = Mutex::new(Vec::new());

impl DataDirSpace {
    /// The space state of the data directory `dir`: the same state for the same path while
    /// any handle to it is alive.
    pub fn for_dir(dir: &Path) -> DataDirSpace {
        let key = std::path::absolute(dir).unwrap_or_else(|_| dir.to_path_buf());
        let mut registry = REGISTRY.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(shared) = registry
            .iter()
            .find(|(path, _)| *path == key)
            .and_then(|(_, weak)| weak.upgrade())
        {
            return DataDirSpace { shared };
        }
        registry.retain(|(_, weak)| weak.strong_count() > 0);
        let space = DataDirSpace::new(Some(key.clone()));
        registry.push((key, Arc::downgrade(&space.shared)));
        space
    }

    /// A state for writers that belong to no data directory (tests, benchmarks): it tracks
    /// writes, but has no `statvfs` check and no watcher.
    pub fn detached() -> DataDirSpace {
        DataDirSpace::new(None)
    }

    fn new(dir: Option<PathBuf>) -> DataDirSpace {
        DataDirSpace {
            shared: Arc::new(SpaceShared {
                dir,
                full: AtomicBool::new(false),
                transitions: Mutex::new(Transitions::default()),
                no_space_errors: AtomicU64::new(0),
                watching: AtomicBool::new(false),
            }),
        }
    }

    pub fn dir(&self) -> Option<&Path> {
        self.shared.dir.as_deref()
    }

    /// Whether the directory is full (see [`SpaceStatus::full`]).
    pub fn is_full(&self) -> bool {
        self.shared.full.load(Ordering::Acquire)
    }

    /// Writes refused for want of space so far.
    pub fn no_space_errors(&self) -> u64 {
        self.shared.no_space_errors.load(Ordering::Relaxed)
    }

    /// A write (`op` on `path`) failed with `error`, ENOSPC or EDQUOT: the directory is full.
    pub fn no_space(&self, op: &str, path: &Path, error: &io::Error) {
        self.shared.no_space_errors.fetch_add(1, Ordering::Relaxed);
        if self.is_full() {
            return;
        }
        let mut transitions = self.lock_transitions();
        if self.shared.full.swap(true, Ordering::AcqRel) {
            return;
        }
        let why = format!("{op} {}: {error}", path.display());
        const MESSAGE: &str = "data directory is full: writes that need space fail (produce \
             answers KAFKA_STORAGE_ERROR) until space is freed; reads keep working";
        if transitions.warn_now() {
            tracing::warn!(data_dir = %self.describe_dir(), reason = %why, "{MESSAGE}");
        } else {
            tracing::debug!(data_dir = %self.describe_dir(), reason = %why, "{MESSAGE}");
        }
        transitions.reason = Some(why);
        transitions.quota = error.raw_os_error() == Some(libc::EDQUOT)
            || error.kind() == io::ErrorKind::QuotaExceeded;
        drop(transitions);
        self.start_watcher();
    }

    /// A write into the directory succeeded: if it was full, it has room again. One atomic
    /// load when it was not full.
    pub fn wrote(&self) {
        if self.is_full() {
            self.clear("a write succeeded");
        }
    }

    /// Checks the free space now (`statvfs`) and, if the directory is full but has at least
    /// [`DataDirSpace::room_threshold`] bytes (and a few inodes) available, declares it to have
    /// room again. Not after EDQUOT, which `statvfs` cannot see. Returns whether it is (still)
    /// full. Costs nothing while the directory is not full.
    pub fn recheck(&self) -> bool {
        if !self.is_full() || self.lock_transitions().quota {
            return self.is_full();
        }
        if let Some(stat) = self.statvfs()
            && stat.has_room()
        {
            self.clear(&format!("{} bytes are free", stat.free_bytes));
        }
        self.is_full()
    }

    /// Free bytes a `statvfs` check wants to see before a full directory counts as having room
    /// again: [`ROOM_BYTES_MAX`], or an eighth of a smaller filesystem.
    pub fn room_threshold(total_bytes: u64) -> u64 {
        ROOM_BYTES_MAX
            .min(total_bytes / ROOM_FRACTION_OF_TOTAL)
            .max(1)
    }

    /// The current state, with a fresh `statvfs` reading.
    pub fn status(&self) -> SpaceStatus {
        let stat = self.statvfs();
        SpaceStatus {
            dir: self.shared.dir.clone(),
            full: self.is_full(),
            free_bytes: stat.map(|s| s.free_bytes),
            total_bytes: stat.map(|s| s.total_bytes),
            no_space_errors: self.no_space_errors(),
            reason: self.lock_transitions().reason.clone(),
        }
    }

    fn clear(&self, why: &str) {
        let mut transitions = self.lock_transitions();
        if !self.shared.full.swap(false, Ordering::AcqRel) {
            return;
        }
        transitions.reason = None;
        transitions.quota = false;
        if std::mem::take(&mut transitions.warned) {
            tracing::info!(data_dir = %self.describe_dir(), "data directory has room again ({why}): appends resume");
        } else {
            tracing::debug!(data_dir = %self.describe_dir(), "data directory has room again ({why}): appends resume");
        }
    }

    fn lock_transitions(&self) -> std::sync::MutexGuard<'_, Transitions> {
        self.shared
            .transitions
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    fn describe_dir(&self) -> String {
        self.shared
            .dir
            .as_ref()
            .map_or_else(|| "(none)".to_owned(), |d| d.display().to_string())
    }

    /// The free space of the filesystem holding the directory.
    fn statvfs(&self) -> Option<FsSpace> {
        let dir = self.shared.dir.as_deref()?;
        match statvfs(dir) {
            Ok(v) => Some(v),
            Err(e) => {
                tracing::debug!(dir = %dir.display(), error = %e, "statvfs failed");
                None
            }
        }
    }

    /// Starts the watcher thread unless one runs or there is no directory to check. The thread
    /// holds only a weak reference, so it never keeps the state alive, and it exits as soon as
    /// the directory has room (or the state is dropped).
    fn start_watcher(&self) {
        if self.shared.dir.is_none() || self.shared.watching.swap(true, Ordering::AcqRel) {
            return;
        }
        let weak = Arc::downgrade(&self.shared);
        let spawned = std::thread::Builder::new()
            .name("sluice-space".into())
            .spawn(move || watch(&weak));
        if let Err(e) = spawned {
            self.shared.watching.store(false, Ordering::Release);
            tracing::warn!(error = %e, "could not start the free-space watcher; the state clears on the next successful write");
        }
    }
}

fn watch(weak: &Weak<SpaceShared>) {
    loop {
        std::thread::sleep(RECHECK_INTERVAL);
        let Some(shared) = weak.upgrade() else { return };
        let space = DataDirSpace { shared };
        if !space.recheck() {
            space.shared.watching.store(false, Ordering::Release);
            // Became full again between the check and giving up the flag, with nobody to
            // start a new watcher: carry on watching.
            if space.is_full() && !space.shared.watching.swap(true, Ordering::AcqRel) {
                continue;
            }
            return;
        }
    }
}

/// What `statvfs` says of a filesystem.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FsSpace {
    /// Bytes available to unprivileged users (`f_bavail`).
    pub free_bytes: u64,
    pub total_bytes: u64,
    /// Inodes available to unprivileged users (`f_favail`).
    pub free_inodes: u64,
    /// Inodes in all; 0 when the filesystem does not count them (btrfs, for one).
    pub total_inodes: u64,
}

impl FsSpace {
    /// Whether a full directory on this filesystem counts as having room again.
    pub fn has_room(&self) -> bool {
        self.free_bytes >= DataDirSpace::room_threshold(self.total_bytes)
            && (self.total_inodes == 0 || self.free_inodes >= ROOM_INODES_MIN)
    }
}

/// The free space of the filesystem holding `path`.
pub fn statvfs(path: &Path) -> io::Result<FsSpace> {
    let c_path = CString::new(path.as_os_str().as_bytes())
        .map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e))?;
    let mut stat = std::mem::MaybeUninit::<libc::statvfs>::zeroed();
    // SAFETY: `c_path` is a NUL-terminated string that outlives the call, and `stat` points
    // at writable memory the size of a `statvfs`, which the call fills in.
    let rc = unsafe { libc::statvfs(c_path.as_ptr(), stat.as_mut_ptr()) };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: statvfs returned 0, so it initialised the struct (and it was zeroed before).
    let stat = unsafe { stat.assume_init() };
    // The field types are platform-dependent (32-bit on some targets), hence the casts.
    #[allow(clippy::unnecessary_cast)]
    let block = stat.f_frsize as u64;
    #[allow(clippy::unnecessary_cast)]
    Ok(FsSpace {
        free_bytes: (stat.f_bavail as u64).saturating_mul(block),
        total_bytes: (stat.f_blocks as u64).saturating_mul(block),
        free_inodes: stat.f_favail as u64,
        total_inodes: stat.f_files as u64,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn full_until_a_write_succeeds_and_shared_by_path() {
        let dir = tempfile::tempdir().unwrap();
        let a = DataDirSpace::for_dir(dir.path());
        let b = DataDirSpace::for_dir(dir.path());
        assert!(!a.is_full());
        let enospc = io::Error::from_raw_os_error(libc::ENOSPC);
        a.no_space("write segment", &dir.path().join("x.log"), &enospc);
        a.no_space("write segment", &dir.path().join("x.log"), &enospc);
        assert!(b.is_full(), "both handles see one state");
        assert_eq!(b.no_space_errors(), 2);
        let status = b.status();
        assert!(status.full);
        assert!(status.reason.unwrap().contains("x.log"));
        assert!(status.free_bytes.is_some());
        b.wrote();
        assert!(!a.is_full());
        assert!(a.status().reason.is_none());
        // Another directory is another state.
        let other = tempfile::tempdir().unwrap();
        assert!(!DataDirSpace::for_dir(other.path()).is_full());
    }

    #[test]
    fn a_statvfs_check_clears_the_state_when_there_is_room_unless_a_quota_was_hit() {
        let dir = tempfile::tempdir().unwrap();
        let space = DataDirSpace::for_dir(dir.path());
        space.no_space(
            "create",
            dir.path(),
            &io::Error::from_raw_os_error(libc::EDQUOT),
        );
        assert!(space.recheck(), "EDQUOT: statvfs cannot see a quota end");
        space.wrote();
        space.no_space(
            "create",
            dir.path(),
            &io::Error::from_raw_os_error(libc::ENOSPC),
        );
        let expected_full = !statvfs(dir.path()).unwrap().has_room();
        assert_eq!(space.recheck(), expected_full);
        assert_eq!(DataDirSpace::room_threshold(32 << 20), 4 << 20);
        assert_eq!(DataDirSpace::room_threshold(1 << 40), ROOM_BYTES_MAX);
    }

    #[test]
    fn a_detached_state_clears_only_on_a_write() {
        let space = DataDirSpace::detached();
        space.no_space(
            "write",
            Path::new("x"),
            &io::Error::from_raw_os_error(libc::ENOSPC),
        );
        assert!(space.recheck(), "no directory to check");
        space.wrote();
        assert!(!space.is_full());
    }
}
