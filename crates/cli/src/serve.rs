//! `sluice serve`: settings from a TOML file, `SLUICE_*` environment variables and flags (flags
//! win, then the environment, then the file, then built-in defaults).

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context;
use sluice_broker::Broker;
use sluice_http::AppState;
use sluice_http::auth::Auth;

use sluice_server::listeners::SecurityProtocol;

use crate::settings::{HttpListen, Resolved, Settings, StorageSettings, read_config_file};

/// Run the broker.
///
/// Example:
///   sluice serve --data-dir /var/lib/sluice --kafka-addr 0.0.0.0:9092 --http-addr 127.0.0.1:8080
///
/// TLS (see docs/security.md):
///   sluice serve --listeners "SSL://0.0.0.0:9093,PLAINTEXT://127.0.0.1:9092" \
///     --tls-cert server.crt --tls-key server.key [--tls-client-ca ca.crt]
///
/// SASL (SCRAM-SHA-512, SCRAM-SHA-256, PLAIN; users from `sluice user add`):
///   sluice serve --listeners "SASL_SSL://0.0.0.0:9094,PLAINTEXT://127.0.0.1:9092" \
///     --tls-cert server.crt --tls-key server.key --sasl-mechanisms SCRAM-SHA-512,PLAIN
///
/// Every setting can also come from a TOML file (--config) or an environment variable; flags win
/// over the environment, which wins over the file. A port of 0 picks a free port; the bound
/// addresses are logged as `kafka listening on HOST:PORT` (followed by ` (SSL)` on an SSL
/// listener) and `http listening on HOST:PORT`. The TLS files are read again on SIGHUP and
/// when they change; open connections keep going.
///
/// HTTP API keys live in the config file only, as `[[http_api_keys]]` tables (name, sha256,
/// read, write, admin; see docs/http-api.md and `sluice api-key new`). The file is read again
/// when it changes or on SIGHUP, and new keys apply without a restart. With no keys the HTTP
/// API is open to anyone who can reach it, so it refuses a non-loopback --http-addr unless
/// --http-allow-anonymous is given.
#[derive(Debug, clap::Args)]
#[command(verbatim_doc_comment)]
pub struct ServeArgs {
    /// TOML config file (keys: data_dir, kafka_addr, listeners, advertised_listeners, tls_cert,
    /// tls_key, tls_client_ca, ssl_principal_mapping_rules, sasl_mechanisms,
    /// sasl_plain_over_plaintext, authorizer, super_users, http_addr, http_tls, http_allow_anonymous,
    /// http_max_body_bytes, http_max_records_per_request, http_max_concurrent_requests,
    /// http_header_read_timeout_ms, http_body_read_timeout_ms, http_idle_timeout_ms,
    /// http_max_connections, http_api_keys, advertised_host, auto_create_topics,
    /// default_partitions, retention_ms, retention_bytes, retention_check_interval_ms,
    /// log_cleaner_dedupe_buffer_bytes, log_cleaner_io_max_bytes_per_second,
    /// log_cleaner_backoff_ms, segment_bytes, segment_ms, flush_interval_ms, sync_threads, max_request_bytes,
    /// memory_limit, fetch_max_bytes,
    /// request_timeout_ms, connections_max_idle_ms, max_connections, max_connections_per_ip,
    /// max_message_bytes, group_initial_rebalance_delay_ms,
    /// group_consumer_session_timeout_ms, group_consumer_heartbeat_interval_ms,
    /// group_share_session_timeout_ms, group_share_heartbeat_interval_ms,
    /// group_share_record_lock_duration_ms, group_share_delivery_count_limit,
    /// group_share_partition_max_record_locks, group_share_max_size, groups_max,
    /// storage, object_linger_ms, object_max_bytes, object_puts_in_flight,
    /// object_put_timeout_ms, cache_bytes, metadata, rack)
    #[arg(long, env = "SLUICE_CONFIG")]
    config: Option<PathBuf>,
    // Every other setting; each is a flag, a `SLUICE_*` variable and a TOML key.
    #[command(flatten)]
    settings: Settings,
}

/// How often the config file is checked for changed HTTP API keys.
const KEYS_RELOAD_CHECK_INTERVAL: Duration = Duration::from_secs(2);

/// How often a broker in cluster mode looks for other brokers' changes to the users and ACLs.
const SHARED_FILES_SYNC_INTERVAL: Duration = Duration::from_secs(1);

/// Task polls between two checks for socket readiness on each runtime thread.
const RUNTIME_EVENT_INTERVAL: u32 = 8;

pub fn run(args: ServeArgs) -> anyhow::Result<()> {
    let file = match &args.config {
        Some(path) => read_config_file(path)?,
        None => Settings::default(),
    };
    // Flags already won over the environment inside clap.
    let Resolved {
        data_dir,
        listeners,
        advertised_listeners,
        tls,
        sasl,
        authorizer,
        http,
        http_tls,
        http_config,
        auth,
        mut broker_config,
        server_config,
        storage,
        advertised_host,
        retention_check_interval,
        log_cleaner_backoff,
    } = args.settings.or(file).resolve()?;
    // Bad TLS files stop the start here, before anything binds.
    let needs_tls = http_tls || listeners.iter().any(|l| l.protocol.uses_tls());
    let tls = match tls.filter(|_| needs_tls) {
        Some(settings) => Some(sluice_server::tls::TlsState::load(settings)?),
        None => None,
    };
    // A user file or an ACL file that does not load stops the start here too. (In
    // object-storage mode both are opened again once the bucket's copies are restored.)
    let security_dir = data_dir.clone();
    let open_security = move || -> anyhow::Result<_> {
        let sasl = match &sasl {
            Some(mechanisms) => {
                let users = Arc::new(sluice_server::sasl::Users::open(&security_dir)?);
                Some(Arc::new(sluice_server::sasl::Sasl::new(
                    mechanisms.clone(),
                    users,
                )))
            }
            None => None,
        };
        let authorizer = match &authorizer {
            Some(super_users) => Some(Arc::new(
                sluice_security::Authorizer::open(&security_dir, super_users.clone())
                    .context("opening the ACLs (--authorizer acl)")?,
            )),
            None => None,
        };
        Ok((sasl, authorizer))
    };
    let (mut sasl_state, mut authorizer_state) = open_security()?;
    raise_open_files_limit(server_config.max_connections, http_config.max_connections);

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
        let mut kafka = Vec::new();
        for spec in &listeners {
            let addr = spec.bind_addr();
            let listener = tokio::net::TcpListener::bind(&addr)
                .await
                .with_context(|| format!("binding the Kafka listener {spec} to {addr}"))?;
            let bound = listener.local_addr()?;
            // The address clients of this listener are told: --advertised-listeners' entry of
            // its protocol, else the bound port on --advertised-host or the bound IP.
            let advertised = match advertised_listeners.iter().find(|a| a.protocol == spec.protocol) {
                Some(a) => (a.bare_host().to_owned(), i32::from(a.port)),
                None => (
                    advertised_host.clone().unwrap_or_else(|| bound.ip().to_string()),
                    i32::from(bound.port()),
                ),
            };
            broker_config.advertised_listeners.push(advertised);
            kafka.push((listener, bound, spec.protocol));
        }
        (broker_config.advertised_host, broker_config.advertised_port) = broker_config.advertised(0);
        let started = Instant::now();
        // Cluster mode (--metadata): the bucket, PostgreSQL and the registration, then the
        // broker over them. Otherwise one broker, on local disk or on a bucket of its own.
        let joined = match storage.as_ref().and_then(|s| s.metadata.as_ref().map(|m| (s, m))) {
            Some((storage, metadata)) => Some(
                crate::cluster_mode::join(
                    storage,
                    metadata,
                    &data_dir,
                    &broker_config.advertised_host,
                    broker_config.advertised_port as u16,
                    retention_check_interval,
                )
                .await?,
            ),
            None => None,
        };
        let backend = match (&storage, &joined) {
            (Some(storage), None) => Some(open_object_storage(storage, &data_dir).await?),
            _ => None,
        };
        if backend.is_some() {
            // The users and ACLs are the bucket's now.
            (sasl_state, authorizer_state) = open_security()?;
        }
        // The cluster id: the bucket's in object-storage mode, the data directory's on local
        // disk. (In cluster mode, the metadata database's: Broker::open_cluster sets it.)
        if let Some(backend) = &backend {
            broker_config.cluster_id = backend
                .bind_cluster_id(&sluice_broker::config::new_cluster_id(), |id| {
                    sluice_broker::config::check_cluster_id(id).map_err(|e| e.0)
                })
                .await
                .map_err(|e| anyhow::anyhow!("{e}"))?;
        } else if joined.is_none() {
            let (id, created) = sluice_broker::config::load_or_create_cluster_id(
                &data_dir,
                sluice_broker::config::new_cluster_id,
            )?;
            if created {
                tracing::info!(cluster_id = %id, "new cluster id for data directory {}", data_dir.display());
            }
            broker_config.cluster_id = id;
        }
        let (sasl, authorizer) = (sasl_state, authorizer_state);
        let opener = backend.clone().map(|b| b as Arc<dyn sluice_broker::storage::PartitionOpener>);
        let cluster = joined.as_ref().map(|j| {
            (
                Arc::clone(&j.store) as Arc<dyn sluice_broker::storage::PartitionOpener>,
                Arc::clone(&j.meta) as Arc<dyn sluice_broker::cluster::ClusterMeta>,
            )
        });
        let broker = Arc::new(
            tokio::task::spawn_blocking(move || match cluster {
                Some((store, meta)) => Broker::open_cluster(
                    broker_config,
                    Arc::new(sluice_broker::SystemClock),
                    store,
                    meta,
                ),
                None => Broker::open_with(broker_config, Arc::new(sluice_broker::SystemClock), opener),
            })
            .await?
            .with_context(|| format!("opening data directory {}", data_dir.display()))?,
        );
        // Object-storage mode: the users, ACLs and client quotas go to the bucket with the
        // rest of the metadata (those made before the first start, with `sluice user add`,
        // included).
        let security_files = sasl
            .as_ref()
            .map(|s| s.users().store().path().to_owned())
            .into_iter()
            .chain(authorizer.as_ref().map(|a| a.path().to_owned()))
            .chain(std::iter::once(broker.quotas().path().to_owned()))
            .filter(|path| path.exists());
        if backend.is_some() {
            for path in security_files {
                let b = Arc::clone(&broker);
                let durable = tokio::task::spawn_blocking(move || b.record_file(&path)).await?;
                durable.await.context("recording the users, ACLs and client quotas in the bucket")?;
            }
        }
        // Cluster mode: the users, ACLs and client quotas are PostgreSQL's, shared by every
        // broker.
        if joined.is_some() {
            if let Some(sasl) = &sasl {
                let users = Arc::clone(sasl.users());
                let path = users.store().path().to_owned();
                broker.share_file(&path, Box::new(move || users.reload()));
            }
            if let Some(authorizer) = &authorizer {
                let acls = Arc::clone(authorizer);
                broker.share_file(
                    authorizer.path(),
                    Box::new(move || {
                        if let Err(e) = acls.reload() {
                            tracing::error!(error = %e, "the shared ACLs do not load; keeping the current ones");
                        }
                    }),
                );
            }
            let quotas = Arc::clone(broker.quotas());
            let path = quotas.path().to_owned();
            broker.share_file(
                &path,
                Box::new(move || {
                    if let Err(e) = quotas.reload() {
                        tracing::error!(error = %e, "the shared client quotas do not load; keeping the current ones");
                    }
                }),
            );
            broker
                .sync_shared_files()
                .await
                .context("loading the users, ACLs and client quotas from the metadata store")?;
        }
        if let Some(authorizer) = authorizer {
            let acls = authorizer.snapshot().len();
            broker.set_authorizer(authorizer);
            tracing::info!(acls, "ACL checks on (--authorizer acl)");
        }
        broker.start_cluster_sync();
        tracing::info!(
            data_dir = %broker.config().data_dir.display(),
            cluster_id = %broker.config().cluster_id,
            topics = broker.topics().all().len(),
            elapsed_ms = started.elapsed().as_millis() as u64,
            "opened data directory"
        );
        // Event triggers run on a single broker (local disk or object storage); in cluster
        // mode the HTTP API answers their routes with 503 and says why.
        let triggers = if joined.is_some() {
            None
        } else {
            Some(
                sluice_triggers::Manager::open(Arc::clone(&broker))
                    .await
                    .context("starting the event triggers")?,
            )
        };
        let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
        let http = match &http {
            Some(HttpListen { addr, addrs }) => {
                let listener = tokio::net::TcpListener::bind(&addrs[..])
                    .await
                    .with_context(|| format!("binding the HTTP listener to {addr}"))?;
                let bound = listener.local_addr()?;
                if !auth.enabled() {
                    tracing::warn!("no HTTP API keys configured: the HTTP API on {bound} accepts every request");
                }
                if http_tls {
                    tracing::info!("http listening on {bound} (HTTPS)");
                } else {
                    tracing::info!("http listening on {bound}");
                }
                let storage = match (&backend, &joined) {
                    (Some(b), _) => {
                        let (b, ready) = (b.clone(), b.clone());
                        Some(sluice_http::StorageHooks {
                            series: Arc::new(move || b.render_metrics()),
                            not_ready: Arc::new(move || ready.not_ready()),
                        })
                    }
                    (None, Some(j)) => {
                        let (s, ready) = (Arc::clone(&j.store), Arc::clone(&j.store));
                        Some(sluice_http::StorageHooks {
                            series: Arc::new(move || s.render_metrics()),
                            not_ready: Arc::new(move || ready.not_ready()),
                        })
                    }
                    (None, None) => None,
                };
                let state = AppState::with_storage(Arc::clone(&broker), http_config, Arc::clone(&auth), stop_rx.clone(), storage)
                    .with_triggers(triggers.clone());
                match tls.clone().filter(|_| http_tls) {
                    Some(tls) => Some(tokio::spawn(sluice_http::serve_tls(
                        listener,
                        state,
                        Arc::new(move || tls.config()),
                    ))),
                    None => Some(tokio::spawn(sluice_http::serve(listener, state))),
                }
            }
            None => None,
        };
        // After the HTTP line: whoever waits for this line has both addresses. PLAINTEXT
        // listeners keep the line scripts parse (`kafka listening on HOST:PORT`); others say
        // their protocol after it.
        let limits = sluice_server::limits::ConnectionLimits::new(
            server_config.max_connections,
            server_config.max_connections_per_ip,
        );
        let mut servers = Vec::new();
        for (index, (listener, bound, protocol)) in kafka.into_iter().enumerate() {
            match protocol {
                SecurityProtocol::Plaintext => tracing::info!("kafka listening on {bound}"),
                _ => tracing::info!("kafka listening on {bound} ({protocol})"),
            }
            let endpoint = sluice_server::Endpoint {
                index,
                protocol,
                tls: tls.clone().filter(|_| protocol.uses_tls()),
                sasl: sasl.clone().filter(|_| protocol.uses_sasl()),
                users: sasl.as_ref().map(|s| Arc::clone(s.users())),
            };
            servers.push(tokio::spawn(sluice_server::serve(
                listener,
                endpoint,
                Arc::clone(&limits),
                Arc::clone(&broker),
                server_config,
                stop_rx.clone(),
            )));
        }
        let tls_reload = tls.map(|tls| tokio::spawn(tls.watch(stop_rx.clone())));
        // Users added with `sluice user add` while the broker runs can log in a few
        // seconds later.
        // Cluster mode: other brokers' changes to the users and ACLs, every second.
        let shared_sync = joined.is_some().then(|| {
            let (broker, mut stop) = (Arc::clone(&broker), stop_rx.clone());
            tokio::spawn(async move {
                let failures = sluice_broker::log_limiter::LogLimiter::new(Duration::from_secs(60));
                loop {
                    tokio::select! {
                        () = tokio::time::sleep(SHARED_FILES_SYNC_INTERVAL) => {}
                        _ = stop.changed() => return,
                    }
                    if let Err(e) = broker.sync_shared_files().await
                        && let Some(count) = failures.hit(tokio::time::Instant::now())
                    {
                        tracing::warn!(error = %e, failures = count, "could not check the shared users and ACLs; retrying");
                    }
                }
            })
        });
        let users_reload = sasl
            .as_ref()
            .map(|sasl| tokio::spawn(Arc::clone(sasl.users()).watch(stop_rx.clone())));
        let reload = args.config.clone().map(|path| {
            tokio::spawn(reload_keys(path, Arc::clone(&auth), stop_rx.clone()))
        });
        let retention = {
            let broker = Arc::clone(&broker);
            let mut stop = stop_rx.clone();
            tokio::spawn(async move {
                loop {
                    tokio::select! {
                        _ = tokio::time::sleep(retention_check_interval) => {
                            let broker = Arc::clone(&broker);
                            let _ = tokio::task::spawn_blocking(move || broker.apply_retention()).await;
                        }
                        _ = stop.changed() => break,
                    }
                }
            })
        };
        let cleaner_stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
        if broker.topics().storage_label().is_none() {
            start_log_cleaner(&broker, log_cleaner_backoff, &cleaner_stop)?;
        }
        wait_for_signal().await;
        cleaner_stop.store(true, std::sync::atomic::Ordering::Release);
        tracing::info!("shutting down: closing connections, flushing partitions");
        let _ = stop_tx.send(true);
        for server in servers {
            let _ = server.await;
        }
        if let Some(tls_reload) = tls_reload {
            let _ = tls_reload.await;
        }
        if let Some(shared_sync) = shared_sync {
            let _ = shared_sync.await;
        }
        if let Some(users_reload) = users_reload {
            let _ = users_reload.await;
        }
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
        if let Some(triggers) = &triggers {
            triggers.shutdown().await;
        }
        let b = Arc::clone(&broker);
        tokio::task::spawn_blocking(move || b.shutdown()).await?;
        if let Some(backend) = &backend {
            backend.shutdown().await;
        }
        if let Some(joined) = joined {
            // The groups' leases go first, so their next coordinators take over at once.
            if let Err(e) = broker.groups().release_all().await {
                tracing::warn!(error = %e, "could not release the group leases (they will expire)");
            }
            joined.store.shutdown().await;
            if let Err(e) = joined.registry.deregister().await {
                tracing::warn!(error = %e, "could not deregister from the cluster (its lease will expire)");
            }
        }
        tracing::info!("shut down cleanly");
        anyhow::Ok(())
    })
}

/// Starts the log cleaner of compacted topics (local disk only): a thread of its own, since a
/// pass reads and writes whole segments (appends never wait for it), that cleans the dirtiest
/// due partition, again at once while some are due, else every `backoff`. It stops between
/// passes once `stop` is set; a pass cut short by the process's end leaves files recovery
/// completes or rolls back.
fn start_log_cleaner(
    broker: &Arc<Broker>,
    backoff: Duration,
    stop: &Arc<std::sync::atomic::AtomicBool>,
) -> anyhow::Result<()> {
    use std::sync::atomic::Ordering;
    let (broker, stop) = (Arc::clone(broker), Arc::clone(stop));
    std::thread::Builder::new()
        .name("sluice-log-cleaner".into())
        .spawn(move || {
            while !stop.load(Ordering::Acquire) {
                if broker.clean_dirtiest().is_some() {
                    continue;
                }
                let until = Instant::now() + backoff;
                while !stop.load(Ordering::Acquire) && Instant::now() < until {
                    std::thread::sleep(backoff.min(Duration::from_millis(100)));
                }
            }
        })
        .context("starting the log cleaner thread")?;
    Ok(())
}

/// Opens object-storage mode: logs `storage: s3://BUCKET/PREFIX`, then the bucket's start
/// check, the writer lease and the catch-up with the bucket; any failure is one line.
async fn open_object_storage(
    storage: &StorageSettings,
    data_dir: &std::path::Path,
) -> anyhow::Result<Arc<sluice_objstore::ObjectBackend>> {
    use sluice_objstore::{BucketConfig, ObjectBackend, ObjectSettings};
    tracing::info!("storage: {}", storage.url);
    let config =
        BucketConfig::from_process_env(storage.url.clone()).map_err(|e| anyhow::anyhow!("{e}"))?;
    let settings = ObjectSettings {
        flush: sluice_objstore::flush::FlushSettings {
            linger: storage.linger,
            max_bytes: storage.max_bytes,
            puts_in_flight: storage.puts_in_flight,
            put_timeout: storage.put_timeout,
            ..Default::default()
        },
        cache: sluice_objstore::cache::CacheSettings {
            memory_bytes: storage.memory_bytes,
            disk_bytes: storage.cache_bytes,
            ..sluice_objstore::cache::CacheSettings::new(data_dir)
        },
        lease: Default::default(),
        maintenance: Default::default(),
    };
    let (backend, report) = ObjectBackend::open(
        config,
        data_dir,
        settings,
        Arc::new(sluice_objstore::lease::SystemClock),
    )
    .await
    .map_err(|e| anyhow::anyhow!("{e}"))?;
    tracing::info!(
        epoch = report.epoch,
        objects_applied = report.objects_applied,
        objects_skipped = report.objects_skipped,
        next_object = report.next_sequence,
        catch_up_ms = report.catch_up.as_millis() as u64,
        files_restored = report.files_restored,
        "object storage ready: writer lease held, local index caught up with the bucket"
    );
    Ok(Arc::new(backend))
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

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Args;

    /// The `--config` help lists the TOML keys by hand; it must name exactly the keys the file
    /// accepts, in the order they are declared.
    #[test]
    fn config_help_lists_every_toml_key() {
        let cmd = ServeArgs::augment_args(clap::Command::new("serve"));
        let config = cmd
            .get_arguments()
            .find(|a| a.get_id() == "config")
            .expect("--config");
        let help = config.get_help().expect("help text").to_string();
        let list = help
            .split_once("(keys: ")
            .and_then(|(_, rest)| rest.split_once(')'))
            .expect("a (keys: ...) list")
            .0;
        let listed: Vec<&str> = list.split(',').map(str::trim).collect();
        assert_eq!(listed, Settings::KEYS);
    }
}
