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

#[derive(Debug)]
struct Slot {
    /// `None` when the slot is free.
    entity: Option<Arc<[u8]>>,
    state: State,
    /// Bumped whenever the slot's wheel entry becomes stale.
    generation: u32,
    deadline: Option<i64>,
    dirty: bool,
}

/// What changed since the last [`Engine::take_step`].
#[derive(Debug, Default)]
pub struct StepChanges {
    /// Entity → new state bytes (`None`: dropped).
    pub updates: Vec<(Vec<u8>, Option<Vec<u8>>)>,
    pub firings: Vec<Fired>,
}

/// One trigger's entities and timers.
#[derive(Debug)]
pub struct Engine {
    program: Program,
    index: HashMap<Arc<[u8]>, u32>,
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
            index: HashMap::new(),
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
        s.deadline = None;
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
            s.deadline = None;
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
        for (deadline, (slot, generation)) in due.drain(..) {
            let s = &mut self.slots[slot as usize];
            if s.generation != generation || s.deadline != Some(deadline) || s.entity.is_none() {
                continue; // stale: the entity moved on
            }
            let before = s.state.size_bytes();
            let step = self.program.on_time(&mut s.state, now_ms.max(deadline));
            self.state_bytes = self.state_bytes - before + s.state.size_bytes();
            self.after_step(slot, step);
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
        if next_deadline != s.deadline {
            s.generation = s.generation.wrapping_add(1);
            s.deadline = next_deadline;
            if let Some(deadline) = next_deadline {
                self.wheel.insert(deadline, (slot, s.generation));
            }
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

    /// Everything that changed since the last call, for one step record.
    pub fn take_step(&mut self) -> StepChanges {
        let mut updates = Vec::with_capacity(self.dirty.len() + self.dropped.len());
        for entity in self.dropped.drain(..) {
            updates.push((entity.to_vec(), None));
        }
        for slot in self.dirty.drain(..) {
            let s = &mut self.slots[slot as usize];
            if !s.dirty {
                continue; // dropped (and maybe reused) since
            }
            s.dirty = false;
            let Some(entity) = &s.entity else { continue };
            let mut state = Vec::with_capacity(s.state.size_bytes());
            s.state.encode(&mut state);
            updates.push((entity.to_vec(), Some(state)));
        }
        self.step_bytes = 0;
        StepChanges {
            updates,
            firings: std::mem::take(&mut self.fired),
        }
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
                s.deadline = None;
                s.dirty = false;
                slot
            }
            None => {
                self.slots.push(Slot {
                    entity: Some(Arc::clone(&entity)),
                    state,
                    generation: 0,
                    deadline: None,
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
        self.state_bytes -= s.state.size_bytes();
        s.entity = None;
        s.state = self.program.new_state();
        s.generation = s.generation.wrapping_add(1);
        s.deadline = None;
        s.dirty = false;
        self.free.push(slot);
    }
}
