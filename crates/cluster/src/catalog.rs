//! The topic catalog of a cluster: topics, their partition counts and configs, and producer
//! id blocks, in PostgreSQL, so a topic created through any broker is seen by all.
//!
//! Where it sits: the broker's admin handlers (CreateTopics, DeleteTopics, CreatePartitions,
//! AlterConfigs, IncrementalAlterConfigs) validate a request as in single-broker mode, then
//! call the write functions here instead of writing `topic.json`. Produce, Fetch and Metadata
//! read topics from a [`CatalogCache`], an in-memory copy every broker keeps current.
//!
//! Tables (migration `0002_catalog.sql`, schema `sluice`):
//!
//! | table | holds |
//! |---|---|
//! | `topics` | one row per topic ever created: id, name, partition count, configs, `deleted_at` |
//! | `partitions` | one row per live partition: `next_offset` and `log_start`, owned by the commit protocol ([`crate::commit`]) |
//! | `catalog_version` | the version of the catalog, moved by every change |
//! | sequences `catalog_versions`, `producer_id_blocks` | versions, and producer ids by blocks |
//!
//! ## Changes
//!
//! Every write ([`create_topic`], [`delete_topic`], [`create_partitions`], [`alter_configs`],
//! [`replace_configs`]) is one transaction that
//!
//! 1. takes the lock of the `catalog_version` row, so catalog changes run one at a time
//!    across the cluster (they are rare; this keeps versions in commit order, see the
//!    migration for why that matters),
//! 2. makes its change,
//! 3. stores `nextval('catalog_versions')` in that row and queues `NOTIFY sluice_catalog`
//!    ([`CATALOG_CHANNEL`]) with the new version,
//! 4. commits with `synchronous_commit = on` whatever the server's default is.
//!
//! *Durability contract:* when a write returns `Ok`, its change is committed and flushed to
//! PostgreSQL's WAL, every broker's next read of the catalog sees it, and the notification is
//! sent. When it returns `Err`, nothing of it happened — except after a connection lost
//! during the commit itself, when it may or may not have: the caller answers with a retriable
//! error and the client's retry finds out (`TOPIC_ALREADY_EXISTS`, `UNKNOWN_TOPIC`).
//!
//! ## The cache
//!
//! [`CatalogCache`] loads the whole catalog with its version in one snapshot, then polls the
//! version every [`CATALOG_REFRESH`] and reloads when it moved. After its own changes a broker
//! calls [`CatalogCache::refresh_now`], so it sees them at once. While PostgreSQL cannot be
//! reached the cache keeps serving its last copy (produce and fetch need the catalog, not a
//! live database), logs one warning per outage, and reports how old its copy is
//! ([`CatalogCache::status`]).

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::sync::watch;
use tokio::task::JoinHandle;
use tokio_postgres::IsolationLevel;
use tokio_postgres::Row;
use tokio_postgres::error::SqlState;
use tokio_postgres::types::Json;
use uuid::Uuid;

use crate::db::{Client, Db, DbError};

/// The `NOTIFY` channel every catalog change signals on; the payload is the new version.
pub const CATALOG_CHANNEL: &str = "sluice_catalog";

/// How often a [`CatalogCache`] asks PostgreSQL whether the catalog changed.
///
/// This is how long another broker's change can take to be seen here when no notification
/// wakes the cache earlier. One second is shorter than any Kafka client waits before it
/// retries `UNKNOWN_TOPIC_OR_PARTITION` after a create (its metadata refresh backoff), and the
/// poll itself is one index lookup of one row, so 100 brokers cost PostgreSQL 100 trivial
/// queries a second.
pub const CATALOG_REFRESH: Duration = Duration::from_secs(1);

/// Longest one poll (version check and, if needed, reload) may take before it counts as
/// failed. The pool's connect (5 s) and statement (10 s) bounds end most stuck polls first;
/// this one also ends a connection that waits on a network that dropped it silently, where
/// TCP alone would wait for minutes.
pub const CATALOG_POLL_TIMEOUT: Duration = Duration::from_secs(15);

/// How many producer ids one [`allocate_producer_id_block`] hands out; the `INCREMENT` of the
/// `producer_id_blocks` sequence. A broker takes a new block when it used this many, so
/// PostgreSQL sees one `nextval` per 1000 `InitProducerId` calls.
pub const PRODUCER_ID_BLOCK_SIZE: i64 = 1000;

/// One topic as the catalog keeps it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Topic {
    pub topic_id: Uuid,
    pub name: String,
    pub partitions: i32,
    /// Topic-level config overrides, name -> value.
    pub configs: BTreeMap<String, String>,
}

/// Why a catalog read or change failed; one line each.
#[derive(Debug, thiserror::Error)]
pub enum CatalogError {
    #[error("topic '{0}' already exists")]
    TopicExists(String),
    #[error("unknown topic '{0}'")]
    UnknownTopic(String),
    /// The caller's new topic id is some topic's (live or deleted) already; ids are random
    /// UUIDs, so this is a bug or a retry with a reused id, never a name clash.
    #[error("topic id {0} is already taken")]
    TopicIdTaken(Uuid),
    #[error("{0}")]
    InvalidPartitions(String),
    #[error(transparent)]
    Db(#[from] DbError),
}

impl From<tokio_postgres::Error> for CatalogError {
    fn from(e: tokio_postgres::Error) -> Self {
        CatalogError::Db(DbError::Query(e))
    }
}

impl CatalogError {
    /// The request may work if retried: the database failed, not the request.
    pub fn is_retriable(&self) -> bool {
        matches!(self, CatalogError::Db(_))
    }
}

const TOPIC_COLUMNS: &str = "topic_id, name, partitions, configs";

fn topic_from_row(row: &Row) -> Result<Topic, CatalogError> {
    let Json(configs): Json<BTreeMap<String, String>> = row.try_get("configs")?;
    Ok(Topic {
        topic_id: row.try_get("topic_id")?,
        name: row.try_get("name")?,
        partitions: row.try_get("partitions")?,
        configs,
    })
}

/// Starts a catalog change: a transaction holding the `catalog_version` row's lock, with
/// `synchronous_commit` on (see the module documentation).
async fn begin_change(
    client: &mut Client,
) -> Result<deadpool_postgres::Transaction<'_>, CatalogError> {
    let tx = client.transaction().await?;
    tx.batch_execute(
        "SET LOCAL synchronous_commit = on;
         SELECT version FROM catalog_version FOR UPDATE;",
    )
    .await?;
    Ok(tx)
}

/// Ends a catalog change: the next version, its notification, the commit. Returns the
/// version.
async fn finish_change(tx: deadpool_postgres::Transaction<'_>) -> Result<i64, CatalogError> {
    let row = tx
        .query_one(
            "UPDATE catalog_version SET version = nextval('catalog_versions') RETURNING version",
            &[],
        )
        .await?;
    let version: i64 = row.try_get(0)?;
    tx.execute(
        "SELECT pg_notify($1, $2)",
        &[&CATALOG_CHANNEL, &version.to_string()],
    )
    .await?;
    tx.commit().await?;
    Ok(version)
}

/// The live topic `name`, its row locked until the transaction ends.
async fn locked_topic(
    tx: &deadpool_postgres::Transaction<'_>,
    name: &str,
) -> Result<Topic, CatalogError> {
    let row = tx
        .query_opt(
            &format!(
                "SELECT {TOPIC_COLUMNS} FROM topics WHERE name = $1 AND deleted_at IS NULL FOR UPDATE"
            ),
            &[&name],
        )
        .await?
        .ok_or_else(|| CatalogError::UnknownTopic(name.to_owned()))?;
    topic_from_row(&row)
}

/// Creates topic `name` with id `topic_id`, `partitions` partitions (each starting at offset
/// 0) and `configs`, in one transaction. The caller has validated the name, count and
/// configs. A live topic of that name already there — also one another broker is creating
/// at this moment — gives [`CatalogError::TopicExists`] and changes nothing.
pub async fn create_topic(
    db: &Db,
    name: &str,
    topic_id: Uuid,
    partitions: i32,
    configs: BTreeMap<String, String>,
) -> Result<Topic, CatalogError> {
    if partitions < 1 {
        return Err(CatalogError::InvalidPartitions(format!(
            "invalid partition count {partitions} for topic '{name}': a topic has at least 1"
        )));
    }
    let mut client = db.client().await?;
    let tx = begin_change(&mut client).await?;
    let inserted = tx
        .execute(
            "INSERT INTO topics (topic_id, name, partitions, configs) VALUES ($1, $2, $3, $4)",
            &[&topic_id, &name, &partitions, &Json(&configs)],
        )
        .await;
    if let Err(e) = inserted {
        // Both constraints are checked against committed rows: a create of the same name
        // that committed while this one waited for the catalog lock is found here.
        if let Some(db_error) = e.as_db_error()
            && *db_error.code() == SqlState::UNIQUE_VIOLATION
        {
            return Err(match db_error.constraint() {
                Some("topics_pkey") => CatalogError::TopicIdTaken(topic_id),
                _ => CatalogError::TopicExists(name.to_owned()),
            });
        }
        return Err(e.into());
    }
    tx.execute(
        "INSERT INTO partitions (topic_id, partition, next_offset, log_start)
         SELECT $1, p, 0, 0 FROM generate_series(0, $2 - 1) AS p",
        &[&topic_id, &partitions],
    )
    .await?;
    finish_change(tx).await?;
    Ok(Topic {
        topic_id,
        name: name.to_owned(),
        partitions,
        configs,
    })
}

/// Deletes the live topic `name`: marks it deleted (the name is free for a new topic at
/// once; the new one gets a new id) and removes its partitions' offsets and its producers'
/// sequence state, in one transaction. Returns the topic as it was. Its batches and objects
/// stay until a later cleanup; no reader finds them, as every lookup goes through a live
/// topic's id.
pub async fn delete_topic(db: &Db, name: &str) -> Result<Topic, CatalogError> {
    let mut client = db.client().await?;
    let tx = begin_change(&mut client).await?;
    let topic = locked_topic(&tx, name).await?;
    tx.execute(
        "UPDATE topics SET deleted_at = now() WHERE topic_id = $1",
        &[&topic.topic_id],
    )
    .await?;
    // The partitions rows are locked in partition order before anything else is touched,
    // the order in which commits lock them, so a commit running into this delete waits (and
    // then finds the partition gone) instead of deadlocking with it.
    tx.execute(
        "SELECT 1 FROM partitions WHERE topic_id = $1 ORDER BY partition FOR UPDATE",
        &[&topic.topic_id],
    )
    .await?;
    tx.execute(
        "DELETE FROM producers WHERE topic_id = $1",
        &[&topic.topic_id],
    )
    .await?;
    tx.execute(
        "DELETE FROM partitions WHERE topic_id = $1",
        &[&topic.topic_id],
    )
    .await?;
    finish_change(tx).await?;
    Ok(topic)
}

/// Grows topic `name` to `new_total` partitions (the new ones start at offset 0).
/// Partitions cannot be removed: a `new_total` not above the current count is
/// [`CatalogError::InvalidPartitions`] and changes nothing.
pub async fn create_partitions(db: &Db, name: &str, new_total: i32) -> Result<Topic, CatalogError> {
    let mut client = db.client().await?;
    let tx = begin_change(&mut client).await?;
    let mut topic = locked_topic(&tx, name).await?;
    check_partitions_increase(&topic, new_total)?;
    tx.execute(
        "UPDATE topics SET partitions = $2 WHERE topic_id = $1",
        &[&topic.topic_id, &new_total],
    )
    .await?;
    tx.execute(
        "INSERT INTO partitions (topic_id, partition, next_offset, log_start)
         SELECT $1, p, 0, 0 FROM generate_series($2, $3 - 1) AS p",
        &[&topic.topic_id, &topic.partitions, &new_total],
    )
    .await?;
    finish_change(tx).await?;
    topic.partitions = new_total;
    Ok(topic)
}

fn check_partitions_increase(topic: &Topic, new_total: i32) -> Result<(), CatalogError> {
    if new_total <= topic.partitions {
        return Err(CatalogError::InvalidPartitions(format!(
            "topic '{}' has {} partitions; the new count {new_total} must be larger \
             (partitions cannot be removed)",
            topic.name, topic.partitions
        )));
    }
    Ok(())
}

/// Edits topic `name`'s configs (IncrementalAlterConfigs): sets each of `set`, then removes
/// each of `delete` (back to the broker's default). Others are kept.
pub async fn alter_configs(
    db: &Db,
    name: &str,
    set: &BTreeMap<String, String>,
    delete: &[String],
) -> Result<Topic, CatalogError> {
    let mut client = db.client().await?;
    let tx = begin_change(&mut client).await?;
    let mut topic = locked_topic(&tx, name).await?;
    edit_configs(&mut topic.configs, set, delete);
    write_configs(&tx, &topic).await?;
    finish_change(tx).await?;
    Ok(topic)
}

/// Replaces all of topic `name`'s configs with `configs` (AlterConfigs): any not named
/// goes back to the broker's default.
pub async fn replace_configs(
    db: &Db,
    name: &str,
    configs: BTreeMap<String, String>,
) -> Result<Topic, CatalogError> {
    let mut client = db.client().await?;
    let tx = begin_change(&mut client).await?;
    let mut topic = locked_topic(&tx, name).await?;
    topic.configs = configs;
    write_configs(&tx, &topic).await?;
    finish_change(tx).await?;
    Ok(topic)
}

fn edit_configs(
    configs: &mut BTreeMap<String, String>,
    set: &BTreeMap<String, String>,
    delete: &[String],
) {
    for (k, v) in set {
        configs.insert(k.clone(), v.clone());
    }
    for k in delete {
        configs.remove(k);
    }
}

async fn write_configs(
    tx: &deadpool_postgres::Transaction<'_>,
    topic: &Topic,
) -> Result<(), CatalogError> {
    tx.execute(
        "UPDATE topics SET configs = $2 WHERE topic_id = $1",
        &[&topic.topic_id, &Json(&topic.configs)],
    )
    .await?;
    Ok(())
}

/// Every live topic, by name.
pub async fn list_topics(db: &Db) -> Result<Vec<Topic>, CatalogError> {
    let client = db.client().await?;
    let rows = client
        .query(
            &format!("SELECT {TOPIC_COLUMNS} FROM topics WHERE deleted_at IS NULL ORDER BY name"),
            &[],
        )
        .await?;
    rows.iter().map(topic_from_row).collect()
}

/// The live topic `name`.
pub async fn topic(db: &Db, name: &str) -> Result<Option<Topic>, CatalogError> {
    let client = db.client().await?;
    let row = client
        .query_opt(
            &format!("SELECT {TOPIC_COLUMNS} FROM topics WHERE name = $1 AND deleted_at IS NULL"),
            &[&name],
        )
        .await?;
    row.as_ref().map(topic_from_row).transpose()
}

/// The live topic with id `topic_id` (a deleted topic's id finds nothing, as Kafka's
/// `UNKNOWN_TOPIC_ID`).
pub async fn topic_by_id(db: &Db, topic_id: Uuid) -> Result<Option<Topic>, CatalogError> {
    let client = db.client().await?;
    let row = client
        .query_opt(
            &format!(
                "SELECT {TOPIC_COLUMNS} FROM topics WHERE topic_id = $1 AND deleted_at IS NULL"
            ),
            &[&topic_id],
        )
        .await?;
    row.as_ref().map(topic_from_row).transpose()
}

/// The catalog's current version: 0 before the first change, then higher after each. One
/// row read; what a [`CatalogCache`] polls.
pub async fn catalog_version(db: &Db) -> Result<i64, CatalogError> {
    let client = db.client().await?;
    let row = client
        .query_one("SELECT version FROM catalog_version", &[])
        .await?;
    Ok(row.try_get(0)?)
}

/// The whole catalog and its version, read in one snapshot: the topics are exactly those of
/// that version.
pub async fn load_catalog(db: &Db) -> Result<CatalogSnapshot, CatalogError> {
    let mut client = db.client().await?;
    let tx = client
        .build_transaction()
        .isolation_level(IsolationLevel::RepeatableRead)
        .read_only(true)
        .start()
        .await?;
    let version: i64 = tx
        .query_one("SELECT version FROM catalog_version", &[])
        .await?
        .try_get(0)?;
    let rows = tx
        .query(
            &format!("SELECT {TOPIC_COLUMNS} FROM topics WHERE deleted_at IS NULL"),
            &[],
        )
        .await?;
    tx.commit().await?;
    let topics = rows
        .iter()
        .map(topic_from_row)
        .collect::<Result<Vec<_>, _>>()?;
    Ok(CatalogSnapshot::new(version, topics))
}

/// Takes the next block of producer ids: `(first, count)`, the ids `first..first + count`.
/// Blocks come from one PostgreSQL sequence, so no id is handed out twice, across brokers
/// and across restarts and crashes of brokers and of PostgreSQL (the block is flushed to
/// PostgreSQL's WAL before it is returned, whatever `synchronous_commit` the server has).
/// Ids of a block a broker did not use up are lost, which is fine: there are 2^63.
pub async fn allocate_producer_id_block(db: &Db) -> Result<(i64, i64), CatalogError> {
    let mut client = db.client().await?;
    let tx = client.transaction().await?;
    tx.batch_execute("SET LOCAL synchronous_commit = on")
        .await?;
    let first: i64 = tx
        .query_one("SELECT nextval('producer_id_blocks')", &[])
        .await?
        .try_get(0)?;
    tx.commit().await?;
    Ok((first, PRODUCER_ID_BLOCK_SIZE))
}

/// One consistent copy of the catalog.
#[derive(Debug, Clone)]
pub struct CatalogSnapshot {
    /// The catalog version this copy is of.
    pub version: i64,
    /// Live topics by name.
    pub topics: BTreeMap<String, Topic>,
    /// Topic ids to names.
    by_id: HashMap<Uuid, String>,
    /// When this copy was read from PostgreSQL.
    pub loaded_at: Instant,
}

impl CatalogSnapshot {
    fn new(version: i64, topics: Vec<Topic>) -> CatalogSnapshot {
        let by_id = topics
            .iter()
            .map(|t| (t.topic_id, t.name.clone()))
            .collect();
        CatalogSnapshot {
            version,
            topics: topics.into_iter().map(|t| (t.name.clone(), t)).collect(),
            by_id,
            loaded_at: Instant::now(),
        }
    }

    pub fn topic(&self, name: &str) -> Option<&Topic> {
        self.topics.get(name)
    }

    pub fn topic_by_id(&self, topic_id: Uuid) -> Option<&Topic> {
        self.by_id.get(&topic_id).and_then(|n| self.topics.get(n))
    }
}

/// What a [`CatalogCache`] knows about how current it is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CacheStatus {
    /// The version of the copy served.
    pub version: i64,
    /// Time since PostgreSQL last confirmed the copy current (a poll or a reload that
    /// succeeded). Stays below [`CATALOG_REFRESH`] plus a poll's duration while PostgreSQL
    /// answers; grows during an outage.
    pub age: Duration,
    /// Whether the last poll reached PostgreSQL.
    pub reachable: bool,
    /// Outages seen since the cache started (each is one warning in the log).
    pub outages: u64,
}

#[derive(Debug)]
struct Health {
    /// When the last successful check started (so the copy was current at least then).
    checked_at: Instant,
    /// When the current outage began, if PostgreSQL is unreachable.
    down_since: Option<Instant>,
    outages: u64,
}

#[derive(Debug)]
struct Shared {
    db: Db,
    copy: watch::Sender<Arc<CatalogSnapshot>>,
    health: Mutex<Health>,
}

impl Shared {
    /// Publishes `snapshot` unless a newer one is there already (a poll and a
    /// `refresh_now` may race). `backwards` lets a poll accept a lower version: the database
    /// was replaced, and its catalog is the truth now.
    fn publish(&self, snapshot: CatalogSnapshot, backwards: bool) {
        self.copy.send_if_modified(|current| {
            let newer = snapshot.version > current.version;
            if !(newer || (backwards && snapshot.version != current.version)) {
                return false;
            }
            if !newer {
                tracing::warn!(
                    from = current.version,
                    to = snapshot.version,
                    "the metadata database's catalog version went back: was it restored from \
                     a backup? Serving its catalog as it is now"
                );
            }
            *current = Arc::new(snapshot);
            true
        });
    }

    fn confirmed(&self, started: Instant) {
        let mut health = self.health.lock().expect("catalog health lock");
        health.checked_at = health.checked_at.max(started);
    }

    /// One poll: the version, and the whole catalog if it moved.
    async fn poll(&self) -> Result<(), CatalogError> {
        let started = Instant::now();
        let version = catalog_version(&self.db).await?;
        let current = self.copy.borrow().version;
        if version != current {
            let snapshot = load_catalog(&self.db).await?;
            self.publish(snapshot, version < current);
        }
        self.confirmed(started);
        Ok(())
    }

    /// Records a poll's outcome; logs the start and the end of an outage, once each.
    fn note_poll(&self, outcome: Result<(), String>) {
        let mut health = self.health.lock().expect("catalog health lock");
        match outcome {
            Ok(()) => {
                if let Some(since) = health.down_since.take() {
                    tracing::info!(
                        url = %self.db.url(),
                        down_for = ?since.elapsed(),
                        version = self.copy.borrow().version,
                        "metadata database reachable again; topic catalog current"
                    );
                }
            }
            Err(error) => {
                if health.down_since.is_none() {
                    health.down_since = Some(Instant::now());
                    health.outages += 1;
                    tracing::warn!(
                        url = %self.db.url(),
                        %error,
                        version = self.copy.borrow().version,
                        age = ?health.checked_at.elapsed(),
                        "cannot read the topic catalog from the metadata database; serving the \
                         last copy until it answers again (topics created or changed elsewhere \
                         meanwhile are not seen)"
                    );
                } else {
                    tracing::debug!(%error, "topic catalog poll failed again");
                }
            }
        }
    }
}

/// A broker's in-memory copy of the catalog, kept current by a background task (see the
/// module documentation). Reads never touch PostgreSQL. Dropping it stops the task.
#[derive(Debug)]
pub struct CatalogCache {
    shared: Arc<Shared>,
    task: JoinHandle<()>,
}

impl CatalogCache {
    /// Loads the catalog (which must succeed: a broker cannot serve without one) and starts
    /// polling it every `refresh` ([`CATALOG_REFRESH`] in production). Call within a Tokio
    /// runtime.
    pub async fn start(db: Db, refresh: Duration) -> Result<CatalogCache, CatalogError> {
        let started = Instant::now();
        let first = load_catalog(&db).await?;
        let (copy, _) = watch::channel(Arc::new(first));
        let shared = Arc::new(Shared {
            db,
            copy,
            health: Mutex::new(Health {
                checked_at: started,
                down_since: None,
                outages: 0,
            }),
        });
        let task = tokio::spawn(poll_loop(
            Arc::clone(&shared),
            refresh.max(Duration::from_millis(1)),
        ));
        Ok(CatalogCache { shared, task })
    }

    /// The current copy.
    pub fn snapshot(&self) -> Arc<CatalogSnapshot> {
        Arc::clone(&self.shared.copy.borrow())
    }

    /// The live topic `name` in the current copy.
    pub fn topic(&self, name: &str) -> Option<Topic> {
        self.shared.copy.borrow().topic(name).cloned()
    }

    /// The live topic with id `topic_id` in the current copy.
    pub fn topic_by_id(&self, topic_id: Uuid) -> Option<Topic> {
        self.shared.copy.borrow().topic_by_id(topic_id).cloned()
    }

    /// The version of the current copy.
    pub fn version(&self) -> i64 {
        self.shared.copy.borrow().version
    }

    /// A receiver that sees every new copy (for work to do when topics appear or go).
    pub fn subscribe(&self) -> watch::Receiver<Arc<CatalogSnapshot>> {
        self.shared.copy.subscribe()
    }

    /// Reloads the catalog now, e.g. after this broker's own change (so it answers with it at
    /// once) or on a `sluice_catalog` notification. On `Err` the previous copy stays.
    pub async fn refresh_now(&self) -> Result<(), CatalogError> {
        let started = Instant::now();
        let snapshot = load_catalog(&self.shared.db).await?;
        self.shared.publish(snapshot, false);
        self.shared.confirmed(started);
        Ok(())
    }

    /// How current the copy is.
    pub fn status(&self) -> CacheStatus {
        let health = self.shared.health.lock().expect("catalog health lock");
        CacheStatus {
            version: self.version(),
            age: health.checked_at.elapsed(),
            reachable: health.down_since.is_none(),
            outages: health.outages,
        }
    }

    /// Time since PostgreSQL last confirmed the copy current ([`CacheStatus::age`]).
    pub fn age(&self) -> Duration {
        self.status().age
    }
}

impl Drop for CatalogCache {
    fn drop(&mut self) {
        self.task.abort();
    }
}

async fn poll_loop(shared: Arc<Shared>, refresh: Duration) {
    let mut ticker = tokio::time::interval(refresh);
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    // The first tick is at once; the copy was just loaded.
    ticker.tick().await;
    loop {
        ticker.tick().await;
        let outcome = match tokio::time::timeout(CATALOG_POLL_TIMEOUT, shared.poll()).await {
            Ok(Ok(())) => Ok(()),
            Ok(Err(e)) => Err(e.to_string()),
            Err(_) => Err(format!("no answer within {CATALOG_POLL_TIMEOUT:?}")),
        };
        shared.note_poll(outcome);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn topic(name: &str, partitions: i32) -> Topic {
        Topic {
            topic_id: Uuid::new_v4(),
            name: name.to_owned(),
            partitions,
            configs: BTreeMap::new(),
        }
    }

    #[test]
    fn config_edits_set_then_delete_and_keep_the_rest() {
        let mut configs: BTreeMap<String, String> = [
            ("retention.ms", "1000"),
            ("cleanup.policy", "delete"),
            ("segment.bytes", "1048576"),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .collect();
        let set = [("retention.ms".to_owned(), "2000".to_owned())].into();
        edit_configs(
            &mut configs,
            &set,
            &["segment.bytes".to_owned(), "absent".to_owned()],
        );
        assert_eq!(configs.len(), 2);
        assert_eq!(configs["retention.ms"], "2000");
        assert_eq!(configs["cleanup.policy"], "delete");
    }

    #[test]
    fn partitions_only_grow_and_the_refusal_says_why() {
        let t = topic("orders", 3);
        assert!(check_partitions_increase(&t, 4).is_ok());
        for count in [3, 2, 0, -1] {
            let e = check_partitions_increase(&t, count).unwrap_err();
            let line = e.to_string();
            assert!(matches!(e, CatalogError::InvalidPartitions(_)));
            assert!(
                line.contains("'orders' has 3 partitions") && line.contains("cannot be removed"),
                "{line}"
            );
        }
    }

    #[test]
    fn snapshot_finds_topics_by_name_and_id() {
        let a = topic("a", 1);
        let b = topic("b", 2);
        let snapshot = CatalogSnapshot::new(7, vec![a.clone(), b.clone()]);
        assert_eq!(snapshot.version, 7);
        assert_eq!(snapshot.topic("b"), Some(&b));
        assert_eq!(snapshot.topic_by_id(a.topic_id), Some(&a));
        assert_eq!(snapshot.topic("c"), None);
        assert_eq!(snapshot.topic_by_id(Uuid::new_v4()), None);
    }

    #[test]
    fn the_block_size_is_the_sequence_increment() {
        let sql = include_str!("../migrations/0002_catalog.sql");
        assert!(
            sql.contains(&format!(
                "CREATE SEQUENCE producer_id_blocks START 0 MINVALUE 0 INCREMENT {PRODUCER_ID_BLOCK_SIZE};"
            )),
            "the migration's producer_id_blocks increment must be PRODUCER_ID_BLOCK_SIZE"
        );
    }

    #[test]
    fn only_database_failures_are_retriable() {
        assert!(!CatalogError::TopicExists("t".into()).is_retriable());
        assert!(!CatalogError::UnknownTopic("t".into()).is_retriable());
        assert!(CatalogError::Db(DbError::Checkout(Duration::from_secs(1))).is_retriable());
    }
}
