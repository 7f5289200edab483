//! `sluice consume TOPIC`: records of a topic to stdout, as values or as JSON.
//!
//! Flow: Metadata (the topic must exist; consuming never creates it) → ListOffsets turns
//! `--from` into a start offset per partition and records each partition's end (its high
//! watermark when the command starts) → Fetch (long poll: `max_wait_ms` 500, `min_bytes` 1) from
//! each partition's leader → decode the RecordBatch v2 batches, decompressing gzip, snappy, lz4
//! and zstd ones as Kafka producers write them ([`sluice_protocol::records`]) → print each record ([`Output`]). Without `--follow` a partition is
//! done once it reaches its end; with it, the command waits for new records until `--count` is
//! reached or it is interrupted. No consumer group is used and no offset is committed.

// The CLI's output is its job: printing to stdout is intended here.
#![allow(clippy::print_stdout)]

use std::collections::BTreeMap;
use std::io::Write;

use anyhow::{Context, anyhow, bail};
use base64::Engine;
use serde_json::{Map, Value};
use sluice_protocol::kafka_protocol::messages::fetch_request::{FetchPartition, FetchTopic};
use sluice_protocol::kafka_protocol::messages::list_offsets_request::{
    ListOffsetsPartition, ListOffsetsTopic,
};
use sluice_protocol::kafka_protocol::messages::{
    BrokerId, FetchRequest, ListOffsetsRequest, TopicName,
};
use sluice_protocol::kafka_protocol::protocol::StrBytes;

use crate::client::{BootstrapArgs, Cluster, TopicInfo, block_on, kafka_error, plural};
use sluice_protocol::records::{Batches, ConsumedRecord};

/// Long-poll settings of every fetch: answer as soon as there is one byte, or after 500 ms.
const FETCH_MAX_WAIT_MS: i32 = 500;
const FETCH_MIN_BYTES: i32 = 1;
/// Bytes one fetch response may carry in total, and per partition (the broker still sends a
/// whole first batch that is larger, so nothing gets stuck).
pub const FETCH_BYTES_MAX: i32 = 64 << 20;
const FETCH_PARTITION_BYTES_MAX: i32 = 1 << 20;
/// ListOffsets' special timestamps.
const LATEST: i64 = -1;
const EARLIEST: i64 = -2;

/// Where to start reading each partition.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StartAt {
    Earliest,
    Latest,
    Offset(i64),
    /// The first record with a timestamp at or after this many ms since the epoch.
    Timestamp(i64),
}

fn parse_start(s: &str) -> Result<StartAt, String> {
    match s {
        "earliest" | "beginning" => Ok(StartAt::Earliest),
        "latest" | "end" => Ok(StartAt::Latest),
        _ => {
            if let Some(ts) = s.strip_prefix('@') {
                ts.parse::<u64>()
                    .map(|t| StartAt::Timestamp(t.min(i64::MAX as u64) as i64))
                    .map_err(|e| {
                        format!("'@{ts}' is not @TIMESTAMP_MS (milliseconds since the epoch): {e}")
                    })
            } else {
                s.parse::<u64>()
                    .map(|o| StartAt::Offset(o.min(i64::MAX as u64) as i64))
                    .map_err(|e| {
                        format!("'{s}' is not earliest, latest, an offset or @TIMESTAMP_MS ({e})")
                    })
            }
        }
    }
}

/// Print the records of a topic.
///
/// Examples:
///   sluice consume orders
///   sluice consume orders --from @1700000000000 --json
///   sluice consume orders --partition 2 --from 1500 --count 10 --print-key
///   sluice consume orders --from latest --follow
///
/// Without --follow, reads until every partition reaches the end it had when the command
/// started, then exits. Records of different partitions interleave; within a partition they come
/// in offset order.
///
/// Plain output is one value per line (a null value prints an empty line); --print-key puts the
/// key and a TAB before it. With --json, each record is one line:
///   {"partition":0,"offset":41,"timestamp":1700000000000,"key":"user1","value":"clicked",
///    "headers":{"source":"web"}}
/// A null key or value is null. A key or value that is not valid UTF-8 is given as base64 in
/// "key_b64" / "value_b64" instead of "key" / "value"; header values that are not UTF-8 go to a
/// "headers_b64" object the same way. A header name repeated within one record keeps its last
/// value. `sluice produce --json` reads these lines back.
///
/// Prints `consumed N records from TOPIC` to stderr at the end.
#[derive(Debug, clap::Args)]
#[command(verbatim_doc_comment)]
pub struct ConsumeArgs {
    /// Topic to read
    topic: String,
    /// Where to start: earliest, latest, an OFFSET, or @TIMESTAMP_MS for the first record at or
    /// after that time
    #[arg(long, default_value = "earliest", value_name = "WHERE", value_parser = parse_start)]
    from: StartAt,
    /// Read only this partition [default: all partitions]
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(i32).range(0..))]
    partition: Option<i32>,
    /// Stop after N records
    #[arg(long, value_name = "N")]
    count: Option<u64>,
    /// Keep waiting for new records instead of stopping at the end
    #[arg(long)]
    follow: bool,
    /// Print one JSON object per record (see above)
    #[arg(long)]
    json: bool,
    /// Print KEY<TAB>VALUE instead of just the value
    #[arg(long, conflicts_with = "json")]
    print_key: bool,
    #[command(flatten)]
    bootstrap: BootstrapArgs,
}

/// One partition being read.
#[derive(Debug)]
struct PartitionCursor {
    leader: i32,
    /// The next offset to fetch.
    position: i64,
    /// Stop before this offset (`None` with --follow).
    end: Option<i64>,
}

impl PartitionCursor {
    fn done(&self) -> bool {
        self.end.is_some_and(|end| self.position >= end)
    }
}

pub fn run(args: ConsumeArgs) -> anyhow::Result<()> {
    block_on(async move {
        let mut cluster = Cluster::connect(&args.bootstrap).await?;
        let topic = cluster.topic(&args.topic, false).await?;
        let partitions: Vec<i32> = match args.partition {
            Some(p) if topic.leader(p).is_none() => bail!(
                "topic '{}' has no partition {p} (it has {})",
                topic.name,
                topic.partitions.len()
            ),
            Some(p) => vec![p],
            None => topic.partitions.iter().map(|&(p, _)| p).collect(),
        };
        let mut cursors =
            start_positions(&mut cluster, &topic, &partitions, args.from, args.follow).await?;
        let mut out = Output::new(&args);
        let result = fetch_loop(&mut cluster, &topic, &mut cursors, &args, &mut out).await;
        match result {
            Ok(()) => {}
            // A closed pipe (`| head`) is the reader saying it has enough.
            Err(e) if is_broken_pipe(&e) => return Ok(()),
            Err(e) => {
                let _ = out.flush();
                return Err(e);
            }
        }
        eprintln!(
            "consumed {} from {}",
            plural(out.printed, "record"),
            args.topic
        );
        Ok(())
    })
}

fn is_broken_pipe(e: &anyhow::Error) -> bool {
    e.chain().any(|c| {
        c.downcast_ref::<std::io::Error>()
            .is_some_and(|io| io.kind() == std::io::ErrorKind::BrokenPipe)
    })
}

/// Resolves `--from` into a cursor per partition.
async fn start_positions(
    cluster: &mut Cluster,
    topic: &TopicInfo,
    partitions: &[i32],
    from: StartAt,
    follow: bool,
) -> anyhow::Result<BTreeMap<i32, PartitionCursor>> {
    let latest = list_offsets(cluster, topic, partitions, LATEST).await?;
    let starts = match from {
        StartAt::Earliest => list_offsets(cluster, topic, partitions, EARLIEST).await?,
        StartAt::Latest => latest.clone(),
        StartAt::Timestamp(ts) => {
            let mut found = list_offsets(cluster, topic, partitions, ts).await?;
            // No record at or after the time: start at the end.
            for (p, offset) in &mut found {
                if *offset < 0 {
                    *offset = latest[p];
                }
            }
            found
        }
        StartAt::Offset(offset) => {
            let earliest = list_offsets(cluster, topic, partitions, EARLIEST).await?;
            for &p in partitions {
                if !(earliest[&p]..=latest[&p]).contains(&offset) {
                    bail!(
                        "offset {offset} is out of range for {}/{p}: it holds offsets {} to {} (the next record gets {})",
                        topic.name,
                        earliest[&p],
                        latest[&p] - 1,
                        latest[&p]
                    );
                }
            }
            partitions.iter().map(|&p| (p, offset)).collect()
        }
    };
    Ok(partitions
        .iter()
        .map(|&p| {
            let cursor = PartitionCursor {
                leader: topic.leader(p).expect("partition exists"),
                position: starts[&p],
                end: (!follow).then(|| latest[&p]),
            };
            (p, cursor)
        })
        .collect())
}

/// ListOffsets for `partitions` at `timestamp` (or [`LATEST`] / [`EARLIEST`]): the offset per
/// partition, -1 where no record is at or after the timestamp.
async fn list_offsets(
    cluster: &mut Cluster,
    topic: &TopicInfo,
    partitions: &[i32],
    timestamp: i64,
) -> anyhow::Result<BTreeMap<i32, i64>> {
    let mut by_leader: BTreeMap<i32, Vec<i32>> = BTreeMap::new();
    for &p in partitions {
        by_leader
            .entry(topic.leader(p).expect("partition exists"))
            .or_default()
            .push(p);
    }
    let mut offsets = BTreeMap::new();
    for (leader, parts) in by_leader {
        let request = ListOffsetsRequest::default()
            .with_replica_id(BrokerId(-1))
            .with_topics(vec![
                ListOffsetsTopic::default()
                    .with_name(topic_name(topic))
                    .with_partitions(
                        parts
                            .iter()
                            .map(|&p| {
                                ListOffsetsPartition::default()
                                    .with_partition_index(p)
                                    .with_timestamp(timestamp)
                            })
                            .collect(),
                    ),
            ]);
        let response = cluster.leader(leader).await?.call(request).await?;
        for t in &response.topics {
            for p in &t.partitions {
                if let Some(e) = kafka_error(p.error_code, None) {
                    bail!(
                        "cannot look up {} offsets of {}/{}: {e}",
                        match timestamp {
                            LATEST => "latest".to_owned(),
                            EARLIEST => "earliest".to_owned(),
                            ts => format!("timestamp {ts}"),
                        },
                        topic.name,
                        p.partition_index
                    );
                }
                offsets.insert(p.partition_index, p.offset);
            }
        }
    }
    for p in partitions {
        if !offsets.contains_key(p) {
            bail!(
                "the ListOffsets response has no answer for {}/{p}",
                topic.name
            );
        }
    }
    Ok(offsets)
}

fn topic_name(topic: &TopicInfo) -> TopicName {
    TopicName(StrBytes::from_string(topic.name.clone()))
}

/// Fetches until every partition is done or `--count` records were printed.
async fn fetch_loop(
    cluster: &mut Cluster,
    topic: &TopicInfo,
    cursors: &mut BTreeMap<i32, PartitionCursor>,
    args: &ConsumeArgs,
    out: &mut Output,
) -> anyhow::Result<()> {
    let count_reached = |out: &Output| args.count.is_some_and(|n| out.printed >= n);
    loop {
        if count_reached(out) || cursors.values().all(PartitionCursor::done) {
            return out.flush();
        }
        let mut by_leader: BTreeMap<i32, Vec<FetchPartition>> = BTreeMap::new();
        for (&p, c) in cursors.iter().filter(|(_, c)| !c.done()) {
            by_leader.entry(c.leader).or_default().push(
                FetchPartition::default()
                    .with_partition(p)
                    .with_fetch_offset(c.position)
                    .with_partition_max_bytes(FETCH_PARTITION_BYTES_MAX),
            );
        }
        for (leader, partitions) in by_leader {
            let request = FetchRequest::default()
                .with_replica_id(BrokerId(-1))
                .with_max_wait_ms(FETCH_MAX_WAIT_MS)
                .with_min_bytes(FETCH_MIN_BYTES)
                .with_max_bytes(FETCH_BYTES_MAX)
                .with_topics(vec![
                    FetchTopic::default()
                        .with_topic(topic_name(topic))
                        .with_partitions(partitions),
                ]);
            let response = cluster.leader(leader).await?.call(request).await?;
            if let Some(e) = kafka_error(response.error_code, None) {
                bail!("fetch from {} refused: {e}", topic.name);
            }
            for t in response.responses {
                for data in t.partitions {
                    let p = data.partition_index;
                    let cursor = cursors.get_mut(&p).ok_or_else(|| {
                        anyhow!("fetch response names partition {p}, not asked for")
                    })?;
                    if let Some(e) = kafka_error(data.error_code, None) {
                        bail!(
                            "cannot read {}/{p} at offset {}: {e} (the partition holds offsets {} to {})",
                            topic.name,
                            cursor.position,
                            data.log_start_offset,
                            data.high_watermark - 1
                        );
                    }
                    let records = data.records.unwrap_or_default();
                    for batch in Batches::new(records) {
                        let batch = batch.with_context(|| format!("reading {}/{p}", topic.name))?;
                        if batch.next_offset() <= cursor.position {
                            continue; // an older batch that holds the fetch offset's predecessors
                        }
                        if !batch.is_control() {
                            let decoded = batch
                                .records()
                                .with_context(|| format!("reading {}/{p}", topic.name))?;
                            for record in decoded {
                                if record.offset < cursor.position
                                    || cursor.end.is_some_and(|end| record.offset >= end)
                                    || count_reached(out)
                                {
                                    continue;
                                }
                                out.print(p, &record)?;
                            }
                        }
                        cursor.position = batch.next_offset();
                    }
                }
            }
            out.flush()?;
        }
    }
}

/// Writes records to stdout in the chosen format.
#[derive(Debug)]
struct Output {
    stdout: std::io::BufWriter<std::io::Stdout>,
    json: bool,
    print_key: bool,
    printed: u64,
}

impl Output {
    fn new(args: &ConsumeArgs) -> Self {
        Output {
            stdout: std::io::BufWriter::new(std::io::stdout()),
            json: args.json,
            print_key: args.print_key,
            printed: 0,
        }
    }

    fn print(&mut self, partition: i32, record: &ConsumedRecord) -> anyhow::Result<()> {
        if self.json {
            let line = serde_json::to_string(&json_record(partition, record))?;
            writeln!(self.stdout, "{line}")?;
        } else {
            if self.print_key {
                self.stdout
                    .write_all(record.key.as_deref().unwrap_or_default())?;
                self.stdout.write_all(b"\t")?;
            }
            self.stdout
                .write_all(record.value.as_deref().unwrap_or_default())?;
            self.stdout.write_all(b"\n")?;
        }
        self.printed += 1;
        Ok(())
    }

    fn flush(&mut self) -> anyhow::Result<()> {
        self.stdout.flush().context("writing to stdout")
    }
}

/// The JSON form of a record (documented on [`ConsumeArgs`]).
fn json_record(partition: i32, record: &ConsumedRecord) -> Value {
    let b64 = |b: &[u8]| Value::String(base64::engine::general_purpose::STANDARD.encode(b));
    let mut obj = Map::new();
    obj.insert("partition".into(), partition.into());
    obj.insert("offset".into(), record.offset.into());
    obj.insert("timestamp".into(), record.timestamp_ms.into());
    for (name, bytes) in [("key", &record.key), ("value", &record.value)] {
        match bytes.as_deref().map(std::str::from_utf8) {
            None => {
                obj.insert(name.into(), Value::Null);
            }
            Some(Ok(text)) => {
                obj.insert(name.into(), text.into());
            }
            Some(Err(_)) => {
                let raw = bytes.as_deref().expect("matched Some");
                obj.insert(format!("{name}_b64"), b64(raw));
            }
        }
    }
    let mut headers = Map::new();
    let mut headers_b64 = Map::new();
    for (k, v) in &record.headers {
        let k = String::from_utf8_lossy(k).into_owned();
        match v.as_deref().map(std::str::from_utf8) {
            None => {
                headers.insert(k, Value::Null);
            }
            Some(Ok(text)) => {
                headers.insert(k, text.into());
            }
            Some(Err(_)) => {
                headers_b64.insert(k, b64(v.as_deref().expect("matched Some")));
            }
        }
    }
    obj.insert("headers".into(), Value::Object(headers));
    if !headers_b64.is_empty() {
        obj.insert("headers_b64".into(), Value::Object(headers_b64));
    }
    Value::Object(obj)
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::Bytes;

    #[test]
    fn start_positions_parse() {
        assert_eq!(parse_start("earliest"), Ok(StartAt::Earliest));
        assert_eq!(parse_start("latest"), Ok(StartAt::Latest));
        assert_eq!(parse_start("42"), Ok(StartAt::Offset(42)));
        assert_eq!(
            parse_start("@1700000000000"),
            Ok(StartAt::Timestamp(1_700_000_000_000))
        );
        for bad in ["", "-1", "@", "@x", "soon"] {
            assert!(parse_start(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn json_form_uses_base64_only_for_bytes_that_are_not_utf8() {
        let record = ConsumedRecord {
            offset: 7,
            timestamp_ms: 1000,
            key: None,
            value: Some(Bytes::from_static(&[0xff, 0x00])),
            headers: vec![
                (Bytes::from_static(b"a"), Some(Bytes::from_static(b"1"))),
                (
                    Bytes::from_static(b"bin"),
                    Some(Bytes::from_static(&[0xc3])),
                ),
                (Bytes::from_static(b"n"), None),
            ],
        };
        let text = serde_json::to_string(&json_record(2, &record)).unwrap();
        assert_eq!(
            text,
            r#"{"partition":2,"offset":7,"timestamp":1000,"key":null,"value_b64":"/wA=","headers":{"a":"1","n":null},"headers_b64":{"bin":"ww=="}}"#
        );
    }
}
