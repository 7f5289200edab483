//! Triggers running on a real broker (local disk, in a temporary directory) with a manual
//! clock: firings into a topic, restarts, recovery of state and of the outbox, bad input.

use std::sync::Arc;
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use sluice_broker::{Broker, BrokerConfig, TopicConfig};
use sluice_log::ManualClock;
use sluice_protocol::records::{Batches, ConsumedRecord, ProducerRecord, encode_batch};
use sluice_triggers::codec::{Fired, LogRecord, Position};
use sluice_triggers::run::Tuning;
use sluice_triggers::{CreateRequest, Manager, TriggerError};

const T0: i64 = 1_800_000_000_000;
const DAY_MS: i64 = 86_400_000;

struct Node {
    broker: Arc<Broker>,
    clock: ManualClock,
    manager: Arc<Manager>,
}

async fn open(dir: &std::path::Path, clock: &ManualClock) -> Node {
    open_tuned(dir, clock, Tuning::default()).await
}

async fn open_tuned(dir: &std::path::Path, clock: &ManualClock, tuning: Tuning) -> Node {
    let broker =
        Arc::new(Broker::open_with_clock(BrokerConfig::new(dir), Arc::new(clock.clone())).unwrap());
    let manager = Manager::open_with(Arc::clone(&broker), tuning)
        .await
        .unwrap();
    Node {
        broker,
        clock: clock.clone(),
        manager,
    }
}

impl Node {
    async fn close(self) {
        self.manager.shutdown().await;
        let broker = self.broker;
        tokio::task::spawn_blocking(move || broker.shutdown())
            .await
            .unwrap();
    }

    fn topic(&self, name: &str, partitions: i32) {
        self.broker
            .create_topic(name, partitions, TopicConfig::default())
            .unwrap();
    }

    async fn produce(&self, topic: &str, partition: i32, records: &[(&str, &str)]) {
        let records: Vec<ProducerRecord> = records
            .iter()
            .map(|(key, event)| ProducerRecord {
                key: Some(Bytes::from(key.to_string())),
                value: None,
                headers: vec![("event".to_owned(), Some(Bytes::from(event.to_string())))],
                timestamp_ms: self.clock_now(),
            })
            .collect();
        self.produce_raw(topic, partition, &records).await;
    }

    async fn produce_raw(&self, topic: &str, partition: i32, records: &[ProducerRecord]) {
        let t = self.broker.topics().get(topic).unwrap();
        let mut buf = BytesMut::new();
        encode_batch(&mut buf, records);
        self.broker
            .append(&t, partition, &buf)
            .unwrap()
            .durable()
            .await
            .unwrap();
    }

    fn clock_now(&self) -> i64 {
        use sluice_broker::Clock;
        self.clock.now_ms()
    }

    async fn read_all(&self, topic: &str) -> Vec<ConsumedRecord> {
        let t = self.broker.topics().get(topic).unwrap();
        let mut out = Vec::new();
        for part in t.partitions() {
            let mut offset = part.log_start_offset();
            while offset < part.high_watermark() {
                let read = self
                    .broker
                    .read(&*part, offset, 1 << 20, None)
                    .await
                    .unwrap();
                for batch in Batches::new(read.records) {
                    let batch = batch.unwrap();
                    offset = batch.next_offset();
                    out.extend(batch.records().unwrap());
                }
            }
        }
        out
    }

    /// Waits (real time) until `topic` holds `n` records, then a little longer to catch extras.
    async fn wait_for(&self, topic: &str, n: usize) -> Vec<ConsumedRecord> {
        for _ in 0..200 {
            if self.broker.topics().get(topic).is_some() && self.read_all(topic).await.len() >= n {
                tokio::time::sleep(Duration::from_millis(300)).await;
                return self.read_all(topic).await;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        panic!(
            "{topic} did not reach {n} records: {:?}",
            self.read_all(topic).await.len()
        );
    }

    async fn status(&self, name: &str) -> sluice_triggers::TriggerStatus {
        self.manager.describe(name).unwrap().status
    }

    /// Waits until the trigger has evaluated `events` records and is caught up.
    async fn wait_evaluated(&self, name: &str, events: u64) {
        for _ in 0..200 {
            let s = self.status(name).await;
            if s.events >= events && s.lag == 0 {
                return;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        panic!(
            "trigger {name} did not evaluate {events} events: {:?}",
            self.status(name).await
        );
    }
}

fn unpaid(start_latest: bool) -> CreateRequest {
    CreateRequest {
        name: "unpaid".to_owned(),
        sources: vec!["signups".to_owned()],
        rule: Some(r#""signed_up" THEN (NOT "paid" WITHIN 7d)"#.to_owned()),
        sink: "topic:unpaid".to_owned(),
        start: Some(if start_latest {
            sluice_triggers::spec::StartFrom::Latest
        } else {
            sluice_triggers::spec::StartFrom::Earliest
        }),
        ..CreateRequest::default()
    }
}

fn firing_ids(records: &[ConsumedRecord]) -> Vec<String> {
    records
        .iter()
        .map(|r| {
            let (_, v) = r
                .headers
                .iter()
                .find(|(k, _)| &k[..] == b"sluice-firing-id")
                .expect("firing id header");
            String::from_utf8(v.as_ref().unwrap().to_vec()).unwrap()
        })
        .collect()
}

fn keys(records: &[ConsumedRecord]) -> Vec<String> {
    let mut keys: Vec<String> = records
        .iter()
        .map(|r| String::from_utf8(r.key.as_ref().unwrap().to_vec()).unwrap())
        .collect();
    keys.sort();
    keys
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fires_into_a_topic_once_per_match_and_survives_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let clock = ManualClock::new(T0);
    let node = open(dir.path(), &clock).await;
    node.topic("signups", 2);
    // Before the trigger exists: not seen with start=latest.
    node.produce("signups", 0, &[("old", "signed_up")]).await;
    let created = node.manager.create(unpaid(true)).await.unwrap();
    assert_eq!(
        created.info.rule,
        r#""signed_up" THEN NOT "paid" WITHIN 7d"#
    );
    assert!(created.secret.is_none());
    node.produce("signups", 0, &[("u1", "signed_up"), ("u2", "signed_up")])
        .await;
    node.produce("signups", 1, &[("u3", "signed_up"), ("u4", "browsed")])
        .await;
    node.wait_evaluated("unpaid", 3).await;
    clock.advance(DAY_MS);
    node.produce("signups", 0, &[("u2", "paid")]).await;
    node.wait_evaluated("unpaid", 4).await;
    let status = node.status("unpaid").await;
    assert_eq!(status.entities, 3, "{status:?}");
    assert_eq!(status.skipped.get("not_in_rule"), Some(&1), "{status:?}");

    // Restart before the week is over: the state (three signups, one paid) must survive.
    node.close().await;
    let node = open(dir.path(), &clock).await;
    for _ in 0..100 {
        if node.status("unpaid").await.state == "running" {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(
        node.status("unpaid").await.entities,
        3,
        "entities recovered"
    );
    clock.advance(6 * DAY_MS + 1);
    let fired = node.wait_for("unpaid", 2).await;
    assert_eq!(keys(&fired), ["u1", "u3"]);
    let value: serde_json::Value =
        serde_json::from_slice(fired[0].value.as_ref().unwrap()).unwrap();
    assert_eq!(value["trigger"], "unpaid");
    assert_eq!(value["fired_at_ms"], T0 + 7 * DAY_MS);
    assert_eq!(value["events"][0]["event"], "signed_up");
    let status = node.status("unpaid").await;
    assert_eq!((status.firings, status.delivered), (2, 2), "{status:?}");
    // u1 and u3 fired and were dropped; u2 (paid) waits for another signup.
    assert_eq!(status.entities, 1, "fired entities are dropped: {status:?}");

    // Again after another restart: nothing fires twice.
    node.close().await;
    let node = open(dir.path(), &clock).await;
    clock.advance(30 * DAY_MS);
    node.produce("signups", 1, &[("u5", "signed_up")]).await;
    node.wait_evaluated("unpaid", 1).await;
    clock.advance(8 * DAY_MS);
    let fired = node.wait_for("unpaid", 3).await;
    assert_eq!(keys(&fired), ["u1", "u3", "u5"]);
    let mut ids = firing_ids(&fired);
    ids.sort();
    ids.dedup();
    assert_eq!(ids.len(), 3);
    node.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_firing_already_in_the_sink_is_not_written_again_after_a_crash() {
    let dir = tempfile::tempdir().unwrap();
    let clock = ManualClock::new(T0);
    let node = open(dir.path(), &clock).await;
    node.topic("signups", 1);
    node.manager.create(unpaid(true)).await.unwrap();
    let state_topic = node
        .broker
        .topics()
        .all()
        .into_iter()
        .map(|t| t.name.clone())
        .find(|n| n.starts_with("__sluice_trigger.unpaid."))
        .unwrap();
    let incarnation = state_topic.rsplit('.').next().unwrap().to_owned();
    node.close().await;

    // As a crash would leave it: a step made firings 0 and 1 (outbox), firing 0 reached the
    // sink, then the broker died before recording the delivery.
    let node = {
        let broker = Arc::new(
            Broker::open_with_clock(BrokerConfig::new(dir.path()), Arc::new(clock.clone()))
                .unwrap(),
        );
        let fired = |seq: u64, entity: &str| Fired {
            seq,
            entity: entity.as_bytes().to_vec(),
            time_ms: T0,
            events: vec![(0, T0)],
        };
        let mut value = Vec::new();
        LogRecord::Step {
            positions: vec![Position {
                source: 0,
                partition: 0,
                next_offset: 0,
            }],
            clock_ms: T0,
            updates: Vec::new(),
            firings: vec![fired(0, "a"), fired(1, "b")],
        }
        .encode(&mut value);
        let n = Node {
            manager: Manager::open(Arc::clone(&broker)).await.unwrap(),
            broker,
            clock: clock.clone(),
        };
        n.manager.shutdown().await;
        n.produce_raw(
            &state_topic,
            0,
            &[ProducerRecord {
                key: None,
                value: Some(Bytes::from(value)),
                headers: Vec::new(),
                timestamp_ms: T0,
            }],
        )
        .await;
        n.produce_raw(
            "unpaid",
            0,
            &[ProducerRecord {
                key: Some(Bytes::from_static(b"a")),
                value: Some(Bytes::from_static(b"{}")),
                headers: vec![(
                    "sluice-firing-id".to_owned(),
                    Some(Bytes::from(format!("unpaid:{incarnation}:0"))),
                )],
                timestamp_ms: T0,
            }],
        )
        .await;
        n.close().await;
        open(dir.path(), &clock).await
    };
    let fired = node.wait_for("unpaid", 2).await;
    assert_eq!(keys(&fired), ["a", "b"], "firing 0 is not written twice");
    assert_eq!(
        firing_ids(&fired),
        [
            format!("unpaid:{incarnation}:0"),
            format!("unpaid:{incarnation}:1")
        ]
    );
    node.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_input_is_refused_or_skipped_and_counted() {
    let dir = tempfile::tempdir().unwrap();
    let clock = ManualClock::new(T0);
    let node = open(dir.path(), &clock).await;
    node.topic("signups", 1);

    let err = node
        .manager
        .create(CreateRequest {
            sources: vec!["nope".to_owned()],
            ..unpaid(true)
        })
        .await
        .unwrap_err();
    assert!(
        matches!(&err, TriggerError::Invalid(m) if m.contains("\"nope\" does not exist")),
        "{err}"
    );
    let err = node
        .manager
        .create(CreateRequest {
            rule: Some(r#""signed_up" THEN (NOT "paid" WITHIN )"#.to_owned()),
            ..unpaid(true)
        })
        .await
        .unwrap_err();
    assert!(
        matches!(
            &err,
            TriggerError::Rule {
                position: Some(_),
                ..
            }
        ),
        "{err}"
    );
    let err = node
        .manager
        .create(CreateRequest {
            rule: Some(r#""paid" WITHIN 7d"#.to_owned()),
            ..unpaid(true)
        })
        .await
        .unwrap_err();
    assert!(
        matches!(&err, TriggerError::Rule { .. }),
        "a bare time bound is refused: {err}"
    );
    let err = node
        .manager
        .create(CreateRequest {
            sink: "topic:signups".to_owned(),
            ..unpaid(true)
        })
        .await
        .unwrap_err();
    assert!(matches!(&err, TriggerError::Invalid(_)), "{err}");

    node.manager
        .create(CreateRequest {
            name: "json".to_owned(),
            entity: Some("json:user".to_owned()),
            event: Some("json:type".to_owned()),
            sink: "topic:json-out".to_owned(),
            rule: Some(r#""a" THEN "b""#.to_owned()),
            ..unpaid(true)
        })
        .await
        .unwrap();
    node.manager.create(unpaid(true)).await.unwrap();
    let err = node.manager.create(unpaid(true)).await.unwrap_err();
    assert!(matches!(err, TriggerError::Exists(_)));
    let rec = |key: Option<&str>, value: Option<&str>, event: Option<&str>| ProducerRecord {
        key: key.map(|k| Bytes::from(k.to_owned())),
        value: value.map(|v| Bytes::from(v.to_owned())),
        headers: event
            .map(|e| vec![("event".to_owned(), Some(Bytes::from(e.to_owned())))])
            .unwrap_or_default(),
        timestamp_ms: T0,
    };
    node.produce_raw(
        "signups",
        0,
        &[
            rec(None, Some("not json"), Some("signed_up")),
            rec(Some("k"), Some("{\"user\": 7, \"type\": \"a\"}"), None),
            rec(
                Some("k"),
                Some("{\"user\": 7, \"type\": \"b\"}"),
                Some("signed_up"),
            ),
            rec(Some("k"), Some("[1]"), Some("paid")),
            rec(Some("k"), Some("{\"type\": \"a\"}"), Some("paid")),
        ],
    )
    .await;
    let fired = node.wait_for("json-out", 1).await;
    assert_eq!(keys(&fired), ["7"]);
    let unpaid = node.status("unpaid").await;
    assert_eq!(unpaid.skipped.get("no_entity"), Some(&1), "{unpaid:?}");
    assert_eq!(unpaid.skipped.get("no_event_name"), Some(&1), "{unpaid:?}");
    assert_eq!(unpaid.events, 3, "{unpaid:?}");
    let json = node.status("json").await;
    assert_eq!(json.skipped.get("bad_json"), Some(&2), "{json:?}");
    assert_eq!(json.skipped.get("no_entity"), Some(&1), "{json:?}");
    assert_eq!(json.state, "running");
    let metrics = node.manager.render_metrics();
    for line in [
        "sluice_trigger_skipped_total{trigger=\"json\",reason=\"bad_json\"} 2",
        "sluice_trigger_events_total{trigger=\"unpaid\"} 3",
        "sluice_trigger_firings_total{trigger=\"json\"} 1",
        "sluice_trigger_running{trigger=\"unpaid\"} 1",
    ] {
        assert!(
            metrics.lines().any(|l| l == line),
            "{line} not in\n{metrics}"
        );
    }

    node.manager.delete("json").await.unwrap();
    assert!(matches!(
        node.manager.describe("json"),
        Err(TriggerError::NotFound(_))
    ));
    assert!(
        !node
            .broker
            .topics()
            .all()
            .iter()
            .any(|t| t.name.starts_with("__sluice_trigger.json.")),
        "the state topic is deleted with the trigger"
    );
    node.close().await;
    // The deletion is durable.
    let node = open(dir.path(), &clock).await;
    let names: Vec<String> = node.manager.list().into_iter().map(|t| t.name).collect();
    assert_eq!(names, ["unpaid"]);
    node.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn state_recovers_from_a_snapshot_after_the_log_was_cut() {
    let dir = tempfile::tempdir().unwrap();
    let clock = ManualClock::new(T0);
    // A snapshot after every step: recovery must rely on snapshots and the cut log.
    let tuning = Tuning {
        snapshot_after_bytes: 1,
    };
    let node = open_tuned(dir.path(), &clock, tuning).await;
    node.topic("signups", 1);
    node.manager.create(unpaid(true)).await.unwrap();
    let mut evaluated = 0;
    for round in 0..5 {
        let users: Vec<String> = (0..20).map(|i| format!("r{round}-u{i}")).collect();
        let events: Vec<(&str, &str)> = users.iter().map(|u| (u.as_str(), "signed_up")).collect();
        node.produce("signups", 0, &events).await;
        // Half of them pay.
        let paid: Vec<(&str, &str)> = users
            .iter()
            .step_by(2)
            .map(|u| (u.as_str(), "paid"))
            .collect();
        node.produce("signups", 0, &paid).await;
        evaluated += 30;
        node.wait_evaluated("unpaid", evaluated).await;
    }
    let state_topic = node
        .broker
        .topics()
        .all()
        .into_iter()
        .find(|t| t.name.starts_with("__sluice_trigger.unpaid."))
        .unwrap();
    let cut = state_topic.partition(0).unwrap().log_start_offset();
    assert!(cut > 0, "the state log was cut after a snapshot");
    node.close().await;

    let node = open_tuned(dir.path(), &clock, tuning).await;
    for _ in 0..100 {
        if node.status("unpaid").await.state == "running" {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(
        node.status("unpaid").await.entities,
        100,
        "every entity back from the snapshot"
    );
    clock.advance(7 * DAY_MS);
    let fired = node.wait_for("unpaid", 50).await;
    assert_eq!(fired.len(), 50, "one firing per user who did not pay");
    let mut ids = firing_ids(&fired);
    ids.sort();
    ids.dedup();
    assert_eq!(ids.len(), 50);
    node.close().await;
}
