//! One trigger's in-memory evaluation: every entity's rule state, the timer wheel their time
//! bounds fire from, and what changed since the last step was written.
//!
//! Entities live in a slab (`slots`) indexed by a hash map from entity id; the wheel holds
//! `(slot, generation)` pairs, so scheduling a deadline allocates nothing and a popped entry
//! whose entity has moved on (another deadline, dropped, slot reused) is recognised and
//! skipped. An entity whose state is back to fresh (it fired, or nothing it saw matters any
//! more) is dropped: it costs nothing until its next event.
//!
//! Nothing here does I/O or reads a clock: records and time come in as arguments, and the
//! runner ([`crate::run`]) writes what [`Engine::take_step`] returns to the state log before
//! any firing leaves.

use std::collections::HashMap;
use std::sync::Arc;

use sluice_rules::eval::{Firing, Program, State, Step};
use sluice_rules::rule::Rule;
use sluice_rules::wheel::TimerWheel;

use crate::codec::{self, Fired};

/// Why a record was not evaluated (counted per reason in the trigger's status).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refused {
    /// The trigger keeps [`Engine::max_entities`] entities and this one is new.
    EntityLimit,
}

/// No deadline (a deadline that far away never comes: the evaluator saturates at it).
const NEVER: i64 = i64::MAX;

#[derive(Debug)]
struct Slot {
    /// `None` when the slot is free.
    entity: Option<Arc<[u8]>>,
    state: State,
    /// Bumped whenever the slot's wheel entry becomes stale (a new one replaces it, the slot
    /// is freed): a popped entry of another generation is skipped.
    generation: u32,
    /// The state's next deadline ([`NEVER`]: none). Plain `i64`s rather than `Option`s: 16
    /// bytes less per entity.
    deadline: i64,
    /// When the slot's live wheel entry is due, if it has one. Deadlines that move later (a
    /// sensor's window restarting at every reading) do not add entries: the live one, when it
    /// pops early, is put back at the current deadline. Only a deadline earlier than the live
    /// entry adds one. So an entity has one entry, not one per re-arm.
    scheduled: i64,
    dirty: bool,
}

/// One trigger's entities and timers.
#[derive(Debug)]
pub struct Engine {
    program: Program,
    /// Entity ids come from clients: a keyed hash with a random seed, so crafted ids cannot
    /// pile into one bucket; foldhash rather than SipHash (std's), which took 18% of the
    /// evaluation time.
    index: HashMap<Arc<[u8]>, u32, foldhash::fast::RandomState>,
    slots: Vec<Slot>,
    free: Vec<u32>,
    wheel: TimerWheel<(u32, u32)>,
    /// Slots changed since the last step; entities dropped since then.
    dirty: Vec<u32>,
    dropped: Vec<Arc<[u8]>>,
    /// Firings since the last step, with their sequence numbers.
    fired: Vec<Fired>,
    next_seq: u64,
    /// Bytes the next step's record will take, about.
    step_bytes: usize,
    max_entities: usize,
    due: Vec<(i64, (u32, u32))>,
    state_bytes: usize,
}

impl Engine {
    pub fn new(rule: &Rule, now_ms: i64, next_seq: u64, max_entities: usize) -> Engine {
        Engine {
            program: Program::compile(rule),
            index: HashMap::default(),
            slots: Vec::new(),
            free: Vec::new(),
            wheel: TimerWheel::new(now_ms),
            dirty: Vec::new(),
            dropped: Vec::new(),
            fired: Vec::new(),
            next_seq,
            step_bytes: 0,
            max_entities,
            due: Vec::new(),
            state_bytes: 0,
        }
    }

    pub fn program(&self) -> &Program {
        &self.program
    }

    /// Entities with state kept.
    pub fn entities(&self) -> usize {
        self.index.len()
    }

    /// Bytes of rule state held (not counting the map and the ids).
    pub fn state_bytes(&self) -> usize {
        self.state_bytes
    }

    /// The next firing's sequence number.
    pub fn next_seq(&self) -> u64 {
        self.next_seq
    }

    /// The earliest pending deadline (the runner sleeps until then at most).
    pub fn next_deadline(&self) -> Option<i64> {
        self.wheel.next_deadline()
    }

    /// Bytes the step being collected will take when written.
    pub fn step_bytes(&self) -> usize {
        self.step_bytes
    }

    /// Whether anything changed since the last step.
    pub fn has_changes(&self) -> bool {
        !self.dirty.is_empty() || !self.dropped.is_empty() || !self.fired.is_empty()
    }

    /// Restores one entity's state from the state log (recovery). A state that does not
    /// decode for this rule is an error: the log belongs to this trigger.
    pub fn restore(&mut self, entity: &[u8], state: &[u8]) -> Result<(), String> {
        let state = self
            .program
            .decode_state(state)
            .map_err(|e| format!("entity state does not decode: {e}"))?;
        let slot = match self.index.get(entity) {
            Some(&slot) => slot,
            None => self.new_slot(entity),
        };
        let s = &mut self.slots[slot as usize];
        self.state_bytes = self.state_bytes - s.state.size_bytes() + state.size_bytes();
        s.state = state;
        s.generation = s.generation.wrapping_add(1);
        s.deadline = NEVER;
        s.scheduled = NEVER;
        Ok(())
    }

    /// Forgets one entity (recovery: a step dropped it).
    pub fn forget(&mut self, entity: &[u8]) {
        if let Some(slot) = self.index.remove(entity) {
            self.free_slot(slot);
        }
    }

    /// After recovery: schedules every entity's next deadline and clears the changes restoring
    /// made. The states were written after time reached `clock_ms`, so letting each process
    /// time up to `clock_ms` changes nothing and yields its next deadline.
    pub fn finish_restore(&mut self, clock_ms: i64, next_seq: u64) {
        self.next_seq = next_seq;
        self.wheel = TimerWheel::new(clock_ms);
        for slot in 0..self.slots.len() as u32 {
            let s = &mut self.slots[slot as usize];
            if s.entity.is_none() {
                continue;
            }
            s.dirty = false;
            let step = self.program.on_time(&mut s.state, clock_ms);
            s.deadline = NEVER;
            s.scheduled = NEVER;
            self.after_step(slot, step);
        }
        // Restoring is not a change to write again; a firing found here (a state written
        // before its deadline was processed) is a real one and stays.
        for slot in self.dirty.drain(..) {
            self.slots[slot as usize].dirty = false;
        }
        self.dropped.clear();
        self.step_bytes = self.fired.iter().map(codec::fired_bytes).sum();
    }

    /// Evaluates one record of `entity` named `event` at `time_ms`. Records whose event the
    /// rule does not mention never reach this (the runner checks [`Program::event_id`]).
    pub fn on_event(
        &mut self,
        entity: &[u8],
        event: sluice_rules::eval::EventId,
        time_ms: i64,
    ) -> Result<(), Refused> {
        let slot = match self.index.get(entity) {
            Some(&slot) => slot,
            None => {
                if self.index.len() >= self.max_entities {
                    return Err(Refused::EntityLimit);
                }
                self.new_slot(entity)
            }
        };
        let s = &mut self.slots[slot as usize];
        let before = s.state.size_bytes();
        let step = self.program.on_event(&mut s.state, event, time_ms);
        self.state_bytes = self.state_bytes - before + s.state.size_bytes();
        self.after_step(slot, step);
        Ok(())
    }

    /// Moves time to `now_ms`: every entity with a deadline at or before it is evaluated.
    pub fn advance(&mut self, now_ms: i64) {
        let mut due = std::mem::take(&mut self.due);
        self.wheel.advance(now_ms, &mut due);
        for (_, (slot, generation)) in due.drain(..) {
            let s = &mut self.slots[slot as usize];
            if s.generation != generation || s.entity.is_none() {
                continue; // stale: replaced by an earlier entry, or the slot was freed
            }
            s.scheduled = NEVER;
            match s.deadline {
                NEVER => {}
                deadline if deadline <= now_ms => {
                    let before = s.state.size_bytes();
                    let step = self.program.on_time(&mut s.state, now_ms);
                    self.state_bytes = self.state_bytes - before + s.state.size_bytes();
                    self.after_step(slot, step);
                }
                // The deadline moved later since this entry was made: back in the wheel.
                deadline => {
                    s.scheduled = deadline;
                    self.wheel.insert(deadline, (slot, s.generation));
                }
            }
        }
        self.due = due;
    }

    fn after_step(&mut self, slot: u32, step: Step) {
        let Step {
            fired,
            fired_before,
            next_deadline,
            fresh,
        } = step;
        for firing in [fired_before, fired].into_iter().flatten() {
            self.record_firing(slot, firing);
        }
        let s = &mut self.slots[slot as usize];
        if fresh {
            let entity = s.entity.clone().expect("slot in use");
            self.index.remove(&entity[..]);
            self.step_bytes += codec::update_bytes(&entity, None);
            self.dropped.push(entity);
            self.free_slot(slot);
            return;
        }
        s.deadline = next_deadline.unwrap_or(NEVER);
        if s.deadline < s.scheduled {
            s.generation = s.generation.wrapping_add(1);
            s.scheduled = s.deadline;
            self.wheel.insert(s.deadline, (slot, s.generation));
        }
        if !s.dirty {
            s.dirty = true;
            self.dirty.push(slot);
            let entity = s.entity.as_deref().expect("slot in use");
            self.step_bytes += codec::update_bytes(entity, Some(&[])) + s.state.size_bytes();
        }
    }

    fn record_firing(&mut self, slot: u32, firing: Firing) {
        let entity = self.slots[slot as usize]
            .entity
            .as_deref()
            .expect("slot in use")
            .to_vec();
        let fired = Fired {
            seq: self.next_seq,
            entity,
            time_ms: firing.time_ms,
            events: firing
                .events
                .iter()
                .map(|&(event, time)| (event.index() as u16, time))
                .collect(),
        };
        self.next_seq += 1;
        self.step_bytes += codec::fired_bytes(&fired);
        self.fired.push(fired);
    }

    /// Writes everything that changed since the last call as one step record
    /// ([`LogRecord::Step`](crate::codec::LogRecord::Step)) into `out`, with `positions` and
    /// `clock_ms`; returns the step's firings (for the outbox) and how many entity updates it
    /// holds. Entity ids and states are encoded straight into `out`: nothing is allocated per
    /// entity.
    pub fn take_step(
        &mut self,
        positions: &[codec::Position],
        clock_ms: i64,
        out: &mut Vec<u8>,
    ) -> (Vec<Fired>, usize) {
        let mut step = codec::StepEncoder::begin(out, positions, clock_ms);
        for entity in self.dropped.drain(..) {
            step.update(&entity, None::<fn(&mut Vec<u8>)>);
        }
        for slot in self.dirty.drain(..) {
            let s = &mut self.slots[slot as usize];
            if !s.dirty {
                continue; // dropped (and maybe reused) since
            }
            s.dirty = false;
            let Some(entity) = &s.entity else { continue };
            let state = &s.state;
            step.update(entity, Some(|out: &mut Vec<u8>| state.encode(out)));
        }
        let firings = std::mem::take(&mut self.fired);
        let updates = step.finish(&firings);
        self.step_bytes = 0;
        (firings, updates)
    }

    /// Every entity and its encoded state, for a snapshot, in chunks of about
    /// `chunk_bytes`.
    pub fn snapshot_chunks(&self, chunk_bytes: usize) -> Vec<Vec<(Vec<u8>, Vec<u8>)>> {
        let mut chunks = Vec::new();
        let mut chunk = Vec::new();
        let mut bytes = 0;
        for s in &self.slots {
            let Some(entity) = &s.entity else { continue };
            let mut state = Vec::with_capacity(s.state.size_bytes());
            s.state.encode(&mut state);
            bytes += 8 + entity.len() + state.len();
            chunk.push((entity.to_vec(), state));
            if bytes >= chunk_bytes {
                chunks.push(std::mem::take(&mut chunk));
                bytes = 0;
            }
        }
        if !chunk.is_empty() {
            chunks.push(chunk);
        }
        chunks
    }

    fn new_slot(&mut self, entity: &[u8]) -> u32 {
        let entity: Arc<[u8]> = Arc::from(entity);
        let state = self.program.new_state();
        self.state_bytes += state.size_bytes();
        let slot = match self.free.pop() {
            Some(slot) => {
                let s = &mut self.slots[slot as usize];
                s.entity = Some(Arc::clone(&entity));
                s.state = state;
                s.deadline = NEVER;
                s.scheduled = NEVER;
                s.dirty = false;
                slot
            }
            None => {
                self.slots.push(Slot {
                    entity: Some(Arc::clone(&entity)),
                    state,
                    generation: 0,
                    deadline: NEVER,
                    scheduled: NEVER,
                    dirty: false,
                });
                (self.slots.len() - 1) as u32
            }
        };
        self.index.insert(entity, slot);
        slot
    }

    fn free_slot(&mut self, slot: u32) {
        let s = &mut self.slots[slot as usize];
        // The old state stays until the slot is reused (replacing it here would allocate a
        // fresh state only for `new_slot` to replace it again).
        self.state_bytes -= s.state.size_bytes();
        s.entity = None;
        s.generation = s.generation.wrapping_add(1);
        s.deadline = NEVER;
        s.scheduled = NEVER;
        s.dirty = false;
        self.free.push(slot);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MINUTE: i64 = 60_000;

    fn silent_sensor() -> Engine {
        let rule = sluice_rules::rule::parse(r#""reading" THEN NOT "reading" WITHIN 5m"#).unwrap();
        Engine::new(&rule, 0, 0, 10)
    }

    #[test]
    fn a_window_restarted_at_every_event_keeps_one_wheel_entry_and_fires_once() {
        let mut engine = silent_sensor();
        let reading = engine.program().event_id("reading").unwrap();
        // A reading every second for ten minutes: the window starts over each time.
        for second in 0..600 {
            let now = second * 1_000;
            engine.advance(now);
            engine.on_event(b"sensor-1", reading, now).unwrap();
            assert!(
                engine.wheel.len() <= 2,
                "at {second} s: {} entries",
                engine.wheel.len()
            );
        }
        let mut out = Vec::new();
        let (firings, _) = engine.take_step(&[], 0, &mut out);
        assert!(firings.is_empty());
        // Silent from 599 s: fires once, 5 minutes after the last reading.
        for minute in 10..30 {
            engine.advance(minute * MINUTE);
        }
        out.clear();
        let (firings, updates) = engine.take_step(&[], 0, &mut out);
        assert_eq!(firings.len(), 1);
        assert_eq!(firings[0].time_ms, 599_000 + 5 * MINUTE);
        assert_eq!(firings[0].entity, b"sensor-1");
        assert_eq!(updates, 1, "the entity is dropped after firing");
        assert_eq!(engine.entities(), 0);
        assert!(engine.wheel.is_empty());
    }

    #[test]
    fn an_earlier_deadline_is_scheduled_even_with_a_later_entry_live() {
        let rule = sluice_rules::rule::parse(r#""a" THEN ("b" WITHIN 10m) OR (NOT "c" WITHIN 1m)"#)
            .unwrap();
        let mut engine = Engine::new(&rule, 0, 0, 10);
        let a = engine.program().event_id("a").unwrap();
        engine.on_event(b"e", a, 0).unwrap();
        // NOT "c" WITHIN 1m closes first, with no c: the rule fires at 1 minute.
        engine.advance(MINUTE - 1);
        let mut out = Vec::new();
        assert!(engine.take_step(&[], 0, &mut out).0.is_empty());
        engine.advance(MINUTE);
        out.clear();
        let (firings, _) = engine.take_step(&[], 0, &mut out);
        assert_eq!(firings.len(), 1);
        assert_eq!(firings[0].time_ms, MINUTE);
    }

    #[test]
    fn a_step_record_decodes_to_the_changes() {
        let mut engine = silent_sensor();
        let reading = engine.program().event_id("reading").unwrap();
        engine.on_event(b"s1", reading, 0).unwrap();
        engine.on_event(b"s2", reading, 0).unwrap();
        let positions = [codec::Position {
            source: 0,
            partition: 1,
            next_offset: 7,
        }];
        let mut out = Vec::new();
        let (_, updates) = engine.take_step(&positions, 42, &mut out);
        assert_eq!(updates, 2);
        let codec::LogRecord::Step {
            positions: p,
            clock_ms,
            updates,
            firings,
        } = codec::LogRecord::decode(&out).unwrap()
        else {
            panic!("not a step")
        };
        assert_eq!((p, clock_ms, firings.len()), (positions.to_vec(), 42, 0));
        let mut restored = silent_sensor();
        for (entity, state) in &updates {
            restored.restore(entity, state.as_ref().unwrap()).unwrap();
        }
        assert_eq!(restored.entities(), 2);
    }
}
