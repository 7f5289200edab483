//! Test-only helpers for Sluice's integration tests (never shipped, `publish = false`).
//!
//! [`MinioServer`] runs a real MinIO — the S3 server object-storage mode is tested against — as a
//! child process on free 127.0.0.1 ports with a fresh temporary directory, random root
//! credentials and one empty bucket. Tests that need S3 start one, point the client (or
//! `sluice serve`, through [`MinioServer::env_vars`]) at it, and may stop, kill, pause or restart
//! it to inject faults. Dropping it always kills the process (by its PID) and removes the
//! directory.
//!
//! [`PostgresServer`] runs a real PostgreSQL (the metadata store of a cluster of brokers) the
//! same way: `initdb` in a fresh directory, a free loopback port, password authentication, and
//! always stopped by its PID (module [`postgres`]).
//!
//! [`FaultyStore`] wraps any object store (the in-memory one in unit tests) and injects errors,
//! latency, lost responses, hangs and outages, per operation and path prefix, reproducibly.
//!
//! The binary comes from `SLUICE_MINIO_BIN`, else from the tools cache that `scripts/test.sh`
//! fills (`scripts/lib/minio.sh`). Without it the tests fail with a message that says how to get
//! it: a missing MinIO must never turn into silently skipped tests.
//!
//! The bucket is created with a plain S3 `CreateBucket` request signed by the small AWS
//! Signature Version 4 signer in [`sigv4`], so this crate needs no S3 client of its own.

pub mod faulty;
pub mod postgres;
pub mod sigv4;

pub use faulty::FaultyStore;
pub use postgres::{PgOptions, PostgresServer};

use std::fs::{File, OpenOptions};
use std::io::{Read, Seek, SeekFrom, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant, SystemTime};

use rand::Rng;

/// The region every MinIO started here answers for (MinIO's default).
pub const REGION: &str = "us-east-1";

/// How long [`MinioServer::start`] and [`MinioServer::restart`] wait for MinIO to report
/// itself ready. It is usually ready in well under two seconds; the bound is generous for a
/// busy 2-core machine but still fails a hung start instead of hanging the test.
pub const READY_TIMEOUT: Duration = Duration::from_secs(20);

/// How long [`MinioServer::stop`] waits after SIGTERM before it sends SIGKILL.
pub const STOP_TIMEOUT: Duration = Duration::from_secs(10);

/// The bound on each HTTP exchange this crate makes itself (readiness probe, CreateBucket):
/// a loopback server that does not answer within it is treated as not ready.
const HTTP_TIMEOUT: Duration = Duration::from_secs(2);

/// How long [`MinioServer::pause`] waits for every thread of MinIO to stop after SIGSTOP.
pub const PAUSE_TIMEOUT: Duration = Duration::from_secs(5);

/// How many bytes of MinIO's log a failure message quotes.
const LOG_TAIL_BYTES: u64 = 4096;

/// A MinIO server child process on 127.0.0.1, with one bucket, killed and cleaned up on drop.
#[derive(Debug)]
pub struct MinioServer {
    bin: PathBuf,
    /// Holds `data/` (MinIO's drive) and `minio.log`; removed on drop.
    root: tempfile::TempDir,
    child: Option<Child>,
    port: u16,
    console_port: u16,
    access_key: String,
    secret_key: String,
    bucket: String,
}

impl MinioServer {
    /// Starts MinIO on free loopback ports with a fresh directory and random root credentials,
    /// waits until it is ready and creates one empty bucket. Panics (with MinIO's log tail)
    /// when the binary is missing or the server does not come up within [`READY_TIMEOUT`].
    pub fn start() -> MinioServer {
        let bin = minio_bin();
        let root = tempfile::Builder::new()
            .prefix("sluice-minio-")
            .tempdir()
            .expect("create a temporary directory for MinIO");
        std::fs::create_dir(root.path().join("data")).expect("create MinIO's data directory");
        let (port, console_port) = two_free_ports();
        let mut server = MinioServer {
            bin,
            root,
            child: None,
            port,
            console_port,
            access_key: random_token(20),
            secret_key: random_token(40),
            bucket: format!("sluice-test-{}", random_token(8).to_ascii_lowercase()),
        };
        let started = Instant::now();
        server.spawn_and_wait();
        // MinIO may report itself ready a moment before it accepts bucket operations (503
        // XMinioServerNotInitialized, or 403 InvalidAccessKeyId while the root user is not
        // loaded yet); retry those within the same start bound.
        loop {
            match server.try_create_bucket(&server.bucket) {
                Ok(()) => return server,
                Err(CreateBucketError::Retry(_)) if started.elapsed() < READY_TIMEOUT => {
                    std::thread::sleep(Duration::from_millis(50));
                }
                Err(CreateBucketError::Retry(why) | CreateBucketError::Refused(why)) => {
                    panic!(
                        "create bucket {}: {why}\n{}",
                        server.bucket,
                        server.log_tail()
                    )
                }
            }
        }
    }

    /// The S3 endpoint, e.g. `http://127.0.0.1:41234` (plain HTTP: clients must allow it).
    pub fn endpoint(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    /// The S3 API's address.
    pub fn addr(&self) -> SocketAddr {
        SocketAddr::from(([127, 0, 0, 1], self.port))
    }

    /// The bucket created at start.
    pub fn bucket(&self) -> &str {
        &self.bucket
    }

    /// The root user, to use as the AWS access key id.
    pub fn access_key(&self) -> &str {
        &self.access_key
    }

    /// The root password, to use as the AWS secret access key.
    pub fn secret_key(&self) -> &str {
        &self.secret_key
    }

    /// The region to sign for ([`REGION`]).
    pub fn region(&self) -> &str {
        REGION
    }

    /// The environment that points an S3 client (e.g. `sluice serve --storage s3://...`) at
    /// this server: endpoint, region, credentials, and permission to use plain HTTP.
    pub fn env_vars(&self) -> Vec<(&'static str, String)> {
        vec![
            ("AWS_ENDPOINT_URL", self.endpoint()),
            ("AWS_REGION", REGION.to_owned()),
            ("AWS_ACCESS_KEY_ID", self.access_key.clone()),
            ("AWS_SECRET_ACCESS_KEY", self.secret_key.clone()),
            ("AWS_ALLOW_HTTP", "true".to_owned()),
        ]
    }

    /// MinIO's process id while it runs (also while paused).
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    /// True while the process has been started and not stopped or killed.
    pub fn is_running(&self) -> bool {
        self.child.is_some()
    }

    /// Creates another bucket (an S3 `CreateBucket` request). Panics if MinIO refuses it.
    pub fn create_bucket(&self, bucket: &str) {
        if let Err(CreateBucketError::Retry(why) | CreateBucketError::Refused(why)) =
            self.try_create_bucket(bucket)
        {
            panic!("create bucket {bucket}: {why}\n{}", self.log_tail());
        }
    }

    fn try_create_bucket(&self, bucket: &str) -> Result<(), CreateBucketError> {
        let path = format!("/{bucket}");
        let host = format!("127.0.0.1:{}", self.port);
        let signed = sigv4::sign(
            &sigv4::Request {
                method: "PUT",
                host: &host,
                path: &path,
                payload: b"",
            },
            &sigv4::Credentials {
                access_key: &self.access_key,
                secret_key: &self.secret_key,
                region: REGION,
                service: "s3",
            },
            SystemTime::now(),
        );
        match http_request(self.addr(), "PUT", &path, &signed.headers) {
            Ok((200, _)) => Ok(()),
            Ok((503, body)) => Err(CreateBucketError::Retry(format!("HTTP 503: {body}"))),
            // Until its identity store has loaded the root user, a MinIO that already reports
            // itself ready may not know the access key yet.
            Ok((403, body)) if body.contains("<Code>InvalidAccessKeyId</Code>") => Err(
                CreateBucketError::Retry(format!("HTTP 403 (access key not known yet): {body}")),
            ),
            Ok((status, body)) => Err(CreateBucketError::Refused(format!(
                "MinIO refused CreateBucket: HTTP {status}: {body}"
            ))),
            Err(e) => Err(CreateBucketError::Retry(format!(
                "CreateBucket failed: {e}"
            ))),
        }
    }

    /// Stops MinIO gracefully: SIGTERM, then SIGKILL if it has not exited within
    /// [`STOP_TIMEOUT`]. Does nothing if it is not running.
    pub fn stop(&mut self) {
        if let Some(child) = self.child.take() {
            end_child(child, libc::SIGTERM, STOP_TIMEOUT);
        }
    }

    /// Kills MinIO at once (SIGKILL by its PID) and reaps it, as a crash would. Does nothing if
    /// it is not running.
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            signal(&child, libc::SIGKILL);
            let _ = child.wait();
        }
    }

    /// Freezes MinIO (SIGSTOP): its port stays open but nothing answers, like a hung server.
    /// Returns once every thread of the process has stopped (signal delivery is asynchronous;
    /// a thread still running could answer one more request), or panics after
    /// [`PAUSE_TIMEOUT`].
    pub fn pause(&self) {
        let Some(child) = &self.child else {
            return;
        };
        signal(child, libc::SIGSTOP);
        let deadline = Instant::now() + PAUSE_TIMEOUT;
        while !all_threads_stopped(child.id()) {
            assert!(
                Instant::now() < deadline,
                "MinIO (pid {}) did not stop within {PAUSE_TIMEOUT:?} of SIGSTOP",
                child.id()
            );
            std::thread::sleep(Duration::from_millis(1));
        }
    }

    /// Lets a paused MinIO run again (SIGCONT).
    pub fn resume(&self) {
        if let Some(child) = &self.child {
            signal(child, libc::SIGCONT);
        }
    }

    /// Kills MinIO if it runs, then starts it again on the same directory, ports and
    /// credentials (so everything it had stored is still there) and waits until it is ready.
    pub fn restart(&mut self) {
        self.kill();
        self.spawn_and_wait();
    }

    /// The last few KiB of MinIO's log (all starts of this server, appended).
    pub fn log_tail(&self) -> String {
        let mut out = String::new();
        if let Ok(mut file) = File::open(self.log_path()) {
            let len = file.metadata().map(|m| m.len()).unwrap_or(0);
            let _ = file.seek(SeekFrom::Start(len.saturating_sub(LOG_TAIL_BYTES)));
            let mut bytes = Vec::new();
            let _ = file.read_to_end(&mut bytes);
            out = String::from_utf8_lossy(&bytes).into_owned();
        }
        format!("--- MinIO log tail ---\n{out}--- end of MinIO log ---")
    }

    fn log_path(&self) -> PathBuf {
        self.root.path().join("minio.log")
    }

    fn spawn_and_wait(&mut self) {
        let log = OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.log_path())
            .expect("open MinIO's log file");
        let log_err = log.try_clone().expect("clone MinIO's log file handle");
        let child = Command::new(&self.bin)
            .arg("server")
            .arg(self.root.path().join("data"))
            .arg("--address")
            .arg(format!("127.0.0.1:{}", self.port))
            .arg("--console-address")
            .arg(format!("127.0.0.1:{}", self.console_port))
            .env("MINIO_ROOT_USER", &self.access_key)
            .env("MINIO_ROOT_PASSWORD", &self.secret_key)
            // No update checks: tests never send traffic beyond loopback.
            .env("MINIO_UPDATE", "off")
            .stdin(Stdio::null())
            .stdout(log)
            .stderr(log_err)
            .spawn()
            .unwrap_or_else(|e| panic!("start MinIO ({}): {e}", self.bin.display()));
        self.child = Some(child);

        let deadline = Instant::now() + READY_TIMEOUT;
        loop {
            if let Some(child) = self.child.as_mut()
                && let Ok(Some(status)) = child.try_wait()
            {
                self.child = None;
                panic!("MinIO exited during start ({status})\n{}", self.log_tail());
            }
            if let Ok((200, _)) = http_request(self.addr(), "GET", "/minio/health/ready", &[]) {
                return;
            }
            if Instant::now() >= deadline {
                let tail = self.log_tail();
                self.kill();
                panic!("MinIO was not ready within {READY_TIMEOUT:?}\n{tail}");
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

/// Why a CreateBucket did not succeed: worth retrying during start (503, I/O) or not.
#[derive(Debug)]
enum CreateBucketError {
    Retry(String),
    Refused(String),
}

impl Drop for MinioServer {
    fn drop(&mut self) {
        if let Some(child) = self.child.as_ref() {
            // A paused process must be killed too; SIGKILL works on stopped processes.
            signal(child, libc::SIGKILL);
        }
        if let Some(mut child) = self.child.take() {
            let _ = child.wait();
        }
        // `root` (a TempDir) removes the directory when it drops after this.
    }
}

/// True when every thread of process `pid` is in the stopped state (`T` in
/// `/proc/PID/task/TID/stat`).
fn all_threads_stopped(pid: u32) -> bool {
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return false;
    };
    let mut any = false;
    for task in tasks.flatten() {
        let Ok(stat) = std::fs::read_to_string(task.path().join("stat")) else {
            continue; // the thread exited meanwhile
        };
        // The state is the first field after the parenthesised command name.
        let state = stat
            .rsplit_once(") ")
            .and_then(|(_, rest)| rest.chars().next());
        if state != Some('T') {
            return false;
        }
        any = true;
    }
    any
}

/// Sends `sig` to `child`, waits up to `timeout` for it to exit, then SIGKILLs it; reaps it
/// either way.
fn end_child(mut child: Child, sig: libc::c_int, timeout: Duration) {
    signal(&child, sig);
    let deadline = Instant::now() + timeout;
    while Instant::now() < deadline {
        if let Ok(Some(_)) = child.try_wait() {
            return;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    signal(&child, libc::SIGKILL);
    let _ = child.wait();
}

/// Sends `sig` to `child` by its PID. Only called on children not yet reaped, so the PID is
/// still theirs.
fn signal(child: &Child, sig: libc::c_int) {
    let pid = child.id() as libc::pid_t;
    // SAFETY: kill(2) takes plain integers and touches no memory of this process.
    unsafe {
        libc::kill(pid, sig);
    }
}

/// The MinIO binary: `SLUICE_MINIO_BIN` if set, else `minio` in the tools cache that
/// `scripts/lib/minio.sh` fills (`$SLUICE_TOOLS_DIR`, default `~/.cache/sluice/tools`).
pub fn minio_bin() -> PathBuf {
    if let Some(bin) = std::env::var_os("SLUICE_MINIO_BIN").filter(|b| !b.is_empty()) {
        let bin = PathBuf::from(bin);
        assert!(
            bin.is_file(),
            "SLUICE_MINIO_BIN={} does not exist; run scripts/test.sh (it installs MinIO) or \
             point SLUICE_MINIO_BIN at a MinIO server binary",
            bin.display()
        );
        return bin;
    }
    let tools = match std::env::var_os("SLUICE_TOOLS_DIR").filter(|d| !d.is_empty()) {
        Some(dir) => PathBuf::from(dir),
        None => {
            let home = std::env::var_os("HOME").unwrap_or_default();
            Path::new(&home).join(".cache/sluice/tools")
        }
    };
    let bin = tools.join("minio");
    assert!(
        bin.is_file(),
        "MinIO is not installed: {} does not exist. Run scripts/test.sh (it installs MinIO \
         with `go install`) or set SLUICE_MINIO_BIN to a MinIO server binary",
        bin.display()
    );
    bin
}

/// A free loopback port (the listener is dropped before the port is used).
fn free_port() -> u16 {
    let l = TcpListener::bind("127.0.0.1:0").expect("bind a free port");
    l.local_addr().expect("local address").port()
}

/// Two distinct free loopback ports (both listeners are held until both are chosen).
fn two_free_ports() -> (u16, u16) {
    let a = TcpListener::bind("127.0.0.1:0").expect("bind a free port");
    let b = TcpListener::bind("127.0.0.1:0").expect("bind a free port");
    let port = |l: &TcpListener| l.local_addr().expect("local address").port();
    (port(&a), port(&b))
}

/// A random alphanumeric string (credentials, bucket suffixes).
fn random_token(len: usize) -> String {
    rand::rng()
        .sample_iter(rand::distr::Alphanumeric)
        .take(len)
        .map(char::from)
        .collect()
}

/// One HTTP/1.1 exchange with an empty body over a new loopback connection, bounded by
/// [`HTTP_TIMEOUT`] per step. Returns the status code and the body (lossy UTF-8).
fn http_request(
    addr: SocketAddr,
    method: &str,
    path: &str,
    headers: &[(String, String)],
) -> std::io::Result<(u16, String)> {
    let mut stream = TcpStream::connect_timeout(&addr, HTTP_TIMEOUT)?;
    stream.set_read_timeout(Some(HTTP_TIMEOUT))?;
    stream.set_write_timeout(Some(HTTP_TIMEOUT))?;
    let mut request = format!("{method} {path} HTTP/1.1\r\nHost: {addr}\r\n");
    for (name, value) in headers {
        if !name.eq_ignore_ascii_case("host") {
            request.push_str(&format!("{name}: {value}\r\n"));
        }
    }
    request.push_str("Content-Length: 0\r\nConnection: close\r\n\r\n");
    stream.write_all(request.as_bytes())?;
    let mut response = Vec::new();
    stream.read_to_end(&mut response)?;
    let text = String::from_utf8_lossy(&response);
    let status = text
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| {
            std::io::Error::new(std::io::ErrorKind::InvalidData, "no HTTP status line")
        })?;
    let body = text
        .split_once("\r\n\r\n")
        .map(|(_, b)| b.to_owned())
        .unwrap_or_default();
    Ok((status, body))
}
