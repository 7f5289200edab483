//! DescribeCluster and CreatePartitions, and the broker list Metadata shares.
//!
//! In cluster mode the brokers are the store's live ones (this one always among them), the
//! controller the lowest live node id (there is no controller: any broker serves any change;
//! clients only need a live one), and new partitions are made in the store, then opened here
//! once the reloaded catalog is applied.

use std::sync::Arc;

use futures::FutureExt;
use sluice_protocol::kafka_protocol::messages::create_partitions_response::CreatePartitionsTopicResult;
use sluice_protocol::kafka_protocol::messages::describe_cluster_response::DescribeClusterBroker;
use sluice_protocol::kafka_protocol::messages::{
    BrokerId, CreatePartitionsRequest, CreatePartitionsResponse, DescribeClusterRequest,
    DescribeClusterResponse, ResponseKind,
};

use super::{AdminError, Answer, after_sync, str_bytes};
use crate::catalog::{self, CatalogSync};
use crate::cluster::{ClusterMeta, ClusterNode};
use crate::{Broker, errors};

/// The brokers Metadata and DescribeCluster list, by node id, and the controller id: this
/// broker alone in the single-broker modes; in cluster mode the live ones, this one added if
/// it is momentarily missing (its lease being renewed), so a client never gets a list
/// without the broker it asked. This broker is listed at the address of `listener`, the one
/// the request came in on; in cluster mode the others at the address they registered.
pub(crate) fn brokers(broker: &Broker, listener: usize) -> (Vec<ClusterNode>, i32) {
    let c = broker.config();
    let (host, port) = c.advertised(listener);
    let me = ClusterNode {
        node_id: c.node_id,
        host,
        port,
        rack: None,
    };
    let Some(meta) = broker.cluster() else {
        return (vec![me], c.node_id);
    };
    let mut nodes = (*meta.live_brokers()).clone();
    match nodes.iter_mut().find(|n| n.node_id == me.node_id) {
        Some(listed) => {
            listed.host = me.host;
            listed.port = me.port;
        }
        None => nodes.push(me),
    }
    nodes.sort_by_key(|n| n.node_id);
    let controller = nodes.first().map_or(c.node_id, |n| n.node_id);
    (nodes, controller)
}

pub fn describe_cluster(
    broker: &Broker,
    _req: DescribeClusterRequest,
    listener: usize,
) -> DescribeClusterResponse {
    let c = broker.config();
    let (nodes, controller) = brokers(broker, listener);
    DescribeClusterResponse::default()
        .with_cluster_id(str_bytes(c.cluster_id.clone()))
        .with_controller_id(BrokerId(controller))
        .with_brokers(
            nodes
                .into_iter()
                .map(|n| {
                    DescribeClusterBroker::default()
                        .with_broker_id(BrokerId(n.node_id))
                        .with_host(str_bytes(n.host))
                        .with_port(n.port)
                        .with_rack(n.rack.map(str_bytes))
                })
                .collect(),
        )
}

pub fn create_partitions(broker: &Arc<Broker>, req: CreatePartitionsRequest) -> Answer {
    let cluster = (broker.cluster().cloned()).zip(broker.catalog_sync().cloned());
    // In cluster mode the checks only (the store makes the change).
    let validate_only = req.validate_only || cluster.is_some();
    let checked: Vec<_> = req
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
                    validate_only,
                    broker.config(),
                    broker.committer(),
                    broker.clock(),
                )?)
            })();
            (result, outcome.map(|()| t.count))
        })
        .collect();
    if let Some((meta, sync)) = cluster
        && !req.validate_only
    {
        return create_in_cluster(meta, sync, checked);
    }
    let results = checked
        .into_iter()
        .map(|(result, outcome)| match outcome {
            Ok(_) => result,
            Err(e) => result
                .with_error_code(errors::admin_error_code(&e))
                .with_error_message(Some(str_bytes(e.to_string()))),
        })
        .collect();
    let response = CreatePartitionsResponse::default().with_results(results);
    after_sync(broker, response, ResponseKind::CreatePartitions)
}

/// Cluster mode: every checked topic's new count to the store at once, one reload.
fn create_in_cluster(
    meta: Arc<dyn ClusterMeta>,
    sync: Arc<CatalogSync>,
    checked: Vec<(CreatePartitionsTopicResult, Result<i32, AdminError>)>,
) -> Answer {
    async move {
        let calls = checked.iter().map(|(result, outcome)| {
            let count = *outcome.as_ref().ok()?;
            Some(meta.create_partitions(result.name.0.to_string(), count))
        });
        let calls = futures::future::join_all(calls.map(futures::future::OptionFuture::from));
        let outcomes = calls.await;
        let mut applied = if outcomes.iter().any(|o| matches!(o, Some(Ok(())))) {
            catalog::refreshed(sync.refresh().await)
        } else {
            Ok(Default::default())
        };
        let results = checked
            .into_iter()
            .zip(outcomes)
            .map(|((result, checked), outcome)| {
                if let Err(e) = checked {
                    return result
                        .with_error_code(errors::admin_error_code(&e))
                        .with_error_message(Some(str_bytes(e.to_string())));
                }
                let name = result.name.0.to_string();
                // (A checked topic always has an outcome.)
                let made = outcome
                    .unwrap_or(Ok(()))
                    .map_err(catalog::ChangeError::from);
                let opened = made.and_then(|()| match applied.as_mut() {
                    // The new partitions did not open here: say so (retriable).
                    Ok(applied) => match applied.failed.iter().position(|(n, _)| *n == name) {
                        Some(i) => Err(applied.failed.swap_remove(i).1.into()),
                        None => Ok(()),
                    },
                    Err(e) => Err(e.clone().into()),
                });
                match opened {
                    Ok(()) => result,
                    Err(e) => {
                        tracing::info!(topic = %name, error = %e, "create partitions refused");
                        result
                            .with_error_code(e.code())
                            .with_error_message(Some(str_bytes(e.to_string())))
                    }
                }
            })
            .collect();
        let response = CreatePartitionsResponse::default().with_results(results);
        Some(ResponseKind::CreatePartitions(response))
    }
    .boxed()
}
