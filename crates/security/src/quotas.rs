//! Client quotas, as Kafka has them (KIP-13, KIP-55, KIP-124): how many bytes a second a
//! client may produce and fetch, and what share of the broker's request-handling time its
//! requests may take, per user, per client id, per both, with defaults for each.
//!
//! # The model
//!
//! A quota is set on an *entity*: a user, a client id, or a user and a client id together;
//! either part may be the *default* (Kafka's `<default>`), which applies to each user (or
//! client id) that has no quota of its own. A request from user `u` with client id `c` takes,
//! per quota kind, the first of these entities that has a value for that kind (KIP-55's order):
//!
//! 1. user `u`, client `c`;
//! 2. user `u`, default client;
//! 3. user `u`;
//! 4. default user, client `c`;
//! 5. default user, default client;
//! 6. default user;
//! 7. client `c`;
//! 8. default client.
//!
//! The usage a quota limits is counted per *quota instance*: the entity that matched, with
//! each default replaced by the client's own name. So `users/alice` is shared by all of
//! alice's clients, while a default client quota gives each client id its own allowance.
//!
//! # Rates and throttling
//!
//! Usage is counted in [`SAMPLES`] samples of [`SAMPLE_WINDOW`] each (Kafka's
//! `quota.window.num` = 11 and `quota.window.size.seconds` = 1). The rate is the sum of the
//! samples over the time they span, at least `SAMPLES - 1` windows, so a client that was quiet
//! may burst before it is slowed. When a request takes the total over what the quota allows
//! for that span, the client is throttled for the time it would take the quota to cover the
//! excess: `(total - quota × span) / quota`, at most [`THROTTLE_MAX`]. The broker answers at
//! once with that time in `throttle_time_ms` and reads nothing more from the connection until
//! it has passed (KIP-219), so a well-behaved client slows down instead of timing out.
//!
//! Kinds: `producer_byte_rate` (bytes of Produce requests), `consumer_byte_rate` (record bytes
//! of Fetch responses), `request_percentage` (time the broker's threads spent on the client's
//! requests, as a percentage of one thread: 100 is one whole thread).
//!
//! # Durability
//!
//! The quotas live in `DATA_DIR/security/quotas.json`, rewritten atomically on every change
//! (temp file, fsync, rename, fsync directory), like the users and ACLs; the broker makes the
//! file durable beyond the local disk as its storage mode does for those.

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError, RwLock};
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use crate::durable::{SECURITY_DIR, load_json, security_dir, store_json};
use crate::error::{INVALID_REQUEST, SecurityError};

/// The file, under `DATA_DIR/security`.
pub const QUOTAS_FILE: &str = "quotas.json";

/// Samples a rate is measured over (Kafka's `quota.window.num`).
pub const SAMPLES: usize = 11;

/// The length of one sample (Kafka's `quota.window.size.seconds`).
pub const SAMPLE_WINDOW: Duration = Duration::from_secs(1);

/// The longest a single request throttles its client: the span the rate is measured over.
/// A request bigger than this many seconds of its quota is throttled for this long only.
pub const THROTTLE_MAX: Duration = Duration::from_secs(SAMPLES as u64);

/// How long a quota instance nobody uses keeps its usage (a client that reconnects within
/// it does not start afresh).
const IDLE_EXPIRY: Duration = Duration::from_secs(3600);

/// Kafka's entity type names.
pub const ENTITY_USER: &str = "user";
pub const ENTITY_CLIENT_ID: &str = "client-id";
pub const ENTITY_IP: &str = "ip";

/// What a quota limits.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum QuotaKind {
    /// Bytes of Produce requests per second.
    ProducerByteRate,
    /// Record bytes of Fetch responses per second.
    ConsumerByteRate,
    /// Request-handling time, as a percentage of one thread.
    RequestPercentage,
}

impl QuotaKind {
    pub const ALL: [QuotaKind; 3] = [
        QuotaKind::ProducerByteRate,
        QuotaKind::ConsumerByteRate,
        QuotaKind::RequestPercentage,
    ];

    /// The config key (`producer_byte_rate`, ...).
    pub fn key(self) -> &'static str {
        match self {
            QuotaKind::ProducerByteRate => "producer_byte_rate",
            QuotaKind::ConsumerByteRate => "consumer_byte_rate",
            QuotaKind::RequestPercentage => "request_percentage",
        }
    }

    pub fn from_key(key: &str) -> Option<QuotaKind> {
        QuotaKind::ALL.into_iter().find(|k| k.key() == key)
    }

    fn index(self) -> usize {
        self as usize
    }
}

/// One part of an entity: a name, or the default.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum EntityName {
    Default,
    Name(String),
}

impl EntityName {
    /// Kafka's wire form: `None` is the default.
    pub fn from_wire(name: Option<&str>) -> EntityName {
        name.map_or(EntityName::Default, |n| EntityName::Name(n.to_owned()))
    }

    pub fn to_wire(&self) -> Option<&str> {
        match self {
            EntityName::Default => None,
            EntityName::Name(n) => Some(n),
        }
    }
}

/// What a quota is set on: a user, a client id, or both (never neither).
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct QuotaEntity {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub user: Option<EntityName>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub client_id: Option<EntityName>,
}

impl QuotaEntity {
    /// The entity an AlterClientQuotas entry names: `(entity type, name or None for the
    /// default)` pairs. Refused (INVALID_REQUEST, with what to fix): no parts, a type twice, an
    /// unknown type, and `ip` (connection-rate quotas, which Sluice does not enforce).
    pub fn from_parts<'a>(
        parts: impl IntoIterator<Item = (&'a str, Option<&'a str>)>,
    ) -> Result<QuotaEntity, QuotaError> {
        let mut entity = QuotaEntity {
            user: None,
            client_id: None,
        };
        for (kind, name) in parts {
            let slot = match kind {
                ENTITY_USER => &mut entity.user,
                ENTITY_CLIENT_ID => &mut entity.client_id,
                ENTITY_IP => {
                    return Err(QuotaError::invalid(
                        "ip quotas (connection_creation_rate) are not supported by Sluice; \
                         set quotas on user and client-id entities",
                    ));
                }
                other => {
                    return Err(QuotaError::invalid(format!(
                        "unknown entity type {other:?}: use user and/or client-id"
                    )));
                }
            };
            if slot.is_some() {
                return Err(QuotaError::invalid(format!(
                    "entity type {kind:?} is given twice"
                )));
            }
            *slot = Some(EntityName::from_wire(name));
        }
        if entity.user.is_none() && entity.client_id.is_none() {
            return Err(QuotaError::invalid(
                "the entity is empty: name a user and/or a client-id",
            ));
        }
        Ok(entity)
    }

    /// `(entity type, name or None for the default)` pairs, user first.
    pub fn parts(&self) -> Vec<(&'static str, Option<&str>)> {
        let mut parts = Vec::with_capacity(2);
        if let Some(user) = &self.user {
            parts.push((ENTITY_USER, user.to_wire()));
        }
        if let Some(client) = &self.client_id {
            parts.push((ENTITY_CLIENT_ID, client.to_wire()));
        }
        parts
    }

    /// `user=alice,client-id=<default>`, for logs and metric labels.
    pub fn label(&self) -> String {
        self.parts()
            .into_iter()
            .map(|(kind, name)| format!("{kind}={}", name.unwrap_or("<default>")))
            .collect::<Vec<_>>()
            .join(",")
    }
}

/// A refused quota change or filter: the Kafka error code and a message that says what to fix.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct QuotaError {
    pub code: i16,
    pub message: String,
}

impl QuotaError {
    fn invalid(message: impl Into<String>) -> QuotaError {
        QuotaError {
            code: INVALID_REQUEST,
            message: message.into(),
        }
    }
}

/// One operation of an AlterClientQuotas entry.
#[derive(Debug, Clone, PartialEq)]
pub struct QuotaOp {
    pub key: String,
    pub value: f64,
    pub remove: bool,
}

/// How a DescribeClientQuotas component matches an entity type.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum QuotaMatch {
    /// That exact name.
    Exact(String),
    /// The default.
    Default,
    /// Any name or the default (the entity must have this type).
    Any,
}

/// A DescribeClientQuotas filter: components per entity type, and whether entities may have
/// other types besides (`strict` false) or not.
#[derive(Debug, Clone)]
pub struct QuotaFilter {
    components: Vec<(&'static str, QuotaMatch)>,
    strict: bool,
}

impl QuotaFilter {
    /// `components`: `(entity type, match)`. Refused: an unknown type or one given twice.
    pub fn new<'a>(
        components: impl IntoIterator<Item = (&'a str, QuotaMatch)>,
        strict: bool,
    ) -> Result<QuotaFilter, QuotaError> {
        let mut out: Vec<(&'static str, QuotaMatch)> = Vec::new();
        for (kind, matching) in components {
            let kind = match kind {
                ENTITY_USER => ENTITY_USER,
                ENTITY_CLIENT_ID => ENTITY_CLIENT_ID,
                // No ip quotas can exist: a filter on them matches nothing.
                ENTITY_IP => ENTITY_IP,
                other => {
                    return Err(QuotaError::invalid(format!(
                        "unknown entity type {other:?}: use user, client-id or ip"
                    )));
                }
            };
            if out.iter().any(|(k, _)| *k == kind) {
                return Err(QuotaError::invalid(format!(
                    "entity type {kind:?} is given twice in the filter"
                )));
            }
            out.push((kind, matching));
        }
        Ok(QuotaFilter {
            components: out,
            strict,
        })
    }

    fn matches(&self, entity: &QuotaEntity) -> bool {
        let name_of = |kind: &str| match kind {
            ENTITY_USER => entity.user.as_ref(),
            ENTITY_CLIENT_ID => entity.client_id.as_ref(),
            _ => None,
        };
        let all_match =
            self.components
                .iter()
                .all(|(kind, matching)| match (name_of(kind), matching) {
                    (None, _) => false,
                    (Some(_), QuotaMatch::Any) => true,
                    (Some(EntityName::Default), QuotaMatch::Default) => true,
                    (Some(EntityName::Name(n)), QuotaMatch::Exact(want)) => n == want,
                    _ => false,
                });
        if !all_match {
            return false;
        }
        if self.strict {
            let has = |kind: &str| self.components.iter().any(|(k, _)| *k == kind);
            (entity.user.is_none() || has(ENTITY_USER))
                && (entity.client_id.is_none() || has(ENTITY_CLIENT_ID))
        } else {
            true
        }
    }
}

/// The stored form of `quotas.json`.
#[derive(Debug, Default, Serialize, Deserialize)]
struct QuotaFile {
    quotas: Vec<StoredQuota>,
}

#[derive(Debug, Serialize, Deserialize)]
struct StoredQuota {
    entity: QuotaEntity,
    values: BTreeMap<String, f64>,
}

type Config = BTreeMap<QuotaEntity, BTreeMap<QuotaKind, f64>>;

/// The usage of one quota instance, in [`SAMPLES`] samples.
#[derive(Debug)]
pub struct Rate {
    /// `(start, amount)`; `None` start: unused.
    samples: [(Option<Instant>, f64); SAMPLES],
    current: usize,
    last_used: Option<Instant>,
}

impl Default for Rate {
    fn default() -> Rate {
        Rate {
            samples: [(None, 0.0); SAMPLES],
            current: 0,
            last_used: None,
        }
    }
}

impl Rate {
    /// Adds `amount` at `now`, and returns how long the client must wait for the usage to be
    /// within `quota` (per second) again: zero when it is.
    pub fn record(&mut self, now: Instant, amount: f64, quota: f64) -> Duration {
        self.last_used = Some(now);
        let (start, _) = self.samples[self.current];
        if start.is_none_or(|s| now.saturating_duration_since(s) >= SAMPLE_WINDOW) {
            self.current = (self.current + 1) % SAMPLES;
            self.samples[self.current] = (Some(now), 0.0);
        }
        self.samples[self.current].1 += amount;
        self.throttle(now, quota)
    }

    /// How long the usage stays over `quota` at `now`.
    pub fn throttle(&self, now: Instant, quota: f64) -> Duration {
        let (total, elapsed) = self.measure(now);
        let excess = total - quota * elapsed;
        if quota <= 0.0 || excess <= 0.0 {
            return Duration::ZERO;
        }
        Duration::from_secs_f64((excess / quota).min(THROTTLE_MAX.as_secs_f64()))
    }

    /// The measured rate per second at `now`.
    pub fn rate(&self, now: Instant) -> f64 {
        let (total, elapsed) = self.measure(now);
        total / elapsed
    }

    /// The usage of the samples still in the span at `now`, and the seconds it is spread
    /// over (at least `SAMPLES - 1` windows).
    fn measure(&self, now: Instant) -> (f64, f64) {
        let span = SAMPLE_WINDOW * SAMPLES as u32;
        let mut total = 0.0;
        let mut oldest = now;
        for (start, amount) in &self.samples {
            if let Some(start) = *start
                && now.saturating_duration_since(start) < span
            {
                total += amount;
                oldest = oldest.min(start);
            }
        }
        let elapsed = now
            .saturating_duration_since(oldest)
            .max(SAMPLE_WINDOW * (SAMPLES as u32 - 1));
        (total, elapsed.as_secs_f64())
    }
}

/// Where one kind of quota applies to one client: its value and the usage it is counted in.
#[derive(Debug, Clone)]
pub struct Applied {
    pub quota: f64,
    pub usage: Arc<Mutex<Rate>>,
}

impl Applied {
    /// Records `amount` at `now` and returns the throttle time.
    pub fn record(&self, now: Instant, amount: f64) -> Duration {
        self.usage
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .record(now, amount, self.quota)
    }
}

/// The quotas that apply to one client (user and client id), per kind; resolved once and
/// reused until the quotas change ([`ClientQuotas::generation`]).
#[derive(Debug, Clone, Default)]
pub struct Resolved {
    pub generation: u64,
    applied: [Option<Applied>; 3],
}

impl Resolved {
    pub fn get(&self, kind: QuotaKind) -> Option<&Applied> {
        self.applied[kind.index()].as_ref()
    }

    /// Whether any quota applies.
    pub fn any(&self) -> bool {
        self.applied.iter().any(Option::is_some)
    }
}

/// Throttling counts per kind, for `/metrics`.
#[derive(Debug, Default)]
struct Stats {
    throttled: [AtomicU64; 3],
    throttle_micros: [AtomicU64; 3],
}

/// The quotas of a broker: the durable configuration and the usage of every quota instance.
#[derive(Debug)]
pub struct ClientQuotas {
    data_dir: PathBuf,
    path: PathBuf,
    config: RwLock<Arc<Config>>,
    /// Bumped on every change of `config` (0: there are no quotas at all).
    generation: AtomicU64,
    /// Usage per quota instance: `(kind, user, client id)` with the defaults filled in.
    usage: Mutex<HashMap<InstanceKey, Arc<Mutex<Rate>>>>,
    /// Serialises changes (read, change, write).
    changing: Mutex<()>,
    stats: Stats,
}

/// Key of a quota instance.
type InstanceKey = (QuotaKind, Option<String>, Option<String>);

impl ClientQuotas {
    /// Loads `DATA_DIR/security/quotas.json` (none when it does not exist).
    pub fn open(data_dir: &Path) -> Result<ClientQuotas, SecurityError> {
        let path = data_dir.join(SECURITY_DIR).join(QUOTAS_FILE);
        let quotas = ClientQuotas {
            data_dir: data_dir.to_owned(),
            path,
            config: RwLock::new(Arc::new(Config::new())),
            generation: AtomicU64::new(0),
            usage: Mutex::new(HashMap::new()),
            changing: Mutex::new(()),
            stats: Stats::default(),
        };
        quotas.reload()?;
        Ok(quotas)
    }

    /// The file the quotas are kept in.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Reads the file again (after another broker's change was written into it).
    pub fn reload(&self) -> Result<(), SecurityError> {
        let _changing = self.changing.lock().unwrap_or_else(PoisonError::into_inner);
        let file: QuotaFile = load_json(&self.path)?.unwrap_or_default();
        let mut config = Config::new();
        for stored in file.quotas {
            if stored.entity.user.is_none() && stored.entity.client_id.is_none() {
                return Err(SecurityError::InvalidStore {
                    path: self.path.clone(),
                    reason: "a quota with an empty entity".to_owned(),
                });
            }
            let mut values = BTreeMap::new();
            for (key, value) in stored.values {
                let kind =
                    QuotaKind::from_key(&key).ok_or_else(|| SecurityError::InvalidStore {
                        path: self.path.clone(),
                        reason: format!("unknown quota key {key:?}"),
                    })?;
                values.insert(kind, value);
            }
            if !values.is_empty() {
                config.insert(stored.entity, values);
            }
        }
        self.install(config);
        Ok(())
    }

    fn install(&self, config: Config) {
        let empty = config.is_empty();
        *self.config.write().unwrap_or_else(PoisonError::into_inner) = Arc::new(config);
        // 0 means "no quotas", so a connection can skip everything; any other value changes
        // with every change.
        if empty {
            self.generation.store(0, Ordering::Release);
        } else {
            let next = self.generation.load(Ordering::Acquire).max(1) + 1;
            self.generation.store(next, Ordering::Release);
        }
    }

    /// Changes whenever the quotas do; 0 while there are none (the fast path).
    pub fn generation(&self) -> u64 {
        self.generation.load(Ordering::Acquire)
    }

    fn snapshot(&self) -> Arc<Config> {
        Arc::clone(&self.config.read().unwrap_or_else(PoisonError::into_inner))
    }

    /// Every quota: entity and values.
    pub fn entries(&self) -> Vec<(QuotaEntity, Vec<(QuotaKind, f64)>)> {
        self.snapshot()
            .iter()
            .map(|(e, v)| (e.clone(), v.iter().map(|(k, v)| (*k, *v)).collect()))
            .collect()
    }

    /// The quotas DescribeClientQuotas answers for `filter`.
    pub fn describe(&self, filter: &QuotaFilter) -> Vec<(QuotaEntity, Vec<(QuotaKind, f64)>)> {
        self.entries()
            .into_iter()
            .filter(|(entity, _)| filter.matches(entity))
            .collect()
    }

    /// Applies AlterClientQuotas entries, each on its own: an entry is refused whole or made
    /// whole. With `validate_only`, nothing changes. Returns each entry's outcome and whether
    /// the file changed (written and fsynced when this returns).
    pub fn alter(
        &self,
        entries: Vec<(Result<QuotaEntity, QuotaError>, Vec<QuotaOp>)>,
        validate_only: bool,
    ) -> Result<(Vec<Result<(), QuotaError>>, bool), SecurityError> {
        let _changing = self.changing.lock().unwrap_or_else(PoisonError::into_inner);
        let mut config = (*self.snapshot()).clone();
        let mut outcomes = Vec::with_capacity(entries.len());
        let mut changed = false;
        for (entity, ops) in entries {
            let outcome = entity.and_then(|entity| {
                let ops = validate_ops(&ops)?;
                if !validate_only {
                    let values = config.entry(entity.clone()).or_default();
                    for (kind, value) in ops {
                        let before = match value {
                            Some(v) => values.insert(kind, v),
                            None => values.remove(&kind),
                        };
                        changed |= before != value;
                    }
                    if values.is_empty() {
                        config.remove(&entity);
                    }
                }
                Ok(())
            });
            outcomes.push(outcome);
        }
        if changed {
            security_dir(&self.data_dir)?;
            let file = QuotaFile {
                quotas: config
                    .iter()
                    .map(|(entity, values)| StoredQuota {
                        entity: entity.clone(),
                        values: values
                            .iter()
                            .map(|(k, v)| (k.key().to_owned(), *v))
                            .collect(),
                    })
                    .collect(),
            };
            store_json(&self.path, &file)?;
            self.install(config);
        }
        Ok((outcomes, changed))
    }

    /// The quotas that apply to a client of user `user` (the principal's name, `ANONYMOUS`
    /// without authentication) with client id `client_id` (empty when it sent none).
    pub fn resolve(&self, user: &str, client_id: &str, now: Instant) -> Resolved {
        let generation = self.generation();
        let mut resolved = Resolved {
            generation,
            applied: Default::default(),
        };
        if generation == 0 {
            return resolved;
        }
        let config = self.snapshot();
        let mut usage = self.usage.lock().unwrap_or_else(PoisonError::into_inner);
        for kind in QuotaKind::ALL {
            let Some((entity, quota)) = lookup(&config, kind, user, client_id) else {
                continue;
            };
            let key: InstanceKey = (
                kind,
                entity.user.as_ref().map(|_| user.to_owned()),
                entity.client_id.as_ref().map(|_| client_id.to_owned()),
            );
            let rate = Arc::clone(usage.entry(key).or_default());
            resolved.applied[kind.index()] = Some(Applied { quota, usage: rate });
        }
        // Forget instances nobody holds that have been idle a long time.
        if usage.len() > 1024 {
            usage.retain(|_, rate| {
                Arc::strong_count(rate) > 1
                    || rate
                        .lock()
                        .unwrap_or_else(PoisonError::into_inner)
                        .last_used
                        .is_some_and(|t| now.saturating_duration_since(t) < IDLE_EXPIRY)
            });
        }
        resolved
    }

    /// Counts one throttled request of `kind` (for `/metrics`).
    pub fn throttled(&self, kind: QuotaKind, time: Duration) {
        self.stats.throttled[kind.index()].fetch_add(1, Ordering::Relaxed);
        self.stats.throttle_micros[kind.index()]
            .fetch_add(time.as_micros() as u64, Ordering::Relaxed);
    }

    /// `(kind, requests throttled, total throttle time)` since the start.
    pub fn throttle_stats(&self) -> Vec<(QuotaKind, u64, Duration)> {
        QuotaKind::ALL
            .into_iter()
            .map(|k| {
                (
                    k,
                    self.stats.throttled[k.index()].load(Ordering::Relaxed),
                    Duration::from_micros(
                        self.stats.throttle_micros[k.index()].load(Ordering::Relaxed),
                    ),
                )
            })
            .collect()
    }
}

/// The entity whose `kind` quota applies to `user` / `client_id` (KIP-55's order), and its value.
fn lookup<'c>(
    config: &'c Config,
    kind: QuotaKind,
    user: &str,
    client_id: &str,
) -> Option<(&'c QuotaEntity, f64)> {
    let user_name = EntityName::Name(user.to_owned());
    let client_name = EntityName::Name(client_id.to_owned());
    let order = [
        (Some(&user_name), Some(&client_name)),
        (Some(&user_name), Some(&EntityName::Default)),
        (Some(&user_name), None),
        (Some(&EntityName::Default), Some(&client_name)),
        (Some(&EntityName::Default), Some(&EntityName::Default)),
        (Some(&EntityName::Default), None),
        (None, Some(&client_name)),
        (None, Some(&EntityName::Default)),
    ];
    order.into_iter().find_map(|(user, client)| {
        let probe = QuotaEntity {
            user: user.cloned(),
            client_id: client.cloned(),
        };
        config
            .get_key_value(&probe)
            .and_then(|(entity, values)| values.get(&kind).map(|v| (entity, *v)))
    })
}

/// Checks an entry's operations: known keys, each once, values a quota can have. `None`
/// value: remove.
fn validate_ops(ops: &[QuotaOp]) -> Result<Vec<(QuotaKind, Option<f64>)>, QuotaError> {
    let mut out: Vec<(QuotaKind, Option<f64>)> = Vec::with_capacity(ops.len());
    for op in ops {
        let kind = match QuotaKind::from_key(&op.key) {
            Some(kind) => kind,
            None if op.key == "controller_mutation_rate" => {
                return Err(QuotaError::invalid(
                    "controller_mutation_rate is not supported by Sluice; the supported keys are \
                     producer_byte_rate, consumer_byte_rate and request_percentage",
                ));
            }
            None => {
                return Err(QuotaError::invalid(format!(
                    "unknown quota key {:?}: the supported keys are producer_byte_rate, \
                     consumer_byte_rate and request_percentage",
                    op.key
                )));
            }
        };
        if out.iter().any(|(k, _)| *k == kind) {
            return Err(QuotaError::invalid(format!(
                "quota key {:?} is given twice",
                op.key
            )));
        }
        if op.remove {
            out.push((kind, None));
            continue;
        }
        let v = op.value;
        if !v.is_finite() || v <= 0.0 {
            return Err(QuotaError::invalid(format!(
                "{} must be a positive number, not {v}",
                op.key
            )));
        }
        if kind != QuotaKind::RequestPercentage && (v.fract() != 0.0 || v > i64::MAX as f64) {
            return Err(QuotaError::invalid(format!(
                "{} must be a whole number of bytes per second, not {v}",
                op.key
            )));
        }
        out.push((kind, Some(v)));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entity(user: Option<Option<&str>>, client: Option<Option<&str>>) -> QuotaEntity {
        QuotaEntity {
            user: user.map(EntityName::from_wire),
            client_id: client.map(EntityName::from_wire),
        }
    }

    fn set(key: &str, value: f64) -> QuotaOp {
        QuotaOp {
            key: key.to_owned(),
            value,
            remove: false,
        }
    }

    fn remove(key: &str) -> QuotaOp {
        QuotaOp {
            key: key.to_owned(),
            value: 0.0,
            remove: true,
        }
    }

    fn alter_ok(q: &ClientQuotas, e: QuotaEntity, ops: Vec<QuotaOp>) {
        let (outcomes, _) = q.alter(vec![(Ok(e), ops)], false).unwrap();
        assert_eq!(outcomes, vec![Ok(())]);
    }

    #[test]
    fn precedence_follows_kip_55_and_defaults_count_per_client() {
        let dir = tempfile::tempdir().unwrap();
        let q = ClientQuotas::open(dir.path()).unwrap();
        assert_eq!(q.generation(), 0);
        let p = "producer_byte_rate";
        alter_ok(&q, entity(None, Some(None)), vec![set(p, 8.0)]);
        alter_ok(&q, entity(None, Some(Some("app"))), vec![set(p, 7.0)]);
        alter_ok(&q, entity(Some(None), None), vec![set(p, 6.0)]);
        alter_ok(&q, entity(Some(None), Some(None)), vec![set(p, 5.0)]);
        alter_ok(&q, entity(Some(None), Some(Some("app"))), vec![set(p, 4.0)]);
        alter_ok(&q, entity(Some(Some("alice")), None), vec![set(p, 3.0)]);
        alter_ok(
            &q,
            entity(Some(Some("alice")), Some(None)),
            vec![set(p, 2.0)],
        );
        alter_ok(
            &q,
            entity(Some(Some("alice")), Some(Some("app"))),
            vec![set(p, 1.0)],
        );
        let now = Instant::now();
        let quota = |u: &str, c: &str| {
            q.resolve(u, c, now)
                .get(QuotaKind::ProducerByteRate)
                .map(|a| a.quota)
        };
        assert_eq!(quota("alice", "app"), Some(1.0));
        assert_eq!(quota("alice", "other"), Some(2.0));
        assert_eq!(quota("bob", "app"), Some(4.0));
        assert_eq!(quota("bob", "other"), Some(5.0));
        // Other kinds have no quota.
        assert!(
            q.resolve("alice", "app", now)
                .get(QuotaKind::ConsumerByteRate)
                .is_none()
        );
        // Removing entries falls back down the order.
        alter_ok(
            &q,
            entity(Some(Some("alice")), Some(Some("app"))),
            vec![remove(p)],
        );
        alter_ok(&q, entity(Some(Some("alice")), Some(None)), vec![remove(p)]);
        assert_eq!(quota("alice", "app"), Some(3.0));
        alter_ok(&q, entity(Some(Some("alice")), None), vec![remove(p)]);
        alter_ok(&q, entity(Some(None), Some(Some("app"))), vec![remove(p)]);
        alter_ok(&q, entity(Some(None), Some(None)), vec![remove(p)]);
        assert_eq!(quota("alice", "app"), Some(6.0));
        alter_ok(&q, entity(Some(None), None), vec![remove(p)]);
        assert_eq!(quota("alice", "app"), Some(7.0));
        assert_eq!(quota("alice", "x"), Some(8.0));

        // A default client quota counts each client id on its own; a named user's quota is
        // shared by all its clients.
        let a = q.resolve("u", "one", now);
        let b = q.resolve("u", "two", now);
        let (a, b) = (
            a.get(QuotaKind::ProducerByteRate).unwrap(),
            b.get(QuotaKind::ProducerByteRate).unwrap(),
        );
        assert!(!Arc::ptr_eq(&a.usage, &b.usage));
        alter_ok(&q, entity(Some(Some("carol")), None), vec![set(p, 100.0)]);
        let a = q.resolve("carol", "one", now);
        let b = q.resolve("carol", "two", now);
        assert!(Arc::ptr_eq(
            &a.get(QuotaKind::ProducerByteRate).unwrap().usage,
            &b.get(QuotaKind::ProducerByteRate).unwrap().usage
        ));
    }

    #[test]
    fn throttle_is_the_time_the_quota_needs_to_cover_the_excess() {
        let mut rate = Rate::default();
        let t0 = Instant::now();
        // 10 windows of burst allowance at 100/s: 1,000 units pass untouched.
        assert_eq!(rate.record(t0, 1_000.0, 100.0), Duration::ZERO);
        // 500 more: 500 over, 5 s at 100/s.
        let throttle = rate.record(t0, 500.0, 100.0);
        assert!((throttle.as_secs_f64() - 5.0).abs() < 1e-6, "{throttle:?}");
        // Capped at the measured span.
        assert_eq!(rate.record(t0, 1e9, 100.0), THROTTLE_MAX);
        // Long after, the samples have expired: nothing to wait for.
        let later = t0 + Duration::from_secs(60);
        assert_eq!(rate.record(later, 1.0, 100.0), Duration::ZERO);
    }

    #[test]
    fn a_steady_client_at_twice_its_quota_is_throttled_about_half_the_time() {
        let mut rate = Rate::default();
        let t0 = Instant::now();
        let mut now = t0;
        let mut sent = 0.0;
        // Sends 200 units whenever it is allowed, at most every 100 ms, for 60 s.
        while now < t0 + Duration::from_secs(60) {
            let throttle = rate.record(now, 200.0, 1_000.0);
            sent += 200.0;
            now += throttle.max(Duration::from_millis(100));
        }
        let per_second = sent / 60.0;
        assert!(
            (1_000.0..1_300.0).contains(&per_second),
            "{per_second}/s against a quota of 1000/s (the first 10 s may burst)"
        );
        assert!(rate.rate(now) < 1_300.0);
    }

    #[test]
    fn alter_validates_each_entry_on_its_own() {
        let dir = tempfile::tempdir().unwrap();
        let q = ClientQuotas::open(dir.path()).unwrap();
        let good = entity(Some(Some("alice")), None);
        let entries = vec![
            (Ok(good.clone()), vec![set("producer_byte_rate", 1024.0)]),
            (Ok(good.clone()), vec![set("producer_byte_rate", 1.5)]),
            (Ok(good.clone()), vec![set("consumer_byte_rate", -1.0)]),
            (Ok(good.clone()), vec![set("nonsense", 1.0)]),
            (Ok(good.clone()), vec![set("controller_mutation_rate", 1.0)]),
            (
                Ok(good.clone()),
                vec![set("request_percentage", 1.0), remove("request_percentage")],
            ),
            (
                QuotaEntity::from_parts([("ip", Some("10.0.0.1"))]),
                vec![set("producer_byte_rate", 1.0)],
            ),
            (
                QuotaEntity::from_parts([("user", Some("a")), ("user", Some("b"))]),
                vec![],
            ),
            (QuotaEntity::from_parts([]), vec![]),
            (Ok(good.clone()), vec![set("request_percentage", 12.5)]),
        ];
        let (outcomes, changed) = q.alter(entries, false).unwrap();
        assert!(changed);
        let ok: Vec<bool> = outcomes.iter().map(Result::is_ok).collect();
        assert_eq!(
            ok,
            [
                true, false, false, false, false, false, false, false, false, true
            ]
        );
        for e in outcomes.iter().filter_map(|o| o.as_ref().err()) {
            assert_eq!(e.code, INVALID_REQUEST);
            assert!(!e.message.is_empty());
        }
        assert_eq!(
            q.entries(),
            vec![(
                good.clone(),
                vec![
                    (QuotaKind::ProducerByteRate, 1024.0),
                    (QuotaKind::RequestPercentage, 12.5)
                ]
            )]
        );
        // validate_only changes nothing.
        let (outcomes, changed) = q
            .alter(
                vec![(Ok(good.clone()), vec![remove("producer_byte_rate")])],
                true,
            )
            .unwrap();
        assert_eq!(outcomes, vec![Ok(())]);
        assert!(!changed);
        assert_eq!(q.entries().len(), 1);
    }

    #[test]
    fn quotas_survive_a_reopen_and_removing_the_last_value_drops_the_entity() {
        let dir = tempfile::tempdir().unwrap();
        let q = ClientQuotas::open(dir.path()).unwrap();
        let e = entity(Some(None), Some(Some("app")));
        alter_ok(&q, e.clone(), vec![set("consumer_byte_rate", 2048.0)]);
        let again = ClientQuotas::open(dir.path()).unwrap();
        assert_eq!(
            again.entries(),
            vec![(e.clone(), vec![(QuotaKind::ConsumerByteRate, 2048.0)])]
        );
        assert_ne!(again.generation(), 0);
        alter_ok(&again, e, vec![remove("consumer_byte_rate")]);
        assert!(again.entries().is_empty());
        assert_eq!(again.generation(), 0);
        assert!(ClientQuotas::open(dir.path()).unwrap().entries().is_empty());
    }

    #[test]
    fn describe_filters_match_like_kafka() {
        let dir = tempfile::tempdir().unwrap();
        let q = ClientQuotas::open(dir.path()).unwrap();
        let alice = entity(Some(Some("alice")), None);
        let alice_app = entity(Some(Some("alice")), Some(Some("app")));
        let default_user = entity(Some(None), None);
        let app = entity(None, Some(Some("app")));
        for e in [&alice, &alice_app, &default_user, &app] {
            alter_ok(&q, e.clone(), vec![set("producer_byte_rate", 10.0)]);
        }
        let found = |components: Vec<(&str, QuotaMatch)>, strict: bool| -> Vec<QuotaEntity> {
            let filter = QuotaFilter::new(components, strict).unwrap();
            q.describe(&filter).into_iter().map(|(e, _)| e).collect()
        };
        let exact = |n: &str| QuotaMatch::Exact(n.to_owned());
        let mut got = found(vec![("user", exact("alice"))], false);
        got.sort();
        let mut want = vec![alice.clone(), alice_app.clone()];
        want.sort();
        assert_eq!(got, want);
        assert_eq!(
            found(vec![("user", exact("alice"))], true),
            vec![alice.clone()]
        );
        assert_eq!(
            found(vec![("user", QuotaMatch::Default)], false),
            vec![default_user]
        );
        assert_eq!(found(vec![("client-id", QuotaMatch::Any)], true), vec![app]);
        assert_eq!(found(vec![], false).len(), 4);
        assert!(found(vec![("ip", QuotaMatch::Any)], false).is_empty());
        assert!(QuotaFilter::new([("group", QuotaMatch::Any)], false).is_err());
        assert!(
            QuotaFilter::new(
                [("user", QuotaMatch::Any), ("user", QuotaMatch::Default)],
                false
            )
            .is_err()
        );
    }
}
