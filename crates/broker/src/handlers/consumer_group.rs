//! KIP-848 consumer groups: ConsumerGroupHeartbeat and ConsumerGroupDescribe.

use std::collections::BTreeMap;

use sluice_protocol::kafka_protocol::messages::consumer_group_describe_response::{
    self as describe, DescribedGroup, Member,
};
use sluice_protocol::kafka_protocol::messages::consumer_group_heartbeat_response::{
    self as heartbeat,
};
use sluice_protocol::kafka_protocol::messages::{
    ConsumerGroupDescribeRequest, ConsumerGroupDescribeResponse, ConsumerGroupHeartbeatRequest,
    ConsumerGroupHeartbeatResponse,
};
use uuid::Uuid;

use super::{str_bytes, topic_name};
use crate::Broker;
use sluice_groups::assignor::{Assignment, TopicInfo};
use sluice_groups::consumer;
use sluice_groups::errors::GroupError;

/// ConsumerGroupDescribe's `authorized_operations` when the client did not ask for them.
const OPERATIONS_NOT_ASKED: i32 = i32::MIN;
/// ConsumerGroupDescribe v1's member type of a KIP-848 member.
const MEMBER_TYPE_CONSUMER: i8 = 1;

pub async fn heartbeat(
    broker: &Broker,
    req: ConsumerGroupHeartbeatRequest,
    version: i16,
    client_id: String,
    client_host: String,
) -> ConsumerGroupHeartbeatResponse {
    let invalid = |message: &str| {
        let refused = GroupError::InvalidRequest(message.to_owned());
        ConsumerGroupHeartbeatResponse::default()
            .with_error_code(refused.code())
            .with_error_message(Some(str_bytes(refused.to_string())))
    };
    let group_id = req.group_id.0.to_string();
    if group_id.is_empty() {
        return invalid("GroupId can't be empty.");
    }
    if version >= 1 && req.member_id.is_empty() {
        return invalid("MemberId can't be empty.");
    }
    if req.member_epoch == 0 && req.rebalance_timeout_ms == -1 {
        return invalid("RebalanceTimeoutMs must be provided in first request.");
    }
    let request = consumer::HeartbeatRequest {
        member_id: req.member_id.to_string(),
        member_epoch: req.member_epoch,
        instance_id: req.instance_id.as_ref().map(|s| s.to_string()),
        rack_id: req.rack_id.as_ref().map(|s| s.to_string()),
        rebalance_timeout_ms: req.rebalance_timeout_ms,
        subscribed_topic_names: req
            .subscribed_topic_names
            .map(|names| names.into_iter().map(|n| n.0.to_string()).collect()),
        subscribed_topic_regex: req.subscribed_topic_regex.as_ref().map(|s| s.to_string()),
        server_assignor: req.server_assignor.as_ref().map(|s| s.to_string()),
        owned: req.topic_partitions.map(|tps| {
            let mut owned = Assignment::new();
            for tp in tps {
                owned.entry(tp.topic_id).or_default().extend(tp.partitions);
            }
            owned
        }),
        client_id,
        client_host,
    };
    let topics = broker.topic_infos();
    let result = broker
        .groups()
        .consumer_heartbeat(&group_id, request, &topics)
        .await;
    ConsumerGroupHeartbeatResponse::default()
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
    req: ConsumerGroupDescribeRequest,
    version: i16,
) -> ConsumerGroupDescribeResponse {
    let topics = broker.topic_infos();
    let operations = if req.include_authorized_operations {
        0
    } else {
        OPERATIONS_NOT_ASKED
    };
    // Cluster mode: each group is described by its coordinator, which takes it first.
    let mut owned = Vec::with_capacity(req.group_ids.len());
    for id in &req.group_ids {
        owned.push(broker.groups().own_group(&id.0).await);
    }
    let groups = req
        .group_ids
        .into_iter()
        .zip(owned)
        .map(|(id, owned)| {
            let described = DescribedGroup::default()
                .with_group_id(id.clone())
                .with_authorized_operations(operations);
            match owned.and_then(|()| broker.groups().describe_consumer(&id.0, &topics)) {
                Err(e) => described
                    .with_error_code(e.code())
                    .with_error_message(Some(str_bytes(e.to_string())))
                    .with_group_state(str_bytes("Dead")),
                Ok(d) => {
                    let members = d
                        .members
                        .into_iter()
                        .map(|m| {
                            let mut member = Member::default()
                                .with_member_id(str_bytes(m.member_id))
                                .with_instance_id(m.instance_id.map(str_bytes))
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
                                .with_subscribed_topic_regex(
                                    m.subscribed_topic_regex.map(str_bytes),
                                )
                                .with_assignment(described_assignment(m.assignment, &topics))
                                .with_target_assignment(described_assignment(
                                    m.target_assignment,
                                    &topics,
                                ));
                            if version >= 1 {
                                member.member_type = MEMBER_TYPE_CONSUMER;
                            }
                            member
                        })
                        .collect();
                    described
                        .with_group_state(str_bytes(d.state.name()))
                        .with_group_epoch(d.group_epoch)
                        .with_assignment_epoch(d.assignment_epoch)
                        .with_assignor_name(str_bytes(d.assignor_name))
                        .with_members(members)
                }
            }
        })
        .collect();
    ConsumerGroupDescribeResponse::default().with_groups(groups)
}
