//! `sluice bench`: a short smoke run of every mode against a real `sluice serve`, through
//! librdkafka, checking the results directory each one writes.

mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use common::{Server, finish};
use serde_json::Value;

const BENCH_TIMEOUT: Duration = Duration::from_secs(240);

/// Runs `sluice bench ARGS`; returns (success, stdout, stderr).
fn bench(args: &[&str]) -> (bool, String, String) {
    let mut child = Command::new(env!("CARGO_BIN_EXE_sluice"))
        .arg("bench")
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn sluice bench");
    let (status, out, err) = finish(&mut child, b"", BENCH_TIMEOUT);
    (status.success(), out, err)
}

/// Writes a workload file and runs one mode; returns the campaign directory.
fn campaign(dir: &Path, mode: &str, workload: &str, extra: &[&str]) -> (PathBuf, String) {
    let file = dir.join(format!("{mode}.toml"));
    std::fs::write(&file, workload).unwrap();
    let out = dir.join("results");
    let mut args = vec![
        mode,
        file.to_str().unwrap(),
        "--out",
        out.to_str().unwrap(),
        "--quiet",
    ];
    args.extend_from_slice(extra);
    let (ok, stdout, stderr) = bench(&args);
    assert!(ok, "sluice bench {mode} failed:\n{stdout}\n{stderr}");
    let line = stdout
        .lines()
        .find_map(|l| l.strip_prefix("results: "))
        .expect("results line");
    (PathBuf::from(line.trim()), stdout)
}

fn read_campaign(dir: &Path) -> Value {
    for file in [
        "campaign.json",
        "results.csv",
        "intervals.csv",
        "report.html",
        "points/p0.json",
    ] {
        assert!(
            dir.join(file).is_file(),
            "{file} missing in {}",
            dir.display()
        );
    }
    serde_json::from_str(&std::fs::read_to_string(dir.join("campaign.json")).unwrap()).unwrap()
}

const SMALL: &str = "partitions = 3\nproducers = 2\nconsumers = 2\nrecord_size = 256\nwarmup_s = 1\ninterval_s = 0.5\n";

#[test]
fn run_mode_measures_a_fixed_rate_with_dimensions_and_compare_puts_two_side_by_side() {
    let server = Server::start_fresh();
    let tmp = tempfile::tempdir().unwrap();
    let workload =
        format!("name = \"smoke-run\"\n{SMALL}duration_s = 3\nproducer_rate = [1000, 2000]\n");
    let bootstrap = server.bootstrap();
    let (dir, stdout) = campaign(
        tmp.path(),
        "run",
        &workload,
        &["-b", &bootstrap, "--broker-label", "sluice"],
    );
    let c = read_campaign(&dir);
    assert_eq!(c["mode"], "run");
    assert_eq!(c["dimensions"], serde_json::json!(["producer_rate"]));
    assert!(
        c["client"]["name"]
            .as_str()
            .unwrap()
            .starts_with("librdkafka")
    );
    assert!(c["machine"]["nproc"].as_u64().unwrap() >= 1);
    assert_eq!(c["points"].as_array().unwrap().len(), 2);
    for (point, rate) in c["points"].as_array().unwrap().iter().zip([1000.0, 2000.0]) {
        let r = &point["repeats"][0];
        assert_eq!(r["target_rps"].as_f64(), Some(rate));
        let produced = r["produce_rps"].as_f64().unwrap();
        assert!(
            (produced - rate).abs() < rate * 0.25,
            "produced {produced}/s at {rate}/s"
        );
        assert!(
            r["e2e_latency"]["count"].as_u64().unwrap() > 0,
            "no e2e latency: {r}"
        );
        assert!(r["ack_latency"]["p99_ms"].as_f64().unwrap() > 0.0);
        assert_eq!(r["totals"]["failed_records"], 0);
        assert!(!r["intervals"].as_array().unwrap().is_empty());
    }
    assert!(stdout.contains("producer_rate=2000"), "{stdout}");
    // The workload file is kept as given.
    assert_eq!(
        std::fs::read_to_string(dir.join("run.toml")).unwrap(),
        workload
    );
    assert!(
        std::fs::read_to_string(dir.join("report.html"))
            .unwrap()
            .contains("<svg")
    );

    let (other, _) = campaign(
        tmp.path(),
        "run",
        &workload,
        &["-b", &bootstrap, "--broker-label", "again"],
    );
    let out = tmp.path().join("cmp");
    let (ok, table, err) = bench(&[
        "compare",
        dir.to_str().unwrap(),
        other.to_str().unwrap(),
        "--out",
        out.to_str().unwrap(),
    ]);
    assert!(ok, "compare failed: {err}");
    assert!(
        table.contains("sluice") && table.contains("again"),
        "{table}"
    );
    assert!(out.join("compare.html").is_file() && out.join("compare.csv").is_file());
    // The test topics are deleted afterwards.
    let topics = server.ok(&["topic", "list"], "").stdout;
    assert!(!topics.contains("sluice-bench-"), "{topics}");
}

#[test]
fn explore_finds_and_sustains_a_rate() {
    let server = Server::start_fresh();
    let tmp = tempfile::tempdir().unwrap();
    let workload = format!(
        "name = \"smoke-explore\"\n{SMALL}\n[explore]\ntarget_ms = 2000\nstart_rate = 500\nmax_rate = 2000\nstep_s = 1\nsustain_s = 2\nsustain_interval_s = 0.5\n"
    );
    let (dir, _) = campaign(
        tmp.path(),
        "explore",
        &workload,
        &["-b", &server.bootstrap()],
    );
    let c = read_campaign(&dir);
    let e = &c["points"][0]["repeats"][0]["explore"];
    assert_eq!(e["passed"], true, "{e}");
    let steps = e["steps"].as_array().unwrap();
    let phases: Vec<&str> = steps.iter().map(|s| s["phase"].as_str().unwrap()).collect();
    let sustained = e["sustained_rps"].as_f64().unwrap();
    if steps.iter().all(|s| s["met"] == true) {
        // 500 -> 1000 -> 2000 (the cap) all pass, then 2000 is sustained.
        assert_eq!(phases, ["ramp", "ramp", "ramp", "sustain"], "{e}");
        assert_eq!(sustained, 2000.0, "{e}");
    } else {
        // A loaded machine (the rest of the suite runs alongside) can miss a ramp step; the
        // search below it must then still end in a sustained rate between start and cap, the
        // highest rate any search step met.
        assert_eq!(phases.first(), Some(&"ramp"), "{e}");
        assert_eq!(phases.last(), Some(&"sustain"), "{e}");
        assert!((500.0..=2000.0).contains(&sustained), "{e}");
        let best_met = steps
            .iter()
            .filter(|s| s["met"] == true && s["phase"] != "sustain")
            .filter_map(|s| s["target_rps"].as_f64())
            .fold(0.0, f64::max);
        assert!(sustained <= best_met, "{e}");
    }
}

#[test]
fn explore_searches_below_a_missed_target() {
    let server = Server::start_fresh();
    let tmp = tempfile::tempdir().unwrap();
    // Consumers that spend 1 ms per record cannot keep up with 2 × 1000 records/s.
    let workload = format!(
        "name = \"smoke-explore-miss\"\n{SMALL}processing_us = 1000\n\n[explore]\ntarget_ms = 300\nstart_rate = 800\nmax_rate = 6400\nstep_s = 1\nprecision = 0.5\nsustain_s = 2\nsustain_interval_s = 0.5\n"
    );
    let (dir, _) = campaign(
        tmp.path(),
        "explore",
        &workload,
        &["-b", &server.bootstrap()],
    );
    let c = read_campaign(&dir);
    let e = &c["points"][0]["repeats"][0]["explore"];
    let steps = e["steps"].as_array().unwrap();
    assert!(
        steps.iter().any(|s| s["met"] == false),
        "no step missed: {e}"
    );
    if let Some(rate) = e["sustained_rps"].as_f64() {
        assert!(rate < 6400.0, "{e}");
    }
}

#[test]
fn drain_times_consumers_reading_a_backlog() {
    let server = Server::start_fresh();
    let tmp = tempfile::tempdir().unwrap();
    let workload =
        format!("name = \"smoke-drain\"\n{SMALL}\n[drain]\nbacklog = \"4MB\"\ntimeout_s = 120\n");
    let (dir, _) = campaign(tmp.path(), "drain", &workload, &["-b", &server.bootstrap()]);
    let c = read_campaign(&dir);
    let d = &c["points"][0]["repeats"][0]["drain"];
    assert!(d["backlog_bytes"].as_u64().unwrap() >= 4_000_000, "{d}");
    assert!(
        d["drain_s"].as_f64().unwrap() > 0.0 && d["drain_mbps"].as_f64().unwrap() > 0.0,
        "{d}"
    );
    let consumed = c["points"][0]["repeats"][0]["totals"]["consumed_records"]
        .as_u64()
        .unwrap();
    assert!(
        consumed >= d["backlog_records"].as_u64().unwrap(),
        "{consumed} < backlog: {d}"
    );
}

/// A free port on 127.0.0.1 for a broker the benchmark starts (and restarts) itself.
fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

#[test]
fn correctness_survives_sigkills_of_a_broker_it_started() {
    let tmp = tempfile::tempdir().unwrap();
    let port = free_port();
    let bootstrap = format!("127.0.0.1:{port}");
    let data = tmp.path().join("data");
    let cmd = format!(
        "{} serve --data-dir {} --kafka-addr {bootstrap} --http-addr off",
        env!("CARGO_BIN_EXE_sluice"),
        data.display()
    );
    let workload = "name = \"smoke-correctness\"\npartitions = 3\nproducers = 2\nconsumers = 1\nrecord_size = 128\nkeys = true\nproducer_rate = 1500\nwarmup_s = 0\nduration_s = 6\ninterval_s = 0.5\n\n[correctness]\nkills = 2\nrestart_delay_s = 0.2\nsettle_timeout_s = 90\n";
    let (dir, stdout) = campaign(
        tmp.path(),
        "correctness",
        workload,
        &["-b", &bootstrap, "--broker-cmd", &cmd],
    );
    let c = read_campaign(&dir);
    let report = &c["points"][0]["repeats"][0]["correctness"];
    assert_eq!(report["kills"], 2, "{report}");
    assert_eq!(report["passed"], true, "{report}\n{stdout}");
    for fault in ["lost", "duplicated", "out_of_order", "corrupted"] {
        assert_eq!(report[fault], 0, "{fault}: {report}");
    }
    assert!(report["acked"].as_u64().unwrap() > 1000, "{report}");
    assert!(
        report["seen"].as_u64().unwrap() >= report["acked"].as_u64().unwrap(),
        "{report}"
    );
    assert!(
        c["broker"]["version"]
            .as_str()
            .unwrap()
            .starts_with("sluice"),
        "{}",
        c["broker"]
    );
    assert!(dir.join("broker.log").is_file());
}

#[test]
fn bad_workloads_are_refused_with_what_to_fix() {
    let tmp = tempfile::tempdir().unwrap();
    let file = tmp.path().join("bad.toml");
    std::fs::write(&file, "record_size = 10\n").unwrap();
    let (ok, _, err) = bench(&["run", file.to_str().unwrap(), "-b", "127.0.0.1:1"]);
    assert!(!ok);
    assert!(
        err.contains("record_size 10") && err.contains("28-byte"),
        "{err}"
    );
    let (ok, _, err) = bench(&["correctness", file.to_str().unwrap(), "-b", "127.0.0.1:1"]);
    assert!(!ok && err.contains("record_size"), "{err}");
    let (ok, _, err) = bench(&["compare", tmp.path().to_str().unwrap()]);
    assert!(!ok, "compare with one directory must fail: {err}");
}
