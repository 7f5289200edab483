//! What survives a restart: [`ConsumerGroup::snapshot`] and [`ConsumerGroup::restore`], and
//! the snapshot's layout.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use uuid::Uuid;

use super::{
    ConsumerConfig, ConsumerGroup, ConsumerSnapshot, Member, MemberState, SubscribedTopic,
    compile_regex, partitions,
};
use crate::assignor::Assignment;

/// Version of the snapshot layout ([`Durable`]).
const SNAPSHOT_VERSION: u32 = 1;

/// The snapshot's layout (`ConsumerSnapshot::state`).
#[derive(Debug, Serialize, Deserialize)]
struct Durable {
    version: u32,
    group_epoch: i32,
    assignment_epoch: i32,
    members: Vec<Member>,
    targets: BTreeMap<String, Assignment>,
    subscribed: BTreeMap<Uuid, SubscribedTopic>,
}

impl ConsumerGroup {
    pub fn snapshot(&self) -> ConsumerSnapshot {
        let durable = Durable {
            version: SNAPSHOT_VERSION,
            group_epoch: self.group_epoch,
            assignment_epoch: self.assignment_epoch,
            members: self.members.values().cloned().collect(),
            targets: self.targets.clone(),
            subscribed: self.subscribed.clone(),
        };
        // Every map key here serialises as a JSON string (member ids, topic ids), the one
        // thing that could make this fail.
        let state =
            serde_json::to_value(&durable).expect("consumer group state is JSON-representable");
        ConsumerSnapshot { state }
    }

    /// Rebuilds a group from [`Self::snapshot`]. Sessions restart at `now` (every member gets
    /// a full session timeout to heartbeat again), and so do revocation timeouts. Refuses a
    /// snapshot that breaks the group's invariants (a partition held twice, an instance id
    /// used twice, an assignment epoch ahead of the group epoch, a bad regex).
    pub fn restore(
        group_id: String,
        config: ConsumerConfig,
        snapshot: ConsumerSnapshot,
        now: i64,
    ) -> Result<ConsumerGroup, String> {
        let durable: Durable = serde_json::from_value(snapshot.state)
            .map_err(|e| format!("consumer group {group_id}: unreadable snapshot: {e}"))?;
        if durable.version != SNAPSHOT_VERSION {
            return Err(format!(
                "consumer group {group_id}: snapshot version {} (this broker reads {SNAPSHOT_VERSION})",
                durable.version
            ));
        }
        if durable.assignment_epoch > durable.group_epoch {
            return Err(format!(
                "consumer group {group_id}: assignment epoch {} ahead of group epoch {}",
                durable.assignment_epoch, durable.group_epoch
            ));
        }
        let mut group = ConsumerGroup::new(group_id, config);
        group.group_epoch = durable.group_epoch;
        group.assignment_epoch = durable.assignment_epoch;
        group.subscribed = durable.subscribed;
        for member in durable.members {
            let id = member.member_id.clone();
            if group.members.contains_key(&id) {
                return Err(format!(
                    "consumer group {}: member {id} twice",
                    group.group_id
                ));
            }
            if let Some(instance) = &member.instance_id
                && group.static_members.contains_key(instance)
            {
                return Err(format!(
                    "consumer group {}: instance id {instance} used twice",
                    group.group_id
                ));
            }
            for (topic_id, partition) in
                partitions(&member.assigned).chain(partitions(&member.pending_revocation))
            {
                if let Some(holder) = group.holders.get(&(topic_id, partition)) {
                    return Err(format!(
                        "consumer group {}: {topic_id}/{partition} held by {holder} and {id}",
                        group.group_id
                    ));
                }
            }
            let regex = match &member.subscribed_topic_regex {
                Some(pattern) => Some(compile_regex(pattern).map_err(|e| {
                    format!(
                        "consumer group {}: member {id}: bad regex: {e}",
                        group.group_id
                    )
                })?),
                None => None,
            };
            group
                .session_deadlines
                .insert(id.clone(), now + i64::from(group.config.session_timeout_ms));
            if member.state == MemberState::UnrevokedPartitions {
                group
                    .revocation_deadlines
                    .insert(id.clone(), now + member.rebalance_timeout_ms());
            }
            group.set_member(&id, Some(member), regex);
        }
        group.targets = durable
            .targets
            .into_iter()
            .filter(|(id, _)| group.members.contains_key(id))
            .collect();
        group.dirty = false;
        Ok(group)
    }
}
