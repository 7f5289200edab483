//! The metadata records a flush object carries besides its runs: what must survive with the
//! data so that the bucket alone is enough to rebuild a broker.
//!
//! Each record is one entry of the object's meta section (`kind`, payload; see
//! [`crate::format`]). Kinds are stable numbers: a reader skips kinds it does not know (a later
//! version may add some), and never reuses a number.
//!
//! | kind | record | payload (big-endian) |
//! |---|---|---|
//! | 1 | [`MetaChange::Abandoned`] | `u64` object sequence numbers, any count |
//! | 2 | [`MetaChange::ProducerBatch`] | topic id (16), partition `i32`, producer id `i64`, epoch `i16`, first sequence `i32`, last sequence `i32`, base offset `i64`, last offset `i64` |
//! | 3 | [`MetaChange::FileWrite`] | path length `u16`, path (UTF-8), contents (rest) |
//! | 4 | [`MetaChange::FileAppend`] | path length `u16`, path (UTF-8), bytes to append (rest) |
//! | 5 | [`MetaChange::FileRemove`] | path (UTF-8, all of it) |
//! | 6 | [`MetaChange::LogStart`] | topic id (16), partition `i32`, new log start offset `i64` |
//! | 7 | [`MetaChange::TopicDeleted`] | topic id (16) |
//! | 8 | [`MetaChange::RunAt`] | run entry (80, as in the object index), object id `u64` |
//! | 9 | [`MetaChange::RunsCompacted`] | merged run entry (80), compacted object id `u64`, its size `u64` |
//! | 10 | [`MetaChange::ObjectAt`] | sequence `u64`, size `u64`, created ms `i64`, abandoned `u8` (0/1) |
//! | 11 | [`MetaChange::ProducerBatchAt`] | a kind-2 payload (54), then the holding object's sequence `u64` |
//!
//! - **Abandoned** names objects whose PUT the writer gave up on: their requests were answered
//!   with an error, so a rebuild must skip them even if the store did create them (a PUT whose
//!   answer was lost). The writer repeats the list in every object until one is committed.
//! - **ProducerBatch** is written for every idempotent batch, in the object that holds the
//!   batch, so producer state (the last batches per producer and partition) is rebuilt from
//!   the bucket without reading any data.
//! - **FileWrite / FileAppend / FileRemove** mirror the broker's small metadata files (topic
//!   definitions, the group store, the producer-id reservation) under its data directory:
//!   paths are relative to it, `/`-separated, with no `..`, `.` or empty parts. Remove takes a
//!   file or a whole directory tree.
//! - **LogStart** moves a partition's log start (retention, record deletion): runs wholly below
//!   it are dropped from the index.
//! - **TopicDeleted** drops every run of the topic.
//! - **RunsCompacted** (in a flush object, written by the compactor once the compacted object
//!   is in the bucket) moves a partition's runs: the live runs wholly inside the merged run's
//!   `[base, last]` are replaced by the merged run, which lives in the compacted object (ids:
//!   [`crate::name`]), but only if they are exactly what was merged (their counts of bytes,
//!   records and batches add up to the merged run's); otherwise (retention or a topic deletion
//!   got there first) the record changes nothing and the compacted object is garbage.
//! - **RunAt, ObjectAt, ProducerBatchAt** appear only in checkpoints
//!   ([`crate::maintenance`]): the index's runs, known objects and producer batches with the
//!   object each belongs to. A flush object carrying them is not applying them (the index
//!   ignores them there).

use bytes::BytesMut;

use crate::error::ObjectError;
use crate::format::{INDEX_ENTRY_BYTES, RunEntry, TopicId};

pub const KIND_ABANDONED: u16 = 1;
pub const KIND_PRODUCER_BATCH: u16 = 2;
pub const KIND_FILE_WRITE: u16 = 3;
pub const KIND_FILE_APPEND: u16 = 4;
pub const KIND_FILE_REMOVE: u16 = 5;
pub const KIND_LOG_START: u16 = 6;
pub const KIND_TOPIC_DELETED: u16 = 7;
pub const KIND_RUN_AT: u16 = 8;
pub const KIND_RUNS_COMPACTED: u16 = 9;
pub const KIND_OBJECT_AT: u16 = 10;
pub const KIND_PRODUCER_BATCH_AT: u16 = 11;

/// Bytes of an encoded [`ProducerBatch`].
pub const PRODUCER_BATCH_BYTES: usize = 16 + 4 + 8 + 2 + 4 + 4 + 8 + 8;
/// Longest metadata file path accepted.
pub const PATH_BYTES_MAX: usize = 1024;

/// One idempotent batch as producer state needs it: who wrote which sequence numbers, and the
/// offsets they got.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ProducerBatch {
    pub topic_id: TopicId,
    pub partition: i32,
    pub producer_id: i64,
    pub epoch: i16,
    pub first_seq: i32,
    pub last_seq: i32,
    pub base_offset: i64,
    pub last_offset: i64,
}

/// One decoded metadata record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum MetaChange {
    Abandoned(Vec<u64>),
    ProducerBatch(ProducerBatch),
    FileWrite {
        path: String,
        contents: Vec<u8>,
    },
    FileAppend {
        path: String,
        bytes: Vec<u8>,
    },
    FileRemove {
        path: String,
    },
    LogStart {
        topic_id: TopicId,
        partition: i32,
        offset: i64,
    },
    TopicDeleted {
        topic_id: TopicId,
    },
    /// Checkpoint only: a live run and the id of the object holding it.
    RunAt {
        run: RunEntry,
        object_id: u64,
    },
    /// A partition's runs inside `run`'s `[base, last]` now live in compacted object
    /// `object_id` (`object_size` bytes) as `run`.
    RunsCompacted {
        run: RunEntry,
        object_id: u64,
        object_size: u64,
    },
    /// Checkpoint only: an object the index knows of.
    ObjectAt {
        sequence: u64,
        size: u64,
        created_ms: i64,
        abandoned: bool,
    },
    /// Checkpoint only: a kept producer batch and the object that holds it.
    ProducerBatchAt {
        batch: ProducerBatch,
        object_seq: u64,
    },
}

/// Why a metadata record could not be decoded (or a path was refused).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum MetaError {
    #[error("meta record of kind {kind} is {len} bytes, {expected}")]
    Length {
        kind: u16,
        len: usize,
        expected: &'static str,
    },
    #[error("meta record of kind {kind} has a path that is not UTF-8")]
    PathNotUtf8 { kind: u16 },
    #[error(
        "metadata path `{path}` is not a relative `/`-separated path without `..`, `.` or empty parts (at most {PATH_BYTES_MAX} bytes)"
    )]
    BadPath { path: String },
}

impl From<MetaError> for ObjectError {
    fn from(e: MetaError) -> ObjectError {
        ObjectError::Meta(e)
    }
}

/// Checks a metadata file path (see the module doc).
pub fn check_path(path: &str) -> Result<(), MetaError> {
    let ok = !path.is_empty()
        && path.len() <= PATH_BYTES_MAX
        && path
            .split('/')
            .all(|part| !part.is_empty() && part != "." && part != ".." && !part.contains('\0'));
    if ok {
        Ok(())
    } else {
        Err(MetaError::BadPath {
            path: path.chars().take(200).collect(),
        })
    }
}

impl MetaChange {
    /// The record's kind number.
    pub fn kind(&self) -> u16 {
        match self {
            MetaChange::Abandoned(_) => KIND_ABANDONED,
            MetaChange::ProducerBatch(_) => KIND_PRODUCER_BATCH,
            MetaChange::FileWrite { .. } => KIND_FILE_WRITE,
            MetaChange::FileAppend { .. } => KIND_FILE_APPEND,
            MetaChange::FileRemove { .. } => KIND_FILE_REMOVE,
            MetaChange::LogStart { .. } => KIND_LOG_START,
            MetaChange::TopicDeleted { .. } => KIND_TOPIC_DELETED,
            MetaChange::RunAt { .. } => KIND_RUN_AT,
            MetaChange::RunsCompacted { .. } => KIND_RUNS_COMPACTED,
            MetaChange::ObjectAt { .. } => KIND_OBJECT_AT,
            MetaChange::ProducerBatchAt { .. } => KIND_PRODUCER_BATCH_AT,
        }
    }

    /// The payload bytes (the writer adds kind and length).
    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::new();
        match self {
            MetaChange::Abandoned(seqs) => {
                for s in seqs {
                    out.extend_from_slice(&s.to_be_bytes());
                }
            }
            MetaChange::ProducerBatch(b) => encode_producer(b, &mut out),
            MetaChange::ProducerBatchAt { batch, object_seq } => {
                encode_producer(batch, &mut out);
                out.extend_from_slice(&object_seq.to_be_bytes());
            }
            MetaChange::FileWrite {
                path,
                contents: bytes,
            }
            | MetaChange::FileAppend { path, bytes } => {
                out.extend_from_slice(&(path.len() as u16).to_be_bytes());
                out.extend_from_slice(path.as_bytes());
                out.extend_from_slice(bytes);
            }
            MetaChange::FileRemove { path } => out.extend_from_slice(path.as_bytes()),
            MetaChange::LogStart {
                topic_id,
                partition,
                offset,
            } => {
                out.extend_from_slice(&topic_id.0);
                out.extend_from_slice(&partition.to_be_bytes());
                out.extend_from_slice(&offset.to_be_bytes());
            }
            MetaChange::TopicDeleted { topic_id } => out.extend_from_slice(&topic_id.0),
            MetaChange::RunAt { run, object_id } => {
                encode_run(run, &mut out);
                out.extend_from_slice(&object_id.to_be_bytes());
            }
            MetaChange::RunsCompacted {
                run,
                object_id,
                object_size,
            } => {
                encode_run(run, &mut out);
                out.extend_from_slice(&object_id.to_be_bytes());
                out.extend_from_slice(&object_size.to_be_bytes());
            }
            MetaChange::ObjectAt {
                sequence,
                size,
                created_ms,
                abandoned,
            } => {
                out.extend_from_slice(&sequence.to_be_bytes());
                out.extend_from_slice(&size.to_be_bytes());
                out.extend_from_slice(&created_ms.to_be_bytes());
                out.push(u8::from(*abandoned));
            }
        }
        out
    }

    /// Decodes one record; `Ok(None)` for a kind this version does not know (skip it).
    pub fn decode(kind: u16, payload: &[u8]) -> Result<Option<MetaChange>, MetaError> {
        let len_error = |expected| MetaError::Length {
            kind,
            len: payload.len(),
            expected,
        };
        let change = match kind {
            KIND_ABANDONED => {
                if !payload.len().is_multiple_of(8) {
                    return Err(len_error("expected a multiple of 8"));
                }
                MetaChange::Abandoned(
                    payload
                        .chunks_exact(8)
                        .map(|c| u64::from_be_bytes(c.try_into().expect("8 bytes")))
                        .collect(),
                )
            }
            KIND_PRODUCER_BATCH => {
                if payload.len() != PRODUCER_BATCH_BYTES {
                    return Err(len_error("expected 54"));
                }
                MetaChange::ProducerBatch(decode_producer(&mut Fields(payload)))
            }
            KIND_PRODUCER_BATCH_AT => {
                if payload.len() != PRODUCER_BATCH_BYTES + 8 {
                    return Err(len_error("expected 62"));
                }
                let mut r = Fields(payload);
                MetaChange::ProducerBatchAt {
                    batch: decode_producer(&mut r),
                    object_seq: u64::from_be_bytes(r.take()),
                }
            }
            KIND_RUN_AT => {
                if payload.len() != INDEX_ENTRY_BYTES + 8 {
                    return Err(len_error("expected 88"));
                }
                let mut r = Fields(payload);
                MetaChange::RunAt {
                    run: RunEntry::decode(&r.take::<INDEX_ENTRY_BYTES>()),
                    object_id: u64::from_be_bytes(r.take()),
                }
            }
            KIND_RUNS_COMPACTED => {
                if payload.len() != INDEX_ENTRY_BYTES + 16 {
                    return Err(len_error("expected 96"));
                }
                let mut r = Fields(payload);
                MetaChange::RunsCompacted {
                    run: RunEntry::decode(&r.take::<INDEX_ENTRY_BYTES>()),
                    object_id: u64::from_be_bytes(r.take()),
                    object_size: u64::from_be_bytes(r.take()),
                }
            }
            KIND_OBJECT_AT => {
                if payload.len() != 25 {
                    return Err(len_error("expected 25"));
                }
                let mut r = Fields(payload);
                MetaChange::ObjectAt {
                    sequence: u64::from_be_bytes(r.take()),
                    size: u64::from_be_bytes(r.take()),
                    created_ms: i64::from_be_bytes(r.take()),
                    abandoned: match r.take::<1>() {
                        [0] => false,
                        [1] => true,
                        _ => return Err(len_error("expected 0 or 1 as the abandoned flag")),
                    },
                }
            }
            KIND_FILE_WRITE | KIND_FILE_APPEND => {
                if payload.len() < 2 {
                    return Err(len_error("expected at least a 2-byte path length"));
                }
                let path_len = usize::from(u16::from_be_bytes([payload[0], payload[1]]));
                if payload.len() < 2 + path_len {
                    return Err(len_error("shorter than its path length"));
                }
                let path = std::str::from_utf8(&payload[2..2 + path_len])
                    .map_err(|_| MetaError::PathNotUtf8 { kind })?
                    .to_owned();
                check_path(&path)?;
                let bytes = payload[2 + path_len..].to_vec();
                if kind == KIND_FILE_WRITE {
                    MetaChange::FileWrite {
                        path,
                        contents: bytes,
                    }
                } else {
                    MetaChange::FileAppend { path, bytes }
                }
            }
            KIND_FILE_REMOVE => {
                let path = std::str::from_utf8(payload)
                    .map_err(|_| MetaError::PathNotUtf8 { kind })?
                    .to_owned();
                check_path(&path)?;
                MetaChange::FileRemove { path }
            }
            KIND_LOG_START => {
                if payload.len() != 28 {
                    return Err(len_error("expected 28"));
                }
                let mut r = Fields(payload);
                MetaChange::LogStart {
                    topic_id: r.topic(),
                    partition: i32::from_be_bytes(r.take()),
                    offset: i64::from_be_bytes(r.take()),
                }
            }
            KIND_TOPIC_DELETED => {
                if payload.len() != 16 {
                    return Err(len_error("expected 16"));
                }
                MetaChange::TopicDeleted {
                    topic_id: Fields(payload).topic(),
                }
            }
            _ => return Ok(None),
        };
        Ok(Some(change))
    }
}

fn encode_producer(b: &ProducerBatch, out: &mut Vec<u8>) {
    out.extend_from_slice(&b.topic_id.0);
    out.extend_from_slice(&b.partition.to_be_bytes());
    out.extend_from_slice(&b.producer_id.to_be_bytes());
    out.extend_from_slice(&b.epoch.to_be_bytes());
    out.extend_from_slice(&b.first_seq.to_be_bytes());
    out.extend_from_slice(&b.last_seq.to_be_bytes());
    out.extend_from_slice(&b.base_offset.to_be_bytes());
    out.extend_from_slice(&b.last_offset.to_be_bytes());
}

fn decode_producer(r: &mut Fields<'_>) -> ProducerBatch {
    ProducerBatch {
        topic_id: r.topic(),
        partition: i32::from_be_bytes(r.take()),
        producer_id: i64::from_be_bytes(r.take()),
        epoch: i16::from_be_bytes(r.take()),
        first_seq: i32::from_be_bytes(r.take()),
        last_seq: i32::from_be_bytes(r.take()),
        base_offset: i64::from_be_bytes(r.take()),
        last_offset: i64::from_be_bytes(r.take()),
    }
}

fn encode_run(run: &RunEntry, out: &mut Vec<u8>) {
    let mut buf = BytesMut::with_capacity(INDEX_ENTRY_BYTES);
    run.encode(&mut buf);
    out.extend_from_slice(&buf);
}

/// Reads fixed-size fields off the front of a payload whose length was checked.
struct Fields<'a>(&'a [u8]);

impl Fields<'_> {
    fn take<const N: usize>(&mut self) -> [u8; N] {
        let (head, rest) = self.0.split_at(N);
        self.0 = rest;
        head.try_into().expect("length checked")
    }
    fn topic(&mut self) -> TopicId {
        TopicId(self.take())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn all() -> Vec<MetaChange> {
        let topic_id = TopicId([7; 16]);
        vec![
            MetaChange::Abandoned(vec![3, u64::MAX]),
            MetaChange::Abandoned(vec![]),
            MetaChange::ProducerBatch(ProducerBatch {
                topic_id,
                partition: 2,
                producer_id: 1001,
                epoch: 3,
                first_seq: 10,
                last_seq: 14,
                base_offset: 500,
                last_offset: 504,
            }),
            MetaChange::FileWrite {
                path: "topics/orders/topic.json".into(),
                contents: b"{}".to_vec(),
            },
            MetaChange::FileAppend {
                path: "groups/groups.log".into(),
                bytes: vec![0, 1, 2],
            },
            MetaChange::FileRemove {
                path: "topics/orders".into(),
            },
            MetaChange::LogStart {
                topic_id,
                partition: 0,
                offset: 42,
            },
            MetaChange::TopicDeleted { topic_id },
            MetaChange::RunAt {
                run: RunEntry {
                    topic_id,
                    partition: 3,
                    batch_count: 2,
                    base_offset: 10,
                    last_offset: 19,
                    max_timestamp: -5,
                    record_count: 10,
                    data_offset: 40,
                    data_len: 777,
                    data_crc: 0xfeed_f00d,
                },
                object_id: crate::name::COMPACTED_ID_BASE + 3,
            },
            MetaChange::RunsCompacted {
                run: RunEntry {
                    topic_id,
                    partition: 0,
                    batch_count: 9,
                    base_offset: 0,
                    last_offset: 99,
                    max_timestamp: 1_700_000_000_000,
                    record_count: 100,
                    data_offset: 40,
                    data_len: 9000,
                    data_crc: 1,
                },
                object_id: crate::name::COMPACTED_ID_BASE,
                object_size: 9200,
            },
            MetaChange::ObjectAt {
                sequence: 42,
                size: 1234,
                created_ms: 1_700_000_000_000,
                abandoned: true,
            },
            MetaChange::ProducerBatchAt {
                batch: ProducerBatch {
                    topic_id,
                    partition: 1,
                    producer_id: 5,
                    epoch: 1,
                    first_seq: 0,
                    last_seq: 4,
                    base_offset: 10,
                    last_offset: 14,
                },
                object_seq: 17,
            },
        ]
    }

    #[test]
    fn every_record_round_trips() {
        for change in all() {
            let bytes = change.encode();
            assert_eq!(
                MetaChange::decode(change.kind(), &bytes).unwrap(),
                Some(change)
            );
        }
    }

    #[test]
    fn unknown_kinds_are_skipped_and_bad_payloads_refused() {
        assert_eq!(MetaChange::decode(999, b"whatever").unwrap(), None);
        assert!(MetaChange::decode(KIND_PRODUCER_BATCH, &[0; 10]).is_err());
        assert!(MetaChange::decode(KIND_ABANDONED, &[0; 9]).is_err());
        assert!(MetaChange::decode(KIND_FILE_WRITE, &[0, 9, b'a']).is_err());
        for bad in ["", "/abs", "a/../b", "a//b", "./a", "a/."] {
            let change = MetaChange::FileRemove { path: bad.into() };
            assert!(
                MetaChange::decode(KIND_FILE_REMOVE, &change.encode()).is_err(),
                "{bad:?}"
            );
        }
        // Truncating any fixed-size record is refused, never a panic.
        for change in all() {
            let bytes = change.encode();
            for cut in 0..bytes.len() {
                let _ = MetaChange::decode(change.kind(), &bytes[..cut]);
            }
        }
    }
}
