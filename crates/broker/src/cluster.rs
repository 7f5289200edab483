//! Cluster mode, as the broker sees it: [`ClusterMeta`] is what the broker asks of the
//! metadata store that many brokers share (PostgreSQL; implemented in `sluice-cluster`), so the
//! broker itself never talks SQL. `None` in the single-broker modes (local disk, one broker on
//! a bucket).
//!
//! In cluster mode the store is the truth for topics, their partition counts and configs,
//! producer ids, which brokers are live and which broker coordinates each group; every broker
//! keeps a copy of the topic catalog ([`ClusterMeta::catalog`]) and opens the partitions it
//! lists. A change made through one broker is written to the store first, then that broker
//! waits until its own copy shows it ([`ClusterMeta::refresh`]) before it answers, so a client
//! that created a topic can use it at once through the same broker; the others see it within
//! their refresh interval.

use std::collections::BTreeMap;
use std::sync::Arc;

use futures::FutureExt;
use futures::future::BoxFuture;
use tokio::sync::watch;
use uuid::Uuid;

/// A live broker, as Metadata lists it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClusterNode {
    pub node_id: i32,
    pub host: String,
    pub port: i32,
    pub rack: Option<String>,
}

/// A topic as the cluster's catalog holds it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CatalogTopic {
    pub id: Uuid,
    pub name: String,
    pub partitions: i32,
    /// Topic-level overrides, by Kafka config name (`retention.ms`, ...), as strings.
    pub configs: BTreeMap<String, String>,
}

/// The catalog at one version.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Catalog {
    pub version: i64,
    pub topics: BTreeMap<String, CatalogTopic>,
}

/// Why a cluster metadata operation failed.
#[derive(Debug, Clone, thiserror::Error)]
pub enum ClusterError {
    #[error("topic '{0}' already exists")]
    TopicExists(String),
    #[error("topic '{0}' does not exist")]
    UnknownTopic(String),
    #[error("{0}")]
    InvalidPartitions(String),
    /// The store did not answer or failed; the client may retry.
    #[error("metadata store: {0}")]
    Unavailable(String),
}

/// What the broker asks of the shared metadata store. Reads come from in-memory copies kept
/// current by the implementation (no store round trip per request); changes are async.
pub trait ClusterMeta: Send + Sync + std::fmt::Debug {
    /// This broker's id (new at every start; the Kafka node id).
    fn node_id(&self) -> i32;

    /// The cluster's id (one per metadata database).
    fn cluster_id(&self) -> String;

    /// The live brokers, by node id, this one included while it is live.
    fn live_brokers(&self) -> Arc<Vec<ClusterNode>>;

    /// The broker that leads `partition` of `topic_id` in Metadata answers: a spread over the
    /// live brokers that every broker computes alike. Any broker accepts writes and reads of
    /// any partition; this only spreads clients.
    fn leader_for(&self, topic_id: Uuid, partition: i32) -> i32;

    /// [`leader_for`](Self::leader_for) among the live brokers whose rack is `zone`, when
    /// there are any (a client in that zone then never crosses zones); else among all.
    fn leader_in_zone(&self, topic_id: Uuid, partition: i32, zone: &str) -> i32 {
        let _ = zone;
        self.leader_for(topic_id, partition)
    }

    /// The catalog copy; changes whenever the store's catalog does (within the refresh
    /// interval) or after [`refresh`](Self::refresh).
    fn catalog(&self) -> watch::Receiver<Arc<Catalog>>;

    /// Reloads the catalog copy now (after a change through this broker).
    fn refresh(&self) -> BoxFuture<'static, Result<(), ClusterError>>;

    fn create_topic(
        &self,
        id: Uuid,
        name: String,
        partitions: i32,
        configs: BTreeMap<String, String>,
    ) -> BoxFuture<'static, Result<(), ClusterError>>;

    fn delete_topic(&self, name: String) -> BoxFuture<'static, Result<(), ClusterError>>;

    /// Raises the partition count to `total` (never lowers it).
    fn create_partitions(
        &self,
        name: String,
        total: i32,
    ) -> BoxFuture<'static, Result<(), ClusterError>>;

    /// Replaces the topic's config overrides with `configs`.
    fn set_configs(
        &self,
        name: String,
        configs: BTreeMap<String, String>,
    ) -> BoxFuture<'static, Result<(), ClusterError>>;

    /// A block of producer ids never handed out by any broker: `(first, count)`.
    fn producer_id_block(&self) -> BoxFuture<'static, Result<(i64, i64), ClusterError>>;

    /// The broker FindCoordinator names for `group`: the holder of its coordinator lease, or
    /// the broker preferred for it among the live ones.
    fn find_coordinator(&self, group: String) -> BoxFuture<'static, Result<i32, ClusterError>>;

    /// What the group coordinator runs over in cluster mode: the coordinator leases and the
    /// group store every broker shares (`sluice-cluster`'s `GroupOwner`), so each group has
    /// one coordinator among the brokers. `None` (the default): the broker keeps its groups
    /// in a file of its own data directory, as a single broker does.
    fn group_ownership(&self) -> Option<Arc<dyn sluice_groups::GroupOwnership>> {
        None
    }

    /// The shared copy of the small file `name` (the SASL users, the ACLs): `(version,
    /// contents)`, `None` before any broker stored it. The default: a store that keeps none.
    fn shared_file(
        &self,
        _name: String,
    ) -> BoxFuture<'static, Result<Option<SharedFileVersion>, ClusterError>> {
        futures::future::ready(Err(no_shared_files())).boxed()
    }

    /// Stores `contents` as the next version of `name` if its version is still `expected`
    /// (0: none stored yet); `Ok(false)` when another broker stored one first.
    fn store_shared_file(
        &self,
        _name: String,
        _expected: i64,
        _contents: Vec<u8>,
    ) -> BoxFuture<'static, Result<bool, ClusterError>> {
        futures::future::ready(Err(no_shared_files())).boxed()
    }

    /// The version of every shared file.
    fn shared_file_versions(&self) -> BoxFuture<'static, Result<Vec<(String, i64)>, ClusterError>> {
        futures::future::ready(Err(no_shared_files())).boxed()
    }
}

/// A shared file as stored: `(version, contents)`.
pub type SharedFileVersion = (i64, Vec<u8>);

fn no_shared_files() -> ClusterError {
    ClusterError::Unavailable("this metadata store keeps no shared files".to_owned())
}
