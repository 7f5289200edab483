//! # Why a group request failed, and the one map from that to Kafka error codes
//!
//! Every refusal of the coordinator, of its state machines ([`crate::classic`],
//! [`crate::consumer`]) and of the broker's group handlers (the request-level checks done at
//! the wire edge) is a [`GroupError`]. Its message says what happened and what the client or
//! operator can do; a store failure keeps the [`StoreError`] as its source.
//!
//! [`GroupError::code`] is the only place in the crate (and in the broker's group handlers)
//! that turns an error into a Kafka error code. Several errors share a code because Kafka
//! answers them alike (a full group and a broker at its group limit are both
//! GROUP_MAX_SIZE_REACHED); keeping them apart here keeps their messages apart.

use std::fmt;
use std::sync::Arc;

use sluice_protocol::kafka_protocol::ResponseError;

use crate::{GroupType, StoreError};

/// Kafka's "no error".
pub const NONE: i16 = 0;

/// Why a group request (or one member or partition of it) was refused.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum GroupError {
    // Request checks at the wire edge.
    /// The request named no group.
    #[error("the group id is empty: name the consumer group")]
    InvalidGroupId,
    /// The request is malformed (Kafka's own wording where it has one).
    #[error("{0}")]
    InvalidRequest(String),
    /// OffsetCommit/OffsetDelete for a partition this broker does not have.
    #[error(
        "topic {topic} has no partition {partition}: create the topic (or the partition) first"
    )]
    UnknownTopicOrPartition { topic: String, partition: i32 },
    /// A committed offset's metadata string is longer than `offset.metadata.max.bytes`.
    #[error("offset metadata of {bytes} bytes is longer than the limit of {max_bytes} bytes")]
    OffsetMetadataTooLarge { bytes: usize, max_bytes: usize },

    // Which group.
    /// No such group; or (`expected`: the protocol a describe asked for) one of the other protocol.
    #[error("group {group_id} {}", not_found(*.expected))]
    GroupIdNotFound {
        group_id: String,
        expected: Option<GroupType>,
    },
    /// A request of one protocol for a group of the other one (`active`) that has members.
    #[error("group {group_id} is a {} group with active members", .active.name())]
    GroupTypeInUse { group_id: String, active: GroupType },
    /// A classic request for a KIP-848 group, or the reverse.
    #[error("group {group_id} is not a {} group", .expected.name())]
    NotGroupType {
        group_id: String,
        expected: GroupType,
    },
    /// DeleteGroups of a group that still has members.
    #[error("group {group_id} still has members: stop its consumers before deleting it")]
    NonEmptyGroup { group_id: String },
    /// OffsetDelete of a topic the group's members subscribe to.
    #[error("group {group_id} is subscribed to topic {topic}: its offsets are in use")]
    GroupSubscribedToTopic { group_id: String, topic: String },
    /// The coordinator dropped the group (deleted, or moved away) while the request ran.
    #[error(
        "group {group_id} is no longer loaded on this coordinator: find the coordinator again and retry"
    )]
    GroupDead { group_id: String },

    // Cluster mode: which broker coordinates the group.
    /// Another broker holds the group's coordinator lease (`coordinator`, when known), or
    /// this broker lost it while the request ran: the client asks FindCoordinator again.
    #[error("{}", not_coordinator(.group_id, *.coordinator))]
    NotCoordinator {
        group_id: String,
        coordinator: Option<i32>,
    },
    /// The shared group store did not answer while this broker tried to take the group over:
    /// retriable.
    #[error("cannot take over group {group_id} now: {source}; retry")]
    CoordinatorNotAvailable {
        group_id: String,
        #[source]
        source: SharedStoreError,
    },
    /// The shared group store cannot hold this group id.
    #[error("{0}")]
    UnstorableGroupId(String),

    // Limits.
    /// `group.max.size` / `group.consumer.max.size`: the group has all the members it may have.
    #[error("The consumer group has reached its maximum capacity of {members_max} members.")]
    GroupMaxSizeReached { members_max: usize },
    /// The broker keeps at most `groups_max` groups and has that many.
    #[error("this broker already has its maximum of {groups_max} groups")]
    GroupsMaxReached { groups_max: usize },
    /// JoinGroup's session timeout is outside `group.{min,max}.session.timeout.ms`.
    #[error("session timeout {timeout_ms} ms is outside the broker's range {min_ms}..={max_ms} ms")]
    InvalidSessionTimeout {
        timeout_ms: i32,
        min_ms: i32,
        max_ms: i32,
    },

    // Membership (classic and KIP-848).
    /// The member is not (or no longer) in the group: the client must join afresh.
    #[error("{0}")]
    UnknownMemberId(String),
    /// The member id the coordinator just handed out (JoinGroup v4+): join again with it.
    #[error("join again with the member id {member_id} the coordinator assigned")]
    MemberIdRequired { member_id: String },
    /// A static member's instance id now belongs to another member id.
    #[error("{0}")]
    FencedInstanceId(String),
    /// KIP-848: another member holds the instance id and has not left.
    #[error("{0}")]
    UnreleasedInstanceId(String),
    /// The member's protocol type or protocols do not fit the group's.
    #[error("group {group_id}: the member's protocol type or protocols do not match the group's")]
    InconsistentGroupProtocol { group_id: String },
    /// A classic request for a generation other than the group's current one.
    #[error(
        "generation {generation_id} is not group {group_id}'s current generation: rejoin the group"
    )]
    IllegalGeneration {
        group_id: String,
        generation_id: i32,
    },
    /// The group is rebalancing (or the request's answer was lost to one): rejoin.
    #[error("group {group_id} is rebalancing: rejoin the group")]
    RebalanceInProgress { group_id: String },
    /// KIP-848 heartbeat with an epoch the coordinator does not accept.
    #[error("{0}")]
    FencedMemberEpoch(String),
    /// KIP-848 OffsetCommit/OffsetFetch with an epoch other than the member's.
    #[error(
        "member epoch {member_epoch} is not the member's current epoch {current_epoch}: heartbeat, then retry"
    )]
    StaleMemberEpoch {
        member_epoch: i32,
        current_epoch: i32,
    },
    /// AlterShareGroupOffsets or DeleteShareGroupOffsets of a share group with members.
    #[error(
        "share group {group_id} has {members} active member(s): its start offsets can only change while it is empty; stop its share consumers first"
    )]
    ShareGroupActive { group_id: String, members: usize },
    /// Something this broker does not serve in its mode (share groups in cluster mode).
    #[error("{0}")]
    Unsupported(String),
    /// A group config that does not exist or whose value is out of range.
    #[error("{0}")]
    InvalidConfig(String),
    /// A share session request (ShareFetch, ShareAcknowledge) for a session the broker does
    /// not have: the client opens a new one (retriable).
    #[error("{0}")]
    ShareSessionNotFound(String),
    /// A share session request with an epoch other than the session's next one.
    #[error("{0}")]
    InvalidShareSessionEpoch(String),
    /// KIP-848 heartbeat naming a server assignor this broker does not have.
    #[error("{0}")]
    UnsupportedAssignor(String),
    /// KIP-848 heartbeat with a subscription pattern that does not compile.
    #[error("{0}")]
    InvalidRegularExpression(String),

    // Storage.
    /// A committed offset (or a deletion) could not be stored; nothing of it was acknowledged.
    #[error(
        "the group store did not take the write; retry (after freeing disk space, if it is full)"
    )]
    Store(#[source] SharedStoreError),
    /// The group's new state (a rebalance's generation and assignment, KIP-848 epochs) could
    /// not be stored, so the answers that would reveal it are withheld.
    #[error("group state could not be stored: {0}")]
    StateNotStored(#[source] SharedStoreError),
}

fn not_coordinator(group_id: &str, coordinator: Option<i32>) -> String {
    match coordinator {
        Some(id) => format!(
            "broker {id} coordinates group {group_id}, not this one: find the coordinator again"
        ),
        None => format!(
            "this broker no longer coordinates group {group_id}: find the coordinator again"
        ),
    }
}

fn not_found(expected: Option<GroupType>) -> String {
    match expected {
        None => "not found".to_owned(),
        Some(t) => format!("is not a {} group", t.name()),
    }
}

impl GroupError {
    /// A member id the group does not know, in Kafka's words.
    pub fn unknown_member(group_id: &str, member_id: &str) -> GroupError {
        GroupError::UnknownMemberId(format!(
            "Member {member_id} is not a member of group {group_id}."
        ))
    }

    /// The Kafka error code the client gets for this error: the one map.
    pub fn code(&self) -> i16 {
        let error = match self {
            GroupError::InvalidGroupId | GroupError::UnstorableGroupId(_) => {
                ResponseError::InvalidGroupId
            }
            GroupError::InvalidRequest(_) => ResponseError::InvalidRequest,
            GroupError::UnknownTopicOrPartition { .. } => ResponseError::UnknownTopicOrPartition,
            GroupError::OffsetMetadataTooLarge { .. } => ResponseError::OffsetMetadataTooLarge,
            GroupError::GroupIdNotFound { .. } => ResponseError::GroupIdNotFound,
            // Kafka answers a JoinGroup/ConsumerGroupHeartbeat for a group of the other
            // protocol as one whose protocols do not match.
            GroupError::GroupTypeInUse { .. }
            | GroupError::NotGroupType { .. }
            | GroupError::InconsistentGroupProtocol { .. } => {
                ResponseError::InconsistentGroupProtocol
            }
            GroupError::NonEmptyGroup { .. } => ResponseError::NonEmptyGroup,
            GroupError::GroupSubscribedToTopic { .. } => ResponseError::GroupSubscribedToTopic,
            // Retriable: the client looks the coordinator up again.
            GroupError::NotCoordinator { .. } => ResponseError::NotCoordinator,
            GroupError::StateNotStored(e)
                if matches!(e.store_error(), StoreError::NotCoordinator { .. }) =>
            {
                ResponseError::NotCoordinator
            }
            GroupError::GroupDead { .. }
            | GroupError::StateNotStored(_)
            | GroupError::CoordinatorNotAvailable { .. } => ResponseError::CoordinatorNotAvailable,
            GroupError::GroupMaxSizeReached { .. } | GroupError::GroupsMaxReached { .. } => {
                ResponseError::GroupMaxSizeReached
            }
            GroupError::InvalidSessionTimeout { .. } => ResponseError::InvalidSessionTimeout,
            GroupError::UnknownMemberId(_) => ResponseError::UnknownMemberId,
            GroupError::MemberIdRequired { .. } => ResponseError::MemberIdRequired,
            GroupError::FencedInstanceId(_) => ResponseError::FencedInstanceId,
            GroupError::UnreleasedInstanceId(_) => ResponseError::UnreleasedInstanceId,
            GroupError::IllegalGeneration { .. } => ResponseError::IllegalGeneration,
            GroupError::RebalanceInProgress { .. } => ResponseError::RebalanceInProgress,
            GroupError::FencedMemberEpoch(_) => ResponseError::FencedMemberEpoch,
            GroupError::StaleMemberEpoch { .. } => ResponseError::StaleMemberEpoch,
            GroupError::UnsupportedAssignor(_) => ResponseError::UnsupportedAssignor,
            GroupError::InvalidRegularExpression(_) => ResponseError::InvalidRegularExpression,
            GroupError::Unsupported(_) => ResponseError::UnsupportedVersion,
            GroupError::ShareGroupActive { .. } => ResponseError::NonEmptyGroup,
            GroupError::InvalidConfig(_) => ResponseError::InvalidConfig,
            GroupError::ShareSessionNotFound(_) => ResponseError::ShareSessionNotFound,
            GroupError::InvalidShareSessionEpoch(_) => ResponseError::InvalidShareSessionEpoch,
            GroupError::Store(e) => return store_error_code(&e.0),
        };
        error.code()
    }
}

/// The code of an outcome: [`NONE`] for `Ok`.
pub fn result_code<T>(result: &Result<T, GroupError>) -> i16 {
    match result {
        Ok(_) => NONE,
        Err(e) => e.code(),
    }
}

/// The code of an answer's error, if any: [`NONE`] for `None`.
pub fn error_code(error: Option<&GroupError>) -> i16 {
    error.map_or(NONE, GroupError::code)
}

/// The Kafka error code for a group-store write that failed (an OffsetCommit, a group's state).
///
/// What Kafka's group coordinator answers when its own log append fails with a storage error:
/// NOT_COORDINATOR. Clients treat it as retriable: they look the coordinator up again and
/// resend, which succeeds once space is freed (a full disk, [`StoreError::NoSpace`]) or once
/// the broker has restarted (a failed store, [`StoreError::Failed`]). In cluster mode a
/// write refused because another broker took the group over is NOT_COORDINATOR too, and one
/// the shared store did not answer is COORDINATOR_NOT_AVAILABLE (also retried by clients).
fn store_error_code(e: &StoreError) -> i16 {
    match e {
        StoreError::NoSpace(_)
        | StoreError::Failed(_)
        | StoreError::NotDurable(_)
        | StoreError::NotCoordinator { .. }
        | StoreError::Io { .. } => ResponseError::NotCoordinator.code(),
        StoreError::Unavailable(_) => ResponseError::CoordinatorNotAvailable.code(),
    }
}

/// A [`StoreError`] that several answers share (one failed write refuses every request that
/// waited on it), so [`GroupError`] can be cloned. Equal when it is the same failure.
#[derive(Debug, Clone)]
pub struct SharedStoreError(pub Arc<StoreError>);

impl SharedStoreError {
    pub fn store_error(&self) -> &StoreError {
        &self.0
    }
}

impl From<StoreError> for SharedStoreError {
    fn from(e: StoreError) -> Self {
        SharedStoreError(Arc::new(e))
    }
}

impl From<StoreError> for GroupError {
    fn from(e: StoreError) -> Self {
        GroupError::Store(e.into())
    }
}

impl fmt::Display for SharedStoreError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

impl std::error::Error for SharedStoreError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        self.0.source()
    }
}

impl PartialEq for SharedStoreError {
    fn eq(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.0, &other.0) || self.0.to_string() == other.0.to_string()
    }
}

#[cfg(test)]
mod tests {
    use std::error::Error;
    use std::io;
    use std::path::PathBuf;

    use super::*;

    fn io_store_error() -> StoreError {
        StoreError::Io {
            op: "write",
            path: PathBuf::from("groups.log"),
            source: io::Error::other("disk gone"),
        }
    }

    /// The map answers exactly the codes the coordinator answered before it had error types.
    #[test]
    fn every_error_has_its_kafka_code() {
        let group_id = || "g".to_owned();
        let stored: SharedStoreError = io_store_error().into();
        let table = [
            (GroupError::InvalidGroupId, ResponseError::InvalidGroupId),
            (
                GroupError::InvalidRequest("bad".into()),
                ResponseError::InvalidRequest,
            ),
            (
                GroupError::UnknownTopicOrPartition {
                    topic: "t".into(),
                    partition: 9,
                },
                ResponseError::UnknownTopicOrPartition,
            ),
            (
                GroupError::OffsetMetadataTooLarge {
                    bytes: 5000,
                    max_bytes: 4096,
                },
                ResponseError::OffsetMetadataTooLarge,
            ),
            (
                GroupError::GroupIdNotFound {
                    group_id: group_id(),
                    expected: Some(GroupType::Consumer),
                },
                ResponseError::GroupIdNotFound,
            ),
            (
                GroupError::GroupTypeInUse {
                    group_id: group_id(),
                    active: GroupType::Classic,
                },
                ResponseError::InconsistentGroupProtocol,
            ),
            (
                GroupError::NotGroupType {
                    group_id: group_id(),
                    expected: GroupType::Classic,
                },
                ResponseError::InconsistentGroupProtocol,
            ),
            (
                GroupError::NonEmptyGroup {
                    group_id: group_id(),
                },
                ResponseError::NonEmptyGroup,
            ),
            (
                GroupError::GroupSubscribedToTopic {
                    group_id: group_id(),
                    topic: "t".into(),
                },
                ResponseError::GroupSubscribedToTopic,
            ),
            (
                GroupError::GroupDead {
                    group_id: group_id(),
                },
                ResponseError::CoordinatorNotAvailable,
            ),
            (
                GroupError::NotCoordinator {
                    group_id: group_id(),
                    coordinator: Some(3),
                },
                ResponseError::NotCoordinator,
            ),
            (
                GroupError::NotCoordinator {
                    group_id: group_id(),
                    coordinator: None,
                },
                ResponseError::NotCoordinator,
            ),
            (
                GroupError::CoordinatorNotAvailable {
                    group_id: group_id(),
                    source: StoreError::Unavailable("connection refused".into()).into(),
                },
                ResponseError::CoordinatorNotAvailable,
            ),
            (
                GroupError::UnstorableGroupId("NUL".into()),
                ResponseError::InvalidGroupId,
            ),
            (
                GroupError::StateNotStored(
                    StoreError::NotCoordinator {
                        group_id: group_id(),
                    }
                    .into(),
                ),
                ResponseError::NotCoordinator,
            ),
            (
                GroupError::Store(StoreError::Unavailable("timeout".into()).into()),
                ResponseError::CoordinatorNotAvailable,
            ),
            (
                GroupError::GroupMaxSizeReached { members_max: 2 },
                ResponseError::GroupMaxSizeReached,
            ),
            (
                GroupError::GroupsMaxReached { groups_max: 2 },
                ResponseError::GroupMaxSizeReached,
            ),
            (
                GroupError::InvalidSessionTimeout {
                    timeout_ms: 1,
                    min_ms: 6_000,
                    max_ms: 1_800_000,
                },
                ResponseError::InvalidSessionTimeout,
            ),
            (
                GroupError::unknown_member("g", "m"),
                ResponseError::UnknownMemberId,
            ),
            (
                GroupError::MemberIdRequired {
                    member_id: "m".into(),
                },
                ResponseError::MemberIdRequired,
            ),
            (
                GroupError::FencedInstanceId("f".into()),
                ResponseError::FencedInstanceId,
            ),
            (
                GroupError::UnreleasedInstanceId("u".into()),
                ResponseError::UnreleasedInstanceId,
            ),
            (
                GroupError::InconsistentGroupProtocol {
                    group_id: group_id(),
                },
                ResponseError::InconsistentGroupProtocol,
            ),
            (
                GroupError::IllegalGeneration {
                    group_id: group_id(),
                    generation_id: 3,
                },
                ResponseError::IllegalGeneration,
            ),
            (
                GroupError::RebalanceInProgress {
                    group_id: group_id(),
                },
                ResponseError::RebalanceInProgress,
            ),
            (
                GroupError::FencedMemberEpoch("f".into()),
                ResponseError::FencedMemberEpoch,
            ),
            (
                GroupError::StaleMemberEpoch {
                    member_epoch: 1,
                    current_epoch: 2,
                },
                ResponseError::StaleMemberEpoch,
            ),
            (
                GroupError::UnsupportedAssignor("a".into()),
                ResponseError::UnsupportedAssignor,
            ),
            (
                GroupError::InvalidRegularExpression("r".into()),
                ResponseError::InvalidRegularExpression,
            ),
            (
                GroupError::Store(stored.clone()),
                ResponseError::NotCoordinator,
            ),
            (
                GroupError::StateNotStored(stored),
                ResponseError::CoordinatorNotAvailable,
            ),
        ];
        for (error, expected) in table {
            assert_eq!(error.code(), expected.code(), "{error:?}");
            assert!(!error.to_string().is_empty(), "{error:?} has a message");
        }
        for e in [
            StoreError::NoSpace("full".into()),
            StoreError::Failed("failed".into()),
        ] {
            assert_eq!(
                GroupError::from(e).code(),
                ResponseError::NotCoordinator.code()
            );
        }
        assert_eq!(result_code(&Ok::<(), GroupError>(())), NONE);
        assert_eq!(error_code(None), NONE);
    }

    #[test]
    fn a_store_error_is_kept_as_the_source() {
        let e = GroupError::from(io_store_error());
        let store = e.source().expect("a source");
        assert!(store.to_string().contains("groups.log"), "{store}");
        let errno = store.source().expect("the io error under it");
        assert_eq!(errno.to_string(), "disk gone");
        // One failure shared by many answers compares equal to itself.
        assert_eq!(e.clone(), e);
    }
}
