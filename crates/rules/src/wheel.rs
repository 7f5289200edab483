//! The timer wheel time bounds fire from.
//!
//! A rule such as `"signed_up" THEN (NOT "paid" WITHIN 7d)` fires when a deadline passes with
//! nothing having happened, so the evaluator needs "wake me at `t`" for every entity with a
//! pending bound. [`TimerWheel`] holds those deadlines: the trigger inserts one per pending
//! bound, sleeps until [`TimerWheel::next_deadline`], then calls [`TimerWheel::advance`] with
//! the clock's time and feeds the popped items back to the evaluator. It does no I/O and reads
//! no clock: time only moves when the caller passes it in.
//!
//! # Levels
//!
//! A hierarchical hashed timing wheel (Varghese and Lauck, "Hashed and Hierarchical Timing
//! Wheels", 1987; the layout is tokio's timer's). Time is milliseconds since the wheel was
//! built ("elapsed", a `u64`). There are [`LEVELS`] levels of [`SLOTS`] slots:
//!
//! | level | one slot spans | the level spans |
//! |-------|----------------|-----------------|
//! | 0     | 1 ms           | 64 ms           |
//! | 1     | 64 ms          | ~4.1 s          |
//! | 2     | ~4.1 s         | ~4.4 min        |
//! | 3     | ~4.4 min       | ~4.7 h          |
//! | 4     | ~4.7 h         | ~12.4 days      |
//! | 5     | ~12.4 days     | ~2.2 years      |
//! | 6..10 | ...            | up to 2^64 ms   |
//!
//! An item goes to the level of the highest 6-bit digit in which its deadline differs from the
//! current time, in the slot given by the deadline's digit at that level. So a level holds only
//! deadlines that share every higher digit with "now", and each of its occupied slots is at or
//! after the slot "now" is in: the lowest set bit of a level's occupancy mask is its next slot,
//! and the lowest occupied level holds the earliest deadline (its next slot starts after the
//! whole current slot of the level below has passed). Eleven levels cover all 64 bits, so any
//! `i64` deadline fits and no overflow list is needed; empty levels cost one mask test.
//!
//! # The cascade
//!
//! [`TimerWheel::advance`] repeatedly takes the earliest occupied slot whose start is not after
//! the target time and moves the current time to that start. A level-0 slot is one millisecond,
//! so all its items are due: they are popped. A slot of a higher level is *cascaded*: each of
//! its items is placed again relative to the new current time, which puts it on a lower level
//! (its deadline now shares the digit of that level with "now"). An item cascades at most once
//! per level, so the cost of an advance is proportional to the items popped and cascaded plus
//! the levels, never to the elapsed milliseconds: a jump of 7 days visits only occupied slots.
//!
//! Deadlines at or before the current time when inserted skip the levels: they wait in an
//! "overdue" list, which the next advance sorts and pops first (they are all earlier than
//! anything on the levels, which hold only deadlines after the current time).
//!
//! # No removal
//!
//! There is no way to remove an item: a hashed wheel cannot find one without a handle, and
//! handles would cost an allocation or a slab per insert. Callers make items self-checking
//! instead: put the entity and a generation (or the deadline it was armed for) in the item,
//! and when it pops, compare with the entity's current state and drop it if it is stale. An
//! entity re-armed many times leaves one stale item per re-arm; each is dropped when it pops.

use std::fmt;

/// Bits of a deadline each level indexes.
const SLOT_BITS: u32 = 6;
/// Slots per level: one per value of a level's 6-bit digit, so an occupancy mask is a `u64`.
pub const SLOTS: usize = 1 << SLOT_BITS;
/// Levels: 11 × 6 bits ≥ 64 bits, so every `u64` offset from the wheel's start has a level.
pub const LEVELS: usize = 11;

/// Timers keyed by a deadline in milliseconds (any `i64` timeline, normally unix ms), each
/// carrying an item of type `T`. See the module documentation for the layout.
pub struct TimerWheel<T> {
    /// The wheel's time 0 in the caller's timeline: `new`'s `now_ms`.
    origin_ms: i64,
    /// The current time, in ms since `origin_ms`. Only increases.
    elapsed_ms: u64,
    /// Levels 0..LEVELS, each with its occupancy mask and slots.
    levels: Box<[Level<T>]>,
    /// Items inserted with a deadline at or before the current time, in insertion order until
    /// the next `advance` sorts them.
    overdue: Vec<(i64, T)>,
    /// The earliest deadline in `overdue` (meaningless when it is empty).
    overdue_min_ms: i64,
    /// A spare vector a cascaded slot is swapped with, so slots and this keep their capacity
    /// and a cascade allocates nothing once the wheel is warm.
    scratch: Vec<(i64, T)>,
    /// Items held, overdue ones included.
    len: usize,
}

struct Level<T> {
    /// Bit `s` is set when `slots[s]` is not empty.
    occupied: u64,
    slots: [Vec<(i64, T)>; SLOTS],
    /// The earliest deadline in each non-empty slot, so `next_deadline` is exact without a scan.
    min_deadline_ms: [i64; SLOTS],
}

impl<T> Level<T> {
    fn new() -> Self {
        Self {
            occupied: 0,
            slots: std::array::from_fn(|_| Vec::new()),
            min_deadline_ms: [i64::MAX; SLOTS],
        }
    }
}

impl<T> TimerWheel<T> {
    /// An empty wheel whose current time is `now_ms`.
    pub fn new(now_ms: i64) -> Self {
        Self {
            origin_ms: now_ms,
            elapsed_ms: 0,
            levels: (0..LEVELS).map(|_| Level::new()).collect(),
            overdue: Vec::new(),
            overdue_min_ms: i64::MAX,
            scratch: Vec::new(),
            len: 0,
        }
    }

    /// The wheel's current time: `new`'s `now_ms` or the latest `advance`'s, whichever is later.
    pub fn now_ms(&self) -> i64 {
        self.origin_ms.wrapping_add(self.elapsed_ms as i64)
    }

    /// Items held (due or not).
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the wheel holds no items.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Adds `item`, due at `deadline_ms`. O(1): one slot push, no allocation beyond the slot
    /// vector's growth. A deadline at or before [`now_ms`](Self::now_ms) is due at the next
    /// [`advance`](Self::advance), which returns it with its own (past) deadline.
    pub fn insert(&mut self, deadline_ms: i64, item: T) {
        self.len += 1;
        if deadline_ms <= self.now_ms() {
            self.overdue_min_ms = if self.overdue.is_empty() {
                deadline_ms
            } else {
                self.overdue_min_ms.min(deadline_ms)
            };
            self.overdue.push((deadline_ms, item));
        } else {
            place(
                &mut self.levels,
                self.origin_ms,
                self.elapsed_ms,
                deadline_ms,
                item,
            );
        }
    }

    /// The earliest deadline held, exactly (not a bound), or `None` when the wheel is empty.
    /// It may be at or before `now_ms()` (an overdue insert). O(levels).
    pub fn next_deadline(&self) -> Option<i64> {
        let wheel = self
            .levels
            .iter()
            .find(|level| level.occupied != 0)
            .map(|level| {
                // The lowest occupied level's first occupied slot holds the earliest deadlines.
                level.min_deadline_ms[level.occupied.trailing_zeros() as usize]
            });
        let overdue = (!self.overdue.is_empty()).then_some(self.overdue_min_ms);
        match (wheel, overdue) {
            (Some(wheel), Some(overdue)) => Some(wheel.min(overdue)),
            (wheel, overdue) => wheel.or(overdue),
        }
    }

    /// Moves the current time to `now_ms` and appends to `out` every item with a deadline at or
    /// before `now_ms`, as `(deadline_ms, item)` in non-decreasing deadline order (items with
    /// equal deadlines in no particular order). Time never goes back: an earlier `now_ms` leaves
    /// the current time as it is and pops only the overdue inserts due by `now_ms`.
    ///
    /// Cost: proportional to the items popped and cascaded plus the levels, not to the time
    /// that passed (see the module documentation).
    pub fn advance(&mut self, now_ms: i64, out: &mut Vec<(i64, T)>) {
        let popped_before = out.len();
        self.pop_overdue(now_ms, out);
        if now_ms > self.now_ms() {
            let target = (now_ms as u64).wrapping_sub(self.origin_ms as u64);
            while let Some((level, slot)) = self.next_slot() {
                let start = slot_start_ms(self.elapsed_ms, level, slot);
                if start > target {
                    break;
                }
                debug_assert!(
                    start >= self.elapsed_ms,
                    "the wheel's time only moves forward"
                );
                self.elapsed_ms = start;
                self.take_slot(level, slot, out);
            }
            self.elapsed_ms = target;
        }
        self.len -= out.len() - popped_before;
    }

    /// Pops the overdue items due by `now_ms`, earliest first.
    fn pop_overdue(&mut self, now_ms: i64, out: &mut Vec<(i64, T)>) {
        if self.overdue.is_empty() || self.overdue_min_ms > now_ms {
            return;
        }
        // Stable and linear on an already sorted list, which is what an earlier `now_ms`
        // leaves behind.
        self.overdue.sort_by_key(|&(deadline_ms, _)| deadline_ms);
        let due = self
            .overdue
            .partition_point(|&(deadline_ms, _)| deadline_ms <= now_ms);
        out.extend(self.overdue.drain(..due));
        self.overdue_min_ms = self
            .overdue
            .first()
            .map_or(i64::MAX, |&(deadline_ms, _)| deadline_ms);
    }

    /// The earliest occupied slot: the first occupied slot of the lowest occupied level.
    fn next_slot(&self) -> Option<(usize, usize)> {
        self.levels
            .iter()
            .position(|level| level.occupied != 0)
            .map(|level| (level, self.levels[level].occupied.trailing_zeros() as usize))
    }

    /// Empties a slot whose start is the current time: pops a level-0 slot (all its items are
    /// due now), cascades a higher one to lower levels.
    fn take_slot(&mut self, level: usize, slot: usize, out: &mut Vec<(i64, T)>) {
        let now_ms = self.now_ms();
        let entry = &mut self.levels[level];
        entry.occupied &= !(1 << slot);
        entry.min_deadline_ms[slot] = i64::MAX;
        if level == 0 {
            debug_assert!(entry.slots[slot].iter().all(|&(d, _)| d == now_ms));
            out.append(&mut entry.slots[slot]);
            return;
        }
        std::mem::swap(&mut entry.slots[slot], &mut self.scratch);
        for (deadline_ms, item) in self.scratch.drain(..) {
            debug_assert!(deadline_ms >= now_ms);
            place(
                &mut self.levels,
                self.origin_ms,
                self.elapsed_ms,
                deadline_ms,
                item,
            );
        }
    }
}

/// Puts an item with `deadline_ms` at or after the current time on its level and slot.
fn place<T>(levels: &mut [Level<T>], origin_ms: i64, elapsed_ms: u64, deadline_ms: i64, item: T) {
    // The deadline's offset from the origin: non-negative because the deadline is not before
    // the current time, which is not before the origin; the wrapping difference of the two
    // `i64`s is exact in `u64`.
    let offset_ms = (deadline_ms as u64).wrapping_sub(origin_ms as u64);
    debug_assert!(offset_ms >= elapsed_ms);
    // The highest bit in which the deadline differs from now (bit 5 at least, so equal times
    // land on level 0), and the level whose digit holds it.
    let differing = (offset_ms ^ elapsed_ms) | (SLOTS as u64 - 1);
    let level = ((63 - differing.leading_zeros()) / SLOT_BITS) as usize;
    let slot = ((offset_ms >> (SLOT_BITS * level as u32)) & (SLOTS as u64 - 1)) as usize;
    let entry = &mut levels[level];
    if entry.occupied & (1 << slot) == 0 {
        entry.occupied |= 1 << slot;
        entry.min_deadline_ms[slot] = deadline_ms;
    } else {
        entry.min_deadline_ms[slot] = entry.min_deadline_ms[slot].min(deadline_ms);
    }
    entry.slots[slot].push((deadline_ms, item));
}

/// Where slot `slot` of `level` starts, in ms since the origin, given that the current time
/// `elapsed_ms` is in the same window of the level above.
fn slot_start_ms(elapsed_ms: u64, level: usize, slot: usize) -> u64 {
    let slot_shift = SLOT_BITS * level as u32;
    // The bits of `elapsed_ms` that name this level's window; the top level's window is the
    // whole `u64` range, so nothing is kept.
    let window_base = elapsed_ms.checked_shr(slot_shift + SLOT_BITS).unwrap_or(0);
    let window_base = window_base.checked_shl(slot_shift + SLOT_BITS).unwrap_or(0);
    window_base | ((slot as u64) << slot_shift)
}

impl<T> fmt::Debug for TimerWheel<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TimerWheel")
            .field("now_ms", &self.now_ms())
            .field("len", &self.len)
            .field("overdue", &self.overdue.len())
            .field("next_deadline", &self.next_deadline())
            .finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn advance(wheel: &mut TimerWheel<u32>, now_ms: i64) -> Vec<(i64, u32)> {
        let mut out = Vec::new();
        wheel.advance(now_ms, &mut out);
        out
    }

    #[test]
    fn pops_in_deadline_order() {
        let mut wheel = TimerWheel::new(1_000);
        for (i, deadline) in [1_500, 1_001, 1_064, 70_000, 1_063].into_iter().enumerate() {
            wheel.insert(deadline, i as u32);
        }
        assert_eq!(wheel.len(), 5);
        assert_eq!(wheel.next_deadline(), Some(1_001));
        assert_eq!(advance(&mut wheel, 1_000), vec![]);
        assert_eq!(
            advance(&mut wheel, 1_064),
            vec![(1_001, 1), (1_063, 4), (1_064, 2)]
        );
        assert_eq!(wheel.next_deadline(), Some(1_500));
        assert_eq!(advance(&mut wheel, 69_999), vec![(1_500, 0)]);
        assert_eq!(wheel.next_deadline(), Some(70_000));
        assert_eq!(advance(&mut wheel, 70_000), vec![(70_000, 3)]);
        assert!(wheel.is_empty());
        assert_eq!(wheel.next_deadline(), None);
    }

    #[test]
    fn past_deadlines_are_due_at_the_next_advance() {
        let mut wheel = TimerWheel::new(1_000);
        wheel.insert(1_000, 1);
        wheel.insert(5, 2);
        wheel.insert(1_001, 3);
        assert_eq!(wheel.next_deadline(), Some(5));
        // An earlier time does not move the wheel back but pops what is due by then.
        assert_eq!(advance(&mut wheel, 500), vec![(5, 2)]);
        assert_eq!(wheel.now_ms(), 1_000);
        assert_eq!(advance(&mut wheel, 1_000), vec![(1_000, 1)]);
        assert_eq!(advance(&mut wheel, 2_000), vec![(1_001, 3)]);
        assert_eq!(wheel.now_ms(), 2_000);
    }

    #[test]
    fn next_deadline_is_exact_on_higher_levels() {
        let mut wheel = TimerWheel::new(0);
        let week_ms = 7 * 24 * 3_600 * 1_000;
        wheel.insert(week_ms + 17, 1);
        wheel.insert(week_ms + 3, 2);
        assert_eq!(wheel.next_deadline(), Some(week_ms + 3));
        assert_eq!(advance(&mut wheel, week_ms), vec![]);
        assert_eq!(wheel.next_deadline(), Some(week_ms + 3));
        assert_eq!(
            advance(&mut wheel, week_ms + 100),
            vec![(week_ms + 3, 2), (week_ms + 17, 1)]
        );
    }

    #[test]
    fn extreme_times() {
        let mut wheel = TimerWheel::new(i64::MIN);
        wheel.insert(i64::MAX, 1);
        wheel.insert(0, 2);
        wheel.insert(i64::MIN, 3);
        assert_eq!(wheel.next_deadline(), Some(i64::MIN));
        assert_eq!(advance(&mut wheel, 0), vec![(i64::MIN, 3), (0, 2)]);
        assert_eq!(wheel.next_deadline(), Some(i64::MAX));
        assert_eq!(advance(&mut wheel, i64::MAX - 1), vec![]);
        assert_eq!(advance(&mut wheel, i64::MAX), vec![(i64::MAX, 1)]);
        assert!(wheel.is_empty());
    }

    #[test]
    fn a_long_jump_visits_only_occupied_slots() {
        // Ten years in one step: would take minutes if the wheel looped per millisecond.
        let mut wheel = TimerWheel::new(0);
        let year_ms: i64 = 365 * 24 * 3_600 * 1_000;
        wheel.insert(10 * year_ms, 1);
        wheel.insert(30 * 24 * 3_600 * 1_000, 2);
        assert_eq!(
            advance(&mut wheel, 11 * year_ms),
            vec![(30 * 24 * 3_600 * 1_000, 2), (10 * year_ms, 1)]
        );
    }
}
