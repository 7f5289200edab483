//! What the connection needs from a response to throttle its client by a client quota
//! (`sluice_security::quotas`): the record bytes it carries (what `consumer_byte_rate`
//! counts), and a way to tell the client how long it is throttled (`throttle_time_ms`).

use sluice_protocol::kafka_protocol::messages::ResponseKind;

/// Sets `throttle_time_ms` in a response of any API that has it (every API Sluice serves but
/// SaslHandshake and SaslAuthenticate, whose clients are never throttled).
pub fn set_throttle_time(body: &mut ResponseKind, ms: i32) {
    macro_rules! set {
        ($($api:ident),* $(,)?) => {
            match body {
                $(ResponseKind::$api(r) => r.throttle_time_ms = ms,)*
                _ => {}
            }
        };
    }
    set!(
        Produce,
        Fetch,
        ListOffsets,
        Metadata,
        ApiVersions,
        CreateTopics,
        DeleteTopics,
        DeleteRecords,
        DescribeLogDirs,
        DescribeTopicPartitions,
        DescribeConfigs,
        AlterConfigs,
        CreatePartitions,
        IncrementalAlterConfigs,
        DescribeCluster,
        InitProducerId,
        FindCoordinator,
        JoinGroup,
        SyncGroup,
        Heartbeat,
        LeaveGroup,
        OffsetCommit,
        OffsetFetch,
        OffsetDelete,
        ListGroups,
        DescribeGroups,
        DeleteGroups,
        ConsumerGroupHeartbeat,
        ConsumerGroupDescribe,
        DescribeUserScramCredentials,
        AlterUserScramCredentials,
        CreateAcls,
        DescribeAcls,
        DeleteAcls,
        DescribeClientQuotas,
        AlterClientQuotas,
        ShareGroupHeartbeat,
        ShareGroupDescribe,
        ShareFetch,
        ShareAcknowledge,
        DescribeShareGroupOffsets,
        AlterShareGroupOffsets,
        DeleteShareGroupOffsets,
    );
}

/// The record bytes a Fetch or ShareFetch response carries (0 for other responses).
pub fn record_bytes(body: &ResponseKind) -> usize {
    match body {
        ResponseKind::Fetch(r) => r
            .responses
            .iter()
            .flat_map(|t| &t.partitions)
            .map(|p| p.records.as_ref().map_or(0, |b| b.len()))
            .sum(),
        ResponseKind::ShareFetch(r) => r
            .responses
            .iter()
            .flat_map(|t| &t.partitions)
            .map(|p| p.records.as_ref().map_or(0, |b| b.len()))
            .sum(),
        _ => 0,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use sluice_protocol::kafka_protocol::messages::{
        FetchResponse, MetadataResponse, fetch_response,
    };

    #[test]
    fn throttle_time_and_record_bytes() {
        let mut body = ResponseKind::Metadata(MetadataResponse::default());
        set_throttle_time(&mut body, 1234);
        let ResponseKind::Metadata(m) = &body else {
            unreachable!()
        };
        assert_eq!(m.throttle_time_ms, 1234);
        let fetch = FetchResponse::default().with_responses(vec![
            fetch_response::FetchableTopicResponse::default().with_partitions(vec![
                fetch_response::PartitionData::default()
                    .with_records(Some(bytes::Bytes::from_static(&[0; 100]))),
                fetch_response::PartitionData::default(),
                fetch_response::PartitionData::default()
                    .with_records(Some(bytes::Bytes::from_static(&[0; 23]))),
            ]),
        ]);
        assert_eq!(record_bytes(&ResponseKind::Fetch(fetch)), 123);
        assert_eq!(record_bytes(&body), 0);
    }
}
