//! The `sluice` binary: the broker (`serve`) and the everyday commands around it.

mod apikey;
mod bench;
mod bytesize;
mod client;
mod cluster_mode;
mod consume;
mod group;
mod produce;
mod serve;
mod settings;
mod topic;
mod trigger;
mod user;

use clap::{Parser, Subcommand};

/// Sluice: a Kafka-compatible event broker in one binary.
///
/// Any Kafka client works against it. Start one with `sluice serve`.
#[derive(Debug, Parser)]
#[command(name = "sluice", version, about, long_about = None)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    // Boxed: far larger than the other variants.
    Serve(Box<serve::ServeArgs>),
    Topic(topic::TopicArgs),
    Produce(produce::ProduceArgs),
    Consume(consume::ConsumeArgs),
    Group(group::GroupArgs),
    ApiKey(apikey::ApiKeyArgs),
    Bench(bench::BenchArgs),
    User(user::UserArgs),
    Trigger(trigger::TriggerArgs),
}

fn main() -> std::process::ExitCode {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_env("SLUICE_LOG")
                // librdkafka (inside `sluice bench`) logs every lost connection, which a
                // correctness run with broker kills makes by the hundred; SLUICE_LOG shows them.
                .unwrap_or_else(|_| {
                    tracing_subscriber::EnvFilter::new("info,rdkafka=off,librdkafka=off")
                }),
        )
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .init();
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Serve(args) => serve::run(*args),
        Command::Topic(args) => topic::run(args),
        Command::Produce(args) => produce::run(args),
        Command::Consume(args) => consume::run(args),
        Command::Group(args) => group::run(args),
        Command::ApiKey(args) => apikey::run(args),
        Command::Bench(args) => bench::run(args),
        Command::User(args) => user::run(args),
        Command::Trigger(args) => trigger::run(args),
    };
    match result {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e:#}");
            std::process::ExitCode::FAILURE
        }
    }
}
