//! [`PgCluster`]: the broker's [`ClusterMeta`] over PostgreSQL — the registry's live view,
//! the catalog cache, and the catalog, producer-id and coordinator queries.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use futures_util::FutureExt;
use futures_util::future::BoxFuture;
use sluice_broker::cluster::{Catalog, CatalogTopic, ClusterError, ClusterMeta, ClusterNode};
use tokio::sync::watch;
use tokio::task::JoinHandle;
use uuid::Uuid;

use crate::Db;
use crate::catalog::{self, CatalogCache, CatalogError, CatalogSnapshot};
use crate::registry::{self, Broker};

/// The broker's view of the cluster's metadata.
pub struct PgCluster {
    db: Db,
    node_id: i32,
    cluster_id: String,
    brokers: watch::Receiver<Arc<Vec<Broker>>>,
    cache: Arc<CatalogCache>,
    catalog: watch::Receiver<Arc<Catalog>>,
    publish: Arc<watch::Sender<Arc<Catalog>>>,
    convert: JoinHandle<()>,
    /// The group leases and store this broker coordinates its groups through.
    groups: Arc<crate::group_owner::GroupOwner>,
}

impl std::fmt::Debug for PgCluster {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PgCluster")
            .field("node_id", &self.node_id)
            .field("cluster_id", &self.cluster_id)
            .finish_non_exhaustive()
    }
}

impl Drop for PgCluster {
    fn drop(&mut self) {
        self.convert.abort();
    }
}

fn broker_catalog(s: &CatalogSnapshot) -> Catalog {
    Catalog {
        version: s.version,
        topics: s
            .topics
            .values()
            .map(|t| {
                (
                    t.name.clone(),
                    CatalogTopic {
                        id: t.topic_id,
                        name: t.name.clone(),
                        partitions: t.partitions,
                        configs: t.configs.clone(),
                    },
                )
            })
            .collect(),
    }
}

/// Publishes `next` unless the copy published already is as new.
fn publish_newer(tx: &watch::Sender<Arc<Catalog>>, next: Catalog) {
    tx.send_if_modified(|current| {
        if next.version > current.version {
            *current = Arc::new(next);
            true
        } else {
            false
        }
    });
}

fn cluster_error(e: CatalogError) -> ClusterError {
    match e {
        CatalogError::TopicExists(name) => ClusterError::TopicExists(name),
        CatalogError::UnknownTopic(name) => ClusterError::UnknownTopic(name),
        CatalogError::InvalidPartitions(why) => ClusterError::InvalidPartitions(why),
        other => ClusterError::Unavailable(other.to_string()),
    }
}

impl PgCluster {
    /// Starts the catalog cache (refreshed every `refresh`) over `db`, for the broker
    /// `node_id` whose registry publishes `brokers`.
    pub async fn start(
        db: Db,
        node_id: i32,
        cluster_id: String,
        brokers: watch::Receiver<Arc<Vec<Broker>>>,
        refresh: Duration,
        groups: Arc<crate::group_owner::GroupOwner>,
    ) -> Result<PgCluster, CatalogError> {
        let cache = Arc::new(CatalogCache::start(db.clone(), refresh).await?);
        let mut snapshots = cache.subscribe();
        let first = broker_catalog(&snapshots.borrow_and_update());
        let (tx, catalog) = watch::channel(Arc::new(first));
        let publish = Arc::new(tx);
        let tx = Arc::clone(&publish);
        let convert = tokio::spawn(async move {
            while snapshots.changed().await.is_ok() {
                let next = broker_catalog(&snapshots.borrow_and_update());
                publish_newer(&tx, next);
            }
        });
        Ok(PgCluster {
            db,
            node_id,
            cluster_id,
            brokers,
            cache,
            catalog,
            publish,
            convert,
            groups,
        })
    }

    fn live_ids(&self) -> Vec<i32> {
        self.brokers.borrow().iter().map(|b| b.broker_id).collect()
    }
}

impl ClusterMeta for PgCluster {
    fn node_id(&self) -> i32 {
        self.node_id
    }

    fn cluster_id(&self) -> String {
        self.cluster_id.clone()
    }

    fn live_brokers(&self) -> Arc<Vec<ClusterNode>> {
        Arc::new(
            self.brokers
                .borrow()
                .iter()
                .map(|b| ClusterNode {
                    node_id: b.broker_id,
                    host: b.host.clone(),
                    port: i32::from(b.port),
                    rack: b.rack.clone(),
                })
                .collect(),
        )
    }

    fn leader_for(&self, topic_id: Uuid, partition: i32) -> i32 {
        registry::leader_for(&self.brokers.borrow(), topic_id, partition).unwrap_or(self.node_id)
    }

    fn leader_in_zone(&self, topic_id: Uuid, partition: i32, zone: &str) -> i32 {
        let brokers = self.brokers.borrow();
        let local: Vec<Broker> = brokers
            .iter()
            .filter(|b| b.rack.as_deref() == Some(zone))
            .cloned()
            .collect();
        let among = if local.is_empty() {
            &brokers[..]
        } else {
            &local[..]
        };
        registry::leader_for(among, topic_id, partition).unwrap_or(self.node_id)
    }

    fn catalog(&self) -> watch::Receiver<Arc<Catalog>> {
        self.catalog.clone()
    }

    fn refresh(&self) -> BoxFuture<'static, Result<(), ClusterError>> {
        let cache = Arc::clone(&self.cache);
        let publish = Arc::clone(&self.publish);
        async move {
            cache.refresh_now().await.map_err(cluster_error)?;
            // Published here, not only by the converting task, so the caller's next look at
            // `catalog()` already shows what the refresh read.
            publish_newer(&publish, broker_catalog(&cache.snapshot()));
            Ok(())
        }
        .boxed()
    }

    fn create_topic(
        &self,
        id: Uuid,
        name: String,
        partitions: i32,
        configs: BTreeMap<String, String>,
    ) -> BoxFuture<'static, Result<(), ClusterError>> {
        let db = self.db.clone();
        async move {
            catalog::create_topic(&db, &name, id, partitions, configs)
                .await
                .map(|_| ())
                .map_err(cluster_error)
        }
        .boxed()
    }

    fn delete_topic(&self, name: String) -> BoxFuture<'static, Result<(), ClusterError>> {
        let db = self.db.clone();
        async move {
            catalog::delete_topic(&db, &name)
                .await
                .map(|_| ())
                .map_err(cluster_error)
        }
        .boxed()
    }

    fn create_partitions(
        &self,
        name: String,
        total: i32,
    ) -> BoxFuture<'static, Result<(), ClusterError>> {
        let db = self.db.clone();
        async move {
            catalog::create_partitions(&db, &name, total)
                .await
                .map(|_| ())
                .map_err(cluster_error)
        }
        .boxed()
    }

    fn set_configs(
        &self,
        name: String,
        configs: BTreeMap<String, String>,
    ) -> BoxFuture<'static, Result<(), ClusterError>> {
        let db = self.db.clone();
        async move {
            catalog::replace_configs(&db, &name, configs)
                .await
                .map(|_| ())
                .map_err(cluster_error)
        }
        .boxed()
    }

    fn producer_id_block(&self) -> BoxFuture<'static, Result<(i64, i64), ClusterError>> {
        let db = self.db.clone();
        async move {
            catalog::allocate_producer_id_block(&db)
                .await
                .map_err(cluster_error)
        }
        .boxed()
    }

    fn group_ownership(&self) -> Option<Arc<dyn sluice_groups::GroupOwnership>> {
        Some(Arc::clone(&self.groups) as Arc<dyn sluice_groups::GroupOwnership>)
    }

    fn shared_file(
        &self,
        name: String,
    ) -> BoxFuture<'static, Result<Option<sluice_broker::cluster::SharedFileVersion>, ClusterError>>
    {
        let db = self.db.clone();
        async move {
            crate::shared_files::load(&db, &name)
                .await
                .map_err(|e| ClusterError::Unavailable(e.to_string()))
        }
        .boxed()
    }

    fn store_shared_file(
        &self,
        name: String,
        expected: i64,
        contents: Vec<u8>,
    ) -> BoxFuture<'static, Result<bool, ClusterError>> {
        let db = self.db.clone();
        async move {
            crate::shared_files::store(&db, &name, expected, &contents)
                .await
                .map_err(|e| ClusterError::Unavailable(e.to_string()))
        }
        .boxed()
    }

    fn shared_file_versions(&self) -> BoxFuture<'static, Result<Vec<(String, i64)>, ClusterError>> {
        let db = self.db.clone();
        async move {
            crate::shared_files::versions(&db)
                .await
                .map_err(|e| ClusterError::Unavailable(e.to_string()))
        }
        .boxed()
    }

    fn find_coordinator(&self, group: String) -> BoxFuture<'static, Result<i32, ClusterError>> {
        let db = self.db.clone();
        let live = self.live_ids();
        let me = self.node_id;
        async move {
            let holder = crate::groups::find_coordinator(&db, &group)
                .await
                .map_err(|e| ClusterError::Unavailable(e.to_string()))?;
            Ok(holder
                .or_else(|| crate::groups::preferred_coordinator(&live, &group))
                .unwrap_or(me))
        }
        .boxed()
    }
}
