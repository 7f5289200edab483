//! The broker registry against a real PostgreSQL: brokers see each other, leave at once when
//! they deregister and within lease + heartbeat when they stop renewing, lose their
//! registration for good when their row is taken, lapse while PostgreSQL is down and come back
//! under the same id; and the cluster's identity is created once and guards its bucket.

mod common;

use std::collections::BTreeSet;
use std::time::Duration;

use common::{PostgresServer, migrated};
use sluice_cluster::Db;
use sluice_cluster::registry::{
    self, BrokerInfo, Registry, RegistryError, RegistrySettings, RegistryStatus,
};
use tokio::time::Instant;

/// Short enough that expiry is seen in well under a second.
const HEARTBEAT: Duration = Duration::from_millis(100);
const LEASE: Duration = Duration::from_millis(500);

/// Slack for a loaded 2-core machine on top of each bound a test checks: thread wake-ups,
/// a round trip to PostgreSQL, other tests' servers starting.
const SLACK: Duration = Duration::from_millis(500);

/// How long a test waits for something that should happen quickly before failing.
const PATIENCE: Duration = Duration::from_secs(10);

/// For tests that measure the lease: [`HEARTBEAT`] and [`LEASE`].
fn settings() -> RegistrySettings {
    RegistrySettings::with_heartbeat_and_lease(HEARTBEAT, LEASE)
}

/// For tests that measure only heartbeats: the same heartbeat and a lease long enough that a
/// renewal slowed by a loaded machine does not lapse a broker the test needs live.
fn relaxed() -> RegistrySettings {
    RegistrySettings::with_heartbeat_and_lease(HEARTBEAT, Duration::from_secs(3))
}

fn info(port: u16) -> BrokerInfo {
    BrokerInfo {
        host: "127.0.0.1".into(),
        port,
        rack: Some(format!("rack-{}", port % 2)),
        process: format!("host test pid {}", std::process::id()),
    }
}

async fn register(db: &Db, port: u16) -> Registry {
    register_with(db, port, settings()).await
}

async fn register_with(db: &Db, port: u16, settings: RegistrySettings) -> Registry {
    Registry::register(db, info(port), settings)
        .await
        .expect("register")
}

async fn live_ids(db: &Db) -> Vec<i32> {
    registry::live_brokers(db)
        .await
        .expect("live brokers")
        .iter()
        .map(|b| b.broker_id)
        .collect()
}

fn view_ids(r: &Registry) -> BTreeSet<i32> {
    r.brokers().borrow().iter().map(|b| b.broker_id).collect()
}

/// Waits until `r`'s cached view is `want`; returns how long that took.
async fn until_view(r: &Registry, want: &[i32], within: Duration) -> Duration {
    let want: BTreeSet<i32> = want.iter().copied().collect();
    let started = Instant::now();
    let mut rx = r.brokers();
    let waited = tokio::time::timeout(
        within,
        rx.wait_for(|v| v.iter().map(|b| b.broker_id).collect::<BTreeSet<_>>() == want),
    )
    .await;
    match waited {
        Ok(Ok(_)) => started.elapsed(),
        _ => panic!(
            "broker {}'s view is {:?}, not {want:?}, after {within:?}",
            r.broker_id(),
            view_ids(r)
        ),
    }
}

/// Waits until `r`'s status matches; returns it.
async fn until_status(
    r: &Registry,
    within: Duration,
    what: &str,
    want: impl Fn(&RegistryStatus) -> bool,
) -> RegistryStatus {
    let mut rx = r.status();
    match tokio::time::timeout(within, rx.wait_for(|s| want(s))).await {
        Ok(Ok(s)) => s.clone(),
        _ => panic!(
            "broker {} is not {what} after {within:?}: {:?}",
            r.broker_id(),
            *r.status().borrow()
        ),
    }
}

fn is_live(s: &RegistryStatus) -> bool {
    s.is_live_at(Instant::now())
}

/// Whether the database holds `broker_id`'s row live for `instance` (what a commit checks).
async fn lease_held_by(db: &Db, broker_id: i32, instance: uuid::Uuid) -> bool {
    let client = db.client().await.unwrap();
    let rows = client
        .query(
            "SELECT 1 FROM brokers WHERE broker_id = $1 AND instance = $2 \
             AND stopped_at IS NULL AND expires_at > now()",
            &[&broker_id, &instance],
        )
        .await
        .unwrap();
    !rows.is_empty()
}

async fn lease_held(db: &Db, r: &Registry) -> bool {
    lease_held_by(db, r.broker_id(), r.instance()).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn brokers_see_each_other_and_a_deregistered_one_leaves_at_once() {
    let pg = PostgresServer::start();
    let db = migrated(&pg).await;
    let a = register_with(&db, 9001, relaxed()).await;
    let b = register_with(&db, 9002, relaxed()).await;
    let c = register_with(&db, 9003, relaxed()).await;
    let ids = [a.broker_id(), b.broker_id(), c.broker_id()];
    assert!(
        ids[0] < ids[1] && ids[1] < ids[2],
        "ids from the sequence: {ids:?}"
    );
    assert_ne!(a.instance(), b.instance());
    eprintln!("{a}");
    assert!(
        a.to_string().starts_with(&format!(
            "registered as broker {} at 127.0.0.1:9001",
            ids[0]
        )),
        "{a}"
    );

    assert_eq!(live_ids(&db).await, ids);
    let listed = registry::live_brokers(&db).await.unwrap();
    assert_eq!(listed[1].port, 9002);
    assert_eq!(listed[1].rack.as_deref(), Some("rack-0"));
    // The last one saw all three when it registered; the others within a heartbeat or two.
    assert_eq!(view_ids(&c), ids.iter().copied().collect());
    for r in [&a, &b, &c] {
        until_view(r, &ids, HEARTBEAT * 2 + SLACK).await;
        assert!(is_live(&r.status().borrow()), "{:?}", *r.status().borrow());
        assert!(lease_held(&db, r).await);
    }
    // The view is the same list on every broker, ordered by id, as Metadata needs it.
    assert_eq!(*a.brokers().borrow(), *c.brokers().borrow());

    let b_id = b.broker_id();
    let b_instance = b.instance();
    b.deregister().await.expect("deregister");
    assert_eq!(live_ids(&db).await, [ids[0], ids[2]], "gone at once");
    assert!(!lease_held_by(&db, b_id, b_instance).await);
    let took = until_view(&a, &[ids[0], ids[2]], HEARTBEAT + SLACK).await;
    eprintln!("a deregistered broker left another's view after {took:?}");
    until_view(&c, &[ids[0], ids[2]], HEARTBEAT + SLACK).await;

    // A new registration gets a new id, never a reused one.
    let d = register_with(&db, 9002, relaxed()).await;
    assert!(d.broker_id() > ids[2]);
    for r in [a, c, d] {
        r.deregister().await.unwrap();
    }
    assert_eq!(live_ids(&db).await, Vec::<i32>::new());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_broker_that_stops_renewing_leaves_the_others_views_within_lease_plus_heartbeat() {
    let pg = PostgresServer::start();
    let db = migrated(&pg).await;
    let a = register(&db, 9001).await;
    let b = register(&db, 9002).await;
    let c = register(&db, 9003).await;
    let d = register(&db, 9004).await;
    let all = [a.broker_id(), b.broker_id(), c.broker_id(), d.broker_id()];
    until_view(&a, &all, HEARTBEAT * 2 + SLACK).await;
    until_view(&b, &all, HEARTBEAT * 2 + SLACK).await;

    // `c` stops its heartbeat as a crash would; `d` is simply dropped.
    let (c_id, d_id) = (c.broker_id(), d.broker_id());
    let stopped = Instant::now();
    c.abandon().await;
    drop(d);
    // Their rows stay until their leases end: nobody deregistered them.
    let still = live_ids(&db).await;
    if stopped.elapsed() < LEASE / 2 {
        assert!(still.contains(&c_id) && still.contains(&d_id), "{still:?}");
    }

    let rest = [a.broker_id(), b.broker_id()];
    let bound = LEASE + HEARTBEAT + SLACK;
    until_view(&a, &rest, bound).await;
    until_view(&b, &rest, bound).await;
    let took = stopped.elapsed();
    eprintln!(
        "brokers that stopped renewing left the others' views after {took:?} \
         (lease {LEASE:?} + heartbeat {HEARTBEAT:?})"
    );
    assert!(took <= bound, "took {took:?}");
    // Not before the lease could have ended: the last renewal was at most a heartbeat ago.
    assert!(
        took + HEARTBEAT + Duration::from_millis(50) >= LEASE,
        "left after only {took:?}"
    );
    assert_eq!(live_ids(&db).await, rest);
    assert!(is_live(&a.status().borrow()));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_row_deleted_taken_over_or_stopped_fences_its_owner_for_good() {
    let pg = PostgresServer::start();
    let db = migrated(&pg).await;
    let gone = register_with(&db, 9001, relaxed()).await;
    let taken = register_with(&db, 9002, relaxed()).await;
    let stopped = register_with(&db, 9003, relaxed()).await;
    let healthy = register_with(&db, 9004, relaxed()).await;

    pg.psql(
        "sluice",
        &format!(
            "DELETE FROM sluice.brokers WHERE broker_id = {}",
            gone.broker_id()
        ),
    );
    pg.psql(
        "sluice",
        &format!(
            "UPDATE sluice.brokers SET instance = gen_random_uuid() WHERE broker_id = {}",
            taken.broker_id()
        ),
    );
    pg.psql(
        "sluice",
        &format!(
            "UPDATE sluice.brokers SET stopped_at = now() WHERE broker_id = {}",
            stopped.broker_id()
        ),
    );
    let fenced = |s: &RegistryStatus| matches!(s, RegistryStatus::Fenced { .. });
    for (r, why) in [
        (&gone, "is gone"),
        (&taken, "belongs to another process"),
        (&stopped, "marked stopped"),
    ] {
        let status = until_status(r, HEARTBEAT * 2 + SLACK, "fenced", fenced).await;
        let RegistryStatus::Fenced { reason } = status else {
            unreachable!()
        };
        eprintln!("fenced: {reason}");
        assert!(reason.contains(why), "{reason}");
        assert!(!lease_held(&db, r).await);
    }
    // For good: the heartbeat has ended, nothing turns it live again.
    tokio::time::sleep(HEARTBEAT * 5).await;
    for r in [&gone, &taken, &stopped] {
        assert!(fenced(&r.status().borrow()), "{:?}", *r.status().borrow());
    }
    assert!(is_live(&healthy.status().borrow()));
    // The taken-over row is listed until its new owner's lease (never renewed here) ends.
    until_view(
        &healthy,
        &[healthy.broker_id()],
        relaxed().lease + HEARTBEAT + SLACK,
    )
    .await;
    // Deregistering a fenced broker leaves the other process's row alone.
    let taken_id = taken.broker_id();
    taken.deregister().await.unwrap();
    let still = pg.psql(
        "sluice",
        &format!("SELECT stopped_at IS NULL FROM sluice.brokers WHERE broker_id = {taken_id}"),
    );
    assert_eq!(still.trim(), "t");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_down_longer_than_the_lease_lapses_then_recovers_with_the_same_id() {
    let mut pg = PostgresServer::start();
    let db = migrated(&pg).await;
    let r = register(&db, 9001).await;
    let id = r.broker_id();
    until_status(&r, SLACK, "live", is_live).await;

    let down = Instant::now();
    tokio::task::block_in_place(|| pg.stop());
    let lapsed = until_status(&r, LEASE + SLACK + HEARTBEAT, "lapsed", |s| {
        matches!(s, RegistryStatus::Lapsed { .. })
    })
    .await;
    let took = down.elapsed();
    eprintln!("lapsed {took:?} after PostgreSQL went down: {lapsed:?}");
    let RegistryStatus::Lapsed { error } = &lapsed else {
        unreachable!()
    };
    assert!(!error.contains(pg.password()), "{error}");
    assert!(!error.contains('\n'), "{error:?}");
    // Stays lapsed (and retrying) while the database is away.
    tokio::time::sleep(LEASE).await;
    assert!(
        matches!(*r.status().borrow(), RegistryStatus::Lapsed { .. }),
        "{:?}",
        *r.status().borrow()
    );
    assert!(!is_live(&r.status().borrow()));

    let up = Instant::now();
    tokio::task::block_in_place(|| pg.start_again());
    until_status(&r, PATIENCE, "live again", is_live).await;
    eprintln!(
        "live again {:?} after PostgreSQL accepted connections",
        up.elapsed()
    );
    assert_eq!(r.broker_id(), id);
    // `db`'s pooled connection died with the server; a new one is made on demand.
    let db = common::connect(&pg.url()).await;
    assert_eq!(live_ids(&db).await, [id]);
    assert!(lease_held(&db, &r).await);
    until_view(&r, &[id], HEARTBEAT * 2 + SLACK).await;
    r.deregister().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_cluster_is_created_once_and_refuses_another_bucket() {
    let pg = PostgresServer::start();
    let db = migrated(&pg).await;

    // Brokers starting together agree on one cluster; exactly one created it.
    let mut tasks = Vec::new();
    for _ in 0..6 {
        let db = db.clone();
        tasks.push(tokio::spawn(async move {
            registry::bind_cluster(&db, "s3://events/prod").await
        }));
    }
    let mut ids = BTreeSet::new();
    let mut created = 0;
    for t in tasks {
        let info = t.await.unwrap().expect("bind");
        ids.insert(info.cluster_id.clone());
        created += usize::from(info.created);
        assert_eq!(info.storage_url, "s3://events/prod");
    }
    assert_eq!(ids.len(), 1, "{ids:?}");
    assert_eq!(created, 1);
    let id = ids.into_iter().next().unwrap();
    assert_eq!(id.len(), 22, "{id}");

    let again = registry::bind_cluster(&db, "s3://events/prod/")
        .await
        .unwrap();
    assert_eq!(again.cluster_id, id);
    assert!(!again.created);

    let e = registry::bind_cluster(&db, "s3://key:bucket-secret@other/prefix")
        .await
        .unwrap_err();
    let line = e.to_string();
    eprintln!("{line}");
    assert!(matches!(e, RegistryError::OtherStorage { .. }), "{e:?}");
    assert!(
        line.contains("s3://events/prod")
            && line.contains("s3://key:***@other/prefix")
            && line.contains(&id),
        "{line}"
    );
    assert!(
        !line.contains("bucket-secret") && !line.contains(pg.password()),
        "{line}"
    );
    assert!(!line.contains('\n'), "{line:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_heartbeat_deletes_rows_dead_for_more_than_an_hour() {
    let pg = PostgresServer::start();
    let db = migrated(&pg).await;
    pg.psql(
        "sluice",
        "INSERT INTO sluice.brokers (instance, host, port, process, expires_at) VALUES \
           (gen_random_uuid(), 'old', 9000, 'long gone', now() - interval '61 minutes'), \
           (gen_random_uuid(), 'recent', 9000, 'died lately', now() - interval '59 minutes')",
    );
    let r = register_with(&db, 9001, relaxed()).await;
    let deadline = Instant::now() + PATIENCE;
    loop {
        let hosts = pg.psql(
            "sluice",
            "SELECT host FROM sluice.brokers ORDER BY broker_id",
        );
        if hosts.split_whitespace().collect::<Vec<_>>() == ["recent", "127.0.0.1"] {
            break;
        }
        assert!(Instant::now() < deadline, "rows left: {hosts:?}");
        tokio::time::sleep(HEARTBEAT).await;
    }
    // Neither dead row was ever listed.
    assert_eq!(live_ids(&db).await, [r.broker_id()]);
    r.deregister().await.unwrap();
}

#[tokio::test]
async fn bad_settings_or_addresses_are_refused_before_registering() {
    let pg = PostgresServer::start();
    let db = migrated(&pg).await;
    let e = Registry::register(
        &db,
        info(9001),
        RegistrySettings::with_heartbeat_and_lease(LEASE, LEASE),
    )
    .await
    .unwrap_err();
    assert!(e.to_string().contains("less than half the lease"), "{e}");
    let e = Registry::register(&db, info(0), settings())
        .await
        .unwrap_err();
    assert!(e.to_string().contains("port 0"), "{e}");
    assert_eq!(live_ids(&db).await, Vec::<i32>::new());
}
