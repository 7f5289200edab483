//! What share consumers need to know of the cluster, asked over the wire: the API versions,
//! the group's coordinator (FindCoordinator), where each partition's leader is and which topic
//! id is which (Metadata), and the group's configs (IncrementalAlterConfigs on a GROUP).

use std::collections::{BTreeMap, HashMap};
use std::time::Duration;

use kafka_protocol::ResponseError;
use kafka_protocol::messages::api_versions_request::ApiVersionsRequest;
use kafka_protocol::messages::find_coordinator_request::FindCoordinatorRequest;
use kafka_protocol::messages::incremental_alter_configs_request::{
    AlterConfigsResource, AlterableConfig, IncrementalAlterConfigsRequest,
};
use kafka_protocol::messages::metadata_request::{MetadataRequest, MetadataRequestTopic};
use kafka_protocol::messages::{ApiKey, TopicName};
use kafka_protocol::protocol::StrBytes;
use uuid::Uuid;

use super::conn::{Conn, ConnError};
use super::ledger::Tp;

/// Versions this client speaks. The share APIs are at v1, except ShareFetch: v2 (Kafka 4.2,
/// KIP-1206's acquire mode) when the broker serves it ([`share_fetch_version`]), so the
/// workload's `acquire_mode` reaches the broker.
pub const API_VERSIONS_VERSION: i16 = 3;
pub const FIND_COORDINATOR_VERSION: i16 = 4;
pub const METADATA_VERSION: i16 = 12;
pub const INCREMENTAL_ALTER_CONFIGS_VERSION: i16 = 1;
pub const SHARE_VERSION: i16 = 1;
/// The highest ShareFetch version this client speaks.
pub const SHARE_FETCH_VERSION_MAX: i16 = 2;

/// The ShareFetch version to use with a broker serving `served` (`None`: not listed).
pub fn share_fetch_version(served: Option<(i16, i16)>) -> i16 {
    match served {
        Some((min, max)) if (min..=max).contains(&SHARE_FETCH_VERSION_MAX) => {
            SHARE_FETCH_VERSION_MAX
        }
        _ => SHARE_VERSION,
    }
}

/// How long an admin call (not a fetch) may take.
pub const CALL_TIMEOUT: Duration = Duration::from_secs(30);
/// IncrementalAlterConfigs resource type of a group.
const RESOURCE_GROUP: i8 = 32;
/// FindCoordinator key type of a group.
const KEY_TYPE_GROUP: i8 = 0;
/// IncrementalAlterConfigs SET.
const OP_SET: i8 = 0;

/// An error of a cluster call, as text for the report.
pub type CallError = String;

fn conn_error(e: ConnError) -> CallError {
    e.to_string()
}

fn code_error(what: &str, code: i16, message: Option<&StrBytes>) -> CallError {
    let name = ResponseError::try_from_code(code).map_or_else(String::new, |e| e.to_string());
    match message {
        Some(m) if !m.is_empty() => format!("{what}: {name} ({code}): {}", m.as_str()),
        _ => format!("{what}: {name} ({code})"),
    }
}

/// The version ranges the broker serves, by API key.
pub async fn api_versions(conn: &Conn) -> Result<HashMap<i16, (i16, i16)>, CallError> {
    let request = ApiVersionsRequest::default()
        .with_client_software_name(StrBytes::from_static_str("sluice-bench"))
        .with_client_software_version(StrBytes::from_static_str(env!("CARGO_PKG_VERSION")));
    let response = conn
        .call(API_VERSIONS_VERSION, &request, CALL_TIMEOUT)
        .await
        .map_err(conn_error)?;
    if response.error_code != 0 {
        return Err(code_error("ApiVersions", response.error_code, None));
    }
    Ok(response
        .api_keys
        .iter()
        .map(|k| (k.api_key, (k.min_version, k.max_version)))
        .collect())
}

/// Refuses a broker that does not serve the share APIs at the versions this client speaks.
pub fn check_share_support(versions: &HashMap<i16, (i16, i16)>) -> Result<(), CallError> {
    for api in [
        ApiKey::ShareGroupHeartbeat,
        ApiKey::ShareFetch,
        ApiKey::ShareAcknowledge,
    ] {
        match versions.get(&(api as i16)) {
            Some(&(min, max)) if (min..=max).contains(&SHARE_VERSION) => {}
            Some(&(min, max)) => {
                return Err(format!(
                    "the broker serves {api:?} v{min}-v{max}, and share consumers speak v{SHARE_VERSION}"
                ));
            }
            None => {
                return Err(format!(
                    "the broker does not serve {api:?} (no share groups; on Kafka, share groups \
                     need share.version=1)"
                ));
            }
        }
    }
    Ok(())
}

/// The coordinator of `group`: `host:port`.
pub async fn find_coordinator(conn: &Conn, group: &str) -> Result<String, CallError> {
    let request = FindCoordinatorRequest::default()
        .with_key_type(KEY_TYPE_GROUP)
        .with_coordinator_keys(vec![StrBytes::from_string(group.to_owned())]);
    let response = conn
        .call(FIND_COORDINATOR_VERSION, &request, CALL_TIMEOUT)
        .await
        .map_err(conn_error)?;
    let c = response
        .coordinators
        .first()
        .ok_or_else(|| "FindCoordinator: no coordinator in the answer".to_owned())?;
    if c.error_code != 0 {
        return Err(code_error(
            "FindCoordinator",
            c.error_code,
            c.error_message.as_ref(),
        ));
    }
    Ok(format!("{}:{}", c.host.as_str(), c.port))
}

/// Where the partitions of some topics are led, and their topic ids.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Metadata {
    /// `host:port` by node id.
    pub brokers: HashMap<i32, String>,
    /// The leader's node id of each partition.
    pub leaders: HashMap<Tp, i32>,
    pub topic_ids: BTreeMap<String, Uuid>,
}

impl Metadata {
    /// The leader's address of `tp`, when known.
    pub fn leader(&self, tp: Tp) -> Option<&str> {
        let node = self.leaders.get(&tp)?;
        self.brokers.get(node).map(String::as_str)
    }
}

/// Metadata of `topics`; an error if one of them is missing or has a partition without leader.
pub async fn metadata(conn: &Conn, topics: &[String]) -> Result<Metadata, CallError> {
    let request = MetadataRequest::default().with_topics(Some(
        topics
            .iter()
            .map(|t| {
                MetadataRequestTopic::default()
                    .with_name(Some(TopicName(StrBytes::from_string(t.clone()))))
            })
            .collect(),
    ));
    let response = conn
        .call(METADATA_VERSION, &request, CALL_TIMEOUT)
        .await
        .map_err(conn_error)?;
    let mut m = Metadata {
        brokers: response
            .brokers
            .iter()
            .map(|b| (b.node_id.0, format!("{}:{}", b.host.as_str(), b.port)))
            .collect(),
        ..Metadata::default()
    };
    for t in &response.topics {
        let name = t.name.as_ref().map_or("", |n| n.0.as_str());
        if t.error_code != 0 {
            return Err(code_error(
                &format!("Metadata of {name}"),
                t.error_code,
                None,
            ));
        }
        m.topic_ids.insert(name.to_owned(), t.topic_id);
        for p in &t.partitions {
            if p.error_code != 0 || p.leader_id.0 < 0 {
                return Err(format!(
                    "Metadata of {name}: partition {} has no leader (error {})",
                    p.partition_index, p.error_code
                ));
            }
            m.leaders
                .insert((t.topic_id, p.partition_index), p.leader_id.0);
        }
    }
    for t in topics {
        if !m.topic_ids.contains_key(t) {
            return Err(format!("Metadata: topic {t} is missing"));
        }
    }
    Ok(m)
}

/// Sets `configs` on the group `group` (IncrementalAlterConfigs SET, resource type GROUP).
pub async fn set_group_configs(
    conn: &Conn,
    group: &str,
    configs: &BTreeMap<String, String>,
) -> Result<(), CallError> {
    if configs.is_empty() {
        return Ok(());
    }
    let resource = AlterConfigsResource::default()
        .with_resource_type(RESOURCE_GROUP)
        .with_resource_name(StrBytes::from_string(group.to_owned()))
        .with_configs(
            configs
                .iter()
                .map(|(k, v)| {
                    AlterableConfig::default()
                        .with_name(StrBytes::from_string(k.clone()))
                        .with_config_operation(OP_SET)
                        .with_value(Some(StrBytes::from_string(v.clone())))
                })
                .collect(),
        );
    let request = IncrementalAlterConfigsRequest::default().with_resources(vec![resource]);
    let response = conn
        .call(INCREMENTAL_ALTER_CONFIGS_VERSION, &request, CALL_TIMEOUT)
        .await
        .map_err(conn_error)?;
    for r in &response.responses {
        if r.error_code != 0 {
            return Err(code_error(
                &format!("setting group configs {configs:?} on {group}"),
                r.error_code,
                r.error_message.as_ref(),
            ));
        }
    }
    Ok(())
}

/// The bootstrap addresses of a `HOST:PORT[,HOST:PORT...]` list.
pub fn bootstrap_addresses(bootstrap: &str) -> Vec<String> {
    bootstrap
        .split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(|s| s.strip_prefix("PLAINTEXT://").unwrap_or(s).to_owned())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn share_support_needs_every_share_api_at_v1() {
        let mut versions: HashMap<i16, (i16, i16)> = HashMap::new();
        assert!(check_share_support(&versions).is_err());
        for api in [
            ApiKey::ShareGroupHeartbeat,
            ApiKey::ShareFetch,
            ApiKey::ShareAcknowledge,
        ] {
            versions.insert(api as i16, (1, 2));
        }
        assert!(check_share_support(&versions).is_ok());
        versions.insert(ApiKey::ShareFetch as i16, (2, 2));
        let message = check_share_support(&versions).unwrap_err();
        assert!(message.contains("ShareFetch v2-v2"), "{message}");
    }

    #[test]
    fn bootstrap_lists_split_on_commas() {
        assert_eq!(
            bootstrap_addresses(" 127.0.0.1:1, PLAINTEXT://h:2,,"),
            vec!["127.0.0.1:1".to_owned(), "h:2".to_owned()]
        );
    }
}
