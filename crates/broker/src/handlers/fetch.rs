//! Fetch: read durable batches; below `min_bytes`, park until a high watermark moves or
//! `max_wait_ms` passes.
//!
//! Sessions: the broker answers with session id 0, which tells clients to keep sending full
//! fetch requests (KIP-227's sessionless mode); every client supports it.
//!
//! Reads and waits go through the storage door (`crate::storage`): `PartitionStorage::read`
//! per partition, then `storage::wait_for_data` over every partition of the request.

use std::net::IpAddr;
use std::sync::Arc;
use std::time::Duration;

use sluice_log::batch::BatchView;
use sluice_protocol::kafka_protocol::messages::fetch_response::{
    FetchableTopicResponse, PartitionData,
};
use sluice_protocol::kafka_protocol::messages::{FetchRequest, FetchResponse};
use tokio::time::Instant;

use crate::handlers::ReadError;
use crate::memory::{Ask, Class, Reservation};
use crate::storage::{self, PartitionStorage, StorageError};
use crate::{Broker, errors};

/// A Fetch's `isolation_level`, read at the handler edge. Both read up to the high watermark:
/// transactional batches are refused at produce, so the last stable offset always equals it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Isolation {
    ReadUncommitted,
    ReadCommitted,
}

impl Isolation {
    /// The wire value (0 or 1); `None` for anything else.
    pub fn from_wire(level: i8) -> Option<Isolation> {
        match level {
            0 => Some(Isolation::ReadUncommitted),
            1 => Some(Isolation::ReadCommitted),
            _ => None,
        }
    }
}

/// A requested partition: its storage, or why every answer for it is an error.
type Target = Result<Arc<dyn PartitionStorage>, ReadError>;

/// Answers one Fetch, with the memory reservation that covers its records until they are
/// written.
///
/// Each pass reserves what it may read from the broker's memory budget, reads, and shrinks the
/// reservation to what it read, all without yielding, so a pass never holds more than it uses
/// across an await. When the budget is short a pass reads less (at least the first batch, as
/// Kafka requires); when it has not even room for one batch, the fetch waits for room until its
/// `max_wait_ms` ends and then answers with no records (the client simply fetches again).
pub async fn handle(
    broker: &Broker,
    req: FetchRequest,
    client: Option<IpAddr>,
) -> (FetchResponse, Reservation) {
    let wait = Duration::from_millis(
        (req.max_wait_ms.max(0) as u64).min(broker.config().fetch_wait_max_ms),
    );
    let deadline = Instant::now() + wait;
    let min_bytes = req.min_bytes.max(0) as usize;
    let cap = broker.config().fetch_max_bytes;
    let max_bytes = if req.max_bytes <= 0 {
        cap
    } else {
        (req.max_bytes as usize).min(cap)
    };
    // Room for one batch of the default size: what a pass waits for before it reads at all.
    let pass_min_bytes = max_bytes.min(broker.config().max_message_bytes.max(1) as usize);
    let budget = broker.memory();
    let ask = Ask::new(Class::Bulk, client);
    let isolation = Isolation::from_wire(req.isolation_level);
    // Cluster mode: a topic created through another broker moments ago is known here first.
    if broker.misses_catalog(
        req.topics
            .iter()
            .map(|t| t.topic.0.as_str())
            .filter(|n| !n.is_empty()),
    ) {
        broker.refresh_on_miss().await;
    }
    // Resolve each requested partition's storage once.
    let targets: Vec<Vec<Target>> = req
        .topics
        .iter()
        .map(|t| {
            let topic = broker.topics().get(&t.topic.0);
            t.partitions
                .iter()
                .map(|p| {
                    let part = topic
                        .as_ref()
                        .and_then(|topic| topic.partition(p.partition));
                    match (isolation, part) {
                        (None, _) => Err(ReadError::IsolationLevel(req.isolation_level)),
                        (_, None) => Err(ReadError::UnknownTopicOrPartition),
                        (_, Some(part)) => Ok(part),
                    }
                })
                .collect()
        })
        .collect();
    loop {
        // Bring data kept elsewhere (an object store's ranges) into the caches before the pass,
        // which must not wait; a failed load ends the fetch with what the pass finds.
        let load_failed = storage::prepare_reads(reads(&req, &targets, max_bytes), deadline).await;
        let mut memory = match budget.try_reserve_up_to(pass_min_bytes, max_bytes, ask) {
            Some(memory) => memory,
            None => {
                let room = budget.reserve_up_to(pass_min_bytes, max_bytes, ask);
                if tokio::time::timeout_at(deadline, room).await.is_err() {
                    let (response, _, _) = read_once(&req, &targets, None);
                    return (response, budget.empty(ask));
                }
                // Room came back: read in a fresh pass (this reservation may be stale).
                continue;
            }
        };
        let (response, bytes, errors) = read_once(&req, &targets, Some(memory.bytes()));
        memory.resize(bytes);
        let no_partitions = targets.iter().all(Vec::is_empty);
        if bytes >= min_bytes
            || errors
            || load_failed
            || no_partitions
            || Instant::now() >= deadline
        {
            if bytes > 0 {
                broker.metrics().records_out(record_count(&response));
            }
            return (response, memory);
        }
        // Wait for a high watermark past the one this pass saw (one that moved since the read
        // ends the wait at once: nothing is missed). No memory is held while waiting.
        let seen = response.responses.iter().flat_map(|t| &t.partitions);
        let waits: Vec<(&dyn PartitionStorage, i64)> = (targets.iter().flatten().zip(seen))
            .filter_map(|(t, p)| Some((&**t.as_ref().ok()?, p.high_watermark)))
            .collect();
        drop((response, memory));
        storage::wait_for_data(waits, deadline).await;
    }
}

/// Each requested partition's `(storage, fetch offset, byte limit)`, for
/// [`storage::prepare_reads`].
fn reads<'a>(
    req: &FetchRequest,
    targets: &'a [Vec<Target>],
    max_bytes: usize,
) -> Vec<(&'a dyn PartitionStorage, i64, usize)> {
    let parts = req.topics.iter().zip(targets);
    let parts = parts.flat_map(|(t, parts)| t.partitions.iter().zip(parts));
    parts
        .filter_map(|(p, part)| {
            let limit = (p.partition_max_bytes.max(0) as usize).min(max_bytes);
            Some((&**part.as_ref().ok()?, p.fetch_offset, limit.max(1)))
        })
        .collect()
}

/// One pass over every requested partition: `(response, record bytes, any partition errored)`.
/// `max_bytes` of `None` reads no records, only each partition's offsets.
fn read_once(
    req: &FetchRequest,
    targets: &[Vec<Target>],
    max_bytes: Option<usize>,
) -> (FetchResponse, usize, bool) {
    let mut remaining = max_bytes.unwrap_or(0);
    let mut total = 0usize;
    let mut any_error = false;
    let responses = req
        .topics
        .iter()
        .zip(targets)
        .map(|(t, logs)| {
            let partitions = t
                .partitions
                .iter()
                .zip(logs)
                .map(|(p, log)| {
                    let data = PartitionData::default().with_partition_index(p.partition);
                    let log = match log {
                        Ok(log) => log,
                        Err(e) => {
                            any_error = true;
                            return data
                                .with_error_code(errors::read_error_code(e))
                            .with_high_watermark(-1)
                            .with_last_stable_offset(-1)
                                .with_log_start_offset(-1);
                        }
                    };
                    if max_bytes.is_none() {
                        return data
                            .with_high_watermark(log.high_watermark())
                            .with_last_stable_offset(log.high_watermark())
                            .with_log_start_offset(log.log_start_offset());
                    }
                    let limit = (p.partition_max_bytes.max(0) as usize).min(remaining);
                    match log.read(p.fetch_offset, limit.max(1)) {
                        Ok(read) => {
                            let mut records = read.records;
                            // Only the first non-empty partition may exceed the limits (so a
                            // batch larger than them still makes progress).
                            if total > 0 && records.len() > limit {
                                records = bytes::Bytes::new();
                            }
                            total += records.len();
                            remaining = remaining.saturating_sub(records.len());
                            data.with_high_watermark(read.high_watermark)
                                .with_last_stable_offset(read.high_watermark)
                                .with_log_start_offset(read.log_start_offset)
                                .with_records(Some(records))
                        }
                        Err(e) => {
                            any_error = true;
                            if !matches!(e, StorageError::OffsetOutOfRange { .. } | StorageError::Closed { .. }) {
                                tracing::warn!(topic = %&*t.topic.0, partition = p.partition, error = %e, "fetch failed");
                            }
                            data.with_error_code(errors::storage_error_code(&e))
                                .with_high_watermark(log.high_watermark())
                                .with_last_stable_offset(log.high_watermark())
                                .with_log_start_offset(log.log_start_offset())
                        }
                    }
                })
                .collect();
            FetchableTopicResponse::default()
                .with_topic(t.topic.clone())
                .with_topic_id(t.topic_id)
                .with_partitions(partitions)
        })
        .collect();
    (
        FetchResponse::default().with_responses(responses),
        total,
        any_error,
    )
}

/// Records in the batches of a response, from the batch headers (for the metrics). Counts
/// whole batches, including records before the fetch offset that a batch may start with.
fn record_count(response: &FetchResponse) -> u64 {
    let mut count = 0u64;
    for partition in response.responses.iter().flat_map(|t| &t.partitions) {
        let mut rest: &[u8] = partition.records.as_deref().unwrap_or_default();
        while let Ok(view) = BatchView::parse_stored(rest) {
            count += u64::try_from(view.record_count()).unwrap_or(0);
            rest = &rest[view.len()..];
        }
    }
    count
}

#[cfg(test)]
mod tests {
    use sluice_protocol::kafka_protocol::ResponseError;
    use std::sync::Arc;

    use sluice_log::batch::build::{Record, batch};
    use sluice_protocol::kafka_protocol::messages::TopicName;
    use sluice_protocol::kafka_protocol::messages::fetch_request::{FetchPartition, FetchTopic};
    use sluice_protocol::kafka_protocol::protocol::StrBytes;

    use super::*;
    use crate::BrokerConfig;

    fn request(max_wait_ms: i32, isolation_level: i8) -> FetchRequest {
        let partition = FetchPartition::default()
            .with_partition(0)
            .with_fetch_offset(0)
            .with_partition_max_bytes(1 << 20);
        FetchRequest::default()
            .with_max_wait_ms(max_wait_ms)
            .with_min_bytes(1)
            .with_max_bytes(1 << 20)
            .with_isolation_level(isolation_level)
            .with_topics(vec![
                FetchTopic::default()
                    .with_topic(TopicName(StrBytes::from_static_str("t")))
                    .with_partitions(vec![partition]),
            ])
    }

    fn partition_of(response: &FetchResponse) -> &PartitionData {
        &response.responses[0].partitions[0]
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_fetch_below_min_bytes_waits_for_an_append_or_max_wait() {
        let dir = tempfile::tempdir().unwrap();
        let broker = Arc::new(Broker::open(BrokerConfig::new(dir.path())).unwrap());
        let topic = broker.create_topic("t", 1, Default::default()).unwrap();

        // Nothing arrives: an empty answer once max_wait_ms has passed.
        let started = Instant::now();
        let (response, _) = handle(&broker, request(100, 1), None).await;
        assert!(started.elapsed() >= Duration::from_millis(100));
        let p = partition_of(&response);
        assert_eq!((p.error_code, p.high_watermark), (0, 0));
        assert!(p.records.as_ref().is_none_or(|r| r.is_empty()));

        // A record arrives during the wait: answered with it, long before max_wait_ms.
        let writer = topic.partition(0).unwrap();
        let append = tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(50)).await;
            let record = Record {
                timestamp_delta: 0,
                key: None,
                value: Some(b"v"),
            };
            writer.append(&batch(1, &[record])).unwrap().durable().await
        });
        let started = Instant::now();
        let (response, _) = handle(&broker, request(20_000, 0), None).await;
        assert!(started.elapsed() < Duration::from_secs(10));
        let p = partition_of(&response);
        assert_eq!(p.high_watermark, 1);
        assert!(!p.records.as_ref().unwrap().is_empty());
        append.await.unwrap().unwrap();

        // An isolation level that does not exist is refused at once.
        let (response, _) = handle(&broker, request(20_000, 7), None).await;
        let p = partition_of(&response);
        assert_eq!(p.error_code, ResponseError::InvalidRequest.code());
    }
}
