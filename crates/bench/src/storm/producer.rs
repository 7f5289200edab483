//! The storm's producers: librdkafka producers with short timeouts whose application re-sends
//! every record whose attempt failed, at once, up to `app_retries` times.
//!
//! Each producer thread owns one client. New records follow an open-loop schedule (as in
//! [`crate::driver`]); a failed attempt goes back to the thread's re-send queue from the
//! delivery callback (which librdkafka runs inside `poll` on the same thread), and the thread
//! sends those before the new records that are due. Every event is counted in the second it
//! happened, in one [`Series`] all threads share.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use hdrhistogram::Histogram;
use rdkafka::ClientContext;
use rdkafka::config::ClientConfig;
use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use rdkafka::message::DeliveryResult;
use rdkafka::producer::{BaseProducer, BaseRecord, Producer, ProducerContext};

use super::series::{Phases, Series};
use crate::driver::now_ns;
use crate::payload::{self, Header};
use crate::result::StormSecond;
use crate::target::Target;
use crate::workload::Workload;

/// The librdkafka settings of the storm producers: the workload's batching and `acks`, not
/// idempotent (so librdkafka may retry within the delivery timeout, and application re-sends
/// are new records), `request.timeout.ms` = `message.timeout.ms` = `request_timeout_ms`, a
/// short fixed retry backoff; then the workload's `producer_config` and the target's
/// connection properties.
pub fn settings(w: &Workload, target: &Target) -> Vec<(String, String)> {
    let s = &w.storm;
    let timeout = s.request_timeout_ms.to_string();
    let backoff = s.retry_backoff_ms.max(1).to_string();
    let mut out: Vec<(String, String)> = vec![
        ("acks".into(), w.acks.clone()),
        ("linger.ms".into(), w.linger_ms.to_string()),
        ("batch.size".into(), w.batch_size.to_string()),
        ("compression.type".into(), w.compression.clone()),
        ("enable.idempotence".into(), "false".into()),
        ("request.timeout.ms".into(), timeout.clone()),
        ("message.timeout.ms".into(), timeout),
        ("retry.backoff.ms".into(), backoff.clone()),
        ("retry.backoff.max.ms".into(), backoff),
        ("queue.buffering.max.kbytes".into(), "1048576".into()),
    ];
    for (k, v) in &w.producer_config {
        crate::target::set(&mut out, k, v);
    }
    target.apply(&mut out);
    out
}

/// One attempt of one record, carried through librdkafka as the delivery opaque.
#[derive(Debug, Clone, Copy)]
struct Attempt {
    seq: u64,
    /// The first attempt's intended send time (ns on [`now_ns`]'s clock).
    intended_ns: u64,
    /// 0 for the first attempt, then 1..=app_retries.
    attempt: u32,
    topic: u32,
}

/// Run-wide totals.
#[derive(Debug, Default, Clone, Copy)]
pub struct Totals {
    pub new_records: u64,
    pub resent: u64,
    pub acked: u64,
    pub failed: u64,
    pub timed_out: u64,
    pub given_up: u64,
}

#[derive(Debug)]
struct Shared {
    /// Bumped whenever the rate changes; producers restart their schedule.
    epoch: AtomicU64,
    /// New records/s for the whole fleet, as f64 bits.
    rate_bits: AtomicU64,
    stop: AtomicBool,
    /// `now_ns()` when the `before` phase began: second `k` is `[t0 + k s, t0 + (k+1) s)`.
    t0_ns: u64,
    t0: Instant,
    storm_end_ns: u64,
    app_retries: u32,
    series: Mutex<Series>,
    /// Attempts sent and not yet reported, plus re-sends waiting in a queue.
    outstanding: AtomicU64,
}

impl Shared {
    fn second_of(&self, ns: u64) -> u64 {
        ns.saturating_sub(self.t0_ns) / 1_000_000_000
    }

    fn series(&self) -> MutexGuard<'_, Series> {
        self.series.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// An attempt failed (`timed_out`: by the delivery timeout): queue its re-send, or give
    /// the record up.
    fn failed(&self, a: Attempt, timed_out: bool, resend: &mut VecDeque<Attempt>) {
        let second = self.second_of(now_ns());
        let mut series = self.series();
        let c = series.at(second);
        c.failed += 1;
        c.timed_out += u64::from(timed_out);
        if a.attempt < self.app_retries {
            resend.push_back(Attempt {
                attempt: a.attempt + 1,
                ..a
            });
        } else {
            c.given_up += 1;
            self.outstanding.fetch_sub(1, Ordering::Relaxed);
        }
    }
}

/// The storm's producers.
#[derive(Debug)]
pub struct StormFleet {
    shared: Arc<Shared>,
    threads: Vec<JoinHandle<()>>,
    t0: Instant,
    cpu_at_start: f64,
}

impl StormFleet {
    /// Starts `w.producers` producers, paused; the `before` phase (second 0) begins now.
    pub fn start(
        w: &Workload,
        target: &Target,
        topics: &[String],
        phases: Phases,
    ) -> Result<StormFleet, String> {
        let settings = settings(w, target);
        let t0 = Instant::now();
        let t0_ns = now_ns();
        let shared = Arc::new(Shared {
            epoch: AtomicU64::new(0),
            rate_bits: AtomicU64::new(0f64.to_bits()),
            stop: AtomicBool::new(false),
            t0_ns,
            t0,
            storm_end_ns: t0_ns + phases.storm_end() * 1_000_000_000,
            app_retries: w.storm.app_retries,
            series: Mutex::new(Series::default()),
            outstanding: AtomicU64::new(0),
        });
        let mut fleet = StormFleet {
            shared: shared.clone(),
            threads: Vec::new(),
            t0,
            cpu_at_start: crate::machine::process_cpu_seconds(),
        };
        for i in 0..w.producers {
            let mut config = ClientConfig::new();
            for (k, v) in &settings {
                config.set(k, v);
            }
            config.set("client.id", format!("sluice-bench-storm-p{i}"));
            let context = StormContext {
                shared: shared.clone(),
                resend: Mutex::new(VecDeque::new()),
                served: AtomicU64::new(0),
            };
            let producer: BaseProducer<StormContext> = config
                .create_with_context(context)
                .map_err(|e| format!("cannot create a storm producer: {e}"))?;
            let job = Job {
                producer,
                shared: shared.clone(),
                id: i,
                producers: w.producers,
                topics: topics.to_vec(),
                record_size: w.record_size,
                keys: w.keys.then_some(w.key_space),
            };
            let handle = std::thread::Builder::new()
                .name(format!("bench-storm-{i}"))
                .spawn(move || job.run())
                .map_err(|e| format!("cannot start a producer thread: {e}"))?;
            fleet.threads.push(handle);
        }
        Ok(fleet)
    }

    pub fn t0(&self) -> Instant {
        self.t0
    }

    pub fn cpu_s(&self) -> f64 {
        crate::machine::process_cpu_seconds() - self.cpu_at_start
    }

    /// Sets the rate of new records for the whole fleet; producers start a fresh schedule now.
    pub fn set_rate(&self, rps: f64) {
        self.shared
            .rate_bits
            .store(rps.max(0.0).to_bits(), Ordering::Relaxed);
        self.shared.epoch.fetch_add(1, Ordering::Release);
    }

    /// New records offered in seconds `[from, to)`.
    pub fn offered_between(&self, from: u64, to: u64) -> f64 {
        let series = self.shared.series();
        (from..to)
            .filter_map(|i| series.get(i))
            .map(|c| c.new_records as f64)
            .sum()
    }

    pub fn outstanding(&self) -> u64 {
        self.shared.outstanding.load(Ordering::Relaxed)
    }

    /// Nothing in flight and nothing waiting to be re-sent.
    pub fn idle(&self) -> bool {
        self.outstanding() == 0
    }

    /// The progress line of second `index`.
    pub fn progress_line(&self, index: u64) -> String {
        let series = self.shared.series();
        let Some(c) = series.get(index) else {
            return format!("{:>5}s  (nothing)", index + 1);
        };
        let p99 = if c.ack.is_empty() {
            0.0
        } else {
            c.ack.value_at_quantile(0.99) as f64 / 1000.0
        };
        format!(
            "{:>5}s offered {:>8}/s  re-sent {:>8}/s  goodput {:>8}/s (fresh {:>8})  failed {:>8}/s (timed out {:>8})  given up {:>7}/s  ack p99 {:>9.1} ms",
            index + 1,
            c.new_records,
            c.resent,
            c.acked,
            c.acked_fresh,
            c.failed,
            c.timed_out,
            c.given_up,
            p99
        )
    }

    /// Stops the threads; what their clients still hold is abandoned (and no longer counted).
    pub fn stop(&mut self) {
        self.shared.stop.store(true, Ordering::Release);
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
    }

    /// The per-second rows, every acknowledgement's latency, and the totals.
    pub fn finish(&self, phases: &Phases) -> (Vec<StormSecond>, Histogram<u64>, Totals) {
        let series = self.shared.series();
        let rows = super::series::rows(&series, phases);
        let mut totals = Totals::default();
        for i in 0..series.len() as u64 {
            if let Some(c) = series.get(i) {
                totals.new_records += c.new_records;
                totals.resent += c.resent;
                totals.acked += c.acked;
                totals.failed += c.failed;
                totals.timed_out += c.timed_out;
                totals.given_up += c.given_up;
            }
        }
        (rows, series.all_acks(), totals)
    }
}

impl Drop for StormFleet {
    fn drop(&mut self) {
        self.stop();
    }
}

/// Runs in the producer thread (librdkafka serves delivery reports from `poll`).
struct StormContext {
    shared: Arc<Shared>,
    /// Failed attempts to re-send; only this producer's thread touches it (here and in
    /// [`Job::run`]), the mutex only makes the context `Sync` as librdkafka requires.
    resend: Mutex<VecDeque<Attempt>>,
    /// Delivery reports served ([`crate::driver::serve_reports`]).
    served: AtomicU64,
}

impl StormContext {
    fn resend(&self) -> MutexGuard<'_, VecDeque<Attempt>> {
        self.resend.lock().unwrap_or_else(|p| p.into_inner())
    }
}

impl ClientContext for StormContext {}

impl crate::driver::CountsReports for StormContext {
    fn reports_served(&self) -> u64 {
        self.served.load(Ordering::Relaxed)
    }
}

impl ProducerContext for StormContext {
    type DeliveryOpaque = Box<Attempt>;

    fn delivery(&self, result: &DeliveryResult<'_>, attempt: Box<Attempt>) {
        self.served.fetch_add(1, Ordering::Relaxed);
        let shared = &self.shared;
        if shared.stop.load(Ordering::Acquire) {
            // Purged when the run ended: not part of it.
            return;
        }
        match result {
            Ok(_) => {
                let now = now_ns();
                let mut series = shared.series();
                let c = series.at(shared.second_of(now));
                c.acked += 1;
                c.acked_fresh += u64::from(attempt.intended_ns >= shared.storm_end_ns);
                c.record_ack_us(now.saturating_sub(attempt.intended_ns) / 1000);
                drop(series);
                shared.outstanding.fetch_sub(1, Ordering::Relaxed);
            }
            Err((e, _)) => {
                let timed_out = matches!(
                    e,
                    KafkaError::MessageProduction(RDKafkaErrorCode::MessageTimedOut)
                );
                // Still outstanding when re-sent: `failed` releases it only when given up.
                let mut resend = self.resend();
                shared.failed(*attempt, timed_out, &mut resend);
            }
        }
    }
}

struct Job {
    producer: BaseProducer<StormContext>,
    shared: Arc<Shared>,
    id: u32,
    producers: u32,
    topics: Vec<String>,
    record_size: usize,
    keys: Option<u64>,
}

/// Shortest sleep between sends (see `driver::MIN_SLEEP`).
const MIN_SLEEP: Duration = Duration::from_micros(200);
/// How long a producer whose client refused a record serves delivery reports before it sends
/// again (see `driver::QUEUE_FULL_POLL`; shorter here, since the re-sends are meant to be
/// aggressive).
const QUEUE_FULL_POLL: Duration = Duration::from_millis(5);

impl Job {
    fn run(self) {
        let filler = payload::filler(64 * 1024, 0x5eed_0f57_u64 ^ u64::from(self.id));
        let mut value = vec![0u8; self.record_size];
        let mut key = String::new();
        let mut seq: u64 = 0;
        let mut epoch = u64::MAX;
        let mut rate = 0.0f64;
        let mut start = Instant::now();
        let mut scheduled: u64 = 0;
        let mut topic_turn = 0u32;
        let mut batch: Vec<Attempt> = Vec::new();
        while !self.shared.stop.load(Ordering::Acquire) {
            let current = self.shared.epoch.load(Ordering::Acquire);
            if current != epoch {
                epoch = current;
                let total = f64::from_bits(self.shared.rate_bits.load(Ordering::Relaxed));
                rate = total / f64::from(self.producers);
                start = Instant::now();
                scheduled = 0;
            }
            // Re-sends first, at once: the ones queued so far. A send the client refuses (its
            // queue is full) is a failed attempt too, but the pass stops there and the thread
            // serves delivery reports for a while: re-sending into a full queue again and again
            // would only burn the CPU the broker shares with this generator.
            let mut full = false;
            batch.extend(self.producer.context().resend().drain(..));
            let mut pending = batch.drain(..);
            for a in pending.by_ref() {
                self.shared
                    .series()
                    .at(self.shared.second_of(now_ns()))
                    .resent += 1;
                if !self.send(a, &mut value, &filler, &mut key) {
                    full = true;
                    break;
                }
            }
            // Not attempted yet: back to the front of the queue, in order.
            let rest: Vec<Attempt> = pending.collect();
            if !rest.is_empty() {
                let mut queue = self.producer.context().resend();
                for a in rest.into_iter().rev() {
                    queue.push_front(a);
                }
            }
            // New records due by now.
            if rate > 0.0 && !full {
                let due = (start.elapsed().as_secs_f64() * rate) as u64 + 1;
                let mut sent_here = 0u32;
                while scheduled < due {
                    let intended = start + Duration::from_secs_f64(scheduled as f64 / rate);
                    let intended_ns = self.shared.t0_ns
                        + intended
                            .saturating_duration_since(self.shared.t0)
                            .as_nanos() as u64;
                    let a = Attempt {
                        seq,
                        intended_ns,
                        attempt: 0,
                        topic: topic_turn % self.topics.len() as u32,
                    };
                    self.shared.outstanding.fetch_add(1, Ordering::Relaxed);
                    self.shared
                        .series()
                        .at(self.shared.second_of(intended_ns))
                        .new_records += 1;
                    let accepted = self.send(a, &mut value, &filler, &mut key);
                    seq += 1;
                    scheduled += 1;
                    topic_turn = topic_turn.wrapping_add(1);
                    sent_here += 1;
                    if !accepted {
                        full = true;
                        break;
                    }
                    if sent_here.is_multiple_of(512) {
                        crate::driver::serve_reports(&self.producer);
                    }
                    if self.shared.stop.load(Ordering::Relaxed) {
                        break;
                    }
                }
            }
            let wait = if full {
                QUEUE_FULL_POLL
            } else if rate > 0.0 {
                let next = start + Duration::from_secs_f64(scheduled as f64 / rate);
                next.saturating_duration_since(Instant::now())
                    .min(Duration::from_millis(5))
            } else {
                Duration::from_millis(5)
            };
            if wait >= Duration::from_millis(1) {
                self.producer.poll(wait);
            } else {
                crate::driver::serve_reports(&self.producer);
                if !wait.is_zero() {
                    std::thread::sleep(wait.max(MIN_SLEEP));
                }
            }
        }
        // Whatever is still queued in the client is abandoned: the run is over.
        self.producer
            .purge(rdkafka::producer::PurgeConfig::default().queue().inflight());
        self.producer.poll(Duration::ZERO);
    }

    /// Enqueues one attempt; if the client refuses it, that attempt has failed (and is queued
    /// for its re-send, or given up), and this returns false.
    fn send(&self, a: Attempt, value: &mut [u8], filler: &[u8], key: &mut String) -> bool {
        payload::encode(
            value,
            Header {
                producer: self.id,
                seq: a.seq,
                intended_ns: a.intended_ns,
            },
            filler,
        );
        let topic = &self.topics[a.topic as usize];
        let mut record = BaseRecord::with_opaque_to(topic, Box::new(a)).payload(&value[..]);
        if let Some(space) = self.keys {
            use std::fmt::Write as _;
            key.clear();
            let _ = write!(key, "key-{}", a.seq.wrapping_mul(2_654_435_761) % space);
            record = record.key(key.as_str());
        }
        match self.producer.send(record) {
            Ok(()) => true,
            Err((_, record)) => {
                let a = *record.delivery_opaque;
                let mut resend = self.producer.context().resend();
                self.shared.failed(a, false, &mut resend);
                false
            }
        }
    }
}
