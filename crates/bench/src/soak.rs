//! What a long kill soak (`scripts/soak-kill.sh`) adds to `correctness`: kill moments drawn
//! from a seed ([`KillSchedule`]), and a watch on a consumer group's committed offsets
//! ([`OffsetWatch`]), which must never go back across broker restarts.
//!
//! Where it sits: [`crate::modes::correctness`] asks the schedule how long to load before each
//! kill, samples the group's committed offsets just before each kill and once at the end, and
//! puts the seed, the sample count and any regression into the
//! [`crate::result::CorrectnessReport`].

use std::collections::HashMap;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::topic_partition_list::{Offset, TopicPartitionList};

use sluice_log::SplitMix64;

use crate::target::Target;
use crate::workload::Workload;

/// Shortest and longest load before a random kill, as multiples of the even share of the run.
const RANDOM_GAP_MIN: f64 = 0.5;
const RANDOM_GAP_MAX: f64 = 1.5;

/// How long one committed-offset sample may wait for the group coordinator.
const OFFSET_FETCH_TIMEOUT: Duration = Duration::from_secs(10);

/// At most this many regression examples go into the report.
const REGRESSION_EXAMPLES: usize = 5;

/// How long the load runs before each kill, and after the last one.
#[derive(Debug, Clone)]
pub struct KillSchedule {
    /// The seed of the random moments, when they are random.
    pub seed: Option<u64>,
    /// Load before kill `k`, seconds; one more entry for the load after the last kill.
    pub gaps_s: Vec<f64>,
}

impl KillSchedule {
    /// `kills` kills over `duration_s`: evenly spaced, or with `seed` each gap drawn uniformly
    /// from 0.5x to 1.5x of the even share (the same seed gives the same gaps). The load after
    /// the last kill is always one even share, to see the last restart recover.
    pub fn new(kills: u32, duration_s: f64, seed: Option<u64>) -> KillSchedule {
        let share = duration_s / f64::from(kills + 1);
        let mut rng = seed.map(SplitMix64::new);
        let gaps_s = (0..=kills)
            .map(|k| match rng.as_mut() {
                Some(rng) if k < kills => {
                    share * (RANDOM_GAP_MIN + (RANDOM_GAP_MAX - RANDOM_GAP_MIN) * rng.unit())
                }
                _ => share,
            })
            .collect();
        KillSchedule { seed, gaps_s }
    }
}

/// A seed from the clock, for a run that did not name one.
pub fn clock_seed() -> u64 {
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default();
    SplitMix64::new(now.as_nanos() as u64 ^ u64::from(std::process::id())).next_u64()
}

/// The committed offsets of one consumer group, read from the broker now and then. A partition
/// whose committed offset is lower than one read before is a regression: the broker had shown
/// that commit, and lost it.
pub struct OffsetWatch {
    /// Not a member of the group: it only reads the group's offsets (OffsetFetch).
    consumer: Option<BaseConsumer>,
    partitions: TopicPartitionList,
    tracker: OffsetTracker,
}

impl std::fmt::Debug for OffsetWatch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OffsetWatch")
            .field("tracker", &self.tracker)
            .finish_non_exhaustive()
    }
}

impl OffsetWatch {
    /// A watch on `group`'s offsets for every partition of `topics`.
    pub fn new(
        w: &Workload,
        target: &Target,
        group: &str,
        topics: &[String],
    ) -> Result<Self, String> {
        let mut config = rdkafka::config::ClientConfig::new();
        for (k, v) in crate::driver::consumer_settings(w, target) {
            config.set(k, v);
        }
        config.set("group.id", group);
        config.set("client.id", "sluice-bench-offset-watch");
        config.set("enable.auto.commit", "false");
        let consumer: BaseConsumer = config
            .create()
            .map_err(|e| format!("cannot create the offset watch: {e}"))?;
        let mut partitions = TopicPartitionList::new();
        for topic in topics {
            for p in 0..w.partitions {
                partitions.add_partition(topic, p as i32);
            }
        }
        Ok(OffsetWatch {
            consumer: Some(consumer),
            partitions,
            tracker: OffsetTracker::default(),
        })
    }

    /// Reads the committed offsets now and checks them against earlier reads. A read that
    /// fails (the coordinator is moving, a broker is down) is skipped; returns whether it
    /// worked.
    pub fn sample(&mut self) -> bool {
        let Some(consumer) = &self.consumer else {
            return false;
        };
        match consumer.committed_offsets(self.partitions.clone(), OFFSET_FETCH_TIMEOUT) {
            Ok(list) => {
                for e in list.elements() {
                    if let Offset::Offset(offset) = e.offset() {
                        self.tracker.observe(e.topic(), e.partition(), offset);
                    }
                }
                true
            }
            Err(e) => {
                eprintln!("bench: committed offsets: {e}");
                false
            }
        }
    }

    pub fn tracker(&self) -> &OffsetTracker {
        &self.tracker
    }
}

/// The highest committed offset seen per partition, and every time one went back.
#[derive(Debug, Default)]
pub struct OffsetTracker {
    highest: HashMap<(String, i32), i64>,
    /// Offsets read (one per partition per sample).
    pub samples: u64,
    pub regressions: u64,
    pub examples: Vec<String>,
}

impl OffsetTracker {
    /// One committed offset read from the broker.
    pub fn observe(&mut self, topic: &str, partition: i32, offset: i64) {
        self.samples += 1;
        let highest = self
            .highest
            .entry((topic.to_owned(), partition))
            .or_insert(offset);
        if offset < *highest {
            self.regressions += 1;
            if self.examples.len() < REGRESSION_EXAMPLES {
                self.examples.push(format!(
                    "committed offset went back: {topic}/{partition} from {} to {offset}",
                    *highest
                ));
            }
        }
        *highest = (*highest).max(offset);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn even_schedule_without_a_seed() {
        let s = KillSchedule::new(3, 40.0, None);
        assert_eq!(s.gaps_s, vec![10.0; 4]);
        assert_eq!(s.seed, None);
        assert_eq!(KillSchedule::new(0, 5.0, Some(1)).gaps_s, vec![5.0]);
    }

    #[test]
    fn random_schedule_is_seeded_and_bounded() {
        let a = KillSchedule::new(100, 606.0, Some(42));
        let b = KillSchedule::new(100, 606.0, Some(42));
        let c = KillSchedule::new(100, 606.0, Some(43));
        assert_eq!(a.gaps_s, b.gaps_s);
        assert_ne!(a.gaps_s, c.gaps_s);
        assert_eq!(a.gaps_s.len(), 101);
        // The even share is 6 s: kills land within 3..9 s of load, the last gap is 6 s.
        assert!(
            a.gaps_s[..100].iter().all(|g| (3.0..9.0).contains(g)),
            "{:?}",
            a.gaps_s
        );
        assert_eq!(a.gaps_s[100], 6.0);
        // Spread, not constant: some short and some long gaps.
        assert!(a.gaps_s.iter().any(|g| *g < 4.0) && a.gaps_s.iter().any(|g| *g > 8.0));
    }

    #[test]
    fn split_mix_is_stable() {
        // The first outputs for seed 0 of the reference implementation.
        let mut r = SplitMix64::new(0);
        assert_eq!(r.next_u64(), 0xe220_a839_7b1d_cdaf);
        assert_eq!(r.next_u64(), 0x6e78_9e6a_a1b9_65f4);
        assert_ne!(clock_seed(), clock_seed());
    }

    #[test]
    fn committed_offsets_must_not_go_back() {
        let mut t = OffsetTracker::default();
        t.observe("t", 0, 10);
        t.observe("t", 1, 5);
        t.observe("t", 0, 12);
        t.observe("t", 0, 12);
        assert_eq!((t.samples, t.regressions), (4, 0));
        t.observe("t", 0, 11);
        t.observe("t", 1, 7);
        t.observe("t", 0, 11);
        assert_eq!((t.samples, t.regressions), (7, 2));
        assert_eq!(
            t.examples[0],
            "committed offset went back: t/0 from 12 to 11"
        );
    }
}
