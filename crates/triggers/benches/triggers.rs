//! Event triggers: evaluation throughput, memory per entity, firing latency and recovery time.
//!
//! Ten rules (see [`RULES`]) over seventeen event names (see [`NAMES`], one of which no rule
//! mentions) and a deterministic generated stream ([`Stream`]): each event picks a name by
//! weight and an entity, uniformly among `--entities` or, three times in ten, again one of the
//! last 1,024 entities picked (so short sequences such as three logins within a minute
//! happen). Event times advance by 3.6 ms per event (a million events per simulated hour).
//!
//! Two parts, chosen with `--parts engine,broker` (both by default):
//!
//! 1. **engine**: [`Engine`] alone, no I/O, one per rule, on this thread. Each event goes
//!    only to the engines whose rule mentions its name (a name → engines index built once,
//!    as the runtime's `Program::event_id` check does per trigger). After every pass of
//!    [`PASS_EVENTS`] events each engine's time moves to the stream's time (`advance`) and
//!    each engine with changes gives up its step (`take_step`, whose result is dropped), as
//!    the runtime does after each pass over its sources. Reported: input events/s, rule
//!    evaluations/s (with and without the time spent in `take_step`), firings at events and
//!    at deadlines, and the time to fire every deadline left (time moved 31 days on).
//!    Memory: a counting global allocator's live bytes after loading every entity (one event
//!    each that starts a pending evaluation) into one engine per rule, and into all ten at
//!    once (also the RSS growth, which adds malloc's own overhead). Allocations: counted
//!    inside `Engine::on_event` only, over a window of events that change states but never
//!    fire or create entities, and in `take_step` per entity update.
//! 2. **broker**: a real [`Broker`] in a temporary directory under `--dir` (default
//!    `<workspace>/target/bench-tmp`: local disk; the default `FlushPolicy::Always`, so every
//!    append is fsynced before it counts as durable) and the real clock, a [`Manager`] on a
//!    two-worker tokio runtime, one source topic of [`SOURCE_PARTITIONS`] partitions.
//!    - *end to end*: `--events` events over `--entities` entities (key = entity, header
//!      `event` = name, a [`VALUE_BYTES`]-byte value), stamped over the two hours ending one
//!      hour before the run (a replay: every window of an hour or less has closed by the time
//!      the triggers catch up, so those timers fire during the run), appended in batches with
//!      `Broker::append` before any trigger exists. Then the ten triggers are created with
//!      `start: earliest` and a topic sink each, and the clock runs until every trigger has
//!      evaluated every event its rule mentions with lag 0, then until every firing is
//!      delivered. Reported: input events/s and rule evaluations/s over that wall time, the
//!      process's CPU seconds (`getrusage`, user + system, every thread) per million input
//!      events, firings, state-log bytes written (the state topics' stored bytes) and peak RSS.
//!    - *event firing latency*: `--latency-rate` entities per second for `--latency-seconds`
//!      get a `cart`, then 100 ms later a `checkout` (rule `"cart" THEN "checkout" WITHIN
//!      1h`), each record its own append. Latency: from the checkout's append being durable
//!      (its `durable()` resolving in the producing task) to a reader blocked in
//!      `Broker::read` on the sink partition receiving the firing.
//!    - *timer firing latency*: as many entities get one `cart` stamped 30 min minus
//!      [`TIMER_LEAD_MS`] in the past, so the window of `"cart" THEN NOT "checkout" WITHIN 30m`
//!      closes [`TIMER_LEAD_MS`] after the append. Latency: from that deadline (wall clock) to
//!      the reader receiving the firing.
//!    - *recovery*: the manager and the broker are shut down cleanly and opened again on the
//!      same directory. Reported: `Broker::open`, and from `Manager::open` until every trigger
//!      reports `running` (the runtime sets it the moment its state is rebuilt from the last
//!      snapshot and the log after it, and the topic sink checked for pending firings), with the
//!      entities and the state-log bytes. The entities are checked afterwards: one probe event
//!      per trigger must bring each trigger's entity count to its count before the restart + 1.
//!
//! Run from the workspace root (`scripts/bench-triggers.sh` runs the published sizes):
//!
//! ```text
//! cargo bench -p sluice-triggers --bench triggers                   # small: a smoke run
//! cargo bench -p sluice-triggers --bench triggers -- --full         # 1M entities, 3 repeats
//! cargo bench -p sluice-triggers --bench triggers -- --full --parts engine --repeats 1
//! ```

// A benchmark binary exists to print its results on stdout.
#![allow(clippy::print_stdout)]

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use bytes::{Bytes, BytesMut};
use hdrhistogram::Histogram;
use sluice_broker::storage::PartitionStorage;
use sluice_broker::{Broker, BrokerConfig, TopicConfig};
use sluice_protocol::partitioner::partition_for_key;
use sluice_protocol::records::{Batches, ProducerRecord, encode_batch};
use sluice_rules::eval::EventId;
use sluice_rules::rule::Rule;
use sluice_triggers::engine::Engine;
use sluice_triggers::spec::StartFrom;
use sluice_triggers::{CreateRequest, Manager};

// ---------------------------------------------------------------------------------------------
// Counting allocator
// ---------------------------------------------------------------------------------------------

/// Wraps the system allocator: counts live bytes (as requested, without malloc's overhead) and
/// allocation calls, and apart those made while this thread's [`IN_EVAL`] flag is set.
struct CountingAlloc;

#[global_allocator]
static GLOBAL: CountingAlloc = CountingAlloc;

/// Bytes allocated and not yet freed, all threads.
static LIVE_BYTES: AtomicI64 = AtomicI64::new(0);
/// Calls to `alloc`, `alloc_zeroed` and `realloc`, all threads.
static ALLOCS: AtomicU64 = AtomicU64::new(0);
/// The same calls made while the calling thread was inside `Engine::on_event`.
static EVAL_ALLOCS: AtomicU64 = AtomicU64::new(0);

thread_local! {
    static IN_EVAL: Cell<bool> = const { Cell::new(false) };
}

fn count_call() {
    ALLOCS.fetch_add(1, Ordering::Relaxed);
    if IN_EVAL.with(Cell::get) {
        EVAL_ALLOCS.fetch_add(1, Ordering::Relaxed);
    }
}

// SAFETY: every method forwards to `System` with the caller's arguments unchanged, so the
// `GlobalAlloc` contract is `System`'s; the counting touches only atomics and a const
// thread-local `Cell`, neither of which allocates or unwinds.
unsafe impl GlobalAlloc for CountingAlloc {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        count_call();
        LIVE_BYTES.fetch_add(layout.size() as i64, Ordering::Relaxed);
        // SAFETY: the caller guarantees `layout` has a non-zero size, as `System.alloc` requires.
        unsafe { System.alloc(layout) }
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        count_call();
        LIVE_BYTES.fetch_add(layout.size() as i64, Ordering::Relaxed);
        // SAFETY: same contract as `alloc`, guaranteed by the caller.
        unsafe { System.alloc_zeroed(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        LIVE_BYTES.fetch_sub(layout.size() as i64, Ordering::Relaxed);
        // SAFETY: the caller guarantees `ptr` came from this allocator (hence from `System`) with
        // this `layout`.
        unsafe { System.dealloc(ptr, layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        count_call();
        LIVE_BYTES.fetch_add(new_size as i64 - layout.size() as i64, Ordering::Relaxed);
        // SAFETY: the caller guarantees `ptr` came from this allocator with `layout`, and that
        // `new_size` is non-zero and valid for `layout`'s alignment.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

fn live_bytes() -> i64 {
    LIVE_BYTES.load(Ordering::Relaxed)
}

/// Resident set size from `/proc/self/statm`, bytes (0 where it cannot be read).
fn rss_bytes() -> u64 {
    std::fs::read_to_string("/proc/self/statm")
        .ok()
        .and_then(|s| s.split_whitespace().nth(1)?.parse::<u64>().ok())
        .map_or(0, |pages| pages * 4096)
}

/// User + system CPU seconds of the whole process (every thread), and its peak RSS in bytes.
fn rusage() -> (f64, u64) {
    // SAFETY: `getrusage` only writes the zeroed struct it is given a pointer to.
    let ru = unsafe {
        let mut ru: libc::rusage = std::mem::zeroed();
        libc::getrusage(libc::RUSAGE_SELF, &mut ru);
        ru
    };
    let secs = |tv: libc::timeval| tv.tv_sec as f64 + tv.tv_usec as f64 / 1e6;
    (
        secs(ru.ru_utime) + secs(ru.ru_stime),
        ru.ru_maxrss as u64 * 1024,
    )
}

// ---------------------------------------------------------------------------------------------
// The workload
// ---------------------------------------------------------------------------------------------

/// The ten rules, each with the event that starts an evaluation which stays pending (used to
/// load every entity for the memory measurement).
const RULES: [(&str, &str); 10] = [
    (r#""signed_up" THEN (NOT "paid" WITHIN 7d)"#, "signed_up"),
    (r#""reading" THEN NOT "reading" WITHIN 5m"#, "reading"),
    // Loaded with `paid`: settled false, kept for good (it can never fire for that entity).
    (r#""shipped" AND NOT "paid""#, "paid"),
    (r#""cart" THEN "checkout" WITHIN 1h"#, "cart"),
    (
        r#""login" THEN "login" WITHIN 1m THEN "login" WITHIN 1m"#,
        "login",
    ),
    (r#"("a" OR "b") THEN "c" AFTER 1d"#, "a"),
    (r#""viewed" THEN ("bought" OR "left") WITHIN 30m"#, "viewed"),
    (r#""signed_up" THEN NOT "active" WITHIN 30d"#, "signed_up"),
    (
        r#""order" THEN NOT ("shipped" OR "cancelled") WITHIN 2d"#,
        "order",
    ),
    (r#""cart" THEN NOT "checkout" WITHIN 30m"#, "cart"),
];

/// Index in [`RULES`] of the rule the event-firing latency is measured on.
const RULE_CART_CHECKOUT: usize = 3;
/// Index in [`RULES`] of the rule the timer-firing latency is measured on (its window).
const RULE_ABANDONED_CART: usize = 9;
const ABANDONED_CART_WINDOW_MS: i64 = 30 * 60_000;

/// Event names and their weights (out of 100); `page_view` is in no rule.
const NAMES: [(&str, u64); 17] = [
    ("reading", 20),
    ("page_view", 10),
    ("login", 12),
    ("viewed", 10),
    ("cart", 6),
    ("checkout", 4),
    ("bought", 3),
    ("left", 3),
    ("signed_up", 5),
    ("paid", 5),
    ("active", 5),
    ("shipped", 4),
    ("order", 4),
    ("cancelled", 1),
    ("a", 3),
    ("b", 3),
    ("c", 2),
];

/// Names of the steady-state allocation window: each changes some engine's state (`reading`
/// re-arms a deadline) on an entity loaded with [`RULES`]' load events, and none fires or
/// creates an entity there.
const QUIET_NAMES: [&str; 6] = ["reading", "viewed", "signed_up", "a", "order", "cart"];

/// Simulated milliseconds between two generated events, ×10 (3.6 ms: 1M events per hour).
const EVENT_SPACING_MS_X10: i64 = 36;

/// Events per pass: between two passes engines move time and give up their step.
const PASS_EVENTS: usize = 16_384;

/// A step is taken once its record would pass this size: the runtime's `STEP_MAX_BYTES`
/// (`crates/triggers/src/run.rs`, private).
const STEP_MAX_BYTES: usize = 4 << 20;

/// An arbitrary fixed time for the engine part (2027-01-15).
const T0_MS: i64 = 1_800_000_000_000;
const DAY_MS: i64 = 86_400_000;

const SOURCE_TOPIC: &str = "events";
const SOURCE_PARTITIONS: i32 = 6;
/// Bytes of each source record's value (not read by the triggers: they take the name from a
/// header and the entity from the key).
const VALUE_BYTES: usize = 64;
/// Records per appended batch in the bulk load.
const BATCH_RECORDS: usize = 1_000;
/// Timer-latency entities' windows close this long after their append.
const TIMER_LEAD_MS: i64 = 2_000;
/// Between an entity's `cart` and its `checkout` in the event-latency phase.
const CART_TO_CHECKOUT: Duration = Duration::from_millis(100);

/// SplitMix64: small, fast, deterministic.
struct Rng(u64);

impl Rng {
    fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// Uniform in `0..n`.
    fn below(&mut self, n: u64) -> u64 {
        ((u128::from(self.next_u64()) * u128::from(n)) >> 64) as u64
    }
}

/// The generated event stream: `(entity, name index into NAMES)`.
struct Stream {
    rng: Rng,
    entities: u32,
    recent: Vec<u32>,
    next_recent: usize,
}

/// Entities kept for repeats, and the chance (in 100) an event goes to one of them.
const RECENT_ENTITIES: usize = 1_024;
const RECENT_PERCENT: u64 = 30;

impl Stream {
    fn new(seed: u64, entities: u32) -> Stream {
        Stream {
            rng: Rng(seed),
            entities,
            recent: Vec::with_capacity(RECENT_ENTITIES),
            next_recent: 0,
        }
    }

    fn next_event(&mut self) -> (u32, u8) {
        let entity = if self.recent.len() == RECENT_ENTITIES && self.rng.below(100) < RECENT_PERCENT
        {
            self.recent[self.rng.below(RECENT_ENTITIES as u64) as usize]
        } else {
            self.rng.below(u64::from(self.entities)) as u32
        };
        if self.recent.len() < RECENT_ENTITIES {
            self.recent.push(entity);
        } else {
            self.recent[self.next_recent] = entity;
            self.next_recent = (self.next_recent + 1) % RECENT_ENTITIES;
        }
        let mut pick = self.rng.below(100);
        let mut name = 0;
        for (i, &(_, weight)) in NAMES.iter().enumerate() {
            if pick < weight {
                name = i;
                break;
            }
            pick -= weight;
        }
        (entity, name as u8)
    }

    /// `n` events, the i-th at `start_ms + i × 3.6 ms`.
    fn take(&mut self, n: usize, start_ms: i64) -> Vec<(u32, u8, i64)> {
        (0..n)
            .map(|i| {
                let (entity, name) = self.next_event();
                (
                    entity,
                    name,
                    start_ms + i as i64 * EVENT_SPACING_MS_X10 / 10,
                )
            })
            .collect()
    }
}

/// An entity id: a 5-byte prefix and 7 digits (`user-0012345`), built without allocating.
fn entity_key(prefix: &[u8; 5], n: u32) -> [u8; 12] {
    let mut key = [0u8; 12];
    key[..5].copy_from_slice(prefix);
    let mut v = n;
    for i in (5..12).rev() {
        key[i] = b'0' + (v % 10) as u8;
        v /= 10;
    }
    key
}

/// The number in a key made by [`entity_key`] with `prefix`.
fn entity_number(prefix: &[u8; 5], key: &[u8]) -> Option<u32> {
    if key.len() != 12 || &key[..5] != prefix {
        return None;
    }
    std::str::from_utf8(&key[5..]).ok()?.parse().ok()
}

fn rules() -> Vec<Rule> {
    RULES
        .iter()
        .map(|(text, _)| {
            let rule = sluice_rules::rule::parse(text).expect("benchmark rule parses");
            sluice_rules::check::check(&rule).expect("benchmark rule passes the check");
            rule
        })
        .collect()
}

fn name_index(name: &str) -> usize {
    NAMES
        .iter()
        .position(|&(n, _)| n == name)
        .expect("name in NAMES")
}

/// For each name of [`NAMES`], the rules that mention it, with its id in each.
fn route_index(engines: &[Engine]) -> Vec<Vec<(usize, EventId)>> {
    NAMES
        .iter()
        .map(|&(name, _)| {
            engines
                .iter()
                .enumerate()
                .filter_map(|(i, e)| e.program().event_id(name).map(|id| (i, id)))
                .collect()
        })
        .collect()
}

// ---------------------------------------------------------------------------------------------
// Results: named values over repeats
// ---------------------------------------------------------------------------------------------

#[derive(Default)]
struct Results {
    /// Metric → values, one per repeat, in first-recorded order.
    order: Vec<String>,
    values: BTreeMap<String, Vec<f64>>,
}

impl Results {
    fn record(&mut self, name: impl Into<String>, value: f64) {
        let name = name.into();
        println!("  {name}: {}", fmt_num(value));
        if !self.values.contains_key(&name) {
            self.order.push(name.clone());
        }
        self.values.entry(name).or_default().push(value);
    }

    fn print_table(&self, title: &str) {
        println!("\n{title}\n");
        println!("| metric | min / median / max | runs |");
        println!("|---|---|---:|");
        for name in &self.order {
            let mut v = self.values[name].clone();
            v.sort_by(f64::total_cmp);
            let median = if v.len() % 2 == 1 {
                v[v.len() / 2]
            } else {
                (v[v.len() / 2 - 1] + v[v.len() / 2]) / 2.0
            };
            println!(
                "| {name} | {} / {} / {} | {} |",
                fmt_num(v[0]),
                fmt_num(median),
                fmt_num(v[v.len() - 1]),
                v.len()
            );
        }
    }
}

/// Three significant digits, with k/M suffixes for large values.
fn fmt_num(v: f64) -> String {
    let a = v.abs();
    let (x, suffix) = if a >= 1e6 {
        (v / 1e6, "M")
    } else if a >= 1e4 {
        (v / 1e3, "k")
    } else {
        (v, "")
    };
    let ax = x.abs();
    let digits = if ax == 0.0 || ax >= 100.0 {
        0
    } else if ax >= 10.0 {
        1
    } else if ax >= 1.0 {
        2
    } else {
        3
    };
    format!("{x:.digits$}{suffix}")
}

// ---------------------------------------------------------------------------------------------
// Part 1: the engine alone
// ---------------------------------------------------------------------------------------------

thread_local! {
    /// The step record buffer, reused as the runtime would reuse its own.
    static STEP_BUFFER: std::cell::RefCell<Vec<u8>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// Takes a step from every engine with changes; returns (updates, event firings, deadline
/// firings). A firing at a deadline is one none of whose events has the firing's time.
fn take_steps(engines: &mut [Engine]) -> (u64, u64, u64) {
    let (mut updates, mut at_events, mut at_deadlines) = (0, 0, 0);
    for e in engines.iter_mut() {
        if !e.has_changes() {
            continue;
        }
        STEP_BUFFER.with(|b| b.borrow_mut().clear());
        let (firings, n) = STEP_BUFFER.with(|b| e.take_step(&[], 0, &mut b.borrow_mut()));
        updates += n as u64;
        for f in &firings {
            if f.events.iter().any(|&(_, t)| t == f.time_ms) {
                at_events += 1;
            } else {
                at_deadlines += 1;
            }
        }
    }
    (updates, at_events, at_deadlines)
}

/// One event into one engine, with the allocations made inside it counted apart.
fn eval(engine: &mut Engine, entity: &[u8], event: EventId, time_ms: i64) {
    IN_EVAL.with(|f| f.set(true));
    let result = engine.on_event(entity, event, time_ms);
    IN_EVAL.with(|f| f.set(false));
    result.expect("no entity limit in the benchmark");
}

/// Loads `entities` entities into `engines` (into engine `i` with rule `i`'s load event),
/// taking a step whenever one is as large as the runtime's.
fn load_entities(engines: &mut [Engine], rule_ids: &[usize], entities: u32) {
    let ids: Vec<EventId> = rule_ids
        .iter()
        .zip(engines.iter())
        .map(|(&r, e)| e.program().event_id(RULES[r].1).expect("load event"))
        .collect();
    for n in 0..entities {
        let key = entity_key(b"user-", n);
        for (e, &id) in engines.iter_mut().zip(&ids) {
            eval(e, &key, id, T0_MS);
            if e.step_bytes() >= STEP_MAX_BYTES {
                STEP_BUFFER.with(|b| {
                    let mut b = b.borrow_mut();
                    b.clear();
                    drop(e.take_step(&[], 0, &mut b));
                });
            }
        }
    }
    for e in engines.iter_mut() {
        STEP_BUFFER.with(|b| {
            let mut b = b.borrow_mut();
            b.clear();
            drop(e.take_step(&[], 0, &mut b));
        });
    }
}

fn engine_part(cfg: &Config, results: &mut Results) {
    let rules = rules();
    let entities = cfg.entities;

    // Memory per entity, one rule at a time.
    let mut sum_per_entity = 0.0;
    for (i, rule) in rules.iter().enumerate() {
        let before = live_bytes();
        let mut engines = vec![Engine::new(rule, T0_MS, 0, usize::MAX)];
        load_entities(&mut engines, &[i], entities);
        let bytes = (live_bytes() - before) as f64 / f64::from(entities);
        let state = engines[0].state_bytes() as f64 / f64::from(entities);
        sum_per_entity += bytes;
        results.record(format!("memory B/entity, rule {}", i + 1), bytes);
        results.record(
            format!(
                "  of which rule state (Engine::state_bytes), rule {}",
                i + 1
            ),
            state,
        );
        drop(engines);
    }
    results.record("memory B/entity, sum of the 10 rules", sum_per_entity);

    // All ten at once, then the steady-state window on those states.
    let before = live_bytes();
    let rss_before = rss_bytes();
    let mut engines: Vec<Engine> = rules
        .iter()
        .map(|r| Engine::new(r, T0_MS, 0, usize::MAX))
        .collect();
    let all: Vec<usize> = (0..rules.len()).collect();
    let started = Instant::now();
    load_entities(&mut engines, &all, entities);
    let load_secs = started.elapsed().as_secs_f64();
    results.record(
        "memory B/entity, all 10 rules held at once (allocator)",
        (live_bytes() - before) as f64 / f64::from(entities),
    );
    results.record(
        "memory B/entity, all 10 rules held at once (RSS growth)",
        rss_bytes().saturating_sub(rss_before) as f64 / f64::from(entities),
    );
    results.record(
        "loading: new entities/s into all 10 engines (evaluations/s)",
        f64::from(entities) * 10.0 / load_secs,
    );

    let routes = route_index(&engines);
    let quiet: Vec<usize> = QUIET_NAMES.iter().map(|n| name_index(n)).collect();
    let window = cfg.quiet_events;
    let mut rng = Rng(7);
    let (allocs0, eval_allocs0, live0) = (
        ALLOCS.load(Ordering::Relaxed),
        EVAL_ALLOCS.load(Ordering::Relaxed),
        live_bytes(),
    );
    let (mut evaluations, mut rearms, mut updates, mut fired) = (0u64, 0u64, 0u64, 0u64);
    let mut step_allocs = 0u64;
    for i in 0..window {
        let entity = rng.below(u64::from(entities)) as u32;
        let name = quiet[rng.below(quiet.len() as u64) as usize];
        // Within 30 s of the load: no deadline (the earliest is a minute after it) comes.
        let time = T0_MS + (i as i64 * 30_000) / window as i64;
        let key = entity_key(b"user-", entity);
        for &(e, id) in &routes[name] {
            eval(&mut engines[e], &key, id, time);
            evaluations += 1;
            if NAMES[name].0 == "reading" {
                rearms += 1;
            }
            if engines[e].step_bytes() >= STEP_MAX_BYTES {
                let a = ALLOCS.load(Ordering::Relaxed);
                let (u, fe, fd) = take_steps(&mut engines[e..=e]);
                step_allocs += ALLOCS.load(Ordering::Relaxed) - a;
                updates += u;
                fired += fe + fd;
            }
        }
    }
    // The window's last step, as the runtime writes one at the end of every pass.
    let a = ALLOCS.load(Ordering::Relaxed);
    let (u, fe, fd) = take_steps(&mut engines);
    step_allocs += ALLOCS.load(Ordering::Relaxed) - a;
    updates += u;
    fired += fe + fd;
    let eval_allocs = EVAL_ALLOCS.load(Ordering::Relaxed) - eval_allocs0;
    let all_allocs = ALLOCS.load(Ordering::Relaxed) - allocs0;
    let growth = live_bytes() - live0;
    results.record("quiet window: evaluations", evaluations as f64);
    results.record("quiet window: firings (expected 0)", fired as f64);
    results.record(
        "quiet window: allocations inside Engine::on_event",
        eval_allocs as f64,
    );
    results.record(
        "quiet window: allocations in take_step per entity update",
        step_allocs as f64 / updates.max(1) as f64,
    );
    results.record(
        "quiet window: other allocations (the benchmark's own)",
        (all_allocs - eval_allocs - step_allocs) as f64,
    );
    // Each re-arm leaves the old wheel item until its deadline (16 bytes), in slot vectors
    // that grow by doubling: the growth comes in steps, so it is reported whole.
    results.record("quiet window: deadlines re-armed", rearms as f64);
    results.record(
        "quiet window: live MB grown (stale wheel items, vector slack)",
        growth as f64 / 1e6,
    );
    drop(engines);

    // Throughput over the generated stream, fresh engines.
    let stream = Stream::new(42, entities).take(cfg.engine_events, T0_MS);
    let engines_before = live_bytes();
    let mut engines: Vec<Engine> = rules
        .iter()
        .map(|r| Engine::new(r, T0_MS, 0, usize::MAX))
        .collect();
    let routes = route_index(&engines);
    let (mut evaluations, mut updates, mut at_events, mut at_deadlines) = (0u64, 0u64, 0, 0);
    let mut step_time = Duration::ZERO;
    let eval_allocs0 = EVAL_ALLOCS.load(Ordering::Relaxed);
    let started = Instant::now();
    let mut clock = T0_MS;
    for pass in stream.chunks(PASS_EVENTS) {
        for &(entity, name, time) in pass {
            let key = entity_key(b"user-", entity);
            clock = time;
            for &(e, id) in &routes[name as usize] {
                eval(&mut engines[e], &key, id, time);
                evaluations += 1;
            }
        }
        for e in engines.iter_mut() {
            e.advance(clock);
        }
        let t = Instant::now();
        let (u, fe, fd) = take_steps(&mut engines);
        step_time += t.elapsed();
        updates += u;
        at_events += fe;
        at_deadlines += fd;
    }
    let secs = started.elapsed().as_secs_f64();
    let stream_eval_allocs = EVAL_ALLOCS.load(Ordering::Relaxed) - eval_allocs0;
    let held: usize = engines.iter().map(Engine::entities).sum();
    let live_after = live_bytes();
    results.record("stream: input events/s", stream.len() as f64 / secs);
    results.record("stream: rule evaluations/s", evaluations as f64 / secs);
    results.record(
        "stream: rule evaluations/s without take_step",
        evaluations as f64 / (secs - step_time.as_secs_f64()),
    );
    results.record("stream: share of time in take_step %", {
        100.0 * step_time.as_secs_f64() / secs
    });
    results.record(
        "stream: evaluations per input event",
        evaluations as f64 / stream.len() as f64,
    );
    results.record("stream: firings at events", at_events as f64);
    results.record("stream: firings at deadlines", at_deadlines as f64);
    results.record("stream: entity updates in steps", updates as f64);
    results.record(
        "stream: allocations inside on_event per evaluation",
        stream_eval_allocs as f64 / evaluations as f64,
    );
    results.record("stream: (entity, rule) states held at the end", held as f64);
    drop(stream);
    let engines_bytes = live_after - engines_before;
    results.record(
        "stream: engine bytes per (entity, rule) state held",
        engines_bytes as f64 / held.max(1) as f64,
    );

    // Every deadline left: time jumps 31 days.
    let started = Instant::now();
    for e in engines.iter_mut() {
        e.advance(clock + 31 * DAY_MS);
    }
    let (_, fe, fd) = take_steps(&mut engines);
    let secs = started.elapsed().as_secs_f64();
    results.record("drain +31 d: firings at deadlines", (fe + fd) as f64);
    results.record("drain +31 d: seconds", secs);
    results.record(
        "drain +31 d: states held after",
        engines.iter().map(Engine::entities).sum::<usize>() as f64,
    );
}

// ---------------------------------------------------------------------------------------------
// Part 2: through a broker
// ---------------------------------------------------------------------------------------------

fn producer_record(key: &[u8], name: &str, timestamp_ms: i64, value: &Bytes) -> ProducerRecord {
    ProducerRecord {
        key: Some(Bytes::copy_from_slice(key)),
        value: Some(value.clone()),
        headers: vec![(
            "event".to_owned(),
            Some(Bytes::copy_from_slice(name.as_bytes())),
        )],
        timestamp_ms,
    }
}

fn wall_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .expect("after 1970")
        .as_millis() as i64
}

fn wall_us() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .expect("after 1970")
        .as_micros() as i64
}

fn trigger_name(i: usize) -> String {
    format!("rule{}", i + 1)
}

fn sink_name(i: usize) -> String {
    format!("fired{}", i + 1)
}

/// Bytes stored in every trigger's state topic, and its records (high watermark).
fn state_log(broker: &Broker) -> (u64, i64) {
    let mut bytes = 0;
    let mut records = 0;
    for t in broker.topics().all() {
        if t.name.starts_with("__sluice_trigger.") {
            for p in t.partitions() {
                bytes += p.size_bytes();
                records += p.high_watermark();
            }
        }
    }
    (bytes, records)
}

/// Polls every trigger until `done` holds for all of them (or `limit` passes: panics).
async fn wait_all(
    manager: &Manager,
    poll: Duration,
    limit: Duration,
    what: &str,
    mut done: impl FnMut(usize, &sluice_triggers::TriggerStatus) -> bool,
) {
    let started = Instant::now();
    loop {
        let mut all = true;
        for i in 0..RULES.len() {
            let status = manager
                .describe(&trigger_name(i))
                .expect("trigger exists")
                .status;
            if status.state == "failed" {
                panic!("trigger {} failed: {:?}", trigger_name(i), status.error);
            }
            if !done(i, &status) {
                all = false;
                break;
            }
        }
        if all {
            return;
        }
        if started.elapsed() > limit {
            for i in 0..RULES.len() {
                println!(
                    "  {}: {:?}",
                    trigger_name(i),
                    manager.describe(&trigger_name(i))
                );
            }
            panic!("{what}: not reached within {limit:?}");
        }
        tokio::time::sleep(poll).await;
    }
}

/// Reads `part` from `from` until `expected` firings keyed `prefix` have arrived or `limit`
/// passes, calling `seen(number, wall_us, instant)` for each as it is received.
async fn read_firings(
    broker: Arc<Broker>,
    part: Arc<dyn PartitionStorage>,
    from: i64,
    prefix: &'static [u8; 5],
    expected: usize,
    limit: Duration,
    mut seen: impl FnMut(u32, i64, Instant),
) -> usize {
    let deadline = Instant::now() + limit;
    let mut offset = from;
    let mut count = 0;
    while count < expected && Instant::now() < deadline {
        let wait = tokio::time::Instant::now() + Duration::from_millis(200);
        let read = broker
            .read(&*part, offset, 1 << 20, Some(wait))
            .await
            .expect("sink read");
        let (now_us, now) = (wall_us(), Instant::now());
        for batch in Batches::new(read.records) {
            let batch = batch.expect("sink batch");
            offset = batch.next_offset();
            for record in batch.records().expect("sink records") {
                let Some(n) = record.key.as_deref().and_then(|k| entity_number(prefix, k)) else {
                    continue;
                };
                seen(n, now_us, now);
                count += 1;
            }
        }
    }
    count
}

fn latency_summary(results: &mut Results, what: &str, h: &Histogram<u64>, missing: usize) {
    let ms = |us: u64| us as f64 / 1000.0;
    results.record(format!("{what} p50 ms"), ms(h.value_at_quantile(0.5)));
    results.record(format!("{what} p99 ms"), ms(h.value_at_quantile(0.99)));
    results.record(format!("{what} p99.9 ms"), ms(h.value_at_quantile(0.999)));
    results.record(format!("{what} max ms"), ms(h.max()));
    results.record(format!("{what} firings measured"), h.len() as f64);
    results.record(format!("{what} firings missing"), missing as f64);
}

async fn broker_part(cfg: &Config, results: &mut Results) {
    std::fs::create_dir_all(&cfg.dir).expect("--dir");
    let dir = tempfile::tempdir_in(&cfg.dir).expect("temporary directory");
    let broker = Arc::new(Broker::open(BrokerConfig::new(dir.path())).expect("broker opens"));
    let manager = Manager::open(Arc::clone(&broker))
        .await
        .expect("manager opens");
    let source = broker
        .create_topic(SOURCE_TOPIC, SOURCE_PARTITIONS, TopicConfig::default())
        .expect("source topic");

    // The bulk load: stamped over the two hours ending an hour ago.
    let n = cfg.events;
    let span_ms = n as i64 * EVENT_SPACING_MS_X10 / 10;
    let start_ms = wall_ms() - 3_600_000 - span_ms;
    let stream = Stream::new(42, cfg.entities).take(n, start_ms);
    let mut per_name = [0u64; NAMES.len()];
    for &(_, name, _) in &stream {
        per_name[name as usize] += 1;
    }
    let rules = rules();
    let expected: Vec<u64> = rules
        .iter()
        .map(|r| {
            let program = sluice_rules::eval::Program::compile(r);
            NAMES
                .iter()
                .zip(per_name)
                .filter(|((name, _), _)| program.event_id(name).is_some())
                .map(|(_, count)| count)
                .sum()
        })
        .collect();
    let evaluations: u64 = expected.iter().sum();
    let value = Bytes::from(vec![b'x'; VALUE_BYTES]);
    let started = Instant::now();
    let mut pending: Vec<Vec<ProducerRecord>> = vec![Vec::new(); SOURCE_PARTITIONS as usize];
    let mut appended = Vec::new();
    let mut buf = BytesMut::new();
    for &(entity, name, time) in &stream {
        let key = entity_key(b"user-", entity);
        let p = partition_for_key(&key, SOURCE_PARTITIONS as u32) as usize;
        pending[p].push(producer_record(&key, NAMES[name as usize].0, time, &value));
        if pending[p].len() == BATCH_RECORDS {
            buf.clear();
            encode_batch(&mut buf, &pending[p]);
            appended.push(broker.append(&source, p as i32, &buf).expect("append"));
            pending[p].clear();
        }
    }
    for (p, records) in pending.iter().enumerate() {
        if !records.is_empty() {
            buf.clear();
            encode_batch(&mut buf, records);
            appended.push(broker.append(&source, p as i32, &buf).expect("append"));
        }
    }
    for a in appended {
        a.durable().await.expect("durable");
    }
    drop(stream);
    results.record(
        "bulk load: events appended/s (before any trigger)",
        n as f64 / started.elapsed().as_secs_f64(),
    );

    // Ten triggers catch up on them.
    let (state_bytes0, _) = state_log(&broker);
    let (cpu0, _) = rusage();
    let started = Instant::now();
    for (i, (rule, _)) in RULES.iter().enumerate() {
        manager
            .create(CreateRequest {
                name: trigger_name(i),
                sources: vec![SOURCE_TOPIC.to_owned()],
                rule: Some((*rule).to_owned()),
                sink: format!("topic:{}", sink_name(i)),
                start: Some(StartFrom::Earliest),
                ..CreateRequest::default()
            })
            .await
            .expect("trigger created");
    }
    let limit = Duration::from_secs(3600);
    wait_all(
        &manager,
        Duration::from_millis(10),
        limit,
        "caught up",
        |i, s| s.events == expected[i] && s.lag == 0,
    )
    .await;
    let caught_up = started.elapsed().as_secs_f64();
    let (cpu1, _) = rusage();
    wait_all(
        &manager,
        Duration::from_millis(10),
        limit,
        "delivered",
        |_, s| s.lag == 0 && s.delivered == s.firings,
    )
    .await;
    let delivered = started.elapsed().as_secs_f64();
    let (cpu2, peak_rss) = rusage();
    let (state_bytes1, state_records) = state_log(&broker);
    let mut firings = 0;
    for i in 0..RULES.len() {
        firings += manager
            .describe(&trigger_name(i))
            .expect("trigger")
            .status
            .firings;
    }
    results.record("e2e: input events", n as f64);
    results.record("e2e: rule evaluations", evaluations as f64);
    results.record("e2e: seconds until all caught up", caught_up);
    results.record("e2e: input events/s", n as f64 / caught_up);
    results.record("e2e: rule evaluations/s", evaluations as f64 / caught_up);
    results.record(
        "e2e: CPU s per million input events (until caught up)",
        (cpu1 - cpu0) / (n as f64 / 1e6),
    );
    results.record("e2e: firings", firings as f64);
    results.record("e2e: seconds until every firing delivered", delivered);
    results.record(
        "e2e: CPU s per million input events (until delivered)",
        (cpu2 - cpu0) / (n as f64 / 1e6),
    );
    results.record(
        "e2e: state-log MB written",
        (state_bytes1 - state_bytes0) as f64 / 1e6,
    );
    results.record("e2e: state-log records", state_records as f64);
    results.record("e2e: peak RSS MB (whole process)", peak_rss as f64 / 1e6);

    if !cfg.skip_latency {
        event_latency(cfg, &broker, &source, results).await;
        timer_latency(cfg, &broker, &source, results).await;
    }

    // Recovery.
    let mut entities_before = Vec::new();
    for i in 0..RULES.len() {
        entities_before.push(
            manager
                .describe(&trigger_name(i))
                .expect("trigger")
                .status
                .entities,
        );
    }
    manager.shutdown().await;
    drop(manager);
    let b = Arc::clone(&broker);
    tokio::task::spawn_blocking(move || b.shutdown())
        .await
        .expect("shutdown");
    drop(source);
    drop(broker);
    let path = dir.path().to_owned();
    let started = Instant::now();
    let broker = tokio::task::spawn_blocking(move || {
        Arc::new(Broker::open(BrokerConfig::new(path)).expect("broker reopens"))
    })
    .await
    .expect("open");
    let broker_open = started.elapsed().as_secs_f64();
    let (cpu0, _) = rusage();
    let started = Instant::now();
    let manager = Manager::open(Arc::clone(&broker))
        .await
        .expect("manager reopens");
    wait_all(
        &manager,
        Duration::from_millis(2),
        limit,
        "recovered",
        |_, s| s.state == "running",
    )
    .await;
    let recovered = started.elapsed().as_secs_f64();
    let (cpu1, _) = rusage();
    let (state_bytes, _) = state_log(&broker);
    let state_start: i64 = broker
        .topics()
        .all()
        .iter()
        .filter(|t| t.name.starts_with("__sluice_trigger."))
        .filter_map(|t| t.partition(0))
        .map(|p| p.log_start_offset())
        .sum();
    results.record("recovery: Broker::open s", broker_open);
    results.record("recovery: Manager::open until all running s", recovered);
    results.record("recovery: CPU s", cpu1 - cpu0);
    results.record(
        "recovery: (entity, rule) states before the restart",
        entities_before.iter().sum::<u64>() as f64,
    );
    results.record("recovery: state-log MB", state_bytes as f64 / 1e6);
    results.record(
        "recovery: state-log records cut by snapshots",
        state_start as f64,
    );

    // One probe entity per trigger: each entity count must come back as before + 1.
    let source = broker.topics().get(SOURCE_TOPIC).expect("source topic");
    let key = entity_key(b"probe", 0);
    let p = partition_for_key(&key, SOURCE_PARTITIONS as u32) as i32;
    let probe: Vec<ProducerRecord> = [
        "signed_up",
        "reading",
        "paid",
        "cart",
        "login",
        "a",
        "viewed",
        "order",
    ]
    .iter()
    .map(|name| producer_record(&key, name, wall_ms(), &Bytes::new()))
    .collect();
    let mut buf = BytesMut::new();
    encode_batch(&mut buf, &probe);
    broker
        .append(&source, p, &buf)
        .expect("append")
        .durable()
        .await
        .expect("durable");
    let check = tokio::time::timeout(
        Duration::from_secs(30),
        wait_all(
            &manager,
            Duration::from_millis(20),
            limit,
            "probe",
            |i, s| s.entities == entities_before[i] + 1,
        ),
    )
    .await;
    let restored = match check {
        Ok(()) => 1.0,
        Err(_) => {
            for (i, before) in entities_before.iter().enumerate() {
                let s = manager.describe(&trigger_name(i)).expect("trigger").status;
                println!(
                    "  {}: entities {} (before the restart {before})",
                    trigger_name(i),
                    s.entities,
                );
            }
            0.0
        }
    };
    results.record("recovery: entities all back (1 = yes)", restored);
    manager.shutdown().await;
    tokio::task::spawn_blocking(move || broker.shutdown())
        .await
        .expect("shutdown");
}

/// Waits until the cart-checkout trigger is idle, then measures its firing latency.
async fn event_latency(
    cfg: &Config,
    broker: &Arc<Broker>,
    source: &Arc<sluice_broker::Topic>,
    results: &mut Results,
) {
    let count = (cfg.latency_rate * cfg.latency_seconds) as usize;
    let sink = broker
        .topics()
        .get(&sink_name(RULE_CART_CHECKOUT))
        .expect("sink topic");
    let part = sink.partition(0).expect("sink partition");
    let base = Instant::now();
    let acked: Arc<Vec<AtomicU64>> = Arc::new((0..count).map(|_| AtomicU64::new(0)).collect());
    let seen: Arc<Vec<AtomicU64>> = Arc::new((0..count).map(|_| AtomicU64::new(0)).collect());
    let nanos = move |t: Instant| t.duration_since(base).as_nanos() as u64 + 1;
    let reader = {
        let seen = Arc::clone(&seen);
        tokio::spawn(read_firings(
            Arc::clone(broker),
            Arc::clone(&part),
            part.high_watermark(),
            b"late-",
            count,
            Duration::from_secs_f64(cfg.latency_seconds + 60.0),
            move |n, _, at| {
                if let Some(slot) = seen.get(n as usize) {
                    slot.store(nanos(at), Ordering::Relaxed);
                }
            },
        ))
    };
    let period = Duration::from_secs_f64(1.0 / cfg.latency_rate);
    let lead = (CART_TO_CHECKOUT.as_secs_f64() * cfg.latency_rate) as usize;
    let started = tokio::time::Instant::now();
    let mut tasks = Vec::new();
    for k in 0..count + lead {
        tokio::time::sleep_until(started + period * k as u32).await;
        let mut send = |n: usize, name: &str, record_ack: bool| {
            let key = entity_key(b"late-", n as u32);
            let p = partition_for_key(&key, SOURCE_PARTITIONS as u32) as i32;
            let mut buf = BytesMut::new();
            encode_batch(
                &mut buf,
                &[producer_record(&key, name, wall_ms(), &Bytes::new())],
            );
            let a = broker.append(source, p, &buf).expect("append");
            let acked = Arc::clone(&acked);
            tasks.push(tokio::spawn(async move {
                a.durable().await.expect("durable");
                if record_ack {
                    acked[n].store(nanos(Instant::now()), Ordering::Relaxed);
                }
            }));
        };
        if k < count {
            send(k, "cart", false);
        }
        if k >= lead {
            send(k - lead, "checkout", true);
        }
    }
    for t in tasks {
        t.await.expect("append task");
    }
    reader.await.expect("reader");
    let mut h = Histogram::<u64>::new(3).expect("histogram");
    let mut missing = 0;
    for (a, s) in acked.iter().zip(seen.iter()) {
        let (a, s) = (a.load(Ordering::Relaxed), s.load(Ordering::Relaxed));
        if a == 0 || s == 0 {
            missing += 1;
            continue;
        }
        h.record(s.saturating_sub(a) / 1000).expect("in range");
    }
    latency_summary(results, "event firing latency", &h, missing);
}

/// Entities whose 30-minute window closes [`TIMER_LEAD_MS`] after their `cart` is appended:
/// latency from that deadline to the firing read from the sink.
async fn timer_latency(
    cfg: &Config,
    broker: &Arc<Broker>,
    source: &Arc<sluice_broker::Topic>,
    results: &mut Results,
) {
    let count = (cfg.latency_rate * cfg.latency_seconds) as usize;
    let sink = broker
        .topics()
        .get(&sink_name(RULE_ABANDONED_CART))
        .expect("sink topic");
    let part = sink.partition(0).expect("sink partition");
    let deadlines: Arc<Vec<AtomicI64>> = Arc::new((0..count).map(|_| AtomicI64::new(0)).collect());
    let h = Arc::new(std::sync::Mutex::new(
        Histogram::<u64>::new(3).expect("histogram"),
    ));
    let early = Arc::new(AtomicU64::new(0));
    let reader = {
        let (deadlines, h, early) = (Arc::clone(&deadlines), Arc::clone(&h), Arc::clone(&early));
        tokio::spawn(read_firings(
            Arc::clone(broker),
            Arc::clone(&part),
            part.high_watermark(),
            b"timr-",
            count,
            Duration::from_secs_f64(cfg.latency_seconds + 60.0),
            move |n, now_us, _| {
                let Some(d) = deadlines.get(n as usize) else {
                    return;
                };
                let latency_us = now_us - d.load(Ordering::Relaxed) * 1000;
                if latency_us < 0 {
                    early.fetch_add(1, Ordering::Relaxed);
                }
                h.lock()
                    .expect("histogram")
                    .record(latency_us.max(0) as u64)
                    .expect("in range");
            },
        ))
    };
    let period = Duration::from_secs_f64(1.0 / cfg.latency_rate);
    let started = tokio::time::Instant::now();
    let mut tasks = Vec::new();
    for k in 0..count {
        tokio::time::sleep_until(started + period * k as u32).await;
        let key = entity_key(b"timr-", k as u32);
        let p = partition_for_key(&key, SOURCE_PARTITIONS as u32) as i32;
        let stamp = wall_ms() - ABANDONED_CART_WINDOW_MS + TIMER_LEAD_MS;
        deadlines[k].store(stamp + ABANDONED_CART_WINDOW_MS, Ordering::Relaxed);
        let mut buf = BytesMut::new();
        encode_batch(
            &mut buf,
            &[producer_record(&key, "cart", stamp, &Bytes::new())],
        );
        let a = broker.append(source, p, &buf).expect("append");
        tasks.push(tokio::spawn(async move {
            a.durable().await.expect("durable");
        }));
    }
    for t in tasks {
        t.await.expect("append task");
    }
    let received = reader.await.expect("reader");
    let h = h.lock().expect("histogram").clone();
    latency_summary(
        results,
        "timer firing latency (from the deadline)",
        &h,
        count - received.min(count),
    );
    results.record(
        "timer firings read before their deadline (expected 0)",
        early.load(Ordering::Relaxed) as f64,
    );
}

// ---------------------------------------------------------------------------------------------
// Command line
// ---------------------------------------------------------------------------------------------

struct Config {
    engine: bool,
    broker: bool,
    entities: u32,
    /// Events of the broker part's bulk load.
    events: usize,
    /// Events of the engine part's stream.
    engine_events: usize,
    /// Events of the engine part's steady-state allocation window.
    quiet_events: usize,
    latency_rate: f64,
    latency_seconds: f64,
    skip_latency: bool,
    repeats: usize,
    dir: PathBuf,
}

const USAGE: &str = "usage: triggers [--full] [--parts engine,broker] [--entities N] [--events N] \
[--engine-events N] [--quiet-events N] [--latency-rate PER_S] [--latency-seconds S] \
[--no-latency] [--repeats N] [--dir PATH]";

fn parse_args() -> Result<Config, String> {
    let mut cfg = Config {
        engine: true,
        broker: true,
        entities: 20_000,
        events: 40_000,
        engine_events: 200_000,
        quiet_events: 100_000,
        latency_rate: 200.0,
        latency_seconds: 2.0,
        skip_latency: false,
        repeats: 1,
        dir: PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../target/bench-tmp"),
    };
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        let mut value = |name: &str| args.next().ok_or_else(|| format!("{name} needs a value"));
        let number = |s: String| s.parse::<f64>().map_err(|e| format!("{s}: {e}"));
        match arg.as_str() {
            // Cargo passes `--bench` to every benchmark binary.
            "--bench" => {}
            "--full" => {
                cfg.entities = 1_000_000;
                cfg.events = 2_000_000;
                cfg.engine_events = 10_000_000;
                cfg.quiet_events = 1_000_000;
                cfg.latency_rate = 1_000.0;
                cfg.latency_seconds = 20.0;
                cfg.repeats = 3;
            }
            "--parts" => {
                let parts = value("--parts")?;
                cfg.engine = parts.split(',').any(|p| p == "engine");
                cfg.broker = parts.split(',').any(|p| p == "broker");
            }
            "--entities" => cfg.entities = number(value("--entities")?)? as u32,
            "--events" => cfg.events = number(value("--events")?)? as usize,
            "--engine-events" => cfg.engine_events = number(value("--engine-events")?)? as usize,
            "--quiet-events" => cfg.quiet_events = number(value("--quiet-events")?)? as usize,
            "--latency-rate" => cfg.latency_rate = number(value("--latency-rate")?)?,
            "--latency-seconds" => cfg.latency_seconds = number(value("--latency-seconds")?)?,
            "--no-latency" => cfg.skip_latency = true,
            "--repeats" => cfg.repeats = number(value("--repeats")?)? as usize,
            "--dir" => cfg.dir = PathBuf::from(value("--dir")?),
            "--help" | "-h" => return Err(USAGE.to_owned()),
            other => return Err(format!("unknown argument {other:?}\n{USAGE}")),
        }
    }
    if cfg.entities == 0 || cfg.entities > 9_999_999 || cfg.repeats == 0 {
        return Err("--entities must be 1..=9999999 and --repeats at least 1".to_owned());
    }
    Ok(cfg)
}

fn main() {
    let cfg = match parse_args() {
        Ok(cfg) => cfg,
        Err(e) => {
            eprintln!("{e}");
            std::process::exit(2);
        }
    };
    println!(
        "triggers benchmark: {} entities, broker events {}, engine events {}, repeats {}",
        cfg.entities, cfg.events, cfg.engine_events, cfg.repeats
    );
    let mut engine = Results::default();
    let mut broker = Results::default();
    for repeat in 1..=cfg.repeats {
        if cfg.engine {
            println!("engine, run {repeat}:");
            engine_part(&cfg, &mut engine);
        }
        if cfg.broker {
            println!("broker, run {repeat}:");
            let runtime = tokio::runtime::Builder::new_multi_thread()
                .worker_threads(2)
                .enable_all()
                .build()
                .expect("tokio runtime");
            runtime.block_on(broker_part(&cfg, &mut broker));
        }
    }
    if cfg.engine {
        engine.print_table("Engine only (no I/O)");
    }
    if cfg.broker {
        broker.print_table("Through a broker");
    }
}
