//! The deliverer: firings leave the outbox in order, into the sink topic (exactly once) or
//! to the webhook (at least once, then the dead-letter topic), and the state log records how
//! far delivery got.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use sluice_broker::Broker;
use sluice_broker::config::TopicConfig;
use sluice_protocol::partitioner::partition_for_key;
use sluice_protocol::records::{ProducerRecord, encode_batch};
use tokio::sync::watch;

use super::{
    DELIVERY_BATCH, Definition, FIRING_ID_HEADER, IDLE_WAIT, Outbox, RunError, Stats,
    TRIGGER_HEADER, append_state, ensure_topic, sink_ends, storage,
};
use crate::codec::{Fired, LogRecord};
use crate::spec::Sink;
use crate::webhook;

/// The JSON a firing is delivered as (sink record value, webhook body, dead-letter value).
pub fn firing_payload(def: &Definition, names: &[String], fired: &Fired) -> Vec<u8> {
    let entity = match std::str::from_utf8(&fired.entity) {
        Ok(s) => serde_json::json!(s),
        Err(_) => serde_json::json!(fired.entity),
    };
    let events: Vec<serde_json::Value> = fired
        .events
        .iter()
        .map(|&(event, time)| {
            serde_json::json!({
                "event": names.get(event as usize).map_or("?", String::as_str),
                "time_ms": time,
            })
        })
        .collect();
    let body = serde_json::json!({
        "trigger": def.spec.name,
        "firing_id": def.firing_id(fired.seq),
        "entity": entity,
        "fired_at_ms": fired.time_ms,
        "rule": def.spec.rule.to_string(),
        "events": events,
    });
    serde_json::to_vec(&body).expect("JSON of plain values")
}

/// The deliverer task: outbox → sink, in order.
pub(super) async fn deliver(
    broker: Arc<Broker>,
    def: Arc<Definition>,
    stats: Arc<Stats>,
    outbox: Arc<Outbox>,
    mut stop: watch::Receiver<bool>,
) {
    let names: Vec<String> = sluice_rules::eval::Program::compile(&def.spec.rule)
        .event_names()
        .to_vec();
    let client = match &def.spec.sink {
        Sink::Webhook(_) => Some(webhook::WebhookClient::new()),
        Sink::Topic(_) => None,
    };
    loop {
        if *stop.borrow() {
            return;
        }
        let batch: Vec<Fired> = {
            let pending = outbox.pending.lock().expect("outbox lock");
            let n = if client.is_some() { 1 } else { DELIVERY_BATCH };
            pending.iter().take(n).cloned().collect()
        };
        if batch.is_empty() {
            tokio::select! {
                _ = outbox.added.notified() => {}
                _ = tokio::time::sleep(IDLE_WAIT) => {}
                _ = stop.changed() => {}
            }
            continue;
        }
        let result = match (&def.spec.sink, &client) {
            (Sink::Topic(sink), _) => {
                deliver_to_topic(&broker, &def, &names, &outbox, sink, &batch).await
            }
            (Sink::Webhook(url), Some(client)) => {
                deliver_to_webhook(&broker, &def, &names, &stats, client, url, &batch[0], &stop)
                    .await
            }
            (Sink::Webhook(_), None) => unreachable!("client built for webhook sinks"),
        };
        match result {
            Ok(true) => {}
            Ok(false) => return, // stopped
            Err(e) => {
                tracing::warn!(trigger = %def.spec.name, error = %e, "trigger delivery failed; retrying");
                stats.delivery_failures.fetch_add(1, Ordering::Relaxed);
                tokio::select! {
                    _ = tokio::time::sleep(Duration::from_secs(1)) => {}
                    _ = stop.changed() => {}
                }
                continue;
            }
        }
        let next_seq = batch.last().expect("non-empty").seq + 1;
        let marks = sink_ends(&broker, &def.spec);
        if let Err(e) = append_state(
            &broker,
            &def.state_topic(),
            &LogRecord::Delivered {
                next_seq,
                sink_marks: marks.clone(),
            },
        )
        .await
        {
            tracing::warn!(trigger = %def.spec.name, error = %e, "could not record a delivery");
        }
        outbox.delivered_seq.store(next_seq, Ordering::Release);
        *outbox.sink_marks.lock().expect("outbox lock") = marks;
        {
            let mut pending = outbox.pending.lock().expect("outbox lock");
            while pending.front().is_some_and(|f| f.seq < next_seq) {
                pending.pop_front();
            }
        }
        stats
            .delivered
            .fetch_add(batch.len() as u64, Ordering::Relaxed);
        outbox.taken.notify_one();
    }
}

fn sink_record(
    def: &Definition,
    names: &[String],
    fired: &Fired,
    extra: Vec<(String, Option<Bytes>)>,
) -> ProducerRecord {
    let mut headers = vec![
        (
            TRIGGER_HEADER.to_owned(),
            Some(Bytes::from(def.spec.name.clone())),
        ),
        (
            FIRING_ID_HEADER.to_owned(),
            Some(Bytes::from(def.firing_id(fired.seq))),
        ),
    ];
    headers.extend(extra);
    ProducerRecord {
        key: Some(Bytes::from(fired.entity.clone())),
        value: Some(Bytes::from(firing_payload(def, names, fired))),
        headers,
        timestamp_ms: fired.time_ms,
    }
}

/// Appends `records` to `topic`, partitioned by key as Kafka producers do; durable on return.
async fn append_keyed(
    broker: &Broker,
    topic: &str,
    records: Vec<ProducerRecord>,
) -> Result<(), RunError> {
    let t = broker
        .topics()
        .get(topic)
        .ok_or_else(|| RunError::Storage(format!("topic {topic:?} does not exist")))?;
    let n = t.partition_count().max(1) as u32;
    let mut by_partition: BTreeMap<i32, Vec<ProducerRecord>> = BTreeMap::new();
    for r in records {
        let p = partition_for_key(r.key.as_deref().unwrap_or_default(), n) as i32;
        by_partition.entry(p).or_default().push(r);
    }
    let mut appended = Vec::new();
    for (p, records) in by_partition {
        let mut buf = BytesMut::new();
        encode_batch(&mut buf, &records);
        appended.push(
            broker
                .append(&t, p, &buf)
                .map_err(|e| storage(&format!("appending to {topic:?}"), e))?,
        );
    }
    for a in appended {
        a.durable()
            .await
            .map_err(|e| storage(&format!("appending to {topic:?}"), e))?;
    }
    Ok(())
}

async fn deliver_to_topic(
    broker: &Broker,
    def: &Definition,
    names: &[String],
    outbox: &Outbox,
    sink: &str,
    batch: &[Fired],
) -> Result<bool, RunError> {
    // After a failed append some partitions' records may be durable: read the sink back
    // before writing again, so the retry writes only the firings that are not there.
    if outbox.reread_sink.load(Ordering::Acquire) {
        let marks = outbox.sink_marks.lock().expect("outbox lock").clone();
        let found = super::recover::firings_in_sink(broker, def, &marks).await?;
        *outbox.in_sink.lock().expect("outbox lock") = found;
        outbox.reread_sink.store(false, Ordering::Release);
    }
    let records: Vec<ProducerRecord> = {
        let in_sink = outbox.in_sink.lock().expect("outbox lock");
        batch
            .iter()
            .filter(|f| !in_sink.contains(&f.seq))
            .map(|f| sink_record(def, names, f, Vec::new()))
            .collect()
    };
    if !records.is_empty() {
        if broker.topics().get(sink).is_none() {
            ensure_topic(broker, sink, TopicConfig::default(), 0)?;
        }
        if let Err(e) = append_keyed(broker, sink, records).await {
            outbox.reread_sink.store(true, Ordering::Release);
            return Err(e);
        }
    }
    let mut in_sink = outbox.in_sink.lock().expect("outbox lock");
    for f in batch {
        in_sink.remove(&f.seq);
    }
    Ok(true)
}

#[allow(clippy::too_many_arguments)]
async fn deliver_to_webhook(
    broker: &Broker,
    def: &Definition,
    names: &[String],
    stats: &Stats,
    client: &webhook::WebhookClient,
    url: &str,
    fired: &Fired,
    stop: &watch::Receiver<bool>,
) -> Result<bool, RunError> {
    let payload = Bytes::from(firing_payload(def, names, fired));
    let policy = webhook::RetryPolicy {
        max_attempts: def.spec.max_attempts,
        initial_backoff_ms: def.spec.initial_backoff_ms,
        max_backoff_ms: def.spec.max_backoff_ms,
    };
    let secret = def.spec.secret.clone().unwrap_or_default();
    let firing_id = def.firing_id(fired.seq);
    let firing = webhook::Firing {
        url,
        secret: secret.as_bytes(),
        trigger_name: &def.spec.name,
        idempotency_key: &firing_id,
        payload,
    };
    let clock = || broker.now_ms();
    let mut stop = stop.clone();
    let outcome = webhook::deliver(client, &firing, &policy, &clock, &mut stop).await;
    match outcome {
        webhook::Outcome::Delivered { attempts } => {
            if attempts > 1 {
                stats
                    .delivery_failures
                    .fetch_add(u64::from(attempts - 1), Ordering::Relaxed);
            }
            Ok(true)
        }
        webhook::Outcome::Failed {
            attempts,
            last_error,
        } => {
            stats
                .delivery_failures
                .fetch_add(u64::from(attempts), Ordering::Relaxed);
            let dlq = def
                .spec
                .dead_letter_topic
                .clone()
                .unwrap_or_else(|| format!("{}.dead-letter", def.spec.name));
            tracing::warn!(trigger = %def.spec.name, attempts, error = %last_error, dead_letter_topic = %dlq, "webhook delivery failed every attempt; firing sent to the dead-letter topic");
            ensure_topic(broker, &dlq, TopicConfig::default(), 0)?;
            let record = sink_record(
                def,
                names,
                fired,
                vec![
                    ("sluice-error".to_owned(), Some(Bytes::from(last_error))),
                    (
                        "sluice-attempts".to_owned(),
                        Some(Bytes::from(attempts.to_string())),
                    ),
                    (
                        "sluice-webhook-url".to_owned(),
                        Some(Bytes::from(url.to_owned())),
                    ),
                ],
            );
            append_keyed(broker, &dlq, vec![record]).await?;
            stats.dead_lettered.fetch_add(1, Ordering::Relaxed);
            Ok(true)
        }
        webhook::Outcome::Stopped { .. } => Ok(false),
    }
}
