//! DeleteRecords on the local log: the log start moves to any durable offset, reads below it
//! are out of range, whole segments below it go, and the new start survives a reopen and a
//! crash between the checkpoint and the segment deletion.

mod common;

use common::*;
use sluice_log::{LOG_START_FILE, LogError, ManualClock, RecoveryAction};

const T0: i64 = 1_700_000_000_000;

/// 40 batches of 5 records (offsets 0..200) over several 16 KiB segments, all durable.
fn filled(dir: &std::path::Path, c: &sluice_log::GroupCommitter) -> sluice_log::PartitionLog {
    let clock = ManualClock::new(T0);
    let log = open(dir, small_config(), c, &clock);
    for i in 0..40u32 {
        let a = log
            .append(&make_batch(i, 5, 900, T0 + i64::from(i)))
            .unwrap();
        a.wait_durable().unwrap();
    }
    assert!(log.segment_count() > 3, "{}", log.segment_count());
    log
}

fn out_of_range(r: Result<sluice_log::ReadResult, LogError>) -> (i64, i64) {
    match r {
        Err(LogError::OffsetOutOfRange {
            log_start,
            high_watermark,
            ..
        }) => (log_start, high_watermark),
        other => panic!("expected OffsetOutOfRange, got {other:?}"),
    }
}

#[test]
fn the_log_start_moves_into_a_segment_and_reads_below_it_are_out_of_range() {
    let dir = tempfile::tempdir().unwrap();
    let c = committer();
    let log = filled(dir.path(), &c);
    let segments = log.segment_count();
    let size = log.size_bytes();

    assert_eq!(log.delete_records(103).unwrap(), 103);
    assert_eq!(log.log_start_offset(), 103);
    assert_eq!(out_of_range(log.read(102, 1 << 20)), (103, 200));
    assert_eq!(out_of_range(log.read(0, 1 << 20)), (103, 200));
    // A read at the start returns the batch holding it (offsets 100..105), as Kafka does.
    let r = log.read(103, 1).unwrap();
    assert_eq!(r.log_start_offset, 103);
    assert_eq!(split_batches(&r.records)[0].0, 100);
    // Sealed segments wholly below went, and their bytes with them.
    assert!(log.segment_count() < segments);
    assert!(log.size_bytes() < size);
    // Earliest-by-time answers no offset below the start.
    assert_eq!(log.offset_for_timestamp(0).unwrap().unwrap().0, 103);

    // At or below the start: nothing changes. Past the high watermark: out of range.
    assert_eq!(log.delete_records(50).unwrap(), 103);
    assert_eq!(log.delete_records(103).unwrap(), 103);
    assert!(matches!(
        log.delete_records(201),
        Err(LogError::OffsetOutOfRange { .. })
    ));
    assert!(matches!(
        log.delete_records(-1),
        Err(LogError::OffsetOutOfRange { .. })
    ));

    // Up to the high watermark: nothing left to read, appends go on after it.
    assert_eq!(log.delete_records(200).unwrap(), 200);
    assert!(log.read(200, 1 << 20).unwrap().records.is_empty());
    let a = log.append(&make_batch(99, 2, 10, T0)).unwrap();
    assert_eq!(a.base_offset, 200);
    a.wait_durable().unwrap();
    let r = log.read(200, 1 << 20).unwrap();
    assert_eq!(split_batches(&r.records)[0].0, 200);
    log.close().unwrap();
}

#[test]
fn the_new_start_survives_a_reopen() {
    let dir = tempfile::tempdir().unwrap();
    let c = committer();
    let log = filled(dir.path(), &c);
    log.delete_records(77).unwrap();
    log.close().unwrap();
    drop(log);

    let clock = ManualClock::new(T0);
    let log = open(dir.path(), small_config(), &c, &clock);
    assert_eq!(log.log_start_offset(), 77);
    assert_eq!(log.high_watermark(), 200);
    assert_eq!(out_of_range(log.read(76, 1 << 20)), (77, 200));
    assert_eq!(log.read(77, 1 << 20).unwrap().log_start_offset, 77);
}

#[test]
fn a_crash_between_the_checkpoint_and_the_unlinks_is_finished_by_recovery() {
    let dir = tempfile::tempdir().unwrap();
    let c = committer();
    let log = filled(dir.path(), &c);
    let before = log.segment_count();
    log.close().unwrap();
    drop(log);
    // What a DeleteRecords leaves when the process dies right after its checkpoint.
    std::fs::write(dir.path().join(LOG_START_FILE), "150\n").unwrap();

    let clock = ManualClock::new(T0);
    let log = open(dir.path(), small_config(), &c, &clock);
    assert_eq!(log.log_start_offset(), 150);
    assert!(log.segment_count() < before);
    let deleted = log
        .recovery_report()
        .actions
        .iter()
        .filter(|a| matches!(a, RecoveryAction::DeletedBelowLogStart { .. }))
        .count();
    assert_eq!(deleted, before - log.segment_count());
    assert_eq!(out_of_range(log.read(149, 1 << 20)), (150, 200));
}

#[test]
fn a_checkpoint_past_the_end_is_lowered_and_a_damaged_one_refuses_to_open() {
    let dir = tempfile::tempdir().unwrap();
    let c = committer();
    let log = filled(dir.path(), &c);
    log.close().unwrap();
    drop(log);
    let clock = ManualClock::new(T0);

    std::fs::write(dir.path().join(LOG_START_FILE), "5000\n").unwrap();
    let log = open(dir.path(), small_config(), &c, &clock);
    assert_eq!(log.log_start_offset(), 200);
    assert!(log.recovery_report().actions.iter().any(|a| matches!(
        a,
        RecoveryAction::LoweredLogStart {
            from: 5000,
            to: 200
        }
    )));
    log.close().unwrap();
    drop(log);

    std::fs::write(dir.path().join(LOG_START_FILE), "12x\n").unwrap();
    let err = sluice_log::PartitionLog::open(
        dir.path(),
        small_config(),
        &c,
        std::sync::Arc::new(clock.clone()),
    )
    .unwrap_err();
    assert!(err.to_string().contains(LOG_START_FILE), "{err}");
}

#[test]
fn retention_keeps_a_start_that_delete_records_moved_further() {
    let dir = tempfile::tempdir().unwrap();
    let c = committer();
    let clock = ManualClock::new(T0);
    let config = sluice_log::LogConfig {
        retention_bytes: Some(40 * 1024),
        ..small_config()
    };
    let log = open(dir.path(), config, &c, &clock);
    for i in 0..40u32 {
        let a = log.append(&make_batch(i, 5, 900, T0)).unwrap();
        a.wait_durable().unwrap();
    }
    log.delete_records(190).unwrap();
    log.apply_retention().unwrap();
    assert_eq!(log.log_start_offset(), 190);
}
