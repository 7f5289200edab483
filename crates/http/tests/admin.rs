//! The admin routes: topics (list, create, describe, delete) and consumer-group offsets (commit,
//! fetch with lag), with every kind of bad input answered by a 4xx whose message says what to fix.

mod common;

use bytes::{Bytes, BytesMut};
use common::{Api, key};
use serde_json::{Value, json};
use sluice_broker::groups::classic::JoinRequest;
use sluice_protocol::records::{ProducerRecord, encode_batch};

/// Status and JSON body of a request (`Value::Null` when the body is empty).
async fn send(request: reqwest::RequestBuilder) -> (u16, Value) {
    let response = request.send().await.unwrap();
    let status = response.status().as_u16();
    let text = response.text().await.unwrap();
    let body = if text.is_empty() {
        Value::Null
    } else {
        serde_json::from_str(&text).unwrap_or_else(|e| panic!("not JSON ({e}): {text}"))
    };
    (status, body)
}

async fn post_json(api: &Api, path: &str, body: &str) -> (u16, Value) {
    send(
        api.client
            .post(api.at(path))
            .header("content-type", "application/json")
            .body(body.to_owned()),
    )
    .await
}

async fn get(api: &Api, path: &str) -> (u16, Value) {
    send(api.client.get(api.at(path))).await
}

async fn delete(api: &Api, path: &str) -> (u16, Value) {
    send(api.client.delete(api.at(path))).await
}

/// Asserts a 4xx/5xx answer with `status` whose `error` message contains `needle`.
#[track_caller]
fn assert_error(answer: &(u16, Value), status: u16, needle: &str) {
    let (got, body) = answer;
    assert_eq!(*got, status, "{body}");
    let message = body["error"]
        .as_str()
        .unwrap_or_else(|| panic!("no error message: {body}"));
    assert!(
        message.contains(needle),
        "'{message}' does not mention '{needle}'"
    );
}

/// Appends `count` records to a partition directly on the broker and waits until they are
/// durable.
async fn append(api: &Api, topic: &str, partition: i32, count: usize) {
    let records: Vec<ProducerRecord> = (0..count)
        .map(|i| ProducerRecord {
            key: None,
            value: Some(Bytes::from(format!("v{i}"))),
            headers: Vec::new(),
            timestamp_ms: 1_700_000_000_000,
        })
        .collect();
    let mut batch = BytesMut::new();
    encode_batch(&mut batch, &records);
    let topic = api.broker.topics().get(topic).unwrap();
    let appended = api.broker.append(&topic, partition, &batch).unwrap();
    appended.durable().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn create_describe_list_delete() {
    let api = Api::start().await;
    assert_eq!(get(&api, "/topics").await, (200, json!({ "topics": [] })));

    let (status, created) = post_json(
        &api,
        "/topics",
        r#"{"name": "orders", "partitions": 3, "configs": {"retention.ms": "86400000", "max.message.bytes": 2000000}}"#,
    )
    .await;
    assert_eq!(status, 201, "{created}");
    assert_eq!(created["name"], "orders");
    let id = created["id"].as_str().unwrap();
    assert_eq!(
        id,
        api.broker.topics().get("orders").unwrap().id.to_string()
    );
    assert_eq!(
        created["partitions"],
        json!([
            {"partition": 0, "log_start_offset": 0, "high_watermark": 0},
            {"partition": 1, "log_start_offset": 0, "high_watermark": 0},
            {"partition": 2, "log_start_offset": 0, "high_watermark": 0},
        ])
    );
    let configs = created["configs"].as_object().unwrap();
    assert_eq!(configs["retention.ms"], "86400000");
    assert_eq!(configs["max.message.bytes"], "2000000");
    // Every implemented config is described, with its effective value.
    for name in sluice_broker::config::TOPIC_CONFIG_NAMES {
        assert!(configs[*name].is_string(), "{name} missing from {created}");
    }
    assert_eq!(configs["cleanup.policy"], "delete");

    // The default partition count when none is given.
    let (status, body) = post_json(&api, "/topics", r#"{"name": "audit"}"#).await;
    assert_eq!(status, 201, "{body}");
    assert_eq!(body["partitions"].as_array().unwrap().len(), 1);
    assert_eq!(body["configs"]["retention.ms"], "604800000");

    append(&api, "orders", 1, 4).await;
    let (status, described) = get(&api, "/topics/orders").await;
    assert_eq!(status, 200);
    assert_eq!(described["id"], id);
    assert_eq!(described["partitions"][1]["high_watermark"], 4);
    assert_eq!(described["configs"], created["configs"]);

    assert_eq!(
        get(&api, "/topics").await,
        (
            200,
            json!({ "topics": [
                {"name": "audit", "partitions": 1},
                {"name": "orders", "partitions": 3},
            ]})
        )
    );

    assert_eq!(delete(&api, "/topics/orders").await, (204, Value::Null));
    assert_error(&get(&api, "/topics/orders").await, 404, "orders");
    assert_error(&delete(&api, "/topics/orders").await, 404, "orders");
    assert_eq!(
        get(&api, "/topics").await,
        (
            200,
            json!({ "topics": [{"name": "audit", "partitions": 1}] })
        )
    );
    // A deleted topic's name can be used again, for a new topic (a new id).
    let (status, again) = post_json(&api, "/topics", r#"{"name": "orders"}"#).await;
    assert_eq!(status, 201, "{again}");
    assert_ne!(again["id"], id);
    api.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn create_refuses_bad_input() {
    let api = Api::start().await;
    api.create_topic("taken", 1);
    let cases: &[(&str, u16, &str)] = &[
        ("", 400, "empty"),
        ("{", 400, "invalid JSON"),
        ("[1, 2]", 400, "invalid JSON"),
        (r#"{"partitions": 1}"#, 400, "name"),
        (r#"{"name": "t", "partitons": 2}"#, 400, "partitons"),
        (r#"{"name": "bad name"}"#, 400, "invalid topic name"),
        (r#"{"name": ""}"#, 400, "invalid topic name"),
        (r#"{"name": ".."}"#, 400, "invalid topic name"),
        (
            r#"{"name": "t", "partitions": 0}"#,
            400,
            "partitions must be between 1 and",
        ),
        (
            r#"{"name": "t", "partitions": -3}"#,
            400,
            "partitions must be between 1 and",
        ),
        (
            r#"{"name": "t", "partitions": 10001}"#,
            400,
            "partitions must be between 1 and 10000",
        ),
        (
            r#"{"name": "t", "partitions": 99999999999}"#,
            400,
            "partitions must be between",
        ),
        (r#"{"name": "t", "partitions": "3"}"#, 400, "invalid JSON"),
        (
            r#"{"name": "t", "configs": {"flush.ms": "1"}}"#,
            400,
            "flush.ms",
        ),
        (
            r#"{"name": "t", "configs": {"retention.ms": "soon"}}"#,
            400,
            "retention.ms must be an integer",
        ),
        (
            r#"{"name": "t", "configs": {"retention.ms": 1.5}}"#,
            400,
            "retention.ms must be an integer",
        ),
        (
            r#"{"name": "t", "configs": {"segment.bytes": 10}}"#,
            400,
            "segment.bytes must be at least",
        ),
        (
            r#"{"name": "t", "configs": {"cleanup.policy": "shred"}}"#,
            400,
            "cleanup.policy",
        ),
        (
            r#"{"name": "t", "configs": {"retention.ms": true}}"#,
            400,
            "must be a string or a number",
        ),
        (
            r#"{"name": "t", "configs": {"retention.ms": null}}"#,
            400,
            "must be a string or a number",
        ),
        (
            r#"{"name": "t", "configs": ["retention.ms"]}"#,
            400,
            "invalid JSON",
        ),
        (r#"{"name": "taken"}"#, 409, "already exists"),
    ];
    for (body, status, needle) in cases {
        let answer = post_json(&api, "/topics", body).await;
        assert_eq!(answer.0, *status, "{body}: {}", answer.1);
        assert_error(&answer, *status, needle);
    }
    // Nothing was created by any of them.
    assert_eq!(
        get(&api, "/topics").await,
        (
            200,
            json!({ "topics": [{"name": "taken", "partitions": 1}] })
        )
    );
    // Bad names in the path.
    assert_error(&get(&api, "/topics/a%20b").await, 400, "invalid topic name");
    assert_error(
        &delete(&api, "/topics/a%20b").await,
        400,
        "invalid topic name",
    );
    assert_error(
        &get(&api, "/topics/nope").await,
        404,
        "unknown topic 'nope'",
    );
    api.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn commit_and_fetch_offsets_with_lag() {
    let api = Api::start().await;
    api.create_topic("clicks", 2);
    api.create_topic("views", 1);
    append(&api, "clicks", 0, 10).await;
    append(&api, "clicks", 1, 3).await;
    append(&api, "views", 0, 5).await;

    // A group nobody committed for: an empty list.
    assert_eq!(
        get(&api, "/groups/reporting/offsets").await,
        (200, json!({"group": "reporting", "offsets": []}))
    );

    let (status, body) = post_json(
        &api,
        "/groups/reporting/offsets",
        r#"{"offsets": [
            {"topic": "clicks", "partition": 0, "offset": 7, "metadata": "batch 12"},
            {"topic": "clicks", "partition": 1, "offset": 3},
            {"topic": "views", "partition": 0, "offset": 0}
        ]}"#,
    )
    .await;
    assert_eq!(
        (status, body),
        (200, json!({"group": "reporting", "committed": 3}))
    );

    let all = json!({"group": "reporting", "offsets": [
        {"topic": "clicks", "partition": 0, "offset": 7, "metadata": "batch 12", "high_watermark": 10, "lag": 3},
        {"topic": "clicks", "partition": 1, "offset": 3, "metadata": "", "high_watermark": 3, "lag": 0},
        {"topic": "views", "partition": 0, "offset": 0, "metadata": "", "high_watermark": 5, "lag": 5},
    ]});
    assert_eq!(get(&api, "/groups/reporting/offsets").await, (200, all));
    assert_eq!(
        get(&api, "/groups/reporting/offsets?topic=views").await,
        (
            200,
            json!({"group": "reporting", "offsets": [
                {"topic": "views", "partition": 0, "offset": 0, "metadata": "", "high_watermark": 5, "lag": 5},
            ]})
        )
    );

    // Committing again moves the offset; an offset past the high watermark is allowed (as in
    // Kafka) and has no lag.
    let (status, _) = post_json(
        &api,
        "/groups/reporting/offsets",
        r#"{"offsets": [{"topic": "views", "partition": 0, "offset": 9}]}"#,
    )
    .await;
    assert_eq!(status, 200);
    let (_, body) = get(&api, "/groups/reporting/offsets?topic=views").await;
    assert_eq!(body["offsets"][0]["offset"], 9);
    assert_eq!(body["offsets"][0]["lag"], 0);

    // The same offsets, as the group coordinator holds them for Kafka clients.
    let found = api
        .broker
        .groups()
        .committed(
            "reporting",
            None,
            Some(vec![("clicks".to_owned(), vec![0])]),
        )
        .unwrap();
    assert_eq!(found[0].1[0].1.as_ref().unwrap().offset, 7);

    // Deleting a topic forgets its offsets.
    assert_eq!(delete(&api, "/topics/clicks").await.0, 204);
    let (_, body) = get(&api, "/groups/reporting/offsets").await;
    assert_eq!(body["offsets"].as_array().unwrap().len(), 1, "{body}");
    api.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn offsets_refuse_bad_input() {
    let api = Api::start().await;
    api.create_topic("clicks", 2);
    let path = "/groups/g1/offsets";
    let cases: &[(&str, u16, &str)] = &[
        ("", 400, "empty"),
        ("{", 400, "invalid JSON"),
        ("{}", 400, "offsets"),
        (r#"{"offsets": []}"#, 400, "offsets is empty"),
        (r#"{"ofsets": []}"#, 400, "ofsets"),
        (
            r#"{"offsets": [{"topic": "clicks", "partition": 0, "offset": 1, "epoch": 3}]}"#,
            400,
            "epoch",
        ),
        (
            r#"{"offsets": [{"topic": "clicks", "partition": 0}]}"#,
            400,
            "offset",
        ),
        (
            r#"{"offsets": [{"topic": "clicks", "partition": 0, "offset": "1"}]}"#,
            400,
            "invalid JSON",
        ),
        (
            r#"{"offsets": [{"topic": "clicks", "partition": 0, "offset": -1}]}"#,
            400,
            "must be at least 0",
        ),
        (
            r#"{"offsets": [{"topic": "clicks", "partition": 2, "offset": 1}]}"#,
            404,
            "no partition 2",
        ),
        (
            r#"{"offsets": [{"topic": "clicks", "partition": -1, "offset": 1}]}"#,
            404,
            "no partition -1",
        ),
        (
            r#"{"offsets": [{"topic": "nope", "partition": 0, "offset": 1}]}"#,
            404,
            "unknown topic 'nope'",
        ),
        (
            r#"{"offsets": [{"topic": "clicks", "partition": 0, "offset": 1}, {"topic": "clicks", "partition": 0, "offset": 2}]}"#,
            400,
            "more than once",
        ),
        // One bad entry commits nothing, not even the good ones before it.
        (
            r#"{"offsets": [{"topic": "clicks", "partition": 0, "offset": 1}, {"topic": "clicks", "partition": 5, "offset": 2}]}"#,
            404,
            "no partition 5",
        ),
    ];
    for (body, status, needle) in cases {
        let answer = post_json(&api, path, body).await;
        assert_eq!(answer.0, *status, "{body}: {}", answer.1);
        assert_error(&answer, *status, needle);
    }
    let long = "m".repeat(4097);
    let answer = post_json(
        &api,
        path,
        &format!(r#"{{"offsets": [{{"topic": "clicks", "partition": 0, "offset": 1, "metadata": "{long}"}}]}}"#),
    )
    .await;
    assert_error(&answer, 400, "at most 4096");
    assert_eq!(
        get(&api, path).await,
        (200, json!({"group": "g1", "offsets": []}))
    );
    assert_error(
        &get(&api, "/groups/g1/offsets?topic=nope").await,
        404,
        "unknown topic 'nope'",
    );
    assert_error(
        &get(&api, "/groups/g1/offsets?topc=clicks").await,
        400,
        "topc",
    );
    assert_error(
        &get(&api, "/groups/g1/offsets?topic=clicks&topic=clicks").await,
        400,
        "more than once",
    );
    assert_error(
        &get(&api, "/groups//offsets").await,
        400,
        "group id is empty",
    );
    assert_error(
        &post_json(
            &api,
            "/groups//offsets",
            r#"{"offsets": [{"topic": "clicks", "partition": 0, "offset": 1}]}"#,
        )
        .await,
        400,
        "group id is empty",
    );
    api.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn commit_is_refused_while_the_group_has_members() {
    let api = Api::start_with(Default::default(), Vec::new(), |c| {
        c.groups.classic.initial_rebalance_delay_ms = 0;
    })
    .await;
    api.create_topic("clicks", 1);
    let commit = r#"{"offsets": [{"topic": "clicks", "partition": 0, "offset": 1}]}"#;
    // Allowed while the group is empty...
    assert_eq!(post_json(&api, "/groups/busy/offsets", commit).await.0, 200);

    // ...refused once a consumer joined it (classic protocol: JoinGroup without a member id).
    let joined = api
        .broker
        .groups()
        .join(
            "busy",
            JoinRequest {
                member_id: String::new(),
                group_instance_id: None,
                client_id: "admin-test".to_owned(),
                client_host: "127.0.0.1".to_owned(),
                protocol_type: "consumer".to_owned(),
                protocols: vec![("range".to_owned(), Bytes::new())],
                session_timeout_ms: 30_000,
                rebalance_timeout_ms: 30_000,
                require_known_member_id: false,
                reason: None,
            },
        )
        .await;
    assert_eq!(joined.error, None, "{joined:?}");
    let answer = post_json(&api, "/groups/busy/offsets", commit).await;
    assert_error(&answer, 409, "group 'busy' has active members");

    // The offset committed before is untouched; reading is allowed while members are active.
    let (status, body) = get(&api, "/groups/busy/offsets").await;
    assert_eq!(status, 200);
    assert_eq!(body["offsets"][0]["offset"], 1);
    api.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn admin_routes_check_grants() {
    let keys = vec![
        key("ops", "ops-secret", &[], &[], &["*"]),
        key("reader", "reader-secret", &["events.*"], &[], &[]),
        key("writer", "writer-secret", &[], &["logs"], &[]),
    ];
    let api = Api::start_with(Default::default(), keys, |_| {}).await;
    api.create_topic("events.clicks", 1);
    api.create_topic("logs", 1);
    api.create_topic("secret", 1);
    let as_key = |request: reqwest::RequestBuilder, secret: &str| request.bearer_auth(secret);

    // No key, or an unknown one: 401 with WWW-Authenticate.
    let response = api.client.get(api.at("/topics")).send().await.unwrap();
    assert_eq!(response.status(), 401);
    assert_eq!(response.headers()["www-authenticate"], "Bearer");
    let answer = send(as_key(api.client.get(api.at("/topics")), "guess")).await;
    assert_eq!(answer.0, 401, "{}", answer.1);

    // GET /topics lists the topics the key has any grant on.
    let names = |v: &Value| -> Vec<String> {
        v["topics"]
            .as_array()
            .unwrap()
            .iter()
            .map(|t| t["name"].as_str().unwrap().to_owned())
            .collect()
    };
    let (_, body) = send(as_key(api.client.get(api.at("/topics")), "ops-secret")).await;
    assert_eq!(names(&body), ["events.clicks", "logs", "secret"]);
    let (_, body) = send(as_key(api.client.get(api.at("/topics")), "reader-secret")).await;
    assert_eq!(names(&body), ["events.clicks"]);
    let (_, body) = send(as_key(api.client.get(api.at("/topics")), "writer-secret")).await;
    assert_eq!(names(&body), ["logs"]);

    // Describe needs any grant; create and delete need admin.
    let describe = |topic: &str, secret: &str| {
        as_key(api.client.get(api.at(&format!("/topics/{topic}"))), secret)
    };
    assert_eq!(send(describe("logs", "writer-secret")).await.0, 200);
    assert_eq!(
        send(describe("events.clicks", "reader-secret")).await.0,
        200
    );
    assert_error(
        &send(describe("secret", "reader-secret")).await,
        403,
        "\"reader\"",
    );
    let create = |secret: &str| {
        as_key(api.client.post(api.at("/topics")), secret)
            .header("content-type", "application/json")
            .body(r#"{"name": "events.new"}"#)
    };
    assert_error(&send(create("reader-secret")).await, 403, "admin");
    assert_eq!(send(create("ops-secret")).await.0, 201);
    let remove = |secret: &str| as_key(api.client.delete(api.at("/topics/logs")), secret);
    assert_error(&send(remove("writer-secret")).await, 403, "\"logs\"");
    assert_eq!(send(remove("ops-secret")).await.0, 204);

    // Offsets need read on every topic involved; a fetch without a topic leaves out the
    // topics the key may not read.
    let commit = |secret: &str, topic: &str| {
        as_key(api.client.post(api.at("/groups/g/offsets")), secret)
            .header("content-type", "application/json")
            .body(format!(
                r#"{{"offsets": [{{"topic": "{topic}", "partition": 0, "offset": 0}}]}}"#
            ))
    };
    assert_eq!(send(commit("reader-secret", "events.clicks")).await.0, 200);
    assert_error(&send(commit("reader-secret", "secret")).await, 403, "read");
    assert_eq!(send(commit("ops-secret", "secret")).await.0, 403);
    let fetch = |secret: &str, query: &str| {
        as_key(
            api.client.get(api.at(&format!("/groups/g/offsets{query}"))),
            secret,
        )
    };
    let (status, body) = send(fetch("reader-secret", "")).await;
    assert_eq!(status, 200);
    assert_eq!(body["offsets"].as_array().unwrap().len(), 1);
    let (status, body) = send(fetch("writer-secret", "")).await;
    assert_eq!((status, body["offsets"].clone()), (200, json!([])));
    assert_error(
        &send(fetch("writer-secret", "?topic=events.clicks")).await,
        403,
        "events.clicks",
    );
    api.stop().await;
}
