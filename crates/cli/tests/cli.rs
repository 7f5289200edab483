//! Black-box tests of `sluice topic`, `sluice produce` and `sluice consume`: the real binary as
//! both broker (`sluice serve` on a free 127.0.0.1 port) and client, and kcat as an independent
//! Kafka client where it is installed.

mod common;

use std::process::{Command, Stdio};
use std::time::Duration;

use common::{COMMAND_TIMEOUT, Server, finish, have_kcat, kcat, run_cli};
use serde_json::Value;

fn json_lines(stdout: &str) -> Vec<Value> {
    stdout
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
        .collect()
}

/// The partition Kafka's default partitioner (murmur2) picks for `key{i}` among 3 partitions,
/// i = 0..10, as computed by Kafka's `Utils.murmur2` and by librdkafka's `murmur2_random`.
const KEY_PARTITIONS_OF_3: [i64; 10] = [1, 2, 2, 1, 0, 1, 0, 0, 1, 2];

#[test]
fn topic_create_list_describe_alter_delete() {
    let server = Server::start_fresh();
    let run = server.ok(
        &[
            "topic",
            "create",
            "orders",
            "--partitions",
            "3",
            "--config",
            "retention.ms=86400000",
        ],
        "",
    );
    assert_eq!(run.stdout, "created topic orders with 3 partitions\n");
    server.ok(&["topic", "create", "audit"], "");

    let list = server.ok(&["topic", "list"], "").stdout;
    assert_eq!(list, "audit\t1\norders\t3\n");

    let describe = server.ok(&["topic", "describe", "orders"], "").stdout;
    assert!(describe.starts_with("topic: orders\nid: "), "{describe}");
    assert!(describe.contains("partitions: 3\n"), "{describe}");
    for p in 0..3 {
        assert!(
            describe.contains(&format!("  partition {p}\tleader ")),
            "{describe}"
        );
    }
    assert!(
        describe.contains("  retention.ms = 86400000\t(set on topic)\n"),
        "{describe}"
    );

    let alter = server.ok(
        &[
            "topic",
            "alter",
            "orders",
            "--config",
            "retention.ms=3600000",
            "--config",
            "segment.ms=60000",
            "--partitions",
            "5",
        ],
        "",
    );
    assert!(
        alter.stdout.contains("now has 5 partitions"),
        "{}",
        alter.stdout
    );
    server.ok(
        &["topic", "alter", "orders", "--delete-config", "segment.ms"],
        "",
    );
    let describe = server.ok(&["topic", "describe", "orders"], "").stdout;
    assert!(describe.contains("partitions: 5\n"), "{describe}");
    assert!(
        describe.contains("  retention.ms = 3600000\t(set on topic)\n"),
        "{describe}"
    );
    assert!(!describe.contains("segment.ms = 60000"), "{describe}");

    let run = server.fails(&["topic", "alter", "orders", "--partitions", "2"], "");
    assert!(run.stderr.contains("INVALID_PARTITIONS"), "{}", run.stderr);

    let run = server.fails(&["topic", "create", "orders"], "");
    assert!(
        run.stderr.contains("TOPIC_ALREADY_EXISTS"),
        "{}",
        run.stderr
    );

    assert_eq!(
        server.ok(&["topic", "delete", "orders"], "").stdout,
        "deleted topic orders\n"
    );
    assert_eq!(server.ok(&["topic", "list"], "").stdout, "audit\t1\n");
    let run = server.fails(&["topic", "describe", "orders"], "");
    assert!(
        run.stderr.contains("topic 'orders' does not exist"),
        "{}",
        run.stderr
    );
    let run = server.fails(&["topic", "delete", "orders"], "");
    assert!(
        run.stderr.contains("UNKNOWN_TOPIC_OR_PARTITION"),
        "{}",
        run.stderr
    );
}

#[test]
fn keyed_records_with_headers_come_back_as_json_in_murmur2_partitions() {
    let server = Server::start_fresh();
    server.ok(&["topic", "create", "clicks", "--partitions", "3"], "");
    // Three rounds of the same ten keys: each partition gets its keys in input order.
    let input: String = (0..30)
        .map(|n| format!("key{}|value-{n}\n", n % 10))
        .collect();
    let run = server.ok(
        &[
            "produce",
            "clicks",
            "--key-separator",
            "|",
            "--header",
            "source=test",
            "--header",
            "run=1",
        ],
        &input,
    );
    assert!(
        run.stderr.contains("produced 30 records to clicks"),
        "{}",
        run.stderr
    );

    let records = json_lines(&server.ok(&["consume", "clicks", "--json"], "").stdout);
    assert_eq!(records.len(), 30);
    let mut next_offset = [0i64; 3];
    let mut values_seen = Vec::new();
    for r in &records {
        let key = r["key"].as_str().unwrap();
        let i: usize = key.strip_prefix("key").unwrap().parse().unwrap();
        let partition = r["partition"].as_i64().unwrap();
        assert_eq!(partition, KEY_PARTITIONS_OF_3[i], "{r}");
        let p = partition as usize;
        assert_eq!(r["offset"].as_i64().unwrap(), next_offset[p], "{r}");
        next_offset[p] += 1;
        assert_eq!(
            r["headers"],
            serde_json::json!({"source": "test", "run": "1"})
        );
        let n: usize = r["value"]
            .as_str()
            .unwrap()
            .strip_prefix("value-")
            .unwrap()
            .parse()
            .unwrap();
        assert_eq!(n % 10, i, "{r}");
        assert!(r["timestamp"].as_i64().unwrap() > 1_600_000_000_000, "{r}");
        values_seen.push(n);
    }
    values_seen.sort_unstable();
    assert_eq!(values_seen, (0..30).collect::<Vec<_>>());
    // Within a partition, the input order is kept.
    for p in 0..3 {
        let ns: Vec<i64> = records
            .iter()
            .filter(|r| r["partition"] == p)
            .map(|r| r["value"].as_str().unwrap()[6..].parse().unwrap())
            .collect();
        assert!(ns.windows(2).all(|w| w[0] < w[1]), "partition {p}: {ns:?}");
    }

    // One partition, plain output with keys, a count.
    let run = server.ok(
        &[
            "consume",
            "clicks",
            "--partition",
            "0",
            "--print-key",
            "--count",
            "2",
        ],
        "",
    );
    assert_eq!(run.stdout, "key4\tvalue-4\nkey6\tvalue-6\n");
    assert!(run.stderr.contains("consumed 2 records"), "{}", run.stderr);

    // Unkeyed records round-robin; --partition forces one.
    server.ok(&["topic", "create", "plain", "--partitions", "3"], "");
    server.ok(&["produce", "plain"], "a\nb\nc\nd\n");
    server.ok(&["produce", "plain", "--partition", "2"], "e\n");
    let records = json_lines(&server.ok(&["consume", "plain", "--json"], "").stdout);
    let placed: Vec<(i64, &str)> = records
        .iter()
        .map(|r| {
            (
                r["partition"].as_i64().unwrap(),
                r["value"].as_str().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        placed,
        [(0, "a"), (0, "d"), (1, "b"), (2, "c"), (2, "e")],
        "{records:?}"
    );
    assert!(records.iter().all(|r| r["key"].is_null()));
}

#[test]
fn json_produce_round_trips_binary_nulls_partitions_and_timestamps() {
    let server = Server::start_fresh();
    server.ok(&["topic", "create", "events", "--partitions", "2"], "");
    let input = [
        r#"{"key":"a","value":"one","headers":{"h":"1","empty":""},"timestamp":1000}"#,
        r#"{"value":"two","partition":1,"timestamp":2000}"#,
        r#"{"key_b64":"/w==","value_b64":"/wE=","headers_b64":{"bin":"/v8="},"partition":0,"timestamp":3000}"#,
        "",
        r#"{"key":"tomb","value":null,"partition":1,"timestamp":4000}"#,
    ]
    .join("\n");
    server.ok(&["produce", "events", "--json"], &input);
    let out = server.ok(&["consume", "events", "--json"], "").stdout;
    let records = json_lines(&out);
    let by_ts = |ts: i64| {
        records
            .iter()
            .find(|r| r["timestamp"] == ts)
            .unwrap_or_else(|| panic!("no record at {ts}: {out}"))
    };
    let a = by_ts(1000);
    assert_eq!(a["key"], "a");
    assert_eq!(a["value"], "one");
    assert_eq!(a["headers"], serde_json::json!({"h": "1", "empty": ""}));
    let two = by_ts(2000);
    assert_eq!(
        (two["partition"].as_i64(), two["key"].is_null()),
        (Some(1), true)
    );
    let bin = by_ts(3000);
    assert_eq!(bin["partition"], 0);
    assert_eq!(bin["key_b64"], "/w==");
    assert_eq!(bin["value_b64"], "/wE=");
    assert!(
        bin.get("key").is_none() && bin.get("value").is_none(),
        "{bin}"
    );
    assert_eq!(bin["headers_b64"], serde_json::json!({"bin": "/v8="}));
    let tomb = by_ts(4000);
    assert!(tomb["value"].is_null(), "{tomb}");

    // Replaying the JSON output into another topic copies it exactly (offsets aside).
    server.ok(&["topic", "create", "copy", "--partitions", "2"], "");
    server.ok(&["produce", "copy", "--json"], &out);
    let copy = server.ok(&["consume", "copy", "--json"], "").stdout;
    assert_eq!(copy, out);

    // A bad line fails with its line number; the lines before it were produced.
    let run = server.fails(
        &["produce", "events", "--json"],
        "{\"value\":\"ok\"}\n{\"value\":\n",
    );
    assert!(run.stderr.contains("stdin line 2"), "{}", run.stderr);
    assert!(run.stderr.contains("1 record produced"), "{}", run.stderr);
}

#[test]
fn consume_from_timestamp_offset_latest_and_follow() {
    let server = Server::start_fresh();
    let input: String = (1..=5)
        .map(|i| format!("{{\"value\":\"t{i}\",\"timestamp\":{i}000}}\n"))
        .collect();
    // The topic does not exist yet: produce creates it (the broker's auto-create).
    server.ok(&["produce", "times", "--json"], &input);
    let consume = |from: &str| server.ok(&["consume", "times", "--from", from], "").stdout;
    assert_eq!(consume("@2500"), "t3\nt4\nt5\n");
    assert_eq!(consume("@3000"), "t3\nt4\nt5\n");
    assert_eq!(consume("@0"), "t1\nt2\nt3\nt4\nt5\n");
    assert_eq!(consume("@99999"), "");
    assert_eq!(consume("3"), "t4\nt5\n");
    assert_eq!(consume("latest"), "");
    assert_eq!(consume("earliest"), "t1\nt2\nt3\nt4\nt5\n");
    let run = server.fails(&["consume", "times", "--from", "9"], "");
    assert!(run.stderr.contains("out of range"), "{}", run.stderr);

    // --follow waits for records produced after it started.
    let mut follower = Command::new(env!("CARGO_BIN_EXE_sluice"))
        .args([
            "consume", "times", "--from", "latest", "--follow", "--count", "2", "--json",
        ])
        .env("SLUICE_BOOTSTRAP", server.bootstrap())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(700));
    assert!(
        follower.try_wait().unwrap().is_none(),
        "--follow exited early"
    );
    server.ok(&["produce", "times", "--acks", "1"], "late1\n");
    server.ok(&["produce", "times", "--acks", "0"], "late2\n");
    let (status, stdout, stderr) = finish(&mut follower, b"", COMMAND_TIMEOUT);
    assert!(status.success(), "{stderr}");
    let records = json_lines(&stdout);
    let got: Vec<(i64, &str)> = records
        .iter()
        .map(|r| (r["offset"].as_i64().unwrap(), r["value"].as_str().unwrap()))
        .collect();
    assert_eq!(got, [(5, "late1"), (6, "late2")]);
}

#[test]
fn many_records_span_several_requests_and_fetches() {
    let server = Server::start_fresh();
    server.ok(&["topic", "create", "bulk", "--partitions", "2"], "");
    // ~3.5 MB of input: several produce requests (about 1 MB each) and several fetches.
    let value = "x".repeat(100);
    let input: String = (0..30_000).map(|i| format!("{i}:{value}\n")).collect();
    let run = server.ok(&["produce", "bulk", "--key-separator", ":"], &input);
    assert!(
        run.stderr.contains("produced 30000 records"),
        "{}",
        run.stderr
    );
    let out = server.ok(&["consume", "bulk", "--print-key"], "").stdout;
    let mut keys: Vec<u32> = out
        .lines()
        .map(|l| {
            let (k, v) = l.split_once('\t').unwrap();
            assert_eq!(v, value);
            k.parse().unwrap()
        })
        .collect();
    assert_eq!(keys.len(), 30_000);
    keys.sort_unstable();
    assert_eq!(keys, (0..30_000).collect::<Vec<_>>());
}

#[test]
fn errors_are_clear_and_exit_non_zero() {
    let server = Server::start_fresh();
    let run = server.fails(&["consume", "missing"], "");
    assert!(
        run.stderr.contains("topic 'missing' does not exist"),
        "{}",
        run.stderr
    );
    // Consuming does not create the topic.
    assert_eq!(server.ok(&["topic", "list"], "").stdout, "");

    let run = server.fails(&["topic", "create", "t", "--config", "no.such.key=1"], "");
    assert!(run.stderr.contains("INVALID_CONFIG"), "{}", run.stderr);
    assert!(run.stderr.contains("no.such.key"), "{}", run.stderr);
    let run = server.fails(&["topic", "create", "bad name!"], "");
    assert!(
        run.stderr.contains("INVALID_TOPIC_EXCEPTION"),
        "{}",
        run.stderr
    );

    server.ok(&["topic", "create", "t", "--partitions", "2"], "");
    let run = server.fails(&["produce", "t", "--partition", "7"], "x\n");
    assert!(
        run.stderr.contains("topic 't' has no partition 7"),
        "{}",
        run.stderr
    );
    let run = server.fails(&["consume", "t", "--partition", "2"], "");
    assert!(
        run.stderr.contains("topic 't' has no partition 2"),
        "{}",
        run.stderr
    );
    let run = server.fails(&["produce", "t"], &format!("{}\n", "y".repeat(1_100_000)));
    assert!(run.stderr.contains("MESSAGE_TOO_LARGE"), "{}", run.stderr);
    let run = server.fails(&["consume", "t", "--from", "soon"], "");
    assert!(
        run.stderr.contains("'soon' is not earliest"),
        "{}",
        run.stderr
    );

    // Nothing listens on a port we just released.
    let port = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    };
    let addr = format!("127.0.0.1:{port}");
    for args in [&["topic", "list"][..], &["consume", "t"], &["produce", "t"]] {
        let run = run_cli(&addr, args, "x\n");
        assert!(!run.status.success());
        assert!(
            run.stderr
                .contains(&format!("cannot reach broker at {addr}: ")),
            "{}",
            run.stderr
        );
        assert!(
            run.stderr.contains("(is `sluice serve` running?)"),
            "{}",
            run.stderr
        );
    }
}

#[test]
fn every_subcommand_explains_itself_with_an_example() {
    for args in [
        &["topic", "--help"][..],
        &["topic", "create", "--help"],
        &["topic", "list", "--help"],
        &["topic", "describe", "--help"],
        &["topic", "delete", "--help"],
        &["topic", "alter", "--help"],
        &["produce", "--help"],
        &["consume", "--help"],
    ] {
        let run = run_cli("127.0.0.1:1", args, "");
        assert!(run.status.success(), "{args:?}");
        assert!(run.stdout.contains("sluice "), "{args:?}: {}", run.stdout);
        assert!(run.stdout.contains("Example"), "{args:?}: {}", run.stdout);
        if args.len() > 2 || args[0] != "topic" {
            assert!(run.stdout.contains("--bootstrap"), "{args:?}");
        }
    }
}

#[test]
fn kcat_reads_what_sluice_produces_and_sluice_reads_what_kcat_produces() {
    if !have_kcat() {
        eprintln!("kcat is not installed: skipping the kcat cross-check");
        return;
    }
    let server = Server::start_fresh();
    let b = server.bootstrap();
    server.ok(&["topic", "create", "x", "--partitions", "3"], "");

    // sluice → kcat.
    let input: String = (0..10).map(|i| format!("key{i}=v{i}\n")).collect();
    server.ok(
        &[
            "produce",
            "x",
            "--key-separator",
            "=",
            "--header",
            "h1=a",
            "--header",
            "h2=b",
        ],
        &input,
    );
    let out = kcat(
        &[
            "-b",
            &b,
            "-C",
            "-t",
            "x",
            "-o",
            "beginning",
            "-e",
            "-q",
            "-f",
            "%p|%o|%k|%s|%h\n",
        ],
        "",
    );
    let mut lines: Vec<&str> = out.lines().collect();
    lines.sort_unstable_by_key(|l| l.split('|').nth(2).map(str::to_owned));
    assert_eq!(lines.len(), 10, "{out}");
    for (i, line) in lines.iter().enumerate() {
        let fields: Vec<&str> = line.split('|').collect();
        assert_eq!(fields[0], KEY_PARTITIONS_OF_3[i].to_string(), "{line}");
        assert_eq!(fields[2], format!("key{i}"), "{line}");
        assert_eq!(fields[3], format!("v{i}"), "{line}");
        assert_eq!(fields[4], "h1=a,h2=b", "{line}");
    }

    // kcat → sluice, with kcat's Java-compatible partitioner: the same keys land in the same
    // partitions as sluice produce put them.
    let input: String = (0..10).map(|i| format!("key{i}:w{i}\n")).collect();
    server.ok(&["topic", "create", "z", "--partitions", "3"], "");
    kcat(
        &[
            "-b",
            &b,
            "-P",
            "-t",
            "z",
            "-K:",
            "-H",
            "origin=kcat",
            "-X",
            "partitioner=murmur2_random",
        ],
        &input,
    );
    let records = json_lines(&server.ok(&["consume", "z", "--json"], "").stdout);
    assert_eq!(records.len(), 10);
    for r in &records {
        let i: usize = r["key"].as_str().unwrap()[3..].parse().unwrap();
        assert_eq!(r["partition"], KEY_PARTITIONS_OF_3[i], "{r}");
        assert_eq!(r["value"], format!("w{i}"));
        assert_eq!(r["headers"], serde_json::json!({"origin": "kcat"}));
    }

    // A compressed batch is decompressed. zstd, because librdkafka uses gzip, snappy and lz4
    // only with brokers that advertise Produce/Fetch v2 or FindCoordinator, and silently sends
    // uncompressed batches otherwise.
    let input: String = (0..200)
        .map(|i| format!("{i} {}\n", "a".repeat(100)))
        .collect();
    kcat(&["-b", &b, "-P", "-t", "zstd", "-z", "zstd"], &input);
    let out = server.ok(&["consume", "zstd"], "").stdout;
    let mut lines: Vec<&str> = out.lines().collect();
    lines.sort_by_key(|l| l.split(' ').next().unwrap().parse::<usize>().unwrap());
    assert_eq!(lines.len(), 200, "{out}");
    for (i, line) in lines.iter().enumerate() {
        assert_eq!(*line, format!("{i} {}", "a".repeat(100)));
    }
}
