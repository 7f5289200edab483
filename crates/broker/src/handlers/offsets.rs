//! Committed offsets: OffsetCommit, OffsetFetch, OffsetDelete.
//!
//! Per-partition checks (the topic and partition exist, the metadata fits) happen here; the
//! coordinator checks the committer against its group and answers once the offsets are durable.
//! Refusals are [`GroupError`]s, turned into Kafka codes by [`GroupError::code`] alone.

use sluice_protocol::kafka_protocol::messages::offset_commit_response::{
    OffsetCommitResponsePartition, OffsetCommitResponseTopic,
};
use sluice_protocol::kafka_protocol::messages::offset_delete_response::{
    OffsetDeleteResponsePartition, OffsetDeleteResponseTopic,
};
use sluice_protocol::kafka_protocol::messages::offset_fetch_response::{
    OffsetFetchResponseGroup, OffsetFetchResponsePartition, OffsetFetchResponsePartitions,
    OffsetFetchResponseTopic, OffsetFetchResponseTopics,
};
use sluice_protocol::kafka_protocol::messages::{
    OffsetCommitRequest, OffsetCommitResponse, OffsetDeleteRequest, OffsetDeleteResponse,
    OffsetFetchRequest, OffsetFetchResponse,
};

use super::{str_bytes, topic_name};
use crate::Broker;
use sluice_groups::errors::{GroupError, NONE, result_code};
use sluice_groups::{CommittedOffset, OFFSET_METADATA_MAX_BYTES, TopicOffsets};

/// A partition of an OffsetCommit and why it is refused before the coordinator sees it.
type PartitionRefusal = (i32, Option<GroupError>);

/// Whether `topic` has partition `partition`.
fn partition_exists(broker: &Broker, topic: &str, partition: i32) -> bool {
    broker
        .topics()
        .get(topic)
        .is_some_and(|t| (0..t.partition_count()).contains(&partition))
}

pub async fn commit(
    broker: &Broker,
    req: OffsetCommitRequest,
    version: i16,
) -> OffsetCommitResponse {
    let group_id = req.group_id.0.to_string();
    let now = broker.clock().now_ms();
    // (topic, [(partition, refusal)]); no refusal = to be committed.
    let mut results: Vec<(String, Vec<PartitionRefusal>)> = Vec::with_capacity(req.topics.len());
    let mut offsets = Vec::new();
    for t in &req.topics {
        let topic = t.name.0.to_string();
        let parts = t
            .partitions
            .iter()
            .map(|p| {
                let metadata_bytes = p.committed_metadata.as_ref().map_or(0, |m| m.len());
                let refused = if group_id.is_empty() {
                    Some(GroupError::InvalidGroupId)
                } else if !partition_exists(broker, &topic, p.partition_index) {
                    Some(GroupError::UnknownTopicOrPartition {
                        topic: topic.clone(),
                        partition: p.partition_index,
                    })
                } else if metadata_bytes > OFFSET_METADATA_MAX_BYTES {
                    Some(GroupError::OffsetMetadataTooLarge {
                        bytes: metadata_bytes,
                        max_bytes: OFFSET_METADATA_MAX_BYTES,
                    })
                } else {
                    offsets.push((
                        topic.clone(),
                        p.partition_index,
                        CommittedOffset {
                            offset: p.committed_offset,
                            leader_epoch: if version >= 6 {
                                p.committed_leader_epoch
                            } else {
                                -1
                            },
                            metadata: p.committed_metadata.as_ref().map(|m| m.to_string()),
                            commit_timestamp_ms: now,
                        },
                    ));
                    None
                };
                (p.partition_index, refused)
            })
            .collect();
        results.push((topic, parts));
    }
    let group_code = if group_id.is_empty() {
        NONE
    } else {
        let outcome = broker
            .groups()
            .commit(
                &group_id,
                &req.member_id,
                req.group_instance_id.as_deref(),
                req.generation_id_or_member_epoch,
                offsets,
            )
            .await;
        result_code(&outcome)
    };
    let topics = results
        .into_iter()
        .map(|(topic, parts)| {
            let partitions = parts
                .into_iter()
                .map(|(p, refused)| {
                    OffsetCommitResponsePartition::default()
                        .with_partition_index(p)
                        .with_error_code(refused.map_or(group_code, |e| e.code()))
                })
                .collect();
            OffsetCommitResponseTopic::default()
                .with_name(topic_name(&topic))
                .with_partitions(partitions)
        })
        .collect();
    OffsetCommitResponse::default().with_topics(topics)
}

/// OffsetFetch's topics from a group's [`TopicOffsets`], in either response shape (v8+ nests
/// them under groups with types of their own; the fields are the same).
macro_rules! fetched_topics {
    ($found:expr, $topic:ident, $partition:ident) => {
        $found
            .into_iter()
            .map(|(topic, parts)| {
                $topic::default()
                    .with_name(topic_name(&topic))
                    .with_partitions(
                        parts
                            .into_iter()
                            .map(|(p, o)| {
                                let (offset, epoch, metadata) = fields(o);
                                $partition::default()
                                    .with_partition_index(p)
                                    .with_committed_offset(offset)
                                    .with_committed_leader_epoch(epoch)
                                    .with_metadata(Some(str_bytes(metadata)))
                            })
                            .collect(),
                    )
            })
            .collect()
    };
}

/// One group's committed offsets, from its coordinator (which, in cluster mode, takes the
/// group first).
async fn lookup(
    broker: &Broker,
    group_id: &str,
    member: Option<(&str, i32)>,
    asked: Option<Vec<(String, Vec<i32>)>>,
) -> Result<TopicOffsets, GroupError> {
    if group_id.is_empty() {
        return Err(GroupError::InvalidGroupId);
    }
    broker.groups().own_group(group_id).await?;
    broker.groups().committed(group_id, member, asked)
}

pub async fn fetch(broker: &Broker, req: OffsetFetchRequest, version: i16) -> OffsetFetchResponse {
    if version >= 8 {
        let mut groups = Vec::with_capacity(req.groups.len());
        for g in req.groups {
            let member = g
                .member_id
                .as_ref()
                .filter(|m| !m.is_empty())
                .map(|m| (m.as_str(), g.member_epoch));
            let asked = g.topics.map(|ts| {
                ts.into_iter()
                    .map(|t| (t.name.0.to_string(), t.partition_indexes))
                    .collect()
            });
            let response = OffsetFetchResponseGroup::default().with_group_id(g.group_id.clone());
            groups.push(match lookup(broker, &g.group_id.0, member, asked).await {
                Err(e) => response.with_error_code(e.code()),
                Ok(found) => response.with_topics(fetched_topics!(
                    found,
                    OffsetFetchResponseTopics,
                    OffsetFetchResponsePartitions
                )),
            });
        }
        return OffsetFetchResponse::default().with_groups(groups);
    }
    let asked = req.topics.map(|ts| {
        ts.into_iter()
            .map(|t| (t.name.0.to_string(), t.partition_indexes))
            .collect()
    });
    match lookup(broker, &req.group_id.0, None, asked).await {
        Err(e) => OffsetFetchResponse::default().with_error_code(e.code()),
        Ok(found) => OffsetFetchResponse::default().with_topics(fetched_topics!(
            found,
            OffsetFetchResponseTopic,
            OffsetFetchResponsePartition
        )),
    }
}

/// Offset, leader epoch and metadata as OffsetFetch reports them (-1, -1, "" for none).
fn fields(o: Option<CommittedOffset>) -> (i64, i32, String) {
    match o {
        Some(o) => (o.offset, o.leader_epoch, o.metadata.unwrap_or_default()),
        None => (-1, -1, String::new()),
    }
}

pub async fn delete(broker: &Broker, req: OffsetDeleteRequest) -> OffsetDeleteResponse {
    let group_id = req.group_id.0.to_string();
    if group_id.is_empty() {
        return OffsetDeleteResponse::default().with_error_code(GroupError::InvalidGroupId.code());
    }
    let mut unknown: Vec<(String, i32)> = Vec::new();
    let asked: Vec<(String, Vec<i32>)> = req
        .topics
        .iter()
        .map(|t| {
            let topic = t.name.0.to_string();
            let parts = t
                .partitions
                .iter()
                .map(|p| p.partition_index)
                .filter(|&p| {
                    let exists = partition_exists(broker, &topic, p);
                    if !exists {
                        unknown.push((topic.clone(), p));
                    }
                    exists
                })
                .collect();
            (topic, parts)
        })
        .collect();
    let deleted = match broker.groups().delete_offsets(&group_id, asked).await {
        Ok(d) => d,
        Err(e) => return OffsetDeleteResponse::default().with_error_code(e.code()),
    };
    let code_of = |topic: &str, p: i32| -> i16 {
        if unknown.iter().any(|(t, q)| t == topic && *q == p) {
            let unknown = GroupError::UnknownTopicOrPartition {
                topic: topic.to_owned(),
                partition: p,
            };
            return unknown.code();
        }
        deleted
            .iter()
            .find(|(t, _)| t == topic)
            .and_then(|(_, parts)| parts.iter().find(|(q, _)| *q == p))
            .map_or(NONE, |(_, outcome)| result_code(outcome))
    };
    let topics = req
        .topics
        .into_iter()
        .map(|t| {
            let partitions = t
                .partitions
                .iter()
                .map(|p| {
                    OffsetDeleteResponsePartition::default()
                        .with_partition_index(p.partition_index)
                        .with_error_code(code_of(&t.name.0, p.partition_index))
                })
                .collect();
            OffsetDeleteResponseTopic::default()
                .with_name(t.name)
                .with_partitions(partitions)
        })
        .collect();
    OffsetDeleteResponse::default().with_topics(topics)
}
