//! Trigger routes: create, list, describe and delete event triggers (crate `sluice-triggers`).
//! `sluice trigger` is a client of these routes; there is no Kafka API for triggers.
//!
//! - `GET /triggers`: `{"triggers": [...]}`, the triggers whose sources the caller may read;
//! - `POST /triggers`: a [`CreateRequest`]; 201 with the trigger and, for a webhook sink, its
//!   signing secret (shown only in this answer), once the definition is durable;
//! - `GET /triggers/{name}`: the trigger with its status counters;
//! - `DELETE /triggers/{name}`: 204 once the deletion is durable.
//!
//! The [`Manager`] does the work and decides what is valid; this module reads and checks what
//! it needs itself (the JSON body, the name, the sources and the sink, for the grants) and maps
//! [`TriggerError`]s to statuses. A rule error's body carries `"position"`, the byte offset in
//! the rule text. A broker without a manager (cluster mode, for now) answers 503.
//!
//! Grants: API keys name topics, and there is no trigger resource in the broker's ACLs, so a
//! trigger is governed by the topics it touches. Creating or deleting one needs `admin` on
//! every source topic, on a topic sink, and on a webhook sink's dead-letter topic (with ACL
//! checks on: ALTER on each); listing shows, and describing needs, `read` on every source.

use std::sync::Arc;

use axum::Json;
use axum::body::Bytes;
use axum::extract::rejection::{BytesRejection, PathRejection};
use axum::extract::{Path, State};
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde::Serialize;
use sluice_broker::topics::validate_topic_name;
use sluice_triggers::spec::{Sink, validate_name};
use sluice_triggers::{CreateRequest, Manager, TriggerError, TriggerInfo};

use crate::auth::{Access, Principal};
use crate::error::{body_error, parse_json};
use crate::{ApiError, AppState};

/// `GET /triggers`.
#[derive(Debug, Serialize)]
pub struct TriggerList {
    triggers: Vec<TriggerInfo>,
}

/// `GET /triggers`: the triggers the caller may read every source of, by name.
pub async fn list(
    State(state): State<Arc<AppState>>,
    principal: Principal,
) -> Result<Json<TriggerList>, ApiError> {
    let manager = manager(&state)?;
    let triggers = manager
        .list()
        .into_iter()
        .filter(|t| t.sources.iter().all(|s| principal.allows(Access::Read, s)))
        .collect();
    Ok(Json(TriggerList { triggers }))
}

/// `POST /triggers`: 201 with the trigger (and its webhook secret) once it is durable.
pub async fn create(
    State(state): State<Arc<AppState>>,
    principal: Principal,
    body: Result<Bytes, BytesRejection>,
) -> Result<Response, ApiError> {
    let body = body.map_err(body_error)?;
    let request: CreateRequest = parse_json(&body)?;
    validate_name(&request.name).map_err(ApiError::bad_request)?;
    if request.sources.is_empty() {
        return Err(ApiError::bad_request(
            "\"sources\" is empty; name at least one topic to read",
        ));
    }
    for source in &request.sources {
        validate_topic_name(source)
            .map_err(|e| ApiError::bad_request(format!("source {source:?}: {e}")))?;
    }
    let sink = Sink::parse(&request.sink).map_err(ApiError::bad_request)?;
    let dead_letter = match &sink {
        Sink::Topic(_) => None,
        Sink::Webhook(_) => Some(
            request
                .dead_letter_topic
                .clone()
                .unwrap_or_else(|| default_dead_letter_topic(&request.name)),
        ),
    };
    let sink_topic = match &sink {
        Sink::Topic(topic) => Some(topic.as_str()),
        Sink::Webhook(_) => None,
    };
    for topic in sink_topic.into_iter().chain(dead_letter.as_deref()) {
        validate_topic_name(topic)
            .map_err(|e| ApiError::bad_request(format!("topic {topic:?}: {e}")))?;
    }
    require_admin(
        &principal,
        &request.sources,
        sink_topic.into_iter().chain(dead_letter.as_deref()),
    )?;
    let manager = manager(&state)?;
    let name = request.name.clone();
    let created = manager.create(request).await.map_err(trigger_error)?;
    let mut response = (StatusCode::CREATED, Json(created)).into_response();
    // The name was checked above: letters, digits, '.', '_' and '-' only.
    if let Ok(location) = HeaderValue::from_str(&format!("/triggers/{name}")) {
        response.headers_mut().insert(header::LOCATION, location);
    }
    Ok(response)
}

/// `GET /triggers/{name}`.
pub async fn describe(
    State(state): State<Arc<AppState>>,
    principal: Principal,
    name: Result<Path<String>, PathRejection>,
) -> Result<Json<TriggerInfo>, ApiError> {
    let name = name_path(name)?;
    let manager = manager(&state)?;
    let info = manager.describe(&name).map_err(trigger_error)?;
    for source in &info.sources {
        principal.require(Access::Read, source)?;
    }
    Ok(Json(info))
}

/// `DELETE /triggers/{name}`: 204 once the deletion is durable.
pub async fn delete(
    State(state): State<Arc<AppState>>,
    principal: Principal,
    name: Result<Path<String>, PathRejection>,
) -> Result<StatusCode, ApiError> {
    let name = name_path(name)?;
    let manager = manager(&state)?;
    // The grants depend on the topics the trigger touches: look them up first.
    let info = manager.describe(&name).map_err(trigger_error)?;
    let sink_topic = match Sink::parse(&info.sink) {
        Ok(Sink::Topic(topic)) => Some(topic),
        _ => None,
    };
    require_admin(
        &principal,
        &info.sources,
        sink_topic
            .as_deref()
            .into_iter()
            .chain(info.dead_letter_topic.as_deref()),
    )?;
    manager.delete(&name).await.map_err(trigger_error)?;
    Ok(StatusCode::NO_CONTENT)
}

/// The manager, or 503 when this broker runs no triggers. Not retryable, so no
/// `Retry-After`: the broker has to be started differently.
fn manager(state: &AppState) -> Result<&Arc<Manager>, ApiError> {
    state.triggers.as_ref().ok_or_else(|| {
        ApiError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "triggers are not available: this broker runs without them (cluster mode, brokers sharing a metadata store with --metadata, does not run triggers yet; run them on a single broker, local disk or object storage)",
        )
    })
}

/// `admin` on every source and on every topic the trigger writes to.
fn require_admin<'a>(
    principal: &Principal,
    sources: &'a [String],
    writes: impl Iterator<Item = &'a str>,
) -> Result<(), ApiError> {
    for topic in sources.iter().map(String::as_str).chain(writes) {
        principal.require(Access::Admin, topic)?;
    }
    Ok(())
}

/// Where a webhook trigger's failed firings go when the request names no topic (the
/// manager's default, documented on [`CreateRequest::dead_letter_topic`]).
fn default_dead_letter_topic(trigger: &str) -> String {
    format!("{trigger}.dead-letter")
}

/// The `{name}` path segment, checked against the trigger name rules.
fn name_path(name: Result<Path<String>, PathRejection>) -> Result<String, ApiError> {
    let Path(name) = name.map_err(|e| {
        ApiError::bad_request(format!(
            "invalid trigger name in the path: {}",
            e.body_text()
        ))
    })?;
    validate_name(&name).map_err(ApiError::bad_request)?;
    Ok(name)
}

/// The HTTP answer for a manager error: its own status; a rule error with its position.
fn trigger_error(e: TriggerError) -> ApiError {
    let status = StatusCode::from_u16(e.http_status()).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    match &e {
        TriggerError::Rule { position, .. } => {
            ApiError::new(status, e.to_string()).with_position(*position)
        }
        // "starting" and the like pass: worth a retry.
        TriggerError::Unavailable(_) => ApiError {
            retry_after: Some(1),
            ..ApiError::new(status, e.to_string())
        },
        TriggerError::Storage(_) => {
            tracing::error!(error = %e, "trigger admin over HTTP");
            ApiError::new(status, e.to_string())
        }
        TriggerError::Invalid(_) | TriggerError::NotFound(_) | TriggerError::Exists(_) => {
            ApiError::new(status, e.to_string())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn manager_errors_keep_their_status_and_position() {
        let rule = trigger_error(TriggerError::Rule {
            message: "at byte 12: expected a duration".to_owned(),
            position: Some(12),
        });
        assert_eq!(rule.status, StatusCode::BAD_REQUEST);
        assert_eq!(rule.position, Some(12));
        assert!(
            rule.message.contains("expected a duration"),
            "{}",
            rule.message
        );
        let no_position = trigger_error(TriggerError::Rule {
            message: "can never fire".to_owned(),
            position: None,
        });
        assert_eq!(no_position.position, None);
        for (e, status) in [
            (TriggerError::Invalid("x".to_owned()), 400),
            (TriggerError::NotFound("t".to_owned()), 404),
            (TriggerError::Exists("t".to_owned()), 409),
            (TriggerError::Unavailable("starting".to_owned()), 503),
            (TriggerError::Storage("disk".to_owned()), 500),
        ] {
            let answer = trigger_error(e);
            assert_eq!(answer.status.as_u16(), status, "{}", answer.message);
            assert_eq!(answer.position, None);
        }
        assert_eq!(
            trigger_error(TriggerError::Unavailable("starting".to_owned())).retry_after,
            Some(1)
        );
    }
}
