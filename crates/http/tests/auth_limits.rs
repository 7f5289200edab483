//! API keys, the request limits and `/metrics`, through real HTTP requests against an
//! in-process broker.

mod common;

use std::time::{Duration, Instant};

use common::{Api, key};
use serde_json::{Value, json};
use sluice_http::HttpConfig;
use sluice_http::auth::ApiKeyConfig;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

const ADMIN_KEY: &str = "sk_admin_0123456789";
const APP_KEY: &str = "sk_app_0123456789";
const METRICS_KEY: &str = "sk_prometheus_0123456789";

/// An admin key for everything, an application key that reads `orders.*` and writes
/// `orders.eu`, and a key with no grants (for scraping /metrics).
fn keys() -> Vec<ApiKeyConfig> {
    vec![
        key("admin", ADMIN_KEY, &["*"], &["*"], &["*"]),
        key("app", APP_KEY, &["orders.*"], &["orders.eu"], &[]),
        key("prometheus", METRICS_KEY, &[], &[], &[]),
    ]
}

/// Asserts a 401 with `WWW-Authenticate: Bearer` and a JSON error; returns the message.
async fn assert_401(response: reqwest::Response) -> String {
    assert_eq!(response.status(), 401);
    assert_eq!(
        response
            .headers()
            .get("www-authenticate")
            .map(|v| v.to_str().unwrap()),
        Some("Bearer")
    );
    let body: Value = response.json().await.unwrap();
    body["error"].as_str().expect("error message").to_owned()
}

/// Waits until `cond` holds (or fails the test after 5 s).
async fn eventually(what: &str, mut cond: impl FnMut() -> bool) {
    let started = Instant::now();
    while !cond() {
        assert!(
            started.elapsed() < Duration::from_secs(5),
            "timed out: {what}"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn requests_without_a_valid_key_get_401() {
    let api = Api::start_with(HttpConfig::default(), keys(), |_| {}).await;
    let c = &api.client;
    let message = assert_401(c.get(api.at("/metrics")).send().await.unwrap()).await;
    assert!(message.contains("Authorization: Bearer"), "{message}");
    let message = assert_401(
        c.get(api.at("/metrics"))
            .bearer_auth("sk_not_a_key")
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert!(message.contains("unknown API key"), "{message}");
    let message = assert_401(
        c.get(api.at("/metrics"))
            .header("authorization", ADMIN_KEY)
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert!(message.contains("malformed"), "{message}");
    // Every route that names a topic asks for a key before anything else.
    for response in [
        c.get(api.at("/topics")).send().await.unwrap(),
        c.post(api.at("/topics"))
            .json(&json!({"name": "x"}))
            .send()
            .await
            .unwrap(),
        c.get(api.at("/topics/orders.eu")).send().await.unwrap(),
        c.post(api.at("/topics/orders.eu/records"))
            .json(&json!({"value": "v"}))
            .send()
            .await
            .unwrap(),
        c.get(api.at("/topics/orders.eu/partitions/0/records?offset=0"))
            .send()
            .await
            .unwrap(),
        c.get(api.at("/groups/g/offsets")).send().await.unwrap(),
    ] {
        assert_401(response).await;
    }
    // Health needs no key.
    for path in ["/healthz", "/readyz"] {
        assert_eq!(c.get(api.at(path)).send().await.unwrap().status(), 200);
    }
    // Any valid key may read /metrics, even one without topic grants.
    let r = c
        .get(api.at("/metrics"))
        .bearer_auth(METRICS_KEY)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    assert!(
        r.text()
            .await
            .unwrap()
            .contains("# TYPE sluice_topics gauge")
    );
    api.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn admin_routes_follow_the_grants() {
    let api = Api::start_with(HttpConfig::default(), keys(), |_| {}).await;
    let c = &api.client;
    // The app key administers nothing: creating a topic is 403 naming the key and the topic.
    let r = c
        .post(api.at("/topics"))
        .bearer_auth(APP_KEY)
        .json(&json!({"name": "orders.eu", "partitions": 1}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 403);
    let body: Value = r.json().await.unwrap();
    let message = body["error"].as_str().unwrap();
    assert!(
        message.contains("\"app\"") && message.contains("\"orders.eu\""),
        "{message}"
    );
    for name in ["orders.eu", "payments"] {
        let r = c
            .post(api.at("/topics"))
            .bearer_auth(ADMIN_KEY)
            .json(&json!({"name": name, "partitions": 1}))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 201, "{}", r.text().await.unwrap());
    }
    // GET /topics lists only the topics the key has a grant on.
    let list = |secret: &'static str| {
        let request = c.get(api.at("/topics")).bearer_auth(secret);
        async move {
            let body: Value = request.send().await.unwrap().json().await.unwrap();
            body["topics"]
                .as_array()
                .unwrap()
                .iter()
                .map(|t| t["name"].as_str().unwrap().to_owned())
                .collect::<Vec<_>>()
        }
    };
    assert_eq!(list(ADMIN_KEY).await, ["orders.eu", "payments"]);
    assert_eq!(list(APP_KEY).await, ["orders.eu"]);
    assert!(list(METRICS_KEY).await.is_empty());
    // Describe: any grant on the topic.
    let describe = |secret: &'static str, topic: &str| {
        c.get(api.at(&format!("/topics/{topic}")))
            .bearer_auth(secret)
            .send()
    };
    assert_eq!(describe(APP_KEY, "orders.eu").await.unwrap().status(), 200);
    let r = describe(APP_KEY, "payments").await.unwrap();
    assert_eq!(r.status(), 403);
    let body: Value = r.json().await.unwrap();
    assert!(
        body["error"].as_str().unwrap().contains("\"payments\""),
        "{body}"
    );
    // Delete: admin only.
    let r = c
        .delete(api.at("/topics/payments"))
        .bearer_auth(APP_KEY)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 403);
    let r = c
        .delete(api.at("/topics/payments"))
        .bearer_auth(ADMIN_KEY)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 204);
    api.stop().await;
}

/// Produce needs write on the topic, reading records needs read.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn produce_and_read_follow_the_grants() {
    let api = Api::start_with(HttpConfig::default(), keys(), |_| {}).await;
    api.create_topic("orders.eu", 1);
    api.create_topic("orders.us", 1);
    let c = &api.client;
    let produce = |secret: &'static str, topic: &str| {
        c.post(api.at(&format!("/topics/{topic}/records")))
            .bearer_auth(secret)
            .json(&json!([{"key": "k", "value": "v"}]))
            .send()
    };
    let r = produce(APP_KEY, "orders.eu").await.unwrap();
    assert_eq!(r.status(), 200, "{}", r.text().await.unwrap());
    let r = produce(APP_KEY, "orders.us").await.unwrap();
    assert_eq!(r.status(), 403);
    let body: Value = r.json().await.unwrap();
    let message = body["error"].as_str().unwrap();
    assert!(
        message.contains("\"app\"") && message.contains("\"orders.us\""),
        "{message}"
    );
    assert_eq!(
        produce(METRICS_KEY, "orders.eu").await.unwrap().status(),
        403
    );

    let read = |secret: &'static str, topic: &str| {
        c.get(api.at(&format!("/topics/{topic}/partitions/0/records?offset=0")))
            .bearer_auth(secret)
            .send()
    };
    let r = read(APP_KEY, "orders.eu").await.unwrap();
    assert_eq!(r.status(), 200);
    let body: Value = r.json().await.unwrap();
    assert_eq!(body["records"][0]["value"], "v", "{body}");
    assert_eq!(read(APP_KEY, "orders.us").await.unwrap().status(), 200);
    assert_eq!(read(METRICS_KEY, "orders.eu").await.unwrap().status(), 403);
    api.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replaced_keys_apply_to_the_next_request() {
    let api = Api::start_with(
        HttpConfig::default(),
        vec![key("old", "sk_old", &[], &[], &[])],
        |_| {},
    )
    .await;
    let status = |secret: &'static str| {
        api.client
            .get(api.at("/metrics"))
            .bearer_auth(secret)
            .send()
    };
    assert_eq!(status("sk_old").await.unwrap().status(), 200);
    assert_eq!(status("sk_new").await.unwrap().status(), 401);

    api.state
        .auth
        .replace(vec![key("new", "sk_new", &[], &[], &[])])
        .unwrap();
    assert_eq!(status("sk_new").await.unwrap().status(), 200);
    assert_eq!(status("sk_old").await.unwrap().status(), 401);

    // A bad config is refused as a whole; the current keys stay.
    let bad = ApiKeyConfig {
        sha256: "0123".into(),
        ..key("newer", "sk_newer", &[], &[], &[])
    };
    let e = api.state.auth.replace(vec![bad]).unwrap_err();
    assert!(e.contains("64 hex characters"), "{e}");
    assert_eq!(status("sk_new").await.unwrap().status(), 200);
    api.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn declared_body_over_the_limit_is_413_before_it_is_read() {
    let config = HttpConfig {
        max_body_bytes: 1024,
        ..HttpConfig::default()
    };
    let api = Api::start_with(config, Vec::new(), |_| {}).await;
    api.create_topic("t", 1);
    let big = format!(r#"{{"name": "{}"}}"#, "x".repeat(2000));
    for path in ["/topics", "/topics/t/records", "/groups/g/offsets"] {
        let r = api
            .client
            .post(api.at(path))
            .header("content-type", "application/json")
            .body(big.clone())
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 413, "{path}");
        let body: Value = r.json().await.unwrap();
        let message = body["error"].as_str().unwrap();
        assert!(
            message.contains("2012 bytes") && message.contains("1024"),
            "{message}"
        );
    }

    // Declared, but never sent: the answer does not wait for the body.
    let mut tcp = tokio::net::TcpStream::connect(api.url.trim_start_matches("http://"))
        .await
        .unwrap();
    tcp.write_all(
        b"POST /topics HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\ncontent-length: 100000\r\n\r\n",
    )
    .await
    .unwrap();
    let head = read_head(&mut tcp).await;
    assert!(head.starts_with("HTTP/1.1 413"), "{head}");
    api.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chunked_body_over_the_limit_is_413() {
    let config = HttpConfig {
        max_body_bytes: 1024,
        ..HttpConfig::default()
    };
    let api = Api::start_with(config, Vec::new(), |_| {}).await;
    api.create_topic("t", 1);
    for path in ["/topics", "/topics/t/records"] {
        let mut tcp = tokio::net::TcpStream::connect(api.url.trim_start_matches("http://"))
            .await
            .unwrap();
        let head = format!(
            "POST {path} HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\ntransfer-encoding: chunked\r\n\r\n"
        );
        tcp.write_all(head.as_bytes()).await.unwrap();
        // 3 chunks of 500 bytes: over the limit only with the third.
        for _ in 0..3 {
            let chunk = " ".repeat(500);
            let _ = tcp
                .write_all(format!("{:x}\r\n{chunk}\r\n", chunk.len()).as_bytes())
                .await;
        }
        let _ = tcp.write_all(b"0\r\n\r\n").await;
        let head = read_head(&mut tcp).await;
        assert!(head.starts_with("HTTP/1.1 413"), "{path}: {head}");
    }
    // Under the limit, chunked is fine (the body then fails as JSON, not as size).
    let mut tcp = tokio::net::TcpStream::connect(api.url.trim_start_matches("http://"))
        .await
        .unwrap();
    tcp.write_all(
        b"POST /topics HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\ntransfer-encoding: chunked\r\n\r\n5\r\n     \r\n0\r\n\r\n",
    )
    .await
    .unwrap();
    let head = read_head(&mut tcp).await;
    assert!(head.starts_with("HTTP/1.1 400"), "{head}");
    api.stop().await;
}

/// Reads an HTTP response head (status line and headers) from a raw connection.
async fn read_head(tcp: &mut tokio::net::TcpStream) -> String {
    let mut buf = Vec::new();
    let mut chunk = [0u8; 4096];
    tokio::time::timeout(Duration::from_secs(5), async {
        while !buf.windows(4).any(|w| w == b"\r\n\r\n") {
            let n = tcp.read(&mut chunk).await.unwrap();
            if n == 0 {
                break;
            }
            buf.extend_from_slice(&chunk[..n]);
        }
    })
    .await
    .expect("no response head within 5 s");
    String::from_utf8_lossy(&buf).into_owned()
}

/// A request whose body is still arriving holds its permit; with a budget of one, the next
/// request gets 429, health checks still pass, and the budget frees when the request ends.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn requests_over_the_concurrency_budget_get_429() {
    let config = HttpConfig {
        max_concurrent_requests: 1,
        ..HttpConfig::default()
    };
    let api = Api::start_with(config, Vec::new(), |_| {}).await;
    let mut slow = tokio::net::TcpStream::connect(api.url.trim_start_matches("http://"))
        .await
        .unwrap();
    slow.write_all(
        b"POST /topics HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\ncontent-length: 20\r\n\r\n{\"name\":",
    )
    .await
    .unwrap();
    let limits = &api.state.limits;
    eventually("the slow request holds the permit", || {
        limits.in_flight() == 1
    })
    .await;

    let r = api.client.get(api.at("/metrics")).send().await.unwrap();
    assert_eq!(r.status(), 429);
    assert_eq!(r.headers()["retry-after"], "1");
    let body: Value = r.json().await.unwrap();
    assert!(
        body["error"].as_str().unwrap().contains("limit is 1"),
        "{body}"
    );
    assert_eq!(
        api.client
            .get(api.at("/healthz"))
            .send()
            .await
            .unwrap()
            .status(),
        200
    );

    slow.write_all(b" \"slow\"}    ").await.unwrap();
    let head = read_head(&mut slow).await;
    assert!(head.starts_with("HTTP/1.1 201"), "{head}");
    eventually("the permit is back", || limits.in_flight() == 0).await;
    let r = api.client.get(api.at("/metrics")).send().await.unwrap();
    assert_eq!(r.status(), 200);
    api.stop().await;
}

/// A long poll counts against the budget for its whole wait.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_long_poll_holds_its_permit() {
    let config = HttpConfig {
        max_concurrent_requests: 1,
        ..HttpConfig::default()
    };
    let api = Api::start_with(config, Vec::new(), |_| {}).await;
    api.create_topic("quiet", 1);
    let poll = api
        .client
        .get(api.at("/topics/quiet/partitions/0/records?offset=0&timeout_ms=2000"))
        .send();
    let poll = tokio::spawn(poll);
    let limits = &api.state.limits;
    eventually("the long poll holds the permit", || limits.in_flight() == 1).await;
    let started = Instant::now();
    let r = api.client.get(api.at("/topics")).send().await.unwrap();
    assert_eq!(r.status(), 429);
    assert_eq!(r.headers()["retry-after"], "1");
    assert!(
        started.elapsed() < Duration::from_secs(1),
        "429 is immediate"
    );
    let polled = poll.await.unwrap().unwrap();
    assert_eq!(polled.status(), 200);
    let body: Value = polled.json().await.unwrap();
    assert_eq!(body["records"], json!([]));
    eventually("the permit is back", || limits.in_flight() == 0).await;
    assert_eq!(
        api.client
            .get(api.at("/topics"))
            .send()
            .await
            .unwrap()
            .status(),
        200
    );
    api.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_lists_every_metric_after_traffic() {
    let api = Api::start().await;
    let c = &api.client;
    let r = c
        .post(api.at("/topics"))
        .json(&json!({"name": "orders", "partitions": 2}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 201);
    assert_eq!(c.get(api.at("/nope")).send().await.unwrap().status(), 404);
    assert_eq!(
        c.get(api.at("/topics/orders"))
            .send()
            .await
            .unwrap()
            .status(),
        200
    );
    // Metrics are recorded once each response has been sent, which is just after the client
    // sees it.
    let metrics = &api.state.metrics;
    eventually("3 requests recorded", || metrics.requests_total() >= 3).await;

    let text = c
        .get(api.at("/metrics"))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    for name in [
        "sluice_kafka_requests_total",
        "sluice_kafka_request_duration_seconds",
        "sluice_http_requests_total",
        "sluice_http_request_duration_seconds",
        "sluice_bytes_in_total",
        "sluice_bytes_out_total",
        "sluice_records_in_total",
        "sluice_records_out_total",
        "sluice_fsync_duration_seconds",
        "sluice_fsyncs_total",
        "sluice_fsync_bytes_total",
        "sluice_topics",
        "sluice_partitions",
        "sluice_partition_high_watermark",
        "sluice_partition_log_start_offset",
        "sluice_partition_size_bytes",
        "sluice_consumer_group_lag",
        "sluice_consumer_groups",
    ] {
        assert!(
            text.contains(&format!("# TYPE {name} ")),
            "{name} in\n{text}"
        );
    }
    for line in [
        r#"sluice_http_requests_total{method="POST",route="/topics",status="201"} 1"#,
        r#"sluice_http_requests_total{method="GET",route="unmatched",status="404"} 1"#,
        r#"sluice_http_requests_total{method="GET",route="/topics/{topic}",status="200"} 1"#,
        r#"sluice_http_request_duration_seconds_count{method="POST",route="/topics"} 1"#,
        r#"sluice_topics 1"#,
        r#"sluice_partitions 2"#,
        r#"sluice_partition_high_watermark{topic="orders",partition="1"} 0"#,
    ] {
        assert!(text.contains(line), "{line} in\n{text}");
    }
    let bytes_in = text
        .lines()
        .find_map(|l| l.strip_prefix(r#"sluice_bytes_in_total{listener="http"} "#))
        .unwrap();
    assert!(bytes_in.parse::<u64>().unwrap() > 0, "{text}");
    api.stop().await;
}
