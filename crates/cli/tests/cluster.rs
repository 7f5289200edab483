//! Cluster mode (`sluice serve --storage s3://... --metadata postgres://...`): several brokers
//! on one MinIO bucket and one PostgreSQL database, each started by the test on free loopback
//! ports: what is written through one broker is read through another, every broker lists
//! the live ones, and bad metadata settings stop a broker with one line.

mod common;

use std::time::{Duration, Instant};

use common::{Server, kcat, serve_fails};
use sluice_testkit::{MinioServer, PostgresServer};

/// `serve` arguments for cluster mode on `prefix` of MinIO's bucket and `pg`'s database, with
/// a short linger so the tests run fast.
fn cluster_args(minio: &MinioServer, prefix: &str, metadata: &str) -> Vec<String> {
    vec![
        "--storage".into(),
        format!("s3://{}/{prefix}", minio.bucket()),
        "--metadata".into(),
        metadata.into(),
        "--object-linger-ms".into(),
        "20".into(),
    ]
}

fn start(minio: &MinioServer, pg: &PostgresServer, prefix: &str) -> Server {
    let args = cluster_args(minio, prefix, &pg.url());
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    Server::start_with_env(tempfile::tempdir().unwrap(), &args, &minio.env_vars())
}

/// Values of `topic` read through `server` from the beginning, in offset order per partition.
fn values(server: &Server, topic: &str) -> Vec<String> {
    let out = server.ok(&["consume", topic], "").stdout;
    out.lines().map(str::to_owned).collect()
}

/// Waits until `check` holds, for at most `within`.
fn eventually(within: Duration, what: &str, mut check: impl FnMut() -> bool) {
    let started = Instant::now();
    while !check() {
        assert!(started.elapsed() < within, "{what} not within {within:?}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[test]
fn written_through_one_broker_read_through_another() {
    let minio = MinioServer::start();
    let pg = PostgresServer::start();
    let a = start(&minio, &pg, "c1");
    let b = start(&minio, &pg, "c1");
    assert_eq!(a.log_lines_with("metadata: postgres://127.0.0.1:").len(), 1);
    let id = common::cluster_id(a.port);
    sluice_broker::config::check_cluster_id(&id).unwrap();
    assert_eq!(
        common::cluster_id(b.port),
        id,
        "two brokers, two cluster ids"
    );
    assert!(
        a.log_lines_with(pg.password()).is_empty(),
        "the password was logged"
    );
    a.ok(&["topic", "create", "orders", "--partitions", "3"], "");
    let input: Vec<String> = (0..30).map(|i| format!("order-{i}")).collect();
    a.ok(&["produce", "orders"], &(input.join("\n") + "\n"));
    eventually(Duration::from_secs(10), "the topic on broker B", || {
        b.run(&["topic", "describe", "orders"], "").status.success()
    });
    let mut got = values(&b, "orders");
    got.sort();
    let mut want = input.clone();
    want.sort();
    assert_eq!(got, want);
    // Both brokers answer the same offsets.
    let watermarks = |s: &Server| -> Vec<i64> {
        let t: serde_json::Value =
            reqwest::blocking::get(format!("{}/topics/orders", s.http_url()))
                .unwrap()
                .json()
                .unwrap();
        t["partitions"]
            .as_array()
            .unwrap()
            .iter()
            .map(|p| p["high_watermark"].as_i64().unwrap())
            .collect()
    };
    assert_eq!(watermarks(&a), vec![10, 10, 10]);
    assert_eq!(watermarks(&b), vec![10, 10, 10]);

    // The brokers' own series: commits, their durations, the live registration.
    assert!(a.metric("sluice_cluster_commits_total") >= 1.0);
    assert!(a.metric("sluice_cluster_commit_duration_seconds_count") >= 1.0);
    assert_eq!(b.metric("sluice_cluster_registration_live"), 1.0);
    assert_eq!(b.metric("sluice_cluster_batches_refused_total"), 0.0);
    let ready = reqwest::blocking::get(format!("{}/readyz", b.http_url())).unwrap();
    assert_eq!(ready.status(), 200);

    // Every broker lists both, once it has seen the other's registration (the registry is
    // read again every second; a loaded machine can be later than that).
    let deadline = Instant::now() + Duration::from_secs(15);
    let mut listing = kcat(&["-b", &b.bootstrap(), "-L"], "");
    while !listing.contains("2 brokers") && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(250));
        listing = kcat(&["-b", &b.bootstrap(), "-L"], "");
    }
    assert!(listing.contains("2 brokers"), "{listing}");
}

#[test]
fn bad_metadata_settings_stop_the_broker_with_one_line() {
    let minio = MinioServer::start();
    let pg = PostgresServer::start();
    let env = minio.env_vars();
    let args = |url: &str| cluster_args(&minio, "bad", url);

    // Nothing listens there.
    let closed = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let line = serve_fails(
        &args(&format!("postgres://sluice:pw@127.0.0.1:{closed}/sluice")),
        &env,
    );
    assert!(
        line.contains("cannot reach PostgreSQL at postgres://127.0.0.1:"),
        "{line}"
    );
    assert!(!line.contains(":pw@"), "{line}");

    // A wrong password.
    let wrong = pg.url().replace(pg.password(), "not-the-password");
    let line = serve_fails(&args(&wrong), &env);
    assert!(
        line.contains("refused user `sluice`") && line.contains("password"),
        "{line}"
    );
    assert!(!line.contains("not-the-password"), "{line}");

    // Not a PostgreSQL URL, and --metadata without a bucket.
    let line = serve_fails(&args("mysql://a:b@127.0.0.1/db"), &env);
    assert!(line.contains("invalid --metadata"), "{line}");
    let line = serve_fails(&["--metadata".into(), pg.url()], &env);
    assert!(line.contains("--metadata needs --storage"), "{line}");

    // A database a newer Sluice migrated.
    let ok = start(&minio, &pg, "bad");
    drop(ok);
    pg.psql(
        "sluice",
        "INSERT INTO sluice.schema_migrations (version, name, checksum) VALUES (999, 'future', 0)",
    );
    let line = serve_fails(&args(&pg.url()), &env);
    assert!(
        line.contains("schema version 999") && line.contains("upgrade"),
        "{line}"
    );

    // A database bound to another bucket prefix.
    pg.psql(
        "sluice",
        "DELETE FROM sluice.schema_migrations WHERE version = 999",
    );
    let line = serve_fails(&cluster_args(&minio, "other", &pg.url()), &env);
    assert!(line.contains("bad") && line.contains("other"), "{line}");
}

/// The number of brokers `server`'s Metadata lists.
fn brokers_listed(server: &Server) -> usize {
    let listing = kcat(&["-b", &server.bootstrap(), "-L", "-m", "5"], "");
    listing
        .lines()
        .find_map(|l| l.trim().strip_suffix(" brokers:"))
        .or_else(|| {
            listing
                .lines()
                .find_map(|l| l.trim().strip_suffix(" broker:"))
        })
        .and_then(|n| n.trim().parse().ok())
        .unwrap_or(0)
}

/// `count` numbered records `tag-0`, `tag-1`, ... as produce input.
fn numbered(tag: &str, count: usize) -> String {
    (0..count).map(|i| format!("{tag}-{i}\n")).collect()
}

#[test]
fn a_killed_broker_leaves_the_cluster_and_the_others_carry_on() {
    let minio = MinioServer::start();
    let pg = PostgresServer::start();
    let a = start(&minio, &pg, "kill");
    let b = start(&minio, &pg, "kill");
    let c = start(&minio, &pg, "kill");
    eventually(Duration::from_secs(10), "three brokers listed", || {
        brokers_listed(&a) == 3
    });
    // Produced at once after the create: the brokers that did not create the topic learn of
    // it from the produce itself.
    a.ok(&["topic", "create", "events", "--partitions", "6"], "");
    a.ok(&["produce", "events"], &numbered("before", 60));

    // B's node id: the broker listed at its port.
    let listing = kcat(&["-b", &b.bootstrap(), "-L"], "");
    let b_id = listing
        .lines()
        .find(|l| l.contains(&format!(":{} ", b.port)) || l.ends_with(&format!(":{}", b.port)))
        .and_then(|l| l.trim().strip_prefix("broker "))
        .and_then(|l| l.split_whitespace().next())
        .unwrap_or_else(|| panic!("broker B not listed:\n{listing}"))
        .to_owned();

    // SIGKILL (by its PID) one broker: it is no longer listed once its lease expires.
    let killed_at = Instant::now();
    drop(b);
    eventually(Duration::from_secs(15), "the killed broker dropped", || {
        brokers_listed(&a) == 2 && brokers_listed(&c) == 2
    });
    let dropped_after = killed_at.elapsed();
    assert!(dropped_after < Duration::from_secs(10), "{dropped_after:?}");
    // kcat may send its Metadata to either survivor, and each survivor's view of the live
    // brokers is renewed with its own heartbeat: wait until A itself (the bootstrap the
    // producer below asks) leads no partition with the dead broker.
    eventually(Duration::from_secs(10), "A's leaders all alive", || {
        let described = a.ok(&["topic", "describe", "events"], "").stdout;
        described
            .lines()
            .filter_map(|l| l.split("leader ").nth(1))
            .all(|id| id.trim() != b_id)
    });

    // Producers carry on through the survivors; nothing acknowledged is lost or doubled.
    a.ok(&["produce", "events"], &numbered("after", 60));
    let mut got = values(&c, "events");
    got.sort();
    let mut want: Vec<String> = numbered("before", 60)
        .lines()
        .chain(numbered("after", 60).lines())
        .map(str::to_owned)
        .collect();
    want.sort();
    assert_eq!(got, want);
}

#[test]
fn a_new_broker_serves_at_once_and_postgres_restarts_lose_nothing() {
    let minio = MinioServer::start();
    let mut pg = PostgresServer::start();
    let a = start(&minio, &pg, "grow");
    a.ok(&["topic", "create", "t", "--partitions", "2"], "");
    a.ok(&["produce", "t"], &numbered("one", 20));

    // A second broker joins while the first runs: it lists both and serves what is there.
    let b = start(&minio, &pg, "grow");
    assert_eq!(values(&b, "t").len(), 20);
    eventually(Duration::from_secs(10), "the new broker listed", || {
        brokers_listed(&a) == 2
    });

    // PostgreSQL restarts while records are produced: produces wait or fail retriably, and
    // everything acknowledged is there afterwards.
    let bootstrap = a.bootstrap();
    let producer = std::thread::spawn(move || {
        let mut acked = Vec::new();
        for round in 0..12 {
            let input = numbered(&format!("r{round}"), 5);
            let run = common::run_cli(&bootstrap, &["produce", "t"], &input);
            if run.status.success() {
                acked.extend(input.lines().map(str::to_owned));
            }
            std::thread::sleep(Duration::from_millis(250));
        }
        acked
    });
    std::thread::sleep(Duration::from_millis(600));
    pg.restart();
    let acked = producer.join().unwrap();
    assert!(acked.len() >= 30, "only {} acknowledged", acked.len());
    let got = values(&b, "t");
    for record in &acked {
        assert_eq!(
            got.iter().filter(|g| *g == record).count(),
            1,
            "{record} not exactly once in {got:?}"
        );
    }
}

#[test]
fn a_group_commits_through_one_broker_and_resumes_through_another() {
    let minio = MinioServer::start();
    let pg = PostgresServer::start();
    let a = start(&minio, &pg, "groups");
    let b = start(&minio, &pg, "groups");
    a.ok(&["topic", "create", "jobs", "--partitions", "2"], "");
    eventually(Duration::from_secs(10), "the topic on B", || {
        b.run(&["topic", "describe", "jobs"], "").status.success()
    });
    a.ok(&["produce", "jobs"], &numbered("first", 20));

    // A balanced consumer bootstrapped at B reads everything and commits.
    let first = kcat(
        &[
            "-b",
            &b.bootstrap(),
            "-G",
            "workers",
            "-X",
            "auto.offset.reset=earliest",
            "-e",
            "-q",
            "jobs",
        ],
        "",
    );
    assert_eq!(first.lines().count(), 20, "{first}");

    // The offsets are the cluster's: through A the group shows them, and a consumer
    // bootstrapped at A resumes after them.
    let described = a.ok(&["group", "describe", "workers"], "").stdout;
    assert!(described.contains("jobs"), "{described}");
    a.ok(&["produce", "jobs"], &numbered("second", 10));
    let second = kcat(
        &[
            "-b",
            &a.bootstrap(),
            "-G",
            "workers",
            "-X",
            "auto.offset.reset=earliest",
            "-e",
            "-q",
            "jobs",
        ],
        "",
    );
    let mut got: Vec<&str> = second.lines().collect();
    got.sort();
    let text = numbered("second", 10);
    let mut want: Vec<&str> = text.lines().collect();
    want.sort();
    assert_eq!(got, want);
}

#[test]
fn a_client_that_names_its_zone_gets_leaders_in_that_zone() {
    let minio = MinioServer::start();
    let pg = PostgresServer::start();
    let zoned = |zone: &str| {
        let mut args = cluster_args(&minio, "zones", &pg.url());
        args.extend(["--rack".to_owned(), zone.to_owned()]);
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        Server::start_with_env(tempfile::tempdir().unwrap(), &args, &minio.env_vars())
    };
    let a = zoned("az1");
    let b = zoned("az1");
    let c = zoned("az2");
    // Each broker's view of the live ones is renewed with its own heartbeat, and a client
    // may send its Metadata request to any broker it learned of: wait for all three views.
    eventually(
        Duration::from_secs(10),
        "three brokers listed by each",
        || [&a, &b, &c].iter().all(|s| brokers_listed(s) == 3),
    );
    a.ok(&["topic", "create", "z", "--partitions", "8"], "");
    // Which node id is C: the one broker listed at its port.
    let listing = kcat(&["-b", &a.bootstrap(), "-L"], "");
    let c_id = listing
        .lines()
        .find(|l| l.contains(&format!(":{} ", c.port)) || l.ends_with(&format!(":{}", c.port)))
        .and_then(|l| l.trim().strip_prefix("broker "))
        .and_then(|l| l.split_whitespace().next())
        .unwrap_or_else(|| panic!("broker C not listed:\n{listing}"))
        .to_owned();
    let leaders = |client_id: &str| -> Vec<String> {
        kcat(
            &[
                "-b",
                &a.bootstrap(),
                "-X",
                &format!("client.id={client_id}"),
                "-L",
                "-t",
                "z",
            ],
            "",
        )
        .lines()
        .filter_map(|l| l.trim().strip_prefix("partition "))
        .filter_map(|l| l.split("leader ").nth(1))
        .map(|l| l.split(',').next().unwrap().trim().to_owned())
        .collect()
    };
    let mut in_az2 = Vec::new();
    eventually(Duration::from_secs(10), "leaders in az2", || {
        in_az2 = leaders("app,sluice_az=az2");
        in_az2.len() == 8 && in_az2.iter().all(|l| *l == c_id)
    });
    let spread = leaders("app");
    assert!(spread.iter().any(|l| *l != c_id), "{spread:?}");
}

#[test]
fn a_long_poll_on_one_broker_wakes_when_another_commits() {
    let minio = MinioServer::start();
    let pg = PostgresServer::start();
    let a = start(&minio, &pg, "wake");
    let b = start(&minio, &pg, "wake");
    a.ok(&["topic", "create", "w", "--partitions", "1"], "");
    eventually(Duration::from_secs(10), "the topic on B", || {
        b.run(&["topic", "describe", "w"], "").status.success()
    });
    let http = reqwest::blocking::Client::builder()
        .timeout(Duration::from_secs(30))
        .build()
        .unwrap();
    let mut waits = Vec::new();
    for i in 0..5 {
        // A long poll on B for the next offset (the HTTP API reads on the broker asked,
        // whichever leads the partition)...
        let url = format!(
            "{}/topics/w/partitions/0/records?offset={i}&timeout_ms=10000",
            b.http_url()
        );
        let reader = {
            let http = http.clone();
            std::thread::spawn(move || {
                let body: serde_json::Value = http.get(url).send().unwrap().json().unwrap();
                (body, Instant::now())
            })
        };
        std::thread::sleep(Duration::from_millis(500));
        // ...wakes when a produce through A commits (acknowledged after its commit).
        let answer = http
            .post(format!("{}/topics/w/records", a.http_url()))
            .body(format!("{{\"value\": \"wake-{i}\", \"partition\": 0}}"))
            .send()
            .unwrap();
        assert!(answer.status().is_success(), "{answer:?}");
        let acked = Instant::now();
        let (body, read_at) = reader.join().unwrap();
        assert!(body.to_string().contains(&format!("wake-{i}")), "{body}");
        waits.push(read_at.saturating_duration_since(acked));
    }
    // Without the notification the reader would wait for the next poll of the bounds (5 s).
    waits.sort();
    assert!(
        waits[waits.len() / 2] < Duration::from_millis(500),
        "{waits:?}"
    );
    assert!(
        waits.iter().all(|w| *w < Duration::from_secs(2)),
        "{waits:?}"
    );
}

#[test]
fn sigkills_of_each_broker_in_turn_under_load_lose_nothing_acknowledged() {
    use std::process::{Command, Stdio};
    let minio = MinioServer::start();
    let pg = PostgresServer::start();
    let tmp = tempfile::tempdir().unwrap();
    let env: String = minio
        .env_vars()
        .iter()
        .map(|(k, v)| format!("{k}={v} "))
        .collect();
    let mut cmds = Vec::new();
    let mut addrs = Vec::new();
    for i in 0..3 {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let addr = format!("127.0.0.1:{port}");
        cmds.push(format!(
            "env {env}{} serve --data-dir {} --kafka-addr {addr} --http-addr off --storage s3://{}/kills --metadata {} --object-linger-ms 25",
            env!("CARGO_BIN_EXE_sluice"),
            tmp.path().join(format!("data-{i}")).display(),
            minio.bucket(),
            pg.url(),
        ));
        addrs.push(addr);
    }
    let workload = "name = \"cluster-kills\"\npartitions = 6\nproducers = 2\nconsumers = 1\nrecord_size = 128\nkeys = true\nproducer_rate = 1000\nwarmup_s = 0\nduration_s = 12\ninterval_s = 0.5\n\n[correctness]\nkills = 3\nrestart_delay_s = 0.5\nsettle_timeout_s = 120\n";
    let file = tmp.path().join("kills.toml");
    std::fs::write(&file, workload).unwrap();
    let mut args: Vec<String> = vec![
        "bench".into(),
        "correctness".into(),
        file.display().to_string(),
        "--out".into(),
        tmp.path().join("results").display().to_string(),
        "--quiet".into(),
        "-b".into(),
        addrs.join(","),
    ];
    for cmd in &cmds {
        args.extend(["--broker-cmd".to_owned(), cmd.clone()]);
    }
    let mut child = Command::new(env!("CARGO_BIN_EXE_sluice"))
        .args(&args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let (status, stdout, stderr) = common::finish(&mut child, b"", Duration::from_secs(400));
    assert!(status.success(), "{stdout}\n{stderr}");
    let dir = stdout
        .lines()
        .find_map(|l| l.strip_prefix("results: "))
        .expect("results line");
    let campaign: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(format!("{}/campaign.json", dir.trim())).unwrap(),
    )
    .unwrap();
    let report = &campaign["points"][0]["repeats"][0]["correctness"];
    assert_eq!(report["kills"], 3, "{report}");
    // A different broker each time.
    let killed: Vec<u64> = report["kill_log"]
        .as_array()
        .unwrap()
        .iter()
        .map(|k| k["broker"].as_u64().unwrap_or(u64::MAX))
        .collect();
    assert_eq!(killed, vec![0, 1, 2], "{report}");
    for fault in ["lost", "duplicated", "out_of_order", "corrupted"] {
        assert_eq!(report[fault], 0, "{fault}: {report}");
    }
    assert_eq!(report["passed"], true, "{report}");
    assert!(report["acked"].as_u64().unwrap() > 5000, "{report}");
}

#[test]
fn retention_moves_the_log_start_for_every_broker_and_deletes_index_rows() {
    let minio = MinioServer::start();
    let pg = PostgresServer::start();
    let with_cleaner = |prefix: &str| {
        let mut args = cluster_args(&minio, prefix, &pg.url());
        args.extend(["--retention-check-interval-ms".to_owned(), "300".to_owned()]);
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        Server::start_with_env(tempfile::tempdir().unwrap(), &args, &minio.env_vars())
    };
    let a = with_cleaner("keep");
    let b = with_cleaner("keep");
    a.ok(
        &[
            "topic",
            "create",
            "r",
            "--partitions",
            "1",
            "--config",
            "retention.ms=3600000",
        ],
        "",
    );
    // Ten records from long ago, then three of now: retention removes the old batch only.
    let old: String = (0..10)
        .map(|i| format!("{{\"value\":\"old-{i}\",\"timestamp\":1000}}\n"))
        .collect();
    a.ok(&["produce", "r", "--json"], &old);
    a.ok(&["produce", "r"], "new-0\nnew-1\nnew-2\n");
    let table = |sql: &str| -> i64 {
        pg.psql("sluice", sql)
            .trim()
            .parse()
            .unwrap_or_else(|e| panic!("{sql}: {e}"))
    };
    eventually(Duration::from_secs(20), "the log start moves to 10", || {
        table(
            "SELECT log_start FROM sluice.partitions p JOIN sluice.topics t USING (topic_id) WHERE t.name = 'r'",
        ) == 10
    });
    // Each broker serves from the new log start (B within its bounds poll).
    for server in [&a, &b] {
        eventually(Duration::from_secs(15), "only the new records", || {
            values(server, "r") == ["new-0", "new-1", "new-2"]
        });
    }
    assert_eq!(
        table("SELECT count(*) FROM sluice.batches WHERE last_offset < 10"),
        0
    );
    let deleted = a.metric("sluice_cluster_cleaner_index_rows_deleted_total")
        + b.metric("sluice_cluster_cleaner_index_rows_deleted_total");
    assert!(deleted >= 1.0, "{deleted}");
    // A deleted topic's rows go too.
    a.ok(&["topic", "delete", "r"], "");
    eventually(
        Duration::from_secs(20),
        "the deleted topic's rows purged",
        || {
            table("SELECT count(*) FROM sluice.batches")
                + table("SELECT count(*) FROM sluice.topics")
                == 0
        },
    );
}

#[test]
fn a_topic_created_through_one_broker_can_be_altered_through_another_at_once() {
    let minio = MinioServer::start();
    let pg = PostgresServer::start();
    let a = start(&minio, &pg, "alter");
    let b = start(&minio, &pg, "alter");
    eventually(Duration::from_secs(10), "two brokers listed", || {
        brokers_listed(&b) == 2
    });
    // B's copy of the catalog is refreshed every second; IncrementalAlterConfigs naming a topic
    // it does not know yet reloads it first instead of answering UNKNOWN_TOPIC_OR_PARTITION.
    for i in 0..3 {
        let topic = format!("fresh-{i}");
        a.ok(&["topic", "create", &topic, "--partitions", "2"], "");
        b.ok(
            &["topic", "alter", &topic, "--config", "retention.ms=60000"],
            "",
        );
        let described = b.ok(&["topic", "describe", &topic], "").stdout;
        assert!(described.contains("retention.ms"), "{described}");
    }
}

#[test]
fn clients_arriving_together_all_see_a_topic_created_through_another_broker() {
    use sluice_protocol::kafka_protocol::messages::metadata_request::MetadataRequestTopic;
    use sluice_protocol::kafka_protocol::messages::{
        ApiKey, MetadataRequest, RequestKind, ResponseKind, TopicName,
    };
    use sluice_protocol::kafka_protocol::protocol::StrBytes;

    let minio = MinioServer::start();
    let pg = PostgresServer::start();
    let a = start(&minio, &pg, "together");
    let b = start(&minio, &pg, "together");
    eventually(Duration::from_secs(10), "two brokers listed", || {
        brokers_listed(&b) == 2
    });
    // Consumers of a group start together and each asks for the new topic's metadata: every
    // one must be told it exists. (librdkafka keeps a member told "unknown topic" out of its
    // group, with nothing assigned, until its next metadata refresh, 5 minutes later.)
    for i in 0..3 {
        let topic = format!("together-{i}");
        a.ok(&["topic", "create", &topic, "--partitions", "3"], "");
        let port = b.port;
        let askers: Vec<_> = (0..6)
            .map(|_| {
                let topic = topic.clone();
                std::thread::spawn(move || {
                    let request = MetadataRequest::default()
                        .with_topics(Some(vec![
                            MetadataRequestTopic::default()
                                .with_name(Some(TopicName(StrBytes::from_string(topic)))),
                        ]))
                        .with_allow_auto_topic_creation(false);
                    match common::kafka_call(
                        port,
                        ApiKey::Metadata,
                        12,
                        RequestKind::Metadata(request),
                    ) {
                        ResponseKind::Metadata(m) => {
                            (m.topics[0].error_code, m.topics[0].partitions.len())
                        }
                        other => panic!("{other:?}"),
                    }
                })
            })
            .collect();
        let answers: Vec<(i16, usize)> = askers.into_iter().map(|t| t.join().unwrap()).collect();
        assert_eq!(
            answers,
            vec![(0, 3); 6],
            "{topic}: (error code, partitions) per client"
        );
    }
}

/// An ACL request body: `(resource name, principal)` on a literal topic, READ, ALLOW.
fn acl_creation(
    topic: &str,
    principal: &str,
) -> sluice_protocol::kafka_protocol::messages::create_acls_request::AclCreation {
    use sluice_protocol::kafka_protocol::protocol::StrBytes;
    sluice_protocol::kafka_protocol::messages::create_acls_request::AclCreation::default()
        .with_resource_type(2)
        .with_resource_name(StrBytes::from_string(topic.to_owned()))
        .with_resource_pattern_type(3)
        .with_principal(StrBytes::from_string(principal.to_owned()))
        .with_host(StrBytes::from_static_str("*"))
        .with_operation(3)
        .with_permission_type(3)
}

/// The principals of every ACL `server` describes, sorted.
fn acl_principals(server: &Server) -> Vec<String> {
    use sluice_protocol::kafka_protocol::messages::*;
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
    assert_eq!(described.error_code, 0, "{described:?}");
    let mut principals: Vec<String> = described
        .resources
        .iter()
        .flat_map(|r| r.acls.iter().map(|a| a.principal.to_string()))
        .collect();
    principals.sort();
    principals
}

/// Creates one ACL through `server`, retrying as a Kafka client does while the answer is
/// REQUEST_TIMED_OUT (retriable): a change that met too many concurrent changes of other
/// brokers (the shared file moved under it each time) is refused that way, with "try again".
fn create_acl(server: &Server, topic: &str, principal: &str) {
    use sluice_protocol::kafka_protocol::messages::*;
    const REQUEST_TIMED_OUT: i16 = 7;
    for attempt in 1.. {
        let created = common::kafka_call(
            server.port,
            ApiKey::CreateAcls,
            3,
            RequestKind::CreateAcls(
                CreateAclsRequest::default().with_creations(vec![acl_creation(topic, principal)]),
            ),
        );
        let ResponseKind::CreateAcls(created) = created else {
            panic!("{created:?}")
        };
        let code = created.results[0].error_code;
        if code == REQUEST_TIMED_OUT && attempt < 10 {
            std::thread::sleep(Duration::from_millis(20 * attempt));
            continue;
        }
        assert_eq!(code, 0, "{created:?}");
        return;
    }
}

#[test]
fn acls_made_through_one_broker_hold_on_every_broker() {
    let minio = MinioServer::start();
    let pg = PostgresServer::start();
    let start_secured = || {
        let mut args = cluster_args(&minio, "acls", &pg.url());
        // PLAINTEXT clients are User:ANONYMOUS, a super user here: the raw requests below
        // need no SASL exchange.
        args.extend(["--authorizer", "acl", "--super-users", "User:ANONYMOUS"].map(str::to_owned));
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        Server::start_with_env(tempfile::tempdir().unwrap(), &args, &minio.env_vars())
    };
    let a = start_secured();
    let b = start_secured();
    create_acl(&a, "orders", "User:alice");
    eventually(Duration::from_secs(10), "alice's ACL on broker B", || {
        acl_principals(&b) == ["User:alice"]
    });
    // Changes through both brokers at once: neither is lost.
    std::thread::scope(|s| {
        s.spawn(|| {
            for i in 0..5 {
                create_acl(&a, &format!("a-{i}"), "User:bob");
            }
        });
        s.spawn(|| {
            for i in 0..5 {
                create_acl(&b, &format!("b-{i}"), "User:carol");
            }
        });
    });
    let want: Vec<String> = std::iter::once("User:alice".to_owned())
        .chain(std::iter::repeat_n("User:bob".to_owned(), 5))
        .chain(std::iter::repeat_n("User:carol".to_owned(), 5))
        .collect();
    for server in [&a, &b] {
        eventually(Duration::from_secs(10), "all eleven ACLs", || {
            acl_principals(server) == want
        });
    }
    // A new broker with an empty data directory gets them at once.
    let c = start_secured();
    assert_eq!(acl_principals(&c), want);
}

#[test]
fn a_user_added_before_one_brokers_first_start_logs_in_through_another() {
    if !common::have_kcat() {
        eprintln!("kcat not installed: skipped");
        return;
    }
    let minio = MinioServer::start();
    let pg = PostgresServer::start();
    let start_sasl = |dir: tempfile::TempDir| {
        let mut args = cluster_args(&minio, "users", &pg.url());
        args.extend(
            [
                "--listeners",
                "SASL_PLAINTEXT://127.0.0.1:0",
                "--sasl-mechanisms",
                "SCRAM-SHA-256",
            ]
            .map(str::to_owned),
        );
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        Server::start_with_env(dir, &args, &minio.env_vars())
    };
    let first = tempfile::tempdir().unwrap();
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_sluice"))
        .args([
            "user",
            "add",
            "alice",
            "--mechanism",
            "SCRAM-SHA-256",
            "--password-stdin",
        ])
        .arg("--data-dir")
        .arg(first.path())
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let (status, _, stderr) = common::finish(&mut child, b"alice-pw", common::COMMAND_TIMEOUT);
    assert!(status.success(), "{stderr}");
    let _a = start_sasl(first);
    let b = start_sasl(tempfile::tempdir().unwrap());
    let args = [
        "-b".to_owned(),
        format!("127.0.0.1:{}", b.port),
        "-X".to_owned(),
        "security.protocol=sasl_plaintext".to_owned(),
        "-X".to_owned(),
        "sasl.mechanisms=SCRAM-SHA-256".to_owned(),
        "-X".to_owned(),
        "sasl.username=alice".to_owned(),
        "-X".to_owned(),
        "sasl.password=alice-pw".to_owned(),
        "-L".to_owned(),
    ];
    let out = std::process::Command::new("kcat")
        .args(&args)
        .env_remove("LD_LIBRARY_PATH")
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(String::from_utf8_lossy(&out.stdout).contains("brokers"));
}
