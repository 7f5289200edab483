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
//! 3. metrics: method, route pattern, status, time to the response head, and body sizes go to
//!    [`sluice_broker::metrics::Metrics::http_request`] once the response body is done.

use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use axum::Router;
use axum::body::{Body, Bytes, HttpBody};
use axum::extract::{DefaultBodyLimit, MatchedPath, Request, State};
use axum::http::{HeaderMap, Method, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use http_body::{Frame, SizeHint};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use crate::{ApiError, AppState, HttpConfig};

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
}

impl Limits {
    pub fn new(config: &HttpConfig) -> Limits {
        // The semaphore's own ceiling is far above any sane setting; clamp rather than panic.
        let permits = config.max_concurrent_requests.min(Semaphore::MAX_PERMITS);
        Limits {
            in_flight: Arc::new(Semaphore::new(permits)),
            max_concurrent_requests: permits,
            max_body_bytes: config.max_body_bytes,
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
    let mut meter = Meter {
        state: Arc::clone(&state),
        method,
        route,
        status: 0,
        head_elapsed: Duration::ZERO,
        bytes_in: BytesIn::Declared(declared_in.unwrap_or(0)),
        bytes_out: 0,
        _permit: None,
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
    // A body without a declared length (chunked) is counted as it is read.
    let request = if declared_in.is_none() && !request.body().is_end_stream() {
        let counted = Arc::new(AtomicU64::new(0));
        meter.bytes_in = BytesIn::Counted(Arc::clone(&counted));
        request.map(|body| {
            Body::new(CountedBody {
                inner: body,
                on_data: Counter::Shared(counted),
                meter: None,
            })
        })
    } else {
        request
    };
    let response = next.run(request).await;
    meter.attach(response, started)
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
}

impl Meter {
    /// Wraps `response`'s body so that the measurements are recorded (and the permit released)
    /// once the body has been sent.
    fn attach(mut self, response: Response, started: Instant) -> Response {
        self.status = response.status().as_u16();
        self.head_elapsed = started.elapsed();
        response.map(|body| {
            Body::new(CountedBody {
                inner: body,
                on_data: Counter::Local,
                meter: Some(self),
            })
        })
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
        self.state.broker.metrics().http_request(
            self.method.as_str(),
            route,
            self.status,
            self.head_elapsed,
            bytes_in,
            self.bytes_out,
        );
    }
}

/// Where a [`CountedBody`] adds the data bytes it passes on.
#[derive(Debug)]
enum Counter {
    /// Into `meter.bytes_out` (response bodies).
    Local,
    /// Into a counter the meter reads later (request bodies).
    Shared(Arc<AtomicU64>),
}

/// A body passed through unchanged (frames, size hint, end of stream), counting its data bytes.
/// For a response it owns the request's [`Meter`], dropped (recorded) with the body.
#[derive(Debug)]
struct CountedBody {
    inner: Body,
    on_data: Counter,
    meter: Option<Meter>,
}

impl HttpBody for CountedBody {
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
        {
            let n = data.len() as u64;
            match &this.on_data {
                Counter::Local => {
                    if let Some(meter) = &mut this.meter {
                        meter.bytes_out += n;
                    }
                }
                Counter::Shared(counter) => {
                    counter.fetch_add(n, Ordering::Relaxed);
                }
            }
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
