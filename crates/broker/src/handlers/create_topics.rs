//! CreateTopics.
//!
//! Every topic is checked here the same way in every mode. Then, single broker: created on
//! disk, answered once durable (`after_sync`). Cluster mode: created in the metadata store
//! (all of the request's at once), the catalog reloaded and applied, then answered, so each
//! topic reported created is open on this broker.

use std::sync::Arc;

use futures::FutureExt;
use sluice_protocol::kafka_protocol::messages::create_topics_request::CreatableTopic;
use sluice_protocol::kafka_protocol::messages::create_topics_response::{
    CreatableTopicConfigs, CreatableTopicResult,
};
use sluice_protocol::kafka_protocol::messages::{
    CreateTopicsRequest, CreateTopicsResponse, ResponseKind,
};
use uuid::Uuid;

use super::{AdminError, Answer, after_sync, str_bytes};
use crate::catalog::{self, CatalogSync, ChangeError};
use crate::cluster::{ClusterError, ClusterMeta};
use crate::{Broker, BrokerConfig, TopicConfig, errors};

/// A topic of the request that passed the checks.
struct Checked {
    name: String,
    partitions: i32,
    configs: TopicConfig,
}

pub fn handle(broker: &Arc<Broker>, req: CreateTopicsRequest, version: i16) -> Answer {
    let checked: Vec<_> = req
        .topics
        .into_iter()
        .map(|t| {
            let result = CreatableTopicResult::default().with_name(t.name.clone());
            (result, check(broker, t))
        })
        .collect();
    if let (Some(meta), Some(sync)) = (broker.cluster(), broker.catalog_sync()) {
        let cluster = (Arc::clone(meta), Arc::clone(sync));
        return create_in_cluster(broker, cluster, checked, req.validate_only, version);
    }
    let cfg = broker.config();
    let results = checked
        .into_iter()
        .map(|(result, checked)| {
            let outcome = checked.and_then(|c| {
                if req.validate_only {
                    let max = cfg.partitions_per_topic_max;
                    broker
                        .topics()
                        .validate_create(&c.name, c.partitions, max)?;
                    return Ok((None, c));
                }
                let topic = broker.topics().create(
                    &c.name,
                    c.partitions,
                    c.configs.clone(),
                    cfg,
                    broker.committer(),
                    broker.clock(),
                )?;
                Ok((Some(topic.id), c))
            });
            match outcome {
                Ok((id, c)) => created(result, id, &c, version, cfg),
                Err(e) => refused(result, errors::admin_error_code(&e), e.to_string()),
            }
        })
        .collect();
    let response = CreateTopicsResponse::default().with_topics(results);
    after_sync(broker, response, ResponseKind::CreateTopics)
}

/// What every mode checks before it creates anything.
fn check(broker: &Broker, t: CreatableTopic) -> Result<Checked, AdminError> {
    let cfg = broker.config();
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
    configs.check_storage(broker.topics().storage_label().is_none())?;
    let partitions = if t.num_partitions == -1 {
        cfg.default_partitions
    } else {
        t.num_partitions
    };
    Ok(Checked {
        name: t.name.0.to_string(),
        partitions,
        configs,
    })
}

/// Cluster mode: the checks on this broker's copy of the catalog, then every remaining topic
/// to the store at once, one reload of the catalog, and the answer.
fn create_in_cluster(
    broker: &Arc<Broker>,
    (meta, sync): (Arc<dyn ClusterMeta>, Arc<CatalogSync>),
    checked: Vec<(CreatableTopicResult, Result<Checked, AdminError>)>,
    validate_only: bool,
    version: i16,
) -> Answer {
    let broker = Arc::clone(broker);
    async move {
        let cfg = broker.config();
        let max = cfg.partitions_per_topic_max;
        let checked: Vec<_> = checked
            .into_iter()
            .map(|(result, c)| {
                let c = c.and_then(|c| {
                    broker
                        .topics()
                        .validate_create(&c.name, c.partitions, max)?;
                    Ok(c)
                });
                (result, c)
            })
            .collect();
        if validate_only {
            let results = checked.into_iter().map(|(result, c)| match c {
                Ok(c) => created(result, None, &c, version, cfg),
                Err(e) => refused(result, errors::admin_error_code(&e), e.to_string()),
            });
            let response = CreateTopicsResponse::default().with_topics(results.collect());
            return Some(ResponseKind::CreateTopics(response));
        }
        let calls = checked.iter().map(|(_, c)| {
            let c = c.as_ref().ok()?;
            let id = Uuid::new_v4();
            let configs = c.configs.to_catalog();
            let call = meta.create_topic(id, c.name.clone(), c.partitions, configs);
            Some(call.map(move |done| done.map(|()| id)))
        });
        let calls = futures::future::join_all(calls.map(futures::future::OptionFuture::from));
        let outcomes = calls.await;
        let mut applied = if outcomes.iter().any(|o| matches!(o, Some(Ok(_)))) {
            Some(catalog::refreshed(sync.refresh().await))
        } else {
            None
        };
        let results = checked
            .into_iter()
            .zip(outcomes)
            .map(|((result, c), outcome)| {
                let c = match c {
                    Ok(c) => c,
                    Err(e) => return refused(result, errors::admin_error_code(&e), e.to_string()),
                };
                // (A checked topic always has an outcome, and a success always a reload.)
                let not_sent = || ClusterError::Unavailable("not sent to the store".into());
                let opened = match outcome.unwrap_or_else(|| Err(not_sent())) {
                    Err(e) => Err(ChangeError::Cluster(e)),
                    Ok(id) => match applied.as_mut() {
                        Some(Ok(applied)) => catalog::opened(broker.topics(), &c.name, id, applied),
                        Some(Err(e)) => Err(ChangeError::Cluster(e.clone())),
                        None => Err(ChangeError::Cluster(not_sent())),
                    },
                };
                match opened {
                    Ok(topic) => created(result, Some(topic.id), &c, version, cfg),
                    Err(e) => refused(result, e.code(), e.to_string()),
                }
            })
            .collect();
        let response = CreateTopicsResponse::default().with_topics(results);
        Some(ResponseKind::CreateTopics(response))
    }
    .boxed()
}

/// The answer for a topic created (or, without an id, one that would be).
fn created(
    result: CreatableTopicResult,
    id: Option<Uuid>,
    c: &Checked,
    version: i16,
    cfg: &BrokerConfig,
) -> CreatableTopicResult {
    let mut result = result
        .with_num_partitions(c.partitions)
        .with_replication_factor(1);
    if let Some(id) = id {
        result = result.with_topic_id(id);
    }
    if version >= 5 {
        result = result.with_configs(Some(
            c.configs
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

fn refused(result: CreatableTopicResult, code: i16, message: String) -> CreatableTopicResult {
    tracing::info!(topic = %result.name.0, error = %message, "create topic refused");
    result
        .with_error_code(code)
        .with_error_message(Some(str_bytes(message)))
        .with_num_partitions(-1)
        .with_replication_factor(-1)
}
