//! The flusher (`sluice_objstore::flush`) against a real MinIO: objects committed and
//! readable, create-if-absent fencing a second writer, and a hung MinIO (SIGSTOP) delaying
//! acknowledgements without losing any.
//!
//! Each test starts its own MinIO (`sluice_testkit::MinioServer`) and is bounded in time.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use object_store::ObjectStoreExt;
use sluice_batch::{BatchBuilder, RecordRef};
use sluice_objstore::bucket::{self, Bucket, BucketConfig, StorageUrl};
use sluice_objstore::flush::{
    AbandonedObject, CommittedObject, FlushError, FlushSettings, FlushSink, Flusher, Ticket,
};
use sluice_objstore::lease::{Epoch, LeaseClock, LeaseStatus, SystemClock};
use sluice_objstore::{ObjectReader, TopicId, patch_base_offsets};
use sluice_testkit::MinioServer;
use tokio::sync::watch;

/// Bounds of the test client: a paused MinIO shows up as a timeout within these.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(2);
const CONNECT_TIMEOUT: Duration = Duration::from_secs(1);
const RETRY_TIMEOUT: Duration = Duration::from_secs(3);
/// The bound on any one wait in these tests.
const WAIT_MAX: Duration = Duration::from_secs(30);

fn open_bucket(minio: &MinioServer, prefix: &str) -> Bucket {
    let env: HashMap<&str, String> = minio.env_vars().into_iter().collect();
    let url = StorageUrl::parse(&format!("s3://{}/{prefix}", minio.bucket())).unwrap();
    let mut config = BucketConfig::from_env(url, |name| env.get(name).cloned()).unwrap();
    config.connect_timeout = CONNECT_TIMEOUT;
    config.request_timeout = REQUEST_TIMEOUT;
    config.retries_max = 1;
    config.retry_timeout = RETRY_TIMEOUT;
    bucket::open(config).expect("open the bucket")
}

#[derive(Default)]
struct Recorder {
    committed: Mutex<Vec<u64>>,
    abandoned: Mutex<Vec<(u64, FlushError)>>,
}

impl FlushSink for Recorder {
    fn committed(&self, object: &CommittedObject) {
        self.committed.lock().unwrap().push(object.sequence);
    }
    fn abandoned(&self, object: &AbandonedObject) {
        self.abandoned
            .lock()
            .unwrap()
            .push((object.sequence, object.error.clone()));
    }
}

struct Writer {
    flusher: Flusher,
    sink: Arc<Recorder>,
    _lease: watch::Sender<LeaseStatus>,
    next_offset: i64,
}

fn writer(bucket: Bucket, epoch: u64, next_sequence: u64) -> Writer {
    let (lease, rx) = watch::channel(LeaseStatus::Held {
        epoch: Epoch(epoch),
        valid_until_ms: i64::MAX,
        renew_error: None,
    });
    let clock: Arc<dyn LeaseClock> = Arc::new(SystemClock);
    let sink = Arc::new(Recorder::default());
    let settings = FlushSettings {
        linger: Duration::from_millis(50),
        ..FlushSettings::default()
    };
    let flusher = Flusher::start(
        bucket,
        Epoch(epoch),
        next_sequence,
        rx,
        clock,
        settings,
        sink.clone(),
    );
    Writer {
        flusher,
        sink,
        _lease: lease,
        next_offset: 0,
    }
}

impl Writer {
    /// Adds one batch of two records to topic 1 partition 0.
    fn add(&mut self, tag: u8) -> Result<Ticket, FlushError> {
        let mut data = Vec::new();
        let mut b = BatchBuilder::new(&mut data);
        for r in 0..2u8 {
            b.push(&RecordRef {
                key: None,
                value: Some(&[tag, r]),
                headers: &[],
                timestamp_ms: 1_000,
            });
        }
        b.finish();
        let next = patch_base_offsets(&mut data, self.next_offset).unwrap();
        let ticket = self.flusher.add_run(TopicId([1; 16]), 0, &data, &[])?;
        self.next_offset = next;
        Ok(ticket)
    }
}

async fn wait(ticket: &Ticket) -> Result<u64, FlushError> {
    tokio::time::timeout(WAIT_MAX, ticket.wait())
        .await
        .expect("the ticket resolves within the bound")
}

async fn read_object(bucket: &Bucket, sequence: u64) -> bytes::Bytes {
    let key = bucket.key(&sluice_objstore::object_name("", sequence));
    bucket
        .store()
        .get(&key)
        .await
        .unwrap_or_else(|e| panic!("object {sequence}: {e}"))
        .bytes()
        .await
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn objects_commit_and_a_second_writer_is_fenced() {
    let minio = MinioServer::start();
    let bucket = open_bucket(&minio, "flush");
    let mut first = writer(bucket.clone(), 1, 0);
    for seq in 0..3u64 {
        let t = first.add(seq as u8).unwrap();
        assert_eq!(wait(&t).await, Ok(seq));
        let bytes = read_object(&bucket, seq).await;
        let reader = ObjectReader::new(&bytes).unwrap();
        assert_eq!(reader.header().writer_epoch, 1);
        assert_eq!(reader.header().sequence, seq);
        assert_eq!(reader.index().len(), 1);
    }
    assert_eq!(*first.sink.committed.lock().unwrap(), [0, 1, 2]);

    // A second writer (a later epoch) that believes sequence 2 is free: create-if-absent
    // refuses it, and the header it reads back names the first writer's epoch.
    let mut second = writer(bucket.clone(), 2, 2);
    let t = second.add(9).unwrap();
    let err = wait(&t).await.unwrap_err();
    eprintln!("second writer: {err}");
    assert!(matches!(err, FlushError::Fenced { .. }), "{err}");
    assert!(err.to_string().contains("epoch 1"), "{err}");
    assert!(matches!(second.add(10), Err(FlushError::Fenced { .. })));
    // The first writer's object is untouched.
    let bytes = read_object(&bucket, 2).await;
    assert_eq!(ObjectReader::new(&bytes).unwrap().header().writer_epoch, 1);
    second.flusher.shutdown().await;
    first.flusher.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_paused_minio_delays_acknowledgements_but_loses_none() {
    let minio = MinioServer::start();
    let bucket = open_bucket(&minio, "pause");
    let mut w = writer(bucket.clone(), 1, 0);
    let mut acked = Vec::new();
    for i in 0..3u8 {
        acked.push(wait(&w.add(i).unwrap()).await.unwrap());
    }

    minio.pause();
    let paused_at = Instant::now();
    // Four objects: two in the PUT window (hung on MinIO), two sealed behind them.
    let mut during = Vec::new();
    for i in 10..14u8 {
        during.push(w.add(i).unwrap());
        w.flusher.flush_now();
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    tokio::time::sleep(Duration::from_secs(4)).await;
    for t in &during {
        assert!(t.outcome().is_none(), "acknowledged while MinIO was paused");
    }
    minio.resume();
    for t in &during {
        acked.push(wait(t).await.expect("committed after the pause"));
    }
    eprintln!(
        "acknowledged {:?} after {:?}; stats {:?}",
        acked,
        paused_at.elapsed(),
        w.flusher.stats()
    );
    assert_eq!(acked, (0..7).collect::<Vec<u64>>());
    assert_eq!(*w.sink.committed.lock().unwrap(), acked);
    // Every acknowledged object is in the bucket, intact.
    for seq in &acked {
        let bytes = read_object(&bucket, *seq).await;
        assert_eq!(ObjectReader::new(&bytes).unwrap().header().sequence, *seq);
    }
    assert!(w.sink.abandoned.lock().unwrap().is_empty());
    w.flusher.shutdown().await;
}
