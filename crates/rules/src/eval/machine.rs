//! What one moment does to a state: the node state machines of the module map in `mod.rs`.
//!
//! Every function here is allocation-free except [`Program::collect`], which builds a
//! [`Firing`]. Indexes come from the program's own structure and the state's shape is checked
//! by the callers, so no input (times, event ids, decoded states) can make them panic.

use super::{EventId, Firing, Kind, MAX_DEADLINE_MOMENTS_PER_CALL, Program, State};

/// Flag: the node's value.
pub(super) const VALUE: u8 = 1;
/// Flag: the node's value can never change again.
pub(super) const SETTLED: u8 = 2;
/// Flag: `THEN` is in an attempt (else waiting); `AFTER` has opened.
pub(super) const PHASE: u8 = 4;
/// Every flag bit in use.
pub(super) const ALL_FLAGS: u8 = VALUE | SETTLED | PHASE;

/// "No deadline": a deadline that would be past `i64::MAX` never comes.
pub(super) const NEVER: i64 = i64::MAX;

/// A moment: an event at `time`, or (no event) a deadline moment at `time`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Moment {
    pub(super) time: i64,
    pub(super) event: Option<EventId>,
}

impl Moment {
    fn deadline(time: i64) -> Moment {
        Moment { time, event: None }
    }

    /// Whether a deadline at `at` is due at this moment: deadline moments at a time come
    /// before the events at that time. (An event past a pending deadline only happens when
    /// [`MAX_DEADLINE_MOMENTS_PER_CALL`] cut the deadlines short; the bound then closes first.)
    fn reaches(self, at: i64) -> bool {
        at != NEVER && (self.time > at || (self.time == at && self.event.is_none()))
    }
}

/// `base + span`, or [`NEVER`] past `i64::MAX`.
fn deadline(base: i64, span: i64) -> i64 {
    base.checked_add(span).unwrap_or(NEVER)
}

impl Program {
    /// Processes every deadline at or before `upto`, one moment per distinct time. Returns a
    /// firing (after which the state is fresh, so no deadline is left).
    pub(super) fn run_deadlines(&self, state: &mut State, upto: i64) -> Option<Firing> {
        let mut moments = 0;
        while state.started
            && state.next_deadline_ms != NEVER
            && state.next_deadline_ms <= upto
            && moments < MAX_DEADLINE_MOMENTS_PER_CALL
        {
            moments += 1;
            let time = state.next_deadline_ms.max(state.last_time_ms);
            state.last_time_ms = time;
            if let Some(firing) = self.moment(state, Moment::deadline(time)) {
                return Some(firing);
            }
        }
        None
    }

    /// One moment for the root: starts the evaluation at an event if none runs, steps the
    /// tree, fires (and goes back to fresh) when the root is true.
    pub(super) fn moment(&self, state: &mut State, moment: Moment) -> Option<Firing> {
        if !state.started {
            // Only an event starts an evaluation.
            moment.event?;
            state.started = true;
            self.reset(state, 0, moment.time);
        }
        self.step(state, 0, moment);
        if state.flags[0] & VALUE != 0 {
            let firing = self.collect(state, moment.time);
            self.clear(state);
            return Some(firing);
        }
        state.next_deadline_ms = self.next_deadline(state, 0);
        None
    }

    /// Back to [`Program::new_state`], in place.
    fn clear(&self, state: &mut State) {
        state.flags.fill(0);
        state.times.fill(0);
        state.last_time_ms = i64::MIN;
        state.next_deadline_ms = NEVER;
        state.started = false;
    }

    /// Puts the subtree at `at` back to its start with base time `base` (not yet evaluated).
    pub(super) fn reset(&self, state: &mut State, at: usize, base: i64) {
        let end = self.nodes[at].end as usize;
        for i in at..end {
            let node = self.nodes[i];
            state.flags[i] = 0;
            if let Kind::Within(span) | Kind::After(span) = node.kind {
                state.times[node.slot as usize] = deadline(base, span);
            }
        }
    }

    /// The second child of a binary node.
    fn second(&self, at: usize) -> usize {
        self.nodes[at + 1].end as usize
    }

    /// Evaluates the node at `at` at one moment (its children first, as needed).
    pub(super) fn step(&self, state: &mut State, at: usize, moment: Moment) {
        let flags = state.flags[at];
        if flags & SETTLED != 0 {
            return;
        }
        let node = self.nodes[at];
        let new = match node.kind {
            Kind::Event(id) => {
                if moment.event == Some(id) {
                    state.times[node.slot as usize] = moment.time;
                    VALUE | SETTLED
                } else {
                    0
                }
            }
            Kind::Not => {
                self.step(state, at + 1, moment);
                let child = state.flags[at + 1];
                (child & SETTLED) | ((child & VALUE) ^ VALUE)
            }
            Kind::And | Kind::Or => {
                let (a, b) = (at + 1, self.second(at));
                // AND is decided by a settled false child, OR by a settled true one.
                let deciding = if node.kind == Kind::And {
                    SETTLED
                } else {
                    SETTLED | VALUE
                };
                self.step(state, a, moment);
                let fa = state.flags[a] & (VALUE | SETTLED);
                if fa == deciding {
                    fa
                } else {
                    self.step(state, b, moment);
                    let fb = state.flags[b] & (VALUE | SETTLED);
                    if fb == deciding {
                        fb
                    } else {
                        let value = if node.kind == Kind::And {
                            fa & fb
                        } else {
                            fa | fb
                        } & VALUE;
                        value | (fa & fb & SETTLED)
                    }
                }
            }
            Kind::Within(_) => {
                let close = state.times[node.slot as usize];
                if moment.reaches(close) {
                    // B's value after the last moment before the close; B's own deadlines at
                    // the close no longer matter.
                    (state.flags[at + 1] & VALUE) | SETTLED
                } else {
                    self.step(state, at + 1, moment);
                    let child = state.flags[at + 1];
                    if child & SETTLED != 0 {
                        child & (VALUE | SETTLED)
                    } else {
                        0
                    }
                }
            }
            Kind::After(_) => {
                let b = at + 1;
                if flags & PHASE != 0 {
                    self.step(state, b, moment);
                } else {
                    let open = state.times[node.slot as usize];
                    if !moment.reaches(open) {
                        state.flags[at] = 0;
                        return;
                    }
                    self.reset(state, b, open);
                    let opening = Moment::deadline(open);
                    self.step(state, b, opening);
                    if moment != opening {
                        self.step(state, b, moment);
                    }
                }
                PHASE | (state.flags[b] & (VALUE | SETTLED))
            }
            Kind::Then => self.step_then(state, at, moment),
        };
        state.flags[at] = new;
    }

    /// `A THEN B` at one moment; returns its new flags.
    fn step_then(&self, state: &mut State, at: usize, moment: Moment) -> u8 {
        let (a, b) = (at + 1, self.second(at));
        let time = moment.time;
        let mut attempt = state.flags[at] & PHASE != 0;
        if attempt {
            self.step(state, b, moment);
        }
        let mut restarts = 0;
        loop {
            if !attempt {
                self.step(state, a, moment);
                let fa = state.flags[a];
                if fa & VALUE == 0 {
                    // Waiting; settled once A is settled false.
                    return fa & SETTLED;
                }
                // An attempt: B sees only what comes after this moment, and is evaluated now.
                self.reset(state, b, time);
                self.step(state, b, Moment::deadline(time));
            }
            let fb = state.flags[b] & (VALUE | SETTLED);
            if fb != SETTLED {
                return PHASE | fb;
            }
            // B settled false: restart, with A seeing this moment's event.
            restarts += 1;
            attempt = false;
            self.reset(state, a, time);
            if restarts == 2 {
                // Failed again at once: the event is consumed and A starts after it. (B is
                // never settled at its own start, so this cannot happen; it bounds the work.)
                return 0;
            }
        }
    }

    /// The earliest pending deadline under `at`, [`NEVER`] if none.
    pub(super) fn next_deadline(&self, state: &State, at: usize) -> i64 {
        let flags = state.flags[at];
        if flags & SETTLED != 0 {
            return NEVER;
        }
        let node = self.nodes[at];
        match node.kind {
            Kind::Event(_) => NEVER,
            Kind::Not => self.next_deadline(state, at + 1),
            Kind::And | Kind::Or => self
                .next_deadline(state, at + 1)
                .min(self.next_deadline(state, self.second(at))),
            Kind::Within(_) => {
                state.times[node.slot as usize].min(self.next_deadline(state, at + 1))
            }
            Kind::After(_) if flags & PHASE != 0 => self.next_deadline(state, at + 1),
            Kind::After(_) => state.times[node.slot as usize],
            Kind::Then if flags & PHASE != 0 => self.next_deadline(state, self.second(at)),
            Kind::Then => self.next_deadline(state, at + 1),
        }
    }

    /// The firing at `time`: the true leaves of the live parts of the tree.
    fn collect(&self, state: &State, time: i64) -> Firing {
        let mut events = Vec::new();
        self.collect_leaves(state, 0, &mut events);
        Firing {
            time_ms: time,
            events,
        }
    }

    fn collect_leaves(&self, state: &State, at: usize, out: &mut Vec<(EventId, i64)>) {
        let node = self.nodes[at];
        let flags = state.flags[at];
        match node.kind {
            Kind::Event(id) => {
                if flags & VALUE != 0 {
                    out.push((id, state.times[node.slot as usize]));
                }
            }
            Kind::Not | Kind::Within(_) => self.collect_leaves(state, at + 1, out),
            Kind::After(_) => {
                if flags & PHASE != 0 {
                    self.collect_leaves(state, at + 1, out);
                }
            }
            Kind::And | Kind::Or => {
                self.collect_leaves(state, at + 1, out);
                self.collect_leaves(state, self.second(at), out);
            }
            Kind::Then => {
                // The A that started the attempt is kept as it was; B only counts in an attempt.
                self.collect_leaves(state, at + 1, out);
                if flags & PHASE != 0 {
                    self.collect_leaves(state, self.second(at), out);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::{Program, Step};
    use crate::rule::{Rule, Span};

    fn ev(name: &str) -> Box<Rule> {
        Box::new(Rule::Event(name.to_owned()))
    }
    fn not(a: Box<Rule>) -> Box<Rule> {
        Box::new(Rule::Not(a))
    }
    fn and(a: Box<Rule>, b: Box<Rule>) -> Box<Rule> {
        Box::new(Rule::And(a, b))
    }
    fn or(a: Box<Rule>, b: Box<Rule>) -> Box<Rule> {
        Box::new(Rule::Or(a, b))
    }
    fn then(a: Box<Rule>, b: Box<Rule>) -> Box<Rule> {
        Box::new(Rule::Then(a, b))
    }
    fn within(a: Box<Rule>, ms: u64) -> Box<Rule> {
        Box::new(Rule::Within(a, Span::from_ms(ms)))
    }
    fn after(a: Box<Rule>, ms: u64) -> Box<Rule> {
        Box::new(Rule::After(a, Span::from_ms(ms)))
    }

    /// Runs events (and deadlines at `next_deadline`, up to `until`); returns the firing
    /// times, tagged with the event name or "deadline".
    fn run(rule: &Rule, events: &[(&str, i64)], until: i64) -> Vec<(String, i64)> {
        let program = Program::compile(rule);
        let mut state = program.new_state();
        let mut out = Vec::new();
        let mut next: Option<i64> = None;
        let note = |step: &Step, name: &str, out: &mut Vec<(String, i64)>| {
            if let Some(f) = &step.fired_before {
                out.push(("deadline".to_owned(), f.time_ms));
            }
            if let Some(f) = &step.fired {
                out.push((name.to_owned(), f.time_ms));
            }
            step.next_deadline
        };
        for &(name, time) in events.iter().chain([("", until)].iter()) {
            while let Some(deadline) = next.filter(|&d| d <= time) {
                let step = program.on_time(&mut state, deadline);
                next = note(&step, "deadline", &mut out);
            }
            if let Some(id) = program.event_id(name) {
                let step = program.on_event(&mut state, id, time);
                next = note(&step, name, &mut out);
            }
        }
        out
    }

    fn at(name: &str, time: i64) -> (String, i64) {
        (name.to_owned(), time)
    }

    #[test]
    fn event_is_true_once_seen_and_rearms_after_firing() {
        let rule = ev("a");
        assert_eq!(
            run(&rule, &[("a", 1), ("a", 4)], 10),
            [at("a", 1), at("a", 4)]
        );
    }

    #[test]
    fn not_is_false_at_the_events_it_names() {
        assert_eq!(run(&not(ev("a")), &[("a", 1), ("a", 2)], 10), []);
        // On the right of THEN it is evaluated when the attempt starts: true at once.
        assert_eq!(
            run(&then(ev("a"), not(ev("b"))), &[("a", 1)], 10),
            [at("a", 1)]
        );
    }

    #[test]
    fn and_or_settle_early() {
        // b first settles NOT b false, so the AND is settled false for this entity.
        let rule = and(ev("a"), not(ev("b")));
        assert_eq!(run(&rule, &[("b", 0), ("a", 1)], 10), []);
        assert_eq!(run(&rule, &[("a", 0)], 10), [at("a", 0)]);
        let rule = and(ev("a"), ev("b"));
        assert_eq!(
            run(&rule, &[("a", 0), ("a", 1), ("b", 2)], 10),
            [at("b", 2)]
        );
        let rule = or(ev("a"), ev("b"));
        assert_eq!(run(&rule, &[("b", 3)], 10), [at("b", 3)]);
    }

    #[test]
    fn within_excludes_its_close() {
        let rule = then(ev("a"), within(ev("b"), 5));
        assert_eq!(run(&rule, &[("a", 0), ("b", 4)], 20), [at("b", 4)]);
        assert_eq!(run(&rule, &[("a", 0), ("b", 5)], 20), []);
        let rule = then(ev("a"), within(not(ev("b")), 5));
        assert_eq!(run(&rule, &[("a", 0)], 20), [at("deadline", 5)]);
        assert_eq!(run(&rule, &[("a", 0), ("b", 4)], 20), []);
        // b at the close comes after the close: NOT b held through the window.
        assert_eq!(run(&rule, &[("a", 0), ("b", 5)], 20), [at("deadline", 5)]);
    }

    #[test]
    fn after_includes_its_open() {
        let rule = then(ev("a"), after(ev("b"), 5));
        assert_eq!(run(&rule, &[("a", 0), ("b", 5)], 20), [at("b", 5)]);
        assert_eq!(run(&rule, &[("a", 0), ("b", 4)], 20), []);
        assert_eq!(
            run(&rule, &[("a", 0), ("b", 4), ("b", 9)], 20),
            [at("b", 9)]
        );
        let rule = then(ev("a"), after(not(ev("b")), 5));
        assert_eq!(run(&rule, &[("a", 0), ("b", 3)], 20), [at("deadline", 5)]);
    }

    #[test]
    fn then_restarts_with_the_event_that_ended_the_attempt() {
        // Every reading restarts the 5 ms window.
        let rule = then(ev("r"), within(not(ev("r")), 5));
        assert_eq!(
            run(&rule, &[("r", 0), ("r", 3), ("r", 7)], 30),
            [at("deadline", 12)]
        );
        // A restart whose left side is false waits for the next a.
        let rule = then(ev("a"), within(ev("b"), 5));
        assert_eq!(
            run(&rule, &[("a", 0), ("a", 9), ("b", 12)], 30),
            [at("b", 12)]
        );
    }

    #[test]
    fn then_waiting_with_a_settled_false_left_is_settled() {
        let program = Program::compile(&then(and(ev("a"), not(ev("b"))), ev("c")));
        let mut state = program.new_state();
        let b = program.event_id("b").expect("b");
        let step = program.on_event(&mut state, b, 0);
        assert!(!step.fresh && step.next_deadline.is_none());
        assert_eq!(program.next_deadline(&state, 0), super::NEVER);
        assert_ne!(state.flags[0] & super::SETTLED, 0);
    }

    #[test]
    fn firing_lists_the_true_leaves() {
        let program = Program::compile(&then(ev("signed_up"), within(not(ev("paid")), 7)));
        let mut state = program.new_state();
        let signed_up = program.event_id("signed_up").expect("name");
        let step = program.on_event(&mut state, signed_up, 100);
        assert_eq!(step.next_deadline, Some(107));
        let step = program.on_time(&mut state, 200);
        let fired = step.fired.expect("fires at the close");
        assert_eq!(fired.time_ms, 107);
        assert_eq!(fired.events, [(signed_up, 100)]);
        assert!(step.fresh && step.next_deadline.is_none());
        assert_eq!(state, program.new_state());
    }

    #[test]
    fn times_are_clamped_and_saturate() {
        let program = Program::compile(&then(ev("a"), within(not(ev("b")), 5)));
        let mut state = program.new_state();
        let a = program.event_id("a").expect("a");
        let b = program.event_id("b").expect("b");
        let step = program.on_event(&mut state, a, i64::MAX - 2);
        // The close would be past i64::MAX: it never comes.
        assert_eq!(step.next_deadline, None);
        let step = program.on_event(&mut state, b, 0);
        assert!(step.fired.is_none() && !step.fresh);
        let mut state = program.new_state();
        program.on_event(&mut state, a, 10);
        // b at 3 is taken as at 10: inside the window, the attempt fails.
        let step = program.on_event(&mut state, b, 3);
        assert_eq!(step.next_deadline, None);
    }

    #[test]
    fn state_is_small_and_round_trips() {
        let program = Program::compile(&then(ev("signed_up"), within(not(ev("paid")), 7)));
        let mut state = program.new_state();
        let mut bytes = Vec::new();
        state.encode(&mut bytes);
        assert_eq!(bytes.len(), 6);
        program.on_event(&mut state, program.event_id("signed_up").expect("name"), 1);
        bytes.clear();
        state.encode(&mut bytes);
        // Header 6, last time 8, 5 flag bytes, 3 slots of 8.
        assert_eq!(bytes.len(), 6 + 8 + 5 + 24);
        assert_eq!(program.decode_state(&bytes), Ok(state.clone()));
        assert!(state.size_bytes() < 128, "{}", state.size_bytes());
        for cut in 0..bytes.len() {
            assert!(program.decode_state(&bytes[..cut]).is_err());
        }
    }
}
