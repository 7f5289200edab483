//! Group-commit fsync strategy benchmark for the partition log.
//!
//! Design question: a broker disk holds `P` partitions that all receive appends, and every
//! group-commit round must make the round's bytes durable before acknowledging producers.
//! Which of these is cheapest on this machine's filesystem?
//!
//! * `seq` — each partition writes its own segment file, then the round calls `fdatasync` on
//!   every dirty file, one after the other, from the committing thread.
//! * `parallel` — the same writes, but the per-file `fdatasync` calls are spread over a small
//!   persistent pool of threads (`--threads`). On ext4, concurrent `fdatasync` calls can be
//!   folded into one jbd2 journal commit, so `P` syncs may cost little more than one.
//! * `journal` — one shared journal file per disk: each round appends every partition's bytes to
//!   the journal with a single vectored write and issues ONE `fdatasync`; the same bytes are also
//!   written (never synced) to the per-partition segment files "behind" the journal. The double
//!   write is part of every round, and the dirty segment data that is still unsynced when the
//!   measurement window closes is flushed and reported separately as the deferred flush time, so
//!   the journal is not credited for work it merely postponed.
//!
//! All files are new, growing files (never preallocated), which is what a freshly rolled
//! segment looks like; on ext4 every `fdatasync` that extends a file also has to commit the
//! size change through the filesystem journal, which is exactly the cost under study. Every case
//! starts from fresh files in a fresh temporary directory after a global `sync()`, so one case's
//! writeback does not bleed into the next. Payload buffers are allocated once and filled with
//! random non-zero bytes. Per-round latency covers the writes plus the strategy's syncs.
//!
//! Run with:
//!
//! ```text
//! cargo bench -p sluice-log --bench sync_strategy -- \
//!     --partitions 1,64 --bytes-per-partition-per-round 16384,1048576 \
//!     --seconds 5 --strategies seq,parallel,journal --threads 8 --dir ./target/bench-tmp
//! ```
//!
//! Each case prints one line as it finishes, and a Markdown summary table is printed at the end.
//! MiB/s counts payload bytes only (the journal's second copy is not counted as throughput).

// This is a standalone benchmark binary: printing its results to stdout is its whole purpose.
#![allow(clippy::print_stdout)]

use std::fs::{self, File, OpenOptions};
use std::io::{self, IoSlice, Write};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc;
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

use rand::RngCore;

const MIB: f64 = 1024.0 * 1024.0;

const USAGE: &str = "\
usage: sync_strategy [FLAGS]

  --partitions LIST                      partition counts, e.g. 1,64            (default 1,64)
  --bytes-per-partition-per-round LIST   bytes per partition per round; K/M
                                         suffixes accepted, e.g. 16K,1M          (default 16384,1048576)
  --seconds N                            measured seconds per case               (default 5)
  --strategies LIST                      any of seq,parallel,journal             (default all three)
  --threads N                            fdatasync pool size for `parallel`      (default 8)
  --dir PATH                             parent of the per-case temp directories
                                         (default <workspace>/target/bench-tmp)
  -h, --help                             print this help
";

#[derive(Clone, Copy, PartialEq, Eq)]
enum Strategy {
    Seq,
    Parallel,
    Journal,
}

impl Strategy {
    fn name(self) -> &'static str {
        match self {
            Strategy::Seq => "seq",
            Strategy::Parallel => "parallel",
            Strategy::Journal => "journal",
        }
    }

    fn parse(s: &str) -> Result<Self, String> {
        match s {
            "seq" => Ok(Strategy::Seq),
            "parallel" => Ok(Strategy::Parallel),
            "journal" => Ok(Strategy::Journal),
            other => Err(format!(
                "unknown strategy {other:?} (expected seq, parallel or journal)"
            )),
        }
    }
}

struct Config {
    partitions: Vec<usize>,
    bytes: Vec<usize>,
    seconds: f64,
    strategies: Vec<Strategy>,
    threads: usize,
    dir: PathBuf,
}

impl Config {
    fn default_dir() -> PathBuf {
        // The crate lives at <workspace>/crates/log; keep scratch data in the workspace target
        // directory (which is git-ignored) regardless of the directory cargo runs us from.
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../../target/bench-tmp")
    }

    fn from_args(args: impl IntoIterator<Item = String>) -> Result<Option<Self>, String> {
        let mut cfg = Config {
            partitions: vec![1, 64],
            bytes: vec![16 * 1024, 1024 * 1024],
            seconds: 5.0,
            strategies: vec![Strategy::Seq, Strategy::Parallel, Strategy::Journal],
            threads: 8,
            dir: Self::default_dir(),
        };
        let mut args = args.into_iter();
        while let Some(arg) = args.next() {
            // `cargo bench` passes `--bench` to every harness-less bench binary.
            if arg == "--bench" {
                continue;
            }
            if arg == "-h" || arg == "--help" {
                return Ok(None);
            }
            let (flag, inline) = match arg.split_once('=') {
                Some((f, v)) if f.starts_with("--") => (f.to_string(), Some(v.to_string())),
                _ => (arg.clone(), None),
            };
            let known = [
                "--partitions",
                "--bytes-per-partition-per-round",
                "--seconds",
                "--strategies",
                "--threads",
                "--dir",
            ];
            if !known.contains(&flag.as_str()) {
                return Err(format!("unknown argument {arg:?}"));
            }
            let value = match inline {
                Some(v) => v,
                // `--bench` is cargo's trailing argument, never a value.
                None => args
                    .next()
                    .filter(|v| v != "--bench")
                    .ok_or_else(|| format!("flag {flag} needs a value"))?,
            };
            match flag.as_str() {
                "--partitions" => cfg.partitions = parse_list(&flag, &value, parse_count)?,
                "--bytes-per-partition-per-round" => {
                    cfg.bytes = parse_list(&flag, &value, parse_size)?;
                }
                "--seconds" => {
                    cfg.seconds = value
                        .parse::<f64>()
                        .ok()
                        .filter(|s| s.is_finite() && *s > 0.0)
                        .ok_or_else(|| {
                            format!("{flag}: expected a positive number, got {value:?}")
                        })?;
                }
                "--strategies" => cfg.strategies = parse_list(&flag, &value, Strategy::parse)?,
                "--threads" => {
                    cfg.threads = parse_count(&value).map_err(|e| format!("{flag}: {e}"))?;
                }
                "--dir" => cfg.dir = PathBuf::from(value),
                _ => return Err(format!("unknown argument {arg:?}")),
            }
        }
        Ok(Some(cfg))
    }
}

fn parse_list<T>(
    flag: &str,
    value: &str,
    parse: impl Fn(&str) -> Result<T, String>,
) -> Result<Vec<T>, String> {
    let items = value
        .split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(|s| parse(s).map_err(|e| format!("{flag}: {e}")))
        .collect::<Result<Vec<_>, _>>()?;
    if items.is_empty() {
        return Err(format!("{flag}: expected a non-empty comma-separated list"));
    }
    Ok(items)
}

fn parse_count(s: &str) -> Result<usize, String> {
    match s.parse::<usize>() {
        Ok(n) if n > 0 => Ok(n),
        _ => Err(format!("expected a positive integer, got {s:?}")),
    }
}

/// Parses a byte count with an optional binary suffix: `16384`, `16K`, `16KiB`, `1M`, `1MiB`.
fn parse_size(s: &str) -> Result<usize, String> {
    let lower = s.to_ascii_lowercase();
    let (digits, mult) = if let Some(d) = lower.strip_suffix("kib").or(lower.strip_suffix('k')) {
        (d, 1024)
    } else if let Some(d) = lower.strip_suffix("mib").or(lower.strip_suffix('m')) {
        (d, 1024 * 1024)
    } else {
        (lower.as_str(), 1)
    };
    digits
        .trim()
        .parse::<usize>()
        .ok()
        .and_then(|n| n.checked_mul(mult))
        .filter(|n| *n > 0)
        .ok_or_else(|| format!("expected a positive byte count like 16384 or 1M, got {s:?}"))
}

fn io_ctx<T>(r: io::Result<T>, what: impl FnOnce() -> String) -> Result<T, String> {
    r.map_err(|e| format!("{}: {e}", what()))
}

/// Flushes all dirty data system-wide so that earlier cases (or other activity) do not leave
/// writeback running underneath the next measurement.
fn global_sync() {
    // SAFETY: sync(2) takes no arguments, touches no memory of ours and cannot fail.
    unsafe { libc::sync() };
}

/// Writes every slice completely, retrying on short writes and EINTR.
fn write_all_vectored(file: &mut File, mut bufs: &mut [IoSlice<'_>]) -> io::Result<()> {
    while !bufs.is_empty() {
        match file.write_vectored(bufs) {
            Ok(0) => {
                return Err(io::Error::new(
                    io::ErrorKind::WriteZero,
                    "vectored write wrote zero bytes",
                ));
            }
            Ok(n) => IoSlice::advance_slices(&mut bufs, n),
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

/// A persistent pool of threads that `fdatasync` a shared set of files on demand. Workers pull
/// file indexes from a shared counter, so the work balances itself across the pool.
struct SyncPool {
    go: Vec<mpsc::Sender<()>>,
    done: mpsc::Receiver<Result<(), (usize, io::Error)>>,
    next: Arc<AtomicUsize>,
    handles: Vec<JoinHandle<()>>,
}

impl SyncPool {
    fn new(files: Arc<Vec<File>>, threads: usize) -> Result<Self, String> {
        let (done_tx, done) = mpsc::channel();
        let next = Arc::new(AtomicUsize::new(0));
        let mut pool = SyncPool {
            go: Vec::with_capacity(threads),
            done,
            next: Arc::clone(&next),
            handles: Vec::with_capacity(threads),
        };
        for id in 0..threads {
            let (go_tx, go_rx) = mpsc::channel::<()>();
            let files = Arc::clone(&files);
            let next = Arc::clone(&next);
            let done_tx = done_tx.clone();
            let handle = thread::Builder::new()
                .name(format!("fdatasync-{id}"))
                .spawn(move || {
                    while go_rx.recv().is_ok() {
                        let mut result = Ok(());
                        loop {
                            let i = next.fetch_add(1, Ordering::Relaxed);
                            let Some(file) = files.get(i) else { break };
                            if let Err(e) = file.sync_data() {
                                result = Err((i, e));
                                break;
                            }
                        }
                        if done_tx.send(result).is_err() {
                            return;
                        }
                    }
                });
            // On failure `pool` is dropped here, which stops the workers already started.
            let handle = io_ctx(handle, || format!("spawning fdatasync worker {id}"))?;
            pool.go.push(go_tx);
            pool.handles.push(handle);
        }
        Ok(pool)
    }

    /// Syncs every file once, in parallel; returns the first error seen, if any.
    fn sync_all(&self) -> Result<(), String> {
        // All workers reported completion of the previous round before we get here, and the
        // channel send below orders this store before their next loads.
        self.next.store(0, Ordering::Relaxed);
        for tx in &self.go {
            tx.send(())
                .map_err(|e| format!("an fdatasync worker exited unexpectedly ({e})"))?;
        }
        let mut first_err = None;
        for _ in 0..self.go.len() {
            match self.done.recv() {
                Ok(Ok(())) => {}
                Ok(Err((i, e))) => {
                    first_err.get_or_insert(format!("fdatasync of segment {i} failed: {e}"));
                }
                Err(_) => return Err("an fdatasync worker exited unexpectedly".to_string()),
            }
        }
        first_err.map_or(Ok(()), Err)
    }
}

impl Drop for SyncPool {
    fn drop(&mut self) {
        // Closing the command channels makes every worker leave its loop.
        self.go.clear();
        for handle in self.handles.drain(..) {
            let _ = handle.join();
        }
    }
}

struct CaseResult {
    strategy: Strategy,
    partitions: usize,
    bytes: usize,
    rounds: u64,
    elapsed: Duration,
    fdatasyncs: u64,
    /// Sorted per-round latencies in nanoseconds.
    latencies_ns: Vec<u64>,
    /// Time to make the journal strategy's unsynced segment copies durable after the window.
    deferred_flush: Option<Duration>,
}

impl CaseResult {
    fn secs(&self) -> f64 {
        self.elapsed.as_secs_f64().max(f64::MIN_POSITIVE)
    }

    fn rounds_per_sec(&self) -> f64 {
        self.rounds as f64 / self.secs()
    }

    fn mib_per_sec(&self) -> f64 {
        (self.rounds as f64 * self.partitions as f64 * self.bytes as f64) / MIB / self.secs()
    }

    fn fdatasyncs_per_sec(&self) -> f64 {
        self.fdatasyncs as f64 / self.secs()
    }

    /// Nearest-rank percentile in milliseconds.
    fn percentile_ms(&self, q: f64) -> f64 {
        if self.latencies_ns.is_empty() {
            return 0.0;
        }
        let n = self.latencies_ns.len();
        let rank = ((q * n as f64).ceil() as usize).clamp(1, n);
        self.latencies_ns[rank - 1] as f64 / 1e6
    }

    fn max_ms(&self) -> f64 {
        self.latencies_ns.last().map_or(0.0, |&ns| ns as f64 / 1e6)
    }

    fn deferred_ms(&self) -> String {
        self.deferred_flush.map_or_else(
            || "-".to_string(),
            |d| format!("{:.1}", d.as_secs_f64() * 1e3),
        )
    }
}

fn human_bytes(n: usize) -> String {
    if n >= 1024 * 1024 && n.is_multiple_of(1024 * 1024) {
        format!("{} MiB", n / (1024 * 1024))
    } else if n >= 1024 && n.is_multiple_of(1024) {
        format!("{} KiB", n / 1024)
    } else {
        format!("{n} B")
    }
}

fn create_file(path: &Path) -> Result<File, String> {
    io_ctx(
        OpenOptions::new().write(true).create_new(true).open(path),
        || format!("creating {}", path.display()),
    )
}

/// Runs one (strategy, partitions, bytes) case in its own temporary directory.
fn run_case(
    cfg: &Config,
    strategy: Strategy,
    partitions: usize,
    bytes: usize,
    payload: &[u8],
) -> Result<CaseResult, String> {
    let tmp = io_ctx(
        tempfile::Builder::new()
            .prefix("sync-strategy-")
            .tempdir_in(&cfg.dir),
        || format!("creating a temp dir under {}", cfg.dir.display()),
    )?;
    let result = measure(cfg, strategy, partitions, bytes, payload, tmp.path());
    // Remove the files before the next case's sync(), so that dirty pages of deleted files are
    // simply dropped instead of being written back.
    let tmp_path = tmp.path().to_path_buf();
    let cleanup = io_ctx(tmp.close(), || format!("removing {}", tmp_path.display()));
    let result = result?;
    cleanup?;
    Ok(result)
}

fn measure(
    cfg: &Config,
    strategy: Strategy,
    partitions: usize,
    bytes: usize,
    payload: &[u8],
    dir: &Path,
) -> Result<CaseResult, String> {
    let chunks: Vec<&[u8]> = payload.chunks_exact(bytes).take(partitions).collect();
    if chunks.len() != partitions {
        return Err("internal error: payload buffer is too small for this case".to_string());
    }

    let mut segments = Vec::with_capacity(partitions);
    for p in 0..partitions {
        segments.push(create_file(&dir.join(format!("partition-{p:05}.log")))?);
    }
    let mut journal = match strategy {
        Strategy::Journal => Some(create_file(&dir.join("journal.log"))?),
        Strategy::Seq | Strategy::Parallel => None,
    };
    // The pool shares the files; writes go through `&File`, which implements `Write`.
    let segments = Arc::new(segments);
    let pool = match strategy {
        Strategy::Parallel => Some(SyncPool::new(
            Arc::clone(&segments),
            cfg.threads.min(partitions),
        )?),
        Strategy::Seq | Strategy::Journal => None,
    };

    global_sync();

    let window = Duration::from_secs_f64(cfg.seconds);
    let mut latencies_ns: Vec<u64> = Vec::with_capacity(1 << 14);
    let mut fdatasyncs: u64 = 0;
    let mut slices: Vec<IoSlice<'_>> = Vec::with_capacity(partitions);
    let start = Instant::now();
    let mut end = start;
    while end.duration_since(start) < window {
        let round_start = Instant::now();
        match strategy {
            Strategy::Seq | Strategy::Parallel => {
                for (p, (mut file, chunk)) in segments.iter().zip(&chunks).enumerate() {
                    io_ctx(file.write_all(chunk), || format!("writing segment {p}"))?;
                }
                if let Some(pool) = &pool {
                    pool.sync_all()?;
                } else {
                    for (p, file) in segments.iter().enumerate() {
                        io_ctx(file.sync_data(), || format!("fdatasync of segment {p}"))?;
                    }
                }
                fdatasyncs += partitions as u64;
            }
            Strategy::Journal => {
                let journal = journal
                    .as_mut()
                    .ok_or_else(|| "internal error: journal file missing".to_string())?;
                slices.clear();
                slices.extend(chunks.iter().map(|c| IoSlice::new(c)));
                io_ctx(write_all_vectored(journal, &mut slices), || {
                    "appending to the journal".to_string()
                })?;
                io_ctx(journal.sync_data(), || {
                    "fdatasync of the journal".to_string()
                })?;
                fdatasyncs += 1;
                // The copies behind the journal: written, never synced inside the round.
                for (p, (mut file, chunk)) in segments.iter().zip(&chunks).enumerate() {
                    io_ctx(file.write_all(chunk), || format!("writing segment {p}"))?;
                }
            }
        }
        end = Instant::now();
        latencies_ns.push(end.duration_since(round_start).as_nanos() as u64);
    }
    let elapsed = end.duration_since(start);
    drop(pool);

    let deferred_flush = match strategy {
        Strategy::Journal => {
            let flush_start = Instant::now();
            for (p, file) in segments.iter().enumerate() {
                io_ctx(file.sync_data(), || {
                    format!("final fdatasync of segment {p}")
                })?;
            }
            Some(flush_start.elapsed())
        }
        Strategy::Seq | Strategy::Parallel => None,
    };

    latencies_ns.sort_unstable();
    Ok(CaseResult {
        strategy,
        partitions,
        bytes,
        rounds: latencies_ns.len() as u64,
        elapsed,
        fdatasyncs,
        latencies_ns,
        deferred_flush,
    })
}

fn print_case_line(r: &CaseResult) {
    let deferred = match r.deferred_flush {
        Some(_) => format!("  deferred flush {} ms", r.deferred_ms()),
        None => String::new(),
    };
    println!(
        "{:<8} P={:<4} {:>8}/partition/round: {:>9.1} rounds/s {:>8.1} MiB/s {:>9.1} fdatasync/s  \
         p50 {:.2} ms  p99 {:.2} ms  max {:.2} ms{deferred}",
        r.strategy.name(),
        r.partitions,
        human_bytes(r.bytes),
        r.rounds_per_sec(),
        r.mib_per_sec(),
        r.fdatasyncs_per_sec(),
        r.percentile_ms(0.50),
        r.percentile_ms(0.99),
        r.max_ms(),
    );
}

fn print_table(results: &[CaseResult], threads: usize) {
    println!();
    println!(
        "| strategy | partitions | bytes/partition/round | rounds/s | MiB/s | fdatasyncs/s \
         | p50 ms | p99 ms | max ms | deferred flush ms |"
    );
    println!("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|");
    for r in results {
        let name = match r.strategy {
            Strategy::Parallel => format!("parallel ({} thr)", threads.min(r.partitions)),
            other => other.name().to_string(),
        };
        println!(
            "| {name} | {} | {} | {:.1} | {:.1} | {:.1} | {:.2} | {:.2} | {:.2} | {} |",
            r.partitions,
            human_bytes(r.bytes),
            r.rounds_per_sec(),
            r.mib_per_sec(),
            r.fdatasyncs_per_sec(),
            r.percentile_ms(0.50),
            r.percentile_ms(0.99),
            r.max_ms(),
            r.deferred_ms(),
        );
    }
}

fn main() -> ExitCode {
    let mut cfg = match Config::from_args(std::env::args().skip(1)) {
        Ok(Some(cfg)) => cfg,
        Ok(None) => {
            print!("{USAGE}");
            return ExitCode::SUCCESS;
        }
        Err(e) => {
            eprintln!("sync_strategy: {e}\n\n{USAGE}");
            return ExitCode::from(2);
        }
    };

    if let Err(e) = fs::create_dir_all(&cfg.dir) {
        eprintln!(
            "sync_strategy: cannot create data directory {}: {e}",
            cfg.dir.display()
        );
        return ExitCode::FAILURE;
    }
    // Show a clean absolute path in the output (the default contains `..` components).
    if let Ok(abs) = fs::canonicalize(&cfg.dir) {
        cfg.dir = abs;
    }

    let max_partitions = cfg.partitions.iter().copied().max().unwrap_or(1);
    let max_bytes = cfg.bytes.iter().copied().max().unwrap_or(1);
    let Some(payload_len) = max_partitions.checked_mul(max_bytes) else {
        eprintln!("sync_strategy: partitions x bytes-per-partition-per-round overflows");
        return ExitCode::FAILURE;
    };
    // One buffer for the largest case; partition p of a case uses the p-th `bytes`-sized chunk.
    let mut payload = vec![0u8; payload_len];
    rand::rng().fill_bytes(&mut payload);
    for b in &mut payload {
        if *b == 0 {
            *b = 1;
        }
    }

    let cases = cfg.partitions.len() * cfg.bytes.len() * cfg.strategies.len();
    println!(
        "sync_strategy: {cases} cases x {:.1} s, data dir {}, parallel pool {} threads",
        cfg.seconds,
        cfg.dir.display(),
        cfg.threads
    );

    let mut results = Vec::with_capacity(cases);
    let mut failures = 0usize;
    for &partitions in &cfg.partitions {
        for &bytes in &cfg.bytes {
            for &strategy in &cfg.strategies {
                match run_case(&cfg, strategy, partitions, bytes, &payload) {
                    Ok(r) => {
                        print_case_line(&r);
                        results.push(r);
                    }
                    Err(e) => {
                        failures += 1;
                        eprintln!(
                            "sync_strategy: case {} P={partitions} {}/partition/round failed: {e}",
                            strategy.name(),
                            human_bytes(bytes)
                        );
                    }
                }
            }
        }
    }

    print_table(&results, cfg.threads);
    if failures > 0 {
        eprintln!("sync_strategy: {failures} of {cases} cases failed");
        return ExitCode::FAILURE;
    }
    ExitCode::SUCCESS
}
