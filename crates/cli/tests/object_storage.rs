//! Object-storage mode (`sluice serve --storage s3://BUCKET/PREFIX`) against a real MinIO that
//! each test starts on free loopback ports: the bucket alone brings back every acknowledged
//! record, topic and committed offset; a second broker on the same prefix is fenced; bad
//! bucket settings give one clear line; SIGKILLs under load and a MinIO outage lose nothing
//! acknowledged.

mod common;

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::{Server, finish, serve_fails};
use serde_json::Value;
use sluice_testkit::MinioServer;

/// `serve` arguments for object-storage mode on `prefix` of MinIO's bucket, with a short
/// linger so the tests run fast.
fn storage_args(minio: &MinioServer, prefix: &str) -> Vec<String> {
    vec![
        "--storage".into(),
        format!("s3://{}/{prefix}", minio.bucket()),
        "--object-linger-ms".into(),
        "20".into(),
    ]
}

fn start(minio: &MinioServer, prefix: &str, dir: tempfile::TempDir) -> Server {
    let args = storage_args(minio, prefix);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    Server::start_with_env(dir, &args, &minio.env_vars())
}

fn json_lines(text: &str) -> Vec<Value> {
    text.lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

/// (partition, offset, value) of every record of `topic`, sorted.
fn records(server: &Server, topic: &str) -> Vec<(i64, i64, String)> {
    let out = server.ok(&["consume", topic, "--json"], "").stdout;
    let mut all: Vec<(i64, i64, String)> = json_lines(&out)
        .iter()
        .map(|r| {
            (
                r["partition"].as_i64().unwrap(),
                r["offset"].as_i64().unwrap(),
                r["value"].as_str().unwrap().to_owned(),
            )
        })
        .collect();
    all.sort();
    all
}

/// `sluice group describe GROUP` without the coordinator line (its port changes).
fn describe_offsets(server: &Server, group: &str) -> String {
    let out = server.ok(&["group", "describe", group], "").stdout;
    out.lines()
        .filter(|l| !l.starts_with("coordinator:"))
        .map(|l| format!("{l}\n"))
        .collect()
}

fn sigkill(server: Server) {
    let pid = server.pid().to_string();
    Command::new("kill").args(["-KILL", &pid]).status().unwrap();
    drop(server);
}

#[test]
fn the_bucket_alone_brings_back_records_topics_and_committed_offsets() {
    let minio = MinioServer::start();
    let server = start(&minio, "cluster-a", tempfile::tempdir().unwrap());
    let url = format!("s3://{}/cluster-a", minio.bucket());
    assert_eq!(
        server.log_lines_with(&format!("storage: {url}")).len(),
        1,
        "the start log names the bucket"
    );
    server.ok(&["topic", "create", "orders", "--partitions", "3"], "");
    server.ok(&["topic", "create", "audit"], "");
    let input: String = (0..300).map(|i| format!("order-{i}\n")).collect();
    server.ok(&["produce", "orders"], &input);
    server.ok(&["produce", "audit"], "one\ntwo\n");
    server.ok(
        &[
            "group",
            "reset-offsets",
            "billing",
            "--topic",
            "orders",
            "--to-offset",
            "7",
            "--execute",
        ],
        "",
    );
    let before = records(&server, "orders");
    assert_eq!(before.len(), 300);
    let metrics = reqwest::blocking::get(format!("{}/metrics", server.http_url()))
        .unwrap()
        .text()
        .unwrap();
    let value = |name: &str| -> f64 {
        metrics
            .lines()
            .find_map(|l| l.strip_prefix(&format!("{name} ")))
            .unwrap_or_else(|| panic!("{name} missing from /metrics"))
            .parse()
            .unwrap()
    };
    assert!(value("sluice_objects_committed_total") >= 3.0);
    assert_eq!(value("sluice_object_writer_lease_writable"), 1.0);
    assert_eq!(value("sluice_objects_abandoned_total"), 0.0);
    // Every read so far was a tail read: served from memory, no GET.
    assert_eq!(value("sluice_object_gets_total"), 0.0);
    let describe = describe_offsets(&server, "billing");
    let cluster_id = common::cluster_id(server.port);

    // The broker dies, and its whole data directory with it.
    sigkill(server);

    let server = start(&minio, "cluster-a", tempfile::tempdir().unwrap());
    assert_eq!(
        common::cluster_id(server.port),
        cluster_id,
        "the bucket keeps the cluster id"
    );
    let topics = server.ok(&["topic", "list"], "").stdout;
    assert_eq!(topics, "audit\t1\norders\t3\n");
    assert_eq!(records(&server, "orders"), before);
    assert_eq!(records(&server, "audit").len(), 2);
    assert_eq!(describe_offsets(&server, "billing"), describe);
    assert!(describe.contains("orders  2          7"), "{describe}");
    // And it goes on writing after the rebuild: new records follow the old ones.
    server.ok(&["produce", "audit"], "three\n");
    let audit = records(&server, "audit");
    assert_eq!(audit.last().unwrap(), &(0, 2, "three".to_owned()));

    // A deleted topic stays deleted across a restart from the bucket.
    server.ok(&["topic", "delete", "audit"], "");
    let (status, dir) = server.stop();
    assert!(status.success());
    drop(dir);
    let server = start(&minio, "cluster-a", tempfile::tempdir().unwrap());
    assert_eq!(server.ok(&["topic", "list"], "").stdout, "orders\t3\n");
    assert_eq!(records(&server, "orders"), before);
}

#[test]
fn a_second_broker_on_the_same_prefix_is_fenced_and_the_first_keeps_working() {
    let minio = MinioServer::start();
    let first = start(&minio, "shared", tempfile::tempdir().unwrap());
    first.ok(&["topic", "create", "t"], "");
    first.ok(&["produce", "t"], "a\nb\n");

    let line = serve_fails(&storage_args(&minio, "shared"), &minio.env_vars());
    assert!(
        line.contains("another broker") && line.contains("shared"),
        "{line}"
    );

    first.ok(&["produce", "t"], "c\n");
    let values: Vec<String> = records(&first, "t").into_iter().map(|r| r.2).collect();
    assert_eq!(values, ["a", "b", "c"]);
}

#[test]
fn bad_bucket_settings_give_one_clear_line() {
    let minio = MinioServer::start();
    let env = minio.env_vars();

    let missing = vec!["--storage".to_owned(), "s3://no-such-bucket/p".to_owned()];
    let line = serve_fails(&missing, &env);
    assert!(
        line.contains("no-such-bucket") && line.contains("does not exist"),
        "{line}"
    );

    let mut wrong = env.clone();
    for (k, v) in &mut wrong {
        if *k == "AWS_SECRET_ACCESS_KEY" {
            *v = "not-the-secret-at-all-0000000000000000".into();
        }
    }
    let line = serve_fails(&storage_args(&minio, "p"), &wrong);
    assert!(line.contains("refused the credentials"), "{line}");

    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let mut unreachable = env.clone();
    for (k, v) in &mut unreachable {
        if *k == "AWS_ENDPOINT_URL" {
            *v = format!("http://127.0.0.1:{port}");
        }
    }
    let line = serve_fails(&storage_args(&minio, "p"), &unreachable);
    assert!(line.contains("cannot reach"), "{line}");
}

#[test]
fn sigkills_under_load_lose_nothing_acknowledged() {
    let minio = MinioServer::start();
    let tmp = tempfile::tempdir().unwrap();
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let bootstrap = format!("127.0.0.1:{port}");
    let env: String = minio
        .env_vars()
        .iter()
        .map(|(k, v)| format!("{k}={v} "))
        .collect();
    let cmd = format!(
        "env {env}{} serve --data-dir {} --kafka-addr {bootstrap} --http-addr off --storage s3://{}/kills --object-linger-ms 25",
        env!("CARGO_BIN_EXE_sluice"),
        tmp.path().join("data").display(),
        minio.bucket(),
    );
    let workload = "name = \"object-kills\"\npartitions = 3\nproducers = 2\nconsumers = 1\nrecord_size = 128\nkeys = true\nproducer_rate = 1500\nwarmup_s = 0\nduration_s = 8\ninterval_s = 0.5\n\n[correctness]\nkills = 3\nrestart_delay_s = 0.2\nsettle_timeout_s = 90\n";
    let file = tmp.path().join("kills.toml");
    std::fs::write(&file, workload).unwrap();
    let out = tmp.path().join("results");
    let mut child = Command::new(env!("CARGO_BIN_EXE_sluice"))
        .args(["bench", "correctness"])
        .arg(&file)
        .arg("--out")
        .arg(&out)
        .args(["--quiet", "-b", &bootstrap, "--broker-cmd", &cmd])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let (status, stdout, stderr) = finish(&mut child, b"", Duration::from_secs(300));
    assert!(status.success(), "{stdout}\n{stderr}");
    let dir = stdout
        .lines()
        .find_map(|l| l.strip_prefix("results: "))
        .expect("results line");
    let campaign: Value = serde_json::from_str(
        &std::fs::read_to_string(format!("{}/campaign.json", dir.trim())).unwrap(),
    )
    .unwrap();
    let report = &campaign["points"][0]["repeats"][0]["correctness"];
    assert_eq!(report["kills"], 3, "{report}");
    for fault in ["lost", "duplicated", "out_of_order", "corrupted"] {
        assert_eq!(report[fault], 0, "{fault}: {report}");
    }
    assert_eq!(report["passed"], true, "{report}");
    assert!(report["acked"].as_u64().unwrap() > 1000, "{report}");
}

#[test]
fn a_minio_outage_delays_produces_and_loses_nothing_acknowledged() {
    let minio = MinioServer::start();
    let server = start(&minio, "outage", tempfile::tempdir().unwrap());
    server.ok(&["topic", "create", "t", "--partitions", "2"], "");
    let bootstrap = server.bootstrap();
    // Producers run through the outage: each `sluice produce` sends 20 numbered records and
    // reports success only once they are acknowledged.
    let stop_at = Instant::now() + Duration::from_secs(22);
    let producer = std::thread::spawn(move || {
        // (first record number, when its produce started), for every acknowledged produce.
        let mut acked = Vec::new();
        let mut failed = 0;
        let mut n = 0;
        while Instant::now() < stop_at {
            let lines: String = (n..n + 20).map(|i| format!("r{i}\n")).collect();
            let sent = Instant::now();
            let run = common::run_cli(&bootstrap, &["produce", "t"], &lines);
            if run.status.success() {
                acked.push((n, sent));
            } else {
                failed += 1;
            }
            n += 20;
            std::thread::sleep(Duration::from_millis(100));
        }
        (acked, failed)
    });
    std::thread::sleep(Duration::from_secs(3));
    minio.pause();
    std::thread::sleep(Duration::from_secs(10));
    minio.resume();
    let resumed = Instant::now();
    let (acked, failed) = producer.join().unwrap();
    eprintln!("{} produces acknowledged, {failed} failed", acked.len());
    assert!(
        acked.iter().any(|(_, sent)| *sent > resumed),
        "no produce was acknowledged after MinIO came back"
    );
    let stored: std::collections::HashSet<String> =
        records(&server, "t").into_iter().map(|r| r.2).collect();
    for (first, _) in acked {
        for i in first..first + 20 {
            assert!(
                stored.contains(&format!("r{i}")),
                "acknowledged r{i} is missing"
            );
        }
    }
    // Something was produced after MinIO came back.
    let run = server.ok(&["produce", "t"], "after\n");
    assert!(run.status.success());
}

#[test]
fn the_put_timeout_gives_up_an_object_after_that_long() {
    let minio = MinioServer::start();
    let mut args = storage_args(&minio, "put-timeout");
    args.extend(["--object-put-timeout-ms".into(), "1000".into()]);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let server = Server::start_with_env(tempfile::tempdir().unwrap(), &args, &minio.env_vars());
    server.ok(&["topic", "create", "t", "--partitions", "1"], "");
    server.ok(&["produce", "t"], "before\n");
    assert_eq!(server.metric("sluice_objects_abandoned_total"), 0.0);

    // With MinIO stopped, a produce's object is given up after about a second (not 30 s), and
    // the produce fails with a retriable error that says so.
    minio.pause();
    let bootstrap = server.bootstrap();
    let paused = Instant::now();
    let producer =
        std::thread::spawn(move || common::run_cli(&bootstrap, &["produce", "t"], "during\n"));
    while server.metric("sluice_objects_abandoned_total") < 1.0 {
        assert!(
            paused.elapsed() < Duration::from_secs(8),
            "no object given up within 8 s of a 1 s PUT timeout"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    let run = producer.join().unwrap();
    let failed_after = paused.elapsed();
    minio.resume();
    assert!(!run.status.success());
    assert!(
        run.stderr.contains("KAFKA_STORAGE_ERROR") && run.stderr.contains("gave up writing object"),
        "{}",
        run.stderr
    );
    assert!(failed_after < Duration::from_secs(8), "{failed_after:?}");
    // MinIO is back: produces are acknowledged again, and the given-up record is a gap that
    // is never served (even if its PUT reached MinIO after all).
    server.ok(&["produce", "t"], "after\n");
    let values: Vec<String> = records(&server, "t").into_iter().map(|r| r.2).collect();
    assert_eq!(values, ["before", "after"]);
    let ready = reqwest::blocking::get(format!("{}/readyz", server.http_url())).unwrap();
    assert_eq!(ready.status(), 200);
}

#[test]
fn the_users_and_acls_live_in_the_bucket_and_come_back_with_a_new_data_directory() {
    use sluice_protocol::kafka_protocol::messages::*;
    use sluice_protocol::kafka_protocol::protocol::StrBytes;
    let minio = MinioServer::start();
    let first = tempfile::tempdir().unwrap();
    // A user made before the first start goes to the bucket with that start.
    let mut child = Command::new(env!("CARGO_BIN_EXE_sluice"))
        .args([
            "user",
            "add",
            "admin",
            "--mechanism",
            "SCRAM-SHA-256",
            "--password-stdin",
        ])
        .arg("--data-dir")
        .arg(first.path())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let (status, _, stderr) = finish(&mut child, b"admin-secret", common::COMMAND_TIMEOUT);
    assert!(status.success(), "{stderr}");
    let mut args = storage_args(&minio, "secure");
    args.extend(
        [
            "--listeners",
            "PLAINTEXT://127.0.0.1:0,SASL_PLAINTEXT://127.0.0.1:0",
            "--sasl-mechanisms",
            "SCRAM-SHA-256",
            "--authorizer",
            "acl",
            // PLAINTEXT clients are User:ANONYMOUS: a super user here, so the raw requests
            // below need no SASL exchange.
            "--super-users",
            "User:admin;User:ANONYMOUS",
        ]
        .map(str::to_owned),
    );
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let server = Server::start_with_env(first, &args, &minio.env_vars());
    let created = common::kafka_call(
        server.port,
        ApiKey::CreateAcls,
        3,
        RequestKind::CreateAcls(CreateAclsRequest::default().with_creations(vec![
            create_acls_request::AclCreation::default()
                .with_resource_type(2)
                .with_resource_name(StrBytes::from_static_str("orders"))
                .with_resource_pattern_type(3)
                .with_principal(StrBytes::from_static_str("User:alice"))
                .with_host(StrBytes::from_static_str("*"))
                .with_operation(3)
                .with_permission_type(3),
        ])),
    );
    let ResponseKind::CreateAcls(created) = created else {
        panic!("{created:?}")
    };
    assert_eq!(created.results[0].error_code, 0, "{created:?}");
    let (status, old_dir) = server.stop();
    assert!(status.success());
    drop(old_dir);

    // A new, empty data directory on the same prefix: the users and ACLs come back.
    let second = tempfile::tempdir().unwrap();
    let server = Server::start_with_env(second, &args, &minio.env_vars());
    let described = common::kafka_call(
        server.port,
        ApiKey::DescribeAcls,
        3,
        RequestKind::DescribeAcls(
            DescribeAclsRequest::default()
                .with_resource_type_filter(1)
                .with_resource_name_filter(None)
                .with_pattern_type_filter(1)
                .with_principal_filter(None)
                .with_host_filter(None)
                .with_operation(1)
                .with_permission_type(1),
        ),
    );
    let ResponseKind::DescribeAcls(described) = described else {
        panic!("{described:?}")
    };
    assert_eq!(described.error_code, 0);
    assert_eq!(described.resources.len(), 1, "{described:?}");
    assert_eq!(
        described.resources[0].acls[0].principal.as_str(),
        "User:alice"
    );
    let users = common::kafka_call(
        server.port,
        ApiKey::DescribeUserScramCredentials,
        0,
        RequestKind::DescribeUserScramCredentials(
            DescribeUserScramCredentialsRequest::default().with_users(None),
        ),
    );
    let ResponseKind::DescribeUserScramCredentials(users) = users else {
        panic!("{users:?}")
    };
    let names: Vec<&str> = users.results.iter().map(|r| r.user.as_str()).collect();
    assert_eq!(names, ["admin"], "{users:?}");
    // Offline changes to this data directory would be lost to the bucket's copy: refused.
    let (status, dir) = server.stop();
    assert!(status.success());
    let out = Command::new(env!("CARGO_BIN_EXE_sluice"))
        .args(["user", "delete", "admin"])
        .arg("--data-dir")
        .arg(dir.path())
        .output()
        .unwrap();
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("object-storage broker"), "{stderr}");
}
