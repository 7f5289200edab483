//! Share groups (KIP-932): ShareGroupHeartbeat, ShareGroupDescribe, ShareFetch,
//! ShareAcknowledge and the share-group offsets APIs.
//!
//! The group coordinator keeps each share-partition's state (`sluice_groups::share`); this
//! module turns requests into its calls and reads the log for it. A ShareFetch first
//! settles its share session and acknowledgements (answered once they are durable), then
//! acquires records: the coordinator picks what the member may take and reads the batches
//! that hold them, and the batches go out unchanged with the acquired offset ranges beside
//! them (the client skips records outside those ranges). With nothing to acquire the fetch
//! waits, up to its `max_wait_ms`, for new records or for records to come back.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use sluice_log::batch::BatchView;
use sluice_protocol::kafka_protocol::ResponseError;
use sluice_protocol::kafka_protocol::messages::share_fetch_response::{
    self as fetch_response, AcquiredRecords, ShareFetchableTopicResponse,
};
use sluice_protocol::kafka_protocol::messages::share_group_describe_response::{
    self as describe, DescribedGroup, Member,
};
use sluice_protocol::kafka_protocol::messages::share_group_heartbeat_response as heartbeat;
use sluice_protocol::kafka_protocol::messages::{
    AlterShareGroupOffsetsRequest, AlterShareGroupOffsetsResponse, DeleteShareGroupOffsetsRequest,
    DeleteShareGroupOffsetsResponse, DescribeShareGroupOffsetsRequest,
    DescribeShareGroupOffsetsResponse, ShareAcknowledgeRequest, ShareAcknowledgeResponse,
    ShareFetchRequest, ShareFetchResponse, ShareGroupDescribeRequest, ShareGroupDescribeResponse,
    ShareGroupHeartbeatRequest, ShareGroupHeartbeatResponse, alter_share_group_offsets_response,
    delete_share_group_offsets_response, describe_share_group_offsets_response,
    share_acknowledge_response,
};
use tokio::time::Instant;
use uuid::Uuid;

use super::{str_bytes, topic_name};
use crate::Broker;
use crate::storage::{self, PartitionStorage};
use crate::topics::Topic;
use sluice_groups::assignor::{Assignment, TopicInfo};
use sluice_groups::errors::GroupError;
use sluice_groups::share::{self, TopicPartition};
use sluice_groups::share_api::{AckBatches, PartitionFetched, ShareLog, ShareRead, ack_error_code};
use sluice_protocol::share_offsets;
use sluice_protocol::share_v2::{
    ShareAcknowledgeRequestExt, ShareAcknowledgeResponseExt, ShareFetchRequestExt,
};

/// ShareGroupDescribe's `authorized_operations` when the client did not ask for them.
const OPERATIONS_NOT_ASKED: i32 = i32::MIN;
/// How long a share fetch with nothing to acquire waits before it looks again for records
/// released by other members (new records wake it at once).
const RELEASE_POLL: Duration = Duration::from_millis(100);
/// Records a share fetch acquires when the client asks for none (`max_records` ≤ 0).
const DEFAULT_MAX_RECORDS: u32 = 500;

fn refusal(
    e: &GroupError,
) -> (
    i16,
    Option<sluice_protocol::kafka_protocol::protocol::StrBytes>,
) {
    (e.code(), Some(str_bytes(e.to_string())))
}

pub async fn heartbeat(
    broker: &Broker,
    req: ShareGroupHeartbeatRequest,
    client_id: String,
    client_host: String,
) -> ShareGroupHeartbeatResponse {
    let invalid = |message: &str| {
        let (code, message) = refusal(&GroupError::InvalidRequest(message.to_owned()));
        ShareGroupHeartbeatResponse::default()
            .with_error_code(code)
            .with_error_message(message)
    };
    let group_id = req.group_id.0.to_string();
    if group_id.is_empty() {
        return invalid("GroupId can't be empty.");
    }
    if req.member_id.is_empty() {
        return invalid("MemberId can't be empty.");
    }
    let request = share::HeartbeatRequest {
        member_id: req.member_id.to_string(),
        member_epoch: req.member_epoch,
        rack_id: req.rack_id.as_ref().map(|s| s.to_string()),
        subscribed_topic_names: req
            .subscribed_topic_names
            .map(|names| names.into_iter().map(|n| n.0.to_string()).collect()),
        client_id,
        client_host,
    };
    let topics = broker.topic_infos();
    let result = broker
        .groups()
        .share_heartbeat(&group_id, request, &topics)
        .await;
    ShareGroupHeartbeatResponse::default()
        .with_error_code(result.error_code())
        .with_error_message(result.error_message().map(str_bytes))
        .with_member_id((!result.member_id.is_empty()).then(|| str_bytes(result.member_id)))
        .with_member_epoch(result.member_epoch)
        .with_heartbeat_interval_ms(result.heartbeat_interval_ms)
        .with_assignment(result.assignment.map(|a| {
            heartbeat::Assignment::default().with_topic_partitions(
                a.into_iter()
                    .map(|(id, parts)| {
                        heartbeat::TopicPartitions::default()
                            .with_topic_id(id)
                            .with_partitions(parts.into_iter().collect())
                    })
                    .collect(),
            )
        }))
}

fn described_assignment(a: Assignment, topics: &BTreeMap<Uuid, TopicInfo>) -> describe::Assignment {
    describe::Assignment::default().with_topic_partitions(
        a.into_iter()
            .map(|(id, parts)| {
                let name = topics.get(&id).map(|t| t.name.as_str()).unwrap_or("");
                describe::TopicPartitions::default()
                    .with_topic_id(id)
                    .with_topic_name(topic_name(name))
                    .with_partitions(parts.into_iter().collect())
            })
            .collect(),
    )
}

pub async fn describe(
    broker: &Broker,
    req: ShareGroupDescribeRequest,
) -> ShareGroupDescribeResponse {
    let topics = broker.topic_infos();
    let operations = if req.include_authorized_operations {
        0
    } else {
        OPERATIONS_NOT_ASKED
    };
    let mut groups = Vec::with_capacity(req.group_ids.len());
    for id in req.group_ids {
        let owned = broker.groups().own_group(&id.0).await;
        let described = DescribedGroup::default()
            .with_group_id(id.clone())
            .with_authorized_operations(operations);
        let group = match owned.and_then(|()| broker.groups().describe_share(&id.0)) {
            Err(e) => {
                let (code, message) = refusal(&e);
                described
                    .with_error_code(code)
                    .with_error_message(message)
                    .with_group_state(str_bytes("Dead"))
            }
            Ok(d) => {
                let members = d
                    .members
                    .into_iter()
                    .map(|m| {
                        Member::default()
                            .with_member_id(str_bytes(m.member_id))
                            .with_rack_id(m.rack_id.map(str_bytes))
                            .with_member_epoch(m.member_epoch)
                            .with_client_id(str_bytes(m.client_id))
                            .with_client_host(str_bytes(m.client_host))
                            .with_subscribed_topic_names(
                                m.subscribed_topic_names
                                    .iter()
                                    .map(|n| topic_name(n))
                                    .collect(),
                            )
                            .with_assignment(described_assignment(m.assignment, &topics))
                    })
                    .collect();
                described
                    .with_group_state(str_bytes(d.state.name()))
                    .with_group_epoch(d.group_epoch)
                    .with_assignment_epoch(d.assignment_epoch)
                    .with_assignor_name(str_bytes(share::ASSIGNOR_NAME))
                    .with_members(members)
            }
        };
        groups.push(group);
    }
    ShareGroupDescribeResponse::default().with_groups(groups)
}

/// The log as the coordinator reads it for a share fetch: the topics of one request.
struct Log {
    topics: HashMap<Uuid, Arc<Topic>>,
}

impl Log {
    fn new(broker: &Broker) -> Log {
        Log {
            topics: broker
                .topics()
                .all()
                .into_iter()
                .map(|t| (t.id, t))
                .collect(),
        }
    }

    fn partition(&self, (id, p): TopicPartition) -> Option<Arc<dyn PartitionStorage>> {
        self.topics.get(&id)?.partition(p)
    }
}

impl ShareLog for Log {
    fn offsets(&self, tp: TopicPartition) -> Option<(i64, i64)> {
        let p = self.partition(tp)?;
        Some((p.log_start_offset(), p.high_watermark()))
    }

    fn read(&self, tp: TopicPartition, offset: i64, max_bytes: usize) -> ShareRead {
        let Some(p) = self.partition(tp) else {
            return ShareRead::Failed(
                ResponseError::UnknownTopicOrPartition.code(),
                "unknown topic or partition".to_owned(),
            );
        };
        match p.read(offset, max_bytes) {
            Ok(read) => {
                if read.records.is_empty() && offset < read.high_watermark {
                    // Object storage: the range is not in memory (evicted, or never loaded).
                    return ShareRead::NeedsLoad;
                }
                let end = last_offset(&read.records).map_or(offset, |last| last + 1);
                ShareRead::Records {
                    bytes: read.records,
                    end,
                }
            }
            Err(e) => ShareRead::Failed(crate::errors::storage_error_code(&e), e.to_string()),
        }
    }
}

/// The last offset of the last whole batch in `records`.
fn last_offset(records: &[u8]) -> Option<i64> {
    let mut rest = records;
    let mut last = None;
    while let Ok(view) = BatchView::parse_stored(rest) {
        last = Some(view.last_offset());
        rest = &rest[view.len()..];
    }
    last
}

/// Acknowledge type 4, RENEW (KIP-1222): valid only in a request with `IsRenewAck` set.
const RENEW: i8 = 4;

/// Why a request's acknowledgements are refused as a whole: RENEW without `IsRenewAck`.
fn renew_misused(acks: &[(TopicPartition, AckBatches)], renew: bool) -> Option<GroupError> {
    let has_renew = acks
        .iter()
        .flat_map(|(_, batches)| batches)
        .any(|(_, _, types)| types.contains(&RENEW));
    (has_renew && !renew).then(|| {
        GroupError::InvalidRequest(
            "acknowledge type 4 (RENEW) is only valid in a request with IsRenewAck set (v2)"
                .to_owned(),
        )
    })
}

/// A request's acknowledgements per partition, from its wire form.
fn acks_of<'a>(
    partitions: impl Iterator<Item = (Uuid, i32, Vec<(i64, i64, Vec<i8>)>)> + 'a,
) -> Vec<(TopicPartition, AckBatches)> {
    partitions
        .filter(|(_, _, batches)| !batches.is_empty())
        .map(|(id, p, batches)| ((id, p), batches))
        .collect()
}

/// ShareFetch over client connection `connection` (the share session is tied to it).
pub async fn fetch(broker: &Broker, req: ShareFetchRequest, connection: u64) -> ShareFetchResponse {
    let refuse = |e: GroupError| {
        let (code, message) = refusal(&e);
        ShareFetchResponse::default()
            .with_error_code(code)
            .with_error_message(message)
    };
    let Some(group_id) = req.group_id.as_ref().map(|g| g.0.to_string()) else {
        return refuse(GroupError::InvalidRequest("GroupId must be set".to_owned()));
    };
    let Some(member_id) = req.member_id.as_ref().map(|m| m.to_string()) else {
        return refuse(GroupError::InvalidRequest(
            "MemberId must be set".to_owned(),
        ));
    };
    if group_id.is_empty() || member_id.is_empty() {
        return refuse(GroupError::InvalidRequest(
            "GroupId and MemberId can't be empty".to_owned(),
        ));
    }
    // Both acquire modes (KIP-1206) acquire record by record and never more than
    // `max_records`: record_limit's promise, and within batch_optimized's soft limit.
    if let Err(e) = req.share_acquire_mode() {
        return refuse(GroupError::InvalidRequest(e.to_string()));
    }
    // A renew-only fetch (KIP-1222) renews locks and fetches nothing.
    let renew = req.is_renew_ack();
    if renew
        && (req.max_bytes != 0
            || req.min_bytes != 0
            || req.max_records != 0
            || req.max_wait_ms != 0)
    {
        return refuse(GroupError::InvalidRequest(
            "a ShareFetch with IsRenewAck fetches nothing: MaxBytes, MinBytes, MaxRecords and MaxWaitMs must be 0".to_owned(),
        ));
    }
    let adding: Vec<TopicPartition> = req
        .topics
        .iter()
        .flat_map(|t| t.partitions.iter().map(|p| (t.topic_id, p.partition_index)))
        .collect();
    let forgetting: Vec<TopicPartition> = req
        .forgotten_topics_data
        .iter()
        .flat_map(|t| t.partitions.iter().map(|&p| (t.topic_id, p)))
        .collect();
    let acks = acks_of(req.topics.iter().flat_map(|t| {
        t.partitions.iter().map(|p| {
            let batches = p
                .acknowledgement_batches
                .iter()
                .map(|b| (b.first_offset, b.last_offset, b.acknowledge_types.clone()))
                .collect();
            (t.topic_id, p.partition_index, batches)
        })
    }));
    if let Some(e) = renew_misused(&acks, renew) {
        return refuse(e);
    }
    let groups = broker.groups();
    let session = groups
        .share_session(
            &group_id,
            &member_id,
            req.share_session_epoch,
            &adding,
            &forgetting,
            acks,
            true,
            connection,
        )
        .await;
    let (partitions, ack_outcomes) = match session {
        Ok(s) => s,
        Err(e) => return refuse(e),
    };
    let mut answers: BTreeMap<TopicPartition, fetch_response::PartitionData> = BTreeMap::new();
    for (tp, outcome) in ack_outcomes {
        let data = answers
            .entry(tp)
            .or_insert_with(|| fetch_response::PartitionData::default().with_partition_index(tp.1));
        if let Err(e) = outcome {
            data.acknowledge_error_code = ack_error_code(&e);
            data.acknowledge_error_message = Some(str_bytes(e.to_string()));
        }
    }
    let max_records = u32::try_from(req.max_records)
        .ok()
        .filter(|&n| n > 0)
        .unwrap_or(DEFAULT_MAX_RECORDS);
    let cap = broker.config().fetch_max_bytes;
    let max_bytes = usize::try_from(req.max_bytes)
        .ok()
        .filter(|&n| n > 0)
        .map_or(cap, |n| n.min(cap));
    let wait = Duration::from_millis(
        u64::try_from(req.max_wait_ms.max(0))
            .unwrap_or(0)
            .min(broker.config().fetch_wait_max_ms),
    );
    let deadline = Instant::now() + wait;
    let mut fetched: Vec<PartitionFetched> = Vec::new();
    if !partitions.is_empty() && !renew {
        loop {
            let log = Log::new(broker);
            let acquired = groups.share_acquire(
                &group_id,
                &member_id,
                &partitions,
                max_records,
                max_bytes,
                &log,
            );
            let (result, mut waits) = match acquired {
                Ok(r) => r,
                Err(e) => return refuse(e),
            };
            let got = result
                .iter()
                .any(|p| !p.acquired.is_empty() || p.error.is_some());
            // Share-partitions started by this pass: their start must be durable before any
            // of their records goes out; acquire from them in the next pass, at once.
            let started = waits.started.is_some();
            if let Err(e) = waits.started().await {
                tracing::warn!(group = %group_id, error = %e, "share-partition start not stored");
            }
            // Records acquired are answered now: they are locked to this member.
            if got {
                fetched = result;
                break;
            }
            if started {
                continue;
            }
            if Instant::now() >= deadline {
                fetched = result;
                break;
            }
            if !waits.loads.is_empty() {
                // Object storage: bring the ranges in, then acquire again.
                let reads: Vec<(Arc<dyn PartitionStorage>, i64)> = waits
                    .loads
                    .iter()
                    .filter_map(|&(tp, offset)| Some((log.partition(tp)?, offset)))
                    .collect();
                storage::prepare_reads(reads.iter().map(|(p, o)| (&**p, *o, max_bytes)), deadline)
                    .await;
                continue;
            }
            // Wait for new records on any partition, or look again for released ones soon.
            let waits: Vec<(Arc<dyn PartitionStorage>, i64)> = partitions
                .iter()
                .filter_map(|&tp| {
                    let p = log.partition(tp)?;
                    let hwm = p.high_watermark();
                    Some((p, hwm))
                })
                .collect();
            let until = deadline.min(Instant::now() + RELEASE_POLL);
            storage::wait_for_data(waits.iter().map(|(p, o)| (&**p, *o)), until).await;
        }
    }
    let mut records_out = 0u64;
    for p in fetched {
        if p.acquired.is_empty() && p.error.is_none() {
            continue;
        }
        let data = answers.entry(p.tp).or_insert_with(|| {
            fetch_response::PartitionData::default().with_partition_index(p.tp.1)
        });
        if let Some((code, message)) = p.error {
            data.error_code = code;
            data.error_message = Some(str_bytes(message));
        }
        records_out += p
            .acquired
            .iter()
            .map(|a| u64::try_from(a.last_offset - a.first_offset + 1).unwrap_or(0))
            .sum::<u64>();
        data.records = Some(p.records.unwrap_or_else(Bytes::new));
        data.acquired_records = p
            .acquired
            .into_iter()
            .map(|a| {
                AcquiredRecords::default()
                    .with_first_offset(a.first_offset)
                    .with_last_offset(a.last_offset)
                    .with_delivery_count(a.delivery_count)
            })
            .collect();
    }
    if records_out > 0 {
        broker.metrics().records_out(records_out);
    }
    let leader = fetch_response::LeaderIdAndEpoch::default()
        .with_leader_id(broker.config().node_id)
        .with_leader_epoch(0);
    let mut by_topic: BTreeMap<Uuid, Vec<fetch_response::PartitionData>> = BTreeMap::new();
    for ((id, _), data) in answers {
        by_topic
            .entry(id)
            .or_default()
            .push(data.with_current_leader(leader.clone()));
    }
    let lock_ms = groups.share_lock_duration_ms(&group_id);
    ShareFetchResponse::default()
        .with_acquisition_lock_timeout_ms(i32::try_from(lock_ms).unwrap_or(i32::MAX))
        .with_responses(
            by_topic
                .into_iter()
                .map(|(id, partitions)| {
                    ShareFetchableTopicResponse::default()
                        .with_topic_id(id)
                        .with_partitions(partitions)
                })
                .collect(),
        )
}

pub async fn acknowledge(
    broker: &Broker,
    req: ShareAcknowledgeRequest,
    connection: u64,
) -> ShareAcknowledgeResponse {
    let refuse = |e: GroupError| {
        let (code, message) = refusal(&e);
        ShareAcknowledgeResponse::default()
            .with_error_code(code)
            .with_error_message(message)
    };
    let (Some(group_id), Some(member_id)) = (
        req.group_id.as_ref().map(|g| g.0.to_string()),
        req.member_id.as_ref().map(|m| m.to_string()),
    ) else {
        return refuse(GroupError::InvalidRequest(
            "GroupId and MemberId must be set".to_owned(),
        ));
    };
    let acks = acks_of(req.topics.iter().flat_map(|t| {
        t.partitions.iter().map(|p| {
            let batches = p
                .acknowledgement_batches
                .iter()
                .map(|b| (b.first_offset, b.last_offset, b.acknowledge_types.clone()))
                .collect();
            (t.topic_id, p.partition_index, batches)
        })
    }));
    let renew = req.is_renew_ack();
    if let Some(e) = renew_misused(&acks, renew) {
        return refuse(e);
    }
    let session = broker
        .groups()
        .share_session(
            &group_id,
            &member_id,
            req.share_session_epoch,
            &[],
            &[],
            acks,
            false,
            connection,
        )
        .await;
    let outcomes = match session {
        Ok((_, outcomes)) => outcomes,
        Err(e) => return refuse(e),
    };
    let leader = share_acknowledge_response::LeaderIdAndEpoch::default()
        .with_leader_id(broker.config().node_id)
        .with_leader_epoch(0);
    let mut by_topic: BTreeMap<Uuid, Vec<share_acknowledge_response::PartitionData>> =
        BTreeMap::new();
    for ((id, p), outcome) in outcomes {
        let mut data = share_acknowledge_response::PartitionData::default()
            .with_partition_index(p)
            .with_current_leader(leader.clone());
        if let Err(e) = outcome {
            data.error_code = ack_error_code(&e);
            data.error_message = Some(str_bytes(e.to_string()));
        }
        by_topic.entry(id).or_default().push(data);
    }
    let lock_ms = broker.groups().share_lock_duration_ms(&group_id);
    ShareAcknowledgeResponse::default()
        .with_acquisition_lock_timeout_ms(i32::try_from(lock_ms).unwrap_or(i32::MAX))
        .with_responses(
            by_topic
                .into_iter()
                .map(|(id, partitions)| {
                    share_acknowledge_response::ShareAcknowledgeTopicResponse::default()
                        .with_topic_id(id)
                        .with_partitions(partitions)
                })
                .collect(),
        )
}

pub async fn describe_offsets(
    broker: &Broker,
    req: DescribeShareGroupOffsetsRequest,
) -> DescribeShareGroupOffsetsResponse {
    use describe_share_group_offsets_response::{
        DescribeShareGroupOffsetsResponseGroup as Group,
        DescribeShareGroupOffsetsResponsePartition as Partition,
        DescribeShareGroupOffsetsResponseTopic as Topic,
    };
    let infos = broker.topic_infos();
    let by_name: HashMap<&str, &TopicInfo> = infos.values().map(|t| (t.name.as_str(), t)).collect();
    let log = Log::new(broker);
    let mut groups = Vec::with_capacity(req.groups.len());
    for g in req.groups {
        let group_id = g.group_id.0.to_string();
        let answer = Group::default().with_group_id(g.group_id.clone());
        if let Err(e) = broker.groups().own_group(&group_id).await {
            let (code, message) = refusal(&e);
            groups.push(answer.with_error_code(code).with_error_message(message));
            continue;
        }
        // Asked partitions by topic (`None`: every partition the group has read).
        let asked: Vec<(String, Option<Uuid>, Vec<i32>)> = match g.topics {
            Some(topics) => topics
                .into_iter()
                .map(|t| {
                    let id = by_name.get(t.topic_name.0.as_str()).map(|i| i.id);
                    (t.topic_name.0.to_string(), id, t.partitions)
                })
                .collect(),
            None => {
                let mut topics: BTreeMap<Uuid, Vec<i32>> = BTreeMap::new();
                for (id, p) in broker.groups().share_partitions(&group_id) {
                    topics.entry(id).or_default().push(p);
                }
                topics
                    .into_iter()
                    .filter_map(|(id, parts)| Some((infos.get(&id)?.name.clone(), Some(id), parts)))
                    .collect()
            }
        };
        let tps: Vec<TopicPartition> = asked
            .iter()
            .filter_map(|(_, id, parts)| Some((id.as_ref().copied()?, parts)))
            .flat_map(|(id, parts)| parts.iter().map(move |&p| (id, p)))
            .collect();
        let offsets = match broker.groups().share_offsets(&group_id, &tps, &log) {
            Ok(o) => o.into_iter().collect::<HashMap<_, _>>(),
            Err(e) => {
                let (code, message) = refusal(&e);
                groups.push(answer.with_error_code(code).with_error_message(message));
                continue;
            }
        };
        let topics = asked
            .into_iter()
            .map(|(name, id, parts)| {
                let partitions = parts
                    .into_iter()
                    .map(|p| {
                        let answer = Partition::default()
                            .with_partition_index(p)
                            .with_leader_epoch(0);
                        match id {
                            None => answer
                                .with_start_offset(-1)
                                .with_error_code(ResponseError::UnknownTopicOrPartition.code())
                                .with_error_message(Some(str_bytes(format!(
                                    "unknown topic {name}"
                                )))),
                            Some(id) => match offsets.get(&(id, p)).cloned().flatten() {
                                Some(o) => {
                                    let mut answer = answer.with_start_offset(o.start_offset);
                                    share_offsets::set_detail(
                                        &mut answer,
                                        share_offsets::ShareOffsetDetail {
                                            lag: o.lag,
                                            in_flight: o.in_flight,
                                            acquired: o.acquired,
                                        },
                                    );
                                    answer
                                }
                                None => answer.with_start_offset(-1),
                            },
                        }
                    })
                    .collect();
                Topic::default()
                    .with_topic_name(topic_name(&name))
                    .with_topic_id(id.unwrap_or_default())
                    .with_partitions(partitions)
            })
            .collect();
        groups.push(answer.with_topics(topics));
    }
    DescribeShareGroupOffsetsResponse::default().with_groups(groups)
}

pub async fn alter_offsets(
    broker: &Broker,
    req: AlterShareGroupOffsetsRequest,
) -> AlterShareGroupOffsetsResponse {
    use alter_share_group_offsets_response::{
        AlterShareGroupOffsetsResponsePartition as Partition,
        AlterShareGroupOffsetsResponseTopic as Topic,
    };
    let group_id = req.group_id.0.to_string();
    let infos = broker.topic_infos();
    let by_name: HashMap<&str, Uuid> = infos.values().map(|t| (t.name.as_str(), t.id)).collect();
    let mut changes = Vec::new();
    for t in &req.topics {
        if let Some(&id) = by_name.get(t.topic_name.0.as_str()) {
            for p in &t.partitions {
                changes.push(((id, p.partition_index), Some(p.start_offset)));
            }
        }
    }
    let outcomes = match broker
        .groups()
        .alter_share_offsets(&group_id, changes)
        .await
    {
        Ok(o) => o.into_iter().collect::<HashMap<_, _>>(),
        Err(e) => {
            let (code, message) = refusal(&e);
            return AlterShareGroupOffsetsResponse::default()
                .with_error_code(code)
                .with_error_message(message);
        }
    };
    let responses = req
        .topics
        .into_iter()
        .map(|t| {
            let id = by_name.get(t.topic_name.0.as_str()).copied();
            let partitions = t
                .partitions
                .into_iter()
                .map(|p| {
                    let answer = Partition::default().with_partition_index(p.partition_index);
                    let outcome = id.map(|id| outcomes.get(&(id, p.partition_index)));
                    match outcome {
                        None => answer
                            .with_error_code(ResponseError::UnknownTopicOrPartition.code())
                            .with_error_message(Some(str_bytes("unknown topic or partition"))),
                        Some(Some(Err(e))) => {
                            let (code, message) = refusal(e);
                            answer.with_error_code(code).with_error_message(message)
                        }
                        Some(_) => answer,
                    }
                })
                .collect();
            Topic::default()
                .with_topic_name(t.topic_name)
                .with_topic_id(id.unwrap_or_default())
                .with_partitions(partitions)
        })
        .collect();
    AlterShareGroupOffsetsResponse::default().with_responses(responses)
}

pub async fn delete_offsets(
    broker: &Broker,
    req: DeleteShareGroupOffsetsRequest,
) -> DeleteShareGroupOffsetsResponse {
    use delete_share_group_offsets_response::DeleteShareGroupOffsetsResponseTopic as Topic;
    let group_id = req.group_id.0.to_string();
    let infos = broker.topic_infos();
    let by_name: HashMap<&str, &TopicInfo> = infos.values().map(|t| (t.name.as_str(), t)).collect();
    let mut changes = Vec::new();
    for t in &req.topics {
        if let Some(info) = by_name.get(t.topic_name.0.as_str()) {
            for p in 0..info.partitions {
                changes.push(((info.id, p), None));
            }
        }
    }
    let outcomes = match broker
        .groups()
        .alter_share_offsets(&group_id, changes)
        .await
    {
        Ok(o) => o,
        Err(e) => {
            let (code, message) = refusal(&e);
            return DeleteShareGroupOffsetsResponse::default()
                .with_error_code(code)
                .with_error_message(message);
        }
    };
    let responses = req
        .topics
        .into_iter()
        .map(|t| {
            let info = by_name.get(t.topic_name.0.as_str());
            let answer = Topic::default()
                .with_topic_name(t.topic_name.clone())
                .with_topic_id(info.map(|i| i.id).unwrap_or_default());
            let Some(info) = info else {
                return answer
                    .with_error_code(ResponseError::UnknownTopicOrPartition.code())
                    .with_error_message(Some(str_bytes("unknown topic")));
            };
            match outcomes
                .iter()
                .find(|((id, _), o)| *id == info.id && o.is_err())
            {
                Some((_, Err(e))) => {
                    let (code, message) = refusal(e);
                    answer.with_error_code(code).with_error_message(message)
                }
                _ => answer,
            }
        })
        .collect();
    DeleteShareGroupOffsetsResponse::default().with_responses(responses)
}
