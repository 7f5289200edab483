//! Which records the share consumers processed, how often, and when the records a killed
//! consumer held came back to the others.
//!
//! - [`Ledger::processed`] counts each (partition, offset) a consumer finished: the number of
//!   distinct records and of records processed more than once (redeliveries after a lock
//!   expired or a consumer died, which at-least-once delivery allows).
//! - [`Ledger::watch`] starts a [`KillWatch`] over the records a consumer held when it was
//!   killed; [`Ledger::acquired`] then ticks off each of them as another consumer acquires it,
//!   and notes when the first and the last came back.

use std::collections::HashMap;
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};

use uuid::Uuid;

/// A partition by topic id and index, as share groups name them.
pub type Tp = (Uuid, i32);

/// Offsets at or above this are not tracked per record (a byte each), only counted: a bound on
/// the ledger's memory whatever the broker returns.
const TRACKED_OFFSETS_MAX: i64 = 1 << 26;

/// Totals of a [`Ledger`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct LedgerTotals {
    /// Records processed, every delivery counted.
    pub processed: u64,
    /// Distinct records processed at least once.
    pub distinct: u64,
    /// Distinct records processed more than once.
    pub redelivered: u64,
    /// Deliveries of offsets too high to track (counted in `processed` only).
    pub untracked: u64,
}

/// The records a killed consumer held, and when they reached others.
#[derive(Debug, Clone, PartialEq)]
pub struct KillWatch {
    at: Instant,
    held: u64,
    /// Held ranges not yet acquired by anyone else, per partition, inclusive.
    remaining: HashMap<Tp, Vec<(i64, i64)>>,
    left: u64,
    pub first: Option<Duration>,
    pub all: Option<Duration>,
}

impl KillWatch {
    pub fn new(at: Instant, held: &[(Tp, i64, i64)]) -> KillWatch {
        let mut remaining: HashMap<Tp, Vec<(i64, i64)>> = HashMap::new();
        let mut count = 0u64;
        for &(tp, first, last) in held {
            if last >= first {
                remaining.entry(tp).or_default().push((first, last));
                count += (last - first + 1) as u64;
            }
        }
        KillWatch {
            at,
            held: count,
            remaining,
            left: count,
            first: None,
            // Nothing held, nothing to come back: no time to report.
            all: None,
        }
    }

    /// Records held at the kill.
    pub fn held(&self) -> u64 {
        self.held
    }

    /// Held records acquired again by another consumer so far.
    pub fn redelivered(&self) -> u64 {
        self.held - self.left
    }

    /// Ticks off the held records inside `[first, last]` of `tp`, acquired at `now`.
    pub fn acquired(&mut self, tp: Tp, first: i64, last: i64, now: Instant) {
        let Some(ranges) = self.remaining.get_mut(&tp) else {
            return;
        };
        let mut hit = 0u64;
        let mut kept = Vec::with_capacity(ranges.len() + 1);
        for &(a, b) in ranges.iter() {
            let (lo, hi) = (a.max(first), b.min(last));
            if lo > hi {
                kept.push((a, b));
                continue;
            }
            hit += (hi - lo + 1) as u64;
            if a < lo {
                kept.push((a, lo - 1));
            }
            if hi < b {
                kept.push((hi + 1, b));
            }
        }
        *ranges = kept;
        if hit == 0 {
            return;
        }
        self.left -= hit;
        let since = now.saturating_duration_since(self.at);
        self.first.get_or_insert(since);
        if self.left == 0 {
            self.all = Some(since);
        }
    }
}

#[derive(Debug, Default)]
struct Inner {
    counts: HashMap<Tp, Vec<u8>>,
    totals: LedgerTotals,
    watch: Option<KillWatch>,
}

/// Shared by every consumer of a fleet.
#[derive(Debug, Default)]
pub struct Ledger {
    inner: Mutex<Inner>,
}

impl Ledger {
    fn lock(&self) -> MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// One delivery of `offset` of `tp` processed.
    pub fn processed(&self, tp: Tp, offset: i64) {
        let mut inner = self.lock();
        inner.totals.processed += 1;
        if !(0..TRACKED_OFFSETS_MAX).contains(&offset) {
            inner.totals.untracked += 1;
            return;
        }
        let index = offset as usize;
        let counts = inner.counts.entry(tp).or_default();
        if counts.len() <= index {
            counts.resize(index + 1, 0);
        }
        let before = counts[index];
        counts[index] = before.saturating_add(1);
        match before {
            0 => inner.totals.distinct += 1,
            1 => inner.totals.redelivered += 1,
            _ => {}
        }
    }

    /// A consumer acquired `[first, last]` of `tp` at `now` (for the kill watch).
    pub fn acquired(&self, tp: Tp, first: i64, last: i64, now: Instant) {
        let mut inner = self.lock();
        if let Some(watch) = inner.watch.as_mut() {
            watch.acquired(tp, first, last, now);
        }
    }

    /// Starts watching for `held` (a killed consumer's records) to come back.
    pub fn watch(&self, watch: KillWatch) {
        self.lock().watch = Some(watch);
    }

    pub fn kill_watch(&self) -> Option<KillWatch> {
        self.lock().watch.clone()
    }

    pub fn totals(&self) -> LedgerTotals {
        self.lock().totals
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn distinct_and_redelivered_records_are_counted_once_each() {
        let ledger = Ledger::default();
        let tp = (Uuid::nil(), 0);
        for offset in [0, 1, 2, 1, 1, 5] {
            ledger.processed(tp, offset);
        }
        ledger.processed((Uuid::nil(), 1), 1);
        ledger.processed(tp, -1);
        assert_eq!(
            ledger.totals(),
            LedgerTotals {
                processed: 8,
                distinct: 5,
                redelivered: 1,
                untracked: 1
            }
        );
    }

    #[test]
    fn a_kill_watch_notes_the_first_and_the_last_record_back() {
        let t0 = Instant::now();
        let a = (Uuid::nil(), 0);
        let b = (Uuid::nil(), 1);
        let mut w = KillWatch::new(t0, &[(a, 10, 19), (b, 100, 104)]);
        assert_eq!(
            (w.held(), w.redelivered(), w.first, w.all),
            (15, 0, None, None)
        );
        // Another partition, and offsets outside the held ranges, change nothing.
        w.acquired((Uuid::nil(), 7), 10, 19, t0 + Duration::from_secs(1));
        w.acquired(a, 0, 9, t0 + Duration::from_secs(1));
        assert_eq!(w.first, None);
        // Split a range in the middle, then take the rest.
        w.acquired(a, 12, 15, t0 + Duration::from_secs(2));
        assert_eq!(
            (w.redelivered(), w.first),
            (4, Some(Duration::from_secs(2)))
        );
        w.acquired(a, 0, 11, t0 + Duration::from_secs(3));
        w.acquired(a, 16, 40, t0 + Duration::from_secs(3));
        assert_eq!((w.redelivered(), w.all), (10, None));
        w.acquired(b, 100, 104, t0 + Duration::from_secs(5));
        assert_eq!(w.redelivered(), 15);
        assert_eq!(w.all, Some(Duration::from_secs(5)));
        assert_eq!(w.first, Some(Duration::from_secs(2)));
        // A consumer that held nothing: no redelivery to time.
        let empty = KillWatch::new(t0, &[]);
        assert_eq!((empty.held(), empty.first, empty.all), (0, None, None));
    }
}
