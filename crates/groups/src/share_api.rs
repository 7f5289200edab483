//! The coordinator's share-group requests (KIP-932): ShareGroupHeartbeat, the share session
//! and acknowledgement part of ShareFetch and ShareAcknowledge, acquisition, describe, the
//! share-partition offsets admin APIs, and the group configs (DescribeConfigs and
//! IncrementalAlterConfigs on GROUP resources).
//!
//! Share-partition state lives with the group, on the group's coordinator: this broker, in
//! local and object-storage modes. Reads from the log happen under the coordinator's lock
//! through a [`ShareLog`] the broker gives (synchronous reads of bytes already local; a read
//! that needs a load first is reported back so the broker loads it and asks again).

use std::collections::BTreeMap;

use bytes::Bytes;
use uuid::Uuid;

use crate::assignor::TopicInfo;
use crate::consumer::ConsumerConfig;
use crate::share::{
    self, AckError, AckOutcome, AcquirePolicy, Acquired, AutoOffsetReset, SessionOutcome,
    ShareSettings, TopicPartition,
};
use crate::{Coordinator, Durable, Group, GroupConfig, GroupError, GroupType, Kind};

/// The log as share fetches read it.
pub trait ShareLog {
    /// `(log start offset, high watermark)` of a partition; `None` if it does not exist.
    fn offsets(&self, tp: TopicPartition) -> Option<(i64, i64)>;
    /// Whole batches from `offset`, about `max_bytes` at most (at least one batch), and the
    /// first offset after them.
    fn read(&self, tp: TopicPartition, offset: i64, max_bytes: usize) -> ShareRead;
}

/// What a [`ShareLog::read`] found.
#[derive(Debug)]
pub enum ShareRead {
    /// Batches and the offset after the last of them (`bytes` empty: nothing to read).
    Records { bytes: Bytes, end: i64 },
    /// The range must be brought in first (object storage): load it and fetch again.
    NeedsLoad,
    /// The read failed: a Kafka error code and a message.
    Failed(i16, String),
}

/// One partition's acknowledgement batches: `(first offset, last offset, types)` each.
pub type AckBatches = Vec<(i64, i64, Vec<i8>)>;

/// One partition of a share fetch's answer.
#[derive(Debug, Clone, Default)]
pub struct PartitionFetched {
    pub tp: TopicPartition,
    /// A Kafka error code and message for the partition's fetch.
    pub error: Option<(i16, String)>,
    pub records: Option<Bytes>,
    pub acquired: Vec<Acquired>,
}

/// A partition a share fetch must load (object storage) before it can read it.
pub type Load = (TopicPartition, i64);

/// What a share fetch must wait for before it acquires again.
#[derive(Default)]
pub struct AcquireWaits {
    /// Ranges to bring in from object storage first.
    pub loads: Vec<Load>,
    /// The group's state with share-partitions it started just now: their start offsets
    /// must be durable before any of their records is handed out, or a crash could start
    /// them again at a later log end and skip what was delivered.
    pub started: Option<Durable>,
}

impl std::fmt::Debug for AcquireWaits {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AcquireWaits")
            .field("loads", &self.loads)
            .field("started", &self.started.is_some())
            .finish()
    }
}

impl AcquireWaits {
    pub fn is_empty(&self) -> bool {
        self.loads.is_empty() && self.started.is_none()
    }

    /// Waits for the durable start of new share-partitions, if any.
    pub async fn started(&mut self) -> Result<(), GroupError> {
        match self.started.take() {
            Some(d) => d.await.map_err(GroupError::StateNotStored),
            None => Ok(()),
        }
    }
}

/// The first read of a share fetch per partition: enough for hundreds of small records, so
/// a fetch that may take a few hundred does not read megabytes to hand out a slice of them.
const FIRST_READ_BYTES: usize = 64 << 10;

/// Names of every group config a group can be given.
pub const GROUP_CONFIGS: &[&str] = &[
    "consumer.session.timeout.ms",
    "consumer.heartbeat.interval.ms",
    "share.session.timeout.ms",
    "share.heartbeat.interval.ms",
    "share.record.lock.duration.ms",
    "share.delivery.count.limit",
    "share.partition.max.record.locks",
    "share.auto.offset.reset",
    "share.isolation.level",
    "share.acquire.policy",
];

/// Bounds on the numeric group configs: `(name, min, max)`.
const NUMERIC_BOUNDS: &[(&str, i64, i64)] = &[
    ("consumer.session.timeout.ms", 1_000, 1_800_000),
    ("consumer.heartbeat.interval.ms", 100, 600_000),
    ("share.session.timeout.ms", 1_000, 1_800_000),
    ("share.heartbeat.interval.ms", 100, 600_000),
    ("share.record.lock.duration.ms", 1_000, 3_600_000),
    ("share.delivery.count.limit", 2, 10),
    ("share.partition.max.record.locks", 100, 10_000),
];

/// The effective settings of a share group: `defaults` with its `configs` on top (configs
/// were validated when set; a value that does not parse keeps the default).
pub(crate) fn share_settings(
    defaults: &ShareSettings,
    configs: &BTreeMap<String, String>,
) -> ShareSettings {
    let mut s = defaults.clone();
    let num = |name: &str| configs.get(name).and_then(|v| v.parse::<i64>().ok());
    if let Some(v) = num("share.session.timeout.ms") {
        s.session_timeout_ms = i32::try_from(v).unwrap_or(s.session_timeout_ms);
    }
    if let Some(v) = num("share.heartbeat.interval.ms") {
        s.heartbeat_interval_ms = i32::try_from(v).unwrap_or(s.heartbeat_interval_ms);
    }
    if let Some(v) = num("share.record.lock.duration.ms") {
        s.record_lock_duration_ms = v;
    }
    if let Some(v) = num("share.delivery.count.limit") {
        s.delivery_count_limit = i16::try_from(v).unwrap_or(s.delivery_count_limit);
    }
    if let Some(v) = num("share.partition.max.record.locks") {
        s.max_record_locks = u32::try_from(v).unwrap_or(s.max_record_locks);
    }
    if let Some(v) = configs
        .get("share.auto.offset.reset")
        .and_then(|v| AutoOffsetReset::from_name(v))
    {
        s.auto_offset_reset = v;
    }
    if let Some(v) = configs
        .get("share.acquire.policy")
        .and_then(|v| AcquirePolicy::from_name(v))
    {
        s.acquire_policy = v;
    }
    s
}

/// The effective settings of a KIP-848 consumer group: `defaults` with its `configs` on top.
pub(crate) fn consumer_settings(
    defaults: &ConsumerConfig,
    configs: &BTreeMap<String, String>,
) -> ConsumerConfig {
    let mut c = defaults.clone();
    let num = |name: &str| configs.get(name).and_then(|v| v.parse::<i32>().ok());
    if let Some(v) = num("consumer.session.timeout.ms") {
        c.session_timeout_ms = v;
    }
    if let Some(v) = num("consumer.heartbeat.interval.ms") {
        c.heartbeat_interval_ms = v;
    }
    c
}

/// Puts a group's configs into effect on its state machine (consumer and share groups; a
/// classic group's timeouts come from its members' JoinGroup).
pub(crate) fn apply_configs(config: &GroupConfig, group: &mut Group) {
    match &mut group.kind {
        Kind::Share(g) => g.set_settings(share_settings(&config.share, &group.configs)),
        Kind::Consumer(g) => g.set_config(consumer_settings(&config.consumer, &group.configs)),
        Kind::Classic(_) => {}
    }
}

/// The value a group config has when the group does not set it.
fn default_value(config: &GroupConfig, name: &str) -> String {
    let defaults = &config.share;
    match name {
        "consumer.session.timeout.ms" => config.consumer.session_timeout_ms.to_string(),
        "consumer.heartbeat.interval.ms" => config.consumer.heartbeat_interval_ms.to_string(),
        "share.session.timeout.ms" => defaults.session_timeout_ms.to_string(),
        "share.heartbeat.interval.ms" => defaults.heartbeat_interval_ms.to_string(),
        "share.record.lock.duration.ms" => defaults.record_lock_duration_ms.to_string(),
        "share.delivery.count.limit" => defaults.delivery_count_limit.to_string(),
        "share.partition.max.record.locks" => defaults.max_record_locks.to_string(),
        "share.auto.offset.reset" => defaults.auto_offset_reset.name().to_owned(),
        "share.isolation.level" => "read_uncommitted".to_owned(),
        "share.acquire.policy" => defaults.acquire_policy.name().to_owned(),
        _ => String::new(),
    }
}

/// Checks one group config value; the error says what to fix.
fn validate_config(name: &str, value: &str) -> Result<(), GroupError> {
    let invalid = |why: String| GroupError::InvalidConfig(why);
    if let Some(&(_, min, max)) = NUMERIC_BOUNDS.iter().find(|(n, _, _)| *n == name) {
        let v: i64 = value
            .parse()
            .map_err(|_| invalid(format!("{name} must be a whole number, got '{value}'")))?;
        if !(min..=max).contains(&v) {
            return Err(invalid(format!(
                "{name} must be between {min} and {max}, got {v}"
            )));
        }
        return Ok(());
    }
    match name {
        "share.auto.offset.reset" if AutoOffsetReset::from_name(value).is_none() => Err(invalid(
            format!("share.auto.offset.reset must be 'earliest' or 'latest', got '{value}'"),
        )),
        // Transactions are refused at produce, so both levels read the same records.
        "share.isolation.level" if value != "read_uncommitted" && value != "read_committed" => {
            Err(invalid(format!(
                "share.isolation.level must be 'read_uncommitted' or 'read_committed', got '{value}'"
            )))
        }
        "share.acquire.policy" if AcquirePolicy::from_name(value).is_none() => Err(invalid(
            format!("share.acquire.policy must be 'fair' or 'greedy', got '{value}'"),
        )),
        n if GROUP_CONFIGS.contains(&n) => Ok(()),
        _ => Err(invalid(format!(
            "unknown group config '{name}'; group configs are: {}",
            GROUP_CONFIGS.join(", ")
        ))),
    }
}

/// Checks the configs that depend on each other: a heartbeat interval below its session
/// timeout (either may be the broker's default).
fn check_together(
    config: &GroupConfig,
    configs: &BTreeMap<String, String>,
) -> Result<(), GroupError> {
    let consumer = consumer_settings(&config.consumer, configs);
    if consumer.heartbeat_interval_ms >= consumer.session_timeout_ms {
        return Err(GroupError::InvalidConfig(format!(
            "consumer.heartbeat.interval.ms ({}) must be less than consumer.session.timeout.ms ({})",
            consumer.heartbeat_interval_ms, consumer.session_timeout_ms
        )));
    }
    let share = share_settings(&config.share, configs);
    if share.heartbeat_interval_ms >= share.session_timeout_ms {
        return Err(GroupError::InvalidConfig(format!(
            "share.heartbeat.interval.ms ({}) must be less than share.session.timeout.ms ({})",
            share.heartbeat_interval_ms, share.session_timeout_ms
        )));
    }
    Ok(())
}

/// One group config as DescribeConfigs reports it.
#[derive(Debug, Clone, PartialEq)]
pub struct GroupConfigEntry {
    pub name: &'static str,
    pub value: String,
    /// Set on the group (else the broker's default).
    pub is_set: bool,
}

/// One change of IncrementalAlterConfigs: set (`Some`) or delete (`None`) a config.
pub type ConfigChange = (String, Option<String>);

/// A share-partition's offsets for DescribeShareGroupOffsets.
#[derive(Debug, Clone, PartialEq)]
pub struct ShareOffset {
    pub start_offset: i64,
    pub lag: i64,
    /// Records in the in-flight window still to be processed (available or acquired).
    pub in_flight: u32,
    /// Of those, the records a member holds under an acquisition lock.
    pub acquired: u32,
}

impl Coordinator {
    /// Share groups are served by one broker (local and object-storage modes); in cluster mode
    /// a share fetch reaches partition leaders other than the group's coordinator, which
    /// would have to forward it: not built yet, so refused plainly.
    fn share_served(&self) -> Result<(), GroupError> {
        if self.is_shared() {
            return Err(GroupError::Unsupported(
                "share groups are not served in cluster mode yet: run them on a single broker (local or object storage)"
                    .to_owned(),
            ));
        }
        Ok(())
    }

    /// ShareGroupHeartbeat: answers after any change it made is durable.
    pub async fn share_heartbeat(
        &self,
        group_id: &str,
        req: share::HeartbeatRequest,
        topics: &BTreeMap<Uuid, TopicInfo>,
    ) -> share::HeartbeatResult {
        let interval = self.config.share.heartbeat_interval_ms;
        let error = |e| share::HeartbeatResult {
            error: Some(e),
            heartbeat_interval_ms: interval,
            ..Default::default()
        };
        if let Err(e) = self.share_served() {
            return error(e);
        }
        if let Err(e) = self.own_group(group_id).await {
            return error(e);
        }
        let (result, durable) = {
            let mut inner = self.lock();
            let group = match self.group_for(&mut inner, group_id, GroupType::Share) {
                Ok(g) => g,
                Err(e) => return error(e),
            };
            let Kind::Share(g) = &mut group.kind else {
                return error(not_share(group_id));
            };
            let (result, changed) = g.heartbeat(self.clock.now_ms(), req, topics);
            let durable = changed.then(|| self.persist(group_id, group));
            (result, durable)
        };
        if let Some(d) = durable
            && let Err(e) = d.await
        {
            return error(GroupError::StateNotStored(e));
        }
        result
    }

    /// The session and acknowledgement part of a ShareFetch (`is_fetch`) or
    /// ShareAcknowledge: checks the member and its session epoch, applies the
    /// acknowledgements, then opens or closes the session as its epoch says. Returns the
    /// session's partitions (empty when it closed), each partition's acknowledgement outcome,
    /// and the durable write the answer must wait for.
    #[allow(clippy::too_many_arguments)]
    pub async fn share_session(
        &self,
        group_id: &str,
        member_id: &str,
        epoch: i32,
        adding: &[TopicPartition],
        forgetting: &[TopicPartition],
        acks: Vec<(TopicPartition, AckBatches)>,
        is_fetch: bool,
        connection: u64,
    ) -> Result<(Vec<TopicPartition>, Vec<(TopicPartition, AckOutcome)>), GroupError> {
        self.share_served()?;
        self.own_group(group_id).await?;
        let (partitions, outcomes, durable) = {
            let mut inner = self.lock();
            self.check_owned(&mut inner, group_id)?;
            let Some(group) = inner.groups.get_mut(group_id) else {
                return Err(GroupError::unknown_member(group_id, member_id));
            };
            let Kind::Share(g) = &mut group.kind else {
                return Err(not_share(group_id));
            };
            let known = g.has_member(member_id) || (!is_fetch && g.has_session_owner(member_id));
            if !known {
                return Err(GroupError::unknown_member(group_id, member_id));
            }
            let now = self.clock.now_ms();
            let boundary =
                epoch == share::SESSION_OPEN_EPOCH || epoch == share::SESSION_CLOSE_EPOCH;
            let mut partitions = if boundary {
                None
            } else {
                Some(g.session(member_id, epoch, adding, forgetting, is_fetch)?)
            };
            let mut changed = false;
            let mut outcomes = Vec::with_capacity(acks.len());
            for (tp, batches) in acks {
                let (outcome, c) = g.acknowledge(now, member_id, tp, &batches);
                changed |= c;
                outcomes.push((tp, outcome));
            }
            if boundary {
                let outcome = g.session(member_id, epoch, adding, forgetting, is_fetch);
                if epoch == share::SESSION_CLOSE_EPOCH {
                    g.release_member(member_id);
                }
                match outcome {
                    Ok(o) => partitions = Some(o),
                    // Acknowledgements were applied: answer them even when the session
                    // could not close (it was already gone).
                    Err(e) if outcomes.is_empty() => return Err(e),
                    Err(_) => partitions = Some(SessionOutcome::Closed),
                }
            }
            let partitions = match partitions {
                Some(SessionOutcome::Open(p)) => p,
                _ => Vec::new(),
            };
            if connection != 0 && g.bind_connection(member_id, connection) {
                inner
                    .share_connections
                    .entry(connection)
                    .or_default()
                    .insert(group_id.to_owned());
            }
            let Some(group) = inner.groups.get_mut(group_id) else {
                return Err(GroupError::unknown_member(group_id, member_id));
            };
            let durable: Option<Durable> = changed.then(|| self.persist(group_id, group));
            (partitions, outcomes, durable)
        };
        if let Some(d) = durable
            && let Err(e) = d.await
        {
            return Err(GroupError::StateNotStored(e));
        }
        Ok((partitions, outcomes))
    }

    /// Client connection `connection` closed: every share session last used over it ends and
    /// its records go back to the other members at once (see
    /// [`share::ShareGroup::connection_closed`]). Nothing durable changes: acquisitions are
    /// not stored.
    pub fn share_connection_closed(&self, connection: u64) {
        let mut inner = self.lock();
        let Some(group_ids) = inner.share_connections.remove(&connection) else {
            return;
        };
        for group_id in group_ids {
            if let Some(Group {
                kind: Kind::Share(g),
                ..
            }) = inner.groups.get_mut(&group_id)
            {
                for member in g.connection_closed(connection) {
                    tracing::info!(group = %group_id, member = %member, "share session's connection closed; its records go to the others");
                }
            }
        }
    }

    /// Acquires records of `partitions` for the member and reads the batches that hold them,
    /// `max_records` and `max_bytes` at most over all partitions (at least one batch). The
    /// partitions to load first (object storage) come back in the second value, with no
    /// records acquired for them.
    pub fn share_acquire(
        &self,
        group_id: &str,
        member_id: &str,
        partitions: &[TopicPartition],
        max_records: u32,
        max_bytes: usize,
        log: &dyn ShareLog,
    ) -> Result<(Vec<PartitionFetched>, AcquireWaits), GroupError> {
        let mut inner = self.lock();
        self.check_owned(&mut inner, group_id)?;
        let Some(group) = inner.groups.get_mut(group_id) else {
            return Err(GroupError::unknown_member(group_id, member_id));
        };
        let Kind::Share(g) = &mut group.kind else {
            return Err(not_share(group_id));
        };
        let now = self.clock.now_ms();
        let mut records_left = max_records.max(1);
        let mut bytes_left = max_bytes.max(1);
        let mut fetched = Vec::with_capacity(partitions.len());
        let mut loads = Vec::new();
        let mut started = false;
        for &tp in partitions {
            let mut out = PartitionFetched {
                tp,
                ..Default::default()
            };
            let Some((log_start, hwm)) = log.offsets(tp) else {
                out.error = Some((
                    sluice_protocol::kafka_protocol::ResponseError::UnknownTopicOrPartition.code(),
                    "unknown topic or partition".to_owned(),
                ));
                fetched.push(out);
                continue;
            };
            if records_left == 0 || bytes_left == 0 {
                fetched.push(out);
                continue;
            }
            let config = g.partition_config();
            if g.partition(tp).is_none() {
                // Started now: stored before any of its records goes out (see AcquireWaits).
                g.partition_mut(tp, log_start, hwm);
                started = true;
                fetched.push(out);
                continue;
            }
            let partition = g.partition_mut(tp, log_start, hwm);
            let Some(from) = partition.first_acquirable(hwm, &config) else {
                fetched.push(out);
                continue;
            };
            if g.at_cap(member_id, tp) {
                fetched.push(out);
                continue;
            }
            // Read about what the member may take, not the whole fetch size: a first read of
            // FIRST_READ_BYTES, grown once from the bytes per offset it found when it covers
            // fewer offsets than wanted (batches of large records).
            let wanted = i64::from(g.records_wanted(member_id, tp, records_left));
            let first = bytes_left.min(FIRST_READ_BYTES);
            let mut read = log.read(tp, from, first);
            if let ShareRead::Records { bytes, end } = &read {
                let span = end - from;
                if !bytes.is_empty()
                    && span > 0
                    && span < wanted
                    && *end < hwm
                    && first < bytes_left
                {
                    let per_offset = bytes.len().div_ceil(usize::try_from(span).unwrap_or(1));
                    let need = per_offset.saturating_mul(usize::try_from(wanted).unwrap_or(0));
                    let grown = need.saturating_add(need / 4).clamp(first * 2, bytes_left);
                    read = log.read(tp, from, grown);
                }
            }
            match read {
                ShareRead::NeedsLoad => loads.push((tp, from)),
                ShareRead::Failed(code, message) => out.error = Some((code, message)),
                ShareRead::Records { bytes, end } => {
                    if !bytes.is_empty() {
                        let acquired = g.acquire(now, member_id, tp, records_left, end.min(hwm));
                        let count: i64 = acquired
                            .iter()
                            .map(|a| a.last_offset - a.first_offset + 1)
                            .sum();
                        if let (Some(first), Some(last)) = (acquired.first(), acquired.last()) {
                            let bytes =
                                batches_covering(bytes, first.first_offset, last.last_offset);
                            records_left = records_left
                                .saturating_sub(u32::try_from(count).unwrap_or(u32::MAX));
                            bytes_left = bytes_left.saturating_sub(bytes.len());
                            out.records = Some(bytes);
                            out.acquired = acquired;
                        }
                    }
                }
            }
            fetched.push(out);
        }
        let started = started.then(|| self.persist(group_id, group));
        Ok((fetched, AcquireWaits { loads, started }))
    }

    /// The record lock duration of a share group (ShareFetch's `acquisition_lock_timeout_ms`).
    pub fn share_lock_duration_ms(&self, group_id: &str) -> i64 {
        let inner = self.lock();
        match inner.groups.get(group_id).map(|g| &g.kind) {
            Some(Kind::Share(g)) => g.settings().record_lock_duration_ms,
            _ => self.config.share.record_lock_duration_ms,
        }
    }

    /// ShareGroupDescribe of one group.
    pub fn describe_share(&self, group_id: &str) -> Result<share::GroupDescription, GroupError> {
        self.share_served()?;
        let mut inner = self.lock();
        self.check_owned(&mut inner, group_id)?;
        match inner.groups.get(group_id).map(|g| &g.kind) {
            Some(Kind::Share(g)) => Ok(g.describe()),
            Some(_) => Err(GroupError::GroupIdNotFound {
                group_id: group_id.to_owned(),
                expected: Some(GroupType::Share),
            }),
            None => Err(GroupError::GroupIdNotFound {
                group_id: group_id.to_owned(),
                expected: None,
            }),
        }
    }

    /// DescribeShareGroupOffsets: each asked partition's start offset and lag (`None`: the
    /// group has not read it). `log` gives high watermarks for the lag.
    pub fn share_offsets(
        &self,
        group_id: &str,
        partitions: &[TopicPartition],
        log: &dyn ShareLog,
    ) -> Result<Vec<(TopicPartition, Option<ShareOffset>)>, GroupError> {
        self.share_served()?;
        let mut inner = self.lock();
        self.check_owned(&mut inner, group_id)?;
        let g = match inner.groups.get(group_id).map(|g| &g.kind) {
            Some(Kind::Share(g)) => g,
            Some(_) => return Err(not_share(group_id)),
            None => {
                return Err(GroupError::GroupIdNotFound {
                    group_id: group_id.to_owned(),
                    expected: None,
                });
            }
        };
        Ok(partitions
            .iter()
            .map(|&tp| {
                let offset = g.partition(tp).map(|p| ShareOffset {
                    start_offset: p.start_offset(),
                    lag: log.offsets(tp).map_or(-1, |(_, hwm)| p.lag(hwm)),
                    in_flight: p.in_flight(),
                    acquired: p.acquired_total(),
                });
                (tp, offset)
            })
            .collect())
    }

    /// The partitions a share group has state for (DescribeShareGroupOffsets of all topics).
    pub fn share_partitions(&self, group_id: &str) -> Vec<TopicPartition> {
        let inner = self.lock();
        match inner.groups.get(group_id).map(|g| &g.kind) {
            Some(Kind::Share(g)) => g
                .describe()
                .partitions
                .iter()
                .map(|p| (p.topic_id, p.partition))
                .collect(),
            _ => Vec::new(),
        }
    }

    /// AlterShareGroupOffsets (`Some(offset)`) and DeleteShareGroupOffsets (`None`) of an
    /// empty share group; one outcome per partition, after the change is durable.
    pub async fn alter_share_offsets(
        &self,
        group_id: &str,
        changes: Vec<(TopicPartition, Option<i64>)>,
    ) -> Result<Vec<(TopicPartition, Result<(), GroupError>)>, GroupError> {
        self.share_served()?;
        self.own_group(group_id).await?;
        let (outcomes, durable) = {
            let mut inner = self.lock();
            self.check_owned(&mut inner, group_id)?;
            let group = match inner.groups.get_mut(group_id) {
                Some(g) => g,
                // Setting a start offset makes the group, as Kafka's tooling expects.
                None if changes.iter().all(|(_, o)| o.is_some()) => {
                    self.group_for(&mut inner, group_id, GroupType::Share)?
                }
                None => {
                    return Err(GroupError::GroupIdNotFound {
                        group_id: group_id.to_owned(),
                        expected: None,
                    });
                }
            };
            if group.is_empty() && !matches!(group.kind, Kind::Share(_)) {
                group.kind = Kind::Share(share::ShareGroup::new(
                    group_id.to_owned(),
                    share_settings(&self.config.share, &group.configs),
                ));
            }
            let Kind::Share(g) = &mut group.kind else {
                return Err(not_share(group_id));
            };
            if g.member_count() > 0 {
                return Err(GroupError::ShareGroupActive {
                    group_id: group_id.to_owned(),
                    members: g.member_count(),
                });
            }
            let mut changed = false;
            let outcomes: Vec<_> = changes
                .into_iter()
                .map(|(tp, offset)| {
                    let outcome = match offset {
                        Some(o) => g.reset_offset(tp, o),
                        None => g.delete_offset(tp).map(|_| ()),
                    };
                    changed |= outcome.is_ok();
                    (tp, outcome)
                })
                .collect();
            (outcomes, changed.then(|| self.persist(group_id, group)))
        };
        if let Some(d) = durable {
            d.await.map_err(GroupError::StateNotStored)?;
        }
        Ok(outcomes)
    }

    /// Every group config of `group_id` with its effective value (DescribeConfigs on a GROUP
    /// resource; a group this broker does not hold has the defaults).
    pub fn group_configs(&self, group_id: &str) -> Vec<GroupConfigEntry> {
        let inner = self.lock();
        let configs = inner
            .groups
            .get(group_id)
            .map(|g| g.configs.clone())
            .unwrap_or_default();
        GROUP_CONFIGS
            .iter()
            .map(|&name| match configs.get(name) {
                Some(v) => GroupConfigEntry {
                    name,
                    value: v.clone(),
                    is_set: true,
                },
                None => GroupConfigEntry {
                    name,
                    value: default_value(&self.config, name),
                    is_set: false,
                },
            })
            .collect()
    }

    /// IncrementalAlterConfigs (or AlterConfigs, which replaces: `replace`) on a GROUP
    /// resource: validates every change, then applies them all and answers once durable.
    pub async fn alter_group_configs(
        &self,
        group_id: &str,
        changes: Vec<ConfigChange>,
        replace: bool,
        validate_only: bool,
    ) -> Result<(), GroupError> {
        if group_id.is_empty() {
            return Err(GroupError::InvalidGroupId);
        }
        for (name, value) in &changes {
            match value {
                Some(v) => validate_config(name, v)?,
                None if !GROUP_CONFIGS.contains(&name.as_str()) => {
                    validate_config(name, "")?;
                }
                None => {}
            }
        }
        if validate_only {
            return Ok(());
        }
        self.own_group(group_id).await?;
        let durable = {
            let mut inner = self.lock();
            self.check_owned(&mut inner, group_id)?;
            // A group that does not exist yet keeps its configs until it does (an empty
            // classic group converts to the type of its first member, keeping them).
            let group = match inner.groups.get_mut(group_id) {
                Some(g) => g,
                None => self.group_for(&mut inner, group_id, GroupType::Classic)?,
            };
            let mut configs = if replace {
                BTreeMap::new()
            } else {
                group.configs.clone()
            };
            for (name, value) in changes {
                match value {
                    Some(v) => {
                        configs.insert(name, v);
                    }
                    None => {
                        configs.remove(&name);
                    }
                }
            }
            check_together(&self.config, &configs)?;
            group.configs = configs;
            apply_configs(&self.config, group);
            self.persist(group_id, group)
        };
        durable.await.map_err(GroupError::StateNotStored)
    }
}

fn not_share(group_id: &str) -> GroupError {
    GroupError::NotGroupType {
        group_id: group_id.to_owned(),
        expected: GroupType::Share,
    }
}

/// Kafka's INVALID_RECORD_STATE for a refused acknowledgement, or INVALID_REQUEST.
pub fn ack_error_code(e: &AckError) -> i16 {
    use sluice_protocol::kafka_protocol::ResponseError;
    match e {
        AckError::InvalidRecordState(_) => ResponseError::InvalidRecordState.code(),
        AckError::InvalidRequest(_) => ResponseError::InvalidRequest.code(),
    }
}

/// The whole batches of `bytes` (record batches, as the log stores them) that hold offsets
/// `first..=last`: a fetch reads ahead of what a member may take, and the batches past the
/// last acquired record would only be sent to be dropped by the client. Batches are kept whole
/// (their CRC covers them). A header that does not parse, or a batch the read cut, ends the
/// walk and keeps the rest.
pub fn batches_covering(bytes: Bytes, first: i64, last: i64) -> Bytes {
    use sluice_batch::header::{BASE_OFFSET, BATCH_LENGTH, LAST_OFFSET_DELTA, LOG_OVERHEAD_BYTES};
    let mut pos = 0usize;
    let mut start = None;
    while pos + LAST_OFFSET_DELTA.end <= bytes.len() {
        let batch = &bytes[pos..];
        let length = sluice_batch::read_i32(batch, BATCH_LENGTH);
        let Some(end) = usize::try_from(length)
            .ok()
            .and_then(|l| (pos + LOG_OVERHEAD_BYTES).checked_add(l))
            .filter(|&e| e <= bytes.len() && e >= pos + LAST_OFFSET_DELTA.end)
        else {
            break;
        };
        let batch_last = sluice_batch::read_i64(batch, BASE_OFFSET)
            .saturating_add(i64::from(sluice_batch::read_i32(batch, LAST_OFFSET_DELTA)));
        if batch_last < first {
            pos = end;
            continue;
        }
        let from = *start.get_or_insert(pos);
        if batch_last >= last {
            return bytes.slice(from..end);
        }
        pos = end;
    }
    bytes.slice(start.unwrap_or(pos).min(bytes.len())..)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A stand-in batch of `records` offsets from `base`, `size` bytes long (only the fields
    /// the walk reads are set).
    fn batch(base: i64, records: i32, size: usize) -> Vec<u8> {
        use sluice_batch::header::{
            BASE_OFFSET, BATCH_LENGTH, LAST_OFFSET_DELTA, LOG_OVERHEAD_BYTES,
        };
        let mut b = vec![0u8; size];
        b[BASE_OFFSET].copy_from_slice(&base.to_be_bytes());
        b[BATCH_LENGTH].copy_from_slice(&((size - LOG_OVERHEAD_BYTES) as i32).to_be_bytes());
        b[LAST_OFFSET_DELTA].copy_from_slice(&(records - 1).to_be_bytes());
        b
    }

    #[test]
    fn only_the_batches_holding_acquired_offsets_go_out() {
        let parts = [batch(0, 10, 100), batch(10, 10, 120), batch(20, 10, 90)];
        let all = Bytes::from(parts.concat());
        // 12..=15: the second batch alone.
        assert_eq!(&batches_covering(all.clone(), 12, 15)[..], &parts[1][..]);
        // 5..=21: all three.
        assert_eq!(batches_covering(all.clone(), 5, 21), all);
        // 0..=9: the first.
        assert_eq!(&batches_covering(all.clone(), 0, 9)[..], &parts[0][..]);
        // 15..=29: the last two.
        assert_eq!(&batches_covering(all.clone(), 15, 29)[..], &all[100..]);
    }

    #[test]
    fn a_cut_or_garbled_batch_keeps_the_rest() {
        let parts = [batch(0, 10, 100), batch(10, 10, 120)];
        let all = parts.concat();
        // The read ended inside the second batch: from the first needed batch on, as read.
        let cut = Bytes::from(all[..150].to_vec());
        assert_eq!(batches_covering(cut.clone(), 12, 15), cut.slice(100..));
        // A negative length: nothing past it is trusted, nothing is lost.
        let mut garbled = all.clone();
        garbled[108..112].copy_from_slice(&(-5i32).to_be_bytes());
        let garbled = Bytes::from(garbled);
        assert_eq!(
            batches_covering(garbled.clone(), 12, 15),
            garbled.slice(100..)
        );
        assert_eq!(batches_covering(Bytes::new(), 0, 1), Bytes::new());
        assert_eq!(
            batches_covering(Bytes::from_static(&[1, 2, 3]), 0, 1).len(),
            3
        );
    }
}
