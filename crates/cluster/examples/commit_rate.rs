//! How many object commits a durable PostgreSQL takes, and how long each one waits.
//!
//! Starts a PostgreSQL with `fsync` and `synchronous_commit` on (a temporary one on a free
//! loopback port, as the tests do), makes one topic of `--partitions` partitions and one
//! registered broker per four committers, then for every layout, `--batches` and
//! `--committers` runs that many committers for `--seconds`. Each committer commits objects
//! one after another; each object holds that many batches (grouped into runs by partition, as
//! a broker lays them out), half of them from the committer's own idempotent producer. The
//! batches' partitions are picked at random
//!
//! - `shared`: among all partitions, so concurrent commits contend for the same partition
//!   rows (the worst case: every producer writes every partition through every broker);
//! - `leader`: among the committer's own share of the partitions (partition % committers ==
//!   committer), as when clients send each partition to its leader broker and commits of
//!   different brokers touch different partitions.
//!
//! Prints, per setting: commits and batches per second, commit latency (p50, p99, max), and
//! CPU seconds spent by PostgreSQL (the postmaster and every backend, from /proc) and by this
//! process, per commit.
//!
//! ```text
//! cargo run --release -p sluice-cluster --example commit_rate -- \
//!     [--committers 1,4,16,64] [--batches 1,10,50] [--seconds 3] [--partitions 100] \
//!     [--layouts shared,leader]
//! ```

#![allow(clippy::print_stdout)]

use std::collections::HashMap;
use std::time::{Duration, Instant};

use rand::{Rng, SeedableRng};
use sluice_cluster::commit::{
    BatchOutcome, CommitBatch, CommitRequest, ProducerSeq, commit_object,
};
use sluice_cluster::{Db, DbSettings, MetadataUrl};
use sluice_testkit::postgres::{PgOptions, PostgresServer};
use uuid::Uuid;

/// Bytes and offsets of every batch (a 1 KiB batch of 10 records).
const BATCH_BYTES: u32 = 1024;
const BATCH_RECORDS: i32 = 10;

/// Committers per registered broker.
const COMMITTERS_PER_BROKER: usize = 4;

#[derive(Debug)]
struct Args {
    committers: Vec<usize>,
    batches: Vec<usize>,
    seconds: f64,
    partitions: i32,
    layouts: Vec<Layout>,
}

/// Which partitions a committer's batches go to (see the module documentation).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Layout {
    Shared,
    Leader,
}

fn parse_args() -> Result<Args, String> {
    let mut args = Args {
        committers: vec![1, 4, 16, 64],
        batches: vec![1, 10, 50],
        seconds: 3.0,
        partitions: 100,
        layouts: vec![Layout::Shared, Layout::Leader],
    };
    let list = |v: &str| -> Result<Vec<usize>, String> {
        v.split(',')
            .map(|n| n.trim().parse().map_err(|e| format!("{n}: {e}")))
            .collect()
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let value = it.next().ok_or(format!("{flag} needs a value"))?;
        match flag.as_str() {
            "--committers" => args.committers = list(&value)?,
            "--batches" => args.batches = list(&value)?,
            "--seconds" => args.seconds = value.parse().map_err(|e| format!("{value}: {e}"))?,
            "--partitions" => {
                args.partitions = value.parse().map_err(|e| format!("{value}: {e}"))?
            }
            "--layouts" => {
                args.layouts = value
                    .split(',')
                    .map(|l| match l.trim() {
                        "shared" => Ok(Layout::Shared),
                        "leader" => Ok(Layout::Leader),
                        other => Err(format!("layout {other}: shared or leader")),
                    })
                    .collect::<Result<_, _>>()?
            }
            other => return Err(format!("unknown flag {other}")),
        }
    }
    if args.committers.contains(&0) || args.batches.contains(&0) || args.partitions < 1 {
        return Err("committers, batches and partitions must be at least 1".into());
    }
    Ok(args)
}

/// CPU seconds of a process from /proc/PID/stat: (own, own + its waited-for children).
fn cpu_ticks(pid: u32) -> Option<(u64, u64)> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // Fields after the command name (which may hold spaces) in parentheses.
    let rest = &stat[stat.rfind(')')? + 2..];
    let fields: Vec<&str> = rest.split(' ').collect();
    // State is field 3 overall, index 0 here; utime 14 -> 11, stime 12, cutime 13, cstime 14.
    let n = |i: usize| fields.get(i).and_then(|f| f.parse::<u64>().ok());
    let own = n(11)? + n(12)?;
    Some((own, own + n(13)? + n(14)?))
}

fn parent_of(pid: u32) -> Option<u32> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let rest = &stat[stat.rfind(')')? + 2..];
    rest.split(' ').nth(1)?.parse().ok()
}

/// CPU ticks of the postmaster, the children it has reaped, and its live children.
fn postgres_ticks(postmaster: u32) -> u64 {
    let mut total = cpu_ticks(postmaster).map_or(0, |t| t.1);
    if let Ok(dir) = std::fs::read_dir("/proc") {
        for entry in dir.flatten() {
            let Some(pid) = entry
                .file_name()
                .to_str()
                .and_then(|s| s.parse::<u32>().ok())
            else {
                continue;
            };
            if parent_of(pid) == Some(postmaster) {
                total += cpu_ticks(pid).map_or(0, |t| t.0);
            }
        }
    }
    total
}

fn clock_ticks_per_second() -> f64 {
    std::process::Command::new("getconf")
        .arg("CLK_TCK")
        .output()
        .ok()
        .and_then(|o| String::from_utf8(o.stdout).ok())
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or(100.0)
}

#[derive(Debug, Default)]
struct Tally {
    latencies_us: Vec<u64>,
    batches: u64,
    refused: u64,
    errors: u64,
}

/// What one committer does.
#[derive(Debug, Clone)]
struct Work {
    db: Db,
    /// The committer's number within its run, and the run's.
    index: usize,
    run: usize,
    broker: (i32, Uuid),
    topic: Uuid,
    /// The partitions this committer writes to.
    partitions: Vec<i32>,
    batches_per_object: usize,
    until: Instant,
}

/// One committer: objects one after another until `until`.
async fn committer(work: Work) -> Tally {
    let Work {
        db,
        index,
        run,
        broker,
        topic,
        partitions,
        batches_per_object,
        until,
    } = work;
    // Seeded: the same run picks the same partitions.
    let mut rng = rand::rngs::StdRng::seed_from_u64((run * 1000 + index) as u64);
    let mut tally = Tally::default();
    // The committer's producer: an id of its own per run, sequences per partition.
    let producer_id = (run * 1000 + index) as i64;
    let mut next_seq: HashMap<i32, i32> = HashMap::new();
    let mut n = 0u64;
    while Instant::now() < until {
        let mut picks: Vec<(i32, bool)> = (0..batches_per_object)
            .map(|_| {
                let partition = partitions[rng.random_range(0..partitions.len())];
                (partition, rng.random_bool(0.5))
            })
            .collect();
        picks.sort_by_key(|p| p.0);
        let mut batches = Vec::with_capacity(picks.len());
        let mut at = 0u64;
        for (partition, idempotent) in picks {
            let producer = idempotent.then(|| {
                let seq = next_seq.entry(partition).or_insert(0);
                let first_seq = *seq;
                *seq += BATCH_RECORDS;
                ProducerSeq {
                    producer_id,
                    epoch: 0,
                    first_seq,
                    last_seq: first_seq + BATCH_RECORDS - 1,
                }
            });
            batches.push(CommitBatch {
                topic_id: topic,
                partition,
                byte_start: at,
                byte_len: BATCH_BYTES,
                records: BATCH_RECORDS,
                max_timestamp: 0,
                producer,
            });
            at += u64::from(BATCH_BYTES);
        }
        let req = CommitRequest {
            key: format!("run{run}/c{index}/{n}"),
            broker_id: broker.0,
            instance: broker.1,
            size_bytes: at,
            batches,
        };
        n += 1;
        let started = Instant::now();
        // A retriable failure is retried with the same request, as a broker would.
        let outcomes = loop {
            match commit_object(&db, &req).await {
                Ok(outcomes) => break outcomes,
                Err(e) if e.is_retriable() && Instant::now() < until + Duration::from_secs(10) => {
                    tally.errors += 1;
                }
                Err(e) => panic!("commit failed: {e}"),
            }
        };
        tally
            .latencies_us
            .push(started.elapsed().as_micros() as u64);
        for o in outcomes {
            match o {
                BatchOutcome::Appended { .. } => tally.batches += 1,
                _ => tally.refused += 1,
            }
        }
    }
    tally
}

/// The partitions committer `index` of `committers` writes to.
fn partitions_of(layout: Layout, partitions: i32, committers: usize, index: usize) -> Vec<i32> {
    match layout {
        Layout::Shared => (0..partitions).collect(),
        Layout::Leader => {
            let own: Vec<i32> = (0..partitions)
                .filter(|p| *p as usize % committers == index)
                .collect();
            if own.is_empty() {
                // More committers than partitions: some share one.
                vec![(index % partitions as usize) as i32]
            } else {
                own
            }
        }
    }
}

fn percentile(sorted: &[u64], p: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i] as f64 / 1000.0
}

#[tokio::main(flavor = "multi_thread")]
async fn main() {
    let args = match parse_args() {
        Ok(a) => a,
        Err(e) => {
            eprintln!("commit_rate: {e}");
            std::process::exit(2);
        }
    };
    let most = args.committers.iter().copied().max().unwrap_or(1);
    let pg = PostgresServer::start_with(PgOptions {
        durable: true,
        max_connections: (most + 20) as u32,
    });
    let postmaster = pg.pid().expect("postgres runs");
    let url = MetadataUrl::parse(&pg.url()).expect("url");
    let db = Db::connect(
        &url,
        DbSettings {
            pool_size: most,
            ..DbSettings::default()
        },
    )
    .await
    .expect("connect");
    sluice_cluster::migrate::migrate(&db)
        .await
        .expect("migrate");

    let topic = Uuid::new_v4();
    let brokers: Vec<(i32, Uuid)> = (0..most.div_ceil(COMMITTERS_PER_BROKER))
        .map(|i| (i as i32 + 1, Uuid::new_v4()))
        .collect();
    let mut setup = format!(
        "INSERT INTO topics (topic_id, name, partitions) VALUES ('{topic}', 'bench', {p});
         INSERT INTO partitions (topic_id, partition)
             SELECT '{topic}', g FROM generate_series(0, {p} - 1) g;",
        p = args.partitions
    );
    for (id, instance) in &brokers {
        setup.push_str(&format!(
            "INSERT INTO brokers (broker_id, instance, host, port, expires_at)
             VALUES ({id}, '{instance}', '127.0.0.1', 9092, now() + interval '1 day');"
        ));
    }
    db.client()
        .await
        .expect("client")
        .batch_execute(&setup)
        .await
        .expect("setup");

    let tick = clock_ticks_per_second();
    let self_pid = std::process::id();
    println!(
        "durable PostgreSQL (fsync, synchronous_commit on), {} partitions, {} B batches of {} \
         records, half idempotent, {} s per setting, {} committers per broker row",
        args.partitions, BATCH_BYTES, BATCH_RECORDS, args.seconds, COMMITTERS_PER_BROKER
    );
    println!(
        "| layout | committers | batches/object | commits/s | batches/s | p50 ms | p99 ms | max ms | PG CPU s | PG CPU ms/commit | bench CPU s | refused | retried |"
    );
    println!("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|");
    let mut run = 0;
    let mut settings = Vec::new();
    for &layout in &args.layouts {
        for &batches in &args.batches {
            for &committers in &args.committers {
                settings.push((layout, batches, committers));
            }
        }
    }
    for (layout, batches, committers) in settings {
        run += 1;
        // Every connection the run needs is open before the clock starts.
        let warm: Vec<_> = futures_util::future::join_all((0..committers).map(|_| db.client()))
            .await
            .into_iter()
            .collect::<Result<_, _>>()
            .expect("connections");
        drop(warm);
        let pg_before = postgres_ticks(postmaster);
        let self_before = cpu_ticks(self_pid).map_or(0, |t| t.0);
        let started = Instant::now();
        let until = started + Duration::from_secs_f64(args.seconds);
        let tasks: Vec<_> = (0..committers)
            .map(|index| {
                tokio::spawn(committer(Work {
                    db: db.clone(),
                    index,
                    run,
                    broker: brokers[index / COMMITTERS_PER_BROKER],
                    topic,
                    partitions: partitions_of(layout, args.partitions, committers, index),
                    batches_per_object: batches,
                    until,
                }))
            })
            .collect();
        let mut all = Tally::default();
        for t in tasks {
            let t = t.await.expect("committer");
            all.latencies_us.extend(t.latencies_us);
            all.batches += t.batches;
            all.refused += t.refused;
            all.errors += t.errors;
        }
        let elapsed = started.elapsed().as_secs_f64();
        let pg_cpu = (postgres_ticks(postmaster) - pg_before) as f64 / tick;
        let self_cpu = (cpu_ticks(self_pid).map_or(0, |t| t.0) - self_before) as f64 / tick;
        all.latencies_us.sort_unstable();
        let commits = all.latencies_us.len() as f64;
        println!(
            "| {layout:?} | {committers} | {batches} | {:.0} | {:.0} | {:.1} | {:.1} | {:.1} | {:.2} | {:.2} | {:.2} | {} | {} |",
            commits / elapsed,
            all.batches as f64 / elapsed,
            percentile(&all.latencies_us, 0.50),
            percentile(&all.latencies_us, 0.99),
            percentile(&all.latencies_us, 1.0),
            pg_cpu,
            pg_cpu * 1000.0 / commits.max(1.0),
            self_cpu,
            all.refused,
            all.errors,
        );
    }
    drop(db);
    drop(pg);
}
