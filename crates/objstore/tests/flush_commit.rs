//! The flusher with a commit step (`FlushTarget::committer`, cluster mode): an object is
//! committed only when the step answers, steps run one at a time in sequence order, a failed
//! step is retried until the object's deadline, and a final failure stops the flusher. Over the
//! in-memory store, on the real clock, with short intervals.

use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures_util::FutureExt;
use futures_util::future::BoxFuture;
use object_store::memory::InMemory;
use object_store::path::Path;
use object_store::{ObjectStore, ObjectStoreExt};
use sluice_batch::{BatchBuilder, RecordRef};
use sluice_objstore::flush::{
    AbandonedObject, CommitFailure, CommittedObject, FlushError, FlushSettings, FlushSink,
    FlushTarget, Flusher, ObjectCommitter, Receipt,
};
use sluice_objstore::lease::{Epoch, LeaseClock, LeaseStatus};
use sluice_objstore::name::writer_object_name;
use sluice_objstore::{Bucket, StorageUrl, TopicId, patch_base_offsets};
use tokio::sync::watch;
use tokio::time::Instant;

#[derive(Default)]
struct Sink {
    committed: Mutex<Vec<u64>>,
    abandoned: Mutex<Vec<u64>>,
}

impl FlushSink for Sink {
    fn committed(&self, object: &CommittedObject) {
        self.committed.lock().unwrap().push(object.sequence);
    }
    fn abandoned(&self, object: &AbandonedObject) {
        self.abandoned.lock().unwrap().push(object.sequence);
    }
}

/// A commit step that records its calls, fails the first `fail_first` attempts (retriable),
/// fails every attempt while `down`, or fails finally when `fence` is set; it answers with the
/// object's key and how many runs it had.
#[derive(Default)]
struct Step {
    calls: Mutex<Vec<(u64, Instant)>>,
    running: AtomicU32,
    overlapped: AtomicBool,
    fail_first: AtomicU32,
    down: AtomicBool,
    fence: AtomicBool,
    delay_ms: AtomicI64,
}

/// The flusher's handle on a [`Step`] the test keeps too.
struct StepRef(Arc<Step>);

impl ObjectCommitter for StepRef {
    fn commit(
        &self,
        object: &CommittedObject,
    ) -> BoxFuture<'static, Result<Receipt, CommitFailure>> {
        let step = Arc::clone(&self.0);
        let sequence = object.sequence;
        let answer = (object.key.to_string(), object.runs.len());
        async move {
            if step.running.fetch_add(1, Ordering::SeqCst) > 0 {
                step.overlapped.store(true, Ordering::SeqCst);
            }
            step.calls.lock().unwrap().push((sequence, Instant::now()));
            let delay = step.delay_ms.load(Ordering::SeqCst);
            tokio::time::sleep(Duration::from_millis(delay as u64)).await;
            step.running.fetch_sub(1, Ordering::SeqCst);
            if step.fence.load(Ordering::SeqCst) {
                return Err(CommitFailure::Final(FlushError::Fenced {
                    detail: "the broker's registration was taken over".into(),
                }));
            }
            if step.down.load(Ordering::SeqCst) {
                return Err(CommitFailure::Retry(
                    "the metadata store does not answer".into(),
                ));
            }
            if step
                .fail_first
                .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
                .is_ok()
            {
                return Err(CommitFailure::Retry("connection reset".into()));
            }
            Ok(Receipt(Arc::new(answer)))
        }
        .boxed()
    }
}

struct Harness {
    store: Arc<InMemory>,
    flusher: Flusher,
    sink: Arc<Sink>,
    step: Arc<Step>,
    _lease: watch::Sender<LeaseStatus>,
}

const WRITER: &str = "b7-0a1b2c3d";

fn start(put_timeout: Duration) -> Harness {
    let store = Arc::new(InMemory::new());
    let dyn_store: Arc<dyn ObjectStore> = store.clone();
    let url = StorageUrl::parse("s3://bucket/pre").unwrap();
    let bucket = Bucket::from_store(url, dyn_store, "memory");
    let clock: Arc<dyn LeaseClock> = Arc::new(|| 1_700_000_000_000_i64);
    let (lease, rx) = watch::channel(LeaseStatus::Held {
        epoch: Epoch(7),
        valid_until_ms: i64::MAX,
        renew_error: None,
    });
    let sink = Arc::new(Sink::default());
    let step = Arc::new(Step::default());
    let settings = FlushSettings {
        linger: Duration::from_millis(20),
        max_bytes: 1 << 20,
        puts_in_flight: 4,
        sealed_max: 4,
        put_timeout,
        backoff_min: Duration::from_millis(10),
        backoff_max: Duration::from_millis(50),
        seal_idle: Duration::ZERO,
    };
    let flusher = Flusher::start_with(
        bucket,
        Epoch(7),
        1,
        rx,
        clock,
        settings,
        sink.clone(),
        FlushTarget {
            writer: Some(WRITER.into()),
            committer: Some(Arc::new(StepRef(Arc::clone(&step)))),
        },
    );
    Harness {
        store,
        flusher,
        sink,
        step,
        _lease: lease,
    }
}

fn batch(first: i64) -> Vec<u8> {
    let mut out = Vec::new();
    let mut b = BatchBuilder::new(&mut out);
    b.push(&RecordRef {
        key: None,
        value: Some(b"v"),
        headers: &[],
        timestamp_ms: 1_000,
    });
    b.finish();
    patch_base_offsets(&mut out, first).unwrap();
    out
}

fn receipt_of(r: &Receipt) -> (String, usize) {
    r.0.downcast_ref::<(String, usize)>().unwrap().clone()
}

#[tokio::test]
async fn an_object_is_committed_only_when_its_step_answers_and_steps_run_in_order() {
    let h = start(Duration::from_secs(5));
    h.step.delay_ms.store(30, Ordering::SeqCst);
    let mut tickets = Vec::new();
    for i in 0..6 {
        tickets.push(
            h.flusher
                .add_run(TopicId([1; 16]), 0, &batch(i), &[])
                .unwrap(),
        );
        h.flusher.flush_now();
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let mut sequences = Vec::new();
    for t in &tickets {
        let (seq, receipt) = t.wait_receipt().await.unwrap();
        let (key, runs) = receipt_of(&receipt.expect("a receipt from the step"));
        assert_eq!(key, format!("pre/{}", writer_object_name(WRITER, seq)));
        assert_eq!(runs, 1);
        sequences.push(seq);
    }
    sequences.dedup();
    let calls: Vec<u64> = h.step.calls.lock().unwrap().iter().map(|c| c.0).collect();
    assert_eq!(calls, sequences, "one step per object, in sequence order");
    assert!(
        !h.step.overlapped.load(Ordering::SeqCst),
        "two steps ran at once"
    );
    assert_eq!(*h.sink.committed.lock().unwrap(), sequences);
    // The objects are under the writer's own name.
    let key = Path::from(format!("pre/{}", writer_object_name(WRITER, sequences[0])));
    assert!(h.store.get(&key).await.is_ok());
    h.flusher.shutdown().await;
}

#[tokio::test]
async fn a_failed_step_is_retried_and_the_ticket_waits_for_it() {
    let h = start(Duration::from_secs(5));
    h.step.fail_first.store(3, Ordering::SeqCst);
    let t = h
        .flusher
        .add_run(TopicId([1; 16]), 0, &batch(0), &[])
        .unwrap();
    let (seq, receipt) = t.wait_receipt().await.unwrap();
    assert!(receipt.is_some());
    let calls = h.step.calls.lock().unwrap().clone();
    assert_eq!(calls.len(), 4, "three failures, then success");
    assert!(calls.iter().all(|c| c.0 == seq));
    assert_eq!(h.flusher.stats().objects_committed, 1);
    h.flusher.shutdown().await;
}

#[tokio::test]
async fn a_step_that_keeps_failing_gives_the_object_and_its_followers_up_at_the_deadline() {
    let h = start(Duration::from_millis(400));
    h.step.down.store(true, Ordering::SeqCst);
    let t0 = Instant::now();
    let first = h
        .flusher
        .add_run(TopicId([1; 16]), 0, &batch(0), &[])
        .unwrap();
    h.flusher.flush_now();
    tokio::time::sleep(Duration::from_millis(30)).await;
    let second = h
        .flusher
        .add_run(TopicId([1; 16]), 0, &batch(1), &[])
        .unwrap();
    match first.wait().await {
        Err(FlushError::GaveUp { last_error, .. }) => {
            assert!(
                last_error.contains("commit: the metadata store"),
                "{last_error}"
            )
        }
        other => panic!("{other:?}"),
    }
    assert!(t0.elapsed() < Duration::from_secs(3));
    assert!(matches!(
        second.wait().await,
        Err(FlushError::GaveUp { .. })
    ));
    assert!(h.sink.committed.lock().unwrap().is_empty());
    // The store is back: the next object commits.
    h.step.down.store(false, Ordering::SeqCst);
    let third = h
        .flusher
        .add_run(TopicId([1; 16]), 0, &batch(2), &[])
        .unwrap();
    assert!(third.wait().await.is_ok());
    h.flusher.shutdown().await;
}

#[tokio::test]
async fn a_final_failure_stops_the_flusher() {
    let h = start(Duration::from_secs(5));
    h.step.fence.store(true, Ordering::SeqCst);
    let t = h
        .flusher
        .add_run(TopicId([1; 16]), 0, &batch(0), &[])
        .unwrap();
    assert!(matches!(t.wait().await, Err(FlushError::Fenced { .. })));
    assert_eq!(
        h.step.calls.lock().unwrap().len(),
        1,
        "a final failure is not retried"
    );
    let refused = h.flusher.add_run(TopicId([1; 16]), 0, &batch(1), &[]);
    assert!(
        matches!(refused, Err(FlushError::Fenced { .. })),
        "{refused:?}"
    );
    h.flusher.shutdown().await;
}
