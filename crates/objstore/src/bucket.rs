//! # Opening the bucket
//!
//! How the broker gets from `--storage s3://BUCKET/PREFIX` and the standard AWS environment
//! variables to a working S3 client, and how it proves at start that the bucket is usable,
//! so that a misconfiguration is one clear line at start instead of a failed produce later.
//!
//! Where it sits: `sluice serve` → [`StorageUrl::parse`] (the `--storage` value) →
//! [`BucketConfig::from_env`] (endpoint, region, credentials; named timeouts) → [`open`] (builds
//! the `object_store` S3 client; no I/O) → [`Bucket::check`] (list, create-if-absent, read and
//! delete a probe under `PREFIX/probe/`, bounded in time) → the flusher, the writer lease and
//! the readers use [`Bucket::store`] with keys from [`Bucket::key`].
//!
//! Key types: [`StorageUrl`] (in `bucket/url.rs`), [`BucketConfig`] (its secret is a [`Secret`], never printed),
//! [`Bucket`], and the errors [`UrlError`] and [`BucketError`] — each error prints as one line
//! that says what is wrong and what to do.
//!
//! Why the check writes: listing alone proves the bucket exists and the key may list, but the
//! broker acknowledges produces only after PUTs succeed, relies on create-if-absent writes to
//! fence a second broker, reads its objects back and deletes compacted ones. A check that
//! exercised less would let a broker start that then fails every produce.

use std::fmt;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use object_store::aws::AmazonS3Builder;
use object_store::client::{HttpError, HttpErrorKind};
use object_store::path::Path;
use object_store::{
    BackoffConfig, ClientOptions, ObjectStore, ObjectStoreExt, PutMode, PutPayload, RetryConfig,
};

mod url;

pub use url::{PREFIX_BYTES_MAX, StorageUrl, UrlError};

/// The environment variable that names the S3 endpoint (unset: AWS S3 itself).
pub const ENV_ENDPOINT: &str = "AWS_ENDPOINT_URL";
/// The environment variable that names the region to sign requests for.
pub const ENV_REGION: &str = "AWS_REGION";
/// Read when [`ENV_REGION`] is unset, as the AWS command line does.
pub const ENV_DEFAULT_REGION: &str = "AWS_DEFAULT_REGION";
/// The environment variable that holds the access key id.
pub const ENV_ACCESS_KEY_ID: &str = "AWS_ACCESS_KEY_ID";
/// The environment variable that holds the secret access key.
pub const ENV_SECRET_ACCESS_KEY: &str = "AWS_SECRET_ACCESS_KEY";
/// The environment variable that holds a session token (temporary credentials), if any.
pub const ENV_SESSION_TOKEN: &str = "AWS_SESSION_TOKEN";

/// The region used when neither [`ENV_REGION`] nor [`ENV_DEFAULT_REGION`] is set. It is what
/// AWS treats as the default, and what MinIO answers for unless configured otherwise.
pub const REGION_DEFAULT: &str = "us-east-1";

/// How long one TCP (and TLS) connect may take. A server in the same region or on the same
/// machine connects in milliseconds; 2 s still covers one lost SYN (retransmitted after 1 s)
/// and fails a black-holed endpoint fast.
pub const CONNECT_TIMEOUT_DEFAULT: Duration = Duration::from_secs(2);

/// How long one request may take from send to the end of its response body. It must cover the
/// largest PUT: a 4 MiB flush object at 2 MiB/s takes 2 s, so 30 s leaves room for a slow link
/// while still ending a hung request long before a client's produce timeout.
pub const REQUEST_TIMEOUT_DEFAULT: Duration = Duration::from_secs(30);

/// How many times the client retries one request that failed in a retriable way (connection
/// errors, 5xx, throttling). The flusher retries whole PUTs above this with its own deadline,
/// so the client's own retries only absorb short blips.
pub const RETRIES_MAX_DEFAULT: usize = 3;

/// The bound on all the client's retries of one request together.
pub const RETRY_TIMEOUT_DEFAULT: Duration = Duration::from_secs(10);

/// The bound on the whole start check ([`Bucket::check`]): past it the broker gives up with
/// [`BucketError::Unreachable`] instead of hanging at start.
pub const CHECK_TIMEOUT_DEFAULT: Duration = Duration::from_secs(10);

/// Where the start check writes its probe objects, under the prefix.
pub const PROBE_DIR: &str = "probe";

/// A secret string (secret access key, session token): `Debug` prints `Secret(***)`, and there
/// is no `Display`, so it cannot end up in a log line or an error by accident.
#[derive(Clone, PartialEq, Eq)]
pub struct Secret(String);

impl Secret {
    /// Wraps a secret.
    pub fn new(secret: impl Into<String>) -> Secret {
        Secret(secret.into())
    }

    /// The secret itself, for the one place that signs requests with it.
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Secret(***)")
    }
}

/// Everything [`open`] needs: where the bucket is, who we are, and the client's bounds.
///
/// Built by [`BucketConfig::from_env`]; every field is public so a config file or flags can
/// override it afterwards.
#[derive(Debug, Clone)]
pub struct BucketConfig {
    /// The bucket and prefix (`--storage`).
    pub url: StorageUrl,
    /// The S3 endpoint without a trailing '/', e.g. `http://127.0.0.1:9000`; `None` for AWS S3
    /// itself. An `http://` endpoint is allowed (MinIO on a laptop). With an endpoint, requests
    /// are path-style (`ENDPOINT/BUCKET/KEY`), which every S3-compatible server serves.
    pub endpoint: Option<String>,
    /// The region requests are signed for.
    pub region: String,
    /// The access key id. Not secret: it is printed in errors so the operator can tell which
    /// key was refused.
    pub access_key_id: String,
    /// The secret access key. Never printed.
    pub secret_access_key: Secret,
    /// The session token of temporary credentials. Never printed.
    pub session_token: Option<Secret>,
    /// See [`CONNECT_TIMEOUT_DEFAULT`].
    pub connect_timeout: Duration,
    /// See [`REQUEST_TIMEOUT_DEFAULT`].
    pub request_timeout: Duration,
    /// See [`RETRIES_MAX_DEFAULT`].
    pub retries_max: usize,
    /// See [`RETRY_TIMEOUT_DEFAULT`].
    pub retry_timeout: Duration,
    /// See [`CHECK_TIMEOUT_DEFAULT`].
    pub check_timeout: Duration,
}

impl BucketConfig {
    /// Reads the endpoint, region and credentials from `env` (a lookup such as
    /// `|name| std::env::var(name).ok()`, or a map in tests); empty values count as unset.
    /// Timeouts and retries get their defaults.
    ///
    /// Read: `AWS_ENDPOINT_URL` (optional), `AWS_REGION` (else `AWS_DEFAULT_REGION`, else
    /// `us-east-1`), `AWS_ACCESS_KEY_ID` and `AWS_SECRET_ACCESS_KEY` (both required),
    /// `AWS_SESSION_TOKEN` (optional).
    pub fn from_env<F>(url: StorageUrl, env: F) -> Result<BucketConfig, BucketError>
    where
        F: Fn(&str) -> Option<String>,
    {
        let get = |name: &str| env(name).filter(|v| !v.trim().is_empty());
        let endpoint = match get(ENV_ENDPOINT) {
            None => None,
            Some(value) => Some(parse_endpoint(&value).map_err(|why| BucketError::BadEnv {
                var: ENV_ENDPOINT,
                value,
                why,
            })?),
        };
        let region = get(ENV_REGION)
            .or_else(|| get(ENV_DEFAULT_REGION))
            .unwrap_or_else(|| REGION_DEFAULT.to_owned());
        if let Some(at) = region.find(|c: char| !(c.is_ascii_alphanumeric() || c == '-')) {
            return Err(BucketError::BadEnv {
                var: ENV_REGION,
                why: format!(
                    "has {:?} at byte {at}: a region looks like us-east-1",
                    region[at..].chars().next().unwrap_or(' ')
                ),
                value: region,
            });
        }
        let access_key_id = get(ENV_ACCESS_KEY_ID).ok_or(BucketError::MissingEnv {
            var: ENV_ACCESS_KEY_ID,
            hint: "set it (and AWS_SECRET_ACCESS_KEY) to the key Sluice uses for the bucket",
        })?;
        let access_key_id = access_key_id.trim().to_owned();
        let secret_access_key = env(ENV_SECRET_ACCESS_KEY)
            .filter(|v| !v.is_empty())
            .map(Secret)
            .ok_or(BucketError::MissingEnv {
                var: ENV_SECRET_ACCESS_KEY,
                hint: "set it to the secret of the key in AWS_ACCESS_KEY_ID",
            })?;
        let session_token = env(ENV_SESSION_TOKEN).filter(|v| !v.is_empty()).map(Secret);
        Ok(BucketConfig {
            url,
            endpoint,
            region,
            access_key_id,
            secret_access_key,
            session_token,
            connect_timeout: CONNECT_TIMEOUT_DEFAULT,
            request_timeout: REQUEST_TIMEOUT_DEFAULT,
            retries_max: RETRIES_MAX_DEFAULT,
            retry_timeout: RETRY_TIMEOUT_DEFAULT,
            check_timeout: CHECK_TIMEOUT_DEFAULT,
        })
    }

    /// [`BucketConfig::from_env`] over the process environment.
    pub fn from_process_env(url: StorageUrl) -> Result<BucketConfig, BucketError> {
        BucketConfig::from_env(url, |name| std::env::var(name).ok())
    }

    /// The endpoint as errors and logs name it.
    pub fn endpoint_label(&self) -> String {
        match &self.endpoint {
            Some(endpoint) => endpoint.clone(),
            None => format!("https://s3.{}.amazonaws.com", self.region),
        }
    }

    /// Whether request bodies are sent as `UNSIGNED-PAYLOAD` instead of with their SHA-256 in
    /// the signature. The payload hash only protects a body on a path someone could alter,
    /// and costs a SHA-256 pass over every byte on both sides (measured with MinIO on 2
    /// cores: 5.0-5.9 against 3.8-5.1 server CPU-seconds per GB written). So it is left out
    /// where the path is already protected: over TLS (`https://`, AWS S3 itself), where TLS
    /// authenticates every byte, and on a loopback endpoint (127.0.0.0/8, `[::1]`,
    /// `localhost`), which no other machine is on. Over plain `http://` to any other host the
    /// body stays signed. The headers are signed either way, and every batch in an object
    /// carries its own CRC, checked before a byte is served.
    pub fn unsigned_payload(&self) -> bool {
        match &self.endpoint {
            None => true,
            Some(endpoint) => match endpoint.split_once("://") {
                Some(("https", _)) => true,
                Some(("http", authority)) => is_loopback_authority(authority),
                _ => false,
            },
        }
    }
}

/// Whether `authority` (`HOST[:PORT]`, from an endpoint [`parse_endpoint`] accepted) names
/// the loopback interface.
fn is_loopback_authority(authority: &str) -> bool {
    let host = if let Some(rest) = authority.strip_prefix('[') {
        rest.split_once(']').map_or(rest, |(host, _)| host)
    } else {
        authority
            .rsplit_once(':')
            .map_or(authority, |(host, _)| host)
    };
    if host.eq_ignore_ascii_case("localhost") {
        return true;
    }
    host.parse::<std::net::IpAddr>()
        .is_ok_and(|ip| ip.is_loopback())
}

/// Checks an endpoint URL: `http://` or `https://`, a host, an optional port, nothing else.
/// Returns it without a trailing '/'.
fn parse_endpoint(value: &str) -> Result<String, String> {
    let value = value.trim();
    let Some((scheme, rest)) = value.split_once("://") else {
        return Err("write it as http://HOST:PORT or https://HOST".to_owned());
    };
    if scheme != "http" && scheme != "https" {
        return Err(format!(
            "scheme `{scheme}` is not http or https: write http://HOST:PORT or https://HOST"
        ));
    }
    let authority = rest.trim_end_matches('/');
    if authority.is_empty() {
        return Err("names no host: write http://HOST:PORT or https://HOST".to_owned());
    }
    if let Some(c) = authority
        .chars()
        .find(|&c| matches!(c, '/' | '?' | '#' | '@') || c.is_whitespace())
    {
        let why = match c {
            '/' => {
                "has a path: the bucket goes in the storage URL (s3://BUCKET/PREFIX), the endpoint is only http(s)://HOST:PORT"
            }
            '@' => "has credentials in it: put them in AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY",
            _ => "is not a plain http(s)://HOST:PORT",
        };
        return Err(why.to_owned());
    }
    Ok(format!("{scheme}://{authority}"))
}

/// Why the bucket cannot be opened or used. Each prints as one line; none contains the secret
/// access key or the session token.
#[derive(Debug, thiserror::Error)]
pub enum BucketError {
    /// The `--storage` value is not a valid storage URL.
    #[error(transparent)]
    Url(#[from] UrlError),
    /// A required environment variable is unset or empty.
    #[error("{var} is not set: {hint}")]
    MissingEnv {
        /// The variable.
        var: &'static str,
        /// What to set it to.
        hint: &'static str,
    },
    /// An environment variable holds something unusable.
    #[error("{var}={value:?} is not valid: {why}")]
    BadEnv {
        /// The variable.
        var: &'static str,
        /// Its value (never a secret: secrets are not checked for form).
        value: String,
        /// What is wrong and what to write.
        why: String,
    },
    /// The bucket does not exist at the endpoint.
    #[error(
        "bucket `{bucket}` does not exist at {endpoint} (NoSuchBucket): create it, or name an existing bucket in --storage s3://BUCKET/PREFIX"
    )]
    NoSuchBucket {
        /// The bucket name.
        bucket: String,
        /// The endpoint asked.
        endpoint: String,
    },
    /// The endpoint refused the credentials themselves.
    #[error("{endpoint} refused the credentials: {refusal}")]
    CredentialsRefused {
        /// The endpoint asked.
        endpoint: String,
        /// Which part was refused.
        refusal: Refusal,
    },
    /// The credentials are valid but may not do something the broker needs.
    #[error(
        "access key `{access_key_id}` may not {op} under {url} ({code}): grant it s3:ListBucket, s3:PutObject, s3:GetObject and s3:DeleteObject there"
    )]
    NotPermitted {
        /// The access key id.
        access_key_id: String,
        /// What it tried: list, write, read or delete.
        op: &'static str,
        /// The bucket and prefix.
        url: StorageUrl,
        /// The S3 error code (usually AccessDenied).
        code: String,
    },
    /// A second create-if-absent PUT of the same key succeeded: the store ignores
    /// `If-None-Match: *`, so it cannot fence a second broker on the same prefix.
    #[error(
        "{endpoint} overwrote an existing object on a create-if-absent PUT (If-None-Match: *): Sluice needs conditional writes to fence a second broker; use AWS S3 or an S3-compatible server that supports them (MinIO does)"
    )]
    NoConditionalWrites {
        /// The endpoint asked.
        endpoint: String,
    },
    /// The endpoint could not be reached, or did not answer within the bound.
    #[error(
        "cannot reach S3 endpoint {endpoint} (connect timeout {connect_timeout:?}, check bound {check_timeout:?}): {why}"
    )]
    Unreachable {
        /// The endpoint asked.
        endpoint: String,
        /// What happened (connection refused, DNS failure, no answer, ...).
        why: String,
        /// The bound on each connect.
        connect_timeout: Duration,
        /// The bound on the whole check.
        check_timeout: Duration,
    },
    /// The S3 client could not be built from the configuration.
    #[error("cannot set up the S3 client for {url}: {}", one_line(&.source.to_string()))]
    Client {
        /// The bucket and prefix.
        url: StorageUrl,
        /// The client's error (boxed: it is large, and errors here are rare).
        #[source]
        source: Box<object_store::Error>,
    },
    /// Anything else the store answered.
    #[error(
        "bucket check of {url} at {endpoint} failed to {op}: {}",
        one_line(&.source.to_string())
    )]
    Other {
        /// The bucket and prefix.
        url: StorageUrl,
        /// The endpoint asked.
        endpoint: String,
        /// What the check was doing: list, write, read or delete.
        op: &'static str,
        /// The store's error (boxed: it is large, and errors here are rare).
        #[source]
        source: Box<object_store::Error>,
    },
}

/// Which part of the credentials the endpoint refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Refusal {
    /// The access key id is not known there.
    #[error(
        "access key `{access_key_id}` is unknown there (InvalidAccessKeyId): check AWS_ACCESS_KEY_ID"
    )]
    UnknownAccessKey {
        /// The access key id.
        access_key_id: String,
    },
    /// The key is known but the request signature does not match: the secret is wrong.
    #[error(
        "the signature made with access key `{access_key_id}` does not match (SignatureDoesNotMatch): AWS_SECRET_ACCESS_KEY is not this key's secret"
    )]
    SignatureMismatch {
        /// The access key id.
        access_key_id: String,
    },
    /// The session token was refused (expired or malformed).
    #[error("the session token was refused ({code}): renew AWS_SESSION_TOKEN or unset it")]
    SessionToken {
        /// The S3 error code.
        code: String,
    },
}

/// What a successful [`Bucket::check`] found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CheckReport {
    /// How long the whole check took.
    pub took: Duration,
}

/// An opened bucket: the object store client plus the prefix every key lives under.
#[derive(Debug, Clone)]
pub struct Bucket {
    store: Arc<dyn ObjectStore>,
    url: StorageUrl,
    endpoint: String,
    access_key_id: String,
    connect_timeout: Duration,
    check_timeout: Duration,
}

/// Builds the S3 client for `config`. Makes no request: [`Bucket::check`] does that.
pub fn open(config: BucketConfig) -> Result<Bucket, BucketError> {
    let endpoint = config.endpoint_label();
    let mut builder = AmazonS3Builder::new()
        .with_bucket_name(config.url.bucket())
        .with_region(&config.region)
        .with_access_key_id(&config.access_key_id)
        .with_secret_access_key(config.secret_access_key.expose())
        .with_retry(RetryConfig {
            backoff: BackoffConfig {
                init_backoff: Duration::from_millis(100),
                max_backoff: Duration::from_secs(1),
                base: 2.0,
            },
            max_retries: config.retries_max,
            retry_timeout: config.retry_timeout,
        });
    // `with_client_options` replaces every client option, so allow_http must be set here and
    // not with the builder's own `with_allow_http`.
    let mut options = ClientOptions::new()
        .with_connect_timeout(config.connect_timeout)
        .with_timeout(config.request_timeout);
    if let Some(custom) = &config.endpoint {
        options = options.with_allow_http(custom.starts_with("http://"));
        // Path-style (ENDPOINT/BUCKET/KEY): S3-compatible servers on an IP address or a single
        // host name cannot serve BUCKET.HOST.
        builder = builder
            .with_endpoint(custom)
            .with_virtual_hosted_style_request(false);
    }
    if let Some(token) = &config.session_token {
        builder = builder.with_token(token.expose());
    }
    builder = builder.with_unsigned_payload(config.unsigned_payload());
    let store = builder
        .with_client_options(options)
        .build()
        .map_err(|source| BucketError::Client {
            url: config.url.clone(),
            source: Box::new(source),
        })?;
    Ok(Bucket {
        store: Arc::new(store),
        url: config.url,
        endpoint,
        access_key_id: config.access_key_id,
        connect_timeout: config.connect_timeout,
        check_timeout: config.check_timeout,
    })
}

/// Makes the probe names of concurrent checks in one process differ.
static PROBE_COUNTER: AtomicU64 = AtomicU64::new(0);

/// The bytes a probe object holds.
const PROBE_BODY: &[u8] = b"sluice start check; safe to delete\n";

impl Bucket {
    /// A bucket over any object store (tests use the in-memory one). `endpoint` is how errors
    /// name it; timeouts get their defaults.
    pub fn from_store(url: StorageUrl, store: Arc<dyn ObjectStore>, endpoint: &str) -> Bucket {
        Bucket {
            store,
            url,
            endpoint: endpoint.to_owned(),
            access_key_id: String::new(),
            connect_timeout: CONNECT_TIMEOUT_DEFAULT,
            check_timeout: CHECK_TIMEOUT_DEFAULT,
        }
    }

    /// The object store client. Keys come from [`Bucket::key`].
    pub fn store(&self) -> &Arc<dyn ObjectStore> {
        &self.store
    }

    /// The bucket and prefix.
    pub fn url(&self) -> &StorageUrl {
        &self.url
    }

    /// The endpoint as errors and logs name it.
    pub fn endpoint(&self) -> &str {
        &self.endpoint
    }

    /// The key of `rel` under the prefix (see [`StorageUrl::key`]).
    pub fn key(&self, rel: &str) -> Path {
        self.url.key(rel)
    }

    /// Proves, within the check bound ([`CHECK_TIMEOUT_DEFAULT`] unless configured), that the
    /// bucket exists and the credentials may do what the broker does under the prefix:
    /// 1. list the prefix (the bucket exists; the key is accepted and may list);
    /// 2. create `PREFIX/probe/<unique>` if absent (the key may write);
    /// 3. create it again, which must be refused (the store honours create-if-absent, the
    ///    fence against a second broker);
    /// 4. read it back and compare (the key may read);
    /// 5. delete it (the key may delete).
    ///
    /// Nothing else under the prefix is touched. A probe that a failed or timed-out check
    /// could not delete stays behind; it is a few bytes under `probe/`, never read by Sluice.
    pub async fn check(&self) -> Result<CheckReport, BucketError> {
        let started = Instant::now();
        let probe = self.key(&probe_name());
        let outcome = tokio::time::timeout(self.check_timeout, self.check_steps(&probe)).await;
        match outcome {
            Ok(Ok(())) => Ok(CheckReport {
                took: started.elapsed(),
            }),
            Ok(Err(e)) => Err(e),
            Err(_elapsed) => Err(self.unreachable(format!(
                "no answer within {:?} (a server that accepts connections but does not respond, or a network that drops them)",
                self.check_timeout
            ))),
        }
    }

    async fn check_steps(&self, probe: &Path) -> Result<(), BucketError> {
        self.store
            .list_with_delimiter(self.url.prefix_path().as_ref())
            .await
            .map_err(|e| self.classify("list", e))?;
        let create = || PutMode::Create.into();
        self.store
            .put_opts(probe, PutPayload::from_static(PROBE_BODY), create())
            .await
            .map_err(|e| self.classify("write", e))?;
        let result = self.check_probe(probe).await;
        if result.is_err() {
            // Best effort: the error being returned matters more than the cleanup's.
            let _ = self.store.delete(probe).await;
        }
        result
    }

    async fn check_probe(&self, probe: &Path) -> Result<(), BucketError> {
        let create = || PutMode::Create.into();
        match self
            .store
            .put_opts(probe, PutPayload::from_static(b"overwritten"), create())
            .await
        {
            Err(object_store::Error::AlreadyExists { .. }) => {}
            Ok(_) => {
                return Err(BucketError::NoConditionalWrites {
                    endpoint: self.endpoint.clone(),
                });
            }
            Err(e) => return Err(self.classify("write", e)),
        }
        let body = async { self.store.get(probe).await?.bytes().await }
            .await
            .map_err(|e| self.classify("read", e))?;
        if body.as_ref() != PROBE_BODY {
            return Err(BucketError::NoConditionalWrites {
                endpoint: self.endpoint.clone(),
            });
        }
        self.store
            .delete(probe)
            .await
            .map_err(|e| self.classify("delete", e))
    }

    fn unreachable(&self, why: String) -> BucketError {
        BucketError::Unreachable {
            endpoint: self.endpoint.clone(),
            why,
            connect_timeout: self.connect_timeout,
            check_timeout: self.check_timeout,
        }
    }

    /// Turns a store error met while doing `op` into the error that names its cause.
    fn classify(&self, op: &'static str, e: object_store::Error) -> BucketError {
        let text = e.to_string();
        let code = s3_code(&text);
        let has = |c: &str| code.as_deref() == Some(c) || text.contains(c);
        if has("NoSuchBucket") {
            return BucketError::NoSuchBucket {
                bucket: self.url.bucket().to_owned(),
                endpoint: self.endpoint.clone(),
            };
        }
        let refused = |refusal| BucketError::CredentialsRefused {
            endpoint: self.endpoint.clone(),
            refusal,
        };
        if has("InvalidAccessKeyId") {
            return refused(Refusal::UnknownAccessKey {
                access_key_id: self.access_key_id.clone(),
            });
        }
        if has("SignatureDoesNotMatch") {
            return refused(Refusal::SignatureMismatch {
                access_key_id: self.access_key_id.clone(),
            });
        }
        for token_code in ["ExpiredToken", "InvalidToken", "TokenRefreshRequired"] {
            if has(token_code) {
                return refused(Refusal::SessionToken {
                    code: token_code.to_owned(),
                });
            }
        }
        if matches!(e, object_store::Error::PermissionDenied { .. }) {
            return BucketError::NotPermitted {
                access_key_id: self.access_key_id.clone(),
                op,
                url: self.url.clone(),
                code: code.unwrap_or_else(|| "AccessDenied".to_owned()),
            };
        }
        if let Some(why) = transport_failure(&e) {
            return self.unreachable(why);
        }
        BucketError::Other {
            url: self.url.clone(),
            endpoint: self.endpoint.clone(),
            op,
            source: Box::new(e),
        }
    }
}

/// A unique probe name under [`PROBE_DIR`]: time, process id and a counter.
fn probe_name() -> String {
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    let n = PROBE_COUNTER.fetch_add(1, Ordering::Relaxed);
    format!("{PROBE_DIR}/{nanos}-{}-{n}", std::process::id())
}

/// The `<Code>` of an S3 error response quoted in `text`, if any.
fn s3_code(text: &str) -> Option<String> {
    let start = text.find("<Code>")? + "<Code>".len();
    let len = text[start..].find("</Code>")?;
    Some(text[start..start + len].to_owned())
}

/// If `e` is a failure to connect or to get an answer, what happened, on one line.
fn transport_failure(e: &object_store::Error) -> Option<String> {
    let mut source: Option<&(dyn std::error::Error + 'static)> = std::error::Error::source(e);
    let mut kind = None;
    let mut deepest = None;
    while let Some(err) = source {
        if let Some(http) = err.downcast_ref::<HttpError>() {
            kind = Some(http.kind());
        }
        deepest = Some(err);
        source = err.source();
    }
    let what = match kind? {
        HttpErrorKind::Connect => "cannot connect",
        HttpErrorKind::Timeout => "request timed out",
        HttpErrorKind::Request | HttpErrorKind::Interrupted => "connection failed",
        _ => return None,
    };
    Some(match deepest {
        Some(root) => format!("{what}: {}", one_line(&root.to_string())),
        None => what.to_owned(),
    })
}

/// `text` on one line (whitespace runs become one space), cut to a readable length.
fn one_line(text: &str) -> String {
    /// Long enough for an S3 error code and message, short enough for a log line.
    const CHARS_MAX: usize = 400;
    let mut line = text.split_whitespace().collect::<Vec<_>>().join(" ");
    if let Some((cut, _)) = line.char_indices().nth(CHARS_MAX) {
        line.truncate(cut);
        line.push_str("...");
    }
    line
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn url(s: &str) -> StorageUrl {
        StorageUrl::parse(s).unwrap()
    }

    const SECRET: &str = "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY";
    const TOKEN: &str = "FwoGZXIvYXdzEXAMPLETOKEN";

    fn env(pairs: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
        let map: HashMap<String, String> = pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        move |name| map.get(name).cloned()
    }

    fn config(pairs: &[(&str, &str)]) -> Result<BucketConfig, BucketError> {
        BucketConfig::from_env(url("s3://bucket/p"), env(pairs))
    }

    #[test]
    fn env_defaults_and_values() {
        let c = config(&[(ENV_ACCESS_KEY_ID, "AKID"), (ENV_SECRET_ACCESS_KEY, SECRET)]).unwrap();
        assert_eq!(c.endpoint, None);
        assert_eq!(c.region, "us-east-1");
        assert_eq!(c.access_key_id, "AKID");
        assert_eq!(c.secret_access_key.expose(), SECRET);
        assert_eq!(c.session_token, None);
        assert_eq!(c.connect_timeout, CONNECT_TIMEOUT_DEFAULT);
        assert_eq!(c.request_timeout, REQUEST_TIMEOUT_DEFAULT);
        assert_eq!(c.retries_max, RETRIES_MAX_DEFAULT);
        assert_eq!(c.retry_timeout, RETRY_TIMEOUT_DEFAULT);
        assert_eq!(c.check_timeout, CHECK_TIMEOUT_DEFAULT);
        assert_eq!(c.endpoint_label(), "https://s3.us-east-1.amazonaws.com");

        let c = config(&[
            (ENV_ENDPOINT, "http://127.0.0.1:9000/"),
            (ENV_REGION, "eu-west-3"),
            (ENV_DEFAULT_REGION, "ignored-1"),
            (ENV_ACCESS_KEY_ID, "AKID"),
            (ENV_SECRET_ACCESS_KEY, SECRET),
            (ENV_SESSION_TOKEN, TOKEN),
        ])
        .unwrap();
        assert_eq!(c.endpoint.as_deref(), Some("http://127.0.0.1:9000"));
        assert_eq!(c.endpoint_label(), "http://127.0.0.1:9000");
        assert_eq!(c.region, "eu-west-3");
        assert_eq!(c.session_token.as_ref().map(Secret::expose), Some(TOKEN));

        // AWS_DEFAULT_REGION is the fallback; empty values count as unset.
        let c = config(&[
            (ENV_ENDPOINT, ""),
            (ENV_REGION, ""),
            (ENV_DEFAULT_REGION, "ap-south-1"),
            (ENV_ACCESS_KEY_ID, "AKID"),
            (ENV_SECRET_ACCESS_KEY, SECRET),
            (ENV_SESSION_TOKEN, ""),
        ])
        .unwrap();
        assert_eq!(c.endpoint, None);
        assert_eq!(c.region, "ap-south-1");
        assert_eq!(c.session_token, None);
    }

    #[test]
    fn payload_is_signed_only_on_an_unprotected_path() {
        let creds = [(ENV_ACCESS_KEY_ID, "AKID"), (ENV_SECRET_ACCESS_KEY, SECRET)];
        for (endpoint, unsigned) in [
            ("", true),
            ("https://minio.example:9000", true),
            ("https://10.0.0.5", true),
            ("http://127.0.0.1:9000", true),
            ("http://127.8.0.1", true),
            ("http://localhost:9000", true),
            ("http://LOCALHOST", true),
            ("http://[::1]:9000", true),
            ("http://10.0.0.5:9000", false),
            ("http://minio.example", false),
            ("http://localhost.example:9000", false),
            ("http://[2001:db8::1]:9000", false),
        ] {
            let mut pairs = creds.to_vec();
            pairs.push((ENV_ENDPOINT, endpoint));
            let c = config(&pairs).unwrap();
            assert_eq!(c.unsigned_payload(), unsigned, "{endpoint}");
        }
    }

    #[test]
    fn missing_or_bad_env_is_one_clear_line() {
        let e = config(&[(ENV_SECRET_ACCESS_KEY, SECRET)])
            .unwrap_err()
            .to_string();
        assert!(e.starts_with("AWS_ACCESS_KEY_ID is not set"), "{e}");
        let e = config(&[(ENV_ACCESS_KEY_ID, "AKID"), (ENV_SECRET_ACCESS_KEY, "")])
            .unwrap_err()
            .to_string();
        assert!(e.starts_with("AWS_SECRET_ACCESS_KEY is not set"), "{e}");
        let creds = [(ENV_ACCESS_KEY_ID, "AKID"), (ENV_SECRET_ACCESS_KEY, SECRET)];
        for (endpoint, want) in [
            ("127.0.0.1:9000", "http://HOST:PORT"),
            ("ftp://host", "scheme `ftp`"),
            ("http://", "names no host"),
            ("http://host:9000/bucket", "has a path"),
            ("http://user:pw@host", "has credentials"),
        ] {
            let mut pairs = creds.to_vec();
            pairs.push((ENV_ENDPOINT, endpoint));
            let e = config(&pairs).unwrap_err().to_string();
            assert!(e.starts_with("AWS_ENDPOINT_URL="), "{e}");
            assert!(e.contains(want), "{endpoint}: {e}");
            assert!(!e.contains('\n') && !e.contains(SECRET), "{e}");
        }
        let mut pairs = creds.to_vec();
        pairs.push((ENV_REGION, "us east"));
        let e = config(&pairs).unwrap_err().to_string();
        assert!(e.contains("AWS_REGION") && e.contains("us-east-1"), "{e}");
    }

    #[test]
    fn secrets_never_show_in_debug() {
        let c = config(&[
            (ENV_ENDPOINT, "https://minio.example:9000"),
            (ENV_ACCESS_KEY_ID, "AKID"),
            (ENV_SECRET_ACCESS_KEY, SECRET),
            (ENV_SESSION_TOKEN, TOKEN),
        ])
        .unwrap();
        let shown = format!("{c:?} {c:#?}");
        assert!(!shown.contains(SECRET) && !shown.contains(TOKEN), "{shown}");
        assert!(
            shown.contains("AKID") && shown.contains("Secret(***)"),
            "{shown}"
        );
        let bucket = open(c).unwrap();
        let shown = format!("{bucket:?}");
        assert!(!shown.contains(SECRET) && !shown.contains(TOKEN), "{shown}");
    }

    #[test]
    fn one_line_flattens_and_cuts() {
        assert_eq!(one_line("a\n  b\tc "), "a b c");
        let long = one_line(&"x ".repeat(1000));
        assert!(long.ends_with("...") && long.len() < 420, "{}", long.len());
        assert_eq!(
            s3_code("x <Code>NoSuchBucket</Code> y").as_deref(),
            Some("NoSuchBucket")
        );
        assert_eq!(s3_code("no code"), None);
    }

    fn memory_bucket() -> (Bucket, Arc<object_store::memory::InMemory>) {
        let store = Arc::new(object_store::memory::InMemory::new());
        let bucket = Bucket::from_store(url("s3://bucket/p/q"), store.clone(), "memory");
        (bucket, store)
    }

    #[tokio::test]
    async fn check_on_a_store_that_works_leaves_nothing_behind() {
        use futures_util::StreamExt;
        let (bucket, store) = memory_bucket();
        let report = bucket.check().await.unwrap();
        assert!(report.took < CHECK_TIMEOUT_DEFAULT);
        let left: Vec<_> = store.list(None).collect().await;
        assert!(left.is_empty(), "{left:?}");
    }

    #[tokio::test]
    async fn check_fails_on_a_store_without_conditional_writes() {
        // A store that answers every create-if-absent PUT with success, like one that ignores
        // If-None-Match.
        #[derive(Debug)]
        struct Overwriting(object_store::memory::InMemory);
        impl fmt::Display for Overwriting {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("Overwriting")
            }
        }
        #[async_trait::async_trait]
        impl ObjectStore for Overwriting {
            async fn put_opts(
                &self,
                location: &Path,
                payload: PutPayload,
                _opts: object_store::PutOptions,
            ) -> object_store::Result<object_store::PutResult> {
                self.0.put_opts(location, payload, Default::default()).await
            }
            async fn put_multipart_opts(
                &self,
                location: &Path,
                opts: object_store::PutMultipartOptions,
            ) -> object_store::Result<Box<dyn object_store::MultipartUpload>> {
                self.0.put_multipart_opts(location, opts).await
            }
            async fn get_opts(
                &self,
                location: &Path,
                options: object_store::GetOptions,
            ) -> object_store::Result<object_store::GetResult> {
                self.0.get_opts(location, options).await
            }
            fn delete_stream(
                &self,
                locations: futures_util::stream::BoxStream<'static, object_store::Result<Path>>,
            ) -> futures_util::stream::BoxStream<'static, object_store::Result<Path>> {
                self.0.delete_stream(locations)
            }
            fn list(
                &self,
                prefix: Option<&Path>,
            ) -> futures_util::stream::BoxStream<
                'static,
                object_store::Result<object_store::ObjectMeta>,
            > {
                self.0.list(prefix)
            }
            async fn list_with_delimiter(
                &self,
                prefix: Option<&Path>,
            ) -> object_store::Result<object_store::ListResult> {
                self.0.list_with_delimiter(prefix).await
            }
            async fn copy_opts(
                &self,
                from: &Path,
                to: &Path,
                options: object_store::CopyOptions,
            ) -> object_store::Result<()> {
                self.0.copy_opts(from, to, options).await
            }
        }
        let store = Arc::new(Overwriting(object_store::memory::InMemory::new()));
        let bucket = Bucket::from_store(url("s3://bucket/p"), store, "memory");
        let e = bucket.check().await.unwrap_err();
        assert!(
            matches!(e, BucketError::NoConditionalWrites { .. }),
            "{e:?}"
        );
        assert!(e.to_string().contains("If-None-Match"), "{e}");
    }
}
