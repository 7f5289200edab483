//! [`GroupOwner`] against a real PostgreSQL: takes and takeovers between two brokers, the
//! renewal reporting lost groups (taken over, registry row dead, database unreachable for a
//! lease), fenced writes applied in call order, releases.

mod common;

use std::time::Duration;

use common::{PostgresServer, migrated};
use sluice_cluster::group_owner::GroupOwner;
use sluice_cluster::groups;
use sluice_cluster::{Db, DbSettings, MetadataUrl};
use sluice_groups::ownership::{GroupOwnership, OwnerEpoch, Take, TakenGroup};
use sluice_groups::store::{CommittedOffset, GroupRecord, StoreError};
use uuid::Uuid;

/// Short enough that lease runs out within a test, long enough for a loaded test machine
/// (renewals every third of it).
const LEASE: Duration = Duration::from_millis(1_500);

/// How long a test waits for something the renewal must report.
const WAIT: Duration = Duration::from_secs(10);

/// Registers broker `broker_id` as the registry would (live for ten minutes).
async fn broker(db: &Db, broker_id: i32) -> Uuid {
    let instance = Uuid::new_v4();
    let client = db.client().await.unwrap();
    client
        .execute(
            "INSERT INTO brokers (broker_id, instance, host, port, expires_at)
             VALUES ($1, $2, '127.0.0.1', 9092, now() + interval '10 minutes')",
            &[&broker_id, &instance],
        )
        .await
        .unwrap();
    instance
}

async fn execute(
    db: &Db,
    statement: &str,
    group_or_broker: &(dyn tokio_postgres::types::ToSql + Sync),
) {
    let client = db.client().await.unwrap();
    let n = client.execute(statement, &[group_or_broker]).await.unwrap();
    assert_eq!(n, 1, "{statement}");
}

/// The group's lease runs out (its holder stopped renewing long ago).
async fn expire_lease(db: &Db, group_id: &str) {
    execute(
        db,
        "UPDATE group_coordinators SET expires_at = now() - interval '1 millisecond'
         WHERE group_id = $1",
        &group_id,
    )
    .await;
}

/// A pool that gives up fast when the server is gone.
async fn quick_pool(pg: &PostgresServer) -> Db {
    let url = MetadataUrl::parse(&pg.url()).unwrap();
    let settings = DbSettings {
        connect_timeout: Duration::from_secs(1),
        statement_timeout: Duration::from_secs(2),
        checkout_timeout: Duration::from_secs(2),
        pool_size: 4,
    };
    Db::connect(&url, settings).await.unwrap()
}

fn committed(offset: i64) -> CommittedOffset {
    CommittedOffset {
        offset,
        leader_epoch: -1,
        metadata: None,
        commit_timestamp_ms: 1_700_000_000_000,
    }
}

fn set_offset(group: &str, offset: i64) -> GroupRecord {
    GroupRecord::Offset {
        group: group.to_owned(),
        topic: "t".to_owned(),
        partition: 0,
        offset: Some(committed(offset)),
    }
}

async fn owned(owner: &GroupOwner, group: &str) -> TakenGroup {
    match owner.take(group).await {
        Take::Owned(taken) => taken,
        other => panic!("{owner:?} did not take {group}: {other:?}"),
    }
}

/// [`owned`] for a group another broker has just released: a renewal of that broker's leases
/// that was already under way when the release committed may extend the lease once more (it
/// then finds the lease unknown and releases it again), so the take is retried, for less than
/// a lease: a lease that merely ran out would take longer.
async fn owned_after_release(owner: &GroupOwner, group: &str) -> TakenGroup {
    let deadline = tokio::time::Instant::now() + LEASE * 2 / 3;
    loop {
        match owner.take(group).await {
            Take::Owned(taken) => return taken,
            Take::OwnedElsewhere { .. } if tokio::time::Instant::now() < deadline => {
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            other => panic!("{owner:?} did not take {group}: {other:?}"),
        }
    }
}

fn stored_offset(taken: &TakenGroup) -> Option<i64> {
    taken.offsets.get(&("t".to_owned(), 0)).map(|o| o.offset)
}

/// Waits until `owner` reports every group of `groups` lost, at most [`WAIT`]; returns the
/// epochs they were lost at, in `groups`' order.
async fn lost(owner: &GroupOwner, groups: &[&str]) -> Vec<OwnerEpoch> {
    let deadline = tokio::time::Instant::now() + WAIT;
    let mut seen = Vec::new();
    loop {
        seen.extend(owner.lost());
        let epochs: Vec<OwnerEpoch> = groups
            .iter()
            .filter_map(|g| seen.iter().find(|(s, _)| s == g).map(|(_, e)| *e))
            .collect();
        if epochs.len() == groups.len() {
            return epochs;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "{owner:?} did not report {groups:?} lost within {WAIT:?} (reported: {seen:?})"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_group_moves_between_brokers_and_the_old_holder_is_fenced() {
    let pg = PostgresServer::start();
    let db = migrated(&pg).await;
    let a = GroupOwner::start(db.clone(), 1, broker(&db, 1).await, LEASE).unwrap();
    let b = GroupOwner::start(db.clone(), 2, broker(&db, 2).await, LEASE).unwrap();

    let first = owned(&a, "g").await;
    assert_eq!(first.epoch, OwnerEpoch(1));
    assert_eq!(first.snapshot, None);
    let written = a
        .write(vec![("g".into(), first.epoch)], vec![set_offset("g", 5)])
        .await
        .unwrap();
    assert!(written.not_coordinator.is_empty());
    assert!(matches!(
        b.take("g").await,
        Take::OwnedElsewhere { broker_id: 1 }
    ));

    // Broker 1's lease runs out: broker 2 takes the group over and loads its offsets.
    expire_lease(&db, "g").await;
    let second = owned(&b, "g").await;
    assert_eq!(second.epoch, OwnerEpoch(2));
    assert_eq!(stored_offset(&second), Some(5));

    // Broker 1's next write is refused and the group reported lost (once).
    let refused = a
        .write(vec![("g".into(), first.epoch)], vec![set_offset("g", 7)])
        .await
        .unwrap();
    assert_eq!(refused.not_coordinator, vec!["g".to_owned()]);
    assert_eq!(a.lost(), vec![("g".to_owned(), OwnerEpoch(1))]);
    assert!(a.lost().is_empty());
    assert!(a.held().is_empty());
    assert_eq!(stored_offset(&owned(&b, "g").await), Some(5));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_renewal_keeps_leases_and_reports_a_takeover() {
    let pg = PostgresServer::start();
    let db = migrated(&pg).await;
    let a = GroupOwner::start(db.clone(), 1, broker(&db, 1).await, LEASE).unwrap();
    let b = GroupOwner::start(db.clone(), 2, broker(&db, 2).await, LEASE).unwrap();
    owned(&a, "g").await;
    owned(&a, "h").await;

    // Three leases' time: renewals keep both groups broker 1's.
    tokio::time::sleep(LEASE * 3).await;
    assert!(a.lost().is_empty());
    assert_eq!(groups::coordinator_of(&db, "g").await.unwrap(), Some(1));
    assert!(matches!(
        b.take("h").await,
        Take::OwnedElsewhere { broker_id: 1 }
    ));

    // g is taken over: the next renewal reports it, and only it.
    expire_lease(&db, "g").await;
    assert_eq!(owned(&b, "g").await.epoch, OwnerEpoch(2));
    assert_eq!(lost(&a, &["g"]).await, vec![OwnerEpoch(1)]);
    let held: Vec<String> = a.held().into_iter().map(|(g, _)| g).collect();
    assert_eq!(held, vec!["h"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_broker_whose_registration_died_loses_every_group() {
    let pg = PostgresServer::start();
    let db = migrated(&pg).await;
    let a = GroupOwner::start(db.clone(), 1, broker(&db, 1).await, LEASE).unwrap();
    owned(&a, "g").await;
    owned(&a, "h").await;
    execute(
        &db,
        "UPDATE brokers SET expires_at = now() - interval '1 second' WHERE broker_id = $1",
        &1i32,
    )
    .await;
    lost(&a, &["g", "h"]).await;
    assert!(a.held().is_empty());
    assert!(matches!(a.take("g").await, Take::Unavailable(_)));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn writes_apply_in_call_order() {
    let pg = PostgresServer::start();
    let db = migrated(&pg).await;
    let a = GroupOwner::start(db.clone(), 1, broker(&db, 1).await, LEASE).unwrap();
    let epoch = owned(&a, "g").await.epoch;
    let other = owned(&a, "other").await.epoch;
    // Queued back to back, awaited only afterwards: the writer batches them, in order.
    let pending: Vec<_> = (1..=300)
        .map(|n| {
            let mut leases = vec![("g".to_owned(), epoch)];
            let mut records = vec![set_offset("g", n)];
            if n % 7 == 0 {
                leases.push(("other".to_owned(), other));
                records.push(set_offset("other", n));
            }
            a.write(leases, records)
        })
        .collect();
    for outcome in futures_util::future::join_all(pending).await {
        assert!(outcome.unwrap().not_coordinator.is_empty());
    }
    assert_eq!(stored_offset(&owned(&a, "g").await), Some(300));
    assert_eq!(stored_offset(&owned(&a, "other").await), Some(294));

    // A group deleted and set again in one queue: the last change wins.
    let delete = GroupRecord::Group {
        group: "g".to_owned(),
        snapshot: None,
    };
    let deleted = a.write(vec![("g".into(), epoch)], vec![delete]);
    let again = a.write(vec![("g".into(), epoch)], vec![set_offset("g", 9)]);
    deleted.await.unwrap();
    again.await.unwrap();
    assert_eq!(stored_offset(&owned(&a, "g").await), Some(9));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn releases_hand_groups_over_at_once_and_unknown_leases_are_released() {
    let pg = PostgresServer::start();
    let db = migrated(&pg).await;
    let instance_a = broker(&db, 1).await;
    let a = GroupOwner::start(db.clone(), 1, instance_a, LEASE).unwrap();
    let b = GroupOwner::start(db.clone(), 2, broker(&db, 2).await, LEASE).unwrap();

    let g = owned(&a, "g").await.epoch;
    a.release("g", g);
    // Queued after the writes before it; a take on broker 2 follows it.
    let barrier = a.write(vec![], vec![]);
    barrier.await.unwrap();
    assert_eq!(owned_after_release(&b, "g").await.epoch, OwnerEpoch(2));

    owned(&a, "x").await;
    owned(&a, "y").await;
    a.release_all().await.unwrap();
    assert!(a.held().is_empty());
    assert_eq!(owned_after_release(&b, "x").await.epoch, OwnerEpoch(2));
    assert_eq!(owned_after_release(&b, "y").await.epoch, OwnerEpoch(2));

    // A lease broker 1 holds without knowing it (an acquire whose answer was lost): the
    // renewal releases it instead of renewing it for nobody.
    let acquired = groups::acquire(&db, "z", 1, instance_a, LEASE)
        .await
        .unwrap();
    assert!(matches!(acquired, groups::Acquired::Acquired { .. }));
    let deadline = tokio::time::Instant::now() + WAIT;
    while groups::coordinator_of(&db, "z").await.unwrap().is_some() {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the unknown lease was never released"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(owned(&b, "z").await.epoch, OwnerEpoch(2));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unreachable_database_is_retriable_and_drops_groups_once_their_lease_ran_out() {
    let mut pg = PostgresServer::start();
    migrated(&pg).await;
    let db = quick_pool(&pg).await;
    let a = GroupOwner::start(db.clone(), 1, broker(&db, 1).await, LEASE).unwrap();
    let epoch = owned(&a, "g").await.epoch;

    pg.stop();
    let started = tokio::time::Instant::now();
    match a.take("h").await {
        Take::Unavailable(e) => {
            assert!(matches!(e.store_error(), StoreError::Unavailable(_)), "{e}")
        }
        other => panic!("took a group without a database: {other:?}"),
    }
    let refused = a
        .write(vec![("g".into(), epoch)], vec![set_offset("g", 1)])
        .await;
    assert!(
        matches!(refused, Err(StoreError::Unavailable(_))),
        "{refused:?}"
    );
    // Failed renewals drop nothing while the lease may still run; then the group goes.
    assert_eq!(lost(&a, &["g"]).await, vec![epoch]);
    assert!(
        started.elapsed() >= LEASE - groups::renew_interval(LEASE),
        "dropped after {:?}, before its lease could have run out",
        started.elapsed()
    );

    // The database is back: the group is taken again (the same lease, if it had not run
    // out on the database's clock; a new one otherwise).
    pg.start_again();
    let deadline = tokio::time::Instant::now() + WAIT;
    loop {
        match a.take("g").await {
            Take::Owned(taken) => {
                assert!(taken.epoch >= epoch);
                break;
            }
            other => {
                assert!(
                    tokio::time::Instant::now() < deadline,
                    "no take after the database came back: {other:?}"
                );
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
    }
}
