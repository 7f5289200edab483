//! Classic group APIs and group administration: FindCoordinator, JoinGroup, SyncGroup,
//! Heartbeat, LeaveGroup, ListGroups, DescribeGroups, DeleteGroups. Each converts the wire
//! request into the coordinator's types (`groups::classic`), and the answer back. Refusals
//! are [`GroupError`]s, turned into Kafka codes by [`GroupError::code`] alone.

use sluice_protocol::kafka_protocol::messages::delete_groups_response::DeletableGroupResult;
use sluice_protocol::kafka_protocol::messages::describe_groups_response::{
    DescribedGroup, DescribedGroupMember,
};
use sluice_protocol::kafka_protocol::messages::find_coordinator_response::Coordinator;
use sluice_protocol::kafka_protocol::messages::join_group_response::JoinGroupResponseMember;
use sluice_protocol::kafka_protocol::messages::leave_group_response::MemberResponse;
use sluice_protocol::kafka_protocol::messages::list_groups_response::ListedGroup;
use sluice_protocol::kafka_protocol::messages::{
    BrokerId, DeleteGroupsRequest, DeleteGroupsResponse, DescribeGroupsRequest,
    DescribeGroupsResponse, FindCoordinatorRequest, FindCoordinatorResponse, GroupId,
    HeartbeatRequest, HeartbeatResponse, JoinGroupRequest, JoinGroupResponse, LeaveGroupRequest,
    LeaveGroupResponse, ListGroupsRequest, ListGroupsResponse, SyncGroupRequest, SyncGroupResponse,
};
use sluice_protocol::kafka_protocol::protocol::StrBytes;

use super::str_bytes;
use crate::{Broker, errors};
use sluice_groups::classic;
use sluice_groups::errors::{GroupError, NONE, result_code};

/// FindCoordinator key types.
const KEY_GROUP: i8 = 0;
const KEY_TRANSACTION: i8 = 1;

/// DescribeGroups' `authorized_operations` when the client did not ask for them.
const OPERATIONS_NOT_ASKED: i32 = i32::MIN;

fn opt(s: &Option<StrBytes>) -> Option<String> {
    s.as_ref().map(|s| s.to_string())
}

/// The node FindCoordinator names for one key, or why it names none: a Kafka error code and
/// the message.
type Located = Result<(i32, String, i32), (i16, String)>;

/// FindCoordinator: with one broker, this broker coordinates every group; in cluster mode
/// the metadata store names the broker (the holder of the group's coordinator lease, else
/// the one preferred among the live brokers), and the live-broker list gives its address.
/// This broker is named by the address of `listener`, the one the request came in on.
pub async fn find_coordinator(
    broker: &Broker,
    req: FindCoordinatorRequest,
    version: i16,
    listener: usize,
) -> FindCoordinatorResponse {
    let keys: Vec<StrBytes> = if version >= 4 {
        req.coordinator_keys.clone()
    } else {
        vec![req.key.clone()]
    };
    let located = futures::future::join_all(
        keys.iter()
            .map(|key| locate(broker, req.key_type, key.as_str(), listener)),
    )
    .await;
    let fields = |located: Located| match located {
        Ok((node_id, host, port)) => (BrokerId(node_id), str_bytes(host), port, NONE, None),
        Err((code, message)) => (
            BrokerId(-1),
            str_bytes(""),
            -1,
            code,
            Some(str_bytes(message)),
        ),
    };
    if version >= 4 {
        let coordinators = keys
            .into_iter()
            .zip(located)
            .map(|(key, located)| {
                let (node_id, host, port, error, message) = fields(located);
                Coordinator::default()
                    .with_key(key)
                    .with_node_id(node_id)
                    .with_host(host)
                    .with_port(port)
                    .with_error_code(error)
                    .with_error_message(message)
            })
            .collect();
        FindCoordinatorResponse::default().with_coordinators(coordinators)
    } else {
        let located = located.into_iter().next().unwrap_or_else(|| {
            Err(refused(GroupError::InvalidRequest(
                "no coordinator key".to_owned(),
            )))
        });
        let (node_id, host, port, error, message) = fields(located);
        FindCoordinatorResponse::default()
            .with_error_code(error)
            .with_error_message(message)
            .with_node_id(node_id)
            .with_host(host)
            .with_port(port)
    }
}

fn refused(e: GroupError) -> (i16, String) {
    (e.code(), e.to_string())
}

/// The coordinator of one FindCoordinator key. A transactional id has none: its refusal is
/// final for every client ([`errors::TRANSACTIONS_UNSUPPORTED`] says why that code).
async fn locate(broker: &Broker, key_type: i8, key: &str, listener: usize) -> Located {
    let invalid = match key_type {
        KEY_GROUP if key.is_empty() => "the group id is empty".to_owned(),
        KEY_GROUP => return locate_group(broker, key, listener).await.map_err(refused),
        KEY_TRANSACTION => return Err(transactions_unsupported(key)),
        other => format!("unknown coordinator key type {other}"),
    };
    Err(refused(GroupError::InvalidRequest(invalid)))
}

/// The refusal of a transaction coordinator lookup for `transactional_id`.
fn transactions_unsupported(transactional_id: &str) -> (i16, String) {
    tracing::debug!(
        transactional_id,
        "FindCoordinator for a transactional id refused: transactions are not supported"
    );
    (
        errors::TRANSACTIONS_UNSUPPORTED,
        format!(
            "transactions are not supported by Sluice yet (transactional id {transactional_id:?}); \
             producers without transactional.id, idempotent ones included, work"
        ),
    )
}

async fn locate_group(
    broker: &Broker,
    group_id: &str,
    listener: usize,
) -> Result<(i32, String, i32), GroupError> {
    let cfg = broker.config();
    let this = || {
        let (host, port) = cfg.advertised(listener);
        Ok((cfg.node_id, host, port))
    };
    let Some(meta) = broker.cluster() else {
        return this();
    };
    if group_id.contains('\0') {
        return Err(GroupError::UnstorableGroupId(format!(
            "group id {group_id:?} contains a NUL character, which the cluster's metadata \
             store cannot hold; use another group id"
        )));
    }
    let node_id = meta
        .find_coordinator(group_id.to_owned())
        .await
        .map_err(|e| GroupError::CoordinatorNotAvailable {
            group_id: group_id.to_owned(),
            source: sluice_groups::StoreError::Unavailable(Box::new(e)).into(),
        })?;
    if node_id == cfg.node_id {
        return this();
    }
    let live = meta.live_brokers();
    match live.iter().find(|n| n.node_id == node_id) {
        Some(node) => Ok((node.node_id, node.host.clone(), node.port)),
        // Named by the store but not (yet) in this broker's copy of the live list: the
        // client asks again shortly.
        None => Err(GroupError::CoordinatorNotAvailable {
            group_id: group_id.to_owned(),
            source: sluice_groups::StoreError::Unavailable(
                format!("broker {node_id} coordinates the group but is not in this broker's live-broker list yet").into(),
            )
            .into(),
        }),
    }
}

pub async fn join_group(
    broker: &Broker,
    req: JoinGroupRequest,
    version: i16,
    client_id: String,
    client_host: String,
) -> JoinGroupResponse {
    let group_id = req.group_id.0.to_string();
    let mut response = JoinGroupResponse::default()
        .with_member_id(req.member_id.clone())
        .with_generation_id(-1);
    if version < 7 {
        // Non-nullable before v7.
        response.protocol_name = Some(str_bytes(""));
    }
    if group_id.is_empty() {
        return response.with_error_code(GroupError::InvalidGroupId.code());
    }
    let join = classic::JoinRequest {
        member_id: req.member_id.to_string(),
        group_instance_id: opt(&req.group_instance_id),
        client_id,
        client_host,
        protocol_type: req.protocol_type.to_string(),
        protocols: req
            .protocols
            .into_iter()
            .map(|p| (p.name.to_string(), p.metadata))
            .collect(),
        session_timeout_ms: req.session_timeout_ms,
        rebalance_timeout_ms: if version == 0 {
            req.session_timeout_ms
        } else {
            req.rebalance_timeout_ms
        },
        require_known_member_id: version >= 4,
        reason: opt(&req.reason),
    };
    let result = broker.groups().join(&group_id, join).await;
    response.error_code = result.error_code();
    response.generation_id = result.generation_id;
    response.member_id = str_bytes(result.member_id);
    response.leader = str_bytes(result.leader);
    response.skip_assignment = result.skip_assignment && version >= 9;
    if version >= 7 {
        response.protocol_type = result.protocol_type.map(str_bytes);
        response.protocol_name = result.protocol_name.map(str_bytes);
    } else {
        response.protocol_name = Some(str_bytes(result.protocol_name.unwrap_or_default()));
    }
    response.members = result
        .members
        .into_iter()
        .map(|m| {
            JoinGroupResponseMember::default()
                .with_member_id(str_bytes(m.member_id))
                .with_group_instance_id(m.group_instance_id.map(str_bytes))
                .with_metadata(m.metadata)
        })
        .collect();
    response
}

pub async fn sync_group(broker: &Broker, req: SyncGroupRequest, version: i16) -> SyncGroupResponse {
    let group_id = req.group_id.0.to_string();
    if group_id.is_empty() {
        return SyncGroupResponse::default().with_error_code(GroupError::InvalidGroupId.code());
    }
    let sync = classic::SyncRequest {
        member_id: req.member_id.to_string(),
        group_instance_id: opt(&req.group_instance_id),
        generation_id: req.generation_id,
        protocol_type: opt(&req.protocol_type),
        protocol_name: opt(&req.protocol_name),
        assignments: req
            .assignments
            .into_iter()
            .map(|a| (a.member_id.to_string(), a.assignment))
            .collect(),
    };
    let result = broker.groups().sync(&group_id, sync).await;
    let mut response = SyncGroupResponse::default()
        .with_error_code(result.error_code())
        .with_assignment(result.assignment);
    if version >= 5 {
        response.protocol_type = result.protocol_type.map(str_bytes);
        response.protocol_name = result.protocol_name.map(str_bytes);
    }
    response
}

pub async fn heartbeat(broker: &Broker, req: HeartbeatRequest) -> HeartbeatResponse {
    let group_id = req.group_id.0.to_string();
    let outcome = if group_id.is_empty() {
        Err(GroupError::InvalidGroupId)
    } else {
        broker
            .groups()
            .heartbeat(
                &group_id,
                &req.member_id,
                req.group_instance_id.as_deref(),
                req.generation_id,
            )
            .await
    };
    HeartbeatResponse::default().with_error_code(result_code(&outcome))
}

pub async fn leave_group(
    broker: &Broker,
    req: LeaveGroupRequest,
    version: i16,
) -> LeaveGroupResponse {
    let group_id = req.group_id.0.to_string();
    if group_id.is_empty() {
        return LeaveGroupResponse::default().with_error_code(GroupError::InvalidGroupId.code());
    }
    let members: Vec<classic::LeavingMember> = if version >= 3 {
        req.members
            .iter()
            .map(|m| classic::LeavingMember {
                member_id: m.member_id.to_string(),
                group_instance_id: opt(&m.group_instance_id),
            })
            .collect()
    } else {
        vec![classic::LeavingMember {
            member_id: req.member_id.to_string(),
            group_instance_id: None,
        }]
    };
    let (outcome, outcomes) = broker.groups().leave(&group_id, &members).await;
    let code = result_code(&outcome);
    let codes: Vec<i16> = outcomes.iter().map(result_code).collect();
    if version >= 3 {
        let responses = members
            .into_iter()
            .zip(codes.iter().copied().chain(std::iter::repeat(code)))
            .map(|(m, c)| {
                MemberResponse::default()
                    .with_member_id(str_bytes(m.member_id))
                    .with_group_instance_id(m.group_instance_id.map(str_bytes))
                    .with_error_code(c)
            })
            .collect();
        LeaveGroupResponse::default()
            .with_error_code(code)
            .with_members(responses)
    } else {
        let member_code = codes.first().copied().unwrap_or(NONE);
        LeaveGroupResponse::default().with_error_code(if code != NONE { code } else { member_code })
    }
}

pub fn list_groups(broker: &Broker, req: ListGroupsRequest, version: i16) -> ListGroupsResponse {
    let matches = |filter: &[StrBytes], value: &str| {
        filter.is_empty() || filter.iter().any(|f| f.eq_ignore_ascii_case(value))
    };
    let groups = broker
        .groups()
        .list()
        .into_iter()
        .filter(|g| version < 4 || matches(&req.states_filter, g.state))
        .filter(|g| version < 5 || matches(&req.types_filter, g.group_type.name()))
        .map(|g| {
            ListedGroup::default()
                .with_group_id(GroupId(str_bytes(g.group_id)))
                .with_protocol_type(str_bytes(g.protocol_type))
                .with_group_state(str_bytes(g.state))
                .with_group_type(str_bytes(g.group_type.name()))
        })
        .collect();
    ListGroupsResponse::default().with_groups(groups)
}

pub async fn describe_groups(
    broker: &Broker,
    req: DescribeGroupsRequest,
    version: i16,
) -> DescribeGroupsResponse {
    let operations = if req.include_authorized_operations {
        0
    } else {
        OPERATIONS_NOT_ASKED
    };
    // Cluster mode: each group is described by its coordinator, which takes it first.
    let mut owned = Vec::with_capacity(req.groups.len());
    for id in &req.groups {
        owned.push(broker.groups().own_group(&id.0).await);
    }
    let groups = req
        .groups
        .into_iter()
        .zip(owned)
        .map(|(id, owned)| {
            let described = DescribedGroup::default()
                .with_group_id(id.clone())
                .with_authorized_operations(operations);
            match owned.and_then(|()| broker.groups().describe_classic(&id.0)) {
                Ok(Some(d)) => {
                    let members = d
                        .members
                        .into_iter()
                        .map(|m| {
                            DescribedGroupMember::default()
                                .with_member_id(str_bytes(m.member_id))
                                .with_group_instance_id(m.group_instance_id.map(str_bytes))
                                .with_client_id(str_bytes(m.client_id))
                                .with_client_host(str_bytes(m.client_host))
                                .with_member_metadata(m.metadata)
                                .with_member_assignment(m.assignment)
                        })
                        .collect();
                    described
                        .with_group_state(str_bytes(d.state.name()))
                        .with_protocol_type(str_bytes(d.protocol_type))
                        .with_protocol_data(str_bytes(d.protocol_name))
                        .with_members(members)
                }
                Ok(None) if version >= 6 => {
                    let missing = GroupError::GroupIdNotFound {
                        group_id: id.0.to_string(),
                        expected: None,
                    };
                    described
                        .with_error_code(missing.code())
                        .with_error_message(Some(str_bytes(missing.to_string())))
                        .with_group_state(str_bytes("Dead"))
                }
                // Before v6 an unknown group is described as Dead, without an error.
                Ok(None) => described.with_group_state(str_bytes("Dead")),
                Err(e) => described
                    .with_error_code(e.code())
                    .with_error_message((version >= 6).then(|| str_bytes(e.to_string())))
                    .with_group_state(str_bytes("Dead")),
            }
        })
        .collect();
    DescribeGroupsResponse::default().with_groups(groups)
}

pub async fn delete_groups(broker: &Broker, req: DeleteGroupsRequest) -> DeleteGroupsResponse {
    let ids: Vec<String> = req.groups_names.iter().map(|g| g.0.to_string()).collect();
    let outcomes = broker.groups().delete_groups(&ids).await;
    let results = req
        .groups_names
        .into_iter()
        .zip(outcomes)
        .map(|(id, outcome)| {
            DeletableGroupResult::default()
                .with_group_id(id)
                .with_error_code(result_code(&outcome))
        })
        .collect();
    DeleteGroupsResponse::default().with_results(results)
}
