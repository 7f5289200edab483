//! One test per row of the recovery decision table in `src/recovery.rs`.
//!
//! Each test writes a log, closes or abandons it, damages the files the way a crash (or a disk)
//! can, reopens, and checks what recovery did and that every batch before the damage reads back
//! intact while nothing after it is ever returned.

mod common;

use std::fs::{self, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};

use common::*;
use sluice_log::{LogConfig, LogError, ManualClock, PartitionLog, RecoveryAction};

const T0: i64 = 1_700_000_000_000;

/// Writes `n` batches of 3 records and returns (log dir, batches as (base, bytes after base)).
fn write_log(dir: &Path, config: LogConfig, n: u32, close: bool) -> Vec<(i64, Vec<u8>)> {
    let c = committer();
    let log = open(dir, config, &c, &ManualClock::new(T0));
    let mut written = Vec::new();
    for i in 0..n {
        let b = make_batch(i, 3, 150, T0 + i as i64);
        let a = log.append(&b).unwrap();
        a.wait_durable().unwrap();
        written.push((a.base_offset, b[8..].to_vec()));
    }
    if close {
        log.close().unwrap();
    }
    written
}

fn reopen(dir: &Path, config: LogConfig) -> PartitionLog {
    let c = committer();
    open(dir, config, &c, &ManualClock::new(T0))
}

fn segment_files(dir: &Path, ext: &str) -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == ext))
        .collect();
    files.sort();
    files
}

fn last_segment(dir: &Path) -> PathBuf {
    segment_files(dir, "log").pop().unwrap()
}

fn append_bytes(path: &Path, bytes: &[u8]) {
    OpenOptions::new()
        .append(true)
        .open(path)
        .unwrap()
        .write_all(bytes)
        .unwrap();
}

fn truncated_tail(log: &PartitionLog) -> Option<(u64, u64, String)> {
    log.recovery_report().actions.iter().find_map(|a| match a {
        RecoveryAction::TruncatedTail {
            at,
            dropped_bytes,
            reason,
            ..
        } => Some((*at, *dropped_bytes, reason.clone())),
        _ => None,
    })
}

fn assert_reads(log: &PartitionLog, expected: &[(i64, Vec<u8>)]) {
    assert_eq!(read_all(log, 0, 1 << 20), expected);
    let next = expected.last().map_or(0, |(base, _)| base + 3);
    assert_eq!(log.high_watermark(), next);
    // The log continues at the right offset.
    let a = log.append(&make_batch(7777, 1, 10, T0)).unwrap();
    assert_eq!(a.base_offset, next);
    a.wait_durable().unwrap();
}

#[test]
fn clean_shutdown_needs_no_repair() {
    let dir = tempfile::tempdir().unwrap();
    let written = write_log(dir.path(), small_config(), 150, true);
    assert!(dir.path().join(sluice_log::CLEAN_SHUTDOWN_MARKER).exists());
    let log = reopen(dir.path(), small_config());
    let report = log.recovery_report();
    assert!(report.clean_shutdown);
    assert!(report.actions.is_empty(), "{report:?}");
    // The marker is removed on open, so a crash from now on is seen as unclean.
    assert!(!dir.path().join(sluice_log::CLEAN_SHUTDOWN_MARKER).exists());
    assert_reads(&log, &written);
}

#[test]
fn unclean_shutdown_rebuilds_the_active_segment_index() {
    let dir = tempfile::tempdir().unwrap();
    let written = write_log(dir.path(), small_config(), 150, false);
    let log = reopen(dir.path(), small_config());
    let report = log.recovery_report();
    assert!(!report.clean_shutdown);
    assert!(
        report.actions.iter().any(|a| matches!(a,
            RecoveryAction::RebuiltIndexes { reason, .. } if reason == "unclean shutdown")),
        "{report:?}"
    );
    assert!(truncated_tail(&log).is_none());
    assert_reads(&log, &written);
}

#[test]
fn torn_header_is_truncated() {
    for close in [true, false] {
        let dir = tempfile::tempdir().unwrap();
        let written = write_log(dir.path(), LogConfig::default(), 10, close);
        let seg = last_segment(dir.path());
        let len = fs::metadata(&seg).unwrap().len();
        append_bytes(&seg, &[0, 0, 0, 0, 0, 0, 0, 10, 0, 0]); // 10 bytes: no whole length field
        let log = reopen(dir.path(), LogConfig::default());
        let (at, dropped, reason) = truncated_tail(&log).expect("truncated");
        assert_eq!(
            (at, dropped, reason.as_str()),
            (len, 10, "torn batch header")
        );
        assert_eq!(fs::metadata(&seg).unwrap().len(), len);
        assert_reads(&log, &written);
    }
}

#[test]
fn torn_body_is_truncated() {
    for close in [true, false] {
        let dir = tempfile::tempdir().unwrap();
        let written = write_log(dir.path(), LogConfig::default(), 10, close);
        let seg = last_segment(dir.path());
        let len = fs::metadata(&seg).unwrap().len();
        let mut next = make_batch(99, 3, 150, T0);
        next[..8].copy_from_slice(&30i64.to_be_bytes());
        append_bytes(&seg, &next[..next.len() / 2]);
        let log = reopen(dir.path(), LogConfig::default());
        let (at, _, reason) = truncated_tail(&log).expect("truncated");
        assert_eq!((at, reason.as_str()), (len, "torn batch body"));
        assert_reads(&log, &written);
    }
}

#[test]
fn bad_crc_mid_segment_truncates_there_and_drops_what_follows() {
    let dir = tempfile::tempdir().unwrap();
    let written = write_log(dir.path(), LogConfig::default(), 10, false);
    let seg = last_segment(dir.path());
    // Corrupt one record byte of batch 4 (of 0..10).
    let batch_len = written[0].1.len() as u64 + 8;
    let mut bytes = fs::read(&seg).unwrap();
    bytes[(4 * batch_len + 100) as usize] ^= 0x55;
    fs::write(&seg, &bytes).unwrap();
    let log = reopen(dir.path(), LogConfig::default());
    let (at, dropped, reason) = truncated_tail(&log).expect("truncated");
    assert_eq!(at, 4 * batch_len);
    assert_eq!(dropped, 6 * batch_len);
    assert!(
        reason.starts_with("corrupt batch: batch CRC-32C mismatch"),
        "{reason}"
    );
    assert_reads(&log, &written[..4]);
}

#[test]
fn bad_crc_mid_segment_after_clean_shutdown_is_caught_by_reads() {
    // After a clean shutdown everything was fsynced, so damage before the tail is media
    // corruption: open does not scan it (that would read every active segment at every start),
    // and reads refuse to serve it.
    let dir = tempfile::tempdir().unwrap();
    let written = write_log(dir.path(), LogConfig::default(), 10, true);
    let seg = last_segment(dir.path());
    let batch_len = written[0].1.len() as u64 + 8;
    let mut bytes = fs::read(&seg).unwrap();
    bytes[(4 * batch_len + 100) as usize] ^= 0x55;
    fs::write(&seg, &bytes).unwrap();
    let log = reopen(dir.path(), LogConfig::default());
    assert!(truncated_tail(&log).is_none());
    for (i, batch) in written.iter().enumerate() {
        let r = log.read(batch.0, 1);
        if i == 4 {
            assert!(matches!(r, Err(LogError::Corrupt { .. })), "{r:?}");
        } else {
            assert_eq!(split_batches(&r.unwrap().records), vec![batch.clone()]);
        }
    }
}

#[test]
fn zero_filled_tail_is_truncated() {
    for close in [true, false] {
        let dir = tempfile::tempdir().unwrap();
        let written = write_log(dir.path(), LogConfig::default(), 10, close);
        let seg = last_segment(dir.path());
        let len = fs::metadata(&seg).unwrap().len();
        append_bytes(&seg, &[0u8; 8192]);
        let log = reopen(dir.path(), LogConfig::default());
        let (at, dropped, reason) = truncated_tail(&log).expect("truncated");
        assert_eq!(
            (at, dropped, reason.as_str()),
            (len, 8192, "zero-filled tail")
        );
        assert_reads(&log, &written);
    }
}

#[test]
fn batch_with_wrong_offset_is_truncated() {
    let dir = tempfile::tempdir().unwrap();
    let written = write_log(dir.path(), LogConfig::default(), 10, false);
    let seg = last_segment(dir.path());
    let len = fs::metadata(&seg).unwrap().len();
    // A valid batch, but with a stale base offset (as left by a reused file).
    let mut stale = make_batch(5, 3, 150, T0);
    stale[..8].copy_from_slice(&3i64.to_be_bytes());
    append_bytes(&seg, &stale);
    let log = reopen(dir.path(), LogConfig::default());
    let (at, _, reason) = truncated_tail(&log).expect("truncated");
    assert_eq!(at, len);
    assert_eq!(reason, "batch has base offset 3, expected 30");
    assert_reads(&log, &written);
}

#[test]
fn missing_index_is_rebuilt() {
    let dir = tempfile::tempdir().unwrap();
    let written = write_log(dir.path(), small_config(), 150, true);
    let indexes = segment_files(dir.path(), "index");
    assert!(indexes.len() > 2);
    fs::remove_file(&indexes[1]).unwrap();
    fs::remove_file(segment_files(dir.path(), "timeindex").last().unwrap()).unwrap();
    let log = reopen(dir.path(), small_config());
    let rebuilt: Vec<_> = log
        .recovery_report()
        .actions
        .iter()
        .filter(|a| matches!(a, RecoveryAction::RebuiltIndexes { reason, .. } if reason == "index file missing"))
        .collect();
    assert_eq!(rebuilt.len(), 2, "{:?}", log.recovery_report());
    assert!(
        indexes[1].exists(),
        "rebuilt index is written back for a sealed segment"
    );
    assert_reads(&log, &written);
    for offset in (0..180).step_by(7) {
        assert!(!log.read(offset, 1).unwrap().records.is_empty());
    }
    // Batch i holds timestamps T0+i, T0+i+1, T0+i+2: T0+30 first appears as record 2 of batch 28.
    assert_eq!(
        log.offset_for_timestamp(T0 + 30).unwrap().map(|(o, _)| o),
        Some(86)
    );
}

#[test]
fn index_ahead_of_the_log_is_rebuilt() {
    let dir = tempfile::tempdir().unwrap();
    let written = write_log(dir.path(), small_config(), 150, true);
    let index = segment_files(dir.path(), "index")[0].clone();
    let mut bytes = fs::read(&index).unwrap();
    // An entry pointing far past the end of the segment.
    bytes.extend_from_slice(&1000u32.to_be_bytes());
    bytes.extend_from_slice(&(10u32 << 20).to_be_bytes());
    fs::write(&index, &bytes).unwrap();
    let log = reopen(dir.path(), small_config());
    assert!(
        log.recovery_report().actions.iter().any(|a| matches!(a,
            RecoveryAction::RebuiltIndexes { reason, .. } if reason.starts_with("index ahead of the log"))),
        "{:?}",
        log.recovery_report()
    );
    assert_reads(&log, &written);
}

#[test]
fn index_pointing_at_the_wrong_batch_is_rebuilt() {
    let dir = tempfile::tempdir().unwrap();
    let written = write_log(dir.path(), small_config(), 150, true);
    let index = segment_files(dir.path(), "index")[0].clone();
    let mut bytes = fs::read(&index).unwrap();
    let n = bytes.len();
    // Last entry's relative offset off by one.
    let rel = u32::from_be_bytes(bytes[n - 8..n - 4].try_into().unwrap());
    bytes[n - 8..n - 4].copy_from_slice(&(rel + 1).to_be_bytes());
    fs::write(&index, &bytes).unwrap();
    let log = reopen(dir.path(), small_config());
    assert!(
        log.recovery_report()
            .actions
            .iter()
            .any(|a| matches!(a, RecoveryAction::RebuiltIndexes { .. })),
        "{:?}",
        log.recovery_report()
    );
    assert_reads(&log, &written);
}

#[test]
fn index_behind_the_log_is_extended() {
    let dir = tempfile::tempdir().unwrap();
    let written = write_log(dir.path(), small_config(), 150, true);
    let index = segment_files(dir.path(), "index")[0].clone();
    let bytes = fs::read(&index).unwrap();
    assert!(bytes.len() >= 24);
    // Keep only the first two entries, plus half an entry (a torn index write), in both indexes.
    fs::write(&index, &bytes[..20]).unwrap();
    let time_index = segment_files(dir.path(), "timeindex")[0].clone();
    let time_bytes = fs::read(&time_index).unwrap();
    fs::write(&time_index, &time_bytes[..30]).unwrap();
    let log = reopen(dir.path(), small_config());
    let added = log
        .recovery_report()
        .actions
        .iter()
        .find_map(|a| match a {
            RecoveryAction::ExtendedIndexes { entries_added, .. } => Some(*entries_added),
            _ => None,
        })
        .expect("extended");
    assert_eq!(added, bytes.len() / 8 - 2);
    assert_eq!(fs::read(&index).unwrap(), bytes, "the index is whole again");
    assert_eq!(
        fs::read(&time_index).unwrap(),
        time_bytes,
        "so is the time index"
    );
    assert_reads(&log, &written);
}

#[test]
fn empty_last_segment_is_kept_and_empty_middle_segment_is_deleted() {
    let dir = tempfile::tempdir().unwrap();
    let written = write_log(dir.path(), small_config(), 150, false);
    // A crash right after a roll created the next segment, before any append reached it.
    let next = written.last().unwrap().0 + 3;
    let empty_last = dir.path().join(format!("{next:020}.log"));
    fs::File::create(&empty_last).unwrap();
    // And a stray empty segment between two others.
    let segs = segment_files(dir.path(), "log");
    let first_base: i64 = segs[1]
        .file_stem()
        .unwrap()
        .to_str()
        .unwrap()
        .parse()
        .unwrap();
    let stray = dir.path().join(format!("{:020}.log", first_base - 1));
    fs::File::create(&stray).unwrap();
    let log = reopen(dir.path(), small_config());
    let report = log.recovery_report();
    assert!(
        report.actions.iter().any(|a| matches!(a,
            RecoveryAction::DeletedEmptySegment { segment } if *segment == stray)),
        "{report:?}"
    );
    assert!(!stray.exists());
    assert!(empty_last.exists());
    assert_eq!(report.segments, segs.len());
    assert_reads(&log, &written);
    // The append above went into the formerly empty segment.
    assert!(fs::metadata(&empty_last).unwrap().len() > 0);
}

#[test]
fn empty_directory_starts_a_new_log() {
    let dir = tempfile::tempdir().unwrap();
    let log = reopen(&dir.path().join("new-partition"), LogConfig::default());
    assert_eq!(log.log_start_offset(), 0);
    assert_eq!(log.high_watermark(), 0);
    assert_reads(&log, &[]);
}

#[test]
fn stray_files_are_removed() {
    let dir = tempfile::tempdir().unwrap();
    let written = write_log(dir.path(), LogConfig::default(), 5, true);
    let tmp = dir.path().join("00000000000000000000.index.tmp");
    let orphan = dir.path().join("00000000000000099999.index");
    fs::write(&tmp, b"x").unwrap();
    fs::write(&orphan, b"12345678").unwrap();
    let log = reopen(dir.path(), LogConfig::default());
    assert!(!tmp.exists() && !orphan.exists());
    assert_eq!(
        log.recovery_report()
            .actions
            .iter()
            .filter(|a| matches!(a, RecoveryAction::DeletedStrayFile { .. }))
            .count(),
        2
    );
    assert_reads(&log, &written);
}

#[test]
fn corruption_in_a_sealed_segment_refuses_to_open() {
    let dir = tempfile::tempdir().unwrap();
    write_log(dir.path(), small_config(), 150, true);
    let first = segment_files(dir.path(), "log")[0].clone();
    // Damage the last batch of the first (sealed) segment: the tail scan checks it.
    let mut bytes = fs::read(&first).unwrap();
    let n = bytes.len();
    bytes[n - 5] ^= 0xff;
    fs::write(&first, &bytes).unwrap();
    let c = committer();
    let err = PartitionLog::open(
        dir.path(),
        small_config(),
        &c,
        std::sync::Arc::new(ManualClock::new(T0)),
    )
    .unwrap_err();
    match err {
        LogError::Corrupt { path, .. } => assert_eq!(path, first),
        other => panic!("expected Corrupt, got {other}"),
    }
    // Nothing was deleted or truncated.
    assert_eq!(fs::read(&first).unwrap(), bytes);
}

#[test]
fn corruption_found_by_a_read_is_an_error_not_data() {
    let dir = tempfile::tempdir().unwrap();
    write_log(dir.path(), small_config(), 150, true);
    let log = reopen(dir.path(), small_config());
    // Damage a batch in the middle of a sealed segment after open (bit rot).
    let first = segment_files(dir.path(), "log")[0].clone();
    let mut bytes = fs::read(&first).unwrap();
    bytes[600] ^= 0xff;
    fs::write(&first, &bytes).unwrap();
    let mut saw_error = false;
    for offset in 0..30 {
        match log.read(offset, 1 << 20) {
            Ok(r) => {
                split_batches(&r.records); // panics on a bad CRC
            }
            Err(LogError::Corrupt { .. }) => saw_error = true,
            Err(other) => panic!("unexpected {other}"),
        }
    }
    assert!(saw_error);
}

#[test]
fn reopening_a_single_entry_index_repeatedly_needs_no_repair() {
    // Regression: a tail scan from an index entry at position 0 indexed that batch twice, and
    // the next open rebuilt the index as "not increasing".
    let dir = tempfile::tempdir().unwrap();
    let written = write_log(dir.path(), LogConfig::default(), 1, true);
    for _ in 0..3 {
        let log = reopen(dir.path(), LogConfig::default());
        assert!(
            log.recovery_report().actions.is_empty(),
            "{:?}",
            log.recovery_report()
        );
        assert_eq!(read_all(&log, 0, 1 << 20), written);
        log.close().unwrap();
        assert_eq!(
            fs::metadata(dir.path().join("00000000000000000000.index"))
                .unwrap()
                .len(),
            8
        );
    }
}

#[test]
fn clean_open_does_not_rewrite_sealed_indexes() {
    let dir = tempfile::tempdir().unwrap();
    write_log(dir.path(), small_config(), 150, true);
    let first_index = segment_files(dir.path(), "index")[0].clone();
    let before = fs::metadata(&first_index).unwrap().modified().unwrap();
    std::thread::sleep(std::time::Duration::from_millis(20));
    let log = reopen(dir.path(), small_config());
    assert!(log.recovery_report().actions.is_empty());
    assert_eq!(
        fs::metadata(&first_index).unwrap().modified().unwrap(),
        before
    );
}
