//! Retention and cleanup in cluster mode: the *cleaner*, one broker at a time.
//!
//! Every broker opens every partition, but only the holder of the cleaner lease
//! (`sluice.cleaner_lease`, taken over once it expires) works in a round
//! ([`run_round`], every [`CleanerSettings::interval`]):
//!
//! 1. **Retention** of each partition, by its effective `retention.ms` and `retention.bytes`
//!    (the topic's override or the broker's default, as the partition was configured):
//!    the index rows are walked from the oldest; the prefix of rows whose newest timestamp is
//!    older than `now - retention.ms`, or whose removal still leaves at least
//!    `retention.bytes` behind them, goes. As in Kafka, retention removes a prefix only: it
//!    stops at the first row that must stay, even if later ones are older. The partition's
//!    `log_start` moves first (under the partition row's lock, the lock commits take), then
//!    the rows below it are deleted in bounded statements.
//! 2. **Deleted topics**: their index rows are deleted, then the topic's row.
//! 3. **Objects**: an object whose last index row went is marked (`unreferenced_at`); once
//!    the mark is older than [`CleanerSettings::object_grace`] the object is deleted from the
//!    bucket, then its row. The grace covers a reader that looked up a row just before it
//!    went (it may still fetch the bytes), and a commit retried under the same key (it must
//!    still find its stored outcomes; the flusher gives up on a commit long before).
//!
//! Crash safety: every step is idempotent and may stop anywhere. Rows below `log_start` that
//! a crash left behind are deleted by the next round (readers never see them: every read
//! starts at `log_start`); a mark is only set once no row refers to the object, and no row is
//! ever added to a committed object; an object is deleted from the bucket before its row, so
//! a crash between the two only repeats the DELETE.
//!
//! Readers on other brokers learn the new `log_start` at their next poll of the bounds
//! (every few seconds), well inside the grace.

use std::time::Duration;

use object_store::ObjectStoreExt;
use sluice_objstore::Bucket;
use uuid::Uuid;

use crate::db::{Db, DbError};

/// How often the cleaner runs by default (`sluice serve --retention-check-interval-ms`).
/// Kafka checks retention every 5 minutes (`log.retention.check.interval.ms`); a minute
/// keeps a short `retention.ms` close to exact at the cost of a few index reads per
/// partition per round.
pub const CLEANER_INTERVAL: Duration = Duration::from_secs(60);

/// How long an object no index row refers to stays in the bucket. Far longer than any
/// commit retry (bounded by `--object-put-timeout-ms`) and any reader's gap between a row
/// lookup and its GET.
pub const OBJECT_GRACE: Duration = Duration::from_secs(10 * 60);

/// Index rows one statement deletes at most: keeps each transaction short, so commits that
/// wait on the same partition row are not held up.
pub const ROWS_PER_DELETE: i64 = 5_000;

/// Index rows retention walks per partition in one round at most (a backlog is worked off
/// over several rounds).
pub const ROWS_WALKED_MAX: usize = 100_000;

/// Objects deleted from the bucket in one round at most.
pub const OBJECTS_PER_ROUND: i64 = 1_000;

/// Deleted topics purged in one round at most.
pub const TOPICS_PER_ROUND: i64 = 100;

/// The cleaner's bounds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CleanerSettings {
    pub interval: Duration,
    pub object_grace: Duration,
}

impl Default for CleanerSettings {
    fn default() -> Self {
        CleanerSettings {
            interval: CLEANER_INTERVAL,
            object_grace: OBJECT_GRACE,
        }
    }
}

/// One partition's retention, as the broker configured it (`None`: unlimited).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PartitionRetention {
    pub topic_id: Uuid,
    pub partition: i32,
    pub retention_ms: Option<i64>,
    pub retention_bytes: Option<u64>,
}

/// What one round did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RoundStats {
    /// Whether this broker held the cleaner lease (if not, it did nothing else).
    pub held: bool,
    /// Partitions whose log start moved.
    pub partitions_trimmed: u64,
    /// Index rows deleted (retention and deleted topics).
    pub rows_deleted: u64,
    /// Deleted topics whose rows are all gone.
    pub topics_purged: u64,
    /// Objects deleted from the bucket.
    pub objects_deleted: u64,
}

impl RoundStats {
    fn did_something(&self) -> bool {
        self.partitions_trimmed + self.rows_deleted + self.topics_purged + self.objects_deleted > 0
    }
}

/// Why a round stopped early. The next round starts over; nothing is left half done that it
/// cannot finish.
#[derive(Debug, thiserror::Error)]
pub enum CleanerError {
    #[error(transparent)]
    Db(#[from] DbError),
    #[error("deleting object {key} from the bucket: {source}")]
    Delete {
        key: String,
        #[source]
        source: object_store::Error,
    },
}

impl From<tokio_postgres::Error> for CleanerError {
    fn from(e: tokio_postgres::Error) -> Self {
        CleanerError::Db(DbError::Query(e))
    }
}

/// Takes or renews the cleaner lease for `broker_id` (this process: `instance`) for
/// `lease`; `false` if another live broker holds it.
pub async fn take_lease(
    db: &Db,
    broker_id: i32,
    instance: Uuid,
    lease: Duration,
) -> Result<bool, DbError> {
    let client = db.client().await?;
    let secs = lease.as_secs_f64();
    let row = client
        .query_opt(
            "INSERT INTO cleaner_lease (singleton, broker_id, instance, expires_at) \
             VALUES (true, $1, $2, now() + make_interval(secs => $3)) \
             ON CONFLICT (singleton) DO UPDATE \
               SET broker_id = EXCLUDED.broker_id, instance = EXCLUDED.instance, \
                   expires_at = EXCLUDED.expires_at \
               WHERE cleaner_lease.instance = EXCLUDED.instance \
                  OR cleaner_lease.expires_at < now() \
             RETURNING broker_id",
            &[&broker_id, &instance, &secs],
        )
        .await?;
    Ok(row.is_some())
}

/// One round of the cleaner (see the module doc) for the broker `broker_id`/`instance`,
/// over `partitions` (every partition this broker has open, with its retention), at
/// `now_ms` (wall clock, the time `retention.ms` is measured against). Does nothing but
/// report `held: false` when another broker holds the lease.
///
/// When it returns `Ok`, every log start it moved is committed in PostgreSQL, the rows below
/// them are deleted (up to the per-round bounds), and every object it deleted is gone from
/// the bucket and from `objects`.
pub async fn run_round(
    db: &Db,
    bucket: &Bucket,
    broker_id: i32,
    instance: Uuid,
    partitions: &[PartitionRetention],
    settings: &CleanerSettings,
    now_ms: i64,
) -> Result<RoundStats, CleanerError> {
    let mut stats = RoundStats::default();
    // The lease outlives two rounds, so a holder that misses one round keeps it.
    if !take_lease(db, broker_id, instance, settings.interval * 3).await? {
        return Ok(stats);
    }
    stats.held = true;
    for p in partitions {
        if p.retention_ms.is_none() && p.retention_bytes.is_none() {
            // Rows below a log start that DeleteRecords moved still go.
            stats.rows_deleted += delete_rows_below_start(db, p.topic_id, p.partition).await?;
            continue;
        }
        let (moved, rows) = trim_partition(db, p, now_ms).await?;
        stats.partitions_trimmed += u64::from(moved);
        stats.rows_deleted += rows;
    }
    let (topics, rows) = purge_deleted_topics(db).await?;
    stats.topics_purged += topics;
    stats.rows_deleted += rows;
    stats.objects_deleted += sweep_objects(db, bucket, settings.object_grace).await?;
    Ok(stats)
}

/// Where retention puts the log start of `p`: the end of the prefix of its rows that may go.
/// `None` when nothing may go (or the partition is gone).
pub async fn retention_start(
    db: &Db,
    p: &PartitionRetention,
    now_ms: i64,
) -> Result<Option<i64>, DbError> {
    let client = db.client().await?;
    let Some(bounds) = client
        .query_opt(
            "SELECT log_start, next_offset FROM partitions WHERE topic_id = $1 AND partition = $2",
            &[&p.topic_id, &p.partition],
        )
        .await?
    else {
        return Ok(None);
    };
    let log_start: i64 = bounds.get(0);
    // Bytes retention needs the size of what is kept now.
    let mut kept_bytes: i64 = match p.retention_bytes {
        Some(_) => client
            .query_one(
                "SELECT coalesce(sum(byte_len), 0)::bigint FROM batches \
                 WHERE topic_id = $1 AND partition = $2 AND last_offset >= $3",
                &[&p.topic_id, &p.partition, &log_start],
            )
            .await?
            .get(0),
        None => 0,
    };
    let cutoff = p.retention_ms.map(|ms| now_ms.saturating_sub(ms));
    let limit_bytes = p.retention_bytes.map(|b| b.min(i64::MAX as u64) as i64);
    let mut time_open = cutoff.is_some();
    let mut bytes_open = limit_bytes.is_some();
    let mut new_start = None;
    let mut after = log_start - 1;
    let mut walked = 0usize;
    while (time_open || bytes_open) && walked < ROWS_WALKED_MAX {
        let rows = client
            .query(
                "SELECT last_offset, max_timestamp, byte_len FROM batches \
                 WHERE topic_id = $1 AND partition = $2 AND last_offset > $3 \
                 ORDER BY last_offset LIMIT 1000",
                &[&p.topic_id, &p.partition, &after],
            )
            .await?;
        if rows.is_empty() {
            break;
        }
        for row in &rows {
            let last_offset: i64 = row.get(0);
            let max_timestamp: i64 = row.get(1);
            let len = i64::from(row.get::<_, i32>(2));
            walked += 1;
            after = last_offset;
            if let Some(cutoff) = cutoff
                && time_open
                && max_timestamp >= cutoff
            {
                time_open = false;
            }
            if let Some(limit) = limit_bytes
                && bytes_open
                && kept_bytes - len < limit
            {
                bytes_open = false;
            }
            if !(time_open || bytes_open) {
                break;
            }
            kept_bytes -= len;
            new_start = Some(last_offset + 1);
        }
    }
    Ok(new_start.filter(|s| *s > log_start))
}

/// Moves `p`'s log start by its retention and deletes the rows below it. Returns whether
/// the log start moved, and the rows deleted.
async fn trim_partition(
    db: &Db,
    p: &PartitionRetention,
    now_ms: i64,
) -> Result<(bool, u64), CleanerError> {
    let moved = match retention_start(db, p, now_ms).await? {
        Some(start) => move_log_start(db, p.topic_id, p.partition, start).await?,
        None => false,
    };
    let rows = delete_rows_below_start(db, p.topic_id, p.partition).await?;
    Ok((moved, rows))
}

/// Sets the partition's log start to `start` if that is later (never past the high
/// watermark), under the partition row's lock. Returns whether it moved. When it returns,
/// the new log start is committed: every broker's next read of the bounds sees it.
pub async fn move_log_start(
    db: &Db,
    topic_id: Uuid,
    partition: i32,
    start: i64,
) -> Result<bool, DbError> {
    let client = db.client().await?;
    let n = client
        .execute(
            "UPDATE partitions SET log_start = least($3, next_offset) \
             WHERE topic_id = $1 AND partition = $2 AND log_start < least($3, next_offset)",
            &[&topic_id, &partition, &start],
        )
        .await?;
    Ok(n > 0)
}

/// What [`delete_records`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DeleteRecords {
    /// The log start is now this (moved, or already there or past it).
    LogStart(i64),
    /// `before` was past the partition's next offset (or negative): nothing changed.
    OutOfRange { log_start: i64, next_offset: i64 },
}

/// Kafka's DeleteRecords: moves the partition's log start to `before` under the partition
/// row's lock, unless it is already there or past it, or `before` is past the last committed
/// offset. When it returns the move is committed; the cleaner deletes the index rows below it
/// and frees their objects later, as after retention.
pub async fn delete_records(
    db: &Db,
    topic_id: Uuid,
    partition: i32,
    before: i64,
) -> Result<Option<DeleteRecords>, DbError> {
    let client = db.client().await?;
    let row = client
        .query_opt(
            "WITH moved AS ( \
               UPDATE partitions SET log_start = $3 \
               WHERE topic_id = $1 AND partition = $2 AND log_start < $3 AND $3 <= next_offset \
               RETURNING log_start, next_offset) \
             SELECT log_start, next_offset FROM moved \
             UNION ALL \
             SELECT log_start, next_offset FROM partitions \
             WHERE topic_id = $1 AND partition = $2 AND NOT EXISTS (SELECT 1 FROM moved)",
            &[&topic_id, &partition, &before],
        )
        .await?;
    Ok(row.map(|r| {
        let (log_start, next_offset): (i64, i64) = (r.get(0), r.get(1));
        if before < 0 || before > next_offset {
            DeleteRecords::OutOfRange {
                log_start,
                next_offset,
            }
        } else {
            DeleteRecords::LogStart(log_start.max(before))
        }
    }))
}

/// Deletes the partition's index rows below its log start, [`ROWS_PER_DELETE`] per
/// statement, marking the objects that lost their last row. Returns the rows deleted.
async fn delete_rows_below_start(
    db: &Db,
    topic_id: Uuid,
    partition: i32,
) -> Result<u64, CleanerError> {
    delete_all(
        db,
        "WITH gone AS ( \
           DELETE FROM batches WHERE (topic_id, partition, last_offset) IN ( \
             SELECT b.topic_id, b.partition, b.last_offset FROM batches b \
             JOIN partitions p ON p.topic_id = b.topic_id AND p.partition = b.partition \
             WHERE b.topic_id = $1 AND b.partition = $2 AND b.last_offset < p.log_start \
             ORDER BY b.last_offset LIMIT $3) \
           RETURNING object_id) \
         SELECT object_id, count(*) FROM gone GROUP BY object_id",
        &[&topic_id, &partition, &ROWS_PER_DELETE],
    )
    .await
}

/// Runs `delete` (a statement that deletes at most [`ROWS_PER_DELETE`] index rows and answers
/// `(object_id, rows deleted)` per object) until it deletes fewer, marking the objects that
/// lost their last row after each. Returns the rows deleted.
async fn delete_all(
    db: &Db,
    delete: &str,
    params: &[&(dyn tokio_postgres::types::ToSql + Sync)],
) -> Result<u64, CleanerError> {
    let mut deleted = 0u64;
    loop {
        let rows = db.client().await?.query(delete, params).await?;
        let n: i64 = rows.iter().map(|r| r.get::<_, i64>(1)).sum();
        let objects: Vec<i64> = rows.iter().map(|r| r.get(0)).collect();
        mark_unreferenced(db, &objects).await?;
        deleted += n as u64;
        if n < ROWS_PER_DELETE {
            return Ok(deleted);
        }
    }
}

/// Marks those of `objects` that no index row refers to any more.
async fn mark_unreferenced(db: &Db, objects: &[i64]) -> Result<(), DbError> {
    if objects.is_empty() {
        return Ok(());
    }
    let client = db.client().await?;
    client
        .execute(
            "UPDATE objects o SET unreferenced_at = now() \
             WHERE o.object_id = ANY($1) AND o.unreferenced_at IS NULL \
               AND NOT EXISTS (SELECT 1 FROM batches b WHERE b.object_id = o.object_id)",
            &[&objects],
        )
        .await?;
    Ok(())
}

/// Deletes the index rows of deleted topics, then their topic rows (their partitions and
/// producers rows went with the delete). Returns the topics purged and the rows deleted.
async fn purge_deleted_topics(db: &Db) -> Result<(u64, u64), CleanerError> {
    let topics: Vec<Uuid> = db
        .client()
        .await?
        .query(
            "SELECT topic_id FROM topics WHERE deleted_at IS NOT NULL ORDER BY deleted_at LIMIT $1",
            &[&TOPICS_PER_ROUND],
        )
        .await?
        .iter()
        .map(|r| r.get(0))
        .collect();
    let (mut purged, mut deleted) = (0u64, 0u64);
    for topic in topics {
        deleted += delete_all(
            db,
            "WITH gone AS ( \
               DELETE FROM batches WHERE (topic_id, partition, last_offset) IN ( \
                 SELECT topic_id, partition, last_offset FROM batches \
                 WHERE topic_id = $1 LIMIT $2) \
               RETURNING object_id) \
             SELECT object_id, count(*) FROM gone GROUP BY object_id",
            &[&topic, &ROWS_PER_DELETE],
        )
        .await?;
        let client = db.client().await?;
        purged += client
            .execute(
                "DELETE FROM topics WHERE topic_id = $1 AND deleted_at IS NOT NULL \
                   AND NOT EXISTS (SELECT 1 FROM batches WHERE topic_id = $1)",
                &[&topic],
            )
            .await?;
    }
    Ok((purged, deleted))
}

/// Deletes objects marked unreferenced longer than `grace` ago: from the bucket, then their
/// rows. Returns how many.
async fn sweep_objects(db: &Db, bucket: &Bucket, grace: Duration) -> Result<u64, CleanerError> {
    let grace_s = grace.as_secs_f64();
    let due: Vec<(i64, String)> = db
        .client()
        .await?
        .query(
            "SELECT object_id, key FROM objects \
             WHERE unreferenced_at IS NOT NULL \
               AND unreferenced_at <= now() - make_interval(secs => $1) \
             ORDER BY object_id LIMIT $2",
            &[&grace_s, &OBJECTS_PER_ROUND],
        )
        .await?
        .iter()
        .map(|r| (r.get(0), r.get(1)))
        .collect();
    let mut done = Vec::with_capacity(due.len());
    let mut first_error = None;
    for (id, key) in due {
        let path = bucket.key(&key);
        match bucket.store().delete(&path).await {
            Ok(()) | Err(object_store::Error::NotFound { .. }) => done.push(id),
            Err(source) => {
                // Keep going: one stuck object must not stop the others; it is retried
                // next round.
                first_error.get_or_insert(CleanerError::Delete {
                    key: path.to_string(),
                    source,
                });
            }
        }
    }
    if !done.is_empty() {
        db.client()
            .await?
            .execute(
                "DELETE FROM objects WHERE object_id = ANY($1) AND unreferenced_at IS NOT NULL",
                &[&done],
            )
            .await?;
    }
    match first_error {
        Some(e) if done.is_empty() => Err(e),
        Some(e) => {
            tracing::warn!(error = %e, "cleaner: an object DELETE failed; retried next round");
            Ok(done.len() as u64)
        }
        None => Ok(done.len() as u64),
    }
}

/// Logs a round that did something, at info; a failed round at warn.
pub fn log_round(result: &Result<RoundStats, CleanerError>) {
    match result {
        Ok(s) if s.did_something() => tracing::info!(
            partitions_trimmed = s.partitions_trimmed,
            rows_deleted = s.rows_deleted,
            topics_purged = s.topics_purged,
            objects_deleted = s.objects_deleted,
            "cleaner: retention and cleanup round"
        ),
        Ok(_) => {}
        Err(e) => tracing::warn!(error = %e, "cleaner: round stopped; the next one starts over"),
    }
}
