//! Authorization of Kafka requests against the ACLs (`--authorizer acl`), in front of the
//! handlers: the handlers never see what the caller may not touch.
//!
//! [`gate`] looks at a request before it is handled and either answers it at once (a
//! request that is refused as a whole: a group the caller may not read, a cluster operation)
//! or passes on the part the caller may touch, with a [`Patch`] that adds the refused
//! resources back into the handler's response with Kafka's error codes
//! (TOPIC_AUTHORIZATION_FAILED, GROUP_AUTHORIZATION_FAILED, CLUSTER_AUTHORIZATION_FAILED,
//! TRANSACTIONAL_ID_AUTHORIZATION_FAILED), in the shape each API answers them. Lists (Metadata
//! for all topics, ListGroups, OffsetFetch for all of a group's topics) are filtered after the
//! handler: what the caller may not DESCRIBE is left out, as Kafka does.
//!
//! The operation each API needs is Kafka's (`KafkaApis`): Produce WRITE on the topic; Fetch
//! READ; ListOffsets and Metadata DESCRIBE, and a Metadata that would auto-create a topic
//! CREATE on the cluster or the topic; CreateTopics CREATE; DeleteTopics and DeleteRecords DELETE; DescribeTopicPartitions
//! DESCRIBE on each topic; DescribeLogDirs DESCRIBE on the cluster;
//! CreatePartitions ALTER; DescribeConfigs DESCRIBE_CONFIGS and the Alter APIs ALTER_CONFIGS
//! (on the topic, or on the cluster for broker configs); the group APIs READ (join, sync,
//! heartbeat, leave, commit; and READ on each committed topic), DESCRIBE (find, describe,
//! fetch offsets) or DELETE on the group; InitProducerId IDEMPOTENT_WRITE on the cluster or
//! WRITE on some topic (WRITE on the transactional id when it has one); the ACL APIs
//! DESCRIBE or ALTER on the cluster, DescribeClientQuotas DESCRIBE_CONFIGS on it and
//! AlterClientQuotas ALTER_CONFIGS. ApiVersions, SaslHandshake, SaslAuthenticate and
//! DescribeCluster need nothing.

use sluice_protocol::kafka_protocol::ResponseError;
use sluice_protocol::kafka_protocol::messages::*;
use sluice_protocol::kafka_protocol::protocol::StrBytes;
use sluice_security::{AclOperation as Op, Authorizer, Principal, ResourceType as Rt};
use uuid::Uuid;

use crate::Broker;
use crate::handlers::str_bytes;

/// The name of the one CLUSTER resource.
pub const CLUSTER: &str = "kafka-cluster";

const TOPIC_DENIED: i16 = ResponseError::TopicAuthorizationFailed.code();
const GROUP_DENIED: i16 = ResponseError::GroupAuthorizationFailed.code();
const CLUSTER_DENIED: i16 = ResponseError::ClusterAuthorizationFailed.code();
const TXN_DENIED: i16 = ResponseError::TransactionalIdAuthorizationFailed.code();

/// Kafka's resource type codes in DescribeConfigs and the Alter APIs.
const CONFIG_TOPIC: i8 = 2;
const CONFIG_BROKER: i8 = 4;
const CONFIG_BROKER_LOGGER: i8 = 8;
const CONFIG_GROUP: i8 = 32;

/// FindCoordinator's key types.
const KEY_GROUP: i8 = 0;
const KEY_TRANSACTION: i8 = 1;

/// Who is asking, and the authorizer that decides.
pub struct Subject<'a> {
    pub authorizer: &'a Authorizer,
    pub principal: Principal,
    /// The client's address as ACL hosts name it (`*` matches any).
    pub host: String,
}

impl Subject<'_> {
    pub fn may(&self, op: Op, rt: Rt, name: &str) -> bool {
        self.authorizer
            .authorize(&self.principal, &self.host, op, rt, name)
    }

    fn may_topic(&self, op: Op, name: &str) -> bool {
        self.may(op, Rt::Topic, name)
    }

    fn may_group(&self, op: Op, name: &str) -> bool {
        self.may(op, Rt::Group, name)
    }

    fn may_cluster(&self, op: Op) -> bool {
        self.may(op, Rt::Cluster, CLUSTER)
    }

    /// The operations on this resource the subject may perform, as Kafka's
    /// `authorized_operations` bit field (bit `1 << code` per operation).
    pub fn operations(&self, rt: Rt, name: &str) -> i32 {
        let ops: &[Op] = match rt {
            Rt::Topic => &[
                Op::Read,
                Op::Write,
                Op::Create,
                Op::Delete,
                Op::Alter,
                Op::Describe,
                Op::DescribeConfigs,
                Op::AlterConfigs,
            ],
            Rt::Group => &[
                Op::Read,
                Op::Describe,
                Op::Delete,
                Op::DescribeConfigs,
                Op::AlterConfigs,
            ],
            Rt::Cluster => &[
                Op::Create,
                Op::ClusterAction,
                Op::DescribeConfigs,
                Op::AlterConfigs,
                Op::IdempotentWrite,
                Op::Alter,
                Op::Describe,
            ],
            _ => &[],
        };
        ops.iter()
            .filter(|&&op| self.may(op, rt, name))
            .fold(0, |bits, &op| bits | (1 << op.code()))
    }
}

/// Adds what was refused to a handler's response, or filters it.
pub type Patch = Box<dyn FnOnce(&mut ResponseKind, &Subject<'_>) + Send>;

/// What to do with a request.
pub enum Gate {
    /// Refused as a whole: answer this.
    Answer(ResponseKind),
    /// Handle this request (what may be handled of it), then apply the patch, if any.
    Pass(RequestKind, Option<Patch>),
}

fn patch(f: impl FnOnce(&mut ResponseKind, &Subject<'_>) + Send + 'static) -> Option<Patch> {
    Some(Box::new(f))
}

fn denied_message(what: &str) -> Option<StrBytes> {
    Some(str_bytes(format!("not authorized: {what}")))
}

/// Splits `items` into those `keep` accepts and the rest.
fn split<T>(items: Vec<T>, mut keep: impl FnMut(&T) -> bool) -> (Vec<T>, Vec<T>) {
    items.into_iter().partition(|item| keep(item))
}

/// Decides what of `body` the subject may have handled (see the module docs).
pub fn gate(broker: &Broker, s: &Subject<'_>, body: RequestKind, version: i16) -> Gate {
    use RequestKind as Rq;
    match body {
        Rq::Produce(mut req) => {
            if let Some(txn) = &req.transactional_id
                && !s.may(Op::Write, Rt::TransactionalId, txn)
            {
                let all = std::mem::take(&mut req.topic_data);
                return Gate::Answer(ResponseKind::Produce(
                    ProduceResponse::default().with_responses(
                        crate::handlers::produce::refuse_all(all, TXN_DENIED, None),
                    ),
                ));
            }
            let (ok, denied) = split(std::mem::take(&mut req.topic_data), |t| {
                s.may_topic(Op::Write, &t.name)
            });
            req.topic_data = ok;
            if denied.is_empty() {
                return Gate::Pass(Rq::Produce(req), None);
            }
            if req.topic_data.is_empty() && req.acks != 0 {
                return Gate::Answer(ResponseKind::Produce(
                    ProduceResponse::default().with_responses(
                        crate::handlers::produce::refuse_all(denied, TOPIC_DENIED, None),
                    ),
                ));
            }
            let denied = crate::handlers::produce::refuse_all(denied, TOPIC_DENIED, None);
            Gate::Pass(
                Rq::Produce(req),
                patch(move |r, _| {
                    if let ResponseKind::Produce(r) = r {
                        r.responses.extend(denied);
                    }
                }),
            )
        }
        Rq::Fetch(req) => match fetch(s, req) {
            Ok((req, patch)) => Gate::Pass(Rq::Fetch(req), patch),
            Err(answer) => Gate::Answer(ResponseKind::Fetch(answer)),
        },
        Rq::ListOffsets(mut req) => {
            let (ok, denied) = split(std::mem::take(&mut req.topics), |t| {
                s.may_topic(Op::Describe, &t.name)
            });
            req.topics = ok;
            if denied.is_empty() {
                return Gate::Pass(Rq::ListOffsets(req), None);
            }
            let denied: Vec<_> = denied
                .into_iter()
                .map(|t| {
                    list_offsets_response::ListOffsetsTopicResponse::default()
                        .with_name(t.name)
                        .with_partitions(
                            t.partitions
                                .iter()
                                .map(|p| {
                                    list_offsets_response::ListOffsetsPartitionResponse::default()
                                        .with_partition_index(p.partition_index)
                                        .with_error_code(TOPIC_DENIED)
                                        .with_timestamp(-1)
                                        .with_offset(-1)
                                        .with_leader_epoch(-1)
                                })
                                .collect(),
                        )
                })
                .collect();
            Gate::Pass(
                Rq::ListOffsets(req),
                patch(move |r, _| {
                    if let ResponseKind::ListOffsets(r) = r {
                        r.topics.extend(denied);
                    }
                }),
            )
        }
        Rq::Metadata(req) => metadata(broker, s, req),
        Rq::CreateTopics(mut req) => {
            let cluster_create = s.may_cluster(Op::Create);
            let (ok, denied) = split(std::mem::take(&mut req.topics), |t| {
                cluster_create || s.may_topic(Op::Create, &t.name)
            });
            req.topics = ok;
            if denied.is_empty() {
                return Gate::Pass(Rq::CreateTopics(req), None);
            }
            let denied: Vec<_> = denied
                .into_iter()
                .map(|t| {
                    create_topics_response::CreatableTopicResult::default()
                        .with_error_message(denied_message(&format!(
                            "CREATE on topic {}",
                            t.name.0.as_str()
                        )))
                        .with_name(t.name)
                        .with_error_code(TOPIC_DENIED)
                        .with_num_partitions(-1)
                        .with_replication_factor(-1)
                })
                .collect();
            Gate::Pass(
                Rq::CreateTopics(req),
                patch(move |r, _| {
                    if let ResponseKind::CreateTopics(r) = r {
                        r.topics.extend(denied);
                    }
                }),
            )
        }
        Rq::DescribeLogDirs(req) => {
            if s.may_cluster(Op::Describe) {
                return Gate::Pass(Rq::DescribeLogDirs(req), None);
            }
            Gate::Answer(ResponseKind::DescribeLogDirs(
                DescribeLogDirsResponse::default().with_error_code(CLUSTER_DENIED),
            ))
        }
        Rq::DescribeTopicPartitions(req) => describe_topic_partitions(broker, s, req),
        Rq::DeleteRecords(mut req) => {
            let (ok, denied) = split(std::mem::take(&mut req.topics), |t| {
                s.may_topic(Op::Delete, &t.name)
            });
            req.topics = ok;
            if denied.is_empty() {
                return Gate::Pass(Rq::DeleteRecords(req), None);
            }
            let denied: Vec<_> = denied
                .into_iter()
                .map(|t| {
                    delete_records_response::DeleteRecordsTopicResult::default()
                        .with_name(t.name)
                        .with_partitions(
                            t.partitions
                                .iter()
                                .map(|p| {
                                    delete_records_response::DeleteRecordsPartitionResult::default()
                                        .with_partition_index(p.partition_index)
                                        .with_low_watermark(-1)
                                        .with_error_code(TOPIC_DENIED)
                                })
                                .collect(),
                        )
                })
                .collect();
            Gate::Pass(
                Rq::DeleteRecords(req),
                patch(move |r, _| {
                    if let ResponseKind::DeleteRecords(r) = r {
                        r.topics.extend(denied);
                    }
                }),
            )
        }
        Rq::DeleteTopics(mut req) => {
            let may = |name: &str| s.may_topic(Op::Delete, name);
            let mut denied = Vec::new();
            let names = std::mem::take(&mut req.topic_names);
            for name in names {
                if may(&name) {
                    req.topic_names.push(name);
                } else {
                    denied.push(
                        delete_topics_response::DeletableTopicResult::default()
                            .with_name(Some(name))
                            .with_error_code(TOPIC_DENIED),
                    );
                }
            }
            let states = std::mem::take(&mut req.topics);
            for state in states {
                let name = match &state.name {
                    Some(n) => Some(n.0.to_string()),
                    None => topic_name_of(broker, state.topic_id),
                };
                // An id this broker does not know is the handler's to answer (UNKNOWN_TOPIC_ID).
                if name.as_deref().is_none_or(may) {
                    req.topics.push(state);
                } else {
                    denied.push(
                        delete_topics_response::DeletableTopicResult::default()
                            .with_name(state.name)
                            .with_topic_id(state.topic_id)
                            .with_error_code(TOPIC_DENIED),
                    );
                }
            }
            if denied.is_empty() {
                return Gate::Pass(Rq::DeleteTopics(req), None);
            }
            Gate::Pass(
                Rq::DeleteTopics(req),
                patch(move |r, _| {
                    if let ResponseKind::DeleteTopics(r) = r {
                        r.responses.extend(denied);
                    }
                }),
            )
        }
        Rq::CreatePartitions(mut req) => {
            let (ok, denied) = split(std::mem::take(&mut req.topics), |t| {
                s.may_topic(Op::Alter, &t.name)
            });
            req.topics = ok;
            if denied.is_empty() {
                return Gate::Pass(Rq::CreatePartitions(req), None);
            }
            let denied: Vec<_> = denied
                .into_iter()
                .map(|t| {
                    create_partitions_response::CreatePartitionsTopicResult::default()
                        .with_error_message(denied_message(&format!(
                            "ALTER on topic {}",
                            t.name.0.as_str()
                        )))
                        .with_name(t.name)
                        .with_error_code(TOPIC_DENIED)
                })
                .collect();
            Gate::Pass(
                Rq::CreatePartitions(req),
                patch(move |r, _| {
                    if let ResponseKind::CreatePartitions(r) = r {
                        r.results.extend(denied);
                    }
                }),
            )
        }
        Rq::DescribeConfigs(mut req) => {
            let (ok, denied) = split(std::mem::take(&mut req.resources), |r| {
                may_config(s, Op::DescribeConfigs, r.resource_type, &r.resource_name)
            });
            req.resources = ok;
            if denied.is_empty() {
                return Gate::Pass(Rq::DescribeConfigs(req), None);
            }
            let denied: Vec<_> = denied
                .into_iter()
                .map(|r| {
                    describe_configs_response::DescribeConfigsResult::default()
                        .with_error_code(config_denied_code(r.resource_type))
                        .with_error_message(denied_message("DESCRIBE_CONFIGS"))
                        .with_resource_type(r.resource_type)
                        .with_resource_name(r.resource_name)
                })
                .collect();
            Gate::Pass(
                Rq::DescribeConfigs(req),
                patch(move |r, _| {
                    if let ResponseKind::DescribeConfigs(r) = r {
                        r.results.extend(denied);
                    }
                }),
            )
        }
        Rq::AlterConfigs(mut req) => {
            let (ok, denied) = split(std::mem::take(&mut req.resources), |r| {
                may_config(s, Op::AlterConfigs, r.resource_type, &r.resource_name)
            });
            req.resources = ok;
            let denied: Vec<_> = denied
                .into_iter()
                .map(|r| alter_denied(r.resource_type, r.resource_name))
                .collect();
            if denied.is_empty() {
                return Gate::Pass(Rq::AlterConfigs(req), None);
            }
            Gate::Pass(
                Rq::AlterConfigs(req),
                patch(move |r, _| {
                    if let ResponseKind::AlterConfigs(r) = r {
                        r.responses.extend(denied);
                    }
                }),
            )
        }
        Rq::IncrementalAlterConfigs(mut req) => {
            let (ok, denied) = split(std::mem::take(&mut req.resources), |r| {
                may_config(s, Op::AlterConfigs, r.resource_type, &r.resource_name)
            });
            req.resources = ok;
            let denied: Vec<_> = denied
                .into_iter()
                .map(|r| {
                    let a = alter_denied(r.resource_type, r.resource_name);
                    incremental_alter_configs_response::AlterConfigsResourceResponse::default()
                        .with_error_code(a.error_code)
                        .with_error_message(a.error_message)
                        .with_resource_type(a.resource_type)
                        .with_resource_name(a.resource_name)
                })
                .collect();
            if denied.is_empty() {
                return Gate::Pass(Rq::IncrementalAlterConfigs(req), None);
            }
            Gate::Pass(
                Rq::IncrementalAlterConfigs(req),
                patch(move |r, _| {
                    if let ResponseKind::IncrementalAlterConfigs(r) = r {
                        r.responses.extend(denied);
                    }
                }),
            )
        }
        Rq::DescribeCluster(req) => {
            let asked = req.include_cluster_authorized_operations;
            Gate::Pass(
                Rq::DescribeCluster(req),
                patch(move |r, s| {
                    if let ResponseKind::DescribeCluster(r) = r
                        && asked
                    {
                        r.cluster_authorized_operations = s.operations(Rt::Cluster, CLUSTER);
                    }
                }),
            )
        }
        Rq::InitProducerId(req) => {
            let allowed = match &req.transactional_id {
                Some(txn) => s.may(Op::Write, Rt::TransactionalId, txn),
                None => {
                    s.may_cluster(Op::IdempotentWrite)
                        || s.authorizer
                            .allows_any(&s.principal, &s.host, Op::Write, Rt::Topic)
                }
            };
            if allowed {
                return Gate::Pass(Rq::InitProducerId(req), None);
            }
            let code = if req.transactional_id.is_some() {
                TXN_DENIED
            } else {
                CLUSTER_DENIED
            };
            Gate::Answer(ResponseKind::InitProducerId(
                InitProducerIdResponse::default()
                    .with_error_code(code)
                    .with_producer_id(ProducerId(-1))
                    .with_producer_epoch(-1),
            ))
        }
        Rq::FindCoordinator(mut req) => {
            let may_key = |key_type: i8, key: &str| match key_type {
                KEY_GROUP => s.may_group(Op::Describe, key),
                KEY_TRANSACTION => s.may(Op::Describe, Rt::TransactionalId, key),
                // An unknown key type is the handler's to refuse.
                _ => true,
            };
            let code = if req.key_type == KEY_TRANSACTION {
                TXN_DENIED
            } else {
                GROUP_DENIED
            };
            if version < 4 {
                if may_key(req.key_type, &req.key) {
                    return Gate::Pass(Rq::FindCoordinator(req), None);
                }
                return Gate::Answer(ResponseKind::FindCoordinator(
                    FindCoordinatorResponse::default()
                        .with_error_code(code)
                        .with_error_message(denied_message("DESCRIBE on the coordinator key"))
                        .with_node_id(BrokerId(-1))
                        .with_host(StrBytes::from_static_str(""))
                        .with_port(-1),
                ));
            }
            let key_type = req.key_type;
            let (ok, denied) = split(std::mem::take(&mut req.coordinator_keys), |k| {
                may_key(key_type, k)
            });
            req.coordinator_keys = ok;
            let denied: Vec<_> = denied
                .into_iter()
                .map(|key| {
                    find_coordinator_response::Coordinator::default()
                        .with_key(key)
                        .with_node_id(BrokerId(-1))
                        .with_host(StrBytes::from_static_str(""))
                        .with_port(-1)
                        .with_error_code(code)
                })
                .collect();
            if denied.is_empty() {
                return Gate::Pass(Rq::FindCoordinator(req), None);
            }
            if req.coordinator_keys.is_empty() {
                return Gate::Answer(ResponseKind::FindCoordinator(
                    FindCoordinatorResponse::default().with_coordinators(denied),
                ));
            }
            Gate::Pass(
                Rq::FindCoordinator(req),
                patch(move |r, _| {
                    if let ResponseKind::FindCoordinator(r) = r {
                        r.coordinators.extend(denied);
                    }
                }),
            )
        }
        Rq::JoinGroup(req) => {
            if s.may_group(Op::Read, &req.group_id) {
                return Gate::Pass(Rq::JoinGroup(req), None);
            }
            Gate::Answer(ResponseKind::JoinGroup(
                JoinGroupResponse::default()
                    .with_error_code(GROUP_DENIED)
                    .with_generation_id(-1)
                    .with_member_id(req.member_id),
            ))
        }
        Rq::SyncGroup(req) => {
            if s.may_group(Op::Read, &req.group_id) {
                return Gate::Pass(Rq::SyncGroup(req), None);
            }
            Gate::Answer(ResponseKind::SyncGroup(
                SyncGroupResponse::default().with_error_code(GROUP_DENIED),
            ))
        }
        Rq::Heartbeat(req) => {
            if s.may_group(Op::Read, &req.group_id) {
                return Gate::Pass(Rq::Heartbeat(req), None);
            }
            Gate::Answer(ResponseKind::Heartbeat(
                HeartbeatResponse::default().with_error_code(GROUP_DENIED),
            ))
        }
        Rq::LeaveGroup(req) => {
            if s.may_group(Op::Read, &req.group_id) {
                return Gate::Pass(Rq::LeaveGroup(req), None);
            }
            Gate::Answer(ResponseKind::LeaveGroup(
                LeaveGroupResponse::default().with_error_code(GROUP_DENIED),
            ))
        }
        Rq::OffsetCommit(req) => offset_commit(s, req),
        Rq::OffsetFetch(req) => offset_fetch(s, req, version),
        Rq::OffsetDelete(mut req) => {
            if !s.may_group(Op::Delete, &req.group_id) {
                return Gate::Answer(ResponseKind::OffsetDelete(
                    OffsetDeleteResponse::default().with_error_code(GROUP_DENIED),
                ));
            }
            let (ok, denied) = split(std::mem::take(&mut req.topics), |t| {
                s.may_topic(Op::Read, &t.name)
            });
            req.topics = ok;
            if denied.is_empty() {
                return Gate::Pass(Rq::OffsetDelete(req), None);
            }
            let denied: Vec<_> = denied
                .into_iter()
                .map(|t| {
                    offset_delete_response::OffsetDeleteResponseTopic::default()
                        .with_name(t.name)
                        .with_partitions(
                            t.partitions
                                .iter()
                                .map(|p| {
                                    offset_delete_response::OffsetDeleteResponsePartition::default()
                                        .with_partition_index(p.partition_index)
                                        .with_error_code(TOPIC_DENIED)
                                })
                                .collect(),
                        )
                })
                .collect();
            Gate::Pass(
                Rq::OffsetDelete(req),
                patch(move |r, _| {
                    if let ResponseKind::OffsetDelete(r) = r {
                        r.topics.extend(denied);
                    }
                }),
            )
        }
        Rq::ListGroups(req) => {
            if s.may_cluster(Op::Describe) {
                return Gate::Pass(Rq::ListGroups(req), None);
            }
            Gate::Pass(
                Rq::ListGroups(req),
                patch(|r, s| {
                    if let ResponseKind::ListGroups(r) = r {
                        r.groups.retain(|g| s.may_group(Op::Describe, &g.group_id));
                    }
                }),
            )
        }
        Rq::DescribeGroups(req) => {
            let asked = req.include_authorized_operations;
            Gate::Pass(
                Rq::DescribeGroups(req),
                patch(move |r, s| {
                    let ResponseKind::DescribeGroups(r) = r else {
                        return;
                    };
                    for g in &mut r.groups {
                        if !s.may_group(Op::Describe, &g.group_id) {
                            *g = describe_groups_response::DescribedGroup::default()
                                .with_group_id(std::mem::take(&mut g.group_id))
                                .with_error_code(GROUP_DENIED)
                                .with_authorized_operations(i32::MIN);
                        } else if asked {
                            g.authorized_operations = s.operations(Rt::Group, &g.group_id);
                        }
                    }
                }),
            )
        }
        Rq::DeleteGroups(mut req) => {
            let (ok, denied) = split(std::mem::take(&mut req.groups_names), |g| {
                s.may_group(Op::Delete, g)
            });
            req.groups_names = ok;
            if denied.is_empty() {
                return Gate::Pass(Rq::DeleteGroups(req), None);
            }
            let denied: Vec<_> = denied
                .into_iter()
                .map(|g| {
                    delete_groups_response::DeletableGroupResult::default()
                        .with_group_id(g)
                        .with_error_code(GROUP_DENIED)
                })
                .collect();
            Gate::Pass(
                Rq::DeleteGroups(req),
                patch(move |r, _| {
                    if let ResponseKind::DeleteGroups(r) = r {
                        r.results.extend(denied);
                    }
                }),
            )
        }
        Rq::ConsumerGroupHeartbeat(req) => {
            let code = if !s.may_group(Op::Read, &req.group_id) {
                GROUP_DENIED
            } else if req
                .subscribed_topic_names
                .iter()
                .flatten()
                .any(|t| !s.may_topic(Op::Describe, t))
            {
                TOPIC_DENIED
            } else {
                return Gate::Pass(Rq::ConsumerGroupHeartbeat(req), None);
            };
            Gate::Answer(ResponseKind::ConsumerGroupHeartbeat(
                ConsumerGroupHeartbeatResponse::default()
                    .with_error_code(code)
                    .with_error_message(denied_message(if code == GROUP_DENIED {
                        "READ on the group"
                    } else {
                        "DESCRIBE on a subscribed topic"
                    }))
                    .with_member_epoch(-1),
            ))
        }
        Rq::ConsumerGroupDescribe(req) => {
            let asked = req.include_authorized_operations;
            Gate::Pass(
                Rq::ConsumerGroupDescribe(req),
                patch(move |r, s| {
                    let ResponseKind::ConsumerGroupDescribe(r) = r else {
                        return;
                    };
                    for g in &mut r.groups {
                        if !s.may_group(Op::Describe, &g.group_id) {
                            *g = consumer_group_describe_response::DescribedGroup::default()
                                .with_group_id(std::mem::take(&mut g.group_id))
                                .with_error_code(GROUP_DENIED)
                                .with_authorized_operations(i32::MIN);
                        } else if asked {
                            g.authorized_operations = s.operations(Rt::Group, &g.group_id);
                        }
                    }
                }),
            )
        }
        Rq::DescribeClientQuotas(req) => {
            if s.may_cluster(Op::DescribeConfigs) {
                return Gate::Pass(Rq::DescribeClientQuotas(req), None);
            }
            Gate::Answer(ResponseKind::DescribeClientQuotas(
                DescribeClientQuotasResponse::default()
                    .with_error_code(CLUSTER_DENIED)
                    .with_error_message(denied_message("DESCRIBE_CONFIGS on the cluster")),
            ))
        }
        Rq::AlterClientQuotas(req) => {
            if s.may_cluster(Op::AlterConfigs) {
                return Gate::Pass(Rq::AlterClientQuotas(req), None);
            }
            let message = denied_message("ALTER_CONFIGS on the cluster");
            Gate::Answer(ResponseKind::AlterClientQuotas(
                crate::handlers::quotas::answer(&req, |_| Some((CLUSTER_DENIED, message.clone()))),
            ))
        }
        Rq::CreateAcls(req) => {
            if s.may_cluster(Op::Alter) {
                return Gate::Pass(Rq::CreateAcls(req), None);
            }
            let results = req
                .creations
                .iter()
                .map(|_| {
                    create_acls_response::AclCreationResult::default()
                        .with_error_code(CLUSTER_DENIED)
                        .with_error_message(denied_message("ALTER on the cluster"))
                })
                .collect();
            Gate::Answer(ResponseKind::CreateAcls(
                CreateAclsResponse::default().with_results(results),
            ))
        }
        Rq::DescribeAcls(req) => {
            if s.may_cluster(Op::Describe) {
                return Gate::Pass(Rq::DescribeAcls(req), None);
            }
            Gate::Answer(ResponseKind::DescribeAcls(
                DescribeAclsResponse::default()
                    .with_error_code(CLUSTER_DENIED)
                    .with_error_message(denied_message("DESCRIBE on the cluster")),
            ))
        }
        Rq::DeleteAcls(req) => {
            if s.may_cluster(Op::Alter) {
                return Gate::Pass(Rq::DeleteAcls(req), None);
            }
            let results = req
                .filters
                .iter()
                .map(|_| {
                    delete_acls_response::DeleteAclsFilterResult::default()
                        .with_error_code(CLUSTER_DENIED)
                        .with_error_message(denied_message("ALTER on the cluster"))
                })
                .collect();
            Gate::Answer(ResponseKind::DeleteAcls(
                DeleteAclsResponse::default().with_filter_results(results),
            ))
        }
        Rq::DescribeUserScramCredentials(req) => {
            if s.may_cluster(Op::Describe) {
                return Gate::Pass(Rq::DescribeUserScramCredentials(req), None);
            }
            Gate::Answer(ResponseKind::DescribeUserScramCredentials(
                DescribeUserScramCredentialsResponse::default()
                    .with_error_code(CLUSTER_DENIED)
                    .with_error_message(denied_message("DESCRIBE on the cluster")),
            ))
        }
        Rq::AlterUserScramCredentials(req) => {
            if s.may_cluster(Op::Alter) {
                return Gate::Pass(Rq::AlterUserScramCredentials(req), None);
            }
            let users: std::collections::BTreeSet<_> = req
                .deletions
                .iter()
                .map(|d| d.name.clone())
                .chain(req.upsertions.iter().map(|u| u.name.clone()))
                .collect();
            let results = users
                .into_iter()
                .map(|user| {
                    alter_user_scram_credentials_response::AlterUserScramCredentialsResult::default(
                    )
                    .with_user(user)
                    .with_error_code(CLUSTER_DENIED)
                    .with_error_message(denied_message("ALTER on the cluster"))
                })
                .collect();
            Gate::Answer(ResponseKind::AlterUserScramCredentials(
                AlterUserScramCredentialsResponse::default().with_results(results),
            ))
        }
        Rq::ShareGroupHeartbeat(req) => {
            let code = if !s.may_group(Op::Read, &req.group_id) {
                GROUP_DENIED
            } else if req
                .subscribed_topic_names
                .iter()
                .flatten()
                .any(|t| !s.may_topic(Op::Describe, t))
            {
                TOPIC_DENIED
            } else {
                return Gate::Pass(Rq::ShareGroupHeartbeat(req), None);
            };
            Gate::Answer(ResponseKind::ShareGroupHeartbeat(
                ShareGroupHeartbeatResponse::default()
                    .with_error_code(code)
                    .with_error_message(denied_message(if code == GROUP_DENIED {
                        "READ on the group"
                    } else {
                        "DESCRIBE on a subscribed topic"
                    }))
                    .with_member_epoch(-1),
            ))
        }
        Rq::ShareGroupDescribe(req) => {
            let asked = req.include_authorized_operations;
            Gate::Pass(
                Rq::ShareGroupDescribe(req),
                patch(move |r, s| {
                    let ResponseKind::ShareGroupDescribe(r) = r else {
                        return;
                    };
                    for g in &mut r.groups {
                        if !s.may_group(Op::Describe, &g.group_id) {
                            *g = share_group_describe_response::DescribedGroup::default()
                                .with_group_id(std::mem::take(&mut g.group_id))
                                .with_error_code(GROUP_DENIED)
                                .with_authorized_operations(i32::MIN);
                        } else if asked {
                            g.authorized_operations = s.operations(Rt::Group, &g.group_id);
                        }
                    }
                }),
            )
        }
        Rq::ShareFetch(req) => {
            let topics = req.topics.iter().map(|t| t.topic_id);
            match share_denied(broker, s, req.group_id.as_ref(), topics) {
                None => Gate::Pass(Rq::ShareFetch(req), None),
                Some((code, what)) => Gate::Answer(ResponseKind::ShareFetch(
                    ShareFetchResponse::default()
                        .with_error_code(code)
                        .with_error_message(denied_message(what)),
                )),
            }
        }
        Rq::ShareAcknowledge(req) => {
            let topics = req.topics.iter().map(|t| t.topic_id);
            match share_denied(broker, s, req.group_id.as_ref(), topics) {
                None => Gate::Pass(Rq::ShareAcknowledge(req), None),
                Some((code, what)) => Gate::Answer(ResponseKind::ShareAcknowledge(
                    ShareAcknowledgeResponse::default()
                        .with_error_code(code)
                        .with_error_message(denied_message(what)),
                )),
            }
        }
        Rq::DescribeShareGroupOffsets(req) => Gate::Pass(
            Rq::DescribeShareGroupOffsets(req),
            patch(|r, s| {
                let ResponseKind::DescribeShareGroupOffsets(r) = r else {
                    return;
                };
                for g in &mut r.groups {
                    if !s.may_group(Op::Describe, &g.group_id) {
                        *g = describe_share_group_offsets_response::DescribeShareGroupOffsetsResponseGroup::default()
                            .with_group_id(std::mem::take(&mut g.group_id))
                            .with_error_code(GROUP_DENIED)
                            .with_error_message(denied_message("DESCRIBE on the group"));
                    } else {
                        g.topics
                            .retain(|t| s.may_topic(Op::Describe, &t.topic_name));
                    }
                }
            }),
        ),
        Rq::AlterShareGroupOffsets(req) => {
            let code = if !s.may_group(Op::Read, &req.group_id) {
                GROUP_DENIED
            } else if req
                .topics
                .iter()
                .any(|t| !s.may_topic(Op::Read, &t.topic_name))
            {
                TOPIC_DENIED
            } else {
                return Gate::Pass(Rq::AlterShareGroupOffsets(req), None);
            };
            Gate::Answer(ResponseKind::AlterShareGroupOffsets(
                AlterShareGroupOffsetsResponse::default()
                    .with_error_code(code)
                    .with_error_message(denied_message("READ on the group and its topics")),
            ))
        }
        Rq::DeleteShareGroupOffsets(req) => {
            let code = if !s.may_group(Op::Delete, &req.group_id) {
                GROUP_DENIED
            } else if req
                .topics
                .iter()
                .any(|t| !s.may_topic(Op::Read, &t.topic_name))
            {
                TOPIC_DENIED
            } else {
                return Gate::Pass(Rq::DeleteShareGroupOffsets(req), None);
            };
            Gate::Answer(ResponseKind::DeleteShareGroupOffsets(
                DeleteShareGroupOffsetsResponse::default()
                    .with_error_code(code)
                    .with_error_message(denied_message(
                        "DELETE on the group and READ on its topics",
                    )),
            ))
        }
        // ApiVersions, the SASL exchange: needed before anyone is known.
        other => Gate::Pass(other, None),
    }
}

/// Fetch: READ on each topic; a follower's fetch (replica id 0 or more) needs CLUSTER_ACTION,
/// which no client has reason to hold. `Err`: answer this at once (nothing left to fetch).
fn fetch(
    s: &Subject<'_>,
    mut req: FetchRequest,
) -> Result<(FetchRequest, Option<Patch>), FetchResponse> {
    let replica = req.replica_id.0.max(req.replica_state.replica_id.0);
    if replica >= 0 && !s.may_cluster(Op::ClusterAction) {
        return Err(FetchResponse::default()
            .with_error_code(CLUSTER_DENIED)
            .with_session_id(0));
    }
    let (ok, denied) = split(std::mem::take(&mut req.topics), |t| {
        s.may_topic(Op::Read, &t.topic)
    });
    req.topics = ok;
    if denied.is_empty() {
        return Ok((req, None));
    }
    let denied: Vec<_> = denied
        .into_iter()
        .map(|t| {
            fetch_response::FetchableTopicResponse::default()
                .with_partitions(
                    t.partitions
                        .iter()
                        .map(|p| {
                            fetch_response::PartitionData::default()
                                .with_partition_index(p.partition)
                                .with_error_code(TOPIC_DENIED)
                                .with_high_watermark(-1)
                                .with_last_stable_offset(-1)
                                .with_log_start_offset(-1)
                        })
                        .collect(),
                )
                .with_topic_id(t.topic_id)
                .with_topic(t.topic)
        })
        .collect();
    if req.topics.is_empty() {
        return Err(FetchResponse::default().with_responses(denied));
    }
    Ok((
        req,
        patch(move |r, _| {
            if let ResponseKind::Fetch(r) = r {
                r.responses.extend(denied);
            }
        }),
    ))
}

/// Metadata: DESCRIBE on each topic named (TOPIC_AUTHORIZATION_FAILED), CREATE on the cluster
/// or the topic for one it would auto-create (TOPIC_AUTHORIZATION_FAILED too, as Kafka
/// answers); for all topics, those the subject may not describe are left out.
fn metadata(broker: &Broker, s: &Subject<'_>, mut req: MetadataRequest) -> Gate {
    let cluster_ops = req.include_cluster_authorized_operations;
    let topic_ops = req.include_topic_authorized_operations;
    let mut denied: Vec<metadata_response::MetadataResponseTopic> = Vec::new();
    if let Some(topics) = req.topics.take() {
        let may_create_any = s.may_cluster(Op::Create);
        let auto_create = req.allow_auto_topic_creation && broker.config().auto_create_topics;
        let mut ok = Vec::with_capacity(topics.len());
        for t in topics {
            let Some(name) = t.name.as_ref().map(|n| n.0.to_string()) else {
                // Asked for by id: answered, then checked by name below.
                ok.push(t);
                continue;
            };
            let allowed = s.may_topic(Op::Describe, &name)
                && (!auto_create
                    || may_create_any
                    || broker.topics().get(&name).is_some()
                    || s.may_topic(Op::Create, &name));
            if allowed {
                ok.push(t);
            } else {
                denied.push(
                    metadata_response::MetadataResponseTopic::default()
                        .with_error_code(TOPIC_DENIED)
                        .with_name(t.name)
                        .with_topic_authorized_operations(i32::MIN),
                );
            }
        }
        req.topics = Some(ok);
    }
    let listing_all = req.topics.is_none();
    Gate::Pass(
        RequestKind::Metadata(req),
        patch(move |r, s| {
            let ResponseKind::Metadata(r) = r else {
                return;
            };
            let mut topics = Vec::with_capacity(r.topics.len() + denied.len());
            for mut t in r.topics.drain(..) {
                // A name the handler did not know (an unknown id) is its error to answer.
                let Some(name) = t.name.as_ref().map(|n| n.0.to_string()) else {
                    topics.push(t);
                    continue;
                };
                if s.may_topic(Op::Describe, &name) {
                    if topic_ops {
                        t.topic_authorized_operations = s.operations(Rt::Topic, &name);
                    }
                    topics.push(t);
                } else if !listing_all {
                    // Asked for by id: refused without naming it.
                    topics.push(
                        metadata_response::MetadataResponseTopic::default()
                            .with_error_code(TOPIC_DENIED)
                            .with_topic_id(t.topic_id)
                            .with_topic_authorized_operations(i32::MIN),
                    );
                }
            }
            topics.extend(denied);
            r.topics = topics;
            if cluster_ops {
                r.cluster_authorized_operations = s.operations(Rt::Cluster, CLUSTER);
            }
        }),
    )
}

/// DescribeTopicPartitions: DESCRIBE on each topic. Listing every topic, only those the
/// subject may describe are asked for (so that paging counts only them; none at all is an
/// empty answer); named ones it may not are answered TOPIC_AUTHORIZATION_FAILED.
fn describe_topic_partitions(
    broker: &Broker,
    s: &Subject<'_>,
    mut req: DescribeTopicPartitionsRequest,
) -> Gate {
    use describe_topic_partitions_request::TopicRequest;
    use describe_topic_partitions_response::DescribeTopicPartitionsResponseTopic as Topic;
    let mut denied = Vec::new();
    if req.topics.is_empty() {
        req.topics = broker
            .topics()
            .all()
            .iter()
            .filter(|t| s.may_topic(Op::Describe, &t.name))
            .map(|t| TopicRequest::default().with_name(TopicName(str_bytes(t.name.clone()))))
            .collect();
        if req.topics.is_empty() {
            return Gate::Answer(ResponseKind::DescribeTopicPartitions(
                DescribeTopicPartitionsResponse::default(),
            ));
        }
    } else {
        let (ok, refused) = split(std::mem::take(&mut req.topics), |t| {
            s.may_topic(Op::Describe, &t.name)
        });
        req.topics = ok;
        denied = refused
            .into_iter()
            .map(|t| {
                Topic::default()
                    .with_name(Some(t.name))
                    .with_error_code(TOPIC_DENIED)
                    .with_topic_authorized_operations(i32::MIN)
            })
            .collect();
        if req.topics.is_empty() {
            return Gate::Answer(ResponseKind::DescribeTopicPartitions(
                DescribeTopicPartitionsResponse::default().with_topics(denied),
            ));
        }
    }
    Gate::Pass(
        RequestKind::DescribeTopicPartitions(req),
        patch(move |r, s| {
            let ResponseKind::DescribeTopicPartitions(r) = r else {
                return;
            };
            for t in &mut r.topics {
                if t.error_code == 0
                    && let Some(name) = &t.name
                {
                    t.topic_authorized_operations = s.operations(Rt::Topic, name);
                }
            }
            r.topics.extend(denied);
            r.topics.sort_by(|a, b| a.name.cmp(&b.name));
        }),
    )
}

fn offset_commit(s: &Subject<'_>, mut req: OffsetCommitRequest) -> Gate {
    let partitions_with = |t: &offset_commit_request::OffsetCommitRequestTopic, code| {
        offset_commit_response::OffsetCommitResponseTopic::default()
            .with_topic_id(t.topic_id)
            .with_name(t.name.clone())
            .with_partitions(
                t.partitions
                    .iter()
                    .map(|p| {
                        offset_commit_response::OffsetCommitResponsePartition::default()
                            .with_partition_index(p.partition_index)
                            .with_error_code(code)
                    })
                    .collect(),
            )
    };
    if !s.may_group(Op::Read, &req.group_id) {
        let topics = req
            .topics
            .iter()
            .map(|t| partitions_with(t, GROUP_DENIED))
            .collect();
        return Gate::Answer(ResponseKind::OffsetCommit(
            OffsetCommitResponse::default().with_topics(topics),
        ));
    }
    let (ok, denied) = split(std::mem::take(&mut req.topics), |t| {
        s.may_topic(Op::Read, &t.name)
    });
    req.topics = ok;
    if denied.is_empty() {
        return Gate::Pass(RequestKind::OffsetCommit(req), None);
    }
    let denied: Vec<_> = denied
        .iter()
        .map(|t| partitions_with(t, TOPIC_DENIED))
        .collect();
    Gate::Pass(
        RequestKind::OffsetCommit(req),
        patch(move |r, _| {
            if let ResponseKind::OffsetCommit(r) = r {
                r.topics.extend(denied);
            }
        }),
    )
}

/// OffsetFetch: DESCRIBE on the group (GROUP_AUTHORIZATION_FAILED), and on each topic named
/// (TOPIC_AUTHORIZATION_FAILED); for all of a group's topics, those the subject may not
/// describe are left out.
fn offset_fetch(s: &Subject<'_>, mut req: OffsetFetchRequest, version: i16) -> Gate {
    if version < 8 {
        if !s.may_group(Op::Describe, &req.group_id) {
            return Gate::Answer(ResponseKind::OffsetFetch(
                OffsetFetchResponse::default().with_error_code(GROUP_DENIED),
            ));
        }
        let mut denied = Vec::new();
        if let Some(topics) = req.topics.take() {
            let (ok, no) = split(topics, |t| s.may_topic(Op::Describe, &t.name));
            req.topics = Some(ok);
            denied = no
                .into_iter()
                .map(|t| {
                    offset_fetch_response::OffsetFetchResponseTopic::default()
                        .with_partitions(
                            t.partition_indexes
                                .iter()
                                .map(|&p| {
                                    offset_fetch_response::OffsetFetchResponsePartition::default()
                                        .with_partition_index(p)
                                        .with_committed_offset(-1)
                                        .with_committed_leader_epoch(-1)
                                        .with_error_code(TOPIC_DENIED)
                                })
                                .collect(),
                        )
                        .with_name(t.name)
                })
                .collect();
        }
        return Gate::Pass(
            RequestKind::OffsetFetch(req),
            patch(move |r, s| {
                if let ResponseKind::OffsetFetch(r) = r {
                    r.topics.retain(|t| s.may_topic(Op::Describe, &t.name));
                    r.topics.extend(denied);
                }
            }),
        );
    }
    // v8+: a batch of groups, each refused or filtered on its own.
    let mut denied_groups = Vec::new();
    let mut denied_topics: Vec<(
        GroupId,
        Vec<offset_fetch_response::OffsetFetchResponseTopics>,
    )> = Vec::new();
    let groups = std::mem::take(&mut req.groups);
    for mut g in groups {
        if !s.may_group(Op::Describe, &g.group_id) {
            denied_groups.push(
                offset_fetch_response::OffsetFetchResponseGroup::default()
                    .with_group_id(g.group_id)
                    .with_error_code(GROUP_DENIED),
            );
            continue;
        }
        if let Some(topics) = g.topics.take() {
            let (ok, no) = split(topics, |t| s.may_topic(Op::Describe, &t.name));
            g.topics = Some(ok);
            if !no.is_empty() {
                let topics = no
                    .into_iter()
                    .map(|t| {
                        offset_fetch_response::OffsetFetchResponseTopics::default()
                            .with_topic_id(t.topic_id)
                            .with_partitions(
                                t.partition_indexes
                                    .iter()
                                    .map(|&p| {
                                        offset_fetch_response::OffsetFetchResponsePartitions::default()
                                            .with_partition_index(p)
                                            .with_committed_offset(-1)
                                            .with_committed_leader_epoch(-1)
                                            .with_error_code(TOPIC_DENIED)
                                    })
                                    .collect(),
                            )
                            .with_name(t.name)
                    })
                    .collect();
                denied_topics.push((g.group_id.clone(), topics));
            }
        }
        req.groups.push(g);
    }
    if req.groups.is_empty() {
        return Gate::Answer(ResponseKind::OffsetFetch(
            OffsetFetchResponse::default().with_groups(denied_groups),
        ));
    }
    Gate::Pass(
        RequestKind::OffsetFetch(req),
        patch(move |r, s| {
            let ResponseKind::OffsetFetch(r) = r else {
                return;
            };
            for g in &mut r.groups {
                g.topics.retain(|t| s.may_topic(Op::Describe, &t.name));
                if let Some((_, topics)) =
                    denied_topics.iter_mut().find(|(id, _)| *id == g.group_id)
                {
                    g.topics.append(topics);
                }
            }
            r.groups.extend(denied_groups);
        }),
    )
}

fn may_config(s: &Subject<'_>, op: Op, resource_type: i8, name: &str) -> bool {
    match resource_type {
        CONFIG_TOPIC => s.may_topic(op, name),
        CONFIG_GROUP => s.may_group(op, name),
        CONFIG_BROKER | CONFIG_BROKER_LOGGER => s.may_cluster(op),
        // Another type is the handler's to refuse (INVALID_REQUEST).
        _ => true,
    }
}

fn config_denied_code(resource_type: i8) -> i16 {
    if resource_type == CONFIG_TOPIC {
        TOPIC_DENIED
    } else if resource_type == CONFIG_GROUP {
        GROUP_DENIED
    } else {
        CLUSTER_DENIED
    }
}

fn alter_denied(
    resource_type: i8,
    resource_name: StrBytes,
) -> alter_configs_response::AlterConfigsResourceResponse {
    alter_configs_response::AlterConfigsResourceResponse::default()
        .with_error_code(config_denied_code(resource_type))
        .with_error_message(denied_message("ALTER_CONFIGS"))
        .with_resource_type(resource_type)
        .with_resource_name(resource_name)
}

/// The name of the topic with this id, if this broker has it.
fn topic_name_of(broker: &Broker, id: Uuid) -> Option<String> {
    broker
        .topics()
        .all()
        .into_iter()
        .find(|t| t.id == id)
        .map(|t| t.name.clone())
}

/// Why a ShareFetch or ShareAcknowledge is refused: READ on its group and on every topic it
/// names (by id; an id this broker does not know is the handler's to answer).
fn share_denied(
    broker: &Broker,
    s: &Subject<'_>,
    group: Option<&GroupId>,
    topics: impl Iterator<Item = Uuid>,
) -> Option<(i16, &'static str)> {
    if group.is_some_and(|g| !s.may_group(Op::Read, g)) {
        return Some((GROUP_DENIED, "READ on the group"));
    }
    for id in topics {
        if let Some(name) = topic_name_of(broker, id)
            && !s.may_topic(Op::Read, &name)
        {
            return Some((TOPIC_DENIED, "READ on a topic"));
        }
    }
    None
}
