//! Share consumers (KIP-932 share groups, Kafka's "queues") for `sluice bench drain`.
//!
//! librdkafka has no share consumer, so this module is a small native client on
//! `kafka-protocol` and tokio, and the same client for every broker under test:
//!
//! - [`conn`]: one TCP connection, requests from several tasks multiplexed over it;
//! - [`cluster`]: ApiVersions, FindCoordinator, Metadata, group configs
//!   (IncrementalAlterConfigs on a GROUP resource);
//! - [`member`]: one consumer: heartbeats, share sessions, ShareFetch with the previous
//!   batch's acknowledgements piggybacked, simulated processing per record;
//! - [`ledger`]: which records were processed how often, and when a killed consumer's records
//!   came back;
//! - [`run`]: the `drain` mode with share consumers (build a backlog, then measure the share
//!   group consuming it).
//!
//! [`ShareFleet`] runs N consumers as tasks on a runtime of its own (the rest of the benchmark
//! is threads), and the mode reads their counters while they run.

pub mod cluster;
pub mod conn;
pub mod ledger;
pub mod member;
pub mod run;

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use tokio::runtime::Runtime;
use tokio::sync::watch;
use tokio::task::JoinHandle;

use crate::target::Target;
use cluster::{CALL_TIMEOUT, Metadata};
use conn::Conn;
use ledger::{KillWatch, LedgerTotals};
use member::{MemberSpec, MemberStats, Shared};

/// Worker threads of the share consumers' runtime: the simulated processing is timers, and
/// the protocol work of even a few hundred consumers fits in one thread; a second one keeps a
/// slow decode from delaying every timer.
const RUNTIME_THREADS: usize = 2;
/// How long stopping may take (last acknowledgements, session closes, leaves) before the
/// remaining consumers are aborted.
const STOP_TIMEOUT: Duration = Duration::from_secs(15);

/// How long set-up calls are retried while the broker cannot answer them yet, and how often.
const SETUP_RETRY_TIMEOUT: Duration = Duration::from_secs(60);
const SETUP_RETRY_PAUSE: Duration = Duration::from_millis(250);

/// What a fleet is told to do.
#[derive(Debug, Clone)]
pub struct FleetSpec {
    pub consumers: u32,
    pub member: MemberSpec,
    /// Group configs set before any consumer joins.
    pub group_configs: BTreeMap<String, String>,
}

/// What the broker said about itself while the fleet was set up.
#[derive(Debug, Clone)]
pub struct Setup {
    /// ShareFetch versions the broker serves.
    pub share_fetch_versions: Option<(i16, i16)>,
    /// The ShareFetch version the consumers use.
    pub share_fetch_version: i16,
    pub coordinator: String,
}

/// Counters of the whole fleet at one moment.
#[derive(Debug, Clone, Default)]
pub struct Snapshot {
    /// Records processed by each consumer so far (every delivery).
    pub processed: Vec<u64>,
    pub ledger: LedgerTotals,
    pub acquired: u64,
    pub fetches: u64,
    pub empty_fetches: u64,
    pub fetched_bytes: u64,
    pub rejoins: u64,
    pub session_reopens: u64,
    pub reconnects: u64,
    /// Consumers with at least one partition assigned.
    pub assigned: u32,
    pub errors: u64,
}

/// What a fleet leaves behind when it stops.
#[derive(Debug, Clone, Default)]
pub struct Outcome {
    pub snapshot: Snapshot,
    pub error_counts: BTreeMap<String, u64>,
    pub error_examples: Vec<String>,
    /// The acquisition lock timeout the broker reported, ms.
    pub lock_timeout_ms: Option<i64>,
    pub kill: Option<KillWatch>,
    /// ShareFetch round trips (all, and those that acquired records).
    pub fetch_latency: crate::result::Latency,
    pub fetch_latency_acquired: crate::result::Latency,
    /// Consumers that did not finish within the stop timeout and were aborted.
    pub aborted_at_stop: u32,
}

/// N share consumers of one group, running.
#[derive(Debug)]
pub struct ShareFleet {
    runtime: Runtime,
    shared: Arc<Shared>,
    stats: Vec<Arc<MemberStats>>,
    tasks: Vec<Option<JoinHandle<()>>>,
    stop: watch::Sender<bool>,
    /// The consumer killed, if any.
    killed: Option<usize>,
}

impl ShareFleet {
    /// Sets the group configs, then starts the consumers (they join at once). Fails when the
    /// broker cannot be reached, does not serve share groups at v1, or refuses a group config.
    pub fn start(target: &Target, spec: FleetSpec) -> Result<(ShareFleet, Setup), String> {
        let protocol = target.security_protocol();
        if protocol != "PLAINTEXT" {
            return Err(format!(
                "share consumers speak PLAINTEXT only, and the target is {protocol}"
            ));
        }
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(RUNTIME_THREADS)
            .thread_name("bench-share")
            .enable_all()
            .build()
            .map_err(|e| format!("cannot start the share consumers' runtime: {e}"))?;
        let bootstrap = cluster::bootstrap_addresses(&target.bootstrap);
        let (stop, stop_rx) = watch::channel(false);
        let (metadata, setup) = runtime.block_on(prepare(&bootstrap, &spec))?;
        let member = MemberSpec {
            share_fetch_version: setup.share_fetch_version,
            ..spec.member.clone()
        };
        let shared = Arc::new(Shared::new(
            member,
            bootstrap,
            metadata,
            setup.coordinator.clone(),
            stop_rx,
        ));
        let mut fleet = ShareFleet {
            runtime,
            shared,
            stats: Vec::new(),
            tasks: Vec::new(),
            stop,
            killed: None,
        };
        for index in 0..spec.consumers as usize {
            let stats = Arc::new(MemberStats::default());
            let task = fleet
                .runtime
                .spawn(member::run(index, fleet.shared.clone(), stats.clone()));
            fleet.stats.push(stats);
            fleet.tasks.push(Some(task));
        }
        Ok((fleet, setup))
    }

    /// Waits until every consumer has partitions assigned, or `timeout`; returns how many have.
    pub fn wait_assigned(&self, timeout: Duration) -> u32 {
        let deadline = Instant::now() + timeout;
        loop {
            let assigned = self.assigned();
            if assigned as usize >= self.stats.len() || Instant::now() >= deadline {
                return assigned;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    fn assigned(&self) -> u32 {
        self.stats
            .iter()
            .filter(|s| s.assigned.load(Ordering::Relaxed) > 0)
            .count() as u32
    }

    pub fn snapshot(&self) -> Snapshot {
        let sum = |f: fn(&MemberStats) -> u64| self.stats.iter().map(|s| f(s)).sum::<u64>();
        Snapshot {
            processed: self
                .stats
                .iter()
                .map(|s| s.processed.load(Ordering::Relaxed))
                .collect(),
            ledger: self.shared.ledger.totals(),
            acquired: sum(|s| s.acquired.load(Ordering::Relaxed)),
            fetches: sum(|s| s.fetches.load(Ordering::Relaxed)),
            empty_fetches: sum(|s| s.empty_fetches.load(Ordering::Relaxed)),
            fetched_bytes: sum(|s| s.fetched_bytes.load(Ordering::Relaxed)),
            rejoins: sum(|s| s.rejoins.load(Ordering::Relaxed)),
            session_reopens: sum(|s| s.session_reopens.load(Ordering::Relaxed)),
            reconnects: sum(|s| s.reconnects.load(Ordering::Relaxed)),
            assigned: self.assigned(),
            errors: self
                .shared
                .errors
                .lock()
                .map(|log| log.counts.values().sum())
                .unwrap_or(0),
        }
    }

    /// Kills one consumer as a crashed process dies: its task is aborted, so its connection
    /// closes without a final acknowledgement, session close or leave. The victim is the
    /// consumer holding the most records (the first on a tie). Starts the watch for its records
    /// to reach the others; returns (victim, records it held). With `only_holding`, kills
    /// nobody (and returns `None`) while no consumer holds a record: a consumer waiting for a
    /// fetch's answer holds nothing the client knows of, and its kill would time nothing.
    pub fn kill_one(&mut self, only_holding: bool) -> Option<(usize, u64)> {
        let held: Vec<(usize, Vec<_>)> = self
            .stats
            .iter()
            .enumerate()
            .filter(|(i, _)| self.tasks[*i].is_some())
            .map(|(i, s)| (i, s.held()))
            .collect();
        let count = |h: &[(ledger::Tp, i64, i64)]| {
            h.iter()
                .map(|(_, a, b)| (b - a + 1).max(0) as u64)
                .sum::<u64>()
        };
        let (victim, most) = held
            .iter()
            .max_by(|(i, a), (j, b)| count(a).cmp(&count(b)).then(j.cmp(i)))?;
        if only_holding && count(most) == 0 {
            return None;
        }
        let victim = *victim;
        let task = self.tasks[victim].take()?;
        // What it holds at the moment of the kill; the watch starts before the abort so that
        // no redelivery (a broker may release the records as soon as the socket closes) is
        // missed.
        let watch = KillWatch::new(Instant::now(), &self.stats[victim].held());
        let n = watch.held();
        self.shared.ledger.watch(watch);
        task.abort();
        // Let the abort land (the socket closes when the task's connections drop).
        let _ = self
            .runtime
            .block_on(async { tokio::time::timeout(Duration::from_secs(5), task).await });
        self.killed = Some(victim);
        Some((victim, n))
    }

    /// Tells every consumer to stop (acknowledge what it processed, release the rest, close
    /// its sessions, leave), waits up to [`STOP_TIMEOUT`], aborts what remains.
    pub fn stop(mut self) -> Outcome {
        let _ = self.stop.send(true);
        let tasks: Vec<JoinHandle<()>> = self.tasks.iter_mut().filter_map(Option::take).collect();
        let aborted = self.runtime.block_on(async {
            let deadline = tokio::time::Instant::now() + STOP_TIMEOUT;
            let mut aborted = 0u32;
            for mut task in tasks {
                if tokio::time::timeout_at(deadline, &mut task).await.is_err() {
                    task.abort();
                    aborted += 1;
                }
            }
            aborted
        });
        let snapshot = self.snapshot();
        let (error_counts, error_examples) = match self.shared.errors.lock() {
            Ok(log) => (log.counts.clone(), log.examples.clone()),
            Err(p) => {
                let log = p.into_inner();
                (log.counts.clone(), log.examples.clone())
            }
        };
        let lock_timeout_ms =
            Some(self.shared.lock_timeout_ms.load(Ordering::Relaxed)).filter(|&ms| ms > 0);
        let latency = |h: &std::sync::Mutex<hdrhistogram::Histogram<u64>>| match h.lock() {
            Ok(h) => crate::stats::latency(&h),
            Err(p) => crate::stats::latency(&p.into_inner()),
        };
        Outcome {
            fetch_latency: latency(&self.shared.fetch_latency),
            fetch_latency_acquired: latency(&self.shared.fetch_latency_acquired),
            snapshot,
            error_counts,
            error_examples,
            lock_timeout_ms,
            kill: self.shared.ledger.kill_watch(),
            aborted_at_stop: aborted,
        }
    }
}

/// Connects, checks the broker serves share groups, learns the topics' metadata and the
/// group's coordinator, and sets the group configs.
async fn prepare(bootstrap: &[String], spec: &FleetSpec) -> Result<(Metadata, Setup), String> {
    let mut last_error = "no bootstrap address".to_owned();
    let mut conn = None;
    for addr in bootstrap {
        match Conn::connect(addr, "sluice-bench-share-admin", CALL_TIMEOUT).await {
            Ok(c) => {
                conn = Some(c);
                break;
            }
            Err(e) => last_error = e.to_string(),
        }
    }
    let conn = conn.ok_or(last_error)?;
    let versions: HashMap<i16, (i16, i16)> = cluster::api_versions(&conn).await?;
    cluster::check_share_support(&versions)?;
    let share_fetch_versions = versions
        .get(&(kafka_protocol::messages::ApiKey::ShareFetch as i16))
        .copied();
    let metadata = cluster::metadata(&conn, &spec.member.topics).await?;
    // A broker may not know the coordinator at once (Kafka creates its offsets topic on the
    // first FindCoordinator and answers COORDINATOR_NOT_AVAILABLE meanwhile).
    let deadline = tokio::time::Instant::now() + SETUP_RETRY_TIMEOUT;
    let coordinator = loop {
        match cluster::find_coordinator(&conn, &spec.member.group).await {
            Ok(c) => break c,
            Err(e) if tokio::time::Instant::now() >= deadline => {
                return Err(format!("{e} (for {} s)", SETUP_RETRY_TIMEOUT.as_secs()));
            }
            Err(_) => tokio::time::sleep(SETUP_RETRY_PAUSE).await,
        }
    };
    // Group configs go to the group's coordinator.
    let coordinator_conn = if coordinator == conn.addr() {
        conn.clone()
    } else {
        Conn::connect(&coordinator, "sluice-bench-share-admin", CALL_TIMEOUT)
            .await
            .map_err(|e| e.to_string())?
    };
    cluster::set_group_configs(&coordinator_conn, &spec.member.group, &spec.group_configs).await?;
    Ok((
        metadata,
        Setup {
            share_fetch_versions,
            share_fetch_version: cluster::share_fetch_version(share_fetch_versions),
            coordinator,
        },
    ))
}
