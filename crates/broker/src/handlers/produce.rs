//! Produce: append each partition's batches now, in request order, then wait until they are
//! durable and answer.
//!
//! The appends happen when the request is *started* (synchronously, in the order the connection
//! received requests), not when its future is first polled: a client pipelining several produce
//! requests relies on them being appended in order, and idempotent producers' sequence checks
//! depend on it.
//!
//! acks=1 and acks=all are the same here (there is one replica): both answer after an
//! fdatasync covers the batches. acks=0 answers nothing; the batches still become durable at
//! the next sync round.

use futures::FutureExt;
use futures::future::{BoxFuture, join_all};
use sluice_log::batch::{self, BatchView, Peek};
use sluice_log::{BatchError, LogError};
use sluice_protocol::kafka_protocol::messages::produce_response::{
    PartitionProduceResponse, TopicProduceResponse,
};
use sluice_protocol::kafka_protocol::messages::{ProduceRequest, ProduceResponse};

use super::str_bytes;
use std::sync::Arc;

use crate::producers::{self, PartitionProducers, ProducerError, Verdict};
use crate::storage::Appended;
use crate::topics::Topic;
use crate::{Broker, errors};

/// A produce request's `acks`, read at the handler edge.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Acks {
    /// 0: no response at all (the batches still become durable at the next sync round).
    None,
    /// 1: answered once the leader has the batches; here, once they are durable.
    Leader,
    /// -1: answered once every in-sync replica has them; here (one replica), once durable.
    All,
}

impl TryFrom<i16> for Acks {
    type Error = ProduceError;
    fn try_from(acks: i16) -> Result<Acks, ProduceError> {
        match acks {
            0 => Ok(Acks::None),
            1 => Ok(Acks::Leader),
            -1 => Ok(Acks::All),
            other => Err(ProduceError::Acks(other)),
        }
    }
}

/// Why a produce to one partition was refused; `errors::produce_error_code` gives its Kafka
/// code, `Display` the error message the client gets.
#[derive(Debug, thiserror::Error)]
pub enum ProduceError {
    #[error("acks must be -1 (all), 0 or 1, got {0}")]
    Acks(i16),
    #[error("unknown topic '{0}'")]
    UnknownTopic(String),
    #[error("topic '{topic}' has no partition {partition}")]
    UnknownPartition { topic: String, partition: i32 },
    #[error("a record batch of {size} bytes exceeds max.message.bytes ({max})")]
    TooLarge { size: usize, max: i64 },
    #[error("batches with a producer id must come through the Kafka protocol")]
    IdempotentOverHttp,
    #[error("unexpected duplicate batch")]
    UnexpectedDuplicate,
    #[error("transactional batches are not supported")]
    Transactional,
    #[error("all batches of one partition in a request must come from the same producer")]
    MixedProducers,
    #[error(
        "compacted topic '{topic}' cannot accept a record without a key (partition {partition}): compaction keeps the latest record of each key"
    )]
    KeylessInCompacted { topic: String, partition: i32 },
    #[error("the records of a batch for compacted topic '{topic}' cannot be read: {reason}")]
    UnreadableForCompaction { topic: String, reason: String },
    #[error("batches in one request are not consecutive: {next} after {last}")]
    NotConsecutive { next: i32, last: i32 },
    #[error(transparent)]
    Producer(#[from] ProducerError),
    #[error(transparent)]
    Batch(#[from] BatchError),
    #[error(transparent)]
    Log(#[from] LogError),
}

/// The answer that refuses every partition of `topics` with `code` (and `message`).
pub fn refuse_all(
    topics: Vec<sluice_protocol::kafka_protocol::messages::produce_request::TopicProduceData>,
    code: i16,
    message: Option<&str>,
) -> Vec<TopicProduceResponse> {
    topics
        .into_iter()
        .map(|t| {
            TopicProduceResponse::default()
                .with_partition_responses(
                    t.partition_data
                        .iter()
                        .map(|p| {
                            PartitionProduceResponse::default()
                                .with_index(p.index)
                                .with_error_code(code)
                                .with_error_message(message.map(str_bytes))
                                .with_base_offset(-1)
                                .with_log_append_time_ms(-1)
                                .with_log_start_offset(-1)
                        })
                        .collect(),
                )
                .with_topic_id(t.topic_id)
                .with_name(t.name)
        })
        .collect()
}

/// The answer to a Produce that waited in the broker longer than its `timeout_ms` before it
/// could start (its client has given up on it and will retry): REQUEST_TIMED_OUT for every
/// partition, and nothing appended.
pub fn expired(req: ProduceRequest, waited: std::time::Duration) -> ProduceResponse {
    let message = format!(
        "the request waited {} ms in the broker before it could start, past its timeout_ms of {}; nothing was appended",
        waited.as_millis(),
        req.timeout_ms
    );
    ProduceResponse::default().with_responses(refuse_all(
        req.topic_data,
        errors::REQUEST_TIMED_OUT,
        Some(&message),
    ))
}

/// Appends now; the returned future waits for durability and builds the response (`None` for
/// acks=0).
pub fn start(broker: &Broker, req: ProduceRequest) -> BoxFuture<'static, Option<ProduceResponse>> {
    let acks = Acks::try_from(req.acks);
    let mut responses = Vec::with_capacity(req.topic_data.len());
    // (topic index, partition index, pending append, its topic)
    let mut pending: Vec<(usize, usize, Appended, Arc<Topic>)> = Vec::new();
    for (ti, topic_data) in req.topic_data.into_iter().enumerate() {
        let topic = broker.topics().get(&topic_data.name.0);
        let mut partitions = Vec::with_capacity(topic_data.partition_data.len());
        for (pi, data) in topic_data.partition_data.into_iter().enumerate() {
            let refuse = |e: &ProduceError| {
                PartitionProduceResponse::default()
                    .with_index(data.index)
                    .with_error_code(errors::produce_error_code(e))
                    .with_error_message(Some(str_bytes(e.to_string())))
            };
            if let Err(e) = &acks {
                partitions.push(refuse(e));
                continue;
            }
            let Some(topic) = &topic else {
                let unknown = ProduceError::UnknownTopic(topic_data.name.0.to_string());
                partitions.push(refuse(&unknown));
                continue;
            };
            let records = data.records.unwrap_or_default();
            match append(broker, topic, data.index, &records) {
                Ok(Outcome::Appended(appended, log_start)) => {
                    count_records_in(broker, &appended);
                    pending.push((ti, pi, appended, Arc::clone(topic)));
                    partitions.push(
                        PartitionProduceResponse::default()
                            .with_index(data.index)
                            .with_log_start_offset(log_start),
                    );
                }
                Ok(Outcome::Duplicate(base_offset, log_start)) => partitions.push(
                    PartitionProduceResponse::default()
                        .with_index(data.index)
                        .with_base_offset(base_offset)
                        .with_log_start_offset(log_start),
                ),
                Err(e) => {
                    // Refusals repeat with every retry (a full disk, a client sending bad
                    // batches): one line per few seconds, with the count.
                    if let Some(count) = broker
                        .produce_refusals_log()
                        .hit(tokio::time::Instant::now())
                    {
                        tracing::info!(topic = %topic.name, partition = data.index, error = %e, since_last_line = count, "produce refused");
                    }
                    partitions.push(refuse(&e));
                }
            }
        }
        responses.push(
            TopicProduceResponse::default()
                .with_name(topic_data.name)
                .with_partition_responses(partitions),
        );
    }
    if matches!(acks, Ok(Acks::None)) {
        return futures::future::ready(None).boxed();
    }
    async move {
        let durable = join_all(pending.iter().map(|(_, _, a, _)| a.durable())).await;
        for ((ti, pi, appended, topic), result) in pending.iter().zip(durable) {
            let slot = &mut responses[*ti].partition_responses[*pi];
            match result {
                Ok(d) => slot.base_offset = d.base_offset,
                Err(e) => {
                    slot.error_code = errors::log_error_code(&e);
                    slot.error_message = Some(str_bytes(e.to_string()));
                    tracing::error!(base_offset = appended.base_offset, error = %e, "append did not become durable");
                    reload_producers(topic, slot.index);
                }
            }
        }
        Some(ProduceResponse::default().with_responses(responses))
    }
    .boxed()
}

enum Outcome {
    /// Appended; (handle, log start offset).
    Appended(Appended, i64),
    /// A retry of batches already appended at this base offset.
    Duplicate(i64, i64),
}

/// [`append`] for batches without a producer id (the HTTP API's): a batch that claims one is
/// refused, since only the Kafka path runs the idempotent-producer checks. The error is the
/// Kafka code (from `errors`) and message that `Broker::append` hands on as an `AppendError`.
pub fn append_plain(
    broker: &Broker,
    topic: &Topic,
    partition: i32,
    records: &[u8],
) -> Result<Appended, ProduceError> {
    let outcome = if BatchView::parse(records).is_ok_and(|v| v.producer_id() >= 0) {
        Err(ProduceError::IdempotentOverHttp)
    } else {
        append(broker, topic, partition, records)
    };
    match outcome {
        Ok(Outcome::Appended(appended, _)) => Ok(appended),
        Ok(Outcome::Duplicate(..)) => Err(ProduceError::UnexpectedDuplicate),
        Err(e) => Err(e),
    }
}

/// Validates and appends one partition's records, applying idempotent-producer checks.
fn append(
    broker: &Broker,
    topic: &Topic,
    partition: i32,
    records: &[u8],
) -> Result<Outcome, ProduceError> {
    let unknown = || ProduceError::UnknownPartition {
        topic: topic.name.clone(),
        partition,
    };
    let log = topic.partition(partition).ok_or_else(unknown)?;
    let max = topic
        .config()
        .max_message_bytes(broker.config().max_message_bytes);
    if let Some(size) = oversize_batch(records, max) {
        return Err(ProduceError::TooLarge { size, max });
    }
    if topic.config().compacts() {
        check_keys(topic, partition, records)?;
    }
    // The producer of these batches, if idempotent (all batches of one request share it).
    let first = BatchView::parse(records).ok();
    let idempotent = first.filter(|v| v.producer_id() >= 0);
    let Some(first) = idempotent else {
        let appended = log.append(records)?;
        return Ok(Outcome::Appended(appended, log.log_start_offset()));
    };
    if first.is_transactional() {
        return Err(ProduceError::Transactional);
    }
    let (pid, epoch) = (first.producer_id(), first.producer_epoch());
    // Every batch's (first, last) sequence; all must be from the same producer and epoch.
    let mut seqs = Vec::new();
    let mut rest = records;
    while !rest.is_empty() {
        let v = BatchView::parse(rest)?;
        if v.producer_id() != pid || v.producer_epoch() != epoch {
            return Err(ProduceError::MixedProducers);
        }
        seqs.push((
            v.base_sequence(),
            producers::last_seq(v.base_sequence(), v.record_count()),
            v.record_count(),
        ));
        rest = &rest[v.len()..];
    }
    if log.checks_producers() {
        // The backend decides (a duplicate resolves to its original offsets); the sequences
        // of one request must still follow each other.
        check_consecutive(&seqs)?;
        let appended = log.append(records)?;
        return Ok(Outcome::Appended(appended, log.log_start_offset()));
    }
    let state = topic.producers(partition).ok_or_else(unknown)?;
    // Held across check and append: the two are one step for this partition.
    let mut state = state.lock().expect("producer state lock");
    match state.check(pid, epoch, seqs[0].0, seqs[0].1) {
        Verdict::Duplicate { base_offset } => {
            return Ok(Outcome::Duplicate(base_offset, log.log_start_offset()));
        }
        Verdict::Refuse(e) => return Err(e.into()),
        Verdict::Append => {}
    }
    check_consecutive(&seqs)?;
    let appended = log.append(records)?;
    let mut base = appended.base_offset;
    for (first_seq, last_seq, count) in seqs {
        state.record(pid, epoch, first_seq, last_seq, base);
        base += i64::from(count);
    }
    Ok(Outcome::Appended(appended, log.log_start_offset()))
}

/// The batches of one request, `(first seq, last seq, records)` each, must follow each other.
/// The most bytes one batch's records may decompress to when a compacted topic's keys are
/// checked: a bound on the memory one check takes, far above what one batch of keyed records
/// needs.
const KEY_CHECK_DECOMPRESSED_MAX: usize = 64 << 20;

/// A compacted topic takes only records with a key, as Kafka's (which answers INVALID_RECORD):
/// compaction keeps the latest record per key, and a keyless one has none. Compressed batches
/// are decompressed for the check (only for compacted topics; the bytes stored are the ones
/// sent). Control batches hold no application records.
fn check_keys(topic: &Topic, partition: i32, records: &[u8]) -> Result<(), ProduceError> {
    use sluice_protocol::records::Batches;
    let unreadable = |reason: String| ProduceError::UnreadableForCompaction {
        topic: topic.name.clone(),
        reason,
    };
    for batch in Batches::new(bytes::Bytes::copy_from_slice(records)) {
        let batch = batch.map_err(|e| unreadable(e.to_string()))?;
        if batch.is_control() {
            continue;
        }
        let decoded = batch
            .iter_records(KEY_CHECK_DECOMPRESSED_MAX)
            .map_err(|e| unreadable(e.to_string()))?;
        for record in decoded.iter() {
            let record = record.map_err(|e| unreadable(e.to_string()))?;
            if record.key.is_none() {
                return Err(ProduceError::KeylessInCompacted {
                    topic: topic.name.clone(),
                    partition,
                });
            }
        }
    }
    Ok(())
}

fn check_consecutive(seqs: &[(i32, i32, i32)]) -> Result<(), ProduceError> {
    for pair in seqs.windows(2) {
        if pair[1].0 != producers::next_seq(pair[0].1) {
            return Err(ProduceError::NotConsecutive {
                next: pair[1].0,
                last: pair[0].1,
            });
        }
    }
    Ok(())
}

/// After a failed durability, a backend partition's producer state is reloaded from what the
/// backend stored (a retry is no duplicate). The local log fails for good: nothing to reload.
fn reload_producers(topic: &Topic, partition: i32) -> Option<()> {
    let state = topic.producers(partition)?;
    let mut state = state.lock().expect("producer state lock");
    *state = PartitionProducers::from_history(topic.partition(partition)?.producer_history()?);
    Some(())
}

/// Counts the records of a Kafka produce append (one offset each) in the broker's metrics.
/// (The HTTP API counts its own, since [`Broker::append`] serves both.)
fn count_records_in(broker: &Broker, appended: &Appended) {
    let records = appended.last_offset - appended.base_offset + 1;
    broker.metrics().records_in(records.max(0) as u64);
}

/// The size of the first batch in `records` larger than `max` bytes, if any.
fn oversize_batch(records: &[u8], max: i64) -> Option<usize> {
    let mut pos = 0;
    while pos < records.len() {
        let size = match batch::peek(&records[pos..]) {
            Ok(Peek::Whole(size)) => size,
            // Malformed framing: let the log's validation name the problem.
            _ => return None,
        };
        if size as i64 > max {
            return Some(size);
        }
        pos += size;
    }
    None
}
