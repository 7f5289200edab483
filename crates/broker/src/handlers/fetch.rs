//! Fetch: read durable batches; below `min_bytes`, park until a high watermark moves or
//! `max_wait_ms` passes.
//!
//! Sessions: the broker answers with session id 0, which tells clients to keep sending full
//! fetch requests (KIP-227's sessionless mode); every client supports it.

use std::pin::Pin;
use std::time::Duration;

use futures::future::select_all;
use sluice_log::batch::BatchView;
use sluice_log::{LogError, PartitionLog};
use sluice_protocol::kafka_protocol::ResponseError;
use sluice_protocol::kafka_protocol::messages::fetch_response::{
    FetchableTopicResponse, PartitionData,
};
use sluice_protocol::kafka_protocol::messages::{FetchRequest, FetchResponse};
use tokio::time::Instant;

use crate::{Broker, errors};

pub async fn handle(broker: &Broker, req: FetchRequest) -> FetchResponse {
    let wait = Duration::from_millis(
        (req.max_wait_ms.max(0) as u64).min(broker.config().fetch_wait_max_ms),
    );
    let deadline = Instant::now() + wait;
    let min_bytes = req.min_bytes.max(0) as usize;
    let max_bytes = if req.max_bytes <= 0 {
        i32::MAX as usize
    } else {
        req.max_bytes as usize
    };
    // Resolve each requested partition's log once.
    let targets: Vec<Vec<Option<PartitionLog>>> = req
        .topics
        .iter()
        .map(|t| {
            let topic = broker.topics().get(&t.topic.0);
            t.partitions
                .iter()
                .map(|p| {
                    topic
                        .as_ref()
                        .and_then(|topic| topic.partition(p.partition))
                })
                .collect()
        })
        .collect();
    loop {
        // Register for high-watermark changes before reading, so none is missed in between.
        let mut changed: Vec<Pin<Box<tokio::sync::futures::Notified<'_>>>> = targets
            .iter()
            .flatten()
            .flatten()
            .map(|log| Box::pin(log.high_watermark_changed()))
            .collect();
        for n in &mut changed {
            n.as_mut().enable();
        }
        let (response, bytes, errors) = read_once(&req, &targets, max_bytes);
        if bytes >= min_bytes || errors || changed.is_empty() || Instant::now() >= deadline {
            if bytes > 0 {
                broker.metrics().records_out(record_count(&response));
            }
            return response;
        }
        let _ = tokio::time::timeout_at(deadline, select_all(changed)).await;
    }
}

/// One pass over every requested partition: `(response, record bytes, any partition errored)`.
fn read_once(
    req: &FetchRequest,
    targets: &[Vec<Option<PartitionLog>>],
    max_bytes: usize,
) -> (FetchResponse, usize, bool) {
    let mut remaining = max_bytes;
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
                    let Some(log) = log else {
                        any_error = true;
                        return data
                            .with_error_code(ResponseError::UnknownTopicOrPartition.code())
                            .with_high_watermark(-1)
                            .with_last_stable_offset(-1)
                            .with_log_start_offset(-1);
                    };
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
                            if !matches!(e, LogError::OffsetOutOfRange { .. } | LogError::Closed { .. }) {
                                tracing::warn!(topic = %&*t.topic.0, partition = p.partition, error = %e, "fetch failed");
                            }
                            data.with_error_code(errors::log_error_code(&e))
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
        while let Ok(view) = BatchView::parse(rest) {
            count += u64::try_from(view.record_count()).unwrap_or(0);
            rest = &rest[view.len()..];
        }
    }
    count
}
