//! Metadata: the brokers, and the topics asked for (creating unknown ones when allowed).
//!
//! Cluster mode: the brokers are the store's live ones, each partition's leader the one
//! [`ClusterMeta::leader_for`](crate::cluster::ClusterMeta::leader_for) names (any broker
//! serves any partition; this spreads clients), with itself as its only replica; a topic to
//! auto-create is created in the store and the answer waits until this broker has it open.
//! A request that needs no creation is answered at once, as in the single-broker modes.
//!
//! Zones: a client whose client id holds `sluice_az=ZONE` (e.g. `client.id=billing,
//! sluice_az=eu-west-1a`) gets leaders among the live brokers whose `--rack` is that zone,
//! when there are any, so its produce and fetch traffic stays in its zone (any broker serves
//! any partition); other clients get the spread over every live broker.

use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;

use futures::FutureExt;
use sluice_protocol::kafka_protocol::ResponseError;
use sluice_protocol::kafka_protocol::messages::metadata_request::MetadataRequestTopic;
use sluice_protocol::kafka_protocol::messages::metadata_response::{
    MetadataResponseBroker, MetadataResponsePartition, MetadataResponseTopic,
};
use sluice_protocol::kafka_protocol::messages::{
    BrokerId, MetadataRequest, MetadataResponse, ResponseKind,
};
use uuid::Uuid;

use super::{AdminError, Answer, cluster_error_code, str_bytes, topic_name};
use crate::cluster::ClusterError;
use crate::topics::{Topic, TopicError};
use crate::{Broker, TopicConfig, errors};

/// Answers at once, or (cluster mode, topics to auto-create) once they are created.
/// `listener`: the one the request came in on, whose address this broker is listed at.
pub fn start(
    broker: &Arc<Broker>,
    req: MetadataRequest,
    version: i16,
    client_id: &str,
    listener: usize,
) -> Answer {
    let zone = client_zone(client_id).map(str::to_owned);
    // Cluster mode: a topic created through another broker moments ago is known here first.
    let named = req.topics.iter().flatten().filter_map(|t| t.name.as_ref());
    let ids = req
        .topics
        .iter()
        .flatten()
        .filter(|t| by_id(t))
        .map(|t| t.topic_id);
    if broker.misses_catalog(named.filter(|n| !n.0.is_empty()).map(|n| n.0.as_str()))
        || broker.misses_catalog_ids(ids)
    {
        let broker = Arc::clone(broker);
        return async move {
            broker.refresh_on_miss().await;
            answer(&broker, req, version, zone, listener).await
        }
        .boxed();
    }
    answer(broker, req, version, zone, listener)
}

/// [`start`] once the catalog is as fresh as it needs to be.
fn answer(
    broker: &Arc<Broker>,
    req: MetadataRequest,
    version: i16,
    zone: Option<String>,
    listener: usize,
) -> Answer {
    let to_create = match broker.cluster() {
        Some(_) => to_auto_create(broker, &req, version),
        None => Vec::new(),
    };
    if to_create.is_empty() {
        let response = handle(
            broker,
            req,
            version,
            &HashMap::new(),
            zone.as_deref(),
            listener,
        );
        return futures::future::ready(Some(ResponseKind::Metadata(response))).boxed();
    }
    let broker = Arc::clone(broker);
    async move {
        let refused = auto_create_in_cluster(&broker, to_create).await;
        Some(ResponseKind::Metadata(handle(
            &broker,
            req,
            version,
            &refused,
            zone.as_deref(),
            listener,
        )))
    }
    .boxed()
}

/// The zone a client names in its client id: the value of `sluice_az=`, up to a `,`, `;` or
/// space.
pub fn client_zone(client_id: &str) -> Option<&str> {
    let rest = &client_id[client_id.find("sluice_az=")? + "sluice_az=".len()..];
    let zone = rest.split([',', ';', ' ']).next()?.trim();
    (!zone.is_empty()).then_some(zone)
}

/// The answer. `refused`: cluster mode, the code for each topic whose auto-creation failed.
/// `zone`: the client's zone (cluster mode: leaders come from that zone's brokers).
pub fn handle(
    broker: &Broker,
    req: MetadataRequest,
    version: i16,
    refused: &HashMap<String, i16>,
    zone: Option<&str>,
    listener: usize,
) -> MetadataResponse {
    let cfg = broker.config();
    let (nodes, controller) = super::cluster::brokers(broker, listener);
    let listed: BTreeSet<i32> = nodes.iter().map(|n| n.node_id).collect();
    let leader = leaders(broker, listed, zone);
    let describe = |t: &Topic| describe(t, |p| leader(t, p));
    let topics = match req.topics {
        None => broker.topics().all().iter().map(|t| describe(t)).collect(),
        Some(requested) => requested
            .into_iter()
            .map(|t| {
                let name = match t.name {
                    Some(name) if !by_id(&t) => name,
                    _ => {
                        return match find_by_id(broker, t.topic_id) {
                            Some(topic) => describe(&topic),
                            None => MetadataResponseTopic::default()
                                .with_topic_id(t.topic_id)
                                .with_error_code(errors::admin_error_code(
                                    &AdminError::UnknownTopicId(t.topic_id),
                                )),
                        };
                    }
                };
                let allow_create = version < 4 || req.allow_auto_topic_creation;
                let found = match refused.get(name.0.as_str()) {
                    Some(&code) => Err(code),
                    None => lookup_or_create(broker, &name.0, allow_create)
                        .map_err(|e| errors::topic_error_code(&e)),
                };
                match found {
                    Ok(topic) => describe(&topic),
                    Err(code) => MetadataResponseTopic::default()
                        .with_name(Some(name))
                        .with_error_code(code),
                }
            })
            .collect(),
    };
    MetadataResponse::default()
        .with_brokers(
            nodes
                .into_iter()
                .map(|n| {
                    MetadataResponseBroker::default()
                        .with_node_id(BrokerId(n.node_id))
                        .with_host(str_bytes(n.host))
                        .with_port(n.port)
                        .with_rack(n.rack.map(str_bytes))
                })
                .collect(),
        )
        .with_cluster_id(Some(str_bytes(cfg.cluster_id.clone())))
        .with_controller_id(BrokerId(controller))
        .with_topics(topics)
}

/// The leader of each partition: this broker alone, or the cluster store's spread over the
/// live ones `listed` (from `zone`'s brokers when the client names one; this broker if the
/// store names one not listed: never a leader the client cannot find).
pub(crate) fn leaders<'a>(
    broker: &'a Broker,
    listed: BTreeSet<i32>,
    zone: Option<&'a str>,
) -> impl Fn(&Topic, i32) -> i32 + 'a {
    let me = broker.config().node_id;
    move |topic: &Topic, p: i32| match broker.cluster() {
        Some(meta) => Some(match zone {
            Some(zone) => meta.leader_in_zone(topic.id, p, zone),
            None => meta.leader_for(topic.id, p),
        })
        .filter(|l| listed.contains(l))
        .unwrap_or(me),
        None => me,
    }
}

/// Whether a requested topic is named by its id: v10+ clients that know ids send the id with a
/// null name, or (the Java AdminClient) an empty one.
fn by_id(t: &MetadataRequestTopic) -> bool {
    t.topic_id != Uuid::nil() && t.name.as_ref().is_none_or(|n| n.0.is_empty())
}

fn find_by_id(broker: &Broker, id: Uuid) -> Option<Arc<Topic>> {
    broker.topics().all().into_iter().find(|x| x.id == id)
}

fn lookup_or_create(
    broker: &Broker,
    name: &str,
    allow_create: bool,
) -> Result<Arc<Topic>, TopicError> {
    if let Some(topic) = broker.topics().get(name) {
        return Ok(topic);
    }
    crate::topics::validate_topic_name(name)?;
    if !(allow_create && broker.config().auto_create_topics) || broker.topics().is_cluster() {
        // (Cluster mode: created before the answer, in `start`; missing now means unknown.)
        return Err(TopicError::Unknown(name.to_owned()));
    }
    match broker.topics().create(
        name,
        broker.config().default_partitions,
        TopicConfig::default(),
        broker.config(),
        broker.committer(),
        broker.clock(),
    ) {
        // Another request created it meanwhile.
        Err(TopicError::AlreadyExists(_)) => broker
            .topics()
            .get(name)
            .ok_or_else(|| TopicError::Unknown(name.to_owned())),
        other => other,
    }
}

/// Cluster mode: the topics of the request this broker would auto-create (unknown here,
/// valid names, creation allowed by the client and the broker).
fn to_auto_create(broker: &Broker, req: &MetadataRequest, version: i16) -> Vec<String> {
    let allow_create = version < 4 || req.allow_auto_topic_creation;
    if !(allow_create && broker.config().auto_create_topics) {
        return Vec::new();
    }
    let mut names: Vec<String> = (req.topics.iter().flatten())
        .filter_map(|t| t.name.as_ref())
        .map(|n| n.0.to_string())
        .filter(|n| broker.topics().get(n).is_none())
        .filter(|n| crate::topics::validate_topic_name(n).is_ok())
        .collect();
    names.sort();
    names.dedup();
    names
}

/// Cluster mode: creates `names` in the store (one already there is fine: another broker
/// made it), reloads and applies the catalog; returns the code to answer for each that this
/// broker still does not have.
async fn auto_create_in_cluster(broker: &Broker, names: Vec<String>) -> HashMap<String, i16> {
    let (Some(meta), Some(sync)) = (broker.cluster(), broker.catalog_sync()) else {
        return HashMap::new();
    };
    let partitions = broker.config().default_partitions;
    let calls = names.iter().map(|name| {
        let configs = TopicConfig::default().to_catalog();
        meta.create_topic(Uuid::new_v4(), name.clone(), partitions, configs)
    });
    let outcomes = futures::future::join_all(calls).await;
    let reload = sync.refresh().await.map(|_| ());
    // Retriable while a topic is being made (what Kafka answers during auto-creation).
    let pending = ResponseError::LeaderNotAvailable.code();
    let mut refused = HashMap::new();
    for (name, outcome) in names.into_iter().zip(outcomes) {
        if let Err(e) = &outcome
            && !matches!(e, ClusterError::TopicExists(_))
        {
            tracing::warn!(topic = %name, error = %e, "auto-creating a topic in the cluster");
        }
        let code = match outcome {
            Ok(()) | Err(ClusterError::TopicExists(_)) => match &reload {
                Ok(()) if broker.topics().get(&name).is_some() => continue,
                _ => pending,
            },
            Err(ClusterError::Unavailable(_)) => pending,
            Err(e) => cluster_error_code(&e),
        };
        if let Err(e) = &reload {
            tracing::warn!(topic = %name, error = %e, "auto-creating a topic: reloading the cluster catalog");
        }
        refused.insert(name, code);
    }
    refused
}

pub(crate) fn describe(topic: &Topic, leader: impl Fn(i32) -> i32) -> MetadataResponseTopic {
    MetadataResponseTopic::default()
        .with_name(Some(topic_name(&topic.name)))
        .with_topic_id(topic.id)
        .with_partitions(
            (0..topic.partition_count())
                .map(|p| {
                    let node = BrokerId(leader(p));
                    MetadataResponsePartition::default()
                        .with_partition_index(p)
                        .with_leader_id(node)
                        .with_leader_epoch(0)
                        .with_replica_nodes(vec![node])
                        .with_isr_nodes(vec![node])
                })
                .collect(),
        )
}

#[cfg(test)]
mod tests {
    use super::client_zone;

    #[test]
    fn the_zone_comes_from_the_client_id() {
        assert_eq!(
            client_zone("billing,sluice_az=eu-west-1a"),
            Some("eu-west-1a")
        );
        assert_eq!(client_zone("sluice_az=z1;more"), Some("z1"));
        assert_eq!(client_zone("sluice_az=z2 rest"), Some("z2"));
        assert_eq!(client_zone("billing"), None);
        assert_eq!(client_zone("sluice_az="), None);
        assert_eq!(client_zone("sluice_az=,x"), None);
    }
}
