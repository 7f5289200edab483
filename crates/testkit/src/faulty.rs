//! [`FaultyStore`]: an [`ObjectStore`] wrapper that injects failures, for unit tests of code
//! that talks to object storage.
//!
//! It wraps any store (in tests, usually `object_store::memory::InMemory`) and, per operation
//! kind ([`Op`]) and optionally only for paths under a prefix, injects:
//!
//! - **errors**: a chosen [`ErrorKind`] for the next N calls, or with probability `p` drawn
//!   from the store's own seeded generator (same seed and same call order, same failures; there
//!   is no global randomness);
//! - **lost responses**: the operation *is* applied to the inner store, then the caller gets
//!   an error, as when a PUT succeeded but its answer never arrived;
//! - **hangs**: a future that never completes (optionally after applying the operation), so the
//!   caller's own timeout is what ends the call;
//! - **latency**: fixed or uniform in a range, slept with `tokio::time`, so tests on a paused
//!   clock (`#[tokio::test(start_paused = true)]`) stay fast;
//! - **down / up**: while [`FaultyStore::down`] is in force every call fails at once with a
//!   `Generic` error, like a stopped MinIO refusing connections.
//!
//! It also counts calls per [`Op`] ([`FaultyStore::calls`]), so a test can assert, say, that
//! tail reads made no GET at all.
//!
//! # Which trait method is which [`Op`]
//!
//! | [`Op`] | methods |
//! |---|---|
//! | `Put` | `put_opts` (so `put`) |
//! | `Get` | `get_opts` without `head` (so `get`, `get_range`; `get_ranges` counts one per ranged GET it makes) |
//! | `Head` | `get_opts` with `head = true` (so `head`) |
//! | `List` | `list`, `list_with_offset`, `list_with_delimiter` |
//! | `Delete` | `delete_stream` (so `delete`): one call per path |
//! | `Copy` | `copy_opts` (so `copy`, `copy_if_not_exists`; `rename` is a copy then a delete) |
//! | `Multipart` | `put_multipart_opts`, and each `put_part`, `complete`, `abort` of the upload |
//!
//! A prefix is matched as a plain string prefix of the path (`"p/0000"` matches `p/00001`);
//! `list` matches on its prefix argument (empty without one), `copy` if either path matches.
//!
//! # Rules
//!
//! Fault rules are kept in the order they were added. Each call takes the first rule that
//! matches its op and path and still has calls left; a [`Rule::times`] rule is used up after
//! its count, a [`Rule::probability`] rule stays until [`FaultyStore::clear_faults`]. A
//! probability rule draws from the generator on every matching call, whether or not it fires,
//! so the sequence of outcomes depends only on the seed and the order of calls.
//!
//! Latency applies to every call that reaches the fault stage (injected errors included);
//! the most specific latency setting (longest matching prefix) wins.
//!
//! # Example
//!
//! ```
//! use std::sync::Arc;
//! use std::time::Duration;
//! use object_store::memory::InMemory;
//! use object_store::path::Path;
//! use object_store::{ObjectStore, ObjectStoreExt};
//! use sluice_testkit::faulty::{ErrorKind, FaultyStore, Op};
//!
//! # #[tokio::main(flavor = "current_thread", start_paused = true)]
//! # async fn main() {
//! let faulty = Arc::new(FaultyStore::with_seed(Arc::new(InMemory::new()), 7));
//! let store: Arc<dyn ObjectStore> = faulty.clone();
//! let path = Path::from("p/00000001");
//!
//! faulty.fail_next(Op::Put, 1, ErrorKind::Generic);
//! assert!(store.put(&path, "a".into()).await.is_err());
//!
//! // Applied, but the answer is lost: the object exists and the caller sees an error.
//! faulty.lose_next_response(Op::Put);
//! assert!(store.put(&path, "b".into()).await.is_err());
//! assert_eq!(faulty.inner().get(&path).await.unwrap().bytes().await.unwrap(), "b");
//!
//! faulty.set_latency(Op::Get, Duration::from_millis(5)..Duration::from_millis(20));
//! faulty.down();
//! assert!(store.get(&path).await.is_err());
//! faulty.up();
//! assert!(store.get(&path).await.is_ok());
//! assert_eq!(faulty.calls(Op::Put), 2);
//! assert_eq!(faulty.calls(Op::Get), 2);
//! # }
//! ```

use std::fmt;
use std::future::Future;
use std::ops::Range;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use async_trait::async_trait;
use futures_util::stream::{self, BoxStream, StreamExt};
use object_store::path::Path;
use object_store::{
    CopyOptions, GetOptions, GetResult, ListResult, MultipartUpload, ObjectMeta, ObjectStore,
    PutMultipartOptions, PutOptions, PutPayload, PutResult, Result, UploadPart,
};
use sluice_log::SplitMix64;

/// The `store` name in the `Generic` errors this wrapper makes.
const STORE_NAME: &str = "FaultyStore";

/// The seed [`FaultyStore::new`] uses.
pub const DEFAULT_SEED: u64 = 0x5eed;

/// An operation kind faults and counters are keyed by (see the module doc for the mapping).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Op {
    Put,
    Get,
    Head,
    List,
    Delete,
    Copy,
    Multipart,
}

impl Op {
    /// Every kind, in counter order.
    pub const ALL: [Op; 7] = [
        Op::Put,
        Op::Get,
        Op::Head,
        Op::List,
        Op::Delete,
        Op::Copy,
        Op::Multipart,
    ];

    fn index(self) -> usize {
        self as usize
    }
}

/// Which `object_store::Error` variant an injected failure is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorKind {
    /// `Error::Generic`: what a transport failure, a 5xx or a timeout looks like.
    Generic,
    NotFound,
    AlreadyExists,
    Precondition,
    NotModified,
    NotSupported,
    PermissionDenied,
    Unauthenticated,
}

impl ErrorKind {
    /// Builds the error for `path`, with a message that says it was injected and why.
    pub fn to_error(self, path: &str, why: &str) -> object_store::Error {
        use object_store::Error as E;
        let source: Box<dyn std::error::Error + Send + Sync> =
            format!("{why} (injected by {STORE_NAME})").into();
        let path = path.to_string();
        match self {
            ErrorKind::Generic => E::Generic {
                store: STORE_NAME,
                source,
            },
            ErrorKind::NotFound => E::NotFound { path, source },
            ErrorKind::AlreadyExists => E::AlreadyExists { path, source },
            ErrorKind::Precondition => E::Precondition { path, source },
            ErrorKind::NotModified => E::NotModified { path, source },
            ErrorKind::NotSupported => E::NotSupported { source },
            ErrorKind::PermissionDenied => E::PermissionDenied { path, source },
            ErrorKind::Unauthenticated => E::Unauthenticated { path, source },
        }
    }
}

/// What happens to a call a rule fires on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fault {
    /// Fail without touching the inner store.
    Error(ErrorKind),
    /// Apply the operation to the inner store, then fail: the response was lost.
    LoseResponse(ErrorKind),
    /// Never complete, without touching the inner store.
    Hang,
    /// Apply the operation to the inner store, then never complete.
    HangAfterApply,
}

#[derive(Debug, Clone, Copy, PartialEq)]
enum Trigger {
    /// Fires on this many more matching calls, then is gone.
    Times(u64),
    /// Fires on each matching call with this probability.
    Probability(f64),
}

/// One fault rule: which calls it matches and what it does to them.
#[derive(Debug, Clone, PartialEq)]
pub struct Rule {
    op: Op,
    prefix: Option<String>,
    fault: Fault,
    trigger: Trigger,
}

impl Rule {
    /// A rule that applies `fault` to the next call of `op` (change with [`Rule::times`] or
    /// [`Rule::probability`]).
    pub fn new(op: Op, fault: Fault) -> Rule {
        Rule {
            op,
            prefix: None,
            fault,
            trigger: Trigger::Times(1),
        }
    }

    /// Fire on the next `n` matching calls.
    pub fn times(mut self, n: u64) -> Rule {
        self.trigger = Trigger::Times(n);
        self
    }

    /// Fire on each matching call with probability `p` (clamped to 0..=1), drawn from the
    /// store's seeded generator; the rule stays until cleared.
    pub fn probability(mut self, p: f64) -> Rule {
        let p = if p.is_nan() { 0.0 } else { p.clamp(0.0, 1.0) };
        self.trigger = Trigger::Probability(p);
        self
    }

    /// Match only paths that start with `prefix`.
    pub fn under(mut self, prefix: impl Into<String>) -> Rule {
        self.prefix = Some(prefix.into());
        self
    }

    fn matches(&self, op: Op, paths: &[&str]) -> bool {
        self.op == op
            && match &self.prefix {
                None => true,
                Some(p) => paths.iter().any(|path| path.starts_with(p.as_str())),
            }
    }
}

/// A delay added to calls: fixed, or uniform in `[start, end)`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Latency {
    Fixed(Duration),
    Uniform(Range<Duration>),
}

impl From<Duration> for Latency {
    fn from(d: Duration) -> Latency {
        Latency::Fixed(d)
    }
}

impl From<Range<Duration>> for Latency {
    fn from(r: Range<Duration>) -> Latency {
        Latency::Uniform(r)
    }
}

#[derive(Debug)]
struct State {
    rules: Vec<Rule>,
    /// `(op, prefix, latency)`; the longest matching prefix wins.
    latencies: Vec<(Op, Option<String>, Latency)>,
    rng: SplitMix64,
}

#[derive(Debug)]
struct Shared {
    state: Mutex<State>,
    down: AtomicBool,
    calls: [AtomicU64; Op::ALL.len()],
    injected: [AtomicU64; Op::ALL.len()],
}

/// What one call will go through, decided synchronously when it is made.
#[derive(Debug)]
struct Decision {
    op: Op,
    path: String,
    down: bool,
    latency: Option<Duration>,
    fault: Option<Fault>,
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, State> {
        // A panic while holding the lock cannot leave the state half-updated in a way that
        // matters to a test double; keep going rather than poisoning every later call.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn decide(&self, op: Op, paths: &[&str]) -> Decision {
        self.calls[op.index()].fetch_add(1, Ordering::Relaxed);
        let path = paths.first().copied().unwrap_or_default().to_string();
        if self.down.load(Ordering::SeqCst) {
            self.injected[op.index()].fetch_add(1, Ordering::Relaxed);
            return Decision {
                op,
                path,
                down: true,
                latency: None,
                fault: None,
            };
        }
        let mut state = self.lock();
        let State {
            rules,
            latencies,
            rng,
        } = &mut *state;
        let mut fault = None;
        let mut used_up = None;
        for (i, rule) in rules.iter_mut().enumerate() {
            if !rule.matches(op, paths) {
                continue;
            }
            match &mut rule.trigger {
                Trigger::Times(0) => continue,
                Trigger::Times(n) => {
                    *n -= 1;
                    if *n == 0 {
                        used_up = Some(i);
                    }
                    fault = Some(rule.fault);
                    break;
                }
                Trigger::Probability(p) => {
                    if rng.unit() < *p {
                        fault = Some(rule.fault);
                        break;
                    }
                }
            }
        }
        if let Some(i) = used_up {
            rules.remove(i);
        }
        if fault.is_some() {
            self.injected[op.index()].fetch_add(1, Ordering::Relaxed);
        }
        let latency = latencies
            .iter()
            .filter(|(o, prefix, _)| {
                *o == op
                    && prefix
                        .as_deref()
                        .is_none_or(|p| paths.iter().any(|path| path.starts_with(p)))
            })
            .max_by_key(|(_, prefix, _)| prefix.as_ref().map_or(0, |p| p.len() + 1))
            .map(|(_, _, l)| match l {
                Latency::Fixed(d) => *d,
                Latency::Uniform(r) if r.end <= r.start => r.start,
                Latency::Uniform(r) => r.start + (r.end - r.start).mul_f64(rng.unit()),
            });
        Decision {
            op,
            path,
            down: false,
            latency,
            fault,
        }
    }
}

impl Decision {
    /// The error a call gets while the store is down.
    fn down_error(&self) -> object_store::Error {
        ErrorKind::Generic.to_error(
            &self.path,
            &format!("{:?} {}: store is down", self.op, self.path),
        )
    }

    /// Runs the call: the down check, the latency, then the fault around `apply`, which is only
    /// started when the fault lets the operation reach the inner store.
    async fn run<T, F>(self, apply: impl FnOnce() -> F) -> Result<T>
    where
        F: Future<Output = Result<T>>,
    {
        if self.down {
            return Err(self.down_error());
        }
        if let Some(d) = self.latency {
            tokio::time::sleep(d).await;
        }
        match self.fault {
            None => apply().await,
            Some(Fault::Error(kind)) => {
                Err(kind.to_error(&self.path, &format!("{:?} {}: failed", self.op, self.path)))
            }
            Some(Fault::LoseResponse(kind)) => {
                let outcome = apply().await.map(|_| ());
                Err(kind.to_error(
                    &self.path,
                    &format!(
                        "{:?} {}: response lost after the operation was applied (inner result: {})",
                        self.op,
                        self.path,
                        match outcome {
                            Ok(()) => "ok".to_string(),
                            Err(e) => format!("error: {e}"),
                        }
                    ),
                ))
            }
            Some(Fault::Hang) => std::future::pending().await,
            Some(Fault::HangAfterApply) => {
                let _ = apply().await;
                std::future::pending().await
            }
        }
    }
}

/// An [`ObjectStore`] that passes every call to an inner store, with the faults its rules
/// inject (see the module doc). Settings take `&self`, so a test keeps an `Arc<FaultyStore>`
/// and hands a clone of it, as `Arc<dyn ObjectStore>`, to the code under test.
#[derive(Debug)]
pub struct FaultyStore {
    inner: Arc<dyn ObjectStore>,
    shared: Arc<Shared>,
}

impl FaultyStore {
    /// Wraps `inner`, with no faults, no latency, the store up and [`DEFAULT_SEED`].
    pub fn new(inner: Arc<dyn ObjectStore>) -> FaultyStore {
        FaultyStore::with_seed(inner, DEFAULT_SEED)
    }

    /// Wraps `inner`, drawing probabilities and latencies from a generator seeded with `seed`.
    pub fn with_seed(inner: Arc<dyn ObjectStore>, seed: u64) -> FaultyStore {
        FaultyStore {
            inner,
            shared: Arc::new(Shared {
                state: Mutex::new(State {
                    rules: Vec::new(),
                    latencies: Vec::new(),
                    rng: SplitMix64::new(seed),
                }),
                down: AtomicBool::new(false),
                calls: Default::default(),
                injected: Default::default(),
            }),
        }
    }

    /// The wrapped store, to look at (or set up) its contents with no fault in the way.
    pub fn inner(&self) -> &Arc<dyn ObjectStore> {
        &self.inner
    }

    /// Adds a fault rule after those already there.
    pub fn inject(&self, rule: Rule) -> &Self {
        self.shared.lock().rules.push(rule);
        self
    }

    /// The next `n` calls of `op` fail with `kind` and do not reach the inner store.
    pub fn fail_next(&self, op: Op, n: u64, kind: ErrorKind) -> &Self {
        self.inject(Rule::new(op, Fault::Error(kind)).times(n))
    }

    /// Each call of `op` fails with `kind` with probability `p` (seeded, reproducible).
    pub fn fail_with_probability(&self, op: Op, p: f64, kind: ErrorKind) -> &Self {
        self.inject(Rule::new(op, Fault::Error(kind)).probability(p))
    }

    /// The next call of `op` is applied to the inner store, then returns a `Generic` error.
    pub fn lose_next_response(&self, op: Op) -> &Self {
        self.inject(Rule::new(op, Fault::LoseResponse(ErrorKind::Generic)))
    }

    /// The next call of `op` never completes (and is not applied).
    pub fn hang_next(&self, op: Op) -> &Self {
        self.inject(Rule::new(op, Fault::Hang))
    }

    /// Removes every fault rule (latency settings and the down switch stay).
    pub fn clear_faults(&self) -> &Self {
        self.shared.lock().rules.clear();
        self
    }

    /// Delays every call of `op` by `latency` (a `Duration`, or a `Range<Duration>` for a
    /// uniform draw), replacing an earlier setting for `op` without prefix.
    pub fn set_latency(&self, op: Op, latency: impl Into<Latency>) -> &Self {
        self.set_latency_inner(op, None, Some(latency.into()))
    }

    /// As [`FaultyStore::set_latency`], only for paths starting with `prefix`.
    pub fn set_latency_under(
        &self,
        op: Op,
        prefix: impl Into<String>,
        latency: impl Into<Latency>,
    ) -> &Self {
        self.set_latency_inner(op, Some(prefix.into()), Some(latency.into()))
    }

    /// Removes every latency setting.
    pub fn clear_latency(&self) -> &Self {
        self.shared.lock().latencies.clear();
        self
    }

    fn set_latency_inner(&self, op: Op, prefix: Option<String>, l: Option<Latency>) -> &Self {
        let mut state = self.shared.lock();
        state
            .latencies
            .retain(|(o, p, _)| !(*o == op && *p == prefix));
        if let Some(l) = l {
            state.latencies.push((op, prefix, l));
        }
        self
    }

    /// From now on every call fails at once with a `Generic` error, as with a stopped server.
    pub fn down(&self) -> &Self {
        self.shared.down.store(true, Ordering::SeqCst);
        self
    }

    /// Ends [`FaultyStore::down`].
    pub fn up(&self) -> &Self {
        self.shared.down.store(false, Ordering::SeqCst);
        self
    }

    /// Whether the store is down.
    pub fn is_down(&self) -> bool {
        self.shared.down.load(Ordering::SeqCst)
    }

    /// How many calls of `op` were made through this wrapper (failed and injected ones too).
    pub fn calls(&self, op: Op) -> u64 {
        self.shared.calls[op.index()].load(Ordering::Relaxed)
    }

    /// How many calls of all kinds were made.
    pub fn total_calls(&self) -> u64 {
        Op::ALL.iter().map(|op| self.calls(*op)).sum()
    }

    /// How many calls of `op` got a fault (a rule fired or the store was down).
    pub fn injected(&self, op: Op) -> u64 {
        self.shared.injected[op.index()].load(Ordering::Relaxed)
    }

    /// Sets every call and injection counter back to zero.
    pub fn reset_counters(&self) {
        for c in self.shared.calls.iter().chain(&self.shared.injected) {
            c.store(0, Ordering::Relaxed);
        }
    }

    fn decide(&self, op: Op, paths: &[&str]) -> Decision {
        self.shared.decide(op, paths)
    }

    /// Wraps a listing stream: the decision is taken now, the fault when it is first polled.
    fn faulty_list(
        &self,
        prefix: Option<&Path>,
        list: impl FnOnce(&Arc<dyn ObjectStore>) -> BoxStream<'static, Result<ObjectMeta>>
        + Send
        + 'static,
    ) -> BoxStream<'static, Result<ObjectMeta>> {
        let decision = self.decide(Op::List, &[prefix.map_or("", |p| p.as_ref())]);
        let inner = Arc::clone(&self.inner);
        stream::once(async move {
            let listed = decision
                .run(|| async {
                    // The whole listing is the "response": a lost one is consumed, then lost.
                    Ok(list(&inner).collect::<Vec<_>>().await)
                })
                .await;
            match listed {
                Ok(items) => stream::iter(items).boxed(),
                Err(e) => stream::once(async move { Err(e) }).boxed(),
            }
        })
        .flatten()
        .boxed()
    }
}

impl fmt::Display for FaultyStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "FaultyStore({})", self.inner)
    }
}

#[async_trait]
impl ObjectStore for FaultyStore {
    async fn put_opts(
        &self,
        location: &Path,
        payload: PutPayload,
        opts: PutOptions,
    ) -> Result<PutResult> {
        self.decide(Op::Put, &[location.as_ref()])
            .run(|| self.inner.put_opts(location, payload, opts))
            .await
    }

    async fn put_multipart_opts(
        &self,
        location: &Path,
        opts: PutMultipartOptions,
    ) -> Result<Box<dyn MultipartUpload>> {
        let upload = self
            .decide(Op::Multipart, &[location.as_ref()])
            .run(|| self.inner.put_multipart_opts(location, opts))
            .await?;
        Ok(Box::new(FaultyUpload {
            inner: upload,
            shared: Arc::clone(&self.shared),
            path: location.to_string(),
        }))
    }

    async fn get_opts(&self, location: &Path, options: GetOptions) -> Result<GetResult> {
        let op = if options.head { Op::Head } else { Op::Get };
        self.decide(op, &[location.as_ref()])
            .run(|| self.inner.get_opts(location, options))
            .await
    }

    fn delete_stream(
        &self,
        locations: BoxStream<'static, Result<Path>>,
    ) -> BoxStream<'static, Result<Path>> {
        // One inner delete per path, so each path gets its own decision and its own outcome.
        let inner = Arc::clone(&self.inner);
        let shared = Arc::clone(&self.shared);
        locations
            .then(move |location| {
                let inner = Arc::clone(&inner);
                let shared = Arc::clone(&shared);
                async move {
                    let location = location?;
                    shared
                        .decide(Op::Delete, &[location.as_ref()])
                        .run(|| async {
                            let owned = location.clone();
                            let one = stream::once(async move { Ok(owned) }).boxed();
                            match inner.delete_stream(one).next().await {
                                Some(result) => result,
                                None => Err(ErrorKind::Generic.to_error(
                                    location.as_ref(),
                                    "inner delete_stream yielded nothing for one path",
                                )),
                            }
                        })
                        .await
                }
            })
            .boxed()
    }

    fn list(&self, prefix: Option<&Path>) -> BoxStream<'static, Result<ObjectMeta>> {
        let prefix_owned = prefix.cloned();
        self.faulty_list(prefix, move |inner| inner.list(prefix_owned.as_ref()))
    }

    fn list_with_offset(
        &self,
        prefix: Option<&Path>,
        offset: &Path,
    ) -> BoxStream<'static, Result<ObjectMeta>> {
        let prefix_owned = prefix.cloned();
        let offset = offset.clone();
        self.faulty_list(prefix, move |inner| {
            inner.list_with_offset(prefix_owned.as_ref(), &offset)
        })
    }

    async fn list_with_delimiter(&self, prefix: Option<&Path>) -> Result<ListResult> {
        self.decide(Op::List, &[prefix.map_or("", |p| p.as_ref())])
            .run(|| self.inner.list_with_delimiter(prefix))
            .await
    }

    async fn copy_opts(&self, from: &Path, to: &Path, options: CopyOptions) -> Result<()> {
        self.decide(Op::Copy, &[from.as_ref(), to.as_ref()])
            .run(|| self.inner.copy_opts(from, to, options))
            .await
    }
}

/// The upload [`FaultyStore::put_multipart_opts`] returns: each part, the completion and the
/// abort are [`Op::Multipart`] calls of their own.
#[derive(Debug)]
struct FaultyUpload {
    inner: Box<dyn MultipartUpload>,
    shared: Arc<Shared>,
    path: String,
}

#[async_trait]
impl MultipartUpload for FaultyUpload {
    fn put_part(&mut self, data: PutPayload) -> UploadPart {
        let decision = self.shared.decide(Op::Multipart, &[&self.path]);
        // `put_part` returns a 'static future, so the inner part has to be handed over now
        // (only when the fault lets it through); its future is awaited after the latency.
        let part = match decision.fault {
            _ if decision.down => None,
            Some(Fault::Error(_) | Fault::Hang) => None,
            _ => Some(self.inner.put_part(data)),
        };
        Box::pin(async move {
            match part {
                Some(part) => decision.run(|| part).await,
                None => decision.run(|| async { Ok(()) }).await,
            }
        })
    }

    async fn complete(&mut self) -> Result<PutResult> {
        let decision = self.shared.decide(Op::Multipart, &[&self.path]);
        decision.run(|| self.inner.complete()).await
    }

    async fn abort(&mut self) -> Result<()> {
        let decision = self.shared.decide(Op::Multipart, &[&self.path]);
        decision.run(|| self.inner.abort()).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use object_store::memory::InMemory;
    use object_store::{ObjectStoreExt, PutMode};

    fn store() -> (Arc<FaultyStore>, Arc<dyn ObjectStore>) {
        let faulty = Arc::new(FaultyStore::new(Arc::new(InMemory::new())));
        let dyn_store: Arc<dyn ObjectStore> = faulty.clone();
        (faulty, dyn_store)
    }

    fn p(s: &str) -> Path {
        Path::from(s)
    }

    #[test]
    fn seeded_rng_is_deterministic_and_in_range() {
        let mut a = SplitMix64::new(42);
        let mut b = SplitMix64::new(42);
        for _ in 0..1000 {
            let x = a.unit();
            assert_eq!(x, b.unit());
            assert!((0.0..1.0).contains(&x));
        }
        assert_ne!(SplitMix64::new(1).next_u64(), SplitMix64::new(2).next_u64());
    }

    #[test]
    fn error_kinds_map_to_their_variants() {
        use object_store::Error as E;
        let e = |k: ErrorKind| k.to_error("a/b", "why");
        assert!(matches!(e(ErrorKind::Generic), E::Generic { .. }));
        assert!(matches!(e(ErrorKind::NotFound), E::NotFound { path, .. } if path == "a/b"));
        assert!(matches!(
            e(ErrorKind::AlreadyExists),
            E::AlreadyExists { .. }
        ));
        assert!(matches!(e(ErrorKind::Precondition), E::Precondition { .. }));
        assert!(matches!(e(ErrorKind::NotModified), E::NotModified { .. }));
        assert!(matches!(e(ErrorKind::NotSupported), E::NotSupported { .. }));
        assert!(matches!(
            e(ErrorKind::PermissionDenied),
            E::PermissionDenied { .. }
        ));
        assert!(matches!(
            e(ErrorKind::Unauthenticated),
            E::Unauthenticated { .. }
        ));
        assert!(e(ErrorKind::Generic).to_string().contains("injected"));
    }

    #[tokio::test]
    async fn no_faults_passes_everything_through() {
        let (faulty, store) = store();
        store.put(&p("a/1"), "x".into()).await.unwrap();
        assert_eq!(
            store.get(&p("a/1")).await.unwrap().bytes().await.unwrap(),
            "x"
        );
        assert_eq!(store.head(&p("a/1")).await.unwrap().size, 1);
        assert_eq!(store.get_range(&p("a/1"), 0..1).await.unwrap(), "x");
        store.copy(&p("a/1"), &p("a/2")).await.unwrap();
        let listed: Vec<_> = store.list(Some(&p("a"))).collect().await;
        assert_eq!(listed.len(), 2);
        store.delete(&p("a/1")).await.unwrap();
        assert_eq!(faulty.calls(Op::Put), 1);
        assert_eq!(faulty.calls(Op::Get), 2);
        assert_eq!(faulty.calls(Op::Head), 1);
        assert_eq!(faulty.calls(Op::Copy), 1);
        assert_eq!(faulty.calls(Op::List), 1);
        assert_eq!(faulty.calls(Op::Delete), 1);
        assert_eq!(faulty.total_calls(), 7);
        assert_eq!(Op::ALL.iter().map(|o| faulty.injected(*o)).sum::<u64>(), 0);
        faulty.reset_counters();
        assert_eq!(faulty.total_calls(), 0);
    }

    #[tokio::test]
    async fn fail_next_fails_exactly_n_calls_without_applying_them() {
        let (faulty, store) = store();
        faulty.fail_next(Op::Put, 2, ErrorKind::Precondition);
        for _ in 0..2 {
            let e = store.put(&p("k"), "x".into()).await.unwrap_err();
            assert!(
                matches!(e, object_store::Error::Precondition { .. }),
                "{e:?}"
            );
        }
        assert!(matches!(
            faulty.inner().head(&p("k")).await,
            Err(object_store::Error::NotFound { .. })
        ));
        store.put(&p("k"), "x".into()).await.unwrap();
        assert_eq!(faulty.calls(Op::Put), 3);
        assert_eq!(faulty.injected(Op::Put), 2);
    }

    #[tokio::test]
    async fn rules_only_hit_their_op_and_prefix() {
        let (faulty, store) = store();
        faulty.inject(Rule::new(Op::Put, Fault::Error(ErrorKind::Generic)).under("p/writer"));
        store.put(&p("p/0001"), "x".into()).await.unwrap();
        store.get(&p("p/0001")).await.unwrap();
        assert!(store.put(&p("p/writer"), "x".into()).await.is_err());
        store.put(&p("p/writer"), "x".into()).await.unwrap();
    }

    #[tokio::test]
    async fn lost_put_is_applied_and_reports_an_error() {
        let (faulty, store) = store();
        faulty.lose_next_response(Op::Put);
        let e = store.put(&p("obj"), "body".into()).await.unwrap_err();
        assert!(matches!(e, object_store::Error::Generic { .. }), "{e:?}");
        assert!(e.to_string().contains("response lost"), "{e}");
        let body = faulty.inner().get(&p("obj")).await.unwrap().bytes().await;
        assert_eq!(body.unwrap(), "body");
    }

    #[tokio::test]
    async fn lost_create_then_retry_sees_already_exists() {
        // The ambiguity a create-if-absent writer has to resolve: its first PUT was applied,
        // the retry is refused by the inner store's own condition check.
        let (faulty, store) = store();
        faulty.lose_next_response(Op::Put);
        let create = || PutOptions::from(PutMode::Create);
        assert!(
            store
                .put_opts(&p("seq/1"), "a".into(), create())
                .await
                .is_err()
        );
        let e = store
            .put_opts(&p("seq/1"), "b".into(), create())
            .await
            .unwrap_err();
        assert!(
            matches!(e, object_store::Error::AlreadyExists { .. }),
            "{e:?}"
        );
        let body = store.get(&p("seq/1")).await.unwrap().bytes().await.unwrap();
        assert_eq!(body, "a");
    }

    #[tokio::test]
    async fn down_fails_everything_until_up() {
        let (faulty, store) = store();
        store.put(&p("a"), "x".into()).await.unwrap();
        faulty.down();
        assert!(faulty.is_down());
        assert!(store.put(&p("b"), "x".into()).await.is_err());
        assert!(store.get(&p("a")).await.is_err());
        assert!(store.head(&p("a")).await.is_err());
        assert!(store.delete(&p("a")).await.is_err());
        assert!(store.copy(&p("a"), &p("c")).await.is_err());
        assert!(store.list_with_delimiter(None).await.is_err());
        let listed: Vec<_> = store.list(None).collect().await;
        assert!(listed.len() == 1 && listed[0].is_err(), "{listed:?}");
        assert!(store.put_multipart(&p("m")).await.is_err());
        faulty.up();
        assert_eq!(
            store.get(&p("a")).await.unwrap().bytes().await.unwrap(),
            "x"
        );
        assert!(matches!(
            faulty.inner().head(&p("b")).await,
            Err(object_store::Error::NotFound { .. })
        ));
    }

    #[tokio::test(start_paused = true)]
    async fn hang_never_completes_and_is_not_applied() {
        let (faulty, store) = store();
        faulty.hang_next(Op::Put);
        let started = tokio::time::Instant::now();
        let r = tokio::time::timeout(Duration::from_secs(30), store.put(&p("h"), "x".into())).await;
        assert!(r.is_err(), "the put should have hung");
        assert_eq!(started.elapsed(), Duration::from_secs(30));
        assert!(faulty.inner().head(&p("h")).await.is_err());
        // One-shot: the next call goes through.
        store.put(&p("h"), "x".into()).await.unwrap();
    }

    #[tokio::test(start_paused = true)]
    async fn hang_after_apply_writes_then_hangs() {
        let (faulty, store) = store();
        faulty.inject(Rule::new(Op::Put, Fault::HangAfterApply));
        let r = tokio::time::timeout(Duration::from_secs(1), store.put(&p("h"), "x".into())).await;
        assert!(r.is_err());
        assert!(faulty.inner().head(&p("h")).await.is_ok());
    }

    #[tokio::test(start_paused = true)]
    async fn fixed_and_uniform_latency_use_tokio_time() {
        let (faulty, store) = store();
        store.put(&p("a"), "x".into()).await.unwrap();
        faulty.set_latency(Op::Get, Duration::from_millis(40));
        let t = tokio::time::Instant::now();
        store.get(&p("a")).await.unwrap();
        assert_eq!(t.elapsed(), Duration::from_millis(40));

        faulty.set_latency(Op::Get, Duration::from_millis(5)..Duration::from_millis(20));
        let mut seen = Vec::new();
        for _ in 0..50 {
            let t = tokio::time::Instant::now();
            store.get(&p("a")).await.unwrap();
            let d = t.elapsed();
            assert!(
                d >= Duration::from_millis(5) && d < Duration::from_millis(21),
                "{d:?}"
            );
            seen.push(d);
        }
        seen.dedup();
        assert!(seen.len() > 10, "the draws should vary: {seen:?}");

        // Other ops are not delayed; a prefix setting beats the op-wide one.
        let t = tokio::time::Instant::now();
        store.head(&p("a")).await.unwrap();
        assert_eq!(t.elapsed(), Duration::ZERO);
        faulty.set_latency_under(Op::Get, "a", Duration::from_secs(1));
        let t = tokio::time::Instant::now();
        store.get(&p("a")).await.unwrap();
        assert_eq!(t.elapsed(), Duration::from_secs(1));
        faulty.clear_latency();
        let t = tokio::time::Instant::now();
        store.get(&p("a")).await.unwrap();
        assert_eq!(t.elapsed(), Duration::ZERO);
    }

    async fn outcomes(seed: u64) -> Vec<bool> {
        let faulty = Arc::new(FaultyStore::with_seed(Arc::new(InMemory::new()), seed));
        faulty.fail_with_probability(Op::Put, 0.3, ErrorKind::Generic);
        let mut out = Vec::new();
        for i in 0..200 {
            out.push(faulty.put(&p(&format!("k/{i}")), "x".into()).await.is_ok());
        }
        out
    }

    #[tokio::test]
    async fn seeded_probability_is_reproducible() {
        let a = outcomes(11).await;
        assert_eq!(a, outcomes(11).await);
        assert_ne!(a, outcomes(12).await);
        let failures = a.iter().filter(|ok| !**ok).count();
        assert!((30..=90).contains(&failures), "{failures} of 200 failed");
    }

    #[tokio::test]
    async fn delete_stream_faults_each_path() {
        let (faulty, store) = store();
        for k in ["d/1", "d/2", "d/3"] {
            store.put(&p(k), "x".into()).await.unwrap();
        }
        faulty.inject(Rule::new(Op::Delete, Fault::Error(ErrorKind::Generic)).under("d/2"));
        let paths = stream::iter(["d/1", "d/2", "d/3"].map(|k| Ok(p(k)))).boxed();
        let results: Vec<_> = store.delete_stream(paths).collect().await;
        assert!(results[0].is_ok() && results[1].is_err() && results[2].is_ok());
        assert_eq!(faulty.calls(Op::Delete), 3);
        let left: Vec<_> = faulty.inner().list(None).collect().await;
        assert_eq!(left.len(), 1);
    }

    #[tokio::test]
    async fn multipart_parts_and_complete_are_faulted() {
        let (faulty, store) = store();
        let mut upload = store.put_multipart(&p("mp")).await.unwrap();
        faulty.fail_next(Op::Multipart, 1, ErrorKind::Generic);
        assert!(upload.put_part("ab".into()).await.is_err());
        upload.put_part("cd".into()).await.unwrap();
        faulty.lose_next_response(Op::Multipart);
        assert!(upload.complete().await.is_err());
        // Completed in the inner store despite the error; the failed part is not in it.
        let body = faulty.inner().get(&p("mp")).await.unwrap().bytes().await;
        assert_eq!(body.unwrap(), "cd");
        assert_eq!(faulty.calls(Op::Multipart), 4);
    }

    #[tokio::test]
    async fn list_variants_are_faulted_and_lost_lists_error() {
        let (faulty, store) = store();
        store.put(&p("l/1"), "x".into()).await.unwrap();
        faulty.lose_next_response(Op::List);
        let listed: Vec<_> = store.list(Some(&p("l"))).collect().await;
        assert!(listed.len() == 1 && listed[0].is_err(), "{listed:?}");
        faulty.fail_next(Op::List, 1, ErrorKind::Generic);
        assert!(store.list_with_delimiter(None).await.is_err());
        let listed: Vec<_> = store.list_with_offset(None, &p("l/0")).collect().await;
        assert_eq!(listed.len(), 1);
        assert!(listed[0].is_ok());
        assert_eq!(faulty.calls(Op::List), 3);
    }
}
