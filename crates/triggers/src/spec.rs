//! What a trigger is: its definition as users give it (CLI flags, HTTP JSON) and as it is
//! stored, and what `list`/`describe` show about it.
//!
//! The text forms are the contract of the CLI and the HTTP API:
//! - entity id: `key` (the default), `json:FIELD`, `header:NAME`;
//! - event name: `header:NAME` (default `header:event`), `json:FIELD`, `topic`;
//! - sink: `topic:NAME`, or a webhook URL `http://...` / `https://...`.

use serde::{Deserialize, Serialize};

use sluice_rules::rule::Rule;

/// Longest trigger name; names use the characters of topic names.
pub const MAX_TRIGGER_NAME_BYTES: usize = 200;

/// Most source topics one trigger reads.
pub const MAX_SOURCES: usize = 16;

/// Where a record's entity id comes from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum EntityFrom {
    /// The record key (records without a key are skipped and counted).
    Key,
    /// A top-level field of the JSON value (a string or a number).
    Json(String),
    /// A record header's value.
    Header(String),
}

/// Where a record's event name comes from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NameFrom {
    /// A record header's value (default: the header `event`).
    Header(String),
    /// A top-level string field of the JSON value.
    Json(String),
    /// The name of the topic the record is in.
    Topic,
}

/// Where firings go.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Sink {
    /// One record per firing in this topic, keyed by the entity id.
    Topic(String),
    /// One signed POST per firing to this URL.
    Webhook(String),
}

/// Where a new trigger starts reading its sources.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum StartFrom {
    /// Events produced from the trigger's creation on (the default).
    #[default]
    Latest,
    /// Every event still in the source topics.
    Earliest,
}

impl EntityFrom {
    pub fn parse(text: &str) -> Result<EntityFrom, String> {
        match text.split_once(':') {
            None if text == "key" => Ok(EntityFrom::Key),
            Some(("json", field)) if !field.is_empty() => Ok(EntityFrom::Json(field.to_owned())),
            Some(("header", name)) if !name.is_empty() => Ok(EntityFrom::Header(name.to_owned())),
            _ => Err(format!(
                "entity {text:?}: expected `key`, `json:FIELD` or `header:NAME`"
            )),
        }
    }
}

impl std::fmt::Display for EntityFrom {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            EntityFrom::Key => f.write_str("key"),
            EntityFrom::Json(field) => write!(f, "json:{field}"),
            EntityFrom::Header(name) => write!(f, "header:{name}"),
        }
    }
}

impl NameFrom {
    pub fn parse(text: &str) -> Result<NameFrom, String> {
        match text.split_once(':') {
            None if text == "topic" => Ok(NameFrom::Topic),
            Some(("json", field)) if !field.is_empty() => Ok(NameFrom::Json(field.to_owned())),
            Some(("header", name)) if !name.is_empty() => Ok(NameFrom::Header(name.to_owned())),
            _ => Err(format!(
                "event {text:?}: expected `header:NAME`, `json:FIELD` or `topic`"
            )),
        }
    }
}

impl Default for NameFrom {
    fn default() -> Self {
        NameFrom::Header("event".to_owned())
    }
}

impl std::fmt::Display for NameFrom {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            NameFrom::Topic => f.write_str("topic"),
            NameFrom::Json(field) => write!(f, "json:{field}"),
            NameFrom::Header(name) => write!(f, "header:{name}"),
        }
    }
}

impl Sink {
    pub fn parse(text: &str) -> Result<Sink, String> {
        if let Some(topic) = text.strip_prefix("topic:") {
            if topic.is_empty() {
                return Err("sink \"topic:\": name the topic, e.g. topic:unpaid".to_owned());
            }
            return Ok(Sink::Topic(topic.to_owned()));
        }
        if text.starts_with("http://") || text.starts_with("https://") {
            return Ok(Sink::Webhook(text.to_owned()));
        }
        Err(format!(
            "sink {text:?}: expected `topic:NAME` or a webhook URL (http:// or https://)"
        ))
    }
}

impl std::fmt::Display for Sink {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Sink::Topic(topic) => write!(f, "topic:{topic}"),
            Sink::Webhook(url) => f.write_str(url),
        }
    }
}

/// A trigger's definition, as stored and as `describe` shows it (with the webhook secret
/// left out of what is shown).
#[derive(Debug, Clone, PartialEq)]
pub struct TriggerSpec {
    pub name: String,
    /// Source topics (at least one).
    pub sources: Vec<String>,
    pub rule: Rule,
    pub entity: EntityFrom,
    pub event: NameFrom,
    pub sink: Sink,
    /// Webhook sinks: the HMAC-SHA256 key; deliveries that fail every attempt go to
    /// `dead_letter_topic`.
    pub secret: Option<String>,
    pub dead_letter_topic: Option<String>,
    /// Webhook delivery attempts before a firing is dead-lettered.
    pub max_attempts: u32,
    /// Wait before the first retry; doubled per attempt up to `max_backoff_ms`.
    pub initial_backoff_ms: u64,
    pub max_backoff_ms: u64,
    pub start: StartFrom,
    /// When the trigger was created, ms since 1970.
    pub created_ms: i64,
}

/// Webhook delivery defaults.
pub const DEFAULT_MAX_ATTEMPTS: u32 = 8;
pub const DEFAULT_INITIAL_BACKOFF_MS: u64 = 1_000;
pub const DEFAULT_MAX_BACKOFF_MS: u64 = 60_000;

/// Checks a trigger name: 1 to [`MAX_TRIGGER_NAME_BYTES`] of `[A-Za-z0-9._-]`.
pub fn validate_name(name: &str) -> Result<(), String> {
    if name.is_empty() || name.len() > MAX_TRIGGER_NAME_BYTES {
        return Err(format!(
            "trigger name must be 1 to {MAX_TRIGGER_NAME_BYTES} characters"
        ));
    }
    if let Some(c) = name
        .chars()
        .find(|c| !(c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-')))
    {
        return Err(format!(
            "trigger name {name:?} has {c:?}: use letters, digits, '.', '_' and '-'"
        ));
    }
    Ok(())
}
