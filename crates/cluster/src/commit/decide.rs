//! Deciding every batch of a commit against the locked partitions and the producers' state:
//! offsets, the idempotent-producer table, and index rows. Pure, so the table is tested
//! without a database.

use std::collections::{BTreeMap, HashMap, VecDeque};

use uuid::Uuid;

use super::{BatchOutcome, CommitRequest, PartitionKey, ProducerKey, ProducerSeq, RECENT_BATCHES};

/// A partition's row as locked.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct PartitionState {
    pub(super) next_offset: i64,
    pub(super) log_start: i64,
}

/// One remembered batch of a producer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Remembered {
    pub(super) first_seq: i32,
    pub(super) last_seq: i32,
    pub(super) base_offset: i64,
    pub(super) last_offset: i64,
}

/// Fields per remembered batch in `producers.recent`.
pub(super) const RECENT_FIELDS: usize = 4;

/// A producer's state on one partition: its epoch and last [`RECENT_BATCHES`] batches, oldest
/// first.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct ProducerState {
    pub(super) epoch: i16,
    pub(super) recent: VecDeque<Remembered>,
}

/// What to do with an idempotent batch (the table of `sluice-broker`'s `producers.rs`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Verdict {
    Append,
    Duplicate { base_offset: i64, last_offset: i64 },
    Refuse(BatchOutcome),
}

/// The sequence number after `seq` (sequences wrap from i32::MAX to 0).
pub(super) fn next_seq(seq: i32) -> i32 {
    if seq == i32::MAX { 0 } else { seq + 1 }
}

impl ProducerState {
    /// From a `producers` row: `recent` holds (first_seq, last_seq, base_offset, last_offset)
    /// per batch, oldest first.
    pub(super) fn from_row(epoch: i16, recent: &[i64]) -> Result<ProducerState, String> {
        if !recent.len().is_multiple_of(RECENT_FIELDS)
            || recent.len() > RECENT_FIELDS * RECENT_BATCHES
        {
            return Err(format!("recent holds {} numbers", recent.len()));
        }
        let seq = |v: i64| i32::try_from(v).map_err(|_| format!("sequence {v}"));
        let recent = recent
            .chunks_exact(RECENT_FIELDS)
            .map(|c| {
                Ok(Remembered {
                    first_seq: seq(c[0])?,
                    last_seq: seq(c[1])?,
                    base_offset: c[2],
                    last_offset: c[3],
                })
            })
            .collect::<Result<_, String>>()?;
        Ok(ProducerState { epoch, recent })
    }

    pub(super) fn write_recent(&self, out: &mut Vec<i64>) {
        for r in &self.recent {
            out.extend([
                i64::from(r.first_seq),
                i64::from(r.last_seq),
                r.base_offset,
                r.last_offset,
            ]);
        }
    }

    /// Records an appended batch; a new epoch forgets the old epoch's batches.
    pub(super) fn record(&mut self, seq: &ProducerSeq, base_offset: i64, last_offset: i64) {
        if seq.epoch != self.epoch {
            self.recent.clear();
            self.epoch = seq.epoch;
        }
        if self.recent.len() == RECENT_BATCHES {
            self.recent.pop_front();
        }
        self.recent.push_back(Remembered {
            first_seq: seq.first_seq,
            last_seq: seq.last_seq,
            base_offset,
            last_offset,
        });
    }
}

/// The decision table, row by row as in `sluice-broker`'s `producers.rs`.
pub(super) fn check(state: Option<&ProducerState>, seq: &ProducerSeq) -> Verdict {
    let Some(state) = state else {
        return if seq.first_seq == 0 {
            Verdict::Append
        } else {
            Verdict::Refuse(BatchOutcome::UnknownProducer {
                first_seq: seq.first_seq,
            })
        };
    };
    if seq.epoch < state.epoch {
        return Verdict::Refuse(BatchOutcome::InvalidProducerEpoch {
            epoch: seq.epoch,
            current: state.epoch,
        });
    }
    if seq.epoch > state.epoch {
        return if seq.first_seq == 0 {
            Verdict::Append
        } else {
            Verdict::Refuse(BatchOutcome::NewEpochNotAtZero {
                epoch: seq.epoch,
                first_seq: seq.first_seq,
            })
        };
    }
    if let Some(b) = state
        .recent
        .iter()
        .find(|b| b.first_seq == seq.first_seq && b.last_seq == seq.last_seq)
    {
        return Verdict::Duplicate {
            base_offset: b.base_offset,
            last_offset: b.last_offset,
        };
    }
    let expected = state.recent.back().map_or(0, |b| next_seq(b.last_seq));
    if seq.first_seq == expected {
        Verdict::Append
    } else {
        Verdict::Refuse(BatchOutcome::OutOfOrderSequence {
            expected,
            first_seq: seq.first_seq,
        })
    }
}

/// One `sluice.batches` row: consecutive accepted batches of one partition, contiguous in the
/// object's bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct IndexRow {
    pub(super) topic_id: Uuid,
    pub(super) partition: i32,
    pub(super) base_offset: i64,
    pub(super) last_offset: i64,
    pub(super) byte_start: i64,
    pub(super) byte_len: i32,
    pub(super) batch_count: i32,
    pub(super) max_timestamp: i64,
}

/// Everything one commit writes.
#[derive(Debug, Default)]
pub(super) struct Applied {
    /// One per batch, in request order.
    pub(super) outcomes: Vec<BatchOutcome>,
    pub(super) rows: Vec<IndexRow>,
    /// The final state of every producer that appended.
    pub(super) producers: BTreeMap<ProducerKey, ProducerState>,
    /// The new next offset of every partition that advanced.
    pub(super) advanced: BTreeMap<PartitionKey, i64>,
}

/// Decides every batch of `req` in order against the locked partitions and the producers'
/// state; each batch sees the state the ones before it left.
pub(super) fn apply(
    req: &CommitRequest,
    partitions: &HashMap<PartitionKey, PartitionState>,
    mut producers: HashMap<ProducerKey, ProducerState>,
) -> Result<Applied, String> {
    let mut applied = Applied {
        outcomes: Vec::with_capacity(req.batches.len()),
        ..Applied::default()
    };
    // Per partition: its next offset so far, and its open index row (the last one, if the
    // partition's previous batch in this object was accepted into it).
    let mut next: HashMap<PartitionKey, i64> = HashMap::new();
    let mut open_row: HashMap<PartitionKey, usize> = HashMap::new();
    for (i, b) in req.batches.iter().enumerate() {
        let pkey = (b.topic_id, b.partition);
        let Some(partition) = partitions.get(&pkey) else {
            applied.outcomes.push(BatchOutcome::UnknownTopicOrPartition);
            continue;
        };
        if let Some(seq) = &b.producer {
            let key = (b.topic_id, b.partition, seq.producer_id);
            match check(producers.get(&key), seq) {
                Verdict::Append => {}
                Verdict::Duplicate {
                    base_offset,
                    last_offset,
                } => {
                    applied.outcomes.push(BatchOutcome::Duplicate {
                        base_offset,
                        last_offset,
                    });
                    open_row.remove(&pkey);
                    continue;
                }
                Verdict::Refuse(outcome) => {
                    applied.outcomes.push(outcome);
                    open_row.remove(&pkey);
                    continue;
                }
            }
        }
        let next_offset = next.entry(pkey).or_insert(partition.next_offset);
        let base_offset = *next_offset;
        let last_offset = base_offset
            .checked_add(i64::from(b.records) - 1)
            .filter(|l| *l < i64::MAX)
            .ok_or_else(|| {
                format!(
                    "batch {i}: partition {}/{} is full",
                    b.topic_id, b.partition
                )
            })?;
        *next_offset = last_offset + 1;
        applied.advanced.insert(pkey, last_offset + 1);
        if let Some(seq) = &b.producer {
            let key = (b.topic_id, b.partition, seq.producer_id);
            let state = producers.entry(key).or_insert_with(|| ProducerState {
                epoch: seq.epoch,
                recent: VecDeque::new(),
            });
            state.record(seq, base_offset, last_offset);
            applied.producers.insert(key, state.clone());
        }
        applied.outcomes.push(BatchOutcome::Appended {
            base_offset,
            last_offset,
            log_start: partition.log_start,
        });
        let byte_start = b.byte_start as i64;
        let byte_len = b.byte_len as i64;
        let extends = open_row
            .get(&pkey)
            .map(|&r| &mut applied.rows[r])
            .filter(|row| {
                row.byte_start + i64::from(row.byte_len) == byte_start
                    && i64::from(row.byte_len) + byte_len <= i64::from(i32::MAX)
            });
        match extends {
            Some(row) => {
                row.last_offset = last_offset;
                row.byte_len += byte_len as i32;
                row.batch_count += 1;
                row.max_timestamp = row.max_timestamp.max(b.max_timestamp);
            }
            None => {
                let byte_len = i32::try_from(byte_len)
                    .map_err(|_| format!("batch {i} is {byte_len} bytes long"))?;
                open_row.insert(pkey, applied.rows.len());
                applied.rows.push(IndexRow {
                    topic_id: b.topic_id,
                    partition: b.partition,
                    base_offset,
                    last_offset,
                    byte_start,
                    byte_len,
                    batch_count: 1,
                    max_timestamp: b.max_timestamp,
                });
            }
        }
    }
    Ok(applied)
}
