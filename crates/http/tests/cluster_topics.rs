//! The HTTP topic routes in cluster mode: two brokers over one in-memory metadata store
//! (the broker tests' `cluster_fake.rs`). A create or delete through one broker's API answers
//! once that broker has the change; the other has it after its catalog refresh; the store's
//! refusals are 409/404/400 and a store that does not answer a 503.

#[path = "../../broker/tests/common/cluster_fake.rs"]
mod cluster_fake;

use std::sync::Arc;
use std::time::{Duration, Instant};

use cluster_fake::{FakeBackend, FakeDb, FakeMeta};
use serde_json::{Value, json};
use sluice_broker::cluster::ClusterMeta;
use sluice_broker::storage::PartitionOpener;
use sluice_broker::{Broker, BrokerConfig};
use sluice_http::auth::Auth;
use sluice_http::{AppState, HttpConfig};
use tokio::sync::watch;

/// A broker in cluster mode with its HTTP API on a free loopback port.
struct Node {
    broker: Arc<Broker>,
    meta: Arc<FakeMeta>,
    url: String,
    client: reqwest::Client,
    stop: watch::Sender<bool>,
    task: tokio::task::JoinHandle<std::io::Result<()>>,
    _dir: tempfile::TempDir,
}

impl Node {
    async fn start(db: &Arc<FakeDb>, id: i32) -> Node {
        let dir = tempfile::tempdir().unwrap();
        let meta = db.join(id, 9000 + id, "zone");
        let config = BrokerConfig::new(dir.path());
        let opening = {
            let meta = Arc::clone(&meta) as Arc<dyn ClusterMeta>;
            let backend = FakeBackend::new() as Arc<dyn PartitionOpener>;
            let clock = Arc::new(sluice_broker::SystemClock);
            move || Broker::open_cluster(config, clock, backend, meta).unwrap()
        };
        let broker = Arc::new(tokio::task::spawn_blocking(opening).await.unwrap());
        let auth = Arc::new(Auth::new(Vec::new()).unwrap());
        let (stop, stop_rx) = watch::channel(false);
        let state = AppState::with_storage(
            Arc::clone(&broker),
            HttpConfig::default(),
            auth,
            stop_rx,
            None,
        );
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let task = tokio::spawn(sluice_http::serve(listener, state));
        Node {
            broker,
            meta,
            url,
            client: reqwest::Client::new(),
            stop,
            task,
            _dir: dir,
        }
    }

    async fn send(&self, request: reqwest::RequestBuilder) -> (u16, Value) {
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

    async fn create(&self, body: Value) -> (u16, Value) {
        let url = format!("{}/topics", self.url);
        self.send(self.client.post(url).json(&body)).await
    }

    async fn get(&self, topic: &str) -> (u16, Value) {
        let url = format!("{}/topics/{topic}", self.url);
        self.send(self.client.get(url)).await
    }

    async fn delete(&self, topic: &str) -> (u16, Value) {
        let url = format!("{}/topics/{topic}", self.url);
        self.send(self.client.delete(url)).await
    }

    /// Polls `GET /topics/{topic}` until it answers `status` (the catalog task applies in the
    /// background).
    async fn eventually(&self, topic: &str, status: u16) -> Value {
        let started = Instant::now();
        loop {
            let (got, body) = self.get(topic).await;
            if got == status {
                return body;
            }
            assert!(
                started.elapsed() < Duration::from_secs(10),
                "{topic}: {got} {body}"
            );
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }

    async fn stop(self) {
        let _ = self.stop.send(true);
        self.task.await.unwrap().unwrap();
        self.broker.shutdown();
    }
}

#[track_caller]
fn assert_error(answer: &(u16, Value), status: u16, needle: &str) {
    let (got, body) = answer;
    assert_eq!(*got, status, "{body}");
    let message = body["error"].as_str().unwrap();
    assert!(message.contains(needle), "'{message}' lacks '{needle}'");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn topic_routes_change_the_store_and_answer_once_applied() {
    let db = FakeDb::new();
    let a = Node::start(&db, 1).await;
    let b = Node::start(&db, 2).await;

    let (status, created) = a
        .create(json!({"name": "clicks", "partitions": 2, "configs": {"retention.ms": 60000}}))
        .await;
    assert_eq!(status, 201, "{created}");
    assert_eq!(created["partitions"].as_array().unwrap().len(), 2);
    assert_eq!(created["configs"]["retention.ms"], "60000");
    let id = created["id"].as_str().unwrap().to_owned();
    assert_eq!(db.catalog().topics["clicks"].id.to_string(), id);
    // Answered only once A has it.
    assert_eq!(a.get("clicks").await.0, 200);

    // B before its refresh: unknown here, and the store refuses a second create.
    assert_eq!(b.get("clicks").await.0, 404);
    assert_error(
        &b.create(json!({"name": "clicks"})).await,
        409,
        "already exists",
    );
    b.meta.poll();
    let seen = b.eventually("clicks", 200).await;
    assert_eq!(seen["id"], id.as_str());
    assert_eq!(seen["configs"]["retention.ms"], "60000");

    // Checks as in single-broker mode, before the store.
    let version = db.catalog().version;
    assert_error(
        &a.create(json!({"name": "x", "partitions": 0})).await,
        400,
        "partitions must be between",
    );
    assert_error(
        &a.create(json!({"name": "x", "configs": {"retention.ms": "soon"}}))
            .await,
        400,
        "integer",
    );
    assert_eq!(db.catalog().version, version);

    // Deleted through B; A drops it after its refresh; a second delete is the store's 404.
    assert_eq!(b.delete("clicks").await.0, 204);
    assert_eq!(b.get("clicks").await.0, 404);
    a.meta.poll();
    a.eventually("clicks", 404).await;
    assert_error(&a.delete("clicks").await, 404, "does not exist");

    // The store down: 503, retry; nothing made.
    db.set_down(true);
    assert_error(
        &a.create(json!({"name": "later"})).await,
        503,
        "metadata store",
    );
    assert_error(&a.delete("later").await, 503, "retry");
    db.set_down(false);
    assert_eq!(a.create(json!({"name": "later"})).await.0, 201);

    a.stop().await;
    b.stop().await;
}
