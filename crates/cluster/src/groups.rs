//! Group coordinators in cluster mode: who coordinates each consumer group, and the group's
//! durable state (its snapshot and committed offsets) in PostgreSQL.
//!
//! Each group has one coordinator broker at a time, the holder of the group's *lease*, a row
//! of `sluice.group_coordinators` (migration `0004_groups.sql`). Where it sits in the flow:
//!
//! 1. A client asks any broker FindCoordinator. [`find_coordinators`] answers with the
//!    broker that holds a live lease on the group, else the [`preferred_coordinator`] among
//!    the live brokers (the same answer on every broker: a pure function of the group id and
//!    the live ids).
//! 2. The named broker gets the group's first request and calls [`acquire`]. On
//!    [`Acquired`] it [`load`]s the group (snapshot and offsets) and serves it from memory;
//!    on [`Acquired::HeldBy`] it answers `NOT_COORDINATOR`, and the client asks again.
//! 3. Every change the coordinator makes goes through [`write`] (one group) or
//!    [`write_many`] (several), which apply only while this broker's lease on each group is
//!    still the one it acquired ([`CoordinatorEpoch`]).
//! 4. A heartbeat calls [`renew_all`] every [`renew_interval`]: one statement renews every
//!    lease of the broker and names what it still holds; a group missing from the answer was
//!    taken over, and the broker drops it from memory (its members then find the new
//!    coordinator and rejoin).
//! 5. A clean shutdown calls [`release_all`], so the next broker takes the groups over at
//!    once instead of after [`DEFAULT_LEASE`].
//!
//! Every time is the database's clock (`now()`), never a broker's, so brokers with skewed
//! clocks still agree on who holds what.
//!
//! ## Leases and fencing
//!
//! A lease is *live* while `expires_at > now()` and its holder's row in `sluice.brokers`
//! (same `broker_id` and `instance`) is live (`expires_at > now()`, `stopped_at IS NULL`).
//! [`acquire`] takes a lease that is free, expired or held by a broker whose registry row is
//! not live (a dead broker's groups move as soon as the registry declares it dead, not one
//! lease later), and only for a broker whose own registry row is live
//! ([`GroupsError::Fenced`] otherwise). Each takeover raises the group's epoch by one
//! (the first holder gets 1); renewing a live lease of one's own keeps it.
//!
//! A write holds the group's lease row locked (`FOR UPDATE`) from its check to its commit,
//! so a takeover waits for a write that passed its check, and the new coordinator's
//! [`load`] sees it; a write that comes after a takeover finds another epoch or instance and
//! changes nothing ([`GroupsError::NotCoordinator`]). A write also requires the holder's
//! registry row to be live: a write is accepted only while [`find_coordinators`] would name
//! the writer. Racing acquirers are decided by the row: one `INSERT ... ON CONFLICT DO
//! UPDATE ... WHERE` each; the loser re-checks the winner's fresh lease and finds it held.
//!
//! ## Stored values
//!
//! Snapshots and committed offsets ([`CommittedOffset`]'s fields) are stored as `json`, not
//! `jsonb`: they hold client strings (member and client ids, offset metadata), which may
//! contain U+0000, and `jsonb` cannot hold that character; `json` keeps the text as written.
//! Nothing reads inside them in SQL. Group ids are `text`, which cannot hold U+0000 either:
//! such a group id is refused with [`GroupsError::InvalidGroupId`].

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::time::Duration;

use sluice_groups::store::{CommittedOffset, GroupRecord};
use uuid::Uuid;

use crate::Db;
use crate::db::DbError;

/// The coordinator lease a broker takes and renews, unless configured otherwise.
///
/// Two pulls: a coordinator must keep its groups across a PostgreSQL blip of a few seconds
/// (a failover, a restart, a network hiccup), and a dead broker's groups must move well
/// within a consumer's session timeout (45 s by default in Kafka's clients; members that
/// cannot reach their coordinator for that long are dropped and rebalance anyway).
/// With renewals every [`renew_interval`] (a third of the lease), 10 s survives an outage
/// of about 6 s that starts just after a renewal (two renewals fail, the third lands in
/// time), and a crashed broker's groups are free at most 10 s after its last renewal
/// (sooner once the registry declares it dead), leaving 35 s of a 45 s session for
/// FindCoordinator, the takeover and the rejoin.
pub const DEFAULT_LEASE: Duration = Duration::from_secs(10);

/// The shortest lease [`acquire`] and [`renew_all`] accept. A renewal is a round trip to
/// PostgreSQL plus its queueing; below 100 ms a healthy broker would lose its groups to an
/// ordinary slow query, and the groups would flap between brokers.
pub const LEASE_MIN: Duration = Duration::from_millis(100);

/// The longest lease [`acquire`] and [`renew_all`] accept. A group whose coordinator hangs
/// (alive in the registry but not serving) has no working coordinator for up to one lease;
/// ten minutes is already far beyond any session timeout, so anything longer is a
/// misconfiguration (seconds read as milliseconds, say).
pub const LEASE_MAX: Duration = Duration::from_secs(600);

/// How many times [`acquire`] looks again when it lost the lease to a racing broker and
/// then finds no holder (a holder row that vanished in between). Rows are never deleted
/// today, so one more look always finds it; the bound keeps a future change from looping.
const ACQUIRE_ATTEMPTS: usize = 3;

/// How often a coordinator should call [`renew_all`] for leases of `lease`: a third of it,
/// so two renewals in a row may fail (a PostgreSQL blip) before the lease runs out.
pub fn renew_interval(lease: Duration) -> Duration {
    lease / 3
}

/// Which takeover of a group a lease is: 1 for the first holder, one more at each takeover.
/// Every write names the epoch it was acquired with.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct CoordinatorEpoch(pub i64);

impl fmt::Display for CoordinatorEpoch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

/// What [`acquire`] found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Acquired {
    /// This broker holds the lease until one lease from now. A new epoch means a takeover:
    /// [`load`] the group before serving it. The same epoch as before means a renewal of a
    /// lease this broker already held.
    Acquired { epoch: CoordinatorEpoch },
    /// Another live broker holds a live lease: it is the group's coordinator.
    HeldBy { broker_id: i32 },
}

/// A group as the store holds it: what a new coordinator reads at takeover.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct LoadedGroup {
    /// The group state machine's snapshot, if the group has one.
    pub snapshot: Option<serde_json::Value>,
    /// Committed offsets by (topic, partition).
    pub offsets: BTreeMap<(String, i32), CommittedOffset>,
}

/// What [`write_many`] did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct WriteOutcome {
    /// Groups whose records were not written because this broker no longer holds their
    /// lease at the given epoch (taken over, expired, or its registry row is not live).
    /// Every other group's records were written.
    pub not_coordinator: Vec<String>,
}

/// Why a group operation failed; one line each.
#[derive(Debug, thiserror::Error)]
pub enum GroupsError {
    /// The statement did not run or did not finish (connection lost, timeout): retriable.
    /// For a write, nothing of it was applied, or all of it was (a lost answer to a commit).
    #[error(transparent)]
    Db(#[from] DbError),
    /// The writer no longer holds the group's lease at its epoch: another broker took the
    /// group over, the lease expired, or the writer's registry row is not live. Nothing was
    /// written; the coordinator drops the group and answers `NOT_COORDINATOR`.
    #[error(
        "this broker no longer coordinates group {group_id:?} (its lease at epoch {epoch} was \
         taken over or expired); nothing was written"
    )]
    NotCoordinator {
        group_id: String,
        epoch: CoordinatorEpoch,
    },
    /// The broker's own row in `sluice.brokers` is not live (expired or stopped): it may not
    /// take or keep leases. Its registry has to rejoin the cluster first.
    #[error(
        "broker {broker_id} (instance {instance}) is not live in the broker registry (its \
         registration expired or it stopped), so it may not coordinate groups"
    )]
    Fenced { broker_id: i32, instance: Uuid },
    /// A write carried a record for a group it was not given a lease for (a caller's bug).
    #[error(
        "a group write carried a record for group {record_group:?}, which it holds no lease for (the write is for {groups})"
    )]
    ForeignRecord {
        record_group: String,
        groups: String,
    },
    /// The group id cannot be stored: PostgreSQL text cannot hold U+0000.
    #[error(
        "group id {group_id:?} contains a NUL character, which the metadata database cannot store; use another group id"
    )]
    InvalidGroupId { group_id: String },
    /// A lease outside [`LEASE_MIN`]..=[`LEASE_MAX`].
    #[error("coordinator lease {lease:?} is outside {LEASE_MIN:?}..={LEASE_MAX:?}")]
    InvalidLease { lease: Duration },
    /// A stored committed offset could not be read back.
    #[error(
        "stored committed offset of group {group_id:?}, {topic}-{partition} is unreadable: {detail}"
    )]
    Corrupt {
        group_id: String,
        topic: String,
        partition: i32,
        detail: String,
    },
    /// A committed offset could not be encoded as JSON.
    #[error("cannot encode a committed offset of group {group_id:?}: {source}")]
    Encode {
        group_id: String,
        #[source]
        source: serde_json::Error,
    },
}

impl From<tokio_postgres::Error> for GroupsError {
    fn from(e: tokio_postgres::Error) -> Self {
        GroupsError::Db(DbError::Query(e))
    }
}

// ---------------------------------------------------------------------------------------------
// Choosing a coordinator
// ---------------------------------------------------------------------------------------------

/// The broker that should coordinate `group_id` when nobody holds its lease: the same answer
/// on every broker that sees the same live ids, whatever their order. `None` without live
/// brokers.
///
/// Rendezvous hashing: each live id gets a score from a stable hash of (group id, broker id)
/// and the highest score wins (ties, which need equal 64-bit scores, go to the lower id).
/// When a broker joins or leaves, only the groups it wins or won change their preference,
/// about 1/n of them, instead of nearly all as with `hash % n`; since broker ids are new at
/// every restart, that matters at every rolling restart. The hash is FNV-1a over the group
/// id's UTF-8 bytes with a SplitMix64 finish: fixed arithmetic, no per-process seed, so it
/// never changes between builds or platforms.
pub fn preferred_coordinator(live_broker_ids: &[i32], group_id: &str) -> Option<i32> {
    let group_hash = fnv1a(group_id.as_bytes());
    live_broker_ids
        .iter()
        .copied()
        .map(|id| {
            let score = splitmix64(group_hash ^ splitmix64(u64::from(id as u32)));
            (score, std::cmp::Reverse(id))
        })
        .max()
        .map(|(_, std::cmp::Reverse(id))| id)
}

fn fnv1a(bytes: &[u8]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for &b in bytes {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    h
}

/// SplitMix64's finalizer: spreads every input bit over the whole word.
fn splitmix64(x: u64) -> u64 {
    let mut z = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// The broker holding a live lease on `group_id` (lease unexpired and the holder's registry
/// row live), or `None`.
pub async fn coordinator_of(db: &Db, group_id: &str) -> Result<Option<i32>, GroupsError> {
    check_group_id(group_id)?;
    let client = db.client().await?;
    let stmt = client
        .prepare_cached(
            "SELECT g.broker_id
             FROM group_coordinators g
             JOIN brokers b ON b.broker_id = g.broker_id AND b.instance = g.instance
             WHERE g.group_id = $1 AND g.expires_at > now()
               AND b.expires_at > now() AND b.stopped_at IS NULL",
        )
        .await?;
    let row = client.query_opt(&stmt, &[&group_id]).await?;
    Ok(row.map(|r| r.get(0)))
}

/// FindCoordinator's answer for each of `group_ids`, in order, with one query: the holder
/// of a live lease, else the [`preferred_coordinator`] among the live brokers, else `None`
/// (no live broker at all). A group id the store cannot hold
/// ([`GroupsError::InvalidGroupId`]) fails the whole call; check ids first to answer per
/// group.
pub async fn find_coordinators(
    db: &Db,
    group_ids: &[&str],
) -> Result<Vec<Option<i32>>, GroupsError> {
    for id in group_ids {
        check_group_id(id)?;
    }
    let client = db.client().await?;
    let stmt = client
        .prepare_cached(
            "WITH live AS MATERIALIZED (
                 SELECT broker_id, instance FROM brokers
                 WHERE expires_at > now() AND stopped_at IS NULL
             )
             SELECT k.group_id, h.broker_id,
                    ARRAY(SELECT broker_id FROM live ORDER BY broker_id)
             FROM unnest($1::text[]) WITH ORDINALITY AS k(group_id, n)
             LEFT JOIN (
                 SELECT g.group_id, g.broker_id
                 FROM group_coordinators g
                 JOIN live l ON l.broker_id = g.broker_id AND l.instance = g.instance
                 WHERE g.expires_at > now()
             ) h ON h.group_id = k.group_id
             ORDER BY k.n",
        )
        .await?;
    let rows = client.query(&stmt, &[&group_ids]).await?;
    let mut answers = Vec::with_capacity(rows.len());
    for row in rows {
        let group_id: &str = row.get(0);
        let holder: Option<i32> = row.get(1);
        let live: Vec<i32> = row.get(2);
        answers.push(holder.or_else(|| preferred_coordinator(&live, group_id)));
    }
    Ok(answers)
}

/// [`find_coordinators`] for one group.
pub async fn find_coordinator(db: &Db, group_id: &str) -> Result<Option<i32>, GroupsError> {
    Ok(find_coordinators(db, &[group_id])
        .await?
        .into_iter()
        .next()
        .flatten())
}

// ---------------------------------------------------------------------------------------------
// Leases
// ---------------------------------------------------------------------------------------------

/// Takes (or renews) the lease on `group_id` for `broker_id`'s process `instance`, until
/// `lease` from now on the database's clock.
///
/// Takes it when nobody holds it, when it expired, when its holder's registry row is not
/// live, or when this instance holds it already (a live lease of one's own is renewed at the
/// same epoch; an expired or released one is taken over like anyone's, at a new epoch).
/// Otherwise [`Acquired::HeldBy`] the holder. Of brokers racing for one group exactly one
/// wins. Fails with [`GroupsError::Fenced`] when `broker_id`'s own registry row (with this
/// `instance`) is not live.
///
/// When it returns `Acquired` with a new epoch, the lease row is committed: any write of the
/// previous holder either committed before it (and [`load`] sees it) or is refused.
pub async fn acquire(
    db: &Db,
    group_id: &str,
    broker_id: i32,
    instance: Uuid,
    lease: Duration,
) -> Result<Acquired, GroupsError> {
    check_group_id(group_id)?;
    let lease_ms = lease_ms(lease)?;
    let client = db.client().await?;
    let take = client
        .prepare_cached(
            "WITH me AS (
                 SELECT 1 FROM brokers
                 WHERE broker_id = $2 AND instance = $3
                   AND expires_at > now() AND stopped_at IS NULL
             ),
             took AS (
                 INSERT INTO group_coordinators AS g
                     (group_id, broker_id, instance, epoch, expires_at)
                 SELECT $1, $2, $3, 1, now() + $4::bigint * interval '1 millisecond' FROM me
                 ON CONFLICT (group_id) DO UPDATE SET
                     broker_id = EXCLUDED.broker_id,
                     instance = EXCLUDED.instance,
                     epoch = CASE
                         WHEN g.instance = EXCLUDED.instance AND g.expires_at > now()
                         THEN g.epoch
                         ELSE g.epoch + 1
                     END,
                     expires_at = EXCLUDED.expires_at
                 WHERE g.instance = EXCLUDED.instance
                    OR g.expires_at <= now()
                    OR NOT EXISTS (
                        SELECT 1 FROM brokers b
                        WHERE b.broker_id = g.broker_id AND b.instance = g.instance
                          AND b.expires_at > now() AND b.stopped_at IS NULL
                    )
                 RETURNING g.epoch
             )
             SELECT EXISTS (SELECT 1 FROM me), (SELECT epoch FROM took)",
        )
        .await?;
    let holder = client
        .prepare_cached("SELECT broker_id FROM group_coordinators WHERE group_id = $1")
        .await?;
    for _ in 0..ACQUIRE_ATTEMPTS {
        let row = client
            .query_one(&take, &[&group_id, &broker_id, &instance, &lease_ms])
            .await?;
        let live: bool = row.get(0);
        let epoch: Option<i64> = row.get(1);
        if !live {
            return Err(GroupsError::Fenced {
                broker_id,
                instance,
            });
        }
        if let Some(epoch) = epoch {
            return Ok(Acquired::Acquired {
                epoch: CoordinatorEpoch(epoch),
            });
        }
        // Held by a live broker. The statement's own snapshot may predate a racing winner's
        // row, so the holder is read by a statement of its own.
        if let Some(row) = client.query_opt(&holder, &[&group_id]).await? {
            return Ok(Acquired::HeldBy {
                broker_id: row.get(0),
            });
        }
    }
    // Only reachable if lease rows were deleted under us, again and again.
    Err(GroupsError::Db(DbError::Other {
        url: db.url().to_string(),
        detail: format!("the lease row of group {group_id:?} kept vanishing during acquire"),
    }))
}

/// Renews, in one statement, every live lease `instance` holds, until `lease` from now, and
/// returns what it holds: (group id, epoch), ordered by group id. A group this broker
/// coordinates that is missing from the answer was taken over (or its lease ran out): drop
/// it from memory; its writes are refused from now on anyway.
///
/// Fails with [`GroupsError::Fenced`] (renewing nothing) when the broker's registry row is
/// not live: every other broker may take its groups at once, so it must drop them all.
pub async fn renew_all(
    db: &Db,
    broker_id: i32,
    instance: Uuid,
    lease: Duration,
) -> Result<Vec<(String, CoordinatorEpoch)>, GroupsError> {
    let lease_ms = lease_ms(lease)?;
    let client = db.client().await?;
    // The rows are locked in group id order, as writes lock them, so a renewal and a write
    // of several groups never wait on each other in a cycle.
    let stmt = client
        .prepare_cached(
            "WITH me AS (
                 SELECT 1 FROM brokers
                 WHERE broker_id = $1 AND instance = $2
                   AND expires_at > now() AND stopped_at IS NULL
             ),
             mine AS MATERIALIZED (
                 SELECT group_id FROM group_coordinators
                 WHERE instance = $2 AND expires_at > now() AND EXISTS (SELECT 1 FROM me)
                 ORDER BY group_id
                 FOR UPDATE
             ),
             renewed AS (
                 UPDATE group_coordinators g
                 SET expires_at = now() + $3::bigint * interval '1 millisecond'
                 FROM mine
                 WHERE g.group_id = mine.group_id AND g.instance = $2
                 RETURNING g.group_id, g.epoch
             )
             SELECT EXISTS (SELECT 1 FROM me), r.group_id, r.epoch
             FROM (SELECT 1) AS one
             LEFT JOIN renewed r ON true
             ORDER BY r.group_id",
        )
        .await?;
    let rows = client
        .query(&stmt, &[&broker_id, &instance, &lease_ms])
        .await?;
    let live = rows.first().is_some_and(|r| r.get::<_, bool>(0));
    if !live {
        return Err(GroupsError::Fenced {
            broker_id,
            instance,
        });
    }
    let mut held = Vec::with_capacity(rows.len());
    for row in rows {
        let group_id: Option<String> = row.get(1);
        let epoch: Option<i64> = row.get(2);
        if let (Some(group_id), Some(epoch)) = (group_id, epoch) {
            held.push((group_id, CoordinatorEpoch(epoch)));
        }
    }
    Ok(held)
}

/// Ends `instance`'s lease on `group_id` now (clean hand-over): the next broker to
/// [`acquire`] it gets it at once. Returns whether there was a live lease to end. The
/// caller drops the group from memory first: its writes are refused from now on.
pub async fn release(db: &Db, group_id: &str, instance: Uuid) -> Result<bool, GroupsError> {
    check_group_id(group_id)?;
    let client = db.client().await?;
    let stmt = client
        .prepare_cached(
            "UPDATE group_coordinators SET expires_at = now()
             WHERE group_id = $1 AND instance = $2 AND expires_at > now()",
        )
        .await?;
    Ok(client.execute(&stmt, &[&group_id, &instance]).await? > 0)
}

/// Ends every live lease of `instance` now (clean shutdown); returns how many there were.
pub async fn release_all(db: &Db, instance: Uuid) -> Result<u64, GroupsError> {
    let client = db.client().await?;
    let stmt = client
        .prepare_cached(
            "WITH mine AS MATERIALIZED (
                 SELECT group_id FROM group_coordinators
                 WHERE instance = $1 AND expires_at > now()
                 ORDER BY group_id
                 FOR UPDATE
             )
             UPDATE group_coordinators g SET expires_at = now()
             FROM mine
             WHERE g.group_id = mine.group_id AND g.instance = $1",
        )
        .await?;
    Ok(client.execute(&stmt, &[&instance]).await?)
}

fn lease_ms(lease: Duration) -> Result<i64, GroupsError> {
    if !(LEASE_MIN..=LEASE_MAX).contains(&lease) {
        return Err(GroupsError::InvalidLease { lease });
    }
    // At most LEASE_MAX (600,000 ms): fits.
    Ok(lease.as_millis() as i64)
}

fn check_group_id(group_id: &str) -> Result<(), GroupsError> {
    if group_id.contains('\0') {
        return Err(GroupsError::InvalidGroupId {
            group_id: group_id.to_owned(),
        });
    }
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// The store
// ---------------------------------------------------------------------------------------------

/// The group's snapshot and committed offsets, as of one moment (one statement). A new
/// coordinator calls it after [`acquire`] gave it a new epoch.
pub async fn load(db: &Db, group_id: &str) -> Result<LoadedGroup, GroupsError> {
    check_group_id(group_id)?;
    let client = db.client().await?;
    let stmt = client
        .prepare_cached(
            "SELECT NULL::text, NULL::integer, snapshot FROM group_snapshots WHERE group_id = $1
             UNION ALL
             SELECT topic, partition, committed FROM group_offsets WHERE group_id = $1",
        )
        .await?;
    let rows = client.query(&stmt, &[&group_id]).await?;
    let mut loaded = LoadedGroup::default();
    for row in rows {
        let topic: Option<String> = row.get(0);
        let value: serde_json::Value = row.get(2);
        match topic {
            None => loaded.snapshot = Some(value),
            Some(topic) => {
                let partition: i32 = row.get(1);
                let offset = decode_offset(group_id, &topic, partition, value)?;
                loaded.offsets.insert((topic, partition), offset);
            }
        }
    }
    Ok(loaded)
}

/// The committed offsets of `group_id` (OffsetFetch on a broker that does not coordinate
/// the group, `sluice group describe`). As of the last committed write: a write in flight
/// on the coordinator may not be in it yet.
pub async fn offsets_of(
    db: &Db,
    group_id: &str,
) -> Result<BTreeMap<(String, i32), CommittedOffset>, GroupsError> {
    check_group_id(group_id)?;
    let client = db.client().await?;
    let stmt = client
        .prepare_cached(
            "SELECT topic, partition, committed FROM group_offsets WHERE group_id = $1
             ORDER BY topic, partition",
        )
        .await?;
    let rows = client.query(&stmt, &[&group_id]).await?;
    let mut offsets = BTreeMap::new();
    for row in rows {
        let topic: String = row.get(0);
        let partition: i32 = row.get(1);
        let offset = decode_offset(group_id, &topic, partition, row.get(2))?;
        offsets.insert((topic, partition), offset);
    }
    Ok(offsets)
}

/// Every group the store knows (with a snapshot or committed offsets), sorted.
pub async fn list_groups(db: &Db) -> Result<Vec<String>, GroupsError> {
    let client = db.client().await?;
    let stmt = client
        .prepare_cached(
            "SELECT group_id FROM group_snapshots
             UNION
             SELECT DISTINCT group_id FROM group_offsets
             ORDER BY 1",
        )
        .await?;
    let rows = client.query(&stmt, &[]).await?;
    Ok(rows.into_iter().map(|r| r.get(0)).collect())
}

fn decode_offset(
    group_id: &str,
    topic: &str,
    partition: i32,
    value: serde_json::Value,
) -> Result<CommittedOffset, GroupsError> {
    serde_json::from_value(value).map_err(|e| GroupsError::Corrupt {
        group_id: group_id.to_owned(),
        topic: topic.to_owned(),
        partition,
        detail: e.to_string(),
    })
}

/// Applies `records` (all for `group_id`) if `instance` still holds the group's lease at
/// `epoch`, in one statement (one round trip, one transaction).
///
/// Records mean what they mean to the file store (`sluice_groups::store`), applied in
/// order: `Offset` with `Some` sets one committed offset and with `None` deletes it; `Group`
/// with `Some` sets the snapshot and with `None` deletes the group's snapshot and all its
/// offsets (an `Offset` after it in the same call starts the group's offsets afresh).
///
/// Durability: when it returns `Ok`, PostgreSQL has committed the change (durable as the
/// server's `synchronous_commit` makes it, on disk by default) and every later [`load`]
/// sees it; the coordinator may acknowledge. [`GroupsError::NotCoordinator`]: nothing was
/// written. [`GroupsError::Db`]: nothing or all of it was written (an answer lost after the
/// commit), so the coordinator answers with a retriable error and keeps its in-memory view
/// or reloads; a retry writes the same values again. A record for another group is refused
/// before any I/O ([`GroupsError::ForeignRecord`]).
///
/// The coordinator in `sluice_groups` writes one group per call on its request paths
/// (OffsetCommit, OffsetDelete, a group's snapshot) and several per call only in
/// DeleteGroups and when a topic is deleted; those use [`write_many`].
pub async fn write(
    db: &Db,
    group_id: &str,
    instance: Uuid,
    epoch: CoordinatorEpoch,
    records: &[GroupRecord],
) -> Result<(), GroupsError> {
    let outcome = write_many(db, instance, &[(group_id, epoch)], records).await?;
    if outcome.not_coordinator.is_empty() {
        Ok(())
    } else {
        Err(GroupsError::NotCoordinator {
            group_id: group_id.to_owned(),
            epoch,
        })
    }
}

/// [`write`] for several groups in one statement, fenced per group: `leases` names each
/// group with the epoch this broker holds it at; the records of every group still held are
/// applied (all of them, in one transaction), and the groups no longer held are returned in
/// [`WriteOutcome::not_coordinator`] with nothing of theirs written. Per group, as Kafka's
/// DeleteGroups answers per group (and groups are independent: each could have another
/// coordinator).
///
/// A record for a group not in `leases` fails the whole call before any I/O
/// ([`GroupsError::ForeignRecord`]). With no records, it only checks the leases.
pub async fn write_many(
    db: &Db,
    instance: Uuid,
    leases: &[(&str, CoordinatorEpoch)],
    records: &[GroupRecord],
) -> Result<WriteOutcome, GroupsError> {
    let plan = WritePlan::new(leases, records)?;
    let client = db.client().await?;
    let stmt = client.prepare_cached(WRITE_SQL).await?;
    let row = client
        .query_one(
            &stmt,
            &[
                &plan.lease_groups,
                &plan.lease_epochs,
                &instance,
                &plan.snapshot_set_groups,
                &plan.snapshot_set_values,
                &plan.snapshot_deleted_groups,
                &plan.cleared_groups,
                &plan.offset_set_groups,
                &plan.offset_set_topics,
                &plan.offset_set_partitions,
                &plan.offset_set_values,
                &plan.offset_deleted_groups,
                &plan.offset_deleted_topics,
                &plan.offset_deleted_partitions,
            ],
        )
        .await?;
    let held: Vec<String> = row.get(0);
    let held: BTreeSet<String> = held.into_iter().collect();
    let not_coordinator = plan
        .lease_groups
        .iter()
        .filter(|g| !held.contains(*g))
        .cloned()
        .collect();
    Ok(WriteOutcome { not_coordinator })
}

/// The write, as one statement of data-modifying CTEs: all of them see the same snapshot
/// and run in one transaction.
///
/// `fence` locks the lease rows that are still this instance's at the given epochs, live,
/// with the holder's registry row live, in group id order (as [`renew_all`] does); every
/// change below applies only to groups in `fence`. A statement cannot change one row twice,
/// so the records arrive collapsed ([`WritePlan`]) into disjoint row sets: snapshots set,
/// snapshots deleted, offsets set, offsets deleted one by one, and groups cleared (every
/// offset deleted except those set again after the clear). The answer is the groups that
/// passed the fence.
const WRITE_SQL: &str = "
WITH fence AS MATERIALIZED (
    SELECT g.group_id
    FROM group_coordinators g
    JOIN unnest($1::text[], $2::bigint[]) AS l(group_id, epoch)
      ON l.group_id = g.group_id AND l.epoch = g.epoch
    WHERE g.instance = $3 AND g.expires_at > now()
      AND EXISTS (
          SELECT 1 FROM brokers b
          WHERE b.broker_id = g.broker_id AND b.instance = g.instance
            AND b.expires_at > now() AND b.stopped_at IS NULL
      )
    ORDER BY g.group_id
    FOR UPDATE OF g
),
snapshots_set AS (
    INSERT INTO group_snapshots (group_id, snapshot, updated_at)
    SELECT s.group_id, s.snapshot, now()
    FROM unnest($4::text[], $5::json[]) AS s(group_id, snapshot)
    WHERE s.group_id IN (SELECT group_id FROM fence)
    ON CONFLICT (group_id) DO UPDATE
        SET snapshot = EXCLUDED.snapshot, updated_at = EXCLUDED.updated_at
),
snapshots_deleted AS (
    DELETE FROM group_snapshots
    WHERE group_id = ANY($6::text[]) AND group_id IN (SELECT group_id FROM fence)
),
offsets_deleted AS (
    DELETE FROM group_offsets o
    WHERE o.group_id IN (SELECT group_id FROM fence)
      AND (
          (o.group_id = ANY($7::text[])
           AND NOT EXISTS (
               SELECT 1 FROM unnest($8::text[], $9::text[], $10::integer[]) AS k(group_id, topic, partition)
               WHERE k.group_id = o.group_id AND k.topic = o.topic AND k.partition = o.partition
           ))
          OR (o.group_id, o.topic, o.partition) IN (
              SELECT * FROM unnest($12::text[], $13::text[], $14::integer[])
          )
      )
),
offsets_set AS (
    INSERT INTO group_offsets (group_id, topic, partition, committed, updated_at)
    SELECT k.group_id, k.topic, k.partition, k.committed, now()
    FROM unnest($8::text[], $9::text[], $10::integer[], $11::json[])
        AS k(group_id, topic, partition, committed)
    WHERE k.group_id IN (SELECT group_id FROM fence)
    ON CONFLICT (group_id, topic, partition) DO UPDATE
        SET committed = EXCLUDED.committed, updated_at = EXCLUDED.updated_at
)
SELECT ARRAY(SELECT group_id FROM fence)
";

/// Records collapsed into what they do in the end, as the statement's array parameters.
#[derive(Debug, Default)]
struct WritePlan {
    lease_groups: Vec<String>,
    lease_epochs: Vec<i64>,
    snapshot_set_groups: Vec<String>,
    snapshot_set_values: Vec<serde_json::Value>,
    snapshot_deleted_groups: Vec<String>,
    cleared_groups: Vec<String>,
    offset_set_groups: Vec<String>,
    offset_set_topics: Vec<String>,
    offset_set_partitions: Vec<i32>,
    offset_set_values: Vec<serde_json::Value>,
    offset_deleted_groups: Vec<String>,
    offset_deleted_topics: Vec<String>,
    offset_deleted_partitions: Vec<i32>,
}

/// One group's records, applied in order to "what changes".
#[derive(Debug, Default)]
struct GroupEffect {
    /// A `Group` record with `None` came: every stored offset goes, except those set after.
    cleared: bool,
    /// `None`: untouched; `Some(None)`: deleted; `Some(Some(v))`: set to `v`.
    snapshot: Option<Option<serde_json::Value>>,
    /// The last change of each offset after the last clear: `Some` set, `None` delete.
    offsets: BTreeMap<(String, i32), Option<serde_json::Value>>,
}

impl WritePlan {
    fn new(
        leases: &[(&str, CoordinatorEpoch)],
        records: &[GroupRecord],
    ) -> Result<WritePlan, GroupsError> {
        let mut effects: BTreeMap<&str, GroupEffect> = BTreeMap::new();
        let mut plan = WritePlan::default();
        for (group_id, epoch) in leases {
            check_group_id(group_id)?;
            // A group named twice keeps its first epoch; both must be the same lease anyway.
            if effects.insert(group_id, GroupEffect::default()).is_none() {
                plan.lease_groups.push((*group_id).to_owned());
                plan.lease_epochs.push(epoch.0);
            }
        }
        for record in records {
            let group = match record {
                GroupRecord::Offset { group, .. } | GroupRecord::Group { group, .. } => group,
            };
            let Some(effect) = effects.get_mut(group.as_str()) else {
                return Err(GroupsError::ForeignRecord {
                    record_group: group.clone(),
                    groups: plan.lease_groups.join(", "),
                });
            };
            match record {
                GroupRecord::Offset {
                    group,
                    topic,
                    partition,
                    offset,
                } => {
                    let value = match offset {
                        Some(offset) => Some(serde_json::to_value(offset).map_err(|source| {
                            GroupsError::Encode {
                                group_id: group.clone(),
                                source,
                            }
                        })?),
                        None => None,
                    };
                    effect.offsets.insert((topic.clone(), *partition), value);
                }
                GroupRecord::Group {
                    snapshot: Some(snapshot),
                    ..
                } => effect.snapshot = Some(Some(snapshot.clone())),
                GroupRecord::Group { snapshot: None, .. } => {
                    effect.cleared = true;
                    effect.snapshot = Some(None);
                    effect.offsets.clear();
                }
            }
        }
        for (group_id, effect) in effects {
            match effect.snapshot {
                Some(Some(snapshot)) => {
                    plan.snapshot_set_groups.push(group_id.to_owned());
                    plan.snapshot_set_values.push(snapshot);
                }
                Some(None) => plan.snapshot_deleted_groups.push(group_id.to_owned()),
                None => {}
            }
            if effect.cleared {
                plan.cleared_groups.push(group_id.to_owned());
            }
            for ((topic, partition), value) in effect.offsets {
                match value {
                    Some(value) => {
                        plan.offset_set_groups.push(group_id.to_owned());
                        plan.offset_set_topics.push(topic);
                        plan.offset_set_partitions.push(partition);
                        plan.offset_set_values.push(value);
                    }
                    // After a clear, deleting an offset that is gone anyway is harmless.
                    None => {
                        plan.offset_deleted_groups.push(group_id.to_owned());
                        plan.offset_deleted_topics.push(topic);
                        plan.offset_deleted_partitions.push(partition);
                    }
                }
            }
        }
        Ok(plan)
    }
}

#[cfg(test)]
mod tests;
