//! Records inside a batch (its records section, decompressed if the batch is compressed), the
//! key → offset map, and rewriting a batch without the records a compaction removes.
//!
//! A record (Kafka's record format v2, inside a batch): `length: varint`, then `attributes:
//! i8`, `timestamp delta: varlong`, `offset delta: varint`, `key length: varint` (-1: null),
//! key, `value length: varint` (-1: null, a tombstone), value, headers. Only the length, the
//! two deltas, the key and whether the value is null are read; everything else is copied as
//! it is.

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, DefaultHasher, Hasher};

use sluice_batch::varint::{put_varint, put_varlong, varint_len, varlong_len};

use super::{Codecs, DECOMPRESSED_MAX_BYTES};
use crate::batch::{BatchView, HEADER_BYTES, attributes, header, read_varint};

/// One record of a batch, as found in its bytes.
#[derive(Debug, Clone, Copy)]
pub(crate) struct RecordAt {
    /// Where the record starts (its length prefix) and ends, within the batch's records.
    pub start: usize,
    pub end: usize,
    /// Where the bytes after the timestamp delta start (the offset delta and what follows).
    pub after_timestamp: usize,
    pub attributes: u8,
    pub timestamp_delta: i64,
    pub offset_delta: i32,
    /// The key's position, if the key is not null.
    pub key: Option<(usize, usize)>,
    pub tombstone: bool,
}

/// Parses every record of a batch into `out` (cleared first): `records` is the batch's records
/// section, decompressed if the batch is compressed. `Err` names what is malformed: the
/// batch's CRC held, so the producer wrote it that way.
pub(crate) fn parse_records(
    view: &BatchView<'_>,
    records: &[u8],
    out: &mut Vec<RecordAt>,
) -> Result<(), String> {
    out.clear();
    let mut pos = 0usize;
    for i in 0..view.record_count() {
        let bad = |what: &str| {
            format!(
                "record {i} of the batch at offset {}: {what}",
                view.base_offset()
            )
        };
        let (len, n) = read_varint(&records[pos..]).ok_or_else(|| bad("bad length"))?;
        let len = usize::try_from(len).map_err(|_| bad("negative length"))?;
        let start = pos;
        let body_at = pos + n;
        let end = body_at
            .checked_add(len)
            .filter(|&e| e <= records.len())
            .ok_or_else(|| bad("runs past the batch"))?;
        let body = &records[body_at..end];
        let attributes = *body.first().ok_or_else(|| bad("empty"))?;
        let mut at = 1usize;
        let next = |at: &mut usize, what: &str| -> Result<i64, String> {
            let (v, used) =
                read_varint(body.get(*at..).unwrap_or_default()).ok_or_else(|| bad(what))?;
            *at += used;
            Ok(v)
        };
        let timestamp_delta = next(&mut at, "bad timestamp delta")?;
        let after_timestamp = body_at + at;
        let offset_delta = i32::try_from(next(&mut at, "bad offset delta")?)
            .map_err(|_| bad("offset delta out of range"))?;
        let key_len = next(&mut at, "bad key length")?;
        let key = if key_len < 0 {
            None
        } else {
            let k_start = body_at + at;
            let k_end = k_start.saturating_add(key_len as usize);
            if k_end > end {
                return Err(bad("key runs past the record"));
            }
            at += key_len as usize;
            Some((k_start, k_end))
        };
        let value_len = next(&mut at, "bad value length")?;
        if value_len > 0 && (body_at + at).saturating_add(value_len as usize) > end {
            return Err(bad("value runs past the record"));
        }
        out.push(RecordAt {
            start,
            end,
            after_timestamp,
            attributes,
            timestamp_delta,
            offset_delta,
            key,
            tombstone: value_len < 0,
        });
        pos = end;
    }
    if pos != records.len() {
        return Err(format!(
            "the batch at offset {} has {} bytes after its {} records",
            view.base_offset(),
            records.len() - pos,
            view.record_count()
        ));
    }
    Ok(())
}

/// Whether a batch's records can be read and rewritten by the cleaner. Transactional and
/// control batches are kept whole (aborted transactions are not tracked here; see the module
/// doc), and so are compressed ones when the cleaner has no codecs.
pub(crate) fn is_opaque(view: &BatchView<'_>, codecs: Codecs) -> bool {
    view.is_transactional()
        || view.is_control()
        || (view.compression() != 0 && codecs.get().is_none())
}

/// The records section of a readable batch: its own bytes, or for a compressed batch the
/// section decompressed into `plain`. `Err`: the batch cannot be decompressed (the reason).
pub(crate) fn section<'b>(
    view: &'b BatchView<'_>,
    codecs: Codecs,
    plain: &'b mut Vec<u8>,
) -> Result<&'b [u8], String> {
    let body = &view.bytes()[HEADER_BYTES..];
    let codec = i16::from(view.compression());
    if codec == 0 {
        return Ok(body);
    }
    let codecs = codecs
        .get()
        .ok_or_else(|| "the cleaner has no codecs".to_owned())?;
    *plain = codecs.decompress(codec, body, DECOMPRESSED_MAX_BYTES)?;
    Ok(plain)
}

/// A 128-bit hash of a key: the map stores this, not the key, so its memory per entry is fixed
/// whatever the key size (Kafka stores an MD5 digest for the same reason). Two keys colliding
/// would make the cleaner drop the older one's latest value; at 128 bits that takes some 2^64
/// keys. The hashes are only ever compared within one process (the map is not persisted).
pub(crate) fn key_hash(key: &[u8]) -> u128 {
    let mut a = DefaultHasher::new();
    a.write(key);
    let mut b = DefaultHasher::new();
    b.write_u8(0x5a);
    b.write(key);
    (u128::from(a.finish()) << 64) | u128::from(b.finish())
}

/// Bytes one map entry is accounted at against the dedupe buffer: a bucket holds the 16-byte
/// key hash, the 8-byte offset and a control byte (25 bytes); the table has up to 8/7 buckets
/// per entry at full load, and twice that right after it doubles: 57, rounded up.
pub(crate) const MAP_ENTRY_BYTES: u64 = 64;

/// The key hash is already uniform: the map uses its low 64 bits as the table's hash.
#[derive(Default)]
pub(crate) struct PassThrough(u64);

impl Hasher for PassThrough {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = self.0.rotate_left(8) ^ u64::from(b);
        }
    }
    fn write_u128(&mut self, n: u128) {
        self.0 = n as u64;
    }
}

/// Key hash → offset of the key's latest record in the mapped range, bounded by a memory
/// limit (`CleanerLimits::dedupe_buffer_bytes`).
#[derive(Debug)]
pub(crate) struct OffsetMap {
    map: HashMap<u128, i64, BuildHasherDefault<PassThrough>>,
    max_entries: usize,
}

impl OffsetMap {
    pub fn new(memory_bytes: u64) -> OffsetMap {
        OffsetMap {
            map: HashMap::default(),
            max_entries: usize::try_from(memory_bytes / MAP_ENTRY_BYTES).unwrap_or(usize::MAX),
        }
    }

    /// Records `offset` as the latest of `key`; `false` (nothing changed) if the key is new and
    /// the map is full.
    pub fn put(&mut self, key: &[u8], offset: i64) -> bool {
        let hash = key_hash(key);
        if let Some(latest) = self.map.get_mut(&hash) {
            *latest = (*latest).max(offset);
            return true;
        }
        if self.map.len() >= self.max_entries {
            return false;
        }
        self.map.insert(hash, offset);
        true
    }

    pub fn latest(&self, key: &[u8]) -> Option<i64> {
        self.map.get(&key_hash(key)).copied()
    }

    pub fn len(&self) -> usize {
        self.map.len()
    }
}

/// What the cleaner knows when it filters one batch.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Filter {
    pub now_ms: i64,
    pub delete_retention_ms: i64,
    /// No batch the cleaner cannot read comes before this one: a tombstone may go once its
    /// delete horizon has passed (a value of its key hidden in an earlier compressed batch would
    /// otherwise come back).
    pub tombstones_removable: bool,
    /// This is its producer's last batch: if every record goes, a header with no records stays,
    /// so the producer's last sequence and epoch are still in the log.
    pub keep_if_emptied: bool,
}

/// What filtering did to one batch.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Filtered {
    /// The batch was written to the output unchanged (or, if `dropped`, not at all).
    pub unchanged: bool,
    pub dropped: bool,
    /// Kept as a header with no records (a producer's last batch).
    pub emptied: bool,
    pub records_removed: u64,
    pub tombstones_removed: u64,
    /// The delete horizon of the batch as written, if it still holds tombstones.
    pub horizon_ms: Option<i64>,
}

/// Filters one readable (non-transactional, non-control) batch against `map` and appends what
/// stays to `out`: the batch unchanged, a rewritten batch with the surviving records, an empty
/// header, or nothing. `body` is the batch's records section ([`section`]); a rewritten
/// compressed batch is compressed again with its own codec (Kafka does the same), or, should
/// that fail, written uncompressed.
///
/// A record stays when it has no key, or it is its key's latest record (the map has no later
/// offset), unless it is a tombstone whose batch's delete horizon has passed. The rewritten
/// batch keeps the base offset, last offset delta, producer id, epoch and base sequence,
/// partition leader epoch and attributes, and each surviving record's bytes, offset delta and
/// timestamp; the first time a batch keeps a tombstone, its delete horizon is set (KIP-534: the
/// attribute bit, and the base timestamp becomes `now + delete.retention.ms`, each record's
/// timestamp delta re-encoded against it).
#[allow(clippy::too_many_arguments)]
pub(crate) fn filter_batch(
    view: &BatchView<'_>,
    body: &[u8],
    records: &[RecordAt],
    map: &OffsetMap,
    filter: &Filter,
    codecs: Codecs,
    keep: &mut Vec<bool>,
    out: &mut Vec<u8>,
) -> Filtered {
    let bytes = view.bytes();
    if records.is_empty() {
        // An empty header an earlier pass kept for its producer: it goes once a later batch
        // of the producer carries the producer's state.
        if filter.keep_if_emptied {
            out.extend_from_slice(bytes);
            return Filtered {
                unchanged: true,
                ..Filtered::default()
            };
        }
        return Filtered {
            dropped: true,
            ..Filtered::default()
        };
    }
    let base = view.base_offset();
    let horizon_passed = view.has_delete_horizon() && filter.now_ms >= view.base_timestamp();
    let mut result = Filtered::default();
    keep.clear();
    let mut kept_tombstones = 0u64;
    for r in records {
        let stays = match r.key {
            None => true,
            Some((s, e)) => {
                let offset = base + i64::from(r.offset_delta);
                let latest = map.latest(&body[s..e]).is_none_or(|l| l <= offset);
                latest && !(r.tombstone && horizon_passed && filter.tombstones_removable)
            }
        };
        if !stays {
            result.records_removed += 1;
            if r.tombstone {
                result.tombstones_removed += 1;
            }
        } else if r.tombstone {
            kept_tombstones += 1;
        }
        keep.push(stays);
    }
    let set_horizon = kept_tombstones > 0 && !view.has_delete_horizon();
    if result.records_removed == 0 && !set_horizon {
        out.extend_from_slice(bytes);
        result.unchanged = true;
        result.horizon_ms = (kept_tombstones > 0).then(|| view.base_timestamp());
        return result;
    }
    let kept = records.len() as u64 - result.records_removed;
    let start = out.len();
    out.extend_from_slice(&bytes[..HEADER_BYTES]);
    let mut attrs = view.attributes();
    let mut base_ts = view.base_timestamp();
    let mut max_ts = view.max_timestamp();
    if kept == 0 {
        if !filter.keep_if_emptied {
            out.truncate(start);
            result.dropped = true;
            return result;
        }
        result.emptied = true;
        // No records, so nothing compressed.
        attrs &= !attributes::COMPRESSION_MASK;
        if view.has_delete_horizon() {
            attrs &= !attributes::DELETE_HORIZON;
            base_ts = max_ts;
        }
    } else {
        let new_base = if set_horizon {
            attrs |= attributes::DELETE_HORIZON;
            filter.now_ms.saturating_add(filter.delete_retention_ms)
        } else {
            base_ts
        };
        let mut kept_max = i64::MIN;
        for (r, _) in records.iter().zip(keep.iter()).filter(|(_, k)| **k) {
            let ts = base_ts.saturating_add(r.timestamp_delta);
            kept_max = kept_max.max(ts);
            if new_base == base_ts {
                out.extend_from_slice(&body[r.start..r.end]);
            } else {
                let delta = ts.saturating_sub(new_base);
                let rest = &body[r.after_timestamp..r.end];
                let len = 1 + varlong_len(delta) + rest.len();
                out.reserve(varint_len(len as i32) + len);
                put_varint(out, len as i32);
                out.push(r.attributes);
                put_varlong(out, delta);
                out.extend_from_slice(rest);
            }
        }
        if !view.is_log_append_time() {
            max_ts = kept_max;
        }
        base_ts = new_base;
        if kept_tombstones > 0 {
            result.horizon_ms = Some(new_base);
        }
        let codec = attrs & attributes::COMPRESSION_MASK;
        if codec != 0 {
            let packed = codecs
                .get()
                .ok_or_else(|| "no codecs".to_owned())
                .and_then(|c| c.compress(codec, &out[start + HEADER_BYTES..]));
            match packed {
                Ok(packed) => {
                    out.truncate(start + HEADER_BYTES);
                    out.extend_from_slice(&packed);
                }
                Err(e) => {
                    tracing::warn!(error = %e, codec, "log cleaner: could not compress a cleaned batch; keeping it uncompressed");
                    attrs &= !attributes::COMPRESSION_MASK;
                }
            }
        }
    }
    let batch = &mut out[start..];
    let length = (batch.len() - header::LOG_OVERHEAD_BYTES) as i32;
    batch[header::BATCH_LENGTH].copy_from_slice(&length.to_be_bytes());
    batch[header::ATTRIBUTES].copy_from_slice(&attrs.to_be_bytes());
    batch[header::BASE_TIMESTAMP].copy_from_slice(&base_ts.to_be_bytes());
    batch[header::MAX_TIMESTAMP].copy_from_slice(&max_ts.to_be_bytes());
    batch[header::RECORD_COUNT].copy_from_slice(&(kept as i32).to_be_bytes());
    let crc = sluice_batch::crc_of(batch);
    batch[header::CRC].copy_from_slice(&crc.to_be_bytes());
    result
}

#[cfg(test)]
mod tests {
    use super::*;
    use sluice_batch::{BatchBuilder, RecordRef};

    fn rec<'a>(key: Option<&'a [u8]>, value: Option<&'a [u8]>, ts: i64) -> RecordRef<'a> {
        RecordRef {
            key,
            value,
            headers: &[],
            timestamp_ms: ts,
        }
    }

    fn build(
        base_offset: i64,
        records: &[RecordRef<'_>],
        producer: Option<(i64, i16, i32)>,
    ) -> Vec<u8> {
        let mut out = Vec::new();
        let mut b = BatchBuilder::with_base_timestamp(&mut out, 1_000);
        for r in records {
            b.push(r);
        }
        if let Some((id, epoch, seq)) = producer {
            b = b.with_producer(id, epoch, seq);
        }
        b.finish();
        out[..8].copy_from_slice(&base_offset.to_be_bytes());
        out
    }

    fn filter(now_ms: i64) -> Filter {
        Filter {
            now_ms,
            delete_retention_ms: 100,
            tombstones_removable: true,
            keep_if_emptied: false,
        }
    }

    fn run(batch: &[u8], map: &OffsetMap, f: &Filter) -> (Filtered, Vec<u8>) {
        let view = BatchView::parse_stored_checked(batch).unwrap();
        let mut recs = Vec::new();
        let body = &view.bytes()[HEADER_BYTES..];
        parse_records(&view, body, &mut recs).unwrap();
        let mut out = Vec::new();
        let r = filter_batch(
            &view,
            body,
            &recs,
            map,
            f,
            Codecs::NONE,
            &mut Vec::new(),
            &mut out,
        );
        (r, out)
    }

    #[test]
    fn superseded_records_go_and_the_header_fields_stay() {
        let headers = [("h".to_owned(), Some(bytes::Bytes::from_static(b"x")))];
        let records = [
            rec(Some(b"a"), Some(b"1"), 1_000),
            RecordRef {
                headers: &headers,
                ..rec(Some(b"b"), Some(b"2"), 1_005)
            },
            rec(None, Some(b"3"), 1_009),
        ];
        let batch = build(10, &records, Some((7, 3, 40)));
        let mut map = OffsetMap::new(1 << 20);
        map.put(b"a", 50); // a later value of "a"
        map.put(b"b", 11); // this batch's "b" is the latest
        let (r, out) = run(&batch, &map, &filter(0));
        assert_eq!(
            (r.records_removed, r.unchanged, r.dropped),
            (1, false, false)
        );
        let view = BatchView::parse_stored_checked(&out).unwrap();
        assert_eq!(view.base_offset(), 10);
        assert_eq!(view.last_offset(), 12, "the last offset delta is kept");
        assert_eq!(view.record_count(), 2);
        assert_eq!(
            (
                view.producer_id(),
                view.producer_epoch(),
                view.base_sequence()
            ),
            (7, 3, 40)
        );
        assert_eq!(view.max_timestamp(), 1_009);
        let mut recs = Vec::new();
        parse_records(&view, &view.bytes()[HEADER_BYTES..], &mut recs).unwrap();
        assert_eq!(
            recs.iter().map(|r| r.offset_delta).collect::<Vec<_>>(),
            [1, 2]
        );
        // The surviving records' bytes (headers included) are the original ones.
        let original = BatchView::parse_stored_checked(&batch).unwrap();
        let mut orig = Vec::new();
        parse_records(&original, &batch[HEADER_BYTES..], &mut orig).unwrap();
        assert_eq!(
            &out[HEADER_BYTES..],
            &batch[HEADER_BYTES + orig[1].start..HEADER_BYTES + orig[2].end]
        );
    }

    #[test]
    fn a_batch_with_nothing_to_remove_is_copied_as_is() {
        let batch = build(0, &[rec(Some(b"a"), Some(b"1"), 1_000)], None);
        let (r, out) = run(&batch, &OffsetMap::new(1 << 20), &filter(0));
        assert!(r.unchanged);
        assert_eq!(out, batch);
    }

    #[test]
    fn an_emptied_batch_is_dropped_unless_it_is_its_producers_last() {
        let batch = build(
            5,
            &[
                rec(Some(b"a"), Some(b"1"), 1_000),
                rec(Some(b"a"), Some(b"2"), 1_001),
            ],
            Some((9, 0, 3)),
        );
        let mut map = OffsetMap::new(1 << 20);
        map.put(b"a", 100);
        let (r, out) = run(&batch, &map, &filter(0));
        assert!(r.dropped && out.is_empty());
        let keep = Filter {
            keep_if_emptied: true,
            ..filter(0)
        };
        let (r, out) = run(&batch, &map, &keep);
        assert!(r.emptied);
        let view = BatchView::parse_stored_checked(&out).unwrap();
        assert_eq!(out.len(), HEADER_BYTES);
        assert_eq!(
            (
                view.record_count(),
                view.last_offset(),
                view.base_sequence()
            ),
            (0, 6, 3)
        );
        assert!(
            BatchView::parse(&out).is_err(),
            "appends would refuse an empty batch"
        );
        // Kept while it is the producer's last batch, dropped once it is not.
        let (r, again) = run(&out, &map, &keep);
        assert!(r.unchanged && again == out);
        let (r, gone) = run(&out, &map, &filter(0));
        assert!(r.dropped && !r.unchanged && gone.is_empty());
    }

    #[test]
    fn a_tombstone_gets_a_delete_horizon_then_goes_after_it() {
        let batch = build(
            0,
            &[
                rec(Some(b"a"), None, 1_000),
                rec(Some(b"b"), Some(b"v"), 1_020),
            ],
            None,
        );
        let map = OffsetMap::new(1 << 20);
        let (r, first) = run(&batch, &map, &filter(5_000));
        assert_eq!(r.horizon_ms, Some(5_100));
        let view = BatchView::parse_stored_checked(&first).unwrap();
        assert!(view.has_delete_horizon());
        assert_eq!(view.base_timestamp(), 5_100);
        // Timestamps are unchanged: the deltas were re-encoded against the horizon.
        assert_eq!(
            view.first_offset_with_timestamp_at_least(1_001),
            Some((1, 1_020))
        );
        // Before the horizon the tombstone stays, after it goes.
        let (r, _) = run(&first, &map, &filter(5_099));
        assert!(r.unchanged);
        let (r, after) = run(&first, &map, &filter(5_100));
        assert_eq!((r.tombstones_removed, r.horizon_ms), (1, None));
        let view = BatchView::parse_stored_checked(&after).unwrap();
        assert_eq!(view.record_count(), 1);
        assert_eq!(
            view.first_offset_with_timestamp_at_least(0),
            Some((1, 1_020))
        );
        // Not while a batch the cleaner cannot read comes before it.
        let hidden = Filter {
            tombstones_removable: false,
            ..filter(9_000)
        };
        let (r, _) = run(&first, &map, &hidden);
        assert!(r.unchanged);
    }

    #[test]
    fn the_map_refuses_new_keys_past_its_memory_limit() {
        let mut map = OffsetMap::new(2 * MAP_ENTRY_BYTES);
        assert!(map.put(b"a", 1) && map.put(b"b", 2));
        assert!(!map.put(b"c", 3));
        assert!(map.put(b"a", 4), "a known key still updates");
        assert_eq!(
            (map.latest(b"a"), map.latest(b"c"), map.len()),
            (Some(4), None, 2)
        );
    }
}
