//! The timer wheel against a model: a `BTreeMap` of (deadline, id), over random interleavings
//! of inserts (around now, far ahead, in the past) and advances (small, huge, backwards); and
//! its cost on a million timers.

use std::collections::BTreeMap;
use std::time::Instant;

use proptest::prelude::*;
use sluice_rules::wheel::TimerWheel;

const DAY_MS: i64 = 24 * 3_600 * 1_000;
const YEAR_MS: i64 = 365 * DAY_MS;

#[derive(Debug, Clone)]
enum Op {
    /// Insert with a deadline this far from the wheel's current time.
    Insert(i64),
    /// Advance to the current time plus this (negative: a time before the current one).
    Advance(i64),
}

fn delta() -> impl Strategy<Value = i64> {
    prop_oneof![
        4 => -5i64..200,
        2 => 0i64..100_000,
        1 => 0i64..40 * DAY_MS,
        1 => 0i64..12 * YEAR_MS,
        1 => -10 * YEAR_MS..0,
        1 => Just(64),
        1 => Just(4_096),
    ]
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![3 => delta().prop_map(Op::Insert), 2 => delta().prop_map(Op::Advance)]
}

/// Runs `ops` on a wheel and on the model and checks they agree after every step.
fn check(start_ms: i64, ops: &[Op]) -> Result<(), TestCaseError> {
    let mut wheel = TimerWheel::new(start_ms);
    let mut model: BTreeMap<(i64, u32), ()> = BTreeMap::new();
    let mut now_ms = start_ms;
    let mut out = Vec::new();
    for (id, op) in ops.iter().enumerate() {
        let id = id as u32;
        match *op {
            Op::Insert(delta) => {
                let deadline_ms = now_ms.saturating_add(delta);
                wheel.insert(deadline_ms, id);
                model.insert((deadline_ms, id), ());
            }
            Op::Advance(delta) => {
                let to_ms = now_ms.saturating_add(delta);
                out.clear();
                wheel.advance(to_ms, &mut out);
                prop_assert!(
                    out.windows(2).all(|w| w[0].0 <= w[1].0),
                    "popped out of order: {out:?}"
                );
                // Equal deadlines come out in no particular order: compare sorted.
                let mut popped = out.clone();
                popped.sort_unstable();
                let mut expected = Vec::new();
                while let Some(entry) = model.first_entry() {
                    if entry.key().0 > to_ms {
                        break;
                    }
                    expected.push(entry.remove_entry().0);
                }
                prop_assert_eq!(popped, expected);
                now_ms = now_ms.max(to_ms);
                prop_assert_eq!(wheel.now_ms(), now_ms);
            }
        }
        prop_assert_eq!(wheel.len(), model.len());
        prop_assert_eq!(wheel.is_empty(), model.is_empty());
        prop_assert_eq!(wheel.next_deadline(), model.keys().next().map(|&(d, _)| d));
    }
    // Everything still held comes out at the end of time.
    out.clear();
    wheel.advance(i64::MAX, &mut out);
    let mut popped = out.clone();
    popped.sort_unstable();
    prop_assert_eq!(popped, model.into_keys().collect::<Vec<_>>());
    prop_assert!(wheel.is_empty());
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn matches_a_sorted_map(
        start_ms in prop_oneof![Just(0i64), Just(1_767_225_600_000i64), -YEAR_MS..YEAR_MS],
        ops in prop::collection::vec(op(), 0..200),
    ) {
        check(start_ms, &ops)?;
    }
}

#[test]
fn far_ends_of_the_timeline() {
    use Op::*;
    let ops = [
        Insert(i64::MAX),
        Insert(0),
        Advance(i64::MAX / 2),
        Insert(-1),
        Advance(i64::MAX),
    ];
    check(i64::MIN, &ops).unwrap();
    check(i64::MIN / 2, &ops).unwrap();
    check(0, &ops).unwrap();
}

/// Deterministic pseudo-random numbers (xorshift64*) for the load test.
struct XorShift(u64);

impl XorShift {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
}

/// A million timers spread over 30 days, popped by advancing a simulated clock in 1 s steps
/// for the first hour and then in one jump, and by a final jump past them all.
#[test]
fn a_million_timers_in_well_under_a_second() {
    const TIMERS: usize = 1_000_000;
    let start_ms = 1_767_225_600_000i64;
    let mut rng = XorShift(0x9E37_79B9_7F4A_7C15);
    let began = Instant::now();
    let mut wheel = TimerWheel::new(start_ms);
    for id in 0..TIMERS as u32 {
        let deadline_ms = start_ms + (rng.next() % (30 * DAY_MS as u64)) as i64;
        wheel.insert(deadline_ms, id);
    }
    let mut out = Vec::with_capacity(TIMERS);
    let mut popped = 0;
    let mut last_ms = i64::MIN;
    let mut advance = |wheel: &mut TimerWheel<u32>, to_ms: i64| {
        out.clear();
        wheel.advance(to_ms, &mut out);
        assert!(out.iter().all(|&(d, _)| d <= to_ms && d >= last_ms));
        assert!(out.windows(2).all(|w| w[0].0 <= w[1].0));
        last_ms = out.last().map_or(last_ms, |&(d, _)| d);
        popped += out.len();
    };
    for second in 1..=3_600 {
        advance(&mut wheel, start_ms + second * 1_000);
    }
    advance(&mut wheel, start_ms + 7 * DAY_MS);
    advance(&mut wheel, start_ms + 31 * DAY_MS);
    let took = began.elapsed();
    assert_eq!(popped, TIMERS);
    assert!(wheel.is_empty());
    // The bound is for release builds; a debug build gets ten times more (still seconds, not
    // the minutes a per-millisecond loop would take).
    let bound_ms = if cfg!(debug_assertions) { 5_000 } else { 500 };
    assert!(
        took.as_millis() < bound_ms,
        "1M inserts and pops took {took:?}"
    );
}
