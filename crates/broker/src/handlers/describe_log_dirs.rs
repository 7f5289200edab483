//! DescribeLogDirs: where the broker keeps each partition and how many bytes it holds
//! (`kafka-log-dirs --describe`, disk-usage views of Kafka UIs).
//!
//! One log directory is reported: the data directory. In object-storage and cluster mode the
//! partitions live in the bucket: the directory is reported by its storage URL, each
//! partition's size is what the bucket holds of it, and the directory's total and usable bytes
//! are -1 (unknown, as Kafka answers for a directory it cannot measure). On local disk the
//! total and usable bytes are the filesystem's (`statvfs`). Offset lag is 0: no partition is
//! ever being moved between directories. Topics or partitions named in the request that this
//! broker does not hold are left out, as Kafka does. In cluster mode every broker serves every
//! partition from the one bucket; each reports the partitions it leads (as Metadata names
//! leaders), so that a view summing over brokers counts every partition once.

use sluice_protocol::kafka_protocol::messages::describe_log_dirs_response::{
    DescribeLogDirsPartition, DescribeLogDirsResult, DescribeLogDirsTopic,
};
use sluice_protocol::kafka_protocol::messages::{DescribeLogDirsRequest, DescribeLogDirsResponse};

use crate::Broker;
use crate::handlers::{str_bytes, topic_name};

pub fn handle(broker: &Broker, req: DescribeLogDirsRequest) -> DescribeLogDirsResponse {
    // (topic, the partitions asked for; None for all of them)
    let wanted: Vec<(String, Option<Vec<i32>>)> = match req.topics {
        None => broker
            .topics()
            .all()
            .iter()
            .map(|t| (t.name.clone(), None))
            .collect(),
        Some(topics) => topics
            .into_iter()
            .map(|t| (t.topic.0.to_string(), Some(t.partitions)))
            .collect(),
    };
    let me = broker.config().node_id;
    let leads = |topic: &crate::Topic, p: i32| match broker.cluster() {
        Some(meta) => meta.leader_for(topic.id, p) == me,
        None => true,
    };
    let mut topics = Vec::new();
    for (name, partitions) in wanted {
        let Some(topic) = broker.topics().get(&name) else {
            continue;
        };
        let indexes: Vec<i32> = match partitions {
            None => (0..topic.partition_count()).collect(),
            Some(list) => list,
        };
        let partitions: Vec<DescribeLogDirsPartition> = indexes
            .into_iter()
            .filter(|&p| leads(&topic, p))
            .filter_map(|p| {
                let log = topic.partition(p)?;
                Some(
                    DescribeLogDirsPartition::default()
                        .with_partition_index(p)
                        .with_partition_size(i64::try_from(log.size_bytes()).unwrap_or(i64::MAX))
                        .with_offset_lag(0),
                )
            })
            .collect();
        if !partitions.is_empty() {
            topics.push(
                DescribeLogDirsTopic::default()
                    .with_name(topic_name(&name))
                    .with_partitions(partitions),
            );
        }
    }
    let (log_dir, total, usable) = match broker.topics().storage_label() {
        Some(url) => (url, -1, -1),
        None => {
            let status = broker.data_dir_space().status();
            let bytes = |v: Option<u64>| v.map_or(-1, |b| i64::try_from(b).unwrap_or(i64::MAX));
            (
                broker.config().data_dir.display().to_string(),
                bytes(status.total_bytes),
                bytes(status.free_bytes),
            )
        }
    };
    DescribeLogDirsResponse::default().with_results(vec![
        DescribeLogDirsResult::default()
            .with_log_dir(str_bytes(log_dir))
            .with_topics(topics)
            .with_total_bytes(total)
            .with_usable_bytes(usable),
    ])
}
