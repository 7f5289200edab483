//! Log compaction through the public API: a reference model (the latest value of every key)
//! checked against seeded random sequences of appends, tombstones, rolls and passes; the
//! producer-state, tombstone, lag and ratio rules; the limits; concurrency with appends and
//! retention; and every recovery row of a compaction's file states (`compact/swap.rs`).

mod common;

use common::keyed::{Rec, batch, read_batches, read_records, rec};

use std::collections::{BTreeMap, HashMap};
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use sluice_batch::{BatchBuilder, RecordRef};
use sluice_log::batch::BatchView;
use sluice_log::{
    CleanReason, CleanerLimits, CleanupPolicy, CrashPoint, DirtyRatio, GroupCommitter, LogConfig,
    LogError, ManualClock, PartitionLog, RecoveryAction,
};

const T0: i64 = 1_700_000_000_000;

fn compact_config() -> LogConfig {
    LogConfig {
        segment_bytes: 1024,
        index_interval_bytes: 64,
        segment_ms: None,
        retention_ms: None,
        cleanup_policy: CleanupPolicy::Compact,
        min_cleanable_dirty_ratio: DirtyRatio(0.0),
        delete_retention_ms: 1_000,
        ..LogConfig::default()
    }
}

fn open(dir: &Path, config: LogConfig, c: &GroupCommitter, clock: &ManualClock) -> PartitionLog {
    PartitionLog::open(dir, config, c, Arc::new(clock.clone())).expect("open")
}

fn append(log: &PartitionLog, data: &[u8]) -> i64 {
    log.append(data)
        .unwrap()
        .wait_durable()
        .unwrap()
        .base_offset
}

/// The reference model: every record appended, by offset.
#[derive(Default)]
struct Model {
    all: BTreeMap<i64, Rec>,
}

impl Model {
    fn latest(&self) -> HashMap<Vec<u8>, (i64, Option<Vec<u8>>)> {
        let mut m = HashMap::new();
        for (o, r) in &self.all {
            if let Some(k) = &r.key {
                m.insert(k.clone(), (*o, r.value.clone()));
            }
        }
        m
    }

    /// What a compacted log must hold: every record read is one appended at that offset;
    /// offsets grow; keyless records all stay; each key's last record read is its latest value
    /// (a tombstone may be gone, then with every older value of its key).
    fn check(&self, log: &PartitionLog) -> Result<(), String> {
        if log.log_start_offset() != 0 {
            return Err(format!("the log start moved to {}", log.log_start_offset()));
        }
        let read = read_records(log);
        let mut last = i64::MIN;
        let mut seen: HashMap<Vec<u8>, (i64, Option<Vec<u8>>)> = HashMap::new();
        for (o, r) in &read {
            if *o <= last {
                return Err(format!("offset {o} after {last}"));
            }
            last = *o;
            if self.all.get(o) != Some(r) {
                return Err(format!(
                    "offset {o} reads {r:?}, appended {:?}",
                    self.all.get(o)
                ));
            }
            if let Some(k) = &r.key {
                seen.insert(k.clone(), (*o, r.value.clone()));
            }
        }
        let keyless = self.all.iter().filter(|(_, r)| r.key.is_none()).count();
        let keyless_read = read.iter().filter(|(_, r)| r.key.is_none()).count();
        if keyless != keyless_read {
            return Err(format!(
                "{keyless_read} keyless records read, {keyless} appended"
            ));
        }
        for (k, (o, v)) in self.latest() {
            match (seen.get(&k), v) {
                (Some(found), v) if *found == (o, v.clone()) => {}
                (None, None) => {}
                (found, v) => {
                    return Err(format!(
                        "key {:?}: latest is {v:?} at {o}, the log ends with {found:?}",
                        String::from_utf8_lossy(&k)
                    ));
                }
            }
        }
        Ok(())
    }
}

/// Seeded random appends (keyed values, tombstones, keyless records), clock steps, rolls,
/// passes and reopenings, checked against the model after every pass and reopening.
#[test]
fn a_compacted_log_matches_a_reference_model() {
    let seeds: u64 = std::env::var("SLUICE_SIM_SEEDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(30);
    for seed in 0..seeds {
        if let Err(e) = run_model(seed) {
            panic!("seed {seed}: {e}");
        }
    }
}

fn run_model(seed: u64) -> Result<(), String> {
    let mut rng = StdRng::seed_from_u64(seed);
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("p");
    let c = common::committer();
    let clock = ManualClock::new(T0);
    let config = LogConfig {
        min_cleanable_dirty_ratio: DirtyRatio([0.0, 0.3, 0.6][rng.random_range(0..3)]),
        delete_retention_ms: rng.random_range(0..3_000),
        segment_ms: Some(2_000),
        ..compact_config()
    };
    let limits = CleanerLimits {
        dedupe_buffer_bytes: [64 * 64, 1 << 20][rng.random_range(0..2)],
        io_buffer_bytes: rng.random_range(64..4096),
        ..CleanerLimits::default()
    };
    let mut log = open(&dir, config, &c, &clock);
    let mut model = Model::default();
    let keys = rng.random_range(3..40);
    let mut removed = 0;
    for step in 0..rng.random_range(50..250) {
        match rng.random_range(0..100) {
            0..70 => {
                let n = rng.random_range(1..6);
                let records: Vec<Rec> = (0..n)
                    .map(|i| {
                        let key = (rng.random_range(0..100) >= 5)
                            .then(|| format!("k{}", rng.random_range(0..keys)));
                        let value = (rng.random_range(0..100) >= 15 || key.is_none())
                            .then(|| format!("v{step}.{i}"));
                        rec(key.as_deref(), value.as_deref())
                    })
                    .collect();
                let base = append(&log, &batch(&records, clock.now_ms_for_test(), None));
                for (i, r) in records.into_iter().enumerate() {
                    model.all.insert(base + i as i64, r);
                }
            }
            70..80 => clock.advance(rng.random_range(0..1_500)),
            80..85 => log.roll_if_aged().unwrap(),
            85..97 => {
                let outcome = log
                    .clean(clock.now_ms_for_test(), &limits)
                    .map_err(|e| format!("clean: {e}"))?;
                removed += outcome.records_removed;
                model
                    .check(&log)
                    .map_err(|e| format!("after clean at step {step}: {e}"))?;
            }
            _ => {
                log.close().unwrap();
                log = open(&dir, config, &c, &clock);
                model
                    .check(&log)
                    .map_err(|e| format!("after reopen at step {step}: {e}"))?;
            }
        }
    }
    let _ = removed;
    Ok(())
}

trait NowForTest {
    fn now_ms_for_test(&self) -> i64;
}

impl NowForTest for ManualClock {
    fn now_ms_for_test(&self) -> i64 {
        sluice_log::Clock::now_ms(self)
    }
}

/// Fills segments with one value per key per segment, `rounds` times over `keys` keys.
fn fill(log: &PartitionLog, model: &mut Model, keys: usize, rounds: usize, ts: i64) {
    for round in 0..rounds {
        for k in 0..keys {
            let r = rec(Some(&format!("k{k}")), Some(&format!("r{round}-{k:0>40}")));
            let base = append(log, &batch(std::slice::from_ref(&r), ts, None));
            model.all.insert(base, r);
        }
    }
}

#[test]
fn a_pass_keeps_the_latest_value_of_each_key_and_every_offset() {
    let tmp = tempfile::tempdir().unwrap();
    let c = common::committer();
    let clock = ManualClock::new(T0);
    let log = open(tmp.path(), compact_config(), &c, &clock);
    let mut model = Model::default();
    fill(&log, &mut model, 10, 6, T0);
    let (hw, segments, bytes) = (log.high_watermark(), log.segment_count(), log.size_bytes());
    let outcome = log.clean(T0, &CleanerLimits::default()).unwrap();
    assert_eq!(outcome.reason, Some(CleanReason::DirtyRatio));
    assert!(outcome.records_removed > 0 && outcome.bytes_written > 0 && outcome.bytes_read > 0);
    assert!(log.size_bytes() < bytes && log.segment_count() < segments);
    assert_eq!(log.high_watermark(), hw, "offsets never change");
    model.check(&log).unwrap();
    // Cleaned up to the active segment: what is left before it is one record per key.
    let first_dirty = outcome.first_dirty_offset;
    let before: Vec<_> = read_records(&log)
        .into_iter()
        .filter(|(o, _)| *o < first_dirty)
        .collect();
    let mut keys: Vec<_> = before.iter().map(|(_, r)| r.key.clone()).collect();
    keys.sort();
    keys.dedup();
    assert_eq!(
        keys.len(),
        before.len(),
        "one record per key before {first_dirty}"
    );
    // Nothing new: the next pass has nothing to do.
    let again = log.clean(T0, &CleanerLimits::default()).unwrap();
    assert_eq!(again.reason, None);
    // Reopening recovers the compacted segments (gaps between offsets are fine).
    log.close().unwrap();
    let log = open(tmp.path(), compact_config(), &c, &clock);
    assert!(log.recovery_report().clean_shutdown);
    model.check(&log).unwrap();
    assert_eq!(log.log_end_offset(), hw);
    // Reading from an offset inside a gap starts at the next record.
    let gap = (0..hw)
        .find(|o| !read_records(&log).iter().any(|(x, _)| x == o))
        .unwrap();
    let r = log.read(gap, 1).unwrap();
    let view = BatchView::parse_stored_checked(&r.records).unwrap();
    assert!(view.last_offset() >= gap);
}

#[test]
fn a_producers_last_batch_stays_as_an_empty_header() {
    let tmp = tempfile::tempdir().unwrap();
    let c = common::committer();
    let clock = ManualClock::new(T0);
    let log = open(tmp.path(), compact_config(), &c, &clock);
    let big = "x".repeat(300);
    // Producer 7: two batches whose records are all superseded later by producer 8.
    let a = batch(
        &[rec(Some("a"), Some(&big)), rec(Some("b"), Some(&big))],
        T0,
        Some((7, 1, 0)),
    );
    let b = batch(
        &[rec(Some("a"), Some(&big)), rec(Some("b"), Some(&big))],
        T0,
        Some((7, 1, 2)),
    );
    let c8 = batch(
        &[rec(Some("a"), Some("new")), rec(Some("b"), Some("new"))],
        T0,
        Some((8, 0, 0)),
    );
    append(&log, &a);
    let last7 = append(&log, &b);
    append(&log, &c8);
    for i in 0..8 {
        append(
            &log,
            &batch(&[rec(Some(&format!("z{i}")), Some(&big))], T0, None),
        );
    }
    let outcome = log.clean(T0, &CleanerLimits::default()).unwrap();
    assert_eq!(outcome.batches_emptied, 1);
    let batches = read_batches(&log);
    let views: Vec<_> = batches
        .iter()
        .map(|b| BatchView::parse_stored(b).unwrap())
        .collect();
    assert!(
        views.iter().all(|v| v.base_offset() != 0),
        "producer 7's first batch is gone"
    );
    let empty = views
        .iter()
        .find(|v| v.producer_id() == 7)
        .expect("producer 7's last batch");
    assert_eq!(empty.base_offset(), last7);
    assert_eq!(empty.record_count(), 0);
    assert_eq!(
        (
            empty.last_offset(),
            empty.producer_epoch(),
            empty.base_sequence()
        ),
        (last7 + 1, 1, 2)
    );
    // Once producer 7 has a later batch, the empty header goes at the next pass.
    append(
        &log,
        &batch(&[rec(Some("c"), Some(&big))], T0, Some((7, 1, 4))),
    );
    for i in 8..16 {
        append(
            &log,
            &batch(&[rec(Some(&format!("z{i}")), Some(&big))], T0, None),
        );
    }
    log.clean(T0, &CleanerLimits::default()).unwrap();
    let views: Vec<_> = read_batches(&log);
    let empties = views
        .iter()
        .map(|b| BatchView::parse_stored(b).unwrap())
        .filter(|v| v.record_count() == 0)
        .count();
    assert_eq!(empties, 0);
}

#[test]
fn tombstones_stay_for_delete_retention_after_their_first_pass_then_go() {
    let tmp = tempfile::tempdir().unwrap();
    let c = common::committer();
    let clock = ManualClock::new(T0);
    let config = compact_config();
    let log = open(tmp.path(), config, &c, &clock);
    let mut model = Model::default();
    fill(&log, &mut model, 5, 2, T0);
    let t = rec(Some("k1"), None);
    model
        .all
        .insert(append(&log, &batch(std::slice::from_ref(&t), T0, None)), t);
    fill(&log, &mut model, 0, 0, T0);
    let pad = "p".repeat(900);
    for i in 0..3 {
        let r = rec(Some(&format!("pad{i}")), Some(&pad));
        model
            .all
            .insert(append(&log, &batch(std::slice::from_ref(&r), T0, None)), r);
    }
    let first = log.clean(T0, &CleanerLimits::default()).unwrap();
    assert_eq!(first.tombstones_removed, 0);
    let has_tombstone = |log: &PartitionLog| {
        read_records(log)
            .iter()
            .any(|(_, r)| r.key.as_deref() == Some(b"k1".as_slice()))
    };
    assert!(has_tombstone(&log), "kept for delete.retention.ms");
    model.check(&log).unwrap();
    // The horizon survives a restart (it is in the cleaner checkpoint).
    log.close().unwrap();
    let log = open(tmp.path(), config, &c, &clock);
    // Not due before the horizon; due (and removed) after it.
    assert_eq!(log.cleanable(T0 + config.delete_retention_ms - 1), None);
    let due = log.cleanable(T0 + config.delete_retention_ms).unwrap();
    assert_eq!(due.reason, CleanReason::DeleteHorizon);
    let second = log
        .clean(T0 + config.delete_retention_ms, &CleanerLimits::default())
        .unwrap();
    assert_eq!(second.tombstones_removed, 1);
    assert!(
        !has_tombstone(&log),
        "no tombstone and no older value of k1"
    );
    model.check(&log).unwrap();
}

#[test]
fn min_compaction_lag_keeps_recent_segments_as_written() {
    let tmp = tempfile::tempdir().unwrap();
    let c = common::committer();
    let clock = ManualClock::new(T0);
    let config = LogConfig {
        min_compaction_lag_ms: 10_000,
        ..compact_config()
    };
    let log = open(tmp.path(), config, &c, &clock);
    let mut model = Model::default();
    fill(&log, &mut model, 8, 4, T0);
    assert_eq!(
        log.cleanable(T0 + 5_000),
        None,
        "every segment is too recent"
    );
    let outcome = log.clean(T0 + 5_000, &CleanerLimits::default()).unwrap();
    assert_eq!((outcome.reason, outcome.bytes_written), (None, 0));
    assert_eq!(
        log.cleanable(T0 + 10_000).unwrap().reason,
        CleanReason::DirtyRatio
    );
    assert!(
        log.clean(T0 + 10_000, &CleanerLimits::default())
            .unwrap()
            .records_removed
            > 0
    );
    model.check(&log).unwrap();
}

#[test]
fn the_dirty_ratio_and_max_compaction_lag_decide_when_a_log_is_due() {
    let tmp = tempfile::tempdir().unwrap();
    let c = common::committer();
    let clock = ManualClock::new(T0);
    let config = LogConfig {
        min_cleanable_dirty_ratio: DirtyRatio(0.9),
        max_compaction_lag_ms: Some(60_000),
        ..compact_config()
    };
    let log = open(tmp.path(), config, &c, &clock);
    let mut model = Model::default();
    fill(&log, &mut model, 8, 4, T0);
    log.clean(
        T0,
        &CleanerLimits {
            ..CleanerLimits::default()
        },
    )
    .unwrap();
    // A little new data: well under 90% dirty.
    fill(&log, &mut model, 8, 1, T0 + 1);
    let c1 = log.cleanable(T0 + 1);
    assert_eq!(c1, None, "{c1:?}");
    // Old enough: due whatever the ratio.
    let due = log.cleanable(T0 + 60_002).unwrap();
    assert_eq!(due.reason, CleanReason::MaxCompactionLag);
    assert!(due.dirty_ratio < 0.9 && due.dirty_bytes > 0);
    log.clean(T0 + 60_002, &CleanerLimits::default()).unwrap();
    model.check(&log).unwrap();
    // And the active segment rolls at max.compaction.lag.ms, so it can be cleaned.
    assert_eq!(config.roll_ms(), Some(60_000));
    let segments = log.segment_count();
    clock.set(T0 + 59_000);
    log.roll_if_aged().unwrap();
    assert_eq!(log.segment_count(), segments);
    clock.set(T0 + 60_001);
    log.roll_if_aged().unwrap();
    assert_eq!(log.segment_count(), segments + 1);
}

#[test]
fn retention_deletes_only_when_the_policy_says_delete() {
    let tmp = tempfile::tempdir().unwrap();
    let c = common::committer();
    let clock = ManualClock::new(T0 + 10 * 86_400_000);
    let config = LogConfig {
        retention_ms: Some(1_000),
        ..compact_config()
    };
    let log = open(tmp.path(), config, &c, &clock);
    let mut model = Model::default();
    fill(&log, &mut model, 8, 3, T0);
    assert_eq!(log.apply_retention().unwrap().deleted_segments, 0);
    log.set_config(LogConfig {
        cleanup_policy: CleanupPolicy::CompactDelete,
        ..config
    })
    .unwrap();
    assert!(log.apply_retention().unwrap().deleted_segments > 0);
}

#[test]
fn the_dedupe_buffer_limits_a_pass_and_the_next_pass_goes_on() {
    let tmp = tempfile::tempdir().unwrap();
    let c = common::committer();
    let clock = ManualClock::new(T0);
    let log = open(tmp.path(), compact_config(), &c, &clock);
    let mut model = Model::default();
    // Distinct keys in every segment: 4 keys per 1 KiB segment or so.
    for i in 0..40 {
        let r = rec(Some(&format!("key{i}")), Some(&"v".repeat(200)));
        model
            .all
            .insert(append(&log, &batch(std::slice::from_ref(&r), T0, None)), r);
    }
    fill(&log, &mut model, 40, 1, T0);
    let tiny = CleanerLimits {
        dedupe_buffer_bytes: 64,
        ..CleanerLimits::default()
    };
    assert!(matches!(log.clean(T0, &tiny), Err(LogError::Config(_))));
    let small = CleanerLimits {
        dedupe_buffer_bytes: 64 * 12,
        ..CleanerLimits::default()
    };
    let first = log.clean(T0, &small).unwrap();
    assert!(first.keys_mapped <= 12);
    assert!(first.first_dirty_offset < log.high_watermark() - 40);
    model.check(&log).unwrap();
    let mut passes = 1;
    while log.clean(T0, &small).unwrap().reason.is_some() {
        passes += 1;
        model.check(&log).unwrap();
        assert!(passes < 100);
    }
    assert!(passes > 2);
}

#[test]
fn the_io_limit_slows_a_pass_down() {
    let tmp = tempfile::tempdir().unwrap();
    let c = common::committer();
    let clock = ManualClock::new(T0);
    let log = open(tmp.path(), compact_config(), &c, &clock);
    let mut model = Model::default();
    fill(&log, &mut model, 10, 4, T0);
    let limits = CleanerLimits {
        io_bytes_per_second: Some(20_000),
        ..CleanerLimits::default()
    };
    let outcome = log.clean(T0, &limits).unwrap();
    let bytes = outcome.bytes_read + outcome.bytes_written;
    let floor = Duration::from_secs_f64(bytes as f64 / 20_000.0);
    assert!(outcome.elapsed >= floor.mul_f64(0.95), "{outcome:?}");
    model.check(&log).unwrap();
}

#[test]
fn appends_and_reads_go_on_while_a_pass_runs() {
    let tmp = tempfile::tempdir().unwrap();
    let c = common::committer();
    let clock = ManualClock::new(T0);
    let log = open(tmp.path(), compact_config(), &c, &clock);
    let mut model = Model::default();
    fill(&log, &mut model, 10, 6, T0);
    let cleaner = log.clone();
    let pass = std::thread::spawn(move || {
        let limits = CleanerLimits {
            io_bytes_per_second: Some(50_000),
            ..CleanerLimits::default()
        };
        cleaner.clean(T0, &limits).unwrap()
    });
    let started = Instant::now();
    let mut appended = 0;
    while !pass.is_finished() {
        let r = rec(Some("live"), Some(&format!("{appended}")));
        let t = Instant::now();
        model
            .all
            .insert(append(&log, &batch(std::slice::from_ref(&r), T0, None)), r);
        assert!(
            t.elapsed() < Duration::from_millis(500),
            "an append waited for the pass"
        );
        Model::check(&model, &log).unwrap();
        appended += 1;
    }
    let outcome = pass.join().unwrap();
    assert!(
        outcome.elapsed > Duration::from_millis(100) && appended > 2,
        "{appended} appends in {:?}",
        started.elapsed()
    );
    model.check(&log).unwrap();
}

#[test]
fn without_codecs_a_compressed_batch_is_kept_whole_and_keeps_later_tombstones() {
    let tmp = tempfile::tempdir().unwrap();
    let c = common::committer();
    let clock = ManualClock::new(T0);
    let log = open(tmp.path(), compact_config(), &c, &clock);
    let mut model = Model::default();
    // A batch that says it is compressed (the log never looks inside one).
    let mut packed = Vec::new();
    let mut b = BatchBuilder::with_base_timestamp(&mut packed, T0);
    b.push(&RecordRef {
        key: Some(b"gone"),
        value: Some(b"old"),
        headers: &[],
        timestamp_ms: T0,
    });
    b.finish_compressed(sluice_batch::attributes::codec::ZSTD, |raw| raw.to_vec());
    append(&log, &packed);
    let t = rec(Some("gone"), None);
    model
        .all
        .insert(append(&log, &batch(std::slice::from_ref(&t), T0, None)), t);
    fill(&log, &mut model, 6, 3, T0);
    let later = T0 + 10 * compact_config().delete_retention_ms;
    log.clean(T0, &CleanerLimits::default()).unwrap();
    log.clean(later, &CleanerLimits::default()).unwrap();
    let batches = read_batches(&log);
    assert_eq!(batches[0][8..], packed[8..], "kept whole");
    let tombstone_kept = read_records(&log)
        .iter()
        .any(|(_, r)| r.key.as_deref() == Some(b"gone".as_slice()) && r.value.is_none());
    assert!(
        tombstone_kept,
        "a value of the key may hide in the compressed batch"
    );
}

/// A stand-in codec for the cleaner's compressed batches: XOR with a constant, so the test can
/// tell "compressed" bytes from plain ones; a section whose first byte is `BROKEN` does not
/// decompress.
struct XorCodec;

const XOR: u8 = 0x5a;
const BROKEN: u8 = 0xee;

impl sluice_log::BatchCodecs for XorCodec {
    fn decompress(&self, codec: i16, input: &[u8], limit: usize) -> Result<Vec<u8>, String> {
        assert_eq!(codec, sluice_batch::attributes::codec::LZ4);
        if input.first() == Some(&BROKEN) {
            return Err("corrupt".into());
        }
        assert!(input.len() <= limit);
        Ok(input.iter().map(|b| b ^ XOR).collect())
    }
    fn compress(&self, codec: i16, input: &[u8]) -> Result<Vec<u8>, String> {
        assert_eq!(codec, sluice_batch::attributes::codec::LZ4);
        Ok(input.iter().map(|b| b ^ XOR).collect())
    }
}

static XOR_CODEC: XorCodec = XorCodec;

fn with_codecs() -> CleanerLimits {
    CleanerLimits {
        codecs: sluice_log::Codecs::new(&XOR_CODEC),
        ..CleanerLimits::default()
    }
}

/// A batch of `records` "compressed" with [`XorCodec`] (as lz4), or corrupt if `broken`.
fn xor_batch(records: &[Rec], ts: i64, broken: bool) -> Vec<u8> {
    let mut out = Vec::new();
    common::keyed::builder(&mut out, records, ts).finish_compressed(
        sluice_batch::attributes::codec::LZ4,
        |raw| {
            let mut packed: Vec<u8> = raw.iter().map(|b| b ^ XOR).collect();
            if broken {
                packed.insert(0, BROKEN);
            }
            packed
        },
    );
    out
}

/// Every record from the log start, "compressed" batches decoded with [`XorCodec`].
fn read_all_decoded(log: &PartitionLog) -> Vec<(i64, Rec, bool)> {
    let mut out = Vec::new();
    for b in read_batches(log) {
        let view = BatchView::parse_stored_checked(&b).unwrap();
        let compressed = view.compression() != 0;
        let mut plain = b[..61].to_vec();
        plain.extend(
            b[61..]
                .iter()
                .map(|x| if compressed { x ^ XOR } else { *x }),
        );
        let plain_view = BatchView::parse_stored(&plain).unwrap();
        for (o, _, r) in common::keyed::records_of(&plain_view) {
            out.push((o, r, compressed));
        }
    }
    out
}

/// With codecs, compressed batches are read like any other: their records supersede older
/// ones and are superseded by newer ones, a rewritten compressed batch is compressed again with
/// its codec (CRC valid, offsets unchanged), and tombstones after one can go. A batch that does
/// not decompress is kept whole, and keeps every later tombstone.
#[test]
fn compressed_batches_are_compacted_with_codecs() {
    let tmp = tempfile::tempdir().unwrap();
    let c = common::committer();
    let clock = ManualClock::new(T0);
    let log = open(tmp.path(), compact_config(), &c, &clock);
    // 0-2: a, b, c (plain); 3-5: a, b, d (compressed); 6: b again (plain); 7: tombstone of d.
    append(
        &log,
        &batch(
            &[
                rec(Some("a"), Some("a0")),
                rec(Some("b"), Some("b0")),
                rec(Some("c"), Some("c0")),
            ],
            T0,
            None,
        ),
    );
    let packed = xor_batch(
        &[
            rec(Some("a"), Some("a1")),
            rec(Some("b"), Some("b1")),
            rec(Some("d"), Some("d1")),
        ],
        T0,
        false,
    );
    append(&log, &packed);
    append(&log, &batch(&[rec(Some("b"), Some("b2"))], T0, None));
    append(&log, &batch(&[rec(Some("d"), None)], T0, None));
    // Enough keyed records after them that the segments above are sealed and cleanable.
    let mut model = Model::default();
    fill(&log, &mut model, 6, 3, T0);
    let outcome = log.clean(T0, &with_codecs()).unwrap();
    assert!(outcome.records_removed >= 4, "{outcome:?}");
    let got = read_all_decoded(&log);
    let at = |offset: i64| got.iter().find(|(o, _, _)| *o == offset).cloned();
    assert!(
        at(0).is_none() && at(1).is_none(),
        "a0 and b0 superseded by the compressed batch"
    );
    assert_eq!(at(2).unwrap().1, rec(Some("c"), Some("c0")));
    let (_, a1, compressed) = at(3).unwrap();
    assert_eq!(a1, rec(Some("a"), Some("a1")));
    assert!(compressed, "the rewritten batch is compressed again");
    assert!(at(4).is_none(), "b1 superseded by b2");
    assert!(at(5).is_none(), "d1 superseded by its tombstone");
    assert_eq!(at(6).unwrap().1, rec(Some("b"), Some("b2")));
    assert_eq!(at(7).unwrap().1, rec(Some("d"), None));
    // The tombstone goes once its horizon has passed: nothing unreadable comes before it.
    let later = T0 + 10 * compact_config().delete_retention_ms;
    log.clean(later, &with_codecs()).unwrap();
    log.clean(later + 1, &with_codecs()).unwrap();
    let got = read_all_decoded(&log);
    assert!(
        !got.iter().any(|(o, _, _)| *o == 7),
        "the tombstone was removed"
    );
    assert!(
        got.iter()
            .any(|(o, r, c)| *o == 3 && *c && r.value.as_deref() == Some(b"a1".as_slice()))
    );

    // A compressed batch that does not decompress: kept whole, and the tombstone after it stays.
    let tmp = tempfile::tempdir().unwrap();
    let log = open(tmp.path(), compact_config(), &c, &clock);
    let broken = xor_batch(&[rec(Some("e"), Some("e0"))], T0, true);
    append(&log, &broken);
    append(&log, &batch(&[rec(Some("e"), None)], T0, None));
    let mut model = Model::default();
    fill(&log, &mut model, 6, 3, T0);
    log.clean(T0, &with_codecs()).unwrap();
    log.clean(later, &with_codecs()).unwrap();
    let batches = read_batches(&log);
    assert_eq!(batches[0][8..], broken[8..], "kept whole");
    let tombstone_kept = batches[1..].iter().any(|b| {
        let view = BatchView::parse_stored_checked(b).unwrap();
        common::keyed::records_of(&view)
            .iter()
            .any(|(o, _, r)| *o == 1 && r.value.is_none())
    });
    assert!(
        tombstone_kept,
        "the tombstone after an unreadable batch stays"
    );
}

/// Every crash point of the swap, then a reopening: recovery completes or rolls back (the
/// rows of `compact/swap.rs`), no temporary file is left, and the log matches the model.
#[test]
fn recovery_finishes_or_undoes_a_pass_at_every_crash_point() {
    let cases = [
        (CrashPoint::AfterCleaned, false),
        (CrashPoint::AfterIndexSwaps, false),
        (CrashPoint::AfterCommit, true),
        (CrashPoint::AfterOldDeleted, true),
        (CrashPoint::AfterIndexesInPlace, true),
    ];
    for (crash, completes) in cases {
        let tmp = tempfile::tempdir().unwrap();
        let c = common::committer();
        let clock = ManualClock::new(T0);
        let log = open(tmp.path(), compact_config(), &c, &clock);
        let mut model = Model::default();
        fill(&log, &mut model, 10, 6, T0);
        let hw = log.high_watermark();
        log.clean_stopping_at(T0, &CleanerLimits::default(), Some(crash))
            .unwrap();
        drop(log);
        let log = open(tmp.path(), compact_config(), &c, &clock);
        let actions = &log.recovery_report().actions;
        let rolled = actions
            .iter()
            .filter(|a| matches!(a, RecoveryAction::CompactionRolledBack { .. }))
            .count();
        let done = actions
            .iter()
            .filter(|a| matches!(a, RecoveryAction::CompactionCompleted { .. }))
            .count();
        if completes {
            assert!(done > 0 && rolled == 0, "{crash:?}: {actions:?}");
        } else {
            assert!(rolled > 0 && done == 0, "{crash:?}: {actions:?}");
        }
        let leftovers: Vec<_> = std::fs::read_dir(tmp.path())
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .filter(|n| n.ends_with(".cleaned") || n.ends_with(".swap"))
            .collect();
        assert!(leftovers.is_empty(), "{crash:?}: {leftovers:?}");
        model
            .check(&log)
            .unwrap_or_else(|e| panic!("{crash:?}: {e}"));
        assert_eq!(log.high_watermark(), hw);
        // The pass runs again from where the checkpoint says, and the log stays right.
        log.clean(T0, &CleanerLimits::default()).unwrap();
        model
            .check(&log)
            .unwrap_or_else(|e| panic!("{crash:?}, second pass: {e}"));
        log.close().unwrap();
    }
}

#[test]
fn recovery_rolls_back_leftovers_of_a_pass_that_was_still_writing() {
    let tmp = tempfile::tempdir().unwrap();
    let c = common::committer();
    let clock = ManualClock::new(T0);
    let log = open(tmp.path(), compact_config(), &c, &clock);
    let mut model = Model::default();
    fill(&log, &mut model, 10, 3, T0);
    log.close().unwrap();
    // Only index files under `.cleaned` names (the log file's entry vanished).
    let name = format!("{:020}-{:020}", 0, 5);
    std::fs::write(tmp.path().join(format!("{name}.index.cleaned")), b"").unwrap();
    std::fs::write(tmp.path().join(format!("{name}.timeindex.cleaned")), b"").unwrap();
    let log = open(tmp.path(), compact_config(), &c, &clock);
    assert!(
        log.recovery_report()
            .actions
            .contains(&RecoveryAction::CompactionRolledBack { base: 0, end: 5 })
    );
    model.check(&log).unwrap();
}

/// DeleteRecords does not wait for a pass: a pass whose segments it removed meanwhile swaps
/// nothing in, and the log stays right.
#[test]
fn a_pass_whose_segments_went_meanwhile_is_abandoned() {
    let tmp = tempfile::tempdir().unwrap();
    let c = common::committer();
    let clock = ManualClock::new(T0);
    let log = open(tmp.path(), compact_config(), &c, &clock);
    let mut model = Model::default();
    fill(&log, &mut model, 10, 6, T0);
    let cleaner = log.clone();
    let pass = std::thread::spawn(move || {
        let limits = CleanerLimits {
            io_bytes_per_second: Some(20_000),
            ..CleanerLimits::default()
        };
        cleaner.clean(T0, &limits).unwrap()
    });
    std::thread::sleep(Duration::from_millis(200));
    let start = log.delete_records(20).unwrap();
    let outcome = pass.join().unwrap();
    assert!(outcome.abandoned, "{outcome:?}");
    assert_eq!(log.log_start_offset(), start);
    let leftovers = std::fs::read_dir(tmp.path())
        .unwrap()
        .filter(|e| {
            let name = e.as_ref().unwrap().file_name().into_string().unwrap();
            name.ends_with(".cleaned") || name.ends_with(".swap")
        })
        .count();
    assert_eq!(leftovers, 0);
    // The next pass cleans what is left.
    let again = log.clean(T0, &CleanerLimits::default()).unwrap();
    assert!(!again.abandoned && again.records_removed > 0);
    model.all.retain(|o, _| *o >= start);
    let read = read_records(&log);
    assert!(read.iter().all(|(o, r)| model.all.get(o) == Some(r)));
    for (k, (o, v)) in model.latest() {
        assert!(
            read.iter()
                .any(|(ro, r)| *ro == o && r.key.as_ref() == Some(&k) && r.value == v)
        );
    }
}
