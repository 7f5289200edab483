//! SyncGroup: followers wait for the leader, whose assignment completes the rebalance.

use std::collections::HashMap;

use bytes::Bytes;

use super::{ClassicGroup, ClassicState, Effect, Reply, SyncRequest, SyncResult, sync_error};

// Sync.
impl ClassicGroup {
    /// SyncGroup. In `CompletingRebalance` a follower's waits (`Reply::Later`) for the leader's;
    /// the leader's stores the assignment, so its `Reply::Now` comes with [`Effect::Persist`]
    /// (store first, then answer it and the followers).
    pub fn sync(
        &mut self,
        now: i64,
        req: SyncRequest,
        effects: &mut Vec<Effect>,
    ) -> Reply<SyncResult> {
        if self.state == ClassicState::Dead {
            return Reply::Now(sync_error(self.dead()));
        }
        let i = match self.validate_member(&req.member_id, req.group_instance_id.as_deref()) {
            Ok(i) => i,
            Err(e) => return Reply::Now(sync_error(e)),
        };
        if req.generation_id != self.generation_id {
            return Reply::Now(sync_error(self.illegal_generation(req.generation_id)));
        }
        let type_differs = req
            .protocol_type
            .as_ref()
            .is_some_and(|t| self.protocol_type.as_ref() != Some(t));
        let name_differs = req
            .protocol_name
            .as_ref()
            .is_some_and(|n| self.protocol_name.as_ref() != Some(n));
        if type_differs || name_differs {
            return Reply::Now(sync_error(self.inconsistent_protocol()));
        }
        match self.state {
            ClassicState::Empty | ClassicState::Dead => {
                Reply::Now(sync_error(self.unknown_member(&req.member_id)))
            }
            ClassicState::PreparingRebalance => Reply::Now(sync_error(self.rebalancing())),
            ClassicState::CompletingRebalance => {
                self.note_synced(now, i);
                if self.is_leader(&req.member_id) {
                    Reply::Now(self.complete_sync(now, i, &req.assignments, effects))
                } else {
                    self.members[i].awaiting_sync = true;
                    Reply::Later {
                        member_id: req.member_id,
                    }
                }
            }
            ClassicState::Stable => {
                self.note_synced(now, i);
                Reply::Now(self.sync_ok(self.members[i].assignment.clone()))
            }
        }
    }

    /// The leader's SyncGroup in `CompletingRebalance`: store the assignment and answer
    /// everyone waiting. Members the leader left out get an empty assignment.
    fn complete_sync(
        &mut self,
        now: i64,
        leader: usize,
        assignments: &[(String, Bytes)],
        effects: &mut Vec<Effect>,
    ) -> SyncResult {
        let by_member: HashMap<&str, &Bytes> = assignments
            .iter()
            .map(|(member_id, assignment)| (member_id.as_str(), assignment))
            .collect();
        for m in &mut self.members {
            m.assignment = by_member
                .get(m.member_id.as_str())
                .map(|a| (*a).clone())
                .unwrap_or_default();
        }
        self.state = ClassicState::Stable;
        effects.push(Effect::Persist);
        let protocol_type = self.protocol_type.clone();
        let protocol_name = self.protocol_name.clone();
        for m in &mut self.members {
            if std::mem::take(&mut m.awaiting_sync) {
                m.refresh(now);
                effects.push(Effect::Sync {
                    member_id: m.member_id.clone(),
                    result: SyncResult {
                        error: None,
                        protocol_type: protocol_type.clone(),
                        protocol_name: protocol_name.clone(),
                        assignment: m.assignment.clone(),
                    },
                });
            }
        }
        self.sync_ok(self.members[leader].assignment.clone())
    }

    /// Member `i` sent a valid SyncGroup.
    fn note_synced(&mut self, now: i64, i: usize) {
        self.members[i].pending_sync = false;
        self.members[i].refresh(now);
        if !self.members.iter().any(|m| m.pending_sync) {
            self.sync_deadline = None;
        }
    }

    fn sync_ok(&self, assignment: Bytes) -> SyncResult {
        SyncResult {
            error: None,
            protocol_type: self.protocol_type.clone(),
            protocol_name: self.protocol_name.clone(),
            assignment,
        }
    }

    pub(super) fn awaits_syncs(&self) -> bool {
        matches!(
            self.state,
            ClassicState::CompletingRebalance | ClassicState::Stable
        ) && self.members.iter().any(|m| m.pending_sync)
    }
}
