//! An in-process broker with its HTTP API on a free 127.0.0.1 port, for the HTTP tests.
#![allow(dead_code)]

use std::sync::Arc;

use sluice_broker::{Broker, BrokerConfig};
use sluice_http::auth::{ApiKeyConfig, Auth, hash_key_hex};
use sluice_http::{AppState, HttpConfig, StorageHooks};
use tokio::sync::watch;

/// A broker and its HTTP API; stopped (and its data removed) when dropped.
pub struct Api {
    pub broker: Arc<Broker>,
    pub state: Arc<AppState>,
    /// e.g. `http://127.0.0.1:40123`
    pub url: String,
    pub client: reqwest::Client,
    stop: watch::Sender<bool>,
    task: Option<tokio::task::JoinHandle<std::io::Result<()>>>,
    _dir: tempfile::TempDir,
}

impl Api {
    /// Default limits, no API keys.
    pub async fn start() -> Api {
        Api::start_with(HttpConfig::default(), Vec::new(), |_| {}).await
    }

    /// With these limits and keys; `tune` adjusts the broker config.
    pub async fn start_with(
        config: HttpConfig,
        keys: Vec<ApiKeyConfig>,
        tune: impl FnOnce(&mut BrokerConfig),
    ) -> Api {
        Api::start_full(config, keys, tune, None).await
    }

    /// Default limits, no API keys, and a storage backend's hooks.
    pub async fn start_with_storage(hooks: StorageHooks) -> Api {
        Api::start_full(HttpConfig::default(), Vec::new(), |_| {}, Some(hooks)).await
    }

    async fn start_full(
        config: HttpConfig,
        keys: Vec<ApiKeyConfig>,
        tune: impl FnOnce(&mut BrokerConfig),
        storage: Option<StorageHooks>,
    ) -> Api {
        let dir = tempfile::tempdir().unwrap();
        let mut broker_config = BrokerConfig::new(dir.path());
        tune(&mut broker_config);
        let broker = Arc::new(Broker::open(broker_config).unwrap());
        let auth = Arc::new(Auth::new(keys).unwrap());
        let (stop, stop_rx) = watch::channel(false);
        let state = AppState::with_storage(Arc::clone(&broker), config, auth, stop_rx, storage);
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let task = tokio::spawn(sluice_http::serve(listener, Arc::clone(&state)));
        Api {
            broker,
            state,
            url,
            client: reqwest::Client::new(),
            stop,
            task: Some(task),
            _dir: dir,
        }
    }

    /// `self.url` + `path`.
    pub fn at(&self, path: &str) -> String {
        format!("{}{}", self.url, path)
    }

    /// Creates a topic directly on the broker.
    pub fn create_topic(&self, name: &str, partitions: i32) {
        self.broker
            .create_topic(name, partitions, Default::default())
            .unwrap();
    }

    /// Stops the server (waiting for requests in flight) and closes the broker.
    pub async fn stop(mut self) {
        let _ = self.stop.send(true);
        if let Some(task) = self.task.take() {
            task.await.unwrap().unwrap();
        }
        self.broker.shutdown();
    }
}

impl Drop for Api {
    fn drop(&mut self) {
        let _ = self.stop.send(true);
        if let Some(task) = self.task.take() {
            task.abort();
        }
    }
}

/// An API key config for `secret` with these grants (topic patterns).
pub fn key(
    name: &str,
    secret: &str,
    read: &[&str],
    write: &[&str],
    admin: &[&str],
) -> ApiKeyConfig {
    let list = |l: &[&str]| l.iter().map(|s| (*s).to_owned()).collect();
    ApiKeyConfig {
        name: name.to_owned(),
        sha256: hash_key_hex(secret),
        read: list(read),
        write: list(write),
        admin: list(admin),
        principal: None,
    }
}
