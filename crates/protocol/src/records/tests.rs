//! Unit tests of the record codec: encoding, decoding, malformed input.

use sluice_batch::varint::{put_varint, put_varlong, varint_len, varlong_len};

use super::*;

pub(super) fn record(
    key: Option<&str>,
    value: &str,
    headers: &[(&str, &str)],
    ts: i64,
) -> ProducerRecord {
    ProducerRecord {
        key: key.map(|k| Bytes::copy_from_slice(k.as_bytes())),
        value: Some(Bytes::copy_from_slice(value.as_bytes())),
        headers: headers
            .iter()
            .map(|(k, v)| ((*k).to_owned(), Some(Bytes::copy_from_slice(v.as_bytes()))))
            .collect(),
        timestamp_ms: ts,
    }
}

pub(super) fn sample() -> Vec<ProducerRecord> {
    (0..300)
        .map(|i| {
            let key = format!("key-{i}");
            let value = format!("value {i} {}", "abc".repeat(i % 40));
            let mut r = record(
                Some(&key),
                &value,
                &[("n", "1"), ("n", "2")],
                1_000 + i as i64,
            );
            if i % 7 == 0 {
                r.value = None;
                r.key = None;
            }
            r
        })
        .collect()
}

#[test]
fn varints_match_the_zig_zag_examples() {
    // Values and encodings from the protobuf zig-zag table, as Kafka uses them.
    for (value, bytes) in [
        (0i32, &[0x00u8][..]),
        (-1, &[0x01]),
        (1, &[0x02]),
        (-2, &[0x03]),
        (63, &[0x7e]),
        (-64, &[0x7f]),
        (64, &[0x80, 0x01]),
        (i32::MAX, &[0xfe, 0xff, 0xff, 0xff, 0x0f]),
        (i32::MIN, &[0xff, 0xff, 0xff, 0xff, 0x0f]),
    ] {
        let mut out = Vec::new();
        put_varint(&mut out, value);
        assert_eq!(out, bytes, "{value}");
        assert_eq!(varint_len(value), bytes.len(), "{value}");
        assert_eq!(get_varint(&mut &out[..]), Some(value));
    }
    for value in [0i64, -1, 1, i64::MAX, i64::MIN, 1_700_000_000_000, -300] {
        let mut out = Vec::new();
        put_varlong(&mut out, value);
        assert_eq!(varlong_len(value), out.len(), "{value}");
        assert_eq!(get_varlong(&mut &out[..]), Some(value));
    }
    assert_eq!(get_varint(&mut &[0x80u8][..]), None);
}

#[test]
fn batch_round_trip_with_keys_nulls_and_repeated_headers() {
    let mut records = vec![
        record(Some("k1"), "v1", &[("a", "1"), ("a", "2")], 1_000),
        record(None, "v2", &[], 900),
        record(Some(""), "", &[("h", "")], 1_500),
    ];
    records[1].value = None;
    records[1].headers.push(("n".to_owned(), None));
    let mut buf = BytesMut::new();
    encode_batch(&mut buf, &records);
    // The batch is one the broker's own validation accepts.
    let view = sluice_log::batch::BatchView::parse_checked(&buf).expect("valid batch");
    assert_eq!(view.record_count(), 3);
    assert_eq!(view.base_timestamp(), 1_000);
    assert_eq!(view.max_timestamp(), 1_500);
    assert_eq!(view.producer_id(), -1);

    // Pretend the broker assigned base offset 40.
    buf[0..8].copy_from_slice(&40i64.to_be_bytes());
    let batches: Vec<_> = Batches::new(buf.freeze()).collect();
    assert_eq!(batches.len(), 1);
    let batch = batches[0].as_ref().unwrap();
    assert_eq!(batch.next_offset(), 43);
    let got = batch.records().unwrap();
    assert_eq!(got.len(), 3);
    for (i, (got, want)) in got.iter().zip(&records).enumerate() {
        assert_eq!(got.offset, 40 + i as i64);
        assert_eq!(got.timestamp_ms, want.timestamp_ms);
        assert_eq!(got.key, want.key);
        assert_eq!(got.value, want.value);
        let headers: Vec<Header> = got
            .headers
            .iter()
            .map(|(k, v)| (String::from_utf8(k.to_vec()).unwrap(), v.clone()))
            .collect();
        assert_eq!(headers, want.headers);
    }
}

#[test]
fn builder_sizes_are_exact_and_batches_chain_in_one_buffer() {
    let value = vec![7u8; 300];
    let headers = vec![("h".to_owned(), Some(Bytes::from_static(b"v")))];
    let mut buf = BytesMut::new();
    let mut builder = BatchBuilder::new(&mut buf);
    assert_eq!(builder.batch_bytes(), BATCH_HEADER_BYTES);
    for i in 0..200i64 {
        let rec = RecordRef {
            key: (i % 2 == 0).then_some(&b"key"[..]),
            value: Some(&value[..(i as usize)]),
            headers: if i % 3 == 0 { &headers } else { &[] },
            timestamp_ms: 1_700_000_000_000 + i * 1_000_000,
        };
        if builder.is_empty() {
            assert_eq!(builder.batch_bytes_with(&rec), rec.alone_batch_bytes());
        }
        let predicted = builder.batch_bytes_with(&rec);
        if predicted > 4_000 {
            builder = BatchBuilder::new(builder.finish());
            assert_eq!(builder.batch_bytes_with(&rec), rec.alone_batch_bytes());
        }
        let predicted = builder.batch_bytes_with(&rec);
        builder.push(&rec);
        assert_eq!(builder.batch_bytes(), predicted, "record {i}");
    }
    let buf = builder.finish();
    // Every batch is valid for the log, none is over the limit, and together they hold
    // every record in order.
    let mut pos = 0;
    let mut seen = 0i64;
    let mut batches = 0;
    while pos < buf.len() {
        let view = sluice_log::batch::BatchView::parse_checked(&buf[pos..]).expect("valid");
        assert!(view.len() <= 4_000);
        pos += view.len();
        batches += 1;
    }
    for batch in Batches::new(buf.clone().freeze()) {
        for r in batch.unwrap().records().unwrap() {
            assert_eq!(r.value.unwrap().len() as i64, seen);
            assert_eq!(r.timestamp_ms, 1_700_000_000_000 + seen * 1_000_000);
            seen += 1;
        }
    }
    assert_eq!(seen, 200);
    assert!(batches > 5, "{batches}");

    // An empty builder leaves nothing behind.
    let before = buf.len();
    let buf = BatchBuilder::new(buf).finish();
    assert_eq!(buf.len(), before);
}

#[test]
fn partial_trailing_batch_is_skipped_and_corruption_is_reported() {
    let mut buf = BytesMut::new();
    encode_batch(&mut buf, &[record(None, "one", &[], 1)]);
    let first_len = buf.len();
    encode_batch(&mut buf, &[record(None, "two", &[], 2)]);
    let whole = buf.clone().freeze();
    let cut = whole.slice(..whole.len() - 3);
    assert_eq!(Batches::new(cut).count(), 1);
    assert_eq!(Batches::new(whole.clone()).count(), 2);

    let mut corrupt = BytesMut::from(&whole[..]);
    corrupt[first_len - 1] ^= 0xff;
    let first = Batches::new(corrupt.freeze()).next().unwrap();
    assert!(
        matches!(first, Err(DecodeError::BadCrc { .. })),
        "{first:?}"
    );
}

#[test]
fn record_views_share_the_batch_bytes() {
    let records = sample();
    let mut buf = BytesMut::new();
    encode_batch(&mut buf, &records);
    let batch = Batches::new(buf.freeze()).next().unwrap().unwrap();
    let records_of_batch = batch.iter_records(DECOMPRESSED_BYTES_MAX).unwrap();
    assert_eq!(records_of_batch.len(), records.len());
    let mut views = records_of_batch.iter();
    let first = views.next().unwrap().unwrap();
    assert_eq!(first.headers.len(), 2);
    let headers: Vec<_> = first.headers.iter().collect();
    assert_eq!(
        headers,
        vec![(&b"n"[..], Some(&b"1"[..])), (&b"n"[..], Some(&b"2"[..]))]
    );
    // Owned copies share the batch's buffer.
    let second = views.next().unwrap().unwrap();
    let owned = records_of_batch.to_owned_record(&second);
    assert_eq!(owned.key.as_deref(), Some(&b"key-1"[..]));
    assert_eq!(owned.key.unwrap().as_ptr(), second.key.unwrap().as_ptr());
    assert_eq!(views.count(), records.len() - 2);
}

#[test]
fn malformed_records_are_errors_not_panics() {
    let mut buf = BytesMut::new();
    encode_batch(
        &mut buf,
        &[
            record(Some("key"), "value", &[("h", "v")], 5),
            record(None, "z", &[], 6),
        ],
    );
    let whole = buf.freeze();
    for cut in BATCH_HEADER_BYTES..whole.len() {
        // Re-frame the cut batch as whole (fix length and CRC) so decoding reaches the records.
        let mut b = BytesMut::from(&whole[..cut]);
        let len = (cut - LOG_OVERHEAD_BYTES) as i32;
        b[header::BATCH_LENGTH].copy_from_slice(&len.to_be_bytes());
        let crc = sluice_batch::crc_of(&b);
        b[header::CRC].copy_from_slice(&crc.to_be_bytes());
        let batch = Batches::new(b.freeze()).next().unwrap().unwrap();
        assert!(batch.records().is_err(), "cut at {cut}");
    }
}
