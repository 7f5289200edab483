//! `POST /topics/{topic}/records`. Interface only so far.

use std::sync::Arc;

use axum::extract::{Path, State};

use crate::auth::Principal;
use crate::{ApiError, AppState};

pub async fn produce(
    State(state): State<Arc<AppState>>,
    principal: Principal,
    Path(topic): Path<String>,
) -> Result<(), ApiError> {
    let _ = (state, principal, topic);
    Err(ApiError::internal("not yet"))
}
