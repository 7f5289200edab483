//! The broker's metrics: request counts and latencies of the Kafka listener, bytes and
//! records in and out, and (read at render time) fsync, topic, partition and consumer-lag
//! figures, as Prometheus text (exposition format 0.0.4), served by the HTTP API's `/metrics`.
//!
//! Where it sits: the Kafka listener calls [`Metrics::kafka_request`] once per answered request,
//! and the produce and fetch paths of both listeners count records. [`render`] reads those
//! counters plus the current state of the broker (the group committer's fsync histogram, every
//! partition's offsets and size, every group's committed offsets), and puts in the series of
//! the listeners that keep their own ([`ListenerSeries`]: the HTTP API's live in
//! `sluice-http`'s `metrics.rs`). Every latency histogram uses the one bucket layout of
//! [`sluice_log::LATENCY_BUCKET_BOUNDS_MICROS`] and its lock-free [`LatencyHistogram`].
//!
//! ## Why a hand-written renderer, not `prometheus-client`
//!
//! Weighed against `prometheus-client` (a per-instance `Registry`, typed counters, gauges,
//! histograms and labelled `Family`s), the small renderer here ([`Text`]) wins on each point
//! that matters to Sluice:
//! - **Hot-path cost.** A Kafka request costs two relaxed atomic adds on a slot indexed by its
//!   API key: no lock, no hashing, no allocation. A labelled `Family` hashes the label set and
//!   takes a read lock (a write lock and an allocation for a new series) on every observation.
//! - **Series computed at scrape time.** Most series (partition offsets and sizes, consumer
//!   lag, data-directory space, the memory budget, fsyncs) are read from broker state when
//!   scraped, not recorded. With `prometheus-client` each would need a custom collector
//!   writing through its encoder: the same code as here, behind a larger API.
//! - **Exact output.** Its text encoder writes OpenMetrics: `# EOF`, counters declared without
//!   their `_total` suffix (`# TYPE sluice_fsyncs counter`), a `.` appended to every HELP
//!   text. Dashboards, alerts and tests read today's names, HELP and TYPE lines; those must
//!   not change.
//! - **Per-instance state** is what this already has: the numbers live in a [`Metrics`] owned
//!   by one [`Broker`] (and the HTTP series in one `AppState`), so tests that run several
//!   brokers in one process each see their own. (That is also why not the `metrics` facade:
//!   it installs one recorder per process.)
//! - **Dependency weight**: none added; the renderer is about 100 lines, with escaping tested.
//!
//! Cost on the hot paths: see above for Kafka; the HTTP API's series are described in
//! `sluice-http`'s `metrics.rs` (a short mutex over a bounded list of (method, route) series).

use std::fmt::Write as _;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

pub use sluice_log::{LATENCY_BUCKET_BOUNDS_MICROS, LatencyHistogram, LatencySnapshot};
use sluice_protocol::kafka_protocol::messages::ApiKey;

use crate::Broker;

/// Kafka API keys that get their own slot (keys run 0..=92 today; the decoder only lets through
/// the ones Sluice supports). A key outside the range is counted in the last slot, `unknown`.
const KAFKA_API_SLOTS: usize = 128;

/// The listener label of the Kafka listener's `sluice_bytes_in_total` / `sluice_bytes_out_total`.
const LISTENER_KAFKA: &str = "kafka";

/// Counters and latency histograms of the Kafka listener, and records in and out of both
/// listeners.
#[derive(Debug)]
pub struct Metrics {
    /// Indexed by API key; the request count is the histogram's count.
    kafka: Box<[LatencyHistogram]>,
    kafka_bytes_in: AtomicU64,
    kafka_bytes_out: AtomicU64,
    records_in: AtomicU64,
    records_out: AtomicU64,
    /// Produce requests dropped because they waited past their timeout before they started.
    produce_expired: AtomicU64,
    listener: ListenerMetrics,
    cleaner: CleanerMetrics,
}

/// The log cleaner's totals (compacted topics).
#[derive(Debug, Default)]
struct CleanerMetrics {
    passes: AtomicU64,
    failures: AtomicU64,
    bytes_read: AtomicU64,
    bytes_written: AtomicU64,
    /// Segment bytes of the groups a pass swapped, before cleaning: the log processed.
    bytes_cleaned: AtomicU64,
    records_removed: AtomicU64,
    /// Microseconds spent in passes, I/O throttling included.
    busy_micros: AtomicU64,
}

/// Why the Kafka listener closed a connection on its own, as the `reason` label.
pub const CONNECTION_CLOSE_REASONS: [&str; 9] = [
    "idle",
    "request_timeout",
    "write_stalled",
    "bad_frame",
    "malformed",
    "refused",
    // A request other than ApiVersions or SASL before SASL authentication.
    "unauthenticated",
    // A failed SASL authentication (after its answer).
    "authentication_failed",
    // A TLS handshake that failed or did not finish in time, or a client certificate that
    // names no user.
    "tls_handshake",
];

/// The Kafka listener's connection counts.
#[derive(Debug, Default)]
struct ListenerMetrics {
    open: AtomicU64,
    /// Indexed like [`CONNECTION_CLOSE_REASONS`].
    closed: [AtomicU64; CONNECTION_CLOSE_REASONS.len()],
    /// SASL authentications that succeeded and failed, all listeners together.
    sasl_successes: AtomicU64,
    sasl_failures: AtomicU64,
}

impl Default for Metrics {
    fn default() -> Self {
        Metrics {
            kafka: (0..KAFKA_API_SLOTS)
                .map(|_| LatencyHistogram::default())
                .collect(),
            kafka_bytes_in: AtomicU64::new(0),
            kafka_bytes_out: AtomicU64::new(0),
            records_in: AtomicU64::new(0),
            records_out: AtomicU64::new(0),
            produce_expired: AtomicU64::new(0),
            listener: ListenerMetrics::default(),
            cleaner: CleanerMetrics::default(),
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

    /// A log cleaner pass ended well (one that found nothing due counts nothing).
    pub fn cleaned(&self, outcome: &sluice_log::CleanOutcome) {
        if outcome.reason.is_none() {
            return;
        }
        let c = &self.cleaner;
        c.passes.fetch_add(1, Ordering::Relaxed);
        c.bytes_read
            .fetch_add(outcome.bytes_read, Ordering::Relaxed);
        c.bytes_written
            .fetch_add(outcome.bytes_written, Ordering::Relaxed);
        c.bytes_cleaned
            .fetch_add(outcome.bytes_before, Ordering::Relaxed);
        c.records_removed
            .fetch_add(outcome.records_removed, Ordering::Relaxed);
        c.busy_micros.fetch_add(
            u64::try_from(outcome.elapsed.as_micros()).unwrap_or(u64::MAX),
            Ordering::Relaxed,
        );
    }

    /// A log cleaner pass failed (logged with its error).
    pub fn cleaner_failed(&self) {
        self.cleaner.failures.fetch_add(1, Ordering::Relaxed);
    }

    /// One Produce dropped unstarted: it waited past its `timeout_ms` in the broker.
    pub fn produce_expired(&self) {
        self.produce_expired.fetch_add(1, Ordering::Relaxed);
    }

    /// A SASL authentication on a Kafka connection ended: `true` succeeded, `false` failed.
    pub fn sasl_authentication(&self, succeeded: bool) {
        let counter = if succeeded {
            &self.listener.sasl_successes
        } else {
            &self.listener.sasl_failures
        };
        counter.fetch_add(1, Ordering::Relaxed);
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
        self.kafka.iter().map(|h| h.snapshot().count()).sum()
    }
}

/// The series of a listener that keeps its own (the HTTP API), for [`render`] to put in their
/// place among the broker's.
pub trait ListenerSeries {
    /// The `listener` label of its `sluice_bytes_in_total` / `sluice_bytes_out_total` samples.
    fn listener(&self) -> &'static str;
    /// Its own families (requests, latencies, connections), written after the memory budget's.
    fn render(&self, out: &mut Text);
    /// `(bytes received, bytes sent)` so far.
    fn bytes(&self) -> (u64, u64);
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

/// The Prometheus text exposition (format 0.0.4) of `broker`'s metrics and current state, with
/// the series of `listeners` (the HTTP API's) in their place.
///
/// Takes the locks of the topic registry, each partition and the group coordinator briefly,
/// one at a time; meant to run off the async runtime (`spawn_blocking`).
pub fn render(broker: &Broker, listeners: &[&dyn ListenerSeries]) -> String {
    let mut out = Text::default();
    let m = broker.metrics();

    // Kafka listener.
    out.family(
        "sluice_kafka_requests_total",
        "counter",
        "Kafka requests answered, by API.",
    );
    let kafka: Vec<(String, LatencySnapshot)> = m
        .kafka
        .iter()
        .enumerate()
        .filter_map(|(slot, h)| {
            let snapshot = h.snapshot();
            (snapshot.count() > 0).then(|| (api_name(slot), snapshot))
        })
        .collect();
    for (api, snapshot) in &kafka {
        out.sample(
            "sluice_kafka_requests_total",
            &[("api", api)],
            snapshot.count(),
        );
    }
    out.family(
        "sluice_kafka_request_duration_seconds",
        "histogram",
        "Time from decoding a Kafka request to having its response encoded, by API.",
    );
    for (api, snapshot) in &kafka {
        out.histogram(
            "sluice_kafka_request_duration_seconds",
            &[("api", api)],
            snapshot,
        );
    }
    out.single(
        "sluice_kafka_connections",
        "gauge",
        "Kafka client connections open now.",
        m.listener.open.load(Ordering::Relaxed),
    );
    let c = &m.cleaner;
    for (name, help, value) in [
        (
            "sluice_log_cleaner_passes_total",
            "Compaction passes of compacted topics' partitions that ended well.",
            c.passes.load(Ordering::Relaxed),
        ),
        (
            "sluice_log_cleaner_failures_total",
            "Compaction passes that failed (logged with their error).",
            c.failures.load(Ordering::Relaxed),
        ),
        (
            "sluice_log_cleaner_read_bytes_total",
            "Segment bytes the log cleaner read.",
            c.bytes_read.load(Ordering::Relaxed),
        ),
        (
            "sluice_log_cleaner_written_bytes_total",
            "Cleaned segment bytes the log cleaner wrote.",
            c.bytes_written.load(Ordering::Relaxed),
        ),
        (
            "sluice_log_cleaner_cleaned_bytes_total",
            "Log bytes the log cleaner cleaned: the segments it replaced, as they were before.",
            c.bytes_cleaned.load(Ordering::Relaxed),
        ),
        (
            "sluice_log_cleaner_records_removed_total",
            "Records the log cleaner removed (superseded by a later record of their key, or expired tombstones).",
            c.records_removed.load(Ordering::Relaxed),
        ),
    ] {
        out.single(name, "counter", help, value);
    }
    out.single(
        "sluice_log_cleaner_busy_seconds_total",
        "counter",
        "Time spent in compaction passes, I/O throttling included.",
        c.busy_micros.load(Ordering::Relaxed) as f64 / 1e6,
    );
    out.family(
        "sluice_kafka_connections_closed_total",
        "counter",
        "Kafka connections the broker closed or refused on its own, by reason (idle, request_timeout, write_stalled, bad_frame, malformed, refused, unauthenticated, authentication_failed, tls_handshake).",
    );
    for (reason, count) in CONNECTION_CLOSE_REASONS.iter().zip(&m.listener.closed) {
        out.sample(
            "sluice_kafka_connections_closed_total",
            &[("reason", reason)],
            count.load(Ordering::Relaxed),
        );
    }
    out.single(
        "sluice_sasl_authentication_successes_total",
        "counter",
        "SASL authentications on the Kafka listeners that succeeded.",
        m.listener.sasl_successes.load(Ordering::Relaxed),
    );
    out.single(
        "sluice_sasl_authentication_failures_total",
        "counter",
        "SASL authentications on the Kafka listeners that failed (bad credentials, malformed exchanges).",
        m.listener.sasl_failures.load(Ordering::Relaxed),
    );
    out.single(
        "sluice_kafka_produce_expired_total",
        "counter",
        "Produce requests answered REQUEST_TIMED_OUT without being appended: they waited in the broker (for memory, for a quota throttle, behind the connection's other requests) longer than their timeout_ms, so their client had given up on them.",
        m.produce_expired.load(Ordering::Relaxed),
    );
    render_quotas(&mut out, broker);

    // Memory budget.
    let memory = broker.memory();
    out.single(
        "sluice_memory_limit_bytes",
        "gauge",
        "The memory budget for data held for clients (memory_limit).",
        memory.limit(),
    );
    out.single("sluice_memory_used_bytes", "gauge", "Bytes of the memory budget reserved now: request frames, fetch responses, HTTP bodies and reads.", memory.used());
    out.single(
        "sluice_memory_short_total",
        "counter",
        "Times a reservation waited or was cut short because the memory budget was short.",
        memory.short_count(),
    );
    out.single(
        "sluice_memory_forced_over_bytes_total",
        "counter",
        "Bytes reserved past the memory budget to serve a batch larger than the room left, in all.",
        memory.forced_over_bytes(),
    );

    // Listeners that keep their own series (the HTTP API).
    for listener in listeners {
        listener.render(&mut out);
    }

    // Bytes and records.
    let listener_bytes: Vec<(&str, (u64, u64))> = listeners
        .iter()
        .map(|l| (l.listener(), l.bytes()))
        .collect();
    out.family(
        "sluice_bytes_in_total",
        "counter",
        "Request bytes received, by listener (Kafka: whole frames; HTTP: bodies).",
    );
    out.sample(
        "sluice_bytes_in_total",
        &[("listener", LISTENER_KAFKA)],
        m.kafka_bytes_in.load(Ordering::Relaxed),
    );
    for (listener, (bytes_in, _)) in &listener_bytes {
        out.sample("sluice_bytes_in_total", &[("listener", listener)], bytes_in);
    }
    out.family(
        "sluice_bytes_out_total",
        "counter",
        "Response bytes sent, by listener (Kafka: whole frames; HTTP: bodies).",
    );
    out.sample(
        "sluice_bytes_out_total",
        &[("listener", LISTENER_KAFKA)],
        m.kafka_bytes_out.load(Ordering::Relaxed),
    );
    for (listener, (_, bytes_out)) in &listener_bytes {
        out.sample(
            "sluice_bytes_out_total",
            &[("listener", listener)],
            bytes_out,
        );
    }
    out.single(
        "sluice_records_in_total",
        "counter",
        "Records appended, through either listener.",
        m.records_in.load(Ordering::Relaxed),
    );
    out.single(
        "sluice_records_out_total",
        "counter",
        "Records served to consumers, through either listener.",
        m.records_out.load(Ordering::Relaxed),
    );

    // Durability.
    let commit = broker.committer().stats();
    let fsync = broker.committer().fdatasync_histogram();
    out.single(
        "sluice_fsyncs_total",
        "counter",
        "fdatasyncs by the group committer: segment files (rounds and seals) and the group store.",
        commit.fdatasyncs,
    );
    out.single(
        "sluice_fsync_bytes_total",
        "counter",
        "Bytes made durable by those fdatasyncs.",
        commit.bytes_synced,
    );
    out.family(
        "sluice_fsync_duration_seconds",
        "histogram",
        "Duration of each group-commit fdatasync.",
    );
    out.histogram("sluice_fsync_duration_seconds", &[], &fsync);

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
        failed: bool,
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
                    failed: log.failed(),
                })
                .collect();
            (t.name.as_str(), rows)
        })
        .collect();
    out.single("sluice_topics", "gauge", "Topics.", rows.len() as u64);
    out.single(
        "sluice_partitions",
        "gauge",
        "Partitions, over all topics.",
        rows.iter().map(|(_, p)| p.len() as u64).sum::<u64>(),
    );
    out.single(
        "sluice_partitions_failed",
        "gauge",
        "Partitions that refuse appends until the broker restarts: an fdatasync failed, so data written before it may be gone and is never acknowledged (the log names each one). Durable data stays readable.",
        rows.iter()
            .flat_map(|(_, p)| p)
            .filter(|row| row.failed)
            .count(),
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
    out.single(
        "sluice_consumer_groups",
        "gauge",
        "Consumer groups.",
        groups.len() as u64,
    );
    out.family(
        "sluice_consumer_group_lag",
        "gauge",
        "Records between a group's committed offset and the partition's high watermark.",
    );
    for group in &groups {
        let Ok(committed) = broker.groups().committed(&group.group_id, None, None) else {
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
    out.into_string()
}

/// `sluice_data_dir_full`, `sluice_data_dir_free_bytes`, `sluice_data_dir_no_space_errors_total`.
/// The client quotas set (one sample per entity and key) and how often they throttled.
fn render_quotas(out: &mut Text, broker: &Broker) {
    let quotas = broker.quotas();
    out.family(
        "sluice_client_quota",
        "gauge",
        "Client quotas set (kafka-configs --entity-type users|clients), by entity and key: bytes per second for producer_byte_rate and consumer_byte_rate, percent of one thread for request_percentage.",
    );
    for (entity, values) in quotas.entries() {
        let label = entity.label();
        for (kind, value) in values {
            out.sample(
                "sluice_client_quota",
                &[("entity", &label), ("key", kind.key())],
                value,
            );
        }
    }
    let stats = quotas.throttle_stats();
    out.family(
        "sluice_client_quota_throttled_total",
        "counter",
        "Kafka requests that went over a client quota and throttled their client, by quota key.",
    );
    for (kind, count, _) in &stats {
        out.sample(
            "sluice_client_quota_throttled_total",
            &[("key", kind.key())],
            count,
        );
    }
    out.family(
        "sluice_client_quota_throttle_seconds_total",
        "counter",
        "Time clients were throttled for going over a client quota (the throttle_time_ms answered, summed), by quota key.",
    );
    for (kind, _, time) in &stats {
        out.sample(
            "sluice_client_quota_throttle_seconds_total",
            &[("key", kind.key())],
            time.as_secs_f64(),
        );
    }
}

fn render_data_dir_space(out: &mut Text, broker: &Broker) {
    let space = broker.data_dir_space();
    // A full directory's state may be stale if nothing has written since space came back:
    // check now (one statvfs, only while full).
    space.recheck();
    let status = space.status();
    out.single("sluice_data_dir_full", "gauge", "1 while the data directory is full: a write found no room and no write has succeeded since (appends fail with a storage error; reads work).", u8::from(status.full));
    out.family(
        "sluice_data_dir_free_bytes",
        "gauge",
        "Bytes available in the data directory's filesystem (statvfs f_bavail).",
    );
    if let Some(free) = status.free_bytes {
        out.sample("sluice_data_dir_free_bytes", &[], free);
    }
    out.single(
        "sluice_data_dir_no_space_errors_total",
        "counter",
        "Writes into the data directory refused for want of space (ENOSPC, EDQUOT).",
        status.no_space_errors,
    );
}

/// Prometheus text (exposition format 0.0.4) being written: the one renderer of `/metrics`,
/// used by [`render`] and by the listeners' [`ListenerSeries::render`].
#[derive(Debug, Default)]
pub struct Text(String);

impl Text {
    /// The `# HELP` and `# TYPE` lines of a metric family.
    pub fn family(&mut self, name: &str, kind: &str, help: &str) {
        let _ = writeln!(self.0, "# HELP {name} {}", escape_help(help));
        let _ = writeln!(self.0, "# TYPE {name} {kind}");
    }

    /// One sample line; label values are escaped.
    pub fn sample(&mut self, name: &str, labels: &[(&str, &str)], value: impl std::fmt::Display) {
        self.0.push_str(name);
        self.labels(labels, None);
        let _ = writeln!(self.0, " {value}");
    }

    /// A family with one sample and no labels.
    pub fn single(&mut self, name: &str, kind: &str, help: &str, value: impl std::fmt::Display) {
        self.family(name, kind, help);
        self.sample(name, &[], value);
    }

    /// The `_bucket` (cumulative, `le` in seconds), `_sum` and `_count` lines of one latency
    /// histogram series.
    pub fn histogram(&mut self, name: &str, labels: &[(&str, &str)], h: &LatencySnapshot) {
        let bucket = format!("{name}_bucket");
        let mut cumulative = 0u64;
        for (i, count) in h.counts.iter().enumerate() {
            cumulative += count;
            let le = match LATENCY_BUCKET_BOUNDS_MICROS.get(i) {
                Some(&micros) => seconds(micros).to_string(),
                None => "+Inf".to_owned(),
            };
            self.0.push_str(&bucket);
            self.labels(labels, Some(&le));
            let _ = writeln!(self.0, " {cumulative}");
        }
        self.sample(&format!("{name}_sum"), labels, seconds(h.sum_micros));
        self.sample(&format!("{name}_count"), labels, cumulative);
    }

    /// The text written so far.
    pub fn into_string(self) -> String {
        self.0
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

    /// A listener with its own series, as the HTTP API is.
    struct FakeListener;

    impl ListenerSeries for FakeListener {
        fn listener(&self) -> &'static str {
            "http"
        }
        fn render(&self, out: &mut Text) {
            out.family("sluice_fake_requests_total", "counter", "Fake requests.");
            out.sample("sluice_fake_requests_total", &[("route", "/x")], 4);
        }
        fn bytes(&self) -> (u64, u64) {
            (5, 37)
        }
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
            .commit(
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
        m.records_in(2);
        m.records_out(1);

        let text = render(&broker, &[&FakeListener]);
        let (types, samples) = parse(&text);
        for (name, kind) in [
            ("sluice_kafka_requests_total", "counter"),
            ("sluice_kafka_request_duration_seconds", "histogram"),
            ("sluice_fake_requests_total", "counter"),
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
            ("sluice_kafka_produce_expired_total", "counter"),
            ("sluice_partitions_failed", "gauge"),
            ("sluice_client_quota", "gauge"),
            ("sluice_client_quota_throttled_total", "counter"),
            ("sluice_client_quota_throttle_seconds_total", "counter"),
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
            find("sluice_fake_requests_total", &[("route", "/x")]),
            4.0,
            "a listener's own series are rendered"
        );
        let memory_at = text
            .find("# HELP sluice_memory_forced_over_bytes_total")
            .unwrap();
        let listener_at = text.find("# HELP sluice_fake_requests_total").unwrap();
        let bytes_at = text.find("# HELP sluice_bytes_in_total").unwrap();
        assert!(
            memory_at < listener_at && listener_at < bytes_at,
            "listener series sit between the memory budget's and the bytes (where the HTTP \
             series always were)"
        );
        assert_eq!(find("sluice_bytes_in_total", &[("listener", "http")]), 5.0);
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
        assert!(series.len() >= 4, "{series:?}");
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
        let (_, samples) = parse(&render(&broker, &[]));
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
        let (_, samples) = parse(&render(&broker, &[]));
        assert_eq!(
            value(&samples, "sluice_data_dir_no_space_errors_total"),
            1.0
        );
        // The real disk has room, so the render's own check may already have cleared it; a
        // write surely does.
        broker.data_dir_space().wrote();
        let (_, samples) = parse(&render(&broker, &[]));
        assert_eq!(value(&samples, "sluice_data_dir_full"), 0.0);
        broker.shutdown();
    }
}
