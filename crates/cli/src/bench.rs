//! `sluice bench run|explore|drain|correctness|storm|compare`: the benchmark, against any
//! Kafka-protocol cluster.

// The CLI's output is its job: printing to stdout is intended here.
#![allow(clippy::print_stdout)]

use std::path::PathBuf;

use anyhow::{Context as _, bail};
use clap::Subcommand;
use sluice_bench::campaign::{self, Mode, Options};
use sluice_bench::{report, target};

/// Benchmark a Kafka-protocol cluster (Sluice or Apache Kafka) with an open-loop load.
///
/// Load is driven by librdkafka (the `rdkafka` crate, built in), the same client and settings
/// for every broker. Producers are open loop: each record carries its intended send time, and
/// latency is measured from it, so a stalled broker is charged for the records it delayed
/// (coordinated omission corrected). Produce (ack) and end-to-end latency are reported apart.
///
/// Examples:
///   sluice bench run bench/workloads/fixed-rate.toml --bootstrap 127.0.0.1:9092
///   sluice bench explore bench/workloads/explore.toml --broker-label kafka
///   sluice bench drain bench/workloads/drain.toml
///   sluice bench correctness bench/workloads/correctness.toml --bootstrap 127.0.0.1:19092 \
///       --broker-cmd 'sluice serve --data-dir /tmp/bench-data --kafka-addr 127.0.0.1:19092 --http-addr off'
///   sluice bench correctness bench/workloads/correctness-kills.toml \
///       -b 127.0.0.1:19092,127.0.0.1:19093 \
///       --broker-cmd 'sluice serve --data-dir /tmp/b0 --kafka-addr 127.0.0.1:19092 --http-addr off --storage s3://B/P --metadata postgres://...' \
///       --broker-cmd 'sluice serve --data-dir /tmp/b1 --kafka-addr 127.0.0.1:19093 --http-addr off --storage s3://B/P --metadata postgres://...'
///   sluice bench storm bench/workloads/storm-2x.toml -b 127.0.0.1:9092 --broker-label sluice
///   sluice bench compare bench-results/fixed-rate-run-* --out bench-results/compare
///   sluice bench run bench/workloads/tls-produce-max.toml -b 127.0.0.1:9094 \
///       --client-config sasl-ssl.properties --broker-pid "$(pidof sluice)"
///
/// A TLS or SASL listener takes librdkafka's own properties, for every client of the run:
/// --client-config FILE (KEY=VALUE lines, so the password stays off the command line) and
/// -X KEY=VALUE, e.g. -X security.protocol=SASL_SSL -X sasl.mechanisms=SCRAM-SHA-512
/// -X sasl.username=bench -X ssl.ca.location=ca.crt (docs/bench.md, "Secured listeners").
///
/// Workload files are TOML; any top-level field given as a list is a dimension (one test point
/// per value, each on fresh topics). See docs/bench.md for every field.
///
/// Each campaign writes a new directory under --out with campaign.json, points/*.json,
/// results.csv, intervals.csv, report.html (self-contained, with charts) and the workload file.
/// Progress goes to stderr once per interval; a summary table goes to stdout at the end.
#[derive(Debug, clap::Args)]
#[command(verbatim_doc_comment)]
pub struct BenchArgs {
    #[command(subcommand)]
    command: BenchCommand,
}

#[derive(Debug, Subcommand)]
enum BenchCommand {
    /// Produce at a fixed rate (or "max") for warm-up + duration; report throughput and
    /// ack/e2e latency percentiles.
    ///
    /// Example:
    ///   sluice bench run bench/workloads/fixed-20mbps.toml -b 127.0.0.1:9092 --broker-label sluice
    #[command(verbatim_doc_comment)]
    Run(RunArgs),
    /// Find the highest rate whose e2e latency percentile meets a target: ramp by doubling,
    /// binary-search to within 5%, then sustain (passes when >= 80% of sustain intervals meet
    /// the target, else searches again below). Settings in the workload's [explore] table.
    ///
    /// Example:
    ///   sluice bench explore bench/workloads/explore-1kib.toml -b 127.0.0.1:9092
    #[command(verbatim_doc_comment)]
    Explore(RunArgs),
    /// Build a backlog of [drain] backlog bytes, then time the consumers reading it, optionally
    /// while producers keep [drain] live_rate. With share_consumers = N, a share group (KIP-932)
    /// of N consumers reads it instead, measured for duration_s ([share] table, docs/bench.md).
    ///
    /// Examples:
    ///   sluice bench drain bench/workloads/drain-2gib.toml -b 127.0.0.1:9092
    ///   sluice bench drain bench/workloads/share-fair-2p-40c.toml -b 127.0.0.1:9092 --broker-pid PID
    #[command(verbatim_doc_comment)]
    Drain(RunArgs),
    /// Check every record (producer id, sequence, checksum): lost, duplicated, out-of-order and
    /// corrupted, per partition. With [correctness] kills = N and --broker-cmd, SIGKILLs and
    /// restarts a broker N times during the run: with several --broker-cmd (a cluster), kill i
    /// hits broker i mod count (round-robin, a different one each time) while the others carry
    /// the load. The report records each kill: broker index, address, time, PIDs.
    /// Exits non-zero when the check fails.
    ///
    /// Examples:
    ///   sluice bench correctness bench/workloads/correctness-kills.toml -b 127.0.0.1:19092 \
    ///     --broker-cmd 'sluice serve --data-dir /tmp/bench-data --kafka-addr 127.0.0.1:19092 --http-addr off'
    ///   sluice bench correctness bench/workloads/correctness-kills.toml \
    ///     -b 127.0.0.1:19092,127.0.0.1:19093 \
    ///     --broker-cmd 'sluice serve --data-dir /tmp/b0 --kafka-addr 127.0.0.1:19092 --http-addr off --storage s3://B/P --metadata postgres://...' \
    ///     --broker-cmd 'sluice serve --data-dir /tmp/b1 --kafka-addr 127.0.0.1:19093 --http-addr off --storage s3://B/P --metadata postgres://...'
    #[command(verbatim_doc_comment)]
    Correctness(RunArgs),
    /// A retry storm, and whether the broker recovers from it. Producers with short timeouts
    /// (request.timeout.ms = message.timeout.ms = [storm] request_timeout_ms, not idempotent,
    /// acks as the workload says) whose application re-sends every record whose delivery
    /// failed, at once, up to [storm] app_retries times. Phases: before_s at `after` x capacity,
    /// storm_s at `overload` x capacity, after_s at `after` x capacity. Capacity is given, or
    /// "probe": first measured, the median acknowledged records/s of a probe_s closed-loop
    /// phase on the same topics.
    ///
    /// Every second: offered new records, re-sends, goodput (records acknowledged), failed
    /// attempts (timed out), records given up, ack p50/p99 from the first attempt's intended
    /// time. Recovery: seconds from the storm's end until goodput of records offered after it
    /// is >= recovered_fraction (90%) of the offered rate for recovered_hold_s (3) seconds in a
    /// row. Also the appends no client got an acknowledgement for (wasted work). Consumers are
    /// not started. Settings and their defaults: docs/bench.md, "storm".
    ///
    /// Example:
    ///   sluice bench storm bench/workloads/storm-2x.toml -b 127.0.0.1:9092 --broker-label sluice
    #[command(verbatim_doc_comment)]
    Storm(RunArgs),
    /// Put campaign directories side by side: writes compare.html and compare.csv, prints a table.
    /// Storm campaigns get their per-second curves overlaid (goodput / offered, ack p99).
    ///
    /// Example:
    ///   sluice bench compare bench-results/fixed-20mbps-run-A bench-results/fixed-20mbps-run-B
    #[command(verbatim_doc_comment)]
    Compare(CompareArgs),
}

#[derive(Debug, clap::Args)]
struct RunArgs {
    /// Workload file (TOML).
    workload: PathBuf,
    /// Bootstrap servers of the cluster under test: HOST:PORT, or several comma-separated
    /// (HOST:PORT,HOST:PORT) as librdkafka takes them.
    #[arg(
        long,
        short = 'b',
        default_value = "127.0.0.1:9092",
        env = "SLUICE_BOOTSTRAP"
    )]
    bootstrap: String,
    /// Parent directory of the campaign directories.
    #[arg(long, default_value = "bench-results")]
    out: PathBuf,
    /// Name of the broker under test in reports (e.g. sluice, kafka-4.3.1).
    #[arg(long, default_value = "broker")]
    broker_label: String,
    /// Version of the broker under test, for the report (default: `--version` of the
    /// --broker-cmd binary, else "unknown").
    #[arg(long)]
    broker_version: Option<String>,
    /// Start this broker command before the run (run by `sh -c "exec ..."`, output to
    /// broker.log in the campaign directory) and stop it after (by PID); `correctness` kills
    /// and restarts it. It must listen on --bootstrap.
    ///
    /// Give it once per broker to start several (a cluster), each binding its own address:
    /// its `--kafka-addr HOST:PORT`, or else the --bootstrap entry in the same position.
    /// The benchmark starts them all and waits until each accepts connections. `correctness`
    /// kills them in turn, and every one is stopped at the end or on an error.
    /// Output goes to broker-<i>.log, i counting from 0 in command-line order.
    #[arg(long, value_name = "COMMAND")]
    broker_cmd: Vec<String>,
    /// A librdkafka property for every client (admin, producers, consumers), applied after all
    /// other settings: how to connect to a TLS or SASL listener, e.g.
    /// -X security.protocol=SASL_SSL -X sasl.mechanisms=SCRAM-SHA-512 -X sasl.username=bench
    /// -X ssl.ca.location=ca.crt. Repeatable; wins over --client-config. Secrets (passwords,
    /// keys, tokens) are recorded as ***.
    #[arg(short = 'X', long = "client-property", value_name = "KEY=VALUE")]
    client_property: Vec<String>,
    /// A file of librdkafka properties for every client, one KEY=VALUE per line (# comments),
    /// as kcat and Java clients read them: keeps sasl.password off the command line.
    #[arg(long, value_name = "FILE")]
    client_config: Option<PathBuf>,
    /// PID of a broker process started elsewhere (repeatable, one per broker): each repeat
    /// records its CPU seconds (user + system) and CPU seconds per million records. Brokers
    /// started with --broker-cmd are measured without it.
    #[arg(long, value_name = "PID")]
    broker_pid: Vec<u32>,
    /// Exit non-zero when the load generator could not keep its schedule.
    #[arg(long)]
    strict: bool,
    /// No per-interval progress lines.
    #[arg(long, short = 'q')]
    quiet: bool,
}

#[derive(Debug, clap::Args)]
struct CompareArgs {
    /// Campaign directories (two or more), the first being the baseline of the ratios.
    #[arg(required = true, num_args = 2..)]
    dirs: Vec<PathBuf>,
    /// Where to write compare.html and compare.csv.
    #[arg(long, default_value = "bench-results/compare")]
    out: PathBuf,
}

pub fn run(args: BenchArgs) -> anyhow::Result<()> {
    let (mode, a) = match args.command {
        BenchCommand::Run(a) => (Mode::Run, a),
        BenchCommand::Explore(a) => (Mode::Explore, a),
        BenchCommand::Drain(a) => (Mode::Drain, a),
        BenchCommand::Correctness(a) => (Mode::Correctness, a),
        BenchCommand::Storm(a) => (Mode::Storm, a),
        BenchCommand::Compare(c) => {
            let table = report::compare(&c.dirs, &c.out)?;
            println!("{table}");
            println!("report: {}", c.out.join("compare.html").display());
            return Ok(());
        }
    };
    let client_properties = client_properties(a.client_config.as_deref(), &a.client_property)?;
    let options = Options {
        workload_file: a.workload,
        bootstrap: a.bootstrap,
        client_properties,
        out: a.out,
        broker_label: a.broker_label,
        broker_version: a.broker_version,
        broker_cmd: a.broker_cmd,
        broker_pids: a.broker_pid,
        strict: a.strict,
        quiet: a.quiet,
    };
    let outcome = campaign::execute(mode, &options).map_err(anyhow::Error::msg)?;
    println!("{}", report::summary_text(&outcome.campaign));
    println!("results: {}", outcome.dir.display());
    println!("report: {}", outcome.dir.join("report.html").display());
    if !outcome.passed {
        bail!("the benchmark's checks failed (see the warnings and report above)");
    }
    Ok(())
}

/// The connection properties of every client: the --client-config file's, then each -X in
/// order (a later one wins when librdkafka applies them).
fn client_properties(
    file: Option<&std::path::Path>,
    flags: &[String],
) -> anyhow::Result<Vec<(String, String)>> {
    let mut properties = Vec::new();
    if let Some(path) = file {
        let text = std::fs::read_to_string(path)
            .with_context(|| format!("cannot read the client config {}", path.display()))?;
        properties = target::parse_properties_file(&text)
            .map_err(|e| anyhow::anyhow!("{}: {e}", path.display()))?;
    }
    for flag in flags {
        properties.push(target::parse_property(flag).map_err(anyhow::Error::msg)?);
    }
    Ok(properties)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flags_come_after_the_file_and_bad_lines_name_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("sasl.properties");
        std::fs::write(
            &file,
            "security.protocol=SASL_SSL\nsasl.username=bench\nsasl.password=pw\n",
        )
        .unwrap();
        let properties =
            client_properties(Some(&file), &["sasl.username=other".to_string()]).unwrap();
        assert_eq!(properties.len(), 4);
        assert_eq!(
            properties.last(),
            Some(&("sasl.username".to_string(), "other".to_string()))
        );
        std::fs::write(&file, "security.protocol SASL_SSL\n").unwrap();
        let message = client_properties(Some(&file), &[]).unwrap_err().to_string();
        assert!(message.contains("sasl.properties: line 1:"), "{message}");
        let message = client_properties(None, &["bootstrap.servers=h:1".to_string()])
            .unwrap_err()
            .to_string();
        assert!(message.contains("--bootstrap"), "{message}");
        assert!(client_properties(Some(&dir.path().join("missing")), &[]).is_err());
    }
}
