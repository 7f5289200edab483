//! One heartbeat's handling: request-level checks, resolving the request to a member
//! (new, existing, or a static member taking over), epoch checks, join and leave.

use std::collections::BTreeMap;

use regex::Regex;
use uuid::Uuid;

use super::reconcile::{is_subset, owns_as_told};
use super::{
    ConsumerGroup, Effect, HeartbeatRequest, HeartbeatResult, JOIN_EPOCH, LEAVE_EPOCH, Member,
    MemberState, REBALANCE_TIMEOUT_UNSET, TEMPORARY_LEAVE_EPOCH, compile_regex,
};
use crate::assignor::{Assignment, AssignorKind, TopicInfo};
use crate::errors::GroupError;

/// A malformed heartbeat, in Kafka's words.
fn invalid(message: &str) -> GroupError {
    GroupError::InvalidRequest(message.to_owned())
}

/// How a joining or heartbeating request maps onto the group's members.
#[derive(Debug)]
enum Resolved {
    New,
    Existing,
    /// A static member rejoining under a new member id takes over this (temporarily left)
    /// member's record.
    Replaces(String),
}

impl ConsumerGroup {
    /// One heartbeat. `topics` is the broker's current topic metadata by id (for resolving
    /// names/regex and for noticing partition-count changes). Refusals
    /// ([`GroupError::UnknownMemberId`], [`GroupError::FencedMemberEpoch`],
    /// [`GroupError::UnreleasedInstanceId`], [`GroupError::GroupMaxSizeReached`],
    /// [`GroupError::UnsupportedAssignor`], [`GroupError::InvalidRequest`],
    /// [`GroupError::InvalidRegularExpression`], and [`GroupError::FencedInstanceId`] for a
    /// static member id that lost its instance id) are in the result. A refused request
    /// changes nothing.
    pub fn heartbeat(
        &mut self,
        now: i64,
        req: HeartbeatRequest,
        topics: &BTreeMap<Uuid, TopicInfo>,
        effects: &mut Vec<Effect>,
    ) -> HeartbeatResult {
        let member_id = req.member_id.clone();
        let result = match validate(&req) {
            Err(refusal) => Err(refusal),
            Ok(_)
                if req.member_epoch == LEAVE_EPOCH || req.member_epoch == TEMPORARY_LEAVE_EPOCH =>
            {
                self.leave(now, &req)
            }
            Ok(regex) => self.join_or_heartbeat(now, req, regex, topics),
        };
        self.flush(effects);
        result.unwrap_or_else(|refusal| HeartbeatResult {
            error: Some(refusal),
            member_id,
            member_epoch: 0,
            heartbeat_interval_ms: self.config.heartbeat_interval_ms,
            assignment: None,
        })
    }

    /// Epoch -1 (leave) or -2 (static member's temporary leave).
    fn leave(&mut self, now: i64, req: &HeartbeatRequest) -> Result<HeartbeatResult, GroupError> {
        let member_id = match &req.instance_id {
            Some(instance) => {
                let member_id = self.static_member(instance, &req.member_id)?;
                member_id.to_string()
            }
            None => {
                if !self.members.contains_key(&req.member_id) {
                    return Err(self.unknown_member(&req.member_id));
                }
                req.member_id.clone()
            }
        };
        if req.member_epoch == LEAVE_EPOCH {
            tracing::info!(group = %self.group_id, member = %member_id, "consumer group member left");
            self.remove_member(&member_id);
            self.bump_and_assign();
        } else {
            // Kept, assignment and all, for one more session: the same instance may come back.
            // Its pending revocations are released: that process is gone.
            let mut member = self.members[&member_id].clone();
            member.set_epoch(TEMPORARY_LEAVE_EPOCH);
            member.state = MemberState::Stable;
            member.pending_revocation.clear();
            self.revocation_deadlines.remove(&member_id);
            self.session_deadlines.insert(
                member_id.clone(),
                now + i64::from(self.config.session_timeout_ms),
            );
            self.set_member(&member_id, Some(member), None);
        }
        Ok(HeartbeatResult {
            member_id,
            member_epoch: req.member_epoch,
            heartbeat_interval_ms: self.config.heartbeat_interval_ms,
            ..HeartbeatResult::default()
        })
    }

    /// The static member holding `instance`, which must be `member_id`.
    fn static_member(&self, instance: &str, member_id: &str) -> Result<&str, GroupError> {
        let Some(holder) = self.static_members.get(instance) else {
            return Err(GroupError::UnknownMemberId(format!(
                "Instance id {instance} is unknown."
            )));
        };
        if holder != member_id {
            return Err(GroupError::FencedInstanceId(format!(
                "Static member {member_id} with instance id {instance} was fenced by member {holder}."
            )));
        }
        Ok(holder)
    }

    fn unknown_member(&self, member_id: &str) -> GroupError {
        GroupError::unknown_member(&self.group_id, member_id)
    }

    /// Who a join (epoch 0) or regular heartbeat is from; checks its epoch.
    fn resolve(&self, member_id: &str, req: &HeartbeatRequest) -> Result<Resolved, GroupError> {
        let joining = req.member_epoch == JOIN_EPOCH;
        let existing = |id: &str| {
            if self.members.contains_key(id) {
                Resolved::Existing
            } else {
                Resolved::New
            }
        };
        match (&req.instance_id, joining) {
            (Some(instance), true) => match self.static_members.get(instance) {
                None => Ok(existing(member_id)),
                Some(holder) if holder == member_id => Ok(Resolved::Existing),
                Some(holder) => {
                    if self.members[holder].epoch != TEMPORARY_LEAVE_EPOCH {
                        return Err(GroupError::UnreleasedInstanceId(format!(
                            "Static member {member_id} with instance id {instance} cannot join the group because the instance id is owned by {holder} member."
                        )));
                    }
                    Ok(Resolved::Replaces(holder.clone()))
                }
            },
            (Some(instance), false) => {
                let holder = self.static_member(instance, member_id)?;
                check_epoch(&self.members[holder], req.member_epoch, req.owned.as_ref())?;
                Ok(Resolved::Existing)
            }
            (None, true) => Ok(existing(member_id)),
            (None, false) => {
                let member = self
                    .members
                    .get(member_id)
                    .ok_or_else(|| self.unknown_member(member_id))?;
                check_epoch(member, req.member_epoch, req.owned.as_ref())?;
                Ok(Resolved::Existing)
            }
        }
    }

    /// Epoch 0 (join or rejoin) or a member's regular heartbeat.
    fn join_or_heartbeat(
        &mut self,
        now: i64,
        req: HeartbeatRequest,
        regex: Option<Regex>,
        topics: &BTreeMap<Uuid, TopicInfo>,
    ) -> Result<HeartbeatResult, GroupError> {
        let member_id = if req.member_id.is_empty() {
            // A v0 client joining: the broker names it.
            Uuid::new_v4().to_string()
        } else {
            req.member_id.clone()
        };
        let resolved = self.resolve(&member_id, &req)?;
        if matches!(resolved, Resolved::New) && self.members.len() >= self.config.members_max {
            return Err(GroupError::GroupMaxSizeReached {
                members_max: self.config.members_max,
            });
        }

        // 1. The member's record, updated with what the request carries.
        let original = match &resolved {
            Resolved::New => None,
            Resolved::Existing => self.members.get(&member_id).cloned(),
            Resolved::Replaces(old) => self.members.get(old).cloned(),
        };
        let mut member = match (&resolved, &original) {
            (Resolved::Replaces(_), Some(old)) => Member {
                member_id: member_id.clone(),
                epoch: JOIN_EPOCH,
                previous_epoch: LEAVE_EPOCH,
                state: MemberState::Stable,
                pending_revocation: Assignment::new(),
                ..old.clone()
            },
            (_, Some(existing)) => existing.clone(),
            (_, None) => Member::new(member_id.clone()),
        };
        apply_request(&mut member, &req);
        let subscription_changed = original
            .as_ref()
            .is_none_or(|o| !o.same_subscription(&member));
        let assigned_before = original.as_ref().map(|o| o.assigned.clone());
        match &resolved {
            Resolved::Replaces(old) => {
                tracing::info!(group = %self.group_id, member = %member_id, replaces = %old, "static consumer group member rejoined");
                let target = self.targets.remove(old);
                self.remove_member(old);
                if let Some(target) = target {
                    self.targets.insert(member_id.clone(), target);
                }
                self.set_member(&member_id, Some(member), regex);
            }
            Resolved::New => {
                tracing::info!(group = %self.group_id, member = %member_id, "consumer group member joined");
                self.set_member(&member_id, Some(member), regex);
            }
            Resolved::Existing => {
                if original.as_ref() != Some(&member) {
                    self.set_member(&member_id, Some(member), regex);
                }
            }
        }

        // 2. A new target assignment when membership, subscriptions or topics changed.
        let metadata_changed = self.refresh_subscribed(topics);
        if subscription_changed || metadata_changed {
            self.bump_and_assign();
        }

        // 3. The member moves toward its target.
        let owned = if req.member_epoch == JOIN_EPOCH {
            // A (re)joining member owns nothing, whatever it held before.
            Some(req.owned.clone().unwrap_or_default())
        } else {
            req.owned.clone()
        };
        self.reconcile(now, &member_id, owned.as_ref(), topics);
        self.session_deadlines.insert(
            member_id.clone(),
            now + i64::from(self.config.session_timeout_ms),
        );

        let member = &self.members[&member_id];
        let full_request = req.rebalance_timeout_ms != REBALANCE_TIMEOUT_UNSET
            && (req.subscribed_topic_names.is_some() || req.subscribed_topic_regex.is_some())
            && req.owned.is_some();
        let send_assignment = req.member_epoch == JOIN_EPOCH
            || full_request
            || assigned_before.as_ref() != Some(&member.assigned)
            || owned
                .as_ref()
                .is_some_and(|owned| !owns_as_told(owned, member));
        Ok(HeartbeatResult {
            error: None,
            member_id,
            member_epoch: member.epoch,
            heartbeat_interval_ms: self.config.heartbeat_interval_ms,
            assignment: send_assignment.then(|| member.assigned.clone()),
        })
    }
}

/// Request-level checks, in Kafka's order. Returns the compiled subscription regex, if any.
fn validate(req: &HeartbeatRequest) -> Result<Option<Regex>, GroupError> {
    let blank = |s: &Option<String>| s.as_ref().is_some_and(|s| s.trim().is_empty());
    if req.member_epoch < TEMPORARY_LEAVE_EPOCH {
        return Err(invalid("MemberEpoch is invalid."));
    }
    // Only a v0 join may leave the member id out (the broker makes one up).
    let member_id_missing = if req.member_epoch == JOIN_EPOCH {
        !req.member_id.is_empty() && req.member_id.trim().is_empty()
    } else {
        req.member_id.trim().is_empty()
    };
    if member_id_missing {
        return Err(invalid("MemberId can't be empty."));
    }
    if blank(&req.instance_id) {
        return Err(invalid("InstanceId can't be empty."));
    }
    if blank(&req.rack_id) {
        return Err(invalid("RackId can't be empty."));
    }
    if req.member_epoch == JOIN_EPOCH {
        if req.rebalance_timeout_ms == REBALANCE_TIMEOUT_UNSET {
            return Err(invalid(
                "RebalanceTimeoutMs must be provided in first request.",
            ));
        }
        // An omitted list is taken as empty: some clients leave it out on their first request.
        if req
            .owned
            .as_ref()
            .is_some_and(|o| o.values().any(|p| !p.is_empty()))
        {
            return Err(invalid("TopicPartitions must be empty when (re-)joining."));
        }
        if req.subscribed_topic_names.is_none() && req.subscribed_topic_regex.is_none() {
            return Err(invalid(
                "Either SubscribedTopicNames or SubscribedTopicRegex must be non-null when (re-)joining.",
            ));
        }
    } else if req.member_epoch == TEMPORARY_LEAVE_EPOCH && req.instance_id.is_none() {
        return Err(invalid("InstanceId can't be null."));
    }
    if let Some(name) = &req.server_assignor
        && AssignorKind::from_name(name).is_none()
    {
        let supported: Vec<&str> = AssignorKind::ALL.iter().map(|k| k.name()).collect();
        return Err(GroupError::UnsupportedAssignor(format!(
            "ServerAssignor {name} is not supported. Supported assignors: {}.",
            supported.join(", ")
        )));
    }
    match &req.subscribed_topic_regex {
        Some(pattern) if !pattern.is_empty() => compile_regex(pattern).map(Some).map_err(|e| {
            GroupError::InvalidRegularExpression(format!(
                "SubscribedTopicRegex `{pattern}` is not a valid regular expression: {e}."
            ))
        }),
        _ => Ok(None),
    }
}

/// A member's request epoch against its record: equal, or its previous epoch while owning
/// no more than its assignment (the answer that moved it on may have been lost).
fn check_epoch(member: &Member, epoch: i32, owned: Option<&Assignment>) -> Result<(), GroupError> {
    let fenced = |relation: &str| {
        GroupError::FencedMemberEpoch(format!(
            "The consumer group member has a {relation} member epoch ({epoch}) than the one known by the group coordinator ({}). The member must abandon all its partitions and rejoin.",
            member.epoch
        ))
    };
    if epoch > member.epoch {
        return Err(fenced("greater"));
    }
    if epoch < member.epoch {
        let within_assignment = owned.is_some_and(|owned| is_subset(owned, &member.assigned));
        if epoch != member.previous_epoch || !within_assignment {
            return Err(fenced("smaller"));
        }
    }
    Ok(())
}

/// Copies what the request carries onto the member (`None` fields: unchanged).
fn apply_request(member: &mut Member, req: &HeartbeatRequest) {
    if let Some(instance) = &req.instance_id {
        member.instance_id = Some(instance.clone());
    }
    if let Some(rack) = &req.rack_id {
        member.rack_id = Some(rack.clone());
    }
    if req.rebalance_timeout_ms != REBALANCE_TIMEOUT_UNSET {
        member.rebalance_timeout_ms = req.rebalance_timeout_ms.max(0);
    }
    if let Some(name) = &req.server_assignor {
        member.server_assignor = Some(name.clone());
    }
    if let Some(names) = &req.subscribed_topic_names {
        member.subscribed_topic_names = names.iter().cloned().collect();
    }
    if let Some(pattern) = &req.subscribed_topic_regex {
        member.subscribed_topic_regex = (!pattern.is_empty()).then(|| pattern.clone());
    }
    member.client_id = req.client_id.clone();
    member.client_host = req.client_host.clone();
}
