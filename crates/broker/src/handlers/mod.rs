//! One module per Kafka API.

pub mod api_versions;
pub mod cluster;
pub mod configs;
pub mod consumer_group;
pub mod create_topics;
pub mod delete_topics;
pub mod fetch;
pub mod groups;
pub mod init_producer_id;
pub mod list_offsets;
pub mod metadata;
pub mod offsets;
pub mod produce;

use sluice_protocol::kafka_protocol::messages::TopicName;
use sluice_protocol::kafka_protocol::protocol::StrBytes;

use crate::config::ConfigError;
use crate::topics::TopicError;

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
        "only topic configs can be altered; broker settings come from its config file, environment and flags"
    )]
    AlterNonTopic,
    #[error(transparent)]
    Topic(#[from] TopicError),
}

/// Why a read request (Fetch, ListOffsets) was refused for one partition before storage was
/// asked; `errors::read_error_code` gives its Kafka code.
#[derive(Debug, Clone, Copy, thiserror::Error)]
pub enum ReadError {
    #[error("unknown topic or partition")]
    UnknownTopicOrPartition,
    #[error("isolation level {0} is not 0 (read uncommitted) or 1 (read committed)")]
    IsolationLevel(i8),
    #[error("the max-timestamp offset spec (-3) is not supported")]
    MaxTimestamp,
    #[error("timestamp {0} is not an offset spec (-1 latest, -2 earliest) or a time (0 or more)")]
    Timestamp(i64),
}

pub(crate) fn topic_name(name: &str) -> TopicName {
    TopicName(StrBytes::from_string(name.to_owned()))
}

pub(crate) fn str_bytes(s: impl Into<String>) -> StrBytes {
    StrBytes::from_string(s.into())
}
