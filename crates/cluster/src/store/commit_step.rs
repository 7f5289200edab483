//! The flusher's commit step in cluster mode: after an object's PUT, one PostgreSQL
//! transaction ([`crate::commit::commit_object`]) gives its batches their offsets; the answer
//! becomes the object's [`Receipt`], which each append reads its batches' outcomes from.

use std::collections::HashMap;
use std::fmt::Write;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

use futures_util::FutureExt;
use futures_util::future::BoxFuture;
use sluice_log::batch::BatchView;
use sluice_objstore::flush::{
    CommitFailure, CommittedObject, FlushError, ObjectCommitter, Receipt,
};
use sluice_objstore::format::TopicId;
use uuid::Uuid;

use crate::Db;
use sluice_broker::producers::last_seq;

use crate::commit::{BatchOutcome, CommitBatch, CommitError, CommitRequest, ProducerSeq};

/// What one object's commit answered, by partition: each batch's provisional base offset (the
/// one this broker gave it) and its outcome, in object order.
#[derive(Debug, Default)]
pub struct CommitReceipt {
    pub partitions: HashMap<(TopicId, i32), Vec<ReceiptBatch>>,
}

/// One batch of a committed object: its provisional base offset, what the commit answered,
/// and where its bytes are in the object.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReceiptBatch {
    pub provisional_base: i64,
    pub outcome: BatchOutcome,
    pub byte_start: u64,
    pub byte_len: u32,
    pub max_timestamp: i64,
}

impl CommitReceipt {
    /// The outcomes of `partition`'s batches whose provisional base offsets lie in
    /// `first..=last`, in order.
    pub fn outcomes(
        &self,
        topic: TopicId,
        partition: i32,
        first: i64,
        last: i64,
    ) -> impl Iterator<Item = &BatchOutcome> {
        self.partitions
            .get(&(topic, partition))
            .into_iter()
            .flatten()
            .filter(move |b| (first..=last).contains(&b.provisional_base))
            .map(|b| &b.outcome)
    }
}

/// Told of every committed object (after the transaction, before any ack), so the broker's
/// own partitions move their high watermarks without waiting for the notification.
pub trait Committed: Send + Sync + 'static {
    fn committed(&self, object: &CommittedObject, receipt: &CommitReceipt);
}

/// Upper bounds (ms) of the commit-duration histogram's buckets: a healthy commit takes a
/// few ms; the upper buckets show a PostgreSQL that is slow or waiting on locks.
pub const COMMIT_BUCKETS_MS: [u64; 12] = [1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000];

/// What this broker's commits did, for `/metrics`.
#[derive(Debug, Default)]
pub struct CommitCounters {
    commits: AtomicU64,
    failures: AtomicU64,
    batches: AtomicU64,
    refused: AtomicU64,
    /// Commits per bucket of [`COMMIT_BUCKETS_MS`] (not cumulative), the last for longer.
    buckets: [AtomicU64; COMMIT_BUCKETS_MS.len() + 1],
    sum_us: AtomicU64,
}

impl CommitCounters {
    fn record(&self, took: std::time::Duration, outcomes: &[BatchOutcome]) {
        self.commits.fetch_add(1, Ordering::Relaxed);
        let ms = took.as_millis() as u64;
        let bucket = COMMIT_BUCKETS_MS
            .iter()
            .position(|&b| ms < b)
            .unwrap_or(COMMIT_BUCKETS_MS.len());
        self.buckets[bucket].fetch_add(1, Ordering::Relaxed);
        self.sum_us
            .fetch_add(took.as_micros() as u64, Ordering::Relaxed);
        let refused = outcomes.iter().filter(|o| !o.is_committed()).count() as u64;
        self.batches
            .fetch_add(outcomes.len() as u64 - refused, Ordering::Relaxed);
        self.refused.fetch_add(refused, Ordering::Relaxed);
    }

    /// The series, as Prometheus text.
    pub fn render(&self, out: &mut String) {
        let get = |a: &AtomicU64| a.load(Ordering::Relaxed);
        let single = |out: &mut String, name: &str, help: &str, value: u64| {
            let _ = writeln!(out, "# HELP {name} {help}");
            let _ = writeln!(out, "# TYPE {name} counter");
            let _ = writeln!(out, "{name} {value}");
        };
        single(
            out,
            "sluice_cluster_commits_total",
            "Flush objects committed in PostgreSQL by this broker.",
            get(&self.commits),
        );
        single(
            out,
            "sluice_cluster_commit_failures_total",
            "Commit attempts that failed (retried until the object's deadline).",
            get(&self.failures),
        );
        single(
            out,
            "sluice_cluster_batches_committed_total",
            "Produce batches given offsets by this broker's commits (duplicates included).",
            get(&self.batches),
        );
        single(
            out,
            "sluice_cluster_batches_refused_total",
            "Produce batches the commit refused (idempotent sequence or epoch, unknown partition).",
            get(&self.refused),
        );
        let name = "sluice_cluster_commit_duration_seconds";
        let _ = writeln!(
            out,
            "# HELP {name} Time of one commit transaction, as this broker saw it."
        );
        let _ = writeln!(out, "# TYPE {name} histogram");
        let mut cumulative = 0;
        for (i, le) in COMMIT_BUCKETS_MS.iter().enumerate() {
            cumulative += get(&self.buckets[i]);
            let _ = writeln!(
                out,
                "{name}_bucket{{le=\"{}\"}} {cumulative}",
                *le as f64 / 1000.0
            );
        }
        cumulative += get(&self.buckets[COMMIT_BUCKETS_MS.len()]);
        let _ = writeln!(out, "{name}_bucket{{le=\"+Inf\"}} {cumulative}");
        let _ = writeln!(out, "{name}_sum {}", get(&self.sum_us) as f64 / 1e6);
        let _ = writeln!(out, "{name}_count {cumulative}");
    }
}

/// The commit step of one broker.
pub struct CommitStep {
    pub db: Db,
    pub broker_id: i32,
    pub instance: Uuid,
    /// The bucket key prefix objects are stored under (the key in PostgreSQL is relative to
    /// the storage URL's prefix: the flusher's key minus this).
    pub key_prefix: String,
    pub committed: Arc<dyn Committed>,
    pub counters: Arc<CommitCounters>,
}

impl std::fmt::Debug for CommitStep {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CommitStep")
            .field("broker_id", &self.broker_id)
            .finish_non_exhaustive()
    }
}

impl ObjectCommitter for CommitStep {
    fn commit(
        &self,
        object: &CommittedObject,
    ) -> BoxFuture<'static, Result<Receipt, CommitFailure>> {
        let key = relative_key(object.key.as_ref(), &self.key_prefix);
        let described = describe(object);
        let db = self.db.clone();
        let (broker_id, instance) = (self.broker_id, self.instance);
        let committed = Arc::clone(&self.committed);
        let counters = Arc::clone(&self.counters);
        let object = object.clone();
        async move {
            let (batches, provisional) = described.map_err(CommitFailure::GiveUp)?;
            let req = CommitRequest {
                key,
                broker_id,
                instance,
                size_bytes: object.bytes.len() as u64,
                batches,
            };
            let started = Instant::now();
            let outcomes = crate::commit::commit_object(&db, &req).await;
            match &outcomes {
                Ok(outcomes) => counters.record(started.elapsed(), outcomes),
                Err(_) => {
                    counters.failures.fetch_add(1, Ordering::Relaxed);
                }
            }
            let outcomes = outcomes.map_err(|e| match e {
                CommitError::Fenced { .. } => CommitFailure::Final(FlushError::Fenced {
                    detail: e.to_string(),
                }),
                e if e.is_retriable() => CommitFailure::Retry(e.to_string()),
                e => CommitFailure::GiveUp(e.to_string()),
            })?;
            let mut receipt = CommitReceipt::default();
            for (((topic, partition, base), outcome), batch) in
                provisional.into_iter().zip(outcomes).zip(&req.batches)
            {
                receipt
                    .partitions
                    .entry((topic, partition))
                    .or_default()
                    .push(ReceiptBatch {
                        provisional_base: base,
                        outcome,
                        byte_start: batch.byte_start,
                        byte_len: batch.byte_len,
                        max_timestamp: batch.max_timestamp,
                    });
            }
            committed.committed(&object, &receipt);
            Ok(Receipt(Arc::new(receipt)))
        }
        .boxed()
    }
}

/// The object's key relative to the storage prefix (`objects/<writer>/<seq>.sluice`).
pub fn relative_key(key: &str, prefix: &str) -> String {
    let prefix = prefix.trim_matches('/');
    if prefix.is_empty() {
        return key.to_string();
    }
    key.strip_prefix(prefix)
        .and_then(|rest| rest.strip_prefix('/'))
        .unwrap_or(key)
        .to_string()
}

/// Each batch of the object's runs, in object order, as the commit describes it, with its
/// (topic, partition, provisional base offset). Fails only on an object this broker built
/// wrongly (a batch that does not parse).
#[allow(clippy::type_complexity)]
fn describe(
    object: &CommittedObject,
) -> Result<(Vec<CommitBatch>, Vec<(TopicId, i32, i64)>), String> {
    let mut batches = Vec::new();
    let mut provisional = Vec::new();
    for run in &object.runs {
        let range = run.range();
        let bytes = object
            .bytes
            .get(range.start as usize..range.end as usize)
            .ok_or_else(|| format!("run {range:?} is outside the object"))?;
        let topic_id = Uuid::from_bytes(run.topic_id.0);
        let mut pos = 0usize;
        while pos < bytes.len() {
            let view = BatchView::parse(&bytes[pos..])
                .map_err(|e| format!("batch at byte {} of run {range:?}: {e}", pos))?;
            let producer = (view.producer_id() >= 0).then(|| ProducerSeq {
                producer_id: view.producer_id(),
                epoch: view.producer_epoch(),
                first_seq: view.base_sequence(),
                last_seq: last_seq(view.base_sequence(), view.record_count()),
            });
            batches.push(CommitBatch {
                topic_id,
                partition: run.partition,
                byte_start: range.start + pos as u64,
                byte_len: view.len() as u32,
                records: view.last_offset_delta() + 1,
                max_timestamp: view.max_timestamp(),
                producer,
            });
            provisional.push((run.topic_id, run.partition, view.base_offset()));
            pos += view.len();
        }
    }
    Ok((batches, provisional))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_are_relative_to_the_prefix() {
        assert_eq!(
            relative_key("pre/fix/objects/b1/1.sluice", "pre/fix"),
            "objects/b1/1.sluice"
        );
        assert_eq!(
            relative_key("objects/b1/1.sluice", ""),
            "objects/b1/1.sluice"
        );
        assert_eq!(
            relative_key("objects/b1/1.sluice", "/"),
            "objects/b1/1.sluice"
        );
    }

    #[test]
    fn sequences_wrap() {
        assert_eq!(last_seq(0, 1), 0);
        assert_eq!(last_seq(5, 10), 14);
        assert_eq!(last_seq(i32::MAX, 2), 0);
    }
}
