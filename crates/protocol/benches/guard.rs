//! What the length guard costs next to decoding: for typical and large Produce and Fetch
//! requests, the time of `guard::check` alone against `codec::decode_request` (which runs the
//! guard, then `kafka-protocol`'s decode).
//!
//!   cargo bench -p sluice-protocol --bench guard
//!
//! A plain timing loop (no harness): after a warm-up, each case runs ten rounds of 200 ms and
//! prints the best round's nanoseconds per request.

#![allow(clippy::print_stdout)] // a benchmark reports on stdout

use std::hint::black_box;
use std::time::{Duration, Instant};

use bytes::{Bytes, BytesMut};
use sluice_protocol::codec;
use sluice_protocol::guard;
use sluice_protocol::kafka_protocol::messages::fetch_request::{FetchPartition, FetchTopic};
use sluice_protocol::kafka_protocol::messages::produce_request::{
    PartitionProduceData, TopicProduceData,
};
use sluice_protocol::kafka_protocol::messages::{
    ApiKey, FetchRequest, ProduceRequest, RequestKind, TopicName,
};
use sluice_protocol::kafka_protocol::protocol::StrBytes;

/// Each case is measured this many times...
const ROUNDS: usize = 10;
/// ...for this long each.
const ROUND: Duration = Duration::from_millis(200);

fn topic(i: usize) -> TopicName {
    TopicName(StrBytes::from_string(format!("topic-{i:03}")))
}

fn produce(topics: usize, partitions: usize, batch_bytes: usize) -> RequestKind {
    let records = Bytes::from(vec![0x5a; batch_bytes]);
    RequestKind::Produce(
        ProduceRequest::default()
            .with_acks(-1)
            .with_timeout_ms(30_000)
            .with_topic_data(
                (0..topics)
                    .map(|t| {
                        TopicProduceData::default()
                            .with_name(topic(t))
                            .with_partition_data(
                                (0..partitions)
                                    .map(|p| {
                                        PartitionProduceData::default()
                                            .with_index(p as i32)
                                            .with_records(Some(records.clone()))
                                    })
                                    .collect(),
                            )
                    })
                    .collect(),
            ),
    )
}

fn fetch(topics: usize, partitions: usize) -> RequestKind {
    RequestKind::Fetch(
        FetchRequest::default()
            .with_max_wait_ms(500)
            .with_min_bytes(1)
            .with_topics(
                (0..topics)
                    .map(|t| {
                        FetchTopic::default().with_topic(topic(t)).with_partitions(
                            (0..partitions)
                                .map(|p| {
                                    FetchPartition::default()
                                        .with_partition(p as i32)
                                        .with_fetch_offset(1_000_000)
                                        .with_partition_max_bytes(1 << 20)
                                })
                                .collect(),
                        )
                    })
                    .collect(),
            ),
    )
}

/// Nanoseconds per call of `f`: the best of [`ROUNDS`] rounds of about [`ROUND`] each (the
/// best, because other work on a shared machine only ever adds time).
fn per_call(mut f: impl FnMut()) -> f64 {
    for _ in 0..1000 {
        f();
    }
    let mut best = f64::MAX;
    for _ in 0..ROUNDS {
        let mut calls = 0u64;
        let started = Instant::now();
        while started.elapsed() < ROUND {
            for _ in 0..100 {
                f();
            }
            calls += 100;
        }
        best = best.min(started.elapsed().as_nanos() as f64 / calls as f64);
    }
    best
}

fn main() {
    let cases = [
        (
            "Produce v9, 1 topic x 1 partition, 16 KiB batch",
            ApiKey::Produce,
            9,
            produce(1, 1, 16 << 10),
        ),
        (
            "Produce v9, 10 topics x 10 partitions, 1 KiB batches",
            ApiKey::Produce,
            9,
            produce(10, 10, 1 << 10),
        ),
        (
            "Produce v8 (classic), 10 topics x 10 partitions",
            ApiKey::Produce,
            8,
            produce(10, 10, 1 << 10),
        ),
        (
            "Fetch v12, 1 topic x 1 partition",
            ApiKey::Fetch,
            12,
            fetch(1, 1),
        ),
        (
            "Fetch v12, 10 topics x 100 partitions",
            ApiKey::Fetch,
            12,
            fetch(10, 100),
        ),
        (
            "Fetch v11 (classic), 10 topics x 100 partitions",
            ApiKey::Fetch,
            11,
            fetch(10, 100),
        ),
    ];
    println!(
        "{:<55} {:>8} {:>12} {:>12} {:>7}",
        "request", "bytes", "guard ns", "decode ns", "guard%"
    );
    for (name, api, version, body) in cases {
        let mut out = BytesMut::new();
        codec::encode_request(&mut out, api, version, 1, "bench", &body).expect("encode");
        let frame = out.split_off(4).freeze();
        guard::check(&frame, api, version).expect("valid");
        let guard_ns = per_call(|| {
            black_box(guard::check(black_box(&frame), api, version)).unwrap();
        });
        let decode_ns = per_call(|| {
            black_box(codec::decode_request(black_box(frame.clone()))).unwrap();
        });
        println!(
            "{name:<55} {:>8} {guard_ns:>12.0} {decode_ns:>12.0} {:>6.1}%",
            frame.len(),
            100.0 * guard_ns / decode_ns
        );
    }
}
