//! Share groups (KIP-932) in `sluice group describe` and `sluice group reset-offsets`.
//!
//! A share group's members do not own partitions: several members may read one partition, and
//! each record is acquired, acknowledged or released on its own. What the group has consumed of
//! a partition is its *start offset*: every record below it is acknowledged (or archived), while
//! records above it may be acknowledged too (out of order) or still in flight. So:
//!
//! - `describe`: ShareGroupDescribe ([`describe_share_group`]: state, group epoch, members and
//!   their assignments), DescribeShareGroupOffsets for every partition the group has a start
//!   offset (`topics: null`), ListOffsets latest for the log end. A Sluice broker adds to each
//!   partition of that answer the exact lag, the records in flight and the locked ones
//!   (tagged fields, see `sluice_protocol::share_offsets`): LAG, IN-FLIGHT and LOCKED. From a
//!   broker that does not, LAG is log end − start offset (it then also counts records
//!   acknowledged above the start offset) and the other two are `-`.
//! - `reset-offsets`: `reset.rs` plans new start offsets exactly as it plans committed offsets
//!   (ListOffsets for the earliest offset and the log end), and [`alter_start_offsets`] sets them
//!   with AlterShareGroupOffsets, which a broker accepts only while the group has no members
//!   (NON_EMPTY_GROUP otherwise).
//!
//! `list` and `delete` need nothing of their own: ListGroups v5 lists share groups with type
//! `share`, and DeleteGroups deletes an empty one.

// The CLI's output is its job: printing to stdout is intended here.
#![allow(clippy::print_stdout)]

use std::collections::{BTreeMap, BTreeSet};

use anyhow::{Context, bail};
use serde_json::json;
use sluice_protocol::kafka_protocol::ResponseError;
use sluice_protocol::kafka_protocol::messages::alter_share_group_offsets_request::{
    AlterShareGroupOffsetsRequestPartition, AlterShareGroupOffsetsRequestTopic,
};
use sluice_protocol::kafka_protocol::messages::describe_share_group_offsets_request::DescribeShareGroupOffsetsRequestGroup;
use sluice_protocol::kafka_protocol::messages::{
    AlterShareGroupOffsetsRequest, DescribeShareGroupOffsetsRequest, ShareGroupDescribeRequest,
    TopicName,
};

use sluice_protocol::share_offsets::{self, ShareOffsetDetail};

use super::describe::{Description, Kind, Member, assigned, log_ends, member_json, summary_text};
use super::{Coordinator, Groups, Tp, group_error, group_id, sorted, str_bytes, table};
use crate::client::plural;

/// ShareGroupDescribe of `group`: `None` when it is not a share group. The coordinator says so
/// with GROUP_ID_NOT_FOUND (also its answer when no group has that name at all); a broker
/// that has the API but share groups turned off may answer UNSUPPORTED_VERSION, which means
/// the same here.
pub(super) async fn describe_share_group(
    groups: &mut Groups,
    group: &str,
) -> anyhow::Result<Option<Description>> {
    let request = ShareGroupDescribeRequest::default().with_group_ids(vec![group_id(group)]);
    let response = groups
        .call(group, request, |r| {
            r.groups.first().map_or(0, |g| g.error_code)
        })
        .await?;
    let d = response
        .groups
        .into_iter()
        .next()
        .context("the broker's ShareGroupDescribe response lists no group")?;
    if d.error_code == ResponseError::GroupIdNotFound.code()
        || d.error_code == ResponseError::UnsupportedVersion.code()
    {
        return Ok(None);
    }
    if let Some(e) = group_error(d.error_code, d.error_message.as_ref()) {
        bail!("cannot describe share group '{group}': {e}");
    }
    let members = d
        .members
        .into_iter()
        .map(|m| {
            let mut assignment: BTreeMap<String, Vec<i32>> = BTreeMap::new();
            for tp in m.assignment.topic_partitions {
                assignment
                    .entry(tp.topic_name.0.to_string())
                    .or_default()
                    .extend(tp.partitions);
            }
            Member {
                member_id: m.member_id.to_string(),
                instance_id: None,
                client_id: m.client_id.to_string(),
                host: m.client_host.to_string(),
                assignment: Ok(assignment
                    .into_iter()
                    .map(|(topic, partitions)| (topic, sorted(partitions)))
                    .collect()),
            }
        })
        .collect();
    Ok(Some(Description {
        kind: Kind::Share,
        state: d.group_state.to_string(),
        protocol_type: "share".to_owned(),
        assignor: d.assignor_name.to_string(),
        group_epoch: Some(d.group_epoch),
        members,
    }))
}

/// The group's start offset of every partition it has one for (DescribeShareGroupOffsets of
/// all topics). A partition the group has not started reading (start offset -1) is left out,
/// and so is everything of a group that does not exist.
pub(super) async fn start_offsets(
    groups: &mut Groups,
    group: &str,
) -> anyhow::Result<BTreeMap<Tp, i64>> {
    Ok(share_offsets(groups, group)
        .await?
        .into_iter()
        .map(|(tp, (start, _))| (tp, start))
        .collect())
}

/// As [`start_offsets`], with what a Sluice broker adds to each: the exact lag and the
/// records in flight (`None` from a broker that does not say).
async fn share_offsets(
    groups: &mut Groups,
    group: &str,
) -> anyhow::Result<BTreeMap<Tp, (i64, Option<ShareOffsetDetail>)>> {
    let request = DescribeShareGroupOffsetsRequest::default().with_groups(vec![
        DescribeShareGroupOffsetsRequestGroup::default()
            .with_group_id(group_id(group))
            .with_topics(None),
    ]);
    let response = groups
        .call(group, request, |r| {
            r.groups.first().map_or(0, |g| g.error_code)
        })
        .await?;
    let g = response
        .groups
        .into_iter()
        .next()
        .context("the broker's DescribeShareGroupOffsets response lists no group")?;
    if g.error_code == ResponseError::GroupIdNotFound.code() {
        return Ok(BTreeMap::new());
    }
    if let Some(e) = group_error(g.error_code, g.error_message.as_ref()) {
        bail!("cannot read the start offsets of share group '{group}': {e}");
    }
    let mut offsets = BTreeMap::new();
    let mut errors = Vec::new();
    for t in &g.topics {
        for p in &t.partitions {
            if let Some(e) = group_error(p.error_code, p.error_message.as_ref()) {
                errors.push(format!("{}/{}: {e}", &*t.topic_name.0, p.partition_index));
            } else if p.start_offset >= 0 {
                offsets.insert(
                    (t.topic_name.0.to_string(), p.partition_index),
                    (p.start_offset, share_offsets::detail(p)),
                );
            }
        }
    }
    if let Some(first) = errors.first() {
        bail!(
            "cannot read the start offsets of share group '{group}' for {}: {first}",
            plural(errors.len() as u64, "partition")
        );
    }
    Ok(offsets)
}

/// Sets the group's start offsets (AlterShareGroupOffsets). The broker refuses while the group
/// has members; `reset.rs` checks that first, so NON_EMPTY_GROUP here means a member joined in
/// between.
pub(super) async fn alter_start_offsets(
    groups: &mut Groups,
    group: &str,
    new_offsets: &BTreeMap<Tp, i64>,
) -> anyhow::Result<()> {
    let mut by_topic: BTreeMap<&str, Vec<AlterShareGroupOffsetsRequestPartition>> = BTreeMap::new();
    for ((topic, partition), &offset) in new_offsets {
        by_topic.entry(topic).or_default().push(
            AlterShareGroupOffsetsRequestPartition::default()
                .with_partition_index(*partition)
                .with_start_offset(offset),
        );
    }
    let request = AlterShareGroupOffsetsRequest::default()
        .with_group_id(group_id(group))
        .with_topics(
            by_topic
                .into_iter()
                .map(|(topic, partitions)| {
                    AlterShareGroupOffsetsRequestTopic::default()
                        .with_topic_name(TopicName(str_bytes(topic)))
                        .with_partitions(partitions)
                })
                .collect(),
        );
    // The group's error may come at the top or on every partition: look at both.
    let first_code =
        |r: &sluice_protocol::kafka_protocol::messages::AlterShareGroupOffsetsResponse| {
            if r.error_code != 0 {
                return r.error_code;
            }
            r.responses
                .iter()
                .flat_map(|t| &t.partitions)
                .map(|p| p.error_code)
                .find(|&c| c != 0)
                .unwrap_or(0)
        };
    let response = groups.call(group, request, first_code).await?;
    if let Some(e) = group_error(response.error_code, response.error_message.as_ref()) {
        bail!("the broker refused the new start offsets of share group '{group}': {e}");
    }
    let mut failed = Vec::new();
    for t in &response.responses {
        for p in &t.partitions {
            if let Some(e) = group_error(p.error_code, p.error_message.as_ref()) {
                failed.push((format!("{}/{}", &*t.topic_name.0, p.partition_index), e));
            }
        }
    }
    if let Some((tp, e)) = failed.first() {
        bail!(
            "the broker refused the new start offsets of share group '{group}' for {} \
             (first: {tp}): {e}",
            plural(failed.len() as u64, "partition")
        );
    }
    Ok(())
}

/// One partition row of a share group's description.
#[derive(Debug, PartialEq, Eq)]
struct ShareRow {
    topic: String,
    partition: i32,
    start: Option<i64>,
    log_end: Option<i64>,
    /// From a Sluice broker: the exact lag and the records in flight.
    detail: Option<ShareOffsetDetail>,
    /// The members assigned the partition (several may read one partition).
    member_ids: Vec<String>,
}

impl ShareRow {
    /// Records at or above the start offset not yet acknowledged, as the broker counts them;
    /// from a broker that does not say, everything from the start offset to the log end (an
    /// upper bound: records acknowledged above the start offset are counted too).
    fn lag(&self) -> Option<i64> {
        if let Some(d) = self.detail {
            return Some(d.lag.max(0));
        }
        Some((self.log_end? - self.start?).max(0))
    }

    fn in_flight(&self) -> Option<u32> {
        self.detail.map(|d| d.in_flight)
    }

    fn acquired(&self) -> Option<u32> {
        self.detail.map(|d| d.acquired)
    }
}

/// Every partition that is assigned or has a start offset, with what is known about it.
fn share_rows(
    members: &[Member],
    start: &BTreeMap<Tp, (i64, Option<ShareOffsetDetail>)>,
    log_end: &BTreeMap<Tp, Result<i64, String>>,
) -> Vec<ShareRow> {
    let mut readers: BTreeMap<Tp, Vec<String>> = BTreeMap::new();
    for m in members {
        for (topic, partitions) in m.assignment.iter().flatten() {
            for &p in partitions {
                readers
                    .entry((topic.clone(), p))
                    .or_default()
                    .push(m.member_id.clone());
            }
        }
    }
    let all: BTreeSet<&Tp> = readers.keys().chain(start.keys()).collect();
    all.into_iter()
        .map(|tp| ShareRow {
            topic: tp.0.clone(),
            partition: tp.1,
            start: start.get(tp).map(|&(s, _)| s),
            detail: start.get(tp).and_then(|&(_, d)| d),
            log_end: log_end.get(tp).and_then(|r| r.as_ref().ok()).copied(),
            member_ids: readers.get(tp).cloned().unwrap_or_default(),
        })
        .collect()
}

/// `sluice group describe` of a share group `d`: its start offsets, log ends and lag.
pub(super) async fn print_description(
    groups: &mut Groups,
    group: &str,
    d: &Description,
    as_json: bool,
) -> anyhow::Result<()> {
    let start = share_offsets(groups, group).await?;
    let coordinator = groups.find_coordinator(group).await?;
    let mut wanted: BTreeSet<Tp> = start.keys().cloned().collect();
    wanted.extend(assigned(&d.members));
    let (log_end, notes) = log_ends(&mut groups.cluster, &wanted).await?;
    let rows = share_rows(&d.members, &start, &log_end);
    let total_lag: i64 = rows.iter().filter_map(ShareRow::lag).sum();
    if as_json {
        let doc = json!({
            "group": group,
            "type": d.kind.name(),
            "state": d.state,
            "protocol_type": d.protocol_type,
            "assignor": d.assignor,
            "group_epoch": d.group_epoch,
            "coordinator": {"node_id": coordinator.node_id, "address": coordinator.addr},
            "members": d.members.iter().map(member_json).collect::<Vec<_>>(),
            "offsets": rows.iter().map(|r| json!({
                "topic": r.topic,
                "partition": r.partition,
                "start_offset": r.start,
                "log_end_offset": r.log_end,
                "lag": r.lag(),
                "in_flight": r.in_flight(),
                "acquired": r.acquired(),
                "member_ids": r.member_ids,
            })).collect::<Vec<_>>(),
            "total_lag": total_lag,
        });
        println!("{doc}");
    } else {
        print!("{}", share_text(group, d, &coordinator, &rows, total_lag));
    }
    for note in notes {
        eprintln!("note: {note}");
    }
    Ok(())
}

fn share_text(
    group: &str,
    d: &Description,
    coordinator: &Coordinator,
    rows: &[ShareRow],
    total_lag: i64,
) -> String {
    let mut out = summary_text(group, d, coordinator);
    if rows.is_empty() {
        out.push_str("offsets: none (no partition is assigned or has a start offset)\n");
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
                dash(r.start),
                dash(r.log_end),
                dash(r.lag()),
                dash(r.in_flight().map(i64::from)),
                dash(r.acquired().map(i64::from)),
                r.member_ids.len().to_string(),
            ]
        })
        .collect();
    out.push_str(&table(
        "  ",
        &[
            "TOPIC",
            "PARTITION",
            "START-OFFSET",
            "LOG-END",
            "LAG",
            "IN-FLIGHT",
            "LOCKED",
            "MEMBERS",
        ],
        &offset_rows,
    ));
    out.push_str(&format!("total lag: {total_lag}\n"));
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn member(id: &str, partitions: &[(&str, &[i32])]) -> Member {
        Member {
            member_id: id.to_owned(),
            instance_id: None,
            client_id: "c".to_owned(),
            host: "/127.0.0.1".to_owned(),
            assignment: Ok(partitions
                .iter()
                .map(|(t, ps)| ((*t).to_owned(), ps.to_vec()))
                .collect()),
        }
    }

    #[test]
    fn rows_list_every_reader_of_a_shared_partition() {
        let members = [
            member("a", &[("jobs", &[0])]),
            member("b", &[("jobs", &[0, 1])]),
        ];
        let start: BTreeMap<Tp, (i64, Option<ShareOffsetDetail>)> = [
            (("jobs".into(), 0), (4, None)),
            (("old".into(), 0), (7, None)),
        ]
        .into();
        let log_end: BTreeMap<Tp, Result<i64, String>> = [
            (("jobs".into(), 0), Ok(10)),
            (("jobs".into(), 1), Ok(3)),
            (("old".into(), 0), Err("gone".into())),
        ]
        .into();
        let rows = share_rows(&members, &start, &log_end);
        let summary: Vec<_> = rows
            .iter()
            .map(|r| {
                (
                    r.topic.as_str(),
                    r.partition,
                    r.start,
                    r.log_end,
                    r.lag(),
                    r.member_ids.join(","),
                )
            })
            .collect();
        assert_eq!(
            summary,
            vec![
                ("jobs", 0, Some(4), Some(10), Some(6), "a,b".to_owned()),
                ("jobs", 1, None, Some(3), None, "b".to_owned()),
                ("old", 0, Some(7), None, None, String::new()),
            ]
        );
    }

    #[test]
    fn text_shows_start_offsets_and_how_many_members_read_each_partition() {
        let d = Description {
            kind: Kind::Share,
            state: "Stable".to_owned(),
            protocol_type: "share".to_owned(),
            assignor: "simple".to_owned(),
            group_epoch: Some(3),
            members: vec![
                member("a", &[("jobs", &[0])]),
                member("b", &[("jobs", &[0])]),
            ],
        };
        let rows = vec![ShareRow {
            topic: "jobs".to_owned(),
            partition: 0,
            start: Some(4),
            log_end: Some(10),
            detail: Some(ShareOffsetDetail {
                lag: 5,
                in_flight: 3,
                acquired: 2,
            }),
            member_ids: vec!["a".to_owned(), "b".to_owned()],
        }];
        let coordinator = Coordinator {
            node_id: 1,
            addr: "127.0.0.1:9092".to_owned(),
        };
        let text = share_text("workers", &d, &coordinator, &rows, 5);
        assert_eq!(
            text,
            "group: workers\n\
             type: share\n\
             state: Stable\n\
             protocol: share, assignor simple\n\
             group epoch: 3\n\
             coordinator: broker 1 at 127.0.0.1:9092\n\
             members: 2\n\
             \x20 MEMBER-ID  CLIENT-ID  HOST        PARTITIONS\n\
             \x20 a          c          /127.0.0.1  jobs:0\n\
             \x20 b          c          /127.0.0.1  jobs:0\n\
             offsets:\n\
             \x20 TOPIC  PARTITION  START-OFFSET  LOG-END  LAG  IN-FLIGHT  LOCKED  MEMBERS\n\
             \x20 jobs   0          4             10       5    3          2       2\n\
             total lag: 5\n"
        );
        // From a broker that does not say: the log end minus the start offset, and a start
        // offset past the log end (the log was truncated) is no negative lag.
        let row = rows.into_iter().next().unwrap();
        let plain = ShareRow {
            detail: None,
            ..row
        };
        assert_eq!((plain.lag(), plain.in_flight()), (Some(6), None));
        let ahead = ShareRow {
            start: Some(12),
            ..plain
        };
        assert_eq!(ahead.lag(), Some(0));
    }
}
