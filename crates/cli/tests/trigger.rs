//! `sluice trigger` against a small fake HTTP API in the test: the requests each command sends
//! (method, path, body, key) and how it prints the answers, errors and exit codes included.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::process::{Command, Output};
use std::sync::mpsc;
use std::thread::JoinHandle;
use std::time::Duration;

use serde_json::{Value, json};

const EXAMPLE_RULE: &str = r#""signed_up" THEN (NOT "paid" WITHIN 7d)"#;

/// One request as the fake server saw it.
#[derive(Debug)]
struct Seen {
    method: String,
    path: String,
    /// Header names in lowercase.
    headers: Vec<(String, String)>,
    body: String,
}

impl Seen {
    fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }

    fn json(&self) -> Value {
        serde_json::from_str(&self.body).unwrap_or_else(|e| panic!("{e}: {}", self.body))
    }
}

/// A fake HTTP API on 127.0.0.1 that answers each connection's one request with the next
/// canned answer, and reports what it was asked. Stops after the answers run out.
struct FakeApi {
    addr: String,
    seen: mpsc::Receiver<Seen>,
    thread: Option<JoinHandle<()>>,
}

impl FakeApi {
    fn start(answers: Vec<(u16, String)>) -> FakeApi {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap().to_string();
        let (tx, seen) = mpsc::channel();
        let thread = std::thread::spawn(move || {
            for (status, body) in answers {
                let Ok((stream, _)) = listener.accept() else {
                    return;
                };
                let _ = stream.set_read_timeout(Some(Duration::from_secs(10)));
                let Some(request) = read_request(&stream) else {
                    return;
                };
                let _ = tx.send(request);
                let mut stream = stream;
                let reason = match status {
                    200 => "OK",
                    201 => "Created",
                    204 => "No Content",
                    400 => "Bad Request",
                    404 => "Not Found",
                    _ => "Other",
                };
                let head = if status == 204 {
                    format!("HTTP/1.1 {status} {reason}\r\nconnection: close\r\n\r\n")
                } else {
                    format!(
                        "HTTP/1.1 {status} {reason}\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n",
                        body.len()
                    )
                };
                let _ = stream.write_all(head.as_bytes());
                if status != 204 {
                    let _ = stream.write_all(body.as_bytes());
                }
            }
        });
        FakeApi {
            addr,
            seen,
            thread: Some(thread),
        }
    }

    /// The next request the server got.
    fn next(&self) -> Seen {
        self.seen
            .recv_timeout(Duration::from_secs(10))
            .expect("the CLI sent no request")
    }

    /// Runs `sluice ARGS --http ADDR` with no SLUICE_* settings from the environment.
    fn run(&self, args: &[&str]) -> Output {
        run(args, &[("SLUICE_HTTP", &self.addr)])
    }
}

impl Drop for FakeApi {
    fn drop(&mut self) {
        // Unblock an accept still waiting for a request that never came, then join.
        let _ = TcpStream::connect(&self.addr);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

fn read_request(stream: &TcpStream) -> Option<Seen> {
    let mut reader = BufReader::new(stream);
    let mut line = String::new();
    reader.read_line(&mut line).ok()?;
    let mut parts = line.split_whitespace();
    let method = parts.next()?.to_owned();
    let path = parts.next()?.to_owned();
    let mut headers = Vec::new();
    loop {
        let mut h = String::new();
        reader.read_line(&mut h).ok()?;
        let h = h.trim_end();
        if h.is_empty() {
            break;
        }
        let (name, value) = h.split_once(':')?;
        headers.push((name.trim().to_ascii_lowercase(), value.trim().to_owned()));
    }
    let length = headers
        .iter()
        .find(|(n, _)| n == "content-length")
        .map_or(0, |(_, v)| v.parse().unwrap_or(0));
    let mut body = vec![0; length];
    reader.read_exact(&mut body).ok()?;
    Some(Seen {
        method,
        path,
        headers,
        body: String::from_utf8(body).ok()?,
    })
}

/// Runs the CLI with `env` set and every other SLUICE_* variable of this process removed.
fn run(args: &[&str], env: &[(&str, &str)]) -> Output {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_sluice"));
    cmd.args(args);
    for var in ["SLUICE_HTTP", "SLUICE_API_KEY", "SLUICE_HTTP_CA_FILE"] {
        cmd.env_remove(var);
    }
    cmd.envs(env.iter().copied());
    cmd.output().expect("run sluice")
}

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

fn info(name: &str, sink: &str) -> Value {
    json!({
        "name": name,
        "sources": ["signups"],
        "rule": EXAMPLE_RULE,
        "rule_json": {"operator": "then", "a": "signed_up", "b": {"operator": "within", "a": {"operator": "not", "a": "paid"}, "d": "7d"}},
        "entity": "key",
        "event": "header:event",
        "sink": sink,
        "start": "latest",
        "created_ms": 1_767_225_600_000_i64,
        "status": {
            "state": "running", "entities": 12, "events": 40, "firings": 3, "delivered": 3,
            "delivery_failures": 0, "dead_lettered": 0, "skipped": {}, "lag": 0,
        },
    })
}

#[test]
fn the_issue_example_creates_a_trigger() {
    let api = FakeApi::start(vec![(201, info("unpaid", "topic:unpaid").to_string())]);
    let out = api.run(&[
        "trigger",
        "create",
        "unpaid",
        "--source",
        "signups",
        "--rule",
        EXAMPLE_RULE,
        "--sink",
        "topic:unpaid",
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    let seen = api.next();
    assert_eq!(
        (seen.method.as_str(), seen.path.as_str()),
        ("POST", "/triggers")
    );
    assert_eq!(
        seen.json(),
        json!({"name": "unpaid", "sources": ["signups"], "sink": "topic:unpaid", "rule": EXAMPLE_RULE}),
        "only the flags given: the server's defaults apply to the rest"
    );
    assert_eq!(seen.header("content-type"), Some("application/json"));
    assert_eq!(seen.header("authorization"), None);
    assert_eq!(
        stdout(&out),
        format!("created trigger unpaid\n  rule: {EXAMPLE_RULE}\n  sink: topic:unpaid\n")
    );
}

#[test]
fn a_webhook_trigger_with_every_flag_shows_its_secret_once() {
    let mut created = info("churn", "https://hooks.example.com/churn");
    created["secret"] = json!("whsec_generated");
    created["dead_letter_topic"] = json!("churn.failed");
    let api = FakeApi::start(vec![(201, created.to_string()), (201, created.to_string())]);
    let args = [
        "trigger",
        "create",
        "churn",
        "--source",
        "signups",
        "--source",
        "payments",
        "--rule-json",
        r#"{"operator": "then", "a": "signed_up", "b": "paid"}"#,
        "--entity",
        "json:user",
        "--event",
        "topic",
        "--sink",
        "https://hooks.example.com/churn",
        "--dead-letter-topic",
        "churn.failed",
        "--max-attempts",
        "3",
        "--initial-backoff-ms",
        "500",
        "--max-backoff-ms",
        "30000",
        "--start",
        "earliest",
    ];
    let out = run(
        &args,
        &[("SLUICE_HTTP", &api.addr), ("SLUICE_API_KEY", "sk_test")],
    );
    assert!(out.status.success(), "{}", stderr(&out));
    let seen = api.next();
    assert_eq!(seen.header("authorization"), Some("Bearer sk_test"));
    assert_eq!(
        seen.json(),
        json!({
            "name": "churn",
            "sources": ["signups", "payments"],
            "sink": "https://hooks.example.com/churn",
            "rule_json": {"operator": "then", "a": "signed_up", "b": "paid"},
            "entity": "json:user",
            "event": "topic",
            "dead_letter_topic": "churn.failed",
            "start": "earliest",
            "max_attempts": 3,
            "initial_backoff_ms": 500,
            "max_backoff_ms": 30000,
        })
    );
    let printed = stdout(&out);
    assert!(printed.starts_with("created trigger churn\n"), "{printed}");
    assert!(
        printed.contains("  sink: https://hooks.example.com/churn\n"),
        "{printed}"
    );
    assert!(printed.contains("  secret: whsec_generated\n"), "{printed}");
    assert!(printed.contains("shown only once"), "{printed}");

    // --json prints the server's answer as it came; --http and --api-key as flags.
    let mut with_json = args.to_vec();
    with_json.extend([
        "--json",
        "--secret",
        "mine",
        "--api-key",
        "sk_flag",
        "--http",
    ]);
    with_json.push(&api.addr);
    let out = run(&with_json, &[]);
    assert!(out.status.success(), "{}", stderr(&out));
    let seen = api.next();
    assert_eq!(seen.header("authorization"), Some("Bearer sk_flag"));
    assert_eq!(seen.json()["secret"], "mine");
    let printed: Value = serde_json::from_str(&stdout(&out)).unwrap();
    assert_eq!(printed, created);
}

#[test]
fn a_refused_rule_is_shown_with_a_caret_and_fails() {
    let rule = r#""signed_up" THEN (NOT "paid" WITHIN 7x)"#;
    let answer = json!({
        "error": "rule: at byte 36: expected a duration like 7d, found \"7x\"",
        "position": 36,
    });
    let api = FakeApi::start(vec![(400, answer.to_string())]);
    let out = api.run(&[
        "trigger",
        "create",
        "unpaid",
        "--source",
        "signups",
        "--rule",
        rule,
        "--sink",
        "topic:unpaid",
    ]);
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(stdout(&out), "");
    let err = stderr(&out);
    assert!(
        err.contains(
            "cannot create trigger 'unpaid': rule: at byte 36: expected a duration like 7d, found \"7x\" (HTTP 400)"
        ),
        "{err}"
    );
    let lines: Vec<&str> = err.lines().collect();
    let at = lines.iter().position(|l| l.trim() == rule).expect(&err);
    let caret = lines[at + 1];
    assert_eq!(caret.trim(), "^", "{err}");
    let rule_column = lines[at].find(rule).unwrap();
    assert_eq!(caret.find('^').unwrap(), rule_column + 36, "{err}");
}

#[test]
fn list_prints_a_table() {
    let mut failed = info("b-webhook", "https://hooks.example.com/x");
    failed["status"]["state"] = json!("failed");
    failed["status"]["lag"] = json!(1200);
    failed["sources"] = json!(["signups", "payments"]);
    let listed = json!({"triggers": [info("unpaid", "topic:unpaid"), failed]});
    let api = FakeApi::start(vec![
        (200, listed.to_string()),
        (200, listed.to_string()),
        (200, json!({"triggers": []}).to_string()),
    ]);
    let out = api.run(&["trigger", "list"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let seen = api.next();
    assert_eq!(
        (seen.method.as_str(), seen.path.as_str()),
        ("GET", "/triggers")
    );
    let table = stdout(&out);
    let lines: Vec<&str> = table.lines().collect();
    assert_eq!(lines.len(), 3, "{table}");
    let columns = |line: &str| -> Vec<String> {
        line.split("  ")
            .map(str::trim)
            .filter(|c| !c.is_empty())
            .map(str::to_owned)
            .collect()
    };
    assert_eq!(
        columns(lines[0]),
        [
            "NAME", "STATE", "SOURCES", "RULE", "SINK", "ENTITIES", "FIRINGS", "LAG"
        ]
    );
    assert_eq!(
        columns(lines[1]),
        [
            "unpaid",
            "running",
            "signups",
            EXAMPLE_RULE,
            "topic:unpaid",
            "12",
            "3",
            "0"
        ]
    );
    assert_eq!(
        columns(lines[2]),
        [
            "b-webhook",
            "failed",
            "signups,payments",
            EXAMPLE_RULE,
            "https://hooks.example.com/x",
            "12",
            "3",
            "1200"
        ]
    );
    // Aligned: every column starts at the same place on every line.
    let sink_at = lines[0].find("SINK").unwrap();
    assert_eq!(lines[1].find("topic:unpaid"), Some(sink_at), "{table}");
    assert_eq!(lines[2].find("https://"), Some(sink_at), "{table}");

    let out = api.run(&["trigger", "list", "--json"]);
    let printed: Value = serde_json::from_str(&stdout(&out)).unwrap();
    assert_eq!(printed, listed);
    let _ = api.next();

    let out = api.run(&["trigger", "list"]);
    assert!(out.status.success());
    assert_eq!(stdout(&out), "no triggers\n");
}

#[test]
fn describe_prints_every_field_and_counter() {
    let mut t = info("unpaid", "https://hooks.example.com/x");
    t["dead_letter_topic"] = json!("unpaid.dead-letter");
    t["status"] = json!({
        "state": "running", "entities": 12, "events": 40, "firings": 3, "delivered": 2,
        "delivery_failures": 5, "dead_lettered": 1,
        "skipped": {"bad_json": 4, "no_entity": 2}, "lag": 7,
    });
    let api = FakeApi::start(vec![
        (200, t.to_string()),
        (
            404,
            json!({"error": "trigger \"nope\" does not exist"}).to_string(),
        ),
    ]);
    let out = api.run(&["trigger", "describe", "unpaid"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let seen = api.next();
    assert_eq!(
        (seen.method.as_str(), seen.path.as_str()),
        ("GET", "/triggers/unpaid")
    );
    let printed = stdout(&out);
    for line in [
        "trigger: unpaid",
        "state: running",
        "sources: signups",
        &format!("rule: {EXAMPLE_RULE}"),
        "entity: key",
        "event: header:event",
        "sink: https://hooks.example.com/x",
        "dead-letter topic: unpaid.dead-letter",
        "start: latest",
        "created: 2026-01-01T00:00:00Z (1767225600000 ms)",
        "  entities: 12",
        "  events: 40",
        "  firings: 3",
        "  delivered: 2",
        "  delivery failures: 5",
        "  dead-lettered: 1",
        "  lag: 7",
        "  skipped:",
        "    bad_json: 4",
        "    no_entity: 2",
    ] {
        assert!(
            printed.lines().any(|l| l == line),
            "{line:?} not in\n{printed}"
        );
    }

    let out = api.run(&["trigger", "describe", "nope"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        stderr(&out)
            .contains("cannot describe trigger 'nope': trigger \"nope\" does not exist (HTTP 404)"),
        "{}",
        stderr(&out)
    );
}

#[test]
fn delete_sends_a_delete() {
    let api = FakeApi::start(vec![
        (204, String::new()),
        (
            404,
            json!({"error": "trigger \"gone\" does not exist"}).to_string(),
        ),
    ]);
    let out = api.run(&["trigger", "delete", "unpaid"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let seen = api.next();
    assert_eq!(
        (seen.method.as_str(), seen.path.as_str()),
        ("DELETE", "/triggers/unpaid")
    );
    assert_eq!(stdout(&out), "deleted trigger unpaid\n");
    let out = api.run(&["trigger", "delete", "gone"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(stderr(&out).contains("does not exist (HTTP 404)"));
}

#[test]
fn unreachable_brokers_and_bad_arguments_fail() {
    // Nothing listens on port 1.
    let out = run(&["trigger", "list", "--http", "127.0.0.1:1"], &[]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        stderr(&out).contains("cannot reach the broker's HTTP API at http://127.0.0.1:1"),
        "{}",
        stderr(&out)
    );
    let out = run(&["trigger", "list", "--http", "ftp://x:1"], &[]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        stderr(&out).contains("must be http or https"),
        "{}",
        stderr(&out)
    );

    // Usage errors are clap's (exit code 2), before anything is sent.
    for args in [
        &[
            "trigger", "create", "t", "--source", "s", "--sink", "topic:x",
        ][..],
        &[
            "trigger",
            "create",
            "t",
            "--source",
            "s",
            "--sink",
            "topic:x",
            "--rule",
            "\"a\"",
            "--rule-json",
            "\"a\"",
        ],
        &[
            "trigger", "create", "t", "--rule", "\"a\"", "--sink", "topic:x",
        ],
        &[
            "trigger", "create", "t", "--source", "s", "--rule", "\"a\"", "--sink", "topic:x",
            "--start", "middle",
        ],
    ] {
        let out = run(args, &[("SLUICE_HTTP", "127.0.0.1:1")]);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {}", stderr(&out));
    }
    let out = run(
        &[
            "trigger",
            "create",
            "t",
            "--source",
            "s",
            "--rule-json",
            "{not json",
            "--sink",
            "topic:x",
        ],
        &[("SLUICE_HTTP", "127.0.0.1:1")],
    );
    assert_eq!(out.status.code(), Some(1));
    assert!(
        stderr(&out).contains("--rule-json is not JSON"),
        "{}",
        stderr(&out)
    );
}

#[test]
fn help_lists_the_command_and_explains_the_flags() {
    let out = run(&["--help"], &[]);
    assert!(stdout(&out).contains("trigger"), "{}", stdout(&out));
    let out = run(&["trigger", "create", "--help"], &[]);
    let help = stdout(&out);
    for flag in [
        "--source",
        "--rule",
        "--rule-json",
        "--entity",
        "--event",
        "--sink",
        "--secret",
        "--dead-letter-topic",
        "--max-attempts",
        "--initial-backoff-ms",
        "--max-backoff-ms",
        "--start",
        "--json",
        "--http",
        "--api-key",
        "--http-ca-file",
    ] {
        assert!(help.contains(flag), "{flag} not in\n{help}");
    }
    assert!(help.contains("e.g."), "{help}");
}
