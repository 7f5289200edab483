//! DescribeCluster and CreatePartitions.

use sluice_protocol::kafka_protocol::messages::create_partitions_response::CreatePartitionsTopicResult;
use sluice_protocol::kafka_protocol::messages::describe_cluster_response::DescribeClusterBroker;
use sluice_protocol::kafka_protocol::messages::{
    BrokerId, CreatePartitionsRequest, CreatePartitionsResponse, DescribeClusterRequest,
    DescribeClusterResponse, ResponseKind,
};

use super::{AdminError, Answer, after_sync, str_bytes};
use crate::{Broker, errors};

pub fn describe_cluster(broker: &Broker, _req: DescribeClusterRequest) -> DescribeClusterResponse {
    let c = broker.config();
    DescribeClusterResponse::default()
        .with_cluster_id(str_bytes(c.cluster_id.clone()))
        .with_controller_id(BrokerId(c.node_id))
        .with_brokers(vec![
            DescribeClusterBroker::default()
                .with_broker_id(BrokerId(c.node_id))
                .with_host(str_bytes(c.advertised_host.clone()))
                .with_port(c.advertised_port),
        ])
}

pub fn create_partitions(broker: &Broker, req: CreatePartitionsRequest) -> Answer {
    let results = req
        .topics
        .into_iter()
        .map(|t| {
            let result = CreatePartitionsTopicResult::default().with_name(t.name.clone());
            let outcome = (|| {
                if t.assignments.is_some() {
                    return Err(AdminError::ReplicaAssignment);
                }
                let topic = broker
                    .topics()
                    .get(&t.name.0)
                    .ok_or_else(|| AdminError::UnknownTopic(t.name.0.to_string()))?;
                Ok(broker.topics().add_partitions(
                    &topic,
                    t.count,
                    req.validate_only,
                    broker.config(),
                    broker.committer(),
                    broker.clock(),
                )?)
            })();
            match outcome {
                Ok(()) => result,
                Err(e) => result
                    .with_error_code(errors::admin_error_code(&e))
                    .with_error_message(Some(str_bytes(e.to_string()))),
            }
        })
        .collect();
    let response = CreatePartitionsResponse::default().with_results(results);
    after_sync(broker, response, ResponseKind::CreatePartitions)
}
