//! Heartbeat and LeaveGroup, member removal, pending member ids, and the timers that
//! [`ClassicGroup::tick`] runs (sessions, pending ids, sync deadline, join phase).

use super::{
    ClassicGroup, ClassicState, Effect, InitialDelay, LeavingMember, Member, PENDING_MEMBERS_MAX,
    PendingMember, join_error, sync_error,
};
use crate::errors::GroupError;

// Membership: heartbeats, leaving, removal, pending ids, timers.
impl ClassicGroup {
    /// Heartbeat: `Ok`, or [`GroupError::RebalanceInProgress`] (rejoin),
    /// [`GroupError::UnknownMemberId`], [`GroupError::IllegalGeneration`],
    /// [`GroupError::FencedInstanceId`].
    pub fn heartbeat(
        &mut self,
        now: i64,
        member_id: &str,
        group_instance_id: Option<&str>,
        generation_id: i32,
        _effects: &mut Vec<Effect>,
    ) -> Result<(), GroupError> {
        if self.state == ClassicState::Dead {
            return Err(self.dead());
        }
        let i = self.validate_member(member_id, group_instance_id)?;
        if generation_id != self.generation_id {
            return Err(self.illegal_generation(generation_id));
        }
        match self.state {
            ClassicState::Empty | ClassicState::Dead => Err(self.unknown_member(member_id)),
            ClassicState::PreparingRebalance => {
                self.members[i].refresh(now);
                Err(self.rebalancing())
            }
            ClassicState::CompletingRebalance | ClassicState::Stable => {
                self.members[i].refresh(now);
                Ok(())
            }
        }
    }

    /// LeaveGroup: one outcome per member, in order.
    pub fn leave(
        &mut self,
        now: i64,
        members: &[LeavingMember],
        effects: &mut Vec<Effect>,
    ) -> Vec<Result<(), GroupError>> {
        if self.state == ClassicState::Dead {
            return vec![Err(self.dead()); members.len()];
        }
        members
            .iter()
            .map(|leaving| self.leave_one(now, leaving, effects))
            .collect()
    }

    /// Expires sessions, completes joins whose rebalance timeout passed, ends the initial delay.
    pub fn tick(&mut self, now: i64, effects: &mut Vec<Effect>) {
        if self.state == ClassicState::Dead {
            return;
        }
        self.expire_pending(now, effects);
        self.expire_sessions(now, effects);
        self.expire_pending_syncs(now, effects);
        self.expire_join_phase(now, effects);
    }

    /// Earliest time `tick` has work to do, if any.
    pub fn next_deadline(&self) -> Option<i64> {
        if self.state == ClassicState::Dead {
            return None;
        }
        let pending = self.pending.iter().map(|p| p.deadline);
        let sessions = self.members.iter().filter_map(Member::expiry);
        let join = self
            .join_deadline
            .filter(|_| self.state == ClassicState::PreparingRebalance);
        let sync = self.sync_deadline.filter(|_| self.awaits_syncs());
        pending.chain(sessions).chain(join).chain(sync).min()
    }

    /// Takes member `i` out without changing state: its parked requests are answered
    /// UNKNOWN_MEMBER_ID (so that a live client joins afresh), and the lead passes on.
    pub(super) fn detach_member(&mut self, i: usize, effects: &mut Vec<Effect>) -> Member {
        let member = self.members.remove(i);
        let unknown = self.unknown_member(&member.member_id);
        if member.awaiting_join {
            effects.push(Effect::Join {
                member_id: member.member_id.clone(),
                result: join_error("", unknown.clone()),
            });
        }
        if member.awaiting_sync {
            effects.push(Effect::Sync {
                member_id: member.member_id.clone(),
                result: sync_error(unknown),
            });
        }
        if self.leader_id.as_deref() == Some(member.member_id.as_str()) {
            self.leader_id = self.members.first().map(|m| m.member_id.clone());
        }
        member
    }

    /// Takes member `i` out and rebalances (or finishes the running join phase without it).
    pub(super) fn remove_member(
        &mut self,
        now: i64,
        i: usize,
        reason: &str,
        effects: &mut Vec<Effect>,
    ) {
        let member = self.detach_member(i, effects);
        match self.state {
            ClassicState::Stable | ClassicState::CompletingRebalance => {
                let reason = format!("member {} removed: {reason}", member.member_id);
                self.prepare_rebalance(now, &reason, effects);
            }
            ClassicState::PreparingRebalance => self.maybe_complete_join(now, effects),
            ClassicState::Empty | ClassicState::Dead => {}
        }
    }

    fn pending_limit(&self) -> usize {
        self.config.members_max.clamp(1, PENDING_MEMBERS_MAX)
    }

    pub(super) fn add_pending(
        &mut self,
        now: i64,
        member_id: String,
        session_timeout_ms: i32,
        effects: &mut Vec<Effect>,
    ) {
        while self.pending.len() >= self.pending_limit() {
            let oldest = (0..self.pending.len())
                .min_by_key(|&p| self.pending[p].deadline)
                .expect("a full pending list is not empty");
            self.remove_pending(now, oldest, effects);
        }
        self.pending.push(PendingMember {
            member_id,
            deadline: now.saturating_add(i64::from(session_timeout_ms)),
        });
    }

    /// Forgets pending id `p`; the join phase may have been waiting only for it.
    pub(super) fn remove_pending(&mut self, now: i64, p: usize, effects: &mut Vec<Effect>) {
        self.pending.remove(p);
        self.maybe_complete_join(now, effects);
    }

    fn leave_one(
        &mut self,
        now: i64,
        leaving: &LeavingMember,
        effects: &mut Vec<Effect>,
    ) -> Result<(), GroupError> {
        let instance = leaving.group_instance_id.as_deref();
        if leaving.member_id.is_empty() {
            // LeaveGroup v3+ lets an admin remove a static member by its instance id alone.
            let Some(i) = instance.and_then(|id| self.static_index(id)) else {
                return Err(GroupError::UnknownMemberId(format!(
                    "Instance id {} is unknown.",
                    instance.unwrap_or_default()
                )));
            };
            self.remove_member(now, i, "left the group (by instance id)", effects);
            return Ok(());
        }
        if let Some(p) = self.pending_index(&leaving.member_id) {
            self.remove_pending(now, p, effects);
            return Ok(());
        }
        let i = self.validate_member(&leaving.member_id, instance)?;
        self.remove_member(now, i, "left the group", effects);
        Ok(())
    }

    fn expire_pending(&mut self, now: i64, effects: &mut Vec<Effect>) {
        let before = self.pending.len();
        self.pending.retain(|p| p.deadline > now);
        if self.pending.len() != before {
            self.maybe_complete_join(now, effects);
        }
    }

    fn expire_sessions(&mut self, now: i64, effects: &mut Vec<Effect>) {
        // A removal may start or finish a rebalance, which changes who can expire: look again
        // after each one. Each round removes a member, so this ends.
        while let Some(i) = self
            .members
            .iter()
            .position(|m| m.expiry().is_some_and(|deadline| deadline <= now))
        {
            self.remove_member(now, i, "session expired", effects);
        }
    }

    fn expire_pending_syncs(&mut self, now: i64, effects: &mut Vec<Effect>) {
        if self.sync_deadline.is_none_or(|deadline| deadline > now) {
            return;
        }
        self.sync_deadline = None;
        if !self.awaits_syncs() {
            return;
        }
        let mut i = 0;
        while i < self.members.len() {
            if self.members[i].pending_sync {
                self.detach_member(i, effects);
            } else {
                i += 1;
            }
        }
        self.prepare_rebalance(now, "members did not sync in time", effects);
    }

    fn expire_join_phase(&mut self, now: i64, effects: &mut Vec<Effect>) {
        if self.state != ClassicState::PreparingRebalance {
            return;
        }
        let Some(deadline) = self.join_deadline.filter(|&d| d <= now) else {
            return;
        };
        if let Some(delay) = self.initial_delay
            && delay.new_member_added
            && delay.remaining_ms > 0
        {
            // Someone joined during this step: wait one more, within the budget.
            let next_ms = self
                .config
                .initial_rebalance_delay_ms
                .min(delay.remaining_ms);
            self.initial_delay = Some(InitialDelay {
                delay_ms: next_ms,
                remaining_ms: (delay.remaining_ms - delay.delay_ms).max(0),
                new_member_added: false,
            });
            self.join_deadline = Some(deadline.saturating_add(next_ms));
            return;
        }
        self.complete_join(now, effects);
    }
}
