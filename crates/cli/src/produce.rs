//! `sluice produce TOPIC`: records from stdin, one per line, to a topic.
//!
//! Flow: read a line → parse it into a [`ProducerRecord`] (plain value, `KEY<SEP>VALUE`, or a
//! JSON object) → pick its partition ([`Partitioner`]: forced, `murmur2(key)` as Kafka's default
//! partitioner does, or round-robin) → queue it under that partition. Queued records go out as
//! one uncompressed RecordBatch v2 per partition, in one Produce request per partition leader,
//! when about [`REQUEST_BYTES_TARGET`] is queued, when stdin has been quiet for [`LINGER`], and at
//! the end of input. Each request waits for its response (unless `--acks 0`), so when the
//! command exits successfully every record has been acknowledged as the acks setting says.

use std::collections::BTreeMap;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use anyhow::{Context, anyhow, bail};
use base64::Engine;
use bytes::{Bytes, BytesMut};
use serde_json::Value;
use sluice_protocol::kafka_protocol::messages::ProduceRequest;
use sluice_protocol::kafka_protocol::messages::TopicName;
use sluice_protocol::kafka_protocol::messages::produce_request::{
    PartitionProduceData, TopicProduceData,
};
use sluice_protocol::kafka_protocol::protocol::StrBytes;
use tokio::io::{AsyncBufReadExt, AsyncRead, BufReader};

use crate::client::{
    BootstrapArgs, Cluster, REQUEST_TIMEOUT_MS, TopicInfo, block_on, kafka_error, plural,
};
use crate::topic::parse_key_value;
use sluice_protocol::partitioner;
use sluice_protocol::records::{Header, ProducerRecord, encode_batch};

/// Send once about this many record bytes are queued: below the default `max.message.bytes`
/// (1 MiB + 12) so that a batch is never refused for size unless one record alone is too big.
const REQUEST_BYTES_TARGET: usize = 1000 * 1024;
/// Send queued records when no new line has arrived for this long (typing at a terminal, or a
/// slow writer on the other end of the pipe).
const LINGER: Duration = Duration::from_millis(100);

/// How many acknowledgements a produce waits for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Acks {
    /// Wait until the record is durable on all in-sync replicas
    All,
    /// Wait until the leader has the record (Sluice: also durable)
    #[value(name = "1")]
    One,
    /// Do not wait for any answer (records may be lost unnoticed)
    #[value(name = "0")]
    Zero,
}

impl Acks {
    fn wire(self) -> i16 {
        match self {
            Acks::All => -1,
            Acks::One => 1,
            Acks::Zero => 0,
        }
    }
}

/// Produce records read from stdin, one per line.
///
/// Examples:
///   printf 'hello\nworld\n' | sluice produce orders
///   printf 'user1:clicked\nuser2:left\n' | sluice produce orders --key-separator : --header source=web
///   echo '{"key":"user1","value":"clicked","headers":{"source":"web"}}' | sluice produce orders --json
///
/// Each line is one record (an empty line is a record with an empty value). With --json, each
/// line is an object with these fields, all optional:
///   "key", "value"          strings (other JSON values are stored as their JSON text);
///                           a missing or null key is a null key
///   "key_b64", "value_b64"  the key or value as base64, for bytes that are not UTF-8
///   "headers"               {"name": "value", ...}; "headers_b64" the same with base64 values
///   "partition"             a partition number for this record
///   "timestamp"             milliseconds since the Unix epoch [default: now]
///   "offset"                ignored, so that `sluice consume --json` output can be replayed
///
/// A record goes to --partition if given, else to the JSON "partition", else keyed records to
/// murmur2(key) % partitions (the partition a Java or librdkafka producer with the default
/// partitioner picks for the same key), and records without a key round-robin over partitions.
/// An unknown topic is created if the broker creates topics on first use.
///
/// Prints `produced N records to TOPIC` to stderr; exits non-zero on the first error.
#[derive(Debug, clap::Args)]
#[command(verbatim_doc_comment)]
pub struct ProduceArgs {
    /// Topic to produce to
    topic: String,
    /// Split each line at the first SEP into key and value (a line without SEP has no key)
    #[arg(long, value_name = "SEP", conflicts_with = "json")]
    key_separator: Option<String>,
    /// Read one JSON object per line (see above)
    #[arg(long)]
    json: bool,
    /// Add a header to every record, e.g. --header source=web; repeat for several
    #[arg(long = "header", value_name = "KEY=VALUE", value_parser = parse_key_value)]
    headers: Vec<(String, String)>,
    /// Send every record to this partition
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(i32).range(0..))]
    partition: Option<i32>,
    /// Acknowledgements to wait for: all, 1 or 0
    #[arg(long, value_enum, default_value = "all", value_name = "all|1|0")]
    acks: Acks,
    #[command(flatten)]
    bootstrap: BootstrapArgs,
}

pub fn run(args: ProduceArgs) -> anyhow::Result<()> {
    block_on(async move {
        let mut cluster = Cluster::connect(&args.bootstrap).await?;
        let topic = cluster.topic(&args.topic, true).await?;
        let mut producer = Producer::new(cluster, topic, args.acks, args.partition)?;
        let result = read_and_produce(&args, &mut producer, tokio::io::stdin()).await;
        let (verb, note) = match args.acks {
            Acks::Zero => ("sent", " (acks=0: not confirmed)"),
            _ => ("produced", ""),
        };
        let done = plural(producer.acknowledged, "record");
        match result {
            Ok(()) => {
                eprintln!("{verb} {done} to {}{note}", args.topic);
                Ok(())
            }
            Err(e) => Err(anyhow!("{e:#} ({done} {verb} before this error)")),
        }
    })
}

/// Reads lines until EOF, producing as it goes; on a bad line, the records before it are still
/// sent, then the error is returned.
async fn read_and_produce(
    args: &ProduceArgs,
    producer: &mut Producer,
    input: impl AsyncRead + Unpin,
) -> anyhow::Result<()> {
    let mut reader = BufReader::new(input);
    let mut line = Vec::new();
    let mut line_number = 0u64;
    let fixed_headers: Vec<Header> = args
        .headers
        .iter()
        .map(|(k, v)| (k.clone(), Some(Bytes::copy_from_slice(v.as_bytes()))))
        .collect();
    let mut linger_deadline = None;
    loop {
        tokio::select! {
            // `read_until` is cancel-safe: a partly read line stays in `line` for the next call.
            read = reader.read_until(b'\n', &mut line) => {
                let n = read.context("reading stdin")?;
                if n == 0 && line.is_empty() {
                    break;
                }
                line_number += 1;
                let text = strip_line_end(&line);
                let parsed = if args.json {
                    parse_json_line(text)
                } else {
                    Ok(Some(parse_plain_line(text, args.key_separator.as_deref())))
                };
                let parsed = match parsed {
                    Ok(p) => p,
                    Err(e) => {
                        producer.flush().await?;
                        return Err(e.context(format!("stdin line {line_number}")));
                    }
                };
                line.clear();
                if let Some((mut record, partition)) = parsed {
                    record.headers.extend(fixed_headers.iter().cloned());
                    producer.add(record, partition).await?;
                    linger_deadline.get_or_insert_with(|| tokio::time::Instant::now() + LINGER);
                }
            }
            () = sleep_until(linger_deadline), if linger_deadline.is_some() => {
                producer.flush().await?;
                linger_deadline = None;
            }
        }
    }
    producer.flush().await
}

async fn sleep_until(deadline: Option<tokio::time::Instant>) {
    match deadline {
        Some(d) => tokio::time::sleep_until(d).await,
        None => std::future::pending().await,
    }
}

fn strip_line_end(line: &[u8]) -> &[u8] {
    let line = line.strip_suffix(b"\n").unwrap_or(line);
    line.strip_suffix(b"\r").unwrap_or(line)
}

fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64)
}

/// A plain line: the whole line is the value, or `KEY<SEP>VALUE` with a separator.
fn parse_plain_line(line: &[u8], separator: Option<&str>) -> (ProducerRecord, Option<i32>) {
    let (key, value) = match separator.and_then(|sep| split_once(line, sep.as_bytes())) {
        Some((k, v)) => (Some(Bytes::copy_from_slice(k)), v),
        None => (None, line),
    };
    let record = ProducerRecord {
        key,
        value: Some(Bytes::copy_from_slice(value)),
        headers: Vec::new(),
        timestamp_ms: now_ms(),
    };
    (record, None)
}

fn split_once<'a>(haystack: &'a [u8], needle: &[u8]) -> Option<(&'a [u8], &'a [u8])> {
    if needle.is_empty() {
        return None;
    }
    let at = haystack.windows(needle.len()).position(|w| w == needle)?;
    Some((&haystack[..at], &haystack[at + needle.len()..]))
}

/// A JSON line: `Ok(None)` for a blank line; the record and its requested partition otherwise.
fn parse_json_line(line: &[u8]) -> anyhow::Result<Option<(ProducerRecord, Option<i32>)>> {
    if line.iter().all(u8::is_ascii_whitespace) {
        return Ok(None);
    }
    let value: Value = serde_json::from_slice(line).context("not valid JSON")?;
    let Value::Object(fields) = value else {
        bail!("expected a JSON object, got {value}");
    };
    let mut record = ProducerRecord {
        key: None,
        value: None,
        headers: Vec::new(),
        timestamp_ms: now_ms(),
    };
    let mut partition = None;
    for (name, v) in fields {
        match name.as_str() {
            "key" => record.key = text_field(&v),
            "value" => record.value = text_field(&v),
            "key_b64" => record.key = base64_field("key_b64", &v)?,
            "value_b64" => record.value = base64_field("value_b64", &v)?,
            "headers" | "headers_b64" => {
                let Value::Object(headers) = v else {
                    bail!("\"{name}\" must be an object of header names to values");
                };
                for (k, hv) in headers {
                    let hv = if name == "headers" {
                        match hv {
                            Value::String(s) => Some(Bytes::from(s)),
                            Value::Null => None,
                            other => bail!("header \"{k}\" must be a string or null, got {other}"),
                        }
                    } else {
                        base64_field(&format!("headers_b64.{k}"), &hv)?
                    };
                    record.headers.push((k, hv));
                }
            }
            "partition" => {
                let p = v
                    .as_i64()
                    .and_then(|p| i32::try_from(p).ok())
                    .filter(|p| *p >= 0)
                    .ok_or_else(|| anyhow!("\"partition\" must be a partition number, got {v}"))?;
                partition = Some(p);
            }
            "timestamp" => {
                record.timestamp_ms = v.as_i64().filter(|t| *t >= 0).ok_or_else(|| {
                    anyhow!("\"timestamp\" must be milliseconds since the epoch, got {v}")
                })?;
            }
            "offset" => {}
            other => bail!(
                "unknown field \"{other}\" (known: key, value, key_b64, value_b64, headers, headers_b64, partition, timestamp)"
            ),
        }
    }
    Ok(Some((record, partition)))
}

/// A key or value field: strings as their UTF-8 bytes, null as null, anything else as its JSON.
fn text_field(v: &Value) -> Option<Bytes> {
    match v {
        Value::Null => None,
        Value::String(s) => Some(Bytes::copy_from_slice(s.as_bytes())),
        other => Some(Bytes::from(other.to_string())),
    }
}

fn base64_field(name: &str, v: &Value) -> anyhow::Result<Option<Bytes>> {
    match v {
        Value::Null => Ok(None),
        Value::String(s) => base64::engine::general_purpose::STANDARD
            .decode(s)
            .map(|b| Some(Bytes::from(b)))
            .with_context(|| format!("\"{name}\" is not valid base64")),
        other => bail!("\"{name}\" must be a base64 string, got {other}"),
    }
}

/// The partition Kafka's default partitioner picks for `key` among `partitions`
/// ([`sluice_protocol::partitioner`], which the HTTP API uses too).
fn partition_for_key(key: &[u8], partitions: i32) -> i32 {
    partitioner::partition_for_key(key, partitions.max(1) as u32) as i32
}

/// Picks each record's partition.
#[derive(Debug)]
struct Partitioner {
    partitions: i32,
    forced: Option<i32>,
    next_round_robin: i32,
}

impl Partitioner {
    fn pick(&mut self, record: &ProducerRecord, requested: Option<i32>) -> i32 {
        if let Some(p) = self.forced.or(requested) {
            return p;
        }
        match &record.key {
            Some(key) => partition_for_key(key, self.partitions),
            None => {
                let p = self.next_round_robin;
                self.next_round_robin = (p + 1) % self.partitions;
                p
            }
        }
    }
}

/// Queues records per partition and sends them, one request per leader.
#[derive(Debug)]
struct Producer {
    cluster: Cluster,
    topic: TopicInfo,
    acks: Acks,
    partitioner: Partitioner,
    queued: BTreeMap<i32, Vec<ProducerRecord>>,
    /// Upper bound of the bytes `queued` will encode to.
    queued_bytes: usize,
    /// Records the broker has acknowledged (or, with acks=0, that were sent).
    acknowledged: u64,
}

impl Producer {
    fn new(
        cluster: Cluster,
        topic: TopicInfo,
        acks: Acks,
        forced: Option<i32>,
    ) -> anyhow::Result<Self> {
        let partitions = topic.partitions.len() as i32;
        if let Some(p) = forced {
            check_partition(&topic, p)?;
        }
        Ok(Producer {
            cluster,
            topic,
            acks,
            partitioner: Partitioner {
                partitions,
                forced,
                next_round_robin: 0,
            },
            queued: BTreeMap::new(),
            queued_bytes: 0,
            acknowledged: 0,
        })
    }

    async fn add(&mut self, record: ProducerRecord, requested: Option<i32>) -> anyhow::Result<()> {
        let partition = self.partitioner.pick(&record, requested);
        check_partition(&self.topic, partition)?;
        let size = record.size_bound();
        if self.queued_bytes > 0 && self.queued_bytes + size > REQUEST_BYTES_TARGET {
            self.flush().await?;
        }
        self.queued_bytes += size;
        self.queued.entry(partition).or_default().push(record);
        Ok(())
    }

    /// Sends everything queued and waits for the acknowledgements.
    async fn flush(&mut self) -> anyhow::Result<()> {
        let queued = std::mem::take(&mut self.queued);
        self.queued_bytes = 0;
        let mut by_leader: BTreeMap<i32, Vec<(i32, Bytes, usize)>> = BTreeMap::new();
        for (partition, records) in queued {
            let leader = self.topic.leader(partition).expect("checked in add");
            let mut batch = BytesMut::new();
            encode_batch(&mut batch, &records);
            by_leader
                .entry(leader)
                .or_default()
                .push((partition, batch.freeze(), records.len()));
        }
        for (leader, batches) in by_leader {
            let counts: BTreeMap<i32, usize> = batches.iter().map(|(p, _, n)| (*p, *n)).collect();
            let request = ProduceRequest::default()
                .with_acks(self.acks.wire())
                .with_timeout_ms(REQUEST_TIMEOUT_MS)
                .with_topic_data(vec![
                    TopicProduceData::default()
                        .with_name(TopicName(StrBytes::from_string(self.topic.name.clone())))
                        .with_partition_data(
                            batches
                                .into_iter()
                                .map(|(p, bytes, _)| {
                                    PartitionProduceData::default()
                                        .with_index(p)
                                        .with_records(Some(bytes))
                                })
                                .collect(),
                        ),
                ]);
            let conn = self.cluster.leader(leader).await?;
            if self.acks == Acks::Zero {
                conn.send_only(request).await?;
                self.acknowledged += counts.values().sum::<usize>() as u64;
                continue;
            }
            let response = conn.call(request).await?;
            for topic in &response.responses {
                for p in &topic.partition_responses {
                    if let Some(e) = kafka_error(p.error_code, p.error_message.as_ref()) {
                        bail!("cannot produce to {}/{}: {e}", self.topic.name, p.index);
                    }
                    self.acknowledged += counts.get(&p.index).copied().unwrap_or(0) as u64;
                }
            }
        }
        Ok(())
    }
}

fn check_partition(topic: &TopicInfo, partition: i32) -> anyhow::Result<()> {
    if topic.leader(partition).is_none() {
        bail!(
            "topic '{}' has no partition {partition} (it has {})",
            topic.name,
            topic.partitions.len()
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plain_lines_with_and_without_a_separator() {
        let (r, _) = parse_plain_line(b"k1:v:1", Some(":"));
        assert_eq!(r.key.as_deref(), Some(&b"k1"[..]));
        assert_eq!(r.value.as_deref(), Some(&b"v:1"[..]));
        let (r, _) = parse_plain_line(b"no-key", Some("::"));
        assert_eq!((r.key, r.value.as_deref()), (None, Some(&b"no-key"[..])));
        let (r, _) = parse_plain_line(b"", None);
        assert_eq!(r.value.as_deref(), Some(&b""[..]));
        assert_eq!(strip_line_end(b"a\r\n"), b"a");
        assert_eq!(strip_line_end(b"a"), b"a");
    }

    #[test]
    fn json_lines() {
        let (r, p) = parse_json_line(
            br#"{"key":"k","value":{"n":1},"headers":{"a":"1","b":null},"partition":2,"timestamp":5,"offset":9}"#,
        )
        .unwrap()
        .unwrap();
        assert_eq!(r.key.as_deref(), Some(&b"k"[..]));
        assert_eq!(r.value.as_deref(), Some(&br#"{"n":1}"#[..]));
        assert_eq!(
            r.headers,
            vec![
                ("a".to_owned(), Some(Bytes::from_static(b"1"))),
                ("b".to_owned(), None)
            ]
        );
        assert_eq!((p, r.timestamp_ms), (Some(2), 5));

        let (r, p) = parse_json_line(br#"{"value_b64":"/wA=","key_b64":null}"#)
            .unwrap()
            .unwrap();
        assert_eq!(
            (r.key, r.value.as_deref(), p),
            (None, Some(&[0xff, 0][..]), None)
        );

        assert!(parse_json_line(b"  ").unwrap().is_none());
        for bad in [
            &b"nope"[..],
            b"[1]",
            br#"{"partition":-1}"#,
            br#"{"headers":{"a":1}}"#,
            br#"{"value_b64":"%%"}"#,
            br#"{"vaule":"typo"}"#,
        ] {
            assert!(
                parse_json_line(bad).is_err(),
                "{}",
                String::from_utf8_lossy(bad)
            );
        }
    }

    #[test]
    fn unkeyed_records_round_robin_and_keyed_ones_hash() {
        let mut p = Partitioner {
            partitions: 3,
            forced: None,
            next_round_robin: 0,
        };
        let unkeyed = parse_plain_line(b"v", None).0;
        let picks: Vec<i32> = (0..4).map(|_| p.pick(&unkeyed, None)).collect();
        assert_eq!(picks, [0, 1, 2, 0]);
        let keyed = parse_plain_line(b"21:v", Some(":")).0;
        assert_eq!(p.pick(&keyed, None), partition_for_key(b"21", 3));
        assert_eq!(p.pick(&keyed, Some(1)), 1);
        p.forced = Some(2);
        assert_eq!(p.pick(&keyed, Some(1)), 2);
    }
}
