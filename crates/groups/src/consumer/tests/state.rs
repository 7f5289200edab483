//! Offset commit/fetch checks, snapshots and restore, and when the group asks to persist.

use super::*;

#[test]
fn offset_commit_and_fetch_validation() {
    let mut w = World::new();
    w.create_topic(1, "t", 2);
    let stale = ResponseError::StaleMemberEpoch.code();
    let unknown = ResponseError::UnknownMemberId.code();
    // Empty group: admin commits are fine.
    assert_eq!(
        w.group.validate_offset_commit("", -1).map_err(|e| e.code()),
        Ok(())
    );
    w.join(join_req("a", &["t"]));
    assert_eq!(
        w.group.validate_offset_commit("", -1).map_err(|e| e.code()),
        Err(unknown)
    );
    assert_eq!(
        w.group.validate_offset_commit("a", 1).map_err(|e| e.code()),
        Ok(())
    );
    assert_eq!(
        w.group.validate_offset_commit("a", 0).map_err(|e| e.code()),
        Err(stale)
    );
    assert_eq!(
        w.group.validate_offset_commit("a", 2).map_err(|e| e.code()),
        Err(stale)
    );
    assert_eq!(
        w.group
            .validate_offset_commit("zz", 1)
            .map_err(|e| e.code()),
        Err(unknown)
    );
    assert_eq!(
        w.group.validate_offset_fetch("", -1).map_err(|e| e.code()),
        Ok(())
    );
    assert_eq!(
        w.group.validate_offset_fetch("a", 1).map_err(|e| e.code()),
        Ok(())
    );
    assert_eq!(
        w.group.validate_offset_fetch("a", 7).map_err(|e| e.code()),
        Err(stale)
    );
    assert_eq!(
        w.group.validate_offset_fetch("zz", 1).map_err(|e| e.code()),
        Err(unknown)
    );
    // While a revokes for b, it commits with its (unchanged) epoch.
    let a_owned = w.group.members["a"].assigned.clone();
    w.join(join_req("b", &["t"]));
    w.send(hb_req("a", 1, Some(a_owned)));
    assert_eq!(
        w.group.validate_offset_commit("a", 1).map_err(|e| e.code()),
        Ok(())
    );
    assert_eq!(
        w.group.validate_offset_commit("b", 2).map_err(|e| e.code()),
        Ok(())
    );
}

#[test]
fn snapshot_restores_the_same_group() {
    let mut w = World::new();
    let t = w.create_topic(1, "t", 4);
    w.create_topic(2, "logs-1", 3);
    let a = w.join(join_req("a", &["t"]));
    w.join(join_req("b", &["t"]));
    w.join(HeartbeatRequest {
        subscribed_topic_names: None,
        subscribed_topic_regex: Some("logs-[0-9]+".to_string()),
        server_assignor: Some("range".to_string()),
        rack_id: Some("rack-1".to_string()),
        ..static_join("s", "instance-s", &[])
    });
    // a mid-revocation, b waiting for partitions, s temporarily gone.
    w.send(hb_req("a", a.epoch, Some(a.owned.clone())));
    w.send(HeartbeatRequest {
        member_epoch: TEMPORARY_LEAVE_EPOCH,
        instance_id: Some("instance-s".to_string()),
        ..hb_req("s", 0, None)
    });
    let snapshot = w.group.snapshot();
    let text = serde_json::to_string(&snapshot).unwrap();

    let later = w.now + 500_000;
    let parsed: ConsumerSnapshot = serde_json::from_str(&text).unwrap();
    let restored = ConsumerGroup::restore("g".to_string(), config(100), parsed, later).unwrap();
    assert_eq!(restored.group_id(), "g");
    assert_eq!(restored.describe(&w.topics), w.group.describe(&w.topics));
    assert_eq!(restored.state(), ConsumerState::Reconciling);
    assert_eq!(restored.assignor(), AssignorKind::Range);
    assert_eq!(restored.subscribed_topics(), w.group.subscribed_topics());
    assert_eq!(restored.snapshot().state, snapshot.state);
    // Timers restart at `later`: a's revocation timer first.
    assert_eq!(
        restored.next_deadline(),
        Some(later + i64::from(REBALANCE_MS))
    );

    // The restored group carries on: a revokes, b gets the partitions, s comes back.
    let mut w2 = World {
        group: restored,
        topics: w.topics.clone(),
        now: later,
        persists: 0,
    };
    w2.check_invariants();
    let kept = w2.group.members["a"].assigned.clone();
    let r = w2.send(hb_req("a", a.epoch, Some(kept.clone())));
    assert_eq!(r.member_epoch, 3);
    // b joined at epoch 2 and has not heartbeated since s joined.
    let r = w2.send(hb_req("b", 2, Some(Assignment::new())));
    assert_eq!(r.member_epoch, 3);
    let given = r.assignment.unwrap();
    assert_eq!(count(&given) + count(&kept), 4);
    assert!(given[&t].is_disjoint(&kept[&t]));
    let s = w2.join(HeartbeatRequest {
        subscribed_topic_names: None,
        subscribed_topic_regex: Some("logs-[0-9]+".to_string()),
        ..static_join("s-new", "instance-s", &[])
    });
    assert_eq!(count(&s.owned), 3);
    assert_eq!(w2.group.group_epoch(), 3);
}

#[test]
fn restore_refuses_broken_snapshots() {
    let restore = |state: serde_json::Value| {
        ConsumerGroup::restore("g".to_string(), config(10), ConsumerSnapshot { state }, 0)
    };
    assert!(restore(serde_json::json!({"nonsense": true})).is_err());

    let mut w = World::new();
    w.create_topic(1, "t", 4);
    w.join(join_req("a", &["t"]));
    w.join(join_req("b", &["t"]));
    let good = w.group.snapshot().state;
    assert!(restore(good.clone()).is_ok());

    let mut wrong_version = good.clone();
    wrong_version["version"] = serde_json::json!(99);
    assert!(restore(wrong_version).is_err());

    // b claims a partition a holds.
    let mut double = good.clone();
    let a_assigned = double["members"][0]["assigned"].clone();
    double["members"][1]["assigned"] = a_assigned;
    let err = restore(double).unwrap_err();
    assert!(err.contains("held by"), "{err}");

    let mut ahead = good;
    ahead["assignment_epoch"] = serde_json::json!(50);
    assert!(restore(ahead).is_err());
}

#[test]
fn persists_only_when_something_durable_changes() {
    let mut w = World::new();
    w.create_topic(1, "t", 2);
    let mut a = w.join(join_req("a", &["t"]));
    let persists = w.persists;
    for _ in 0..3 {
        w.now += 5_000;
        let r = w.poll(&mut a);
        assert_eq!(r.assignment, None);
        w.tick();
    }
    assert_eq!(w.persists, persists);
    // A new client host is durable (describe shows it).
    let r = w.send(HeartbeatRequest {
        client_host: "/10.0.0.9".to_string(),
        ..hb_req("a", a.epoch, None)
    });
    assert_eq!(r.error_code(), 0);
    assert_eq!(w.persists, persists + 1);
}
