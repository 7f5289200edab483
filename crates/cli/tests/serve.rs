//! Black-box tests of `sluice serve`: the real binary on a free port, real sockets, kcat as the
//! client where it is installed (scripts/test.sh installs it).

mod common;

use std::io::Write;
use std::net::TcpStream;
use std::time::Duration;

use common::{Server, have_kcat, kcat};

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
    // Every record of "orders" as key=value@offset lines.
    let read_all = |b: &str| {
        kcat(
            &[
                "-b",
                b,
                "-C",
                "-t",
                "orders",
                "-o",
                "beginning",
                "-e",
                "-f",
                "%k=%s@%o\n",
            ],
            "",
        )
    };
    let out = read_all(&b);
    let expected: String = (0..100).map(|i| format!("k{i}=value-{i}@{i}\n")).collect();
    assert_eq!(out, expected);
    let (status, dir) = server.stop();
    assert!(status.success(), "{status}");
    assert!(path.join("topics/orders/0/clean-shutdown").exists());

    // Restart on the same data: everything is still there, and appends continue.
    let server = Server::start(dir);
    let b = server.bootstrap();
    kcat(&["-b", &b, "-P", "-t", "orders", "-K:"], "late:last\n");
    let out = read_all(&b);
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
