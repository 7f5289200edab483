//! `/healthz` (the process answers), `/readyz` (it serves requests: 503 once shutdown has
//! begun, while the data directory is full, and while the storage backend cannot take
//! writes) and `/metrics` (Prometheus text).

use std::sync::Arc;

use axum::Json;
use axum::extract::State;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde_json::json;

use crate::auth::Principal;
use crate::{ApiError, AppState};

pub async fn healthz() -> Json<serde_json::Value> {
    Json(json!({ "status": "ok" }))
}

/// 200 `{"status":"ready"}`; 503 with `Retry-After` once shutdown has begun, and while the data
/// directory is full: `{"status":"data_dir_full","error":..,"data_dir":..,"free_bytes":..}`.
/// A full directory still serves reads, but a load balancer should send writes elsewhere; the
/// state is rechecked (`statvfs`) on every call while it lasts, so the answer turns to 200 as
/// soon as space is freed. In object-storage mode, also 503 while this broker may not write to
/// the bucket (its writer lease lapsed or was lost): `{"status":"writer_lease_lapsed",..}`.
pub async fn readyz(State(state): State<Arc<AppState>>) -> Result<Response, ApiError> {
    if *state.shutdown.borrow() {
        return Err(ApiError::unavailable("shutting down"));
    }
    let space = state.broker.data_dir_space();
    if space.recheck() {
        let status = space.status();
        let dir = status
            .dir
            .as_ref()
            .map_or_else(String::new, |d| d.display().to_string());
        let body = json!({
            "status": "data_dir_full",
            "error": format!(
                "the data directory {dir} is full: produce and offset commits fail until space \
                 is freed (retention, deleting topics); reads still work ({})",
                status.reason.as_deref().unwrap_or("no room")
            ),
            "data_dir": dir,
            "free_bytes": status.free_bytes,
        });
        let mut response = (StatusCode::SERVICE_UNAVAILABLE, Json(body)).into_response();
        response
            .headers_mut()
            .insert(header::RETRY_AFTER, HeaderValue::from(1));
        return Ok(response);
    }
    if let Some((status, error)) = state.storage.as_ref().and_then(|s| (s.not_ready)()) {
        let body = json!({ "status": status, "error": error });
        let mut response = (StatusCode::SERVICE_UNAVAILABLE, Json(body)).into_response();
        response
            .headers_mut()
            .insert(header::RETRY_AFTER, HeaderValue::from(1));
        return Ok(response);
    }
    Ok(Json(json!({ "status": "ready" })).into_response())
}

/// Needs a valid key when keys are configured (Prometheus sends one with `authorization`).
pub async fn metrics(State(state): State<Arc<AppState>>, _principal: Principal) -> Response {
    let text = tokio::task::spawn_blocking(move || {
        let mut text = sluice_broker::metrics::render(&state.broker, &[&state.metrics]);
        if let Some(storage) = &state.storage {
            text.push_str(&(storage.series)());
        }
        if let Some(triggers) = &state.triggers {
            text.push_str(&triggers.render_metrics());
        }
        text
    })
    .await
    .unwrap_or_default();
    (
        [(
            header::CONTENT_TYPE,
            "text/plain; version=0.0.4; charset=utf-8",
        )],
        text,
    )
        .into_response()
}
