//! The HTTP API's own series in `/metrics`: requests by method, route pattern and status, their
//! latency, connections open and closed, and body bytes in and out.
//!
//! Where it sits: [`crate::limits`]'s middleware calls [`HttpMetrics::request`] once per
//! response (when its body is done), [`crate::conn`] counts connections, and the `/metrics`
//! route hands the [`HttpMetrics`] of its [`crate::AppState`] to
//! [`sluice_broker::metrics::render`], which writes these series (with the broker's one
//! renderer, [`Text`]) in their place among the broker's. Names, labels, HELP and TYPE lines
//! are those the broker wrote before this module existed; the module docs of
//! `sluice_broker::metrics` say why the renderer is hand-written.
//!
//! Cost per request: two relaxed atomic adds for the bytes, then a short mutex over a small
//! list of (method, route) series (a series is allocated the first time it is seen, never
//! after). The number of series is bounded ([`HTTP_SERIES_MAX`]), and methods outside the
//! standard set are counted as `other`, so no client can grow it.

use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use sluice_broker::metrics::{LatencyHistogram, LatencySnapshot, ListenerSeries, Text};

/// Most (method, route) series kept. Routes are a fixed handful plus `unmatched`, and methods
/// are folded to the standard set, so the real number is small; past the limit requests are
/// counted under the route `other`.
pub const HTTP_SERIES_MAX: usize = 256;

/// Why the HTTP API closed a connection on its own, as the `reason` label.
pub const HTTP_CONNECTION_CLOSE_REASONS: [&str; 6] = [
    "header_timeout",
    "body_timeout",
    "idle",
    "write_stalled",
    "refused",
    "tls_handshake",
];

/// One (method, route) of the HTTP API: its latency and its answers by status.
#[derive(Debug)]
struct Series {
    method: &'static str,
    route: String,
    latency: LatencyHistogram,
    /// (status, count); a handful of statuses per route.
    statuses: Vec<(u16, u64)>,
}

/// The HTTP API's counters, one per [`crate::AppState`].
#[derive(Debug, Default)]
pub struct HttpMetrics {
    series: Mutex<Vec<Series>>,
    bytes_in: AtomicU64,
    bytes_out: AtomicU64,
    connections_open: AtomicU64,
    /// Indexed like [`HTTP_CONNECTION_CLOSE_REASONS`].
    connections_closed: [AtomicU64; HTTP_CONNECTION_CLOSE_REASONS.len()],
}

impl HttpMetrics {
    /// One request answered: its route pattern (e.g. `/topics/{topic}/records`), method,
    /// status, time to the response head, and body sizes.
    pub fn request(
        &self,
        method: &str,
        route: &str,
        status: u16,
        elapsed: Duration,
        bytes_in: u64,
        bytes_out: u64,
    ) {
        self.bytes_in.fetch_add(bytes_in, Ordering::Relaxed);
        self.bytes_out.fetch_add(bytes_out, Ordering::Relaxed);
        let method = standard_method(method);
        let mut series = self.lock();
        let find = |series: &[Series], route: &str| {
            series
                .iter()
                .position(|s| s.method == method && s.route == route)
        };
        let route = if find(&series, route).is_some() || series.len() < HTTP_SERIES_MAX - 1 {
            route
        } else {
            "other"
        };
        let index = find(&series, route).unwrap_or_else(|| {
            series.push(Series {
                method,
                route: route.to_owned(),
                latency: LatencyHistogram::default(),
                statuses: Vec::new(),
            });
            series.len() - 1
        });
        let s = &mut series[index];
        s.latency.observe(elapsed);
        match s.statuses.iter_mut().find(|(code, _)| *code == status) {
            Some((_, count)) => *count += 1,
            None => s.statuses.push((status, 1)),
        }
    }

    /// A connection was admitted (`true`) or has ended (`false`).
    pub fn connection_open(&self, opened: bool) {
        if opened {
            self.connections_open.fetch_add(1, Ordering::Relaxed);
        } else {
            self.connections_open.fetch_sub(1, Ordering::Relaxed);
        }
    }

    /// The server closed (or refused) a connection for `reason`, one of
    /// [`HTTP_CONNECTION_CLOSE_REASONS`] (others are not counted).
    pub fn connection_closed(&self, reason: &str) {
        if let Some(i) = close_reason(reason) {
            self.connections_closed[i].fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Connections closed (or refused) for `reason` so far.
    pub fn connections_closed(&self, reason: &str) -> u64 {
        close_reason(reason).map_or(0, |i| self.connections_closed[i].load(Ordering::Relaxed))
    }

    /// Requests answered so far.
    pub fn requests_total(&self) -> u64 {
        self.lock()
            .iter()
            .flat_map(|s| s.statuses.iter().map(|(_, n)| n))
            .sum()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Vec<Series>> {
        // Every update is a single push or add, so a panic elsewhere while holding the lock
        // cannot leave the series inconsistent: a poisoned lock is still usable.
        self.series
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

impl ListenerSeries for HttpMetrics {
    fn listener(&self) -> &'static str {
        "http"
    }

    fn bytes(&self) -> (u64, u64) {
        (
            self.bytes_in.load(Ordering::Relaxed),
            self.bytes_out.load(Ordering::Relaxed),
        )
    }

    fn render(&self, out: &mut Text) {
        /// One series, copied out of the lock.
        struct Row {
            method: &'static str,
            route: String,
            latency: LatencySnapshot,
            statuses: Vec<(u16, u64)>,
        }
        let rows: Vec<Row> = self
            .lock()
            .iter()
            .map(|s| {
                let mut statuses = s.statuses.clone();
                statuses.sort_unstable();
                Row {
                    method: s.method,
                    route: s.route.clone(),
                    latency: s.latency.snapshot(),
                    statuses,
                }
            })
            .collect();
        out.family(
            "sluice_http_requests_total",
            "counter",
            "HTTP requests answered, by method, route pattern and status.",
        );
        for row in &rows {
            for (status, count) in &row.statuses {
                let status = status.to_string();
                let labels = [
                    ("method", row.method),
                    ("route", row.route.as_str()),
                    ("status", status.as_str()),
                ];
                out.sample("sluice_http_requests_total", &labels, *count);
            }
        }
        out.family(
            "sluice_http_request_duration_seconds",
            "histogram",
            "Time from receiving an HTTP request to sending its response head, by method and route pattern.",
        );
        for row in &rows {
            out.histogram(
                "sluice_http_request_duration_seconds",
                &[("method", row.method), ("route", &row.route)],
                &row.latency,
            );
        }
        out.family(
            "sluice_http_connections",
            "gauge",
            "HTTP connections open now.",
        );
        out.sample(
            "sluice_http_connections",
            &[],
            self.connections_open.load(Ordering::Relaxed),
        );
        out.family(
            "sluice_http_connections_closed_total",
            "counter",
            "HTTP connections the server closed or refused on its own, by reason (header_timeout, body_timeout, idle, write_stalled, refused, tls_handshake).",
        );
        for (reason, count) in HTTP_CONNECTION_CLOSE_REASONS
            .iter()
            .zip(&self.connections_closed)
        {
            out.sample(
                "sluice_http_connections_closed_total",
                &[("reason", reason)],
                count.load(Ordering::Relaxed),
            );
        }
    }
}

fn close_reason(reason: &str) -> Option<usize> {
    HTTP_CONNECTION_CLOSE_REASONS
        .iter()
        .position(|r| *r == reason)
}

/// `method` as one of the standard method names, or `other` (keeps the series bounded and
/// the label free of client-chosen text).
fn standard_method(method: &str) -> &'static str {
    const STANDARD: [&str; 9] = [
        "GET", "POST", "PUT", "DELETE", "HEAD", "OPTIONS", "PATCH", "TRACE", "CONNECT",
    ];
    STANDARD
        .iter()
        .find(|m| **m == method)
        .copied()
        .unwrap_or("other")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rendered(m: &HttpMetrics) -> String {
        let mut out = Text::default();
        m.render(&mut out);
        out.into_string()
    }

    #[test]
    fn methods_outside_the_standard_set_are_folded() {
        let m = HttpMetrics::default();
        m.request("BREW", "/x", 405, Duration::ZERO, 0, 0);
        m.request("GET", "/x", 200, Duration::ZERO, 0, 0);
        let methods: Vec<&str> = m.lock().iter().map(|s| s.method).collect();
        assert_eq!(methods, ["other", "GET"]);
    }

    #[test]
    fn series_are_bounded() {
        let m = HttpMetrics::default();
        for i in 0..HTTP_SERIES_MAX * 2 {
            m.request("GET", &format!("/r{i}"), 200, Duration::ZERO, 0, 0);
        }
        // A route seen before the limit keeps its own series.
        m.request("GET", "/r0", 200, Duration::ZERO, 0, 0);
        let series = m.lock();
        assert_eq!(series.len(), HTTP_SERIES_MAX);
        let other = series.iter().find(|s| s.route == "other").unwrap();
        assert_eq!(other.statuses, [(200, HTTP_SERIES_MAX as u64 + 1)]);
        let first = series.iter().find(|s| s.route == "/r0").unwrap();
        assert_eq!(first.statuses, [(200, 2)]);
    }

    #[test]
    fn connection_counts() {
        let m = HttpMetrics::default();
        m.connection_open(true);
        m.connection_open(true);
        m.connection_open(false);
        m.connection_closed("refused");
        m.connection_closed("refused");
        m.connection_closed("no such reason");
        assert_eq!(m.connections_closed("refused"), 2);
        assert_eq!(m.connections_closed("idle"), 0);
        let text = rendered(&m);
        assert!(text.contains("sluice_http_connections 1\n"), "{text}");
        assert!(
            text.contains("sluice_http_connections_closed_total{reason=\"refused\"} 2\n"),
            "{text}"
        );
    }

    /// The exact text the broker wrote for these series before they moved here.
    #[test]
    fn output_is_unchanged() {
        let m = HttpMetrics::default();
        m.request(
            "GET",
            "/odd\"route\\with\nbreak",
            200,
            Duration::from_millis(1),
            5,
            7,
        );
        m.request("POST", "/t", 413, Duration::from_secs(20), 0, 30);
        m.request("POST", "/t", 200, Duration::ZERO, 0, 0);
        m.request("POST", "/t", 413, Duration::ZERO, 0, 0);
        assert_eq!(m.requests_total(), 4);
        assert_eq!(m.bytes(), (5, 37));
        let text = rendered(&m);
        let expected_head = "\
# HELP sluice_http_requests_total HTTP requests answered, by method, route pattern and status.
# TYPE sluice_http_requests_total counter
sluice_http_requests_total{method=\"GET\",route=\"/odd\\\"route\\\\with\\nbreak\",status=\"200\"} 1
sluice_http_requests_total{method=\"POST\",route=\"/t\",status=\"200\"} 1
sluice_http_requests_total{method=\"POST\",route=\"/t\",status=\"413\"} 2
# HELP sluice_http_request_duration_seconds Time from receiving an HTTP request to sending its response head, by method and route pattern.
# TYPE sluice_http_request_duration_seconds histogram
sluice_http_request_duration_seconds_bucket{method=\"GET\",route=\"/odd\\\"route\\\\with\\nbreak\",le=\"0.0001\"} 0
";
        assert!(text.starts_with(expected_head), "{text}");
        let expected_tail = "\
sluice_http_request_duration_seconds_bucket{method=\"POST\",route=\"/t\",le=\"10\"} 2
sluice_http_request_duration_seconds_bucket{method=\"POST\",route=\"/t\",le=\"+Inf\"} 3
sluice_http_request_duration_seconds_sum{method=\"POST\",route=\"/t\"} 20
sluice_http_request_duration_seconds_count{method=\"POST\",route=\"/t\"} 3
# HELP sluice_http_connections HTTP connections open now.
# TYPE sluice_http_connections gauge
sluice_http_connections 0
# HELP sluice_http_connections_closed_total HTTP connections the server closed or refused on its own, by reason (header_timeout, body_timeout, idle, write_stalled, refused, tls_handshake).
# TYPE sluice_http_connections_closed_total counter
sluice_http_connections_closed_total{reason=\"header_timeout\"} 0
sluice_http_connections_closed_total{reason=\"body_timeout\"} 0
sluice_http_connections_closed_total{reason=\"idle\"} 0
sluice_http_connections_closed_total{reason=\"write_stalled\"} 0
sluice_http_connections_closed_total{reason=\"refused\"} 0
sluice_http_connections_closed_total{reason=\"tls_handshake\"} 0
";
        assert!(text.ends_with(expected_tail), "{text}");
    }
}
