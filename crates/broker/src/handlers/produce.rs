//! Produce: append each partition's batches, wait until they are durable, answer.
//!
//! acks=1 and acks=all are the same here (there is one replica): both answer after an
//! fdatasync covers the batches. acks=0 answers nothing; the batches still become durable at
//! the next sync round.

use futures::future::join_all;
use sluice_log::batch::{self, Peek};
use sluice_protocol::kafka_protocol::ResponseError;
use sluice_protocol::kafka_protocol::messages::produce_response::{
    PartitionProduceResponse, TopicProduceResponse,
};
use sluice_protocol::kafka_protocol::messages::{ProduceRequest, ProduceResponse};

use super::str_bytes;
use crate::{Broker, errors};

pub async fn handle(broker: &Broker, req: ProduceRequest) -> Option<ProduceResponse> {
    let acks = req.acks;
    let acks_valid = matches!(acks, -1..=1);
    let mut responses = Vec::with_capacity(req.topic_data.len());
    // (topic index, partition index, pending append)
    let mut pending = Vec::new();
    for (ti, topic_data) in req.topic_data.into_iter().enumerate() {
        let topic = broker.topics().get(&topic_data.name.0);
        let mut partitions = Vec::with_capacity(topic_data.partition_data.len());
        for (pi, data) in topic_data.partition_data.into_iter().enumerate() {
            let response = PartitionProduceResponse::default().with_index(data.index);
            let refuse = |code: i16, message: String| {
                PartitionProduceResponse::default()
                    .with_index(data.index)
                    .with_error_code(code)
                    .with_error_message(Some(str_bytes(message)))
            };
            if !acks_valid {
                partitions.push(refuse(
                    ResponseError::InvalidRequiredAcks.code(),
                    format!("acks must be -1 (all), 0 or 1, got {acks}"),
                ));
                continue;
            }
            let Some(topic) = &topic else {
                partitions.push(refuse(
                    ResponseError::UnknownTopicOrPartition.code(),
                    format!("unknown topic '{}'", &*topic_data.name.0),
                ));
                continue;
            };
            let Some(log) = topic.partition(data.index) else {
                partitions.push(refuse(
                    ResponseError::UnknownTopicOrPartition.code(),
                    format!("topic '{}' has no partition {}", topic.name, data.index),
                ));
                continue;
            };
            let records = data.records.unwrap_or_default();
            let max = topic
                .config()
                .max_message_bytes(broker.config().max_message_bytes);
            if let Some(size) = oversize_batch(&records, max) {
                partitions.push(refuse(
                    ResponseError::MessageTooLarge.code(),
                    format!("a record batch of {size} bytes exceeds max.message.bytes ({max})"),
                ));
                continue;
            }
            match log.append(&records) {
                Ok(appended) => {
                    pending.push((ti, pi, appended));
                    partitions.push(response.with_log_start_offset(log.log_start_offset()));
                }
                Err(e) => {
                    tracing::info!(topic = %topic.name, partition = data.index, error = %e, "produce refused");
                    partitions.push(refuse(errors::log_error_code(&e), e.to_string()));
                }
            }
        }
        responses.push(
            TopicProduceResponse::default()
                .with_name(topic_data.name)
                .with_partition_responses(partitions),
        );
    }
    if acks == 0 {
        return None;
    }
    let durable = join_all(pending.iter().map(|(_, _, a)| a.durable())).await;
    for ((ti, pi, appended), result) in pending.iter().zip(durable) {
        let slot = &mut responses[*ti].partition_responses[*pi];
        match result {
            Ok(d) => slot.base_offset = d.base_offset,
            Err(e) => {
                slot.error_code = errors::log_error_code(&e);
                slot.error_message = Some(str_bytes(e.to_string()));
                tracing::error!(base_offset = appended.base_offset, error = %e, "append did not become durable");
            }
        }
    }
    Some(ProduceResponse::default().with_responses(responses))
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
