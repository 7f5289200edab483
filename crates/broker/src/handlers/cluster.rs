//! DescribeCluster and CreatePartitions.

use sluice_protocol::kafka_protocol::ResponseError;
use sluice_protocol::kafka_protocol::messages::create_partitions_response::CreatePartitionsTopicResult;
use sluice_protocol::kafka_protocol::messages::describe_cluster_response::DescribeClusterBroker;
use sluice_protocol::kafka_protocol::messages::{
    BrokerId, CreatePartitionsRequest, CreatePartitionsResponse, DescribeClusterRequest,
    DescribeClusterResponse,
};

use super::str_bytes;
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

pub fn create_partitions(
    broker: &Broker,
    req: CreatePartitionsRequest,
) -> CreatePartitionsResponse {
    let results = req
        .topics
        .into_iter()
        .map(|t| {
            let result = CreatePartitionsTopicResult::default().with_name(t.name.clone());
            let outcome = (|| {
                if t.assignments.is_some() {
                    return Err((
                        ResponseError::InvalidReplicaAssignment.code(),
                        "manual replica assignment is not supported".to_owned(),
                    ));
                }
                let topic = broker.topics().get(&t.name.0).ok_or_else(|| {
                    (
                        ResponseError::UnknownTopicOrPartition.code(),
                        format!("unknown topic '{}'", &*t.name.0),
                    )
                })?;
                broker
                    .topics()
                    .add_partitions(
                        &topic,
                        t.count,
                        req.validate_only,
                        broker.config(),
                        broker.committer(),
                        broker.clock(),
                    )
                    .map_err(|e| (errors::topic_error_code(&e), e.to_string()))
            })();
            match outcome {
                Ok(()) => result,
                Err((code, message)) => result
                    .with_error_code(code)
                    .with_error_message(Some(str_bytes(message))),
            }
        })
        .collect();
    CreatePartitionsResponse::default().with_results(results)
}
