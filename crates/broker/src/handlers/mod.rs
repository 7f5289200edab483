//! One module per Kafka API.

pub mod acls;
pub mod api_versions;
pub mod cluster;
pub mod configs;
pub mod consumer_group;
pub mod create_topics;
pub mod delete_records;
pub mod delete_topics;
pub mod describe_log_dirs;
pub mod describe_topic_partitions;
pub mod fetch;
pub mod groups;
pub mod init_producer_id;
pub mod list_offsets;
pub mod metadata;
pub mod offsets;
pub mod produce;
pub mod quotas;
pub mod share_group;

use futures::{FutureExt, future::BoxFuture};
use sluice_protocol::kafka_protocol::messages::{ResponseKind, TopicName};
use sluice_protocol::kafka_protocol::protocol::StrBytes;

use crate::cluster::ClusterError;
use crate::config::ConfigError;
use crate::topics::TopicError;
use crate::{Broker, errors};

/// Why an admin request (topics, partitions, configs) was refused for one resource;
/// `errors::admin_error_code` gives its Kafka code and `Display` its error message.
#[derive(Debug, thiserror::Error)]
pub enum AdminError {
    #[error("unknown topic '{0}'")]
    UnknownTopic(String),
    #[error("unknown topic id {0}")]
    UnknownTopicId(uuid::Uuid),
    #[error("replication factor {0} is not possible: this broker keeps one copy (use 1 or -1)")]
    ReplicationFactor(i16),
    #[error("manual replica assignment is not supported")]
    ReplicaAssignment,
    #[error(transparent)]
    Config(#[from] ConfigError),
    #[error("operation {op} (APPEND/SUBTRACT) does not apply to '{name}': it is not a list config")]
    NotAList { op: i8, name: String },
    #[error("config resource type {0} is not supported (topics are 2, brokers 4)")]
    DescribeResourceType(i8),
    #[error(
        "only topic configs (and group configs, with IncrementalAlterConfigs) can be altered; broker settings come from its config file, environment and flags"
    )]
    AlterNonTopic,
    #[error(transparent)]
    Topic(#[from] TopicError),
    #[error("the change is made on this broker but could not be made durable in storage: {0}")]
    NotDurable(#[source] crate::storage::StorageError),
}

/// The Kafka error code for a refusal of the cluster's metadata store (cluster mode). Beside
/// [`AdminError`], whose codes `errors.rs` maps, because every admin handler answers these too.
pub(crate) fn cluster_error_code(e: &ClusterError) -> i16 {
    use sluice_protocol::kafka_protocol::ResponseError;
    match e {
        ClusterError::TopicExists(_) => ResponseError::TopicAlreadyExists.code(),
        ClusterError::UnknownTopic(_) => ResponseError::UnknownTopicOrPartition.code(),
        ClusterError::InvalidPartitions(_) => ResponseError::InvalidPartitions.code(),
        // The store did not answer in time or failed: retriable, and the message names the
        // store. (KAFKA_STORAGE_ERROR would send an operator looking at this broker's disk.)
        ClusterError::Unavailable(_) => ResponseError::RequestTimedOut.code(),
    }
}

/// A metadata-changing response: the error code and message of each of its results.
pub(crate) trait Outcomes {
    fn outcomes(&mut self) -> Vec<(&mut i16, &mut Option<StrBytes>)>;
}

macro_rules! outcomes {
    ($($response:ty => $results:ident),*) => {$(impl Outcomes for $response {
        fn outcomes(&mut self) -> Vec<(&mut i16, &mut Option<StrBytes>)> {
            self.$results.iter_mut().map(|r| (&mut r.error_code, &mut r.error_message)).collect()
        }
    })*};
}

use sluice_protocol::kafka_protocol::messages as m;
outcomes!(m::CreateTopicsResponse => topics, m::DeleteTopicsResponse => responses,
    m::AlterConfigsResponse => responses, m::IncrementalAlterConfigsResponse => responses,
    m::CreatePartitionsResponse => results);

/// The future of a response.
pub(crate) type Answer = BoxFuture<'static, Option<ResponseKind>>;

/// Answers `response` of a request that changed metadata once the change is durable
/// (`Broker::sync_metadata`); if it cannot be made so, each of its successes becomes
/// [`AdminError::NotDurable`] (KAFKA_STORAGE_ERROR, retriable).
pub(crate) fn after_sync<R>(broker: &Broker, mut response: R, kind: fn(R) -> ResponseKind) -> Answer
where
    R: Outcomes + Send + 'static,
{
    let sync = broker.sync_metadata();
    async move {
        if let Err(e) = sync.await.map_err(AdminError::NotDurable) {
            tracing::error!(error = %e, "metadata change");
            for (code, message) in response.outcomes() {
                if *code == errors::NONE {
                    (*code, *message) =
                        (errors::admin_error_code(&e), Some(str_bytes(e.to_string())));
                }
            }
        }
        Some(kind(response))
    }
    .boxed()
}

/// Why a read request (Fetch, ListOffsets) was refused for one partition before storage was
/// asked; `errors::read_error_code` gives its Kafka code.
#[derive(Debug, Clone, Copy, thiserror::Error)]
pub enum ReadError {
    #[error("unknown topic or partition")]
    UnknownTopicOrPartition,
    #[error("isolation level {0} is not 0 (read uncommitted) or 1 (read committed)")]
    IsolationLevel(i8),
    #[error(
        "timestamp {0} is not an offset spec (-1 latest, -2 earliest, -3 max timestamp, -4 earliest local, -5 latest tiered) or a time (0 or more)"
    )]
    Timestamp(i64),
}

pub(crate) fn topic_name(name: &str) -> TopicName {
    TopicName(StrBytes::from_string(name.to_owned()))
}

pub(crate) fn str_bytes(s: impl Into<String>) -> StrBytes {
    StrBytes::from_string(s.into())
}
