//! The settings of `sluice serve`, each defined once.
//!
//! [`Settings`] is one struct of `Option` fields that three sources fill: clap (the flag and its
//! `SLUICE_*` environment variable, both named in the field's `#[arg]`), and the TOML file (the
//! key is the field name). `flags.or(file)` merges them field by field; clap has already put
//! flags over the environment. [`Settings::resolve`] then turns the merged settings into the
//! broker's, the Kafka server's and the HTTP API's configs, checking each value on the way,
//! so `serve::run` only wires the parts together.
//!
//! Adding a setting means adding one field to the `settings!` invocation below (with its help
//! text and `[default: ...]` note), one line in [`Settings::resolve`] or the part it belongs
//! to, and its key in the `--config` help in `serve.rs` (a unit test checks that list).

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, bail};
use sluice_broker::BrokerConfig;
use sluice_broker::config::FlushPolicy;
use sluice_http::HttpConfig;
use sluice_http::auth::{ApiKeyConfig, Auth};
use sluice_server::ServerConfig;
use sluice_server::listeners::{ListenerSpec, SecurityProtocol, parse_listeners};
use sluice_server::principal::PrincipalMapper;
use sluice_server::sasl::{Mechanism, parse_mechanisms};
use sluice_server::tls::TlsSettings;

use crate::bytesize::ByteSize;

/// Declares [`Settings`]: every field becomes `Option<T>` (unset in every source means the
/// built-in default), the list of TOML keys ([`Settings::KEYS`]) and the field-wise merge
/// ([`Settings::or`]) are generated from the same field list, so none can fall out of step.
macro_rules! settings {
    (
        $(#[$struct_meta:meta])*
        pub struct $name:ident {
            $( $(#[$field_meta:meta])* $field:ident: $ty:ty, )*
        }
    ) => {
        $(#[$struct_meta])*
        #[derive(Debug, Default, clap::Args, serde::Deserialize)]
        #[serde(default, deny_unknown_fields)]
        pub struct $name {
            $( $(#[$field_meta])* pub $field: Option<$ty>, )*
        }

        impl $name {
            /// Every key the TOML file accepts.
            #[cfg_attr(not(test), allow(dead_code))]
            pub const KEYS: &'static [&'static str] = &[$(stringify!($field)),*];

            /// Field by field, `self`'s value where it has one, else `other`'s.
            pub fn or(self, other: Self) -> Self {
                Self { $( $field: self.$field.or(other.$field), )* }
            }
        }
    };
}

settings! {
    /// The settings of `sluice serve`, from flags, `SLUICE_*` variables or the TOML file.
    pub struct Settings {
        /// Where data is stored [default: ./sluice-data]
        #[arg(long, env = "SLUICE_DATA_DIR")]
        data_dir: PathBuf,
        /// Kafka listener address: shorthand for one PLAINTEXT listener, unused when
        /// --listeners is given [default: 127.0.0.1:9092]
        #[arg(long, env = "SLUICE_KAFKA_ADDR")]
        kafka_addr: String,
        /// Kafka listeners, as Kafka writes them: PROTOCOL://HOST:PORT, comma-separated, e.g.
        /// "SSL://0.0.0.0:9093,PLAINTEXT://127.0.0.1:9092". Protocols: PLAINTEXT, SSL,
        /// SASL_PLAINTEXT and SASL_SSL (the SASL ones need --sasl-mechanisms). A port of 0
        /// picks a free one. See docs/security.md [default: PLAINTEXT://--kafka-addr]
        #[arg(long, env = "SLUICE_LISTENERS")]
        listeners: String,
        /// The address clients are told for each listener, in the same form:
        /// "SSL://broker1.example.com:9093,PLAINTEXT://10.0.0.5:9092". A client is always told
        /// the address of the listener it came in on [default: each listener's bound address,
        /// with --advertised-host as the host when given]
        #[arg(long, env = "SLUICE_ADVERTISED_LISTENERS")]
        advertised_listeners: String,
        /// SSL listeners: the server's PEM certificate chain, its own certificate first. Read
        /// again on SIGHUP and when it changes
        #[arg(long, env = "SLUICE_TLS_CERT")]
        tls_cert: PathBuf,
        /// SSL listeners: the PEM private key of --tls-cert (PKCS#8, RSA or EC)
        #[arg(long, env = "SLUICE_TLS_KEY")]
        tls_key: PathBuf,
        /// SSL listeners: PEM CA certificates; when given, clients must present a certificate
        /// signed by one of them (mutual TLS), and its subject names the connection's user
        /// [default: no client certificates]
        #[arg(long, env = "SLUICE_TLS_CLIENT_CA")]
        tls_client_ca: PathBuf,
        /// Mutual TLS: how a client certificate's subject (e.g. "CN=alice,OU=eng,O=Acme")
        /// becomes a user name, as Kafka's ssl.principal.mapping.rules: DEFAULT (the whole
        /// subject) or RULE:pattern/replacement/[LU], comma-separated, first match wins, e.g.
        /// "RULE:^CN=([^,]*),.*$/$1/L,DEFAULT" [default: DEFAULT]
        #[arg(long, env = "SLUICE_SSL_PRINCIPAL_MAPPING_RULES")]
        ssl_principal_mapping_rules: String,
        /// SASL_PLAINTEXT and SASL_SSL listeners: the mechanisms clients may use,
        /// comma-separated, of SCRAM-SHA-512, SCRAM-SHA-256 and PLAIN. Users are kept in
        /// DATA_DIR/security/users.json (`sluice user add`, or kafka-configs --alter
        /// --entity-type users); with --storage they are kept in the bucket too, and with
        /// --metadata in PostgreSQL, shared by every broker [default: none]
        #[arg(long, env = "SLUICE_SASL_MECHANISMS")]
        sasl_mechanisms: String,
        /// Allow PLAIN on a SASL_PLAINTEXT listener, where the password crosses the network
        /// in clear text [default: false, PLAIN only on SASL_SSL]
        #[arg(long, env = "SLUICE_SASL_PLAIN_OVER_PLAINTEXT")]
        sasl_plain_over_plaintext: bool,
        /// Check every Kafka request against ACLs: "acl" turns the checks on, "none" leaves
        /// them off. With "acl", a principal no ACL allows may do nothing (super users aside);
        /// ACLs are managed with kafka-acls or AdminClient and kept in
        /// DATA_DIR/security/acls.json (with --storage in the bucket too; with --metadata in
        /// PostgreSQL, shared by every broker). See
        /// docs/security.md [default: none]
        #[arg(long, env = "SLUICE_AUTHORIZER")]
        authorizer: String,
        /// Principals allowed everything when --authorizer is acl, separated by ";" as in
        /// Kafka's super.users (a certificate subject may hold commas), e.g.
        /// "User:admin;User:CN=ops,O=Acme" [default: none]
        #[arg(long, env = "SLUICE_SUPER_USERS")]
        super_users: String,
        /// HTTP API listener address; "off" disables the HTTP API [default: 127.0.0.1:8080]
        #[arg(long, env = "SLUICE_HTTP_ADDR")]
        http_addr: String,
        /// Serve the HTTP API over TLS (HTTPS) with --tls-cert and --tls-key, the Kafka
        /// listeners' files (reloaded the same way) [default: false]
        #[arg(long, env = "SLUICE_HTTP_TLS")]
        http_tls: bool,
        /// Serve the HTTP API without API keys on a non-loopback address [default: false]
        #[arg(long, env = "SLUICE_HTTP_ALLOW_ANONYMOUS")]
        http_allow_anonymous: bool,
        /// Largest HTTP request body; larger gets 413 [default: 67108864 = 64 MiB, or a quarter
        /// of --memory-limit if that is less]
        #[arg(long, env = "SLUICE_HTTP_MAX_BODY_BYTES")]
        http_max_body_bytes: usize,
        /// Most records one HTTP produce request may carry; more gets 413 [default: 100000]
        #[arg(long, env = "SLUICE_HTTP_MAX_RECORDS_PER_REQUEST")]
        http_max_records_per_request: usize,
        /// HTTP requests served at once, long polls included; more gets 429 [default: 1024]
        #[arg(long, env = "SLUICE_HTTP_MAX_CONCURRENT_REQUESTS")]
        http_max_concurrent_requests: usize,
        /// An HTTP request's whole header must arrive within this; a slower connection is closed
        /// [default: 10000]
        #[arg(long, env = "SLUICE_HTTP_HEADER_READ_TIMEOUT_MS")]
        http_header_read_timeout_ms: u64,
        /// An HTTP request's whole body must arrive within this, from its first read; slower gets
        /// 408 [default: 30000]
        #[arg(long, env = "SLUICE_HTTP_BODY_READ_TIMEOUT_MS")]
        http_body_read_timeout_ms: u64,
        /// Close a kept-alive HTTP connection with no request in flight for this long
        /// [default: 60000]
        #[arg(long, env = "SLUICE_HTTP_IDLE_TIMEOUT_MS")]
        http_idle_timeout_ms: u64,
        /// HTTP connections open at once; more are closed when accepted [default: 4096]
        #[arg(long, env = "SLUICE_HTTP_MAX_CONNECTIONS")]
        http_max_connections: usize,
        // File only: keys are secrets' digests and are reloaded from the file while running.
        #[arg(skip)]
        http_api_keys: Vec<ApiKeyConfig>,
        /// Host name clients are told to connect to [default: the listener's IP]
        #[arg(long, env = "SLUICE_ADVERTISED_HOST")]
        advertised_host: String,
        /// Create topics on first use by a client's Metadata request [default: true]
        #[arg(long, env = "SLUICE_AUTO_CREATE_TOPICS")]
        auto_create_topics: bool,
        /// Partitions of auto-created topics [default: 1]
        #[arg(long, env = "SLUICE_DEFAULT_PARTITIONS")]
        default_partitions: i32,
        /// Delete data older than this; -1 keeps it forever [default: 604800000 = 7 days]
        #[arg(long, env = "SLUICE_RETENTION_MS")]
        retention_ms: i64,
        /// Delete the oldest data while a partition holds more than this; -1 for no limit [default: -1]
        #[arg(long, env = "SLUICE_RETENTION_BYTES")]
        retention_bytes: i64,
        /// How often retention runs (Kafka's log.retention.check.interval.ms); in cluster mode,
        /// how often the cleaner runs on the broker that holds its lease [default: 60000]
        #[arg(long, env = "SLUICE_RETENTION_CHECK_INTERVAL_MS")]
        retention_check_interval_ms: u64,
        /// Memory for the log cleaner's key map in one compaction pass, a size such as 64MiB
        /// (Kafka's log.cleaner.dedupe.buffer.size) [default: 128MiB]
        #[arg(long, env = "SLUICE_LOG_CLEANER_DEDUPE_BUFFER_BYTES")]
        log_cleaner_dedupe_buffer_bytes: ByteSize,
        /// Bytes per second the log cleaner may read and write, a size such as 50MiB; unset for
        /// no limit (Kafka's log.cleaner.io.max.bytes.per.second) [default: no limit]
        #[arg(long, env = "SLUICE_LOG_CLEANER_IO_MAX_BYTES_PER_SECOND")]
        log_cleaner_io_max_bytes_per_second: ByteSize,
        /// How long the log cleaner sleeps when no compacted partition is due (Kafka's
        /// log.cleaner.backoff.ms) [default: 15000]
        #[arg(long, env = "SLUICE_LOG_CLEANER_BACKOFF_MS")]
        log_cleaner_backoff_ms: u64,
        /// Segment file size [default: 1073741824 = 1 GiB]
        #[arg(long, env = "SLUICE_SEGMENT_BYTES")]
        segment_bytes: u64,
        /// Roll segments older than this [default: 604800000 = 7 days]
        #[arg(long, env = "SLUICE_SEGMENT_MS")]
        segment_ms: i64,
        /// 0 = fsync before every acknowledgement with group commit; N = fsync every N ms instead
        /// (acknowledgements wait for it) [default: 0]
        #[arg(long, env = "SLUICE_FLUSH_INTERVAL_MS")]
        flush_interval_ms: u64,
        /// Threads that run fdatasyncs for the partitions (each syncs one partition at a time)
        /// [default: 2]
        #[arg(long, env = "SLUICE_SYNC_THREADS")]
        sync_threads: usize,
        /// Largest request accepted, in bytes or with a unit (Kafka's socket.request.max.bytes)
        /// [default: 104857600 = 100 MiB, or a quarter of --memory-limit if that is less]
        #[arg(long, env = "SLUICE_MAX_REQUEST_BYTES")]
        max_request_bytes: ByteSize,
        /// What the broker may hold for clients in all: requests from their first byte, fetch
        /// responses until written, HTTP bodies and reads. When it is used up, connections stop
        /// reading and fetches return less. In object-storage mode the objects being written
        /// and the recent-objects cache come out of it first. A size such as 256MiB or 1GiB
        /// [default: 512MiB]
        #[arg(long, env = "SLUICE_MEMORY_LIMIT")]
        memory_limit: ByteSize,
        /// Most bytes one Fetch response carries; a client's max_bytes of 0 or less means this
        /// (Kafka's fetch.max.bytes) [default: 52428800 = 50 MiB, or a quarter of --memory-limit
        /// if that is less]
        #[arg(long, env = "SLUICE_FETCH_MAX_BYTES")]
        fetch_max_bytes: ByteSize,
        /// A Kafka request must arrive whole within this once its first byte has, and a client must
        /// read its responses within it; otherwise the connection is closed [default: 30000]
        #[arg(long, env = "SLUICE_REQUEST_TIMEOUT_MS")]
        request_timeout_ms: u64,
        /// Close Kafka connections with nothing in flight for this long (Kafka's
        /// connections.max.idle.ms) [default: 600000 = 10 minutes]
        #[arg(long, env = "SLUICE_CONNECTIONS_MAX_IDLE_MS")]
        connections_max_idle_ms: u64,
        /// Kafka connections open at once; more are closed as they arrive (Kafka's
        /// max.connections) [default: 4096]
        #[arg(long, env = "SLUICE_MAX_CONNECTIONS")]
        max_connections: usize,
        /// Kafka connections open at once from one IP address (Kafka's max.connections.per.ip)
        /// [default: 1024]
        #[arg(long, env = "SLUICE_MAX_CONNECTIONS_PER_IP")]
        max_connections_per_ip: usize,
        /// Largest record batch a topic accepts unless its max.message.bytes says otherwise
        /// [default: 1048588]
        #[arg(long, env = "SLUICE_MAX_MESSAGE_BYTES")]
        max_message_bytes: i64,
        /// How long the first rebalance of an empty classic group waits for more members to join
        /// (Kafka's group.initial.rebalance.delay.ms) [default: 3000]
        #[arg(long, env = "SLUICE_GROUP_INITIAL_REBALANCE_DELAY_MS")]
        group_initial_rebalance_delay_ms: i64,
        /// KIP-848 consumer groups: a member that sends no heartbeat for this long is removed
        /// (group.consumer.session.timeout.ms) [default: 45000]
        #[arg(long, env = "SLUICE_GROUP_CONSUMER_SESSION_TIMEOUT_MS")]
        group_consumer_session_timeout_ms: i32,
        /// KIP-848 consumer groups: how often members heartbeat
        /// (group.consumer.heartbeat.interval.ms) [default: 5000]
        #[arg(long, env = "SLUICE_GROUP_CONSUMER_HEARTBEAT_INTERVAL_MS")]
        group_consumer_heartbeat_interval_ms: i32,
        /// Share groups: a member that sends no heartbeat for this long is removed and its
        /// records go to the others (group.share.session.timeout.ms; a group's
        /// share.session.timeout.ms overrides it) [default: 45000]
        #[arg(long, env = "SLUICE_GROUP_SHARE_SESSION_TIMEOUT_MS")]
        group_share_session_timeout_ms: i32,
        /// Share groups: how often members heartbeat (group.share.heartbeat.interval.ms)
        /// [default: 5000]
        #[arg(long, env = "SLUICE_GROUP_SHARE_HEARTBEAT_INTERVAL_MS")]
        group_share_heartbeat_interval_ms: i32,
        /// Share groups: how long a member holds a record it was given before it goes to
        /// another member (group.share.record.lock.duration.ms) [default: 30000]
        #[arg(long, env = "SLUICE_GROUP_SHARE_RECORD_LOCK_DURATION_MS")]
        group_share_record_lock_duration_ms: i64,
        /// Share groups: deliveries of a record before it is archived, never to be delivered
        /// again (group.share.delivery.count.limit) [default: 5]
        #[arg(long, env = "SLUICE_GROUP_SHARE_DELIVERY_COUNT_LIMIT")]
        group_share_delivery_count_limit: i16,
        /// Share groups: records of one partition in flight at once, shared fairly among the
        /// members fetching it (group.share.partition.max.record.locks) [default: 2000]
        #[arg(long, env = "SLUICE_GROUP_SHARE_PARTITION_MAX_RECORD_LOCKS")]
        group_share_partition_max_record_locks: u32,
        /// Share groups: most members of one share group (group.share.max.size) [default: 200]
        #[arg(long, env = "SLUICE_GROUP_SHARE_MAX_SIZE")]
        group_share_max_size: usize,
        /// Most consumer groups the broker keeps [default: 10000]
        #[arg(long, env = "SLUICE_GROUPS_MAX")]
        groups_max: usize,
        /// Keep data in object storage: s3://BUCKET/PREFIX (endpoint, region and keys from
        /// AWS_ENDPOINT_URL, AWS_REGION, AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY); the data
        /// directory is then only a cache. See docs/object-storage.md [default: local disk]
        #[arg(long, env = "SLUICE_STORAGE")]
        storage: String,
        /// Object storage: produce batches wait at most this long for their object to be
        /// written (acknowledged after its PUT) [default: 250]
        #[arg(long, env = "SLUICE_OBJECT_LINGER_MS")]
        object_linger_ms: u64,
        /// Object storage: an object is written once it holds this much [default: 4MiB]
        #[arg(long, env = "SLUICE_OBJECT_MAX_BYTES")]
        object_max_bytes: ByteSize,
        /// Object storage: objects being written at once [default: 4]
        #[arg(long, env = "SLUICE_OBJECT_PUTS_IN_FLIGHT")]
        object_puts_in_flight: usize,
        /// Object storage: how long a PUT is retried, from its object's seal, before its
        /// produces fail with a retriable error (KAFKA_STORAGE_ERROR) [default: 30000]
        #[arg(long, env = "SLUICE_OBJECT_PUT_TIMEOUT_MS")]
        object_put_timeout_ms: u64,
        /// Object storage: local disk kept for ranges read from the bucket; 0 disables it
        /// [default: 1GiB]
        #[arg(long, env = "SLUICE_CACHE_BYTES")]
        cache_bytes: ByteSize,
        /// Cluster mode: many brokers share the bucket of --storage and this PostgreSQL
        /// database for metadata: postgres://USER:PASSWORD@HOST:PORT/DATABASE (the password
        /// may come from PGPASSWORD instead). See docs/cluster.md [default: one broker]
        #[arg(long, env = "SLUICE_METADATA")]
        metadata: String,
        /// Cluster mode: this broker's zone (rack), listed in Metadata answers
        #[arg(long, env = "SLUICE_RACK")]
        rack: String,
    }
}

/// Reads the TOML config file; unknown keys are refused.
pub fn read_config_file(path: &Path) -> anyhow::Result<Settings> {
    let text = std::fs::read_to_string(path)
        .with_context(|| format!("reading config file {}", path.display()))?;
    parse_config(&text).with_context(|| format!("parsing config file {}", path.display()))
}

fn parse_config(text: &str) -> anyhow::Result<Settings> {
    Ok(toml::from_str(text)?)
}

/// Where the HTTP API listens, resolved once so the open-API check and the bind see the same
/// addresses.
pub struct HttpListen {
    /// As given, for messages.
    pub addr: String,
    pub addrs: Vec<SocketAddr>,
}

/// Everything `serve` needs to start, every value checked.
pub struct Resolved {
    pub data_dir: PathBuf,
    /// The Kafka listeners, in order (the first is the one a cluster registers).
    pub listeners: Vec<ListenerSpec>,
    /// The advertised address of each listener, by protocol (`None`: the bound address).
    pub advertised_listeners: Vec<ListenerSpec>,
    /// Given when any listener is SSL or SASL_SSL; loaded before anything binds.
    pub tls: Option<TlsSettings>,
    /// The SASL mechanisms, given when any listener is SASL_PLAINTEXT or SASL_SSL.
    pub sasl: Option<Vec<Mechanism>>,
    /// `--authorizer acl`: the super users (`None`: no ACL checks).
    pub authorizer: Option<Vec<sluice_security::Principal>>,
    /// The listener's IP when unset.
    pub advertised_host: Option<String>,
    /// `None`: the HTTP API is off.
    pub http: Option<HttpListen>,
    /// Serve the HTTP API over TLS with `tls`.
    pub http_tls: bool,
    pub http_config: HttpConfig,
    pub auth: Arc<Auth>,
    /// `advertised_host` and `advertised_port` are filled in once the Kafka listener is bound.
    pub broker_config: BrokerConfig,
    pub server_config: ServerConfig,
    /// `None`: data stays on local disk.
    pub storage: Option<StorageSettings>,
    /// How often retention runs (the cleaner's interval in cluster mode).
    pub retention_check_interval: Duration,
    /// How long the log cleaner sleeps when no compacted partition is due.
    pub log_cleaner_backoff: Duration,
}

/// Object-storage mode's settings, checked.
#[derive(Debug, Clone)]
pub struct StorageSettings {
    pub url: sluice_objstore::StorageUrl,
    pub linger: Duration,
    pub max_bytes: usize,
    pub puts_in_flight: usize,
    pub put_timeout: Duration,
    pub cache_bytes: u64,
    /// The recent-objects memory cache: a slice of `memory_limit`
    /// ([`Settings::apply_memory_limit`]).
    pub memory_bytes: usize,
    /// Cluster mode: the metadata database (`None`: one broker owns the prefix).
    pub metadata: Option<sluice_cluster::MetadataUrl>,
    /// Cluster mode: this broker's zone.
    pub rack: Option<String>,
}

impl StorageSettings {
    /// The most the flusher holds: the open object, the sealed ones waiting for a PUT slot
    /// and those in flight, each up to `max_bytes`.
    pub fn flush_bytes(&self) -> usize {
        (1 + sluice_objstore::flush::DEFAULT_SEALED_MAX + self.puts_in_flight)
            .saturating_mul(self.max_bytes)
    }
}

/// How often retention runs by default: once a minute keeps a short `retention.ms` close to
/// exact for a few index reads per partition (Kafka checks every 5 minutes).
pub const RETENTION_CHECK_INTERVAL_MS_DEFAULT: u64 = 60_000;

/// Object-storage defaults (docs/object-storage.md, "Named limits").
pub const OBJECT_LINGER_MS_DEFAULT: u64 = 250;
pub const OBJECT_MAX_BYTES_DEFAULT: u64 = 4 << 20;
pub const OBJECT_PUTS_IN_FLIGHT_DEFAULT: usize = 4;
pub const OBJECT_PUT_TIMEOUT_MS_DEFAULT: u64 = 30_000;
pub const CACHE_BYTES_DEFAULT: u64 = 1 << 30;
/// Largest recent-objects memory cache (an eighth of `memory_limit` up to this): tail readers
/// are served from it without a GET.
pub const RECENT_OBJECTS_BYTES_MAX: usize = 64 << 20;

impl Settings {
    /// Fills in defaults and checks every value. Each config type checks its own values
    /// (`BrokerConfig::validate`, `HttpConfig::validate`, `ServerConfig::validate`); what spans
    /// them (the memory budget's split) is checked here. The checks run in a fixed order, so a
    /// configuration with several mistakes always reports the same one first.
    pub fn resolve(self) -> anyhow::Result<Resolved> {
        let mut http_config = self.http_config();
        let auth = Arc::new(
            Auth::new(self.http_api_keys.clone().unwrap_or_default())
                .map_err(anyhow::Error::msg)
                .context("invalid http_api_keys in the config file")?,
        );
        let http = self.http_listen(&auth)?;
        let data_dir = self
            .data_dir
            .clone()
            .unwrap_or_else(|| "sluice-data".into());
        let (listeners, advertised_listeners, tls, sasl) = self.listeners()?;
        let mut broker_config = self.broker_config(&data_dir);
        let mut server_config = ServerConfig::default();
        self.apply_kafka_connections(&mut server_config);
        http_config.validate()?;
        broker_config.validate()?;
        server_config.validate()?;
        let mut storage = self.storage_settings()?;
        let retention_check_interval_ms = self
            .retention_check_interval_ms
            .unwrap_or(RETENTION_CHECK_INTERVAL_MS_DEFAULT);
        if !(100..=86_400_000).contains(&retention_check_interval_ms) {
            bail!(
                "retention_check_interval_ms must be between 100 and 86400000 (a day), not {retention_check_interval_ms}"
            );
        }
        let log_cleaner_backoff_ms = self.log_cleaner_backoff_ms.unwrap_or(15_000);
        if !(10..=86_400_000).contains(&log_cleaner_backoff_ms) {
            bail!(
                "log_cleaner_backoff_ms must be between 10 and 86400000 (a day), not {log_cleaner_backoff_ms}"
            );
        }
        if broker_config.cleaner.dedupe_buffer_bytes < 1 << 20 {
            bail!(
                "log_cleaner_dedupe_buffer_bytes must be at least 1MiB, not {}",
                broker_config.cleaner.dedupe_buffer_bytes
            );
        }
        if broker_config.cleaner.io_bytes_per_second == Some(0) {
            bail!(
                "log_cleaner_io_max_bytes_per_second must be more than 0 (leave it unset for no limit)"
            );
        }

        let authorizer = self.authorizer()?;
        if storage.as_ref().is_some_and(|s| s.metadata.is_some()) && listeners.len() > 1 {
            bail!(
                "cluster mode (--metadata) takes one Kafka listener: each broker registers one address, which every broker lists; give --listeners one entry"
            );
        }
        self.apply_memory_limit(
            &mut broker_config,
            &mut server_config,
            &mut http_config,
            storage.as_mut(),
        )?;
        Ok(Resolved {
            data_dir,
            listeners,
            advertised_listeners,
            tls,
            sasl,
            authorizer,
            advertised_host: self.advertised_host,
            http_tls: self.http_tls.unwrap_or(false),
            http,
            http_config,
            auth,
            broker_config,
            server_config,
            storage,
            retention_check_interval: Duration::from_millis(retention_check_interval_ms),
            log_cleaner_backoff: Duration::from_millis(log_cleaner_backoff_ms),
        })
    }

    /// The Kafka listeners (`--listeners`, else one PLAINTEXT listener on `--kafka-addr`), their
    /// advertised addresses, and the TLS settings and SASL mechanisms when a listener needs
    /// them.
    #[allow(clippy::type_complexity)]
    fn listeners(
        &self,
    ) -> anyhow::Result<(
        Vec<ListenerSpec>,
        Vec<ListenerSpec>,
        Option<TlsSettings>,
        Option<Vec<Mechanism>>,
    )> {
        let listeners = match self.listeners.as_deref() {
            Some(text) => parse_listeners(text, "listeners")?,
            None => {
                let addr = self.kafka_addr.as_deref().unwrap_or("127.0.0.1:9092");
                parse_listeners(&format!("PLAINTEXT://{addr}"), "kafka_addr")?
            }
        };
        // Before the TLS files: a SASL_SSL listener without mechanisms names the missing flag
        // first.
        let sasl = self.sasl(&listeners)?;
        let advertised = match self.advertised_listeners.as_deref() {
            Some(text) => parse_listeners(text, "advertised_listeners")?,
            None => Vec::new(),
        };
        for a in &advertised {
            if !listeners.iter().any(|l| l.protocol == a.protocol) {
                bail!(
                    "advertised_listeners names {a}, but no listener is {}: advertise only the protocols of --listeners",
                    a.protocol
                );
            }
            if a.port == 0 || a.host.is_empty() {
                bail!("advertised_listeners: {a} must name the host and port clients connect to");
            }
        }
        let needs_tls = listeners.iter().find(|l| l.protocol.uses_tls());
        let tls = match (&self.tls_cert, &self.tls_key) {
            (Some(cert), Some(key)) => Some(TlsSettings {
                cert: cert.clone(),
                key: key.clone(),
                client_ca: self.tls_client_ca.clone(),
                mapper: PrincipalMapper::parse(
                    self.ssl_principal_mapping_rules.as_deref().unwrap_or(""),
                )?,
            }),
            (None, None) if needs_tls.is_some() => bail!(
                "{} listener needs --tls-cert and --tls-key (PEM files; see docs/security.md)",
                match needs_tls.map(|l| l.protocol) {
                    Some(SecurityProtocol::SaslSsl) => "a SASL_SSL",
                    _ => "an SSL",
                }
            ),
            (None, None) => None,
            (Some(_), None) => bail!("--tls-cert needs --tls-key, the certificate's private key"),
            (None, Some(_)) => bail!("--tls-key needs --tls-cert, the certificate it belongs to"),
        };
        if tls.is_none() && self.tls_client_ca.is_some() {
            bail!("--tls-client-ca needs --tls-cert and --tls-key");
        }
        let http_tls = self.http_tls.unwrap_or(false);
        if http_tls && tls.is_none() {
            bail!("--http-tls needs --tls-cert and --tls-key (PEM files; see docs/security.md)");
        }
        let needs_tls = needs_tls.is_some() || http_tls;
        Ok((listeners, advertised, tls.filter(|_| needs_tls), sasl))
    }

    /// `--authorizer` and `--super-users`: the super users when ACL checks are on.
    fn authorizer(&self) -> anyhow::Result<Option<Vec<sluice_security::Principal>>> {
        let on = match self.authorizer.as_deref().map(str::trim) {
            None | Some("") | Some("none") => false,
            Some("acl") => true,
            Some(other) => bail!("invalid authorizer {other:?}: use \"acl\" or \"none\""),
        };
        let super_users = self
            .super_users
            .as_deref()
            .unwrap_or("")
            .split(';')
            .map(str::trim)
            .filter(|p| !p.is_empty())
            .map(|p| {
                p.parse::<sluice_security::Principal>()
                    .map_err(|e| anyhow::anyhow!("invalid super_users: {}", e.message))
            })
            .collect::<anyhow::Result<Vec<_>>>()?;
        if !on && !super_users.is_empty() {
            bail!(
                "--super-users needs --authorizer acl (without it every client may do everything)"
            );
        }
        Ok(on.then_some(super_users))
    }

    /// The SASL mechanisms when a listener needs them. PLAIN sends the password itself, so a
    /// SASL_PLAINTEXT listener offers it only when `sasl_plain_over_plaintext` says so.
    fn sasl(&self, listeners: &[ListenerSpec]) -> anyhow::Result<Option<Vec<Mechanism>>> {
        let sasl_listener = listeners.iter().find(|l| l.protocol.uses_sasl());
        let mechanisms = match (self.sasl_mechanisms.as_deref(), sasl_listener) {
            (None, None) => return Ok(None),
            (None, Some(l)) => bail!(
                "listener {l}: SASL listeners need --sasl-mechanisms (e.g. SCRAM-SHA-512,SCRAM-SHA-256; see docs/security.md)"
            ),
            (Some(_), None) => bail!(
                "--sasl-mechanisms needs a SASL_PLAINTEXT or SASL_SSL listener in --listeners"
            ),
            (Some(text), Some(_)) => parse_mechanisms(text).map_err(anyhow::Error::msg)?,
        };
        if mechanisms.contains(&Mechanism::Plain)
            && !self.sasl_plain_over_plaintext.unwrap_or(false)
            && let Some(l) = listeners
                .iter()
                .find(|l| l.protocol == SecurityProtocol::SaslPlaintext)
        {
            bail!(
                "listener {l}: PLAIN would send passwords in clear text on SASL_PLAINTEXT; use SASL_SSL, drop PLAIN from --sasl-mechanisms, or force it with --sasl-plain-over-plaintext true"
            );
        }
        Ok(Some(mechanisms))
    }

    /// Object-storage mode's settings when `storage` names a bucket (`local`, empty or unset:
    /// none).
    fn storage_settings(&self) -> anyhow::Result<Option<StorageSettings>> {
        let metadata = match self.metadata.as_deref().map(str::trim) {
            None | Some("") => None,
            Some(url) => Some(sluice_cluster::MetadataUrl::parse(url)?),
        };
        let rack = self
            .rack
            .as_deref()
            .map(str::trim)
            .filter(|r| !r.is_empty())
            .map(str::to_owned);
        let url = match self.storage.as_deref().map(str::trim) {
            None | Some("") | Some("local") if metadata.is_some() => bail!(
                "--metadata needs --storage s3://BUCKET/PREFIX: in cluster mode every broker \
                 keeps its data in one shared bucket"
            ),
            None | Some("") | Some("local") => return Ok(None),
            Some(url) => sluice_objstore::StorageUrl::parse(url)
                .map_err(|e| anyhow::anyhow!("invalid --storage {url:?}: {e}"))?,
        };
        let linger = self.object_linger_ms.unwrap_or(OBJECT_LINGER_MS_DEFAULT);
        if !(1..=60_000).contains(&linger) {
            bail!("object_linger_ms must be between 1 and 60000, not {linger}");
        }
        let max_bytes = self
            .object_max_bytes
            .map_or(OBJECT_MAX_BYTES_DEFAULT, ByteSize::bytes);
        if !(64 << 10..=1 << 30).contains(&max_bytes) {
            bail!(
                "object_max_bytes must be between 64KiB and 1GiB, not {}",
                ByteSize(max_bytes)
            );
        }
        let puts_in_flight = self
            .object_puts_in_flight
            .unwrap_or(OBJECT_PUTS_IN_FLIGHT_DEFAULT);
        if !(1..=64).contains(&puts_in_flight) {
            bail!("object_puts_in_flight must be between 1 and 64, not {puts_in_flight}");
        }
        let put_timeout_ms = self
            .object_put_timeout_ms
            .unwrap_or(OBJECT_PUT_TIMEOUT_MS_DEFAULT);
        if !(100..=3_600_000).contains(&put_timeout_ms) {
            bail!(
                "object_put_timeout_ms must be between 100 and 3600000 (an hour), not {put_timeout_ms}"
            );
        }
        Ok(Some(StorageSettings {
            url,
            linger: Duration::from_millis(linger),
            max_bytes: max_bytes as usize,
            puts_in_flight,
            put_timeout: Duration::from_millis(put_timeout_ms),
            cache_bytes: self
                .cache_bytes
                .map_or(CACHE_BYTES_DEFAULT, ByteSize::bytes),
            memory_bytes: 0,
            metadata,
            rack,
        }))
    }

    /// The HTTP API's limits and timeouts, all but the body size cap, which
    /// [`Settings::apply_memory_limit`] settles.
    fn http_config(&self) -> HttpConfig {
        let mut c = HttpConfig::default();
        if let Some(v) = self.http_max_body_bytes {
            c.max_body_bytes = v;
        }
        if let Some(v) = self.http_max_records_per_request {
            c.max_records_per_request = v;
        }
        if let Some(v) = self.http_max_concurrent_requests {
            c.max_concurrent_requests = v;
        }
        if let Some(v) = self.http_header_read_timeout_ms {
            c.header_read_timeout_ms = v;
        }
        if let Some(v) = self.http_body_read_timeout_ms {
            c.body_read_timeout_ms = v;
        }
        if let Some(v) = self.http_idle_timeout_ms {
            c.idle_timeout_ms = v;
        }
        if let Some(v) = self.http_max_connections {
            c.max_connections = v;
        }
        c
    }

    /// Resolves the HTTP address. An open HTTP API on a non-loopback address is refused here,
    /// before anything binds, so it is never reachable, not even briefly.
    fn http_listen(&self, auth: &Auth) -> anyhow::Result<Option<HttpListen>> {
        let addr = self
            .http_addr
            .clone()
            .unwrap_or_else(|| "127.0.0.1:8080".to_owned());
        if addr.eq_ignore_ascii_case("off") {
            return Ok(None);
        }
        let addrs: Vec<SocketAddr> = std::net::ToSocketAddrs::to_socket_addrs(&addr)
            .with_context(|| format!("resolving the HTTP address {addr}"))?
            .collect();
        let allow_anonymous = self.http_allow_anonymous.unwrap_or(false);
        if !auth.enabled()
            && !allow_anonymous
            && let Some(open) = addrs.iter().find(|a| !a.ip().is_loopback())
        {
            bail!(
                "the HTTP API would listen on {open} without API keys: configure http_api_keys in the config file (see `sluice api-key new`), bind it to a loopback address, or pass --http-allow-anonymous"
            );
        }
        Ok(Some(HttpListen { addr, addrs }))
    }

    /// Topics, the log, groups and syncing; the memory-derived fetch cap and budget are set by
    /// [`Settings::apply_memory_limit`].
    fn broker_config(&self, data_dir: &Path) -> BrokerConfig {
        let mut c = BrokerConfig::new(data_dir);
        if let Some(v) = self.auto_create_topics {
            c.auto_create_topics = v;
        }
        if let Some(v) = self.default_partitions {
            c.default_partitions = v;
        }
        if let Some(v) = self.retention_ms {
            c.log.retention_ms = (v >= 0).then_some(v);
        }
        if let Some(v) = self.retention_bytes {
            c.log.retention_bytes = (v >= 0).then_some(v as u64);
        }
        if let Some(v) = self.segment_bytes {
            c.log.segment_bytes = v;
        }
        if let Some(v) = self.segment_ms {
            c.log.segment_ms = Some(v);
        }
        self.apply_groups(&mut c.groups);
        if let Some(v) = self.log_cleaner_dedupe_buffer_bytes {
            c.cleaner.dedupe_buffer_bytes = v.bytes();
        }
        if let Some(v) = self.log_cleaner_io_max_bytes_per_second {
            c.cleaner.io_bytes_per_second = Some(v.bytes());
        }
        if let Some(v) = self.sync_threads {
            c.sync_threads = v;
        }
        match self.flush_interval_ms {
            None | Some(0) => {}
            Some(ms) => c.flush = FlushPolicy::IntervalMs(ms),
        }
        if let Some(v) = self.max_message_bytes {
            c.max_message_bytes = v;
        }
        c
    }

    fn apply_groups(&self, groups: &mut sluice_broker::groups::GroupConfig) {
        if let Some(v) = self.group_initial_rebalance_delay_ms {
            groups.classic.initial_rebalance_delay_ms = v;
        }
        if let Some(v) = self.group_consumer_heartbeat_interval_ms {
            groups.consumer.heartbeat_interval_ms = v;
        }
        if let Some(v) = self.group_consumer_session_timeout_ms {
            groups.consumer.session_timeout_ms = v;
        }
        if let Some(v) = self.groups_max {
            groups.groups_max = v;
        }
        let share = &mut groups.share;
        if let Some(v) = self.group_share_session_timeout_ms {
            share.session_timeout_ms = v;
        }
        if let Some(v) = self.group_share_heartbeat_interval_ms {
            share.heartbeat_interval_ms = v;
        }
        if let Some(v) = self.group_share_record_lock_duration_ms {
            share.record_lock_duration_ms = v;
        }
        if let Some(v) = self.group_share_delivery_count_limit {
            share.delivery_count_limit = v;
        }
        if let Some(v) = self.group_share_partition_max_record_locks {
            share.max_record_locks = v;
        }
        if let Some(v) = self.group_share_max_size {
            share.members_max = v;
        }
    }

    /// Sets the memory budget and the three sizes that draw on it: the largest Kafka request,
    /// the largest Fetch response (shared by HTTP reads) and the largest HTTP body.
    fn apply_memory_limit(
        &self,
        broker: &mut BrokerConfig,
        server: &mut ServerConfig,
        http: &mut HttpConfig,
        storage: Option<&mut StorageSettings>,
    ) -> anyhow::Result<()> {
        let memory_limit = self.memory_limit.map_or(
            sluice_broker::memory::MEMORY_LIMIT_DEFAULT as u64,
            ByteSize::bytes,
        );
        let memory_limit = usize::try_from(memory_limit).unwrap_or(usize::MAX);
        // Object storage's buffers come out of the budget first: the flusher's objects and
        // the recent-objects cache. At most half of it, so requests keep the rest.
        let (memory_limit, budget) = match storage {
            None => (
                memory_limit,
                format!("memory_limit ({})", ByteSize(memory_limit as u64)),
            ),
            Some(storage) => {
                storage.memory_bytes = RECENT_OBJECTS_BYTES_MAX.min(memory_limit / 8);
                let flush = storage.flush_bytes();
                if flush.saturating_add(storage.memory_bytes) > memory_limit / 2 {
                    bail!(
                        "object storage holds up to {} of objects being written ((1 open + {} sealed + {} in flight) x object_max_bytes {}): that is more than half of memory_limit ({}); lower object_max_bytes or object_puts_in_flight, or raise memory_limit",
                        ByteSize(flush as u64),
                        sluice_objstore::flush::DEFAULT_SEALED_MAX,
                        storage.puts_in_flight,
                        ByteSize(storage.max_bytes as u64),
                        ByteSize(memory_limit as u64)
                    );
                }
                let left = memory_limit - flush - storage.memory_bytes;
                let budget = format!(
                    "memory_limit ({}) less object storage's buffers ({})",
                    ByteSize(memory_limit as u64),
                    ByteSize(left as u64)
                );
                (left, budget)
            }
        };
        let to_usize = |v: ByteSize| usize::try_from(v.bytes()).unwrap_or(usize::MAX);
        // One request, and one fetch response, must fit in the budget with room to spare for
        // the others; unset, both limits shrink with a small budget instead of refusing to start.
        let half_budget = memory_limit / 2;
        server.max_request_bytes = match self.max_request_bytes.map(to_usize) {
            Some(v) if v > half_budget => bail!(
                "max_request_bytes ({v}) must be at most half of {}: raise memory_limit or lower max_request_bytes",
                budget
            ),
            Some(v) => v,
            None => server.max_request_bytes.min(memory_limit / 4),
        };
        broker.fetch_max_bytes = match self.fetch_max_bytes.map(to_usize) {
            Some(0) => bail!("fetch_max_bytes must be at least 1"),
            Some(v) if v > half_budget => bail!(
                "fetch_max_bytes ({v}) must be at most half of {}: raise memory_limit or lower fetch_max_bytes",
                budget
            ),
            Some(v) => v,
            None => broker.fetch_max_bytes.min(memory_limit / 4),
        };
        if server.max_request_bytes < 1024 || broker.fetch_max_bytes < 1024 {
            bail!(
                "{budget} is too small to serve requests: give memory_limit at least 4KiB, and 64MiB or more in practice"
            );
        }
        broker.memory_limit = memory_limit;
        // The HTTP API draws on the same budget: its bodies follow the same rule, and its reads
        // share the Kafka fetch cap.
        match self.http_max_body_bytes {
            Some(v) if v > half_budget => bail!(
                "http_max_body_bytes ({v}) must be at most half of {}: raise memory_limit or lower http_max_body_bytes",
                budget
            ),
            Some(_) => {}
            None => http.max_body_bytes = http.max_body_bytes.min(memory_limit / 4),
        }
        http.fetch_max_bytes = broker.fetch_max_bytes;
        Ok(())
    }

    /// Kafka connection timeouts and counts.
    fn apply_kafka_connections(&self, server: &mut ServerConfig) {
        if let Some(v) = self.request_timeout_ms {
            server.request_timeout = Duration::from_millis(v);
        }
        if let Some(v) = self.connections_max_idle_ms {
            server.connections_max_idle = Duration::from_millis(v);
        }
        if let Some(v) = self.max_connections {
            server.max_connections = v;
        }
        if let Some(v) = self.max_connections_per_ip {
            server.max_connections_per_ip = v;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::{Args, FromArgMatches};

    /// Parses `args` as flags of a command that has only [`Settings`]; the environment is what
    /// the test process has, so tests use variables nobody else sets.
    fn from_flags(args: &[&str]) -> Settings {
        let cmd = Settings::augment_args(clap::Command::new("serve"));
        let matches = cmd
            .try_get_matches_from(std::iter::once("serve").chain(args.iter().copied()))
            .unwrap();
        Settings::from_arg_matches(&matches).unwrap()
    }

    #[test]
    fn flags_override_the_file_and_file_only_values_are_used() {
        let file = parse_config(
            "kafka_addr = \"127.0.0.1:1\"\nsegment_bytes = 4096\nmemory_limit = \"1GiB\"\n",
        )
        .unwrap();
        let merged = from_flags(&["--kafka-addr", "127.0.0.1:2"]).or(file);
        assert_eq!(merged.kafka_addr.as_deref(), Some("127.0.0.1:2"));
        assert_eq!(merged.segment_bytes, Some(4096));
        assert_eq!(merged.memory_limit, Some(ByteSize(1 << 30)));
        assert_eq!(merged.retention_ms, None);
    }

    #[test]
    fn environment_overrides_the_file_and_flags_override_the_environment() {
        // No other test parses groups_max from flags or the environment, so this cannot change
        // their outcome.
        // SAFETY: the other threads of this test binary touch the environment only through
        // std's synchronized `env` functions (clap's `env = ...`); nothing calls libc getenv.
        unsafe { std::env::set_var("SLUICE_GROUPS_MAX", "7") };
        let file = || parse_config("groups_max = 3\nsync_threads = 5\n").unwrap();
        let from_env = from_flags(&[]).or(file());
        let from_flag = from_flags(&["--groups-max", "9"]).or(file());
        // SAFETY: as above.
        unsafe { std::env::remove_var("SLUICE_GROUPS_MAX") };
        assert_eq!(from_env.groups_max, Some(7));
        assert_eq!(from_env.sync_threads, Some(5));
        assert_eq!(from_flag.groups_max, Some(9));
    }

    #[test]
    fn unknown_toml_keys_are_refused_by_name() {
        let err = parse_config("kafka_addr = \"127.0.0.1:1\"\nkafka_adr = \"x\"\n").unwrap_err();
        assert!(format!("{err:#}").contains("kafka_adr"), "{err:#}");
        // Flag-only: the config file cannot name another config file.
        let err = parse_config("config = \"other.toml\"\n").unwrap_err();
        assert!(format!("{err:#}").contains("config"), "{err:#}");
    }

    #[test]
    fn sizes_take_units_from_the_file_and_flags() {
        let file = parse_config("fetch_max_bytes = \"8MiB\"\nmax_request_bytes = 4096\n").unwrap();
        assert_eq!(file.fetch_max_bytes, Some(ByteSize(8 << 20)));
        assert_eq!(file.max_request_bytes, Some(ByteSize(4096)));
        let flags = from_flags(&["--memory-limit", "256MiB"]);
        assert_eq!(flags.memory_limit, Some(ByteSize(256 << 20)));
    }

    #[test]
    fn api_keys_come_from_the_file_only() {
        let cmd = Settings::augment_args(clap::Command::new("serve"));
        assert!(cmd.get_arguments().all(|a| a.get_id() != "http_api_keys"));
        assert!(Settings::KEYS.contains(&"http_api_keys"));
    }

    #[test]
    fn defaults_resolve_and_checks_name_the_setting() {
        let settings = || Settings {
            http_addr: Some("off".to_owned()),
            ..Settings::default()
        };
        let resolved = settings().resolve().unwrap();
        assert!(resolved.http.is_none());
        assert_eq!(
            resolved.listeners,
            parse_listeners("PLAINTEXT://127.0.0.1:9092", "listeners").unwrap()
        );
        for (bad, message) in [
            (
                Settings {
                    groups_max: Some(0),
                    ..settings()
                },
                "groups_max must be at least 1",
            ),
            (
                Settings {
                    group_consumer_heartbeat_interval_ms: Some(45_000),
                    ..settings()
                },
                "less than group_consumer_session_timeout_ms",
            ),
            (
                Settings {
                    memory_limit: Some(ByteSize(64 << 20)),
                    fetch_max_bytes: Some(ByteSize(40 << 20)),
                    ..settings()
                },
                "fetch_max_bytes (41943040) must be at most half of memory_limit (64MiB)",
            ),
            (
                Settings {
                    http_idle_timeout_ms: Some(0),
                    ..settings()
                },
                "http_idle_timeout_ms must be at least 1",
            ),
            (
                Settings {
                    request_timeout_ms: Some(0),
                    ..settings()
                },
                "request_timeout_ms must be at least 1",
            ),
        ] {
            let err = bad.resolve().err().expect(message);
            assert!(format!("{err:#}").contains(message), "{err:#}");
        }
    }

    #[test]
    fn object_storage_buffers_come_out_of_the_memory_limit() {
        let object = |memory: u64, max_bytes: u64, in_flight: usize| Settings {
            http_addr: Some("off".to_owned()),
            storage: Some("s3://bucket/prefix".to_owned()),
            memory_limit: Some(ByteSize(memory)),
            object_max_bytes: Some(ByteSize(max_bytes)),
            object_puts_in_flight: Some(in_flight),
            ..Settings::default()
        };
        // Defaults: 512 MiB, (1 open + 4 sealed + 4 in flight) x 4 MiB = 36 MiB of flush
        // objects and a 64 MiB recent-objects cache; requests get the rest.
        let resolved = Settings {
            http_addr: Some("off".to_owned()),
            storage: Some("s3://bucket/prefix".to_owned()),
            ..Settings::default()
        }
        .resolve()
        .unwrap();
        let storage = resolved.storage.unwrap();
        assert_eq!(storage.put_timeout, Duration::from_secs(30));
        assert_eq!(storage.flush_bytes(), 36 << 20);
        assert_eq!(storage.memory_bytes, 64 << 20);
        assert_eq!(resolved.broker_config.memory_limit, (512 - 36 - 64) << 20);
        // Local mode keeps the whole budget.
        let local = Settings {
            http_addr: Some("off".to_owned()),
            ..Settings::default()
        };
        assert_eq!(
            local.resolve().unwrap().broker_config.memory_limit,
            512 << 20
        );
        // 64 MiB with small objects: 7 MiB of objects and an 8 MiB cache fit in half of it.
        let resolved = object(64 << 20, 1 << 20, 2).resolve().unwrap();
        assert_eq!(resolved.broker_config.memory_limit, (64 - 7 - 8) << 20);
        // With the default objects they do not: one line that names what to change.
        let err = object(64 << 20, 4 << 20, 4).resolve().err().unwrap();
        let err = format!("{err:#}");
        assert!(
            err.contains("object storage holds up to 36MiB")
                && err.contains("object_max_bytes")
                && err.contains("memory_limit (64MiB)"),
            "{err}"
        );
        // Request limits are checked against what is left.
        let mut big_fetch = object(128 << 20, 1 << 20, 2);
        big_fetch.fetch_max_bytes = Some(ByteSize(60 << 20));
        let err = format!("{:#}", big_fetch.resolve().err().unwrap());
        assert!(err.contains("less object storage's buffers"), "{err}");
        // The PUT deadline: set, and refused out of range by name.
        let mut put = object(128 << 20, 1 << 20, 2);
        put.object_put_timeout_ms = Some(5_000);
        let storage = put.resolve().unwrap().storage.unwrap();
        assert_eq!(storage.put_timeout, Duration::from_secs(5));
        let mut put = object(128 << 20, 1 << 20, 2);
        put.object_put_timeout_ms = Some(10);
        let err = format!("{:#}", put.resolve().err().unwrap());
        assert!(
            err.contains("object_put_timeout_ms must be between 100"),
            "{err}"
        );
    }

    #[test]
    fn listeners_resolve_and_bad_ones_are_refused_by_name() {
        let base = || Settings {
            http_addr: Some("off".to_owned()),
            ..Settings::default()
        };
        // --listeners wins over --kafka-addr; SSL needs the TLS files.
        let resolved = Settings {
            kafka_addr: Some("127.0.0.1:1".to_owned()),
            listeners: Some("SSL://127.0.0.1:9093,PLAINTEXT://127.0.0.1:9092".to_owned()),
            tls_cert: Some("server.crt".into()),
            tls_key: Some("server.key".into()),
            ssl_principal_mapping_rules: Some("RULE:^CN=(.*)$/$1/L".to_owned()),
            ..base()
        }
        .resolve()
        .unwrap();
        let ports: Vec<u16> = resolved.listeners.iter().map(|l| l.port).collect();
        assert_eq!(ports, [9093, 9092]);
        let tls = resolved.tls.unwrap();
        assert_eq!(tls.mapper.map("CN=Alice").as_deref(), Some("alice"));
        for (bad, message) in [
            (
                Settings {
                    listeners: Some("SASL_SSL://127.0.0.1:9094".to_owned()),
                    ..base()
                },
                "listener SASL_SSL://127.0.0.1:9094: SASL listeners need --sasl-mechanisms",
            ),
            (
                Settings {
                    listeners: Some("SASL_SSL://127.0.0.1:9094".to_owned()),
                    sasl_mechanisms: Some("SCRAM-SHA-512".to_owned()),
                    ..base()
                },
                "a SASL_SSL listener needs --tls-cert and --tls-key",
            ),
            (
                Settings {
                    listeners: Some("SASL_PLAINTEXT://127.0.0.1:9094".to_owned()),
                    sasl_mechanisms: Some("SCRAM-SHA-512,PLAIN".to_owned()),
                    ..base()
                },
                "listener SASL_PLAINTEXT://127.0.0.1:9094: PLAIN would send passwords in clear text",
            ),
            (
                Settings {
                    listeners: Some("SASL_PLAINTEXT://127.0.0.1:9094".to_owned()),
                    sasl_mechanisms: Some("SCRAM-SHA-1".to_owned()),
                    ..base()
                },
                "invalid sasl_mechanisms: unknown mechanism 'SCRAM-SHA-1'",
            ),
            (
                Settings {
                    listeners: Some("PLAINTEXT://127.0.0.1:9092".to_owned()),
                    sasl_mechanisms: Some("SCRAM-SHA-512".to_owned()),
                    ..base()
                },
                "--sasl-mechanisms needs a SASL_PLAINTEXT or SASL_SSL listener",
            ),
            (
                Settings {
                    listeners: Some("SSL://127.0.0.1:9093".to_owned()),
                    ..base()
                },
                "an SSL listener needs --tls-cert and --tls-key",
            ),
            (
                Settings {
                    listeners: Some("SSL://127.0.0.1:9093".to_owned()),
                    tls_cert: Some("server.crt".into()),
                    ..base()
                },
                "--tls-cert needs --tls-key",
            ),
            (
                Settings {
                    listeners: Some("PLAINTEXT://127.0.0.1:9092".to_owned()),
                    advertised_listeners: Some("SSL://example.com:9093".to_owned()),
                    ..base()
                },
                "advertised_listeners names SSL://example.com:9093, but no listener is SSL",
            ),
            (
                Settings {
                    listeners: Some("PLAINTEXT://127.0.0.1:9092,SSL://127.0.0.1:9092".to_owned()),
                    ..base()
                },
                "port 9092 is used by both",
            ),
            (
                Settings {
                    listeners: Some("SSL://127.0.0.1:9093".to_owned()),
                    tls_cert: Some("server.crt".into()),
                    tls_key: Some("server.key".into()),
                    ssl_principal_mapping_rules: Some("RULE:x".to_owned()),
                    ..base()
                },
                "invalid ssl_principal_mapping_rules",
            ),
            (
                Settings {
                    kafka_addr: Some("127.0.0.1".to_owned()),
                    ..base()
                },
                "invalid kafka_addr: 'PLAINTEXT://127.0.0.1' has no port",
            ),
            (
                Settings {
                    listeners: Some("PLAINTEXT://127.0.0.1:0,SSL://127.0.0.1:0".to_owned()),
                    tls_cert: Some("server.crt".into()),
                    tls_key: Some("server.key".into()),
                    storage: Some("s3://bucket/prefix".to_owned()),
                    metadata: Some("postgres://sluice@127.0.0.1:5432/sluice".to_owned()),
                    ..base()
                },
                "cluster mode (--metadata) takes one Kafka listener",
            ),
        ] {
            let err = bad.resolve().err().expect(message);
            assert!(format!("{err:#}").contains(message), "{err:#}");
        }
    }

    #[test]
    fn listeners_come_from_the_file_and_flags() {
        let file = parse_config(
            "listeners = \"SSL://127.0.0.1:9093\"\ntls_cert = \"a.crt\"\ntls_key = \"a.key\"\n",
        )
        .unwrap();
        let merged = from_flags(&["--listeners", "PLAINTEXT://127.0.0.1:9092"]).or(file);
        assert_eq!(
            merged.listeners.as_deref(),
            Some("PLAINTEXT://127.0.0.1:9092")
        );
        assert_eq!(merged.tls_cert, Some(PathBuf::from("a.crt")));
    }

    #[test]
    fn open_http_on_a_public_address_is_refused() {
        let settings = Settings {
            http_addr: Some("0.0.0.0:0".to_owned()),
            ..Settings::default()
        };
        let err = settings.resolve().err().expect("refused");
        assert!(format!("{err:#}").contains("without API keys"), "{err:#}");
        let allowed = Settings {
            http_addr: Some("0.0.0.0:0".to_owned()),
            http_allow_anonymous: Some(true),
            ..Settings::default()
        };
        assert!(allowed.resolve().is_ok());
    }

    #[test]
    fn authorizer_super_users_and_http_tls_resolve_or_say_what_is_wrong() {
        let resolved = Settings {
            authorizer: Some("acl".to_owned()),
            super_users: Some("User:admin; User:CN=ops,O=Acme".to_owned()),
            ..Settings::default()
        }
        .resolve()
        .unwrap();
        let supers: Vec<String> = resolved
            .authorizer
            .unwrap()
            .iter()
            .map(ToString::to_string)
            .collect();
        assert_eq!(supers, ["User:admin", "User:CN=ops,O=Acme"]);
        assert!(Settings::default().resolve().unwrap().authorizer.is_none());
        let tls = Settings {
            http_tls: Some(true),
            tls_cert: Some("server.crt".into()),
            tls_key: Some("server.key".into()),
            ..Settings::default()
        }
        .resolve()
        .unwrap();
        assert!(tls.http_tls && tls.tls.is_some());
        for (bad, message) in [
            (
                Settings {
                    authorizer: Some("simple".to_owned()),
                    ..Settings::default()
                },
                "invalid authorizer \"simple\"",
            ),
            (
                Settings {
                    super_users: Some("User:admin".to_owned()),
                    ..Settings::default()
                },
                "--super-users needs --authorizer acl",
            ),
            (
                Settings {
                    authorizer: Some("acl".to_owned()),
                    super_users: Some("admin".to_owned()),
                    ..Settings::default()
                },
                "invalid super_users",
            ),
            (
                Settings {
                    http_tls: Some(true),
                    ..Settings::default()
                },
                "--http-tls needs --tls-cert and --tls-key",
            ),
        ] {
            let err = bad.resolve().err().expect(message);
            assert!(format!("{err:#}").contains(message), "{err:#}");
        }
    }
}
