//! Limits and request metrics: the middleware every HTTP request passes through.
//!
//! In order, for each request:
//! 1. the concurrent-request budget ([`HttpConfig::max_concurrent_requests`]): a request takes a
//!    permit or is answered 429 with `Retry-After: 1` at once (no queue: a queue would only
//!    add latency to an overloaded server). The permit is held until the response body has
//!    been sent (or the client went away), so a long poll counts for its whole wait.
//!    `/healthz` and `/readyz` take no permit: an overloaded server still says it is alive;
//! 2. the body size ([`HttpConfig::max_body_bytes`]): a declared `Content-Length` over it is
//!    answered 413 before any of the body is read. A body without a length (chunked) is cut off
//!    at the same size by axum's [`DefaultBodyLimit`], and handlers turn that into 413
//!    (`error::body_error`). Handlers check the records-per-request limit themselves;
//! 3. the body-read timeout ([`HttpConfig::body_read_timeout_ms`]): the whole body must arrive
//!    within it, counted from the handler's first read of it. When it passes, the handler is
//!    dropped, the request is answered 408 with `Connection: close` (the rest of the body is
//!    never read) and its permit is released at once, so a stalled body cannot hold a request
//!    slot. Why one deadline for the whole body rather than a limit on the pause between
//!    reads: a client that sends a byte just before each pause limit would hold its slot for
//!    as long as it liked; a whole-body deadline bounds the hold, whatever the client does;
//! 4. memory: the request's body and its answer come out of the broker's memory budget
//!    ([`sluice_broker::memory`]), as the Kafka listener's frames do. A declared body is
//!    reserved whole before any of it is read, a chunked one as it arrives; a handler that reads
//!    records grows the same reservation ([`RequestMemory`]) before it reads; once the answer
//!    is built the reservation is resized to the answer's size and held until it has been sent.
//!    When the budget has no room the request is answered 503 with `Retry-After: 1` at once;
//!    one client address may hold at most half the budget;
//! 5. metrics: method, route pattern, status, time to the response head, and body sizes go to
//!    [`crate::metrics::HttpMetrics::request`] once the response body is done.

use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use axum::Router;
use axum::body::{Body, Bytes, HttpBody};
use axum::extract::{ConnectInfo, DefaultBodyLimit, MatchedPath, Request, State};
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use http_body::{Frame, SizeHint};
use sluice_broker::memory::{Ask, Class, Reservation};
use tokio::sync::{Notify, OwnedSemaphorePermit, Semaphore};
use tokio::time::Sleep;

use crate::{ApiError, AppState, HttpConfig};

/// The memory one request holds from the broker's budget: its body as it arrives, what its
/// handler reads for the answer, then the answer until it has been sent. In the request's
/// extensions for handlers that read records ([`RequestMemory::grow_up_to`]).
#[derive(Debug, Clone)]
pub struct RequestMemory(Arc<Mutex<Reservation>>);

impl RequestMemory {
    fn lock(&self) -> std::sync::MutexGuard<'_, Reservation> {
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Reserves as much of `want` more bytes as the budget has now, if at least `min`;
    /// returns the bytes reserved (0 when fewer than `min` are free).
    pub fn grow_up_to(&self, min: usize, want: usize) -> usize {
        self.lock().grow_up_to(min, want)
    }
}

/// The 503 a request gets when the memory budget has no room for it.
fn memory_short(what: &str) -> ApiError {
    ApiError::unavailable(format!(
        "the broker holds as much data for clients as its memory_limit allows; {what} does not fit now: retry in a moment, or send less per request"
    ))
}

/// Routes that take no permit from the concurrent-request budget.
const EXEMPT_ROUTES: [&str; 2] = ["/healthz", "/readyz"];

/// The `route` label of requests no route matched.
const UNMATCHED_ROUTE: &str = "unmatched";

/// Shared limit state (the concurrent-request budget).
#[derive(Debug)]
pub struct Limits {
    /// One permit per request allowed in flight.
    in_flight: Arc<Semaphore>,
    max_concurrent_requests: usize,
    max_body_bytes: usize,
    body_read_timeout: Duration,
}

impl Limits {
    pub fn new(config: &HttpConfig) -> Limits {
        // The semaphore's own ceiling is far above any sane setting; clamp rather than panic.
        let permits = config.max_concurrent_requests.min(Semaphore::MAX_PERMITS);
        Limits {
            in_flight: Arc::new(Semaphore::new(permits)),
            max_concurrent_requests: permits,
            max_body_bytes: config.max_body_bytes,
            // 0 is refused by `sluice serve`; clamp so that no body times out at its first read.
            body_read_timeout: Duration::from_millis(config.body_read_timeout_ms.max(1)),
        }
    }

    /// Requests in flight now (holding a permit).
    pub fn in_flight(&self) -> usize {
        self.max_concurrent_requests - self.in_flight.available_permits()
    }
}

/// Puts the limits and metrics middleware around `routes`.
pub fn wrap(routes: Router<Arc<AppState>>, state: Arc<AppState>) -> Router<Arc<AppState>> {
    let max_body_bytes = state.limits.max_body_bytes;
    routes
        .layer(axum::middleware::from_fn_with_state(
            state,
            limit_and_measure,
        ))
        .layer(DefaultBodyLimit::max(max_body_bytes))
}

async fn limit_and_measure(
    State(state): State<Arc<AppState>>,
    request: Request,
    next: Next,
) -> Response {
    let started = Instant::now();
    // Standard methods clone without allocating; the route is an `Arc<str>`.
    let method = request.method().clone();
    let route = request.extensions().get::<MatchedPath>().cloned();
    let exempt = route
        .as_ref()
        .is_some_and(|r| EXEMPT_ROUTES.contains(&r.as_str()));
    let declared_in = content_length(request.headers());
    let client = request
        .extensions()
        .get::<ConnectInfo<SocketAddr>>()
        .map(|c| c.0.ip());
    let memory = RequestMemory(Arc::new(Mutex::new(
        state.broker.memory().empty(Ask::new(Class::Bulk, client)),
    )));
    let mut meter = Meter {
        state: Arc::clone(&state),
        method,
        route,
        status: 0,
        head_elapsed: Duration::ZERO,
        bytes_in: BytesIn::Declared(declared_in.unwrap_or(0)),
        bytes_out: 0,
        _permit: None,
        memory: memory.clone(),
    };

    if !exempt {
        match Arc::clone(&state.limits.in_flight).try_acquire_owned() {
            Ok(permit) => meter._permit = Some(permit),
            Err(_) => {
                let error = ApiError::too_many(
                    format!(
                        "too many requests in flight (the limit is {}, long polls included); retry after 1 s",
                        state.limits.max_concurrent_requests
                    ),
                    1,
                );
                return meter.attach(error.into_response(), started);
            }
        }
    }
    if let Some(len) = declared_in
        && len > state.limits.max_body_bytes as u64
    {
        let error = ApiError::too_large(format!(
            "the request body is {len} bytes, over the limit of {} bytes (max_body_bytes); send less per request",
            state.limits.max_body_bytes
        ));
        return meter.attach(error.into_response(), started);
    }
    // A declared body is reserved whole before any of it is read.
    if let Some(len) = declared_in
        && len > 0
        && !memory.lock().try_grow(len as usize)
    {
        let error = memory_short(&format!("a body of {len} bytes"));
        return meter.attach(error.into_response(), started);
    }
    let mut request = request;
    request.extensions_mut().insert(memory.clone());
    // A body without a declared length is reserved as it arrives.
    let short = Arc::new(AtomicBool::new(false));
    let request = if declared_in.is_none() && !request.body().is_end_stream() {
        let (memory, short) = (memory.clone(), Arc::clone(&short));
        request.map(|body| HookedBody::wrap(body, Budgeted { memory, short }))
    } else {
        request
    };
    // A body that has yet to arrive gets the body-read deadline.
    let timeout = state.limits.body_read_timeout;
    let deadline = (!request.body().is_end_stream()).then(|| Arc::new(BodyDeadline::default()));
    let request = match &deadline {
        Some(deadline) => request.map(|body| {
            Body::new(TimedBody {
                inner: body,
                timeout,
                sleep: None,
                deadline: Arc::clone(deadline),
            })
        }),
        None => request,
    };
    // A body without a declared length (chunked) is counted as it is read.
    let request = if declared_in.is_none() && !request.body().is_end_stream() {
        let counted = Arc::new(AtomicU64::new(0));
        meter.bytes_in = BytesIn::Counted(Arc::clone(&counted));
        request.map(|body| HookedBody::wrap(body, counted))
    } else {
        request
    };
    let Some(deadline) = deadline else {
        let response = next.run(request).await;
        return meter.attach(response, started);
    };
    let answer_short = |response: Response| {
        if short.load(Ordering::Acquire) {
            memory_short("the request body").into_response()
        } else {
            response
        }
    };
    let response = tokio::select! {
        response = next.run(request) => Some(response),
        () = deadline.expired() => None,
    };
    match response {
        // A handler that saw the timeout as a read error may have answered first.
        Some(response) if !deadline.has_expired() => meter.attach(answer_short(response), started),
        _ => {
            // The handler (and with it the body) is gone; free the slot now, not after the
            // answer has been written.
            meter._permit = None;
            // The 408 closes the connection (`Connection: close`).
            state.metrics.connection_closed("body_timeout");
            meter.attach(body_timeout_response(timeout), started)
        }
    }
}

/// The 408 answer to a body that did not arrive in time.
fn body_timeout_response(timeout: Duration) -> Response {
    let error = ApiError::new(
        StatusCode::REQUEST_TIMEOUT,
        format!(
            "the request body did not arrive within {} ms of starting to read it (body_read_timeout_ms); send the whole body without pausing, or send less per request",
            timeout.as_millis()
        ),
    );
    let mut response = error.into_response();
    // The rest of the body is never read, so the connection cannot carry another request.
    response
        .headers_mut()
        .insert(header::CONNECTION, HeaderValue::from_static("close"));
    response
}

/// A `Content-Length` header's value, if present and well formed.
fn content_length(headers: &HeaderMap) -> Option<u64> {
    headers
        .get(header::CONTENT_LENGTH)?
        .to_str()
        .ok()?
        .trim()
        .parse()
        .ok()
}

/// Request body bytes: declared by `Content-Length`, or counted while the handler reads.
#[derive(Debug)]
enum BytesIn {
    Declared(u64),
    Counted(Arc<AtomicU64>),
}

/// One request's measurements, recorded when the response body is done (or dropped), and its
/// permit, released at the same moment.
#[derive(Debug)]
struct Meter {
    state: Arc<AppState>,
    method: Method,
    route: Option<MatchedPath>,
    status: u16,
    head_elapsed: Duration,
    bytes_in: BytesIn,
    bytes_out: u64,
    /// Held until the response body has been sent.
    _permit: Option<OwnedSemaphorePermit>,
    /// Likewise (see [`RequestMemory`]).
    memory: RequestMemory,
}

impl Meter {
    /// Wraps `response`'s body so that the measurements are recorded (and the permit released)
    /// once the body has been sent.
    fn attach(mut self, response: Response, started: Instant) -> Response {
        self.status = response.status().as_u16();
        self.head_elapsed = started.elapsed();
        // From here on the answer is what the request holds (the body and what was read for
        // the answer are gone by now); an answer of unknown size keeps what was reserved.
        if let Some(len) = response.body().size_hint().exact() {
            self.memory.lock().resize(len as usize);
        }
        response.map(|body| HookedBody::wrap(body, self))
    }
}

impl Drop for Meter {
    fn drop(&mut self) {
        let bytes_in = match &self.bytes_in {
            BytesIn::Declared(n) => *n,
            BytesIn::Counted(n) => n.load(Ordering::Relaxed),
        };
        let route = self
            .route
            .as_ref()
            .map_or(UNMATCHED_ROUTE, MatchedPath::as_str);
        self.state.metrics.request(
            self.method.as_str(),
            route,
            self.status,
            self.head_elapsed,
            bytes_in,
            self.bytes_out,
        );
    }
}

/// What a [`HookedBody`] does with each data frame it passes on: `Err` ends the body with that
/// error instead of the frame. Trailers and the end of the stream pass through untouched.
pub(crate) trait FrameHook {
    fn on_data(&mut self, len: usize) -> Result<(), axum::Error>;
}

/// A body passed through unchanged (frames, size hint, end of stream) except that its hook sees
/// every data frame first. Whatever the hook holds (a [`Meter`], a connection's busy mark) is
/// dropped with the body.
#[derive(Debug)]
pub(crate) struct HookedBody<H> {
    inner: Body,
    hook: H,
}

impl<H: FrameHook + Send + Unpin + 'static> HookedBody<H> {
    pub(crate) fn wrap(inner: Body, hook: H) -> Body {
        Body::new(HookedBody { inner, hook })
    }
}

impl<H: FrameHook + Unpin> HttpBody for HookedBody<H> {
    type Data = Bytes;
    type Error = axum::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, axum::Error>>> {
        let this = &mut *self;
        let polled = Pin::new(&mut this.inner).poll_frame(cx);
        if let Poll::Ready(Some(Ok(frame))) = &polled
            && let Some(data) = frame.data_ref()
            && let Err(error) = this.hook.on_data(data.len())
        {
            return Poll::Ready(Some(Err(error)));
        }
        polled
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

/// A response body's hook: counts its data bytes into the request's [`Meter`], which is
/// recorded when the body is dropped.
impl FrameHook for Meter {
    fn on_data(&mut self, len: usize) -> Result<(), axum::Error> {
        self.bytes_out += len as u64;
        Ok(())
    }
}

/// A chunked request body's hook: counts its data bytes into a counter the meter reads later.
impl FrameHook for Arc<AtomicU64> {
    fn on_data(&mut self, len: usize) -> Result<(), axum::Error> {
        self.fetch_add(len as u64, Ordering::Relaxed);
        Ok(())
    }
}

/// The hook of a request body without a declared length, reserved from the memory budget as it
/// arrives; when the budget has no room for the next chunk the body ends with an error and
/// `short` is set, and the middleware answers 503.
#[derive(Debug)]
struct Budgeted {
    memory: RequestMemory,
    short: Arc<AtomicBool>,
}

/// The error a [`Budgeted`] body ends with.
#[derive(Debug)]
struct MemoryShort;

impl std::fmt::Display for MemoryShort {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("the memory budget has no room for the request body")
    }
}

impl std::error::Error for MemoryShort {}

impl FrameHook for Budgeted {
    fn on_data(&mut self, len: usize) -> Result<(), axum::Error> {
        if self.memory.lock().try_grow(len) {
            return Ok(());
        }
        self.short.store(true, Ordering::Release);
        Err(axum::Error::new(MemoryShort))
    }
}

/// Shared between a [`TimedBody`] and the middleware that waits on it: set once the body's
/// deadline has passed.
#[derive(Debug, Default)]
struct BodyDeadline {
    expired: AtomicBool,
    notify: Notify,
}

impl BodyDeadline {
    fn expire(&self) {
        self.expired.store(true, Ordering::Release);
        // Stores a wakeup if the middleware is not waiting yet.
        self.notify.notify_one();
    }

    fn has_expired(&self) -> bool {
        self.expired.load(Ordering::Acquire)
    }

    async fn expired(&self) {
        while !self.has_expired() {
            self.notify.notified().await;
        }
    }
}

/// A request body that must arrive whole within `timeout` of its first read; past that it
/// ends with an error and marks its [`BodyDeadline`] expired.
///
/// The deadline is checked whenever the handler reads (a body that trickles in is cut off at
/// its next read after the deadline) and by a timer while the handler waits for more.
#[derive(Debug)]
struct TimedBody {
    inner: Body,
    timeout: Duration,
    /// Started at the first read; `None` again once the body is complete.
    sleep: Option<Pin<Box<Sleep>>>,
    deadline: Arc<BodyDeadline>,
}

/// The error a [`TimedBody`] ends with.
#[derive(Debug)]
struct BodyTimedOut(Duration);

impl std::fmt::Display for BodyTimedOut {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "the request body did not arrive within {} ms",
            self.0.as_millis()
        )
    }
}

impl std::error::Error for BodyTimedOut {}

impl HttpBody for TimedBody {
    type Data = Bytes;
    type Error = axum::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, axum::Error>>> {
        let this = &mut *self;
        if this.deadline.has_expired() {
            return Poll::Ready(Some(Err(axum::Error::new(BodyTimedOut(this.timeout)))));
        }
        if this.inner.is_end_stream() {
            this.sleep = None;
            return Pin::new(&mut this.inner).poll_frame(cx);
        }
        let timeout = this.timeout;
        let sleep = this
            .sleep
            .get_or_insert_with(|| Box::pin(tokio::time::sleep(timeout)));
        let polled = Pin::new(&mut this.inner).poll_frame(cx);
        let late = match &polled {
            // Done: the deadline no longer applies.
            Poll::Ready(None) | Poll::Ready(Some(Err(_))) => {
                this.sleep = None;
                return polled;
            }
            // (`Sleep::is_elapsed` is only updated once the timer has been polled.)
            Poll::Ready(Some(Ok(_))) => tokio::time::Instant::now() >= sleep.deadline(),
            Poll::Pending => sleep.as_mut().poll(cx).is_ready(),
        };
        if late {
            this.sleep = None;
            this.deadline.expire();
            return Poll::Ready(Some(Err(axum::Error::new(BodyTimedOut(timeout)))));
        }
        if this.inner.is_end_stream() {
            this.sleep = None;
        }
        polled
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}
