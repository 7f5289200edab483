//! The classic consumer-group protocol (JoinGroup / SyncGroup / Heartbeat / LeaveGroup) as a
//! pure state machine: every call takes `now` (ms since the epoch) and returns what to answer;
//! answers that must wait for a rebalance come out later as [`Effect`]s. No I/O, no clock, no
//! tasks: the coordinator (`lib.rs`) owns the waiting requests and the timer that calls
//! [`ClassicGroup::tick`].
//!
//! The behaviour follows Apache Kafka's classic group coordinator, including static membership
//! (KIP-345), the member id handshake (KIP-394), the initial rebalance delay (KIP-134) and the
//! static leader's skipped assignment (KIP-814).
//!
//! ## States
//!
//! | state | members | what happens |
//! |---|---|---|
//! | `Empty` | none | offsets only; the first JoinGroup starts a rebalance |
//! | `PreparingRebalance` | rejoining | JoinGroups park until every member rejoined, or the join phase times out |
//! | `CompletingRebalance` | of the new generation | followers' SyncGroups park until the leader sends the assignment |
//! | `Stable` | of the new generation | SyncGroup answers the stored assignment; heartbeats say NONE |
//! | `Dead` | none | the coordinator dropped the group ([`ClassicGroup::mark_dead`]); every call says COORDINATOR_NOT_AVAILABLE |
//!
//! ## Transitions
//!
//! - `Empty`/`Stable`/`CompletingRebalance` → `PreparingRebalance`: a new member joins, a
//!   member joins with changed metadata, the leader rejoins from `Stable`, a member leaves or
//!   expires, members miss the sync deadline. Parked SyncGroups are answered
//!   REBALANCE_IN_PROGRESS and assignments are cleared.
//! - `PreparingRebalance` → `CompletingRebalance`: the join phase ends. Dynamic members that did
//!   not rejoin are removed (static ones stay for their session), the generation goes up, the
//!   protocol is chosen by vote, the leader is kept if it rejoined (else the first rejoined
//!   member leads), and every parked JoinGroup is answered (the leader's with all members).
//! - `PreparingRebalance` → `Empty`: the join phase ends with no members; the generation still
//!   goes up and the group is persisted.
//! - `CompletingRebalance` → `Stable`: the leader's SyncGroup; its assignment is stored
//!   ([`Effect::Persist`]) and every parked SyncGroup is answered.
//! - A known static member rejoining with a new member id replaces the old id (whose parked
//!   requests are answered FENCED_INSTANCE_ID); in `Stable`, when the group's protocol stays the
//!   same, it is answered at once with the current generation and no rebalance.
//!
//! ## Timers (all through [`ClassicGroup::tick`] / [`ClassicGroup::next_deadline`])
//!
//! - **Session**: each member's deadline is `session_timeout_ms` after its last valid JoinGroup,
//!   SyncGroup or Heartbeat. Members with a parked JoinGroup or SyncGroup do not expire (they are
//!   waiting on the group, not the other way round), except new members, whose parked JoinGroup
//!   may wait at most [`NEW_MEMBER_JOIN_TIMEOUT_MS`]. An expired member is removed.
//! - **Pending member id**: a member id handed out with MEMBER_ID_REQUIRED is forgotten after
//!   the session timeout of the join that asked for it. Pending ids hold up the join phase.
//! - **Join phase**: `PreparingRebalance` ends early when every member and pending member has
//!   joined, else at the rebalance timeout (the largest of the members'). The first rebalance
//!   of an `Empty` group instead waits `initial_rebalance_delay_ms`, again for each step in which
//!   a new member joined, never past the rebalance timeout in total.
//! - **Sync**: members of a new generation that have not sent SyncGroup within the rebalance
//!   timeout are removed and the group rebalances.
//!
//! ## Durability
//!
//! [`Effect::Persist`] means "store [`ClassicGroup::snapshot`] before sending any answer of this
//! call", the `Reply::Now` included. It comes out when a group becomes `Stable` with a new
//! assignment, when a join phase ends `Empty`, and when a static member replaces its member id
//! without a rebalance: the points where Kafka writes its group metadata record.
//! [`ClassicGroup::restore`] documents what a snapshot comes back as.
//!
//! ## Files
//!
//! - `mod.rs` (this file): the public types, the group's state and its read-only views
//!   (offset commit checks, subscribed topics, describe) and member lookups.
//! - `join.rs`: JoinGroup, preparing a rebalance and completing the join phase.
//! - `sync.rs`: SyncGroup and completing a rebalance with the leader's assignment.
//! - `membership.rs`: Heartbeat, LeaveGroup, member removal, pending member ids and the timers
//!   ([`ClassicGroup::tick`], [`ClassicGroup::next_deadline`]).
//! - `snapshot.rs`: [`ClassicGroup::snapshot`] / [`ClassicGroup::restore`] and the stored layout.
//! - `tests.rs` and `tests/`: unit tests.

mod join;
mod membership;
mod snapshot;
mod sync;
#[cfg(test)]
mod tests;

use std::collections::BTreeSet;

use bytes::{Buf, Bytes};
use serde::{Deserialize, Serialize};
use sluice_protocol::kafka_protocol::messages::ConsumerProtocolSubscription;
use sluice_protocol::kafka_protocol::protocol::Decodable;

use crate::errors::{self, GroupError};

/// How long a brand-new member's JoinGroup may stay parked. Its client cannot heartbeat (it has
/// no member id yet) and a client that gave up and retried would otherwise leave a defunct
/// member in every rebalance; Kafka uses the same five minutes.
pub const NEW_MEMBER_JOIN_TIMEOUT_MS: i64 = 5 * 60 * 1000;

/// Most member ids one group hands out with MEMBER_ID_REQUIRED and has not seen again. The
/// limit actually used is also at most `members_max` (more would-be members than the group can
/// hold gain nothing). Past it, the pending id due to expire first is forgotten; its client, on
/// coming back, gets UNKNOWN_MEMBER_ID and starts over (retriable, where refusing the new one
/// with GROUP_MAX_SIZE_REACHED would be fatal to a Java consumer).
pub const PENDING_MEMBERS_MAX: usize = 1024;

/// Format version of [`ClassicSnapshot::state`].
const SNAPSHOT_VERSION: u32 = 1;

/// The `protocol_type` whose metadata is a Kafka consumer subscription.
const CONSUMER_PROTOCOL_TYPE: &str = "consumer";

/// Broker-wide settings for classic groups.
#[derive(Debug, Clone)]
pub struct ClassicConfig {
    /// `group.initial.rebalance.delay.ms`: how long the first rebalance of an empty group waits
    /// for more members (extended by each join, up to the rebalance timeout).
    pub initial_rebalance_delay_ms: i64,
    /// `group.min.session.timeout.ms` / `group.max.session.timeout.ms`.
    pub session_timeout_min_ms: i32,
    pub session_timeout_max_ms: i32,
    /// `group.max.size`: most members one group may have.
    pub members_max: usize,
}

/// Lifecycle of a classic group (the names DescribeGroups/ListGroups report).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum ClassicState {
    Empty,
    PreparingRebalance,
    CompletingRebalance,
    Stable,
    Dead,
}

impl ClassicState {
    /// The name Kafka reports.
    pub fn name(self) -> &'static str {
        match self {
            ClassicState::Empty => "Empty",
            ClassicState::PreparingRebalance => "PreparingRebalance",
            ClassicState::CompletingRebalance => "CompletingRebalance",
            ClassicState::Stable => "Stable",
            ClassicState::Dead => "Dead",
        }
    }
}

/// A JoinGroup request, already validated at the wire edge (group id non-empty).
#[derive(Debug, Clone)]
pub struct JoinRequest {
    /// Empty on a member's first join.
    pub member_id: String,
    pub group_instance_id: Option<String>,
    pub client_id: String,
    pub client_host: String,
    pub protocol_type: String,
    /// `(protocol name, metadata)` in the client's order of preference.
    pub protocols: Vec<(String, Bytes)>,
    pub session_timeout_ms: i32,
    pub rebalance_timeout_ms: i32,
    /// JoinGroup v4+: a dynamic member's first join is answered MEMBER_ID_REQUIRED with its new
    /// member id, and it must join again with that id.
    pub require_known_member_id: bool,
    pub reason: Option<String>,
}

/// A JoinGroup answer. `members` is filled for the leader only.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct JoinResult {
    /// Why the join was refused (`None`: joined). [`GroupError::MemberIdRequired`] comes with
    /// the new `member_id`.
    pub error: Option<GroupError>,
    pub generation_id: i32,
    pub protocol_type: Option<String>,
    pub protocol_name: Option<String>,
    pub leader: String,
    pub skip_assignment: bool,
    pub member_id: String,
    pub members: Vec<JoinedMember>,
}

#[derive(Debug, Clone, PartialEq)]
pub struct JoinedMember {
    pub member_id: String,
    pub group_instance_id: Option<String>,
    pub metadata: Bytes,
}

#[derive(Debug, Clone)]
pub struct SyncRequest {
    pub member_id: String,
    pub group_instance_id: Option<String>,
    pub generation_id: i32,
    /// SyncGroup v5+: must match the group's, when given.
    pub protocol_type: Option<String>,
    pub protocol_name: Option<String>,
    /// The leader's assignment: `(member id, assignment)`; empty from followers.
    pub assignments: Vec<(String, Bytes)>,
}

#[derive(Debug, Clone, Default, PartialEq)]
pub struct SyncResult {
    /// Why the sync was refused (`None`: `assignment` is the member's).
    pub error: Option<GroupError>,
    pub protocol_type: Option<String>,
    pub protocol_name: Option<String>,
    pub assignment: Bytes,
}

impl JoinResult {
    /// The Kafka error code of [`JoinResult::error`].
    pub fn error_code(&self) -> i16 {
        errors::error_code(self.error.as_ref())
    }
}

impl SyncResult {
    /// The Kafka error code of [`SyncResult::error`].
    pub fn error_code(&self) -> i16 {
        errors::error_code(self.error.as_ref())
    }
}

/// A LeaveGroup member: by member id, or (v3+) by group instance id.
#[derive(Debug, Clone)]
pub struct LeavingMember {
    pub member_id: String,
    pub group_instance_id: Option<String>,
}

/// An answer now, or later through an [`Effect`] for the same member id.
#[derive(Debug, Clone, PartialEq)]
pub enum Reply<T> {
    Now(T),
    Later { member_id: String },
}

/// Something the coordinator must do after a call.
#[derive(Debug, Clone, PartialEq)]
pub enum Effect {
    /// Answer the waiting JoinGroup of `member_id`.
    Join {
        member_id: String,
        result: JoinResult,
    },
    /// Answer the waiting SyncGroup of `member_id`.
    Sync {
        member_id: String,
        result: SyncResult,
    },
    /// The durable part of the group changed: store [`ClassicGroup::snapshot`] before sending
    /// the Join/Sync answers produced by the same call.
    Persist,
}

/// DescribeGroups view of a member.
#[derive(Debug, Clone, PartialEq)]
pub struct MemberDescription {
    pub member_id: String,
    pub group_instance_id: Option<String>,
    pub client_id: String,
    pub client_host: String,
    /// Metadata of the group's chosen protocol (empty when none chosen).
    pub metadata: Bytes,
    pub assignment: Bytes,
}

/// DescribeGroups view of the group.
#[derive(Debug, Clone, PartialEq)]
pub struct GroupDescription {
    pub state: ClassicState,
    pub protocol_type: String,
    pub protocol_name: String,
    pub members: Vec<MemberDescription>,
}

/// What survives a restart: generation, protocol, leader, and each member with its
/// subscription metadata, assignment and timeouts (sessions restart at `restore`'s `now`).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ClassicSnapshot {
    /// `{"version":1,"state":..,"generation_id":..,"protocol_type":..,"protocol_name":..,
    /// "leader_id":..,"members":[..]}`; each member with its ids, client, timeouts, protocols
    /// (name and metadata) and assignment, metadata and assignments as lowercase hex strings.
    pub state: serde_json::Value,
}

/// One member of the group.
#[derive(Debug, Clone)]
struct Member {
    member_id: String,
    group_instance_id: Option<String>,
    client_id: String,
    client_host: String,
    /// In the client's order of preference.
    protocols: Vec<(String, Bytes)>,
    session_timeout_ms: i32,
    rebalance_timeout_ms: i32,
    /// For the current generation; empty until the leader's SyncGroup.
    assignment: Bytes,
    /// Its JoinGroup is parked (answered by [`Effect::Join`]).
    awaiting_join: bool,
    /// Its SyncGroup is parked (answered by [`Effect::Sync`]).
    awaiting_sync: bool,
    /// Joined and not yet through a join phase: [`NEW_MEMBER_JOIN_TIMEOUT_MS`] applies.
    is_new: bool,
    /// Got the current generation and has not sent SyncGroup for it yet.
    pending_sync: bool,
    /// When the session ends unless refreshed (see [`Member::expiry`]).
    session_deadline: i64,
}

impl Member {
    fn supports(&self, protocol: &str) -> bool {
        self.protocols.iter().any(|(name, _)| name == protocol)
    }

    /// Metadata for `protocol` (empty when the member does not support it).
    fn metadata(&self, protocol: &str) -> Bytes {
        self.protocols
            .iter()
            .find(|(name, _)| name == protocol)
            .map(|(_, metadata)| metadata.clone())
            .unwrap_or_default()
    }

    /// Same protocols, same metadata, same order.
    fn matches(&self, protocols: &[(String, Bytes)]) -> bool {
        self.protocols == protocols
    }

    /// The member's most preferred protocol among `candidates`.
    fn vote<'a>(&'a self, candidates: &[&str]) -> Option<&'a str> {
        self.protocols
            .iter()
            .map(|(name, _)| name.as_str())
            .find(|name| candidates.contains(name))
    }

    /// Starts the session over at `now`.
    fn refresh(&mut self, now: i64) {
        let timeout_ms = if self.is_new {
            NEW_MEMBER_JOIN_TIMEOUT_MS
        } else {
            i64::from(self.session_timeout_ms)
        };
        self.session_deadline = now.saturating_add(timeout_ms);
    }

    /// When the member is removed unless it calls again; `None` while it waits on the group.
    fn expiry(&self) -> Option<i64> {
        if self.awaiting_join {
            self.is_new.then_some(self.session_deadline)
        } else if self.awaiting_sync {
            None
        } else {
            Some(self.session_deadline)
        }
    }

    fn update(&mut self, now: i64, req: JoinRequest) {
        self.protocols = req.protocols;
        self.session_timeout_ms = req.session_timeout_ms;
        self.rebalance_timeout_ms = req.rebalance_timeout_ms;
        self.awaiting_join = true;
        self.refresh(now);
    }
}

/// A member id handed out with MEMBER_ID_REQUIRED, waiting for the member's second join.
#[derive(Debug, Clone)]
struct PendingMember {
    member_id: String,
    deadline: i64,
}

/// Progress of the first rebalance of an `Empty` group (Kafka's initial delayed join).
#[derive(Debug, Clone, Copy)]
struct InitialDelay {
    /// Length of the current step.
    delay_ms: i64,
    /// Budget left for further steps (rebalance timeout minus the steps so far).
    remaining_ms: i64,
    /// A member joined during the current step: take another one.
    new_member_added: bool,
}

/// One classic group.
#[derive(Debug)]
pub struct ClassicGroup {
    group_id: String,
    config: ClassicConfig,
    state: ClassicState,
    generation_id: i32,
    /// Set by the first member to join; kept while the group is empty.
    protocol_type: Option<String>,
    /// Chosen at the end of each join phase; `None` while `Empty`.
    protocol_name: Option<String>,
    /// A member whenever there are members.
    leader_id: Option<String>,
    /// In join order; at most `config.members_max` (unless restored with a smaller limit).
    members: Vec<Member>,
    /// At most [`ClassicGroup::pending_limit`].
    pending: Vec<PendingMember>,
    /// `PreparingRebalance`: when the join phase (or the current initial-delay step) ends.
    join_deadline: Option<i64>,
    /// `PreparingRebalance` of an `Empty` group with a configured delay.
    initial_delay: Option<InitialDelay>,
    /// `CompletingRebalance`/`Stable`: members still `pending_sync` then are removed.
    sync_deadline: Option<i64>,
}

impl ClassicGroup {
    pub fn new(group_id: String, config: ClassicConfig) -> ClassicGroup {
        ClassicGroup {
            group_id,
            config,
            state: ClassicState::Empty,
            generation_id: 0,
            protocol_type: None,
            protocol_name: None,
            leader_id: None,
            members: Vec::new(),
            pending: Vec::new(),
            join_deadline: None,
            initial_delay: None,
            sync_deadline: None,
        }
    }

    pub fn group_id(&self) -> &str {
        &self.group_id
    }

    pub fn state(&self) -> ClassicState {
        self.state
    }

    pub fn generation_id(&self) -> i32 {
        self.generation_id
    }

    pub fn protocol_type(&self) -> &str {
        self.protocol_type.as_deref().unwrap_or("")
    }

    pub fn member_count(&self) -> usize {
        self.members.len()
    }

    /// The coordinator has dropped the group (deleted, or moved away): every later call answers
    /// COORDINATOR_NOT_AVAILABLE. Parked requests are *not* answered: call it on `Empty` groups,
    /// which have none, or answer them yourself.
    pub fn mark_dead(&mut self) {
        self.state = ClassicState::Dead;
        self.members.clear();
        self.pending.clear();
        self.leader_id = None;
        self.protocol_name = None;
        self.join_deadline = None;
        self.initial_delay = None;
        self.sync_deadline = None;
    }

    /// OffsetCommit/TxnOffsetCommit check: `Ok` or why not. `generation_id < 0` with an
    /// empty member id is an "admin" commit, allowed only while the group is Empty.
    ///
    /// As in Kafka, members may commit during `PreparingRebalance` (a consumer commits what it
    /// consumed before it rejoins); only `CompletingRebalance` answers REBALANCE_IN_PROGRESS.
    pub fn validate_offset_commit(
        &self,
        member_id: &str,
        group_instance_id: Option<&str>,
        generation_id: i32,
    ) -> Result<(), GroupError> {
        if self.state == ClassicState::Dead {
            return Err(self.dead());
        }
        if generation_id < 0 && self.state == ClassicState::Empty {
            return Ok(());
        }
        if generation_id >= 0 || !member_id.is_empty() || group_instance_id.is_some() {
            self.validate_member(member_id, group_instance_id)?;
            if generation_id != self.generation_id {
                return Err(self.illegal_generation(generation_id));
            }
        } else {
            // No member id and no generation: only a group without members takes those.
            return Err(GroupError::UnknownMemberId(format!(
                "group {} has members: a commit without a member id is refused",
                self.group_id
            )));
        }
        if self.state == ClassicState::CompletingRebalance {
            return Err(self.rebalancing());
        }
        Ok(())
    }

    /// Topics the members are subscribed to (from `consumer` protocol metadata, when parseable).
    ///
    /// Reads each member's metadata for the chosen protocol (its first protocol before one is
    /// chosen); sorted, without duplicates.
    pub fn subscribed_topics(&self) -> Vec<String> {
        if self.protocol_type.as_deref() != Some(CONSUMER_PROTOCOL_TYPE) {
            return Vec::new();
        }
        let mut topics = BTreeSet::new();
        for member in &self.members {
            let metadata = match &self.protocol_name {
                Some(protocol) => member.metadata(protocol),
                None => member
                    .protocols
                    .first()
                    .map(|(_, metadata)| metadata.clone())
                    .unwrap_or_default(),
            };
            if let Some(subscription) = parse_subscription(metadata) {
                topics.extend(subscription.topics.iter().map(|t| t.to_string()));
            }
        }
        topics.into_iter().collect()
    }

    /// As Kafka: members' metadata and assignments, and the protocol, only while `Stable`.
    pub fn describe(&self) -> GroupDescription {
        let stable = self.state == ClassicState::Stable;
        let protocol_name = match &self.protocol_name {
            Some(name) if stable => name.clone(),
            _ => String::new(),
        };
        let members = self
            .members
            .iter()
            .map(|m| MemberDescription {
                member_id: m.member_id.clone(),
                group_instance_id: m.group_instance_id.clone(),
                client_id: m.client_id.clone(),
                client_host: m.client_host.clone(),
                metadata: if stable {
                    m.metadata(&protocol_name)
                } else {
                    Bytes::new()
                },
                assignment: if stable {
                    m.assignment.clone()
                } else {
                    Bytes::new()
                },
            })
            .collect();
        GroupDescription {
            state: self.state,
            protocol_type: self.protocol_type().to_string(),
            protocol_name,
            members,
        }
    }
}

// Lookups.
impl ClassicGroup {
    fn index(&self, member_id: &str) -> Option<usize> {
        self.members.iter().position(|m| m.member_id == member_id)
    }

    fn static_index(&self, group_instance_id: &str) -> Option<usize> {
        self.members
            .iter()
            .position(|m| m.group_instance_id.as_deref() == Some(group_instance_id))
    }

    fn pending_index(&self, member_id: &str) -> Option<usize> {
        self.pending.iter().position(|p| p.member_id == member_id)
    }

    fn is_leader(&self, member_id: &str) -> bool {
        self.leader_id.as_deref() == Some(member_id)
    }

    fn awaiting_join_count(&self) -> usize {
        self.members.iter().filter(|m| m.awaiting_join).count()
    }

    /// Largest rebalance timeout of the members (0 without members).
    fn rebalance_timeout_ms(&self) -> i64 {
        self.members
            .iter()
            .map(|m| i64::from(m.rebalance_timeout_ms))
            .max()
            .unwrap_or(0)
    }

    /// The member a request names: with an instance id, that instance's current member
    /// (FENCED_INSTANCE_ID if it is another id); else the member id.
    fn validate_member(
        &self,
        member_id: &str,
        group_instance_id: Option<&str>,
    ) -> Result<usize, GroupError> {
        if let Some(instance) = group_instance_id {
            return match self.static_index(instance) {
                None => Err(GroupError::UnknownMemberId(format!(
                    "Instance id {instance} is unknown."
                ))),
                Some(i) if self.members[i].member_id != member_id => {
                    Err(self.fenced_instance(member_id, instance))
                }
                Some(i) => Ok(i),
            };
        }
        self.index(member_id)
            .ok_or_else(|| self.unknown_member(member_id))
    }
}

// Errors, with the group's context.
impl ClassicGroup {
    fn dead(&self) -> GroupError {
        GroupError::GroupDead {
            group_id: self.group_id.clone(),
        }
    }

    fn unknown_member(&self, member_id: &str) -> GroupError {
        GroupError::unknown_member(&self.group_id, member_id)
    }

    fn illegal_generation(&self, generation_id: i32) -> GroupError {
        GroupError::IllegalGeneration {
            group_id: self.group_id.clone(),
            generation_id,
        }
    }

    fn rebalancing(&self) -> GroupError {
        GroupError::RebalanceInProgress {
            group_id: self.group_id.clone(),
        }
    }

    fn inconsistent_protocol(&self) -> GroupError {
        GroupError::InconsistentGroupProtocol {
            group_id: self.group_id.clone(),
        }
    }

    fn fenced_instance(&self, member_id: &str, instance: &str) -> GroupError {
        GroupError::FencedInstanceId(format!(
            "Static member {member_id} with instance id {instance} was fenced: the instance \
             rejoined under another member id."
        ))
    }
}

fn join_error(member_id: &str, error: GroupError) -> JoinResult {
    JoinResult {
        error: Some(error),
        generation_id: -1,
        member_id: member_id.to_string(),
        ..JoinResult::default()
    }
}

fn sync_error(error: GroupError) -> SyncResult {
    SyncResult {
        error: Some(error),
        ..SyncResult::default()
    }
}

/// A Kafka consumer subscription: an `i16` version, then the fields. Every version begins with
/// version 0's fields (topics, user data), so reading those reads any version, newer ones
/// included.
fn parse_subscription(mut metadata: Bytes) -> Option<ConsumerProtocolSubscription> {
    if metadata.len() < 2 {
        return None;
    }
    if metadata.get_i16() < 0 {
        return None;
    }
    ConsumerProtocolSubscription::decode(&mut metadata, 0).ok()
}
