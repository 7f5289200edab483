//! Webhook delivery against a real receiver: a hyper server on 127.0.0.1 (plain or TLS) that
//! checks every request's signature with `verify`, records it, and answers from a script.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::header::HeaderMap;
use hyper::service::service_fn;
use hyper::{Request, Response};
use hyper_util::rt::TokioIo;
use sluice_triggers::webhook::{
    self, DeliveryError, Firing, IDEMPOTENCY_HEADER, Outcome, RECEIVER_TOLERANCE_S, RetryPolicy,
    SIGNATURE_HEADER, TRIGGER_HEADER, VerifyError, WebhookClient, deliver, verify,
};
use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio::task::{JoinHandle, JoinSet};

const SECRET: &[u8] = b"whsec_test_secret";
const PAYLOAD: &[u8] = br#"{"trigger":"churn-risk","entity":"u-42","fired_at_ms":1767225600000}"#;
/// 2026-01-01T00:00:00Z, the tests' clock start.
const START_MS: i64 = 1_767_225_600_000;

/// What the receiver does with a request.
#[derive(Debug, Clone, Copy)]
enum Respond {
    Status(u16),
    StatusRetryAfter(u16, u64),
    /// Reads the request and never answers.
    Hang,
}

#[derive(Debug, Clone)]
struct Recorded {
    path_and_query: String,
    headers: HeaderMap,
    body: Bytes,
    verified: Result<(), VerifyError>,
}

struct State {
    /// The answers, in order; 200 once they run out.
    script: Mutex<VecDeque<Respond>>,
    requests: Mutex<Vec<Recorded>>,
    /// Unix ms, shared with the sender's clock.
    clock_ms: Arc<AtomicI64>,
}

/// The receiver; dropping it stops the server and every connection.
struct Receiver {
    url: String,
    state: Arc<State>,
    server: JoinHandle<()>,
}

impl Drop for Receiver {
    fn drop(&mut self) {
        // The connection tasks live in a JoinSet owned by the server task: aborted with it.
        self.server.abort();
    }
}

impl Receiver {
    async fn start(script: &[Respond], clock_ms: Arc<AtomicI64>) -> Self {
        Self::start_with(script, clock_ms, None).await
    }

    async fn start_with(
        script: &[Respond],
        clock_ms: Arc<AtomicI64>,
        tls: Option<tokio_rustls::TlsAcceptor>,
    ) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let state = Arc::new(State {
            script: Mutex::new(script.iter().copied().collect()),
            requests: Mutex::new(Vec::new()),
            clock_ms,
        });
        let url = match tls {
            Some(_) => format!("https://localhost:{port}/hooks/churn?v=1"),
            None => format!("http://127.0.0.1:{port}/hooks/churn?v=1"),
        };
        let server_state = Arc::clone(&state);
        let server = tokio::spawn(async move {
            let mut connections = JoinSet::new();
            loop {
                let (stream, _) = listener.accept().await.unwrap();
                let state = Arc::clone(&server_state);
                let tls = tls.clone();
                connections.spawn(async move {
                    let service = service_fn(move |request| handle(Arc::clone(&state), request));
                    let http = hyper::server::conn::http1::Builder::new();
                    // Errors are the client hanging up (timeouts, stops): nothing to check.
                    let _served = match tls {
                        Some(tls) => match tls.accept(stream).await {
                            Ok(stream) => {
                                http.serve_connection(TokioIo::new(stream), service).await
                            }
                            Err(_) => return,
                        },
                        None => http.serve_connection(TokioIo::new(stream), service).await,
                    };
                });
            }
        });
        Self { url, state, server }
    }

    fn requests(&self) -> Vec<Recorded> {
        self.state.requests.lock().unwrap().clone()
    }
}

async fn handle(
    state: Arc<State>,
    request: Request<Incoming>,
) -> Result<Response<Full<Bytes>>, hyper::Error> {
    let (parts, body) = request.into_parts();
    let body = body.collect().await?.to_bytes();
    let now_s = state.clock_ms.load(Ordering::SeqCst).div_euclid(1_000);
    let signature = parts
        .headers
        .get(SIGNATURE_HEADER)
        .map(|v| v.to_str().unwrap().to_owned());
    let verified = verify(
        SECRET,
        &signature.unwrap_or_default(),
        &body,
        now_s,
        RECEIVER_TOLERANCE_S,
    );
    state.requests.lock().unwrap().push(Recorded {
        path_and_query: parts.uri.path_and_query().unwrap().to_string(),
        headers: parts.headers,
        body,
        verified,
    });
    let respond = state
        .script
        .lock()
        .unwrap()
        .pop_front()
        .unwrap_or(Respond::Status(200));
    let (status, retry_after_s) = match respond {
        Respond::Status(status) => (status, None),
        Respond::StatusRetryAfter(status, seconds) => (status, Some(seconds)),
        Respond::Hang => std::future::pending().await,
    };
    let mut response = Response::builder().status(status);
    if let Some(seconds) = retry_after_s {
        response = response.header("Retry-After", seconds.to_string());
    }
    Ok(response.body(Full::new(Bytes::from_static(b"{}"))).unwrap())
}

/// A clock that moves 1 s forward each time it is read, so every attempt signs a new time.
fn ticking_clock(clock_ms: &Arc<AtomicI64>) -> impl Fn() -> i64 + Sync + use<> {
    let clock_ms = Arc::clone(clock_ms);
    move || clock_ms.fetch_add(1_000, Ordering::SeqCst) + 1_000
}

fn firing(url: &str) -> Firing<'_> {
    Firing {
        url,
        secret: SECRET,
        trigger_name: "churn-risk",
        idempotency_key: "churn-risk/u-42/1767225600000",
        payload: Bytes::from_static(PAYLOAD),
    }
}

fn fast_policy(max_attempts: u32) -> RetryPolicy {
    RetryPolicy {
        max_attempts,
        initial_backoff_ms: 5,
        max_backoff_ms: 20,
    }
}

fn header<'a>(request: &'a Recorded, name: &str) -> &'a str {
    request
        .headers
        .get(name)
        .unwrap_or_else(|| panic!("no {name}"))
        .to_str()
        .unwrap()
}

#[tokio::test]
async fn delivered_first_time_signed() {
    let clock_ms = Arc::new(AtomicI64::new(START_MS));
    let receiver = Receiver::start(&[], Arc::clone(&clock_ms)).await;
    let (_stop_tx, mut stop) = watch::channel(false);
    let outcome = deliver(
        &WebhookClient::new(),
        &firing(&receiver.url),
        &fast_policy(3),
        &ticking_clock(&clock_ms),
        &mut stop,
    )
    .await;
    assert_eq!(outcome, Outcome::Delivered { attempts: 1 });

    let requests = receiver.requests();
    assert_eq!(requests.len(), 1);
    let request = &requests[0];
    assert_eq!(request.verified, Ok(()));
    assert_eq!(request.path_and_query, "/hooks/churn?v=1");
    assert_eq!(request.body, PAYLOAD);
    assert_eq!(header(request, "content-type"), "application/json");
    assert_eq!(header(request, "content-length"), PAYLOAD.len().to_string());
    assert_eq!(
        header(request, "user-agent"),
        concat!("sluice/", env!("CARGO_PKG_VERSION"))
    );
    assert_eq!(
        header(request, IDEMPOTENCY_HEADER),
        "churn-risk/u-42/1767225600000"
    );
    assert_eq!(header(request, TRIGGER_HEADER), "churn-risk");
    assert_eq!(
        header(request, "host"),
        receiver.url.split('/').nth(2).unwrap()
    );

    // The signature is over this body, with this secret, at the clock's time.
    let signature = header(request, SIGNATURE_HEADER);
    let now_s = (START_MS + 1_000) / 1_000;
    assert_eq!(signature, webhook::sign(SECRET, now_s, PAYLOAD));
    assert_eq!(verify(SECRET, signature, PAYLOAD, now_s, 300), Ok(()));
    let mut tampered = PAYLOAD.to_vec();
    tampered[3] ^= 1;
    assert_eq!(
        verify(SECRET, signature, &tampered, now_s, 300),
        Err(VerifyError::Mismatch)
    );
    assert_eq!(
        verify(b"wrong", signature, PAYLOAD, now_s, 300),
        Err(VerifyError::Mismatch)
    );
    assert!(matches!(
        verify(SECRET, signature, PAYLOAD, now_s + 301, 300),
        Err(VerifyError::TooOld { .. })
    ));
}

#[tokio::test]
async fn server_errors_are_retried_with_the_same_key() {
    let clock_ms = Arc::new(AtomicI64::new(START_MS));
    let script = [Respond::Status(500), Respond::Status(503)];
    let receiver = Receiver::start(&script, Arc::clone(&clock_ms)).await;
    let (_stop_tx, mut stop) = watch::channel(false);
    let outcome = deliver(
        &WebhookClient::new(),
        &firing(&receiver.url),
        &fast_policy(5),
        &ticking_clock(&clock_ms),
        &mut stop,
    )
    .await;
    assert_eq!(outcome, Outcome::Delivered { attempts: 3 });

    let requests = receiver.requests();
    assert_eq!(requests.len(), 3);
    for request in &requests {
        assert_eq!(request.verified, Ok(()));
        assert_eq!(
            header(request, IDEMPOTENCY_HEADER),
            "churn-risk/u-42/1767225600000"
        );
        assert_eq!(request.body, PAYLOAD);
    }
    // Each attempt is signed afresh, at its own time.
    let signatures: Vec<_> = requests
        .iter()
        .map(|r| header(r, SIGNATURE_HEADER))
        .collect();
    assert_ne!(signatures[0], signatures[1]);
    assert_ne!(signatures[1], signatures[2]);
}

#[tokio::test]
async fn client_errors_are_not_retried() {
    let clock_ms = Arc::new(AtomicI64::new(START_MS));
    let receiver = Receiver::start(&[Respond::Status(400)], Arc::clone(&clock_ms)).await;
    let (_stop_tx, mut stop) = watch::channel(false);
    let outcome = deliver(
        &WebhookClient::new(),
        &firing(&receiver.url),
        &fast_policy(5),
        &ticking_clock(&clock_ms),
        &mut stop,
    )
    .await;
    assert_eq!(
        outcome,
        Outcome::Failed {
            attempts: 1,
            last_error: "HTTP status 400".into()
        }
    );
    assert_eq!(receiver.requests().len(), 1);
}

#[tokio::test]
async fn too_many_requests_honours_retry_after_capped() {
    let clock_ms = Arc::new(AtomicI64::new(START_MS));
    // Asks for an hour; the policy caps waits at 20 ms.
    let script = [Respond::StatusRetryAfter(429, 3_600), Respond::Status(408)];
    let receiver = Receiver::start(&script, Arc::clone(&clock_ms)).await;
    let (_stop_tx, mut stop) = watch::channel(false);
    let began = Instant::now();
    let outcome = deliver(
        &WebhookClient::new(),
        &firing(&receiver.url),
        &fast_policy(5),
        &ticking_clock(&clock_ms),
        &mut stop,
    )
    .await;
    assert_eq!(outcome, Outcome::Delivered { attempts: 3 });
    assert!(
        began.elapsed() < Duration::from_secs(5),
        "{:?}",
        began.elapsed()
    );

    // Under the cap, the receiver's wait replaces the (5 ms) backoff.
    let receiver = Receiver::start(&[Respond::StatusRetryAfter(503, 1)], clock_ms.clone()).await;
    let policy = RetryPolicy {
        max_attempts: 3,
        initial_backoff_ms: 5,
        max_backoff_ms: 5_000,
    };
    let began = Instant::now();
    let (client, firing) = (WebhookClient::new(), firing(&receiver.url));
    let outcome = deliver(
        &client,
        &firing,
        &policy,
        &ticking_clock(&clock_ms),
        &mut stop,
    )
    .await;
    assert_eq!(outcome, Outcome::Delivered { attempts: 2 });
    assert!(
        began.elapsed() >= Duration::from_secs(1),
        "{:?}",
        began.elapsed()
    );
}

#[tokio::test]
async fn connection_refused_until_out_of_attempts() {
    // A port nothing listens on: bound, then released.
    let port = {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        listener.local_addr().unwrap().port()
    };
    let url = format!("http://127.0.0.1:{port}/hook");
    let clock_ms = Arc::new(AtomicI64::new(START_MS));
    let (_stop_tx, mut stop) = watch::channel(false);
    let outcome = deliver(
        &WebhookClient::new(),
        &firing(&url),
        &fast_policy(4),
        &ticking_clock(&clock_ms),
        &mut stop,
    )
    .await;
    let Outcome::Failed {
        attempts,
        last_error,
    } = outcome
    else {
        panic!("{outcome:?}")
    };
    assert_eq!(attempts, 4);
    assert!(
        last_error.starts_with(&format!("cannot connect to 127.0.0.1:{port}: ")),
        "{last_error}"
    );
    // Each attempt read the clock once.
    assert_eq!(clock_ms.load(Ordering::SeqCst), START_MS + 4 * 1_000);
}

#[tokio::test]
async fn a_receiver_that_never_answers_times_out() {
    let clock_ms = Arc::new(AtomicI64::new(START_MS));
    let receiver = Receiver::start(&[Respond::Hang, Respond::Hang], Arc::clone(&clock_ms)).await;
    let client = WebhookClient::new().with_attempt_timeout(Duration::from_millis(200));
    let (_stop_tx, mut stop) = watch::channel(false);
    let began = Instant::now();
    let outcome = deliver(
        &client,
        &firing(&receiver.url),
        &fast_policy(2),
        &ticking_clock(&clock_ms),
        &mut stop,
    )
    .await;
    assert_eq!(
        outcome,
        Outcome::Failed {
            attempts: 2,
            last_error: "no response within 200 ms".into()
        }
    );
    assert!(began.elapsed() >= Duration::from_millis(400));
    assert_eq!(receiver.requests().len(), 2);

    // One attempt on its own says the same.
    let receiver = Receiver::start(&[Respond::Hang], Arc::clone(&clock_ms)).await;
    let error = client
        .post(&receiver.url, &[], Bytes::from_static(PAYLOAD))
        .await
        .unwrap_err();
    assert!(matches!(error, DeliveryError::Timeout { .. }), "{error:?}");
    assert!(error.is_retryable());
}

#[tokio::test]
async fn stop_during_backoff_returns_promptly() {
    let clock_ms = Arc::new(AtomicI64::new(START_MS));
    let receiver = Receiver::start(&[Respond::Status(503)], Arc::clone(&clock_ms)).await;
    let (stop_tx, mut stop) = watch::channel(false);
    // A minute's backoff: only the stop can end this quickly.
    let policy = RetryPolicy {
        max_attempts: 5,
        initial_backoff_ms: 60_000,
        max_backoff_ms: 60_000,
    };
    let began = Instant::now();
    let clock = ticking_clock(&clock_ms);
    let (client, firing) = (WebhookClient::new(), firing(&receiver.url));
    let delivery = deliver(&client, &firing, &policy, &clock, &mut stop);
    let stopper = async {
        while receiver.requests().is_empty() {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        stop_tx.send(true).unwrap();
    };
    let (outcome, ()) = tokio::join!(delivery, stopper);
    assert_eq!(outcome, Outcome::Stopped { attempts: 1 });
    assert!(
        began.elapsed() < Duration::from_secs(5),
        "{:?}",
        began.elapsed()
    );

    // Already stopped (or the sender gone): no attempt at all.
    let outcome = deliver(&client, &firing, &policy, &clock, &mut stop).await;
    assert_eq!(outcome, Outcome::Stopped { attempts: 0 });
    let (stop_tx, mut stop) = watch::channel(false);
    drop(stop_tx);
    let outcome = deliver(&client, &firing, &policy, &clock, &mut stop).await;
    assert_eq!(outcome, Outcome::Stopped { attempts: 0 });
    assert_eq!(receiver.requests().len(), 1);
}

#[tokio::test]
async fn stop_during_an_attempt_cuts_it_short() {
    let clock_ms = Arc::new(AtomicI64::new(START_MS));
    let receiver = Receiver::start(&[Respond::Hang], Arc::clone(&clock_ms)).await;
    let (stop_tx, mut stop) = watch::channel(false);
    let clock = ticking_clock(&clock_ms);
    let (client, firing, policy) = (WebhookClient::new(), firing(&receiver.url), fast_policy(3));
    let delivery = deliver(&client, &firing, &policy, &clock, &mut stop);
    let stopper = async {
        while receiver.requests().is_empty() {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        stop_tx.send(true).unwrap();
    };
    let began = Instant::now();
    let (outcome, ()) = tokio::join!(delivery, stopper);
    assert_eq!(outcome, Outcome::Stopped { attempts: 1 });
    // Well before the 10 s attempt timeout.
    assert!(
        began.elapsed() < Duration::from_secs(5),
        "{:?}",
        began.elapsed()
    );
}

#[tokio::test]
async fn https_with_a_configured_root() {
    let certified = rcgen::generate_simple_self_signed(vec!["localhost".to_owned()]).unwrap();
    let cert = certified.cert.der().clone();
    let key = rustls::pki_types::PrivateKeyDer::Pkcs8(certified.signing_key.serialize_der().into());
    let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
    let server_config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_no_client_auth()
        .with_single_cert(vec![cert.clone()], key)
        .unwrap();
    let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(server_config));
    let clock_ms = Arc::new(AtomicI64::new(START_MS));
    let receiver = Receiver::start_with(&[], Arc::clone(&clock_ms), Some(acceptor)).await;

    let mut roots = rustls::RootCertStore::empty();
    roots.add(cert).unwrap();
    let client = WebhookClient::new().with_tls_config(webhook::tls_config(roots).unwrap());
    let (_stop_tx, mut stop) = watch::channel(false);
    let outcome = deliver(
        &client,
        &firing(&receiver.url),
        &fast_policy(2),
        &ticking_clock(&clock_ms),
        &mut stop,
    )
    .await;
    assert_eq!(outcome, Outcome::Delivered { attempts: 1 });
    let requests = receiver.requests();
    assert_eq!(requests.len(), 1);
    assert_eq!(requests[0].verified, Ok(()));

    // The system's roots do not know this certificate: a TLS error, retried, then failed.
    let outcome = deliver(
        &WebhookClient::new(),
        &firing(&receiver.url),
        &fast_policy(2),
        &ticking_clock(&clock_ms),
        &mut stop,
    )
    .await;
    let Outcome::Failed {
        attempts: 2,
        last_error,
    } = outcome
    else {
        panic!("{outcome:?}")
    };
    assert!(
        last_error.starts_with("TLS handshake with localhost failed"),
        "{last_error}"
    );
}

#[test]
fn delivery_futures_can_be_spawned() {
    fn assert_send<T: Send>(_: &T) {}
    let client = WebhookClient::new();
    let firing = firing("http://127.0.0.1:9/");
    let clock = || 0;
    let (_stop_tx, mut stop) = watch::channel(false);
    let policy = RetryPolicy::default();
    assert_send(&deliver(&client, &firing, &policy, &clock, &mut stop));
}
