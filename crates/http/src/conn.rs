//! Connections of the HTTP API: the accept loop, the connection cap, and each connection's
//! deadlines, so that no client can hold sockets or request slots by being slow.
//!
//! Where it sits: [`serve`] accepts TCP connections and serves each with hyper's HTTP/1
//! connection driver in a task of its own; requests go to the axum router (`crate::router`),
//! whose middleware (`crate::limits`) applies the per-request limits, the body-read timeout
//! among them.
//!
//! - **Connection cap** ([`HttpConfig::max_connections`]): a connection over the cap is closed
//!   as soon as it is accepted. Refusing rather than pausing `accept` keeps the kernel's backlog
//!   drained, so a client over the cap learns at once instead of hanging in a queue, and it is
//!   what the Kafka listener does too. Refusals are logged at most once per
//!   [`REFUSAL_LOG_INTERVAL`] with the count since the last line, never a line each.
//! - **Accept errors**: per-connection errors (the peer went away) are skipped; the others
//!   (EMFILE, ENFILE, ENOBUFS, ENOMEM) back off from [`ACCEPT_BACKOFF_MIN`] doubling up to
//!   [`ACCEPT_BACKOFF_MAX`] instead of spinning on a listener that cannot accept.
//! - **Deadlines**, watched by the connection's own task ([`Activity`]), one of which applies
//!   at a time:
//!   - *head*: from accepting the connection, or from the first byte of a next request on a
//!     kept-alive one, the whole request head must arrive within
//!     [`HttpConfig::header_read_timeout_ms`] (a slowloris that sends one byte at a time is
//!     closed then, however steadily it sends);
//!   - *idle*: a kept-alive connection with no request in flight and no byte of a next one is
//!     closed after [`HttpConfig::idle_timeout_ms`];
//!   - *busy*: while a request is being served (from its whole head to the end of its
//!     response) the connection has no deadline of its own: its body has the body-read
//!     timeout (`crate::limits`) and a long poll ends by itself;
//!   - *write stalled*, at any time: a write to the client that makes no progress for
//!     [`HttpConfig::body_read_timeout_ms`] closes the connection, so a client that asks for a
//!     large answer and never reads it holds neither the socket nor the answer's memory for
//!     longer. (The request slot is free already: it is released once hyper has taken the
//!     whole answer, before the client has read it.)
//!
//!   Why not hyper's own `header_read_timeout`: hyper starts that timer as soon as it is ready
//!   for a next request, so on a kept-alive connection it is an idle timeout of the same length;
//!   the two deadlines could not differ.
//! - **TLS** ([`serve_tls`]): the handshake is done in the connection's task before HTTP
//!   starts, within [`HttpConfig::header_read_timeout_ms`]; a failed or slow handshake closes
//!   the connection (counted as `tls_handshake` in the closed-connection metric). Each
//!   connection takes the server config current when it is accepted, so a reloaded
//!   certificate applies to new connections without dropping the others.
//! - **Shutdown**: accepting stops, every connection finishes its request in flight (long polls
//!   end early, see `consume`) and closes; [`serve`] returns once all have closed.

use std::convert::Infallible;
use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use axum::Router;
use axum::extract::ConnectInfo;
use axum::http::Request;
use hyper::body::Incoming;
use hyper::server::conn::http1;
use hyper_util::rt::TokioIo;
use sluice_broker::log_limiter::LogLimiter;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{Notify, OwnedSemaphorePermit, Semaphore};
use tokio::time::Instant;
use tower_service::Service;

use crate::limits::{FrameHook, HookedBody};
use crate::{AppState, HttpConfig};

/// At most one log line per this long for refused connections (and one for accept errors),
/// each with the count since the previous line.
pub const REFUSAL_LOG_INTERVAL: Duration = Duration::from_secs(5);

/// First wait after an accept error such as EMFILE; doubled on each error in a row.
pub const ACCEPT_BACKOFF_MIN: Duration = Duration::from_millis(5);

/// Longest wait after accept errors in a row: long enough not to spin, short enough that
/// accepting resumes within a second of descriptors freeing up.
pub const ACCEPT_BACKOFF_MAX: Duration = Duration::from_secs(1);

/// Why the server closed a connection on its own (the `reason` label of the metric).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CloseReason {
    /// The request head did not arrive within `header_read_timeout_ms`.
    HeaderTimeout,
    /// No request for `idle_timeout_ms`.
    Idle,
    /// A write to the client made no progress for `body_read_timeout_ms`.
    WriteStalled,
}

impl CloseReason {
    /// The metric label.
    pub fn label(self) -> &'static str {
        match self {
            CloseReason::HeaderTimeout => "header_timeout",
            CloseReason::Idle => "idle",
            CloseReason::WriteStalled => "write_stalled",
        }
    }
}

/// A connection's deadlines, from [`HttpConfig`].
#[derive(Debug, Clone, Copy)]
struct Timeouts {
    header_read: Duration,
    idle: Duration,
    write_stall: Duration,
}

impl Timeouts {
    fn new(config: &HttpConfig) -> Timeouts {
        // A zero timeout is refused by `sluice serve`; clamp here so a library user cannot
        // make every connection expire at once.
        let ms = |v: u64| Duration::from_millis(v.max(1));
        Timeouts {
            header_read: ms(config.header_read_timeout_ms),
            idle: ms(config.idle_timeout_ms),
            write_stall: ms(config.body_read_timeout_ms),
        }
    }
}

/// Serves the HTTP API on `listener` until `state.shutdown` becomes true; requests in flight
/// are finished (long polls end early) and every connection has closed before this returns.
/// Where an HTTPS listener gets its server config: called for each accepted connection, so a
/// certificate reloaded since applies to the next one.
pub type TlsConfigSource = Arc<dyn Fn() -> Arc<rustls::ServerConfig> + Send + Sync>;

/// Serves plain HTTP on `listener` (see the module docs).
pub async fn serve(listener: TcpListener, state: Arc<AppState>) -> io::Result<()> {
    serve_with(listener, state, None).await
}

/// Serves HTTPS on `listener`: [`serve`] with a TLS handshake first on every connection.
pub async fn serve_tls(
    listener: TcpListener,
    state: Arc<AppState>,
    tls: TlsConfigSource,
) -> io::Result<()> {
    serve_with(listener, state, Some(tls)).await
}

async fn serve_with(
    listener: TcpListener,
    state: Arc<AppState>,
    tls: Option<TlsConfigSource>,
) -> io::Result<()> {
    let timeouts = Timeouts::new(&state.config);
    // `acquire_many` below takes a u32; no real setting comes near either ceiling.
    let max_connections = state
        .config
        .max_connections
        .clamp(1, Semaphore::MAX_PERMITS.min(u32::MAX as usize));
    // One permit per open connection, held by its task until it ends.
    let slots = Arc::new(Semaphore::new(max_connections));
    let router = crate::router(Arc::clone(&state));
    let mut stop = state.shutdown.clone();
    let refusals = LogLimiter::new(REFUSAL_LOG_INTERVAL);
    let accept_errors = LogLimiter::new(REFUSAL_LOG_INTERVAL);
    let mut backoff = ACCEPT_BACKOFF_MIN;
    loop {
        let accepted = tokio::select! {
            accepted = listener.accept() => accepted,
            // Also ends when the shutdown sender is gone.
            _ = stop.wait_for(|stopping| *stopping) => break,
        };
        match accepted {
            Ok((tcp, peer)) => {
                backoff = ACCEPT_BACKOFF_MIN;
                match Arc::clone(&slots).try_acquire_owned() {
                    Ok(slot) => {
                        tokio::spawn(serve_connection(
                            tcp,
                            peer,
                            router.clone(),
                            Arc::clone(&state),
                            timeouts,
                            slot,
                            tls.as_ref().map(|source| source()),
                        ));
                    }
                    Err(_) => {
                        // Dropping the stream closes it: the client sees the connection end
                        // before any answer. (An answer written without reading the request
                        // could be lost to the reset that closing with unread data sends.)
                        drop(tcp);
                        state.metrics.connection_closed("refused");
                        if let Some(count) = refusals.hit(Instant::now()) {
                            tracing::warn!(
                                refused = count,
                                max_connections,
                                "HTTP connections refused: {max_connections} are open (http_max_connections); {count} refused since the last such line"
                            );
                        }
                    }
                }
            }
            Err(e) if is_per_connection_error(&e) => {}
            Err(e) => {
                if let Some(count) = accept_errors.hit(Instant::now()) {
                    tracing::error!(
                        error = %e,
                        errors = count,
                        "HTTP listener cannot accept connections (out of file descriptors or memory?); retrying with backoff"
                    );
                }
                tokio::select! {
                    () = tokio::time::sleep(backoff) => {}
                    _ = stop.wait_for(|stopping| *stopping) => break,
                }
                backoff = (backoff * 2).min(ACCEPT_BACKOFF_MAX);
            }
        }
    }
    drop(listener);
    // Every connection holds one permit until it has closed.
    let _ = slots.acquire_many(max_connections as u32).await;
    Ok(())
}

/// Accept errors that concern one connection only (it went away before it was accepted); the
/// listener itself is fine.
fn is_per_connection_error(e: &io::Error) -> bool {
    matches!(
        e.kind(),
        io::ErrorKind::ConnectionAborted
            | io::ErrorKind::ConnectionReset
            | io::ErrorKind::ConnectionRefused
            | io::ErrorKind::Interrupted
    )
}

/// Serves one connection until it ends, the client is too slow (a deadline of [`Activity`]),
/// or shutdown has let its last request finish.
async fn serve_connection(
    tcp: TcpStream,
    peer: SocketAddr,
    router: Router,
    state: Arc<AppState>,
    timeouts: Timeouts,
    _slot: OwnedSemaphorePermit,
    tls: Option<Arc<rustls::ServerConfig>>,
) {
    let _ = tcp.set_nodelay(true);
    let metrics = &state.metrics;
    metrics.connection_open(true);
    let activity = Arc::new(Activity::new(Instant::now()));
    let watched = Watched {
        tcp,
        activity: Arc::clone(&activity),
    };
    match tls {
        None => {
            drive(
                TokioIo::new(watched),
                peer,
                router,
                &state,
                timeouts,
                activity,
            )
            .await
        }
        Some(config) => {
            let acceptor = tokio_rustls::TlsAcceptor::from(config);
            match tokio::time::timeout(timeouts.header_read, acceptor.accept(watched)).await {
                Ok(Ok(stream)) => {
                    drive(
                        TokioIo::new(stream),
                        peer,
                        router,
                        &state,
                        timeouts,
                        activity,
                    )
                    .await;
                }
                Ok(Err(e)) => {
                    tracing::debug!(peer = %peer, error = %e, "HTTPS handshake failed");
                    metrics.connection_closed("tls_handshake");
                }
                Err(_) => {
                    tracing::debug!(peer = %peer, "HTTPS handshake too slow");
                    metrics.connection_closed("tls_handshake");
                }
            }
        }
    }
    metrics.connection_open(false);
}

/// Serves HTTP/1 on one connection's byte stream (plain or TLS) until it ends.
async fn drive<I>(
    io: I,
    peer: SocketAddr,
    router: Router,
    state: &Arc<AppState>,
    timeouts: Timeouts,
    activity: Arc<Activity>,
) where
    I: hyper::rt::Read + hyper::rt::Write + Unpin + Send + 'static,
{
    let metrics = &state.metrics;
    let service = {
        let activity = Arc::clone(&activity);
        hyper::service::service_fn(move |mut request: Request<Incoming>| {
            // The client's address: the memory budget's per-client share goes by it.
            request.extensions_mut().insert(ConnectInfo(peer));
            // From here to the end of the response body, the connection is busy.
            let busy = Busy::start(&activity);
            let mut router = router.clone();
            async move {
                // The router is always ready (axum's `Router::poll_ready` is `Ready`).
                let response = router.call(request).await?;
                Ok::<_, Infallible>(response.map(|body| HookedBody::wrap(body, busy)))
            }
        })
    };
    let mut builder = http1::Builder::new();
    // The head deadline is ours (see the module doc); hyper's would also cut idle connections.
    builder.header_read_timeout(None).keep_alive(true);
    let conn = builder.serve_connection(io, service);
    tokio::pin!(conn);
    let expired = activity.expired(timeouts);
    tokio::pin!(expired);
    let mut stop = state.shutdown.clone();
    let mut stopping = false;
    loop {
        tokio::select! {
            result = conn.as_mut() => {
                if let Err(e) = result {
                    tracing::debug!(error = %e, "HTTP connection ended with an error");
                }
                break;
            }
            reason = &mut expired => {
                tracing::debug!(reason = reason.label(), "closing a slow HTTP connection");
                metrics.connection_closed(reason.label());
                // Dropping the connection closes the socket.
                break;
            }
            _ = stop.wait_for(|stopping| *stopping), if !stopping => {
                stopping = true;
                conn.as_mut().graceful_shutdown();
            }
        }
    }
}

/// What a connection is waiting for when no request is being served.
#[derive(Debug, Clone, Copy)]
enum Waiting {
    /// A request head, whose first byte (or the connection) arrived at `since`.
    Head { since: Instant },
    /// The first byte of a next request, since the last response ended at `since`.
    Idle { since: Instant },
}

#[derive(Debug)]
struct ActivityState {
    /// Requests being served (at most one on HTTP/1; counted so that the order in which hyper
    /// drops a finished response and starts the next one does not matter).
    busy: usize,
    /// Meaningful while `busy` is 0.
    waiting: Waiting,
    /// Since when a write to the client has been blocked, if it is.
    write_blocked_since: Option<Instant>,
}

/// One connection's activity, as seen by its socket (bytes read, writes blocked) and its
/// service (requests started and finished), and the deadline that follows from it.
#[derive(Debug)]
struct Activity {
    state: Mutex<ActivityState>,
    /// Woken when the deadline may have moved earlier or appeared.
    changed: Notify,
}

impl Activity {
    fn new(now: Instant) -> Activity {
        Activity {
            state: Mutex::new(ActivityState {
                busy: 0,
                waiting: Waiting::Head { since: now },
                write_blocked_since: None,
            }),
            changed: Notify::new(),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, ActivityState> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Bytes arrived from the client: on an idle connection, a next request has begun.
    fn bytes_read(&self) {
        let mut st = self.lock();
        if st.busy == 0
            && let Waiting::Idle { .. } = st.waiting
        {
            st.waiting = Waiting::Head {
                since: Instant::now(),
            };
            drop(st);
            self.changed.notify_waiters();
        }
    }

    /// A write could not proceed (the client's receive window is full).
    fn write_blocked(&self) {
        let mut st = self.lock();
        if st.write_blocked_since.is_none() {
            st.write_blocked_since = Some(Instant::now());
            drop(st);
            self.changed.notify_waiters();
        }
    }

    /// A write proceeded.
    fn write_progressed(&self) {
        self.lock().write_blocked_since = None;
    }

    /// The earliest deadline now, and what passing it means.
    fn deadline(&self, t: &Timeouts) -> Option<(Instant, CloseReason)> {
        let st = self.lock();
        let waiting = (st.busy == 0).then(|| match st.waiting {
            Waiting::Head { since } => (since + t.header_read, CloseReason::HeaderTimeout),
            Waiting::Idle { since } => (since + t.idle, CloseReason::Idle),
        });
        let write = st
            .write_blocked_since
            .map(|since| (since + t.write_stall, CloseReason::WriteStalled));
        match (waiting, write) {
            (Some(a), Some(b)) => Some(if b.0 < a.0 { b } else { a }),
            (a, b) => a.or(b),
        }
    }

    /// Resolves once a deadline has passed.
    async fn expired(&self, t: Timeouts) -> CloseReason {
        loop {
            // Registered before the state is read, so no change in between is missed.
            let changed = self.changed.notified();
            tokio::pin!(changed);
            changed.as_mut().enable();
            match self.deadline(&t) {
                Some((at, reason)) => {
                    if Instant::now() >= at {
                        return reason;
                    }
                    tokio::select! {
                        () = tokio::time::sleep_until(at) => {}
                        () = changed => {}
                    }
                }
                None => changed.await,
            }
        }
    }
}

/// Marks its connection busy from a request's head to the end of its response (or until the
/// request is dropped: the client went away).
#[derive(Debug)]
struct Busy(Arc<Activity>);

impl Busy {
    fn start(activity: &Arc<Activity>) -> Busy {
        activity.lock().busy += 1;
        Busy(Arc::clone(activity))
    }
}

impl Drop for Busy {
    fn drop(&mut self) {
        let mut st = self.0.lock();
        st.busy -= 1;
        if st.busy == 0 {
            st.waiting = Waiting::Idle {
                since: Instant::now(),
            };
            drop(st);
            self.0.changed.notify_waiters();
        }
    }
}

/// A response body's hook: passes every frame on and keeps its connection [`Busy`] until the
/// body is done (hyper drops it once it has written the last frame).
impl FrameHook for Busy {
    fn on_data(&mut self, _len: usize) -> Result<(), axum::Error> {
        Ok(())
    }
}

/// The socket, reporting reads and blocked writes to the connection's [`Activity`].
#[derive(Debug)]
struct Watched {
    tcp: TcpStream,
    activity: Arc<Activity>,
}

impl AsyncRead for Watched {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let before = buf.filled().len();
        let polled = Pin::new(&mut self.tcp).poll_read(cx, buf);
        if matches!(polled, Poll::Ready(Ok(()))) && buf.filled().len() > before {
            self.activity.bytes_read();
        }
        polled
    }
}

impl Watched {
    /// Reports a write's outcome to the activity.
    fn note_write<T>(&self, polled: Poll<T>) -> Poll<T> {
        match polled {
            Poll::Pending => self.activity.write_blocked(),
            Poll::Ready(_) => self.activity.write_progressed(),
        }
        polled
    }
}

impl AsyncWrite for Watched {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let polled = Pin::new(&mut self.tcp).poll_write(cx, buf);
        self.note_write(polled)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let polled = Pin::new(&mut self.tcp).poll_write_vectored(cx, bufs);
        self.note_write(polled)
    }

    fn is_write_vectored(&self) -> bool {
        self.tcp.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.tcp).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let polled = Pin::new(&mut self.tcp).poll_shutdown(cx);
        self.note_write(polled)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn timeouts() -> Timeouts {
        Timeouts {
            header_read: Duration::from_secs(10),
            idle: Duration::from_secs(60),
            write_stall: Duration::from_secs(30),
        }
    }

    #[tokio::test(start_paused = true)]
    async fn deadlines_follow_the_connection_phase() {
        let t = timeouts();
        let start = Instant::now();
        let a = Arc::new(Activity::new(start));
        // A new connection must send its head in time.
        assert_eq!(
            a.deadline(&t),
            Some((start + t.header_read, CloseReason::HeaderTimeout))
        );
        // Serving a request: no deadline.
        let busy = Busy::start(&a);
        assert_eq!(a.deadline(&t), None);
        // Bytes while busy (a body) change nothing.
        a.bytes_read();
        assert_eq!(a.deadline(&t), None);
        tokio::time::advance(Duration::from_secs(1)).await;
        drop(busy);
        let idle_since = Instant::now();
        assert_eq!(
            a.deadline(&t),
            Some((idle_since + t.idle, CloseReason::Idle))
        );
        // The first byte of a next request starts its head deadline; later bytes do not move it.
        tokio::time::advance(Duration::from_secs(2)).await;
        a.bytes_read();
        let head_since = Instant::now();
        tokio::time::advance(Duration::from_secs(2)).await;
        a.bytes_read();
        assert_eq!(
            a.deadline(&t),
            Some((head_since + t.header_read, CloseReason::HeaderTimeout))
        );
        // A blocked write applies even while busy.
        let _busy = Busy::start(&a);
        a.write_blocked();
        let blocked_since = Instant::now();
        tokio::time::advance(Duration::from_secs(1)).await;
        a.write_blocked();
        assert_eq!(
            a.deadline(&t),
            Some((blocked_since + t.write_stall, CloseReason::WriteStalled))
        );
        a.write_progressed();
        assert_eq!(a.deadline(&t), None);
    }

    #[tokio::test(start_paused = true)]
    async fn expired_fires_at_the_deadline_and_follows_changes() {
        let t = timeouts();
        let a = Arc::new(Activity::new(Instant::now()));
        let busy = Busy::start(&a);
        let watcher = {
            let a = Arc::clone(&a);
            tokio::spawn(async move {
                let reason = a.expired(t).await;
                (reason, Instant::now())
            })
        };
        // Busy for longer than any timeout: nothing fires.
        tokio::time::sleep(Duration::from_secs(120)).await;
        assert!(!watcher.is_finished());
        drop(busy);
        let idle_since = Instant::now();
        let (reason, at) = watcher.await.unwrap();
        assert_eq!(reason, CloseReason::Idle);
        assert_eq!(at, idle_since + t.idle);
    }
}
