//! Tests of the report module as a whole: files written and read back, CSV shape, HTML safety
//! and content, compare, and degenerate data.

use std::collections::BTreeMap;
use std::fs;
use std::path::PathBuf;

use super::*;
use crate::result::*;

const NASTY_LABEL: &str = "record_size=100 <script>&\"";
const WARNING: &str = "produce_rps varies 14% across repeats of p0";

/// Every number in the fixture has a short decimal form (no `1.1 * 17 = 18.700000000000003`):
/// see `floats_round_trip_exactly`.
fn latency(scale: f64) -> Latency {
    let distribution = [0.0, 50.0, 90.0, 99.0, 99.9, 99.99, 100.0]
        .iter()
        .enumerate()
        .map(|(k, p)| [*p, scale * (1.0 + k as f64 * k as f64)])
        .collect();
    Latency {
        count: 10_000,
        min_ms: scale * 0.5,
        mean_ms: scale * 1.5,
        p50_ms: scale * 2.0,
        p75_ms: scale * 5.0,
        p90_ms: scale * 10.0,
        p95_ms: scale * 12.0,
        p99_ms: scale * 17.0,
        p99_9_ms: scale * 26.0,
        p99_99_ms: scale * 37.0,
        max_ms: scale * 50.0,
        distribution,
    }
}

fn intervals(rate: f64) -> Vec<Interval> {
    (1..=8)
        .map(|t| {
            let brief = BriefLatency {
                count: 1000,
                p50_ms: 2.0,
                p99_ms: 9.0 + t as f64,
                p99_9_ms: 20.0,
                max_ms: 30.0,
            };
            Interval {
                t_s: t as f64,
                phase: if t <= 2 { "warmup" } else { "measure" }.to_owned(),
                sent_rps: rate,
                acked_rps: rate - t as f64 * 10.0,
                acked_mbps: rate / 10_000.0,
                consumed_rps: rate * 97.0 / 100.0,
                consumed_mbps: rate / 12_500.0,
                ack: brief,
                e2e: BriefLatency {
                    p99_ms: brief.p99_ms * 2.0,
                    ..brief
                },
                lag_records: 40 - t,
                steal: 0.05,
            }
        })
        .collect()
}

fn run(repeat: u32, rate: f64) -> RunResult {
    RunResult {
        repeat,
        topics: vec![format!("bench-{repeat}")],
        target_rps: Some(rate),
        measured_s: 6.0,
        totals: Totals {
            sent_records: 60_000,
            sent_bytes: 6_000_000,
            acked_records: 60_000,
            acked_bytes: 6_000_000,
            failed_records: 0,
            consumed_records: 59_000,
            consumed_bytes: 5_900_000,
        },
        produce_rps: rate + f64::from(repeat) * rate / 100.0,
        produce_mbps: rate / 10_000.0,
        consume_rps: rate * 99.0 / 100.0,
        consume_mbps: rate / 12_500.0,
        ack_latency: latency(1.0 + f64::from(repeat) * 0.25),
        e2e_latency: latency(2.0 + f64::from(repeat) * 0.25),
        generator_saturated: false,
        max_send_lag_ms: 1.5,
        backpressure_fraction: 0.01,
        generator_cpu_s: 3.2,
        broker_cpu_s: Some(1.5),
        intervals: intervals(rate),
        explore: None,
        drain: None,
        correctness: None,
        share: None,
        storm: None,
    }
}

fn explore() -> ExploreResult {
    let step = |phase: &str, target: f64, met: bool| ExploreStep {
        phase: phase.to_owned(),
        target_rps: target,
        achieved_rps: target * 99.0 / 100.0,
        e2e_ms: if met { 8.0 } else { 120.0 },
        met,
        reason: (!met).then(|| "latency <above> target".to_owned()),
    };
    ExploreResult {
        percentile: 99.0,
        target_ms: 50.0,
        steps: vec![
            step("ramp", 10_000.0, true),
            step("ramp", 20_000.0, false),
            step("sustain", 15_000.0, true),
        ],
        sustained_rps: Some(15_000.0),
        sustained_mbps: Some(1.5),
        sustain_pass_fraction: Some(0.97),
        passed: true,
    }
}

fn correctness(passed: bool) -> CorrectnessReport {
    let partition = |p: i32, lost: u64| PartitionCheck {
        topic: "bench-0".to_owned(),
        partition: p,
        acked: 1000,
        seen: 1000 - lost,
        lost,
        ..PartitionCheck::default()
    };
    let kill = |i: u32| BrokerKill {
        broker: i % 2,
        address: format!("127.0.0.1:1909{}", i % 2),
        at: format!("2025-01-02T03:04:0{i}Z"),
        t_s: f64::from(i) * 2.5,
        pid: 100 + i,
        restarted_pid: 200 + i,
        down_s: 1.25,
    };
    CorrectnessReport {
        kills: 3,
        kill_log: (0..3).map(kill).collect(),
        acked: 2000,
        seen: 2000 - u64::from(!passed),
        lost: u64::from(!passed),
        partitions: vec![partition(0, 0), partition(1, u64::from(!passed))],
        examples: if passed {
            vec![]
        } else {
            vec!["lost bench-0/1 seq 17 <x>".to_owned()]
        },
        passed,
        ..CorrectnessReport::default()
    }
}

/// A campaign with every struct filled: two points of two repeats, explore, drain and
/// correctness results on some repeats, one saturated repeat, a hostile label, a warning.
fn campaign(broker_label: &str, rate: f64) -> Campaign {
    let mut r00 = run(0, rate);
    r00.explore = Some(explore());
    let mut r01 = run(1, rate);
    r01.drain = Some(DrainResult {
        backlog_bytes: 100_000_000,
        backlog_records: 1_000_000,
        fill_s: 12.0,
        drain_s: 4.5,
        drain_rps: 222_222.0,
        drain_mbps: 22.2,
        live_producer_rps: 0.0,
        fill_generator_cpu_s: 3.0,
        drain_generator_cpu_s: 1.0,
        fill_broker_cpu_s: Some(2.0),
        drain_broker_cpu_s: Some(0.5),
    });
    r01.correctness = Some(correctness(false));
    r01.generator_saturated = true;
    let mut r10 = run(0, rate * 2.0);
    r10.correctness = Some(correctness(true));
    let r11 = run(1, rate * 21.0 / 10.0);

    let mut spread = BTreeMap::new();
    spread.insert(
        "produce_rps".to_owned(),
        Spread {
            n: 2,
            min: rate,
            median: rate * 201.0 / 200.0,
            max: rate * 101.0 / 100.0,
            mean: rate * 201.0 / 200.0,
            cv: 0.007,
        },
    );
    let point = |id: &str, label: &str, size: u64, repeats: Vec<RunResult>, spread| PointResult {
        id: id.to_owned(),
        label: label.to_owned(),
        params: BTreeMap::from([("record_size".to_owned(), serde_json::json!(size))]),
        workload: serde_json::json!({ "name": "t", "record_size": size, "note": "</pre>" }),
        repeats,
        spread,
    };
    Campaign {
        format: FORMAT_VERSION,
        mode: "run".to_owned(),
        name: "throughput-vs-size".to_owned(),
        started_at: "2025-01-02T03:04:05Z".to_owned(),
        finished_at: "2025-01-02T03:14:05Z".to_owned(),
        bootstrap: "127.0.0.1:9092".to_owned(),
        client: ClientInfo {
            name: "librdkafka 2.12.1 (rdkafka crate 0.38)".to_owned(),
            producer_config: BTreeMap::from([("acks".to_owned(), "all".to_owned())]),
            consumer_config: BTreeMap::new(),
            properties: BTreeMap::new(),
        },
        broker: BrokerInfo {
            label: broker_label.to_owned(),
            version: "1.2.3".to_owned(),
        },
        brokers: vec![
            StartedBroker {
                index: 0,
                address: "127.0.0.1:19090".to_owned(),
                command: "sluice serve --kafka-addr 127.0.0.1:19090 <script>".to_owned(),
                log: "broker-0.log".to_owned(),
                pids: vec![100, 201],
            },
            StartedBroker {
                index: 1,
                address: "127.0.0.1:19091".to_owned(),
                command: "sluice serve --kafka-addr 127.0.0.1:19091".to_owned(),
                log: "broker-1.log".to_owned(),
                pids: vec![101],
            },
        ],
        sluice_version: "0.1.0".to_owned(),
        git_commit: "abc1234".to_owned(),
        machine: Machine {
            hostname: "bench-host".to_owned(),
            cpu_model: "AMD EPYC 7B13".to_owned(),
            nproc: 16,
            memory_bytes: 64 << 30,
            cpu_governor: Some("performance".to_owned()),
            cpu_mhz: Some(3500.0),
            kernel: "6.8.0".to_owned(),
            os: "Ubuntu 24.04".to_owned(),
        },
        workload_file: "workload.toml".to_owned(),
        dimensions: vec!["record_size".to_owned()],
        points: vec![
            point("p0", NASTY_LABEL, 100, vec![r00, r01], spread),
            point(
                "p1",
                "record_size=1000",
                1000,
                vec![r10, r11],
                BTreeMap::new(),
            ),
        ],
        warnings: vec![WARNING.to_owned()],
    }
}

fn read(path: PathBuf) -> String {
    fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

#[test]
fn campaign_round_trips() {
    let dir = tempfile::tempdir().unwrap();
    let target = dir.path().join("new").join("campaign");
    let original = campaign("sluice", 10_000.0);
    fs::create_dir_all(&target).unwrap();
    fs::write(target.join("keep.txt"), "mine").unwrap();
    write_campaign(&target, &original).unwrap();

    assert_eq!(read_campaign(&target).unwrap(), original);
    let p1: PointResult = serde_json::from_str(&read(target.join("points/p1.json"))).unwrap();
    assert_eq!(p1, original.points[1]);
    assert_eq!(read(target.join("keep.txt")), "mine");
}

/// Without serde_json's `float_roundtrip` feature its parser may land one ulp off for numbers
/// that need 17 significant digits, so `campaign.json` would not read back bit-exact.
#[test]
fn floats_round_trip_exactly() {
    let dir = tempfile::tempdir().unwrap();
    let mut c = campaign("sluice", 10_000.0);
    c.points[0].repeats[0].consume_mbps = 20_000.0 / 10_100.0;
    write_campaign(dir.path(), &c).unwrap();
    assert_eq!(read_campaign(dir.path()).unwrap(), c);
}

#[test]
fn csv_files_have_expected_shape() {
    let dir = tempfile::tempdir().unwrap();
    write_campaign(dir.path(), &campaign("sluice", 10_000.0)).unwrap();

    let results = read(dir.path().join(RESULTS_CSV));
    let lines: Vec<&str> = results.lines().collect();
    assert_eq!(
        lines[0],
        "point_id,label,record_size,repeat,target_rps,produce_rps,produce_mbps,consume_rps,\
         consume_mbps,ack_p50_ms,ack_p99_ms,ack_p99_9_ms,ack_max_ms,e2e_p50_ms,e2e_p99_ms,\
         e2e_p99_9_ms,e2e_p99_99_ms,e2e_max_ms,generator_saturated,broker_cpu_s,\
         broker_cpu_s_per_m_produced,sustained_rps,drain_s,broker_cpu_s_per_m_consumed,lost,\
         duplicated,out_of_order,corrupted"
    );
    assert_eq!(lines.len(), 1 + 4, "{results}");
    assert!(
        lines[1].starts_with("p0,\"record_size=100 <script>&\"\"\",100,0,10000,"),
        "{}",
        lines[1]
    );
    // Explore on repeat 0 only, drain and a failed check on repeat 1. Broker CPU per million
    // records: 1.5 s over 60,000 acked; in drain, 2 s to fill 1,000,000 and 0.5 s to read
    // 59,000.
    assert!(
        lines[1].ends_with(",false,1.5,25,15000,,,,,,"),
        "{}",
        lines[1]
    );
    assert!(
        lines[2].ends_with(",true,1.5,2,,4.5,8.474576271186441,1,0,0,0"),
        "{}",
        lines[2]
    );

    let intervals = read(dir.path().join(INTERVALS_CSV));
    let header = intervals.lines().next().unwrap();
    assert!(
        header.starts_with("point_id,label,repeat,t_s,phase,sent_rps,acked_rps"),
        "{header}"
    );
    assert_eq!(header.split(',').count(), 22);
    assert_eq!(intervals.lines().count(), 1 + 4 * 8);
}

#[test]
fn html_report_is_safe_and_complete() {
    let dir = tempfile::tempdir().unwrap();
    write_campaign(dir.path(), &campaign("sluice", 10_000.0)).unwrap();
    let html = read(dir.path().join(REPORT_HTML));

    assert!(html.contains("<svg"));
    assert!(html.contains("record_size=100 &lt;script&gt;&amp;&quot;"));
    assert!(
        !html.to_lowercase().contains("<script"),
        "raw script tag in report"
    );
    assert!(!html.contains("</pre>\""), "workload JSON not escaped");
    assert!(html.contains("class=\"warn\"") && html.contains(WARNING));
    assert!(html.contains("SATURATED"));
    for part in [
        "Explore, repeat 0",
        "Drain",
        "Correctness, repeat 1",
        "3 kills",
        "pid restarted",
        "127.0.0.1:19091</span> (pid 101; broker-1.log)",
        "FAILED",
        "PASSED",
        "max</text>",
    ] {
        assert!(html.contains(part), "missing {part}");
    }
    assert!(
        html.contains("AMD EPYC 7B13") && html.contains("64.0 GiB") && html.contains("abc1234")
    );
    assert!(html.contains("warmup"), "warm-up band missing");
    // No external resources: the only URL is the SVG namespace.
    assert!(!html.contains("src=") && !html.contains("href=\"http") && !html.contains("@import"));
}

#[test]
fn compare_two_campaigns() {
    let dir = tempfile::tempdir().unwrap();
    let (a, b, out) = (
        dir.path().join("a"),
        dir.path().join("b"),
        dir.path().join("out"),
    );
    write_campaign(&a, &campaign("sluice", 20_000.0)).unwrap();
    write_campaign(&b, &campaign("kafka-4.3.1", 10_000.0)).unwrap();

    let table = compare(&[a.clone(), b.clone()], &out).unwrap();
    assert!(
        table.contains("sluice") && table.contains("kafka-4.3.1"),
        "{table}"
    );
    assert!(
        table.contains(NASTY_LABEL) && table.contains("record_size=1000"),
        "{table}"
    );
    assert!(
        table.contains("×0.50"),
        "ratio of produce rates missing:\n{table}"
    );

    let html = read(out.join(COMPARE_HTML));
    assert!(html.contains("sluice") && html.contains("kafka-4.3.1") && html.contains("<svg"));
    assert!(!html.to_lowercase().contains("<script"));
    let csv = read(out.join(COMPARE_CSV));
    assert!(csv.starts_with(
        "label,metric,sluice median,sluice min,sluice max,sluice cv,kafka-4.3.1 median"
    ));
    assert!(
        csv.lines()
            .any(|l| l.starts_with("record_size=1000,produce_rps,")),
        "{csv}"
    );

    // The same broker twice gets told apart.
    let same = compare(&[a.clone(), a], &dir.path().join("out2")).unwrap();
    assert!(
        same.contains("sluice #1") && same.contains("sluice #2"),
        "{same}"
    );
}

#[test]
fn compare_refuses_bad_input() {
    let dir = tempfile::tempdir().unwrap();
    let a = dir.path().join("a");
    write_campaign(&a, &campaign("sluice", 1.0)).unwrap();
    let out = dir.path().join("out");

    let one = compare(std::slice::from_ref(&a), &out).unwrap_err();
    assert!(
        matches!(one, ReportError::TooFewCampaigns { given: 1 }),
        "{one}"
    );
    let empty = dir.path().join("empty");
    fs::create_dir(&empty).unwrap();
    let missing = compare(&[a, empty.clone()], &out).unwrap_err();
    assert!(
        matches!(&missing, ReportError::NoCampaign { dir } if *dir == empty),
        "{missing}"
    );
    assert!(missing.to_string().contains("campaign.json"));
    assert!(!out.exists(), "nothing written on error");
}

#[test]
fn newer_format_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let mut newer = campaign("sluice", 1.0);
    newer.format = FORMAT_VERSION + 1;
    write_campaign(dir.path(), &newer).unwrap();
    let err = read_campaign(dir.path()).unwrap_err();
    assert!(matches!(err, ReportError::FormatTooNew { found, .. } if found == FORMAT_VERSION + 1));
    assert!(err.to_string().contains("newer sluice"), "{err}");

    fs::write(
        dir.path().join(CAMPAIGN_FILE),
        "{\"format\": 1, \"mode\": 3}",
    )
    .unwrap();
    let err = read_campaign(dir.path()).unwrap_err();
    assert!(
        matches!(err, ReportError::Parse { .. }) && err.to_string().contains("campaign.json"),
        "{err}"
    );
}

/// Campaigns written before brokers and kills were recorded (no `brokers`, no `kill_log`)
/// still read, with those lists empty.
#[test]
fn campaigns_without_the_broker_lists_still_read() {
    let dir = tempfile::tempdir().unwrap();
    let mut older = campaign("sluice", 1.0);
    let mut json = serde_json::to_value(&older).unwrap();
    json.as_object_mut().unwrap().remove("brokers");
    for point in json["points"].as_array_mut().unwrap() {
        for repeat in point["repeats"].as_array_mut().unwrap() {
            if let Some(c) = repeat["correctness"].as_object_mut() {
                c.remove("kill_log");
            }
        }
    }
    fs::write(dir.path().join(CAMPAIGN_FILE), json.to_string()).unwrap();
    older.brokers.clear();
    for r in older.points.iter_mut().flat_map(|p| &mut p.repeats) {
        if let Some(c) = &mut r.correctness {
            c.kill_log.clear();
        }
    }
    assert_eq!(read_campaign(dir.path()).unwrap(), older);
}

#[test]
fn bad_point_id_is_refused_before_writing() {
    let dir = tempfile::tempdir().unwrap();
    let mut c = campaign("sluice", 1.0);
    c.points[1].id = "../escape".to_owned();
    let target = dir.path().join("c");
    assert!(matches!(
        write_campaign(&target, &c),
        Err(ReportError::BadPointId { .. })
    ));
    assert!(!target.exists());
}

#[test]
fn empty_and_nan_data_still_render() {
    let mut c = campaign("sluice", 1000.0);
    c.warnings.clear();
    for r in c.points.iter_mut().flat_map(|p| &mut p.repeats) {
        r.intervals.clear();
        r.ack_latency = Latency {
            count: 5,
            p99_ms: f64::NAN,
            distribution: vec![[50.0, f64::NAN]],
            ..latency(1.0)
        };
        r.e2e_latency = Latency::default();
        r.produce_rps = f64::INFINITY;
        r.explore = None;
    }
    c.points[1].spread.insert(
        "produce_rps".to_owned(),
        Spread {
            n: 1,
            min: f64::NAN,
            median: f64::NAN,
            max: f64::NAN,
            mean: f64::NAN,
            cv: f64::NAN,
        },
    );
    let dir = tempfile::tempdir().unwrap();
    write_campaign(dir.path(), &c).unwrap();
    let html = read(dir.path().join(REPORT_HTML));
    assert!(html.contains("no data"));
    assert!(
        !html.contains("NaN") && !html.contains("inf"),
        "non-finite number in the page"
    );
    let summary = summary_text(&c);
    assert!(
        summary.contains("n/a") || summary.contains('-'),
        "{summary}"
    );

    let nothing = Campaign {
        points: Vec::new(),
        ..c
    };
    write_campaign(&dir.path().join("empty"), &nothing).unwrap();
    assert!(read(dir.path().join("empty").join(REPORT_HTML)).contains("no test points"));
    assert!(summary_text(&nothing).contains("0 point(s)"));
}

#[test]
fn summary_shows_spread_and_warnings() {
    let summary = summary_text(&campaign("sluice", 10_000.0));
    let p0 = summary
        .lines()
        .find(|l| l.starts_with("p0 "))
        .expect(&summary);
    assert!(
        p0.contains(NASTY_LABEL) && p0.contains("10.1k"),
        "{summary}"
    );
    // p1 has no runner spread: computed from repeats (20k and 21k).
    let p1 = summary
        .lines()
        .find(|l| l.starts_with("p1 "))
        .expect(&summary);
    assert!(p1.contains("20.6k [20.0k–21.2k]"), "{summary}");
    assert!(summary.contains(&format!("WARNING: {WARNING}")));
    assert!(summary.contains("p0 repeat 1: load generator saturated"));
    assert!(summary.contains("correctness FAILED"));
}

#[test]
fn correctness_report_lines() {
    let mut c = correctness(true);
    let lines = text::correctness_lines(&c);
    assert_eq!(
        lines,
        vec![
            "PASSED: acknowledged 2000, lost 0, duplicated 0, reordered 0, corrupted 0 (read back \
             2000, of which never acknowledged 0)",
            "3 kills: listening again after 1.2/1.2/1.2 s (min/median/max)",
        ],
        "{lines:#?}"
    );
    c.group = true;
    c.offset_samples = 42;
    c.offset_regressions = 1;
    c.seed = Some(7);
    c.kill_log[2].down_s = 3.0;
    c.recovery = Some(Recovery {
        full_fraction: 0.9,
        baseline_acked_rps: 5000.0,
        baseline_consumed_rps: 4990.0,
        per_kill_s: vec![Some(2.0), None, Some(4.5)],
        min_s: Some(2.0),
        median_s: Some(3.25),
        max_s: Some(4.5),
        not_recovered: 1,
    });
    let lines = text::correctness_lines(&c);
    assert_eq!(
        lines[1..],
        [
            "read through a consumer group: 42 committed offsets read from the broker, 1 went back",
            "3 kills at random moments (seed 7): listening again after 1.2/1.2/3.0 s \
             (min/median/max)",
            "full throughput (>= 90% of the median 5000 acked/s and 4990 consumed/s) again after \
             2.0/3.2/4.5 s (min/median/max); not before the next kill: 1",
        ],
        "{lines:#?}"
    );
    let mut campaign = campaign("sluice", 10_000.0);
    campaign.points[1].repeats[0].correctness = Some(c);
    assert!(summary_text(&campaign).contains("p1 repeat 0: full throughput (>= 90%"));
}

/// A share-consumer outcome: 4 consumers, one idle, one killed, a couple of errors.
fn share_result() -> ShareResult {
    let per_consumer = vec![1000, 3000, 0, 2000];
    ShareResult {
        consumers: 4,
        group: "g".to_owned(),
        processing_ms_per_record: 5.0,
        max_poll_records: 500,
        max_bytes: 52_428_800,
        acquire_mode: "batch_optimized".to_owned(),
        share_fetch_version: 1,
        broker_share_fetch_versions: Some([1, 2]),
        group_configs: BTreeMap::from([(
            "share.auto.offset.reset".to_owned(),
            "earliest".to_owned(),
        )]),
        lock_timeout_ms: Some(15_000),
        measured_s: 10.0,
        records: 6000,
        rps: 600.0,
        per_consumer_spread: crate::stats::spread(&[1000.0, 3000.0, 0.0, 2000.0]),
        jain_index: crate::stats::jain_index(&per_consumer),
        idle_consumers: 1,
        per_consumer,
        assigned_consumers: 4,
        processed_total: 7000,
        distinct_records: 6900,
        redelivered_records: 100,
        acquired_records: 7100,
        errors: 2,
        error_counts: BTreeMap::from([("ShareFetch: <Bad>".to_owned(), 2)]),
        error_examples: vec!["ShareFetch: <Bad>: no".to_owned()],
        kill: Some(ShareKill {
            consumer: 2,
            at_s: 20.0,
            held_records: 100,
            first_redelivery_s: Some(14.5),
            redelivery_s: Some(15.25),
            redelivered_records: 100,
        }),
        ..ShareResult::default()
    }
}

#[test]
fn share_results_show_in_every_report() {
    let mut c = campaign("sluice", 10_000.0);
    c.points[1].repeats[1].share = Some(share_result());
    let dir = tempfile::tempdir().unwrap();
    write_campaign(dir.path(), &c).unwrap();
    assert_eq!(read_campaign(dir.path()).unwrap(), c);

    // The headline numbers: Jain's index of [1000, 3000, 0, 2000] is 36e6 / (4 * 14e6).
    let headline: BTreeMap<&str, f64> = crate::campaign::headline(&c.points[1].repeats[1])
        .into_iter()
        .collect();
    assert!((headline["share_jain"] - 36.0 / 56.0).abs() < 1e-12);
    assert_eq!(headline["share_consumer_min"], 0.0);
    assert_eq!(headline["share_consumer_median"], 1500.0);
    assert_eq!(headline["share_consumer_max"], 3000.0);
    assert_eq!(headline["share_idle_consumers"], 1.0);
    assert_eq!(headline["share_redelivery_s"], 15.25);
    assert_eq!(headline["share_errors"], 2.0);

    let csv = read(dir.path().join(RESULTS_CSV));
    let mut lines = csv.lines();
    let header: Vec<&str> = lines.next().unwrap().split(',').collect();
    for column in [
        "share_rps",
        "share_jain",
        "share_idle_consumers",
        "share_redelivery_s",
    ] {
        assert!(header.contains(&column), "{column} missing: {header:?}");
    }
    let jain_at = header.iter().position(|h| *h == "share_jain").unwrap();
    let rows: Vec<Vec<&str>> = lines.map(|l| l.split(',').collect()).collect();
    let filled = rows.iter().filter(|r| !r[jain_at].is_empty()).count();
    assert_eq!(filled, 1, "{csv}");

    let summary = summary_text(&c);
    for needle in [
        "rec/consumer median",
        "fairness (Jain)",
        "idle consumers",
        "redelivery s",
    ] {
        assert!(summary.contains(needle), "{needle}: {summary}");
    }
    assert!(
        summary.contains("share consumer 2 killed at 20.0 s holding 100 records"),
        "{summary}"
    );

    let html = read(dir.path().join(REPORT_HTML));
    assert!(html.contains("Share consumers"));
    assert!(
        html.contains("ShareFetch: &lt;Bad&gt; ×2"),
        "error kinds are escaped"
    );
    assert!(!html.contains("<Bad>"));

    // Without share consumers nothing of it shows.
    let plain = summary_text(&campaign("sluice", 10_000.0));
    assert!(!plain.contains("rec/consumer"), "{plain}");
}

/// Results written before share consumers existed have no `share` fields: they still read.
#[test]
fn campaigns_without_share_results_still_read() {
    let c = campaign("sluice", 10_000.0);
    let mut json = serde_json::to_value(&c).unwrap();
    for point in json["points"].as_array_mut().unwrap() {
        for repeat in point["repeats"].as_array_mut().unwrap() {
            repeat.as_object_mut().unwrap().remove("share");
        }
    }
    let back: Campaign = serde_json::from_value(json).unwrap();
    assert_eq!(back, c);
}

fn storm_result() -> StormResult {
    let second = |t: u64, phase: &str, offered: f64, goodput: f64| StormSecond {
        t_s: t as f64,
        phase: phase.to_owned(),
        offered_rps: offered,
        resent_rps: if phase == "storm" { 500.0 } else { 0.0 },
        goodput_rps: goodput,
        goodput_fresh_rps: if phase == "after" { goodput } else { 0.0 },
        failed_rps: if phase == "storm" { 600.0 } else { 0.0 },
        timed_out_rps: if phase == "storm" { 550.0 } else { 0.0 },
        given_up_rps: 0.0,
        ack_count: goodput as u64,
        ack_p50_ms: 2.0,
        ack_p99_ms: if phase == "storm" { 900.0 } else { 8.0 },
        ack_p99_9_ms: 12.0,
        ack_max_ms: 20.0,
    };
    let mut seconds = vec![
        second(1, "before", 500.0, 500.0),
        second(2, "storm", 2000.0, 1000.0),
    ];
    seconds.push(second(3, "storm", 2000.0, 900.0));
    seconds.push(second(4, "after", 500.0, 100.0));
    seconds.push(second(5, "after", 500.0, 480.0));
    seconds.push(second(6, "after", 500.0, 500.0));
    let recovery_s = crate::storm::series::recovery_s(&seconds, 0.9, 2);
    StormResult {
        capacity_rps: 1000.0,
        capacity_source: "probe".to_owned(),
        probe_rps: vec![900.0, 1000.0, 1100.0],
        overload: 2.0,
        after: 0.5,
        before_s: 1,
        storm_s: 2,
        after_s: 3,
        request_timeout_ms: 1000,
        retry_backoff_ms: 10,
        app_retries: 3,
        recovered_fraction: 0.9,
        recovered_hold_s: 2,
        producer_config: BTreeMap::from([("acks".to_owned(), "all".to_owned())]),
        phases: crate::storm::series::phase_medians(&seconds),
        seconds,
        recovery_s,
        new_records: 6000,
        resent: 1000,
        acked: 3480,
        failed: 1200,
        timed_out: 1100,
        given_up: 0,
        unresolved: 0,
        appended_records: Some(3600),
        wasted_appends: Some(120),
        generator_short: false,
    }
}

#[test]
fn storm_results_show_in_every_report() {
    let mut c = campaign("sluice", 10_000.0);
    c.points[0].repeats[0].storm = Some(storm_result());
    let dir = tempfile::tempdir().unwrap();
    write_campaign(dir.path(), &c).unwrap();
    assert_eq!(read_campaign(dir.path()).unwrap(), c);

    let headline: BTreeMap<&str, f64> = crate::campaign::headline(&c.points[0].repeats[0])
        .into_iter()
        .collect();
    // After the storm: 100 of 500, then 480 and 500: the good run starts with the second
    // that ends 2 s after the storm.
    assert_eq!(headline["storm_recovery_s"], 2.0);
    assert_eq!(headline["storm_goodput_storm"], 950.0 / 2000.0);
    assert_eq!(headline["storm_goodput_after"], 480.0 / 500.0);
    assert_eq!(headline["storm_p99_storm_ms"], 900.0);
    assert_eq!(headline["storm_wasted_appends"], 120.0);

    let csv = read(dir.path().join(STORM_CSV));
    assert_eq!(csv.lines().count(), 7, "{csv}");
    assert!(
        csv.lines()
            .nth(2)
            .unwrap()
            .contains(",storm,2000,500,1000,"),
        "{csv}"
    );
    let html = read(dir.path().join(REPORT_HTML));
    assert!(
        html.contains("Retry storm") && html.contains("3 s"),
        "recovery shown"
    );
    assert!(html.contains("probed: median of 3 s closed loop"));
    assert!(summary_text(&c).contains("recovery s"));

    // compare: one goodput / offered chart and one p99 chart with a line per campaign.
    let other = tempfile::tempdir().unwrap();
    let mut k = campaign("kafka", 10_000.0);
    let mut st = storm_result();
    st.recovery_s = None;
    k.points[0].repeats[0].storm = Some(st);
    write_campaign(other.path(), &k).unwrap();
    let out = tempfile::tempdir().unwrap();
    compare(
        &[dir.path().to_path_buf(), other.path().to_path_buf()],
        out.path(),
    )
    .unwrap();
    let html = read(out.path().join("compare.html"));
    assert!(
        html.contains("goodput / offered new records"),
        "storm chart"
    );
    assert!(html.contains("ack p99 per second"));
    // Campaigns without a storm have no storm.csv.
    let plain = tempfile::tempdir().unwrap();
    write_campaign(plain.path(), &campaign("sluice", 10_000.0)).unwrap();
    assert!(!plain.path().join(STORM_CSV).exists());
}
