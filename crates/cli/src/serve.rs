//! `sluice serve`: settings from a TOML file, `SLUICE_*` environment variables and flags (flags
//! win, then the environment, then the file, then built-in defaults).

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, bail};
use sluice_broker::{Broker, BrokerConfig};
use sluice_http::auth::{ApiKeyConfig, Auth};
use sluice_http::{AppState, HttpConfig};
use sluice_log::FlushPolicy;
use sluice_server::ServerConfig;

use crate::bytesize::ByteSize;

/// Run the broker.
///
/// Example:
///   sluice serve --data-dir /var/lib/sluice --kafka-addr 0.0.0.0:9092 --http-addr 127.0.0.1:8080
///
/// Every setting can also come from a TOML file (--config) or an environment variable; flags win
/// over the environment, which wins over the file. A port of 0 picks a free port; the bound
/// addresses are logged as `kafka listening on HOST:PORT` and `http listening on HOST:PORT`.
///
/// HTTP API keys live in the config file only, as `[[http_api_keys]]` tables (name, sha256,
/// read, write, admin; see docs/http-api.md and `sluice api-key new`). The file is read again
/// when it changes or on SIGHUP, and new keys apply without a restart. With no keys the HTTP
/// API is open to anyone who can reach it, so it refuses a non-loopback --http-addr unless
/// --http-allow-anonymous is given.
#[derive(Debug, clap::Args)]
#[command(verbatim_doc_comment)]
pub struct ServeArgs {
    /// TOML config file (keys: data_dir, kafka_addr, http_addr, http_allow_anonymous,
    /// http_max_body_bytes, http_max_records_per_request, http_max_concurrent_requests,
    /// http_header_read_timeout_ms, http_body_read_timeout_ms, http_idle_timeout_ms,
    /// http_max_connections, http_api_keys, advertised_host, auto_create_topics,
    /// default_partitions, retention_ms, retention_bytes, segment_bytes, segment_ms,
    /// flush_interval_ms, sync_threads, max_request_bytes, memory_limit, fetch_max_bytes,
    /// request_timeout_ms, connections_max_idle_ms, max_connections, max_connections_per_ip,
    /// max_message_bytes, group_initial_rebalance_delay_ms,
    /// group_consumer_session_timeout_ms, group_consumer_heartbeat_interval_ms, groups_max)
    #[arg(long, env = "SLUICE_CONFIG")]
    config: Option<PathBuf>,
    /// Where data is stored [default: ./sluice-data]
    #[arg(long, env = "SLUICE_DATA_DIR")]
    data_dir: Option<PathBuf>,
    /// Kafka listener address [default: 127.0.0.1:9092]
    #[arg(long, env = "SLUICE_KAFKA_ADDR")]
    kafka_addr: Option<String>,
    /// HTTP API listener address; "off" disables the HTTP API [default: 127.0.0.1:8080]
    #[arg(long, env = "SLUICE_HTTP_ADDR")]
    http_addr: Option<String>,
    /// Serve the HTTP API without API keys on a non-loopback address [default: false]
    #[arg(long, env = "SLUICE_HTTP_ALLOW_ANONYMOUS")]
    http_allow_anonymous: Option<bool>,
    /// Largest HTTP request body; larger gets 413 [default: 67108864 = 64 MiB, or a quarter
    /// of --memory-limit if that is less]
    #[arg(long, env = "SLUICE_HTTP_MAX_BODY_BYTES")]
    http_max_body_bytes: Option<usize>,
    /// Most records one HTTP produce request may carry; more gets 413 [default: 100000]
    #[arg(long, env = "SLUICE_HTTP_MAX_RECORDS_PER_REQUEST")]
    http_max_records_per_request: Option<usize>,
    /// HTTP requests served at once, long polls included; more gets 429 [default: 1024]
    #[arg(long, env = "SLUICE_HTTP_MAX_CONCURRENT_REQUESTS")]
    http_max_concurrent_requests: Option<usize>,
    /// An HTTP request's whole header must arrive within this; a slower connection is closed
    /// [default: 10000]
    #[arg(long, env = "SLUICE_HTTP_HEADER_READ_TIMEOUT_MS")]
    http_header_read_timeout_ms: Option<u64>,
    /// An HTTP request's whole body must arrive within this, from its first read; slower gets
    /// 408 [default: 30000]
    #[arg(long, env = "SLUICE_HTTP_BODY_READ_TIMEOUT_MS")]
    http_body_read_timeout_ms: Option<u64>,
    /// Close a kept-alive HTTP connection with no request in flight for this long
    /// [default: 60000]
    #[arg(long, env = "SLUICE_HTTP_IDLE_TIMEOUT_MS")]
    http_idle_timeout_ms: Option<u64>,
    /// HTTP connections open at once; more are closed when accepted [default: 4096]
    #[arg(long, env = "SLUICE_HTTP_MAX_CONNECTIONS")]
    http_max_connections: Option<usize>,
    /// Host name clients are told to connect to [default: the listener's IP]
    #[arg(long, env = "SLUICE_ADVERTISED_HOST")]
    advertised_host: Option<String>,
    /// Create topics on first use by a client's Metadata request [default: true]
    #[arg(long, env = "SLUICE_AUTO_CREATE_TOPICS")]
    auto_create_topics: Option<bool>,
    /// Partitions of auto-created topics [default: 1]
    #[arg(long, env = "SLUICE_DEFAULT_PARTITIONS")]
    default_partitions: Option<i32>,
    /// Delete data older than this; -1 keeps it forever [default: 604800000 = 7 days]
    #[arg(long, env = "SLUICE_RETENTION_MS")]
    retention_ms: Option<i64>,
    /// Delete the oldest data while a partition holds more than this; -1 for no limit [default: -1]
    #[arg(long, env = "SLUICE_RETENTION_BYTES")]
    retention_bytes: Option<i64>,
    /// Segment file size [default: 1073741824 = 1 GiB]
    #[arg(long, env = "SLUICE_SEGMENT_BYTES")]
    segment_bytes: Option<u64>,
    /// Roll segments older than this [default: 604800000 = 7 days]
    #[arg(long, env = "SLUICE_SEGMENT_MS")]
    segment_ms: Option<i64>,
    /// 0 = fsync before every acknowledgement with group commit; N = fsync every N ms instead
    /// (acknowledgements wait for it) [default: 0]
    #[arg(long, env = "SLUICE_FLUSH_INTERVAL_MS")]
    flush_interval_ms: Option<u64>,
    /// Threads that run fdatasyncs for the partitions (each syncs one partition at a time)
    /// [default: 2]
    #[arg(long, env = "SLUICE_SYNC_THREADS")]
    sync_threads: Option<usize>,
    /// Largest request accepted, in bytes or with a unit (Kafka's socket.request.max.bytes)
    /// [default: 104857600 = 100 MiB, or a quarter of --memory-limit if that is less]
    #[arg(long, env = "SLUICE_MAX_REQUEST_BYTES")]
    max_request_bytes: Option<ByteSize>,
    /// What the broker may hold for clients in all: requests from their first byte, fetch
    /// responses until written, HTTP bodies and reads. When it is used up, connections stop
    /// reading and fetches return less. A size such as 256MiB or 1GiB [default: 512MiB]
    #[arg(long, env = "SLUICE_MEMORY_LIMIT")]
    memory_limit: Option<ByteSize>,
    /// Most bytes one Fetch response carries; a client's max_bytes of 0 or less means this
    /// (Kafka's fetch.max.bytes) [default: 52428800 = 50 MiB, or a quarter of --memory-limit
    /// if that is less]
    #[arg(long, env = "SLUICE_FETCH_MAX_BYTES")]
    fetch_max_bytes: Option<ByteSize>,
    /// A Kafka request must arrive whole within this once its first byte has, and a client must
    /// read its responses within it; otherwise the connection is closed [default: 30000]
    #[arg(long, env = "SLUICE_REQUEST_TIMEOUT_MS")]
    request_timeout_ms: Option<u64>,
    /// Close Kafka connections with nothing in flight for this long (Kafka's
    /// connections.max.idle.ms) [default: 600000 = 10 minutes]
    #[arg(long, env = "SLUICE_CONNECTIONS_MAX_IDLE_MS")]
    connections_max_idle_ms: Option<u64>,
    /// Kafka connections open at once; more are closed as they arrive (Kafka's
    /// max.connections) [default: 4096]
    #[arg(long, env = "SLUICE_MAX_CONNECTIONS")]
    max_connections: Option<usize>,
    /// Kafka connections open at once from one IP address (Kafka's max.connections.per.ip)
    /// [default: 1024]
    #[arg(long, env = "SLUICE_MAX_CONNECTIONS_PER_IP")]
    max_connections_per_ip: Option<usize>,
    /// Largest record batch a topic accepts unless its max.message.bytes says otherwise
    /// [default: 1048588]
    #[arg(long, env = "SLUICE_MAX_MESSAGE_BYTES")]
    max_message_bytes: Option<i64>,
    /// How long the first rebalance of an empty classic group waits for more members to join
    /// (Kafka's group.initial.rebalance.delay.ms) [default: 3000]
    #[arg(long, env = "SLUICE_GROUP_INITIAL_REBALANCE_DELAY_MS")]
    group_initial_rebalance_delay_ms: Option<i64>,
    /// KIP-848 consumer groups: a member that sends no heartbeat for this long is removed
    /// (group.consumer.session.timeout.ms) [default: 45000]
    #[arg(long, env = "SLUICE_GROUP_CONSUMER_SESSION_TIMEOUT_MS")]
    group_consumer_session_timeout_ms: Option<i32>,
    /// KIP-848 consumer groups: how often members heartbeat
    /// (group.consumer.heartbeat.interval.ms) [default: 5000]
    #[arg(long, env = "SLUICE_GROUP_CONSUMER_HEARTBEAT_INTERVAL_MS")]
    group_consumer_heartbeat_interval_ms: Option<i32>,
    /// Most consumer groups the broker keeps [default: 10000]
    #[arg(long, env = "SLUICE_GROUPS_MAX")]
    groups_max: Option<usize>,
}

/// The same settings, from the TOML file.
#[derive(Debug, Default, serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct FileConfig {
    data_dir: Option<PathBuf>,
    kafka_addr: Option<String>,
    http_addr: Option<String>,
    http_allow_anonymous: Option<bool>,
    http_max_body_bytes: Option<usize>,
    http_max_records_per_request: Option<usize>,
    http_max_concurrent_requests: Option<usize>,
    http_header_read_timeout_ms: Option<u64>,
    http_body_read_timeout_ms: Option<u64>,
    http_idle_timeout_ms: Option<u64>,
    http_max_connections: Option<usize>,
    http_api_keys: Option<Vec<ApiKeyConfig>>,
    advertised_host: Option<String>,
    auto_create_topics: Option<bool>,
    default_partitions: Option<i32>,
    retention_ms: Option<i64>,
    retention_bytes: Option<i64>,
    segment_bytes: Option<u64>,
    segment_ms: Option<i64>,
    flush_interval_ms: Option<u64>,
    sync_threads: Option<usize>,
    max_request_bytes: Option<ByteSize>,
    memory_limit: Option<ByteSize>,
    fetch_max_bytes: Option<ByteSize>,
    request_timeout_ms: Option<u64>,
    connections_max_idle_ms: Option<u64>,
    max_connections: Option<usize>,
    max_connections_per_ip: Option<usize>,
    max_message_bytes: Option<i64>,
    group_initial_rebalance_delay_ms: Option<i64>,
    group_consumer_session_timeout_ms: Option<i32>,
    group_consumer_heartbeat_interval_ms: Option<i32>,
    groups_max: Option<usize>,
}

/// How often the config file is checked for changed HTTP API keys.
const KEYS_RELOAD_CHECK_INTERVAL: Duration = Duration::from_secs(2);

/// Task polls between two checks for socket readiness on each runtime thread.
const RUNTIME_EVENT_INTERVAL: u32 = 8;

/// How often retention runs.
const RETENTION_CHECK_INTERVAL: Duration = Duration::from_secs(60);

fn read_config_file(path: &std::path::Path) -> anyhow::Result<FileConfig> {
    let text = std::fs::read_to_string(path)
        .with_context(|| format!("reading config file {}", path.display()))?;
    toml::from_str(&text).with_context(|| format!("parsing config file {}", path.display()))
}

pub fn run(args: ServeArgs) -> anyhow::Result<()> {
    let file: FileConfig = match &args.config {
        Some(path) => read_config_file(path)?,
        None => FileConfig::default(),
    };
    let http_addr = args
        .http_addr
        .or(file.http_addr)
        .unwrap_or_else(|| "127.0.0.1:8080".to_owned());
    let http_addr = (!http_addr.eq_ignore_ascii_case("off")).then_some(http_addr);
    let allow_anonymous = args
        .http_allow_anonymous
        .or(file.http_allow_anonymous)
        .unwrap_or(false);
    let mut http_config = HttpConfig::default();
    let http_max_body_bytes = args.http_max_body_bytes.or(file.http_max_body_bytes);
    if let Some(v) = http_max_body_bytes {
        http_config.max_body_bytes = v;
    }
    if let Some(v) = args
        .http_max_records_per_request
        .or(file.http_max_records_per_request)
    {
        http_config.max_records_per_request = v;
    }
    if let Some(v) = args
        .http_max_concurrent_requests
        .or(file.http_max_concurrent_requests)
    {
        http_config.max_concurrent_requests = v;
    }
    if let Some(v) = args
        .http_header_read_timeout_ms
        .or(file.http_header_read_timeout_ms)
    {
        http_config.header_read_timeout_ms = v;
    }
    if let Some(v) = args
        .http_body_read_timeout_ms
        .or(file.http_body_read_timeout_ms)
    {
        http_config.body_read_timeout_ms = v;
    }
    if let Some(v) = args.http_idle_timeout_ms.or(file.http_idle_timeout_ms) {
        http_config.idle_timeout_ms = v;
    }
    if let Some(v) = args.http_max_connections.or(file.http_max_connections) {
        http_config.max_connections = v;
    }
    for (name, v) in [
        ("http_max_body_bytes", http_config.max_body_bytes),
        (
            "http_max_records_per_request",
            http_config.max_records_per_request,
        ),
        (
            "http_max_concurrent_requests",
            http_config.max_concurrent_requests,
        ),
        ("http_max_connections", http_config.max_connections),
    ] {
        if v == 0 {
            bail!("{name} must be at least 1");
        }
    }
    // A zero timeout would close every connection (or answer every body 408) at once.
    for (name, v) in [
        (
            "http_header_read_timeout_ms",
            http_config.header_read_timeout_ms,
        ),
        (
            "http_body_read_timeout_ms",
            http_config.body_read_timeout_ms,
        ),
        ("http_idle_timeout_ms", http_config.idle_timeout_ms),
    ] {
        if v == 0 {
            bail!("{name} must be at least 1 (a timeout of 0 would cut off every request)");
        }
    }
    let auth = Arc::new(
        Auth::new(file.http_api_keys.clone().unwrap_or_default())
            .map_err(anyhow::Error::msg)
            .context("invalid http_api_keys in the config file")?,
    );
    // Resolved once, here: the check below and the bind use the same addresses. An open HTTP
    // API on a non-loopback address is refused before anything binds, so it is never
    // reachable, not even briefly.
    let http_addrs: Option<Vec<std::net::SocketAddr>> = match &http_addr {
        Some(addr) => Some(
            std::net::ToSocketAddrs::to_socket_addrs(addr)
                .with_context(|| format!("resolving the HTTP address {addr}"))?
                .collect(),
        ),
        None => None,
    };
    if !auth.enabled() && !allow_anonymous {
        let open = http_addrs.iter().flatten().find(|a| !a.ip().is_loopback());
        if let Some(open) = open {
            bail!(
                "the HTTP API would listen on {open} without API keys: configure http_api_keys in the config file (see `sluice api-key new`), bind it to a loopback address, or pass --http-allow-anonymous"
            );
        }
    }
    let data_dir = args
        .data_dir
        .or(file.data_dir)
        .unwrap_or_else(|| "sluice-data".into());
    let kafka_addr = args
        .kafka_addr
        .or(file.kafka_addr)
        .unwrap_or_else(|| "127.0.0.1:9092".to_owned());
    let mut broker_config = BrokerConfig::new(&data_dir);
    if let Some(v) = args.auto_create_topics.or(file.auto_create_topics) {
        broker_config.auto_create_topics = v;
    }
    if let Some(v) = args.default_partitions.or(file.default_partitions) {
        if !(1..=broker_config.partitions_per_topic_max).contains(&v) {
            bail!(
                "default_partitions must be between 1 and {}, got {v}",
                broker_config.partitions_per_topic_max
            );
        }
        broker_config.default_partitions = v;
    }
    if let Some(v) = args.retention_ms.or(file.retention_ms) {
        broker_config.log.retention_ms = (v >= 0).then_some(v);
    }
    if let Some(v) = args.retention_bytes.or(file.retention_bytes) {
        broker_config.log.retention_bytes = (v >= 0).then_some(v as u64);
    }
    if let Some(v) = args.segment_bytes.or(file.segment_bytes) {
        broker_config.log.segment_bytes = v;
    }
    if let Some(v) = args.segment_ms.or(file.segment_ms) {
        broker_config.log.segment_ms = Some(v);
    }
    broker_config
        .log
        .validate()
        .context("invalid log settings")?;
    let groups = &mut broker_config.groups;
    if let Some(v) = args
        .group_initial_rebalance_delay_ms
        .or(file.group_initial_rebalance_delay_ms)
    {
        if v < 0 {
            bail!("group_initial_rebalance_delay_ms must be 0 or more, got {v}");
        }
        groups.classic.initial_rebalance_delay_ms = v;
    }
    let heartbeat_ms = args
        .group_consumer_heartbeat_interval_ms
        .or(file.group_consumer_heartbeat_interval_ms);
    if let Some(v) = heartbeat_ms {
        groups.consumer.heartbeat_interval_ms = v;
    }
    if let Some(v) = args
        .group_consumer_session_timeout_ms
        .or(file.group_consumer_session_timeout_ms)
    {
        groups.consumer.session_timeout_ms = v;
    }
    if groups.consumer.heartbeat_interval_ms < 1
        || groups.consumer.heartbeat_interval_ms >= groups.consumer.session_timeout_ms
    {
        bail!(
            "group_consumer_heartbeat_interval_ms ({}) must be at least 1 and less than group_consumer_session_timeout_ms ({})",
            groups.consumer.heartbeat_interval_ms,
            groups.consumer.session_timeout_ms
        );
    }
    if let Some(v) = args.groups_max.or(file.groups_max) {
        if v == 0 {
            bail!("groups_max must be at least 1");
        }
        groups.groups_max = v;
    }
    if let Some(v) = args.sync_threads.or(file.sync_threads) {
        if !(1..=64).contains(&v) {
            bail!("sync_threads must be between 1 and 64, got {v}");
        }
        broker_config.sync_threads = v;
    }
    match args.flush_interval_ms.or(file.flush_interval_ms) {
        None | Some(0) => {}
        Some(ms) => broker_config.flush = FlushPolicy::IntervalMs(ms),
    }
    if let Some(v) = args.max_message_bytes.or(file.max_message_bytes) {
        broker_config.max_message_bytes = v;
    }
    let memory_limit = args.memory_limit.or(file.memory_limit).map_or(
        sluice_broker::memory::MEMORY_LIMIT_DEFAULT as u64,
        ByteSize::bytes,
    );
    let memory_limit = usize::try_from(memory_limit).unwrap_or(usize::MAX);
    // One request, and one fetch response, must fit in the budget with room to spare for the
    // others; unset, both limits shrink with a small budget instead of refusing to start.
    let half_budget = memory_limit / 2;
    let mut server_config = ServerConfig::default();
    let max_request_bytes = args.max_request_bytes.or(file.max_request_bytes);
    let max_request_bytes =
        max_request_bytes.map(|v| usize::try_from(v.bytes()).unwrap_or(usize::MAX));
    server_config.max_request_bytes = match max_request_bytes {
        Some(v) if v > half_budget => bail!(
            "max_request_bytes ({v}) must be at most half of memory_limit ({}): raise memory_limit or lower max_request_bytes",
            ByteSize(memory_limit as u64)
        ),
        Some(v) => v,
        None => server_config.max_request_bytes.min(memory_limit / 4),
    };
    let fetch_max_bytes = args.fetch_max_bytes.or(file.fetch_max_bytes);
    let fetch_max_bytes = fetch_max_bytes.map(|v| usize::try_from(v.bytes()).unwrap_or(usize::MAX));
    broker_config.fetch_max_bytes = match fetch_max_bytes {
        Some(0) => bail!("fetch_max_bytes must be at least 1"),
        Some(v) if v > half_budget => bail!(
            "fetch_max_bytes ({v}) must be at most half of memory_limit ({}): raise memory_limit or lower fetch_max_bytes",
            ByteSize(memory_limit as u64)
        ),
        Some(v) => v,
        None => broker_config.fetch_max_bytes.min(memory_limit / 4),
    };
    if server_config.max_request_bytes < 1024 || broker_config.fetch_max_bytes < 1024 {
        bail!(
            "memory_limit ({}) is too small to serve requests: give it at least 4KiB, and 64MiB or more in practice",
            ByteSize(memory_limit as u64)
        );
    }
    broker_config.memory_limit = memory_limit;
    // The HTTP API draws on the same budget: its bodies follow the same rule, and its reads
    // share the Kafka fetch cap.
    match http_max_body_bytes {
        Some(v) if v > half_budget => bail!(
            "http_max_body_bytes ({v}) must be at most half of memory_limit ({}): raise memory_limit or lower http_max_body_bytes",
            ByteSize(memory_limit as u64)
        ),
        Some(_) => {}
        None => http_config.max_body_bytes = http_config.max_body_bytes.min(memory_limit / 4),
    }
    http_config.fetch_max_bytes = broker_config.fetch_max_bytes;
    if let Some(v) = args.request_timeout_ms.or(file.request_timeout_ms) {
        if v == 0 {
            bail!("request_timeout_ms must be at least 1");
        }
        server_config.request_timeout = Duration::from_millis(v);
    }
    if let Some(v) = args
        .connections_max_idle_ms
        .or(file.connections_max_idle_ms)
    {
        if v == 0 {
            bail!("connections_max_idle_ms must be at least 1");
        }
        server_config.connections_max_idle = Duration::from_millis(v);
    }
    if let Some(v) = args.max_connections.or(file.max_connections) {
        server_config.max_connections = v;
    }
    if let Some(v) = args.max_connections_per_ip.or(file.max_connections_per_ip) {
        server_config.max_connections_per_ip = v;
    }
    for (name, v) in [
        ("max_connections", server_config.max_connections),
        (
            "max_connections_per_ip",
            server_config.max_connections_per_ip,
        ),
    ] {
        if v == 0 {
            bail!("{name} must be at least 1");
        }
    }
    raise_open_files_limit(server_config.max_connections, http_config.max_connections);
    let advertised_host = args.advertised_host.or(file.advertised_host);

    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .thread_name("sluice")
        // Look for socket readiness every 8 task polls instead of tokio's 61: under a produce
        // flood each poll appends a batch, and a new client's first bytes would otherwise wait
        // for dozens of them. Measured with 200 producers keeping 256 KiB requests in flight
        // (hostile_clients.rs), a new client's ApiVersions + Metadata: debug build, median
        // 97-240 ms and up to 0.7 s with 61, median 2-4 ms and up to 11 ms with 8; release
        // build, median 4-6 ms and up to 28 ms with 61, 3-6 ms and up to 16 ms with 8.
        .event_interval(RUNTIME_EVENT_INTERVAL)
        .build()
        .context("starting the async runtime")?;
    runtime.block_on(async move {
        let listener = tokio::net::TcpListener::bind(&kafka_addr)
            .await
            .with_context(|| format!("binding the Kafka listener to {kafka_addr}"))?;
        let bound = listener.local_addr()?;
        broker_config.advertised_host = advertised_host.unwrap_or_else(|| bound.ip().to_string());
        broker_config.advertised_port = i32::from(bound.port());
        let started = std::time::Instant::now();
        let broker = Arc::new(
            tokio::task::spawn_blocking(move || Broker::open(broker_config))
                .await?
                .with_context(|| format!("opening data directory {}", data_dir.display()))?,
        );
        tracing::info!(
            data_dir = %broker.config().data_dir.display(),
            topics = broker.topics().all().len(),
            elapsed_ms = started.elapsed().as_millis() as u64,
            "opened data directory"
        );
        let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
        let http = match (&http_addr, &http_addrs) {
            (Some(addr), Some(addrs)) => {
                let listener = tokio::net::TcpListener::bind(&addrs[..])
                    .await
                    .with_context(|| format!("binding the HTTP listener to {addr}"))?;
                let bound = listener.local_addr()?;
                if !auth.enabled() {
                    tracing::warn!("no HTTP API keys configured: the HTTP API on {bound} accepts every request");
                }
                tracing::info!("http listening on {bound}");
                let state = AppState::new(Arc::clone(&broker), http_config, Arc::clone(&auth), stop_rx.clone());
                Some(tokio::spawn(sluice_http::serve(listener, state)))
            }
            _ => None,
        };
        // After the HTTP line: whoever waits for this line has both addresses.
        tracing::info!("kafka listening on {bound}");
        let reload = args.config.clone().map(|path| {
            tokio::spawn(reload_keys(path, Arc::clone(&auth), stop_rx.clone()))
        });
        let server = tokio::spawn(sluice_server::serve(listener, Arc::clone(&broker), server_config, stop_rx.clone()));
        let retention = {
            let broker = Arc::clone(&broker);
            let mut stop = stop_rx.clone();
            tokio::spawn(async move {
                loop {
                    tokio::select! {
                        _ = tokio::time::sleep(RETENTION_CHECK_INTERVAL) => {
                            let broker = Arc::clone(&broker);
                            let _ = tokio::task::spawn_blocking(move || broker.apply_retention()).await;
                        }
                        _ = stop.changed() => break,
                    }
                }
            })
        };
        wait_for_signal().await;
        tracing::info!("shutting down: closing connections, flushing partitions");
        let _ = stop_tx.send(true);
        let _ = server.await;
        if let Some(http) = http {
            match http.await {
                Ok(Err(e)) => tracing::error!(error = %e, "http listener"),
                Err(e) => tracing::error!(error = %e, "http listener task"),
                Ok(Ok(())) => {}
            }
        }
        if let Some(reload) = reload {
            let _ = reload.await;
        }
        let _ = retention.await;
        let b = Arc::clone(&broker);
        tokio::task::spawn_blocking(move || b.shutdown()).await?;
        tracing::info!("shut down cleanly");
        anyhow::Ok(())
    })
}

/// File descriptors kept for everything but client connections: segment and index files,
/// the group store, the listeners themselves.
const FILES_RESERVED: u64 = 1024;

/// Raises the soft limit on open files to the hard limit (the usual thing for a server to do)
/// and warns when the connection limits could still run the process out of descriptors, which
/// would make accepts fail for everyone.
fn raise_open_files_limit(kafka_connections: usize, http_connections: usize) {
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit writes one rlimit into the struct we pass.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) } != 0 {
        return;
    }
    if limit.rlim_cur < limit.rlim_max {
        let raised = libc::rlimit {
            rlim_cur: limit.rlim_max,
            rlim_max: limit.rlim_max,
        };
        // SAFETY: setrlimit reads one rlimit from the struct we pass.
        if unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &raised) } == 0 {
            limit = raised;
        }
    }
    let needed = (kafka_connections + http_connections) as u64 + FILES_RESERVED;
    if needed > limit.rlim_cur {
        tracing::warn!(
            open_files_limit = limit.rlim_cur,
            max_connections = kafka_connections,
            http_max_connections = http_connections,
            "the open-files limit is below what the connection limits may use (plus {FILES_RESERVED} for data files): raise `ulimit -n` or lower max_connections"
        );
    }
}

/// Reloads the HTTP API keys from the config file when it changes (checked every
/// [`KEYS_RELOAD_CHECK_INTERVAL`]) or on SIGHUP. A file that does not parse, or keys that are
/// invalid, leave the current keys in place and log why.
async fn reload_keys(path: PathBuf, auth: Arc<Auth>, mut stop: tokio::sync::watch::Receiver<bool>) {
    use tokio::signal::unix::{SignalKind, signal};
    let modified = |path: &std::path::Path| std::fs::metadata(path).and_then(|m| m.modified()).ok();
    let mut hup = match signal(SignalKind::hangup()) {
        Ok(hup) => Some(hup),
        Err(e) => {
            tracing::warn!(error = %e, "cannot listen for SIGHUP; keys reload only when the file changes");
            None
        }
    };
    let mut last = modified(&path);
    loop {
        let hup_recv = async {
            match hup.as_mut() {
                Some(h) => {
                    h.recv().await;
                }
                None => std::future::pending::<()>().await,
            }
        };
        let forced = tokio::select! {
            _ = tokio::time::sleep(KEYS_RELOAD_CHECK_INTERVAL) => false,
            _ = hup_recv => true,
            _ = stop.changed() => return,
        };
        let now = modified(&path);
        if !forced && now == last {
            continue;
        }
        last = now;
        let keys = match read_config_file(&path) {
            Ok(file) => file.http_api_keys.unwrap_or_default(),
            Err(e) => {
                tracing::error!(error = %format!("{e:#}"), "config file changed but does not parse; keeping the current HTTP API keys");
                continue;
            }
        };
        let count = keys.len();
        match auth.replace(keys) {
            Ok(()) => tracing::info!(
                keys = count,
                "reloaded HTTP API keys from {}",
                path.display()
            ),
            Err(e) => {
                tracing::error!(error = %e, "invalid http_api_keys; keeping the current keys")
            }
        }
    }
}

async fn wait_for_signal() {
    use tokio::signal::unix::{SignalKind, signal};
    let mut term = signal(SignalKind::terminate()).expect("installing SIGTERM handler");
    let mut int = signal(SignalKind::interrupt()).expect("installing SIGINT handler");
    tokio::select! {
        _ = term.recv() => {}
        _ = int.recv() => {}
    }
}
