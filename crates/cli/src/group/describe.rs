//! `sluice group describe GROUP`: the group's state and members (from its coordinator), and per
//! partition the committed offset (OffsetFetch), the log end (ListOffsets at each leader) and
//! the lag between them. A share group shows start offsets instead (see [`super::share`]).
//!
//! Which describe API: ConsumerGroupDescribe first when the coordinator has it, since only it
//! shows consumer (KIP-848) groups; Kafka answers GROUP_ID_NOT_FOUND there for any other group
//! ("is not a consumer group"). Then ShareGroupDescribe when the coordinator has it, which
//! answers GROUP_ID_NOT_FOUND for a group that is not a share group; then DescribeGroups, which
//! knows classic groups. A classic member's assignment is opaque bytes to the broker; Kafka
//! consumers fill it with an i16 version followed by a ConsumerProtocolAssignment, which
//! [`decode_assignment`] reads.

// The CLI's output is its job: printing to stdout is intended here.
#![allow(clippy::print_stdout)]

use std::collections::{BTreeMap, BTreeSet};

use anyhow::{Context, bail};
use bytes::{Buf, Bytes};
use serde_json::{Value, json};
use sluice_protocol::kafka_protocol::ResponseError;
use sluice_protocol::kafka_protocol::messages::{
    ApiKey, ConsumerGroupDescribeRequest, ConsumerProtocolAssignment, DescribeGroupsRequest,
};
use sluice_protocol::kafka_protocol::protocol::{Decodable, Message};

use super::{
    Coordinator, Groups, LATEST, Tp, committed_offsets, dash_if_empty, group_error, group_id,
    list_offsets, partition_leaders, share, sorted, table,
};
use crate::client::{BootstrapArgs, Cluster};

/// Show a group's state, members, committed (or start) offsets and lag.
///
/// Example:
///   sluice group describe orders-app
///
/// Lists the members with their partitions, then per partition the committed offset, the log
/// end offset, the lag between them and the member that owns it. Partitions that have a
/// committed offset but no owner are listed too; a partition that is owned but has nothing
/// committed shows '-' as COMMITTED and LAG. With --json, one object:
///   {"group":"orders-app","type":"classic","state":"Stable","protocol_type":"consumer",
///    "assignor":"range","coordinator":{"node_id":1,"address":"127.0.0.1:9092"},
///    "members":[{"member_id":"...","instance_id":null,"client_id":"...","host":"...",
///                "assignment":[{"topic":"orders","partitions":[0,1]}]}],
///    "offsets":[{"topic":"orders","partition":0,"committed_offset":40,"log_end_offset":42,
///                "lag":2,"member_id":"..."}],"total_lag":2}
///
/// A share group (KIP-932) also shows its group epoch; its members may share a partition, and
/// instead of committed offsets it has a START-OFFSET per partition: every record below it is
/// acknowledged. LAG counts the records from the start offset to the log end not yet
/// acknowledged; IN-FLIGHT the records handed out or waiting to be, between the start offset
/// and the next record never handed out; LOCKED those of them a consumer holds now; MEMBERS
/// how many members are assigned the partition. From a broker other than Sluice, IN-FLIGHT and
/// LOCKED are '-' and LAG also counts records already acknowledged above the start offset (an
/// upper bound). With --json:
///   {"group":"jobs-workers","type":"share","state":"Stable","protocol_type":"share",
///    "assignor":"simple","group_epoch":3,"coordinator":{...},"members":[...],
///    "offsets":[{"topic":"jobs","partition":0,"start_offset":40,"log_end_offset":42,
///                "lag":2,"in_flight":2,"acquired":1,"member_ids":["...","..."]}],
///    "total_lag":2}
#[derive(Debug, clap::Args)]
#[command(verbatim_doc_comment)]
pub(super) struct DescribeArgs {
    /// The group id
    group: String,
    /// Print one JSON object (see above)
    #[arg(long)]
    json: bool,
    #[command(flatten)]
    bootstrap: BootstrapArgs,
}

/// Which protocol a group's members speak.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Kind {
    Classic,
    Consumer,
    Share,
}

impl Kind {
    pub(super) fn name(self) -> &'static str {
        match self {
            Kind::Classic => "classic",
            Kind::Consumer => "consumer",
            Kind::Share => "share",
        }
    }
}

/// A group as its coordinator describes it.
#[derive(Debug)]
pub(super) struct Description {
    pub(super) kind: Kind,
    pub(super) state: String,
    pub(super) protocol_type: String,
    /// The partition assignor (classic: the protocol the members agreed on).
    pub(super) assignor: String,
    /// Share groups: the group epoch (shown; the other kinds leave it out).
    pub(super) group_epoch: Option<i32>,
    pub(super) members: Vec<Member>,
}

impl Description {
    /// Whether offsets may be committed from outside: Kafka's rule is that the group must be
    /// Empty (or Dead, being removed).
    pub(super) fn inactive(&self) -> bool {
        self.members.is_empty()
            && (self.state.eq_ignore_ascii_case("Empty") || self.state.eq_ignore_ascii_case("Dead"))
    }
}

#[derive(Debug)]
pub(super) struct Member {
    pub(super) member_id: String,
    pub(super) instance_id: Option<String>,
    pub(super) client_id: String,
    pub(super) host: String,
    /// Topic → partitions (sorted), or why the assignment cannot be shown.
    pub(super) assignment: Result<BTreeMap<String, Vec<i32>>, String>,
}

/// Describes `group`; `None` if it does not exist.
pub(super) async fn describe_group(
    groups: &mut Groups,
    group: &str,
) -> anyhow::Result<Option<Description>> {
    if groups
        .coordinator_supports(group, ApiKey::ConsumerGroupDescribe)
        .await?
    {
        let request = ConsumerGroupDescribeRequest::default().with_group_ids(vec![group_id(group)]);
        let response = groups
            .call(group, request, |r| {
                r.groups.first().map_or(0, |g| g.error_code)
            })
            .await?;
        let d = response
            .groups
            .into_iter()
            .next()
            .context("the broker's ConsumerGroupDescribe response lists no group")?;
        // GROUP_ID_NOT_FOUND here means "no consumer group by that name": it may be classic.
        if d.error_code != ResponseError::GroupIdNotFound.code() {
            if let Some(e) = group_error(d.error_code, d.error_message.as_ref()) {
                bail!("cannot describe group '{group}': {e}");
            }
            let members = d
                .members
                .into_iter()
                .map(|m| Member {
                    member_id: m.member_id.to_string(),
                    instance_id: m.instance_id.map(|s| s.to_string()),
                    client_id: m.client_id.to_string(),
                    host: m.client_host.to_string(),
                    assignment: Ok(m
                        .assignment
                        .topic_partitions
                        .into_iter()
                        .map(|tp| (tp.topic_name.0.to_string(), sorted(tp.partitions)))
                        .collect()),
                })
                .collect();
            return Ok(Some(Description {
                kind: Kind::Consumer,
                state: d.group_state.to_string(),
                protocol_type: "consumer".to_owned(),
                assignor: d.assignor_name.to_string(),
                group_epoch: None,
                members,
            }));
        }
    }
    if groups
        .coordinator_supports(group, ApiKey::ShareGroupDescribe)
        .await?
        && let Some(d) = share::describe_share_group(groups, group).await?
    {
        return Ok(Some(d));
    }
    let request = DescribeGroupsRequest::default().with_groups(vec![group_id(group)]);
    let response = groups
        .call(group, request, |r| {
            r.groups.first().map_or(0, |g| g.error_code)
        })
        .await?;
    let d = response
        .groups
        .into_iter()
        .next()
        .context("the broker's DescribeGroups response lists no group")?;
    // Before DescribeGroups v6, a group that does not exist is answered as state Dead.
    if d.error_code == ResponseError::GroupIdNotFound.code()
        || (d.error_code == 0 && d.group_state.eq_ignore_ascii_case("Dead"))
    {
        return Ok(None);
    }
    if let Some(e) = group_error(d.error_code, d.error_message.as_ref()) {
        bail!("cannot describe group '{group}': {e}");
    }
    let consumer_protocol = d.protocol_type.is_empty() || &*d.protocol_type == "consumer";
    let members = d
        .members
        .into_iter()
        .map(|m| Member {
            member_id: m.member_id.to_string(),
            instance_id: m.group_instance_id.map(|s| s.to_string()),
            client_id: m.client_id.to_string(),
            host: m.client_host.to_string(),
            assignment: if consumer_protocol {
                decode_assignment(&m.member_assignment)
            } else {
                Err(format!(
                    "{} assignment, {} bytes",
                    &*d.protocol_type,
                    m.member_assignment.len()
                ))
            },
        })
        .collect();
    Ok(Some(Description {
        kind: Kind::Classic,
        state: d.group_state.to_string(),
        protocol_type: d.protocol_type.to_string(),
        assignor: d.protocol_data.to_string(),
        group_epoch: None,
        members,
    }))
}

/// Reads a classic consumer's assignment: an i16 version, then ConsumerProtocolAssignment.
/// Empty bytes (a member still joining) are an empty assignment.
fn decode_assignment(bytes: &Bytes) -> Result<BTreeMap<String, Vec<i32>>, String> {
    let mut buf = bytes.clone();
    if buf.is_empty() {
        return Ok(BTreeMap::new());
    }
    if buf.len() < 2 {
        return Err(format!("assignment of {} byte, too short", buf.len()));
    }
    let version = buf.get_i16();
    if version < 0 {
        return Err(format!("assignment with version {version}"));
    }
    // Newer versions only add fields at the end, so reading them as the newest known one gets
    // the partitions right (Kafka's consumers read them the same way).
    let version = version.min(ConsumerProtocolAssignment::VERSIONS.max);
    let assignment = ConsumerProtocolAssignment::decode(&mut buf, version)
        .map_err(|e| format!("undecodable assignment: {e}"))?;
    let mut out: BTreeMap<String, Vec<i32>> = BTreeMap::new();
    for tp in assignment.assigned_partitions {
        out.entry(tp.topic.0.to_string())
            .or_default()
            .extend(tp.partitions);
    }
    Ok(out
        .into_iter()
        .map(|(topic, partitions)| (topic, sorted(partitions)))
        .collect())
}

/// One partition row of `group describe`.
#[derive(Debug, PartialEq, Eq)]
struct OffsetRow {
    topic: String,
    partition: i32,
    committed: Option<i64>,
    log_end: Option<i64>,
    member_id: Option<String>,
}

impl OffsetRow {
    fn lag(&self) -> Option<i64> {
        Some(self.log_end? - self.committed?)
    }
}

/// Every partition that is assigned or has a committed offset, with what is known about it.
fn offset_rows(
    members: &[Member],
    committed: &BTreeMap<Tp, i64>,
    log_end: &BTreeMap<Tp, Result<i64, String>>,
) -> Vec<OffsetRow> {
    let mut owner: BTreeMap<Tp, &str> = BTreeMap::new();
    for m in members {
        for (topic, partitions) in m.assignment.iter().flatten() {
            for &p in partitions {
                owner.insert((topic.clone(), p), &m.member_id);
            }
        }
    }
    let all: BTreeSet<&Tp> = owner.keys().chain(committed.keys()).collect();
    all.into_iter()
        .map(|tp| OffsetRow {
            topic: tp.0.clone(),
            partition: tp.1,
            committed: committed.get(tp).copied(),
            log_end: log_end.get(tp).and_then(|r| r.as_ref().ok()).copied(),
            member_id: owner.get(tp).map(|m| (*m).to_owned()),
        })
        .collect()
}

pub(super) async fn run(args: DescribeArgs) -> anyhow::Result<()> {
    let group = args.group.as_str();
    let mut groups = Groups::connect(&args.bootstrap).await?;
    let description = describe_group(&mut groups, group).await?;
    if let Some(d) = &description
        && d.kind == Kind::Share
    {
        return share::print_description(&mut groups, group, d, args.json).await;
    }
    let committed = committed_offsets(&mut groups, group).await?;
    let Some(d) = description else {
        let e = group_error(ResponseError::GroupIdNotFound.code(), None).expect("a non-zero code");
        bail!("cannot describe group '{group}': {e}");
    };
    let coordinator = groups.find_coordinator(group).await?;

    // Log end offsets of every partition that is assigned or committed.
    let mut wanted: BTreeSet<Tp> = committed.keys().cloned().collect();
    wanted.extend(assigned(&d.members));
    let (log_end, notes) = log_ends(&mut groups.cluster, &wanted).await?;
    let rows = offset_rows(&d.members, &committed, &log_end);
    let total_lag: i64 = rows.iter().filter_map(OffsetRow::lag).sum();

    if args.json {
        let doc = json!({
            "group": group,
            "type": d.kind.name(),
            "state": d.state,
            "protocol_type": d.protocol_type,
            "assignor": d.assignor,
            "coordinator": {"node_id": coordinator.node_id, "address": coordinator.addr},
            "members": d.members.iter().map(member_json).collect::<Vec<_>>(),
            "offsets": rows.iter().map(|r| json!({
                "topic": r.topic,
                "partition": r.partition,
                "committed_offset": r.committed,
                "log_end_offset": r.log_end,
                "lag": r.lag(),
                "member_id": r.member_id,
            })).collect::<Vec<_>>(),
            "total_lag": total_lag,
        });
        println!("{doc}");
    } else {
        print!(
            "{}",
            describe_text(group, &d, &coordinator, &rows, total_lag)
        );
    }
    for note in notes {
        eprintln!("note: {note}");
    }
    Ok(())
}

/// Every partition assigned to some member.
pub(super) fn assigned(members: &[Member]) -> BTreeSet<Tp> {
    let mut out = BTreeSet::new();
    for m in members {
        for (topic, partitions) in m.assignment.iter().flatten() {
            out.extend(partitions.iter().map(|&p| (topic.clone(), p)));
        }
    }
    out
}

/// The log end offset of each of `wanted` (ListOffsets at its leader), and notes on those that
/// cannot be looked up (an unknown topic, a leader's error).
pub(super) async fn log_ends(
    cluster: &mut Cluster,
    wanted: &BTreeSet<Tp>,
) -> anyhow::Result<(BTreeMap<Tp, Result<i64, String>>, Vec<String>)> {
    let topics: BTreeSet<String> = wanted.iter().map(|(t, _)| t.clone()).collect();
    let mut leaders = BTreeMap::new();
    let mut notes = Vec::new();
    for (topic, result) in partition_leaders(cluster, &topics).await? {
        match result {
            Ok(partitions) => {
                leaders.extend(partitions.into_iter().map(|(p, l)| ((topic.clone(), p), l)));
            }
            Err(e) => notes.push(format!("topic '{topic}' {e}")),
        }
    }
    let log_end = list_offsets(cluster, &leaders, wanted, LATEST).await?;
    for (tp, r) in &log_end {
        if let Err(e) = r
            && leaders.contains_key(tp)
        {
            notes.push(format!("log end of {}/{}: {e}", tp.0, tp.1));
        }
    }
    Ok((log_end, notes))
}

pub(super) fn member_json(m: &Member) -> Value {
    let mut v = json!({
        "member_id": m.member_id,
        "instance_id": m.instance_id,
        "client_id": m.client_id,
        "host": m.host,
    });
    match &m.assignment {
        Ok(a) => {
            v["assignment"] = a
                .iter()
                .map(|(t, ps)| json!({"topic": t, "partitions": ps}))
                .collect();
        }
        Err(e) => {
            v["assignment"] = Value::Null;
            v["assignment_error"] = e.clone().into();
        }
    }
    v
}

/// `orders:0,1,2 audit:0`, or `-` for nothing.
fn assignment_text(assignment: &Result<BTreeMap<String, Vec<i32>>, String>) -> String {
    match assignment {
        Err(e) => format!("({e})"),
        Ok(a) if a.is_empty() => "-".to_owned(),
        Ok(a) => a
            .iter()
            .map(|(t, ps)| {
                let ps: Vec<String> = ps.iter().map(i32::to_string).collect();
                format!("{t}:{}", ps.join(","))
            })
            .collect::<Vec<_>>()
            .join(" "),
    }
}

fn describe_text(
    group: &str,
    d: &Description,
    coordinator: &Coordinator,
    rows: &[OffsetRow],
    total_lag: i64,
) -> String {
    let mut out = summary_text(group, d, coordinator);
    if rows.is_empty() {
        out.push_str("offsets: none (no partition is assigned or committed)\n");
        return out;
    }
    out.push_str("offsets:\n");
    let dash = |v: Option<i64>| v.map_or_else(|| "-".to_owned(), |v| v.to_string());
    let offset_rows: Vec<Vec<String>> = rows
        .iter()
        .map(|r| {
            vec![
                r.topic.clone(),
                r.partition.to_string(),
                dash(r.committed),
                dash(r.log_end),
                dash(r.lag()),
                r.member_id.clone().unwrap_or_else(|| "-".to_owned()),
            ]
        })
        .collect();
    out.push_str(&table(
        "  ",
        &[
            "TOPIC",
            "PARTITION",
            "COMMITTED",
            "LOG-END",
            "LAG",
            "MEMBER-ID",
        ],
        &offset_rows,
    ));
    out.push_str(&format!("total lag: {total_lag}\n"));
    out
}

/// The lines every kind of group starts with: what it is, where, and its members.
pub(super) fn summary_text(group: &str, d: &Description, coordinator: &Coordinator) -> String {
    let mut out = String::new();
    out.push_str(&format!("group: {group}\n"));
    out.push_str(&format!("type: {}\n", d.kind.name()));
    out.push_str(&format!("state: {}\n", d.state));
    let protocol = dash_if_empty(d.protocol_type.clone());
    match d.assignor.as_str() {
        "" => out.push_str(&format!("protocol: {protocol}\n")),
        assignor => out.push_str(&format!("protocol: {protocol}, assignor {assignor}\n")),
    }
    if let Some(epoch) = d.group_epoch {
        out.push_str(&format!("group epoch: {epoch}\n"));
    }
    out.push_str(&format!(
        "coordinator: broker {} at {}\n",
        coordinator.node_id, coordinator.addr
    ));
    if d.members.is_empty() {
        out.push_str("members: none\n");
    } else {
        out.push_str(&format!("members: {}\n", d.members.len()));
        let with_instance = d.members.iter().any(|m| m.instance_id.is_some());
        let mut header = vec!["MEMBER-ID"];
        if with_instance {
            header.push("INSTANCE-ID");
        }
        header.extend(["CLIENT-ID", "HOST", "PARTITIONS"]);
        let member_rows: Vec<Vec<String>> = d
            .members
            .iter()
            .map(|m| {
                let mut row = vec![m.member_id.clone()];
                if with_instance {
                    row.push(m.instance_id.clone().unwrap_or_else(|| "-".to_owned()));
                }
                row.extend([
                    dash_if_empty(m.client_id.clone()),
                    dash_if_empty(m.host.clone()),
                    assignment_text(&m.assignment),
                ]);
                row
            })
            .collect();
        out.push_str(&table("  ", &header, &member_rows));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::{BufMut, BytesMut};
    use sluice_protocol::kafka_protocol::messages::TopicName;
    use sluice_protocol::kafka_protocol::messages::consumer_protocol_assignment::TopicPartition;
    use sluice_protocol::kafka_protocol::protocol::Encodable;

    use crate::group::str_bytes;

    fn encoded_assignment(version: i16, partitions: &[(&str, &[i32])]) -> Bytes {
        let assignment = ConsumerProtocolAssignment::default().with_assigned_partitions(
            partitions
                .iter()
                .map(|(t, ps)| {
                    TopicPartition::default()
                        .with_topic(TopicName(str_bytes(t)))
                        .with_partitions(ps.to_vec())
                })
                .collect(),
        );
        let mut buf = BytesMut::new();
        buf.put_i16(version);
        assignment.encode(&mut buf, version.min(3)).unwrap();
        buf.freeze()
    }

    #[test]
    fn classic_assignments_decode_with_their_version_prefix() {
        let bytes = encoded_assignment(0, &[("orders", &[2, 0]), ("audit", &[0])]);
        let decoded = decode_assignment(&bytes).unwrap();
        assert_eq!(
            decoded.into_iter().collect::<Vec<_>>(),
            vec![
                ("audit".to_owned(), vec![0]),
                ("orders".to_owned(), vec![0, 2])
            ]
        );
        // A version newer than the codec knows reads as the newest one.
        let bytes = encoded_assignment(7, &[("x", &[1])]);
        assert_eq!(decode_assignment(&bytes).unwrap()["x"], vec![1]);
        assert!(decode_assignment(&Bytes::new()).unwrap().is_empty());
        assert!(decode_assignment(&Bytes::from_static(&[0])).is_err());
        assert!(decode_assignment(&Bytes::from_static(&[0, 1, 0, 0, 0, 9])).is_err());
        let text = assignment_text(&decode_assignment(&encoded_assignment(
            1,
            &[("orders", &[0, 1]), ("audit", &[0])],
        )));
        assert_eq!(text, "audit:0 orders:0,1");
    }

    #[test]
    fn rows_cover_owned_and_committed_partitions() {
        let member = Member {
            member_id: "m1".into(),
            instance_id: None,
            client_id: "c".into(),
            host: "/h".into(),
            assignment: Ok([("t".to_owned(), vec![0, 1])].into()),
        };
        let committed: BTreeMap<Tp, i64> = [(("t".into(), 1), 4), (("u".into(), 0), 9)].into();
        let log_end: BTreeMap<Tp, Result<i64, String>> = [
            (("t".into(), 0), Ok(3)),
            (("t".into(), 1), Ok(10)),
            (("u".into(), 0), Err("gone".into())),
        ]
        .into();
        let rows = offset_rows(&[member], &committed, &log_end);
        let summary: Vec<_> = rows
            .iter()
            .map(|r| {
                (
                    r.topic.as_str(),
                    r.partition,
                    r.committed,
                    r.log_end,
                    r.lag(),
                    r.member_id.as_deref(),
                )
            })
            .collect();
        assert_eq!(
            summary,
            vec![
                ("t", 0, None, Some(3), None, Some("m1")),
                ("t", 1, Some(4), Some(10), Some(6), Some("m1")),
                ("u", 0, Some(9), None, None, None),
            ]
        );
    }
}
