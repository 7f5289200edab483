//! Crash test: kill a real appender process with SIGKILL at random moments, then check what
//! the log promised.
//!
//! The child is this test binary run again with `--exact crash_child_appender` and
//! `SLUICE_CRASH_CHILD_DIR` set; without that variable `crash_child_appender` returns at once,
//! so it is a no-op in ordinary runs. In the child, several threads append to one log and, for
//! every batch they see become durable, write `durable <base> <last> <crc>` to stdout (`crc` is
//! the CRC-32C of the batch bytes after the 8-byte base offset). The parent kills the child
//! after a random delay, reopens the log and checks:
//! 1. every range ever reported durable, in this round or an earlier one, is still there: a
//!    read at its base offset returns a batch with exactly that base, last offset and CRC;
//! 2. the log from its start to the high watermark is only whole, CRC-checked batches with
//!    consecutive offsets, so nothing past a torn tail is ever returned;
//! 3. each writer's records appear once each, in the order written (consecutive sequence
//!    numbers from 0), with the value contents intact.
//!
//! The next round's child appends to the same directory, so data accumulates across rounds.
//! The parent closes the log cleanly after even rounds and just drops it after odd ones, so the
//! child alternately starts from a clean and an unclean shutdown.
//!
//! When to kill: usually a random 50..600 ms after the child reports its log open (so the kill
//! lands among appends, syncs and segment rolls), sometimes at a random moment from its start,
//! which may fall in the child's own recovery. Each writer paces itself to a few MiB/s, in
//! bursts, so the log (and the time to reopen and check it) stays bounded.
//!
//! Reproducing a failure: the parent prints its seed; `SLUICE_CRASH_SEED=<seed>` replays the
//! same kill delays and batch shapes (thread scheduling still varies). `SLUICE_CRASH_ROUNDS`
//! sets the number of rounds (default 6). On failure the data directory is kept and its path
//! printed.

use std::collections::{HashMap, VecDeque};
use std::io::{self, BufRead, BufReader, Read, Write};
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdout, Command, ExitStatus, Stdio};
use std::sync::{Arc, mpsc};
use std::thread::JoinHandle;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use sluice_log::batch::build::{Record, batch_into};
use sluice_log::batch::{BatchView, HEADER_BYTES};
use sluice_log::{
    Appended, CommitConfig, GroupCommitter, LogConfig, LogError, PartitionLog, RecoveryAction,
    RecoveryReport, SystemClock,
};

const CHILD_TEST: &str = "crash_child_appender";
const CHILD_DIR_ENV: &str = "SLUICE_CRASH_CHILD_DIR";
const CHILD_GENERATION_ENV: &str = "SLUICE_CRASH_CHILD_GENERATION";
const CHILD_SEED_ENV: &str = "SLUICE_CRASH_CHILD_SEED";
const SEED_ENV: &str = "SLUICE_CRASH_SEED";
const ROUNDS_ENV: &str = "SLUICE_CRASH_ROUNDS";
const ROUNDS_DEFAULT: usize = 6;
/// How long a child appends, from when its log is open, before it is killed.
const RUN_MS: std::ops::Range<u64> = 50..600;
/// One round in this many kills the child at a random moment from its spawn instead, which may
/// fall while the child is still recovering the log.
const EARLY_KILL_ONE_IN: u32 = 3;
/// Longest a child may take to open the log.
const OPEN_TIMEOUT: Duration = Duration::from_secs(30);

/// Appender threads per child.
const WRITERS: u32 = 3;
/// Appends a writer keeps in flight before it waits for the oldest to become durable.
const WINDOW: usize = 8;
/// Bytes at the start of every record value: writer id (u32) and sequence number (u64).
const VALUE_HEADER_BYTES: usize = 12;
/// Record value sizes, header included.
const VALUE_BYTES: std::ops::RangeInclusive<usize> = VALUE_HEADER_BYTES..=2000;
/// Records per batch.
const RECORDS_PER_BATCH: std::ops::RangeInclusive<usize> = 1..=8;
/// Each writer's average append rate, and how far ahead of it a burst may run.
const WRITER_BYTES_PER_SEC: f64 = 1024.0 * 1024.0;
const WRITER_BURST_BYTES: f64 = 64.0 * 1024.0;
/// A child that outlives this (its parent died without killing it) exits by itself.
const CHILD_LIFETIME_MAX: Duration = Duration::from_secs(60);
/// Fewer durable ranges than this over the whole test means the children made no real progress.
const REPORTED_MIN: usize = 20;

/// Small segments and a dense index, so segments roll often during the test.
fn log_config() -> LogConfig {
    LogConfig {
        segment_bytes: 64 * 1024,
        index_interval_bytes: 512,
        segment_ms: None,
        retention_ms: None,
        retention_bytes: None,
        ..LogConfig::default()
    }
}

fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .expect("clock after 1970")
        .as_millis() as i64
}

fn env_parse<T: std::str::FromStr>(name: &str) -> Option<T> {
    let value = std::env::var(name).ok()?;
    match value.trim().parse() {
        Ok(v) => Some(v),
        Err(_) => panic!("{name}={value:?} does not parse"),
    }
}

// ---------------------------------------------------------------------------------------------
// Child
// ---------------------------------------------------------------------------------------------

/// Entry point of the child process; a no-op unless `SLUICE_CRASH_CHILD_DIR` is set.
#[test]
fn crash_child_appender() {
    let Some(dir) = std::env::var_os(CHILD_DIR_ENV) else {
        return;
    };
    let generation: u32 = env_parse(CHILD_GENERATION_ENV).expect("child generation is set");
    let seed: u64 = env_parse(CHILD_SEED_ENV).expect("child seed is set");
    let started = Instant::now();
    let parent = std::os::unix::process::parent_id();
    // libtest has written "test crash_child_appender ... " without a newline: start our lines
    // on a fresh line.
    report_lines("\n");

    let committer = GroupCommitter::start(CommitConfig::default());
    let log = PartitionLog::open(
        PathBuf::from(dir),
        log_config(),
        &committer,
        Arc::new(SystemClock),
    )
    .unwrap_or_else(|e| die(&format!("open log: {e}")));
    report_lines(&format!(
        "opened {} {}\n",
        log.high_watermark(),
        log.segment_count()
    ));

    let writers: Vec<JoinHandle<()>> = (0..WRITERS)
        .map(|t| {
            let log = log.clone();
            let writer_id = generation * WRITERS + t;
            let rng =
                StdRng::seed_from_u64(seed ^ u64::from(t).wrapping_mul(0x9e37_79b9_7f4a_7c15));
            std::thread::spawn(move || {
                if let Err(e) = append_forever(&log, writer_id, rng) {
                    die(&format!("writer {writer_id}: {e}"));
                }
            })
        })
        .collect();
    // Runs until killed. Exits by itself if a writer stopped (a panic), if the parent is gone,
    // or after a generous time limit, so a stray child never appends forever.
    loop {
        std::thread::sleep(Duration::from_millis(20));
        if writers.iter().any(JoinHandle::is_finished) {
            die("a writer thread stopped");
        }
        if std::os::unix::process::parent_id() != parent {
            die("parent is gone");
        }
        if started.elapsed() > CHILD_LIFETIME_MAX {
            die("ran past its time limit without being killed");
        }
    }
}

fn die(message: &str) -> ! {
    eprintln!("crash child: {message}");
    std::process::exit(2)
}

/// Writes whole lines to stdout under its lock (so lines of different threads never
/// interleave) and flushes them to the pipe.
fn report_lines(lines: &str) {
    let mut out = io::stdout().lock();
    if out
        .write_all(lines.as_bytes())
        .and_then(|()| out.flush())
        .is_err()
    {
        die("stdout closed");
    }
}

/// One append in flight: its handle, and each batch's record count and CRC.
struct InFlight {
    appended: Appended,
    batches: Vec<(i64, u32)>,
}

/// Appends batches of this writer's records forever, keeping up to [`WINDOW`] appends in
/// flight, and reports each batch once its append is durable. Paced to
/// [`WRITER_BYTES_PER_SEC`]: when ahead, it reports everything in flight, then sleeps.
fn append_forever(log: &PartitionLog, writer_id: u32, mut rng: StdRng) -> Result<(), LogError> {
    let started = Instant::now();
    let mut written = 0f64;
    let mut seq: u64 = 0;
    let mut in_flight: VecDeque<InFlight> = VecDeque::with_capacity(WINDOW + 1);
    let mut data = Vec::new();
    let mut values: Vec<Vec<u8>> = Vec::new();
    loop {
        // Mostly one batch per append, sometimes several in one call.
        let batch_count = if rng.random_ratio(1, 5) {
            rng.random_range(2..=3)
        } else {
            1
        };
        data.clear();
        let mut batches = Vec::with_capacity(batch_count);
        for _ in 0..batch_count {
            values.clear();
            for _ in 0..rng.random_range(RECORDS_PER_BATCH) {
                values.push(record_value(writer_id, seq, rng.random_range(VALUE_BYTES)));
                seq += 1;
            }
            let records: Vec<Record<'_>> = values
                .iter()
                .enumerate()
                .map(|(i, v)| Record {
                    timestamp_delta: i as i64,
                    key: None,
                    value: Some(v),
                })
                .collect();
            let start = data.len();
            batch_into(&mut data, now_ms(), &records);
            batches.push((records.len() as i64, crc32c::crc32c(&data[start + 8..])));
        }
        let appended = log.append(&data)?;
        let records: i64 = batches.iter().map(|b| b.0).sum();
        assert_eq!(
            appended.last_offset - appended.base_offset + 1,
            records,
            "append assigned the wrong number of offsets"
        );
        in_flight.push_back(InFlight { appended, batches });
        written += data.len() as f64;

        let ahead = |written: f64| {
            (written - WRITER_BURST_BYTES) / WRITER_BYTES_PER_SEC - started.elapsed().as_secs_f64()
        };
        if ahead(written) > 0.0 {
            // Ahead of pace: report everything in flight, then sleep off the rest.
            while let Some(done) = in_flight.pop_front() {
                report_durable(done)?;
            }
            let ahead = ahead(written);
            if ahead > 0.0 {
                std::thread::sleep(Duration::from_secs_f64(ahead));
            }
        } else {
            // Report what is already durable; wait for the oldest only when the window is full.
            while let Some(oldest) = in_flight.front() {
                if in_flight.len() < WINDOW && !oldest.appended.is_durable() {
                    break;
                }
                report_durable(in_flight.pop_front().expect("not empty"))?;
            }
        }
    }
}

/// Waits until `done` is durable, then reports each of its batches.
fn report_durable(done: InFlight) -> Result<(), LogError> {
    let durable = done.appended.wait_durable()?;
    let mut lines = String::new();
    let mut base = durable.base_offset;
    for (count, crc) in done.batches {
        lines.push_str(&format!("durable {base} {} {crc}\n", base + count - 1));
        base += count;
    }
    assert_eq!(base, durable.last_offset + 1, "batch offsets do not add up");
    report_lines(&lines);
    Ok(())
}

/// A record value: writer id, sequence number, then filler derived from both.
fn record_value(writer_id: u32, seq: u64, len: usize) -> Vec<u8> {
    let mut v = Vec::with_capacity(len);
    v.extend_from_slice(&writer_id.to_be_bytes());
    v.extend_from_slice(&seq.to_be_bytes());
    v.extend((VALUE_HEADER_BYTES..len).map(|j| filler(writer_id, seq, j)));
    v
}

fn filler(writer_id: u32, seq: u64, j: usize) -> u8 {
    (seq as u8) ^ (writer_id as u8).wrapping_mul(31) ^ (j as u8)
}

// ---------------------------------------------------------------------------------------------
// Parent
// ---------------------------------------------------------------------------------------------

/// A batch the child reported durable.
#[derive(Debug, Clone, Copy)]
struct Reported {
    round: usize,
    base: i64,
    last: i64,
    crc: u32,
}

/// When the parent kills a child.
#[derive(Debug, Clone, Copy)]
enum KillAt {
    /// This long after the child reports its log open: among appends, syncs and rolls.
    AfterOpen(Duration),
    /// This long after spawning it: possibly while it is still recovering the log.
    AfterSpawn(Duration),
}

/// What one child printed before it was killed.
#[derive(Debug, Default)]
struct ChildOutput {
    /// Whether the child finished opening (recovering) the log.
    opened: bool,
    reported: Vec<Reported>,
    bytes: usize,
    /// Whether the output ended in the middle of a line (which is then ignored).
    partial_line: bool,
}

/// Kills (SIGKILL) and reaps the child it holds when dropped, so a failing assertion never
/// leaves the child running. It only ever signals the process it spawned, through its handle.
struct ChildGuard {
    child: Option<Child>,
}

impl ChildGuard {
    fn child(&mut self) -> &mut Child {
        self.child.as_mut().expect("child present")
    }

    /// SIGKILLs the child and waits for it.
    fn kill(&mut self) -> ExitStatus {
        let mut child = self.child.take().expect("child present");
        child.kill().expect("SIGKILL the child");
        child.wait().expect("wait for the child")
    }
}

impl Drop for ChildGuard {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// Keeps the data directory when the test fails, and says where it is.
struct DataDir {
    dir: Option<tempfile::TempDir>,
}

impl DataDir {
    fn path(&self) -> &Path {
        self.dir.as_ref().expect("dir present").path()
    }
}

impl Drop for DataDir {
    fn drop(&mut self) {
        if std::thread::panicking()
            && let Some(dir) = self.dir.take()
        {
            eprintln!("crash test failed; data kept in {}", dir.keep().display());
        }
    }
}

/// Reads the child's stdout as it comes, in a thread: collects the durable reports of whole
/// lines and signals `opened` when the child says its log is open.
fn read_child_stdout(
    stdout: ChildStdout,
    round: usize,
    opened: mpsc::Sender<()>,
) -> JoinHandle<ChildOutput> {
    std::thread::spawn(move || {
        let mut output = ChildOutput::default();
        let mut reader = BufReader::new(stdout);
        let mut line = Vec::new();
        loop {
            line.clear();
            let n = reader
                .read_until(b'\n', &mut line)
                .expect("read child stdout");
            output.bytes += n;
            if n == 0 {
                break;
            }
            if line.last() != Some(&b'\n') {
                // Killed in the middle of a line: only whole lines count.
                output.partial_line = true;
                break;
            }
            let line = std::str::from_utf8(&line).expect("child output is UTF-8");
            let mut words = line.split_ascii_whitespace();
            match words.next() {
                Some("opened") => {
                    output.opened = true;
                    let _ = opened.send(());
                }
                Some("durable") => {
                    let mut num = |what: &str| -> i64 {
                        words
                            .next()
                            .and_then(|w| w.parse().ok())
                            .unwrap_or_else(|| panic!("round {round}: bad {what} in {line:?}"))
                    };
                    let base = num("base offset");
                    let last = num("last offset");
                    let crc = u32::try_from(num("crc")).expect("crc is a u32");
                    assert!(base <= last, "round {round}: bad range in {line:?}");
                    output.reported.push(Reported {
                        round,
                        base,
                        last,
                        crc,
                    });
                }
                _ => {} // libtest's own output
            }
        }
        output
    })
}

fn read_to_end_in_thread(mut pipe: impl Read + Send + 'static) -> JoinHandle<Vec<u8>> {
    std::thread::spawn(move || {
        let mut buf = Vec::new();
        let _ = pipe.read_to_end(&mut buf);
        buf
    })
}

/// Spawns the child on `log_dir`, SIGKILLs it at `kill_at` and collects what it reported.
fn run_child(log_dir: &Path, round: usize, seed: u64, kill_at: KillAt) -> ChildOutput {
    let exe = std::env::current_exe().expect("path of the test binary");
    let child = Command::new(exe)
        .args(["--exact", CHILD_TEST, "--nocapture", "--test-threads=1"])
        .env(CHILD_DIR_ENV, log_dir)
        .env(CHILD_GENERATION_ENV, round.to_string())
        .env(CHILD_SEED_ENV, seed.to_string())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn the child");
    let mut guard = ChildGuard { child: Some(child) };
    let (opened_tx, opened_rx) = mpsc::channel();
    let stdout = guard.child().stdout.take().expect("piped stdout");
    let stdout = read_child_stdout(stdout, round, opened_tx);
    let stderr = read_to_end_in_thread(guard.child().stderr.take().expect("piped stderr"));
    let child_failed = |guard: ChildGuard, stderr: JoinHandle<Vec<u8>>, what: &str| -> ! {
        drop(guard);
        let err = stderr.join().expect("stderr reader");
        panic!(
            "round {round}: the child {what}; its stderr:\n{}",
            String::from_utf8_lossy(&err)
        );
    };

    match kill_at {
        KillAt::AfterOpen(delay) => {
            match opened_rx.recv_timeout(OPEN_TIMEOUT) {
                Ok(()) => {}
                Err(mpsc::RecvTimeoutError::Timeout) => child_failed(
                    guard,
                    stderr,
                    &format!("did not open the log within {OPEN_TIMEOUT:?}"),
                ),
                Err(mpsc::RecvTimeoutError::Disconnected) => {
                    child_failed(guard, stderr, "closed its stdout before opening the log")
                }
            }
            std::thread::sleep(delay);
        }
        KillAt::AfterSpawn(delay) => std::thread::sleep(delay),
    }
    if let Some(status) = guard.child().try_wait().expect("poll the child") {
        child_failed(
            guard,
            stderr,
            &format!("exited by itself ({status}) before being killed"),
        );
    }
    let status = guard.kill();
    let output = stdout.join().expect("stdout reader");
    let err = stderr.join().expect("stderr reader");
    assert_eq!(
        status.signal(),
        Some(libc::SIGKILL),
        "round {round}: child ended with {status}, not by SIGKILL; stderr:\n{}",
        String::from_utf8_lossy(&err)
    );
    output
}

#[derive(Debug, Default)]
struct ScanStats {
    batches: usize,
    records: usize,
    bytes: usize,
    /// Next expected sequence number of each writer that has records in the log.
    writers: HashMap<u32, u64>,
}

/// Reads the whole log, start to high watermark, checking batch validity (CRC included), offset
/// continuity and each writer's record order; record values are checked byte for byte in the
/// batches from `new_from` on (older ones were checked in an earlier round, and their CRCs still
/// are). Returns every batch's last offset by its base offset.
fn scan_log(log: &PartitionLog, round: usize, new_from: i64) -> (HashMap<i64, i64>, ScanStats) {
    const READ_BYTES: usize = 256 * 1024;
    let high_watermark = log.high_watermark();
    assert_eq!(
        high_watermark,
        log.log_end_offset(),
        "round {round}: after recovery everything in the log must be durable"
    );
    let log_start = log.log_start_offset();
    assert_eq!(
        log_start, 0,
        "round {round}: nothing may delete the log's start"
    );
    let mut batches = HashMap::new();
    let mut stats = ScanStats::default();
    let mut next = log_start;
    loop {
        let read = log
            .read(next, READ_BYTES)
            .unwrap_or_else(|e| panic!("round {round}: read at {next}: {e}"));
        assert_eq!(read.high_watermark, high_watermark, "round {round}");
        if read.records.is_empty() {
            break;
        }
        let mut rest = &read.records[..];
        while !rest.is_empty() {
            let view = BatchView::parse_checked(rest).unwrap_or_else(|e| {
                panic!("round {round}: invalid batch returned by read near offset {next}: {e}")
            });
            assert_eq!(
                view.base_offset(),
                next,
                "round {round}: offsets are not consecutive"
            );
            check_records(&view, &mut stats.writers, round, next >= new_from);
            batches.insert(view.base_offset(), view.last_offset());
            stats.batches += 1;
            stats.records += view.record_count() as usize;
            stats.bytes += view.len();
            next = view.last_offset() + 1;
            rest = &rest[view.len()..];
        }
    }
    assert_eq!(
        next, high_watermark,
        "round {round}: reading stopped before the high watermark"
    );
    assert!(
        matches!(
            log.read(high_watermark + 1, 1),
            Err(LogError::OffsetOutOfRange { .. })
        ),
        "round {round}: a read past the log end must fail"
    );
    (batches, stats)
}

/// Decodes a zig-zag varint at `*pos`, advancing it.
fn varint(buf: &[u8], pos: &mut usize) -> Option<i64> {
    let mut raw = 0u64;
    for shift in (0..64).step_by(7) {
        let b = *buf.get(*pos)?;
        *pos += 1;
        raw |= u64::from(b & 0x7f) << shift;
        if b & 0x80 == 0 {
            return Some(((raw >> 1) as i64) ^ -((raw & 1) as i64));
        }
    }
    None
}

/// Checks every record of a batch the child wrote: framing, contents, and that each writer's
/// sequence numbers continue exactly where its previous record left off.
fn check_records(
    view: &BatchView<'_>,
    writers: &mut HashMap<u32, u64>,
    round: usize,
    check_values: bool,
) {
    let base = view.base_offset();
    let bytes = &view.bytes()[HEADER_BYTES..];
    let mut pos = 0usize;
    for i in 0..view.record_count() {
        let at = |what: &str| format!("round {round}: batch at offset {base}, record {i}: {what}");
        let len = varint(bytes, &mut pos).unwrap_or_else(|| panic!("{}", at("bad length")));
        let end = pos + usize::try_from(len).unwrap_or_else(|_| panic!("{}", at("bad length")));
        assert!(end <= bytes.len(), "{}", at("runs past the batch"));
        let body = &bytes[..end];
        assert_eq!(body[pos], 0, "{}", at("attributes"));
        pos += 1;
        let field = |pos: &mut usize, what: &str| {
            varint(body, pos).unwrap_or_else(|| panic!("{}", at(what)))
        };
        assert_eq!(
            field(&mut pos, "timestamp delta"),
            i64::from(i),
            "{}",
            at("ts")
        );
        assert_eq!(
            field(&mut pos, "offset delta"),
            i64::from(i),
            "{}",
            at("delta")
        );
        assert_eq!(field(&mut pos, "key length"), -1, "{}", at("key"));
        let value_len = field(&mut pos, "value length") as usize;
        assert!(
            (VALUE_HEADER_BYTES..=*VALUE_BYTES.end()).contains(&value_len)
                && pos + value_len <= end,
            "{}",
            at("value length")
        );
        let value = &body[pos..pos + value_len];
        pos += value_len;
        assert_eq!(field(&mut pos, "header count"), 0, "{}", at("headers"));
        assert_eq!(pos, end, "{}", at("length does not match its fields"));

        let writer = u32::from_be_bytes(value[..4].try_into().expect("4 bytes"));
        let seq = u64::from_be_bytes(value[4..12].try_into().expect("8 bytes"));
        assert!(
            (writer / WRITERS) as usize <= round,
            "{}",
            at(&format!("writer {writer} belongs to a later round"))
        );
        let expected = writers.entry(writer).or_insert(0);
        assert_eq!(
            seq,
            *expected,
            "{}",
            at(&format!(
                "writer {writer}: sequence {seq} where {expected} was next (duplicate, reordered \
                 or lost record)"
            ))
        );
        *expected += 1;
        assert!(
            !check_values
                || value[VALUE_HEADER_BYTES..]
                    .iter()
                    .enumerate()
                    .all(|(j, &b)| b == filler(writer, seq, j + VALUE_HEADER_BYTES)),
            "{}",
            at("value contents differ from what was written")
        );
    }
    assert_eq!(
        pos,
        bytes.len(),
        "round {round}: batch at {base}: bytes after the last record"
    );
}

/// Checks that every range reported durable so far is in the log exactly as reported: a batch
/// starts at its base offset in the scan, and a read at that offset returns it, same last offset
/// and same CRC.
fn check_reported(
    log: &PartitionLog,
    stored: &HashMap<i64, i64>,
    reported: &[Reported],
    round: usize,
) {
    for r in reported {
        let what = format!(
            "round {round}: range {}..={} (crc {:#010x}) reported durable in round {}",
            r.base, r.last, r.crc, r.round
        );
        let last = stored
            .get(&r.base)
            .unwrap_or_else(|| panic!("{what}: no batch starts there after recovery"));
        assert_eq!(
            *last, r.last,
            "{what}: the log holds a different batch there"
        );
        let read = log
            .read(r.base, 1)
            .unwrap_or_else(|e| panic!("{what}: read failed: {e}"));
        let view = BatchView::parse_checked(&read.records)
            .unwrap_or_else(|e| panic!("{what}: read returned an invalid batch: {e}"));
        assert_eq!(
            view.base_offset(),
            r.base,
            "{what}: read returned another batch"
        );
        assert_eq!(
            view.last_offset(),
            r.last,
            "{what}: read returned another batch"
        );
        assert_eq!(
            crc32c::crc32c(&view.bytes()[8..]),
            r.crc,
            "{what}: read returned different bytes"
        );
    }
}

fn action_kind(action: &RecoveryAction) -> &'static str {
    match action {
        RecoveryAction::TruncatedTail { .. } => "truncated tail",
        RecoveryAction::RebuiltIndexes { .. } => "rebuilt indexes",
        RecoveryAction::ExtendedIndexes { .. } => "extended indexes",
        RecoveryAction::DeletedEmptySegment { .. } => "deleted empty segment",
        RecoveryAction::DeletedStrayFile { .. } => "deleted stray file",
        RecoveryAction::DeletedBelowLogStart { .. } => "deleted segment below log start",
        RecoveryAction::LoweredLogStart { .. } => "lowered log start",
        RecoveryAction::CompactionRolledBack { .. } => "rolled back compaction",
        RecoveryAction::CompactionCompleted { .. } => "completed compaction",
    }
}

fn describe_actions(report: &RecoveryReport) -> String {
    if report.actions.is_empty() {
        return "none".to_owned();
    }
    let names: Vec<String> = report
        .actions
        .iter()
        .map(|a| match a {
            RecoveryAction::TruncatedTail {
                at,
                dropped_bytes,
                reason,
                ..
            } => format!("truncated tail at {at} (-{dropped_bytes} B, {reason})"),
            RecoveryAction::RebuiltIndexes { reason, .. } => format!("rebuilt indexes ({reason})"),
            RecoveryAction::ExtendedIndexes { entries_added, .. } => {
                format!("extended indexes (+{entries_added})")
            }
            RecoveryAction::DeletedEmptySegment { .. } => "deleted empty segment".to_owned(),
            RecoveryAction::DeletedStrayFile { path } => {
                format!("deleted stray file {}", path.display())
            }
            RecoveryAction::DeletedBelowLogStart { log_start, .. } => {
                format!("deleted segment below log start {log_start}")
            }
            RecoveryAction::LoweredLogStart { from, to } => {
                format!("lowered log start {from} -> {to}")
            }
            RecoveryAction::CompactionRolledBack { base, end } => {
                format!("rolled back compaction {base}..{end}")
            }
            RecoveryAction::CompactionCompleted { base, end, .. } => {
                format!("completed compaction {base}..{end}")
            }
        })
        .collect();
    names.join("; ")
}

#[test]
fn sigkill_during_appends_never_loses_durable_data() {
    let seed: u64 = env_parse(SEED_ENV).unwrap_or_else(|| {
        let t = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .expect("clock after 1970");
        t.as_secs() ^ u64::from(t.subsec_nanos()).rotate_left(32)
    });
    let rounds: usize = env_parse(ROUNDS_ENV).unwrap_or(ROUNDS_DEFAULT);
    eprintln!("crash test: seed {seed} ({SEED_ENV}={seed} replays it), {rounds} rounds");
    let mut rng = StdRng::seed_from_u64(seed);
    let test_started = Instant::now();

    let data = DataDir {
        dir: Some(
            tempfile::Builder::new()
                .prefix("sluice-crash-")
                .tempdir()
                .expect("temp dir"),
        ),
    };
    let log_dir = data.path().join("topic-0");
    let committer = GroupCommitter::start(CommitConfig::default());

    let mut reported: Vec<Reported> = Vec::new();
    let mut high_watermark = 0i64;
    // How long the last reopen took: a guide to when a child is still recovering.
    let mut last_open = Duration::ZERO;
    let mut rounds_repaired = 0usize;
    let mut rounds_grown = 0usize;
    let mut action_counts: HashMap<&'static str, usize> = HashMap::new();
    for round in 0..rounds {
        let kill_at = if round > 0 && rng.random_ratio(1, EARLY_KILL_ONE_IN) {
            // Process start-up takes a few ms, and the child's recovery about as long as the
            // parent's last one; capped so a slow open does not turn into a long run.
            let window = 20 + (2 * last_open.as_millis() as u64).min(RUN_MS.end);
            KillAt::AfterSpawn(Duration::from_millis(rng.random_range(0..window)))
        } else {
            KillAt::AfterOpen(Duration::from_millis(rng.random_range(RUN_MS)))
        };
        let run = run_child(&log_dir, round, rng.random(), kill_at);
        let new_reports = run.reported.len();
        reported.extend_from_slice(&run.reported);

        let opened_at = Instant::now();
        let log = PartitionLog::open(&log_dir, log_config(), &committer, Arc::new(SystemClock))
            .unwrap_or_else(|e| panic!("round {round}: reopening after SIGKILL failed: {e}"));
        last_open = opened_at.elapsed();
        let report = log.recovery_report().clone();
        let checked_at = Instant::now();
        let (stored, stats) = scan_log(&log, round, high_watermark);
        check_reported(&log, &stored, &reported, round);
        let check_ms = checked_at.elapsed().as_millis();

        let previous = high_watermark;
        high_watermark = log.high_watermark();
        assert!(
            high_watermark >= previous,
            "round {round}: the log shrank from {previous} to {high_watermark} offsets"
        );
        rounds_grown += usize::from(high_watermark > previous);
        rounds_repaired += usize::from(!report.actions.is_empty());
        for action in &report.actions {
            *action_counts.entry(action_kind(action)).or_default() += 1;
        }
        let clean_close = round % 2 == 0;
        eprintln!(
            "round {round}: killed {}{}; {new_reports} batches reported durable ({} in total), \
             {} B of output{}. Reopened in {} ms: clean shutdown {}, {} segments, offsets \
             {previous} -> {high_watermark}, {} batches / {} records / {} B from {} writers, \
             checked in {check_ms} ms. Recovery: {}. Then {}.",
            match kill_at {
                KillAt::AfterOpen(d) => format!("{} ms after the log was open", d.as_millis()),
                KillAt::AfterSpawn(d) => format!("{} ms after spawn", d.as_millis()),
            },
            if run.opened {
                ""
            } else {
                " (before its log was open)"
            },
            reported.len(),
            run.bytes,
            if run.partial_line {
                " (the last line cut short)"
            } else {
                ""
            },
            last_open.as_millis(),
            report.clean_shutdown,
            report.segments,
            stats.batches,
            stats.records,
            stats.bytes,
            stats.writers.len(),
            describe_actions(&report),
            if clean_close { "close" } else { "drop" },
        );
        let routine = |a: &RecoveryAction| matches!(a, RecoveryAction::RebuiltIndexes { reason, .. } if reason == "unclean shutdown");
        if !report.actions.iter().all(routine) {
            eprintln!("round {round}: full recovery report: {report:#?}");
        }
        if clean_close {
            log.close()
                .unwrap_or_else(|e| panic!("round {round}: close failed: {e}"));
        } else {
            drop(log);
        }
    }

    let mut actions: Vec<String> = action_counts
        .iter()
        .map(|(kind, n)| format!("{kind} x{n}"))
        .collect();
    actions.sort();
    eprintln!(
        "crash test: seed {seed}, {rounds} rounds in {} ms; {} batches reported durable, all \
         present; final high watermark {high_watermark}; rounds that grew the log: \
         {rounds_grown}; rounds whose recovery repaired something: {rounds_repaired} ({})",
        test_started.elapsed().as_millis(),
        reported.len(),
        if actions.is_empty() {
            "no actions".to_owned()
        } else {
            actions.join(", ")
        },
    );
    assert!(
        reported.len() >= REPORTED_MIN,
        "the children reported only {} durable batches: the test checked next to nothing",
        reported.len()
    );
    assert!(
        rounds_repaired > 0 || rounds_grown > 0,
        "no round grew the log or needed recovery: the children did nothing"
    );
}
