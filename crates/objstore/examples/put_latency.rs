//! PUT latency of the bucket itself, to set the object-storage mode's ack latency against.
//!
//! Writes `--count` objects of `--bytes` each under `PREFIX/put-latency/<run>/` the way the
//! flusher writes a flush object (one create-if-absent PUT, `If-None-Match: *`), at most
//! `--in-flight` at a time (the broker's `--object-puts-in-flight` default is 4), then deletes
//! them and prints the latency of the PUTs, first as one line for people, then as one
//! `key=value` line for scripts (`scripts/bench-object-storage.sh` reads it).
//!
//! ```sh
//! export AWS_ENDPOINT_URL=http://127.0.0.1:9000 AWS_ACCESS_KEY_ID=... AWS_SECRET_ACCESS_KEY=...
//! cargo run --release -p sluice-objstore --example put_latency -- \
//!     --storage s3://events/bench --count 200 --bytes 500000
//! ```
//!
//! The endpoint, region and credentials come from the same variables as the broker's
//! (`BucketConfig::from_process_env`), so the client, its timeouts and its retries are the
//! broker's too.

// A command-line tool: its output is its result.
#![allow(clippy::print_stdout)]

use std::process::ExitCode;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use object_store::{ObjectStoreExt, PutMode, PutOptions, PutPayload};
use sluice_objstore::bucket::{self, BucketConfig, StorageUrl};
use tokio::sync::Semaphore;

/// The most objects one run may write: enough for a stable p99, and a bound on what a typo
/// could leave in someone's bucket.
const COUNT_MAX: usize = 100_000;
/// The largest object: the broker's flush objects are at most `--object-max-bytes` (4 MiB by
/// default); 256 MiB leaves room for larger settings and stays well inside memory.
const BYTES_MAX: usize = 256 << 20;
/// PUTs at once, at most.
const IN_FLIGHT_MAX: usize = 64;

struct Args {
    storage: String,
    count: usize,
    bytes: usize,
    in_flight: usize,
    warmup: usize,
}

const USAGE: &str = "usage: put_latency --storage s3://BUCKET/PREFIX [--count N (100)] \
    [--bytes SIZE (1048576)] [--in-flight N (1)] [--warmup N (5)]";

fn parse_args() -> Result<Args, String> {
    let mut args = Args {
        storage: String::new(),
        count: 100,
        bytes: 1 << 20,
        in_flight: 1,
        warmup: 5,
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let mut value = || it.next().ok_or(format!("{flag} needs a value; {USAGE}"));
        let number = |v: String, max: usize| -> Result<usize, String> {
            let n: usize = v
                .parse()
                .map_err(|_| format!("{flag} takes a whole number, not {v:?}"))?;
            if n > max {
                return Err(format!("{flag} {n} is above the limit {max}"));
            }
            Ok(n)
        };
        match flag.as_str() {
            "--storage" => args.storage = value()?,
            "--count" => args.count = number(value()?, COUNT_MAX)?,
            "--bytes" => args.bytes = number(value()?, BYTES_MAX)?,
            "--in-flight" => args.in_flight = number(value()?, IN_FLIGHT_MAX)?,
            "--warmup" => args.warmup = number(value()?, COUNT_MAX)?,
            "-h" | "--help" => return Err(USAGE.to_owned()),
            other => return Err(format!("unknown argument {other:?}; {USAGE}")),
        }
    }
    if args.storage.is_empty() {
        return Err(format!("--storage is required; {USAGE}"));
    }
    if args.count == 0 || args.in_flight == 0 {
        return Err("--count and --in-flight must be at least 1".to_owned());
    }
    Ok(args)
}

/// The value at quantile `q` of sorted `values` (nearest rank).
fn quantile(sorted: &[Duration], q: f64) -> Duration {
    let rank = ((q * sorted.len() as f64).ceil() as usize).clamp(1, sorted.len());
    sorted[rank - 1]
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

async fn run(args: Args) -> Result<(), String> {
    let url = StorageUrl::parse(&args.storage).map_err(|e| e.to_string())?;
    let config = BucketConfig::from_process_env(url).map_err(|e| e.to_string())?;
    let bucket = Arc::new(bucket::open(config).map_err(|e| e.to_string())?);
    let run_id = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or(0);
    // Not compressible by anything on the way: a cheap xorshift fill.
    let mut body = vec![0u8; args.bytes];
    let mut x: u64 = 0x9E37_79B9_7F4A_7C15 ^ run_id as u64;
    for chunk in body.chunks_mut(8) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        let n = chunk.len();
        chunk.copy_from_slice(&x.to_le_bytes()[..n]);
    }
    let payload = bytes::Bytes::from(body);
    let total = args.warmup + args.count;
    let gate = Arc::new(Semaphore::new(args.in_flight));
    let mut tasks = Vec::with_capacity(total);
    let started = Instant::now();
    for i in 0..total {
        let permit = Arc::clone(&gate)
            .acquire_owned()
            .await
            .map_err(|e| e.to_string())?;
        let bucket = Arc::clone(&bucket);
        let payload = payload.clone();
        let key = bucket.key(&format!("put-latency/{run_id}/{i:08}"));
        tasks.push(tokio::spawn(async move {
            let options = PutOptions {
                mode: PutMode::Create,
                ..PutOptions::default()
            };
            let t0 = Instant::now();
            let outcome = bucket
                .store()
                .put_opts(&key, PutPayload::from(payload), options)
                .await;
            let took = t0.elapsed();
            drop(permit);
            outcome.map(|_| (key, took)).map_err(|e| e.to_string())
        }));
    }
    let mut latencies = Vec::with_capacity(args.count);
    let mut keys = Vec::with_capacity(total);
    for (i, task) in tasks.into_iter().enumerate() {
        let (key, took) = task.await.map_err(|e| e.to_string())??;
        keys.push(key);
        if i >= args.warmup {
            latencies.push(took);
        }
    }
    let wall = started.elapsed();
    for key in &keys {
        // Best effort: a leftover is a test object under put-latency/, never read by Sluice.
        let _ = bucket.store().delete(key).await;
    }
    latencies.sort();
    let p50 = quantile(&latencies, 0.50);
    let p99 = quantile(&latencies, 0.99);
    let max = latencies.last().copied().unwrap_or_default();
    let mean = latencies.iter().sum::<Duration>() / latencies.len() as u32;
    println!(
        "{} PUTs of {} bytes, {} in flight: p50 {:.2} ms, p99 {:.2} ms, max {:.2} ms, mean {:.2} ms ({:.1} PUTs/s)",
        args.count,
        args.bytes,
        args.in_flight,
        ms(p50),
        ms(p99),
        ms(max),
        ms(mean),
        total as f64 / wall.as_secs_f64()
    );
    println!(
        "put_latency count={} bytes={} in_flight={} p50_ms={:.3} p99_ms={:.3} max_ms={:.3} mean_ms={:.3}",
        args.count,
        args.bytes,
        args.in_flight,
        ms(p50),
        ms(p99),
        ms(max),
        ms(mean)
    );
    Ok(())
}

fn main() -> ExitCode {
    let args = match parse_args() {
        Ok(args) => args,
        Err(message) => {
            eprintln!("{message}");
            return ExitCode::from(2);
        }
    };
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(e) => {
            eprintln!("cannot start the runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(run(args)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(message) => {
            eprintln!("put_latency: {message}");
            ExitCode::FAILURE
        }
    }
}
