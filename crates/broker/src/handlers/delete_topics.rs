//! DeleteTopics (by name, or by id from v6).
//!
//! Single broker: deleted on disk with the group offsets of the topic, answered once durable.
//! Cluster mode: deleted in the metadata store (which owns the data), the catalog reloaded
//! and applied (which drops the topic here and forgets its group offsets), then answered.

use std::sync::Arc;

use futures::FutureExt;
use sluice_protocol::kafka_protocol::messages::delete_topics_response::DeletableTopicResult;
use sluice_protocol::kafka_protocol::messages::{
    DeleteTopicsRequest, DeleteTopicsResponse, ResponseKind,
};

use super::{AdminError, Answer, after_sync, cluster_error_code, str_bytes, topic_name};
use crate::catalog::{self, CatalogSync};
use crate::cluster::ClusterMeta;
use crate::{Broker, errors};

pub fn handle(broker: &Arc<Broker>, req: DeleteTopicsRequest, version: i16) -> Answer {
    // v0-5 list names; v6+ list (name or id) states.
    let targets: Vec<(Option<String>, uuid::Uuid)> = if version >= 6 {
        req.topics
            .into_iter()
            .map(|t| (t.name.map(|n| n.0.to_string()), t.topic_id))
            .collect()
    } else {
        req.topic_names
            .into_iter()
            .map(|n| (Some(n.0.to_string()), uuid::Uuid::nil()))
            .collect()
    };
    // Each target by name, or its answer when its id is unknown.
    let named: Vec<Result<(String, DeletableTopicResult), DeletableTopicResult>> = targets
        .into_iter()
        .map(|(name, id)| {
            let name = name.or_else(|| {
                broker
                    .topics()
                    .all()
                    .into_iter()
                    .find(|t| t.id == id)
                    .map(|t| t.name.clone())
            });
            let Some(name) = name else {
                return Err(DeletableTopicResult::default()
                    .with_topic_id(id)
                    .with_error_code(errors::admin_error_code(&AdminError::UnknownTopicId(id))));
            };
            let id = broker.topics().get(&name).map_or(id, |t| t.id);
            let result = DeletableTopicResult::default()
                .with_name(Some(topic_name(&name)))
                .with_topic_id(id);
            Ok((name, result))
        })
        .collect();
    if let (Some(meta), Some(sync)) = (broker.cluster(), broker.catalog_sync()) {
        return delete_in_cluster(Arc::clone(meta), Arc::clone(sync), named);
    }
    let responses = named
        .into_iter()
        .map(|target| {
            let (name, result) = match target {
                Ok(target) => target,
                Err(answer) => return answer,
            };
            match broker.topics().delete(&name) {
                Ok(()) => {
                    broker.groups().topic_deleted(&name);
                    result
                }
                Err(e) => result
                    .with_error_code(errors::topic_error_code(&e))
                    .with_error_message(Some(str_bytes(e.to_string()))),
            }
        })
        .collect();
    let response = DeleteTopicsResponse::default().with_responses(responses);
    after_sync(broker, response, ResponseKind::DeleteTopics)
}

/// Cluster mode: every named topic deleted in the store at once, one reload of the catalog.
fn delete_in_cluster(
    meta: Arc<dyn ClusterMeta>,
    sync: Arc<CatalogSync>,
    named: Vec<Result<(String, DeletableTopicResult), DeletableTopicResult>>,
) -> Answer {
    async move {
        let calls = named.iter().map(|target| {
            let (name, _) = target.as_ref().ok()?;
            Some(meta.delete_topic(name.clone()))
        });
        let calls = futures::future::join_all(calls.map(futures::future::OptionFuture::from));
        let outcomes = calls.await;
        let reload = if outcomes.iter().any(|o| matches!(o, Some(Ok(())))) {
            catalog::refreshed(sync.refresh().await).map(|_| ())
        } else {
            Ok(())
        };
        let responses = named
            .into_iter()
            .zip(outcomes)
            .map(|(target, outcome)| {
                let (name, result) = match target {
                    Ok(target) => target,
                    Err(answer) => return answer,
                };
                // (A named topic always has an outcome.)
                match outcome.map_or(Ok(()), |o| o.and_then(|()| reload.clone())) {
                    Ok(()) => result,
                    Err(e) => {
                        tracing::info!(topic = %name, error = %e, "delete topic refused");
                        result
                            .with_error_code(cluster_error_code(&e))
                            .with_error_message(Some(str_bytes(e.to_string())))
                    }
                }
            })
            .collect();
        let response = DeleteTopicsResponse::default().with_responses(responses);
        Some(ResponseKind::DeleteTopics(response))
    }
    .boxed()
}
