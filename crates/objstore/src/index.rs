//! The local index of object-storage mode: which object holds which offsets of which
//! partition, plus the metadata state the objects carry, in one SQLite file
//! (`<data_dir>/objstore/index.sqlite`).
//!
//! Where it sits: the flusher PUTs an object, then [`Index::apply`]s what it contributed (its
//! runs and metadata records, an [`ObjectSummary`]); readers ask [`Index::runs`] where a
//! partition's offsets live and issue ranged GETs for them. At start,
//! [`catch_up`](crate::rebuild::catch_up) brings the index up to date with the bucket by
//! applying every object it has not seen, in sequence order.
//!
//! **Durability contract: none of its own.** The bucket is the durable copy of everything
//! here; the index is a cache that can always be rebuilt from it. So SQLite runs in WAL mode
//! with `synchronous=NORMAL`: a crash may lose the last few applied objects (never corrupt the
//! file), and the next start applies them again from the bucket. `apply` returning `Ok` means
//! the change is visible to every later query of this process, not that it is on disk.
//!
//! Tables (schema version [`SCHEMA_VERSION`], kept in SQLite's `user_version`):
//!
//! | table | one row per |
//! |---|---|
//! | `settings` | key/value: the storage URL the index was built for, the last applied sequence |
//! | `objects` | applied or abandoned object: `seq`, `size`, `created_ms`, `state` |
//! | `runs` | live run: partition, offsets, where its bytes are (`object_seq`, range, CRC) |
//! | `producers` | one of the last [`PRODUCER_BATCHES_KEPT`] idempotent batches per producer and partition |
//! | `files` | mirrored metadata file of the broker's data directory: `path`, `contents` |
//! | `log_starts` | partition whose log start was moved |
//! | `abandoned` | object sequence the writer gave up on: never applied |
//!
//! The index is tied to one bucket and prefix: it records the storage URL it was built for
//! and [`Index::open`] refuses another one ([`IndexError::WrongBucket`]); the caller then
//! deletes the file and rebuilds it from the bucket.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::sync::{Mutex, MutexGuard};

use rusqlite::{Connection, OptionalExtension, Transaction, params};

use crate::format::{RunEntry, TopicId};
use crate::meta::{MetaChange, ProducerBatch};

/// The schema this build creates and reads (SQLite `user_version`). A file with another
/// version is refused; the caller deletes and rebuilds it (it is only a cache).
pub const SCHEMA_VERSION: i64 = 1;

/// Idempotent batches kept per (topic, partition, producer id): Kafka checks a retried
/// batch against the last five of its producer (`max.in.flight.requests.per.connection` ≤ 5
/// for idempotence), so more would never be consulted.
pub const PRODUCER_BATCHES_KEPT: i64 = 5;

/// How long a query waits for another connection's lock on the file (only a second process
/// opening the same index could hold one) before it fails instead of hanging.
const BUSY_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(5);

/// `objects.state`: the object's runs and metadata were applied.
const STATE_APPLIED: i64 = 0;
/// `objects.state`: the object was abandoned by its writer; nothing of it is applied.
const STATE_ABANDONED: i64 = 1;

const SCHEMA: &str = "
CREATE TABLE settings (key TEXT PRIMARY KEY, value TEXT NOT NULL) STRICT;
CREATE TABLE objects (
    seq INTEGER PRIMARY KEY,
    size INTEGER NOT NULL,
    created_ms INTEGER NOT NULL,
    state INTEGER NOT NULL
) STRICT;
CREATE TABLE runs (
    topic BLOB NOT NULL,
    partition INTEGER NOT NULL,
    base_offset INTEGER NOT NULL,
    last_offset INTEGER NOT NULL,
    max_timestamp INTEGER NOT NULL,
    record_count INTEGER NOT NULL,
    batch_count INTEGER NOT NULL,
    object_seq INTEGER NOT NULL,
    data_offset INTEGER NOT NULL,
    data_len INTEGER NOT NULL,
    data_crc INTEGER NOT NULL
) STRICT;
CREATE INDEX runs_by_offset ON runs (topic, partition, base_offset);
CREATE INDEX runs_by_object ON runs (object_seq);
CREATE TABLE producers (
    topic BLOB NOT NULL,
    partition INTEGER NOT NULL,
    producer_id INTEGER NOT NULL,
    epoch INTEGER NOT NULL,
    first_seq INTEGER NOT NULL,
    last_seq INTEGER NOT NULL,
    base_offset INTEGER NOT NULL,
    last_offset INTEGER NOT NULL,
    object_seq INTEGER NOT NULL,
    PRIMARY KEY (topic, partition, producer_id, base_offset)
) STRICT;
CREATE INDEX producers_by_object ON producers (object_seq);
CREATE TABLE files (path TEXT PRIMARY KEY, contents BLOB NOT NULL) STRICT;
CREATE TABLE log_starts (
    topic BLOB NOT NULL,
    partition INTEGER NOT NULL,
    log_start INTEGER NOT NULL,
    PRIMARY KEY (topic, partition)
) STRICT;
CREATE TABLE abandoned (seq INTEGER PRIMARY KEY) STRICT;
";

/// Why the index cannot be opened or used. Each prints as one line naming the file.
#[derive(Debug, thiserror::Error)]
pub enum IndexError {
    /// SQLite refused an operation (I/O error, full disk, a corrupt file).
    #[error("index {path}: {op}: {source}")]
    Sqlite {
        path: PathBuf,
        op: &'static str,
        #[source]
        source: rusqlite::Error,
    },
    /// The directory for the file could not be created.
    #[error("index {path}: cannot create its directory: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// The file was built for another bucket or prefix.
    #[error(
        "index {path} was built for {found}, not {expected}: delete it and it is rebuilt from the bucket"
    )]
    WrongBucket {
        path: PathBuf,
        found: String,
        expected: String,
    },
    /// The file has a schema version this build does not read.
    #[error(
        "index {path} has schema version {found}, this build reads {supported}: delete it and it is rebuilt from the bucket"
    )]
    Schema {
        path: PathBuf,
        found: i64,
        supported: i64,
    },
    /// The file is an SQLite database, but not an index (tables, no version).
    #[error(
        "{path} is an SQLite file but not a Sluice object index: move it away or point the data directory elsewhere"
    )]
    NotAnIndex { path: PathBuf },
    /// A sequence number beyond what the index stores (SQLite integers are signed 64-bit).
    #[error("index {path}: object sequence {seq} is beyond {max}, the largest the index stores")]
    SequenceTooLarge { path: PathBuf, seq: u64, max: u64 },
}

/// Where one run's bytes are: the object and byte range, and what the run holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RunLocation {
    pub object_seq: u64,
    pub base_offset: i64,
    pub last_offset: i64,
    pub max_timestamp: i64,
    pub record_count: u64,
    pub batch_count: u32,
    pub data_offset: u64,
    pub data_len: u64,
    pub data_crc: u32,
}

impl RunLocation {
    /// Where `run`, an index entry of object `object_seq`, is.
    pub fn of(object_seq: u64, run: &RunEntry) -> RunLocation {
        RunLocation {
            object_seq,
            base_offset: run.base_offset,
            last_offset: run.last_offset,
            max_timestamp: run.max_timestamp,
            record_count: run.record_count,
            batch_count: run.batch_count,
            data_offset: run.data_offset,
            data_len: run.data_len,
            data_crc: run.data_crc,
        }
    }

    /// The run's byte range in its object.
    pub fn range(&self) -> std::ops::Range<u64> {
        self.data_offset..self.data_offset.saturating_add(self.data_len)
    }

    /// The run as its object's index entry states it.
    pub fn entry(&self, topic_id: TopicId, partition: i32) -> RunEntry {
        RunEntry {
            topic_id,
            partition,
            batch_count: self.batch_count,
            base_offset: self.base_offset,
            last_offset: self.last_offset,
            max_timestamp: self.max_timestamp,
            record_count: self.record_count,
            data_offset: self.data_offset,
            data_len: self.data_len,
            data_crc: self.data_crc,
        }
    }
}

/// What one object contributes to the index: from the flusher's committed object at runtime,
/// or from the object's footer, meta and index sections read back during a rebuild.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ObjectSummary {
    pub sequence: u64,
    /// The object's length in bytes.
    pub size: u64,
    pub created_ms: i64,
    pub runs: Vec<RunEntry>,
    /// Its metadata records in the order written (unknown kinds already dropped).
    pub meta: Vec<MetaChange>,
}

/// One partition the index knows of.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PartitionState {
    pub topic_id: TopicId,
    pub partition: i32,
    /// The first offset a consumer may read (0 until a `LogStart` record moves it).
    pub log_start: i64,
    /// The offset the next batch gets: the last run's last offset + 1, at least the log start.
    pub next_offset: i64,
    /// Bytes of the live runs.
    pub size_bytes: u64,
}

/// One row of the `objects` table.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ObjectRow {
    pub sequence: u64,
    pub size: u64,
    pub created_ms: i64,
    pub abandoned: bool,
}

/// The whole state of the index as of one last sequence ([`Index::snapshot`],
/// [`Index::load_snapshot`]): what a checkpoint holds. Sorted as the tables' keys.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct IndexSnapshot {
    pub last_sequence: Option<u64>,
    pub objects: Vec<ObjectRow>,
    pub runs: Vec<(TopicId, i32, RunLocation)>,
    /// Kept producer batches, each with the sequence of the object that holds it.
    pub producers: Vec<(ProducerBatch, u64)>,
    pub files: Vec<(String, Vec<u8>)>,
    pub log_starts: Vec<(TopicId, i32, i64)>,
    pub abandoned: Vec<u64>,
}

/// The connection and what is cached from it.
struct Inner {
    conn: Connection,
    last_sequence: Option<u64>,
}

/// The local index: one SQLite connection behind a mutex (calls are short; `Send + Sync`).
pub struct Index {
    path: PathBuf,
    inner: Mutex<Inner>,
}

impl std::fmt::Debug for Index {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Index").field("path", &self.path).finish()
    }
}

const SEQ_MAX: u64 = i64::MAX as u64;

// SQLite stores signed 64-bit integers; these u64 fields are stored bit for bit.
fn u(v: u64) -> i64 {
    v as i64
}
fn from_i(v: i64) -> u64 {
    v as u64
}

impl Index {
    /// Opens the index at `path`, creating it (and its directory) when missing. Refuses a file
    /// built for another storage URL, another schema version, or that is not an index.
    pub fn open(path: &Path, storage_url: &str) -> Result<Index, IndexError> {
        let p = path.to_path_buf();
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            std::fs::create_dir_all(dir).map_err(|source| IndexError::Io {
                path: p.clone(),
                source,
            })?;
        }
        let sql = |op| {
            let p = p.clone();
            move |source| IndexError::Sqlite {
                path: p,
                op,
                source,
            }
        };
        let mut conn = Connection::open(path).map_err(sql("open"))?;
        conn.busy_timeout(BUSY_TIMEOUT)
            .map_err(sql("set the busy timeout"))?;
        let mode: String = conn
            .query_row("PRAGMA journal_mode=WAL", [], |r| r.get(0))
            .map_err(sql("switch to WAL mode"))?;
        if !mode.eq_ignore_ascii_case("wal") {
            return Err(IndexError::Sqlite {
                path: p,
                op: "switch to WAL mode",
                source: rusqlite::Error::InvalidQuery,
            });
        }
        conn.pragma_update(None, "synchronous", "NORMAL")
            .map_err(sql("set synchronous=NORMAL"))?;

        let version: i64 = conn
            .query_row("PRAGMA user_version", [], |r| r.get(0))
            .map_err(sql("read the schema version"))?;
        if version == 0 {
            let tables: i64 = conn
                .query_row("SELECT count(*) FROM sqlite_master", [], |r| r.get(0))
                .map_err(sql("read the schema"))?;
            if tables != 0 {
                return Err(IndexError::NotAnIndex { path: p });
            }
            let tx = conn.transaction().map_err(sql("create the schema"))?;
            tx.execute_batch(SCHEMA).map_err(sql("create the schema"))?;
            tx.execute(
                "INSERT INTO settings (key, value) VALUES ('storage_url', ?1)",
                [storage_url],
            )
            .map_err(sql("create the schema"))?;
            tx.pragma_update(None, "user_version", SCHEMA_VERSION)
                .map_err(sql("create the schema"))?;
            tx.commit().map_err(sql("create the schema"))?;
        } else if version != SCHEMA_VERSION {
            return Err(IndexError::Schema {
                path: p,
                found: version,
                supported: SCHEMA_VERSION,
            });
        }
        let found: Option<String> = conn
            .query_row(
                "SELECT value FROM settings WHERE key = 'storage_url'",
                [],
                |r| r.get(0),
            )
            .optional()
            .map_err(sql("read the storage URL"))?;
        if found.as_deref() != Some(storage_url) {
            return Err(IndexError::WrongBucket {
                path: p,
                found: found.unwrap_or_else(|| "no storage URL".to_owned()),
                expected: storage_url.to_owned(),
            });
        }
        let last: Option<String> = conn
            .query_row(
                "SELECT value FROM settings WHERE key = 'last_sequence'",
                [],
                |r| r.get(0),
            )
            .optional()
            .map_err(sql("read the last sequence"))?;
        let last_sequence = match last {
            None => None,
            Some(s) => Some(s.parse::<u64>().map_err(|_| IndexError::Sqlite {
                path: p.clone(),
                op: "read the last sequence",
                source: rusqlite::Error::InvalidColumnType(
                    0,
                    "last_sequence".to_owned(),
                    rusqlite::types::Type::Text,
                ),
            })?),
        };
        Ok(Index {
            path: p,
            inner: Mutex::new(Inner {
                conn,
                last_sequence,
            }),
        })
    }

    /// The file this index lives in.
    pub fn path(&self) -> &Path {
        &self.path
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        // A holder that panicked dropped its transaction, which rolled back: the state is whole.
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn err(&self, op: &'static str) -> impl Fn(rusqlite::Error) -> IndexError + '_ {
        move |source| IndexError::Sqlite {
            path: self.path.clone(),
            op,
            source,
        }
    }

    fn check_seq(&self, seq: u64) -> Result<i64, IndexError> {
        if seq > SEQ_MAX {
            return Err(IndexError::SequenceTooLarge {
                path: self.path.clone(),
                seq,
                max: SEQ_MAX,
            });
        }
        Ok(seq as i64)
    }

    /// The highest object sequence applied (committed or skipped as abandoned), if any.
    pub fn last_sequence(&self) -> Option<u64> {
        self.lock().last_sequence
    }

    /// Applies one object in ONE transaction: its runs, then its metadata records in order.
    /// An object whose sequence is in the abandoned set contributes nothing (neither runs nor
    /// metadata: its writer answered its requests with errors); it only advances the last
    /// sequence. Objects must come in increasing sequence order (gaps are fine: a sequence
    /// that was never written); a sequence ≤ [`last_sequence`](Self::last_sequence) is a
    /// no-op returning `Ok`.
    ///
    /// Metadata records:
    /// - `Abandoned(seqs)`: remembered, and the runs and producer batches of those objects
    ///   dropped if they had been applied (their mirrored file changes cannot be undone);
    /// - `ProducerBatch`: kept, the last [`PRODUCER_BATCHES_KEPT`] per (topic, partition,
    ///   producer id) by base offset;
    /// - `FileWrite` / `FileAppend` / `FileRemove`: the `files` table (remove takes the path and
    ///   every path under `path/`);
    /// - `LogStart`: the partition's log start becomes max(old, offset); runs wholly below it
    ///   are dropped;
    /// - `TopicDeleted`: every run, producer batch and log start of the topic is dropped;
    /// - `RunsCompacted`: the partition's runs inside the merged run's range move to the
    ///   compacted object, if they are exactly the merged ones (see [`crate::meta`]);
    /// - `RunAt`, `ObjectAt`, `ProducerBatchAt` (checkpoint-only): ignored here.
    ///
    /// Returns when the change is visible to later queries (not necessarily on disk: see the
    /// module doc).
    pub fn apply(&self, object: &ObjectSummary) -> Result<(), IndexError> {
        let seq = self.check_seq(object.sequence)?;
        let mut inner = self.lock();
        if inner
            .last_sequence
            .is_some_and(|last| object.sequence <= last)
        {
            return Ok(());
        }
        let tx = inner
            .conn
            .transaction()
            .map_err(self.err("begin a transaction"))?;
        let abandoned: bool = tx
            .query_row("SELECT 1 FROM abandoned WHERE seq = ?1", [seq], |_| Ok(()))
            .optional()
            .map_err(self.err("read the abandoned objects"))?
            .is_some();
        let state = if abandoned {
            STATE_ABANDONED
        } else {
            STATE_APPLIED
        };
        tx.execute(
            "INSERT OR REPLACE INTO objects (seq, size, created_ms, state) VALUES (?1, ?2, ?3, ?4)",
            params![seq, u(object.size), object.created_ms, state],
        )
        .map_err(self.err("record the object"))?;
        if !abandoned {
            self.insert_runs(&tx, seq, &object.runs)?;
            for change in &object.meta {
                self.apply_change(&tx, seq, change)?;
            }
        }
        tx.execute(
            "INSERT OR REPLACE INTO settings (key, value) VALUES ('last_sequence', ?1)",
            [object.sequence.to_string()],
        )
        .map_err(self.err("record the last sequence"))?;
        tx.commit().map_err(self.err("commit"))?;
        inner.last_sequence = Some(object.sequence);
        Ok(())
    }

    fn insert_runs(
        &self,
        tx: &Transaction<'_>,
        seq: i64,
        runs: &[RunEntry],
    ) -> Result<(), IndexError> {
        let e = self.err("add the object's runs");
        let mut insert = tx
            .prepare_cached(
                "INSERT INTO runs (topic, partition, base_offset, last_offset, max_timestamp,
                    record_count, batch_count, object_seq, data_offset, data_len, data_crc)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11)",
            )
            .map_err(&e)?;
        for r in runs {
            insert
                .execute(params![
                    &r.topic_id.0[..],
                    r.partition,
                    r.base_offset,
                    r.last_offset,
                    r.max_timestamp,
                    u(r.record_count),
                    r.batch_count,
                    seq,
                    u(r.data_offset),
                    u(r.data_len),
                    r.data_crc,
                ])
                .map_err(&e)?;
        }
        Ok(())
    }

    fn apply_change(
        &self,
        tx: &Transaction<'_>,
        seq: i64,
        change: &MetaChange,
    ) -> Result<(), IndexError> {
        match change {
            MetaChange::Abandoned(seqs) => self.abandon(tx, seqs)?,
            MetaChange::ProducerBatch(b) => {
                let e = self.err("add a producer batch");
                tx.prepare_cached(
                    "INSERT OR REPLACE INTO producers (topic, partition, producer_id, epoch,
                        first_seq, last_seq, base_offset, last_offset, object_seq)
                     VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9)",
                )
                .and_then(|mut s| {
                    s.execute(params![
                        &b.topic_id.0[..],
                        b.partition,
                        b.producer_id,
                        b.epoch,
                        b.first_seq,
                        b.last_seq,
                        b.base_offset,
                        b.last_offset,
                        seq,
                    ])
                })
                .map_err(&e)?;
                // Keep the newest PRODUCER_BATCHES_KEPT; with fewer, the subquery is NULL and
                // nothing is deleted.
                tx.prepare_cached(
                    "DELETE FROM producers
                     WHERE topic = ?1 AND partition = ?2 AND producer_id = ?3 AND base_offset < (
                        SELECT base_offset FROM producers
                        WHERE topic = ?1 AND partition = ?2 AND producer_id = ?3
                        ORDER BY base_offset DESC LIMIT 1 OFFSET ?4)",
                )
                .and_then(|mut s| {
                    s.execute(params![
                        &b.topic_id.0[..],
                        b.partition,
                        b.producer_id,
                        PRODUCER_BATCHES_KEPT - 1
                    ])
                })
                .map_err(&e)?;
            }
            MetaChange::FileWrite { path, contents } => {
                tx.execute(
                    "INSERT OR REPLACE INTO files (path, contents) VALUES (?1, ?2)",
                    params![path, contents],
                )
                .map_err(self.err("write a metadata file"))?;
            }
            MetaChange::FileAppend { path, bytes } => {
                let e = self.err("append to a metadata file");
                let old: Option<Vec<u8>> = tx
                    .query_row("SELECT contents FROM files WHERE path = ?1", [path], |r| {
                        r.get(0)
                    })
                    .optional()
                    .map_err(&e)?;
                let mut contents = old.unwrap_or_default();
                contents.extend_from_slice(bytes);
                tx.execute(
                    "INSERT OR REPLACE INTO files (path, contents) VALUES (?1, ?2)",
                    params![path, contents],
                )
                .map_err(&e)?;
            }
            MetaChange::FileRemove { path } => {
                // The path itself and everything under `path/`: the keys from `path/` up to
                // (not including) `path0` ('0' follows '/' in byte order).
                let base = path.trim_end_matches('/');
                tx.execute(
                    "DELETE FROM files WHERE path = ?1 OR (path >= ?2 AND path < ?3)",
                    params![base, format!("{base}/"), format!("{base}0")],
                )
                .map_err(self.err("remove a metadata file"))?;
            }
            MetaChange::LogStart {
                topic_id,
                partition,
                offset,
            } => {
                let e = self.err("move a log start");
                tx.execute(
                    "INSERT INTO log_starts (topic, partition, log_start) VALUES (?1, ?2, ?3)
                     ON CONFLICT (topic, partition)
                     DO UPDATE SET log_start = max(log_start, excluded.log_start)",
                    params![&topic_id.0[..], partition, offset],
                )
                .map_err(&e)?;
                tx.execute(
                    "DELETE FROM runs WHERE topic = ?1 AND partition = ?2 AND last_offset < (
                        SELECT log_start FROM log_starts WHERE topic = ?1 AND partition = ?2)",
                    params![&topic_id.0[..], partition],
                )
                .map_err(&e)?;
            }
            MetaChange::TopicDeleted { topic_id } => {
                let e = self.err("delete a topic");
                for table in ["runs", "producers", "log_starts"] {
                    tx.execute(
                        &format!("DELETE FROM {table} WHERE topic = ?1"),
                        [&topic_id.0[..]],
                    )
                    .map_err(&e)?;
                }
            }
            MetaChange::RunsCompacted { run, object_id, .. } => {
                self.move_runs(tx, run, *object_id)?;
            }
            // Checkpoint-only records: a flush object carrying them is not obeyed.
            MetaChange::RunAt { .. }
            | MetaChange::ObjectAt { .. }
            | MetaChange::ProducerBatchAt { .. } => {}
        }
        Ok(())
    }

    /// Replaces the runs of `merged`'s partition wholly inside its `[base, last]` by `merged`
    /// in object `object_id`, if they are exactly what was merged (bytes, records and batches
    /// add up); otherwise changes nothing. Returns whether it replaced them.
    fn move_runs(
        &self,
        tx: &Transaction<'_>,
        merged: &RunEntry,
        object_id: u64,
    ) -> Result<bool, IndexError> {
        let e = self.err("move runs to a compacted object");
        let id = self.check_seq(object_id)?;
        let key = params![
            &merged.topic_id.0[..],
            merged.partition,
            merged.base_offset,
            merged.last_offset
        ];
        let (count, bytes, records, batches): (i64, i64, i64, i64) = tx
            .query_row(
                "SELECT count(*), coalesce(sum(data_len), 0), coalesce(sum(record_count), 0),
                    coalesce(sum(batch_count), 0)
                 FROM runs WHERE topic = ?1 AND partition = ?2
                    AND base_offset >= ?3 AND last_offset <= ?4",
                key,
                |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?)),
            )
            .map_err(&e)?;
        let exact = count > 0
            && from_i(bytes) == merged.data_len
            && from_i(records) == merged.record_count
            && batches == i64::from(merged.batch_count);
        if !exact {
            return Ok(false);
        }
        tx.execute(
            "DELETE FROM runs WHERE topic = ?1 AND partition = ?2
                AND base_offset >= ?3 AND last_offset <= ?4",
            key,
        )
        .map_err(&e)?;
        self.insert_runs(tx, id, std::slice::from_ref(merged))?;
        Ok(true)
    }

    /// Everything the index holds, read under one lock (so as of one last sequence): what a
    /// checkpoint stores. Holds the index's lock while it reads (flusher commits wait).
    pub fn snapshot(&self) -> Result<IndexSnapshot, IndexError> {
        let inner = self.lock();
        let e = self.err("read a snapshot");
        let conn = &inner.conn;
        let objects = conn
            .prepare("SELECT seq, size, created_ms, state FROM objects ORDER BY seq")
            .and_then(|mut st| {
                st.query_map([], |r| {
                    Ok(ObjectRow {
                        sequence: from_i(r.get(0)?),
                        size: from_i(r.get(1)?),
                        created_ms: r.get(2)?,
                        abandoned: r.get::<_, i64>(3)? == STATE_ABANDONED,
                    })
                })?
                .collect::<Result<Vec<_>, _>>()
            })
            .map_err(&e)?;
        let runs = conn
            .prepare(
                "SELECT topic, partition, object_seq, base_offset, last_offset, max_timestamp,
                    record_count, batch_count, data_offset, data_len, data_crc
                 FROM runs ORDER BY topic, partition, base_offset",
            )
            .and_then(|mut st| {
                st.query_map([], |r| {
                    Ok((
                        topic_of(r.get_ref(0)?.as_blob()?),
                        r.get::<_, i32>(1)?,
                        RunLocation {
                            object_seq: from_i(r.get(2)?),
                            base_offset: r.get(3)?,
                            last_offset: r.get(4)?,
                            max_timestamp: r.get(5)?,
                            record_count: from_i(r.get(6)?),
                            batch_count: r.get(7)?,
                            data_offset: from_i(r.get(8)?),
                            data_len: from_i(r.get(9)?),
                            data_crc: r.get(10)?,
                        },
                    ))
                })?
                .collect::<Result<Vec<_>, _>>()
            })
            .map_err(&e)?;
        let producers = conn
            .prepare(
                "SELECT topic, partition, producer_id, epoch, first_seq, last_seq, base_offset,
                    last_offset, object_seq
                 FROM producers ORDER BY topic, partition, producer_id, base_offset",
            )
            .and_then(|mut st| {
                st.query_map([], |r| {
                    Ok((
                        ProducerBatch {
                            topic_id: topic_of(r.get_ref(0)?.as_blob()?),
                            partition: r.get(1)?,
                            producer_id: r.get(2)?,
                            epoch: r.get(3)?,
                            first_seq: r.get(4)?,
                            last_seq: r.get(5)?,
                            base_offset: r.get(6)?,
                            last_offset: r.get(7)?,
                        },
                        from_i(r.get(8)?),
                    ))
                })?
                .collect::<Result<Vec<_>, _>>()
            })
            .map_err(&e)?;
        let files = conn
            .prepare("SELECT path, contents FROM files ORDER BY path")
            .and_then(|mut st| {
                st.query_map([], |r| Ok((r.get(0)?, r.get(1)?)))?
                    .collect::<Result<Vec<_>, _>>()
            })
            .map_err(&e)?;
        let log_starts = conn
            .prepare("SELECT topic, partition, log_start FROM log_starts ORDER BY topic, partition")
            .and_then(|mut st| {
                st.query_map([], |r| {
                    Ok((topic_of(r.get_ref(0)?.as_blob()?), r.get(1)?, r.get(2)?))
                })?
                .collect::<Result<Vec<_>, _>>()
            })
            .map_err(&e)?;
        let abandoned = conn
            .prepare("SELECT seq FROM abandoned ORDER BY seq")
            .and_then(|mut st| {
                st.query_map([], |r| r.get::<_, i64>(0).map(from_i))?
                    .collect::<Result<Vec<_>, _>>()
            })
            .map_err(&e)?;
        Ok(IndexSnapshot {
            last_sequence: inner.last_sequence,
            objects,
            runs,
            producers,
            files,
            log_starts,
            abandoned,
        })
    }

    /// Replaces everything the index holds by `snapshot` (a loaded checkpoint), in one
    /// transaction; the last sequence becomes the snapshot's. Durable as
    /// [`apply`](Self::apply) is.
    pub fn load_snapshot(&self, snapshot: &IndexSnapshot) -> Result<(), IndexError> {
        let mut inner = self.lock();
        let e = self.err("load a checkpoint");
        let tx = inner.conn.transaction().map_err(&e)?;
        for table in [
            "objects",
            "runs",
            "producers",
            "files",
            "log_starts",
            "abandoned",
        ] {
            tx.execute(&format!("DELETE FROM {table}"), [])
                .map_err(&e)?;
        }
        for o in &snapshot.objects {
            let seq = self.check_seq(o.sequence)?;
            let state = if o.abandoned {
                STATE_ABANDONED
            } else {
                STATE_APPLIED
            };
            tx.execute(
                "INSERT OR REPLACE INTO objects (seq, size, created_ms, state) VALUES (?1, ?2, ?3, ?4)",
                params![seq, u(o.size), o.created_ms, state],
            )
            .map_err(&e)?;
        }
        for (topic_id, partition, loc) in &snapshot.runs {
            let id = self.check_seq(loc.object_seq)?;
            self.insert_runs(&tx, id, &[loc.entry(*topic_id, *partition)])?;
        }
        for (b, object_seq) in &snapshot.producers {
            tx.execute(
                "INSERT OR REPLACE INTO producers (topic, partition, producer_id, epoch,
                    first_seq, last_seq, base_offset, last_offset, object_seq)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9)",
                params![
                    &b.topic_id.0[..],
                    b.partition,
                    b.producer_id,
                    b.epoch,
                    b.first_seq,
                    b.last_seq,
                    b.base_offset,
                    b.last_offset,
                    u(*object_seq),
                ],
            )
            .map_err(&e)?;
        }
        for (path, contents) in &snapshot.files {
            tx.execute(
                "INSERT OR REPLACE INTO files (path, contents) VALUES (?1, ?2)",
                params![path, contents],
            )
            .map_err(&e)?;
        }
        for (topic_id, partition, start) in &snapshot.log_starts {
            tx.execute(
                "INSERT OR REPLACE INTO log_starts (topic, partition, log_start) VALUES (?1, ?2, ?3)",
                params![&topic_id.0[..], partition, start],
            )
            .map_err(&e)?;
        }
        for &s in &snapshot.abandoned {
            let s = self.check_seq(s)?;
            tx.execute("INSERT OR IGNORE INTO abandoned (seq) VALUES (?1)", [s])
                .map_err(&e)?;
        }
        match snapshot.last_sequence {
            Some(last) => tx.execute(
                "INSERT OR REPLACE INTO settings (key, value) VALUES ('last_sequence', ?1)",
                [last.to_string()],
            ),
            None => tx.execute("DELETE FROM settings WHERE key = 'last_sequence'", []),
        }
        .map_err(&e)?;
        tx.commit().map_err(&e)?;
        inner.last_sequence = snapshot.last_sequence;
        Ok(())
    }

    /// The ids of the objects at or above `from` that hold a live run (e.g. every compacted
    /// object still in use: `from` = [`crate::name::COMPACTED_ID_BASE`]).
    pub fn referenced_objects_from(&self, from: u64) -> Result<BTreeSet<u64>, IndexError> {
        let inner = self.lock();
        let e = self.err("read referenced objects");
        let from = from.min(SEQ_MAX) as i64;
        let mut stmt = inner
            .conn
            .prepare_cached("SELECT DISTINCT object_seq FROM runs WHERE object_seq >= ?1")
            .map_err(&e)?;
        let rows = stmt
            .query_map([from], |r| r.get::<_, i64>(0))
            .map_err(&e)?
            .map(|r| r.map(from_i))
            .collect::<Result<_, _>>()
            .map_err(&e)?;
        Ok(rows)
    }

    /// Records `seqs` as abandoned and drops what was applied of them.
    fn abandon(&self, tx: &Transaction<'_>, seqs: &[u64]) -> Result<(), IndexError> {
        let e = self.err("record abandoned objects");
        for &s in seqs {
            let s = self.check_seq(s)?;
            tx.execute("INSERT OR IGNORE INTO abandoned (seq) VALUES (?1)", [s])
                .map_err(&e)?;
            tx.execute("DELETE FROM runs WHERE object_seq = ?1", [s])
                .map_err(&e)?;
            tx.execute("DELETE FROM producers WHERE object_seq = ?1", [s])
                .map_err(&e)?;
            tx.execute(
                "UPDATE objects SET state = ?2 WHERE seq = ?1",
                [s, STATE_ABANDONED],
            )
            .map_err(&e)?;
        }
        Ok(())
    }

    /// Marks `seqs` abandoned (the flusher gave up on them): they are skipped and never
    /// applied, and what was applied of them is dropped. Durable as [`apply`](Self::apply) is.
    pub fn mark_abandoned(&self, seqs: &[u64]) -> Result<(), IndexError> {
        let mut inner = self.lock();
        let tx = inner
            .conn
            .transaction()
            .map_err(self.err("begin a transaction"))?;
        self.abandon(&tx, seqs)?;
        tx.commit().map_err(self.err("commit"))?;
        Ok(())
    }

    /// The sequences recorded as abandoned.
    pub fn abandoned(&self) -> Result<BTreeSet<u64>, IndexError> {
        let inner = self.lock();
        let e = self.err("read the abandoned objects");
        let mut stmt = inner
            .conn
            .prepare_cached("SELECT seq FROM abandoned ORDER BY seq")
            .map_err(&e)?;
        let rows = stmt
            .query_map([], |r| r.get::<_, i64>(0))
            .map_err(&e)?
            .map(|r| r.map(from_i))
            .collect::<Result<_, _>>()
            .map_err(&e)?;
        Ok(rows)
    }

    /// The live runs of a partition, in ascending base offset.
    pub fn runs(&self, topic: TopicId, partition: i32) -> Result<Vec<RunLocation>, IndexError> {
        let inner = self.lock();
        let e = self.err("read runs");
        let mut stmt = inner
            .conn
            .prepare_cached(
                "SELECT object_seq, base_offset, last_offset, max_timestamp, record_count,
                    batch_count, data_offset, data_len, data_crc
                 FROM runs WHERE topic = ?1 AND partition = ?2 ORDER BY base_offset",
            )
            .map_err(&e)?;
        let rows = stmt
            .query_map(params![&topic.0[..], partition], |r| {
                Ok(RunLocation {
                    object_seq: from_i(r.get(0)?),
                    base_offset: r.get(1)?,
                    last_offset: r.get(2)?,
                    max_timestamp: r.get(3)?,
                    record_count: from_i(r.get(4)?),
                    batch_count: r.get(5)?,
                    data_offset: from_i(r.get(6)?),
                    data_len: from_i(r.get(7)?),
                    data_crc: r.get(8)?,
                })
            })
            .map_err(&e)?
            .collect::<Result<_, _>>()
            .map_err(&e)?;
        Ok(rows)
    }

    /// Every partition with a live run or a moved log start, in (topic id, partition) order.
    pub fn partitions(&self) -> Result<Vec<PartitionState>, IndexError> {
        let inner = self.lock();
        let e = self.err("read partitions");
        let mut stmt = inner
            .conn
            .prepare_cached(
                "WITH keys AS (
                    SELECT topic, partition FROM runs
                    UNION SELECT topic, partition FROM log_starts)
                 SELECT k.topic, k.partition,
                    coalesce((SELECT log_start FROM log_starts l
                              WHERE l.topic = k.topic AND l.partition = k.partition), 0),
                    (SELECT max(last_offset) FROM runs r
                     WHERE r.topic = k.topic AND r.partition = k.partition),
                    coalesce((SELECT sum(data_len) FROM runs r
                              WHERE r.topic = k.topic AND r.partition = k.partition), 0)
                 FROM keys k ORDER BY k.topic, k.partition",
            )
            .map_err(&e)?;
        let rows = stmt
            .query_map([], |r| {
                let log_start: i64 = r.get(2)?;
                let last: Option<i64> = r.get(3)?;
                Ok(PartitionState {
                    topic_id: topic_of(r.get_ref(0)?.as_blob()?),
                    partition: r.get(1)?,
                    log_start,
                    next_offset: last.map_or(log_start, |l| l.saturating_add(1).max(log_start)),
                    size_bytes: from_i(r.get(4)?),
                })
            })
            .map_err(&e)?
            .collect::<Result<_, _>>()
            .map_err(&e)?;
        Ok(rows)
    }

    /// The partition's log start: 0 until a `LogStart` record moved it.
    pub fn log_start(&self, topic: TopicId, partition: i32) -> Result<i64, IndexError> {
        let inner = self.lock();
        let start: Option<i64> = inner
            .conn
            .query_row(
                "SELECT log_start FROM log_starts WHERE topic = ?1 AND partition = ?2",
                params![&topic.0[..], partition],
                |r| r.get(0),
            )
            .optional()
            .map_err(self.err("read a log start"))?;
        Ok(start.unwrap_or(0))
    }

    /// The kept idempotent batches of a partition, by producer id then base offset.
    pub fn producer_batches(
        &self,
        topic: TopicId,
        partition: i32,
    ) -> Result<Vec<ProducerBatch>, IndexError> {
        let inner = self.lock();
        let e = self.err("read producer batches");
        let mut stmt = inner
            .conn
            .prepare_cached(
                "SELECT producer_id, epoch, first_seq, last_seq, base_offset, last_offset
                 FROM producers WHERE topic = ?1 AND partition = ?2
                 ORDER BY producer_id, base_offset",
            )
            .map_err(&e)?;
        let rows = stmt
            .query_map(params![&topic.0[..], partition], |r| {
                Ok(ProducerBatch {
                    topic_id: topic,
                    partition,
                    producer_id: r.get(0)?,
                    epoch: r.get(1)?,
                    first_seq: r.get(2)?,
                    last_seq: r.get(3)?,
                    base_offset: r.get(4)?,
                    last_offset: r.get(5)?,
                })
            })
            .map_err(&e)?
            .collect::<Result<_, _>>()
            .map_err(&e)?;
        Ok(rows)
    }

    /// The mirrored metadata files, by path.
    pub fn files(&self) -> Result<Vec<(String, Vec<u8>)>, IndexError> {
        let inner = self.lock();
        let e = self.err("read metadata files");
        let mut stmt = inner
            .conn
            .prepare_cached("SELECT path, contents FROM files ORDER BY path")
            .map_err(&e)?;
        let rows = stmt
            .query_map([], |r| Ok((r.get(0)?, r.get(1)?)))
            .map_err(&e)?
            .collect::<Result<_, _>>()
            .map_err(&e)?;
        Ok(rows)
    }

    /// Objects below `below_sequence` (and at most the last applied one) that no live run
    /// references: applied objects whose runs were all dropped, and abandoned ones. The
    /// caller passes the sequence a checkpoint covers, so their metadata sections are no
    /// longer needed by a rebuild either. Ascending.
    pub fn unreferenced_objects(&self, below_sequence: u64) -> Result<Vec<u64>, IndexError> {
        let inner = self.lock();
        let Some(last) = inner.last_sequence else {
            return Ok(Vec::new());
        };
        let bound = below_sequence.min(last.saturating_add(1)).min(SEQ_MAX) as i64;
        let e = self.err("find unreferenced objects");
        let mut stmt = inner
            .conn
            .prepare_cached(
                "SELECT seq FROM objects o WHERE seq < ?1
                    AND NOT EXISTS (SELECT 1 FROM runs r WHERE r.object_seq = o.seq)
                 UNION SELECT seq FROM abandoned WHERE seq < ?1
                 ORDER BY seq",
            )
            .map_err(&e)?;
        let rows = stmt
            .query_map([bound], |r| r.get::<_, i64>(0))
            .map_err(&e)?
            .map(|r| r.map(from_i))
            .collect::<Result<_, _>>()
            .map_err(&e)?;
        Ok(rows)
    }

    /// Forgets objects the cleaner deleted from the bucket (rows in `objects` and
    /// `abandoned`). Their live runs, if any, are kept: the caller must only pass sequences
    /// [`unreferenced_objects`](Self::unreferenced_objects) returned.
    pub fn forget_objects(&self, seqs: &[u64]) -> Result<(), IndexError> {
        let mut inner = self.lock();
        let e = self.err("forget objects");
        let tx = inner.conn.transaction().map_err(&e)?;
        for &s in seqs {
            let s = self.check_seq(s)?;
            tx.execute("DELETE FROM objects WHERE seq = ?1", [s])
                .map_err(&e)?;
            tx.execute("DELETE FROM abandoned WHERE seq = ?1", [s])
                .map_err(&e)?;
        }
        tx.commit().map_err(&e)?;
        Ok(())
    }
}

fn topic_of(blob: &[u8]) -> TopicId {
    TopicId(blob.try_into().unwrap_or([0; 16]))
}

#[cfg(test)]
mod tests {
    use super::*;

    const URL: &str = "s3://bucket/prefix";
    const T1: TopicId = TopicId([1; 16]);
    const T2: TopicId = TopicId([2; 16]);

    fn run(topic_id: TopicId, partition: i32, base: i64, last: i64) -> RunEntry {
        RunEntry {
            topic_id,
            partition,
            batch_count: 1,
            base_offset: base,
            last_offset: last,
            max_timestamp: 1000 + last,
            record_count: (last - base + 1) as u64,
            data_offset: 40,
            data_len: 100,
            data_crc: 0xdead_beef,
        }
    }

    fn object(sequence: u64, runs: Vec<RunEntry>, meta: Vec<MetaChange>) -> ObjectSummary {
        ObjectSummary {
            sequence,
            size: 500,
            created_ms: 1_700_000_000_000 + sequence as i64,
            runs,
            meta,
        }
    }

    fn producer(pid: i64, base: i64) -> MetaChange {
        MetaChange::ProducerBatch(ProducerBatch {
            topic_id: T1,
            partition: 0,
            producer_id: pid,
            epoch: 0,
            first_seq: base as i32,
            last_seq: base as i32,
            base_offset: base,
            last_offset: base,
        })
    }

    fn open(dir: &tempfile::TempDir) -> Index {
        Index::open(&dir.path().join("objstore/index.sqlite"), URL).unwrap()
    }

    fn bases(index: &Index, topic: TopicId, partition: i32) -> Vec<(u64, i64)> {
        index
            .runs(topic, partition)
            .unwrap()
            .iter()
            .map(|r| (r.object_seq, r.base_offset))
            .collect()
    }

    #[test]
    fn applies_in_order_and_older_sequences_are_no_ops() {
        let dir = tempfile::tempdir().unwrap();
        let index = open(&dir);
        assert_eq!(index.last_sequence(), None);
        index
            .apply(&object(1, vec![run(T1, 0, 0, 9), run(T2, 3, 0, 4)], vec![]))
            .unwrap();
        index
            .apply(&object(3, vec![run(T1, 0, 10, 19)], vec![]))
            .unwrap();
        assert_eq!(index.last_sequence(), Some(3));
        // Older or equal sequences change nothing.
        index
            .apply(&object(2, vec![run(T1, 0, 100, 109)], vec![]))
            .unwrap();
        index
            .apply(&object(3, vec![run(T1, 0, 200, 209)], vec![]))
            .unwrap();
        assert_eq!(bases(&index, T1, 0), vec![(1, 0), (3, 10)]);
        let loc = index.runs(T1, 0).unwrap()[1];
        assert_eq!(loc.entry(T1, 0), run(T1, 0, 10, 19));
        assert_eq!(
            index.partitions().unwrap(),
            vec![
                PartitionState {
                    topic_id: T1,
                    partition: 0,
                    log_start: 0,
                    next_offset: 20,
                    size_bytes: 200
                },
                PartitionState {
                    topic_id: T2,
                    partition: 3,
                    log_start: 0,
                    next_offset: 5,
                    size_bytes: 100
                },
            ]
        );
        assert_eq!(index.runs(T2, 0).unwrap(), vec![]);
    }

    #[test]
    fn abandoned_objects_are_skipped_and_dropped_when_applied_earlier() {
        let dir = tempfile::tempdir().unwrap();
        let index = open(&dir);
        index.mark_abandoned(&[2]).unwrap();
        index
            .apply(&object(1, vec![run(T1, 0, 0, 9)], vec![]))
            .unwrap();
        // Abandoned at runtime: skipped entirely, meta included.
        index
            .apply(&object(
                2,
                vec![run(T1, 0, 10, 19)],
                vec![MetaChange::FileWrite {
                    path: "a".into(),
                    contents: b"x".to_vec(),
                }],
            ))
            .unwrap();
        assert_eq!(index.last_sequence(), Some(2));
        assert_eq!(bases(&index, T1, 0), vec![(1, 0)]);
        assert!(index.files().unwrap().is_empty());
        // Applied, then a later object says it was abandoned: its runs and producer batches go.
        index
            .apply(&object(3, vec![run(T1, 0, 20, 29)], vec![producer(7, 20)]))
            .unwrap();
        index
            .apply(&object(4, vec![run(T1, 0, 30, 39)], vec![]))
            .unwrap();
        assert_eq!(index.producer_batches(T1, 0).unwrap().len(), 1);
        index
            .apply(&object(5, vec![], vec![MetaChange::Abandoned(vec![3])]))
            .unwrap();
        assert_eq!(bases(&index, T1, 0), vec![(1, 0), (4, 30)]);
        assert!(index.producer_batches(T1, 0).unwrap().is_empty());
        assert_eq!(index.abandoned().unwrap(), BTreeSet::from([2, 3]));
        // A later abandoned sequence recorded by an object is skipped when it comes.
        index
            .apply(&object(6, vec![], vec![MetaChange::Abandoned(vec![7])]))
            .unwrap();
        index
            .apply(&object(7, vec![run(T1, 0, 40, 49)], vec![]))
            .unwrap();
        assert_eq!(bases(&index, T1, 0), vec![(1, 0), (4, 30)]);
        // Objects 2, 3, 5, 6 and 7 hold no live run.
        assert_eq!(
            index.unreferenced_objects(100).unwrap(),
            vec![2, 3, 5, 6, 7]
        );
        assert_eq!(index.unreferenced_objects(5).unwrap(), vec![2, 3]);
        index.forget_objects(&[2, 3]).unwrap();
        assert_eq!(index.unreferenced_objects(5).unwrap(), Vec::<u64>::new());
        // Forgotten objects are still never applied again (they are below the last sequence).
        index
            .apply(&object(3, vec![run(T1, 0, 20, 29)], vec![]))
            .unwrap();
        assert_eq!(bases(&index, T1, 0), vec![(1, 0), (4, 30)]);
    }

    #[test]
    fn producer_batches_keep_the_last_five_per_producer() {
        let dir = tempfile::tempdir().unwrap();
        let index = open(&dir);
        let meta: Vec<MetaChange> = (0..8).map(|i| producer(1, i * 10)).collect();
        index.apply(&object(1, vec![], meta)).unwrap();
        index
            .apply(&object(2, vec![], vec![producer(2, 5), producer(1, 80)]))
            .unwrap();
        let batches = index.producer_batches(T1, 0).unwrap();
        let of = |pid| -> Vec<i64> {
            batches
                .iter()
                .filter(|b| b.producer_id == pid)
                .map(|b| b.base_offset)
                .collect()
        };
        assert_eq!(of(1), vec![40, 50, 60, 70, 80]);
        assert_eq!(of(2), vec![5]);
        assert_eq!(batches[0].topic_id, T1);
    }

    #[test]
    fn files_write_append_and_remove_trees() {
        let dir = tempfile::tempdir().unwrap();
        let index = open(&dir);
        let write = |path: &str, c: &[u8]| MetaChange::FileWrite {
            path: path.into(),
            contents: c.to_vec(),
        };
        let append = |path: &str, c: &[u8]| MetaChange::FileAppend {
            path: path.into(),
            bytes: c.to_vec(),
        };
        let remove = |path: &str| MetaChange::FileRemove { path: path.into() };
        index
            .apply(&object(
                1,
                vec![],
                vec![
                    write("topics/a/topic.json", b"{a}"),
                    write("topics/a/sub/x", b"x"),
                    write("topics/ab/topic.json", b"{ab}"),
                    write("topics/a.json", b"dot"),
                    write("topics/a", b"file beside the dir"),
                    append("groups/log", b"\0one"),
                    append("groups/log", b"\0two"),
                    write("w", b"old"),
                    write("w", b"new"),
                ],
            ))
            .unwrap();
        index
            .apply(&object(2, vec![], vec![remove("topics/a")]))
            .unwrap();
        let files = index.files().unwrap();
        let names: Vec<&str> = files.iter().map(|(p, _)| p.as_str()).collect();
        assert_eq!(
            names,
            vec!["groups/log", "topics/a.json", "topics/ab/topic.json", "w"]
        );
        assert_eq!(files[0].1, b"\0one\0two".to_vec());
        assert_eq!(files[3].1, b"new".to_vec());
        index
            .apply(&object(3, vec![], vec![remove("nothing/here")]))
            .unwrap();
        assert_eq!(index.files().unwrap().len(), 4);
    }

    #[test]
    fn log_start_drops_runs_below_and_topic_deletion_drops_the_topic() {
        let dir = tempfile::tempdir().unwrap();
        let index = open(&dir);
        index
            .apply(&object(
                1,
                vec![run(T1, 0, 0, 9), run(T1, 1, 0, 9), run(T2, 0, 0, 9)],
                vec![producer(1, 0)],
            ))
            .unwrap();
        index
            .apply(&object(
                2,
                vec![run(T1, 0, 10, 19), run(T2, 0, 10, 19)],
                vec![],
            ))
            .unwrap();
        let log_start = |p, offset| MetaChange::LogStart {
            topic_id: T1,
            partition: p,
            offset,
        };
        // Offset 10 drops the run ending at 9; 15 keeps the run 10..19 (it holds 15..19).
        index
            .apply(&object(3, vec![], vec![log_start(0, 15), log_start(0, 10)]))
            .unwrap();
        assert_eq!(index.log_start(T1, 0).unwrap(), 15);
        assert_eq!(bases(&index, T1, 0), vec![(2, 10)]);
        // Past every run: no run is left, the next offset is the log start.
        index
            .apply(&object(4, vec![], vec![log_start(1, 30)]))
            .unwrap();
        assert_eq!(bases(&index, T1, 1), vec![]);
        let parts = index.partitions().unwrap();
        assert_eq!(
            (
                parts[1].partition,
                parts[1].log_start,
                parts[1].next_offset,
                parts[1].size_bytes
            ),
            (1, 30, 30, 0)
        );
        index
            .apply(&object(
                5,
                vec![],
                vec![MetaChange::TopicDeleted { topic_id: T1 }],
            ))
            .unwrap();
        assert_eq!(bases(&index, T1, 0), vec![]);
        assert_eq!(index.log_start(T1, 0).unwrap(), 0);
        assert!(index.producer_batches(T1, 0).unwrap().is_empty());
        let parts = index.partitions().unwrap();
        assert_eq!(parts.len(), 1);
        assert_eq!((parts[0].topic_id, parts[0].next_offset), (T2, 20));
    }

    #[test]
    fn reopening_keeps_the_state_and_another_bucket_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        {
            let index = open(&dir);
            index
                .apply(&object(
                    4,
                    vec![run(T1, 0, 0, 9)],
                    vec![MetaChange::FileWrite {
                        path: "f".into(),
                        contents: b"c".to_vec(),
                    }],
                ))
                .unwrap();
            index.mark_abandoned(&[5]).unwrap();
        }
        let index = open(&dir);
        assert_eq!(index.last_sequence(), Some(4));
        assert_eq!(bases(&index, T1, 0), vec![(4, 0)]);
        assert_eq!(
            index.files().unwrap(),
            vec![("f".to_owned(), b"c".to_vec())]
        );
        assert_eq!(index.abandoned().unwrap(), BTreeSet::from([5]));
        drop(index);

        let path = dir.path().join("objstore/index.sqlite");
        let err = Index::open(&path, "s3://bucket/other").unwrap_err();
        assert!(matches!(err, IndexError::WrongBucket { .. }), "{err:?}");
        let line = err.to_string();
        assert!(line.contains("s3://bucket/other"), "{line}");
        assert!(line.contains("s3://bucket/prefix"), "{line}");
        assert!(line.contains(&path.display().to_string()), "{line}");
        assert!(!line.contains('\n'), "{line}");
    }

    #[test]
    fn other_schema_versions_and_foreign_databases_are_refused() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("index.sqlite");
        drop(Index::open(&path, URL).unwrap());
        Connection::open(&path)
            .unwrap()
            .pragma_update(None, "user_version", 99)
            .unwrap();
        let err = Index::open(&path, URL).unwrap_err();
        assert!(
            matches!(err, IndexError::Schema { found: 99, .. }),
            "{err:?}"
        );

        let other = dir.path().join("other.sqlite");
        Connection::open(&other)
            .unwrap()
            .execute_batch("CREATE TABLE t (x)")
            .unwrap();
        let err = Index::open(&other, URL).unwrap_err();
        assert!(matches!(err, IndexError::NotAnIndex { .. }), "{err:?}");
    }

    #[test]
    fn sequences_beyond_i64_are_refused() {
        let dir = tempfile::tempdir().unwrap();
        let index = open(&dir);
        let err = index.apply(&object(u64::MAX, vec![], vec![])).unwrap_err();
        assert!(matches!(err, IndexError::SequenceTooLarge { .. }), "{err}");
        assert_eq!(index.last_sequence(), None);
    }

    #[test]
    fn index_is_send_and_sync() {
        fn check<T: Send + Sync>() {}
        check::<Index>();
    }
}
