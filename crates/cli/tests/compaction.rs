//! Compacted topics on a real `sluice serve`: `cleanup.policy=compact` and its settings are
//! accepted and described, keyless records are refused, the log cleaner keeps the latest
//! record of every key (offsets unchanged, tombstones removed after `delete.retention.ms`),
//! its counters show in `/metrics`, and the compacted log reads the same after a restart.

mod common;

use std::time::{Duration, Instant};

use common::Server;
use serde_json::Value;

/// Small segments and a dirty ratio of zero make every sealed segment cleanable at once.
const TOPIC_CONFIGS: &[&str] = &[
    "cleanup.policy=compact",
    "segment.bytes=1024",
    "min.cleanable.dirty.ratio=0.01",
    "delete.retention.ms=0",
    "segment.ms=200",
];

fn start(dir: tempfile::TempDir) -> Server {
    Server::start_with_args(dir, &["--log-cleaner-backoff-ms", "100"])
}

/// (offset, key, value) of every record of partition 0 of `topic`, from the earliest.
fn records(server: &Server, topic: &str) -> Vec<(i64, String, Option<String>)> {
    let out = server.ok(&["consume", topic, "--json"], "").stdout;
    out.lines()
        .map(|l| {
            let r: Value = serde_json::from_str(l).unwrap();
            (
                r["offset"].as_i64().unwrap(),
                r["key"].as_str().unwrap_or_default().to_owned(),
                r["value"].as_str().map(str::to_owned),
            )
        })
        .collect()
}

#[test]
fn the_cleaner_keeps_the_latest_record_of_every_key() {
    let server = start(tempfile::tempdir().unwrap());
    let mut create = vec!["topic", "create", "profiles", "--partitions", "1"];
    for c in TOPIC_CONFIGS {
        create.extend(["--config", c]);
    }
    server.ok(&create, "");
    let described = server.ok(&["topic", "describe", "profiles"], "").stdout;
    assert!(described.contains("cleanup.policy"), "{described}");
    assert!(described.contains("compact"), "{described}");

    // A keyless record is refused with INVALID_RECORD, and nothing of it is stored.
    let run = server.run(&["produce", "profiles"], "no key here\n");
    assert!(!run.status.success(), "{}", run.stdout);
    assert!(
        run.stderr.contains("without a key") || run.stderr.contains("INVALID_RECORD"),
        "{}",
        run.stderr
    );

    // 20 keys written 10 times each, one produce per round (each a batch), then a
    // tombstone for key k0.
    for round in 0..10 {
        let input: String = (0..20)
            .map(|k| {
                format!(
                    "{{\"key\":\"k{k}\",\"value\":\"r{round}-{}\"}}\n",
                    "x".repeat(40)
                )
            })
            .collect();
        server.ok(&["produce", "profiles", "--json"], &input);
    }
    server.ok(
        &["produce", "profiles", "--json"],
        "{\"key\":\"k0\",\"value\":null}\n",
    );
    // Round r wrote key kN at offset 20r + N, the tombstone is at 200: the cleaner may already
    // be at work, so what is read is checked against those offsets, not against a first read.
    // The cleaner runs on its own: wait until every key holds one record, its latest, and
    // the tombstone's key is gone (delete.retention.ms=0 lets a second pass remove it).
    // (The "pad" records below stay in the newest segments, which the cleaner never sees.)
    let latest = |offset_value: &[(i64, String, Option<String>)]| {
        let written: Vec<&str> = offset_value
            .iter()
            .map(|r| r.1.as_str())
            .filter(|k| *k != "pad")
            .collect();
        let mut keys = written.clone();
        keys.sort_unstable();
        keys.dedup();
        keys.len() == written.len()
    };
    let started = Instant::now();
    let after = loop {
        // More appends roll the active segment, so that the newest records become cleanable.
        server.ok(
            &["produce", "profiles", "--json"],
            "{\"key\":\"pad\",\"value\":\"p\"}\n",
        );
        let now = records(&server, "profiles");
        let tombstone_gone = !now.iter().any(|r| r.1 == "k0");
        if latest(&now) && tombstone_gone {
            break now;
        }
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "not compacted within 60 s: {} records, {:?}",
            now.len(),
            &now[..now.len().min(30)]
        );
        std::thread::sleep(Duration::from_millis(300));
    };
    // Offsets never change: every kept record sits where it was written, with its last value.
    for (offset, key, value) in &after {
        if key == "pad" {
            assert!(*offset > 200, "{offset}");
            continue;
        }
        let k: i64 = key[1..].parse().unwrap();
        assert_eq!(*offset, 180 + k, "{key}");
        assert!(
            value.as_deref().unwrap().starts_with("r9-"),
            "{key}: {value:?}"
        );
    }
    for k in 1..20 {
        assert!(after.iter().any(|r| r.1 == format!("k{k}")), "k{k} lost");
    }
    assert!(server.metric("sluice_log_cleaner_passes_total") >= 1.0);
    assert!(
        server.metric("sluice_log_cleaner_cleaned_bytes_total")
            > server.metric("sluice_log_cleaner_written_bytes_total")
    );
    assert!(server.metric("sluice_log_cleaner_records_removed_total") >= 180.0);

    // The compacted log reads the same after a restart (but for the padding records, which
    // the cleaner may compact further meanwhile: they share one key).
    let (status, dir) = server.stop();
    assert!(status.success());
    let server = start(dir);
    let not_pad = |rs: &[(i64, String, Option<String>)]| {
        rs.iter()
            .filter(|r| r.1 != "pad")
            .cloned()
            .collect::<Vec<_>>()
    };
    let again = records(&server, "profiles");
    assert_eq!(not_pad(&again), not_pad(&after));
}

#[test]
fn compaction_settings_are_checked() {
    let server = start(tempfile::tempdir().unwrap());
    for bad in [
        "cleanup.policy=compact,compact",
        "cleanup.policy=shred",
        "min.cleanable.dirty.ratio=1.5",
        "max.compaction.lag.ms=0",
        "delete.retention.ms=-1",
    ] {
        let run = server.run(&["topic", "create", "bad", "--config", bad], "");
        assert!(!run.status.success(), "{bad} was accepted");
    }
    server.ok(
        &[
            "topic",
            "create",
            "both",
            "--config",
            "cleanup.policy=compact,delete",
            "--config",
            "min.compaction.lag.ms=1000",
        ],
        "",
    );
}
