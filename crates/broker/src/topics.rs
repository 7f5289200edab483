//! The topics this broker hosts, on disk and in memory.
//!
//! Layout under the data directory:
//!
//! ```text
//! topics/<name>/topic.json     id, partition count, config overrides
//! topics/<name>/<partition>/   one partition log (see sluice-log)
//! ```
//!
//! Creating and deleting are made atomic with directory renames, so a crash never leaves half
//! a topic: a topic is built in `topics/.creating-<id>` and renamed into place, and deleted by
//! renaming it to `topics/.deleted-<id>` before its files are removed. Leftovers of either are
//! removed at startup.
//!
//! A full disk: everything a new topic needs on disk (its directory, `topic.json`, each
//! partition's directory and first segment) is made inside the staging directory, so a create
//! that runs out of space fails before the rename with a "data directory is full" error
//! ([`LogError::NoSpace`] inside [`TopicError::Log`]) and its staging directory is removed: no
//! half-made topic is ever visible, before or after a restart. New partitions are likewise made
//! before `topic.json` counts them.
//!
//! With a [`PartitionOpener`] (the object store), partitions are the backend's; each change of
//! `topic.json` (and a topic's removal), once on local disk, is recorded in the backend's
//! `MetaJournal`. Callers await `Broker::sync_metadata` before they answer.
//!
//! Cluster mode ([`TopicRegistry::cluster`]): the shared metadata store is the truth and no
//! topic file is ever written; the registry holds what the store's catalog says, and
//! [`TopicRegistry::apply_catalog`] brings it in line with a catalog (opening new topics and
//! partitions in the backend, dropping deleted ones, taking changed configs). The changes
//! themselves go to the store (`crate::catalog`), never through `create`/`delete` here.

use std::collections::BTreeMap;
use std::fs;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, RwLock};

use sluice_log::{Clock, GroupCommitter, LogError, PartitionLog, is_no_space};
use uuid::Uuid;

use crate::cluster::Catalog;
use crate::config::{BrokerConfig, TopicConfig};
use crate::producers::PartitionProducers;
use crate::storage::PartitionStorage;
use sluice_storage::{FileChange, PartitionOpener};

/// Longest topic name Kafka allows.
pub const TOPIC_NAME_BYTES_MAX: usize = 249;
const TOPIC_FILE: &str = "topic.json";

/// Errors from topic management.
#[derive(Debug, thiserror::Error)]
pub enum TopicError {
    #[error("invalid topic name '{name}': {reason}")]
    InvalidName { name: String, reason: &'static str },
    #[error("topic '{0}' already exists")]
    AlreadyExists(String),
    #[error("unknown topic '{0}'")]
    Unknown(String),
    #[error("invalid partition count {count}: must be between 1 and {max}")]
    InvalidPartitions { count: i32, max: i32 },
    #[error(
        "topic '{topic}' has {current} partitions; the new count {count} must be larger (partitions cannot be removed)"
    )]
    PartitionsNotIncreasing {
        topic: String,
        current: i32,
        count: i32,
    },
    #[error("invalid config: {0}")]
    Config(String),
    #[error("{op} {path}: {source}")]
    Io {
        op: &'static str,
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error(transparent)]
    Log(#[from] LogError),
    #[error("corrupt topic metadata {path}: {detail}")]
    Corrupt { path: PathBuf, detail: String },
}

impl TopicError {
    /// The data directory is full: nothing was changed, and a retry once space is freed works.
    pub fn is_no_space(&self) -> bool {
        match self {
            TopicError::Log(e) => e.is_no_space(),
            TopicError::Io { source, .. } => is_no_space(source),
            _ => false,
        }
    }
}

/// An I/O error as a topic error; a full disk becomes [`LogError::NoSpace`], whose message says
/// the data directory is full.
fn io<'a>(op: &'static str, path: &'a Path) -> impl FnOnce(std::io::Error) -> TopicError + 'a {
    move |source| {
        if is_no_space(&source) {
            TopicError::Log(LogError::NoSpace {
                op,
                path: path.to_owned(),
                source,
            })
        } else {
            TopicError::Io {
                op,
                path: path.to_owned(),
                source,
            }
        }
    }
}

/// Tells the data directory's space state of a write that found no room, if `e` is one.
fn note_no_space(committer: &GroupCommitter, e: &TopicError) {
    if let TopicError::Log(LogError::NoSpace { op, path, source }) = e {
        committer.space().no_space(op, path, source);
    }
}

/// Removes a directory tree that must not survive (an unfinished create); a failure is only
/// logged, since startup removes `.creating-` and `.deleted-` leftovers anyway.
fn remove_leftover(path: &Path) {
    if let Err(e) = fs::remove_dir_all(path)
        && e.kind() != std::io::ErrorKind::NotFound
    {
        tracing::warn!(path = %path.display(), error = %e, "could not remove an unfinished topic directory; it is removed at the next start");
    }
}

/// What `topic.json` holds.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
struct TopicFile {
    id: Uuid,
    partitions: i32,
    #[serde(default)]
    configs: TopicConfig,
}

/// One topic: its partitions' storage and its configs.
#[derive(Debug)]
pub struct Topic {
    pub name: String,
    pub id: Uuid,
    dir: PathBuf,
    /// Local logs or another backend's partitions (see `crate::storage`).
    partitions: RwLock<Vec<Arc<dyn PartitionStorage>>>,
    /// Idempotent-producer state, one per partition (same indexes as `partitions`).
    producers: RwLock<Vec<Arc<Mutex<PartitionProducers>>>>,
    config: RwLock<TopicConfig>,
}

impl Topic {
    /// The storage of `partition`, if it exists.
    pub fn partition(&self, partition: i32) -> Option<Arc<dyn PartitionStorage>> {
        let partitions = self.partitions.read().expect("partitions lock");
        let p = usize::try_from(partition).ok()?;
        partitions.get(p).cloned()
    }

    /// The idempotent-producer state of `partition`. Hold its lock across the sequence check
    /// and the append, so both happen as one step.
    pub fn producers(&self, partition: i32) -> Option<Arc<Mutex<PartitionProducers>>> {
        let producers = self.producers.read().expect("producers lock");
        usize::try_from(partition)
            .ok()
            .and_then(|p| producers.get(p).cloned())
    }

    pub fn partition_count(&self) -> i32 {
        self.partitions.read().expect("partitions lock").len() as i32
    }

    /// The storage of every partition, by partition number.
    pub fn partitions(&self) -> Vec<Arc<dyn PartitionStorage>> {
        self.partitions.read().expect("partitions lock").clone()
    }

    pub fn config(&self) -> TopicConfig {
        self.config.read().expect("config lock").clone()
    }
}

/// All topics of the broker.
#[derive(Debug)]
pub struct TopicRegistry {
    root: PathBuf,
    topics: RwLock<BTreeMap<String, Arc<Topic>>>,
    /// Serialises creates, deletes and config changes (rare), so they never race on disk.
    admin: Mutex<()>,
    /// Opens partitions and journals metadata changes (`None`: local logs, no journal).
    backend: Option<Arc<dyn PartitionOpener>>,
    /// Cluster mode: the version of the last catalog applied and whether all of it was
    /// (`None` until the first). `None` outside cluster mode.
    applied: Option<Mutex<Option<AppliedCatalog>>>,
}

/// The last catalog [`TopicRegistry::apply_catalog`] applied.
#[derive(Debug, Clone, Copy)]
struct AppliedCatalog {
    version: i64,
    /// Every topic of it is open as it says; else the next apply of any version retries.
    complete: bool,
}

/// What [`TopicRegistry::apply_catalog`] did.
#[derive(Debug, Default)]
pub struct CatalogApplied {
    /// Topics this broker no longer has: deleted, or deleted and created again under a new id
    /// (then it has the new one). Their group offsets are to be forgotten.
    pub removed: Vec<String>,
    /// Topics opened, grown or reconfigured.
    pub changed: usize,
    /// What could not be opened or reconfigured; the next apply tries again.
    pub failed: Vec<(String, TopicError)>,
    /// Nothing to do: this catalog (or a newer one) is applied already.
    pub skipped: bool,
}

/// Checks a topic name the way Kafka does: 1–249 bytes of `[a-zA-Z0-9._-]`, not `.` or `..`.
pub fn validate_topic_name(name: &str) -> Result<(), TopicError> {
    let invalid = |reason| TopicError::InvalidName {
        name: name.to_owned(),
        reason,
    };
    if name.is_empty() {
        return Err(invalid("it is empty"));
    }
    if name.len() > TOPIC_NAME_BYTES_MAX {
        return Err(invalid("it is longer than 249 characters"));
    }
    if name == "." || name == ".." {
        return Err(invalid("'.' and '..' are reserved"));
    }
    if !name
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || b == b'.' || b == b'_' || b == b'-')
    {
        return Err(invalid(
            "only ASCII letters, digits, '.', '_' and '-' are allowed",
        ));
    }
    Ok(())
}

impl TopicRegistry {
    /// Opens every topic under `<data_dir>/topics`, recovering each partition log (or opening
    /// its partitions in `backend`, when there is one).
    pub fn open(
        config: &BrokerConfig,
        committer: &GroupCommitter,
        clock: &Arc<dyn Clock>,
        backend: Option<Arc<dyn PartitionOpener>>,
    ) -> Result<TopicRegistry, TopicError> {
        let root = config.data_dir.join("topics");
        fs::create_dir_all(&root).map_err(io("create", &root))?;
        let mut topics = BTreeMap::new();
        for entry in fs::read_dir(&root).map_err(io("list", &root))? {
            let entry = entry.map_err(io("list", &root))?;
            let path = entry.path();
            let name = entry.file_name().to_string_lossy().into_owned();
            if name.starts_with(".creating-") || name.starts_with(".deleted-") {
                tracing::info!(path = %path.display(), "removing leftover of an interrupted topic create/delete");
                fs::remove_dir_all(&path).map_err(io("remove", &path))?;
                continue;
            }
            if validate_topic_name(&name).is_err() || !path.is_dir() {
                tracing::warn!(path = %path.display(), "ignoring unexpected entry in topics directory");
                continue;
            }
            let meta_path = path.join(TOPIC_FILE);
            let bytes = fs::read(&meta_path).map_err(io("read", &meta_path))?;
            let meta: TopicFile =
                serde_json::from_slice(&bytes).map_err(|e| TopicError::Corrupt {
                    path: meta_path.clone(),
                    detail: e.to_string(),
                })?;
            let open = (config, committer, clock, backend.as_ref());
            let topic = open_topic(&name, &path, meta, open)?;
            topics.insert(name, Arc::new(topic));
        }
        sync_dir(&root)?;
        Ok(TopicRegistry {
            root,
            topics: RwLock::new(topics),
            admin: Mutex::new(()),
            backend,
            applied: None,
        })
    }

    /// An empty registry for cluster mode: its topics come from the store's catalog
    /// ([`TopicRegistry::apply_catalog`]) and their partitions from `backend`. Nothing is read
    /// or written under `<data_dir>/topics`.
    pub fn cluster(config: &BrokerConfig, backend: Arc<dyn PartitionOpener>) -> TopicRegistry {
        TopicRegistry {
            root: config.data_dir.join("topics"),
            topics: RwLock::new(BTreeMap::new()),
            admin: Mutex::new(()),
            backend: Some(backend),
            applied: Some(Mutex::new(None)),
        }
    }

    /// Whether topics come from a cluster's catalog (see [`TopicRegistry::cluster`]).
    /// Where another backend keeps the partitions (its URL); `None` for local logs.
    pub fn storage_label(&self) -> Option<String> {
        self.backend.as_ref().map(|b| b.label())
    }

    pub fn is_cluster(&self) -> bool {
        self.applied.is_some()
    }

    /// Refuses a change of topic files in cluster mode, where topics change in the store: a
    /// guard against a caller that took the single-broker path by mistake.
    fn local_only(&self, op: &'static str) -> Result<(), TopicError> {
        if !self.is_cluster() {
            return Ok(());
        }
        Err(TopicError::Io {
            op,
            path: self.root.clone(),
            source: std::io::Error::new(
                std::io::ErrorKind::Unsupported,
                "in cluster mode topics change through the metadata store, not topic files",
            ),
        })
    }

    /// Makes this broker's topics what `catalog` says (cluster mode): a topic new to it is
    /// opened (its partitions through the backend, with its configs); a topic gone from it,
    /// or there under another id (deleted and created again), is dropped from memory (its
    /// data is the store's: nothing is deleted here); a topic with more partitions opens the
    /// new ones; changed configs go to every partition. Idempotent: a catalog older than, or
    /// the same as, the last one fully applied costs one comparison. Opens partitions, which
    /// may do blocking I/O: call it off the async workers.
    pub fn apply_catalog(&self, catalog: &Catalog, broker: &BrokerConfig) -> CatalogApplied {
        let (Some(applied), Some(backend)) = (&self.applied, &self.backend) else {
            tracing::error!("a cluster catalog was applied outside cluster mode; ignored");
            return CatalogApplied::default();
        };
        let _admin = self.admin.lock().expect("admin lock");
        let mut last = applied.lock().expect("applied catalog lock");
        if let Some(last) = *last
            && (catalog.version < last.version
                || (catalog.version == last.version && last.complete))
        {
            return CatalogApplied {
                skipped: true,
                ..CatalogApplied::default()
            };
        }
        let mut out = CatalogApplied::default();
        let current: Vec<Arc<Topic>> = self.all();
        for topic in &current {
            if catalog.topics.get(&topic.name).map(|t| t.id) != Some(topic.id) {
                self.topics
                    .write()
                    .expect("topics lock")
                    .remove(&topic.name);
                tracing::info!(topic = %topic.name, id = %topic.id, "topic deleted in the cluster; dropped here");
                out.removed.push(topic.name.clone());
            }
        }
        for (name, wanted) in &catalog.topics {
            let (configs, refused) = TopicConfig::from_catalog(&wanted.configs);
            let log_config = configs.log_config(&broker.log);
            let existing = self.get(name);
            let changing = existing
                .as_ref()
                .is_none_or(|t| t.config() != configs || t.partition_count() < wanted.partitions);
            if changing {
                for e in &refused {
                    tracing::warn!(topic = %name, error = %e, "ignoring a topic config from the cluster catalog");
                }
            }
            let Some(topic) = existing else {
                let meta = TopicFile {
                    id: wanted.id,
                    partitions: wanted.partitions,
                    configs,
                };
                let open = (broker, backend);
                match open_cluster_topic(name, &self.root.join(name), meta, open) {
                    Ok(topic) => {
                        self.topics
                            .write()
                            .expect("topics lock")
                            .insert(name.clone(), Arc::new(topic));
                        tracing::info!(topic = %name, id = %wanted.id, partitions = wanted.partitions, "opened topic from the cluster catalog");
                        out.changed += 1;
                    }
                    Err(e) => {
                        tracing::error!(topic = %name, error = %e, "could not open a topic of the cluster catalog; retrying at the next change");
                        out.failed.push((name.clone(), e));
                    }
                }
                continue;
            };
            let current = topic.partition_count();
            if wanted.partitions < current {
                tracing::warn!(topic = %name, catalog = wanted.partitions, open = current, "the cluster catalog lists fewer partitions than are open; partitions are never removed");
            }
            if wanted.partitions > current {
                match grow_cluster_topic(&topic, wanted.partitions, log_config, backend) {
                    Ok(()) => {
                        tracing::info!(topic = %name, from = current, to = wanted.partitions, "opened new partitions from the cluster catalog");
                        out.changed += 1;
                    }
                    Err(e) => {
                        tracing::error!(topic = %name, error = %e, "could not open new partitions of the cluster catalog; retrying at the next change");
                        out.failed.push((name.clone(), e));
                    }
                }
            }
            if topic.config() != configs {
                let reconfigured = topic
                    .partitions()
                    .iter()
                    .try_for_each(|p| p.set_config(log_config));
                match reconfigured {
                    Ok(()) => {
                        *topic.config.write().expect("config lock") = configs;
                        tracing::info!(topic = %name, "took changed topic configs from the cluster catalog");
                        out.changed += 1;
                    }
                    Err(e) => {
                        tracing::error!(topic = %name, error = %e, "could not apply changed topic configs; retrying at the next change");
                        out.failed.push((name.clone(), e.into()));
                    }
                }
            }
        }
        *last = Some(AppliedCatalog {
            version: catalog.version,
            complete: out.failed.is_empty(),
        });
        out
    }

    /// Records in the journal (if any) that topic `name` has a `topic.json` of `contents`
    /// (`None`: the topic is removed), once that is so on local disk. Paths are relative to
    /// the data directory (`topics/<name>` is the topic's directory).
    fn journal(&self, name: &str, contents: Option<Vec<u8>>) -> Result<(), LogError> {
        let change = match contents {
            Some(contents) => FileChange::Write {
                path: format!("topics/{name}/{TOPIC_FILE}"),
                contents,
            },
            None => FileChange::Remove {
                path: format!("topics/{name}"),
            },
        };
        (self.backend.as_ref()).map_or(Ok(()), |b| b.journal().record(change))
    }

    pub fn get(&self, name: &str) -> Option<Arc<Topic>> {
        self.topics.read().expect("topics lock").get(name).cloned()
    }

    /// All topics, by name.
    pub fn all(&self) -> Vec<Arc<Topic>> {
        self.topics
            .read()
            .expect("topics lock")
            .values()
            .cloned()
            .collect()
    }

    /// Refuses configs the storage cannot honour (compaction outside the local log).
    pub fn check_configs(&self, configs: &TopicConfig) -> Result<(), TopicError> {
        configs
            .check_storage(self.backend.is_none())
            .map_err(|e| TopicError::Config(e.0))
    }

    /// Checks what [`TopicRegistry::create`] would check, without creating anything.
    pub fn validate_create(
        &self,
        name: &str,
        partitions: i32,
        max_partitions: i32,
    ) -> Result<(), TopicError> {
        validate_topic_name(name)?;
        if !(1..=max_partitions).contains(&partitions) {
            return Err(TopicError::InvalidPartitions {
                count: partitions,
                max: max_partitions,
            });
        }
        if self.get(name).is_some() {
            return Err(TopicError::AlreadyExists(name.to_owned()));
        }
        Ok(())
    }

    /// Creates a topic durably (metadata fsynced, directory renamed into place and fsynced).
    /// On any failure (a full disk included) nothing of the topic is left.
    pub fn create(
        &self,
        name: &str,
        partitions: i32,
        configs: TopicConfig,
        broker: &BrokerConfig,
        committer: &GroupCommitter,
        clock: &Arc<dyn Clock>,
    ) -> Result<Arc<Topic>, TopicError> {
        let _admin = self.admin.lock().expect("admin lock");
        self.local_only("create")?;
        self.check_configs(&configs)?;
        self.validate_create(name, partitions, broker.partitions_per_topic_max)?;
        let meta = TopicFile {
            id: Uuid::new_v4(),
            partitions,
            configs,
        };
        let staging = self.root.join(format!(".creating-{}", meta.id));
        let log_config = meta.configs.log_config(&broker.log);
        // (Partition logs report a full disk themselves; the rest is reported here.)
        let noted = |e: &TopicError| note_no_space(committer, e);
        let staged = (|| {
            fs::create_dir(&staging)
                .map_err(io("create", &staging))
                .inspect_err(noted)?;
            let bytes = write_meta(&staging, &meta).inspect_err(noted)?;
            // Every file the topic needs, made here: running out of space now leaves only the
            // staging directory. The logs are dropped unopened-for-use and reopened after the
            // rename (an empty log's recovery writes nothing). A backend makes its own.
            for p in (0..partitions).filter(|_| self.backend.is_none()) {
                PartitionLog::open_with(
                    staging.join(p.to_string()),
                    log_config,
                    committer,
                    Arc::clone(clock),
                    broker.disk_faults.clone(),
                )?;
            }
            sync_dir(&staging).inspect_err(noted).map(|()| bytes)
        })();
        if let Err(e) = &staged {
            remove_leftover(&staging);
            tracing::warn!(topic = name, error = %e, "could not create topic");
        }
        let contents = staged?;
        let dir = self.root.join(name);
        if let Err(e) = fs::rename(&staging, &dir) {
            let e = io("rename", &staging)(e);
            note_no_space(committer, &e);
            remove_leftover(&staging);
            return Err(e);
        }
        let open = (broker, committer, clock, self.backend.as_ref());
        let opened = sync_dir(&self.root)
            .and_then(|()| open_topic(name, &dir, meta.clone(), open))
            .and_then(|topic| Ok(self.journal(name, Some(contents)).map(|()| topic)?));
        let topic = match opened {
            Ok(topic) => Arc::new(topic),
            Err(e) => {
                // Not expected (the files exist), but a topic that cannot be opened must not
                // appear at the next start either: move it aside and remove it.
                tracing::error!(topic = name, error = %e, "could not open a just-created topic; removing it");
                let doomed = self.root.join(format!(".deleted-{}", meta.id));
                match fs::rename(&dir, &doomed).and_then(|()| fs::remove_dir_all(&doomed)) {
                    Ok(()) => {
                        let _ = sync_dir(&self.root);
                    }
                    Err(cleanup) => {
                        tracing::error!(path = %dir.display(), error = %cleanup, "could not remove the unopenable topic")
                    }
                }
                return Err(e);
            }
        };
        self.topics
            .write()
            .expect("topics lock")
            .insert(name.to_owned(), Arc::clone(&topic));
        tracing::info!(topic = name, partitions, "created topic");
        Ok(topic)
    }

    /// Deletes a topic and all its data.
    pub fn delete(&self, name: &str) -> Result<(), TopicError> {
        let _admin = self.admin.lock().expect("admin lock");
        self.local_only("delete")?;
        let topic = self
            .topics
            .write()
            .expect("topics lock")
            .remove(name)
            .ok_or_else(|| TopicError::Unknown(name.to_owned()))?;
        for partition in topic.partitions() {
            match partition.as_local() {
                Some(log) => log.mark_deleted(),
                None => partition.delete().unwrap_or_else(
                    |e| tracing::error!(topic = name, error = %e, "deleting a partition's data"),
                ),
            }
        }
        let doomed = self.root.join(format!(".deleted-{}", topic.id));
        fs::rename(&topic.dir, &doomed).map_err(io("rename", &topic.dir))?;
        sync_dir(&self.root)?;
        self.journal(name, None)?;
        fs::remove_dir_all(&doomed).map_err(io("remove", &doomed))?;
        tracing::info!(topic = name, "deleted topic");
        Ok(())
    }

    /// Replaces a topic's config overrides (validated by the caller) and applies them to its
    /// partition logs.
    pub fn set_config(
        &self,
        topic: &Topic,
        configs: TopicConfig,
        broker: &BrokerConfig,
    ) -> Result<(), TopicError> {
        let _admin = self.admin.lock().expect("admin lock");
        self.local_only("configure")?;
        let meta = TopicFile {
            id: topic.id,
            partitions: topic.partition_count(),
            configs: configs.clone(),
        };
        self.journal(&topic.name, Some(write_meta(&topic.dir, &meta)?))?;
        let log_config = configs.log_config(&broker.log);
        for log in topic.partitions() {
            log.set_config(log_config)?;
        }
        *topic.config.write().expect("config lock") = configs;
        Ok(())
    }

    /// Grows a topic to `count` partitions (partitions can only be added, as in Kafka).
    pub fn add_partitions(
        &self,
        topic: &Topic,
        count: i32,
        validate_only: bool,
        broker: &BrokerConfig,
        committer: &GroupCommitter,
        clock: &Arc<dyn Clock>,
    ) -> Result<(), TopicError> {
        let _admin = self.admin.lock().expect("admin lock");
        let current = topic.partition_count();
        if count <= current {
            return Err(TopicError::PartitionsNotIncreasing {
                topic: topic.name.clone(),
                current,
                count,
            });
        }
        if count > broker.partitions_per_topic_max {
            return Err(TopicError::InvalidPartitions {
                count,
                max: broker.partitions_per_topic_max,
            });
        }
        if validate_only {
            return Ok(());
        }
        self.local_only("add partitions to")?;
        let configs = topic.config();
        let log_config = configs.log_config(&broker.log);
        // The new logs first, then the count that makes them part of the topic: a full disk
        // (or a crash) in between leaves empty partition directories that no `topic.json`
        // counts, which the next attempt simply reopens. Nothing half-made is ever served.
        let mut logs = Vec::with_capacity((count - current) as usize);
        for p in current..count {
            let open = (broker, committer, clock, self.backend.as_ref());
            logs.push(open_partition(&topic.dir, topic.id, p, log_config, open)?);
        }
        let contents = write_meta(
            &topic.dir,
            &TopicFile {
                id: topic.id,
                partitions: count,
                configs: configs.clone(),
            },
        )
        .inspect_err(|e| note_no_space(committer, e))?;
        self.journal(&topic.name, Some(contents))?;
        let mut partitions = topic.partitions.write().expect("partitions lock");
        let mut producers = topic.producers.write().expect("producers lock");
        for (partition, state) in logs {
            partitions.push(partition);
            producers.push(Arc::new(Mutex::new(state)));
        }
        tracing::info!(topic = %topic.name, from = current, to = count, "added partitions");
        Ok(())
    }

    /// Closes every partition log cleanly (fsync, indexes, clean-shutdown marker) and saves
    /// its producer state.
    pub fn close_all(&self) {
        for topic in self.all() {
            for (p, storage) in topic.partitions().iter().enumerate() {
                let Some(log) = storage.as_local() else {
                    continue;
                };
                if let Err(e) = log.close() {
                    tracing::error!(topic = %topic.name, partition = p, error = %e, "closing partition log");
                    continue;
                }
                if let Some(state) = topic.producers(p as i32)
                    && let Err(e) = state.lock().expect("producers lock").save(log)
                {
                    tracing::error!(topic = %topic.name, partition = p, error = %e, "saving producer state");
                }
            }
        }
    }
}

/// What opening a partition needs: a local log's settings, or the backend that opens it.
type Opening<'a> = (
    &'a BrokerConfig,
    &'a GroupCommitter,
    &'a Arc<dyn Clock>,
    Option<&'a Arc<dyn PartitionOpener>>,
);

/// Opens partition `p` of a topic and loads its producer state: from the local log under
/// `dir`, or from the backend's producer history.
fn open_partition(
    dir: &Path,
    id: Uuid,
    p: i32,
    log_config: sluice_log::LogConfig,
    (broker, committer, clock, backend): Opening<'_>,
) -> Result<(Arc<dyn PartitionStorage>, PartitionProducers), TopicError> {
    if let Some(backend) = backend {
        return open_backend_partition(backend, id, p, log_config);
    }
    let (path, clock) = (dir.join(p.to_string()), Arc::clone(clock));
    let faults = broker.disk_faults.clone();
    let log = PartitionLog::open_with(path, log_config, committer, clock, faults)?;
    let state = PartitionProducers::load(&log);
    Ok((Arc::new(log), state))
}

/// Opens partition `p` in `backend`, with the producer state its history gives.
fn open_backend_partition(
    backend: &Arc<dyn PartitionOpener>,
    id: Uuid,
    p: i32,
    log_config: sluice_log::LogConfig,
) -> Result<(Arc<dyn PartitionStorage>, PartitionProducers), TopicError> {
    let storage = backend.open_partition(id.into_bytes(), p, log_config)?;
    let history = storage.producer_history().unwrap_or_default();
    Ok((storage, PartitionProducers::from_history(history)))
}

/// Opens a topic of a cluster catalog: every partition through the backend. `dir` is only a
/// name (nothing is made there).
fn open_cluster_topic(
    name: &str,
    dir: &Path,
    meta: TopicFile,
    (broker, backend): (&BrokerConfig, &Arc<dyn PartitionOpener>),
) -> Result<Topic, TopicError> {
    let log_config = meta.configs.log_config(&broker.log);
    let topic = Topic {
        name: name.to_owned(),
        id: meta.id,
        dir: dir.to_owned(),
        partitions: RwLock::new(Vec::new()),
        producers: RwLock::new(Vec::new()),
        config: RwLock::new(meta.configs),
    };
    grow_cluster_topic(&topic, meta.partitions, log_config, backend)?;
    Ok(topic)
}

/// Opens partitions `topic.partition_count()..count` through the backend and adds them, all
/// or none.
fn grow_cluster_topic(
    topic: &Topic,
    count: i32,
    log_config: sluice_log::LogConfig,
    backend: &Arc<dyn PartitionOpener>,
) -> Result<(), TopicError> {
    let current = topic.partition_count();
    let opened = (current..count)
        .map(|p| open_backend_partition(backend, topic.id, p, log_config))
        .collect::<Result<Vec<_>, _>>()?;
    let mut partitions = topic.partitions.write().expect("partitions lock");
    let mut producers = topic.producers.write().expect("producers lock");
    for (partition, state) in opened {
        partitions.push(partition);
        producers.push(Arc::new(Mutex::new(state)));
    }
    Ok(())
}

fn open_topic(
    name: &str,
    dir: &Path,
    meta: TopicFile,
    open: Opening<'_>,
) -> Result<Topic, TopicError> {
    let log_config = meta.configs.log_config(&open.0.log);
    let mut partitions = Vec::with_capacity(meta.partitions.max(0) as usize);
    let mut producers = Vec::with_capacity(partitions.capacity());
    for p in 0..meta.partitions {
        let (partition, state) = open_partition(dir, meta.id, p, log_config, open)?;
        producers.push(Arc::new(Mutex::new(state)));
        partitions.push(partition);
    }
    Ok(Topic {
        name: name.to_owned(),
        id: meta.id,
        dir: dir.to_owned(),
        partitions: RwLock::new(partitions),
        producers: RwLock::new(producers),
        config: RwLock::new(meta.configs),
    })
}

/// Writes `topic.json` atomically: temporary file, fsync, rename, fsync directory. Returns
/// the contents written.
fn write_meta(dir: &Path, meta: &TopicFile) -> Result<Vec<u8>, TopicError> {
    let tmp = dir.join(format!("{TOPIC_FILE}.tmp"));
    let path = dir.join(TOPIC_FILE);
    let bytes = serde_json::to_vec_pretty(meta).expect("topic metadata serialises");
    let mut f = fs::File::create(&tmp).map_err(io("create", &tmp))?;
    let written = f
        .write_all(&bytes)
        .map_err(io("write", &tmp))
        .and_then(|()| f.sync_all().map_err(io("fsync", &tmp)));
    if let Err(e) = written {
        // The old `topic.json` is untouched; do not leave a partial copy beside it.
        let _ = fs::remove_file(&tmp);
        return Err(e);
    }
    fs::rename(&tmp, &path).map_err(io("rename", &tmp))?;
    sync_dir(dir).map(|()| bytes)
}

fn sync_dir(dir: &Path) -> Result<(), TopicError> {
    fs::File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(io("fsync", dir))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn topic_names_follow_kafka_rules() {
        for ok in ["a", "orders", "my.topic_2-x", &"x".repeat(249)] {
            validate_topic_name(ok).unwrap();
        }
        for bad in ["", ".", "..", "a/b", "a b", "ü", &"x".repeat(250)] {
            assert!(validate_topic_name(bad).is_err(), "{bad}");
        }
    }
}
