//! [`commit_object`]: the one PostgreSQL transaction that turns an object a broker has PUT into
//! committed batches of their partitions' logs.
//!
//! Where it sits: a broker collects produce batches of many partitions into one object and PUTs
//! it under its own key. Then it calls [`commit_object`] with where each batch lies in the
//! object ([`CommitRequest`]); the answer says, batch by batch, what became of it
//! ([`BatchOutcome`]). Only then are the produce requests answered.
//!
//! **Durability contract.** When [`commit_object`] returns `Ok`, the transaction has
//! committed (PostgreSQL's commit, durable as the server is configured: `fsync` and
//! `synchronous_commit` on in production): every [`BatchOutcome::Appended`] batch has its
//! offsets, is listed in `sluice.batches` and may be acknowledged; readers on every broker see
//! it. When it returns [`CommitError::Db`] the outcome is unknown (the answer to `COMMIT` may
//! have been lost): the caller retries the *same* request, and because a commit is idempotent
//! by object key, the retry returns the first commit's outcomes if that one went through.
//!
//! ## The transaction, round trip by round trip
//!
//! Every statement is prepared once per connection (the pool's statement cache), then one
//! commit is two round trips, each a pipelined batch of statements:
//!
//! 1. `BEGIN`; the broker's registry row, `FOR SHARE` (absent, stopped or expired: the broker
//!    is fenced); `INSERT INTO objects ... ON CONFLICT (key) DO NOTHING` (the claim: a second
//!    commit of the same key waits here for the first, then finds the key taken); the
//!    partitions' rows `FOR UPDATE`, sorted by (topic_id, partition) so that two commits lock
//!    in the same order and never deadlock; the producers' rows of the idempotent batches.
//! 2. One statement that inserts the index rows, upserts the producers' state and advances the
//!    partitions (each from `unnest` of arrays, so one statement for any number of rows) and
//!    stores the outcomes in the objects row; `COMMIT`; then, in the same pipelined batch, one
//!    `NOTIFY` ([`COMMIT_CHANNEL`]) in a transaction of its own (see below).
//!
//! Between the two, this process decides every batch (`apply`, a pure function): offsets from
//! `next_offset`, the idempotent-producer table of `sluice-broker`'s `producers.rs`, and
//! coalescing of a partition's consecutive accepted batches into one index row.
//!
//! Why the producers' rows need no row lock: a `producers` row of (topic, partition) is only
//! ever written by a transaction that holds that partition's row lock, and it is read (step 1)
//! by a statement that starts after this transaction got that lock, so in `READ COMMITTED` it
//! sees every earlier writer's commit.
//!
//! Why the `NOTIFY` is not inside the commit's transaction: PostgreSQL serialises every transaction
//! that notifies on one database-wide lock, held from just before its commit record until after
//! that record is flushed. Inside the commit, that made all commits of the cluster wait for each
//! other's WAL flush, one at a time, whatever partitions they touched: measured with 16 committers
//! of one-batch objects over 100 partitions on a durable server (three alternating runs on a busy
//! 2-core machine), 480 to 670 commits/s with p50 20 to 31 ms, against 1,700 to 2,000 commits/s
//! with p50 7 to 9 ms with the `NOTIFY` outside (`examples/commit_rate.rs`). So it goes in a
//! second, tiny transaction right after `COMMIT`, in the same round trip, with `synchronous_commit`
//! off (it changes no data, so it need not wait for a flush and holds that lock for microseconds),
//! and only if the commit is visible (it selects the new objects row). What that gives up, and why
//! it is acceptable: a broker that dies between the two loses that one wake-up, and notifications
//! of one partition from two brokers may arrive out of order. Neither loses data: listeners treat
//! an event as "look again" and poll anyway ([`crate::index::CommitListener`]).
//!
//! Why the broker's row is locked `FOR SHARE`: whatever declares a broker dead by updating its row
//! (setting `stopped_at`, moving `expires_at`) waits for that broker's commits in flight, and once
//! that update has committed no commit of the broker gets past the check. So "its row says dead" is
//! a clean point after which nothing more of that broker appears, which is what a collector of a
//! dead broker's uncommitted objects needs. (A lease that merely runs out without an update gives
//! no such point: a commit that began just before `expires_at` may end just after it.)

use std::collections::{BTreeMap, HashMap};
use std::time::Duration;

use tokio_postgres::error::SqlState;
use uuid::Uuid;

use crate::db::{Client, Db, DbError};

mod decide;
mod outcomes;

use decide::{Applied, PartitionState, ProducerState, apply};
use outcomes::{decode_outcomes, encode_outcomes};

/// The channel every commit notifies (see [`crate::index::CommitListener`]).
pub const COMMIT_CHANNEL: &str = "sluice_commits";

/// Batches remembered per producer and partition, as `sluice-broker`'s `RECENT_BATCHES`:
/// Kafka clients keep at most 5 requests in flight per connection with idempotence, so a retry
/// is always one of the last 5.
pub const RECENT_BATCHES: usize = 5;

/// Batches one commit takes at most. A 16 MiB object of the smallest useful batches (about
/// 70 bytes) holds some 240,000; a broker's default 4 MiB objects hold far fewer. The bound
/// keeps one transaction's arrays, locks and stored outcomes (13 to 25 bytes a batch) to a
/// few MiB.
pub const BATCHES_PER_COMMIT_MAX: usize = 250_000;

/// Longest `NOTIFY` payload sent: PostgreSQL refuses 8000 bytes and more. A commit that advanced
/// more partitions than fit (110 to 190, by the offsets' lengths) sends [`NOTIFY_EVERYTHING`]
/// instead.
pub const NOTIFY_PAYLOAD_MAX_BYTES: usize = 7999;

/// The payload that means "any partition may have moved: look again at all of them".
pub const NOTIFY_EVERYTHING: &str = "*";

/// Attempts of one commit when PostgreSQL answers with a serialization failure or a deadlock
/// (SQLSTATE 40001, 40P01): the transaction was rolled back as a whole and trying again is
/// safe. Commits lock in one order, so between themselves they do not deadlock; other writers
/// of `partitions` might. Four attempts, 5 to 40 ms apart, ride out a burst of those.
pub const COMMIT_ATTEMPTS_MAX: u32 = 4;

/// The first wait before another attempt; it doubles each time.
const RETRY_BACKOFF_FIRST: Duration = Duration::from_millis(5);

/// What a broker asks to commit: one object and the batches in it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CommitRequest {
    /// The object's key in the bucket; a commit is idempotent by it.
    pub key: String,
    /// The committing broker's registry id and the random instance of its process.
    pub broker_id: i32,
    pub instance: Uuid,
    /// The object's size.
    pub size_bytes: u64,
    /// In object order. One partition's batches are in order and contiguous in bytes.
    pub batches: Vec<CommitBatch>,
}

/// One produce batch inside the object.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CommitBatch {
    pub topic_id: Uuid,
    pub partition: i32,
    /// Where the batch's bytes are in the object.
    pub byte_start: u64,
    pub byte_len: u32,
    /// Offsets the batch takes: its last offset delta + 1 (at least 1).
    pub records: i32,
    /// The batch's max timestamp (ms), for lookups by time.
    pub max_timestamp: i64,
    /// Set for a batch of an idempotent producer.
    pub producer: Option<ProducerSeq>,
}

/// An idempotent batch's producer and sequence range.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ProducerSeq {
    pub producer_id: i64,
    pub epoch: i16,
    pub first_seq: i32,
    pub last_seq: i32,
}

/// What became of one batch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BatchOutcome {
    /// Committed at these offsets; `log_start` is the partition's log start offset then.
    Appended {
        base_offset: i64,
        last_offset: i64,
        log_start: i64,
    },
    /// A retry of a batch already committed (through any broker): its original offsets;
    /// nothing was added. Answered as a success.
    Duplicate { base_offset: i64, last_offset: i64 },
    /// OUT_OF_ORDER_SEQUENCE_NUMBER: the producer's next batch must start at `expected`.
    OutOfOrderSequence { expected: i32, first_seq: i32 },
    /// UNKNOWN_PRODUCER_ID: no state for the producer and the batch does not start at 0.
    UnknownProducer { first_seq: i32 },
    /// INVALID_PRODUCER_EPOCH: the producer was fenced by a newer epoch.
    InvalidProducerEpoch { epoch: i16, current: i16 },
    /// OUT_OF_ORDER_SEQUENCE_NUMBER: a new epoch must start at sequence 0.
    NewEpochNotAtZero { epoch: i16, first_seq: i32 },
    /// UNKNOWN_TOPIC_OR_PARTITION: the partition has no row (never created, or deleted).
    UnknownTopicOrPartition,
}

impl BatchOutcome {
    /// Whether the batch is in the log (appended now or before).
    pub fn is_committed(&self) -> bool {
        matches!(
            self,
            BatchOutcome::Appended { .. } | BatchOutcome::Duplicate { .. }
        )
    }
}

/// Why a commit did not happen.
#[derive(Debug, thiserror::Error)]
pub enum CommitError {
    /// The broker's registry row is gone, stopped, expired or another instance's: it was
    /// declared dead and must not commit. Nothing changed. Not retriable by this process.
    #[error(
        "broker {broker_id} (instance {instance}) is fenced: its registry row is absent, stopped \
         or expired, so it must not commit"
    )]
    Fenced { broker_id: i32, instance: Uuid },
    /// The request itself is wrong (a caller's bug). Nothing changed.
    #[error("commit of object {key} refused: {reason}")]
    Invalid { key: String, reason: String },
    #[error("commit of object {key}: {batches} batches, more than the {max} one commit takes")]
    TooLarge {
        key: String,
        batches: usize,
        max: usize,
    },
    /// The key was committed before for a request with another number of batches: keys must
    /// never be reused. Nothing changed.
    #[error(
        "object key {key} was committed before with {stored} batches, this request has \
         {requested}: object keys must never be reused"
    )]
    KeyReused {
        key: String,
        stored: usize,
        requested: usize,
    },
    /// What the database holds cannot be read back (a bug or a hand-edited row).
    #[error("metadata database: unreadable {what}: {detail}")]
    Corrupt { what: &'static str, detail: String },
    /// The database failed or could not be reached; the commit may or may not have happened.
    /// Retry the same request.
    #[error(transparent)]
    Db(#[from] DbError),
}

impl CommitError {
    /// Whether retrying the same request may succeed.
    pub fn is_retriable(&self) -> bool {
        matches!(self, CommitError::Db(_))
    }
}

impl From<tokio_postgres::Error> for CommitError {
    fn from(e: tokio_postgres::Error) -> Self {
        CommitError::Db(DbError::Query(e))
    }
}

/// Commits the object described by `req`: one transaction that checks the broker's lease,
/// assigns offsets, checks idempotent producers' sequences and records every accepted batch.
/// Returns one outcome per batch, in request order.
///
/// Durability: see the module documentation. `Ok` means committed; [`CommitError::Db`] means
/// unknown (retry the same request); every other error means nothing changed.
pub async fn commit_object(db: &Db, req: &CommitRequest) -> Result<Vec<BatchOutcome>, CommitError> {
    validate(req)?;
    let keys = Keys::of(req);
    let mut attempt = 1;
    loop {
        match attempt_commit(db, req, &keys).await {
            Err(CommitError::Db(e)) if is_conflict(&e) && attempt < COMMIT_ATTEMPTS_MAX => {
                tracing::debug!(
                    key = %req.key,
                    attempt,
                    error = %e,
                    "commit conflict, trying again"
                );
                tokio::time::sleep(RETRY_BACKOFF_FIRST * 2u32.pow(attempt - 1)).await;
                attempt += 1;
            }
            other => return other,
        }
    }
}

/// Serialization failure or deadlock: the transaction was rolled back, trying again is safe.
fn is_conflict(e: &DbError) -> bool {
    e.sql_state().is_some_and(|s| {
        *s == SqlState::T_R_SERIALIZATION_FAILURE || *s == SqlState::T_R_DEADLOCK_DETECTED
    })
}

fn validate(req: &CommitRequest) -> Result<(), CommitError> {
    let invalid = |reason: String| CommitError::Invalid {
        key: req.key.clone(),
        reason,
    };
    if req.batches.len() > BATCHES_PER_COMMIT_MAX {
        return Err(CommitError::TooLarge {
            key: req.key.clone(),
            batches: req.batches.len(),
            max: BATCHES_PER_COMMIT_MAX,
        });
    }
    if req.key.is_empty() {
        return Err(invalid("the object key is empty".into()));
    }
    if i64::try_from(req.size_bytes).is_err() {
        return Err(invalid(format!("size {} bytes", req.size_bytes)));
    }
    for (i, b) in req.batches.iter().enumerate() {
        if b.records < 1 {
            return Err(invalid(format!("batch {i} takes {} offsets", b.records)));
        }
        if b.byte_len == 0 || b.byte_start + u64::from(b.byte_len) > req.size_bytes {
            return Err(invalid(format!(
                "batch {i} at bytes {}+{} lies outside the object's {} bytes",
                b.byte_start, b.byte_len, req.size_bytes
            )));
        }
        if let Some(p) = b.producer
            && (p.producer_id < 0 || p.epoch < 0 || p.first_seq < 0 || p.last_seq < 0)
        {
            return Err(invalid(format!(
                "batch {i} has producer {} epoch {} sequences {}..{}",
                p.producer_id, p.epoch, p.first_seq, p.last_seq
            )));
        }
    }
    Ok(())
}

type PartitionKey = (Uuid, i32);
type Param<'a> = &'a (dyn tokio_postgres::types::ToSql + Sync);
type ProducerKey = (Uuid, i32, i64);

/// The rows one commit reads, as the arrays its statements take.
#[derive(Debug)]
struct Keys {
    /// Distinct partitions, sorted.
    topics: Vec<Uuid>,
    partitions: Vec<i32>,
    /// Distinct (partition, producer) of the idempotent batches.
    producer_topics: Vec<Uuid>,
    producer_partitions: Vec<i32>,
    producer_ids: Vec<i64>,
}

impl Keys {
    fn of(req: &CommitRequest) -> Keys {
        let mut partitions: Vec<PartitionKey> = req
            .batches
            .iter()
            .map(|b| (b.topic_id, b.partition))
            .collect();
        partitions.sort_unstable();
        partitions.dedup();
        let mut producers: Vec<ProducerKey> = req
            .batches
            .iter()
            .filter_map(|b| b.producer.map(|p| (b.topic_id, b.partition, p.producer_id)))
            .collect();
        producers.sort_unstable();
        producers.dedup();
        Keys {
            topics: partitions.iter().map(|k| k.0).collect(),
            partitions: partitions.iter().map(|k| k.1).collect(),
            producer_topics: producers.iter().map(|k| k.0).collect(),
            producer_partitions: producers.iter().map(|k| k.1).collect(),
            producer_ids: producers.iter().map(|k| k.2).collect(),
        }
    }
}

// Step 1. The broker's lease; locking its row is explained in the module documentation.
const SQL_BROKER: &str = "SELECT 1 FROM brokers \
     WHERE broker_id = $1 AND instance = $2 AND stopped_at IS NULL AND expires_at > now() \
     FOR SHARE";

// Step 1. The claim of the key; outcomes are filled in by step 2.
const SQL_CLAIM: &str = "INSERT INTO objects (key, broker_id, size_bytes, outcomes) \
     VALUES ($1, $2, $3, '\\x'::bytea) ON CONFLICT (key) DO NOTHING RETURNING object_id";

// Step 1. Rows are locked in the order of the sort (the lock is taken above the sort).
const SQL_LOCK_PARTITIONS: &str = "SELECT p.topic_id, p.partition, p.next_offset, p.log_start \
     FROM partitions p \
     JOIN unnest($1::uuid[], $2::int4[]) AS k(topic_id, partition) \
       ON p.topic_id = k.topic_id AND p.partition = k.partition \
     ORDER BY p.topic_id, p.partition \
     FOR UPDATE OF p";

// Step 1, after the partitions' locks (see the module documentation).
const SQL_PRODUCERS: &str = "SELECT s.topic_id, s.partition, s.producer_id, s.epoch, s.recent \
     FROM producers s \
     JOIN unnest($1::uuid[], $2::int4[], $3::int8[]) AS k(topic_id, partition, producer_id) \
       ON s.topic_id = k.topic_id AND s.partition = k.partition \
      AND s.producer_id = k.producer_id";

// A retry of a committed key.
const SQL_STORED: &str = "SELECT outcomes FROM objects WHERE key = $1";

// Step 2. The producers' `recent` arrays travel as one flat array and a 1-based inclusive
// range per row (unnest would flatten an array of arrays).
const SQL_FINISH: &str = "WITH new_rows AS ( \
       INSERT INTO batches (topic_id, partition, base_offset, last_offset, object_id, \
                            byte_start, byte_len, batch_count, max_timestamp) \
       SELECT r.topic_id, r.partition, r.base_offset, r.last_offset, $1::int8, \
              r.byte_start, r.byte_len, r.batch_count, r.max_timestamp \
       FROM unnest($2::uuid[], $3::int4[], $4::int8[], $5::int8[], $6::int8[], $7::int4[], \
                   $8::int4[], $9::int8[]) \
            AS r(topic_id, partition, base_offset, last_offset, byte_start, byte_len, \
                 batch_count, max_timestamp) \
     ), producer_rows AS ( \
       INSERT INTO producers (topic_id, partition, producer_id, epoch, recent) \
       SELECT s.topic_id, s.partition, s.producer_id, s.epoch, \
              ($15::int8[])[s.recent_from:s.recent_to] \
       FROM unnest($10::uuid[], $11::int4[], $12::int8[], $13::int2[], $14::int4[], \
                   $16::int4[]) \
            AS s(topic_id, partition, producer_id, epoch, recent_from, recent_to) \
       ON CONFLICT (topic_id, partition, producer_id) \
       DO UPDATE SET epoch = excluded.epoch, recent = excluded.recent, updated_at = now() \
     ), advanced AS ( \
       UPDATE partitions p SET next_offset = a.next_offset \
       FROM unnest($17::uuid[], $18::int4[], $19::int8[]) AS a(topic_id, partition, next_offset) \
       WHERE p.topic_id = a.topic_id AND p.partition = a.partition \
     ) \
     UPDATE objects SET outcomes = $20::bytea WHERE object_id = $1::int8";

// After step 2's COMMIT, in a transaction of its own (see the module documentation). Nothing
// is sent unless the commit's objects row is there, that is, unless the commit went through.
const SQL_NOTIFY: &str = "SELECT set_config('synchronous_commit', 'off', true), \
            pg_notify('sluice_commits', $2::text) \
     FROM objects WHERE object_id = $1::int8";

/// The prepared statements of one connection.
struct Statements {
    broker: tokio_postgres::Statement,
    claim: tokio_postgres::Statement,
    lock: tokio_postgres::Statement,
    producers: tokio_postgres::Statement,
    stored: tokio_postgres::Statement,
    finish: tokio_postgres::Statement,
    notify: tokio_postgres::Statement,
}

impl Statements {
    /// From the connection's cache; the first use on a connection prepares all seven in one
    /// round trip.
    async fn prepare(client: &Client) -> Result<Statements, tokio_postgres::Error> {
        let (broker, claim, lock, producers, stored, finish, notify) = tokio::try_join!(
            client.prepare_cached(SQL_BROKER),
            client.prepare_cached(SQL_CLAIM),
            client.prepare_cached(SQL_LOCK_PARTITIONS),
            client.prepare_cached(SQL_PRODUCERS),
            client.prepare_cached(SQL_STORED),
            client.prepare_cached(SQL_FINISH),
            client.prepare_cached(SQL_NOTIFY),
        )?;
        Ok(Statements {
            broker,
            claim,
            lock,
            producers,
            stored,
            finish,
            notify,
        })
    }
}

/// A pooled connection that goes back to the pool only when the code says it is outside any
/// transaction. Dropped otherwise (an error mid-way, or the caller dropped the commit's
/// future), it is taken out of the pool and closed, which makes PostgreSQL roll back whatever
/// it had open: a connection in the middle of a transaction must never be handed to the next
/// user.
struct Checked(Option<Client>);

impl Checked {
    fn client(&self) -> &Client {
        self.0.as_ref().expect("connection present until released")
    }

    /// Back to the pool.
    fn release(mut self) {
        drop(self.0.take());
    }
}

impl Drop for Checked {
    fn drop(&mut self) {
        if let Some(client) = self.0.take() {
            drop(deadpool_postgres::Object::take(client));
        }
    }
}

/// Whether the connection is outside any transaction after a step.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Connection {
    Clean,
    Broken,
}

async fn attempt_commit(
    db: &Db,
    req: &CommitRequest,
    keys: &Keys,
) -> Result<Vec<BatchOutcome>, CommitError> {
    let client = db.client().await?;
    let statements = Statements::prepare(&client).await?;
    let checked = Checked(Some(client));
    let (result, connection) = transaction(checked.client(), &statements, req, keys).await;
    if connection == Connection::Clean {
        checked.release();
    }
    result
}

/// Sends `ROLLBACK`; whether the connection is usable afterwards.
async fn rollback(client: &Client) -> Connection {
    match client.batch_execute("ROLLBACK").await {
        Ok(()) => Connection::Clean,
        Err(_) => Connection::Broken,
    }
}

async fn transaction(
    client: &Client,
    st: &Statements,
    req: &CommitRequest,
    keys: &Keys,
) -> (Result<Vec<BatchOutcome>, CommitError>, Connection) {
    let size_bytes = req.size_bytes as i64;
    let broker_params: [Param<'_>; 2] = [&req.broker_id, &req.instance];
    let claim_params: [Param<'_>; 3] = [&req.key, &req.broker_id, &size_bytes];
    let lock_params: [Param<'_>; 2] = [&keys.topics, &keys.partitions];
    let producer_params: [Param<'_>; 3] = [
        &keys.producer_topics,
        &keys.producer_partitions,
        &keys.producer_ids,
    ];
    // Step 1, pipelined. `biased` polls the futures in this order at the first poll, and each
    // sends its statement at its first poll, so they reach the server in this order.
    let (begin, broker, claim, locked, producers) = tokio::join!(
        biased;
        client.batch_execute("BEGIN"),
        client.query(&st.broker, &broker_params),
        client.query_opt(&st.claim, &claim_params),
        client.query(&st.lock, &lock_params),
        async {
            if keys.producer_ids.is_empty() {
                return Ok(Vec::new());
            }
            client.query(&st.producers, &producer_params).await
        },
    );
    // The first error is the cause; the ones after it say "transaction aborted".
    let step1 = begin.and_then(|()| {
        let broker = broker?;
        let claim = claim?;
        Ok((broker, claim, locked?, producers?))
    });
    let (broker, claim, locked, producers) = match step1 {
        Ok(v) => v,
        Err(e) => return (Err(e.into()), rollback(client).await),
    };

    // A key committed before: its outcomes, whatever the broker's lease says now (answering
    // changes nothing).
    let Some(claim) = claim else {
        let stored_params: [Param<'_>; 1] = [&req.key];
        let (stored, rolled_back) = tokio::join!(
            biased;
            client.query_opt(&st.stored, &stored_params),
            client.batch_execute("ROLLBACK"),
        );
        let connection = match rolled_back {
            Ok(()) => Connection::Clean,
            Err(_) => Connection::Broken,
        };
        return (stored_outcomes(req, stored), connection);
    };
    if broker.is_empty() {
        tracing::warn!(
            broker_id = req.broker_id,
            instance = %req.instance,
            key = %req.key,
            "commit refused: this broker's registry row is absent, stopped or expired"
        );
        let err = CommitError::Fenced {
            broker_id: req.broker_id,
            instance: req.instance,
        };
        return (Err(err), rollback(client).await);
    }
    let object_id: i64 = claim.get(0);

    let read = read_state(&locked, &producers);
    let applied = read.and_then(|(partitions, producers)| {
        apply(req, &partitions, producers).map_err(|reason| CommitError::Invalid {
            key: req.key.clone(),
            reason,
        })
    });
    let applied = match applied {
        Ok(a) => a,
        Err(e) => return (Err(e), rollback(client).await),
    };

    // Step 2, pipelined: the writes, COMMIT, then the notification's own transaction.
    let finish = FinishParams::new(object_id, &applied);
    let finish_params = finish.params();
    let notify_params: [Param<'_>; 2] = [&object_id, &finish.payload];
    let (finished, committed, notified) = tokio::join!(
        biased;
        client.query(&st.finish, &finish_params),
        client.batch_execute("COMMIT"),
        async {
            if finish.payload.is_empty() {
                return Ok(());
            }
            let (begin, notify, commit) = tokio::join!(
                biased;
                client.batch_execute("BEGIN"),
                client.query(&st.notify, &notify_params),
                client.batch_execute("COMMIT"),
            );
            begin.and(notify).and(commit)
        },
    );
    let connection = match notified {
        Ok(()) => Connection::Clean,
        Err(e) => {
            // The commit's outcome does not depend on it; listeners poll as well.
            tracing::warn!(key = %req.key, error = %e, "commit notification not sent");
            Connection::Broken
        }
    };
    match (finished, committed) {
        (Ok(_), Ok(())) => (Ok(applied.outcomes), connection),
        // The statement failed, so the server answered COMMIT with a rollback.
        (Err(e), Ok(())) => (Err(e.into()), connection),
        (Err(e), Err(_)) | (Ok(_), Err(e)) => (Err(e.into()), Connection::Broken),
    }
}

fn stored_outcomes(
    req: &CommitRequest,
    stored: Result<Option<tokio_postgres::Row>, tokio_postgres::Error>,
) -> Result<Vec<BatchOutcome>, CommitError> {
    let Some(row) = stored? else {
        return Err(CommitError::Corrupt {
            what: "objects row",
            detail: format!("key {} was taken but its row is gone", req.key),
        });
    };
    let bytes: &[u8] = row.get(0);
    let outcomes = decode_outcomes(bytes).map_err(|detail| CommitError::Corrupt {
        what: "stored commit outcomes",
        detail: format!("object {}: {detail}", req.key),
    })?;
    if outcomes.len() != req.batches.len() {
        return Err(CommitError::KeyReused {
            key: req.key.clone(),
            stored: outcomes.len(),
            requested: req.batches.len(),
        });
    }
    tracing::debug!(key = %req.key, "commit retried: answering the stored outcomes");
    Ok(outcomes)
}

type PartitionsRead = HashMap<PartitionKey, PartitionState>;
type ProducersRead = HashMap<ProducerKey, ProducerState>;

fn read_state(
    locked: &[tokio_postgres::Row],
    producers: &[tokio_postgres::Row],
) -> Result<(PartitionsRead, ProducersRead), CommitError> {
    let partitions = locked
        .iter()
        .map(|r| {
            let state = PartitionState {
                next_offset: r.get(2),
                log_start: r.get(3),
            };
            ((r.get(0), r.get(1)), state)
        })
        .collect();
    let mut states = HashMap::with_capacity(producers.len());
    for r in producers {
        let key: ProducerKey = (r.get(0), r.get(1), r.get(2));
        let recent: Vec<i64> = r.get(4);
        let state =
            ProducerState::from_row(r.get(3), &recent).map_err(|detail| CommitError::Corrupt {
                what: "producers row",
                detail: format!("producer {} of {}/{}: {detail}", key.2, key.0, key.1),
            })?;
        states.insert(key, state);
    }
    Ok((partitions, states))
}

/// Step 2's arguments, as arrays.
#[derive(Debug, Default)]
struct FinishParams {
    object_id: i64,
    row_topics: Vec<Uuid>,
    row_partitions: Vec<i32>,
    row_bases: Vec<i64>,
    row_lasts: Vec<i64>,
    row_byte_starts: Vec<i64>,
    row_byte_lens: Vec<i32>,
    row_batch_counts: Vec<i32>,
    row_max_timestamps: Vec<i64>,
    producer_topics: Vec<Uuid>,
    producer_partitions: Vec<i32>,
    producer_ids: Vec<i64>,
    producer_epochs: Vec<i16>,
    recent_from: Vec<i32>,
    recent: Vec<i64>,
    recent_to: Vec<i32>,
    advanced_topics: Vec<Uuid>,
    advanced_partitions: Vec<i32>,
    advanced_next: Vec<i64>,
    outcomes: Vec<u8>,
    payload: String,
}

impl FinishParams {
    fn new(object_id: i64, applied: &Applied) -> FinishParams {
        let mut p = FinishParams {
            object_id,
            ..FinishParams::default()
        };
        for r in &applied.rows {
            p.row_topics.push(r.topic_id);
            p.row_partitions.push(r.partition);
            p.row_bases.push(r.base_offset);
            p.row_lasts.push(r.last_offset);
            p.row_byte_starts.push(r.byte_start);
            p.row_byte_lens.push(r.byte_len);
            p.row_batch_counts.push(r.batch_count);
            p.row_max_timestamps.push(r.max_timestamp);
        }
        for (&(topic_id, partition, producer_id), state) in &applied.producers {
            p.producer_topics.push(topic_id);
            p.producer_partitions.push(partition);
            p.producer_ids.push(producer_id);
            p.producer_epochs.push(state.epoch);
            p.recent_from.push(p.recent.len() as i32 + 1);
            state.write_recent(&mut p.recent);
            p.recent_to.push(p.recent.len() as i32);
        }
        for (&(topic_id, partition), &next) in &applied.advanced {
            p.advanced_topics.push(topic_id);
            p.advanced_partitions.push(partition);
            p.advanced_next.push(next);
        }
        p.outcomes = encode_outcomes(&applied.outcomes);
        p.payload = notify_payload(&applied.advanced);
        p
    }

    fn params(&self) -> [Param<'_>; 20] {
        [
            &self.object_id,
            &self.row_topics,
            &self.row_partitions,
            &self.row_bases,
            &self.row_lasts,
            &self.row_byte_starts,
            &self.row_byte_lens,
            &self.row_batch_counts,
            &self.row_max_timestamps,
            &self.producer_topics,
            &self.producer_partitions,
            &self.producer_ids,
            &self.producer_epochs,
            &self.recent_from,
            &self.recent,
            &self.recent_to,
            &self.advanced_topics,
            &self.advanced_partitions,
            &self.advanced_next,
            &self.outcomes,
        ]
    }
}

/// The `NOTIFY` payload: one line `TOPIC_ID PARTITION NEXT_OFFSET` per partition that moved,
/// or [`NOTIFY_EVERYTHING`] if those lines would not fit; empty (no notification) if none
/// moved.
pub fn notify_payload(advanced: &BTreeMap<(Uuid, i32), i64>) -> String {
    let mut payload = String::new();
    for ((topic_id, partition), next_offset) in advanced {
        if !payload.is_empty() {
            payload.push('\n');
        }
        payload.push_str(&format!("{topic_id} {partition} {next_offset}"));
        if payload.len() > NOTIFY_PAYLOAD_MAX_BYTES {
            return NOTIFY_EVERYTHING.to_string();
        }
    }
    payload
}

#[cfg(test)]
mod tests;
