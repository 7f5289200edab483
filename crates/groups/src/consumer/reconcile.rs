//! Target assignment and reconciliation: recomputing the target on an epoch bump, moving a
//! member toward it (revoke first, then assign what is free), and keeping the indexes
//! derived from the members (holders, subscriptions) in step.

use std::collections::{BTreeMap, BTreeSet};

use regex::Regex;
use uuid::Uuid;

use super::{
    ConsumerGroup, Effect, Member, MemberState, SubscribedRegex, SubscribedTopic, compile_regex,
    partitions,
};
use crate::assignor::{self, Assignment, MemberSpec, TopicInfo};

impl ConsumerGroup {
    /// Moves `member_id` toward its target (see the module docs) and keeps its revocation
    /// timer in step: (re)armed whenever it is asked to revoke, cleared once it is not.
    pub(super) fn reconcile(
        &mut self,
        now: i64,
        member_id: &str,
        owned: Option<&Assignment>,
        topics: &BTreeMap<Uuid, TopicInfo>,
    ) {
        let Some(member) = self.members.get(member_id) else {
            return;
        };
        let no_target = Assignment::new();
        let target = self.targets.get(member_id).unwrap_or(&no_target);
        let held_by_other = |topic_id: Uuid, partition: i32| {
            self.holders
                .get(&(topic_id, partition))
                .is_some_and(|holder| holder != member_id)
        };
        let next = reconciled(
            member,
            self.assignment_epoch,
            target,
            owned,
            topics,
            held_by_other,
        );
        if next == *member {
            return;
        }
        if next.state == MemberState::UnrevokedPartitions {
            self.revocation_deadlines
                .insert(member_id.to_string(), now + next.rebalance_timeout_ms());
        } else {
            self.revocation_deadlines.remove(member_id);
        }
        self.set_member(member_id, Some(next), None);
    }

    pub(super) fn bump_and_assign(&mut self) {
        self.group_epoch += 1;
        let topics: BTreeMap<Uuid, TopicInfo> = self
            .subscribed
            .iter()
            .map(|(id, t)| {
                let info = TopicInfo {
                    name: t.name.clone(),
                    id: *id,
                    partitions: t.partitions,
                };
                (*id, info)
            })
            .collect();
        let specs: Vec<MemberSpec> = self
            .members
            .values()
            .map(|m| MemberSpec {
                member_id: m.member_id.clone(),
                instance_id: m.instance_id.clone(),
                rack_id: m.rack_id.clone(),
                subscribed: self.member_topics(m),
                current: self.targets.get(&m.member_id).cloned().unwrap_or_default(),
            })
            .collect();
        let assignor = self.assignor();
        self.targets = assignor::assign(assignor, &specs, &topics);
        self.assignment_epoch = self.group_epoch;
        self.dirty = true;
        tracing::debug!(group = %self.group_id, epoch = self.group_epoch, assignor = assignor.name(), "new target assignment");
    }

    /// The subscribed topics (ids) `member` subscribes to, by name or regex.
    fn member_topics(&self, member: &Member) -> BTreeSet<Uuid> {
        let regex = member
            .subscribed_topic_regex
            .as_ref()
            .and_then(|pattern| self.regexes.get(pattern));
        self.subscribed
            .iter()
            .filter(|(_, topic)| {
                member.subscribed_topic_names.contains(&topic.name)
                    || regex.is_some_and(|r| r.regex.is_match(&topic.name))
            })
            .map(|(id, _)| *id)
            .collect()
    }

    /// Re-resolves the group's subscriptions against `topics`; true if the result changed.
    pub(super) fn refresh_subscribed(&mut self, topics: &BTreeMap<Uuid, TopicInfo>) -> bool {
        let mut subscribed = BTreeMap::new();
        if !self.topic_names.is_empty() || !self.regexes.is_empty() {
            for (id, topic) in topics {
                let wanted = self.topic_names.contains_key(&topic.name)
                    || self.regexes.values().any(|r| r.regex.is_match(&topic.name));
                if wanted {
                    let entry = SubscribedTopic {
                        name: topic.name.clone(),
                        partitions: topic.partitions,
                    };
                    subscribed.insert(*id, entry);
                }
            }
        }
        if subscribed == self.subscribed {
            return false;
        }
        self.subscribed = subscribed;
        self.dirty = true;
        true
    }

    /// Removes a member and its timers and target (the caller bumps the group epoch).
    pub(super) fn remove_member(&mut self, member_id: &str) {
        self.set_member(member_id, None, None);
        self.targets.remove(member_id);
        self.session_deadlines.remove(member_id);
        self.revocation_deadlines.remove(member_id);
    }

    /// Replaces `member_id`'s record (`None`: removes it), keeping the derived indexes in
    /// step. `regex`: the member's compiled subscription pattern if the caller has it.
    pub(super) fn set_member(
        &mut self,
        member_id: &str,
        member: Option<Member>,
        regex: Option<Regex>,
    ) {
        let old = self.members.remove(member_id);
        if let Some(old) = &old {
            for key in partitions(&old.assigned).chain(partitions(&old.pending_revocation)) {
                if self.holders.get(&key).is_some_and(|h| h == member_id) {
                    self.holders.remove(&key);
                }
            }
            if let Some(instance) = &old.instance_id
                && self
                    .static_members
                    .get(instance)
                    .is_some_and(|id| id == member_id)
            {
                self.static_members.remove(instance);
            }
        }
        if let Some(new) = &member {
            for key in partitions(&new.assigned).chain(partitions(&new.pending_revocation)) {
                let previous = self.holders.insert(key, member_id.to_string());
                debug_assert!(
                    previous.is_none_or(|p| p == member_id),
                    "{key:?} given to {member_id} while held"
                );
            }
            if let Some(instance) = &new.instance_id {
                self.static_members
                    .insert(instance.clone(), member_id.to_string());
            }
        }
        // Subscriptions: count the new one in before the old one out, so a pattern both use
        // stays compiled.
        let same_subscription =
            matches!((&old, &member), (Some(o), Some(n)) if o.same_subscription(n));
        if !same_subscription {
            if let Some(new) = &member {
                self.add_subscription(new, regex);
            }
            if let Some(old) = &old {
                self.remove_subscription(old);
            }
        }
        if let Some(new) = member {
            self.members.insert(member_id.to_string(), new);
        }
        self.dirty = true;
    }

    fn add_subscription(&mut self, member: &Member, regex: Option<Regex>) {
        for name in &member.subscribed_topic_names {
            *self.topic_names.entry(name.clone()).or_default() += 1;
        }
        if let Some(pattern) = &member.subscribed_topic_regex {
            if let Some(entry) = self.regexes.get_mut(pattern) {
                entry.members += 1;
            } else {
                let regex = regex.map_or_else(|| compile_regex(pattern), Ok);
                match regex {
                    Ok(regex) => {
                        self.regexes
                            .insert(pattern.clone(), SubscribedRegex { regex, members: 1 });
                    }
                    // Patterns are checked before they are stored; this is a bug, not input.
                    Err(e) => {
                        tracing::error!(group = %self.group_id, pattern = %pattern, error = %e, "stored subscription regex does not compile");
                    }
                }
            }
        }
    }

    fn remove_subscription(&mut self, member: &Member) {
        for name in &member.subscribed_topic_names {
            if let Some(count) = self.topic_names.get_mut(name) {
                *count -= 1;
                if *count == 0 {
                    self.topic_names.remove(name);
                }
            }
        }
        if let Some(pattern) = &member.subscribed_topic_regex
            && let Some(entry) = self.regexes.get_mut(pattern)
        {
            entry.members -= 1;
            if entry.members == 0 {
                self.regexes.remove(pattern);
            }
        }
    }

    pub(super) fn flush(&mut self, effects: &mut Vec<Effect>) {
        if std::mem::take(&mut self.dirty) {
            effects.push(Effect::Persist);
        }
    }
}

/// `member` moved as far toward `target` (at `target_epoch`) as it can now.
fn reconciled(
    member: &Member,
    target_epoch: i32,
    target: &Assignment,
    owned: Option<&Assignment>,
    topics: &BTreeMap<Uuid, TopicInfo>,
    held_by_other: impl Fn(Uuid, i32) -> bool,
) -> Member {
    match member.state {
        MemberState::Stable if member.epoch == target_epoch => member.clone(),
        MemberState::UnrevokedPartitions
            if still_owns_any(owned, &member.pending_revocation, topics) =>
        {
            member.clone()
        }
        MemberState::UnrevokedPartitions => {
            // Revoked: one epoch on, and on toward the target from there.
            let epoch = (member.epoch + 1).min(target_epoch);
            next_assignment(
                member,
                epoch,
                target_epoch,
                target,
                owned,
                topics,
                held_by_other,
            )
        }
        MemberState::Stable | MemberState::UnreleasedPartitions => next_assignment(
            member,
            member.epoch,
            target_epoch,
            target,
            owned,
            topics,
            held_by_other,
        ),
    }
}

/// One reconciliation step from `member` at `epoch`: revoke first, else assign what is free.
fn next_assignment(
    member: &Member,
    epoch: i32,
    target_epoch: i32,
    target: &Assignment,
    owned: Option<&Assignment>,
    topics: &BTreeMap<Uuid, TopicInfo>,
    held_by_other: impl Fn(Uuid, i32) -> bool,
) -> Member {
    let mut kept = Assignment::new();
    let mut revoked = Assignment::new();
    let mut granted = Assignment::new();
    let mut unreleased = false;
    let empty = BTreeSet::new();
    let topic_ids: BTreeSet<&Uuid> = target.keys().chain(member.assigned.keys()).collect();
    for topic_id in topic_ids {
        let wanted = target.get(topic_id).unwrap_or(&empty);
        let current = member.assigned.get(topic_id).unwrap_or(&empty);
        let keep: BTreeSet<i32> = current.intersection(wanted).copied().collect();
        let revoke: BTreeSet<i32> = current.difference(wanted).copied().collect();
        let mut grant = BTreeSet::new();
        for partition in wanted.difference(current) {
            if held_by_other(*topic_id, *partition) {
                unreleased = true;
            } else {
                grant.insert(*partition);
            }
        }
        for (set, into) in [
            (keep, &mut kept),
            (revoke, &mut revoked),
            (grant, &mut granted),
        ] {
            if !set.is_empty() {
                into.insert(*topic_id, set);
            }
        }
    }
    let mut next = member.clone();
    if !revoked.is_empty() && still_owns_any(owned, &revoked, topics) {
        // Stay at this epoch until the member lets go of `revoked`.
        next.set_epoch(epoch);
        next.state = MemberState::UnrevokedPartitions;
        next.assigned = kept;
        next.pending_revocation = revoked;
        return next;
    }
    for (topic_id, partitions) in granted {
        kept.entry(topic_id).or_default().extend(partitions);
    }
    next.set_epoch(target_epoch);
    next.state = if unreleased {
        MemberState::UnreleasedPartitions
    } else {
        MemberState::Stable
    };
    next.assigned = kept;
    next.pending_revocation = Assignment::new();
    next
}

/// Whether the member may still own any of `partitions`. Not knowing (`owned` omitted) counts
/// as owning; partitions of topics that no longer exist do not count (nobody can get them).
fn still_owns_any(
    owned: Option<&Assignment>,
    partitions: &Assignment,
    topics: &BTreeMap<Uuid, TopicInfo>,
) -> bool {
    partitions
        .iter()
        .filter(|(topic_id, set)| topics.contains_key(topic_id) && !set.is_empty())
        .any(|(topic_id, set)| match owned {
            None => true,
            Some(owned) => owned.get(topic_id).is_some_and(|o| !o.is_disjoint(set)),
        })
}

/// Whether every partition in `owned` is in `assignment`.
pub(super) fn is_subset(owned: &Assignment, assignment: &Assignment) -> bool {
    owned.iter().all(|(topic_id, partitions)| {
        partitions.is_empty()
            || assignment
                .get(topic_id)
                .is_some_and(|a| partitions.is_subset(a))
    })
}

/// Whether `owned` is what the member was told: its assignment, plus possibly partitions
/// still pending revocation.
pub(super) fn owns_as_told(owned: &Assignment, member: &Member) -> bool {
    let has = |a: &Assignment, t: &Uuid, p: &i32| a.get(t).is_some_and(|s| s.contains(p));
    let nothing_extra = partitions(owned)
        .all(|(t, p)| has(&member.assigned, &t, &p) || has(&member.pending_revocation, &t, &p));
    let nothing_missing = partitions(&member.assigned).all(|(t, p)| has(owned, &t, &p));
    nothing_extra && nothing_missing
}
