//! The records of a trigger's state log, and their binary encoding.
//!
//! Each trigger keeps its state in an internal topic of its own (one partition), so that the
//! broker's storage (the fsync'd local log, or object storage) makes it durable in every
//! storage mode. The log is a sequence of these records:
//!
//! - [`LogRecord::Step`]: what one evaluation step changed: the source positions after it, the
//!   trigger's clock, the entities whose state changed (or was dropped), and the firings it
//!   made. One step is one record, so it is durable all or nothing: a firing exists exactly
//!   when the state change and the source positions that made it exist (the outbox).
//! - [`LogRecord::Delivered`]: firings up to a sequence number reached the sink, and, for a
//!   topic sink, where the sink's partitions ended after them.
//! - [`LogRecord::Chunk`] … [`LogRecord::End`]: a snapshot: every entity's state in chunks,
//!   then the rest of the state (positions, clock, undelivered firings). Once an `End` is
//!   durable, everything before its first chunk is deleted from the log.
//!
//! Encoding: a kind byte, then fixed-width little-endian integers and length-prefixed byte
//! strings. Decoding checks every length against what is left and never panics.

/// Format version, first byte of every record after the kind; a record of another version is
/// refused (a newer broker's log read by an older one).
const VERSION: u8 = 1;

const KIND_STEP: u8 = b'S';
const KIND_DELIVERED: u8 = b'D';
const KIND_CHUNK: u8 = b'C';
/// The first byte of an `End` record (recovery looks for them without decoding the rest).
pub const KIND_END: u8 = b'E';

/// How far a trigger has read one source partition.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Position {
    /// Index into the trigger's `sources`.
    pub source: u16,
    pub partition: i32,
    /// The next offset to read.
    pub next_offset: i64,
}

/// One firing, as the outbox keeps it until it is delivered.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Fired {
    /// Unique and increasing per trigger: the firing's identity (idempotency key, dedup).
    pub seq: u64,
    pub entity: Vec<u8>,
    pub time_ms: i64,
    /// The events that made the rule true: (index into the rule's event names, time).
    pub events: Vec<(u16, i64)>,
}

/// Where one sink partition ended after a delivery.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SinkMark {
    pub partition: i32,
    pub end_offset: i64,
}

/// One record of the state log.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LogRecord {
    Step {
        positions: Vec<Position>,
        clock_ms: i64,
        /// Entity → its new state, or `None`: back to fresh (dropped).
        updates: Vec<(Vec<u8>, Option<Vec<u8>>)>,
        firings: Vec<Fired>,
    },
    Delivered {
        /// Every firing with `seq` below this reached the sink (or the dead-letter topic).
        next_seq: u64,
        sink_marks: Vec<SinkMark>,
    },
    Chunk {
        snapshot: u64,
        entities: Vec<(Vec<u8>, Vec<u8>)>,
    },
    End {
        snapshot: u64,
        /// Offset of the snapshot's first chunk (the log is cut there once this is durable).
        first_chunk_offset: i64,
        positions: Vec<Position>,
        clock_ms: i64,
        /// The next firing's sequence number.
        next_seq: u64,
        /// Firings below this were delivered.
        delivered_seq: u64,
        sink_marks: Vec<SinkMark>,
        /// Firings made but not delivered when the snapshot was taken.
        pending: Vec<Fired>,
    },
}

/// A state-log record that does not decode.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("trigger state record: {0}")]
pub struct DecodeError(pub String);

impl LogRecord {
    pub fn encode(&self, out: &mut Vec<u8>) {
        let mut w = Writer(out);
        match self {
            LogRecord::Step {
                positions,
                clock_ms,
                updates,
                firings,
            } => {
                w.u8(KIND_STEP);
                w.u8(VERSION);
                w.positions(positions);
                w.i64(*clock_ms);
                w.u32(updates.len() as u32);
                for (entity, state) in updates {
                    w.bytes(entity);
                    match state {
                        Some(state) => {
                            w.u8(1);
                            w.bytes(state);
                        }
                        None => w.u8(0),
                    }
                }
                w.firings(firings);
            }
            LogRecord::Delivered {
                next_seq,
                sink_marks,
            } => {
                w.u8(KIND_DELIVERED);
                w.u8(VERSION);
                w.u64(*next_seq);
                w.marks(sink_marks);
            }
            LogRecord::Chunk { snapshot, entities } => {
                w.u8(KIND_CHUNK);
                w.u8(VERSION);
                w.u64(*snapshot);
                w.u32(entities.len() as u32);
                for (entity, state) in entities {
                    w.bytes(entity);
                    w.bytes(state);
                }
            }
            LogRecord::End {
                snapshot,
                first_chunk_offset,
                positions,
                clock_ms,
                next_seq,
                delivered_seq,
                sink_marks,
                pending,
            } => {
                w.u8(KIND_END);
                w.u8(VERSION);
                w.u64(*snapshot);
                w.i64(*first_chunk_offset);
                w.positions(positions);
                w.i64(*clock_ms);
                w.u64(*next_seq);
                w.u64(*delivered_seq);
                w.marks(sink_marks);
                w.firings(pending);
            }
        }
    }

    pub fn decode(bytes: &[u8]) -> Result<LogRecord, DecodeError> {
        let mut r = Reader(bytes);
        let kind = r.u8()?;
        let version = r.u8()?;
        if version != VERSION {
            return Err(DecodeError(format!(
                "format version {version}, this broker reads version {VERSION}"
            )));
        }
        let record = match kind {
            KIND_STEP => {
                let positions = r.positions()?;
                let clock_ms = r.i64()?;
                let n = r.count(5)?;
                let mut updates = Vec::with_capacity(n);
                for _ in 0..n {
                    let entity = r.bytes()?.to_vec();
                    let state = match r.u8()? {
                        0 => None,
                        1 => Some(r.bytes()?.to_vec()),
                        other => return Err(DecodeError(format!("update flag {other}"))),
                    };
                    updates.push((entity, state));
                }
                let firings = r.firings()?;
                LogRecord::Step {
                    positions,
                    clock_ms,
                    updates,
                    firings,
                }
            }
            KIND_DELIVERED => LogRecord::Delivered {
                next_seq: r.u64()?,
                sink_marks: r.marks()?,
            },
            KIND_CHUNK => {
                let snapshot = r.u64()?;
                let n = r.count(8)?;
                let mut entities = Vec::with_capacity(n);
                for _ in 0..n {
                    let entity = r.bytes()?.to_vec();
                    let state = r.bytes()?.to_vec();
                    entities.push((entity, state));
                }
                LogRecord::Chunk { snapshot, entities }
            }
            KIND_END => LogRecord::End {
                snapshot: r.u64()?,
                first_chunk_offset: r.i64()?,
                positions: r.positions()?,
                clock_ms: r.i64()?,
                next_seq: r.u64()?,
                delivered_seq: r.u64()?,
                sink_marks: r.marks()?,
                pending: r.firings()?,
            },
            other => return Err(DecodeError(format!("unknown record kind {other:#04x}"))),
        };
        if !r.0.is_empty() {
            return Err(DecodeError(format!(
                "{} bytes left over after the record",
                r.0.len()
            )));
        }
        Ok(record)
    }
}

/// Writes a [`LogRecord::Step`] piece by piece, without building its vectors first: the
/// engine encodes entity ids and states straight from its slots. The bytes are exactly
/// [`LogRecord::encode`]'s.
#[derive(Debug)]
pub struct StepEncoder<'a> {
    out: &'a mut Vec<u8>,
    /// Where the update count goes, written once known.
    count_at: usize,
    count: u32,
}

impl<'a> StepEncoder<'a> {
    pub fn begin(out: &'a mut Vec<u8>, positions: &[Position], clock_ms: i64) -> StepEncoder<'a> {
        let mut w = Writer(out);
        w.u8(KIND_STEP);
        w.u8(VERSION);
        w.positions(positions);
        w.i64(clock_ms);
        let count_at = out.len();
        out.extend_from_slice(&0u32.to_le_bytes());
        StepEncoder {
            out,
            count_at,
            count: 0,
        }
    }

    /// One entity's new state (`encode` appends it), or `None`: dropped.
    pub fn update(&mut self, entity: &[u8], state: Option<impl FnOnce(&mut Vec<u8>)>) {
        Writer(self.out).bytes(entity);
        match state {
            Some(encode) => {
                self.out.push(1);
                let len_at = self.out.len();
                self.out.extend_from_slice(&0u32.to_le_bytes());
                encode(self.out);
                let len = (self.out.len() - len_at - 4) as u32;
                self.out[len_at..len_at + 4].copy_from_slice(&len.to_le_bytes());
            }
            None => self.out.push(0),
        }
        self.count += 1;
    }

    /// Ends the record with its firings; returns the number of updates written.
    pub fn finish(self, firings: &[Fired]) -> usize {
        self.out[self.count_at..self.count_at + 4].copy_from_slice(&self.count.to_le_bytes());
        Writer(self.out).firings(firings);
        self.count as usize
    }
}

/// Bytes a [`LogRecord::Step`] update of this entity and state adds (to cut steps under the
/// record size limit).
pub fn update_bytes(entity: &[u8], state: Option<&[u8]>) -> usize {
    4 + entity.len() + 1 + state.map_or(0, |s| 4 + s.len())
}

/// Bytes a [`Fired`] adds.
pub fn fired_bytes(fired: &Fired) -> usize {
    8 + 4 + fired.entity.len() + 8 + 4 + fired.events.len() * 10
}

struct Writer<'a>(&'a mut Vec<u8>);

impl Writer<'_> {
    fn u8(&mut self, v: u8) {
        self.0.push(v);
    }
    fn u16(&mut self, v: u16) {
        self.0.extend_from_slice(&v.to_le_bytes());
    }
    fn u32(&mut self, v: u32) {
        self.0.extend_from_slice(&v.to_le_bytes());
    }
    fn u64(&mut self, v: u64) {
        self.0.extend_from_slice(&v.to_le_bytes());
    }
    fn i32(&mut self, v: i32) {
        self.0.extend_from_slice(&v.to_le_bytes());
    }
    fn i64(&mut self, v: i64) {
        self.0.extend_from_slice(&v.to_le_bytes());
    }
    fn bytes(&mut self, v: &[u8]) {
        self.u32(v.len() as u32);
        self.0.extend_from_slice(v);
    }
    fn positions(&mut self, positions: &[Position]) {
        self.u32(positions.len() as u32);
        for p in positions {
            self.u16(p.source);
            self.i32(p.partition);
            self.i64(p.next_offset);
        }
    }
    fn marks(&mut self, marks: &[SinkMark]) {
        self.u32(marks.len() as u32);
        for m in marks {
            self.i32(m.partition);
            self.i64(m.end_offset);
        }
    }
    fn firings(&mut self, firings: &[Fired]) {
        self.u32(firings.len() as u32);
        for f in firings {
            self.u64(f.seq);
            self.bytes(&f.entity);
            self.i64(f.time_ms);
            self.u32(f.events.len() as u32);
            for (event, time) in &f.events {
                self.u16(*event);
                self.i64(*time);
            }
        }
    }
}

struct Reader<'a>(&'a [u8]);

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8], DecodeError> {
        if self.0.len() < n {
            return Err(DecodeError(format!(
                "cut short: wanted {n} bytes, {} left",
                self.0.len()
            )));
        }
        let (head, rest) = self.0.split_at(n);
        self.0 = rest;
        Ok(head)
    }
    fn array<const N: usize>(&mut self) -> Result<[u8; N], DecodeError> {
        let mut out = [0u8; N];
        out.copy_from_slice(self.take(N)?);
        Ok(out)
    }
    fn u8(&mut self) -> Result<u8, DecodeError> {
        Ok(self.take(1)?[0])
    }
    fn u16(&mut self) -> Result<u16, DecodeError> {
        Ok(u16::from_le_bytes(self.array()?))
    }
    fn u32(&mut self) -> Result<u32, DecodeError> {
        Ok(u32::from_le_bytes(self.array()?))
    }
    fn u64(&mut self) -> Result<u64, DecodeError> {
        Ok(u64::from_le_bytes(self.array()?))
    }
    fn i32(&mut self) -> Result<i32, DecodeError> {
        Ok(i32::from_le_bytes(self.array()?))
    }
    fn i64(&mut self) -> Result<i64, DecodeError> {
        Ok(i64::from_le_bytes(self.array()?))
    }
    /// A count of items of at least `min_item_bytes` each: larger than what is left is a lie,
    /// refused before anything is allocated for it.
    fn count(&mut self, min_item_bytes: usize) -> Result<usize, DecodeError> {
        let n = self.u32()? as usize;
        if n.saturating_mul(min_item_bytes) > self.0.len() {
            return Err(DecodeError(format!(
                "count {n} does not fit in the {} bytes left",
                self.0.len()
            )));
        }
        Ok(n)
    }
    fn bytes(&mut self) -> Result<&'a [u8], DecodeError> {
        let n = self.u32()? as usize;
        self.take(n)
    }
    fn positions(&mut self) -> Result<Vec<Position>, DecodeError> {
        let n = self.count(14)?;
        let mut out = Vec::with_capacity(n);
        for _ in 0..n {
            out.push(Position {
                source: self.u16()?,
                partition: self.i32()?,
                next_offset: self.i64()?,
            });
        }
        Ok(out)
    }
    fn marks(&mut self) -> Result<Vec<SinkMark>, DecodeError> {
        let n = self.count(12)?;
        let mut out = Vec::with_capacity(n);
        for _ in 0..n {
            out.push(SinkMark {
                partition: self.i32()?,
                end_offset: self.i64()?,
            });
        }
        Ok(out)
    }
    fn firings(&mut self) -> Result<Vec<Fired>, DecodeError> {
        let n = self.count(24)?;
        let mut out = Vec::with_capacity(n);
        for _ in 0..n {
            let seq = self.u64()?;
            let entity = self.bytes()?.to_vec();
            let time_ms = self.i64()?;
            let m = self.count(10)?;
            let mut events = Vec::with_capacity(m);
            for _ in 0..m {
                events.push((self.u16()?, self.i64()?));
            }
            out.push(Fired {
                seq,
                entity,
                time_ms,
                events,
            });
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn samples() -> Vec<LogRecord> {
        let fired = Fired {
            seq: 7,
            entity: b"user-1".to_vec(),
            time_ms: 1_000,
            events: vec![(0, 10), (1, 900)],
        };
        let positions = vec![Position {
            source: 0,
            partition: 3,
            next_offset: 42,
        }];
        let marks = vec![SinkMark {
            partition: 0,
            end_offset: 5,
        }];
        vec![
            LogRecord::Step {
                positions: positions.clone(),
                clock_ms: 99,
                updates: vec![(b"a".to_vec(), Some(vec![1, 2, 3])), (b"b".to_vec(), None)],
                firings: vec![fired.clone()],
            },
            LogRecord::Delivered {
                next_seq: 8,
                sink_marks: marks.clone(),
            },
            LogRecord::Chunk {
                snapshot: 2,
                entities: vec![(b"a".to_vec(), vec![9])],
            },
            LogRecord::End {
                snapshot: 2,
                first_chunk_offset: 100,
                positions,
                clock_ms: 5,
                next_seq: 8,
                delivered_seq: 7,
                sink_marks: marks,
                pending: vec![fired],
            },
        ]
    }

    #[test]
    fn every_record_round_trips() {
        for record in samples() {
            let mut bytes = Vec::new();
            record.encode(&mut bytes);
            assert_eq!(LogRecord::decode(&bytes).unwrap(), record);
        }
    }

    #[test]
    fn every_cut_and_every_flipped_byte_is_an_error_or_a_record_not_a_panic() {
        for record in samples() {
            let mut bytes = Vec::new();
            record.encode(&mut bytes);
            for cut in 0..bytes.len() {
                assert!(LogRecord::decode(&bytes[..cut]).is_err());
            }
            for i in 0..bytes.len() {
                let mut changed = bytes.clone();
                changed[i] ^= 0xff;
                let _ = LogRecord::decode(&changed);
            }
        }
    }

    #[test]
    fn the_step_encoder_writes_what_encode_writes() {
        let record = samples().remove(0);
        let LogRecord::Step {
            positions,
            clock_ms,
            updates,
            firings,
        } = &record
        else {
            unreachable!()
        };
        let mut want = Vec::new();
        record.encode(&mut want);
        let mut got = Vec::new();
        let mut step = StepEncoder::begin(&mut got, positions, *clock_ms);
        for (entity, state) in updates {
            step.update(
                entity,
                state
                    .as_ref()
                    .map(|s| |out: &mut Vec<u8>| out.extend_from_slice(s)),
            );
        }
        assert_eq!(step.finish(firings), updates.len());
        assert_eq!(got, want);
    }

    #[test]
    fn another_version_is_refused() {
        let mut bytes = Vec::new();
        samples()[1].encode(&mut bytes);
        bytes[1] = VERSION + 1;
        assert!(LogRecord::decode(&bytes).unwrap_err().0.contains("version"));
    }
}
