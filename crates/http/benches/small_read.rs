//! Latency of a small HTTP read from a large backlog: `GET .../records?max_records=10` with a
//! `max_bytes` of 64 MiB and of 1 MiB, from a partition that holds ~75 MiB; and, to check that
//! large reads do not pay for it, a read of 60,000 records (~60 MiB) with a 64 MiB `max_bytes`.
//!
//! In one process: a broker on a temporary data directory, its HTTP API on a free 127.0.0.1
//! port, a topic with one partition filled with 80 binary produces of 900 records of 1 KiB,
//! then, for each case, `--warmup` reads (not counted) and `--requests` reads at offset 0 over
//! one keep-alive connection, one at a time. Prints one JSON line per case:
//! min / median / max request latency in ms, from sending the request to the end of its body.
//!
//! ```text
//! cargo bench -p sluice-http --bench small_read -- --requests 30
//! ```
//!
//! A read should cost what its `max_records` needs, not what its `max_bytes` allows
//! (docs/benchmarks.md, "HTTP reads stop at max_records").

// A benchmark binary exists to print its results on stdout.
#![allow(clippy::print_stdout)]

use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::Request;
use hyper::header::{ACCEPT, CONTENT_TYPE, HOST};
use hyper_util::rt::TokioIo;
use sluice_broker::{Broker, BrokerConfig};
use sluice_http::auth::Auth;
use sluice_http::{AppState, HttpConfig};
use tokio::net::TcpStream;

const PRODUCES: usize = 80;
const RECORDS_PER_PRODUCE: usize = 900;
const RECORD_BYTES: usize = 1024;
/// (max_records, max_bytes) of each case.
const CASES: [(usize, usize); 3] = [(10, 64 << 20), (10, 1 << 20), (60_000, 64 << 20)];

fn main() {
    let mut requests = 30usize;
    let mut warmup = 3usize;
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--requests" => requests = args.next().and_then(|v| v.parse().ok()).unwrap_or(30),
            "--warmup" => warmup = args.next().and_then(|v| v.parse().ok()).unwrap_or(3),
            // `cargo bench` passes `--bench`.
            _ => {}
        }
    }
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("runtime");
    runtime.block_on(run(requests.max(1), warmup));
}

async fn run(requests: usize, warmup: usize) {
    let dir = tempfile::tempdir().expect("temp dir");
    let broker = Arc::new(Broker::open(BrokerConfig::new(dir.path())).expect("broker"));
    broker
        .create_topic("backlog", 1, Default::default())
        .expect("topic");
    let (stop, stop_rx) = tokio::sync::watch::channel(false);
    let auth = Arc::new(Auth::new(Vec::new()).expect("auth"));
    let state = AppState::new(Arc::clone(&broker), HttpConfig::default(), auth, stop_rx);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let addr = listener.local_addr().expect("address");
    let server = tokio::spawn(sluice_http::serve(listener, state));

    let stream = TcpStream::connect(addr).await.expect("connect");
    stream.set_nodelay(true).expect("nodelay");
    let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .expect("handshake");
    tokio::spawn(conn);

    // The backlog: binary produces of RECORDS_PER_PRODUCE values of RECORD_BYTES.
    let mut body = Vec::with_capacity(4 + RECORDS_PER_PRODUCE * (4 + RECORD_BYTES));
    body.extend_from_slice(&(RECORDS_PER_PRODUCE as u32).to_be_bytes());
    for _ in 0..RECORDS_PER_PRODUCE {
        body.extend_from_slice(&(RECORD_BYTES as u32).to_be_bytes());
    }
    body.resize(body.len() + RECORDS_PER_PRODUCE * RECORD_BYTES, b'v');
    let body = Bytes::from(body);
    for _ in 0..PRODUCES {
        sender.ready().await.expect("connection ready");
        let request = Request::post("/topics/backlog/records?partition=0")
            .header(HOST, addr.to_string())
            .header(CONTENT_TYPE, "application/x-sluice-batch")
            .body(Full::new(body.clone()))
            .expect("request");
        let response = sender.send_request(request).await.expect("produce");
        assert!(
            response.status().is_success(),
            "produce: {}",
            response.status()
        );
        response
            .into_body()
            .collect()
            .await
            .expect("produce answer");
    }

    for (max_records, max_bytes) in CASES {
        let path = format!(
            "/topics/backlog/partitions/0/records?offset=0&max_records={max_records}&max_bytes={max_bytes}"
        );
        let mut times = Vec::with_capacity(requests);
        for i in 0..warmup + requests {
            sender.ready().await.expect("connection ready");
            let request = Request::get(path.as_str())
                .header(HOST, addr.to_string())
                .header(ACCEPT, "application/x-sluice-batch")
                .body(Full::new(Bytes::new()))
                .expect("request");
            let started = Instant::now();
            let response = sender.send_request(request).await.expect("read");
            assert!(
                response.status().is_success(),
                "read: {}",
                response.status()
            );
            let count = response
                .headers()
                .get("sluice-record-count")
                .and_then(|v| v.to_str().ok())
                .map(str::to_owned);
            response.into_body().collect().await.expect("read answer");
            let elapsed = started.elapsed();
            assert_eq!(count, Some(max_records.to_string()));
            if i >= warmup {
                times.push(elapsed);
            }
        }
        times.sort();
        let ms = |d: Duration| d.as_secs_f64() * 1e3;
        println!(
            "{{\"max_records\": {max_records}, \"max_bytes\": {max_bytes}, \"requests\": {requests}, \"min_ms\": {:.3}, \"median_ms\": {:.3}, \"max_ms\": {:.3}}}",
            ms(times[0]),
            ms(times[times.len() / 2]),
            ms(times[times.len() - 1]),
        );
    }
    let _ = stop.send(true);
    drop(sender);
    let _ = server.await;
    broker.shutdown();
}
