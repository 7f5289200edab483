//! HTTP load generator for the Sluice HTTP API: records/s produced or read over plain HTTP/1.1.
//!
//! `--clients` connections (default 16), each its own task with one keep-alive connection and
//! one request in flight (closed loop, as an HTTP client without pipelining works), for
//! `--warmup` seconds (not counted) and then `--seconds` seconds:
//!
//! - `--mode produce`: `POST /topics/{topic}/records` with `--records-per-request` records of
//!   `--record-bytes` bytes each, as the binary batch format (`--format binary`, the default) or
//!   as a JSON array of `{"value": "..."}` (`--format json`). The body is built once and sent
//!   again and again; the broker answers after an fsync covers the records. No partition is
//!   given, so each request goes to the next partition in turn.
//! - `--mode consume`: `GET /topics/{topic}/partitions/{p}/records?offset=..&max_records=N`
//!   with `Accept: application/x-sluice-batch`; client `c` reads partition `c % partitions`,
//!   follows `Sluice-Next-Offset`, and starts again at the partition's first offset when it
//!   reaches the end (so a backlog written before is read over and over, from the page cache).
//!   Records are counted from `Sluice-Record-Count`; bodies are read to the end and dropped.
//!
//! Prints one JSON object: records/s, requests/s, MiB/s of record payload, request latency
//! p50/p99/p99.9/max in ms (from sending a request to the end of its response), and the count of
//! non-2xx answers and transport errors (a run with errors is not a result).
//!
//! ```text
//! cargo bench -p sluice-http --bench http_load -- --url http://127.0.0.1:8080 --topic bench \
//!     --mode produce --records-per-request 1000 --record-bytes 1024 --clients 16 --seconds 10
//! ```
//!
//! `scripts/bench-http.sh` starts a broker and runs the published cases.

// A benchmark binary exists to print its results on stdout.
#![allow(clippy::print_stdout)]

use std::process::ExitCode;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use bytes::{BufMut, Bytes, BytesMut};
use http_body_util::{BodyExt, Full};
use hyper::Request;
use hyper::header::{ACCEPT, CONTENT_TYPE, HOST};
use hyper_util::rt::TokioIo;
use tokio::net::TcpStream;

#[derive(Debug, Clone)]
struct Args {
    url: String,
    topic: String,
    mode: Mode,
    format: Format,
    records_per_request: usize,
    record_bytes: usize,
    clients: usize,
    partitions: usize,
    warmup: f64,
    seconds: f64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mode {
    Produce,
    Consume,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Format {
    Binary,
    Json,
}

fn usage() -> &'static str {
    "http_load --url URL --topic T [--mode produce|consume] [--format binary|json] \
     [--records-per-request N] [--record-bytes B] [--clients C] [--partitions P] \
     [--warmup S] [--seconds S]"
}

fn parse_args() -> Result<Args, String> {
    let mut args = Args {
        url: String::new(),
        topic: String::new(),
        mode: Mode::Produce,
        format: Format::Binary,
        records_per_request: 1000,
        record_bytes: 1024,
        clients: 16,
        partitions: 1,
        warmup: 2.0,
        seconds: 10.0,
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        if flag == "--bench" {
            continue; // cargo bench passes it
        }
        let mut value = || it.next().ok_or(format!("{flag} needs a value"));
        let number = |v: String| {
            v.parse::<f64>()
                .map_err(|e| format!("{flag}: '{v}' is not a number ({e})"))
        };
        match flag.as_str() {
            "--url" => args.url = value()?,
            "--topic" => args.topic = value()?,
            "--mode" => {
                args.mode = match value()?.as_str() {
                    "produce" => Mode::Produce,
                    "consume" => Mode::Consume,
                    other => return Err(format!("--mode: '{other}' is not produce or consume")),
                }
            }
            "--format" => {
                args.format = match value()?.as_str() {
                    "binary" => Format::Binary,
                    "json" => Format::Json,
                    other => return Err(format!("--format: '{other}' is not binary or json")),
                }
            }
            "--records-per-request" => args.records_per_request = number(value()?)? as usize,
            "--record-bytes" => args.record_bytes = number(value()?)? as usize,
            "--clients" => args.clients = number(value()?)? as usize,
            "--partitions" => args.partitions = number(value()?)? as usize,
            "--warmup" => args.warmup = number(value()?)?,
            "--seconds" => args.seconds = number(value()?)?,
            other => return Err(format!("unknown flag {other}; usage: {}", usage())),
        }
    }
    if args.url.is_empty() || args.topic.is_empty() {
        return Err(format!(
            "--url and --topic are required; usage: {}",
            usage()
        ));
    }
    if args.records_per_request == 0 || args.clients == 0 || args.partitions == 0 {
        return Err("--records-per-request, --clients and --partitions must be at least 1".into());
    }
    Ok(args)
}

/// Counters shared by the client tasks; only requests completed in the measured window count.
#[derive(Debug, Default)]
struct Totals {
    measuring: AtomicBool,
    records: AtomicU64,
    requests: AtomicU64,
    failed: AtomicU64,
}

fn main() -> ExitCode {
    let args = match parse_args() {
        Ok(a) => a,
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::FAILURE;
        }
    };
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    runtime.block_on(run(args))
}

async fn run(args: Args) -> ExitCode {
    let authority = args
        .url
        .trim_start_matches("http://")
        .trim_end_matches('/')
        .to_owned();
    let body = produce_body(&args);
    let totals = Arc::new(Totals::default());
    let stop = Arc::new(AtomicBool::new(false));
    let mut tasks = Vec::new();
    for client in 0..args.clients {
        let args = args.clone();
        let authority = authority.clone();
        let body = body.clone();
        let totals = Arc::clone(&totals);
        let stop = Arc::clone(&stop);
        tasks.push(tokio::spawn(async move {
            client_loop(client, &args, &authority, body, &totals, &stop).await
        }));
    }
    tokio::time::sleep(Duration::from_secs_f64(args.warmup)).await;
    totals.measuring.store(true, Ordering::SeqCst);
    let started = Instant::now();
    tokio::time::sleep(Duration::from_secs_f64(args.seconds)).await;
    totals.measuring.store(false, Ordering::SeqCst);
    let elapsed = started.elapsed().as_secs_f64();
    stop.store(true, Ordering::SeqCst);
    let mut latencies: Vec<Duration> = Vec::new();
    let mut transport_errors = 0u64;
    let mut first_error = None;
    for task in tasks {
        match task.await {
            Ok(Ok(mut l)) => latencies.append(&mut l),
            Ok(Err(e)) => {
                transport_errors += 1;
                first_error.get_or_insert(e);
            }
            Err(e) => {
                transport_errors += 1;
                first_error.get_or_insert(e.to_string());
            }
        }
    }
    latencies.sort_unstable();
    let pct = |p: f64| -> f64 {
        if latencies.is_empty() {
            return 0.0;
        }
        let i = ((latencies.len() as f64 * p).ceil() as usize).clamp(1, latencies.len()) - 1;
        latencies[i].as_secs_f64() * 1000.0
    };
    let records = totals.records.load(Ordering::SeqCst);
    let requests = totals.requests.load(Ordering::SeqCst);
    let failed = totals.failed.load(Ordering::SeqCst);
    let result = serde_json::json!({
        "mode": match args.mode { Mode::Produce => "produce", Mode::Consume => "consume" },
        "format": match args.format { Format::Binary => "binary", Format::Json => "json" },
        "records_per_request": args.records_per_request,
        "record_bytes": args.record_bytes,
        "clients": args.clients,
        "partitions": args.partitions,
        "seconds": elapsed,
        "records_per_sec": records as f64 / elapsed,
        "requests_per_sec": requests as f64 / elapsed,
        "payload_mib_per_sec": (records as f64 * args.record_bytes as f64) / elapsed / 1048576.0,
        "latency_ms": {"p50": pct(0.5), "p99": pct(0.99), "p999": pct(0.999), "max": pct(1.0)},
        "failed_requests": failed,
        "transport_errors": transport_errors,
        "first_error": first_error,
    });
    println!("{result}");
    if failed > 0 || transport_errors > 0 || records == 0 {
        eprintln!("error: the run had failures or no records; it is not a result");
        return ExitCode::FAILURE;
    }
    ExitCode::SUCCESS
}

/// The produce body, built once: binary batch format or a JSON array.
fn produce_body(args: &Args) -> Bytes {
    let n = args.records_per_request;
    let value: Vec<u8> = (0..args.record_bytes)
        .map(|i| b'a' + (i % 26) as u8)
        .collect();
    match args.format {
        Format::Binary => {
            let mut out = BytesMut::with_capacity(4 + 4 * n + n * args.record_bytes);
            out.put_u32(n as u32);
            for _ in 0..n {
                out.put_u32(args.record_bytes as u32);
            }
            for _ in 0..n {
                out.put_slice(&value);
            }
            out.freeze()
        }
        Format::Json => {
            let text = String::from_utf8(value).expect("ascii");
            let records: Vec<serde_json::Value> = (0..n)
                .map(|_| serde_json::json!({ "value": text }))
                .collect();
            Bytes::from(serde_json::to_vec(&records).expect("json"))
        }
    }
}

/// One client: a keep-alive connection, one request at a time, until `stop`.
/// Returns the latencies of the requests completed while measuring.
async fn client_loop(
    client: usize,
    args: &Args,
    authority: &str,
    body: Bytes,
    totals: &Totals,
    stop: &AtomicBool,
) -> Result<Vec<Duration>, String> {
    let stream = TcpStream::connect(authority)
        .await
        .map_err(|e| format!("connect {authority}: {e}"))?;
    let _ = stream.set_nodelay(true);
    let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .map_err(|e| format!("handshake: {e}"))?;
    tokio::spawn(conn);
    let partition = client % args.partitions;
    let mut offset: u64 = 0;
    let mut latencies = Vec::with_capacity(1 << 16);
    let content_type = match args.format {
        Format::Binary => "application/x-sluice-batch",
        Format::Json => "application/json",
    };
    while !stop.load(Ordering::Relaxed) {
        let request = match args.mode {
            Mode::Produce => Request::post(format!("/topics/{}/records", args.topic))
                .header(HOST, authority)
                .header(CONTENT_TYPE, content_type)
                .body(Full::new(body.clone())),
            Mode::Consume => Request::get(format!(
                "/topics/{}/partitions/{partition}/records?offset={offset}&max_records={}&max_bytes={}",
                args.topic,
                args.records_per_request,
                args.records_per_request * (args.record_bytes + 64) + 4096,
            ))
            .header(HOST, authority)
            .header(ACCEPT, "application/x-sluice-batch")
            .body(Full::new(Bytes::new())),
        }
        .map_err(|e| e.to_string())?;
        let sent = Instant::now();
        let response = sender
            .send_request(request)
            .await
            .map_err(|e| format!("request: {e}"))?;
        let status = response.status();
        let header = |name: &str| -> Option<u64> {
            response
                .headers()
                .get(name)
                .and_then(|v| v.to_str().ok())
                .and_then(|v| v.parse().ok())
        };
        let count = header("sluice-record-count");
        let next = header("sluice-next-offset");
        let mut body = response.into_body();
        let mut error_text = Vec::new();
        while let Some(frame) = body.frame().await {
            let frame = frame.map_err(|e| format!("response body: {e}"))?;
            if !status.is_success()
                && let Some(data) = frame.data_ref()
            {
                error_text.extend_from_slice(data);
            }
        }
        let latency = sent.elapsed();
        if !status.is_success() {
            totals.failed.fetch_add(1, Ordering::Relaxed);
            eprintln!(
                "client {client}: {status}: {}",
                String::from_utf8_lossy(&error_text)
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
            continue;
        }
        let records = match args.mode {
            Mode::Produce => args.records_per_request as u64,
            Mode::Consume => {
                let count = count.unwrap_or(0);
                match next {
                    Some(next) if count > 0 => offset = next,
                    _ => offset = 0, // at the end: read the backlog again
                }
                count
            }
        };
        if totals.measuring.load(Ordering::Relaxed) {
            totals.records.fetch_add(records, Ordering::Relaxed);
            totals.requests.fetch_add(1, Ordering::Relaxed);
            latencies.push(latency);
        }
    }
    Ok(latencies)
}
