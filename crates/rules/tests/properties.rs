//! The incremental evaluator against the reference, on random rules and traces, driven the
//! ways a runtime drives it; the state codec; and that evaluation does not allocate.

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;

use proptest::prelude::*;
use sluice_rules::eval::reference::{self, Moment};
use sluice_rules::eval::{Program, State, Step};
use sluice_rules::rule::{Rule, Span};

/// Counts allocations per thread, so tests running in parallel do not see each other's.
struct Counting;

thread_local! {
    static ALLOCATIONS: Cell<usize> = const { Cell::new(0) };
}

// SAFETY: forwards to `System`; the counter is a const-initialized thread-local `Cell`, which
// does not allocate.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        let _ = ALLOCATIONS.try_with(|count| count.set(count.get() + 1));
        // SAFETY: the caller's contract is passed on unchanged.
        unsafe { System.alloc(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: the caller's contract is passed on unchanged.
        unsafe { System.dealloc(ptr, layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        let _ = ALLOCATIONS.try_with(|count| count.set(count.get() + 1));
        // SAFETY: the caller's contract is passed on unchanged.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

fn allocations() -> usize {
    ALLOCATIONS.with(Cell::get)
}

const NAMES: [&str; 3] = ["a", "b", "c"];

fn rule_strategy() -> impl Strategy<Value = Rule> {
    let leaf = (0..NAMES.len()).prop_map(|i| Rule::Event(NAMES[i].to_owned()));
    leaf.prop_recursive(4, 24, 2, |inner| {
        let span = (1..=4u64).prop_map(Span::from_ms);
        prop_oneof![
            inner.clone().prop_map(|a| Rule::Not(Box::new(a))),
            (inner.clone(), inner.clone()).prop_map(|(a, b)| Rule::And(Box::new(a), Box::new(b))),
            (inner.clone(), inner.clone()).prop_map(|(a, b)| Rule::Or(Box::new(a), Box::new(b))),
            (inner.clone(), inner.clone()).prop_map(|(a, b)| Rule::Then(Box::new(a), Box::new(b))),
            (inner.clone(), inner.clone()).prop_map(|(a, b)| Rule::Then(Box::new(a), Box::new(b))),
            (inner.clone(), span.clone()).prop_map(|(a, d)| Rule::Within(Box::new(a), d)),
            (inner, span).prop_map(|(a, d)| Rule::After(Box::new(a), d)),
        ]
    })
}

fn trace_strategy() -> impl Strategy<Value = Vec<(&'static str, i64)>> {
    prop::collection::vec((0..NAMES.len(), 0..30i64), 0..=12).prop_map(|mut events| {
        events.sort_by_key(|&(_, time)| time);
        events
            .into_iter()
            .map(|(name, time)| (NAMES[name], time))
            .collect()
    })
}

/// How the runtime calls the evaluator.
#[derive(Debug, Clone, Copy)]
enum Driver {
    /// `on_time` at exactly each `next_deadline` up to the next event (and to the horizon).
    Deadlines,
    /// `on_time` only once, at the horizon: `on_event` processes the deadlines before it.
    EventsOnly,
    /// Like `Deadlines`, with the state encoded and decoded after every call.
    Reencoded,
}

fn run(program: &Program, events: &[(&str, i64)], horizon: i64, driver: Driver) -> Vec<Moment> {
    let mut state = program.new_state();
    let mut firings = Vec::new();
    let mut next_deadline = None;
    let record =
        |step: &Step, event: Option<usize>, firings: &mut Vec<Moment>, state: &mut State| {
            if let Some(fired) = &step.fired_before {
                firings.push(Moment {
                    time: fired.time_ms,
                    event: None,
                });
            }
            if let Some(fired) = &step.fired {
                firings.push(Moment {
                    time: fired.time_ms,
                    event,
                });
                for &(_, time) in &fired.events {
                    assert!(
                        time <= fired.time_ms,
                        "a leaf's event is after the firing: {fired:?}"
                    );
                }
            }
            assert_eq!(step.fresh, state.is_fresh());
            if step.fresh {
                assert_eq!(
                    *state,
                    program.new_state(),
                    "a fresh state equals a new one"
                );
            }
            if let Driver::Reencoded = driver {
                let mut bytes = Vec::new();
                state.encode(&mut bytes);
                let decoded = program.decode_state(&bytes).expect("a state decodes");
                assert_eq!(decoded, *state);
                *state = decoded;
            }
            step.next_deadline
        };
    let catch_up = |until: i64,
                    next_deadline: &mut Option<i64>,
                    firings: &mut Vec<Moment>,
                    state: &mut State| {
        if let Driver::EventsOnly = driver {
            return;
        }
        while let Some(deadline) = *next_deadline {
            if deadline > until {
                break;
            }
            let step = program.on_time(state, deadline);
            assert!(step.fired_before.is_none());
            *next_deadline = record(&step, None, firings, state);
        }
    };
    for (index, &(name, time)) in events.iter().enumerate() {
        let Some(id) = program.event_id(name) else {
            continue;
        };
        catch_up(time, &mut next_deadline, &mut firings, &mut state);
        let step = program.on_event(&mut state, id, time);
        next_deadline = record(&step, Some(index), &mut firings, &mut state);
    }
    catch_up(horizon, &mut next_deadline, &mut firings, &mut state);
    if let Driver::EventsOnly = driver {
        let step = program.on_time(&mut state, horizon);
        record(&step, None, &mut firings, &mut state);
    }
    firings
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 2000, ..ProptestConfig::default() })]

    #[test]
    fn incremental_matches_reference(rule in rule_strategy(), events in trace_strategy()) {
        let horizon = reference::horizon(&rule, &events);
        let expected = reference::firings(&rule, &events, horizon);
        let program = Program::compile(&rule);
        for driver in [Driver::Deadlines, Driver::EventsOnly, Driver::Reencoded] {
            let got = run(&program, &events, horizon, driver);
            prop_assert_eq!(&got, &expected, "driver {:?}, rule {:?}", driver, rule);
        }
    }

    #[test]
    fn decode_never_panics(rule in rule_strategy(), bytes in prop::collection::vec(any::<u8>(), 0..200)) {
        let program = Program::compile(&rule);
        let _ = program.decode_state(&bytes);
        // A valid header followed by garbage, so the flag and time checks are reached too.
        let mut encoded = Vec::new();
        program.new_state().encode(&mut encoded);
        encoded.pop();
        encoded.push(1);
        encoded.extend_from_slice(&bytes);
        if let Ok(mut state) = program.decode_state(&encoded) {
            // Any state that decodes can be evaluated, at any time.
            for &time in &[i64::MIN, -5, 0, 7, i64::MAX - 1, i64::MAX] {
                for name in program.event_names().to_vec() {
                    let id = program.event_id(&name).expect("a name of the program");
                    let _ = program.on_event(&mut state, id, time);
                }
                let _ = program.on_time(&mut state, time);
            }
        }
    }

    #[test]
    fn extreme_times_never_panic(rule in rule_strategy(), times in prop::collection::vec(any::<i64>(), 1..8)) {
        let program = Program::compile(&rule);
        let mut state = program.new_state();
        for (i, &time) in times.iter().enumerate() {
            let id = program.event_id(&program.event_names()[i % program.event_names().len()].clone()).expect("a name");
            let _ = program.on_event(&mut state, id, time);
            let _ = program.on_time(&mut state, time.saturating_add(3));
        }
        let _ = program.on_time(&mut state, i64::MAX);
    }
}

/// A state encoded for one rule is refused by another.
#[test]
fn decode_refuses_another_rules_state() {
    let one = Program::compile(&Rule::Within(
        Box::new(Rule::Event("a".into())),
        Span::from_ms(5),
    ));
    let other = Program::compile(&Rule::Within(
        Box::new(Rule::Event("a".into())),
        Span::from_ms(6),
    ));
    let mut state = one.new_state();
    let id = one.event_id("a").expect("a");
    one.on_event(&mut state, id, 0);
    let mut bytes = Vec::new();
    state.encode(&mut bytes);
    assert!(one.decode_state(&bytes).is_ok());
    assert!(other.decode_state(&bytes).is_err());
}

/// `on_event` and `on_time` allocate nothing unless they fire.
#[test]
fn evaluation_does_not_allocate() {
    // "signed_up" THEN (NOT "paid" WITHIN 7) OR ("a" THEN "b" AFTER 3)
    let ev = |name: &str| Box::new(Rule::Event(name.to_owned()));
    let rule = Rule::Or(
        Box::new(Rule::Then(
            ev("signed_up"),
            Box::new(Rule::Within(
                Box::new(Rule::Not(ev("paid"))),
                Span::from_ms(7),
            )),
        )),
        Box::new(Rule::Then(
            ev("a"),
            Box::new(Rule::After(ev("b"), Span::from_ms(3))),
        )),
    );
    let program = Program::compile(&rule);
    let id = |name: &str| program.event_id(name).expect("a name of the rule");
    let mut state = program.new_state();
    let mut fired = 0;
    let mut silent = 0;
    for round in 0..50i64 {
        let base = round * 20;
        for (event, offset) in [
            (id("signed_up"), 0),
            (id("paid"), 1),
            (id("a"), 2),
            (id("paid"), 4),
        ] {
            let before = allocations();
            let step = program.on_event(&mut state, event, base + offset);
            let used = allocations() - before;
            if step.fired.is_none() && step.fired_before.is_none() {
                assert_eq!(used, 0, "on_event allocated without firing");
                silent += 1;
            } else {
                fired += 1;
            }
            for now in [base + offset, base + offset + 3, base + offset + 8] {
                let before = allocations();
                let step = program.on_time(&mut state, now);
                if step.fired.is_none() {
                    assert_eq!(
                        allocations() - before,
                        0,
                        "on_time allocated without firing"
                    );
                    silent += 1;
                } else {
                    fired += 1;
                }
            }
        }
    }
    assert!(
        fired > 0 && silent > 0,
        "both cases are exercised: {fired} fired, {silent} silent"
    );
}
