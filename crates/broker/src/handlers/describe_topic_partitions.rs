//! DescribeTopicPartitions (KIP-966): the partitions of topics, paged. Kafka 3.8+'s
//! AdminClient `describeTopics` asks it before Metadata, and `kafka-topics --describe` with it.
//!
//! The answer lists topics in name order, all of them when the request names none. Partitions
//! are counted against `response_partition_limit` (at most [`PARTITIONS_MAX`], Kafka's
//! `max.request.partition.size.limit` default); when the limit stops the listing, `next_cursor`
//! names the first partition not listed, and a request carrying that cursor continues there.
//! A topic named in the request that does not exist is answered UNKNOWN_TOPIC_OR_PARTITION
//! and counts nothing. Leaders are the ones Metadata gives the same client (cluster mode:
//! spread over the live brokers, from the client's zone when it names one).

use std::collections::BTreeSet;

use sluice_protocol::kafka_protocol::messages::BrokerId;
use sluice_protocol::kafka_protocol::messages::describe_topic_partitions_response::{
    Cursor, DescribeTopicPartitionsResponsePartition, DescribeTopicPartitionsResponseTopic,
};
use sluice_protocol::kafka_protocol::messages::{
    DescribeTopicPartitionsRequest, DescribeTopicPartitionsResponse,
};

use crate::handlers::{ReadError, topic_name};
use crate::{Broker, errors};

/// The most partitions one answer lists, whatever the request asks (Kafka's default).
pub const PARTITIONS_MAX: i32 = 2000;

pub fn handle(
    broker: &Broker,
    req: DescribeTopicPartitionsRequest,
    zone: Option<&str>,
    listener: usize,
) -> DescribeTopicPartitionsResponse {
    let (nodes, _) = super::cluster::brokers(broker, listener);
    let listed: BTreeSet<i32> = nodes.iter().map(|n| n.node_id).collect();
    let leader = super::metadata::leaders(broker, listed, zone);
    let limit = match req.response_partition_limit {
        n if n <= 0 => PARTITIONS_MAX,
        n => n.min(PARTITIONS_MAX),
    };
    // Every name asked for, or every topic, in name order.
    let names: BTreeSet<String> = if req.topics.is_empty() {
        broker
            .topics()
            .all()
            .iter()
            .map(|t| t.name.clone())
            .collect()
    } else {
        req.topics.iter().map(|t| t.name.0.to_string()).collect()
    };
    let (cursor_topic, cursor_partition) = match &req.cursor {
        Some(c) => (Some(c.topic_name.0.to_string()), c.partition_index.max(0)),
        None => (None, 0),
    };
    let mut topics = Vec::new();
    let mut left = limit;
    let mut next_cursor = None;
    for name in names {
        if let Some(start) = &cursor_topic
            && name < *start
        {
            continue;
        }
        let Some(topic) = broker.topics().get(&name) else {
            let e = ReadError::UnknownTopicOrPartition;
            topics.push(
                DescribeTopicPartitionsResponseTopic::default()
                    .with_name(Some(topic_name(&name)))
                    .with_error_code(errors::read_error_code(&e))
                    .with_topic_authorized_operations(i32::MIN),
            );
            continue;
        };
        let first = match &cursor_topic {
            Some(start) if *start == name => cursor_partition,
            _ => 0,
        };
        let count = topic.partition_count();
        if first >= count {
            continue;
        }
        if left == 0 {
            next_cursor = Some(
                Cursor::default()
                    .with_topic_name(topic_name(&name))
                    .with_partition_index(first),
            );
            break;
        }
        let last = count.min(first.saturating_add(left));
        let partitions = (first..last)
            .map(|p| {
                let node = BrokerId(leader(&topic, p));
                DescribeTopicPartitionsResponsePartition::default()
                    .with_partition_index(p)
                    .with_leader_id(node)
                    .with_leader_epoch(0)
                    .with_replica_nodes(vec![node])
                    .with_isr_nodes(vec![node])
                    .with_eligible_leader_replicas(Some(Vec::new()))
                    .with_last_known_elr(Some(Vec::new()))
            })
            .collect();
        left -= last - first;
        topics.push(
            DescribeTopicPartitionsResponseTopic::default()
                .with_name(Some(topic_name(&name)))
                .with_topic_id(topic.id)
                .with_partitions(partitions)
                .with_topic_authorized_operations(i32::MIN),
        );
        if last < count {
            next_cursor = Some(
                Cursor::default()
                    .with_topic_name(topic_name(&name))
                    .with_partition_index(last),
            );
            break;
        }
    }
    DescribeTopicPartitionsResponse::default()
        .with_topics(topics)
        .with_next_cursor(next_cursor)
}
