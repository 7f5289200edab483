//! ListOffsets: earliest, latest, the first offset at or after a timestamp, or the first record
//! with the highest timestamp (-3, KIP-734).

use sluice_protocol::kafka_protocol::messages::list_offsets_response::{
    ListOffsetsPartitionResponse, ListOffsetsTopicResponse,
};
use sluice_protocol::kafka_protocol::messages::{ListOffsetsRequest, ListOffsetsResponse};

use std::collections::HashMap;
use std::sync::Arc;

use crate::handlers::ReadError;
use crate::storage::{LOAD_WAIT_MAX, OffsetSpec, PartitionStorage};
use crate::{Broker, errors};

/// The offset a ListOffsets timestamp asks for; `None` for a negative value with no meaning.
fn offset_spec(timestamp: i64) -> Option<OffsetSpec> {
    match timestamp {
        -1 => Some(OffsetSpec::Latest),
        // -4 is "earliest local": every offset is local.
        -2 | -4 => Some(OffsetSpec::Earliest),
        -5 => Some(OffsetSpec::LatestTiered),
        -3 => Some(OffsetSpec::MaxTimestamp),
        ms if ms >= 0 => Some(OffsetSpec::Timestamp(ms)),
        _ => None,
    }
}

/// Partitions whose timestamp lookup could not load its stored data: (topic, partition) to
/// the error code to answer.
pub type Failed = HashMap<(String, i32), i16>;

/// A lookup to prepare: (topic, partition), its storage, the time or max timestamp.
type Lookup = ((String, i32), Arc<dyn PartitionStorage>, OffsetSpec);

/// Loads what the timestamp lookups of `req` need, for a backend that keeps its data
/// elsewhere (object storage), so that [`handle`] answers the exact record; at most
/// [`LOAD_WAIT_MAX`]. Returns the partitions whose load failed or timed out.
pub async fn prepare(broker: &Broker, req: &ListOffsetsRequest) -> Failed {
    let mut wanted: Vec<Lookup> = Vec::new();
    for t in &req.topics {
        let Some(topic) = broker.topics().get(&t.name.0) else {
            continue;
        };
        for p in &t.partitions {
            if let (Some(spec @ (OffsetSpec::Timestamp(_) | OffsetSpec::MaxTimestamp)), Some(log)) =
                (offset_spec(p.timestamp), topic.partition(p.partition_index))
            {
                wanted.push(((t.name.0.to_string(), p.partition_index), log, spec));
            }
        }
    }
    let loads: Vec<_> = wanted
        .iter()
        .filter_map(|(key, log, spec)| {
            let load = match spec {
                OffsetSpec::Timestamp(ms) => log.prepare_offset_for_timestamp(*ms),
                _ => log.prepare_max_timestamp(),
            };
            load.map(|load| async move { (key, load.await) })
        })
        .collect();
    let mut failed = Failed::new();
    if loads.is_empty() {
        return failed;
    }
    match tokio::time::timeout(LOAD_WAIT_MAX, futures::future::join_all(loads)).await {
        Ok(results) => {
            for (key, result) in results {
                if let Err(e) = result {
                    tracing::warn!(topic = %key.0, partition = key.1, error = %e, "could not load stored data for a timestamp lookup");
                    failed.insert(key.clone(), errors::storage_error_code(&e));
                }
            }
        }
        Err(_) => {
            tracing::warn!(
                "stored data for a timestamp lookup did not load within {LOAD_WAIT_MAX:?}"
            );
            for (key, _, _) in &wanted {
                failed.insert(key.clone(), errors::REQUEST_TIMED_OUT);
            }
        }
    }
    failed
}

/// The most bytes a compressed batch may decompress to when a time lookup looks inside it.
const DECOMPRESSED_MAX: usize = 64 << 20;

/// Storage answers a time lookup that falls in a compressed batch with the batch's base offset
/// and max timestamp (the log stores batches as sent and never decompresses). Kafka answers
/// the record: the first one at or after `target`. This reads the batch at `offset` and, if it
/// is compressed, decompresses it to find that record. `None` (the storage's answer stands)
/// for an uncompressed batch, whose answer is already the record's, or a batch that cannot
/// be read now.
fn exact_record(log: &dyn PartitionStorage, offset: i64, target: i64) -> Option<(i64, i64)> {
    use sluice_protocol::records::Batches;
    let read = log.read(offset, 1).ok()?;
    let batch = Batches::new(read.records).next()?.ok()?;
    if batch.codec() == "none" {
        return None;
    }
    let records = batch.iter_records(DECOMPRESSED_MAX).ok()?;
    for record in records.iter() {
        let record = record.ok()?;
        if record.offset >= offset && record.timestamp_ms >= target {
            return Some((record.offset, record.timestamp_ms));
        }
    }
    None
}

pub fn handle(
    broker: &Broker,
    req: ListOffsetsRequest,
    version: i16,
    failed: &Failed,
) -> ListOffsetsResponse {
    // The leader epoch field exists from v4.
    let epoch = if version >= 4 { 0 } else { -1 };
    let topics = req
        .topics
        .into_iter()
        .map(|t| {
            let topic = broker.topics().get(&t.name.0);
            let partitions = t
                .partitions
                .into_iter()
                .map(|p| {
                    let response = ListOffsetsPartitionResponse::default()
                        .with_partition_index(p.partition_index)
                        .with_timestamp(-1)
                        .with_offset(-1);
                    let Some(log) = topic.as_ref().and_then(|t| t.partition(p.partition_index))
                    else {
                        let e = ReadError::UnknownTopicOrPartition;
                        return response.with_error_code(errors::read_error_code(&e));
                    };
                    if let Some(code) = failed.get(&(t.name.0.to_string(), p.partition_index)) {
                        return response.with_error_code(*code);
                    }
                    let found = match offset_spec(p.timestamp) {
                        Some(spec) => log.offset_for(spec),
                        None => {
                            let e = ReadError::Timestamp(p.timestamp);
                            return response.with_error_code(errors::read_error_code(&e));
                        }
                    };
                    let found = match (found, offset_spec(p.timestamp)) {
                        (Ok(Some((offset, ts))), Some(OffsetSpec::Timestamp(target))) => Ok(Some(
                            exact_record(&*log, offset, target).unwrap_or((offset, ts)),
                        )),
                        (Ok(Some((offset, ts))), Some(OffsetSpec::MaxTimestamp)) => Ok(Some(
                            exact_record(&*log, offset, ts).unwrap_or((offset, ts)),
                        )),
                        (found, _) => found,
                    };
                    match found {
                        Ok(Some((offset, timestamp))) => response
                            .with_offset(offset)
                            .with_timestamp(timestamp)
                            .with_leader_epoch(epoch),
                        Ok(None) => response,
                        Err(e) => response.with_error_code(errors::storage_error_code(&e)),
                    }
                })
                .collect();
            ListOffsetsTopicResponse::default()
                .with_name(t.name)
                .with_partitions(partitions)
        })
        .collect();
    ListOffsetsResponse::default().with_topics(topics)
}
