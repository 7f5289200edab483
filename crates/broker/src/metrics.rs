//! The broker's metrics: request counts and latencies of both listeners, bytes and records in
//! and out, and (read at render time) fsync, topic, partition and consumer-lag figures, as
//! Prometheus text (exposition format 0.0.4), served by the HTTP API's `/metrics`.
//!
//! Where it sits: the Kafka listener calls [`Metrics::kafka_request`] once per answered request,
//! the HTTP API's middleware calls [`Metrics::http_request`] once per response, and the produce
//! and fetch paths count records. [`render`] reads those counters plus the current state of the
//! broker (the group committer's fsync histogram, every partition's offsets and size, every
//! group's committed offsets).
//!
//! Why hand-rolled rather than the `metrics` facade with a Prometheus exporter: the facade
//! installs one recorder per process, but these metrics belong to a [`Broker`] instance — tests
//! run several brokers in one process and each must report only its own numbers. What is needed
//! is small: counters and fixed-bucket histograms.
//!
//! Cost on the hot paths: a Kafka request is a few relaxed atomic adds on a slot indexed by its
//! API key (no lock, no allocation). An HTTP request takes a short mutex over a small list of
//! (method, route) series; a series is allocated the first time it is seen, never after. The
//! number of series is bounded ([`HTTP_SERIES_MAX`]), and methods outside the standard set are
//! counted as `other`, so no client can grow it.

use std::fmt::Write as _;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use sluice_protocol::kafka_protocol::messages::ApiKey;

use crate::Broker;

/// Upper bounds of the request latency buckets, in microseconds (100 µs to 10 s). Slower
/// requests land in one more, open-ended bucket (`le="+Inf"`).
pub const LATENCY_BUCKET_BOUNDS_MICROS: [u64; 16] = [
    100, 250, 500, 1_000, 2_500, 5_000, 10_000, 25_000, 50_000, 100_000, 250_000, 500_000,
    1_000_000, 2_500_000, 5_000_000, 10_000_000,
];

/// Buckets of a latency histogram: one per bound plus the open-ended one.
const LATENCY_BUCKETS: usize = LATENCY_BUCKET_BOUNDS_MICROS.len() + 1;

/// Kafka API keys that get their own slot (keys run 0..=92 today; the decoder only lets through
/// the ones Sluice supports). A key outside the range is counted in the last slot, `unknown`.
const KAFKA_API_SLOTS: usize = 128;

/// Most (method, route) series kept for HTTP requests. Routes are a fixed handful plus
/// `unmatched`, and methods are folded to the standard set, so the real number is small; past
/// the limit requests are counted under the route `other`.
pub const HTTP_SERIES_MAX: usize = 256;

/// The listener labels of `sluice_bytes_in_total` / `sluice_bytes_out_total`.
const LISTENER_KAFKA: &str = "kafka";
const LISTENER_HTTP: &str = "http";

/// A fixed-bucket latency histogram of relaxed atomics (lock-free).
#[derive(Debug, Default)]
struct Histogram {
    /// Not cumulative: `buckets[i]` counts observations in (bound[i-1], bound[i]].
    buckets: [AtomicU64; LATENCY_BUCKETS],
    sum_micros: AtomicU64,
}

impl Histogram {
    fn observe(&self, elapsed: Duration) {
        let micros = u64::try_from(elapsed.as_micros()).unwrap_or(u64::MAX);
        let bucket = LATENCY_BUCKET_BOUNDS_MICROS.partition_point(|&bound| bound < micros);
        self.buckets[bucket].fetch_add(1, Ordering::Relaxed);
        self.sum_micros.fetch_add(micros, Ordering::Relaxed);
    }

    fn snapshot(&self) -> ([u64; LATENCY_BUCKETS], u64) {
        (
            std::array::from_fn(|i| self.buckets[i].load(Ordering::Relaxed)),
            self.sum_micros.load(Ordering::Relaxed),
        )
    }
}

/// One (method, route) of the HTTP API: its latency and its answers by status.
#[derive(Debug)]
struct HttpSeries {
    method: &'static str,
    route: String,
    latency: Histogram,
    /// (status, count); a handful of statuses per route.
    statuses: Vec<(u16, u64)>,
}

/// Counters and latency histograms, shared by the Kafka listener and the HTTP API.
#[derive(Debug)]
pub struct Metrics {
    /// Indexed by API key; the request count is the histogram's count.
    kafka: Box<[Histogram]>,
    kafka_bytes_in: AtomicU64,
    kafka_bytes_out: AtomicU64,
    http: Mutex<Vec<HttpSeries>>,
    http_bytes_in: AtomicU64,
    http_bytes_out: AtomicU64,
    http_connections: HttpConnectionMetrics,
    records_in: AtomicU64,
    records_out: AtomicU64,
    listener: ListenerMetrics,
}

/// Why the Kafka listener closed a connection on its own, as the `reason` label.
pub const CONNECTION_CLOSE_REASONS: [&str; 6] = [
    "idle",
    "request_timeout",
    "write_stalled",
    "bad_frame",
    "malformed",
    "refused",
];

/// The Kafka listener's connection counts.
#[derive(Debug, Default)]
struct ListenerMetrics {
    open: AtomicU64,
    /// Indexed like [`CONNECTION_CLOSE_REASONS`].
    closed: [AtomicU64; CONNECTION_CLOSE_REASONS.len()],
}

impl Default for Metrics {
    fn default() -> Self {
        Metrics {
            kafka: (0..KAFKA_API_SLOTS).map(|_| Histogram::default()).collect(),
            kafka_bytes_in: AtomicU64::new(0),
            kafka_bytes_out: AtomicU64::new(0),
            http: Mutex::new(Vec::new()),
            http_bytes_in: AtomicU64::new(0),
            http_bytes_out: AtomicU64::new(0),
            http_connections: HttpConnectionMetrics::default(),
            records_in: AtomicU64::new(0),
            records_out: AtomicU64::new(0),
            listener: ListenerMetrics::default(),
        }
    }
}

impl Metrics {
    /// One Kafka request answered: its API key, the time from decoding it to having its
    /// response, and the frame sizes in and out (`bytes_out` 0 when there is no response).
    pub fn kafka_request(
        &self,
        api_key: i16,
        elapsed: Duration,
        bytes_in: usize,
        bytes_out: usize,
    ) {
        let slot = usize::try_from(api_key)
            .ok()
            .filter(|&k| k < KAFKA_API_SLOTS - 1)
            .unwrap_or(KAFKA_API_SLOTS - 1);
        self.kafka[slot].observe(elapsed);
        self.kafka_bytes_in
            .fetch_add(bytes_in as u64, Ordering::Relaxed);
        self.kafka_bytes_out
            .fetch_add(bytes_out as u64, Ordering::Relaxed);
    }

    /// One HTTP request answered: its route pattern (e.g. `/topics/{topic}/records`), method,
    /// status, time to the response head, and body sizes.
    pub fn http_request(
        &self,
        method: &str,
        route: &str,
        status: u16,
        elapsed: Duration,
        bytes_in: u64,
        bytes_out: u64,
    ) {
        self.http_bytes_in.fetch_add(bytes_in, Ordering::Relaxed);
        self.http_bytes_out.fetch_add(bytes_out, Ordering::Relaxed);
        let method = standard_method(method);
        // A panic elsewhere while holding the lock cannot leave the series inconsistent
        // (every update is a single push or add), so a poisoned lock is still usable.
        let mut series = self.http.lock().unwrap_or_else(|p| p.into_inner());
        let index = match series
            .iter()
            .position(|s| s.method == method && s.route == route)
        {
            Some(i) => i,
            None => {
                let route = if series.len() < HTTP_SERIES_MAX - 1 {
                    route
                } else {
                    "other"
                };
                match series
                    .iter()
                    .position(|s| s.method == method && s.route == route)
                {
                    Some(i) => i,
                    None => {
                        series.push(HttpSeries {
                            method,
                            route: route.to_owned(),
                            latency: Histogram::default(),
                            statuses: Vec::new(),
                        });
                        series.len() - 1
                    }
                }
            }
        };
        let s = &mut series[index];
        s.latency.observe(elapsed);
        match s.statuses.iter_mut().find(|(code, _)| *code == status) {
            Some((_, count)) => *count += 1,
            None => s.statuses.push((status, 1)),
        }
    }

    /// Records appended through either listener.
    pub fn records_in(&self, records: u64) {
        self.records_in.fetch_add(records, Ordering::Relaxed);
    }

    /// Records served through either listener.
    pub fn records_out(&self, records: u64) {
        self.records_out.fetch_add(records, Ordering::Relaxed);
    }

    /// A Kafka connection was admitted (`true`) or has ended (`false`).
    pub fn kafka_connection_open(&self, opened: bool) {
        if opened {
            self.listener.open.fetch_add(1, Ordering::Relaxed);
        } else {
            self.listener.open.fetch_sub(1, Ordering::Relaxed);
        }
    }

    /// The Kafka listener closed (or refused) a connection for `reason`, one of
    /// [`CONNECTION_CLOSE_REASONS`].
    pub fn kafka_connection_closed(&self, reason: &str) {
        if let Some(i) = CONNECTION_CLOSE_REASONS.iter().position(|r| *r == reason) {
            self.listener.closed[i].fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Requests answered through the Kafka listener so far, all APIs together.
    pub fn kafka_requests_total(&self) -> u64 {
        self.kafka
            .iter()
            .map(|h| h.snapshot().0.iter().sum::<u64>())
            .sum()
    }

    /// Requests answered through the HTTP API so far.
    pub fn http_requests_total(&self) -> u64 {
        let series = self.http.lock().unwrap_or_else(|p| p.into_inner());
        series
            .iter()
            .flat_map(|s| s.statuses.iter().map(|(_, n)| n))
            .sum()
    }
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

/// The name of API key slot `slot`, for the `api` label.
fn api_name(slot: usize) -> String {
    match i16::try_from(slot)
        .ok()
        .and_then(|k| ApiKey::try_from(k).ok())
    {
        Some(key) if slot < KAFKA_API_SLOTS - 1 => format!("{key:?}"),
        _ => "unknown".to_owned(),
    }
}

/// The Prometheus text exposition (format 0.0.4) of `broker`'s metrics and current state.
///
/// Takes the locks of the topic registry, each partition and the group coordinator briefly,
/// one at a time; meant to run off the async runtime (`spawn_blocking`).
pub fn render(broker: &Broker) -> String {
    let mut out = Text::default();
    let m = broker.metrics();

    // Kafka listener.
    out.family(
        "sluice_kafka_requests_total",
        "counter",
        "Kafka requests answered, by API.",
    );
    let kafka: Vec<(String, [u64; LATENCY_BUCKETS], u64)> = m
        .kafka
        .iter()
        .enumerate()
        .filter_map(|(slot, h)| {
            let (buckets, sum) = h.snapshot();
            (buckets.iter().sum::<u64>() > 0).then(|| (api_name(slot), buckets, sum))
        })
        .collect();
    for (api, buckets, _) in &kafka {
        out.sample(
            "sluice_kafka_requests_total",
            &[("api", api)],
            buckets.iter().sum::<u64>(),
        );
    }
    out.family(
        "sluice_kafka_request_duration_seconds",
        "histogram",
        "Time from decoding a Kafka request to having its response encoded, by API.",
    );
    for (api, buckets, sum) in &kafka {
        out.histogram(
            "sluice_kafka_request_duration_seconds",
            &[("api", api)],
            &LATENCY_BUCKET_BOUNDS_MICROS,
            buckets,
            *sum,
        );
    }

    out.family(
        "sluice_kafka_connections",
        "gauge",
        "Kafka client connections open now.",
    );
    out.sample(
        "sluice_kafka_connections",
        &[],
        m.listener.open.load(Ordering::Relaxed),
    );
    out.family(
        "sluice_kafka_connections_closed_total",
        "counter",
        "Kafka connections the broker closed or refused on its own, by reason (idle, request_timeout, write_stalled, bad_frame, malformed, refused).",
    );
    for (reason, count) in CONNECTION_CLOSE_REASONS.iter().zip(&m.listener.closed) {
        out.sample(
            "sluice_kafka_connections_closed_total",
            &[("reason", reason)],
            count.load(Ordering::Relaxed),
        );
    }

    // Memory budget.
    let memory = broker.memory();
    out.family(
        "sluice_memory_limit_bytes",
        "gauge",
        "The memory budget for data held for clients (memory_limit).",
    );
    out.sample("sluice_memory_limit_bytes", &[], memory.limit());
    out.family(
        "sluice_memory_used_bytes",
        "gauge",
        "Bytes of the memory budget reserved now: request frames, fetch responses, HTTP bodies and reads.",
    );
    out.sample("sluice_memory_used_bytes", &[], memory.used());
    out.family(
        "sluice_memory_short_total",
        "counter",
        "Times a reservation waited or was cut short because the memory budget was short.",
    );
    out.sample("sluice_memory_short_total", &[], memory.short_count());
    out.family(
        "sluice_memory_forced_over_bytes_total",
        "counter",
        "Bytes reserved past the memory budget to serve a batch larger than the room left, in all.",
    );
    out.sample(
        "sluice_memory_forced_over_bytes_total",
        &[],
        memory.forced_over_bytes(),
    );

    // HTTP API.
    /// One HTTP series, copied out of the lock.
    struct HttpRow {
        method: &'static str,
        route: String,
        buckets: [u64; LATENCY_BUCKETS],
        sum_micros: u64,
        statuses: Vec<(u16, u64)>,
    }
    let http: Vec<HttpRow> = {
        let series = m.http.lock().unwrap_or_else(|p| p.into_inner());
        series
            .iter()
            .map(|s| {
                let (buckets, sum_micros) = s.latency.snapshot();
                let mut statuses = s.statuses.clone();
                statuses.sort_unstable();
                HttpRow {
                    method: s.method,
                    route: s.route.clone(),
                    buckets,
                    sum_micros,
                    statuses,
                }
            })
            .collect()
    };
    out.family(
        "sluice_http_requests_total",
        "counter",
        "HTTP requests answered, by method, route pattern and status.",
    );
    for row in &http {
        for (status, count) in &row.statuses {
            let status = status.to_string();
            out.sample(
                "sluice_http_requests_total",
                &[
                    ("method", row.method),
                    ("route", &row.route),
                    ("status", &status),
                ],
                *count,
            );
        }
    }
    out.family(
        "sluice_http_request_duration_seconds",
        "histogram",
        "Time from receiving an HTTP request to sending its response head, by method and route pattern.",
    );
    for row in &http {
        out.histogram(
            "sluice_http_request_duration_seconds",
            &[("method", row.method), ("route", &row.route)],
            &LATENCY_BUCKET_BOUNDS_MICROS,
            &row.buckets,
            row.sum_micros,
        );
    }

    render_http_connections(&mut out, &m.http_connections);

    // Bytes and records.
    out.family(
        "sluice_bytes_in_total",
        "counter",
        "Request bytes received, by listener (Kafka: whole frames; HTTP: bodies).",
    );
    for (listener, counter) in [
        (LISTENER_KAFKA, &m.kafka_bytes_in),
        (LISTENER_HTTP, &m.http_bytes_in),
    ] {
        out.sample(
            "sluice_bytes_in_total",
            &[("listener", listener)],
            counter.load(Ordering::Relaxed),
        );
    }
    out.family(
        "sluice_bytes_out_total",
        "counter",
        "Response bytes sent, by listener (Kafka: whole frames; HTTP: bodies).",
    );
    for (listener, counter) in [
        (LISTENER_KAFKA, &m.kafka_bytes_out),
        (LISTENER_HTTP, &m.http_bytes_out),
    ] {
        out.sample(
            "sluice_bytes_out_total",
            &[("listener", listener)],
            counter.load(Ordering::Relaxed),
        );
    }
    out.family(
        "sluice_records_in_total",
        "counter",
        "Records appended, through either listener.",
    );
    out.sample(
        "sluice_records_in_total",
        &[],
        m.records_in.load(Ordering::Relaxed),
    );
    out.family(
        "sluice_records_out_total",
        "counter",
        "Records served to consumers, through either listener.",
    );
    out.sample(
        "sluice_records_out_total",
        &[],
        m.records_out.load(Ordering::Relaxed),
    );

    // Durability.
    let commit = broker.committer().stats();
    let fsync = broker.committer().fdatasync_histogram();
    out.family(
        "sluice_fsyncs_total",
        "counter",
        "fdatasyncs of segment files (group-commit rounds and segment seals).",
    );
    out.sample("sluice_fsyncs_total", &[], commit.fdatasyncs);
    out.family(
        "sluice_fsync_bytes_total",
        "counter",
        "Bytes made durable by those fdatasyncs.",
    );
    out.sample("sluice_fsync_bytes_total", &[], commit.bytes_synced);
    out.family(
        "sluice_fsync_duration_seconds",
        "histogram",
        "Duration of each group-commit fdatasync.",
    );
    out.histogram(
        "sluice_fsync_duration_seconds",
        &[],
        fsync.bounds_micros,
        &fsync.counts,
        fsync.sum_micros,
    );

    // Data directory space (a full disk is a state: see sluice-log's `space.rs`).
    render_data_dir_space(&mut out, broker);

    // Topics and partitions.
    let mut topics = broker.topics().all();
    topics.sort_by(|a, b| a.name.cmp(&b.name));
    struct PartitionRow {
        partition: String,
        high_watermark: i64,
        log_start_offset: i64,
        size_bytes: u64,
    }
    let rows: Vec<(&str, Vec<PartitionRow>)> = topics
        .iter()
        .map(|t| {
            let rows = t
                .partitions()
                .iter()
                .enumerate()
                .map(|(p, log)| PartitionRow {
                    partition: p.to_string(),
                    high_watermark: log.high_watermark(),
                    log_start_offset: log.log_start_offset(),
                    size_bytes: log.size_bytes(),
                })
                .collect();
            (t.name.as_str(), rows)
        })
        .collect();
    out.family("sluice_topics", "gauge", "Topics.");
    out.sample("sluice_topics", &[], rows.len() as u64);
    out.family("sluice_partitions", "gauge", "Partitions, over all topics.");
    out.sample(
        "sluice_partitions",
        &[],
        rows.iter().map(|(_, p)| p.len() as u64).sum::<u64>(),
    );
    type Column = fn(&PartitionRow) -> i64;
    let columns: [(&str, &str, Column); 3] = [
        (
            "sluice_partition_high_watermark",
            "One past the last durable offset of the partition (what consumers can read up to).",
            |r| r.high_watermark,
        ),
        (
            "sluice_partition_log_start_offset",
            "First offset still stored in the partition.",
            |r| r.log_start_offset,
        ),
        (
            "sluice_partition_size_bytes",
            "Bytes stored in the partition's segments.",
            |r| i64::try_from(r.size_bytes).unwrap_or(i64::MAX),
        ),
    ];
    for (name, help, column) in columns {
        out.family(name, "gauge", help);
        for (topic, partitions) in &rows {
            for row in partitions {
                out.sample(
                    name,
                    &[("topic", topic), ("partition", &row.partition)],
                    column(row),
                );
            }
        }
    }

    // Consumer groups.
    let groups = broker.groups().list();
    out.family("sluice_consumer_groups", "gauge", "Consumer groups.");
    out.sample("sluice_consumer_groups", &[], groups.len() as u64);
    out.family(
        "sluice_consumer_group_lag",
        "gauge",
        "Records between a group's committed offset and the partition's high watermark.",
    );
    for group in &groups {
        let Ok(committed) = broker.groups().fetch_offsets(&group.group_id, None, None) else {
            continue;
        };
        for (topic, partitions) in committed {
            let Some((_, rows)) = rows.iter().find(|(name, _)| *name == topic) else {
                // Offsets of a topic that no longer exists.
                continue;
            };
            for (partition, offset) in partitions {
                let (Some(offset), Some(row)) = (
                    offset,
                    usize::try_from(partition).ok().and_then(|p| rows.get(p)),
                ) else {
                    continue;
                };
                let lag = (row.high_watermark - offset.offset).max(0);
                out.sample(
                    "sluice_consumer_group_lag",
                    &[
                        ("group", &group.group_id),
                        ("topic", &topic),
                        ("partition", &row.partition),
                    ],
                    lag,
                );
            }
        }
    }
    out.0
}

/// `sluice_data_dir_full`, `sluice_data_dir_free_bytes`, `sluice_data_dir_no_space_errors_total`.
fn render_data_dir_space(out: &mut Text, broker: &Broker) {
    let space = broker.data_dir_space();
    // A full directory's state may be stale if nothing has written since space came back:
    // check now (one statvfs, only while full).
    space.recheck();
    let status = space.status();
    out.family(
        "sluice_data_dir_full",
        "gauge",
        "1 while the data directory is full: a write found no room and no write has succeeded since (appends fail with a storage error; reads work).",
    );
    out.sample("sluice_data_dir_full", &[], u8::from(status.full));
    out.family(
        "sluice_data_dir_free_bytes",
        "gauge",
        "Bytes available in the data directory's filesystem (statvfs f_bavail).",
    );
    if let Some(free) = status.free_bytes {
        out.sample("sluice_data_dir_free_bytes", &[], free);
    }
    out.family(
        "sluice_data_dir_no_space_errors_total",
        "counter",
        "Writes into the data directory refused for want of space (ENOSPC, EDQUOT).",
    );
    out.sample(
        "sluice_data_dir_no_space_errors_total",
        &[],
        status.no_space_errors,
    );
}

/// Prometheus text being written.
#[derive(Debug, Default)]
struct Text(String);

impl Text {
    /// The `# HELP` and `# TYPE` lines of a metric family.
    fn family(&mut self, name: &str, kind: &str, help: &str) {
        let _ = writeln!(self.0, "# HELP {name} {}", escape_help(help));
        let _ = writeln!(self.0, "# TYPE {name} {kind}");
    }

    fn sample(&mut self, name: &str, labels: &[(&str, &str)], value: impl std::fmt::Display) {
        self.0.push_str(name);
        self.labels(labels, None);
        let _ = writeln!(self.0, " {value}");
    }

    /// `{a="x",b="y"}` (nothing when there are no labels), with `le` last if given.
    fn labels(&mut self, labels: &[(&str, &str)], le: Option<&str>) {
        if labels.is_empty() && le.is_none() {
            return;
        }
        self.0.push('{');
        let le = le.map(|v| ("le", v));
        for (i, (name, value)) in labels.iter().copied().chain(le).enumerate() {
            if i > 0 {
                self.0.push(',');
            }
            self.0.push_str(name);
            self.0.push_str("=\"");
            escape_label_value(&mut self.0, value);
            self.0.push('"');
        }
        self.0.push('}');
    }

    /// The `_bucket` (cumulative), `_sum` and `_count` lines of one histogram series.
    /// `counts` has one entry per bound plus the open-ended one, not cumulative.
    fn histogram(
        &mut self,
        name: &str,
        labels: &[(&str, &str)],
        bounds_micros: &[u64],
        counts: &[u64],
        sum_micros: u64,
    ) {
        let bucket = format!("{name}_bucket");
        let mut cumulative = 0u64;
        for (i, count) in counts.iter().enumerate() {
            cumulative += count;
            let le = match bounds_micros.get(i) {
                Some(&micros) => seconds(micros).to_string(),
                None => "+Inf".to_owned(),
            };
            self.0.push_str(&bucket);
            self.labels(labels, Some(&le));
            let _ = writeln!(self.0, " {cumulative}");
        }
        self.sample(&format!("{name}_sum"), labels, seconds(sum_micros));
        self.sample(&format!("{name}_count"), labels, cumulative);
    }
}

fn seconds(micros: u64) -> f64 {
    micros as f64 / 1e6
}

/// A label value as the text format wants it: backslash, double quote and line feed escaped.
fn escape_label_value(out: &mut String, value: &str) {
    for c in value.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '"' => out.push_str("\\\""),
            '\n' => out.push_str("\\n"),
            c => out.push(c),
        }
    }
}

/// HELP text: backslash and line feed escaped.
fn escape_help(help: &str) -> String {
    help.replace('\\', "\\\\").replace('\n', "\\n")
}

// HTTP API connections.

/// Why the HTTP API closed a connection on its own, as the `reason` label.
pub const HTTP_CONNECTION_CLOSE_REASONS: [&str; 5] = [
    "header_timeout",
    "body_timeout",
    "idle",
    "write_stalled",
    "refused",
];

/// The HTTP API's connection counts.
#[derive(Debug, Default)]
struct HttpConnectionMetrics {
    open: AtomicU64,
    /// Indexed like [`HTTP_CONNECTION_CLOSE_REASONS`].
    closed: [AtomicU64; HTTP_CONNECTION_CLOSE_REASONS.len()],
}

impl Metrics {
    /// An HTTP connection was admitted (`true`) or has ended (`false`).
    pub fn http_connection_open(&self, opened: bool) {
        let open = &self.http_connections.open;
        if opened {
            open.fetch_add(1, Ordering::Relaxed);
        } else {
            open.fetch_sub(1, Ordering::Relaxed);
        }
    }

    /// The HTTP API closed (or refused) a connection for `reason`, one of
    /// [`HTTP_CONNECTION_CLOSE_REASONS`] (others are not counted).
    pub fn http_connection_closed(&self, reason: &str) {
        if let Some(i) = HTTP_CONNECTION_CLOSE_REASONS
            .iter()
            .position(|r| *r == reason)
        {
            self.http_connections.closed[i].fetch_add(1, Ordering::Relaxed);
        }
    }

    /// HTTP connections closed (or refused) for `reason` so far.
    pub fn http_connections_closed(&self, reason: &str) -> u64 {
        HTTP_CONNECTION_CLOSE_REASONS
            .iter()
            .position(|r| *r == reason)
            .map_or(0, |i| {
                self.http_connections.closed[i].load(Ordering::Relaxed)
            })
    }
}

fn render_http_connections(out: &mut Text, m: &HttpConnectionMetrics) {
    out.family(
        "sluice_http_connections",
        "gauge",
        "HTTP connections open now.",
    );
    out.sample(
        "sluice_http_connections",
        &[],
        m.open.load(Ordering::Relaxed),
    );
    out.family(
        "sluice_http_connections_closed_total",
        "counter",
        "HTTP connections the server closed or refused on its own, by reason (header_timeout, body_timeout, idle, write_stalled, refused).",
    );
    for (reason, count) in HTTP_CONNECTION_CLOSE_REASONS.iter().zip(&m.closed) {
        out.sample(
            "sluice_http_connections_closed_total",
            &[("reason", reason)],
            count.load(Ordering::Relaxed),
        );
    }
}

#[cfg(test)]
mod http_connection_tests {
    use super::*;

    #[test]
    fn http_connection_counts() {
        let m = Metrics::default();
        m.http_connection_open(true);
        m.http_connection_open(true);
        m.http_connection_open(false);
        m.http_connection_closed("refused");
        m.http_connection_closed("refused");
        m.http_connection_closed("no such reason");
        assert_eq!(m.http_connections.open.load(Ordering::Relaxed), 1);
        assert_eq!(m.http_connections_closed("refused"), 2);
        assert_eq!(m.http_connections_closed("idle"), 0);
        let mut out = Text::default();
        render_http_connections(&mut out, &m.http_connections);
        assert!(out.0.contains("sluice_http_connections 1\n"), "{}", out.0);
        assert!(
            out.0
                .contains("sluice_http_connections_closed_total{reason=\"refused\"} 2\n"),
            "{}",
            out.0
        );
    }
}

#[cfg(test)]
mod tests {
    use std::collections::{BTreeMap, HashMap};

    use super::*;
    use crate::BrokerConfig;
    use sluice_groups::CommittedOffset;

    /// One parsed sample line: metric name, labels, value.
    type Sample = (String, BTreeMap<String, String>, f64);

    /// Parses Prometheus text: checks that every sample belongs to a family whose `# TYPE`
    /// came before it, and returns the families' types and the samples.
    fn parse(text: &str) -> (HashMap<String, String>, Vec<Sample>) {
        let mut types: HashMap<String, String> = HashMap::new();
        let mut samples = Vec::new();
        for line in text.lines() {
            if let Some(rest) = line.strip_prefix("# TYPE ") {
                let (name, kind) = rest.split_once(' ').expect("TYPE name kind");
                assert!(
                    ["counter", "gauge", "histogram"].contains(&kind),
                    "type of {name}: {kind}"
                );
                assert!(
                    types.insert(name.to_owned(), kind.to_owned()).is_none(),
                    "{name} declared twice"
                );
                continue;
            }
            if line.starts_with("# HELP ") {
                continue;
            }
            assert!(
                !line.starts_with('#') && !line.is_empty(),
                "stray line {line:?}"
            );
            let (name, labels, value) = parse_sample(line);
            let family = ["_bucket", "_sum", "_count"]
                .iter()
                .find_map(|suffix| {
                    name.strip_suffix(suffix)
                        .filter(|base| types.get(*base).is_some_and(|k| k == "histogram"))
                })
                .unwrap_or(&name);
            assert!(
                types.contains_key(family),
                "sample {line:?} has no # TYPE before it"
            );
            samples.push((name, labels, value));
        }
        (types, samples)
    }

    fn parse_sample(line: &str) -> Sample {
        let name_end = line.find(['{', ' ']).expect("sample name");
        let name = line[..name_end].to_owned();
        let mut labels = BTreeMap::new();
        let mut chars = line[name_end..].chars().peekable();
        if chars.peek() == Some(&'{') {
            chars.next();
            loop {
                let label: String = chars.by_ref().take_while(|&c| c != '=').collect();
                assert_eq!(chars.next(), Some('"'), "quoted value in {line:?}");
                let mut value = String::new();
                loop {
                    match chars.next().expect("unterminated label value") {
                        '\\' => match chars.next() {
                            Some('\\') => value.push('\\'),
                            Some('"') => value.push('"'),
                            Some('n') => value.push('\n'),
                            other => panic!("bad escape {other:?} in {line:?}"),
                        },
                        '"' => break,
                        c => value.push(c),
                    }
                }
                labels.insert(label, value);
                match chars.next() {
                    Some(',') => {}
                    Some('}') => break,
                    other => panic!("unexpected {other:?} after a label in {line:?}"),
                }
            }
        }
        let rest: String = chars.collect();
        let value = match rest.trim() {
            "+Inf" => f64::INFINITY,
            v => v.parse().unwrap_or_else(|_| panic!("value of {line:?}")),
        };
        (name, labels, value)
    }

    fn broker() -> (tempfile::TempDir, Broker) {
        let dir = tempfile::tempdir().unwrap();
        let broker = Broker::open(BrokerConfig::new(dir.path())).unwrap();
        (dir, broker)
    }

    #[test]
    fn label_values_are_escaped() {
        let mut out = String::new();
        escape_label_value(&mut out, "a\\b\"c\nd");
        assert_eq!(out, r#"a\\b\"c\nd"#);
        let (_, labels, value) = parse_sample(&format!("m{{route=\"{out}\",le=\"0.5\"}} 3"));
        assert_eq!(labels["route"], "a\\b\"c\nd");
        assert_eq!(labels["le"], "0.5");
        assert_eq!(value, 3.0);
    }

    #[test]
    fn histogram_observations_land_in_their_bucket() {
        let h = Histogram::default();
        h.observe(Duration::from_micros(100));
        h.observe(Duration::from_micros(101));
        h.observe(Duration::from_secs(60));
        let (buckets, sum) = h.snapshot();
        assert_eq!(buckets[0], 1);
        assert_eq!(buckets[1], 1);
        assert_eq!(buckets[LATENCY_BUCKETS - 1], 1);
        assert_eq!(sum, 100 + 101 + 60_000_000);
    }

    #[test]
    fn methods_outside_the_standard_set_are_folded() {
        let m = Metrics::default();
        m.http_request("BREW", "/x", 405, Duration::ZERO, 0, 0);
        m.http_request("GET", "/x", 200, Duration::ZERO, 0, 0);
        let series = m.http.lock().unwrap();
        let methods: Vec<&str> = series.iter().map(|s| s.method).collect();
        assert_eq!(methods, ["other", "GET"]);
    }

    #[test]
    fn http_series_are_bounded() {
        let m = Metrics::default();
        for i in 0..HTTP_SERIES_MAX * 2 {
            m.http_request("GET", &format!("/r{i}"), 200, Duration::ZERO, 0, 0);
        }
        let series = m.http.lock().unwrap();
        assert_eq!(series.len(), HTTP_SERIES_MAX);
        let other = series.iter().find(|s| s.route == "other").unwrap();
        assert_eq!(other.statuses, [(200, HTTP_SERIES_MAX as u64 + 1)]);
    }

    #[tokio::test]
    async fn kafka_produce_and_fetch_count_records() {
        use bytes::Bytes;
        use sluice_protocol::codec::Request;
        use sluice_protocol::kafka_protocol::messages::{
            FetchRequest, ProduceRequest, RequestKind, ResponseKind, TopicName, fetch_request,
            produce_request,
        };
        use sluice_protocol::kafka_protocol::protocol::StrBytes;

        let (_dir, broker) = broker();
        let broker = std::sync::Arc::new(broker);
        broker.create_topic("t", 1, Default::default()).unwrap();
        let name = || TopicName(StrBytes::from_static_str("t"));
        let record = |value: &'static [u8]| sluice_log::batch::build::Record {
            timestamp_delta: 0,
            key: None,
            value: Some(value),
        };
        let mut records = sluice_log::batch::build::batch(0, &[record(b"a"), record(b"b")]);
        records.extend(sluice_log::batch::build::batch(0, &[record(b"c")]));
        let request = |api_key, api_version, body| Request {
            api_key,
            api_version,
            correlation_id: 1,
            client_id: None,
            body,
        };
        let produce = ProduceRequest::default()
            .with_acks(-1)
            .with_timeout_ms(5000)
            .with_topic_data(vec![
                produce_request::TopicProduceData::default()
                    .with_name(name())
                    .with_partition_data(vec![
                        produce_request::PartitionProduceData::default()
                            .with_index(0)
                            .with_records(Some(Bytes::from(records))),
                    ]),
            ]);
        let response = broker
            .handle(request(ApiKey::Produce, 9, RequestKind::Produce(produce)))
            .await;
        assert!(matches!(response, Some(ResponseKind::Produce(_))));
        assert_eq!(broker.metrics().records_in.load(Ordering::Relaxed), 3);

        let fetch = |offset| {
            FetchRequest::default()
                .with_max_wait_ms(0)
                .with_max_bytes(1 << 20)
                .with_topics(vec![
                    fetch_request::FetchTopic::default()
                        .with_topic(name())
                        .with_partitions(vec![
                            fetch_request::FetchPartition::default()
                                .with_partition(0)
                                .with_fetch_offset(offset)
                                .with_partition_max_bytes(1 << 20),
                        ]),
                ])
        };
        for offset in [0, 3] {
            broker
                .handle(request(
                    ApiKey::Fetch,
                    12,
                    RequestKind::Fetch(fetch(offset)),
                ))
                .await;
        }
        // Both batches once; the fetch at the high watermark served nothing.
        assert_eq!(broker.metrics().records_out.load(Ordering::Relaxed), 3);
        broker.shutdown();
    }

    #[tokio::test]
    async fn render_declares_every_metric_and_parses() {
        let (_dir, broker) = broker();
        broker
            .create_topic("orders", 2, Default::default())
            .unwrap();
        let topic = broker.topics().get("orders").unwrap();
        let batch = sluice_log::batch::build::batch(
            1_700_000_000_000,
            &[
                sluice_log::batch::build::Record {
                    timestamp_delta: 0,
                    key: None,
                    value: Some(b"a"),
                },
                sluice_log::batch::build::Record {
                    timestamp_delta: 0,
                    key: None,
                    value: Some(b"b"),
                },
            ],
        );
        let appended = broker.append(&topic, 1, &batch).unwrap();
        appended.durable().await.unwrap();
        broker
            .groups()
            .commit_offsets(
                "billing",
                "",
                None,
                -1,
                vec![(
                    "orders".to_owned(),
                    1,
                    CommittedOffset {
                        offset: 0,
                        leader_epoch: -1,
                        metadata: None,
                        commit_timestamp_ms: 0,
                    },
                )],
            )
            .await
            .unwrap();
        let m = broker.metrics();
        m.kafka_request(ApiKey::Produce as i16, Duration::from_millis(3), 100, 50);
        m.kafka_request(ApiKey::Produce as i16, Duration::from_micros(50), 100, 50);
        m.kafka_request(ApiKey::Metadata as i16, Duration::from_secs(30), 10, 20);
        m.kafka_request(-1, Duration::ZERO, 0, 0);
        m.http_request(
            "GET",
            "/odd\"route\\with\nbreak",
            200,
            Duration::from_millis(1),
            5,
            7,
        );
        m.http_request(
            "POST",
            "/topics/{topic}/records",
            413,
            Duration::ZERO,
            0,
            30,
        );
        m.records_in(2);
        m.records_out(1);

        let text = render(&broker);
        let (types, samples) = parse(&text);
        for (name, kind) in [
            ("sluice_kafka_requests_total", "counter"),
            ("sluice_kafka_request_duration_seconds", "histogram"),
            ("sluice_http_requests_total", "counter"),
            ("sluice_http_request_duration_seconds", "histogram"),
            ("sluice_bytes_in_total", "counter"),
            ("sluice_bytes_out_total", "counter"),
            ("sluice_records_in_total", "counter"),
            ("sluice_records_out_total", "counter"),
            ("sluice_fsync_duration_seconds", "histogram"),
            ("sluice_fsyncs_total", "counter"),
            ("sluice_fsync_bytes_total", "counter"),
            ("sluice_topics", "gauge"),
            ("sluice_partitions", "gauge"),
            ("sluice_partition_high_watermark", "gauge"),
            ("sluice_partition_log_start_offset", "gauge"),
            ("sluice_partition_size_bytes", "gauge"),
            ("sluice_consumer_group_lag", "gauge"),
            ("sluice_consumer_groups", "gauge"),
        ] {
            assert_eq!(types.get(name).map(String::as_str), Some(kind), "{name}");
            assert!(text.contains(&format!("# HELP {name} ")), "HELP of {name}");
        }
        let find = |name: &str, want: &[(&str, &str)]| -> f64 {
            samples
                .iter()
                .find(|(n, labels, _)| {
                    n == name
                        && want
                            .iter()
                            .all(|(k, v)| labels.get(*k).map(String::as_str) == Some(*v))
                })
                .unwrap_or_else(|| panic!("no {name} {want:?} in\n{text}"))
                .2
        };
        assert_eq!(
            find("sluice_kafka_requests_total", &[("api", "Produce")]),
            2.0
        );
        assert_eq!(
            find("sluice_kafka_requests_total", &[("api", "Metadata")]),
            1.0
        );
        assert_eq!(
            find("sluice_kafka_requests_total", &[("api", "unknown")]),
            1.0
        );
        assert_eq!(
            find(
                "sluice_kafka_request_duration_seconds_bucket",
                &[("api", "Produce"), ("le", "0.0001")]
            ),
            1.0
        );
        assert_eq!(
            find(
                "sluice_kafka_request_duration_seconds_bucket",
                &[("api", "Metadata"), ("le", "10")]
            ),
            0.0
        );
        assert_eq!(
            find(
                "sluice_http_requests_total",
                &[("route", "/odd\"route\\with\nbreak"), ("status", "200")]
            ),
            1.0
        );
        assert_eq!(
            find(
                "sluice_http_requests_total",
                &[("method", "POST"), ("status", "413")]
            ),
            1.0
        );
        assert_eq!(
            find("sluice_bytes_in_total", &[("listener", "kafka")]),
            210.0
        );
        assert_eq!(
            find("sluice_bytes_out_total", &[("listener", "http")]),
            37.0
        );
        assert_eq!(find("sluice_records_in_total", &[]), 2.0);
        assert_eq!(find("sluice_topics", &[]), 1.0);
        assert_eq!(find("sluice_partitions", &[]), 2.0);
        assert_eq!(
            find(
                "sluice_partition_high_watermark",
                &[("topic", "orders"), ("partition", "1")]
            ),
            2.0
        );
        assert!(
            find(
                "sluice_partition_size_bytes",
                &[("topic", "orders"), ("partition", "1")]
            ) > 0.0
        );
        assert_eq!(find("sluice_consumer_groups", &[]), 1.0);
        assert_eq!(
            find(
                "sluice_consumer_group_lag",
                &[
                    ("group", "billing"),
                    ("topic", "orders"),
                    ("partition", "1")
                ]
            ),
            2.0
        );
        assert!(find("sluice_fsyncs_total", &[]) >= 1.0);

        // Every histogram series: buckets cumulative, ending in +Inf == _count.
        // (histogram name, labels without `le`) → [(le, cumulative count)]
        type Series = BTreeMap<(String, BTreeMap<String, String>), Vec<(f64, f64)>>;
        let mut series = Series::new();
        for (name, labels, value) in &samples {
            let Some(base) = name.strip_suffix("_bucket") else {
                continue;
            };
            let mut key = labels.clone();
            let le = key.remove("le").expect("le on a bucket");
            let le = if le == "+Inf" {
                f64::INFINITY
            } else {
                le.parse().unwrap()
            };
            series
                .entry((base.to_owned(), key))
                .or_default()
                .push((le, *value));
        }
        assert!(series.len() >= 5, "{series:?}");
        for ((base, labels), buckets) in &series {
            for pair in buckets.windows(2) {
                assert!(pair[0].0 < pair[1].0, "{base} bounds increase");
                assert!(pair[0].1 <= pair[1].1, "{base} {labels:?} cumulative");
            }
            let last = buckets.last().unwrap();
            assert_eq!(last.0, f64::INFINITY, "{base} ends with +Inf");
            let count = samples
                .iter()
                .find(|(n, l, _)| *n == format!("{base}_count") && l == labels)
                .unwrap()
                .2;
            assert_eq!(last.1, count, "{base} {labels:?}: +Inf bucket == _count");
        }
        broker.shutdown();
    }

    #[test]
    fn data_dir_series_follow_the_full_state() {
        let (dir, broker) = broker();
        let (_, samples) = parse(&render(&broker));
        let value = |samples: &[Sample], name: &str| {
            samples
                .iter()
                .find(|(n, _, _)| n == name)
                .unwrap_or_else(|| panic!("no {name}"))
                .2
        };
        assert_eq!(value(&samples, "sluice_data_dir_full"), 0.0);
        assert!(value(&samples, "sluice_data_dir_free_bytes") > 0.0);
        assert_eq!(
            value(&samples, "sluice_data_dir_no_space_errors_total"),
            0.0
        );
        let enospc = std::io::Error::from(std::io::ErrorKind::StorageFull);
        broker
            .data_dir_space()
            .no_space("write segment", dir.path(), &enospc);
        let (_, samples) = parse(&render(&broker));
        assert_eq!(
            value(&samples, "sluice_data_dir_no_space_errors_total"),
            1.0
        );
        // The real disk has room, so the render's own check may already have cleared it; a
        // write surely does.
        broker.data_dir_space().wrote();
        let (_, samples) = parse(&render(&broker));
        assert_eq!(value(&samples, "sluice_data_dir_full"), 0.0);
        broker.shutdown();
    }
}
