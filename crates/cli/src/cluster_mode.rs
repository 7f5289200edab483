//! `sluice serve --storage s3://... --metadata postgres://...`: joining a cluster of brokers
//! (docs/cluster.md). Every step that can fail at start is one line and stops the broker
//! before it serves anything.

use std::sync::Arc;

use anyhow::anyhow;
use sluice_cluster::meta::PgCluster;
use sluice_cluster::registry::{self, BrokerInfo, Registry, RegistrySettings};
use sluice_cluster::store::{ClusterStore, StoreSettings, Writer};
use sluice_cluster::{Db, DbSettings, MetadataUrl, migrate};

use crate::settings::StorageSettings;

/// A broker's membership of a cluster, once joined.
pub struct Joined {
    pub registry: Registry,
    pub store: Arc<ClusterStore>,
    pub meta: Arc<PgCluster>,
}

/// Opens the bucket (with its start check), the metadata database (migrating its schema),
/// registers this broker as reachable at `host:port`, and starts its storage and its view
/// of the catalog. Logs `storage: ...`, `metadata: postgres://HOST:PORT/DB` (never the
/// password) and the registration.
pub async fn join(
    storage: &StorageSettings,
    metadata: &MetadataUrl,
    data_dir: &std::path::Path,
    host: &str,
    port: u16,
    cleaner_interval: std::time::Duration,
) -> anyhow::Result<Joined> {
    tracing::info!("storage: {}", storage.url);
    tracing::info!("metadata: {metadata}");
    let config = sluice_objstore::BucketConfig::from_process_env(storage.url.clone())
        .map_err(|e| anyhow!("{e}"))?;
    let bucket = sluice_objstore::bucket::open(config).map_err(|e| anyhow!("{e}"))?;
    bucket.check().await.map_err(|e| anyhow!("{e}"))?;
    let db = Db::connect(metadata, DbSettings::default())
        .await
        .map_err(|e| anyhow!("{e}"))?;
    let migrated = migrate::migrate(&db).await.map_err(|e| anyhow!("{e}"))?;
    if migrated.from != migrated.to {
        tracing::info!(
            from = migrated.from,
            to = migrated.to,
            "metadata schema migrated"
        );
    }
    let cluster = registry::bind_cluster(&db, &storage.url.to_string())
        .await
        .map_err(|e| anyhow!("{e}"))?;
    let process = format!(
        "host {} pid {}",
        hostname().unwrap_or_else(|| "unknown".into()),
        std::process::id()
    );
    let registry = Registry::register(
        &db,
        BrokerInfo {
            host: host.to_string(),
            port,
            rack: storage.rack.clone(),
            process,
        },
        RegistrySettings::default(),
    )
    .await
    .map_err(|e| anyhow!("{e}"))?;
    tracing::info!(cluster_id = %cluster.cluster_id, "{registry}");
    let settings = StoreSettings {
        flush: sluice_objstore::flush::FlushSettings {
            linger: storage.linger,
            max_bytes: storage.max_bytes,
            puts_in_flight: storage.puts_in_flight,
            put_timeout: storage.put_timeout,
            ..Default::default()
        },
        cache: sluice_objstore::cache::CacheSettings {
            memory_bytes: storage.memory_bytes,
            disk_bytes: storage.cache_bytes,
            ..sluice_objstore::cache::CacheSettings::new(data_dir)
        },
        cleaner: sluice_cluster::retention::CleanerSettings {
            interval: cleaner_interval,
            ..Default::default()
        },
    };
    let writer = Writer {
        broker_id: registry.broker_id(),
        instance: registry.instance(),
        status: registry.status(),
    };
    let store = ClusterStore::start(db.clone(), bucket, writer, settings)
        .await
        .map_err(|e| anyhow!("{e}"))?;
    let groups = sluice_cluster::group_owner::GroupOwner::start(
        db.clone(),
        registry.broker_id(),
        registry.instance(),
        sluice_cluster::groups::DEFAULT_LEASE,
    )
    .map_err(|e| anyhow!("{e}"))?;
    let meta = PgCluster::start(
        db.clone(),
        registry.broker_id(),
        cluster.cluster_id.clone(),
        registry.brokers(),
        sluice_cluster::catalog::CATALOG_REFRESH,
        groups,
    )
    .await
    .map_err(|e| anyhow!("reading the topic catalog: {e}"))?;
    Ok(Joined {
        registry,
        store: Arc::new(store),
        meta: Arc::new(meta),
    })
}

/// This machine's host name, for the registry's `process` column.
fn hostname() -> Option<String> {
    let mut buf = [0u8; 256];
    // SAFETY: gethostname writes at most `buf.len()` bytes into `buf`.
    let rc = unsafe { libc::gethostname(buf.as_mut_ptr().cast(), buf.len()) };
    if rc != 0 {
        return None;
    }
    let end = buf.iter().position(|&b| b == 0).unwrap_or(buf.len());
    String::from_utf8(buf[..end].to_vec()).ok()
}
