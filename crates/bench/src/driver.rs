//! The load: producer and consumer threads on librdkafka, their counters and latency
//! histograms, and the controls the modes steer them with.
//!
//! Producers are open loop: producer `i` of `n` sends record `k` of a schedule at
//! `start + k / (rate / n)`, and that *intended* time is written into the record. Latency is
//! measured from it, so a broker that stalls is charged for every record that should have been
//! sent during the stall (no coordinated omission). When the client's queue is full (the broker
//! pushes back), the producer waits and the schedule keeps running.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};
use std::thread::JoinHandle;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use hdrhistogram::Histogram;
use rdkafka::ClientContext;
use rdkafka::config::ClientConfig;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use rdkafka::message::{DeliveryResult, Message};
use rdkafka::producer::{BaseProducer, BaseRecord, Producer, ProducerContext};
use rdkafka::topic_partition_list::{Offset, TopicPartitionList};

use crate::checker::Checker;
use crate::payload::{self, Header};
use crate::result::{Interval, Totals};
use crate::stats;
use crate::target::Target;
use crate::workload::Workload;

/// Nanoseconds on one monotonic clock shared by producers and consumers, anchored to the wall
/// clock once so that the values read like Unix times.
pub fn now_ns() -> u64 {
    instant_ns(Instant::now())
}

fn instant_ns(at: Instant) -> u64 {
    let (base, base_ns) = clock_base();
    base_ns + at.saturating_duration_since(*base).as_nanos() as u64
}

fn clock_base() -> &'static (Instant, u64) {
    static BASE: OnceLock<(Instant, u64)> = OnceLock::new();
    BASE.get_or_init(|| {
        let wall = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap_or_default();
        (Instant::now(), wall.as_nanos() as u64)
    })
}

/// Counters and latency histograms of one thread, for one interval or one measured window.
#[derive(Debug)]
pub struct Window {
    pub ack: Histogram<u64>,
    pub e2e: Histogram<u64>,
    pub totals: Totals,
}

impl Default for Window {
    fn default() -> Self {
        Self {
            ack: stats::latency_histogram(),
            e2e: stats::latency_histogram(),
            totals: Totals::default(),
        }
    }
}

impl Window {
    fn add(&mut self, other: &Window) {
        // Both histograms have the same bounds, so adding cannot fail.
        let _ = self.ack.add(&other.ack);
        let _ = self.e2e.add(&other.e2e);
        let (t, o) = (&mut self.totals, &other.totals);
        t.sent_records += o.sent_records;
        t.sent_bytes += o.sent_bytes;
        t.acked_records += o.acked_records;
        t.acked_bytes += o.acked_bytes;
        t.failed_records += o.failed_records;
        t.consumed_records += o.consumed_records;
        t.consumed_bytes += o.consumed_bytes;
    }

    fn reset(&mut self) {
        self.ack.reset();
        self.e2e.reset();
        self.totals = Totals::default();
    }
}

/// One thread's statistics: the current interval, and the records whose intended send time
/// falls inside the measured window.
#[derive(Debug, Default)]
struct ThreadStats {
    interval: Window,
    measured: Window,
}

/// The measured window, by intended send time (ns on [`now_ns`]'s clock).
#[derive(Debug)]
struct Gate {
    start: AtomicU64,
    end: AtomicU64,
}

impl Gate {
    fn contains(&self, ns: u64) -> bool {
        ns >= self.start.load(Ordering::Relaxed) && ns < self.end.load(Ordering::Relaxed)
    }
}

/// What every thread shares.
#[derive(Debug)]
struct Shared {
    gate: Gate,
    /// Bumped whenever the rate changes; producers restart their schedule.
    epoch: AtomicU64,
    /// Records/s for the whole fleet as f64 bits; `f64::INFINITY` for "max", 0 to pause.
    rate_bits: AtomicU64,
    stop_producers: AtomicBool,
    stop_consumers: AtomicBool,
    /// Total acked records, for lag.
    acked: AtomicU64,
    checker: Option<Arc<Mutex<Checker>>>,
    /// Producer-side health: ns spent blocked on a full queue, records sent late while not
    /// blocked, largest schedule lag.
    backpressure_ns: AtomicU64,
    late_records: AtomicU64,
    max_lag_ns: AtomicU64,
    /// How long stopping producers may wait for their queued records, ms.
    flush_timeout_ms: AtomicU64,
}

fn lock(stats: &Mutex<ThreadStats>) -> MutexGuard<'_, ThreadStats> {
    stats.lock().unwrap_or_else(|p| p.into_inner())
}

/// A record sent later than this after its intended time, while the client queue had room,
/// means the load generator itself is behind.
const LATE_NS: u64 = 20_000_000;

/// Shortest sleep between sends: keeps a fast schedule from costing a wake-up per record.
const MIN_SLEEP: Duration = Duration::from_micros(200);
/// How long a producer whose local queue is full serves delivery reports before it tries to
/// enqueue again. `BaseProducer::poll(timeout)` keeps polling until its deadline, and once
/// less than a millisecond is left it asks librdkafka for a 0 ms wait, so it spins for the
/// rest: with a 1 ms wait that spin took most of a core per producer while its queue was
/// full (measured in object-storage mode, where acknowledgements come in bursts). Over 20 ms
/// at most the last millisecond spins. Delivery reports are still served as they arrive, and
/// the queue (100,000 records by default) holds far more than a producer sends in 20 ms.
const QUEUE_FULL_POLL: Duration = Duration::from_millis(20);

/// At most this many delivery-report events [`serve_reports`] serves in one turn (each event is
/// one produced batch's reports), so a flood of them cannot starve the send schedule.
const SERVE_REPORTS_MAX: u32 = 4096;

/// A producer context that counts the delivery reports it has served.
pub(crate) trait CountsReports {
    fn reports_served(&self) -> u64;
}

/// Serves every delivery report waiting, up to [`SERVE_REPORTS_MAX`] events.
/// `BaseProducer::poll(Duration::ZERO)` serves one event, one produced batch's reports: with
/// many small batches (keyed records spread over partitions, a short linger) they arrived
/// faster than one per turn of the send loop, and the reports queued up in the client, so that
/// the measured ack latency grew for as long as the run lasted (by 0.8 s over 45 s at 20 MB/s
/// of keyed 1 KiB records over 6 partitions) while the records themselves had long been
/// acknowledged and consumed.
pub(crate) fn serve_reports<C: ProducerContext + CountsReports>(producer: &BaseProducer<C>) {
    for _ in 0..SERVE_REPORTS_MAX {
        let before = producer.context().reports_served();
        producer.poll(Duration::ZERO);
        if producer.context().reports_served() == before {
            return;
        }
    }
}

/// The librdkafka settings for a workload's producers: the benchmark's own, then the workload's
/// `producer_config`, then the target's connection properties (each replacing what came before).
pub fn producer_settings(w: &Workload, target: &Target) -> Vec<(String, String)> {
    let mut s: Vec<(String, String)> = vec![
        ("acks".into(), w.acks.clone()),
        ("linger.ms".into(), w.linger_ms.to_string()),
        ("batch.size".into(), w.batch_size.to_string()),
        ("compression.type".into(), w.compression.clone()),
        ("enable.idempotence".into(), w.idempotence.to_string()),
        ("message.timeout.ms".into(), "120000".into()),
        ("queue.buffering.max.kbytes".into(), "1048576".into()),
    ];
    for (k, v) in &w.producer_config {
        crate::target::set(&mut s, k, v);
    }
    target.apply(&mut s);
    s
}

/// The librdkafka settings for a workload's consumers: the benchmark's own, then the workload's
/// `consumer_config`, then the target's connection properties (each replacing what came before).
pub fn consumer_settings(w: &Workload, target: &Target) -> Vec<(String, String)> {
    let mut s: Vec<(String, String)> = vec![
        ("auto.offset.reset".into(), "earliest".into()),
        ("enable.partition.eof".into(), "false".into()),
        ("enable.auto.commit".into(), "true".into()),
        ("fetch.wait.max.ms".into(), "500".into()),
    ];
    for (k, v) in &w.consumer_config {
        crate::target::set(&mut s, k, v);
    }
    target.apply(&mut s);
    s
}

fn client_config(settings: &[(String, String)]) -> ClientConfig {
    let mut config = ClientConfig::new();
    for (k, v) in settings {
        config.set(k, v);
    }
    config
}

/// The id of consumer group `g` of a repeat.
pub fn group_id(run_id: &str, g: u32) -> String {
    format!("sluice-bench-{run_id}-g{g}")
}

/// How consumers get their partitions.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ConsumerMode {
    /// `consumer_groups` groups of `consumers` members, subscribed to every topic.
    Groups,
    /// Each consumer is assigned a share of the partitions from the beginning, without a group
    /// (used where group joins would blur the measurement: drain, correctness).
    Assign,
}

/// The producers and consumers of one repeat, and their statistics.
#[derive(Debug)]
pub struct Fleet {
    shared: Arc<Shared>,
    workload: Workload,
    target: Target,
    topics: Vec<String>,
    producers: Vec<JoinHandle<()>>,
    producer_stats: Vec<Arc<Mutex<ThreadStats>>>,
    consumers: Vec<JoinHandle<()>>,
    consumer_stats: Vec<Arc<Mutex<ThreadStats>>>,
    /// Consumed records per group (the slowest group is the lag).
    group_consumed: Vec<Arc<AtomicU64>>,
    /// Partitions assigned to each consumer.
    assigned: Vec<Arc<AtomicU64>>,
    run_id: String,
    started: Instant,
    cpu_at_start: f64,
}

impl Fleet {
    /// A fleet with no threads yet; producers start paused.
    pub fn new(
        workload: &Workload,
        target: &Target,
        topics: Vec<String>,
        run_id: &str,
        checker: Option<Arc<Mutex<Checker>>>,
    ) -> Fleet {
        let shared = Arc::new(Shared {
            gate: Gate {
                start: AtomicU64::new(u64::MAX),
                end: AtomicU64::new(u64::MAX),
            },
            epoch: AtomicU64::new(0),
            rate_bits: AtomicU64::new(0f64.to_bits()),
            stop_producers: AtomicBool::new(false),
            stop_consumers: AtomicBool::new(false),
            acked: AtomicU64::new(0),
            checker,
            backpressure_ns: AtomicU64::new(0),
            late_records: AtomicU64::new(0),
            max_lag_ns: AtomicU64::new(0),
            flush_timeout_ms: AtomicU64::new(30_000),
        });
        Fleet {
            shared,
            workload: workload.clone(),
            target: target.clone(),
            topics,
            producers: Vec::new(),
            producer_stats: Vec::new(),
            consumers: Vec::new(),
            consumer_stats: Vec::new(),
            group_consumed: Vec::new(),
            assigned: Vec::new(),
            run_id: run_id.into(),
            started: Instant::now(),
            cpu_at_start: crate::machine::process_cpu_seconds(),
        }
    }

    pub fn topics(&self) -> &[String] {
        &self.topics
    }

    /// Seconds since the fleet was created.
    pub fn elapsed_s(&self) -> f64 {
        self.started.elapsed().as_secs_f64()
    }

    /// CPU seconds this process used since the fleet was created.
    pub fn cpu_s(&self) -> f64 {
        crate::machine::process_cpu_seconds() - self.cpu_at_start
    }

    /// Starts the consumers and waits (up to `timeout`) until every partition is assigned in
    /// every group.
    pub fn start_consumers(&mut self, mode: ConsumerMode, timeout: Duration) -> Result<(), String> {
        let w = &self.workload;
        if w.consumers == 0 {
            return Ok(());
        }
        let groups = match mode {
            ConsumerMode::Groups => w.consumer_groups,
            ConsumerMode::Assign => 1,
        };
        let settings = consumer_settings(w, &self.target);
        for g in 0..groups {
            let consumed = Arc::new(AtomicU64::new(0));
            self.group_consumed.push(consumed.clone());
            for c in 0..w.consumers {
                let mut config = client_config(&settings);
                config.set("group.id", group_id(&self.run_id, g));
                config.set("client.id", format!("sluice-bench-g{g}-c{c}"));
                let consumer: BaseConsumer = config
                    .create()
                    .map_err(|e| format!("cannot create consumer: {e}"))?;
                match mode {
                    ConsumerMode::Groups => {
                        let names: Vec<&str> = self.topics.iter().map(String::as_str).collect();
                        consumer
                            .subscribe(&names)
                            .map_err(|e| format!("subscribe: {e}"))?;
                    }
                    ConsumerMode::Assign => {
                        let mut list = TopicPartitionList::new();
                        let mut n = 0u32;
                        for topic in &self.topics {
                            for p in 0..w.partitions {
                                if n % w.consumers == c {
                                    list.add_partition_offset(topic, p as i32, Offset::Beginning)
                                        .map_err(|e| format!("assign: {e}"))?;
                                }
                                n += 1;
                            }
                        }
                        consumer.assign(&list).map_err(|e| format!("assign: {e}"))?;
                    }
                }
                let stats = Arc::new(Mutex::new(ThreadStats::default()));
                let assigned = Arc::new(AtomicU64::new(0));
                self.consumer_stats.push(stats.clone());
                self.assigned.push(assigned.clone());
                let job = ConsumerJob {
                    consumer,
                    shared: self.shared.clone(),
                    stats,
                    consumed: consumed.clone(),
                    assigned,
                    processing_us: w.processing_us,
                };
                let handle = std::thread::Builder::new()
                    .name(format!("bench-consumer-{g}-{c}"))
                    .spawn(move || job.run())
                    .map_err(|e| format!("cannot start a consumer thread: {e}"))?;
                self.consumers.push(handle);
            }
        }
        let want = u64::from(groups) * u64::from(w.partitions) * self.topics.len() as u64;
        let deadline = Instant::now() + timeout;
        loop {
            let have: u64 = self
                .assigned
                .iter()
                .map(|a| a.load(Ordering::Relaxed))
                .sum();
            if have >= want {
                return Ok(());
            }
            if Instant::now() >= deadline {
                return Err(format!(
                    "consumers got {have} of {want} partition assignments within {timeout:?}"
                ));
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Starts the producers, paused (rate 0) until [`Fleet::set_rate`].
    pub fn start_producers(&mut self) -> Result<(), String> {
        let w = &self.workload;
        let settings = producer_settings(w, &self.target);
        for i in 0..w.producers {
            let stats = Arc::new(Mutex::new(ThreadStats::default()));
            self.producer_stats.push(stats.clone());
            let context = DeliveryContext {
                shared: self.shared.clone(),
                stats: stats.clone(),
                served: AtomicU64::new(0),
            };
            let mut config = client_config(&settings);
            config.set("client.id", format!("sluice-bench-p{i}"));
            let producer: BaseProducer<DeliveryContext> = config
                .create_with_context(context)
                .map_err(|e| format!("cannot create producer: {e}"))?;
            let job = ProducerJob {
                producer,
                shared: self.shared.clone(),
                stats,
                id: i,
                producers: w.producers,
                topics: self.topics.clone(),
                record_size: w.record_size,
                keys: w.keys.then_some(w.key_space),
            };
            let handle = std::thread::Builder::new()
                .name(format!("bench-producer-{i}"))
                .spawn(move || job.run())
                .map_err(|e| format!("cannot start a producer thread: {e}"))?;
            self.producers.push(handle);
        }
        Ok(())
    }

    /// Sets the fleet's total producer rate in records/s (`None`: as fast as possible; `0`:
    /// pause). Producers start a fresh schedule now.
    pub fn set_rate(&self, rps: Option<f64>) {
        let bits = rps.unwrap_or(f64::INFINITY).max(0.0).to_bits();
        self.shared.rate_bits.store(bits, Ordering::Relaxed);
        self.shared.epoch.fetch_add(1, Ordering::Release);
    }

    /// Records whose intended send time is in `[start_ns, end_ns)` count as measured.
    pub fn set_measure_window(&self, start_ns: u64, end_ns: u64) {
        self.shared.gate.end.store(end_ns, Ordering::Relaxed);
        self.shared.gate.start.store(start_ns, Ordering::Relaxed);
    }

    /// Clears the measured statistics and the producer health counters.
    pub fn reset_measured(&self) {
        for s in self.producer_stats.iter().chain(&self.consumer_stats) {
            lock(s).measured.reset();
        }
        self.shared.backpressure_ns.store(0, Ordering::Relaxed);
        self.shared.late_records.store(0, Ordering::Relaxed);
        self.shared.max_lag_ns.store(0, Ordering::Relaxed);
    }

    /// The measured statistics of all threads, merged.
    pub fn measured(&self) -> Window {
        let mut all = Window::default();
        for s in self.producer_stats.iter().chain(&self.consumer_stats) {
            all.add(&lock(s).measured);
        }
        all
    }

    /// Ends the current interval: merges and clears every thread's interval statistics.
    pub fn take_interval(&self) -> Window {
        let mut all = Window::default();
        for s in self.producer_stats.iter().chain(&self.consumer_stats) {
            let mut guard = lock(s);
            all.add(&guard.interval);
            guard.interval.reset();
        }
        all
    }

    pub fn acked(&self) -> u64 {
        self.shared.acked.load(Ordering::Relaxed)
    }

    /// Records consumed by the slowest group.
    pub fn consumed_slowest(&self) -> u64 {
        self.group_consumed
            .iter()
            .map(|c| c.load(Ordering::Relaxed))
            .min()
            .unwrap_or(0)
    }

    /// Acknowledged records the slowest group has not read yet.
    pub fn lag(&self) -> i64 {
        if self.group_consumed.is_empty() {
            return 0;
        }
        // A consumer can see a record before its producer has polled the delivery report.
        (self.acked() as i64 - self.consumed_slowest() as i64).max(0)
    }

    /// Producer health since the last [`Fleet::reset_measured`]: (ns blocked on a full queue,
    /// records sent late with room in the queue, largest schedule lag in ns).
    pub fn producer_health(&self) -> (u64, u64, u64) {
        (
            self.shared.backpressure_ns.load(Ordering::Relaxed),
            self.shared.late_records.load(Ordering::Relaxed),
            self.shared.max_lag_ns.load(Ordering::Relaxed),
        )
    }

    /// Waits until the slowest group has read everything acknowledged, up to `timeout`.
    pub fn wait_caught_up(&self, timeout: Duration) -> bool {
        let deadline = Instant::now() + timeout;
        loop {
            if self.lag() <= 0 {
                return true;
            }
            if Instant::now() >= deadline {
                return false;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Stops the producers after they deliver what they have queued (up to `flush_timeout`).
    pub fn stop_producers(&mut self, flush_timeout: Duration) {
        self.shared
            .rate_bits
            .store(0f64.to_bits(), Ordering::Relaxed);
        self.shared
            .flush_timeout_ms
            .store(flush_timeout.as_millis() as u64, Ordering::Relaxed);
        self.shared.stop_producers.store(true, Ordering::Release);
        for handle in self.producers.drain(..) {
            let _ = handle.join();
        }
    }

    pub fn stop_consumers(&mut self) {
        self.shared.stop_consumers.store(true, Ordering::Release);
        for handle in self.consumers.drain(..) {
            let _ = handle.join();
        }
    }

    /// One reporting interval from a window taken with [`Fleet::take_interval`].
    pub fn interval(&self, window: &Window, seconds: f64, phase: &str) -> Interval {
        let per_s = |n: u64| {
            if seconds > 0.0 {
                n as f64 / seconds
            } else {
                0.0
            }
        };
        let t = &window.totals;
        Interval {
            t_s: self.elapsed_s(),
            phase: phase.into(),
            sent_rps: per_s(t.sent_records),
            acked_rps: per_s(t.acked_records),
            acked_mbps: per_s(t.acked_bytes) / 1e6,
            consumed_rps: per_s(t.consumed_records),
            consumed_mbps: per_s(t.consumed_bytes) / 1e6,
            ack: stats::brief(&window.ack),
            e2e: stats::brief(&window.e2e),
            lag_records: self.lag(),
            steal: 0.0,
        }
    }
}

impl Drop for Fleet {
    fn drop(&mut self) {
        if !self.producers.is_empty() {
            self.stop_producers(Duration::from_secs(5));
        }
        self.stop_consumers();
    }
}

/// Runs in the producer thread (librdkafka serves delivery reports from `poll`).
struct DeliveryContext {
    shared: Arc<Shared>,
    stats: Arc<Mutex<ThreadStats>>,
    /// Delivery reports served ([`serve_reports`]).
    served: AtomicU64,
}

impl ClientContext for DeliveryContext {}

impl CountsReports for DeliveryContext {
    fn reports_served(&self) -> u64 {
        self.served.load(Ordering::Relaxed)
    }
}

impl ProducerContext for DeliveryContext {
    type DeliveryOpaque = ();

    fn delivery(&self, result: &DeliveryResult<'_>, _: ()) {
        let now = now_ns();
        self.served.fetch_add(1, Ordering::Relaxed);
        let mut guard = lock(&self.stats);
        let stats = &mut *guard;
        match result {
            Ok(message) => {
                let value = message.payload().unwrap_or_default();
                let Ok(header) = payload::peek(value) else {
                    return;
                };
                let len = value.len() as u64;
                let us = now.saturating_sub(header.intended_ns) / 1000;
                let measured = self.shared.gate.contains(header.intended_ns);
                for (window, counts) in
                    [(&mut stats.interval, true), (&mut stats.measured, measured)]
                {
                    if counts {
                        stats::record_us(&mut window.ack, us);
                        window.totals.acked_records += 1;
                        window.totals.acked_bytes += len;
                    }
                }
                self.shared.acked.fetch_add(1, Ordering::Relaxed);
                if let Some(checker) = &self.shared.checker {
                    checker.lock().unwrap_or_else(|p| p.into_inner()).acked(
                        message.topic(),
                        message.partition(),
                        message.offset(),
                        header.producer,
                        header.seq,
                    );
                }
            }
            Err((_, message)) => {
                let measured = message
                    .payload()
                    .and_then(|v| payload::peek(v).ok())
                    .is_some_and(|h| self.shared.gate.contains(h.intended_ns));
                stats.interval.totals.failed_records += 1;
                if measured {
                    stats.measured.totals.failed_records += 1;
                }
            }
        }
    }
}

struct ProducerJob {
    producer: BaseProducer<DeliveryContext>,
    shared: Arc<Shared>,
    stats: Arc<Mutex<ThreadStats>>,
    id: u32,
    producers: u32,
    topics: Vec<String>,
    record_size: usize,
    keys: Option<u64>,
}

impl ProducerJob {
    fn run(self) {
        let filler = payload::filler(64 * 1024, 0x9e37_79b9_7f4a_7c15 ^ u64::from(self.id));
        let mut value = vec![0u8; self.record_size];
        let mut key = String::new();
        let mut seq: u64 = 0;
        let mut epoch = u64::MAX;
        let mut rate = 0.0f64;
        let mut start = Instant::now();
        let mut scheduled: u64 = 0;
        let mut blocked_since: Option<Instant> = None;
        let mut last_blocked = Instant::now() - Duration::from_secs(10);
        let mut topic_turn = 0usize;
        while !self.shared.stop_producers.load(Ordering::Acquire) {
            let current = self.shared.epoch.load(Ordering::Acquire);
            if current != epoch {
                epoch = current;
                let total = f64::from_bits(self.shared.rate_bits.load(Ordering::Relaxed));
                rate = total / f64::from(self.producers);
                start = Instant::now();
                scheduled = 0;
            }
            if rate <= 0.0 {
                self.producer.poll(Duration::from_millis(5));
                continue;
            }
            let now = Instant::now();
            // Records due by now (all of them, when the rate is "max").
            let due = if rate.is_finite() {
                (now.duration_since(start).as_secs_f64() * rate) as u64 + 1
            } else {
                scheduled + 256
            };
            let mut full = false;
            let mut sent_here = 0u32;
            while scheduled < due {
                let intended = if rate.is_finite() {
                    start + Duration::from_secs_f64(scheduled as f64 / rate)
                } else {
                    Instant::now()
                };
                let intended_ns = instant_ns(intended);
                payload::encode(
                    &mut value,
                    Header {
                        producer: self.id,
                        seq,
                        intended_ns,
                    },
                    &filler,
                );
                let topic = &self.topics[topic_turn % self.topics.len()];
                let mut record = BaseRecord::to(topic).payload(&value[..]);
                if let Some(space) = self.keys {
                    use std::fmt::Write as _;
                    key.clear();
                    let _ = write!(key, "key-{}", seq.wrapping_mul(2_654_435_761) % space);
                    record = record.key(key.as_str());
                }
                match self.producer.send(record) {
                    Ok(()) => {
                        let sent_at = Instant::now();
                        let lag = sent_at.saturating_duration_since(intended).as_nanos() as u64;
                        self.shared.max_lag_ns.fetch_max(lag, Ordering::Relaxed);
                        if rate.is_finite()
                            && lag > LATE_NS
                            && sent_at.duration_since(last_blocked) > Duration::from_secs(1)
                        {
                            self.shared.late_records.fetch_add(1, Ordering::Relaxed);
                        }
                        if let Some(since) = blocked_since.take() {
                            let ns = since.elapsed().as_nanos() as u64;
                            self.shared.backpressure_ns.fetch_add(ns, Ordering::Relaxed);
                        }
                        let measured = self.shared.gate.contains(intended_ns);
                        let mut guard = lock(&self.stats);
                        guard.interval.totals.sent_records += 1;
                        guard.interval.totals.sent_bytes += value.len() as u64;
                        if measured {
                            guard.measured.totals.sent_records += 1;
                            guard.measured.totals.sent_bytes += value.len() as u64;
                        }
                        drop(guard);
                        seq += 1;
                        scheduled += 1;
                        topic_turn += 1;
                        sent_here += 1;
                        if sent_here.is_multiple_of(512) {
                            serve_reports(&self.producer);
                        }
                    }
                    Err((KafkaError::MessageProduction(RDKafkaErrorCode::QueueFull), _)) => {
                        blocked_since.get_or_insert_with(Instant::now);
                        last_blocked = Instant::now();
                        full = true;
                        break;
                    }
                    Err(_) => {
                        // Not enqueued (e.g. larger than the client allows): counted as failed,
                        // and the schedule moves on.
                        let mut guard = lock(&self.stats);
                        guard.interval.totals.failed_records += 1;
                        if self.shared.gate.contains(intended_ns) {
                            guard.measured.totals.failed_records += 1;
                        }
                        scheduled += 1;
                    }
                }
                if self.shared.stop_producers.load(Ordering::Relaxed) {
                    break;
                }
            }
            let wait = if full {
                QUEUE_FULL_POLL
            } else if rate.is_finite() {
                let next = start + Duration::from_secs_f64(scheduled as f64 / rate);
                next.saturating_duration_since(Instant::now())
                    .min(Duration::from_millis(5))
            } else {
                Duration::ZERO
            };
            if wait >= Duration::from_millis(1) {
                self.producer.poll(wait);
            } else {
                // librdkafka's poll timeout has millisecond granularity: a shorter wait would
                // return at once and spin. Serve callbacks, then sleep; records that fall due
                // meanwhile go out together, still stamped with their own intended times.
                serve_reports(&self.producer);
                if !wait.is_zero() {
                    std::thread::sleep(wait.max(MIN_SLEEP));
                }
            }
        }
        let timeout = Duration::from_millis(self.shared.flush_timeout_ms.load(Ordering::Relaxed));
        let _ = self.producer.flush(timeout);
        self.producer.poll(Duration::ZERO);
    }
}

struct ConsumerJob {
    consumer: BaseConsumer,
    shared: Arc<Shared>,
    stats: Arc<Mutex<ThreadStats>>,
    consumed: Arc<AtomicU64>,
    assigned: Arc<AtomicU64>,
    processing_us: u64,
}

impl ConsumerJob {
    fn run(self) {
        let mut last_assignment_check = Instant::now() - Duration::from_secs(1);
        let mut debt_us = 0u64;
        let mut last_error: Option<Instant> = None;
        while !self.shared.stop_consumers.load(Ordering::Acquire) {
            if last_assignment_check.elapsed() > Duration::from_millis(100) {
                last_assignment_check = Instant::now();
                if let Ok(list) = self.consumer.assignment() {
                    self.assigned.store(list.count() as u64, Ordering::Relaxed);
                }
            }
            match self.consumer.poll(Duration::from_millis(100)) {
                Some(Ok(message)) => {
                    let now = now_ns();
                    let value = message.payload().unwrap_or_default();
                    let header = payload::peek(value).ok();
                    {
                        let mut guard = lock(&self.stats);
                        let stats = &mut *guard;
                        let measured =
                            header.is_some_and(|h| self.shared.gate.contains(h.intended_ns));
                        for (window, counts) in
                            [(&mut stats.interval, true), (&mut stats.measured, measured)]
                        {
                            if counts {
                                if let Some(h) = header {
                                    stats::record_us(
                                        &mut window.e2e,
                                        now.saturating_sub(h.intended_ns) / 1000,
                                    );
                                }
                                window.totals.consumed_records += 1;
                                window.totals.consumed_bytes += value.len() as u64;
                            }
                        }
                    }
                    if let Some(checker) = &self.shared.checker {
                        checker.lock().unwrap_or_else(|p| p.into_inner()).observe(
                            message.topic(),
                            message.partition(),
                            message.offset(),
                            value,
                        );
                    }
                    self.consumed.fetch_add(1, Ordering::Relaxed);
                    if self.processing_us > 0 {
                        debt_us += self.processing_us;
                        if debt_us >= 1000 {
                            std::thread::sleep(Duration::from_micros(debt_us));
                            debt_us = 0;
                        }
                    }
                }
                // Broker restarts (correctness mode) make these; say so at most once a second.
                Some(Err(e)) if last_error.is_none_or(|t| t.elapsed() > Duration::from_secs(1)) => {
                    last_error = Some(Instant::now());
                    eprintln!("bench: consumer: {e}");
                }
                Some(Err(_)) => {}
                None => {}
            }
        }
    }
}
