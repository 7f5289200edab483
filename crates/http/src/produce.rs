//! `POST /topics/{topic}/records`: records in, answered once they are durable.
//!
//! Flow: check the topic name and the caller's write grant → read the body → parse it (JSON:
//! one record object or an array; `application/x-sluice-batch`: a record count, a table of
//! sizes, then the values) → pick each record's partition (explicit, else Kafka's murmur2 of
//! the key, else one round-robin partition for all keyless records of the request) → check
//! everything (sizes, partitions, `max.message.bytes`) before writing anything → per partition,
//! in partition order, encode the partition's records in request order as RecordBatch v2
//! batches (one batch, split only where `max.message.bytes` requires) and append them with
//! [`Broker::append`](sluice_broker::Broker::append) (*appended*) → await every append's
//! fdatasync (*durable*) → answer 200 with the offsets (*acknowledged*).
//!
//! `POST /topics/{topic}/events` (module `events`) builds its records itself and produces them
//! through [`produce_records`], the JSON path after parsing.
//!
//! A 4xx answer means nothing was written. A failure while appending (disk error) can leave the
//! partitions appended before it written: the answer is then a 5xx, as for a Kafka produce whose
//! partitions partly failed.
//!
//! The binary path allocates nothing per record: the values stay where they are in the request
//! body and are copied once, straight into the batch, which is built in a per-thread buffer
//! reused across requests ([`with_batch_buffer`]).

use std::cell::RefCell;
use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::Ordering;

use axum::Json;
use axum::body::Bytes;
use axum::extract::rejection::{BytesRejection, PathRejection, QueryRejection};
use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, header};
use base64::Engine;
use bytes::BytesMut;
use serde::de::{self, Deserializer, MapAccess, SeqAccess, Visitor};
use serde::{Deserialize, Serialize};
use sluice_broker::Topic;
use sluice_broker::errors::storage_error_code;
use sluice_broker::storage::Appended;
use sluice_broker::topics::validate_topic_name;
use sluice_protocol::partitioner::partition_for_key;
use sluice_protocol::records::{BatchBuilder, Header, ProducerRecord, RecordRef};

use crate::auth::{Access, Principal};
use crate::consume::{self, QueryParams};
use crate::error::body_error;
use crate::{ApiError, AppState};

/// Content type of the binary produce body (and of binary read answers).
pub const BINARY_CONTENT_TYPE: &str = "application/x-sluice-batch";

/// Bytes of the record count and of each size in the binary format.
const BINARY_COUNT_BYTES: usize = 4;
const BINARY_SIZE_BYTES: usize = 4;

/// Largest batch buffer a worker thread keeps between requests; a larger one (a request with
/// many megabytes for one partition) is dropped after use so idle threads do not pin memory.
const BATCH_BUFFER_KEEP_BYTES: usize = 8 << 20;

/// The answer: per partition the first offset and the number of records; per record (JSON
/// bodies only) its partition and offset, in request order.
#[derive(Debug, Serialize)]
pub struct ProduceAnswer {
    partitions: Vec<PartitionAnswer>,
    #[serde(skip_serializing_if = "Option::is_none")]
    offsets: Option<Vec<RecordOffset>>,
}

#[derive(Debug, Serialize)]
pub struct PartitionAnswer {
    partition: u32,
    base_offset: i64,
    count: usize,
}

#[derive(Debug, Serialize)]
pub struct RecordOffset {
    partition: u32,
    offset: i64,
}

pub async fn produce(
    State(state): State<Arc<AppState>>,
    principal: Principal,
    path: Result<Path<String>, PathRejection>,
    query: Result<Query<Vec<(String, String)>>, QueryRejection>,
    headers: HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> Result<Json<ProduceAnswer>, ApiError> {
    let Path(topic_name) =
        path.map_err(|e| ApiError::bad_request(format!("bad path: {}", e.body_text())))?;
    validate_topic_name(&topic_name).map_err(|e| ApiError::bad_request(e.to_string()))?;
    principal.require(Access::Write, &topic_name)?;
    let query = QueryParams::new(query, &["partition"])?;
    let body = body.map_err(body_error)?;
    let target = Target::new(&state, &topic_name)?;
    if is_binary(&headers) {
        produce_binary(&state, &target, &query, &body).await
    } else {
        if let Some(name) = query.names().next() {
            return Err(ApiError::bad_request(format!(
                "query parameter '{name}' is only for binary bodies ({BINARY_CONTENT_TYPE}); in JSON set \"partition\" on each record"
            )));
        }
        produce_json(&state, &target, &body).await
    }
}

/// The topic a request produces to, with what partitioning and batching need to know.
#[derive(Debug)]
pub(crate) struct Target {
    topic: Arc<Topic>,
    partitions: u32,
    /// The topic's `max.message.bytes`: no batch may be larger.
    max_batch_bytes: usize,
}

impl Target {
    /// The existing topic `topic_name`; 404 when there is none (the HTTP API does not create
    /// topics on produce).
    pub(crate) fn new(state: &AppState, topic_name: &str) -> Result<Target, ApiError> {
        let topic = state.broker.topics().get(topic_name).ok_or_else(|| {
            ApiError::not_found(format!(
                "unknown topic '{topic_name}'; create it first (POST /topics): the HTTP API does not create topics on produce"
            ))
        })?;
        Ok(Target {
            max_batch_bytes: usize::try_from(
                topic
                    .config()
                    .max_message_bytes(state.broker.config().max_message_bytes),
            )
            .unwrap_or(0),
            partitions: topic.partition_count().max(0) as u32,
            topic,
        })
    }

    /// `partition` if the topic has it; else 404 naming the partitions it has.
    fn existing_partition(&self, partition: u64) -> Result<u32, ApiError> {
        if partition < u64::from(self.partitions) {
            Ok(partition as u32)
        } else {
            Err(ApiError::not_found(format!(
                "topic '{}' has no partition {partition}; its partitions are 0 to {}",
                self.topic.name,
                self.partitions.saturating_sub(1)
            )))
        }
    }

    /// Encodes `records` (request order) as batches within `max.message.bytes` (every record
    /// alone was checked to fit) in this thread's batch buffer and appends them to `partition`.
    fn append<'r>(
        &self,
        state: &AppState,
        partition: u32,
        records: impl Iterator<Item = RecordRef<'r>>,
    ) -> Result<Appended, ApiError> {
        with_batch_buffer(|buf| {
            encode_records(buf, records, self.max_batch_bytes);
            state
                .broker
                .append(&self.topic, partition as i32, buf)
                .map_err(|e| ApiError::from_kafka(e.code(), e.to_string()))
        })
    }
}

/// A binary body: every value to one partition (`?partition=N`, else round-robin).
async fn produce_binary(
    state: &AppState,
    target: &Target,
    query: &QueryParams,
    body: &[u8],
) -> Result<Json<ProduceAnswer>, ApiError> {
    let forced = query
        .get("partition")
        .map(|raw| consume::parse_partition("query parameter 'partition'", raw))
        .transpose()?;
    let records = BinaryBody::parse(body, state.config.max_records_per_request)?;
    let now_ms = state.broker.now_ms();
    if let Some(largest) = records
        .values()
        .map(|v| binary_record(v, now_ms))
        .max_by_key(RecordRef::alone_batch_bytes)
    {
        check_alone_size(&largest, target.max_batch_bytes, "the largest value")?;
    }
    let partition = match forced {
        Some(p) => target.existing_partition(p)?,
        None => round_robin(state, target.partitions),
    };
    let appended = target.append(
        state,
        partition,
        records.values().map(|v| binary_record(v, now_ms)),
    )?;
    let base_offset = durable(&appended).await?;
    state.broker.metrics().records_in(records.count as u64);
    Ok(Json(ProduceAnswer {
        partitions: vec![PartitionAnswer {
            partition,
            base_offset,
            count: records.count,
        }],
        offsets: None,
    }))
}

/// A JSON body: each record to its own partition; one append per partition, in partition
/// order, each holding that partition's records in request order.
async fn produce_json(
    state: &AppState,
    target: &Target,
    body: &[u8],
) -> Result<Json<ProduceAnswer>, ApiError> {
    let now_ms = state.broker.now_ms();
    let records = parse_json_records(body, state.config.max_records_per_request, now_ms)?;
    produce_records(state, target, &records).await
}

/// Produces `records` (already parsed, in request order; at most the per-request limit):
/// each to its own partition, one append per partition, in partition order, each holding
/// that partition's records in request order. Everything is checked before anything is
/// written; the answer comes once every append is durable (fsynced), with each record's
/// offset. `POST /topics/{topic}/events` produces through here too.
pub(crate) async fn produce_records(
    state: &AppState,
    target: &Target,
    records: &[ParsedRecord],
) -> Result<Json<ProduceAnswer>, ApiError> {
    // Every record's partition, checked before anything is written.
    let mut keyless = None;
    let mut targets = Vec::with_capacity(records.len());
    for (i, record) in records.iter().enumerate() {
        check_alone_size(
            &record.record.as_record_ref(),
            target.max_batch_bytes,
            &record_name(i, records.len()),
        )?;
        let partition = match (record.partition, &record.record.key) {
            (Some(p), _) => target.existing_partition(p)?,
            (None, Some(key)) => partition_for_key(key, target.partitions),
            (None, None) => *keyless.get_or_insert_with(|| round_robin(state, target.partitions)),
        };
        targets.push(partition);
    }
    // Record indexes per partition, in request order.
    let mut by_partition: BTreeMap<u32, Vec<usize>> = BTreeMap::new();
    for (i, &p) in targets.iter().enumerate() {
        by_partition.entry(p).or_default().push(i);
    }
    let mut pending: Vec<(u32, usize, Appended)> = Vec::with_capacity(by_partition.len());
    for (&partition, indexes) in &by_partition {
        let records = indexes.iter().map(|&i| records[i].record.as_record_ref());
        let appended = target.append(state, partition, records)?;
        pending.push((partition, indexes.len(), appended));
    }
    // The offsets are those the durable append reports (in cluster mode the metadata store
    // assigns them at commit).
    let mut bases = Vec::with_capacity(pending.len());
    for (_, _, appended) in &pending {
        bases.push(durable(appended).await?);
    }
    state.broker.metrics().records_in(records.len() as u64);

    // Record i's offset: its partition's base offset + its index among that partition's records.
    let mut next: BTreeMap<u32, i64> = pending
        .iter()
        .zip(&bases)
        .map(|((p, _, _), base)| (*p, *base))
        .collect();
    let offsets = targets
        .iter()
        .map(|&partition| {
            let slot = next
                .get_mut(&partition)
                .expect("every target partition was appended");
            let offset = *slot;
            *slot += 1;
            RecordOffset { partition, offset }
        })
        .collect();
    Ok(Json(ProduceAnswer {
        partitions: pending
            .into_iter()
            .zip(bases)
            .map(|((partition, count, _), base_offset)| PartitionAnswer {
                partition,
                base_offset,
                count,
            })
            .collect(),
        offsets: Some(offsets),
    }))
}

/// True when the body is the binary format; anything else (including no Content-Type, or
/// curl's default form type) is read as JSON.
fn is_binary(headers: &HeaderMap) -> bool {
    headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.split(';').next())
        .is_some_and(|essence| essence.trim().eq_ignore_ascii_case(BINARY_CONTENT_TYPE))
}

/// The next keyless partition: one counter shared by every topic, so consecutive requests
/// spread over the partitions.
fn round_robin(state: &AppState, partitions: u32) -> u32 {
    state.next_partition.fetch_add(1, Ordering::Relaxed) % partitions.max(1)
}

/// 413 when `record` alone would make a batch over the topic's `max.message.bytes`.
fn check_alone_size(record: &RecordRef<'_>, max: usize, what: &str) -> Result<(), ApiError> {
    let size = record.alone_batch_bytes();
    if size > max {
        return Err(ApiError::too_large(format!(
            "{what} makes a record batch of {size} bytes, over the topic's max.message.bytes ({max}); send smaller records or raise max.message.bytes"
        )));
    }
    Ok(())
}

fn record_name(index: usize, count: usize) -> String {
    if count == 1 {
        "the record".to_owned()
    } else {
        format!("record {index} (counting from 0)")
    }
}

/// A binary-body record: the value, no key, no headers.
fn binary_record(value: &[u8], timestamp_ms: i64) -> RecordRef<'_> {
    RecordRef {
        key: None,
        value: Some(value),
        headers: &[],
        timestamp_ms,
    }
}

/// Encodes `records` (request order) as batches of at most `max_batch_bytes` each (every record
/// alone was checked to fit), one after the other in `buf`.
fn encode_records<'r>(
    buf: &mut BytesMut,
    records: impl Iterator<Item = RecordRef<'r>>,
    max_batch_bytes: usize,
) {
    let mut builder = BatchBuilder::new(buf);
    for record in records {
        if !builder.is_empty() && builder.batch_bytes_with(&record) > max_batch_bytes {
            builder = BatchBuilder::new(builder.finish());
        }
        builder.push(&record);
    }
    builder.finish();
}

/// Waits until the append is durable (an fdatasync, or a PUT and its commit); its base offset.
async fn durable(appended: &Appended) -> Result<i64, ApiError> {
    appended
        .durable()
        .await
        .map(|d| d.base_offset)
        .map_err(|e| {
            tracing::warn!(error = %e, "produce over HTTP failed to become durable");
            ApiError::from_kafka(storage_error_code(&e), e.to_string())
        })
}

thread_local! {
    /// This worker thread's batch buffer (see [`with_batch_buffer`]).
    static BATCH_BUFFER: RefCell<BytesMut> = RefCell::new(BytesMut::new());
}

/// Runs `f` with this thread's empty batch buffer. `f` encodes and appends synchronously (the
/// log copies the bytes), so the buffer is free again when `f` returns and never crosses an
/// `.await`.
fn with_batch_buffer<T>(f: impl FnOnce(&mut BytesMut) -> T) -> T {
    BATCH_BUFFER.with(|cell| {
        // A nested call (none today) would find the buffer borrowed: give it its own.
        let Ok(mut buf) = cell.try_borrow_mut() else {
            return f(&mut BytesMut::new());
        };
        buf.clear();
        let out = f(&mut buf);
        buf.clear();
        if buf.capacity() > BATCH_BUFFER_KEEP_BYTES {
            *buf = BytesMut::new();
        }
        out
    })
}

/// A checked binary body: `count` big-endian u32 sizes, then exactly that many bytes of values.
/// Values are read in place from the body.
#[derive(Debug)]
struct BinaryBody<'a> {
    count: usize,
    sizes: &'a [u8],
    values: &'a [u8],
}

impl<'a> BinaryBody<'a> {
    fn parse(body: &'a [u8], max_records: usize) -> Result<BinaryBody<'a>, ApiError> {
        let Some((count, rest)) = body.split_first_chunk::<BINARY_COUNT_BYTES>() else {
            return Err(ApiError::bad_request(format!(
                "the {BINARY_CONTENT_TYPE} body is {} bytes; it must start with a 4-byte big-endian record count",
                body.len()
            )));
        };
        let count = u32::from_be_bytes(*count) as usize;
        if count == 0 {
            return Err(ApiError::bad_request(
                "the record count is 0; send at least one record",
            ));
        }
        if count > max_records {
            return Err(ApiError::too_large(format!(
                "{count} records in one request; the most allowed is {max_records}"
            )));
        }
        let table = count * BINARY_SIZE_BYTES;
        if rest.len() < table {
            return Err(ApiError::bad_request(format!(
                "the record count says {count} records, which needs {table} bytes of sizes after it, but only {} bytes follow; the count does not match the sizes sent",
                rest.len()
            )));
        }
        let (sizes, values) = rest.split_at(table);
        let total: u64 = sizes
            .chunks_exact(BINARY_SIZE_BYTES)
            .map(|s| u64::from(u32::from_be_bytes([s[0], s[1], s[2], s[3]])))
            .sum();
        if total != values.len() as u64 {
            return Err(ApiError::bad_request(format!(
                "the {count} sizes add up to {total} bytes, but {} bytes of values follow them; sizes must sum to the rest of the body exactly",
                values.len()
            )));
        }
        Ok(BinaryBody {
            count,
            sizes,
            values,
        })
    }

    /// The values in order, as slices of the body.
    fn values(&self) -> impl Iterator<Item = &'a [u8]> + use<'a> {
        let mut rest = self.values;
        self.sizes.chunks_exact(BINARY_SIZE_BYTES).map(move |s| {
            let size = u32::from_be_bytes([s[0], s[1], s[2], s[3]]) as usize;
            let (value, tail) = rest.split_at(size);
            rest = tail;
            value
        })
    }
}

/// One JSON record as sent.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct JsonRecord {
    #[serde(default)]
    key: Option<String>,
    #[serde(default)]
    value: Option<serde_json::Value>,
    #[serde(default)]
    headers: JsonHeaders,
    /// `i64` so that a negative or huge partition gets a message about partitions, not a JSON
    /// type error.
    #[serde(default)]
    partition: Option<i64>,
    #[serde(default)]
    timestamp: Option<i64>,
    #[serde(default)]
    encoding: Encoding,
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
enum Encoding {
    #[default]
    Utf8,
    Base64,
}

/// Headers in either form: `[{"key": "k", "value": "v"|null}, ...]` or `{"k": "v"|null, ...}`
/// (in the order sent; a key may repeat in the list form).
#[derive(Debug, Default)]
struct JsonHeaders(Vec<(String, Option<String>)>);

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct JsonHeader {
    key: String,
    #[serde(default)]
    value: Option<String>,
}

impl<'de> Deserialize<'de> for JsonHeaders {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct HeadersVisitor;

        impl<'de> Visitor<'de> for HeadersVisitor {
            type Value = JsonHeaders;

            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str(
                    "headers as [{\"key\": \"k\", \"value\": \"v\"}, ...] or {\"k\": \"v\", ...}",
                )
            }

            fn visit_unit<E: de::Error>(self) -> Result<JsonHeaders, E> {
                Ok(JsonHeaders::default())
            }

            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<JsonHeaders, A::Error> {
                let mut out = Vec::new();
                while let Some(h) = seq.next_element::<JsonHeader>()? {
                    out.push((h.key, h.value));
                }
                Ok(JsonHeaders(out))
            }

            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<JsonHeaders, A::Error> {
                let mut out = Vec::new();
                while let Some((k, v)) = map.next_entry::<String, Option<String>>()? {
                    out.push((k, v));
                }
                Ok(JsonHeaders(out))
            }
        }

        deserializer.deserialize_any(HeadersVisitor)
    }
}

/// A JSON record turned into bytes, with its explicit partition if it named one.
#[derive(Debug)]
pub(crate) struct ParsedRecord {
    pub(crate) record: ProducerRecord,
    /// `None`: Kafka's murmur2 of the key, or round-robin for a record without a key.
    pub(crate) partition: Option<u64>,
}

/// Parses a JSON body: one record object or a non-empty array of them.
fn parse_json_records(
    body: &[u8],
    max_records: usize,
    now_ms: i64,
) -> Result<Vec<ParsedRecord>, ApiError> {
    let invalid = |e: serde_json::Error| {
        ApiError::bad_request(format!(
            "invalid JSON body: {e} (send a record object or an array of them; binary bodies need Content-Type: {BINARY_CONTENT_TYPE})"
        ))
    };
    let first = body.iter().find(|b| !b.is_ascii_whitespace());
    let raw: Vec<JsonRecord> = match first {
        None => {
            return Err(ApiError::bad_request(
                "the request body is empty; send a JSON record object or an array of them",
            ));
        }
        Some(b'[') => serde_json::from_slice(body).map_err(invalid)?,
        Some(b'{') => vec![serde_json::from_slice(body).map_err(invalid)?],
        Some(_) => {
            // Let serde name what is there (a string, a number, or not JSON at all).
            let value: serde_json::Value = serde_json::from_slice(body).map_err(invalid)?;
            return Err(ApiError::bad_request(format!(
                "the body is a JSON {}; send a record object or an array of them",
                json_kind(&value)
            )));
        }
    };
    if raw.is_empty() {
        return Err(ApiError::bad_request(
            "the array holds no records; send at least one",
        ));
    }
    if raw.len() > max_records {
        return Err(ApiError::too_large(format!(
            "{} records in one request; the most allowed is {max_records}",
            raw.len()
        )));
    }
    let count = raw.len();
    raw.into_iter()
        .enumerate()
        .map(|(i, r)| {
            convert(r, now_ms)
                .map_err(|e| ApiError::bad_request(format!("{}: {e}", record_name(i, count))))
        })
        .collect()
}

pub(crate) fn json_kind(value: &serde_json::Value) -> &'static str {
    match value {
        serde_json::Value::Null => "null",
        serde_json::Value::Bool(_) => "boolean",
        serde_json::Value::Number(_) => "number",
        serde_json::Value::String(_) => "string",
        serde_json::Value::Array(_) => "array",
        serde_json::Value::Object(_) => "object",
    }
}

/// The bytes a JSON record stands for; the error says which field is wrong.
fn convert(r: JsonRecord, now: i64) -> Result<ParsedRecord, String> {
    let partition = r
        .partition
        .map(|p| {
            u64::try_from(p).map_err(|e| format!("\"partition\" must be 0 or more, got {p} ({e})"))
        })
        .transpose()?;
    let timestamp_ms = match r.timestamp {
        Some(t) if t < 0 => {
            return Err(format!(
                "\"timestamp\" must be milliseconds since 1970 (0 or more), got {t}"
            ));
        }
        Some(t) => t,
        None => now,
    };
    let bytes = |field: &str, text: String| -> Result<Bytes, String> {
        match r.encoding {
            Encoding::Utf8 => Ok(Bytes::from(text)),
            Encoding::Base64 => base64::engine::general_purpose::STANDARD
                .decode(text.as_bytes())
                .map(Bytes::from)
                .map_err(|e| format!("{field} is not valid base64 ({e})")),
        }
    };
    let key = r.key.map(|k| bytes("\"key\"", k)).transpose()?;
    let value = match r.value {
        None | Some(serde_json::Value::Null) => None,
        Some(serde_json::Value::String(s)) => Some(bytes("\"value\"", s)?),
        Some(other) if r.encoding == Encoding::Base64 => {
            return Err(format!(
                "with \"encoding\": \"base64\" the value must be a base64 string, got a JSON {}",
                json_kind(&other)
            ));
        }
        // Objects, arrays, numbers and booleans are stored as their compact JSON text.
        Some(other) => Some(Bytes::from(other.to_string())),
    };
    let headers = r
        .headers
        .0
        .into_iter()
        .map(|(k, v)| {
            let value = v
                .map(|v| bytes(&format!("the value of header '{k}'"), v))
                .transpose()?;
            Ok::<Header, String>((k, value))
        })
        .collect::<Result<Vec<_>, _>>()?;
    Ok(ParsedRecord {
        record: ProducerRecord {
            key,
            value,
            headers,
            timestamp_ms,
        },
        partition,
    })
}

#[cfg(test)]
pub(crate) mod tests {
    use std::alloc::{GlobalAlloc, Layout, System};
    use std::cell::Cell;

    use sluice_protocol::records::Batches;

    use super::*;

    /// Counts allocations made by the current thread (tests run on many threads at once).
    struct CountingAlloc;

    thread_local! {
        static ALLOCATIONS: Cell<usize> = const { Cell::new(0) };
    }

    // SAFETY: every call is forwarded unchanged to the system allocator; the counter is a
    // const-initialised thread-local `Cell`, which neither allocates nor unwinds.
    unsafe impl GlobalAlloc for CountingAlloc {
        unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
            let _ = ALLOCATIONS.try_with(|c| c.set(c.get() + 1));
            // SAFETY: same contract as our caller's.
            unsafe { System.alloc(layout) }
        }

        unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
            // SAFETY: same contract as our caller's.
            unsafe { System.dealloc(ptr, layout) }
        }

        unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
            let _ = ALLOCATIONS.try_with(|c| c.set(c.get() + 1));
            // SAFETY: same contract as our caller's.
            unsafe { System.realloc(ptr, layout, new_size) }
        }
    }

    #[global_allocator]
    static GLOBAL: CountingAlloc = CountingAlloc;

    /// Allocations `f` makes on this thread.
    pub(crate) fn allocations<T>(f: impl FnOnce() -> T) -> (usize, T) {
        let before = ALLOCATIONS.with(Cell::get);
        let out = f();
        (ALLOCATIONS.with(Cell::get) - before, out)
    }

    /// A binary body of `values`.
    pub(crate) fn binary_body(values: &[&[u8]]) -> Vec<u8> {
        let mut body = (values.len() as u32).to_be_bytes().to_vec();
        for v in values {
            body.extend_from_slice(&(v.len() as u32).to_be_bytes());
        }
        for v in values {
            body.extend_from_slice(v);
        }
        body
    }

    #[test]
    fn binary_body_parses_in_place() {
        let body = binary_body(&[b"one", b"", b"three"]);
        let parsed = BinaryBody::parse(&body, 10).unwrap();
        assert_eq!(parsed.count, 3);
        let values: Vec<&[u8]> = parsed.values().collect();
        assert_eq!(values, [&b"one"[..], b"", b"three"]);
        // The values are the body's own bytes, not copies.
        let at = body.len() - 5;
        assert!(std::ptr::eq(values[2].as_ptr(), body[at..].as_ptr()));
    }

    #[test]
    fn binary_body_errors_say_what_is_wrong() {
        let check = |body: &[u8], max: usize, status: u16, words: &[&str]| {
            let err = BinaryBody::parse(body, max).unwrap_err();
            assert_eq!(err.status.as_u16(), status, "{}", err.message);
            for w in words {
                assert!(err.message.contains(w), "{w:?} not in {}", err.message);
            }
        };
        check(b"", 10, 400, &["record count", "0 bytes"]);
        check(&[0, 0, 1], 10, 400, &["record count"]);
        check(&0u32.to_be_bytes(), 10, 400, &["record count is 0"]);
        check(
            &binary_body(&[b"a", b"b", b"c"]),
            2,
            413,
            &["3 records", "2"],
        );
        // Count says 3, but only 2 sizes (and their values) follow.
        let mut short = binary_body(&[b"a", b"b"]);
        short[3] = 3;
        check(&short, 10, 400, &["3 records", "does not match"]);
        // A huge count is refused without allocating for it.
        check(
            &u32::MAX.to_be_bytes(),
            usize::MAX,
            400,
            &["4294967295 records"],
        );
        // Sizes that do not add up to the values.
        let mut body = binary_body(&[b"abc", b"de"]);
        body.push(b'!');
        check(&body, 10, 400, &["add up to 5 bytes", "6 bytes of values"]);
        body.truncate(body.len() - 2);
        check(&body, 10, 400, &["add up to 5 bytes", "4 bytes of values"]);
    }

    #[test]
    fn binary_produce_path_allocates_nothing_per_record() {
        let value = vec![b'x'; 1024];
        let few: Vec<&[u8]> = vec![&value; 10];
        let many: Vec<&[u8]> = vec![&value; 2_000];
        let run = |values: &[&[u8]]| {
            let body = binary_body(values);
            let mut buf = BytesMut::with_capacity(body.len() * 2);
            let (n, ()) = allocations(|| {
                let parsed = BinaryBody::parse(&body, usize::MAX).unwrap();
                encode_records(
                    &mut buf,
                    parsed.values().map(|v| binary_record(v, 1)),
                    1 << 20,
                );
            });
            (n, buf)
        };
        let (few_allocs, _) = run(&few);
        let (many_allocs, buf) = run(&many);
        assert_eq!(few_allocs, many_allocs, "allocations grow with records");
        assert_eq!(many_allocs, 0);
        // The 2,000 KiB were split into batches within 1 MiB, every record kept in order.
        let mut count = 0;
        for batch in Batches::new(buf.freeze()) {
            let batch = batch.unwrap();
            for r in batch.records().unwrap() {
                assert_eq!(r.value.as_deref(), Some(&value[..]));
                count += 1;
            }
        }
        assert_eq!(count, 2_000);
    }

    #[test]
    fn json_records_in_every_form() {
        let body = br#"[
            {"key": "k", "value": "text", "headers": [{"key": "a", "value": "1"}, {"key": "a", "value": null}]},
            {"value": {"n": 1, "list": [1, 2]}, "headers": {"z": "last", "b": "first"}, "timestamp": 5},
            {"value": 42, "partition": 2},
            {"key": "a2V5", "value": "AP8=", "headers": {"h": "aGk="}, "encoding": "base64"},
            {"key": null, "value": null}
        ]"#;
        let records = parse_json_records(body, 10, 1_000).unwrap();
        assert_eq!(records.len(), 5);
        let r = &records[0].record;
        assert_eq!(r.key.as_deref(), Some(&b"k"[..]));
        assert_eq!(r.value.as_deref(), Some(&b"text"[..]));
        assert_eq!(
            r.headers,
            vec![
                ("a".to_owned(), Some(Bytes::from_static(b"1"))),
                ("a".to_owned(), None)
            ]
        );
        let r = &records[1].record;
        assert_eq!(
            r.value.as_deref(),
            Some(&br#"{"n":1,"list":[1,2]}"#[..]),
            "an object value is stored as compact JSON with its keys in the order sent"
        );
        assert_eq!(r.headers[0].0, "z", "map headers keep their order");
        assert_eq!(r.timestamp_ms, 5);
        assert_eq!(
            records[0].record.timestamp_ms, 1_000,
            "no timestamp: the broker's now"
        );
        assert_eq!(records[2].record.value.as_deref(), Some(&b"42"[..]));
        assert_eq!(records[2].partition, Some(2));
        let r = &records[3].record;
        assert_eq!(r.key.as_deref(), Some(&b"key"[..]));
        assert_eq!(r.value.as_deref(), Some(&[0u8, 0xff][..]));
        assert_eq!(r.headers[0].1.as_deref(), Some(&b"hi"[..]));
        assert_eq!(records[4].record.key, None);
        assert_eq!(records[4].record.value, None);

        let one = parse_json_records(br#"{"value": "solo"}"#, 1, 1_000).unwrap();
        assert_eq!(one.len(), 1);
    }

    #[test]
    fn json_errors_say_what_is_wrong() {
        let check = |body: &str, status: u16, words: &[&str]| {
            let err = parse_json_records(body.as_bytes(), 2, 1_000).unwrap_err();
            assert_eq!(err.status.as_u16(), status, "{}", err.message);
            for w in words {
                assert!(err.message.contains(w), "{w:?} not in {}", err.message);
            }
        };
        check("", 400, &["empty"]);
        check("[]", 400, &["no records"]);
        check("[{}, {}, {}]", 413, &["3 records", "2"]);
        check("{\"value\": ", 400, &["invalid JSON"]);
        check("\"text\"", 400, &["JSON string", "record object"]);
        check("{\"vaule\": 1}", 400, &["unknown field `vaule`"]);
        check("{\"key\": 5}", 400, &["invalid type"]);
        check("{\"encoding\": \"hex\"}", 400, &["unknown variant `hex`"]);
        check(
            "[{}, {\"partition\": -1}]",
            400,
            &["record 1", "partition", "-1"],
        );
        check("{\"timestamp\": -5}", 400, &["timestamp"]);
        check(
            "{\"value\": \"%%%\", \"encoding\": \"base64\"}",
            400,
            &["\"value\" is not valid base64"],
        );
        check(
            "{\"value\": [1], \"encoding\": \"base64\"}",
            400,
            &["base64 string", "array"],
        );
        check("{\"headers\": 3}", 400, &["headers as"]);
        check(
            "{\"headers\": [{\"key\": \"a\", \"val\": \"b\"}]}",
            400,
            &["unknown field `val`"],
        );
    }
}
