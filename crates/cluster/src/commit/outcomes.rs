//! The stored outcomes of a commit (`objects.outcomes`), answered again to a retry: a version
//! byte, the number of outcomes (u32), then per batch a tag byte and its fields; big-endian.

use super::{BATCHES_PER_COMMIT_MAX, BatchOutcome};

pub(super) const OUTCOMES_VERSION: u8 = 1;

pub(super) fn encode_outcomes(outcomes: &[BatchOutcome]) -> Vec<u8> {
    let mut out = Vec::with_capacity(5 + outcomes.len() * 17);
    out.push(OUTCOMES_VERSION);
    // At most BATCHES_PER_COMMIT_MAX.
    out.extend((outcomes.len() as u32).to_be_bytes());
    for o in outcomes {
        match *o {
            BatchOutcome::Appended {
                base_offset,
                last_offset,
                log_start,
            } => {
                out.push(0);
                out.extend(base_offset.to_be_bytes());
                out.extend(last_offset.to_be_bytes());
                out.extend(log_start.to_be_bytes());
            }
            BatchOutcome::Duplicate {
                base_offset,
                last_offset,
            } => {
                out.push(1);
                out.extend(base_offset.to_be_bytes());
                out.extend(last_offset.to_be_bytes());
            }
            BatchOutcome::OutOfOrderSequence {
                expected,
                first_seq,
            } => {
                out.push(2);
                out.extend(expected.to_be_bytes());
                out.extend(first_seq.to_be_bytes());
            }
            BatchOutcome::UnknownProducer { first_seq } => {
                out.push(3);
                out.extend(first_seq.to_be_bytes());
            }
            BatchOutcome::InvalidProducerEpoch { epoch, current } => {
                out.push(4);
                out.extend(epoch.to_be_bytes());
                out.extend(current.to_be_bytes());
            }
            BatchOutcome::NewEpochNotAtZero { epoch, first_seq } => {
                out.push(5);
                out.extend(epoch.to_be_bytes());
                out.extend(first_seq.to_be_bytes());
            }
            BatchOutcome::UnknownTopicOrPartition => out.push(6),
        }
    }
    out
}

pub(super) fn decode_outcomes(bytes: &[u8]) -> Result<Vec<BatchOutcome>, String> {
    struct Reader<'a>(&'a [u8]);
    impl Reader<'_> {
        fn take<const N: usize>(&mut self) -> Result<[u8; N], String> {
            let (head, rest) = self
                .0
                .split_first_chunk::<N>()
                .ok_or_else(|| "truncated".to_string())?;
            self.0 = rest;
            Ok(*head)
        }
        fn i64(&mut self) -> Result<i64, String> {
            self.take().map(i64::from_be_bytes)
        }
        fn i32(&mut self) -> Result<i32, String> {
            self.take().map(i32::from_be_bytes)
        }
        fn i16(&mut self) -> Result<i16, String> {
            self.take().map(i16::from_be_bytes)
        }
    }
    let mut r = Reader(bytes);
    let [version] = r.take()?;
    if version != OUTCOMES_VERSION {
        return Err(format!("version {version}"));
    }
    let count = u32::from_be_bytes(r.take()?) as usize;
    if count > BATCHES_PER_COMMIT_MAX {
        return Err(format!("{count} outcomes"));
    }
    let mut outcomes = Vec::with_capacity(count);
    for _ in 0..count {
        let [tag] = r.take()?;
        outcomes.push(match tag {
            0 => BatchOutcome::Appended {
                base_offset: r.i64()?,
                last_offset: r.i64()?,
                log_start: r.i64()?,
            },
            1 => BatchOutcome::Duplicate {
                base_offset: r.i64()?,
                last_offset: r.i64()?,
            },
            2 => BatchOutcome::OutOfOrderSequence {
                expected: r.i32()?,
                first_seq: r.i32()?,
            },
            3 => BatchOutcome::UnknownProducer {
                first_seq: r.i32()?,
            },
            4 => BatchOutcome::InvalidProducerEpoch {
                epoch: r.i16()?,
                current: r.i16()?,
            },
            5 => BatchOutcome::NewEpochNotAtZero {
                epoch: r.i16()?,
                first_seq: r.i32()?,
            },
            6 => BatchOutcome::UnknownTopicOrPartition,
            other => return Err(format!("outcome tag {other}")),
        });
    }
    if !r.0.is_empty() {
        return Err(format!("{} bytes after the last outcome", r.0.len()));
    }
    Ok(outcomes)
}
