//! Black-box tests of `sluice group list|describe|delete|reset-offsets`: the real binary as both
//! broker (`sluice serve` on a free 127.0.0.1 port) and client, with Kafka's semantics as the
//! reference (each expectation below is what Apache Kafka 4 answers to the same commands).
//!
//! Groups get committed offsets through `reset-offsets --execute` (an admin commit, allowed on a
//! group without members) and, where kcat is installed, through a real consumer in a group.

mod common;

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::{Server, have_kcat, run_cli};
use serde_json::{Value, json};

/// How long to wait for a group to reach a state (a consumer joining or leaving).
const GROUP_WAIT: Duration = Duration::from_secs(60);

/// Group commands with JSON output, against a test server.
trait GroupCli {
    /// `group describe GROUP --json`.
    fn describe(&self, group: &str) -> Value;
    /// `group list --json`, one object per group.
    fn list(&self) -> Vec<Value>;
}

impl GroupCli for Server {
    fn describe(&self, group: &str) -> Value {
        let out = self.ok(&["group", "describe", group, "--json"], "").stdout;
        serde_json::from_str(&out).unwrap_or_else(|e| panic!("{e}: {out}"))
    }

    fn list(&self) -> Vec<Value> {
        json_lines(&self.ok(&["group", "list", "--json"], "").stdout)
    }
}

fn json_lines(stdout: &str) -> Vec<Value> {
    stdout
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
        .collect()
}

/// The `offsets` rows of a description as `(topic, partition, committed, log end, lag)`.
fn offsets(description: &Value) -> Vec<(String, i64, Value, Value, Value)> {
    description["offsets"]
        .as_array()
        .unwrap_or_else(|| panic!("no offsets: {description}"))
        .iter()
        .map(|r| {
            (
                r["topic"].as_str().unwrap().to_owned(),
                r["partition"].as_i64().unwrap(),
                r["committed_offset"].clone(),
                r["log_end_offset"].clone(),
                r["lag"].clone(),
            )
        })
        .collect()
}

fn row(
    topic: &str,
    partition: i64,
    committed: i64,
    log_end: i64,
) -> (String, i64, Value, Value, Value) {
    (
        topic.to_owned(),
        partition,
        json!(committed),
        json!(log_end),
        json!(log_end - committed),
    )
}

/// A plan line of `reset-offsets` text output, split on whitespace.
fn plan(stdout: &str) -> Vec<Vec<String>> {
    let mut lines = stdout.lines();
    assert_eq!(
        lines
            .next()
            .map(|l| l.split_whitespace().collect::<Vec<_>>()),
        Some(vec!["TOPIC", "PARTITION", "CURRENT", "NEW"]),
        "{stdout}"
    );
    lines
        .map(|l| l.split_whitespace().map(str::to_owned).collect())
        .collect()
}

fn words(items: &[&str]) -> Vec<String> {
    items.iter().map(|s| (*s).to_owned()).collect()
}

/// A topic `orders` with 3 partitions holding 10, 5 and 0 records.
fn orders(server: &Server) {
    server.ok(&["topic", "create", "orders", "--partitions", "3"], "");
    let ten: String = (0..10).map(|i| format!("a{i}\n")).collect();
    server.ok(&["produce", "orders", "--partition", "0"], &ten);
    server.ok(
        &["produce", "orders", "--partition", "1"],
        "b0\nb1\nb2\nb3\nb4\n",
    );
}

#[test]
fn group_commands_explain_themselves_with_an_example() {
    for args in [
        &["group", "--help"][..],
        &["group", "list", "--help"],
        &["group", "describe", "--help"],
        &["group", "delete", "--help"],
        &["group", "reset-offsets", "--help"],
    ] {
        let run = run_cli("127.0.0.1:1", args, "");
        assert!(run.status.success(), "{args:?}");
        assert!(
            run.stdout.contains("sluice group"),
            "{args:?}: {}",
            run.stdout
        );
        assert!(run.stdout.contains("Example"), "{args:?}: {}", run.stdout);
        if args.len() > 2 {
            assert!(run.stdout.contains("--bootstrap"), "{args:?}");
        }
    }
    // Usage mistakes are caught before any connection is made.
    for args in [
        &["group", "reset-offsets", "g", "--topic", "t"][..],
        &["group", "reset-offsets", "g", "--to-earliest"],
        &[
            "group",
            "reset-offsets",
            "g",
            "--topic",
            "t",
            "--to-earliest",
            "--to-latest",
        ],
        &[
            "group",
            "reset-offsets",
            "g",
            "--topic",
            "t",
            "--to-earliest",
            "--dry-run",
            "--execute",
        ],
        &[
            "group",
            "reset-offsets",
            "g",
            "--topic",
            "t:x",
            "--to-earliest",
        ],
        &[
            "group",
            "reset-offsets",
            "g",
            "--topic",
            "t",
            "--to-offset",
            "-1",
        ],
        &[
            "group",
            "reset-offsets",
            "g",
            "--topic",
            "t",
            "--to-datetime",
            "2024-05-01T08:00:00",
        ],
        &["group", "delete"],
    ] {
        let run = run_cli("127.0.0.1:1", args, "");
        assert_eq!(run.status.code(), Some(2), "{args:?}: {}", run.stderr);
        assert!(
            !run.stderr.contains("cannot reach"),
            "{args:?}: {}",
            run.stderr
        );
    }
}

#[test]
fn offsets_only_group_reset_describe_list_and_delete() {
    let server = Server::start_fresh();
    orders(&server);

    // No group yet.
    let run = server.ok(&["group", "list"], "");
    assert_eq!(run.stdout, "");
    assert!(server.list().is_empty());
    let run = server.fails(&["group", "describe", "app"], "");
    assert!(run.stderr.contains("GROUP_ID_NOT_FOUND"), "{}", run.stderr);
    assert!(run.stderr.contains("sluice group list"), "{}", run.stderr);

    // A dry run (the default) prints the plan and changes nothing.
    let run = server.ok(
        &[
            "group",
            "reset-offsets",
            "app",
            "--topic",
            "orders",
            "--to-earliest",
        ],
        "",
    );
    assert_eq!(
        plan(&run.stdout),
        vec![
            words(&["orders", "0", "-", "0"]),
            words(&["orders", "1", "-", "0"]),
            words(&["orders", "2", "-", "0"]),
        ]
    );
    assert!(run.stderr.contains("--execute"), "{}", run.stderr);
    assert!(server.list().is_empty());
    server.fails(&["group", "describe", "app"], "");

    // --execute commits; offsets past the log end are clamped to it.
    let run = server.ok(
        &[
            "group",
            "reset-offsets",
            "app",
            "--topic",
            "orders",
            "--to-offset",
            "4",
            "--execute",
        ],
        "",
    );
    assert_eq!(
        plan(&run.stdout),
        vec![
            words(&["orders", "0", "-", "4"]),
            words(&["orders", "1", "-", "4"]),
            words(&["orders", "2", "-", "0"]),
        ]
    );
    let d = server.describe("app");
    assert_eq!(d["group"], "app");
    assert_eq!(d["type"], "classic");
    assert_eq!(d["state"], "Empty");
    assert_eq!(d["members"], json!([]));
    assert_eq!(
        offsets(&d),
        vec![
            row("orders", 0, 4, 10),
            row("orders", 1, 4, 5),
            row("orders", 2, 0, 0)
        ]
    );
    assert_eq!(d["total_lag"], 7);
    for r in d["offsets"].as_array().unwrap() {
        assert_eq!(r["member_id"], Value::Null, "{r}");
    }
    // The same in words.
    let text = server.ok(&["group", "describe", "app"], "").stdout;
    assert!(
        text.starts_with("group: app\ntype: classic\nstate: Empty\n"),
        "{text}"
    );
    assert!(text.contains("members: none\n"), "{text}");
    let text_rows: Vec<Vec<&str>> = text
        .lines()
        .skip_while(|l| !l.starts_with("offsets:"))
        .skip(2)
        .take(3)
        .map(|l| l.split_whitespace().collect())
        .collect();
    assert_eq!(
        text_rows,
        vec![
            vec!["orders", "0", "4", "10", "6", "-"],
            vec!["orders", "1", "4", "5", "1", "-"],
            vec!["orders", "2", "0", "0", "0", "-"],
        ]
    );
    assert!(text.ends_with("total lag: 7\n"), "{text}");

    // A group created by a commit alone: classic, Empty, no protocol type.
    assert_eq!(
        server.list(),
        vec![json!({"group": "app", "type": "classic", "state": "Empty", "protocol_type": ""})]
    );
    let run = server.ok(&["group", "list", "--state", "empty"], "");
    let listed: Vec<Vec<&str>> = run
        .stdout
        .lines()
        .map(|l| l.split_whitespace().collect())
        .collect();
    assert_eq!(
        listed,
        vec![
            vec!["GROUP", "TYPE", "STATE", "PROTOCOL-TYPE"],
            vec!["app", "classic", "Empty", "-"],
        ]
    );
    let run = server.ok(&["group", "list", "--state", "Stable"], "");
    assert_eq!(run.stdout, "");
    let run = server.ok(&["group", "list", "--type", "consumer", "--json"], "");
    assert_eq!(run.stdout, "");

    // --shift-by moves from the committed offset and stays within [earliest, log end].
    let run = server.ok(
        &[
            "group",
            "reset-offsets",
            "app",
            "--topic",
            "orders:0",
            "--shift-by",
            "-3",
            "--execute",
            "--json",
        ],
        "",
    );
    assert_eq!(
        json_lines(&run.stdout),
        vec![json!({"topic": "orders", "partition": 0, "current_offset": 4, "new_offset": 1})]
    );
    let run = server.ok(
        &[
            "group",
            "reset-offsets",
            "app",
            "--topic",
            "orders:0,1",
            "--shift-by",
            "-100",
        ],
        "",
    );
    assert_eq!(
        plan(&run.stdout),
        vec![
            words(&["orders", "0", "1", "0"]),
            words(&["orders", "1", "4", "0"]),
        ]
    );
    server.ok(
        &[
            "group",
            "reset-offsets",
            "app",
            "--topic",
            "orders:0",
            "--shift-by",
            "100",
            "--execute",
        ],
        "",
    );
    server.ok(
        &[
            "group",
            "reset-offsets",
            "app",
            "--topic",
            "orders:1",
            "--to-latest",
            "--execute",
        ],
        "",
    );
    let d = server.describe("app");
    assert_eq!(
        offsets(&d),
        vec![
            row("orders", 0, 10, 10),
            row("orders", 1, 5, 5),
            row("orders", 2, 0, 0)
        ]
    );
    assert_eq!(d["total_lag"], 0);

    // --all-topics: every partition with a committed offset; a dry run leaves them alone.
    let run = server.ok(
        &[
            "group",
            "reset-offsets",
            "app",
            "--all-topics",
            "--to-earliest",
        ],
        "",
    );
    assert_eq!(
        plan(&run.stdout),
        vec![
            words(&["orders", "0", "10", "0"]),
            words(&["orders", "1", "5", "0"]),
            words(&["orders", "2", "0", "0"]),
        ]
    );
    assert_eq!(server.describe("app")["total_lag"], 0);
    server.ok(
        &[
            "group",
            "reset-offsets",
            "app",
            "--all-topics",
            "--to-earliest",
            "--execute",
        ],
        "",
    );
    assert_eq!(server.describe("app")["total_lag"], 15);

    // Delete: once, then it is gone.
    let run = server.ok(&["group", "delete", "app"], "");
    assert_eq!(run.stdout, "deleted group app\n");
    assert!(server.list().is_empty());
    let run = server.fails(&["group", "describe", "app"], "");
    assert!(run.stderr.contains("GROUP_ID_NOT_FOUND"), "{}", run.stderr);
    let run = server.fails(&["group", "delete", "app"], "");
    assert!(run.stderr.contains("GROUP_ID_NOT_FOUND"), "{}", run.stderr);
}

#[test]
fn reset_to_a_time_picks_the_first_record_at_or_after_it() {
    let server = Server::start_fresh();
    server.ok(&["topic", "create", "times"], "");
    let input: String = [1000, 2000, 3000]
        .iter()
        .map(|ts| format!("{{\"value\":\"at {ts}\",\"timestamp\":{ts}}}\n"))
        .collect();
    server.ok(&["produce", "times", "--json"], &input);

    for (time, expected) in [
        ("0", "0"),
        ("1970-01-01T00:00:02Z", "1"),
        ("1970-01-01T01:00:01.500+01:00", "1"),
        ("2500", "2"),
        ("3000", "2"),
        // No record at or after the time: the log end.
        ("2030-01-01T00:00:00Z", "3"),
    ] {
        let run = server.ok(
            &[
                "group",
                "reset-offsets",
                "clock",
                "--topic",
                "times",
                "--to-datetime",
                time,
            ],
            "",
        );
        assert_eq!(
            plan(&run.stdout),
            vec![words(&["times", "0", "-", expected])],
            "{time}"
        );
    }
    server.ok(
        &[
            "group",
            "reset-offsets",
            "clock",
            "--topic",
            "times",
            "--to-datetime",
            "1970-01-01T00:00:02Z",
            "--execute",
        ],
        "",
    );
    let d = server.describe("clock");
    assert_eq!(offsets(&d), vec![row("times", 0, 1, 3)]);
    assert_eq!(d["total_lag"], 2);
}

#[test]
fn group_errors_name_the_kafka_error_and_exit_non_zero() {
    let server = Server::start_fresh();
    orders(&server);

    let run = server.fails(
        &[
            "group",
            "reset-offsets",
            "g",
            "--topic",
            "nosuch",
            "--to-earliest",
        ],
        "",
    );
    assert!(
        run.stderr
            .contains("topic 'nosuch' does not exist (UNKNOWN_TOPIC_OR_PARTITION)"),
        "{}",
        run.stderr
    );
    let run = server.fails(
        &[
            "group",
            "reset-offsets",
            "g",
            "--topic",
            "orders:3",
            "--to-earliest",
        ],
        "",
    );
    assert!(
        run.stderr.contains("topic 'orders' has no partition 3"),
        "{}",
        run.stderr
    );
    let run = server.fails(
        &[
            "group",
            "reset-offsets",
            "g",
            "--topic",
            "orders",
            "--shift-by",
            "1",
        ],
        "",
    );
    assert!(
        run.stderr.contains("--shift-by needs a committed offset")
            && run.stderr.contains("orders/0, orders/1, orders/2"),
        "{}",
        run.stderr
    );
    let run = server.fails(
        &["group", "reset-offsets", "g", "--all-topics", "--to-latest"],
        "",
    );
    assert!(
        run.stderr.contains("has no committed offsets"),
        "{}",
        run.stderr
    );
    assert!(
        server.list().is_empty(),
        "failed resets must not create the group"
    );

    // Several groups: each gets its line, the exit code reports any failure.
    server.ok(
        &[
            "group",
            "reset-offsets",
            "keep",
            "--topic",
            "orders",
            "--to-latest",
            "--execute",
        ],
        "",
    );
    let run = server.fails(&["group", "delete", "keep", "never-was"], "");
    assert_eq!(run.stdout, "deleted group keep\n");
    assert!(
        run.stderr
            .contains("cannot delete group 'never-was': GROUP_ID_NOT_FOUND"),
        "{}",
        run.stderr
    );
    assert!(
        run.stderr.contains("1 of 2 groups not deleted"),
        "{}",
        run.stderr
    );
}

/// A kcat balanced consumer (classic protocol) in `group`, stopped with SIGTERM (so it leaves
/// the group) when dropped.
struct KcatConsumer(Child);

impl KcatConsumer {
    fn start(bootstrap: &str, group: &str, topic: &str) -> KcatConsumer {
        let child = Command::new("kcat")
            .args(["-b", bootstrap, "-G", group, topic, "-q", "-o", "beginning"])
            .args([
                "-X",
                "auto.commit.interval.ms=100",
                "-X",
                "session.timeout.ms=6000",
            ])
            .args(["-X", "client.id=kcat-test"])
            .stdout(Stdio::null())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("kcat");
        KcatConsumer(child)
    }

    fn stop(&mut self) {
        if self.0.try_wait().unwrap().is_none() {
            let pid = self.0.id().to_string();
            Command::new("kill").args(["-TERM", &pid]).status().unwrap();
            let started = Instant::now();
            while self.0.try_wait().unwrap().is_none() {
                if started.elapsed() > Duration::from_secs(20) {
                    let _ = self.0.kill();
                }
                std::thread::sleep(Duration::from_millis(20));
            }
        }
    }
}

impl Drop for KcatConsumer {
    fn drop(&mut self) {
        self.stop();
    }
}

/// Polls `describe GROUP --json` until `done` holds for it.
fn wait_for(server: &Server, group: &str, what: &str, done: impl Fn(&Value) -> bool) -> Value {
    let started = Instant::now();
    loop {
        let run = server.run(&["group", "describe", group, "--json"], "");
        if run.status.success() {
            let d: Value = serde_json::from_str(&run.stdout).unwrap();
            if done(&d) {
                return d;
            }
            assert!(
                started.elapsed() < GROUP_WAIT,
                "group {group} never {what}; last: {d}"
            );
        } else {
            assert!(
                started.elapsed() < GROUP_WAIT,
                "group {group} never {what}; last: {}",
                run.stderr
            );
        }
        std::thread::sleep(Duration::from_millis(200));
    }
}

#[test]
fn active_members_are_shown_and_block_delete_and_reset() {
    if !have_kcat() {
        eprintln!("kcat is not installed: skipping the consumer-group member checks");
        return;
    }
    let server = Server::start_fresh();
    orders(&server);
    let mut consumer = KcatConsumer::start(&server.bootstrap(), "live", "orders");

    // Joined, owns all three partitions, and has committed what it read.
    let d = wait_for(&server, "live", "caught up", |d| {
        d["state"] == "Stable"
            && d["members"].as_array().is_some_and(|m| m.len() == 1)
            && d["offsets"].as_array().is_some_and(|rows| {
                rows.iter()
                    .any(|r| r["partition"] == 0 && r["committed_offset"] == 10)
                    && rows
                        .iter()
                        .any(|r| r["partition"] == 1 && r["committed_offset"] == 5)
            })
    });
    assert_eq!(d["type"], "classic");
    assert_eq!(d["protocol_type"], "consumer");
    let member = &d["members"][0];
    assert_eq!(member["client_id"], "kcat-test");
    assert_eq!(
        member["assignment"],
        json!([{"topic": "orders", "partitions": [0, 1, 2]}])
    );
    let member_id = member["member_id"].clone();
    assert!(member_id.as_str().is_some_and(|m| !m.is_empty()), "{d}");
    // Every partition is owned. The empty one may have nothing committed: then no lag is known.
    let rows = d["offsets"].as_array().unwrap();
    assert_eq!(rows.len(), 3, "{d}");
    for r in rows {
        assert_eq!(r["member_id"], member_id, "{r}");
    }
    assert_eq!(rows[0]["lag"], 0);
    assert_eq!(rows[1]["lag"], 0);
    assert_eq!(rows[2]["log_end_offset"], 0);
    assert_eq!(
        rows[2]["lag"],
        if rows[2]["committed_offset"].is_null() {
            Value::Null
        } else {
            json!(0)
        }
    );
    assert_eq!(
        server.list(),
        vec![json!({
            "group": "live",
            "type": "classic",
            "state": "Stable",
            "protocol_type": "consumer",
        })]
    );

    // A live group can be neither deleted nor reset; a dry run still shows the plan.
    let run = server.fails(&["group", "delete", "live"], "");
    assert!(run.stderr.contains("NON_EMPTY_GROUP"), "{}", run.stderr);
    assert!(run.stderr.contains("stop its consumers"), "{}", run.stderr);
    let reset = [
        "group",
        "reset-offsets",
        "live",
        "--topic",
        "orders",
        "--to-earliest",
    ];
    let run = server.fails(&[&reset[..], &["--execute"]].concat(), "");
    assert!(
        run.stderr.contains("is active (state Stable, 1 member)")
            && run.stderr.contains("stop its consumers"),
        "{}",
        run.stderr
    );
    let run = server.ok(&reset, "");
    assert_eq!(plan(&run.stdout)[0], words(&["orders", "0", "10", "0"]));
    assert!(run.stderr.contains("will be refused"), "{}", run.stderr);

    // Once the consumer leaves, the group is Empty and both work.
    consumer.stop();
    wait_for(&server, "live", "became Empty", |d| d["state"] == "Empty");
    server.ok(&[&reset[..], &["--execute"]].concat(), "");
    let d = server.describe("live");
    assert_eq!(d["members"], json!([]));
    assert_eq!(d["offsets"][0]["committed_offset"], 0);
    assert_eq!(d["offsets"][0]["lag"], 10);
    let run = server.ok(&["group", "delete", "live"], "");
    assert_eq!(run.stdout, "deleted group live\n");
}
