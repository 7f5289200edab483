//! Consumer-group offsets over HTTP. Interface only so far.

use std::sync::Arc;

use axum::extract::{Path, State};

use crate::auth::Principal;
use crate::{ApiError, AppState};

pub async fn fetch(
    State(state): State<Arc<AppState>>,
    principal: Principal,
    Path(group): Path<String>,
) -> Result<(), ApiError> {
    let _ = (state, principal, group);
    Err(ApiError::internal("not yet"))
}

pub async fn commit(
    State(state): State<Arc<AppState>>,
    principal: Principal,
    Path(group): Path<String>,
) -> Result<(), ApiError> {
    let _ = (state, principal, group);
    Err(ApiError::internal("not yet"))
}
