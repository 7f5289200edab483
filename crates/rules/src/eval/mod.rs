//! The per-entity evaluator: one rule, many entities, one small [`State`] per entity.
//!
//! A trigger's runtime (crate `sluice-triggers`) compiles its rule once into a [`Program`],
//! keeps one [`State`] per entity (a user, a sensor), and feeds it that entity's events
//! ([`Program::on_event`]) and the passing of time ([`Program::on_time`], driven by the timer
//! wheel at [`Step::next_deadline`]). A [`Step`] says whether the rule fired, when the entity
//! next needs the clock, and whether its state is fresh again (the caller may then drop it).
//! States are encoded with [`State::encode`] and restored with [`Program::decode_state`]. The
//! semantics implemented here are the ones written down in `docs/triggers.md` ("What a rule
//! means"); [`reference`] is a deliberately simple second implementation the tests compare
//! this one against.
//!
//! ## Layout
//!
//! - [`Program`]: the rule as a flat node array in preorder, so a node's subtree is the
//!   contiguous range `i..end` and its first child is `i + 1`; event names are interned as
//!   [`EventId`]s. Each `"x"` leaf and each time bound owns one `i64` *slot*.
//! - [`State`]: one flag byte per node (value, settled, phase) and one `i64` per slot, plus the
//!   entity's last time and its next deadline. Nothing else: no pointers, no queues.
//! - `machine.rs`: what one *moment* (an event, or a deadline at time C) does to the nodes.
//! - `codec.rs`: the state's byte form, validated on decode.
//!
//! ## The state machine of each node kind
//!
//! Every node has a value and a *settled* flag (its value can never change again). A settled
//! node is never visited again. *Reset at T* puts a subtree back to its start with base time
//! T; a reset node is evaluated at the moment it starts (with or without that moment's event,
//! as the semantics say).
//!
//! | node | state | on a moment |
//! |---|---|---|
//! | `"x"` | seen?; time seen (slot) | an event `x`: true and settled, remember its time |
//! | `NOT A` | none | A's value inverted, A's settledness |
//! | `A AND B`, `A OR B` | none | both children; settles early on a settled false (AND) or true (OR) child, and then skips the other child |
//! | `B WITHIN d` | close time T+d (slot) | before the close: B steps; settles as soon as B does. A deadline moment at T+d: settles to B's value as it was, without stepping B |
//! | `B AFTER d` | open time T+d (slot); opened? (phase) | closed: false. A deadline moment at T+d: opens, resets B at T+d and evaluates it (no event); open: B's value and settledness |
//! | `A THEN B` | waiting / attempt (phase) | waiting: A steps; when A is true an attempt starts (reset B at t, evaluate B with no event). Attempt: B steps; when B settles false, restart (reset A at t, A sees this moment's event). A second immediate failure at the same moment consumes the event |
//!
//! The root starts at the entity's first event and, when it fires, the whole state goes back
//! to fresh (see [`Step::fresh`]).
//!
//! ## Limits
//!
//! Deadline times are `base + d` with saturating arithmetic; a deadline past `i64::MAX` never
//! comes. A call processes at most [`MAX_DEADLINE_MOMENTS_PER_CALL`] deadline moments: rules
//! that [`crate::check::check`] accepts cannot make deadlines without events, so only refused
//! rules (a `THEN` whose left side is true before any event) can reach it.

mod codec;
mod machine;
pub mod reference;

use std::collections::HashMap;

use crate::rule::Rule;

pub use codec::StateError;

/// Most deadline moments one [`Program::on_event`] or [`Program::on_time`] call processes.
///
/// A rule accepted by [`crate::check::check`] produces a bounded number of deadline moments
/// per event (each time bound of each running attempt closes or opens once), far below this.
/// Only a refused rule, whose `THEN` starts over by itself at every deadline, can produce an
/// unbounded chain of them; this cap keeps such a call from running for the length of the
/// time jump. Due deadlines left over are processed by the next call.
pub const MAX_DEADLINE_MOMENTS_PER_CALL: usize = 1 << 16;

/// An event name of a [`Program`], interned: an index into [`Program::event_names`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct EventId(u16);

impl EventId {
    /// The index into [`Program::event_names`].
    pub fn index(self) -> usize {
        usize::from(self.0)
    }
}

/// What a node is, with what its evaluation needs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Event(EventId),
    Not,
    And,
    Or,
    Then,
    /// The span in ms, at least 1.
    Within(i64),
    /// The span in ms, at least 1.
    After(i64),
}

#[derive(Debug, Clone, Copy)]
struct Node {
    kind: Kind,
    /// One past the last node of this subtree (preorder).
    end: u32,
    /// Index into [`State`]'s times for leaves and time bounds; unused for the others.
    slot: u32,
}

/// A compiled rule: the flat node array every entity's [`State`] is evaluated against.
#[derive(Debug, Clone)]
pub struct Program {
    nodes: Vec<Node>,
    slots: usize,
    names: Vec<String>,
    ids: HashMap<String, EventId>,
    /// Identifies the rule's structure in encoded states, so a state is never decoded against
    /// another rule.
    fingerprint: u32,
}

/// One entity's evaluation state. Small: one byte per node and one `i64` per leaf and time
/// bound, plus a fixed header.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct State {
    /// Per node: [`machine::VALUE`], [`machine::SETTLED`], [`machine::PHASE`].
    flags: Box<[u8]>,
    /// Per slot: a leaf's event time, a time bound's deadline.
    times: Box<[i64]>,
    /// The latest time seen (events and deadlines); earlier times are taken as this one.
    last_time_ms: i64,
    /// The earliest pending deadline, [`machine::NEVER`] if none. Derived from the nodes.
    next_deadline_ms: i64,
    /// Whether an evaluation is running (false: fresh, as from [`Program::new_state`]).
    started: bool,
    /// The program's fingerprint, written into the encoded state.
    fingerprint: u32,
}

/// The outcome of one call for one entity.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Step {
    /// The rule fired at this call's moment (the event, or for [`Program::on_time`] a
    /// deadline).
    pub fired: Option<Firing>,
    /// For [`Program::on_event`]: the rule fired at a deadline processed before the event
    /// (the event then began a new evaluation).
    pub fired_before: Option<Firing>,
    /// When to call [`Program::on_time`] next; `None`: only an event can change the state.
    pub next_deadline: Option<i64>,
    /// The state equals [`Program::new_state`]: the caller may drop it.
    pub fresh: bool,
}

/// One firing of the rule for an entity.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Firing {
    /// The moment's time: the event's, or the deadline's.
    pub time_ms: i64,
    /// The leaves that were true when it fired, in rule order: each with the name and time of
    /// the event that made it true.
    pub events: Vec<(EventId, i64)>,
}

impl Program {
    /// Compiles a rule.
    ///
    /// # Panics
    ///
    /// If the rule has more than `u16::MAX` distinct event names or `u32::MAX` nodes (a parsed
    /// rule has at most [`crate::rule::MAX_NODES`] nodes).
    pub fn compile(rule: &Rule) -> Program {
        let mut program = Program {
            nodes: Vec::with_capacity(rule.nodes()),
            slots: 0,
            names: Vec::new(),
            ids: HashMap::new(),
            fingerprint: 0,
        };
        program.push(rule);
        program.fingerprint = program.compute_fingerprint();
        program
    }

    fn push(&mut self, rule: &Rule) {
        let at = self.nodes.len();
        let kind = match rule {
            Rule::Event(name) => Kind::Event(self.intern(name)),
            Rule::Not(_) => Kind::Not,
            Rule::And(..) => Kind::And,
            Rule::Or(..) => Kind::Or,
            Rule::Then(..) => Kind::Then,
            Rule::Within(_, span) => Kind::Within(span_ms(span.as_ms())),
            Rule::After(_, span) => Kind::After(span_ms(span.as_ms())),
        };
        let slot = match kind {
            Kind::Event(_) | Kind::Within(_) | Kind::After(_) => {
                self.slots += 1;
                self.slots - 1
            }
            _ => 0,
        };
        let slot = u32::try_from(slot).expect("a rule has at most u32::MAX nodes");
        self.nodes.push(Node { kind, end: 0, slot });
        match rule {
            Rule::Event(_) => {}
            Rule::Not(a) | Rule::Within(a, _) | Rule::After(a, _) => self.push(a),
            Rule::And(a, b) | Rule::Or(a, b) | Rule::Then(a, b) => {
                self.push(a);
                self.push(b);
            }
        }
        self.nodes[at].end =
            u32::try_from(self.nodes.len()).expect("a rule has at most u32::MAX nodes");
    }

    fn intern(&mut self, name: &str) -> EventId {
        if let Some(&id) = self.ids.get(name) {
            return id;
        }
        let id = EventId(
            u16::try_from(self.names.len()).expect("a rule has at most u16::MAX event names"),
        );
        self.names.push(name.to_owned());
        self.ids.insert(name.to_owned(), id);
        id
    }

    /// FNV-1a over the node kinds, spans, shapes and names.
    fn compute_fingerprint(&self) -> u32 {
        let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
        let mut feed = |bytes: &[u8]| {
            for &byte in bytes {
                hash ^= u64::from(byte);
                hash = hash.wrapping_mul(0x0100_0000_01b3);
            }
        };
        for node in &self.nodes {
            let (tag, value) = match node.kind {
                Kind::Event(id) => (0u8, i64::from(id.0)),
                Kind::Not => (1, 0),
                Kind::And => (2, 0),
                Kind::Or => (3, 0),
                Kind::Then => (4, 0),
                Kind::Within(d) => (5, d),
                Kind::After(d) => (6, d),
            };
            feed(&[tag]);
            feed(&value.to_le_bytes());
            feed(&node.end.to_le_bytes());
        }
        for name in &self.names {
            feed(name.as_bytes());
            feed(&[0xff]);
        }
        (hash ^ (hash >> 32)) as u32
    }

    /// The id of an event name; `None` if the rule does not mention it (the caller skips such
    /// events: they are not moments of this rule).
    pub fn event_id(&self, name: &str) -> Option<EventId> {
        self.ids.get(name).copied()
    }

    /// The rule's event names, indexed by [`EventId::index`].
    pub fn event_names(&self) -> &[String] {
        &self.names
    }

    /// Number of nodes.
    pub fn nodes(&self) -> usize {
        self.nodes.len()
    }

    /// A fresh state: the entity has no evaluation running.
    pub fn new_state(&self) -> State {
        State {
            flags: vec![0; self.nodes.len()].into_boxed_slice(),
            times: vec![0; self.slots].into_boxed_slice(),
            last_time_ms: i64::MIN,
            next_deadline_ms: machine::NEVER,
            started: false,
            fingerprint: self.fingerprint,
        }
    }

    /// One event of the entity at `time_ms`.
    ///
    /// A time below the state's last time is taken as the last time. Deadlines due at or
    /// before the (clamped) time are processed first, each distinct deadline time as its own
    /// moment, in time order (a firing there is [`Step::fired_before`]); then the event is
    /// its own moment ([`Step::fired`]). An id from another program is ignored. Allocates
    /// only to build a [`Firing`].
    pub fn on_event(&self, state: &mut State, event: EventId, time_ms: i64) -> Step {
        if event.index() >= self.names.len() || !self.fits(state) {
            return self.step_result(state, None, None);
        }
        let time_ms = time_ms.max(state.last_time_ms);
        let fired_before = self.run_deadlines(state, time_ms);
        state.last_time_ms = time_ms;
        let fired = self.moment(
            state,
            machine::Moment {
                time: time_ms,
                event: Some(event),
            },
        );
        self.step_result(state, fired, fired_before)
    }

    /// Time reached `now_ms`: every deadline at or before it is processed, each distinct
    /// deadline time as its own moment, in time order. Allocates only to build a [`Firing`].
    pub fn on_time(&self, state: &mut State, now_ms: i64) -> Step {
        if !self.fits(state) {
            return self.step_result(state, None, None);
        }
        let fired = self.run_deadlines(state, now_ms);
        self.step_result(state, fired, None)
    }

    /// Whether a state has this program's shape (a state made by another program is left
    /// alone rather than indexed out of bounds).
    fn fits(&self, state: &State) -> bool {
        state.fingerprint == self.fingerprint
            && state.flags.len() == self.nodes.len()
            && state.times.len() == self.slots
    }

    fn step_result(
        &self,
        state: &State,
        fired: Option<Firing>,
        fired_before: Option<Firing>,
    ) -> Step {
        Step {
            fired,
            fired_before,
            next_deadline: (state.started && state.next_deadline_ms != machine::NEVER)
                .then_some(state.next_deadline_ms),
            fresh: !state.started,
        }
    }
}

impl State {
    /// Whether no evaluation is running (the state equals [`Program::new_state`]).
    pub fn is_fresh(&self) -> bool {
        !self.started
    }

    /// Bytes this state takes in memory.
    pub fn size_bytes(&self) -> usize {
        size_of::<State>() + self.flags.len() + self.times.len() * size_of::<i64>()
    }
}

/// A span as a deadline offset: at least 1 ms (a zero span would close at its own start,
/// before the moment that starts it), at most `i64::MAX`.
fn span_ms(ms: u64) -> i64 {
    i64::try_from(ms).unwrap_or(i64::MAX).max(1)
}
