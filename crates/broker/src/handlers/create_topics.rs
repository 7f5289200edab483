//! CreateTopics.

use sluice_protocol::kafka_protocol::messages::create_topics_response::{
    CreatableTopicConfigs, CreatableTopicResult,
};
use sluice_protocol::kafka_protocol::messages::{
    CreateTopicsRequest, CreateTopicsResponse, ResponseKind,
};

use super::{AdminError, Answer, after_sync, str_bytes};
use crate::{Broker, TopicConfig, errors};

pub fn handle(broker: &Broker, req: CreateTopicsRequest, version: i16) -> Answer {
    let cfg = broker.config();
    let results = req
        .topics
        .into_iter()
        .map(|t| {
            let name = t.name.0.to_string();
            let result = CreatableTopicResult::default().with_name(t.name.clone());
            let outcome = (|| {
                if t.replication_factor != -1 && t.replication_factor != 1 {
                    return Err(AdminError::ReplicationFactor(t.replication_factor));
                }
                if !t.assignments.is_empty() {
                    return Err(AdminError::ReplicaAssignment);
                }
                let mut configs = TopicConfig::default();
                for c in &t.configs {
                    configs.set(&c.name, c.value.as_deref())?;
                }
                let partitions = if t.num_partitions == -1 {
                    cfg.default_partitions
                } else {
                    t.num_partitions
                };
                if req.validate_only {
                    broker.topics().validate_create(
                        &name,
                        partitions,
                        cfg.partitions_per_topic_max,
                    )?;
                    return Ok((None, partitions, configs));
                }
                let topic = broker.topics().create(
                    &name,
                    partitions,
                    configs.clone(),
                    cfg,
                    broker.committer(),
                    broker.clock(),
                )?;
                Ok((Some(topic.id), partitions, configs))
            })();
            match outcome {
                Ok((id, partitions, configs)) => {
                    let mut result = result
                        .with_num_partitions(partitions)
                        .with_replication_factor(1);
                    if let Some(id) = id {
                        result = result.with_topic_id(id);
                    }
                    if version >= 5 {
                        result = result.with_configs(Some(
                            configs
                                .describe(cfg)
                                .into_iter()
                                .map(|(name, value, is_default)| {
                                    CreatableTopicConfigs::default()
                                        .with_name(str_bytes(name))
                                        .with_value(Some(str_bytes(value)))
                                        .with_config_source(if is_default { 5 } else { 1 })
                                })
                                .collect(),
                        ));
                    }
                    result
                }
                Err(e) => {
                    tracing::info!(topic = %name, error = %e, "create topic refused");
                    result
                        .with_error_code(errors::admin_error_code(&e))
                        .with_error_message(Some(str_bytes(e.to_string())))
                        .with_num_partitions(-1)
                        .with_replication_factor(-1)
                }
            }
        })
        .collect();
    let response = CreateTopicsResponse::default().with_topics(results);
    after_sync(broker, response, ResponseKind::CreateTopics)
}
