//! Helpers shared by the black-box tests: a `sluice serve` child process on a free port, the
//! `sluice` CLI run against it, and kcat.
#![allow(dead_code)]

use std::io::{BufRead, BufReader, Read, Write};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

/// A `sluice serve` child process, killed (by its PID) when dropped.
pub struct Server {
    child: Child,
    pub port: u16,
    /// The HTTP API's port.
    pub http_port: u16,
    dir: Option<tempfile::TempDir>,
    /// Every line the server has logged so far.
    log: std::sync::Arc<std::sync::Mutex<Vec<String>>>,
}

impl Server {
    /// Starts a server on a new, empty data directory.
    pub fn start_fresh() -> Server {
        Server::start(tempfile::tempdir().unwrap())
    }

    /// Starts a server on `dir`.
    pub fn start(dir: tempfile::TempDir) -> Server {
        Server::start_with_args(dir, &[])
    }

    /// Starts a server on `dir` with more `serve` arguments (e.g. `--config FILE`).
    pub fn start_with_args(dir: tempfile::TempDir, extra_args: &[&str]) -> Server {
        Server::start_with_env(dir, extra_args, &[])
    }

    /// [`Server::start_with_args`] with more environment variables (e.g. S3 credentials).
    pub fn start_with_env(
        dir: tempfile::TempDir,
        extra_args: &[&str],
        env: &[(&str, String)],
    ) -> Server {
        let mut child = Command::new(env!("CARGO_BIN_EXE_sluice"))
            .args([
                "serve",
                "--kafka-addr",
                "127.0.0.1:0",
                "--http-addr",
                "127.0.0.1:0",
                "--data-dir",
            ])
            .arg(dir.path())
            .args(extra_args)
            .envs(env.iter().map(|(k, v)| (*k, v.as_str())))
            .env("SLUICE_LOG", "info")
            .stderr(Stdio::piped())
            .stdout(Stdio::null())
            .spawn()
            .expect("spawn sluice");
        let stderr = child.stderr.take().expect("stderr");
        let (tx, rx) = std::sync::mpsc::channel();
        let log = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        let log_lines = std::sync::Arc::clone(&log);
        std::thread::spawn(move || {
            // `serve` logs the HTTP address before the Kafka one.
            let mut http = None;
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                if let Some(addr) = line.split("http listening on ").nth(1) {
                    http = Some(addr.trim().to_owned());
                }
                if let Some(addr) = line.split("kafka listening on ").nth(1) {
                    let _ = tx.send((addr.trim().to_owned(), http.clone()));
                }
                eprintln!("[sluice] {line}");
                log_lines.lock().unwrap().push(line);
            }
        });
        let (addr, http) = rx
            .recv_timeout(Duration::from_secs(30))
            .expect("sluice did not log its listening address");
        // "HOST:PORT", maybe followed by " (PROTOCOL)".
        let port_of = |a: &str| {
            let addr = a.split_whitespace().next().unwrap_or_default();
            addr.rsplit(':').next().unwrap().parse().unwrap()
        };
        let http = http.expect("sluice did not log its HTTP address before the Kafka one");
        Server {
            child,
            port: port_of(&addr),
            http_port: port_of(&http),
            dir: Some(dir),
            log,
        }
    }

    /// The server process's id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// The lines the server has logged so far that contain `needle`.
    pub fn log_lines_with(&self, needle: &str) -> Vec<String> {
        let log = self.log.lock().unwrap();
        log.iter().filter(|l| l.contains(needle)).cloned().collect()
    }

    /// Whether the server process is still running.
    pub fn is_running(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(None))
    }

    pub fn bootstrap(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    /// The value of the `/metrics` sample that starts with `prefix` (its name and any labels).
    pub fn metric(&self, prefix: &str) -> f64 {
        let text = reqwest::blocking::get(format!("{}/metrics", self.http_url()))
            .unwrap()
            .text()
            .unwrap();
        sample(&text, prefix)
    }

    /// The HTTP API's base URL, e.g. `http://127.0.0.1:8080`.
    pub fn http_url(&self) -> String {
        format!("http://127.0.0.1:{}", self.http_port)
    }

    /// Stops the server with SIGTERM; returns its exit status and its data directory.
    pub fn stop(mut self) -> (ExitStatus, tempfile::TempDir) {
        // SIGTERM: graceful shutdown.
        let pid = self.child.id().to_string();
        Command::new("kill").args(["-TERM", &pid]).status().unwrap();
        let started = Instant::now();
        loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                return (status, self.dir.take().expect("data dir"));
            }
            assert!(
                started.elapsed() < Duration::from_secs(20),
                "no exit after SIGTERM"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The value of the sample line of Prometheus `text` that starts with `prefix` (the name and
/// any labels).
pub fn sample(text: &str, prefix: &str) -> f64 {
    text.lines()
        .find_map(|l| l.strip_prefix(prefix)?.strip_prefix(' '))
        .unwrap_or_else(|| panic!("no {prefix} in\n{text}"))
        .parse()
        .unwrap()
}

pub fn have_kcat() -> bool {
    Command::new("kcat").arg("-V").output().is_ok()
}

pub fn kcat(args: &[&str], stdin: &str) -> String {
    let mut child = Command::new("kcat")
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("kcat");
    child
        .stdin
        .take()
        .unwrap()
        .write_all(stdin.as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "kcat {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

/// How long one CLI invocation may take before the test gives up on it.
pub const COMMAND_TIMEOUT: Duration = Duration::from_secs(60);

/// The outcome of one CLI invocation.
pub struct Run {
    pub status: ExitStatus,
    pub stdout: String,
    pub stderr: String,
}

/// Runs `sluice ARGS` with `bootstrap` as its default broker and `stdin` as input.
pub fn run_cli(bootstrap: &str, args: &[&str], stdin: &str) -> Run {
    let mut child = Command::new(env!("CARGO_BIN_EXE_sluice"))
        .args(args)
        .env("SLUICE_BOOTSTRAP", bootstrap)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn sluice");
    let (status, stdout, stderr) = finish(&mut child, stdin.as_bytes(), COMMAND_TIMEOUT);
    Run {
        status,
        stdout,
        stderr,
    }
}

/// Feeds `stdin`, collects stdout/stderr, and waits for `child` (killing it, by its handle,
/// past `timeout`).
pub fn finish(child: &mut Child, stdin: &[u8], timeout: Duration) -> (ExitStatus, String, String) {
    let mut input = child.stdin.take().expect("stdin");
    let stdin = stdin.to_vec();
    let writer = std::thread::spawn(move || {
        let _ = input.write_all(&stdin);
    });
    let read_all = |mut r: Box<dyn Read + Send>| {
        std::thread::spawn(move || {
            let mut s = Vec::new();
            let _ = r.read_to_end(&mut s);
            String::from_utf8_lossy(&s).into_owned()
        })
    };
    let out = read_all(Box::new(child.stdout.take().expect("stdout")));
    let err = read_all(Box::new(child.stderr.take().expect("stderr")));
    let started = Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if started.elapsed() > timeout {
            let _ = child.kill();
            panic!("command did not finish within {timeout:?}");
        }
        std::thread::sleep(Duration::from_millis(10));
    };
    writer.join().unwrap();
    (status, out.join().unwrap(), err.join().unwrap())
}

/// Running the CLI against a test server.
impl Server {
    /// Runs `sluice ARGS` against this server with `stdin` as input.
    pub fn run(&self, args: &[&str], stdin: &str) -> Run {
        run_cli(&self.bootstrap(), args, stdin)
    }

    /// Like `run`, and asserts success.
    pub fn ok(&self, args: &[&str], stdin: &str) -> Run {
        let run = self.run(args, stdin);
        assert!(
            run.status.success(),
            "sluice {args:?} failed: {}",
            run.stderr
        );
        run
    }

    /// Like `run`, and asserts a non-zero exit.
    pub fn fails(&self, args: &[&str], stdin: &str) -> Run {
        let run = self.run(args, stdin);
        assert!(
            !run.status.success(),
            "sluice {args:?} should fail; stdout: {}",
            run.stdout
        );
        run
    }
}

/// How long a failing start may take at most (the bucket check is bounded by 10 s).
pub const START_FAILURE_TIMEOUT: Duration = Duration::from_secs(30);

/// Runs `sluice serve` with `args` that must fail to start, within 25 s; returns its one
/// `error:` line (asserting there is exactly one).
pub fn serve_fails(args: &[String], env: &[(&str, String)]) -> String {
    let dir = tempfile::tempdir().unwrap();
    let mut child = Command::new(env!("CARGO_BIN_EXE_sluice"))
        .args([
            "serve",
            "--kafka-addr",
            "127.0.0.1:0",
            "--http-addr",
            "off",
            "--data-dir",
        ])
        .arg(dir.path())
        .args(args)
        .envs(env.iter().map(|(k, v)| (*k, v.as_str())))
        .env_remove("AWS_SESSION_TOKEN")
        .env("SLUICE_LOG", "info")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let started = Instant::now();
    let (status, _, stderr) = finish(&mut child, b"", START_FAILURE_TIMEOUT);
    assert!(!status.success(), "serve started: {stderr}");
    assert!(
        started.elapsed() < Duration::from_secs(25),
        "took {:?}",
        started.elapsed()
    );
    let errors: Vec<&str> = stderr.lines().filter(|l| l.starts_with("error:")).collect();
    assert_eq!(errors.len(), 1, "one error line expected:\n{stderr}");
    errors[0].to_owned()
}

/// Sends one request on a fresh connection to `port` and decodes its answer.
pub fn kafka_call(
    port: u16,
    api_key: sluice_protocol::kafka_protocol::messages::ApiKey,
    version: i16,
    body: sluice_protocol::kafka_protocol::messages::RequestKind,
) -> sluice_protocol::kafka_protocol::messages::ResponseKind {
    let mut stream = kafka_connect(port);
    kafka_call_on(&mut stream, api_key, version, body)
}

/// A connection to the broker's Kafka port for [`kafka_call_on`].
pub fn kafka_connect(port: u16) -> std::net::TcpStream {
    let stream = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(30)))
        .unwrap();
    stream
}

/// [`kafka_call`] over an open connection (a share session belongs to the connection it is
/// used on, and ends when it closes).
pub fn kafka_call_on(
    stream: &mut std::net::TcpStream,
    api_key: sluice_protocol::kafka_protocol::messages::ApiKey,
    version: i16,
    body: sluice_protocol::kafka_protocol::messages::RequestKind,
) -> sluice_protocol::kafka_protocol::messages::ResponseKind {
    use std::io::{Read, Write};
    let mut out = bytes::BytesMut::new();
    sluice_protocol::codec::encode_request(&mut out, api_key, version, 1, "test", &body).unwrap();
    stream.write_all(&out).unwrap();
    let mut size = [0u8; 4];
    stream.read_exact(&mut size).unwrap();
    let mut frame = vec![0u8; i32::from_be_bytes(size) as usize];
    stream.read_exact(&mut frame).unwrap();
    sluice_protocol::codec::decode_response(frame.into(), api_key, version)
        .unwrap()
        .1
}

/// The cluster id the broker on `port` reports, by DescribeCluster, after checking that
/// Metadata reports the same one.
pub fn cluster_id(port: u16) -> String {
    use sluice_protocol::kafka_protocol::messages::{
        ApiKey, DescribeClusterRequest, MetadataRequest, RequestKind, ResponseKind,
    };
    let described = kafka_call(
        port,
        ApiKey::DescribeCluster,
        1,
        RequestKind::DescribeCluster(DescribeClusterRequest::default()),
    );
    let ResponseKind::DescribeCluster(described) = described else {
        panic!("{described:?}")
    };
    assert_eq!(described.error_code, 0, "{described:?}");
    let id = described.cluster_id.to_string();
    let metadata = kafka_call(
        port,
        ApiKey::Metadata,
        12,
        RequestKind::Metadata(MetadataRequest::default().with_topics(Some(Vec::new()))),
    );
    let ResponseKind::Metadata(metadata) = metadata else {
        panic!("{metadata:?}")
    };
    assert_eq!(
        metadata.cluster_id.as_ref().map(|s| s.as_str()),
        Some(id.as_str())
    );
    id
}
