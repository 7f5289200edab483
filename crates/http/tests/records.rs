//! Produce and read records over HTTP: JSON and binary bodies, partitioning, offsets, the long
//! poll, compressed batches, and every bad input (which must write nothing).

mod common;

use std::io::Write;
use std::time::{Duration, Instant};

use bytes::{Bytes, BytesMut};
use common::Api;
use serde_json::{Value, json};
use sluice_batch::BatchBuilder;
use sluice_batch::attributes::codec;
use sluice_broker::TopicConfig;
use sluice_protocol::records::{Batches, ProducerRecord};

const BINARY: &str = "application/x-sluice-batch";

/// The partition the Java client's default partitioner picks among 3 for these keys
/// (`Utils.toPositive(Utils.murmur2(key)) % 3`, kafka-clients 4.3.1).
const JAVA_PARTITIONS_OF_3: &[(&str, u64)] = &[
    ("key0", 1),
    ("key1", 2),
    ("key2", 2),
    ("abc", 0),
    ("a", 1),
    ("ab", 2),
    ("user-42", 1),
    ("21", 0),
];

fn binary_body(values: &[&[u8]]) -> Vec<u8> {
    let mut body = (values.len() as u32).to_be_bytes().to_vec();
    for v in values {
        body.extend_from_slice(&(v.len() as u32).to_be_bytes());
    }
    for v in values {
        body.extend_from_slice(v);
    }
    body
}

/// Splits a binary answer into its values.
fn binary_values(body: &[u8]) -> Vec<Vec<u8>> {
    let count = u32::from_be_bytes(body[0..4].try_into().unwrap()) as usize;
    let mut at = 4 + 4 * count;
    let mut out = Vec::new();
    for i in 0..count {
        let size = u32::from_be_bytes(body[4 + 4 * i..8 + 4 * i].try_into().unwrap()) as usize;
        out.push(body[at..at + size].to_vec());
        at += size;
    }
    assert_eq!(at, body.len(), "sizes must cover the body exactly");
    out
}

impl Api {
    async fn produce_json(&self, topic: &str, body: Value) -> (u16, Value) {
        let r = self
            .client
            .post(self.at(&format!("/topics/{topic}/records")))
            .json(&body)
            .send()
            .await
            .unwrap();
        (r.status().as_u16(), r.json().await.unwrap())
    }

    async fn produce_raw(
        &self,
        path: &str,
        content_type: Option<&str>,
        body: Vec<u8>,
    ) -> (u16, Value) {
        let mut req = self.client.post(self.at(path)).body(body);
        if let Some(ct) = content_type {
            req = req.header("content-type", ct);
        }
        let r = req.send().await.unwrap();
        (r.status().as_u16(), r.json().await.unwrap())
    }

    async fn get_json(&self, path: &str) -> (u16, Value) {
        let r = self.client.get(self.at(path)).send().await.unwrap();
        (r.status().as_u16(), r.json().await.unwrap())
    }

    /// Every partition's high watermark.
    fn watermarks(&self, topic: &str) -> Vec<i64> {
        self.broker
            .topics()
            .get(topic)
            .unwrap()
            .partitions()
            .iter()
            .map(|p| p.high_watermark())
            .collect()
    }

    /// Number of batches stored in a partition.
    fn batch_count(&self, topic: &str, partition: i32) -> usize {
        let log = self
            .broker
            .topics()
            .get(topic)
            .unwrap()
            .partition(partition)
            .unwrap();
        let read = log.read(0, usize::MAX).unwrap();
        Batches::new(read.records).count()
    }
}

/// Asserts an error answer: its status, and that its message contains every word.
fn assert_error(answer: &(u16, Value), status: u16, words: &[&str]) {
    assert_eq!(answer.0, status, "{}", answer.1);
    let message = answer.1["error"]
        .as_str()
        .unwrap_or_else(|| panic!("no error message in {}", answer.1));
    for w in words {
        assert!(message.contains(w), "{w:?} not in {message:?}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn json_single_array_headers_and_base64_come_back() {
    let api = Api::start().await;
    api.create_topic("t", 1);

    let (status, answer) = api
        .produce_json("t", json!({"key": "k0", "value": "hello"}))
        .await;
    assert_eq!(status, 200, "{answer}");
    assert_eq!(
        answer,
        json!({"partitions": [{"partition": 0, "base_offset": 0, "count": 1}],
               "offsets": [{"partition": 0, "offset": 0}]})
    );

    // Raw text, so the header map's order is as written (the test's own JSON maps sort keys).
    let body = r#"[
        {"value": {"n": 1}, "headers": [{"key": "a", "value": "1"}, {"key": "a", "value": null}],
         "timestamp": 1700000000000},
        {"key": null, "value": null, "headers": {"z": "9", "b": "8"}},
        {"key": "AAE=", "value": "/w==", "headers": {"bin": "AP8="}, "encoding": "base64"},
        {"value": 12.5}
    ]"#;
    let (status, answer) = api
        .produce_raw("/topics/t/records", Some("application/json"), body.into())
        .await;
    assert_eq!(status, 200, "{answer}");
    assert_eq!(
        answer["partitions"],
        json!([{"partition": 0, "base_offset": 1, "count": 4}])
    );

    let (status, read) = api
        .get_json("/topics/t/partitions/0/records?offset=0")
        .await;
    assert_eq!(status, 200, "{read}");
    assert_eq!(read["topic"], "t");
    assert_eq!(read["partition"], 0);
    assert_eq!(read["next_offset"], 5);
    assert_eq!(read["high_watermark"], 5);
    assert_eq!(read["log_start_offset"], 0);
    let records = read["records"].as_array().unwrap();
    assert_eq!(records.len(), 5);
    assert_eq!(records[0]["key"], "k0");
    assert_eq!(records[0]["value"], "hello");
    assert_eq!(records[0]["encoding"], "utf8");
    assert_eq!(records[0]["headers"], json!([]));
    assert_eq!(records[1]["offset"], 1);
    assert_eq!(records[1]["value"], "{\"n\":1}");
    assert_eq!(records[1]["timestamp"], 1_700_000_000_000i64);
    assert_eq!(
        records[1]["headers"],
        json!([{"key": "a", "value": "1"}, {"key": "a", "value": null}])
    );
    assert_eq!(records[2]["key"], Value::Null);
    assert_eq!(records[2]["value"], Value::Null);
    assert_eq!(
        records[2]["headers"],
        json!([{"key": "z", "value": "9"}, {"key": "b", "value": "8"}])
    );
    // Not UTF-8: the whole record comes back as base64.
    assert_eq!(records[3]["encoding"], "base64");
    assert_eq!(records[3]["key"], "AAE=");
    assert_eq!(records[3]["value"], "/w==");
    assert_eq!(
        records[3]["headers"],
        json!([{"key": "bin", "value": "AP8="}])
    );
    assert_eq!(records[4]["value"], "12.5");
    // Timestamps default to now.
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64;
    let ts = records[0]["timestamp"].as_i64().unwrap();
    assert!((now - 60_000..=now).contains(&ts), "{ts} vs {now}");

    // encoding=base64 asks for base64 even for text.
    let (_, read) = api
        .get_json("/topics/t/partitions/0/records?offset=0&max_records=1&encoding=base64")
        .await;
    let r = &read["records"][0];
    assert_eq!(r["encoding"], "base64");
    assert_eq!(r["key"], "azA=");
    assert_eq!(r["value"], "aGVsbG8=");
    assert_eq!(read["next_offset"], 1);

    // One request for one partition is one batch.
    assert_eq!(api.batch_count("t", 0), 2);
    api.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn partitions_follow_field_key_and_round_robin() {
    let api = Api::start().await;
    api.create_topic("p", 3);

    // Keyed records land where the Java client would put them.
    let records: Vec<Value> = JAVA_PARTITIONS_OF_3
        .iter()
        .map(|(k, _)| json!({"key": k, "value": format!("v-{k}")}))
        .collect();
    let (status, answer) = api.produce_json("p", Value::Array(records)).await;
    assert_eq!(status, 200, "{answer}");
    for (i, (key, partition)) in JAVA_PARTITIONS_OF_3.iter().enumerate() {
        assert_eq!(answer["offsets"][i]["partition"], *partition, "{key}");
    }
    // The answer's partitions are in order, with their record counts.
    let counts: Vec<(u64, u64)> = answer["partitions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| {
            (
                p["partition"].as_u64().unwrap(),
                p["count"].as_u64().unwrap(),
            )
        })
        .collect();
    assert_eq!(counts, vec![(0, 2), (1, 3), (2, 3)]);
    for (key, partition) in JAVA_PARTITIONS_OF_3 {
        let (_, read) = api
            .get_json(&format!(
                "/topics/p/partitions/{partition}/records?offset=0"
            ))
            .await;
        assert!(
            read["records"]
                .as_array()
                .unwrap()
                .iter()
                .any(|r| r["key"] == *key),
            "{key} not in partition {partition}: {read}"
        );
    }

    // An explicit partition wins over the key.
    let (status, answer) = api
        .produce_json("p", json!({"key": "key0", "value": "x", "partition": 2}))
        .await;
    assert_eq!(status, 200, "{answer}");
    assert_eq!(answer["offsets"][0]["partition"], 2);

    // Keyless records of one request share one partition; the next request takes the next.
    let mut seen = Vec::new();
    for _ in 0..3 {
        let (status, answer) = api
            .produce_json("p", json!([{"value": "a"}, {"value": "b"}, {"value": "c"}]))
            .await;
        assert_eq!(status, 200, "{answer}");
        let partitions = answer["partitions"].as_array().unwrap();
        assert_eq!(partitions.len(), 1, "{answer}");
        seen.push(partitions[0]["partition"].as_u64().unwrap());
    }
    seen.sort_unstable();
    assert_eq!(seen, vec![0, 1, 2]);

    // Binary bodies: ?partition=N, else round-robin.
    let (status, answer) = api
        .produce_raw(
            "/topics/p/records?partition=1",
            Some(BINARY),
            binary_body(&[b"x", b"y"]),
        )
        .await;
    assert_eq!(status, 200, "{answer}");
    assert_eq!(answer["partitions"][0]["partition"], 1);
    assert_eq!(answer["partitions"][0]["count"], 2);
    assert!(answer.get("offsets").is_none(), "{answer}");
    api.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn binary_round_trip_reads_as_binary_and_json() {
    let api = Api::start().await;
    api.create_topic("b", 1);
    let big = vec![b'z'; 5_000];
    let values: Vec<&[u8]> = vec![b"first", b"", &big, &[0xff, 0x00], b"last"];
    let (status, answer) = api
        .produce_raw("/topics/b/records", Some(BINARY), binary_body(&values))
        .await;
    assert_eq!(status, 200, "{answer}");
    assert_eq!(
        answer,
        json!({"partitions": [{"partition": 0, "base_offset": 0, "count": 5}]})
    );

    let r = api
        .client
        .get(api.at("/topics/b/partitions/0/records?offset=1"))
        .header("accept", BINARY)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    let h = r.headers().clone();
    assert_eq!(h["content-type"], BINARY);
    assert_eq!(h["sluice-next-offset"], "5");
    assert_eq!(h["sluice-high-watermark"], "5");
    assert_eq!(h["sluice-record-count"], "4");
    assert_eq!(h["sluice-first-offset"], "1");
    let body = r.bytes().await.unwrap();
    let got = binary_values(&body);
    let want: Vec<Vec<u8>> = values[1..].iter().map(|v| v.to_vec()).collect();
    assert_eq!(got, want);

    let (_, read) = api
        .get_json("/topics/b/partitions/0/records?offset=0")
        .await;
    let records = read["records"].as_array().unwrap();
    assert_eq!(records[0]["value"], "first");
    assert_eq!(records[0]["key"], Value::Null);
    assert_eq!(records[1]["value"], "");
    assert_eq!(records[2]["value"].as_str().unwrap().len(), 5_000);
    assert_eq!(records[3]["encoding"], "base64");
    assert_eq!(records[3]["value"], "/wA=");

    // At the high watermark with no wait: empty, and no first-offset header.
    let r = api
        .client
        .get(api.at("/topics/b/partitions/0/records?offset=5"))
        .header("accept", BINARY)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    assert_eq!(r.headers()["sluice-record-count"], "0");
    assert_eq!(r.headers()["sluice-next-offset"], "5");
    assert!(r.headers().get("sluice-first-offset").is_none());
    assert_eq!(&r.bytes().await.unwrap()[..], &[0, 0, 0, 0]);
    api.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn answered_offsets_are_where_reads_find_the_records() {
    let api = Api::start().await;
    api.create_topic("o", 3);
    // Something already in the partitions, so base offsets differ.
    for p in 0..3 {
        api.produce_json("o", json!({"value": "pad", "partition": p}))
            .await;
    }
    let records: Vec<Value> = (0..30)
        .map(|i| match i % 3 {
            0 => json!({"key": format!("key{i}"), "value": format!("r{i}")}),
            1 => json!({"value": format!("r{i}"), "partition": i % 2}),
            _ => json!({"value": format!("r{i}")}),
        })
        .collect();
    let (status, answer) = api.produce_json("o", Value::Array(records)).await;
    assert_eq!(status, 200, "{answer}");
    let offsets = answer["offsets"].as_array().unwrap();
    assert_eq!(offsets.len(), 30);
    for (i, o) in offsets.iter().enumerate() {
        let path = format!(
            "/topics/o/partitions/{}/records?offset={}&max_records=1",
            o["partition"], o["offset"]
        );
        let (status, read) = api.get_json(&path).await;
        assert_eq!(status, 200, "{read}");
        assert_eq!(read["records"][0]["value"], format!("r{i}"), "{path}");
        assert_eq!(read["records"][0]["offset"], o["offset"]);
    }
    // Each partition's count and base offset agree with the per-record offsets.
    for p in answer["partitions"].as_array().unwrap() {
        let mine: Vec<i64> = offsets
            .iter()
            .filter(|o| o["partition"] == p["partition"])
            .map(|o| o["offset"].as_i64().unwrap())
            .collect();
        let base = p["base_offset"].as_i64().unwrap();
        assert_eq!(mine, (base..base + mine.len() as i64).collect::<Vec<_>>());
        assert_eq!(p["count"], mine.len());
    }
    api.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn batches_split_only_over_max_message_bytes() {
    let api = Api::start().await;
    let mut config = TopicConfig::default();
    config.set("max.message.bytes", Some("2000")).unwrap();
    api.broker.create_topic("small", 1, config).unwrap();
    let value = "v".repeat(300);
    let records: Vec<Value> = (0..20).map(|_| json!({"value": value})).collect();
    let (status, answer) = api.produce_json("small", Value::Array(records)).await;
    assert_eq!(status, 200, "{answer}");
    assert_eq!(answer["partitions"][0]["count"], 20);
    // 20 × ~310 bytes in batches of at most 2000: several batches, all records in order.
    let batches = api.batch_count("small", 0);
    assert!((4..=5).contains(&batches), "{batches}");
    let (_, read) = api
        .get_json("/topics/small/partitions/0/records?offset=0")
        .await;
    assert_eq!(read["records"].as_array().unwrap().len(), 20);
    assert_eq!(read["next_offset"], 20);

    // A record that cannot fit in a batch alone: 413, nothing written.
    let before = api.watermarks("small");
    let answer = api
        .produce_json(
            "small",
            json!([{"value": "ok"}, {"value": "x".repeat(3000)}]),
        )
        .await;
    assert_error(&answer, 413, &["record 1", "max.message.bytes", "2000"]);
    let answer = api
        .produce_raw(
            "/topics/small/records",
            Some(BINARY),
            binary_body(&[b"ok", &[b'x'; 3000]]),
        )
        .await;
    assert_error(&answer, 413, &["max.message.bytes"]);
    assert_eq!(api.watermarks("small"), before);
    api.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn long_poll_wakes_on_a_record_and_times_out_empty() {
    let api = Api::start().await;
    api.create_topic("w", 1);

    // Nothing arrives: answered empty after the timeout.
    let start = Instant::now();
    let (status, read) = api
        .get_json("/topics/w/partitions/0/records?offset=0&timeout_ms=300")
        .await;
    let waited = start.elapsed();
    assert_eq!(status, 200, "{read}");
    assert_eq!(read["records"], json!([]));
    assert_eq!(read["next_offset"], 0);
    assert!(waited >= Duration::from_millis(290), "{waited:?}");

    // A record arrives while waiting: answered with it, long before the timeout.
    let client = api.client.clone();
    let url = api.at("/topics/w/partitions/0/records?offset=0&timeout_ms=10000");
    let start = Instant::now();
    let poll = tokio::spawn(async move {
        let r = client.get(url).send().await.unwrap();
        (r.status().as_u16(), r.json::<Value>().await.unwrap())
    });
    tokio::time::sleep(Duration::from_millis(200)).await;
    let (status, _) = api.produce_json("w", json!({"value": "wake"})).await;
    assert_eq!(status, 200);
    let (status, read) = poll.await.unwrap();
    let waited = start.elapsed();
    assert_eq!(status, 200, "{read}");
    assert_eq!(read["records"][0]["value"], "wake");
    assert_eq!(read["next_offset"], 1);
    assert!(waited < Duration::from_secs(5), "{waited:?}");

    // Shutdown ends a long poll early (and the server waits for it).
    let client = api.client.clone();
    let url = api.at("/topics/w/partitions/0/records?offset=1&timeout_ms=20000");
    let poll = tokio::spawn(async move {
        let r = client.get(url).send().await.unwrap();
        (r.status().as_u16(), r.json::<Value>().await.unwrap())
    });
    tokio::time::sleep(Duration::from_millis(200)).await;
    let start = Instant::now();
    api.stop().await;
    let (status, read) = poll.await.unwrap();
    assert_eq!(status, 200, "{read}");
    assert_eq!(read["records"], json!([]));
    assert!(start.elapsed() < Duration::from_secs(5));
}

/// A gzip batch as a Kafka producer writes it: the records section compressed, attributes
/// codec 1, length and CRC over the compressed bytes.
fn gzip_batch(records: &[ProducerRecord]) -> Bytes {
    let mut out = BytesMut::new();
    let mut builder = BatchBuilder::new(&mut out);
    for record in records {
        builder.push(&record.as_record_ref());
    }
    builder.finish_compressed(codec::GZIP, |plain| {
        let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
        gz.write_all(plain).unwrap();
        gz.finish().unwrap()
    });
    out.freeze()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn compressed_batches_are_read_decompressed() {
    let api = Api::start().await;
    api.create_topic("gz", 1);
    let records: Vec<ProducerRecord> = (0..50)
        .map(|i| ProducerRecord {
            key: Some(Bytes::from(format!("k{i}"))),
            value: Some(Bytes::from(format!("compressed value {i}"))),
            headers: vec![("h".to_owned(), Some(Bytes::from_static(b"v")))],
            timestamp_ms: 1_000 + i,
        })
        .collect();
    let topic = api.broker.topics().get("gz").unwrap();
    let appended = api.broker.append(&topic, 0, &gzip_batch(&records)).unwrap();
    appended.durable().await.unwrap();

    // From the middle of the batch: records before the offset are skipped.
    let (status, read) = api
        .get_json("/topics/gz/partitions/0/records?offset=10&max_records=5")
        .await;
    assert_eq!(status, 200, "{read}");
    let got = read["records"].as_array().unwrap();
    assert_eq!(got.len(), 5);
    assert_eq!(got[0]["offset"], 10);
    assert_eq!(got[0]["key"], "k10");
    assert_eq!(got[0]["value"], "compressed value 10");
    assert_eq!(got[0]["timestamp"], 1_010);
    assert_eq!(got[0]["headers"], json!([{"key": "h", "value": "v"}]));
    assert_eq!(read["next_offset"], 15);

    let r = api
        .client
        .get(api.at("/topics/gz/partitions/0/records?offset=45"))
        .header("accept", BINARY)
        .send()
        .await
        .unwrap();
    assert_eq!(r.headers()["sluice-next-offset"], "50");
    let values = binary_values(&r.bytes().await.unwrap());
    assert_eq!(values.len(), 5);
    assert_eq!(values[4], b"compressed value 49");
    api.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_produce_requests_say_why_and_write_nothing() {
    let config = sluice_http::HttpConfig {
        max_records_per_request: 5,
        ..Default::default()
    };
    let api = Api::start_with(config, Vec::new(), |_| {}).await;
    api.create_topic("e", 2);
    api.produce_json("e", json!({"value": "seed", "partition": 0}))
        .await;
    let before = api.watermarks("e");
    let path = "/topics/e/records";

    // Binary bodies.
    let mut body = binary_body(&[b"abc", b"de"]);
    body.push(b'!');
    let answer = api.produce_raw(path, Some(BINARY), body).await;
    assert_error(&answer, 400, &["add up to 5 bytes", "6 bytes of values"]);
    let mut body = binary_body(&[b"abc", b"de"]);
    body[3] = 4;
    let answer = api.produce_raw(path, Some(BINARY), body).await;
    assert_error(&answer, 400, &["4 records", "does not match"]);
    let answer = api
        .produce_raw(path, Some(BINARY), 0u32.to_be_bytes().to_vec())
        .await;
    assert_error(&answer, 400, &["record count is 0"]);
    let answer = api.produce_raw(path, Some(BINARY), vec![0, 0]).await;
    assert_error(&answer, 400, &["4-byte big-endian record count"]);
    let answer = api
        .produce_raw(path, Some(BINARY), binary_body(&[&b"x"[..]; 6]))
        .await;
    assert_error(&answer, 413, &["6 records", "5"]);
    let answer = api
        .produce_raw(
            "/topics/e/records?partition=7",
            Some(BINARY),
            binary_body(&[b"x"]),
        )
        .await;
    assert_error(&answer, 404, &["no partition 7", "0 to 1"]);
    let answer = api
        .produce_raw(
            "/topics/e/records?partition=-1",
            Some(BINARY),
            binary_body(&[b"x"]),
        )
        .await;
    assert_error(&answer, 400, &["partition", "-1"]);
    let answer = api
        .produce_raw(
            "/topics/e/records?partiton=1",
            Some(BINARY),
            binary_body(&[b"x"]),
        )
        .await;
    assert_error(&answer, 400, &["unknown query parameter 'partiton'"]);

    // JSON bodies.
    let answer = api
        .produce_raw(path, Some("application/json"), b"{\"value\": ".to_vec())
        .await;
    assert_error(&answer, 400, &["invalid JSON"]);
    let answer = api.produce_raw(path, None, b"[]".to_vec()).await;
    assert_error(&answer, 400, &["no records"]);
    let answer = api.produce_raw(path, None, Vec::new()).await;
    assert_error(&answer, 400, &["empty"]);
    let answer = api
        .produce_json("e", json!([{"value": 1}, {"value": 2}, {"valeu": 3}]))
        .await;
    assert_error(&answer, 400, &["unknown field `valeu`"]);
    let answer = api
        .produce_json("e", json!([{"value": "a"}, {"value": "b", "partition": 2}]))
        .await;
    assert_error(&answer, 404, &["no partition 2"]);
    let answer = api
        .produce_json("e", json!({"value": "x", "partition": 5_000_000_000i64}))
        .await;
    assert_error(&answer, 404, &["no partition 5000000000"]);
    let answer = api
        .produce_json("e", json!({"value": "!!", "encoding": "base64"}))
        .await;
    assert_error(&answer, 400, &["not valid base64"]);
    let answer = api.produce_json("e", json!([{}, {}, {}, {}, {}, {}])).await;
    assert_error(&answer, 413, &["6 records"]);
    let answer = api
        .produce_raw("/topics/e/records?partition=1", None, b"{}".to_vec())
        .await;
    assert_error(&answer, 400, &["only for binary bodies"]);

    // Topics.
    let answer = api.produce_json("nope", json!({"value": "x"})).await;
    assert_error(&answer, 404, &["unknown topic 'nope'", "POST /topics"]);
    assert!(
        api.broker.topics().get("nope").is_none(),
        "created by produce"
    );
    let answer = api.produce_json("bad%20name", json!({"value": "x"})).await;
    assert_error(&answer, 400, &["invalid topic name"]);

    assert_eq!(api.watermarks("e"), before);
    api.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_reads_say_why() {
    let api = Api::start().await;
    api.create_topic("r", 2);
    api.produce_json(
        "r",
        json!([{"value": "a", "partition": 0}, {"value": "b", "partition": 0}]),
    )
    .await;
    let before = api.watermarks("r");

    let answer = api
        .get_json("/topics/nope/partitions/0/records?offset=0")
        .await;
    assert_error(&answer, 404, &["unknown topic 'nope'"]);
    let answer = api
        .get_json("/topics/r/partitions/2/records?offset=0")
        .await;
    assert_error(&answer, 404, &["no partition 2", "0 to 1"]);
    let answer = api
        .get_json("/topics/r/partitions/4294967296/records?offset=0")
        .await;
    assert_error(&answer, 404, &["no partition 4294967296"]);
    let answer = api
        .get_json("/topics/r/partitions/x/records?offset=0")
        .await;
    assert_error(&answer, 400, &["partition", "'x'"]);
    let answer = api
        .get_json("/topics/r/partitions/-1/records?offset=0")
        .await;
    assert_error(&answer, 400, &["partition", "'-1'"]);
    let answer = api
        .get_json("/topics/b@d/partitions/0/records?offset=0")
        .await;
    assert_error(&answer, 400, &["invalid topic name"]);

    // Offsets outside [log start, high watermark]: 416 with the bounds as fields.
    let answer = api
        .get_json("/topics/r/partitions/0/records?offset=3")
        .await;
    assert_error(
        &answer,
        416,
        &["offset 3", "log_start_offset 0", "high_watermark 2"],
    );
    assert_eq!(answer.1["log_start_offset"], 0);
    assert_eq!(answer.1["high_watermark"], 2);
    let answer = api
        .get_json("/topics/r/partitions/1/records?offset=1000")
        .await;
    assert_error(&answer, 416, &["high_watermark 0"]);

    for (query, words) in [
        ("", &["'offset' is required"][..]),
        ("offset=-1", &["'offset'", "from 0"]),
        ("offset=abc", &["'offset'", "'abc'"]),
        ("offset=0&max_records=0", &["'max_records'", "1 to 100000"]),
        (
            "offset=0&max_records=100001",
            &["'max_records'", "1 to 100000"],
        ),
        ("offset=0&max_records=ten", &["'max_records'"]),
        ("offset=0&max_bytes=0", &["'max_bytes'", "from 1"]),
        ("offset=0&max_bytes=-5", &["'max_bytes'"]),
        ("offset=0&timeout_ms=30001", &["'timeout_ms'", "0 to 30000"]),
        ("offset=0&timeout_ms=1.5", &["'timeout_ms'"]),
        (
            "offset=0&encoding=hex",
            &["'encoding'", "'auto' or 'base64'"],
        ),
        ("offset=0&offset=1", &["'offset'", "more than once"]),
        ("offset=0&limit=5", &["unknown query parameter 'limit'"]),
    ] {
        let answer = api
            .get_json(&format!("/topics/r/partitions/0/records?{query}"))
            .await;
        assert_error(&answer, 400, words);
    }

    // max_bytes over the server's limit is capped, not refused.
    let (status, read) = api
        .get_json("/topics/r/partitions/0/records?offset=0&max_bytes=999999999999")
        .await;
    assert_eq!(status, 200, "{read}");
    assert_eq!(read["records"].as_array().unwrap().len(), 2);
    assert_eq!(api.watermarks("r"), before);
    api.stop().await;
}
