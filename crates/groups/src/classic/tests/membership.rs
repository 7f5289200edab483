//! Syncing, heartbeats, leaving, expiry and the other timers, dead groups.

use super::*;

#[test]
fn three_members_leader_assigns_while_followers_wait() {
    let mut g = group(100, 10);
    let mut fx = Vec::new();
    let a = parked(g.join(0, join_req("", "a"), &mut fx));
    let b = parked(g.join(0, join_req("", "b"), &mut fx));
    let c = parked(g.join(0, join_req("", "c"), &mut fx));
    assert_eq!(g.state(), ClassicState::PreparingRebalance);
    assert_eq!(g.next_deadline(), Some(100));
    g.tick(99, &mut fx);
    assert!(fx.is_empty(), "{fx:?}");
    g.tick(100, &mut fx);
    assert!(
        fx.is_empty(),
        "b and c joined during the first step: {fx:?}"
    );
    assert_eq!(g.next_deadline(), Some(200));

    g.tick(200, &mut fx);
    let answers = joins(&fx);
    assert_eq!(answers.len(), 3);
    assert_eq!(g.state(), ClassicState::CompletingRebalance);
    for (member_id, result) in &answers {
        assert_eq!(result.error_code(), NONE);
        assert_eq!(result.generation_id, 1);
        assert_eq!(&result.member_id, member_id);
        assert_eq!(result.leader, a);
        if *member_id == a {
            let listed: Vec<&str> = result
                .members
                .iter()
                .map(|m| m.member_id.as_str())
                .collect();
            assert_eq!(listed, vec![a.as_str(), b.as_str(), c.as_str()]);
        } else {
            assert!(result.members.is_empty(), "followers get no member list");
        }
    }
    fx.clear();

    assert_eq!(
        g.sync(210, sync_req(&b, 1, vec![]), &mut fx),
        Reply::Later {
            member_id: b.clone()
        }
    );
    assert_eq!(
        g.sync(220, sync_req(&c, 1, vec![]), &mut fx),
        Reply::Later {
            member_id: c.clone()
        }
    );
    assert!(fx.is_empty(), "{fx:?}");
    assert_eq!(g.heartbeat(225, &b, None, 1, &mut fx).code(), NONE);

    let assignments = vec![
        (a.clone(), assignment_for(&a)),
        (b.clone(), assignment_for(&b)),
        (c.clone(), assignment_for(&c)),
    ];
    let reply = g.sync(230, sync_req(&a, 1, assignments), &mut fx);
    assert_eq!(reply, Reply::Now(sync_ok(assignment_for(&a))));
    assert_eq!(fx[0], Effect::Persist, "stored before anyone is answered");
    assert_eq!(
        syncs(&fx),
        vec![
            (b.clone(), sync_ok(assignment_for(&b))),
            (c.clone(), sync_ok(assignment_for(&c))),
        ]
    );
    assert_eq!(g.state(), ClassicState::Stable);
}

#[test]
fn members_left_out_by_the_leader_get_an_empty_assignment() {
    let (mut g, ids) = gathered(10, vec![join_req("", "a"), join_req("", "b")]);
    let (a, b) = (ids[0].clone(), ids[1].clone());
    let mut fx = Vec::new();
    parked_sync(&mut g, &b);
    let assignments = vec![
        (a.clone(), assignment_for(&a)),
        ("not-a-member".to_string(), Bytes::from_static(b"x")),
    ];
    let reply = g.sync(FORMED_AT, sync_req(&a, 1, assignments), &mut fx);
    assert_eq!(reply, Reply::Now(sync_ok(assignment_for(&a))));
    assert_eq!(syncs(&fx), vec![(b.clone(), sync_ok(Bytes::new()))]);
    let described = g.describe();
    assert_eq!(described.members.len(), 2);
    assert_eq!(described.members[1].assignment, Bytes::new());
}

#[test]
fn leave_rebalances_and_the_others_get_a_new_generation() {
    let (mut g, ids) = stable_group(3);
    let (a, b, c) = (&ids[0], &ids[1], &ids[2]);
    let mut fx = Vec::new();
    let leaving = [LeavingMember {
        member_id: c.clone(),
        group_instance_id: None,
    }];
    assert_eq!(g.leave(200, &leaving, &mut fx).code(), vec![NONE]);
    assert_eq!(g.state(), ClassicState::PreparingRebalance);
    assert_eq!(g.member_count(), 2);
    assert_eq!(
        g.heartbeat(210, a, None, 1, &mut fx).code(),
        code(ResponseError::RebalanceInProgress)
    );
    let sync = g.sync(210, sync_req(b, 1, vec![]), &mut fx);
    assert_eq!(
        now_sync(sync),
        Reply::Now(sync_error(code(ResponseError::RebalanceInProgress)))
    );

    assert_eq!(parked(g.join(220, join_req(a, "c0"), &mut fx)), *a);
    let b_joined = answered(g.join(230, join_req(b, "c1"), &mut fx));
    assert_eq!(b_joined.generation_id, 2);
    assert_eq!(b_joined.leader, *a);
    assert!(b_joined.members.is_empty());
    let answers = joins(&fx);
    assert_eq!(answers.len(), 1);
    assert_eq!(answers[0].0, *a);
    assert_eq!(answers[0].1.generation_id, 2);
    let listed: Vec<&str> = answers[0]
        .1
        .members
        .iter()
        .map(|m| m.member_id.as_str())
        .collect();
    assert_eq!(listed, vec![a.as_str(), b.as_str()]);

    assert_eq!(
        g.leave(240, &leaving, &mut fx).code(),
        vec![code(ResponseError::UnknownMemberId)]
    );
}

#[test]
fn a_leaving_member_with_a_parked_join_is_answered_unknown_member() {
    let mut g = group(100, 10);
    let mut fx = Vec::new();
    let a = parked(g.join(0, join_req("", "a"), &mut fx));
    let b = parked(g.join(0, join_req("", "b"), &mut fx));
    let leaving = [LeavingMember {
        member_id: b.clone(),
        group_instance_id: None,
    }];
    assert_eq!(g.leave(10, &leaving, &mut fx).code(), vec![NONE]);
    assert_eq!(
        join_codes(&fx),
        vec![(b, join_error("", code(ResponseError::UnknownMemberId)))]
    );
    fx.clear();
    g.tick(100, &mut fx);
    g.tick(200, &mut fx);
    assert_eq!(joins(&fx).len(), 1);
    assert_eq!(joins(&fx)[0].0, a);
}

#[test]
fn last_member_leaving_empties_the_group() {
    let (mut g, ids) = stable_group(1);
    let mut fx = Vec::new();
    let leaving = [LeavingMember {
        member_id: ids[0].clone(),
        group_instance_id: None,
    }];
    assert_eq!(g.leave(200, &leaving, &mut fx).code(), vec![NONE]);
    assert_eq!(g.state(), ClassicState::Empty);
    assert_eq!(g.generation_id(), 2);
    assert_eq!(fx, vec![Effect::Persist]);
    assert_eq!(g.next_deadline(), None);
    assert_eq!(g.protocol_type(), "consumer", "kept while empty");
    assert_eq!(g.validate_offset_commit("", None, -1), Ok(()));
}

#[test]
fn expired_session_removes_the_member_and_rebalances() {
    let (mut g, ids) = stable_group(2);
    let (a, b) = (&ids[0], &ids[1]);
    let mut fx = Vec::new();
    let session_end = FORMED_AT + i64::from(SESSION_MS);
    assert_eq!(g.heartbeat(5_000, a, None, 1, &mut fx).code(), NONE);
    assert_eq!(g.next_deadline(), Some(session_end));

    g.tick(session_end - 1, &mut fx);
    assert_eq!(g.member_count(), 2);
    g.tick(session_end, &mut fx);
    assert_eq!(g.member_count(), 1);
    assert_eq!(g.state(), ClassicState::PreparingRebalance);
    assert_eq!(
        g.heartbeat(session_end, b, None, 1, &mut fx).code(),
        code(ResponseError::UnknownMemberId)
    );

    let rejoined = answered(g.join(session_end + 1, join_req(a, "c0"), &mut fx));
    assert_eq!(rejoined.generation_id, 2);
    assert_eq!(rejoined.members.len(), 1);
}

#[test]
fn last_session_expiring_empties_the_group() {
    let (mut g, _) = stable_group(1);
    let mut fx = Vec::new();
    g.tick(FORMED_AT + i64::from(SESSION_MS), &mut fx);
    assert_eq!(g.state(), ClassicState::Empty);
    assert_eq!(g.generation_id(), 2);
    assert_eq!(fx, vec![Effect::Persist]);
}

#[test]
fn members_that_never_sync_expire_and_parked_syncs_are_told_to_rejoin() {
    let (mut g, ids) = gathered(10, vec![join_req("", "a"), join_req("", "b")]);
    let (a, b) = (ids[0].clone(), ids[1].clone());
    let mut fx = Vec::new();
    parked_sync(&mut g, &b);
    // The leader never syncs nor heartbeats; the parked follower does not expire.
    assert_eq!(g.next_deadline(), Some(FORMED_AT + i64::from(SESSION_MS)));
    g.tick(FORMED_AT + i64::from(SESSION_MS), &mut fx);
    assert!(g.index(&a).is_none());
    assert!(
        g.index(&b).is_some(),
        "its answered sync started a new session"
    );
    assert_eq!(
        g.next_deadline(),
        Some(FORMED_AT + 2 * i64::from(SESSION_MS))
    );
    assert_eq!(
        sync_codes(&fx),
        vec![(
            b.clone(),
            sync_error(code(ResponseError::RebalanceInProgress))
        )]
    );
    assert_eq!(g.state(), ClassicState::PreparingRebalance);
}

#[test]
fn members_that_heartbeat_but_never_sync_are_removed_at_the_sync_deadline() {
    let (mut g, ids) = gathered(10, vec![join_req("", "a"), join_req("", "b")]);
    let (a, b) = (ids[0].clone(), ids[1].clone());
    let mut fx = Vec::new();
    let reply = g.sync(
        FORMED_AT,
        sync_req(&a, 1, vec![(a.clone(), assignment_for(&a))]),
        &mut fx,
    );
    assert_eq!(reply, Reply::Now(sync_ok(assignment_for(&a))));
    for t in [9_000, 18_000, 27_000] {
        assert_eq!(g.heartbeat(t, &a, None, 1, &mut fx).code(), NONE);
        assert_eq!(g.heartbeat(t, &b, None, 1, &mut fx).code(), NONE);
    }
    let sync_deadline = FORMED_AT + i64::from(REBALANCE_MS);
    assert_eq!(g.next_deadline(), Some(sync_deadline));
    g.tick(sync_deadline - 1, &mut fx);
    assert_eq!(g.member_count(), 2);
    g.tick(sync_deadline, &mut fx);
    assert_eq!(g.member_count(), 1);
    assert!(g.index(&b).is_none());
    assert_eq!(g.state(), ClassicState::PreparingRebalance);
}

#[test]
fn rebalance_timeout_removes_a_member_that_does_not_rejoin() {
    let (mut g, ids) = stable_group(2);
    let (a, b) = (&ids[0], &ids[1]);
    let mut fx = Vec::new();
    // The leader's rejoin starts a rebalance; the follower keeps heartbeating, never rejoins.
    assert_eq!(parked(g.join(1_000, join_req(a, "c0"), &mut fx)), *a);
    assert_eq!(g.state(), ClassicState::PreparingRebalance);
    for t in [9_000, 18_000, 27_000] {
        assert_eq!(
            g.heartbeat(t, b, None, 1, &mut fx).code(),
            code(ResponseError::RebalanceInProgress)
        );
    }
    let join_deadline = 1_000 + i64::from(REBALANCE_MS);
    assert_eq!(g.next_deadline(), Some(join_deadline));
    g.tick(join_deadline - 1, &mut fx);
    assert!(fx.is_empty(), "{fx:?}");
    g.tick(join_deadline, &mut fx);
    let answers = joins(&fx);
    assert_eq!(answers.len(), 1);
    assert_eq!(answers[0].0, *a);
    assert_eq!(answers[0].1.generation_id, 2);
    assert_eq!(answers[0].1.members.len(), 1);
    assert_eq!(g.member_count(), 1);
    assert_eq!(
        g.heartbeat(join_deadline, b, None, 2, &mut fx).code(),
        code(ResponseError::UnknownMemberId)
    );
}

#[test]
fn a_static_member_that_does_not_rejoin_stays_for_its_session() {
    let (mut g, ids) = form(10, vec![static_req("a"), static_req("b")]);
    let (a, b) = (&ids[0], &ids[1]);
    let mut fx = Vec::new();
    let mut rejoin = static_req("a");
    rejoin.member_id = a.clone();
    assert_eq!(parked(g.join(1_000, rejoin, &mut fx)), *a);
    for t in [9_000, 18_000, 27_000] {
        assert_eq!(
            g.heartbeat(t, b, Some("b"), 1, &mut fx).code(),
            code(ResponseError::RebalanceInProgress)
        );
    }
    g.tick(1_000 + i64::from(REBALANCE_MS), &mut fx);
    let answers = joins(&fx);
    assert_eq!(answers.len(), 1);
    assert_eq!(answers[0].1.generation_id, 2);
    let listed: Vec<&str> = answers[0]
        .1
        .members
        .iter()
        .map(|m| m.member_id.as_str())
        .collect();
    assert_eq!(
        listed,
        vec![a.as_str(), b.as_str()],
        "the static member is still assigned to"
    );
    assert_eq!(g.member_count(), 2);
}

#[test]
fn heartbeat_answers_in_each_state() {
    let unknown = code(ResponseError::UnknownMemberId);
    let mut fx = Vec::new();

    let mut g = group(100, 10);
    assert_eq!(
        g.heartbeat(0, "nobody", None, 0, &mut fx).code(),
        unknown,
        "Empty"
    );

    let a = parked(g.join(0, join_req("", "a"), &mut fx));
    assert_eq!(
        g.heartbeat(10, &a, None, 0, &mut fx).code(),
        code(ResponseError::RebalanceInProgress),
        "PreparingRebalance"
    );
    g.tick(100, &mut fx);
    assert_eq!(
        g.heartbeat(110, &a, None, 1, &mut fx).code(),
        NONE,
        "CompletingRebalance"
    );
    assert_eq!(
        g.heartbeat(110, &a, None, 0, &mut fx).code(),
        code(ResponseError::IllegalGeneration)
    );
    g.sync(120, sync_req(&a, 1, vec![]), &mut fx);
    assert_eq!(g.state(), ClassicState::Stable);
    assert_eq!(
        g.heartbeat(130, &a, None, 1, &mut fx).code(),
        NONE,
        "Stable"
    );
    assert_eq!(g.heartbeat(130, "nobody", None, 1, &mut fx).code(), unknown);
    assert_eq!(
        g.heartbeat(130, &a, None, 2, &mut fx).code(),
        code(ResponseError::IllegalGeneration)
    );

    let (mut s, ids) = form(10, vec![static_req("a")]);
    assert_eq!(
        s.heartbeat(200, &ids[0], Some("a"), 1, &mut fx).code(),
        NONE
    );
    assert_eq!(
        s.heartbeat(200, "a-old", Some("a"), 1, &mut fx).code(),
        code(ResponseError::FencedInstanceId)
    );
    assert_eq!(
        s.heartbeat(200, &ids[0], Some("z"), 1, &mut fx).code(),
        unknown
    );

    s.mark_dead();
    assert_eq!(
        s.heartbeat(300, &ids[0], Some("a"), 1, &mut fx).code(),
        code(ResponseError::CoordinatorNotAvailable)
    );
    assert_eq!(s.next_deadline(), None);
}

#[test]
fn leave_by_instance_id_and_pending_id() {
    let (mut g, ids) = form(10, vec![static_req("a"), static_req("b")]);
    let mut fx = Vec::new();
    let by_instance = |member_id: &str, instance: &str| LeavingMember {
        member_id: member_id.into(),
        group_instance_id: Some(instance.into()),
    };
    let codes = g.leave(
        200,
        &[
            by_instance("", "a"),
            by_instance("b-old", "b"),
            by_instance("", "zzz"),
        ],
        &mut fx,
    );
    assert_eq!(
        codes.code(),
        vec![
            NONE,
            code(ResponseError::FencedInstanceId),
            code(ResponseError::UnknownMemberId),
        ]
    );
    assert!(g.static_index("a").is_none());
    assert_eq!(
        g.leader_id.as_deref(),
        Some(ids[1].as_str()),
        "the lead passed on"
    );

    let handshake = JoinRequest {
        require_known_member_id: true,
        ..join_req("", "new")
    };
    let pending = answered(g.join(210, handshake, &mut fx)).member_id;
    let codes = g.leave(
        220,
        &[LeavingMember {
            member_id: pending,
            group_instance_id: None,
        }],
        &mut fx,
    );
    assert_eq!(codes.code(), vec![NONE]);
    assert!(g.pending.is_empty());
}

#[test]
fn dead_group_refuses_everything() {
    let (mut g, ids) = stable_group(1);
    g.mark_dead();
    let mut fx = Vec::new();
    let unavailable = code(ResponseError::CoordinatorNotAvailable);
    assert_eq!(g.state(), ClassicState::Dead);
    assert_eq!(
        answered(g.join(0, join_req("", "a"), &mut fx)).error_code(),
        unavailable
    );
    assert_eq!(
        now_sync(g.sync(0, sync_req(&ids[0], 1, vec![]), &mut fx)),
        Reply::Now(sync_error(unavailable))
    );
    let leaving = [LeavingMember {
        member_id: ids[0].clone(),
        group_instance_id: None,
    }];
    assert_eq!(g.leave(0, &leaving, &mut fx).code(), vec![unavailable]);
    g.tick(i64::MAX, &mut fx);
    assert!(fx.is_empty());
}
