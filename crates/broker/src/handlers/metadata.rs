//! Metadata: the broker, and the topics asked for (creating unknown ones when allowed).

use std::sync::Arc;

use sluice_protocol::kafka_protocol::messages::metadata_response::{
    MetadataResponseBroker, MetadataResponsePartition, MetadataResponseTopic,
};
use sluice_protocol::kafka_protocol::messages::{BrokerId, MetadataRequest, MetadataResponse};

use super::{AdminError, str_bytes, topic_name};
use crate::topics::{Topic, TopicError};
use crate::{Broker, TopicConfig, errors};

pub fn handle(broker: &Broker, req: MetadataRequest, version: i16) -> MetadataResponse {
    let cfg = broker.config();
    let node = BrokerId(cfg.node_id);
    let topics = match req.topics {
        None => broker
            .topics()
            .all()
            .iter()
            .map(|t| describe(t, node))
            .collect(),
        Some(requested) => requested
            .into_iter()
            .map(|t| {
                let Some(name) = t.name else {
                    // By id (v10+ clients that know ids): look it up.
                    return match broker
                        .topics()
                        .all()
                        .into_iter()
                        .find(|x| x.id == t.topic_id)
                    {
                        Some(topic) => describe(&topic, node),
                        None => MetadataResponseTopic::default()
                            .with_topic_id(t.topic_id)
                            .with_error_code(errors::admin_error_code(
                                &AdminError::UnknownTopicId(t.topic_id),
                            )),
                    };
                };
                let allow_create = version < 4 || req.allow_auto_topic_creation;
                match lookup_or_create(broker, &name.0, allow_create) {
                    Ok(topic) => describe(&topic, node),
                    Err(e) => MetadataResponseTopic::default()
                        .with_name(Some(name))
                        .with_error_code(errors::topic_error_code(&e)),
                }
            })
            .collect(),
    };
    MetadataResponse::default()
        .with_brokers(vec![
            MetadataResponseBroker::default()
                .with_node_id(node)
                .with_host(str_bytes(cfg.advertised_host.clone()))
                .with_port(cfg.advertised_port),
        ])
        .with_cluster_id(Some(str_bytes(cfg.cluster_id.clone())))
        .with_controller_id(node)
        .with_topics(topics)
}

fn lookup_or_create(
    broker: &Broker,
    name: &str,
    allow_create: bool,
) -> Result<Arc<Topic>, TopicError> {
    if let Some(topic) = broker.topics().get(name) {
        return Ok(topic);
    }
    crate::topics::validate_topic_name(name)?;
    if !(allow_create && broker.config().auto_create_topics) {
        return Err(TopicError::Unknown(name.to_owned()));
    }
    match broker.topics().create(
        name,
        broker.config().default_partitions,
        TopicConfig::default(),
        broker.config(),
        broker.committer(),
        broker.clock(),
    ) {
        // Another request created it meanwhile.
        Err(TopicError::AlreadyExists(_)) => broker
            .topics()
            .get(name)
            .ok_or_else(|| TopicError::Unknown(name.to_owned())),
        other => other,
    }
}

pub(crate) fn describe(topic: &Topic, node: BrokerId) -> MetadataResponseTopic {
    MetadataResponseTopic::default()
        .with_name(Some(topic_name(&topic.name)))
        .with_topic_id(topic.id)
        .with_partitions(
            (0..topic.partition_count())
                .map(|p| {
                    MetadataResponsePartition::default()
                        .with_partition_index(p)
                        .with_leader_id(node)
                        .with_leader_epoch(0)
                        .with_replica_nodes(vec![node])
                        .with_isr_nodes(vec![node])
                })
                .collect(),
        )
}
