//! # Consumer groups: the group coordinator
//!
//! One broker is the coordinator of every group; in cluster mode each group has one
//! coordinator among many brokers (see [`ownership`]). This crate joins the pure group state
//! machines to storage and time; the broker turns Kafka requests into its calls:
//!
//! - [`classic`]: the classic protocol (JoinGroup, SyncGroup, Heartbeat, LeaveGroup);
//! - [`consumer`] + [`assignor`]: the KIP-848 protocol (ConsumerGroupHeartbeat) with
//!   server-side assignment;
//! - [`store`]: the durable file of committed offsets and group snapshots (one broker);
//! - [`ownership`]: [`GroupOwnership`], a store many brokers share with one owner per group
//!   (cluster mode);
//! - [`errors`]: [`GroupError`], why a request was refused, and the one map from it to Kafka
//!   error codes ([`GroupError::code`]): the state machines and the coordinator answer with
//!   `GroupError`s, never with raw codes.
//!
//! [`Coordinator`] owns every group behind one mutex (held only for in-memory work, never
//! across an await), the requests parked until a rebalance answers them, and a timer task
//! that calls the state machines' `tick` when a deadline passes.
//!
//! Durability: a committed offset is acknowledged only after the store's fdatasync covers it
//! (in cluster mode: after the shared store committed it, fenced by the group's lease); a
//! group whose durable state changed (its generation and assignment after a rebalance, its
//! KIP-848 epochs and assignments) is stored before the answers that reveal the change go out.
//! Changes are applied in memory in request order, before their fsync: a reader can see a
//! commit a crash then loses, which can only make a consumer re-read records, never skip them.
//!
//! ## Cluster mode
//!
//! [`Coordinator::with_ownership`] runs the coordinator over a [`GroupOwnership`]. It keeps
//! in memory only the groups it holds the lease of. A request for any other group first
//! takes it ([`GroupOwnership::take`]); what was loaded is installed by the same code path
//! recovery uses at open (`restored_group`): a classic group's members rejoin, a KIP-848
//! group resumes from its stored epochs. Held elsewhere: [`GroupError::NotCoordinator`];
//! store unavailable: [`GroupError::CoordinatorNotAvailable`]. A group lost to another
//! broker ([`GroupOwnership::lost`], checked at every request and timer tick, and at once
//! after a refused write) is dropped from memory, its parked requests answered
//! NOT_COORDINATOR, so its members find the new coordinator and rejoin there.

pub mod assignor;
pub mod classic;
pub mod consumer;
pub mod errors;
pub mod ownership;
pub mod share;
pub mod share_api;
pub mod store;
mod takeover;

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, Weak};
use std::time::Duration;

use futures::FutureExt;
use futures::future::{BoxFuture, Shared};
use sluice_log::{Clock, GroupCommitter};
use tokio::sync::oneshot;
use uuid::Uuid;

use assignor::{AssignorKind, TopicInfo};
use classic::{ClassicConfig, ClassicGroup};
use consumer::{ConsumerConfig, ConsumerGroup};
pub use errors::{GroupError, SharedStoreError};
pub use ownership::{GroupOwnership, OwnerEpoch, Take, TakenGroup, Written};
use share::{ShareGroup, ShareSettings};
use share_api::share_settings;
pub use store::{CommittedOffset, GroupRecord, GroupStore, StoreError, StoreOptions};
use takeover::Backend;

/// Kafka's `offset.metadata.max.bytes`: the longest metadata string a commit may carry.
pub const OFFSET_METADATA_MAX_BYTES: usize = 4096;
/// How often the timer looks for group deadlines that passed. Session and rebalance timeouts
/// are seconds long; 100 ms of lateness is noise against them.
const TICK_INTERVAL: Duration = Duration::from_millis(100);
/// How often KIP-848 groups are ticked even without a deadline, so that topics created or
/// grown since the last heartbeat reach their target assignment.
const METADATA_TICK_MS: i64 = 1_000;
/// Slack beyond a parked request's own timeout after which it is answered regardless: a
/// guard against a member that left the state machine without an answer for its request.
const PARKED_SLACK_MS: i64 = 30_000;
/// Cluster mode: how long a lease taken for a group with no state (an OffsetFetch or
/// DescribeGroups of a group nobody uses, a group deleted since) is kept before the timer
/// releases it. Long enough that the request which took it has made the group (a JoinGroup
/// or a commit right after its FindCoordinator), short enough that probes of many unused
/// group ids do not pile up leases to renew.
const UNUSED_LEASE_KEEP_MS: i64 = 60_000;

/// Group settings (Kafka's `group.*` broker configs).
#[derive(Debug, Clone)]
pub struct GroupConfig {
    pub classic: ClassicConfig,
    pub consumer: ConsumerConfig,
    /// Share groups' defaults (`group.share.*`); each group's configs override them.
    pub share: ShareSettings,
    /// Most groups this broker keeps (each costs memory and store records).
    pub groups_max: usize,
}

impl Default for GroupConfig {
    fn default() -> Self {
        GroupConfig {
            classic: ClassicConfig {
                initial_rebalance_delay_ms: 3_000,
                session_timeout_min_ms: 6_000,
                session_timeout_max_ms: 1_800_000,
                members_max: 1_000,
            },
            consumer: ConsumerConfig {
                session_timeout_ms: 45_000,
                heartbeat_interval_ms: 5_000,
                members_max: 1_000,
                default_assignor: AssignorKind::Uniform,
            },
            share: ShareSettings::default(),
            groups_max: 10_000,
        }
    }
}

/// Why a [`GroupConfig`] was refused; the message names the `serve` setting to fix.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct ConfigError(pub String);

impl GroupConfig {
    /// Checks the settings together (the heartbeat interval against the session timeout, either
    /// of which may be a default).
    pub fn validate(&self) -> Result<(), ConfigError> {
        let delay = self.classic.initial_rebalance_delay_ms;
        if delay < 0 {
            return Err(ConfigError(format!(
                "group_initial_rebalance_delay_ms must be 0 or more, got {delay}"
            )));
        }
        let consumer = &self.consumer;
        if consumer.heartbeat_interval_ms < 1
            || consumer.heartbeat_interval_ms >= consumer.session_timeout_ms
        {
            return Err(ConfigError(format!(
                "group_consumer_heartbeat_interval_ms ({}) must be at least 1 and less than group_consumer_session_timeout_ms ({})",
                consumer.heartbeat_interval_ms, consumer.session_timeout_ms
            )));
        }
        let share = &self.share;
        if share.heartbeat_interval_ms < 1
            || share.heartbeat_interval_ms >= share.session_timeout_ms
        {
            return Err(ConfigError(format!(
                "group_share_heartbeat_interval_ms ({}) must be at least 1 and less than group_share_session_timeout_ms ({})",
                share.heartbeat_interval_ms, share.session_timeout_ms
            )));
        }
        if share.record_lock_duration_ms < 1_000 {
            return Err(ConfigError(format!(
                "group_share_record_lock_duration_ms must be at least 1000, got {}",
                share.record_lock_duration_ms
            )));
        }
        if !(2..=10).contains(&share.delivery_count_limit) {
            return Err(ConfigError(format!(
                "group_share_delivery_count_limit must be between 2 and 10, got {}",
                share.delivery_count_limit
            )));
        }
        if !(100..=10_000).contains(&share.max_record_locks) {
            return Err(ConfigError(format!(
                "group_share_partition_max_record_locks must be between 100 and 10000, got {}",
                share.max_record_locks
            )));
        }
        if share.members_max == 0 {
            return Err(ConfigError(
                "group_share_max_size must be at least 1".to_owned(),
            ));
        }
        if self.groups_max == 0 {
            return Err(ConfigError("groups_max must be at least 1".to_owned()));
        }
        Ok(())
    }
}

/// A group's protocol family, as ListGroups v5 reports it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GroupType {
    Classic,
    Consumer,
    Share,
}

impl GroupType {
    pub fn name(self) -> &'static str {
        match self {
            GroupType::Classic => "classic",
            GroupType::Consumer => "consumer",
            GroupType::Share => "share",
        }
    }
}

/// One line of ListGroups.
#[derive(Debug, Clone, PartialEq)]
pub struct ListedGroup {
    pub group_id: String,
    pub group_type: GroupType,
    pub protocol_type: String,
    pub state: &'static str,
}

/// Committed offsets by topic: `(topic, [(partition, offset, if any)])`.
pub type TopicOffsets = Vec<(String, Vec<(i32, Option<CommittedOffset>)>)>;

/// One outcome per partition, by topic: `(topic, [(partition, outcome)])`.
pub type PartitionOutcomes = Vec<(String, Vec<(i32, Result<(), GroupError>)>)>;

#[derive(Debug)]
enum Kind {
    Classic(ClassicGroup),
    Consumer(ConsumerGroup),
    Share(ShareGroup),
}

#[derive(Debug)]
struct Group {
    kind: Kind,
    offsets: BTreeMap<(String, i32), CommittedOffset>,
    joins: HashMap<String, oneshot::Sender<classic::JoinResult>>,
    syncs: HashMap<String, oneshot::Sender<classic::SyncResult>>,
    /// The lease this broker holds the group at; every write names it (always
    /// `OwnerEpoch(0)` with the file store).
    epoch: OwnerEpoch,
    /// The group's configs (DescribeConfigs/IncrementalAlterConfigs on GROUP resources),
    /// kept with its snapshot; they outlive a change of the group's type.
    configs: BTreeMap<String, String>,
}

impl Group {
    fn new(kind: Kind, epoch: OwnerEpoch) -> Group {
        Group {
            kind,
            offsets: BTreeMap::new(),
            joins: HashMap::new(),
            syncs: HashMap::new(),
            epoch,
            configs: BTreeMap::new(),
        }
    }

    /// Answers every parked JoinGroup and SyncGroup with `error` (the group is going away).
    fn refuse_parked(&mut self, error: &GroupError) {
        for (member_id, tx) in self.joins.drain() {
            let _ = tx.send(classic::JoinResult {
                error: Some(error.clone()),
                member_id,
                ..Default::default()
            });
        }
        for (_, tx) in self.syncs.drain() {
            let _ = tx.send(classic::SyncResult {
                error: Some(error.clone()),
                ..Default::default()
            });
        }
    }

    fn is_empty(&self) -> bool {
        match &self.kind {
            Kind::Classic(g) => g.member_count() == 0,
            Kind::Consumer(g) => g.member_count() == 0,
            Kind::Share(g) => g.member_count() == 0,
        }
    }

    fn group_type(&self) -> GroupType {
        match self.kind {
            Kind::Classic(_) => GroupType::Classic,
            Kind::Consumer(_) => GroupType::Consumer,
            Kind::Share(_) => GroupType::Share,
        }
    }

    fn state_name(&self) -> &'static str {
        match &self.kind {
            Kind::Classic(g) => g.state().name(),
            Kind::Consumer(g) => g.state().name(),
            Kind::Share(g) => g.state().name(),
        }
    }

    fn next_deadline(&self) -> Option<i64> {
        match &self.kind {
            Kind::Classic(g) => g.next_deadline(),
            Kind::Consumer(g) => g.next_deadline(),
            Kind::Share(g) => g.next_deadline(),
        }
    }

    fn snapshot(&self) -> serde_json::Value {
        let mut value = match &self.kind {
            Kind::Classic(g) => {
                serde_json::json!({ "type": "classic", "snapshot": g.snapshot() })
            }
            Kind::Consumer(g) => {
                serde_json::json!({ "type": "consumer", "snapshot": g.snapshot() })
            }
            Kind::Share(g) => {
                serde_json::json!({ "type": "share", "snapshot": g.snapshot() })
            }
        };
        if !self.configs.is_empty() {
            value["configs"] = serde_json::json!(self.configs);
        }
        value
    }

    fn subscribed_topics(&self) -> Vec<String> {
        match &self.kind {
            Kind::Classic(g) => g.subscribed_topics(),
            Kind::Consumer(g) => g.subscribed_topics(),
            Kind::Share(g) => g.subscribed_topics(),
        }
    }
}

#[derive(Debug, Default)]
struct Inner {
    groups: HashMap<String, Group>,
    /// When KIP-848 groups were last ticked for metadata changes.
    metadata_ticked_ms: i64,
    /// Cluster mode: the groups whose lease this broker holds, with or without state in
    /// `groups` (every group in `groups` is here, at the same epoch). Empty with the file
    /// store. At most `groups_max` entries.
    owned: HashMap<String, Held>,
    /// Cluster mode: takes in flight, shared by every request that waits for the same group.
    /// At most one per group, each for a request in flight.
    taking: HashMap<String, Taking>,
    /// Share groups with a share session on each client connection: when the connection
    /// closes, those sessions end and their records go back
    /// ([`Coordinator::share_connection_closed`]).
    share_connections: HashMap<u64, BTreeSet<String>>,
}

/// A group lease this broker holds.
#[derive(Debug, Clone, Copy)]
struct Held {
    epoch: OwnerEpoch,
    /// When it was taken (the clock's milliseconds): a lease kept without state is released
    /// [`UNUSED_LEASE_KEEP_MS`] after.
    taken_ms: i64,
}

/// A take in flight ([`GroupOwnership::take`]), awaited by every request for its group.
type Taking = Shared<BoxFuture<'static, Take>>;

/// The outcome of a durable write shared by several waiters.
type Durable = Shared<BoxFuture<'static, Result<(), SharedStoreError>>>;

/// Answers to deliver once the write they depend on (if any) is durable.
#[derive(Default)]
struct Deliveries {
    durable: Option<Durable>,
    joins: Vec<(oneshot::Sender<classic::JoinResult>, classic::JoinResult)>,
    syncs: Vec<(oneshot::Sender<classic::SyncResult>, classic::SyncResult)>,
}

impl Deliveries {
    /// Sends every answer, after the durable write when there is one (an error if it failed).
    fn send(self) {
        if self.joins.is_empty() && self.syncs.is_empty() {
            return;
        }
        let send = move |stored: Result<(), SharedStoreError>| {
            let failed = stored.err().map(GroupError::StateNotStored);
            for (tx, mut result) in self.joins {
                if let Some(e) = &failed {
                    result = classic::JoinResult {
                        error: Some(e.clone()),
                        ..Default::default()
                    };
                }
                let _ = tx.send(result);
            }
            for (tx, mut result) in self.syncs {
                if let Some(e) = &failed {
                    result = classic::SyncResult {
                        error: Some(e.clone()),
                        ..Default::default()
                    };
                }
                let _ = tx.send(result);
            }
        };
        match self.durable {
            None => send(Ok(())),
            Some(durable) => {
                tokio::spawn(async move { send(durable.await) });
            }
        }
    }
}

/// One committed-offset change, kept until its write is durable so that it can be taken back
/// if the write fails.
#[derive(Debug)]
struct Undo {
    key: (String, i32),
    /// What the change put in place (`None`: it removed the offset).
    set: Option<CommittedOffset>,
    /// What was there before.
    previous: Option<CommittedOffset>,
}

/// The group coordinator: every group, its committed offsets, and their durable store.
#[derive(Debug)]
pub struct Coordinator {
    config: GroupConfig,
    store: Backend,
    inner: Mutex<Inner>,
    clock: Arc<dyn Clock>,
    timer_started: AtomicBool,
}

impl Coordinator {
    /// Opens the group store under `data_dir`, synced by `committer` (the one the partition
    /// logs of that directory use), and restores every group from it.
    /// With `journal` (object-storage mode), each store round is also made durable there
    /// before its writes are acknowledged (see `store`).
    pub fn open(
        data_dir: &Path,
        committer: &GroupCommitter,
        config: GroupConfig,
        clock: Arc<dyn Clock>,
        journal: sluice_storage::Journal,
    ) -> Result<Coordinator, StoreError> {
        let options = StoreOptions {
            journal,
            ..StoreOptions::default()
        };
        Self::open_with_options(data_dir, committer, config, clock, options)
    }

    /// [`Coordinator::open`] with every option of the group store (a journal, the disk fault
    /// seam, the compaction threshold).
    pub fn open_with_options(
        data_dir: &Path,
        committer: &GroupCommitter,
        config: GroupConfig,
        clock: Arc<dyn Clock>,
        options: StoreOptions,
    ) -> Result<Coordinator, StoreError> {
        let (store, mut recovered) =
            GroupStore::open_with_options(data_dir, Some(committer), options)?;
        let now = clock.now_ms();
        let mut groups = HashMap::new();
        let ids: BTreeSet<String> = recovered
            .groups
            .keys()
            .chain(recovered.offsets.keys())
            .cloned()
            .collect();
        for id in ids {
            let snapshot = recovered.groups.remove(&id);
            let offsets = recovered.offsets.remove(&id).unwrap_or_default();
            let epoch = OwnerEpoch::default();
            if let Some(group) = restored_group(&id, &config, snapshot, offsets, epoch, now) {
                groups.insert(id, group);
            }
        }
        if !groups.is_empty() {
            tracing::info!(
                groups = groups.len(),
                truncated_bytes = recovered.truncated_bytes,
                "restored consumer groups"
            );
        }
        Ok(Coordinator {
            config,
            store: Backend::File(store),
            inner: Mutex::new(Inner {
                groups,
                metadata_ticked_ms: now,
                ..Inner::default()
            }),
            clock,
            timer_started: AtomicBool::new(false),
        })
    }

    /// A coordinator for cluster mode, over `ownership`: it starts with no groups and takes
    /// each group it is asked about (see the module doc). Closing it drops every group; call
    /// [`Coordinator::release_all`] (awaited) on a clean shutdown so other brokers take the
    /// groups over at once.
    pub fn with_ownership(
        config: GroupConfig,
        clock: Arc<dyn Clock>,
        ownership: Arc<dyn GroupOwnership>,
    ) -> Coordinator {
        let now = clock.now_ms();
        Coordinator {
            config,
            store: Backend::Shared(ownership),
            inner: Mutex::new(Inner {
                metadata_ticked_ms: now,
                ..Inner::default()
            }),
            clock,
            timer_started: AtomicBool::new(false),
        }
    }

    /// Whether groups are coordinated over a shared store (cluster mode).
    pub fn is_shared(&self) -> bool {
        matches!(self.store, Backend::Shared(_))
    }

    pub fn config(&self) -> &GroupConfig {
        &self.config
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        // A panic while holding the lock leaves groups in a state no request may trust; the
        // state machines never panic on client input, so poisoning means a bug: stop serving.
        self.inner.lock().expect("group coordinator lock poisoned")
    }

    /// Starts the timer task (once, on the tokio runtime of the caller; without one, a later
    /// call starts it), holding the coordinator weakly so it ends with it. `topics` gives the
    /// current topic metadata to KIP-848 groups.
    pub fn start_timer(
        self: &Arc<Self>,
        topics: impl Fn() -> BTreeMap<Uuid, TopicInfo> + Send + 'static,
    ) {
        if self.timer_started.load(Ordering::Acquire) {
            return;
        }
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        if self.timer_started.swap(true, Ordering::AcqRel) {
            return;
        }
        let weak: Weak<Coordinator> = Arc::downgrade(self);
        runtime.spawn(async move {
            let mut interval = tokio::time::interval(TICK_INTERVAL);
            interval.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                interval.tick().await;
                let Some(coordinator) = weak.upgrade() else {
                    return;
                };
                coordinator.tick(&topics);
            }
        });
    }

    /// Runs every state machine whose deadline passed (and KIP-848 groups at least once a
    /// second), then delivers what they answered.
    pub fn tick(&self, topics: &dyn Fn() -> BTreeMap<Uuid, TopicInfo>) {
        let now = self.clock.now_ms();
        let mut deliveries = Vec::new();
        {
            let mut inner = self.lock();
            self.drop_lost(&mut inner);
            self.release_unused(&mut inner, Some(UNUSED_LEASE_KEEP_MS));
            let metadata_due = now - inner.metadata_ticked_ms >= METADATA_TICK_MS;
            if metadata_due {
                inner.metadata_ticked_ms = now;
            }
            let due: Vec<String> = inner
                .groups
                .iter()
                .filter(|(_, g)| {
                    g.next_deadline().is_some_and(|d| d <= now)
                        || (metadata_due && matches!(g.kind, Kind::Consumer(_) | Kind::Share(_)))
                })
                .map(|(id, _)| id.clone())
                .collect();
            if due.is_empty() {
                return;
            }
            let needs_topics = due
                .iter()
                .any(|id| matches!(inner.groups[id].kind, Kind::Consumer(_) | Kind::Share(_)));
            let topics = if needs_topics {
                topics()
            } else {
                BTreeMap::new()
            };
            for id in due {
                let Some(group) = inner.groups.get_mut(&id) else {
                    continue;
                };
                let persist = match &mut group.kind {
                    Kind::Classic(g) => {
                        let mut effects = Vec::new();
                        g.tick(now, &mut effects);
                        let d = self.classic_effects(&id, group, effects);
                        deliveries.push(d);
                        false
                    }
                    Kind::Consumer(g) => {
                        let mut effects = Vec::new();
                        g.tick(now, &topics, &mut effects);
                        !effects.is_empty()
                    }
                    Kind::Share(g) => g.tick(now, &topics),
                };
                if persist {
                    // Queued now; nobody waits on a timer's change (no answer reveals it).
                    drop(self.persist(&id, group));
                }
            }
        }
        for d in deliveries {
            d.send();
        }
    }

    /// Writes the group's snapshot; the returned future resolves once it is durable.
    fn persist(&self, group_id: &str, group: &Group) -> Durable {
        let record = GroupRecord::Group {
            group: group_id.to_owned(),
            snapshot: Some(group.snapshot()),
        };
        let pending = self.store.write_group(group_id, group.epoch, vec![record]);
        pending
            .map(|r| r.map_err(SharedStoreError::from))
            .boxed()
            .shared()
    }

    /// Turns a classic state machine's effects into a durable write and parked answers.
    fn classic_effects(
        &self,
        group_id: &str,
        group: &mut Group,
        effects: Vec<classic::Effect>,
    ) -> Deliveries {
        let mut deliveries = Deliveries::default();
        let mut persist = false;
        for effect in effects {
            match effect {
                classic::Effect::Persist => persist = true,
                classic::Effect::Join { member_id, result } => {
                    if let Some(tx) = group.joins.remove(&member_id) {
                        deliveries.joins.push((tx, result));
                    }
                }
                classic::Effect::Sync { member_id, result } => {
                    if let Some(tx) = group.syncs.remove(&member_id) {
                        deliveries.syncs.push((tx, result));
                    }
                }
            }
        }
        if persist {
            deliveries.durable = Some(self.persist(group_id, group));
        }
        deliveries
    }

    /// Finds or creates `group_id` as a group of `kind`. An empty group of the other protocol
    /// is converted (keeping its offsets), as Kafka does; a non-empty one is an error.
    fn group_for<'a>(
        &self,
        inner: &'a mut Inner,
        group_id: &str,
        want: GroupType,
    ) -> Result<&'a mut Group, GroupError> {
        self.check_owned(inner, group_id)?;
        let groups_max = self.config.groups_max;
        let count = inner.groups.len();
        let epoch = self.lease_of(inner, group_id).unwrap_or_default();
        let new_kind = || match want {
            GroupType::Classic => Kind::Classic(ClassicGroup::new(
                group_id.to_owned(),
                self.config.classic.clone(),
            )),
            GroupType::Consumer => Kind::Consumer(ConsumerGroup::new(
                group_id.to_owned(),
                self.config.consumer.clone(),
            )),
            GroupType::Share => Kind::Share(ShareGroup::new(
                group_id.to_owned(),
                self.config.share.clone(),
            )),
        };
        match inner.groups.entry(group_id.to_owned()) {
            std::collections::hash_map::Entry::Occupied(e) => {
                let group = e.into_mut();
                if group.group_type() != want {
                    if !group.is_empty() {
                        return Err(GroupError::GroupTypeInUse {
                            group_id: group_id.to_owned(),
                            active: group.group_type(),
                        });
                    }
                    group.kind = new_kind();
                    share_api::apply_configs(&self.config, group);
                }
                Ok(group)
            }
            std::collections::hash_map::Entry::Vacant(e) => {
                if count >= groups_max {
                    tracing::warn!(group = %group_id, groups_max, "refusing a new group: the broker's group limit is reached");
                    return Err(GroupError::GroupsMaxReached { groups_max });
                }
                Ok(e.insert(Group::new(new_kind(), epoch)))
            }
        }
    }

    /// JoinGroup: answers when the rebalance it joined completes (or at once on error).
    pub async fn join(&self, group_id: &str, req: classic::JoinRequest) -> classic::JoinResult {
        let wait_ms = i64::from(req.rebalance_timeout_ms.max(req.session_timeout_ms));
        let member_for_error = req.member_id.clone();
        let error = |e| classic::JoinResult {
            error: Some(e),
            member_id: member_for_error.clone(),
            ..Default::default()
        };
        if let Err(e) = self.own_group(group_id).await {
            return error(e);
        }
        let (reply, deliveries) = {
            let mut inner = self.lock();
            let group = match self.group_for(&mut inner, group_id, GroupType::Classic) {
                Ok(g) => g,
                Err(e) => return error(e),
            };
            let Kind::Classic(g) = &mut group.kind else {
                return error(not_classic(group_id));
            };
            let mut effects = Vec::new();
            let reply = g.join(self.clock.now_ms(), req, &mut effects);
            let reply = Answer::park(reply, &mut group.joins);
            (reply, self.classic_effects(group_id, group, effects))
        };
        reply.deliver(group_id, deliveries, wait_ms, error).await
    }

    /// SyncGroup: answers when the leader's assignment is stored (or at once).
    pub async fn sync(&self, group_id: &str, req: classic::SyncRequest) -> classic::SyncResult {
        let error = |e| classic::SyncResult {
            error: Some(e),
            ..Default::default()
        };
        if let Err(e) = self.own_group(group_id).await {
            return error(e);
        }
        let (reply, deliveries, wait_ms) = {
            let mut inner = self.lock();
            if let Err(e) = self.check_owned(&mut inner, group_id) {
                return error(e);
            }
            let Some(group) = inner.groups.get_mut(group_id) else {
                return error(GroupError::unknown_member(group_id, &req.member_id));
            };
            let Kind::Classic(g) = &mut group.kind else {
                return error(not_classic(group_id));
            };
            let wait_ms = i64::from(self.config.classic.session_timeout_max_ms);
            let mut effects = Vec::new();
            let reply = g.sync(self.clock.now_ms(), req, &mut effects);
            let reply = Answer::park(reply, &mut group.syncs);
            (
                reply,
                self.classic_effects(group_id, group, effects),
                wait_ms,
            )
        };
        reply.deliver(group_id, deliveries, wait_ms, error).await
    }

    /// Heartbeat of a classic member.
    pub async fn heartbeat(
        &self,
        group_id: &str,
        member_id: &str,
        group_instance_id: Option<&str>,
        generation_id: i32,
    ) -> Result<(), GroupError> {
        self.own_group(group_id).await?;
        let (outcome, deliveries) = {
            let mut inner = self.lock();
            self.check_owned(&mut inner, group_id)?;
            let Some(group) = inner.groups.get_mut(group_id) else {
                return Err(GroupError::unknown_member(group_id, member_id));
            };
            let Kind::Classic(g) = &mut group.kind else {
                return Err(not_classic(group_id));
            };
            let mut effects = Vec::new();
            let outcome = g.heartbeat(
                self.clock.now_ms(),
                member_id,
                group_instance_id,
                generation_id,
                &mut effects,
            );
            (outcome, self.classic_effects(group_id, group, effects))
        };
        deliveries.send();
        outcome
    }

    /// LeaveGroup: the request's outcome and one per member (none when the request failed
    /// before looking at its members).
    pub async fn leave(
        &self,
        group_id: &str,
        members: &[classic::LeavingMember],
    ) -> (Result<(), GroupError>, Vec<Result<(), GroupError>>) {
        if let Err(e) = self.own_group(group_id).await {
            return (Err(e), Vec::new());
        }
        let (outcomes, deliveries) = {
            let mut inner = self.lock();
            if let Err(e) = self.check_owned(&mut inner, group_id) {
                return (Err(e), Vec::new());
            }
            let Some(group) = inner.groups.get_mut(group_id) else {
                let member_id = members.first().map_or("", |m| m.member_id.as_str());
                return (
                    Err(GroupError::unknown_member(group_id, member_id)),
                    Vec::new(),
                );
            };
            let Kind::Classic(g) = &mut group.kind else {
                return (Err(not_classic(group_id)), Vec::new());
            };
            let mut effects = Vec::new();
            let outcomes = g.leave(self.clock.now_ms(), members, &mut effects);
            (outcomes, self.classic_effects(group_id, group, effects))
        };
        let durable = deliveries.durable.clone();
        deliveries.send();
        if let Some(d) = durable
            && let Err(e) = d.await
        {
            return (Err(GroupError::StateNotStored(e)), outcomes);
        }
        (Ok(()), outcomes)
    }

    /// ConsumerGroupHeartbeat (KIP-848): answers after any change it made is durable.
    pub async fn consumer_heartbeat(
        &self,
        group_id: &str,
        req: consumer::HeartbeatRequest,
        topics: &BTreeMap<Uuid, TopicInfo>,
    ) -> consumer::HeartbeatResult {
        let error = |e| consumer::HeartbeatResult {
            error: Some(e),
            heartbeat_interval_ms: self.config.consumer.heartbeat_interval_ms,
            ..Default::default()
        };
        if let Err(e) = self.own_group(group_id).await {
            return error(e);
        }
        let (result, durable) = {
            let mut inner = self.lock();
            let group = match self.group_for(&mut inner, group_id, GroupType::Consumer) {
                Ok(g) => g,
                Err(e) => return error(e),
            };
            let Kind::Consumer(g) = &mut group.kind else {
                return error(GroupError::NotGroupType {
                    group_id: group_id.to_owned(),
                    expected: GroupType::Consumer,
                });
            };
            let mut effects = Vec::new();
            let result = g.heartbeat(self.clock.now_ms(), req, topics, &mut effects);
            let durable = (!effects.is_empty()).then(|| self.persist(group_id, group));
            (result, durable)
        };
        if let Some(d) = durable
            && let Err(e) = d.await
        {
            return error(GroupError::StateNotStored(e));
        }
        result
    }

    /// ConsumerGroupDescribe of one group.
    pub fn describe_consumer(
        &self,
        group_id: &str,
        topics: &BTreeMap<Uuid, TopicInfo>,
    ) -> Result<consumer::GroupDescription, GroupError> {
        let mut inner = self.lock();
        self.check_owned(&mut inner, group_id)?;
        match inner.groups.get(group_id).map(|g| &g.kind) {
            Some(Kind::Consumer(g)) => Ok(g.describe(topics)),
            Some(Kind::Classic(_) | Kind::Share(_)) => Err(GroupError::GroupIdNotFound {
                group_id: group_id.to_owned(),
                expected: Some(GroupType::Consumer),
            }),
            None => Err(GroupError::GroupIdNotFound {
                group_id: group_id.to_owned(),
                expected: None,
            }),
        }
    }

    /// DescribeGroups of one classic group (`None`: no such group).
    pub fn describe_classic(
        &self,
        group_id: &str,
    ) -> Result<Option<classic::GroupDescription>, GroupError> {
        let mut inner = self.lock();
        self.check_owned(&mut inner, group_id)?;
        match inner.groups.get(group_id).map(|g| &g.kind) {
            Some(Kind::Classic(g)) => Ok(Some(g.describe())),
            Some(Kind::Consumer(_) | Kind::Share(_)) => Err(GroupError::GroupIdNotFound {
                group_id: group_id.to_owned(),
                expected: Some(GroupType::Classic),
            }),
            None => Ok(None),
        }
    }

    /// ListGroups: every group this broker coordinates (in cluster mode, as in Kafka, each
    /// broker lists its own; admin clients ask every broker).
    pub fn list(&self) -> Vec<ListedGroup> {
        let mut inner = self.lock();
        self.drop_lost(&mut inner);
        let mut groups: Vec<ListedGroup> = inner
            .groups
            .iter()
            .map(|(id, g)| ListedGroup {
                group_id: id.clone(),
                group_type: g.group_type(),
                protocol_type: match &g.kind {
                    Kind::Classic(c) => c.protocol_type().to_owned(),
                    Kind::Consumer(_) => "consumer".to_owned(),
                    Kind::Share(_) => "share".to_owned(),
                },
                state: g.state_name(),
            })
            .collect();
        groups.sort_by(|a, b| a.group_id.cmp(&b.group_id));
        groups
    }

    /// DeleteGroups: one outcome per group, after the deletions are durable.
    pub async fn delete_groups(&self, group_ids: &[String]) -> Vec<Result<(), GroupError>> {
        let mut outcomes = Vec::with_capacity(group_ids.len());
        let mut records = Vec::new();
        let mut leases = Vec::new();
        let mut removed = Vec::new();
        let mut owned = Vec::with_capacity(group_ids.len());
        for id in group_ids {
            owned.push(self.own_group(id).await);
        }
        let pending = {
            let mut inner = self.lock();
            for (id, owned) in group_ids.iter().zip(owned) {
                let outcome = match owned
                    .and_then(|()| self.check_owned(&mut inner, id))
                    .map(|()| inner.groups.get(id))
                {
                    Err(e) => Err(e),
                    Ok(None) => Err(GroupError::GroupIdNotFound {
                        group_id: id.clone(),
                        expected: None,
                    }),
                    Ok(Some(g)) if !g.is_empty() => Err(GroupError::NonEmptyGroup {
                        group_id: id.clone(),
                    }),
                    Ok(Some(_)) => {
                        if let Some(group) = inner.groups.remove(id) {
                            leases.push((id.clone(), group.epoch));
                            removed.push((id.clone(), group));
                        }
                        records.push(GroupRecord::Group {
                            group: id.clone(),
                            snapshot: None,
                        });
                        Ok(())
                    }
                };
                outcomes.push(outcome);
            }
            if records.is_empty() {
                return outcomes;
            }
            // Queued under the lock, so the store applies changes in the order memory did.
            self.store.write(leases, records)
        };
        match pending.await {
            Ok(written) if written.not_coordinator.is_empty() => {}
            Ok(written) => {
                // Taken over by another broker: not deleted here, and no longer ours.
                self.drop_lost_now();
                for (id, outcome) in group_ids.iter().zip(&mut outcomes) {
                    if outcome.is_ok() && written.not_coordinator.contains(id) {
                        *outcome = Err(GroupError::from(StoreError::NotCoordinator {
                            group_id: id.clone(),
                        }));
                    }
                }
            }
            Err(e) => {
                // Not deleted after all: put the groups back (unless a client made a new
                // group of the same name meanwhile, or another broker took the group over),
                // so they are still listed and their offsets served.
                let mut inner = self.lock();
                for (id, group) in removed {
                    if self.lease_of(&inner, &id) == Some(group.epoch) {
                        inner.groups.entry(id).or_insert(group);
                    }
                }
                let failed = GroupError::from(e);
                for outcome in &mut outcomes {
                    if outcome.is_ok() {
                        *outcome = Err(failed.clone());
                    }
                }
            }
        }
        outcomes
    }

    /// OffsetCommit, after the per-partition checks: validates the committer against the
    /// group, applies the offsets and answers once they are durable.
    pub async fn commit(
        &self,
        group_id: &str,
        member_id: &str,
        group_instance_id: Option<&str>,
        generation_or_epoch: i32,
        offsets: Vec<(String, i32, CommittedOffset)>,
    ) -> Result<(), GroupError> {
        self.own_group(group_id).await?;
        let (pending, undo) = {
            let mut inner = self.lock();
            self.check_owned(&mut inner, group_id)?;
            let simple = member_id.is_empty() && generation_or_epoch < 0;
            let group = if simple {
                // A commit from outside any group protocol (an admin tool, a consumer using
                // `assign`): the group exists for its offsets alone.
                match inner.groups.get_mut(group_id) {
                    Some(g) => g,
                    None => self.group_for(&mut inner, group_id, GroupType::Classic)?,
                }
            } else {
                // A member's commit to a group that does not exist: its generation is gone.
                inner
                    .groups
                    .get_mut(group_id)
                    .ok_or_else(|| GroupError::IllegalGeneration {
                        group_id: group_id.to_owned(),
                        generation_id: generation_or_epoch,
                    })?
            };
            match &group.kind {
                Kind::Classic(g) => {
                    g.validate_offset_commit(member_id, group_instance_id, generation_or_epoch)?
                }
                Kind::Consumer(g) => g.validate_offset_commit(member_id, generation_or_epoch)?,
                Kind::Share(_) => {
                    return Err(GroupError::GroupTypeInUse {
                        group_id: group_id.to_owned(),
                        active: GroupType::Share,
                    });
                }
            }
            if offsets.is_empty() {
                return Ok(());
            }
            let records = offsets
                .iter()
                .map(|(topic, partition, offset)| GroupRecord::Offset {
                    group: group_id.to_owned(),
                    topic: topic.clone(),
                    partition: *partition,
                    offset: Some(offset.clone()),
                })
                .collect();
            let mut undo = Vec::with_capacity(offsets.len());
            for (topic, partition, offset) in offsets {
                let key = (topic, partition);
                let previous = group.offsets.insert(key.clone(), offset.clone());
                undo.push(Undo {
                    key,
                    set: Some(offset),
                    previous,
                });
            }
            let pending = self.store.write_group(group_id, group.epoch, records);
            (pending, (group.epoch, undo))
        };
        pending.await.map_err(|e| {
            self.undo_offsets(group_id, undo);
            GroupError::from(e)
        })
    }

    /// Takes back offset changes whose write failed (a full disk, say), so OffsetFetch never
    /// shows an offset whose commit was refused. A change a later request has replaced since
    /// is left alone: the later one is what the store and the client know.
    /// In cluster mode a refusal because another broker took the group over drops it.
    fn undo_offsets(&self, group_id: &str, (epoch, undo): (OwnerEpoch, Vec<Undo>)) {
        let mut inner = self.lock();
        self.drop_lost(&mut inner);
        let Some(group) = inner.groups.get_mut(group_id) else {
            return;
        };
        if group.epoch != epoch {
            // Taken over and loaded again since: the store's state is in memory now.
            return;
        }
        for Undo { key, set, previous } in undo {
            if group.offsets.get(&key) != set.as_ref() {
                continue;
            }
            match previous {
                Some(previous) => group.offsets.insert(key, previous),
                None => group.offsets.remove(&key),
            };
        }
    }

    /// OffsetFetch for one group: the committed offset of each asked partition (`None`:
    /// none committed), or of every partition with one when `partitions` is `None`.
    /// `member` (OffsetFetch v9+) is checked against a KIP-848 group.
    pub fn committed(
        &self,
        group_id: &str,
        member: Option<(&str, i32)>,
        partitions: Option<Vec<(String, Vec<i32>)>>,
    ) -> Result<TopicOffsets, GroupError> {
        let mut inner = self.lock();
        self.check_owned(&mut inner, group_id)?;
        let group = inner.groups.get(group_id);
        if let (
            Some(Group {
                kind: Kind::Consumer(g),
                ..
            }),
            Some((member_id, epoch)),
        ) = (group, member)
        {
            g.validate_offset_fetch(member_id, epoch)?;
        }
        let offsets = group.map(|g| &g.offsets);
        Ok(match partitions {
            Some(asked) => asked
                .into_iter()
                .map(|(topic, parts)| {
                    let found = parts
                        .into_iter()
                        .map(|p| {
                            let o = offsets.and_then(|o| o.get(&(topic.clone(), p)).cloned());
                            (p, o)
                        })
                        .collect();
                    (topic, found)
                })
                .collect(),
            None => {
                let mut by_topic: TopicOffsets = Vec::new();
                for ((topic, p), o) in offsets.into_iter().flatten() {
                    match by_topic.last_mut() {
                        Some((t, parts)) if t == topic => parts.push((*p, Some(o.clone()))),
                        _ => by_topic.push((topic.clone(), vec![(*p, Some(o.clone()))])),
                    }
                }
                by_topic
            }
        })
    }

    /// OffsetDelete: per partition `Ok` or [`GroupError::GroupSubscribedToTopic`], after the
    /// deletions are durable.
    pub async fn delete_offsets(
        &self,
        group_id: &str,
        partitions: Vec<(String, Vec<i32>)>,
    ) -> Result<PartitionOutcomes, GroupError> {
        self.own_group(group_id).await?;
        let mut records = Vec::new();
        let mut undo = Vec::new();
        let (results, pending) = {
            let mut inner = self.lock();
            self.check_owned(&mut inner, group_id)?;
            let group =
                inner
                    .groups
                    .get_mut(group_id)
                    .ok_or_else(|| GroupError::GroupIdNotFound {
                        group_id: group_id.to_owned(),
                        expected: None,
                    })?;
            let subscribed = if group.is_empty() {
                Vec::new()
            } else {
                group.subscribed_topics()
            };
            let results = partitions
                .into_iter()
                .map(|(topic, parts)| {
                    let busy = subscribed.contains(&topic);
                    let codes = parts
                        .into_iter()
                        .map(|p| {
                            if busy {
                                let busy = GroupError::GroupSubscribedToTopic {
                                    group_id: group_id.to_owned(),
                                    topic: topic.clone(),
                                };
                                return (p, Err(busy));
                            }
                            let key = (topic.clone(), p);
                            if let Some(previous) = group.offsets.remove(&key) {
                                undo.push(Undo {
                                    key,
                                    set: None,
                                    previous: Some(previous),
                                });
                                records.push(GroupRecord::Offset {
                                    group: group_id.to_owned(),
                                    topic: topic.clone(),
                                    partition: p,
                                    offset: None,
                                });
                            }
                            (p, Ok(()))
                        })
                        .collect();
                    (topic, codes)
                })
                .collect();
            // Queued under the lock, so the store applies changes in the order memory did.
            let pending = (!records.is_empty())
                .then(|| self.store.write_group(group_id, group.epoch, records));
            (results, pending.map(|p| (p, group.epoch)))
        };
        if let Some((pending, epoch)) = pending
            && let Err(e) = pending.await
        {
            self.undo_offsets(group_id, (epoch, undo));
            return Err(e.into());
        }
        Ok(results)
    }

    /// Forgets the committed offsets of a deleted topic (Kafka does the same).
    pub fn topic_deleted(&self, topic: &str) {
        let mut records = Vec::new();
        let mut leases = Vec::new();
        let mut inner = self.lock();
        for (id, group) in inner.groups.iter_mut() {
            let gone: Vec<(String, i32)> = group
                .offsets
                .keys()
                .filter(|(t, _)| t == topic)
                .cloned()
                .collect();
            if !gone.is_empty() {
                leases.push((id.clone(), group.epoch));
            }
            for key in gone {
                group.offsets.remove(&key);
                records.push(GroupRecord::Offset {
                    group: id.clone(),
                    topic: key.0,
                    partition: key.1,
                    offset: None,
                });
            }
        }
        if !records.is_empty() {
            // Queued under the lock (the store applies changes in the order memory did), not
            // awaited: a crash before the sync only leaves offsets of a topic that no longer
            // exists, which the next deletion of the same name removes again. In cluster mode
            // only the groups this broker coordinates are here; a refused group is dropped
            // (the owner reports it lost).
            drop(self.store.write(leases, records));
        }
    }

    /// Stores every group's current state and stops the store. In cluster mode: drops every
    /// group from memory (their parked requests are answered NOT_COORDINATOR) and starts
    /// releasing their leases without waiting; [`Coordinator::release_all`] waits.
    pub fn close(&self) {
        match &self.store {
            Backend::File(store) => store.close(),
            Backend::Shared(_) => {
                let release = self.release_all();
                if let Ok(runtime) = tokio::runtime::Handle::try_current() {
                    runtime.spawn(release);
                }
            }
        }
    }
}

/// A group from its stored state, held at `epoch`: the one path by which recovery at open
/// and a takeover in cluster mode bring a group back. A classic group comes back with its
/// generation and members, who rejoin; a KIP-848 group with its epochs and assignments.
/// An unreadable snapshot is logged and the group starts empty, keeping its committed
/// offsets. `None` when there is nothing to restore (no snapshot, no offsets), or only an
/// unreadable snapshot.
fn restored_group(
    id: &str,
    config: &GroupConfig,
    snapshot: Option<serde_json::Value>,
    offsets: BTreeMap<(String, i32), CommittedOffset>,
    epoch: OwnerEpoch,
    now: i64,
) -> Option<Group> {
    let configs: BTreeMap<String, String> = snapshot
        .as_ref()
        .and_then(|v| v.get("configs"))
        .and_then(|c| serde_json::from_value(c.clone()).ok())
        .unwrap_or_default();
    let kind = match snapshot.map(|value| restore(id, config, &configs, value, now)) {
        Some(Ok(kind)) => Some(kind),
        Some(Err(e)) => {
            tracing::error!(group = %id, error = %e, "group snapshot unreadable; the group starts empty (its committed offsets are kept)");
            None
        }
        None => None,
    };
    let kind = match kind {
        Some(kind) => kind,
        None if offsets.is_empty() && configs.is_empty() => return None,
        None => Kind::Classic(ClassicGroup::new(id.to_owned(), config.classic.clone())),
    };
    let mut group = Group::new(kind, epoch);
    group.offsets = offsets;
    group.configs = configs;
    share_api::apply_configs(config, &mut group);
    Some(group)
}

/// Restores a group from its stored envelope (`{"type": ..., "snapshot": ...}`).
fn restore(
    id: &str,
    config: &GroupConfig,
    configs: &BTreeMap<String, String>,
    value: serde_json::Value,
    now: i64,
) -> Result<Kind, String> {
    let kind = value
        .get("type")
        .and_then(|t| t.as_str())
        .ok_or("no group type")?
        .to_owned();
    let snapshot = value.get("snapshot").cloned().ok_or("no snapshot")?;
    match kind.as_str() {
        "classic" => {
            let snapshot = serde_json::from_value(snapshot).map_err(|e| e.to_string())?;
            ClassicGroup::restore(id.to_owned(), config.classic.clone(), snapshot, now)
                .map(Kind::Classic)
        }
        "consumer" => {
            let snapshot = serde_json::from_value(snapshot).map_err(|e| e.to_string())?;
            ConsumerGroup::restore(id.to_owned(), config.consumer.clone(), snapshot, now)
                .map(Kind::Consumer)
        }
        "share" => ShareGroup::restore(
            id.to_owned(),
            share_settings(&config.share, configs),
            snapshot,
            now,
            &BTreeMap::new(),
        )
        .map(Kind::Share),
        other => Err(format!("unknown group type {other:?}")),
    }
}

/// A classic JoinGroup/SyncGroup answer: ready now, or parked until a rebalance step sends it.
enum Answer<T> {
    Now(T),
    Parked(oneshot::Receiver<T>),
}

impl<T> Answer<T> {
    /// Parks a `Reply::Later` in `waiting` under its member id (replacing, and so dropping, an
    /// older request of the same member).
    fn park(reply: classic::Reply<T>, waiting: &mut HashMap<String, oneshot::Sender<T>>) -> Self {
        match reply {
            classic::Reply::Now(result) => Answer::Now(result),
            classic::Reply::Later { member_id } => {
                let (tx, rx) = oneshot::channel();
                waiting.insert(member_id, tx);
                Answer::Parked(rx)
            }
        }
    }

    /// Sends the other members' answers, then this one: an answer given now waits for the
    /// durable write its call made ([`GroupError::StateNotStored`] if it failed); a parked one
    /// waits at most `wait_ms` plus slack ([`GroupError::RebalanceInProgress`] when it never
    /// comes: the member was replaced by a newer request, or its group went away).
    async fn deliver(
        self,
        group_id: &str,
        deliveries: Deliveries,
        wait_ms: i64,
        error: impl Fn(GroupError) -> T,
    ) -> T {
        let durable = deliveries.durable.clone();
        deliveries.send();
        match self {
            Answer::Now(result) => {
                if let Some(d) = durable
                    && let Err(e) = d.await
                {
                    return error(GroupError::StateNotStored(e));
                }
                result
            }
            Answer::Parked(rx) => {
                let limit = Duration::from_millis((wait_ms.max(0) + PARKED_SLACK_MS) as u64);
                match tokio::time::timeout(limit, rx).await {
                    Ok(Ok(result)) => result,
                    _ => error(GroupError::RebalanceInProgress {
                        group_id: group_id.to_owned(),
                    }),
                }
            }
        }
    }
}

/// A classic request (JoinGroup, SyncGroup, Heartbeat, LeaveGroup) for a KIP-848 group.
fn not_classic(group_id: &str) -> GroupError {
    GroupError::NotGroupType {
        group_id: group_id.to_owned(),
        expected: GroupType::Classic,
    }
}

#[cfg(test)]
mod refused_writes {
    use super::*;
    use sluice_log::SystemClock;
    use sluice_protocol::kafka_protocol::ResponseError;

    fn offset(n: i64) -> CommittedOffset {
        CommittedOffset {
            offset: n,
            leader_epoch: -1,
            metadata: None,
            commit_timestamp_ms: 0,
        }
    }

    fn fetched(c: &Coordinator, group: &str) -> Option<i64> {
        let topics = c
            .committed(group, None, Some(vec![("t".to_owned(), vec![0])]))
            .unwrap();
        topics[0].1[0].1.as_ref().map(|o| o.offset)
    }

    #[tokio::test]
    async fn a_refused_commit_or_deletion_is_taken_back_in_memory() {
        let tmp = tempfile::tempdir().unwrap();
        let committer = GroupCommitter::start(sluice_log::CommitConfig::default());
        let c = Coordinator::open(
            tmp.path(),
            &committer,
            GroupConfig::default(),
            Arc::new(SystemClock),
            None,
        )
        .unwrap();
        let commit = |n| c.commit("g", "", None, -1, vec![("t".to_owned(), 0, offset(n))]);
        commit(5).await.unwrap();
        // The disk fills: the commit is refused, and OffsetFetch still shows the last durable
        // offset, not the refused one.
        c.store.set_room_bytes(Some(3));
        let refused = commit(9).await.unwrap_err();
        assert!(
            matches!(&refused, GroupError::Store(e) if matches!(e.store_error(), StoreError::NoSpace(_))),
            "{refused:?}"
        );
        assert_eq!(refused.code(), ResponseError::NotCoordinator.code());
        assert_eq!(fetched(&c, "g"), Some(5));
        let deleted = c.delete_offsets("g", vec![("t".to_owned(), vec![0])]).await;
        assert_eq!(
            deleted.unwrap_err().code(),
            ResponseError::NotCoordinator.code()
        );
        assert_eq!(fetched(&c, "g"), Some(5));
        let outcomes = c.delete_groups(&["g".to_owned()]).await;
        let codes: Vec<i16> = outcomes.iter().map(errors::result_code).collect();
        assert_eq!(codes, vec![ResponseError::NotCoordinator.code()]);
        assert!(
            std::error::Error::source(outcomes[0].as_ref().unwrap_err()).is_some(),
            "the store error is kept as the source"
        );
        assert_eq!(
            fetched(&c, "g"),
            Some(5),
            "the group is back with its offsets"
        );
        // Space returns: the same requests succeed.
        c.store.set_room_bytes(None);
        commit(9).await.unwrap();
        assert_eq!(fetched(&c, "g"), Some(9));
        assert_eq!(c.delete_groups(&["g".to_owned()]).await, vec![Ok(())]);
        c.close();
    }
}
