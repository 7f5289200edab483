//! # sluice-broker: Kafka request semantics
//!
//! Joins the wire layer (`sluice-protocol`) and the storage layer (`sluice-log`). The server
//! hands each decoded request to [`Broker::handle`], which dispatches to one handler per API
//! (`handlers/`), and gets back the response to encode (or none, for `acks=0` produce).
//!
//! - [`topics`]: the topics on disk and their partitions;
//! - [`storage`]: [`storage::PartitionStorage`], the one door to a partition's data (the local
//!   log is its first implementation), and [`Broker::read`], the read every listener uses;
//! - [`config`]: broker settings and topic configs;
//! - [`errors`]: the one map from Sluice errors to Kafka error codes;
//! - [`cluster`] and [`catalog`]: cluster mode (many brokers over one bucket and one
//!   PostgreSQL): what the broker asks of the shared metadata store, and the topic catalog
//!   applied to [`topics`];
//! - `handlers/`: one file per API.
//!
//! Three ways to open: [`Broker::open`] (local logs), [`Broker::open_with`] (one broker on a
//! bucket) and [`Broker::open_cluster`] (one of many brokers: topics, producer ids and the live
//! brokers come from the metadata store; admin requests change the store, then answer once
//! this broker's copy shows the change).
//!
//! Produce path: `handlers::produce` appends each partition's batches (*appended*), awaits
//! their durability (*durable*), then answers (*acknowledged*). Fetch path: `handlers::fetch`
//! reads durable batches and, below `min_bytes`, parks until a high watermark moves or
//! `max_wait_ms` passes.

mod authz;
pub mod catalog;
pub mod cluster;
pub mod config;
pub mod errors;
pub use sluice_groups as groups;
mod handlers;
pub mod log_limiter;
pub mod memory;
pub mod metrics;
pub mod producers;
pub mod shared_files;
pub mod storage;
pub mod throttle;
pub mod topics;

use std::collections::BTreeMap;
use std::sync::Arc;

use futures::FutureExt;
use futures::future::BoxFuture;
pub use sluice_log::{Clock, SystemClock};
use sluice_log::{CommitConfig, GroupCommitter};
use sluice_protocol::codec::Request;
use sluice_protocol::kafka_protocol::messages::alter_user_scram_credentials_response::AlterUserScramCredentialsResult;
use sluice_protocol::kafka_protocol::messages::{
    AlterUserScramCredentialsResponse, DescribeUserScramCredentialsResponse, RequestKind,
    ResponseKind, SaslAuthenticateResponse, SaslHandshakeResponse,
};
use sluice_protocol::kafka_protocol::protocol::StrBytes;

pub use config::{BrokerConfig, TopicConfig};
use groups::assignor::TopicInfo;
pub use topics::{Topic, TopicError, TopicRegistry};
/// Topic ids ([`Topic::id`], [`cluster::ClusterMeta`]) are `uuid::Uuid`s.
pub use uuid;
use uuid::Uuid;

/// Why an append was refused; [`AppendError::code`] is its Kafka error code (through the one
/// map, `errors.rs`) and `Display` a message that says what to fix.
#[derive(Debug, thiserror::Error)]
#[error(transparent)]
pub struct AppendError(#[from] handlers::produce::ProduceError);

impl AppendError {
    /// The Kafka error code a Produce of these records would have answered.
    pub fn code(&self) -> i16 {
        errors::produce_error_code(&self.0)
    }
}

/// The broker: topics, their logs, and the group committer that makes appends durable.
#[derive(Debug)]
pub struct Broker {
    config: BrokerConfig,
    /// Shared with the catalog task in cluster mode.
    topics: Arc<TopicRegistry>,
    committer: GroupCommitter,
    clock: Arc<dyn Clock>,
    producer_ids: producers::ProducerIds,
    groups: Arc<groups::Coordinator>,
    metrics: metrics::Metrics,
    memory: memory::MemoryBudget,
    /// Limits the "produce refused" lines.
    produce_refusals_log: log_limiter::LogLimiter,
    /// Where metadata file changes are made durable besides the local disk (`None`: local mode).
    journal: sluice_storage::Journal,
    /// Cluster mode: the shared metadata store, and what applies its catalog to `topics`
    /// (`None` in the single-broker modes).
    cluster: Option<ClusterParts>,
    /// The ACLs every request is checked against (`--authorizer acl`); unset: no checks.
    authorizer: std::sync::OnceLock<Arc<sluice_security::Authorizer>>,
    /// Orders [`Broker::record_file`]'s read-and-record steps, so that a later read is never
    /// recorded before an earlier one.
    file_records: std::sync::Mutex<()>,
    /// Cluster mode: the security files shared with the other brokers.
    shared_files: shared_files::SharedFiles,
    /// Client quotas (`security/quotas.json`) and the usage they are measured against.
    quotas: Arc<sluice_security::ClientQuotas>,
}

/// What a broker in cluster mode holds besides the single-broker parts.
#[derive(Debug)]
struct ClusterParts {
    meta: Arc<dyn cluster::ClusterMeta>,
    catalog: Arc<catalog::CatalogSync>,
    /// The catalog reloads of requests naming a topic this broker does not know (yet); held
    /// across a reload, so such reloads run one at a time.
    misses: tokio::sync::Mutex<MissReloads>,
}

/// See [`Broker::refresh_on_miss`].
#[derive(Debug, Default)]
struct MissReloads {
    /// When the last reload was started (the interval between reloads counts from it).
    started: Option<tokio::time::Instant>,
    /// When the last reload that completed was started: it answers every request that
    /// arrived before then.
    completed: Option<tokio::time::Instant>,
}

/// How often at most requests naming unknown topics reload the catalog in cluster mode: a
/// topic created through another broker is then usable here at once instead of after the
/// next refresh, while clients asking for topics that do not exist cost the metadata store
/// at most four queries a second. Such a request waits for a reload that started after it
/// arrived (one reload answers every request that arrived before it started), so requests
/// arriving together all see a topic created just before them.
const CATALOG_MISS_REFRESH_INTERVAL: std::time::Duration = std::time::Duration::from_millis(250);

/// Longest such a reload may hold the request.
const CATALOG_MISS_REFRESH_WAIT: std::time::Duration = std::time::Duration::from_secs(2);

/// Kafka's resource type code for a topic in DescribeConfigs and AlterConfigs.
const TOPIC_RESOURCE: i8 = 2;

/// Kafka's ILLEGAL_SASL_STATE: a SASL message where none is expected.
const ILLEGAL_SASL_STATE: i16 = 34;

/// Kafka's SECURITY_DISABLED: SCRAM credentials asked for on a broker without SASL.
const SECURITY_DISABLED: i16 = 54;
const SASL_DISABLED: &str = "SASL is not enabled on this broker (sluice serve --sasl-mechanisms)";

/// How often at most the broker logs an event that clients can repeat at will.
const REPEATED_LOG_INTERVAL: std::time::Duration = std::time::Duration::from_secs(5);

/// Who sent a request: what the listener knows of the connection it came in on.
#[derive(Debug, Clone)]
pub struct Caller {
    /// The client's address (the client host that group descriptions report).
    pub peer: Option<std::net::IpAddr>,
    /// The index of the listener the connection came in on: its advertised address is the one
    /// Metadata, FindCoordinator and DescribeCluster answer with
    /// ([`BrokerConfig::advertised`]).
    pub listener: usize,
    /// The authenticated principal, as Kafka writes it: `User:NAME`, or `User:ANONYMOUS` on a
    /// PLAINTEXT connection or a TLS one without a client certificate.
    pub principal: Arc<str>,
    /// The client connection, unique in this broker process (0: none, e.g. the HTTP API).
    /// Share sessions are tied to it: see [`Broker::connection_closed`].
    pub connection: u64,
}

impl Default for Caller {
    fn default() -> Self {
        Caller {
            peer: None,
            listener: 0,
            principal: Arc::from("User:ANONYMOUS"),
            connection: 0,
        }
    }
}

/// A handled request's response, with the memory that holds its data (a fetch's records)
/// until it has been written.
#[derive(Debug)]
pub struct Response {
    pub body: ResponseKind,
    pub memory: Option<memory::Reservation>,
}

/// Why the broker could not open its data directory; each part keeps its own error.
#[derive(Debug, thiserror::Error)]
pub enum OpenError {
    #[error(transparent)]
    Topics(#[from] TopicError),
    #[error("cannot open producer ids in {path}: {source}")]
    ProducerIds {
        path: std::path::PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("cannot open the group store: {0}")]
    Groups(#[from] groups::StoreError),
    #[error("cannot open the client quotas: {0}")]
    Quotas(#[source] sluice_security::SecurityError),
}

impl Broker {
    /// Opens the broker's data directory, recovering every partition log.
    pub fn open(config: BrokerConfig) -> Result<Broker, OpenError> {
        Self::open_with_clock(config, Arc::new(SystemClock))
    }

    pub fn open_with_clock(
        config: BrokerConfig,
        clock: Arc<dyn Clock>,
    ) -> Result<Broker, OpenError> {
        Self::open_with(config, clock, None)
    }

    /// Opens the broker with its partitions in `backend` (the object store) instead of local
    /// logs, and its metadata file changes recorded in the backend's journal; `None`: local.
    pub fn open_with(
        config: BrokerConfig,
        clock: Arc<dyn Clock>,
        backend: Option<Arc<dyn sluice_storage::PartitionOpener>>,
    ) -> Result<Broker, OpenError> {
        let journal = backend.as_ref().map(|b| b.journal());
        // One committer, with one space state for the data directory, syncs the partition logs
        // and the group store.
        let committer = GroupCommitter::start_with_space(
            CommitConfig {
                policy: config.flush,
                sync_threads: config.sync_threads,
            },
            sluice_log::DataDirSpace::for_dir(&config.data_dir),
        );
        let topics = TopicRegistry::open(&config, &committer, &clock, backend)?;
        let producer_ids = producers::ProducerIds::open(&config.data_dir, journal.clone())
            .map_err(|source| OpenError::ProducerIds {
                path: config.data_dir.clone(),
                source,
            })?;
        let groups = Self::open_groups(&config, &committer, &clock, &journal)?;
        let quotas = Self::open_quotas(&config)?;
        Ok(Broker {
            topics: Arc::new(topics),
            committer,
            clock,
            producer_ids,
            groups,
            metrics: metrics::Metrics::default(),
            memory: memory::MemoryBudget::new(config.memory_limit),
            produce_refusals_log: log_limiter::LogLimiter::new(REPEATED_LOG_INTERVAL),
            config,
            journal,
            cluster: None,
            authorizer: std::sync::OnceLock::new(),
            file_records: std::sync::Mutex::new(()),
            shared_files: shared_files::SharedFiles::default(),
            quotas,
        })
    }

    /// Opens the broker as one of many over a shared metadata store (cluster mode): its
    /// topics are the store's catalog (opened through `backend`; nothing is written under
    /// `<data dir>/topics`), producer ids come from the store's blocks, Metadata lists the
    /// store's live brokers, and `config.node_id` / `config.cluster_id` become the store's.
    ///
    /// Applies the catalog as it is now before it returns (a topic that cannot be opened
    /// fails the open). Call it inside a tokio runtime (on the blocking pool: it opens
    /// partitions), and it also starts the task that applies every later catalog change;
    /// outside one, call [`Broker::start_cluster_sync`] once inside the runtime (the first
    /// request handled starts it too).
    pub fn open_cluster(
        mut config: BrokerConfig,
        clock: Arc<dyn Clock>,
        backend: Arc<dyn sluice_storage::PartitionOpener>,
        meta: Arc<dyn cluster::ClusterMeta>,
    ) -> Result<Broker, OpenError> {
        config.node_id = meta.node_id();
        config.cluster_id = meta.cluster_id();
        let journal = Some(backend.journal());
        let committer = GroupCommitter::start_with_space(
            CommitConfig {
                policy: config.flush,
                sync_threads: config.sync_threads,
            },
            sluice_log::DataDirSpace::for_dir(&config.data_dir),
        );
        let topics = Arc::new(TopicRegistry::cluster(&config, backend));
        let producer_ids = producers::ProducerIds::cluster(Arc::clone(&meta));
        let groups = match meta.group_ownership() {
            // Each group has one coordinator among the brokers, its state in the shared store.
            Some(ownership) => Arc::new(groups::Coordinator::with_ownership(
                config.groups.clone(),
                Arc::clone(&clock),
                ownership,
            )),
            None => Self::open_groups(&config, &committer, &clock, &journal)?,
        };
        let weak_groups = Arc::downgrade(&groups);
        let on_removed = Box::new(move |name: &str| {
            if let Some(groups) = weak_groups.upgrade() {
                groups.topic_deleted(name);
            }
        });
        let sync = catalog::CatalogSync::new(
            Arc::clone(&meta),
            Arc::clone(&topics),
            config.clone(),
            on_removed,
        );
        let applied = sync.apply_now();
        if let Some((_, e)) = applied.failed.into_iter().next() {
            return Err(OpenError::Topics(e));
        }
        sync.start();
        let quotas = Self::open_quotas(&config)?;
        Ok(Broker {
            topics,
            committer,
            clock,
            producer_ids,
            groups,
            metrics: metrics::Metrics::default(),
            memory: memory::MemoryBudget::new(config.memory_limit),
            produce_refusals_log: log_limiter::LogLimiter::new(REPEATED_LOG_INTERVAL),
            config,
            journal,
            cluster: Some(ClusterParts {
                meta,
                catalog: sync,
                misses: tokio::sync::Mutex::new(MissReloads::default()),
            }),
            authorizer: std::sync::OnceLock::new(),
            file_records: std::sync::Mutex::new(()),
            shared_files: shared_files::SharedFiles::default(),
            quotas,
        })
    }

    fn open_quotas(config: &BrokerConfig) -> Result<Arc<sluice_security::ClientQuotas>, OpenError> {
        sluice_security::ClientQuotas::open(&config.data_dir)
            .map(Arc::new)
            .map_err(OpenError::Quotas)
    }

    /// The answer to a Produce (with acks) that waited `waited` in the broker before it could
    /// start, past its `timeout_ms`: its client has given up on it, so it is not appended
    /// (REQUEST_TIMED_OUT for every partition) and costs nothing more. Counted in
    /// `sluice_kafka_produce_expired_total`.
    pub fn produce_expired(
        &self,
        req: sluice_protocol::kafka_protocol::messages::ProduceRequest,
        waited: std::time::Duration,
    ) -> ResponseKind {
        self.metrics.produce_expired();
        ResponseKind::Produce(handlers::produce::expired(req, waited))
    }

    /// The client quotas (`kafka-configs --entity-type users|clients`): the connection
    /// throttles by them, DescribeClientQuotas and AlterClientQuotas read and change them.
    pub fn quotas(&self) -> &Arc<sluice_security::ClientQuotas> {
        &self.quotas
    }

    /// The group coordinator over a file in the data directory (made durable through
    /// `journal` when there is one): every mode but cluster mode with a shared group store
    /// ([`cluster::ClusterMeta::group_ownership`]), which `open_cluster` builds itself.
    fn open_groups(
        config: &BrokerConfig,
        committer: &GroupCommitter,
        clock: &Arc<dyn Clock>,
        journal: &sluice_storage::Journal,
    ) -> Result<Arc<groups::Coordinator>, OpenError> {
        let options = groups::StoreOptions {
            journal: journal.clone(),
            faults: config.disk_faults.clone(),
            ..groups::StoreOptions::default()
        };
        let groups = groups::Coordinator::open_with_options(
            &config.data_dir,
            committer,
            config.groups.clone(),
            Arc::clone(clock),
            options,
        )?;
        Ok(Arc::new(groups))
    }

    /// The shared metadata store in cluster mode (`None` in the single-broker modes).
    pub fn cluster(&self) -> Option<&Arc<dyn cluster::ClusterMeta>> {
        self.cluster.as_ref().map(|c| &c.meta)
    }

    /// Cluster mode: starts the task that applies every change of the store's catalog to this
    /// broker's topics, if it is not running yet; needs a tokio runtime. `open_cluster` starts
    /// it itself when it runs inside one. Does nothing in the single-broker modes.
    pub fn start_cluster_sync(&self) {
        if let Some(c) = &self.cluster
            && !c.catalog.start()
        {
            tracing::warn!("cluster catalog task not started: no tokio runtime here");
        }
    }

    /// Cluster mode: whether one of `topics` is unknown here, so the request should wait for
    /// [`Broker::refresh_on_miss`] first. Always false in the single-broker modes.
    pub fn misses_catalog<'a>(&self, mut topics: impl Iterator<Item = &'a str>) -> bool {
        self.cluster.is_some() && topics.any(|t| self.topics.get(t).is_none())
    }

    /// [`Broker::misses_catalog`] for topics named by id.
    pub fn misses_catalog_ids(&self, mut ids: impl Iterator<Item = Uuid>) -> bool {
        if self.cluster.is_none() {
            return false;
        }
        let known: Vec<Uuid> = self.topics.all().iter().map(|t| t.id).collect();
        ids.any(|id| !known.contains(&id))
    }

    /// Cluster mode: reloads and applies the catalog for a request that named an unknown
    /// topic, waiting at most [`CATALOG_MISS_REFRESH_WAIT`]; a failure leaves the request to
    /// answer with what this broker knows.
    ///
    /// The reload it waits for started after the call: a reload already under way may have
    /// read the catalog before the topic was created. Reloads run one at a time and at most
    /// one per [`CATALOG_MISS_REFRESH_INTERVAL`]; callers that arrived before a reload started
    /// are all answered by it.
    pub async fn refresh_on_miss(&self) {
        let Some(c) = &self.cluster else {
            return;
        };
        let arrived = tokio::time::Instant::now();
        let reload = async {
            let mut reloads = c.misses.lock().await;
            if reloads.completed.is_some_and(|started| started >= arrived) {
                return Ok(());
            }
            if let Some(started) = reloads.started {
                tokio::time::sleep_until(started + CATALOG_MISS_REFRESH_INTERVAL).await;
            }
            let started = tokio::time::Instant::now();
            reloads.started = Some(started);
            self.refresh_catalog().await?;
            reloads.completed = Some(started);
            Ok::<(), cluster::ClusterError>(())
        };
        match tokio::time::timeout(CATALOG_MISS_REFRESH_WAIT, reload).await {
            Ok(Ok(_)) => {}
            Ok(Err(e)) => tracing::debug!(error = %e, "catalog reload for an unknown topic failed"),
            Err(_) => tracing::debug!("catalog reload for an unknown topic timed out"),
        }
    }

    /// `then`, after a catalog reload when `missed` (the request named a topic this broker
    /// does not know yet: in cluster mode it may have been created through another broker
    /// within the last refresh interval, and a client that created it expects it everywhere).
    fn after_miss(
        self: &Arc<Self>,
        missed: bool,
        then: impl FnOnce(Arc<Broker>) -> BoxFuture<'static, Option<ResponseKind>> + Send + 'static,
    ) -> BoxFuture<'static, Option<ResponseKind>> {
        let broker = Arc::clone(self);
        if !missed {
            return then(broker);
        }
        async move {
            broker.refresh_on_miss().await;
            then(broker).await
        }
        .boxed()
    }

    /// Cluster mode: reloads the catalog from the store and applies it now (what every topic
    /// change through this broker does before it answers). At once in the single-broker
    /// modes.
    pub async fn refresh_catalog(&self) -> Result<topics::CatalogApplied, cluster::ClusterError> {
        match &self.cluster {
            Some(c) => c.catalog.refresh().await,
            None => Ok(topics::CatalogApplied::default()),
        }
    }

    /// Cluster mode: creates a topic in the metadata store, with the checks CreateTopics
    /// applies here first, and returns it once this broker has it open (the HTTP API's path;
    /// Kafka's CreateTopics does the same for many at once).
    pub async fn create_topic_in_cluster(
        &self,
        name: &str,
        partitions: i32,
        configs: TopicConfig,
    ) -> Result<Arc<Topic>, catalog::ChangeError> {
        let (meta, sync) = self.cluster_parts()?;
        self.topics.check_configs(&configs)?;
        self.topics
            .validate_create(name, partitions, self.config.partitions_per_topic_max)?;
        let id = Uuid::new_v4();
        meta.create_topic(id, name.to_owned(), partitions, configs.to_catalog())
            .await?;
        let mut applied = catalog::refreshed(sync.refresh().await)?;
        catalog::opened(&self.topics, name, id, &mut applied)
    }

    /// Cluster mode: deletes a topic in the metadata store and returns once this broker has
    /// dropped it (its committed group offsets forgotten, as DeleteTopics). The data is the
    /// store's to remove.
    pub async fn delete_topic_in_cluster(&self, name: &str) -> Result<(), catalog::ChangeError> {
        let (meta, sync) = self.cluster_parts()?;
        meta.delete_topic(name.to_owned()).await?;
        catalog::refreshed(sync.refresh().await)?;
        Ok(())
    }

    /// The store and the catalog sync, or the error that says this is not cluster mode.
    fn cluster_parts(
        &self,
    ) -> Result<(&Arc<dyn cluster::ClusterMeta>, &Arc<catalog::CatalogSync>), catalog::ChangeError>
    {
        let c = self.cluster.as_ref().ok_or_else(|| {
            cluster::ClusterError::Unavailable("this broker is not in cluster mode".into())
        })?;
        Ok((&c.meta, &c.catalog))
    }

    pub(crate) fn catalog_sync(&self) -> Option<&Arc<catalog::CatalogSync>> {
        self.cluster.as_ref().map(|c| &c.catalog)
    }

    /// The backend's journal of metadata file changes (`None` in local mode).
    pub fn journal(&self) -> sluice_storage::Journal {
        self.journal.clone()
    }

    /// Resolves once every metadata change made so far is durable (at once in local mode,
    /// where each is fsynced as it is made). Await it before answering a change's success.
    pub fn sync_metadata(&self) -> BoxFuture<'static, Result<(), storage::StorageError>> {
        let durable = self.journal.as_ref().map(|j| j.durable());
        durable.unwrap_or_else(|| futures::future::ready(Ok(())).boxed())
    }

    /// Records the current contents of `path`, a file under the data directory that another
    /// part keeps (the ACLs, the SASL users), in the metadata journal, and returns the future of
    /// its durability: in object-storage mode the file then lives in the bucket with the rest of
    /// the metadata and comes back with it; in local mode there is nothing to do (the file was
    /// fsynced where it is). Blocking (it reads the file): call it off the async threads.
    pub fn record_file(
        &self,
        path: &std::path::Path,
    ) -> BoxFuture<'static, Result<(), storage::StorageError>> {
        let Some(journal) = &self.journal else {
            return futures::future::ready(Ok(())).boxed();
        };
        let recorded = (|| {
            let io = |op, source| storage::StorageError::Io {
                op,
                path: path.to_owned(),
                source,
            };
            let Some(rel) = sluice_storage::relative_path(&self.config.data_dir, path) else {
                return Err(io(
                    "record",
                    std::io::Error::other("not under the data directory"),
                ));
            };
            let _order = self
                .file_records
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            let contents = std::fs::read(path).map_err(|e| io("read", e))?;
            journal.record(sluice_storage::FileChange::Write {
                path: rel,
                contents,
            })
        })();
        match recorded {
            Ok(()) => self.sync_metadata(),
            Err(e) => futures::future::ready(Err(e)).boxed(),
        }
    }

    pub fn config(&self) -> &BrokerConfig {
        &self.config
    }

    pub fn topics(&self) -> &TopicRegistry {
        &self.topics
    }

    /// Starts handling one request and returns the future of its response (`None`: the request
    /// gets no response, as for produce with `acks=0`).
    ///
    /// Work that must happen in request order happens here, before this returns (produce
    /// appends); the future does the waiting (durability, long-poll fetches).
    pub fn handle(self: &Arc<Self>, request: Request) -> BoxFuture<'static, Option<ResponseKind>> {
        self.handle_from(request, &Caller::default())
            .map(|r| r.map(|r| r.body))
            .boxed()
    }

    /// [`Broker::handle`] for a request from `caller` (its address, listener and principal).
    pub fn handle_from(
        self: &Arc<Self>,
        request: Request,
        caller: &Caller,
    ) -> BoxFuture<'static, Option<Response>> {
        let version = request.api_version;
        let client_id = request
            .client_id
            .as_ref()
            .map(|c| c.to_string())
            .unwrap_or_default();
        let client_host = caller.peer.map(|ip| format!("/{ip}")).unwrap_or_default();
        if let Some(c) = &self.cluster {
            // Once; for a broker opened outside a runtime.
            c.catalog.start();
        }
        let Some(authorizer) = self.authorizer.get() else {
            return self.handle_body(request.body, version, client_id, client_host, caller);
        };
        let subject = self.subject(authorizer, caller);
        let (body, patch) = match authz::gate(self, &subject, request.body, version) {
            authz::Gate::Answer(body) => {
                return futures::future::ready(Some(Response { body, memory: None })).boxed();
            }
            authz::Gate::Pass(body, patch) => (body, patch),
        };
        let handled = self.handle_body(body, version, client_id, client_host, caller);
        let Some(patch) = patch else {
            return handled;
        };
        let (authorizer, principal, host) =
            (Arc::clone(authorizer), subject.principal, subject.host);
        async move {
            let mut response = handled.await?;
            let subject = authz::Subject {
                authorizer: &authorizer,
                principal,
                host,
            };
            patch(&mut response.body, &subject);
            Some(response)
        }
        .boxed()
    }

    /// Turns ACL checks on: from now on every request is checked against `authorizer`
    /// (`--authorizer acl`). Once only; a second call is ignored and returns false.
    pub fn set_authorizer(&self, authorizer: Arc<sluice_security::Authorizer>) -> bool {
        self.authorizer.set(authorizer).is_ok()
    }

    /// The ACLs requests are checked against, when ACL checks are on.
    pub fn authorizer(&self) -> Option<&Arc<sluice_security::Authorizer>> {
        self.authorizer.get()
    }

    /// Whether `caller` may perform `operation` on the resource: always, when ACL checks are
    /// off. For requests answered outside the broker (the SCRAM user APIs) and the HTTP API.
    pub fn authorized(
        &self,
        caller: &Caller,
        operation: sluice_security::AclOperation,
        resource_type: sluice_security::ResourceType,
        name: &str,
    ) -> bool {
        match self.authorizer.get() {
            None => true,
            Some(a) => self.subject(a, caller).may(operation, resource_type, name),
        }
    }

    fn subject<'a>(
        &self,
        authorizer: &'a sluice_security::Authorizer,
        caller: &Caller,
    ) -> authz::Subject<'a> {
        // A principal that does not parse (it always does: listeners write `Type:name`) is
        // one no ACL names.
        let principal = caller
            .principal
            .parse()
            .unwrap_or_else(|_| sluice_security::Principal::user(caller.principal.to_string()));
        authz::Subject {
            authorizer,
            principal,
            host: caller
                .peer
                .map(|ip| ip.to_string())
                .unwrap_or_else(|| "*".to_owned()),
        }
    }

    /// [`Broker::handle_from`] once the request is authorized.
    fn handle_body(
        self: &Arc<Self>,
        body: RequestKind,
        version: i16,
        client_id: String,
        client_host: String,
        caller: &Caller,
    ) -> BoxFuture<'static, Option<Response>> {
        let peer = caller.peer;
        match body {
            RequestKind::Fetch(req) => {
                let broker = Arc::clone(self);
                async move {
                    let (body, memory) = handlers::fetch::handle(&broker, req, peer).await;
                    Some(Response {
                        body: ResponseKind::Fetch(body),
                        memory: Some(memory),
                    })
                }
                .boxed()
            }
            body => self
                .dispatch(body, version, client_id, client_host, caller)
                .map(|r| r.map(|body| Response { body, memory: None }))
                .boxed(),
        }
    }

    /// Starts the handler of every API but Fetch (whose response holds memory).
    fn dispatch(
        self: &Arc<Self>,
        body: RequestKind,
        version: i16,
        client_id: String,
        client_host: String,
        caller: &Caller,
    ) -> BoxFuture<'static, Option<ResponseKind>> {
        let listener = caller.listener;
        let connection = caller.connection;
        let this = Arc::clone(self);
        let ready = |response| futures::future::ready(Some(response)).boxed();
        match body {
            RequestKind::Produce(req) => {
                let names = req.topic_data.iter().map(|t| t.name.0.as_str());
                if self.misses_catalog(names) {
                    let broker = Arc::clone(self);
                    async move {
                        broker.refresh_on_miss().await;
                        handlers::produce::start(&broker, req)
                            .await
                            .map(ResponseKind::Produce)
                    }
                    .boxed()
                } else {
                    handlers::produce::start(self, req)
                        .map(|r| r.map(ResponseKind::Produce))
                        .boxed()
                }
            }
            RequestKind::ApiVersions(_) => ready(ResponseKind::ApiVersions(
                handlers::api_versions::listed(self.cluster.is_some()),
            )),
            RequestKind::Metadata(req) => {
                handlers::metadata::start(self, req, version, &client_id, listener)
            }
            RequestKind::CreateTopics(req) => handlers::create_topics::handle(self, req, version),
            RequestKind::DeleteTopics(req) => {
                let names = req.topic_names.iter().map(|n| n.0.as_str()).chain(
                    req.topics
                        .iter()
                        .filter_map(|t| t.name.as_ref().map(|n| n.0.as_str())),
                );
                let missed = self.misses_catalog(names);
                self.after_miss(missed, move |b| {
                    handlers::delete_topics::handle(&b, req, version)
                })
            }
            RequestKind::DescribeConfigs(req) => {
                let names = req
                    .resources
                    .iter()
                    .filter(|r| r.resource_type == TOPIC_RESOURCE)
                    .map(|r| r.resource_name.as_str());
                let missed = self.misses_catalog(names);
                self.after_miss(missed, move |b| {
                    let response = handlers::configs::describe(&b, req, version);
                    futures::future::ready(Some(ResponseKind::DescribeConfigs(response))).boxed()
                })
            }
            RequestKind::AlterConfigs(req) => {
                let names = req
                    .resources
                    .iter()
                    .filter(|r| r.resource_type == TOPIC_RESOURCE)
                    .map(|r| r.resource_name.as_str());
                let missed = self.misses_catalog(names);
                self.after_miss(missed, move |b| handlers::configs::alter(&b, req))
            }
            RequestKind::IncrementalAlterConfigs(req) => {
                let names = req
                    .resources
                    .iter()
                    .filter(|r| r.resource_type == TOPIC_RESOURCE)
                    .map(|r| r.resource_name.as_str());
                let missed = self.misses_catalog(names);
                self.after_miss(missed, move |b| {
                    handlers::configs::incremental_alter(&b, req)
                })
            }
            RequestKind::CreatePartitions(req) => {
                let missed = self.misses_catalog(req.topics.iter().map(|t| t.name.0.as_str()));
                self.after_miss(missed, move |b| {
                    handlers::cluster::create_partitions(&b, req)
                })
            }
            RequestKind::DescribeCluster(req) => ready(ResponseKind::DescribeCluster(
                handlers::cluster::describe_cluster(self, req, listener),
            )),
            RequestKind::ListOffsets(req) => async move {
                if this.misses_catalog(req.topics.iter().map(|t| t.name.0.as_str())) {
                    this.refresh_on_miss().await;
                }
                let failed = handlers::list_offsets::prepare(&this, &req).await;
                Some(ResponseKind::ListOffsets(handlers::list_offsets::handle(
                    &this, req, version, &failed,
                )))
            }
            .boxed(),
            RequestKind::DescribeLogDirs(req) => ready(ResponseKind::DescribeLogDirs(
                handlers::describe_log_dirs::handle(self, req),
            )),
            RequestKind::DescribeTopicPartitions(req) => {
                let zone = handlers::metadata::client_zone(&client_id).map(str::to_owned);
                let named = req.topics.iter().map(|t| t.name.0.as_str());
                let missed = self.misses_catalog(named);
                self.after_miss(missed, move |b| {
                    let r = handlers::describe_topic_partitions::handle(
                        &b,
                        req,
                        zone.as_deref(),
                        listener,
                    );
                    futures::future::ready(Some(ResponseKind::DescribeTopicPartitions(r))).boxed()
                })
            }
            RequestKind::DeleteRecords(req) => async move {
                if this.misses_catalog(req.topics.iter().map(|t| t.name.0.as_str())) {
                    this.refresh_on_miss().await;
                }
                Some(ResponseKind::DeleteRecords(
                    handlers::delete_records::handle(&this, req).await,
                ))
            }
            .boxed(),
            RequestKind::InitProducerId(req) => handlers::init_producer_id::handle(self, req),
            RequestKind::FindCoordinator(req) => async move {
                Some(ResponseKind::FindCoordinator(
                    handlers::groups::find_coordinator(&this, req, version, listener).await,
                ))
            }
            .boxed(),
            RequestKind::JoinGroup(req) => {
                self.start_group_timer();
                async move {
                    let r =
                        handlers::groups::join_group(&this, req, version, client_id, client_host);
                    Some(ResponseKind::JoinGroup(r.await))
                }
                .boxed()
            }
            RequestKind::SyncGroup(req) => async move {
                Some(ResponseKind::SyncGroup(
                    handlers::groups::sync_group(&this, req, version).await,
                ))
            }
            .boxed(),
            RequestKind::Heartbeat(req) => async move {
                Some(ResponseKind::Heartbeat(
                    handlers::groups::heartbeat(&this, req).await,
                ))
            }
            .boxed(),
            RequestKind::LeaveGroup(req) => async move {
                Some(ResponseKind::LeaveGroup(
                    handlers::groups::leave_group(&this, req, version).await,
                ))
            }
            .boxed(),
            RequestKind::ListGroups(req) => ready(ResponseKind::ListGroups(
                handlers::groups::list_groups(self, req, version),
            )),
            RequestKind::DescribeGroups(req) => async move {
                Some(ResponseKind::DescribeGroups(
                    handlers::groups::describe_groups(&this, req, version).await,
                ))
            }
            .boxed(),
            RequestKind::DeleteGroups(req) => async move {
                Some(ResponseKind::DeleteGroups(
                    handlers::groups::delete_groups(&this, req).await,
                ))
            }
            .boxed(),
            RequestKind::OffsetCommit(req) => async move {
                Some(ResponseKind::OffsetCommit(
                    handlers::offsets::commit(&this, req, version).await,
                ))
            }
            .boxed(),
            RequestKind::OffsetFetch(req) => async move {
                Some(ResponseKind::OffsetFetch(
                    handlers::offsets::fetch(&this, req, version).await,
                ))
            }
            .boxed(),
            RequestKind::OffsetDelete(req) => async move {
                Some(ResponseKind::OffsetDelete(
                    handlers::offsets::delete(&this, req).await,
                ))
            }
            .boxed(),
            RequestKind::ConsumerGroupHeartbeat(req) => {
                self.start_group_timer();
                async move {
                    let r = handlers::consumer_group::heartbeat(
                        &this,
                        req,
                        version,
                        client_id,
                        client_host,
                    );
                    Some(ResponseKind::ConsumerGroupHeartbeat(r.await))
                }
                .boxed()
            }
            RequestKind::ConsumerGroupDescribe(req) => async move {
                Some(ResponseKind::ConsumerGroupDescribe(
                    handlers::consumer_group::describe(&this, req, version).await,
                ))
            }
            .boxed(),
            RequestKind::ShareGroupHeartbeat(req) => {
                self.start_group_timer();
                async move {
                    let r = handlers::share_group::heartbeat(&this, req, client_id, client_host);
                    Some(ResponseKind::ShareGroupHeartbeat(r.await))
                }
                .boxed()
            }
            RequestKind::ShareGroupDescribe(req) => async move {
                Some(ResponseKind::ShareGroupDescribe(
                    handlers::share_group::describe(&this, req).await,
                ))
            }
            .boxed(),
            RequestKind::ShareFetch(req) => {
                self.start_group_timer();
                async move {
                    Some(ResponseKind::ShareFetch(
                        handlers::share_group::fetch(&this, req, connection).await,
                    ))
                }
                .boxed()
            }
            RequestKind::ShareAcknowledge(req) => async move {
                Some(ResponseKind::ShareAcknowledge(
                    handlers::share_group::acknowledge(&this, req, connection).await,
                ))
            }
            .boxed(),
            RequestKind::DescribeShareGroupOffsets(req) => async move {
                Some(ResponseKind::DescribeShareGroupOffsets(
                    handlers::share_group::describe_offsets(&this, req).await,
                ))
            }
            .boxed(),
            RequestKind::AlterShareGroupOffsets(req) => async move {
                Some(ResponseKind::AlterShareGroupOffsets(
                    handlers::share_group::alter_offsets(&this, req).await,
                ))
            }
            .boxed(),
            RequestKind::DeleteShareGroupOffsets(req) => async move {
                Some(ResponseKind::DeleteShareGroupOffsets(
                    handlers::share_group::delete_offsets(&this, req).await,
                ))
            }
            .boxed(),
            RequestKind::DescribeClientQuotas(req) => ready(ResponseKind::DescribeClientQuotas(
                handlers::quotas::describe(self, &req),
            )),
            RequestKind::AlterClientQuotas(req) => handlers::quotas::alter(self, req),
            RequestKind::CreateAcls(req) => handlers::acls::create(self, req),
            RequestKind::DescribeAcls(req) => handlers::acls::describe(self, req),
            RequestKind::DeleteAcls(req) => handlers::acls::delete(self, req),
            // A SASL listener's connection answers these itself until it is authenticated;
            // any that reach the broker came on another listener or after authentication.
            // Kafka answers ILLEGAL_SASL_STATE then too (no re-authentication: the session
            // lifetime is 0).
            RequestKind::SaslHandshake(_) => ready(ResponseKind::SaslHandshake(
                SaslHandshakeResponse::default().with_error_code(ILLEGAL_SASL_STATE),
            )),
            RequestKind::SaslAuthenticate(_) => ready(ResponseKind::SaslAuthenticate(
                SaslAuthenticateResponse::default()
                    .with_error_code(ILLEGAL_SASL_STATE)
                    .with_error_message(Some(StrBytes::from_static_str(
                        "SASL authentication is not expected on this connection",
                    ))),
            )),
            // Answered by the connection from the SASL user store when SASL is enabled; here
            // only when it is not (Kafka's SECURITY_DISABLED).
            RequestKind::DescribeUserScramCredentials(_) => {
                ready(ResponseKind::DescribeUserScramCredentials(
                    DescribeUserScramCredentialsResponse::default()
                        .with_error_code(SECURITY_DISABLED)
                        .with_error_message(Some(StrBytes::from_static_str(SASL_DISABLED))),
                ))
            }
            RequestKind::AlterUserScramCredentials(req) => {
                let results = req
                    .deletions
                    .iter()
                    .map(|d| d.name.clone())
                    .chain(req.upsertions.iter().map(|u| u.name.clone()))
                    .collect::<std::collections::BTreeSet<_>>()
                    .into_iter()
                    .map(|user| {
                        AlterUserScramCredentialsResult::default()
                            .with_user(user)
                            .with_error_code(SECURITY_DISABLED)
                            .with_error_message(Some(StrBytes::from_static_str(SASL_DISABLED)))
                    })
                    .collect();
                ready(ResponseKind::AlterUserScramCredentials(
                    AlterUserScramCredentialsResponse::default().with_results(results),
                ))
            }
            other => {
                // The decoder only lets through APIs listed in `versions::SUPPORTED`, and every
                // one of those has an arm above.
                tracing::error!(request = ?std::mem::discriminant(&other), "no handler for a supported API");
                futures::future::ready(None).boxed()
            }
        }
    }

    /// The response to an ApiVersions request of an unknown version (to be encoded as v0).
    pub fn unsupported_api_versions() -> ResponseKind {
        ResponseKind::ApiVersions(handlers::api_versions::unsupported_version())
    }

    /// Runs a retention pass over every partition; returns segments deleted.
    pub fn apply_retention(&self) -> usize {
        let mut deleted = 0;
        for topic in self.topics.all() {
            for log in topic.partitions() {
                match log.apply_retention() {
                    Ok(units) => deleted += units,
                    Err(e) => tracing::error!(topic = %topic.name, error = %e, "retention"),
                }
            }
        }
        // Freed space ends a full-disk state at once rather than at the next write.
        self.data_dir_space().recheck();
        deleted
    }

    /// Runs one compaction pass on the local log that needs it most (Kafka's log cleaner
    /// order: a log past `max.compaction.lag.ms` first, then the highest dirty ratio), within
    /// [`BrokerConfig::cleaner`]. Returns the topic, partition and what the pass did, or `None`
    /// when no compacted log is due. Blocking (reads and writes segments): call it off the
    /// async threads, one caller at a time; appends and reads go on meanwhile.
    pub fn clean_dirtiest(&self) -> Option<(String, i32, sluice_log::CleanOutcome)> {
        let now = self.now_ms();
        let mut best: Option<(bool, f64, Arc<Topic>, i32)> = None;
        for topic in self.topics.all() {
            if !topic.config().compacts() {
                continue;
            }
            for (p, log) in topic.partitions().iter().enumerate() {
                let Some(local) = log.as_local() else {
                    continue;
                };
                let Some(due) = local.cleanable(now) else {
                    continue;
                };
                let urgent = due.reason == sluice_log::CleanReason::MaxCompactionLag;
                let better = best
                    .as_ref()
                    .is_none_or(|(u, ratio, _, _)| (urgent, due.dirty_ratio) > (*u, *ratio));
                if better {
                    best = Some((urgent, due.dirty_ratio, Arc::clone(&topic), p as i32));
                }
            }
        }
        let (_, _, topic, p) = best?;
        let log = topic.partition(p)?;
        let local = log.as_local()?;
        let limits = sluice_log::CleanerLimits {
            codecs: sluice_log::Codecs::new(&KafkaCodecs),
            ..self.config.cleaner
        };
        match local.clean(now, &limits) {
            Ok(outcome) => {
                self.metrics.cleaned(&outcome);
                tracing::info!(
                    topic = %topic.name,
                    partition = p,
                    reason = ?outcome.reason,
                    dirty_ratio = outcome.dirty_ratio,
                    bytes_before = outcome.bytes_before,
                    bytes_after = outcome.bytes_after,
                    records_removed = outcome.records_removed,
                    elapsed_ms = outcome.elapsed.as_millis() as u64,
                    "log cleaner: compacted a partition"
                );
                Some((topic.name.clone(), p, outcome))
            }
            Err(e) => {
                self.metrics.cleaner_failed();
                tracing::error!(topic = %topic.name, partition = p, error = %e, "log cleaner: the compaction pass failed");
                None
            }
        }
    }

    /// Flushes and closes every partition log and the group store cleanly (and, in cluster
    /// mode, stops applying catalog changes).
    pub fn shutdown(&self) {
        if let Some(c) = &self.cluster {
            c.catalog.stop();
        }
        self.topics.close_all();
        self.groups.close();
    }

    /// Creates a topic with the checks CreateTopics applies (the HTTP API's path).
    pub fn create_topic(
        &self,
        name: &str,
        partitions: i32,
        configs: TopicConfig,
    ) -> Result<Arc<Topic>, TopicError> {
        self.topics.create(
            name,
            partitions,
            configs,
            &self.config,
            &self.committer,
            &self.clock,
        )
    }

    /// Deletes a topic and forgets the committed offsets of its partitions (as DeleteTopics).
    pub fn delete_topic(&self, name: &str) -> Result<(), TopicError> {
        self.topics.delete(name)?;
        self.groups.topic_deleted(name);
        self.data_dir_space().recheck();
        Ok(())
    }

    /// Appends record batches (built by the caller, not idempotent) to one partition with the
    /// checks Produce applies: the partition exists, no batch is over the topic's
    /// `max.message.bytes`, every batch is valid. The returned handle says when they are durable.
    pub fn append(
        &self,
        topic: &Topic,
        partition: i32,
        records: &[u8],
    ) -> Result<storage::Appended, AppendError> {
        Ok(handlers::produce::append_plain(
            self, topic, partition, records,
        )?)
    }

    /// Reads durable batches of one partition from `offset` (see
    /// [`PartitionStorage::read`](storage::PartitionStorage::read)). With `wait`, a read that
    /// finds nothing at the high watermark waits for records until that deadline and reads
    /// again (an `offset` past the high watermark, appended but not durable, does not wait).
    /// The HTTP API's read; the Kafka fetch, which waits on many partitions at once, uses the
    /// same two steps (`read`, then [`storage::wait_for_data`]).
    pub async fn read(
        &self,
        partition: &dyn storage::PartitionStorage,
        offset: i64,
        max_bytes: usize,
        wait: Option<tokio::time::Instant>,
    ) -> Result<storage::ReadResult, storage::StorageError> {
        loop {
            if let Some(load) = partition.prepare_read(offset, max_bytes) {
                load.await?;
            }
            let read = partition.read(offset, max_bytes)?;
            match wait {
                Some(deadline)
                    if read.records.is_empty()
                        && offset <= read.high_watermark
                        && tokio::time::Instant::now() < deadline =>
                {
                    // At the high watermark: wait for more. Below it, the data was evicted
                    // between the load and the read: load again.
                    if offset == read.high_watermark {
                        storage::wait_for_data([(partition, read.high_watermark)], deadline).await;
                    }
                }
                _ => return Ok(read),
            }
        }
    }

    /// Now, in ms since 1970, from the broker's clock (record timestamps, commit times).
    pub fn now_ms(&self) -> i64 {
        self.clock.now_ms()
    }

    /// The memory budget every listener draws from.
    pub fn memory(&self) -> &memory::MemoryBudget {
        &self.memory
    }

    /// The broker's counters and histograms, rendered by the HTTP API's `/metrics`.
    pub fn metrics(&self) -> &metrics::Metrics {
        &self.metrics
    }

    /// fdatasync counters of the group committer.
    pub fn commit_stats(&self) -> sluice_log::CommitStatsSnapshot {
        self.committer.stats()
    }

    /// Whether the data directory is full (a write found no room and none has succeeded
    /// since), and its free space: for `/readyz` and `/metrics`.
    pub fn data_dir_space(&self) -> &sluice_log::DataDirSpace {
        self.committer.space()
    }

    /// The group coordinator.
    pub fn groups(&self) -> &groups::Coordinator {
        &self.groups
    }

    /// Client connection `connection` ([`Caller::connection`]) closed: the share sessions last
    /// used over it end, and their records go back to the other consumers at once, as in
    /// Kafka, instead of when their acquisition locks expire.
    pub fn connection_closed(&self, connection: u64) {
        if connection != 0 {
            self.groups.share_connection_closed(connection);
        }
    }

    /// Every topic as the KIP-848 assignors see it, by topic id.
    pub fn topic_infos(&self) -> BTreeMap<Uuid, TopicInfo> {
        topic_infos(&self.topics)
    }

    /// Starts the group coordinator's timer (once; needs a tokio runtime, which every request
    /// handler has).
    fn start_group_timer(self: &Arc<Self>) {
        let weak = Arc::downgrade(self);
        self.groups
            .start_timer(move || weak.upgrade().map(|b| b.topic_infos()).unwrap_or_default());
    }

    pub(crate) fn committer(&self) -> &GroupCommitter {
        &self.committer
    }

    pub(crate) fn produce_refusals_log(&self) -> &log_limiter::LogLimiter {
        &self.produce_refusals_log
    }

    pub(crate) fn producer_ids(&self) -> &producers::ProducerIds {
        &self.producer_ids
    }

    pub(crate) fn clock(&self) -> &Arc<dyn Clock> {
        &self.clock
    }
}

fn topic_infos(topics: &TopicRegistry) -> BTreeMap<Uuid, TopicInfo> {
    topics
        .all()
        .into_iter()
        .map(|t| {
            (
                t.id,
                TopicInfo {
                    name: t.name.clone(),
                    id: t.id,
                    partitions: t.partition_count(),
                },
            )
        })
        .collect()
}

/// Kafka's record batch codecs (`sluice_protocol`'s), for the log cleaner to read and rewrite
/// compressed batches of compacted topics.
struct KafkaCodecs;

impl sluice_log::BatchCodecs for KafkaCodecs {
    fn decompress(&self, codec: i16, input: &[u8], limit: usize) -> Result<Vec<u8>, String> {
        sluice_protocol::records::decompress_section(codec, input, limit)
    }

    fn compress(&self, codec: i16, input: &[u8]) -> Result<Vec<u8>, String> {
        sluice_protocol::records::compress_section(codec, input)
    }
}
