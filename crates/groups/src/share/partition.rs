//! The state of one KIP-932 share-partition: which records of a topic-partition
//! are in flight for a share group, who holds each of them, and how often each
//! was delivered.
//!
//! This is a pure state machine. The caller supplies the clock, the high
//! watermark and the config, and persists the [`ShareStateSnapshot`]s; nothing
//! here does I/O or reads the time.
//!
//! # Storage
//!
//! The in-flight window `[start, end)` is a `VecDeque` of fixed-size entries
//! indexed by `offset - start`. Acquiring new records pushes at the back and
//! advancing the start offset pops at the front, so once the deque has grown to
//! the window size the hot path never allocates. An owner is a [`MemberKey`],
//! a `u32` the caller interns per member id, not a string, which keeps an entry
//! at 16 bytes. Counters of available and acquired records (in total and per
//! member) make the queries O(1) and let `acquire` skip the search for released
//! records when there are none; a cursor remembers below which offset none are
//! left, so repeated acquires do not rescan the same prefix.

use std::collections::{HashMap, VecDeque};
use std::fmt;

use serde::{Deserialize, Serialize};

/// Most records [`SharePartition::restore`] rebuilds (16 MiB of entries), so a
/// corrupt snapshot cannot make us allocate without bound.
const MAX_RESTORED_WINDOW: i64 = 1 << 20;

/// The group settings a share-partition needs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ShareConfig {
    /// How long an acquired record stays locked to its member
    /// (Kafka's `group.share.record.lock.duration.ms`).
    pub record_lock_duration_ms: i64,
    /// Deliveries after which a record is archived instead of made available
    /// again (`group.share.delivery.count.limit`).
    pub delivery_count_limit: i16,
    /// Longest in-flight window, `end - start`
    /// (`group.share.partition.max.record.locks`).
    pub max_in_flight: u32,
}

impl Default for ShareConfig {
    /// Kafka's defaults.
    fn default() -> Self {
        ShareConfig {
            record_lock_duration_ms: 30_000,
            delivery_count_limit: 5,
            max_in_flight: 2000,
        }
    }
}

/// A member of the share group, interned by the caller to a small integer so
/// each record's owner is a `u32` rather than a string.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug, PartialOrd, Ord)]
pub struct MemberKey(pub u32);

/// Consecutive records handed to a member, all delivered the same number of
/// times (the `AcquiredRecords` of a share fetch response).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Acquired {
    pub first_offset: i64,
    pub last_offset: i64,
    pub delivery_count: i16,
}

/// Acknowledge types, with their wire values.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AckType {
    /// The offset holds no record (control record, compaction gap).
    Gap,
    /// Processed; never deliver again.
    Accept,
    /// Not processed; deliver again (to anyone) unless the limit is reached.
    Release,
    /// Unprocessable; never deliver again.
    Reject,
    /// Still working on it; extend the lock.
    Renew,
}

impl AckType {
    /// Parses a wire value; `None` for values this broker does not know.
    pub fn from_wire(value: i8) -> Option<Self> {
        match value {
            0 => Some(AckType::Gap),
            1 => Some(AckType::Accept),
            2 => Some(AckType::Release),
            3 => Some(AckType::Reject),
            4 => Some(AckType::Renew),
            _ => None,
        }
    }

    pub fn to_wire(self) -> i8 {
        match self {
            AckType::Gap => 0,
            AckType::Accept => 1,
            AckType::Release => 2,
            AckType::Reject => 3,
            AckType::Renew => 4,
        }
    }
}

/// Why an acknowledgement (or reset) was refused. Nothing changes on error.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum AckError {
    /// Kafka's `INVALID_RECORD_STATE`: the records are not acquired by this
    /// member (never were, lock expired, released, or left the window).
    InvalidRecordState(String),
    /// Kafka's `INVALID_REQUEST`: the request itself is malformed.
    InvalidRequest(String),
}

impl fmt::Display for AckError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            AckError::InvalidRecordState(msg) => write!(f, "invalid record state: {msg}"),
            AckError::InvalidRequest(msg) => write!(f, "invalid request: {msg}"),
        }
    }
}

impl std::error::Error for AckError {}

/// Durable state of a record in a snapshot. Acquired records are stored as
/// available: after a restart they are delivered again, which at-least-once
/// allows, whereas acknowledged records must never come back.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SnapshotState {
    Available,
    Acknowledged,
    Archived,
}

impl SnapshotState {
    /// Kafka's `RecordState` ids, so stored state reads the same as Kafka's.
    fn code(self) -> u8 {
        match self {
            SnapshotState::Available => 0,
            SnapshotState::Acknowledged => 2,
            SnapshotState::Archived => 4,
        }
    }

    fn from_code(code: u8) -> Option<Self> {
        match code {
            0 => Some(SnapshotState::Available),
            2 => Some(SnapshotState::Acknowledged),
            4 => Some(SnapshotState::Archived),
            _ => None,
        }
    }
}

/// Consecutive records with the same state and delivery count.
///
/// Serialized as a bare array `[first, last, state, count]` rather than an
/// object, which keeps a window of a few thousand records to a few KB.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq)]
#[serde(into = "RunRepr", try_from = "RunRepr")]
pub struct SnapshotRun {
    pub first_offset: i64,
    pub last_offset: i64,
    pub state: SnapshotState,
    pub delivery_count: i16,
}

#[derive(Serialize, Deserialize)]
struct RunRepr(i64, i64, u8, i16);

impl From<SnapshotRun> for RunRepr {
    fn from(run: SnapshotRun) -> Self {
        RunRepr(
            run.first_offset,
            run.last_offset,
            run.state.code(),
            run.delivery_count,
        )
    }
}

impl TryFrom<RunRepr> for SnapshotRun {
    type Error = String;

    fn try_from(repr: RunRepr) -> Result<Self, String> {
        let state = SnapshotState::from_code(repr.2)
            .ok_or_else(|| format!("unknown record state {}", repr.2))?;
        Ok(SnapshotRun {
            first_offset: repr.0,
            last_offset: repr.1,
            state,
            delivery_count: repr.3,
        })
    }
}

/// What must survive a restart: the start offset and the window above it.
/// The end offset is implied: the last run's `last_offset + 1`, or the start
/// offset when there are no runs.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, Default)]
pub struct ShareStateSnapshot {
    pub start_offset: i64,
    #[serde(default)]
    pub runs: Vec<SnapshotRun>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum State {
    Available,
    Acquired,
    Acknowledged,
    Archived,
}

impl State {
    /// Acknowledged and archived records are never delivered again.
    fn is_done(self) -> bool {
        matches!(self, State::Acknowledged | State::Archived)
    }
}

/// One in-flight record. `owner` and `deadline` only mean something while
/// the record is acquired.
#[derive(Clone, Copy, Debug)]
struct Rec {
    state: State,
    delivery_count: i16,
    owner: MemberKey,
    deadline: i64,
}

impl Rec {
    fn available(delivery_count: i16) -> Self {
        Rec {
            state: State::Available,
            delivery_count,
            owner: MemberKey(0),
            deadline: 0,
        }
    }
}

/// Where a record goes when its lock ends without being acknowledged: back
/// to the queue, unless it was already delivered as often as allowed.
fn unlocked_state(delivery_count: i16, cfg: &ShareConfig) -> State {
    if delivery_count >= cfg.delivery_count_limit {
        State::Archived
    } else {
        State::Available
    }
}

/// Lowers a member's count of acquired records, dropping it at zero so the
/// map only holds members with locks.
fn forget_locks(per_member: &mut HashMap<MemberKey, u32>, member: MemberKey, n: u32) {
    if let Some(count) = per_member.get_mut(&member) {
        *count = count.saturating_sub(n);
        if *count == 0 {
            per_member.remove(&member);
        }
    }
}

/// Appends an offset to the acquisitions, extending the last run when it is
/// adjacent and was delivered as often.
fn push_run(out: &mut Vec<Acquired>, offset: i64, delivery_count: i16) {
    if let Some(last) = out.last_mut()
        && last.last_offset + 1 == offset
        && last.delivery_count == delivery_count
    {
        last.last_offset = offset;
        return;
    }
    out.push(Acquired {
        first_offset: offset,
        last_offset: offset,
        delivery_count,
    });
}

/// One share-partition of a share group. See the module docs.
#[derive(Clone, Debug)]
pub struct SharePartition {
    /// The share-partition start offset (SPSO); `recs[0]` is this offset.
    start: i64,
    /// The window; the end offset (SPEO) is `start + recs.len()`. The front
    /// record is never done: `advance` pops those.
    recs: VecDeque<Rec>,
    /// Records in `State::Available`.
    available: u32,
    /// Records in `State::Acquired`.
    acquired: u32,
    /// Acquired records per member; members without any are absent.
    per_member: HashMap<MemberKey, u32>,
    /// No available record lies below this offset.
    avail_hint: i64,
    /// No acquired record has an earlier deadline, so `expire_locks` can
    /// return at once before it. Lowered on every lock, made exact by scans.
    deadline_floor: i64,
}

impl SharePartition {
    /// An empty share-partition starting at `start_offset` (negative values,
    /// Kafka's "uninitialized", are taken as 0).
    pub fn new(start_offset: i64) -> Self {
        let start = start_offset.max(0);
        SharePartition {
            start,
            recs: VecDeque::new(),
            available: 0,
            acquired: 0,
            per_member: HashMap::new(),
            avail_hint: start,
            deadline_floor: i64::MAX,
        }
    }

    /// Rebuilds a share-partition from a snapshot, defensively: runs (partly)
    /// below the start offset are trimmed to it, runs that are inverted or
    /// start before the end of the previous one are ignored, and a run that
    /// would grow the window past `MAX_RESTORED_WINDOW` is ignored. Offsets
    /// between runs become available, never delivered: redelivery is safe,
    /// losing a record is not.
    pub fn restore(s: &ShareStateSnapshot) -> Self {
        let mut p = SharePartition::new(s.start_offset);
        for run in &s.runs {
            let first = run.first_offset.max(p.start);
            let last = run.last_offset;
            // A record at i64::MAX would put the end offset past it.
            if last < first
                || first < p.end()
                || last == i64::MAX
                || last - p.start >= MAX_RESTORED_WINDOW
            {
                continue;
            }
            let gap = (first - p.end()) as usize;
            p.recs.extend(std::iter::repeat_n(Rec::available(0), gap));
            p.available += gap as u32;
            let state = match run.state {
                SnapshotState::Available => State::Available,
                SnapshotState::Acknowledged => State::Acknowledged,
                SnapshotState::Archived => State::Archived,
            };
            let rec = Rec {
                state,
                ..Rec::available(run.delivery_count.max(0))
            };
            let len = (last - first + 1) as usize;
            p.recs.extend(std::iter::repeat_n(rec, len));
            if state == State::Available {
                p.available += len as u32;
            }
        }
        p.advance();
        p
    }

    /// The durable state: the start offset and the window as runs of equal
    /// state and delivery count, with acquired records stored as available.
    pub fn snapshot(&self) -> ShareStateSnapshot {
        let mut runs: Vec<SnapshotRun> = Vec::new();
        for (rec, offset) in self.recs.iter().zip(self.start..) {
            let state = match rec.state {
                State::Available | State::Acquired => SnapshotState::Available,
                State::Acknowledged => SnapshotState::Acknowledged,
                State::Archived => SnapshotState::Archived,
            };
            if let Some(last) = runs.last_mut()
                && last.state == state
                && last.delivery_count == rec.delivery_count
            {
                last.last_offset = offset;
                continue;
            }
            runs.push(SnapshotRun {
                first_offset: offset,
                last_offset: offset,
                state,
                delivery_count: rec.delivery_count,
            });
        }
        ShareStateSnapshot {
            start_offset: self.start,
            runs,
        }
    }

    /// Locks up to `max_records` records for `member` until
    /// `now_ms + record_lock_duration_ms`: first the available records in the
    /// window, lowest offsets first, then new records from the end offset up to
    /// `hwm` while the window is shorter than `max_in_flight`. With
    /// `member_cap`, the member never holds more than that many at once (fair
    /// share); `None` is Kafka's greedy behaviour. Returns runs ascending by
    /// offset.
    pub fn acquire(
        &mut self,
        now_ms: i64,
        member: MemberKey,
        max_records: u32,
        member_cap: Option<u32>,
        hwm: i64,
        cfg: &ShareConfig,
    ) -> Vec<Acquired> {
        let mut budget = match member_cap {
            Some(cap) => max_records.min(cap.saturating_sub(self.acquired_by(member))),
            None => max_records,
        };
        let mut out = Vec::new();
        if budget == 0 {
            return out;
        }
        let deadline = now_ms.saturating_add(cfg.record_lock_duration_ms);
        let mut taken = 0u32;
        let mut archived = false;

        if self.available > 0 {
            let from = (self.avail_hint.max(self.start) - self.start) as usize;
            let mut unseen = self.available;
            let mut offset = self.start + from as i64;
            for rec in self.recs.range_mut(from.min(self.recs.len())..) {
                // Records at or past `hwm` are not acquired: the caller's read ends there.
                if budget == 0 || unseen == 0 || offset >= hwm {
                    break;
                }
                if rec.state == State::Available {
                    unseen -= 1;
                    self.available -= 1;
                    // Only reachable after a restore under a lower limit.
                    if rec.delivery_count >= cfg.delivery_count_limit {
                        rec.state = State::Archived;
                        archived = true;
                    } else {
                        rec.state = State::Acquired;
                        rec.delivery_count = rec.delivery_count.saturating_add(1);
                        rec.owner = member;
                        rec.deadline = deadline;
                        push_run(&mut out, offset, rec.delivery_count);
                        budget -= 1;
                        taken += 1;
                    }
                }
                offset += 1;
            }
            self.avail_hint = offset;
        }

        let max_len = cfg.max_in_flight as usize;
        while budget > 0 && self.recs.len() < max_len && self.end() < hwm {
            let offset = self.end();
            self.recs.push_back(Rec {
                state: State::Acquired,
                delivery_count: 1,
                owner: member,
                deadline,
            });
            push_run(&mut out, offset, 1);
            budget -= 1;
            taken += 1;
        }

        if taken > 0 {
            self.acquired += taken;
            *self.per_member.entry(member).or_insert(0) += taken;
            self.deadline_floor = self.deadline_floor.min(deadline);
        }
        if archived {
            self.advance();
        }
        out
    }

    /// The lowest offset an [`acquire`](Self::acquire) below `hwm` would take first: the
    /// first available record of the window, else the end offset when the window has room
    /// and records remain below `hwm`. `None`: nothing to acquire now.
    pub fn first_acquirable(&self, hwm: i64, cfg: &ShareConfig) -> Option<i64> {
        if self.available > 0 {
            let from = (self.avail_hint.max(self.start) - self.start) as usize;
            let offsets = self.start + from as i64..hwm;
            let recs = self.recs.range(from.min(self.recs.len())..);
            if let Some((offset, _)) = offsets
                .zip(recs)
                .find(|(_, rec)| rec.state == State::Available)
            {
                return Some(offset);
            }
        }
        (self.recs.len() < cfg.max_in_flight as usize && self.end() < hwm).then(|| self.end())
    }

    /// Applies `types` to `first_offset..=last_offset`: one type for the whole
    /// range, or one per offset. Every offset must be acquired by `member`;
    /// otherwise the call fails and changes nothing, so a member whose lock
    /// expired cannot acknowledge records someone else now holds.
    pub fn acknowledge(
        &mut self,
        now_ms: i64,
        member: MemberKey,
        first_offset: i64,
        last_offset: i64,
        types: &[i8],
        cfg: &ShareConfig,
    ) -> Result<(), AckError> {
        if first_offset > last_offset {
            return Err(AckError::InvalidRequest(format!(
                "first offset {first_offset} is after last offset {last_offset}"
            )));
        }
        let span = i128::from(last_offset) - i128::from(first_offset) + 1;
        if types.is_empty() || (types.len() != 1 && types.len() as i128 != span) {
            return Err(AckError::InvalidRequest(format!(
                "{} acknowledge types for {span} offsets",
                types.len()
            )));
        }
        if let Some(bad) = types.iter().find(|t| AckType::from_wire(**t).is_none()) {
            return Err(AckError::InvalidRequest(format!(
                "unknown acknowledge type {bad}"
            )));
        }
        let end = self.end();
        if first_offset < self.start || last_offset >= end {
            return Err(AckError::InvalidRecordState(format!(
                "offsets {first_offset}..={last_offset} are not all in the in-flight window {}..{end}",
                self.start
            )));
        }
        let lo = (first_offset - self.start) as usize;
        let hi = (last_offset - self.start) as usize;
        if let Some(i) = self
            .recs
            .range(lo..=hi)
            .position(|r| r.state != State::Acquired || r.owner != member)
        {
            return Err(AckError::InvalidRecordState(format!(
                "offset {} is not acquired by this member",
                first_offset + i as i64
            )));
        }

        let deadline = now_ms.saturating_add(cfg.record_lock_duration_ms);
        let per_offset = types.len() != 1;
        let mut unlocked = 0u32;
        let mut renewed = false;
        for (i, rec) in self.recs.range_mut(lo..=hi).enumerate() {
            let wire = if per_offset {
                types.get(i)
            } else {
                types.first()
            };
            let Some(kind) = wire.copied().and_then(AckType::from_wire) else {
                continue;
            };
            match kind {
                AckType::Renew => {
                    rec.deadline = deadline;
                    renewed = true;
                    continue;
                }
                AckType::Accept => rec.state = State::Acknowledged,
                AckType::Gap | AckType::Reject => rec.state = State::Archived,
                AckType::Release => {
                    rec.state = unlocked_state(rec.delivery_count, cfg);
                    if rec.state == State::Available {
                        self.available += 1;
                        self.avail_hint = self.avail_hint.min(first_offset + i as i64);
                    }
                }
            }
            unlocked += 1;
        }
        if renewed {
            self.deadline_floor = self.deadline_floor.min(deadline);
        }
        self.acquired -= unlocked;
        forget_locks(&mut self.per_member, member, unlocked);
        self.advance();
        Ok(())
    }

    /// Ends every lock whose deadline is at or before `now_ms`; the records
    /// become available again, or archived once delivered
    /// `delivery_count_limit` times. Returns whether anything changed.
    pub fn expire_locks(&mut self, now_ms: i64, cfg: &ShareConfig) -> bool {
        if self.acquired == 0 || now_ms < self.deadline_floor {
            return false;
        }
        let mut floor = i64::MAX;
        let mut expired = 0u32;
        for (rec, offset) in self.recs.iter_mut().zip(self.start..) {
            if rec.state != State::Acquired {
                continue;
            }
            if rec.deadline > now_ms {
                floor = floor.min(rec.deadline);
                continue;
            }
            rec.state = unlocked_state(rec.delivery_count, cfg);
            if rec.state == State::Available {
                self.available += 1;
                self.avail_hint = self.avail_hint.min(offset);
            }
            forget_locks(&mut self.per_member, rec.owner, 1);
            expired += 1;
        }
        self.acquired -= expired;
        self.deadline_floor = floor;
        if expired > 0 {
            self.advance();
        }
        expired > 0
    }

    /// The earliest lock deadline, for the caller's timer. Scans the window,
    /// so call it when re-arming the timer, not per record.
    pub fn next_deadline(&self) -> Option<i64> {
        if self.acquired == 0 {
            return None;
        }
        self.recs
            .iter()
            .filter(|r| r.state == State::Acquired)
            .map(|r| r.deadline)
            .min()
    }

    /// Ends every lock `member` holds (it left the group or closed its share
    /// session). Like Kafka, this costs no extra delivery: the acquisition
    /// already counted. Returns whether the member held anything.
    pub fn release_member(&mut self, member: MemberKey, cfg: &ShareConfig) -> bool {
        let Some(held) = self.per_member.remove(&member) else {
            return false;
        };
        let mut left = held;
        for (rec, offset) in self.recs.iter_mut().zip(self.start..) {
            if left == 0 {
                break;
            }
            if rec.state != State::Acquired || rec.owner != member {
                continue;
            }
            rec.state = unlocked_state(rec.delivery_count, cfg);
            if rec.state == State::Available {
                self.available += 1;
                self.avail_hint = self.avail_hint.min(offset);
            }
            left -= 1;
        }
        self.acquired -= held;
        self.advance();
        true
    }

    /// Retention deleted everything below `log_start`: those records can
    /// never be delivered, so they leave the window even when acquired (a
    /// later acknowledgement of them fails with `InvalidRecordState`).
    pub fn log_start_moved(&mut self, log_start: i64) {
        if log_start <= self.start {
            return;
        }
        let drop = (log_start - self.start).min(self.recs.len() as i64) as usize;
        for rec in self.recs.drain(..drop) {
            match rec.state {
                State::Available => self.available -= 1,
                State::Acquired => {
                    self.acquired -= 1;
                    forget_locks(&mut self.per_member, rec.owner, 1);
                }
                State::Acknowledged | State::Archived => {}
            }
        }
        // When the log start passed the end offset the window is now empty
        // and both move to it.
        self.start = log_start;
        self.advance();
    }

    /// Forgets the window and restarts at `start_offset` (an admin offset
    /// reset). Only allowed while no record is acquired, so no member holds a
    /// lock that silently vanishes.
    pub fn reset(&mut self, start_offset: i64) -> Result<(), AckError> {
        if self.acquired > 0 {
            return Err(AckError::InvalidRecordState(format!(
                "{} records are acquired",
                self.acquired
            )));
        }
        if start_offset < 0 {
            return Err(AckError::InvalidRequest(format!(
                "negative start offset {start_offset}"
            )));
        }
        self.recs.clear();
        self.available = 0;
        self.per_member.clear();
        self.start = start_offset;
        self.avail_hint = start_offset;
        self.deadline_floor = i64::MAX;
        Ok(())
    }

    /// The share-partition start offset (SPSO).
    pub fn start_offset(&self) -> i64 {
        self.start
    }

    /// The share-partition end offset (SPEO): the next offset never acquired.
    pub fn end_offset(&self) -> i64 {
        self.end()
    }

    /// Records in the window still to be processed: available or acquired.
    pub fn in_flight(&self) -> u32 {
        self.available + self.acquired
    }

    pub fn acquired_by(&self, member: MemberKey) -> u32 {
        self.per_member.get(&member).copied().unwrap_or(0)
    }

    pub fn acquired_total(&self) -> u32 {
        self.acquired
    }

    /// Records from the start offset up to `hwm` not yet acknowledged or
    /// archived.
    pub fn lag(&self, hwm: i64) -> i64 {
        let end = self.end();
        if hwm >= end {
            i64::from(self.in_flight()).saturating_add(hwm - end)
        } else if hwm <= self.start {
            0
        } else {
            let below = (hwm - self.start) as usize;
            self.recs
                .range(..below)
                .filter(|r| !r.state.is_done())
                .count() as i64
        }
    }

    fn end(&self) -> i64 {
        self.start + self.recs.len() as i64
    }

    /// Moves the start offset past the done prefix, freeing those entries.
    fn advance(&mut self) {
        while self.recs.front().is_some_and(|r| r.state.is_done()) {
            self.recs.pop_front();
            self.start += 1;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::collections::BTreeMap;

    const A: MemberKey = MemberKey(1);
    const B: MemberKey = MemberKey(2);

    const ACCEPT: i8 = 1;
    const RELEASE: i8 = 2;
    const REJECT: i8 = 3;
    const RENEW: i8 = 4;
    const GAP: i8 = 0;

    fn cfg() -> ShareConfig {
        ShareConfig {
            record_lock_duration_ms: 1000,
            delivery_count_limit: 3,
            max_in_flight: 100,
        }
    }

    fn run(first: i64, last: i64, count: i16) -> Acquired {
        Acquired {
            first_offset: first,
            last_offset: last,
            delivery_count: count,
        }
    }

    fn srun(first: i64, last: i64, state: SnapshotState, count: i16) -> SnapshotRun {
        SnapshotRun {
            first_offset: first,
            last_offset: last,
            state,
            delivery_count: count,
        }
    }

    /// Recounts everything the partition caches and checks it against the
    /// records themselves.
    fn check_consistent(p: &SharePartition) {
        let avail = p
            .recs
            .iter()
            .filter(|r| r.state == State::Available)
            .count() as u32;
        let acq = p.recs.iter().filter(|r| r.state == State::Acquired).count() as u32;
        assert_eq!(p.available, avail);
        assert_eq!(p.acquired, acq);
        let mut per: HashMap<MemberKey, u32> = HashMap::new();
        for r in p.recs.iter().filter(|r| r.state == State::Acquired) {
            *per.entry(r.owner).or_insert(0) += 1;
            assert!(r.deadline >= p.deadline_floor);
        }
        assert_eq!(p.per_member, per);
        assert!(p.recs.front().is_none_or(|r| !r.state.is_done()));
        for (r, offset) in p.recs.iter().zip(p.start..) {
            if r.state == State::Available {
                assert!(offset >= p.avail_hint, "available {offset} below hint");
            }
        }
    }

    #[test]
    fn acquires_new_records_up_to_hwm() {
        let c = cfg();
        let mut p = SharePartition::new(10);
        assert_eq!(p.acquire(0, A, 5, None, 13, &c), vec![run(10, 12, 1)]);
        assert_eq!(p.acquire(0, A, 5, None, 13, &c), vec![]);
        assert_eq!(p.acquire(0, B, 0, None, 20, &c), vec![]);
        assert_eq!((p.start_offset(), p.end_offset()), (10, 13));
        assert_eq!(
            (p.acquired_by(A), p.acquired_total(), p.in_flight()),
            (3, 3, 3)
        );
        assert_eq!(p.next_deadline(), Some(1000));
        check_consistent(&p);
    }

    #[test]
    fn acquires_available_lowest_first_then_new() {
        let c = cfg();
        let mut p = SharePartition::new(0);
        assert_eq!(p.acquire(0, A, 10, None, 10, &c), vec![run(0, 9, 1)]);
        p.acknowledge(0, A, 7, 7, &[RELEASE], &c).unwrap();
        p.acknowledge(0, A, 3, 4, &[RELEASE], &c).unwrap();
        let got = p.acquire(5, B, 4, None, 12, &c);
        assert_eq!(got, vec![run(3, 4, 2), run(7, 7, 2), run(10, 10, 1)]);
        assert_eq!(p.acquired_by(A), 7);
        assert_eq!(p.acquired_by(B), 4);
        check_consistent(&p);
    }

    #[test]
    fn window_is_capped_at_max_in_flight() {
        let c = ShareConfig {
            max_in_flight: 4,
            ..cfg()
        };
        let mut p = SharePartition::new(0);
        assert_eq!(p.acquire(0, A, 10, None, 100, &c), vec![run(0, 3, 1)]);
        // Acknowledging a record that is not at the start does not free room.
        p.acknowledge(0, A, 1, 1, &[ACCEPT], &c).unwrap();
        assert_eq!(p.acquire(0, A, 10, None, 100, &c), vec![]);
        p.acknowledge(0, A, 0, 0, &[ACCEPT], &c).unwrap();
        assert_eq!(p.start_offset(), 2);
        assert_eq!(p.acquire(0, B, 10, None, 100, &c), vec![run(4, 5, 1)]);
        check_consistent(&p);
    }

    #[test]
    fn member_cap_limits_what_a_member_holds() {
        let c = cfg();
        let mut p = SharePartition::new(0);
        assert_eq!(p.acquire(0, A, 10, Some(3), 100, &c), vec![run(0, 2, 1)]);
        assert_eq!(p.acquire(0, A, 10, Some(3), 100, &c), vec![]);
        assert_eq!(p.acquire(0, B, 2, Some(3), 100, &c), vec![run(3, 4, 1)]);
        p.acknowledge(0, A, 1, 1, &[ACCEPT], &c).unwrap();
        assert_eq!(p.acquire(0, A, 10, Some(3), 100, &c), vec![run(5, 5, 1)]);
        // A cap below what is already held gives nothing rather than failing.
        assert_eq!(p.acquire(0, A, 10, Some(1), 100, &c), vec![]);
        assert_eq!(p.acquire(0, A, 10, None, 100, &c), vec![run(6, 15, 1)]);
        check_consistent(&p);
    }

    #[test]
    fn accept_gap_and_reject_are_final() {
        let c = cfg();
        let mut p = SharePartition::new(0);
        p.acquire(0, A, 6, None, 6, &c);
        p.acknowledge(0, A, 0, 1, &[ACCEPT], &c).unwrap();
        p.acknowledge(0, A, 2, 3, &[GAP], &c).unwrap();
        p.acknowledge(0, A, 4, 5, &[REJECT], &c).unwrap();
        assert_eq!((p.start_offset(), p.end_offset()), (6, 6));
        assert_eq!(
            (p.in_flight(), p.acquired_total(), p.acquired_by(A)),
            (0, 0, 0)
        );
        assert_eq!(p.acquire(0, B, 10, None, 6, &c), vec![]);
        assert_eq!(p.next_deadline(), None);
        check_consistent(&p);
    }

    #[test]
    fn release_makes_records_available_again() {
        let c = cfg();
        let mut p = SharePartition::new(0);
        p.acquire(0, A, 3, None, 3, &c);
        p.acknowledge(0, A, 0, 2, &[RELEASE], &c).unwrap();
        assert_eq!((p.in_flight(), p.acquired_total()), (3, 0));
        assert_eq!(p.acquire(0, B, 10, None, 3, &c), vec![run(0, 2, 2)]);
        check_consistent(&p);
    }

    #[test]
    fn per_offset_types() {
        let c = cfg();
        let mut p = SharePartition::new(0);
        p.acquire(0, A, 5, None, 5, &c);
        p.acknowledge(10, A, 0, 4, &[ACCEPT, RELEASE, GAP, RENEW, REJECT], &c)
            .unwrap();
        assert_eq!(p.start_offset(), 1);
        assert_eq!(p.acquired_by(A), 1);
        assert_eq!(p.next_deadline(), Some(1010));
        assert_eq!(p.acquire(20, B, 10, None, 5, &c), vec![run(1, 1, 2)]);
        let s = p.snapshot();
        assert_eq!(
            s.runs,
            vec![
                srun(1, 1, SnapshotState::Available, 2),
                srun(2, 2, SnapshotState::Archived, 1),
                srun(3, 3, SnapshotState::Available, 1),
                srun(4, 4, SnapshotState::Archived, 1),
            ]
        );
        check_consistent(&p);
    }

    #[test]
    fn renew_extends_the_lock() {
        let c = cfg();
        let mut p = SharePartition::new(0);
        p.acquire(0, A, 2, None, 2, &c);
        p.acknowledge(900, A, 0, 0, &[RENEW], &c).unwrap();
        assert_eq!(p.next_deadline(), Some(1000));
        assert!(p.expire_locks(1000, &c));
        assert_eq!(p.acquired_by(A), 1);
        assert_eq!(p.next_deadline(), Some(1900));
        assert!(!p.expire_locks(1899, &c));
        p.acknowledge(1899, A, 0, 0, &[ACCEPT], &c).unwrap();
        assert_eq!(p.start_offset(), 1);
        check_consistent(&p);
    }

    #[test]
    fn wrong_owner_fails_and_changes_nothing() {
        let c = cfg();
        let mut p = SharePartition::new(0);
        p.acquire(0, A, 3, None, 6, &c);
        p.acquire(0, B, 3, None, 6, &c);
        p.acknowledge(0, A, 1, 1, &[RELEASE], &c).unwrap();
        let before = (
            p.snapshot(),
            p.acquired_by(A),
            p.acquired_by(B),
            p.next_deadline(),
        );
        let cases: [(MemberKey, i64, i64); 6] = [
            (A, 3, 3), // held by B
            (A, 2, 3), // partly held by B
            (A, 0, 1), // 1 was released
            (B, 0, 0), // held by A
            (A, 6, 6), // at the end offset
            (MemberKey(9), 0, 0),
        ];
        for (member, first, last) in cases {
            let err = p.acknowledge(5, member, first, last, &[ACCEPT], &c);
            assert!(
                matches!(err, Err(AckError::InvalidRecordState(_))),
                "{member:?} {first}..={last}: {err:?}"
            );
        }
        assert_eq!(
            before,
            (
                p.snapshot(),
                p.acquired_by(A),
                p.acquired_by(B),
                p.next_deadline()
            )
        );
        p.acknowledge(0, A, 0, 0, &[ACCEPT], &c).unwrap();
        assert!(matches!(
            p.acknowledge(0, A, 0, 0, &[ACCEPT], &c),
            Err(AckError::InvalidRecordState(_))
        ));
        check_consistent(&p);
    }

    #[test]
    fn malformed_acknowledgements_are_invalid_requests() {
        let c = cfg();
        let mut p = SharePartition::new(0);
        p.acquire(0, A, 3, None, 3, &c);
        let before = p.snapshot();
        let bad: [(i64, i64, &[i8]); 7] = [
            (2, 1, &[ACCEPT]),
            (0, 2, &[]),
            (0, 2, &[ACCEPT, ACCEPT]),
            (0, 0, &[ACCEPT, ACCEPT]),
            (0, 2, &[5]),
            (0, 1, &[ACCEPT, -1]),
            (i64::MIN, i64::MAX, &[ACCEPT, ACCEPT]),
        ];
        for (first, last, types) in bad {
            let err = p.acknowledge(0, A, first, last, types, &c);
            assert!(
                matches!(err, Err(AckError::InvalidRequest(_))),
                "{first}..={last} {types:?}: {err:?}"
            );
        }
        for (first, last) in [(i64::MIN, i64::MAX), (-1, 0), (i64::MAX, i64::MAX)] {
            let err = p.acknowledge(0, A, first, last, &[ACCEPT], &c);
            assert!(matches!(err, Err(AckError::InvalidRecordState(_))));
        }
        assert_eq!(p.snapshot(), before);
        assert_eq!(p.acquired_by(A), 3);
        assert!(
            AckError::InvalidRequest("x".into())
                .to_string()
                .contains('x')
        );
    }

    #[test]
    fn release_archives_at_the_delivery_limit() {
        let c = ShareConfig {
            delivery_count_limit: 2,
            ..cfg()
        };
        let mut p = SharePartition::new(0);
        assert_eq!(p.acquire(0, A, 2, None, 2, &c), vec![run(0, 1, 1)]);
        p.acknowledge(0, A, 0, 1, &[RELEASE], &c).unwrap();
        assert_eq!(p.acquire(0, A, 2, None, 2, &c), vec![run(0, 1, 2)]);
        p.acknowledge(0, A, 0, 0, &[RELEASE], &c).unwrap();
        assert_eq!((p.start_offset(), p.in_flight()), (1, 1));
        p.acknowledge(0, A, 1, 1, &[RELEASE], &c).unwrap();
        assert_eq!((p.start_offset(), p.end_offset(), p.in_flight()), (2, 2, 0));
        assert_eq!(p.acquire(0, A, 2, None, 2, &c), vec![]);
        check_consistent(&p);
    }

    #[test]
    fn lock_expiry_releases_then_archives_at_the_limit() {
        let c = ShareConfig {
            delivery_count_limit: 2,
            ..cfg()
        };
        let mut p = SharePartition::new(0);
        assert!(!p.expire_locks(0, &c));
        p.acquire(0, A, 2, None, 2, &c);
        assert!(!p.expire_locks(999, &c));
        assert!(p.expire_locks(1000, &c));
        assert!(!p.expire_locks(1000, &c));
        assert_eq!(
            (p.acquired_by(A), p.in_flight(), p.next_deadline()),
            (0, 2, None)
        );
        assert_eq!(p.acquire(1500, B, 1, None, 2, &c), vec![run(0, 0, 2)]);
        assert_eq!(p.acquire(1600, B, 1, None, 2, &c), vec![run(1, 1, 2)]);
        assert_eq!(p.next_deadline(), Some(2500));
        assert!(p.expire_locks(2500, &c));
        assert_eq!(p.next_deadline(), Some(2600));
        assert_eq!(p.start_offset(), 1);
        assert!(p.expire_locks(i64::MAX, &c));
        assert_eq!(
            (p.start_offset(), p.in_flight(), p.acquired_by(B)),
            (2, 0, 0)
        );
        // The expired member's late acknowledgement is refused.
        assert!(p.acknowledge(3000, A, 1, 1, &[ACCEPT], &c).is_err());
        check_consistent(&p);
    }

    #[test]
    fn release_member_frees_only_its_records_without_counting_a_delivery() {
        let c = ShareConfig {
            delivery_count_limit: 2,
            ..cfg()
        };
        let mut p = SharePartition::new(0);
        p.acquire(0, A, 2, None, 4, &c);
        p.acquire(0, B, 2, None, 4, &c);
        assert!(!p.release_member(MemberKey(7), &c));
        assert!(p.release_member(A, &c));
        assert!(!p.release_member(A, &c));
        assert_eq!(
            (p.acquired_by(A), p.acquired_by(B), p.in_flight()),
            (0, 2, 4)
        );
        assert_eq!(p.acquire(0, A, 10, None, 4, &c), vec![run(0, 1, 2)]);
        // At the limit now: leaving archives them.
        assert!(p.release_member(A, &c));
        assert_eq!((p.start_offset(), p.in_flight()), (2, 2));
        check_consistent(&p);
    }

    #[test]
    fn start_offset_advances_over_the_done_prefix() {
        let c = cfg();
        let mut p = SharePartition::new(0);
        p.acquire(0, A, 5, None, 5, &c);
        p.acknowledge(0, A, 2, 2, &[ACCEPT], &c).unwrap();
        p.acknowledge(0, A, 1, 1, &[REJECT], &c).unwrap();
        assert_eq!(p.start_offset(), 0);
        p.acknowledge(0, A, 0, 0, &[ACCEPT], &c).unwrap();
        assert_eq!(p.start_offset(), 3);
        assert_eq!(p.recs.len(), 2);
        p.acknowledge(0, A, 3, 4, &[ACCEPT], &c).unwrap();
        assert_eq!((p.start_offset(), p.end_offset()), (5, 5));
        assert!(p.recs.is_empty());
        check_consistent(&p);
    }

    #[test]
    fn log_start_drops_records_even_when_acquired() {
        let c = cfg();
        let mut p = SharePartition::new(0);
        p.acquire(0, A, 3, None, 6, &c);
        p.acquire(0, B, 3, None, 6, &c);
        p.acknowledge(0, B, 4, 4, &[RELEASE], &c).unwrap();
        p.log_start_moved(0);
        assert_eq!(p.start_offset(), 0);
        p.log_start_moved(4);
        assert_eq!((p.start_offset(), p.end_offset()), (4, 6));
        assert_eq!(
            (p.acquired_by(A), p.acquired_by(B), p.in_flight()),
            (0, 1, 2)
        );
        assert!(matches!(
            p.acknowledge(0, A, 0, 0, &[ACCEPT], &c),
            Err(AckError::InvalidRecordState(_))
        ));
        assert!(matches!(
            p.acknowledge(0, B, 3, 3, &[ACCEPT], &c),
            Err(AckError::InvalidRecordState(_))
        ));
        p.acknowledge(0, B, 5, 5, &[ACCEPT], &c).unwrap();
        check_consistent(&p);

        p.log_start_moved(50);
        assert_eq!(
            (p.start_offset(), p.end_offset(), p.in_flight()),
            (50, 50, 0)
        );
        assert_eq!((p.acquired_total(), p.next_deadline()), (0, None));
        assert_eq!(p.acquire(0, A, 2, None, 60, &c), vec![run(50, 51, 1)]);
        check_consistent(&p);
    }

    #[test]
    fn log_start_lands_on_done_records() {
        let c = cfg();
        let mut p = SharePartition::new(0);
        p.acquire(0, A, 4, None, 4, &c);
        p.acknowledge(0, A, 2, 2, &[ACCEPT], &c).unwrap();
        p.log_start_moved(2);
        assert_eq!(p.start_offset(), 3);
        check_consistent(&p);
    }

    #[test]
    fn reset_requires_no_acquired_records() {
        let c = cfg();
        let mut p = SharePartition::new(0);
        p.acquire(0, A, 3, None, 3, &c);
        assert!(matches!(p.reset(0), Err(AckError::InvalidRecordState(_))));
        assert_eq!(p.acquired_by(A), 3);
        p.acknowledge(0, A, 0, 2, &[RELEASE], &c).unwrap();
        assert!(matches!(p.reset(-1), Err(AckError::InvalidRequest(_))));
        p.reset(100).unwrap();
        assert_eq!(
            (p.start_offset(), p.end_offset(), p.in_flight()),
            (100, 100, 0)
        );
        assert_eq!(p.acquire(0, A, 3, None, 101, &c), vec![run(100, 100, 1)]);
        p.acknowledge(0, A, 100, 100, &[RELEASE], &c).unwrap();
        p.reset(7).unwrap();
        assert_eq!(p.acquire(0, A, 3, None, 8, &c), vec![run(7, 7, 1)]);
        check_consistent(&p);
    }

    #[test]
    fn queries_and_lag() {
        let c = cfg();
        let mut p = SharePartition::new(10);
        assert_eq!(p.lag(5), 0);
        assert_eq!(p.lag(15), 5);
        p.acquire(0, A, 4, None, 20, &c);
        p.acknowledge(0, A, 11, 11, &[ACCEPT], &c).unwrap();
        p.acknowledge(0, A, 12, 12, &[RELEASE], &c).unwrap();
        assert_eq!((p.in_flight(), p.acquired_total()), (3, 2));
        assert_eq!(p.lag(20), 3 + 6);
        assert_eq!(p.lag(14), 3);
        assert_eq!(p.lag(12), 1);
        assert_eq!(p.lag(10), 0);
        assert_eq!(p.lag(i64::MAX), i64::MAX - 14 + 3);
    }

    #[test]
    fn snapshot_round_trip_redelivers_acquired_but_not_acknowledged() {
        let c = cfg();
        let mut p = SharePartition::new(0);
        p.acquire(0, A, 8, None, 8, &c);
        p.acknowledge(
            0,
            A,
            0,
            7,
            &[
                RELEASE, ACCEPT, ACCEPT, REJECT, RELEASE, RENEW, ACCEPT, RENEW,
            ],
            &c,
        )
        .unwrap();
        p.acquire(0, B, 1, None, 8, &c);
        let s = p.snapshot();
        assert_eq!(
            s,
            ShareStateSnapshot {
                start_offset: 0,
                runs: vec![
                    srun(0, 0, SnapshotState::Available, 2),
                    srun(1, 2, SnapshotState::Acknowledged, 1),
                    srun(3, 3, SnapshotState::Archived, 1),
                    srun(4, 5, SnapshotState::Available, 1),
                    srun(6, 6, SnapshotState::Acknowledged, 1),
                    srun(7, 7, SnapshotState::Available, 1),
                ],
            }
        );
        let json = serde_json::to_string(&s).unwrap();
        assert_eq!(
            json,
            r#"{"start_offset":0,"runs":[[0,0,0,2],[1,2,2,1],[3,3,4,1],[4,5,0,1],[6,6,2,1],[7,7,0,1]]}"#
        );
        let back: ShareStateSnapshot = serde_json::from_str(&json).unwrap();
        assert_eq!(back, s);

        let mut q = SharePartition::restore(&back);
        assert_eq!(q.snapshot(), s);
        assert_eq!(
            (
                q.start_offset(),
                q.end_offset(),
                q.in_flight(),
                q.acquired_total()
            ),
            (0, 8, 4, 0)
        );
        check_consistent(&q);
        let got = q.acquire(0, A, 10, None, 10, &c);
        assert_eq!(
            got,
            vec![run(0, 0, 3), run(4, 5, 2), run(7, 7, 2), run(8, 9, 1)]
        );
        check_consistent(&q);

        let empty = SharePartition::new(42).snapshot();
        assert_eq!(empty.runs, vec![]);
        assert_eq!(SharePartition::restore(&empty).end_offset(), 42);
        assert!(
            serde_json::from_str::<ShareStateSnapshot>(r#"{"start_offset":0,"runs":[[0,0,1,1]]}"#)
                .is_err()
        );
        assert_eq!(
            serde_json::from_str::<ShareStateSnapshot>(r#"{"start_offset":3}"#).unwrap(),
            SharePartition::new(3).snapshot()
        );
    }

    #[test]
    fn snapshot_of_a_full_mixed_window_is_small() {
        let c = ShareConfig {
            max_in_flight: 2000,
            ..cfg()
        };
        let mut p = SharePartition::new(1_000_000);
        // Five members fetch batches of 100 and settle them in blocks of ten:
        // some still held, some accepted, released (and redelivered), rejected.
        for i in 0..40u32 {
            let m = MemberKey(i % 5);
            for r in p.acquire(0, m, 100, None, 1_010_000, &c) {
                for o in r.first_offset..=r.last_offset {
                    let kind = match (o / 10) % 5 {
                        0 | 1 => continue,
                        2 => ACCEPT,
                        3 => RELEASE,
                        _ => REJECT,
                    };
                    p.acknowledge(0, m, o, o, &[kind], &c).unwrap();
                }
            }
        }
        assert_eq!(p.end_offset() - p.start_offset(), 2000);
        let json = serde_json::to_string(&p.snapshot()).unwrap();
        assert!(json.len() < 6000, "{} bytes", json.len());
        let back = SharePartition::restore(&serde_json::from_str(&json).unwrap());
        assert_eq!(back.snapshot(), p.snapshot());
    }

    #[test]
    fn restore_ignores_bad_runs() {
        use SnapshotState::{Acknowledged as Ack, Archived as Arc, Available as Av};
        let s = ShareStateSnapshot {
            start_offset: 10,
            runs: vec![
                srun(0, 5, Ack, 1),         // below the start: dropped
                srun(8, 11, Av, 2),         // straddles the start: trimmed
                srun(13, 12, Ack, 1),       // inverted
                srun(11, 11, Ack, 1),       // overlaps the previous run
                srun(12, 12, Ack, -4),      // negative count
                srun(15, 15, Arc, 1),       // gap 13..15 becomes available
                srun(14, 20, Ack, 1),       // out of order
                srun(16, i64::MAX, Ack, 1), // far too long
                srun(16, 16, Av, 7),
            ],
        };
        let p = SharePartition::restore(&s);
        check_consistent(&p);
        assert_eq!(
            p.snapshot(),
            ShareStateSnapshot {
                start_offset: 10,
                runs: vec![
                    srun(10, 11, Av, 2),
                    srun(12, 12, Ack, 0),
                    srun(13, 14, Av, 0),
                    srun(15, 15, Arc, 1),
                    srun(16, 16, Av, 7),
                ],
            }
        );

        let s = ShareStateSnapshot {
            start_offset: -1,
            runs: vec![srun(0, 2, Ack, 1), srun(3, 3, Av, 1)],
        };
        let p = SharePartition::restore(&s);
        assert_eq!((p.start_offset(), p.end_offset()), (3, 4));
        let s = ShareStateSnapshot {
            start_offset: i64::MAX,
            runs: vec![srun(i64::MIN, i64::MAX, Av, 1)],
        };
        let p = SharePartition::restore(&s);
        assert_eq!(p.end_offset(), i64::MAX);
        check_consistent(&p);
    }

    #[test]
    fn restored_records_past_a_lowered_limit_are_archived_not_delivered() {
        let c = cfg();
        let s = ShareStateSnapshot {
            start_offset: 0,
            runs: vec![
                srun(0, 1, SnapshotState::Available, 3),
                srun(2, 2, SnapshotState::Available, 1),
            ],
        };
        let mut p = SharePartition::restore(&s);
        assert_eq!(
            p.acquire(0, A, 10, None, 4, &c),
            vec![run(2, 2, 2), run(3, 3, 1)]
        );
        assert_eq!(p.start_offset(), 2);
        check_consistent(&p);
    }

    #[test]
    fn acquire_does_not_rescan_settled_prefix() {
        let c = cfg();
        let mut p = SharePartition::new(0);
        p.acquire(0, A, 50, None, 50, &c);
        p.acknowledge(0, A, 40, 41, &[RELEASE], &c).unwrap();
        assert_eq!(p.acquire(0, B, 1, None, 50, &c), vec![run(40, 40, 2)]);
        assert_eq!(p.avail_hint, 41);
        p.acknowledge(0, A, 10, 10, &[RELEASE], &c).unwrap();
        assert_eq!(p.avail_hint, 10);
        assert_eq!(
            p.acquire(0, B, 5, None, 50, &c),
            vec![run(10, 10, 2), run(41, 41, 2)]
        );
        check_consistent(&p);
    }

    #[test]
    fn offsets_near_the_top_of_the_range() {
        let c = cfg();
        let mut p = SharePartition::new(i64::MAX - 2);
        assert_eq!(
            p.acquire(0, A, 5, None, i64::MAX, &c),
            vec![run(i64::MAX - 2, i64::MAX - 1, 1)]
        );
        assert_eq!(p.end_offset(), i64::MAX);
        assert_eq!(p.acquire(0, A, 5, None, i64::MAX, &c), vec![]);
        p.acknowledge(i64::MAX, A, i64::MAX - 1, i64::MAX - 1, &[RELEASE], &c)
            .unwrap();
        assert!(
            p.acknowledge(0, A, i64::MAX, i64::MAX, &[ACCEPT], &c)
                .is_err()
        );
        assert_eq!(
            p.acquire(i64::MAX, B, 5, None, i64::MAX, &c),
            vec![run(i64::MAX - 1, i64::MAX - 1, 2)]
        );
        assert_eq!(p.next_deadline(), Some(1000));
        assert!(p.expire_locks(i64::MAX, &c));
        let s = p.snapshot();
        assert_eq!(SharePartition::restore(&s).snapshot(), s);
        p.log_start_moved(i64::MAX);
        assert_eq!(
            (p.start_offset(), p.end_offset(), p.in_flight()),
            (i64::MAX, i64::MAX, 0)
        );
        assert_eq!(p.lag(i64::MAX), 0);
        check_consistent(&p);
    }

    // --- model-based property test ---

    #[derive(Clone, Copy, Debug, PartialEq)]
    enum M {
        Avail,
        Held { owner: u32, deadline: i64 },
        Done,
    }

    #[derive(Clone, Debug)]
    enum Op {
        Acquire {
            member: u32,
            max: u32,
            cap: Option<u32>,
            grow: i64,
        },
        Ack {
            member: u32,
            pick: usize,
            stray: bool,
            single: bool,
            types: Vec<i8>,
        },
        Expire(i64),
        Release(u32),
        LogStart(i64),
    }

    fn op() -> impl Strategy<Value = Op> {
        let member = 0u32..3;
        let ty = prop_oneof![12 => 0i8..=4, 1 => Just(5i8)];
        prop_oneof![
            4 => (member.clone(), 0u32..8, proptest::option::of(0u32..8), 0i64..8)
                .prop_map(|(member, max, cap, grow)| Op::Acquire { member, max, cap, grow }),
            5 => (member.clone(), any::<usize>(), prop::bool::weighted(0.15), any::<bool>(),
                  prop::collection::vec(ty, 1..5))
                .prop_map(|(member, pick, stray, single, types)| Op::Ack {
                    member, pick, stray, single, types
                }),
            2 => (0i64..150).prop_map(Op::Expire),
            1 => member.prop_map(Op::Release),
            1 => (0i64..6).prop_map(Op::LogStart),
        ]
    }

    struct Model {
        recs: BTreeMap<i64, (M, i16)>,
        end: i64,
    }

    impl Model {
        fn start(&self) -> i64 {
            self.recs
                .iter()
                .find(|(_, (m, _))| *m != M::Done)
                .map_or(self.end, |(o, _)| *o)
        }

        fn unlock(m: &mut M, count: i16, c: &ShareConfig) {
            *m = if count >= c.delivery_count_limit {
                M::Done
            } else {
                M::Avail
            };
        }
    }

    fn check_against_model(p: &SharePartition, model: &Model, hwm: i64) {
        check_consistent(p);
        let start = model.start();
        assert_eq!(p.start_offset(), start);
        assert_eq!(p.end_offset(), model.end);
        assert!(start <= model.end && model.end <= hwm);
        for (offset, (m, count)) in &model.recs {
            if *m != M::Done {
                assert!(start <= *offset && *offset < model.end);
                let rec = p.recs[(offset - start) as usize];
                assert_eq!(rec.delivery_count, *count);
                match *m {
                    M::Avail => assert_eq!(rec.state, State::Available),
                    M::Held { owner, deadline } => {
                        assert_eq!(rec.state, State::Acquired);
                        assert_eq!((rec.owner, rec.deadline), (MemberKey(owner), deadline));
                    }
                    M::Done => {}
                }
            }
        }
        let held = |who: Option<u32>| {
            model
                .recs
                .values()
                .filter(
                    |(m, _)| matches!(m, M::Held { owner, .. } if who.is_none_or(|w| w == *owner)),
                )
                .count() as u32
        };
        for m in 0..3 {
            assert_eq!(p.acquired_by(MemberKey(m)), held(Some(m)));
        }
        assert_eq!(p.acquired_total(), held(None));
        let live = model.recs.values().filter(|(m, _)| *m != M::Done).count() as u32;
        assert_eq!(p.in_flight(), live);
        assert_eq!(p.lag(hwm), i64::from(live) + hwm - model.end);
        let deadline = model
            .recs
            .values()
            .filter_map(|(m, _)| match m {
                M::Held { deadline, .. } => Some(*deadline),
                _ => None,
            })
            .min();
        assert_eq!(p.next_deadline(), deadline);

        let s = p.snapshot();
        assert_eq!(SharePartition::restore(&s).snapshot(), s);
        let json = serde_json::to_string(&s).unwrap();
        assert_eq!(
            serde_json::from_str::<ShareStateSnapshot>(&json).unwrap(),
            s
        );
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(300))]
        #[test]
        fn random_operations_keep_the_invariants(ops in prop::collection::vec(op(), 1..80)) {
            let c = ShareConfig { record_lock_duration_ms: 100, delivery_count_limit: 3, max_in_flight: 16 };
            let mut p = SharePartition::new(0);
            let mut model = Model { recs: BTreeMap::new(), end: 0 };
            let mut now = 0i64;
            let mut hwm = 0i64;
            for op in ops {
                match op {
                    Op::Acquire { member, max, cap, grow } => {
                        hwm += grow;
                        let key = MemberKey(member);
                        let held_before = p.acquired_by(key);
                        let budget = match cap {
                            Some(cap) => max.min(cap.saturating_sub(held_before)),
                            None => max,
                        } as usize;
                        let got = p.acquire(now, key, max, cap, hwm, &c);
                        let mut offsets = Vec::new();
                        for r in &got {
                            prop_assert!(r.first_offset <= r.last_offset);
                            for o in r.first_offset..=r.last_offset {
                                offsets.push((o, r.delivery_count));
                            }
                        }
                        // Greedy and lowest first: available records, then new ones.
                        let mut expected: Vec<i64> = model
                            .recs
                            .iter()
                            .filter(|(_, (m, _))| *m == M::Avail)
                            .map(|(o, _)| *o)
                            .take(budget)
                            .collect();
                        let room = (i64::from(c.max_in_flight) - (model.end - model.start()))
                            .min(hwm - model.end)
                            .max(0) as usize;
                        let fresh = budget.saturating_sub(expected.len()).min(room);
                        expected.extend(model.end..model.end + fresh as i64);
                        prop_assert_eq!(offsets.iter().map(|(o, _)| *o).collect::<Vec<_>>(), expected);
                        for (o, count) in offsets {
                            let entry = model.recs.entry(o).or_insert((M::Avail, 0));
                            // Never a done record, never one someone holds.
                            prop_assert_eq!(entry.0, M::Avail);
                            prop_assert_eq!(count, entry.1 + 1);
                            *entry = (M::Held { owner: member, deadline: now + 100 }, count);
                            model.end = model.end.max(o + 1);
                        }
                        if let Some(cap) = cap {
                            prop_assert!(p.acquired_by(key) <= cap.max(held_before));
                        }
                    }
                    Op::Ack { member, pick, stray, single, types } => {
                        let owned: Vec<i64> = model
                            .recs
                            .iter()
                            .filter(|(_, (m, _))| matches!(m, M::Held { owner, .. } if *owner == member))
                            .map(|(o, _)| *o)
                            .collect();
                        let first = if stray || owned.is_empty() {
                            (pick % (model.end as usize + 3)) as i64 - 1
                        } else {
                            owned[pick % owned.len()]
                        };
                        let last = first + types.len() as i64 - 1;
                        let sent: &[i8] = if single { &types[..1] } else { &types };
                        let before = p.snapshot();
                        let result = p.acknowledge(now, MemberKey(member), first, last, sent, &c);
                        let all_held = (first..=last).all(|o| {
                            matches!(model.recs.get(&o), Some((M::Held { owner, .. }, _)) if *owner == member)
                        });
                        if sent.iter().any(|t| AckType::from_wire(*t).is_none()) {
                            prop_assert!(matches!(result, Err(AckError::InvalidRequest(_))));
                        } else if !all_held {
                            prop_assert!(matches!(result, Err(AckError::InvalidRecordState(_))));
                        } else {
                            prop_assert_eq!(&result, &Ok(()));
                        }
                        if result.is_err() {
                            prop_assert_eq!(p.snapshot(), before);
                        } else {
                            for (i, o) in (first..=last).enumerate() {
                                let kind = if single { sent[0] } else { sent[i] };
                                let Some((m, count)) = model.recs.get_mut(&o) else {
                                    continue;
                                };
                                match AckType::from_wire(kind) {
                                    Some(AckType::Renew) => {
                                        *m = M::Held { owner: member, deadline: now + 100 }
                                    }
                                    Some(AckType::Release) => Model::unlock(m, *count, &c),
                                    _ => *m = M::Done,
                                }
                            }
                        }
                    }
                    Op::Expire(dt) => {
                        now += dt;
                        let mut changed = false;
                        for (m, count) in model.recs.values_mut() {
                            if matches!(m, M::Held { deadline, .. } if *deadline <= now) {
                                Model::unlock(m, *count, &c);
                                changed = true;
                            }
                        }
                        prop_assert_eq!(p.expire_locks(now, &c), changed);
                    }
                    Op::Release(member) => {
                        let mut changed = false;
                        for (m, count) in model.recs.values_mut() {
                            if matches!(m, M::Held { owner, .. } if *owner == member) {
                                Model::unlock(m, *count, &c);
                                changed = true;
                            }
                        }
                        prop_assert_eq!(p.release_member(MemberKey(member), &c), changed);
                    }
                    Op::LogStart(k) => {
                        let log_start = (model.start() + k).min(hwm);
                        p.log_start_moved(log_start);
                        model.recs.retain(|o, _| *o >= log_start);
                        model.end = model.end.max(log_start);
                    }
                }
                check_against_model(&p, &model, hwm);
            }
        }
    }
}
