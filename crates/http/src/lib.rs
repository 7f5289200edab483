//! # sluice-http: the HTTP API
//!
//! Plain HTTP for everything that is not a Kafka client (curl, scripts, serverless functions):
//! produce and read records, send events for triggers, manage topics and triggers, commit and
//! fetch consumer-group offsets, and the operational routes `/healthz`, `/readyz` and
//! `/metrics`. Routes and bodies are documented in
//! `docs/http-api.md` and `docs/openapi.yaml`.
//!
//! An adapter over [`sluice_broker::Broker`], like the Kafka listener: records produced here
//! become ordinary RecordBatch v2 batches in the same partition logs (a Kafka consumer reads
//! them), and reads decode whatever Kafka producers wrote.
//!
//! - `produce`: `POST /topics/{topic}/records` (JSON or the binary batch format), answered
//!   once the records are durable;
//! - `events`: `POST /topics/{topic}/events`, events (entity id, event name, JSON data) as
//!   records a trigger reads, through `produce`'s path;
//! - `consume`: `GET /topics/{topic}/partitions/{p}/records`, a long poll;
//! - `topics`, `offsets`: admin and consumer-group offsets;
//! - `triggers`: `/triggers`, event triggers through [`sluice_triggers::Manager`];
//! - [`auth`]: API keys (`Authorization: Bearer`), each with topic grants;
//! - [`limits`]: body size, records per request, concurrent requests, the body-read timeout;
//!   the middleware that meters every request;
//! - [`metrics`]: the HTTP API's own `/metrics` series (requests, latency, connections, bytes);
//! - [`conn`]: the accept loop, the connection cap, header-read, idle and write-stall
//!   deadlines per connection;
//! - `error`: every failure is a 4xx/5xx with a JSON `{"error": "..."}` saying what to fix.

pub mod auth;
pub mod conn;
mod consume;
mod error;
mod events;
mod health;
pub mod limits;
pub mod metrics;
mod offsets;
mod produce;
mod topics;
mod triggers;

use std::sync::Arc;
use std::sync::atomic::AtomicU32;

use axum::Router;
use axum::routing::{get, post};
use sluice_broker::Broker;
use tokio::net::TcpListener;
use tokio::sync::watch;

pub use error::ApiError;

/// Limits of the HTTP API.
#[derive(Debug, Clone)]
pub struct HttpConfig {
    /// Largest request body accepted; larger gets 413.
    pub max_body_bytes: usize,
    /// Most records one produce request may carry; more gets 413.
    pub max_records_per_request: usize,
    /// Requests served at once, long polls included; more gets 429 with `Retry-After`.
    pub max_concurrent_requests: usize,
    /// Largest `max_bytes` a read may ask for (larger asks are capped to it).
    pub fetch_max_bytes: usize,
    /// Longest `timeout_ms` a read may ask for; more gets 400.
    pub fetch_timeout_max_ms: u64,
    /// How long a connection may take to send one request's whole header (from its first byte,
    /// or from the end of the previous response on a kept-alive connection); slower is closed.
    /// 10 s is far beyond any real client on a working network and short enough that a
    /// slowloris cannot pile up sockets.
    pub header_read_timeout_ms: u64,
    /// How long a request body may take to arrive, whole, from the handler's first read; slower
    /// gets 408 and its request slot back. 30 s moves the 64 MiB default body limit at ~2 MiB/s.
    pub body_read_timeout_ms: u64,
    /// How long a kept-alive connection may sit with no request in flight before it is closed.
    /// 60 s is longer than the idle timeouts of common HTTP client pools (so they close first
    /// and never reuse a socket we are closing), short enough that idle sockets do not pile up.
    pub idle_timeout_ms: u64,
    /// HTTP connections open at once; one more is closed as soon as it is accepted. 4096 is four
    /// times the default request budget (clients keep idle pooled connections), and each
    /// connection costs a socket and a few KiB of buffers (~tens of MiB at the cap).
    pub max_connections: usize,
}

impl Default for HttpConfig {
    fn default() -> Self {
        HttpConfig {
            max_body_bytes: 64 << 20,
            max_records_per_request: 100_000,
            max_concurrent_requests: 1024,
            fetch_max_bytes: 64 << 20,
            fetch_timeout_max_ms: 30_000,
            header_read_timeout_ms: 10_000,
            body_read_timeout_ms: 30_000,
            idle_timeout_ms: 60_000,
            max_connections: 4096,
        }
    }
}

/// Why an [`HttpConfig`] was refused; the message names the `serve` setting to fix.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct ConfigError(pub String);

impl HttpConfig {
    /// Refuses values that would make the API serve nothing: a zero count refuses every body,
    /// record, request or connection, and a zero timeout would cut off every request.
    pub fn validate(&self) -> Result<(), ConfigError> {
        for (name, v) in [
            ("http_max_body_bytes", self.max_body_bytes),
            ("http_max_records_per_request", self.max_records_per_request),
            ("http_max_concurrent_requests", self.max_concurrent_requests),
            ("http_max_connections", self.max_connections),
            ("fetch_max_bytes", self.fetch_max_bytes),
        ] {
            if v == 0 {
                return Err(ConfigError(format!("{name} must be at least 1")));
            }
        }
        for (name, v) in [
            ("http_header_read_timeout_ms", self.header_read_timeout_ms),
            ("http_body_read_timeout_ms", self.body_read_timeout_ms),
            ("http_idle_timeout_ms", self.idle_timeout_ms),
        ] {
            if v == 0 {
                return Err(ConfigError(format!(
                    "{name} must be at least 1 (a timeout of 0 would cut off every request)"
                )));
            }
        }
        Ok(())
    }
}

/// What every handler shares.
#[derive(Debug)]
pub struct AppState {
    pub broker: Arc<Broker>,
    pub config: HttpConfig,
    pub auth: Arc<auth::Auth>,
    pub limits: limits::Limits,
    /// The HTTP API's own series in `/metrics`.
    pub metrics: metrics::HttpMetrics,
    /// True once shutdown has begun: `/readyz` answers 503 and long polls end.
    pub shutdown: watch::Receiver<bool>,
    /// Round-robin counter for produce requests with keyless records: each such request takes
    /// the next value, modulo the topic's partition count.
    pub next_partition: AtomicU32,
    /// What the storage backend adds to `/metrics` and `/readyz` (object-storage mode).
    pub storage: Option<StorageHooks>,
    /// The `/triggers` routes' manager; `None` (the routes answer 503) where the broker runs
    /// no triggers (cluster mode, for now). Set with [`AppState::with_triggers`].
    pub triggers: Option<Arc<sluice_triggers::Manager>>,
}

/// A storage backend's part of the operational routes.
#[derive(Clone)]
pub struct StorageHooks {
    /// More series for `/metrics` (object-storage mode's PUTs, GETs and caches, Prometheus
    /// text), appended after the broker's.
    pub series: Arc<dyn Fn() -> String + Send + Sync>,
    /// Why the backend cannot take writes now (`/readyz` answers 503 with it), as
    /// `(status, error)`, e.g. `("writer_lease_lapsed", "...")`; `None` when it can.
    pub not_ready: Arc<dyn Fn() -> Option<(&'static str, String)> + Send + Sync>,
}

impl std::fmt::Debug for StorageHooks {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("StorageHooks")
    }
}

impl AppState {
    pub fn new(
        broker: Arc<Broker>,
        config: HttpConfig,
        auth: Arc<auth::Auth>,
        shutdown: watch::Receiver<bool>,
    ) -> Arc<AppState> {
        Self::with_storage(broker, config, auth, shutdown, None)
    }

    /// [`AppState::new`] with a storage backend's part of `/metrics` and `/readyz`.
    pub fn with_storage(
        broker: Arc<Broker>,
        config: HttpConfig,
        auth: Arc<auth::Auth>,
        shutdown: watch::Receiver<bool>,
        storage: Option<StorageHooks>,
    ) -> Arc<AppState> {
        let limits = limits::Limits::new(&config);
        Arc::new(AppState {
            broker,
            config,
            auth,
            limits,
            metrics: metrics::HttpMetrics::default(),
            shutdown,
            next_partition: AtomicU32::new(0),
            storage,
            triggers: None,
        })
    }

    /// This state with the `/triggers` routes served by `triggers`, e.g.
    /// `AppState::with_storage(...).with_triggers(Some(manager))`.
    ///
    /// # Panics
    ///
    /// When the state is already shared (a clone of the `Arc` exists): call it on the state
    /// just built, before handing it to [`router`] or [`serve`].
    pub fn with_triggers(
        self: Arc<Self>,
        triggers: Option<Arc<sluice_triggers::Manager>>,
    ) -> Arc<AppState> {
        let mut state = Arc::into_inner(self)
            .expect("AppState::with_triggers is called on a state that is not shared yet");
        state.triggers = triggers;
        Arc::new(state)
    }
}

/// The routes, with the limits and metrics middleware around them.
pub fn router(state: Arc<AppState>) -> Router {
    let routes = Router::new()
        .route("/topics", get(topics::list).post(topics::create))
        .route(
            "/topics/{topic}",
            get(topics::describe).delete(topics::delete),
        )
        .route("/topics/{topic}/records", post(produce::produce))
        .route("/topics/{topic}/events", post(events::produce_events))
        .route(
            "/topics/{topic}/partitions/{partition}/records",
            get(consume::consume),
        )
        .route(
            "/groups/{group}/offsets",
            get(offsets::fetch).post(offsets::commit),
        )
        .route("/triggers", get(triggers::list).post(triggers::create))
        .route(
            "/triggers/{name}",
            get(triggers::describe).delete(triggers::delete),
        )
        .route("/healthz", get(health::healthz))
        .route("/readyz", get(health::readyz))
        .route("/metrics", get(health::metrics))
        .fallback(error::no_route)
        .method_not_allowed_fallback(error::method_not_allowed);
    limits::wrap(routes, Arc::clone(&state)).with_state(state)
}

/// Serves the HTTP API on `listener` until `shutdown` becomes true; requests in flight are
/// finished (long polls end early) before this returns. See [`conn`] for the connection
/// limits.
pub async fn serve(listener: TcpListener, state: Arc<AppState>) -> std::io::Result<()> {
    conn::serve(listener, state).await
}

/// [`serve`] over TLS (`sluice serve --http-tls`): each connection's handshake uses the config
/// `tls` gives at the time it is accepted.
pub async fn serve_tls(
    listener: TcpListener,
    state: Arc<AppState>,
    tls: conn::TlsConfigSource,
) -> std::io::Result<()> {
    conn::serve_tls(listener, state, tls).await
}

#[cfg(test)]
mod config_tests {
    use super::*;

    #[test]
    fn validate_refuses_zero_limits_and_timeouts() {
        assert_eq!(HttpConfig::default().validate(), Ok(()));
        let refused = |change: fn(&mut HttpConfig)| {
            let mut c = HttpConfig::default();
            change(&mut c);
            c.validate().unwrap_err().0
        };
        assert_eq!(
            refused(|c| c.max_body_bytes = 0),
            "http_max_body_bytes must be at least 1"
        );
        assert_eq!(
            refused(|c| c.max_connections = 0),
            "http_max_connections must be at least 1"
        );
        assert!(
            refused(|c| c.idle_timeout_ms = 0)
                .starts_with("http_idle_timeout_ms must be at least 1")
        );
    }
}
