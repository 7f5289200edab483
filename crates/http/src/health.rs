//! `/healthz` (the process answers), `/readyz` (it serves requests: 503 once shutdown has
//! begun) and `/metrics` (Prometheus text).

use std::sync::Arc;

use axum::Json;
use axum::extract::State;
use axum::http::header;
use axum::response::{IntoResponse, Response};
use serde_json::json;

use crate::auth::Principal;
use crate::{ApiError, AppState};

pub async fn healthz() -> Json<serde_json::Value> {
    Json(json!({ "status": "ok" }))
}

pub async fn readyz(
    State(state): State<Arc<AppState>>,
) -> Result<Json<serde_json::Value>, ApiError> {
    if *state.shutdown.borrow() {
        return Err(ApiError::unavailable("shutting down"));
    }
    Ok(Json(json!({ "status": "ready" })))
}

/// Needs a valid key when keys are configured (Prometheus sends one with `authorization`).
pub async fn metrics(State(state): State<Arc<AppState>>, _principal: Principal) -> Response {
    let broker = Arc::clone(&state.broker);
    let text = tokio::task::spawn_blocking(move || sluice_broker::metrics::render(&broker))
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
