//! `GET /topics/{topic}/partitions/{p}/records`: durable records from an offset, as JSON or in
//! the binary batch format, with an optional long poll.
//!
//! Flow: check the topic name, the caller's read grant and every query parameter (400 naming
//! the parameter) → find the partition's storage (404) → read with
//! [`Broker::read`](sluice_broker::Broker::read), which at the high watermark with
//! `timeout_ms` > 0 waits for records or the deadline (and misses no change between its read
//! and its wait, as the Kafka fetch does; shutdown ends the wait early) → decode the batches read (decompressing gzip/snappy/lz4/zstd, skipping
//! control batches and records before `offset`) up to `max_records` and `max_bytes`, reading
//! on in growing chunks while more records are wanted → answer.
//!
//! Reads grow from [`FIRST_READ_BYTES`], doubling, and stop as soon as `max_records` records
//! are in hand: a read of 10 records with a 64 MiB `max_bytes` reads about 64 KiB, not 64 MiB
//! (reading the whole budget first made it ~70 times slower; docs/benchmarks.md). Doubling
//! keeps a read that does want the whole budget to a handful of log reads, each byte read once.
//!
//! Only durable data is read (`PartitionStorage::read` stops at the high watermark), so nothing
//! a reader sees can be lost in a crash.
//!
//! The binary answer (`Accept: application/x-sluice-batch`) allocates nothing per record: a
//! first pass over the decoded batches counts the records and value bytes to send, then the
//! answer is written into one buffer of exactly that size. Decompressed batches are decoded
//! once (one buffer per compressed batch).

use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use axum::extract::rejection::{PathRejection, QueryRejection};
use axum::extract::{Extension, Path, Query, State};
use axum::http::{HeaderMap, HeaderName, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use base64::Engine;
use bytes::{BufMut, BytesMut};
use serde::Serialize;
use serde::ser::Serializer;
use sluice_broker::errors::storage_error_code;
use sluice_broker::storage::{PartitionStorage, ReadResult, StorageError};
use sluice_broker::topics::validate_topic_name;
use sluice_protocol::records::{Batches, DECOMPRESSED_BYTES_MAX, DecodeError, RecordView, Records};
use tokio::time::Instant;

use crate::auth::{Access, Principal};
use crate::limits::RequestMemory;
use crate::produce::BINARY_CONTENT_TYPE;
use crate::{ApiError, AppState};

/// `max_records` when not given, and its range.
const MAX_RECORDS_DEFAULT: u64 = 500;
const MAX_RECORDS_MAX: u64 = 100_000;
/// `max_bytes` when not given (then capped to `HttpConfig::fetch_max_bytes`).
const MAX_BYTES_DEFAULT: u64 = 1 << 20;
/// Stored bytes the first log read of a request asks for (at most `max_bytes`); each further
/// read asks for twice the one before. 64 KiB holds hundreds of small records, so the common
/// small read is one log read, and it costs little when fewer are wanted.
const FIRST_READ_BYTES: usize = 64 << 10;

const NEXT_OFFSET: HeaderName = HeaderName::from_static("sluice-next-offset");
const HIGH_WATERMARK: HeaderName = HeaderName::from_static("sluice-high-watermark");
const RECORD_COUNT: HeaderName = HeaderName::from_static("sluice-record-count");
const FIRST_OFFSET: HeaderName = HeaderName::from_static("sluice-first-offset");

/// The query of a read, checked.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct ReadParams {
    offset: i64,
    max_records: usize,
    max_bytes: usize,
    timeout: Duration,
    base64: bool,
}

pub async fn consume(
    State(state): State<Arc<AppState>>,
    principal: Principal,
    memory: Option<Extension<RequestMemory>>,
    path: Result<Path<(String, String)>, PathRejection>,
    query: Result<Query<Vec<(String, String)>>, QueryRejection>,
    headers: HeaderMap,
) -> Response {
    let memory = memory.map(|Extension(m)| m);
    match read(&state, &principal, memory.as_ref(), path, query, &headers).await {
        Ok(response) => response,
        Err(e) => e.into_response(),
    }
}

/// Why a read failed: an ordinary API error, or an offset outside the log (416 with the log's
/// bounds as JSON fields, so a client can reset without parsing the message).
#[derive(Debug)]
enum ReadError {
    Api(ApiError),
    OutOfRange {
        offset: i64,
        log_start_offset: i64,
        high_watermark: i64,
    },
}

impl From<ApiError> for ReadError {
    fn from(e: ApiError) -> Self {
        ReadError::Api(e)
    }
}

impl IntoResponse for ReadError {
    fn into_response(self) -> Response {
        match self {
            ReadError::Api(e) => e.into_response(),
            ReadError::OutOfRange {
                offset,
                log_start_offset,
                high_watermark,
            } => {
                let body = serde_json::json!({
                    "error": format!(
                        "offset {offset} is out of range: the partition holds offsets from log_start_offset {log_start_offset} up to high_watermark {high_watermark} (reading at the high watermark waits for new records)"
                    ),
                    "log_start_offset": log_start_offset,
                    "high_watermark": high_watermark,
                });
                (StatusCode::RANGE_NOT_SATISFIABLE, axum::Json(body)).into_response()
            }
        }
    }
}

async fn read(
    state: &AppState,
    principal: &Principal,
    memory: Option<&RequestMemory>,
    path: Result<Path<(String, String)>, PathRejection>,
    query: Result<Query<Vec<(String, String)>>, QueryRejection>,
    headers: &HeaderMap,
) -> Result<Response, ReadError> {
    let Path((topic_name, partition)) =
        path.map_err(|e| ApiError::bad_request(format!("bad path: {}", e.body_text())))?;
    validate_topic_name(&topic_name).map_err(|e| ApiError::bad_request(e.to_string()))?;
    principal.require(Access::Read, &topic_name)?;
    let partition = parse_partition("the partition in the path", &partition)?;
    let query = QueryParams::new(
        query,
        &[
            "offset",
            "max_records",
            "max_bytes",
            "timeout_ms",
            "encoding",
        ],
    )?;
    let params = read_params(&query, state)?;
    let topic = state
        .broker
        .topics()
        .get(&topic_name)
        .ok_or_else(|| ApiError::not_found(format!("unknown topic '{topic_name}'")))?;
    let storage = i32::try_from(partition)
        .ok()
        .and_then(|p| topic.partition(p))
        .ok_or_else(|| {
            ApiError::not_found(format!(
                "topic '{topic_name}' has no partition {partition}; its partitions are 0 to {}",
                topic.partition_count().saturating_sub(1)
            ))
        })?;
    let binary = accepts_binary(headers);

    // What is read comes out of the memory budget: the first read before the long poll, the
    // rest once there is something to read on from. Short of room, the answer is smaller.
    let first_read_bytes = FIRST_READ_BYTES.min(params.max_bytes);
    let first_read_bytes = match memory {
        Some(memory) => memory.grow_up_to(1, first_read_bytes),
        None => first_read_bytes,
    };
    if first_read_bytes == 0 {
        return Err(ApiError::unavailable(
            "the broker holds as much data for clients as its memory_limit allows; retry the read in a moment",
        )
        .into());
    }
    let first = long_poll(state, &*storage, &params, first_read_bytes).await?;
    let params = match memory {
        Some(memory) if params.max_bytes > first_read_bytes => {
            let more = memory.grow_up_to(0, params.max_bytes - first_read_bytes);
            ReadParams {
                max_bytes: first_read_bytes + more,
                ..params
            }
        }
        _ => params,
    };
    let (decoded, read) = read_on(first, first_read_bytes, &params, |offset, max_bytes| {
        storage.read(offset, max_bytes)
    })?;
    state.broker.metrics().records_out(decoded.count as u64);
    if binary {
        Ok(binary_answer(&decoded, &read))
    } else {
        Ok(json_answer(
            &topic_name,
            partition,
            &decoded,
            &read,
            &params,
        ))
    }
}

/// Reads up to `read_bytes` at `params.offset`; at the high watermark, waits up to the timeout
/// for records (or shutdown) and reads again.
async fn long_poll(
    state: &AppState,
    storage: &dyn PartitionStorage,
    params: &ReadParams,
    read_bytes: usize,
) -> Result<ReadResult, ReadError> {
    let broker = &state.broker;
    let deadline = Instant::now() + params.timeout;
    let mut shutdown = state.shutdown.clone();
    let wait = (!*shutdown.borrow()).then_some(deadline);
    // Shutdown (or a shutdown sender that is gone) ends the wait early: read without waiting.
    let stopping = async {
        let _ = shutdown.wait_for(|s| *s).await;
    };
    let read = tokio::select! {
        read = broker.read(storage, params.offset, read_bytes, wait) => read,
        () = stopping => broker.read(storage, params.offset, read_bytes, None).await,
    };
    let read = read.map_err(|e| match e {
        StorageError::OffsetOutOfRange {
            requested,
            log_start,
            high_watermark,
        } => ReadError::OutOfRange {
            offset: requested,
            log_start_offset: log_start,
            high_watermark,
        },
        other => {
            if !matches!(other, StorageError::Closed { .. }) {
                tracing::warn!(error = %other, "HTTP read failed");
            }
            ReadError::Api(ApiError::from_kafka(
                storage_error_code(&other),
                other.to_string(),
            ))
        }
    })?;
    // Storage also serves offsets appended but not yet durable (as empty reads); over HTTP
    // those are out of range like any offset past the high watermark.
    if params.offset > read.high_watermark {
        return Err(ReadError::OutOfRange {
            offset: params.offset,
            log_start_offset: read.log_start_offset,
            high_watermark: read.high_watermark,
        });
    }
    Ok(read)
}

/// The records of one read to answer with.
#[derive(Debug)]
struct Decoded {
    /// Per batch that contributes records: its records (positioned at the batch's first record)
    /// and how many to skip (before `offset`) and then take.
    batches: Vec<Slice>,
    count: usize,
    /// Value bytes of the records taken (the binary answer's payload).
    value_bytes: usize,
    first_offset: Option<i64>,
    next_offset: i64,
}

#[derive(Debug)]
struct Slice {
    records: Records,
    skip: usize,
    take: usize,
}

/// Decodes `first` and reads on (`read(offset, max_bytes)`, the partition's read), in
/// chunks that double from `first_read_bytes`, while the answer wants more records, the stored
/// bytes read stay under `max_bytes` and the log has more. Returns the records to answer with
/// and the log's offsets as of the last read.
///
/// A later read that fails (retention removed the segment in between, say) ends the answer
/// with the records already in hand; the client reads on from `next_offset`.
fn read_on(
    first: ReadResult,
    first_read_bytes: usize,
    params: &ReadParams,
    mut read: impl FnMut(i64, usize) -> Result<ReadResult, StorageError>,
) -> Result<(Decoded, ReadResult), ApiError> {
    let mut decoded = Decoded::new(params.offset);
    let mut budget_bytes = 0usize;
    let mut read_bytes = first.records.len();
    let mut chunk = first_read_bytes.max(1);
    let mut last = first;
    loop {
        let records = std::mem::take(&mut last.records);
        if records.is_empty() || decoded.take(records, params, &mut budget_bytes)? == Take::Full {
            break;
        }
        if read_bytes >= params.max_bytes || decoded.next_offset >= last.high_watermark {
            break;
        }
        // Every read returns at least one whole batch, so the last one may go over
        // `max_bytes` by less than a batch; its records still count against the budget.
        chunk = chunk.saturating_mul(2).min(params.max_bytes - read_bytes);
        match read(decoded.next_offset, chunk) {
            Ok(more) => {
                read_bytes += more.records.len();
                last = more;
            }
            Err(e) => {
                if !matches!(
                    e,
                    StorageError::Closed { .. } | StorageError::OffsetOutOfRange { .. }
                ) {
                    tracing::warn!(error = %e, "HTTP read failed reading on; answering with the records read so far");
                }
                break;
            }
        }
    }
    Ok((decoded, last))
}

/// Whether [`Decoded::take`] filled the answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Take {
    /// `max_records` or `max_bytes` is reached (or an undecodable batch ends the answer).
    Full,
    /// Every record of the batches given was taken; more may follow.
    More,
}

/// Which records of `read` to answer with: at or after `offset`, not in control batches, at
/// most `max_records`, and (after the first) within `max_bytes` of keys, values and headers.
#[cfg(test)]
fn decode(read: &ReadResult, params: &ReadParams) -> Result<Decoded, ApiError> {
    let mut out = Decoded::new(params.offset);
    out.take(read.records.clone(), params, &mut 0)?;
    Ok(out)
}

impl Decoded {
    fn new(offset: i64) -> Decoded {
        Decoded {
            batches: Vec::new(),
            count: 0,
            value_bytes: 0,
            first_offset: None,
            next_offset: offset,
        }
    }

    /// Takes records from `records` (whole batches) into the answer: at or after `offset`, not
    /// in control batches, up to `max_records` in all, and (after the first) within `max_bytes`
    /// of keys, values and headers in all (`budget_bytes` carries the sum between calls).
    fn take(
        &mut self,
        records: bytes::Bytes,
        params: &ReadParams,
        budget_bytes: &mut usize,
    ) -> Result<Take, ApiError> {
        let out = self;
        for batch in Batches::new(records) {
            let batch = match batch {
                Ok(batch) => batch,
                Err(e) => return undecodable(out, e),
            };
            if batch.next_offset() <= out.next_offset {
                continue;
            }
            if batch.is_control() {
                out.next_offset = batch.next_offset();
                continue;
            }
            let records = match batch.iter_records(DECOMPRESSED_BYTES_MAX) {
                Ok(records) => records,
                Err(e) => return undecodable(out, e),
            };
            let mut skip = 0;
            let mut take = 0;
            let mut full = false;
            for record in records.iter() {
                let record = match record {
                    Ok(record) => record,
                    Err(e) => return undecodable(out, e),
                };
                if record.offset < params.offset {
                    skip += 1;
                    continue;
                }
                let size = record_bytes(&record);
                if out.count == params.max_records
                    || (out.count > 0 && *budget_bytes + size > params.max_bytes)
                {
                    full = true;
                    break;
                }
                *budget_bytes += size;
                out.value_bytes += record.value.map_or(0, <[u8]>::len);
                out.count += 1;
                out.first_offset.get_or_insert(record.offset);
                out.next_offset = record.offset + 1;
                take += 1;
            }
            if take > 0 {
                out.batches.push(Slice {
                    records,
                    skip,
                    take,
                });
            }
            if full {
                return Ok(Take::Full);
            }
            out.next_offset = out.next_offset.max(batch.next_offset());
            // Exactly `max_records` taken: a further batch would only be read to be dropped.
            if out.count == params.max_records {
                return Ok(Take::Full);
            }
        }
        Ok(Take::More)
    }
}

/// A batch that cannot be decoded: answer with the records before it, or, if it is the first,
/// with an error that says where to continue.
fn undecodable(out: &Decoded, e: DecodeError) -> Result<Take, ApiError> {
    if out.count > 0 {
        return Ok(Take::Full);
    }
    tracing::warn!(error = %e, "HTTP read found a batch it cannot decode");
    Err(ApiError::internal(format!(
        "{e}; a Kafka client can still fetch it, or read on from a later offset"
    )))
}

/// Bytes a record counts against `max_bytes`.
fn record_bytes(record: &RecordView<'_>) -> usize {
    record.key.map_or(0, <[u8]>::len)
        + record.value.map_or(0, <[u8]>::len)
        + record
            .headers
            .iter()
            .map(|(k, v)| k.len() + v.map_or(0, <[u8]>::len))
            .sum::<usize>()
}

/// The taken records of `decoded`, in order.
fn taken(decoded: &Decoded) -> impl Iterator<Item = RecordView<'_>> + '_ {
    decoded.batches.iter().flat_map(|slice| {
        slice
            .records
            .iter()
            .skip(slice.skip)
            .take(slice.take)
            // Every taken record decoded in the first pass, over the same bytes.
            .filter_map(Result::ok)
    })
}

/// The binary answer: record count, sizes, values (null values have size 0), in one buffer
/// sized exactly, with the offsets in headers.
fn binary_answer(decoded: &Decoded, read: &ReadResult) -> Response {
    let size = 4 + 4 * decoded.count + decoded.value_bytes;
    let mut body = BytesMut::with_capacity(size);
    body.put_u32(decoded.count as u32);
    for record in taken(decoded) {
        body.put_u32(record.value.map_or(0, <[u8]>::len) as u32);
    }
    for record in taken(decoded) {
        if let Some(value) = record.value {
            body.put_slice(value);
        }
    }
    debug_assert_eq!(body.len(), size);
    let mut response = Response::new(Body::from(body.freeze()));
    let headers = response.headers_mut();
    headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static(BINARY_CONTENT_TYPE),
    );
    headers.insert(NEXT_OFFSET, HeaderValue::from(decoded.next_offset));
    headers.insert(HIGH_WATERMARK, HeaderValue::from(read.high_watermark));
    headers.insert(RECORD_COUNT, HeaderValue::from(decoded.count));
    if let Some(first) = decoded.first_offset {
        headers.insert(FIRST_OFFSET, HeaderValue::from(first));
    }
    response
}

#[derive(Debug, Serialize)]
struct JsonAnswer<'a> {
    topic: &'a str,
    partition: u64,
    records: Vec<JsonRecord<'a>>,
    next_offset: i64,
    high_watermark: i64,
    log_start_offset: i64,
}

#[derive(Debug, Serialize)]
struct JsonRecord<'a> {
    offset: i64,
    timestamp: i64,
    key: Option<Text<'a>>,
    value: Option<Text<'a>>,
    headers: Vec<JsonHeader<'a>>,
    encoding: &'static str,
}

#[derive(Debug, Serialize)]
struct JsonHeader<'a> {
    key: std::borrow::Cow<'a, str>,
    value: Option<Text<'a>>,
}

/// Record bytes in a JSON answer: as a string when they are UTF-8 (checked before choosing
/// this), else as base64.
#[derive(Debug)]
enum Text<'a> {
    Utf8(&'a [u8]),
    Base64(&'a [u8]),
}

impl Serialize for Text<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        match self {
            Text::Utf8(bytes) => serializer
                .serialize_str(std::str::from_utf8(bytes).map_err(serde::ser::Error::custom)?),
            Text::Base64(bytes) => {
                serializer.serialize_str(&base64::engine::general_purpose::STANDARD.encode(bytes))
            }
        }
    }
}

fn json_answer<'a>(
    topic: &'a str,
    partition: u64,
    decoded: &'a Decoded,
    read: &ReadResult,
    params: &ReadParams,
) -> Response {
    let records = taken(decoded)
        .map(|record| {
            let utf8 = |b: Option<&[u8]>| b.is_none_or(|b| std::str::from_utf8(b).is_ok());
            let as_text = !params.base64
                && utf8(record.key)
                && utf8(record.value)
                && record.headers.iter().all(|(_, v)| utf8(v));
            let text = |b: Option<&'a [u8]>| {
                b.map(|b| {
                    if as_text {
                        Text::Utf8(b)
                    } else {
                        Text::Base64(b)
                    }
                })
            };
            JsonRecord {
                offset: record.offset,
                timestamp: record.timestamp_ms,
                headers: record
                    .headers
                    .iter()
                    .map(|(k, v)| JsonHeader {
                        // Kafka header keys are strings; a non-UTF-8 one is shown lossily.
                        key: String::from_utf8_lossy(k),
                        value: text(v),
                    })
                    .collect(),
                key: text(record.key),
                value: text(record.value),
                encoding: if as_text { "utf8" } else { "base64" },
            }
        })
        .collect();
    axum::Json(JsonAnswer {
        topic,
        partition,
        records,
        next_offset: decoded.next_offset,
        high_watermark: read.high_watermark,
        log_start_offset: read.log_start_offset,
    })
    .into_response()
}

/// True when the `Accept` header asks for the binary format.
fn accepts_binary(headers: &HeaderMap) -> bool {
    headers
        .get_all(header::ACCEPT)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .filter_map(|range| range.split(';').next())
        .any(|essence| essence.trim().eq_ignore_ascii_case(BINARY_CONTENT_TYPE))
}

fn read_params(query: &QueryParams, state: &AppState) -> Result<ReadParams, ApiError> {
    let fetch_max_bytes = state.config.fetch_max_bytes.max(1) as u64;
    let timeout_max_ms = state.config.fetch_timeout_max_ms;
    let offset = query.get("offset").ok_or_else(|| {
        ApiError::bad_request(
            "query parameter 'offset' is required: the first offset to read, an integer from 0 up",
        )
    })?;
    let offset = integer("offset", offset, 0, i64::MAX as u64, "an integer from 0 up")?;
    let max_records = query
        .get("max_records")
        .map_or(Ok(MAX_RECORDS_DEFAULT), |raw| {
            integer(
                "max_records",
                raw,
                1,
                MAX_RECORDS_MAX,
                &format!("an integer from 1 to {MAX_RECORDS_MAX}"),
            )
        })?;
    // Larger asks are capped rather than refused: a client need not know the server's limit.
    let max_bytes = query
        .get("max_bytes")
        .map_or(Ok(MAX_BYTES_DEFAULT), |raw| {
            integer(
                "max_bytes",
                raw,
                1,
                u64::MAX,
                &format!("an integer from 1 up (values over {fetch_max_bytes} are capped to it)"),
            )
        })?
        .min(fetch_max_bytes);
    let timeout_ms = query.get("timeout_ms").map_or(Ok(0), |raw| {
        integer(
            "timeout_ms",
            raw,
            0,
            timeout_max_ms,
            &format!("an integer from 0 to {timeout_max_ms} (milliseconds)"),
        )
    })?;
    let base64 = match query.get("encoding") {
        None | Some("auto") => false,
        Some("base64") => true,
        Some(other) => {
            return Err(ApiError::bad_request(format!(
                "query parameter 'encoding' must be 'auto' or 'base64', got '{other}'"
            )));
        }
    };
    Ok(ReadParams {
        offset: offset as i64,
        max_records: max_records as usize,
        max_bytes: max_bytes as usize,
        timeout: Duration::from_millis(timeout_ms),
        base64,
    })
}

/// `raw` as an integer in `min..=max`, or a 400 naming the parameter and the range.
fn integer(name: &str, raw: &str, min: u64, max: u64, range: &str) -> Result<u64, ApiError> {
    match raw.trim().parse::<u64>() {
        Ok(n) if (min..=max).contains(&n) => Ok(n),
        _ => Err(ApiError::bad_request(format!(
            "query parameter '{name}' must be {range}, got '{raw}'"
        ))),
    }
}

/// A partition number (path segment or query parameter): an integer from 0 up, else 400. (A
/// partition the topic does not have is a 404, checked by the caller.)
pub(crate) fn parse_partition(what: &str, raw: &str) -> Result<u64, ApiError> {
    raw.trim().parse::<u64>().map_err(|e| {
        ApiError::bad_request(format!(
            "{what} must be a partition number (an integer from 0 up), got '{raw}' ({e})"
        ))
    })
}

/// A request's query parameters, each named at most once and all from an allowed list.
#[derive(Debug)]
pub(crate) struct QueryParams {
    pairs: Vec<(String, String)>,
}

impl QueryParams {
    pub(crate) fn new(
        query: Result<Query<Vec<(String, String)>>, QueryRejection>,
        allowed: &[&str],
    ) -> Result<QueryParams, ApiError> {
        let Query(pairs) = query
            .map_err(|e| ApiError::bad_request(format!("bad query string: {}", e.body_text())))?;
        for (i, (name, _)) in pairs.iter().enumerate() {
            if !allowed.contains(&name.as_str()) {
                return Err(ApiError::bad_request(format!(
                    "unknown query parameter '{name}'; this route takes {}",
                    allowed.join(", ")
                )));
            }
            if pairs[..i].iter().any(|(earlier, _)| earlier == name) {
                return Err(ApiError::bad_request(format!(
                    "query parameter '{name}' is given more than once"
                )));
            }
        }
        Ok(QueryParams { pairs })
    }

    pub(crate) fn get(&self, name: &str) -> Option<&str> {
        self.pairs
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }

    pub(crate) fn names(&self) -> impl Iterator<Item = &str> {
        self.pairs.iter().map(|(n, _)| n.as_str())
    }
}

#[cfg(test)]
mod tests {
    use bytes::BytesMut;
    use sluice_protocol::records::{BatchBuilder, RecordRef};

    use super::*;
    use crate::produce::tests::allocations;

    fn read_of(values: &[&[u8]], base_offset: i64) -> ReadResult {
        let mut buf = BytesMut::new();
        let mut builder = BatchBuilder::new(&mut buf);
        for v in values {
            builder.push(&RecordRef {
                key: None,
                value: Some(v),
                headers: &[],
                timestamp_ms: 7,
            });
        }
        builder.finish();
        buf[0..8].copy_from_slice(&base_offset.to_be_bytes());
        ReadResult {
            records: buf.freeze(),
            high_watermark: base_offset + values.len() as i64,
            log_start_offset: 0,
        }
    }

    fn params(offset: i64, max_records: usize, max_bytes: usize) -> ReadParams {
        ReadParams {
            offset,
            max_records,
            max_bytes,
            timeout: Duration::ZERO,
            base64: false,
        }
    }

    #[test]
    fn decode_skips_earlier_records_and_stops_at_the_limits() {
        let read = read_of(&[b"a", b"bb", b"ccc", b"dddd", b"eeeee"], 10);
        let d = decode(&read, &params(12, 100, 1 << 20)).unwrap();
        assert_eq!((d.count, d.first_offset, d.next_offset), (3, Some(12), 15));
        assert_eq!(d.value_bytes, 12);
        let d = decode(&read, &params(10, 2, 1 << 20)).unwrap();
        assert_eq!((d.count, d.next_offset), (2, 12));
        // 1 + 2 = 3 bytes fit, the third record would not.
        let d = decode(&read, &params(10, 100, 4)).unwrap();
        assert_eq!((d.count, d.next_offset), (2, 12));
        // The first record is always taken, even over max_bytes.
        let d = decode(&read, &params(14, 100, 1)).unwrap();
        assert_eq!((d.count, d.next_offset), (1, 15));
    }

    /// A partition log in memory: `batches` batches of `per_batch` records, each value
    /// `value_len` bytes; records every read's offset and asked size.
    struct FakeLog {
        bytes: bytes::Bytes,
        /// (first offset, next offset, start, end) of each batch in `bytes`.
        batches: Vec<(i64, i64, usize, usize)>,
        reads: Vec<(i64, usize)>,
    }

    impl FakeLog {
        fn new(batches: usize, per_batch: usize, value_len: usize) -> FakeLog {
            let value = vec![b'v'; value_len];
            let mut all = BytesMut::new();
            let mut index = Vec::new();
            for b in 0..batches {
                let base = (b * per_batch) as i64;
                let read = read_of(&vec![&value[..]; per_batch], base);
                let start = all.len();
                all.extend_from_slice(&read.records);
                index.push((base, base + per_batch as i64, start, all.len()));
            }
            FakeLog {
                bytes: all.freeze(),
                batches: index,
                reads: Vec::new(),
            }
        }

        fn high_watermark(&self) -> i64 {
            self.batches.last().map_or(0, |b| b.1)
        }

        /// As `PartitionStorage::read`: from the batch holding `offset`, at least one whole batch,
        /// then more while they fit in `max_bytes`.
        fn read(&mut self, offset: i64, max_bytes: usize) -> Result<ReadResult, StorageError> {
            self.reads.push((offset, max_bytes));
            let first = self.batches.iter().position(|b| b.1 > offset);
            let records = match first {
                None => bytes::Bytes::new(),
                Some(i) => {
                    let start = self.batches[i].2;
                    let mut end = self.batches[i].3;
                    for b in &self.batches[i + 1..] {
                        if b.3 - start > max_bytes {
                            break;
                        }
                        end = b.3;
                    }
                    self.bytes.slice(start..end)
                }
            };
            Ok(ReadResult {
                records,
                high_watermark: self.high_watermark(),
                log_start_offset: 0,
            })
        }

        /// `read_on` as `read` runs it: a first read of `FIRST_READ_BYTES` (at most
        /// `max_bytes`), then on.
        fn answer(&mut self, params: &ReadParams) -> Decoded {
            let first_bytes = FIRST_READ_BYTES.min(params.max_bytes);
            let first = self.read(params.offset, first_bytes).unwrap();
            read_on(first, first_bytes, params, |o, m| self.read(o, m))
                .unwrap()
                .0
        }

        fn bytes_read(&self) -> usize {
            // Each read returns whole batches from its offset; sum what each one returned.
            let mut log = FakeLog {
                bytes: self.bytes.clone(),
                batches: self.batches.clone(),
                reads: Vec::new(),
            };
            self.reads
                .iter()
                .map(|&(o, m)| log.read(o, m).unwrap().records.len())
                .sum()
        }
    }

    fn offsets(d: &Decoded) -> Vec<i64> {
        taken(d).map(|r| r.offset).collect()
    }

    #[test]
    fn a_read_stops_reading_once_it_has_max_records() {
        // ~1.2 KiB batches of 10 records, ~1.2 MiB in all.
        let mut log = FakeLog::new(1_000, 10, 100);
        let d = log.answer(&params(0, 10, 64 << 20));
        assert_eq!((d.count, d.next_offset), (10, 10));
        // One read, of the first chunk only, although max_bytes allowed 64 MiB.
        assert_eq!(log.reads, vec![(0, FIRST_READ_BYTES)]);
        assert!(log.bytes_read() <= FIRST_READ_BYTES);

        // Mid-batch start: skip 5, take 3.
        let mut log = FakeLog::new(1_000, 10, 100);
        let d = log.answer(&params(5, 3, 64 << 20));
        assert_eq!(offsets(&d), vec![5, 6, 7]);
        assert_eq!(log.reads.len(), 1);
    }

    #[test]
    fn a_large_read_grows_its_chunks_and_answers_as_one_read_would() {
        let mut log = FakeLog::new(1_000, 10, 100);
        let wanted = params(3, 5_000, 64 << 20);
        let d = log.answer(&wanted);
        assert_eq!(
            (d.count, d.first_offset, d.next_offset),
            (5_000, Some(3), 5_003)
        );
        assert_eq!(offsets(&d), (3..5_003).collect::<Vec<_>>());
        // Chunks double: 64, 128, 256, 512 KiB hold the ~600 KiB needed.
        let sizes: Vec<usize> = log.reads.iter().map(|r| r.1).collect();
        assert_eq!(
            sizes,
            vec![64 << 10, 128 << 10, 256 << 10, 512 << 10],
            "reads: {:?}",
            log.reads
        );
        // Each read starts where the one before ended: every byte is read once.
        assert!(log.bytes_read() <= log.bytes.len());

        // The same answer as decoding one read of everything.
        let mut one = FakeLog::new(1_000, 10, 100);
        let all = one.read(3, 64 << 20).unwrap();
        let whole = decode(&all, &wanted).unwrap();
        assert_eq!(offsets(&whole), offsets(&d));
        assert_eq!(whole.next_offset, d.next_offset);
        assert_eq!(whole.value_bytes, d.value_bytes);

        // To the end of the log: stops at the high watermark.
        let mut log = FakeLog::new(100, 10, 100);
        let d = log.answer(&params(0, 100_000, 64 << 20));
        assert_eq!((d.count, d.next_offset), (1_000, 1_000));
    }

    #[test]
    fn a_read_stays_within_max_bytes_across_chunks() {
        // 10 records of 1,000 value bytes per batch (~10 KiB).
        let mut log = FakeLog::new(1_000, 10, 1_000);
        let max_bytes = 200_000;
        let d = log.answer(&params(0, 100_000, max_bytes));
        // Record bytes: 200 records of 1,000 fit.
        assert_eq!(d.count, 200);
        assert_eq!(d.next_offset, 200);
        // Stored bytes read: within max_bytes plus at most one batch.
        let batch = log.batches[0].3 - log.batches[0].2;
        assert!(
            log.bytes_read() <= max_bytes + batch,
            "read {} bytes",
            log.bytes_read()
        );
    }

    #[test]
    fn a_failed_later_read_answers_with_the_records_in_hand() {
        let mut log = FakeLog::new(1_000, 10, 100);
        let wanted = params(0, 5_000, 64 << 20);
        let first = log.read(0, FIRST_READ_BYTES).unwrap();
        let (d, read) = read_on(first, FIRST_READ_BYTES, &wanted, |_, _| {
            Err(StorageError::OffsetOutOfRange {
                requested: 0,
                log_start: 600,
                high_watermark: 10_000,
            })
        })
        .unwrap();
        assert!(d.count > 0 && d.count < 5_000);
        assert_eq!(d.next_offset, d.count as i64);
        assert_eq!(read.high_watermark, 10_000);
    }

    #[test]
    fn binary_answer_allocates_nothing_per_record() {
        let value = [b'v'; 100];
        let few = read_of(&[&value[..]; 10], 0);
        let many = read_of(&vec![&value[..]; 5_000], 0);
        let count = |read: &ReadResult| {
            allocations(|| {
                let d = decode(read, &params(0, 100_000, 64 << 20)).unwrap();
                binary_answer(&d, read)
            })
        };
        let (few_allocs, _) = count(&few);
        let (many_allocs, response) = count(&many);
        assert_eq!(few_allocs, many_allocs, "allocations grow with records");
        assert_eq!(response.headers()[RECORD_COUNT], "5000");
        assert_eq!(response.headers()[NEXT_OFFSET], "5000");
        assert_eq!(response.headers()[FIRST_OFFSET], "0");
    }

    #[test]
    fn accept_header_picks_binary() {
        let mut h = HeaderMap::new();
        assert!(!accepts_binary(&h));
        h.insert(
            header::ACCEPT,
            HeaderValue::from_static("application/json, application/x-sluice-batch;q=0.9"),
        );
        assert!(accepts_binary(&h));
        h.insert(header::ACCEPT, HeaderValue::from_static("*/*"));
        assert!(!accepts_binary(&h));
    }
}
