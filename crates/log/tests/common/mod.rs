//! Helpers shared by the log's integration tests.
#![allow(dead_code)]

pub mod keyed;

use std::path::Path;
use std::sync::Arc;

use sluice_log::batch::BatchView;
use sluice_log::batch::build::{Record, batch};
use sluice_log::{CommitConfig, FlushPolicy, GroupCommitter, LogConfig, ManualClock, PartitionLog};

/// A batch of `count` records of `value_len` bytes each, timestamps `ts, ts+1, ...`.
/// Values encode `tag` so batches can be told apart.
pub fn make_batch(tag: u32, count: usize, value_len: usize, ts: i64) -> Vec<u8> {
    let values: Vec<Vec<u8>> = (0..count)
        .map(|i| {
            let mut v = format!("{tag}:{i}:").into_bytes();
            v.resize(value_len.max(v.len()), b'x');
            v
        })
        .collect();
    let records: Vec<Record<'_>> = values
        .iter()
        .enumerate()
        .map(|(i, v)| Record {
            timestamp_delta: i as i64,
            key: None,
            value: Some(v),
        })
        .collect();
    batch(ts, &records)
}

pub fn committer() -> GroupCommitter {
    GroupCommitter::start(CommitConfig::default())
}

pub fn committer_with(policy: FlushPolicy) -> GroupCommitter {
    GroupCommitter::start(CommitConfig {
        policy,
        sync_threads: 2,
    })
}

pub fn small_config() -> LogConfig {
    LogConfig {
        segment_bytes: 16 * 1024,
        index_interval_bytes: 256,
        ..LogConfig::default()
    }
}

pub fn open(
    dir: &Path,
    config: LogConfig,
    c: &GroupCommitter,
    clock: &ManualClock,
) -> PartitionLog {
    PartitionLog::open(dir, config, c, Arc::new(clock.clone())).expect("open log")
}

/// Splits concatenated batches into (base offset, bytes after the base offset).
pub fn split_batches(mut data: &[u8]) -> Vec<(i64, Vec<u8>)> {
    let mut out = Vec::new();
    while !data.is_empty() {
        let view = BatchView::parse_checked(data).expect("valid batch in read result");
        out.push((view.base_offset(), view.bytes()[8..].to_vec()));
        data = &data[view.len()..];
    }
    out
}

/// Reads everything from `from` to the high watermark.
pub fn read_all(log: &PartitionLog, from: i64, max_bytes: usize) -> Vec<(i64, Vec<u8>)> {
    let mut out = Vec::new();
    let mut offset = from;
    loop {
        let r = log.read(offset, max_bytes).expect("read");
        if r.records.is_empty() {
            break;
        }
        for (base, rest) in split_batches(&r.records) {
            let view_last = {
                let mut full = base.to_be_bytes().to_vec();
                full.extend_from_slice(&rest);
                BatchView::parse(&full).unwrap().last_offset()
            };
            offset = view_last + 1;
            out.push((base, rest));
        }
    }
    out
}
