//! # KIP-848 consumer groups: ConsumerGroupHeartbeat as a pure state machine
//!
//! The coordinator (`groups`) turns each ConsumerGroupHeartbeat into a [`HeartbeatRequest`],
//! hands it to [`ConsumerGroup::heartbeat`] with the broker's topic metadata, stores
//! [`ConsumerGroup::snapshot`] when told to ([`Effect::Persist`]) and answers. It also calls
//! [`ConsumerGroup::tick`] at [`ConsumerGroup::next_deadline`] and every second or so (topic
//! metadata). Every call takes `now` (ms); no I/O, no clock, no tasks. The only randomness is
//! the member id generated for a v0 client that joins without one.
//!
//! ## Epochs
//!
//! - **group epoch**: bumped when membership changes (join, leave, expiry), when a member's
//!   subscription (names, regex, server assignor) changes, and when the subscribed topics'
//!   metadata changes (a subscribed topic appears, disappears or grows).
//! - **assignment epoch**: the group epoch the target assignment was computed for. Every bump
//!   recomputes the target right away with the group's assignor (`assignor`), so the two are
//!   equal after every call and the group is never left in `Assigning`.
//! - **member epoch**: the target epoch the member has reconciled to; it trails the
//!   assignment epoch while the member revokes. Requests must carry it exactly (or the
//!   previous one, if the owned partitions are a subset of the assignment: the answer that
//!   bumped it may have been lost), else FENCED_MEMBER_EPOCH. 0 joins (or rejoins), -1
//!   leaves, -2 is a static member's temporary leave.
//!
//! ## Joining and subscriptions
//!
//! Epoch 0 with an unknown member id (or none: v0 clients) adds a member. Epoch 0 with a
//! known id is a member that lost its state (it was fenced, or restarted): it keeps its record
//! and target (no rebalance), is taken to own nothing, and is sent its assignment again.
//! A member subscribes to topic names and/or one regex; a regex is matched against the whole
//! topic name (like RE2J's `matches()`, with the `regex` crate's RE2-style syntax). Names of
//! topics that do not exist are simply not assigned until the topic appears in the metadata
//! passed to a heartbeat or tick. Every heartbeat and tick re-resolves the subscriptions
//! against that metadata: O(topics) work per call.
//!
//! ## Members and reconciliation
//!
//! A member has its *assigned* partitions (what it was told it may own), the partitions
//! *pending revocation* (what it was told to give up and may still own) and a state:
//!
//! | state                  | meaning                                                  |
//! |------------------------|----------------------------------------------------------|
//! | `Stable`               | assigned = its target, at its member epoch               |
//! | `UnrevokedPartitions`  | waits for it to stop owning the pending revocations      |
//! | `UnreleasedPartitions` | at the target epoch, waits for others to free partitions |
//!
//! On each of its heartbeats a member not yet reconciled moves toward the target:
//!
//! 1. assigned shrinks to `assigned ∩ target`; the rest is pending revocation. If the member
//!    still owns any of those (`owned` in the request; an omitted `owned` counts as still
//!    owning), it stays at its epoch in `UnrevokedPartitions` until a later heartbeat's
//!    `owned` no longer has them (then it advances one epoch and goes on from step 1);
//! 2. otherwise it moves to the target epoch and gets the target partitions that no other
//!    member holds (assigned or pending revocation); the others keep it in
//!    `UnreleasedPartitions` until their holders let go.
//!
//! So a partition never has two owners: it is given only once its previous holder revoked
//! it (or left). Pending revocations of a topic that no longer exists do not block.
//!
//! The answer carries `assignment` on a join, on a full request (rebalance timeout,
//! subscription and owned partitions all present: how clients resync after an error), when
//! the assignment changed, and when the `owned` partitions differ from the assignment beyond
//! what is pending revocation (an earlier answer may have been lost).
//!
//! ## Timers (volatile: restarted at `restore`)
//!
//! - session: a member not heartbeating for `session_timeout_ms` is removed (group epoch
//!   bump). A static member's temporary leave (-2) keeps it, with its assignment, for one
//!   more session timeout, so the same instance id rejoining (any member id) takes it over
//!   without a rebalance. Another member with that instance id is refused with
//!   UNRELEASED_INSTANCE_ID while the old one has not left.
//! - revocation: a member still in `UnrevokedPartitions` `rebalance_timeout_ms` after it was
//!   asked to revoke is removed.
//!
//! ## Durability
//!
//! [`Effect::Persist`] is emitted whenever anything in [`ConsumerSnapshot`] changed: epochs,
//! members and their subscriptions, target and current assignments, pending revocations, the
//! subscribed topics' metadata. Steady-state heartbeats change nothing and persist nothing.
//!
//! ## Files
//!
//! - `mod.rs` (this file): the public types, the group's state and its read-only views
//!   (state, assignor, offset commit/fetch checks, subscribed topics, describe), and the
//!   timers ([`ConsumerGroup::tick`], [`ConsumerGroup::next_deadline`]).
//! - `heartbeat.rs`: [`ConsumerGroup::heartbeat`]: request checks, join, rejoin, leave, epochs.
//! - `reconcile.rs`: target assignment, reconciliation steps, and the indexes derived from the
//!   members (holders, subscriptions).
//! - `snapshot.rs`: [`ConsumerGroup::snapshot`] / [`ConsumerGroup::restore`].
//! - `tests.rs` and `tests/`: unit tests.

mod heartbeat;
mod reconcile;
mod snapshot;
#[cfg(test)]
mod tests;

use std::collections::{BTreeMap, BTreeSet};

use regex::{Regex, RegexBuilder};
use serde::{Deserialize, Serialize};
use uuid::Uuid;

use super::assignor::{Assignment, AssignorKind, TopicInfo};
use crate::errors::{self, GroupError};

/// `member_epoch` of a join (or a rejoin after losing state).
const JOIN_EPOCH: i32 = 0;
/// `member_epoch` of a leave.
const LEAVE_EPOCH: i32 = -1;
/// `member_epoch` of a static member's temporary leave.
const TEMPORARY_LEAVE_EPOCH: i32 = -2;
/// `rebalance_timeout_ms` when the request leaves it out.
const REBALANCE_TIMEOUT_UNSET: i32 = -1;
/// Most memory a compiled subscription regex may take: clients send arbitrary patterns.
const REGEX_SIZE_LIMIT_BYTES: usize = 1 << 20;

/// Broker-wide settings for consumer groups (Kafka's `group.consumer.*`).
#[derive(Debug, Clone)]
pub struct ConsumerConfig {
    /// `group.consumer.session.timeout.ms`
    pub session_timeout_ms: i32,
    /// `group.consumer.heartbeat.interval.ms`
    pub heartbeat_interval_ms: i32,
    /// `group.consumer.max.size`
    pub members_max: usize,
    /// `group.consumer.assignors`' first entry: used when a member names none.
    pub default_assignor: AssignorKind,
}

/// Lifecycle of a consumer group (names as Kafka reports them).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum ConsumerState {
    Empty,
    Assigning,
    Reconciling,
    Stable,
    Dead,
}

impl ConsumerState {
    pub fn name(self) -> &'static str {
        match self {
            ConsumerState::Empty => "Empty",
            ConsumerState::Assigning => "Assigning",
            ConsumerState::Reconciling => "Reconciling",
            ConsumerState::Stable => "Stable",
            ConsumerState::Dead => "Dead",
        }
    }
}

/// A ConsumerGroupHeartbeat, validated at the wire edge (group id non-empty). Fields the
/// client left out (null) are `None`: "unchanged since the last heartbeat".
#[derive(Debug, Clone)]
pub struct HeartbeatRequest {
    /// v0: empty on first join (the broker generates one); v1+: generated by the client.
    pub member_id: String,
    /// 0 to join, -1 to leave, -2 for a static member's temporary leave; else the member's epoch.
    pub member_epoch: i32,
    pub instance_id: Option<String>,
    pub rack_id: Option<String>,
    pub rebalance_timeout_ms: i32,
    pub subscribed_topic_names: Option<Vec<String>>,
    pub subscribed_topic_regex: Option<String>,
    pub server_assignor: Option<String>,
    /// Partitions the member owns now.
    pub owned: Option<Assignment>,
    pub client_id: String,
    pub client_host: String,
}

#[derive(Debug, Clone, Default, PartialEq)]
pub struct HeartbeatResult {
    /// Why the heartbeat was refused (`None`: accepted); its message is the response's
    /// `error_message`.
    pub error: Option<GroupError>,
    pub member_id: String,
    pub member_epoch: i32,
    pub heartbeat_interval_ms: i32,
    /// The member's assignment, when it changed (or the member must be told it again).
    pub assignment: Option<Assignment>,
}

impl HeartbeatResult {
    /// The Kafka error code of [`HeartbeatResult::error`].
    pub fn error_code(&self) -> i16 {
        errors::error_code(self.error.as_ref())
    }

    /// The response's `error_message`: the error's own.
    pub fn error_message(&self) -> Option<String> {
        self.error.as_ref().map(|e| e.to_string())
    }
}

/// Something the coordinator must do after a call.
#[derive(Debug, Clone, PartialEq)]
pub enum Effect {
    /// The durable part of the group changed: store [`ConsumerGroup::snapshot`] before
    /// answering the call that produced this.
    Persist,
}

/// ConsumerGroupDescribe view of a member.
#[derive(Debug, Clone, PartialEq)]
pub struct MemberDescription {
    pub member_id: String,
    pub instance_id: Option<String>,
    pub rack_id: Option<String>,
    pub member_epoch: i32,
    pub client_id: String,
    pub client_host: String,
    pub subscribed_topic_names: Vec<String>,
    pub subscribed_topic_regex: Option<String>,
    pub assignment: Assignment,
    pub target_assignment: Assignment,
}

#[derive(Debug, Clone, PartialEq)]
pub struct GroupDescription {
    pub state: ConsumerState,
    pub group_epoch: i32,
    pub assignment_epoch: i32,
    pub assignor_name: String,
    pub members: Vec<MemberDescription>,
}

/// What survives a restart (members, epochs, subscriptions, target and current assignments;
/// sessions restart at `restore`'s `now`).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ConsumerSnapshot {
    pub state: serde_json::Value,
}

/// One consumer group.
#[derive(Debug)]
pub struct ConsumerGroup {
    group_id: String,
    config: ConsumerConfig,
    group_epoch: i32,
    assignment_epoch: i32,
    members: BTreeMap<String, Member>,
    /// Target assignment per member id, computed at `assignment_epoch`.
    targets: BTreeMap<String, Assignment>,
    /// The subscribed topics that exist, as last seen: a change bumps the group epoch.
    subscribed: BTreeMap<Uuid, SubscribedTopic>,

    // Derived from `members` (kept in step by `set_member`, rebuilt by `restore`).
    /// Instance id → member id of static members.
    static_members: BTreeMap<String, String>,
    /// Partition → the member holding it (assigned or pending revocation).
    holders: BTreeMap<(Uuid, i32), String>,
    /// Subscribed topic name → how many members subscribe to it.
    topic_names: BTreeMap<String, usize>,
    /// Subscription pattern → its compiled form and how many members use it.
    regexes: BTreeMap<String, SubscribedRegex>,

    // Volatile.
    session_deadlines: BTreeMap<String, i64>,
    /// Members in `UnrevokedPartitions`: when they are removed if still there.
    revocation_deadlines: BTreeMap<String, i64>,
    /// Something durable changed since the last `Effect::Persist`.
    dirty: bool,
}

/// Where a member is in reconciling toward its target (Kafka's member states).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
enum MemberState {
    Stable,
    UnrevokedPartitions,
    UnreleasedPartitions,
}

/// A member's durable record.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
struct Member {
    member_id: String,
    instance_id: Option<String>,
    rack_id: Option<String>,
    client_id: String,
    client_host: String,
    rebalance_timeout_ms: i32,
    subscribed_topic_names: BTreeSet<String>,
    /// Never empty: an empty pattern from the client clears the regex subscription.
    subscribed_topic_regex: Option<String>,
    /// A name [`AssignorKind::from_name`] knows (checked before it is stored).
    server_assignor: Option<String>,
    epoch: i32,
    previous_epoch: i32,
    state: MemberState,
    assigned: Assignment,
    pending_revocation: Assignment,
}

impl Member {
    fn new(member_id: String) -> Member {
        Member {
            member_id,
            instance_id: None,
            rack_id: None,
            client_id: String::new(),
            client_host: String::new(),
            rebalance_timeout_ms: 0,
            subscribed_topic_names: BTreeSet::new(),
            subscribed_topic_regex: None,
            server_assignor: None,
            epoch: JOIN_EPOCH,
            previous_epoch: LEAVE_EPOCH,
            state: MemberState::Stable,
            assigned: Assignment::new(),
            pending_revocation: Assignment::new(),
        }
    }

    fn set_epoch(&mut self, epoch: i32) {
        if epoch != self.epoch {
            self.previous_epoch = self.epoch;
            self.epoch = epoch;
        }
    }

    fn same_subscription(&self, other: &Member) -> bool {
        self.subscribed_topic_names == other.subscribed_topic_names
            && self.subscribed_topic_regex == other.subscribed_topic_regex
            && self.server_assignor == other.server_assignor
    }

    fn is_reconciled_to(&self, epoch: i32) -> bool {
        self.state == MemberState::Stable && self.epoch == epoch
    }

    fn rebalance_timeout_ms(&self) -> i64 {
        i64::from(self.rebalance_timeout_ms.max(0))
    }
}

/// A subscribed topic as last seen (its id is the map key): a rename, a new partition count
/// or its disappearance is a metadata change.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
struct SubscribedTopic {
    name: String,
    partitions: i32,
}

/// A subscription pattern in use, compiled once for all the members that share it.
#[derive(Debug)]
struct SubscribedRegex {
    regex: Regex,
    members: usize,
}

impl ConsumerGroup {
    pub fn new(group_id: String, config: ConsumerConfig) -> ConsumerGroup {
        ConsumerGroup {
            group_id,
            config,
            group_epoch: 0,
            assignment_epoch: 0,
            members: BTreeMap::new(),
            targets: BTreeMap::new(),
            subscribed: BTreeMap::new(),
            static_members: BTreeMap::new(),
            holders: BTreeMap::new(),
            topic_names: BTreeMap::new(),
            regexes: BTreeMap::new(),
            session_deadlines: BTreeMap::new(),
            revocation_deadlines: BTreeMap::new(),
            dirty: false,
        }
    }

    /// New settings from a change of the group's configs (`consumer.*`): they apply from the
    /// next heartbeat of each member.
    pub fn set_config(&mut self, config: ConsumerConfig) {
        self.config = config;
    }

    pub fn group_id(&self) -> &str {
        &self.group_id
    }

    pub fn state(&self) -> ConsumerState {
        if self.members.is_empty() {
            ConsumerState::Empty
        } else if self.group_epoch > self.assignment_epoch {
            ConsumerState::Assigning
        } else if self
            .members
            .values()
            .all(|m| m.is_reconciled_to(self.assignment_epoch))
        {
            ConsumerState::Stable
        } else {
            ConsumerState::Reconciling
        }
    }

    pub fn group_epoch(&self) -> i32 {
        self.group_epoch
    }

    /// The epoch the current target assignment was computed for.
    pub fn assignment_epoch(&self) -> i32 {
        self.assignment_epoch
    }

    pub fn member_count(&self) -> usize {
        self.members.len()
    }

    /// The assignor the group uses now: the one most members name (ties: the configured
    /// default, then `uniform` before `range`), or the default if none names one.
    pub fn assignor(&self) -> AssignorKind {
        let mut votes: BTreeMap<AssignorKind, usize> = BTreeMap::new();
        for member in self.members.values() {
            if let Some(kind) = member
                .server_assignor
                .as_deref()
                .and_then(AssignorKind::from_name)
            {
                *votes.entry(kind).or_default() += 1;
            }
        }
        let default = self.config.default_assignor;
        votes
            .into_iter()
            .max_by_key(|(kind, count)| (*count, *kind == default, std::cmp::Reverse(*kind)))
            .map_or(default, |(kind, _)| kind)
    }

    /// Expires sessions and rebalance (revocation) timeouts; recomputes the target assignment
    /// when the subscribed topics' metadata changed. Call it at [`Self::next_deadline`] and
    /// periodically (every second or few) so topic creation and growth are noticed without a
    /// heartbeat.
    pub fn tick(
        &mut self,
        now: i64,
        topics: &BTreeMap<Uuid, TopicInfo>,
        effects: &mut Vec<Effect>,
    ) {
        let expired: Vec<String> = self
            .members
            .keys()
            .filter(|id| {
                let session_over = self.session_deadlines.get(*id).is_some_and(|d| *d <= now);
                let revocation_over = self
                    .revocation_deadlines
                    .get(*id)
                    .is_some_and(|d| *d <= now);
                session_over || revocation_over
            })
            .cloned()
            .collect();
        for member_id in &expired {
            tracing::info!(group = %self.group_id, member = %member_id, "consumer group member expired");
            self.remove_member(member_id);
        }
        let metadata_changed = self.refresh_subscribed(topics);
        if !expired.is_empty() || metadata_changed {
            self.bump_and_assign();
        }
        self.flush(effects);
    }

    pub fn next_deadline(&self) -> Option<i64> {
        self.session_deadlines
            .values()
            .chain(self.revocation_deadlines.values())
            .min()
            .copied()
    }

    /// OffsetCommit check for this protocol: the member must exist and `member_epoch` must be
    /// its current epoch (STALE_MEMBER_EPOCH / UNKNOWN_MEMBER_ID otherwise). An admin commit
    /// (epoch < 0; the member id is then normally empty) is allowed only while the group is
    /// Empty, as in Kafka. A newer epoch than the member's is also STALE_MEMBER_EPOCH (Kafka
    /// rejects any mismatch with it).
    pub fn validate_offset_commit(
        &self,
        member_id: &str,
        member_epoch: i32,
    ) -> Result<(), GroupError> {
        if member_epoch < 0 && self.members.is_empty() {
            return Ok(());
        }
        self.validate_member_epoch(member_id, member_epoch)
    }

    /// OffsetFetch check (v9+ with a member id): `Ok` or STALE_MEMBER_EPOCH/UNKNOWN_MEMBER_ID.
    /// No member id with a negative epoch (admin clients) is always allowed.
    pub fn validate_offset_fetch(
        &self,
        member_id: &str,
        member_epoch: i32,
    ) -> Result<(), GroupError> {
        if member_id.is_empty() && member_epoch < 0 {
            return Ok(());
        }
        self.validate_member_epoch(member_id, member_epoch)
    }

    fn validate_member_epoch(&self, member_id: &str, member_epoch: i32) -> Result<(), GroupError> {
        let member = self
            .members
            .get(member_id)
            .ok_or_else(|| GroupError::unknown_member(&self.group_id, member_id))?;
        if member.epoch != member_epoch {
            return Err(GroupError::StaleMemberEpoch {
                member_epoch,
                current_epoch: member.epoch,
            });
        }
        Ok(())
    }

    /// Topic names the group subscribes to: every name a member lists (existing or not) and
    /// every existing topic a member's regex matches. Sorted.
    pub fn subscribed_topics(&self) -> Vec<String> {
        let names: BTreeSet<&String> = self
            .topic_names
            .keys()
            .chain(self.subscribed.values().map(|t| &t.name))
            .collect();
        names.into_iter().cloned().collect()
    }

    /// ConsumerGroupDescribe. Members in member id order; partitions of topics no longer in
    /// `topics` are left out.
    pub fn describe(&self, topics: &BTreeMap<Uuid, TopicInfo>) -> GroupDescription {
        let existing = |assignment: &Assignment| -> Assignment {
            assignment
                .iter()
                .filter(|(id, partitions)| topics.contains_key(id) && !partitions.is_empty())
                .map(|(id, partitions)| (*id, partitions.clone()))
                .collect()
        };
        let members = self
            .members
            .values()
            .map(|m| MemberDescription {
                member_id: m.member_id.clone(),
                instance_id: m.instance_id.clone(),
                rack_id: m.rack_id.clone(),
                member_epoch: m.epoch,
                client_id: m.client_id.clone(),
                client_host: m.client_host.clone(),
                subscribed_topic_names: m.subscribed_topic_names.iter().cloned().collect(),
                subscribed_topic_regex: m.subscribed_topic_regex.clone(),
                assignment: existing(&m.assigned),
                target_assignment: self
                    .targets
                    .get(&m.member_id)
                    .map(existing)
                    .unwrap_or_default(),
            })
            .collect();
        GroupDescription {
            state: self.state(),
            group_epoch: self.group_epoch,
            assignment_epoch: self.assignment_epoch,
            assignor_name: self.assignor().name().to_string(),
            members,
        }
    }
}

fn partitions(assignment: &Assignment) -> impl Iterator<Item = (Uuid, i32)> + '_ {
    assignment
        .iter()
        .flat_map(|(topic_id, set)| set.iter().map(move |p| (*topic_id, *p)))
}

/// A subscription pattern as Kafka matches it (RE2J `matches()`: the whole topic name).
fn compile_regex(pattern: &str) -> Result<Regex, regex::Error> {
    // Checked alone first: wrapped, an unbalanced pattern such as `a)|(b` would parse.
    RegexBuilder::new(pattern)
        .size_limit(REGEX_SIZE_LIMIT_BYTES)
        .build()?;
    RegexBuilder::new(&format!("^(?:{pattern})$"))
        .size_limit(REGEX_SIZE_LIMIT_BYTES)
        .build()
}
