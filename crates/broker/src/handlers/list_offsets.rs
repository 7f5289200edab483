//! ListOffsets: earliest, latest, or the first offset at or after a timestamp.

use sluice_protocol::kafka_protocol::ResponseError;
use sluice_protocol::kafka_protocol::messages::list_offsets_response::{
    ListOffsetsPartitionResponse, ListOffsetsTopicResponse,
};
use sluice_protocol::kafka_protocol::messages::{ListOffsetsRequest, ListOffsetsResponse};

use crate::{Broker, errors};

/// Special timestamps of ListOffsets.
const LATEST: i64 = -1;
const EARLIEST: i64 = -2;
const MAX_TIMESTAMP: i64 = -3;
const EARLIEST_LOCAL: i64 = -4;
const LATEST_TIERED: i64 = -5;

pub fn handle(broker: &Broker, req: ListOffsetsRequest, version: i16) -> ListOffsetsResponse {
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
                        return response
                            .with_error_code(ResponseError::UnknownTopicOrPartition.code());
                    };
                    let found = match p.timestamp {
                        LATEST => Ok(Some((log.high_watermark(), -1))),
                        EARLIEST | EARLIEST_LOCAL => Ok(Some((log.log_start_offset(), -1))),
                        // Nothing is tiered: no offset.
                        LATEST_TIERED => Ok(None),
                        MAX_TIMESTAMP => {
                            return response
                                .with_error_code(ResponseError::UnsupportedVersion.code());
                        }
                        ts if ts < 0 => {
                            return response.with_error_code(ResponseError::InvalidRequest.code());
                        }
                        ts => log.offset_for_timestamp(ts),
                    };
                    match found {
                        Ok(Some((offset, timestamp))) => response
                            .with_offset(offset)
                            .with_timestamp(timestamp)
                            .with_leader_epoch(epoch),
                        Ok(None) => response,
                        Err(e) => response.with_error_code(errors::log_error_code(&e)),
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
