//! `sluice topic create|list|describe|delete|alter`: topic administration over the Kafka admin
//! APIs (CreateTopics, Metadata, DescribeConfigs, DeleteTopics, IncrementalAlterConfigs,
//! CreatePartitions), so it works against Sluice and against Apache Kafka alike.
//!
//! Results go to stdout (one fact per line, easy to grep); errors are returned and printed by
//! `main` with a non-zero exit code.

// The CLI's output is its job: printing to stdout is intended here.
#![allow(clippy::print_stdout)]

use anyhow::{Context, bail};
use clap::{ArgGroup, Subcommand};
use sluice_protocol::kafka_protocol::messages::create_partitions_request::CreatePartitionsTopic;
use sluice_protocol::kafka_protocol::messages::create_topics_request::{
    CreatableTopic, CreatableTopicConfig,
};
use sluice_protocol::kafka_protocol::messages::delete_topics_request::DeleteTopicState;
use sluice_protocol::kafka_protocol::messages::describe_configs_request::DescribeConfigsResource;
use sluice_protocol::kafka_protocol::messages::incremental_alter_configs_request::{
    AlterConfigsResource, AlterableConfig,
};
use sluice_protocol::kafka_protocol::messages::{
    ApiKey, CreatePartitionsRequest, CreateTopicsRequest, DeleteTopicsRequest,
    DescribeConfigsRequest, IncrementalAlterConfigsRequest, TopicName,
};
use sluice_protocol::kafka_protocol::protocol::StrBytes;

use crate::client::{BootstrapArgs, Cluster, REQUEST_TIMEOUT_MS, block_on, kafka_error, plural};

/// The ConfigResource type of a topic.
const RESOURCE_TOPIC: i8 = 2;
/// IncrementalAlterConfigs operations.
const OP_SET: i8 = 0;
const OP_DELETE: i8 = 1;

/// Create, list, describe, delete and alter topics.
///
/// Examples:
///   sluice topic create orders --partitions 3 --config retention.ms=86400000
///   sluice topic list
///   sluice topic describe orders
///   sluice topic alter orders --config retention.ms=3600000 --partitions 6
///   sluice topic delete orders
#[derive(Debug, clap::Args)]
#[command(verbatim_doc_comment)]
pub struct TopicArgs {
    #[command(subcommand)]
    command: TopicCommand,
}

#[derive(Debug, Subcommand)]
enum TopicCommand {
    Create(CreateArgs),
    List(ListArgs),
    Describe(DescribeArgs),
    Delete(DeleteArgs),
    Alter(AlterArgs),
}

/// Create a topic.
///
/// Example:
///   sluice topic create orders --partitions 3 --config retention.ms=86400000 --config cleanup.policy=delete
///
/// Prints `created topic NAME with N partitions`. Fails (non-zero exit) if the topic exists or
/// the broker refuses a setting, with the broker's reason.
#[derive(Debug, clap::Args)]
#[command(verbatim_doc_comment)]
struct CreateArgs {
    /// Name of the topic (letters, digits, '.', '_' and '-'; at most 249 characters)
    name: String,
    /// Number of partitions [default: the broker's default_partitions]
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(i32).range(1..))]
    partitions: Option<i32>,
    /// A topic setting, e.g. retention.ms=86400000; repeat for several (Sluice knows
    /// retention.ms, retention.bytes, segment.bytes, segment.ms, max.message.bytes,
    /// cleanup.policy=delete|compact|compact,delete, min.cleanable.dirty.ratio,
    /// min.compaction.lag.ms, max.compaction.lag.ms, delete.retention.ms,
    /// message.timestamp.type=CreateTime)
    #[arg(long = "config", value_name = "KEY=VALUE", value_parser = parse_key_value)]
    configs: Vec<(String, String)>,
    #[command(flatten)]
    bootstrap: BootstrapArgs,
}

/// List topics, one per line: NAME<TAB>PARTITIONS, sorted by name.
///
/// Example:
///   sluice topic list --bootstrap 127.0.0.1:9092
#[derive(Debug, clap::Args)]
#[command(verbatim_doc_comment)]
struct ListArgs {
    #[command(flatten)]
    bootstrap: BootstrapArgs,
}

/// Show a topic's id, partitions with their leaders, and its settings.
///
/// Example:
///   sluice topic describe orders
///
/// Settings come from the DescribeConfigs API; a broker without it gets a note instead.
#[derive(Debug, clap::Args)]
#[command(verbatim_doc_comment)]
struct DescribeArgs {
    /// Name of the topic
    name: String,
    #[command(flatten)]
    bootstrap: BootstrapArgs,
}

/// Delete a topic and all its records.
///
/// Example:
///   sluice topic delete orders
#[derive(Debug, clap::Args)]
#[command(verbatim_doc_comment)]
struct DeleteArgs {
    /// Name of the topic
    name: String,
    #[command(flatten)]
    bootstrap: BootstrapArgs,
}

/// Change a topic's settings or add partitions.
///
/// Example:
///   sluice topic alter orders --config retention.ms=3600000 --delete-config segment.ms --partitions 6
///
/// Settings change through IncrementalAlterConfigs and partitions through CreatePartitions;
/// each needs the broker to support that API. Partitions can only be added, never removed.
#[derive(Debug, clap::Args)]
#[command(verbatim_doc_comment)]
#[command(group(ArgGroup::new("change").required(true).multiple(true)
    .args(["configs", "delete_configs", "partitions"])))]
struct AlterArgs {
    /// Name of the topic
    name: String,
    /// Set a topic setting, e.g. retention.ms=3600000; repeat for several
    #[arg(long = "config", value_name = "KEY=VALUE", value_parser = parse_key_value)]
    configs: Vec<(String, String)>,
    /// Remove a topic setting so the broker default applies again; repeat for several
    #[arg(long = "delete-config", value_name = "KEY")]
    delete_configs: Vec<String>,
    /// Grow the topic to this many partitions in total
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(i32).range(1..))]
    partitions: Option<i32>,
    #[command(flatten)]
    bootstrap: BootstrapArgs,
}

/// Parses `KEY=VALUE` (the value may itself contain '=').
pub(crate) fn parse_key_value(s: &str) -> Result<(String, String), String> {
    match s.split_once('=') {
        Some((k, v)) if !k.is_empty() => Ok((k.to_owned(), v.to_owned())),
        _ => Err(format!("expected KEY=VALUE, got '{s}'")),
    }
}

fn str_bytes(s: &str) -> StrBytes {
    StrBytes::from_string(s.to_owned())
}

pub fn run(args: TopicArgs) -> anyhow::Result<()> {
    block_on(async move {
        match args.command {
            TopicCommand::Create(a) => create(a).await,
            TopicCommand::List(a) => list(a).await,
            TopicCommand::Describe(a) => describe(a).await,
            TopicCommand::Delete(a) => delete(a).await,
            TopicCommand::Alter(a) => alter(a).await,
        }
    })
}

async fn create(args: CreateArgs) -> anyhow::Result<()> {
    let mut cluster = Cluster::connect(&args.bootstrap).await?;
    let topic = CreatableTopic::default()
        .with_name(TopicName(str_bytes(&args.name)))
        .with_num_partitions(args.partitions.unwrap_or(-1))
        .with_replication_factor(-1)
        .with_configs(
            args.configs
                .iter()
                .map(|(k, v)| {
                    CreatableTopicConfig::default()
                        .with_name(str_bytes(k))
                        .with_value(Some(str_bytes(v)))
                })
                .collect(),
        );
    let request = CreateTopicsRequest::default()
        .with_topics(vec![topic])
        .with_timeout_ms(REQUEST_TIMEOUT_MS);
    let response = cluster.bootstrap().call(request).await?;
    let result = response
        .topics
        .first()
        .context("the broker's CreateTopics response lists no topic")?;
    if let Some(e) = kafka_error(result.error_code, result.error_message.as_ref()) {
        bail!("cannot create topic '{}': {e}", args.name);
    }
    let partitions = match (result.num_partitions, args.partitions) {
        (n, _) if n > 0 => n,
        (_, Some(n)) => n,
        // An old CreateTopics version does not echo the count: ask.
        _ => cluster.topic(&args.name, false).await?.partitions.len() as i32,
    };
    println!(
        "created topic {} with {}",
        args.name,
        plural(partitions as u64, "partition")
    );
    Ok(())
}

async fn list(args: ListArgs) -> anyhow::Result<()> {
    let mut cluster = Cluster::connect(&args.bootstrap).await?;
    let response = cluster.metadata(None, false).await?;
    let mut topics: Vec<(String, usize)> = response
        .topics
        .iter()
        .filter(|t| t.error_code == 0)
        .filter_map(|t| Some((t.name.as_ref()?.0.to_string(), t.partitions.len())))
        .collect();
    topics.sort();
    for (name, partitions) in topics {
        println!("{name}\t{partitions}");
    }
    Ok(())
}

async fn describe(args: DescribeArgs) -> anyhow::Result<()> {
    let mut cluster = Cluster::connect(&args.bootstrap).await?;
    let topic = cluster.topic(&args.name, false).await?;
    println!("topic: {}", topic.name);
    println!("id: {}", topic.id_string());
    println!("partitions: {}", topic.partitions.len());
    for (partition, leader) in &topic.partitions {
        println!("  partition {partition}\tleader {leader}");
    }
    let conn = cluster.bootstrap();
    if !conn.supports(ApiKey::DescribeConfigs) {
        println!(
            "configs: not shown (the broker at {} does not support DescribeConfigs)",
            conn.addr()
        );
        return Ok(());
    }
    let request = DescribeConfigsRequest::default().with_resources(vec![
        DescribeConfigsResource::default()
            .with_resource_type(RESOURCE_TOPIC)
            .with_resource_name(str_bytes(&args.name))
            .with_configuration_keys(None),
    ]);
    let response = conn.call(request).await?;
    let result = response
        .results
        .first()
        .context("the broker's DescribeConfigs response lists no resource")?;
    if let Some(e) = kafka_error(result.error_code, result.error_message.as_ref()) {
        bail!("cannot describe the settings of topic '{}': {e}", args.name);
    }
    println!("configs:");
    let mut configs: Vec<_> = result.configs.iter().collect();
    configs.sort_by(|a, b| a.name.cmp(&b.name));
    for c in configs {
        let value = match (&c.value, c.is_sensitive) {
            (_, true) => "(sensitive, hidden)".to_owned(),
            (Some(v), false) => v.to_string(),
            (None, false) => "(null)".to_owned(),
        };
        println!(
            "  {} = {value}\t({})",
            &*c.name,
            config_source(c.config_source)
        );
    }
    Ok(())
}

/// Kafka's ConfigSource values, in words.
fn config_source(source: i8) -> &'static str {
    match source {
        1 => "set on topic",
        2..=4 => "broker setting",
        5 => "default",
        _ => "unknown source",
    }
}

async fn delete(args: DeleteArgs) -> anyhow::Result<()> {
    let mut cluster = Cluster::connect(&args.bootstrap).await?;
    let conn = cluster.bootstrap();
    let name = TopicName(str_bytes(&args.name));
    // v6 names topics in `topics` (by name or id); older versions in `topic_names`.
    let request = if conn.version(ApiKey::DeleteTopics).is_some_and(|v| v >= 6) {
        DeleteTopicsRequest::default()
            .with_topics(vec![DeleteTopicState::default().with_name(Some(name))])
    } else {
        DeleteTopicsRequest::default().with_topic_names(vec![name])
    }
    .with_timeout_ms(REQUEST_TIMEOUT_MS);
    let response = conn.call(request).await?;
    let result = response
        .responses
        .first()
        .context("the broker's DeleteTopics response lists no topic")?;
    if let Some(e) = kafka_error(result.error_code, result.error_message.as_ref()) {
        bail!("cannot delete topic '{}': {e}", args.name);
    }
    println!("deleted topic {}", args.name);
    Ok(())
}

async fn alter(args: AlterArgs) -> anyhow::Result<()> {
    let mut cluster = Cluster::connect(&args.bootstrap).await?;
    let changes_configs = !args.configs.is_empty() || !args.delete_configs.is_empty();
    // Check support for everything first, so that nothing is half-applied.
    let conn = cluster.bootstrap();
    for (wanted, api, what) in [
        (
            changes_configs,
            ApiKey::IncrementalAlterConfigs,
            "change topic settings",
        ),
        (
            args.partitions.is_some(),
            ApiKey::CreatePartitions,
            "add partitions",
        ),
    ] {
        if wanted && !conn.supports(api) {
            bail!(
                "cannot {what}: the broker at {} does not support the {api:?} API",
                conn.addr()
            );
        }
    }
    if changes_configs {
        let configs = args
            .configs
            .iter()
            .map(|(k, v)| {
                AlterableConfig::default()
                    .with_name(str_bytes(k))
                    .with_config_operation(OP_SET)
                    .with_value(Some(str_bytes(v)))
            })
            .chain(args.delete_configs.iter().map(|k| {
                AlterableConfig::default()
                    .with_name(str_bytes(k))
                    .with_config_operation(OP_DELETE)
            }))
            .collect();
        let request = IncrementalAlterConfigsRequest::default().with_resources(vec![
            AlterConfigsResource::default()
                .with_resource_type(RESOURCE_TOPIC)
                .with_resource_name(str_bytes(&args.name))
                .with_configs(configs),
        ]);
        let response = conn.call(request).await?;
        let result = response
            .responses
            .first()
            .context("the broker's IncrementalAlterConfigs response lists no resource")?;
        if let Some(e) = kafka_error(result.error_code, result.error_message.as_ref()) {
            bail!("cannot change the settings of topic '{}': {e}", args.name);
        }
        for (k, v) in &args.configs {
            println!("set {k}={v} on topic {}", args.name);
        }
        for k in &args.delete_configs {
            println!("removed {k} from topic {}", args.name);
        }
    }
    if let Some(count) = args.partitions {
        let request = CreatePartitionsRequest::default()
            .with_topics(vec![
                CreatePartitionsTopic::default()
                    .with_name(TopicName(str_bytes(&args.name)))
                    .with_count(count)
                    .with_assignments(None),
            ])
            .with_timeout_ms(REQUEST_TIMEOUT_MS);
        let response = conn.call(request).await?;
        let result = response
            .results
            .first()
            .context("the broker's CreatePartitions response lists no topic")?;
        if let Some(e) = kafka_error(result.error_code, result.error_message.as_ref()) {
            bail!(
                "cannot grow topic '{}' to {count} partitions: {e}",
                args.name
            );
        }
        println!(
            "topic {} now has {}",
            args.name,
            plural(count as u64, "partition")
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn key_value_arguments() {
        assert_eq!(
            parse_key_value("a=b=c"),
            Ok(("a".to_owned(), "b=c".to_owned()))
        );
        assert_eq!(parse_key_value("a="), Ok(("a".to_owned(), String::new())));
        assert!(parse_key_value("=b").is_err());
        assert!(parse_key_value("ab").is_err());
    }
}
