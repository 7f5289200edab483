//! The topic catalog against a real PostgreSQL: topics created, changed and deleted through
//! one broker are seen by another, races between brokers have one winner, the cache outlives
//! an outage of the database, and producer id blocks never overlap.

mod common;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::{PostgresServer, connect, migrated};
use futures_util::StreamExt;
use sluice_cluster::Db;
use sluice_cluster::catalog::{self, CATALOG_CHANNEL, CatalogCache, CatalogError, Topic};
use tokio::sync::{Barrier, mpsc};
use uuid::Uuid;

/// How often the caches of these tests poll: short, so the tests are quick.
const TEST_REFRESH: Duration = Duration::from_millis(200);

/// What a cache may take beyond its refresh interval to see a change, on a busy 2-core
/// machine.
const SEEN_MARGIN: Duration = Duration::from_secs(3);

fn configs(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
    pairs
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect()
}

/// One number printed by `psql`.
fn psql_number(pg: &PostgresServer, sql: &str) -> i64 {
    let out = pg.psql("sluice", sql);
    out.trim()
        .parse()
        .unwrap_or_else(|_| panic!("{sql}: not a number: {out:?}"))
}

fn partition_rows(pg: &PostgresServer, topic_id: Uuid) -> i64 {
    psql_number(
        pg,
        &format!("SELECT count(*) FROM sluice.partitions WHERE topic_id = '{topic_id}'"),
    )
}

/// Waits (bounded by `within`) until `done` holds; returns how long it took.
async fn wait_for(within: Duration, what: &str, mut done: impl FnMut() -> bool) -> Duration {
    let start = Instant::now();
    while !done() {
        assert!(start.elapsed() < within, "{what}: not within {within:?}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    start.elapsed()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn create_list_get_delete_and_recreate() {
    let pg = PostgresServer::start();
    let db = migrated(&pg).await;
    assert!(catalog::list_topics(&db).await.unwrap().is_empty());

    let id = Uuid::new_v4();
    let created =
        catalog::create_topic(&db, "orders", id, 3, configs(&[("retention.ms", "60000")]))
            .await
            .unwrap();
    let expected = Topic {
        topic_id: id,
        name: "orders".into(),
        partitions: 3,
        configs: configs(&[("retention.ms", "60000")]),
    };
    assert_eq!(created, expected);
    catalog::create_topic(&db, "audit", Uuid::new_v4(), 1, BTreeMap::new())
        .await
        .unwrap();
    let names: Vec<String> = catalog::list_topics(&db)
        .await
        .unwrap()
        .into_iter()
        .map(|t| t.name)
        .collect();
    assert_eq!(names, ["audit", "orders"]);
    assert_eq!(
        catalog::topic(&db, "orders").await.unwrap(),
        Some(expected.clone())
    );
    assert_eq!(
        catalog::topic_by_id(&db, id).await.unwrap(),
        Some(expected.clone())
    );
    assert_eq!(catalog::topic(&db, "nope").await.unwrap(), None);
    assert_eq!(partition_rows(&pg, id), 3);
    assert_eq!(
        pg.psql(
            "sluice",
            &format!(
                "SELECT partition, next_offset, log_start FROM sluice.partitions \
                 WHERE topic_id = '{id}' ORDER BY partition"
            )
        )
        .trim(),
        "0|0|0\n1|0|0\n2|0|0"
    );

    // Same name again: refused, nothing changed.
    let e = catalog::create_topic(&db, "orders", Uuid::new_v4(), 5, BTreeMap::new())
        .await
        .unwrap_err();
    assert!(
        matches!(&e, CatalogError::TopicExists(n) if n == "orders"),
        "{e}"
    );
    assert_eq!(e.to_string(), "topic 'orders' already exists");
    assert!(!e.is_retriable());
    // A taken id under another name: refused as such.
    let e = catalog::create_topic(&db, "other", id, 1, BTreeMap::new())
        .await
        .unwrap_err();
    assert!(
        matches!(e, CatalogError::TopicIdTaken(taken) if taken == id),
        "{e}"
    );
    assert_eq!(catalog::list_topics(&db).await.unwrap().len(), 2);

    // Producer state of the topic (as the commit protocol writes it) goes with it.
    pg.psql(
        "sluice",
        &format!(
            "INSERT INTO sluice.producers (producer_id, topic_id, partition, epoch, recent) \
             VALUES (7, '{id}', 0, 0, '{{}}'), (7, '{id}', 2, 0, '{{}}')"
        ),
    );
    let deleted = catalog::delete_topic(&db, "orders").await.unwrap();
    assert_eq!(deleted, expected);
    assert_eq!(catalog::topic(&db, "orders").await.unwrap(), None);
    assert_eq!(catalog::topic_by_id(&db, id).await.unwrap(), None);
    assert_eq!(partition_rows(&pg, id), 0);
    assert_eq!(
        psql_number(
            &pg,
            &format!("SELECT count(*) FROM sluice.producers WHERE topic_id = '{id}'")
        ),
        0
    );
    let e = catalog::delete_topic(&db, "orders").await.unwrap_err();
    assert!(
        matches!(&e, CatalogError::UnknownTopic(n) if n == "orders"),
        "{e}"
    );

    // The name is free at once; the new topic is a new one.
    let new_id = Uuid::new_v4();
    let again = catalog::create_topic(&db, "orders", new_id, 2, BTreeMap::new())
        .await
        .unwrap();
    assert_eq!(again.topic_id, new_id);
    assert_ne!(new_id, id);
    assert_eq!(
        catalog::topic(&db, "orders")
            .await
            .unwrap()
            .unwrap()
            .topic_id,
        new_id
    );
    assert_eq!(partition_rows(&pg, new_id), 2);
    assert_eq!(
        psql_number(
            &pg,
            "SELECT count(*) FROM sluice.topics WHERE name = 'orders' AND deleted_at IS NOT NULL"
        ),
        1,
        "the deleted topic's row stays, marked"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_brokers_creating_one_name_at_once_have_one_winner() {
    let pg = PostgresServer::start();
    let brokers = [migrated(&pg).await, connect(&pg.url()).await];
    for round in 0..8 {
        let name = format!("race-{round}");
        let barrier = Arc::new(Barrier::new(brokers.len()));
        let tasks: Vec<_> = brokers
            .iter()
            .enumerate()
            .map(|(i, db)| {
                let (db, name, barrier) = (db.clone(), name.clone(), Arc::clone(&barrier));
                tokio::spawn(async move {
                    barrier.wait().await;
                    let partitions = i as i32 + 1;
                    catalog::create_topic(&db, &name, Uuid::new_v4(), partitions, BTreeMap::new())
                        .await
                })
            })
            .collect();
        let mut winners = Vec::new();
        for task in tasks {
            match task.await.unwrap() {
                Ok(topic) => winners.push(topic),
                Err(CatalogError::TopicExists(n)) => assert_eq!(n, name),
                Err(e) => panic!("round {round}: unexpected error {e}"),
            }
        }
        assert_eq!(winners.len(), 1, "round {round}: exactly one create wins");
        let winner = &winners[0];
        assert_eq!(
            catalog::topic(&brokers[0], &name).await.unwrap().as_ref(),
            Some(winner)
        );
        assert_eq!(
            psql_number(
                &pg,
                &format!("SELECT count(*) FROM sluice.topics WHERE name = '{name}'")
            ),
            1,
            "round {round}: the loser left no row"
        );
        assert_eq!(
            partition_rows(&pg, winner.topic_id),
            i64::from(winner.partitions)
        );
    }
    assert_eq!(
        psql_number(&pg, "SELECT count(*) FROM sluice.partitions"),
        psql_number(
            &pg,
            "SELECT coalesce(sum(partitions), 0) FROM sluice.topics"
        ),
        "no partitions rows of a losing create"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn partitions_only_grow_and_keep_their_offsets() {
    let pg = PostgresServer::start();
    let db = migrated(&pg).await;
    let t = catalog::create_topic(&db, "grow", Uuid::new_v4(), 2, BTreeMap::new())
        .await
        .unwrap();
    // As if records had been committed to partition 1.
    pg.psql(
        "sluice",
        &format!(
            "UPDATE sluice.partitions SET next_offset = 42, log_start = 5 \
             WHERE topic_id = '{}' AND partition = 1",
            t.topic_id
        ),
    );
    let grown = catalog::create_partitions(&db, "grow", 5).await.unwrap();
    assert_eq!(grown.partitions, 5);
    assert_eq!(grown.topic_id, t.topic_id);
    assert_eq!(
        catalog::topic(&db, "grow")
            .await
            .unwrap()
            .unwrap()
            .partitions,
        5
    );
    assert_eq!(
        pg.psql(
            "sluice",
            &format!(
                "SELECT partition, next_offset, log_start FROM sluice.partitions \
                 WHERE topic_id = '{}' ORDER BY partition",
                t.topic_id
            )
        )
        .trim(),
        "0|0|0\n1|42|5\n2|0|0\n3|0|0\n4|0|0"
    );

    let version = catalog::catalog_version(&db).await.unwrap();
    for count in [5, 3, 0] {
        let e = catalog::create_partitions(&db, "grow", count)
            .await
            .unwrap_err();
        assert!(matches!(e, CatalogError::InvalidPartitions(_)), "{e}");
        let line = e.to_string();
        assert!(
            line.contains("has 5 partitions") && line.contains(&format!("new count {count}")),
            "{line}"
        );
    }
    assert_eq!(partition_rows(&pg, t.topic_id), 5);
    assert_eq!(catalog::catalog_version(&db).await.unwrap(), version);
    let e = catalog::create_partitions(&db, "missing", 3)
        .await
        .unwrap_err();
    assert!(matches!(e, CatalogError::UnknownTopic(_)), "{e}");
    let e = catalog::create_topic(&db, "empty", Uuid::new_v4(), 0, BTreeMap::new())
        .await
        .unwrap_err();
    assert!(matches!(e, CatalogError::InvalidPartitions(_)), "{e}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn alter_edits_configs_and_replace_swaps_them() {
    let pg = PostgresServer::start();
    let db = migrated(&pg).await;
    catalog::create_topic(
        &db,
        "conf",
        Uuid::new_v4(),
        1,
        configs(&[("retention.ms", "1000"), ("cleanup.policy", "delete")]),
    )
    .await
    .unwrap();

    let altered = catalog::alter_configs(
        &db,
        "conf",
        &configs(&[("retention.ms", "2000"), ("segment.bytes", "1048576")]),
        &["cleanup.policy".to_owned(), "never.set".to_owned()],
    )
    .await
    .unwrap();
    let want = configs(&[("retention.ms", "2000"), ("segment.bytes", "1048576")]);
    assert_eq!(altered.configs, want);
    assert_eq!(
        catalog::topic(&db, "conf").await.unwrap().unwrap().configs,
        want
    );

    let replaced = catalog::replace_configs(&db, "conf", configs(&[("max.message.bytes", "100")]))
        .await
        .unwrap();
    assert_eq!(replaced.configs, configs(&[("max.message.bytes", "100")]));
    assert_eq!(
        catalog::topic(&db, "conf").await.unwrap().unwrap().configs,
        configs(&[("max.message.bytes", "100")])
    );
    let emptied = catalog::replace_configs(&db, "conf", BTreeMap::new())
        .await
        .unwrap();
    assert!(emptied.configs.is_empty());
    assert!(
        catalog::topic(&db, "conf")
            .await
            .unwrap()
            .unwrap()
            .configs
            .is_empty()
    );

    let e = catalog::alter_configs(&db, "missing", &BTreeMap::new(), &[])
        .await
        .unwrap_err();
    assert!(matches!(e, CatalogError::UnknownTopic(_)), "{e}");
    let e = catalog::replace_configs(&db, "missing", BTreeMap::new())
        .await
        .unwrap_err();
    assert!(matches!(e, CatalogError::UnknownTopic(_)), "{e}");
}

/// A separate connection that LISTENs on the catalog channel and forwards each payload.
async fn listen(url: &str) -> (tokio_postgres::Client, mpsc::UnboundedReceiver<String>) {
    let (client, mut connection) = tokio_postgres::connect(url, tokio_postgres::NoTls)
        .await
        .expect("connect the listener");
    let (tx, rx) = mpsc::unbounded_channel();
    tokio::spawn(async move {
        let mut messages = futures_util::stream::poll_fn(move |cx| connection.poll_message(cx));
        while let Some(Ok(message)) = messages.next().await {
            if let tokio_postgres::AsyncMessage::Notification(n) = message
                && n.channel() == CATALOG_CHANNEL
                && tx.send(n.payload().to_owned()).is_err()
            {
                return;
            }
        }
    });
    client
        .batch_execute(&format!("LISTEN {CATALOG_CHANNEL}"))
        .await
        .expect("LISTEN");
    (client, rx)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_change_moves_the_version_and_notifies_it() {
    let pg = PostgresServer::start();
    let db = migrated(&pg).await;
    let (_listener, mut notes) = listen(&pg.url()).await;
    assert_eq!(catalog::catalog_version(&db).await.unwrap(), 0);

    let mut last = 0;
    let mut check = async |what: &str, db: &Db| {
        let version = catalog::catalog_version(db).await.unwrap();
        assert!(version > last, "{what}: version {version} after {last}");
        let note = tokio::time::timeout(Duration::from_secs(10), notes.recv())
            .await
            .unwrap_or_else(|_| panic!("{what}: no notification"))
            .expect("listener alive");
        assert_eq!(
            note,
            version.to_string(),
            "{what}: the notification carries the version"
        );
        last = version;
    };

    catalog::create_topic(&db, "v", Uuid::new_v4(), 1, BTreeMap::new())
        .await
        .unwrap();
    check("create", &db).await;
    catalog::create_partitions(&db, "v", 2).await.unwrap();
    check("create_partitions", &db).await;
    catalog::alter_configs(&db, "v", &configs(&[("retention.ms", "5")]), &[])
        .await
        .unwrap();
    check("alter_configs", &db).await;
    catalog::replace_configs(&db, "v", BTreeMap::new())
        .await
        .unwrap();
    check("replace_configs", &db).await;
    catalog::delete_topic(&db, "v").await.unwrap();
    check("delete", &db).await;

    // Refused changes change nothing, the version included.
    let before = catalog::catalog_version(&db).await.unwrap();
    assert!(catalog::delete_topic(&db, "v").await.is_err());
    catalog::create_topic(&db, "w", Uuid::new_v4(), 1, BTreeMap::new())
        .await
        .unwrap();
    let after_create = catalog::catalog_version(&db).await.unwrap();
    assert!(after_create > before);
    assert!(
        catalog::create_topic(&db, "w", Uuid::new_v4(), 1, BTreeMap::new())
            .await
            .is_err()
    );
    assert!(catalog::create_partitions(&db, "w", 1).await.is_err());
    assert!(
        catalog::alter_configs(&db, "gone", &BTreeMap::new(), &[])
            .await
            .is_err()
    );
    assert_eq!(catalog::catalog_version(&db).await.unwrap(), after_create);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_version_is_seen_only_with_its_change() {
    let pg = PostgresServer::start();
    let db = migrated(&pg).await;
    let before = catalog::catalog_version(&db).await.unwrap();
    // Another broker's change, stopped before its commit (the steps of a catalog change).
    let (other, connection) = tokio_postgres::connect(&pg.url(), tokio_postgres::NoTls)
        .await
        .unwrap();
    tokio::spawn(connection);
    other
        .batch_execute(&format!(
            "SET search_path = sluice;
             BEGIN;
             SELECT version FROM catalog_version FOR UPDATE;
             INSERT INTO topics (topic_id, name, partitions) VALUES ('{}', 'slow', 1);
             UPDATE catalog_version SET version = nextval('catalog_versions');",
            Uuid::new_v4()
        ))
        .await
        .unwrap();
    // Its version is not visible before its topic is: a cache cannot record it too early.
    assert_eq!(catalog::catalog_version(&db).await.unwrap(), before);
    let snapshot = catalog::load_catalog(&db).await.unwrap();
    assert_eq!(snapshot.version, before);
    assert!(snapshot.topic("slow").is_none());
    // A change through this broker waits for it, then comes after it.
    let waiting = tokio::spawn({
        let db = db.clone();
        async move { catalog::create_topic(&db, "next", Uuid::new_v4(), 1, BTreeMap::new()).await }
    });
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(!waiting.is_finished(), "catalog changes run one at a time");
    other.batch_execute("COMMIT").await.unwrap();
    waiting.await.unwrap().unwrap();
    let snapshot = catalog::load_catalog(&db).await.unwrap();
    assert_eq!(snapshot.version, before + 2);
    assert!(snapshot.topic("slow").is_some() && snapshot.topic("next").is_some());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn another_broker_sees_changes_within_its_refresh() {
    let pg = PostgresServer::start();
    let db_a = migrated(&pg).await;
    let db_b = connect(&pg.url()).await;
    let cache_a = CatalogCache::start(db_a.clone(), TEST_REFRESH)
        .await
        .unwrap();
    let cache_b = CatalogCache::start(db_b.clone(), TEST_REFRESH)
        .await
        .unwrap();
    assert_eq!(cache_a.version(), 0);
    assert!(cache_b.snapshot().topics.is_empty());

    let id = Uuid::new_v4();
    catalog::create_topic(&db_a, "shared", id, 4, configs(&[("retention.ms", "9")]))
        .await
        .unwrap();
    // The broker that made the change sees it at once.
    cache_a.refresh_now().await.unwrap();
    let mine = cache_a.topic("shared").expect("own create seen at once");
    assert_eq!(mine.partitions, 4);
    assert_eq!(cache_a.topic_by_id(id), Some(mine.clone()));
    // The other within its refresh (and a margin for a busy machine).
    let took = wait_for(
        TEST_REFRESH + SEEN_MARGIN,
        "broker b sees the create",
        || cache_b.topic("shared").is_some(),
    )
    .await;
    eprintln!("seen by the other broker after {took:?}");
    assert_eq!(cache_b.topic("shared"), Some(mine));
    assert_eq!(cache_b.version(), cache_a.version());

    let mut changes = cache_b.subscribe();
    changes.mark_unchanged();
    catalog::alter_configs(&db_b, "shared", &configs(&[("retention.ms", "10")]), &[])
        .await
        .unwrap();
    wait_for(
        TEST_REFRESH + SEEN_MARGIN,
        "broker a sees the config change",
        || {
            cache_a
                .topic("shared")
                .is_some_and(|t| t.configs.get("retention.ms").map(String::as_str) == Some("10"))
        },
    )
    .await;
    tokio::time::timeout(TEST_REFRESH + SEEN_MARGIN, changes.changed())
        .await
        .expect("a subscriber is told of the new copy")
        .unwrap();

    catalog::delete_topic(&db_b, "shared").await.unwrap();
    wait_for(
        TEST_REFRESH + SEEN_MARGIN,
        "broker a sees the delete",
        || cache_a.topic("shared").is_none() && cache_a.topic_by_id(id).is_none(),
    )
    .await;
    let status = cache_a.status();
    assert!(status.reachable);
    assert_eq!(status.outages, 0);
    assert!(status.age < TEST_REFRESH + SEEN_MARGIN, "{status:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_cache_serves_its_last_copy_while_postgres_is_down() {
    let mut pg = PostgresServer::start();
    let db = migrated(&pg).await;
    let cache = CatalogCache::start(db.clone(), TEST_REFRESH).await.unwrap();
    let t = catalog::create_topic(&db, "kept", Uuid::new_v4(), 2, BTreeMap::new())
        .await
        .unwrap();
    wait_for(
        TEST_REFRESH + SEEN_MARGIN,
        "the cache sees the topic",
        || cache.topic("kept").is_some(),
    )
    .await;
    let version = cache.version();

    tokio::task::block_in_place(|| pg.stop());
    wait_for(
        TEST_REFRESH + SEEN_MARGIN,
        "the cache notices the outage",
        || !cache.status().reachable,
    )
    .await;
    // Many failing polls later: still the same copy, one outage, an age that grows.
    tokio::time::sleep(TEST_REFRESH * 8).await;
    let down = cache.status();
    assert!(!down.reachable);
    assert_eq!(down.outages, 1, "one outage however many polls fail");
    assert_eq!(down.version, version);
    assert!(down.age >= TEST_REFRESH * 8, "{down:?}");
    assert_eq!(cache.topic("kept"), Some(t.clone()));
    assert_eq!(cache.topic_by_id(t.topic_id), Some(t));
    assert!(
        cache.refresh_now().await.is_err(),
        "a reload fails while down"
    );
    assert_eq!(cache.version(), version, "a failed reload keeps the copy");

    tokio::task::block_in_place(|| pg.start_again());
    // A change made after the outage, through the same pool (its connections are new).
    catalog::create_topic(&db, "after", Uuid::new_v4(), 1, BTreeMap::new())
        .await
        .unwrap();
    wait_for(TEST_REFRESH + SEEN_MARGIN, "the cache catches up", || {
        cache.topic("after").is_some() && cache.status().reachable
    })
    .await;
    let up = cache.status();
    assert!(up.version > version);
    assert_eq!(up.outages, 1);
    assert!(up.age < TEST_REFRESH + SEEN_MARGIN, "{up:?}");
    assert!(cache.topic("kept").is_some());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_answered_change_survives_a_postgres_crash() {
    let mut pg = PostgresServer::start();
    let db = migrated(&pg).await;
    pg.psql("sluice", "CHECKPOINT");
    let t = catalog::create_topic(&db, "durable", Uuid::new_v4(), 3, configs(&[("a", "b")]))
        .await
        .unwrap();
    let version = catalog::catalog_version(&db).await.unwrap();
    // Crash at once: the test server commits asynchronously unless a change asks otherwise.
    tokio::task::block_in_place(|| {
        pg.kill();
        pg.start_again();
    });
    let db = connect(&pg.url()).await;
    assert_eq!(
        catalog::topic(&db, "durable").await.unwrap(),
        Some(t.clone())
    );
    assert_eq!(partition_rows(&pg, t.topic_id), 3);
    assert_eq!(catalog::catalog_version(&db).await.unwrap(), version);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn producer_id_blocks_never_overlap_across_brokers_and_crashes() {
    const BLOCKS_PER_BROKER: usize = 25;
    let mut pg = PostgresServer::start();
    let brokers = [migrated(&pg).await, connect(&pg.url()).await];
    // The schema on disk for good, so the crash below tests the blocks' own durability (the
    // test server commits asynchronously by default, as a server configured so would).
    pg.psql("sluice", "CHECKPOINT");
    let mut tasks = Vec::new();
    for db in &brokers {
        let db = db.clone();
        tasks.push(tokio::spawn(async move {
            let mut blocks = Vec::new();
            for _ in 0..BLOCKS_PER_BROKER {
                blocks.push(catalog::allocate_producer_id_block(&db).await.unwrap());
            }
            blocks
        }));
    }
    let mut blocks = Vec::new();
    for task in tasks {
        blocks.extend(task.await.unwrap());
    }
    assert_eq!(blocks.len(), 2 * BLOCKS_PER_BROKER);
    blocks.sort();
    assert!(
        blocks
            .iter()
            .all(|&(first, count)| first >= 0 && count == 1000)
    );
    for pair in blocks.windows(2) {
        let ((a, a_count), (b, _)) = (pair[0], pair[1]);
        assert!(a + a_count <= b, "blocks {pair:?} overlap");
    }
    let highest = blocks.last().unwrap().0;

    // PostgreSQL crashes (no shutdown checkpoint) and comes back: no block is handed out
    // again.
    tokio::task::block_in_place(|| {
        pg.kill();
        pg.start_again();
    });
    for db in [connect(&pg.url()).await, connect(&pg.url()).await] {
        let (first, count) = catalog::allocate_producer_id_block(&db).await.unwrap();
        assert_eq!(count, 1000);
        assert!(
            first > highest,
            "block {first} handed out again after a crash (had {highest})"
        );
    }
}
