//! Webhook firings: signing and delivery.
//!
//! When a trigger whose sink is a webhook fires, its run loop builds the JSON payload and calls
//! [`deliver`], which POSTs it to the trigger's URL and retries until it is accepted, refused,
//! out of attempts or stopped. This module knows nothing of rules or topics: it gets bytes, a
//! URL, a secret and names, and returns an [`Outcome`].
//!
//! - Signing: [`sign`] makes the [`SIGNATURE_HEADER`] value `t=<unix s>,v1=<hex HMAC-SHA256>`
//!   over `"<unix s>.<payload>"`; [`verify`] is the receiver's side (constant-time, with a
//!   timestamp tolerance so a captured request cannot be replayed later). The timestamp is in
//!   the signed text, so a receiver that checks it knows the request is fresh.
//! - One attempt: [`WebhookClient::post`] (or [`WebhookClient::send`], which also returns
//!   `Retry-After`), plain http or https with rustls and the system's roots, under a timeout.
//! - Retries: [`deliver`] with a [`RetryPolicy`], signing each attempt afresh and sending the
//!   same [`IDEMPOTENCY_HEADER`] value on every attempt, so a receiver can drop duplicates.
//!
//! Delivery is at least once: an attempt that timed out or was cancelled may still have been
//! received and acted on, and a retry sends it again with the same idempotency key.

use std::error::Error as _;
use std::fmt;
use std::num::ParseIntError;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use bytes::Bytes;
use hmac::{Hmac, Mac};
use http_body_util::Full;
use hyper::Request;
use hyper::header::{CONTENT_TYPE, HOST, RETRY_AFTER, USER_AGENT};
use hyper_util::rt::TokioIo;
use rustls::pki_types::{InvalidDnsNameError, ServerName};
use sha2::Sha256;
use tokio::net::TcpStream;
use tokio::sync::watch;
use tokio_rustls::TlsConnector;

/// The header carrying [`sign`]'s value.
pub const SIGNATURE_HEADER: &str = "Sluice-Signature";
/// The header carrying the firing's idempotency key, the same on every attempt.
pub const IDEMPOTENCY_HEADER: &str = "Idempotency-Key";
/// The header carrying the name of the trigger that fired.
pub const TRIGGER_HEADER: &str = "Sluice-Trigger";
/// The `User-Agent` of every attempt.
pub const USER_AGENT_VALUE: &str = concat!("sluice/", env!("CARGO_PKG_VERSION"));
/// The timestamp tolerance receivers are told to use with [`verify`]: five minutes either way.
pub const RECEIVER_TOLERANCE_S: i64 = 300;
/// How long one attempt may take, connect to response head, unless configured otherwise.
pub const ATTEMPT_TIMEOUT_DEFAULT: Duration = Duration::from_secs(10);
/// The largest response head (status line and headers) read: only the status and
/// `Retry-After` are used, so a receiver has no reason to send more.
pub const RESPONSE_HEAD_BYTES_MAX: usize = 16 * 1024;
/// The most `v1=` signatures [`verify`] looks at in one header (a sender rotating secrets sends
/// two); more is refused as malformed rather than costing an HMAC comparison each.
pub const SIGNATURES_PER_HEADER_MAX: usize = 8;

type HmacSha256 = Hmac<Sha256>;

/// The [`SIGNATURE_HEADER`] value for `payload` sent at `unix_seconds`:
/// `t=<unix_seconds>,v1=<lowercase hex of HMAC-SHA256(secret, "<unix_seconds>.<payload>")>`.
pub fn sign(secret: &[u8], unix_seconds: i64, payload: &[u8]) -> String {
    let digest = signed_text_mac(secret, unix_seconds, payload)
        .finalize()
        .into_bytes();
    format!("t={unix_seconds},v1={}", hex::encode(digest))
}

/// The HMAC of the signed text `"<unix_seconds>.<payload>"`, not finalized.
fn signed_text_mac(secret: &[u8], unix_seconds: i64, payload: &[u8]) -> HmacSha256 {
    // HMAC takes keys of any length (long ones are hashed), so this cannot fail.
    let mut mac = HmacSha256::new_from_slice(secret).expect("HMAC accepts any key length");
    mac.update(unix_seconds.to_string().as_bytes());
    mac.update(b".");
    mac.update(payload);
    mac
}

/// Why [`verify`] refused a request.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum VerifyError {
    #[error("malformed signature header: {reason}")]
    Malformed { reason: &'static str },
    #[error("malformed signature header: the timestamp is not an integer")]
    Timestamp(#[source] ParseIntError),
    #[error("malformed signature header: a v1 signature is not 64 hex digits")]
    SignatureHex(#[source] hex::FromHexError),
    #[error("signature timestamp {timestamp} is more than {tolerance_s} s before now ({now})")]
    TooOld {
        timestamp: i64,
        now: i64,
        tolerance_s: i64,
    },
    #[error("signature timestamp {timestamp} is more than {tolerance_s} s after now ({now})")]
    TooNew {
        timestamp: i64,
        now: i64,
        tolerance_s: i64,
    },
    #[error("no signature matches the payload and secret")]
    Mismatch,
}

/// Checks a [`SIGNATURE_HEADER`] value against `payload` and `secret` at `now_unix` (seconds):
/// exactly one `t=`, one to [`SIGNATURES_PER_HEADER_MAX`] `v1=` (accepted if any matches, so a
/// sender can sign with an old and a new secret while they rotate), other keys ignored (later
/// schemes), and a timestamp within `tolerance_s` of now either way ([`RECEIVER_TOLERANCE_S`]
/// is the recommended value; older is a possible replay, newer a wrong clock). Signatures are
/// compared in constant time.
pub fn verify(
    secret: &[u8],
    header: &str,
    payload: &[u8],
    now_unix: i64,
    tolerance_s: i64,
) -> Result<(), VerifyError> {
    let malformed = |reason| VerifyError::Malformed { reason };
    // First pass: the shape, the timestamp and the count of signatures, before any HMAC.
    let mut timestamp = None;
    let mut signatures = 0;
    for element in header.split(',') {
        let (key, value) = element
            .trim()
            .split_once('=')
            .ok_or(malformed("an element is not key=value"))?;
        match key {
            "t" if timestamp.is_some() => return Err(malformed("more than one t=")),
            "t" => timestamp = Some(value.parse::<i64>().map_err(VerifyError::Timestamp)?),
            "v1" => signatures += 1,
            _ => {}
        }
    }
    let timestamp = timestamp.ok_or(malformed("no t="))?;
    if signatures == 0 {
        return Err(malformed("no v1="));
    }
    if signatures > SIGNATURES_PER_HEADER_MAX {
        return Err(malformed("too many v1="));
    }
    if now_unix.saturating_sub(timestamp) > tolerance_s {
        return Err(VerifyError::TooOld {
            timestamp,
            now: now_unix,
            tolerance_s,
        });
    }
    if timestamp.saturating_sub(now_unix) > tolerance_s {
        return Err(VerifyError::TooNew {
            timestamp,
            now: now_unix,
            tolerance_s,
        });
    }
    // Second pass: the signatures. Every one is decoded and compared, matching or not.
    let mac = signed_text_mac(secret, timestamp, payload);
    let mut matched = false;
    for element in header.split(',') {
        if let Some(("v1", value)) = element.trim().split_once('=') {
            let mut signature = [0u8; 32];
            hex::decode_to_slice(value, &mut signature).map_err(VerifyError::SignatureHex)?;
            // `verify_slice` compares in constant time.
            matched |= mac.clone().verify_slice(&signature).is_ok();
        }
    }
    if matched {
        Ok(())
    } else {
        Err(VerifyError::Mismatch)
    }
}

/// Why one attempt did not get a response.
#[derive(Debug, thiserror::Error)]
pub enum DeliveryError {
    #[error("invalid webhook URL {url:?}")]
    Url {
        url: String,
        #[source]
        source: hyper::http::uri::InvalidUri,
    },
    #[error("unsupported webhook URL {url:?}: {reason}")]
    UnsupportedUrl { url: String, reason: &'static str },
    #[error("invalid webhook request")]
    Request(#[source] hyper::http::Error),
    #[error("webhook host {host:?} is not a valid TLS server name")]
    ServerName {
        host: String,
        #[source]
        source: InvalidDnsNameError,
    },
    #[error("cannot build the TLS client configuration")]
    TlsConfig(#[source] rustls::Error),
    #[error("cannot connect to {addr}")]
    Connect {
        addr: String,
        #[source]
        source: std::io::Error,
    },
    #[error("TLS handshake with {host} failed")]
    Tls {
        host: String,
        #[source]
        source: std::io::Error,
    },
    #[error("HTTP exchange failed")]
    Http(#[source] hyper::Error),
    #[error("no response within {} ms", .after.as_millis())]
    Timeout { after: Duration },
}

impl DeliveryError {
    /// Whether another attempt may succeed: not when the URL, a header or the TLS setup is
    /// wrong (the same request fails the same way), yes for network errors and timeouts.
    pub fn is_retryable(&self) -> bool {
        match self {
            Self::Url { .. }
            | Self::UnsupportedUrl { .. }
            | Self::Request(_)
            | Self::ServerName { .. }
            | Self::TlsConfig(_) => false,
            Self::Connect { .. } | Self::Tls { .. } | Self::Http(_) | Self::Timeout { .. } => true,
        }
    }
}

/// The response to one attempt, as far as delivery cares.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Reply {
    pub status: u16,
    /// `Retry-After` in its delay-seconds form; the HTTP-date form is ignored.
    pub retry_after_s: Option<u64>,
}

/// Sends webhook attempts. Built once per trigger; cheap to share (`&self` methods).
///
/// Each attempt opens its own connection (TCP, then TLS for https) and closes it once the
/// response head is read. A firing is a rare event per trigger and receivers are often behind
/// load balancers that close idle connections, so a pool would mostly hold dead sockets; the
/// cost is one handshake per attempt. Redirects are not followed: a signed request is meant
/// for the configured URL only.
#[derive(Debug, Clone)]
pub struct WebhookClient {
    attempt_timeout: Duration,
    /// `None`: the system's roots, loaded once per process at the first https attempt.
    tls: Option<Arc<rustls::ClientConfig>>,
}

impl Default for WebhookClient {
    fn default() -> Self {
        Self::new()
    }
}

impl WebhookClient {
    /// A client with [`ATTEMPT_TIMEOUT_DEFAULT`] that trusts the system's root certificates.
    pub fn new() -> Self {
        Self {
            attempt_timeout: ATTEMPT_TIMEOUT_DEFAULT,
            tls: None,
        }
    }

    /// Sets how long one attempt may take, from connecting to the response head.
    pub fn with_attempt_timeout(mut self, attempt_timeout: Duration) -> Self {
        self.attempt_timeout = attempt_timeout;
        self
    }

    /// Uses `config` for https instead of the system's roots (a private CA, tests); see
    /// [`tls_config`].
    pub fn with_tls_config(mut self, config: Arc<rustls::ClientConfig>) -> Self {
        self.tls = Some(config);
        self
    }

    /// The per-attempt timeout.
    pub fn attempt_timeout(&self) -> Duration {
        self.attempt_timeout
    }

    /// One attempt: POSTs `payload` to `url` with `headers` (plus `Host`, `Content-Type:
    /// application/json`, `User-Agent` and `Content-Length`) and returns the response status,
    /// whatever it is. `Err` only when there was no response (or the URL or a header is invalid).
    pub async fn post(
        &self,
        url: &str,
        headers: &[(&str, &str)],
        payload: Bytes,
    ) -> Result<u16, DeliveryError> {
        self.send(url, headers, payload)
            .await
            .map(|reply| reply.status)
    }

    /// [`post`](Self::post), also returning the response's `Retry-After`.
    pub async fn send(
        &self,
        url: &str,
        headers: &[(&str, &str)],
        payload: Bytes,
    ) -> Result<Reply, DeliveryError> {
        let target = Target::parse(url)?;
        let mut request = Request::post(target.path_and_query.as_str())
            .header(HOST, target.authority.as_str())
            .header(CONTENT_TYPE, "application/json")
            .header(USER_AGENT, USER_AGENT_VALUE);
        for &(name, value) in headers {
            request = request.header(name, value);
        }
        let request = request
            .body(Full::new(payload))
            .map_err(DeliveryError::Request)?;
        match tokio::time::timeout(self.attempt_timeout, self.exchange(&target, request)).await {
            Ok(result) => result,
            Err(_elapsed) => Err(DeliveryError::Timeout {
                after: self.attempt_timeout,
            }),
        }
    }

    async fn exchange(
        &self,
        target: &Target,
        request: Request<Full<Bytes>>,
    ) -> Result<Reply, DeliveryError> {
        let tcp = TcpStream::connect((target.host.as_str(), target.port))
            .await
            .map_err(|source| DeliveryError::Connect {
                addr: format!("{}:{}", target.host, target.port),
                source,
            })?;
        if !target.https {
            return exchange_over(TokioIo::new(tcp), request).await;
        }
        let config = match &self.tls {
            Some(config) => Arc::clone(config),
            None => system_roots_config()?,
        };
        let name = ServerName::try_from(target.host.clone()).map_err(|source| {
            DeliveryError::ServerName {
                host: target.host.clone(),
                source,
            }
        })?;
        let tls = TlsConnector::from(config)
            .connect(name, tcp)
            .await
            .map_err(|source| DeliveryError::Tls {
                host: target.host.clone(),
                source,
            })?;
        exchange_over(TokioIo::new(tls), request).await
    }
}

/// One request and its response head over a fresh connection, which is closed on return.
async fn exchange_over<T>(io: T, request: Request<Full<Bytes>>) -> Result<Reply, DeliveryError>
where
    T: hyper::rt::Read + hyper::rt::Write + Unpin + Send + 'static,
{
    let (mut sender, connection) = hyper::client::conn::http1::Builder::new()
        .max_header_size(RESPONSE_HEAD_BYTES_MAX)
        .handshake(io)
        .await
        .map_err(DeliveryError::Http)?;
    // The connection is driven here rather than spawned, so nothing outlives the attempt (a
    // timeout or a stop drops both). If it ends first, the request's own result says why.
    let send = sender.send_request(request);
    tokio::pin!(send, connection);
    let response = tokio::select! {
        biased;
        response = &mut send => response,
        ended = &mut connection => match ended {
            Ok(()) => send.await,
            Err(error) => Err(error),
        },
    }
    .map_err(DeliveryError::Http)?;
    let retry_after_s = response
        .headers()
        .get(RETRY_AFTER)
        .and_then(|value| value.to_str().ok())
        .and_then(|value| value.trim().parse::<u64>().ok());
    Ok(Reply {
        status: response.status().as_u16(),
        retry_after_s,
    })
}

/// Checks that `url` is a webhook URL attempts can use (http or https, a host, no
/// credentials): for refusing a trigger at creation rather than at its first firing.
pub fn check_url(url: &str) -> Result<(), DeliveryError> {
    Target::parse(url).map(|_| ())
}

/// The parts of a webhook URL an attempt needs.
#[derive(Debug)]
struct Target {
    https: bool,
    /// Without the brackets of an IPv6 literal, as connecting and TLS want it.
    host: String,
    port: u16,
    /// `host[:port]` as written, for the `Host` header.
    authority: String,
    path_and_query: String,
}

impl Target {
    fn parse(url: &str) -> Result<Self, DeliveryError> {
        let unsupported = |reason| DeliveryError::UnsupportedUrl {
            url: url.to_owned(),
            reason,
        };
        let uri: hyper::Uri = url.parse().map_err(|source| DeliveryError::Url {
            url: url.to_owned(),
            source,
        })?;
        let https = match uri.scheme_str() {
            Some("http") => false,
            Some("https") => true,
            _ => return Err(unsupported("the scheme must be http or https")),
        };
        let authority = uri.authority().ok_or(unsupported("no host"))?;
        if authority.as_str().contains('@') {
            return Err(unsupported("credentials in the URL are not supported"));
        }
        let host = authority.host();
        let host = host
            .strip_prefix('[')
            .and_then(|h| h.strip_suffix(']'))
            .unwrap_or(host);
        if host.is_empty() {
            return Err(unsupported("no host"));
        }
        Ok(Self {
            https,
            host: host.to_owned(),
            port: authority.port_u16().unwrap_or(if https { 443 } else { 80 }),
            authority: authority.as_str().to_owned(),
            path_and_query: uri.path_and_query().map_or("/", |p| p.as_str()).to_owned(),
        })
    }
}

/// A TLS client configuration for webhooks trusting `roots`: aws-lc-rs, the safe default
/// protocol versions, ALPN `http/1.1`.
pub fn tls_config(
    roots: rustls::RootCertStore,
) -> Result<Arc<rustls::ClientConfig>, rustls::Error> {
    let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
    let mut config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()?
        .with_root_certificates(roots)
        .with_no_client_auth();
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(Arc::new(config))
}

/// The configuration trusting the system's roots, loaded once per process (reading the
/// system's certificate store costs milliseconds; triggers are many).
fn system_roots_config() -> Result<Arc<rustls::ClientConfig>, DeliveryError> {
    static CONFIG: OnceLock<Result<Arc<rustls::ClientConfig>, rustls::Error>> = OnceLock::new();
    CONFIG
        .get_or_init(|| {
            let loaded = rustls_native_certs::load_native_certs();
            for error in &loaded.errors {
                tracing::warn!(%error, "webhooks: a system root certificate could not be loaded");
            }
            let mut roots = rustls::RootCertStore::empty();
            let (added, ignored) = roots.add_parsable_certificates(loaded.certs);
            if added == 0 {
                tracing::warn!(
                    ignored,
                    "webhooks: no system root certificates; https will fail"
                );
            }
            tls_config(roots)
        })
        .clone()
        .map_err(DeliveryError::TlsConfig)
}

/// How [`deliver`] retries.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RetryPolicy {
    /// Attempts in all, the first included; 0 is taken as 1.
    pub max_attempts: u32,
    /// The wait after the first failed attempt; it doubles after each further one.
    pub initial_backoff_ms: u64,
    /// The longest wait between two attempts, `Retry-After` included.
    pub max_backoff_ms: u64,
}

impl Default for RetryPolicy {
    /// 8 attempts, waits of 1, 2, 4, ... 64 s (about two minutes in all), at most 5 minutes
    /// when a receiver asks for longer with `Retry-After`.
    fn default() -> Self {
        Self {
            max_attempts: 8,
            initial_backoff_ms: 1_000,
            max_backoff_ms: 300_000,
        }
    }
}

impl RetryPolicy {
    /// The wait after failed attempt number `attempt` (1-based) when the receiver named none:
    /// `initial_backoff_ms * 2^(attempt - 1)`, capped at `max_backoff_ms`, then scaled by a
    /// jitter factor in [0.8, 1.2] and capped again.
    ///
    /// The jitter is a hash of `jitter_key` (the idempotency key) and the attempt number, not
    /// randomness: the same firing always waits the same (tests and replays are exact), while
    /// many firings failing at once against the same receiver spread their retries out
    /// instead of hammering it in lockstep.
    pub fn backoff_ms(&self, attempt: u32, jitter_key: &str) -> u64 {
        let doubling = 2u64.saturating_pow(attempt.saturating_sub(1));
        let base = self
            .initial_backoff_ms
            .saturating_mul(doubling)
            .min(self.max_backoff_ms);
        // FNV-1a over the key and the attempt: a well-mixed u64 without a dependency.
        let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
        for byte in jitter_key.bytes().chain(attempt.to_le_bytes()) {
            hash = (hash ^ u64::from(byte)).wrapping_mul(0x0000_0100_0000_01b3);
        }
        let permille = 800 + hash % 401;
        (base.saturating_mul(permille) / 1_000).min(self.max_backoff_ms)
    }
}

/// One firing to deliver: where, signed with what, and the bytes.
#[derive(Clone)]
pub struct Firing<'a> {
    pub url: &'a str,
    pub secret: &'a [u8],
    /// Sent as [`TRIGGER_HEADER`].
    pub trigger_name: &'a str,
    /// Sent as [`IDEMPOTENCY_HEADER`], the same on every attempt.
    pub idempotency_key: &'a str,
    /// The JSON body, as given.
    pub payload: Bytes,
}

impl fmt::Debug for Firing<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // Never the secret.
        f.debug_struct("Firing")
            .field("url", &self.url)
            .field("trigger_name", &self.trigger_name)
            .field("idempotency_key", &self.idempotency_key)
            .field("payload_bytes", &self.payload.len())
            .finish_non_exhaustive()
    }
}

/// How a [`deliver`] call ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// A 2xx response to attempt number `attempts`.
    Delivered { attempts: u32 },
    /// Out of attempts, or a response that retrying cannot change; `last_error` says which.
    Failed { attempts: u32, last_error: String },
    /// The stop signal came; `attempts` were made (the last may have been cut short, and may
    /// still have reached the receiver).
    Stopped { attempts: u32 },
}

/// Delivers `firing`: POSTs it until a 2xx response, a response retrying cannot change, the
/// end of `policy`'s attempts, or the stop signal.
///
/// Every attempt carries a fresh [`SIGNATURE_HEADER`] (signed at `clock()`, unix ms, rounded
/// down to seconds, so a receiver checking the timestamp accepts late retries), the same
/// [`IDEMPOTENCY_HEADER`], [`TRIGGER_HEADER`], `Content-Type: application/json` and
/// `User-Agent: sluice/<version>`.
///
/// Which responses are retried:
/// - 2xx: delivered.
/// - 408, 429, 5xx: retried; a `Retry-After` in seconds replaces the backoff, capped at
///   `max_backoff_ms`.
/// - Any other status (4xx, and 1xx/3xx, as redirects are not followed): failed at once. The
///   receiver refused this request (bad signature, unknown route, gone); sending it again
///   would get the same answer.
/// - No response (connect error, TLS error, reset, timeout): retried.
///
/// The waits are [`RetryPolicy::backoff_ms`], slept on tokio's clock. `stop` becoming `true`
/// (a deleted trigger, the broker shutting down), or its sender being dropped, ends the call
/// promptly with [`Outcome::Stopped`], during a wait or during an attempt.
pub async fn deliver(
    client: &WebhookClient,
    firing: &Firing<'_>,
    policy: &RetryPolicy,
    clock: &(dyn Fn() -> i64 + Sync),
    stop: &mut watch::Receiver<bool>,
) -> Outcome {
    let attempts_max = policy.max_attempts.max(1);
    let mut attempts = 0;
    loop {
        if *stop.borrow() || stop.has_changed().is_err() {
            return Outcome::Stopped { attempts };
        }
        attempts += 1;
        let signature = sign(firing.secret, clock().div_euclid(1_000), &firing.payload);
        let headers = [
            (SIGNATURE_HEADER, signature.as_str()),
            (IDEMPOTENCY_HEADER, firing.idempotency_key),
            (TRIGGER_HEADER, firing.trigger_name),
        ];
        let result = tokio::select! {
            biased;
            () = stopped(stop) => return Outcome::Stopped { attempts },
            result = client.send(firing.url, &headers, firing.payload.clone()) => result,
        };
        let (last_error, retry_after_s) = match result {
            Ok(reply) if (200..300).contains(&reply.status) => {
                return Outcome::Delivered { attempts };
            }
            Ok(Reply {
                status,
                retry_after_s,
            }) => {
                let last_error = format!("HTTP status {status}");
                if !matches!(status, 408 | 429 | 500..=599) {
                    return Outcome::Failed {
                        attempts,
                        last_error,
                    };
                }
                (last_error, retry_after_s)
            }
            Err(error) => {
                let last_error = describe(&error);
                if !error.is_retryable() {
                    return Outcome::Failed {
                        attempts,
                        last_error,
                    };
                }
                (last_error, None)
            }
        };
        tracing::debug!(
            trigger = firing.trigger_name,
            attempt = attempts,
            error = %last_error,
            "webhook attempt failed"
        );
        if attempts >= attempts_max {
            return Outcome::Failed {
                attempts,
                last_error,
            };
        }
        let wait_ms = match retry_after_s {
            Some(seconds) => seconds.saturating_mul(1_000).min(policy.max_backoff_ms),
            None => policy.backoff_ms(attempts, firing.idempotency_key),
        };
        tokio::select! {
            biased;
            () = stopped(stop) => return Outcome::Stopped { attempts },
            () = tokio::time::sleep(Duration::from_millis(wait_ms)) => {}
        }
    }
}

/// Resolves once `stop` is `true` or its sender is gone (no one is left to want delivery).
async fn stopped(stop: &mut watch::Receiver<bool>) {
    // `Err` is the closed channel, which means stop too.
    let _closed_or_stopped = stop.wait_for(|&stop| stop).await.is_err();
}

/// An error and its sources, joined with ": ".
fn describe(error: &DeliveryError) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        text.push_str(": ");
        text.push_str(&cause.to_string());
        source = cause.source();
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn signs_a_known_vector() {
        // openssl: printf '%s' '1767225600.{"entity":"u-42","event":"signed_up"}' |
        //   openssl dgst -sha256 -hmac 'whsec_0123456789'
        let payload = br#"{"entity":"u-42","event":"signed_up"}"#;
        let header = sign(b"whsec_0123456789", 1_767_225_600, payload);
        assert_eq!(
            header,
            "t=1767225600,v1=e9a27b6b3674236181ac80c3e3464e1887f670c1224e5b68558e63245db3a891"
        );
        assert_eq!(
            verify(b"whsec_0123456789", &header, payload, 1_767_225_600, 300),
            Ok(())
        );
    }

    #[test]
    fn hmac_matches_rfc_4231_case_2() {
        let mut mac = HmacSha256::new_from_slice(b"Jefe").unwrap();
        mac.update(b"what do ya want for nothing?");
        assert_eq!(
            hex::encode(mac.finalize().into_bytes()),
            "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843"
        );
    }

    #[test]
    fn verify_refuses() {
        let secret = b"s3cret";
        let payload = b"{}";
        let now = 1_700_000_000;
        let good = sign(secret, now, payload);
        let check = |header: &str| verify(secret, header, payload, now, 300);
        assert_eq!(
            verify(secret, &good, b"{ }", now, 300),
            Err(VerifyError::Mismatch)
        );
        assert_eq!(
            verify(b"other", &good, payload, now, 300),
            Err(VerifyError::Mismatch)
        );
        assert!(matches!(
            verify(secret, &sign(secret, now - 301, payload), payload, now, 300),
            Err(VerifyError::TooOld { .. })
        ));
        assert_eq!(
            verify(secret, &sign(secret, now - 300, payload), payload, now, 300),
            Ok(())
        );
        assert!(matches!(
            verify(secret, &sign(secret, now + 301, payload), payload, now, 300),
            Err(VerifyError::TooNew { .. })
        ));
        for malformed in [
            "",
            "t=1",
            "v1=00",
            "garbage",
            "t=1,t=1,v1=00",
            &"v1=0,".repeat(9),
        ] {
            assert!(
                matches!(check(malformed), Err(VerifyError::Malformed { .. })),
                "{malformed}"
            );
        }
        assert!(matches!(check("t=x,v1=00"), Err(VerifyError::Timestamp(_))));
        let short = format!("t={now},v1=abcd");
        assert!(matches!(check(&short), Err(VerifyError::SignatureHex(_))));
        // Any matching v1 will do, in any position; unknown schemes are ignored.
        let v1 = good.split_once(",v1=").unwrap().1;
        let bad = "0".repeat(64);
        assert_eq!(check(&format!("t={now},v1={bad},v0=zz,v1={v1}")), Ok(()));
        assert_eq!(check(&format!("v1={v1}, t={now}")), Ok(()));
        assert_eq!(
            check(&format!("t={now},v1={bad}")),
            Err(VerifyError::Mismatch)
        );
    }

    #[test]
    fn backoff_doubles_with_jitter_and_caps() {
        let policy = RetryPolicy {
            max_attempts: 10,
            initial_backoff_ms: 100,
            max_backoff_ms: 1_000,
        };
        for attempt in 1..=10 {
            let base = (100u64 << (attempt - 1)).min(1_000);
            let wait = policy.backoff_ms(attempt, "key");
            assert!(
                wait >= base * 8 / 10 && wait <= (base * 12 / 10).min(1_000),
                "{attempt}: {wait}"
            );
            assert_eq!(wait, policy.backoff_ms(attempt, "key"), "deterministic");
        }
        let waits: std::collections::BTreeSet<_> = (0..50)
            .map(|key| policy.backoff_ms(1, &key.to_string()))
            .collect();
        assert!(waits.len() > 10, "firings spread out: {waits:?}");
        assert_eq!(policy.backoff_ms(u32::MAX, "key"), 1_000);
    }

    #[test]
    fn parses_urls() {
        let target = Target::parse("https://example.com:8443/hooks/a?x=1").unwrap();
        assert!(target.https);
        assert_eq!((target.host.as_str(), target.port), ("example.com", 8443));
        assert_eq!(target.authority, "example.com:8443");
        assert_eq!(target.path_and_query, "/hooks/a?x=1");
        let target = Target::parse("http://[::1]").unwrap();
        assert_eq!((target.host.as_str(), target.port), ("::1", 80));
        assert_eq!(target.path_and_query, "/");
        let target = Target::parse("http://127.0.0.1:9/").unwrap();
        assert_eq!((target.host.as_str(), target.port), ("127.0.0.1", 9));
        assert_eq!(target.authority, "127.0.0.1:9");
        for bad in [
            "ftp://x/",
            "/relative",
            "https://user:pw@example.com/",
            "http://",
        ] {
            assert!(Target::parse(bad).is_err(), "{bad}");
        }
    }
}
