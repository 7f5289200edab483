//! Clients that try to run the broker out of memory or connections: fetches never read, slow
//! consumers, frames sent half-way, floods of idle sockets. Each test runs a real `sluice serve`
//! on loopback with a small `--memory-limit`, watches the process's resident memory while the
//! attack runs, and checks that a normal kcat round trip still works meanwhile.
//!
//! Attackers connect from 127.0.0.2 and the normal client from 127.0.0.1 (both loopback), as a
//! misbehaving host and a healthy one would.

mod common;

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use bytes::BytesMut;
use common::{Server, have_kcat, kcat};
use sluice_protocol::codec;
use sluice_protocol::kafka_protocol::messages::fetch_request::{FetchPartition, FetchTopic};
use sluice_protocol::kafka_protocol::messages::{
    ApiKey, BrokerId, FetchRequest, RequestKind, TopicName,
};
use sluice_protocol::kafka_protocol::protocol::StrBytes;

const MIB: u64 = 1 << 20;

/// The address attackers connect from.
const ATTACKER_IP: [u8; 4] = [127, 0, 0, 2];

/// The server's resident memory now, in bytes.
fn rss_bytes(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("proc status");
    let kib: u64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|v| v.parse().ok())
        .expect("VmRSS");
    kib * 1024
}

/// Samples a process's resident memory every 20 ms until dropped; remembers the peak.
struct RssWatch {
    peak: Arc<AtomicU64>,
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl RssWatch {
    fn start(pid: u32) -> RssWatch {
        let peak = Arc::new(AtomicU64::new(0));
        let stop = Arc::new(AtomicBool::new(false));
        let thread = std::thread::spawn({
            let (peak, stop) = (Arc::clone(&peak), Arc::clone(&stop));
            move || {
                while !stop.load(Ordering::Relaxed) {
                    peak.fetch_max(rss_bytes(pid), Ordering::Relaxed);
                    std::thread::sleep(Duration::from_millis(20));
                }
            }
        });
        RssWatch {
            peak,
            stop,
            thread: Some(thread),
        }
    }

    fn peak(&self) -> u64 {
        self.peak.load(Ordering::Relaxed)
    }
}

impl Drop for RssWatch {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// A TCP connection to `server`'s Kafka listener from the attacker's address.
fn connect_from_attacker(server: &Server) -> TcpStream {
    connect_from_attacker_to(server.port)
}

/// A TCP connection to 127.0.0.1:`port` from the attacker's address.
fn connect_from_attacker_to(port: u16) -> TcpStream {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_io()
        .build()
        .unwrap();
    runtime.block_on(async {
        let socket = tokio::net::TcpSocket::new_v4().unwrap();
        socket
            .bind(SocketAddr::from((ATTACKER_IP, 0)))
            .expect("bind 127.0.0.2 (loopback)");
        let stream = socket
            .connect(SocketAddr::from(([127, 0, 0, 1], port)))
            .await
            .expect("connect");
        let stream = stream.into_std().unwrap();
        stream.set_nonblocking(false).unwrap();
        stream
    })
}

/// One Fetch v12 frame for `topic` partition 0 from offset 0, asking for `max_bytes` in all
/// (0: whatever the broker allows) and everything the partition has.
fn fetch_frame(topic: &str, max_bytes: i32, correlation_id: i32) -> Vec<u8> {
    let request = FetchRequest::default()
        .with_replica_id(BrokerId(-1))
        .with_max_wait_ms(100)
        .with_min_bytes(1)
        .with_max_bytes(max_bytes)
        .with_topics(vec![
            FetchTopic::default()
                .with_topic(TopicName(StrBytes::from_string(topic.to_owned())))
                .with_partitions(vec![
                    FetchPartition::default()
                        .with_partition(0)
                        .with_fetch_offset(0)
                        .with_partition_max_bytes(i32::MAX),
                ]),
        ]);
    let mut out = BytesMut::new();
    codec::encode_request(
        &mut out,
        ApiKey::Fetch,
        12,
        correlation_id,
        "attacker",
        &RequestKind::Fetch(request),
    )
    .unwrap();
    out.to_vec()
}

/// Fills `topic` with about `bytes` of 100 KiB records (kcat, one record per line).
fn fill(server: &Server, topic: &str, bytes: u64) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("records");
    let line = "x".repeat(100 << 10);
    let mut file = std::fs::File::create(&path).unwrap();
    for _ in 0..bytes / (100 << 10) {
        writeln!(file, "{line}").unwrap();
    }
    drop(file);
    let bootstrap = server.bootstrap();
    kcat(
        &[
            "-P",
            "-b",
            &bootstrap,
            "-t",
            topic,
            "-l",
            path.to_str().unwrap(),
        ],
        "",
    );
}

/// Creates a topic, produces one record to it over HTTP and one with kcat, and reads both back with
/// kcat, all from 127.0.0.1; returns how long that took.
fn kcat_round_trip(server: &Server, topic: &str) -> Duration {
    let started = Instant::now();
    server.ok(&["topic", "create", topic], "");
    let response = reqwest::blocking::Client::new()
        .post(format!("{}/topics/{topic}/records", server.http_url()))
        .body(r#"{"value": "over http"}"#)
        .header("content-type", "application/json")
        .timeout(Duration::from_secs(20))
        .send()
        .expect("HTTP produce");
    assert!(
        response.status().is_success(),
        "HTTP produce: {}",
        response.status()
    );
    let bootstrap = server.bootstrap();
    kcat(
        &[
            "-P",
            "-b",
            &bootstrap,
            "-t",
            topic,
            "-X",
            "message.timeout.ms=20000",
        ],
        "still here\n",
    );
    let out = kcat(
        &[
            "-C",
            "-b",
            &bootstrap,
            "-t",
            topic,
            "-o",
            "beginning",
            "-c",
            "2",
            "-e",
            "-q",
        ],
        "",
    );
    assert_eq!(out.trim(), "over http\nstill here");
    started.elapsed()
}

fn limit_bytes(limit_mib: u64) -> u64 {
    limit_mib * MIB
}

#[test]
fn unread_fetches_and_slow_consumers_stay_within_the_memory_limit() {
    if !have_kcat() {
        eprintln!("kcat is not installed: skipping");
        return;
    }
    let limit_mib = 128;
    let server = Server::start_with_args(
        tempfile::tempdir().unwrap(),
        &[
            "--memory-limit",
            "128MiB",
            "--fetch-max-bytes",
            "16MiB",
            "--request-timeout-ms",
            "60000",
        ],
    );
    fill(&server, "big", 40 * MIB);
    let watch = RssWatch::start(server.pid());
    let before = rss_bytes(server.pid());

    // 12 connections that each pipeline 4 fetches of everything and never read a byte (on the
    // broker as it was, max_bytes 0 meant unlimited: 40 MiB per response, 1.9 GiB in all).
    let unread: Vec<TcpStream> = (0..12)
        .map(|c| {
            let mut s = connect_from_attacker(&server);
            for i in 0..4 {
                s.write_all(&fetch_frame("big", 0, c * 10 + i)).unwrap();
            }
            s
        })
        .collect();
    // 10 consumers that ask for 50 MB each and read 16 KiB every 20 ms.
    let stop = Arc::new(AtomicBool::new(false));
    let slow: Vec<_> = (0..10)
        .map(|c| {
            let mut s = connect_from_attacker(&server);
            let stop = Arc::clone(&stop);
            std::thread::spawn(move || {
                s.set_read_timeout(Some(Duration::from_millis(200)))
                    .unwrap();
                let mut buf = vec![0u8; 16 << 10];
                let mut correlation = 1000 + c * 1000;
                while !stop.load(Ordering::Relaxed) {
                    if s.write_all(&fetch_frame("big", 50_000_000, correlation))
                        .is_err()
                    {
                        return;
                    }
                    correlation += 1;
                    // Read a little, slowly; stop after a while and ask again.
                    for _ in 0..20 {
                        if stop.load(Ordering::Relaxed) {
                            return;
                        }
                        let _ = s.read(&mut buf);
                        std::thread::sleep(Duration::from_millis(20));
                    }
                }
            })
        })
        .collect();

    std::thread::sleep(Duration::from_secs(2));
    let round_trip = kcat_round_trip(&server, "probe");
    std::thread::sleep(Duration::from_secs(2));
    let used = server.metric("sluice_memory_used_bytes");
    stop.store(true, Ordering::Relaxed);
    for t in slow {
        t.join().unwrap();
    }
    let peak = watch.peak();
    drop(unread);
    eprintln!(
        "rss before {} MiB, peak {} MiB; budget used {} MiB; kcat round trip {round_trip:?}",
        before / MIB,
        peak / MIB,
        used as u64 / MIB
    );
    assert!(
        round_trip < Duration::from_secs(15),
        "a normal client waited {round_trip:?}"
    );
    assert!(used as u64 <= limit_bytes(limit_mib), "budget used {used}");
    assert!(
        peak <= limit_bytes(limit_mib) * 3 / 2,
        "peak RSS {} MiB is over 1.5 x the {limit_mib} MiB memory limit",
        peak / MIB
    );
}

#[test]
fn half_sent_frames_stay_within_the_memory_limit_and_time_out() {
    if !have_kcat() {
        eprintln!("kcat is not installed: skipping");
        return;
    }
    let limit_mib = 128;
    let timeout = Duration::from_secs(12);
    let mut server = Server::start_with_args(
        tempfile::tempdir().unwrap(),
        &[
            "--memory-limit",
            "128MiB",
            "--request-timeout-ms",
            &timeout.as_millis().to_string(),
        ],
    );
    let watch = RssWatch::start(server.pid());
    let started = Instant::now();
    // 16 connections that each declare a 30 MiB Produce request, send 27 MiB of it, and go
    // silent (on the broker as it was: 432 MiB held, for ever).
    let frame_bytes: usize = 30 << 20;
    let stop = Arc::new(AtomicBool::new(false));
    let attackers: Vec<_> = (0..16)
        .map(|_| {
            let mut s = connect_from_attacker(&server);
            let stop = Arc::clone(&stop);
            std::thread::spawn(move || {
                s.set_write_timeout(Some(Duration::from_millis(500)))
                    .unwrap();
                let mut head = (frame_bytes as i32).to_be_bytes().to_vec();
                head.extend_from_slice(&0i16.to_be_bytes()); // Produce
                head.extend_from_slice(&9i16.to_be_bytes());
                let _ = s.write_all(&head);
                let chunk = vec![0u8; 1 << 20];
                let mut sent = 0;
                while sent < 27 && !stop.load(Ordering::Relaxed) {
                    // A blocked write (the broker stopped reading: back-pressure) is retried
                    // until the test ends.
                    if s.write_all(&chunk).is_ok() {
                        sent += 1;
                    }
                }
                while !stop.load(Ordering::Relaxed) {
                    std::thread::sleep(Duration::from_millis(50));
                }
            })
        })
        .collect();
    std::thread::sleep(Duration::from_secs(2));

    // While they hang on, a normal client still gets through.
    let round_trip = kcat_round_trip(&server, "probe");
    assert!(
        started.elapsed() < timeout,
        "the round trip should run while the attack does; increase the timeout"
    );
    let peak_during = watch.peak();

    // The ones the broker was reading are closed once the request timeout passes.
    let deadline = Instant::now() + timeout * 3;
    let closed = loop {
        let closed =
            server.metric("sluice_kafka_connections_closed_total{reason=\"request_timeout\"}");
        if closed >= 1.0 || Instant::now() > deadline {
            break closed;
        }
        std::thread::sleep(Duration::from_millis(200));
    };
    stop.store(true, Ordering::Relaxed);
    for t in attackers {
        t.join().unwrap();
    }
    eprintln!(
        "peak RSS {} MiB, kcat round trip {round_trip:?}, closed for request timeout: {closed}",
        watch.peak() / MIB
    );
    assert!(
        closed >= 1.0,
        "no connection closed for its request timeout"
    );
    assert!(
        peak_during <= limit_bytes(limit_mib) * 3 / 2
            && watch.peak() <= limit_bytes(limit_mib) * 3 / 2,
        "peak RSS {} MiB is over 1.5 x the {limit_mib} MiB memory limit",
        watch.peak() / MIB
    );
    assert!(server.is_running());
    assert_eq!(
        server
            .log_lines_with("a request was not received whole")
            .len()
            .min(1),
        1
    );
}

#[test]
fn connections_are_capped_per_ip_refusals_are_logged_sparingly_and_idle_ones_close() {
    if !have_kcat() {
        eprintln!("kcat is not installed: skipping");
        return;
    }
    let idle = Duration::from_secs(6);
    let mut server = Server::start_with_args(
        tempfile::tempdir().unwrap(),
        &[
            "--max-connections",
            "400",
            "--max-connections-per-ip",
            "100",
            "--connections-max-idle-ms",
            &idle.as_millis().to_string(),
        ],
    );
    // 300 idle sockets from one address: 100 are kept, the rest closed at once.
    let opened = Instant::now();
    let sockets: Vec<TcpStream> = (0..300).map(|_| connect_from_attacker(&server)).collect();
    let mut refused = 0;
    for s in &sockets {
        s.set_read_timeout(Some(Duration::from_millis(5))).unwrap();
        let mut byte = [0u8; 1];
        match (&*s).read(&mut byte) {
            Ok(0) => refused += 1,
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => refused += 1,
            _ => {}
        }
    }
    // A normal client from another address is not affected.
    let round_trip = kcat_round_trip(&server, "probe");
    assert!(round_trip < Duration::from_secs(10), "{round_trip:?}");
    assert!(
        opened.elapsed() < idle,
        "the checks above took longer than the idle timeout"
    );
    assert_eq!(
        refused, 200,
        "connections over max_connections_per_ip are closed"
    );
    let lines = server.log_lines_with("refusing connection");
    assert!(
        (1..=3).contains(&lines.len()),
        "refusals are logged at most once per few seconds, got {} lines",
        lines.len()
    );
    assert_eq!(
        server.metric("sluice_kafka_connections_closed_total{reason=\"refused\"}"),
        200.0
    );

    // The 100 kept ones are closed once idle for connections_max_idle_ms.
    let deadline = Instant::now() + idle * 3;
    let kept: Vec<&TcpStream> = sockets.iter().collect();
    let mut closed = 0;
    for s in kept {
        s.set_read_timeout(Some(
            deadline.saturating_duration_since(Instant::now()) + Duration::from_millis(1),
        ))
        .unwrap();
        let mut byte = [0u8; 1];
        match (&*s).read(&mut byte) {
            Ok(0) => closed += 1,
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => closed += 1,
            _ => {}
        }
    }
    assert_eq!(closed, 300, "every socket is closed by now");
    let idle_closed = server.metric("sluice_kafka_connections_closed_total{reason=\"idle\"}");
    assert!(idle_closed >= 100.0, "idle closes: {idle_closed}");
    assert!(server.is_running());
}

/// One Produce v9 frame (acks=all) carrying `batch` for `topic`'s partition `partition`.
fn produce_frame(
    topic: &str,
    partition: i32,
    batch: &bytes::Bytes,
    correlation_id: i32,
) -> Vec<u8> {
    use sluice_protocol::kafka_protocol::messages::ProduceRequest;
    use sluice_protocol::kafka_protocol::messages::produce_request::{
        PartitionProduceData, TopicProduceData,
    };
    let request = ProduceRequest::default()
        .with_acks(-1)
        .with_timeout_ms(30_000)
        .with_topic_data(vec![
            TopicProduceData::default()
                .with_name(TopicName(StrBytes::from_string(topic.to_owned())))
                .with_partition_data(vec![
                    PartitionProduceData::default()
                        .with_index(partition)
                        .with_records(Some(batch.clone())),
                ]),
        ]);
    let mut out = BytesMut::new();
    codec::encode_request(
        &mut out,
        ApiKey::Produce,
        9,
        correlation_id,
        "load",
        &RequestKind::Produce(request),
    )
    .unwrap();
    out.to_vec()
}

/// Reads one response frame (size prefix and body) from `s`.
fn read_frame(s: &mut TcpStream) -> std::io::Result<Vec<u8>> {
    let mut size = [0u8; 4];
    s.read_exact(&mut size)?;
    let mut body = vec![0u8; i32::from_be_bytes(size).max(0) as usize];
    s.read_exact(&mut body)?;
    Ok(body)
}

#[test]
fn a_new_client_is_answered_at_once_while_producers_saturate_the_broker() {
    use sluice_protocol::kafka_protocol::messages::{ApiVersionsRequest, MetadataRequest};
    use sluice_protocol::records::{ProducerRecord, encode_batch};

    let server =
        Server::start_with_args(tempfile::tempdir().unwrap(), &["--memory-limit", "64MiB"]);
    server.ok(&["topic", "create", "load", "--partitions", "4"], "");
    // 64 records of 4 KiB: a 256 KiB batch.
    let mut batch = BytesMut::new();
    let record = ProducerRecord {
        key: None,
        value: Some(bytes::Bytes::from(vec![b'v'; 4096])),
        headers: Vec::new(),
        timestamp_ms: 0,
    };
    encode_batch(&mut batch, &vec![record; 64]);
    let batch = batch.freeze();

    // 200 producers from the attacker's address, each keeping 4 requests in flight.
    let stop = Arc::new(AtomicBool::new(false));
    let acknowledged = Arc::new(AtomicU64::new(0));
    let producers: Vec<_> = (0..200)
        .map(|p| {
            let mut s = connect_from_attacker(&server);
            let (stop, acknowledged, batch) =
                (Arc::clone(&stop), Arc::clone(&acknowledged), batch.clone());
            std::thread::spawn(move || {
                s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
                // Encoded once; only the correlation id (bytes 8..12) changes.
                let mut frame = produce_frame("load", p % 4, &batch, 0);
                let mut correlation = 0i32;
                let mut send = |s: &mut TcpStream| {
                    correlation += 1;
                    frame[8..12].copy_from_slice(&correlation.to_be_bytes());
                    s.write_all(&frame)
                };
                for _ in 0..4 {
                    if send(&mut s).is_err() {
                        return;
                    }
                }
                while !stop.load(Ordering::Relaxed) {
                    if read_frame(&mut s).is_err() || send(&mut s).is_err() {
                        return;
                    }
                    acknowledged.fetch_add(1, Ordering::Relaxed);
                }
            })
        })
        .collect();
    std::thread::sleep(Duration::from_secs(3));

    // A new client: connect, ApiVersions, Metadata, as every client starts.
    let mut waits = Vec::new();
    for i in 0..10 {
        let started = Instant::now();
        let mut s = TcpStream::connect(("127.0.0.1", server.port)).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
        let mut out = BytesMut::new();
        codec::encode_request(
            &mut out,
            ApiKey::ApiVersions,
            3,
            i,
            "probe",
            &RequestKind::ApiVersions(
                ApiVersionsRequest::default()
                    .with_client_software_name(StrBytes::from_static_str("probe"))
                    .with_client_software_version(StrBytes::from_static_str("1")),
            ),
        )
        .unwrap();
        codec::encode_request(
            &mut out,
            ApiKey::Metadata,
            12,
            i + 100,
            "probe",
            &RequestKind::Metadata(MetadataRequest::default()),
        )
        .unwrap();
        s.write_all(&out).unwrap();
        read_frame(&mut s).expect("ApiVersions response");
        read_frame(&mut s).expect("Metadata response");
        waits.push(started.elapsed());
        std::thread::sleep(Duration::from_millis(200));
    }
    let during = acknowledged.load(Ordering::Relaxed);
    stop.store(true, Ordering::Relaxed);
    for p in producers {
        p.join().unwrap();
    }
    waits.sort();
    eprintln!(
        "new-client waits (ApiVersions + Metadata): min {:?}, median {:?}, max {:?}; {during} produce requests acknowledged meanwhile",
        waits[0],
        waits[waits.len() / 2],
        waits[waits.len() - 1]
    );
    assert!(during > 0, "the producers made no progress");
    assert!(
        waits[waits.len() - 1] < Duration::from_millis(500),
        "a new client waited {:?} to be answered",
        waits[waits.len() - 1]
    );
}

#[test]
fn http_bodies_come_out_of_the_memory_budget() {
    let limit_mib = 64;
    let server = Server::start_with_args(
        tempfile::tempdir().unwrap(),
        &[
            "--memory-limit",
            "64MiB",
            "--http-body-read-timeout-ms",
            "20000",
        ],
    );
    server.ok(&["topic", "create", "probe"], "");
    let watch = RssWatch::start(server.pid());
    // Uploads from one address that declare 15 MiB each and send 8 MiB of it: two fit in that
    // address's half of the budget; the rest are answered 503 before their bodies are read.
    let body_bytes = 15 << 20;
    let mut stalled = Vec::new();
    let mut refused = 0;
    for _ in 0..6 {
        let mut s = connect_from_attacker_to(server.http_port);
        let head = format!(
            "POST /topics/probe/records HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\ncontent-length: {body_bytes}\r\n\r\n"
        );
        s.write_all(head.as_bytes()).unwrap();
        s.set_read_timeout(Some(Duration::from_millis(300)))
            .unwrap();
        let mut answer = [0u8; 12];
        match s.read(&mut answer) {
            Ok(n) if n > 0 => {
                let status = String::from_utf8_lossy(&answer[..n]).into_owned();
                assert!(status.contains("503"), "{status}");
                refused += 1;
            }
            _ => {
                s.write_all(&vec![b'x'; 8 << 20]).unwrap();
                stalled.push(s);
            }
        }
    }
    // A normal produce from another address still gets through.
    let response = reqwest::blocking::Client::new()
        .post(format!("{}/topics/probe/records", server.http_url()))
        .body(r#"{"value": "fine"}"#)
        .header("content-type", "application/json")
        .timeout(Duration::from_secs(10))
        .send()
        .unwrap();
    assert!(response.status().is_success(), "{}", response.status());
    let used = server.metric("sluice_memory_used_bytes");
    drop(stalled);
    eprintln!(
        "stalled {}, refused {refused}, budget used {} MiB, peak RSS {} MiB",
        6 - refused,
        used as u64 / MIB,
        watch.peak() / MIB
    );
    assert_eq!(
        refused, 4,
        "two 15 MiB bodies fill one address's 32 MiB share"
    );
    assert!(used as u64 <= limit_bytes(limit_mib));
    assert!(watch.peak() <= limit_bytes(limit_mib) * 3 / 2);
}
