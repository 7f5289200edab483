//! Assignment and reconciliation: revoke before assign, redistribution, subscriptions
//! (names, regex, missing topics), topic metadata changes, assignor choice, rejoins.

use super::*;

#[test]
fn first_member_gets_everything() {
    let mut w = World::new();
    let t = w.create_topic(1, "t", 4);
    assert_eq!(w.group.state(), ConsumerState::Empty);
    let a = w.join(join_req("a", &["t"]));
    assert_eq!(a.epoch, 1);
    assert_eq!(a.owned, parts(t, &[0, 1, 2, 3]));
    assert_eq!(w.group.group_epoch(), 1);
    assert_eq!(w.group.state(), ConsumerState::Stable);
    assert_eq!(w.group.member_count(), 1);
    assert_eq!(w.persists, 1);
    assert_eq!(w.group.subscribed_topics(), vec!["t".to_string()]);
}

#[test]
fn second_member_gets_partitions_only_after_the_first_revokes_them() {
    let mut w = World::new();
    w.create_topic(1, "t", 4);
    let mut a = w.join(join_req("a", &["t"]));
    let mut b = w.join(join_req("b", &["t"]));
    assert_eq!(w.group.group_epoch(), 2);
    // b is at the new epoch but everything is still a's.
    assert_eq!(b.epoch, 2);
    assert!(b.owned.is_empty());
    assert_eq!(w.group.state(), ConsumerState::Reconciling);
    let r = w.poll(&mut b);
    assert_eq!(r.assignment, None);
    assert!(b.owned.is_empty());

    // a is told to shrink to half, at its old epoch, before anything else.
    let r = w.send(hb_req("a", 1, Some(a.owned.clone())));
    assert_eq!(r.error_code(), 0);
    assert_eq!(r.member_epoch, 1);
    let kept = r.assignment.expect("a's assignment shrank");
    assert_eq!(count(&kept), 2);
    let described = w.group.describe(&w.topics);
    assert_eq!(described.members[0].assignment, kept);

    // a has not revoked yet (still reports all four, as it may while revoking): b gets
    // nothing, and a is not told anything new.
    let r = w.send(hb_req("a", 1, Some(a.owned.clone())));
    assert_eq!((r.member_epoch, r.assignment), (1, None));
    let r = w.poll(&mut b);
    assert_eq!(r.assignment, None);
    assert!(b.owned.is_empty());
    // a omits its owned partitions: unknown, so still assumed owned.
    let r = w.send(hb_req("a", 1, None));
    assert_eq!(r.member_epoch, 1);
    assert!(w.poll(&mut b).assignment.is_none());

    // a revokes: it moves to epoch 2; then b gets the other half.
    a.owned = kept.clone();
    let r = w.poll(&mut a);
    assert_eq!(r.member_epoch, 2);
    assert_eq!(r.assignment, None, "a's assignment did not change");
    let r = w.poll(&mut b);
    assert_eq!(r.member_epoch, 2);
    let given = r.assignment.expect("b gets the released partitions");
    assert_eq!(count(&given), 2);
    assert!(partitions(&given).all(|key| !partitions(&kept).any(|k| k == key)));
    assert_eq!(w.group.state(), ConsumerState::Stable);
    assert_exclusive(&[a, b]);
}

#[test]
fn leaving_member_partitions_are_redistributed() {
    let mut w = World::new();
    let t = w.create_topic(1, "t", 6);
    let a = w.join(join_req("a", &["t"]));
    let b = w.join(join_req("b", &["t"]));
    let c = w.join(join_req("c", &["t"]));
    let mut clients = vec![a, b, c];
    w.settle(&mut clients);
    assert!(clients.iter().all(|c| count(&c.owned) == 2));
    let epoch = w.group.group_epoch();

    let r = w.send(hb_req("b", clients[1].epoch, None));
    assert_eq!(r.error_code(), 0);
    let r = w.send(HeartbeatRequest {
        member_epoch: LEAVE_EPOCH,
        ..hb_req("b", 0, None)
    });
    assert_eq!(
        (r.error_code(), r.member_epoch, r.member_id.as_str()),
        (0, LEAVE_EPOCH, "b")
    );
    assert_eq!(w.group.group_epoch(), epoch + 1);
    assert_eq!(w.group.member_count(), 2);
    clients.remove(1);
    w.settle(&mut clients);
    assert!(clients.iter().all(|c| count(&c.owned) == 3));
    let all: BTreeSet<i32> = clients
        .iter()
        .flat_map(|c| c.owned[&t].iter().copied())
        .collect();
    assert_eq!(all, (0..6).collect());
    // b is gone: its heartbeats are refused.
    let r = w.send(hb_req("b", epoch, None));
    assert_eq!(r.error_code(), ResponseError::UnknownMemberId.code());
}

#[test]
fn regex_subscription_picks_up_topics_created_later() {
    let mut w = World::new();
    let eu = w.create_topic(1, "orders-eu", 2);
    w.create_topic(2, "payments", 2);
    w.create_topic(3, "xorders-eu", 2);
    let mut a = w.join(HeartbeatRequest {
        subscribed_topic_names: None,
        subscribed_topic_regex: Some("orders-.*".to_string()),
        ..join_req("a", &[])
    });
    // Whole-name match only: `xorders-eu` is not subscribed.
    assert_eq!(a.owned, parts(eu, &[0, 1]));
    let epoch = w.group.group_epoch();
    w.now += 1_000;
    assert!(w.tick().is_empty(), "nothing changed");

    let us = w.create_topic(4, "orders-us", 3);
    assert_eq!(w.tick(), vec![Effect::Persist]);
    assert_eq!(w.group.group_epoch(), epoch + 1);
    let r = w.poll(&mut a);
    assert_eq!(r.member_epoch, epoch + 1);
    let mut expected = parts(eu, &[0, 1]);
    expected.extend(parts(us, &[0, 1, 2]));
    assert_eq!(a.owned, expected);
    let mut subscribed = w.group.subscribed_topics();
    subscribed.sort();
    assert_eq!(subscribed, ["orders-eu", "orders-us"]);
    let described = w.group.describe(&w.topics);
    assert_eq!(
        described.members[0].subscribed_topic_regex.as_deref(),
        Some("orders-.*")
    );

    // Deleting a matched topic takes it away again.
    w.topics.remove(&eu);
    let r = w.poll(&mut a);
    assert_eq!(r.member_epoch, epoch + 2);
    assert_eq!(a.owned, parts(us, &[0, 1, 2]));
}

#[test]
fn subscription_to_a_missing_topic_is_assigned_once_it_exists() {
    let mut w = World::new();
    let mut a = w.join(join_req("a", &["later"]));
    assert!(a.owned.is_empty());
    assert_eq!(w.group.subscribed_topics(), ["later"]);
    assert_eq!(w.group.state(), ConsumerState::Stable);
    // Noticed on the next heartbeat (without waiting for a tick).
    let later = w.create_topic(7, "later", 2);
    let r = w.poll(&mut a);
    assert_eq!(r.member_epoch, 2);
    assert_eq!(a.owned, parts(later, &[0, 1]));
}

#[test]
fn added_partitions_bump_the_epoch() {
    let mut w = World::new();
    let t = w.create_topic(1, "t", 2);
    let mut clients = vec![w.join(join_req("a", &["t"])), w.join(join_req("b", &["t"]))];
    w.settle(&mut clients);
    assert!(clients.iter().all(|c| count(&c.owned) == 1));
    let epoch = w.group.group_epoch();
    w.topics.get_mut(&t).unwrap().partitions = 4;
    assert_eq!(w.tick(), vec![Effect::Persist]);
    assert_eq!(w.group.group_epoch(), epoch + 1);
    w.settle(&mut clients);
    assert!(clients.iter().all(|c| count(&c.owned) == 2));
    assert!(clients.iter().all(|c| c.epoch == epoch + 1));
    // Unrelated topics do not bump anything.
    w.create_topic(9, "other", 8);
    assert!(w.tick().is_empty());
    assert_eq!(w.group.group_epoch(), epoch + 1);
}

#[test]
fn changing_subscription_revokes_before_assigning() {
    let mut w = World::new();
    let t1 = w.create_topic(1, "t1", 2);
    let t2 = w.create_topic(2, "t2", 2);
    let a = w.join(join_req("a", &["t1"]));
    let r = w.send(HeartbeatRequest {
        subscribed_topic_names: Some(vec!["t2".to_string()]),
        ..hb_req("a", a.epoch, Some(a.owned.clone()))
    });
    assert_eq!(w.group.group_epoch(), 2);
    assert_eq!((r.member_epoch, r.assignment), (1, Some(Assignment::new())));
    let r = w.send(hb_req("a", 1, Some(Assignment::new())));
    assert_eq!(
        (r.member_epoch, r.assignment),
        (2, Some(parts(t2, &[0, 1])))
    );
    assert!(
        !w.group.describe(&w.topics).members[0]
            .target_assignment
            .contains_key(&t1)
    );
}

#[test]
fn deleted_topic_does_not_block_revocation() {
    let mut w = World::new();
    let t1 = w.create_topic(1, "t1", 2);
    let t2 = w.create_topic(2, "t2", 2);
    let mut a = w.join(join_req("a", &["t1", "t2"]));
    assert_eq!(count(&a.owned), 4);
    w.topics.remove(&t2);
    w.tick();
    // The client still lists t2's partitions, but t2 is gone: nothing to wait for.
    let r = w.poll(&mut a);
    assert_eq!(r.member_epoch, 2);
    assert_eq!(a.owned, parts(t1, &[0, 1]));
    assert_eq!(w.group.state(), ConsumerState::Stable);
}

#[test]
fn most_requested_server_assignor_is_used() {
    let mut w = World::new();
    let t = w.create_topic(1, "t", 4);
    w.join(join_req("a", &["t"]));
    assert_eq!(w.group.describe(&w.topics).assignor_name, "uniform");
    let epoch = w.group.group_epoch();
    let r = w.send(HeartbeatRequest {
        server_assignor: Some("range".to_string()),
        ..hb_req("a", epoch, None)
    });
    assert_eq!(r.error_code(), 0);
    assert_eq!(
        w.group.group_epoch(),
        epoch + 1,
        "an assignor change is a subscription change"
    );
    assert_eq!(w.group.describe(&w.topics).assignor_name, "range");
    let mut clients = vec![
        Client {
            id: "a".to_string(),
            epoch: r.member_epoch,
            owned: parts(t, &[0, 1, 2, 3]),
        },
        w.join(join_req("b", &["t"])),
    ];
    w.settle(&mut clients);
    // range, sticky: a keeps the lowest two of what it had.
    assert_eq!(clients[0].owned, parts(t, &[0, 1]));
    assert_eq!(clients[1].owned, parts(t, &[2, 3]));
}

#[test]
fn rejoin_with_epoch_zero_gets_the_assignment_back() {
    let mut w = World::new();
    w.create_topic(1, "t", 4);
    let mut clients = vec![w.join(join_req("a", &["t"])), w.join(join_req("b", &["t"]))];
    w.settle(&mut clients);
    let epoch = w.group.group_epoch();
    // a lost its state (e.g. after being fenced) and rejoins with its id.
    let again = w.join(join_req("a", &["t"]));
    assert_eq!(again.epoch, epoch);
    assert_eq!(again.owned, clients[0].owned);
    assert_eq!(w.group.group_epoch(), epoch);
    assert_eq!(w.group.member_count(), 2);
}

#[test]
fn rejoin_during_revocation_releases_the_partitions() {
    let mut w = World::new();
    w.create_topic(1, "t", 4);
    let a = w.join(join_req("a", &["t"]));
    let mut b = w.join(join_req("b", &["t"]));
    w.send(hb_req("a", a.epoch, Some(a.owned.clone())));
    assert_eq!(w.group.members["a"].state, MemberState::UnrevokedPartitions);
    // a restarts: it owns nothing now, so nothing is pending any more.
    let a = w.join(join_req("a", &["t"]));
    assert_eq!(a.epoch, 2);
    assert_eq!(count(&a.owned), 2);
    let r = w.poll(&mut b);
    assert_eq!(count(r.assignment.as_ref().unwrap()), 2);
    assert_exclusive(&[a, b]);
    assert_eq!(w.group.state(), ConsumerState::Stable);
}

#[test]
fn many_members_churning_never_share_a_partition() {
    let mut w = World::new();
    w.create_topic(1, "t1", 7);
    w.create_topic(2, "t2", 5);
    let mut clients: Vec<Client> = Vec::new();
    for i in 0..6 {
        let names: &[&str] = if i % 2 == 0 { &["t1", "t2"] } else { &["t1"] };
        clients.push(w.join(join_req(&format!("m{i}"), names)));
        // Only some members heartbeat between joins: reconciliation overlaps.
        for c in clients.iter_mut().step_by(2) {
            w.poll(c);
        }
        assert_exclusive(&clients);
    }
    w.settle(&mut clients);
    let total: usize = clients.iter().map(|c| count(&c.owned)).sum();
    assert_eq!(total, 12);
    for leaving in ["m1", "m4"] {
        let pos = clients.iter().position(|c| c.id == leaving).unwrap();
        let c = clients.remove(pos);
        w.send(HeartbeatRequest {
            member_epoch: LEAVE_EPOCH,
            ..hb_req(&c.id, c.epoch, None)
        });
    }
    w.settle(&mut clients);
    let total: usize = clients.iter().map(|c| count(&c.owned)).sum();
    assert_eq!(total, 12);
}
