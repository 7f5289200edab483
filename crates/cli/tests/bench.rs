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

/// Sets `producer_byte_rate` for every client id without a quota of its own.
fn default_produce_quota(port: u16, bytes_per_s: f64) {
    use sluice_protocol::kafka_protocol::messages::{
        AlterClientQuotasRequest, ApiKey, RequestKind, ResponseKind, alter_client_quotas_request,
    };
    use sluice_protocol::kafka_protocol::protocol::StrBytes;
    let entry = alter_client_quotas_request::EntryData::default()
        .with_entity(vec![
            alter_client_quotas_request::EntityData::default()
                .with_entity_type(StrBytes::from_static_str("client-id"))
                .with_entity_name(None),
        ])
        .with_ops(vec![
            alter_client_quotas_request::OpData::default()
                .with_key(StrBytes::from_static_str("producer_byte_rate"))
                .with_value(bytes_per_s),
        ]);
    let body = RequestKind::AlterClientQuotas(
        AlterClientQuotasRequest::default().with_entries(vec![entry]),
    );
    match common::kafka_call(port, ApiKey::AlterClientQuotas, 1, body) {
        ResponseKind::AlterClientQuotas(r) => {
            assert!(r.entries.iter().all(|e| e.error_code == 0), "{r:?}")
        }
        other => panic!("unexpected {other:?}"),
    }
}

#[test]
fn storm_probes_capacity_then_counts_every_second_and_the_recovery() {
    let server = Server::start_fresh();
    // The broker's capacity is made small and known with a default produce quota (1 MB/s per
    // client id, about 3,000 records/s of 256 B per producer, in batches of at most 16 KiB so
    // that each throttle is short): unthrottled, a fast machine acknowledges more than the
    // generator can offer at 1.5x, and no storm forms.
    let port: u16 = server
        .bootstrap()
        .rsplit(':')
        .next()
        .unwrap()
        .parse()
        .unwrap();
    default_produce_quota(port, 1_000_000.0);
    let tmp = tempfile::tempdir().unwrap();
    // A short storm: 3 s probe, 2 s before, 3 s storm, 4 s after; the probe caps the rate so
    // that a debug build on a shared machine is not pushed into minutes of backlog.
    let workload = "name = \"smoke-storm\"\npartitions = 3\nproducers = 2\nconsumers = 0\n\
                    record_size = 256\nidempotence = false\n\
                    [producer_config]\n\"queue.buffering.max.messages\" = \"2000\"\n\
                    \"batch.size\" = \"16384\"\n\
                    [storm]\nprobe_s = 3\nbefore_s = 2\nstorm_s = 3\nafter_s = 4\n\
                    overload = 1.5\nafter = 0.25\nrecovered_hold_s = 1\nsettle_timeout_s = 20\n";
    let (dir, stdout) = campaign(
        tmp.path(),
        "storm",
        workload,
        &["-b", &server.bootstrap(), "--broker-label", "sluice"],
    );
    let c = read_campaign(&dir);
    assert_eq!(c["mode"], "storm");
    let r = &c["points"][0]["repeats"][0];
    let st = &r["storm"];
    assert_eq!(st["capacity_source"], "probe", "{st}");
    let capacity = st["capacity_rps"].as_f64().unwrap();
    assert!(capacity > 0.0, "{st}");
    assert_eq!(st["probe_rps"].as_array().unwrap().len(), 3, "{st}");
    let seconds = st["seconds"].as_array().unwrap();
    assert!(seconds.len() >= 9, "{} seconds", seconds.len());
    let phases: Vec<&str> = seconds
        .iter()
        .map(|s| s["phase"].as_str().unwrap())
        .collect();
    assert_eq!(
        &phases[..9],
        [
            "before", "before", "storm", "storm", "storm", "after", "after", "after", "after"
        ]
    );
    // The open-loop schedule offered what the phases asked for (±25%).
    let storm_offered: f64 = seconds[2..5]
        .iter()
        .map(|s| s["offered_rps"].as_f64().unwrap())
        .sum();
    let want = 1.5 * capacity * 3.0;
    assert!(
        (storm_offered - want).abs() < 0.25 * want,
        "offered {storm_offered} of {want}"
    );
    let new = st["new_records"].as_u64().unwrap();
    let acked = st["acked"].as_u64().unwrap();
    let given_up = st["given_up"].as_u64().unwrap();
    let unresolved = st["unresolved"].as_u64().unwrap();
    assert!(acked > 0 && acked + given_up + unresolved == new, "{st}");
    assert!(st["phases"].as_array().unwrap().len() >= 3, "{st}");
    assert!(st["appended_records"].as_u64().unwrap() >= acked, "{st}");
    assert!(st["recovery_s"].is_null() || st["recovery_s"].as_f64().unwrap() >= 1.0);
    assert!(r["ack_latency"]["count"].as_u64().unwrap() == acked, "{r}");
    let csv = std::fs::read_to_string(dir.join("storm.csv")).unwrap();
    assert!(
        csv.starts_with("point_id,label,repeat,t_s,phase,offered_rps"),
        "{csv}"
    );
    assert_eq!(csv.lines().count(), seconds.len() + 1);
    let html = std::fs::read_to_string(dir.join("report.html")).unwrap();
    assert!(html.contains("Retry storm") && html.contains("<svg"));
    assert!(stdout.contains("recovery s"), "{stdout}");
    // compare overlays the storm curves of two campaigns.
    let out = tmp.path().join("cmp");
    let (ok, _, err) = bench(&[
        "compare",
        dir.to_str().unwrap(),
        dir.to_str().unwrap(),
        "--out",
        out.to_str().unwrap(),
    ]);
    assert!(ok, "{err}");
    let html = std::fs::read_to_string(out.join("compare.html")).unwrap();
    assert!(
        html.contains("goodput / offered"),
        "no storm chart in compare.html"
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

/// A local-mode `sluice serve` on `address` with its own data directory under `dir`.
fn local_broker_cmd(dir: &Path, name: &str, address: &str) -> String {
    format!(
        "{} serve --data-dir {} --kafka-addr {address} --http-addr off",
        env!("CARGO_BIN_EXE_sluice"),
        dir.join(name).display()
    )
}

/// Whether `pid` is still a running process (a zombie waiting for a reaper does not count).
fn alive(pid: u64) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|stat| {
        stat.rsplit_once(')')
            .and_then(|(_, rest)| rest.split_whitespace().next())
            .is_some_and(|state| state != "Z" && state != "X")
    })
}

/// Whether something accepts connections at `address`.
fn listening(address: &str) -> bool {
    std::net::TcpStream::connect_timeout(&address.parse().unwrap(), Duration::from_millis(300))
        .is_ok()
}

/// Two brokers started by the benchmark, killed in turn. Two local-mode brokers are not one
/// cluster, so the load goes to the first alone (the bootstrap lists only it) and the second
/// only shows that it is started, killed, restarted and stopped like the first; the check of
/// the records still runs through the first's kills.
#[test]
fn correctness_kills_several_started_brokers_in_turn_and_stops_them_all() {
    let tmp = tempfile::tempdir().unwrap();
    let addresses = [
        format!("127.0.0.1:{}", free_port()),
        format!("127.0.0.1:{}", free_port()),
    ];
    let cmds: Vec<String> = addresses
        .iter()
        .enumerate()
        .map(|(i, a)| local_broker_cmd(tmp.path(), &format!("data-{i}"), a))
        .collect();
    let workload = "name = \"two-brokers\"\npartitions = 2\nproducers = 1\nconsumers = 1\nrecord_size = 128\nkeys = true\nproducer_rate = 1000\nwarmup_s = 0\nduration_s = 6\ninterval_s = 0.5\n\n[correctness]\nkills = 3\nrestart_delay_s = 1\nsettle_timeout_s = 60\n";
    let (dir, stdout) = campaign(
        tmp.path(),
        "correctness",
        workload,
        &[
            "-b",
            &addresses[0],
            "--broker-cmd",
            &cmds[0],
            "--broker-cmd",
            &cmds[1],
        ],
    );
    let c = read_campaign(&dir);
    let report = &c["points"][0]["repeats"][0]["correctness"];
    assert_eq!(report["kills"], 3, "{report}");
    assert_eq!(report["passed"], true, "{report}\n{stdout}");
    for fault in ["lost", "duplicated", "out_of_order", "corrupted"] {
        assert_eq!(report[fault], 0, "{fault}: {report}");
    }
    assert!(report["acked"].as_u64().unwrap() > 1000, "{report}");

    // Kills 0, 1, 2 hit brokers 0, 1, 0: each says which broker, where and when.
    let kills = report["kill_log"].as_array().unwrap();
    let order: Vec<u64> = kills
        .iter()
        .map(|k| k["broker"].as_u64().unwrap())
        .collect();
    assert_eq!(order, [0, 1, 0], "{report}");
    let mut last_t = 0.0;
    for k in kills {
        let b = k["broker"].as_u64().unwrap() as usize;
        assert_eq!(k["address"], addresses[b].as_str(), "{k}");
        assert!(k["at"].as_str().unwrap().ends_with('Z'), "{k}");
        let t = k["t_s"].as_f64().unwrap();
        assert!(t > last_t, "kills out of time order: {report}");
        last_t = t;
        assert_ne!(k["pid"], k["restarted_pid"], "{k}");
        assert!(k["down_s"].as_f64().unwrap() >= 1.0, "{k}");
    }
    assert_eq!(kills[2]["pid"], kills[0]["restarted_pid"], "{report}");
    // Reporting went on while a broker was down.
    let intervals = c["points"][0]["repeats"][0]["intervals"]
        .as_array()
        .unwrap();
    let restarts = intervals.iter().filter(|i| i["phase"] == "restart").count();
    assert!(restarts >= 3, "{restarts} restart intervals");

    // The campaign lists both brokers with every PID they had: 3 starts of broker 0, 2 of 1.
    let brokers = c["brokers"].as_array().unwrap();
    assert_eq!(brokers.len(), 2, "{}", c["brokers"]);
    let mut pids = Vec::new();
    for (i, (b, starts)) in brokers.iter().zip([3, 2]).enumerate() {
        assert_eq!(b["index"], i as u64, "{b}");
        assert_eq!(b["address"], addresses[i].as_str(), "{b}");
        let log = dir.join(b["log"].as_str().unwrap());
        assert_eq!(log, dir.join(format!("broker-{i}.log")));
        let log = std::fs::read_to_string(&log).unwrap();
        assert_eq!(
            log.matches("kafka listening on").count(),
            starts,
            "broker {i} log:\n{log}"
        );
        let had: Vec<u64> = b["pids"]
            .as_array()
            .unwrap()
            .iter()
            .map(|p| p.as_u64().unwrap())
            .collect();
        assert_eq!(had.len(), starts, "{b}");
        pids.extend(had);
    }
    assert_eq!(kills[1]["pid"], brokers[1]["pids"][0], "{report}");
    // Nothing left running: every PID is gone and neither address accepts connections.
    for pid in pids {
        assert!(!alive(pid), "broker pid {pid} outlived the benchmark");
    }
    for a in &addresses {
        assert!(!listening(a), "something still listens on {a}");
    }
}

/// The `sluice serve` processes whose parent is `parent`, from /proc.
fn brokers_of(parent: u32) -> Vec<u32> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
            continue;
        };
        // pid (comm) state ppid ...: the command name may hold spaces, so split after ')'.
        let ppid = stat
            .rsplit_once(')')
            .and_then(|(_, rest)| rest.split_whitespace().nth(1))
            .and_then(|p| p.parse::<u32>().ok());
        let serve = std::fs::read(format!("/proc/{pid}/cmdline"))
            .is_ok_and(|c| c.split(|&b| b == 0).any(|arg| arg == b"serve"));
        if ppid == Some(parent) && serve {
            out.push(pid);
        }
    }
    out
}

/// A benchmark killed outright (SIGKILL: no destructor runs) takes the brokers it started
/// with it.
#[test]
fn brokers_die_with_a_benchmark_killed_outright() {
    let tmp = tempfile::tempdir().unwrap();
    let addresses = [
        format!("127.0.0.1:{}", free_port()),
        format!("127.0.0.1:{}", free_port()),
    ];
    let file = tmp.path().join("long.toml");
    std::fs::write(
        &file,
        "name = \"long\"\npartitions = 1\nproducers = 1\nconsumers = 1\nrecord_size = 128\nproducer_rate = 100\nwarmup_s = 0\nduration_s = 120\n",
    )
    .unwrap();
    let out = tmp.path().join("results");
    let mut bench = Command::new(env!("CARGO_BIN_EXE_sluice"))
        .args(["bench", "correctness"])
        .arg(&file)
        .arg("--out")
        .arg(&out)
        .args(["--quiet", "-b", &addresses[0]])
        .args([
            "--broker-cmd",
            &local_broker_cmd(tmp.path(), "d0", &addresses[0]),
        ])
        .args([
            "--broker-cmd",
            &local_broker_cmd(tmp.path(), "d1", &addresses[1]),
        ])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let started = std::time::Instant::now();
    while !(listening(&addresses[0]) && listening(&addresses[1])) {
        if started.elapsed() > Duration::from_secs(60) || bench.try_wait().unwrap().is_some() {
            let _ = bench.kill();
            let _ = bench.wait();
            panic!("the two brokers did not both listen");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let brokers = brokers_of(bench.id());
    bench.kill().unwrap();
    bench.wait().unwrap();
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while brokers.iter().any(|&p| alive(u64::from(p))) && std::time::Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(50));
    }
    let survivors: Vec<u32> = brokers
        .iter()
        .copied()
        .filter(|&p| alive(u64::from(p)))
        .collect();
    // Whatever happens, stop what the test started (by PID) before judging.
    for &pid in &survivors {
        let _ = Command::new("kill").args(["-9", &pid.to_string()]).status();
    }
    assert_eq!(
        brokers.len(),
        2,
        "brokers the benchmark started: {brokers:?}"
    );
    assert!(
        survivors.is_empty(),
        "brokers {survivors:?} outlived the benchmark"
    );
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
    std::fs::write(&file, "[storm]\noverload = 0.3\n").unwrap();
    let (ok, _, err) = bench(&["storm", file.to_str().unwrap(), "-b", "127.0.0.1:1"]);
    assert!(!ok && err.contains("storm.overload"), "{err}");
    let (ok, _, err) = bench(&["compare", tmp.path().to_str().unwrap()]);
    assert!(!ok, "compare with one directory must fail: {err}");
}
