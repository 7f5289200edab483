//! Limits and request metrics. Interface only so far.

use std::sync::Arc;

use axum::Router;

use crate::{AppState, HttpConfig};

/// Shared limit state (the concurrent-request budget).
#[derive(Debug)]
pub struct Limits {}

impl Limits {
    pub fn new(config: &HttpConfig) -> Limits {
        let _ = config;
        Limits {}
    }
}

/// Puts the limits and metrics middleware around `routes`.
pub fn wrap(routes: Router<Arc<AppState>>, state: Arc<AppState>) -> Router<Arc<AppState>> {
    let _ = state;
    routes
}
