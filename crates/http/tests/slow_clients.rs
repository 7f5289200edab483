//! Slow and greedy clients against the in-process HTTP API: stalled and trickling bodies (408,
//! the request slot freed), slow heads (closed), idle keep-alive connections (closed, long polls
//! not), responses the client never reads (closed), the connection cap (refused), and shutdown
//! with such connections open. Raw TCP on 127.0.0.1, small timeouts, every wait bounded.

mod common;

use std::time::{Duration, Instant};

use common::Api;
use sluice_http::HttpConfig;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// Upper bound on any one wait in these tests.
const PATIENCE: Duration = Duration::from_secs(10);

async fn connect(api: &Api) -> TcpStream {
    let addr = api.url.trim_start_matches("http://");
    TcpStream::connect(addr).await.unwrap()
}

/// Reads until the server closes the connection (or resets it); what arrived, and when the
/// connection ended. Panics after [`PATIENCE`].
async fn read_to_close(stream: &mut TcpStream) -> (String, Instant) {
    let mut got = Vec::new();
    let mut buf = [0u8; 8192];
    let deadline = Instant::now() + PATIENCE;
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        match tokio::time::timeout(left, stream.read(&mut buf)).await {
            Ok(Ok(0)) | Ok(Err(_)) => {
                return (String::from_utf8_lossy(&got).into(), Instant::now());
            }
            Ok(Ok(n)) => got.extend_from_slice(&buf[..n]),
            Err(_) => panic!(
                "the server did not close the connection within {PATIENCE:?}; got {:?}",
                String::from_utf8_lossy(&got)
            ),
        }
    }
}

/// Reads one whole response with a `Content-Length` (head and body) off a kept-alive
/// connection.
async fn read_response(stream: &mut TcpStream) -> String {
    let mut got = Vec::new();
    let mut buf = [0u8; 8192];
    loop {
        let text = String::from_utf8_lossy(&got).into_owned();
        if let Some(head_end) = text.find("\r\n\r\n") {
            let length: usize = text[..head_end]
                .lines()
                .find_map(|l| {
                    let (name, value) = l.split_once(':')?;
                    name.eq_ignore_ascii_case("content-length")
                        .then(|| value.trim().parse().ok())?
                })
                .expect("content-length");
            if got.len() >= head_end + 4 + length {
                return text;
            }
        }
        let n = tokio::time::timeout(PATIENCE, stream.read(&mut buf))
            .await
            .expect("a response in time")
            .unwrap();
        assert!(n > 0, "closed before the whole response: {text:?}");
        got.extend_from_slice(&buf[..n]);
    }
}

/// True when the server has closed `stream` (EOF or reset) within `wait`.
async fn closed_within(stream: &mut TcpStream, wait: Duration) -> bool {
    let mut buf = [0u8; 1024];
    let deadline = Instant::now() + wait;
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        match tokio::time::timeout(left, stream.read(&mut buf)).await {
            Ok(Ok(0)) | Ok(Err(_)) => return true,
            Ok(Ok(_)) => continue,
            Err(_) => return false,
        }
    }
}

fn config(tune: impl FnOnce(&mut HttpConfig)) -> HttpConfig {
    let mut c = HttpConfig::default();
    tune(&mut c);
    c
}

/// The head of a JSON produce to `topic` whose body is `length` bytes.
fn produce_head(topic: &str, length: usize) -> String {
    format!(
        "POST /topics/{topic}/records HTTP/1.1\r\nhost: test\r\ncontent-type: application/json\r\ncontent-length: {length}\r\n\r\n"
    )
}

async fn produce_ok(api: &Api, topic: &str) -> reqwest::StatusCode {
    api.client
        .post(api.at(&format!("/topics/{topic}/records")))
        .body(r#"{"value": "normal"}"#)
        .send()
        .await
        .unwrap()
        .status()
}

/// Waits until `check` holds, polling; panics after [`PATIENCE`].
async fn eventually(what: &str, mut check: impl FnMut() -> bool) {
    let deadline = Instant::now() + PATIENCE;
    while !check() {
        assert!(Instant::now() < deadline, "timed out waiting: {what}");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stalled_bodies_get_408_and_give_their_slots_back() {
    let api = Api::start_with(
        config(|c| {
            c.max_concurrent_requests = 4;
            c.body_read_timeout_ms = 600;
        }),
        Vec::new(),
        |_| {},
    )
    .await;
    api.create_topic("t", 1);

    // Six stalled produces: head and one body byte, then nothing.
    let started = Instant::now();
    let mut stalled = Vec::new();
    for _ in 0..6 {
        let mut s = connect(&api).await;
        s.write_all(produce_head("t", 100).as_bytes())
            .await
            .unwrap();
        s.write_all(b"[").await.unwrap();
        stalled.push(s);
    }
    // They hold every slot: a normal request is turned away meanwhile.
    eventually("four slots held", || api.state.limits.in_flight() == 4).await;
    assert_eq!(produce_ok(&api, "t").await, 429);

    let mut timed_out = 0;
    let mut too_many = 0;
    for s in &mut stalled {
        let (answer, closed_at) = read_to_close(s).await;
        if answer.starts_with("HTTP/1.1 408") {
            timed_out += 1;
            let waited = closed_at - started;
            assert!(
                waited >= Duration::from_millis(500) && waited < Duration::from_secs(5),
                "408 after {waited:?}"
            );
            assert!(
                answer.to_ascii_lowercase().contains("connection: close"),
                "{answer}"
            );
            let body = &answer[answer.find("\r\n\r\n").unwrap() + 4..];
            let json: serde_json::Value = serde_json::from_str(body).unwrap();
            let error = json["error"].as_str().unwrap();
            assert!(error.contains("body_read_timeout_ms"), "{error}");
        } else {
            assert!(answer.starts_with("HTTP/1.1 429"), "{answer}");
            too_many += 1;
        }
    }
    assert_eq!((timed_out, too_many), (4, 2));
    // The slots are free again, and a normal produce goes through.
    assert_eq!(api.state.limits.in_flight(), 0);
    assert_eq!(produce_ok(&api, "t").await, 200);
    let metrics = &api.state.metrics;
    assert_eq!(metrics.connections_closed("body_timeout"), 4);
    api.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_trickling_body_is_cut_off_at_the_whole_body_deadline() {
    let api = Api::start_with(config(|c| c.body_read_timeout_ms = 700), Vec::new(), |_| {}).await;
    api.create_topic("t", 1);
    let mut s = connect(&api).await;
    let body = format!(r#"{{"value": "{}"}}"#, "x".repeat(200));
    s.write_all(produce_head("t", body.len()).as_bytes())
        .await
        .unwrap();
    // One byte every 50 ms: never a long pause, but the whole body would take 10 s.
    let started = Instant::now();
    let mut sent = 0;
    let answer = loop {
        if s.write_all(&body.as_bytes()[sent..sent + 1]).await.is_err() {
            break read_to_close(&mut s).await.0;
        }
        sent += 1;
        let mut buf = [0u8; 4096];
        match tokio::time::timeout(Duration::from_millis(50), s.read(&mut buf)).await {
            Ok(Ok(n)) => {
                let mut answer = String::from_utf8_lossy(&buf[..n]).into_owned();
                answer.push_str(&read_to_close(&mut s).await.0);
                break answer;
            }
            Ok(Err(_)) => break String::new(),
            Err(_) => assert!(started.elapsed() < PATIENCE, "no answer"),
        }
    };
    let waited = started.elapsed();
    assert!(answer.starts_with("HTTP/1.1 408"), "{answer}");
    assert!(
        waited >= Duration::from_millis(600) && waited < Duration::from_secs(4),
        "408 after {waited:?}"
    );
    assert!(sent < body.len());
    assert_eq!(api.state.limits.in_flight(), 0);
    api.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_body_that_arrives_in_time_is_served() {
    let api = Api::start_with(
        config(|c| c.body_read_timeout_ms = 3_000),
        Vec::new(),
        |_| {},
    )
    .await;
    api.create_topic("t", 1);
    let mut s = connect(&api).await;
    let body = r#"[{"value": "slow"}, {"value": "but in time"}]"#;
    s.write_all(produce_head("t", body.len()).as_bytes())
        .await
        .unwrap();
    for piece in body.as_bytes().chunks(16) {
        tokio::time::sleep(Duration::from_millis(150)).await;
        s.write_all(piece).await.unwrap();
    }
    let answer = read_response(&mut s).await;
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    api.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_head_is_closed_after_the_header_timeout() {
    let api = Api::start_with(
        config(|c| {
            c.header_read_timeout_ms = 600;
            c.idle_timeout_ms = 60_000;
        }),
        Vec::new(),
        |_| {},
    )
    .await;
    // A slowloris: the head one byte every 100 ms (it would need ~4 s).
    let head = b"GET /healthz HTTP/1.1\r\nhost: test\r\nx-padding: aaaaaaaaaa\r\n\r\n";
    let mut slow = connect(&api).await;
    // And a connection that sends nothing at all.
    let mut silent = connect(&api).await;
    let started = Instant::now();
    let mut closed_at = None;
    for byte in head.iter() {
        if slow.write_all(&[*byte]).await.is_err()
            || closed_within(&mut slow, Duration::from_millis(100)).await
        {
            closed_at = Some(started.elapsed());
            break;
        }
        // Normal requests are served meanwhile.
        let status = api
            .client
            .get(api.at("/topics"))
            .send()
            .await
            .unwrap()
            .status();
        assert_eq!(status, 200);
    }
    let closed_at = closed_at.expect("the slow head was never closed");
    assert!(
        closed_at >= Duration::from_millis(500) && closed_at < Duration::from_secs(3),
        "closed after {closed_at:?}"
    );
    assert!(closed_within(&mut silent, Duration::from_secs(3)).await);
    assert!(api.state.metrics.connections_closed("header_timeout") >= 2);
    api.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idle_connections_close_after_the_idle_timeout_and_long_polls_do_not() {
    let api = Api::start_with(
        config(|c| {
            c.header_read_timeout_ms = 300;
            c.idle_timeout_ms = 900;
        }),
        Vec::new(),
        |_| {},
    )
    .await;
    api.create_topic("t", 1);

    // A kept-alive connection after one request: open past the header timeout, closed at the
    // idle timeout.
    let mut idle = connect(&api).await;
    idle.write_all(b"GET /healthz HTTP/1.1\r\nhost: test\r\n\r\n")
        .await
        .unwrap();
    assert!(read_response(&mut idle).await.starts_with("HTTP/1.1 200"));
    let answered = Instant::now();

    // A long poll longer than both timeouts is answered, not cut off.
    let mut poll = connect(&api).await;
    poll.write_all(
        b"GET /topics/t/partitions/0/records?offset=0&timeout_ms=1500 HTTP/1.1\r\nhost: test\r\n\r\n",
    )
    .await
    .unwrap();
    let poll_started = Instant::now();

    assert!(!closed_within(&mut idle, Duration::from_millis(500)).await);
    assert!(closed_within(&mut idle, Duration::from_secs(3)).await);
    let idle_for = answered.elapsed();
    assert!(
        idle_for >= Duration::from_millis(500) && idle_for < Duration::from_secs(3),
        "closed after {idle_for:?} idle"
    );

    let answer = read_response(&mut poll).await;
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    assert!(poll_started.elapsed() >= Duration::from_millis(1400));
    // Then it is idle, and closed in turn.
    assert!(closed_within(&mut poll, Duration::from_secs(3)).await);
    assert!(api.state.metrics.connections_closed("idle") >= 2);
    assert_eq!(api.state.metrics.connections_closed("header_timeout"), 0);
    api.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_response_never_read_closes_its_connection_and_frees_its_slot() {
    let api = Api::start_with(config(|c| c.body_read_timeout_ms = 800), Vec::new(), |_| {}).await;
    api.create_topic("big", 1);
    // ~12 MiB of records, more than the socket buffers of both ends hold.
    let value = vec![b'v'; 9_000];
    let mut body = Vec::new();
    body.extend_from_slice(&100u32.to_be_bytes());
    for _ in 0..100 {
        body.extend_from_slice(&(value.len() as u32).to_be_bytes());
    }
    for _ in 0..100 {
        body.extend_from_slice(&value);
    }
    for _ in 0..14 {
        let status = api
            .client
            .post(api.at("/topics/big/records?partition=0"))
            .header("content-type", "application/x-sluice-batch")
            .body(body.clone())
            .send()
            .await
            .unwrap()
            .status();
        assert_eq!(status, 200);
    }
    let socket = tokio::net::TcpSocket::new_v4().unwrap();
    socket.set_recv_buffer_size(4096).unwrap();
    let mut s = socket
        .connect(api.url.trim_start_matches("http://").parse().unwrap())
        .await
        .unwrap();
    s.write_all(
        b"GET /topics/big/partitions/0/records?offset=0&max_records=100000&max_bytes=67108864 HTTP/1.1\r\nhost: test\r\naccept: application/x-sluice-batch\r\n\r\n",
    )
    .await
    .unwrap();
    // Never read. The slot is freed once the server has handed the whole answer to the
    // connection (it does not wait for the client), and the connection, whose writes make no
    // progress, is closed after the stall limit.
    let started = Instant::now();
    eventually("the slot is free", || api.state.limits.in_flight() == 0).await;
    let metrics = &api.state.metrics;
    eventually("the stalled connection is closed", || {
        metrics.connections_closed("write_stalled") == 1
    })
    .await;
    let waited = started.elapsed();
    assert!(
        waited >= Duration::from_millis(400) && waited < Duration::from_secs(5),
        "closed after {waited:?}"
    );
    drop(s);
    api.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connections_over_the_cap_are_refused_and_service_resumes() {
    let api = Api::start_with(config(|c| c.max_connections = 3), Vec::new(), |_| {}).await;
    let mut held = Vec::new();
    for _ in 0..3 {
        let mut s = connect(&api).await;
        s.write_all(b"GET /healthz HTTP/1.1\r\nhost: test\r\n\r\n")
            .await
            .unwrap();
        assert!(read_response(&mut s).await.starts_with("HTTP/1.1 200"));
        held.push(s);
    }
    for _ in 0..5 {
        let mut extra = connect(&api).await;
        assert!(
            closed_within(&mut extra, Duration::from_secs(2)).await,
            "a connection over the cap was kept"
        );
    }
    assert_eq!(api.state.metrics.connections_closed("refused"), 5);
    // The held connections still work.
    held[0]
        .write_all(b"GET /healthz HTTP/1.1\r\nhost: test\r\n\r\n")
        .await
        .unwrap();
    assert!(
        read_response(&mut held[0])
            .await
            .starts_with("HTTP/1.1 200")
    );
    drop(held);
    let deadline = Instant::now() + PATIENCE;
    loop {
        match api.client.get(api.at("/healthz")).send().await {
            Ok(r) if r.status() == 200 => break,
            _ => {
                assert!(Instant::now() < deadline, "service did not resume");
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        }
    }
    api.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_finishes_long_polls_and_closes_idle_and_slow_connections() {
    let api = Api::start_with(
        config(|c| {
            c.header_read_timeout_ms = 800;
            c.body_read_timeout_ms = 800;
        }),
        Vec::new(),
        |_| {},
    )
    .await;
    api.create_topic("t", 1);
    let mut idle = connect(&api).await;
    idle.write_all(b"GET /healthz HTTP/1.1\r\nhost: test\r\n\r\n")
        .await
        .unwrap();
    read_response(&mut idle).await;
    let mut poll = connect(&api).await;
    poll.write_all(
        b"GET /topics/t/partitions/0/records?offset=0&timeout_ms=20000 HTTP/1.1\r\nhost: test\r\n\r\n",
    )
    .await
    .unwrap();
    let mut half_head = connect(&api).await;
    half_head
        .write_all(b"GET /healthz HTTP/1.1\r\nho")
        .await
        .unwrap();
    let mut stalled = connect(&api).await;
    stalled
        .write_all(produce_head("t", 100).as_bytes())
        .await
        .unwrap();
    stalled.write_all(b"[").await.unwrap();
    eventually("both requests in flight", || {
        api.state.limits.in_flight() == 2
    })
    .await;

    let started = Instant::now();
    tokio::time::timeout(Duration::from_secs(5), api.stop())
        .await
        .expect("shutdown finished in time");
    assert!(started.elapsed() < Duration::from_secs(3));
    // The long poll was answered early, with no records.
    let answer = read_response(&mut poll).await;
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    assert!(closed_within(&mut idle, Duration::from_secs(1)).await);
    assert!(closed_within(&mut half_head, Duration::from_secs(1)).await);
    assert!(closed_within(&mut stalled, Duration::from_secs(1)).await);
}
