//! Append throughput of the partition log with group-commit fsync (`FlushPolicy::Always`).
//!
//! Every combination of record size (`--record-sizes`, default 100 and 1024 bytes: values of that
//! size, no key), batch size (`--batch-bytes`, default 16 KiB and 1 MiB: as many records as fit)
//! and partition count (`--partitions`, default 1 and 64) is one case. Each case:
//!
//! 1. calls `sync()`, creates a fresh temporary directory under `--dir` and opens one
//!    `PartitionLog` per partition in its own subdirectory (default `LogConfig`, i.e. 1 GiB
//!    segments, with retention off), all sharing one `GroupCommitter` with `--sync-threads` sync
//!    threads;
//! 2. builds one RecordBatch v2 before timing and appends those same bytes over and over (the log
//!    patches the base offset in the file only, never in the caller's buffer);
//! 3. runs `--appenders` threads (default 1), each going round-robin over its share of the
//!    partitions like a producer with several in-flight requests waiting for `acks=all`: per
//!    partition it keeps a bounded window of outstanding appends (see [`MAX_IN_FLIGHT_APPENDS`]
//!    and [`MAX_IN_FLIGHT_BYTES`]) and retires them in order as they become durable, blocking
//!    only when every window is full and nothing is durable yet;
//! 4. warms up for 1 s (not counted), measures for `--seconds` (default 5), then deletes the
//!    directory.
//!
//! Reported per case: MiB/s and records/s made durable (only appends whose durability an
//! appender observed inside the measured window count; MiB are batch bytes as stored), appends/s
//! (append calls), fdatasyncs/s, average KiB per fdatasync and mean fdatasync time (deltas of
//! `GroupCommitter::stats`), and the durable latency of appends (from the `append` call to the
//! appender seeing the append durable) at p50, p99 and max. The latency includes the time an
//! appender needs to come back to a partition, as a real produce path would.
//!
//! Heap allocations: the binary installs a counting global allocator. After the throughput cases,
//! a single thread appends one pre-built batch (of each `--batch-bytes` size) to one partition
//! `--alloc-appends` times without waiting per append, then waits for the last one, and the
//! allocations made meanwhile are reported per append: process-wide (the sync threads included)
//! and those made inside `append` on the appending thread. The target is zero.
//!
//! Run from the workspace root:
//!
//! ```text
//! cargo bench -p sluice-log --bench append -- --quick        # smoke run: 1 s per case
//! cargo bench -p sluice-log --bench append -- --seconds 5 --record-sizes 100,1024 \
//!     --batch-bytes 16384,1048576 --partitions 1,64 --sync-threads 4 --json "$PWD/target/append.jsonl"
//! ```
//!
//! `--dir` must be on the filesystem under test. It defaults to `<workspace>/target/bench-tmp`.
//! Cargo runs benchmarks from the package directory, so relative `--dir` and `--json` paths are
//! resolved against `crates/log`.

// A benchmark binary exists to print its results on stdout.
#![allow(clippy::print_stdout)]

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::collections::VecDeque;
use std::fs::{self, File};
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::thread;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use rand::RngCore;
use sluice_log::batch::build::{Record, batch_into};
use sluice_log::{
    Appended, Clock, CommitConfig, CommitStatsSnapshot, FlushPolicy, GroupCommitter, LogConfig,
    PartitionLog, SEGMENT_BYTES_DEFAULT, SystemClock,
};

// ---------------------------------------------------------------------------------------------
// Counting allocator
// ---------------------------------------------------------------------------------------------

/// Wraps the system allocator and counts allocation calls process-wide; calls made while the
/// current thread's [`TRACKED`] flag is set are also counted apart and their sizes remembered.
struct CountingAlloc;

#[global_allocator]
static GLOBAL: CountingAlloc = CountingAlloc;

/// Calls to `alloc` and `alloc_zeroed`, all threads.
static ALLOCS: AtomicU64 = AtomicU64::new(0);
/// Calls to `realloc`, all threads.
static REALLOCS: AtomicU64 = AtomicU64::new(0);
/// Calls to `alloc`/`alloc_zeroed` made while the calling thread was tracked.
static TRACKED_ALLOCS: AtomicU64 = AtomicU64::new(0);
/// Calls to `realloc` made while the calling thread was tracked.
static TRACKED_REALLOCS: AtomicU64 = AtomicU64::new(0);

/// How many tracked calls [`TRACKED_EVENTS`] remembers.
const TRACKED_EVENTS_MAX: usize = 16;
/// The first tracked calls: `(old size, new size)` per call (old size 0 for a fresh allocation).
static TRACKED_EVENTS: [[AtomicU64; 2]; TRACKED_EVENTS_MAX] =
    [const { [const { AtomicU64::new(0) }, const { AtomicU64::new(0) }] }; TRACKED_EVENTS_MAX];
/// Tracked calls seen so far (may exceed [`TRACKED_EVENTS_MAX`]).
static TRACKED_EVENT_COUNT: AtomicUsize = AtomicUsize::new(0);

thread_local! {
    /// Set around the calls whose allocations are attributed (a const-initialised `Cell` needs no
    /// lazy initialisation or destructor, so the allocator may read it).
    static TRACKED: Cell<bool> = const { Cell::new(false) };
}

fn count_call(old_size: usize, new_size: usize) {
    let realloc = old_size != 0;
    if realloc {
        REALLOCS.fetch_add(1, Ordering::Relaxed);
    } else {
        ALLOCS.fetch_add(1, Ordering::Relaxed);
    }
    if TRACKED.try_with(Cell::get).unwrap_or(false) {
        if realloc {
            TRACKED_REALLOCS.fetch_add(1, Ordering::Relaxed);
        } else {
            TRACKED_ALLOCS.fetch_add(1, Ordering::Relaxed);
        }
        let i = TRACKED_EVENT_COUNT.fetch_add(1, Ordering::Relaxed);
        if let Some([old, new]) = TRACKED_EVENTS.get(i) {
            old.store(old_size as u64, Ordering::Relaxed);
            new.store(new_size as u64, Ordering::Relaxed);
        }
    }
}

// SAFETY: every method forwards its arguments unchanged to `System`, which upholds the
// `GlobalAlloc` contract; the counting around it touches only atomics and a const thread-local
// `Cell`, neither of which allocates or unwinds.
unsafe impl GlobalAlloc for CountingAlloc {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        count_call(0, layout.size());
        // SAFETY: the caller guarantees `layout` has a non-zero size, as `System.alloc` requires.
        unsafe { System.alloc(layout) }
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        count_call(0, layout.size());
        // SAFETY: same contract as `alloc`, guaranteed by the caller.
        unsafe { System.alloc_zeroed(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: the caller guarantees `ptr` came from this allocator (hence from `System`) with
        // this `layout`.
        unsafe { System.dealloc(ptr, layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        // `max(1)` keeps a realloc of a zero-sized layout from counting as a fresh allocation.
        count_call(layout.size().max(1), new_size);
        // SAFETY: the caller guarantees `ptr` came from this allocator (hence from `System`) with
        // `layout`, and that `new_size` is non-zero and does not overflow when rounded up.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[derive(Debug, Clone, Copy, Default)]
struct AllocCounts {
    allocs: u64,
    reallocs: u64,
    tracked_allocs: u64,
    tracked_reallocs: u64,
    tracked_events: usize,
}

impl AllocCounts {
    fn now() -> AllocCounts {
        AllocCounts {
            allocs: ALLOCS.load(Ordering::Relaxed),
            reallocs: REALLOCS.load(Ordering::Relaxed),
            tracked_allocs: TRACKED_ALLOCS.load(Ordering::Relaxed),
            tracked_reallocs: TRACKED_REALLOCS.load(Ordering::Relaxed),
            tracked_events: TRACKED_EVENT_COUNT.load(Ordering::Relaxed),
        }
    }

    fn since(self, before: AllocCounts) -> AllocCounts {
        AllocCounts {
            allocs: self.allocs - before.allocs,
            reallocs: self.reallocs - before.reallocs,
            tracked_allocs: self.tracked_allocs - before.tracked_allocs,
            tracked_reallocs: self.tracked_reallocs - before.tracked_reallocs,
            tracked_events: self.tracked_events - before.tracked_events,
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Settings
// ---------------------------------------------------------------------------------------------

/// Default for the most appends in flight (appended, durability not yet observed) per
/// partition, like a producer's limit on unacknowledged requests (`--in-flight-appends`).
const MAX_IN_FLIGHT_APPENDS: usize = 64;
/// Most batch bytes in flight per partition, like a producer's bounded send buffer: 1 MiB
/// batches get 8 in flight, 16 KiB batches are held to [`MAX_IN_FLIGHT_APPENDS`].
const MAX_IN_FLIGHT_BYTES: usize = 8 << 20;

/// Warm-up before each case's measured window.
const WARMUP: Duration = Duration::from_secs(1);
/// Warm-up with `--quick`.
const QUICK_WARMUP: Duration = Duration::from_millis(500);

/// Appends (each waited for) before the allocation window, so one-time allocations (the commit
/// queue's capacity, the waiting thread's wake-up handle) are out of the way.
const ALLOC_WARMUP_APPENDS: usize = 64;
/// Most batch bytes appended in one allocation measurement: keeps warm-up and window inside the
/// first 1 GiB segment, so no segment roll (which allocates by design: file names, index buffers)
/// lands in the window, and bounds what the measurement writes to disk.
const ALLOC_WINDOW_BYTES_MAX: u64 = SEGMENT_BYTES_DEFAULT * 3 / 4;

const MIB: f64 = 1024.0 * 1024.0;

const USAGE: &str = "\
usage: append [FLAGS]

  --seconds N             measured seconds per case (fractions allowed)     (default 5)
  --quick                 smoke run: 1 s per case, 0.5 s warm-up
  --dir PATH              parent of the per-case temporary directories
                          (default <workspace>/target/bench-tmp)
  --record-sizes LIST     value bytes per record                            (default 100,1024)
  --batch-bytes LIST      target batch bytes; K/M suffixes accepted         (default 16384,1048576)
  --partitions LIST       partition counts                                  (default 1,64)
  --sync-threads N        GroupCommitter sync threads                       (default 4)
  --appenders N           appender threads per case, capped at partitions   (default 1)
  --in-flight-appends N   most appends in flight per partition (the byte
                          limit, 8 MiB per partition, applies too)          (default 64)
  --alloc-appends N       appends in each allocation measurement, capped so
                          the window stays inside one segment               (default 10000)
  --json PATH             also write results to PATH as JSON lines
  -h, --help              print this help
";

#[derive(Debug, Clone)]
struct Options {
    seconds: f64,
    warmup: Duration,
    dir: PathBuf,
    record_sizes: Vec<usize>,
    batch_bytes: Vec<usize>,
    partitions: Vec<usize>,
    sync_threads: usize,
    appenders: usize,
    in_flight_appends: usize,
    alloc_appends: usize,
    json: Option<PathBuf>,
}

impl Options {
    fn default_dir() -> PathBuf {
        // The package lives in `<workspace>/crates/log`.
        let manifest = Path::new(env!("CARGO_MANIFEST_DIR"));
        manifest
            .ancestors()
            .nth(2)
            .unwrap_or(manifest)
            .join("target/bench-tmp")
    }

    /// `Ok(None)` when help was asked for.
    fn parse(args: impl IntoIterator<Item = String>) -> Result<Option<Options>, String> {
        let mut opts = Options {
            seconds: 5.0,
            warmup: WARMUP,
            dir: Options::default_dir(),
            record_sizes: vec![100, 1024],
            batch_bytes: vec![16 * 1024, 1024 * 1024],
            partitions: vec![1, 64],
            sync_threads: 4,
            appenders: 1,
            in_flight_appends: MAX_IN_FLIGHT_APPENDS,
            alloc_appends: 10_000,
            json: None,
        };
        let mut seconds = None;
        let mut quick = false;
        let mut args = args.into_iter();
        while let Some(flag) = args.next() {
            let mut value = || {
                args.next()
                    .ok_or_else(|| format!("{flag} needs a value (try --help)"))
            };
            match flag.as_str() {
                "-h" | "--help" => return Ok(None),
                // `cargo bench` passes this to every benchmark binary.
                "--bench" => {}
                "--quick" => quick = true,
                "--seconds" => {
                    let v = value()?;
                    match v.parse::<f64>() {
                        Ok(s) if s > 0.0 && s.is_finite() => seconds = Some(s),
                        _ => {
                            return Err(format!(
                                "--seconds: expected a positive number, got {v:?}"
                            ));
                        }
                    }
                }
                "--dir" => opts.dir = PathBuf::from(value()?),
                "--record-sizes" => opts.record_sizes = parse_list(&flag, &value()?)?,
                "--batch-bytes" => opts.batch_bytes = parse_list(&flag, &value()?)?,
                "--partitions" => opts.partitions = parse_list(&flag, &value()?)?,
                "--sync-threads" => opts.sync_threads = parse_size(&flag, &value()?)?,
                "--appenders" => opts.appenders = parse_size(&flag, &value()?)?,
                "--in-flight-appends" => {
                    opts.in_flight_appends = parse_size(&flag, &value()?)?.max(1)
                }
                "--alloc-appends" => opts.alloc_appends = parse_size(&flag, &value()?)?,
                "--json" => opts.json = Some(PathBuf::from(value()?)),
                other => return Err(format!("unknown flag {other:?} (try --help)")),
            }
        }
        if quick {
            opts.seconds = seconds.unwrap_or(1.0);
            opts.warmup = QUICK_WARMUP;
        } else if let Some(s) = seconds {
            opts.seconds = s;
        }
        Ok(Some(opts))
    }
}

/// A positive size: digits with an optional `K`/`KiB`/`M`/`MiB` suffix.
fn parse_size(flag: &str, s: &str) -> Result<usize, String> {
    let lower = s.trim().to_ascii_lowercase();
    let (digits, unit) = if let Some(d) = lower.strip_suffix("kib").or(lower.strip_suffix('k')) {
        (d, 1024)
    } else if let Some(d) = lower.strip_suffix("mib").or(lower.strip_suffix('m')) {
        (d, 1024 * 1024)
    } else {
        (lower.as_str(), 1)
    };
    match digits.parse::<usize>() {
        Ok(n) if n > 0 => n
            .checked_mul(unit)
            .ok_or_else(|| format!("{flag}: {s:?} is too large")),
        _ => Err(format!("{flag}: expected a positive integer, got {s:?}")),
    }
}

fn parse_list(flag: &str, s: &str) -> Result<Vec<usize>, String> {
    s.split(',')
        .filter(|item| !item.trim().is_empty())
        .map(|item| parse_size(flag, item))
        .collect::<Result<Vec<_>, _>>()
        .and_then(|list| {
            if list.is_empty() {
                Err(format!("{flag}: empty list"))
            } else {
                Ok(list)
            }
        })
}

// ---------------------------------------------------------------------------------------------
// Latency histogram
// ---------------------------------------------------------------------------------------------

/// Sub-buckets per power of two: values are kept to within 1/64 (~1.6%).
const SUB_BITS: u32 = 6;
const SUB: u64 = 1 << SUB_BITS;
/// Enough buckets for any `u64` value.
const BUCKETS: usize = (64 - SUB_BITS as usize + 1) * SUB as usize;

/// A fixed log-linear histogram of nanoseconds: allocated once, never grows.
#[derive(Debug, Clone)]
struct Histogram {
    counts: Vec<u64>,
    total: u64,
    max: u64,
}

impl Histogram {
    fn new() -> Histogram {
        Histogram {
            counts: vec![0; BUCKETS],
            total: 0,
            max: 0,
        }
    }

    fn bucket(v: u64) -> usize {
        if v < 2 * SUB {
            return v as usize;
        }
        let shift = 63 - v.leading_zeros() - SUB_BITS;
        (u64::from(shift) * SUB + (v >> shift)) as usize
    }

    /// The midpoint of bucket `i`'s value range.
    fn value_of(i: usize) -> u64 {
        let i = i as u64;
        if i < 2 * SUB {
            return i;
        }
        let shift = i / SUB - 1;
        let mantissa = i - shift * SUB;
        (mantissa << shift) + (1u64 << shift) / 2
    }

    fn record(&mut self, d: Duration) {
        let ns = u64::try_from(d.as_nanos()).unwrap_or(u64::MAX);
        self.counts[Histogram::bucket(ns)] += 1;
        self.total += 1;
        self.max = self.max.max(ns);
    }

    fn merge(&mut self, other: &Histogram) {
        for (a, b) in self.counts.iter_mut().zip(&other.counts) {
            *a += b;
        }
        self.total += other.total;
        self.max = self.max.max(other.max);
    }

    /// The value at quantile `q` (0..=1), in nanoseconds; 0 when empty.
    fn quantile(&self, q: f64) -> u64 {
        if self.total == 0 {
            return 0;
        }
        let rank = ((q * self.total as f64).ceil() as u64).clamp(1, self.total);
        let mut seen = 0;
        for (i, &c) in self.counts.iter().enumerate() {
            seen += c;
            if seen >= rank {
                return Histogram::value_of(i).min(self.max);
            }
        }
        self.max
    }
}

fn ms(ns: u64) -> f64 {
    ns as f64 / 1e6
}

// ---------------------------------------------------------------------------------------------
// One throughput case
// ---------------------------------------------------------------------------------------------

#[derive(Debug, Clone, Copy)]
struct Case {
    record_bytes: usize,
    batch_bytes: usize,
    partitions: usize,
}

/// A pre-built batch appended over and over.
#[derive(Debug)]
struct Batch {
    bytes: Vec<u8>,
    records: usize,
}

/// Builds a batch of `record_bytes`-byte values (no key) holding as many records as fit in
/// `batch_bytes` (at least one). Values are random bytes.
fn build_batch(record_bytes: usize, batch_bytes: usize) -> Batch {
    // Each record takes a different window of a random pool, so records are not all identical.
    const POOL_SLACK: usize = 4096;
    let mut pool = vec![0u8; record_bytes + POOL_SLACK];
    rand::rng().fill_bytes(&mut pool);
    let base_timestamp = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64);
    let mut records: Vec<Record<'_>> = Vec::new();
    let mut out = Vec::with_capacity(batch_bytes + record_bytes + 64);
    let mut build = |count: usize, out: &mut Vec<u8>| {
        records.clear();
        records.extend((0..count).map(|i| {
            let start = (i * 61) % POOL_SLACK;
            Record {
                timestamp_delta: i as i64,
                key: None,
                value: Some(&pool[start..start + record_bytes]),
            }
        }));
        out.clear();
        batch_into(out, base_timestamp, &records);
        out.len()
    };
    // Largest count whose batch fits: binary search over [1, hi], where `hi` records surely
    // overflow (each record costs more than its value bytes).
    let (mut lo, mut hi) = (1usize, batch_bytes / record_bytes.max(1) + 2);
    while lo + 1 < hi {
        let mid = lo + (hi - lo) / 2;
        if build(mid, &mut out) <= batch_bytes {
            lo = mid;
        } else {
            hi = mid;
        }
    }
    build(lo, &mut out);
    Batch {
        bytes: out,
        records: lo,
    }
}

/// Appends in flight per partition for batches of `batch_len` bytes.
fn window_for(batch_len: usize, max_appends: usize) -> usize {
    (MAX_IN_FLIGHT_BYTES / batch_len.max(1)).clamp(1, max_appends)
}

/// One outstanding append.
#[derive(Debug)]
struct InFlight {
    appended: Appended,
    started: Instant,
}

/// A partition as one appender sees it.
#[derive(Debug)]
struct Lane {
    log: PartitionLog,
    in_flight: VecDeque<InFlight>,
}

/// What one appender thread counted inside the measured window.
#[derive(Debug, Clone)]
struct AppenderStats {
    appends: u64,
    durable_appends: u64,
    latency: Histogram,
}

/// Timing of a case: counting starts at `measure_start` and everything stops at `end`.
#[derive(Debug, Clone, Copy)]
struct Window {
    measure_start: Instant,
    end: Instant,
}

impl Window {
    fn contains(&self, t: Instant) -> bool {
        t >= self.measure_start && t < self.end
    }
}

/// Appends `batch` to every log in `logs` until `window.end`, keeping up to `limit` appends in
/// flight per partition and retiring them in order as they become durable.
fn appender(
    logs: Vec<PartitionLog>,
    batch: &[u8],
    limit: usize,
    window: Window,
) -> Result<AppenderStats, String> {
    let mut lanes: Vec<Lane> = logs
        .into_iter()
        .map(|log| Lane {
            log,
            in_flight: VecDeque::with_capacity(limit),
        })
        .collect();
    let mut stats = AppenderStats {
        appends: 0,
        durable_appends: 0,
        latency: Histogram::new(),
    };
    let fail = |what: &str, log: &PartitionLog, e: sluice_log::LogError| {
        format!("{what} in {}: {e}", log.dir().display())
    };
    while Instant::now() < window.end {
        let mut progressed = false;
        for lane in &mut lanes {
            // Retire, in order, every append already durable.
            while lane
                .in_flight
                .front()
                .is_some_and(|f| f.appended.is_durable())
            {
                let done = lane.in_flight.pop_front().expect("front exists");
                let seen = Instant::now();
                if window.contains(seen) {
                    stats.durable_appends += 1;
                    stats.latency.record(seen - done.started);
                }
                progressed = true;
            }
            if lane.in_flight.len() < limit {
                let started = Instant::now();
                let appended = lane
                    .log
                    .append(batch)
                    .map_err(|e| fail("append", &lane.log, e))?;
                if window.contains(started) {
                    stats.appends += 1;
                }
                lane.in_flight.push_back(InFlight { appended, started });
                progressed = true;
            }
        }
        if !progressed {
            // Every window is full and nothing is durable: wait for the oldest append, which
            // the sync threads (first in, first synced) should finish first.
            let lane = lanes
                .iter()
                .filter(|l| !l.in_flight.is_empty())
                .min_by_key(|l| l.in_flight.front().map(|f| f.started))
                .expect("no progress means some append is in flight");
            let oldest = lane.in_flight.front().expect("not empty");
            oldest
                .appended
                .wait_durable()
                .map_err(|e| fail("wait_durable", &lane.log, e))?;
        }
    }
    // Let the rest become durable (not counted) so the case ends with nothing pending.
    for lane in &lanes {
        if let Some(last) = lane.in_flight.back() {
            last.appended
                .wait_durable()
                .map_err(|e| fail("wait_durable", &lane.log, e))?;
        }
    }
    Ok(stats)
}

#[derive(Debug, Clone)]
struct CaseResult {
    case: Case,
    batch_len: usize,
    records_per_batch: usize,
    appenders: usize,
    in_flight_limit: usize,
    /// Length of the measured window, for the appenders' counts.
    seconds: f64,
    /// Time between the two `GroupCommitter::stats` snapshots, for the commit counters.
    commit_seconds: f64,
    appends: u64,
    durable_appends: u64,
    commit: CommitStatsSnapshot,
    latency: Histogram,
}

impl CaseResult {
    fn durable_mib_per_s(&self) -> f64 {
        (self.durable_appends * self.batch_len as u64) as f64 / MIB / self.seconds
    }
    fn durable_records_per_s(&self) -> f64 {
        (self.durable_appends * self.records_per_batch as u64) as f64 / self.seconds
    }
    fn appends_per_s(&self) -> f64 {
        self.appends as f64 / self.seconds
    }
    fn fdatasyncs_per_s(&self) -> f64 {
        self.commit.fdatasyncs as f64 / self.commit_seconds
    }
    fn kib_per_fdatasync(&self) -> f64 {
        if self.commit.fdatasyncs == 0 {
            return 0.0;
        }
        self.commit.bytes_synced as f64 / 1024.0 / self.commit.fdatasyncs as f64
    }
    fn fdatasync_mean_ms(&self) -> f64 {
        if self.commit.fdatasyncs == 0 {
            return 0.0;
        }
        self.commit.fdatasync_micros as f64 / 1000.0 / self.commit.fdatasyncs as f64
    }

    fn line(&self) -> String {
        let c = &self.case;
        format!(
            "record {} B, batch {} B ({} B, {} records, {} in flight/partition), partitions {}, \
             appenders {}: {:.1} MiB/s, {:.0} records/s, {:.1} appends/s, {:.1} fdatasyncs/s \
             (avg {:.1} KiB, mean {:.2} ms), durable latency p50 {:.2} / p99 {:.2} / max {:.2} ms",
            c.record_bytes,
            c.batch_bytes,
            self.batch_len,
            self.records_per_batch,
            self.in_flight_limit,
            c.partitions,
            self.appenders,
            self.durable_mib_per_s(),
            self.durable_records_per_s(),
            self.appends_per_s(),
            self.fdatasyncs_per_s(),
            self.kib_per_fdatasync(),
            self.fdatasync_mean_ms(),
            ms(self.latency.quantile(0.50)),
            ms(self.latency.quantile(0.99)),
            ms(self.latency.max),
        )
    }

    fn json(&self) -> String {
        let c = &self.case;
        format!(
            "{{\"kind\":\"throughput\",\"record_bytes\":{},\"batch_bytes\":{},\"batch_len\":{},\
             \"records_per_batch\":{},\"partitions\":{},\"appenders\":{},\"in_flight_limit\":{},\
             \"seconds\":{:.3},\"appends\":{},\"durable_appends\":{},\"mib_per_s\":{:.3},\
             \"records_per_s\":{:.1},\"appends_per_s\":{:.2},\"fdatasyncs\":{},\
             \"fdatasyncs_per_s\":{:.2},\"bytes_synced\":{},\"avg_kib_per_fdatasync\":{:.2},\
             \"fdatasync_mean_ms\":{:.4},\"latency_p50_ms\":{:.4},\"latency_p99_ms\":{:.4},\
             \"latency_max_ms\":{:.4}}}",
            c.record_bytes,
            c.batch_bytes,
            self.batch_len,
            self.records_per_batch,
            c.partitions,
            self.appenders,
            self.in_flight_limit,
            self.seconds,
            self.appends,
            self.durable_appends,
            self.durable_mib_per_s(),
            self.durable_records_per_s(),
            self.appends_per_s(),
            self.commit.fdatasyncs,
            self.fdatasyncs_per_s(),
            self.commit.bytes_synced,
            self.kib_per_fdatasync(),
            self.fdatasync_mean_ms(),
            ms(self.latency.quantile(0.50)),
            ms(self.latency.quantile(0.99)),
            ms(self.latency.max),
        )
    }
}

fn stats_delta(after: CommitStatsSnapshot, before: CommitStatsSnapshot) -> CommitStatsSnapshot {
    CommitStatsSnapshot {
        fdatasyncs: after.fdatasyncs - before.fdatasyncs,
        bytes_synced: after.bytes_synced - before.bytes_synced,
        fdatasync_micros: after.fdatasync_micros - before.fdatasync_micros,
    }
}

/// The log settings of every case: defaults (1 GiB segments), retention off.
fn log_config() -> LogConfig {
    LogConfig {
        retention_ms: None,
        retention_bytes: None,
        ..LogConfig::default()
    }
}

/// Flushes everything dirty system-wide, so one case's writeback does not bleed into the next.
fn sync_all() {
    // SAFETY: sync(2) takes no arguments, touches no memory of ours and cannot fail.
    unsafe { libc::sync() };
}

/// A fresh temporary directory under `parent`, removed when dropped.
fn fresh_dir(parent: &Path, prefix: &str) -> Result<tempfile::TempDir, String> {
    fs::create_dir_all(parent).map_err(|e| format!("create {}: {e}", parent.display()))?;
    tempfile::Builder::new()
        .prefix(prefix)
        .tempdir_in(parent)
        .map_err(|e| format!("create a temporary directory in {}: {e}", parent.display()))
}

fn open_logs(
    dir: &Path,
    partitions: usize,
    committer: &GroupCommitter,
) -> Result<Vec<PartitionLog>, String> {
    let clock: Arc<dyn Clock> = Arc::new(SystemClock);
    (0..partitions)
        .map(|p| {
            let path = dir.join(format!("p{p:03}"));
            PartitionLog::open(&path, log_config(), committer, Arc::clone(&clock))
                .map_err(|e| format!("open {}: {e}", path.display()))
        })
        .collect()
}

fn sleep_until(t: Instant) {
    let now = Instant::now();
    if t > now {
        thread::sleep(t - now);
    }
}

fn run_case(opts: &Options, case: Case) -> Result<CaseResult, String> {
    let batch = build_batch(case.record_bytes, case.batch_bytes);
    let limit = window_for(batch.bytes.len(), opts.in_flight_appends);
    let appenders = opts.appenders.min(case.partitions).max(1);

    sync_all();
    let dir = fresh_dir(&opts.dir, "append-")?;
    let committer = GroupCommitter::start(CommitConfig {
        policy: FlushPolicy::Always,
        sync_threads: opts.sync_threads,
    });
    let logs = open_logs(dir.path(), case.partitions, &committer)?;

    // Partition p goes to appender p % appenders.
    let mut shares: Vec<Vec<PartitionLog>> = vec![Vec::new(); appenders];
    for (p, log) in logs.iter().enumerate() {
        shares[p % appenders].push(log.clone());
    }

    let start = Instant::now();
    let window = Window {
        measure_start: start + opts.warmup,
        end: start + opts.warmup + Duration::from_secs_f64(opts.seconds),
    };
    let batch_bytes: &[u8] = &batch.bytes;
    let (outcomes, before, after, measured) = thread::scope(|s| {
        let handles: Vec<_> = shares
            .into_iter()
            .enumerate()
            .map(|(i, share)| {
                thread::Builder::new()
                    .name(format!("appender-{i}"))
                    .spawn_scoped(s, move || appender(share, batch_bytes, limit, window))
                    .expect("spawn appender thread")
            })
            .collect();
        sleep_until(window.measure_start);
        let before = committer.stats();
        let t0 = Instant::now();
        sleep_until(window.end);
        let after = committer.stats();
        let measured = t0.elapsed().as_secs_f64();
        let outcomes: Vec<Result<AppenderStats, String>> = handles
            .into_iter()
            .map(|h| {
                h.join()
                    .unwrap_or_else(|_| Err("appender thread panicked".to_string()))
            })
            .collect();
        (outcomes, before, after, measured)
    });

    drop(logs);
    committer.shutdown();
    dir.close()
        .map_err(|e| format!("remove the case directory: {e}"))?;

    let mut result = CaseResult {
        case,
        batch_len: batch.bytes.len(),
        records_per_batch: batch.records,
        appenders,
        in_flight_limit: limit,
        seconds: opts.seconds,
        commit_seconds: measured,
        appends: 0,
        durable_appends: 0,
        commit: stats_delta(after, before),
        latency: Histogram::new(),
    };
    for outcome in outcomes {
        let stats = outcome?;
        result.appends += stats.appends;
        result.durable_appends += stats.durable_appends;
        result.latency.merge(&stats.latency);
    }
    Ok(result)
}

// ---------------------------------------------------------------------------------------------
// Allocations per append
// ---------------------------------------------------------------------------------------------

#[derive(Debug, Clone)]
struct AllocResult {
    batch_bytes: usize,
    batch_len: usize,
    appends: usize,
    segments_before: usize,
    segments_after: usize,
    counts: AllocCounts,
    /// `(old size, new size)` of the first tracked calls in the window.
    events: Vec<(u64, u64)>,
}

impl AllocResult {
    fn total(&self) -> u64 {
        self.counts.allocs + self.counts.reallocs
    }
    fn tracked(&self) -> u64 {
        self.counts.tracked_allocs + self.counts.tracked_reallocs
    }
    fn per_append(&self, n: u64) -> f64 {
        n as f64 / self.appends as f64
    }

    fn line(&self) -> String {
        let mut line = format!(
            "allocations, batch {} B ({} B), {} appends to 1 partition: {:.4} per append \
             process-wide ({} alloc + {} realloc); inside append on the appending thread: {:.4} \
             per append ({} alloc + {} realloc); segments {} -> {}",
            self.batch_bytes,
            self.batch_len,
            self.appends,
            self.per_append(self.total()),
            self.counts.allocs,
            self.counts.reallocs,
            self.per_append(self.tracked()),
            self.counts.tracked_allocs,
            self.counts.tracked_reallocs,
            self.segments_before,
            self.segments_after,
        );
        if !self.events.is_empty() {
            let shown: Vec<String> = self
                .events
                .iter()
                .map(|&(old, new)| {
                    if old == 0 {
                        format!("alloc {new} B")
                    } else {
                        format!("realloc {old} -> {new} B")
                    }
                })
                .collect();
            let more = self.counts.tracked_events.saturating_sub(self.events.len());
            line.push_str(&format!("; inside append: {}", shown.join(", ")));
            if more > 0 {
                line.push_str(&format!(" (+{more} more)"));
            }
        }
        line
    }

    fn json(&self) -> String {
        format!(
            "{{\"kind\":\"allocations\",\"batch_bytes\":{},\"batch_len\":{},\"appends\":{},\
             \"allocs\":{},\"reallocs\":{},\"per_append\":{:.6},\"in_append_allocs\":{},\
             \"in_append_reallocs\":{},\"in_append_per_append\":{:.6},\"segments_before\":{},\
             \"segments_after\":{}}}",
            self.batch_bytes,
            self.batch_len,
            self.appends,
            self.counts.allocs,
            self.counts.reallocs,
            self.per_append(self.total()),
            self.counts.tracked_allocs,
            self.counts.tracked_reallocs,
            self.per_append(self.tracked()),
            self.segments_before,
            self.segments_after,
        )
    }
}

/// Counts heap allocations while one thread appends the same batch `appends` times (capped by
/// [`ALLOC_WINDOW_BYTES_MAX`]) to one partition without waiting, then waits for the last.
fn measure_allocs(
    opts: &Options,
    record_bytes: usize,
    batch_bytes: usize,
) -> Result<AllocResult, String> {
    let batch = build_batch(record_bytes, batch_bytes);
    let len = batch.bytes.len() as u64;
    let cap = (ALLOC_WINDOW_BYTES_MAX / len)
        .saturating_sub(ALLOC_WARMUP_APPENDS as u64)
        .max(1);
    let appends = (opts.alloc_appends as u64).min(cap) as usize;

    sync_all();
    let dir = fresh_dir(&opts.dir, "append-alloc-")?;
    let committer = GroupCommitter::start(CommitConfig {
        policy: FlushPolicy::Always,
        sync_threads: opts.sync_threads,
    });
    let log = open_logs(dir.path(), 1, &committer)?.remove(0);
    let fail = |e: sluice_log::LogError| format!("allocation run: {e}");

    for _ in 0..ALLOC_WARMUP_APPENDS {
        log.append(&batch.bytes)
            .and_then(|a| a.wait_durable())
            .map_err(fail)?;
    }
    let segments_before = log.segment_count();

    let before = AllocCounts::now();
    let mut last: Option<Appended> = None;
    for _ in 0..appends {
        TRACKED.with(|t| t.set(true));
        let appended = log.append(&batch.bytes);
        TRACKED.with(|t| t.set(false));
        last = Some(appended.map_err(fail)?);
    }
    if let Some(last) = &last {
        last.wait_durable().map_err(fail)?;
    }
    let counts = AllocCounts::now().since(before);
    drop(last);

    let segments_after = log.segment_count();
    let first = before.tracked_events;
    let events = (first..(first + counts.tracked_events).min(TRACKED_EVENTS_MAX))
        .map(|i| {
            let [old, new] = &TRACKED_EVENTS[i];
            (old.load(Ordering::Relaxed), new.load(Ordering::Relaxed))
        })
        .collect();

    drop(log);
    committer.shutdown();
    dir.close()
        .map_err(|e| format!("remove the allocation run directory: {e}"))?;
    Ok(AllocResult {
        batch_bytes,
        batch_len: batch.bytes.len(),
        appends,
        segments_before,
        segments_after,
        counts,
        events,
    })
}

// ---------------------------------------------------------------------------------------------
// Main
// ---------------------------------------------------------------------------------------------

fn table(results: &[CaseResult]) -> String {
    let mut out = String::new();
    out.push_str(
        "| record B | batch B | partitions | MiB/s | records/s | appends/s | fdatasyncs/s \
         | avg KiB/fdatasync | fdatasync mean ms | durable latency p50/p99/max ms |\n",
    );
    out.push_str("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|\n");
    for r in results {
        out.push_str(&format!(
            "| {} | {} | {} | {:.1} | {:.0} | {:.1} | {:.1} | {:.1} | {:.2} | {:.2} / {:.2} / {:.2} |\n",
            r.case.record_bytes,
            r.case.batch_bytes,
            r.case.partitions,
            r.durable_mib_per_s(),
            r.durable_records_per_s(),
            r.appends_per_s(),
            r.fdatasyncs_per_s(),
            r.kib_per_fdatasync(),
            r.fdatasync_mean_ms(),
            ms(r.latency.quantile(0.50)),
            ms(r.latency.quantile(0.99)),
            ms(r.latency.max),
        ));
    }
    out
}

fn run(opts: &Options) -> Result<(), String> {
    let mut json = match &opts.json {
        Some(path) => {
            if let Some(parent) = path.parent().filter(|p| !p.as_os_str().is_empty()) {
                fs::create_dir_all(parent)
                    .map_err(|e| format!("create {}: {e}", parent.display()))?;
            }
            Some(BufWriter::new(
                File::create(path).map_err(|e| format!("create {}: {e}", path.display()))?,
            ))
        }
        None => None,
    };
    let mut emit_json = |line: String| -> Result<(), String> {
        if let Some(w) = json.as_mut() {
            writeln!(w, "{line}")
                .and_then(|()| w.flush())
                .map_err(|e| format!("write JSON: {e}"))?;
        }
        Ok(())
    };

    println!(
        "sluice-log append benchmark: FlushPolicy::Always, {} sync threads, up to {} appender \
         thread(s) per case, {:.1} s per case after {:.1} s warm-up, dir {}",
        opts.sync_threads,
        opts.appenders,
        opts.seconds,
        opts.warmup.as_secs_f64(),
        opts.dir.display(),
    );
    let mut results = Vec::new();
    for &record_bytes in &opts.record_sizes {
        for &batch_bytes in &opts.batch_bytes {
            for &partitions in &opts.partitions {
                let case = Case {
                    record_bytes,
                    batch_bytes,
                    partitions,
                };
                let result = run_case(opts, case)?;
                println!("{}", result.line());
                emit_json(result.json())?;
                results.push(result);
            }
        }
    }

    let record_bytes = opts.record_sizes[0];
    let mut allocs = Vec::new();
    for &batch_bytes in &opts.batch_bytes {
        let result = measure_allocs(opts, record_bytes, batch_bytes)?;
        emit_json(result.json())?;
        allocs.push(result);
    }

    println!();
    print!("{}", table(&results));
    println!();
    for a in &allocs {
        println!("{}", a.line());
    }
    Ok(())
}

fn main() -> ExitCode {
    let opts = match Options::parse(std::env::args().skip(1)) {
        Ok(Some(opts)) => opts,
        Ok(None) => {
            print!("{USAGE}");
            return ExitCode::SUCCESS;
        }
        Err(e) => {
            eprintln!("append: {e}");
            return ExitCode::from(2);
        }
    };
    match run(&opts) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("append: {e}");
            ExitCode::FAILURE
        }
    }
}
