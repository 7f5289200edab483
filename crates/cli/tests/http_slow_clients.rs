//! Black-box: slow and greedy HTTP clients against a real `sluice serve` cannot take the HTTP
//! API hostage. Stalled bodies lose their request slots at the body-read timeout, a slowloris
//! is closed at the header-read timeout, and connections over `--http-max-connections` are
//! refused with a rate-limited log line; normal requests succeed in bounded time throughout.
//! All traffic goes to 127.0.0.1; every wait is bounded.

mod common;

use std::io::{BufRead, BufReader, ErrorKind, Read, Write};
use std::net::TcpStream;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::Server;

/// Upper bound on any one wait in these tests.
const PATIENCE: Duration = Duration::from_secs(15);

fn connect(port: u16) -> TcpStream {
    let s = TcpStream::connect(("127.0.0.1", port)).unwrap();
    s.set_nodelay(true).unwrap();
    s
}

fn client() -> reqwest::blocking::Client {
    reqwest::blocking::Client::builder()
        .timeout(Duration::from_secs(5))
        .build()
        .unwrap()
}

fn create_topic(url: &str, name: &str) {
    let status = client()
        .post(format!("{url}/topics"))
        .body(format!(r#"{{"name": "{name}", "partitions": 1}}"#))
        .send()
        .unwrap()
        .status();
    assert_eq!(status, 201);
}

/// A normal produce and a normal read, retried on 429 (or a refused connection) until both
/// succeed; how long that took. Panics after `within`.
fn produce_and_read(url: &str, topic: &str, within: Duration) -> Duration {
    let started = Instant::now();
    let client = client();
    let retry = |what: &str, send: &dyn Fn() -> reqwest::Result<reqwest::blocking::Response>| loop {
        match send() {
            Ok(r) if r.status().is_success() => return r.text().unwrap(),
            Ok(r) if r.status() == 429 => {}
            Ok(r) => panic!("{what}: {} {}", r.status(), r.text().unwrap_or_default()),
            Err(e) if e.is_connect() || e.is_request() || e.is_timeout() => {}
            Err(e) => panic!("{what}: {e}"),
        }
        assert!(
            started.elapsed() < within,
            "{what} did not succeed within {within:?}"
        );
        std::thread::sleep(Duration::from_millis(50));
    };
    retry("produce", &|| {
        client
            .post(format!("{url}/topics/{topic}/records"))
            .body(r#"{"value": "normal"}"#)
            .send()
    });
    let answer = retry("read", &|| {
        client
            .get(format!(
                "{url}/topics/{topic}/partitions/0/records?offset=0"
            ))
            .send()
    });
    assert!(answer.contains("normal"), "{answer}");
    started.elapsed()
}

/// What the server sent on `s` until it closed it (or `wait` passed: `None`).
fn read_to_close(s: &mut TcpStream, wait: Duration) -> Option<String> {
    let deadline = Instant::now() + wait;
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return None;
        }
        s.set_read_timeout(Some(left)).unwrap();
        match s.read(&mut buf) {
            Ok(0) => return Some(String::from_utf8_lossy(&got).into_owned()),
            Ok(n) => got.extend_from_slice(&buf[..n]),
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {
                return None;
            }
            Err(_) => return Some(String::from_utf8_lossy(&got).into_owned()),
        }
    }
}

/// True when the server has closed `s` (EOF or reset), without waiting.
fn is_closed(s: &TcpStream) -> bool {
    s.set_nonblocking(true).unwrap();
    let mut buf = [0u8; 1024];
    let closed = loop {
        match (&mut &*s).read(&mut buf) {
            Ok(0) => break true,
            Ok(_) => continue,
            Err(e) if e.kind() == ErrorKind::WouldBlock => break false,
            Err(_) => break true,
        }
    };
    s.set_nonblocking(false).unwrap();
    closed
}

#[test]
fn stalled_bodies_cannot_hold_the_request_slots() {
    let server = Server::start_with_args(
        tempfile::tempdir().unwrap(),
        &[
            "--http-body-read-timeout-ms",
            "1500",
            "--http-max-concurrent-requests",
            "64",
        ],
    );
    let url = server.http_url();
    create_topic(&url, "t");

    // More stalled produces than request slots: a whole head and one body byte, then silence.
    let attackers = 100;
    let started = Instant::now();
    let mut stalled: Vec<TcpStream> = (0..attackers)
        .map(|_| {
            let mut s = connect(server.http_port);
            s.write_all(
                b"POST /topics/t/records HTTP/1.1\r\nhost: test\r\ncontent-type: application/json\r\ncontent-length: 1000\r\n\r\n[",
            )
            .unwrap();
            s
        })
        .collect();

    // While they stall, normal requests still succeed within the body timeout and a margin.
    let took = produce_and_read(
        &url,
        "t",
        Duration::from_millis(1500) + Duration::from_secs(5),
    );
    eprintln!("normal produce and read succeeded {took:?} after the attack began");

    // Every stalled connection got an answer (408 for those that held a slot, 429 for the
    // rest) and was closed, within the timeout and a margin.
    let mut timed_out = 0;
    for s in &mut stalled {
        let answer = read_to_close(s, PATIENCE).expect("a stalled connection was never closed");
        if answer.starts_with("HTTP/1.1 408") {
            timed_out += 1;
            assert!(answer.contains("body_read_timeout_ms"), "{answer}");
        } else {
            assert!(answer.starts_with("HTTP/1.1 429"), "{answer:?}");
        }
    }
    assert!(started.elapsed() < Duration::from_secs(10));
    assert!(
        (1..=64).contains(&timed_out),
        "{timed_out} stalled requests got 408"
    );
    // And afterwards, at once.
    let took = produce_and_read(&url, "t", Duration::from_secs(2));
    assert!(took < Duration::from_secs(2));
    let metrics = client()
        .get(format!("{url}/metrics"))
        .send()
        .unwrap()
        .text()
        .unwrap();
    assert!(
        metrics.contains(&format!(
            "sluice_http_connections_closed_total{{reason=\"body_timeout\"}} {timed_out}\n"
        )),
        "{metrics}"
    );
}

#[test]
fn a_slowloris_is_closed_at_the_header_timeout() {
    let server = Server::start_with_args(
        tempfile::tempdir().unwrap(),
        &["--http-header-read-timeout-ms", "1000"],
    );
    let url = server.http_url();
    create_topic(&url, "t");
    let head = b"GET /healthz HTTP/1.1\r\nhost: test\r\nx-a: aaaaaaaaaaaaaaaaaaaaaaaa\r\n\r\n";
    let loris = 50;
    let mut socks: Vec<TcpStream> = (0..loris).map(|_| connect(server.http_port)).collect();
    let started = Instant::now();
    let mut closed_after: Vec<Option<Duration>> = vec![None; loris];
    // One byte per connection every 100 ms: the head would take ~6 s.
    for byte in head.iter() {
        for (i, s) in socks.iter_mut().enumerate() {
            if closed_after[i].is_some() {
                continue;
            }
            if s.write_all(&[*byte]).is_err() || is_closed(s) {
                closed_after[i] = Some(started.elapsed());
            }
        }
        if closed_after.iter().all(Option::is_some) {
            break;
        }
        // Normal requests keep working meanwhile.
        produce_and_read(&url, "t", Duration::from_secs(3));
        std::thread::sleep(Duration::from_millis(100));
    }
    for (i, closed) in closed_after.iter().enumerate() {
        let closed = closed.unwrap_or_else(|| panic!("slowloris {i} was never closed"));
        assert!(
            closed >= Duration::from_millis(800) && closed < Duration::from_secs(4),
            "slowloris {i} closed after {closed:?}"
        );
    }
    let metrics = client()
        .get(format!("{url}/metrics"))
        .send()
        .unwrap()
        .text()
        .unwrap();
    assert!(
        metrics.contains(&format!(
            "sluice_http_connections_closed_total{{reason=\"header_timeout\"}} {loris}\n"
        )),
        "{metrics}"
    );
}

/// A `sluice serve` whose log lines are kept for the test to read (the shared helper only
/// echoes them); killed by its PID when dropped.
struct LoggedServer {
    child: Child,
    http_port: u16,
    lines: Arc<Mutex<Vec<String>>>,
    _dir: tempfile::TempDir,
}

impl LoggedServer {
    fn start(extra_args: &[&str]) -> LoggedServer {
        let dir = tempfile::tempdir().unwrap();
        let mut child = Command::new(env!("CARGO_BIN_EXE_sluice"))
            .args([
                "serve",
                "--kafka-addr",
                "127.0.0.1:0",
                "--http-addr",
                "127.0.0.1:0",
            ])
            .arg("--data-dir")
            .arg(dir.path())
            .args(extra_args)
            .env("SLUICE_LOG", "info")
            .stderr(Stdio::piped())
            .stdout(Stdio::null())
            .spawn()
            .expect("spawn sluice");
        let stderr = child.stderr.take().unwrap();
        let lines = Arc::new(Mutex::new(Vec::new()));
        let (tx, rx) = std::sync::mpsc::channel();
        {
            let lines = Arc::clone(&lines);
            std::thread::spawn(move || {
                for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                    if let Some(addr) = line.split("http listening on ").nth(1) {
                        let _ = tx.send(addr.trim().to_owned());
                    }
                    eprintln!("[sluice] {line}");
                    lines.lock().unwrap().push(line);
                }
            });
        }
        let addr = rx
            .recv_timeout(Duration::from_secs(30))
            .expect("sluice did not log its HTTP address");
        LoggedServer {
            child,
            http_port: addr.rsplit(':').next().unwrap().parse().unwrap(),
            lines,
            _dir: dir,
        }
    }

    fn lines_with(&self, text: &str) -> Vec<String> {
        let lines = self.lines.lock().unwrap();
        lines.iter().filter(|l| l.contains(text)).cloned().collect()
    }
}

impl Drop for LoggedServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[test]
fn connections_over_the_cap_are_refused_with_a_few_log_lines() {
    let cap = 40;
    let server = LoggedServer::start(&["--http-max-connections", &cap.to_string()]);
    let url = format!("http://127.0.0.1:{}", server.http_port);
    create_topic(&url, "t");
    // Let the server see that client's connection close, so the cap is all the attackers'.
    std::thread::sleep(Duration::from_millis(300));

    // Attackers: connections that send nothing and are never closed by the client. Each batch
    // is given a moment to be accepted (or refused) before the next.
    let attackers = 200;
    let mut socks: Vec<TcpStream> = Vec::new();
    for _ in 0..attackers / 20 {
        socks.extend((0..20).map(|_| connect(server.http_port)));
        std::thread::sleep(Duration::from_millis(20));
    }
    // The server closes every connection over the cap.
    let deadline = Instant::now() + PATIENCE;
    let mut refused;
    loop {
        refused = socks.iter_mut().filter(|s| is_closed(s)).count();
        if refused >= attackers - cap || Instant::now() > deadline {
            break;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    assert_eq!(refused, attackers - cap, "connections refused");
    // A normal request now finds the cap full too.
    let full = client().get(format!("{url}/healthz")).send();
    assert!(
        full.is_err(),
        "a connection over the cap was served: {full:?}"
    );

    // The refusals were logged on a line or two, each with a count, never one per connection.
    let refusal_lines = server.lines_with("HTTP connections refused");
    assert!(
        (1..=3).contains(&refusal_lines.len()),
        "{} refusal lines: {refusal_lines:#?}",
        refusal_lines.len()
    );
    assert!(
        refusal_lines[0].contains("refused since the last"),
        "{}",
        refusal_lines[0]
    );

    // Once the attackers go, normal requests work again.
    drop(socks);
    produce_and_read(&url, "t", Duration::from_secs(5));
    let metrics = client()
        .get(format!("{url}/metrics"))
        .send()
        .unwrap()
        .text()
        .unwrap();
    let refused_total: u64 = metrics
        .lines()
        .find_map(|l| l.strip_prefix("sluice_http_connections_closed_total{reason=\"refused\"} "))
        .expect("the refused counter")
        .parse()
        .unwrap();
    assert!(refused_total >= (attackers - cap) as u64, "{refused_total}");
}
