//! One Kafka client connection: read frames, start their handlers in arrival order, write the
//! responses in the same order.
//!
//! Memory: a frame's size is reserved from the broker's [`sluice_broker::memory::MemoryBudget`] as soon as its 4-byte
//! prefix and api key have arrived, before the rest is read, and the reservation follows the
//! request until its response has been written (resized to the response's encoded size once
//! the handler is done; a fetch adds the reservation that covers its records). When the budget
//! has no room, the connection stops reading until it has: the client feels TCP back-pressure,
//! and bytes it keeps sending wait in the kernel's socket buffer, not in ours. Produce and
//! Fetch frames are [`Class::Bulk`]; every other API is [`Class::Control`] and may use the
//! headroom that bulk data leaves, so a new client can still say ApiVersions and Metadata
//! while producers fill the budget. An idle connection holds no buffer at all: it waits for
//! readability first and allocates a read buffer only when bytes are there.
//!
//! Timers (see [`ServerConfig`]): a frame whose first byte has arrived must be whole within
//! `request_timeout` (counted only while this side is willing to read it); a response write
//! that makes no progress for `request_timeout` (a client that stopped reading) closes the
//! connection; a connection with nothing in flight and no bytes for `connections_max_idle` is
//! closed. Each close is logged (rate-limited) with the reason.
//!
//! The bytes travel over a [`Transport`]: plain TCP, read only once readable (so an idle
//! connection holds no buffer), or TLS, read and written through `tokio-rustls` (a TLS
//! connection holds rustls's record buffers anyway, so its read buffer is allocated up front
//! like theirs).

use std::collections::VecDeque;
use std::io::{self, IoSlice};
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll, ready};
use std::time::Duration;

use bytes::{Buf, Bytes, BytesMut};
use futures::FutureExt;
use futures::future::BoxFuture;
use futures::stream::{FuturesOrdered, StreamExt};
use sluice_broker::memory::{Ask, Class, Reservation};
use sluice_broker::shared_files::Changed;
use sluice_broker::{Broker, Caller, Response};
use sluice_protocol::codec::{self, DecodeError};
use sluice_protocol::frame;
use sluice_protocol::kafka_protocol::messages::{
    ApiKey, RequestKind, ResponseKind, SaslAuthenticateRequest,
};
use tokio::io::{AsyncWrite, ReadHalf, WriteHalf};
use tokio::net::TcpStream;
use tokio::sync::watch;
use tokio::time::Instant;
use tokio_rustls::server::TlsStream;

use crate::limits::ConnectionSlot;
use crate::sasl::{SaslSession, Step, Users};
use crate::scram_admin;
use crate::{ServerConfig, Shared};
use sluice_security::acl::CLUSTER_NAME;
use sluice_security::quotas::Resolved;
use sluice_security::{AclOperation, QuotaKind, ResourceType};

/// Bytes a connection reads at a time when no larger frame is under way. Small requests
/// arrive many to a read; a larger frame gets a buffer of its own size once its size is known.
const READ_CHUNK_BYTES: usize = 16 << 10;

/// Most responses handed to one vectored write.
const WRITE_SLICES_MAX: usize = 64;

/// Bytes of a request's fixed prefix the listener looks at before the frame is whole: size
/// (4) and api key (2), which decides the memory class.
const CLASSIFY_BYTES: usize = frame::SIZE_PREFIX_BYTES + 2;

/// A request whose response is done: the encoded bytes (`None` when the request gets no
/// response, as for acks=0 produce; `Err` when the response could not be encoded, a broker bug
/// that closes the connection since a skipped response would desynchronise the client), and
/// the memory reservation that covers them until they are written.
struct Finished {
    response: Result<Option<Bytes>, ()>,
    memory: Reservation,
    /// How long a client quota throttles the client after this response: the connection
    /// reads nothing more until then (KIP-219).
    throttle: Duration,
}

/// Why a connection ended, for the log.
#[derive(Debug)]
enum Close {
    /// The client closed its side and every response has been written.
    Done,
    Shutdown,
    Io(&'static str, io::Error),
    Frame(frame::FrameError),
    Malformed(DecodeError),
    NotEncodable,
    RequestTimeout(Duration),
    WriteStalled(Duration),
    Idle(Duration),
    /// The first bytes on a PLAINTEXT listener were a TLS handshake.
    TlsOnPlaintext,
    /// A request other than ApiVersions, SaslHandshake or SaslAuthenticate before SASL
    /// authentication.
    Unauthenticated(ApiKey),
    /// SASL authentication failed; its answer has been written.
    AuthenticationFailed,
}

/// The byte stream under a connection.
pub(crate) enum Transport {
    Plain(TcpStream),
    Tls(Box<TlsStream<TcpStream>>),
}

/// The read side of a [`Transport`].
enum Reader<'a> {
    Plain(&'a TcpStream),
    Tls(ReadHalf<TlsStream<TcpStream>>),
}

/// The write side of a [`Transport`]. TLS: `unflushed` while rustls holds encrypted bytes
/// of written responses that the socket has not taken yet.
enum Writer<'a> {
    Plain(&'a TcpStream),
    Tls {
        half: WriteHalf<TlsStream<TcpStream>>,
        unflushed: bool,
    },
}

/// Makes room in `buf` for `wanted` more bytes (at least a chunk's worth).
fn make_room(buf: &mut BytesMut, wanted: usize) {
    if buf.capacity() - buf.len() < wanted.min(READ_CHUNK_BYTES) {
        buf.reserve(wanted);
    }
}

impl Reader<'_> {
    /// Reads what has arrived into `buf` (0: the client closed its side). Plain TCP waits for
    /// readability before making room for `wanted` bytes.
    fn poll_read_into(
        &mut self,
        cx: &mut Context<'_>,
        buf: &mut BytesMut,
        wanted: usize,
    ) -> Poll<io::Result<usize>> {
        match self {
            Reader::Plain(tcp) => loop {
                ready!(tcp.poll_read_ready(cx))?;
                make_room(buf, wanted);
                match tcp.try_read_buf(buf) {
                    // Readiness was stale; polling again registers for the next.
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => continue,
                    done => return Poll::Ready(done),
                }
            },
            Reader::Tls(half) => {
                make_room(buf, wanted);
                match ready!(tokio_util::io::poll_read_buf(Pin::new(half), cx, buf)) {
                    // A client that closes without TLS's close_notify has still closed.
                    Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => Poll::Ready(Ok(0)),
                    done => Poll::Ready(done),
                }
            }
        }
    }
}

impl Writer<'_> {
    /// Whether written bytes still wait in the TLS layer.
    fn pending(&self) -> bool {
        matches!(
            self,
            Writer::Tls {
                unflushed: true,
                ..
            }
        )
    }

    /// Writes what the socket takes now of the queued responses, in order, giving back the
    /// memory of each one written whole. `Ready(Ok(true))` once any byte went out.
    fn poll_write_out(
        &mut self,
        cx: &mut Context<'_>,
        outq: &mut VecDeque<(Bytes, Reservation)>,
    ) -> Poll<io::Result<bool>> {
        match self {
            Writer::Plain(tcp) => loop {
                if outq.is_empty() {
                    return Poll::Ready(Ok(false));
                }
                ready!(tcp.poll_write_ready(cx))?;
                match write_some(tcp, outq) {
                    Ok(true) => return Poll::Ready(Ok(true)),
                    // Readiness was stale; polling again registers for the next.
                    Ok(false) => continue,
                    Err(e) => return Poll::Ready(Err(e)),
                }
            },
            Writer::Tls { half, unflushed } => {
                let mut progress = false;
                while !outq.is_empty() {
                    let mut slices = [IoSlice::new(&[]); WRITE_SLICES_MAX];
                    let count = outq.len().min(WRITE_SLICES_MAX);
                    for (slice, (bytes, _)) in slices.iter_mut().zip(outq.iter()) {
                        *slice = IoSlice::new(bytes);
                    }
                    match Pin::new(&mut *half).poll_write_vectored(cx, &slices[..count]) {
                        Poll::Ready(Ok(0)) => {
                            return Poll::Ready(Err(io::ErrorKind::WriteZero.into()));
                        }
                        Poll::Ready(Ok(written)) => {
                            consume(outq, written);
                            progress = true;
                            *unflushed = true;
                        }
                        Poll::Ready(Err(e)) => return Poll::Ready(Err(e)),
                        Poll::Pending => break,
                    }
                }
                // rustls keeps what the socket did not take; push it out.
                if *unflushed {
                    match Pin::new(&mut *half).poll_flush(cx) {
                        Poll::Ready(Ok(())) => {
                            *unflushed = false;
                            progress = true;
                        }
                        Poll::Ready(Err(e)) => return Poll::Ready(Err(e)),
                        Poll::Pending => {}
                    }
                }
                if progress {
                    Poll::Ready(Ok(true))
                } else {
                    Poll::Pending
                }
            }
        }
    }
}

pub(crate) struct Connection {
    pub broker: Arc<Broker>,
    pub config: ServerConfig,
    pub shared: Arc<Shared>,
    pub peer: SocketAddr,
    /// What requests carry to the broker: the peer, the listener, the principal.
    pub caller: Caller,
    pub client_id: Option<String>,
    /// SASL listeners: where authentication stands (`None` on other listeners).
    pub sasl: Option<SaslSession>,
    /// The SASL users when SASL is enabled, for the SCRAM credential APIs.
    pub users: Option<Arc<Users>>,
    /// Set when the connection must close once the responses started so far are written (a
    /// failed SASL authentication): nothing more is read or started.
    pub closing: bool,
    /// This connection's place under the connection limits, freed when it ends.
    pub _slot: ConnectionSlot,
    /// The client quotas that apply to this client, as last resolved (see [`Connection::quotas`]).
    pub quotas: Option<QuotaCache>,
    /// Set while a client quota throttles the client: nothing is read or started until then.
    pub muted_until: Option<Instant>,
}

/// The client quotas resolved for a connection, and what they were resolved for.
pub(crate) struct QuotaCache {
    resolved: Resolved,
    principal: Arc<str>,
    client_id: String,
}

/// A request's handling, timed: the time spent polling it is the broker-thread time that
/// `request_percentage` quotas count.
struct Timed {
    inner: BoxFuture<'static, Option<Response>>,
    spent: Duration,
}

impl Future for Timed {
    type Output = (Option<Response>, Duration);

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let started = std::time::Instant::now();
        let polled = self.inner.as_mut().poll(cx);
        self.spent += started.elapsed();
        polled.map(|out| (out, self.spent))
    }
}

impl Connection {
    pub async fn run(mut self, transport: Transport, shutdown: watch::Receiver<bool>) {
        let close = self.serve(transport, shutdown).await;
        let metrics = self.broker.metrics();
        let limiter = &self.shared.close_log;
        match &close {
            Close::Done | Close::Shutdown => {}
            Close::Io(op, e) => tracing::debug!(peer = %self.peer, error = %e, "{op} failed"),
            Close::Idle(after) => {
                metrics.kafka_connection_closed("idle");
                tracing::debug!(peer = %self.peer, client = ?self.client_id, idle_ms = after.as_millis() as u64, "closing idle connection");
            }
            Close::RequestTimeout(after) => {
                metrics.kafka_connection_closed("request_timeout");
                if let Some(count) = limiter.hit(Instant::now()) {
                    tracing::warn!(peer = %self.peer, client = ?self.client_id, timeout_ms = after.as_millis() as u64, since_last_line = count, "closing connection: a request was not received whole within request_timeout_ms");
                }
            }
            Close::WriteStalled(after) => {
                metrics.kafka_connection_closed("write_stalled");
                if let Some(count) = limiter.hit(Instant::now()) {
                    tracing::warn!(peer = %self.peer, client = ?self.client_id, timeout_ms = after.as_millis() as u64, since_last_line = count, "closing connection: the client read none of its responses within request_timeout_ms");
                }
            }
            Close::Frame(e) => {
                metrics.kafka_connection_closed("bad_frame");
                if let Some(count) = limiter.hit(Instant::now()) {
                    tracing::warn!(peer = %self.peer, client = ?self.client_id, error = %e, since_last_line = count, "closing connection");
                }
            }
            Close::Malformed(e) => {
                metrics.kafka_connection_closed("malformed");
                if let Some(count) = limiter.hit(Instant::now()) {
                    tracing::warn!(peer = %self.peer, client = ?self.client_id, error = %e, since_last_line = count, "closing connection");
                }
            }
            Close::TlsOnPlaintext => {
                metrics.kafka_connection_closed("bad_frame");
                if let Some(count) = limiter.hit(Instant::now()) {
                    tracing::warn!(peer = %self.peer, since_last_line = count, "closing connection: the client started a TLS handshake on a PLAINTEXT listener (connect it to an SSL listener, or set security.protocol=PLAINTEXT)");
                }
            }
            Close::Unauthenticated(api) => {
                metrics.kafka_connection_closed("unauthenticated");
                if let Some(count) = limiter.hit(Instant::now()) {
                    tracing::warn!(peer = %self.peer, client = ?self.client_id, api = ?api, since_last_line = count, "closing connection: a request before SASL authentication (only ApiVersions, SaslHandshake and SaslAuthenticate are accepted until then; set the client's sasl.mechanism and credentials)");
                }
            }
            // Logged when it failed (rate-limited there).
            Close::AuthenticationFailed => {
                metrics.kafka_connection_closed("authentication_failed");
            }
            Close::NotEncodable => {}
        }
    }

    async fn serve(&mut self, transport: Transport, mut shutdown: watch::Receiver<bool>) -> Close {
        // Plain TCP is read and written through shared references (readiness, then a
        // non-blocking call); TLS is split into halves that each own their side.
        let tcp: TcpStream;
        let (mut reader, mut writer) = match transport {
            Transport::Plain(stream) => {
                tcp = stream;
                (Reader::Plain(&tcp), Writer::Plain(&tcp))
            }
            Transport::Tls(stream) => {
                let (read, write) = tokio::io::split(*stream);
                (
                    Reader::Tls(read),
                    Writer::Tls {
                        half: write,
                        unflushed: false,
                    },
                )
            }
        };
        let budget = self.broker.memory().clone();
        let request_timeout = self.config.request_timeout;
        let idle_timeout = self.config.connections_max_idle;
        let mut inbuf = BytesMut::new();
        // Memory for the frame at the head of `inbuf`, reserved once its size is known.
        let mut head: Option<Reservation> = None;
        // When this side started waiting for the rest of the head frame.
        let mut head_since: Option<Instant> = None;
        // No earlier than the head frame's first byte was read (the time of that read, or of
        // the frame becoming the head): how long a request waited here before it started is
        // at least the time since.
        let mut head_arrived: Option<Instant> = None;
        let mut in_flight: FuturesOrdered<BoxFuture<'static, Finished>> = FuturesOrdered::new();
        // Encoded responses not yet written, in order; the front may be partly written.
        let mut outq: VecDeque<(Bytes, Reservation)> = VecDeque::new();
        let mut last_read = Instant::now();
        let mut last_write = Instant::now();
        let mut eof = false;
        let timer = tokio::time::sleep(Duration::ZERO);
        tokio::pin!(timer);
        loop {
            // Start every whole frame while the in-flight limit allows; reserve memory for the
            // head frame as soon as its size and api key are known.
            let mut wants: Option<(usize, Class)> = None;
            let muted = match self.muted_until {
                Some(until) if Instant::now() < until => true,
                Some(_) => {
                    self.muted_until = None;
                    false
                }
                None => false,
            };
            while !self.closing
                && !muted
                && in_flight.len() + outq.len() < self.config.in_flight_per_connection
            {
                let whole = match frame::check(&inbuf, self.config.max_request_bytes) {
                    Ok(whole) => whole,
                    // A TLS record header (handshake, version 3.x) read as a size is huge.
                    Err(_)
                        if matches!(reader, Reader::Plain(_))
                            && inbuf.starts_with(&[0x16, 0x03]) =>
                    {
                        return Close::TlsOnPlaintext;
                    }
                    Err(e) => return Close::Frame(e),
                };
                if head.is_none() {
                    let Some((total, class)) = classify(&inbuf) else {
                        break;
                    };
                    match budget.try_reserve(total, Ask::new(class, Some(self.peer.ip()))) {
                        Some(memory) => head = Some(memory),
                        None => {
                            wants = Some((total, class));
                            break;
                        }
                    }
                }
                let Some(total) = whole else { break };
                let memory = head.take().expect("reserved above");
                let frame = inbuf
                    .split_to(total)
                    .freeze()
                    .slice(frame::SIZE_PREFIX_BYTES..);
                let now = Instant::now();
                let arrived = head_arrived.unwrap_or(now);
                head_arrived = (!inbuf.is_empty()).then_some(now);
                if let Err(close) = self.start(frame, total, memory, arrived, &mut in_flight) {
                    return close;
                }
            }
            if inbuf.is_empty() && head.is_none() {
                // Nothing under way: let go of the read buffer (frames keep their own bytes).
                inbuf = BytesMut::new();
            }
            let unflushed = writer.pending();
            if (eof || self.closing) && in_flight.is_empty() && outq.is_empty() && !unflushed {
                return if self.closing {
                    Close::AuthenticationFailed
                } else {
                    Close::Done
                };
            }
            let room = in_flight.len() + outq.len() < self.config.in_flight_per_connection;
            let can_read = !eof && !self.closing && !muted && room && wants.is_none();
            // The request timer runs only while this side is willing to read.
            head_since = match (can_read && !inbuf.is_empty(), head_since) {
                (true, Some(since)) => Some(since),
                (true, None) => Some(Instant::now()),
                (false, _) => None,
            };
            let writing = !outq.is_empty() || unflushed;
            let idle = in_flight.is_empty() && !writing && inbuf.is_empty();
            let deadline = [
                head_since.map(|since| since + request_timeout),
                writing.then(|| last_write + request_timeout),
                idle.then(|| last_read.max(last_write) + idle_timeout),
                self.muted_until,
            ]
            .into_iter()
            .flatten()
            .min();
            if let Some(deadline) = deadline
                && timer.deadline() != deadline
            {
                timer.as_mut().reset(deadline);
            }
            let (want_bytes, want_class) = wants.unwrap_or((0, Class::Control));
            let want = Ask::new(want_class, Some(self.peer.ip()));
            // A frame under way gets room for all of itself; otherwise one chunk.
            let read_wanted = match (&head, declared_total(&inbuf)) {
                (Some(_), Some(total)) => total.saturating_sub(inbuf.len()),
                _ => 0,
            }
            .max(READ_CHUNK_BYTES.min(self.config.max_request_bytes));
            tokio::select! {
                Some(done) = in_flight.next(), if !in_flight.is_empty() => {
                    // The write-stall timer starts when the queue stops being empty.
                    if !writing {
                        last_write = Instant::now();
                    }
                    self.mute(done.throttle);
                    if let Err(close) = queue(done, &mut outq) {
                        return close;
                    }
                    // Every other response already done goes out in the same write.
                    while let Some(Some(done)) = in_flight.next().now_or_never() {
                        self.mute(done.throttle);
                        if let Err(close) = queue(done, &mut outq) {
                            return close;
                        }
                    }
                }
                written = std::future::poll_fn(|cx| writer.poll_write_out(cx, &mut outq)), if writing => {
                    match written {
                        Ok(true) => last_write = Instant::now(),
                        Ok(false) => {}
                        Err(e) => return Close::Io("write", e),
                    }
                }
                read = std::future::poll_fn(|cx| reader.poll_read_into(cx, &mut inbuf, read_wanted)), if can_read => {
                    match read {
                        Ok(0) => eof = true,
                        Ok(_) => {
                            last_read = Instant::now();
                            head_arrived.get_or_insert(last_read);
                        }
                        Err(e) => return Close::Io("read", e),
                    }
                }
                memory = budget.reserve(want_bytes, want), if wants.is_some() => {
                    head = Some(memory);
                }
                () = &mut timer, if deadline.is_some() => {
                    let now = Instant::now();
                    if let Some(since) = head_since && now >= since + request_timeout {
                        return Close::RequestTimeout(request_timeout);
                    }
                    if writing && now >= last_write + request_timeout {
                        return Close::WriteStalled(request_timeout);
                    }
                    if idle && now >= last_read.max(last_write) + idle_timeout {
                        return Close::Idle(idle_timeout);
                    }
                }
                _ = shutdown.changed() => return Close::Shutdown,
            }
        }
    }

    /// Decodes one frame (`total` bytes with its prefix, held by `memory`) and queues its
    /// handling. `Err` when the connection must close.
    fn start(
        &mut self,
        frame: Bytes,
        total: usize,
        mut memory: Reservation,
        arrived: Instant,
        in_flight: &mut FuturesOrdered<BoxFuture<'static, Finished>>,
    ) -> Result<(), Close> {
        if let Some(sasl) = self.sasl.as_mut()
            && sasl.expects_raw_token()
        {
            // After a v0 handshake: the frame is the token itself, and so is the answer.
            let request = SaslAuthenticateRequest::default().with_auth_bytes(frame);
            let step = sasl.authenticate(
                &request,
                self.peer.ip(),
                self.broker.metrics(),
                Instant::now(),
            );
            let response = match &step.response {
                ResponseKind::SaslAuthenticate(r) if r.error_code == 0 => {
                    let mut out =
                        BytesMut::with_capacity(frame::SIZE_PREFIX_BYTES + r.auth_bytes.len());
                    out.extend_from_slice(&(r.auth_bytes.len() as i32).to_be_bytes());
                    out.extend_from_slice(&r.auth_bytes);
                    Some(out.freeze())
                }
                // v0 has no way to say why: Kafka closes the connection.
                _ => None,
            };
            if let Some(principal) = step.authenticated {
                self.caller.principal = Arc::from(principal);
            }
            if step.close || response.is_none() {
                self.closing = true;
            }
            memory.resize(response.as_ref().map_or(0, Bytes::len));
            let delay = step.delay;
            in_flight.push_back(
                async move {
                    tokio::time::sleep(delay).await;
                    Finished {
                        response: Ok(response),
                        memory,
                        throttle: Duration::ZERO,
                    }
                }
                .boxed(),
            );
            return Ok(());
        }
        match codec::decode_request(frame) {
            Ok(request) => {
                if self.client_id.is_none() {
                    self.client_id = request.client_id.as_deref().map(str::to_owned);
                }
                let peer = self.peer;
                let (api_key, version, correlation_id) =
                    (request.api_key, request.api_version, request.correlation_id);
                let started = std::time::Instant::now();
                let quotas = self.quotas(request.client_id.as_deref().unwrap_or(""));
                let broker = Arc::clone(&self.broker);
                // Started now, in arrival order (produce appends happen here).
                let handling = match self.sasl.as_mut() {
                    Some(sasl) if !sasl.authenticated() => match request.body {
                        RequestKind::ApiVersions(_) => {
                            self.broker.handle_from(request, &self.caller)
                        }
                        RequestKind::SaslHandshake(ref req) => {
                            let step = sasl.handshake(req, version);
                            self.sasl_step(step)
                        }
                        RequestKind::SaslAuthenticate(ref req) => {
                            let step = sasl.authenticate(
                                req,
                                peer.ip(),
                                self.broker.metrics(),
                                Instant::now(),
                            );
                            self.sasl_step(step)
                        }
                        _ => return Err(Close::Unauthenticated(api_key)),
                    },
                    _ => match (&self.users, request.body) {
                        // Admission: a Produce that waited here past its timeout_ms (for
                        // memory, a quota's throttle, or the connection's other requests) has
                        // been given up on by its client, which retries it: appending it now
                        // would be work for nobody (and under overload, work that keeps the
                        // overload going). acks=0 has no timeout to pass.
                        (_, RequestKind::Produce(req))
                            if req.acks != 0
                                && req.timeout_ms > 0
                                && arrived.elapsed()
                                    > Duration::from_millis(req.timeout_ms as u64) =>
                        {
                            let waited = arrived.elapsed();
                            tracing::debug!(peer = %peer, client = ?self.client_id, waited_ms = waited.as_millis() as u64, timeout_ms = req.timeout_ms, "produce expired before it started; not appended");
                            let body = self.broker.produce_expired(req, waited);
                            futures::future::ready(Some(Response { body, memory: None })).boxed()
                        }
                        // Without DESCRIBE (or ALTER) on the cluster, the broker answers
                        // CLUSTER_AUTHORIZATION_FAILED.
                        (Some(users), RequestKind::DescribeUserScramCredentials(ref req))
                            if self.broker.authorized(
                                &self.caller,
                                AclOperation::Describe,
                                ResourceType::Cluster,
                                CLUSTER_NAME,
                            ) =>
                        {
                            let body = ResponseKind::DescribeUserScramCredentials(
                                scram_admin::describe(users, req),
                            );
                            futures::future::ready(Some(Response { body, memory: None })).boxed()
                        }
                        (Some(users), RequestKind::AlterUserScramCredentials(ref req))
                            if self.broker.authorized(
                                &self.caller,
                                AclOperation::Alter,
                                ResourceType::Cluster,
                                CLUSTER_NAME,
                            ) =>
                        {
                            // The user file is rewritten and fsynced: off the async threads.
                            // In object-storage mode the user file then goes to the bucket
                            // with the rest of the metadata before the answer; in cluster mode
                            // to PostgreSQL, for every broker.
                            let names: Vec<_> = req
                                .deletions
                                .iter()
                                .map(|d| d.name.clone())
                                .chain(req.upsertions.iter().map(|u| u.name.clone()))
                                .collect();
                            let (users, req) = (Arc::clone(users), req.clone());
                            let path = users.store().path().to_owned();
                            let change = Arc::new(move || {
                                let response = scram_admin::alter(&users, &req);
                                let changed = response.results.iter().any(|r| r.error_code == 0);
                                (response, changed)
                            });
                            let changing = self.broker.change_security_file(&path, change);
                            async move {
                                let response = match changing.await {
                                    Changed::Durable(response) => response,
                                    Changed::NotDurable(mut response, reason) => {
                                        scram_admin::not_durable(&mut response, &reason);
                                        response
                                    }
                                    Changed::NotMade(reason) => {
                                        scram_admin::not_made(names, &reason)
                                    }
                                };
                                Some(Response {
                                    body: ResponseKind::AlterUserScramCredentials(response),
                                    memory: None,
                                })
                            }
                            .boxed()
                        }
                        (_, body) => self
                            .broker
                            .handle_from(codec::Request { body, ..request }, &self.caller),
                    },
                };
                // The broker-thread time of starting it (produce appends happen here).
                let started_in = started.elapsed();
                in_flight.push_back(
                    async move {
                        let (handled, spent) = Timed { inner: handling, spent: started_in }.await;
                        let mut throttle = Duration::ZERO;
                        let response = match handled {
                            None => {
                                if let Some(quotas) = &quotas {
                                    throttle = charge(&broker, quotas, api_key, total, None, spent);
                                }
                                Ok(None)
                            }
                            Some(Response { mut body, memory: held }) => {
                                if let Some(quotas) = &quotas {
                                    throttle = charge(&broker, quotas, api_key, total, Some(&mut body), spent);
                                }
                                let mut out = BytesMut::new();
                                let encoded = codec::encode_response(&mut out, api_key, version, correlation_id, &body);
                                drop(body);
                                if let Some(held) = held {
                                    memory.merge(held);
                                }
                                match encoded {
                                    Ok(()) => Ok(Some(out.freeze())),
                                    Err(e) => {
                                        tracing::error!(peer = %peer, error = %e, "closing connection: response not encodable");
                                        Err(())
                                    }
                                }
                            }
                        };
                        let bytes_out = response.as_ref().map_or(0, |r| r.as_ref().map_or(0, Bytes::len));
                        // From here on the response is all this request holds.
                        memory.resize(bytes_out);
                        broker.metrics().kafka_request(api_key as i16, started.elapsed(), total, bytes_out);
                        Finished { response, memory, throttle }
                    }
                    .boxed(),
                );
                Ok(())
            }
            Err(DecodeError::UnsupportedVersion {
                api_key: ApiKey::ApiVersions,
                api_version,
                correlation_id,
            }) => {
                tracing::debug!(peer = %self.peer, api_version, "ApiVersions version unsupported; answering with v0");
                let mut out = BytesMut::new();
                let body = Broker::unsupported_api_versions();
                let response =
                    codec::encode_response(&mut out, ApiKey::ApiVersions, 0, correlation_id, &body)
                        .map(|()| Some(out.freeze()))
                        .map_err(|e| tracing::error!(error = %e, "encoding ApiVersions v0"));
                memory.resize(
                    response
                        .as_ref()
                        .map_or(0, |r| r.as_ref().map_or(0, Bytes::len)),
                );
                in_flight.push_back(
                    futures::future::ready(Finished {
                        response,
                        memory,
                        throttle: Duration::ZERO,
                    })
                    .boxed(),
                );
                Ok(())
            }
            Err(e) => Err(Close::Malformed(e)),
        }
    }
}

impl Connection {
    /// The client quotas that apply to this connection's client when it sends `client_id`;
    /// `None` when none do (and at once, without a lookup, while the broker has no quotas).
    fn quotas(&mut self, client_id: &str) -> Option<Resolved> {
        let quotas = self.broker.quotas();
        let generation = quotas.generation();
        if generation == 0 {
            return None;
        }
        let current = self.quotas.as_ref().is_some_and(|c| {
            c.resolved.generation == generation
                && Arc::ptr_eq(&c.principal, &self.caller.principal)
                && c.client_id == client_id
        });
        if !current {
            let principal = Arc::clone(&self.caller.principal);
            let user = principal.strip_prefix("User:").unwrap_or(&principal);
            let resolved = quotas.resolve(user, client_id, std::time::Instant::now());
            self.quotas = Some(QuotaCache {
                resolved,
                principal,
                client_id: client_id.to_owned(),
            });
        }
        self.quotas
            .as_ref()
            .map(|c| &c.resolved)
            .filter(|r| r.any())
            .cloned()
    }

    /// Stops reading for `throttle` (a client quota's), from now.
    fn mute(&mut self, throttle: Duration) {
        if throttle.is_zero() {
            return;
        }
        let until = Instant::now() + throttle;
        self.muted_until = Some(self.muted_until.map_or(until, |t| t.max(until)));
    }

    /// Applies a SASL step to the connection (principal, closing) and gives the future of
    /// its response, delayed by the failure backoff.
    fn sasl_step(&mut self, step: Step) -> BoxFuture<'static, Option<Response>> {
        if let Some(principal) = step.authenticated {
            // The SASL identity replaces a client certificate's, as in Kafka.
            self.caller.principal = Arc::from(principal);
        }
        if step.close {
            self.closing = true;
        }
        let response = Response {
            body: step.response,
            memory: None,
        };
        let delay = step.delay;
        if delay.is_zero() {
            futures::future::ready(Some(response)).boxed()
        } else {
            async move {
                tokio::time::sleep(delay).await;
                Some(response)
            }
            .boxed()
        }
    }
}

/// Counts a handled request against the client's quotas: its frame (`total` bytes) against
/// `producer_byte_rate` for Produce, the record bytes of its response against
/// `consumer_byte_rate` for Fetch and ShareFetch, the broker-thread time it took against
/// `request_percentage`. Returns the longest throttle any of them gives, and sets it as the
/// response's `throttle_time_ms`.
fn charge(
    broker: &Broker,
    quotas: &Resolved,
    api_key: ApiKey,
    total: usize,
    body: Option<&mut ResponseKind>,
    spent: Duration,
) -> Duration {
    let now = std::time::Instant::now();
    let mut throttle = Duration::ZERO;
    let mut count = |kind: QuotaKind, amount: f64| {
        if let Some(applied) = quotas.get(kind) {
            let t = applied.record(now, amount);
            if !t.is_zero() {
                broker.quotas().throttled(kind, t);
                throttle = throttle.max(t);
            }
        }
    };
    match api_key {
        ApiKey::Produce => count(QuotaKind::ProducerByteRate, total as f64),
        ApiKey::Fetch | ApiKey::ShareFetch => {
            let bytes = body
                .as_deref()
                .map_or(0, sluice_broker::throttle::record_bytes);
            count(QuotaKind::ConsumerByteRate, bytes as f64);
        }
        _ => {}
    }
    // Kafka exempts what a client needs to connect and authenticate.
    if !matches!(
        api_key,
        ApiKey::ApiVersions | ApiKey::SaslHandshake | ApiKey::SaslAuthenticate
    ) {
        count(QuotaKind::RequestPercentage, spent.as_secs_f64() * 100.0);
    }
    if !throttle.is_zero()
        && let Some(body) = body
    {
        let ms = i32::try_from(throttle.as_millis()).unwrap_or(i32::MAX);
        sluice_broker::throttle::set_throttle_time(body, ms);
    }
    throttle
}

/// Puts a finished request's response (if it has one) on the write queue.
fn queue(done: Finished, outq: &mut VecDeque<(Bytes, Reservation)>) -> Result<(), Close> {
    match done.response {
        Ok(Some(bytes)) if !bytes.is_empty() => outq.push_back((bytes, done.memory)),
        Ok(_) => {}
        Err(()) => return Err(Close::NotEncodable),
    }
    Ok(())
}

/// Writes what the socket takes now of the queued responses, in order, and gives back the
/// memory of each one written whole. `Ok(true)` when any byte was written.
fn write_some(stream: &TcpStream, outq: &mut VecDeque<(Bytes, Reservation)>) -> io::Result<bool> {
    let mut progress = false;
    while !outq.is_empty() {
        let mut slices = [IoSlice::new(&[]); WRITE_SLICES_MAX];
        let count = outq.len().min(WRITE_SLICES_MAX);
        for (slice, (bytes, _)) in slices.iter_mut().zip(outq.iter()) {
            *slice = IoSlice::new(bytes);
        }
        let written = match stream.try_write_vectored(&slices[..count]) {
            Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
            Ok(n) => n,
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(progress),
            Err(e) => return Err(e),
        };
        progress = true;
        consume(outq, written);
    }
    Ok(progress)
}

/// Drops `written` bytes from the front of the queue, and the responses written whole.
fn consume(outq: &mut VecDeque<(Bytes, Reservation)>, mut written: usize) {
    while written > 0 {
        let front = &mut outq.front_mut().expect("written bytes were queued").0;
        if written >= front.len() {
            written -= front.len();
            outq.pop_front();
        } else {
            front.advance(written);
            written = 0;
        }
    }
}

/// The declared size of the frame at the start of `buf`, prefix included, once its prefix
/// has arrived.
fn declared_total(buf: &[u8]) -> Option<usize> {
    let prefix: [u8; 4] = buf.get(..frame::SIZE_PREFIX_BYTES)?.try_into().ok()?;
    Some(frame::SIZE_PREFIX_BYTES + i32::from_be_bytes(prefix).max(0) as usize)
}

/// The size (prefix included) and memory class of the frame at the start of `buf`, once its
/// size and api key have arrived. Call after [`frame::check`] accepted the size.
fn classify(buf: &[u8]) -> Option<(usize, Class)> {
    let total = declared_total(buf)?;
    let key = buf.get(frame::SIZE_PREFIX_BYTES..CLASSIFY_BYTES)?;
    let class = match i16::from_be_bytes([key[0], key[1]]) {
        k if k == ApiKey::Produce as i16 || k == ApiKey::Fetch as i16 => Class::Bulk,
        _ => Class::Control,
    };
    Some((total, class))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn classify_needs_size_and_api_key() {
        let mut buf = 100i32.to_be_bytes().to_vec();
        assert_eq!(declared_total(&buf), Some(104));
        assert!(classify(&buf).is_none());
        buf.extend_from_slice(&0i16.to_be_bytes());
        assert_eq!(classify(&buf), Some((104, Class::Bulk)));
        buf[4..6].copy_from_slice(&(ApiKey::Metadata as i16).to_be_bytes());
        assert_eq!(classify(&buf), Some((104, Class::Control)));
        buf[4..6].copy_from_slice(&(ApiKey::Fetch as i16).to_be_bytes());
        assert_eq!(classify(&buf), Some((104, Class::Bulk)));
    }
}
