//! # sluice-server: the Kafka listener
//!
//! Accepts TCP connections and runs one task per connection ([`connection`]):
//!
//! 1. read bytes; [`sluice_protocol::frame::check`] says when a whole request is there, and refuses oversize
//!    frames from their 4-byte prefix, before reading them;
//! 2. decode it ([`sluice_protocol::codec::decode_request`]) and start the broker's handler for it;
//! 3. keep up to [`ServerConfig::in_flight_per_connection`] requests running at once, and write
//!    their responses strictly in request order (Kafka clients match responses by order), many
//!    responses per write when several are ready.
//!
//! Limits, each named in [`ServerConfig`] (Kafka's names in brackets):
//! - frames over `max_request_bytes` close the connection (`socket.request.max.bytes`);
//! - every frame's bytes, from the moment its size is known, and every response until written,
//!   come out of the broker's memory budget ([`sluice_broker::memory`],
//!   `queued.max.request.bytes`); when it is short, connections stop reading;
//! - a started frame must be whole within `request_timeout`, and a client must take its
//!   responses within it too; connections with nothing in flight close after
//!   `connections_max_idle` (`connections.max.idle.ms`);
//! - at most `max_connections` connections, and `max_connections_per_ip` from one address
//!   (`max.connections`, `max.connections.per.ip`): one more is accepted and closed at once,
//!   with one log line per few seconds that counts the refusals;
//! - failing accepts (out of file descriptors) back off, doubling up to a second.
//!
//! Listeners ([`listeners`]): each has a security protocol in Kafka's names and an index that
//! every request carries to the broker ([`sluice_broker::Caller`]). On an SSL listener a
//! connection first completes a TLS handshake ([`tls`]) within `request_timeout`; one that
//! fails (a PLAINTEXT client, an untrusted client certificate) is closed with one rate-limited
//! line that names the peer and the reason. A TLS client on a PLAINTEXT listener is recognised
//! by its first bytes and closed with a line that says so. The connection's principal
//! (`User:NAME` from the client certificate, else `User:ANONYMOUS`) goes with every request.
//! On a SASL_PLAINTEXT or SASL_SSL listener the connection answers SaslHandshake and
//! SaslAuthenticate itself until the client has authenticated ([`sasl`]); the SASL user then
//! becomes the principal, and any request other than ApiVersions before that closes the
//! connection.
//!
//! Bad input: an unsupported ApiVersions version is answered with UNSUPPORTED_VERSION (encoded
//! as v0, as the protocol prescribes); any other unknown API or version, or a malformed request,
//! is logged with the client's address and id and closes that connection only.

pub mod connection;
pub mod limits;
pub mod listeners;
pub mod principal;
pub mod sasl;
pub mod scram_admin;
pub mod tls;

use std::sync::Arc;
use std::time::Duration;

use sluice_broker::log_limiter::LogLimiter;
use sluice_broker::{Broker, Caller};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;

use crate::connection::{Connection, Transport};
use crate::limits::ConnectionLimits;
use crate::listeners::SecurityProtocol;
use crate::tls::TlsState;

/// Limits of the Kafka listener.
#[derive(Debug, Clone, Copy)]
pub struct ServerConfig {
    /// Largest request frame accepted (Kafka's `socket.request.max.bytes`, default 100 MiB).
    pub max_request_bytes: usize,
    /// Requests a connection may have in flight (decoded, response not yet written). Kafka
    /// clients send at most 5 produce requests at once per connection by default.
    pub in_flight_per_connection: usize,
    /// How long a frame may take to arrive once its first byte has, and how long a client may
    /// leave its responses unread; past it the connection is closed (`request_timeout_ms`;
    /// Kafka clients give up on a request after 30 s by default, so the broker waits as long).
    pub request_timeout: Duration,
    /// A connection with nothing in flight and no traffic for this long is closed (Kafka's
    /// `connections.max.idle.ms`, default 10 minutes).
    pub connections_max_idle: Duration,
    /// Connections open at once (Kafka's `max.connections`). Each holds a file descriptor and a
    /// task; see `sluice serve --help` for how the default fits the memory limit.
    pub max_connections: usize,
    /// Connections open at once from one IP address (Kafka's `max.connections.per.ip`), so one
    /// runaway client host cannot take every connection.
    pub max_connections_per_ip: usize,
}

impl Default for ServerConfig {
    fn default() -> Self {
        ServerConfig {
            max_request_bytes: 100 << 20,
            in_flight_per_connection: 32,
            request_timeout: Duration::from_secs(30),
            connections_max_idle: Duration::from_secs(600),
            max_connections: 4096,
            max_connections_per_ip: 1024,
        }
    }
}

/// Why a [`ServerConfig`] was refused; the message names the `serve` setting to fix.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct ConfigError(pub String);

impl ServerConfig {
    /// Refuses values that would make the listener serve nothing: a zero timeout would close
    /// every connection at once, a zero count would refuse every connection or request.
    pub fn validate(&self) -> Result<(), ConfigError> {
        let refuse = |name: &str| Err(ConfigError(format!("{name} must be at least 1")));
        if self.request_timeout.is_zero() {
            return refuse("request_timeout_ms");
        }
        if self.connections_max_idle.is_zero() {
            return refuse("connections_max_idle_ms");
        }
        if self.max_connections == 0 {
            return refuse("max_connections");
        }
        if self.max_connections_per_ip == 0 {
            return refuse("max_connections_per_ip");
        }
        if self.in_flight_per_connection == 0 {
            return refuse("in_flight_per_connection");
        }
        if self.max_request_bytes == 0 {
            return refuse("max_request_bytes");
        }
        Ok(())
    }
}

/// How often at most the listener logs a repeated event (refusals, failed accepts, closes).
const REPEATED_LOG_INTERVAL: Duration = Duration::from_secs(5);

/// First and longest pause after a failed accept.
const ACCEPT_BACKOFF_MIN: Duration = Duration::from_millis(10);
const ACCEPT_BACKOFF_MAX: Duration = Duration::from_secs(1);
/// The id of the next client connection ([`Caller::connection`]), unique in the process over
/// every listener; 0 is never used.
static NEXT_CONNECTION: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);

/// What every connection of one listener shares.
#[derive(Debug)]
pub(crate) struct Shared {
    /// Limits the warnings connections log when the broker closes them.
    pub close_log: LogLimiter,
    /// Limits the warnings about failed TLS handshakes.
    pub handshake_log: LogLimiter,
}

/// One listener's identity: its index among the listeners (what requests carry to the
/// broker), its protocol, and for SSL its TLS config.
#[derive(Debug, Clone)]
pub struct Endpoint {
    pub index: usize,
    pub protocol: SecurityProtocol,
    /// Required for SSL and SASL_SSL; unused otherwise.
    pub tls: Option<Arc<TlsState>>,
    /// Required for SASL_PLAINTEXT and SASL_SSL; unused otherwise.
    pub sasl: Option<Arc<sasl::Sasl>>,
    /// The SASL users, on every listener when SASL is enabled: DescribeUserScramCredentials
    /// and AlterUserScramCredentials read and change them ([`scram_admin`]).
    pub users: Option<Arc<sasl::Users>>,
}

impl Endpoint {
    /// A PLAINTEXT listener, the first.
    pub fn plaintext() -> Endpoint {
        Endpoint {
            index: 0,
            protocol: SecurityProtocol::Plaintext,
            tls: None,
            sasl: None,
            users: None,
        }
    }
}

/// Serves Kafka clients on `listener` until `shutdown` becomes true. The connection limits
/// are shared by every listener given the same `limits`.
pub async fn serve(
    listener: TcpListener,
    endpoint: Endpoint,
    limits: Arc<ConnectionLimits>,
    broker: Arc<Broker>,
    config: ServerConfig,
    mut shutdown: watch::Receiver<bool>,
) {
    assert_eq!(
        endpoint.protocol.uses_sasl(),
        endpoint.sasl.is_some(),
        "a SASL listener has a SASL config, others none"
    );
    assert_eq!(
        endpoint.protocol.uses_tls(),
        endpoint.tls.is_some(),
        "a TLS listener has a TLS config, others none"
    );
    let shared = Arc::new(Shared {
        close_log: LogLimiter::new(REPEATED_LOG_INTERVAL),
        handshake_log: LogLimiter::new(REPEATED_LOG_INTERVAL),
    });
    let refused_log = LogLimiter::new(REPEATED_LOG_INTERVAL);
    let accept_log = LogLimiter::new(REPEATED_LOG_INTERVAL);
    let mut backoff = ACCEPT_BACKOFF_MIN;
    let mut connections = tokio::task::JoinSet::new();
    loop {
        tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((stream, peer)) => {
                    backoff = ACCEPT_BACKOFF_MIN;
                    let slot = match limits.admit(peer.ip()) {
                        Ok(slot) => slot,
                        Err(refusal) => {
                            // Closing at once frees the descriptor; the client sees the close.
                            drop(stream);
                            broker.metrics().kafka_connection_closed("refused");
                            if let Some(count) = refused_log.hit(tokio::time::Instant::now()) {
                                tracing::warn!(peer = %peer, reason = %refusal, refused_since_last_line = count, "refusing connection");
                            }
                            continue;
                        }
                    };
                    let _ = stream.set_nodelay(true);
                    let shutdown = shutdown.clone();
                    broker.metrics().kafka_connection_open(true);
                    let broker = Arc::clone(&broker);
                    let shared = Arc::clone(&shared);
                    let endpoint = endpoint.clone();
                    let connection = NEXT_CONNECTION.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    connections.spawn(async move {
                        // The handshake runs here, not in the accept loop: a slow client
                        // delays only itself. The slot is held meanwhile.
                        let opened = open(stream, peer, &endpoint, &shared, config.request_timeout).await;
                        if opened.is_none() {
                            broker.metrics().kafka_connection_closed("tls_handshake");
                        }
                        if let Some((transport, principal)) = opened {
                            let conn = Connection {
                                broker: Arc::clone(&broker),
                                config,
                                shared,
                                peer,
                                caller: Caller {
                                    peer: Some(peer.ip()),
                                    listener: endpoint.index,
                                    principal: Arc::from(principal),
                                    connection,
                                },
                                client_id: None,
                                sasl: endpoint.sasl.clone().map(sasl::SaslSession::new),
                                users: endpoint.users.clone(),
                                closing: false,
                                _slot: slot,
                                quotas: None,
                                muted_until: None,
                            };
                            conn.run(transport, shutdown).await;
                            broker.connection_closed(connection);
                        }
                        broker.metrics().kafka_connection_open(false);
                    });
                }
                Err(e) => {
                    // Usually out of file descriptors: back off instead of spinning.
                    if let Some(count) = accept_log.hit(tokio::time::Instant::now()) {
                        tracing::warn!(error = %e, failed_since_last_line = count, backoff_ms = backoff.as_millis() as u64, "accept failed");
                    }
                    tokio::time::sleep(backoff).await;
                    backoff = (backoff * 2).min(ACCEPT_BACKOFF_MAX);
                }
            },
            _ = shutdown.changed() => break,
            Some(_) = connections.join_next(), if !connections.is_empty() => {}
        }
    }
    connections.shutdown().await;
}

/// The connection's transport and principal: at once on a PLAINTEXT listener; after a TLS
/// handshake (bounded by `timeout`) on an SSL one. `None` when the handshake failed or the
/// client certificate names no user (logged, rate-limited; the connection is dropped).
async fn open(
    stream: TcpStream,
    peer: std::net::SocketAddr,
    endpoint: &Endpoint,
    shared: &Shared,
    timeout: Duration,
) -> Option<(Transport, String)> {
    let Some(tls) = &endpoint.tls else {
        return Some((
            Transport::Plain(stream),
            format!("User:{}", principal::ANONYMOUS),
        ));
    };
    let acceptor = tokio_rustls::TlsAcceptor::from(tls.config());
    let failed = |reason: String| {
        if let Some(count) = shared.handshake_log.hit(tokio::time::Instant::now()) {
            tracing::warn!(peer = %peer, listener = %endpoint.protocol, since_last_line = count, "TLS handshake failed: {reason}");
        }
    };
    let stream = match tokio::time::timeout(timeout, acceptor.accept(stream)).await {
        Ok(Ok(stream)) => stream,
        Ok(Err(e)) => {
            failed(handshake_reason(&e));
            return None;
        }
        Err(_) => {
            failed(format!(
                "not done within request_timeout_ms ({} ms)",
                timeout.as_millis()
            ));
            return None;
        }
    };
    match tls.principal(stream.get_ref().1.peer_certificates()) {
        Ok(principal) => Some((Transport::Tls(Box::new(stream)), principal)),
        Err(reason) => {
            failed(reason);
            None
        }
    }
}

/// A handshake error in words, with a hint for the usual mistake.
fn handshake_reason(e: &std::io::Error) -> String {
    let text = e.to_string();
    if text.contains("InvalidContentType") || text.contains("corrupt message") {
        format!("{text} (a PLAINTEXT client on an SSL listener?)")
    } else if text.contains("UnsupportedCertVersion") {
        format!(
            "{text} (the client certificate is X.509 v1; sign it with an extension, e.g. extendedKeyUsage=clientAuth, to make it v3)"
        )
    } else if text.contains("tls handshake eof") {
        format!("{text} (the client closed the connection; did it reject the server certificate?)")
    } else {
        text
    }
}

#[cfg(test)]
mod config_tests {
    use super::*;

    #[test]
    fn validate_refuses_zero_timeouts_and_counts() {
        assert_eq!(ServerConfig::default().validate(), Ok(()));
        let refused = |change: fn(&mut ServerConfig)| {
            let mut c = ServerConfig::default();
            change(&mut c);
            c.validate().unwrap_err().0
        };
        assert_eq!(
            refused(|c| c.request_timeout = Duration::ZERO),
            "request_timeout_ms must be at least 1"
        );
        assert_eq!(
            refused(|c| c.connections_max_idle = Duration::ZERO),
            "connections_max_idle_ms must be at least 1"
        );
        assert_eq!(
            refused(|c| c.max_connections = 0),
            "max_connections must be at least 1"
        );
        assert_eq!(
            refused(|c| c.max_connections_per_ip = 0),
            "max_connections_per_ip must be at least 1"
        );
    }
}
