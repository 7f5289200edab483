//! One running trigger: reads its sources, evaluates, writes its state log, delivers firings.
//!
//! Two tasks per trigger:
//!
//! - the **evaluator** reads the source partitions from its positions, takes each record's
//!   entity id and event name, feeds the [`Engine`], moves time (record timestamps while it
//!   catches up, the broker's clock once it has), and writes each step (state changes, new
//!   positions, firings) as one record of the state log. Only once that record is durable do
//!   the step's firings join the outbox: a firing exists exactly when the state that made it
//!   does, so a crash at any point neither loses nor repeats an evaluation.
//! - the **deliverer** takes firings from the outbox in order, writes them to the sink topic
//!   (or POSTs them to the webhook, with retries, then the dead-letter topic), and records in
//!   the state log how far it got. After a crash, firings past that record are delivered
//!   again: for a topic sink, the sink's partitions are first read from where they ended at
//!   that record, and firings found there (by their `sluice-firing-id` header) are not written
//!   again, so each firing is in the sink exactly once. A webhook is called at least once per
//!   firing, with the same `Idempotency-Key` every time.
//!
//! Recovery reads the state log from its start: the last snapshot (`Chunk`s then `End`), then
//! every step and delivery record after it.

use std::collections::{BTreeMap, HashMap, HashSet, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use sluice_broker::config::TopicConfig;
use sluice_broker::storage::{PartitionStorage, StorageError};
use sluice_broker::{Broker, Topic};
use sluice_protocol::records::{
    Batches, DECOMPRESSED_BYTES_MAX, ProducerRecord, RecordView, encode_batch,
};
use tokio::sync::{Notify, watch};

mod deliver;
mod recover;

pub use deliver::firing_payload;

use crate::codec::{Fired, LogRecord, Position, SinkMark};
use crate::engine::{Engine, Refused};
use crate::spec::{EntityFrom, NameFrom, Sink, StartFrom, TriggerSpec};

/// Most bytes one read of a source partition asks for.
const READ_MAX_BYTES: usize = 1 << 20;

/// A step is written once its record would pass this size (and at the end of every pass over
/// the sources). Under the state topic's `max.message.bytes` ([`STATE_MAX_MESSAGE_BYTES`]) with
/// room for one more update.
const STEP_MAX_BYTES: usize = 4 << 20;

/// `max.message.bytes` of a trigger's state topic.
const STATE_MAX_MESSAGE_BYTES: usize = 8 << 20;

/// Bytes per snapshot chunk record.
const CHUNK_BYTES: usize = 1 << 20;

/// A snapshot is taken once the state log has grown by this much since the last one, or by
/// twice the last snapshot's size if that is more (so a large state is not rewritten often).
pub const SNAPSHOT_AFTER_BYTES: u64 = 64 << 20;

/// Settings of the runtime that tests change (the defaults are the constants above).
#[derive(Debug, Clone, Copy)]
pub struct Tuning {
    /// See [`SNAPSHOT_AFTER_BYTES`].
    pub snapshot_after_bytes: u64,
}

impl Default for Tuning {
    fn default() -> Self {
        Tuning {
            snapshot_after_bytes: SNAPSHOT_AFTER_BYTES,
        }
    }
}

/// Firings made but not delivered; past this the evaluator stops reading until the sink
/// catches up (a webhook that is down does not grow memory without bound).
const OUTBOX_MAX: usize = 100_000;

/// Firings written to a sink topic per delivery round.
const DELIVERY_BATCH: usize = 500;

/// Longest wait between passes when nothing happens (the broker's clock is read again).
const IDLE_WAIT: Duration = Duration::from_millis(500);

/// A step with new positions but no state change is still written after this long, so a
/// restart does not re-read much.
const POSITIONS_EVERY_MS: i64 = 5_000;

/// Most entities one trigger keeps; records that would add one more are skipped and counted.
pub const MAX_ENTITIES: usize = 10_000_000;

/// Header carrying a firing's identity on sink and dead-letter records.
pub const FIRING_ID_HEADER: &str = "sluice-firing-id";
/// Header naming the trigger on sink and dead-letter records.
pub const TRIGGER_HEADER: &str = "sluice-trigger";

/// What the manager stores for a trigger: its spec and its incarnation (a trigger deleted
/// and created again under the same name is a new incarnation, with a new state topic).
#[derive(Debug, Clone)]
pub struct Definition {
    pub spec: TriggerSpec,
    pub incarnation: u64,
}

impl Definition {
    /// The internal topic holding this incarnation's state log.
    pub fn state_topic(&self) -> String {
        format!("__sluice_trigger.{}.{:x}", self.spec.name, self.incarnation)
    }

    /// The firing id of firing `seq`: the webhook's idempotency key, the sink's header.
    pub fn firing_id(&self, seq: u64) -> String {
        format!("{}:{:x}:{seq}", self.spec.name, self.incarnation)
    }
}

/// A running trigger's counters and state, read by `describe`.
#[derive(Debug, Default)]
pub struct Stats {
    pub events: AtomicU64,
    pub ignored: AtomicU64,
    pub firings: AtomicU64,
    pub delivered: AtomicU64,
    pub delivery_failures: AtomicU64,
    pub dead_lettered: AtomicU64,
    pub entities: AtomicU64,
    pub state_bytes: AtomicU64,
    pub skipped: Mutex<BTreeMap<&'static str, u64>>,
    /// `starting`, `running` or `failed`, and why.
    pub state: Mutex<(&'static str, Option<String>)>,
    /// Where the evaluator is, per source partition, for the lag.
    pub positions: Mutex<Vec<(String, i32, i64)>>,
}

impl Stats {
    fn skip(&self, reason: &'static str, detail: impl FnOnce() -> String) {
        let n = {
            let mut skipped = self.skipped.lock().expect("stats lock");
            let n = skipped.entry(reason).or_insert(0);
            *n += 1;
            *n
        };
        // The first few of each reason, then one in a thousand: enough to find the cause
        // without a log line per bad record.
        if n <= 5 || n % 1000 == 0 {
            tracing::warn!(
                reason,
                skipped = n,
                "trigger skipped a record: {}",
                detail()
            );
        }
    }

    fn set_state(&self, state: &'static str, error: Option<String>) {
        *self.state.lock().expect("stats lock") = (state, error);
    }
}

/// Why a trigger stopped.
#[derive(Debug, thiserror::Error)]
pub enum RunError {
    #[error("{0}")]
    Storage(String),
    #[error("state log: {0}")]
    Corrupt(String),
}

fn storage(what: &str, e: impl std::fmt::Display) -> RunError {
    RunError::Storage(format!("{what}: {e}"))
}

/// The outbox shared by the evaluator and the deliverer.
#[derive(Debug, Default)]
struct Outbox {
    pending: Mutex<VecDeque<Fired>>,
    /// Firings below this were delivered.
    delivered_seq: AtomicU64,
    sink_marks: Mutex<Vec<SinkMark>>,
    /// Firing seqs found already in the sink at recovery (not written again).
    in_sink: Mutex<HashSet<u64>>,
    /// A sink append failed: `in_sink` must be read again before the next one.
    reread_sink: std::sync::atomic::AtomicBool,
    added: Notify,
    taken: Notify,
}

/// Creates the internal topics a new trigger needs and writes its first state record (the
/// start positions), durably, before the trigger is announced: events produced after
/// `create` answers are seen even with `start: latest`.
pub async fn initialize(broker: &Arc<Broker>, def: &Definition) -> Result<(), RunError> {
    ensure_topic(broker, &def.state_topic(), state_topic_config(), 1)?;
    if let Sink::Topic(sink) = &def.spec.sink {
        ensure_topic(broker, sink, TopicConfig::default(), 0)?;
    }
    if let Some(dlq) = &def.spec.dead_letter_topic {
        ensure_topic(broker, dlq, TopicConfig::default(), 0)?;
    }
    let mut positions = Vec::new();
    for (i, source) in def.spec.sources.iter().enumerate() {
        let topic = broker
            .topics()
            .get(source)
            .ok_or_else(|| RunError::Storage(format!("source topic {source:?} does not exist")))?;
        for (p, partition) in topic.partitions().iter().enumerate() {
            positions.push(Position {
                source: i as u16,
                partition: p as i32,
                next_offset: match def.spec.start {
                    StartFrom::Latest => partition.high_watermark(),
                    StartFrom::Earliest => partition.log_start_offset(),
                },
            });
        }
    }
    let sink_marks = sink_ends(broker, &def.spec);
    let record = LogRecord::End {
        snapshot: 0,
        first_chunk_offset: 0,
        positions,
        clock_ms: broker.now_ms(),
        next_seq: 0,
        delivered_seq: 0,
        sink_marks,
        pending: Vec::new(),
    };
    append_state(broker, &def.state_topic(), &record).await?;
    Ok(())
}

/// Deletes a trigger's state topic (after its tasks stopped).
pub fn remove_state(broker: &Broker, def: &Definition) {
    if let Err(e) = broker.delete_topic(&def.state_topic()) {
        tracing::warn!(trigger = %def.spec.name, error = %e, "could not delete the trigger's state topic");
    }
}

fn state_topic_config() -> TopicConfig {
    let mut c = BTreeMap::new();
    c.insert("retention.ms".to_owned(), "-1".to_owned());
    c.insert("retention.bytes".to_owned(), "-1".to_owned());
    c.insert(
        "max.message.bytes".to_owned(),
        STATE_MAX_MESSAGE_BYTES.to_string(),
    );
    TopicConfig(c)
}

/// Creates `name` unless it exists (`partitions` 0: the broker's default count).
pub fn ensure_topic(
    broker: &Broker,
    name: &str,
    config: TopicConfig,
    partitions: i32,
) -> Result<Arc<Topic>, RunError> {
    if let Some(topic) = broker.topics().get(name) {
        return Ok(topic);
    }
    let partitions = if partitions > 0 {
        partitions
    } else {
        broker.config().default_partitions.max(1)
    };
    match broker.create_topic(name, partitions, config) {
        Ok(topic) => Ok(topic),
        Err(sluice_broker::topics::TopicError::AlreadyExists(_)) => broker
            .topics()
            .get(name)
            .ok_or_else(|| RunError::Storage(format!("topic {name:?} vanished"))),
        Err(e) => Err(storage(&format!("creating topic {name:?}"), e)),
    }
}

fn sink_ends(broker: &Broker, spec: &TriggerSpec) -> Vec<SinkMark> {
    let Sink::Topic(sink) = &spec.sink else {
        return Vec::new();
    };
    let Some(topic) = broker.topics().get(sink) else {
        return Vec::new();
    };
    topic
        .partitions()
        .iter()
        .enumerate()
        .map(|(p, part)| SinkMark {
            partition: p as i32,
            end_offset: part.high_watermark(),
        })
        .collect()
}

async fn append_state(broker: &Broker, topic: &str, record: &LogRecord) -> Result<i64, RunError> {
    let mut value = Vec::new();
    record.encode(&mut value);
    append_records(
        broker,
        topic,
        0,
        &[ProducerRecord {
            key: None,
            value: Some(Bytes::from(value)),
            headers: Vec::new(),
            timestamp_ms: broker.now_ms(),
        }],
    )
    .await
}

/// Appends `records` as one batch to one partition and waits until they are durable; returns
/// the first record's offset.
async fn append_records(
    broker: &Broker,
    topic: &str,
    partition: i32,
    records: &[ProducerRecord],
) -> Result<i64, RunError> {
    let t = broker
        .topics()
        .get(topic)
        .ok_or_else(|| RunError::Storage(format!("topic {topic:?} does not exist")))?;
    let mut buf = BytesMut::new();
    encode_batch(&mut buf, records);
    let appended = broker
        .append(&t, partition, &buf)
        .map_err(|e| storage(&format!("appending to {topic:?}"), e))?;
    appended
        .durable()
        .await
        .map_err(|e| storage(&format!("appending to {topic:?}"), e))?;
    Ok(appended.base_offset)
}

/// Runs a trigger until `stop` becomes true.
///
/// A failure (a state-log write or a read that fails: disk full, the object store down) does
/// not end the trigger: its in-memory state may be ahead of what is durable, so it is thrown
/// away, and the trigger recovers again from its state log after a wait (doubling from 1 s to
/// a minute), the status saying why meanwhile.
pub async fn run(
    broker: Arc<Broker>,
    def: Arc<Definition>,
    stats: Arc<Stats>,
    tuning: Tuning,
    mut stop: watch::Receiver<bool>,
) {
    let mut wait = Duration::from_secs(1);
    loop {
        stats.set_state("starting", None);
        let error = match run_once(&broker, &def, &stats, tuning, &mut stop).await {
            Ok(()) => return,
            Err(e) => e,
        };
        tracing::error!(trigger = %def.spec.name, error = %error, retry_in_ms = wait.as_millis() as u64, "trigger failed; it recovers its state again after a wait");
        stats.set_state(
            "failed",
            Some(format!(
                "{error} (recovering again in {} s)",
                wait.as_secs()
            )),
        );
        tokio::select! {
            _ = tokio::time::sleep(wait) => {}
            _ = stop.changed() => {}
        }
        if *stop.borrow() {
            return;
        }
        wait = (wait * 2).min(Duration::from_secs(60));
    }
}

/// Recovers, then runs the evaluator and the deliverer until `stop` (Ok) or a failure (Err).
async fn run_once(
    broker: &Arc<Broker>,
    def: &Arc<Definition>,
    stats: &Arc<Stats>,
    tuning: Tuning,
    stop: &mut watch::Receiver<bool>,
) -> Result<(), RunError> {
    let outbox = Arc::new(Outbox::default());
    let recovered = recover::recover(broker, def, &outbox).await?;
    tracing::info!(
        trigger = %def.spec.name,
        entities = recovered.engine.entities(),
        pending = outbox.pending.lock().expect("outbox lock").len(),
        elapsed_ms = recovered.elapsed_ms,
        "trigger recovered its state"
    );
    stats
        .entities
        .store(recovered.engine.entities() as u64, Ordering::Relaxed);
    stats
        .state_bytes
        .store(recovered.engine.state_bytes() as u64, Ordering::Relaxed);
    stats.set_state("running", None);
    // The deliverer stops with the trigger, or when this run fails.
    let (deliverer_stop, deliverer_stop_rx) = watch::channel(false);
    let deliverer = tokio::spawn(deliver::deliver(
        Arc::clone(broker),
        Arc::clone(def),
        Arc::clone(stats),
        Arc::clone(&outbox),
        deliverer_stop_rx,
    ));
    let mut evaluator = Evaluator {
        broker: Arc::clone(broker),
        def: Arc::clone(def),
        stats: Arc::clone(stats),
        outbox,
        engine: recovered.engine,
        positions: recovered.positions,
        clock_ms: recovered.clock_ms,
        log_bytes_since_snapshot: recovered.bytes_since_snapshot,
        last_snapshot_bytes: recovered.snapshot_bytes,
        snapshot_id: recovered.snapshot_id,
        last_step_ms: broker.now_ms(),
        positions_moved: false,
        tuning,
    };
    let result = evaluator.run(stop).await;
    let _ = deliverer_stop.send(true);
    let _ = deliverer.await;
    result
}

struct Evaluator {
    broker: Arc<Broker>,
    def: Arc<Definition>,
    stats: Arc<Stats>,
    outbox: Arc<Outbox>,
    engine: Engine,
    positions: HashMap<(u16, i32), i64>,
    clock_ms: i64,
    log_bytes_since_snapshot: u64,
    last_snapshot_bytes: u64,
    snapshot_id: u64,
    last_step_ms: i64,
    positions_moved: bool,
    tuning: Tuning,
}

/// Where a record's entity id and event name are, decoded once per record.
enum Extracted<'a> {
    Event(std::borrow::Cow<'a, [u8]>, sluice_rules::eval::EventId),
    /// The rule does not mention this event.
    Ignored,
    Skip(&'static str, String),
}

impl Evaluator {
    async fn run(&mut self, stop: &mut watch::Receiver<bool>) -> Result<(), RunError> {
        let spec = self.def.spec.clone();
        loop {
            if *stop.borrow() {
                return Ok(());
            }
            // Back-pressure: the sink is behind.
            if self.outbox.pending.lock().expect("outbox lock").len() >= OUTBOX_MAX {
                tokio::select! {
                    _ = self.outbox.taken.notified() => {}
                    _ = tokio::time::sleep(IDLE_WAIT) => {}
                    _ = stop.changed() => {}
                }
                continue;
            }
            let mut waits: Vec<(Arc<dyn PartitionStorage>, i64)> = Vec::new();
            let mut read_any = false;
            let mut missing = None;
            for (i, source) in spec.sources.iter().enumerate() {
                let Some(topic) = self.broker.topics().get(source) else {
                    missing = Some(source.clone());
                    continue;
                };
                for (p, part) in topic.partitions().into_iter().enumerate() {
                    let key = (i as u16, p as i32);
                    let pos = *self
                        .positions
                        .entry(key)
                        .or_insert_with(|| part.log_start_offset());
                    let hwm = part.high_watermark();
                    if pos < hwm {
                        self.read_partition(&spec, i, source, p as i32, &*part)
                            .await?;
                        read_any = true;
                        if self.engine.step_bytes() >= STEP_MAX_BYTES {
                            self.write_step().await?;
                        }
                    } else {
                        waits.push((part, pos));
                    }
                }
            }
            match missing {
                Some(source) => self.stats.set_state(
                    "running",
                    Some(format!(
                        "source topic {source:?} does not exist; waiting for it"
                    )),
                ),
                None => self.stats.set_state("running", None),
            }
            if read_any {
                self.engine.advance(self.clock_ms);
                self.write_step_if_due().await?;
                continue;
            }
            // Caught up: time is the broker's clock.
            let now = self.broker.now_ms();
            if now > self.clock_ms {
                self.clock_ms = now;
            }
            self.engine.advance(self.clock_ms);
            self.write_step_if_due().await?;
            self.publish_positions();
            let mut wait = IDLE_WAIT;
            if let Some(deadline) = self.engine.next_deadline() {
                let until = deadline.saturating_sub(self.clock_ms).max(1) as u64;
                wait = wait.min(Duration::from_millis(until));
            }
            let deadline = tokio::time::Instant::now() + wait;
            tokio::select! {
                _ = sluice_broker::storage::wait_for_data(
                    waits.iter().map(|(p, o)| (&**p as &dyn PartitionStorage, *o)),
                    deadline,
                ) => {}
                _ = stop.changed() => {}
            }
        }
    }

    async fn read_partition(
        &mut self,
        spec: &TriggerSpec,
        source: usize,
        topic: &str,
        partition: i32,
        part: &dyn PartitionStorage,
    ) -> Result<(), RunError> {
        let key = (source as u16, partition);
        let mut offset = self.positions[&key];
        let start = part.log_start_offset();
        if offset < start {
            self.stats.skip("deleted_before_read", || {
                format!("{topic}/{partition}: records {offset}..{start} were deleted (retention) before the trigger read them")
            });
            offset = start;
        }
        let read = match self.broker.read(part, offset, READ_MAX_BYTES, None).await {
            Ok(read) => read,
            Err(StorageError::OffsetOutOfRange { log_start, .. }) => {
                self.positions.insert(key, log_start);
                return Ok(());
            }
            Err(e) => return Err(storage(&format!("reading {topic}/{partition}"), e)),
        };
        let wall = self.broker.now_ms();
        for batch in Batches::new(read.records) {
            let batch = match batch {
                Ok(b) => b,
                Err(e) => return Err(storage(&format!("reading {topic}/{partition}"), e)),
            };
            let next = batch.next_offset();
            if !batch.is_control() {
                let records = match batch.iter_records(DECOMPRESSED_BYTES_MAX) {
                    Ok(r) => r,
                    Err(e) => {
                        self.stats.skip("undecodable_batch", || {
                            format!("{topic}/{partition} at {offset}: {e}")
                        });
                        offset = next;
                        continue;
                    }
                };
                for view in records.iter() {
                    let Ok(view) = view else { break };
                    if view.offset < offset {
                        continue;
                    }
                    self.evaluate(spec, topic, partition, &view, wall);
                    if self.engine.step_bytes() >= STEP_MAX_BYTES {
                        self.positions.insert(key, view.offset + 1);
                        self.engine.advance(self.clock_ms);
                        self.write_step().await?;
                    }
                }
            }
            offset = next;
            self.positions.insert(key, offset);
            self.positions_moved = true;
        }
        Ok(())
    }

    fn evaluate(
        &mut self,
        spec: &TriggerSpec,
        topic: &str,
        partition: i32,
        view: &RecordView<'_>,
        wall_ms: i64,
    ) {
        match extract(spec, self.engine.program(), topic, view) {
            Extracted::Ignored => {
                self.stats.ignored.fetch_add(1, Ordering::Relaxed);
            }
            Extracted::Skip(reason, why) => self.stats.skip(reason, || {
                format!("{topic}/{partition} offset {}: {why}", view.offset)
            }),
            Extracted::Event(entity, event) => {
                // Event time is the record's timestamp, but never past the broker's clock (a
                // producer's clock running ahead must not fire every timer early).
                let time = view.timestamp_ms.min(wall_ms);
                if time > self.clock_ms {
                    self.clock_ms = time;
                }
                match self.engine.on_event(&entity, event, time) {
                    Ok(()) => {
                        self.stats.events.fetch_add(1, Ordering::Relaxed);
                    }
                    Err(Refused::EntityLimit) => self.stats.skip("entity_limit", || {
                        format!("the trigger already keeps {MAX_ENTITIES} entities")
                    }),
                }
            }
        }
    }

    async fn write_step_if_due(&mut self) -> Result<(), RunError> {
        let now = self.broker.now_ms();
        if self.engine.has_changes()
            || (self.positions_moved && now - self.last_step_ms >= POSITIONS_EVERY_MS)
        {
            self.write_step().await?;
        }
        if self.log_bytes_since_snapshot
            >= self
                .tuning
                .snapshot_after_bytes
                .max(2 * self.last_snapshot_bytes)
        {
            self.snapshot().await?;
        }
        Ok(())
    }

    fn position_list(&self) -> Vec<Position> {
        let mut positions: Vec<Position> = self
            .positions
            .iter()
            .map(|(&(source, partition), &next_offset)| Position {
                source,
                partition,
                next_offset,
            })
            .collect();
        positions.sort_by_key(|p| (p.source, p.partition));
        positions
    }

    /// Writes what changed as one durable step record, then hands its firings to the outbox.
    async fn write_step(&mut self) -> Result<(), RunError> {
        let positions = self.position_list();
        let mut value = Vec::with_capacity(self.engine.step_bytes() + 64);
        let (firings, _) = self.engine.take_step(&positions, self.clock_ms, &mut value);
        self.log_bytes_since_snapshot += value.len() as u64;
        append_records(
            &self.broker,
            &self.def.state_topic(),
            0,
            &[ProducerRecord {
                key: None,
                value: Some(Bytes::from(value)),
                headers: Vec::new(),
                timestamp_ms: self.broker.now_ms(),
            }],
        )
        .await?;
        self.last_step_ms = self.broker.now_ms();
        self.positions_moved = false;
        self.stats
            .entities
            .store(self.engine.entities() as u64, Ordering::Relaxed);
        self.stats
            .state_bytes
            .store(self.engine.state_bytes() as u64, Ordering::Relaxed);
        if !firings.is_empty() {
            self.stats
                .firings
                .fetch_add(firings.len() as u64, Ordering::Relaxed);
            self.outbox
                .pending
                .lock()
                .expect("outbox lock")
                .extend(firings);
            self.outbox.added.notify_one();
        }
        Ok(())
    }

    /// Writes every entity's state as a snapshot, then cuts the log before it.
    async fn snapshot(&mut self) -> Result<(), RunError> {
        self.write_step().await?;
        let topic = self.def.state_topic();
        self.snapshot_id += 1;
        let chunks = self.engine.snapshot_chunks(CHUNK_BYTES);
        let mut first_chunk_offset = None;
        let mut bytes = 0u64;
        for entities in chunks {
            bytes += entities
                .iter()
                .map(|(e, s)| (e.len() + s.len()) as u64)
                .sum::<u64>();
            let offset = append_state(
                &self.broker,
                &topic,
                &LogRecord::Chunk {
                    snapshot: self.snapshot_id,
                    entities,
                },
            )
            .await?;
            first_chunk_offset.get_or_insert(offset);
        }
        let pending: Vec<Fired> = self
            .outbox
            .pending
            .lock()
            .expect("outbox lock")
            .iter()
            .cloned()
            .collect();
        let end = LogRecord::End {
            snapshot: self.snapshot_id,
            first_chunk_offset: first_chunk_offset.unwrap_or(-1),
            positions: self.position_list(),
            clock_ms: self.clock_ms,
            next_seq: self.engine.next_seq(),
            delivered_seq: self.outbox.delivered_seq.load(Ordering::Acquire),
            sink_marks: self.outbox.sink_marks.lock().expect("outbox lock").clone(),
            pending,
        };
        let end_offset = append_state(&self.broker, &topic, &end).await?;
        // Without chunks (no entities) the snapshot is its End alone.
        let cut = first_chunk_offset.unwrap_or(end_offset);
        if let Some(part) = self
            .broker
            .topics()
            .get(&topic)
            .and_then(|t| t.partition(0))
            && let Err(e) = part.delete_records(cut).await
        {
            tracing::warn!(trigger = %self.def.spec.name, error = %e, "could not cut the state log after a snapshot");
        }
        self.log_bytes_since_snapshot = 0;
        self.last_snapshot_bytes = bytes;
        Ok(())
    }

    fn publish_positions(&self) {
        let list = self
            .positions
            .iter()
            .map(|(&(s, p), &o)| (self.def.spec.sources[s as usize].clone(), p, o))
            .collect();
        *self.stats.positions.lock().expect("stats lock") = list;
    }
}

/// Takes a record's entity id and event name as the trigger's spec says.
fn extract<'a>(
    spec: &TriggerSpec,
    program: &sluice_rules::eval::Program,
    topic: &str,
    view: &RecordView<'a>,
) -> Extracted<'a> {
    let mut json: Option<Result<serde_json::Map<String, serde_json::Value>, String>> = None;
    let parse_json =
        |json: &mut Option<Result<serde_json::Map<String, serde_json::Value>, String>>| {
            if json.is_none() {
                *json = Some(match view.value {
                    None => Err("the record has no value".to_owned()),
                    Some(v) => match serde_json::from_slice::<serde_json::Value>(v) {
                        Ok(serde_json::Value::Object(map)) => Ok(map),
                        Ok(_) => Err("the value is JSON but not an object".to_owned()),
                        Err(e) => Err(format!("the value is not JSON: {e}")),
                    },
                });
            }
        };
    let name_owned;
    let name: &[u8] = match &spec.event {
        NameFrom::Topic => topic.as_bytes(),
        NameFrom::Header(h) => match header(view, h) {
            Some(v) => v,
            None => {
                return Extracted::Skip("no_event_name", format!("no header {h:?}"));
            }
        },
        NameFrom::Json(field) => {
            parse_json(&mut json);
            match json.as_ref().expect("parsed") {
                Err(e) => return Extracted::Skip("bad_json", e.clone()),
                Ok(map) => match map.get(field) {
                    Some(serde_json::Value::String(s)) => {
                        name_owned = s.clone();
                        name_owned.as_bytes()
                    }
                    _ => {
                        return Extracted::Skip(
                            "no_event_name",
                            format!("no string field {field:?} in the value"),
                        );
                    }
                },
            }
        }
    };
    let Ok(name) = std::str::from_utf8(name) else {
        return Extracted::Skip("no_event_name", "the event name is not UTF-8".to_owned());
    };
    let Some(event) = program.event_id(name) else {
        return Extracted::Ignored;
    };
    let entity: std::borrow::Cow<'a, [u8]> = match &spec.entity {
        EntityFrom::Key => match view.key {
            Some(k) if !k.is_empty() => std::borrow::Cow::Borrowed(k),
            _ => return Extracted::Skip("no_entity", "the record has no key".to_owned()),
        },
        EntityFrom::Header(h) => match header(view, h) {
            Some(v) if !v.is_empty() => std::borrow::Cow::Borrowed(v),
            _ => return Extracted::Skip("no_entity", format!("no header {h:?}")),
        },
        EntityFrom::Json(field) => {
            parse_json(&mut json);
            match json.as_ref().expect("parsed") {
                Err(e) => return Extracted::Skip("bad_json", e.clone()),
                Ok(map) => match map.get(field) {
                    Some(serde_json::Value::String(s)) if !s.is_empty() => {
                        std::borrow::Cow::Owned(s.as_bytes().to_vec())
                    }
                    Some(serde_json::Value::Number(n)) => {
                        std::borrow::Cow::Owned(n.to_string().into_bytes())
                    }
                    _ => {
                        return Extracted::Skip(
                            "no_entity",
                            format!("no string or number field {field:?} in the value"),
                        );
                    }
                },
            }
        }
    };
    Extracted::Event(entity, event)
}

fn header<'a>(view: &RecordView<'a>, name: &str) -> Option<&'a [u8]> {
    view.headers
        .iter()
        .find(|(k, _)| *k == name.as_bytes())
        .and_then(|(_, v)| v)
}
