//! SASL authentication on `SASL_PLAINTEXT` and `SASL_SSL` listeners, as Kafka does it.
//!
//! Where it sits: a connection on a SASL listener starts [`Unauthenticated`](SaslState) and
//! answers SaslHandshake and SaslAuthenticate itself ([`SaslSession::step`]); ApiVersions
//! goes to the broker as usual, and any other request closes the connection. Once the
//! exchange succeeds the connection's principal becomes `User:NAME` and every request goes
//! to the broker. The mechanisms themselves live in `sluice-security`
//! ([`ScramServer`], [`authenticate_plain`]); this module holds the per-connection state
//! machine, the shared [`Sasl`] (enabled mechanisms, the user store, the failure backoff)
//! and the wire messages.
//!
//! Per connection:
//!
//! ```text
//! AwaitingHandshake --SaslHandshake ok--> AwaitingToken --SaslAuthenticate...--> Authenticated
//!        |                                      |
//!        +--- unknown mechanism, bad token, request out of turn ---------------> Failed (close)
//! ```
//!
//! Failures are answered (SASL_AUTHENTICATION_FAILED with a message that does not say whether
//! the user exists), counted, logged without secrets, and delayed by a per-address backoff
//! ([`FailureBackoff`]) so one host cannot try passwords at full speed; then the connection
//! closes. Sessions never expire (`session_lifetime_ms` = 0): no re-authentication.

use std::collections::HashMap;
use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, SystemTime};

use bytes::Bytes;
use sluice_broker::log_limiter::LogLimiter;
use sluice_protocol::kafka_protocol::messages::{
    ResponseKind, SaslAuthenticateRequest, SaslAuthenticateResponse, SaslHandshakeRequest,
    SaslHandshakeResponse,
};
use sluice_protocol::kafka_protocol::protocol::StrBytes;
use sluice_security::{
    AuthError, FakeCredentials, ILLEGAL_SASL_STATE, SASL_AUTHENTICATION_FAILED, ScramMechanism,
    ScramServer, ScramState, ServerNonce, UNSUPPORTED_SASL_MECHANISM, UserStore,
    authenticate_plain, parse_plain,
};
use tokio::sync::watch;
use tokio::time::Instant;

/// A SASL mechanism Sluice offers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mechanism {
    Scram(ScramMechanism),
    Plain,
}

impl Mechanism {
    /// Kafka's name for it (`sasl.mechanism`).
    pub fn name(self) -> &'static str {
        match self {
            Mechanism::Scram(m) => m.name(),
            Mechanism::Plain => "PLAIN",
        }
    }

    /// Parses a mechanism name, exactly as Kafka compares them.
    pub fn from_name(name: &str) -> Option<Mechanism> {
        if name == "PLAIN" {
            Some(Mechanism::Plain)
        } else {
            ScramMechanism::from_name(name).map(Mechanism::Scram)
        }
    }
}

/// Parses `--sasl-mechanisms`: comma-separated names, each once.
pub fn parse_mechanisms(text: &str) -> Result<Vec<Mechanism>, String> {
    let mut out: Vec<Mechanism> = Vec::new();
    for name in text.split(',').map(str::trim).filter(|n| !n.is_empty()) {
        let Some(m) = Mechanism::from_name(name) else {
            return Err(format!(
                "invalid sasl_mechanisms: unknown mechanism '{name}'; use SCRAM-SHA-512, SCRAM-SHA-256 or PLAIN"
            ));
        };
        if !out.contains(&m) {
            out.push(m);
        }
    }
    if out.is_empty() {
        return Err("invalid sasl_mechanisms: no mechanism given".to_owned());
    }
    Ok(out)
}

/// How often the user file is checked for changes made by `sluice user` while the broker
/// runs.
const USERS_RELOAD_CHECK_INTERVAL: Duration = Duration::from_secs(2);

/// How often at most a failed authentication is logged (with a count of the others).
const FAILURE_LOG_INTERVAL: Duration = Duration::from_secs(5);

/// The user store, re-read when its file changes so users added by `sluice user add` while
/// the broker runs can log in.
#[derive(Debug)]
pub struct Users {
    data_dir: PathBuf,
    current: RwLock<Arc<UserStore>>,
    /// Modification time and length of the file when last read.
    seen: Mutex<Option<(SystemTime, u64)>>,
}

impl Users {
    /// Opens `DATA_DIR/security/users.json` (an absent file is an empty store).
    pub fn open(data_dir: &Path) -> Result<Users, sluice_security::SecurityError> {
        let store = UserStore::open(data_dir)?;
        let seen = stamp(store.path());
        Ok(Users {
            data_dir: data_dir.to_owned(),
            current: RwLock::new(Arc::new(store)),
            seen: Mutex::new(seen),
        })
    }

    /// The store as last read.
    pub fn store(&self) -> Arc<UserStore> {
        Arc::clone(&self.current.read().unwrap_or_else(|e| e.into_inner()))
    }

    /// Reads the file again if it changed since the last read; a file that does not load is
    /// logged and the current users stay.
    pub fn reload_if_changed(&self) {
        self.reload_when(false);
    }

    /// Reads the user file again now, changed or not (cluster mode, after another broker's
    /// change was written into it: two writes may share a modification time).
    pub fn reload(&self) {
        self.reload_when(true);
    }

    fn reload_when(&self, forced: bool) {
        let path = self.store().path().to_owned();
        let now = stamp(&path);
        let mut seen = self.seen.lock().unwrap_or_else(|e| e.into_inner());
        if *seen == now && !forced {
            return;
        }
        *seen = now;
        match UserStore::open(&self.data_dir) {
            Ok(store) => {
                *self.current.write().unwrap_or_else(|e| e.into_inner()) = Arc::new(store);
                tracing::info!(file = %path.display(), "the user file changed; reloaded the SASL users");
            }
            Err(e) => {
                tracing::error!(error = %e, "the user file changed but does not load; keeping the current users")
            }
        }
    }

    /// Checks the file every few seconds until `shutdown`.
    pub async fn watch(self: Arc<Self>, mut shutdown: watch::Receiver<bool>) {
        loop {
            tokio::select! {
                _ = tokio::time::sleep(USERS_RELOAD_CHECK_INTERVAL) => self.reload_if_changed(),
                _ = shutdown.changed() => return,
            }
        }
    }
}

fn stamp(path: &Path) -> Option<(SystemTime, u64)> {
    let meta = std::fs::metadata(path).ok()?;
    Some((meta.modified().ok()?, meta.len()))
}

/// What every SASL connection shares: the enabled mechanisms, the users, the secret that
/// gives unknown users a stable fake salt, the failure backoff and log limiter.
#[derive(Debug)]
pub struct Sasl {
    mechanisms: Vec<Mechanism>,
    users: Arc<Users>,
    fake: FakeCredentials,
    backoff: Mutex<FailureBackoff>,
    failure_log: LogLimiter,
}

impl Sasl {
    pub fn new(mechanisms: Vec<Mechanism>, users: Arc<Users>) -> Sasl {
        Sasl {
            mechanisms,
            users,
            fake: FakeCredentials::generate(&mut rand::rng()),
            backoff: Mutex::new(FailureBackoff::default()),
            failure_log: LogLimiter::new(FAILURE_LOG_INTERVAL),
        }
    }

    pub fn mechanisms(&self) -> &[Mechanism] {
        &self.mechanisms
    }

    pub fn users(&self) -> &Arc<Users> {
        &self.users
    }
}

/// Where one connection's authentication stands.
#[derive(Debug)]
pub enum SaslState {
    AwaitingHandshake,
    AwaitingToken(Exchange),
    Authenticated,
    Failed,
}

/// The mechanism chosen by the handshake, with its state.
#[derive(Debug)]
pub enum Exchange {
    /// `user`: the name client-first gave, for the log.
    Scram {
        server: Box<ScramServer>,
        user: Option<String>,
    },
    Plain,
}

/// One connection's authentication.
#[derive(Debug)]
pub struct SaslSession {
    pub shared: Arc<Sasl>,
    pub state: SaslState,
    /// The handshake was v0: the tokens come as bare size-prefixed frames, not as
    /// SaslAuthenticate requests.
    pub raw_tokens: bool,
}

/// What a SASL request did to the connection.
#[derive(Debug)]
pub struct Step {
    pub response: ResponseKind,
    /// Answer only after this long (the failure backoff).
    pub delay: Duration,
    /// `Some(principal)` once authenticated.
    pub authenticated: Option<String>,
    /// Close the connection once the response is written.
    pub close: bool,
}

/// Kafka's text for bad credentials; the same for an unknown user and a wrong password.
fn invalid_credentials(mechanism: &str) -> String {
    format!(
        "Authentication failed during authentication due to invalid credentials with SASL mechanism {mechanism}"
    )
}

impl SaslSession {
    pub fn new(shared: Arc<Sasl>) -> SaslSession {
        SaslSession {
            shared,
            state: SaslState::AwaitingHandshake,
            raw_tokens: false,
        }
    }

    /// Whether the next frame is a bare SASL token (after a v0 handshake).
    pub fn expects_raw_token(&self) -> bool {
        self.raw_tokens && matches!(self.state, SaslState::AwaitingToken(_))
    }

    pub fn authenticated(&self) -> bool {
        matches!(self.state, SaslState::Authenticated)
    }

    fn enabled_names(&self) -> Vec<StrBytes> {
        self.shared
            .mechanisms
            .iter()
            .map(|m| StrBytes::from_static_str(m.name()))
            .collect()
    }

    /// Answers a SaslHandshake of `version`.
    pub fn handshake(&mut self, request: &SaslHandshakeRequest, version: i16) -> Step {
        let mechanisms = self.enabled_names();
        let chosen = Mechanism::from_name(request.mechanism.as_str())
            .filter(|m| self.shared.mechanisms.contains(m));
        let (error_code, close) = match (&self.state, chosen) {
            (SaslState::AwaitingHandshake, Some(m)) => {
                self.state = SaslState::AwaitingToken(match m {
                    Mechanism::Scram(s) => Exchange::Scram {
                        // As Kafka: librdkafka repeats its client nonce in client-final.
                        server: Box::new(
                            ScramServer::new(s, self.shared.fake.clone()).accept_nonce_suffix(),
                        ),
                        user: None,
                    },
                    Mechanism::Plain => Exchange::Plain,
                });
                self.raw_tokens = version == 0;
                (0, false)
            }
            (SaslState::AwaitingHandshake, None) => {
                self.state = SaslState::Failed;
                (UNSUPPORTED_SASL_MECHANISM, true)
            }
            _ => {
                self.state = SaslState::Failed;
                (ILLEGAL_SASL_STATE, true)
            }
        };
        Step {
            response: ResponseKind::SaslHandshake(
                SaslHandshakeResponse::default()
                    .with_error_code(error_code)
                    .with_mechanisms(mechanisms),
            ),
            delay: Duration::ZERO,
            authenticated: None,
            close,
        }
    }

    /// Answers a SaslAuthenticate. `now` drives the failure backoff.
    pub fn authenticate(
        &mut self,
        request: &SaslAuthenticateRequest,
        peer: IpAddr,
        metrics: &sluice_broker::metrics::Metrics,
        now: Instant,
    ) -> Step {
        let token = &request.auth_bytes[..];
        let state = std::mem::replace(&mut self.state, SaslState::Failed);
        let (mechanism, user, outcome) = match state {
            SaslState::AwaitingToken(Exchange::Plain) => {
                let user = parse_plain(token).ok().map(|p| p.authcid.to_owned());
                let store = self.shared.users.store();
                let outcome = authenticate_plain(token, &*store, &self.shared.fake)
                    .map(|name| (Vec::new(), Some(name)));
                ("PLAIN", user, outcome)
            }
            SaslState::AwaitingToken(Exchange::Scram { mut server, user }) => {
                let mechanism = server.mechanism().name();
                if server.state() == ScramState::AwaitingClientFirst {
                    let user = scram_user(token);
                    let store = self.shared.users.store();
                    let nonce = ServerNonce::generate(&mut rand::rng());
                    match server.client_first(token, &*store, nonce) {
                        Ok(first) => {
                            self.state = SaslState::AwaitingToken(Exchange::Scram { server, user });
                            return Step {
                                response: ResponseKind::SaslAuthenticate(
                                    SaslAuthenticateResponse::default()
                                        .with_auth_bytes(Bytes::from(first)),
                                ),
                                delay: Duration::ZERO,
                                authenticated: None,
                                close: false,
                            };
                        }
                        Err(e) => (mechanism, user, Err(e)),
                    }
                } else {
                    let outcome = server.client_final(token).map(|last| {
                        let name = server.authenticated_user().map(str::to_owned);
                        (last, name)
                    });
                    (mechanism, user, outcome)
                }
            }
            SaslState::AwaitingHandshake | SaslState::Authenticated | SaslState::Failed => {
                return Step {
                    response: ResponseKind::SaslAuthenticate(
                        SaslAuthenticateResponse::default()
                            .with_error_code(ILLEGAL_SASL_STATE)
                            .with_error_message(Some(StrBytes::from_static_str(
                                "SaslAuthenticate before a successful SaslHandshake",
                            ))),
                    ),
                    delay: Duration::ZERO,
                    authenticated: None,
                    close: true,
                };
            }
        };
        match outcome {
            Ok((bytes, Some(name))) => {
                self.state = SaslState::Authenticated;
                metrics.sasl_authentication(true);
                tracing::debug!(peer = %peer, user = %name, mechanism, "SASL authentication succeeded");
                Step {
                    response: ResponseKind::SaslAuthenticate(
                        SaslAuthenticateResponse::default()
                            .with_auth_bytes(Bytes::from(bytes))
                            .with_session_lifetime_ms(0),
                    ),
                    delay: Duration::ZERO,
                    authenticated: Some(format!("User:{name}")),
                    close: false,
                }
            }
            other => {
                // A finished exchange always names its user; treat the impossible as a failure.
                let e = other.err().unwrap_or(AuthError::BadCredentials);
                metrics.sasl_authentication(false);
                let delay = self
                    .shared
                    .backoff
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .on_failure(peer, now);
                if let Some(count) = self.shared.failure_log.hit(now) {
                    tracing::warn!(peer = %peer, user = user.as_deref().unwrap_or("?"), mechanism, reason = %e, delay_ms = delay.as_millis() as u64, since_last_line = count, "SASL authentication failed");
                }
                let (code, message) = match &e {
                    AuthError::BadCredentials => {
                        (SASL_AUTHENTICATION_FAILED, invalid_credentials(mechanism))
                    }
                    other => (
                        other.kafka_error_code(),
                        format!("Authentication failed with SASL mechanism {mechanism}: {other}"),
                    ),
                };
                Step {
                    response: ResponseKind::SaslAuthenticate(
                        SaslAuthenticateResponse::default()
                            .with_error_code(code)
                            .with_error_message(Some(StrBytes::from_string(message))),
                    ),
                    delay,
                    authenticated: None,
                    close: true,
                }
            }
        }
    }
}

/// The user name of a SCRAM client-first message (`gs2-header n=NAME,r=...`), for the log
/// only; the security crate does the real parsing.
fn scram_user(token: &[u8]) -> Option<String> {
    let text = std::str::from_utf8(token).ok()?;
    // gs2-header: cbind-flag "," [authzid] ","
    let mut parts = text.splitn(3, ',');
    let (_flag, _authzid, bare) = (parts.next()?, parts.next()?, parts.next()?);
    let name = bare.split(',').next()?.strip_prefix("n=")?;
    Some(name.replace("=2C", ",").replace("=3D", "="))
}

/// First delay of a failed authentication from an address, doubled on each further failure.
const FAILURE_DELAY_MIN: Duration = Duration::from_millis(100);
/// Longest delay.
const FAILURE_DELAY_MAX: Duration = Duration::from_secs(5);
/// An address with no failure for this long starts again at [`FAILURE_DELAY_MIN`].
const FAILURE_FORGET_AFTER: Duration = Duration::from_secs(60);
/// Addresses tracked at once. Each entry is a few dozen bytes; 10,000 covers a large fleet
/// of misconfigured clients. When full (after dropping forgotten entries), a new address
/// gets [`FAILURE_DELAY_MAX`] without being tracked, so a flood of addresses cannot grow
/// the map or shorten the delays.
pub const FAILURE_BACKOFF_ADDRESSES_MAX: usize = 10_000;

/// Per-address delay of failed authentications.
#[derive(Debug, Default)]
pub struct FailureBackoff {
    entries: HashMap<IpAddr, (Duration, Instant)>,
}

impl FailureBackoff {
    /// Records a failure from `peer` at `now`; returns how long to delay its answer.
    pub fn on_failure(&mut self, peer: IpAddr, now: Instant) -> Duration {
        let fresh =
            |&(_, last): &(Duration, Instant)| now.duration_since(last) < FAILURE_FORGET_AFTER;
        if !self.entries.contains_key(&peer) && self.entries.len() >= FAILURE_BACKOFF_ADDRESSES_MAX
        {
            self.entries.retain(|_, e| fresh(e));
            if self.entries.len() >= FAILURE_BACKOFF_ADDRESSES_MAX {
                return FAILURE_DELAY_MAX;
            }
        }
        let delay = match self.entries.get(&peer).filter(|e| fresh(e)) {
            Some(&(previous, _)) => (previous * 2).min(FAILURE_DELAY_MAX),
            None => FAILURE_DELAY_MIN,
        };
        self.entries.insert(peer, (delay, now));
        delay
    }

    pub fn tracked(&self) -> usize {
        self.entries.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(n: u32) -> IpAddr {
        IpAddr::V4(std::net::Ipv4Addr::from(n))
    }

    #[test]
    fn backoff_doubles_caps_and_forgets() {
        let mut b = FailureBackoff::default();
        let t0 = Instant::now();
        let delays: Vec<u64> = (0..8)
            .map(|i| b.on_failure(ip(1), t0 + Duration::from_secs(i)).as_millis() as u64)
            .collect();
        assert_eq!(delays, [100, 200, 400, 800, 1600, 3200, 5000, 5000]);
        // Another address is not slowed by the first.
        assert_eq!(b.on_failure(ip(2), t0), FAILURE_DELAY_MIN);
        // A minute without failures: forgotten.
        let later = t0 + Duration::from_secs(7) + FAILURE_FORGET_AFTER;
        assert_eq!(b.on_failure(ip(1), later), FAILURE_DELAY_MIN);
    }

    #[test]
    fn backoff_map_is_bounded() {
        let mut b = FailureBackoff::default();
        let t0 = Instant::now();
        for n in 0..FAILURE_BACKOFF_ADDRESSES_MAX as u32 {
            b.on_failure(ip(n), t0);
        }
        assert_eq!(b.tracked(), FAILURE_BACKOFF_ADDRESSES_MAX);
        // Full of fresh entries: a new address gets the longest delay, untracked.
        assert_eq!(b.on_failure(ip(u32::MAX), t0), FAILURE_DELAY_MAX);
        assert_eq!(b.tracked(), FAILURE_BACKOFF_ADDRESSES_MAX);
        // Once they are forgotten, the map is emptied and the address tracked.
        let later = t0 + FAILURE_FORGET_AFTER;
        assert_eq!(b.on_failure(ip(u32::MAX), later), FAILURE_DELAY_MIN);
        assert_eq!(b.tracked(), 1);
    }

    #[test]
    fn mechanisms_parse() {
        assert_eq!(
            parse_mechanisms("SCRAM-SHA-512, PLAIN").unwrap(),
            [Mechanism::Scram(ScramMechanism::Sha512), Mechanism::Plain]
        );
        assert!(
            parse_mechanisms("GSSAPI")
                .unwrap_err()
                .contains("unknown mechanism 'GSSAPI'")
        );
        assert!(parse_mechanisms(" ").is_err());
    }

    fn session(dir: &Path, mechanisms: Vec<Mechanism>) -> SaslSession {
        let users = Arc::new(Users::open(dir).unwrap());
        let credential = sluice_security::ScramCredential::from_password(
            ScramMechanism::Sha256,
            "pw",
            4096,
            &mut rand::rng(),
        )
        .unwrap();
        users.store().upsert("alice", credential).unwrap();
        SaslSession::new(Arc::new(Sasl::new(mechanisms, users)))
    }

    fn handshake(mechanism: &'static str) -> SaslHandshakeRequest {
        SaslHandshakeRequest::default().with_mechanism(StrBytes::from_static_str(mechanism))
    }

    fn token(bytes: &'static [u8]) -> SaslAuthenticateRequest {
        SaslAuthenticateRequest::default().with_auth_bytes(Bytes::from_static(bytes))
    }

    #[test]
    fn plain_logs_in_and_bad_credentials_fail_alike() {
        let dir = tempfile::tempdir().unwrap();
        let metrics = sluice_broker::metrics::Metrics::default();
        let peer = ip(7);
        let now = Instant::now();
        let mut s = session(dir.path(), vec![Mechanism::Plain]);
        let step = s.handshake(&handshake("PLAIN"), 1);
        assert!(!step.close);
        let step = s.authenticate(&token(b"\0alice\0pw"), peer, &metrics, now);
        assert_eq!(step.authenticated.as_deref(), Some("User:alice"));
        assert!(s.authenticated() && !step.close && step.delay.is_zero());
        // Wrong password and unknown user: the same answer, delayed, then closed.
        let mut answers = Vec::new();
        for bad in [&b"\0alice\0nope"[..], &b"\0mallory\0pw"[..]] {
            let mut s = session(dir.path(), vec![Mechanism::Plain]);
            s.handshake(&handshake("PLAIN"), 1);
            let step = s.authenticate(
                &SaslAuthenticateRequest::default().with_auth_bytes(Bytes::copy_from_slice(bad)),
                peer,
                &metrics,
                now,
            );
            assert!(step.close && step.authenticated.is_none());
            let ResponseKind::SaslAuthenticate(r) = step.response else {
                panic!("not a SaslAuthenticate response")
            };
            assert_eq!(r.error_code, SASL_AUTHENTICATION_FAILED);
            answers.push((r.error_message.unwrap().to_string(), step.delay));
        }
        assert_eq!(
            answers[0].0,
            "Authentication failed during authentication due to invalid credentials with SASL mechanism PLAIN"
        );
        assert_eq!(answers[0].0, answers[1].0);
        assert_eq!(
            (answers[0].1, answers[1].1),
            (FAILURE_DELAY_MIN, FAILURE_DELAY_MIN)
        );
    }

    #[test]
    fn unknown_mechanism_and_out_of_turn_messages_are_refused() {
        let dir = tempfile::tempdir().unwrap();
        let metrics = sluice_broker::metrics::Metrics::default();
        let mut s = session(dir.path(), vec![Mechanism::Scram(ScramMechanism::Sha512)]);
        let step = s.handshake(&handshake("PLAIN"), 1);
        let ResponseKind::SaslHandshake(r) = step.response else {
            panic!("not a SaslHandshake response")
        };
        assert_eq!(r.error_code, UNSUPPORTED_SASL_MECHANISM);
        assert_eq!(r.mechanisms, [StrBytes::from_static_str("SCRAM-SHA-512")]);
        assert!(step.close);
        let mut s = session(dir.path(), vec![Mechanism::Plain]);
        let step = s.authenticate(&token(b"\0alice\0pw"), ip(8), &metrics, Instant::now());
        let ResponseKind::SaslAuthenticate(r) = step.response else {
            panic!("not a SaslAuthenticate response")
        };
        assert_eq!(r.error_code, ILLEGAL_SASL_STATE);
        assert!(step.close);
        // A v0 handshake switches to bare tokens.
        let mut s = session(dir.path(), vec![Mechanism::Plain]);
        s.handshake(&handshake("PLAIN"), 0);
        assert!(s.expects_raw_token());
    }

    #[test]
    fn scram_user_reads_client_first() {
        assert_eq!(
            scram_user(b"n,,n=al=2Cice,r=abc").as_deref(),
            Some("al,ice")
        );
        assert_eq!(scram_user(b"n,a=bob,n=bob,r=abc").as_deref(), Some("bob"));
        assert_eq!(scram_user(b"c=biws,r=abc,p=xyz"), None);
    }
}
