//! The API versions Sluice implements: the single table behind the ApiVersions response and the
//! request decoder's version check. An API is listed only once it is implemented and tested.
//!
//! Why some maxima are below what clients know: Produce v13 and Fetch v13+ address topics by id
//! only; the versions below them carry names, which every client still supports.

use kafka_protocol::messages::ApiKey;

/// `(api, min version, max version)` for every implemented API.
pub const SUPPORTED: &[(ApiKey, i16, i16)] = &[
    (ApiKey::Produce, 3, 12),
    (ApiKey::Fetch, 4, 12),
    (ApiKey::ListOffsets, 1, 10),
    (ApiKey::Metadata, 1, 12),
    (ApiKey::ApiVersions, 0, 4),
    (ApiKey::CreateTopics, 2, 7),
    (ApiKey::DeleteTopics, 1, 6),
    (ApiKey::DeleteRecords, 0, 2),
    (ApiKey::DescribeLogDirs, 1, 4),
    (ApiKey::DescribeTopicPartitions, 0, 0),
    (ApiKey::DescribeConfigs, 1, 4),
    (ApiKey::AlterConfigs, 0, 2),
    (ApiKey::CreatePartitions, 0, 3),
    (ApiKey::IncrementalAlterConfigs, 0, 1),
    (ApiKey::DescribeCluster, 0, 1),
    (ApiKey::InitProducerId, 0, 5),
    (ApiKey::FindCoordinator, 0, 6),
    (ApiKey::JoinGroup, 0, 9),
    (ApiKey::SyncGroup, 0, 5),
    (ApiKey::Heartbeat, 0, 4),
    (ApiKey::LeaveGroup, 0, 5),
    (ApiKey::OffsetCommit, 2, 9),
    (ApiKey::OffsetFetch, 1, 9),
    (ApiKey::OffsetDelete, 0, 0),
    (ApiKey::ListGroups, 0, 5),
    (ApiKey::DescribeGroups, 0, 6),
    (ApiKey::DeleteGroups, 0, 2),
    (ApiKey::ConsumerGroupHeartbeat, 0, 1),
    (ApiKey::ConsumerGroupDescribe, 0, 1),
    // v0 is followed by the SASL tokens as bare size-prefixed frames instead of
    // SaslAuthenticate requests. Kafka 4 still serves it (KIP-896 kept it for older
    // clients), and librdkafka uses SASL only with a broker that lists v0.
    (ApiKey::SaslHandshake, 0, 1),
    (ApiKey::SaslAuthenticate, 0, 2),
    (ApiKey::DescribeUserScramCredentials, 0, 0),
    (ApiKey::AlterUserScramCredentials, 0, 0),
    (ApiKey::CreateAcls, 1, 3),
    (ApiKey::DescribeAcls, 1, 3),
    (ApiKey::DeleteAcls, 1, 3),
    (ApiKey::DescribeClientQuotas, 0, 1),
    (ApiKey::AlterClientQuotas, 0, 1),
    // ShareFetch/ShareAcknowledge v2 (KIP-1206 acquire modes, KIP-1222 renew) are `share_v2`'s:
    // the codec knows v1 only.
    (ApiKey::ShareGroupHeartbeat, 1, 1),
    (ApiKey::ShareGroupDescribe, 1, 1),
    (ApiKey::ShareFetch, 1, 2),
    (ApiKey::ShareAcknowledge, 1, 2),
    (ApiKey::DescribeShareGroupOffsets, 0, 0),
    (ApiKey::AlterShareGroupOffsets, 0, 0),
    (ApiKey::DeleteShareGroupOffsets, 0, 0),
];

/// The supported version range of `api`, if Sluice implements it.
pub fn supported(api: ApiKey) -> Option<(i16, i16)> {
    SUPPORTED
        .iter()
        .find(|(key, _, _)| *key == api)
        .map(|&(_, min, max)| (min, max))
}

/// Whether `version` of `api` is implemented.
pub fn is_supported(api: ApiKey, version: i16) -> bool {
    supported(api).is_some_and(|(min, max)| (min..=max).contains(&version))
}

#[cfg(test)]
mod tests {
    use super::*;

    use crate::share_v2;

    /// The APIs whose newest supported version comes from `share_v2`, not the codec.
    const ADDED_BY_SHARE_V2: [ApiKey; 2] = [ApiKey::ShareFetch, ApiKey::ShareAcknowledge];

    /// Every range is one the codec decodes, except the one version `share_v2` adds on top of
    /// it. When the codec learns that version, this fails: decode it there and drop the layer.
    #[test]
    fn every_supported_range_is_within_what_the_codec_knows() {
        for &(api, min, max) in SUPPORTED {
            let known = api.valid_versions();
            assert!(min <= max, "{api:?}");
            if ADDED_BY_SHARE_V2.contains(&api) {
                assert_eq!(
                    (known.min, known.max, max),
                    (min, share_v2::VERSION - 1, share_v2::VERSION),
                    "{api:?} {min}..={max} vs {known}: the codec knows v{} now?",
                    share_v2::VERSION
                );
            } else {
                assert!(
                    known.min <= min && max <= known.max,
                    "{api:?} {min}..={max} vs {known}"
                );
            }
        }
    }
}
