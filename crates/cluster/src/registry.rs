//! The cluster's identity and its broker registry: which brokers are live, and whether this
//! one still is.
//!
//! - [`bind_cluster`]: the first broker of a new database creates the one `sluice.cluster`
//!   row (a random cluster id and the `--storage` URL); every later broker reads it, and one
//!   started with another bucket is refused, so two clusters never share offsets.
//! - [`Registry::register`]: a broker takes a new id from the sequence `broker_ids`, a
//!   random `instance` and a lease (`expires_at`). A background task renews the lease every
//!   [`RegistrySettings::heartbeat`] and, in the same statement, reads the live brokers, so
//!   Kafka Metadata answers come from [`Registry::brokers`] without a query.
//! - [`RegistryStatus`]: what the broker may do. Only a [`RegistryStatus::Live`] broker
//!   acknowledges writes; commits also check the lease inside their own transaction
//!   ([`crate::commit`]), so a broker that lost its row can never commit even if its own view
//!   is late. A renewal updates the broker's row, so it waits for that broker's commits in
//!   flight, which lock the row; a commit takes milliseconds, far inside the renewal timeout.
//! - [`leader_for`]: which live broker leads a partition, the same answer on every broker.
//!
//! Every time that decides liveness is the database's clock (`now()`), never a broker's:
//! brokers' clocks may disagree, the database's is the one referee. A broker's own estimate
//! of its lease (`valid_until` of [`RegistryStatus::Live`]) is counted on its monotonic clock from
//! the moment it *sent* the renewal, before the database read `now()`, so it ends no later
//! than the row's `expires_at` (as long as the two clocks run at the same rate).
//!
//! Lifecycle of a registration (one task per broker process):
//!
//! ```text
//!   register ──► Live ──(no renewal within the lease)──► Lapsed ──(renewal, row still ours)──► Live
//!                 │                                        │
//!                 ├──(row gone, another instance, stopped)─┴──► Fenced   (permanent)
//!                 └──(deregister)──► Deregistered (row stopped; others drop it at once)
//! ```

use std::fmt;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;
use tokio::task::JoinHandle;
use tokio::time::Instant;
use uuid::Uuid;

use crate::db::{Db, DbError};
use crate::url::redact;

/// How often a broker renews its lease. A renewal is one indexed UPDATE plus a read of a
/// table with one row per broker: at 1 s, 100 brokers cost PostgreSQL 100 tiny statements a
/// second, and a dead broker leaves every other broker's view within lease + 1 s.
pub const DEFAULT_HEARTBEAT: Duration = Duration::from_secs(1);

/// How long a broker stays live after its last renewal. Five heartbeats ride out a few slow
/// or lost renewals (a checkpoint, a reconnect) without dropping a healthy broker, while a
/// crashed broker's partitions move to the others within about 6 s: well inside a Kafka
/// client's request timeout (30 s by default), so its producers retry and succeed.
pub const DEFAULT_LEASE: Duration = Duration::from_secs(5);

/// Longest one renewal (connection checkout, connect if needed, the statement) may take
/// before it counts as failed. A renewal normally answers in a millisecond; 2 s lets a new
/// connection's handshake through and still leaves time for another attempt within the
/// default 5 s lease.
pub const DEFAULT_RENEW_TIMEOUT: Duration = Duration::from_secs(2);

/// Shortest heartbeat accepted: below 10 ms the heartbeat itself becomes load.
pub const MIN_HEARTBEAT: Duration = Duration::from_millis(10);

/// Longest lease accepted. The lease is how long a crashed broker stays listed and keeps
/// partitions nobody else leads; a lease above 10 minutes is surely a unit mistake.
pub const MAX_LEASE: Duration = Duration::from_secs(600);

/// How often a broker's heartbeat deletes long-dead rows. Once a minute per broker keeps the
/// table as small as the cluster at a cost of one indexed DELETE a minute.
pub const HOUSEKEEPING_INTERVAL: Duration = Duration::from_secs(60);

/// How long the row of a broker whose lease ended is kept. An hour lets an operator see what
/// recently died (`SELECT * FROM sluice.brokers`) and lets a broker cut off from the database
/// for less than that come back under its own id; after it, the row is deleted and a broker
/// that returns finds itself [`RegistryStatus::Fenced`] and must restart.
pub const DEAD_ROW_RETENTION: Duration = Duration::from_secs(3600);

/// How a broker keeps its registration.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RegistrySettings {
    /// How often the lease is renewed (and the live-broker view refreshed).
    pub heartbeat: Duration,
    /// How long the lease lasts after each renewal, on the database's clock.
    pub lease: Duration,
    /// Bound on one renewal.
    pub renew_timeout: Duration,
}

impl Default for RegistrySettings {
    fn default() -> Self {
        RegistrySettings {
            heartbeat: DEFAULT_HEARTBEAT,
            lease: DEFAULT_LEASE,
            renew_timeout: DEFAULT_RENEW_TIMEOUT,
        }
    }
}

impl RegistrySettings {
    /// Settings with this heartbeat and lease and a renewal timeout of half the lease.
    pub fn with_heartbeat_and_lease(heartbeat: Duration, lease: Duration) -> RegistrySettings {
        RegistrySettings {
            heartbeat,
            lease,
            renew_timeout: (lease / 2).min(DEFAULT_RENEW_TIMEOUT),
        }
    }

    /// Refuses settings under which a healthy broker could lapse or a dead one linger.
    pub fn validate(&self) -> Result<(), RegistryError> {
        let fail = |why: String| Err(RegistryError::Settings(why));
        if self.heartbeat < MIN_HEARTBEAT {
            return fail(format!(
                "heartbeat {:?} is shorter than {MIN_HEARTBEAT:?}",
                self.heartbeat
            ));
        }
        // At least two renewals per lease, so one lost renewal does not drop a live broker.
        if self.heartbeat * 2 >= self.lease {
            return fail(format!(
                "heartbeat {:?} must be less than half the lease {:?} (two renewals per lease)",
                self.heartbeat, self.lease
            ));
        }
        if self.lease > MAX_LEASE {
            return fail(format!(
                "lease {:?} is longer than {MAX_LEASE:?}",
                self.lease
            ));
        }
        if self.renew_timeout.is_zero() || self.renew_timeout >= self.lease {
            return fail(format!(
                "renewal timeout {:?} must be above zero and below the lease {:?}",
                self.renew_timeout, self.lease
            ));
        }
        Ok(())
    }
}

/// Why the registry could not do what was asked; one line each, never a password.
#[derive(Debug, thiserror::Error)]
pub enum RegistryError {
    #[error("invalid broker registry settings: {0}")]
    Settings(String),
    #[error("cannot register this broker as {host}:{port}: {why}")]
    Broker {
        host: String,
        port: u16,
        why: String,
    },
    #[error(
        "metadata database {url} belongs to cluster {cluster_id} with --storage {stored}, but \
         this broker was started with --storage {given}: start it with --storage {stored}, or \
         give it its own database with --metadata"
    )]
    OtherStorage {
        url: String,
        cluster_id: String,
        stored: String,
        given: String,
    },
    #[error(transparent)]
    Db(#[from] DbError),
}

impl From<tokio_postgres::Error> for RegistryError {
    fn from(e: tokio_postgres::Error) -> Self {
        RegistryError::Db(DbError::Query(e))
    }
}

// ---------------------------------------------------------------------------------------------
// Cluster identity

/// The cluster this database holds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClusterInfo {
    /// 22 characters of URL-safe base64 (16 random bytes), as a Kafka cluster id.
    pub cluster_id: String,
    /// The `--storage` URL recorded by the first broker (without any password).
    pub storage_url: String,
    /// Whether this call created the cluster (the first broker of a new database).
    pub created: bool,
}

/// Binds this broker to the database's cluster: creates it on a new database, else reads it
/// and refuses a different `storage_url`. Safe when several brokers start at once: each tries
/// to insert (ON CONFLICT DO NOTHING), then all read the one row that won.
///
/// URLs are compared without their password and trailing `/`.
pub async fn bind_cluster(db: &Db, storage_url: &str) -> Result<ClusterInfo, RegistryError> {
    let given = normalize_storage_url(storage_url);
    let client = db.client().await?;
    let proposed = new_cluster_id();
    let inserted = client
        .execute(
            "INSERT INTO cluster (cluster_id, storage_url) VALUES ($1, $2) \
             ON CONFLICT DO NOTHING",
            &[&proposed, &given],
        )
        .await?;
    // A separate statement: it sees a row another broker committed while ours waited.
    let row = client
        .query_one("SELECT cluster_id, storage_url FROM cluster", &[])
        .await?;
    let cluster_id: String = row.get(0);
    let stored: String = row.get(1);
    if stored != given {
        return Err(RegistryError::OtherStorage {
            url: db.url().to_string(),
            cluster_id,
            stored,
            given,
        });
    }
    Ok(ClusterInfo {
        cluster_id,
        storage_url: stored,
        created: inserted == 1,
    })
}

/// `url` without its password and trailing slashes.
fn normalize_storage_url(url: &str) -> String {
    redact(url.trim()).trim_end_matches('/').to_string()
}

/// A new cluster id: 16 random bytes as 22 characters of URL-safe base64 without padding,
/// made as Kafka makes them (the same as a local or object-storage broker's).
pub fn new_cluster_id() -> String {
    sluice_broker::config::new_cluster_id()
}

// ---------------------------------------------------------------------------------------------
// Brokers

/// What a broker registers: where clients reach it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BrokerInfo {
    /// The host Kafka clients connect to (the advertised address, not a wildcard).
    pub host: String,
    /// The bound Kafka port (not 0).
    pub port: u16,
    pub rack: Option<String>,
    /// Where the process runs, for operators: `host H pid P`.
    pub process: String,
}

impl BrokerInfo {
    fn validate(&self) -> Result<(), RegistryError> {
        let fail = |why: &str| {
            Err(RegistryError::Broker {
                host: self.host.clone(),
                port: self.port,
                why: why.to_string(),
            })
        };
        if self.host.trim().is_empty() {
            return fail("the advertised host is empty");
        }
        if self.port == 0 {
            return fail("port 0 is not an address clients can reach; register the bound port");
        }
        if matches!(self.host.as_str(), "0.0.0.0" | "::" | "[::]") {
            return fail("a wildcard address is not one clients can reach; advertise a host name");
        }
        Ok(())
    }
}

/// A live broker, as Kafka Metadata lists it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Broker {
    pub broker_id: i32,
    pub host: String,
    pub port: u16,
    pub rack: Option<String>,
}

const LIVE_BROKERS_SQL: &str = "SELECT broker_id, host, port, rack FROM brokers \
     WHERE expires_at > now() AND stopped_at IS NULL ORDER BY broker_id";

/// The live brokers (lease not ended, not stopped), by id. One query; brokers answering
/// Metadata use [`Registry::brokers`] instead.
pub async fn live_brokers(db: &Db) -> Result<Vec<Broker>, RegistryError> {
    let client = db.client().await?;
    let rows = client.query(LIVE_BROKERS_SQL, &[]).await?;
    Ok(rows.iter().filter_map(broker_from_row).collect())
}

/// A broker from a row whose first four columns are `broker_id, host, port, rack`; `None`
/// for a port out of range (the table's CHECK forbids it).
fn broker_from_row(row: &tokio_postgres::Row) -> Option<Broker> {
    Some(Broker {
        broker_id: row.get(0),
        host: row.get(1),
        port: u16::try_from(row.get::<_, i32>(2)).ok()?,
        rack: row.get(3),
    })
}

/// Which live broker leads `partition` of topic `topic_id`: partitions go round-robin over
/// the brokers in id order, starting at a broker chosen by a stable hash of the topic id, so
/// the first partitions of all topics do not pile onto the lowest id. The same brokers give
/// the same answer on every broker. `None` when no broker is live or `partition` is
/// negative.
///
/// When a broker joins or leaves, most partitions change leader. That is cheap here: any
/// broker can serve any partition (the data is in the bucket), so a new leader is only where
/// clients send their next request, not data to move.
pub fn leader_for(brokers: &[Broker], topic_id: Uuid, partition: i32) -> Option<i32> {
    if brokers.is_empty() || partition < 0 {
        return None;
    }
    let n = brokers.len() as u64;
    let start = fnv1a(topic_id.as_bytes()) % n;
    let slot = ((start + partition as u64) % n) as usize;
    if brokers.is_sorted_by_key(|b| b.broker_id) {
        Some(brokers[slot].broker_id)
    } else {
        let mut ids: Vec<i32> = brokers.iter().map(|b| b.broker_id).collect();
        ids.sort_unstable();
        Some(ids[slot])
    }
}

/// FNV-1a, 64 bits: stable across builds and platforms (unlike std's hasher).
fn fnv1a(bytes: &[u8]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in bytes {
        h ^= u64::from(*b);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    h
}

// ---------------------------------------------------------------------------------------------
// Registration and heartbeat

/// What this broker may do, published by the heartbeat task.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RegistryStatus {
    /// The lease is ours until at least `valid_until` (this process's monotonic clock).
    /// Writes may be acknowledged while [`RegistryStatus::is_live_at`] holds; the value is
    /// republished at every renewal.
    Live { valid_until: Instant },
    /// No renewal succeeded within the lease: other brokers may already consider this one
    /// dead, so it must stop acknowledging writes. The heartbeat keeps retrying; a renewal
    /// that finds the row still ours makes it [`RegistryStatus::Live`] again. `error` is the
    /// last renewal's failure.
    Lapsed { error: String },
    /// The row is gone, belongs to another instance, or was stopped: this registration can
    /// never be live again (permanent; the heartbeat has ended). The broker must stop
    /// serving and restart to register anew.
    Fenced { reason: String },
    /// [`Registry::deregister`] was called: the broker is shutting down.
    Deregistered,
}

impl RegistryStatus {
    /// Whether writes may be acknowledged at `now`: live and the lease not yet over by this
    /// process's own estimate (which matters when the heartbeat task itself is late).
    pub fn is_live_at(&self, now: Instant) -> bool {
        matches!(self, RegistryStatus::Live { valid_until } if now < *valid_until)
    }
}

/// This broker's registration: its id, its lease kept by a background heartbeat, and the
/// live brokers as of the last heartbeat. Dropping it stops the heartbeat without
/// deregistering (the row then expires after the lease, as after a crash); call
/// [`Registry::deregister`] on a clean shutdown.
#[derive(Debug)]
pub struct Registry {
    broker_id: i32,
    instance: Uuid,
    info: BrokerInfo,
    settings: RegistrySettings,
    db: Db,
    status: Arc<watch::Sender<RegistryStatus>>,
    brokers: Arc<watch::Sender<Arc<Vec<Broker>>>>,
    task: Option<JoinHandle<()>>,
}

impl Registry {
    /// Registers this broker: a new broker id, a random instance and a lease of
    /// `settings.lease` from the database's `now()`, then starts the heartbeat task (which
    /// needs a Tokio runtime). Logs nothing: the caller logs [`Registry`]'s `Display`.
    ///
    /// The heartbeat uses a connection of its own (not `db`'s pool), so a broker whose pool
    /// is busy with commits still renews its lease.
    pub async fn register(
        db: &Db,
        info: BrokerInfo,
        settings: RegistrySettings,
    ) -> Result<Registry, RegistryError> {
        settings.validate()?;
        info.validate()?;
        let instance = Uuid::new_v4();
        let lease_us = micros(settings.lease);
        let client = db.client().await?;
        let sent = Instant::now();
        let row = client
            .query_one(
                "INSERT INTO brokers (instance, host, port, rack, process, expires_at) \
                 VALUES ($1, $2, $3, $4, $5, now() + $6::bigint * interval '1 microsecond') \
                 RETURNING broker_id",
                &[
                    &instance,
                    &info.host,
                    &i32::from(info.port),
                    &info.rack,
                    &info.process,
                    &lease_us,
                ],
            )
            .await?;
        let broker_id: i32 = row.get(0);
        let rows = client.query(LIVE_BROKERS_SQL, &[]).await?;
        drop(client);
        let brokers: Vec<Broker> = rows.iter().filter_map(broker_from_row).collect();
        // The heartbeat's own connection, opened and its statement prepared now, so the first
        // renewals do not spend their timeout on a handshake.
        let heartbeat_db = db.separate_pool(1)?;
        heartbeat_db
            .client()
            .await?
            .prepare_cached(BEAT_SQL)
            .await?;

        let status = Arc::new(watch::Sender::new(RegistryStatus::Live {
            valid_until: sent + settings.lease,
        }));
        let brokers = Arc::new(watch::Sender::new(Arc::new(brokers)));
        let heartbeat = Heartbeat {
            renewer: Renewer {
                db: heartbeat_db,
                broker_id,
                instance,
                settings,
            },
            lease: LeaseState {
                settings,
                status: status.clone(),
                valid_until: sent + settings.lease,
                live: true,
                last_error: String::new(),
            },
            brokers: brokers.clone(),
            next_housekeeping: sent,
        };
        let task = tokio::spawn(heartbeat.run());
        Ok(Registry {
            broker_id,
            instance,
            info,
            settings,
            db: db.clone(),
            status,
            brokers,
            task: Some(task),
        })
    }

    /// This broker's id (new at every registration, never reused).
    pub fn broker_id(&self) -> i32 {
        self.broker_id
    }

    /// This registration's random instance, which every cluster write checks.
    pub fn instance(&self) -> Uuid {
        self.instance
    }

    pub fn settings(&self) -> RegistrySettings {
        self.settings
    }

    /// The registration's status, updated by the heartbeat (at every renewal while live).
    pub fn status(&self) -> watch::Receiver<RegistryStatus> {
        self.status.subscribe()
    }

    /// The live brokers (by id) as of the last heartbeat; changes only when the set does.
    /// A broker that died leaves it within lease + heartbeat; one that deregistered, at the
    /// next heartbeat.
    pub fn brokers(&self) -> watch::Receiver<Arc<Vec<Broker>>> {
        self.brokers.subscribe()
    }

    /// Clean shutdown: stops the heartbeat, publishes [`RegistryStatus::Deregistered`] (so
    /// this broker stops acknowledging writes first), then marks the row stopped, which ends
    /// its lease: other brokers drop it at their next heartbeat.
    pub async fn deregister(mut self) -> Result<(), RegistryError> {
        self.stop_heartbeat().await;
        self.status.send_replace(RegistryStatus::Deregistered);
        let client = self.db.client().await?;
        client
            .execute(
                "UPDATE brokers SET stopped_at = now(), expires_at = least(expires_at, now()) \
                 WHERE broker_id = $1 AND instance = $2 AND stopped_at IS NULL",
                &[&self.broker_id, &self.instance],
            )
            .await?;
        Ok(())
    }

    /// Stops the heartbeat and leaves the row as it is, as a crash would: other brokers drop
    /// this one when its lease ends. For tests of failover, and for a process that is about
    /// to exit without reaching the database. Returns once the heartbeat has stopped.
    pub async fn abandon(mut self) {
        self.stop_heartbeat().await;
    }

    async fn stop_heartbeat(&mut self) {
        if let Some(task) = self.task.take() {
            task.abort();
            // Cancelled (or already ended): either way it renews nothing more.
            let _ = task.await;
        }
    }
}

impl Drop for Registry {
    fn drop(&mut self) {
        if let Some(task) = self.task.take() {
            task.abort();
        }
    }
}

impl fmt::Display for Registry {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let live = self.brokers.borrow().len();
        write!(
            f,
            "registered as broker {} at {}:{}",
            self.broker_id, self.info.host, self.info.port
        )?;
        if let Some(rack) = &self.info.rack {
            write!(f, " in rack {rack}")?;
        }
        write!(
            f,
            " (instance {}, lease {:?} renewed every {:?}); {live} live broker{}",
            self.instance,
            self.settings.lease,
            self.settings.heartbeat,
            if live == 1 { "" } else { "s" }
        )
    }
}

fn micros(d: Duration) -> i64 {
    i64::try_from(d.as_micros()).unwrap_or(i64::MAX)
}

/// One renewal's answer.
struct Beat {
    /// Whether our row was renewed (still ours and not stopped).
    renewed: bool,
    brokers: Vec<Broker>,
}

/// Renews our lease and reads the live brokers in one statement. The SELECT sees the table
/// as it was before the UPDATE, so a row that had expired and was just renewed (ours, after
/// a lapse) is included by the second condition.
const BEAT_SQL: &str = "WITH renewed AS ( \
         UPDATE brokers \
         SET expires_at = now() + $3::bigint * interval '1 microsecond', heartbeat_at = now() \
         WHERE broker_id = $1 AND instance = $2 AND stopped_at IS NULL \
         RETURNING broker_id) \
     SELECT b.broker_id, b.host, b.port, b.rack, \
            b.broker_id IN (SELECT broker_id FROM renewed) AS mine \
     FROM brokers b \
     WHERE (b.expires_at > now() AND b.stopped_at IS NULL) \
        OR b.broker_id IN (SELECT broker_id FROM renewed) \
     ORDER BY b.broker_id";

/// The heartbeat task: renews through `renewer`, judges the lease in `lease`.
struct Heartbeat {
    renewer: Renewer,
    lease: LeaseState,
    brokers: Arc<watch::Sender<Arc<Vec<Broker>>>>,
    next_housekeeping: Instant,
}

/// What talks to the database.
struct Renewer {
    db: Db,
    broker_id: i32,
    instance: Uuid,
    settings: RegistrySettings,
}

/// What this process knows of its lease, and the status it publishes.
struct LeaseState {
    settings: RegistrySettings,
    status: Arc<watch::Sender<RegistryStatus>>,
    /// The end of the lease by this process's clock.
    valid_until: Instant,
    /// Whether `Live` is published.
    live: bool,
    /// The last renewal's failure, for `Lapsed`.
    last_error: String,
}

impl Heartbeat {
    async fn run(mut self) {
        let settings = self.renewer.settings;
        let mut next_beat = Instant::now() + settings.heartbeat;
        loop {
            self.lease
                .watching(tokio::time::sleep_until(next_beat))
                .await;
            let sent = Instant::now();
            // A late beat (a renewal that took long) does not bunch up the next ones.
            next_beat = sent + settings.heartbeat;
            let attempt = tokio::time::timeout(settings.renew_timeout, self.renewer.beat());
            match self.lease.watching(attempt).await {
                Ok(Ok(beat)) => {
                    self.publish_brokers(beat.brokers);
                    if !beat.renewed {
                        let reason = self.renewer.why_fenced().await;
                        self.lease.fenced(reason);
                        return;
                    }
                    self.lease.renewed(sent);
                    if Instant::now() >= self.next_housekeeping {
                        self.next_housekeeping = Instant::now() + HOUSEKEEPING_INTERVAL;
                        let housekeeping = self.renewer.housekeep();
                        // Best effort: every broker does it, a failure now is retried by the
                        // next one to come along.
                        let _ = self
                            .lease
                            .watching(tokio::time::timeout(settings.renew_timeout, housekeeping))
                            .await;
                    }
                }
                Ok(Err(e)) => self.lease.failed(e.to_string()),
                Err(_) => self.lease.failed(format!(
                    "a lease renewal got no answer within {:?}",
                    settings.renew_timeout
                )),
            }
        }
    }

    fn publish_brokers(&self, brokers: Vec<Broker>) {
        self.brokers.send_if_modified(|current| {
            if **current == brokers {
                false
            } else {
                *current = Arc::new(brokers);
                true
            }
        });
    }
}

impl LeaseState {
    /// Runs `work`, publishing `Lapsed` if the lease ends meanwhile.
    async fn watching<F: Future>(&mut self, work: F) -> F::Output {
        tokio::pin!(work);
        loop {
            tokio::select! {
                out = &mut work => return out,
                () = tokio::time::sleep_until(self.valid_until), if self.live => {
                    self.live = false;
                    self.publish_lapsed();
                }
            }
        }
    }

    /// A renewal sent at `sent` succeeded.
    fn renewed(&mut self, sent: Instant) {
        let valid_until = sent + self.settings.lease;
        // A renewal that took longer than the lease leaves the broker lapsed; the next one,
        // answered in time, makes it live.
        if valid_until <= Instant::now() {
            self.failed(format!(
                "a lease renewal took longer than the lease {:?}",
                self.settings.lease
            ));
            return;
        }
        self.valid_until = valid_until;
        self.live = true;
        self.last_error.clear();
        self.status
            .send_replace(RegistryStatus::Live { valid_until });
    }

    fn failed(&mut self, error: String) {
        self.last_error = error;
        if !self.live {
            self.publish_lapsed();
        }
    }

    fn fenced(&mut self, reason: String) {
        self.live = false;
        self.status.send_replace(RegistryStatus::Fenced { reason });
    }

    fn publish_lapsed(&self) {
        let error = if self.last_error.is_empty() {
            format!(
                "no lease renewal answered within the lease {:?}",
                self.settings.lease
            )
        } else {
            self.last_error.clone()
        };
        let new = RegistryStatus::Lapsed { error };
        self.status.send_if_modified(|current| {
            if *current == new {
                false
            } else {
                *current = new;
                true
            }
        });
    }
}

impl Renewer {
    async fn beat(&self) -> Result<Beat, DbError> {
        let client = self.db.client().await?;
        let statement = client.prepare_cached(BEAT_SQL).await?;
        let rows = client
            .query(
                &statement,
                &[
                    &self.broker_id,
                    &self.instance,
                    &micros(self.settings.lease),
                ],
            )
            .await?;
        let renewed = rows.iter().any(|r| r.get::<_, bool>(4));
        Ok(Beat {
            renewed,
            brokers: rows.iter().filter_map(broker_from_row).collect(),
        })
    }

    /// Why our row could not be renewed, in one line (best effort).
    async fn why_fenced(&self) -> String {
        let id = self.broker_id;
        let lookup = async {
            let client = self.db.client().await?;
            let row = client
                .query_opt(
                    "SELECT instance, stopped_at IS NOT NULL FROM brokers WHERE broker_id = $1",
                    &[&id],
                )
                .await?;
            Ok::<_, DbError>(row.map(|r| (r.get::<_, Uuid>(0), r.get::<_, bool>(1))))
        };
        match tokio::time::timeout(self.settings.renew_timeout, lookup).await {
            Ok(Ok(None)) => format!(
                "broker {id}'s row is gone from the registry (deleted after its lease ended, \
                 or by hand); restart to register anew"
            ),
            Ok(Ok(Some((other, _)))) if other != self.instance => format!(
                "broker {id}'s row now belongs to another process (instance {other}); \
                 restart to register anew"
            ),
            Ok(Ok(Some((_, true)))) => {
                format!("broker {id} was marked stopped; restart to register anew")
            }
            _ => format!(
                "broker {id}'s row is no longer this process's (instance {}); restart to \
                 register anew",
                self.instance
            ),
        }
    }

    /// Deletes rows whose lease ended more than [`DEAD_ROW_RETENTION`] ago.
    async fn housekeep(&self) -> Result<u64, DbError> {
        let client = self.db.client().await?;
        let deleted = client
            .execute(
                "DELETE FROM brokers \
                 WHERE expires_at < now() - $1::bigint * interval '1 microsecond'",
                &[&micros(DEAD_ROW_RETENTION)],
            )
            .await?;
        Ok(deleted)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn brokers(ids: &[i32]) -> Vec<Broker> {
        ids.iter()
            .map(|&broker_id| Broker {
                broker_id,
                host: "127.0.0.1".into(),
                port: 9092,
                rack: None,
            })
            .collect()
    }

    #[test]
    fn partitions_spread_evenly_and_every_broker_agrees() {
        let live = brokers(&[3, 7, 12]);
        let topic = Uuid::from_u128(0x0123_4567_89ab_cdef_0011_2233_4455_6677);
        let mut shares = std::collections::BTreeMap::new();
        for p in 0..30 {
            let leader = leader_for(&live, topic, p).unwrap();
            *shares.entry(leader).or_insert(0) += 1;
            // Another broker's copy of the same view, in another order: the same answer.
            let mut shuffled = live.clone();
            shuffled.reverse();
            assert_eq!(leader_for(&shuffled, topic, p), Some(leader));
            assert_eq!(leader_for(&live.clone(), topic, p), Some(leader));
        }
        assert_eq!(shares.len(), 3, "{shares:?}");
        assert!(shares.values().all(|&n| n == 10), "{shares:?}");
    }

    #[test]
    fn topics_start_on_different_brokers() {
        let live = brokers(&[1, 2, 3, 4]);
        let firsts: std::collections::BTreeSet<i32> = (0..64u128)
            .map(|i| leader_for(&live, Uuid::from_u128(i * 0x9e37_79b9), 0).unwrap())
            .collect();
        assert_eq!(firsts.len(), 4, "partition 0 of 64 topics: {firsts:?}");
    }

    #[test]
    fn no_leader_without_brokers_or_for_a_negative_partition() {
        assert_eq!(leader_for(&[], Uuid::nil(), 0), None);
        assert_eq!(leader_for(&brokers(&[1]), Uuid::nil(), -1), None);
        assert_eq!(leader_for(&brokers(&[5]), Uuid::nil(), i32::MAX), Some(5));
    }

    #[test]
    fn cluster_ids_are_kafka_cluster_ids() {
        let id = new_cluster_id();
        sluice_broker::config::check_cluster_id(&id).unwrap();
        assert!(!id.starts_with('-'), "{id}");
        assert_ne!(id, new_cluster_id());
    }

    #[test]
    fn settings_are_validated() {
        RegistrySettings::default().validate().unwrap();
        RegistrySettings::with_heartbeat_and_lease(
            Duration::from_millis(100),
            Duration::from_millis(500),
        )
        .validate()
        .unwrap();
        for (heartbeat, lease, why) in [
            (1, 5, "shorter than"),
            (1000, 2000, "less than half"),
            (1000, 3_600_000, "longer than"),
        ] {
            let s = RegistrySettings::with_heartbeat_and_lease(
                Duration::from_millis(heartbeat),
                Duration::from_millis(lease),
            );
            let e = s.validate().unwrap_err().to_string();
            assert!(e.contains(why), "{e}");
        }
        let s = RegistrySettings {
            renew_timeout: Duration::from_secs(5),
            ..RegistrySettings::default()
        };
        assert!(s.validate().is_err());
    }

    #[test]
    fn storage_urls_compare_without_password_or_trailing_slash() {
        assert_eq!(normalize_storage_url("s3://b/p/"), "s3://b/p");
        assert_eq!(
            normalize_storage_url(" s3://key:secret@b/p "),
            "s3://key:***@b/p"
        );
    }

    #[test]
    fn a_broker_must_be_reachable() {
        let ok = BrokerInfo {
            host: "broker-1.internal".into(),
            port: 9092,
            rack: None,
            process: "host a pid 1".into(),
        };
        ok.validate().unwrap();
        for bad in [
            BrokerInfo {
                port: 0,
                ..ok.clone()
            },
            BrokerInfo {
                host: " ".into(),
                ..ok.clone()
            },
            BrokerInfo {
                host: "0.0.0.0".into(),
                ..ok.clone()
            },
        ] {
            assert!(bad.validate().is_err(), "{bad:?}");
        }
    }

    #[test]
    fn lapse_and_live_are_judged_by_the_estimate() {
        let now = Instant::now();
        let live = RegistryStatus::Live {
            valid_until: now + Duration::from_secs(1),
        };
        assert!(live.is_live_at(now));
        assert!(!live.is_live_at(now + Duration::from_secs(1)));
        assert!(!RegistryStatus::Deregistered.is_live_at(now));
    }
}
