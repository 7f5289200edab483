//! Injected disk faults: the seam through which tests make the log's writes, file creations and
//! fdatasyncs fail the way a real disk does, without filling a real one.
//!
//! A [`DiskFaults`] is passed to [`crate::PartitionLog::open_with`]; the log asks it before
//! every segment write, index write, file creation and fdatasync. [`DiskFaults::none`] (what
//! [`crate::PartitionLog::open`] uses) holds nothing and costs one branch per call.
//!
//! The model of a full disk: [`DiskFaults::fill_after`] gives the disk a number of bytes of room
//! left. A write that fits takes its bytes from it; a write that does not fit writes the part
//! that fits (as `write(2)` does, returning a short count) and then fails with ENOSPC; once
//! no room is left, creating files fails with ENOSPC too. Cutting a file back does not give room
//! back (the tests free space explicitly with [`DiskFaults::free`]).

use std::io;
use std::sync::{Arc, Mutex, PoisonError};

/// Faults to inject into one log's disk I/O (see the module doc). Cheap to clone; clones share
/// the plan.
#[derive(Debug, Clone, Default)]
pub struct DiskFaults(Option<Arc<Mutex<Plan>>>);

#[derive(Debug, Default)]
struct Plan {
    /// Bytes writes may still add before they fail with ENOSPC; `None`: unlimited.
    room_bytes: Option<u64>,
    /// File creations that may still succeed before they fail with ENOSPC; `None`: unlimited.
    creates_left: Option<u32>,
    /// The errno every fdatasync and fsync fails with, from now on.
    sync_errno: Option<i32>,
}

/// How much of a write the plan lets through.
#[derive(Debug)]
pub(crate) enum Allowance {
    /// All of it.
    All,
    /// Only the first `bytes`, then the write fails with `error`.
    Partial { bytes: u64, error: io::Error },
}

impl DiskFaults {
    /// No faults, ever (what a production log uses).
    pub fn none() -> DiskFaults {
        DiskFaults(None)
    }

    /// A plan with no faults yet; arm it with the methods below.
    pub fn new() -> DiskFaults {
        DiskFaults(Some(Arc::new(Mutex::new(Plan::default()))))
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

    fn with<T>(&self, f: impl FnOnce(&mut Plan) -> T) -> Option<T> {
        let plan = self.0.as_ref()?;
        Some(f(&mut plan.lock().unwrap_or_else(PoisonError::into_inner)))
    }

    /// Takes `bytes` of room for a write.
    pub(crate) fn write(&self, bytes: u64) -> Allowance {
        self.with(|p| match &mut p.room_bytes {
            None => Allowance::All,
            Some(room) if *room >= bytes => {
                *room -= bytes;
                Allowance::All
            }
            Some(room) => {
                let fits = std::mem::take(room);
                Allowance::Partial {
                    bytes: fits,
                    error: io::Error::from_raw_os_error(libc::ENOSPC),
                }
            }
        })
        .unwrap_or(Allowance::All)
    }

    /// Whether a file may be created now.
    pub(crate) fn create(&self) -> io::Result<()> {
        let allowed = self.with(|p| {
            if p.room_bytes == Some(0) {
                return false;
            }
            match &mut p.creates_left {
                None => true,
                Some(0) => false,
                Some(n) => {
                    *n -= 1;
                    true
                }
            }
        });
        match allowed {
            Some(false) => Err(io::Error::from_raw_os_error(libc::ENOSPC)),
            _ => Ok(()),
        }
    }

    /// Whether an fdatasync or fsync may succeed now.
    pub(crate) fn sync(&self) -> io::Result<()> {
        match self.with(|p| p.sync_errno).flatten() {
            Some(errno) => Err(io::Error::from_raw_os_error(errno)),
            None => Ok(()),
        }
    }
}
