//! Keyed records for the compaction tests: building batches of them (optionally from an
//! idempotent producer) and reading them back from stored (possibly compacted) batches.

use sluice_batch::{BatchBuilder, RecordRef};
use sluice_log::PartitionLog;
use sluice_log::batch::BatchView;

/// One record as the test writes and reads it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rec {
    pub key: Option<Vec<u8>>,
    pub value: Option<Vec<u8>>,
}

pub fn rec(key: Option<&str>, value: Option<&str>) -> Rec {
    Rec {
        key: key.map(|k| k.as_bytes().to_vec()),
        value: value.map(|v| v.as_bytes().to_vec()),
    }
}

/// A batch builder holding `records`, timestamps `ts, ts+1, ...`, writing into `out`.
pub fn builder<'a>(out: &'a mut Vec<u8>, records: &[Rec], ts: i64) -> BatchBuilder<'a, Vec<u8>> {
    let mut b = BatchBuilder::with_base_timestamp(out, ts);
    for (i, r) in records.iter().enumerate() {
        b.push(&RecordRef {
            key: r.key.as_deref(),
            value: r.value.as_deref(),
            headers: &[],
            timestamp_ms: ts + i as i64,
        });
    }
    b
}

/// A batch of `records`, timestamps `ts, ts+1, ...`, optionally from an idempotent producer.
pub fn batch(records: &[Rec], ts: i64, producer: Option<(i64, i16, i32)>) -> Vec<u8> {
    let mut out = Vec::new();
    let mut b = builder(&mut out, records, ts);
    if let Some((id, epoch, seq)) = producer {
        b = b.with_producer(id, epoch, seq);
    }
    b.finish();
    out
}

pub fn varint(buf: &[u8]) -> (i64, usize) {
    let mut raw = 0u64;
    for (i, &b) in buf.iter().enumerate() {
        raw |= u64::from(b & 0x7f) << (7 * i);
        if b & 0x80 == 0 {
            return (((raw >> 1) as i64) ^ -((raw & 1) as i64), i + 1);
        }
    }
    panic!("bad varint");
}

/// The records of one stored batch: (offset, timestamp, record).
pub fn records_of(view: &BatchView<'_>) -> Vec<(i64, i64, Rec)> {
    let mut out = Vec::new();
    let mut buf = &view.bytes()[61..];
    for _ in 0..view.record_count() {
        let (len, n) = varint(buf);
        let body = &buf[n..n + len as usize];
        let mut at = 1;
        let (ts, k) = varint(&body[at..]);
        at += k;
        let (od, k) = varint(&body[at..]);
        at += k;
        let (kl, k) = varint(&body[at..]);
        at += k;
        let key = (kl >= 0).then(|| body[at..at + kl as usize].to_vec());
        at += kl.max(0) as usize;
        let (vl, k) = varint(&body[at..]);
        at += k;
        let value = (vl >= 0).then(|| body[at..at + vl as usize].to_vec());
        out.push((
            view.base_offset() + od,
            view.base_timestamp() + ts,
            Rec { key, value },
        ));
        buf = &buf[n + len as usize..];
    }
    out
}

/// Every stored batch from the log start to the high watermark (empty ones included).
pub fn read_batches(log: &PartitionLog) -> Vec<Vec<u8>> {
    let mut out = Vec::new();
    let mut offset = log.log_start_offset();
    loop {
        let r = log.read(offset, 64 * 1024).expect("read");
        if r.records.is_empty() {
            return out;
        }
        let mut data = &r.records[..];
        while !data.is_empty() {
            let view = BatchView::parse_stored_checked(data).expect("a valid stored batch");
            offset = view.last_offset() + 1;
            out.push(view.bytes().to_vec());
            data = &data[view.len()..];
        }
    }
}

pub fn read_records(log: &PartitionLog) -> Vec<(i64, Rec)> {
    read_batches(log)
        .iter()
        .flat_map(|b| records_of(&BatchView::parse_stored(b).unwrap()))
        .map(|(o, _, r)| (o, r))
        .collect()
}
