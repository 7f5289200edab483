//! Black-box test: a full data directory is a state, not a failure.
//!
//! A real `sluice serve` on a small tmpfs (mounted by the test: needs root; otherwise the test
//! says why and skips). A filler file takes most of the space, HTTP produces run until the disk
//! is full, and then, while it is full:
//! - produce (HTTP and Kafka), an offset commit and a topic creation fail with clear, retriable
//!   errors, and the failed topic leaves nothing behind;
//! - every acknowledged record reads back, over HTTP and over Kafka;
//! - `/readyz` answers 503 naming the directory and `sluice_data_dir_full` is 1.
//!
//! Then an idempotent Kafka producer (kcat) starts sending while the disk is still full, the
//! filler is deleted, and without a restart: kcat's retries land, appends, commits and topic
//! creation succeed again, `/readyz` is ready, the metric is 0, and in the end every
//! acknowledged record is there exactly once, in order.

mod common;

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::{Server, finish, have_kcat};
use reqwest::StatusCode;
use reqwest::blocking::Client;
use serde_json::{Value, json};

const TOPIC: &str = "fill";
/// Size of the test filesystem: large enough for a few 1 MiB segments, small enough to fill in
/// a second.
const TMPFS_SIZE: &str = "32m";
/// What the filler leaves free for the produce loop.
const LEFT_FOR_RECORDS: u64 = 3 << 20;
/// Records per HTTP produce request, and the size of each value.
const RECORDS_PER_REQUEST: usize = 20;
const VALUE_BYTES: usize = 1000;
/// Bounds on the phases: filling the disk, and the disk coming back to life.
const FILL_TIMEOUT: Duration = Duration::from_secs(60);
const RECOVERY_TIMEOUT: Duration = Duration::from_secs(20);
/// How long kcat may take, start to finish (it retries while the disk is full).
const KCAT_TIMEOUT: Duration = Duration::from_secs(90);

/// A tmpfs mounted for the test, unmounted when dropped (lazily if something still holds it).
/// Declare it before the server, so the server (killed by its PID on drop) goes first.
struct Tmpfs {
    path: PathBuf,
}

impl Tmpfs {
    fn mount(path: &Path) -> Result<Tmpfs, String> {
        std::fs::create_dir_all(path).map_err(|e| e.to_string())?;
        let out = Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={TMPFS_SIZE}"), "tmpfs"])
            .arg(path)
            .output()
            .map_err(|e| format!("cannot run mount: {e}"))?;
        if !out.status.success() {
            return Err(String::from_utf8_lossy(&out.stderr).trim().to_owned());
        }
        Ok(Tmpfs {
            path: path.to_owned(),
        })
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let unmounted = Command::new("umount")
            .arg(&self.path)
            .status()
            .is_ok_and(|s| s.success());
        if !unmounted {
            let _ = Command::new("umount").arg("-l").arg(&self.path).status();
        }
    }
}

fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions and cannot fail.
    unsafe { libc::geteuid() == 0 }
}

fn client() -> Client {
    Client::builder()
        .timeout(Duration::from_secs(30))
        .build()
        .unwrap()
}

/// POSTs `body` as JSON; returns the status, the `Retry-After` header and the JSON answer.
fn post(http: &Client, url: &str, body: &Value) -> (StatusCode, Option<String>, Value) {
    let response = http.post(url).json(body).send().expect("HTTP request");
    let status = response.status();
    let retry_after = response
        .headers()
        .get("retry-after")
        .map(|v| v.to_str().unwrap().to_owned());
    let body = response.json().unwrap_or(Value::Null);
    (status, retry_after, body)
}

fn get_json(http: &Client, url: &str) -> (StatusCode, Value) {
    let response = http.get(url).send().expect("HTTP request");
    (response.status(), response.json().unwrap_or(Value::Null))
}

/// Produces one request of records with values `values` over HTTP, to partition 0.
fn produce(
    http: &Client,
    server: &Server,
    values: &[String],
) -> (StatusCode, Option<String>, Value) {
    let records: Vec<Value> = values
        .iter()
        .map(|v| json!({"value": v, "partition": 0}))
        .collect();
    post(
        http,
        &format!("{}/topics/{TOPIC}/records", server.http_url()),
        &Value::Array(records),
    )
}

/// The values of request `n`: unique, about VALUE_BYTES each.
fn values_of(n: usize) -> Vec<String> {
    (0..RECORDS_PER_REQUEST)
        .map(|i| {
            let mut v = format!("http-{n:06}-{i:02}-");
            v.extend(std::iter::repeat_n('x', VALUE_BYTES - v.len()));
            v
        })
        .collect()
}

/// Every value of partition 0, in offset order, read over HTTP.
fn read_http(http: &Client, server: &Server) -> Vec<String> {
    let mut values = Vec::new();
    let mut offset = 0i64;
    let started = Instant::now();
    loop {
        assert!(started.elapsed() < FILL_TIMEOUT, "HTTP read did not finish");
        let (status, body) = get_json(
            http,
            &format!(
                "{}/topics/{TOPIC}/partitions/0/records?offset={offset}&max_records=5000",
                server.http_url()
            ),
        );
        assert_eq!(status, StatusCode::OK, "HTTP read: {body}");
        for record in body["records"].as_array().unwrap() {
            assert_eq!(
                record["offset"].as_i64().unwrap(),
                offset,
                "offsets in order"
            );
            values.push(record["value"].as_str().unwrap().to_owned());
            offset += 1;
        }
        offset = body["next_offset"].as_i64().unwrap();
        if offset >= body["high_watermark"].as_i64().unwrap() {
            return values;
        }
    }
}

/// Every value of partition 0, in offset order, read with a Kafka consumer (`sluice consume`).
fn read_kafka(server: &Server) -> Vec<String> {
    let run = server.ok(&["consume", TOPIC, "--partition", "0", "--json"], "");
    let mut last = -1;
    run.stdout
        .lines()
        .map(|line| {
            let record: Value = serde_json::from_str(line).unwrap();
            let offset = record["offset"].as_i64().unwrap();
            assert_eq!(offset, last + 1, "Kafka read: offsets in order");
            last = offset;
            record["value"].as_str().unwrap().to_owned()
        })
        .collect()
}

/// Writes `path` in chunks of `chunk` bytes until `bytes` are written or the disk is full.
fn fill(path: &Path, bytes: u64, chunk: usize) -> u64 {
    let mut file = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
        .unwrap();
    let buf = vec![0x5au8; chunk];
    let mut written = 0;
    while written < bytes {
        if file.write_all(&buf).is_err() {
            break;
        }
        written += chunk as u64;
    }
    written
}

/// An idempotent kcat producer of `values` to partition 0, started now.
fn start_kcat(server: &Server) -> std::process::Child {
    Command::new("kcat")
        .args(["-P", "-b", &server.bootstrap(), "-t", TOPIC, "-p", "0"])
        .args(["-X", "enable.idempotence=true"])
        .args(["-X", "message.timeout.ms=60000"])
        .args(["-X", "retry.backoff.ms=200"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn kcat")
}

fn kcat_values(prefix: &str, n: usize) -> Vec<String> {
    (0..n).map(|i| format!("{prefix}-{i:03}")).collect()
}

#[test]
fn a_full_data_directory_is_a_state_that_ends_without_a_restart() {
    if !is_root() {
        eprintln!(
            "SKIPPED disk_full: mounting a small tmpfs to fill needs root (run the tests as root \
             to exercise a real full disk)"
        );
        return;
    }
    if !have_kcat() {
        eprintln!("SKIPPED disk_full: kcat is not installed (it is the idempotent Kafka producer)");
        return;
    }
    let outer = tempfile::tempdir().unwrap();
    let tmpfs = match Tmpfs::mount(&outer.path().join("tmpfs")) {
        Ok(tmpfs) => tmpfs,
        Err(e) => {
            eprintln!("SKIPPED disk_full: cannot mount a tmpfs here ({e})");
            return;
        }
    };
    let data = tempfile::TempDir::new_in(&tmpfs.path).unwrap();
    let data_dir = data.path().to_owned();
    // Dropped before `tmpfs` (declared after it): the server is killed before the unmount.
    let server = Server::start_with_args(data, &["--segment-bytes", "1048576"]);
    let http = client();
    let (status, _, body) = post(
        &http,
        &format!("{}/topics", server.http_url()),
        &json!({"name": TOPIC, "partitions": 1}),
    );
    assert!(status.is_success(), "create topic: {status} {body}");
    let mut expected: Vec<String> = Vec::new();

    // An idempotent producer gets its id now: allocating ids writes a file, which a full disk
    // would refuse (the later producer reuses the block reserved here).
    let warm_up = kcat_values("kcat-warm-up", 3);
    let mut kcat = start_kcat(&server);
    let (exit, _, stderr) = finish(
        &mut kcat,
        (warm_up.join("\n") + "\n").as_bytes(),
        KCAT_TIMEOUT,
    );
    assert!(exit.success(), "kcat: {stderr}");
    expected.extend(warm_up);

    // Fill the disk: a filler file, then HTTP produces until one is refused.
    let free = free_bytes(&tmpfs.path);
    let filler = tmpfs.path.join("filler");
    fill(&filler, free.saturating_sub(LEFT_FOR_RECORDS), 1 << 20);
    let started = Instant::now();
    let mut request = 0;
    let refusal = loop {
        assert!(started.elapsed() < FILL_TIMEOUT, "the disk never filled");
        let values = values_of(request);
        request += 1;
        let (status, retry_after, body) = produce(&http, &server, &values);
        if status == StatusCode::OK {
            expected.extend(values);
            continue;
        }
        break (status, retry_after, body);
    };
    let acked_while_filling = expected.len();
    eprintln!("disk full after {acked_while_filling} acknowledged records");
    assert!(
        acked_while_filling > 1000,
        "too few records fit: {acked_while_filling}"
    );
    let (status, retry_after, body) = refusal;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE, "{body}");
    assert!(retry_after.is_some(), "503 carries Retry-After");
    let error = body["error"].as_str().unwrap();
    assert!(error.contains("data directory is full"), "{error}");
    // Whatever room the cut-back append left, take it too, so that every write needs room.
    fill(&tmpfs.path.join("filler-rest"), u64::MAX, 4096);

    // While full: writes fail with clear, retriable errors ...
    for _ in 0..3 {
        let (status, _, body) = produce(&http, &server, &values_of(999_999));
        assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE, "{body}");
    }
    let big = "k".repeat(8000);
    let run = server.run(&["produce", TOPIC, "--partition", "0"], &format!("{big}\n"));
    assert!(
        !run.status.success(),
        "Kafka produce on a full disk must fail"
    );
    assert!(
        run.stderr.contains("KAFKA_STORAGE_ERROR") && run.stderr.contains("data directory is full"),
        "{}",
        run.stderr
    );
    let commit = json!({"offsets": [{"topic": TOPIC, "partition": 0, "offset": 7, "metadata": "m".repeat(4000)}]});
    let commit_url = format!("{}/groups/billing/offsets", server.http_url());
    let (status, _, body) = post(&http, &commit_url, &commit);
    assert!(
        status.is_server_error(),
        "commit on a full disk: {status} {body}"
    );
    let (status, _, body) = post(
        &http,
        &format!("{}/topics", server.http_url()),
        &json!({"name": "late", "partitions": 2}),
    );
    assert!(
        !status.is_success(),
        "topic create on a full disk: {status} {body}"
    );
    assert!(
        body.to_string().contains("data directory is full"),
        "{body}"
    );
    let leftovers: Vec<String> = std::fs::read_dir(data_dir.join("topics"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|name| name != TOPIC)
        .collect();
    assert!(
        leftovers.is_empty(),
        "half-made topic left behind: {leftovers:?}"
    );

    // ... reads work, over HTTP and Kafka ...
    assert_eq!(read_http(&http, &server), expected, "HTTP read while full");
    assert_eq!(read_kafka(&server), expected, "Kafka read while full");

    // ... and the state is observable.
    let (status, body) = get_json(&http, &format!("{}/readyz", server.http_url()));
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE, "{body}");
    assert_eq!(body["status"], "data_dir_full", "{body}");
    assert_eq!(
        body["data_dir"].as_str().unwrap(),
        data_dir.to_str().unwrap()
    );
    assert_eq!(server.metric("sluice_data_dir_full"), 1.0);
    // The first refused produce, three more, the Kafka produce, the commit, the topic.
    assert!(server.metric("sluice_data_dir_no_space_errors_total") >= 7.0);

    // An idempotent producer starts while the disk is full: it gets KAFKA_STORAGE_ERROR and
    // retries. Then space comes back.
    let during = kcat_values("kcat-during", 50);
    let kcat_run = {
        let mut kcat = start_kcat(&server);
        let input = during.join("\n") + "\n";
        std::thread::spawn(move || finish(&mut kcat, input.as_bytes(), KCAT_TIMEOUT))
    };
    std::thread::sleep(Duration::from_secs(2));
    let (status, _) = get_json(&http, &format!("{}/readyz", server.http_url()));
    assert_eq!(
        status,
        StatusCode::SERVICE_UNAVAILABLE,
        "still full while kcat retries"
    );
    std::fs::remove_file(&filler).unwrap();
    std::fs::remove_file(tmpfs.path.join("filler-rest")).unwrap();

    // Without a restart: ready again within a bounded time ...
    let freed_at = Instant::now();
    loop {
        let (status, body) = get_json(&http, &format!("{}/readyz", server.http_url()));
        if status == StatusCode::OK {
            assert_eq!(body["status"], "ready");
            break;
        }
        assert!(
            freed_at.elapsed() < RECOVERY_TIMEOUT,
            "not ready after space came back: {body}"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    eprintln!("ready {:?} after space came back", freed_at.elapsed());
    // ... kcat's retries land, each record once ...
    let (exit, _, stderr) = kcat_run.join().expect("kcat within its timeout");
    assert!(
        exit.success() && !stderr.contains("Delivery failed"),
        "kcat: {stderr}"
    );
    expected.extend(during);
    // ... HTTP produce, offset commits and topic creation work again.
    for n in 0..10 {
        let values = values_of(1_000_000 + n);
        let (status, _, body) = produce(&http, &server, &values);
        assert_eq!(
            status,
            StatusCode::OK,
            "produce after space came back: {body}"
        );
        expected.extend(values);
    }
    let (status, _, body) = post(&http, &commit_url, &commit);
    assert_eq!(
        status,
        StatusCode::OK,
        "commit after space came back: {body}"
    );
    let (status, _, body) = post(
        &http,
        &format!("{}/topics", server.http_url()),
        &json!({"name": "late", "partitions": 2}),
    );
    assert!(
        status.is_success(),
        "topic create after space came back: {status} {body}"
    );
    assert_eq!(server.metric("sluice_data_dir_full"), 0.0);
    assert!(server.metric("sluice_data_dir_free_bytes") > 0.0);

    // Every acknowledged record, exactly once, in order.
    assert_eq!(read_http(&http, &server), expected, "HTTP read at the end");
    assert_eq!(read_kafka(&server), expected, "Kafka read at the end");
    // One warning when the directory became full, one line when it had room again.
    assert_eq!(
        server
            .log_lines_with("data directory is full: writes that need space fail")
            .len(),
        1
    );
    assert_eq!(
        server.log_lines_with("data directory has room again").len(),
        1
    );
    let (exit, data) = server.stop();
    assert!(exit.success(), "clean shutdown");
    drop(data);
    drop(tmpfs);
}

/// Free bytes of the filesystem holding `path`, as `df` reports them to an unprivileged user.
fn free_bytes(path: &Path) -> u64 {
    let out = Command::new("df")
        .args(["--block-size=1", "--output=avail"])
        .arg(path)
        .output()
        .expect("run df");
    assert!(
        out.status.success(),
        "df: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8_lossy(&out.stdout);
    let avail = text.lines().nth(1).unwrap_or_default().trim();
    avail
        .parse()
        .unwrap_or_else(|e| panic!("df printed {text:?}: {e}"))
}
