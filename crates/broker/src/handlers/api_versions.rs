//! ApiVersions: what this broker implements (from `sluice_protocol::versions::SUPPORTED`).

use sluice_protocol::kafka_protocol::messages::ApiKey;
use sluice_protocol::kafka_protocol::messages::ApiVersionsResponse;
use sluice_protocol::kafka_protocol::messages::api_versions_response::ApiVersion;
use sluice_protocol::versions::SUPPORTED;

pub fn handle() -> ApiVersionsResponse {
    listed(false)
}

/// The APIs of share groups (KIP-932), which a broker in cluster mode does not serve yet.
pub const SHARE_APIS: [ApiKey; 7] = [
    ApiKey::ShareGroupHeartbeat,
    ApiKey::ShareGroupDescribe,
    ApiKey::ShareFetch,
    ApiKey::ShareAcknowledge,
    ApiKey::DescribeShareGroupOffsets,
    ApiKey::AlterShareGroupOffsets,
    ApiKey::DeleteShareGroupOffsets,
];

/// What this broker serves: everything in `SUPPORTED`, less share groups in cluster mode
/// (clients then report share groups as unsupported, as with a Kafka that has them off).
pub fn listed(cluster: bool) -> ApiVersionsResponse {
    ApiVersionsResponse::default().with_api_keys(
        SUPPORTED
            .iter()
            .filter(|(api, _, _)| !(cluster && SHARE_APIS.contains(api)))
            .map(|&(api, min, max)| {
                ApiVersion::default()
                    .with_api_key(api as i16)
                    .with_min_version(min)
                    .with_max_version(max)
            })
            .collect(),
    )
}

/// The answer to an ApiVersions request of a version this broker does not know: encoded as v0,
/// with UNSUPPORTED_VERSION and the supported list, so the client can pick a version.
pub fn unsupported_version() -> ApiVersionsResponse {
    handle().with_error_code(crate::errors::UNSUPPORTED_VERSION)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cluster_mode_leaves_out_share_groups_and_nothing_else() {
        let all = listed(false).api_keys;
        let cluster = listed(true).api_keys;
        assert_eq!(all.len(), SUPPORTED.len());
        assert_eq!(cluster.len(), SUPPORTED.len() - SHARE_APIS.len());
        for api in SHARE_APIS {
            assert!(all.iter().any(|a| a.api_key == api as i16), "{api:?}");
            assert!(!cluster.iter().any(|a| a.api_key == api as i16), "{api:?}");
        }
    }
}
