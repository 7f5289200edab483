//! Topic admin routes. Interface only so far.

use std::sync::Arc;

use axum::extract::{Path, State};

use crate::auth::Principal;
use crate::{ApiError, AppState};

pub async fn list(State(state): State<Arc<AppState>>, principal: Principal) -> Result<(), ApiError> {
    let _ = (state, principal);
    Err(ApiError::internal("not yet"))
}

pub async fn create(State(state): State<Arc<AppState>>, principal: Principal) -> Result<(), ApiError> {
    let _ = (state, principal);
    Err(ApiError::internal("not yet"))
}

pub async fn describe(
    State(state): State<Arc<AppState>>,
    principal: Principal,
    Path(topic): Path<String>,
) -> Result<(), ApiError> {
    let _ = (state, principal, topic);
    Err(ApiError::internal("not yet"))
}

pub async fn delete(
    State(state): State<Arc<AppState>>,
    principal: Principal,
    Path(topic): Path<String>,
) -> Result<(), ApiError> {
    let _ = (state, principal, topic);
    Err(ApiError::internal("not yet"))
}
