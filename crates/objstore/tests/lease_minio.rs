//! The writer lease (`sluice_objstore::lease`) against a real MinIO, and first the S3 fact it
//! is built on: conditional update (`If-Match` on the ETag) works with this MinIO and
//! `object_store` 0.14.
//!
//! Each test starts its own MinIO (`sluice_testkit::MinioServer`) and is bounded in time.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicI64, Ordering};
use std::time::{Duration, Instant};

use object_store::path::Path;
use object_store::{Error, ObjectStore, ObjectStoreExt, PutMode, PutPayload, UpdateVersion};
use sluice_objstore::bucket::{self, BucketConfig, StorageUrl};
use sluice_objstore::lease::{
    Epoch, Lease, LeaseClock, LeaseError, LeaseRecord, LeaseSettings, LeaseStatus, SystemClock,
};
use sluice_testkit::MinioServer;

/// The per-request bound of the test client (connect and whole request).
const REQUEST_TIMEOUT: Duration = Duration::from_secs(2);
const CONNECT_TIMEOUT: Duration = Duration::from_secs(1);
/// The bound on all retries of one operation.
const RETRY_TIMEOUT: Duration = Duration::from_secs(3);

/// An S3 client for the bucket of `minio`, opened as the broker opens its bucket
/// (`bucket::open`), with the tighter bounds above.
fn s3(minio: &MinioServer) -> Arc<dyn ObjectStore> {
    let env: HashMap<&str, String> = minio.env_vars().into_iter().collect();
    let url = StorageUrl::parse(&format!("s3://{}", minio.bucket())).unwrap();
    let mut config = BucketConfig::from_env(url, |name| env.get(name).cloned()).unwrap();
    config.connect_timeout = CONNECT_TIMEOUT;
    config.request_timeout = REQUEST_TIMEOUT;
    config.retries_max = 3;
    config.retry_timeout = RETRY_TIMEOUT;
    Arc::clone(bucket::open(config).expect("open the bucket").store())
}

#[tokio::test]
async fn minio_supports_conditional_update_on_the_etag() {
    let minio = MinioServer::start();
    let s3 = s3(&minio);
    let path = Path::from("prefix/writer");

    let first = s3
        .put_opts(
            &path,
            PutPayload::from_static(b"v1"),
            PutMode::Create.into(),
        )
        .await
        .unwrap();
    eprintln!(
        "create: e_tag {:?}, version {:?}",
        first.e_tag, first.version
    );
    assert!(first.e_tag.is_some(), "MinIO must return an ETag");

    // If-Match on the current ETag replaces the object and returns a new ETag.
    let second = s3
        .put_opts(
            &path,
            PutPayload::from_static(b"v2"),
            PutMode::Update(UpdateVersion::from(first.clone())).into(),
        )
        .await
        .expect("If-Match on the current ETag must succeed");
    eprintln!(
        "update: e_tag {:?}, version {:?}",
        second.e_tag, second.version
    );
    assert_ne!(second.e_tag, first.e_tag);

    // If-Match on a stale ETag is refused (412 → Precondition) and changes nothing.
    let stale = s3
        .put_opts(
            &path,
            PutPayload::from_static(b"v3"),
            PutMode::Update(UpdateVersion::from(first.clone())).into(),
        )
        .await
        .expect_err("If-Match on a stale ETag must fail");
    eprintln!("update on a stale ETag: {stale}");
    assert!(matches!(stale, Error::Precondition { .. }), "{stale:?}");
    let body = s3.get(&path).await.unwrap().bytes().await.unwrap();
    assert_eq!(body.as_ref(), b"v2");

    // The ETag a GET reports is the one a conditional update must name.
    let got = s3.get(&path).await.unwrap();
    assert_eq!(got.meta.e_tag, second.e_tag);

    // If-Match on a missing object is refused too (object_store maps 404 to Precondition).
    let missing = s3
        .put_opts(
            &Path::from("prefix/none"),
            PutPayload::from_static(b"x"),
            PutMode::Update(UpdateVersion::from(second.clone())).into(),
        )
        .await
        .expect_err("If-Match on a missing object must fail");
    eprintln!("update of a missing object: {missing}");
    assert!(matches!(missing, Error::Precondition { .. }), "{missing:?}");
    assert!(matches!(
        s3.head(&Path::from("prefix/none")).await,
        Err(Error::NotFound { .. })
    ));

    // Racing updates on one ETag: exactly one wins.
    let mut tasks = Vec::new();
    for writer in 0..8u8 {
        let (s3, path, version) = (
            s3.clone(),
            path.clone(),
            UpdateVersion::from(second.clone()),
        );
        tasks.push(tokio::spawn(async move {
            let body = PutPayload::from(vec![writer; 16]);
            (
                writer,
                s3.put_opts(&path, body, PutMode::Update(version).into())
                    .await,
            )
        }));
    }
    let mut winners = Vec::new();
    for task in tasks {
        match task.await.unwrap() {
            (writer, Ok(_)) => winners.push(writer),
            (_, Err(Error::Precondition { .. })) => {}
            (writer, Err(e)) => panic!("writer {writer}: unexpected error {e:?}"),
        }
    }
    assert_eq!(winners.len(), 1, "winners: {winners:?}");
    let body = s3.get(&path).await.unwrap().bytes().await.unwrap();
    assert_eq!(body.as_ref(), &[winners[0]; 16][..]);
}

/// A clock that moves only when told to.
#[derive(Clone)]
struct ManualClock(Arc<AtomicI64>);

impl ManualClock {
    fn new() -> ManualClock {
        ManualClock(Arc::new(AtomicI64::new(1_764_000_000_000)))
    }
    fn advance_ms(&self, ms: i64) {
        self.0.fetch_add(ms, Ordering::SeqCst);
    }
    fn now_ms(&self) -> i64 {
        self.0.load(Ordering::SeqCst)
    }
    fn as_lease_clock(&self) -> Arc<dyn LeaseClock> {
        let now = Arc::clone(&self.0);
        Arc::new(move || now.load(Ordering::SeqCst))
    }
}

/// One broker's view: the bucket, a prefix, a clock and the default settings.
struct Broker {
    store: Arc<dyn ObjectStore>,
    prefix: Path,
    clock: Arc<dyn LeaseClock>,
    settings: LeaseSettings,
}

impl Broker {
    fn new(minio: &MinioServer, clock: &ManualClock) -> Broker {
        Broker {
            store: s3(minio),
            prefix: Path::from("tenant/events"),
            clock: clock.as_lease_clock(),
            settings: LeaseSettings::default(),
        }
    }
    async fn acquire(&self) -> Result<Lease, LeaseError> {
        Lease::acquire(
            Arc::clone(&self.store),
            &self.prefix,
            Arc::clone(&self.clock),
            self.settings,
        )
        .await
    }
    /// The lease object as stored.
    async fn stored(&self) -> LeaseRecord {
        let body = self
            .store
            .get(&self.prefix.clone().join("writer"))
            .await
            .unwrap()
            .bytes()
            .await
            .unwrap();
        LeaseRecord::decode(&body).unwrap()
    }
}

fn this_host() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .unwrap()
        .trim()
        .to_owned()
}

#[tokio::test]
async fn first_acquire_creates_the_lease_at_epoch_1() {
    let minio = MinioServer::start();
    let clock = ManualClock::new();
    let broker = Broker::new(&minio, &clock);
    let lease = broker.acquire().await.unwrap();

    assert_eq!(lease.epoch(), Epoch(1));
    assert_eq!(lease.valid_until_ms(), clock.now_ms() + 10_000);
    assert!(lease.is_valid());
    let stored = broker.stored().await;
    assert_eq!(&stored, lease.record());
    assert_eq!(stored.host, this_host());
    assert_eq!(stored.pid, std::process::id());
    assert_eq!(stored.renewed_ms, clock.now_ms());
    assert_eq!(stored.duration_ms, 10_000);
    assert!(!stored.released);
    eprintln!("the lease object:\n{}", stored.encode());
}

#[tokio::test]
async fn second_acquire_while_held_is_refused_naming_the_holder() {
    let minio = MinioServer::start();
    let clock = ManualClock::new();
    let broker = Broker::new(&minio, &clock);
    let mut first = broker.acquire().await.unwrap();

    clock.advance_ms(2_300);
    let err = broker.acquire().await.unwrap_err();
    eprintln!("second broker: {err}");
    assert_eq!(
        err.to_string(),
        format!(
            "another broker (host {}, pid {}, renewed 2 s ago) writes to prefix tenant/events; \
             stop it or use another prefix",
            this_host(),
            std::process::id()
        )
    );
    match &err {
        LeaseError::Held {
            writer_id, epoch, ..
        } => {
            assert_eq!(*writer_id, first.writer_id());
            assert_eq!(*epoch, Epoch(1));
        }
        other => panic!("want Held, got {other:?}"),
    }
    // The refused broker changed nothing, and the holder renews as before.
    assert_eq!(&broker.stored().await, first.record());
    first.renew().await.unwrap();
    // Held up to the last millisecond of the holder's duration after its renewal.
    clock.advance_ms(9_999);
    assert!(matches!(
        broker.acquire().await,
        Err(LeaseError::Held { .. })
    ));
}

#[tokio::test]
async fn takeover_after_expiry_bumps_the_epoch_and_fences_the_old_holder() {
    let minio = MinioServer::start();
    let clock = ManualClock::new();
    let broker = Broker::new(&minio, &clock);
    let mut old = broker.acquire().await.unwrap();

    clock.advance_ms(10_000);
    assert!(!old.is_valid());
    let mut new = broker.acquire().await.unwrap();
    assert_eq!(new.epoch(), Epoch(2));
    assert_ne!(new.writer_id(), old.writer_id());
    assert_eq!(new.record().started_ms, clock.now_ms());

    let err = old.renew().await.unwrap_err();
    eprintln!("old holder's renewal: {err}");
    assert!(matches!(err, LeaseError::Fenced { .. }), "{err:?}");
    assert_eq!(
        err.to_string(),
        format!(
            "fenced: another broker (host {}, pid {}, epoch 2) took over the writer lease on \
             prefix tenant/events; this broker must stop writing",
            this_host(),
            std::process::id()
        )
    );
    // The fenced holder's release changes nothing either.
    let err = old.release().await.unwrap_err();
    assert!(matches!(err, LeaseError::Fenced { .. }), "{err:?}");
    new.renew().await.unwrap();
    let stored = broker.stored().await;
    assert_eq!(&stored, new.record());
    assert_eq!(stored.writes, 2);
}

#[tokio::test]
async fn racing_acquires_exactly_one_wins() {
    let minio = MinioServer::start();
    let clock = ManualClock::new();
    let broker = Arc::new(Broker::new(&minio, &clock));

    // Round 1 races to create the lease on a fresh prefix; round 2 races to take over the
    // expired lease of round 1's winner.
    for (round, want_epoch) in [(1, Epoch(1)), (2, Epoch(2))] {
        if round == 2 {
            clock.advance_ms(10_000);
        }
        let mut tasks = Vec::new();
        for _ in 0..8 {
            let broker = Arc::clone(&broker);
            tasks.push(tokio::spawn(async move { broker.acquire().await }));
        }
        let mut winners = Vec::new();
        let mut refusals = Vec::new();
        for task in tasks {
            match task.await.unwrap() {
                Ok(lease) => winners.push(lease),
                Err(e @ LeaseError::Held { .. }) => refusals.push(e),
                Err(e) => panic!("round {round}: unexpected error {e:?}"),
            }
        }
        assert_eq!(winners.len(), 1, "round {round}: {winners:?}");
        let winner = &winners[0];
        assert_eq!(winner.epoch(), want_epoch);
        assert_eq!(&broker.stored().await, winner.record());
        // Every loser was told about the winner.
        for refusal in &refusals {
            let LeaseError::Held {
                writer_id, epoch, ..
            } = refusal
            else {
                unreachable!()
            };
            assert_eq!((*writer_id, *epoch), (winner.writer_id(), want_epoch));
        }
        eprintln!(
            "round {round}: 1 winner at epoch {want_epoch}, {} refused",
            refusals.len()
        );
    }
}

#[tokio::test]
async fn release_then_acquire_works_at_once() {
    let minio = MinioServer::start();
    let clock = ManualClock::new();
    let broker = Broker::new(&minio, &clock);

    let first = broker.acquire().await.unwrap();
    first.release().await.unwrap();
    let stored = broker.stored().await;
    assert!(stored.released);
    // Same instant: no waiting out the duration after a clean release.
    let second = broker.acquire().await.unwrap();
    assert_eq!(second.epoch(), Epoch(2));

    // The same through the keeper's clean shutdown.
    let keeper = second.keep();
    assert_eq!(keeper.writable_epoch(), Some(Epoch(2)));
    keeper.shutdown().await.unwrap();
    let third = broker.acquire().await.unwrap();
    assert_eq!(third.epoch(), Epoch(3));
}

#[tokio::test]
async fn renewal_with_a_lost_answer_is_recognised_as_its_own() {
    let minio = MinioServer::start();
    let clock = ManualClock::new();
    let broker = Broker::new(&minio, &clock);
    let mut lease = broker.acquire().await.unwrap();

    // MinIO frozen: the renewal times out; its PUT may still be applied after the resume.
    minio.pause();
    clock.advance_ms(3_000);
    let started = Instant::now();
    let err = lease.renew().await.unwrap_err();
    eprintln!(
        "renewal while MinIO hangs, after {:?}: {err}",
        started.elapsed()
    );
    // The client's request timeout or the lease's operation bound, whichever ends first.
    assert!(
        matches!(err, LeaseError::Timeout { .. } | LeaseError::Store { .. }),
        "{err:?}"
    );
    assert!(started.elapsed() < Duration::from_secs(3));
    assert!(
        lease.is_valid(),
        "one failed renewal must not lose the lease"
    );
    minio.resume();
    tokio::time::sleep(Duration::from_millis(300)).await;

    // Whether or not that PUT landed, the next renewal succeeds and the lease stays ours.
    lease.renew().await.unwrap();
    assert_eq!(lease.epoch(), Epoch(1));
    assert_eq!(&broker.stored().await, lease.record());
}

#[tokio::test]
async fn minio_killed_renewals_fail_within_a_bound_the_lease_lapses_and_comes_back_at_the_same_epoch()
 {
    let mut minio = MinioServer::start();
    // Real time here: the keeper renews on tokio's timer, and validity is by the clock.
    let clock: Arc<dyn LeaseClock> = Arc::new(SystemClock);
    let settings = LeaseSettings {
        duration: Duration::from_millis(3_000),
        renew_interval: Duration::from_millis(1_000),
        op_timeout: Duration::from_millis(1_000),
    };
    let store = s3(&minio);
    let prefix = Path::from("p");
    let lease = Lease::acquire(Arc::clone(&store), &prefix, Arc::clone(&clock), settings)
        .await
        .unwrap();
    let keeper = lease.keep();
    let mut status = keeper.status();

    // A few renewals go through.
    tokio::time::sleep(Duration::from_millis(2_500)).await;
    let valid_until = match &*status.borrow_and_update() {
        LeaseStatus::Held {
            valid_until_ms,
            renew_error: None,
            ..
        } => *valid_until_ms,
        other => panic!("want Held without error, got {other:?}"),
    };
    assert!(
        valid_until > clock.now_ms() + 1_000,
        "renewals did not happen"
    );

    minio.kill();
    let killed = Instant::now();
    let killed_ms = clock.now_ms();
    // The first renewal after the kill reports an error within interval + op timeout.
    let bound = settings.renew_interval + settings.op_timeout + Duration::from_millis(500);
    let (error_after, valid_until) = loop {
        tokio::time::timeout(bound.saturating_sub(killed.elapsed()), status.changed())
            .await
            .expect("no renewal error reported in time")
            .unwrap();
        match &*status.borrow_and_update() {
            LeaseStatus::Held {
                renew_error: Some(e),
                valid_until_ms,
                ..
            } => {
                eprintln!("renewal error {:?} after the kill: {e}", killed.elapsed());
                break (killed.elapsed(), *valid_until_ms);
            }
            LeaseStatus::Held { .. } => continue, // a renewal that made it before the kill
            other => panic!("lost at once: {other:?}"),
        }
    };
    assert!(error_after < bound);
    // Still ours until the validity runs out: the holder may keep acknowledging until then.
    assert!(
        valid_until > killed_ms,
        "validity {valid_until} before the kill {killed_ms}"
    );
    if clock.now_ms() < valid_until - 100 {
        assert_eq!(keeper.writable_epoch(), Some(Epoch(1)));
    }

    // Then lapsed: no longer writable once the validity has run out, but not lost.
    while clock.now_ms() < valid_until + 50 {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(keeper.writable_epoch(), None);
    assert!(
        !matches!(&*status.borrow(), LeaseStatus::Lost(_)),
        "a lapsed lease is not lost"
    );

    // MinIO comes back: the next renewal (conditional on this writer's version) proves that
    // nobody took the lease, and writing resumes at the same epoch.
    minio.restart();
    let resumed = tokio::time::timeout(Duration::from_secs(15), async {
        loop {
            status.changed().await.unwrap();
            if keeper.writable_epoch().is_some() {
                return;
            }
        }
    })
    .await;
    assert!(
        resumed.is_ok(),
        "the lease did not come back after MinIO did"
    );
    assert_eq!(keeper.writable_epoch(), Some(Epoch(1)));
    let err = Lease::acquire(store, &prefix, clock, settings)
        .await
        .unwrap_err();
    assert!(err.is_other_writer(), "{err}");
    keeper.shutdown().await.unwrap();
}
