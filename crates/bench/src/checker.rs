//! The correctness checker behind `sluice bench correctness`: it compares what the broker
//! acknowledged with what consumers read back, and tells lost, duplicated, reordered and
//! corrupted records apart, per partition.
//!
//! Where it sits: producers send [`payload`] records, each naming its producer and per-producer
//! sequence number (dense, from 0). Every delivery report goes to [`Checker::acked`]; a consumer
//! reads every partition from the start and hands each record to [`Checker::observe`]. The two
//! streams may interleave in any order (a record is often read before its delivery report
//! arrives); only [`Checker::report`] draws conclusions, once both streams are complete.
//!
//! Memory is what limits a long run with many broker kills, so nothing is kept per record except
//! one packed 8-byte [`AckSlot`] per acknowledged record and one bit per observed record, both in
//! vectors indexed by sequence number. Topic-partitions and producer ids are interned to small
//! indices so the per-partition state is a plain vector as well.
//!
//! | Fault           | Decided                                                              |
//! |-----------------|----------------------------------------------------------------------|
//! | re-read         | offset ≤ last offset observed on that partition: ignored entirely    |
//! | corrupted       | value fails [`payload::decode`] (short, bad magic, bad checksum)     |
//! | duplicated      | (producer, seq) observed before, anywhere: each extra copy counts    |
//! | out of order    | seq below the highest seq of that producer seen on the same partition |
//! | lost            | acknowledged, never observed: counted on the partition of the ack    |
//! | unacked present | observed, never acknowledged: allowed (the ack died with the broker) |

use std::collections::HashMap;
use std::fmt;

use crate::payload;
use crate::result::{CorrectnessReport, PartitionCheck};

/// At most this many examples of each kind of fault go into the report.
const EXAMPLES_PER_KIND: usize = 5;

/// Bits of an [`AckSlot`] that hold the acknowledged offset (plus one); the rest hold the
/// topic-partition index (plus one). 2^40 offsets is more than any benchmark partition reaches;
/// a larger offset is only shown as `?` in examples, the check itself does not use it.
const ACK_OFFSET_BITS: u32 = 40;
const ACK_OFFSET_MASK: u64 = (1 << ACK_OFFSET_BITS) - 1;

/// Topic-partitions the checker can tell apart: what fits the upper 24 bits of an [`AckSlot`]
/// (zero meaning "not acknowledged"). Kafka clusters stop far below this.
const TOPIC_PARTITIONS_MAX: usize = (1 << (64 - ACK_OFFSET_BITS)) - 1;

/// Producer ids below this are looked up in a vector rather than a map.
const DIRECT_PRODUCER_IDS: u32 = 1 << 16;

/// Which entry of `Checker::recent_partition` a stream uses.
const RECENT_ACK: usize = 0;
const RECENT_OBSERVE: usize = 1;

/// Sequence numbers at or above this are not tracked. Tracking seq `s` costs `8 * s` bytes for
/// the acknowledgements of that producer, so 2^32 records per producer (32 GiB) is already past
/// what the machine holds; a record claiming a higher seq cannot be one of ours and would
/// otherwise make the checker allocate without bound.
const SEQ_LIMIT: u64 = 1 << 32;

/// Checks a correctness run: feed it delivery reports and records read back, then ask for the
/// [`CorrectnessReport`].
#[derive(Debug)]
pub struct Checker {
    /// With a non-idempotent producer, retries may legitimately write a record twice.
    allow_duplicates: bool,
    /// topic -> partition -> index into `partitions`.
    partition_index: HashMap<String, HashMap<i32, u32>>,
    /// The partition of the last delivery report and of the last record read: both streams
    /// come in runs of one partition (a batch), so this spares most of the map lookups.
    recent_partition: [Option<usize>; 2],
    partitions: Vec<PartitionState>,
    /// producer id -> index into `producers`, for ids below [`DIRECT_PRODUCER_IDS`]
    /// (`u32::MAX`: none yet); the benchmark numbers its producers from 0.
    producer_direct: Vec<u32>,
    /// producer id -> index into `producers`, for larger ids.
    producer_index: HashMap<u32, u32>,
    producers: Vec<ProducerState>,
    /// Delivery reports for a seq at or beyond [`SEQ_LIMIT`]: they cannot be checked, so the
    /// run cannot pass.
    untracked_acks: u64,
    examples_duplicated: Vec<String>,
    examples_out_of_order: Vec<String>,
    examples_corrupted: Vec<String>,
    examples_untracked: Vec<String>,
}

/// What the checker knows about one topic-partition.
#[derive(Debug)]
struct PartitionState {
    topic: String,
    partition: i32,
    /// Highest offset observed; anything at or below it is a re-read after a reconnect.
    last_offset: Option<i64>,
    /// Per producer index: one more than the highest seq observed here (0: none yet).
    next_seq: Vec<u64>,
    acked: u64,
    seen: u64,
    duplicated: u64,
    out_of_order: u64,
    corrupted: u64,
}

/// What the checker knows about one producer's records.
#[derive(Debug)]
struct ProducerState {
    id: u32,
    /// Indexed by seq.
    acks: AckLog,
    /// Indexed by seq: observed at least once.
    seen: Bitset,
}

/// Where a record was acknowledged, packed into 8 bytes: topic-partition index + 1 in the upper
/// bits, offset + 1 in the lower [`ACK_OFFSET_BITS`] (0 when the offset is unknown or too big).
/// All zero means not acknowledged.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct AckSlot(u64);

impl AckSlot {
    const NONE: AckSlot = AckSlot(0);

    fn new(partition_index: usize, offset: i64) -> AckSlot {
        // Offsets 0..=MASK-1 are stored as 1..=MASK; anything else (-1 from acks=0, absurdly
        // large) as "unknown".
        let offset_bits = match u64::try_from(offset) {
            Ok(o) if o < ACK_OFFSET_MASK => o + 1,
            _ => 0,
        };
        AckSlot(((partition_index as u64 + 1) << ACK_OFFSET_BITS) | offset_bits)
    }

    fn is_acked(self) -> bool {
        self != AckSlot::NONE
    }

    /// Only meaningful when [`AckSlot::is_acked`].
    fn partition_index(self) -> usize {
        ((self.0 >> ACK_OFFSET_BITS) - 1) as usize
    }

    fn offset(self) -> Option<i64> {
        match self.0 & ACK_OFFSET_MASK {
            0 => None,
            stored => Some(stored as i64 - 1),
        }
    }
}

/// One [`AckSlot`] per seq of a producer. Its own type so that `Debug` prints a summary rather
/// than millions of slots.
#[derive(Default)]
struct AckLog(Vec<AckSlot>);

impl fmt::Debug for AckLog {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("AckLog")
            .field("len", &self.0.len())
            .finish()
    }
}

/// A growable set of small integers, one bit each.
#[derive(Default)]
struct Bitset {
    words: Vec<u64>,
}

impl Bitset {
    fn contains(&self, bit: u64) -> bool {
        let word = (bit / 64) as usize;
        self.words
            .get(word)
            .is_some_and(|w| w & (1 << (bit % 64)) != 0)
    }

    /// Adds `bit`; returns whether it was there already.
    fn insert(&mut self, bit: u64) -> bool {
        let word = (bit / 64) as usize;
        if word >= self.words.len() {
            // `resize` reserves with amortized doubling, so dense growth stays linear.
            self.words.resize(word + 1, 0);
        }
        let mask = 1 << (bit % 64);
        let was = self.words[word] & mask != 0;
        self.words[word] |= mask;
        was
    }

    fn len(&self) -> u64 {
        self.words.iter().map(|w| u64::from(w.count_ones())).sum()
    }
}

impl fmt::Debug for Bitset {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Bitset").field("len", &self.len()).finish()
    }
}

impl Checker {
    /// `allow_duplicates`: whether duplicates still let the run pass (non-idempotent producer).
    pub fn new(allow_duplicates: bool) -> Self {
        Checker {
            allow_duplicates,
            partition_index: HashMap::new(),
            recent_partition: [None; 2],
            partitions: Vec::new(),
            producer_direct: Vec::new(),
            producer_index: HashMap::new(),
            producers: Vec::new(),
            untracked_acks: 0,
            examples_duplicated: Vec::new(),
            examples_out_of_order: Vec::new(),
            examples_corrupted: Vec::new(),
            examples_untracked: Vec::new(),
        }
    }

    /// A delivery report: the broker acknowledged record (`producer`, `seq`) at
    /// `topic`/`partition`/`offset`. A second report for the same record keeps the first.
    pub fn acked(&mut self, topic: &str, partition: i32, offset: i64, producer: u32, seq: u64) {
        let tp = self.partition(topic, partition, RECENT_ACK);
        if seq >= SEQ_LIMIT {
            self.untracked_acks += 1;
            let part = &self.partitions[tp];
            push_example(&mut self.examples_untracked, || {
                format!(
                    "untracked: producer {producer} seq {seq} (acked at {}) is beyond the \
                     checker's limit of {SEQ_LIMIT} records per producer",
                    part.at(Some(offset))
                )
            });
            return;
        }
        let p = self.producer(producer);
        let acks = &mut self.producers[p].acks.0;
        let seq = seq as usize;
        if seq >= acks.len() {
            acks.resize(seq + 1, AckSlot::NONE);
        }
        if acks[seq].is_acked() {
            return;
        }
        acks[seq] = AckSlot::new(tp, offset);
        self.partitions[tp].acked += 1;
    }

    /// A record read back by a consumer at `topic`/`partition`/`offset`, with its raw value.
    /// Records of one partition must come in offset order; going back to an offset already
    /// observed (a consumer reconnecting) is a re-read and ignored.
    ///
    /// A corrupted record's identity cannot be trusted, so it does not count as seen: if it was
    /// acknowledged, it is also reported lost.
    pub fn observe(&mut self, topic: &str, partition: i32, offset: i64, value: &[u8]) {
        let tp = self.partition(topic, partition, RECENT_OBSERVE);
        let part = &mut self.partitions[tp];
        if part.last_offset.is_some_and(|last| offset <= last) {
            return;
        }
        part.last_offset = Some(offset);

        let header = match payload::decode(value) {
            Ok(header) if header.seq < SEQ_LIMIT => header,
            Ok(header) => {
                part.corrupted += 1;
                push_example(&mut self.examples_corrupted, || {
                    format!(
                        "corrupted: {}: producer {} seq {} is beyond the checker's limit of \
                         {SEQ_LIMIT} records per producer",
                        part.at(Some(offset)),
                        header.producer,
                        header.seq
                    )
                });
                return;
            }
            Err(error) => {
                part.corrupted += 1;
                push_example(&mut self.examples_corrupted, || {
                    format!(
                        "corrupted: {}: {error} ({} bytes)",
                        part.at(Some(offset)),
                        value.len()
                    )
                });
                return;
            }
        };

        let p = self.producer(header.producer);
        let producer = &mut self.producers[p];
        let part = &mut self.partitions[tp];
        let seq = header.seq;
        if producer.seen.insert(seq) {
            part.duplicated += 1;
            if self.examples_duplicated.len() < EXAMPLES_PER_KIND {
                let acked = match producer.acks.0.get(seq as usize) {
                    Some(slot) if slot.is_acked() => {
                        let at = self.partitions[slot.partition_index()].at(slot.offset());
                        format!(", acked at {at}")
                    }
                    _ => String::new(),
                };
                let example = format!(
                    "duplicated: producer {} seq {seq} again at {}{acked}",
                    header.producer,
                    self.partitions[tp].at(Some(offset)),
                );
                self.examples_duplicated.push(example);
            }
            return;
        }
        part.seen += 1;
        if part.next_seq.len() <= p {
            part.next_seq.resize(p + 1, 0);
        }
        let next = part.next_seq[p];
        if seq < next {
            part.out_of_order += 1;
            push_example(&mut self.examples_out_of_order, || {
                format!(
                    "out of order: producer {} seq {seq} at {} after seq {}",
                    header.producer,
                    part.at(Some(offset)),
                    next - 1
                )
            });
        } else {
            part.next_seq[p] = seq + 1;
        }
    }

    /// The verdict over everything fed so far. `kills` is only passed through to the report.
    pub fn report(&self, kills: u32) -> CorrectnessReport {
        let mut partitions: Vec<PartitionCheck> = self
            .partitions
            .iter()
            .map(|p| PartitionCheck {
                topic: p.topic.clone(),
                partition: p.partition,
                acked: p.acked,
                seen: p.seen,
                lost: 0,
                duplicated: p.duplicated,
                out_of_order: p.out_of_order,
                corrupted: p.corrupted,
            })
            .collect();

        let mut producers: Vec<&ProducerState> = self.producers.iter().collect();
        producers.sort_by_key(|p| p.id);
        let mut examples_lost = Vec::new();
        let (mut acked, mut seen, mut acked_and_seen) = (0u64, 0u64, 0u64);
        for producer in producers {
            seen += producer.seen.len();
            for (seq, slot) in producer.acks.0.iter().enumerate() {
                if !slot.is_acked() {
                    continue;
                }
                acked += 1;
                if producer.seen.contains(seq as u64) {
                    acked_and_seen += 1;
                    continue;
                }
                let tp = slot.partition_index();
                partitions[tp].lost += 1;
                if examples_lost.len() < EXAMPLES_PER_KIND {
                    examples_lost.push(format!(
                        "lost: producer {} seq {seq} (acked at {})",
                        producer.id,
                        self.partitions[tp].at(slot.offset())
                    ));
                }
            }
        }
        partitions.sort_by(|a, b| (&a.topic, a.partition).cmp(&(&b.topic, b.partition)));

        let lost: u64 = partitions.iter().map(|p| p.lost).sum();
        let duplicated: u64 = partitions.iter().map(|p| p.duplicated).sum();
        let out_of_order: u64 = partitions.iter().map(|p| p.out_of_order).sum();
        let corrupted: u64 = partitions.iter().map(|p| p.corrupted).sum();
        let passed = lost == 0
            && out_of_order == 0
            && corrupted == 0
            && (self.allow_duplicates || duplicated == 0)
            && self.untracked_acks == 0;
        let examples = examples_lost
            .into_iter()
            .chain(self.examples_duplicated.iter().cloned())
            .chain(self.examples_out_of_order.iter().cloned())
            .chain(self.examples_corrupted.iter().cloned())
            .chain(self.examples_untracked.iter().cloned())
            .collect();
        CorrectnessReport {
            kills,
            acked,
            seen,
            lost,
            duplicated,
            out_of_order,
            corrupted,
            unacked_present: seen - acked_and_seen,
            partitions,
            examples,
            passed,
            kill_log: Vec::new(),
            ..CorrectnessReport::default()
        }
    }

    /// One past the highest offset observed on `topic`/`partition` (0 when nothing was): the
    /// partition has been read through when this reaches its high watermark.
    pub fn next_offset(&self, topic: &str, partition: i32) -> i64 {
        self.partition_index
            .get(topic)
            .and_then(|m| m.get(&partition))
            .and_then(|&i| self.partitions[i as usize].last_offset)
            .map_or(0, |last| last + 1)
    }

    /// The index of a topic-partition, interning it on first sight. `recent`: which entry of
    /// `recent_partition` the calling stream uses.
    fn partition(&mut self, topic: &str, partition: i32, recent: usize) -> usize {
        if let Some(index) = self.recent_partition[recent] {
            let known = &self.partitions[index];
            if known.partition == partition && known.topic == topic {
                return index;
            }
        }
        let index = self.partition_slow(topic, partition);
        self.recent_partition[recent] = Some(index);
        index
    }

    fn partition_slow(&mut self, topic: &str, partition: i32) -> usize {
        if let Some(&index) = self
            .partition_index
            .get(topic)
            .and_then(|m| m.get(&partition))
        {
            return index as usize;
        }
        let index = self.partitions.len();
        assert!(
            index < TOPIC_PARTITIONS_MAX,
            "the correctness checker tracks at most {TOPIC_PARTITIONS_MAX} topic-partitions"
        );
        self.partitions.push(PartitionState {
            topic: topic.to_owned(),
            partition,
            last_offset: None,
            next_seq: Vec::new(),
            acked: 0,
            seen: 0,
            duplicated: 0,
            out_of_order: 0,
            corrupted: 0,
        });
        self.partition_index
            .entry(topic.to_owned())
            .or_default()
            .insert(partition, index as u32);
        index
    }

    /// The index of a producer, interning it on first sight.
    fn producer(&mut self, id: u32) -> usize {
        let next = self.producers.len() as u32;
        let index = if id < DIRECT_PRODUCER_IDS {
            let direct = &mut self.producer_direct;
            if direct.len() <= id as usize {
                direct.resize(id as usize + 1, u32::MAX);
            }
            let slot = &mut direct[id as usize];
            if *slot == u32::MAX {
                *slot = next;
            }
            *slot
        } else {
            *self.producer_index.entry(id).or_insert(next)
        };
        if index == next {
            self.producers.push(ProducerState {
                id,
                acks: AckLog::default(),
                seen: Bitset::default(),
            });
        }
        index as usize
    }
}

impl PartitionState {
    /// `topic/partition@offset` for examples.
    fn at(&self, offset: Option<i64>) -> String {
        match offset {
            Some(offset) => format!("{}/{}@{offset}", self.topic, self.partition),
            None => format!("{}/{}@?", self.topic, self.partition),
        }
    }
}

/// Keeps an example unless there are enough of its kind already; formats it only if kept (a
/// badly broken run has millions of faults).
fn push_example(examples: &mut Vec<String>, example: impl FnOnce() -> String) {
    if examples.len() < EXAMPLES_PER_KIND {
        examples.push(example());
    }
}

#[cfg(test)]
mod tests {
    use std::time::{Duration, Instant};

    use super::*;
    use crate::payload::{Header, encode, filler};

    /// One record as the broker stored it.
    #[derive(Debug, Clone)]
    struct Stored {
        topic: &'static str,
        partition: i32,
        offset: i64,
        producer: u32,
        seq: u64,
        value: Vec<u8>,
    }

    /// `producers` producers each send `per_producer` records, spread round robin over
    /// `partitions` partitions of topic `t0` (so every producer writes to every partition), in
    /// the order the broker stored them: partition by partition, offset by offset.
    fn stream(producers: u32, per_producer: u64, partitions: i32) -> Vec<Stored> {
        let fill = filler(256, 7);
        let mut by_partition: Vec<Vec<Stored>> = (0..partitions).map(|_| Vec::new()).collect();
        for seq in 0..per_producer {
            for producer in 0..producers {
                let partition = ((u64::from(producer) + seq) % partitions as u64) as i32;
                let log = &mut by_partition[partition as usize];
                let mut value = vec![0; 40];
                encode(
                    &mut value,
                    Header {
                        producer,
                        seq,
                        intended_ns: seq * 1000,
                    },
                    &fill,
                );
                let offset = log.len() as i64;
                log.push(Stored {
                    topic: "t0",
                    partition,
                    offset,
                    producer,
                    seq,
                    value,
                });
            }
        }
        by_partition.into_iter().flatten().collect()
    }

    fn ack_all(checker: &mut Checker, records: &[Stored]) {
        for r in records {
            checker.acked(r.topic, r.partition, r.offset, r.producer, r.seq);
        }
    }

    fn observe_all(checker: &mut Checker, records: &[Stored]) {
        for r in records {
            checker.observe(r.topic, r.partition, r.offset, &r.value);
        }
    }

    fn check(records: &[Stored], observed: &[Stored], allow_duplicates: bool) -> CorrectnessReport {
        let mut checker = Checker::new(allow_duplicates);
        ack_all(&mut checker, records);
        observe_all(&mut checker, observed);
        checker.report(0)
    }

    fn partition(report: &CorrectnessReport, partition: i32) -> &PartitionCheck {
        report
            .partitions
            .iter()
            .find(|p| p.partition == partition)
            .unwrap()
    }

    /// Appends copies of the records at indices `copies` after the last record of their
    /// partition, as a broker writing a retried batch again would.
    fn redeliver(records: &mut Vec<Stored>, copies: &[usize]) {
        for &i in copies {
            let mut copy = records[i].clone();
            copy.offset = records
                .iter()
                .filter(|r| r.partition == copy.partition)
                .map(|r| r.offset)
                .max()
                .unwrap()
                + 1;
            // Keep partition order: insert after the last record of that partition.
            let at = records
                .iter()
                .rposition(|r| r.partition == copy.partition)
                .unwrap()
                + 1;
            records.insert(at, copy);
        }
    }

    #[test]
    fn clean_stream_passes() {
        let records = stream(3, 100, 4);
        let report = check(&records, &records, false);
        assert!(report.passed, "{report:?}");
        assert_eq!(report.acked, 300);
        assert_eq!(report.seen, 300);
        assert_eq!(
            (
                report.lost,
                report.duplicated,
                report.out_of_order,
                report.corrupted
            ),
            (0, 0, 0, 0)
        );
        assert_eq!(report.unacked_present, 0);
        assert!(report.examples.is_empty());
        assert_eq!(report.partitions.len(), 4);
        for (i, p) in report.partitions.iter().enumerate() {
            assert_eq!((p.topic.as_str(), p.partition), ("t0", i as i32));
            assert_eq!((p.acked, p.seen), (75, 75));
        }
    }

    #[test]
    fn dropped_records_are_lost_on_their_partition() {
        let records = stream(2, 50, 4);
        let dropped: Vec<usize> = records
            .iter()
            .enumerate()
            .filter(|(_, r)| r.partition == 2 && r.offset % 10 == 3)
            .map(|(i, _)| i)
            .collect();
        let observed: Vec<Stored> = records
            .iter()
            .enumerate()
            .filter(|(i, _)| !dropped.contains(i))
            .map(|(_, r)| r.clone())
            .collect();
        let report = check(&records, &observed, true);
        assert!(!report.passed);
        assert_eq!(report.lost, dropped.len() as u64);
        assert_eq!(partition(&report, 2).lost, dropped.len() as u64);
        assert_eq!(partition(&report, 0).lost, 0);
        assert_eq!(report.seen, 100 - dropped.len() as u64);
        let first = &records[dropped[0]];
        let expected = format!(
            "lost: producer {} seq {} (acked at t0/2@{})",
            first.producer, first.seq, first.offset
        );
        assert!(report.examples.contains(&expected), "{:?}", report.examples);
        let lost_examples = report
            .examples
            .iter()
            .filter(|e| e.starts_with("lost:"))
            .count();
        assert_eq!(lost_examples, EXAMPLES_PER_KIND.min(dropped.len()));
    }

    #[test]
    fn a_second_copy_is_a_duplicate() {
        let records = stream(2, 20, 2);
        let mut observed = records.clone();
        redeliver(&mut observed, &[3, 5]);
        for allow_duplicates in [false, true] {
            let report = check(&records, &observed, allow_duplicates);
            assert_eq!(report.duplicated, 2);
            assert_eq!(report.passed, allow_duplicates);
            assert_eq!(report.seen, 40);
            assert_eq!(
                (report.lost, report.out_of_order, report.unacked_present),
                (0, 0, 0)
            );
            assert_eq!(partition(&report, 0).duplicated, 2);
            assert!(
                report.examples[0].starts_with("duplicated: producer"),
                "{:?}",
                report.examples
            );
        }
    }

    #[test]
    fn a_copy_on_another_partition_is_a_duplicate() {
        let records = stream(1, 10, 2);
        let mut observed = records.clone();
        let mut stray = records[0].clone();
        stray.partition = 1;
        stray.offset = 100;
        observed.push(stray);
        let report = check(&records, &observed, false);
        assert!(!report.passed);
        assert_eq!(
            (report.duplicated, partition(&report, 1).duplicated),
            (1, 1)
        );
        assert_eq!(
            report.examples,
            vec!["duplicated: producer 0 seq 0 again at t0/1@100, acked at t0/0@0".to_owned()]
        );
    }

    #[test]
    fn examples_are_capped_per_kind() {
        let records = stream(1, 100, 1);
        let mut observed = records.clone();
        for r in observed.iter_mut().take(20) {
            r.value[payload::HEADER_LEN] ^= 0xff;
        }
        let report = check(&records, &observed, false);
        assert_eq!((report.corrupted, report.lost), (20, 20));
        let count = |kind: &str| {
            report
                .examples
                .iter()
                .filter(|e| e.starts_with(kind))
                .count()
        };
        assert_eq!((count("corrupted:"), count("lost:")), (5, 5));
        assert_eq!(report.examples.len(), 10);
    }

    #[test]
    fn swapped_records_are_out_of_order() {
        let records = stream(2, 20, 2);
        let mut observed = records.clone();
        // Records 4 and 6 of partition 0 come from the same producer (two producers alternate).
        assert_eq!(observed[4].producer, observed[6].producer);
        let (a, b) = (observed[4].clone(), observed[6].clone());
        observed[4].value = b.value;
        observed[6].value = a.value;
        let report = check(&records, &observed, true);
        assert!(!report.passed);
        assert_eq!(report.out_of_order, 1);
        assert_eq!(partition(&report, 0).out_of_order, 1);
        assert_eq!(
            (report.lost, report.duplicated, report.corrupted),
            (0, 0, 0)
        );
        let expected = format!(
            "out of order: producer {} seq {} at t0/0@6 after seq {}",
            a.producer, a.seq, b.seq
        );
        assert_eq!(report.examples, vec![expected]);
    }

    #[test]
    fn a_flipped_byte_is_corruption() {
        let records = stream(1, 20, 1);
        let mut observed = records.clone();
        observed[7].value[33] ^= 0x01;
        let report = check(&records, &observed, true);
        assert!(!report.passed);
        assert_eq!(report.corrupted, 1);
        assert_eq!(partition(&report, 0).corrupted, 1);
        // Its identity is unknown, so the acknowledged record it should have been is missing.
        assert_eq!(report.lost, 1);
        assert!(
            report
                .examples
                .iter()
                .any(|e| e.starts_with("corrupted: t0/0@7: record checksum"))
        );

        let mut checker = Checker::new(true);
        checker.observe("t0", 0, 0, b"short");
        checker.observe("t0", 0, 1, &[0; 64]);
        assert_eq!(checker.report(0).corrupted, 2);
    }

    #[test]
    fn next_offset_follows_what_was_read() {
        let records = stream(1, 10, 2);
        let mut checker = Checker::new(false);
        assert_eq!(checker.next_offset("t0", 0), 0);
        observe_all(&mut checker, &records[..3]);
        assert_eq!(checker.next_offset("t0", 0), 3);
        assert_eq!(checker.next_offset("t0", 1), 0);
        assert_eq!(checker.next_offset("other", 0), 0);
        observe_all(&mut checker, &records);
        assert_eq!(
            (checker.next_offset("t0", 0), checker.next_offset("t0", 1)),
            (5, 5)
        );
    }

    #[test]
    fn re_reads_are_ignored() {
        let records = stream(2, 30, 3);
        let mut observed = records.clone();
        // A consumer reconnects and reads partition 1 again from offset 5, then a corrupted
        // copy of an old offset arrives: none of it counts.
        let at = records.iter().rposition(|r| r.partition == 1).unwrap() + 1;
        let mut again: Vec<Stored> = records
            .iter()
            .filter(|r| r.partition == 1 && r.offset >= 5)
            .cloned()
            .collect();
        again[0].value[0] = b'X';
        observed.splice(at..at, again);
        let report = check(&records, &observed, false);
        assert!(report.passed, "{report:?}");
        assert_eq!(
            (report.seen, report.duplicated, report.corrupted),
            (60, 0, 0)
        );
    }

    #[test]
    fn acks_may_come_after_observations() {
        let records = stream(2, 10, 2);
        let mut checker = Checker::new(false);
        observe_all(&mut checker, &records);
        // Every ack arrives after the record was read back, except the last one, lost in a
        // broker crash.
        ack_all(&mut checker, &records[..records.len() - 1]);
        let report = checker.report(3);
        assert!(report.passed, "{report:?}");
        assert_eq!(report.kills, 3);
        assert_eq!((report.acked, report.seen, report.lost), (19, 20, 0));
        assert_eq!(report.unacked_present, 1);
    }

    #[test]
    fn one_producer_over_many_partitions_is_not_reordering() {
        // Producer 0 sends seqs 0..60 round robin over 4 partitions; the consumer reads the
        // partitions one after the other, so seqs go back down at every partition change.
        let records = stream(1, 60, 4);
        assert!(records.windows(2).any(|w| w[1].seq < w[0].seq));
        let report = check(&records, &records, false);
        assert!(report.passed, "{report:?}");
        assert_eq!(report.out_of_order, 0);
    }

    #[test]
    fn topics_are_told_apart() {
        let fill = filler(64, 1);
        let mut checker = Checker::new(false);
        for (topic, producer) in [("a", 0u32), ("b", 1)] {
            for seq in 0..3u64 {
                let mut value = vec![0; 32];
                encode(
                    &mut value,
                    Header {
                        producer,
                        seq,
                        intended_ns: 0,
                    },
                    &fill,
                );
                checker.acked(topic, 0, seq as i64, producer, seq);
                checker.observe(topic, 0, seq as i64, &value);
            }
        }
        checker.acked("b", 0, 3, 1, 3);
        let report = checker.report(0);
        let names: Vec<_> = report
            .partitions
            .iter()
            .map(|p| (p.topic.as_str(), p.lost))
            .collect();
        assert_eq!(names, vec![("a", 0), ("b", 1)]);
        assert_eq!(
            report.examples,
            vec!["lost: producer 1 seq 3 (acked at b/0@3)".to_owned()]
        );
    }

    #[test]
    fn absurd_sequences_are_refused_not_allocated() {
        let mut checker = Checker::new(false);
        checker.acked("t", 0, 0, 0, SEQ_LIMIT);
        let mut value = vec![0; 32];
        encode(
            &mut value,
            Header {
                producer: 0,
                seq: u64::MAX,
                intended_ns: 0,
            },
            &[],
        );
        checker.observe("t", 0, 0, &value);
        let report = checker.report(0);
        assert!(!report.passed);
        assert_eq!((report.acked, report.seen, report.corrupted), (0, 0, 1));
        assert_eq!(report.examples.len(), 2);
    }

    #[test]
    fn ack_slots_round_trip() {
        let slot = AckSlot::new(TOPIC_PARTITIONS_MAX - 1, (1 << ACK_OFFSET_BITS) - 2);
        assert!(slot.is_acked());
        assert_eq!(slot.partition_index(), TOPIC_PARTITIONS_MAX - 1);
        assert_eq!(slot.offset(), Some((1 << ACK_OFFSET_BITS) - 2));
        assert_eq!(AckSlot::new(0, -1).offset(), None);
        assert_eq!(AckSlot::new(0, 1 << ACK_OFFSET_BITS).offset(), None);
        assert_eq!(AckSlot::new(0, 0).offset(), Some(0));
        assert!(AckSlot::new(0, -1).is_acked());
    }

    #[test]
    fn a_million_records_check_quickly() {
        // Debug builds are ~20x slower; keep the test short there.
        let (per_producer, limit) = if cfg!(debug_assertions) {
            (25_000, Duration::from_secs(5))
        } else {
            (125_000, Duration::from_secs(1))
        };
        let records = stream(8, per_producer, 16);
        let started = Instant::now();
        let mut checker = Checker::new(false);
        // Acks and reads interleave, as in a real run.
        for chunk in records.chunks(1000) {
            ack_all(&mut checker, chunk);
            observe_all(&mut checker, chunk);
        }
        let report = checker.report(0);
        let took = started.elapsed();
        assert!(report.passed);
        assert_eq!(report.seen, records.len() as u64);
        assert!(took < limit, "{} records took {took:?}", records.len());
    }
}
