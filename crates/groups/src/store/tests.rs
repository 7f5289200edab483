//! Unit tests of the group store: format and replay, the recovery table, group commit,
//! compaction, failures, and a crash test that SIGKILLs a child writer process.

use super::encoding::Damage;
use super::recovery::Live;
use super::*;

use std::collections::HashMap;
use std::io::{BufRead, Write};
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use futures::FutureExt;
use futures::executor::block_on;
use serde_json::json;
use sluice_storage::FileChange;

/// Test-only controls of the store's rounds.
#[derive(Default)]
pub(super) struct Hooks {
    /// Holds rounds back: a round finds nothing to take until this is cleared.
    pub(super) paused: bool,
    /// Makes the next round panic after it took its batch.
    pub(super) panic_next_round: bool,
    /// Makes the next round fail as if its write failed (nothing is written).
    pub(super) fail_next_round: bool,
    /// The disk has room for this many bytes per round: a round with more writes that many,
    /// then fails with ENOSPC. `None`: room enough.
    pub(super) room_bytes: Option<usize>,
    /// Runs once, in the round (on a sync thread), between writing the compacted file and
    /// renaming it.
    pub(super) before_rename: Option<Box<dyn FnMut() + Send>>,
}

impl std::fmt::Debug for Hooks {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Hooks")
            .field("paused", &self.paused)
            .field("panic_next_round", &self.panic_next_round)
            .field("fail_next_round", &self.fail_next_round)
            .field("room_bytes", &self.room_bytes)
            .field("before_rename", &self.before_rename.is_some())
            .finish()
    }
}

impl GroupStore {
    fn set_paused(&self, paused: bool) {
        self.shared.lock().hooks.paused = paused;
        self.kick();
    }

    /// Requests a round, as a write does (after a hook changed).
    fn kick(&self) {
        self.commit.request_sync(&self.shared);
    }
}

fn committed(offset: i64) -> CommittedOffset {
    CommittedOffset {
        offset,
        leader_epoch: 3,
        metadata: Some(format!("m{offset}")),
        commit_timestamp_ms: 1_700_000_000_000 + offset,
    }
}

fn set_offset(group: &str, topic: &str, partition: i32, offset: i64) -> GroupRecord {
    GroupRecord::Offset {
        group: group.into(),
        topic: topic.into(),
        partition,
        offset: Some(committed(offset)),
    }
}

fn delete_offset(group: &str, topic: &str, partition: i32) -> GroupRecord {
    GroupRecord::Offset {
        group: group.into(),
        topic: topic.into(),
        partition,
        offset: None,
    }
}

fn set_group(group: &str, snapshot: serde_json::Value) -> GroupRecord {
    GroupRecord::Group {
        group: group.into(),
        snapshot: Some(snapshot),
    }
}

fn delete_group(group: &str) -> GroupRecord {
    GroupRecord::Group {
        group: group.into(),
        snapshot: None,
    }
}

fn log_path(dir: &Path) -> PathBuf {
    dir.join(DIR_NAME).join(LOG_NAME)
}

fn file_len(dir: &Path) -> u64 {
    fs::metadata(log_path(dir)).expect("log file").len()
}

fn write_ok(store: &GroupStore, records: Vec<GroupRecord>) {
    block_on(store.write(records)).expect("write is durable");
}

fn reopen(dir: &Path) -> Recovered {
    let (store, recovered) = GroupStore::open(dir).expect("reopen");
    store.close();
    recovered
}

fn state_of(recovered: &Recovered) -> Live {
    Live {
        offsets: recovered.offsets.clone(),
        groups: recovered.groups.clone(),
    }
}

/// Opens, writes `writes` one at a time (each durable before the next), closes; returns
/// the file length after each write.
fn write_each(dir: &Path, writes: Vec<Vec<GroupRecord>>) -> Vec<u64> {
    let (store, _) = GroupStore::open(dir).expect("open");
    let lengths = writes
        .into_iter()
        .map(|records| {
            write_ok(&store, records);
            file_len(dir)
        })
        .collect();
    store.close();
    lengths
}

#[test]
fn pending_is_send_static_debug() {
    fn assert_traits<T: Send + 'static + std::fmt::Debug>() {}
    fn assert_sync<T: Sync>() {}
    assert_traits::<Pending>();
    assert_traits::<GroupStore>();
    assert_sync::<GroupStore>();
}

#[test]
fn roundtrip_through_reopen() {
    let tmp = tempfile::tempdir().unwrap();
    let (store, recovered) = GroupStore::open(tmp.path()).unwrap();
    assert!(recovered.offsets.is_empty() && recovered.groups.is_empty());
    assert_eq!(recovered.truncated_bytes, 0);
    let snapshot = json!({"generation": 7, "members": ["a", "b"], "protocol": "range"});
    write_ok(
        &store,
        vec![
            set_group("g1", snapshot.clone()),
            set_offset("g1", "t", 0, 10),
            set_offset("g1", "t", 1, 11),
        ],
    );
    write_ok(&store, vec![set_offset("g2", "other", 5, 50)]);
    write_ok(&store, vec![set_offset("g1", "t", 0, 12)]);
    store.close();

    let recovered = reopen(tmp.path());
    assert_eq!(recovered.truncated_bytes, 0);
    assert_eq!(recovered.groups.len(), 1);
    assert_eq!(recovered.groups["g1"], snapshot);
    let g1 = &recovered.offsets["g1"];
    assert_eq!(g1.len(), 2);
    assert_eq!(g1[&("t".to_string(), 0)], committed(12));
    assert_eq!(g1[&("t".to_string(), 1)], committed(11));
    assert_eq!(
        recovered.offsets["g2"][&("other".to_string(), 5)],
        committed(50)
    );
    let no_metadata = CommittedOffset {
        offset: 1,
        leader_epoch: -1,
        metadata: None,
        commit_timestamp_ms: 0,
    };
    let (store, _) = GroupStore::open(tmp.path()).unwrap();
    write_ok(
        &store,
        vec![GroupRecord::Offset {
            group: "g3".into(),
            topic: "t".into(),
            partition: 0,
            offset: Some(no_metadata.clone()),
        }],
    );
    drop(store);
    assert_eq!(
        reopen(tmp.path()).offsets["g3"][&("t".to_string(), 0)],
        no_metadata
    );
}

#[test]
fn delete_semantics() {
    let tmp = tempfile::tempdir().unwrap();
    let (store, _) = GroupStore::open(tmp.path()).unwrap();
    write_ok(
        &store,
        vec![
            set_group("g1", json!({"g": 1})),
            set_offset("g1", "t", 0, 1),
            set_offset("g1", "t", 1, 2),
            set_group("g2", json!({"g": 2})),
            set_offset("g2", "t", 0, 3),
            set_offset("g3", "t", 0, 4),
        ],
    );
    // Offset delete: only that partition; deleting an unknown one is a no-op.
    write_ok(
        &store,
        vec![delete_offset("g1", "t", 1), delete_offset("nope", "t", 9)],
    );
    // Group delete: snapshot and every offset of g1; g2 untouched.
    write_ok(&store, vec![delete_group("g1")]);
    // Deleting the last offset of a group with no snapshot leaves nothing behind.
    write_ok(&store, vec![delete_offset("g3", "t", 0)]);
    // A group can come back after its delete.
    write_ok(
        &store,
        vec![delete_group("g4"), set_offset("g4", "t", 2, 9)],
    );
    store.close();

    let recovered = reopen(tmp.path());
    assert_eq!(
        recovered.groups.keys().collect::<Vec<_>>(),
        vec!["g2"],
        "g1's snapshot is gone"
    );
    assert_eq!(
        recovered.offsets.keys().collect::<Vec<_>>(),
        vec!["g2", "g4"],
        "g1's offsets went with the group, g3's last offset was deleted"
    );
    assert_eq!(recovered.offsets["g2"].len(), 1);
    assert_eq!(recovered.offsets["g4"][&("t".to_string(), 2)], committed(9));
}

#[test]
fn group_commit_shares_one_fdatasync() {
    let tmp = tempfile::tempdir().unwrap();
    let (store, _) = GroupStore::open(tmp.path()).unwrap();
    // Queue many writes while rounds are held: they must share one round.
    store.set_paused(true);
    let pendings: Vec<Pending> = (0..200)
        .map(|i| store.write(vec![set_offset("g", "t", i % 10, i64::from(i))]))
        .collect();
    store.set_paused(false);
    for p in pendings {
        block_on(p).unwrap();
    }
    assert_eq!(store.syncs(), 1, "200 queued writes, one fdatasync");

    // Free-running: many threads writing at once still share fdatasyncs.
    let store = Arc::new(store);
    let threads: Vec<_> = (0..8)
        .map(|t| {
            let store = Arc::clone(&store);
            std::thread::spawn(move || {
                let pendings: Vec<Pending> = (0..100)
                    .map(|i| store.write(vec![set_offset("h", "t", t, i)]))
                    .collect();
                pendings.into_iter().for_each(|p| block_on(p).unwrap());
            })
        })
        .collect();
    threads.into_iter().for_each(|t| t.join().unwrap());
    let syncs = store.syncs() - 1;
    assert!(syncs < 400, "800 writes took {syncs} fdatasyncs");
    store.close();
    let recovered = reopen(tmp.path());
    assert_eq!(recovered.offsets["g"].len(), 10);
    assert_eq!(recovered.offsets["h"].len(), 8);
    assert!(recovered.offsets["h"].values().all(|o| o.offset == 99));
}

#[test]
fn writes_resolve_in_order_and_barrier_waits() {
    let tmp = tempfile::tempdir().unwrap();
    let (store, _) = GroupStore::open(tmp.path()).unwrap();
    store.set_paused(true);
    let first = store.write(vec![set_offset("g", "t", 0, 1)]);
    let barrier = store.write(Vec::new());
    let last = store.write(vec![set_offset("g", "t", 0, 2)]);
    store.set_paused(false);
    block_on(barrier).unwrap();
    block_on(first).unwrap();
    block_on(last).unwrap();
    // An empty write with nothing queued needs no fdatasync.
    let syncs = store.syncs();
    block_on(store.write(Vec::new())).unwrap();
    assert_eq!(store.syncs(), syncs);
    store.close();
    assert_eq!(
        reopen(tmp.path()).offsets["g"][&("t".to_string(), 0)],
        committed(2),
        "the later write wins: call order is file order"
    );
}

#[test]
fn torn_tail_is_truncated() {
    let tmp = tempfile::tempdir().unwrap();
    let lengths = write_each(
        tmp.path(),
        vec![
            vec![set_offset("g", "t", 0, 1)],
            vec![set_offset("g", "t", 1, 2)],
            vec![set_offset("g", "t", 2, 3), set_group("g", json!({"x": 1}))],
        ],
    );
    // Cut the last frame short.
    let file = OpenOptions::new()
        .write(true)
        .open(log_path(tmp.path()))
        .unwrap();
    file.set_len(lengths[2] - 5).unwrap();
    drop(file);
    let recovered = reopen(tmp.path());
    assert_eq!(recovered.truncated_bytes, lengths[2] - 5 - lengths[1]);
    assert_eq!(file_len(tmp.path()), lengths[1]);
    assert_eq!(recovered.offsets["g"].len(), 2, "earlier writes intact");
    assert!(recovered.groups.is_empty(), "the torn write is all gone");
    // The store keeps working after the cut, and the next open is clean.
    let (store, _) = GroupStore::open(tmp.path()).unwrap();
    write_ok(&store, vec![set_offset("g", "t", 3, 4)]);
    store.close();
    let recovered = reopen(tmp.path());
    assert_eq!(recovered.truncated_bytes, 0);
    assert_eq!(recovered.offsets["g"].len(), 3);

    // Garbage and zero fill appended after whole frames.
    for tail in [b"\x00\x00\x01\x00garbage!".to_vec(), vec![0u8; 4096]] {
        let before = file_len(tmp.path());
        let mut file = OpenOptions::new()
            .append(true)
            .open(log_path(tmp.path()))
            .unwrap();
        file.write_all(&tail).unwrap();
        drop(file);
        let recovered = reopen(tmp.path());
        assert_eq!(recovered.truncated_bytes, tail.len() as u64);
        assert_eq!(file_len(tmp.path()), before);
        assert_eq!(recovered.offsets["g"].len(), 3);
    }
}

#[test]
fn crc_corruption_in_last_record_is_truncated() {
    let tmp = tempfile::tempdir().unwrap();
    let lengths = write_each(
        tmp.path(),
        vec![
            vec![set_offset("g", "t", 0, 1)],
            vec![set_offset("g", "t", 0, 2)],
        ],
    );
    let path = log_path(tmp.path());
    let mut bytes = fs::read(&path).unwrap();
    let last = bytes.len() - 3;
    bytes[last] ^= 0x20;
    fs::write(&path, &bytes).unwrap();
    let recovered = reopen(tmp.path());
    assert_eq!(recovered.truncated_bytes, lengths[1] - lengths[0]);
    assert_eq!(file_len(tmp.path()), lengths[0]);
    assert_eq!(
        recovered.offsets["g"][&("t".to_string(), 0)],
        committed(1),
        "the write before the corrupt one survives"
    );
}

#[test]
fn damage_in_the_middle_ends_the_file() {
    let tmp = tempfile::tempdir().unwrap();
    let lengths = write_each(
        tmp.path(),
        vec![
            vec![set_offset("g", "t", 0, 1)],
            vec![set_offset("g", "t", 1, 2)],
            vec![set_offset("g", "t", 2, 3)],
        ],
    );
    let path = log_path(tmp.path());
    let mut bytes = fs::read(&path).unwrap();
    // Zero the middle frame, as a crash can leave a hole before a later page.
    bytes[lengths[0] as usize..lengths[1] as usize].fill(0);
    fs::write(&path, &bytes).unwrap();
    let recovered = reopen(tmp.path());
    assert_eq!(recovered.truncated_bytes, lengths[2] - lengths[0]);
    assert_eq!(recovered.offsets["g"].len(), 1);
    assert_eq!(file_len(tmp.path()), lengths[0]);
}

/// One frame with the given raw payload and a correct CRC.
fn raw_frame(payload: &[u8]) -> Vec<u8> {
    let mut frame = (payload.len() as u32).to_be_bytes().to_vec();
    frame.extend_from_slice(&crc32c::crc32c(payload).to_be_bytes());
    frame.extend_from_slice(payload);
    frame
}

/// Every row of the recovery table in the module doc.
#[test]
fn recovery_decision_table() {
    let path = Path::new("groups.log");
    let mut good = Vec::new();
    encode_frame(
        &mut good,
        &[StoredRecord::borrowed(&set_offset("g", "t", 0, 1))],
    )
    .unwrap();
    let mut bad_crc = good.clone();
    *bad_crc.last_mut().unwrap() ^= 1;
    let mut too_long = good.clone();
    too_long[..4].copy_from_slice(&(WRITE_BYTES_MAX as u32 + 1).to_be_bytes());
    let mut past_end = good.clone();
    past_end[..4].copy_from_slice(&(good.len() as u32).to_be_bytes());
    let version_zero = raw_frame(b"\x00[]");
    let not_records = raw_frame(b"\x01{\"type\":\"nope\"}");
    let not_json = raw_frame(b"\x01[{");

    let cases: Vec<(&str, Vec<u8>, Option<Damage>)> = vec![
        ("clean end", Vec::new(), None),
        ("torn header", good[..5].to_vec(), Some(Damage::TornHeader)),
        ("zero length", vec![0; 64], Some(Damage::ZeroLength)),
        ("length too large", too_long, Some(Damage::LengthTooLarge)),
        (
            "torn payload",
            good[..good.len() - 1].to_vec(),
            Some(Damage::TornPayload),
        ),
        ("length past the end", past_end, Some(Damage::TornPayload)),
        ("crc mismatch", bad_crc, Some(Damage::CrcMismatch)),
        ("version 0", version_zero, Some(Damage::Undecodable)),
        ("not records", not_records, Some(Damage::Undecodable)),
        ("not json", not_json, Some(Damage::Undecodable)),
    ];
    for (name, tail, expected) in cases {
        let mut file = good.clone();
        file.extend_from_slice(&tail);
        let replayed = replay(&file, path).unwrap();
        assert_eq!(replayed.damage, expected, "{name}");
        assert_eq!(replayed.valid_bytes, good.len(), "{name}");
        assert_eq!(replayed.live.offsets["g"].len(), 1, "{name}");
    }

    // A newer format is not damage: refuse, and leave the file alone.
    let mut file = good.clone();
    file.extend_from_slice(&raw_frame(b"\x02[]"));
    let error = replay(&file, path).unwrap_err();
    assert!(error.to_string().contains("version 2"), "{error}");

    let tmp = tempfile::tempdir().unwrap();
    fs::create_dir(tmp.path().join(DIR_NAME)).unwrap();
    fs::write(log_path(tmp.path()), &file).unwrap();
    assert!(GroupStore::open(tmp.path()).is_err());
    assert_eq!(fs::read(log_path(tmp.path())).unwrap(), file);
}

#[test]
fn compaction_keeps_live_state_and_shrinks_the_file() {
    let tmp = tempfile::tempdir().unwrap();
    let (store, _) = GroupStore::open_with(tmp.path(), 4096).unwrap();
    let mut model = Live::default();
    for i in 0..600 {
        let mut records = vec![set_offset("g", "t", i % 5, i64::from(i))];
        if i % 50 == 0 {
            records.push(set_group("g", json!({"generation": i})));
        }
        if i % 100 == 7 {
            records.push(set_offset("gone", "t", 0, 1));
            records.push(delete_group("gone"));
        }
        for r in &records {
            model.apply(r.clone());
        }
        write_ok(&store, records);
    }
    assert!(store.compactions() > 0, "the file passed the threshold");
    // Live: 5 offsets and one snapshot, far under the threshold after compaction.
    assert!(
        file_len(tmp.path()) <= 4096 * 2,
        "file is {} bytes",
        file_len(tmp.path())
    );
    assert!(!tmp.path().join(DIR_NAME).join(TMP_NAME).exists());
    store.close();
    let recovered = reopen(tmp.path());
    assert_eq!(recovered.truncated_bytes, 0);
    assert_eq!(state_of(&recovered), model);
}

#[test]
fn compaction_at_open() {
    let tmp = tempfile::tempdir().unwrap();
    let (store, _) = GroupStore::open(tmp.path()).unwrap();
    for i in 0..200 {
        write_ok(&store, vec![set_offset("g", "t", 0, i)]);
    }
    store.close();
    let before = file_len(tmp.path());
    let (store, recovered) = GroupStore::open_with(tmp.path(), 1024).unwrap();
    assert_eq!(store.compactions(), 1);
    assert!(file_len(tmp.path()) < before / 10);
    store.close();
    assert_eq!(state_of(&reopen(tmp.path())), state_of(&recovered));
}

#[test]
fn writes_during_compaction_survive_reopen() {
    let tmp = tempfile::tempdir().unwrap();
    let (store, _) = GroupStore::open_with(tmp.path(), 2048).unwrap();
    let (entered_tx, entered_rx) = mpsc::channel();
    let (go_tx, go_rx) = mpsc::channel::<()>();
    store.shared.lock().hooks.before_rename = Some(Box::new(move || {
        entered_tx.send(()).unwrap();
        go_rx.recv().unwrap();
    }));
    let mut model = Live::default();
    let mut during = Vec::new();
    // Write until a round is inside a compaction (new file written, not renamed).
    // The write that finds it there cannot become durable until the compaction ends.
    for i in 0.. {
        assert!(i < 10_000, "no compaction started");
        let record = set_offset("g", "t", i % 3, i64::from(i));
        let mut pending = store.write(vec![record.clone()]);
        let entered = loop {
            if entered_rx.try_recv().is_ok() {
                break true;
            }
            if let Some(result) = (&mut pending).now_or_never() {
                result.unwrap();
                break false;
            }
            std::thread::sleep(Duration::from_micros(100));
        };
        if entered {
            during.push((record, pending));
            break;
        }
        model.apply(record);
    }
    during.extend((0..20).map(|j| {
        let record = set_offset("during", "t", j, i64::from(j));
        (record.clone(), store.write(vec![record]))
    }));
    go_tx.send(()).unwrap();
    for (record, pending) in during {
        model.apply(record);
        block_on(pending).unwrap();
    }
    let record = set_offset("after", "t", 0, 1);
    model.apply(record.clone());
    write_ok(&store, vec![record]);
    assert!(store.compactions() >= 1);
    store.close();
    let recovered = reopen(tmp.path());
    assert_eq!(recovered.offsets["during"].len(), 20);
    assert_eq!(state_of(&recovered), model);
}

#[test]
fn failed_compaction_keeps_the_old_file() {
    let tmp = tempfile::tempdir().unwrap();
    let (store, _) = GroupStore::open_with(tmp.path(), 1024).unwrap();
    // A directory where the compacted file would go: creating it fails.
    let blocker = tmp.path().join(DIR_NAME).join(TMP_NAME);
    fs::create_dir(&blocker).unwrap();
    fs::write(blocker.join("keep"), b"x").unwrap();
    let mut model = Live::default();
    for i in 0..100 {
        let record = set_offset("g", "t", i % 2, i64::from(i));
        model.apply(record.clone());
        write_ok(&store, vec![record]);
    }
    assert_eq!(store.compactions(), 0);
    assert!(file_len(tmp.path()) > 2048, "the file kept growing");
    store.close();
    fs::remove_dir_all(&blocker).unwrap();
    assert_eq!(state_of(&reopen(tmp.path())), model);
}

#[test]
fn leftover_tmp_is_deleted_at_open() {
    let tmp = tempfile::tempdir().unwrap();
    write_each(tmp.path(), vec![vec![set_offset("g", "t", 0, 1)]]);
    let leftover = tmp.path().join(DIR_NAME).join(TMP_NAME);
    fs::write(&leftover, b"half a compaction").unwrap();
    let recovered = reopen(tmp.path());
    assert!(!leftover.exists());
    assert_eq!(recovered.offsets["g"].len(), 1);
}

#[test]
fn writes_after_close_fail() {
    let tmp = tempfile::tempdir().unwrap();
    let (store, _) = GroupStore::open(tmp.path()).unwrap();
    store.set_paused(true);
    let queued = store.write(vec![set_offset("g", "t", 0, 1)]);
    // close flushes what was queued, even while the thread was held.
    store.close();
    block_on(queued).expect("queued before close: durable");
    let late = block_on(store.write(vec![set_offset("g", "t", 0, 2)]));
    assert!(matches!(late, Err(StoreError::Failed(_))), "{late:?}");
    store.close(); // twice is fine
    drop(store);
    assert_eq!(
        reopen(tmp.path()).offsets["g"][&("t".to_string(), 0)],
        committed(1)
    );
}

#[test]
fn drop_without_close_then_reopen() {
    let tmp = tempfile::tempdir().unwrap();
    let (store, _) = GroupStore::open(tmp.path()).unwrap();
    write_ok(&store, vec![set_group("g", json!({"a": 1}))]);
    let unawaited = store.write(vec![set_offset("g", "t", 0, 1)]);
    drop(store);
    block_on(unawaited).expect("drop flushes what was queued");
    let recovered = reopen(tmp.path());
    assert_eq!(recovered.groups["g"], json!({"a": 1}));
    assert_eq!(recovered.offsets["g"].len(), 1);
}

#[test]
fn io_failure_fails_queued_and_later_writes() {
    let tmp = tempfile::tempdir().unwrap();
    let (store, _) = GroupStore::open(tmp.path()).unwrap();
    write_ok(&store, vec![set_offset("g", "t", 0, 1)]);
    store.set_paused(true);
    let a = store.write(vec![set_offset("g", "t", 0, 2)]);
    let b = store.write(vec![set_offset("g", "t", 1, 2)]);
    {
        let mut st = store.shared.lock();
        st.hooks.fail_next_round = true;
        st.hooks.paused = false;
    }
    store.kick();
    for p in [a, b] {
        let result = block_on(p);
        assert!(
            matches!(&result, Err(StoreError::Failed(m)) if m.contains("injected")),
            "{result:?}"
        );
    }
    let later = block_on(store.write(vec![set_offset("g", "t", 2, 2)]));
    assert!(matches!(later, Err(StoreError::Failed(_))), "{later:?}");
    store.close();
    let recovered = reopen(tmp.path());
    assert_eq!(
        recovered.offsets["g"].len(),
        1,
        "nothing failed was written"
    );
    assert_eq!(recovered.offsets["g"][&("t".to_string(), 0)], committed(1));
}

#[test]
fn a_full_disk_fails_that_round_only_and_writes_succeed_again_when_space_returns() {
    let tmp = tempfile::tempdir().unwrap();
    let space = DataDirSpace::for_dir(tmp.path());
    let (store, _) = GroupStore::open(tmp.path()).unwrap();
    write_ok(&store, vec![set_offset("g", "t", 0, 1)]);
    let len = file_len(tmp.path());
    let errors_before = space.no_space_errors();
    // Room for a few bytes only: the round's frame lands partly, then ENOSPC.
    store.shared.lock().hooks.room_bytes = Some(5);
    for offset in [2, 3] {
        let result = block_on(store.write(vec![set_offset("g", "t", 0, offset)]));
        assert!(
            matches!(&result, Err(StoreError::NoSpace(m)) if m.contains("data directory is full")),
            "{result:?}"
        );
        assert_eq!(file_len(tmp.path()), len, "the partial frame was cut off");
    }
    assert_eq!(space.no_space_errors(), errors_before + 2);
    // Space returns: the store was never failed, the next commit is durable.
    store.shared.lock().hooks.room_bytes = None;
    write_ok(
        &store,
        vec![set_offset("g", "t", 0, 4), set_offset("g", "t", 1, 9)],
    );
    assert!(!space.is_full(), "a written round clears the full state");
    store.close();
    let recovered = reopen(tmp.path());
    assert_eq!(recovered.truncated_bytes, 0, "nothing torn was left behind");
    assert_eq!(recovered.offsets["g"][&("t".to_string(), 0)], committed(4));
    assert_eq!(recovered.offsets["g"][&("t".to_string(), 1)], committed(9));
}

// -----------------------------------------------------------------------------------------
// The store on a shared committer: its rounds are scheduled like a partition's.
// -----------------------------------------------------------------------------------------

fn one_record_batch(value: &[u8]) -> Vec<u8> {
    use sluice_log::batch::build::{Record, batch};
    batch(
        1_700_000_000_000,
        &[Record {
            timestamp_delta: 0,
            key: None,
            value: Some(value),
        }],
    )
}

#[test]
fn a_write_is_acknowledged_only_after_the_fdatasync_of_its_round() {
    let tmp = tempfile::tempdir().unwrap();
    // An interval policy holds every round until the next tick: the write is queued, not
    // durable, and must not resolve before its round's fdatasync.
    let interval_ms = 300;
    let committer = GroupCommitter::start(CommitConfig {
        policy: FlushPolicy::IntervalMs(interval_ms),
        sync_threads: 1,
    });
    let (store, _) = GroupStore::open_with_committer(tmp.path(), &committer, None).unwrap();
    let len = file_len(tmp.path());
    // Wait for a tick to pass, so the write lands at the start of an interval.
    std::thread::sleep(Duration::from_millis(interval_ms + 20));
    block_on(store.write(Vec::new())).unwrap();
    let syncs = store.syncs();
    let fdatasyncs = committer.stats().fdatasyncs;
    let started = Instant::now();
    let mut pending = store.write(vec![set_offset("g", "t", 0, 1)]);
    std::thread::sleep(Duration::from_millis(50));
    if started.elapsed() < Duration::from_millis(interval_ms / 2) {
        assert!(
            (&mut pending).now_or_never().is_none(),
            "resolved before any round ran"
        );
        assert_eq!(store.syncs(), syncs);
        assert_eq!(file_len(tmp.path()), len, "not even written yet");
    }
    block_on(pending).unwrap();
    assert_eq!(
        store.syncs(),
        syncs + 1,
        "resolved by exactly one fdatasync"
    );
    assert_eq!(
        committer.stats().fdatasyncs,
        fdatasyncs + 1,
        "the committer counted the store's fdatasync"
    );
    assert!(file_len(tmp.path()) > len);
    store.close();
    committer.shutdown();
    assert_eq!(reopen(tmp.path()).offsets["g"].len(), 1);
}

#[test]
fn a_partition_and_the_store_share_one_committer() {
    let tmp = tempfile::tempdir().unwrap();
    let committer = GroupCommitter::start(CommitConfig {
        policy: FlushPolicy::Always,
        sync_threads: 1,
    });
    let log = sluice_log::PartitionLog::open(
        tmp.path().join("t-0"),
        sluice_log::LogConfig::default(),
        &committer,
        Arc::new(sluice_log::SystemClock),
    )
    .unwrap();
    let (store, _) = GroupStore::open_with_committer(tmp.path(), &committer, None).unwrap();
    let store = Arc::new(store);
    // Appends and commits interleave on the one sync thread.
    let writer = {
        let store = Arc::clone(&store);
        std::thread::spawn(move || {
            for i in 0..100 {
                write_ok(&store, vec![set_offset("g", "t", 0, i)]);
            }
        })
    };
    let mut last = None;
    for i in 0..100 {
        let appended = log.append(&one_record_batch(&[i])).unwrap();
        last = Some(appended.wait_durable().unwrap());
    }
    writer.join().unwrap();
    assert_eq!(log.high_watermark(), last.unwrap().last_offset + 1);
    let stats = committer.stats();
    assert!(
        stats.fdatasyncs > store.syncs(),
        "the committer counted both: {} fdatasyncs, {} of them the store's",
        stats.fdatasyncs,
        store.syncs()
    );

    // The committer shuts down first (as in the broker): rounds then run in the writer.
    committer.shutdown();
    write_ok(&store, vec![set_offset("g", "t", 0, 1000)]);
    let appended = log.append(&one_record_batch(b"late")).unwrap();
    assert!(appended.is_durable(), "synced inline");
    store.close();
    log.close().unwrap();
    assert_eq!(
        reopen(tmp.path()).offsets["g"][&("t".to_string(), 0)],
        committed(1000)
    );
}

#[test]
fn a_panicking_round_fails_the_store_but_not_the_shared_sync_thread() {
    let tmp = tempfile::tempdir().unwrap();
    let committer = GroupCommitter::start(CommitConfig {
        policy: FlushPolicy::Always,
        sync_threads: 1,
    });
    let log = sluice_log::PartitionLog::open(
        tmp.path().join("t-0"),
        sluice_log::LogConfig::default(),
        &committer,
        Arc::new(sluice_log::SystemClock),
    )
    .unwrap();
    let (store, _) = GroupStore::open_with_committer(tmp.path(), &committer, None).unwrap();
    write_ok(&store, vec![set_offset("g", "t", 0, 1)]);
    store.shared.lock().hooks.panic_next_round = true;
    let result = block_on(store.write(vec![set_offset("g", "t", 0, 2)]));
    assert!(
        matches!(&result, Err(StoreError::Failed(m)) if m.contains("panicked")),
        "{result:?}"
    );
    let later = block_on(store.write(vec![set_offset("g", "t", 0, 3)]));
    assert!(matches!(later, Err(StoreError::Failed(_))), "{later:?}");
    // The only sync thread still serves the partition.
    let appended = log.append(&one_record_batch(b"x")).unwrap();
    let (durable_tx, durable_rx) = mpsc::channel();
    std::thread::spawn(move || {
        let _ = durable_tx.send(appended.wait_durable().is_ok());
    });
    assert_eq!(
        durable_rx.recv_timeout(Duration::from_secs(10)),
        Ok(true),
        "the append became durable"
    );
    store.close();
    log.close().unwrap();
    committer.shutdown();
    assert_eq!(
        reopen(tmp.path()).offsets["g"][&("t".to_string(), 0)],
        committed(1)
    );
}

// -----------------------------------------------------------------------------------------
// Crash test: the child is this test binary run again with `--exact` on `crash_child_writer`
// and `SLUICE_GROUPS_CRASH_DIR` set (without it the child test is a no-op). Its writer
// threads write offsets and snapshots and print each write that became durable; the parent
// SIGKILLs it after a short random delay, reopens the store and checks that everything
// reported durable (in this round or earlier ones) is there. A small compaction threshold
// makes kills land in compactions too.
// -----------------------------------------------------------------------------------------

const CHILD_TEST: &str = "store::tests::crash_child_writer";
const CHILD_DIR_ENV: &str = "SLUICE_GROUPS_CRASH_DIR";
const CHILD_GENERATION_ENV: &str = "SLUICE_GROUPS_CRASH_GENERATION";
const CRASH_ROUNDS: i64 = 5;
const CHILD_WRITERS: i64 = 3;
/// Partitions each writer cycles through, so keys are overwritten and compaction has work.
const CHILD_PARTITIONS: i64 = 40;
/// Offsets of generation `n` start at `n * GENERATION_STRIDE`, so they grow across rounds.
const GENERATION_STRIDE: i64 = 1_000_000_000;
const CHILD_LIFETIME_MAX: Duration = Duration::from_secs(30);

#[test]
fn crash_child_writer() {
    let Some(dir) = std::env::var_os(CHILD_DIR_ENV) else {
        return;
    };
    let generation: i64 = std::env::var(CHILD_GENERATION_ENV)
        .expect("generation is set")
        .parse()
        .expect("generation parses");
    let (store, _) = GroupStore::open_with(Path::new(&dir), 8 * 1024).expect("child open");
    let store = Arc::new(store);
    let report = |line: String| {
        let mut out = io::stdout().lock();
        out.write_all(line.as_bytes()).expect("stdout");
        out.flush().expect("stdout");
    };
    report("\nopen\n".into());
    let started = Instant::now();
    let writers: Vec<_> = (0..CHILD_WRITERS)
        .map(|w| {
            let store = Arc::clone(&store);
            std::thread::spawn(move || {
                let mut seq = 0;
                while started.elapsed() < CHILD_LIFETIME_MAX {
                    let offset = generation * GENERATION_STRIDE + seq;
                    let partition = (seq % CHILD_PARTITIONS) as i32;
                    let group = format!("g{w}");
                    let mut records = vec![set_offset(&group, "t", partition, offset)];
                    let snapshot = seq % 7 == 0;
                    if snapshot {
                        records.push(set_group(&group, json!({ "offset": offset })));
                    }
                    block_on(store.write(records)).expect("child write");
                    report(format!(
                        "durable {w} {partition} {offset} {}\n",
                        u8::from(snapshot)
                    ));
                    seq += 1;
                }
            })
        })
        .collect();
    writers.into_iter().for_each(|t| t.join().unwrap());
}

fn pseudo_random_ms(range: std::ops::Range<u64>) -> u64 {
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .subsec_nanos();
    range.start + u64::from(nanos) % (range.end - range.start)
}

#[test]
fn crash_kill_and_reopen() {
    if std::env::var_os(CHILD_DIR_ENV).is_some() {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    // Highest offset reported durable per (writer, partition), and per writer's snapshot.
    let mut offsets: HashMap<(i64, i32), i64> = HashMap::new();
    let mut snapshots: HashMap<i64, i64> = HashMap::new();
    let mut reported = 0;
    for generation in 1..=CRASH_ROUNDS {
        let mut child = Command::new(std::env::current_exe().unwrap())
            .args(["--exact", CHILD_TEST, "--nocapture", "--test-threads=1"])
            .env(CHILD_DIR_ENV, tmp.path())
            .env(CHILD_GENERATION_ENV, generation.to_string())
            .stdout(Stdio::piped())
            .spawn()
            .expect("spawn child");
        let stdout = child.stdout.take().unwrap();
        let (lines_tx, lines_rx) = mpsc::channel();
        let reader = std::thread::spawn(move || {
            for line in io::BufReader::new(stdout).lines().map_while(Result::ok) {
                if lines_tx.send(line).is_err() {
                    break;
                }
            }
        });
        let deadline = Instant::now() + Duration::from_secs(30);
        let mut lines = Vec::new();
        loop {
            let line = lines_rx
                .recv_timeout(deadline.saturating_duration_since(Instant::now()))
                .expect("child opened the store");
            if line == "open" {
                break;
            }
            lines.push(line);
        }
        std::thread::sleep(Duration::from_millis(pseudo_random_ms(20..400)));
        child.kill().unwrap();
        child.wait().unwrap();
        reader.join().unwrap();
        lines.extend(lines_rx.try_iter());

        for line in lines {
            let Some(rest) = line.strip_prefix("durable ") else {
                continue;
            };
            let fields: Vec<i64> = rest.split(' ').map(|f| f.parse().unwrap()).collect();
            let [w, partition, offset, snapshot] = fields[..] else {
                panic!("bad line {line:?}");
            };
            let best = offsets.entry((w, partition as i32)).or_insert(offset);
            *best = (*best).max(offset);
            if snapshot == 1 {
                let best = snapshots.entry(w).or_insert(offset);
                *best = (*best).max(offset);
            }
            reported += 1;
        }

        let (store, recovered) = GroupStore::open(tmp.path()).expect("reopen after kill");
        for (&(w, partition), &offset) in &offsets {
            let found = recovered
                .offsets
                .get(&format!("g{w}"))
                .and_then(|o| o.get(&("t".to_string(), partition)))
                .unwrap_or_else(|| panic!("g{w} t-{partition} lost (durable at {offset})"));
            assert!(
                found.offset >= offset,
                "g{w} t-{partition}: {} after {offset} was durable",
                found.offset
            );
            assert_eq!(found.offset % CHILD_PARTITIONS, i64::from(partition));
            assert_eq!(found, &committed(found.offset));
        }
        for (&w, &offset) in &snapshots {
            let found = recovered.groups[&format!("g{w}")]["offset"]
                .as_i64()
                .unwrap();
            assert!(found >= offset, "g{w} snapshot {found} after {offset}");
        }
        if generation % 2 == 0 {
            store.close();
        } else {
            drop(store);
        }
    }
    assert!(reported >= 20, "children made little progress: {reported}");
}

/// A journal of metadata file changes whose `durable()` waits for a gate, then fails while
/// `fail` is set (the object store's, in object-storage mode).
#[derive(Debug)]
struct FakeJournal {
    changes: Mutex<Vec<FileChange>>,
    gate: tokio::sync::watch::Sender<bool>,
    fail: Arc<std::sync::atomic::AtomicBool>,
}

impl FakeJournal {
    fn new() -> Arc<FakeJournal> {
        Arc::new(FakeJournal {
            changes: Default::default(),
            gate: tokio::sync::watch::channel(true).0,
            fail: Default::default(),
        })
    }

    fn changes(&self) -> Vec<FileChange> {
        self.changes.lock().unwrap().clone()
    }

    /// The file the changes make, applied in order from nothing.
    fn replayed(&self) -> Vec<u8> {
        let mut file = Vec::new();
        for change in self.changes() {
            match change {
                FileChange::Write { path, contents } => {
                    assert_eq!(path, "groups/groups.log");
                    file = contents;
                }
                FileChange::Append { path, bytes } => {
                    assert_eq!(path, "groups/groups.log");
                    file.extend_from_slice(&bytes);
                }
                FileChange::Remove { path } => panic!("removed {path}"),
            }
        }
        file
    }
}

impl sluice_storage::MetaJournal for FakeJournal {
    fn record(&self, change: FileChange) -> Result<(), sluice_storage::StorageError> {
        self.changes.lock().unwrap().push(change);
        Ok(())
    }

    fn durable(
        &self,
    ) -> futures::future::BoxFuture<'static, Result<(), sluice_storage::StorageError>> {
        let mut gate = self.gate.subscribe();
        let fail = Arc::clone(&self.fail);
        async move {
            let _ = gate.wait_for(|open| *open).await;
            if fail.load(Ordering::SeqCst) {
                Err(sluice_storage::StorageError::Io {
                    op: "put",
                    path: "objects/3".into(),
                    source: io::Error::other("bucket unreachable"),
                })
            } else {
                Ok(())
            }
        }
        .boxed()
    }
}

fn open_journaled(
    dir: &Path,
    journal: &Arc<FakeJournal>,
    committer: &GroupCommitter,
) -> GroupStore {
    let journal: Arc<dyn sluice_storage::MetaJournal> = journal.clone();
    GroupStore::open_with_committer(dir, committer, Some(journal))
        .unwrap()
        .0
}

#[test]
fn a_round_is_journaled_and_resolves_once_the_journal_is_durable() {
    let tmp = tempfile::tempdir().unwrap();
    let committer = GroupCommitter::start(CommitConfig::default());
    let journal = FakeJournal::new();
    let store = open_journaled(tmp.path(), &journal, &committer);
    journal.gate.send_replace(false);
    let mut pending = store.write(vec![set_offset("g", "t", 0, 5)]);
    let started = Instant::now();
    while journal.changes().is_empty() {
        assert!(started.elapsed() < Duration::from_secs(10), "no round ran");
        std::thread::sleep(Duration::from_millis(5));
    }
    // Written and fdatasynced locally, recorded, but not durable in the journal yet.
    std::thread::sleep(Duration::from_millis(100));
    assert!((&mut pending).now_or_never().is_none(), "resolved early");
    journal.gate.send_replace(true);
    block_on(pending).unwrap();
    // One write of two records, then a barrier (records nothing).
    write_ok(
        &store,
        vec![set_offset("g", "t", 1, 6), set_group("g", json!({"a": 1}))],
    );
    write_ok(&store, Vec::new());
    let changes = journal.changes();
    assert_eq!(changes.len(), 2, "{changes:?}");
    assert!(
        changes
            .iter()
            .all(|c| matches!(c, FileChange::Append { .. }))
    );
    assert_eq!(journal.replayed(), fs::read(log_path(tmp.path())).unwrap());
    store.close();
    committer.shutdown();
}

#[test]
fn a_failed_journal_refuses_the_round_and_the_store_carries_on() {
    let tmp = tempfile::tempdir().unwrap();
    let committer = GroupCommitter::start(CommitConfig::default());
    let journal = FakeJournal::new();
    let store = open_journaled(tmp.path(), &journal, &committer);
    write_ok(&store, vec![set_offset("g", "t", 0, 1)]);
    journal.fail.store(true, Ordering::SeqCst);
    let refused = block_on(store.write(vec![set_offset("g", "t", 0, 2)])).unwrap_err();
    assert!(matches!(&refused, StoreError::NotDurable(m) if m.contains("bucket unreachable")));
    assert!(
        refused.to_string().contains("could not be made durable"),
        "{refused}"
    );
    let code = crate::GroupError::from(refused).code();
    assert_eq!(
        code,
        sluice_protocol::kafka_protocol::ResponseError::NotCoordinator.code()
    );
    // Not failed for good: the bucket comes back and the same write succeeds.
    journal.fail.store(false, Ordering::SeqCst);
    write_ok(&store, vec![set_offset("g", "t", 0, 2)]);
    assert_eq!(journal.replayed(), fs::read(log_path(tmp.path())).unwrap());
    store.close();
    committer.shutdown();
}

#[test]
fn a_compaction_is_journaled_as_the_whole_new_file() {
    let tmp = tempfile::tempdir().unwrap();
    let committer = GroupCommitter::start(CommitConfig::default());
    let journal = FakeJournal::new();
    let dyn_journal: Arc<dyn sluice_storage::MetaJournal> = journal.clone();
    let options = StoreOptions {
        journal: Some(dyn_journal),
        compact_min_bytes: 4096,
        ..StoreOptions::default()
    };
    let (store, _) = GroupStore::open_with_options(tmp.path(), Some(&committer), options).unwrap();
    for i in 0..300 {
        write_ok(&store, vec![set_offset("g", "t", i % 5, i64::from(i))]);
    }
    assert!(store.compactions() > 0);
    let writes = journal
        .changes()
        .into_iter()
        .filter(|c| matches!(c, FileChange::Write { .. }))
        .count();
    assert_eq!(writes as u64, store.compactions());
    // Replaying the journal gives the file as it is, byte for byte.
    assert_eq!(journal.replayed(), fs::read(log_path(tmp.path())).unwrap());
    store.close();
    committer.shutdown();
}
