//! # Share groups (KIP-932): queues over topics
//!
//! A share group's members consume the same partitions together: each record is handed to
//! one member at a time under a time-limited lock and comes back to the others if that
//! member does not acknowledge it. This module is the pure state of one share group, driven
//! by the coordinator with `now`:
//!
//! - membership (ShareGroupHeartbeat): members, their subscriptions and epochs, and the
//!   assignment, in which a partition may go to several members (a queue has many readers);
//! - share sessions (ShareFetch/ShareAcknowledge): which partitions each member fetches, and
//!   the epoch that orders its requests;
//! - one [`SharePartition`] per partition the group has read: the in-flight window with each
//!   record's state, lock and delivery count.
//!
//! ## Fair sharing
//!
//! Kafka hands out each partition's in-flight budget (`group.share.partition.max.record.locks`)
//! greedily: one fetch may lock up to its `max.poll.records`, so with slow processing a few
//! members hold every lock and the rest sit idle. Here, under the default `fair` acquire
//! policy, a member may hold at most its share of the budget: half the budget divided by the
//! members whose share session fetches that partition (the other half of the window holds
//! records acknowledged out of order, see [`ShareGroup::member_cap`]). A member that closes its session (or
//! leaves, or times out) gives its records back and its share to the others. The group config
//! `share.acquire.policy=greedy` restores Kafka's behaviour, for comparison.
//!
//! ## Durability
//!
//! [`ShareGroup::snapshot`] holds the members and each partition's start offset and
//! acknowledged, archived and delivery-counted records; the coordinator stores it before it
//! answers an acknowledgement. Locks are not stored: after a restart an acquired record is
//! available again, which at-least-once delivery allows; an acknowledged one never comes back.

pub mod partition;

use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize};
use uuid::Uuid;

pub use partition::{
    AckError, Acquired, MemberKey, ShareConfig, SharePartition, ShareStateSnapshot,
};

use crate::assignor::{Assignment, TopicInfo};
use crate::errors::{self, GroupError};

/// `member_epoch` of a join.
const JOIN_EPOCH: i32 = 0;
/// `member_epoch` of a leave.
const LEAVE_EPOCH: i32 = -1;
/// Share session epoch that opens a session.
pub const SESSION_OPEN_EPOCH: i32 = 0;
/// Share session epoch that closes a session.
pub const SESSION_CLOSE_EPOCH: i32 = -1;
/// The snapshot layout this broker writes and reads.
const SNAPSHOT_VERSION: u32 = 1;
/// The assignor a share group reports (ShareGroupDescribe).
pub const ASSIGNOR_NAME: &str = "simple";

/// Where a share-partition starts when the group first reads it (`share.auto.offset.reset`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum AutoOffsetReset {
    Earliest,
    Latest,
}

impl AutoOffsetReset {
    pub fn name(self) -> &'static str {
        match self {
            AutoOffsetReset::Earliest => "earliest",
            AutoOffsetReset::Latest => "latest",
        }
    }

    pub fn from_name(name: &str) -> Option<AutoOffsetReset> {
        match name {
            "earliest" => Some(AutoOffsetReset::Earliest),
            "latest" => Some(AutoOffsetReset::Latest),
            _ => None,
        }
    }
}

/// How a fetch acquires records (`share.acquire.policy`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AcquirePolicy {
    /// At most the member's share of the partition's lock budget (the default).
    Fair,
    /// Up to the fetch's `max_records`, as Kafka does.
    Greedy,
}

impl AcquirePolicy {
    pub fn name(self) -> &'static str {
        match self {
            AcquirePolicy::Fair => "fair",
            AcquirePolicy::Greedy => "greedy",
        }
    }

    pub fn from_name(name: &str) -> Option<AcquirePolicy> {
        match name {
            "fair" => Some(AcquirePolicy::Fair),
            "greedy" => Some(AcquirePolicy::Greedy),
            _ => None,
        }
    }
}

/// A share group's effective settings: the broker's defaults with the group's configs on top.
#[derive(Debug, Clone, PartialEq)]
pub struct ShareSettings {
    /// `share.session.timeout.ms`
    pub session_timeout_ms: i32,
    /// `share.heartbeat.interval.ms`
    pub heartbeat_interval_ms: i32,
    /// `share.record.lock.duration.ms`
    pub record_lock_duration_ms: i64,
    /// `share.delivery.count.limit`
    pub delivery_count_limit: i16,
    /// `share.partition.max.record.locks`
    pub max_record_locks: u32,
    /// `share.auto.offset.reset`
    pub auto_offset_reset: AutoOffsetReset,
    /// `share.acquire.policy`
    pub acquire_policy: AcquirePolicy,
    /// `group.share.max.size`: most members of one share group.
    pub members_max: usize,
}

impl Default for ShareSettings {
    fn default() -> Self {
        ShareSettings {
            session_timeout_ms: 45_000,
            heartbeat_interval_ms: 5_000,
            record_lock_duration_ms: 30_000,
            delivery_count_limit: 5,
            max_record_locks: 2_000,
            auto_offset_reset: AutoOffsetReset::Latest,
            acquire_policy: AcquirePolicy::Fair,
            members_max: 200,
        }
    }
}

impl ShareSettings {
    pub fn partition_config(&self) -> ShareConfig {
        ShareConfig {
            record_lock_duration_ms: self.record_lock_duration_ms,
            delivery_count_limit: self.delivery_count_limit,
            max_in_flight: self.max_record_locks,
        }
    }
}

/// Lifecycle of a share group (names as Kafka reports them).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ShareState {
    Empty,
    Stable,
}

impl ShareState {
    pub fn name(self) -> &'static str {
        match self {
            ShareState::Empty => "Empty",
            ShareState::Stable => "Stable",
        }
    }
}

/// A ShareGroupHeartbeat, validated at the wire edge (group and member ids non-empty).
#[derive(Debug, Clone)]
pub struct HeartbeatRequest {
    pub member_id: String,
    /// 0 to join, -1 to leave, else the member's epoch.
    pub member_epoch: i32,
    pub rack_id: Option<String>,
    /// `None`: unchanged since the last heartbeat.
    pub subscribed_topic_names: Option<Vec<String>>,
    pub client_id: String,
    pub client_host: String,
}

#[derive(Debug, Clone, Default, PartialEq)]
pub struct HeartbeatResult {
    pub error: Option<GroupError>,
    pub member_id: String,
    pub member_epoch: i32,
    pub heartbeat_interval_ms: i32,
    pub assignment: Option<Assignment>,
}

impl HeartbeatResult {
    pub fn error_code(&self) -> i16 {
        errors::error_code(self.error.as_ref())
    }

    pub fn error_message(&self) -> Option<String> {
        self.error.as_ref().map(|e| e.to_string())
    }
}

/// ShareGroupDescribe view of a member.
#[derive(Debug, Clone, PartialEq)]
pub struct MemberDescription {
    pub member_id: String,
    pub rack_id: Option<String>,
    pub member_epoch: i32,
    pub client_id: String,
    pub client_host: String,
    pub subscribed_topic_names: Vec<String>,
    pub assignment: Assignment,
}

/// One share-partition as `sluice group describe` and DescribeShareGroupOffsets show it.
#[derive(Debug, Clone, PartialEq)]
pub struct PartitionDescription {
    pub topic_id: Uuid,
    pub partition: i32,
    pub start_offset: i64,
    /// Records in the window that are available or acquired.
    pub in_flight: u32,
    /// Of those, acquired now.
    pub acquired: u32,
}

#[derive(Debug, Clone, PartialEq)]
pub struct GroupDescription {
    pub state: ShareState,
    pub group_epoch: i32,
    pub assignment_epoch: i32,
    pub members: Vec<MemberDescription>,
    pub partitions: Vec<PartitionDescription>,
}

/// A partition of a topic, by topic id.
pub type TopicPartition = (Uuid, i32);

/// A member's durable record.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
struct Member {
    member_id: String,
    rack_id: Option<String>,
    client_id: String,
    client_host: String,
    subscribed_topic_names: BTreeSet<String>,
    /// The epoch last sent to the member.
    epoch: i32,
    #[serde(skip)]
    key: Option<MemberKey>,
}

/// A member's share session: the partitions it fetches and the epoch its next request carries.
#[derive(Debug, Clone)]
struct Session {
    next_epoch: i32,
    partitions: BTreeSet<TopicPartition>,
    /// The client connection that last used the session (0: not known).
    connection: u64,
}

/// What a share session request (ShareFetch, ShareAcknowledge) did to the member's session.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SessionOutcome {
    /// The session is open; fetch these partitions.
    Open(Vec<TopicPartition>),
    /// The request closed the session (its records were released).
    Closed,
}

/// One share group.
#[derive(Debug)]
pub struct ShareGroup {
    group_id: String,
    settings: ShareSettings,
    group_epoch: i32,
    assignment_epoch: i32,
    members: BTreeMap<String, Member>,
    /// The assignment computed at `assignment_epoch`, per member id.
    targets: BTreeMap<String, Assignment>,
    /// The subscribed topics as the last assignment saw them: `name → (id, partitions)`.
    subscribed: BTreeMap<String, (Uuid, i32)>,
    partitions: BTreeMap<TopicPartition, SharePartition>,

    // Volatile.
    sessions: BTreeMap<String, Session>,
    session_deadlines: BTreeMap<String, i64>,
    next_key: u32,
    /// Members that left (heartbeat epoch -1) with a share session still open: a client
    /// leaves and sends its last acknowledgements (ShareAcknowledge, epoch -1) at the same
    /// time, so their records stay theirs until that closes the session, or until a lock
    /// duration has passed: `member id → (key, deadline)`.
    departed: BTreeMap<String, (MemberKey, i64)>,
}

/// What survives a restart.
#[derive(Debug, Serialize, Deserialize)]
struct Durable {
    version: u32,
    group_epoch: i32,
    members: Vec<Member>,
    partitions: Vec<(Uuid, i32, ShareStateSnapshot)>,
}

/// The outcome of acknowledging one partition's batches.
pub type AckOutcome = Result<(), AckError>;

impl ShareGroup {
    pub fn new(group_id: String, settings: ShareSettings) -> ShareGroup {
        ShareGroup {
            group_id,
            settings,
            group_epoch: 0,
            assignment_epoch: 0,
            members: BTreeMap::new(),
            targets: BTreeMap::new(),
            subscribed: BTreeMap::new(),
            partitions: BTreeMap::new(),
            sessions: BTreeMap::new(),
            session_deadlines: BTreeMap::new(),
            next_key: 0,
            departed: BTreeMap::new(),
        }
    }

    /// The share-partition settings of the group.
    pub fn partition_config(&self) -> ShareConfig {
        self.settings.partition_config()
    }

    pub fn settings(&self) -> &ShareSettings {
        &self.settings
    }

    /// New settings from a change of the group's configs (they apply to the next request).
    pub fn set_settings(&mut self, settings: ShareSettings) {
        self.settings = settings;
    }

    pub fn has_member(&self, member_id: &str) -> bool {
        self.members.contains_key(member_id)
    }

    pub fn member_count(&self) -> usize {
        self.members.len()
    }

    pub fn state(&self) -> ShareState {
        if self.members.is_empty() {
            ShareState::Empty
        } else {
            ShareState::Stable
        }
    }

    pub fn subscribed_topics(&self) -> Vec<String> {
        let names: BTreeSet<&String> = self
            .members
            .values()
            .flat_map(|m| &m.subscribed_topic_names)
            .collect();
        names.into_iter().cloned().collect()
    }

    fn key_of(&mut self, member_id: &str) -> Option<MemberKey> {
        if let Some(&(key, _)) = self.departed.get(member_id) {
            return Some(key);
        }
        let member = self.members.get_mut(member_id)?;
        if member.key.is_none() {
            member.key = Some(MemberKey(self.next_key));
            self.next_key = self.next_key.wrapping_add(1);
        }
        member.key
    }

    /// ShareGroupHeartbeat. The second value says whether the durable state changed (store
    /// the snapshot before answering).
    pub fn heartbeat(
        &mut self,
        now: i64,
        req: HeartbeatRequest,
        topics: &BTreeMap<Uuid, TopicInfo>,
    ) -> (HeartbeatResult, bool) {
        let interval = self.settings.heartbeat_interval_ms;
        let refuse = |error: GroupError| {
            (
                HeartbeatResult {
                    error: Some(error),
                    member_id: req.member_id.clone(),
                    heartbeat_interval_ms: interval,
                    ..Default::default()
                },
                false,
            )
        };
        let mut changed = false;
        match req.member_epoch {
            LEAVE_EPOCH => {
                if !self.members.contains_key(&req.member_id) {
                    return refuse(GroupError::unknown_member(&self.group_id, &req.member_id));
                }
                self.leave(now, &req.member_id);
                self.reassign(topics);
                return (
                    HeartbeatResult {
                        member_id: req.member_id,
                        member_epoch: LEAVE_EPOCH,
                        heartbeat_interval_ms: interval,
                        ..Default::default()
                    },
                    true,
                );
            }
            JOIN_EPOCH => {
                let Some(names) = req
                    .subscribed_topic_names
                    .as_ref()
                    .filter(|n| !n.is_empty())
                else {
                    return refuse(GroupError::InvalidRequest(
                        "SubscribedTopicNames must be set in first request.".to_owned(),
                    ));
                };
                if !self.members.contains_key(&req.member_id)
                    && self.members.len() >= self.settings.members_max
                {
                    return refuse(GroupError::GroupMaxSizeReached {
                        members_max: self.settings.members_max,
                    });
                }
                if let Some((old, _)) = self.departed.remove(&req.member_id) {
                    // Back after leaving: what it still held goes to the others.
                    self.release_key(old);
                    self.sessions.remove(&req.member_id);
                }
                if let Some(old) = self.members.get(&req.member_id).and_then(|m| m.key) {
                    // A rejoin with the same id: what it held goes back to the others.
                    self.release_key(old);
                    self.sessions.remove(&req.member_id);
                }
                self.members.insert(
                    req.member_id.clone(),
                    Member {
                        member_id: req.member_id.clone(),
                        rack_id: req.rack_id.clone(),
                        client_id: req.client_id.clone(),
                        client_host: req.client_host.clone(),
                        subscribed_topic_names: names.iter().cloned().collect(),
                        epoch: 0,
                        key: None,
                    },
                );
                changed = true;
            }
            epoch => {
                let Some(member) = self.members.get_mut(&req.member_id) else {
                    return refuse(GroupError::unknown_member(&self.group_id, &req.member_id));
                };
                if epoch != member.epoch {
                    return refuse(GroupError::FencedMemberEpoch(format!(
                        "The share group member has a greater member epoch ({}) than the one known by the group coordinator ({}). The member must abandon all its partitions and rejoin.",
                        epoch, member.epoch
                    )));
                }
                if let Some(names) = &req.subscribed_topic_names {
                    let names: BTreeSet<String> = names.iter().cloned().collect();
                    if names != member.subscribed_topic_names && !names.is_empty() {
                        member.subscribed_topic_names = names;
                        changed = true;
                    }
                }
                if req.rack_id.is_some() && req.rack_id != member.rack_id {
                    member.rack_id = req.rack_id.clone();
                }
            }
        }
        self.session_deadlines.insert(
            req.member_id.clone(),
            now + i64::from(self.settings.session_timeout_ms),
        );
        if changed || self.topics_changed(topics) {
            self.reassign(topics);
            changed = true;
        }
        let assignment_epoch = self.assignment_epoch;
        let target = self
            .targets
            .get(&req.member_id)
            .cloned()
            .unwrap_or_default();
        let member = self
            .members
            .get_mut(&req.member_id)
            .expect("the member was checked or added above");
        if member.epoch != assignment_epoch {
            member.epoch = assignment_epoch;
            changed = true;
        }
        (
            HeartbeatResult {
                error: None,
                member_id: req.member_id,
                member_epoch: member.epoch,
                heartbeat_interval_ms: interval,
                // Always sent: the client keeps it when it did not change.
                assignment: Some(target),
            },
            changed,
        )
    }

    /// Whether a subscribed topic appeared, went or changed its partition count since the
    /// last assignment.
    fn topics_changed(&self, topics: &BTreeMap<Uuid, TopicInfo>) -> bool {
        self.resolve(topics) != self.subscribed
    }

    fn resolve(&self, topics: &BTreeMap<Uuid, TopicInfo>) -> BTreeMap<String, (Uuid, i32)> {
        let wanted: BTreeSet<&String> = self
            .members
            .values()
            .flat_map(|m| &m.subscribed_topic_names)
            .collect();
        topics
            .values()
            .filter(|t| wanted.contains(&t.name) && t.partitions > 0)
            .map(|t| (t.name.clone(), (t.id, t.partitions)))
            .collect()
    }

    /// Recomputes every member's assignment at a new epoch. Each subscribed topic's
    /// partitions are spread over its subscribers: with fewer subscribers than partitions
    /// each partition has one member, round robin; with more, each member gets one partition
    /// and each partition several members (a queue's readers).
    fn reassign(&mut self, topics: &BTreeMap<Uuid, TopicInfo>) {
        self.subscribed = self.resolve(topics);
        let mut targets: BTreeMap<String, Assignment> = self
            .members
            .keys()
            .map(|id| (id.clone(), Assignment::new()))
            .collect();
        for (name, &(id, partitions)) in &self.subscribed {
            let subscribers: Vec<&String> = self
                .members
                .values()
                .filter(|m| m.subscribed_topic_names.contains(name))
                .map(|m| &m.member_id)
                .collect();
            if subscribers.is_empty() {
                continue;
            }
            let n = usize::try_from(partitions).unwrap_or(0);
            if subscribers.len() >= n {
                for (i, member) in subscribers.iter().enumerate() {
                    let partition = i32::try_from(i % n).unwrap_or(0);
                    if let Some(t) = targets.get_mut(*member) {
                        t.entry(id).or_default().insert(partition);
                    }
                }
            } else {
                for p in 0..n {
                    let member = subscribers[p % subscribers.len()];
                    if let Some(t) = targets.get_mut(member) {
                        t.entry(id)
                            .or_default()
                            .insert(i32::try_from(p).unwrap_or(0));
                    }
                }
            }
        }
        self.group_epoch += 1;
        self.assignment_epoch = self.group_epoch;
        self.targets = targets;
    }

    /// A member that leaves: out of the group at once; with a share session open, its records
    /// wait for the session's close (see `departed`).
    fn leave(&mut self, now: i64, member_id: &str) {
        let key = self.members.get(member_id).and_then(|m| m.key);
        match key {
            Some(key) if self.sessions.contains_key(member_id) => {
                self.members.remove(member_id);
                self.session_deadlines.remove(member_id);
                self.targets.remove(member_id);
                let deadline = now.saturating_add(self.settings.record_lock_duration_ms);
                self.departed.insert(member_id.to_owned(), (key, deadline));
            }
            _ => self.remove_member(member_id),
        }
    }

    fn remove_member(&mut self, member_id: &str) {
        if let Some((key, _)) = self.departed.remove(member_id) {
            self.release_key(key);
        }
        if let Some(key) = self.members.remove(member_id).and_then(|m| m.key) {
            self.release_key(key);
        }
        self.sessions.remove(member_id);
        self.session_deadlines.remove(member_id);
        self.targets.remove(member_id);
    }

    fn release_key(&mut self, key: MemberKey) {
        let config = self.settings.partition_config();
        for p in self.partitions.values_mut() {
            p.release_member(key, &config);
        }
    }

    /// The earliest time something is due: a member's session, a record lock.
    pub fn next_deadline(&self) -> Option<i64> {
        let sessions = self
            .session_deadlines
            .values()
            .chain(self.departed.values().map(|(_, d)| d))
            .min()
            .copied();
        let locks = self
            .partitions
            .values()
            .filter_map(SharePartition::next_deadline)
            .min();
        sessions.into_iter().chain(locks).min()
    }

    /// Removes members whose session expired and releases expired locks. Returns whether the
    /// durable state changed.
    pub fn tick(&mut self, now: i64, topics: &BTreeMap<Uuid, TopicInfo>) -> bool {
        let expired: Vec<String> = self
            .session_deadlines
            .iter()
            .filter(|&(_, &d)| d <= now)
            .map(|(id, _)| id.clone())
            .collect();
        let gone: Vec<String> = self
            .departed
            .iter()
            .filter(|&(_, &(_, d))| d <= now)
            .map(|(id, _)| id.clone())
            .collect();
        for id in gone {
            // Left without closing its share session: what it held goes to the others.
            self.remove_member(&id);
        }
        let mut changed = false;
        for id in &expired {
            tracing::info!(group = %self.group_id, member = %id, "share group member's session expired; its records go to the others");
            self.remove_member(id);
            changed = true;
        }
        if changed || (!self.members.is_empty() && self.topics_changed(topics)) {
            self.reassign(topics);
            changed = true;
        }
        let config = self.settings.partition_config();
        for p in self.partitions.values_mut() {
            changed |= p.expire_locks(now, &config);
        }
        changed
    }

    /// Opens, continues or closes the member's share session (the session part of ShareFetch
    /// and ShareAcknowledge). `adding`/`forgetting` change a fetch's partitions.
    pub fn session(
        &mut self,
        member_id: &str,
        epoch: i32,
        adding: &[TopicPartition],
        forgetting: &[TopicPartition],
        is_fetch: bool,
    ) -> Result<SessionOutcome, GroupError> {
        // A member that left may still acknowledge and close its session, not fetch.
        let may_ack = !is_fetch && self.departed.contains_key(member_id);
        if !self.members.contains_key(member_id) && !may_ack {
            return Err(GroupError::unknown_member(&self.group_id, member_id));
        }
        match epoch {
            SESSION_OPEN_EPOCH => {
                if !is_fetch {
                    return Err(GroupError::InvalidShareSessionEpoch(
                        "a share session is opened by a ShareFetch, not a ShareAcknowledge"
                            .to_owned(),
                    ));
                }
                // A new session replaces the member's old one, whose records go back.
                if self.sessions.remove(member_id).is_some()
                    && let Some(key) = self.key_of(member_id)
                {
                    self.release_key(key);
                }
                let partitions: BTreeSet<TopicPartition> = adding.iter().copied().collect();
                let open = partitions.iter().copied().collect();
                self.sessions.insert(
                    member_id.to_owned(),
                    Session {
                        next_epoch: 1,
                        partitions,
                        connection: 0,
                    },
                );
                Ok(SessionOutcome::Open(open))
            }
            SESSION_CLOSE_EPOCH => {
                if self.sessions.remove(member_id).is_none() {
                    return Err(GroupError::ShareSessionNotFound(format!(
                        "member {member_id} of share group {} has no share session to close",
                        self.group_id
                    )));
                }
                Ok(SessionOutcome::Closed)
            }
            epoch => {
                let Some(session) = self.sessions.get_mut(member_id) else {
                    return Err(GroupError::ShareSessionNotFound(format!(
                        "member {member_id} of share group {} has no share session: open one with epoch 0",
                        self.group_id
                    )));
                };
                if epoch != session.next_epoch {
                    return Err(GroupError::InvalidShareSessionEpoch(format!(
                        "share session epoch {epoch} is not the expected {}",
                        session.next_epoch
                    )));
                }
                session.next_epoch = if session.next_epoch == i32::MAX {
                    1
                } else {
                    session.next_epoch + 1
                };
                if is_fetch {
                    session.partitions.extend(adding.iter().copied());
                    for tp in forgetting {
                        session.partitions.remove(tp);
                    }
                }
                Ok(SessionOutcome::Open(
                    session.partitions.iter().copied().collect(),
                ))
            }
        }
    }

    /// Notes that the member's share session was used over client connection `connection`
    /// (see [`ShareGroup::connection_closed`]). Returns whether the member has a session.
    pub fn bind_connection(&mut self, member_id: &str, connection: u64) -> bool {
        match self.sessions.get_mut(member_id) {
            Some(s) => {
                s.connection = connection;
                true
            }
            None => false,
        }
    }

    /// Client connection `connection` closed: the share sessions last used over it end, as if
    /// closed, and their members' records go back at once instead of when their locks expire
    /// (a consumer that crashed, or lost its connection, will not acknowledge them; one that
    /// is still alive opens a new session). Returns the members whose sessions ended.
    pub fn connection_closed(&mut self, connection: u64) -> Vec<String> {
        if connection == 0 {
            return Vec::new();
        }
        let ended: Vec<String> = self
            .sessions
            .iter()
            .filter(|(_, s)| s.connection == connection)
            .map(|(id, _)| id.clone())
            .collect();
        for id in &ended {
            self.sessions.remove(id);
            self.release_member(id);
        }
        ended
    }

    /// Releases every record the member holds (its session closed); a member that left is
    /// then gone for good.
    pub fn release_member(&mut self, member_id: &str) {
        if let Some((key, _)) = self.departed.remove(member_id) {
            self.release_key(key);
        } else if let Some(key) = self.key_of(member_id) {
            self.release_key(key);
        }
    }

    /// Whether the member is in the group, or left with its share session still open.
    pub fn has_session_owner(&self, member_id: &str) -> bool {
        self.members.contains_key(member_id) || self.departed.contains_key(member_id)
    }

    /// Acknowledges one partition's batches for the member: `(first, last, types)` each.
    /// Returns whether anything durable changed.
    pub fn acknowledge(
        &mut self,
        now: i64,
        member_id: &str,
        tp: TopicPartition,
        batches: &[(i64, i64, Vec<i8>)],
    ) -> (AckOutcome, bool) {
        let Some(key) = self.key_of(member_id) else {
            return (
                Err(AckError::InvalidRecordState(format!(
                    "member {member_id} is not in share group {}",
                    self.group_id
                ))),
                false,
            );
        };
        let config = self.settings.partition_config();
        let Some(partition) = self.partitions.get_mut(&tp) else {
            return (
                Err(AckError::InvalidRecordState(
                    "no record of this partition was delivered to the member".to_owned(),
                )),
                false,
            );
        };
        let mut changed = false;
        for (first, last, types) in batches {
            match partition.acknowledge(now, key, *first, *last, types, &config) {
                Ok(()) => changed = true,
                Err(e) => return (Err(e), changed),
            }
        }
        (Ok(()), changed)
    }

    /// The share-partition of `tp`, made on first use at the group's reset position
    /// (`log_start` for earliest, `high_watermark` for latest); its start moves up to
    /// `log_start` when retention deleted records below it.
    pub fn partition_mut(
        &mut self,
        tp: TopicPartition,
        log_start: i64,
        high_watermark: i64,
    ) -> &mut SharePartition {
        let reset = self.settings.auto_offset_reset;
        let partition = self.partitions.entry(tp).or_insert_with(|| {
            SharePartition::new(match reset {
                AutoOffsetReset::Earliest => log_start,
                AutoOffsetReset::Latest => high_watermark,
            })
        });
        partition.log_start_moved(log_start);
        partition
    }

    /// The member's cap of acquired records on `tp` under the group's acquire policy.
    ///
    /// Fair: half the partition's budget, divided among its fetchers. The budget bounds the
    /// in-flight window (end offset − start offset, as in Kafka), not only the locked records:
    /// a record acknowledged above one still being processed keeps its place in the window
    /// until the start offset passes it. In steady state that is about as many records again
    /// as are locked, so caps adding up to the whole budget would fill the window and leave
    /// fetchers waiting for the slowest member; half leaves room for them.
    pub fn member_cap(&self, tp: TopicPartition) -> Option<u32> {
        match self.settings.acquire_policy {
            AcquirePolicy::Greedy => None,
            AcquirePolicy::Fair => {
                let fetchers = self
                    .sessions
                    .values()
                    .filter(|s| s.partitions.contains(&tp))
                    .count()
                    .max(1);
                let fetchers = u32::try_from(fetchers).unwrap_or(u32::MAX / 2);
                Some(
                    self.settings
                        .max_record_locks
                        .div_ceil(fetchers.saturating_mul(2))
                        .max(1),
                )
            }
        }
    }

    /// How many records of `tp` the member may acquire now: `max_records`, within its cap.
    pub fn records_wanted(&mut self, member_id: &str, tp: TopicPartition, max_records: u32) -> u32 {
        let Some(cap) = self.member_cap(tp) else {
            return max_records;
        };
        let Some(key) = self.key_of(member_id) else {
            return 0;
        };
        let held = self.partitions.get(&tp).map_or(0, |p| p.acquired_by(key));
        max_records.min(cap.saturating_sub(held))
    }

    /// Whether the member holds all the records of `tp` its cap allows.
    pub fn at_cap(&mut self, member_id: &str, tp: TopicPartition) -> bool {
        let Some(cap) = self.member_cap(tp) else {
            return false;
        };
        let Some(key) = self.key_of(member_id) else {
            return true;
        };
        self.partitions
            .get(&tp)
            .is_some_and(|p| p.acquired_by(key) >= cap)
    }

    /// Acquires up to `max_records` records of `tp` below `end` (the first offset the read
    /// bytes do not cover) for the member, within its cap.
    pub fn acquire(
        &mut self,
        now: i64,
        member_id: &str,
        tp: TopicPartition,
        max_records: u32,
        end: i64,
    ) -> Vec<Acquired> {
        let Some(key) = self.key_of(member_id) else {
            return Vec::new();
        };
        let cap = self.member_cap(tp);
        let config = self.settings.partition_config();
        match self.partitions.get_mut(&tp) {
            Some(p) => p.acquire(now, key, max_records, cap, end, &config),
            None => Vec::new(),
        }
    }

    /// The share-partition of `tp`, if the group has read it.
    pub fn partition(&self, tp: TopicPartition) -> Option<&SharePartition> {
        self.partitions.get(&tp)
    }

    /// Forgets a deleted topic's partitions.
    pub fn topic_deleted(&mut self, topic_id: Uuid) {
        self.partitions.retain(|(id, _), _| *id != topic_id);
        for s in self.sessions.values_mut() {
            s.partitions.retain(|(id, _)| *id != topic_id);
        }
    }

    /// Refuses an admin change while members are in the group. Members that already left
    /// but whose share sessions are still open lose their records: an operator who resets or
    /// deletes the offsets of an empty group has said what happens to them.
    fn admin_change(&mut self) -> Result<(), GroupError> {
        if !self.members.is_empty() {
            return Err(GroupError::ShareGroupActive {
                group_id: self.group_id.clone(),
                members: self.members.len(),
            });
        }
        let departed: Vec<String> = self.departed.keys().cloned().collect();
        for id in departed {
            self.remove_member(&id);
        }
        Ok(())
    }

    /// Sets the start offset of `tp` (an admin reset; the group must be empty).
    pub fn reset_offset(&mut self, tp: TopicPartition, offset: i64) -> Result<(), GroupError> {
        self.admin_change()?;
        match self.partitions.get_mut(&tp) {
            Some(p) => p
                .reset(offset)
                .map_err(|e| GroupError::InvalidRequest(e.to_string())),
            None => {
                self.partitions.insert(tp, SharePartition::new(offset));
                Ok(())
            }
        }
    }

    /// Forgets the share-partitions of `tp` (DeleteShareGroupOffsets; the group must be empty).
    pub fn delete_offset(&mut self, tp: TopicPartition) -> Result<bool, GroupError> {
        self.admin_change()?;
        Ok(self.partitions.remove(&tp).is_some())
    }

    pub fn describe(&self) -> GroupDescription {
        GroupDescription {
            state: self.state(),
            group_epoch: self.group_epoch,
            assignment_epoch: self.assignment_epoch,
            members: self
                .members
                .values()
                .map(|m| MemberDescription {
                    member_id: m.member_id.clone(),
                    rack_id: m.rack_id.clone(),
                    member_epoch: m.epoch,
                    client_id: m.client_id.clone(),
                    client_host: m.client_host.clone(),
                    subscribed_topic_names: m.subscribed_topic_names.iter().cloned().collect(),
                    assignment: self.targets.get(&m.member_id).cloned().unwrap_or_default(),
                })
                .collect(),
            partitions: self
                .partitions
                .iter()
                .map(|(&(topic_id, partition), p)| PartitionDescription {
                    topic_id,
                    partition,
                    start_offset: p.start_offset(),
                    in_flight: p.in_flight(),
                    acquired: p.acquired_total(),
                })
                .collect(),
        }
    }

    /// The durable state, for the group store.
    pub fn snapshot(&self) -> serde_json::Value {
        let durable = Durable {
            version: SNAPSHOT_VERSION,
            group_epoch: self.group_epoch,
            members: self.members.values().cloned().collect(),
            partitions: self
                .partitions
                .iter()
                .map(|(&(id, p), state)| (id, p, state.snapshot()))
                .collect(),
        };
        serde_json::to_value(&durable).expect("share group state is JSON-representable")
    }

    /// Rebuilds a group from [`Self::snapshot`]: members get a full session timeout from
    /// `now` to heartbeat again; every record that was acquired is available again.
    pub fn restore(
        group_id: String,
        settings: ShareSettings,
        snapshot: serde_json::Value,
        now: i64,
        topics: &BTreeMap<Uuid, TopicInfo>,
    ) -> Result<ShareGroup, String> {
        let durable: Durable = serde_json::from_value(snapshot)
            .map_err(|e| format!("share group {group_id}: unreadable snapshot: {e}"))?;
        if durable.version != SNAPSHOT_VERSION {
            return Err(format!(
                "share group {group_id}: snapshot version {} (this broker reads {SNAPSHOT_VERSION})",
                durable.version
            ));
        }
        let mut group = ShareGroup::new(group_id, settings);
        group.group_epoch = durable.group_epoch;
        let timeout = i64::from(group.settings.session_timeout_ms);
        for member in durable.members {
            group
                .session_deadlines
                .insert(member.member_id.clone(), now + timeout);
            group.members.insert(member.member_id.clone(), member);
        }
        for (id, p, state) in durable.partitions {
            group
                .partitions
                .insert((id, p), SharePartition::restore(&state));
        }
        // The assignment is derived state: recompute it (members rejoin at the new epoch
        // if theirs differs, as after any reassignment).
        group.reassign(topics);
        Ok(group)
    }
}

#[cfg(test)]
mod tests;
