//! Membership: leaving, expiry, epoch fencing, unknown and static members, the size limit,
//! malformed requests, generated member ids.

use super::*;

#[test]
fn last_member_leaving_empties_the_group() {
    let mut w = World::new();
    w.create_topic(1, "t", 2);
    w.join(join_req("a", &["t"]));
    let r = w.send(HeartbeatRequest {
        member_epoch: LEAVE_EPOCH,
        ..hb_req("a", 0, None)
    });
    assert_eq!(r.error_code(), 0);
    assert_eq!(w.group.state(), ConsumerState::Empty);
    assert_eq!(w.group.next_deadline(), None);
}

#[test]
fn session_expiry_removes_a_silent_member() {
    let mut w = World::new();
    let t = w.create_topic(1, "t", 4);
    let a = w.join(join_req("a", &["t"]));
    let b = w.join(join_req("b", &["t"]));
    let mut clients = vec![a, b];
    w.settle(&mut clients);
    let b_last = w.now;
    // Only a keeps heartbeating.
    w.now += 20_000;
    w.poll(&mut clients[0]);
    assert_eq!(
        w.group.next_deadline(),
        Some(b_last + i64::from(SESSION_MS))
    );
    w.now = b_last + i64::from(SESSION_MS) - 1;
    assert!(w.tick().is_empty());
    assert_eq!(w.group.member_count(), 2);
    let epoch = w.group.group_epoch();
    w.now += 1;
    assert_eq!(w.tick(), vec![Effect::Persist]);
    assert_eq!(w.group.member_count(), 1);
    assert_eq!(w.group.group_epoch(), epoch + 1);
    let mut a = clients.remove(0);
    w.settle(std::slice::from_mut(&mut a));
    assert_eq!(a.owned, parts(t, &[0, 1, 2, 3]));
    // And a's own session is what is left to watch.
    assert_eq!(w.group.next_deadline(), Some(w.now + i64::from(SESSION_MS)));
}

#[test]
fn member_that_does_not_revoke_in_time_is_removed() {
    let mut w = World::new();
    let t = w.create_topic(1, "t", 4);
    let a = w.join(join_req("a", &["t"]));
    let mut b = w.join(join_req("b", &["t"]));
    // a is asked to revoke but keeps owning everything, heartbeating all along.
    let asked_at = w.now;
    let r = w.send(hb_req("a", a.epoch, Some(a.owned.clone())));
    assert_eq!(count(r.assignment.as_ref().unwrap()), 2);
    assert_eq!(
        w.group.next_deadline(),
        Some(asked_at + i64::from(REBALANCE_MS))
    );
    w.now += 10_000;
    w.send(hb_req("a", a.epoch, Some(a.owned.clone())));
    w.poll(&mut b);
    w.now = asked_at + i64::from(REBALANCE_MS) - 1;
    w.send(hb_req("a", a.epoch, Some(a.owned.clone())));
    w.poll(&mut b);
    assert!(w.tick().is_empty());
    w.now += 1;
    assert_eq!(w.tick(), vec![Effect::Persist]);
    assert_eq!(w.group.member_count(), 1);
    let r = w.send(hb_req("a", a.epoch, Some(a.owned.clone())));
    assert_eq!(r.error_code(), ResponseError::UnknownMemberId.code());
    w.settle(std::slice::from_mut(&mut b));
    assert_eq!(b.owned, parts(t, &[0, 1, 2, 3]));
}

#[test]
fn wrong_epochs_are_fenced() {
    let mut w = World::new();
    let t = w.create_topic(1, "t", 4);
    let a = w.join(join_req("a", &["t"]));
    let b = w.join(join_req("b", &["t"]));
    let mut clients = vec![a, b];
    w.settle(&mut clients);
    let a = &clients[0];
    assert_eq!(a.epoch, 2);
    let persists = w.persists;

    let r = w.send(hb_req("a", 3, Some(a.owned.clone())));
    assert_eq!(r.error_code(), ResponseError::FencedMemberEpoch.code());
    assert!(r.error_message().unwrap().contains("greater"));
    // The previous epoch is accepted while owning no more than the assignment.
    let r = w.send(hb_req("a", 1, Some(a.owned.clone())));
    assert_eq!((r.error_code(), r.member_epoch), (0, 2));
    let r = w.send(hb_req("a", 1, Some(Assignment::new())));
    assert_eq!((r.error_code(), r.member_epoch), (0, 2));
    assert_eq!(
        r.assignment.as_ref(),
        Some(&a.owned),
        "told again what it should own"
    );
    // ... but not with partitions outside it, nor without saying what it owns.
    let r = w.send(hb_req("a", 1, Some(parts(t, &[0, 1, 2, 3]))));
    assert_eq!(r.error_code(), ResponseError::FencedMemberEpoch.code());
    assert!(r.error_message().unwrap().contains("smaller"));
    let r = w.send(hb_req("a", 1, None));
    assert_eq!(r.error_code(), ResponseError::FencedMemberEpoch.code());
    // None of that changed anything.
    assert_eq!(w.persists, persists);
}

#[test]
fn stale_epoch_older_than_previous_is_fenced() {
    let mut w = World::new();
    w.create_topic(1, "t", 4);
    let mut clients = vec![w.join(join_req("a", &["t"]))];
    for id in ["b", "c"] {
        clients.push(w.join(join_req(id, &["t"])));
        w.settle(&mut clients);
    }
    assert_eq!(clients[0].epoch, 3);
    let r = w.send(hb_req("a", 1, Some(Assignment::new())));
    assert_eq!(r.error_code(), ResponseError::FencedMemberEpoch.code());
    // A fenced member rejoins with epoch 0 and the same id.
    let mut req = join_req("a", &["t"]);
    req.member_id = "a".to_string();
    let r = w.send(req);
    assert_eq!((r.error_code(), r.member_epoch), (0, 3));
}

#[test]
fn unknown_members_are_refused() {
    let mut w = World::new();
    w.create_topic(1, "t", 4);
    w.join(join_req("a", &["t"]));
    let persists = w.persists;
    let r = w.send(hb_req("ghost", 1, None));
    assert_eq!(r.error_code(), ResponseError::UnknownMemberId.code());
    assert_eq!(r.member_id, "ghost");
    let r = w.send(HeartbeatRequest {
        member_epoch: LEAVE_EPOCH,
        ..hb_req("ghost", 0, None)
    });
    assert_eq!(r.error_code(), ResponseError::UnknownMemberId.code());
    let r = w.send(HeartbeatRequest {
        instance_id: Some("nobody".to_string()),
        ..hb_req("ghost", 1, None)
    });
    assert_eq!(r.error_code(), ResponseError::UnknownMemberId.code());
    assert_eq!(w.group.member_count(), 1);
    assert_eq!(w.persists, persists);
}

#[test]
fn static_member_temporary_leave_and_rejoin_keeps_its_assignment() {
    let mut w = World::new();
    w.create_topic(1, "t", 6);
    let s = w.join(static_join("s1", "instance-1", &["t"]));
    let d = w.join(join_req("d", &["t"]));
    let mut clients = vec![s, d];
    w.settle(&mut clients);
    let epoch = w.group.group_epoch();
    let s_owned = clients[0].owned.clone();

    // Temporary leave: the member stays, with its partitions.
    let r = w.send(HeartbeatRequest {
        member_epoch: TEMPORARY_LEAVE_EPOCH,
        instance_id: Some("instance-1".to_string()),
        ..hb_req("s1", 0, None)
    });
    assert_eq!((r.error_code(), r.member_epoch), (0, TEMPORARY_LEAVE_EPOCH));
    assert_eq!(w.group.member_count(), 2);
    assert_eq!(w.group.group_epoch(), epoch);
    let r = w.poll(&mut clients[1]);
    assert_eq!(
        r.assignment, None,
        "the other member does not get the left member's partitions"
    );
    // Its old incarnation can no longer heartbeat.
    let r = w.send(HeartbeatRequest {
        instance_id: Some("instance-1".to_string()),
        ..hb_req("s1", epoch, None)
    });
    assert_eq!(r.error_code(), ResponseError::FencedMemberEpoch.code());

    // The restarted process (new member id) takes the place over: same partitions, no
    // rebalance.
    let s2 = w.join(static_join("s2", "instance-1", &["t"]));
    assert_eq!(s2.owned, s_owned);
    assert_eq!(s2.epoch, epoch);
    assert_eq!(w.group.group_epoch(), epoch);
    assert_eq!(w.group.member_count(), 2);
    assert_eq!(w.group.state(), ConsumerState::Stable);
    let described = w.group.describe(&w.topics);
    let ids: Vec<&str> = described
        .members
        .iter()
        .map(|m| m.member_id.as_str())
        .collect();
    assert_eq!(ids, ["d", "s2"]);

    // While s2 is active, a third process with the same instance id is refused, and the
    // replaced member id is fenced.
    let r = w.send(static_join("s3", "instance-1", &["t"]));
    assert_eq!(r.error_code(), ResponseError::UnreleasedInstanceId.code());
    let r = w.send(HeartbeatRequest {
        instance_id: Some("instance-1".to_string()),
        ..hb_req("s1", epoch, None)
    });
    assert_eq!(r.error_code(), ResponseError::FencedInstanceId.code());
    assert_eq!(w.group.member_count(), 2);
}

#[test]
fn static_member_that_does_not_come_back_expires() {
    let mut w = World::new();
    let t = w.create_topic(1, "t", 4);
    let s = w.join(static_join("s1", "instance-1", &["t"]));
    let d = w.join(join_req("d", &["t"]));
    let mut clients = vec![s, d];
    w.settle(&mut clients);
    w.now += 1_000;
    let left_at = w.now;
    w.send(HeartbeatRequest {
        member_epoch: TEMPORARY_LEAVE_EPOCH,
        instance_id: Some("instance-1".to_string()),
        ..hb_req("s1", 0, None)
    });
    // The other member keeps heartbeating; the static one's slot expires.
    w.now = left_at + i64::from(SESSION_MS) - 1;
    w.poll(&mut clients[1]);
    assert!(w.tick().is_empty());
    assert_eq!(w.group.member_count(), 2);
    w.now = left_at + i64::from(SESSION_MS);
    assert_eq!(w.tick(), vec![Effect::Persist]);
    assert_eq!(w.group.member_count(), 1);
    let mut d = clients.remove(1);
    w.settle(std::slice::from_mut(&mut d));
    assert_eq!(d.owned, parts(t, &[0, 1, 2, 3]));
    // The instance id is free again.
    let s = w.join(static_join("s9", "instance-1", &["t"]));
    assert_eq!(s.id, "s9");
}

#[test]
fn group_max_size_is_enforced_for_new_members_only() {
    let mut w = World::with_config(config(2));
    w.create_topic(1, "t", 4);
    w.join(join_req("a", &["t"]));
    w.join(static_join("s", "instance-s", &["t"]));
    let r = w.send(join_req("c", &["t"]));
    assert_eq!(r.error_code(), ResponseError::GroupMaxSizeReached.code());
    assert!(r.error_message().unwrap().contains("maximum capacity of 2"));
    assert_eq!(w.group.member_count(), 2);
    // Members already in may rejoin, and a static member may be replaced.
    let r = w.send(join_req("a", &["t"]));
    assert_eq!(r.error_code(), 0);
    w.send(HeartbeatRequest {
        member_epoch: TEMPORARY_LEAVE_EPOCH,
        instance_id: Some("instance-s".to_string()),
        ..hb_req("s", 0, None)
    });
    let r = w.send(static_join("s2", "instance-s", &["t"]));
    assert_eq!(r.error_code(), 0);
    // Room again once someone leaves.
    w.send(HeartbeatRequest {
        member_epoch: LEAVE_EPOCH,
        ..hb_req("a", 0, None)
    });
    let r = w.send(join_req("c", &["t"]));
    assert_eq!(r.error_code(), 0);
}

#[test]
fn malformed_requests_are_refused() {
    let invalid = ResponseError::InvalidRequest.code();
    let cases: Vec<(HeartbeatRequest, i16, &str)> = vec![
        (
            HeartbeatRequest {
                subscribed_topic_names: None,
                ..join_req("a", &[])
            },
            invalid,
            "SubscribedTopicNames or SubscribedTopicRegex",
        ),
        (
            HeartbeatRequest {
                rebalance_timeout_ms: REBALANCE_TIMEOUT_UNSET,
                ..join_req("a", &["t"])
            },
            invalid,
            "RebalanceTimeoutMs",
        ),
        (
            HeartbeatRequest {
                owned: Some(parts(Uuid::from_u128(1), &[0])),
                ..join_req("a", &["t"])
            },
            invalid,
            "TopicPartitions must be empty",
        ),
        (hb_req("a", -3, None), invalid, "MemberEpoch is invalid"),
        (hb_req("", 4, None), invalid, "MemberId can't be empty"),
        (
            hb_req("", LEAVE_EPOCH, None),
            invalid,
            "MemberId can't be empty",
        ),
        (join_req("  ", &["t"]), invalid, "MemberId can't be empty"),
        (
            hb_req("a", TEMPORARY_LEAVE_EPOCH, None),
            invalid,
            "InstanceId can't be null",
        ),
        (
            static_join("a", " ", &["t"]),
            invalid,
            "InstanceId can't be empty",
        ),
        (
            HeartbeatRequest {
                rack_id: Some(String::new()),
                ..join_req("a", &["t"])
            },
            invalid,
            "RackId can't be empty",
        ),
        (
            HeartbeatRequest {
                server_assignor: Some("sticky".to_string()),
                ..join_req("a", &["t"])
            },
            ResponseError::UnsupportedAssignor.code(),
            "Supported assignors: uniform, range.",
        ),
        (
            HeartbeatRequest {
                subscribed_topic_regex: Some("orders-(".to_string()),
                ..join_req("a", &[])
            },
            ResponseError::InvalidRegularExpression.code(),
            "orders-(",
        ),
        (
            HeartbeatRequest {
                subscribed_topic_regex: Some("a)|(b".to_string()),
                ..join_req("a", &[])
            },
            ResponseError::InvalidRegularExpression.code(),
            "a)|(b",
        ),
    ];
    let mut w = World::new();
    w.create_topic(1, "t", 1);
    for (req, error, message) in cases {
        let r = w.send(req.clone());
        assert_eq!(r.error_code(), error, "{req:?}");
        let text = r.error_message().unwrap_or_default();
        assert!(text.contains(message), "{text:?} lacks {message:?}");
    }
    assert_eq!(w.group.member_count(), 0);
    assert_eq!(w.persists, 0);
    // An omitted owned list on a join is taken as empty.
    let r = w.send(HeartbeatRequest {
        owned: None,
        ..join_req("a", &["t"])
    });
    assert_eq!(r.error_code(), 0);
}

#[test]
fn v0_join_without_member_id_gets_a_generated_one() {
    let mut w = World::new();
    w.create_topic(1, "t", 2);
    let mut first = w.join(join_req("", &["t"]));
    let second = w.join(join_req("", &["t"]));
    assert!(Uuid::parse_str(&first.id).is_ok(), "{}", first.id);
    assert_ne!(first.id, second.id);
    assert_eq!(w.group.member_count(), 2);
    w.poll(&mut first);
}
