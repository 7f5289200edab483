//! API keys. Interface only so far: every request is allowed.

use std::sync::Arc;

use axum::extract::FromRequestParts;
use axum::http::request::Parts;

use crate::{ApiError, AppState};

/// One configured API key: its name, the hex SHA-256 of the key, and topic-name patterns it
/// may read, write and administer.
#[derive(Debug, Clone, PartialEq, Eq, serde::Deserialize, serde::Serialize)]
#[serde(deny_unknown_fields)]
pub struct ApiKeyConfig {
    pub name: String,
    pub sha256: String,
    #[serde(default)]
    pub read: Vec<String>,
    #[serde(default)]
    pub write: Vec<String>,
    #[serde(default)]
    pub admin: Vec<String>,
}

/// What a request wants to do with a topic.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Access {
    Read,
    Write,
    Admin,
}

/// The configured keys (replaceable while running).
#[derive(Debug, Default)]
pub struct Auth {}

impl Auth {
    /// Checks and installs `keys` (none: authentication is off).
    pub fn new(keys: Vec<ApiKeyConfig>) -> Result<Auth, String> {
        let _ = keys;
        Ok(Auth {})
    }

    /// Replaces the keys (a reload); on error the old keys stay.
    pub fn replace(&self, keys: Vec<ApiKeyConfig>) -> Result<(), String> {
        let _ = keys;
        Ok(())
    }

    /// True when keys are configured.
    pub fn enabled(&self) -> bool {
        false
    }
}

/// The caller of a request: a key with its grants, or anyone when authentication is off.
#[derive(Debug, Clone)]
pub struct Principal {}

impl Principal {
    /// Ok when this caller may do `access` on `topic`; else 403 naming the key and the topic.
    pub fn require(&self, access: Access, topic: &str) -> Result<(), ApiError> {
        let _ = (access, topic);
        Ok(())
    }

    /// True when this caller may do `access` on `topic`.
    pub fn allows(&self, access: Access, topic: &str) -> bool {
        let _ = (access, topic);
        true
    }
}

impl FromRequestParts<Arc<AppState>> for Principal {
    type Rejection = ApiError;

    async fn from_request_parts(
        parts: &mut Parts,
        state: &Arc<AppState>,
    ) -> Result<Self, Self::Rejection> {
        let _ = (parts, state);
        Ok(Principal {})
    }
}
