//! Topic admin routes: list, create, describe, delete.
//!
//! - `GET /topics`: the topics the caller has any grant on, sorted by name;
//! - `POST /topics`: creates a topic (name, partitions, configs) and answers 201 with its
//!   description once it exists on disk;
//! - `GET /topics/{topic}`: id, partitions with their log start offset and high watermark, and
//!   every implemented topic config with its effective value;
//! - `DELETE /topics/{topic}`: removes the topic, its data and the group offsets committed for
//!   it; 204.
//!
//! Creates and deletes go through [`Broker::create_topic`] / [`Broker::delete_topic`], the same
//! checks and the same on-disk steps as Kafka's CreateTopics/DeleteTopics. Both rename and fsync
//! directories, so they run on the blocking pool, never on a request's async task. Config values
//! are checked by [`TopicConfig::set`], the same function CreateTopics and
//! IncrementalAlterConfigs use, so both paths accept exactly the same values.
//! In object-storage mode both answer only once the change is durable in the bucket
//! (`Broker::sync_metadata`); if it cannot be made so, 503 with the reason (retry).
//! In cluster mode both go to the shared metadata store (`Broker::create_topic_in_cluster`,
//! `Broker::delete_topic_in_cluster`) and answer once this broker's copy of the catalog shows
//! the change; a store that does not answer is a 503 (retry).

use std::collections::BTreeMap;
use std::sync::Arc;

use axum::Json;
use axum::body::Bytes;
use axum::extract::rejection::{BytesRejection, PathRejection};
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde::{Deserialize, Serialize};
use sluice_broker::catalog::ChangeError;
use sluice_broker::cluster::ClusterError;
use sluice_broker::topics::validate_topic_name;
use sluice_broker::{Broker, Topic, TopicConfig, TopicError};
use sluice_security::AclOperation;

use crate::auth::{Access, Principal};
use crate::error::{body_error, parse_json};
use crate::{ApiError, AppState};

/// `POST /topics` body. Unknown fields are refused, so a misspelt `partitons` is a 400 rather
/// than a topic with the default partition count.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct CreateTopic {
    name: String,
    /// Absent: the broker's default partition count. `i64` so that an out-of-range count gets
    /// the range in the message, not a JSON type error.
    partitions: Option<i64>,
    /// Topic config overrides; values are JSON strings or numbers.
    #[serde(default)]
    configs: BTreeMap<String, serde_json::Value>,
}

#[derive(Debug, Serialize)]
pub struct TopicList {
    topics: Vec<TopicSummary>,
}

#[derive(Debug, Serialize)]
struct TopicSummary {
    name: String,
    partitions: i32,
}

/// `GET /topics/{topic}` and the answer to `POST /topics`.
#[derive(Debug, Serialize)]
pub struct TopicDescription {
    name: String,
    id: String,
    partitions: Vec<PartitionDescription>,
    /// Every implemented topic config with its effective value (override or default).
    configs: BTreeMap<&'static str, String>,
}

#[derive(Debug, Serialize)]
struct PartitionDescription {
    partition: i32,
    log_start_offset: i64,
    high_watermark: i64,
}

/// `GET /topics`: topics the caller may read, write or administer.
pub async fn list(
    State(state): State<Arc<AppState>>,
    principal: Principal,
) -> Result<Json<TopicList>, ApiError> {
    let topics = state
        .broker
        .topics()
        .all()
        .into_iter()
        .filter(|t| principal.allows_any(&t.name))
        .map(|t| TopicSummary {
            name: t.name.clone(),
            partitions: t.partition_count(),
        })
        .collect();
    Ok(Json(TopicList { topics }))
}

/// `POST /topics`: 201 with the new topic's description.
pub async fn create(
    State(state): State<Arc<AppState>>,
    principal: Principal,
    body: Result<Bytes, BytesRejection>,
) -> Result<Response, ApiError> {
    let body = body.map_err(body_error)?;
    let req: CreateTopic = parse_json(&body)?;
    principal.require_to(Access::Admin, AclOperation::Create, &req.name)?;
    validate_topic_name(&req.name).map_err(topic_error)?;
    let broker_config = state.broker.config();
    let partitions = match req.partitions {
        None => broker_config.default_partitions,
        Some(n) => {
            let max = broker_config.partitions_per_topic_max;
            match i32::try_from(n) {
                Ok(n) if (1..=max).contains(&n) => n,
                _ => {
                    return Err(ApiError::bad_request(format!(
                        "partitions must be between 1 and {max}, got {n}"
                    )));
                }
            }
        }
    };
    let configs = topic_configs(&req.configs)?;
    let broker = Arc::clone(&state.broker);
    let name = req.name;
    let topic = if broker.cluster().is_some() {
        (broker
            .create_topic_in_cluster(&name, partitions, configs)
            .await)
            .map_err(change_error)?
    } else {
        let topic =
            tokio::task::spawn_blocking(move || broker.create_topic(&name, partitions, configs))
                .await
                .map_err(|e| ApiError::internal(format!("creating the topic failed: {e}")))?
                .map_err(topic_error)?;
        synced(&state.broker).await?;
        topic
    };
    let description = describe_topic(&state.broker, &topic);
    Ok((StatusCode::CREATED, Json(description)).into_response())
}

/// `GET /topics/{topic}`.
pub async fn describe(
    State(state): State<Arc<AppState>>,
    principal: Principal,
    topic: Result<Path<String>, PathRejection>,
) -> Result<Json<TopicDescription>, ApiError> {
    let name = topic_path(topic)?;
    if !principal.allows_any(&name) {
        // The 403 names the key and the topic; read is the grant that usually goes missing.
        principal.require(Access::Read, &name)?;
    }
    let topic = known_topic(&state.broker, &name)?;
    Ok(Json(describe_topic(&state.broker, &topic)))
}

/// `DELETE /topics/{topic}`: 204 once the topic is gone from disk.
pub async fn delete(
    State(state): State<Arc<AppState>>,
    principal: Principal,
    topic: Result<Path<String>, PathRejection>,
) -> Result<StatusCode, ApiError> {
    let name = topic_path(topic)?;
    principal.require_to(Access::Admin, AclOperation::Delete, &name)?;
    let broker = Arc::clone(&state.broker);
    if broker.cluster().is_some() {
        broker
            .delete_topic_in_cluster(&name)
            .await
            .map_err(change_error)?;
        return Ok(StatusCode::NO_CONTENT);
    }
    tokio::task::spawn_blocking(move || broker.delete_topic(&name))
        .await
        .map_err(|e| ApiError::internal(format!("deleting the topic failed: {e}")))?
        .map_err(topic_error)?;
    synced(&state.broker).await?;
    Ok(StatusCode::NO_CONTENT)
}

/// Waits until the metadata change just made is durable (at once in local mode); if it
/// cannot be made so, a 503 (retry) that says why.
async fn synced(broker: &Broker) -> Result<(), ApiError> {
    broker.sync_metadata().await.map_err(|e| {
        tracing::error!(error = %e, "topic admin over HTTP: metadata not durable");
        ApiError::unavailable(format!(
            "the change is made on this broker but could not be made durable in storage: {e}"
        ))
    })
}

/// The `{topic}` path segment, checked against Kafka's topic name rules.
fn topic_path(topic: Result<Path<String>, PathRejection>) -> Result<String, ApiError> {
    let Path(name) = topic.map_err(|e| {
        ApiError::bad_request(format!("invalid topic in the path: {}", e.body_text()))
    })?;
    validate_topic_name(&name).map_err(topic_error)?;
    Ok(name)
}

fn known_topic(broker: &Broker, name: &str) -> Result<Arc<Topic>, ApiError> {
    broker
        .topics()
        .get(name)
        .ok_or_else(|| topic_error(TopicError::Unknown(name.to_owned())))
}

/// The configs of a create request, each checked by [`TopicConfig::set`]. A JSON number is
/// taken as its decimal text, so `{"retention.ms": 86400000}` and `{"retention.ms": "86400000"}`
/// are the same request.
fn topic_configs(configs: &BTreeMap<String, serde_json::Value>) -> Result<TopicConfig, ApiError> {
    let mut out = TopicConfig::default();
    for (name, value) in configs {
        let text = match value {
            serde_json::Value::String(s) => s.clone(),
            serde_json::Value::Number(n) => n.to_string(),
            other => {
                return Err(ApiError::bad_request(format!(
                    "config '{name}' must be a string or a number, got {other}"
                )));
            }
        };
        out.set(name, Some(&text))
            .map_err(|e| ApiError::bad_request(format!("invalid config: {e}")))?;
    }
    Ok(out)
}

fn describe_topic(broker: &Broker, topic: &Topic) -> TopicDescription {
    let partitions = topic
        .partitions()
        .iter()
        .enumerate()
        .map(|(p, log)| PartitionDescription {
            partition: p as i32,
            log_start_offset: log.log_start_offset(),
            high_watermark: log.high_watermark(),
        })
        .collect();
    let configs = topic
        .config()
        .describe(broker.config())
        .into_iter()
        .map(|(name, value, _is_default)| (name, value))
        .collect();
    TopicDescription {
        name: topic.name.clone(),
        id: topic.id.to_string(),
        partitions,
        configs,
    }
}

/// The HTTP answer for a topic change refused in cluster mode.
fn change_error(e: ChangeError) -> ApiError {
    match e {
        ChangeError::Topic(e) => topic_error(e),
        ChangeError::Cluster(e) => match &e {
            ClusterError::TopicExists(_) => ApiError::conflict(e.to_string()),
            ClusterError::UnknownTopic(_) => ApiError::not_found(e.to_string()),
            ClusterError::InvalidPartitions(_) => ApiError::bad_request(e.to_string()),
            ClusterError::Unavailable(_) => {
                tracing::warn!(error = %e, "topic admin over HTTP");
                ApiError::unavailable(format!("{e} (retry)"))
            }
        },
    }
}

/// The HTTP answer for a topic-management error.
fn topic_error(e: TopicError) -> ApiError {
    match &e {
        TopicError::InvalidName { .. }
        | TopicError::InvalidPartitions { .. }
        | TopicError::PartitionsNotIncreasing { .. }
        | TopicError::Config(_) => ApiError::bad_request(e.to_string()),
        TopicError::AlreadyExists(_) => ApiError::conflict(e.to_string()),
        TopicError::Unknown(_) => ApiError::not_found(e.to_string()),
        // A full data directory clears when space is freed: a retry will do.
        _ if e.is_no_space() => ApiError::unavailable(format!("the data directory is full: {e}")),
        TopicError::Io { .. } | TopicError::Log(_) | TopicError::Corrupt { .. } => {
            tracing::error!(error = %e, "topic admin over HTTP");
            ApiError::internal(format!("storage error: {e}"))
        }
    }
}
