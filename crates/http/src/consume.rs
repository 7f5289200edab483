//! `GET /topics/{topic}/partitions/{p}/records`. Interface only so far.

use std::sync::Arc;

use axum::extract::{Path, State};

use crate::auth::Principal;
use crate::{ApiError, AppState};

pub async fn consume(
    State(state): State<Arc<AppState>>,
    principal: Principal,
    Path((topic, partition)): Path<(String, String)>,
) -> Result<(), ApiError> {
    let _ = (state, principal, topic, partition);
    Err(ApiError::internal("not yet"))
}
