//! TLS on the Kafka port, black-box: `sluice serve --listeners` with SSL and PLAINTEXT
//! listeners, certificates made here with rcgen, kcat and a rustls client against it.
//!
//! Covered: produce and consume over SSL with kcat; Metadata on each listener advertises that
//! listener's port; mutual TLS with a good client certificate, and refusals of none, an
//! untrusted one and an expired one; principal mapping rules that name no user refuse the
//! connection; a PLAINTEXT client on the SSL port and a TLS client on the PLAINTEXT port fail
//! within seconds while the broker keeps serving; a certificate replaced on disk is served
//! after SIGHUP (and after a change alone) while an open connection keeps working; bad
//! certificate files and SASL listeners stop the start with one line.

mod common;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::{Server, have_kcat, serve_fails};
use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, Issuer, KeyPair};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};

/// Runs kcat with `args` and `stdin`, asserting success; returns its stdout.
fn kcat(args: &[&str], stdin: &str) -> String {
    let (status, stdout, stderr) = run_kcat(args, stdin);
    assert!(status.success(), "kcat {args:?}: {stderr}");
    stdout
}

/// Runs kcat: (status, stdout, stderr). `cargo test` puts the build directories of native
/// dependencies on LD_LIBRARY_PATH, among them a librdkafka built without TLS for the bench
/// crate; kcat must load the system's.
fn run_kcat(args: &[&str], stdin: &str) -> (std::process::ExitStatus, String, String) {
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

/// How long a refused client may take to learn it was refused.
const FAIL_FAST: Duration = Duration::from_secs(3);

/// A certificate authority made for one test.
struct Ca {
    issuer: Issuer<'static, KeyPair>,
    pem: String,
}

impl Ca {
    fn new(name: &str) -> Ca {
        let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.distinguished_name.push(DnType::CommonName, name);
        let key = KeyPair::generate().unwrap();
        let cert = params.self_signed(&key).unwrap();
        Ca {
            pem: cert.pem(),
            issuer: Issuer::new(params, key),
        }
    }

    /// A certificate for `cn` signed by this CA: (certificate PEM, key PEM).
    fn sign(&self, cn: &str, expired: bool) -> (String, String) {
        let mut params =
            CertificateParams::new(vec!["localhost".to_owned(), "127.0.0.1".to_owned()]).unwrap();
        params.distinguished_name = rcgen::DistinguishedName::new();
        params
            .distinguished_name
            .push(DnType::OrganizationName, "Acme");
        params.distinguished_name.push(DnType::CommonName, cn);
        if expired {
            params.not_before = rcgen::date_time_ymd(2001, 1, 1);
            params.not_after = rcgen::date_time_ymd(2002, 1, 1);
        }
        let key = KeyPair::generate().unwrap();
        let cert = params.signed_by(&key, &self.issuer).unwrap();
        (cert.pem(), key.serialize_pem())
    }
}

/// The files of one test: a CA, the server's certificate and key, a client's.
struct Pki {
    dir: tempfile::TempDir,
    ca: Ca,
}

impl Pki {
    fn new() -> Pki {
        let pki = Pki {
            dir: tempfile::tempdir().unwrap(),
            ca: Ca::new("sluice test CA"),
        };
        pki.write("ca.crt", &pki.ca.pem);
        let (cert, key) = pki.ca.sign("localhost", false);
        pki.write("server.crt", &cert);
        pki.write("server.key", &key);
        let (cert, key) = pki.ca.sign("alice", false);
        pki.write("alice.crt", &cert);
        pki.write("alice.key", &key);
        pki
    }

    fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    fn arg(&self, name: &str) -> String {
        self.path(name).display().to_string()
    }

    fn write(&self, name: &str, text: &str) {
        std::fs::write(self.path(name), text).unwrap();
    }

    /// `serve` arguments: a PLAINTEXT listener first (the line the test helper reads), then SSL.
    fn serve_args(&self, more: &[&str]) -> Vec<String> {
        let mut args: Vec<String> = [
            "--listeners",
            "PLAINTEXT://127.0.0.1:0,SSL://127.0.0.1:0",
            "--tls-cert",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        args.push(self.arg("server.crt"));
        args.push("--tls-key".to_owned());
        args.push(self.arg("server.key"));
        args.extend(more.iter().map(|s| s.to_string()));
        args
    }

    fn start(&self, more: &[&str]) -> (Server, u16) {
        let args = self.serve_args(more);
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let server = Server::start_with_args(tempfile::tempdir().unwrap(), &args);
        let ssl = ssl_port(&server);
        (server, ssl)
    }

    /// kcat's arguments for the SSL listener on `port`, with `client`'s certificate if given.
    fn kcat_args(&self, port: u16, client: Option<&str>) -> Vec<String> {
        let mut args = vec![
            "-b".to_owned(),
            format!("127.0.0.1:{port}"),
            "-X".to_owned(),
            "security.protocol=ssl".to_owned(),
            "-X".to_owned(),
            format!("ssl.ca.location={}", self.arg("ca.crt")),
        ];
        if let Some(name) = client {
            args.push("-X".to_owned());
            args.push(format!(
                "ssl.certificate.location={}",
                self.arg(&format!("{name}.crt"))
            ));
            args.push("-X".to_owned());
            args.push(format!(
                "ssl.key.location={}",
                self.arg(&format!("{name}.key"))
            ));
        }
        args
    }

    /// A rustls client config that trusts this test's CA, with `client`'s certificate if given.
    fn client_config(&self, client: Option<&str>) -> Arc<rustls::ClientConfig> {
        client_config(&[self.path("ca.crt")], client.map(|n| self.client_files(n)))
    }

    fn client_files(&self, name: &str) -> (PathBuf, PathBuf) {
        (
            self.path(&format!("{name}.crt")),
            self.path(&format!("{name}.key")),
        )
    }
}

fn client_config(cas: &[PathBuf], client: Option<(PathBuf, PathBuf)>) -> Arc<rustls::ClientConfig> {
    let mut roots = rustls::RootCertStore::empty();
    for ca in cas {
        for cert in CertificateDer::pem_file_iter(ca).unwrap() {
            roots.add(cert.unwrap()).unwrap();
        }
    }
    let builder = rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::aws_lc_rs::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .unwrap()
    .with_root_certificates(roots);
    let config = match client {
        None => builder.with_no_client_auth(),
        Some((cert, key)) => builder
            .with_client_auth_cert(
                CertificateDer::pem_file_iter(cert)
                    .unwrap()
                    .map(Result::unwrap)
                    .collect(),
                PrivateKeyDer::from_pem_file(key).unwrap(),
            )
            .unwrap(),
    };
    Arc::new(config)
}

/// The SSL listener's port, from its `kafka listening on 127.0.0.1:PORT (SSL)` line.
fn ssl_port(server: &Server) -> u16 {
    let started = Instant::now();
    loop {
        if let Some(line) = server.log_lines_with("(SSL)").first() {
            let addr = line.split("kafka listening on ").nth(1).unwrap();
            let addr = addr.trim().strip_suffix("(SSL)").unwrap().trim();
            return addr.rsplit(':').next().unwrap().parse().unwrap();
        }
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "no SSL listener line"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// An ApiVersions v0 request frame with `correlation_id`.
fn api_versions(correlation_id: i32) -> Vec<u8> {
    let client = b"tls-test";
    let mut body = Vec::new();
    body.extend_from_slice(&18i16.to_be_bytes());
    body.extend_from_slice(&0i16.to_be_bytes());
    body.extend_from_slice(&correlation_id.to_be_bytes());
    body.extend_from_slice(&(client.len() as i16).to_be_bytes());
    body.extend_from_slice(client);
    let mut frame = (body.len() as i32).to_be_bytes().to_vec();
    frame.extend_from_slice(&body);
    frame
}

/// Sends ApiVersions on `stream` and reads the response's correlation id.
fn ask(stream: &mut impl ReadWrite, correlation_id: i32) -> std::io::Result<i32> {
    stream.write_all(&api_versions(correlation_id))?;
    stream.flush()?;
    let mut head = [0u8; 8];
    stream.read_exact(&mut head)?;
    let size = i32::from_be_bytes(head[..4].try_into().unwrap()) as usize;
    let mut rest = vec![0u8; size - 4];
    stream.read_exact(&mut rest)?;
    Ok(i32::from_be_bytes(head[4..].try_into().unwrap()))
}

trait ReadWrite: Read + Write {}
impl<T: Read + Write> ReadWrite for T {}

type Tls = rustls::StreamOwned<rustls::ClientConnection, TcpStream>;

/// A TLS connection to `port` (the handshake completes on the first read or write).
fn tls_connect(port: u16, config: Arc<rustls::ClientConfig>) -> Tls {
    let tcp = TcpStream::connect(("127.0.0.1", port)).unwrap();
    tcp.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let conn =
        rustls::ClientConnection::new(config, ServerName::try_from("localhost").unwrap()).unwrap();
    rustls::StreamOwned::new(conn, tcp)
}

/// Asserts that a request on `stream` fails (an error or a close), within [`FAIL_FAST`].
fn refused(mut stream: impl ReadWrite, what: &str) {
    let started = Instant::now();
    let result = ask(&mut stream, 7);
    assert!(result.is_err(), "{what}: answered {result:?}");
    assert!(
        started.elapsed() < FAIL_FAST,
        "{what}: took {:?}",
        started.elapsed()
    );
}

/// Waits for `count` log lines with `needle`.
fn wait_for_log(server: &Server, needle: &str, count: usize) {
    let started = Instant::now();
    while server.log_lines_with(needle).len() < count {
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "no {count} log line(s) with {needle:?}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn kcat_produces_and_consumes_over_ssl_and_each_listener_advertises_its_own_port() {
    if !have_kcat() {
        eprintln!("kcat not installed; skipping");
        return;
    }
    let pki = Pki::new();
    let (server, ssl) = pki.start(&[]);
    let args = pki.kcat_args(ssl, None);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let produce: Vec<&str> = args.iter().copied().chain(["-P", "-t", "secure"]).collect();
    kcat(&produce, "one\ntwo\nthree\n");
    let consume: Vec<&str> = args
        .iter()
        .copied()
        .chain(["-C", "-t", "secure", "-o", "beginning", "-e", "-q"])
        .collect();
    assert_eq!(kcat(&consume, ""), "one\ntwo\nthree\n");
    // Metadata: the SSL listener's clients are told the SSL port, the PLAINTEXT ones theirs.
    let list: Vec<&str> = args.iter().copied().chain(["-L"]).collect();
    let ssl_meta = kcat(&list, "");
    assert!(
        ssl_meta.contains(&format!("at 127.0.0.1:{ssl}")),
        "{ssl_meta}"
    );
    assert!(
        !ssl_meta.contains(&format!("127.0.0.1:{}", server.port)),
        "{ssl_meta}"
    );
    let plain_meta = kcat(&["-b", &server.bootstrap(), "-L"], "");
    assert!(
        plain_meta.contains(&format!("at 127.0.0.1:{}", server.port)),
        "{plain_meta}"
    );
    // The records are the same whichever listener reads them.
    let plain = kcat(
        &[
            "-b",
            &server.bootstrap(),
            "-C",
            "-t",
            "secure",
            "-o",
            "beginning",
            "-e",
            "-q",
        ],
        "",
    );
    assert_eq!(plain, "one\ntwo\nthree\n");
    server.stop();
}

#[test]
fn advertised_listeners_are_told_per_listener() {
    let pki = Pki::new();
    let (server, ssl) = pki.start(&[
        "--advertised-listeners",
        "SSL://localhost:19093,PLAINTEXT://127.0.0.1:19092",
    ]);
    if have_kcat() {
        let args = pki.kcat_args(ssl, None);
        let list: Vec<&str> = args.iter().map(String::as_str).chain(["-L"]).collect();
        // kcat lists the brokers as told, before it would connect to the advertised address.
        let (_, out, err) = run_kcat(&list, "");
        assert!(out.contains("at localhost:19093"), "{out}\n{err}");
        let out = kcat(&["-b", &server.bootstrap(), "-L"], "");
        assert!(out.contains("at 127.0.0.1:19092"), "{out}");
    }
    server.stop();
}

#[test]
fn mutual_tls_accepts_good_client_certificates_only() {
    let pki = Pki::new();
    let other = Ca::new("another CA");
    let (cert, key) = other.sign("mallory", false);
    pki.write("mallory.crt", &cert);
    pki.write("mallory.key", &key);
    let (cert, key) = pki.ca.sign("old", true);
    pki.write("old.crt", &cert);
    pki.write("old.key", &key);
    let (server, ssl) = pki.start(&["--tls-client-ca", &pki.arg("ca.crt")]);

    let mut good = tls_connect(ssl, pki.client_config(Some("alice")));
    assert_eq!(ask(&mut good, 1).unwrap(), 1);
    if have_kcat() {
        let args = pki.kcat_args(ssl, Some("alice"));
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let produce: Vec<&str> = args.iter().copied().chain(["-P", "-t", "mtls"]).collect();
        kcat(&produce, "hello\n");
        let consume: Vec<&str> = args
            .iter()
            .copied()
            .chain(["-C", "-t", "mtls", "-o", "beginning", "-e", "-q"])
            .collect();
        assert_eq!(kcat(&consume, ""), "hello\n");
    }
    refused(
        tls_connect(ssl, pki.client_config(None)),
        "no client certificate",
    );
    // The client trusts the server; the server does not trust the client's CA.
    let untrusted = client_config(&[pki.path("ca.crt")], Some(pki.client_files("mallory")));
    refused(tls_connect(ssl, untrusted), "untrusted client certificate");
    refused(
        tls_connect(ssl, pki.client_config(Some("old"))),
        "expired client certificate",
    );
    wait_for_log(&server, "TLS handshake failed", 1);
    let lines = server.log_lines_with("TLS handshake failed");
    assert!(lines[0].contains("peer=127.0.0.1:"), "{lines:?}");
    // The good connection was never disturbed.
    assert_eq!(ask(&mut good, 2).unwrap(), 2);
    server.stop();
}

/// `curl` against the HTTPS API: (status code or 0 when the exchange failed, body).
fn curl(args: &[&str]) -> (u16, String) {
    let out = std::process::Command::new("curl")
        .args(["-sS", "--max-time", "10", "-o", "-", "-w", "\n%{http_code}"])
        .args(args)
        .env_remove("LD_LIBRARY_PATH")
        .output()
        .expect("curl");
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let (body, code) = text.rsplit_once('\n').unwrap_or(("", "0"));
    (code.trim().parse().unwrap_or(0), body.to_owned())
}

#[test]
fn the_http_api_serves_tls_with_the_same_files_and_failed_handshakes_are_counted() {
    let pki = Pki::new();
    let (server, ssl) = pki.start(&["--http-tls", "true"]);
    assert_eq!(server.log_lines_with("(HTTPS)").len(), 1);
    let port = server.http_port;
    let https = |path: &str| format!("https://localhost:{port}{path}");
    let resolve = format!("localhost:{port}:127.0.0.1");
    let ca = pki.arg("ca.crt");
    let (code, body) = curl(&["--cacert", &ca, "--resolve", &resolve, &https("/healthz")]);
    assert_eq!(code, 200, "{body}");
    // Plain HTTP on the HTTPS port gets no HTTP answer; a client that does not trust the
    // server's CA refuses it. Neither hangs.
    let started = Instant::now();
    let (code, _) = curl(&[&format!("http://127.0.0.1:{port}/healthz")]);
    assert_eq!(code, 0);
    let (code, _) = curl(&["--resolve", &resolve, &https("/healthz")]);
    assert_eq!(code, 0);
    assert!(started.elapsed() < Duration::from_secs(15));
    // A PLAINTEXT Kafka client on the SSL listener: counted, as the failed HTTPS handshakes.
    refused(
        TcpStream::connect(("127.0.0.1", ssl)).unwrap(),
        "plaintext on SSL",
    );
    wait_for_log(&server, "TLS handshake failed", 1);
    let (_, metrics) = curl(&["--cacert", &ca, "--resolve", &resolve, &https("/metrics")]);
    let kafka = common::sample(
        &metrics,
        "sluice_kafka_connections_closed_total{reason=\"tls_handshake\"}",
    );
    let http = common::sample(
        &metrics,
        "sluice_http_connections_closed_total{reason=\"tls_handshake\"}",
    );
    assert!(kafka >= 1.0, "{metrics}");
    assert!(http >= 1.0, "{metrics}");
    server.stop();
}

#[test]
fn principal_mapping_rules_that_name_no_user_refuse_the_connection() {
    let pki = Pki::new();
    let (cert, key) = pki.ca.sign("bob", false);
    pki.write("bob.crt", &cert);
    pki.write("bob.key", &key);
    let (server, ssl) = pki.start(&[
        "--tls-client-ca",
        &pki.arg("ca.crt"),
        "--ssl-principal-mapping-rules",
        "RULE:^CN=alice,O=Acme$/alice/",
    ]);
    let mut alice = tls_connect(ssl, pki.client_config(Some("alice")));
    assert_eq!(ask(&mut alice, 1).unwrap(), 1);
    refused(tls_connect(ssl, pki.client_config(Some("bob"))), "bob");
    wait_for_log(&server, "no ssl_principal_mapping_rules rule applies", 1);
    let line = &server.log_lines_with("no ssl_principal_mapping_rules rule applies")[0];
    assert!(line.contains("CN=bob,O=Acme"), "{line}");
    server.stop();
}

#[test]
fn wrong_protocol_clients_fail_fast_and_the_broker_keeps_serving() {
    let pki = Pki::new();
    let (server, ssl) = pki.start(&[]);
    // A PLAINTEXT client on the SSL port: the handshake fails at its first bytes.
    let plain = TcpStream::connect(("127.0.0.1", ssl)).unwrap();
    plain
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    refused(plain, "PLAINTEXT client on the SSL listener");
    // A TLS client on the PLAINTEXT port: its ClientHello is no Kafka frame.
    refused(
        tls_connect(server.port, pki.client_config(None)),
        "TLS client on the PLAINTEXT listener",
    );
    // A client that connects to the SSL port and says nothing holds only its own connection.
    let _silent = TcpStream::connect(("127.0.0.1", ssl)).unwrap();
    // Both listeners still serve.
    let mut tls = tls_connect(ssl, pki.client_config(None));
    assert_eq!(ask(&mut tls, 3).unwrap(), 3);
    let mut plain = TcpStream::connect(("127.0.0.1", server.port)).unwrap();
    assert_eq!(ask(&mut plain, 4).unwrap(), 4);
    wait_for_log(&server, "TLS handshake failed", 1);
    let line = &server.log_lines_with("TLS handshake failed")[0];
    assert!(
        line.contains("PLAINTEXT client on an SSL listener"),
        "{line}"
    );
    wait_for_log(&server, "TLS handshake on a PLAINTEXT listener", 1);
    server.stop();
}

#[test]
fn a_replaced_certificate_is_served_after_sighup_and_open_connections_keep_going() {
    let pki = Pki::new();
    let (server, ssl) = pki.start(&[]);
    let served = |stream: &Tls| -> Vec<u8> {
        stream.conn.peer_certificates().unwrap()[0]
            .as_ref()
            .to_vec()
    };
    let mut open = tls_connect(ssl, pki.client_config(None));
    assert_eq!(ask(&mut open, 1).unwrap(), 1);
    let first = served(&open);

    // A new certificate from the same CA, written over the files, then SIGHUP.
    let (cert, key) = pki.ca.sign("localhost", false);
    pki.write("server.crt", &cert);
    pki.write("server.key", &key);
    std::process::Command::new("kill")
        .args(["-HUP", &server.pid().to_string()])
        .status()
        .unwrap();
    wait_for_log(&server, "reloaded the TLS certificate", 1);
    let mut fresh = tls_connect(ssl, pki.client_config(None));
    assert_eq!(ask(&mut fresh, 2).unwrap(), 2);
    let second = served(&fresh);
    assert_ne!(first, second);
    assert_eq!(
        second,
        CertificateDer::from_pem_slice(cert.as_bytes())
            .unwrap()
            .as_ref()
    );
    assert_eq!(ask(&mut open, 3).unwrap(), 3);

    // A broken file is refused and the current certificate stays.
    let reloads = server.log_lines_with("reloaded the TLS certificate").len();
    pki.write("server.key", "not a key");
    wait_for_log(&server, "do not load; keeping the current certificate", 1);
    let mut still = tls_connect(ssl, pki.client_config(None));
    assert_eq!(ask(&mut still, 4).unwrap(), 4);
    assert_eq!(served(&still), second);

    // A change alone (no signal) is picked up too.
    let (cert, key) = pki.ca.sign("localhost", false);
    pki.write("server.crt", &cert);
    pki.write("server.key", &key);
    wait_for_log(&server, "reloaded the TLS certificate", reloads + 1);
    let mut third = tls_connect(ssl, pki.client_config(None));
    assert_eq!(ask(&mut third, 5).unwrap(), 5);
    assert_eq!(
        served(&third),
        CertificateDer::from_pem_slice(cert.as_bytes())
            .unwrap()
            .as_ref()
    );
    assert_eq!(ask(&mut open, 6).unwrap(), 6);
    server.stop();
}

#[test]
fn bad_tls_settings_stop_the_start_with_one_line() {
    let pki = Pki::new();
    let other = Ca::new("other");
    let (_, wrong_key) = other.sign("x", false);
    pki.write("wrong.key", &wrong_key);
    let with = |cert: &str, key: &str| -> Vec<String> {
        [
            "--listeners",
            "SSL://127.0.0.1:0",
            "--tls-cert",
            cert,
            "--tls-key",
            key,
        ]
        .iter()
        .map(|s| s.to_string())
        .collect()
    };
    let missing = pki.arg("missing.crt");
    let line = serve_fails(&with(&missing, &pki.arg("server.key")), &[]);
    assert!(
        line.contains("cannot read the TLS certificate") && line.contains("missing.crt"),
        "{line}"
    );
    let line = serve_fails(&with(&pki.arg("server.crt"), &pki.arg("wrong.key")), &[]);
    assert!(line.contains("does not go with the certificate"), "{line}");
    let line = serve_fails(&with(&pki.arg("server.key"), &pki.arg("server.key")), &[]);
    assert!(line.contains("holds no PEM certificate"), "{line}");
    let line = serve_fails(
        &["--listeners".to_owned(), "SSL://127.0.0.1:0".to_owned()],
        &[],
    );
    assert!(line.contains("needs --tls-cert and --tls-key"), "{line}");
    let line = serve_fails(
        &[
            "--listeners".to_owned(),
            "SASL_SSL://127.0.0.1:0".to_owned(),
        ],
        &[],
    );
    assert!(
        line.contains("SASL listeners need --sasl-mechanisms"),
        "{line}"
    );
    let line = serve_fails(
        &["--listeners".to_owned(), "PLAINTEXT://127.0.0.1".to_owned()],
        &[],
    );
    assert!(line.contains("has no port"), "{line}");
}
