//! The flusher: collects the produce batches of every partition into ONE open object, seals
//! it, PUTs it create-if-absent under its sequence number (with retries), and reports each
//! object's outcome in sequence order.
//!
//! Where it sits: produce → the partition layer checks the batches and assigns their offsets
//! → [`Flusher::add_run`] (returns a [`Ticket`]) → linger or size seals the open object →
//! [`ObjectWriter`] builds it → `PUT PREFIX/objects/<seq>.sluice` with `If-None-Match: *` →
//! [`FlushSink::committed`] (index, high watermarks, memory cache) → every [`Ticket`] of the
//! object resolves → the produce is acknowledged.
//!
//! # Durability contract
//!
//! - `add_run` / `add_meta` return once the data is in the **open object**, in memory: nothing
//!   is durable and nothing may be acknowledged yet.
//! - [`Ticket::wait`] returns `Ok(sequence)` only after the object's PUT succeeded **and**
//!   every earlier object was committed, **and** [`FlushSink::committed`] has run for it. Only
//!   then may the batches be acknowledged or served.
//! - `Err` from a ticket means nothing in that object was acknowledged; its offsets become a
//!   gap (the sink heard of it through [`FlushSink::abandoned`]).
//!
//! # The life of an object
//!
//! ```text
//! open ──(linger | max_bytes | quiet | flush_now | shutdown)──► sealed (waiting
//! for a PUT slot, at most sealed_max) ──► built + PUT (at most puts_in_flight at once, retried until
//! put_timeout after the seal) ──► delivered to the sink in sequence order: committed | abandoned
//! ```
//!
//! - Sequence numbers are consecutive; the open object's number is known from its first add
//!   ([`Ticket::sequence`]). An empty object is never sealed, so no number is skipped for it.
//! - **Ordering rule**: an object is committed only if every earlier object is. When object
//!   `n` is given up, every object after it that has not been delivered yet (in flight, even
//!   if its PUT succeeded; sealed; and the open one) is given up too: otherwise an idempotent
//!   producer's sequence numbers would skip those of `n`. Their sequence numbers are listed in
//!   a [`MetaChange::Abandoned`] record written first into every following object until one
//!   of them is committed, so a rebuild from the bucket skips objects that landed although
//!   their writer answered that they failed.
//! - A PUT answered "already exists" is checked by reading the object's header (one ranged
//!   GET of [`HEADER_BYTES`]): if it is byte for byte this object's header (epoch, sequence,
//!   creation time, CRC), an earlier attempt landed and its answer was lost: committed.
//!   Anything else there is another writer's object: the flusher is **fenced**; that object
//!   and all later ones fail with [`FlushError::Fenced`] and every later add is refused.
//! - The lease is checked before every PUT attempt and at every add. Lost (taken over,
//!   released): nothing more is PUT, the flusher stops, objects and adds fail with
//!   [`FlushError::Fenced`] (taken over) or [`FlushError::LeaseLost`]. *Lapsed* (its
//!   `valid_until_ms` passed by the clock while renewals fail; a later renewal may revive it at
//!   the same epoch): no PUT starts, objects wait as in an outage and are given up at their
//!   deadline, adds are still taken within the backlog bound.
//!
//! # Memory bound
//!
//! At most: the open object (`max_bytes` plus one add, an add being at most
//! `ADD_BYTES_FACTOR × max_bytes`) + `sealed_max` sealed objects + `puts_in_flight` objects in
//! the PUT window (built bytes; an object whose PUT finished keeps its slot until it is
//! delivered, so a slow object holds the window instead of letting completed ones pile up).
//! Past it, adds fail at once with [`FlushError::Backlog`]; they never block.
//!
//! # A commit step (cluster mode)
//!
//! With a [`FlushTarget`] that has an [`ObjectCommitter`], a PUT that succeeded does not
//! commit the object by itself: when the object reaches the front of the window (every
//! earlier one committed), the step runs (one metadata-store transaction that gives its
//! batches their offsets), and the object is committed only when the step answers `Ok`; its
//! [`Receipt`] goes to every ticket ([`Ticket::wait_receipt`]). Steps run one at a time, in
//! sequence order. A step that fails retriably is run again with backoff until the object's
//! PUT deadline (counted from its seal), then the object is given up as a failed PUT would be
//! (with its followers); a final failure stops the flusher as a lost lease does. The
//! target's `writer` names the objects `PREFIX/objects/<writer>/<seq>.sluice`, so many
//! brokers share one prefix.
//!
//! The flusher logs nothing itself: every failure is in a [`FlushError`] (to the caller and
//! the sink) and in [`FlushStats`].

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use bytes::Bytes;
use object_store::path::Path;
use object_store::{Error as StoreError, ObjectStoreExt, PutMode, PutOptions, PutPayload};
use tokio::sync::{Notify, watch};
use tokio::task::{AbortHandle, JoinSet};
use tokio::time::Instant;

use crate::bucket::Bucket;
use crate::error::ObjectError;
use crate::format::{HEADER_BYTES, ObjectHeader, RunEntry, TopicId, check_batch, empty_batches};
use crate::lease::{Epoch, LeaseClock, LeaseError, LeaseStatus};
use crate::meta::{MetaChange, PRODUCER_BATCH_BYTES, ProducerBatch};
use crate::name::object_name;
use crate::reader::parse_header;
use crate::writer::ObjectWriter;

/// Default linger: a produce waits at most this long for its object to be sealed. 250 ms
/// amortises one PUT (tens of ms on S3, and billed per request) over many produces while
/// keeping acks=all latency well under a second.
pub const DEFAULT_LINGER: Duration = Duration::from_millis(250);
/// Default object size at which the open object is sealed early: 4 MiB amortises S3's
/// per-request cost ($0.005 per 1,000 PUTs: about $1.25 per TB written at this size, against
/// $23 per TB-month stored) and finishes in one PUT within seconds on a modest link. Small
/// enough that a busy broker keeps several PUTs in flight instead of one large one: against
/// 8 MiB with 2 in flight, 4 MiB with 4 in flight wrote about a fifth more per second on 2
/// cores (docs/benchmarks.md, "Object-storage mode").
pub const DEFAULT_MAX_BYTES: usize = 4 << 20;
/// Default PUT window: four objects in flight keep the bucket busy while acknowledgements
/// travel back and producers send the next requests.
pub const DEFAULT_PUTS_IN_FLIGHT: usize = 4;
/// Default number of sealed objects waiting for a PUT slot: with the window and the open
/// object, nine objects' worth (36 MiB at the default size, taken from `--memory-limit`)
/// before produces are refused with `Backlog`.
pub const DEFAULT_SEALED_MAX: usize = 4;
/// Default PUT deadline, counted from the seal: spans a few of the S3 client's own bounded
/// attempts (30 s request timeout) and a short outage; past it the produce fails with a
/// retriable error rather than hanging the client.
pub const DEFAULT_PUT_TIMEOUT: Duration = Duration::from_secs(30);
/// Default first retry delay after a failed PUT.
pub const DEFAULT_BACKOFF_MIN: Duration = Duration::from_millis(50);
/// Default longest retry delay: a recovered store is noticed within 2 s.
pub const DEFAULT_BACKOFF_MAX: Duration = Duration::from_secs(2);
/// Default quiet time after which an open object may be sealed before its linger: when
/// nothing arrives for this long, the clients that filled it are waiting for its
/// acknowledgement (a Kafka producer keeps only a few requests in flight), so lingering on
/// only delays them. A quiet seal is allowed only one linger after the last seal by time
/// (linger or quiet), so seals by time stay at most one per linger whatever the traffic.
pub const DEFAULT_SEAL_IDLE: Duration = Duration::from_millis(5);
/// One add may hold at most this many times `max_bytes`: a small `max_bytes` (chosen for
/// latency) must not refuse ordinary large batches, but one add is bounded so that the open
/// object, which may pass `max_bytes` by one add, stays bounded too.
pub const ADD_BYTES_FACTOR: usize = 4;
/// Bytes one meta record adds beyond its payload (kind and length).
const META_RECORD_OVERHEAD: usize = 6;

/// The flusher's limits. [`Default`] gives the documented defaults.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FlushSettings {
    /// Seal this long after the open object's first add ([`DEFAULT_LINGER`]).
    pub linger: Duration,
    /// Seal when the open object's data reaches this ([`DEFAULT_MAX_BYTES`]).
    pub max_bytes: usize,
    /// Objects in the PUT window at once ([`DEFAULT_PUTS_IN_FLIGHT`]).
    pub puts_in_flight: usize,
    /// Sealed objects waiting for a PUT slot; past it adds fail with `Backlog`
    /// ([`DEFAULT_SEALED_MAX`]).
    pub sealed_max: usize,
    /// How long one object's PUT is retried, from its seal, before it is given up
    /// ([`DEFAULT_PUT_TIMEOUT`]).
    pub put_timeout: Duration,
    /// First retry delay ([`DEFAULT_BACKOFF_MIN`]); doubles per retry up to `backoff_max`.
    pub backoff_min: Duration,
    /// Longest retry delay ([`DEFAULT_BACKOFF_MAX`]).
    pub backoff_max: Duration,
    /// Seal an open object once nothing was added for this long, if no object was sealed by
    /// time (linger or quiet) in the last `linger` ([`DEFAULT_SEAL_IDLE`]); zero turns it off.
    pub seal_idle: Duration,
}

impl Default for FlushSettings {
    fn default() -> Self {
        FlushSettings {
            linger: DEFAULT_LINGER,
            max_bytes: DEFAULT_MAX_BYTES,
            puts_in_flight: DEFAULT_PUTS_IN_FLIGHT,
            sealed_max: DEFAULT_SEALED_MAX,
            put_timeout: DEFAULT_PUT_TIMEOUT,
            backoff_min: DEFAULT_BACKOFF_MIN,
            backoff_max: DEFAULT_BACKOFF_MAX,
            seal_idle: DEFAULT_SEAL_IDLE,
        }
    }
}

impl FlushSettings {
    /// Checks the settings; the error says which one is wrong and what would do.
    pub fn validate(&self) -> Result<(), String> {
        if self.max_bytes == 0 {
            return Err("object max bytes must be above 0".into());
        }
        if self.puts_in_flight == 0 {
            return Err("object puts in flight must be at least 1".into());
        }
        if self.sealed_max == 0 {
            return Err("sealed objects waiting must be at least 1".into());
        }
        if self.put_timeout.is_zero() {
            return Err("the PUT timeout must be above 0".into());
        }
        if self.backoff_min.is_zero() || self.backoff_min > self.backoff_max {
            return Err(format!(
                "the retry backoff must satisfy 0 < min ({:?}) <= max ({:?})",
                self.backoff_min, self.backoff_max
            ));
        }
        if self.linger > Duration::from_secs(3600) || self.put_timeout > Duration::from_secs(86_400)
        {
            return Err("linger is at most an hour and the PUT timeout at most a day".into());
        }
        Ok(())
    }

    fn add_bytes_max(&self) -> usize {
        self.max_bytes.saturating_mul(ADD_BYTES_FACTOR)
    }
}

/// Why an add was refused or an object was not committed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FlushError {
    #[error(
        "object store backlog: {sealed} sealed objects wait for a PUT slot (limit {sealed_max}) \
         and the open object is full ({open_bytes} bytes); the store is slow or down, retry shortly"
    )]
    Backlog {
        open_bytes: usize,
        sealed: usize,
        sealed_max: usize,
    },
    #[error(
        "gave up writing object {sequence} after {after:?} ({last_error}); nothing in it was \
         acknowledged, send it again"
    )]
    GaveUp {
        sequence: u64,
        after: Duration,
        last_error: String,
    },
    #[error(
        "fenced: {detail}; another broker writes to this prefix, so this one stops writing \
         (stop one of them)"
    )]
    Fenced { detail: String },
    #[error(
        "the writer lease is lost ({reason}); this broker no longer acknowledges writes: restart it"
    )]
    LeaseLost { reason: String },
    #[error("the object flusher is shutting down; send again once the broker is back")]
    ShuttingDown,
    #[error(
        "one add of {bytes} bytes exceeds the limit of {limit} ({ADD_BYTES_FACTOR} x object max \
         bytes); send smaller batches or raise object max bytes"
    )]
    TooLarge { bytes: usize, limit: usize },
    #[error("nothing to add: {what} is empty")]
    Empty { what: &'static str },
    #[error("refused before it was stored: {0}")]
    Format(ObjectError),
}

impl FlushError {
    /// Whether the same request, sent again later, may succeed (here, or on the broker that
    /// takes over after a shutdown). `Fenced` and `LeaseLost` are final for this flusher; bad
    /// or oversized input stays bad.
    pub fn is_retriable(&self) -> bool {
        matches!(
            self,
            FlushError::Backlog { .. } | FlushError::GaveUp { .. } | FlushError::ShuttingDown
        )
    }

    /// Whether this error stops the flusher for good.
    fn is_final(&self) -> bool {
        matches!(
            self,
            FlushError::Fenced { .. } | FlushError::LeaseLost { .. }
        )
    }
}

/// An object whose PUT succeeded, delivered to [`FlushSink::committed`] in sequence order.
#[derive(Debug, Clone)]
pub struct CommittedObject {
    pub sequence: u64,
    pub key: Path,
    /// The whole object, for the recent-objects memory cache.
    pub bytes: Bytes,
    /// Its runs, as in its index (byte ranges within `bytes`).
    pub runs: Vec<RunEntry>,
    /// Its metadata records, in the object's order (an `Abandoned` list first, if any).
    pub meta: Vec<MetaChange>,
    pub created_ms: i64,
}

/// An object given up (or fenced), delivered to [`FlushSink::abandoned`] in sequence order.
/// Its runs' offsets become a gap; its metadata changes were not stored.
#[derive(Debug, Clone)]
pub struct AbandonedObject {
    pub sequence: u64,
    pub runs: Vec<RunEntry>,
    /// The metadata records it carried (not stored: the caller decides whether to add them
    /// again).
    pub meta: Vec<MetaChange>,
    pub error: FlushError,
}

/// Receives every object's outcome, once per object, in sequence order, on the flusher's
/// task. It must not block for long: the flusher delivers nothing else meanwhile.
pub trait FlushSink: Send + Sync + 'static {
    /// Called before any ticket of the object resolves.
    fn committed(&self, object: &CommittedObject);
    /// The object was given up (or fenced); its runs' offsets become a gap.
    fn abandoned(&self, object: &AbandonedObject);
}

/// The flusher's counters.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct FlushStats {
    /// PUT attempts made (retries included).
    pub puts: u64,
    /// PUT attempts that failed (error, or no answer before the deadline).
    pub put_errors: u64,
    /// PUT attempts that were retries.
    pub retries: u64,
    pub objects_committed: u64,
    pub objects_abandoned: u64,
    /// Bytes of the successful PUTs.
    pub bytes_put: u64,
    /// Latency of the last and the slowest successful PUT attempt.
    pub put_latency_last: Duration,
    pub put_latency_max: Duration,
    /// Bytes in the open object.
    pub open_bytes: usize,
    /// Sealed objects waiting for a PUT slot.
    pub sealed_waiting: usize,
    /// Objects in the PUT window (PUT under way, or done and waiting for an earlier one).
    pub in_flight: usize,
    /// The open object's sequence number.
    pub open_sequence: u64,
}

type Outcome = Option<Result<(u64, Option<Receipt>), FlushError>>;

/// What an object's commit step answered (cluster mode: the metadata store's answer for each
/// batch), handed unchanged to every ticket of the object. The flusher never looks inside.
#[derive(Clone)]
pub struct Receipt(pub Arc<dyn std::any::Any + Send + Sync>);

impl std::fmt::Debug for Receipt {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Receipt")
    }
}

/// Why a commit step failed.
#[derive(Debug, Clone)]
pub enum CommitFailure {
    /// Worth trying again (the store did not answer, a lost connection): the flusher retries
    /// the same object with backoff until its PUT deadline, then gives it up. The step must
    /// be idempotent: a retry of a commit that did land must answer as the first did.
    Retry(String),
    /// This object cannot be committed (the store refused it for a reason a retry does not
    /// change): it is given up at once, as a PUT past its deadline is; the flusher goes on.
    GiveUp(String),
    /// Final for this flusher (the writer was fenced): it stops as when its lease is lost.
    Final(FlushError),
}

/// A step that makes an object committed after its PUT succeeded. Without one (single-broker
/// object mode) an object is committed when its PUT succeeds; with one (cluster mode: one
/// metadata-store transaction that gives the batches their offsets) only when the step
/// answers `Ok`. Called once per attempt, for one object at a time, in sequence order, so
/// whatever the step orders (a producer's sequence numbers) arrives in the order written.
pub trait ObjectCommitter: Send + Sync + 'static {
    fn commit(
        &self,
        object: &CommittedObject,
    ) -> futures_util::future::BoxFuture<'static, Result<Receipt, CommitFailure>>;
}

/// Where a flusher's objects go and how they are committed. The default is single-broker
/// object mode: `PREFIX/objects/<seq>.sluice`, committed by the PUT alone.
#[derive(Clone, Default)]
pub struct FlushTarget {
    /// `Some(w)`: objects are named `PREFIX/objects/<w>/<seq>.sluice`, so that many writers
    /// (the brokers of a cluster) share one prefix without colliding.
    pub writer: Option<String>,
    pub committer: Option<Arc<dyn ObjectCommitter>>,
}

impl std::fmt::Debug for FlushTarget {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FlushTarget")
            .field("writer", &self.writer)
            .field("committer", &self.committer.is_some())
            .finish()
    }
}

/// Resolves when its object is committed (`Ok(sequence)`) or given up (`Err`). Cheap to
/// clone; every add into one object gets a ticket sharing that object's outcome.
#[derive(Debug, Clone)]
pub struct Ticket {
    sequence: u64,
    outcome: watch::Receiver<Outcome>,
}

impl Ticket {
    /// Waits for the object's outcome. Cancel-safe.
    pub async fn wait(&self) -> Result<u64, FlushError> {
        self.wait_receipt().await.map(|(sequence, _)| sequence)
    }

    /// [`wait`](Self::wait), with the commit step's [`Receipt`] (`None` without a step).
    pub async fn wait_receipt(&self) -> Result<(u64, Option<Receipt>), FlushError> {
        let mut rx = self.outcome.clone();
        if let Ok(v) = rx.wait_for(|v| v.is_some()).await {
            return v.clone().unwrap_or(Err(FlushError::ShuttingDown));
        }
        // The flusher's task is gone without an answer (its runtime stopped).
        let last = rx.borrow().clone();
        last.unwrap_or(Err(FlushError::ShuttingDown))
    }

    /// The outcome if it is known already.
    pub fn outcome(&self) -> Option<Result<u64, FlushError>> {
        self.outcome
            .borrow()
            .clone()
            .map(|r| r.map(|(sequence, _)| sequence))
    }

    /// The sequence number of the object that holds the add.
    pub fn sequence(&self) -> u64 {
        self.sequence
    }
}

/// One partition's data in the open object.
#[derive(Debug)]
struct PartBuf {
    data: Vec<u8>,
    last_offset: i64,
}

/// The open object (and, once sealed, a sealed one waiting for a PUT slot).
#[derive(Debug)]
struct OpenObject {
    sequence: u64,
    parts: BTreeMap<(TopicId, i32), PartBuf>,
    meta: Vec<MetaChange>,
    bytes: usize,
    first_add: Option<Instant>,
    last_add: Option<Instant>,
    outcome: watch::Sender<Outcome>,
}

impl OpenObject {
    fn new(sequence: u64) -> OpenObject {
        OpenObject {
            sequence,
            parts: BTreeMap::new(),
            meta: Vec::new(),
            bytes: 0,
            first_add: None,
            last_add: None,
            outcome: watch::channel(None).0,
        }
    }

    fn is_empty(&self) -> bool {
        self.parts.is_empty() && self.meta.is_empty()
    }

    fn ticket(&self) -> Ticket {
        Ticket {
            sequence: self.sequence,
            outcome: self.outcome.subscribe(),
        }
    }
}

#[derive(Debug)]
struct Sealed {
    object: OpenObject,
    sealed_at: Instant,
}

#[derive(Debug)]
struct State {
    open: OpenObject,
    sealed: VecDeque<Sealed>,
    flush_requested: bool,
    closing: bool,
    /// Set once fenced or the lease is lost: every add is refused with it.
    stopped: Option<FlushError>,
    /// When an object was last sealed by time (its linger, or quiet): the next quiet seal
    /// waits until one linger after it.
    last_timed_seal: Option<Instant>,
}

impl State {
    fn seal_open(&mut self, now: Instant) {
        if self.open.is_empty() {
            return;
        }
        let next = OpenObject::new(self.open.sequence + 1);
        let object = std::mem::replace(&mut self.open, next);
        self.sealed.push_back(Sealed {
            object,
            sealed_at: now,
        });
    }
}

#[derive(Debug, Default)]
struct Counters {
    puts: AtomicU64,
    put_errors: AtomicU64,
    retries: AtomicU64,
    committed: AtomicU64,
    abandoned: AtomicU64,
    bytes_put: AtomicU64,
    latency_last_us: AtomicU64,
    latency_max_us: AtomicU64,
    in_flight: AtomicUsize,
}

struct Shared {
    state: Mutex<State>,
    notify: Notify,
    counters: Counters,
    settings: FlushSettings,
    epoch: Epoch,
    lease: watch::Receiver<LeaseStatus>,
    clock: Arc<dyn LeaseClock>,
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, State> {
        // A panic while holding the lock leaves plain data behind; keep serving it.
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn lease_gate(&self) -> LeaseGate {
        lease_gate(&self.lease.borrow(), self.clock.now_ms(), self.epoch)
    }
}

/// What the lease allows now.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LeaseGate {
    /// Held and valid: PUTs may start.
    Write,
    /// Its validity ran out while renewals failed: no PUT starts, but a renewal that succeeds
    /// (at the same epoch) makes writing possible again, so objects wait (until their
    /// deadline) and adds are accepted (within the backlog bound).
    Lapsed(String),
    /// Lost for good (taken over, released, another epoch): final for this flusher.
    Stop(FlushError),
}

/// What the lease status says about writing at `now_ms` with `epoch`.
fn lease_gate(status: &LeaseStatus, now_ms: i64, epoch: Epoch) -> LeaseGate {
    match status {
        LeaseStatus::Held {
            epoch: held,
            valid_until_ms,
            renew_error,
        } => {
            if *held != epoch {
                LeaseGate::Stop(FlushError::LeaseLost {
                    reason: format!(
                        "it is held at epoch {held}, this flusher writes epoch {epoch}"
                    ),
                })
            } else if now_ms >= *valid_until_ms {
                let last = match renew_error {
                    Some(e) => one_line(&e.to_string()),
                    None => "none yet".into(),
                };
                LeaseGate::Lapsed(format!(
                    "the writer lease lapsed {} ms ago: renewals fail (last error: {last})",
                    now_ms - valid_until_ms
                ))
            } else {
                LeaseGate::Write
            }
        }
        LeaseStatus::Lost(e) => LeaseGate::Stop(match &**e {
            LeaseError::Fenced { .. } => FlushError::Fenced {
                detail: e.to_string(),
            },
            other => FlushError::LeaseLost {
                reason: other.to_string(),
            },
        }),
        LeaseStatus::Released => LeaseGate::Stop(FlushError::LeaseLost {
            reason: "it was released".into(),
        }),
    }
}

/// Closes the flusher when the last handle goes (as `shutdown`, without waiting).
struct Handle {
    shared: Arc<Shared>,
    done: watch::Receiver<bool>,
}

impl Drop for Handle {
    fn drop(&mut self) {
        self.shared.lock().closing = true;
        self.shared.notify.notify_one();
    }
}

/// The flusher: one per writer (bucket prefix). Cheap to clone.
#[derive(Clone)]
pub struct Flusher {
    handle: Arc<Handle>,
}

impl std::fmt::Debug for Flusher {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Flusher")
            .field("epoch", &self.handle.shared.epoch)
            .field("stats", &self.stats())
            .finish_non_exhaustive()
    }
}

/// Checks whole batches and returns the first base offset and the last offset. Checks each
/// batch's CRC so that a bad batch is refused to its sender alone, never poisoning an object.
fn check_batches(batches: &[u8]) -> Result<(i64, i64), ObjectError> {
    if batches.is_empty() {
        return Err(empty_batches());
    }
    let mut pos = 0;
    let mut first = None;
    let mut last: Option<i64> = None;
    while pos < batches.len() {
        let bad = |problem| ObjectError::BadBatch {
            section: crate::Section::Data,
            at: pos as u64,
            problem,
        };
        let info = check_batch(&batches[pos..], true).map_err(bad)?;
        if let Some(prev) = last
            && info.base_offset <= prev
        {
            return Err(bad(crate::BatchProblem::OffsetNotIncreasing {
                base_offset: info.base_offset,
                previous_last: prev,
            }));
        }
        first.get_or_insert(info.base_offset);
        last = Some(info.last_offset);
        pos += info.len;
    }
    Ok((first.unwrap_or(0), last.unwrap_or(0)))
}

impl Flusher {
    /// Starts the flusher's task (call inside a tokio runtime with the time driver).
    ///
    /// `next_sequence` is the first sequence number to write (the caller knows the bucket's
    /// last). `epoch` is the writer lease's, written into every object header. `lease` is the
    /// lease keeper's status channel: once it reports `Lost` nothing more is PUT and the
    /// flusher stops; while its `valid_until_ms` has passed by `clock` (lapsed) PUTs wait. `created_ms` of each object comes from `clock`.
    /// Invalid `settings` are replaced by what [`FlushSettings::validate`] accepts nearest;
    /// callers validate first.
    pub fn start(
        bucket: Bucket,
        epoch: Epoch,
        next_sequence: u64,
        lease: watch::Receiver<LeaseStatus>,
        clock: Arc<dyn LeaseClock>,
        settings: FlushSettings,
        sink: Arc<dyn FlushSink>,
    ) -> Flusher {
        Flusher::start_with(
            bucket,
            epoch,
            next_sequence,
            lease,
            clock,
            settings,
            sink,
            FlushTarget::default(),
        )
    }

    /// [`start`](Self::start) with another [`FlushTarget`] (cluster mode: objects under the
    /// broker's own name, committed by a metadata-store transaction).
    #[allow(clippy::too_many_arguments)]
    pub fn start_with(
        bucket: Bucket,
        epoch: Epoch,
        next_sequence: u64,
        lease: watch::Receiver<LeaseStatus>,
        clock: Arc<dyn LeaseClock>,
        settings: FlushSettings,
        sink: Arc<dyn FlushSink>,
        target: FlushTarget,
    ) -> Flusher {
        let settings = sane(settings);
        let shared = Arc::new(Shared {
            state: Mutex::new(State {
                open: OpenObject::new(next_sequence),
                sealed: VecDeque::new(),
                flush_requested: false,
                closing: false,
                stopped: None,
                last_timed_seal: None,
            }),
            notify: Notify::new(),
            counters: Counters::default(),
            settings,
            epoch,
            lease,
            clock,
        });
        let (done_tx, done) = watch::channel(false);
        let task = Task {
            shared: Arc::clone(&shared),
            bucket,
            sink,
            writer: ObjectWriter::with_capacity(settings.max_bytes),
            window: VecDeque::new(),
            puts: JoinSet::new(),
            put_ids: HashMap::new(),
            abandoned_pending: Vec::new(),
            target,
            commits: JoinSet::new(),
        };
        tokio::spawn(async move {
            task.run().await;
            let _ = done_tx.send(true);
        });
        Flusher {
            handle: Arc::new(Handle { shared, done }),
        }
    }

    fn shared(&self) -> &Shared {
        &self.handle.shared
    }

    /// Adds whole RecordBatch v2 batches of one partition whose offsets are already assigned
    /// (consecutive per partition across calls), plus the producer-batch records that go with
    /// them (always in the same object). Never blocks. On `Ok` the data is in the open object
    /// only: acknowledge after the ticket resolves `Ok`.
    pub fn add_run(
        &self,
        topic: TopicId,
        partition: i32,
        batches: &[u8],
        producer: &[ProducerBatch],
    ) -> Result<Ticket, FlushError> {
        if partition < 0 {
            return Err(FlushError::Format(ObjectError::NegativePartition {
                partition,
            }));
        }
        let shared = self.shared();
        let bytes = batches.len() + producer.len() * (PRODUCER_BATCH_BYTES + META_RECORD_OVERHEAD);
        let limit = shared.settings.add_bytes_max();
        if bytes > limit {
            return Err(FlushError::TooLarge { bytes, limit });
        }
        let (first, last) = check_batches(batches).map_err(FlushError::Format)?;
        let mut st = shared.lock();
        self.admit(&mut st, bytes)?;
        if let Some(part) = st.open.parts.get(&(topic, partition))
            && first <= part.last_offset
        {
            return Err(FlushError::Format(ObjectError::BadBatch {
                section: crate::Section::Data,
                at: 0,
                problem: crate::BatchProblem::OffsetNotIncreasing {
                    base_offset: first,
                    previous_last: part.last_offset,
                },
            }));
        }
        let open = &mut st.open;
        let part = open.parts.entry((topic, partition)).or_insert(PartBuf {
            data: Vec::new(),
            last_offset: last,
        });
        part.data.extend_from_slice(batches);
        part.last_offset = last;
        open.meta
            .extend(producer.iter().map(|p| MetaChange::ProducerBatch(*p)));
        Ok(self.added(&mut st, bytes))
    }

    /// Adds metadata records to the open object (sealed by linger or size like data). On
    /// `Ok` they are in memory only: they are stored once the ticket resolves `Ok`.
    pub fn add_meta(&self, changes: Vec<MetaChange>) -> Result<Ticket, FlushError> {
        if changes.is_empty() {
            return Err(FlushError::Empty {
                what: "the list of metadata changes",
            });
        }
        let shared = self.shared();
        let bytes: usize = changes
            .iter()
            .map(|c| c.encode().len() + META_RECORD_OVERHEAD)
            .sum();
        let limit = shared.settings.add_bytes_max();
        if bytes > limit {
            return Err(FlushError::TooLarge { bytes, limit });
        }
        let mut st = shared.lock();
        self.admit(&mut st, bytes)?;
        st.open.meta.extend(changes);
        Ok(self.added(&mut st, bytes))
    }

    /// Refuses an add when stopped, closing or out of room; seals the open object first when
    /// the add would take it past `max_bytes`.
    fn admit(&self, st: &mut State, bytes: usize) -> Result<(), FlushError> {
        let shared = self.shared();
        if let Some(e) = &st.stopped {
            return Err(e.clone());
        }
        if st.closing {
            return Err(FlushError::ShuttingDown);
        }
        if let LeaseGate::Stop(e) = shared.lease_gate() {
            return Err(e);
        }
        let s = &shared.settings;
        if !st.open.is_empty() && st.open.bytes.saturating_add(bytes) > s.max_bytes {
            if st.sealed.len() >= s.sealed_max {
                return Err(FlushError::Backlog {
                    open_bytes: st.open.bytes,
                    sealed: st.sealed.len(),
                    sealed_max: s.sealed_max,
                });
            }
            st.seal_open(Instant::now());
        }
        Ok(())
    }

    /// Accounts an add that went into the open object and returns its ticket.
    fn added(&self, st: &mut State, bytes: usize) -> Ticket {
        let shared = self.shared();
        let now = Instant::now();
        st.open.bytes += bytes;
        st.open.first_add.get_or_insert(now);
        st.open.last_add = Some(now);
        let ticket = st.open.ticket();
        if st.open.bytes >= shared.settings.max_bytes
            && st.sealed.len() < shared.settings.sealed_max
        {
            st.seal_open(now);
        }
        shared.notify.notify_one();
        ticket
    }

    /// What the writer lease allows this flusher now (the check each PUT makes).
    pub fn lease_gate(&self) -> LeaseGate {
        self.shared().lease_gate()
    }

    /// Seals the open object now (if it is not empty), or as soon as a sealed slot frees.
    pub fn flush_now(&self) {
        self.shared().lock().flush_requested = true;
        self.shared().notify.notify_one();
    }

    /// Seals the open object, waits until every object is committed or given up, and stops
    /// the task. Later adds fail with `ShuttingDown`.
    pub async fn shutdown(&self) {
        self.shared().lock().closing = true;
        self.shared().notify.notify_one();
        let mut done = self.handle.done.clone();
        let _ = done.wait_for(|d| *d).await;
    }

    /// The counters now.
    pub fn stats(&self) -> FlushStats {
        let shared = self.shared();
        let c = &shared.counters;
        let (open_bytes, sealed_waiting, open_sequence) = {
            let st = shared.lock();
            (st.open.bytes, st.sealed.len(), st.open.sequence)
        };
        FlushStats {
            puts: c.puts.load(Ordering::Relaxed),
            put_errors: c.put_errors.load(Ordering::Relaxed),
            retries: c.retries.load(Ordering::Relaxed),
            objects_committed: c.committed.load(Ordering::Relaxed),
            objects_abandoned: c.abandoned.load(Ordering::Relaxed),
            bytes_put: c.bytes_put.load(Ordering::Relaxed),
            put_latency_last: Duration::from_micros(c.latency_last_us.load(Ordering::Relaxed)),
            put_latency_max: Duration::from_micros(c.latency_max_us.load(Ordering::Relaxed)),
            open_bytes,
            sealed_waiting,
            in_flight: c.in_flight.load(Ordering::Relaxed),
            open_sequence,
        }
    }
}

/// Settings that cannot stall the flusher, whatever the caller passed.
fn sane(s: FlushSettings) -> FlushSettings {
    let backoff_min = s.backoff_min.max(Duration::from_millis(1));
    FlushSettings {
        linger: s.linger,
        max_bytes: s.max_bytes.max(1),
        puts_in_flight: s.puts_in_flight.max(1),
        sealed_max: s.sealed_max.max(1),
        put_timeout: s.put_timeout.max(Duration::from_millis(1)),
        backoff_min,
        backoff_max: s.backoff_max.max(backoff_min),
        seal_idle: s.seal_idle,
    }
}

/// An object built and in the PUT window.
struct Slot {
    sequence: u64,
    sealed_at: Instant,
    key: Path,
    bytes: Bytes,
    runs: Vec<RunEntry>,
    meta: Vec<MetaChange>,
    created_ms: i64,
    /// The abandoned sequence numbers its `Abandoned` record lists.
    listed: Vec<u64>,
    outcome: watch::Sender<Outcome>,
    state: SlotState,
    /// The commit step's answer, once it gave one.
    receipt: Option<Receipt>,
    /// Commit attempts made, and the delay before the next.
    commit_attempts: u32,
    commit_backoff: Duration,
}

enum SlotState {
    Putting(AbortHandle),
    /// The PUT succeeded; the commit step has not started (it starts at the window's front).
    Put,
    /// The commit step runs (or waits for its retry).
    Committing,
    Done(Result<(), FlushError>),
}

struct Task {
    shared: Arc<Shared>,
    bucket: Bucket,
    sink: Arc<dyn FlushSink>,
    writer: ObjectWriter,
    /// The PUT window, in sequence order.
    window: VecDeque<Slot>,
    puts: JoinSet<Result<(), FlushError>>,
    put_ids: HashMap<tokio::task::Id, u64>,
    /// Given-up sequence numbers not yet listed in a committed object.
    abandoned_pending: Vec<u64>,
    target: FlushTarget,
    /// The commit step of the window's front object, when one runs: (sequence, answer).
    commits: JoinSet<(u64, Result<Receipt, CommitFailure>)>,
}

/// What one PUT task needs.
struct PutJob {
    store: Arc<dyn object_store::ObjectStore>,
    key: Path,
    bytes: Bytes,
    sequence: u64,
    sealed_at: Instant,
    shared: Arc<Shared>,
}

impl Task {
    async fn run(mut self) {
        loop {
            // Deliver what is done (freeing slots), fill the free slots, until nothing moves
            // (an object that fails to build is done at once).
            let (linger_at, exit) = loop {
                self.deliver();
                let (to_start, linger_at, exit) = self.take_work();
                if to_start.is_empty() {
                    break (linger_at, exit);
                }
                for sealed in to_start {
                    self.start_put(sealed);
                }
            };
            if exit && self.window.is_empty() {
                let st = self.shared.lock();
                if st.open.is_empty() && st.sealed.is_empty() {
                    return;
                }
                continue;
            }
            let linger = async {
                match linger_at {
                    Some(at) => tokio::time::sleep_until(at).await,
                    None => std::future::pending().await,
                }
            };
            tokio::select! {
                _ = self.shared.notify.notified() => {}
                _ = linger => {}
                Some(joined) = self.puts.join_next_with_id(), if !self.puts.is_empty() => {
                    let (id, result) = match joined {
                        Ok((id, result)) => (id, result),
                        Err(e) => {
                            let last_error = if e.is_panic() { "the PUT task panicked" } else { "the PUT task was cancelled" };
                            (e.id(), Err(FlushError::GaveUp { sequence: 0, after: Duration::ZERO, last_error: last_error.into() }))
                        }
                    };
                    if let Some(seq) = self.put_ids.remove(&id) {
                        self.put_done(seq, result);
                    }
                }
                Some(joined) = self.commits.join_next(), if !self.commits.is_empty() => {
                    if let Ok((seq, answer)) = joined {
                        self.commit_done(seq, answer);
                    }
                }
            }
        }
    }

    /// Seals by linger / flush / shutdown, and takes sealed objects into free PUT slots.
    /// Returns them, when the linger timer should fire, and whether the flusher is closing.
    fn take_work(&mut self) -> (Vec<Sealed>, Option<Instant>, bool) {
        let s = self.shared.settings;
        let now = Instant::now();
        let mut st = self.shared.lock();
        if !st.open.is_empty() && st.sealed.len() < s.sealed_max {
            let lingered = st.open.first_add.is_some_and(|t| now >= t + s.linger);
            let quiet = idle_seal_at(&s, &st).is_some_and(|at| now >= at);
            if lingered || quiet || st.flush_requested || st.closing {
                st.seal_open(now);
                st.flush_requested = false;
                if lingered || quiet {
                    st.last_timed_seal = Some(now);
                }
            }
        }
        if st.open.is_empty() {
            st.flush_requested = false;
        }
        let mut take = Vec::new();
        while self.window.len() + take.len() < s.puts_in_flight
            && let Some(sealed) = st.sealed.pop_front()
        {
            take.push(sealed);
        }
        // Arm the timer only when a linger seal could happen (else the wake is a PUT ending).
        let linger_at = if st.sealed.len() < s.sealed_max {
            let linger = st.open.first_add.map(|t| t + s.linger);
            match (linger, idle_seal_at(&s, &st)) {
                (Some(a), Some(b)) => Some(a.min(b)),
                (a, b) => a.or(b),
            }
        } else {
            None
        };
        (take, linger_at, st.closing)
    }

    /// Builds an object: runs in (topic id, partition) order, then the `Abandoned` list and
    /// the metadata records.
    fn build(
        &mut self,
        object: &mut OpenObject,
        listed: &[u64],
    ) -> (
        Result<Bytes, ObjectError>,
        Vec<RunEntry>,
        Vec<MetaChange>,
        i64,
    ) {
        let created_ms = self.shared.clock.now_ms();
        let mut meta = Vec::with_capacity(object.meta.len() + 1);
        if !listed.is_empty() {
            meta.push(MetaChange::Abandoned(listed.to_vec()));
        }
        meta.append(&mut object.meta);
        self.writer.clear();
        let mut built = || -> Result<(Bytes, Vec<RunEntry>), ObjectError> {
            for ((topic, partition), part) in &object.parts {
                self.writer.begin_run(*topic, *partition)?;
                self.writer.push_batches(&part.data)?;
                self.writer.end_run()?;
            }
            for change in &meta {
                self.writer.push_meta(change.kind(), &change.encode())?;
            }
            let runs = self.writer.runs().to_vec();
            let bytes = self.writer.finish(ObjectHeader {
                writer_epoch: self.shared.epoch.0,
                sequence: object.sequence,
                created_ms,
            })?;
            Ok((bytes, runs))
        };
        let result = built();
        object.parts.clear();
        match result {
            Ok((bytes, runs)) => (Ok(bytes), runs, meta, created_ms),
            Err(e) => {
                self.writer.clear();
                (Err(e), Vec::new(), meta, created_ms)
            }
        }
    }

    fn start_put(&mut self, sealed: Sealed) {
        let Sealed {
            mut object,
            sealed_at,
        } = sealed;
        let listed = self.abandoned_pending.clone();
        let (built, runs, meta, created_ms) = self.build(&mut object, &listed);
        let key = match &self.target.writer {
            None => self.bucket.key(&object_name("", object.sequence)),
            Some(writer) => self
                .bucket
                .key(&crate::name::writer_object_name(writer, object.sequence)),
        };
        let (bytes, state) = match built {
            Ok(bytes) => {
                let job = PutJob {
                    store: Arc::clone(self.bucket.store()),
                    key: key.clone(),
                    bytes: bytes.clone(),
                    sequence: object.sequence,
                    sealed_at,
                    shared: Arc::clone(&self.shared),
                };
                let abort = self.puts.spawn(put_with_retries(job));
                self.put_ids.insert(abort.id(), object.sequence);
                (bytes, SlotState::Putting(abort))
            }
            Err(e) => (Bytes::new(), SlotState::Done(Err(FlushError::Format(e)))),
        };
        self.window.push_back(Slot {
            sequence: object.sequence,
            sealed_at,
            key,
            bytes,
            runs,
            meta,
            created_ms,
            listed,
            outcome: object.outcome,
            state,
            receipt: None,
            commit_attempts: 0,
            commit_backoff: self.shared.settings.backoff_min,
        });
        self.shared
            .counters
            .in_flight
            .store(self.window.len(), Ordering::Relaxed);
    }

    fn put_done(&mut self, sequence: u64, result: Result<(), FlushError>) {
        if let Some(slot) = self.window.iter_mut().find(|s| s.sequence == sequence) {
            let result = result.map_err(|e| match e {
                FlushError::GaveUp {
                    sequence: 0,
                    after: _,
                    last_error,
                } => FlushError::GaveUp {
                    sequence,
                    after: slot.sealed_at.elapsed(),
                    last_error,
                },
                e => e,
            });
            slot.state = match result {
                Ok(()) if self.target.committer.is_some() => SlotState::Put,
                result => SlotState::Done(result),
            };
        }
    }

    /// Starts the commit step of the window's front object (its PUT succeeded), after
    /// `delay` for a retry.
    fn start_commit(&mut self, delay: Duration) {
        let Some(committer) = self.target.committer.clone() else {
            return;
        };
        let Some(slot) = self.window.front_mut() else {
            return;
        };
        slot.state = SlotState::Committing;
        slot.commit_attempts += 1;
        let object = CommittedObject {
            sequence: slot.sequence,
            key: slot.key.clone(),
            bytes: slot.bytes.clone(),
            runs: slot.runs.clone(),
            meta: slot.meta.clone(),
            created_ms: slot.created_ms,
        };
        let sequence = slot.sequence;
        let step = committer.commit(&object);
        self.commits.spawn(async move {
            if !delay.is_zero() {
                tokio::time::sleep(delay).await;
            }
            (sequence, step.await)
        });
    }

    /// The commit step of `sequence` answered.
    fn commit_done(&mut self, sequence: u64, answer: Result<Receipt, CommitFailure>) {
        let s = self.shared.settings;
        let Some(slot) = self.window.front_mut().filter(|s| s.sequence == sequence) else {
            return;
        };
        match answer {
            Ok(receipt) => {
                slot.receipt = Some(receipt);
                slot.state = SlotState::Done(Ok(()));
            }
            Err(CommitFailure::Final(e)) => slot.state = SlotState::Done(Err(e)),
            Err(CommitFailure::GiveUp(why)) => {
                slot.state = SlotState::Done(Err(FlushError::GaveUp {
                    sequence,
                    after: slot.sealed_at.elapsed(),
                    last_error: format!("commit: {why}"),
                }));
            }
            Err(CommitFailure::Retry(last_error)) => {
                let delay = jittered(slot.commit_backoff, sequence, slot.commit_attempts);
                slot.commit_backoff = (slot.commit_backoff * 2).min(s.backoff_max);
                if Instant::now() + delay >= slot.sealed_at + s.put_timeout {
                    slot.state = SlotState::Done(Err(FlushError::GaveUp {
                        sequence,
                        after: slot.sealed_at.elapsed(),
                        last_error: format!("commit: {last_error}"),
                    }));
                } else {
                    self.start_commit(delay);
                }
            }
        }
    }

    /// Delivers finished objects from the front of the window, in sequence order.
    fn deliver(&mut self) {
        while let Some(front) = self.window.front() {
            match front.state {
                SlotState::Putting(_) | SlotState::Committing => break,
                SlotState::Put => {
                    self.start_commit(Duration::ZERO);
                    break;
                }
                SlotState::Done(_) => {}
            }
            let Some(slot) = self.window.pop_front() else {
                break;
            };
            let SlotState::Done(result) = slot.state else {
                unreachable!("checked above")
            };
            match result {
                Ok(()) => {
                    let object = CommittedObject {
                        sequence: slot.sequence,
                        key: slot.key,
                        bytes: slot.bytes,
                        runs: slot.runs,
                        meta: slot.meta,
                        created_ms: slot.created_ms,
                    };
                    self.sink.committed(&object);
                    self.abandoned_pending.retain(|s| !slot.listed.contains(s));
                    self.shared
                        .counters
                        .committed
                        .fetch_add(1, Ordering::Relaxed);
                    let _ = slot.outcome.send(Some(Ok((slot.sequence, slot.receipt))));
                }
                Err(error) => {
                    if error.is_final() {
                        // Refuse adds before any ticket reports the error.
                        let mut st = self.shared.lock();
                        st.stopped.get_or_insert_with(|| error.clone());
                    }
                    let failed = slot.sequence;
                    // Take the objects after it (sealing the open one) before its tickets
                    // resolve: an add made after a caller saw this failure must go into a
                    // new object, not into one given up with it.
                    let followers = self.take_followers();
                    self.abandon(
                        slot.sequence,
                        slot.runs,
                        slot.meta,
                        &slot.outcome,
                        error.clone(),
                    );
                    self.give_up_after(failed, &error, followers);
                }
            }
        }
        self.shared
            .counters
            .in_flight
            .store(self.window.len(), Ordering::Relaxed);
    }

    /// Gives up every object after `failed`: the rest of the window (even PUTs that
    /// succeeded), the sealed ones and the open one. A final error stops the flusher.
    /// The objects after the window's front: the rest of the window, and the sealed ones
    /// with the open one sealed too.
    fn take_followers(&mut self) -> (VecDeque<Slot>, Vec<Sealed>) {
        let window = std::mem::take(&mut self.window);
        let sealed: Vec<Sealed> = {
            let mut st = self.shared.lock();
            st.seal_open(Instant::now());
            st.sealed.drain(..).collect()
        };
        (window, sealed)
    }

    fn give_up_after(
        &mut self,
        failed: u64,
        error: &FlushError,
        (window, sealed): (VecDeque<Slot>, Vec<Sealed>),
    ) {
        let follower = |sequence: u64, sealed_at: Instant| {
            if error.is_final() {
                error.clone()
            } else {
                FlushError::GaveUp {
                    sequence,
                    after: sealed_at.elapsed(),
                    last_error: format!("object {failed} before it was given up"),
                }
            }
        };
        for slot in window {
            if let SlotState::Putting(abort) = &slot.state {
                abort.abort();
            }
            let e = follower(slot.sequence, slot.sealed_at);
            self.abandon(slot.sequence, slot.runs, slot.meta, &slot.outcome, e);
        }
        for Sealed {
            mut object,
            sealed_at,
        } in sealed
        {
            let (_, runs, meta, _) = self.build(&mut object, &[]);
            let e = follower(object.sequence, sealed_at);
            self.abandon(object.sequence, runs, meta, &object.outcome, e);
        }
    }

    fn abandon(
        &mut self,
        sequence: u64,
        runs: Vec<RunEntry>,
        mut meta: Vec<MetaChange>,
        outcome: &watch::Sender<Outcome>,
        error: FlushError,
    ) {
        // The list it carried is still pending; the caller gets only its own changes back.
        if matches!(meta.first(), Some(MetaChange::Abandoned(_))) {
            meta.remove(0);
        }
        let object = AbandonedObject {
            sequence,
            runs,
            meta,
            error: error.clone(),
        };
        self.sink.abandoned(&object);
        self.abandoned_pending.push(sequence);
        self.shared
            .counters
            .abandoned
            .fetch_add(1, Ordering::Relaxed);
        let _ = outcome.send(Some(Err(error)));
    }
}

/// When the open object may be sealed for quiet (see [`FlushSettings::seal_idle`]):
/// `seal_idle` after its last add, but not before one linger after the last seal by time.
/// Every object opens after the seal before it, so a linger seal also comes at least one
/// linger after the last seal by time: together they make at most one PUT per linger,
/// whatever the partition count or the traffic's shape. Seals by size come on top only when
/// an object fills to `max_bytes` within a linger. So a sporadic producer is acknowledged
/// after a PUT instead of a linger, and a steady one after at most a linger and a PUT.
fn idle_seal_at(s: &FlushSettings, st: &State) -> Option<Instant> {
    if s.seal_idle.is_zero() {
        return None;
    }
    let quiet = st.open.last_add? + s.seal_idle;
    Some(match st.last_timed_seal {
        Some(last) => quiet.max(last + s.linger),
        None => quiet,
    })
}

/// A delay in `[backoff/2, backoff)` drawn from (sequence, attempt), so runs are reproducible
/// and two objects retrying together do not hit the store in lockstep.
fn jittered(backoff: Duration, sequence: u64, attempt: u32) -> Duration {
    let mut z = sequence
        .wrapping_mul(0x9e37_79b9_7f4a_7c15)
        .wrapping_add(u64::from(attempt));
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^= z >> 31;
    let frac = (z >> 11) as f64 / (1u64 << 53) as f64;
    backoff.mul_f64(0.5 + frac / 2.0)
}

/// What the header check of an object that already exists found.
enum Existing {
    Ours,
    Foreign(String),
}

/// PUTs one object create-if-absent, retrying with backoff until `put_timeout` after its
/// seal. `GaveUp { sequence: 0, .. }` is completed by the task (it knows the object).
async fn put_with_retries(job: PutJob) -> Result<(), FlushError> {
    let s = job.shared.settings;
    let counters = &job.shared.counters;
    let deadline = job.sealed_at + s.put_timeout;
    let mut backoff = s.backoff_min;
    let mut last_error = String::from("no PUT slot before the deadline");
    let mut attempt: u32 = 0;
    loop {
        let gate = job.shared.lease_gate();
        if let LeaseGate::Stop(e) = gate {
            return Err(e);
        }
        if Instant::now() >= deadline {
            return Err(FlushError::GaveUp {
                sequence: job.sequence,
                after: job.sealed_at.elapsed(),
                last_error,
            });
        }
        if let LeaseGate::Lapsed(reason) = gate {
            // No PUT while the lease has lapsed; look again after the backoff.
            last_error = reason;
            let wake = Instant::now() + jittered(backoff, job.sequence, attempt);
            tokio::time::sleep_until(wake.min(deadline)).await;
            backoff = (backoff * 2).min(s.backoff_max);
            continue;
        }
        counters.puts.fetch_add(1, Ordering::Relaxed);
        if attempt > 0 {
            counters.retries.fetch_add(1, Ordering::Relaxed);
        }
        let started = Instant::now();
        let options = PutOptions {
            mode: PutMode::Create,
            ..PutOptions::default()
        };
        let put = job
            .store
            .put_opts(&job.key, PutPayload::from(job.bytes.clone()), options);
        let answer = tokio::time::timeout_at(deadline, put).await;
        let failed = match answer {
            Ok(Ok(_)) => {
                let us = started.elapsed().as_micros() as u64;
                counters.latency_last_us.store(us, Ordering::Relaxed);
                counters.latency_max_us.fetch_max(us, Ordering::Relaxed);
                counters
                    .bytes_put
                    .fetch_add(job.bytes.len() as u64, Ordering::Relaxed);
                return Ok(());
            }
            Ok(Err(StoreError::AlreadyExists { .. })) => match check_existing(&job, deadline).await
            {
                Ok(Existing::Ours) => {
                    counters
                        .bytes_put
                        .fetch_add(job.bytes.len() as u64, Ordering::Relaxed);
                    return Ok(());
                }
                Ok(Existing::Foreign(detail)) => return Err(FlushError::Fenced { detail }),
                Err(e) => format!("it already exists, and reading its header failed: {e}"),
            },
            Ok(Err(e)) => one_line(&e.to_string()),
            Err(_) => "no answer before the deadline".to_string(),
        };
        counters.put_errors.fetch_add(1, Ordering::Relaxed);
        last_error = failed;
        let wake = Instant::now() + jittered(backoff, job.sequence, attempt);
        tokio::time::sleep_until(wake.min(deadline)).await;
        backoff = (backoff * 2).min(s.backoff_max);
        attempt = attempt.saturating_add(1);
    }
}

/// Reads the header of the object at our key: ours if it is byte for byte the header we
/// wrote (an earlier attempt landed and its answer was lost), else another writer's.
async fn check_existing(job: &PutJob, deadline: Instant) -> Result<Existing, String> {
    let range = 0..HEADER_BYTES as u64;
    let got = tokio::time::timeout_at(deadline, job.store.get_range(&job.key, range)).await;
    let head = match got {
        Ok(Ok(head)) => head,
        Ok(Err(e)) => return Err(one_line(&e.to_string())),
        Err(_) => return Err("no answer before the deadline".into()),
    };
    if head.as_ref() == &job.bytes[..HEADER_BYTES] {
        return Ok(Existing::Ours);
    }
    let ours = job.shared.epoch;
    let detail = match parse_header(&head) {
        Ok(h) if h.writer_epoch != ours.0 => format!(
            "object {} already exists, written at epoch {} (this writer's epoch is {ours})",
            job.key, h.writer_epoch
        ),
        Ok(h) => format!(
            "object {} already exists, written at this writer's epoch {ours} but as another \
             object (sequence {}, created {} ms): the sequence number was used twice",
            job.key, h.sequence, h.created_ms
        ),
        Err(e) => format!(
            "object {} already exists and is not a flush object ({e})",
            job.key
        ),
    };
    Ok(Existing::Foreign(detail))
}

/// An error message on one line (store errors can carry response bodies).
fn one_line(s: &str) -> String {
    let mut out: String = s.split_whitespace().collect::<Vec<_>>().join(" ");
    if out.len() > 400 {
        let mut cut = 400;
        while !out.is_char_boundary(cut) {
            cut -= 1;
        }
        out.truncate(cut);
        out.push_str("...");
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn settings_are_checked() {
        FlushSettings::default().validate().unwrap();
        for bad in [
            FlushSettings {
                max_bytes: 0,
                ..Default::default()
            },
            FlushSettings {
                puts_in_flight: 0,
                ..Default::default()
            },
            FlushSettings {
                sealed_max: 0,
                ..Default::default()
            },
            FlushSettings {
                backoff_min: Duration::from_secs(3),
                ..Default::default()
            },
            FlushSettings {
                put_timeout: Duration::ZERO,
                ..Default::default()
            },
        ] {
            assert!(bad.validate().is_err(), "{bad:?}");
            let fixed = sane(bad);
            fixed.validate().unwrap();
        }
    }

    #[test]
    fn errors_say_what_happened_and_which_are_retriable() {
        let gave_up = FlushError::GaveUp {
            sequence: 7,
            after: Duration::from_secs(30),
            last_error: "connection refused".into(),
        };
        assert_eq!(
            gave_up.to_string(),
            "gave up writing object 7 after 30s (connection refused); nothing in it was \
             acknowledged, send it again"
        );
        assert!(gave_up.is_retriable());
        assert!(
            FlushError::Backlog {
                open_bytes: 1,
                sealed: 4,
                sealed_max: 4
            }
            .is_retriable()
        );
        assert!(FlushError::ShuttingDown.is_retriable());
        let fenced = FlushError::Fenced { detail: "x".into() };
        assert!(!fenced.is_retriable() && fenced.is_final());
        assert!(
            !FlushError::TooLarge {
                bytes: 10,
                limit: 1
            }
            .is_retriable()
        );
        for e in [gave_up, fenced, FlushError::ShuttingDown] {
            assert!(!e.to_string().contains('\n'));
        }
    }

    #[test]
    fn jitter_stays_in_range_and_is_reproducible() {
        let b = Duration::from_millis(100);
        for seq in 0..50 {
            for attempt in 0..10 {
                let d = jittered(b, seq, attempt);
                assert!(d >= b / 2 && d < b, "{d:?}");
                assert_eq!(d, jittered(b, seq, attempt));
            }
        }
        assert_ne!(jittered(b, 1, 0), jittered(b, 2, 0));
    }

    #[test]
    fn lease_status_decides_writes() {
        let epoch = Epoch(3);
        let held = LeaseStatus::Held {
            epoch,
            valid_until_ms: 1_000,
            renew_error: None,
        };
        assert_eq!(lease_gate(&held, 999, epoch), LeaseGate::Write);
        assert!(matches!(
            lease_gate(&held, 1_000, epoch),
            LeaseGate::Lapsed(why) if why.contains("lapsed 0 ms ago")
        ));
        assert!(matches!(
            lease_gate(&held, 10, Epoch(2)),
            LeaseGate::Stop(FlushError::LeaseLost { .. })
        ));
        assert!(matches!(
            lease_gate(&LeaseStatus::Released, 10, epoch),
            LeaseGate::Stop(FlushError::LeaseLost { .. })
        ));
    }

    #[test]
    fn one_line_cuts_long_messages() {
        assert_eq!(one_line("a\n  b\tc"), "a b c");
        let long = "é".repeat(500);
        let cut = one_line(&long);
        assert!(cut.len() <= 403 && cut.ends_with("..."));
    }
}
