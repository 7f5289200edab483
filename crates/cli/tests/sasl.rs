//! SASL on the Kafka listeners, black-box: `sluice serve` with SASL_SSL and SASL_PLAINTEXT
//! listeners, users made with `sluice user add`, kcat (the system's librdkafka) against it.
//!
//! Covered: a user added before the first start logs in; produce and consume with
//! SCRAM-SHA-512 over SASL_SSL, SCRAM-SHA-256 over SASL_PLAINTEXT and PLAIN over SASL_SSL; a
//! wrong password and an unknown user fail with an authentication error within seconds while
//! the broker keeps serving; a request before authentication closes the connection; a user
//! added while the broker runs logs in; a user added through AlterUserScramCredentials
//! (confluent-kafka's AdminClient from compat/.venv, when it is set up) logs in; the counters
//! in /metrics; no password in any log line; bad SASL settings stop the start with one line.

mod common;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::Path;
use std::time::{Duration, Instant};

use common::{Server, have_kcat, serve_fails};
use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, KeyPair};

/// Passwords of the test; none may appear in the broker's log.
const ALICE_PASSWORD: &str = "alice-s3cret-512";
const BOB_PASSWORD: &str = "bob-s3cret-256";
const CAROL_PASSWORD: &str = "carol-s3cret-later";
const DAVE_PASSWORD: &str = "dave-s3cret-online";
const WRONG_PASSWORD: &str = "not-the-password";

/// Adds user dave (password on stdin) with confluent-kafka's AdminClient, then describes him.
const ADMIN_SCRIPT: &str = r#"
import sys
from confluent_kafka.admin import (AdminClient, ScramCredentialInfo, ScramMechanism,
                                   UserScramCredentialUpsertion)
admin = AdminClient({"bootstrap.servers": sys.argv[1]})
info = ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, 4096)
done = admin.alter_user_scram_credentials(
    [UserScramCredentialUpsertion("dave", info, sys.stdin.read().encode())])
for future in done.values():
    future.result(timeout=30)
for user, future in admin.describe_user_scram_credentials(["dave"]).items():
    print(user, [str(i.mechanism) for i in future.result(timeout=30).scram_credential_infos])
"#;

/// How long a refused client may take to learn it was refused (the first failures from an
/// address are delayed by 100 ms, 200 ms, ...; kcat gives up on metadata after 10 s).
const FAIL_FAST: Duration = Duration::from_secs(12);

/// Runs kcat: (status, stdout, stderr). `cargo test` puts the build directories of native
/// dependencies on LD_LIBRARY_PATH, among them a librdkafka built without TLS for the bench
/// crate; kcat must load the system's.
fn run_kcat(args: &[String], stdin: &str) -> (std::process::ExitStatus, String, String) {
    let mut child = std::process::Command::new("kcat")
        .args(args)
        .env_remove("LD_LIBRARY_PATH")
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("kcat");
    common::finish(&mut child, stdin.as_bytes(), Duration::from_secs(60))
}

fn kcat(args: &[String], stdin: &str) -> String {
    let (status, stdout, stderr) = run_kcat(args, stdin);
    assert!(status.success(), "kcat {args:?}: {stderr}");
    stdout
}

/// A CA and a server certificate for localhost, written into `dir`.
fn write_certificates(dir: &Path) {
    let mut ca_params = CertificateParams::new(Vec::<String>::new()).unwrap();
    ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    ca_params
        .distinguished_name
        .push(DnType::CommonName, "sluice sasl test CA");
    let ca_key = KeyPair::generate().unwrap();
    let ca_cert = ca_params.self_signed(&ca_key).unwrap();
    std::fs::write(dir.join("ca.crt"), ca_cert.pem()).unwrap();
    let issuer = rcgen::Issuer::new(ca_params, ca_key);
    let mut params =
        CertificateParams::new(vec!["localhost".to_owned(), "127.0.0.1".to_owned()]).unwrap();
    params.distinguished_name = rcgen::DistinguishedName::new();
    params
        .distinguished_name
        .push(DnType::CommonName, "localhost");
    let key = KeyPair::generate().unwrap();
    let cert = params.signed_by(&key, &issuer).unwrap();
    std::fs::write(dir.join("server.crt"), cert.pem()).unwrap();
    std::fs::write(dir.join("server.key"), key.serialize_pem()).unwrap();
}

/// `sluice user ...` on `data_dir` with `stdin`; asserts success.
fn user(data_dir: &Path, args: &[&str], stdin: &str) -> String {
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_sluice"))
        .arg("user")
        .args(args)
        .arg("--data-dir")
        .arg(data_dir)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let (status, stdout, stderr) =
        common::finish(&mut child, stdin.as_bytes(), common::COMMAND_TIMEOUT);
    assert!(status.success(), "sluice user {args:?}: {stderr}");
    stdout
}

/// The port of the listener logged as `kafka listening on 127.0.0.1:PORT (PROTOCOL)`.
fn listener_port(server: &Server, protocol: &str) -> u16 {
    let needle = format!("({protocol})");
    let started = Instant::now();
    loop {
        if let Some(line) = server.log_lines_with(&needle).first() {
            let addr = line.split("kafka listening on ").nth(1).unwrap();
            let addr = addr.trim().strip_suffix(needle.as_str()).unwrap().trim();
            return addr.rsplit(':').next().unwrap().parse().unwrap();
        }
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "no {protocol} listener line"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// kcat's connection arguments for a SASL listener.
fn client(
    port: u16,
    protocol: &str,
    mechanism: &str,
    user: &str,
    password: &str,
    ca: &Path,
) -> Vec<String> {
    let mut args = vec![
        "-b".to_owned(),
        format!("127.0.0.1:{port}"),
        "-X".to_owned(),
        format!("security.protocol={protocol}"),
        "-X".to_owned(),
        format!("sasl.mechanisms={mechanism}"),
        "-X".to_owned(),
        format!("sasl.username={user}"),
        "-X".to_owned(),
        format!("sasl.password={password}"),
    ];
    if protocol == "SASL_SSL" {
        args.push("-X".to_owned());
        args.push(format!("ssl.ca.location={}", ca.display()));
    }
    args
}

fn with(mut base: Vec<String>, more: &[&str]) -> Vec<String> {
    base.extend(more.iter().map(|s| s.to_string()));
    base
}

/// Asserts that kcat's metadata request with these settings fails on authentication, fast.
fn refused(args: Vec<String>, what: &str) {
    let started = Instant::now();
    let (status, _, stderr) = run_kcat(&with(args, &["-L", "-m", "10"]), "");
    assert!(!status.success(), "{what}: kcat succeeded");
    assert!(
        stderr.to_lowercase().contains("authentication"),
        "{what}: no authentication error in {stderr}"
    );
    assert!(
        started.elapsed() < FAIL_FAST,
        "{what}: took {:?}",
        started.elapsed()
    );
}

/// A request frame: api key, version, correlation id, client id, then `body`.
fn frame(api_key: i16, version: i16, correlation_id: i32, body: &[u8]) -> Vec<u8> {
    let client = b"sasl-test";
    let mut out = Vec::new();
    out.extend_from_slice(&api_key.to_be_bytes());
    out.extend_from_slice(&version.to_be_bytes());
    out.extend_from_slice(&correlation_id.to_be_bytes());
    out.extend_from_slice(&(client.len() as i16).to_be_bytes());
    out.extend_from_slice(client);
    out.extend_from_slice(body);
    let mut framed = (out.len() as i32).to_be_bytes().to_vec();
    framed.extend_from_slice(&out);
    framed
}

/// Reads one response frame; its correlation id.
fn read_response(stream: &mut TcpStream) -> std::io::Result<i32> {
    let mut head = [0u8; 8];
    stream.read_exact(&mut head)?;
    let size = i32::from_be_bytes(head[..4].try_into().unwrap()) as usize;
    let mut rest = vec![0u8; size - 4];
    stream.read_exact(&mut rest)?;
    Ok(i32::from_be_bytes(head[4..].try_into().unwrap()))
}

#[test]
fn kcat_authenticates_with_scram_and_plain_and_bad_credentials_are_refused() {
    if !have_kcat() {
        eprintln!("kcat not installed; skipping");
        return;
    }
    let files = tempfile::tempdir().unwrap();
    write_certificates(files.path());
    let ca = files.path().join("ca.crt");
    let data = tempfile::tempdir().unwrap();
    // Users made before the broker's first start; the password read from stdin.
    user(
        data.path(),
        &[
            "add",
            "alice",
            "--mechanism",
            "SCRAM-SHA-512",
            "--password-stdin",
        ],
        &format!("{ALICE_PASSWORD}\n"),
    );
    user(
        data.path(),
        &[
            "add",
            "bob",
            "--mechanism",
            "SCRAM-SHA-256",
            "--password-stdin",
            "--iterations",
            "8192",
        ],
        BOB_PASSWORD,
    );
    let listed = user(data.path(), &["list"], "");
    assert!(
        listed.contains("alice\tSCRAM-SHA-512 (iterations 4096)"),
        "{listed}"
    );
    assert!(
        listed.contains("bob\tSCRAM-SHA-256 (iterations 8192)"),
        "{listed}"
    );

    let cert = files.path().join("server.crt").display().to_string();
    let key = files.path().join("server.key").display().to_string();
    let data_dir = data.path().to_owned();
    let server = Server::start_with_args(
        data,
        &[
            "--listeners",
            "PLAINTEXT://127.0.0.1:0,SASL_SSL://127.0.0.1:0,SASL_PLAINTEXT://127.0.0.1:0",
            "--tls-cert",
            &cert,
            "--tls-key",
            &key,
            "--sasl-mechanisms",
            "SCRAM-SHA-512,SCRAM-SHA-256,PLAIN",
            "--sasl-plain-over-plaintext",
            "true",
        ],
    );
    let sasl_ssl = listener_port(&server, "SASL_SSL");
    let sasl_plaintext = listener_port(&server, "SASL_PLAINTEXT");

    // SCRAM-SHA-512 over SASL_SSL: produce, then consume.
    let alice = client(
        sasl_ssl,
        "SASL_SSL",
        "SCRAM-SHA-512",
        "alice",
        ALICE_PASSWORD,
        &ca,
    );
    kcat(
        &with(alice.clone(), &["-P", "-t", "secured"]),
        "one\ntwo\nthree\n",
    );
    let consume = ["-C", "-t", "secured", "-o", "beginning", "-c", "3", "-e"];
    let out = kcat(&with(alice, &consume), "");
    assert_eq!(out.lines().collect::<Vec<_>>(), ["one", "two", "three"]);
    // SCRAM-SHA-256 over SASL_PLAINTEXT.
    let bob = client(
        sasl_plaintext,
        "SASL_PLAINTEXT",
        "SCRAM-SHA-256",
        "bob",
        BOB_PASSWORD,
        &ca,
    );
    kcat(&with(bob.clone(), &["-P", "-t", "secured"]), "four\n");
    let out = kcat(
        &with(
            bob,
            &["-C", "-t", "secured", "-o", "beginning", "-c", "4", "-e"],
        ),
        "",
    );
    assert_eq!(out.lines().count(), 4, "{out}");
    // PLAIN over SASL_SSL, checked against alice's SCRAM credential.
    let plain = client(sasl_ssl, "SASL_SSL", "PLAIN", "alice", ALICE_PASSWORD, &ca);
    let out = kcat(&with(plain, &consume), "");
    assert_eq!(out.lines().count(), 3, "{out}");
    let successes = server.metric("sluice_sasl_authentication_successes_total");
    assert!(successes >= 5.0, "successes {successes}");

    // A wrong password, an unknown user, PLAIN with a wrong password: refused, fast.
    refused(
        client(
            sasl_ssl,
            "SASL_SSL",
            "SCRAM-SHA-512",
            "alice",
            WRONG_PASSWORD,
            &ca,
        ),
        "wrong password",
    );
    refused(
        client(
            sasl_plaintext,
            "SASL_PLAINTEXT",
            "SCRAM-SHA-256",
            "mallory",
            WRONG_PASSWORD,
            &ca,
        ),
        "unknown user",
    );
    refused(
        client(sasl_ssl, "SASL_SSL", "PLAIN", "bob", WRONG_PASSWORD, &ca),
        "PLAIN wrong password",
    );
    assert!(server.metric("sluice_sasl_authentication_failures_total") >= 3.0);
    assert!(
        !server
            .log_lines_with("SASL authentication failed")
            .is_empty()
    );
    // The broker keeps serving the others.
    let bob = client(
        sasl_plaintext,
        "SASL_PLAINTEXT",
        "SCRAM-SHA-256",
        "bob",
        BOB_PASSWORD,
        &ca,
    );
    kcat(&with(bob, &["-L"]), "");

    // A request other than ApiVersions and SASL before authentication closes the connection.
    let mut raw = TcpStream::connect(("127.0.0.1", sasl_plaintext)).unwrap();
    raw.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    raw.write_all(&frame(18, 0, 1, &[])).unwrap();
    assert_eq!(
        read_response(&mut raw).unwrap(),
        1,
        "ApiVersions is answered"
    );
    // Metadata v1, all topics.
    raw.write_all(&frame(3, 1, 2, &(-1i32).to_be_bytes()))
        .unwrap();
    assert!(
        read_response(&mut raw).is_err(),
        "Metadata before authentication was answered"
    );
    let started = Instant::now();
    while server
        .log_lines_with("a request before SASL authentication")
        .is_empty()
    {
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "no log line for the closed connection"
        );
        std::thread::sleep(Duration::from_millis(20));
    }

    // A user added while the broker runs can log in within a few seconds.
    user(
        &data_dir,
        &[
            "add",
            "carol",
            "--mechanism",
            "SCRAM-SHA-512",
            "--password-stdin",
        ],
        CAROL_PASSWORD,
    );
    let carol = client(
        sasl_ssl,
        "SASL_SSL",
        "SCRAM-SHA-512",
        "carol",
        CAROL_PASSWORD,
        &ca,
    );
    let started = Instant::now();
    loop {
        let (status, _, stderr) = run_kcat(&with(carol.clone(), &["-L", "-m", "5"]), "");
        if status.success() {
            break;
        }
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "carol never logged in: {stderr}"
        );
        std::thread::sleep(Duration::from_millis(500));
    }

    // Kafka's online path: AlterUserScramCredentials through confluent-kafka's AdminClient
    // (which salts on the client), then that user logs in.
    let python = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../compat/.venv/bin/python");
    if python.exists() {
        let mut child = std::process::Command::new(&python)
            .args(["-c", ADMIN_SCRIPT, &server.bootstrap()])
            .env_remove("LD_LIBRARY_PATH")
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        let (status, stdout, stderr) = common::finish(
            &mut child,
            DAVE_PASSWORD.as_bytes(),
            Duration::from_secs(60),
        );
        assert!(status.success(), "admin client: {stdout}{stderr}");
        assert!(stdout.contains("SCRAM_SHA_512"), "{stdout}");
        let dave = client(
            sasl_ssl,
            "SASL_SSL",
            "SCRAM-SHA-512",
            "dave",
            DAVE_PASSWORD,
            &ca,
        );
        kcat(&with(dave, &["-L"]), "");
    } else {
        eprintln!("compat/.venv not set up (compat/run.sh); skipping the AdminClient part");
    }

    // No password in any log line.
    for secret in [
        ALICE_PASSWORD,
        BOB_PASSWORD,
        CAROL_PASSWORD,
        DAVE_PASSWORD,
        WRONG_PASSWORD,
    ] {
        assert_eq!(
            server.log_lines_with(secret),
            Vec::<String>::new(),
            "{secret} logged"
        );
    }
    let (status, _) = server.stop();
    assert!(status.success());
}

#[test]
fn bad_sasl_settings_stop_the_start_with_one_line() {
    let args = |list: &[&str]| list.iter().map(|s| s.to_string()).collect::<Vec<_>>();
    let line = serve_fails(
        &args(&[
            "--listeners",
            "SASL_PLAINTEXT://127.0.0.1:0",
            "--sasl-mechanisms",
            "SCRAM-SHA-512,PLAIN",
        ]),
        &[],
    );
    assert!(
        line.contains("PLAIN would send passwords in clear text on SASL_PLAINTEXT"),
        "{line}"
    );
    let line = serve_fails(
        &args(&[
            "--listeners",
            "SASL_SSL://127.0.0.1:0",
            "--sasl-mechanisms",
            "PLAIN",
        ]),
        &[],
    );
    assert!(
        line.contains("a SASL_SSL listener needs --tls-cert and --tls-key"),
        "{line}"
    );
    let line = serve_fails(&args(&["--super-users", "User:admin"]), &[]);
    assert!(
        line.contains("--super-users needs --authorizer acl"),
        "{line}"
    );
}
