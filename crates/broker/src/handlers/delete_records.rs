//! DeleteRecords: moves partitions' log start offsets forward (`kafka-delete-records`,
//! AdminClient `deleteRecords`; Kafka Streams purges its repartition topics with it).
//!
//! Each partition's move is its storage's (`PartitionStorage::delete_records`): the answer
//! for a partition is given once its new log start is durable, so a crash never brings
//! deleted records back. Offset -1 means the high watermark, as in Kafka. The partitions of
//! one request move concurrently, each bounded by the request's `timeout_ms`.

use std::time::Duration;

use futures::future::join_all;
use sluice_protocol::kafka_protocol::messages::delete_records_response::{
    DeleteRecordsPartitionResult, DeleteRecordsTopicResult,
};
use sluice_protocol::kafka_protocol::messages::{DeleteRecordsRequest, DeleteRecordsResponse};

use crate::handlers::ReadError;
use crate::{Broker, errors};

/// The offset that means "up to the high watermark".
const HIGH_WATERMARK: i64 = -1;

/// The longest a request waits for its moves, whatever its `timeout_ms` says: a move is one
/// fsync (local), one flush (object storage) or one statement (cluster mode).
const WAIT_MAX: Duration = Duration::from_secs(60);

/// What `timeout_ms` asks for, within [1 ms, `WAIT_MAX`].
fn wait_for(timeout_ms: i32) -> Duration {
    Duration::from_millis(u64::try_from(timeout_ms).unwrap_or(0).max(1)).min(WAIT_MAX)
}

pub async fn handle(broker: &Broker, req: DeleteRecordsRequest) -> DeleteRecordsResponse {
    let wait = wait_for(req.timeout_ms);
    let topics = req.topics.into_iter().map(|t| {
        let topic = broker.topics().get(&t.name.0);
        async move {
            let partitions = t.partitions.into_iter().map(|p| {
                let log = topic.as_ref().and_then(|t| t.partition(p.partition_index));
                async move {
                    let result = DeleteRecordsPartitionResult::default()
                        .with_partition_index(p.partition_index)
                        .with_low_watermark(-1);
                    let Some(log) = log else {
                        let e = ReadError::UnknownTopicOrPartition;
                        return result.with_error_code(errors::read_error_code(&e));
                    };
                    let before = match p.offset {
                        HIGH_WATERMARK => log.high_watermark(),
                        offset => offset,
                    };
                    match tokio::time::timeout(wait, log.delete_records(before)).await {
                        Ok(Ok(low_watermark)) => result.with_low_watermark(low_watermark),
                        Ok(Err(e)) => result
                            .with_low_watermark(log.log_start_offset())
                            .with_error_code(errors::storage_error_code(&e)),
                        Err(_) => result.with_error_code(errors::REQUEST_TIMED_OUT),
                    }
                }
            });
            DeleteRecordsTopicResult::default()
                .with_name(t.name)
                .with_partitions(join_all(partitions).await)
        }
    });
    DeleteRecordsResponse::default().with_topics(join_all(topics).await)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_wait_is_what_the_client_asked_within_bounds() {
        assert_eq!(wait_for(-5), Duration::from_millis(1));
        assert_eq!(wait_for(0), Duration::from_millis(1));
        assert_eq!(wait_for(30_000), Duration::from_secs(30));
        assert_eq!(wait_for(i32::MAX), WAIT_MAX);
    }
}
