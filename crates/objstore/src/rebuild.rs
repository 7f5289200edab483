//! Bringing the local [`Index`] up to date with the bucket: at start, and whenever the index
//! was lost or is older than the bucket.
//!
//! [`catch_up`] lists `PREFIX/objects/` after the index's last sequence and, for each object
//! found, reads only what the index needs: the footer (one suffix-range GET of
//! [`FOOTER_BYTES`]) and the adjacent meta and index sections (one ranged GET of
//! [`Footer::meta_and_index_range`](crate::Footer::meta_and_index_range)); never the data.
//! Every section is checked (CRCs, bounds) as the read path checks it; a corrupt object stops
//! the catch-up with an error naming its key, it is never skipped.
//!
//! An object's abandonment is recorded only in LATER objects (the writer repeats the list in
//! every object until one is committed). So the summaries of all new objects are read first
//! (concurrently, at most [`GETS_IN_FLIGHT`] at a time), every `Abandoned` sequence among them
//! is marked in the index, and only then are the objects applied, one transaction each, in
//! sequence order: the abandoned ones are skipped. Memory: one summary per object (runs and
//! metadata records, no data).
//!
//! **Checkpoints** ([`crate::maintenance`]): when `PREFIX/checkpoints/` holds a checkpoint
//! newer than the index's last sequence (or the index is empty), [`catch_up`] first loads the
//! newest one into the index (one GET; it replaces the whole state), then lists and applies
//! only the objects after it. So a rebuild reads a bounded amount however long the history.
//! A checkpoint that does not parse is passed over, with a warning, for the one before it; if
//! none of the checkpoints newer than the index parses, the catch-up stops with an error
//! rather than rebuild from objects the cleaner may have deleted (it never silently skips
//! data).

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use futures_util::{StreamExt, TryStreamExt};
use object_store::path::Path;
use object_store::{GetOptions, GetRange, ObjectStore, ObjectStoreExt};

use crate::bucket::Bucket;
use crate::error::ObjectError;
use crate::format::FOOTER_BYTES;
use crate::index::{Index, IndexError, ObjectSummary};
use crate::maintenance::{MaintenanceError, list_checkpoints, read_checkpoint};
use crate::meta::MetaChange;
use crate::name::{ObjectName, checkpoint_name, object_name, objects_prefix, parse_name};
use crate::reader::{parse_footer, parse_index, parse_meta};

/// Objects whose footer and sections are being read at once. Each holds one small GET in
/// flight; 16 keeps a high-latency store (tens of ms per GET) busy enough to read ~1,000
/// objects a second without opening more connections than a small broker should.
pub const GETS_IN_FLIGHT: usize = 16;

/// What one catch-up did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CatchUp {
    /// Objects applied (their runs and metadata).
    pub objects_applied: u64,
    /// Objects skipped because a later object (or the index) records them abandoned.
    pub objects_skipped: u64,
    /// Bytes read from the bucket (footers, meta and index sections).
    pub bytes_read: u64,
    /// The index's last sequence afterwards.
    pub last_sequence: Option<u64>,
    /// The checkpoint loaded first (its sequence), if any.
    pub checkpoint: Option<u64>,
    pub elapsed: Duration,
}

/// Why a catch-up stopped. Each prints as one line naming the key concerned. What was applied
/// before the error stays applied (each object is one transaction); the next catch-up goes on
/// from there.
#[derive(Debug, thiserror::Error)]
pub enum RebuildError {
    /// Listing the objects failed.
    #[error("cannot list {prefix}: {source}")]
    List {
        prefix: String,
        #[source]
        source: object_store::Error,
    },
    /// A GET failed (the store is unreachable, or the object vanished after the listing).
    #[error("cannot read the {what} of object {key}: {source}")]
    Get {
        key: String,
        what: &'static str,
        #[source]
        source: object_store::Error,
    },
    /// A key under `objects/` that is not an object name of ours.
    #[error("{source}; remove it from the bucket or use another prefix")]
    Foreign {
        key: String,
        #[source]
        source: ObjectError,
    },
    /// The object is corrupt (bad CRC, bounds, meta record).
    #[error("object {key} is corrupt: {source}")]
    Corrupt {
        key: String,
        #[source]
        source: ObjectError,
    },
    /// The object's footer names another sequence than its key.
    #[error("object {key} says it is sequence {found}, not what its name says")]
    WrongSequence { key: String, found: u64 },
    /// The store answered a range GET with another range than asked.
    #[error("object {key}: asked for bytes {asked:?} of its {what}, got {got} bytes")]
    ShortRead {
        key: String,
        what: &'static str,
        asked: std::ops::Range<u64>,
        got: u64,
    },
    /// No checkpoint newer than the index could be read.
    #[error("{0}")]
    Checkpoint(String),
    #[error(transparent)]
    Index(#[from] IndexError),
}

/// Brings `index` up to date with the bucket: applies every object after its last sequence,
/// in sequence order, skipping abandoned ones (see the module doc). Idempotent: a second call
/// with nothing new reads only the listing. Gaps in the sequence (numbers never written) are
/// fine.
///
/// On return the index reflects every object the listing showed (durable as
/// [`Index::apply`] is: a crash may lose the last ones, and the next catch-up reads them again).
///
/// The applies are synchronous SQLite transactions run on the calling task (about 0.2 ms per
/// small object in a debug build); call it at start, before serving, or from a task that may
/// block that long.
pub async fn catch_up(bucket: &Bucket, index: &Index) -> Result<CatchUp, RebuildError> {
    let started = Instant::now();
    let store = bucket.store();
    let prefix = bucket.url().prefix().to_owned();
    let mut last = index.last_sequence();
    let mut bytes_read = 0u64;
    let mut checkpoint = None;

    let newer: Vec<u64> = list_checkpoints(bucket)
        .await
        .map_err(|e| match e {
            MaintenanceError::Store { key, source, .. } => RebuildError::List {
                prefix: key,
                source,
            },
            other => RebuildError::Checkpoint(other.to_string()),
        })?
        .into_iter()
        .rev()
        .filter(|&s| last.is_none_or(|l| s > l))
        .collect();
    if let Some(&newest) = newer.first() {
        let mut unreadable = Vec::new();
        for seq in newer {
            match read_checkpoint(bucket, seq).await {
                Ok((snapshot, bytes)) => {
                    index.load_snapshot(&snapshot)?;
                    bytes_read += bytes;
                    checkpoint = Some(seq);
                    break;
                }
                Err(e @ MaintenanceError::Corrupt { .. }) => {
                    tracing::warn!(error = %e, "passing over an unreadable checkpoint for the one before it");
                    unreadable.push(e.to_string());
                }
                Err(e) => return Err(RebuildError::Checkpoint(e.to_string())),
            }
        }
        if checkpoint.is_none() {
            return Err(RebuildError::Checkpoint(format!(
                "no checkpoint up to {} is readable ({}); objects they covered may be deleted, so the index cannot be rebuilt from the objects alone",
                checkpoint_name(&prefix, newest),
                unreadable.join("; ")
            )));
        }
        last = index.last_sequence();
    }

    let list_prefix = Path::from(objects_prefix(&prefix));
    let listing = match last {
        Some(seq) => {
            store.list_with_offset(Some(&list_prefix), &Path::from(object_name(&prefix, seq)))
        }
        None => store.list(Some(&list_prefix)),
    };
    let metas: Vec<object_store::ObjectMeta> =
        listing
            .try_collect()
            .await
            .map_err(|source| RebuildError::List {
                prefix: list_prefix.to_string(),
                source,
            })?;
    let mut names = Vec::with_capacity(metas.len());
    for meta in metas {
        let key = meta.location.to_string();
        match parse_name(&prefix, &key) {
            Ok(ObjectName::Flush(seq)) if last.is_none_or(|l| seq > l) => {
                names.push((seq, meta.location, meta.size));
            }
            Ok(_) => {}
            Err(source) => return Err(RebuildError::Foreign { key, source }),
        }
    }
    names.sort_by_key(|(seq, _, _)| *seq);

    let summaries: Vec<(ObjectSummary, u64)> = futures_util::stream::iter(names)
        .map(|(seq, location, _size)| read_summary(store.as_ref(), seq, location))
        .buffered(GETS_IN_FLIGHT)
        .try_collect()
        .await?;

    let abandoned: BTreeSet<u64> = summaries
        .iter()
        .flat_map(|(s, _)| s.meta.iter())
        .filter_map(|m| match m {
            MetaChange::Abandoned(seqs) => Some(seqs.iter().copied()),
            _ => None,
        })
        .flatten()
        .collect();
    let new_abandoned: Vec<u64> = abandoned
        .iter()
        .copied()
        .filter(|&s| last.is_none_or(|l| s > l))
        .collect();
    if !new_abandoned.is_empty() {
        index.mark_abandoned(&new_abandoned)?;
    }
    let already_abandoned = index.abandoned()?;

    let mut report = CatchUp {
        objects_applied: 0,
        objects_skipped: 0,
        bytes_read,
        checkpoint,
        last_sequence: last,
        elapsed: Duration::ZERO,
    };
    for (summary, bytes) in &summaries {
        report.bytes_read += bytes;
        index.apply(summary)?;
        if already_abandoned.contains(&summary.sequence) {
            report.objects_skipped += 1;
        } else {
            report.objects_applied += 1;
        }
    }
    report.last_sequence = index.last_sequence();
    report.elapsed = started.elapsed();
    Ok(report)
}

/// Reads object `seq`'s footer, meta and index sections into a summary; also returns the
/// bytes read.
async fn read_summary(
    store: &dyn ObjectStore,
    seq: u64,
    location: Path,
) -> Result<(ObjectSummary, u64), RebuildError> {
    let key = location.to_string();
    let get = |what| {
        let key = key.clone();
        move |source| RebuildError::Get { key, what, source }
    };
    let corrupt = |source| RebuildError::Corrupt {
        key: key.clone(),
        source,
    };
    let options = GetOptions {
        range: Some(GetRange::Suffix(FOOTER_BYTES as u64)),
        ..GetOptions::default()
    };
    let tail = store
        .get_opts(&location, options)
        .await
        .map_err(get("footer"))?;
    let object_len = tail.meta.size;
    let tail = tail.bytes().await.map_err(get("footer"))?;
    let footer = parse_footer(&tail, object_len).map_err(corrupt)?;
    if footer.header.sequence != seq {
        return Err(RebuildError::WrongSequence {
            key,
            found: footer.header.sequence,
        });
    }
    let range = footer.meta_and_index_range();
    let sections = store
        .get_range(&location, range.clone())
        .await
        .map_err(get("meta and index sections"))?;
    if sections.len() as u64 != range.end - range.start {
        return Err(RebuildError::ShortRead {
            key,
            what: "meta and index sections",
            asked: range,
            got: sections.len() as u64,
        });
    }
    // The footer checked meta length + index length = the range's length.
    let (meta_bytes, index_bytes) = sections.split_at(footer.meta_len as usize);
    let meta = parse_meta(meta_bytes, &footer).map_err(corrupt)?;
    let runs_index = parse_index(index_bytes, &footer).map_err(corrupt)?;
    let mut changes = Vec::with_capacity(meta.len());
    for record in meta.iter() {
        match MetaChange::decode(record.kind, record.payload) {
            Ok(Some(change)) => changes.push(change),
            Ok(None) => {} // a kind a later version added: not ours to apply
            Err(e) => return Err(corrupt(ObjectError::from(e))),
        }
    }
    let summary = ObjectSummary {
        sequence: seq,
        size: object_len,
        created_ms: footer.header.created_ms,
        runs: runs_index.iter().collect(),
        meta: changes,
    };
    Ok((summary, tail.len() as u64 + sections.len() as u64))
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use bytes::Bytes;
    use object_store::memory::InMemory;
    use object_store::{ObjectStoreExt, PutPayload};
    use sluice_batch::{BatchBuilder, RecordRef};
    use sluice_testkit::faulty::{ErrorKind, FaultyStore, Op};

    use super::*;
    use crate::bucket::StorageUrl;
    use crate::format::{ObjectHeader, RunEntry, TopicId};
    use crate::index::PartitionState;
    use crate::meta::ProducerBatch;
    use crate::writer::ObjectWriter;

    const URL: &str = "s3://bucket/tenant/sluice";
    const PREFIX: &str = "tenant/sluice";
    const T1: TopicId = TopicId([1; 16]);
    const T2: TopicId = TopicId([2; 16]);

    /// `batches` batches of 3 records each.
    fn batches(batches: usize) -> Vec<u8> {
        let mut out = Vec::new();
        for i in 0..batches {
            let mut b = BatchBuilder::new(&mut out);
            for r in 0..3 {
                b.push(&RecordRef {
                    key: None,
                    value: Some(b"value"),
                    headers: &[],
                    timestamp_ms: 1_000 + (i * 3 + r) as i64,
                });
            }
            b.finish();
        }
        out
    }

    /// An object holding runs (topic, partition, first offset, batch count; in key order) and
    /// metadata records, and the summary the flusher would apply for it.
    fn object(
        seq: u64,
        runs: &[(TopicId, i32, i64, usize)],
        meta: Vec<MetaChange>,
    ) -> (Bytes, ObjectSummary) {
        let mut writer = ObjectWriter::new();
        let mut entries: Vec<RunEntry> = Vec::new();
        for &(topic, partition, first, count) in runs {
            writer.begin_run(topic, partition).unwrap();
            writer.push_batches_at(&batches(count), first).unwrap();
            entries.push(writer.end_run().unwrap().unwrap());
        }
        for change in &meta {
            writer.push_meta(change.kind(), &change.encode()).unwrap();
        }
        writer
            .push_meta(999, b"a kind from a later version")
            .unwrap();
        let bytes = writer
            .finish(ObjectHeader {
                writer_epoch: 1,
                sequence: seq,
                created_ms: 1_700_000_000_000 + seq as i64,
            })
            .unwrap();
        let summary = ObjectSummary {
            sequence: seq,
            size: bytes.len() as u64,
            created_ms: 1_700_000_000_000 + seq as i64,
            runs: entries,
            meta,
        };
        (bytes, summary)
    }

    fn producer(pid: i64, base: i64) -> MetaChange {
        MetaChange::ProducerBatch(ProducerBatch {
            topic_id: T1,
            partition: 0,
            producer_id: pid,
            epoch: 0,
            first_seq: 0,
            last_seq: 2,
            base_offset: base,
            last_offset: base + 2,
        })
    }

    /// A history with every kind of record: runs over two topics, producer batches, files, a
    /// log start, a topic deletion, an orphan (object 3, created although its writer gave it
    /// up) that object 5 declares abandoned, and a gap (object 6 never written).
    fn history() -> Vec<(Bytes, ObjectSummary)> {
        let write = |path: &str, c: &[u8]| MetaChange::FileWrite {
            path: path.into(),
            contents: c.to_vec(),
        };
        vec![
            object(
                1,
                &[(T1, 0, 0, 2), (T1, 1, 0, 1), (T2, 0, 0, 1)],
                vec![
                    write("topics/t1", b"1"),
                    write("topics/t2", b"2"),
                    producer(9, 0),
                ],
            ),
            object(
                2,
                &[(T1, 0, 6, 3)],
                vec![
                    producer(9, 6),
                    MetaChange::FileAppend {
                        path: "groups/log".into(),
                        bytes: b"a".to_vec(),
                    },
                ],
            ),
            object(3, &[(T1, 0, 15, 1), (T2, 0, 3, 1)], vec![producer(9, 15)]),
            object(
                4,
                &[(T1, 0, 18, 1)],
                vec![MetaChange::LogStart {
                    topic_id: T1,
                    partition: 1,
                    offset: 3,
                }],
            ),
            object(
                5,
                &[(T1, 1, 3, 2)],
                vec![
                    MetaChange::Abandoned(vec![3]),
                    MetaChange::TopicDeleted { topic_id: T2 },
                    MetaChange::FileRemove {
                        path: "topics/t2".into(),
                    },
                ],
            ),
            object(7, &[(T1, 0, 21, 1)], vec![producer(9, 21)]),
        ]
    }

    fn memory_bucket() -> Bucket {
        Bucket::from_store(
            StorageUrl::parse(URL).unwrap(),
            Arc::new(InMemory::new()),
            "memory",
        )
    }

    async fn put(bucket: &Bucket, seq: u64, bytes: Bytes) {
        bucket
            .store()
            .put(
                &Path::from(object_name(PREFIX, seq)),
                PutPayload::from_bytes(bytes),
            )
            .await
            .unwrap();
    }

    fn new_index(dir: &tempfile::TempDir, name: &str) -> Index {
        Index::open(&dir.path().join(name), URL).unwrap()
    }

    /// Everything the index answers, for comparing two indexes.
    type State = (
        Option<u64>,
        Vec<PartitionState>,
        Vec<Vec<crate::index::RunLocation>>,
        Vec<ProducerBatch>,
        Vec<(String, Vec<u8>)>,
    );

    fn state(index: &Index) -> State {
        let parts = index.partitions().unwrap();
        let runs = [(T1, 0), (T1, 1), (T2, 0)]
            .iter()
            .map(|&(t, p)| index.runs(t, p).unwrap())
            .collect();
        (
            index.last_sequence(),
            parts,
            runs,
            index.producer_batches(T1, 0).unwrap(),
            index.files().unwrap(),
        )
    }

    #[tokio::test]
    async fn catch_up_of_an_empty_index_equals_applying_directly() {
        let dir = tempfile::tempdir().unwrap();
        let bucket = memory_bucket();
        let direct = new_index(&dir, "direct.sqlite");
        for (bytes, summary) in history() {
            put(&bucket, summary.sequence, bytes).await;
            direct.apply(&summary).unwrap();
        }
        let rebuilt = new_index(&dir, "rebuilt.sqlite");
        let report = catch_up(&bucket, &rebuilt).await.unwrap();
        assert_eq!(report.objects_applied, 5, "{report:?}");
        assert_eq!(report.objects_skipped, 1, "{report:?}");
        assert_eq!(report.last_sequence, Some(7));
        assert!(report.bytes_read > 6 * FOOTER_BYTES as u64, "{report:?}");
        assert_eq!(state(&rebuilt), state(&direct));

        // And what that state is: object 3 is gone, T2 is deleted, T1/1 starts at 3.
        let (_, parts, runs, producers, files) = state(&rebuilt);
        let bases: Vec<(u64, i64)> = runs[0]
            .iter()
            .map(|r| (r.object_seq, r.base_offset))
            .collect();
        assert_eq!(bases, vec![(1, 0), (2, 6), (4, 18), (7, 21)]);
        assert_eq!(runs[1].len(), 1);
        assert!(runs[2].is_empty());
        assert_eq!(parts.len(), 2);
        assert_eq!((parts[1].log_start, parts[1].next_offset), (3, 9));
        let producer_bases: Vec<i64> = producers.iter().map(|b| b.base_offset).collect();
        assert_eq!(producer_bases, vec![0, 6, 21]);
        assert_eq!(
            files,
            vec![
                ("groups/log".to_owned(), b"a".to_vec()),
                ("topics/t1".to_owned(), b"1".to_vec())
            ]
        );
        assert_eq!(rebuilt.abandoned().unwrap(), BTreeSet::from([3]));
    }

    #[tokio::test]
    async fn catch_up_twice_is_idempotent_and_picks_up_new_objects() {
        let dir = tempfile::tempdir().unwrap();
        let bucket = memory_bucket();
        let mut objects = history();
        let (last_bytes, last) = objects.pop().unwrap();
        for (bytes, summary) in objects {
            put(&bucket, summary.sequence, bytes).await;
        }
        let index = new_index(&dir, "index.sqlite");
        let first = catch_up(&bucket, &index).await.unwrap();
        assert_eq!((first.objects_applied, first.last_sequence), (4, Some(5)));
        let before = state(&index);
        let again = catch_up(&bucket, &index).await.unwrap();
        assert_eq!(
            (
                again.objects_applied,
                again.objects_skipped,
                again.bytes_read
            ),
            (0, 0, 0)
        );
        assert_eq!(state(&index), before);

        put(&bucket, last.sequence, last_bytes).await;
        let third = catch_up(&bucket, &index).await.unwrap();
        assert_eq!((third.objects_applied, third.last_sequence), (1, Some(7)));

        // Reopened, it goes on from where it was.
        drop(index);
        let index = new_index(&dir, "index.sqlite");
        let fourth = catch_up(&bucket, &index).await.unwrap();
        assert_eq!((fourth.objects_applied, fourth.last_sequence), (0, Some(7)));
    }

    #[tokio::test]
    async fn a_corrupt_object_stops_the_catch_up_naming_it() {
        let dir = tempfile::tempdir().unwrap();
        let bucket = memory_bucket();
        for (bytes, summary) in history() {
            let bytes = if summary.sequence == 4 {
                // Flip a byte of the meta section (just before the index).
                let mut b = bytes.to_vec();
                let footer_at = b.len() - FOOTER_BYTES;
                let meta_offset =
                    u64::from_be_bytes(b[footer_at + 16..footer_at + 24].try_into().unwrap());
                b[meta_offset as usize + 9] ^= 0xff;
                Bytes::from(b)
            } else {
                bytes
            };
            put(&bucket, summary.sequence, bytes).await;
        }
        let index = new_index(&dir, "index.sqlite");
        let err = catch_up(&bucket, &index).await.unwrap_err();
        let key = object_name(PREFIX, 4);
        assert!(
            matches!(&err, RebuildError::Corrupt { key: k, .. } if *k == key),
            "{err:?}"
        );
        let line = err.to_string();
        assert!(line.contains(&key) && line.contains("CRC"), "{line}");
        assert!(!line.contains('\n'), "{line}");
        // Nothing was applied: every summary is read before the first apply.
        assert_eq!(index.last_sequence(), None);

        // A few bytes of garbage under an object's name, and a footer that names another
        // sequence, are refused too.
        let bucket = memory_bucket();
        put(&bucket, 1, Bytes::from_static(b"not an object")).await;
        let err = catch_up(&bucket, &index).await.unwrap_err();
        assert!(matches!(err, RebuildError::Corrupt { .. }), "{err:?}");
        assert!(err.to_string().contains(&object_name(PREFIX, 1)), "{err}");

        let bucket = memory_bucket();
        let (bytes, _) = object(9, &[], vec![]);
        put(&bucket, 2, bytes).await;
        let err = catch_up(&bucket, &index).await.unwrap_err();
        assert!(
            matches!(err, RebuildError::WrongSequence { found: 9, .. }),
            "{err:?}"
        );
    }

    #[tokio::test]
    async fn gaps_are_fine_and_foreign_keys_are_refused() {
        let dir = tempfile::tempdir().unwrap();
        let bucket = memory_bucket();
        for seq in [1, 2, 5, 40] {
            let (bytes, _) = object(seq, &[(T1, 0, seq as i64 * 100, 1)], vec![]);
            put(&bucket, seq, bytes).await;
        }
        // Keys outside objects/ are not listed; a checkpoint is not read yet.
        bucket
            .store()
            .put(&bucket.key("checkpoints/x"), PutPayload::from_static(b"x"))
            .await
            .unwrap();
        let index = new_index(&dir, "index.sqlite");
        let report = catch_up(&bucket, &index).await.unwrap();
        assert_eq!(
            (report.objects_applied, report.last_sequence),
            (4, Some(40))
        );
        let bases: Vec<i64> = index
            .runs(T1, 0)
            .unwrap()
            .iter()
            .map(|r| r.base_offset)
            .collect();
        assert_eq!(bases, vec![100, 200, 500, 4000]);

        let stray = bucket.key("objects/notes.txt");
        bucket
            .store()
            .put(&stray, PutPayload::from_static(b"x"))
            .await
            .unwrap();
        let err = catch_up(&bucket, &index).await.unwrap_err();
        assert!(matches!(err, RebuildError::Foreign { .. }), "{err:?}");
        assert!(err.to_string().contains(stray.as_ref()), "{err}");
    }

    #[tokio::test]
    async fn a_failing_store_is_an_error_naming_the_key() {
        let dir = tempfile::tempdir().unwrap();
        let faulty = Arc::new(FaultyStore::with_seed(Arc::new(InMemory::new()), 1));
        let bucket = Bucket::from_store(StorageUrl::parse(URL).unwrap(), faulty.clone(), "faulty");
        let (bytes, _) = object(1, &[(T1, 0, 0, 1)], vec![]);
        put(&bucket, 1, bytes).await;
        let index = new_index(&dir, "index.sqlite");

        faulty.fail_next(Op::Get, 1, ErrorKind::Generic);
        let err = catch_up(&bucket, &index).await.unwrap_err();
        assert!(
            matches!(err, RebuildError::Get { what: "footer", .. }),
            "{err:?}"
        );
        assert!(err.to_string().contains(&object_name(PREFIX, 1)), "{err}");

        faulty.fail_next(Op::List, 1, ErrorKind::Generic);
        let err = catch_up(&bucket, &index).await.unwrap_err();
        assert!(matches!(err, RebuildError::List { .. }), "{err:?}");

        // Once the store answers again, the catch-up completes.
        let report = catch_up(&bucket, &index).await.unwrap();
        assert_eq!(report.objects_applied, 1);
        assert_eq!(faulty.calls(Op::Get), 3);
    }
}
