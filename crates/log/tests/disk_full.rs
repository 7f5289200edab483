//! A full disk and a failed fdatasync, injected through `DiskFaults`.
//!
//! A full disk (ENOSPC on a write, an index write, a roll) fails the append that hit it and
//! nothing else: the partial write is cut back, memory and disk agree, reads go on, and the next
//! append after space returns succeeds with the next offset. A failed fdatasync fails the
//! partition for appends (never retried), while data durable before it stays readable.

mod common;

use std::fs;
use std::path::Path;
use std::sync::Arc;

use common::*;
use sluice_log::{
    CommitConfig, DataDirSpace, DiskFaults, GroupCommitter, LogConfig, LogError, ManualClock,
    PartitionLog, RecoveryAction,
};

const T0: i64 = 1_700_000_000_000;

/// A committer whose space state belongs to no directory: it clears only on a successful
/// write, so the tests see exactly what the log reported (no statvfs of the real disk).
fn committer_with_space() -> GroupCommitter {
    GroupCommitter::start_with_space(CommitConfig::default(), DataDirSpace::detached())
}

fn open_faulty(
    dir: &Path,
    config: LogConfig,
    c: &GroupCommitter,
    faults: &DiskFaults,
) -> PartitionLog {
    PartitionLog::open_with(
        dir,
        config,
        c,
        Arc::new(ManualClock::new(T0)),
        faults.clone(),
    )
    .expect("open log")
}

/// Appends `n` batches of 3 records and waits for each to be durable; returns them as
/// (base offset, bytes after the base offset).
fn append_durable(log: &PartitionLog, tag: u32, n: u32) -> Vec<(i64, Vec<u8>)> {
    (0..n)
        .map(|i| {
            let b = make_batch(tag + i, 3, 100, T0 + i64::from(i));
            let a = log.append(&b).expect("append");
            a.wait_durable().expect("durable");
            (a.base_offset, b[8..].to_vec())
        })
        .collect()
}

fn file_len(path: &Path) -> u64 {
    fs::metadata(path).unwrap().len()
}

fn files_with(dir: &Path, ext: &str) -> usize {
    fs::read_dir(dir)
        .unwrap()
        .filter(|e| {
            e.as_ref()
                .unwrap()
                .path()
                .extension()
                .is_some_and(|x| x == ext)
        })
        .count()
}

fn assert_offsets_contiguous(batches: &[(i64, Vec<u8>)]) {
    for pair in batches.windows(2) {
        assert_eq!(pair[1].0, pair[0].0 + 3, "offsets must be contiguous");
    }
}

#[test]
fn enospc_mid_batch_is_cut_back_and_the_next_append_after_space_returns_succeeds() {
    let dir = tempfile::tempdir().unwrap();
    let c = committer_with_space();
    let faults = DiskFaults::new();
    let log = open_faulty(dir.path(), LogConfig::default(), &c, &faults);
    let mut expected = append_durable(&log, 0, 20);
    let segment = dir.path().join("00000000000000000000.log");
    let (size, end, hw) = (log.size_bytes(), log.log_end_offset(), log.high_watermark());
    assert_eq!(file_len(&segment), size);

    // Room for part of the next batch only: the write lands partly, then fails.
    faults.fill_after(50);
    let big = make_batch(900, 3, 100, T0);
    let err = log.append(&big).unwrap_err();
    assert!(matches!(err, LogError::NoSpace { .. }), "{err}");
    assert!(err.to_string().contains("data directory is full"), "{err}");
    assert!(c.space().is_full());
    assert_eq!(c.space().no_space_errors(), 1);
    // Cut back: memory and disk agree with the state before the append.
    assert_eq!(file_len(&segment), size, "the partial batch was cut off");
    assert_eq!(
        (log.size_bytes(), log.log_end_offset(), log.high_watermark()),
        (size, end, hw)
    );
    // Reads are fine while the disk is full, and so is a second refused append.
    assert_eq!(read_all(&log, 0, 1 << 20), expected);
    assert!(log.append(&big).unwrap_err().is_no_space());
    assert_eq!(read_all(&log, 0, 1000), expected);

    // Space returns: the same partition takes appends again, at the next offset.
    faults.free();
    expected.extend(append_durable(&log, 1000, 5));
    assert!(!c.space().is_full(), "a successful write clears the state");
    assert_eq!(
        expected[20].0, end,
        "no offset was used up by the failed appends"
    );
    assert_offsets_contiguous(&expected);
    assert_eq!(read_all(&log, 0, 1 << 20), expected);
    assert_eq!(file_len(&segment), log.size_bytes());

    // After an unclean stop, recovery finds nothing to cut: the failed append left nothing.
    drop(log);
    let log = open_faulty(dir.path(), LogConfig::default(), &c, &DiskFaults::none());
    let truncated = log
        .recovery_report()
        .actions
        .iter()
        .any(|a| matches!(a, RecoveryAction::TruncatedTail { .. }));
    assert!(!truncated, "{:?}", log.recovery_report());
    assert_eq!(read_all(&log, 0, 1 << 20), expected);
}

#[test]
fn enospc_in_a_multi_batch_append_writes_none_of_it() {
    let dir = tempfile::tempdir().unwrap();
    let c = committer_with_space();
    let faults = DiskFaults::new();
    let log = open_faulty(dir.path(), LogConfig::default(), &c, &faults);
    let expected = append_durable(&log, 0, 3);
    let mut data = make_batch(10, 3, 100, T0);
    data.extend(make_batch(11, 3, 100, T0));
    data.extend(make_batch(12, 3, 100, T0));
    // Room for the first batch and a half.
    let first = make_batch(10, 3, 100, T0).len() as u64;
    faults.fill_after(first + first / 2);
    assert!(log.append(&data).unwrap_err().is_no_space());
    assert_eq!(log.log_end_offset(), 9);
    faults.free();
    let a = log.append(&data).unwrap();
    assert_eq!((a.base_offset, a.last_offset), (9, 17));
    a.wait_durable().unwrap();
    let got = read_all(&log, 0, 1 << 20);
    assert_eq!(&got[..3], &expected[..]);
    assert_eq!(
        got.iter().map(|b| b.0).collect::<Vec<_>>(),
        vec![0, 3, 6, 9, 12, 15]
    );
}

#[test]
fn enospc_at_a_roll_keeps_the_active_segment_and_leaves_no_stray_files() {
    // Full for every write (the index tails fail first); full for new files only, before the
    // first file; and after the segment file, before its index files.
    for case in 0..3 {
        roll_on_a_full_disk(case);
    }
}

fn roll_on_a_full_disk(case: u32) {
    let dir = tempfile::tempdir().unwrap();
    let c = committer_with_space();
    let faults = DiskFaults::new();
    let config = small_config(); // 16 KiB segments
    let log = open_faulty(dir.path(), config, &c, &faults);
    // Fill the first segment up to just below its limit.
    let mut expected = Vec::new();
    while log.size_bytes() + 2 * make_batch(0, 3, 100, T0).len() as u64 <= config.segment_bytes {
        expected.extend(append_durable(&log, expected.len() as u32, 1));
    }
    assert_eq!(log.segment_count(), 1);
    // The next append that needs a new segment meets a full disk.
    match case {
        0 => faults.fill_after(0),
        1 => faults.fail_creates_after(0),
        _ => faults.fail_creates_after(1),
    }
    let mut refused = 0;
    for _ in 0..3 {
        match log.append(&make_batch(500, 3, 100, T0)) {
            Ok(a) => {
                // Readable once durable: wait, so the read below does not race the sync round.
                a.wait_durable().expect("durable");
                expected.push((a.base_offset, make_batch(500, 3, 100, T0)[8..].to_vec()));
            }
            Err(e) => {
                assert!(e.is_no_space(), "{e}");
                refused += 1;
            }
        }
    }
    assert!(refused > 0, "case {case}: the roll must have needed room");
    assert_eq!(log.segment_count(), 1);
    assert_eq!(files_with(dir.path(), "log"), 1, "no half-created segment");
    assert_eq!(files_with(dir.path(), "index"), 1);
    assert_eq!(files_with(dir.path(), "timeindex"), 1);
    assert_eq!(read_all(&log, 0, 1 << 20).len(), expected.len());

    // Room again: the roll happens, offsets carry on.
    faults.free();
    let more = append_durable(&log, 2000, 3);
    assert_eq!(log.segment_count(), 2);
    assert_eq!(more[0].0, log.log_end_offset() - 9);
    expected.extend(more);
    assert_offsets_contiguous(&expected);
    assert_eq!(read_all(&log, 0, 1 << 20), expected);
    log.close().unwrap();
    let log = open_faulty(dir.path(), config, &c, &DiskFaults::none());
    assert!(
        log.recovery_report().actions.is_empty(),
        "{:?}",
        log.recovery_report()
    );
    assert_eq!(read_all(&log, 0, 1 << 20), expected);
}

#[test]
fn enospc_writing_the_index_tail_fails_the_append_before_its_data() {
    let dir = tempfile::tempdir().unwrap();
    let c = committer_with_space();
    let faults = DiskFaults::new();
    // One index entry per batch (each batch is larger than the interval).
    let config = LogConfig {
        index_interval_bytes: 64,
        ..LogConfig::default()
    };
    let log = open_faulty(dir.path(), config, &c, &faults);
    // 256 batches fill the in-memory tail; the next append must write it out first.
    let mut expected = append_durable(&log, 0, 256);
    let index = dir.path().join("00000000000000000000.index");
    let index_len = file_len(&index);
    let size = log.size_bytes();
    // Room for a few index entries, not the whole tail.
    faults.fill_after(100);
    let err = log.append(&make_batch(9000, 3, 100, T0)).unwrap_err();
    assert!(err.is_no_space(), "{err}");
    assert!(err.to_string().contains(".index"), "{err}");
    assert_eq!(
        file_len(&index),
        index_len,
        "partly written entries were cut off"
    );
    assert_eq!(log.size_bytes(), size, "no data was written");
    assert_eq!(read_all(&log, 0, 1 << 20), expected);
    faults.free();
    expected.extend(append_durable(&log, 9000, 2));
    assert_offsets_contiguous(&expected);
    assert_eq!(file_len(&index), 256 * 8, "the tail reached the file");
    // Lookups through the written index find every batch.
    for (base, bytes) in &expected[250..] {
        let r = log.read(*base + 1, 1).unwrap();
        assert_eq!(split_batches(&r.records)[0], (*base, bytes.clone()));
    }
    log.close().unwrap();
    let log = open_faulty(dir.path(), config, &c, &DiskFaults::none());
    assert!(
        log.recovery_report().actions.is_empty(),
        "{:?}",
        log.recovery_report()
    );
    assert_eq!(read_all(&log, 0, 1 << 20), expected);
}

#[test]
fn a_new_partition_on_a_full_disk_fails_to_open_with_no_space() {
    let dir = tempfile::tempdir().unwrap();
    let c = committer_with_space();
    let faults = DiskFaults::new();
    faults.fill_after(0);
    let err = PartitionLog::open_with(
        dir.path().join("p0"),
        LogConfig::default(),
        &c,
        Arc::new(ManualClock::new(T0)),
        faults,
    )
    .unwrap_err();
    assert!(err.is_no_space(), "{err}");
    assert!(c.space().is_full());
}

#[test]
fn failed_fdatasync_refuses_appends_for_good_but_durable_data_stays_readable() {
    for errno in [libc::EIO, libc::ENOSPC] {
        let dir = tempfile::tempdir().unwrap();
        let c = committer_with_space();
        let faults = DiskFaults::new();
        let log = open_faulty(dir.path(), small_config(), &c, &faults);
        let durable = append_durable(&log, 0, 100);
        assert!(
            log.segment_count() > 1,
            "reads must cross sealed segments too"
        );
        let hw = log.high_watermark();
        assert!(!log.is_failed());

        faults.fail_syncs(errno);
        let a = log.append(&make_batch(77, 3, 100, T0)).unwrap();
        let err = a.wait_durable().unwrap_err();
        assert!(matches!(err, LogError::Failed { .. }), "{err}");
        assert!(log.is_failed(), "what sluice_partitions_failed counts");
        assert_eq!(
            log.high_watermark(),
            hw,
            "nothing after the failure is visible"
        );
        // Never retried: even once syncs would work again, the partition refuses appends.
        faults.heal_syncs();
        let err = log.append(&make_batch(78, 3, 100, T0)).unwrap_err();
        assert!(matches!(err, LogError::Failed { .. }), "{err}");
        assert!(err.to_string().contains("stays readable"), "{err}");
        assert_eq!(c.space().is_full(), errno == libc::ENOSPC);
        // Every durable batch still reads, from every segment.
        assert_eq!(read_all(&log, 0, 1 << 20), durable);
        assert_eq!(read_all(&log, 0, 1), durable);
        assert!(log.offset_for_timestamp(T0).unwrap().is_some());
        // Retention still runs (it only deletes whole sealed segments).
        log.apply_retention().unwrap();
        assert!(
            log.close().is_err(),
            "no clean-shutdown marker after a failed sync"
        );

        // Reopening runs recovery: everything durable is there, the log takes appends.
        let log = open_faulty(dir.path(), small_config(), &c, &DiskFaults::none());
        let got = read_all(&log, 0, 1 << 20);
        assert_eq!(&got[..durable.len()], &durable[..], "errno {errno}");
        append_durable(&log, 100, 1);
    }
}

mod prop {
    use super::*;
    use proptest::prelude::*;

    #[derive(Debug, Clone)]
    enum Op {
        /// Append a batch of `count` records of `len` bytes.
        Append { count: usize, len: usize },
        /// The disk has room for this many more bytes.
        Fill(u64),
        /// Space returns.
        Free,
        /// Close cleanly (or drop) and reopen.
        Reopen { clean: bool },
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            6 => (1usize..6, 1usize..400).prop_map(|(count, len)| Op::Append { count, len }),
            2 => (0u64..3000).prop_map(Op::Fill),
            2 => Just(Op::Free),
            1 => any::<bool>().prop_map(|clean| Op::Reopen { clean }),
        ]
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(48))]

        /// Whatever the disk does, the log holds exactly the appends that succeeded, at
        /// contiguous offsets, and reads them back byte for byte.
        #[test]
        fn the_log_holds_exactly_the_appends_that_succeeded(ops in proptest::collection::vec(op(), 1..60)) {
            let dir = tempfile::tempdir().unwrap();
            let c = committer_with_space();
            let faults = DiskFaults::new();
            let config = LogConfig { segment_bytes: 4096, index_interval_bytes: 128, ..LogConfig::default() };
            let mut log = open_faulty(dir.path(), config, &c, &faults);
            let mut model: Vec<(i64, Vec<u8>)> = Vec::new();
            let mut next = 0i64;
            for (i, op) in ops.into_iter().enumerate() {
                match op {
                    Op::Append { count, len } => {
                        let b = make_batch(i as u32, count, len, T0 + i as i64);
                        match log.append(&b) {
                            Ok(a) => {
                                prop_assert_eq!(a.base_offset, next);
                                a.wait_durable().unwrap();
                                model.push((next, b[8..].to_vec()));
                                next += count as i64;
                            }
                            Err(e) => prop_assert!(e.is_no_space(), "{}", e),
                        }
                    }
                    Op::Fill(bytes) => faults.fill_after(bytes),
                    Op::Free => faults.free(),
                    Op::Reopen { clean } => {
                        // On a full disk too: a close may then fail (the index tails do not
                        // fit), but reopening an existing log never needs room.
                        if clean && let Err(e) = log.close() {
                            prop_assert!(e.is_no_space(), "{}", e);
                        }
                        drop(log);
                        log = open_faulty(dir.path(), config, &c, &faults);
                    }
                }
                prop_assert_eq!(log.log_end_offset(), next);
                prop_assert_eq!(log.high_watermark(), next);
            }
            prop_assert_eq!(read_all(&log, 0, 1 << 20), model.clone());
            faults.free();
            log.close().unwrap();
            let log = open_faulty(dir.path(), config, &c, &DiskFaults::none());
            prop_assert_eq!(read_all(&log, 0, 700), model);
        }
    }
}
