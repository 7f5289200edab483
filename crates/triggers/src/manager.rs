//! The trigger manager: creates, lists, describes and deletes triggers, keeps their
//! definitions durable, and runs one [`crate::run`] task per trigger. The HTTP API's
//! `/triggers` routes and `sluice trigger` (through them) are its only callers.

use serde::{Deserialize, Serialize};

use crate::spec::StartFrom;

/// `POST /triggers`: a trigger as a user gives it. Exactly one of `rule` (text) and
/// `rule_json` (the JSON tree) is given.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CreateRequest {
    pub name: String,
    pub sources: Vec<String>,
    #[serde(default)]
    pub rule: Option<String>,
    #[serde(default)]
    pub rule_json: Option<serde_json::Value>,
    /// `key` (default), `json:FIELD`, `header:NAME`.
    #[serde(default)]
    pub entity: Option<String>,
    /// `header:NAME` (default `header:event`), `json:FIELD`, `topic`.
    #[serde(default)]
    pub event: Option<String>,
    /// `topic:NAME` or a webhook URL.
    pub sink: String,
    /// Webhook signing key; generated when not given (and shown once, in the answer).
    #[serde(default)]
    pub secret: Option<String>,
    /// Webhook sinks: where firings go after every attempt failed (default
    /// `<name>.dead-letter`).
    #[serde(default)]
    pub dead_letter_topic: Option<String>,
    #[serde(default)]
    pub max_attempts: Option<u32>,
    #[serde(default)]
    pub initial_backoff_ms: Option<u64>,
    #[serde(default)]
    pub max_backoff_ms: Option<u64>,
    /// `latest` (default) or `earliest`.
    #[serde(default)]
    pub start: Option<StartFrom>,
}

/// What `list` and `describe` show about one trigger.
#[derive(Debug, Clone, Serialize)]
pub struct TriggerInfo {
    pub name: String,
    pub sources: Vec<String>,
    /// The rule in its canonical text form, and as the JSON tree.
    pub rule: String,
    pub rule_json: serde_json::Value,
    pub entity: String,
    pub event: String,
    pub sink: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub dead_letter_topic: Option<String>,
    pub start: StartFrom,
    pub created_ms: i64,
    pub status: TriggerStatus,
}

/// A running trigger's state and counters.
#[derive(Debug, Clone, Default, Serialize)]
pub struct TriggerStatus {
    /// `starting` (recovering its state), `running`, or `failed` (see `error`).
    pub state: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// Entities with state kept.
    pub entities: u64,
    /// Source records evaluated.
    pub events: u64,
    /// Firings made (written to the outbox).
    pub firings: u64,
    /// Firings delivered to the sink.
    pub delivered: u64,
    /// Webhook attempts that failed, and firings sent to the dead-letter topic.
    pub delivery_failures: u64,
    pub dead_lettered: u64,
    /// Source records skipped, by reason (`no_entity`, `no_event_name`, `bad_json`, ...).
    pub skipped: std::collections::BTreeMap<String, u64>,
    /// Source records not yet read, summed over the source partitions.
    pub lag: u64,
}

/// The answer to a create: the trigger, and its webhook secret (shown only here).
#[derive(Debug, Clone, Serialize)]
pub struct Created {
    #[serde(flatten)]
    pub info: TriggerInfo,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub secret: Option<String>,
}

/// Why a trigger call failed.
#[derive(Debug, Clone, thiserror::Error)]
pub enum TriggerError {
    /// A field is wrong; the message says which and how to fix it.
    #[error("{0}")]
    Invalid(String),
    /// The rule does not parse or can never fire. `position` is the byte offset in the text
    /// form, when the error has one.
    #[error("rule: {message}")]
    Rule {
        message: String,
        position: Option<usize>,
    },
    #[error("trigger {0:?} does not exist")]
    NotFound(String),
    #[error("trigger {0:?} already exists")]
    Exists(String),
    /// Triggers cannot run here now (the message says why).
    #[error("{0}")]
    Unavailable(String),
    /// Storing the definition failed.
    #[error("storage: {0}")]
    Storage(String),
}

impl TriggerError {
    /// The HTTP status this error is answered with.
    pub fn http_status(&self) -> u16 {
        match self {
            TriggerError::Invalid(_) | TriggerError::Rule { .. } => 400,
            TriggerError::NotFound(_) => 404,
            TriggerError::Exists(_) => 409,
            TriggerError::Unavailable(_) => 503,
            TriggerError::Storage(_) => 500,
        }
    }
}

/// Owns every trigger of this broker.
#[derive(Debug, Default)]
pub struct Manager {}

impl Manager {
    /// Creates a trigger: checks the request (rule, sources, sink), stores the definition
    /// durably, then starts it. Answered once the definition is durable.
    pub async fn create(&self, request: CreateRequest) -> Result<Created, TriggerError> {
        Err(TriggerError::Unavailable(format!(
            "trigger {:?}: triggers are starting",
            request.name
        )))
    }

    /// Every trigger, by name.
    pub fn list(&self) -> Vec<TriggerInfo> {
        Vec::new()
    }

    /// One trigger.
    pub fn describe(&self, name: &str) -> Result<TriggerInfo, TriggerError> {
        Err(TriggerError::NotFound(name.to_owned()))
    }

    /// Stops a trigger and deletes its definition and state. Answered once the deletion is
    /// durable.
    pub async fn delete(&self, name: &str) -> Result<(), TriggerError> {
        Err(TriggerError::NotFound(name.to_owned()))
    }
}
