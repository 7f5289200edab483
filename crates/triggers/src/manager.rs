//! The trigger manager: creates, lists, describes and deletes triggers, keeps their
//! definitions durable, and runs one [`crate::run`] task per trigger. The HTTP API's
//! `/triggers` routes and `sluice trigger` (through them) are its only callers.
//!
//! Definitions live in the internal topic `__sluice_triggers` (one partition, kept forever):
//! one record per change, keyed by trigger name, the JSON definition as value, no value for a
//! deletion. At startup the manager reads it through and starts every trigger it defines.
//!
//! Create: check everything → create the trigger's state topic and write its start positions
//! (durable) → write the definition (durable) → start it → answer. A crash between the first
//! and second write leaves an unused state topic (its name carries the incarnation, so a later
//! trigger of the same name never reads it). Delete: stop the tasks → write the deletion
//! (durable) → delete the state topic → answer. The sink topic and its firings stay.

use std::collections::BTreeMap;
use std::sync::Arc;

use bytes::{Bytes, BytesMut};
use serde::{Deserialize, Serialize};
use sluice_broker::Broker;
use sluice_broker::config::TopicConfig;
use sluice_protocol::records::{ProducerRecord, encode_batch};
use sluice_rules::rule::Rule;
use tokio::sync::watch;

use crate::run::{self, Definition, Stats};
use crate::spec::{
    self, EntityFrom, MAX_SOURCES, NameFrom, Sink, StartFrom, TriggerSpec, validate_name,
};

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
    pub skipped: BTreeMap<String, u64>,
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

/// One `/metrics` family: name, type, help, and its value from a trigger's status.
type MetricFamily = (
    &'static str,
    &'static str,
    &'static str,
    fn(&TriggerStatus) -> u64,
);

/// The internal topic holding trigger definitions.
pub const DEFINITIONS_TOPIC: &str = "__sluice_triggers";

/// Bounds of the webhook retry settings a trigger may ask for.
const MAX_ATTEMPTS_MAX: u32 = 100;
const BACKOFF_MS_MAX: u64 = 3_600_000;

/// The stored form of a definition (the value of a `__sluice_triggers` record).
#[derive(Debug, Clone, Serialize, Deserialize)]
struct Stored {
    name: String,
    incarnation: u64,
    sources: Vec<String>,
    rule: String,
    entity: String,
    event: String,
    sink: String,
    #[serde(default)]
    secret: Option<String>,
    #[serde(default)]
    dead_letter_topic: Option<String>,
    max_attempts: u32,
    initial_backoff_ms: u64,
    max_backoff_ms: u64,
    start: StartFrom,
    created_ms: i64,
}

impl Stored {
    fn of(def: &Definition) -> Stored {
        let s = &def.spec;
        Stored {
            name: s.name.clone(),
            incarnation: def.incarnation,
            sources: s.sources.clone(),
            rule: s.rule.to_string(),
            entity: s.entity.to_string(),
            event: s.event.to_string(),
            sink: s.sink.to_string(),
            secret: s.secret.clone(),
            dead_letter_topic: s.dead_letter_topic.clone(),
            max_attempts: s.max_attempts,
            initial_backoff_ms: s.initial_backoff_ms,
            max_backoff_ms: s.max_backoff_ms,
            start: s.start,
            created_ms: s.created_ms,
        }
    }

    fn definition(self) -> Result<Definition, String> {
        Ok(Definition {
            incarnation: self.incarnation,
            spec: TriggerSpec {
                rule: sluice_rules::rule::parse(&self.rule).map_err(|e| e.to_string())?,
                entity: EntityFrom::parse(&self.entity)?,
                event: NameFrom::parse(&self.event)?,
                sink: Sink::parse(&self.sink)?,
                name: self.name,
                sources: self.sources,
                secret: self.secret,
                dead_letter_topic: self.dead_letter_topic,
                max_attempts: self.max_attempts,
                initial_backoff_ms: self.initial_backoff_ms,
                max_backoff_ms: self.max_backoff_ms,
                start: self.start,
                created_ms: self.created_ms,
            },
        })
    }
}

#[derive(Debug)]
struct Running {
    def: Arc<Definition>,
    stats: Arc<Stats>,
    stop: watch::Sender<bool>,
    task: tokio::task::JoinHandle<()>,
}

/// Owns every trigger of this broker.
#[derive(Debug)]
pub struct Manager {
    broker: Arc<Broker>,
    /// Why triggers cannot run on this broker (cluster mode), if so.
    unavailable: Option<String>,
    /// Serialises create and delete (each writes the definitions topic, then changes `running`).
    changes: tokio::sync::Mutex<()>,
    running: std::sync::Mutex<BTreeMap<String, Running>>,
    tuning: run::Tuning,
}

impl Manager {
    /// Reads the stored definitions and starts every trigger. Call from within the runtime.
    pub async fn open(broker: Arc<Broker>) -> Result<Arc<Manager>, TriggerError> {
        Self::open_with(broker, run::Tuning::default()).await
    }

    /// [`Manager::open`] with the runtime's settings changed (tests: snapshot often).
    pub async fn open_with(
        broker: Arc<Broker>,
        tuning: run::Tuning,
    ) -> Result<Arc<Manager>, TriggerError> {
        if broker.cluster().is_some() {
            return Ok(Arc::new(Manager {
                broker,
                unavailable: Some(
                    "triggers are not offered in cluster mode (--metadata postgres://...) yet; run them on a single broker (local disk or object storage)".to_owned(),
                ),
                changes: tokio::sync::Mutex::new(()),
                running: std::sync::Mutex::new(BTreeMap::new()),
                tuning,
            }));
        }
        let manager = Arc::new(Manager {
            broker,
            unavailable: None,
            changes: tokio::sync::Mutex::new(()),
            running: std::sync::Mutex::new(BTreeMap::new()),
            tuning,
        });
        let stored = manager.load().await?;
        for (name, stored) in stored {
            match stored.definition() {
                Ok(def) => manager.start(def),
                Err(e) => {
                    tracing::error!(trigger = %name, error = %e, "stored trigger definition does not load; not started")
                }
            }
        }
        Ok(manager)
    }

    /// Every stored definition, latest per name, deletions applied.
    async fn load(&self) -> Result<BTreeMap<String, Stored>, TriggerError> {
        let mut out = BTreeMap::new();
        // Created with the first trigger: a broker that never had one shows no extra topic.
        let Some(topic) = self.broker.topics().get(DEFINITIONS_TOPIC) else {
            return Ok(out);
        };
        let part = topic.partition(0).ok_or_else(|| {
            TriggerError::Storage("definitions topic has no partition".to_owned())
        })?;
        let mut offset = part.log_start_offset();
        let end = part.high_watermark();
        while offset < end {
            let read = self
                .broker
                .read(&*part, offset, 1 << 20, None)
                .await
                .map_err(|e| TriggerError::Storage(format!("reading {DEFINITIONS_TOPIC}: {e}")))?;
            if read.records.is_empty() {
                break;
            }
            for batch in sluice_protocol::records::Batches::new(read.records) {
                let batch = batch.map_err(|e| TriggerError::Storage(e.to_string()))?;
                offset = batch.next_offset();
                for record in batch
                    .records()
                    .map_err(|e| TriggerError::Storage(e.to_string()))?
                {
                    let Some(key) = record
                        .key
                        .as_deref()
                        .and_then(|k| std::str::from_utf8(k).ok())
                    else {
                        continue;
                    };
                    match record.value {
                        None => {
                            out.remove(key);
                        }
                        Some(value) => match serde_json::from_slice::<Stored>(&value) {
                            Ok(stored) => {
                                out.insert(key.to_owned(), stored);
                            }
                            Err(e) => {
                                tracing::error!(trigger = %key, error = %e, "stored trigger definition is not valid JSON; ignored")
                            }
                        },
                    }
                }
            }
        }
        Ok(out)
    }

    fn start(&self, def: Definition) {
        let def = Arc::new(def);
        let stats = Arc::new(Stats::default());
        let (stop, stop_rx) = watch::channel(false);
        let task = tokio::spawn(run::run(
            Arc::clone(&self.broker),
            Arc::clone(&def),
            Arc::clone(&stats),
            self.tuning,
            stop_rx,
        ));
        tracing::info!(trigger = %def.spec.name, rule = %def.spec.rule, sink = %def.spec.sink, "trigger started");
        self.running.lock().expect("triggers lock").insert(
            def.spec.name.clone(),
            Running {
                def,
                stats,
                stop,
                task,
            },
        );
    }

    fn check_available(&self) -> Result<(), TriggerError> {
        match &self.unavailable {
            Some(why) => Err(TriggerError::Unavailable(why.clone())),
            None => Ok(()),
        }
    }

    /// Creates a trigger: checks the request (rule, sources, sink), stores the definition
    /// durably, then starts it. Answered once the definition is durable.
    pub async fn create(&self, request: CreateRequest) -> Result<Created, TriggerError> {
        self.check_available()?;
        let _changes = self.changes.lock().await;
        let (spec, generated_secret) = self.validate(request)?;
        // The never-fires search takes up to tens of milliseconds: off the async workers.
        let rule = spec.rule.clone();
        tokio::task::spawn_blocking(move || sluice_rules::check::check(&rule))
            .await
            .map_err(|e| TriggerError::Storage(format!("checking the rule: {e}")))?
            .map_err(|e| TriggerError::Rule {
                message: e.to_string(),
                position: None,
            })?;
        if self
            .running
            .lock()
            .expect("triggers lock")
            .contains_key(&spec.name)
        {
            return Err(TriggerError::Exists(spec.name));
        }
        let incarnation = new_incarnation(self.broker.now_ms());
        let def = Definition { spec, incarnation };
        run::initialize(&self.broker, &def)
            .await
            .map_err(|e| TriggerError::Storage(e.to_string()))?;
        let value = serde_json::to_vec(&Stored::of(&def)).expect("JSON of plain values");
        self.write_definition(&def.spec.name, Some(value)).await?;
        let name = def.spec.name.clone();
        self.start(def);
        let info = self.describe(&name)?;
        Ok(Created {
            info,
            secret: generated_secret,
        })
    }

    /// Checks a create request and builds the spec; returns the generated webhook secret, if
    /// one was generated.
    fn validate(&self, r: CreateRequest) -> Result<(TriggerSpec, Option<String>), TriggerError> {
        let invalid = TriggerError::Invalid;
        validate_name(&r.name).map_err(invalid)?;
        if r.sources.is_empty() {
            return Err(invalid(
                "sources: name at least one source topic".to_owned(),
            ));
        }
        if r.sources.len() > MAX_SOURCES {
            return Err(invalid(format!(
                "sources: at most {MAX_SOURCES} source topics per trigger"
            )));
        }
        let mut sources = Vec::new();
        for source in &r.sources {
            if self.broker.topics().get(source).is_none() {
                return Err(invalid(format!(
                    "source topic {source:?} does not exist: create it first (sluice topic create {source})"
                )));
            }
            if !sources.contains(source) {
                sources.push(source.clone());
            }
        }
        let rule = match (&r.rule, &r.rule_json) {
            (Some(text), None) => {
                sluice_rules::rule::parse(text).map_err(|e| TriggerError::Rule {
                    message: e.render(text),
                    position: Some(e.position),
                })?
            }
            (None, Some(json)) => Rule::from_json(json).map_err(|e| TriggerError::Rule {
                message: e.to_string(),
                position: None,
            })?,
            (Some(_), Some(_)) => {
                return Err(invalid(
                    "give the rule once: either `rule` (text) or `rule_json`".to_owned(),
                ));
            }
            (None, None) => {
                return Err(invalid(
                    "rule: missing; e.g. \"signed_up\" THEN (NOT \"paid\" WITHIN 7d)".to_owned(),
                ));
            }
        };
        let entity = match &r.entity {
            Some(e) => EntityFrom::parse(e).map_err(invalid)?,
            None => EntityFrom::Key,
        };
        let event = match &r.event {
            Some(e) => NameFrom::parse(e).map_err(invalid)?,
            None => NameFrom::default(),
        };
        let sink = Sink::parse(&r.sink).map_err(invalid)?;
        let mut generated = None;
        let (secret, dead_letter_topic) = match &sink {
            Sink::Topic(topic) => {
                sluice_broker::topics::validate_topic_name(topic)
                    .map_err(|e| invalid(format!("sink: {e}")))?;
                if sources.contains(topic) {
                    return Err(invalid(format!(
                        "sink topic {topic:?} is also a source: the trigger would read its own firings"
                    )));
                }
                if r.secret.is_some() || r.dead_letter_topic.is_some() {
                    return Err(invalid(
                        "secret and dead_letter_topic apply to webhook sinks only".to_owned(),
                    ));
                }
                (None, None)
            }
            Sink::Webhook(url) => {
                crate::webhook::check_url(url).map_err(|e| invalid(format!("sink: {e}")))?;
                let secret = match &r.secret {
                    Some(s) if s.len() >= 16 => s.clone(),
                    Some(_) => {
                        return Err(invalid(
                            "secret: use at least 16 characters (or leave it out to have one generated)".to_owned(),
                        ));
                    }
                    None => {
                        let s = new_secret();
                        generated = Some(s.clone());
                        s
                    }
                };
                let dlq = r
                    .dead_letter_topic
                    .clone()
                    .unwrap_or_else(|| format!("{}.dead-letter", r.name));
                sluice_broker::topics::validate_topic_name(&dlq)
                    .map_err(|e| invalid(format!("dead_letter_topic: {e}")))?;
                (Some(secret), Some(dlq))
            }
        };
        let max_attempts = r.max_attempts.unwrap_or(spec::DEFAULT_MAX_ATTEMPTS);
        if !(1..=MAX_ATTEMPTS_MAX).contains(&max_attempts) {
            return Err(invalid(format!(
                "max_attempts: {max_attempts} is out of range 1..={MAX_ATTEMPTS_MAX}"
            )));
        }
        let initial_backoff_ms = r
            .initial_backoff_ms
            .unwrap_or(spec::DEFAULT_INITIAL_BACKOFF_MS);
        let max_backoff_ms = r.max_backoff_ms.unwrap_or(spec::DEFAULT_MAX_BACKOFF_MS);
        for (field, v) in [
            ("initial_backoff_ms", initial_backoff_ms),
            ("max_backoff_ms", max_backoff_ms),
        ] {
            if !(1..=BACKOFF_MS_MAX).contains(&v) {
                return Err(invalid(format!(
                    "{field}: {v} is out of range 1..={BACKOFF_MS_MAX}"
                )));
            }
        }
        if initial_backoff_ms > max_backoff_ms {
            return Err(invalid(format!(
                "initial_backoff_ms ({initial_backoff_ms}) is above max_backoff_ms ({max_backoff_ms})"
            )));
        }
        Ok((
            TriggerSpec {
                name: r.name,
                sources,
                rule,
                entity,
                event,
                sink,
                secret,
                dead_letter_topic,
                max_attempts,
                initial_backoff_ms,
                max_backoff_ms,
                start: r.start.unwrap_or_default(),
                created_ms: self.broker.now_ms(),
            },
            generated,
        ))
    }

    async fn write_definition(
        &self,
        name: &str,
        value: Option<Vec<u8>>,
    ) -> Result<(), TriggerError> {
        let topic = run::ensure_topic(&self.broker, DEFINITIONS_TOPIC, definitions_config(), 1)
            .map_err(|e| TriggerError::Storage(e.to_string()))?;
        let mut buf = BytesMut::new();
        encode_batch(
            &mut buf,
            &[ProducerRecord {
                key: Some(Bytes::from(name.to_owned())),
                value: value.map(Bytes::from),
                headers: Vec::new(),
                timestamp_ms: self.broker.now_ms(),
            }],
        );
        let appended = self
            .broker
            .append(&topic, 0, &buf)
            .map_err(|e| TriggerError::Storage(format!("writing {DEFINITIONS_TOPIC}: {e}")))?;
        appended
            .durable()
            .await
            .map_err(|e| TriggerError::Storage(format!("writing {DEFINITIONS_TOPIC}: {e}")))?;
        Ok(())
    }

    /// Every trigger, by name.
    pub fn list(&self) -> Vec<TriggerInfo> {
        let running = self.running.lock().expect("triggers lock");
        running.values().map(|r| self.info(r)).collect()
    }

    /// One trigger.
    pub fn describe(&self, name: &str) -> Result<TriggerInfo, TriggerError> {
        self.check_available()?;
        let running = self.running.lock().expect("triggers lock");
        running
            .get(name)
            .map(|r| self.info(r))
            .ok_or_else(|| TriggerError::NotFound(name.to_owned()))
    }

    /// Stops a trigger and deletes its definition and state. Answered once the deletion is
    /// durable.
    pub async fn delete(&self, name: &str) -> Result<(), TriggerError> {
        self.check_available()?;
        let _changes = self.changes.lock().await;
        let running = self
            .running
            .lock()
            .expect("triggers lock")
            .remove(name)
            .ok_or_else(|| TriggerError::NotFound(name.to_owned()))?;
        let _ = running.stop.send(true);
        let _ = running.task.await;
        self.write_definition(name, None).await?;
        run::remove_state(&self.broker, &running.def);
        tracing::info!(trigger = %name, "trigger deleted");
        Ok(())
    }

    /// Stops every trigger (broker shutdown); their state is already durable.
    pub async fn shutdown(&self) {
        let running: Vec<Running> = {
            let mut map = self.running.lock().expect("triggers lock");
            std::mem::take(&mut *map).into_values().collect()
        };
        for r in &running {
            let _ = r.stop.send(true);
        }
        for r in running {
            let _ = r.task.await;
        }
    }

    /// The triggers' series for `/metrics` (Prometheus text format), one label per trigger.
    pub fn render_metrics(&self) -> String {
        use std::fmt::Write;
        let infos = self.list();
        let mut out = String::new();
        let families: [MetricFamily; 8] = [
            (
                "sluice_trigger_events_total",
                "counter",
                "Source records evaluated by the trigger since the broker started.",
                |s| s.events,
            ),
            (
                "sluice_trigger_firings_total",
                "counter",
                "Firings the trigger made since the broker started.",
                |s| s.firings,
            ),
            (
                "sluice_trigger_delivered_total",
                "counter",
                "Firings delivered to the sink since the broker started.",
                |s| s.delivered,
            ),
            (
                "sluice_trigger_delivery_failures_total",
                "counter",
                "Webhook attempts that failed since the broker started.",
                |s| s.delivery_failures,
            ),
            (
                "sluice_trigger_dead_lettered_total",
                "counter",
                "Firings sent to the dead-letter topic since the broker started.",
                |s| s.dead_lettered,
            ),
            (
                "sluice_trigger_entities",
                "gauge",
                "Entities whose rule state the trigger keeps.",
                |s| s.entities,
            ),
            (
                "sluice_trigger_lag_records",
                "gauge",
                "Source records not yet read by the trigger.",
                |s| s.lag,
            ),
            (
                "sluice_trigger_running",
                "gauge",
                "1 while the trigger runs, 0 while it starts or after it failed.",
                |s| u64::from(s.state == "running"),
            ),
        ];
        for (name, kind, help, value) in families {
            let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} {kind}");
            for info in &infos {
                let _ = writeln!(
                    out,
                    "{name}{{trigger=\"{}\"}} {}",
                    info.name,
                    value(&info.status)
                );
            }
        }
        let name = "sluice_trigger_skipped_total";
        let _ = writeln!(
            out,
            "# HELP {name} Source records the trigger skipped, by reason, since the broker started.\n# TYPE {name} counter"
        );
        for info in &infos {
            for (reason, n) in &info.status.skipped {
                let _ = writeln!(
                    out,
                    "{name}{{trigger=\"{}\",reason=\"{reason}\"}} {n}",
                    info.name
                );
            }
        }
        out
    }

    fn info(&self, r: &Running) -> TriggerInfo {
        use std::sync::atomic::Ordering::Relaxed;
        let spec = &r.def.spec;
        let (state, error) = r.stats.state.lock().expect("stats lock").clone();
        let mut lag = 0u64;
        for (topic, partition, next) in r.stats.positions.lock().expect("stats lock").iter() {
            if let Some(p) = self
                .broker
                .topics()
                .get(topic)
                .and_then(|t| t.partition(*partition))
            {
                lag += (p.high_watermark() - next).max(0) as u64;
            }
        }
        let mut skipped: BTreeMap<String, u64> = r
            .stats
            .skipped
            .lock()
            .expect("stats lock")
            .iter()
            .map(|(k, v)| ((*k).to_owned(), *v))
            .collect();
        let ignored = r.stats.ignored.load(Relaxed);
        if ignored > 0 {
            skipped.insert("not_in_rule".to_owned(), ignored);
        }
        TriggerInfo {
            name: spec.name.clone(),
            sources: spec.sources.clone(),
            rule: spec.rule.to_string(),
            rule_json: spec.rule.to_json(),
            entity: spec.entity.to_string(),
            event: spec.event.to_string(),
            sink: spec.sink.to_string(),
            dead_letter_topic: spec.dead_letter_topic.clone(),
            start: spec.start,
            created_ms: spec.created_ms,
            status: TriggerStatus {
                state: state.to_owned(),
                error,
                entities: r.stats.entities.load(Relaxed),
                events: r.stats.events.load(Relaxed),
                firings: r.stats.firings.load(Relaxed),
                delivered: r.stats.delivered.load(Relaxed),
                delivery_failures: r.stats.delivery_failures.load(Relaxed),
                dead_lettered: r.stats.dead_lettered.load(Relaxed),
                skipped,
                lag,
            },
        }
    }
}

fn definitions_config() -> TopicConfig {
    let mut c = BTreeMap::new();
    c.insert("retention.ms".to_owned(), "-1".to_owned());
    c.insert("retention.bytes".to_owned(), "-1".to_owned());
    TopicConfig(c)
}

/// A new incarnation id: the time, mixed with the process's random hash keys so two creates
/// in one millisecond differ.
fn new_incarnation(now_ms: i64) -> u64 {
    use std::hash::BuildHasher;
    let random = std::collections::hash_map::RandomState::new().hash_one(now_ms);
    ((now_ms as u64) << 16) ^ (random & 0xffff)
}

/// A webhook signing secret: 32 random bytes, hex, with a prefix that says what it is.
fn new_secret() -> String {
    let bytes: [u8; 32] = rand::random();
    let mut s = String::from("whsec_");
    for b in bytes {
        s.push_str(&format!("{b:02x}"));
    }
    s
}
