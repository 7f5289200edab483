//! `sluice group reset-offsets GROUP`: move a group's committed offsets, the way
//! kafka-consumer-groups.sh does.
//!
//! Flow: describe the group (an active group is refused for `--execute`) → OffsetFetch for the
//! current offsets → Metadata for the partitions to reset → ListOffsets for earliest and log end
//! (and by time for `--to-datetime`) → [`new_offset`] per partition → print the plan, and with
//! `--execute` commit it first. The commit uses generation -1 and an empty member id, which a
//! broker accepts only while the group has no members: a live consumer would overwrite the
//! reset at its next commit anyway. New offsets are clamped into [earliest, log end].
//!
//! A share group (KIP-932) has start offsets instead of committed offsets: the same plan is
//! made from DescribeShareGroupOffsets and set with AlterShareGroupOffsets ([`super::share`]),
//! which Kafka also allows only while the group has no members.

// The CLI's output is its job: printing to stdout is intended here.
#![allow(clippy::print_stdout)]

use std::collections::{BTreeMap, BTreeSet};

use anyhow::{Context, anyhow, bail};
use clap::ArgGroup;
use serde_json::json;
use sluice_protocol::kafka_protocol::messages::offset_commit_request::{
    OffsetCommitRequestPartition, OffsetCommitRequestTopic,
};
use sluice_protocol::kafka_protocol::messages::{OffsetCommitRequest, TopicName};
use sluice_protocol::kafka_protocol::protocol::StrBytes;

use super::describe::{Kind, describe_group};
use super::{
    EARLIEST, Groups, LATEST, Tp, committed_offsets, group_error, group_id, list_offsets,
    partition_leaders, share, sorted, str_bytes, table,
};
use crate::client::{BootstrapArgs, Cluster, plural};

/// Move a group's committed or start offsets: back to replay records, forward to skip them.
///
/// Examples:
///   sluice group reset-offsets orders-app --topic orders --to-earliest
///   sluice group reset-offsets orders-app --topic orders --to-datetime 2024-05-01T08:00:00Z
///   sluice group reset-offsets orders-app --topic orders:0,2 --shift-by -100 --execute
///   sluice group reset-offsets orders-app --all-topics --to-latest --execute
///
/// Without --execute nothing changes: the plan is printed (TOPIC, PARTITION, CURRENT, NEW).
/// --execute commits it, which the broker allows only while the group has no members: stop
/// its consumers first (`sluice group describe` shows state Empty once they are gone). A group
/// that does not exist yet is created with these offsets.
///
/// Every new offset is kept within the partition's records: below the earliest offset it
/// becomes the earliest, past the log end it becomes the log end. --to-datetime picks the
/// first record at or after the time (the log end if there is none). --shift-by needs a
/// committed offset to start from. With --json, each partition is one line:
///   {"topic":"orders","partition":0,"current_offset":40,"new_offset":0}
///
/// For a share group (`sluice group list` shows type share) the same options move its start
/// offsets (AlterShareGroupOffsets): the records from the new start offset on are delivered
/// again, those below it never. This too is refused while the group has members: stop its
/// share consumers first. CURRENT is the start offset; --all-topics takes every topic the
/// group has a start offset for.
///   sluice group reset-offsets jobs-workers --topic jobs --to-earliest --execute
#[derive(Debug, clap::Args)]
#[command(verbatim_doc_comment)]
#[command(group(ArgGroup::new("target").required(true)
    .args(["to_earliest", "to_latest", "to_offset", "to_datetime", "shift_by"])))]
#[command(group(ArgGroup::new("scope").required(true).args(["topics", "all_topics"])))]
pub(super) struct ResetArgs {
    /// The group id
    group: String,
    /// Topic to reset, optionally only some partitions: orders, orders:0,2 or orders:0-3;
    /// repeat for several topics
    #[arg(long = "topic", value_name = "TOPIC[:PARTITIONS]", value_parser = parse_topic_spec)]
    topics: Vec<TopicSpec>,
    /// Reset every topic the group has committed offsets (a share group: start offsets) for
    #[arg(long, conflicts_with = "topics")]
    all_topics: bool,
    /// To the earliest offset still in the log
    #[arg(long)]
    to_earliest: bool,
    /// To the log end: skip everything there is now
    #[arg(long)]
    to_latest: bool,
    /// To this offset
    #[arg(long, value_name = "OFFSET", value_parser = clap::value_parser!(i64).range(0..))]
    to_offset: Option<i64>,
    /// To the first record at or after TIME: RFC 3339 (2024-05-01T08:00:00Z,
    /// 2024-05-01T10:00:00.5+02:00) or milliseconds since the epoch
    #[arg(long, value_name = "TIME", value_parser = parse_datetime)]
    to_datetime: Option<i64>,
    /// Move the committed offset by N (negative: back)
    #[arg(long, value_name = "N", allow_negative_numbers = true)]
    shift_by: Option<i64>,
    /// Only print the plan (the default)
    #[arg(long, conflicts_with = "execute")]
    dry_run: bool,
    /// Commit the new offsets (a share group: set the new start offsets)
    #[arg(long)]
    execute: bool,
    /// Print one JSON object per partition
    #[arg(long)]
    json: bool,
    #[command(flatten)]
    bootstrap: BootstrapArgs,
}

/// `--topic TOPIC[:PARTITIONS]`.
#[derive(Debug, Clone, PartialEq, Eq)]
struct TopicSpec {
    topic: String,
    /// Sorted; `None`: every partition of the topic.
    partitions: Option<Vec<i32>>,
}

fn parse_topic_spec(s: &str) -> Result<TopicSpec, String> {
    let (topic, list) = match s.split_once(':') {
        Some((topic, list)) => (topic, Some(list)),
        None => (s, None),
    };
    if topic.is_empty() {
        return Err(format!(
            "'{s}' names no topic (expected TOPIC or TOPIC:0,1,2)"
        ));
    }
    let Some(list) = list else {
        return Ok(TopicSpec {
            topic: topic.to_owned(),
            partitions: None,
        });
    };
    let bad = || format!("'{list}' is not a partition list like 0,1,2 or 0-3");
    let number = |n: &str| {
        n.trim()
            .parse::<u32>()
            .ok()
            .and_then(|n| i32::try_from(n).ok())
    };
    let mut partitions = Vec::new();
    for item in list.split(',') {
        match item.split_once('-') {
            Some((a, b)) => {
                let (a, b) = (number(a).ok_or_else(bad)?, number(b).ok_or_else(bad)?);
                if a > b || b - a > 100_000 {
                    return Err(bad());
                }
                partitions.extend(a..=b);
            }
            None => partitions.push(number(item).ok_or_else(bad)?),
        }
    }
    Ok(TopicSpec {
        topic: topic.to_owned(),
        partitions: Some(sorted(partitions)),
    })
}

/// `--to-datetime`: RFC 3339 (`2024-05-01T08:00:00Z`, `2024-05-01T10:00:00.250+02:00`) or
/// milliseconds since the epoch; returns milliseconds since the epoch.
fn parse_datetime(s: &str) -> Result<i64, String> {
    let s = s.trim();
    let expected = "expected RFC 3339 like 2024-05-01T08:00:00Z or 2024-05-01T10:00:00+02:00, \
                    or milliseconds since the epoch";
    if !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit()) {
        return s
            .parse::<i64>()
            .map_err(|e| format!("'{s}' is too large ({e}; {expected})"));
    }
    let bad = || format!("'{s}' is not a time ({expected})");
    let b = s.as_bytes();
    let digits = |range: std::ops::Range<usize>| -> Result<i64, String> {
        let part = b.get(range).ok_or_else(bad)?;
        if part.is_empty() || !part.iter().all(u8::is_ascii_digit) {
            return Err(bad());
        }
        Ok(part.iter().fold(0, |n, d| n * 10 + i64::from(d - b'0')))
    };
    let at = |i: usize, allowed: &[u8]| b.get(i).is_some_and(|c| allowed.contains(c));
    if !(at(4, b"-") && at(7, b"-") && at(10, b"Tt ") && at(13, b":") && at(16, b":")) {
        return Err(bad());
    }
    let (year, month, day) = (digits(0..4)?, digits(5..7)?, digits(8..10)?);
    let (hour, minute, second) = (digits(11..13)?, digits(14..16)?, digits(17..19)?);
    let mut i = 19;
    let mut millis = 0;
    if at(i, b".") {
        let start = i + 1;
        i = start;
        while at(i, b"0123456789") {
            i += 1;
        }
        if i == start {
            return Err(bad());
        }
        // Milliseconds: the first three digits, padded.
        let frac = &s[start..i];
        millis = format!("{:0<3}", &frac[..frac.len().min(3)])
            .parse::<i64>()
            .map_err(|e| format!("{} ({e})", bad()))?;
    }
    let offset_minutes = match b.get(i) {
        Some(b'Z' | b'z') if i + 1 == b.len() => 0,
        Some(&sign @ (b'+' | b'-')) if i + 6 == b.len() && at(i + 3, b":") => {
            let minutes = digits(i + 1..i + 3)? * 60 + digits(i + 4..i + 6)?;
            if sign == b'-' { -minutes } else { minutes }
        }
        _ => {
            return Err(format!(
                "'{s}' needs a time zone: end it with Z (UTC) or an offset like +02:00"
            ));
        }
    };
    let days_in_month = match month {
        1 | 3 | 5 | 7 | 8 | 10 | 12 => 31,
        4 | 6 | 9 | 11 => 30,
        2 if year % 4 == 0 && (year % 100 != 0 || year % 400 == 0) => 29,
        2 => 28,
        _ => return Err(bad()),
    };
    if !(1..=days_in_month).contains(&day) || hour > 23 || minute > 59 || second > 60 {
        return Err(bad());
    }
    let seconds = days_from_civil(year, month, day) * 86_400 + hour * 3600 + minute * 60 + second
        - offset_minutes * 60;
    let ms = seconds * 1000 + millis;
    if ms < 0 {
        return Err(format!("'{s}' is before 1970"));
    }
    Ok(ms)
}

/// Days since 1970-01-01 of a proleptic Gregorian date. Years are counted from March, so the
/// leap day is the last day of its year and every month's start is a linear function of it.
fn days_from_civil(year: i64, month: i64, day: i64) -> i64 {
    let year = if month <= 2 { year - 1 } else { year };
    let era = year.div_euclid(400);
    let year_of_era = year - era * 400; // 0..=399
    let month_from_march = (month + 9) % 12; // March = 0 ... February = 11
    let day_of_year = (153 * month_from_march + 2) / 5 + day - 1;
    let day_of_era = year_of_era * 365 + year_of_era / 4 - year_of_era / 100 + day_of_year;
    era * 146_097 + day_of_era - 719_468 // 719 468 days from 0000-03-01 to 1970-01-01
}

/// Where `--to-*` / `--shift-by` sends the committed offsets.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum ResetTo {
    Earliest,
    Latest,
    Offset(i64),
    Timestamp(i64),
    ShiftBy(i64),
}

impl ResetArgs {
    fn reset_to(&self) -> ResetTo {
        match (self.to_offset, self.to_datetime, self.shift_by) {
            (Some(o), _, _) => ResetTo::Offset(o),
            (_, Some(t), _) => ResetTo::Timestamp(t),
            (_, _, Some(n)) => ResetTo::ShiftBy(n),
            _ if self.to_earliest => ResetTo::Earliest,
            _ => ResetTo::Latest,
        }
    }
}

/// What one partition's log holds, for planning.
#[derive(Debug, Clone, Copy)]
struct PartitionRange {
    earliest: i64,
    /// The log end: the offset the next record gets.
    latest: i64,
    /// With `--to-datetime`: the first offset at or after the time, -1 if there is none.
    at_time: Option<i64>,
}

/// The new offset for one partition, within [earliest, log end]; `None` when `--shift-by` has
/// no committed offset to shift.
fn new_offset(to: ResetTo, current: Option<i64>, range: PartitionRange) -> Option<i64> {
    let wanted = match to {
        ResetTo::Earliest => range.earliest,
        ResetTo::Latest => range.latest,
        ResetTo::Offset(o) => o,
        ResetTo::Timestamp(_) => match range.at_time {
            Some(o) if o >= 0 => o,
            _ => range.latest,
        },
        ResetTo::ShiftBy(n) => current?.saturating_add(n),
    };
    Some(wanted.min(range.latest).max(range.earliest))
}

/// One line of the plan.
#[derive(Debug, PartialEq, Eq)]
struct PlanRow {
    topic: String,
    partition: i32,
    current: Option<i64>,
    /// `None`: `--shift-by` without a committed offset (refused before anything is committed).
    new: Option<i64>,
}

/// Which offsets a reset moves: a consumer or classic group's committed offsets, or a share
/// group's start offsets. Only the words and the final request differ.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Offsets {
    Committed,
    ShareStart,
}

impl Offsets {
    /// "committed offset" / "start offset".
    fn noun(self) -> &'static str {
        match self {
            Offsets::Committed => "committed offset",
            Offsets::ShareStart => "start offset",
        }
    }

    /// "group" / "share group".
    fn group(self) -> &'static str {
        match self {
            Offsets::Committed => "group",
            Offsets::ShareStart => "share group",
        }
    }

    /// Who has to stop before a reset.
    fn consumers(self) -> &'static str {
        match self {
            Offsets::Committed => "consumers",
            Offsets::ShareStart => "share consumers",
        }
    }
}

pub(super) async fn run(args: ResetArgs) -> anyhow::Result<()> {
    let group = args.group.as_str();
    let mut groups = Groups::connect(&args.bootstrap).await?;
    // A group that does not exist yet is reset as a consumer group: committing makes one.
    let description = describe_group(&mut groups, group).await?;
    let kind = match &description {
        Some(d) if d.kind == Kind::Share => Offsets::ShareStart,
        _ => Offsets::Committed,
    };
    if let Some(d) = &description
        && !d.inactive()
    {
        let why = format!(
            "{} '{group}' is active (state {}, {})",
            kind.group(),
            d.state,
            plural(d.members.len() as u64, "member")
        );
        let consumers = kind.consumers();
        if args.execute {
            bail!(
                "cannot reset the {}s now: {why}; stop its {consumers}, wait until \
                 `sluice group describe {group}` shows state Empty, then run this again",
                kind.noun()
            );
        }
        eprintln!("note: {why}; --execute will be refused until its {consumers} stop");
    }
    let current = match kind {
        Offsets::Committed => committed_offsets(&mut groups, group).await?,
        Offsets::ShareStart => share::start_offsets(&mut groups, group).await?,
    };
    let selection = select(&args, kind, &current)?;
    let leaders = resolve(&mut groups.cluster, &selection).await?;
    let plan = make_plan(&mut groups.cluster, args.reset_to(), &leaders, &current).await?;
    let unshiftable: Vec<String> = plan
        .iter()
        .filter(|r| r.new.is_none())
        .map(|r| format!("{}/{}", r.topic, r.partition))
        .collect();
    if !unshiftable.is_empty() {
        bail!(
            "--shift-by needs a {noun} to shift, and {} '{group}' has none for {}; \
             set those with --to-earliest, --to-latest or --to-offset first",
            kind.group(),
            unshiftable.join(", "),
            noun = kind.noun(),
        );
    }

    if args.execute {
        match kind {
            Offsets::Committed => commit(&mut groups, group, &plan).await?,
            Offsets::ShareStart => {
                let new_offsets = plan
                    .iter()
                    .map(|r| {
                        Ok((
                            (r.topic.clone(), r.partition),
                            r.new
                                .context("a plan without an offset for every partition")?,
                        ))
                    })
                    .collect::<anyhow::Result<BTreeMap<Tp, i64>>>()?;
                share::alter_start_offsets(&mut groups, group, &new_offsets).await?;
            }
        }
    }
    print_plan(&plan, args.json);
    let partitions = plural(plan.len() as u64, "partition");
    match (args.execute, kind) {
        (true, Offsets::Committed) => {
            eprintln!("committed new offsets of group '{group}' for {partitions}");
        }
        (true, Offsets::ShareStart) => {
            eprintln!("set new start offsets of share group '{group}' for {partitions}");
        }
        (false, Offsets::Committed) => eprintln!(
            "dry run for {partitions}: nothing changed; add --execute to commit these offsets"
        ),
        (false, Offsets::ShareStart) => eprintln!(
            "dry run for {partitions}: nothing changed; add --execute to set these start offsets"
        ),
    }
    Ok(())
}

/// The partitions to reset, per topic (`None`: all of the topic's partitions): those named by
/// `--topic`, or with `--all-topics` those with a current offset.
fn select(
    args: &ResetArgs,
    kind: Offsets,
    committed: &BTreeMap<Tp, i64>,
) -> anyhow::Result<BTreeMap<String, Option<Vec<i32>>>> {
    let mut selection: BTreeMap<String, Option<Vec<i32>>> = BTreeMap::new();
    if args.all_topics {
        for (topic, partition) in committed.keys() {
            if let Some(list) = selection.entry(topic.clone()).or_insert(Some(Vec::new())) {
                list.push(*partition);
            }
        }
        if selection.is_empty() {
            bail!(
                "{} '{}' has no {}s, so --all-topics selects nothing; name the topics with \
                 --topic",
                kind.group(),
                args.group,
                kind.noun()
            );
        }
    }
    for spec in &args.topics {
        let entry = selection
            .entry(spec.topic.clone())
            .or_insert(Some(Vec::new()));
        match (&spec.partitions, entry.as_mut()) {
            (Some(ps), Some(list)) => list.extend(ps),
            // A whole topic named anywhere means the whole topic.
            _ => *entry = None,
        }
    }
    Ok(selection)
}

/// Checks that the selected topics and partitions exist; returns each partition's leader.
async fn resolve(
    cluster: &mut Cluster,
    selection: &BTreeMap<String, Option<Vec<i32>>>,
) -> anyhow::Result<BTreeMap<Tp, i32>> {
    let topics: BTreeSet<String> = selection.keys().cloned().collect();
    let topic_leaders = partition_leaders(cluster, &topics).await?;
    let mut leaders = BTreeMap::new();
    for (topic, chosen) in selection {
        let known = match &topic_leaders[topic] {
            Ok(known) => known,
            Err(e) => bail!("topic '{topic}' {e}"),
        };
        let chosen: Vec<i32> = match chosen {
            Some(list) => sorted(list.clone()),
            None => known.keys().copied().collect(),
        };
        for p in chosen {
            let Some(&leader) = known.get(&p) else {
                bail!(
                    "topic '{topic}' has no partition {p} (it has {})",
                    plural(known.len() as u64, "partition")
                );
            };
            leaders.insert((topic.clone(), p), leader);
        }
    }
    Ok(leaders)
}

/// The new offset of every partition in `leaders`, from its log's range (ListOffsets).
async fn make_plan(
    cluster: &mut Cluster,
    to: ResetTo,
    leaders: &BTreeMap<Tp, i32>,
    committed: &BTreeMap<Tp, i64>,
) -> anyhow::Result<Vec<PlanRow>> {
    let partitions: BTreeSet<Tp> = leaders.keys().cloned().collect();
    let earliest = list_offsets(cluster, leaders, &partitions, EARLIEST).await?;
    let latest = list_offsets(cluster, leaders, &partitions, LATEST).await?;
    let at_time = match to {
        ResetTo::Timestamp(ts) => Some(list_offsets(cluster, leaders, &partitions, ts).await?),
        _ => None,
    };
    let mut plan = Vec::new();
    for tp in &partitions {
        let lookup = |map: &BTreeMap<Tp, Result<i64, String>>, what: &str| {
            map[tp]
                .clone()
                .map_err(|e| anyhow!("cannot look up the {what} offset of {}/{}: {e}", tp.0, tp.1))
        };
        let range = PartitionRange {
            earliest: lookup(&earliest, "earliest")?,
            latest: lookup(&latest, "latest")?,
            at_time: match &at_time {
                Some(map) => Some(lookup(map, "by-time")?),
                None => None,
            },
        };
        let current = committed.get(tp).copied();
        plan.push(PlanRow {
            topic: tp.0.clone(),
            partition: tp.1,
            current,
            new: new_offset(to, current, range),
        });
    }
    Ok(plan)
}

fn print_plan(plan: &[PlanRow], as_json: bool) {
    let dash = |v: Option<i64>| v.map_or_else(|| "-".to_owned(), |v| v.to_string());
    if as_json {
        for r in plan {
            let line = json!({
                "topic": r.topic,
                "partition": r.partition,
                "current_offset": r.current,
                "new_offset": r.new,
            });
            println!("{line}");
        }
    } else {
        let rows: Vec<Vec<String>> = plan
            .iter()
            .map(|r| {
                vec![
                    r.topic.clone(),
                    r.partition.to_string(),
                    dash(r.current),
                    dash(r.new),
                ]
            })
            .collect();
        print!(
            "{}",
            table("", &["TOPIC", "PARTITION", "CURRENT", "NEW"], &rows)
        );
    }
}

/// Commits `plan` as an admin commit: generation -1 and no member id, which the coordinator
/// accepts only while the group has no members.
async fn commit(groups: &mut Groups, group: &str, plan: &[PlanRow]) -> anyhow::Result<()> {
    let mut by_topic: BTreeMap<&str, Vec<OffsetCommitRequestPartition>> = BTreeMap::new();
    for r in plan {
        let new = r
            .new
            .context("a plan without an offset for every partition")?;
        by_topic.entry(&r.topic).or_default().push(
            OffsetCommitRequestPartition::default()
                .with_partition_index(r.partition)
                .with_committed_offset(new),
        );
    }
    let request = OffsetCommitRequest::default()
        .with_group_id(group_id(group))
        .with_generation_id_or_member_epoch(-1)
        .with_member_id(StrBytes::default())
        .with_topics(
            by_topic
                .into_iter()
                .map(|(topic, partitions)| {
                    OffsetCommitRequestTopic::default()
                        .with_name(TopicName(str_bytes(topic)))
                        .with_partitions(partitions)
                })
                .collect(),
        );
    let response = groups
        .call(group, request, |r| {
            r.topics
                .iter()
                .flat_map(|t| &t.partitions)
                .map(|p| p.error_code)
                .find(|&c| c != 0)
                .unwrap_or(0)
        })
        .await?;
    let mut failed = Vec::new();
    for t in &response.topics {
        for p in &t.partitions {
            if let Some(e) = group_error(p.error_code, None) {
                failed.push((format!("{}/{}", &*t.name.0, p.partition_index), e));
            }
        }
    }
    if let Some((tp, e)) = failed.first() {
        bail!(
            "the broker refused the new offsets of group '{group}' for {} (first: {tp}): {e}",
            plural(failed.len() as u64, "partition")
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn range(earliest: i64, latest: i64) -> PartitionRange {
        PartitionRange {
            earliest,
            latest,
            at_time: None,
        }
    }

    #[test]
    fn new_offsets_stay_within_the_log() {
        let r = range(5, 20);
        assert_eq!(new_offset(ResetTo::Earliest, Some(10), r), Some(5));
        assert_eq!(new_offset(ResetTo::Latest, None, r), Some(20));
        assert_eq!(new_offset(ResetTo::Offset(12), None, r), Some(12));
        assert_eq!(new_offset(ResetTo::Offset(0), None, r), Some(5));
        assert_eq!(new_offset(ResetTo::Offset(99), None, r), Some(20));
        assert_eq!(new_offset(ResetTo::ShiftBy(-3), Some(10), r), Some(7));
        assert_eq!(new_offset(ResetTo::ShiftBy(-30), Some(10), r), Some(5));
        assert_eq!(
            new_offset(ResetTo::ShiftBy(i64::MAX), Some(10), r),
            Some(20)
        );
        assert_eq!(new_offset(ResetTo::ShiftBy(1), None, r), None);
        let by_time = |at| PartitionRange {
            at_time: Some(at),
            ..r
        };
        assert_eq!(new_offset(ResetTo::Timestamp(1), None, by_time(8)), Some(8));
        // No record at or after the time: the log end.
        assert_eq!(
            new_offset(ResetTo::Timestamp(1), None, by_time(-1)),
            Some(20)
        );
        // An empty partition has one possible offset.
        assert_eq!(new_offset(ResetTo::Offset(3), None, range(0, 0)), Some(0));
    }

    #[test]
    fn topic_specs() {
        assert_eq!(
            parse_topic_spec("orders"),
            Ok(TopicSpec {
                topic: "orders".into(),
                partitions: None
            })
        );
        assert_eq!(
            parse_topic_spec("orders:3,0-2,1").unwrap().partitions,
            Some(vec![0, 1, 2, 3])
        );
        for bad in [
            ":1",
            "orders:",
            "orders:x",
            "orders:2-1",
            "orders:-1",
            "orders:1,,2",
        ] {
            assert!(parse_topic_spec(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn datetimes() {
        assert_eq!(parse_datetime("1970-01-01T00:00:00Z"), Ok(0));
        assert_eq!(parse_datetime("1700000000000"), Ok(1_700_000_000_000));
        assert_eq!(
            parse_datetime("2023-11-14T22:13:20Z"),
            Ok(1_700_000_000_000)
        );
        assert_eq!(
            parse_datetime("2023-11-15T00:13:20.5+02:00"),
            Ok(1_700_000_000_500)
        );
        assert_eq!(
            parse_datetime("2023-11-14t21:13:20.123456-01:00"),
            Ok(1_700_000_000_123)
        );
        // Leap days, century rules.
        assert_eq!(parse_datetime("2000-02-29T00:00:00Z"), Ok(951_782_400_000));
        assert_eq!(
            parse_datetime("2024-03-01T00:00:00Z"),
            Ok(1_709_251_200_000)
        );
        let err = parse_datetime("2024-05-01T08:00:00").unwrap_err();
        assert!(err.contains("time zone"), "{err}");
        for bad in [
            "",
            "yesterday",
            "2023-02-29T00:00:00Z",
            "2023-13-01T00:00:00Z",
            "2023-01-01T24:00:00Z",
            "2023-01-01T00:00Z",
            "2023-01-01T00:00:00.Z",
            "2023-01-01T00:00:00+0200",
            "1969-12-31T23:59:59Z",
            "-5",
        ] {
            assert!(parse_datetime(bad).is_err(), "{bad}");
        }
    }
}
