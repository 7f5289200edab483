//! The routes for triggers against a real broker: `POST /topics/{topic}/events` end to end
//! (records with the entity id as key, the event name in the `event` header, the data as JSON
//! value; every bad event refused with nothing written; grants), and the `/triggers` routes
//! on a broker without a trigger manager (503) with the request checks made before it.

mod common;

use common::{Api, key};
use serde_json::{Value, json};
use sluice_http::HttpConfig;

const WRITER: &str = "sk_writer";
const READER: &str = "sk_reader";
const ADMIN: &str = "sk_admin";

impl Api {
    async fn post_json(&self, path: &str, body: &Value) -> (u16, Value) {
        self.post_raw(path, body.to_string()).await
    }

    async fn post_raw(&self, path: &str, body: impl Into<reqwest::Body>) -> (u16, Value) {
        let r = self
            .client
            .post(self.at(path))
            .body(body)
            .send()
            .await
            .unwrap();
        let status = r.status().as_u16();
        let text = r.text().await.unwrap();
        let body = if text.is_empty() {
            Value::Null
        } else {
            serde_json::from_str(&text).unwrap_or_else(|e| panic!("{e}: {text}"))
        };
        (status, body)
    }

    async fn records(&self, topic: &str, partition: u32) -> Vec<Value> {
        let r = self
            .client
            .get(self.at(&format!(
                "/topics/{topic}/partitions/{partition}/records?offset=0&timeout_ms=0"
            )))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 200);
        let body: Value = r.json().await.unwrap();
        body["records"].as_array().unwrap().clone()
    }

    /// Records in every partition of `topic` (by the broker's high watermarks).
    fn record_count(&self, topic: &str) -> i64 {
        let topic = self.broker.topics().get(topic).unwrap();
        topic.partitions().iter().map(|p| p.high_watermark()).sum()
    }
}

fn error_of(body: &Value) -> &str {
    body["error"]
        .as_str()
        .unwrap_or_else(|| panic!("no error in {body}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn events_become_records_a_trigger_reads() {
    let api = Api::start().await;
    api.create_topic("signups", 3);
    let (status, answer) = api
        .post_json(
            "/topics/signups/events",
            &json!([
                {"event_name": "signed_up", "entity_id": "user-42", "data": {"plan": "pro", "seats": 3}},
                {"event_name": "paid", "entity_id": "user-42"},
                {"event_name": "noted", "entity_id": "key0", "data": "text"},
                {"event_name": "noted", "entity_id": "key0", "data": null},
            ]),
        )
        .await;
    assert_eq!(status, 200, "{answer}");
    // murmur2 as the Java client: "user-42" → 1 and "key0" → 1 of 3 partitions
    // (tests/records.rs checks the partitioner against Java's own choices).
    assert_eq!(
        answer,
        json!({
            "partitions": [{"partition": 1, "base_offset": 0, "count": 4}],
            "offsets": [
                {"partition": 1, "offset": 0}, {"partition": 1, "offset": 1},
                {"partition": 1, "offset": 2}, {"partition": 1, "offset": 3},
            ],
        })
    );
    let records = api.records("signups", 1).await;
    assert_eq!(records.len(), 4);
    let shape = |r: &Value| {
        (
            r["key"].clone(),
            r["headers"].clone(),
            r["value"].clone(),
            r["encoding"].clone(),
        )
    };
    assert_eq!(
        shape(&records[0]),
        (
            json!("user-42"),
            json!([{"key": "event", "value": "signed_up"}]),
            json!(r#"{"plan":"pro","seats":3}"#),
            json!("utf8"),
        )
    );
    assert_eq!(records[1]["headers"][0]["value"], "paid");
    assert_eq!(records[1]["value"], Value::Null, "no data: no value");
    assert_eq!(records[2]["value"], r#""text""#, "data is stored as JSON");
    assert_eq!(records[3]["value"], Value::Null);

    // One event, not in an array; a partition of its own key.
    let (status, answer) = api
        .post_json(
            "/topics/signups/events",
            &json!({"event_name": "signed_up", "entity_id": "abc", "data": [1, 2]}),
        )
        .await;
    assert_eq!(status, 200, "{answer}");
    assert_eq!(answer["offsets"], json!([{"partition": 0, "offset": 0}]));
    let records = api.records("signups", 0).await;
    assert_eq!(records[0]["key"], "abc");
    assert_eq!(records[0]["value"], "[1,2]");
    // The same records, straight from the log: the header is a real record header.
    let topic = api.broker.topics().get("signups").unwrap();
    assert_eq!(topic.partitions()[0].high_watermark(), 1);
    assert_eq!(api.record_count("signups"), 5);
    api.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_events_are_refused_and_nothing_is_written() {
    let config = HttpConfig {
        max_records_per_request: 3,
        ..HttpConfig::default()
    };
    let api = Api::start_with(config, Vec::new(), |_| {}).await;
    api.create_topic("e", 2);
    let ok = json!({"event_name": "a", "entity_id": "u"});
    let cases: Vec<(String, u16, &[&str])> = vec![
        (String::new(), 400, &["empty"]),
        ("{\"event_name\": ".to_owned(), 400, &["invalid JSON"]),
        ("[]".to_owned(), 400, &["no events"]),
        ("\"paid\"".to_owned(), 400, &["JSON string"]),
        (
            json!([ok, {"entity_id": "u"}]).to_string(),
            400,
            &["event 1", "\"event_name\" is missing"],
        ),
        (
            json!([ok, ok, {"event_name": "a"}]).to_string(),
            400,
            &["event 2", "\"entity_id\" is missing"],
        ),
        (
            json!({"event_name": "", "entity_id": "u"}).to_string(),
            400,
            &["\"event_name\" is empty"],
        ),
        (
            json!({"event_name": "a", "entity_id": ""}).to_string(),
            400,
            &["\"entity_id\" is empty"],
        ),
        (
            json!([{"event_name": "a", "entity_id": 42}]).to_string(),
            400,
            &["event 0", "\"entity_id\" must be a string", "number"],
        ),
        (
            json!([ok, {"event_name": {"n": 1}, "entity_id": "u"}]).to_string(),
            400,
            &["event 1", "\"event_name\" must be a string", "object"],
        ),
        (
            json!([ok, {"event_name": "a", "entity_id": "u", "event": "x"}]).to_string(),
            400,
            &["event 1", "unknown field \"event\""],
        ),
        (json!([ok, 7]).to_string(), 400, &["event 1", "JSON number"]),
        (json!([ok, ok, ok, ok]).to_string(), 413, &["4 events", "3"]),
    ];
    for (body, status, words) in cases {
        let (got, answer) = api.post_raw("/topics/e/events", body.clone()).await;
        assert_eq!(got, status, "{body}: {answer}");
        let message = error_of(&answer);
        for w in words {
            assert!(message.contains(w), "{body}: {w:?} not in {message}");
        }
    }
    assert_eq!(api.record_count("e"), 0, "a refused request writes nothing");

    let (status, answer) = api.post_json("/topics/nope/events", &ok).await;
    assert_eq!(status, 404, "{answer}");
    assert!(error_of(&answer).contains("unknown topic 'nope'"));
    let (status, _) = api.post_json("/topics/bad%20name/events", &ok).await;
    assert_eq!(status, 400);
    let r = api
        .client
        .get(api.at("/topics/e/events"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 405);
    api.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn events_need_the_write_grant() {
    let keys = vec![
        key("writer", WRITER, &[], &["signups"], &[]),
        key("reader", READER, &["signups"], &[], &[]),
    ];
    let api = Api::start_with(HttpConfig::default(), keys, |_| {}).await;
    api.create_topic("signups", 1);
    let send = |secret: Option<&'static str>| {
        let mut r = api
            .client
            .post(api.at("/topics/signups/events"))
            .json(&json!({"event_name": "paid", "entity_id": "u"}));
        if let Some(secret) = secret {
            r = r.bearer_auth(secret);
        }
        r.send()
    };
    assert_eq!(send(None).await.unwrap().status(), 401);
    let r = send(Some(READER)).await.unwrap();
    assert_eq!(r.status(), 403);
    let body: Value = r.json().await.unwrap();
    assert!(error_of(&body).contains("no write grant"), "{body}");
    assert_eq!(api.record_count("signups"), 0);
    let r = send(Some(WRITER)).await.unwrap();
    assert_eq!(r.status(), 200, "{}", r.text().await.unwrap());
    assert_eq!(api.record_count("signups"), 1);
    api.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn trigger_routes_without_a_manager_answer_503() {
    let api = Api::start().await;
    assert!(api.state.triggers.is_none());
    let valid = json!({
        "name": "unpaid",
        "sources": ["signups"],
        "rule": "\"signed_up\" THEN (NOT \"paid\" WITHIN 7d)",
        "sink": "topic:unpaid",
    });
    let check_503 = |r: reqwest::Response| async move {
        assert_eq!(r.status(), 503);
        assert!(
            r.headers().get("retry-after").is_none(),
            "not a temporary refusal"
        );
        let body: Value = r.json().await.unwrap();
        assert!(
            error_of(&body).starts_with("triggers are not available: "),
            "{body}"
        );
    };
    let c = &api.client;
    check_503(c.get(api.at("/triggers")).send().await.unwrap()).await;
    check_503(
        c.post(api.at("/triggers"))
            .json(&valid)
            .send()
            .await
            .unwrap(),
    )
    .await;
    check_503(c.get(api.at("/triggers/unpaid")).send().await.unwrap()).await;
    check_503(c.delete(api.at("/triggers/unpaid")).send().await.unwrap()).await;
    let r = c.put(api.at("/triggers/unpaid")).send().await.unwrap();
    assert_eq!(r.status(), 405);
    api.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn trigger_requests_are_checked_before_the_manager() {
    let api = Api::start().await;
    let with = |change: &dyn Fn(&mut serde_json::Map<String, Value>)| {
        let mut body = json!({
            "name": "unpaid",
            "sources": ["signups"],
            "rule": "\"signed_up\" THEN (NOT \"paid\" WITHIN 7d)",
            "sink": "topic:unpaid",
        });
        change(body.as_object_mut().unwrap());
        body.to_string()
    };
    let cases: Vec<(String, &[&str])> = vec![
        (String::new(), &["empty"]),
        ("{\"name\": ".to_owned(), &["invalid JSON"]),
        ("[]".to_owned(), &["invalid JSON"]),
        (
            with(&|b| {
                b.insert("rules".into(), json!("x"));
            }),
            &["unknown field `rules`"],
        ),
        (
            with(&|b| {
                b.remove("sink");
            }),
            &["missing field `sink`"],
        ),
        (
            with(&|b| {
                b.insert("sources".into(), json!("signups"));
            }),
            &["invalid type", "sequence"],
        ),
        (
            with(&|b| {
                b.insert("max_attempts".into(), json!(-1));
            }),
            &["invalid value"],
        ),
        (
            with(&|b| {
                b.insert("start".into(), json!("middle"));
            }),
            &["unknown variant `middle`"],
        ),
        (
            with(&|b| {
                b.insert("name".into(), json!("no spaces"));
            }),
            &["trigger name", "' '"],
        ),
        (
            with(&|b| {
                b.insert("sources".into(), json!([]));
            }),
            &["\"sources\" is empty"],
        ),
        (
            with(&|b| {
                b.insert("sources".into(), json!(["ok", "not ok"]));
            }),
            &["source \"not ok\""],
        ),
        (
            with(&|b| {
                b.insert("sink".into(), json!("unpaid"));
            }),
            &["sink \"unpaid\"", "topic:NAME"],
        ),
        (
            with(&|b| {
                b.insert("sink".into(), json!("topic:a/b"));
            }),
            &["topic \"a/b\""],
        ),
    ];
    for (body, words) in cases {
        let (status, answer) = api.post_raw("/triggers", body.clone()).await;
        assert_eq!(status, 400, "{body}: {answer}");
        let message = error_of(&answer);
        for w in words {
            assert!(message.contains(w), "{body}: {w:?} not in {message}");
        }
        assert!(answer.get("position").is_none(), "{answer}");
    }
    for path in ["/triggers/no%20spaces", "/triggers/a%2Fb"] {
        let r = api.client.get(api.at(path)).send().await.unwrap();
        assert_eq!(r.status(), 400, "{path}");
        let r = api.client.delete(api.at(path)).send().await.unwrap();
        assert_eq!(r.status(), 400, "{path}");
    }
    api.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn creating_a_trigger_needs_admin_on_the_topics_it_touches() {
    let keys = vec![
        key("writer", WRITER, &["*"], &["*"], &[]),
        key(
            "admin",
            ADMIN,
            &[],
            &[],
            &["signups", "unpaid", "hook.dead-letter"],
        ),
    ];
    let api = Api::start_with(HttpConfig::default(), keys, |_| {}).await;
    let create = |secret: Option<&'static str>, body: Value| {
        let mut r = api.client.post(api.at("/triggers")).json(&body);
        if let Some(secret) = secret {
            r = r.bearer_auth(secret);
        }
        r.send()
    };
    let to_topic = json!({
        "name": "unpaid", "sources": ["signups"], "rule": "\"a\"", "sink": "topic:unpaid",
    });
    assert_eq!(create(None, to_topic.clone()).await.unwrap().status(), 401);
    let r = create(Some(WRITER), to_topic.clone()).await.unwrap();
    assert_eq!(r.status(), 403);
    let body: Value = r.json().await.unwrap();
    assert!(
        error_of(&body).contains("no admin grant on topic \"signups\""),
        "{body}"
    );
    // Past the grants, the missing manager answers.
    assert_eq!(
        create(Some(ADMIN), to_topic.clone())
            .await
            .unwrap()
            .status(),
        503
    );
    let other_sink = json!({
        "name": "unpaid", "sources": ["signups"], "rule": "\"a\"", "sink": "topic:elsewhere",
    });
    let r = create(Some(ADMIN), other_sink).await.unwrap();
    assert_eq!(r.status(), 403);
    let body: Value = r.json().await.unwrap();
    assert!(error_of(&body).contains("\"elsewhere\""), "{body}");
    // A webhook sink writes to its dead-letter topic: `<name>.dead-letter` unless named.
    let hook = |name: &str, dead_letter: Option<&str>| {
        let mut body = json!({
            "name": name, "sources": ["signups"], "rule": "\"a\"",
            "sink": "https://example.com/hook",
        });
        if let Some(t) = dead_letter {
            body["dead_letter_topic"] = json!(t);
        }
        body
    };
    assert_eq!(
        create(Some(ADMIN), hook("hook", None))
            .await
            .unwrap()
            .status(),
        503
    );
    let r = create(Some(ADMIN), hook("other", None)).await.unwrap();
    assert_eq!(r.status(), 403);
    let body: Value = r.json().await.unwrap();
    assert!(error_of(&body).contains("\"other.dead-letter\""), "{body}");
    assert_eq!(
        create(Some(ADMIN), hook("other", Some("unpaid")))
            .await
            .unwrap()
            .status(),
        503
    );
    // Listing needs a valid key, then the manager.
    let r = api.client.get(api.at("/triggers")).send().await.unwrap();
    assert_eq!(r.status(), 401);
    let r = api
        .client
        .get(api.at("/triggers"))
        .bearer_auth(WRITER)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 503);
    api.stop().await;
}
