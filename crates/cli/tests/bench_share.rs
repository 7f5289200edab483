//! `sluice bench drain` with share consumers (KIP-932) against a real `sluice serve`: a tiny
//! backlog read by three share consumers that ACCEPT everything must be processed exactly
//! once, and the report's numbers must add up.

mod common;

use std::process::{Command, Stdio};
use std::time::Duration;

use common::{Server, finish};
use serde_json::Value;

const BENCH_TIMEOUT: Duration = Duration::from_secs(120);

const WORKLOAD: &str = r#"name = "share-tiny"
partitions = 1
producers = 1
consumers = 0
share_consumers = 3
record_size = 100
warmup_s = 0
duration_s = 30
interval_s = 0.5

[drain]
# 300 records, at a rate that ends the fill close to them.
backlog = 30000
fill_rate = 3000
timeout_s = 30

[share]
processing_ms_per_record = 0
"#;

fn as_u64(v: &Value) -> u64 {
    v.as_u64().unwrap_or_else(|| panic!("not a count: {v}"))
}

#[test]
fn share_consumers_process_every_record_once_and_the_numbers_add_up() {
    let server = Server::start_fresh();
    let tmp = tempfile::tempdir().unwrap();
    let file = tmp.path().join("share.toml");
    std::fs::write(&file, WORKLOAD).unwrap();
    let out = tmp.path().join("results");
    let pid = server.pid().to_string();
    let bootstrap = server.bootstrap();
    let mut child = Command::new(env!("CARGO_BIN_EXE_sluice"))
        .args(["bench", "drain"])
        .arg(&file)
        .args(["-b", &bootstrap, "--broker-pid", &pid, "--quiet", "--out"])
        .arg(&out)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn sluice bench");
    let (status, stdout, stderr) = finish(&mut child, b"", BENCH_TIMEOUT);
    assert!(status.success(), "sluice bench failed:\n{stdout}\n{stderr}");
    let dir = stdout
        .lines()
        .find_map(|l| l.strip_prefix("results: "))
        .expect("results line");
    let campaign: Value = serde_json::from_str(
        &std::fs::read_to_string(format!("{}/campaign.json", dir.trim())).unwrap(),
    )
    .unwrap();
    let run = &campaign["points"][0]["repeats"][0];
    let share = &run["share"];
    let drain = &run["drain"];

    // Every record of the backlog was acquired and processed exactly once.
    let backlog = as_u64(&drain["backlog_records"]);
    assert!(backlog >= 300, "backlog of {backlog} records");
    assert_eq!(as_u64(&share["distinct_records"]), backlog, "{share}");
    assert_eq!(as_u64(&share["processed_total"]), backlog, "{share}");
    assert_eq!(as_u64(&share["acquired_records"]), backlog, "{share}");
    assert_eq!(as_u64(&share["redelivered_records"]), 0, "{share}");
    assert_eq!(as_u64(&share["errors"]), 0, "{share}");
    assert_eq!(share["backlog_exhausted"], true);
    // Sluice serves ShareFetch v2, so the workload's acquire mode went to the broker.
    assert_eq!(share["acquire_mode_on_wire"], true, "{share}");
    assert_eq!(share["share_fetch_version"], 2, "{share}");
    assert_eq!(
        share["group_configs"]["share.auto.offset.reset"],
        "earliest"
    );

    // The measured window's numbers agree with each other and with the rest of the report.
    let per_consumer: Vec<u64> = share["per_consumer"]
        .as_array()
        .unwrap()
        .iter()
        .map(as_u64)
        .collect();
    assert_eq!(per_consumer.len(), 3);
    let records = as_u64(&share["records"]);
    assert_eq!(per_consumer.iter().sum::<u64>(), records);
    assert!(records > 0 && records <= backlog, "{records} of {backlog}");
    assert_eq!(as_u64(&run["totals"]["consumed_records"]), records);
    let measured_s = share["measured_s"].as_f64().unwrap();
    let rps = share["rps"].as_f64().unwrap();
    assert!((rps - records as f64 / measured_s).abs() < 1e-6 * rps.max(1.0));
    assert_eq!(run["consume_rps"].as_f64(), Some(rps));
    assert_eq!(drain["drain_s"].as_f64(), Some(measured_s));
    let spread = &share["per_consumer_spread"];
    assert_eq!(
        spread["min"].as_f64(),
        per_consumer.iter().min().map(|&n| n as f64)
    );
    assert_eq!(
        spread["max"].as_f64(),
        per_consumer.iter().max().map(|&n| n as f64)
    );
    let idle = per_consumer.iter().filter(|&&n| n == 0).count() as u64;
    assert_eq!(as_u64(&share["idle_consumers"]), idle);
    let jain = share["jain_index"].as_f64().unwrap();
    assert!(jain > 0.0 && jain <= 1.0 + 1e-12, "Jain {jain}");
    // The broker's CPU time was recorded (--broker-pid), so is its cost per record.
    assert!(drain["drain_broker_cpu_s"].as_f64().is_some(), "{drain}");

    // The summary names the share columns; results.csv carries them.
    assert!(stdout.contains("rec/consumer median"), "{stdout}");
    let csv = std::fs::read_to_string(format!("{}/results.csv", dir.trim())).unwrap();
    assert!(csv.lines().next().unwrap().contains("share_jain"), "{csv}");
}

#[test]
fn share_consumers_are_refused_outside_drain() {
    let tmp = tempfile::tempdir().unwrap();
    let file = tmp.path().join("share.toml");
    std::fs::write(&file, WORKLOAD).unwrap();
    // No broker is needed: the workload is refused before anything connects.
    let mut child = Command::new(env!("CARGO_BIN_EXE_sluice"))
        .args(["bench", "run"])
        .arg(&file)
        .args(["-b", "127.0.0.1:1", "--quiet", "--out"])
        .arg(tmp.path().join("results"))
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn sluice bench");
    let (status, stdout, stderr) = finish(&mut child, b"", BENCH_TIMEOUT);
    assert!(!status.success(), "{stdout}");
    assert!(stderr.contains("sluice bench drain"), "{stderr}");
}
