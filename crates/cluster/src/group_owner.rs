//! [`GroupOwner`]: the group coordinator's [`GroupOwnership`] over PostgreSQL — which groups
//! this broker coordinates, and their fenced writes — built on [`crate::groups`].
//!
//! Where it sits: the broker's `sluice_groups::Coordinator` (cluster mode) calls
//! [`take`](GroupOwnership::take) for a group it does not hold ([`groups::acquire`], then
//! [`groups::load`]), [`write`](GroupOwnership::write) for every change of a group it holds
//! ([`groups::write_many`], fenced by the epoch taken), and [`lost`](GroupOwnership::lost)
//! before it serves a request, to drop the groups that moved away.
//!
//! Three things run here:
//!
//! - **The writer**, one task, applies queued writes *in call order*, one statement at a
//!   time, several writes per statement ([`BATCH_RECORDS_MAX`]). One at a time is what keeps
//!   order: two statements in flight for one group could commit in either order (each locks
//!   the group's lease row, whichever comes first), and an older offset or snapshot would
//!   then overwrite a newer one. Releases and barriers go through the same queue, so a
//!   release never overtakes a write before it, and a take's load sees every write of this
//!   broker queued before the take.
//! - **The renewal**, one task, renews every lease every [`groups::renew_interval`] on a
//!   connection of its own (a broker busy with commits must not lose its groups waiting for
//!   a pooled connection). A group missing from the answer was taken over: it is lost. A
//!   renewal that fails (PostgreSQL unreachable) loses nothing by itself, but a group whose
//!   lease has surely run out by the local clock (a lease since the last renewal or acquire
//!   that confirmed it, measured from before that statement was sent) is lost: another
//!   broker may have it now, and its members must not be served by two coordinators. A
//!   renewal answering [`GroupsError::Fenced`] (this broker's registry row is not live)
//!   loses every group at once.
//! - **Takes**, one per group the coordinator asks for, on the main pool.
//!
//! Leases that PostgreSQL says this broker holds but it does not know of (an acquire whose
//! answer was lost, a group dropped after a failed renewal) are released by the renewal, so
//! they do not stay renewed for nobody.

use std::collections::{BTreeMap, HashMap, HashSet, VecDeque};
use std::fmt;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use futures_util::FutureExt;
use futures_util::future::BoxFuture;
use sluice_groups::ownership::{GroupOwnership, OwnerEpoch, Take, TakenGroup, Written};
use sluice_groups::store::{GroupRecord, StoreError};
use tokio::sync::{Notify, oneshot};
use tokio::task::JoinHandle;
use tokio::time::Instant;
use uuid::Uuid;

use crate::Db;
use crate::groups::{self, Acquired, CoordinatorEpoch, GroupsError, LEASE_MAX, LEASE_MIN};

/// Most records one write statement carries, across the writes it batches. One write is
/// never split (a write is all-or-nothing per group), so a bigger write goes alone. 4,096
/// OffsetCommit partitions is far past a busy round's worth, and keeps one statement's
/// parameter arrays a few megabytes at most, well inside the statement timeout.
pub const BATCH_RECORDS_MAX: usize = 4_096;

/// Records waiting for the writer past which a warning is logged. Writes are still queued:
/// refusing them would turn a slow database into refused commits; the hard bound is the
/// caller's (each request waits for its write before it is answered, and the server bounds
/// requests in flight).
pub const QUEUED_RECORDS_SOFT_MAX: usize = 100_000;

/// One queued job of the writer.
enum Op {
    Write {
        leases: Vec<(String, OwnerEpoch)>,
        records: Vec<GroupRecord>,
        reply: oneshot::Sender<Result<Written, StoreError>>,
    },
    Release {
        group_id: String,
    },
    ReleaseAll {
        reply: oneshot::Sender<Result<(), StoreError>>,
    },
    /// Answers once every job queued before it is done.
    Barrier {
        reply: oneshot::Sender<()>,
    },
}

/// A lease this broker holds, as far as it knows.
#[derive(Debug, Clone, Copy)]
struct Held {
    epoch: OwnerEpoch,
    /// The renewal count when the acquire returned: a renewal started after it (a higher
    /// count) sees the lease; one started before may not, and does not judge it.
    acquired_after: u64,
    /// When the statement that last confirmed the lease (acquire or renewal) was sent: the
    /// lease lasts at least until one lease after it.
    confirmed_at: Instant,
}

#[derive(Default)]
struct State {
    held: HashMap<String, Held>,
    /// Groups whose take is in flight: the renewal leaves their leases alone.
    taking: HashMap<String, usize>,
    lost: Vec<(String, OwnerEpoch)>,
    queue: VecDeque<Op>,
    queued_records: usize,
    renewals_started: u64,
}

impl State {
    /// Marks `group_id` lost if it is held at `epoch` (each loss is reported once).
    fn lose(&mut self, group_id: &str, epoch: OwnerEpoch) {
        if self.held.get(group_id).is_some_and(|h| h.epoch == epoch) {
            self.held.remove(group_id);
            self.lost.push((group_id.to_owned(), epoch));
        }
    }

    fn lose_all(&mut self) {
        let held: Vec<(String, OwnerEpoch)> = self
            .held
            .iter()
            .map(|(g, h)| (g.clone(), h.epoch))
            .collect();
        for (group_id, epoch) in held {
            self.lose(&group_id, epoch);
        }
    }
}

struct Shared {
    db: Db,
    broker_id: i32,
    instance: Uuid,
    lease: Duration,
    state: Mutex<State>,
    /// Wakes the writer when a job is queued.
    queued: Notify,
}

impl Shared {
    /// Jobs only move in and out under the lock; a panic elsewhere leaves it usable.
    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn enqueue(&self, op: Op) {
        let mut st = self.lock();
        if let Op::Write { records, .. } = &op {
            let before = st.queued_records;
            st.queued_records += records.len();
            if before <= QUEUED_RECORDS_SOFT_MAX && st.queued_records > QUEUED_RECORDS_SOFT_MAX {
                tracing::warn!(
                    queued_records = st.queued_records,
                    limit = QUEUED_RECORDS_SOFT_MAX,
                    "group writes are queueing faster than PostgreSQL applies them"
                );
            }
        }
        st.queue.push_back(op);
        drop(st);
        self.queued.notify_one();
    }

    /// Resolves once every job queued before is done.
    async fn barrier(&self) {
        let (reply, done) = oneshot::channel();
        self.enqueue(Op::Barrier { reply });
        // A writer gone (the owner dropped) has nothing left to wait for.
        let _ = done.await;
    }
}

/// The [`GroupOwnership`] of one broker process over PostgreSQL (see the module doc).
/// Dropping it stops its tasks; leases it held run out (or are released by
/// [`GroupOwnership::release_all`] first).
pub struct GroupOwner {
    shared: Arc<Shared>,
    tasks: Vec<JoinHandle<()>>,
}

impl fmt::Debug for GroupOwner {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("GroupOwner")
            .field("broker_id", &self.shared.broker_id)
            .field("instance", &self.shared.instance)
            .field("lease", &self.shared.lease)
            .finish_non_exhaustive()
    }
}

impl Drop for GroupOwner {
    fn drop(&mut self) {
        for task in &self.tasks {
            task.abort();
        }
    }
}

impl GroupOwner {
    /// Starts the writer and the renewal for broker `broker_id`'s process `instance` (what
    /// the registry gave it), with leases of `lease` ([`groups::DEFAULT_LEASE`] unless
    /// configured). Writes and takes use `db`; the renewal opens a connection of its own.
    /// Call it from within a Tokio runtime.
    pub fn start(
        db: Db,
        broker_id: i32,
        instance: Uuid,
        lease: Duration,
    ) -> Result<Arc<GroupOwner>, GroupsError> {
        if !(LEASE_MIN..=LEASE_MAX).contains(&lease) {
            return Err(GroupsError::InvalidLease { lease });
        }
        let renewal_db = db.separate_pool(1)?;
        let shared = Arc::new(Shared {
            db,
            broker_id,
            instance,
            lease,
            state: Mutex::default(),
            queued: Notify::new(),
        });
        let writer = tokio::spawn(write_loop(Arc::clone(&shared)));
        let renewal = tokio::spawn(renew_loop(Arc::clone(&shared), renewal_db));
        Ok(Arc::new(GroupOwner {
            shared,
            tasks: vec![writer, renewal],
        }))
    }

    /// The groups this broker holds a lease on, as far as it knows, sorted.
    pub fn held(&self) -> Vec<(String, OwnerEpoch)> {
        let st = self.shared.lock();
        let mut held: Vec<(String, OwnerEpoch)> =
            st.held.iter().map(|(g, h)| (g.clone(), h.epoch)).collect();
        held.sort();
        held
    }
}

/// A [`GroupsError`] that several waiters share (one failed statement fails every write it
/// carried), as the source of their [`StoreError::Unavailable`].
#[derive(Debug, Clone)]
struct SharedGroupsError(Arc<GroupsError>);

impl fmt::Display for SharedGroupsError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

impl std::error::Error for SharedGroupsError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        self.0.source()
    }
}

fn unavailable(e: &SharedGroupsError) -> StoreError {
    StoreError::Unavailable(Box::new(e.clone()))
}

impl GroupOwnership for GroupOwner {
    fn take(&self, group_id: &str) -> BoxFuture<'static, Take> {
        let guard = Taking::new(&self.shared, group_id);
        async move { take(&guard.shared, &guard.group_id).await }.boxed()
    }

    fn write(
        &self,
        leases: Vec<(String, OwnerEpoch)>,
        records: Vec<GroupRecord>,
    ) -> BoxFuture<'static, Result<Written, StoreError>> {
        let (reply, done) = oneshot::channel();
        self.shared.enqueue(Op::Write {
            leases,
            records,
            reply,
        });
        async move {
            done.await.unwrap_or_else(|_| {
                Err(StoreError::Unavailable(
                    "the group writer stopped before the write was applied".into(),
                ))
            })
        }
        .boxed()
    }

    fn release(&self, group_id: &str, epoch: OwnerEpoch) {
        {
            let mut st = self.shared.lock();
            if st.held.get(group_id).is_none_or(|h| h.epoch != epoch) {
                return;
            }
            st.held.remove(group_id);
        }
        self.shared.enqueue(Op::Release {
            group_id: group_id.to_owned(),
        });
    }

    fn lost(&self) -> Vec<(String, OwnerEpoch)> {
        std::mem::take(&mut self.shared.lock().lost)
    }

    fn release_all(&self) -> BoxFuture<'static, Result<(), StoreError>> {
        let (reply, done) = oneshot::channel();
        self.shared.enqueue(Op::ReleaseAll { reply });
        async move {
            done.await.unwrap_or_else(|_| {
                Err(StoreError::Unavailable(
                    "the group writer stopped before the leases were released".into(),
                ))
            })
        }
        .boxed()
    }
}

/// A take in flight, counted in [`State::taking`] from the call until its future ends
/// (done or dropped).
struct Taking {
    shared: Arc<Shared>,
    group_id: String,
}

impl Taking {
    fn new(shared: &Arc<Shared>, group_id: &str) -> Taking {
        let mut st = shared.lock();
        // A release queued for the group would end the lease about to be taken again.
        st.queue
            .retain(|op| !matches!(op, Op::Release { group_id: g } if g == group_id));
        *st.taking.entry(group_id.to_owned()).or_default() += 1;
        Taking {
            shared: Arc::clone(shared),
            group_id: group_id.to_owned(),
        }
    }
}

impl Drop for Taking {
    fn drop(&mut self) {
        let mut st = self.shared.lock();
        if let Some(n) = st.taking.get_mut(&self.group_id) {
            *n -= 1;
            if *n == 0 {
                st.taking.remove(&self.group_id);
            }
        }
    }
}

/// Acquires `group_id`'s lease, waits for this broker's earlier writes, loads the group.
async fn take(shared: &Shared, group_id: &str) -> Take {
    let sent_at = Instant::now();
    let acquired = groups::acquire(
        &shared.db,
        group_id,
        shared.broker_id,
        shared.instance,
        shared.lease,
    )
    .await;
    let epoch = match acquired {
        Ok(Acquired::Acquired { epoch }) => OwnerEpoch(epoch.0),
        Ok(Acquired::HeldBy { broker_id }) => return Take::OwnedElsewhere { broker_id },
        Err(e @ GroupsError::InvalidGroupId { .. }) => return Take::InvalidGroupId(e.to_string()),
        Err(e) => {
            tracing::warn!(group = %group_id, error = %e, "could not take a group's coordinator lease");
            return Take::Unavailable(StoreError::Unavailable(Box::new(e)).into());
        }
    };
    // The load must see every write this broker queued for the group before (a group it
    // dropped and takes again at the same epoch may still have one in the queue).
    shared.barrier().await;
    match groups::load(&shared.db, group_id).await {
        Ok(loaded) => {
            let mut st = shared.lock();
            let acquired_after = st.renewals_started;
            st.held.insert(
                group_id.to_owned(),
                Held {
                    epoch,
                    acquired_after,
                    confirmed_at: sent_at,
                },
            );
            Take::Owned(TakenGroup {
                epoch,
                snapshot: loaded.snapshot,
                offsets: loaded.offsets,
            })
        }
        Err(e) => {
            tracing::warn!(group = %group_id, error = %e, "took a group's coordinator lease but could not load the group; releasing it");
            shared.enqueue(Op::Release {
                group_id: group_id.to_owned(),
            });
            Take::Unavailable(StoreError::Unavailable(Box::new(e)).into())
        }
    }
}

/// The writer: runs queued jobs one at a time, in order (see the module doc).
async fn write_loop(shared: Arc<Shared>) {
    loop {
        let jobs = next_jobs(&shared);
        if jobs.is_empty() {
            // A notify_one that came since the queue was looked at is kept as a permit.
            shared.queued.notified().await;
            continue;
        }
        run_jobs(&shared, jobs).await;
    }
}

/// Takes the next jobs off the queue: one job, or consecutive writes that fit one statement
/// (at most [`BATCH_RECORDS_MAX`] records, and no group named at two epochs).
fn next_jobs(shared: &Shared) -> Vec<Op> {
    let mut st = shared.lock();
    let mut jobs = Vec::new();
    let mut records = 0;
    let mut epochs: HashMap<String, OwnerEpoch> = HashMap::new();
    while let Some(op) = st.queue.front() {
        let Op::Write {
            leases,
            records: these,
            ..
        } = op
        else {
            if jobs.is_empty() {
                jobs.extend(st.queue.pop_front());
            }
            break;
        };
        let fits = jobs.is_empty()
            || (records + these.len() <= BATCH_RECORDS_MAX
                && leases
                    .iter()
                    .all(|(g, e)| epochs.get(g).is_none_or(|held| held == e)));
        if !fits {
            break;
        }
        records += these.len();
        for (g, e) in leases {
            epochs.insert(g.clone(), *e);
        }
        jobs.extend(st.queue.pop_front());
    }
    st.queued_records = st.queued_records.saturating_sub(records);
    jobs
}

async fn run_jobs(shared: &Shared, jobs: Vec<Op>) {
    let mut writes = Vec::new();
    for job in jobs {
        match job {
            Op::Write {
                leases,
                records,
                reply,
            } => writes.push((leases, records, reply)),
            Op::Release { group_id } => {
                if let Err(e) = groups::release(&shared.db, &group_id, shared.instance).await {
                    tracing::warn!(group = %group_id, error = %e, "could not release a group's coordinator lease; it runs out instead");
                }
            }
            Op::ReleaseAll { reply } => {
                shared.lock().held.clear();
                let released = groups::release_all(&shared.db, shared.instance).await;
                let _ = reply.send(match released {
                    Ok(n) => {
                        tracing::info!(
                            leases = n,
                            "released every group coordinator lease of this broker"
                        );
                        Ok(())
                    }
                    Err(e) => Err(StoreError::Unavailable(Box::new(e))),
                });
            }
            Op::Barrier { reply } => {
                let _ = reply.send(());
            }
        }
    }
    if !writes.is_empty() {
        run_writes(shared, writes).await;
    }
}

type Write = (
    Vec<(String, OwnerEpoch)>,
    Vec<GroupRecord>,
    oneshot::Sender<Result<Written, StoreError>>,
);

/// Applies several writes in one fenced statement, then answers each with its own groups'
/// outcome.
async fn run_writes(shared: &Shared, writes: Vec<Write>) {
    let mut leases: BTreeMap<&str, CoordinatorEpoch> = BTreeMap::new();
    let mut records = Vec::new();
    for (these, recs, _) in &writes {
        for (g, e) in these {
            leases.entry(g.as_str()).or_insert(CoordinatorEpoch(e.0));
        }
        records.extend(recs.iter().cloned());
    }
    let leases: Vec<(&str, CoordinatorEpoch)> = leases.into_iter().collect();
    let outcome = groups::write_many(&shared.db, shared.instance, &leases, &records).await;
    drop(records);
    match outcome {
        Ok(outcome) => {
            let refused: HashSet<&str> =
                outcome.not_coordinator.iter().map(String::as_str).collect();
            {
                let mut st = shared.lock();
                for (these, _, _) in &writes {
                    for (g, e) in these {
                        if refused.contains(g.as_str()) {
                            st.lose(g, *e);
                        }
                    }
                }
            }
            for (these, _, reply) in writes {
                let not_coordinator = these
                    .into_iter()
                    .map(|(g, _)| g)
                    .filter(|g| refused.contains(g.as_str()))
                    .collect();
                let _ = reply.send(Ok(Written { not_coordinator }));
            }
        }
        Err(e) => {
            tracing::warn!(error = %e, writes = writes.len(), "group write failed");
            let e = SharedGroupsError(Arc::new(e));
            for (_, _, reply) in writes {
                let _ = reply.send(Err(unavailable(&e)));
            }
        }
    }
}

/// The renewal: every [`groups::renew_interval`], renews every lease and reports the lost.
async fn renew_loop(shared: Arc<Shared>, db: Db) {
    let every = groups::renew_interval(shared.lease);
    let mut interval = tokio::time::interval(every);
    interval.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        interval.tick().await;
        renew_once(&shared, &db, every).await;
    }
}

/// One renewal, bounded by `deadline` (a renewal slower than the interval counts as failed:
/// the next one is due).
async fn renew_once(shared: &Shared, db: &Db, deadline: Duration) {
    let (round, sent_at) = {
        let mut st = shared.lock();
        st.renewals_started += 1;
        (st.renewals_started, Instant::now())
    };
    let renewed = tokio::time::timeout(
        deadline,
        groups::renew_all(db, shared.broker_id, shared.instance, shared.lease),
    )
    .await;
    let mut st = shared.lock();
    match renewed {
        Ok(Ok(still)) => {
            let still: HashMap<String, CoordinatorEpoch> = still.into_iter().collect();
            let judged: Vec<(String, Held)> = st
                .held
                .iter()
                .filter(|(_, h)| h.acquired_after < round)
                .map(|(g, h)| (g.clone(), *h))
                .collect();
            for (group_id, held) in judged {
                if still.get(&group_id).is_some_and(|e| e.0 == held.epoch.0) {
                    if let Some(h) = st.held.get_mut(&group_id) {
                        h.confirmed_at = sent_at;
                    }
                } else {
                    tracing::info!(group = %group_id, epoch = %held.epoch, "group coordinator lease taken over or expired");
                    st.lose(&group_id, held.epoch);
                }
            }
            // Leases PostgreSQL renewed for this broker that it does not know of.
            let unknown: Vec<String> = still
                .into_keys()
                .filter(|g| !st.held.contains_key(g) && !st.taking.contains_key(g))
                .collect();
            drop(st);
            for group_id in unknown {
                shared.enqueue(Op::Release { group_id });
            }
        }
        Ok(Err(GroupsError::Fenced { .. })) => {
            if !st.held.is_empty() {
                tracing::warn!(
                    groups = st.held.len(),
                    "this broker is not live in the registry: dropping every group it coordinates"
                );
            }
            st.lose_all();
        }
        failed => {
            let why = match failed {
                Ok(Err(e)) => e.to_string(),
                _ => format!("no answer within {deadline:?}"),
            };
            let now = Instant::now();
            let expired: Vec<(String, OwnerEpoch)> = st
                .held
                .iter()
                .filter(|(_, h)| h.confirmed_at + shared.lease <= now)
                .map(|(g, h)| (g.clone(), h.epoch))
                .collect();
            tracing::warn!(error = %why, dropped = expired.len(), "could not renew group coordinator leases");
            for (group_id, epoch) in expired {
                st.lose(&group_id, epoch);
            }
        }
    }
}
