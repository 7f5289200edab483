//! One share consumer: a group member that heartbeats to the coordinator and, in a loop,
//! fetches records from the leaders of its partitions (acknowledging the previous batch in the
//! same request), then "processes" each acquired record in turn.
//!
//! Two futures run in the member's task, over the member's own connections (one per broker,
//! so one in all on a single broker, as a real consumer has):
//!
//! - the **heartbeat** joins with member epoch 0 and the subscription, then heartbeats every
//!   interval the coordinator asks for with the epoch it returned, publishing each new
//!   assignment; on UNKNOWN_MEMBER_ID or FENCED_MEMBER_EPOCH it joins again (a new
//!   *generation*: the fetch loop reopens its sessions and drops the acknowledgements the
//!   broker will no longer take); when the fetch loop has closed its sessions it leaves
//!   (epoch -1).
//! - the **fetch loop** keeps one share session per leader: epoch 0 opens it with the assigned
//!   partitions, later requests carry the next epoch, newly assigned partitions, forgotten
//!   ones and the acknowledgements of the last batch (ACCEPT for processed records, GAP for
//!   acquired offsets the batches do not hold, RELEASE for records acquired but not processed
//!   when the run stops). SHARE_SESSION_NOT_FOUND and INVALID_SHARE_SESSION_EPOCH reopen the
//!   session; a failed connection is opened again. On stop it sends the last
//!   acknowledgements in a ShareAcknowledge with epoch -1, which closes the session.
//!
//! Processing is simulated like a consumer thread doing `processing` of work per record: one
//! record after the other, each finishing `processing` after the previous one (absolute
//! deadlines on tokio's clock, so timer granularity does not add up over a batch). Only
//! records inside a response's acquired ranges count; a batch may hold others.
//!
//! Nothing here panics on what a broker sends: every error is counted by kind (see
//! [`Shared::error`]) and the loop goes on after a short pause.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, RwLock};
use std::time::Duration;

use kafka_protocol::ResponseError;
use kafka_protocol::messages::share_acknowledge_request::{
    self as ack_req, ShareAcknowledgeRequest,
};
use kafka_protocol::messages::share_fetch_request::{
    AcknowledgementBatch, FetchPartition, FetchTopic, ForgottenTopic, ShareFetchRequest,
};
use kafka_protocol::messages::share_fetch_response::ShareFetchResponse;
use kafka_protocol::messages::share_group_heartbeat_request::ShareGroupHeartbeatRequest;
use kafka_protocol::messages::{GroupId, TopicName};
use kafka_protocol::protocol::StrBytes;
use tokio::sync::{Mutex as AsyncMutex, Notify, watch};
use tokio::task::JoinSet;
use tokio::time::Instant;

use sluice_protocol::share_v2::ShareFetchRequestExt;

use super::cluster::{self, CALL_TIMEOUT, Metadata, SHARE_VERSION};
use super::conn::{Conn, ConnError};
use super::ledger::{Ledger, Tp};

/// How long a connection attempt may take.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
/// Until the coordinator says otherwise (Kafka's default `share.heartbeat.interval.ms`).
const HEARTBEAT_INTERVAL_DEFAULT: Duration = Duration::from_secs(5);
/// Pauses after errors, by how soon trying again can help.
const RETRY_SOON: Duration = Duration::from_millis(100);
const RETRY_LATER: Duration = Duration::from_millis(500);
/// How long the last acknowledgement and the leave may take on stop.
const CLOSE_TIMEOUT: Duration = Duration::from_secs(5);
/// Metadata is refreshed at most this often, whatever asks for it.
const METADATA_REFRESH_MIN: Duration = Duration::from_secs(1);
/// Error messages kept as examples for the report (the counts cover all of them).
const ERROR_EXAMPLES_MAX: usize = 20;

/// ShareFetch/ShareAcknowledge share-session epochs.
const SESSION_OPEN: i32 = 0;
const SESSION_CLOSE: i32 = -1;
/// ShareGroupHeartbeat member epochs.
const MEMBER_JOIN: i32 = 0;
const MEMBER_LEAVE: i32 = -1;

/// Acknowledgement types (KIP-932).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AckType {
    /// An acquired offset with no record in the batches (compacted away, a control record).
    Gap = 0,
    Accept = 1,
    /// Acquired, not processed: back to the others now rather than when the lock expires.
    Release = 2,
}

/// An acknowledgement of the offsets `first..=last`, all of one type.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AckRange {
    pub first: i64,
    pub last: i64,
    pub kind: AckType,
}

/// Appends `range`, merged into the last one when it continues it with the same type.
pub fn push_ack(acks: &mut Vec<AckRange>, range: AckRange) {
    if let Some(last) = acks.last_mut()
        && last.kind == range.kind
        && last.last + 1 == range.first
    {
        last.last = range.last;
        return;
    }
    acks.push(range);
}

/// How one consumer behaves (the workload's `[share]` table).
#[derive(Debug, Clone)]
pub struct MemberSpec {
    pub group: String,
    pub topics: Vec<String>,
    pub max_poll_records: i32,
    pub max_wait_ms: i32,
    /// `max_bytes` of each ShareFetch (the Java client's `fetch.max.bytes`).
    pub max_bytes: i32,
    pub processing: Duration,
    /// KIP-1206's `ShareAcquireMode` id: 0 batch_optimized, 1 record_limit (sent at v2 only).
    pub acquire_mode: i8,
    /// The ShareFetch version used (see [`cluster::share_fetch_version`]).
    pub share_fetch_version: i16,
}

/// Error counts by kind, with a few examples.
#[derive(Debug, Default)]
pub struct ErrorLog {
    pub counts: BTreeMap<String, u64>,
    pub examples: Vec<String>,
}

/// What every consumer of a fleet shares.
#[derive(Debug)]
pub struct Shared {
    pub spec: MemberSpec,
    pub bootstrap: Vec<String>,
    pub metadata: RwLock<Metadata>,
    metadata_refreshed: AsyncMutex<Option<Instant>>,
    coordinator: Mutex<Option<String>>,
    pub ledger: Ledger,
    pub errors: Mutex<ErrorLog>,
    /// How long each ShareFetch took, µs (from sending it to its answer, the broker's wait
    /// for records included).
    pub fetch_latency: Mutex<hdrhistogram::Histogram<u64>>,
    /// The same for fetches that acquired records.
    pub fetch_latency_acquired: Mutex<hdrhistogram::Histogram<u64>>,
    /// The acquisition lock timeout the broker last reported, ms (-1: none yet).
    pub lock_timeout_ms: AtomicI64,
    /// Set when the run ends: consumers stop processing, acknowledge, close and leave.
    pub stop: watch::Receiver<bool>,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl Shared {
    pub fn new(
        spec: MemberSpec,
        bootstrap: Vec<String>,
        metadata: Metadata,
        coordinator: String,
        stop: watch::Receiver<bool>,
    ) -> Shared {
        Shared {
            spec,
            bootstrap,
            metadata: RwLock::new(metadata),
            metadata_refreshed: AsyncMutex::new(None),
            coordinator: Mutex::new(Some(coordinator)),
            ledger: Ledger::default(),
            errors: Mutex::new(ErrorLog::default()),
            fetch_latency: Mutex::new(crate::stats::latency_histogram()),
            fetch_latency_acquired: Mutex::new(crate::stats::latency_histogram()),
            lock_timeout_ms: AtomicI64::new(-1),
            stop,
        }
    }

    /// Counts one error of `kind` (e.g. `ShareFetch: ShareSessionNotFound`).
    pub fn error(&self, kind: &str, detail: &str) {
        let mut log = lock(&self.errors);
        *log.counts.entry(kind.to_owned()).or_default() += 1;
        if log.examples.len() < ERROR_EXAMPLES_MAX {
            log.examples.push(format!("{kind}: {detail}"));
        }
    }

    fn code_error(&self, api: &str, code: i16, message: Option<&StrBytes>) {
        let name = ResponseError::try_from_code(code).map_or_else(String::new, |e| e.to_string());
        let detail = message.map_or_else(|| format!("code {code}"), |m| m.as_str().to_owned());
        self.error(&format!("{api}: {name}"), &detail);
    }

    fn stopping(&self) -> bool {
        *self.stop.borrow()
    }

    fn leader(&self, tp: Tp) -> Option<String> {
        self.metadata
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .leader(tp)
            .map(str::to_owned)
    }

    /// Fetches metadata again through `pool` (at most once per [`METADATA_REFRESH_MIN`] for the
    /// whole fleet).
    async fn refresh_metadata(&self, pool: &Pool) {
        let mut last = self.metadata_refreshed.lock().await;
        if last.is_some_and(|t| t.elapsed() < METADATA_REFRESH_MIN) {
            return;
        }
        *last = Some(Instant::now());
        let Some(addr) = self.bootstrap.first() else {
            return;
        };
        let result = match pool.get(addr).await {
            Ok(conn) => cluster::metadata(&conn, &self.spec.topics).await,
            Err(e) => Err(e.to_string()),
        };
        match result {
            Ok(m) => *self.metadata.write().unwrap_or_else(|p| p.into_inner()) = m,
            Err(e) => self.error("Metadata", &e),
        }
    }

    async fn coordinator(&self, pool: &Pool) -> Option<String> {
        if let Some(c) = lock(&self.coordinator).clone() {
            return Some(c);
        }
        let addr = self.bootstrap.first()?;
        let found = match pool.get(addr).await {
            Ok(conn) => cluster::find_coordinator(&conn, &self.spec.group).await,
            Err(e) => Err(e.to_string()),
        };
        match found {
            Ok(c) => {
                *lock(&self.coordinator) = Some(c.clone());
                Some(c)
            }
            Err(e) => {
                self.error("FindCoordinator", &e);
                None
            }
        }
    }

    fn forget_coordinator(&self) {
        *lock(&self.coordinator) = None;
    }
}

/// One consumer's counters, read by the fleet while it runs.
#[derive(Debug, Default)]
pub struct MemberStats {
    /// Records processed (every delivery counted).
    pub processed: AtomicU64,
    /// Records acquired (inside acquired ranges).
    pub acquired: AtomicU64,
    pub fetches: AtomicU64,
    /// Fetches that acquired nothing.
    pub empty_fetches: AtomicU64,
    /// Bytes of record batches received in ShareFetch responses.
    pub fetched_bytes: AtomicU64,
    pub rejoins: AtomicU64,
    pub session_reopens: AtomicU64,
    pub reconnects: AtomicU64,
    /// Partitions in the member's current assignment.
    pub assigned: AtomicU64,
    /// Records acquired and not yet acknowledged: what a crash would leave locked.
    pub held: Mutex<Vec<(Tp, i64, i64)>>,
}

impl MemberStats {
    pub fn held(&self) -> Vec<(Tp, i64, i64)> {
        lock(&self.held).clone()
    }
}

/// The member's connections, one per broker address, opened when first needed and again after
/// a failure.
#[derive(Debug)]
struct Pool {
    client_id: String,
    conns: AsyncMutex<HashMap<String, Arc<Conn>>>,
    stats: Arc<MemberStats>,
}

impl Pool {
    async fn get(&self, addr: &str) -> Result<Arc<Conn>, ConnError> {
        let mut conns = self.conns.lock().await;
        if let Some(c) = conns.get(addr)
            && !c.is_broken()
        {
            return Ok(c.clone());
        }
        let reconnect = conns.remove(addr).is_some();
        let conn = Conn::connect(addr, &self.client_id, CONNECT_TIMEOUT).await?;
        if reconnect {
            self.stats.reconnects.fetch_add(1, Ordering::Relaxed);
        }
        conns.insert(addr.to_owned(), conn.clone());
        Ok(conn)
    }

    /// Drops the connection to `addr` if it is `conn` (after a failed call).
    async fn discard(&self, addr: &str) {
        self.conns.lock().await.remove(addr);
    }
}

/// What the heartbeat publishes: the assignment, and the generation (bumped at each rejoin).
#[derive(Debug, Clone, Default, PartialEq)]
struct Assigned {
    generation: u64,
    partitions: Vec<Tp>,
}

/// A 16-byte random id in Kafka's text form for UUIDs (URL-safe base64, no padding).
pub fn member_id() -> String {
    base64url(&rand::random::<[u8; 16]>())
}

fn base64url(bytes: &[u8]) -> String {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
    let mut out = String::with_capacity(bytes.len().div_ceil(3) * 4);
    for chunk in bytes.chunks(3) {
        let n = chunk
            .iter()
            .enumerate()
            .fold(0u32, |n, (i, &b)| n | u32::from(b) << (16 - 8 * i));
        for i in 0..=chunk.len() {
            out.push(char::from(ALPHABET[(n >> (18 - 6 * i) & 63) as usize]));
        }
    }
    out
}

/// Runs one consumer until the fleet stops it (or its task is aborted: a crash).
pub async fn run(index: usize, shared: Arc<Shared>, stats: Arc<MemberStats>) {
    let member_id = member_id();
    let pool = Pool {
        client_id: format!("sluice-bench-share-{index}"),
        conns: AsyncMutex::new(HashMap::new()),
        stats: stats.clone(),
    };
    let (assigned_tx, assigned_rx) = watch::channel(Assigned::default());
    let links = Links {
        fetch_done: AtomicBool::new(false),
        wake_heartbeat: Notify::new(),
        rejoin: AtomicBool::new(false),
    };
    let heartbeat = heartbeat_loop(&shared, &stats, &pool, &member_id, &links, assigned_tx);
    let fetch = async {
        fetch_loop(&shared, &stats, &pool, &member_id, &links, assigned_rx).await;
        links.fetch_done.store(true, Ordering::Release);
        links.wake_heartbeat.notify_one();
    };
    tokio::join!(heartbeat, fetch);
}

/// How the two halves of a member talk.
struct Links {
    /// The fetch loop closed its sessions: time to leave.
    fetch_done: AtomicBool,
    wake_heartbeat: Notify,
    /// The fetch loop learnt the member is unknown: join again now.
    rejoin: AtomicBool,
}

async fn heartbeat_loop(
    shared: &Shared,
    stats: &MemberStats,
    pool: &Pool,
    member_id: &str,
    links: &Links,
    assigned: watch::Sender<Assigned>,
) {
    let group = GroupId(StrBytes::from_string(shared.spec.group.clone()));
    let topics: Vec<TopicName> = shared
        .spec
        .topics
        .iter()
        .map(|t| TopicName(StrBytes::from_string(t.clone())))
        .collect();
    let member = StrBytes::from_string(member_id.to_owned());
    let mut epoch = MEMBER_JOIN;
    let mut interval = HEARTBEAT_INTERVAL_DEFAULT;
    loop {
        if links.fetch_done.load(Ordering::Acquire) {
            if epoch > 0
                && let Some(addr) = shared.coordinator(pool).await
                && let Ok(conn) = pool.get(&addr).await
            {
                let leave = ShareGroupHeartbeatRequest::default()
                    .with_group_id(group.clone())
                    .with_member_id(member.clone())
                    .with_member_epoch(MEMBER_LEAVE);
                match conn.call(SHARE_VERSION, &leave, CLOSE_TIMEOUT).await {
                    Ok(r) if r.error_code != 0 => shared.code_error(
                        "ShareGroupHeartbeat (leave)",
                        r.error_code,
                        r.error_message.as_ref(),
                    ),
                    Ok(_) => {}
                    Err(e) => shared.error("ShareGroupHeartbeat (leave)", &e.to_string()),
                }
            }
            return;
        }
        if links.rejoin.swap(false, Ordering::AcqRel) && epoch != MEMBER_JOIN {
            epoch = MEMBER_JOIN;
        }
        let mut pause = interval;
        match shared.coordinator(pool).await {
            None => pause = RETRY_LATER,
            Some(addr) => {
                let request = ShareGroupHeartbeatRequest::default()
                    .with_group_id(group.clone())
                    .with_member_id(member.clone())
                    .with_member_epoch(epoch)
                    .with_subscribed_topic_names((epoch == MEMBER_JOIN).then(|| topics.clone()));
                let answer = match pool.get(&addr).await {
                    Ok(conn) => conn.call(SHARE_VERSION, &request, CALL_TIMEOUT).await,
                    Err(e) => Err(e),
                };
                match answer {
                    Err(e) => {
                        shared.error(
                            &format!("ShareGroupHeartbeat: {}", e.kind()),
                            &e.to_string(),
                        );
                        pool.discard(&addr).await;
                        shared.forget_coordinator();
                        pause = RETRY_LATER;
                    }
                    Ok(r) if r.error_code == 0 => {
                        epoch = r.member_epoch;
                        if let Ok(ms) = u64::try_from(r.heartbeat_interval_ms)
                            && ms > 0
                        {
                            interval = Duration::from_millis(ms);
                            pause = interval;
                        }
                        if let Some(a) = r.assignment {
                            let mut partitions: Vec<Tp> = a
                                .topic_partitions
                                .iter()
                                .flat_map(|t| t.partitions.iter().map(move |&p| (t.topic_id, p)))
                                .collect();
                            partitions.sort_unstable();
                            partitions.dedup();
                            stats
                                .assigned
                                .store(partitions.len() as u64, Ordering::Relaxed);
                            assigned.send_modify(|a| a.partitions = partitions);
                        }
                    }
                    Ok(r) => {
                        shared.code_error(
                            "ShareGroupHeartbeat",
                            r.error_code,
                            r.error_message.as_ref(),
                        );
                        match ResponseError::try_from_code(r.error_code) {
                            Some(
                                ResponseError::UnknownMemberId | ResponseError::FencedMemberEpoch,
                            ) => {
                                // Join again with the same member id; everything it held is gone.
                                epoch = MEMBER_JOIN;
                                stats.rejoins.fetch_add(1, Ordering::Relaxed);
                                stats.assigned.store(0, Ordering::Relaxed);
                                assigned.send_modify(|a| {
                                    a.generation += 1;
                                    a.partitions.clear();
                                });
                                pause = RETRY_SOON;
                            }
                            Some(
                                ResponseError::NotCoordinator
                                | ResponseError::CoordinatorNotAvailable
                                | ResponseError::CoordinatorLoadInProgress,
                            ) => {
                                shared.forget_coordinator();
                                pause = RETRY_LATER;
                            }
                            _ => pause = RETRY_LATER.max(interval.min(Duration::from_secs(2))),
                        }
                    }
                }
            }
        }
        tokio::select! {
            () = tokio::time::sleep(pause) => {}
            () = links.wake_heartbeat.notified() => {}
        }
    }
}

/// One share session with one leader.
#[derive(Debug, Default)]
struct Session {
    epoch: i32,
    partitions: BTreeSet<Tp>,
}

fn next_epoch(epoch: i32) -> i32 {
    if epoch == i32::MAX { 1 } else { epoch + 1 }
}

/// A run of acquired offsets to process (present in the batches) or to GAP (absent).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Work {
    pub tp: Tp,
    pub first: i64,
    pub last: i64,
    pub present: bool,
}

async fn fetch_loop(
    shared: &Shared,
    stats: &MemberStats,
    pool: &Pool,
    member_id: &str,
    links: &Links,
    mut assigned: watch::Receiver<Assigned>,
) {
    let mut stop = shared.stop.clone();
    let mut sessions: HashMap<String, Session> = HashMap::new();
    let mut acks: BTreeMap<Tp, Vec<AckRange>> = BTreeMap::new();
    let mut generation = 0u64;
    // When the previous record finished: the next one finishes `processing` after it.
    let mut clock = Instant::now();
    loop {
        if shared.stopping() {
            break;
        }
        let now_assigned = assigned.borrow_and_update().clone();
        if now_assigned.generation != generation {
            // Rejoined: the broker released what this member held, and its sessions are gone.
            generation = now_assigned.generation;
            for s in sessions.values_mut() {
                s.epoch = SESSION_OPEN;
            }
            acks.clear();
            lock(&stats.held).clear();
        }
        // Each leader's partitions: the assigned ones, and those with acknowledgements to send.
        let mut want: HashMap<String, BTreeSet<Tp>> = HashMap::new();
        let mut leaderless = false;
        for &tp in now_assigned.partitions.iter().chain(acks.keys()) {
            match shared.leader(tp) {
                Some(addr) => {
                    want.entry(addr).or_default().insert(tp);
                }
                None => leaderless = true,
            }
        }
        if leaderless {
            shared.refresh_metadata(pool).await;
        }
        let nodes: BTreeSet<String> = want
            .keys()
            .chain(
                sessions
                    .iter()
                    .filter(|(_, s)| !s.partitions.is_empty())
                    .map(|(a, _)| a),
            )
            .cloned()
            .collect();
        if nodes.is_empty() {
            // Nothing assigned yet: wait for an assignment or the end.
            tokio::select! {
                _ = assigned.changed() => {}
                _ = stop.wait_for(|s| *s) => {}
                () = tokio::time::sleep(RETRY_LATER) => {}
            }
            continue;
        }
        let mut calls: JoinSet<Answer> = JoinSet::new();
        let mut sending: BTreeSet<Tp> = BTreeSet::new();
        for addr in nodes {
            let desired = want.remove(&addr).unwrap_or_default();
            let session = sessions.entry(addr.clone()).or_default();
            let (request, acked) = fetch_request(shared, member_id, session, &desired, &acks);
            let conn = match pool.get(&addr).await {
                Ok(c) => c,
                Err(e) => {
                    shared.error(&format!("ShareFetch: {}", e.kind()), &e.to_string());
                    session.epoch = SESSION_OPEN;
                    continue;
                }
            };
            sending.extend(acked.iter().copied());
            let timeout = CALL_TIMEOUT + Duration::from_millis(shared.spec.max_wait_ms as u64);
            let version = shared.spec.share_fetch_version;
            calls.spawn(async move {
                let sent = Instant::now();
                let response = conn.share_fetch(version, &request, timeout).await;
                Answer {
                    addr,
                    desired,
                    acked,
                    response,
                    took: sent.elapsed(),
                }
            });
        }
        // Acknowledgements on their way are no longer held (a kill now leaves them acked).
        *lock(&stats.held) = held(&acks, &sending, &[]);
        let mut work: Vec<Work> = Vec::new();
        let mut pause: Option<Duration> = None;
        while let Some(joined) = calls.join_next().await {
            let Ok(Answer {
                addr,
                desired,
                acked,
                response,
                took,
            }) = joined
            else {
                continue;
            };
            let session = sessions.entry(addr.clone()).or_default();
            stats.fetches.fetch_add(1, Ordering::Relaxed);
            let response = match response {
                Ok(r) => r,
                Err(e) => {
                    shared.error(&format!("ShareFetch: {}", e.kind()), &e.to_string());
                    pool.discard(&addr).await;
                    session.epoch = SESSION_OPEN;
                    pause = Some(RETRY_LATER);
                    continue;
                }
            };
            if response.error_code != 0 {
                shared.code_error(
                    "ShareFetch",
                    response.error_code,
                    response.error_message.as_ref(),
                );
                session.epoch = SESSION_OPEN;
                stats.session_reopens.fetch_add(1, Ordering::Relaxed);
                match ResponseError::try_from_code(response.error_code) {
                    Some(
                        ResponseError::ShareSessionNotFound
                        | ResponseError::InvalidShareSessionEpoch,
                    ) => {}
                    Some(ResponseError::UnknownMemberId | ResponseError::FencedMemberEpoch) => {
                        links.rejoin.store(true, Ordering::Release);
                        links.wake_heartbeat.notify_one();
                        pause = Some(RETRY_LATER);
                    }
                    _ => pause = Some(RETRY_LATER),
                }
                continue;
            }
            // The session moved on, and the acknowledgements it carried were taken.
            session.partitions = desired;
            session.epoch = next_epoch(session.epoch);
            for tp in &acked {
                acks.remove(tp);
            }
            if response.acquisition_lock_timeout_ms > 0 {
                shared.lock_timeout_ms.store(
                    i64::from(response.acquisition_lock_timeout_ms),
                    Ordering::Relaxed,
                );
            }
            let now = Instant::now();
            let before = work.len();
            for topic in &response.responses {
                for p in &topic.partitions {
                    let tp = (topic.topic_id, p.partition_index);
                    if p.acknowledge_error_code != 0 {
                        shared.code_error(
                            "acknowledgement",
                            p.acknowledge_error_code,
                            p.acknowledge_error_message.as_ref(),
                        );
                    }
                    if p.error_code != 0 {
                        shared.code_error(
                            "ShareFetch partition",
                            p.error_code,
                            p.error_message.as_ref(),
                        );
                        if matches!(
                            ResponseError::try_from_code(p.error_code),
                            Some(
                                ResponseError::NotLeaderOrFollower
                                    | ResponseError::UnknownTopicOrPartition
                                    | ResponseError::UnknownTopicId
                            )
                        ) {
                            shared.refresh_metadata(pool).await;
                        }
                    }
                    let records = p.records.as_deref().unwrap_or_default();
                    stats
                        .fetched_bytes
                        .fetch_add(records.len() as u64, Ordering::Relaxed);
                    let coverage = batch_coverage(records);
                    for a in &p.acquired_records {
                        if a.last_offset < a.first_offset {
                            continue;
                        }
                        shared
                            .ledger
                            .acquired(tp, a.first_offset, a.last_offset, now.into_std());
                        stats.acquired.fetch_add(
                            (a.last_offset - a.first_offset + 1) as u64,
                            Ordering::Relaxed,
                        );
                        split_present(tp, a.first_offset, a.last_offset, &coverage, &mut work);
                    }
                }
            }
            let took_us = took.as_micros() as u64;
            crate::stats::record_us(&mut lock(&shared.fetch_latency), took_us);
            if work.len() == before {
                stats.empty_fetches.fetch_add(1, Ordering::Relaxed);
            } else {
                crate::stats::record_us(&mut lock(&shared.fetch_latency_acquired), took_us);
            }
        }
        *lock(&stats.held) = held(&acks, &BTreeSet::new(), &work);
        let stopped = process(shared, stats, &work, &mut acks, &mut clock).await;
        if stopped {
            break;
        }
        if let Some(pause) = pause {
            tokio::select! {
                () = tokio::time::sleep(pause) => {}
                _ = stop.wait_for(|s| *s) => {}
            }
        }
    }
    close_sessions(shared, pool, member_id, &mut sessions, &mut acks).await;
    lock(&stats.held).clear();
}

/// The records a member holds locked: those with acknowledgements not yet sent (but for the
/// partitions in `sending`), and those acquired and still to process.
fn held(
    acks: &BTreeMap<Tp, Vec<AckRange>>,
    sending: &BTreeSet<Tp>,
    work: &[Work],
) -> Vec<(Tp, i64, i64)> {
    acks.iter()
        .filter(|(tp, _)| !sending.contains(tp))
        .flat_map(|(&tp, ranges)| ranges.iter().map(move |r| (tp, r.first, r.last)))
        .chain(work.iter().map(|w| (w.tp, w.first, w.last)))
        .collect()
}

/// A ShareFetch's outcome, with what the request asked for.
struct Answer {
    addr: String,
    /// The partitions the session holds once the request succeeds.
    desired: BTreeSet<Tp>,
    /// The partitions whose acknowledgements the request carried.
    acked: Vec<Tp>,
    response: Result<ShareFetchResponse, ConnError>,
    took: Duration,
}

/// The next ShareFetch of `session` towards `desired`, and the partitions whose pending
/// acknowledgements it carries.
fn fetch_request(
    shared: &Shared,
    member_id: &str,
    session: &Session,
    desired: &BTreeSet<Tp>,
    acks: &BTreeMap<Tp, Vec<AckRange>>,
) -> (ShareFetchRequest, Vec<Tp>) {
    let opening = session.epoch == SESSION_OPEN;
    // A session is opened without acknowledgements (the broker refuses them at epoch 0):
    // they go with the next request.
    let mut acked = Vec::new();
    let mut by_topic: BTreeMap<uuid::Uuid, Vec<FetchPartition>> = BTreeMap::new();
    for &tp in desired {
        let pending = if opening { None } else { acks.get(&tp) };
        if !(opening || !session.partitions.contains(&tp) || pending.is_some()) {
            continue;
        }
        let mut partition = FetchPartition::default().with_partition_index(tp.1);
        if let Some(ranges) = pending {
            partition.acknowledgement_batches = ranges.iter().map(ack_batch).collect();
            acked.push(tp);
        }
        by_topic.entry(tp.0).or_default().push(partition);
    }
    let mut forgotten: BTreeMap<uuid::Uuid, Vec<i32>> = BTreeMap::new();
    if !opening {
        for tp in session.partitions.difference(desired) {
            forgotten.entry(tp.0).or_default().push(tp.1);
        }
    }
    let request = ShareFetchRequest::default()
        .with_group_id(Some(GroupId(StrBytes::from_string(
            shared.spec.group.clone(),
        ))))
        .with_member_id(Some(StrBytes::from_string(member_id.to_owned())))
        .with_share_session_epoch(session.epoch)
        .with_max_wait_ms(shared.spec.max_wait_ms)
        .with_min_bytes(1)
        .with_max_bytes(shared.spec.max_bytes)
        .with_max_records(shared.spec.max_poll_records)
        .with_batch_size(shared.spec.max_poll_records)
        .with_share_acquire_mode_id(shared.spec.acquire_mode)
        .with_topics(
            by_topic
                .into_iter()
                .map(|(id, partitions)| {
                    FetchTopic::default()
                        .with_topic_id(id)
                        .with_partitions(partitions)
                })
                .collect(),
        )
        .with_forgotten_topics_data(
            forgotten
                .into_iter()
                .map(|(id, partitions)| {
                    ForgottenTopic::default()
                        .with_topic_id(id)
                        .with_partitions(partitions)
                })
                .collect(),
        );
    (request, acked)
}

fn ack_batch(r: &AckRange) -> AcknowledgementBatch {
    AcknowledgementBatch::default()
        .with_first_offset(r.first)
        .with_last_offset(r.last)
        .with_acknowledge_types(vec![r.kind as i8])
}

/// Processes `work` in order, one record after the other; returns whether the run stopped
/// part way (the rest is then released).
async fn process(
    shared: &Shared,
    stats: &MemberStats,
    work: &[Work],
    acks: &mut BTreeMap<Tp, Vec<AckRange>>,
    clock: &mut Instant,
) -> bool {
    let per_record = shared.spec.processing;
    *clock = (*clock).max(Instant::now());
    let mut stopped = false;
    for w in work {
        let list = acks.entry(w.tp).or_default();
        if !w.present {
            push_ack(
                list,
                AckRange {
                    first: w.first,
                    last: w.last,
                    kind: AckType::Gap,
                },
            );
            continue;
        }
        if stopped {
            push_ack(
                list,
                AckRange {
                    first: w.first,
                    last: w.last,
                    kind: AckType::Release,
                },
            );
            continue;
        }
        let mut offset = w.first;
        while offset <= w.last {
            if shared.stopping() {
                stopped = true;
                break;
            }
            if !per_record.is_zero() {
                *clock += per_record;
                tokio::time::sleep_until(*clock).await;
            }
            shared.ledger.processed(w.tp, offset);
            stats.processed.fetch_add(1, Ordering::Relaxed);
            offset += 1;
        }
        if offset > w.first {
            push_ack(
                list,
                AckRange {
                    first: w.first,
                    last: offset - 1,
                    kind: AckType::Accept,
                },
            );
        }
        if offset <= w.last {
            push_ack(
                list,
                AckRange {
                    first: offset,
                    last: w.last,
                    kind: AckType::Release,
                },
            );
        }
    }
    if per_record.is_zero() {
        // Let the heartbeat and the other consumers run between batches.
        tokio::task::yield_now().await;
    }
    stopped || shared.stopping()
}

/// Sends each open session's last acknowledgements with epoch -1, closing it.
async fn close_sessions(
    shared: &Shared,
    pool: &Pool,
    member_id: &str,
    sessions: &mut HashMap<String, Session>,
    acks: &mut BTreeMap<Tp, Vec<AckRange>>,
) {
    for (addr, session) in sessions.iter() {
        if session.epoch == SESSION_OPEN {
            continue;
        }
        let mut by_topic: BTreeMap<uuid::Uuid, Vec<ack_req::AcknowledgePartition>> =
            BTreeMap::new();
        for (tp, ranges) in acks.iter() {
            if shared.leader(*tp).as_deref() != Some(addr.as_str()) {
                continue;
            }
            by_topic.entry(tp.0).or_default().push(
                ack_req::AcknowledgePartition::default()
                    .with_partition_index(tp.1)
                    .with_acknowledgement_batches(
                        ranges
                            .iter()
                            .map(|r| {
                                ack_req::AcknowledgementBatch::default()
                                    .with_first_offset(r.first)
                                    .with_last_offset(r.last)
                                    .with_acknowledge_types(vec![r.kind as i8])
                            })
                            .collect(),
                    ),
            );
        }
        let Ok(conn) = pool.get(addr).await else {
            shared.error("ShareAcknowledge (close): connect", addr);
            continue;
        };
        let group = Some(GroupId(StrBytes::from_string(shared.spec.group.clone())));
        let member = Some(StrBytes::from_string(member_id.to_owned()));
        let outcome = if by_topic.is_empty() {
            // Nothing to acknowledge: a final fetch closes the session.
            let request = ShareFetchRequest::default()
                .with_group_id(group)
                .with_member_id(member)
                .with_share_session_epoch(SESSION_CLOSE)
                .with_max_bytes(shared.spec.max_bytes);
            conn.call(SHARE_VERSION, &request, CLOSE_TIMEOUT)
                .await
                .map(|r| (r.error_code, r.error_message, Vec::new()))
        } else {
            let request = ShareAcknowledgeRequest::default()
                .with_group_id(group)
                .with_member_id(member)
                .with_share_session_epoch(SESSION_CLOSE)
                .with_topics(
                    by_topic
                        .into_iter()
                        .map(|(id, partitions)| {
                            ack_req::AcknowledgeTopic::default()
                                .with_topic_id(id)
                                .with_partitions(partitions)
                        })
                        .collect(),
                );
            conn.call(SHARE_VERSION, &request, CLOSE_TIMEOUT)
                .await
                .map(|r| {
                    let partition_errors = r
                        .responses
                        .iter()
                        .flat_map(|t| t.partitions.iter())
                        .filter(|p| p.error_code != 0)
                        .map(|p| (p.error_code, p.error_message.clone()))
                        .collect::<Vec<_>>();
                    (r.error_code, r.error_message, partition_errors)
                })
        };
        match outcome {
            Err(e) => shared.error(&format!("close session: {}", e.kind()), &e.to_string()),
            Ok((code, message, partition_errors)) => {
                if code != 0 {
                    shared.code_error("close session", code, message.as_ref());
                }
                for (code, message) in partition_errors {
                    shared.code_error("acknowledgement (close)", code, message.as_ref());
                }
            }
        }
    }
    sessions.clear();
    acks.clear();
}

/// The offset ranges (inclusive) the record batches in `records` cover, in order: whole data
/// batches of magic 2 only (a truncated last batch, control batches and anything unreadable
/// cover nothing). Reads headers only.
pub fn batch_coverage(records: &[u8]) -> Vec<(i64, i64)> {
    /// Offsets in a RecordBatch v2 header.
    const LENGTH_AT: usize = 8;
    const MAGIC_AT: usize = 16;
    const ATTRIBUTES_AT: usize = 21;
    const LAST_DELTA_AT: usize = 23;
    const HEADER_LEN: usize = 61;
    const CONTROL: u16 = 0x20;
    let mut out = Vec::new();
    let mut rest = records;
    while rest.len() >= HEADER_LEN {
        let base = i64::from_be_bytes(rest[..8].try_into().unwrap_or_default());
        let length = i32::from_be_bytes(rest[LENGTH_AT..12].try_into().unwrap_or_default());
        let Ok(length) = usize::try_from(length) else {
            break;
        };
        let total = 12 + length;
        if total < HEADER_LEN || total > rest.len() {
            break;
        }
        let attributes = u16::from_be_bytes(
            rest[ATTRIBUTES_AT..ATTRIBUTES_AT + 2]
                .try_into()
                .unwrap_or_default(),
        );
        let delta = i32::from_be_bytes(
            rest[LAST_DELTA_AT..LAST_DELTA_AT + 4]
                .try_into()
                .unwrap_or_default(),
        );
        if rest[MAGIC_AT] == 2 && attributes & CONTROL == 0 && delta >= 0 {
            out.push((base, base + i64::from(delta)));
        }
        rest = &rest[total..];
    }
    out
}

/// Appends `[first, last]` of `tp` to `work`, split into runs present in `coverage` (sorted,
/// as [`batch_coverage`] returns it) and runs absent from it.
pub fn split_present(tp: Tp, first: i64, last: i64, coverage: &[(i64, i64)], work: &mut Vec<Work>) {
    let mut at = first;
    for &(a, b) in coverage {
        if b < at {
            continue;
        }
        if a > last {
            break;
        }
        if a > at {
            work.push(Work {
                tp,
                first: at,
                last: a - 1,
                present: false,
            });
        }
        let end = b.min(last);
        work.push(Work {
            tp,
            first: a.max(at),
            last: end,
            present: true,
        });
        at = end + 1;
        if at > last {
            return;
        }
    }
    if at <= last {
        work.push(Work {
            tp,
            first: at,
            last,
            present: false,
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn batch(base: i64, records: i32, control: bool) -> Vec<u8> {
        let mut b = vec![0u8; 61];
        b[..8].copy_from_slice(&base.to_be_bytes());
        b[8..12].copy_from_slice(&(61i32 - 12).to_be_bytes());
        b[16] = 2;
        if control {
            b[22] = 0x20;
        }
        b[23..27].copy_from_slice(&(records - 1).to_be_bytes());
        b
    }

    #[test]
    fn coverage_reads_whole_data_batches_only() {
        let mut bytes = batch(10, 5, false);
        bytes.extend(batch(15, 1, true));
        bytes.extend(batch(16, 3, false));
        let mut truncated = batch(19, 2, false);
        truncated.truncate(40);
        bytes.extend(truncated);
        assert_eq!(batch_coverage(&bytes), vec![(10, 14), (16, 18)]);
        assert!(batch_coverage(&[1, 2, 3]).is_empty());
    }

    #[test]
    fn acquired_ranges_split_into_present_and_absent_runs() {
        let tp = (uuid::Uuid::nil(), 3);
        let run = |first, last, present| Work {
            tp,
            first,
            last,
            present,
        };
        let mut work = Vec::new();
        split_present(tp, 12, 20, &[(10, 14), (16, 18)], &mut work);
        assert_eq!(
            work,
            vec![
                run(12, 14, true),
                run(15, 15, false),
                run(16, 18, true),
                run(19, 20, false)
            ]
        );
        work.clear();
        split_present(tp, 0, 4, &[], &mut work);
        assert_eq!(work, vec![run(0, 4, false)]);
        work.clear();
        split_present(tp, 5, 6, &[(0, 100)], &mut work);
        assert_eq!(work, vec![run(5, 6, true)]);
    }

    #[test]
    fn acknowledgements_merge_only_when_contiguous_and_alike() {
        let mut acks = Vec::new();
        let r = |first, last, kind| AckRange { first, last, kind };
        push_ack(&mut acks, r(0, 4, AckType::Accept));
        push_ack(&mut acks, r(5, 9, AckType::Accept));
        push_ack(&mut acks, r(10, 10, AckType::Gap));
        push_ack(&mut acks, r(12, 13, AckType::Gap));
        push_ack(&mut acks, r(14, 20, AckType::Release));
        assert_eq!(
            acks,
            vec![
                r(0, 9, AckType::Accept),
                r(10, 10, AckType::Gap),
                r(12, 13, AckType::Gap),
                r(14, 20, AckType::Release)
            ]
        );
    }

    #[test]
    fn member_ids_look_like_kafka_uuids() {
        let id = member_id();
        assert_eq!(id.len(), 22);
        assert!(
            id.chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
        );
        assert_ne!(id, member_id());
        assert_eq!(base64url(&[0xfb, 0xff]), "-_8");
        assert_eq!(base64url(b"Man"), "TWFu");
    }

    #[test]
    fn session_epochs_wrap_to_one() {
        assert_eq!(next_epoch(0), 1);
        assert_eq!(next_epoch(i32::MAX), 1);
    }
}
