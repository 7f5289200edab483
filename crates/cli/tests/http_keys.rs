//! Black-box tests of HTTP API keys: `sluice api-key new|hash`, keys from the config file of
//! a real `sluice serve`, their reload without a restart, and the refusal to serve an open API
//! on a non-loopback address.

mod common;

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::{Server, finish, run_cli};
use sha2::{Digest, Sha256};

/// A key made by `sluice api-key new ARGS`: the key and its `[[http_api_keys]]` block.
struct NewKey {
    key: String,
    block: String,
    sha256: String,
}

fn new_key(args: &[&str]) -> NewKey {
    let mut all = vec!["api-key", "new"];
    all.extend_from_slice(args);
    // Offline: the bootstrap address is not used.
    let run = run_cli("127.0.0.1:1", &all, "");
    assert!(run.status.success(), "api-key new: {}", run.stderr);
    let (key, rest) = run.stdout.split_once('\n').expect("key line");
    let block = &rest[rest.find("[[http_api_keys]]").expect("config block")..];
    let parsed: toml::Table = toml::from_str(block).expect("the block is TOML");
    let entry = &parsed["http_api_keys"].as_array().expect("array of tables")[0];
    NewKey {
        key: key.to_owned(),
        block: block.to_owned(),
        sha256: entry["sha256"].as_str().unwrap().to_owned(),
    }
}

fn hex_sha256(text: &str) -> String {
    Sha256::digest(text.as_bytes())
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

#[test]
fn api_key_new_and_hash_round_trip() {
    let made = new_key(&[
        "--name", "billing", "--read", "orders.*", "--read", "audit", "--write", "invoices",
    ]);
    assert!(made.key.starts_with("sk_"), "{}", made.key);
    // 32 random bytes, URL-safe base64 without padding: 43 characters.
    assert_eq!(made.key.len(), 3 + 43, "{}", made.key);
    assert!(
        made.key[3..]
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
    );
    assert_eq!(made.sha256, hex_sha256(&made.key));
    let parsed: toml::Table = toml::from_str(&made.block).unwrap();
    let entry = &parsed["http_api_keys"][0];
    assert_eq!(entry["name"].as_str(), Some("billing"));
    let list = |k: &str| -> Vec<String> {
        entry[k]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v.as_str().unwrap().to_owned())
            .collect()
    };
    assert_eq!(list("read"), ["orders.*", "audit"]);
    assert_eq!(list("write"), ["invoices"]);
    assert!(list("admin").is_empty());

    // `hash` gives the same digest; echo's trailing newline is not part of the key.
    let run = run_cli(
        "127.0.0.1:1",
        &["api-key", "hash"],
        &format!("{}\n", made.key),
    );
    assert!(run.status.success(), "{}", run.stderr);
    assert_eq!(run.stdout.trim(), made.sha256);

    // Two keys are never the same.
    assert_ne!(new_key(&[]).key, new_key(&[]).key);

    // Bad input says what to fix.
    let run = run_cli("127.0.0.1:1", &["api-key", "hash"], "");
    assert!(!run.status.success());
    assert!(run.stderr.contains("no key on stdin"), "{}", run.stderr);
    let run = run_cli(
        "127.0.0.1:1",
        &["api-key", "new", "--write", "orders,invoices"],
        "",
    );
    assert!(!run.status.success());
    assert!(
        run.stderr.contains("orders,invoices") && run.stderr.contains("one pattern per"),
        "{}",
        run.stderr
    );
    let help = run_cli("127.0.0.1:1", &["api-key", "new", "--help"], "");
    assert!(help.stdout.contains("Example"), "{}", help.stdout);
}

#[test]
fn keys_from_the_config_file_apply_and_reload_without_restart() {
    let first = new_key(&["--name", "first", "--read", "*"]);
    let second = new_key(&["--name", "second"]);
    let config_dir = tempfile::tempdir().unwrap();
    let config = config_dir.path().join("sluice.toml");
    std::fs::write(&config, &first.block).unwrap();
    let server = Server::start_with_args(
        tempfile::tempdir().unwrap(),
        &["--config", config.to_str().unwrap()],
    );
    let client = reqwest::blocking::Client::builder()
        .timeout(Duration::from_secs(10))
        .build()
        .unwrap();
    let metrics = format!("{}/metrics", server.http_url());
    let status = |key: Option<&str>| {
        let mut request = client.get(&metrics);
        if let Some(key) = key {
            request = request.bearer_auth(key);
        }
        request.send().unwrap().status().as_u16()
    };
    let r = client.get(&metrics).send().unwrap();
    assert_eq!(r.status(), 401);
    assert_eq!(r.headers()["www-authenticate"], "Bearer");
    let body: serde_json::Value = r.json().unwrap();
    assert!(body["error"].is_string(), "{body}");
    assert_eq!(status(Some(&first.key)), 200);
    assert_eq!(status(Some(&second.key)), 401);
    assert_eq!(
        client
            .get(format!("{}/healthz", server.http_url()))
            .send()
            .unwrap()
            .status(),
        200
    );

    // Add the second key to the file: it works within a few seconds, without a restart.
    std::fs::write(&config, format!("{}\n{}", first.block, second.block)).unwrap();
    let started = Instant::now();
    while status(Some(&second.key)) != 200 {
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "the new key was not picked up"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    assert_eq!(status(Some(&first.key)), 200);

    // A broken file keeps the current keys.
    std::fs::write(&config, "http_api_keys = 3\n").unwrap();
    std::thread::sleep(Duration::from_millis(2500));
    assert_eq!(status(Some(&second.key)), 200);
    let (exit, _) = server.stop();
    assert!(exit.success());
}

#[test]
fn serve_refuses_an_open_api_on_a_non_loopback_address() {
    let dir = tempfile::tempdir().unwrap();
    let mut child = Command::new(env!("CARGO_BIN_EXE_sluice"))
        .args([
            "serve",
            "--kafka-addr",
            "127.0.0.1:0",
            "--http-addr",
            "0.0.0.0:0",
            "--data-dir",
        ])
        .arg(dir.path())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn sluice");
    // It must refuse before binding anything, so it exits at once.
    let (status, _, stderr) = finish(&mut child, b"", Duration::from_secs(20));
    assert!(!status.success());
    assert!(stderr.contains("--http-allow-anonymous"), "{stderr}");
    assert!(stderr.contains("0.0.0.0"), "{stderr}");
    assert!(!stderr.contains("listening on"), "{stderr}");
}
