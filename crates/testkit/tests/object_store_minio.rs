//! What object-storage mode relies on, proven with the `object_store` crate against a real
//! MinIO: plain and ranged reads, create-if-absent writes (the fence against a second writer),
//! prefix listing, deletes, the errors a misconfigured bucket or credentials give, and what a
//! client sees while MinIO is dead or hung and after it comes back.
//!
//! Each test starts its own MinIO (`sluice_testkit::MinioServer`) and is bounded in time.

use std::sync::Arc;
use std::time::{Duration, Instant};

use futures_util::StreamExt;
use object_store::aws::{AmazonS3, AmazonS3Builder};
use object_store::path::Path;
use object_store::{
    BackoffConfig, ClientOptions, Error, ObjectStore, ObjectStoreExt, PutMode, PutOptions,
    PutPayload, RetryConfig,
};
use sluice_testkit::MinioServer;

/// The per-request bound the client is given in these tests (connect and whole request).
const REQUEST_TIMEOUT: Duration = Duration::from_secs(2);
const CONNECT_TIMEOUT: Duration = Duration::from_secs(1);
/// The bound on all retries of one operation.
const RETRY_TIMEOUT: Duration = Duration::from_secs(4);

fn retry() -> RetryConfig {
    RetryConfig {
        backoff: BackoffConfig {
            init_backoff: Duration::from_millis(50),
            max_backoff: Duration::from_millis(500),
            base: 2.0,
        },
        max_retries: 3,
        retry_timeout: RETRY_TIMEOUT,
    }
}

/// An S3 client for `bucket` on `minio`, with the given credentials.
fn store_with(minio: &MinioServer, bucket: &str, access: &str, secret: &str) -> AmazonS3 {
    AmazonS3Builder::new()
        .with_endpoint(minio.endpoint())
        .with_region(minio.region())
        .with_bucket_name(bucket)
        .with_access_key_id(access)
        .with_secret_access_key(secret)
        // MinIO on 127.0.0.1 serves path-style URLs (http://host:port/bucket/key).
        .with_virtual_hosted_style_request(false)
        // Plain HTTP must be allowed in the ClientOptions themselves: `with_client_options`
        // replaces the whole options, including an earlier `with_allow_http(true)`.
        .with_client_options(
            ClientOptions::new()
                .with_allow_http(true)
                .with_timeout(REQUEST_TIMEOUT)
                .with_connect_timeout(CONNECT_TIMEOUT),
        )
        .with_retry(retry())
        .build()
        .expect("build the S3 client")
}

fn store(minio: &MinioServer) -> AmazonS3 {
    store_with(
        minio,
        minio.bucket(),
        minio.access_key(),
        minio.secret_key(),
    )
}

/// `len` bytes that differ at every offset within 251 bytes, so a shifted range is caught.
fn pattern(len: usize) -> Vec<u8> {
    (0..len).map(|i| (i % 251) as u8).collect()
}

#[tokio::test]
async fn put_get_and_ranged_get_return_exact_bytes() {
    let minio = MinioServer::start();
    let s3 = store(&minio);
    let path = Path::from("objects/00000000000000000001");
    let data = pattern(100_000);

    s3.put(&path, PutPayload::from(data.clone())).await.unwrap();
    let all = s3.get(&path).await.unwrap().bytes().await.unwrap();
    assert_eq!(all.as_ref(), &data[..]);
    assert_eq!(s3.head(&path).await.unwrap().size, 100_000);

    for range in [0..1, 1000..5096, 99_999..100_000, 0..100_000] {
        let got = s3.get_range(&path, range.clone()).await.unwrap();
        let want = &data[range.start as usize..range.end as usize];
        assert_eq!(got.as_ref(), want, "range {range:?}");
    }
    // Several ranges of one object in one call (object_store may merge nearby ones into
    // one GET; each answer must still be exactly its range).
    let ranges = [10..20, 30..40, 50_000..50_100];
    let got = s3.get_ranges(&path, &ranges).await.unwrap();
    for (range, bytes) in ranges.iter().zip(&got) {
        assert_eq!(
            bytes.as_ref(),
            &data[range.start as usize..range.end as usize]
        );
    }
    // A range that starts past the end is an error, not a short or empty read.
    let err = s3.get_range(&path, 200_000..200_010).await.unwrap_err();
    eprintln!("range past the end: {err}");
}

#[tokio::test]
async fn create_if_absent_fences_a_second_writer() {
    let minio = MinioServer::start();
    let s3 = store(&minio);
    let path = Path::from("prefix/seq/00000000000000000007");
    let create = || PutOptions::from(PutMode::Create);

    s3.put_opts(&path, PutPayload::from_static(b"first writer"), create())
        .await
        .expect("create-if-absent of a new key succeeds");
    let err = s3
        .put_opts(&path, PutPayload::from_static(b"second writer"), create())
        .await
        .expect_err("create-if-absent of an existing key must fail");
    eprintln!("second create: {err}");
    assert!(
        matches!(err, Error::AlreadyExists { .. }),
        "want AlreadyExists, got {err:?}"
    );
    let kept = s3.get(&path).await.unwrap().bytes().await.unwrap();
    assert_eq!(kept.as_ref(), b"first writer");

    // Racing writers: of 8 concurrent creates of one key exactly one wins, and the object
    // holds the winner's bytes.
    let s3 = Arc::new(s3);
    let race = Path::from("prefix/seq/00000000000000000008");
    let mut tasks = Vec::new();
    for writer in 0..8u8 {
        let (s3, race) = (Arc::clone(&s3), race.clone());
        tasks.push(tokio::spawn(async move {
            let body = PutPayload::from(vec![writer; 1024]);
            let result = s3.put_opts(&race, body, PutMode::Create.into()).await;
            (writer, result)
        }));
    }
    let mut winners = Vec::new();
    for task in tasks {
        match task.await.unwrap() {
            (writer, Ok(_)) => winners.push(writer),
            (_, Err(Error::AlreadyExists { .. })) => {}
            (writer, Err(e)) => panic!("writer {writer}: unexpected error {e:?}"),
        }
    }
    assert_eq!(winners.len(), 1, "winners: {winners:?}");
    let body = s3.get(&race).await.unwrap().bytes().await.unwrap();
    assert_eq!(body.as_ref(), &[winners[0]; 1024][..]);
}

#[tokio::test]
async fn list_with_prefix_and_delete() {
    let minio = MinioServer::start();
    let s3 = store(&minio);
    for key in ["a/1", "a/2", "a/sub/3", "ab/4", "b/5"] {
        s3.put(&Path::from(key), PutPayload::from_static(b"x"))
            .await
            .unwrap();
    }
    let list = |prefix: &'static str| {
        let s3 = &s3;
        async move {
            let mut keys: Vec<String> = s3
                .list(Some(&Path::from(prefix)))
                .map(|meta| meta.unwrap().location.to_string())
                .collect()
                .await;
            keys.sort();
            keys
        }
    };
    // A prefix is a whole path segment: "a" does not match "ab/4".
    assert_eq!(list("a").await, ["a/1", "a/2", "a/sub/3"]);
    assert_eq!(list("b").await, ["b/5"]);

    s3.delete(&Path::from("a/1")).await.unwrap();
    assert_eq!(list("a").await, ["a/2", "a/sub/3"]);
    let err = s3.get(&Path::from("a/1")).await.unwrap_err();
    assert!(matches!(err, Error::NotFound { .. }), "got {err:?}");
    // S3 deletes are idempotent: deleting a missing key succeeds.
    s3.delete(&Path::from("a/1")).await.unwrap();
}

#[tokio::test]
async fn missing_bucket_is_a_clear_error() {
    let minio = MinioServer::start();
    let s3 = store_with(
        &minio,
        "no-such-bucket",
        minio.access_key(),
        minio.secret_key(),
    );
    let started = Instant::now();
    let put = s3
        .put(&Path::from("k"), PutPayload::from_static(b"x"))
        .await
        .unwrap_err();
    eprintln!("put to a missing bucket ({:?}): {put}", started.elapsed());
    // object_store reports a missing bucket as NotFound, like a missing key: only the S3
    // error code in the text tells them apart.
    assert!(matches!(put, Error::NotFound { .. }), "{put:?}");
    assert!(put.to_string().contains("NoSuchBucket"), "{put:?}");
    let get = s3.get(&Path::from("k")).await.unwrap_err();
    eprintln!("get from a missing bucket: {get}");
    // A GET cannot tell a missing bucket from a missing key by its kind alone; the text can.
    assert!(get.to_string().contains("NoSuchBucket"), "{get:?}");
    let list = s3.list_with_delimiter(None).await.unwrap_err();
    eprintln!("list of a missing bucket: {list}");
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "not a fast failure"
    );
}

#[tokio::test]
async fn wrong_credentials_are_a_clear_error() {
    let minio = MinioServer::start();
    let wrong_secret = store_with(&minio, minio.bucket(), minio.access_key(), "wrong-secret");
    let started = Instant::now();
    let err = wrong_secret
        .put(&Path::from("k"), PutPayload::from_static(b"x"))
        .await
        .unwrap_err();
    eprintln!("put with a wrong secret ({:?}): {err}", started.elapsed());
    assert!(matches!(err, Error::PermissionDenied { .. }), "{err:?}");
    assert!(err.to_string().contains("SignatureDoesNotMatch"), "{err:?}");

    let unknown_key = store_with(&minio, minio.bucket(), "nobody", "wrong-secret-too");
    let err = unknown_key.get(&Path::from("k")).await.unwrap_err();
    eprintln!("get with an unknown access key: {err}");
    assert!(matches!(err, Error::PermissionDenied { .. }), "{err:?}");
    assert!(err.to_string().contains("InvalidAccessKeyId"), "{err:?}");
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "not a fast failure"
    );
}

/// Runs `op`, returning its error text and how long it took to fail.
async fn timed_failure<T: std::fmt::Debug>(
    op: impl Future<Output = object_store::Result<T>>,
) -> (Error, Duration) {
    let started = Instant::now();
    let result = op.await;
    let took = started.elapsed();
    match result {
        Ok(ok) => panic!("the operation must fail, but it succeeded after {took:?}: {ok:?}"),
        Err(e) => (e, took),
    }
}

#[tokio::test]
async fn killed_minio_fails_within_the_retry_bound_and_recovers_after_restart() {
    let mut minio = MinioServer::start();
    let s3 = Arc::new(store(&minio));
    let before = Path::from("seq/1");
    s3.put(&before, PutPayload::from_static(b"acknowledged"))
        .await
        .unwrap();

    // Kill MinIO while a 16 MiB upload is in flight. Whichever way that upload ends, an Ok
    // must mean the object is there after the restart.
    let in_flight = Path::from("seq/2");
    let big = pattern(16 << 20);
    let upload = {
        let (s3, path, big) = (Arc::clone(&s3), in_flight.clone(), big.clone());
        tokio::spawn(async move { s3.put(&path, PutPayload::from(big)).await })
    };
    tokio::time::sleep(Duration::from_millis(30)).await;
    minio.kill();
    let started = Instant::now();
    let upload = upload.await.unwrap();
    eprintln!(
        "upload in flight at the kill: {} after {:?}",
        match &upload {
            Ok(_) => "succeeded before the kill".to_owned(),
            Err(e) => format!("failed: {e}"),
        },
        started.elapsed()
    );

    let (put, put_took) =
        timed_failure(s3.put(&Path::from("seq/3"), PutPayload::from_static(b"x"))).await;
    eprintln!("put while MinIO is dead failed after {put_took:?}: {put}");
    let (get, get_took) = timed_failure(s3.get_range(&before, 0..4)).await;
    eprintln!("get while MinIO is dead failed after {get_took:?}: {get}");
    assert!(matches!(put, Error::Generic { .. }), "{put:?}");
    // Connection refused is retried with backoff, bounded by RETRY_TIMEOUT (plus one request).
    for took in [put_took, get_took] {
        assert!(took < RETRY_TIMEOUT + REQUEST_TIMEOUT, "took {took:?}");
    }

    let restarted = Instant::now();
    minio.restart();
    eprintln!("restart until ready: {:?}", restarted.elapsed());
    // The same client works again without being rebuilt.
    let got = s3.get(&before).await.unwrap().bytes().await.unwrap();
    assert_eq!(got.as_ref(), b"acknowledged");
    if upload.is_ok() {
        let got = s3.get(&in_flight).await.unwrap().bytes().await.unwrap();
        assert_eq!(got.as_ref(), &big[..], "an acknowledged upload was lost");
    } else {
        // A failed upload leaves nothing, or the whole object: never a part.
        match s3.get(&in_flight).await {
            Ok(r) => assert_eq!(r.bytes().await.unwrap().as_ref(), &big[..]),
            Err(e) => assert!(matches!(e, Error::NotFound { .. }), "{e:?}"),
        }
    }
    s3.put(&Path::from("seq/3"), PutPayload::from_static(b"after"))
        .await
        .unwrap();
    // Create-if-absent still fences after the restart.
    let err = s3
        .put_opts(
            &before,
            PutPayload::from_static(b"again"),
            PutMode::Create.into(),
        )
        .await
        .unwrap_err();
    assert!(matches!(err, Error::AlreadyExists { .. }), "{err:?}");
}

#[tokio::test]
async fn hung_minio_times_out_per_request_and_recovers_after_resume() {
    let minio = MinioServer::start();
    let s3 = store(&minio);
    let key = Path::from("seq/1");
    s3.put(&key, PutPayload::from_static(b"acknowledged"))
        .await
        .unwrap();

    // SIGSTOP: the port still accepts connections (the kernel does), nothing answers.
    minio.pause();
    let (put, put_took) =
        timed_failure(s3.put(&Path::from("seq/2"), PutPayload::from_static(b"x"))).await;
    eprintln!("put while MinIO hangs failed after {put_took:?}: {put}");
    // Each attempt ends at REQUEST_TIMEOUT; retries stop once RETRY_TIMEOUT has passed.
    assert!(put_took >= REQUEST_TIMEOUT, "took {put_took:?}");
    assert!(
        put_took < RETRY_TIMEOUT + 2 * REQUEST_TIMEOUT,
        "took {put_took:?}"
    );
    minio.resume();

    let got = s3.get(&key).await.unwrap().bytes().await.unwrap();
    assert_eq!(got.as_ref(), b"acknowledged");
    s3.put(&Path::from("seq/2"), PutPayload::from_static(b"y"))
        .await
        .unwrap();
}

#[tokio::test]
async fn create_if_absent_with_a_lost_response_is_ambiguous() {
    let minio = MinioServer::start();
    let s3 = store(&minio);
    let key = Path::from("seq/00000000000000000009");

    // The request reaches the (frozen) server's socket, the answer never comes. object_store
    // does not retry a create-if-absent PUT after a timeout (it is not idempotent), so the
    // caller sees one failure after one request timeout...
    minio.pause();
    let (err, took) = timed_failure(s3.put_opts(
        &key,
        PutPayload::from_static(b"mine"),
        PutMode::Create.into(),
    ))
    .await;
    eprintln!("create while MinIO hangs failed after {took:?}: {err}");
    assert!(matches!(err, Error::Generic { .. }), "{err:?}");
    assert!(
        took < REQUEST_TIMEOUT * 2,
        "retried a create: took {took:?}"
    );
    minio.resume();

    // ...while the server may still carry the PUT out once it runs again. A writer that retries
    // its own create must therefore treat AlreadyExists with its own bytes as success.
    tokio::time::sleep(Duration::from_millis(500)).await;
    match s3.get(&key).await {
        Ok(r) => {
            let body = r.bytes().await.unwrap();
            eprintln!("after resume the timed-out create had been applied");
            assert_eq!(body.as_ref(), b"mine");
            let again = s3
                .put_opts(
                    &key,
                    PutPayload::from_static(b"mine"),
                    PutMode::Create.into(),
                )
                .await
                .unwrap_err();
            assert!(matches!(again, Error::AlreadyExists { .. }), "{again:?}");
        }
        Err(Error::NotFound { .. }) => {
            eprintln!("after resume the timed-out create had not been applied");
            s3.put_opts(
                &key,
                PutPayload::from_static(b"mine"),
                PutMode::Create.into(),
            )
            .await
            .unwrap();
        }
        Err(e) => panic!("unexpected error after resume: {e:?}"),
    }
}
