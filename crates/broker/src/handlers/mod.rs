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

pub(crate) fn topic_name(name: &str) -> TopicName {
    TopicName(StrBytes::from_string(name.to_owned()))
}

pub(crate) fn str_bytes(s: impl Into<String>) -> StrBytes {
    StrBytes::from_string(s.into())
}
