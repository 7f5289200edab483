//! Deterministic simulation of the broker's produce and commit paths on a simulated disk:
//! every partition log and the group store of a `Broker` go through one
//! `DiskFaults::simulated` plan (`BrokerConfig::disk_faults`), requests go through
//! `Broker::handle` as the server sends them, and the power fails.
//!
//! One scenario, from its seed: a broker with small segments and a topic of 1 to 3 partitions,
//! then a few boots of
//! 1. open a fresh `Broker` on the directory (recovery) and check it (below);
//! 2. random steps: idempotent producers (ids from InitProducerId) produce batches with
//!    acks=-1, each acknowledged when its Produce answers with no error; an acknowledged batch
//!    is now and then sent again (a retry: a duplicate, answered with its offset, not
//!    appended); consumer offsets are committed with OffsetCommit (acknowledged when it answers
//!    with no error);
//! 3. writeback stalls (`hold_syncs`): a produce to some partitions and an offset commit go in
//!    and are never answered, and the power fails (`power_loss`).
//!
//! What is checked after each reopen, through the broker's own requests: Fetch serves every
//! acknowledged batch at its acknowledged offset with the same bytes; every batch it serves
//! passes its CRC and is one that was produced to that partition, at contiguous offsets; a
//! retry of each producer's last acknowledged batch is answered as a duplicate with its
//! original offset and appends nothing (the producer state is rebuilt from the log); the next
//! sequence after the last surviving batch of each producer is accepted at the log end; and
//! OffsetFetch returns, for every committed partition, the latest acknowledged offset or one
//! committed after it, never an older one.
//!
//! Runs (a broker per boot costs a few milliseconds, so fewer seeds than the log's):
//! - `cargo test -p sluice-broker --test simulation`: seeds 0..200;
//! - `SLUICE_SIM_SEEDS=5000 cargo test -p sluice-broker --release --test simulation`: more;
//! - `SLUICE_SIM_SEED=12345 cargo test -p sluice-broker --test simulation`: one seed, exactly.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use futures::future::BoxFuture;
use sluice_batch::{BatchBuilder, RecordRef};
use sluice_broker::{Broker, BrokerConfig};
use sluice_log::batch::BatchView;
use sluice_log::{DiskFaults, LogConfig, ManualClock, PowerLoss, SplitMix64};
use sluice_protocol::codec::Request;
use sluice_protocol::kafka_protocol::messages::*;
use sluice_protocol::kafka_protocol::protocol::StrBytes;

const DEFAULT_SEEDS: u64 = 200;
const T0: i64 = 1_700_000_000_000;
const TOPIC: &str = "events";
const GROUPS: u64 = 2;

#[derive(Debug, Default, Clone, Copy)]
struct Totals {
    scenarios: u64,
    power_losses: u64,
    produces_acked: u64,
    retries_answered_as_duplicates: u64,
    commits_acked: u64,
    recovered_unacked_batches: u64,
    writes_kept: u64,
    writes_dropped: u64,
    writes_torn: u64,
}

impl Totals {
    fn add(&mut self, o: &Totals) {
        self.scenarios += o.scenarios;
        self.power_losses += o.power_losses;
        self.produces_acked += o.produces_acked;
        self.retries_answered_as_duplicates += o.retries_answered_as_duplicates;
        self.commits_acked += o.commits_acked;
        self.recovered_unacked_batches += o.recovered_unacked_batches;
        self.writes_kept += o.writes_kept;
        self.writes_dropped += o.writes_dropped;
        self.writes_torn += o.writes_torn;
    }

    fn power_loss(&mut self, p: &PowerLoss) {
        self.power_losses += 1;
        self.writes_kept += p.writes_kept as u64;
        self.writes_dropped += p.writes_dropped as u64;
        self.writes_torn += p.writes_torn as u64;
    }
}

type Check<T = ()> = Result<T, String>;

macro_rules! ensure {
    ($cond:expr, $($msg:tt)+) => {
        if !$cond {
            return Err(format!($($msg)+));
        }
    };
}

fn s(v: &str) -> StrBytes {
    StrBytes::from_string(v.to_owned())
}

fn request(api_key: ApiKey, api_version: i16, body: RequestKind) -> Request {
    Request {
        api_key,
        api_version,
        correlation_id: 1,
        client_id: Some(s("simulation")),
        body,
    }
}

/// An idempotent producer as the test sees it.
#[derive(Debug, Clone)]
struct Producer {
    id: i64,
    epoch: i16,
    /// Next sequence to send, per partition.
    next_seq: BTreeMap<i32, i32>,
    /// The last acknowledged batch per partition: (base offset, bytes as sent).
    last_acked: BTreeMap<i32, (i64, Vec<u8>)>,
}

/// What the test knows the broker must hold.
#[derive(Debug, Default)]
struct Model {
    /// Acknowledged batches per partition: base offset → bytes after the base offset.
    acked: BTreeMap<i32, BTreeMap<i64, Vec<u8>>>,
    /// Every batch sent to a partition (bytes after the base offset): what may be served.
    sent: BTreeMap<i32, BTreeSet<Vec<u8>>>,
    /// Committed offsets per (group, partition): every offset committed, in order, and the
    /// latest acknowledged one.
    commits: BTreeMap<(String, i32), (Vec<i64>, Option<i64>)>,
}

struct World {
    rng: SplitMix64,
    dir: tempfile::TempDir,
    rt: tokio::runtime::Runtime,
    partitions: i32,
    segment_bytes: u64,
    broker: Option<Arc<Broker>>,
    faults: DiskFaults,
    producers: Vec<Producer>,
    model: Model,
    next_value: u64,
    next_commit: i64,
    totals: Totals,
    trace: String,
    /// Requests of the unacknowledged tail, never answered: dropped once the power failed.
    unanswered: Vec<BoxFuture<'static, Option<ResponseKind>>>,
}

impl Drop for World {
    fn drop(&mut self) {
        let _ = self.faults.power_loss(0);
        self.faults.release_syncs();
        self.unanswered.clear();
        drop(self.broker.take());
    }
}

impl World {
    fn new(seed: u64) -> World {
        let mut rng = SplitMix64::new(seed);
        let partitions = 1 + rng.below(3) as i32;
        let segment_bytes = 1024 + rng.below(4096);
        World {
            rng,
            dir: tempfile::tempdir().expect("tempdir"),
            rt: tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .expect("runtime"),
            partitions,
            segment_bytes,
            broker: None,
            faults: DiskFaults::none(),
            producers: Vec::new(),
            model: Model::default(),
            next_value: 0,
            next_commit: 0,
            totals: Totals::default(),
            trace: String::new(),
            unanswered: Vec::new(),
        }
    }

    fn note(&mut self, event: impl std::fmt::Display) {
        let _ = writeln!(self.trace, "  {event}");
    }

    fn broker(&self) -> &Arc<Broker> {
        self.broker.as_ref().expect("broker open")
    }

    fn start(
        &self,
        body: RequestKind,
        api_key: ApiKey,
        version: i16,
    ) -> BoxFuture<'static, Option<ResponseKind>> {
        let _runtime = self.rt.enter();
        self.broker().handle(request(api_key, version, body))
    }

    fn call(&self, api_key: ApiKey, version: i16, body: RequestKind) -> Check<ResponseKind> {
        let handling = self.start(body, api_key, version);
        self.rt
            .block_on(async { tokio::time::timeout(Duration::from_secs(10), handling).await })
            .map_err(|_| format!("{api_key:?} not answered in 10 s"))?
            .ok_or_else(|| format!("{api_key:?}: no response"))
    }

    fn run(&mut self) -> Check {
        self.totals.scenarios = 1;
        let _ = writeln!(
            self.trace,
            "  {} partitions, segment_bytes {}",
            self.partitions, self.segment_bytes
        );
        let boots = 1 + self.rng.below(3);
        for boot in 0..boots {
            self.open(boot)?;
            if boot == 0 {
                self.create_topic()?;
                for _ in 0..1 + self.rng.below(2) {
                    self.init_producer()?;
                }
            }
            let steps = self.rng.below(20);
            for _ in 0..steps {
                match self.rng.below(10) {
                    0..=5 => self.produce_step()?,
                    6 => self.retry_step()?,
                    _ => self.commit_step()?,
                }
            }
            self.unacked_tail()?;
            self.power_loss()?;
        }
        self.open(boots)?;
        Ok(())
    }

    fn open(&mut self, boot: u64) -> Check {
        self.faults = DiskFaults::simulated(self.rng.next_u64());
        let mut config = BrokerConfig::new(self.dir.path());
        config.log = LogConfig {
            segment_bytes: self.segment_bytes,
            ..LogConfig::default()
        };
        // One sync thread per partition and one for the group store: each round held by
        // `hold_syncs` holds only its own target.
        config.sync_threads = 4;
        config.groups.classic.initial_rebalance_delay_ms = 0;
        config.disk_faults = self.faults.clone();
        let broker = Broker::open_with_clock(config, Arc::new(ManualClock::new(T0)))
            .map_err(|e| format!("open (boot {boot}) failed: {e}"))?;
        self.broker = Some(Arc::new(broker));
        self.note(format_args!("open (boot {boot})"));
        if boot > 0 {
            self.check_recovered()?;
        }
        Ok(())
    }

    fn create_topic(&mut self) -> Check {
        let req = CreateTopicsRequest::default().with_topics(vec![
            create_topics_request::CreatableTopic::default()
                .with_name(TopicName(s(TOPIC)))
                .with_num_partitions(self.partitions)
                .with_replication_factor(1),
        ]);
        match self.call(ApiKey::CreateTopics, 7, RequestKind::CreateTopics(req))? {
            ResponseKind::CreateTopics(r) => {
                ensure!(
                    r.topics[0].error_code == 0,
                    "create topic: {:?}",
                    r.topics[0]
                );
                Ok(())
            }
            other => Err(format!("{other:?}")),
        }
    }

    fn init_producer(&mut self) -> Check {
        let req = InitProducerIdRequest::default()
            .with_producer_id(ProducerId(-1))
            .with_producer_epoch(-1)
            .with_transaction_timeout_ms(60_000);
        match self.call(ApiKey::InitProducerId, 4, RequestKind::InitProducerId(req))? {
            ResponseKind::InitProducerId(r) => {
                ensure!(r.error_code == 0, "InitProducerId: {}", r.error_code);
                self.producers.push(Producer {
                    id: r.producer_id.0,
                    epoch: r.producer_epoch,
                    next_seq: BTreeMap::new(),
                    last_acked: BTreeMap::new(),
                });
                Ok(())
            }
            other => Err(format!("{other:?}")),
        }
    }

    /// A new batch of 1..=5 records with unique values from producer `p` to `partition`,
    /// taking the next sequence; recorded as sent.
    fn new_batch(&mut self, p: usize, partition: i32) -> Vec<u8> {
        let n = 1 + self.rng.below(5) as i32;
        let producer = &mut self.producers[p];
        let seq = producer.next_seq.entry(partition).or_insert(0);
        let base_seq = *seq;
        *seq += n;
        let (id, epoch) = (producer.id, producer.epoch);
        let values: Vec<Vec<u8>> = (0..n)
            .map(|_| {
                self.next_value += 1;
                let len = self.rng.below(200) as usize;
                let mut v = format!("v{}-", self.next_value).into_bytes();
                v.resize(v.len() + len, b'x');
                v
            })
            .collect();
        let mut out = Vec::new();
        let mut builder =
            BatchBuilder::with_base_timestamp(&mut out, T0).with_producer(id, epoch, base_seq);
        for v in &values {
            builder.push(&RecordRef {
                key: None,
                value: Some(v),
                headers: &[],
                timestamp_ms: T0,
            });
        }
        builder.finish();
        self.model
            .sent
            .entry(partition)
            .or_default()
            .insert(out[8..].to_vec());
        out
    }

    fn produce_request(partition: i32, batch: &[u8]) -> RequestKind {
        RequestKind::Produce(
            ProduceRequest::default()
                .with_acks(-1)
                .with_timeout_ms(5000)
                .with_topic_data(vec![
                    produce_request::TopicProduceData::default()
                        .with_name(TopicName(s(TOPIC)))
                        .with_partition_data(vec![
                            produce_request::PartitionProduceData::default()
                                .with_index(partition)
                                .with_records(Some(Bytes::copy_from_slice(batch))),
                        ]),
                ]),
        )
    }

    /// Produces `batch` with acks=-1: (error code, base offset).
    fn produce(&mut self, partition: i32, batch: &[u8]) -> Check<(i16, i64)> {
        match self.call(ApiKey::Produce, 9, Self::produce_request(partition, batch))? {
            ResponseKind::Produce(r) => {
                let p = &r.responses[0].partition_responses[0];
                Ok((p.error_code, p.base_offset))
            }
            other => Err(format!("{other:?}")),
        }
    }

    fn produce_step(&mut self) -> Check {
        let p = self.rng.below(self.producers.len() as u64) as usize;
        let partition = self.rng.below(self.partitions as u64) as i32;
        let batch = self.new_batch(p, partition);
        let (code, base) = self.produce(partition, &batch)?;
        ensure!(code == 0, "produce to {partition}: error {code}");
        let acked = self.model.acked.entry(partition).or_default();
        let expected = acked
            .iter()
            .next_back()
            .map_or(0, |(b, rest)| last_offset(*b, rest) + 1);
        ensure!(
            base == expected,
            "produce to {partition} got offset {base}, expected {expected}"
        );
        acked.insert(base, batch[8..].to_vec());
        self.producers[p]
            .last_acked
            .insert(partition, (base, batch.clone()));
        self.totals.produces_acked += 1;
        self.note(format_args!("produce {partition}@{base}: acknowledged"));
        Ok(())
    }

    /// Sends a producer's last acknowledged batch again: a duplicate.
    fn retry_step(&mut self) -> Check {
        let p = self.rng.below(self.producers.len() as u64) as usize;
        let Some((partition, (base, batch))) = self.producers[p]
            .last_acked
            .iter()
            .next()
            .map(|(k, v)| (*k, v.clone()))
        else {
            return Ok(());
        };
        self.check_duplicate(partition, base, &batch)
    }

    fn check_duplicate(&mut self, partition: i32, base: i64, batch: &[u8]) -> Check {
        let end_before = self.log_end(partition)?;
        let (code, got) = self.produce(partition, batch)?;
        ensure!(
            code == 0 && got == base,
            "a retry of the batch at {partition}@{base} was answered {code} at {got}"
        );
        ensure!(
            self.log_end(partition)? == end_before,
            "a retry of the batch at {partition}@{base} was appended again"
        );
        self.totals.retries_answered_as_duplicates += 1;
        self.note(format_args!("retry {partition}@{base}: duplicate"));
        Ok(())
    }

    fn commit_request(group: &str, partition: i32, offset: i64) -> RequestKind {
        RequestKind::OffsetCommit(
            OffsetCommitRequest::default()
                .with_group_id(GroupId(s(group)))
                .with_member_id(s(""))
                .with_generation_id_or_member_epoch(-1)
                .with_topics(vec![
                    offset_commit_request::OffsetCommitRequestTopic::default()
                        .with_name(TopicName(s(TOPIC)))
                        .with_partitions(vec![
                            offset_commit_request::OffsetCommitRequestPartition::default()
                                .with_partition_index(partition)
                                .with_committed_offset(offset)
                                .with_committed_leader_epoch(-1),
                        ]),
                ]),
        )
    }

    /// A random commit, recorded as attempted: (group, partition, offset).
    fn new_commit(&mut self) -> (String, i32, i64) {
        let group = format!("g{}", self.rng.below(GROUPS));
        let partition = self.rng.below(self.partitions as u64) as i32;
        self.next_commit += 1 + self.rng.below(10) as i64;
        let offset = self.next_commit;
        self.model
            .commits
            .entry((group.clone(), partition))
            .or_default()
            .0
            .push(offset);
        (group, partition, offset)
    }

    fn commit_step(&mut self) -> Check {
        let (group, partition, offset) = self.new_commit();
        let req = Self::commit_request(&group, partition, offset);
        match self.call(ApiKey::OffsetCommit, 9, req)? {
            ResponseKind::OffsetCommit(r) => {
                let code = r.topics[0].partitions[0].error_code;
                ensure!(
                    code == 0,
                    "commit {group}/{partition}={offset}: error {code}"
                );
            }
            other => return Err(format!("{other:?}")),
        }
        let entry = self
            .model
            .commits
            .get_mut(&(group.clone(), partition))
            .expect("attempted");
        entry.1 = Some(offset);
        self.totals.commits_acked += 1;
        self.note(format_args!(
            "commit {group}/{partition}={offset}: acknowledged"
        ));
        Ok(())
    }

    /// Waits (bounded) until `n` syncs are held.
    fn wait_held(&self, n: usize) -> Check {
        let deadline = Instant::now() + Duration::from_secs(10);
        while self.faults.held_syncs() < n {
            ensure!(Instant::now() < deadline, "{n} syncs never held");
            std::thread::yield_now();
        }
        Ok(())
    }

    /// Writeback stalls; one produce to some partitions and one commit go in, unanswered.
    fn unacked_tail(&mut self) -> Check {
        self.faults.hold_syncs();
        let mut held = 0;
        for partition in 0..self.partitions {
            if self.rng.below(2) == 0 {
                continue;
            }
            let p = self.rng.below(self.producers.len() as u64) as usize;
            let batch = self.new_batch(p, partition);
            let mut handling =
                self.start(Self::produce_request(partition, &batch), ApiKey::Produce, 9);
            // Runs the handler up to its wait for durability: the batch is appended.
            let answered = self.rt.block_on(async {
                tokio::time::timeout(Duration::from_millis(5), &mut handling).await
            });
            ensure!(
                answered.is_err(),
                "a produce was answered while syncs were held"
            );
            held += 1;
            self.unanswered.push(handling);
            self.wait_held(held)?;
            self.note(format_args!("tail produce to {partition}"));
        }
        if self.rng.below(2) == 0 {
            let (group, partition, offset) = self.new_commit();
            let mut handling = self.start(
                Self::commit_request(&group, partition, offset),
                ApiKey::OffsetCommit,
                9,
            );
            let answered = self.rt.block_on(async {
                tokio::time::timeout(Duration::from_millis(5), &mut handling).await
            });
            ensure!(
                answered.is_err(),
                "a commit was answered while syncs were held"
            );
            self.unanswered.push(handling);
            self.wait_held(held + 1)?;
            self.note(format_args!("tail commit {group}/{partition}={offset}"));
        }
        Ok(())
    }

    fn power_loss(&mut self) -> Check {
        let seed = self.rng.next_u64();
        let report = self
            .faults
            .power_loss(seed)
            .map_err(|e| format!("power loss: {e}"))?;
        self.note(format_args!("power loss: {report:?}"));
        self.totals.power_loss(&report);
        // The held syncs failed; their requests are dropped unanswered, then the broker.
        self.unanswered.clear();
        drop(self.broker.take());
        Ok(())
    }

    fn log_end(&self, partition: i32) -> Check<i64> {
        let topic = self.broker().topics().get(TOPIC).ok_or("topic missing")?;
        let storage = topic.partition(partition).ok_or("partition missing")?;
        let log = storage.as_local().ok_or("not a local log")?;
        Ok(log.log_end_offset())
    }

    /// Every batch Fetch serves from `offset` on, CRC-checked: (base offset, bytes after it).
    fn fetch_all(&self, partition: i32) -> Check<Vec<(i64, Vec<u8>)>> {
        let mut out = Vec::new();
        let mut next = 0;
        loop {
            let req = FetchRequest::default()
                .with_replica_id(BrokerId(-1))
                .with_max_wait_ms(0)
                .with_max_bytes(1 << 20)
                .with_topics(vec![
                    fetch_request::FetchTopic::default()
                        .with_topic(TopicName(s(TOPIC)))
                        .with_partitions(vec![
                            fetch_request::FetchPartition::default()
                                .with_partition(partition)
                                .with_fetch_offset(next)
                                .with_partition_max_bytes(1 << 20),
                        ]),
                ]);
            let r = match self.call(ApiKey::Fetch, 12, RequestKind::Fetch(req))? {
                ResponseKind::Fetch(r) => r,
                other => return Err(format!("{other:?}")),
            };
            let p = &r.responses[0].partitions[0];
            ensure!(
                p.error_code == 0,
                "fetch {partition}@{next}: error {}",
                p.error_code
            );
            let records = p.records.clone().unwrap_or_default();
            if records.is_empty() {
                ensure!(
                    next == p.high_watermark,
                    "fetch {partition}@{next} served nothing below the high watermark {}",
                    p.high_watermark
                );
                return Ok(out);
            }
            let mut data = &records[..];
            while !data.is_empty() {
                let view = BatchView::parse_checked(data).map_err(|e| {
                    format!("fetch {partition}@{next} served an invalid batch: {e}")
                })?;
                out.push((view.base_offset(), view.bytes()[8..].to_vec()));
                next = view.last_offset() + 1;
                data = &data[view.len()..];
            }
        }
    }

    fn check_recovered(&mut self) -> Check {
        for partition in 0..self.partitions {
            let served = self.fetch_all(partition)?;
            let acked = self
                .model
                .acked
                .get(&partition)
                .cloned()
                .unwrap_or_default();
            let sent = self.model.sent.get(&partition).cloned().unwrap_or_default();
            let mut next = 0;
            let mut unacked = 0;
            for (base, rest) in &served {
                ensure!(
                    *base == next,
                    "partition {partition}: offsets not contiguous, batch at {base}, expected {next}"
                );
                match acked.get(base) {
                    Some(a) => ensure!(
                        a == rest,
                        "partition {partition}: the batch at {base} differs from the acknowledged one"
                    ),
                    None => {
                        ensure!(
                            sent.contains(rest),
                            "partition {partition}: a batch at {base} that was never produced"
                        );
                        unacked += 1;
                    }
                }
                next = last_offset(*base, rest) + 1;
            }
            let served_bases: BTreeSet<i64> = served.iter().map(|(b, _)| *b).collect();
            for base in acked.keys() {
                ensure!(
                    served_bases.contains(base),
                    "partition {partition}: the acknowledged batch at {base} is not served after recovery (log end {next})"
                );
            }
            self.totals.recovered_unacked_batches += unacked;
            // What is served now is durable: the new baseline.
            self.model
                .acked
                .insert(partition, served.iter().cloned().collect());
            // Producer state: last surviving sequence per producer.
            for p in 0..self.producers.len() {
                let producer = &self.producers[p];
                let mut next_seq = 0;
                for (_, rest) in &served {
                    let mut full = vec![0u8; 8];
                    full.extend_from_slice(rest);
                    let view = BatchView::parse(&full).expect("checked");
                    if view.producer_id() == producer.id {
                        next_seq = view.base_sequence() + view.last_offset_delta() + 1;
                    }
                }
                if let Some((base, batch)) = producer.last_acked.get(&partition).cloned() {
                    self.check_duplicate(partition, base, &batch)?;
                }
                self.producers[p].next_seq.insert(partition, next_seq);
            }
            // A new sequence is accepted at the log end.
            let p = self.rng.below(self.producers.len() as u64) as usize;
            let batch = self.new_batch(p, partition);
            let (code, base) = self.produce(partition, &batch)?;
            ensure!(
                code == 0 && base == next,
                "after recovery a new batch to {partition} was answered {code} at {base}, expected the log end {next}"
            );
            self.model
                .acked
                .entry(partition)
                .or_default()
                .insert(base, batch[8..].to_vec());
            self.producers[p]
                .last_acked
                .insert(partition, (base, batch));
        }
        self.check_commits()
    }

    fn check_commits(&mut self) -> Check {
        let keys: Vec<(String, i32)> = self.model.commits.keys().cloned().collect();
        for (group, partition) in keys {
            let req = OffsetFetchRequest::default().with_groups(vec![
                offset_fetch_request::OffsetFetchRequestGroup::default()
                    .with_group_id(GroupId(s(&group)))
                    .with_member_epoch(-1)
                    .with_topics(Some(vec![
                        offset_fetch_request::OffsetFetchRequestTopics::default()
                            .with_name(TopicName(s(TOPIC)))
                            .with_partition_indexes(vec![partition]),
                    ])),
            ]);
            let got = match self.call(ApiKey::OffsetFetch, 9, RequestKind::OffsetFetch(req))? {
                ResponseKind::OffsetFetch(r) => {
                    ensure!(
                        r.groups[0].error_code == 0,
                        "OffsetFetch {group}: {}",
                        r.groups[0].error_code
                    );
                    r.groups[0].topics[0].partitions[0].committed_offset
                }
                other => return Err(format!("{other:?}")),
            };
            let entry = self
                .model
                .commits
                .get_mut(&(group.clone(), partition))
                .expect("key");
            let (attempted, acked) = entry.clone();
            let latest_acked_at =
                acked.map(|a| attempted.iter().rposition(|o| *o == a).expect("attempted"));
            let at = attempted.iter().rposition(|o| *o == got);
            match (latest_acked_at, at) {
                (Some(want), Some(at)) => ensure!(
                    at >= want,
                    "OffsetFetch {group}/{partition} = {got}, older than the acknowledged {:?}",
                    acked
                ),
                (Some(_), None) => {
                    return Err(format!(
                        "OffsetFetch {group}/{partition} = {got}, the acknowledged {acked:?} lost"
                    ));
                }
                (None, None) => ensure!(
                    got == -1,
                    "OffsetFetch {group}/{partition} = {got}, never committed"
                ),
                (None, Some(_)) => {}
            }
            *entry = (vec![got], (got >= 0).then_some(got));
            if got < 0 {
                entry.0.clear();
            }
        }
        Ok(())
    }
}

/// The last offset of the batch whose bytes after the base offset are `rest`.
fn last_offset(base: i64, rest: &[u8]) -> i64 {
    let mut full = base.to_be_bytes().to_vec();
    full.extend_from_slice(rest);
    BatchView::parse(&full)
        .expect("a whole batch")
        .last_offset()
}

fn run_one(seed: u64) -> Result<Totals, String> {
    let mut world = World::new(seed);
    let failure = match sluice_log::sim::catch(|| world.run()) {
        Ok(()) => return Ok(world.totals),
        Err(msg) => msg,
    };
    Err(format!(
        "broker simulation seed {seed} failed: {failure}\nevents:\n{}\nreproduce with: SLUICE_SIM_SEED={seed} cargo test -p sluice-broker --test simulation",
        world.trace
    ))
}

#[test]
fn seeded_power_loss_scenarios_keep_acknowledged_produces_and_commits() {
    let seeds = sluice_log::sim::seeds_from_env(DEFAULT_SEEDS);
    let started = Instant::now();
    let totals = sluice_log::sim::run_seeds(&seeds, run_one, Totals::add)
        .unwrap_or_else(|msg| panic!("{msg}"));
    eprintln!(
        "{} scenarios in {:.1?}: {totals:?}",
        totals.scenarios,
        started.elapsed()
    );
    assert_eq!(totals.scenarios, seeds.len() as u64);
}
