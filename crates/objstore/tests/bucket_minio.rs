//! Opening the bucket against a real MinIO (`sluice_testkit::MinioServer`): the start check
//! passes on a good configuration and leaves nothing behind, and each misconfiguration the
//! broker must report at start — missing bucket, wrong secret, unknown access key, nothing
//! listening, a hung server — gives its one clear line within the check bound, never a hang.
//!
//! The configuration goes through `BucketConfig::from_env` with the variables the testkit gives
//! `sluice serve`, from a map: the process environment is never touched. Every test is bounded
//! well under 30 s and its MinIO is killed on drop.

use std::collections::HashMap;
use std::net::TcpListener;
use std::time::{Duration, Instant};

use futures_util::StreamExt;
use object_store::{ObjectStore, ObjectStoreExt};
use sluice_objstore::bucket::{
    self, BucketConfig, BucketError, CHECK_TIMEOUT_DEFAULT, Refusal, StorageUrl,
};
use sluice_testkit::MinioServer;

/// Slack on top of the check bound for scheduling on a busy 2-core machine.
const SLACK: Duration = Duration::from_secs(3);

/// The environment `sluice serve` would get for `minio`, with `overrides` applied.
fn env_for(minio: &MinioServer, overrides: &[(&str, &str)]) -> HashMap<String, String> {
    let mut env: HashMap<String, String> = minio
        .env_vars()
        .into_iter()
        .map(|(k, v)| (k.to_owned(), v))
        .collect();
    for (k, v) in overrides {
        env.insert((*k).to_owned(), (*v).to_owned());
    }
    env
}

fn config(url: &str, env: &HashMap<String, String>) -> BucketConfig {
    let url = StorageUrl::parse(url).unwrap();
    BucketConfig::from_env(url, |name| env.get(name).cloned()).unwrap()
}

/// Runs the start check and returns its error, how long it took, and the line it prints;
/// asserts the line is one line and does not contain `secret`.
async fn failed_check(config: BucketConfig, secret: &str) -> (BucketError, Duration) {
    let bucket = bucket::open(config).expect("open makes no request and must succeed");
    let started = Instant::now();
    let result = bucket.check().await;
    let took = started.elapsed();
    let err = match result {
        Ok(report) => panic!("the check must fail, but it passed in {:?}", report.took),
        Err(e) => e,
    };
    let line = err.to_string();
    eprintln!("check failed after {took:?}: {line}");
    assert!(!line.contains('\n'), "not one line: {line}");
    assert!(!line.contains(secret), "the secret is printed: {line}");
    assert!(
        !format!("{err:?}").contains(secret),
        "the secret is in Debug"
    );
    (err, took)
}

#[tokio::test]
async fn check_passes_and_leaves_no_probe() {
    let minio = MinioServer::start();
    let env = env_for(&minio, &[]);
    let url = format!("s3://{}/tenant-a/sluice/", minio.bucket());
    let bucket = bucket::open(config(&url, &env)).unwrap();
    assert_eq!(
        bucket.url().to_string(),
        format!("s3://{}/tenant-a/sluice", minio.bucket())
    );
    let report = bucket.check().await.expect("the check passes");
    eprintln!("check passed in {:?} at {}", report.took, bucket.endpoint());
    assert!(report.took < CHECK_TIMEOUT_DEFAULT);

    // A second check (as after a restart) passes too, and nothing is left in the bucket.
    bucket.check().await.expect("a second check passes");
    let left: Vec<_> = bucket.store().list(None).collect().await;
    assert!(left.is_empty(), "the check left objects behind: {left:?}");

    // The client it built is the one the broker uses: keys land under the prefix.
    let key = bucket.key("objects/00000000000000000001");
    assert_eq!(key.as_ref(), "tenant-a/sluice/objects/00000000000000000001");
    bucket
        .store()
        .put(&key, object_store::PutPayload::from_static(b"x"))
        .await
        .unwrap();
}

#[tokio::test]
async fn missing_bucket_names_the_bucket() {
    let minio = MinioServer::start();
    let env = env_for(&minio, &[]);
    let (err, took) = failed_check(
        config("s3://no-such-bucket/sluice", &env),
        minio.secret_key(),
    )
    .await;
    assert!(
        matches!(&err, BucketError::NoSuchBucket { bucket, .. } if bucket == "no-such-bucket"),
        "{err:?}"
    );
    let line = err.to_string();
    assert!(line.contains("`no-such-bucket` does not exist"), "{line}");
    assert!(line.contains(&minio.endpoint()), "{line}");
    assert!(took < CHECK_TIMEOUT_DEFAULT, "took {took:?}");
}

#[tokio::test]
async fn wrong_secret_is_a_signature_mismatch() {
    let minio = MinioServer::start();
    let wrong = "wrong-secret-0123456789abcdefghijklmnop";
    let env = env_for(&minio, &[("AWS_SECRET_ACCESS_KEY", wrong)]);
    let url = format!("s3://{}/sluice", minio.bucket());
    let (err, took) = failed_check(config(&url, &env), wrong).await;
    assert!(!err.to_string().contains(minio.secret_key()));
    assert!(
        matches!(
            &err,
            BucketError::CredentialsRefused {
                refusal: Refusal::SignatureMismatch { access_key_id },
                ..
            } if access_key_id == minio.access_key()
        ),
        "{err:?}"
    );
    assert!(err.to_string().contains("AWS_SECRET_ACCESS_KEY"), "{err}");
    assert!(took < CHECK_TIMEOUT_DEFAULT, "took {took:?}");
}

#[tokio::test]
async fn unknown_access_key_is_named() {
    let minio = MinioServer::start();
    let secret = "some-secret-for-nobody-0123456789abcdef";
    let env = env_for(
        &minio,
        &[
            ("AWS_ACCESS_KEY_ID", "nobody"),
            ("AWS_SECRET_ACCESS_KEY", secret),
        ],
    );
    let url = format!("s3://{}", minio.bucket());
    let (err, took) = failed_check(config(&url, &env), secret).await;
    assert!(
        matches!(
            &err,
            BucketError::CredentialsRefused {
                refusal: Refusal::UnknownAccessKey { access_key_id },
                ..
            } if access_key_id == "nobody"
        ),
        "{err:?}"
    );
    assert!(err.to_string().contains("AWS_ACCESS_KEY_ID"), "{err}");
    assert!(took < CHECK_TIMEOUT_DEFAULT, "took {took:?}");
}

#[tokio::test]
async fn nothing_listening_is_unreachable_within_the_bound() {
    // A port that was free a moment ago, with nothing listening on it now.
    let port = {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        listener.local_addr().unwrap().port()
    };
    let endpoint = format!("http://127.0.0.1:{port}");
    let secret = "secret-of-a-server-that-is-not-there";
    let env: HashMap<String, String> = [
        ("AWS_ENDPOINT_URL", endpoint.as_str()),
        ("AWS_ACCESS_KEY_ID", "key"),
        ("AWS_SECRET_ACCESS_KEY", secret),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_owned(), v.to_owned()))
    .collect();
    let (err, took) = failed_check(config("s3://some-bucket/sluice", &env), secret).await;
    assert!(
        matches!(&err, BucketError::Unreachable { endpoint: e, .. } if *e == endpoint),
        "{err:?}"
    );
    let line = err.to_string();
    assert!(
        line.contains(&endpoint) && line.contains("connect timeout 2s"),
        "{line}"
    );
    assert!(took < CHECK_TIMEOUT_DEFAULT + SLACK, "took {took:?}");
}

#[tokio::test]
async fn hung_minio_is_unreachable_within_the_bound() {
    let minio = MinioServer::start();
    let env = env_for(&minio, &[]);
    let url = format!("s3://{}/sluice", minio.bucket());
    let config = config(&url, &env);
    // SIGSTOP: connections are accepted by the kernel, nothing answers.
    minio.pause();
    let (err, took) = failed_check(config, minio.secret_key()).await;
    minio.resume();
    assert!(
        matches!(&err, BucketError::Unreachable { endpoint, .. } if *endpoint == minio.endpoint()),
        "{err:?}"
    );
    assert!(err.to_string().contains("check bound 10s"), "{err}");
    assert!(took >= CHECK_TIMEOUT_DEFAULT, "took {took:?}");
    assert!(took < CHECK_TIMEOUT_DEFAULT + SLACK, "took {took:?}");
}
