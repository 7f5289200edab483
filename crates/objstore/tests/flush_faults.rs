//! The flusher (`sluice_objstore::flush`) over the in-memory store wrapped in `FaultyStore`:
//! sealing, object contents, ordering, retries, lost responses, fencing, give-ups, backlog and
//! the lease. The tests run on the real clock (this crate's tokio has no `test-util`), with
//! short intervals and generous margins; each one takes at most a few seconds.

use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use object_store::memory::InMemory;
use object_store::path::Path;
use object_store::{ObjectStore, ObjectStoreExt, PutPayload};
use sluice_batch::{BatchBuilder, RecordRef};
use sluice_objstore::flush::{
    AbandonedObject, CommittedObject, FlushError, FlushSettings, FlushSink, Flusher,
};
use sluice_objstore::lease::{Epoch, LeaseClock, LeaseError, LeaseStatus};
use sluice_objstore::meta::{MetaChange, ProducerBatch};
use sluice_objstore::{
    Bucket, ObjectHeader, ObjectReader, ObjectWriter, StorageUrl, TopicId, object_name,
    patch_base_offsets,
};
use sluice_testkit::FaultyStore;
use sluice_testkit::faulty::{ErrorKind, Fault, Op, Rule};
use tokio::sync::watch;
use tokio::time::Instant;

const EPOCH: Epoch = Epoch(5);
const PREFIX: &str = "pre";

#[derive(Debug, Clone)]
enum Event {
    Committed(CommittedObject),
    Abandoned(AbandonedObject),
}

impl Event {
    fn sequence(&self) -> u64 {
        match self {
            Event::Committed(o) => o.sequence,
            Event::Abandoned(o) => o.sequence,
        }
    }
}

#[derive(Default)]
struct Recorder(Mutex<Vec<Event>>);

impl Recorder {
    fn events(&self) -> Vec<Event> {
        self.0.lock().unwrap().clone()
    }
    fn has(&self, sequence: u64) -> bool {
        self.events().iter().any(|e| e.sequence() == sequence)
    }
}

impl FlushSink for Recorder {
    fn committed(&self, object: &CommittedObject) {
        self.0
            .lock()
            .unwrap()
            .push(Event::Committed(object.clone()));
    }
    fn abandoned(&self, object: &AbandonedObject) {
        self.0
            .lock()
            .unwrap()
            .push(Event::Abandoned(object.clone()));
    }
}

struct Harness {
    faulty: Arc<FaultyStore>,
    flusher: Flusher,
    sink: Arc<Recorder>,
    lease: watch::Sender<LeaseStatus>,
    now_ms: Arc<AtomicI64>,
}

fn settings() -> FlushSettings {
    FlushSettings {
        linger: Duration::from_millis(250),
        max_bytes: 1 << 20,
        puts_in_flight: 2,
        sealed_max: 4,
        put_timeout: Duration::from_secs(5),
        backoff_min: Duration::from_millis(50),
        backoff_max: Duration::from_millis(400),
        // Off here; its own test turns it on.
        seal_idle: Duration::ZERO,
    }
}

fn start(settings: FlushSettings, next_sequence: u64) -> Harness {
    let faulty = Arc::new(FaultyStore::with_seed(Arc::new(InMemory::new()), 42));
    let store: Arc<dyn ObjectStore> = faulty.clone();
    let url = StorageUrl::parse(&format!("s3://bucket/{PREFIX}")).unwrap();
    let bucket = Bucket::from_store(url, store, "memory");
    let now_ms = Arc::new(AtomicI64::new(1_700_000_000_000));
    let clock: Arc<dyn LeaseClock> = {
        let now = Arc::clone(&now_ms);
        Arc::new(move || now.load(Ordering::SeqCst))
    };
    let (lease, rx) = watch::channel(LeaseStatus::Held {
        epoch: EPOCH,
        valid_until_ms: i64::MAX,
        renew_error: None,
    });
    let sink = Arc::new(Recorder::default());
    let flusher = Flusher::start(
        bucket,
        EPOCH,
        next_sequence,
        rx,
        clock,
        settings,
        sink.clone(),
    );
    Harness {
        faulty,
        flusher,
        sink,
        lease,
        now_ms,
    }
}

fn key(sequence: u64) -> Path {
    Path::from(object_name(PREFIX, sequence))
}

fn topic(n: u8) -> TopicId {
    TopicId([n; 16])
}

/// `count` batches of 3 records each, offsets from `first`; returns the bytes and the next
/// offset.
fn batches(first: i64, count: usize, tag: u8) -> (Vec<u8>, i64) {
    let mut out = Vec::new();
    for i in 0..count {
        let mut b = BatchBuilder::new(&mut out);
        for r in 0..3u8 {
            let value = [tag, i as u8, r];
            b.push(&RecordRef {
                key: None,
                value: Some(&value),
                headers: &[],
                timestamp_ms: 1_000 + i as i64,
            });
        }
        b.finish();
    }
    let next = patch_base_offsets(&mut out, first).unwrap();
    (out, next)
}

async fn stored(h: &Harness, sequence: u64) -> Option<bytes::Bytes> {
    match h.faulty.inner().get(&key(sequence)).await {
        Ok(got) => Some(got.bytes().await.unwrap()),
        Err(_) => None,
    }
}

#[tokio::test]
async fn linger_seals_after_the_interval_and_empty_objects_are_never_put() {
    let h = start(settings(), 10);
    tokio::time::sleep(Duration::from_millis(400)).await;
    h.flusher.flush_now();
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert_eq!(h.faulty.calls(Op::Put), 0, "an empty object was PUT");

    let (data, _) = batches(0, 2, 1);
    let t0 = Instant::now();
    let ticket = h.flusher.add_run(topic(1), 0, &data, &[]).unwrap();
    assert_eq!(ticket.sequence(), 10);
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_eq!(h.faulty.calls(Op::Put), 0, "sealed before the linger");
    assert!(ticket.outcome().is_none());
    assert_eq!(ticket.wait().await, Ok(10));
    let waited = t0.elapsed();
    assert!(
        waited >= Duration::from_millis(250) && waited < Duration::from_secs(2),
        "{waited:?}"
    );
    assert!(h.sink.has(10), "the ticket resolved before the sink heard");
    let stats = h.flusher.stats();
    assert_eq!((stats.puts, stats.objects_committed), (1, 1));
    assert_eq!(stats.open_sequence, 11);
    h.flusher.shutdown().await;
    assert_eq!(h.faulty.calls(Op::Put), 1);
}

#[tokio::test]
async fn a_quiet_object_is_sealed_early_but_seals_by_time_stay_one_per_linger() {
    let linger = Duration::from_secs(2);
    let h = start(
        FlushSettings {
            linger,
            seal_idle: Duration::from_millis(20),
            ..settings()
        },
        0,
    );
    // Nothing was sealed by time yet: one quiet batch is sealed after 20 ms, not 2 s.
    let t0 = Instant::now();
    let (data, next) = batches(0, 1, 1);
    let first = h.flusher.add_run(topic(1), 0, &data, &[]).unwrap();
    assert_eq!(first.wait().await, Ok(0));
    let waited = t0.elapsed();
    assert!(
        waited >= Duration::from_millis(20) && waited < Duration::from_millis(1500),
        "{waited:?}"
    );
    // Quiet again 500 ms later, but the last seal by time was less than a linger ago: sealed
    // one linger after the first (~2 s from t0), before its own linger would (~2.5 s).
    tokio::time::sleep_until(t0 + Duration::from_millis(500)).await;
    let (data, mut next_offset) = batches(next, 1, 2);
    let second = h.flusher.add_run(topic(1), 0, &data, &[]).unwrap();
    assert_eq!(second.wait().await, Ok(1));
    let waited = t0.elapsed();
    assert!(
        waited >= linger && waited < Duration::from_millis(2450),
        "sealed at {waited:?}, not one linger after the first seal"
    );
    // Adds that keep coming do not let it be quiet: a stream every 5 ms stays one object.
    let mut last = None;
    for i in 0..20 {
        let (data, n) = batches(next_offset, 1, i);
        next_offset = n;
        last = Some(h.flusher.add_run(topic(1), 0, &data, &[]).unwrap());
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let last = last.unwrap();
    assert_eq!(last.sequence(), 2, "a busy object was split");
    h.flusher.shutdown().await;
    assert_eq!(last.wait().await, Ok(2));
    let stats = h.flusher.stats();
    assert_eq!(stats.objects_committed, 3);
}

#[tokio::test]
async fn max_bytes_seals_early_with_consecutive_sequences() {
    let (one, _) = batches(0, 1, 1);
    let h = start(
        FlushSettings {
            linger: Duration::from_secs(60),
            max_bytes: one.len() * 3,
            ..settings()
        },
        0,
    );
    let t0 = Instant::now();
    let mut tickets = Vec::new();
    let mut next = 0;
    for i in 0..7 {
        let (data, n) = batches(next, 1, i);
        next = n;
        tickets.push(h.flusher.add_run(topic(1), 0, &data, &[]).unwrap());
    }
    let seqs: Vec<u64> = tickets.iter().map(|t| t.sequence()).collect();
    assert_eq!(seqs, [0, 0, 0, 1, 1, 1, 2]);
    for t in &tickets[..6] {
        t.wait().await.unwrap();
    }
    assert!(
        t0.elapsed() < Duration::from_millis(10),
        "waited for linger"
    );
    assert!(
        tickets[6].outcome().is_none(),
        "the third object is not full"
    );
    h.flusher.shutdown().await;
    assert_eq!(tickets[6].wait().await, Ok(2));
    let order: Vec<u64> = h.sink.events().iter().map(Event::sequence).collect();
    assert_eq!(order, [0, 1, 2]);
}

#[tokio::test]
async fn objects_hold_sorted_runs_identical_batches_and_meta() {
    let h = start(settings(), 3);
    // Adds arrive in no particular partition order, two per partition for some.
    let keys = [
        (topic(9), 1),
        (topic(2), 4),
        (topic(9), 0),
        (topic(2), 4),
        (topic(9), 1),
    ];
    let mut next = std::collections::HashMap::new();
    let mut expect: std::collections::BTreeMap<(TopicId, i32), Vec<u8>> = Default::default();
    let producer = ProducerBatch {
        topic_id: topic(2),
        partition: 4,
        producer_id: 77,
        epoch: 1,
        first_seq: 0,
        last_seq: 5,
        base_offset: 0,
        last_offset: 5,
    };
    let mut tickets = Vec::new();
    for (i, (t, p)) in keys.iter().enumerate() {
        let first = *next.get(&(*t, *p)).unwrap_or(&100);
        let (data, n) = batches(first, 1 + i % 2, i as u8);
        next.insert((*t, *p), n);
        expect.entry((*t, *p)).or_default().extend_from_slice(&data);
        let prod: &[ProducerBatch] = if i == 1 { &[producer] } else { &[] };
        tickets.push(h.flusher.add_run(*t, *p, &data, prod).unwrap());
    }
    let file = MetaChange::FileWrite {
        path: "topics/a.json".into(),
        contents: b"{}".to_vec(),
    };
    tickets.push(h.flusher.add_meta(vec![file.clone()]).unwrap());
    h.flusher.flush_now();
    for t in &tickets {
        assert_eq!(t.wait().await, Ok(3));
    }
    let bytes = stored(&h, 3).await.expect("object 3 stored");
    let reader = ObjectReader::new(&bytes).unwrap();
    assert_eq!(
        reader.header(),
        ObjectHeader {
            writer_epoch: EPOCH.0,
            sequence: 3,
            created_ms: h.now_ms.load(Ordering::SeqCst),
        }
    );
    let runs: Vec<_> = reader.index().iter().collect();
    let got_keys: Vec<_> = runs.iter().map(|r| (r.topic_id, r.partition)).collect();
    let want_keys: Vec<_> = expect.keys().copied().collect();
    assert_eq!(got_keys, want_keys, "runs not in (topic, partition) order");
    for r in &runs {
        assert_eq!(
            reader.run(r).unwrap(),
            &expect[&(r.topic_id, r.partition)][..]
        );
    }
    let meta: Vec<MetaChange> = reader
        .meta()
        .iter()
        .map(|m| MetaChange::decode(m.kind, m.payload).unwrap().unwrap())
        .collect();
    assert_eq!(meta, vec![MetaChange::ProducerBatch(producer), file]);
    let Event::Committed(c) = &h.sink.events()[0] else {
        panic!("not committed")
    };
    assert_eq!(c.bytes, bytes);
    assert_eq!(c.runs, runs);
    assert_eq!(c.meta, meta);
    assert_eq!(c.key, key(3));
}

#[tokio::test]
async fn outcomes_are_delivered_in_sequence_order_whatever_the_put_latency() {
    let h = start(settings(), 0);
    h.faulty
        .set_latency_under(Op::Put, key(0).to_string(), Duration::from_millis(1500));
    let (a, n) = batches(0, 1, 1);
    let first = h.flusher.add_run(topic(1), 0, &a, &[]).unwrap();
    h.flusher.flush_now();
    tokio::time::sleep(Duration::from_millis(1)).await;
    let (b, _) = batches(n, 1, 2);
    let second = h.flusher.add_run(topic(1), 0, &b, &[]).unwrap();
    h.flusher.flush_now();
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(stored(&h, 1).await.is_some(), "object 1 should have landed");
    assert!(stored(&h, 0).await.is_none());
    assert!(second.outcome().is_none(), "object 1 delivered before 0");
    assert!(h.sink.events().is_empty());
    assert_eq!(second.wait().await, Ok(1));
    assert_eq!(first.outcome(), Some(Ok(0)));
    let order: Vec<u64> = h.sink.events().iter().map(Event::sequence).collect();
    assert_eq!(order, [0, 1]);
}

#[tokio::test]
async fn transient_errors_are_retried_and_a_lost_response_is_recognised() {
    let h = start(settings(), 0);
    h.faulty.fail_next(Op::Put, 3, ErrorKind::Generic);
    let (a, n) = batches(0, 1, 1);
    let t = h.flusher.add_run(topic(1), 0, &a, &[]).unwrap();
    h.flusher.flush_now();
    assert_eq!(t.wait().await, Ok(0));
    let s = h.flusher.stats();
    assert_eq!((s.puts, s.put_errors, s.retries), (4, 3, 3));

    // The PUT lands but its answer is lost: the retry finds our own header.
    h.faulty.lose_next_response(Op::Put);
    let (b, _) = batches(n, 1, 2);
    let t = h.flusher.add_run(topic(1), 0, &b, &[]).unwrap();
    h.flusher.flush_now();
    assert_eq!(t.wait().await, Ok(1));
    assert_eq!(h.faulty.calls(Op::Get), 1, "one header check");
    assert_eq!(h.flusher.stats().objects_committed, 2);
    assert!(matches!(&h.sink.events()[1], Event::Committed(c) if c.sequence == 1));
}

#[tokio::test]
async fn a_foreign_object_at_our_sequence_fences_the_flusher() {
    let h = start(settings(), 8);
    let mut w = ObjectWriter::new();
    let foreign = w
        .finish(ObjectHeader {
            writer_epoch: 6,
            sequence: 8,
            created_ms: 1,
        })
        .unwrap();
    h.faulty
        .inner()
        .put(&key(8), PutPayload::from(foreign))
        .await
        .unwrap();
    let (a, n) = batches(0, 1, 1);
    let t = h.flusher.add_run(topic(1), 0, &a, &[]).unwrap();
    h.flusher.flush_now();
    let err = t.wait().await.unwrap_err();
    assert!(matches!(err, FlushError::Fenced { .. }), "{err}");
    assert!(err.to_string().contains("epoch 6"), "{err}");
    assert!(!err.is_retriable());
    let (b, _) = batches(n, 1, 2);
    let later = h.flusher.add_run(topic(1), 0, &b, &[]).unwrap_err();
    assert!(matches!(later, FlushError::Fenced { .. }), "{later}");
    let events = h.sink.events();
    assert_eq!(events.len(), 1);
    assert!(
        matches!(&events[0], Event::Abandoned(o) if o.sequence == 8 && o.runs.len() == 1),
        "{events:?}"
    );
    h.flusher.shutdown().await;
}

#[tokio::test]
async fn an_outage_past_the_deadline_gives_up_and_lists_the_abandoned_objects() {
    let h = start(
        FlushSettings {
            put_timeout: Duration::from_secs(1),
            ..settings()
        },
        0,
    );
    h.faulty.down();
    let (a, n) = batches(0, 1, 1);
    let t0 = h.flusher.add_run(topic(1), 0, &a, &[]).unwrap();
    h.flusher.flush_now();
    tokio::time::sleep(Duration::from_millis(10)).await;
    let (b, n) = batches(n, 1, 2);
    let t1 = h.flusher.add_run(topic(1), 0, &b, &[]).unwrap();
    h.flusher.flush_now();
    let started = Instant::now();
    let e0 = t0.wait().await.unwrap_err();
    assert!(
        matches!(&e0, FlushError::GaveUp { sequence: 0, .. }),
        "{e0}"
    );
    assert!(e0.is_retriable());
    let waited = started.elapsed();
    assert!(
        waited >= Duration::from_millis(900) && waited <= Duration::from_secs(3),
        "{waited:?}"
    );
    assert!(matches!(
        t1.wait().await,
        Err(FlushError::GaveUp { sequence: 1, .. })
    ));
    assert!(h.flusher.stats().retries >= 4);

    // Object 2 PUT fails for good while object 3 lands: 3 is given up with it.
    h.faulty.up();
    h.faulty.inject(
        Rule::new(Op::Put, Fault::Error(ErrorKind::Generic))
            .probability(1.0)
            .under(key(2).to_string()),
    );
    let (c, n) = batches(n, 1, 3);
    let t2 = h.flusher.add_run(topic(1), 0, &c, &[]).unwrap();
    h.flusher.flush_now();
    tokio::time::sleep(Duration::from_millis(10)).await;
    let (d, n) = batches(n, 1, 4);
    let t3 = h.flusher.add_run(topic(1), 0, &d, &[]).unwrap();
    h.flusher.flush_now();
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert!(stored(&h, 3).await.is_some(), "object 3 landed");
    assert!(t3.outcome().is_none(), "object 3 must wait for object 2");
    assert!(matches!(
        t2.wait().await,
        Err(FlushError::GaveUp { sequence: 2, .. })
    ));
    assert!(matches!(
        t3.wait().await,
        Err(FlushError::GaveUp { sequence: 3, .. })
    ));

    h.faulty.clear_faults();
    let (e, n) = batches(n, 1, 5);
    let t4 = h.flusher.add_run(topic(1), 0, &e, &[]).unwrap();
    h.flusher.flush_now();
    assert_eq!(t4.wait().await, Ok(4));
    let (f, _) = batches(n, 1, 6);
    let t5 = h.flusher.add_run(topic(1), 0, &f, &[]).unwrap();
    h.flusher.flush_now();
    assert_eq!(t5.wait().await, Ok(5));

    let events = h.sink.events();
    let kinds: Vec<(u64, bool)> = events
        .iter()
        .map(|e| (e.sequence(), matches!(e, Event::Committed(_))))
        .collect();
    assert_eq!(
        kinds,
        [
            (0, false),
            (1, false),
            (2, false),
            (3, false),
            (4, true),
            (5, true)
        ]
    );
    let Event::Committed(c4) = &events[4] else {
        unreachable!()
    };
    assert_eq!(c4.meta, vec![MetaChange::Abandoned(vec![0, 1, 2, 3])]);
    let reader = ObjectReader::new(&c4.bytes).unwrap();
    assert_eq!(reader.meta().len(), 1);
    let Event::Committed(c5) = &events[5] else {
        unreachable!()
    };
    assert!(c5.meta.is_empty(), "the list is written until one commits");
    let s = h.flusher.stats();
    assert_eq!((s.objects_abandoned, s.objects_committed), (4, 2));
}

#[tokio::test]
async fn the_backlog_is_bounded_and_refused_at_once() {
    let (one, _) = batches(0, 1, 0);
    let h = start(
        FlushSettings {
            max_bytes: one.len(),
            puts_in_flight: 1,
            sealed_max: 2,
            put_timeout: Duration::from_secs(60),
            ..settings()
        },
        0,
    );
    h.faulty.down();
    let mut next = 0;
    let mut tickets = Vec::new();
    let refused = loop {
        let (data, n) = batches(next, 1, 1);
        match h.flusher.add_run(topic(1), 0, &data, &[]) {
            Ok(t) => {
                tickets.push(t);
                next = n;
            }
            Err(e) => break e,
        }
        // Let the task move a sealed object into the PUT window.
        tokio::time::sleep(Duration::from_millis(1)).await;
        assert!(tickets.len() < 10, "no backlog bound");
    };
    assert!(
        matches!(refused, FlushError::Backlog { sealed: 2, .. }),
        "{refused}"
    );
    assert!(refused.is_retriable());
    // One in the PUT window, two sealed, one open (full).
    assert_eq!(tickets.len(), 4);
    let s = h.flusher.stats();
    assert_eq!((s.in_flight, s.sealed_waiting), (1, 2));
    h.faulty.up();
    for (i, t) in tickets.iter().enumerate() {
        assert_eq!(t.wait().await, Ok(i as u64));
    }
    let (data, _) = batches(next, 1, 1);
    h.flusher.add_run(topic(1), 0, &data, &[]).unwrap();
}

#[tokio::test]
async fn a_lost_lease_stops_every_put() {
    let h = start(settings(), 0);
    let (a, n) = batches(0, 1, 1);
    let t = h.flusher.add_run(topic(1), 0, &a, &[]).unwrap();
    h.lease
        .send(LeaseStatus::Lost(Arc::new(LeaseError::Expired {
            prefix: PREFIX.into(),
            expired_ago_ms: 1,
            last_error: "down".into(),
        })))
        .unwrap();
    let err = t.wait().await.unwrap_err();
    assert!(matches!(err, FlushError::LeaseLost { .. }), "{err}");
    assert_eq!(h.faulty.calls(Op::Put), 0, "PUT after the lease was lost");
    let (b, _) = batches(n, 1, 2);
    let later = h.flusher.add_run(topic(1), 0, &b, &[]).unwrap_err();
    assert!(matches!(later, FlushError::LeaseLost { .. }), "{later}");
    h.flusher.shutdown().await;
}

#[tokio::test]
async fn a_lapsed_lease_holds_puts_until_it_is_renewed_or_the_deadline_passes() {
    let h = start(
        FlushSettings {
            put_timeout: Duration::from_secs(1),
            ..settings()
        },
        0,
    );
    let lapse_at = h.now_ms.load(Ordering::SeqCst) + 100;
    let held = |valid_until_ms| LeaseStatus::Held {
        epoch: EPOCH,
        valid_until_ms,
        renew_error: None,
    };
    h.lease.send(held(lapse_at)).unwrap();
    let (a, n) = batches(0, 1, 1);
    let t0 = h.flusher.add_run(topic(1), 0, &a, &[]).unwrap();
    // The validity runs out (by the lease clock) before the linger seals the object.
    h.now_ms.store(lapse_at, Ordering::SeqCst);
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(h.faulty.calls(Op::Put), 0, "PUT while the lease had lapsed");
    assert!(t0.outcome().is_none());
    // Adds are still taken; a renewal at the same epoch lets both objects through.
    let (b, n) = batches(n, 1, 2);
    let t1 = h.flusher.add_run(topic(1), 0, &b, &[]).unwrap();
    h.lease.send(held(lapse_at + 10_000)).unwrap();
    assert_eq!(t0.wait().await, Ok(0));
    assert_eq!(t1.wait().await, Ok(1));

    // A lapse that outlasts the deadline gives the object up, retriably.
    h.now_ms.store(lapse_at + 10_000, Ordering::SeqCst);
    let (c, _) = batches(n, 1, 3);
    let t2 = h.flusher.add_run(topic(1), 0, &c, &[]).unwrap();
    let err = t2.wait().await.unwrap_err();
    assert!(
        matches!(&err, FlushError::GaveUp { sequence: 2, last_error, .. } if last_error.contains("lapsed")),
        "{err}"
    );
    assert!(err.is_retriable());
    assert_eq!(h.faulty.calls(Op::Put), 2);
}

#[tokio::test]
async fn bad_input_is_refused_alone_and_shutdown_drains() {
    let h = start(settings(), 0);
    let (a, n) = batches(5, 2, 1);
    let ok = h.flusher.add_run(topic(1), 0, &a, &[]).unwrap();
    // Offsets that do not follow the partition's previous add.
    let (back, _) = batches(3, 1, 2);
    let e = h.flusher.add_run(topic(1), 0, &back, &[]).unwrap_err();
    assert!(matches!(e, FlushError::Format(_)), "{e}");
    // A corrupt batch (CRC).
    let (mut bad, _) = batches(n, 1, 3);
    let last = bad.len() - 1;
    bad[last] ^= 0xff;
    assert!(matches!(
        h.flusher.add_run(topic(1), 0, &bad, &[]),
        Err(FlushError::Format(_))
    ));
    assert!(matches!(
        h.flusher.add_run(topic(1), -1, &a, &[]),
        Err(FlushError::Format(_))
    ));
    assert!(matches!(
        h.flusher.add_run(topic(1), 0, &[], &[]),
        Err(FlushError::Format(_))
    ));
    assert!(matches!(
        h.flusher.add_meta(vec![]),
        Err(FlushError::Empty { .. })
    ));
    let huge = vec![0u8; (1 << 20) * 4 + 1];
    assert!(matches!(
        h.flusher.add_run(topic(1), 0, &huge, &[]),
        Err(FlushError::TooLarge { .. })
    ));
    // Shutdown seals the open object and waits for it.
    h.flusher.shutdown().await;
    assert_eq!(ok.outcome(), Some(Ok(0)));
    assert_eq!(
        h.flusher.add_run(topic(1), 0, &a, &[]).unwrap_err(),
        FlushError::ShuttingDown
    );
}

#[tokio::test]
async fn dropping_the_flusher_still_writes_what_it_holds() {
    let h = start(settings(), 0);
    let (a, _) = batches(0, 1, 1);
    let t = h.flusher.add_run(topic(1), 0, &a, &[]).unwrap();
    drop(h.flusher);
    assert_eq!(t.wait().await, Ok(0));
    assert!(h.faulty.inner().head(&key(0)).await.is_ok());
}
