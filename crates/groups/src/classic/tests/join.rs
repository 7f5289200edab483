//! Joining: the member id handshake, pending ids, the initial delay, static members,
//! protocol checks and choice, size and timeout limits, rejoins.

use super::*;

#[test]
fn single_member_join_sync_heartbeat() {
    let mut g = group(0, 10);
    let mut fx = Vec::new();

    // Without an initial delay the join phase ends within the first join.
    let joined = answered(g.join(0, join_req("", "client"), &mut fx));
    assert_eq!(joined.error_code(), NONE);
    assert_eq!(joined.generation_id, 1);
    assert!(
        joined.member_id.starts_with("client-"),
        "{}",
        joined.member_id
    );
    assert_eq!(joined.leader, joined.member_id);
    assert_eq!(joined.protocol_type.as_deref(), Some("consumer"));
    assert_eq!(joined.protocol_name.as_deref(), Some("range"));
    assert_eq!(
        joined.members,
        vec![JoinedMember {
            member_id: joined.member_id.clone(),
            group_instance_id: None,
            metadata: Bytes::from_static(b"meta"),
        }]
    );
    assert!(fx.is_empty(), "{fx:?}");
    assert_eq!(g.state(), ClassicState::CompletingRebalance);
    let id = joined.member_id;

    assert_eq!(g.heartbeat(1, &id, None, 1, &mut fx).code(), NONE);

    let assignment = Bytes::from_static(b"p0");
    let reply = g.sync(
        2,
        sync_req(&id, 1, vec![(id.clone(), assignment.clone())]),
        &mut fx,
    );
    assert_eq!(reply, Reply::Now(sync_ok(assignment.clone())));
    assert_eq!(fx, vec![Effect::Persist]);
    assert_eq!(g.state(), ClassicState::Stable);
    fx.clear();

    assert_eq!(g.heartbeat(3, &id, None, 1, &mut fx).code(), NONE);
    assert_eq!(g.next_deadline(), Some(3 + i64::from(SESSION_MS)));
    let again = g.sync(4, sync_req(&id, 1, vec![]), &mut fx);
    assert_eq!(again, Reply::Now(sync_ok(assignment)));
    assert!(fx.is_empty(), "a Stable sync stores nothing: {fx:?}");
}

#[test]
fn member_id_required_handshake() {
    let mut g = group(0, 10);
    let mut fx = Vec::new();
    let first = answered(g.join(
        0,
        JoinRequest {
            require_known_member_id: true,
            ..join_req("", "client")
        },
        &mut fx,
    ));
    assert_eq!(first.error_code(), code(ResponseError::MemberIdRequired));
    assert_eq!(first.generation_id, -1);
    assert!(
        first.member_id.starts_with("client-"),
        "{}",
        first.member_id
    );
    assert_eq!(g.member_count(), 0);
    assert_eq!(g.state(), ClassicState::Empty);
    assert_eq!(g.next_deadline(), Some(i64::from(SESSION_MS)));

    let second = answered(g.join(5, join_req(&first.member_id, "client"), &mut fx));
    assert_eq!(second.error_code(), NONE);
    assert_eq!(second.member_id, first.member_id);
    assert_eq!(second.generation_id, 1);
    assert_eq!(g.member_count(), 1);
    assert!(g.pending.is_empty());

    let unknown = answered(g.join(6, join_req("client-unknown", "client"), &mut fx));
    assert_eq!(unknown.error_code(), code(ResponseError::UnknownMemberId));
    assert_eq!(unknown.member_id, "client-unknown");
}

#[test]
fn pending_member_id_expires_after_session_timeout() {
    let mut g = group(0, 10);
    let mut fx = Vec::new();
    let req = JoinRequest {
        require_known_member_id: true,
        ..join_req("", "client")
    };
    let id = answered(g.join(0, req, &mut fx)).member_id;
    g.tick(i64::from(SESSION_MS) - 1, &mut fx);
    assert_eq!(g.pending.len(), 1);
    g.tick(i64::from(SESSION_MS), &mut fx);
    assert!(g.pending.is_empty());
    assert_eq!(g.next_deadline(), None);
    let late = answered(g.join(i64::from(SESSION_MS), join_req(&id, "client"), &mut fx));
    assert_eq!(late.error_code(), code(ResponseError::UnknownMemberId));
}

#[test]
fn pending_member_ids_are_bounded_oldest_forgotten() {
    let mut g = group(0, 3);
    let mut fx = Vec::new();
    let ids: Vec<String> = (0..5)
        .map(|t| {
            let req = JoinRequest {
                require_known_member_id: true,
                ..join_req("", "client")
            };
            answered(g.join(t, req, &mut fx)).member_id
        })
        .collect();
    assert_eq!(g.pending.len(), 3);
    assert_eq!(g.next_deadline(), Some(2 + i64::from(SESSION_MS)));
    let forgotten = answered(g.join(10, join_req(&ids[0], "client"), &mut fx));
    assert_eq!(forgotten.error_code(), code(ResponseError::UnknownMemberId));
    // Still known: it becomes a member (and waits for the two other pending ids).
    assert_eq!(
        parked(g.join(10, join_req(&ids[4], "client"), &mut fx)),
        ids[4]
    );
    assert_eq!(g.member_count(), 1);
}

#[test]
fn initial_delay_waits_and_is_extended_by_new_members() {
    let mut g = group(3_000, 10);
    let mut fx = Vec::new();
    let a = parked(g.join(0, join_req("", "a"), &mut fx));
    assert_eq!(g.next_deadline(), Some(3_000));
    let b = parked(g.join(1_000, join_req("", "b"), &mut fx));
    assert!(
        fx.is_empty(),
        "everyone joined, but the delay is not over: {fx:?}"
    );
    g.tick(3_000, &mut fx);
    assert!(fx.is_empty(), "{fx:?}");
    assert_eq!(
        g.next_deadline(),
        Some(6_000),
        "b joined during the first step"
    );
    g.tick(6_000, &mut fx);
    let mut answered_ids: Vec<String> = joins(&fx).into_iter().map(|(id, _)| id).collect();
    answered_ids.sort();
    let mut expected = vec![a, b];
    expected.sort();
    assert_eq!(answered_ids, expected);
    assert_eq!(g.generation_id(), 1);
}

#[test]
fn initial_delay_without_new_members_is_one_step() {
    let mut g = group(3_000, 10);
    let mut fx = Vec::new();
    parked(g.join(0, join_req("", "a"), &mut fx));
    g.tick(3_000, &mut fx);
    assert_eq!(joins(&fx).len(), 1);
    assert_eq!(g.state(), ClassicState::CompletingRebalance);
}

#[test]
fn initial_delay_never_exceeds_the_rebalance_timeout() {
    // Rebalance timeout 10 s, delay 3 s, a new member in every step: steps end at 3, 6, 9
    // and 10 s.
    let mut g = group(3_000, 10);
    let mut fx = Vec::new();
    let req = |client: &str| JoinRequest {
        rebalance_timeout_ms: 10_000,
        ..join_req("", client)
    };
    parked(g.join(0, req("a"), &mut fx));
    for (join_at, step_end, next_end) in [
        (1_000, 3_000, 6_000),
        (4_000, 6_000, 9_000),
        (7_000, 9_000, 10_000),
    ] {
        parked(g.join(join_at, req(&format!("m{join_at}")), &mut fx));
        g.tick(step_end, &mut fx);
        assert!(fx.is_empty(), "{fx:?}");
        assert_eq!(g.next_deadline(), Some(next_end));
    }
    parked(g.join(9_500, req("late"), &mut fx));
    g.tick(10_000, &mut fx);
    assert_eq!(joins(&fx).len(), 5);
    assert_eq!(g.state(), ClassicState::CompletingRebalance);
}

#[test]
fn static_member_rejoins_without_rebalance_and_fences_its_old_id() {
    let (mut g, ids) = form(10, vec![static_req("b"), static_req("a")]);
    let (b, old_a) = (ids[0].clone(), ids[1].clone());
    let mut fx = Vec::new();

    // "a" restarts: same instance id, no member id.
    let rejoined = answered(g.join(1_000, static_req("a"), &mut fx));
    assert_eq!(rejoined.error_code(), NONE);
    assert_ne!(rejoined.member_id, old_a);
    assert!(
        rejoined.member_id.starts_with("a-"),
        "{}",
        rejoined.member_id
    );
    assert_eq!(rejoined.generation_id, 1);
    assert_eq!(rejoined.leader, b);
    assert!(rejoined.members.is_empty());
    assert!(!rejoined.skip_assignment);
    assert_eq!(fx, vec![Effect::Persist]);
    assert_eq!(g.state(), ClassicState::Stable);
    let new_a = rejoined.member_id;
    fx.clear();

    let fenced = code(ResponseError::FencedInstanceId);
    assert_eq!(
        g.heartbeat(1_001, &old_a, Some("a"), 1, &mut fx).code(),
        fenced
    );
    assert_eq!(
        g.heartbeat(1_001, &old_a, None, 1, &mut fx).code(),
        code(ResponseError::UnknownMemberId)
    );
    let old_sync = SyncRequest {
        group_instance_id: Some("a".into()),
        ..sync_req(&old_a, 1, vec![])
    };
    assert_eq!(
        now_sync(g.sync(1_002, old_sync, &mut fx)),
        Reply::Now(sync_error(fenced))
    );

    assert_eq!(
        g.heartbeat(1_003, &new_a, Some("a"), 1, &mut fx).code(),
        NONE
    );
    let new_sync = SyncRequest {
        group_instance_id: Some("a".into()),
        ..sync_req(&new_a, 1, vec![])
    };
    assert_eq!(
        g.sync(1_004, new_sync, &mut fx),
        Reply::Now(sync_ok(assignment_for(&old_a))),
        "the assignment survives the restart"
    );

    // The leader restarts: it learns it leads (and the members) but must not assign.
    let leader = answered(g.join(2_000, static_req("b"), &mut fx));
    assert_eq!(leader.error_code(), NONE);
    assert_eq!(leader.leader, leader.member_id);
    assert!(leader.skip_assignment);
    assert_eq!(leader.members.len(), 2);
    assert_eq!(g.state(), ClassicState::Stable);
    assert_eq!(g.generation_id(), 1);
}

#[test]
fn static_member_replacing_a_parked_join_fences_the_old_request() {
    let (mut g, ids) = form(10, vec![static_req("a"), static_req("b")]);
    let (a, old_b) = (ids[0].clone(), ids[1].clone());
    let mut fx = Vec::new();
    let mut changed = with_protocols(static_req("b"), &["range", "roundrobin"]);
    changed.member_id = old_b.clone();
    assert_eq!(parked(g.join(1_000, changed, &mut fx)), old_b);
    assert_eq!(g.state(), ClassicState::PreparingRebalance);

    let new_b = parked(g.join(1_100, static_req("b"), &mut fx));
    assert_ne!(new_b, old_b);
    assert_eq!(
        join_codes(&fx),
        vec![(
            old_b.clone(),
            join_error(&old_b, code(ResponseError::FencedInstanceId))
        )]
    );
    fx.clear();

    let mut rejoin_a = static_req("a");
    rejoin_a.member_id = a.clone();
    let a_joined = answered(g.join(1_200, rejoin_a, &mut fx));
    assert_eq!(a_joined.generation_id, 2);
    let answers = joins(&fx);
    assert_eq!(answers.len(), 1);
    assert_eq!(answers[0].0, new_b);
    assert_eq!(answers[0].1.generation_id, 2);
}

#[test]
fn static_member_restart_rebalances_only_when_the_protocol_choice_changes() {
    let (mut g, _) = form(10, vec![static_req("a"), static_req("b")]);
    let mut fx = Vec::new();
    // "a" comes back also offering "roundrobin", which "b" lacks: "range" stays the only
    // common protocol, so nothing changes.
    let both = with_protocols(static_req("a"), &["roundrobin", "range"]);
    assert_eq!(answered(g.join(1_000, both, &mut fx)).error_code(), NONE);
    assert_eq!(g.state(), ClassicState::Stable);
    // "a" offering only "roundrobin" has nothing in common with "b": refused.
    let only = with_protocols(static_req("a"), &["roundrobin"]);
    assert_eq!(
        answered(g.join(1_100, only, &mut fx)).error_code(),
        code(ResponseError::InconsistentGroupProtocol)
    );
    assert_eq!(g.state(), ClassicState::Stable);
    // "b" comes back preferring "roundrobin" too: both vote for it, the choice changes.
    let both = with_protocols(static_req("b"), &["roundrobin", "range"]);
    assert!(matches!(g.join(1_200, both, &mut fx), Reply::Later { .. }));
    assert_eq!(g.state(), ClassicState::PreparingRebalance);
}

#[test]
fn inconsistent_protocols_are_refused() {
    let inconsistent = code(ResponseError::InconsistentGroupProtocol);
    let mut g = group(0, 10);
    let mut fx = Vec::new();
    let no_type = JoinRequest {
        protocol_type: String::new(),
        ..join_req("", "a")
    };
    assert_eq!(
        answered(g.join(0, no_type, &mut fx)).error_code(),
        inconsistent
    );
    let no_protocols = with_protocols(join_req("", "a"), &[]);
    assert_eq!(
        answered(g.join(0, no_protocols, &mut fx)).error_code(),
        inconsistent
    );

    let a = answered(g.join(0, join_req("", "a"), &mut fx)).member_id;
    let other_protocol = with_protocols(join_req("", "b"), &["roundrobin"]);
    assert_eq!(
        answered(g.join(1, other_protocol, &mut fx)).error_code(),
        inconsistent
    );
    let other_type = JoinRequest {
        protocol_type: "connect".into(),
        ..join_req("", "b")
    };
    assert_eq!(
        answered(g.join(1, other_type, &mut fx)).error_code(),
        inconsistent
    );
    assert_eq!(g.member_count(), 1);

    let bad_name = SyncRequest {
        protocol_name: Some("roundrobin".into()),
        ..sync_req(&a, 1, vec![])
    };
    assert_eq!(
        now_sync(g.sync(2, bad_name, &mut fx)),
        Reply::Now(sync_error(inconsistent))
    );
    let bad_type = SyncRequest {
        protocol_type: Some("connect".into()),
        ..sync_req(&a, 1, vec![])
    };
    assert_eq!(
        now_sync(g.sync(2, bad_type, &mut fx)),
        Reply::Now(sync_error(inconsistent))
    );
    let good = SyncRequest {
        protocol_type: Some("consumer".into()),
        protocol_name: Some("range".into()),
        ..sync_req(&a, 1, vec![])
    };
    assert_eq!(g.sync(2, good, &mut fx), Reply::Now(sync_ok(Bytes::new())));

    // One that also supports "range" is welcome.
    let overlapping = with_protocols(join_req("", "b"), &["roundrobin", "range"]);
    assert!(matches!(
        g.join(3, overlapping, &mut fx),
        Reply::Later { .. }
    ));
}

#[test]
fn a_lone_member_may_switch_protocols() {
    let mut g = group(0, 10);
    let mut fx = Vec::new();
    let a = answered(g.join(0, join_req("", "a"), &mut fx)).member_id;
    let switched = answered(g.join(
        1,
        with_protocols(join_req(&a, "a"), &["roundrobin"]),
        &mut fx,
    ));
    assert_eq!(switched.error_code(), NONE);
    assert_eq!(switched.generation_id, 2);
    assert_eq!(switched.protocol_name.as_deref(), Some("roundrobin"));
}

#[test]
fn group_max_size_is_enforced() {
    let full = code(ResponseError::GroupMaxSizeReached);
    let mut g = group(100, 2);
    let mut fx = Vec::new();
    parked(g.join(0, join_req("", "a"), &mut fx));
    parked(g.join(0, join_req("", "b"), &mut fx));
    let refused = answered(g.join(0, join_req("", "c"), &mut fx));
    assert_eq!(refused.error_code(), full);
    assert_eq!(refused.member_id, "");
    let handshake = JoinRequest {
        require_known_member_id: true,
        ..join_req("", "c")
    };
    assert_eq!(answered(g.join(0, handshake, &mut fx)).error_code(), full);
    assert_eq!(g.member_count(), 2);

    // A full group of static members still lets a restarted instance back in.
    let (mut g, _) = form(2, vec![static_req("a"), static_req("b")]);
    assert_eq!(
        answered(g.join(200, join_req("", "c"), &mut fx)).error_code(),
        full
    );
    let back = answered(g.join(200, static_req("b"), &mut fx));
    assert_eq!(back.error_code(), NONE);
    assert_eq!(g.member_count(), 2);
}

#[test]
fn session_timeout_must_be_within_bounds() {
    let mut g = group(0, 10);
    let mut fx = Vec::new();
    for session_timeout_ms in [999, 60_001] {
        let req = JoinRequest {
            session_timeout_ms,
            ..join_req("", "a")
        };
        let result = answered(g.join(0, req, &mut fx));
        assert_eq!(
            result.error_code(),
            code(ResponseError::InvalidSessionTimeout)
        );
    }
    assert_eq!(g.member_count(), 0);
    assert_eq!(g.state(), ClassicState::Empty);
}

/// The protocol chosen when members with these preference lists form a group (the first
/// one leads).
fn chosen(preferences: &[&[&str]]) -> Option<String> {
    let mut g = group(100, 10);
    let mut fx = Vec::new();
    for (k, names) in preferences.iter().enumerate() {
        parked(g.join(
            0,
            with_protocols(join_req("", &format!("c{k}")), names),
            &mut fx,
        ));
    }
    g.tick(100, &mut fx);
    g.tick(FORMED_AT, &mut fx);
    joins(&fx)[0].1.protocol_name.clone()
}

#[test]
fn protocol_is_chosen_by_votes() {
    // The majority outvotes the leader's preference.
    assert_eq!(
        chosen(&[&["x", "y"], &["y", "x"], &["y", "x"]]).as_deref(),
        Some("y")
    );
    assert_eq!(
        chosen(&[&["y", "x"], &["x", "y"], &["x", "y"]]).as_deref(),
        Some("x")
    );
    // Only protocols everyone supports count: "z" is first for the leader but not common.
    assert_eq!(
        chosen(&[&["z", "y"], &["y"], &["w", "y"]]).as_deref(),
        Some("y")
    );
    // A tie goes to the leader's preference.
    assert_eq!(chosen(&[&["x", "y"], &["y", "x"]]).as_deref(), Some("x"));
    assert_eq!(chosen(&[&["y", "x"], &["x", "y"]]).as_deref(), Some("y"));
}

#[test]
fn rejoin_with_same_metadata_while_completing_gets_the_same_generation() {
    let reqs = vec![join_req("", "a"), join_req("", "b"), join_req("", "c")];
    let (mut g, ids) = gathered(10, reqs);
    let (a, b, c) = (ids[0].clone(), ids[1].clone(), ids[2].clone());
    let mut fx = Vec::new();

    let leader = answered(g.join(210, join_req(&a, "a"), &mut fx));
    assert_eq!((leader.generation_id, leader.members.len()), (1, 3));
    let follower = answered(g.join(210, join_req(&b, "b"), &mut fx));
    assert_eq!((follower.generation_id, follower.members.len()), (1, 0));
    assert_eq!(g.state(), ClassicState::CompletingRebalance);
    assert!(fx.is_empty(), "{fx:?}");

    // A change of metadata restarts the rebalance: parked syncs are told to rejoin.
    parked_sync(&mut g, &c);
    let changed = with_protocols(join_req(&b, "b"), &["range", "sticky"]);
    assert_eq!(parked(g.join(220, changed, &mut fx)), b);
    assert_eq!(g.state(), ClassicState::PreparingRebalance);
    assert_eq!(
        sync_codes(&fx),
        vec![(c, sync_error(code(ResponseError::RebalanceInProgress)))]
    );
}

#[test]
fn stable_follower_rejoin_is_answered_the_leader_rejoin_rebalances() {
    let (mut g, ids) = stable_group(2);
    let mut fx = Vec::new();
    let follower = answered(g.join(200, join_req(&ids[1], "c1"), &mut fx));
    assert_eq!(follower.generation_id, 1);
    assert_eq!(follower.leader, ids[0]);
    assert!(follower.members.is_empty());
    assert_eq!(g.state(), ClassicState::Stable);

    assert_eq!(
        parked(g.join(210, join_req(&ids[0], "c0"), &mut fx)),
        ids[0]
    );
    assert_eq!(g.state(), ClassicState::PreparingRebalance);
}

#[test]
fn a_new_member_joining_a_stable_group_rebalances() {
    let (mut g, ids) = stable_group(1);
    let mut fx = Vec::new();
    let c = parked(g.join(200, join_req("", "new"), &mut fx));
    assert_eq!(g.state(), ClassicState::PreparingRebalance);
    assert_eq!(
        g.heartbeat(210, &ids[0], None, 1, &mut fx).code(),
        code(ResponseError::RebalanceInProgress)
    );
    let a = answered(g.join(220, join_req(&ids[0], "c0"), &mut fx));
    assert_eq!((a.generation_id, a.members.len()), (2, 2));
    assert_eq!(joins(&fx)[0].0, c);
}

#[test]
fn a_pending_member_id_holds_up_the_join_phase() {
    let (mut g, ids) = stable_group(1);
    let mut fx = Vec::new();
    let handshake = JoinRequest {
        require_known_member_id: true,
        ..join_req("", "new")
    };
    let pending = answered(g.join(200, handshake, &mut fx)).member_id;
    assert_eq!(
        g.state(),
        ClassicState::Stable,
        "a member id alone changes nothing"
    );

    assert_eq!(
        parked(g.join(210, join_req(&ids[0], "c0"), &mut fx)),
        ids[0]
    );
    assert!(fx.is_empty(), "waiting for the pending member: {fx:?}");
    let new = answered(g.join(220, join_req(&pending, "new"), &mut fx));
    assert_eq!(new.generation_id, 2);
    assert_eq!(joins(&fx).len(), 1);
}
