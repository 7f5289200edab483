//! Group coordinator leases and the group store against a real PostgreSQL: who coordinates,
//! takeovers with their epochs, racing brokers, fenced writes, and what a new coordinator
//! loads.

mod common;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use common::{PostgresServer, migrated};
use serde_json::json;
use sluice_cluster::Db;
use sluice_cluster::groups::{
    self, Acquired, CoordinatorEpoch, GroupsError, LEASE_MAX, LEASE_MIN, LoadedGroup, WriteOutcome,
};
use sluice_groups::store::{CommittedOffset, GroupRecord};
use uuid::Uuid;

const LEASE: Duration = groups::DEFAULT_LEASE;

/// Registers broker `broker_id` as the registry would, live for `ttl`; returns its instance.
async fn broker(db: &Db, broker_id: i32, ttl: Duration) -> Uuid {
    let instance = Uuid::new_v4();
    let client = db.client().await.unwrap();
    client
        .execute(
            "INSERT INTO brokers (broker_id, instance, host, port, expires_at)
             VALUES ($1, $2, '127.0.0.1', 9092, now() + $3::bigint * interval '1 millisecond')",
            &[&broker_id, &instance, &(ttl.as_millis() as i64)],
        )
        .await
        .unwrap();
    instance
}

/// The registry declares `broker_id` dead: its registration expired.
async fn expire_broker(db: &Db, broker_id: i32) {
    sql(
        db,
        "UPDATE brokers SET expires_at = now() - interval '1 second' WHERE broker_id = $1",
        broker_id,
    )
    .await;
}

/// `broker_id` shut down cleanly.
async fn stop_broker(db: &Db, broker_id: i32) {
    sql(
        db,
        "UPDATE brokers SET stopped_at = now() WHERE broker_id = $1",
        broker_id,
    )
    .await;
}

/// The group's lease runs out (as if its holder stopped renewing long ago).
async fn expire_lease(db: &Db, group_id: &str) {
    let client = db.client().await.unwrap();
    let n = client
        .execute(
            "UPDATE group_coordinators SET expires_at = now() - interval '1 millisecond'
             WHERE group_id = $1",
            &[&group_id],
        )
        .await
        .unwrap();
    assert_eq!(n, 1, "group {group_id} has a lease row");
}

async fn sql(db: &Db, statement: &str, broker_id: i32) {
    let client = db.client().await.unwrap();
    let n = client.execute(statement, &[&broker_id]).await.unwrap();
    assert_eq!(n, 1, "{statement}");
}

async fn acquired(db: &Db, group: &str, broker_id: i32, instance: Uuid) -> CoordinatorEpoch {
    match groups::acquire(db, group, broker_id, instance, LEASE)
        .await
        .unwrap()
    {
        Acquired::Acquired { epoch } => epoch,
        other => panic!("broker {broker_id} did not get {group}: {other:?}"),
    }
}

fn committed(offset: i64, metadata: Option<&str>) -> CommittedOffset {
    CommittedOffset {
        offset,
        leader_epoch: 3,
        metadata: metadata.map(str::to_owned),
        commit_timestamp_ms: 1_700_000_000_000 + offset,
    }
}

fn set_offset(group: &str, topic: &str, partition: i32, offset: i64) -> GroupRecord {
    GroupRecord::Offset {
        group: group.to_owned(),
        topic: topic.to_owned(),
        partition,
        offset: Some(committed(offset, None)),
    }
}

fn set_snapshot(group: &str, snapshot: serde_json::Value) -> GroupRecord {
    GroupRecord::Group {
        group: group.to_owned(),
        snapshot: Some(snapshot),
    }
}

fn offsets_of(loaded: &LoadedGroup) -> Vec<(String, i32, i64)> {
    loaded
        .offsets
        .iter()
        .map(|((t, p), o)| (t.clone(), *p, o.offset))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn find_coordinator_names_the_live_holder_else_the_preferred_broker() {
    let pg = PostgresServer::start();
    let db = migrated(&pg).await;
    assert_eq!(groups::find_coordinator(&db, "g").await.unwrap(), None);

    let mut instances = BTreeMap::new();
    for id in [1, 2, 3] {
        instances.insert(id, broker(&db, id, LEASE_MAX).await);
    }
    let preferred = groups::preferred_coordinator(&[1, 2, 3], "g").unwrap();
    assert_eq!(groups::coordinator_of(&db, "g").await.unwrap(), None);
    assert_eq!(
        groups::find_coordinator(&db, "g").await.unwrap(),
        Some(preferred)
    );

    // Another broker takes the lease: it is the coordinator now, whatever the preference.
    let holder = if preferred == 1 { 2 } else { 1 };
    acquired(&db, "g", holder, instances[&holder]).await;
    assert_eq!(
        groups::coordinator_of(&db, "g").await.unwrap(),
        Some(holder)
    );
    assert_eq!(
        groups::find_coordinator(&db, "g").await.unwrap(),
        Some(holder)
    );

    // Many groups in one query, in the asked order.
    let asked = ["x", "g", "y", "z"];
    let answers = groups::find_coordinators(&db, &asked).await.unwrap();
    let expected: Vec<Option<i32>> = asked
        .iter()
        .map(|g| {
            if *g == "g" {
                Some(holder)
            } else {
                groups::preferred_coordinator(&[1, 2, 3], g)
            }
        })
        .collect();
    assert_eq!(answers, expected);

    // The holder dies: its lease no longer counts; the preference among the living does.
    expire_broker(&db, holder).await;
    assert_eq!(groups::coordinator_of(&db, "g").await.unwrap(), None);
    let living: Vec<i32> = [1, 2, 3].into_iter().filter(|&id| id != holder).collect();
    assert_eq!(
        groups::find_coordinator(&db, "g").await.unwrap(),
        groups::preferred_coordinator(&living, "g")
    );

    let e = groups::find_coordinator(&db, "bad\0id").await.unwrap_err();
    assert!(matches!(e, GroupsError::InvalidGroupId { .. }), "{e}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lease_is_held_renewed_and_taken_over_after_it_expires() {
    let pg = PostgresServer::start();
    let db = migrated(&pg).await;
    let a = broker(&db, 1, LEASE_MAX).await;
    let b = broker(&db, 2, LEASE_MAX).await;

    assert_eq!(acquired(&db, "g", 1, a).await, CoordinatorEpoch(1));
    assert_eq!(
        groups::acquire(&db, "g", 2, b, LEASE).await.unwrap(),
        Acquired::HeldBy { broker_id: 1 }
    );
    // Its own live lease: renewed at the same epoch.
    assert_eq!(acquired(&db, "g", 1, a).await, CoordinatorEpoch(1));

    // A short lease runs out on the database's clock; the next broker takes over.
    let short = Duration::from_millis(300);
    assert_eq!(
        groups::acquire(&db, "g", 1, a, short).await.unwrap(),
        Acquired::Acquired {
            epoch: CoordinatorEpoch(1)
        }
    );
    assert_eq!(
        groups::acquire(&db, "g", 2, b, LEASE).await.unwrap(),
        Acquired::HeldBy { broker_id: 1 },
        "not expired yet"
    );
    tokio::time::sleep(short + Duration::from_millis(200)).await;
    assert_eq!(groups::coordinator_of(&db, "g").await.unwrap(), None);
    assert_eq!(acquired(&db, "g", 2, b).await, CoordinatorEpoch(2));
    assert_eq!(groups::coordinator_of(&db, "g").await.unwrap(), Some(2));
    assert_eq!(
        groups::acquire(&db, "g", 1, a, LEASE).await.unwrap(),
        Acquired::HeldBy { broker_id: 2 }
    );

    // A clean release frees it at once; taking back a lease one let go is a new epoch.
    assert!(groups::release(&db, "g", b).await.unwrap());
    assert!(
        !groups::release(&db, "g", b).await.unwrap(),
        "already let go"
    );
    assert_eq!(groups::coordinator_of(&db, "g").await.unwrap(), None);
    assert_eq!(acquired(&db, "g", 2, b).await, CoordinatorEpoch(3));
    assert_eq!(groups::release_all(&db, b).await.unwrap(), 1);
    assert_eq!(acquired(&db, "g", 1, a).await, CoordinatorEpoch(4));

    // Leases outside the bounds are refused before any I/O.
    let e = groups::acquire(&db, "g", 1, a, Duration::ZERO)
        .await
        .unwrap_err();
    assert!(matches!(e, GroupsError::InvalidLease { .. }), "{e}");
    let e = groups::acquire(&db, "g", 1, a, LEASE_MIN / 2)
        .await
        .unwrap_err();
    assert!(matches!(e, GroupsError::InvalidLease { .. }), "{e}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dead_brokers_leases_are_taken_at_once() {
    let pg = PostgresServer::start();
    let db = migrated(&pg).await;
    let a = broker(&db, 1, LEASE_MAX).await;
    let b = broker(&db, 2, LEASE_MAX).await;
    let c = broker(&db, 3, LEASE_MAX).await;

    // Leases far from expiry.
    for g in ["crashed", "stopped"] {
        assert_eq!(
            groups::acquire(&db, g, 1, a, LEASE_MAX).await.unwrap(),
            Acquired::Acquired {
                epoch: CoordinatorEpoch(1)
            }
        );
    }
    acquired(&db, "other", 2, b).await;
    assert_eq!(
        groups::acquire(&db, "crashed", 2, b, LEASE).await.unwrap(),
        Acquired::HeldBy { broker_id: 1 }
    );

    // Its registration expires (a crash): its groups move without waiting for their leases.
    expire_broker(&db, 1).await;
    assert_eq!(acquired(&db, "crashed", 2, b).await, CoordinatorEpoch(2));
    // A clean stop (stopped_at) does the same.
    sql(
        &db,
        "UPDATE brokers SET expires_at = now() + interval '1 hour', stopped_at = NULL WHERE broker_id = $1",
        1,
    )
    .await;
    assert_eq!(
        groups::acquire(&db, "stopped", 3, c, LEASE).await.unwrap(),
        Acquired::HeldBy { broker_id: 1 },
        "alive again, still the holder"
    );
    stop_broker(&db, 1).await;
    assert_eq!(acquired(&db, "stopped", 3, c).await, CoordinatorEpoch(2));

    // A broker that is not live itself is fenced: it may take nothing, renew nothing.
    for (id, instance) in [(1, a), (2, Uuid::new_v4()), (9, Uuid::new_v4())] {
        let e = groups::acquire(&db, "fresh", id, instance, LEASE)
            .await
            .unwrap_err();
        assert!(
            matches!(e, GroupsError::Fenced { broker_id, .. } if broker_id == id),
            "{e}"
        );
        let e = groups::renew_all(&db, id, instance, LEASE)
            .await
            .unwrap_err();
        assert!(matches!(e, GroupsError::Fenced { .. }), "{e}");
    }
    assert_eq!(groups::coordinator_of(&db, "fresh").await.unwrap(), None);
    // Fencing must not keep the other leases from being read right.
    assert_eq!(groups::coordinator_of(&db, "other").await.unwrap(), Some(2));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn racing_brokers_exactly_one_wins() {
    const BROKERS: i32 = 8;
    let pg = PostgresServer::start();
    let db = migrated(&pg).await;
    let mut instances = Vec::new();
    for id in 1..=BROKERS {
        instances.push((id, broker(&db, id, LEASE_MAX).await));
    }
    // A free group (racing inserts), then the same group after its lease expired (racing
    // updates), three times each.
    for round in 0..6 {
        let group = format!("race-{}", round / 2);
        let takeover = round % 2 == 1;
        if takeover {
            expire_lease(&db, &group).await;
        }
        let barrier = Arc::new(tokio::sync::Barrier::new(BROKERS as usize));
        let mut tasks = Vec::new();
        for &(id, instance) in &instances {
            // A pool of its own per broker, its connection open before the start line, so
            // the statements reach PostgreSQL together.
            let db = common::connect(&pg.url()).await;
            let group = group.clone();
            let barrier = barrier.clone();
            tasks.push(tokio::spawn(async move {
                barrier.wait().await;
                (
                    id,
                    groups::acquire(&db, &group, id, instance, LEASE)
                        .await
                        .unwrap(),
                )
            }));
        }
        let mut winners = Vec::new();
        let mut held_by = Vec::new();
        for task in tasks {
            match task.await.unwrap() {
                (id, Acquired::Acquired { epoch }) => winners.push((id, epoch)),
                (_, Acquired::HeldBy { broker_id }) => held_by.push(broker_id),
            }
        }
        assert_eq!(winners.len(), 1, "round {round}: {winners:?}");
        let (winner, epoch) = winners[0];
        let expected = if takeover { 2 } else { 1 };
        assert_eq!(epoch, CoordinatorEpoch(expected), "round {round}");
        assert!(
            held_by.iter().all(|&b| b == winner),
            "round {round}: losers saw {held_by:?}, winner {winner}"
        );
        assert_eq!(
            groups::coordinator_of(&db, &group).await.unwrap(),
            Some(winner)
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn renew_all_keeps_what_is_held_and_drops_what_was_taken() {
    let pg = PostgresServer::start();
    let db = migrated(&pg).await;
    let a = broker(&db, 1, LEASE_MAX).await;
    let b = broker(&db, 2, LEASE_MAX).await;
    for g in ["g1", "g2", "g3"] {
        acquired(&db, g, 1, a).await;
    }
    acquired(&db, "g4", 2, b).await;
    let held = groups::renew_all(&db, 1, a, LEASE).await.unwrap();
    let one = CoordinatorEpoch(1);
    assert_eq!(
        held,
        [("g1".into(), one), ("g2".into(), one), ("g3".into(), one)]
    );

    // g2 is taken over, g3 released: the next renewal answers g1 alone.
    expire_lease(&db, "g2").await;
    assert_eq!(acquired(&db, "g2", 2, b).await, CoordinatorEpoch(2));
    assert!(groups::release(&db, "g3", a).await.unwrap());
    let held = groups::renew_all(&db, 1, a, LEASE).await.unwrap();
    assert_eq!(held, [("g1".to_string(), one)]);
    let held = groups::renew_all(&db, 2, b, LEASE).await.unwrap();
    assert_eq!(
        held,
        [("g2".to_string(), CoordinatorEpoch(2)), ("g4".into(), one)]
    );

    // A renewal really moves the expiry: a lease about to run out survives past its end.
    let short = Duration::from_millis(300);
    assert_eq!(
        groups::acquire(&db, "g1", 1, a, short).await.unwrap(),
        Acquired::Acquired { epoch: one }
    );
    groups::renew_all(&db, 1, a, LEASE).await.unwrap();
    tokio::time::sleep(short + Duration::from_millis(200)).await;
    assert_eq!(
        groups::acquire(&db, "g1", 2, b, LEASE).await.unwrap(),
        Acquired::HeldBy { broker_id: 1 }
    );
    // A lease that ran out unrenewed is not renewed back: a new acquire (new epoch) is.
    groups::renew_all(&db, 1, a, short).await.unwrap();
    tokio::time::sleep(short + Duration::from_millis(200)).await;
    assert_eq!(groups::renew_all(&db, 1, a, LEASE).await.unwrap(), []);
    assert_eq!(acquired(&db, "g1", 1, a).await, CoordinatorEpoch(2));

    // Clean shutdown: every lease ends now, and another broker takes them at once.
    acquired(&db, "g5", 1, a).await;
    assert_eq!(groups::release_all(&db, a).await.unwrap(), 2);
    assert_eq!(groups::renew_all(&db, 1, a, LEASE).await.unwrap(), []);
    assert_eq!(acquired(&db, "g5", 2, b).await, CoordinatorEpoch(2));

    // A broker whose own registration ran out renews nothing and hears so.
    expire_broker(&db, 2).await;
    let e = groups::renew_all(&db, 2, b, LEASE).await.unwrap_err();
    assert!(matches!(e, GroupsError::Fenced { broker_id: 2, .. }), "{e}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_write_after_a_takeover_is_refused_and_changes_nothing() {
    let pg = PostgresServer::start();
    let db = migrated(&pg).await;
    let a = broker(&db, 1, LEASE_MAX).await;
    let b = broker(&db, 2, LEASE_MAX).await;
    let epoch_a = acquired(&db, "g", 1, a).await;
    groups::write(
        &db,
        "g",
        a,
        epoch_a,
        &[
            set_offset("g", "t", 0, 5),
            set_snapshot("g", json!({"generation": 1})),
        ],
    )
    .await
    .unwrap();

    expire_lease(&db, "g").await;
    let epoch_b = acquired(&db, "g", 2, b).await;
    assert_eq!(epoch_b, CoordinatorEpoch(2));
    let before = groups::load(&db, "g").await.unwrap();

    // The old coordinator's write, and the new one's with a stale epoch: both refused.
    let stale = [
        set_offset("g", "t", 0, 6),
        set_offset("g", "t", 1, 1),
        set_snapshot("g", json!({"generation": 99})),
        GroupRecord::Group {
            group: "g".into(),
            snapshot: None,
        },
    ];
    for (instance, epoch) in [(a, epoch_a), (b, epoch_a), (a, epoch_b)] {
        let e = groups::write(&db, "g", instance, epoch, &stale)
            .await
            .unwrap_err();
        assert!(
            matches!(&e, GroupsError::NotCoordinator { group_id, .. } if group_id == "g"),
            "{e}"
        );
    }
    let after = groups::load(&db, "g").await.unwrap();
    assert_eq!(after, before, "a refused write changed nothing");
    assert_eq!(offsets_of(&after), [("t".to_string(), 0, 5)]);
    assert_eq!(after.snapshot, Some(json!({"generation": 1})));

    groups::write(&db, "g", b, epoch_b, &[set_offset("g", "t", 0, 7)])
        .await
        .unwrap();
    assert_eq!(
        offsets_of(&groups::load(&db, "g").await.unwrap()),
        [("t".to_string(), 0, 7)]
    );

    // An expired lease nobody took yet, a released one, and a holder whose registration
    // ran out: all refused as well.
    let short = Duration::from_millis(300);
    let Acquired::Acquired { epoch } = groups::acquire(&db, "h", 2, b, short).await.unwrap() else {
        panic!("h is free");
    };
    tokio::time::sleep(short + Duration::from_millis(200)).await;
    let e = groups::write(&db, "h", b, epoch, &[set_offset("h", "t", 0, 1)])
        .await
        .unwrap_err();
    assert!(matches!(e, GroupsError::NotCoordinator { .. }), "{e}");

    let epoch = acquired(&db, "h", 2, b).await;
    groups::release(&db, "h", b).await.unwrap();
    let e = groups::write(&db, "h", b, epoch, &[set_offset("h", "t", 0, 1)])
        .await
        .unwrap_err();
    assert!(matches!(e, GroupsError::NotCoordinator { .. }), "{e}");

    let epoch = acquired(&db, "h", 2, b).await;
    groups::write(&db, "h", b, epoch, &[set_offset("h", "t", 0, 1)])
        .await
        .unwrap();
    expire_broker(&db, 2).await;
    let e = groups::write(&db, "h", b, epoch, &[set_offset("h", "t", 0, 2)])
        .await
        .unwrap_err();
    assert!(matches!(e, GroupsError::NotCoordinator { .. }), "{e}");
    assert_eq!(
        offsets_of(&groups::load(&db, "h").await.unwrap()),
        [("t".to_string(), 0, 1)]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn load_returns_what_was_written() {
    let pg = PostgresServer::start();
    let db = migrated(&pg).await;
    let a = broker(&db, 1, LEASE_MAX).await;
    let epoch = acquired(&db, "g", 1, a).await;
    assert_eq!(
        groups::load(&db, "g").await.unwrap(),
        LoadedGroup::default()
    );

    // Client strings may hold anything a Rust string holds, NUL included.
    let metadata = [
        "",
        "plain",
        "nul \0 inside",
        "ünïcödé ✓ \"quoted\" \\ back",
        "x",
    ];
    let snapshot = json!({
        "type": "classic",
        "snapshot": {
            "generation": 7,
            "members": [{"id": "m-\u{0}-1", "client": "rdkafka", "meta": [0, 1, 255]}],
            "protocol": null,
            "big": 9_007_199_254_740_993_i64,
        }
    });
    let mut records = vec![set_snapshot("g", snapshot.clone())];
    let mut expected = BTreeMap::new();
    for (i, m) in metadata.iter().enumerate() {
        for topic in ["orders", "payments.v2"] {
            let offset = CommittedOffset {
                offset: i64::MAX - i as i64,
                leader_epoch: i as i32 - 1,
                metadata: if i == 4 { None } else { Some((*m).to_owned()) },
                commit_timestamp_ms: -1,
            };
            records.push(GroupRecord::Offset {
                group: "g".into(),
                topic: topic.into(),
                partition: i as i32,
                offset: Some(offset.clone()),
            });
            expected.insert((topic.to_owned(), i as i32), offset);
        }
    }
    groups::write(&db, "g", a, epoch, &records).await.unwrap();
    let loaded = groups::load(&db, "g").await.unwrap();
    assert_eq!(loaded.snapshot, Some(snapshot));
    assert_eq!(loaded.offsets, expected);
    assert_eq!(groups::offsets_of(&db, "g").await.unwrap(), expected);

    // Offsets alone make a group known; a snapshot alone too.
    let epoch_o = acquired(&db, "offsets-only", 1, a).await;
    groups::write(
        &db,
        "offsets-only",
        a,
        epoch_o,
        &[set_offset("offsets-only", "t", 0, 1)],
    )
    .await
    .unwrap();
    let epoch_s = acquired(&db, "snapshot-only", 1, a).await;
    groups::write(
        &db,
        "snapshot-only",
        a,
        epoch_s,
        &[set_snapshot("snapshot-only", json!({}))],
    )
    .await
    .unwrap();
    acquired(&db, "lease-only", 1, a).await;
    assert_eq!(
        groups::list_groups(&db).await.unwrap(),
        ["g", "offsets-only", "snapshot-only"]
    );
    assert!(groups::offsets_of(&db, "nobody").await.unwrap().is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deleting_a_group_deletes_its_offsets_too() {
    let pg = PostgresServer::start();
    let db = migrated(&pg).await;
    let a = broker(&db, 1, LEASE_MAX).await;
    let g = acquired(&db, "g", 1, a).await;
    let keep = acquired(&db, "keep", 1, a).await;
    let write = |group: &'static str, epoch, records: Vec<GroupRecord>| {
        let db = db.clone();
        async move { groups::write(&db, group, a, epoch, &records).await.unwrap() }
    };
    write(
        "g",
        g,
        vec![
            set_offset("g", "t", 0, 1),
            set_offset("g", "t", 1, 2),
            set_offset("g", "u", 0, 3),
            set_snapshot("g", json!({"v": 1})),
        ],
    )
    .await;
    write("keep", keep, vec![set_offset("keep", "t", 0, 9)]).await;

    // One offset deleted.
    write(
        "g",
        g,
        vec![GroupRecord::Offset {
            group: "g".into(),
            topic: "t".into(),
            partition: 1,
            offset: None,
        }],
    )
    .await;
    let loaded = groups::load(&db, "g").await.unwrap();
    assert_eq!(
        offsets_of(&loaded),
        [("t".to_string(), 0, 1), ("u".to_string(), 0, 3)]
    );

    // The group deleted: snapshot and every offset; the other group untouched.
    write(
        "g",
        g,
        vec![GroupRecord::Group {
            group: "g".into(),
            snapshot: None,
        }],
    )
    .await;
    assert_eq!(
        groups::load(&db, "g").await.unwrap(),
        LoadedGroup::default()
    );
    assert_eq!(groups::list_groups(&db).await.unwrap(), ["keep"]);
    assert_eq!(
        offsets_of(&groups::load(&db, "keep").await.unwrap()),
        [("t".to_string(), 0, 9)]
    );

    // In one write, records apply in order: what comes after a deletion stays.
    write(
        "g",
        g,
        vec![
            set_offset("g", "t", 0, 1),
            set_snapshot("g", json!({"v": 2})),
        ],
    )
    .await;
    write(
        "g",
        g,
        vec![
            set_offset("g", "t", 5, 5),
            GroupRecord::Group {
                group: "g".into(),
                snapshot: None,
            },
            set_offset("g", "t", 0, 10),
            set_offset("g", "v", 0, 11),
        ],
    )
    .await;
    let loaded = groups::load(&db, "g").await.unwrap();
    assert_eq!(loaded.snapshot, None);
    assert_eq!(
        offsets_of(&loaded),
        [("t".to_string(), 0, 10), ("v".to_string(), 0, 11)]
    );
}

/// What the file store's records mean, applied in order: the reference for the statement.
#[derive(Debug, Default, Clone, PartialEq)]
struct Model {
    groups: BTreeMap<String, LoadedGroup>,
}

impl Model {
    fn apply(&mut self, record: &GroupRecord) {
        match record {
            GroupRecord::Offset {
                group,
                topic,
                partition,
                offset,
            } => {
                let g = self.groups.entry(group.clone()).or_default();
                match offset {
                    Some(o) => {
                        g.offsets.insert((topic.clone(), *partition), o.clone());
                    }
                    None => {
                        g.offsets.remove(&(topic.clone(), *partition));
                    }
                }
            }
            GroupRecord::Group {
                group,
                snapshot: Some(s),
            } => self.groups.entry(group.clone()).or_default().snapshot = Some(s.clone()),
            GroupRecord::Group {
                group,
                snapshot: None,
            } => {
                self.groups.remove(group);
            }
        }
    }
}

/// A small deterministic generator (xorshift64*), so a failure replays.
struct Rng(u64);

impl Rng {
    fn below(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d) % n
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn random_writes_of_several_groups_match_the_records_meaning() {
    let pg = PostgresServer::start();
    let db = migrated(&pg).await;
    let a = broker(&db, 1, LEASE_MAX).await;
    let names = ["a", "b", "c"];
    let mut leases = Vec::new();
    for g in names {
        leases.push((g, acquired(&db, g, 1, a).await));
    }
    let mut rng = Rng(0x5eed_1234_abcd_0001);
    let mut model = Model::default();
    for step in 0..150 {
        let n = rng.below(8);
        let mut records = Vec::new();
        for _ in 0..n {
            let group = names[rng.below(3) as usize].to_owned();
            let record = match rng.below(10) {
                0 => GroupRecord::Group {
                    group,
                    snapshot: None,
                },
                1 | 2 => GroupRecord::Group {
                    group,
                    snapshot: Some(json!({"step": step, "r": rng.below(1000)})),
                },
                3 | 4 => GroupRecord::Offset {
                    group,
                    topic: format!("t{}", rng.below(2)),
                    partition: rng.below(3) as i32,
                    offset: None,
                },
                _ => GroupRecord::Offset {
                    group,
                    topic: format!("t{}", rng.below(2)),
                    partition: rng.below(3) as i32,
                    offset: Some(committed(rng.below(1_000_000) as i64, Some("m"))),
                },
            };
            model.apply(&record);
            records.push(record);
        }
        let outcome = groups::write_many(&db, a, &leases, &records).await.unwrap();
        assert_eq!(outcome, WriteOutcome::default(), "step {step}");
        for g in names {
            let loaded = groups::load(&db, g).await.unwrap();
            let expected = model.groups.get(g).cloned().unwrap_or_default();
            assert_eq!(
                loaded, expected,
                "step {step}, group {g}, records {records:?}"
            );
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_write_of_several_groups_is_fenced_per_group() {
    let pg = PostgresServer::start();
    let db = migrated(&pg).await;
    let a = broker(&db, 1, LEASE_MAX).await;
    let b = broker(&db, 2, LEASE_MAX).await;
    let kept = acquired(&db, "kept", 1, a).await;
    let lost = acquired(&db, "lost", 1, a).await;
    expire_lease(&db, "lost").await;
    acquired(&db, "lost", 2, b).await;

    let records = [
        set_offset("kept", "t", 0, 1),
        set_offset("lost", "t", 0, 1),
        GroupRecord::Group {
            group: "lost".into(),
            snapshot: None,
        },
        set_snapshot("kept", json!({"k": 1})),
    ];
    let outcome = groups::write_many(&db, a, &[("kept", kept), ("lost", lost)], &records)
        .await
        .unwrap();
    assert_eq!(outcome.not_coordinator, ["lost"]);
    let loaded = groups::load(&db, "kept").await.unwrap();
    assert_eq!(offsets_of(&loaded), [("t".to_string(), 0, 1)]);
    assert_eq!(loaded.snapshot, Some(json!({"k": 1})));
    assert_eq!(
        groups::load(&db, "lost").await.unwrap(),
        LoadedGroup::default()
    );

    // A record for a group the write holds no lease for: refused whole, before any I/O.
    let e = groups::write(
        &db,
        "kept",
        a,
        kept,
        &[
            set_offset("kept", "t", 0, 2),
            set_offset("other", "t", 0, 2),
        ],
    )
    .await
    .unwrap_err();
    assert!(
        matches!(&e, GroupsError::ForeignRecord { record_group, .. } if record_group == "other"),
        "{e}"
    );
    assert_eq!(
        offsets_of(&groups::load(&db, "kept").await.unwrap()),
        [("t".to_string(), 0, 1)]
    );
    assert_eq!(groups::list_groups(&db).await.unwrap(), ["kept"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn writes_work_again_after_postgresql_restarts() {
    let mut pg = PostgresServer::start();
    let db = migrated(&pg).await;
    let a = broker(&db, 1, LEASE_MAX).await;
    let epoch = acquired(&db, "g", 1, a).await;
    groups::write(&db, "g", a, epoch, &[set_offset("g", "t", 0, 1)])
        .await
        .unwrap();

    tokio::task::block_in_place(|| pg.restart());

    // The pool's connections died with the server; the next write gets a new one.
    groups::write(&db, "g", a, epoch, &[set_offset("g", "t", 1, 2)])
        .await
        .unwrap();
    assert_eq!(
        groups::renew_all(&db, 1, a, LEASE).await.unwrap(),
        [("g".to_string(), epoch)]
    );
    assert_eq!(
        offsets_of(&groups::load(&db, "g").await.unwrap()),
        [("t".to_string(), 0, 1), ("t".to_string(), 1, 2)]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn writes_racing_a_takeover_are_seen_by_the_new_coordinator_or_refused() {
    const ROUNDS: usize = 20;
    let pg = PostgresServer::start();
    let db = migrated(&pg).await;
    let a = broker(&db, 1, LEASE_MAX).await;
    let b = broker(&db, 2, LEASE_MAX).await;
    // Every offset write takes 30 ms between its lease check and its commit, which holds
    // the window a takeover could slip into wide open.
    pg.psql(
        "sluice",
        "CREATE FUNCTION sluice.slow_write() RETURNS trigger LANGUAGE plpgsql AS
             $$ BEGIN PERFORM pg_sleep(0.03); RETURN NEW; END $$;
         CREATE TRIGGER slow_write BEFORE INSERT OR UPDATE ON sluice.group_offsets
             FOR EACH ROW EXECUTE FUNCTION sluice.slow_write();",
    );
    let old = common::connect(&pg.url()).await;
    let new = common::connect(&pg.url()).await;
    for round in 0..ROUNDS {
        let group = format!("g{round}");
        let Acquired::Acquired { epoch } =
            groups::acquire(&db, &group, 1, a, LEASE_MIN).await.unwrap()
        else {
            panic!("{group} is free");
        };
        // The old coordinator commits offset after offset, as fast as it can, until it is
        // refused; the new one tries to take over until its lease runs out, then loads.
        let writer = {
            let (old, group) = (old.clone(), group.clone());
            tokio::spawn(async move {
                let mut acknowledged = None;
                for offset in 1.. {
                    let record = set_offset(&group, "t", 0, offset);
                    match groups::write(&old, &group, a, epoch, &[record]).await {
                        Ok(()) => acknowledged = Some(offset),
                        Err(GroupsError::NotCoordinator { .. }) => return acknowledged,
                        Err(e) => panic!("{group}: {e}"),
                    }
                }
                unreachable!()
            })
        };
        let taker = {
            let (new, group) = (new.clone(), group.clone());
            tokio::spawn(async move {
                loop {
                    match groups::acquire(&new, &group, 2, b, LEASE).await.unwrap() {
                        Acquired::Acquired { .. } => break,
                        Acquired::HeldBy { broker_id } => assert_eq!(broker_id, 1),
                    }
                }
                groups::load(&new, &group).await.unwrap()
            })
        };
        let acknowledged = writer.await.unwrap();
        let loaded = taker.await.unwrap();
        let seen = loaded.offsets.values().next().map(|o| o.offset);
        // Nothing acknowledged is missing from what the new coordinator read, and nothing
        // landed after it read.
        assert_eq!(seen, acknowledged, "{group}");
        assert_eq!(groups::load(&db, &group).await.unwrap(), loaded, "{group}");
    }
}
