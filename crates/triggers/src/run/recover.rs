//! Recovery: a trigger's state rebuilt from its state log (the last snapshot, then every
//! step and delivery record after it), and the firings a topic sink already holds.

use std::collections::{BTreeMap, HashMap, HashSet, VecDeque};
use std::sync::Arc;
use std::sync::atomic::Ordering;

use sluice_broker::Broker;
use sluice_broker::storage::PartitionStorage;
use sluice_protocol::records::{Batches, DECOMPRESSED_BYTES_MAX, RecordView};

use super::{
    Definition, FIRING_ID_HEADER, MAX_ENTITIES, Outbox, READ_MAX_BYTES, RunError,
    STATE_MAX_MESSAGE_BYTES, storage,
};
use crate::codec::{Fired, LogRecord};
use crate::engine::Engine;
use crate::spec::Sink;

pub(super) struct Recovered {
    pub(super) engine: Engine,
    pub(super) positions: HashMap<(u16, i32), i64>,
    pub(super) clock_ms: i64,
    pub(super) bytes_since_snapshot: u64,
    pub(super) snapshot_bytes: u64,
    pub(super) snapshot_id: u64,
    pub(super) elapsed_ms: u64,
}

/// Rebuilds the trigger's state from its state log: the last snapshot, then every record
/// after it. Then finds which pending firings a topic sink already holds.
pub(super) async fn recover(
    broker: &Arc<Broker>,
    def: &Definition,
    outbox: &Outbox,
) -> Result<Recovered, RunError> {
    let started = std::time::Instant::now();
    let topic_name = def.state_topic();
    let topic = broker
        .topics()
        .get(&topic_name)
        .ok_or_else(|| RunError::Corrupt(format!("state topic {topic_name:?} does not exist")))?;
    let part = topic
        .partition(0)
        .ok_or_else(|| RunError::Corrupt("state topic has no partition 0".to_owned()))?;
    // Pass 1: where does the last complete snapshot start?
    // (End offset, its first chunk offset, its snapshot id)
    let mut last_end: Option<(i64, i64, u64)> = None;
    let mut error = None;
    // Only `End` records are decoded here (their kind is the first byte); the others are
    // decoded once, in pass 2.
    scan_raw(broker, &*part, part.log_start_offset(), |view| {
        if view.value.and_then(|v| v.first()) != Some(&crate::codec::KIND_END) {
            return;
        }
        match view.value.map(LogRecord::decode) {
            Some(Ok(LogRecord::End {
                first_chunk_offset,
                snapshot,
                ..
            })) => last_end = Some((view.offset, first_chunk_offset, snapshot)),
            Some(Err(e)) => {
                error.get_or_insert(RunError::Corrupt(format!("record {}: {e}", view.offset)));
            }
            _ => {}
        }
    })
    .await?;
    if let Some(e) = error {
        return Err(e);
    }
    let (end_offset, first_chunk, end_snapshot) = last_end.ok_or_else(|| {
        RunError::Corrupt("no snapshot in the state log (not initialized)".to_owned())
    })?;
    // A snapshot without chunks (no entities) records -1: it starts at its End.
    let from = if first_chunk < 0 {
        end_offset
    } else {
        first_chunk.clamp(part.log_start_offset(), end_offset)
    };
    // Pass 2: the snapshot, then everything after it.
    let mut engine = Engine::new(&def.spec.rule, broker.now_ms(), 0, MAX_ENTITIES);
    let mut positions = HashMap::new();
    let mut clock_ms = i64::MIN;
    let mut next_seq = 0u64;
    let mut delivered = 0u64;
    let mut marks = Vec::new();
    let mut pending: BTreeMap<u64, Fired> = BTreeMap::new();
    let mut snapshot_id = 0;
    let mut snapshot_bytes = 0u64;
    let mut bytes_after = 0u64;
    let mut error = None;
    scan(broker, &*part, from, |offset, record| {
        match record {
            LogRecord::Chunk { snapshot, entities }
                if snapshot == end_snapshot && offset < end_offset =>
            {
                for (entity, state) in entities {
                    snapshot_bytes += (entity.len() + state.len()) as u64;
                    if let Err(e) = engine.restore(&entity, &state) {
                        error.get_or_insert(e);
                    }
                }
            }
            LogRecord::Chunk { .. } => {} // another snapshot's (one cut short by a crash)
            LogRecord::End {
                snapshot,
                positions: p,
                clock_ms: c,
                next_seq: n,
                delivered_seq,
                sink_marks,
                pending: snapshot_pending,
                ..
            } if offset == end_offset => {
                snapshot_id = snapshot;
                positions = p
                    .iter()
                    .map(|p| ((p.source, p.partition), p.next_offset))
                    .collect();
                clock_ms = c;
                next_seq = n;
                delivered = delivered.max(delivered_seq);
                marks = sink_marks;
                for f in snapshot_pending {
                    pending.insert(f.seq, f);
                }
            }
            LogRecord::End { .. } => {}
            LogRecord::Step {
                positions: p,
                clock_ms: c,
                updates,
                firings,
            } if offset > end_offset => {
                bytes_after += 64;
                for pos in p {
                    positions.insert((pos.source, pos.partition), pos.next_offset);
                }
                clock_ms = clock_ms.max(c);
                for (entity, state) in updates {
                    bytes_after += (entity.len() + state.as_ref().map_or(0, Vec::len)) as u64;
                    match state {
                        Some(state) => {
                            if let Err(e) = engine.restore(&entity, &state) {
                                error.get_or_insert(e);
                            }
                        }
                        None => engine.forget(&entity),
                    }
                }
                for f in firings {
                    next_seq = next_seq.max(f.seq + 1);
                    pending.insert(f.seq, f);
                }
            }
            LogRecord::Step { .. } => {} // before the snapshot: already in it
            LogRecord::Delivered {
                next_seq: d,
                sink_marks,
            } => {
                if d > delivered {
                    delivered = d;
                    marks = sink_marks;
                }
            }
        }
        Ok(())
    })
    .await?;
    if let Some(e) = error {
        return Err(RunError::Corrupt(e));
    }
    engine.finish_restore(clock_ms, next_seq);
    let pending: VecDeque<Fired> = pending
        .into_values()
        .filter(|f| f.seq >= delivered)
        .collect();
    // A topic sink may already hold some pending firings (delivered, but the crash came
    // before the delivery record): find them so they are not written twice.
    let in_sink = if pending.is_empty() {
        HashSet::new()
    } else {
        firings_in_sink(broker, def, &marks).await?
    };
    outbox.delivered_seq.store(delivered, Ordering::Release);
    *outbox.sink_marks.lock().expect("outbox lock") = marks;
    *outbox.in_sink.lock().expect("outbox lock") = in_sink;
    *outbox.pending.lock().expect("outbox lock") = pending;
    Ok(Recovered {
        engine,
        positions,
        clock_ms,
        bytes_since_snapshot: bytes_after,
        snapshot_bytes,
        snapshot_id,
        elapsed_ms: started.elapsed().as_millis() as u64,
    })
}

/// Reads every record of a state-log partition from `from` to its high watermark.
pub(super) async fn scan(
    broker: &Broker,
    part: &dyn PartitionStorage,
    from: i64,
    mut each: impl FnMut(i64, LogRecord) -> Result<(), RunError>,
) -> Result<(), RunError> {
    let mut error = None;
    scan_raw(broker, part, from, |view| {
        if error.is_some() {
            return;
        }
        let Some(value) = view.value else {
            error = Some(RunError::Corrupt(format!(
                "record {} has no value",
                view.offset
            )));
            return;
        };
        match LogRecord::decode(value) {
            Ok(record) => {
                if let Err(e) = each(view.offset, record) {
                    error = Some(e);
                }
            }
            Err(e) => error = Some(RunError::Corrupt(format!("record {}: {e}", view.offset))),
        }
    })
    .await?;
    error.map_or(Ok(()), Err)
}

/// Calls `each` for every record of `part` from `from` to the high watermark as of the call.
pub(super) async fn scan_raw(
    broker: &Broker,
    part: &dyn PartitionStorage,
    from: i64,
    mut each: impl FnMut(&RecordView<'_>),
) -> Result<(), RunError> {
    let end = part.high_watermark();
    let mut offset = from.max(part.log_start_offset());
    while offset < end {
        let read = broker
            .read(
                part,
                offset,
                READ_MAX_BYTES.max(STATE_MAX_MESSAGE_BYTES),
                None,
            )
            .await
            .map_err(|e| storage("reading", e))?;
        if read.records.is_empty() {
            break;
        }
        for batch in Batches::new(read.records) {
            let batch = batch.map_err(|e| storage("reading", e))?;
            let next = batch.next_offset();
            if batch.is_control() {
                offset = next;
                continue;
            }
            let records = batch
                .iter_records(DECOMPRESSED_BYTES_MAX)
                .map_err(|e| storage("reading", e))?;
            for view in records.iter() {
                let view = view.map_err(|e| storage("reading", e))?;
                if view.offset >= offset && view.offset < end {
                    each(&view);
                }
            }
            offset = next;
        }
    }
    Ok(())
}

/// The firings of this trigger incarnation found in its sink topic from `marks` (where each
/// sink partition ended after the last recorded delivery; a partition without a mark is read
/// from its start) to the end: delivered, though maybe not recorded as delivered. Empty for a
/// webhook sink.
pub(super) async fn firings_in_sink(
    broker: &Broker,
    def: &Definition,
    marks: &[crate::codec::SinkMark],
) -> Result<HashSet<u64>, RunError> {
    let mut in_sink = HashSet::new();
    let Sink::Topic(sink) = &def.spec.sink else {
        return Ok(in_sink);
    };
    let Some(topic) = broker.topics().get(sink) else {
        return Ok(in_sink);
    };
    let prefix = format!("{}:{:x}:", def.spec.name, def.incarnation);
    for (p, part) in topic.partitions().iter().enumerate() {
        let from = marks
            .iter()
            .find(|m| m.partition == p as i32)
            .map_or(part.log_start_offset(), |m| m.end_offset);
        scan_raw(broker, &**part, from, |view| {
            for (key, value) in view.headers.iter() {
                if key == FIRING_ID_HEADER.as_bytes()
                    && let Some(seq) = value
                        .and_then(|v| std::str::from_utf8(v).ok())
                        .and_then(|v| v.strip_prefix(&prefix))
                        .and_then(|v| v.parse::<u64>().ok())
                {
                    in_sink.insert(seq);
                }
            }
        })
        .await?;
    }
    Ok(in_sink)
}
