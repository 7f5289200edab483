//! Partition log behaviour: append/read round trips, read semantics, rolls, retention,
//! timestamp lookup, durability stages, close/reopen, delete.

mod common;

use common::*;
use proptest::prelude::*;
use sluice_log::{FlushPolicy, LogConfig, LogError, ManualClock};

const T0: i64 = 1_700_000_000_000;

#[test]
fn appended_batches_read_back_byte_for_byte_with_assigned_offsets() {
    let dir = tempfile::tempdir().unwrap();
    let c = committer();
    let clock = ManualClock::new(T0);
    let log = open(dir.path(), LogConfig::default(), &c, &clock);
    let mut expected = Vec::new();
    let mut next = 0i64;
    for i in 0..50u32 {
        let b = make_batch(i, 1 + (i as usize % 7), 10 + i as usize, T0);
        let a = log.append(&b).unwrap();
        assert_eq!(a.base_offset, next);
        let count = 1 + (i as i64 % 7);
        assert_eq!(a.last_offset, next + count - 1);
        let d = a.wait_durable().unwrap();
        assert_eq!(d.last_offset, a.last_offset);
        expected.push((next, b[8..].to_vec()));
        next += count;
    }
    assert_eq!(log.high_watermark(), next);
    assert_eq!(log.log_end_offset(), next);
    for max_bytes in [1, 100, 1000, 1 << 20] {
        assert_eq!(
            read_all(&log, 0, max_bytes),
            expected,
            "max_bytes {max_bytes}"
        );
    }
}

#[test]
fn several_batches_in_one_append_get_consecutive_offsets() {
    let dir = tempfile::tempdir().unwrap();
    let c = committer();
    let log = open(dir.path(), LogConfig::default(), &c, &ManualClock::new(T0));
    let mut data = make_batch(1, 3, 10, T0);
    data.extend(make_batch(2, 2, 10, T0));
    data.extend(make_batch(3, 5, 10, T0));
    let a = log.append(&data).unwrap();
    assert_eq!((a.base_offset, a.last_offset), (0, 9));
    a.wait_durable().unwrap();
    let bases: Vec<i64> = read_all(&log, 0, 1 << 20).iter().map(|b| b.0).collect();
    assert_eq!(bases, vec![0, 3, 5]);
}

#[test]
fn read_semantics_match_kafka() {
    let dir = tempfile::tempdir().unwrap();
    let c = committer();
    let log = open(dir.path(), LogConfig::default(), &c, &ManualClock::new(T0));
    let big = make_batch(1, 10, 500, T0); // ~5 KB
    log.append(&big).unwrap().wait_durable().unwrap();
    log.append(&make_batch(2, 2, 10, T0))
        .unwrap()
        .wait_durable()
        .unwrap();
    // At least one whole batch, even when it is larger than max_bytes.
    let r = log.read(0, 10).unwrap();
    assert_eq!(r.records.len(), big.len());
    // An offset inside a batch returns the whole batch holding it.
    let r = log.read(7, 10).unwrap();
    assert_eq!(split_batches(&r.records)[0].0, 0);
    let r = log.read(11, 1 << 20).unwrap();
    assert_eq!(split_batches(&r.records)[0].0, 10);
    // At the high watermark: nothing, no error.
    assert!(log.read(12, 1 << 20).unwrap().records.is_empty());
    assert_eq!(log.read(12, 1 << 20).unwrap().high_watermark, 12);
    // Past the log end or below the log start: typed error.
    assert!(matches!(
        log.read(13, 100),
        Err(LogError::OffsetOutOfRange {
            requested: 13,
            log_start: 0,
            high_watermark: 12
        })
    ));
    assert!(matches!(
        log.read(-1, 100),
        Err(LogError::OffsetOutOfRange { .. })
    ));
}

#[test]
fn invalid_batches_are_refused_and_nothing_is_written() {
    let dir = tempfile::tempdir().unwrap();
    let c = committer();
    let log = open(dir.path(), LogConfig::default(), &c, &ManualClock::new(T0));
    log.append(&make_batch(1, 2, 10, T0))
        .unwrap()
        .wait_durable()
        .unwrap();
    let size = log.size_bytes();
    let good = make_batch(2, 2, 10, T0);
    let mut bad_crc = good.clone();
    *bad_crc.last_mut().unwrap() ^= 0xff;
    let mut two = good.clone();
    two.extend_from_slice(&bad_crc); // one good batch then a bad one: neither is written
    let mut trailing = good.clone();
    trailing.extend_from_slice(&[1, 2, 3]);
    let mut bad_magic = good.clone();
    bad_magic[16] = 1;
    for (name, data) in [
        ("bad crc", bad_crc),
        ("good then bad", two),
        ("trailing bytes", trailing),
        ("bad magic", bad_magic),
        ("truncated", good[..good.len() - 1].to_vec()),
        ("empty", Vec::new()),
    ] {
        let err = log.append(&data).unwrap_err();
        assert!(
            matches!(err, LogError::InvalidBatch { .. }),
            "{name}: {err}"
        );
        assert_eq!(log.size_bytes(), size, "{name}");
        assert_eq!(log.log_end_offset(), 2, "{name}");
    }
}

#[test]
fn appended_data_is_invisible_until_durable() {
    let dir = tempfile::tempdir().unwrap();
    // A one-hour interval: no sync round will run during the test.
    let c = committer_with(FlushPolicy::IntervalMs(3_600_000));
    let clock = ManualClock::new(T0);
    let log = open(dir.path(), LogConfig::default(), &c, &clock);
    let a = log.append(&make_batch(1, 3, 10, T0)).unwrap();
    assert!(!a.is_durable());
    assert_eq!(log.log_end_offset(), 3);
    assert_eq!(log.high_watermark(), 0);
    assert!(log.read(0, 1 << 20).unwrap().records.is_empty());
    assert_eq!(log.offset_for_timestamp(T0).unwrap().map(|(o, _)| o), None);
    // Closing syncs everything; the handle then resolves.
    log.close().unwrap();
    assert!(a.is_durable());
    a.wait_durable().unwrap();
    let log = open(dir.path(), LogConfig::default(), &c, &clock);
    assert!(log.recovery_report().clean_shutdown);
    assert_eq!(read_all(&log, 0, 1 << 20).len(), 1);
}

#[test]
fn interval_policy_makes_data_durable_at_the_next_tick() {
    let dir = tempfile::tempdir().unwrap();
    let c = committer_with(FlushPolicy::IntervalMs(20));
    let log = open(dir.path(), LogConfig::default(), &c, &ManualClock::new(T0));
    let a = log.append(&make_batch(1, 3, 10, T0)).unwrap();
    let started = std::time::Instant::now();
    a.wait_durable().unwrap();
    assert!(started.elapsed() < std::time::Duration::from_secs(5));
    assert_eq!(log.high_watermark(), 3);
}

#[test]
fn segments_roll_by_size_and_reads_cross_them() {
    let dir = tempfile::tempdir().unwrap();
    let c = committer();
    let clock = ManualClock::new(T0);
    let config = small_config();
    let log = open(dir.path(), config, &c, &clock);
    let mut expected = Vec::new();
    let mut next = 0;
    for i in 0..100u32 {
        let b = make_batch(i, 4, 200, T0 + i as i64);
        let a = log.append(&b).unwrap();
        expected.push((next, b[8..].to_vec()));
        next = a.last_offset + 1;
        a.wait_durable().unwrap();
    }
    assert!(log.segment_count() > 4, "{} segments", log.segment_count());
    for entry in std::fs::read_dir(dir.path()).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_some_and(|e| e == "log") {
            let len = std::fs::metadata(&path).unwrap().len();
            assert!(
                len <= config.segment_bytes,
                "{} is {len} bytes",
                path.display()
            );
        }
    }
    assert_eq!(read_all(&log, 0, 1 << 20), expected);
    assert_eq!(read_all(&log, 0, 1), expected);
    // Every offset reads back the batch holding it.
    for offset in 0..next {
        let r = log.read(offset, 1).unwrap();
        let (base, _) = split_batches(&r.records)[0].clone();
        assert!(
            base <= offset && offset < base + 4,
            "offset {offset} got batch {base}"
        );
    }
    // Reopen without closing (unclean) and with closing (clean): same data.
    drop(log);
    let log = open(dir.path(), config, &c, &clock);
    assert!(!log.recovery_report().clean_shutdown);
    assert_eq!(read_all(&log, 0, 1 << 20), expected);
    log.close().unwrap();
    let log = open(dir.path(), config, &c, &clock);
    assert!(log.recovery_report().clean_shutdown);
    assert!(
        log.recovery_report().actions.is_empty(),
        "{:?}",
        log.recovery_report()
    );
    assert_eq!(read_all(&log, 0, 1 << 20), expected);
    let a = log.append(&make_batch(999, 1, 10, T0)).unwrap();
    assert_eq!(a.base_offset, next);
}

#[test]
fn segments_roll_by_age() {
    let dir = tempfile::tempdir().unwrap();
    let c = committer();
    let clock = ManualClock::new(T0);
    let config = LogConfig {
        segment_ms: Some(60_000),
        ..LogConfig::default()
    };
    let log = open(dir.path(), config, &c, &clock);
    log.append(&make_batch(1, 1, 10, T0)).unwrap();
    clock.advance(59_999);
    log.append(&make_batch(2, 1, 10, T0)).unwrap();
    assert_eq!(log.segment_count(), 1);
    clock.advance(1);
    log.append(&make_batch(3, 1, 10, T0))
        .unwrap()
        .wait_durable()
        .unwrap();
    assert_eq!(log.segment_count(), 2);
    clock.advance(60_000);
    log.roll_if_aged().unwrap();
    assert_eq!(log.segment_count(), 3);
    // An empty active segment never rolls.
    clock.advance(600_000);
    log.roll_if_aged().unwrap();
    assert_eq!(log.segment_count(), 3);
    assert_eq!(read_all(&log, 0, 1 << 20).len(), 3);
}

#[test]
fn retention_by_time_deletes_old_sealed_segments() {
    let dir = tempfile::tempdir().unwrap();
    let c = committer();
    let clock = ManualClock::new(T0);
    let config = LogConfig {
        retention_ms: Some(3_600_000),
        ..small_config()
    };
    let log = open(dir.path(), config, &c, &clock);
    // Old records, then new ones.
    for i in 0..40u32 {
        log.append(&make_batch(i, 4, 200, T0 - 7_200_000)).unwrap();
    }
    let first_new = log.log_end_offset();
    for i in 0..40u32 {
        log.append(&make_batch(i, 4, 200, T0))
            .unwrap()
            .wait_durable()
            .unwrap();
    }
    let before = log.segment_count();
    let out = log.apply_retention().unwrap();
    assert!(out.deleted_segments > 0);
    assert_eq!(log.segment_count(), before - out.deleted_segments);
    let start = log.log_start_offset();
    assert_eq!(out.log_start_offset, start);
    assert!(
        start > 0 && start <= first_new,
        "start {start}, first new {first_new}"
    );
    assert!(matches!(
        log.read(0, 100),
        Err(LogError::OffsetOutOfRange { .. })
    ));
    assert!(!log.read(start, 100).unwrap().records.is_empty());
    // Reopen: the log start survives (it is the first segment's base).
    drop(log);
    let log = open(dir.path(), config, &c, &clock);
    assert_eq!(log.log_start_offset(), start);
    // Everything expires later, but the active segment stays.
    clock.advance(10 * 3_600_000);
    log.apply_retention().unwrap();
    assert_eq!(log.segment_count(), 1);
}

#[test]
fn retention_by_bytes_keeps_at_least_the_limit() {
    let dir = tempfile::tempdir().unwrap();
    let c = committer();
    let clock = ManualClock::new(T0);
    let config = LogConfig {
        retention_bytes: Some(40 * 1024),
        retention_ms: None,
        ..small_config()
    };
    let log = open(dir.path(), config, &c, &clock);
    for i in 0..200u32 {
        log.append(&make_batch(i, 4, 200, T0))
            .unwrap()
            .wait_durable()
            .unwrap();
    }
    let out = log.apply_retention().unwrap();
    assert!(out.deleted_segments > 0);
    let size = log.size_bytes();
    assert!(size >= 40 * 1024, "kept {size}");
    assert!(size < 40 * 1024 + config.segment_bytes, "kept {size}");
    let out = log.apply_retention().unwrap();
    assert_eq!(out.deleted_segments, 0);
}

#[test]
fn offset_for_timestamp_finds_the_first_record_at_or_after() {
    let dir = tempfile::tempdir().unwrap();
    let c = committer();
    let clock = ManualClock::new(T0);
    let log = open(dir.path(), small_config(), &c, &clock);
    // Batch i holds 4 records with timestamps T0 + 10*i + 0..4.
    for i in 0..100i64 {
        log.append(&make_batch(i as u32, 4, 100, T0 + 10 * i))
            .unwrap()
            .wait_durable()
            .unwrap();
    }
    assert!(log.segment_count() > 2);
    assert_eq!(
        log.offset_for_timestamp(0).unwrap().map(|(o, _)| o),
        Some(0)
    );
    assert_eq!(
        log.offset_for_timestamp(T0).unwrap().map(|(o, _)| o),
        Some(0)
    );
    assert_eq!(
        log.offset_for_timestamp(T0 + 2).unwrap().map(|(o, _)| o),
        Some(2)
    );
    assert_eq!(
        log.offset_for_timestamp(T0 + 5).unwrap().map(|(o, _)| o),
        Some(4)
    );
    for i in 0..100i64 {
        for d in 0..4 {
            assert_eq!(
                log.offset_for_timestamp(T0 + 10 * i + d)
                    .unwrap()
                    .map(|(o, _)| o),
                Some(4 * i + d),
                "batch {i} record {d}"
            );
        }
    }
    assert_eq!(
        log.offset_for_timestamp(T0 + 10 * 99 + 4)
            .unwrap()
            .map(|(o, _)| o),
        None
    );
}

#[test]
fn delete_removes_the_directory_and_fails_later_calls() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("topic-0");
    let c = committer();
    let log = open(&path, LogConfig::default(), &c, &ManualClock::new(T0));
    log.append(&make_batch(1, 1, 10, T0))
        .unwrap()
        .wait_durable()
        .unwrap();
    log.delete().unwrap();
    assert!(!path.exists());
    assert!(matches!(
        log.append(&make_batch(1, 1, 10, T0)),
        Err(LogError::Closed { .. })
    ));
}

#[test]
fn committer_counts_fdatasyncs_and_bytes() {
    let dir = tempfile::tempdir().unwrap();
    let c = committer();
    let log = open(dir.path(), LogConfig::default(), &c, &ManualClock::new(T0));
    let b = make_batch(1, 10, 100, T0);
    for _ in 0..20 {
        log.append(&b).unwrap().wait_durable().unwrap();
    }
    let s = c.stats();
    assert!(s.fdatasyncs >= 1 && s.fdatasyncs <= 20, "{s:?}");
    assert_eq!(s.bytes_synced, 20 * b.len() as u64);
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(24))]

    /// Any sequence of appends reads back identically, whatever the read size, before and after
    /// an unclean reopen, across segment rolls.
    #[test]
    fn round_trip(
        batches in prop::collection::vec((1usize..20, 0usize..600), 1..60),
        max_bytes in 1usize..20_000,
        from_frac in 0.0f64..1.0,
    ) {
        let dir = tempfile::tempdir().unwrap();
        let c = committer();
        let clock = ManualClock::new(T0);
        let config = LogConfig { segment_bytes: 8 * 1024, index_interval_bytes: 128, ..LogConfig::default() };
        let log = open(dir.path(), config, &c, &clock);
        let mut expected = Vec::new();
        let mut last = None;
        for (i, (count, len)) in batches.iter().enumerate() {
            let b = make_batch(i as u32, *count, *len, T0 + i as i64);
            let a = log.append(&b).unwrap();
            expected.push((a.base_offset, b[8..].to_vec()));
            last = Some(a);
        }
        last.unwrap().wait_durable().unwrap();
        let end = log.high_watermark();
        let from = ((end as f64) * from_frac) as i64;
        let want: Vec<_> = expected.iter().filter(|(base, rest)| {
            let count = i32::from_be_bytes(rest[49..53].try_into().unwrap()) as i64;
            base + count > from
        }).cloned().collect();
        prop_assert_eq!(&read_all(&log, from, max_bytes), &want);
        drop(log);
        let log = open(dir.path(), config, &c, &clock);
        prop_assert_eq!(log.high_watermark(), end);
        prop_assert_eq!(&read_all(&log, from, max_bytes), &want);
    }
}
