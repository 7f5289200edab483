//! Snapshots and restore, and the read-only views: offset commit checks, subscribed topics,
//! describe.

use super::*;
use crate::classic::snapshot::SavedProtocol;

#[test]
fn offset_commit_validation() {
    let unknown = Err(code(ResponseError::UnknownMemberId));
    let illegal = Err(code(ResponseError::IllegalGeneration));
    let rebalancing = Err(code(ResponseError::RebalanceInProgress));
    let fenced = Err(code(ResponseError::FencedInstanceId));
    let unavailable = Err(code(ResponseError::CoordinatorNotAvailable));
    let mut fx = Vec::new();

    let empty = group(0, 10);
    let (stable, ids) = form(10, vec![static_req("a"), join_req("", "b")]);
    let (a, b) = (ids[0].as_str(), ids[1].as_str());
    let (mut preparing, pids) = form(10, vec![join_req("", "a"), join_req("", "b")]);
    parked(preparing.join(200, join_req(&pids[0], "a"), &mut fx));
    assert_eq!(preparing.state(), ClassicState::PreparingRebalance);
    let p = pids[1].as_str();
    let mut completing = group(0, 10);
    let c = answered(completing.join(0, join_req("", "c"), &mut fx)).member_id;
    let mut dead = group(0, 10);
    dead.mark_dead();

    // (case, group, member id, instance id, generation, expected)
    type Row<'a> = (
        &'a str,
        &'a ClassicGroup,
        &'a str,
        Option<&'a str>,
        i32,
        Result<(), i16>,
    );
    let table: Vec<Row> = vec![
        ("admin, empty group", &empty, "", None, -1, Ok(())),
        ("member of an empty group", &empty, "x", None, 0, unknown),
        ("admin, live group", &stable, "", None, -1, unknown),
        ("current generation", &stable, b, None, 1, Ok(())),
        ("old generation", &stable, b, None, 0, illegal),
        ("unknown member", &stable, "zzz", None, 1, unknown),
        ("static member", &stable, a, Some("a"), 1, Ok(())),
        (
            "fenced static member",
            &stable,
            "a-old",
            Some("a"),
            1,
            fenced,
        ),
        ("unknown instance", &stable, a, Some("q"), 1, unknown),
        ("preparing", &preparing, p, None, 1, Ok(())),
        (
            "preparing, wrong generation",
            &preparing,
            p,
            None,
            2,
            illegal,
        ),
        ("completing", &completing, &c, None, 1, rebalancing),
        ("dead", &dead, "", None, -1, unavailable),
    ];
    for (case, g, member_id, instance, generation_id, expected) in table {
        let got = g
            .validate_offset_commit(member_id, instance, generation_id)
            .map_err(|e| e.code());
        assert_eq!(got, expected, "{case}");
    }
}

#[test]
fn snapshot_restore_roundtrip_of_a_stable_group() {
    let (g, ids) = form(10, vec![static_req("a"), join_req("", "b")]);
    let (a, b) = (&ids[0], &ids[1]);
    let json = serde_json::to_string(&g.snapshot()).expect("snapshot serialises");
    let snapshot: ClassicSnapshot = serde_json::from_str(&json).expect("snapshot parses");

    let mut restored =
        ClassicGroup::restore("g".into(), config(100, 10), snapshot, 50_000).expect("restores");
    assert_eq!(restored.group_id(), "g");
    assert_eq!(restored.state(), ClassicState::Stable);
    assert_eq!(restored.generation_id(), 1);
    assert_eq!(restored.protocol_type(), "consumer");
    assert_eq!(restored.describe(), g.describe());
    assert_eq!(restored.leader_id.as_deref(), Some(a.as_str()));
    assert_eq!(
        restored.next_deadline(),
        Some(50_000 + i64::from(SESSION_MS))
    );

    let mut fx = Vec::new();
    assert_eq!(restored.heartbeat(50_001, b, None, 1, &mut fx).code(), NONE);
    assert_eq!(
        restored.sync(50_002, sync_req(b, 1, vec![]), &mut fx),
        Reply::Now(sync_ok(assignment_for(b)))
    );
    // The follower's protocols came back too: the same join is no change.
    let same = answered(restored.join(50_003, join_req(b, "c1"), &mut fx));
    assert_eq!(same.generation_id, 1);
    assert_eq!(restored.state(), ClassicState::Stable);
    // The static mapping came back: a restart of "a" is recognised.
    let a_again = answered(restored.join(50_004, static_req("a"), &mut fx));
    assert!(a_again.skip_assignment, "a was the leader");
}

#[test]
fn restore_decision_table() {
    let mut fx = Vec::new();
    let restore = |g: &ClassicGroup, members_max: usize| {
        ClassicGroup::restore(
            "g".into(),
            config(100, members_max),
            g.snapshot(),
            1_000_000,
        )
    };

    // Empty: generation and protocol type kept.
    let (mut emptied, ids) = stable_group(1);
    let leaving = [LeavingMember {
        member_id: ids[0].clone(),
        group_instance_id: None,
    }];
    emptied.leave(200, &leaving, &mut fx).code();
    let r = restore(&emptied, 10).expect("restores");
    assert_eq!(
        (r.state(), r.generation_id(), r.protocol_type()),
        (ClassicState::Empty, 2, "consumer")
    );
    assert_eq!(r.next_deadline(), None);

    // CompletingRebalance: comes back rebalancing, members kept; syncs say rejoin.
    let (completing, ids) = gathered(10, vec![join_req("", "a"), join_req("", "b")]);
    let (a, b) = (ids[0].clone(), ids[1].clone());
    let mut r = restore(&completing, 10).expect("restores");
    assert_eq!(r.state(), ClassicState::PreparingRebalance);
    assert_eq!(r.member_count(), 2);
    assert_eq!(
        now_sync(r.sync(1_000_001, sync_req(&b, 1, vec![]), &mut fx)),
        Reply::Now(sync_error(code(ResponseError::RebalanceInProgress)))
    );
    assert_eq!(r.next_deadline(), Some(1_000_000 + i64::from(SESSION_MS)));
    parked(r.join(1_000_002, join_req(&a, "a"), &mut fx));
    let b_joined = answered(r.join(1_000_003, join_req(&b, "b"), &mut fx));
    assert_eq!(b_joined.generation_id, 2);

    // PreparingRebalance: the same, with a fresh join phase.
    let (mut preparing, ids) = stable_group(2);
    parked(preparing.join(200, join_req(&ids[0], "c0"), &mut fx));
    let r = restore(&preparing, 10).expect("restores");
    assert_eq!(r.state(), ClassicState::PreparingRebalance);
    assert!(
        r.members
            .iter()
            .all(|m| !m.awaiting_join && m.assignment.is_empty())
    );
    assert_eq!(r.join_deadline, Some(1_000_000 + i64::from(REBALANCE_MS)));

    // Stable but over a smaller limit: rebalanced (which trims it).
    let (stable, _) = stable_group(3);
    let r = restore(&stable, 2).expect("restores");
    assert_eq!(r.state(), ClassicState::PreparingRebalance);
    let r = restore(&stable, 3).expect("restores");
    assert_eq!(r.state(), ClassicState::Stable);

    // Dead, damaged, future and inconsistent snapshots are refused.
    let mut dead = group(0, 10);
    dead.mark_dead();
    assert!(restore(&dead, 10).is_err());
    let garbage = ClassicSnapshot {
        state: serde_json::json!({"nonsense": true}),
    };
    assert!(ClassicGroup::restore("g".into(), config(0, 10), garbage, 0).is_err());
    let mut future = stable.snapshot();
    future.state["version"] = serde_json::json!(2);
    assert!(ClassicGroup::restore("g".into(), config(0, 10), future, 0).is_err());
    let mut twice = stable.snapshot();
    let first = twice.state["members"][0]["member_id"].clone();
    twice.state["members"][1]["member_id"] = first;
    assert!(ClassicGroup::restore("g".into(), config(0, 10), twice, 0).is_err());
}

#[test]
fn subscribed_topics_are_the_union_of_consumer_subscriptions() {
    let mut g = group(100, 10);
    let mut fx = Vec::new();
    let member = |client: &str, metadata: Bytes| JoinRequest {
        protocols: vec![("range".into(), metadata)],
        ..join_req("", client)
    };
    parked(g.join(0, member("a", subscription(3, &["t1", "t2"])), &mut fx));
    parked(g.join(0, member("b", subscription(0, &["t2", "t3"])), &mut fx));
    // A newer version than this code knows still starts with the topics.
    parked(g.join(0, member("c", subscription(9, &["t4"])), &mut fx));
    parked(g.join(0, member("d", Bytes::from_static(b"\x00\x01\xff")), &mut fx));
    parked(g.join(
        0,
        member("e", Bytes::from_static(b"\xff\xff\x00\x00\x00\x00")),
        &mut fx,
    ));
    assert_eq!(g.subscribed_topics(), vec!["t1", "t2", "t3", "t4"]);
    g.tick(100, &mut fx);
    g.tick(FORMED_AT, &mut fx);
    assert_eq!(g.state(), ClassicState::CompletingRebalance);
    assert_eq!(g.subscribed_topics(), vec!["t1", "t2", "t3", "t4"]);

    let mut other = group(0, 10);
    let connect = JoinRequest {
        protocol_type: "connect".into(),
        ..member("a", subscription(3, &["t1"]))
    };
    answered(other.join(0, connect, &mut fx));
    assert!(other.subscribed_topics().is_empty());
}

#[test]
fn describe_shows_metadata_and_assignments_only_when_stable() {
    let (g, ids) = stable_group(2);
    let d = g.describe();
    assert_eq!(
        (d.state, d.protocol_type.as_str(), d.protocol_name.as_str()),
        (ClassicState::Stable, "consumer", "range")
    );
    assert_eq!(d.members[0].member_id, ids[0]);
    assert_eq!(d.members[0].client_id, "c0");
    assert_eq!(d.members[0].metadata, Bytes::from_static(b"meta"));
    assert_eq!(d.members[0].assignment, assignment_for(&ids[0]));

    let mut g = g;
    let mut fx = Vec::new();
    parked(g.join(200, join_req(&ids[0], "c0"), &mut fx));
    let d = g.describe();
    assert_eq!(d.protocol_name, "");
    assert!(
        d.members
            .iter()
            .all(|m| m.metadata.is_empty() && m.assignment.is_empty())
    );
}

#[test]
fn hex_roundtrip_of_snapshot_bytes() {
    let metadata = Bytes::from_static(&[0x00, 0x0f, 0xa5, 0xff]);
    let saved = SavedProtocol {
        name: "p".into(),
        metadata: metadata.clone(),
    };
    let json = serde_json::to_value(&saved).expect("serialises");
    assert_eq!(json["metadata"], "000fa5ff");
    let back: SavedProtocol = serde_json::from_value(json).expect("parses");
    assert_eq!(back.metadata, metadata);
    let odd = serde_json::json!({"name": "p", "metadata": "abc"});
    assert!(serde_json::from_value::<SavedProtocol>(odd).is_err());
}
