//! `POST /topics/{topic}/events`: events for triggers from producers that are not Kafka
//! clients (a web backend, a serverless function, curl), answered once they are durable.
//!
//! An event is `{"event_name": "paid", "entity_id": "user-42", "data": <any JSON>}`; the body
//! is one event or an array of them. Each becomes one ordinary record in the topic:
//!
//! - key: the `entity_id` (UTF-8), so the record goes where a Kafka producer would put that
//!   key (murmur2) and every event of one entity lands in one partition, in order;
//! - header `event`: the `event_name`;
//! - value: `data` as compact JSON text, or no value (null) when `data` is absent or null.
//!
//! A trigger with the default entity (`key`) and event name (`header:event`) reads these
//! records as they are. Flow: check the topic name and the caller's write grant → read the
//! body → check every event (a 400 names the event's index and the field) → produce the
//! records through [`produce::produce_records`], the JSON path of `POST /topics/{topic}/records`
//! (same partitioning, batching, limits, durability and answer). A 4xx means nothing was
//! written.

use std::sync::Arc;

use axum::Json;
use axum::body::Bytes;
use axum::extract::rejection::{BytesRejection, PathRejection};
use axum::extract::{Path, State};
use serde_json::Value;
use sluice_broker::topics::validate_topic_name;
use sluice_protocol::records::ProducerRecord;

use crate::auth::{Access, Principal};
use crate::error::body_error;
use crate::produce::{self, ParsedRecord, ProduceAnswer, Target, json_kind};
use crate::{ApiError, AppState};

/// The header that carries the event name: what a trigger's default `--event header:event`
/// reads.
pub const EVENT_HEADER: &str = "event";

/// The fields an event may have.
const FIELDS: [&str; 3] = ["event_name", "entity_id", "data"];

pub async fn produce_events(
    State(state): State<Arc<AppState>>,
    principal: Principal,
    path: Result<Path<String>, PathRejection>,
    body: Result<Bytes, BytesRejection>,
) -> Result<Json<ProduceAnswer>, ApiError> {
    let Path(topic_name) =
        path.map_err(|e| ApiError::bad_request(format!("bad path: {}", e.body_text())))?;
    validate_topic_name(&topic_name).map_err(|e| ApiError::bad_request(e.to_string()))?;
    principal.require(Access::Write, &topic_name)?;
    let body = body.map_err(body_error)?;
    let records = parse_events(
        &body,
        state.config.max_records_per_request,
        state.broker.now_ms(),
    )?;
    let target = Target::new(&state, &topic_name)?;
    produce::produce_records(&state, &target, &records).await
}

/// Parses a body of one event or a non-empty array of at most `max_events` events into
/// records stamped `now_ms`.
fn parse_events(
    body: &[u8],
    max_events: usize,
    now_ms: i64,
) -> Result<Vec<ParsedRecord>, ApiError> {
    let invalid = |e: serde_json::Error| {
        ApiError::bad_request(format!(
            "invalid JSON body: {e} (send an event {{\"event_name\": ..., \"entity_id\": ..., \"data\": ...}} or an array of them)"
        ))
    };
    if body.iter().all(u8::is_ascii_whitespace) {
        return Err(ApiError::bad_request(
            "the request body is empty; send an event {\"event_name\": ..., \"entity_id\": ...} or an array of them",
        ));
    }
    let events = match serde_json::from_slice::<Value>(body).map_err(invalid)? {
        Value::Array(events) => {
            if events.is_empty() {
                return Err(ApiError::bad_request(
                    "the array holds no events; send at least one",
                ));
            }
            if events.len() > max_events {
                return Err(ApiError::too_large(format!(
                    "{} events in one request; the most allowed is {max_events}",
                    events.len()
                )));
            }
            events
                .into_iter()
                .enumerate()
                .map(|(i, event)| {
                    to_record(event, now_ms).map_err(|e| {
                        ApiError::bad_request(format!("event {i} (counting from 0): {e}"))
                    })
                })
                .collect::<Result<Vec<_>, _>>()?
        }
        event @ Value::Object(_) => vec![
            to_record(event, now_ms)
                .map_err(|e| ApiError::bad_request(format!("the event: {e}")))?,
        ],
        other => {
            return Err(ApiError::bad_request(format!(
                "the body is a JSON {}; send an event object or an array of them",
                json_kind(&other)
            )));
        }
    };
    Ok(events)
}

/// One event as a record; the error names the field that is wrong.
fn to_record(event: Value, now_ms: i64) -> Result<ParsedRecord, String> {
    let Value::Object(mut fields) = event else {
        return Err(format!(
            "is a JSON {}; an event is an object {{\"event_name\": ..., \"entity_id\": ..., \"data\": ...}}",
            json_kind(&event)
        ));
    };
    if let Some(unknown) = fields.keys().find(|k| !FIELDS.contains(&k.as_str())) {
        return Err(format!(
            "unknown field \"{unknown}\"; an event has \"event_name\", \"entity_id\" and \"data\""
        ));
    }
    let mut text = |field: &str| match fields.remove(field) {
        None | Some(Value::Null) => Err(format!("\"{field}\" is missing")),
        Some(Value::String(s)) if s.is_empty() => Err(format!("\"{field}\" is empty")),
        Some(Value::String(s)) => Ok(s),
        Some(other) => Err(format!(
            "\"{field}\" must be a string, got a JSON {}",
            json_kind(&other)
        )),
    };
    let event_name = text("event_name")?;
    let entity_id = text("entity_id")?;
    let value = match fields.remove("data") {
        None | Some(Value::Null) => None,
        Some(data) => Some(Bytes::from(data.to_string())),
    };
    Ok(ParsedRecord {
        record: ProducerRecord {
            key: Some(Bytes::from(entity_id)),
            value,
            headers: vec![(EVENT_HEADER.to_owned(), Some(Bytes::from(event_name)))],
            timestamp_ms: now_ms,
        },
        partition: None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn events_become_keyed_records_with_an_event_header() {
        let body = br#"[
            {"event_name": "signed_up", "entity_id": "user-42", "data": {"plan": "pro", "seats": 3}},
            {"entity_id": "user-7", "event_name": "paid"},
            {"event_name": "note", "entity_id": "u", "data": "text"},
            {"event_name": "none", "entity_id": "u", "data": null}
        ]"#;
        let records = parse_events(body, 10, 1_000).unwrap();
        assert_eq!(records.len(), 4);
        let r = &records[0].record;
        assert_eq!(r.key.as_deref(), Some(&b"user-42"[..]));
        assert_eq!(
            r.headers,
            vec![("event".to_owned(), Some(Bytes::from_static(b"signed_up")))]
        );
        assert_eq!(
            r.value.as_deref(),
            Some(&br#"{"plan":"pro","seats":3}"#[..]),
            "data is compact JSON, keys in the order sent"
        );
        assert_eq!(r.timestamp_ms, 1_000);
        assert_eq!(records[0].partition, None, "partitioned by the key");
        assert_eq!(records[1].record.value, None, "no data: no value");
        assert_eq!(
            records[2].record.value.as_deref(),
            Some(&br#""text""#[..]),
            "a string is JSON too"
        );
        assert_eq!(records[3].record.value, None);

        let one = parse_events(br#"{"event_name": "a", "entity_id": "b"}"#, 1, 0).unwrap();
        assert_eq!(one.len(), 1);
    }

    #[test]
    fn event_errors_name_the_event_and_the_field() {
        let check = |body: &str, status: u16, words: &[&str]| {
            let err = parse_events(body.as_bytes(), 2, 0).unwrap_err();
            assert_eq!(err.status.as_u16(), status, "{}", err.message);
            for w in words {
                assert!(err.message.contains(w), "{w:?} not in {}", err.message);
            }
        };
        check("", 400, &["empty"]);
        check(" \n", 400, &["empty"]);
        check("[]", 400, &["no events"]);
        check("[{}, {}, {}]", 413, &["3 events", "2"]);
        check("{\"event_name\": ", 400, &["invalid JSON"]);
        check("\"paid\"", 400, &["JSON string", "event object"]);
        check(
            "{\"entity_id\": \"u\"}",
            400,
            &["the event", "\"event_name\" is missing"],
        );
        check(
            "[{\"event_name\": \"a\", \"entity_id\": \"u\"}, {\"event_name\": \"a\"}]",
            400,
            &["event 1", "\"entity_id\" is missing"],
        );
        check(
            "{\"event_name\": \"\", \"entity_id\": \"u\"}",
            400,
            &["\"event_name\" is empty"],
        );
        check(
            "{\"event_name\": \"a\", \"entity_id\": \"\"}",
            400,
            &["\"entity_id\" is empty"],
        );
        check(
            "{\"event_name\": \"a\", \"entity_id\": 42}",
            400,
            &["\"entity_id\" must be a string", "number"],
        );
        check(
            "{\"event_name\": [\"a\"], \"entity_id\": \"u\"}",
            400,
            &["\"event_name\" must be a string", "array"],
        );
        check(
            "[{\"event_name\": \"a\", \"entity_id\": \"u\", \"dta\": 1}]",
            400,
            &["event 0", "unknown field \"dta\""],
        );
        check("[1]", 400, &["event 0", "JSON number"]);
    }
}
