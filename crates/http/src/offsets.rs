//! Consumer-group offsets over HTTP: `POST /groups/{group}/offsets` commits, `GET` reads them
//! back with each partition's high watermark and lag.
//!
//! A commit here is what Kafka calls a "simple" commit: it comes from outside any group
//! protocol (member id "", generation -1), like an admin tool resetting offsets. The group
//! coordinator accepts it only while the group has no members; while consumers are in the group
//! their own commits would silently overwrite it (or it theirs), so it is refused with 409.
//!
//! Checks before anything is committed: the group id is not empty, the list is not empty,
//! every offset is ≥ 0, every metadata string fits `OFFSET_METADATA_MAX_BYTES`, every partition
//! appears once, and every topic and partition exists. A request that fails any of them commits
//! nothing. Durability: the answer is sent after the group store's fdatasync covers the offsets.

use std::collections::BTreeSet;
use std::sync::Arc;

use axum::Json;
use axum::body::Bytes;
use axum::extract::rejection::{BytesRejection, PathRejection, QueryRejection};
use axum::extract::{Path, Query, State};
use serde::{Deserialize, Serialize};
use sluice_broker::Broker;
use sluice_broker::groups::{CommittedOffset, OFFSET_METADATA_MAX_BYTES};
use sluice_protocol::kafka_protocol::ResponseError;
use sluice_security::AclOperation;

use crate::auth::{Access, Principal};
use crate::consume::QueryParams;
use crate::error::{body_error, parse_json};
use crate::{ApiError, AppState};

/// `POST /groups/{group}/offsets` body.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct CommitRequest {
    offsets: Vec<OffsetToCommit>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct OffsetToCommit {
    topic: String,
    partition: i32,
    /// The offset of the next record to read (as in Kafka: last processed + 1).
    offset: i64,
    metadata: Option<String>,
}

#[derive(Debug, Serialize)]
pub struct Committed {
    group: String,
    committed: usize,
}

#[derive(Debug, Serialize)]
pub struct GroupOffsets {
    group: String,
    offsets: Vec<PartitionOffset>,
}

#[derive(Debug, Serialize)]
struct PartitionOffset {
    topic: String,
    partition: i32,
    offset: i64,
    metadata: String,
    high_watermark: i64,
    /// `high_watermark - offset`, at least 0.
    lag: i64,
}

/// `POST /groups/{group}/offsets`: 200 `{"group", "committed"}` once the offsets are durable.
pub async fn commit(
    State(state): State<Arc<AppState>>,
    principal: Principal,
    group: Result<Path<String>, PathRejection>,
    body: Result<Bytes, BytesRejection>,
) -> Result<Json<Committed>, ApiError> {
    let group = group_path(group)?;
    principal.require_group(AclOperation::Read, &group)?;
    let body = body.map_err(body_error)?;
    let req: CommitRequest = parse_json(&body)?;
    if req.offsets.is_empty() {
        return Err(ApiError::bad_request(
            "offsets is empty; give at least one {\"topic\", \"partition\", \"offset\"}",
        ));
    }
    let now_ms = state.broker.now_ms();
    let mut seen = BTreeSet::new();
    let mut offsets = Vec::with_capacity(req.offsets.len());
    for o in req.offsets {
        if o.offset < 0 {
            return Err(ApiError::bad_request(format!(
                "offset of {}/{} must be at least 0, got {}",
                o.topic, o.partition, o.offset
            )));
        }
        if let Some(m) = &o.metadata
            && m.len() > OFFSET_METADATA_MAX_BYTES
        {
            return Err(ApiError::bad_request(format!(
                "metadata of {}/{} is {} bytes; at most {OFFSET_METADATA_MAX_BYTES} are allowed",
                o.topic,
                o.partition,
                m.len()
            )));
        }
        if !seen.insert((o.topic.clone(), o.partition)) {
            return Err(ApiError::bad_request(format!(
                "{}/{} appears more than once in offsets",
                o.topic, o.partition
            )));
        }
        principal.require(Access::Read, &o.topic)?;
        partition_exists(&state.broker, &o.topic, o.partition)?;
        offsets.push((
            o.topic,
            o.partition,
            CommittedOffset {
                offset: o.offset,
                leader_epoch: -1,
                metadata: o.metadata,
                commit_timestamp_ms: now_ms,
            },
        ));
    }
    let committed = offsets.len();
    state
        .broker
        .groups()
        .commit(&group, "", None, -1, offsets)
        .await
        .map_err(|e| commit_error(&state.broker, &group, e.code()))?;
    Ok(Json(Committed { group, committed }))
}

/// `GET /groups/{group}/offsets[?topic=t]`: the group's committed offsets with lag. Without a
/// topic, only topics the caller may read are listed.
pub async fn fetch(
    State(state): State<Arc<AppState>>,
    principal: Principal,
    group: Result<Path<String>, PathRejection>,
    query: Result<Query<Vec<(String, String)>>, QueryRejection>,
) -> Result<Json<GroupOffsets>, ApiError> {
    let group = group_path(group)?;
    principal.require_group(AclOperation::Describe, &group)?;
    let query = QueryParams::new(query, &["topic"])?;
    let only_topic = query.get("topic");
    let asked = match only_topic {
        Some(topic) => {
            principal.require(Access::Read, topic)?;
            let t = state
                .broker
                .topics()
                .get(topic)
                .ok_or_else(|| ApiError::not_found(format!("unknown topic '{topic}'")))?;
            Some(vec![(topic.to_owned(), (0..t.partition_count()).collect())])
        }
        None => None,
    };
    let found = state
        .broker
        .groups()
        .committed(&group, None, asked)
        .map_err(|e| ApiError::from_kafka(e.code(), kafka_error_text(e.code())))?;
    let mut offsets = Vec::new();
    for (topic, parts) in found {
        if only_topic.is_none() && !principal.allows(Access::Read, &topic) {
            continue;
        }
        // A topic deleted since the commit has had its offsets removed; one that vanishes
        // between the two lookups is simply left out.
        let Some(t) = state.broker.topics().get(&topic) else {
            continue;
        };
        for (partition, committed) in parts {
            let (Some(committed), Some(log)) = (committed, t.partition(partition)) else {
                continue;
            };
            let high_watermark = log.high_watermark();
            offsets.push(PartitionOffset {
                topic: topic.clone(),
                partition,
                offset: committed.offset,
                metadata: committed.metadata.unwrap_or_default(),
                high_watermark,
                lag: (high_watermark - committed.offset).max(0),
            });
        }
    }
    Ok(Json(GroupOffsets { group, offsets }))
}

/// The `{group}` path segment: any non-empty string (Kafka puts no other rule on group ids).
fn group_path(group: Result<Path<String>, PathRejection>) -> Result<String, ApiError> {
    let Path(group) = group.map_err(|e| {
        ApiError::bad_request(format!("invalid group in the path: {}", e.body_text()))
    })?;
    if group.is_empty() {
        return Err(ApiError::bad_request("the group id is empty"));
    }
    Ok(group)
}

fn partition_exists(broker: &Broker, topic: &str, partition: i32) -> Result<(), ApiError> {
    let t = broker
        .topics()
        .get(topic)
        .ok_or_else(|| ApiError::not_found(format!("unknown topic '{topic}'")))?;
    let count = t.partition_count();
    if !(0..count).contains(&partition) {
        return Err(ApiError::not_found(format!(
            "topic '{topic}' has no partition {partition} (it has {count}: 0..={})",
            count - 1
        )));
    }
    Ok(())
}

/// The HTTP answer for a refused commit, with a message that says what to do.
fn commit_error(broker: &Broker, group: &str, code: i16) -> ApiError {
    let refused_while_members = matches!(
        ResponseError::try_from_code(code),
        Some(
            ResponseError::UnknownMemberId
                | ResponseError::IllegalGeneration
                | ResponseError::RebalanceInProgress
                | ResponseError::StaleMemberEpoch
        )
    );
    if refused_while_members {
        let state = broker
            .groups()
            .list()
            .into_iter()
            .find(|g| g.group_id == group)
            .map_or("active", |g| g.state);
        return ApiError::from_kafka(
            code,
            format!(
                "group '{group}' has active members (state {state}): offsets can be committed over \
                 HTTP only while no consumer is in the group; stop its consumers (or commit through \
                 them) and try again"
            ),
        );
    }
    ApiError::from_kafka(code, kafka_error_text(code))
}

/// A Kafka error code as text, for the errors that have no message of their own.
fn kafka_error_text(code: i16) -> String {
    match ResponseError::try_from_code(code) {
        Some(ResponseError::CoordinatorNotAvailable) => {
            "the group store is not available; try again".to_owned()
        }
        Some(ResponseError::GroupMaxSizeReached) => {
            "the broker's limit on consumer groups is reached; delete unused groups".to_owned()
        }
        Some(e) => {
            format!("the group coordinator refused the request: {e:?} (Kafka error code {code})")
        }
        None => format!("the group coordinator refused the request (Kafka error code {code})"),
    }
}
