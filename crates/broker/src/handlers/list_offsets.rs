//! ListOffsets: earliest, latest, or the first offset at or after a timestamp.

use sluice_protocol::kafka_protocol::messages::list_offsets_response::{
    ListOffsetsPartitionResponse, ListOffsetsTopicResponse,
};
use sluice_protocol::kafka_protocol::messages::{ListOffsetsRequest, ListOffsetsResponse};

use crate::handlers::ReadError;
use crate::storage::OffsetSpec;
use crate::{Broker, errors};

/// ListOffsets' "max timestamp" (KIP-734), which Sluice does not implement.
const MAX_TIMESTAMP: i64 = -3;

/// The offset a ListOffsets timestamp asks for; `None` for a negative value with no meaning.
fn offset_spec(timestamp: i64) -> Option<OffsetSpec> {
    match timestamp {
        -1 => Some(OffsetSpec::Latest),
        // -4 is "earliest local": every offset is local.
        -2 | -4 => Some(OffsetSpec::Earliest),
        -5 => Some(OffsetSpec::LatestTiered),
        ms if ms >= 0 => Some(OffsetSpec::Timestamp(ms)),
        _ => None,
    }
}

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
                        let e = ReadError::UnknownTopicOrPartition;
                        return response.with_error_code(errors::read_error_code(&e));
                    };
                    let found = match offset_spec(p.timestamp) {
                        _ if p.timestamp == MAX_TIMESTAMP => {
                            let e = ReadError::MaxTimestamp;
                            return response.with_error_code(errors::read_error_code(&e));
                        }
                        Some(spec) => log.offset_for(spec),
                        None => {
                            let e = ReadError::Timestamp(p.timestamp);
                            return response.with_error_code(errors::read_error_code(&e));
                        }
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
