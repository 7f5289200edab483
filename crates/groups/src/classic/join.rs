//! JoinGroup: the member id handshake, static members, protocol choice, and the join phase
//! from preparing a rebalance to completing the join (new generation, leader, answers).

use bytes::Bytes;

use super::{
    ClassicGroup, ClassicState, Effect, InitialDelay, JoinRequest, JoinResult, JoinedMember,
    Member, Reply, join_error, sync_error,
};
use crate::errors::GroupError;

// Join.
impl ClassicGroup {
    /// JoinGroup. Refusals (e.g. [`GroupError::UnknownMemberId`],
    /// [`GroupError::InconsistentGroupProtocol`], [`GroupError::InvalidSessionTimeout`],
    /// [`GroupError::GroupMaxSizeReached`], [`GroupError::FencedInstanceId`],
    /// [`GroupError::MemberIdRequired`]) come back as `Reply::Now`.
    ///
    /// When this join ends the join phase itself (the last member rejoined, or the initial delay
    /// is 0), the caller's answer is `Reply::Now` and the other members' come as effects.
    pub fn join(
        &mut self,
        now: i64,
        req: JoinRequest,
        effects: &mut Vec<Effect>,
    ) -> Reply<JoinResult> {
        let first_new = effects.len();
        let member_id = match self.join_inner(now, req, effects) {
            Reply::Later { member_id } => member_id,
            answered => return answered,
        };
        let own = effects[first_new..]
            .iter()
            .position(|e| matches!(e, Effect::Join { member_id: m, .. } if *m == member_id));
        if let Some(pos) = own
            && let Effect::Join { result, .. } = effects.remove(first_new + pos)
        {
            return Reply::Now(result);
        }
        Reply::Later { member_id }
    }

    fn join_inner(
        &mut self,
        now: i64,
        req: JoinRequest,
        effects: &mut Vec<Effect>,
    ) -> Reply<JoinResult> {
        if self.state == ClassicState::Dead {
            return Reply::Now(join_error(&req.member_id, self.dead()));
        }
        if req.session_timeout_ms < self.config.session_timeout_min_ms
            || req.session_timeout_ms > self.config.session_timeout_max_ms
        {
            let refused = GroupError::InvalidSessionTimeout {
                timeout_ms: req.session_timeout_ms,
                min_ms: self.config.session_timeout_min_ms,
                max_ms: self.config.session_timeout_max_ms,
            };
            return Reply::Now(join_error(&req.member_id, refused));
        }
        if !self.accepts_joining(&req.member_id, req.group_instance_id.as_deref()) {
            // Kafka drops a refused member outright: it would only hold up the join phase.
            if let Some(i) = self.index(&req.member_id) {
                self.remove_member(now, i, "refused: group is full", effects);
            } else if let Some(p) = self.pending_index(&req.member_id) {
                self.remove_pending(now, p, effects);
            }
            let full = GroupError::GroupMaxSizeReached {
                members_max: self.config.members_max,
            };
            return Reply::Now(join_error("", full));
        }
        if req.member_id.is_empty() {
            self.join_new_member(now, req, effects)
        } else {
            self.join_known_member(now, req, effects)
        }
    }

    /// Kafka's size rule, made strict: a join that would add a member is refused once the group
    /// has `members_max`. A known static instance replaces its member, so it always fits. While
    /// rebalancing, a member that has not rejoined yet is let back only while fewer than
    /// `members_max` have (this trims a group restored under a smaller limit).
    fn accepts_joining(&self, member_id: &str, group_instance_id: Option<&str>) -> bool {
        if group_instance_id.is_some_and(|id| self.static_index(id).is_some()) {
            return true;
        }
        let max = self.config.members_max;
        match self.index(member_id) {
            Some(i) if self.state == ClassicState::PreparingRebalance => {
                self.members[i].awaiting_join || self.awaiting_join_count() < max
            }
            Some(_) => true,
            None => self.members.len() < max,
        }
    }

    fn join_new_member(
        &mut self,
        now: i64,
        req: JoinRequest,
        effects: &mut Vec<Effect>,
    ) -> Reply<JoinResult> {
        let replaced = req
            .group_instance_id
            .as_deref()
            .and_then(|id| self.static_index(id));
        let replaced_id = replaced.map(|i| self.members[i].member_id.clone());
        if !self.supports_protocols(replaced_id.as_deref(), &req.protocol_type, &req.protocols) {
            return Reply::Now(join_error("", self.inconsistent_protocol()));
        }
        let prefix = req.group_instance_id.as_deref().unwrap_or(&req.client_id);
        let member_id = format!("{prefix}-{}", uuid::Uuid::new_v4());
        if let Some(i) = replaced {
            return self.replace_static_member(now, i, member_id, req, effects);
        }
        if req.group_instance_id.is_none() && req.require_known_member_id {
            self.add_pending(now, member_id.clone(), req.session_timeout_ms, effects);
            return Reply::Now(JoinResult {
                error: Some(GroupError::MemberIdRequired {
                    member_id: member_id.clone(),
                }),
                generation_id: -1,
                member_id,
                ..JoinResult::default()
            });
        }
        self.add_member_and_rebalance(now, member_id, req, effects)
    }

    fn join_known_member(
        &mut self,
        now: i64,
        req: JoinRequest,
        effects: &mut Vec<Effect>,
    ) -> Reply<JoinResult> {
        let member_id = req.member_id.clone();
        if !self.supports_protocols(Some(&member_id), &req.protocol_type, &req.protocols) {
            return Reply::Now(join_error(&member_id, self.inconsistent_protocol()));
        }
        if req.group_instance_id.is_none()
            && let Some(p) = self.pending_index(&member_id)
        {
            // The second join of the MEMBER_ID_REQUIRED handshake.
            self.pending.remove(p);
            return self.add_member_and_rebalance(now, member_id, req, effects);
        }
        let i = match self.validate_member(&member_id, req.group_instance_id.as_deref()) {
            Ok(i) => i,
            Err(e) => return Reply::Now(join_error(&member_id, e)),
        };
        let reason = format!(
            "member {member_id} rejoined in {}; client reason: {}",
            self.state.name(),
            req.reason.as_deref().unwrap_or("none")
        );
        match self.state {
            ClassicState::PreparingRebalance => {
                self.update_member_and_rebalance(now, i, req, &reason, effects)
            }
            ClassicState::CompletingRebalance => {
                if self.members[i].matches(&req.protocols) {
                    // It probably missed the answer to its last join: send it again.
                    self.members[i].refresh(now);
                    Reply::Now(self.current_join_result(i, true, false))
                } else {
                    self.update_member_and_rebalance(now, i, req, &reason, effects)
                }
            }
            ClassicState::Stable => {
                // A leader's rejoin asks for a new assignment (e.g. its topics' partitions
                // changed, which no member's metadata shows), so it always rebalances.
                if self.is_leader(&member_id) || !self.members[i].matches(&req.protocols) {
                    self.update_member_and_rebalance(now, i, req, &reason, effects)
                } else {
                    self.members[i].refresh(now);
                    Reply::Now(self.current_join_result(i, false, false))
                }
            }
            ClassicState::Empty | ClassicState::Dead => {
                Reply::Now(join_error(&member_id, self.unknown_member(&member_id)))
            }
        }
    }

    fn add_member_and_rebalance(
        &mut self,
        now: i64,
        member_id: String,
        req: JoinRequest,
        effects: &mut Vec<Effect>,
    ) -> Reply<JoinResult> {
        if self.state == ClassicState::PreparingRebalance
            && let Some(delay) = &mut self.initial_delay
        {
            delay.new_member_added = true;
        }
        if self.members.is_empty() {
            self.protocol_type = Some(req.protocol_type.clone());
        }
        let reason = format!(
            "new member {member_id} joined; client reason: {}",
            req.reason.as_deref().unwrap_or("none")
        );
        let mut member = Member {
            member_id: member_id.clone(),
            group_instance_id: req.group_instance_id,
            client_id: req.client_id,
            client_host: req.client_host,
            protocols: req.protocols,
            session_timeout_ms: req.session_timeout_ms,
            rebalance_timeout_ms: req.rebalance_timeout_ms,
            assignment: Bytes::new(),
            awaiting_join: true,
            awaiting_sync: false,
            is_new: true,
            pending_sync: false,
            session_deadline: now,
        };
        member.refresh(now);
        self.members.push(member);
        if self.leader_id.is_none() {
            self.leader_id = Some(member_id.clone());
        }
        self.maybe_prepare_rebalance_or_complete_join(now, &reason, effects);
        Reply::Later { member_id }
    }

    fn update_member_and_rebalance(
        &mut self,
        now: i64,
        i: usize,
        req: JoinRequest,
        reason: &str,
        effects: &mut Vec<Effect>,
    ) -> Reply<JoinResult> {
        self.members[i].update(now, req);
        let member_id = self.members[i].member_id.clone();
        self.maybe_prepare_rebalance_or_complete_join(now, reason, effects);
        Reply::Later { member_id }
    }

    /// A known static instance joined with no member id (it restarted): it takes over the old
    /// member under `new_id`, keeping its assignment, and the old id is fenced.
    fn replace_static_member(
        &mut self,
        now: i64,
        i: usize,
        new_id: String,
        req: JoinRequest,
        effects: &mut Vec<Effect>,
    ) -> Reply<JoinResult> {
        let old_id = std::mem::replace(&mut self.members[i].member_id, new_id.clone());
        let instance = req.group_instance_id.as_deref().unwrap_or_default();
        let fenced = self.fenced_instance(&old_id, instance);
        let member = &mut self.members[i];
        if std::mem::take(&mut member.awaiting_join) {
            effects.push(Effect::Join {
                member_id: old_id.clone(),
                result: join_error(&old_id, fenced.clone()),
            });
        }
        if std::mem::take(&mut member.awaiting_sync) {
            effects.push(Effect::Sync {
                member_id: old_id.clone(),
                result: sync_error(fenced),
            });
        }
        if self.leader_id.as_deref() == Some(old_id.as_str()) {
            self.leader_id = Some(new_id.clone());
        }
        let reason = format!(
            "static member {new_id} replaced {old_id}; client reason: {}",
            req.reason.as_deref().unwrap_or("none")
        );
        self.members[i].update(now, req);

        if self.state == ClassicState::Stable && self.select_protocol() == self.protocol_name {
            // Nothing the assignment depends on changed: answer with the current generation.
            // A leader gets the members (it must watch for metadata changes) but is told not to
            // assign (KIP-814); the followers keep their assignments.
            self.members[i].awaiting_join = false;
            effects.push(Effect::Persist);
            let is_leader = self.is_leader(&new_id);
            return Reply::Now(self.current_join_result(i, true, is_leader));
        }
        // In `CompletingRebalance` the leader may be assigning to the old id: start over.
        self.maybe_prepare_rebalance_or_complete_join(now, &reason, effects);
        Reply::Later { member_id: new_id }
    }

    /// The current generation, as a JoinGroup answer for member `i`; the member list only for
    /// the leader and only when `with_members`.
    fn current_join_result(
        &self,
        i: usize,
        with_members: bool,
        skip_assignment: bool,
    ) -> JoinResult {
        let member_id = self.members[i].member_id.clone();
        JoinResult {
            error: None,
            generation_id: self.generation_id,
            protocol_type: self.protocol_type.clone(),
            protocol_name: self.protocol_name.clone(),
            leader: self.leader_id.clone().unwrap_or_default(),
            skip_assignment,
            members: if with_members && self.is_leader(&member_id) {
                self.joined_members()
            } else {
                Vec::new()
            },
            member_id,
        }
    }

    /// Every member with its metadata for the chosen protocol, for the leader.
    fn joined_members(&self) -> Vec<JoinedMember> {
        let protocol = self.protocol_name.as_deref().unwrap_or("");
        self.members
            .iter()
            .map(|m| JoinedMember {
                member_id: m.member_id.clone(),
                group_instance_id: m.group_instance_id.clone(),
                metadata: m.metadata(protocol),
            })
            .collect()
    }

    /// Whether a member with these protocols can be in the group: the first member needs a
    /// protocol type and a protocol; later ones the group's type and a protocol every *other*
    /// member supports (`exclude`: the joining member's own entry, whose protocols it is
    /// replacing).
    fn supports_protocols(
        &self,
        exclude: Option<&str>,
        protocol_type: &str,
        protocols: &[(String, Bytes)],
    ) -> bool {
        if protocols.is_empty() {
            return false;
        }
        if self.members.is_empty() {
            return !protocol_type.is_empty();
        }
        if self.protocol_type.as_deref() != Some(protocol_type) {
            return false;
        }
        let others = || {
            self.members
                .iter()
                .filter(move |m| Some(m.member_id.as_str()) != exclude)
        };
        protocols
            .iter()
            .any(|(name, _)| others().all(|m| m.supports(name)))
    }

    /// The protocol for the next generation: among those every member supports, the one most
    /// members prefer (each votes for its first supported one); ties go to the leader's
    /// preference. `None` without members or without a common protocol.
    fn select_protocol(&self) -> Option<String> {
        let leader = self.leader_id.as_deref().and_then(|id| self.index(id));
        let leader = self.members.get(leader.unwrap_or(0))?;
        // Every common protocol is one of the leader's: listing them in its order settles ties.
        let mut candidates: Vec<&str> = Vec::new();
        for (name, _) in &leader.protocols {
            if !candidates.contains(&name.as_str()) && self.members.iter().all(|m| m.supports(name))
            {
                candidates.push(name);
            }
        }
        let mut votes = vec![0usize; candidates.len()];
        for member in &self.members {
            if let Some(choice) = member.vote(&candidates)
                && let Some(k) = candidates.iter().position(|c| *c == choice)
            {
                votes[k] += 1;
            }
        }
        let mut best: Option<usize> = None;
        for (k, count) in votes.iter().enumerate() {
            if best.is_none_or(|b| *count > votes[b]) {
                best = Some(k);
            }
        }
        best.map(|k| candidates[k].to_string())
    }
}

// Rebalancing.
impl ClassicGroup {
    fn maybe_prepare_rebalance_or_complete_join(
        &mut self,
        now: i64,
        reason: &str,
        effects: &mut Vec<Effect>,
    ) {
        match self.state {
            ClassicState::Empty | ClassicState::Stable | ClassicState::CompletingRebalance => {
                self.prepare_rebalance(now, reason, effects)
            }
            ClassicState::PreparingRebalance => self.maybe_complete_join(now, effects),
            ClassicState::Dead => {}
        }
    }

    pub(super) fn prepare_rebalance(&mut self, now: i64, reason: &str, effects: &mut Vec<Effect>) {
        if self.state == ClassicState::CompletingRebalance {
            // The leader's assignment would be for a generation that is going away. A member
            // whose wait ends here gets a whole session to rejoin, as after any answer.
            for m in &mut self.members {
                m.assignment = Bytes::new();
                if std::mem::take(&mut m.awaiting_sync) {
                    m.refresh(now);
                    effects.push(Effect::Sync {
                        member_id: m.member_id.clone(),
                        result: sync_error(GroupError::RebalanceInProgress {
                            group_id: self.group_id.clone(),
                        }),
                    });
                }
            }
        }
        self.sync_deadline = None;
        for m in &mut self.members {
            m.pending_sync = false;
        }
        let initial = self.state == ClassicState::Empty;
        self.state = ClassicState::PreparingRebalance;
        tracing::info!(
            group = %self.group_id,
            generation = self.generation_id,
            reason,
            "classic group rebalancing"
        );
        let rebalance_timeout_ms = self.rebalance_timeout_ms();
        let delay_ms = self.config.initial_rebalance_delay_ms;
        if initial && delay_ms > 0 {
            self.initial_delay = Some(InitialDelay {
                delay_ms,
                remaining_ms: (rebalance_timeout_ms - delay_ms).max(0),
                new_member_added: false,
            });
            self.join_deadline = Some(now.saturating_add(delay_ms));
        } else {
            self.initial_delay = None;
            self.join_deadline = Some(now.saturating_add(rebalance_timeout_ms));
            self.maybe_complete_join(now, effects);
        }
    }

    /// Ends the join phase early once everyone is in (never during the initial delay, whose
    /// point is to wait for members nobody knows of yet).
    pub(super) fn maybe_complete_join(&mut self, now: i64, effects: &mut Vec<Effect>) {
        if self.state == ClassicState::PreparingRebalance
            && self.initial_delay.is_none()
            && self.pending.is_empty()
            && self.members.iter().all(|m| m.awaiting_join)
        {
            self.complete_join(now, effects);
        }
    }

    pub(super) fn complete_join(&mut self, now: i64, effects: &mut Vec<Effect>) {
        // Dynamic members that did not rejoin are gone. Static ones stay: they may be
        // restarting, and their session timeout decides (KIP-345).
        let mut i = 0;
        while i < self.members.len() {
            if !self.members[i].awaiting_join && self.members[i].group_instance_id.is_none() {
                self.detach_member(i, effects);
            } else {
                i += 1;
            }
        }
        self.initial_delay = None;
        if !self.members.is_empty() && !self.elect_joined_leader() {
            // Only static members that have not rejoined remain: wait for them (or for their
            // sessions to end) another rebalance timeout.
            self.join_deadline = Some(now.saturating_add(self.rebalance_timeout_ms()));
            return;
        }
        self.join_deadline = None;
        self.generation_id = self.generation_id.saturating_add(1);
        if self.members.is_empty() {
            self.state = ClassicState::Empty;
            self.protocol_name = None;
            self.leader_id = None;
            self.sync_deadline = None;
            tracing::info!(group = %self.group_id, generation = self.generation_id, "classic group empty");
            effects.push(Effect::Persist);
            return;
        }
        self.protocol_name = self.select_protocol();
        self.state = ClassicState::CompletingRebalance;
        self.sync_deadline = Some(now.saturating_add(self.rebalance_timeout_ms()));
        tracing::info!(
            group = %self.group_id,
            generation = self.generation_id,
            members = self.members.len(),
            "classic group joined"
        );
        let leader = self.leader_id.clone().unwrap_or_default();
        let leader_members = self.joined_members();
        for m in &mut self.members {
            m.is_new = false;
            m.pending_sync = true;
            m.refresh(now);
            if std::mem::take(&mut m.awaiting_join) {
                let is_leader = m.member_id == leader;
                effects.push(Effect::Join {
                    member_id: m.member_id.clone(),
                    result: JoinResult {
                        error: None,
                        generation_id: self.generation_id,
                        protocol_type: self.protocol_type.clone(),
                        protocol_name: self.protocol_name.clone(),
                        leader: leader.clone(),
                        skip_assignment: false,
                        member_id: m.member_id.clone(),
                        members: if is_leader {
                            leader_members.clone()
                        } else {
                            Vec::new()
                        },
                    },
                });
            }
        }
    }

    /// Keeps the leader if it rejoined, else hands the lead to the first member that did.
    /// `false` when no member rejoined.
    fn elect_joined_leader(&mut self) -> bool {
        let leader_rejoined = self
            .leader_id
            .as_deref()
            .and_then(|id| self.index(id))
            .is_some_and(|i| self.members[i].awaiting_join);
        if leader_rejoined {
            return true;
        }
        match self.members.iter().find(|m| m.awaiting_join) {
            Some(m) => {
                self.leader_id = Some(m.member_id.clone());
                true
            }
            None => false,
        }
    }
}
