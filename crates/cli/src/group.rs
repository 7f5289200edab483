//! `sluice group list|describe|delete|reset-offsets`: consumer-group and share-group
//! administration over the Kafka group APIs, so it works against Sluice and against Apache
//! Kafka alike.
//!
//! Where each request goes:
//! - ListGroups to every broker, since each one lists only the groups it coordinates.
//! - Everything about one group (ConsumerGroupDescribe, ShareGroupDescribe, DescribeGroups,
//!   OffsetFetch, OffsetCommit, DescribeShareGroupOffsets, AlterShareGroupOffsets, DeleteGroups)
//!   to that group's coordinator, found with FindCoordinator and
//!   reached on its own connection ([`Groups`]). "Coordinator not ready" answers are retried for
//!   a bounded time, because a coordinator that just started (or, in Kafka, one creating its
//!   offsets topic) gives them for a few seconds.
//! - ListOffsets (log end, earliest, by time) to each partition's leader.
//!
//! Three kinds of group exist. A *classic* group's members join with JoinGroup/SyncGroup, and
//! the assignment the broker stores for each member is opaque bytes; Kafka consumers put a
//! ConsumerProtocolAssignment there (an i16 version, then the topic partitions), which
//! [`describe`] decodes. A *consumer* group (KIP-848) has the broker assign partitions itself
//! and is described by ConsumerGroupDescribe. A *share* group (KIP-932) is a queue: the broker
//! assigns partitions, several members may read one, and the group keeps a start offset per
//! partition instead of committed offsets ([`share`]).
//!
//! This file holds the coordinator client ([`Groups`]), the lookups the commands share
//! (committed offsets, partition leaders, ListOffsets), `list` and `delete`; `describe`,
//! `reset-offsets` and the share-group requests have their own modules.
//!
//! Results go to stdout (tables with a header row, or one JSON object per line with `--json`);
//! notes go to stderr; errors are returned and printed by `main` with a non-zero exit code.

// The CLI's output is its job: printing to stdout is intended here.
#![allow(clippy::print_stdout)]

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::time::Duration;

use anyhow::{Context, anyhow, bail};
use clap::Subcommand;
use serde_json::json;
use sluice_protocol::kafka_protocol::ResponseError;
use sluice_protocol::kafka_protocol::messages::list_offsets_request::{
    ListOffsetsPartition, ListOffsetsTopic,
};
use sluice_protocol::kafka_protocol::messages::offset_fetch_request::OffsetFetchRequestGroup;
use sluice_protocol::kafka_protocol::messages::{
    ApiKey, BrokerId, DeleteGroupsRequest, DescribeGroupsRequest, FindCoordinatorRequest, GroupId,
    ListGroupsRequest, ListOffsetsRequest, OffsetFetchRequest, TopicName,
};
use sluice_protocol::kafka_protocol::protocol::StrBytes;

use crate::client::{BootstrapArgs, Call, Cluster, Connection, block_on, kafka_error, plural};

mod describe;
mod reset;
mod share;

/// FindCoordinator's key type for consumer groups.
const KEY_TYPE_GROUP: i8 = 0;
/// ListOffsets' special timestamps.
const LATEST: i64 = -1;
const EARLIEST: i64 = -2;
/// How often, and how far apart, to retry while a coordinator is not ready: 40 × 250 ms = 10 s,
/// longer than Kafka takes to create its offsets topic on first use (~1-3 s on a laptop).
const COORDINATOR_ATTEMPTS: u32 = 40;
const COORDINATOR_RETRY_INTERVAL: Duration = Duration::from_millis(250);

/// List, describe and delete consumer and share groups, and reset their offsets.
///
/// Examples:
///   sluice group list
///   sluice group list --type share
///   sluice group describe orders-app
///   sluice group reset-offsets orders-app --topic orders --to-earliest
///   sluice group reset-offsets orders-app --topic orders:0,1 --shift-by -100 --execute
///   sluice group delete orders-app
#[derive(Debug, clap::Args)]
#[command(verbatim_doc_comment)]
pub struct GroupArgs {
    #[command(subcommand)]
    command: GroupCommand,
}

#[derive(Debug, Subcommand)]
enum GroupCommand {
    List(ListArgs),
    Describe(describe::DescribeArgs),
    Delete(DeleteArgs),
    ResetOffsets(reset::ResetArgs),
}

/// List the groups of the cluster.
///
/// Examples:
///   sluice group list
///   sluice group list --state Empty --json
///   sluice group list --type share
///
/// Prints GROUP, TYPE, STATE and PROTOCOL-TYPE under a header, sorted by name. TYPE is
/// classic (JoinGroup/SyncGroup consumers, Kafka Connect, ...), consumer (the KIP-848
/// protocol, `group.protocol=consumer`) or share (KIP-932 share groups: queues, read with
/// KafkaShareConsumer). With --json, each group is one line:
///   {"group":"orders-app","type":"classic","state":"Stable","protocol_type":"consumer"}
#[derive(Debug, clap::Args)]
#[command(verbatim_doc_comment)]
struct ListArgs {
    /// Only groups in this state (Stable, Empty, PreparingRebalance, CompletingRebalance,
    /// Assigning, Reconciling, Dead); repeat or separate with commas for several
    #[arg(long, value_name = "STATE", value_delimiter = ',')]
    state: Vec<String>,
    /// Only groups of this type (classic, consumer, share, streams); repeat or separate with
    /// commas for several
    #[arg(long = "type", value_name = "TYPE", value_delimiter = ',')]
    group_type: Vec<String>,
    /// Print one JSON object per group
    #[arg(long)]
    json: bool,
    #[command(flatten)]
    bootstrap: BootstrapArgs,
}

/// Delete groups and their committed offsets.
///
/// Example:
///   sluice group delete orders-app old-report
///
/// Prints `deleted group NAME` for each group. A group that still has members is refused
/// (NON_EMPTY_GROUP): stop its consumers first. A share group goes with its start offsets and
/// the state of its partitions' records. Exits non-zero if any group was not deleted.
#[derive(Debug, clap::Args)]
#[command(verbatim_doc_comment)]
struct DeleteArgs {
    /// The group ids
    #[arg(required = true, value_name = "GROUP")]
    groups: Vec<String>,
    #[command(flatten)]
    bootstrap: BootstrapArgs,
}

pub fn run(args: GroupArgs) -> anyhow::Result<()> {
    block_on(async move {
        match args.command {
            GroupCommand::List(a) => list(a).await,
            GroupCommand::Describe(a) => describe::run(a).await,
            GroupCommand::Delete(a) => delete(a).await,
            GroupCommand::ResetOffsets(a) => reset::run(a).await,
        }
    })
}

fn str_bytes(s: &str) -> StrBytes {
    StrBytes::from_string(s.to_owned())
}

fn group_id(s: &str) -> GroupId {
    GroupId(str_bytes(s))
}

/// A topic partition, by name.
type Tp = (String, i32);

/// Partition numbers in order, each once.
fn sorted(mut partitions: Vec<i32>) -> Vec<i32> {
    partitions.sort_unstable();
    partitions.dedup();
    partitions
}

/// A Kafka error code about a group as its name and message plus what to do about it, or
/// `None` for code 0.
fn group_error(code: i16, message: Option<&StrBytes>) -> Option<String> {
    use ResponseError as E;
    let error = kafka_error(code, message)?;
    let hint = match ResponseError::try_from_code(code)? {
        E::GroupIdNotFound => {
            "no group by that name exists; `sluice group list` shows the groups".to_owned()
        }
        E::NonEmptyGroup => "the group still has members: stop its consumers first".to_owned(),
        E::UnknownMemberId
        | E::IllegalGeneration
        | E::RebalanceInProgress
        | E::StaleMemberEpoch
        | E::FencedMemberEpoch => "the group has active members: stop its consumers, wait \
             until `sluice group describe` shows state Empty, then retry"
            .to_owned(),
        E::CoordinatorNotAvailable | E::CoordinatorLoadInProgress | E::NotCoordinator => {
            "the group coordinator is not ready: try again in a few seconds".to_owned()
        }
        E::InvalidGroupId => "a group id must not be empty".to_owned(),
        E::GroupAuthorizationFailed => "this client may not access the group".to_owned(),
        _ => return Some(error),
    };
    Some(format!("{error}; {hint}"))
}

/// Codes that mean "ask again (maybe elsewhere) in a moment".
fn coordinator_not_ready(code: i16) -> bool {
    [
        ResponseError::CoordinatorLoadInProgress,
        ResponseError::CoordinatorNotAvailable,
        ResponseError::NotCoordinator,
    ]
    .iter()
    .any(|e| e.code() == code)
}

/// A group's coordinator, as FindCoordinator named it.
#[derive(Debug, Clone)]
struct Coordinator {
    node_id: i32,
    addr: String,
}

/// The cluster plus connections to group coordinators.
#[derive(Debug)]
struct Groups {
    cluster: Cluster,
    /// Each group's coordinator, from FindCoordinator; dropped when it says it no longer is.
    coordinator_of: HashMap<String, Coordinator>,
    /// Connections to coordinators other than the bootstrap broker, by address.
    connections: HashMap<String, Connection>,
}

impl Groups {
    async fn connect(args: &BootstrapArgs) -> anyhow::Result<Groups> {
        Ok(Groups {
            cluster: Cluster::connect(args).await?,
            coordinator_of: HashMap::new(),
            connections: HashMap::new(),
        })
    }

    /// Asks the bootstrap broker which broker coordinates `group`.
    async fn find_coordinator(&mut self, group: &str) -> anyhow::Result<Coordinator> {
        if let Some(c) = self.coordinator_of.get(group) {
            return Ok(c.clone());
        }
        let conn = self.cluster.bootstrap();
        // v4 batches keys; older versions take one.
        let batched = conn
            .version(ApiKey::FindCoordinator)
            .is_some_and(|v| v >= 4);
        let request = if batched {
            FindCoordinatorRequest::default().with_coordinator_keys(vec![str_bytes(group)])
        } else {
            FindCoordinatorRequest::default().with_key(str_bytes(group))
        }
        .with_key_type(KEY_TYPE_GROUP);
        let mut attempt = 0;
        let found = loop {
            attempt += 1;
            let response = conn
                .call(request.clone())
                .await
                .with_context(|| format!("finding the coordinator of group '{group}'"))?;
            let (code, message, node_id, host, port) = if batched {
                let c = response
                    .coordinators
                    .into_iter()
                    .next()
                    .context("the broker's FindCoordinator response names no coordinator")?;
                (c.error_code, c.error_message, c.node_id.0, c.host, c.port)
            } else {
                (
                    response.error_code,
                    response.error_message,
                    response.node_id.0,
                    response.host,
                    response.port,
                )
            };
            if code == 0 {
                break Coordinator {
                    node_id,
                    addr: format!("{}:{port}", &*host),
                };
            }
            if coordinator_not_ready(code) && attempt < COORDINATOR_ATTEMPTS {
                tokio::time::sleep(COORDINATOR_RETRY_INTERVAL).await;
                continue;
            }
            let e = group_error(code, message.as_ref()).unwrap_or_default();
            bail!("cannot find the coordinator of group '{group}': {e}");
        };
        self.coordinator_of.insert(group.to_owned(), found.clone());
        Ok(found)
    }

    /// The connection to `group`'s coordinator (the bootstrap connection if it is that broker).
    async fn coordinator(&mut self, group: &str) -> anyhow::Result<&mut Connection> {
        let c = self.find_coordinator(group).await?;
        if c.addr == self.cluster.bootstrap().addr() {
            return Ok(self.cluster.bootstrap());
        }
        if !self.connections.contains_key(&c.addr) {
            let conn = Connection::connect(&c.addr).await.with_context(|| {
                format!(
                    "connecting to broker {} at {}, the coordinator of group '{group}'",
                    c.node_id, c.addr
                )
            })?;
            self.connections.insert(c.addr.clone(), conn);
        }
        Ok(self.connections.get_mut(&c.addr).expect("inserted above"))
    }

    /// Sends `request` to `group`'s coordinator. While the answer (its error code as `code`
    /// reads it) says the coordinator is loading or has moved, waits, finds the coordinator
    /// again and resends; after [`COORDINATOR_ATTEMPTS`] the last answer is returned.
    async fn call<R: Call + Clone>(
        &mut self,
        group: &str,
        request: R,
        code: impl Fn(&R::Response) -> i16,
    ) -> anyhow::Result<R::Response> {
        let mut attempt = 0;
        loop {
            attempt += 1;
            let response = self.coordinator(group).await?.call(request.clone()).await?;
            if attempt < COORDINATOR_ATTEMPTS && coordinator_not_ready(code(&response)) {
                self.coordinator_of.remove(group);
                tokio::time::sleep(COORDINATOR_RETRY_INTERVAL).await;
                continue;
            }
            return Ok(response);
        }
    }

    /// Whether `group`'s coordinator speaks `api`.
    async fn coordinator_supports(&mut self, group: &str, api: ApiKey) -> anyhow::Result<bool> {
        Ok(self.coordinator(group).await?.supports(api))
    }
}

// ---------------------------------------------------------------------------------------------
// list

/// One row of `group list`.
#[derive(Debug, Clone, PartialEq, Eq)]
struct ListedGroup {
    group: String,
    group_type: String,
    state: String,
    protocol_type: String,
}

/// Kafka's spelling of a group state typed in any case (the broker's filter may be exact).
fn canonical_state(s: &str) -> String {
    const STATES: [&str; 8] = [
        "Stable",
        "Empty",
        "PreparingRebalance",
        "CompletingRebalance",
        "Assigning",
        "Reconciling",
        "NotReady",
        "Dead",
    ];
    STATES
        .iter()
        .find(|k| k.eq_ignore_ascii_case(s))
        .map_or_else(|| s.to_owned(), |k| (*k).to_owned())
}

async fn list(args: ListArgs) -> anyhow::Result<()> {
    let states: Vec<String> = args.state.iter().map(|s| canonical_state(s)).collect();
    let types: Vec<String> = args
        .group_type
        .iter()
        .map(|t| t.to_ascii_lowercase())
        .collect();
    let mut cluster = Cluster::connect(&args.bootstrap).await?;
    // Each broker lists the groups it coordinates: ask them all.
    let metadata = cluster.metadata(Some(&[]), false).await?;
    let mut nodes: Vec<i32> = metadata.brokers.iter().map(|b| b.node_id.0).collect();
    nodes.sort_unstable();
    if nodes.is_empty() {
        nodes.push(-1); // no broker list: the bootstrap broker is the one to ask
    }
    let mut found: BTreeMap<String, ListedGroup> = BTreeMap::new();
    for node in nodes {
        let conn = cluster.leader(node).await?;
        for g in list_on(conn, &states, &types).await? {
            found.insert(g.group.clone(), g);
        }
    }
    // Filter here as well: older brokers ignore filters they do not know.
    let rows: Vec<ListedGroup> = found
        .into_values()
        .filter(|g| states.is_empty() || states.iter().any(|s| s.eq_ignore_ascii_case(&g.state)))
        .filter(|g| types.is_empty() || types.iter().any(|t| t.eq_ignore_ascii_case(&g.group_type)))
        .collect();
    if args.json {
        for g in &rows {
            let line = json!({
                "group": g.group,
                "type": g.group_type,
                "state": g.state,
                "protocol_type": g.protocol_type,
            });
            println!("{line}");
        }
    } else if rows.is_empty() {
        eprintln!("no groups");
    } else {
        let rows: Vec<Vec<String>> = rows
            .into_iter()
            .map(|g| {
                vec![
                    g.group,
                    g.group_type,
                    g.state,
                    dash_if_empty(g.protocol_type),
                ]
            })
            .collect();
        print!(
            "{}",
            table("", &["GROUP", "TYPE", "STATE", "PROTOCOL-TYPE"], &rows)
        );
    }
    Ok(())
}

/// ListGroups on one broker. v4 added states and v5 types; for older brokers the states come
/// from DescribeGroups, and every group is classic (consumer groups came with v5).
async fn list_on(
    conn: &mut Connection,
    states: &[String],
    types: &[String],
) -> anyhow::Result<Vec<ListedGroup>> {
    let version = conn.version(ApiKey::ListGroups).unwrap_or(0);
    let mut request = ListGroupsRequest::default();
    if version >= 4 {
        request = request.with_states_filter(states.iter().map(|s| str_bytes(s)).collect());
    }
    if version >= 5 {
        request = request.with_types_filter(types.iter().map(|t| str_bytes(t)).collect());
    }
    let mut attempt = 0;
    let response = loop {
        attempt += 1;
        let response = conn.call(request.clone()).await?;
        if coordinator_not_ready(response.error_code) && attempt < COORDINATOR_ATTEMPTS {
            tokio::time::sleep(COORDINATOR_RETRY_INTERVAL).await;
            continue;
        }
        break response;
    };
    if let Some(e) = kafka_error(response.error_code, None) {
        bail!("the broker at {} cannot list its groups: {e}", conn.addr());
    }
    let mut groups: Vec<ListedGroup> = response
        .groups
        .into_iter()
        .map(|g| ListedGroup {
            group: g.group_id.0.to_string(),
            group_type: if version >= 5 {
                g.group_type.to_string()
            } else {
                "classic".to_owned()
            },
            state: g.group_state.to_string(),
            protocol_type: g.protocol_type.to_string(),
        })
        .collect();
    if version < 4 && !groups.is_empty() && conn.supports(ApiKey::DescribeGroups) {
        let request = DescribeGroupsRequest::default()
            .with_groups(groups.iter().map(|g| group_id(&g.group)).collect());
        let described = conn.call(request).await?;
        for d in described.groups.iter().filter(|d| d.error_code == 0) {
            if let Some(g) = groups.iter_mut().find(|g| *g.group == *d.group_id.0) {
                g.state = d.group_state.to_string();
            }
        }
    }
    for g in &mut groups {
        if g.state.is_empty() {
            g.state = "-".to_owned();
        }
    }
    Ok(groups)
}

// ---------------------------------------------------------------------------------------------
// lookups shared by the commands

/// The group's committed offsets (partitions without one are left out).
async fn committed_offsets(groups: &mut Groups, group: &str) -> anyhow::Result<BTreeMap<Tp, i64>> {
    // v8 moved everything into a per-group array; `topics: None` asks for all topics.
    let batched = groups
        .coordinator(group)
        .await?
        .version(ApiKey::OffsetFetch)
        .is_some_and(|v| v >= 8);
    let request = if batched {
        OffsetFetchRequest::default().with_groups(vec![
            OffsetFetchRequestGroup::default()
                .with_group_id(group_id(group))
                .with_topics(None),
        ])
    } else {
        OffsetFetchRequest::default()
            .with_group_id(group_id(group))
            .with_topics(None)
    };
    let response = groups
        .call(group, request, |r| {
            r.groups.first().map_or(r.error_code, |g| g.error_code)
        })
        .await?;
    let mut offsets = BTreeMap::new();
    let mut errors = Vec::new();
    let mut take = |topic: &TopicName, partition: i32, offset: i64, code: i16| {
        if let Some(e) = kafka_error(code, None) {
            errors.push(format!("{}/{partition}: {e}", &*topic.0));
        } else if offset >= 0 {
            offsets.insert((topic.0.to_string(), partition), offset);
        }
    };
    let group_code = if batched {
        let g = response
            .groups
            .into_iter()
            .next()
            .context("the broker's OffsetFetch response lists no group")?;
        for t in &g.topics {
            for p in &t.partitions {
                take(&t.name, p.partition_index, p.committed_offset, p.error_code);
            }
        }
        g.error_code
    } else {
        for t in &response.topics {
            for p in &t.partitions {
                take(&t.name, p.partition_index, p.committed_offset, p.error_code);
            }
        }
        response.error_code
    };
    // A group that does not exist has no offsets: not an error here.
    if group_code != ResponseError::GroupIdNotFound.code()
        && let Some(e) = group_error(group_code, None)
    {
        bail!("cannot read the committed offsets of group '{group}': {e}");
    }
    if let Some(first) = errors.first() {
        bail!(
            "cannot read the committed offsets of group '{group}' for {}: {first}",
            plural(errors.len() as u64, "partition")
        );
    }
    Ok(offsets)
}

/// Each topic's partitions and their leaders (`partition → leader node`), or why the topic
/// cannot be used, worded to follow "topic 'NAME' ".
async fn partition_leaders(
    cluster: &mut Cluster,
    topics: &BTreeSet<String>,
) -> anyhow::Result<BTreeMap<String, Result<BTreeMap<i32, i32>, String>>> {
    if topics.is_empty() {
        return Ok(BTreeMap::new());
    }
    let names: Vec<&str> = topics.iter().map(String::as_str).collect();
    let response = cluster.metadata(Some(&names), false).await?;
    let mut out = BTreeMap::new();
    for t in response.topics {
        let Some(name) = t.name else { continue };
        let value = match kafka_error(t.error_code, None) {
            Some(_) if t.error_code == ResponseError::UnknownTopicOrPartition.code() => {
                Err("does not exist (UNKNOWN_TOPIC_OR_PARTITION)".to_owned())
            }
            Some(e) => Err(format!("cannot be used: {e}")),
            None => Ok(t
                .partitions
                .iter()
                .map(|p| (p.partition_index, p.leader_id.0))
                .collect()),
        };
        out.insert(name.0.to_string(), value);
    }
    for name in topics {
        out.entry(name.clone())
            .or_insert_with(|| Err("is not in the broker's metadata".to_owned()));
    }
    Ok(out)
}

/// ListOffsets at `timestamp` (or [`LATEST`] / [`EARLIEST`]) for `partitions`, each asked of
/// its leader: the offset per partition (-1 where no record is at or after the timestamp), or
/// the broker's error for it.
async fn list_offsets(
    cluster: &mut Cluster,
    leaders: &BTreeMap<Tp, i32>,
    partitions: &BTreeSet<Tp>,
    timestamp: i64,
) -> anyhow::Result<BTreeMap<Tp, Result<i64, String>>> {
    let mut by_leader: BTreeMap<i32, BTreeMap<&str, Vec<i32>>> = BTreeMap::new();
    for tp in partitions {
        if let Some(&leader) = leaders.get(tp) {
            by_leader
                .entry(leader)
                .or_default()
                .entry(tp.0.as_str())
                .or_default()
                .push(tp.1);
        }
    }
    let mut out = BTreeMap::new();
    for (leader, topics) in by_leader {
        let request = ListOffsetsRequest::default()
            .with_replica_id(BrokerId(-1))
            .with_topics(
                topics
                    .iter()
                    .map(|(topic, parts)| {
                        ListOffsetsTopic::default()
                            .with_name(TopicName(str_bytes(topic)))
                            .with_partitions(
                                parts
                                    .iter()
                                    .map(|&p| {
                                        ListOffsetsPartition::default()
                                            .with_partition_index(p)
                                            .with_timestamp(timestamp)
                                    })
                                    .collect(),
                            )
                    })
                    .collect(),
            );
        let response = cluster.leader(leader).await?.call(request).await?;
        for t in &response.topics {
            for p in &t.partitions {
                let value = match kafka_error(p.error_code, None) {
                    Some(e) => Err(e),
                    None => Ok(p.offset),
                };
                out.insert((t.name.0.to_string(), p.partition_index), value);
            }
        }
    }
    for tp in partitions {
        out.entry(tp.clone()).or_insert_with(|| {
            Err(match leaders.get(tp) {
                Some(_) => "the broker's ListOffsets response does not mention it".to_owned(),
                None => "no such partition".to_owned(),
            })
        });
    }
    Ok(out)
}

// ---------------------------------------------------------------------------------------------
// delete

async fn delete(args: DeleteArgs) -> anyhow::Result<()> {
    let mut groups = Groups::connect(&args.bootstrap).await?;
    let mut failed = 0u64;
    for group in &args.groups {
        match delete_one(&mut groups, group).await {
            Ok(()) => println!("deleted group {group}"),
            Err(e) => {
                eprintln!("cannot delete group '{group}': {e:#}");
                failed += 1;
            }
        }
    }
    if failed > 0 {
        bail!(
            "{failed} of {} not deleted",
            plural(args.groups.len() as u64, "group")
        );
    }
    Ok(())
}

async fn delete_one(groups: &mut Groups, group: &str) -> anyhow::Result<()> {
    let request = DeleteGroupsRequest::default().with_groups_names(vec![group_id(group)]);
    let response = groups
        .call(group, request, |r| {
            r.results.first().map_or(0, |g| g.error_code)
        })
        .await?;
    let result = response
        .results
        .iter()
        .find(|r| *r.group_id.0 == *group)
        .or(response.results.first())
        .context("the broker's DeleteGroups response lists no group")?;
    match group_error(result.error_code, None) {
        Some(e) => Err(anyhow!(e)),
        None => Ok(()),
    }
}

// ---------------------------------------------------------------------------------------------
// output

fn dash_if_empty(s: String) -> String {
    if s.is_empty() { "-".to_owned() } else { s }
}

/// Rows under a header as left-aligned columns two spaces apart, each line starting with
/// `indent`. The last column is not padded, so lines carry no trailing spaces.
fn table(indent: &str, header: &[&str], rows: &[Vec<String>]) -> String {
    let mut widths: Vec<usize> = header.iter().map(|h| h.chars().count()).collect();
    for row in rows {
        for (w, cell) in widths.iter_mut().zip(row) {
            *w = (*w).max(cell.chars().count());
        }
    }
    let mut out = String::new();
    let header: Vec<String> = header.iter().map(|h| (*h).to_owned()).collect();
    for row in std::iter::once(&header).chain(rows) {
        out.push_str(indent);
        for (i, cell) in row.iter().enumerate() {
            if i + 1 == row.len() {
                out.push_str(cell);
            } else {
                let pad = widths[i] - cell.chars().count() + 2;
                out.push_str(cell);
                out.extend(std::iter::repeat_n(' ', pad));
            }
        }
        out.push('\n');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tables_align_without_trailing_spaces() {
        let rows = vec![
            vec!["a-long-name".to_owned(), "1".to_owned(), "x".to_owned()],
            vec!["b".to_owned(), "22".to_owned(), "-".to_owned()],
        ];
        assert_eq!(
            table("  ", &["GROUP", "N", "LAST"], &rows),
            "  GROUP        N   LAST\n  a-long-name  1   x\n  b            22  -\n"
        );
    }

    #[test]
    fn errors_say_what_to_do() {
        let e = group_error(ResponseError::NonEmptyGroup.code(), None).unwrap();
        assert!(e.starts_with("NON_EMPTY_GROUP"), "{e}");
        assert!(e.contains("stop its consumers"), "{e}");
        let e = group_error(ResponseError::GroupIdNotFound.code(), None).unwrap();
        assert!(e.starts_with("GROUP_ID_NOT_FOUND"), "{e}");
        assert!(e.contains("sluice group list"), "{e}");
        assert_eq!(group_error(0, None), None);
        assert_eq!(canonical_state("preparingrebalance"), "PreparingRebalance");
        assert_eq!(canonical_state("Weird"), "Weird");
    }
}
