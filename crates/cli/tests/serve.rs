//! Black-box tests of `sluice serve`: the real binary on a free port, real sockets, kcat as the
//! client where it is installed (scripts/test.sh installs it).

use std::io::{BufRead, BufReader, Write};
use std::net::TcpStream;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// A `sluice serve` child process, killed (by its PID) when dropped.
struct Server {
    child: Child,
    port: u16,
    dir: Option<tempfile::TempDir>,
}

impl Server {
    fn start(dir: tempfile::TempDir) -> Server {
        let mut child = Command::new(env!("CARGO_BIN_EXE_sluice"))
            .args(["serve", "--kafka-addr", "127.0.0.1:0", "--data-dir"])
            .arg(dir.path())
            .env("SLUICE_LOG", "info")
            .stderr(Stdio::piped())
            .stdout(Stdio::null())
            .spawn()
            .expect("spawn sluice");
        let stderr = child.stderr.take().expect("stderr");
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                if let Some(addr) = line.split("kafka listening on ").nth(1) {
                    let _ = tx.send(addr.trim().to_owned());
                }
                eprintln!("[sluice] {line}");
            }
        });
        let addr = rx
            .recv_timeout(Duration::from_secs(30))
            .expect("sluice did not log its listening address");
        let port = addr.rsplit(':').next().unwrap().parse().unwrap();
        Server {
            child,
            port,
            dir: Some(dir),
        }
    }

    fn bootstrap(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    /// Stops the server with SIGTERM; returns its exit status and its data directory.
    fn stop(mut self) -> (std::process::ExitStatus, tempfile::TempDir) {
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

fn have_kcat() -> bool {
    Command::new("kcat").arg("-V").output().is_ok()
}

fn kcat(args: &[&str], stdin: &str) -> String {
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

#[test]
fn kcat_produces_and_consumes_and_data_survives_restart() {
    if !have_kcat() {
        panic!("kcat is not installed; scripts/test.sh installs it");
    }
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().to_owned();
    let server = Server::start(dir);
    let b = server.bootstrap();
    let input: String = (0..100).map(|i| format!("k{i}:value-{i}\n")).collect();
    kcat(
        &["-b", &b, "-P", "-t", "orders", "-K:", "-X", "acks=all"],
        &input,
    );
    let fmt = "%k=%s@%o\n";
    let out = kcat(
        &[
            "-b",
            &b,
            "-C",
            "-t",
            "orders",
            "-o",
            "beginning",
            "-e",
            "-f",
            fmt,
        ],
        "",
    );
    let expected: String = (0..100).map(|i| format!("k{i}=value-{i}@{i}\n")).collect();
    assert_eq!(out, expected);
    let (status, dir) = server.stop();
    assert!(status.success(), "{status}");
    assert!(path.join("topics/orders/0/clean-shutdown").exists());

    // Restart on the same data: everything is still there, and appends continue.
    let server = Server::start(dir);
    let b = server.bootstrap();
    kcat(&["-b", &b, "-P", "-t", "orders", "-K:"], "late:last\n");
    let out = kcat(
        &[
            "-b",
            &b,
            "-C",
            "-t",
            "orders",
            "-o",
            "beginning",
            "-e",
            "-f",
            fmt,
        ],
        "",
    );
    assert!(out.starts_with(&expected));
    assert!(out.ends_with("late=last@100\n"));
}

#[test]
fn bad_frames_close_only_that_connection() {
    let server = Server::start(tempfile::tempdir().unwrap());
    // A frame claiming 2 GiB is refused from its prefix; a garbage request is refused.
    for bytes in [
        &i32::MAX.to_be_bytes()[..],
        &[0, 0, 0, 12, 0x7f, 0x7f, 0, 0, 0, 0, 0, 1, 0, 0, 0, 0][..],
    ] {
        let mut s = TcpStream::connect(("127.0.0.1", server.port)).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        s.write_all(bytes).unwrap();
        let mut buf = [0u8; 16];
        let n = std::io::Read::read(&mut s, &mut buf).unwrap_or(0);
        assert_eq!(n, 0, "connection should be closed");
    }
    // The broker still serves others.
    if have_kcat() {
        let out = kcat(&["-b", &server.bootstrap(), "-L"], "");
        assert!(out.contains("1 brokers"), "{out}");
    }
}
