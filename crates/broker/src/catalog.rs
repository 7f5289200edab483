//! Topics in cluster mode: this broker's copy of the store's topic catalog, made real.
//!
//! [`CatalogSync`] applies the catalog ([`ClusterMeta::catalog`]) to the
//! [`TopicRegistry`](crate::TopicRegistry): at open, then at every change by a background task
//! (started by `Broker::open_cluster` when it runs inside a tokio runtime, else by
//! `Broker::start_cluster_sync` or the first request), and right after a change this broker
//! made ([`CatalogSync::refresh`]), so that its answer is already true here.
//!
//! A topic change in cluster mode: checks as in single-broker mode (the handler) → the store
//! ([`ClusterMeta::create_topic`], ...) → [`ClusterMeta::refresh`] → apply → answer. Other
//! brokers see it once their own copy refreshes (their refresh interval).
//!
//! [`ChangeError`] is why such a change failed: a check here, or the store's answer.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use tokio::sync::watch;

use crate::cluster::{ClusterError, ClusterMeta};
use crate::config::BrokerConfig;
use crate::topics::{CatalogApplied, TopicError, TopicRegistry};

/// How soon the background task tries again after a catalog it could not fully apply (a
/// partition that did not open) when no newer catalog arrives meanwhile.
pub const CATALOG_RETRY_INTERVAL: Duration = Duration::from_secs(5);

/// Why a topic change in cluster mode failed.
#[derive(Debug, thiserror::Error)]
pub enum ChangeError {
    /// Refused by a check on this broker, or the change is in the store but this broker could
    /// not open what it needs (storage error; a retry of the read usually works).
    #[error(transparent)]
    Topic(#[from] TopicError),
    /// Refused by the metadata store, or it did not answer.
    #[error(transparent)]
    Cluster(#[from] ClusterError),
}

impl ChangeError {
    /// Its Kafka error code.
    pub fn code(&self) -> i16 {
        match self {
            ChangeError::Topic(e) => crate::errors::topic_error_code(e),
            ChangeError::Cluster(e) => crate::handlers::cluster_error_code(e),
        }
    }
}

/// The result of the refresh after a change the store made: its failure says the change
/// itself is made (a retry then finds it done: TOPIC_ALREADY_EXISTS, UNKNOWN_TOPIC...).
pub(crate) fn refreshed(
    refresh: Result<CatalogApplied, ClusterError>,
) -> Result<CatalogApplied, ClusterError> {
    refresh.map_err(|e| {
        tracing::warn!(error = %e, "reloading the cluster catalog after a change");
        ClusterError::Unavailable(format!(
            "the change is made, but this broker could not reload the catalog: {e}"
        ))
    })
}

/// The topic `name` that was just created with `id`, once the refreshed catalog is applied:
/// open here, or why not (its partitions did not open, from `applied`; or it changed again
/// meanwhile).
pub(crate) fn opened(
    topics: &TopicRegistry,
    name: &str,
    id: uuid::Uuid,
    applied: &mut CatalogApplied,
) -> Result<Arc<crate::Topic>, ChangeError> {
    if let Some(topic) = topics.get(name).filter(|t| t.id == id) {
        return Ok(topic);
    }
    if let Some(i) = applied.failed.iter().position(|(n, _)| n == name) {
        return Err(ChangeError::Topic(applied.failed.swap_remove(i).1));
    }
    Err(ChangeError::Cluster(ClusterError::Unavailable(format!(
        "topic '{name}' is created, but changed again before this broker could open it"
    ))))
}

/// What a topic deletion means beyond the registry (forgetting the topic's committed group
/// offsets), called with the topic's name.
pub(crate) type OnTopicRemoved = Box<dyn Fn(&str) + Send + Sync>;

/// Applies the cluster's catalog to the broker's topics.
pub(crate) struct CatalogSync {
    cluster: Arc<dyn ClusterMeta>,
    topics: Arc<TopicRegistry>,
    config: BrokerConfig,
    on_removed: OnTopicRemoved,
    started: AtomicBool,
    /// Ends the background task when the broker shuts down (set) or is dropped (closed).
    stop: watch::Sender<bool>,
}

impl std::fmt::Debug for CatalogSync {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CatalogSync")
            .field("cluster", &self.cluster)
            .field("started", &self.started)
            .finish_non_exhaustive()
    }
}

impl CatalogSync {
    pub(crate) fn new(
        cluster: Arc<dyn ClusterMeta>,
        topics: Arc<TopicRegistry>,
        config: BrokerConfig,
        on_removed: OnTopicRemoved,
    ) -> Arc<CatalogSync> {
        Arc::new(CatalogSync {
            cluster,
            topics,
            config,
            on_removed,
            started: AtomicBool::new(false),
            stop: watch::channel(false).0,
        })
    }

    /// Applies the newest catalog copy now, on this thread (it may open partitions: blocking
    /// I/O), and tells `on_removed` of every topic dropped.
    pub(crate) fn apply_now(&self) -> CatalogApplied {
        let catalog = Arc::clone(&self.cluster.catalog().borrow());
        let applied = self.topics.apply_catalog(&catalog, &self.config);
        for name in &applied.removed {
            (self.on_removed)(name);
        }
        if !applied.skipped {
            tracing::debug!(
                version = catalog.version,
                changed = applied.changed,
                removed = applied.removed.len(),
                failed = applied.failed.len(),
                "applied the cluster catalog"
            );
        }
        applied
    }

    /// [`CatalogSync::apply_now`] on the blocking pool.
    pub(crate) async fn apply(self: &Arc<Self>) -> CatalogApplied {
        let this = Arc::clone(self);
        match tokio::task::spawn_blocking(move || this.apply_now()).await {
            Ok(applied) => applied,
            Err(e) => {
                tracing::error!(error = %e, "applying the cluster catalog");
                CatalogApplied::default()
            }
        }
    }

    /// Reloads the catalog copy from the store and applies it: after a change made through
    /// this broker, before answering it.
    pub(crate) async fn refresh(self: &Arc<Self>) -> Result<CatalogApplied, ClusterError> {
        self.cluster.refresh().await?;
        Ok(self.apply().await)
    }

    /// Starts the background task that applies every catalog change as it arrives, once,
    /// if a tokio runtime is at hand; returns whether it runs.
    pub(crate) fn start(self: &Arc<Self>) -> bool {
        if self.started.load(Ordering::Acquire) {
            return true;
        }
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return false;
        };
        if self.started.swap(true, Ordering::AcqRel) {
            return true;
        }
        let catalog = self.cluster.catalog();
        let stop = self.stop.subscribe();
        runtime.spawn(Self::run(Arc::downgrade(self), catalog, stop));
        true
    }

    /// Ends the background task.
    pub(crate) fn stop(&self) {
        self.stop.send_replace(true);
    }

    /// The background task. It holds the sync weakly: once the broker is dropped (or shut
    /// down) it ends.
    async fn run(
        this: std::sync::Weak<Self>,
        mut catalog: watch::Receiver<Arc<crate::cluster::Catalog>>,
        mut stop: watch::Receiver<bool>,
    ) {
        // What arrived before the task started is applied first.
        catalog.mark_changed();
        let mut retry = false;
        loop {
            tokio::select! {
                // Stop first: a change that arrived with (or after) the stop is not applied.
                biased;
                _ = stop.wait_for(|stop| *stop) => return,
                changed = catalog.changed() => {
                    if changed.is_err() {
                        tracing::info!("the cluster catalog is closed; topics stay as they are");
                        return;
                    }
                }
                _ = tokio::time::sleep(CATALOG_RETRY_INTERVAL), if retry => {}
            }
            catalog.borrow_and_update();
            let Some(sync) = this.upgrade() else {
                return;
            };
            retry = !sync.apply().await.failed.is_empty();
        }
    }
}
