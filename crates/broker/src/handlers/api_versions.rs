//! ApiVersions: what this broker implements (from `sluice_protocol::versions::SUPPORTED`), and
//! from v3 on the feature levels it runs at ([`FEATURES`]).

use sluice_protocol::kafka_protocol::messages::ApiKey;
use sluice_protocol::kafka_protocol::messages::ApiVersionsResponse;
use sluice_protocol::kafka_protocol::messages::api_versions_response::{
    ApiVersion, FinalizedFeatureKey, SupportedFeatureKey,
};
use sluice_protocol::kafka_protocol::protocol::StrBytes;
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

/// A Kafka feature (KIP-584) and the one level Sluice runs it at.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Feature {
    pub name: &'static str,
    pub level: i16,
}

/// The features ApiVersions v3+ reports as finalized, each at a level that is true of
/// Sluice; docs/kafka-compat.md says why each is there and why the others are not.
///
/// - `group.version` 1: the KIP-848 consumer group protocol (ConsumerGroupHeartbeat) is on.
/// - `share.version` 1: share groups (KIP-932) are on; not in cluster mode, which does not
///   serve them yet ([`SHARE_APIS`]).
///
/// Left out, as Kafka leaves out a feature at level 0: `transaction.version` (Sluice has no
/// transactions; the Java producer reads level 2 as "use transactions v2"),
/// `streams.version` (no KIP-1071 streams groups), and `metadata.version`, `kraft.version` and
/// `eligible.leader.replicas.version`, which describe a KRaft metadata log and replication
/// that Sluice does not have. No client reads any of these to choose what it sends, except
/// the Java producer's `transaction.version`.
///
/// Each is supported at its level only (min = max = level): Sluice cannot run with it off.
/// Kafka leaves supported ranges that start at 0 out of its answer to ApiVersions v3 (older
/// clients fail to parse a 0 minimum, KAFKA-17011/KAFKA-17492); from 1 they suit every
/// version.
pub const FEATURES: [Feature; 2] = [
    Feature {
        name: "group.version",
        level: 1,
    },
    Feature {
        name: "share.version",
        level: 1,
    },
];

/// The epoch of [`FEATURES`]. Clients keep the finalized features of the highest epoch any
/// broker answered (the Java client ignores a lower or equal one), so raise it whenever the
/// list or a level changes, or a client that met an older broker keeps the old list.
pub const FINALIZED_FEATURES_EPOCH: i64 = 1;

/// What this broker serves: everything in `SUPPORTED`, less share groups in cluster mode
/// (clients then report share groups as unsupported, as with a Kafka that has them off), and
/// the features it runs at, less `share.version` in cluster mode. The features are encoded
/// from v3 on (tagged fields); older versions leave them out.
pub fn listed(cluster: bool) -> ApiVersionsResponse {
    let features: Vec<Feature> = FEATURES
        .into_iter()
        .filter(|f| !(cluster && f.name == "share.version"))
        .collect();
    ApiVersionsResponse::default()
        .with_api_keys(
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
        .with_supported_features(
            features
                .iter()
                .map(|f| {
                    SupportedFeatureKey::default()
                        .with_name(StrBytes::from_static_str(f.name))
                        .with_min_version(f.level)
                        .with_max_version(f.level)
                })
                .collect(),
        )
        .with_finalized_features_epoch(FINALIZED_FEATURES_EPOCH)
        .with_finalized_features(
            features
                .iter()
                .map(|f| {
                    FinalizedFeatureKey::default()
                        .with_name(StrBytes::from_static_str(f.name))
                        .with_min_version_level(f.level)
                        .with_max_version_level(f.level)
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

    /// The feature fields as a client decodes them from the bytes of each version: Kafka
    /// 4.3.1 finalizes `group.version` and `share.version` at 1 as well (and more, see
    /// [`FEATURES`]); nothing claims transactions.
    #[test]
    fn features_are_what_sluice_runs_and_reach_v3_clients() {
        use sluice_protocol::kafka_protocol::protocol::{Decodable, Encodable};
        let finalized = |r: &ApiVersionsResponse| -> Vec<(String, i16, i16)> {
            r.finalized_features
                .iter()
                .map(|f| (f.name.to_string(), f.min_version_level, f.max_version_level))
                .collect()
        };
        let supported = |r: &ApiVersionsResponse| -> Vec<(String, i16, i16)> {
            r.supported_features
                .iter()
                .map(|f| (f.name.to_string(), f.min_version, f.max_version))
                .collect()
        };
        let both = |name: &str| (name.to_owned(), 1, 1);
        for version in 0..=4 {
            let mut bytes = bytes::BytesMut::new();
            listed(false).encode(&mut bytes, version).unwrap();
            let back = ApiVersionsResponse::decode(&mut bytes.freeze(), version).unwrap();
            if version < 3 {
                assert!(back.finalized_features.is_empty(), "v{version}");
                continue;
            }
            assert_eq!(back.finalized_features_epoch, FINALIZED_FEATURES_EPOCH);
            assert_eq!(
                finalized(&back),
                [both("group.version"), both("share.version")],
                "v{version}"
            );
            assert_eq!(
                supported(&back),
                [both("group.version"), both("share.version")],
                "v{version}: a minimum of 0 would break clients older than v4"
            );
        }
        let cluster = listed(true);
        assert_eq!(finalized(&cluster), [both("group.version")]);
        assert_eq!(supported(&cluster), [both("group.version")]);
        for f in listed(false).finalized_features {
            assert_ne!(f.name.as_str(), "transaction.version");
        }
        // Every listed feature's API is served: KIP-848 heartbeats, share-group heartbeats.
        assert!(
            listed(false)
                .api_keys
                .iter()
                .any(|a| a.api_key == ApiKey::ConsumerGroupHeartbeat as i16)
        );
    }
}
